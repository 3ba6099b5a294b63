/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the doorbell decoder every stage runs on its PULL
 * socket. Whatever decodes must survive encode -> decode -> encode unchanged
 * in a fixed RS_WIRE_DOOR_MSG_MAX buffer (the hot path never allocates).
 * Seeds: tests/fuzz/corpus/wire_door.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/wire_door.h"
#include "tests/fuzz/wire_eq.h"

#define FUZZ_ASSERT(c)                                                                     \
    do {                                                                                   \
        if (!(c)) {                                                                        \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c);                        \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct rs_wire_door a, b;
    static uint8_t mem1[RS_WIRE_DOOR_MSG_MAX], mem2[RS_WIRE_DOOR_MSG_MAX];
    struct rs_wire_error err;
    struct rs_wire_buf buf1, buf2;
    if (rs_wire_door_decode(data, size, &a, &err) != RS_OK) {
        FUZZ_ASSERT(err.code != RS_WIRE_OK && err.msg[0] != '\0' && a.kind == RS_WIRE_DOOR_NONE);
        return 0;
    }
    rs_wire_buf_init_fixed(&buf1, mem1, sizeof(mem1));
    rs_wire_buf_init_fixed(&buf2, mem2, sizeof(mem2));
    FUZZ_ASSERT(rs_wire_door_encode(&a, &buf1) == RS_OK);
    FUZZ_ASSERT(rs_wire_door_decode(buf1.data, buf1.len, &b, &err) == RS_OK);
    FUZZ_ASSERT(weq_door(&a, &b));
    FUZZ_ASSERT(rs_wire_door_encode(&b, &buf2) == RS_OK);
    FUZZ_ASSERT(buf1.len == buf2.len && memcmp(mem1, mem2, buf1.len) == 0);
    return 0;
}

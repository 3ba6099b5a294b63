/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the client-request decoder and validator (tokenizerd's
 * and postprocd's intake). Any input must either decode -- and then survive
 * encode -> decode -> encode unchanged -- or fail with a code, a message and
 * an error reply that itself decodes. Seeds: tests/fuzz/corpus/wire_client.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/wire_client.h"
#include "ipc/wire_server.h"
#include "tests/fuzz/wire_eq.h"

#define FUZZ_ASSERT(c)                                                                     \
    do {                                                                                   \
        if (!(c)) {                                                                        \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c);                        \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

/* The error tokenizerd would send back decodes with the same code. */
static void check_error_reply(const char *id, const struct rs_wire_error *err)
{
    static struct rs_wire_server_msg rep;
    struct rs_wire_error err2;
    struct rs_wire_buf buf;
    FUZZ_ASSERT(err->code != RS_WIRE_OK && err->msg[0] != '\0');
    FUZZ_ASSERT(id[0] == '\0' || rs_wire_id_valid(id, strlen(id)));
    rs_wire_buf_init(&buf, RS_WIRE_SERVER_MSG_MAX);
    FUZZ_ASSERT(rs_wire_error_reply(id, err, &buf) == RS_OK);
    FUZZ_ASSERT(rs_wire_server_decode(buf.data, buf.len, &rep, &err2) == RS_OK);
    FUZZ_ASSERT(rep.type == RS_WIRE_T_ERROR && rep.u.error.code == err->code);
    FUZZ_ASSERT(strcmp(rep.id, id) == 0);
    rs_wire_buf_fini(&buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct rs_wire_client_msg a, b;
    static const struct rs_wire_limits lim = {.n_ctx = 4096, .n_vocab = 32000};
    struct rs_wire_error err;
    struct rs_wire_buf buf1, buf2;
    if (rs_wire_client_decode(data, size, &a, &err) != RS_OK) {
        check_error_reply(a.id, &err);
        return 0;
    }
    if (a.type == RS_WIRE_T_GENERATE && rs_wire_generate_validate(&a.u.gen, &lim, &err) != RS_OK)
        check_error_reply(a.id, &err);
    rs_wire_buf_init(&buf1, RS_WIRE_CLIENT_MSG_MAX);
    rs_wire_buf_init(&buf2, RS_WIRE_CLIENT_MSG_MAX);
    FUZZ_ASSERT(rs_wire_client_encode(&a, &buf1) == RS_OK);
    FUZZ_ASSERT(rs_wire_client_decode(buf1.data, buf1.len, &b, &err) == RS_OK);
    FUZZ_ASSERT(weq_client(&a, &b));
    FUZZ_ASSERT(rs_wire_client_encode(&b, &buf2) == RS_OK);
    FUZZ_ASSERT(buf1.len == buf2.len && memcmp(buf1.data, buf2.data, buf1.len) == 0);
    rs_wire_buf_fini(&buf1);
    rs_wire_buf_fini(&buf2);
    return 0;
}

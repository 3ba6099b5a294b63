/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the daemon-message decoder the client library runs on
 * what tokenizerd and postprocd send. Whatever decodes must survive
 * encode -> decode -> encode unchanged, and the logprob/token views must
 * unpack to exactly the counts the decoder reported. Seeds:
 * tests/fuzz/corpus/wire_server.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/wire_server.h"
#include "tests/fuzz/wire_eq.h"

#define FUZZ_ASSERT(c)                                                                     \
    do {                                                                                   \
        if (!(c)) {                                                                        \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c);                        \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

static void check_views(const struct rs_wire_delta *d)
{
    static uint32_t ids[RS_WIRE_OUT_TOKENS_MAX];
    static struct rs_wire_logprob lps[RS_WIRE_OUT_TOKENS_MAX];
    FUZZ_ASSERT(rs_wire_ids_copy(&d->tokens, ids, RS_WIRE_OUT_TOKENS_MAX) == d->tokens.n);
    if (!d->has_logprobs)
        return;
    FUZZ_ASSERT(rs_wire_lps_copy(&d->logprobs, lps, RS_WIRE_OUT_TOKENS_MAX) == d->logprobs.n);
    for (uint32_t i = 0; i < d->logprobs.n; i++)
        FUZZ_ASSERT(lps[i].token == ids[i] && lps[i].n_top <= RS_WIRE_LOGPROBS_MAX);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct rs_wire_server_msg a, b;
    struct rs_wire_error err;
    struct rs_wire_buf buf1, buf2;
    if (rs_wire_server_decode(data, size, &a, &err) != RS_OK) {
        FUZZ_ASSERT(err.code != RS_WIRE_OK && err.msg[0] != '\0');
        return 0;
    }
    if (a.type == RS_WIRE_T_DELTA)
        check_views(&a.u.delta);
    if (a.type == RS_WIRE_T_FINAL)
        check_views(&a.u.final.out);
    rs_wire_buf_init(&buf1, RS_WIRE_SERVER_MSG_MAX);
    rs_wire_buf_init(&buf2, RS_WIRE_SERVER_MSG_MAX);
    FUZZ_ASSERT(rs_wire_server_encode(&a, &buf1) == RS_OK);
    FUZZ_ASSERT(rs_wire_server_decode(buf1.data, buf1.len, &b, &err) == RS_OK);
    FUZZ_ASSERT(weq_server(&a, &b));
    FUZZ_ASSERT(rs_wire_server_encode(&b, &buf2) == RS_OK);
    FUZZ_ASSERT(buf1.len == buf2.len && memcmp(buf1.data, buf2.data, buf1.len) == 0);
    rs_wire_buf_fini(&buf1);
    rs_wire_buf_fini(&buf2);
    return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the client library's handling of what the daemons send
 * (client/receive.c), past the wire decoder: any sequence of messages to
 * three requests in flight, each tagged as coming from tokenizerd or
 * postprocd. Whatever arrives, each request's callback must see deltas with
 * seq 0, 1, 2, ... and at most one final, nothing after it, and the table
 * must stay consistent. Input: records of [from_post (1 byte)][length
 * (2 bytes LE)][body]. Seeds: tests/fuzz/corpus/client (gen_client_corpus.py).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_impl.h"
#include "common/clock.h"
#include "common/log.h"

#define FUZZ_ASSERT(c)                                                                     \
    do {                                                                                   \
        if (!(c)) {                                                                        \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c);                        \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

struct seen {
    uint64_t deltas;
    int finals;
};

static void on_event(const struct rs_client_event *ev)
{
    struct seen *s = ev->user;
    FUZZ_ASSERT(s->finals == 0);
    if (ev->kind == RS_CLIENT_EV_DELTA) {
        FUZZ_ASSERT(ev->seq == s->deltas);
        FUZZ_ASSERT(ev->n_tokens <= RS_WIRE_OUT_TOKENS_MAX);
        s->deltas++;
    } else {
        FUZZ_ASSERT(ev->kind == RS_CLIENT_EV_FINAL);
        FUZZ_ASSERT(ev->status != RS_CLIENT_OK || ev->seq == s->deltas);
        s->finals++;
    }
}

static rs_client *client(void)
{
    static rs_client *c;
    if (c == NULL) {
        struct rs_client_opts o;
        rs_log_set_level(RS_LOG_ERROR); /* the library logs every odd message it drops */
        rs_client_opts_default(&o);
        o.rundir = "/nonexistent/rs-fuzz-client"; /* sends fail at once: no peer */
        FUZZ_ASSERT(rs_client_create(&o, &c) == RS_OK);
    }
    return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const ids[] = {"a", "b", "c"};
    struct seen seen[3];
    struct rs_wire_generate g;
    rs_client *c = client();
    memset(seen, 0, sizeof(seen));
    rs_wire_generate_init(&g);
    g.has = RS_WIRE_GEN_PROMPT | RS_WIRE_GEN_STREAM;
    g.prompt = (struct rs_wire_str){"", 0};
    g.stream = true;
    for (int i = 0; i < 3; i++) {
        struct rs_client_req_opts o = {.id = ids[i]};
        FUZZ_ASSERT(rs_client_submit(c, &g, &o, on_event, &seen[i], NULL) == RS_OK);
    }
    while (size >= 3) {
        size_t len = (size_t)data[1] | (size_t)data[2] << 8;
        int from_post = data[0] & 1;
        data += 3;
        size -= 3;
        len = len < size ? len : size;
        client_on_message(c, from_post, data, len, rs_clock_ns());
        data += len;
        size -= len;
    }
    /* Whatever is still in flight ends now, so the next input starts from an empty table. */
    while (c->n_live > 0)
        creq_fail(c, &c->reqs[c->live[0]], RS_CLIENT_TIMEOUT, RS_WIRE_INTERNAL, "end", 3);
    for (int i = 0; i < 3; i++)
        FUZZ_ASSERT(seen[i].finals == 1);
    FUZZ_ASSERT(c->n_free == c->cap);
    for (uint32_t i = 0; i < c->index_cap; i++)
        FUZZ_ASSERT(c->index[i] == 0);
    return 0;
}

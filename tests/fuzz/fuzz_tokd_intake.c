/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: tokenizerd's whole intake path in-process. Each input is
 * sent as a client message over an inproc DEALER to a ROUTER that
 * tokd_drain serves, exactly as the daemon's loop does, against a real
 * pipeline segment and the stories260K vocab. Every input must get exactly
 * one reply (ack, error or welcome; a cancel finds nothing, as records are
 * released after each input, so it is answered not_found), which decodes; an ack must name a committed WAITING
 * record whose prompt has the acked length, and the table and arena
 * invariants must hold after the records are released again.
 * Conversations are rendered with refdata's Qwen2.5 chat template (as
 * tokenizerd --chat-template loads it), so `messages` inputs go through the
 * renderer and its bounds too.
 * Seeds: tests/fuzz/corpus/tokd_intake (client messages from wire_client).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "ipc/pipeline_req.h"
#include "tests/pipeline_harness.h"
#include "tokenizerd/tokd.h"

#define FUZZ_ASSERT(c)                                                                     \
    do {                                                                                   \
        if (!(c)) {                                                                        \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c);                        \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

static struct tokd t;
static struct rs_pipe_doors no_doors; /* unbound: every doorbell is dropped, as a hint may be */
static rs_zsock *router, *dealer;
static void *zctx;
static int ready; /* 1 set up, -1 no model: every input is a no-op */

static void cleanup(void)
{
    if (t.p != NULL)
        rs_pipe_unlink(t.p->cfg.instance);
}

static int setup(void)
{
    struct rs_pipe_config cfg;
    char err[256];
    const char *root = getenv("RS_REFDATA");
    rs_pipe_config_default(&cfg);
    snprintf(cfg.instance, sizeof(cfg.instance), "fuzz-tokd-%d", (int)getpid());
    snprintf(cfg.model_path, sizeof(cfg.model_path), "%s/stories260K.gguf",
             root != NULL ? root : RS_SOURCE_DIR "/../shared/refdata");
    cfg.n_ctx = 256, cfg.max_requests = 8, cfg.n_kv_blocks = 64;
    if (access(cfg.model_path, R_OK) != 0)
        return -1;
    rs_log_set_level(RS_LOG_ERROR);
    FUZZ_ASSERT(rs_harness_config_resolve(&cfg, err, sizeof(err)) == RS_OK);
    FUZZ_ASSERT(rs_vocab_load_file(cfg.model_path, &t.vocab, err, sizeof(err)) == RS_OK);
    FUZZ_ASSERT(rs_tokenizer_create(t.vocab, &t.tok) == RS_OK);
    char tmpl[600];
    rs_gguf *g = NULL;
    snprintf(tmpl, sizeof(tmpl), "%s/chat-templates/templates/Qwen-Qwen2.5-7B-Instruct.jinja",
             root != NULL ? root : RS_SOURCE_DIR "/../shared/refdata");
    FUZZ_ASSERT(rs_gguf_open(cfg.model_path, &g, err, sizeof(err)) == RS_OK);
    FUZZ_ASSERT(tokd_chat_load(&t.chat, g, t.vocab, access(tmpl, R_OK) == 0 ? tmpl : NULL, err,
                               sizeof(err)) == RS_OK);
    rs_gguf_close(&g);
    FUZZ_ASSERT(rs_pipe_open(&cfg, RS_PIPE_STAGE_TOKENIZERD, &t.p, err, sizeof(err)) == RS_OK);
    t.doors = &no_doors;
    atexit(cleanup);
    FUZZ_ASSERT(dedup_create(cfg.max_requests, &t.index) == RS_OK);
    t.ids = malloc(sizeof(int32_t) * cfg.n_ctx);
    rs_wire_buf_init(&t.out, RS_WIRE_SERVER_MSG_MAX);
    zctx = zmq_ctx_new();
    struct rs_zsock_cfg dc;
    rs_zsock_cfg_default(RS_ZSOCK_DEALER, &dc);
    dc.routing_id = "fuzzer";
    dc.routing_id_len = 6;
    FUZZ_ASSERT(rs_zsock_create(zctx, RS_ZSOCK_ROUTER, "inproc://tokd-fuzz", NULL, &router) ==
                RS_OK);
    FUZZ_ASSERT(rs_zsock_create(zctx, RS_ZSOCK_DEALER, "inproc://tokd-fuzz", &dc, &dealer) ==
                RS_OK);
    return 1;
}

/* Releases every published record (the other stages' part) and checks the invariants. */
static void release_all(void)
{
    uint32_t cursor = 0, state;
    struct rs_table_ref ref;
    while (rs_table_next(t.p->requests, &cursor, ~3ull, &ref, &state) == RS_OK) {
        if (state != RS_PIPE_REQ_FINISHED)
            FUZZ_ASSERT(rs_table_transition(t.p->requests, ref, state, RS_PIPE_REQ_FINISHED) ==
                        RS_OK);
        FUZZ_ASSERT(rs_arena_free_record(t.p->tokens, t.p->requests, ref,
                                         RS_PIPE_REQ_FINISHED) == RS_OK);
    }
    FUZZ_ASSERT(rs_table_check(t.p->requests, NULL) == RS_OK);
    FUZZ_ASSERT(rs_arena_check(t.p->tokens, NULL) == RS_OK);
}

/* An ack must name a WAITING record holding the acked prompt. */
static void check_ack(const struct rs_wire_server_msg *m)
{
    uint32_t cursor = 0, state, len;
    struct rs_table_ref ref;
    int found = 0;
    while (rs_table_next(t.p->requests, &cursor, 1ull << RS_PIPE_REQ_WAITING, &ref, &state) ==
           RS_OK) {
        const struct rs_pipe_req *r = rs_pipe_req_at(t.p, ref.index);
        if (r->handle != m->u.ack.handle)
            continue;
        found = 1;
        FUZZ_ASSERT(strcmp(r->id, m->id) == 0 && r->n_prompt == m->u.ack.prompt_tokens);
        FUZZ_ASSERT(rs_arena_len(t.p->tokens, ref, &len) == RS_OK && len == r->n_prompt);
        FUZZ_ASSERT(r->n_prompt >= 1 && r->n_prompt < t.p->cfg.n_ctx &&
                    r->max_tokens >= 1 && r->n_prompt + r->max_tokens <= t.p->cfg.n_ctx);
    }
    FUZZ_ASSERT(found);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ready == 0)
        ready = setup();
    if (ready < 0 || size > RS_WIRE_CLIENT_MSG_MAX)
        return 0;
    FUZZ_ASSERT(rs_zsock_send(dealer, data, size) == RS_OK);
    FUZZ_ASSERT(tokd_drain(&t, router, 0, 4) == RS_OK);
    zmq_msg_t body;
    int replies = 0;
    for (;;) {
        zmq_msg_init(&body);
        if (rs_zsock_recv(dealer, NULL, &body, replies == 0 ? 50 : 0) != RS_OK)
            break;
        static struct rs_wire_server_msg m;
        struct rs_wire_error err;
        FUZZ_ASSERT(rs_wire_server_decode(zmq_msg_data(&body), zmq_msg_size(&body), &m, &err) ==
                    RS_OK);
        FUZZ_ASSERT(m.type == RS_WIRE_T_ACK || m.type == RS_WIRE_T_ERROR ||
                    m.type == RS_WIRE_T_WELCOME);
        if (m.type == RS_WIRE_T_ACK)
            check_ack(&m);
        zmq_msg_close(&body);
        replies++;
    }
    zmq_msg_close(&body);
    FUZZ_ASSERT(replies == 1); /* records are released after each input: a cancel finds none */
    release_all();
    return 0;
}

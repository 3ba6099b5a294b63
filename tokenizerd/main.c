/* SPDX-License-Identifier: MIT */
/*
 * tokenizerd: client intake. Its life (options, the fence, exits) is the
 * stage skeleton's (ipc/stage.h), which also binds the client ROUTER(s)
 * from the client access options; here are its hooks: the vocab and
 * tokenizer before the fence, the (client, request id) index rebuilt from
 * the request table once the instance is open, and a pass that sleeps in zmq_poll (one tick at
 * most), serves generate / cancel / hello and reclaims what dead fenced
 * incarnations held. Leaves out everything after the commit: schedulerd,
 * launcherd and postprocd take it from shared memory.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/stage.h"
#include "tokenizerd/tokd.h"

#define RECLAIM_MS 2000     /* sweep for what dead fenced incarnations held */
#define RECLAIM_FULL_MS 250 /* at most this often while the pool is full */
#define MSGS_PER_PASS 256

struct tokenizerd {
    struct tokd t;
    const char *chat_template; /* --chat-template FILE, or NULL for the model's own */
    struct rs_pipe_front_opts front;
    zmq_pollitem_t items[2];
    rs_zsock *socks[2];
    int n_socks;
};

static struct tokenizerd the_daemon; /* static: a fenced exit leaves it as it is (stage.h) */

static rs_err tokenizerd_load(void *self, struct rs_stage *st, char *err, size_t err_len)
{
    struct tokenizerd *d = self;
    struct tokd *t = &d->t;
    rs_gguf *g = NULL;
    rs_err rc = rs_gguf_open(st->args.cfg.model_path, &g, err, err_len);
    if (rc == RS_OK)
        rc = rs_vocab_load(g, &t->vocab, err, err_len);
    if (rc == RS_OK && (rc = rs_tokenizer_create(t->vocab, &t->tok)) != RS_OK)
        snprintf(err, err_len, "cannot create the tokenizer: %s", rs_strerror(rc));
    if (rc == RS_OK)
        rc = tokd_chat_load(&t->chat, g, t->vocab, d->chat_template, err, err_len);
    rs_gguf_close(&g);
    return rc;
}

static rs_err tokenizerd_attach(void *self, struct rs_stage *st, char *err, size_t err_len)
{
    struct tokenizerd *d = self;
    struct tokd *t = &d->t;
    t->p = st->p;
    t->doors = &st->doors;
    rs_err rc = dedup_create(st->args.cfg.max_requests, &t->index);
    if (rc == RS_OK)
        rc = rs_pipe_owner_map_create(4096, &t->owners);
    if (rc == RS_OK && (t->ids = malloc(sizeof(int32_t) * st->args.cfg.n_ctx)) == NULL)
        rc = RS_ENOMEM;
    if (rc != RS_OK) {
        snprintf(err, err_len, "out of memory");
        return rc;
    }
    rs_wire_buf_init(&t->out, RS_WIRE_SERVER_MSG_MAX);
    d->n_socks = rs_pipe_front_poll_items(&t->front, d->items, d->socks);
    tokd_owner_limits(t);
    uint32_t live = dedup_rebuild(t->index, t->p->requests);
    rs_log_info("model %s, %u tokens of context, %u vocab, %u requests in flight found",
                st->args.cfg.model_path, st->args.cfg.n_ctx, st->args.cfg.n_vocab, live);
    return RS_OK;
}

static void tokenizerd_ready(void *self, struct rs_stage *st)
{
    struct tokenizerd *d = self;
    (void)st;
    rs_log_info("serving on %s", rs_zsock_endpoint(d->t.front.ipc));
}

/*
 * Reclaims request records and token chunks that a fenced incarnation held
 * when it died. Start-up recovery (rs_pipe_open) covers a predecessor that
 * was dead; one that was only stopped keeps its claims until it dies, which
 * may be long after this incarnation started, so tokenizerd (the only
 * claimer) sweeps again every few seconds and at once when a claim or an
 * append found the pool full. Both passes are idempotent and cheap.
 */
static void reclaim(struct tokd *t)
{
    uint64_t now = rs_clock_ns();
    uint64_t every = (t->reclaim_wanted ? RECLAIM_FULL_MS : RECLAIM_MS) * 1000000ull;
    if (now - t->reclaim_ns < every)
        return;
    t->reclaim_ns = now;
    t->reclaim_wanted = 0;
    if (rs_table_recover(t->p->requests) == RS_ESTALE ||
        rs_arena_recover(t->p->tokens) == RS_ESTALE ||
        rs_arena_recover(t->p->logprobs) == RS_ESTALE ||
        rs_arena_recover(t->p->constraints) == RS_ESTALE)
        t->fenced = 1;
}

static rs_err tokenizerd_pass(void *self, struct rs_stage *st)
{
    struct tokenizerd *d = self;
    struct tokd *t = &d->t;
    (void)st;
    reclaim(t);
    if (!t->fenced && zmq_poll(d->items, d->n_socks, RS_STAGE_TICK_MS) > 0)
        for (int i = 0; i < d->n_socks; i++)
            if ((d->items[i].revents & ZMQ_POLLIN) &&
                tokd_drain(t, d->socks[i], i == 1, MSGS_PER_PASS) == RS_ESTALE)
                t->fenced = 1;
    return t->fenced ? RS_ESTALE : RS_OK;
}

static void tokenizerd_close(void *self)
{
    struct tokd *t = &((struct tokenizerd *)self)->t;
    rs_wire_buf_fini(&t->out);
    free(t->ids);
    dedup_destroy(&t->index);
    tokd_chat_fini(&t->chat);
    rs_pipe_owner_map_destroy(&t->owners);
    tokd_constraint_fini(t);
    rs_tokenizer_destroy(&t->tok);
    rs_vocab_destroy(&t->vocab);
}

static const struct rs_opt own_opts[] = {
    {.name = "chat-template", .kind = RS_OPT_ARG,
     .off = offsetof(struct tokenizerd, chat_template), .arg = "FILE",
     .help = "render conversations with this Jinja template instead of\n"
             "the model's tokenizer.chat_template"},
    {.name = "owner-max-requests", .kind = RS_OPT_U32,
     .off = offsetof(struct tokenizerd, t.opts.owner_max_requests), .min = 0, .max = 1u << 24,
     .arg = "N", .help = "requests one client may hold at once, running or finished and not\n"
                         "yet released (default: --owner-share of --max-requests)"},
    {.name = "owner-share", .kind = RS_OPT_U32,
     .off = offsetof(struct tokenizerd, t.opts.owner_share_pct), .min = 1, .max = 100,
     .arg = "PCT", .help = "percent of the request table and of the logprob space one\n"
                           "client may hold (default 25)"},
    {0},
};

static const struct rs_opt_group groups[] = {
    {"tokenizerd options", own_opts, &the_daemon, NULL},
};

static const struct rs_stage_def def = {
    .stage = RS_PIPE_STAGE_TOKENIZERD,
    .usage = "usage: tokenizerd --model PATH [options]\n"
             "Accepts generate/cancel requests from clients (ipc/PROTOCOL.md), tokenizes them\n"
             "with the model's vocab and commits them to shared memory for schedulerd.\n",
    .place_role = RS_PLACE_OTHER,
    .groups = groups,
    .n_groups = sizeof(groups) / sizeof(groups[0]),
    .front_opts = &the_daemon.front,
    .front = &the_daemon.t.front,
    .load = tokenizerd_load,
    .attach = tokenizerd_attach,
    .ready = tokenizerd_ready,
    .pass = tokenizerd_pass,
    .close = tokenizerd_close,
};

int main(int argc, char **argv)
{
    return rs_stage_main(&def, &the_daemon, argc, argv);
}

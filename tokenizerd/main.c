/* SPDX-License-Identifier: MIT */
/*
 * tokenizerd: client intake. Parses the shared pipeline options and the
 * client access options, opens the pipeline as the tokenizerd role (a new
 * incarnation fences the previous one), rebuilds its (client, request id)
 * index from the request table, binds the client ROUTER(s) and serves
 * generate / cancel / hello until SIGTERM. The loop sleeps in zmq_poll (a
 * 10 ms tick at most) and never spins. Leaves out everything after the
 * commit: schedulerd, launcherd and postprocd take it from shared memory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/placement.h"
#include "ipc/pipeline.h"
#include "ipc/rundir.h"
#include "tokenizerd/tokd.h"

#define TICK_MS 10
#define RECLAIM_MS 2000     /* sweep for what dead fenced incarnations held */
#define RECLAIM_FULL_MS 250 /* at most this often while the pool is full */
#define MSGS_PER_PASS 256

struct args {
    struct rs_pipe_config cfg;
    struct rs_pipe_front_opts front;
    char rundir[RS_PIPE_FRONT_PATH_MAX];
    struct rs_place_opts place; /* --cpus / --numa */
};

static void usage(FILE *f)
{
    fprintf(f, "usage: tokenizerd --model PATH [options]\n"
               "Accepts generate/cancel requests from clients (ipc/PROTOCOL.md), tokenizes them\n"
               "with the model's vocab and commits them to shared memory for schedulerd.\n\n"
               "%s\n%s%s  --help                   this text\n",
            rs_pipe_options_help(), rs_pipe_front_options_help(), rs_place_options_help());
}

/* 0 on success, 2 after printing the problem (or 1 for --help, which exits 0). */
static int parse_args(int argc, char **argv, struct args *a)
{
    char err[512];
    rs_pipe_config_default(&a->cfg);
    rs_pipe_front_opts_init(&a->front);
    rs_place_opts_default(&a->place);
    a->rundir[0] = '\0';
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 1;
        }
        int r = rs_pipe_parse_option(&a->cfg, a->rundir, sizeof(a->rundir), argc, argv, &i, err,
                                     sizeof(err));
        if (r == 0)
            r = rs_pipe_front_parse_option(&a->front, argc, argv, &i, err, sizeof(err));
        if (r == 0)
            r = rs_place_parse_option(&a->place, argc, argv, &i, err, sizeof(err));
        if (r == 0)
            snprintf(err, sizeof(err), "unknown option '%s' (see --help)", argv[i]);
        if (r <= 0) {
            fprintf(stderr, "tokenizerd: %s\n", err);
            return 2;
        }
    }
    if (rs_pipe_front_check(&a->front, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "tokenizerd: %s\n", err);
        return 2;
    }
    return 0;
}

/* Everything the loop needs; 0 on success, 1 after logging a fatal error. */
static int open_all(struct tokd *t, struct args *a, void *zctx)
{
    char err[512];
    struct rs_gguf_facts facts;
    rs_err rc = RS_EINVAL;
    if (a->cfg.model_path[0] == '\0')
        snprintf(err, sizeof(err), "no model: pass --model PATH");
    else if ((rc = rs_gguf_facts_read(a->cfg.model_path, &facts, err, sizeof(err))) == RS_OK)
        rc = rs_pipe_config_resolve(&a->cfg, &facts, err, sizeof(err));
    if (rc == RS_OK)
        rc = rs_vocab_load_file(a->cfg.model_path, &t->vocab, err, sizeof(err));
    if (rc == RS_OK && (rc = rs_tokenizer_create(t->vocab, &t->tok)) != RS_OK)
        snprintf(err, sizeof(err), "cannot create the tokenizer: %s", rs_strerror(rc));
    if (rc == RS_OK)
        rc = rs_pipe_open(&a->cfg, RS_PIPE_STAGE_TOKENIZERD, &t->p, err, sizeof(err));
    if (rc == RS_OK && (rc = dedup_create(a->cfg.max_requests, &t->index)) == RS_OK &&
        (t->ids = malloc(sizeof(int32_t) * a->cfg.n_ctx)) == NULL)
        rc = RS_ENOMEM;
    if (rc == RS_ENOMEM)
        snprintf(err, sizeof(err), "out of memory");
    if (rc != RS_OK) {
        rs_log_error("%s", err);
        return 1;
    }
    if (a->rundir[0] == '\0')
        rs_rundir_default(a->cfg.instance, a->rundir, sizeof(a->rundir));
    rc = rs_rundir_prepare(a->rundir, a->front.group[0] ? a->front.group : NULL);
    if (rc == RS_OK && (rc = rs_pipe_doors_open(&t->doors, zctx, a->rundir,
                                                RS_PIPE_STAGE_TOKENIZERD)) != RS_OK)
        snprintf(err, sizeof(err), "doorbells: %s", rs_strerror(rc));
    else if (rc != RS_OK)
        snprintf(err, sizeof(err), "runtime directory %s: %s (see above)", a->rundir,
                 rs_strerror(rc));
    if (rc == RS_OK)
        rc = rs_pipe_front_open(&t->front, zctx, a->rundir, RS_PIPE_TOKENIZERD, &a->front, err,
                                sizeof(err));
    if (rc != RS_OK) {
        rs_log_error("%s", err);
        return 1;
    }
    rs_wire_buf_init(&t->out, RS_WIRE_SERVER_MSG_MAX);
    return 0;
}

static void close_all(struct tokd *t)
{
    rs_pipe_front_close(&t->front);
    rs_pipe_doors_close(&t->doors);
    rs_wire_buf_fini(&t->out);
    free(t->ids);
    dedup_destroy(&t->index);
    rs_pipe_close(&t->p);
    rs_tokenizer_destroy(&t->tok);
    rs_vocab_destroy(&t->vocab);
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
        rs_arena_recover(t->p->logprobs) == RS_ESTALE)
        t->fenced = 1;
}

/* The serving loop; returns the exit code. */
static int serve(struct tokd *t)
{
    zmq_pollitem_t items[2];
    rs_zsock *socks[2] = {t->front.ipc, t->front.tcp};
    int n = socks[1] != NULL ? 2 : 1;
    for (int i = 0; i < n; i++)
        items[i] = (zmq_pollitem_t){.socket = rs_zsock_handle(socks[i]), .events = ZMQ_POLLIN};
    while (!rs_daemon_should_stop()) {
        rs_role_heartbeat(t->p->role);
        rs_daemon_watchdog();
        if (!rs_role_current(t->p->role))
            break;
        reclaim(t);
        if (t->fenced)
            break;
        if (zmq_poll(items, n, TICK_MS) <= 0)
            continue;
        for (int i = 0; i < n; i++)
            if ((items[i].revents & ZMQ_POLLIN) &&
                tokd_drain(t, socks[i], i == 1, MSGS_PER_PASS) == RS_ESTALE)
                t->fenced = 1;
        if (t->fenced)
            break;
    }
    if (!rs_daemon_should_stop()) {
        rs_log_error("fenced: a newer tokenizerd incarnation took over; exiting without "
                     "touching shared memory");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct args a;
    if (rs_daemon_init(RS_PIPE_TOKENIZERD) != RS_OK)
        return 1;
    int rc = parse_args(argc, argv, &a);
    if (rc != 0)
        return rc == 1 ? 0 : rc;
    if ((rc = rs_place_daemon("tokenizerd", RS_PLACE_OTHER, &a.place)) != 0)
        return rc;
    void *zctx = zmq_ctx_new();
    struct tokd t;
    memset(&t, 0, sizeof(t));
    if (zctx == NULL || open_all(&t, &a, zctx) != 0) {
        close_all(&t);
        if (zctx != NULL)
            zmq_ctx_term(zctx);
        return 1;
    }
    uint32_t live = dedup_rebuild(t.index, t.p->requests);
    if (rs_role_ready(t.p->role) != RS_OK) {
        rs_log_error("fenced during start-up");
        return 1;
    }
    rs_daemon_notify_ready();
    rs_log_info("serving on %s: model %s, %u tokens of context, %u vocab, %u requests in "
                "flight found", rs_zsock_endpoint(t.front.ipc), a.cfg.model_path, a.cfg.n_ctx,
                a.cfg.n_vocab, live);
    rc = serve(&t);
    if (rc != 0)
        return rc; /* fenced: leave shared memory to the new incarnation */
    rs_daemon_notify_stopping();
    rs_log_info("stopping");
    close_all(&t);
    zmq_ctx_term(zctx);
    return 0;
}

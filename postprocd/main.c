/* SPDX-License-Identifier: MIT */
/*
 * postprocd: client output. Opens the pipeline as the postprocd role (a new
 * incarnation fences the previous one), binds its doorbell inbox and client
 * ROUTER(s), then loops: sleep in zmq_poll (10 ms tick at most), answer
 * client messages, drain doorbells (hints only), and scan shared memory for
 * new tokens and finished requests. Resuming after a crash needs nothing
 * special: the per-request cursors in the records are where it continues.
 * Leaves out tokenizing and scheduling.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/daemon.h"
#include "common/detok.h"
#include "common/log.h"
#include "common/placement.h"
#include "common/stopstr.h"
#include "ipc/pipeline.h"
#include "ipc/rundir.h"
#include "postprocd/postd.h"

#define TICK_MS 10
#define MSGS_PER_PASS 256
#define DOORS_PER_PASS 1024

struct args {
    struct rs_pipe_config cfg;
    struct rs_pipe_front_opts front;
    char rundir[RS_PIPE_FRONT_PATH_MAX];
    uint64_t linger_ms, client_timeout_ms;
    struct rs_place_opts place; /* --cpus / --numa */
};

static void usage(FILE *f)
{
    fprintf(f, "usage: postprocd --model PATH [options]\n"
               "Turns generated tokens into text deltas and streams them to clients\n"
               "(ipc/PROTOCOL.md); finishes requests on stop strings.\n\n"
               "%s\n%s%s"
               "postprocd options:\n"
               "  --linger-ms N            keep a finished request N ms for resume, unless its\n"
               "                           client sends release first (default 30000)\n"
               "  --client-timeout-ms N    abort a request whose client is unreachable this long\n"
               "                           (default 30000)\n"
               "  --help                   this text\n",
            rs_pipe_options_help(), rs_pipe_front_options_help(), rs_place_options_help());
}

static int parse_ms(const char *opt, const char *val, uint64_t *out, char *err, size_t len)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(val, &end, 10);
    if (errno != 0 || end == val || *end != '\0' || val[0] == '-' || v > 86400000ull) {
        snprintf(err, len, "option %s: '%s' is not a number of milliseconds in 0..86400000", opt,
                 val);
        return -1;
    }
    *out = v;
    return 1;
}

static int own_option(struct args *a, int argc, char **argv, int *i, char *err, size_t len)
{
    uint64_t *dst = strcmp(argv[*i], "--linger-ms") == 0         ? &a->linger_ms
                    : strcmp(argv[*i], "--client-timeout-ms") == 0 ? &a->client_timeout_ms
                                                                   : NULL;
    if (dst == NULL)
        return 0;
    if (*i + 1 >= argc) {
        snprintf(err, len, "option %s needs a value", argv[*i]);
        return -1;
    }
    const char *opt = argv[*i];
    return parse_ms(opt, argv[++*i], dst, err, len);
}

/* 0 on success, 2 after printing the problem, 1 for --help (exit 0). */
static int parse_args(int argc, char **argv, struct args *a)
{
    char err[512];
    rs_pipe_config_default(&a->cfg);
    rs_pipe_front_opts_init(&a->front);
    a->rundir[0] = '\0';
    a->linger_ms = 30000;
    a->client_timeout_ms = 30000;
    rs_place_opts_default(&a->place);
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
            r = own_option(a, argc, argv, &i, err, sizeof(err));
        if (r == 0)
            r = rs_place_parse_option(&a->place, argc, argv, &i, err, sizeof(err));
        if (r == 0)
            snprintf(err, sizeof(err), "unknown option '%s' (see --help)", argv[i]);
        if (r <= 0) {
            fprintf(stderr, "postprocd: %s\n", err);
            return 2;
        }
    }
    if (rs_pipe_front_check(&a->front, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "postprocd: %s\n", err);
        return 2;
    }
    return 0;
}

static rs_err alloc_scratch(struct postd *d)
{
    uint32_t n = d->p->cfg.max_requests;
    d->detok_max = rs_detok_max_out(d->vocab);
    d->slots = calloc(n, sizeof(*d->slots));
    d->step = malloc(d->detok_max);
    d->released = malloc(RS_STOPSTR_MAX_LEN + d->detok_max);
    d->text = malloc(RS_WIRE_TEXT_MAX);
    d->msg_tokens = malloc(sizeof(uint32_t) * RS_WIRE_OUT_TOKENS_MAX);
    d->lps = malloc(sizeof(struct rs_wire_logprob) * RS_WIRE_OUT_TOKENS_MAX);
    d->toks = malloc(sizeof(int32_t) * 256);
    rs_wire_buf_init(&d->out, RS_WIRE_SERVER_MSG_MAX);
    return d->slots && d->step && d->released && d->text && d->msg_tokens && d->lps && d->toks
               ? RS_OK
               : RS_ENOMEM;
}

/* Everything the loop needs; 0 on success, 1 after logging a fatal error. */
static int open_all(struct postd *d, struct args *a, void *zctx)
{
    char err[512];
    struct rs_gguf_facts facts;
    rs_err rc = RS_EINVAL;
    if (a->cfg.model_path[0] == '\0')
        snprintf(err, sizeof(err), "no model: pass --model PATH");
    else if ((rc = rs_gguf_facts_read(a->cfg.model_path, &facts, err, sizeof(err))) == RS_OK)
        rc = rs_pipe_config_resolve(&a->cfg, &facts, err, sizeof(err));
    if (rc == RS_OK)
        rc = rs_vocab_load_file(a->cfg.model_path, &d->vocab, err, sizeof(err));
    if (rc == RS_OK)
        rc = rs_pipe_open(&a->cfg, RS_PIPE_STAGE_POSTPROCD, &d->p, err, sizeof(err));
    if (rc == RS_OK && (rc = alloc_scratch(d)) != RS_OK)
        snprintf(err, sizeof(err), "out of memory");
    if (rc != RS_OK) {
        rs_log_error("%s", err);
        return 1;
    }
    if (a->rundir[0] == '\0')
        rs_rundir_default(a->cfg.instance, a->rundir, sizeof(a->rundir));
    rc = rs_rundir_prepare(a->rundir, a->front.group[0] ? a->front.group : NULL);
    if (rc != RS_OK)
        snprintf(err, sizeof(err), "runtime directory %s: %s (see above)", a->rundir,
                 rs_strerror(rc));
    else if ((rc = rs_pipe_doors_open(&d->doors, zctx, a->rundir, RS_PIPE_STAGE_POSTPROCD)) !=
             RS_OK)
        snprintf(err, sizeof(err), "doorbells: %s", rs_strerror(rc));
    if (rc == RS_OK)
        rc = rs_pipe_front_open(&d->front, zctx, a->rundir, RS_PIPE_POSTPROCD, &a->front, err,
                                sizeof(err));
    if (rc != RS_OK) {
        rs_log_error("%s", err);
        return 1;
    }
    d->linger_ns = a->linger_ms * 1000000ull;
    d->client_timeout_ns = a->client_timeout_ms * 1000000ull;
    return 0;
}

static void close_all(struct postd *d)
{
    rs_pipe_front_close(&d->front);
    rs_pipe_doors_close(&d->doors);
    rs_wire_buf_fini(&d->out);
    free(d->slots);
    free(d->step);
    free(d->released);
    free(d->text);
    free(d->msg_tokens);
    free(d->lps);
    free(d->toks);
    rs_pipe_close(&d->p);
    rs_vocab_destroy(&d->vocab);
}

/* Doorbells only wake the loop: the scan that follows finds the work itself. */
static void drain_doors(struct postd *d)
{
    static struct rs_wire_door door; /* ~20 KiB: not on the stack */
    for (int i = 0; i < DOORS_PER_PASS && rs_pipe_door_recv(&d->doors, &door, 0) == RS_OK; i++) {
    }
}

/* The serving loop; returns the exit code. */
static int serve(struct postd *d)
{
    zmq_pollitem_t items[3];
    rs_zsock *socks[2] = {d->front.ipc, d->front.tcp};
    int n_client = socks[1] != NULL ? 2 : 1;
    for (int i = 0; i < n_client; i++)
        items[i] = (zmq_pollitem_t){.socket = rs_zsock_handle(socks[i]), .events = ZMQ_POLLIN};
    items[n_client] = (zmq_pollitem_t){.socket = rs_zsock_handle(d->doors.inbox),
                                       .events = ZMQ_POLLIN};
    while (!rs_daemon_should_stop() && !d->fenced) {
        rs_role_heartbeat(d->p->role);
        rs_daemon_watchdog();
        if (!rs_role_current(d->p->role))
            break;
        if (zmq_poll(items, n_client + 1, TICK_MS) > 0) {
            for (int i = 0; i < n_client; i++)
                if (items[i].revents & ZMQ_POLLIN)
                    postd_drain_clients(d, socks[i], i == 1, MSGS_PER_PASS);
            if (items[n_client].revents & ZMQ_POLLIN)
                drain_doors(d);
        }
        postd_scan(d);
    }
    if (rs_daemon_should_stop())
        return 0;
    rs_log_error("fenced: a newer postprocd incarnation took over; exiting without touching "
                 "shared memory");
    return 1;
}

int main(int argc, char **argv)
{
    struct args a;
    if (rs_daemon_init(RS_PIPE_POSTPROCD) != RS_OK)
        return 1;
    int rc = parse_args(argc, argv, &a);
    if (rc != 0)
        return rc == 1 ? 0 : rc;
    if ((rc = rs_place_daemon("postprocd", RS_PLACE_OTHER, &a.place)) != 0)
        return rc;
    void *zctx = zmq_ctx_new();
    struct postd d;
    memset(&d, 0, sizeof(d));
    if (zctx == NULL || open_all(&d, &a, zctx) != 0) {
        close_all(&d);
        if (zctx != NULL)
            zmq_ctx_term(zctx);
        return 1;
    }
    if (rs_role_ready(d.p->role) != RS_OK) {
        rs_log_error("fenced during start-up");
        return 1;
    }
    rs_daemon_notify_ready();
    rs_log_info("serving on %s: model %s, linger %llu ms, client timeout %llu ms",
                rs_zsock_endpoint(d.front.ipc), a.cfg.model_path,
                (unsigned long long)a.linger_ms, (unsigned long long)a.client_timeout_ms);
    rc = serve(&d);
    if (rc != 0)
        return rc; /* fenced: leave shared memory to the new incarnation */
    rs_daemon_notify_stopping();
    rs_log_info("stopping");
    close_all(&d);
    zmq_ctx_term(zctx);
    return 0;
}

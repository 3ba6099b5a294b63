/* SPDX-License-Identifier: MIT */
/*
 * postprocd: client output. Its life (options, the fence, exits) is the
 * stage skeleton's (ipc/stage.h), which also binds the client ROUTER(s)
 * from the client access options; here are its hooks: its own options, the
 * vocab before the fence, scratch once the instance is open, and a pass that sleeps in zmq_poll
 * (one tick at most), answers client messages, drains doorbells (hints
 * only) and scans shared memory for new tokens and finished requests.
 * Resuming after a crash needs nothing special: the per-request cursors in
 * the records are where it continues. Leaves out tokenizing and scheduling.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/detok.h"
#include "common/log.h"
#include "common/stopstr.h"
#include "ipc/stage.h"
#include "postprocd/postd.h"

#define MSGS_PER_PASS 256
#define DOORS_PER_PASS 1024

struct postprocd {
    struct postd d;
    struct rs_pipe_front_opts front;
    uint64_t linger_ms, client_timeout_ms;
    zmq_pollitem_t items[3];
    rs_zsock *socks[2];
    int n_client;
    struct rs_wire_door door; /* ~20 KiB: not on the stack */
};

static struct postprocd the_daemon = {.linger_ms = 30000, .client_timeout_ms = 30000};

static rs_err postprocd_load(void *self, struct rs_stage *st, char *err, size_t err_len)
{
    struct postd *d = &((struct postprocd *)self)->d;
    return rs_vocab_load_file(st->args.cfg.model_path, &d->vocab, err, err_len);
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
    if (rs_pipe_owner_map_create(4096, &d->owners) != RS_OK)
        return RS_ENOMEM;
    return d->slots && d->step && d->released && d->text && d->msg_tokens && d->lps && d->toks
               ? RS_OK
               : RS_ENOMEM;
}

static rs_err postprocd_attach(void *self, struct rs_stage *st, char *err, size_t err_len)
{
    struct postprocd *pd = self;
    struct postd *d = &pd->d;
    d->p = st->p;
    d->doors = &st->doors;
    d->linger_ns = pd->linger_ms * 1000000ull;
    d->client_timeout_ns = pd->client_timeout_ms * 1000000ull;
    rs_err rc = alloc_scratch(d);
    if (rc != RS_OK) {
        snprintf(err, err_len, "out of memory");
        return rc;
    }
    pd->n_client = rs_pipe_front_poll_items(&d->front, pd->items, pd->socks);
    pd->items[pd->n_client] = (zmq_pollitem_t){.socket = rs_zsock_handle(st->doors.inbox),
                                               .events = ZMQ_POLLIN};
    return RS_OK;
}

static void postprocd_ready(void *self, struct rs_stage *st)
{
    struct postprocd *pd = self;
    rs_log_info("serving on %s: model %s, linger %llu ms, client timeout %llu ms",
                rs_zsock_endpoint(pd->d.front.ipc), st->args.cfg.model_path,
                (unsigned long long)pd->linger_ms, (unsigned long long)pd->client_timeout_ms);
}

static rs_err postprocd_pass(void *self, struct rs_stage *st)
{
    struct postprocd *pd = self;
    struct postd *d = &pd->d;
    if (zmq_poll(pd->items, pd->n_client + 1, RS_STAGE_TICK_MS) > 0) {
        for (int i = 0; i < pd->n_client; i++)
            if (pd->items[i].revents & ZMQ_POLLIN)
                postd_drain_clients(d, pd->socks[i], i == 1, MSGS_PER_PASS);
        /* Doorbells only wake the loop: the scan that follows finds the work itself. */
        if (pd->items[pd->n_client].revents & ZMQ_POLLIN)
            for (int i = 0; i < DOORS_PER_PASS &&
                            rs_pipe_door_recv(&st->doors, &pd->door, 0) == RS_OK;
                 i++) {
            }
    }
    if (!d->fenced)
        postd_scan(d);
    return d->fenced ? RS_ESTALE : RS_OK;
}

static void postprocd_close(void *self)
{
    struct postd *d = &((struct postprocd *)self)->d;
    rs_wire_buf_fini(&d->out);
    free(d->slots);
    rs_pipe_owner_map_destroy(&d->owners);
    free(d->step);
    free(d->released);
    free(d->text);
    free(d->msg_tokens);
    free(d->lps);
    free(d->toks);
    rs_vocab_destroy(&d->vocab);
}

#define MS_OPT(nm, field, h)                                                                      \
    {.name = nm, .kind = RS_OPT_U64, .off = offsetof(struct postprocd, field), .min = 0,          \
     .max = 86400000, .arg = "N", .help = h}

static const struct rs_opt own_opts[] = {
    MS_OPT("linger-ms", linger_ms,
           "keep a finished request N ms for resume, unless its\n"
           "client sends release first (default 30000)"),
    MS_OPT("client-timeout-ms", client_timeout_ms,
           "abort a request whose client is unreachable this long\n(default 30000)"),
    {0},
};

static const struct rs_opt_group groups[] = {
    {"postprocd options", own_opts, &the_daemon, NULL},
};

static const struct rs_stage_def def = {
    .stage = RS_PIPE_STAGE_POSTPROCD,
    .usage = "usage: postprocd --model PATH [options]\n"
             "Turns generated tokens into text deltas and streams them to clients\n"
             "(ipc/PROTOCOL.md); finishes requests on stop strings.\n",
    .place_role = RS_PLACE_OTHER,
    .groups = groups,
    .n_groups = sizeof(groups) / sizeof(groups[0]),
    .front_opts = &the_daemon.front,
    .front = &the_daemon.d.front,
    .load = postprocd_load,
    .attach = postprocd_attach,
    .ready = postprocd_ready,
    .pass = postprocd_pass,
    .close = postprocd_close,
};

int main(int argc, char **argv)
{
    return rs_stage_main(&def, &the_daemon, argc, argv);
}

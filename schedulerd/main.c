/* SPDX-License-Identifier: MIT */
/*
 * schedulerd: the pipeline stage that owns request scheduling and the KV
 * blocks. Its life (options, the fence, exits) is the stage skeleton's
 * (ipc/stage.h); here are its hooks: rebuild its state from shared memory
 * once the instance is open, then each pass waits up to one tick for a
 * doorbell, applies the hints and does one pass of work (sched.c).
 * Doorbells are only hints; every pass also looks at shared memory. Leaves
 * out the scheduling itself (the other files of this directory).
 */
#include <string.h>

#include "common/log.h"
#include "ipc/pipeline_door.h"
#include "ipc/stage.h"
#include "schedulerd/sched.h"

#define DRAIN_MAX 4096 /* doorbells handled per pass before working again */

struct schedd {
    struct sched *s;
    int wait_ms;           /* the first pass works at once: a restart may find a batch to plan */
    struct rs_wire_door door;
};

static struct schedd the_daemon; /* static: a fenced exit leaves it as it is (stage.h) */

static rs_err schedulerd_attach(void *self, struct rs_stage *st, char *err, size_t err_len)
{
    struct schedd *d = self;
    rs_err rc = sched_create(st->p, &st->doors, &d->s);
    if (rc != RS_OK)
        snprintf(err, err_len, "cannot rebuild the schedule from shared memory: %s",
                 rs_strerror(rc));
    return rc;
}

static void schedulerd_ready(void *self, struct rs_stage *st)
{
    const struct rs_pipe_config *c = &st->args.cfg;
    (void)self;
    rs_log_info("serving instance %s: %u KV blocks of %u tokens, %u seqs / %u tokens per "
                "step, prefix caching %s, policy %s", c->instance, c->n_kv_blocks,
                c->block_size, c->max_seqs, c->max_batched_tokens,
                c->prefix_caching ? "on" : "off", c->priority_policy ? "priority" : "fcfs");
}

/* Applies one doorbell; returns 1 when it asks for a rescan. */
static int on_door(struct sched *s, const struct rs_wire_door *d)
{
    switch (d->kind) {
    case RS_WIRE_DOOR_REQUEST_READY:
        sched_note_ready(s, (uint32_t)d->u.request.slot, (uint32_t)d->u.request.gen);
        return 0;
    case RS_WIRE_DOOR_CANCEL:
        sched_note_cancel(s, (uint32_t)d->u.cancel.slot, (uint32_t)d->u.cancel.gen);
        return 0;
    case RS_WIRE_DOOR_WAKE:
        return 1;
    default: /* batch_done and the rest: the pass reads the rings anyway */
        return 0;
    }
}

static rs_err schedulerd_pass(void *self, struct rs_stage *st)
{
    struct schedd *d = self;
    int rescan = 0, n = 0;
    rs_err rc = rs_pipe_door_recv(&st->doors, &d->door, d->wait_ms);
    d->wait_ms = RS_STAGE_TICK_MS;
    while (rc == RS_OK && n++ < DRAIN_MAX) {
        rescan |= on_door(d->s, &d->door);
        rc = rs_pipe_door_recv(&st->doors, &d->door, 0);
    }
    return sched_work(d->s, rescan) == RS_ESTALE ? RS_ESTALE : RS_OK;
}

static void schedulerd_close(void *self)
{
    struct schedd *d = self;
    sched_destroy(&d->s);
}

static const struct rs_stage_def def = {
    .stage = RS_PIPE_STAGE_SCHEDULERD,
    .usage = "usage: schedulerd --model PATH [options]\n\n"
             "Plans iteration-level batches (chunked prefill mixed with decodes) over a\n"
             "paged KV block pool with prefix caching and recompute preemption.\n",
    .place_role = RS_PLACE_OTHER,
    .attach = schedulerd_attach,
    .ready = schedulerd_ready,
    .pass = schedulerd_pass,
    .close = schedulerd_close,
};

int main(int argc, char **argv)
{
    return rs_stage_main(&def, &the_daemon, argc, argv);
}

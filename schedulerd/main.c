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
#include <stddef.h>
#include <string.h>

#include "common/log.h"
#include "ipc/pipeline_door.h"
#include "ipc/stage.h"
#include "schedulerd/sched.h"

#define DRAIN_MAX 4096 /* doorbells handled per pass before working again */

/* Defaults of the step-time budget (schedulerd/README.md, "Step-time budget"). */
#define MAX_STEP_MS_DEFAULT 100.0
#define MIN_PREFILL_DEFAULT 32
/* Owners' shares of a step's decodes (schedulerd/README.md, "Shares of a step"). */
#define FAIR_STEP_FACTOR_DEFAULT 2.0
/* Running-slot share of one owner while others wait (schedulerd/README.md, "Planning a step"). */
#define OWNER_RUNNING_SHARE_DEFAULT 25

struct schedd {
    struct sched *s;
    struct budget_opts budget;
    struct admit_opts admit;
    int wait_ms;           /* the first pass works at once: a restart may find a batch to plan */
    struct rs_wire_door door;
};

/* static: a fenced exit leaves it as it is (stage.h) */
static struct schedd the_daemon = {.budget = {MAX_STEP_MS_DEFAULT, MIN_PREFILL_DEFAULT,
                                              FAIR_STEP_FACTOR_DEFAULT, 1},
                                   .admit = {OWNER_RUNNING_SHARE_DEFAULT}};

#define BO(f) (offsetof(struct budget_opts, f))
static const struct rs_opt budget_opt_table[] = {
    {.name = "max-step-ms", .kind = RS_OPT_DOUBLE, .off = BO(max_step_ms), .min = 0,
     .max = 600000, .arg = "MS",
     .help = "step-time budget: prefill chunks sized so a step stays\n"
             "under MS by launcherd's measured cost per token; decodes\n"
             "are never cut (default 100; 0: off, steps take\n"
             "--max-batched-tokens)"},
    {.name = "min-prefill-tokens", .kind = RS_OPT_U32, .off = BO(min_prefill), .min = 1,
     .max = 1u << 20, .arg = "N",
     .help = "prefill tokens a step takes whatever the budget says,\n"
             "so new requests start while decodes fill it (default 32)"},
    {.name = "no-burst-lift", .kind = RS_OPT_FLAG32, .off = BO(burst_lift), .val = 0,
     .help = "keep the step-time budget in a burst too (default: no\n"
             "budget while more clients wait for a first token than\n"
             "streams are past their second output)"},
    {.name = "fair-step-factor", .kind = RS_OPT_DOUBLE, .off = BO(fair_factor), .min = 0,
     .max = 1000, .arg = "F",
     .help = "while several clients decode, the busiest defer some\n"
             "decodes so a step costs at most F times the lighter\n"
             "clients' decodes alone, by the measured cost model\n"
             "(default 2; 0: off; otherwise at least 1)"},
    {0},
};

#define AO(f) (offsetof(struct admit_opts, f))
static const struct rs_opt admit_opt_table[] = {
    {.name = "owner-running-share", .kind = RS_OPT_U32, .off = AO(owner_running_share),
     .min = 1, .max = 100, .arg = "PCT",
     .help = "running slots one client may hold while another's\n"
             "requests wait: max(1, ceil(PCT% of --max-seqs));\n"
             "a client alone uses them all (default 25; 100: off)"},
    {0},
};

static const struct rs_opt_group groups[] = {
    {"schedulerd options", budget_opt_table, &the_daemon.budget, NULL},
    {NULL, admit_opt_table, &the_daemon.admit, NULL},
};

static rs_err schedulerd_attach(void *self, struct rs_stage *st, char *err, size_t err_len)
{
    struct schedd *d = self;
    if (d->budget.fair_factor > 0 && d->budget.fair_factor < 1) {
        snprintf(err, err_len, "--fair-step-factor %g: must be 0 (off) or at least 1",
                 d->budget.fair_factor);
        return RS_EINVAL;
    }
    rs_err rc = sched_create(st->p, &st->doors, &d->s);
    if (rc == RS_OK) {
        d->s->budget = d->budget;
        d->s->owner_cap = sched_owner_cap(d->s->cfg.max_seqs, d->admit.owner_running_share);
    }
    if (rc != RS_OK)
        snprintf(err, err_len, "cannot rebuild the schedule from shared memory: %s",
                 rs_strerror(rc));
    return rc;
}

static void schedulerd_ready(void *self, struct rs_stage *st)
{
    const struct rs_pipe_config *c = &st->args.cfg;
    const struct schedd *d = self;
    rs_log_info("serving instance %s: %u KV blocks of %u tokens, %u seqs / %u tokens per "
                "step, prefix caching %s, policy %s, step budget %g ms (min %u prefill tokens, "
                "%s in bursts), %u running slots per client while others wait, fair step "
                "factor %g",
                c->instance, c->n_kv_blocks, c->block_size, c->max_seqs, c->max_batched_tokens,
                c->prefix_caching ? "on" : "off", c->priority_policy ? "priority" : "fcfs",
                d->budget.max_step_ms, d->budget.min_prefill,
                d->budget.burst_lift ? "lifted" : "kept",
                d->s->owner_cap ? d->s->owner_cap : c->max_seqs, d->budget.fair_factor);
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
    .groups = groups,
    .n_groups = sizeof(groups) / sizeof(groups[0]),
    .attach = schedulerd_attach,
    .ready = schedulerd_ready,
    .pass = schedulerd_pass,
    .close = schedulerd_close,
};

int main(int argc, char **argv)
{
    return rs_stage_main(&def, &the_daemon, argc, argv);
}

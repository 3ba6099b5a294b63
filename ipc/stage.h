/* SPDX-License-Identifier: MIT */
/*
 * One pipeline stage's life, the same for the four daemons: options (the
 * pipeline's, --group, placement and the daemon's own, from tables), the
 * model's facts and the configuration, placement, the daemon's load (vocab,
 * model) before the fence, opening the instance (the fence), the runtime
 * directory and doorbells, the daemon's attach (its sockets, its rebuild
 * from shared memory), ready, the loop, and one way out of each kind. A
 * daemon's main is its hooks and one call to rs_stage_main. Leaves out what
 * a stage does in a pass (each daemon's files) and supervising.
 *
 * Exit codes and what happens on the way out:
 *
 * | how it ends                         | code | on the way out                             |
 * |-------------------------------------|------|--------------------------------------------|
 * | --help                              | 0    | the generated help on stdout               |
 * | bad option, model or configuration  | 2    | one line on stderr; nothing was touched    |
 * | SIGTERM / SIGINT                    | 0    | STOPPING to systemd; close hook, doorbells,|
 * |                                     |      | ZeroMQ, the pipeline (role EXITED), unmap  |
 * | load, open or bind failed, or a     | 1    | logged; the same orderly close             |
 * | pass failed (corrupt ring, ...)     |      |                                            |
 * | fenced: a newer incarnation holds   | 1    | one log line, then nothing at all: no      |
 * | the role (at any step, or a pass    |      | shared-memory write (not even the role's   |
 * | returned RS_ESTALE)                 |      | EXITED), no hook, no socket closed, no     |
 * |                                     |      | unmap; the kernel releases it all at exit  |
 *
 * Why a fenced process does nothing at all: it may have been stopped in the
 * middle of any step and resumed long after its successor took over, so any
 * code it runs (a close hook, a final write) works on state that is no
 * longer its own, and its successor now serves on the same ipc:// paths
 * (whether closing a listener unlinks its path differs between libzmq
 * versions). A fenced exit therefore leaves the daemon's state as it was, so
 * that state must be static (rs_stage_main keeps its own so): it stays
 * reachable and leak checkers see nothing lost. crash.chaos
 * stopped_stage_replaced_then_resumed_is_fenced checks, for every stage,
 * exit 1, no byte of shared memory changed, and the successor's role and
 * socket paths intact.
 */
#ifndef RS_STAGE_H
#define RS_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/opt.h"
#include "common/placement.h"
#include "ipc/pipeline.h"
#include "ipc/pipeline_door.h"
#include "ipc/pipeline_front.h"

#define RS_STAGE_TICK_MS 10 /* longest wait of one pass: the rescan period (DESIGN.md 1) */

#define RS_STAGE_EXIT_OK 0
#define RS_STAGE_EXIT_FAILED 1 /* also the fenced exit: a supervisor restarts neither early */
#define RS_STAGE_EXIT_USAGE 2

/* What the skeleton owns and hands to every hook. */
struct rs_stage {
    enum rs_pipe_stage stage;
    struct rs_pipe_args args;   /* --instance, --model, ... --rundir (pipeline_config.h) */
    char group[64];             /* --group: runtime directory group; "" = owner only */
    struct rs_place_opts place; /* --cpus, --numa */
    rs_place *pl;               /* the topology, for rs_place_bind_memory; NULL once released */
    struct rs_place_plan plan;  /* where this stage runs */
    struct rs_pipe *p;          /* the opened instance (attach hook on) */
    void *zctx;                 /* ZeroMQ context (attach hook on) */
    struct rs_pipe_doors doors; /* bound and connected (attach hook on) */
    uint64_t open_ns;           /* CLOCK_MONOTONIC when opening the instance began */
};

/* A daemon: its options and its hooks; self is its (static) state, given to every hook. */
struct rs_stage_def {
    enum rs_pipe_stage stage;
    const char *usage;                 /* synopsis and what it does, for --help */
    enum rs_place_role place_role;     /* RS_PLACE_OTHER, or RS_PLACE_LAUNCHER */
    int keep_place;                    /* 1: keep st->pl after start-up (launcherd binds pages) */
    const struct rs_opt_group *groups; /* the daemon's own options, after the shared ones */
    size_t n_groups;

    /* Frontends (tokenizerd, postprocd): when set, the skeleton takes the client access
     * options into front_opts, checks them, binds the client sockets into front before the
     * attach hook (after the doorbells) and closes them after the close hook. */
    struct rs_pipe_front_opts *front_opts;
    struct rs_pipe_front *front;

    /* Optional: rules across options, after parsing; RS_EINVAL (err set) exits 2. */
    rs_err (*check)(void *self, char *err, size_t err_len);

    /* Optional: before the instance is opened (so a bad model never fences a running stage):
     * vocab, model; st->args.cfg is resolved, placement applied. */
    rs_err (*load)(void *self, struct rs_stage *st, char *err, size_t err_len);

    /* Optional: after the instance is opened and the doorbells are bound, before ready:
     * client sockets, the rebuild from shared memory. RS_ESTALE: fenced meanwhile. */
    rs_err (*attach)(void *self, struct rs_stage *st, char *err, size_t err_len);

    /* Optional: once the role is ready (a log line, the first doorbells). */
    void (*ready)(void *self, struct rs_stage *st);

    /* One pass of the loop, waiting at most RS_STAGE_TICK_MS for work. RS_OK to go on,
     * RS_ESTALE when fenced, anything else ends the daemon (exit 1, logged by the pass). */
    rs_err (*pass)(void *self, struct rs_stage *st);

    /* Optional: frees what load and attach made; called on every exit but the fenced one,
     * also after a partial start. */
    void (*close)(void *self);
};

/*
 * Runs the stage: everything in the table above, in that order, each pass
 * preceded by the heartbeat, the systemd watchdog and the fence check.
 * Returns the exit code for main. Main thread, once per process.
 */
int rs_stage_main(const struct rs_stage_def *def, void *self, int argc, char **argv);

/* The shared stage options (--group) and placement's, for tests of option handling. */
extern const struct rs_opt rs_stage_opts[];

#endif

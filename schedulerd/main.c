/* SPDX-License-Identifier: MIT */
/*
 * schedulerd: the pipeline stage that owns request scheduling and the KV
 * blocks. Parses the shared pipeline options, opens the instance as the
 * schedulerd role (a new incarnation fences any previous one), rebuilds its
 * state from shared memory, binds its doorbell inbox, and loops: wait up to
 * one tick for a doorbell, apply hints, then one pass of work (sched.c).
 * Doorbells are only hints; every pass also looks at shared memory. Leaves
 * out the scheduling itself (the other files of this directory).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/daemon.h"
#include "common/log.h"
#include "common/placement.h"
#include "ipc/pipeline.h"
#include "ipc/pipeline_door.h"
#include "ipc/rundir.h"
#include "schedulerd/sched.h"

#define TICK_MS 10
#define DRAIN_MAX 4096 /* doorbells handled per pass before working again */

static void usage(FILE *f)
{
    fprintf(f, "usage: schedulerd --model PATH [pipeline options] [--group NAME]\n\n"
               "Plans iteration-level batches (chunked prefill mixed with decodes) over a\n"
               "paged KV block pool with prefix caching and recompute preemption.\n\n%s"
               "  --group NAME             runtime directory group, as the frontends' --group\n"
               "%s"
               "  --help                   this text\n",
               rs_pipe_options_help(), rs_place_options_help());
}

/* 0 ok, 1 --help printed, 2 bad arguments (reported). */
static int parse_args(int argc, char **argv, struct rs_pipe_config *cfg, char *rundir,
                      size_t rundir_len, char *group, size_t group_len, struct rs_place_opts *place)
{
    char err[512];
    rs_place_opts_default(place);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 1;
        }
        if (strcmp(argv[i], "--group") == 0) {
            if (i + 1 >= argc || argv[i + 1][0] == '\0' || strlen(argv[i + 1]) >= group_len) {
                fprintf(stderr, "schedulerd: option --group needs a group name\n");
                return 2;
            }
            snprintf(group, group_len, "%s", argv[++i]);
            continue;
        }
        int r = rs_pipe_parse_option(cfg, rundir, rundir_len, argc, argv, &i, err, sizeof(err));
        if (r == 0)
            r = rs_place_parse_option(place, argc, argv, &i, err, sizeof(err));
        if (r < 0) {
            fprintf(stderr, "schedulerd: %s\n", err);
            return 2;
        }
        if (r == 0) {
            fprintf(stderr, "schedulerd: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    struct rs_gguf_facts facts;
    if (cfg->model_path[0] == '\0') {
        fprintf(stderr, "schedulerd: no model: pass --model PATH\n");
        return 2;
    }
    if (rs_gguf_facts_read(cfg->model_path, &facts, err, sizeof(err)) != RS_OK ||
        rs_pipe_config_resolve(cfg, &facts, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "schedulerd: %s\n", err);
        return 2;
    }
    return 0;
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

static int serve(struct rs_pipe *p, struct rs_pipe_doors *doors, struct sched *s)
{
    struct rs_wire_door door;
    int wait_ms = 0; /* the first pass works at once: a restart may find a batch to plan */
    while (!rs_daemon_should_stop()) {
        rs_role_heartbeat(p->role);
        rs_daemon_watchdog();
        if (!rs_role_current(p->role)) {
            rs_log_error("fenced by a newer schedulerd incarnation: exiting");
            return 1;
        }
        int rescan = 0, n = 0;
        rs_err rc = rs_pipe_door_recv(doors, &door, wait_ms);
        wait_ms = TICK_MS;
        while (rc == RS_OK && n++ < DRAIN_MAX) {
            rescan |= on_door(s, &door);
            rc = rs_pipe_door_recv(doors, &door, 0);
        }
        if (sched_work(s, rescan) == RS_ESTALE) {
            rs_log_error("fenced by a newer schedulerd incarnation: exiting");
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (rs_daemon_init("schedulerd") != RS_OK)
        return 1;
    struct rs_pipe_config cfg;
    char rundir[RS_RUNDIR_PATH_MAX + 1] = "", err[512], group[64] = "";
    rs_pipe_config_default(&cfg);
    struct rs_place_opts place;
    int a = parse_args(argc, argv, &cfg, rundir, sizeof(rundir), group, sizeof(group), &place);
    if (a != 0)
        return a == 1 ? 0 : 2;
    if ((a = rs_place_daemon("schedulerd", RS_PLACE_OTHER, &place)) != 0)
        return a;
    if (rundir[0] == '\0')
        rs_rundir_default(cfg.instance, rundir, sizeof(rundir));
    struct rs_pipe *p = NULL;
    rs_err rc = rs_pipe_open(&cfg, RS_PIPE_STAGE_SCHEDULERD, &p, err, sizeof(err));
    if (rc != RS_OK) {
        rs_log_error("cannot open instance %s: %s", cfg.instance, err);
        return 1;
    }
    void *zctx = zmq_ctx_new();
    struct rs_pipe_doors doors;
    memset(&doors, 0, sizeof(doors));
    struct sched *s = NULL;
    int status = 1;
    if (zctx == NULL || rs_rundir_prepare(rundir, group[0] ? group : NULL) != RS_OK ||
        rs_pipe_doors_open(&doors, zctx, rundir, RS_PIPE_STAGE_SCHEDULERD) != RS_OK) {
        rs_log_error("cannot set up the doorbell sockets in %s", rundir);
    } else if ((rc = sched_create(p, &doors, &s)) != RS_OK) {
        rs_log_error("cannot rebuild the schedule from shared memory: %s", rs_strerror(rc));
    } else if (rs_role_ready(p->role) != RS_OK) {
        rs_log_error("fenced before becoming ready: exiting");
    } else {
        rs_daemon_notify_ready();
        rs_log_info("serving instance %s: %u KV blocks of %u tokens, %u seqs / %u tokens per "
                    "step, prefix caching %s, policy %s", cfg.instance, cfg.n_kv_blocks,
                    cfg.block_size, cfg.max_seqs, cfg.max_batched_tokens,
                    cfg.prefix_caching ? "on" : "off", cfg.priority_policy ? "priority" : "fcfs");
        status = serve(p, &doors, s);
        rs_daemon_notify_stopping();
    }
    sched_destroy(&s);
    rs_pipe_doors_close(&doors);
    if (zctx != NULL)
        zmq_ctx_term(zctx);
    if (status == 1 && p != NULL && !rs_role_current(p->role))
        exit(1); /* fenced: do not even mark the role exited */
    rs_pipe_close(&p);
    return status;
}

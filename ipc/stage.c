/* SPDX-License-Identifier: MIT */
/*
 * The stage skeleton (stage.h): start-up in one order for every daemon, the
 * loop, and the three ways out (stop, failure, fenced). The skeleton's own
 * state is static, like the daemons', so a fenced exit, which frees
 * nothing, leaves nothing unreachable.
 */
#include "ipc/stage.h"

#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/daemon.h"
#include "common/gguf_facts.h"
#include "common/log.h"
#include "ipc/rundir.h"

#define MAX_GROUPS 8

const struct rs_opt rs_stage_opts[] = {
    {.name = "group", .kind = RS_OPT_STR, .off = offsetof(struct rs_stage, group),
     .size = sizeof(((struct rs_stage *)0)->group), .arg = "NAME",
     .help = "runtime directory 0750 owned by group NAME (default:\n"
             "0700, the service user only); sockets are 0660"},
    {0},
};

static struct rs_stage the_stage;

/* The option groups: pipeline, --group, placement, then the daemon's. */
static size_t groups_of(const struct rs_stage_def *def, struct rs_stage *st,
                        struct rs_opt_group *g)
{
    size_t n = 0;
    g[n++] = (struct rs_opt_group){RS_PIPE_OPTS_TITLE, rs_pipe_opts, &st->args, NULL};
    g[n++] = (struct rs_opt_group){"runtime directory", rs_stage_opts, st, NULL};
    g[n++] = (struct rs_opt_group){RS_PLACE_OPTS_TITLE, rs_place_opt_table, &st->place, NULL};
    if (def->front_opts != NULL)
        g[n++] = (struct rs_opt_group){RS_PIPE_FRONT_OPTS_TITLE, rs_pipe_front_opt_table,
                                       def->front_opts, NULL};
    for (size_t i = 0; i < def->n_groups && n < MAX_GROUPS; i++)
        g[n++] = def->groups[i];
    return n;
}

/* The model's facts, then the configuration completed with them. */
static rs_err resolve(struct rs_stage *st, char *err, size_t err_len)
{
    struct rs_gguf_facts facts;
    if (st->args.cfg.model_path[0] == '\0') {
        snprintf(err, err_len, "no model: pass --model PATH");
        return RS_EINVAL;
    }
    rs_err rc = rs_gguf_facts_read(st->args.cfg.model_path, &facts, err, err_len);
    return rc == RS_OK ? rs_pipe_config_resolve(&st->args.cfg, &facts, err, err_len) : rc;
}

/* Options, cross-option rules, model facts and configuration: -1 to run, else the exit code. */
static int configure(const struct rs_stage_def *def, void *self, struct rs_stage *st, int argc,
                     char **argv)
{
    struct rs_opt_group g[MAX_GROUPS];
    size_t n = groups_of(def, st, g);
    char err[512];
    int r = rs_opt_parse(g, n, argc, argv, 0, NULL, err, sizeof(err));
    if (r == RS_OPT_HELP) {
        rs_opt_help(stdout, def->usage, g, n);
        return RS_STAGE_EXIT_OK;
    }
    if (r != RS_OPT_OK ||
        (def->front_opts != NULL && rs_pipe_front_check(def->front_opts, err, sizeof(err))) ||
        (def->check != NULL && def->check(self, err, sizeof(err)) != RS_OK) ||
        resolve(st, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "%s: %s\n", rs_pipe_stage_name(def->stage), err);
        return RS_STAGE_EXIT_USAGE;
    }
    if (st->args.rundir[0] == '\0')
        rs_rundir_default(st->args.cfg.instance, st->args.rundir, sizeof(st->args.rundir));
    return -1;
}

/* Placement before any thread starts: -1 to run, else the exit code. */
static int place(const struct rs_stage_def *def, struct rs_stage *st)
{
    char err[512];
    const char *name = rs_pipe_stage_name(def->stage);
    rs_err rc = rs_place_setup(name, def->place_role, &st->place, RS_PLACE_GPU_AUTO, &st->pl,
                               &st->plan, err, sizeof(err));
    if (!def->keep_place || rc != RS_OK)
        rs_place_destroy(&st->pl);
    if (rc == RS_OK)
        return -1;
    rs_log_error("%s: placement: %s", name, err);
    return rc == RS_EINVAL ? RS_STAGE_EXIT_USAGE : RS_STAGE_EXIT_FAILED;
}

/* 1 when this incarnation no longer holds its role (or never took it: open refused). */
static int fenced(const struct rs_stage *st)
{
    return st->p != NULL && st->p->role != NULL && !rs_role_current(st->p->role);
}

/* Runtime directory, doorbells and (frontends) the client sockets of an opened instance. */
static rs_err bind_sockets(const struct rs_stage_def *def, struct rs_stage *st, char *err,
                           size_t err_len)
{
    rs_err rc;
    if ((st->zctx = zmq_ctx_new()) == NULL)
        return RS_ENOMEM;
    if ((rc = rs_rundir_prepare(st->args.rundir, st->group[0] ? st->group : NULL)) != RS_OK) {
        snprintf(err, err_len, "runtime directory %s: %s (see above)", st->args.rundir,
                 rs_strerror(rc));
        return rc;
    }
    if ((rc = rs_pipe_doors_open(&st->doors, st->zctx, st->args.rundir, def->stage)) != RS_OK) {
        snprintf(err, err_len, "doorbells in %s: %s", st->args.rundir, rs_strerror(rc));
        return rc;
    }
    if (def->front == NULL)
        return RS_OK;
    return rs_pipe_front_open(def->front, st->zctx, st->args.rundir,
                              rs_pipe_stage_name(def->stage), def->front_opts, err, err_len);
}

/* Load, open (the fence), sockets, attach, ready. */
static rs_err start(const struct rs_stage_def *def, void *self, struct rs_stage *st)
{
    char err[512] = "";
    rs_err rc = def->load != NULL ? def->load(self, st, err, sizeof(err)) : RS_OK;
    if (rc != RS_OK) {
        rs_log_error("%s", err);
        return rc;
    }
    st->open_ns = rs_clock_ns();
    if ((rc = rs_pipe_open(&st->args.cfg, def->stage, &st->p, err, sizeof(err))) != RS_OK) {
        rs_log_error("cannot open instance %s: %s", st->args.cfg.instance, err);
        return rc == RS_ESTALE ? RS_EIO : rc; /* a newer incarnation refused: not a fence */
    }
    rc = bind_sockets(def, st, err, sizeof(err));
    if (rc == RS_OK && def->attach != NULL)
        rc = def->attach(self, st, err, sizeof(err));
    if (rc == RS_OK)
        rc = rs_role_ready(st->p->role);
    if (rc != RS_OK && !fenced(st))
        rs_log_error("%s", err[0] ? err : rs_strerror(rc));
    return rc;
}

/* The loop: heartbeat, watchdog and fence check before every pass. */
static rs_err serve(const struct rs_stage_def *def, void *self, struct rs_stage *st)
{
    while (!rs_daemon_should_stop()) {
        rs_role_heartbeat(st->p->role);
        rs_daemon_watchdog();
        if (!rs_role_current(st->p->role))
            return RS_ESTALE;
        rs_err rc = def->pass(self, st);
        if (rc != RS_OK)
            return rc;
    }
    return RS_OK;
}

/* Everything start made, in reverse; not for a fenced exit. */
static void finish(const struct rs_stage_def *def, void *self, struct rs_stage *st)
{
    if (def->close != NULL)
        def->close(self);
    if (def->front != NULL)
        rs_pipe_front_close(def->front);
    rs_pipe_doors_close(&st->doors);
    if (st->zctx != NULL)
        zmq_ctx_term(st->zctx);
    st->zctx = NULL;
    rs_pipe_close(&st->p);
    rs_place_destroy(&st->pl);
}

int rs_stage_main(const struct rs_stage_def *def, void *self, int argc, char **argv)
{
    struct rs_stage *st = &the_stage;
    const char *name = rs_pipe_stage_name(def->stage);
    memset(st, 0, sizeof(*st));
    st->stage = def->stage;
    rs_pipe_args_init(&st->args);
    rs_place_opts_default(&st->place);
    if (rs_daemon_init(name) != RS_OK)
        return RS_STAGE_EXIT_FAILED;
    int code = configure(def, self, st, argc, argv);
    if (code < 0)
        code = place(def, st);
    if (code >= 0)
        return code;
    rs_err rc = start(def, self, st);
    if (rc == RS_OK) {
        rs_daemon_notify_ready();
        rs_log_info("%s incarnation %u: ready %.2f ms after opening the pipeline", name,
                    rs_role_inc(st->p->role), (double)(rs_clock_ns() - st->open_ns) / 1e6);
        if (def->ready != NULL)
            def->ready(self, st);
        rc = serve(def, self, st);
    }
    if (rc == RS_ESTALE || fenced(st)) {
        rs_log_error("fenced: a newer %s incarnation (%u) holds the role; exiting without "
                     "touching shared memory or sockets",
                     name, rs_pipe_stage_inc(st->p, def->stage));
        return RS_STAGE_EXIT_FAILED;
    }
    if (rc == RS_OK) {
        rs_daemon_notify_stopping();
        rs_log_info("stopping");
    }
    finish(def, self, st);
    return rc == RS_OK ? RS_STAGE_EXIT_OK : RS_STAGE_EXIT_FAILED;
}

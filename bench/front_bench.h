/* SPDX-License-Identifier: MIT */
/*
 * What bench_tokenizerd.c and bench_postprocd.c share: an instance of their
 * own (segment + runtime directory), starting the daemon binary that sits
 * next to the bench program, waiting until its role is READY, percentiles,
 * and the raw ZeroMQ ROUTER/DEALER figures measured in the same run (the
 * floor the daemons' message paths are compared with). Header-only.
 */
#ifndef RS_FRONT_BENCH_H
#define RS_FRONT_BENCH_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/pipeline.h"
#include "ipc/rundir.h"
#include "ipc/zsock.h"
#include "tests/pipeline_harness.h"

struct fb_inst {
    struct rs_pipe_config cfg;
    char rundir[160];
    char bindir[400];
    pid_t pid;
    char log[220];
};

/* Instance "bench-<pid>" over model with the given sizes; rundir under /tmp. 0 or 1. */
static inline int fb_init(struct fb_inst *b, const char *model, uint32_t n_ctx,
                          uint32_t max_requests)
{
    char err[256], self[400];
    memset(b, 0, sizeof(*b));
    rs_pipe_config_default(&b->cfg);
    snprintf(b->cfg.instance, sizeof(b->cfg.instance), "bench-%d", (int)getpid());
    snprintf(b->cfg.model_path, sizeof(b->cfg.model_path), "%s", model);
    b->cfg.n_ctx = n_ctx;
    b->cfg.max_requests = max_requests;
    b->cfg.max_seqs = 64;
    b->cfg.max_batched_tokens = 1024;
    b->cfg.n_kv_blocks = (n_ctx + 15) / 16 * 4;
    if (rs_harness_config_resolve(&b->cfg, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "config: %s\n", err);
        return 1;
    }
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    snprintf(b->bindir, sizeof(b->bindir), "%s", dirname(self));
    snprintf(b->rundir, sizeof(b->rundir), "/tmp/ringserve-bench-%d", (int)getpid());
    snprintf(b->log, sizeof(b->log), "%s/daemon.log", b->rundir);
    return rs_rundir_prepare(b->rundir, NULL) == RS_OK ? 0 : 1;
}

/* Starts <bindir>/<name> with the instance's options plus extra (NULL-terminated). */
static inline int fb_start(struct fb_inst *b, const char *name, const char *const *extra)
{
    char bin[480], ctx[16], req[16], kv[16], seqs[16], mbt[16];
    snprintf(bin, sizeof(bin), "%s/%s", b->bindir, name);
    snprintf(ctx, sizeof(ctx), "%u", b->cfg.n_ctx);
    snprintf(req, sizeof(req), "%u", b->cfg.max_requests);
    snprintf(kv, sizeof(kv), "%u", b->cfg.n_kv_blocks);
    snprintf(seqs, sizeof(seqs), "%u", b->cfg.max_seqs);
    snprintf(mbt, sizeof(mbt), "%u", b->cfg.max_batched_tokens);
    const char *argv[40] = {bin, "--model", b->cfg.model_path, "--instance", b->cfg.instance,
                            "--ctx", ctx, "--max-requests", req, "--kv-blocks", kv,
                            "--max-seqs", seqs, "--max-batched-tokens", mbt, "--rundir",
                            b->rundir};
    int n = 17;
    for (int i = 0; extra != NULL && extra[i] != NULL && n < 38; i++)
        argv[n++] = extra[i];
    fflush(stdout);
    b->pid = fork();
    if (b->pid == 0) {
        int fd = open(b->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0)
            dup2(fd, 2), close(fd);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    return b->pid > 0 ? 0 : 1;
}

/* Waits until role `name` is READY with the child's pid (p: the driver's own handle). */
static inline int fb_ready(struct fb_inst *b, const struct rs_pipe *p, const char *name)
{
    int role = rs_role_find(p->shm, name);
    for (int i = 0; i < 2000 && role >= 0; i++) {
        struct rs_role_info info;
        if (rs_role_info_at(p->shm, (uint32_t)role, &info) == RS_OK &&
            info.pid == (uint32_t)b->pid && info.phase == RS_ROLE_READY)
            return 0;
        if (waitpid(b->pid, NULL, WNOHANG) == b->pid)
            break;
        usleep(5000);
    }
    fprintf(stderr, "%s did not start; its log is %s\n", name, b->log);
    return 1;
}

static inline int fb_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

/* Stops the daemon, removes the segment and the runtime directory (log included). */
static inline void fb_fini(struct fb_inst *b)
{
    if (b->pid > 0) {
        kill(b->pid, SIGTERM);
        waitpid(b->pid, NULL, 0);
    }
    rs_pipe_unlink(b->cfg.instance);
    nftw(b->rundir, fb_rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static inline int fb_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts v[0..n) (ns) and returns quantile q in microseconds. */
static inline double fb_quantile_us(uint64_t *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof(*v), fb_cmp_u64);
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return (double)v[i] / 1e3;
}

/* A DEALER to ipc://<rundir>/<daemon>.sock with routing id rid. */
static inline rs_zsock *fb_dealer(void *zctx, const char *rundir, const char *daemon,
                                  const char *rid)
{
    char file[64], ep[RS_ZSOCK_ENDPOINT_MAX];
    struct rs_zsock_cfg cfg;
    rs_zsock_cfg_default(RS_ZSOCK_DEALER, &cfg);
    cfg.routing_id = rid;
    cfg.routing_id_len = strlen(rid);
    cfg.rcvhwm = 100000;
    rs_zsock *s = NULL;
    snprintf(file, sizeof(file), "%s.sock", daemon);
    if (rs_rundir_endpoint(rundir, file, ep, sizeof(ep)) != RS_OK ||
        rs_zsock_create(zctx, RS_ZSOCK_DEALER, ep, &cfg, &s) != RS_OK)
        return NULL;
    return s;
}

/* Sends, retrying while the connection is being set up (IMMEDIATE). */
static inline int fb_send(rs_zsock *s, const void *body, size_t len)
{
    for (int i = 0; i < 2000; i++) {
        rs_err rc = rs_zsock_send(s, body, len);
        if (rc == RS_OK)
            return 0;
        if (rc != RS_EAGAIN)
            return 1;
        usleep(1000);
    }
    return 1;
}

/*
 * The floor: a child process runs a raw ROUTER that answers every message
 * at once (echo) on ipc://<rundir>/raw.sock; the driver measures n_rt
 * closed-loop round trips (p50 in *rt_p50_us) and then the one-way rate of
 * n_burst messages of msg_len bytes ROUTER -> DEALER (*burst_per_s).
 */
static inline int fb_raw_floor(const char *rundir, size_t msg_len, int n_rt, int n_burst,
                               double *rt_p50_us, double *burst_per_s)
{
    char ep[RS_ZSOCK_ENDPOINT_MAX];
    if (rs_rundir_endpoint(rundir, "raw.sock", ep, sizeof(ep)) != RS_OK)
        return 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        rs_log_set_level(RS_LOG_ERROR); /* the burst meets the high-water mark on purpose */
        void *ctx = zmq_ctx_new();
        rs_zsock *r;
        if (rs_zsock_create(ctx, RS_ZSOCK_ROUTER, ep, NULL, &r) != RS_OK)
            _exit(1);
        char *body = calloc(1, msg_len);
        struct rs_zsock_peer peer;
        zmq_msg_t m;
        for (int i = 0; i < n_rt + 1; i++) { /* round trips, then one "go" */
            zmq_msg_init(&m);
            if (rs_zsock_recv(r, &peer, &m, -1) != RS_OK)
                _exit(1);
            zmq_msg_close(&m);
            if (i < n_rt)
                rs_zsock_router_send(r, &peer, body, msg_len);
        }
        for (int i = 0; i < n_burst;)
            i += rs_zsock_router_send(r, &peer, body, msg_len) == RS_OK;
        zmq_msg_init(&m);
        rs_zsock_recv(r, &peer, &m, 5000); /* the driver says it got them all */
        _exit(0);
    }
    usleep(100000);
    void *ctx = zmq_ctx_new();
    struct rs_zsock_cfg cfg;
    rs_zsock_cfg_default(RS_ZSOCK_DEALER, &cfg);
    cfg.routing_id = "floor";
    cfg.routing_id_len = 5;
    cfg.rcvhwm = 0; /* unbounded: the burst must not be throttled by the receive side */
    rs_zsock *d;
    if (rs_zsock_create(ctx, RS_ZSOCK_DEALER, ep, &cfg, &d) != RS_OK)
        return 1;
    char *body = calloc(1, msg_len);
    uint64_t *rt = calloc((size_t)n_rt, sizeof(uint64_t));
    zmq_msg_t m;
    for (int i = 0; i < n_rt; i++) {
        uint64_t t0 = rs_clock_ns();
        fb_send(d, body, msg_len);
        zmq_msg_init(&m);
        rs_zsock_recv(d, NULL, &m, -1);
        zmq_msg_close(&m);
        rt[i] = rs_clock_ns() - t0;
    }
    *rt_p50_us = fb_quantile_us(rt, (size_t)n_rt, 0.5);
    fb_send(d, "go", 2);
    uint64_t t0 = rs_clock_ns(), t1 = t0;
    for (int i = 0; i < n_burst; i++) {
        zmq_msg_init(&m);
        if (rs_zsock_recv(d, NULL, &m, 5000) != RS_OK)
            break;
        zmq_msg_close(&m);
        t1 = rs_clock_ns();
    }
    *burst_per_s = (double)n_burst / ((double)(t1 - t0) / 1e9);
    fb_send(d, "done", 4);
    waitpid(pid, NULL, 0);
    rs_zsock_destroy(&d);
    zmq_ctx_term(ctx);
    free(body);
    free(rt);
    return 0;
}

#endif

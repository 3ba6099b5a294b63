/* SPDX-License-Identifier: MIT */
/*
 * What bench_launch and bench_pipeline_overhead share: arguments, the
 * deterministic prompts, one measured phase of decode steps through the real
 * launcherd (the driver in tests/integration/launch_driver.h plays
 * schedulerd and tokenizerd), and percentiles. A phase: B requests with
 * prompts of P pseudo-random tokens (ignore_eos, greedy), one prefill step,
 * then S decode steps of B tokens, each timed from commit to the result
 * being read back.
 */
#ifndef RS_LAUNCH_BENCH_H
#define RS_LAUNCH_BENCH_H

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/pipeline_req.h"
#include "ipc/pipeline_result.h"
#include "tests/integration/launch_driver.h"

#define LB_MAX_BATCHES 8

struct lb_args {
    const char *model;
    char bin[300];    /* launcherd */
    int threads;      /* model threads (launcherd and in-process); 0 = all CPUs */
    uint32_t steps;   /* decode steps per phase */
    uint32_t prompt;  /* prompt tokens per request */
    uint32_t reps;    /* phases per batch size (figures over all of them) */
    uint32_t spin_us; /* launcherd --spin-us, and the driver polls results as long */
    int no_four;      /* bench_pipeline_overhead: skip the four-daemon run */
    uint32_t batches[LB_MAX_BATCHES], n_batches;
};

/* One decode step's timings (ns). */
struct lb_step {
    uint64_t wall;   /* driver: commit -> result read */
    uint64_t pickup; /* commit -> launcher picked the batch */
    uint64_t inside; /* launcher: picked -> result committed */
    uint64_t fwd;    /* model step */
    uint64_t smp;    /* sampling, appends, stop rules */
};

static inline int lb_usage(const char *prog, const char *what)
{
    fprintf(stderr,
            "usage: %s -m MODEL.gguf [--threads N] [--steps S] [--prompt P] [--reps R]\n"
            "          [--batches 1,8,16] [--spin-us N] [--launcherd PATH] [--no-four]\n%s",
            prog, what);
    return 2;
}

static inline int lb_parse(int argc, char **argv, struct lb_args *a, const char *what)
{
    memset(a, 0, sizeof(*a));
    a->steps = 64;
    a->prompt = 32;
    a->reps = 3;
    a->batches[0] = 1, a->batches[1] = 8, a->batches[2] = 16, a->n_batches = 3;
    char self[300];
    snprintf(self, sizeof(self), "%s", argv[0]);
    snprintf(a->bin, sizeof(a->bin), "%s/launcherd", dirname(self));
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0)
            return lb_usage(argv[0], what), 1;
        if (strcmp(o, "--no-four") == 0) {
            a->no_four = 1;
            continue;
        }
        if (v == NULL)
            return lb_usage(argv[0], what);
        i++;
        if (strcmp(o, "-m") == 0)
            a->model = v;
        else if (strcmp(o, "--threads") == 0)
            a->threads = atoi(v);
        else if (strcmp(o, "--steps") == 0)
            a->steps = (uint32_t)atoi(v);
        else if (strcmp(o, "--prompt") == 0)
            a->prompt = (uint32_t)atoi(v);
        else if (strcmp(o, "--reps") == 0)
            a->reps = (uint32_t)atoi(v);
        else if (strcmp(o, "--spin-us") == 0)
            a->spin_us = (uint32_t)atoi(v);
        else if (strcmp(o, "--launcherd") == 0)
            snprintf(a->bin, sizeof(a->bin), "%s", v);
        else if (strcmp(o, "--batches") == 0) {
            a->n_batches = 0;
            for (char *p = (char *)v; *p != '\0' && a->n_batches < LB_MAX_BATCHES;) {
                a->batches[a->n_batches++] = (uint32_t)strtoul(p, &p, 10);
                if (*p == ',')
                    p++;
            }
        } else
            return lb_usage(argv[0], what);
    }
    int ok = a->model != NULL && a->steps >= 1 && a->steps <= 4096 && a->prompt >= 1 &&
             a->prompt <= 4096 && a->reps >= 1 && a->reps <= 16 && a->n_batches >= 1;
    for (uint32_t i = 0; i < a->n_batches; i++)
        ok &= a->batches[i] >= 1 && a->batches[i] <= LD_MAX_SEQS;
    return ok ? 0 : lb_usage(argv[0], what);
}

static inline uint32_t lb_max_batch(const struct lb_args *a)
{
    uint32_t m = 1;
    for (uint32_t i = 0; i < a->n_batches; i++)
        m = a->batches[i] > m ? a->batches[i] : m;
    return m;
}

/* Prompt of request i: n pseudo-random ids in [3, n_vocab) (a fixed LCG). */
static inline void lb_prompt(uint32_t i, uint32_t n, uint32_t n_vocab, int32_t *out)
{
    uint64_t x = 0x9e3779b97f4a7c15ull * (i + 1);
    for (uint32_t k = 0; k < n; k++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        out[k] = (int32_t)(3 + (x >> 33) % (n_vocab - 3));
    }
}

/* The instance for these arguments, opened with launcherd started; 0 on success. */
static inline int lb_setup(struct ld *d, const struct lb_args *a, const char *tag, char *dir,
                           size_t dir_len)
{
    uint32_t b = lb_max_batch(a), ctx = a->prompt + a->steps + 2;
    ctx = (ctx + 15) / 16 * 16;
    uint32_t budget = b * a->prompt > b ? b * a->prompt : b;
    if (ld_config(d, a->model, tag, ctx, 4 * b, b, budget, 0) != 0)
        return -1;
    snprintf(dir, dir_len, "/tmp/ringserve-bench-%d", (int)getpid());
    mkdir(dir, 0700);
    char rundir[300], log[300];
    snprintf(rundir, sizeof(rundir), "%s/run", dir);
    snprintf(log, sizeof(log), "%s/launcherd.log", dir);
    static char threads[16], spin[16];
    snprintf(threads, sizeof(threads), "%d", a->threads);
    snprintf(spin, sizeof(spin), "%u", a->spin_us);
    d->extra[0] = "--threads";
    d->extra[1] = threads;
    d->extra[2] = "--spin-us";
    d->extra[3] = spin;
    d->n_extra = 4;
    d->spin_ns = (uint64_t)a->spin_us * 1000u;
    return ld_open(d, a->bin, rundir, log) != 0 || ld_spawn(d) != 0 ? -1 : 0;
}

/* A phase through launcherd: B requests, prefilled, then decoded one step at a time. */
struct lb_phase {
    struct ld_req q[LD_MAX_SEQS];
    uint32_t B;
};

/* Submits and admits B requests and runs their prefill step. 0 on success. */
static inline int lb_begin(struct ld *d, const struct lb_args *a, uint32_t B, struct lb_phase *ph)
{
    struct ld_req *q = ph->q;
    ph->B = 0;
    struct rs_sampling_params sp;
    rs_sampling_params_default(&sp);
    int32_t *prompt = malloc(a->prompt * sizeof(int32_t));
    if (prompt == NULL)
        return -1;
    for (uint32_t i = 0; i < B; i++) {
        lb_prompt(i, a->prompt, d->cfg.n_vocab, prompt);
        if (ld_submit(d, prompt, a->prompt, &sp, a->steps + 1, RS_PIPE_F_IGNORE_EOS, NULL, 0,
                      &q[i]) != 0)
            return free(prompt), -1;
        ph->B = i + 1;
        if (ld_admit(d, &q[i], i) != 0)
            return free(prompt), -1;
    }
    free(prompt);
    return ld_step(d, q, B, 0) == RS_PIPE_RESULT_OK ? 0 : -1; /* prefill */
}

/* Decode step k of the phase: timings into *st, token of request i into out[i * steps + k]. */
static inline int lb_decode(struct ld *d, const struct lb_args *a, struct lb_phase *ph, uint32_t k,
                            struct lb_step *st, int32_t *out)
{
    struct ld_seq seqs[LD_MAX_SEQS];
    for (uint32_t i = 0; i < ph->B; i++)
        seqs[i] = (struct ld_seq){&ph->q[i], ph->q[i].n_computed, 1};
    uint64_t id;
    if (ld_commit(d, seqs, ph->B, d->inc, &id) != 0)
        return -1;
    const struct rs_pipe_result *r = ld_result_for(d, id, 60000, NULL);
    if (r == NULL || r->status != RS_PIPE_RESULT_OK)
        return ld_fail("phase", "step failed");
    *st = (struct lb_step){.wall = d->last_seen_ns - d->last_planned_ns,
                           .pickup = r->picked_ns - d->last_planned_ns,
                           .inside = r->done_ns - r->picked_ns,
                           .fwd = r->forward_ns,
                           .smp = r->sample_ns};
    const struct rs_pipe_result_row *rows = rs_pipe_result_rows(r);
    for (uint32_t i = 0; i < ph->B; i++) {
        ph->q[i].n_computed = rows[i].computed;
        if (out != NULL)
            out[(size_t)i * a->steps + k] = rows[i].token;
    }
    return 0;
}

/* Frees the phase's requests (as postprocd would). */
static inline void lb_end(struct ld *d, struct lb_phase *ph)
{
    for (uint32_t i = 0; i < ph->B; i++)
        rs_arena_free_record(d->sched->tokens, d->sched->requests, ph->q[i].ref,
                             RS_PIPE_REQ_RUNNING);
}

/* A whole phase: begin, a->steps decode steps into st[], end. 0 on success. */
static inline int lb_run_phase(struct ld *d, const struct lb_args *a, uint32_t B,
                               struct lb_step *st, int32_t *out)
{
    static struct lb_phase ph;
    int rc = lb_begin(d, a, B, &ph);
    for (uint32_t k = 0; rc == 0 && k < a->steps; k++)
        rc = lb_decode(d, a, &ph, k, &st[k], out);
    lb_end(d, &ph);
    return rc;
}

static int lb_cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* Quantile q of n values (sorted in place), in microseconds. */
static inline double lb_q_us(uint64_t *v, uint32_t n, double q)
{
    qsort(v, n, sizeof(*v), lb_cmp_u64);
    uint32_t i = (uint32_t)(q * (n - 1) + 0.5);
    return (double)v[i] / 1e3;
}

static inline double lb_mean_us(const uint64_t *v, uint32_t n)
{
    double s = 0;
    for (uint32_t i = 0; i < n; i++)
        s += (double)v[i];
    return s / n / 1e3;
}

/* Field f of st[0..n) into v. */
#define LB_FIELD(v, st, n, f)                                                                      \
    for (uint32_t i_ = 0; i_ < (n); i_++)                                                          \
    (v)[i_] = (st)[i_].f

static inline void lb_cleanup(struct ld *d, const char *dir)
{
    char path[400];
    ld_close(d);
    snprintf(path, sizeof(path), "%s/launcherd.log", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/run/launcherd.door", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/run/schedulerd.door", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/run", dir);
    rmdir(path);
    rmdir(dir);
}

#endif

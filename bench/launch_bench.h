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
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/pipeline_req.h"
#include "common/opt.h"
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

static int lb_parse_bin(void *dst, const struct rs_opt *o, const char *v, char *err, size_t len)
{
    struct lb_args *a = dst;
    if (strlen(v) >= sizeof(a->bin)) {
        snprintf(err, len, "option --%s: path longer than %zu bytes", o->name, sizeof(a->bin) - 1);
        return -1;
    }
    snprintf(a->bin, sizeof(a->bin), "%s", v);
    return 0;
}

#define LB(f) offsetof(struct lb_args, f)
static const struct rs_opt lb_opts[] = {
    {.name = "model", .short_name = 'm', .kind = RS_OPT_ARG, .off = LB(model),
     .arg = "MODEL.gguf", .help = "the model (required)"},
    {.name = "threads", .kind = RS_OPT_INT, .off = LB(threads), .min = 0, .max = 1024,
     .arg = "N", .help = "model threads, launcherd and in-process (default 0: all CPUs)"},
    {.name = "steps", .kind = RS_OPT_U32, .off = LB(steps), .min = 1, .max = 4096, .arg = "S",
     .help = "decode steps per phase (default 64)"},
    {.name = "prompt", .kind = RS_OPT_U32, .off = LB(prompt), .min = 1, .max = 4096, .arg = "P",
     .help = "prompt tokens per request (default 32)"},
    {.name = "reps", .kind = RS_OPT_U32, .off = LB(reps), .min = 1, .max = 16, .arg = "R",
     .help = "phases per batch size (default 3)"},
    {.name = "batches", .kind = RS_OPT_U32_LIST, .off = LB(batches), .size = LB_MAX_BATCHES,
     .count_off = LB(n_batches), .min = 1, .max = LD_MAX_SEQS, .arg = "N,...",
     .help = "decode batch sizes (default 1,8,16)"},
    {.name = "spin-us", .kind = RS_OPT_U32, .off = LB(spin_us), .min = 0, .max = 1000000,
     .arg = "N", .help = "launcherd --spin-us; the driver polls results as long"},
    {.name = "launcherd", .kind = RS_OPT_CALL, .parse = lb_parse_bin, .arg = "PATH",
     .help = "the launcherd binary (default: beside this program)"},
    {.name = "no-four", .kind = RS_OPT_FLAG, .off = LB(no_four), .val = 1,
     .help = "bench_pipeline_overhead: skip the four-daemon run"},
    {0},
};

/* 0 to run, 1 after --help, 2 after printing a refusal. */
static inline int lb_parse(int argc, char **argv, struct lb_args *a, const char *what)
{
    memset(a, 0, sizeof(*a));
    a->steps = 64;
    a->prompt = 32;
    a->reps = 3;
    a->batches[0] = 1, a->batches[1] = 8, a->batches[2] = 16, a->n_batches = 3;
    char self[300], usage[600];
    snprintf(self, sizeof(self), "%s", argv[0]);
    snprintf(a->bin, sizeof(a->bin), "%s/launcherd", dirname(self));
    snprintf(usage, sizeof(usage), "usage: %s -m MODEL.gguf [options]\n%s", argv[0], what);
    struct rs_opt_group g = {NULL, lb_opts, a, NULL};
    int code = rs_opt_main(argv[0], usage, &g, 1, argc, argv, 0, NULL);
    if (code >= 0)
        return code == 0 ? 1 : code;
    if (a->model == NULL) {
        fprintf(stderr, "%s: -m MODEL.gguf is required\n", argv[0]);
        return 2;
    }
    return 0;
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

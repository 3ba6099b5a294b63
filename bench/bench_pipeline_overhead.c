/* SPDX-License-Identifier: MIT */
/*
 * bench_pipeline_overhead: runs the same batch sequence in-process
 * and through the daemons and prints the throughput ratio and the per-step
 * IPC cost in microseconds. The sequence: B requests with fixed pseudo-
 * random prompts, one prefill step, then S decode steps of B tokens (greedy,
 * ignore_eos), for each B of --batches. In-process: this program calls the
 * engine (rs_model_step over the same block tables) and the sampler
 * directly. Through launcherd: the real launcherd binary runs the model and
 * this program plays schedulerd (launch_driver.h), so the difference is
 * what the pipeline adds to a step on the launcher's side: batch and result
 * records in the rings, their checks and checksums, block tables and token
 * lists in shared memory, and the two doorbell hops (commit -> launcher,
 * result -> scheduler). The two runs go in lockstep, one step of each in
 * turn, so both see the same machine (this matters on a shared host). Both
 * must produce the same tokens (checked).
 * Then through all four daemons with a client (pipeline_four.h): the same
 * requests end to end, timed from the first submit to the last final, next
 * to the same in-process sequence (prefill + S decode steps); the per-step
 * cost there is (end-to-end - in-process) / (S + 1) steps, and the tokens
 * must match too. --no-four skips it.
 */
#include "bench/launch_bench.h"
#include "bench/pipeline_four.h"
#include "launcherd/engine/model.h"
#include "launcherd/engine/sampler.h"

struct inproc {
    rs_model *m;
    rs_kvcache *kv;
    rs_sampler *smp;
    float *lg;
    uint32_t n_vocab, mbps;
    uint32_t *tables; /* LD_MAX_SEQS x mbps */
    int32_t *ids;     /* LD_MAX_SEQS x n_ctx */
};

static int inproc_open(struct inproc *ip, const struct ld *d, const struct lb_args *a)
{
    struct rs_model_opts o;
    rs_model_opts_default(&o);
    o.n_threads = a->threads;
    o.max_batch_tokens = d->cfg.max_batched_tokens;
    char err[256];
    if (rs_model_load(d->cfg.model_path, &o, &ip->m, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "bench_pipeline_overhead: %s\n", err);
        return -1;
    }
    ip->n_vocab = rs_model_hparams(ip->m)->n_vocab;
    ip->mbps = d->cfg.max_blocks_per_seq;
    ip->lg = malloc(ip->n_vocab * sizeof(float));
    ip->tables = malloc((size_t)LD_MAX_SEQS * ip->mbps * sizeof(uint32_t));
    ip->ids = malloc((size_t)LD_MAX_SEQS * d->cfg.n_ctx * sizeof(int32_t));
    if (ip->lg == NULL || ip->tables == NULL || ip->ids == NULL ||
        rs_kvcache_create(ip->m, d->cfg.n_kv_blocks, d->cfg.block_size, &ip->kv) != RS_OK ||
        rs_sampler_create((int32_t)ip->n_vocab, &ip->smp) != RS_OK)
        return -1;
    for (uint32_t s = 0; s < d->cfg.max_seqs && s < LD_MAX_SEQS; s++)
        for (uint32_t j = 0; j < ip->mbps; j++)
            ip->tables[s * ip->mbps + j] = ld_block(d, s, j); /* launcherd's tables, same blocks */
    return 0;
}

static void inproc_close(struct inproc *ip)
{
    rs_sampler_destroy(&ip->smp);
    rs_kvcache_destroy(&ip->kv);
    rs_model_destroy(&ip->m);
    free(ip->lg);
    free(ip->tables);
    free(ip->ids);
}

/* One step over seqs, then greedy sampling of each row into ids at position at[i]. */
static int inproc_step(struct inproc *ip, struct rs_model_seq *seqs, uint32_t B, uint32_t n_ctx,
                       const uint32_t *at, uint64_t k)
{
    struct rs_sampling_params sp;
    rs_sampling_params_default(&sp);
    if (rs_model_step(ip->m, ip->kv, seqs, B) != RS_OK)
        return -1;
    for (uint32_t i = 0; i < B; i++) {
        struct rs_sample_result r;
        memcpy(ip->lg, rs_model_logits(ip->m, i), ip->n_vocab * sizeof(float));
        if (rs_sampler_sample(ip->smp, &sp, ip->lg, NULL, 0, 0, k, &r) != RS_OK)
            return -1;
        ip->ids[(size_t)i * n_ctx + at[i]] = r.token;
    }
    return 0;
}

/* The in-process twin of lb_begin: B prompts (the same ones) prefilled over the same tables. */
static int inproc_begin(struct inproc *ip, const struct ld *d, const struct lb_args *a, uint32_t B)
{
    uint32_t P = a->prompt, n_ctx = d->cfg.n_ctx, at[LD_MAX_SEQS];
    struct rs_model_seq seqs[LD_MAX_SEQS];
    for (uint32_t i = 0; i < B; i++) {
        int32_t *ids = ip->ids + (size_t)i * n_ctx;
        lb_prompt(i, P, ip->n_vocab, ids);
        seqs[i] = (struct rs_model_seq){ids, P, 0, ip->tables + (size_t)i * ip->mbps, ip->mbps, 1};
        at[i] = P;
    }
    return inproc_step(ip, seqs, B, n_ctx, at, 0);
}

/* The twin of lb_decode: step k's time into *ns, outputs into out. */
static int inproc_decode(struct inproc *ip, const struct ld *d, const struct lb_args *a, uint32_t B,
                         uint32_t k, uint64_t *ns, int32_t *out)
{
    uint32_t P = a->prompt, n_ctx = d->cfg.n_ctx, at[LD_MAX_SEQS];
    struct rs_model_seq seqs[LD_MAX_SEQS];
    for (uint32_t i = 0; i < B; i++) {
        seqs[i] = (struct rs_model_seq){ip->ids + (size_t)i * n_ctx + P + k, 1,        P + k,
                                        ip->tables + (size_t)i * ip->mbps,   ip->mbps, 1};
        at[i] = P + k + 1;
    }
    uint64_t t0 = rs_clock_ns();
    if (inproc_step(ip, seqs, B, n_ctx, at, k + 1) != 0)
        return -1;
    *ns = rs_clock_ns() - t0;
    for (uint32_t i = 0; i < B; i++)
        out[(size_t)i * a->steps + k] = ip->ids[(size_t)i * n_ctx + P + k + 1];
    return 0;
}

/* One phase of both, in lockstep (which runs first alternates per step). */
static int both_phase(struct inproc *ip, struct ld *d, const struct lb_args *a, uint32_t B,
                      uint64_t *ns, struct lb_step *st, int32_t *o1, int32_t *o2,
                      uint64_t *prefill_ns)
{
    static struct lb_phase ph;
    uint64_t t0 = rs_clock_ns();
    int rc = inproc_begin(ip, d, a, B) != 0;
    *prefill_ns = rs_clock_ns() - t0;
    rc = rc || lb_begin(d, a, B, &ph) != 0;
    for (uint32_t k = 0; rc == 0 && k < a->steps; k++) {
        if (k % 2 == 0)
            rc = inproc_decode(ip, d, a, B, k, &ns[k], o1) != 0 ||
                 lb_decode(d, a, &ph, k, &st[k], o2) != 0;
        else
            rc = lb_decode(d, a, &ph, k, &st[k], o2) != 0 ||
                 inproc_decode(ip, d, a, B, k, &ns[k], o1) != 0;
    }
    lb_end(d, &ph);
    return rc;
}

static void report(uint32_t B, uint64_t *inproc, struct lb_step *st, uint32_t n, uint64_t *v,
                   int same)
{
    double in_mean = lb_mean_us(inproc, n), in_p50 = lb_q_us(inproc, n, 0.5);
    for (uint32_t i = 0; i < n; i++)
        v[i] = st[i].wall - st[i].fwd - st[i].smp;
    double d_mean = lb_mean_us(v, n), d_p50 = lb_q_us(v, n, 0.5), d_p99 = lb_q_us(v, n, 0.99);
    LB_FIELD(v, st, n, wall);
    double la_mean = lb_mean_us(v, n), la_p50 = lb_q_us(v, n, 0.5);
    printf("batch %2u: in-process %9.1f tok/s (step %.1f us, p50 %.1f) | through launcherd "
           "%9.1f tok/s (step %.1f us, p50 %.1f)\n",
           B, 1e6 * B / in_mean, in_mean, in_p50, 1e6 * B / la_mean, la_mean, la_p50);
    printf("          throughput ratio launcherd/in-process %.3f; per-step IPC cost: difference "
           "%.1f us mean, %.1f us p50 (%.2f%% of the in-process step); measured directly (step "
           "minus the launcher's forward and sampling) %.1f us mean, p50 %.1f, p99 %.1f "
           "(%.2f%%); tokens %s\n",
           in_mean / la_mean, la_mean - in_mean, la_p50 - in_p50,
           100.0 * (la_mean - in_mean) / in_mean, d_mean, d_p50, d_p99, 100.0 * d_mean / la_mean,
           same ? "identical" : "DIFFER");
}

/* The four-daemon run's tokens against the in-process ones (output 0, then o1's). */
static int four_same(const struct inproc *ip, const struct ld *d, const struct lb_args *a,
                     uint32_t B, const int32_t *o1)
{
    for (uint32_t i = 0; i < B; i++) {
        const int32_t *t = F.tok + (size_t)i * (a->steps + 1);
        if (F.got[i] != a->steps + 1 || t[0] != ip->ids[(size_t)i * d->cfg.n_ctx + a->prompt] ||
            memcmp(t + 1, o1 + (size_t)i * a->steps, a->steps * sizeof(int32_t)) != 0)
            return 0;
    }
    return 1;
}

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static void report_four(uint32_t B, const struct lb_args *a, uint64_t *t_in, uint64_t *t4, int same)
{
    qsort(t_in, a->reps, sizeof(*t_in), cmp_u64);
    qsort(t4, a->reps, sizeof(*t4), cmp_u64);
    double in = (double)t_in[a->reps / 2], e2e = (double)t4[a->reps / 2];
    double toks = (double)B * (a->steps + 1);
    printf("          four daemons + client: %9.1f tok/s (in-process %9.1f, same %u steps); "
           "ratio %.3f; per-step cost %.1f us (median of %u); tokens %s\n",
           toks * 1e9 / e2e, toks * 1e9 / in, a->steps + 1, in / e2e,
           (e2e - in) / 1e3 / (a->steps + 1), a->reps, same ? "identical" : "DIFFER");
}

int main(int argc, char **argv)
{
    struct lb_args a;
    int rc = lb_parse(argc, argv, &a,
                      "Runs one batch sequence in-process and through launcherd (this program\n"
                      "plays schedulerd) and prints the throughput ratio and per-step IPC cost.\n");
    if (rc != 0)
        return rc == 1 ? 0 : rc;
    static struct ld d;
    static struct inproc ip;
    char dir[200];
    if (lb_setup(&d, &a, "po", dir, sizeof(dir)) != 0 || inproc_open(&ip, &d, &a) != 0)
        return 1;
    printf("%s: %s, %d threads (0 = all CPUs), launcherd spin %u us; %u-token prompts, %u decode "
           "steps x %u phases, in lockstep\n",
           argv[0], a.model, a.threads, a.spin_us, a.prompt, a.steps, a.reps);
    uint32_t n = a.steps * a.reps, bmax = lb_max_batch(&a);
    struct lb_step *st = calloc(n, sizeof(*st));
    uint64_t *v = calloc(n, sizeof(*v)), *in = calloc(n, sizeof(*in));
    int32_t *o1 = calloc((size_t)bmax * a.steps, sizeof(int32_t));
    int32_t *o2 = calloc((size_t)bmax * a.steps, sizeof(int32_t));
    rc = st == NULL || v == NULL || in == NULL || o1 == NULL || o2 == NULL;
    int four = !a.no_four && rc == 0;
    if (four && four_open(&d, &a) != 0) {
        printf("four-daemon run skipped: the daemons or the client did not start (logs above)\n");
        four_close();
        four = 0;
    }
    for (uint32_t bi = 0; rc == 0 && bi < a.n_batches; bi++) {
        uint32_t B = a.batches[bi];
        int same = 1, same4 = 1;
        uint64_t t_in[16], t4[16];
        for (uint32_t r = 0; rc == 0 && r < a.reps; r++) {
            uint64_t pre = 0;
            rc = both_phase(&ip, &d, &a, B, in + (size_t)r * a.steps, st + (size_t)r * a.steps, o1,
                            o2, &pre);
            same &= memcmp(o1, o2, (size_t)B * a.steps * sizeof(int32_t)) == 0;
            t_in[r] = pre;
            for (uint32_t k = 0; k < a.steps; k++)
                t_in[r] += in[(size_t)r * a.steps + k];
            if (rc == 0 && four) {
                rc = four_phase(&a, B, &t4[r]);
                same4 &= four_same(&ip, &d, &a, B, o1);
            }
        }
        if (rc == 0)
            report(B, in, st, n, v, same);
        if (rc == 0 && four)
            report_four(B, &a, t_in, t4, same4);
        rc |= !same || !same4;
    }
    if (four)
        four_close();
    free(st);
    free(v);
    free(in);
    free(o1);
    free(o2);
    inproc_close(&ip);
    lb_cleanup(&d, dir);
    return rc == 0 ? 0 : 1;
}

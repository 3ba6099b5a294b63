/* SPDX-License-Identifier: MIT */
/*
 * bench_decode: speed of the CPU model runtime on one GGUF. Prints prompt
 * (prefill) tokens/s for one long prompt, aggregate decode tokens/s at
 * several batch sizes, and batch-1 decode as a fraction of the memory
 * bandwidth bound (weight bytes read per token / bandwidth), with the
 * bandwidth measured in the same run by a multi-threaded streaming read of
 * a buffer far larger than the last-level cache.
 * Leaves out: sampling and tokenization (greedy ids are picked by argmax,
 * outside the timed region), which bench/ has other programs for.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <immintrin.h>

#include "common/clock.h"
#include "common/gguf.h"
#include "common/opt.h"
#include "launcherd/engine/model.h"

#define BW_BYTES (1024ull << 20) /* 1 GiB: 32x a 32 MiB L3 */
#define MAX_BATCH 256

struct bw_arg {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
};

static void *bw_thread(void *a)
{
    struct bw_arg *b = a;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= b->n; i += 4) {
        s0 += b->p[i];
        s1 += b->p[i + 1];
        s2 += b->p[i + 2];
        s3 += b->p[i + 3];
    }
    b->sum = s0 + s1 + s2 + s3;
    return NULL;
}

/* Best of `reps` streaming reads of 1 GiB split over n threads, in bytes/s. */
static double measure_bandwidth(int n, int reps)
{
    /* 2 MB pages, as the model's weights get (rs_gguf_open_private): the bound is what
     * the memory gives, not what 4 KB TLB misses leave of it. */
    uint64_t *buf = mmap(NULL, BW_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                         -1, 0);
    if (buf == MAP_FAILED)
        return 0;
    (void)madvise(buf, BW_BYTES, MADV_HUGEPAGE);
    memset(buf, 1, BW_BYTES);
    double best = 0;
    for (int rep = 0; rep < reps; rep++) {
        pthread_t th[64];
        struct bw_arg args[64];
        size_t words = BW_BYTES / 8, per = words / (size_t)n;
        uint64_t t0 = rs_clock_ns();
        for (int i = 0; i < n; i++) {
            args[i] = (struct bw_arg){buf + (size_t)i * per, per, 0};
            pthread_create(&th[i], NULL, bw_thread, &args[i]);
        }
        uint64_t sum = 0;
        for (int i = 0; i < n; i++) {
            pthread_join(th[i], NULL);
            sum += args[i].sum;
        }
        double bw = (double)BW_BYTES / ((double)(rs_clock_ns() - t0) * 1e-9);
        if (sum == 42) /* keep the sum live */
            fprintf(stderr, "?");
        best = bw > best ? bw : best;
    }
    munmap(buf, BW_BYTES);
    return best;
}

/* Bytes of weights one decode token reads: every tensor, but one row of the embedding. */
static double weight_bytes_per_token(const rs_model *m)
{
    const rs_gguf *g = rs_model_gguf(m);
    const struct rs_model_hparams *hp = rs_model_hparams(m);
    double total = 0;
    for (uint64_t i = 0; i < rs_gguf_n_tensors(g); i++) {
        const struct rs_gguf_tensor *t = rs_gguf_tensor(g, i);
        if (strcmp(t->name, "token_embd.weight") == 0 && !hp->tied_output)
            total += (double)t->nbytes / (double)t->ne[1];
        else
            total += (double)t->nbytes;
    }
    return total;
}

/*
 * Floating-point operations of one prompt of len tokens: 2 per weight of every
 * layer matrix per token, attention's q.k and p.v over the causal prefix
 * (2 x 2 x head_dim per visible position and head), and the output matrix
 * for the one row whose logits are asked for.
 */
static double prompt_flops(const rs_model *m, uint32_t len)
{
    const rs_gguf *g = rs_model_gguf(m);
    const struct rs_model_hparams *hp = rs_model_hparams(m);
    double layer = 0, out = 0;
    for (uint64_t i = 0; i < rs_gguf_n_tensors(g); i++) {
        const struct rs_gguf_tensor *t = rs_gguf_tensor(g, i);
        double n = (double)t->ne[0] * (double)t->ne[1];
        if (strncmp(t->name, "blk.", 4) == 0 && t->n_dims == 2)
            layer += n;
        else if (strcmp(t->name, "output.weight") == 0 ||
                 (hp->tied_output && strcmp(t->name, "token_embd.weight") == 0))
            out = n;
    }
    double attn = 4.0 * hp->head_dim * hp->n_heads * hp->n_layers * ((double)len * (len + 1) / 2);
    return 2.0 * layer * len + attn + 2.0 * out;
}

/* This thread's CPU time in ns: the peak is per CPU-second, so a shared core does not lower it. */
static uint64_t thread_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/*
 * The core's FMA peak in FLOP per CPU-second, summed over n threads, measured now: 12 independent
 * FMA chains (enough to cover the FMA latency on two pipes), 2 flops per lane each, in 256-bit
 * registers and, where the CPU has AVX-512, in 512-bit ones; the larger is the peak (a Zen 4
 * core runs a 512-bit FMA as two 256-bit halves, a Xeon with two 512-bit FMA units twice as
 * fast as a 256-bit one). out[0]: FLOP/s; out[1]: a sink; out[2]: 1 for the 512-bit pass.
 */
__attribute__((target("avx2,fma"))) static double fma_chains256(long iters, float *sink)
{
    __m256 a[12], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++)
        a[i] = _mm256_set1_ps((float)i);
    uint64_t t0 = thread_ns();
    for (long k = 0; k < iters; k++) {
        /* fully unrolled, so the 12 chains live in registers (checked in the disassembly) */
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++)
            a[i] = _mm256_fmadd_ps(a[i], m, c);
    }
    double ns = (double)(thread_ns() - t0);
    for (int i = 0; i < 12; i++)
        *sink += _mm256_cvtss_f32(a[i]);
    return (double)iters * 12 * 16 / (ns * 1e-9);
}

__attribute__((target("avx512f"))) static double fma_chains512(long iters, float *sink)
{
    __m512 a[12], m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++)
        a[i] = _mm512_set1_ps((float)i);
    uint64_t t0 = thread_ns();
    for (long k = 0; k < iters; k++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++)
            a[i] = _mm512_fmadd_ps(a[i], m, c);
    }
    double ns = (double)(thread_ns() - t0);
    for (int i = 0; i < 12; i++)
        *sink += _mm512_cvtss_f32(a[i]);
    return (double)iters * 12 * 32 / (ns * 1e-9);
}

static void *fma_thread(void *arg)
{
    double *out = arg;
    float sink = 0;
    const long iters = 20000000;
    out[0] = fma_chains256(iters, &sink);
    out[2] = 0;
    if (__builtin_cpu_supports("avx512f")) {
        double wide = fma_chains512(iters / 2, &sink);
        if (wide > out[0])
            out[0] = wide, out[2] = 1;
    }
    out[1] = sink;
    return NULL;
}

static int peak_is_512; /* the 512-bit chains gave the peak (printed with it) */

static double measure_fma_peak(int n)
{
    pthread_t th[64];
    double res[64][3];
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, fma_thread, res[i]);
    double total = 0;
    peak_is_512 = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        total += res[i][0];
        peak_is_512 |= res[i][2] != 0;
    }
    return total;
}

static uint32_t next_block, blocks_per_seq;

/*
 * CPUs the process used during a timed region (process CPU time / wall
 * time). On a shared host it shows whether a figure was measured with the
 * cores to itself: about the thread count when it was.
 */
static double last_cpus;

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct seq {
    int32_t toks[4096];
    uint32_t n;
    uint32_t table[4096 / 16 + 1];
};

static void seq_init(struct seq *s, uint32_t prompt, uint32_t vocab, unsigned seed)
{
    s->n = prompt;
    for (uint32_t i = 0; i < prompt; i++)
        s->toks[i] = (int32_t)(1 + (seed * 7919u + i * 104729u) % (vocab - 1));
    for (uint32_t b = 0; b < blocks_per_seq; b++)
        s->table[b] = next_block++;
}

static int argmax(const float *v, uint32_t n)
{
    int best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = (int)i;
    return best;
}

/* Prefills every sequence (untimed, in chunks of `chunk`), then times `steps` decode steps. */
static double run_decode(rs_model *m, rs_kvcache *kv, struct seq *seqs, int n, uint32_t steps,
                         uint32_t chunk)
{
    struct rs_model_seq b[MAX_BATCH];
    uint32_t vocab = rs_model_hparams(m)->n_vocab;
    for (int i = 0; i < n; i++)
        for (uint32_t p = 0; p < seqs[i].n; p += chunk) {
            uint32_t c = seqs[i].n - p < chunk ? seqs[i].n - p : chunk;
            b[0] = (struct rs_model_seq){seqs[i].toks + p, c, p, seqs[i].table, blocks_per_seq, 1};
            if (rs_model_step(m, kv, b, 1) != RS_OK)
                return -1;
            if (p + c == seqs[i].n)
                seqs[i].toks[seqs[i].n] = argmax(rs_model_logits(m, 0), vocab);
        }
    uint64_t t0 = rs_clock_ns(), c0 = cpu_ns();
    for (uint32_t s = 0; s < steps; s++) {
        for (int i = 0; i < n; i++)
            b[i] = (struct rs_model_seq){seqs[i].toks + seqs[i].n, 1, seqs[i].n, seqs[i].table,
                                         blocks_per_seq, 1};
        if (rs_model_step(m, kv, b, (uint32_t)n) != RS_OK)
            return -1;
        for (int i = 0; i < n; i++) {
            seqs[i].n++;
            seqs[i].toks[seqs[i].n] = argmax(rs_model_logits(m, (uint32_t)i), vocab);
        }
    }
    double wall = (double)(rs_clock_ns() - t0);
    last_cpus = (double)(cpu_ns() - c0) / wall;
    return (double)n * steps / (wall * 1e-9);
}

static double run_prompt(rs_model *m, rs_kvcache *kv, uint32_t len, int reps)
{
    double best = 0, best_cpus = 0;
    uint32_t vocab = rs_model_hparams(m)->n_vocab;
    for (int r = 0; r < reps; r++) {
        static struct seq s;
        next_block = 0; /* each rep overwrites the same blocks */
        seq_init(&s, len, vocab, (unsigned)r + 100);
        struct rs_model_seq b = {s.toks, len, 0, s.table, blocks_per_seq, 1};
        uint64_t t0 = rs_clock_ns(), c0 = cpu_ns();
        if (rs_model_step(m, kv, &b, 1) != RS_OK)
            return -1;
        double wall = (double)(rs_clock_ns() - t0), tps = len / (wall * 1e-9);
        if (tps > best) {
            best = tps;
            best_cpus = (double)(cpu_ns() - c0) / wall;
        }
    }
    last_cpus = best_cpus;
    return best;
}

struct args {
    const char *model;
    int threads, isa, reps, dot;
    uint32_t nb, batches[16];
    uint32_t prompt, steps, context;
};

#define A(f) offsetof(struct args, f)
static const struct rs_opt opts[] = {
    {.name = "model", .short_name = 'm', .kind = RS_OPT_ARG, .off = A(model), .arg = "MODEL.gguf",
     .help = "the model (required)"},
    {.name = "threads", .kind = RS_OPT_INT, .off = A(threads), .min = 0, .max = 1024, .arg = "N",
     .help = "model threads (default 0: every CPU)"},
    {.name = "prompt", .kind = RS_OPT_U32, .off = A(prompt), .min = 1, .max = 4000, .arg = "N",
     .help = "prompt tokens of the prefill figure (default 512)"},
    {.name = "batches", .kind = RS_OPT_U32_LIST, .off = A(batches), .size = 16,
     .count_off = A(nb), .min = 1, .max = MAX_BATCH, .arg = "N,...",
     .help = "decode batch sizes (default 1,8,16,32)"},
    {.name = "steps", .kind = RS_OPT_U32, .off = A(steps), .min = 1, .max = 3999, .arg = "N",
     .help = "decode steps per run (default 64)"},
    {.name = "context", .kind = RS_OPT_U32, .off = A(context), .min = 1, .max = 3999, .arg = "N",
     .help = "tokens already in each sequence (default 64)"},
    {.name = "reps", .kind = RS_OPT_INT, .off = A(reps), .min = 1, .max = 1000, .arg = "N",
     .help = "runs per figure, the best is shown (the host may be shared; default 3)"},
    {.name = "isa", .kind = RS_OPT_CHOICE, .off = A(isa), .choices = rs_model_isa_names,
     .choice_vals = rs_model_isa_values, .arg = "auto|avx512|avx2|portable",
     .help = "CPU kernels (default auto)"},
    {.name = "exact-dot", .kind = RS_OPT_FLAG, .off = A(dot), .val = RS_MODEL_DOT_EXACT,
     .help = "every quantized weight widened to F32 (default: as launcherd)"},
    {.name = "int8-dot", .kind = RS_OPT_FLAG, .off = A(dot), .val = RS_MODEL_DOT_INT8,
     .help = "integer dot products over 8-bit activations"},
    {0},
};

/* -1 to run, else the exit code. */
static int parse(int argc, char **argv, struct args *a)
{
    *a = (struct args){NULL, 0, RS_MODEL_ISA_AUTO, 3, RS_MODEL_DOT_AUTO, 4, {1, 8, 16, 32}, 512, 64, 64};
    struct rs_opt_group g = {NULL, opts, a, NULL};
    int code = rs_opt_main("bench_decode",
                           "usage: bench_decode -m MODEL.gguf [options]\n"
                           "Prompt and decode throughput of one model on the CPU backend.\n",
                           &g, 1, argc, argv, 0, NULL);
    if (code >= 0)
        return code;
    if (a->model == NULL || a->context + a->steps > 4000) {
        fprintf(stderr, "bench_decode: -m MODEL is required and --context + --steps <= 4000\n");
        return 2;
    }
    return -1;
}

/* Best of a->reps decode runs at batch n (the host is shared); last_cpus is the best run's. */
static double best_decode(rs_model *m, rs_kvcache *kv, const struct args *a, int n)
{
    static struct seq seqs[MAX_BATCH];
    double tps = 0, cpus = 0;
    for (int r = 0; r < a->reps; r++) {
        next_block = 0;
        for (int s = 0; s < n; s++)
            seq_init(&seqs[s], a->context, rs_model_hparams(m)->n_vocab, (unsigned)s);
        double t = run_decode(m, kv, seqs, n, a->steps, 256);
        if (t > tps) {
            tps = t;
            cpus = last_cpus;
        }
    }
    last_cpus = cpus;
    return tps;
}

int main(int argc, char **argv)
{
    struct args a;
    int code = parse(argc, argv, &a);
    if (code >= 0)
        return code;
    struct rs_model_opts o;
    rs_model_opts_default(&o);
    o.n_threads = a.threads;
    o.isa = a.isa;
    o.dot = a.dot;
    rs_model *m;
    char err[256];
    if (rs_model_load(a.model, &o, &m, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "bench_decode: %s\n", err);
        return 1;
    }
    const struct rs_model_hparams *hp = rs_model_hparams(m);
    uint32_t longest = a.prompt > a.context + a.steps ? a.prompt : a.context + a.steps;
    longest = longest < 64 ? 64 : longest; /* the warm-up prompt */
    int most = 1;
    for (uint32_t i = 0; i < a.nb; i++)
        most = (int)a.batches[i] > most ? (int)a.batches[i] : most;
    blocks_per_seq = longest / 16 + 2;
    rs_kvcache *kv;
    if (rs_kvcache_create(m, blocks_per_seq * (uint32_t)(most + 4), 16, &kv) != RS_OK)
        return 1;
    double wbytes = weight_bytes_per_token(m);
    printf("model %s: dim %u, %u layers, %u heads (%u kv), ffn %u, vocab %u; %s\n", a.model,
           hp->dim, hp->n_layers, hp->n_heads, hp->n_kv_heads, hp->ffn_dim, hp->n_vocab,
           rs_model_describe(m));
    next_block = 0;
    run_prompt(m, kv, 64, 1); /* warm-up: faults the weights in */
    next_block = 0;
    double ptps = run_prompt(m, kv, a.prompt, a.reps);
    printf("prompt  %4u tokens: %8.1f tok/s   (%.2f CPUs busy)\n", a.prompt, ptps, last_cpus);
    double pcpus = last_cpus;
    double tps1 = 0;
    for (uint32_t i = 0; i < a.nb; i++) {
        double tps = best_decode(m, kv, &a, (int)a.batches[i]);
        tps1 = a.batches[i] == 1 ? tps : tps1;
        printf("decode batch %3u (context %u..%u): %8.1f tok/s aggregate   (%.2f CPUs busy)\n",
               a.batches[i], a.context, a.context + a.steps, tps, last_cpus);
    }
    int n_bw = o.n_threads > 0 ? o.n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    n_bw = n_bw < 1 ? 1 : n_bw > 64 ? 64 : n_bw; /* bw_thread array size */
    double bw = measure_bandwidth(n_bw, a.reps > 3 ? a.reps : 3);
    printf("weights read per token: %.1f MB; memory bandwidth (%d-thread read): %.1f GB/s\n",
           wbytes / 1e6, n_bw, bw / 1e9);
    if (tps1 > 0) {
        printf("batch-1 decode: %.1f tok/s = %.2f of the bandwidth bound (%.1f tok/s)\n", tps1,
               tps1 / (bw / wbytes), bw / wbytes);
        /* The cache's keys and values are read each step too (F32, from DRAM: the weights
         * streamed through the caches since); the bound above counts the weights alone. */
        double ctx = a.context + (a.steps + 1) / 2.0;
        double kvb = ctx * hp->n_layers * hp->n_kv_heads * hp->head_dim * 2 * sizeof(float);
        printf("batch-1 decode with the KV cache's reads (%.1f MB a token at mean context %.0f): "
               "%.2f of that bound (%.1f tok/s)\n", kvb / 1e6, ctx,
               tps1 / (bw / (wbytes + kvb)), bw / (wbytes + kvb));
    }
    /* Both per CPU-second: the prompt's FLOP/s over the CPUs it had, the peak per thread. */
    double peak = measure_fma_peak(n_bw) / n_bw;
    double fl = prompt_flops(m, a.prompt) / a.prompt * ptps / (pcpus > 0 ? pcpus : 1);
    printf("prompt: %.1f GFLOP/s per busy CPU = %.2f of the FMA peak (%.1f GFLOP/s per CPU, "
           "%s-bit FMAs)\n", fl / 1e9, fl / peak, peak / 1e9, peak_is_512 ? "512" : "256");
    rs_kvcache_destroy(&kv);
    rs_model_destroy(&m);
    return 0;
}

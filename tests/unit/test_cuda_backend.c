/* SPDX-License-Identifier: MIT */
/*
 * The CUDA backend (launcherd/cuda/) through the public model API.
 * Everywhere: backend selection ("cuda" with no device fails cleanly with
 * RS_EDEVICE and one "no CUDA device" line; "auto" falls back to the CPU
 * and logs its choice; the CPU has no device sampler). On a GPU host (these
 * cases skip with 77 where no device is found, as in CI; tests/gpu/run.sh
 * runs them there): CUDA vs CPU logits for every wanted row of mixed
 * prefill/decode batches on stories260K and random 768-dim F32, F16, BF16
 * and Q8_0 models, and on every architecture (the refdata/arch models, whose
 * GPU greedy ids must also equal llama.cpp's, and random F16 shapes of each
 * architecture), within the tolerances below, printed each time; greedy
 * stories260K ids equal to the published ones with device sampling; the
 * device sampler equal to the CPU sampler on the same logits (tokens, top
 * ids, logprobs; greedy, temperature, top-k, top-p, min-p); deterministic mode bitwise batch
 * invariant; decode graphs bitwise equal to eager steps; tokens read from a cudaHostRegister'd
 * shared-memory segment, registered again after a re-attach.
 */
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/mask_apply.h"
#include "ipc/shm.h"
#include "launcherd/engine/model.h"
#include "launcherd/engine/sampler.h"
#include "tests/rs_test.h"
#include "tests/unit/engine_testutil.h"
#ifdef RS_HAVE_CUDA
#include "launcherd/cuda/cuda_mask.h"
#endif

/*
 * Tolerances: max |cuda - cpu| over a row's logits, divided by max(1, max |cpu|).
 * F32 and Q8_0 weights keep F32 activations on both sides (only the summation
 * order differs); F16/BF16 batches over 8 rows go through cuBLAS with
 * activations rounded to the weight type.
 */
#define TOL_F32 2e-3
#define TOL_F16 2e-2
#define TOL_BF16 6e-2
#define TOL_Q8_0 2e-3

static int load(const char *path, const char *backend, rs_model **m)
{
    struct rs_model_opts o;
    char err[256];
    rs_model_opts_default(&o);
    o.backend = backend;
    rs_err rc = rs_model_load(path, &o, m, err, sizeof(err));
    if (rc != RS_OK)
        fprintf(stderr, "load %s on %s: %s (%s)\n", path, backend, rs_strerror(rc), err);
    return rc;
}

/* RS_REQUIRE_GPU set and not empty: this host has a GPU (tests/gpu/run.sh). */
static int gpu_required(void)
{
    const char *v = getenv("RS_REQUIRE_GPU");
    return v != NULL && v[0] != '\0';
}

/*
 * RS_OK with *m loaded on the GPU, or RS_TEST_SKIP where there is none. On a
 * GPU host (RS_REQUIRE_GPU set, as tests/gpu/run.sh does) a load that fails
 * is a failure: every CUDA error at load also reads RS_EDEVICE.
 */
static int load_gpu(const char *path, rs_model **m)
{
    rs_err rc = load(path, "cuda", m);
    if ((rc == RS_EDEVICE || rc == RS_EINVAL) && !gpu_required())
        return RS_TEST_SKIP; /* no device; or a build without CUDA */
    return rc == RS_OK ? 0 : 1;
}

static const char *stories(char *buf, size_t len)
{
    return rs_test_refdata("stories260K.gguf", buf, len);
}

/* Runs fn with stderr going to a file; returns what was written (static buffer). */
static const char *capture_stderr(rs_err (*fn)(void *), void *arg, rs_err *rc)
{
    static char out[8192];
    char path[512];
    snprintf(path, sizeof(path), "%s/stderr.txt", rs_test_tmpdir());
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    *rc = fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, sizeof(out) - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
    return out;
}

struct load_arg {
    const char *path, *backend;
    rs_model *m;
};

static rs_err load_fn(void *a)
{
    struct load_arg *l = a;
    struct rs_model_opts o;
    char err[256];
    rs_model_opts_default(&o);
    o.backend = l->backend;
    return rs_model_load(l->path, &o, &l->m, err, sizeof(err));
}

static int test_no_device_fails_cleanly(void)
{
    char path[1024];
    if (stories(path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    struct load_arg a = {path, "cuda", NULL};
    rs_err rc;
    const char *log = capture_stderr(load_fn, &a, &rc);
    if (rc == RS_OK) { /* a GPU host: the backend loaded */
        RS_CHECK(strncmp(rs_model_describe(a.m), "cuda", 4) == 0);
        rs_model_destroy(&a.m);
        return 0;
    }
#ifdef RS_HAVE_CUDA
    RS_CHECK_MSG(!gpu_required(), "GPU host, yet: %s", log);
    RS_CHECK_MSG(rc == RS_EDEVICE, "%s", rs_strerror(rc));
    RS_CHECK_MSG(strstr(log, "no CUDA device") != NULL, "log: %s", log);
#else
    RS_CHECK_MSG(rc == RS_EINVAL && strstr(log, "unknown backend"), "%s: %s", rs_strerror(rc), log);
#endif
    RS_CHECK(a.m == NULL);
    return 0;
}

static int test_auto_falls_back_to_cpu_and_says_so(void)
{
    char path[1024];
    if (stories(path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    struct load_arg a = {path, "auto", NULL};
    rs_err rc;
    const char *log = capture_stderr(load_fn, &a, &rc);
    RS_CHECK_MSG(rc == RS_OK, "%s: %s", rs_strerror(rc), log);
    const char *d = rs_model_describe(a.m);
    int gpu = strncmp(d, "cuda", 4) == 0;
    RS_CHECK_MSG(gpu || !gpu_required(), "GPU host, yet: %s", log);
    RS_CHECK_MSG(gpu || strncmp(d, "cpu", 3) == 0, "%s", d);
    RS_CHECK_MSG(strstr(log, gpu ? "backend auto chose cuda" : "backend auto chose cpu"), "%s",
                 log);
#ifdef RS_HAVE_CUDA
    if (!gpu)
        RS_CHECK_MSG(strstr(log, "no CUDA device") && strstr(log, "falling back"), "%s", log);
#endif
    /* The chosen backend runs: one greedy step gives BOS's published successor. */
    rs_kvcache *kv;
    uint32_t table[4] = {3, 2, 1, 0};
    int32_t tok = 1;
    RS_CHECK(rs_kvcache_create(a.m, 4, 16, &kv) == RS_OK);
    struct rs_model_seq s = {&tok, 1, 0, table, 4, 1};
    RS_CHECK(rs_model_step(a.m, kv, &s, 1) == RS_OK);
    const float *l = rs_model_logits(a.m, 0);
    RS_CHECK(l != NULL);
    int best = 0;
    for (uint32_t i = 1; i < rs_model_hparams(a.m)->n_vocab; i++)
        best = l[i] > l[best] ? (int)i : best;
    RS_CHECK_MSG(best == 403, "first greedy id %d",
                 best); /* expected/stories260K.greedy-n256.ids */
    rs_kvcache_destroy(&kv);
    rs_model_destroy(&a.m);
    return 0;
}

static int test_cpu_has_no_device_sampler(void)
{
    char path[1024];
    rs_model *m;
    if (stories(path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    RS_CHECK(load(path, "cpu", &m) == RS_OK);
    rs_kvcache *kv;
    uint32_t table[2] = {0, 1};
    int32_t tok = 1;
    RS_CHECK(rs_kvcache_create(m, 2, 16, &kv) == RS_OK);
    struct rs_model_seq s = {&tok, 1, 0, table, 2, 1};
    RS_CHECK(rs_model_step(m, kv, &s, 1) == RS_OK);
    struct rs_sampling_params p;
    struct rs_sample_result r;
    rs_sampling_params_default(&p);
    uint32_t seq = 0;
    uint64_t step = 0;
    RS_CHECK(rs_model_sample(m, &seq, &p, &step, 1, &r) == RS_EUNSUPPORTED);
    rs_kvcache_destroy(&kv);
    rs_model_destroy(&m);
    return 0;
}

/* --- CUDA vs CPU (GPU hosts) ------------------------------------------------------------ */

struct pair {
    rs_model *cpu, *gpu;
    rs_kvcache *kc, *kg;
    uint32_t vocab;
    double worst;    /* largest relative row difference seen */
    int rows, agree; /* rows compared, rows with the same argmax */
};

static int pair_open(struct pair *p, const char *path, uint32_t n_blocks)
{
    memset(p, 0, sizeof(*p));
    int rc = load_gpu(path, &p->gpu);
    if (rc != 0)
        return rc;
    RS_CHECK(load(path, "cpu", &p->cpu) == RS_OK);
    RS_CHECK(rs_kvcache_create(p->cpu, n_blocks, 16, &p->kc) == RS_OK);
    RS_CHECK(rs_kvcache_create(p->gpu, n_blocks, 16, &p->kg) == RS_OK);
    p->vocab = rs_model_hparams(p->cpu)->n_vocab;
    return 0;
}

static void pair_close(struct pair *p)
{
    rs_kvcache_destroy(&p->kc);
    rs_kvcache_destroy(&p->kg);
    rs_model_destroy(&p->cpu);
    rs_model_destroy(&p->gpu);
}

static int argmax(const float *v, uint32_t n)
{
    int b = 0;
    for (uint32_t i = 1; i < n; i++)
        b = v[i] > v[b] ? (int)i : b;
    return b;
}

/* One step on both backends; every wanted row compared; next[i] = the CPU's argmax. */
static int pair_step(struct pair *p, const struct rs_model_seq *s, uint32_t n, double tol,
                     int32_t *next)
{
    RS_CHECK(rs_model_step(p->cpu, p->kc, s, n) == RS_OK);
    RS_CHECK(rs_model_step(p->gpu, p->kg, s, n) == RS_OK);
    for (uint32_t i = 0; i < n; i++) {
        if (!s[i].want_logits)
            continue;
        const float *a = rs_model_logits(p->cpu, i), *b = rs_model_logits(p->gpu, i);
        RS_CHECK(a != NULL && b != NULL);
        double mx = 1.0, diff = 0.0;
        for (uint32_t v = 0; v < p->vocab; v++) {
            RS_CHECK_MSG(isfinite(b[v]), "cuda logit %u of seq %u is %f", v, i, b[v]);
            mx = fabs(a[v]) > mx ? fabs(a[v]) : mx;
            diff = fabs((double)a[v] - b[v]) > diff ? fabs((double)a[v] - b[v]) : diff;
        }
        double rel = diff / mx;
        p->worst = rel > p->worst ? rel : p->worst;
        p->rows++;
        next[i] = argmax(a, p->vocab);
        p->agree += argmax(b, p->vocab) == next[i];
        RS_CHECK_MSG(rel <= tol,
                     "seq %u (%u tokens at %u): max diff %.3g, %.3g of max |logit| "
                     "%.3g, tolerance %.3g",
                     i, s[i].n_tokens, s[i].pos0, diff, rel, mx, tol);
    }
    return 0;
}

#define MIX_SEQS 6
#define MIX_CTX 160

/*
 * Six sequences: prompts of 1..100 tokens prefilled together (cuBLAS rows),
 * eight decode steps of all six (the small-row kernel, a graph after the
 * first), then one sequence's 20-token chunk beside the others' decodes.
 */
static int mixed_batches(const char *path, double tol, const char *label)
{
    static const uint32_t plen[MIX_SEQS] = {1, 5, 13, 29, 64, 100};
    struct pair p;
    int rc = pair_open(&p, path, MIX_SEQS * (MIX_CTX / 16));
    if (rc != 0)
        return rc;
    static int32_t toks[MIX_SEQS][MIX_CTX];
    uint32_t tables[MIX_SEQS][MIX_CTX / 16], len[MIX_SEQS];
    int32_t next[MIX_SEQS];
    uint64_t st = 0x1234567;
    struct rs_model_seq s[MIX_SEQS];
    for (int i = 0; i < MIX_SEQS; i++) {
        for (int b = 0; b < MIX_CTX / 16; b++) /* interleaved, reversed blocks */
            tables[i][b] = (uint32_t)((MIX_CTX / 16 - 1 - b) * MIX_SEQS + i);
        for (int t = 0; t < MIX_CTX; t++)
            toks[i][t] = (int32_t)(tu_rand(&st) % p.vocab);
        len[i] = plen[i];
        s[i] = (struct rs_model_seq){toks[i], plen[i], 0, tables[i], MIX_CTX / 16, 1};
    }
    RS_CHECK(pair_step(&p, s, MIX_SEQS, tol, next) == 0);
    for (int step = 0; step < 9; step++) {
        for (int i = 0; i < MIX_SEQS; i++) {
            uint32_t n = step == 8 && i == 3 ? 20 : 1;
            if (n == 1)
                toks[i][len[i]] = next[i];
            s[i] = (struct rs_model_seq){toks[i] + len[i], n, len[i], tables[i], MIX_CTX / 16, 1};
            len[i] += n;
        }
        RS_CHECK(pair_step(&p, s, MIX_SEQS, tol, next) == 0);
    }
    fprintf(stderr, "%s: %d rows, worst relative difference %.3g (tolerance %.3g), top-1 %d/%d\n",
            label, p.rows, p.worst, tol, p.agree, p.rows);
    RS_CHECK_MSG(p.agree * 100 >= p.rows * 95, "top-1 agreement %d/%d", p.agree, p.rows);
    pair_close(&p);
    return 0;
}

static int test_logits_match_cpu_stories260k(void)
{
    char path[1024];
    if (stories(path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    return mixed_batches(path, TOL_F32, "stories260K");
}

/* A random 768-dim GQA model of `type` made with ringserve-mkmodel. */
static const char *model768(const char *type, char *path, size_t len)
{
    char args[256], name[64];
    snprintf(args, sizeof(args),
             "--dim 768 --layers 4 --heads 12 --kv-heads 4 --ffn 2048 "
             "--vocab 32000 --ctx 512 --type %s --seed 7",
             type);
    snprintf(name, sizeof(name), "m768-%s", type);
    return tu_mkmodel(name, args, path, len);
}

static int random768(const char *type, double tol)
{
    char path[1024], label[64];
    rs_model *m;
    /* Skip before paying for the model when there is no device. */
    if (stories(path, sizeof(path)) != NULL) {
        int rc = load_gpu(path, &m);
        if (rc != 0)
            return rc;
        rs_model_destroy(&m);
    }
    RS_CHECK(model768(type, path, sizeof(path)) != NULL);
    snprintf(label, sizeof(label), "random 768-dim %s", type);
    return mixed_batches(path, tol, label);
}

static int test_logits_match_cpu_768_f32(void)
{
    return random768("f32", TOL_F32);
}

static int test_logits_match_cpu_768_f16(void)
{
    return random768("f16", TOL_F16);
}

static int test_logits_match_cpu_768_bf16(void)
{
    return random768("bf16", TOL_BF16);
}

static int test_logits_match_cpu_768_q8_0(void)
{
    return random768("q8_0", TOL_Q8_0);
}

/* --- every architecture (refdata/arch and random shapes) ---------------------------------- */

/* Decimal ids from refdata/arch/<file>, at most cap; -1 when absent. */
static int arch_ids(const char *file, int32_t *ids, int cap)
{
    char rel[256], path[1024];
    snprintf(rel, sizeof(rel), "arch/%s", file);
    if (rs_test_refdata(rel, path, sizeof(path)) == NULL)
        return -1;
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f != NULL && n < cap && fscanf(f, "%d", &ids[n]) == 1)
        n++;
    if (f != NULL)
        fclose(f);
    return n;
}

/* Each prompt prefilled on the GPU in one step, then 24 greedy steps: llama.cpp's ids. */
static int gpu_greedy_equals_llama_cpp(const char *name, const char *path)
{
    rs_model *m;
    int rc = load_gpu(path, &m);
    if (rc != 0)
        return rc;
    rs_kvcache *kv;
    RS_CHECK(rs_kvcache_create(m, 16, 16, &kv) == RS_OK);
    uint32_t table[16];
    for (uint32_t i = 0; i < 16; i++)
        table[i] = 15 - i;
    static const int lens[] = {16, 48, 64};
    for (int i = 0; i < 3; i++) {
        char file[128];
        int32_t ids[64], want[24], tok;
        snprintf(file, sizeof(file), "%s.seq%d.ids", name, lens[i]);
        RS_CHECK(arch_ids(file, ids, 64) == lens[i]);
        snprintf(file, sizeof(file), "%s.seq%d.greedy.ids", name, lens[i]);
        RS_CHECK(arch_ids(file, want, 24) == 24);
        struct rs_model_seq s = {ids, (uint32_t)lens[i], 0, table, 16, 1};
        RS_CHECK(rs_model_step(m, kv, &s, 1) == RS_OK);
        for (int k = 0; k < 24; k++) {
            tok = argmax(rs_model_logits(m, 0), rs_model_hparams(m)->n_vocab);
            RS_CHECK_MSG(tok == want[k], "%s seq%d: cuda greedy id %d is %d, llama.cpp's %d",
                         name, lens[i], k, tok, want[k]);
            s = (struct rs_model_seq){&tok, 1, (uint32_t)(lens[i] + k), table, 16, 1};
            RS_CHECK(rs_model_step(m, kv, &s, 1) == RS_OK);
        }
    }
    fprintf(stderr, "%s: cuda greedy continuations equal llama.cpp's (3 x 24 ids)\n", name);
    rs_kvcache_destroy(&kv);
    rs_model_destroy(&m);
    return 0;
}

/*
 * The refdata models of every architecture (sliding windows of 8 in gemma2
 * and gemma3, so the 100-token prompts attend past them; soft-caps, q/k and
 * post norms, fused phi3 tensors, head_dim 48): CUDA vs CPU on mixed
 * batches, and the GPU's greedy ids vs llama.cpp's.
 */
static int test_arch_refdata_cuda_matches_cpu_and_llama_cpp(void)
{
    static const char *const names[] = {"llama", "llama-hd48", "qwen2", "qwen3",
                                        "gemma2", "gemma3", "phi3"};
    char path[1024], rel[128];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(rel, sizeof(rel), "arch/%s.gguf", names[i]);
        if (rs_test_refdata(rel, path, sizeof(path)) == NULL)
            return RS_TEST_SKIP;
        int rc = mixed_batches(path, TOL_F32, names[i]);
        if (rc == 0)
            rc = gpu_greedy_equals_llama_cpp(names[i], path);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Random shapes of every architecture in F16 (cuBLAS above 8 rows) vs the CPU. */
static int test_arch_random_shapes_cuda_matches_cpu(void)
{
    static const char *const args[] = {
        "--arch qwen2 --dim 512 --heads 8 --kv-heads 2",
        "--arch qwen3 --dim 512 --heads 8 --kv-heads 4 --head-dim 96 --norm-std 0.2",
        "--arch gemma2 --dim 512 --heads 4 --kv-heads 2 --head-dim 256 --swa 24 --softcap 20,10 "
        "--norm-std 0.2",
        "--arch gemma3 --dim 512 --layers 7 --heads 8 --kv-heads 1 --head-dim 80 --swa 40 "
        "--norm-std 0.2",
        "--arch phi3 --dim 512 --heads 8 --kv-heads 8 --swa 50",
    };
    char path[1024], full[512];
    rs_model *m;
    if (stories(path, sizeof(path)) != NULL) { /* skip before making models when no device */
        int rc = load_gpu(path, &m);
        if (rc != 0)
            return rc;
        rs_model_destroy(&m);
    }
    for (size_t i = 0; i < sizeof(args) / sizeof(args[0]); i++) {
        snprintf(full, sizeof(full), "--layers 4 --ffn 1024 --vocab 4096 --ctx 512 --type f16 "
                 "--seed 9 %s", args[i]);
        RS_CHECK(tu_mkmodel("arch-f16", full, path, sizeof(path)) != NULL);
        int rc = mixed_batches(path, TOL_F16, args[i]);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int read_ids(int32_t *ids, int cap)
{
    char path[1024];
    if (rs_test_refdata("expected/stories260K.greedy-n256.ids", path, sizeof(path)) == NULL)
        return -1;
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f != NULL && n < cap && fscanf(f, "%d", &ids[n]) == 1)
        n++;
    if (f != NULL)
        fclose(f);
    return n;
}

static int test_greedy_stories260k_text_with_device_sampling(void)
{
    char path[1024];
    int32_t want[256];
    rs_model *m;
    if (stories(path, sizeof(path)) == NULL || read_ids(want, 256) != 256)
        return RS_TEST_SKIP;
    int rc = load_gpu(path, &m);
    if (rc != 0)
        return rc;
    rs_kvcache *kv;
    uint32_t table[32];
    for (uint32_t i = 0; i < 32; i++)
        table[i] = 31 - i;
    RS_CHECK(rs_kvcache_create(m, 32, 16, &kv) == RS_OK);
    struct rs_sampling_params p;
    rs_sampling_params_default(&p);
    int32_t tok = 1;
    for (int i = 0; i < 256; i++) {
        struct rs_model_seq s = {&tok, 1, (uint32_t)i, table, 32, 1};
        struct rs_sample_result r;
        uint32_t seq = 0;
        uint64_t step = (uint64_t)i;
        RS_CHECK(rs_model_step(m, kv, &s, 1) == RS_OK);
        RS_CHECK(rs_model_sample(m, &seq, &p, &step, 1, &r) == RS_OK);
        RS_CHECK_MSG(r.token == want[i], "step %d: cuda %d, published %d", i, r.token, want[i]);
        RS_CHECK(argmax(rs_model_logits(m, 0), rs_model_hparams(m)->n_vocab) == want[i]);
        tok = r.token;
    }
    rs_kvcache_destroy(&kv);
    rs_model_destroy(&m);
    return 0;
}

/* Device sampling vs rs_sampler_sample on a host copy of the same logits. */
static int compare_sampler(rs_model *m, uint32_t n_seqs, const struct rs_sampling_params *p,
                           uint64_t step)
{
    uint32_t nv = rs_model_hparams(m)->n_vocab;
    rs_sampler *smp;
    RS_CHECK(rs_sampler_create((int32_t)nv, &smp) == RS_OK);
    float *l = malloc(nv * sizeof(float));
    for (uint32_t i = 0; i < n_seqs; i++) {
        struct rs_sample_result g, c;
        uint64_t st = step + i;
        RS_CHECK(rs_model_sample(m, &i, p, &st, 1, &g) == RS_OK);
        memcpy(l, rs_model_logits(m, i), nv * sizeof(float));
        RS_CHECK(rs_sampler_sample(smp, p, l, NULL, 0, 0, st, &c) == RS_OK);
        RS_CHECK_MSG(g.token == c.token, "seq %u T=%g seed %llu step %llu: cuda %d, cpu %d", i,
                     p->temperature, (unsigned long long)p->seed, (unsigned long long)st, g.token,
                     c.token);
        RS_CHECK_MSG(fabsf(g.logprob - c.logprob) <= 1e-6f * (1.0f + fabsf(c.logprob)),
                     "logprob %g vs %g", g.logprob, c.logprob);
        RS_CHECK(g.n_top == c.n_top);
        for (int k = 0; k < c.n_top; k++) {
            RS_CHECK_MSG(g.top_ids[k] == c.top_ids[k], "top %d: %d vs %d", k, g.top_ids[k],
                         c.top_ids[k]);
            RS_CHECK(fabsf(g.top_logprobs[k] - c.top_logprobs[k]) <=
                     1e-6f * (1.0f + fabsf(c.top_logprobs[k])));
        }
    }
    free(l);
    rs_sampler_destroy(&smp);
    return 0;
}

static int sampler_on(const char *path)
{
    rs_model *m;
    int rc = load_gpu(path, &m);
    if (rc != 0)
        return rc;
    rs_kvcache *kv;
    RS_CHECK(rs_kvcache_create(m, 16, 16, &kv) == RS_OK);
    uint32_t nv = rs_model_hparams(m)->n_vocab, tables[4][4];
    int32_t toks[4][8];
    struct rs_model_seq s[4];
    uint64_t st = 99;
    for (uint32_t i = 0; i < 4; i++) {
        for (int t = 0; t < 8; t++)
            toks[i][t] = (int32_t)(tu_rand(&st) % nv);
        for (int b = 0; b < 4; b++)
            tables[i][b] = i * 4 + (uint32_t)b;
        s[i] = (struct rs_model_seq){toks[i], 3 + i, 0, tables[i], 4, 1};
    }
    RS_CHECK(rs_model_step(m, kv, s, 4) == RS_OK);
    struct rs_sampling_params p;
    rs_sampling_params_default(&p);
    RS_CHECK(compare_sampler(m, 4, &p, 0) == 0);
    p.n_logprobs = 20;
    RS_CHECK(compare_sampler(m, 4, &p, 0) == 0);
    /* Every mix of temperature, top-k (heap and quickselect sizes), top-p and min-p. */
    static const int32_t ks[] = {0, 1, 5, 40, 300, 5000};
    static const float ps[] = {1.0f, 0.95f, 0.5f, 0.1f};
    for (uint64_t seed = 1; seed <= 48; seed++) {
        p.seed = seed;
        p.temperature = seed % 3 == 0 ? 0.7f : seed % 3 == 1 ? 1.0f : 1.6f;
        p.min_p = seed % 5 == 0 ? 0.05f : 0.0f;
        p.n_logprobs = (int32_t)(seed % 6);
        p.top_k = ks[seed % 6];
        p.top_p = ps[(seed / 6) % 4];
        RS_CHECK(compare_sampler(m, 4, &p, seed * 1000) == 0);
    }
    struct rs_sample_result r;
    uint32_t seq = 0;
    uint64_t step = 0;
    rs_sampling_params_default(&p);
    p.repetition_penalty = 1.1f; /* penalties need the history: the host does them */
    RS_CHECK(rs_model_sample(m, &seq, &p, &step, 1, &r) == RS_EUNSUPPORTED);
    rs_sampling_params_default(&p);
    p.temperature = -1.0f;
    RS_CHECK(rs_model_sample(m, &seq, &p, &step, 1, &r) == RS_EINVAL);
    seq = 9;
    rs_sampling_params_default(&p);
    RS_CHECK(rs_model_sample(m, &seq, &p, &step, 1, &r) == RS_EINVAL);
    rs_kvcache_destroy(&kv);
    rs_model_destroy(&m);
    return 0;
}

static int test_device_sampler_equals_cpu_sampler(void)
{
    char path[1024];
    if (stories(path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    int rc = sampler_on(path);
    if (rc != 0)
        return rc;
    RS_CHECK(model768("f16", path, sizeof(path)) != NULL); /* 32000 ids: 125 partial sums */
    return sampler_on(path);
}

/* Logits of sequence 0 (a 30-token prompt, then 4 decodes) alone or with companions. */
static int run_a(rs_model *m, int companions, float *out)
{
    uint32_t nv = rs_model_hparams(m)->n_vocab, tables[5][4];
    rs_kvcache *kv;
    RS_CHECK(rs_kvcache_create(m, 20, 16, &kv) == RS_OK);
    int32_t toks[5][40];
    uint64_t st = 5;
    for (int i = 0; i < 5; i++) {
        for (int t = 0; t < 40; t++)
            toks[i][t] = (int32_t)(tu_rand(&st) % nv);
        for (int b = 0; b < 4; b++)
            tables[i][b] = (uint32_t)(b * 5 + i);
    }
    struct rs_model_seq s[5];
    uint32_t n = companions ? 5 : 1;
    for (int step = 0; step < 5; step++) {
        for (uint32_t i = 0; i < n; i++) {
            uint32_t len = i == 0 ? 30 : 7 + 3 * i;
            s[i] =
                step == 0
                    ? (struct rs_model_seq){toks[i], len, 0, tables[i], 4, 1}
                    : (struct rs_model_seq){
                          toks[i] + len + step - 1, 1, len + (uint32_t)step - 1, tables[i], 4, 1};
        }
        RS_CHECK(rs_model_step(m, kv, s, n) == RS_OK);
        memcpy(out + (size_t)step * nv, rs_model_logits(m, 0), nv * sizeof(float));
    }
    rs_kvcache_destroy(&kv);
    return 0;
}

static int test_deterministic_mode_is_batch_invariant(void)
{
    char path[1024];
    rs_model *m;
    if (stories(path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    setenv("RS_CUDA_DETERMINISTIC", "1", 1);
    int rc = load_gpu(path, &m);
    unsetenv("RS_CUDA_DETERMINISTIC");
    if (rc != 0)
        return rc;
    RS_CHECK(strstr(rs_model_describe(m), "deterministic") != NULL);
    uint32_t nv = rs_model_hparams(m)->n_vocab;
    float *alone = malloc(5 * nv * sizeof(float)), *mixed = malloc(5 * nv * sizeof(float));
    RS_CHECK(run_a(m, 0, alone) == 0 && run_a(m, 1, mixed) == 0);
    for (int step = 0; step < 5; step++)
        RS_CHECK_MSG(memcmp(alone + step * nv, mixed + step * nv, nv * sizeof(float)) == 0,
                     "step %d: logits differ with companions", step);
    free(alone);
    free(mixed);
    rs_model_destroy(&m);
    return 0;
}

/* Greedy decode of 4 sequences for 40 steps; logits of every step into out. */
static int decode4(rs_model *m, float *out)
{
    uint32_t nv = rs_model_hparams(m)->n_vocab, tables[4][4];
    rs_kvcache *kv;
    RS_CHECK(rs_kvcache_create(m, 16, 16, &kv) == RS_OK);
    int32_t tok[4] = {1, 2, 3, 4};
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < 4; b++)
            tables[i][b] = (uint32_t)(i * 4 + b);
    for (uint32_t step = 0; step < 40; step++) {
        struct rs_model_seq s[4];
        for (int i = 0; i < 4; i++)
            s[i] = (struct rs_model_seq){&tok[i], 1, step, tables[i], 4, 1};
        RS_CHECK(rs_model_step(m, kv, s, 4) == RS_OK);
        for (int i = 0; i < 4; i++) {
            const float *l = rs_model_logits(m, (uint32_t)i);
            memcpy(out + ((size_t)step * 4 + i) * nv, l, nv * sizeof(float));
            tok[i] = argmax(l, nv);
        }
    }
    rs_kvcache_destroy(&kv);
    return 0;
}

static int test_decode_graphs_equal_eager_steps(void)
{
    char path[1024];
    rs_model *g, *e;
    if (stories(path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    int rc = load_gpu(path, &g);
    if (rc != 0)
        return rc;
    setenv("RS_CUDA_GRAPHS", "0", 1);
    rc = load_gpu(path, &e);
    unsetenv("RS_CUDA_GRAPHS");
    RS_CHECK(rc == 0);
    RS_CHECK(strstr(rs_model_describe(g), "graphs") && !strstr(rs_model_describe(e), "graphs"));
    uint32_t nv = rs_model_hparams(g)->n_vocab;
    size_t n = (size_t)40 * 4 * nv;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    RS_CHECK(decode4(g, a) == 0 && decode4(e, b) == 0);
    RS_CHECK(memcmp(a, b, n * sizeof(float)) == 0);
    free(a);
    free(b);
    rs_model_destroy(&g);
    rs_model_destroy(&e);
    return 0;
}

static int test_tokens_from_registered_segment(void)
{
    char path[1024], name[64];
    rs_model *m;
    if (stories(path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    int rc = load_gpu(path, &m);
    if (rc != 0)
        return rc;
    static const char *const roles[] = {"launcherd"};
    struct rs_shm_region_spec spec[2] = {
        {.name = "roles", .kind = RS_SHM_ROLES, .count = 1, .role_names = roles},
        {.name = "tokens", .kind = RS_SHM_RAW, .bytes = 1 << 20}};
    rs_test_unique_name("/rs-cuda", name, sizeof(name));
    rs_shm *shm, *again;
    RS_CHECK(rs_shm_create(name, 1, spec, 2, &shm) == RS_OK);
    RS_CHECK(rs_shm_cuda_register(shm) == RS_OK);
    void *base;
    uint64_t size;
    RS_CHECK(rs_shm_region(shm, "tokens", RS_SHM_RAW, &base, &size) == RS_OK);
    int32_t *toks = base, heap[24];
    for (int i = 0; i < 24; i++)
        toks[i] = heap[i] = (i * 37 + 11) % 512;
    uint32_t tables[2][2] = {{0, 1}, {2, 3}};
    rs_kvcache *kv;
    RS_CHECK(rs_kvcache_create(m, 4, 16, &kv) == RS_OK);
    /* Two sequences whose tokens sit back to back in the segment: one copy straight from it. */
    struct rs_model_seq s[2] = {{toks, 12, 0, tables[0], 2, 1},
                                {toks + 12, 12, 0, tables[1], 2, 1}};
    RS_CHECK(rs_model_step(m, kv, s, 2) == RS_OK);
    toks[0] = -5; /* the step has returned: its inputs were consumed */
    float *a = malloc(512 * sizeof(float));
    memcpy(a, rs_model_logits(m, 1), 512 * sizeof(float));
    s[0].tokens = heap, s[1].tokens = heap + 12; /* the same tokens from unregistered memory */
    RS_CHECK(rs_model_step(m, kv, s, 2) == RS_OK);
    RS_CHECK(memcmp(a, rs_model_logits(m, 1), 512 * sizeof(float)) == 0);
    /* A restarted launcher maps the segment again and registers its own mapping. */
    RS_CHECK(rs_shm_attach(name, NULL, 0, 0, NULL, 0, &again) == RS_OK);
    RS_CHECK(rs_shm_cuda_register(again) == RS_OK);
    rs_shm_detach(&again);
    rs_shm_detach(&shm);
    rs_shm_unlink(name);
    free(a);
    rs_kvcache_destroy(&kv);
    rs_model_destroy(&m);
    return 0;
}

/*
 * Structured-output masks: the device path (k_mask.cu, rows copied as from the pinned mask
 * ring) and the CPU path (common/mask_apply.c) leave bit-identical logits on the
 * 50257-token gpt-2 vocab width: random mask rows (one row without a mask), bias lists
 * with bans, duplicates and entries on masked tokens.
 */
static int test_mask_rows_match_cpu_bitwise(void)
{
#ifndef RS_HAVE_CUDA
    return RS_TEST_SKIP;
#else
    enum { ROWS = 6, VOCAB = 50257, NB = 40 };
    size_t words = (VOCAB + 31) / 32;
    float *cpu = malloc(sizeof(float) * ROWS * VOCAB), *gpu = malloc(sizeof(float) * ROWS * VOCAB);
    uint32_t *rows = malloc(4 * ROWS * words);
    struct rs_logit_bias bias[ROWS][NB];
    const uint32_t *mp[ROWS];
    const struct rs_logit_bias *bp[ROWS];
    uint32_t nb[ROWS];
    RS_CHECK(cpu != NULL && gpu != NULL && rows != NULL);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < (size_t)ROWS * VOCAB; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        cpu[i] = gpu[i] = (float)((int64_t)(x >> 33) % 20000) / 1000.0f;
    }
    for (size_t i = 0; i < (size_t)ROWS * words; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        rows[i] = (uint32_t)(x >> 32) & (uint32_t)(x >> 16); /* about a quarter allowed */
    }
    for (int r = 0; r < ROWS; r++) {
        mp[r] = r == 2 ? NULL : rows + (size_t)r * words;
        nb[r] = (uint32_t)(r * 7 % NB);
        for (uint32_t i = 0; i < nb[r]; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            int32_t t = i > 0 && i % 5 == 0 ? bias[r][i - 1].token : (int32_t)((x >> 33) % VOCAB);
            float b = i % 4 == 0 ? -100.0f : (float)((int64_t)(x >> 40) % 200) / 2.0f - 50.0f;
            bias[r][i] = (struct rs_logit_bias){t, b};
        }
        bp[r] = bias[r];
        rs_mask_apply(cpu + (size_t)r * VOCAB, VOCAB, mp[r], bias[r], nb[r], NULL);
    }
    rs_err rc = rs_cuda_mask_apply(gpu, ROWS, VOCAB, mp, words, bp, nb);
    int skip = rc == RS_EDEVICE && !gpu_required();
    int same = rc == RS_OK && memcmp(cpu, gpu, sizeof(float) * ROWS * VOCAB) == 0;
    free(cpu);
    free(gpu);
    free(rows);
    if (skip)
        return RS_TEST_SKIP;
    RS_CHECK_MSG(rc == RS_OK, "device mask path: %s", rs_strerror(rc));
    RS_CHECK(same);
    return 0;
#endif
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_no_device_fails_cleanly),
    RS_TEST(test_auto_falls_back_to_cpu_and_says_so),
    RS_TEST(test_cpu_has_no_device_sampler),
    RS_TEST(test_logits_match_cpu_stories260k),
    RS_TEST(test_logits_match_cpu_768_f32),
    RS_TEST(test_logits_match_cpu_768_f16),
    RS_TEST(test_logits_match_cpu_768_bf16),
    RS_TEST(test_logits_match_cpu_768_q8_0),
    RS_TEST(test_arch_refdata_cuda_matches_cpu_and_llama_cpp),
    RS_TEST(test_arch_random_shapes_cuda_matches_cpu),
    RS_TEST(test_greedy_stories260k_text_with_device_sampling),
    RS_TEST(test_device_sampler_equals_cpu_sampler),
    RS_TEST(test_deterministic_mode_is_batch_invariant),
    RS_TEST(test_decode_graphs_equal_eager_steps),
    RS_TEST(test_tokens_from_registered_segment),
    RS_TEST(test_mask_rows_match_cpu_bitwise),
};

RS_TEST_MAIN(cases)

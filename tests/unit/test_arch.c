/* SPDX-License-Identifier: MIT */
/*
 * Every served architecture against llama.cpp's own logits and against an
 * independent double-precision forward pass. Refdata (../shared/refdata/arch,
 * its README section 7 for the tolerances): for each F32 model (llama,
 * llama-hd48, qwen2, qwen3, gemma2, gemma3, phi3) and each of its 3
 * prompts, the logits at every prompt position agree with the oracle's
 * within the stated tolerance (the measured max |diff| is printed), the
 * top-1 id agrees at every position, a one-shot prefill's last row equals
 * the position-by-position run bit for bit, and the 24-token greedy
 * continuation equals the oracle's; with both kernel variants. Random
 * shapes from `ringserve-mkmodel --arch` (other head counts, GQA ratios,
 * layer counts, head_dim != n_embd/n_head, sliding windows shorter than the
 * sequence, soft-caps that bite) against tests/unit/ref_forward.h. Files an
 * architecture does not accept are refused, naming the tensor or key.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "launcherd/engine/kernels.h"
#include "launcherd/engine/model.h"
#include "tests/rs_test.h"
#include "tests/unit/engine_testutil.h"
#include "tests/unit/ref_forward.h"

#define VOCAB 512
#define GREEDY 24

/* Reads up to cap decimal ids from refdata/arch/<file>; returns the count, -1 when absent. */
static int read_ids(const char *file, int32_t *ids, int cap)
{
    char rel[256], path[1024];
    snprintf(rel, sizeof(rel), "arch/%s", file);
    if (rs_test_refdata(rel, path, sizeof(path)) == NULL)
        return -1;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    int n = 0;
    while (n < cap && fscanf(f, "%d", &ids[n]) == 1)
        n++;
    fclose(f);
    return n;
}

/* The oracle's logits, n rows of VOCAB floats (little-endian F32 as stored). */
static float *read_logits(const char *file, int n)
{
    char rel[256], path[1024];
    snprintf(rel, sizeof(rel), "arch/%s", file);
    if (rs_test_refdata(rel, path, sizeof(path)) == NULL)
        return NULL;
    FILE *f = fopen(path, "rb");
    float *v = malloc((size_t)n * VOCAB * sizeof(float));
    size_t got = f != NULL && v != NULL ? fread(v, sizeof(float), (size_t)n * VOCAB, f) : 0;
    if (f != NULL)
        fclose(f);
    if (got != (size_t)n * VOCAB) {
        free(v);
        return NULL;
    }
    return v;
}

/* argmax, the lowest id among equal maxima (the oracle's rule). */
static int32_t argmax(const float *v, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return (int32_t)best;
}

struct run {
    rs_model *m;
    rs_kvcache *kv;
    uint32_t table[32], fresh[32];
};

static int run_open(struct run *r, const char *path, int isa)
{
    struct rs_model_opts o;
    char err[512];
    rs_model_opts_default(&o);
    o.isa = isa;
    memset(r, 0, sizeof(*r));
    RS_CHECK_MSG(rs_model_load(path, &o, &r->m, err, sizeof(err)) == RS_OK, "%s: %s", path, err);
    RS_CHECK(rs_kvcache_create(r->m, 64, 8, &r->kv) == RS_OK);
    for (uint32_t i = 0; i < 32; i++) {
        r->table[i] = (i * 7 + 3) % 32; /* scrambled: the table decides, not the order */
        r->fresh[i] = 32 + i;
    }
    return 0;
}

static void run_close(struct run *r)
{
    rs_kvcache_destroy(&r->kv);
    rs_model_destroy(&r->m);
}

/* One step of one sequence; the logits row (n_vocab) or NULL. */
static const float *step(struct run *r, const int32_t *toks, uint32_t n, uint32_t pos0,
                         const uint32_t *table)
{
    struct rs_model_seq s = {toks, n, pos0, table, 32, 1};
    if (rs_model_step(r->m, r->kv, &s, 1) != RS_OK)
        return NULL;
    return rs_model_logits(r->m, 0);
}

/* One prompt of one model: logits, top-1, one-shot prefill, greedy. Adds to *worst. */
static int check_prompt(struct run *r, const char *name, int k, double tol, double *worst)
{
    char file[128];
    int32_t ids[64], want[GREEDY], got[GREEDY];
    snprintf(file, sizeof(file), "%s.seq%d.ids", name, k);
    RS_CHECK(read_ids(file, ids, 64) == k);
    snprintf(file, sizeof(file), "%s.seq%d.greedy.ids", name, k);
    RS_CHECK(read_ids(file, want, GREEDY) == GREEDY);
    snprintf(file, sizeof(file), "%s.seq%d.logits.f32", name, k);
    float *ref = read_logits(file, k), last[VOCAB];
    RS_CHECK(ref != NULL);
    double mx = 0;
    for (int p = 0; p < k; p++) {
        const float *l = step(r, ids + p, 1, (uint32_t)p, r->table);
        RS_CHECK(l != NULL);
        for (int v = 0; v < VOCAB; v++)
            mx = fmax(mx, fabs((double)l[v] - ref[(size_t)p * VOCAB + v]));
        RS_CHECK_MSG(argmax(l, VOCAB) == argmax(ref + (size_t)p * VOCAB, VOCAB),
                     "%s seq%d: top-1 at position %d is %d, llama.cpp's %d", name, k, p,
                     argmax(l, VOCAB), argmax(ref + (size_t)p * VOCAB, VOCAB));
        memcpy(last, l, sizeof(last));
    }
    free(ref);
    for (int i = 0; i < GREEDY; i++) {
        got[i] = argmax(i == 0 ? last : rs_model_logits(r->m, 0), VOCAB);
        RS_CHECK(step(r, &got[i], 1, (uint32_t)(k + i), r->table) != NULL);
    }
    const float *one = step(r, ids, (uint32_t)k, 0, r->fresh);
    RS_CHECK_MSG(one != NULL && memcmp(one, last, sizeof(last)) == 0,
                 "%s seq%d: one-shot prefill differs from the position-by-position run", name, k);
    int same = 0;
    while (same < GREEDY && got[same] == want[same])
        same++;
    fprintf(stderr, "%s seq%d: max |logit - llama.cpp| %.3g (tolerance %.0e), top-1 %d/%d, "
            "greedy %d/%d\n", name, k, mx, tol, k, k, same, GREEDY);
    RS_CHECK_MSG(mx <= tol, "%s seq%d: logits differ from llama.cpp's by %g > %g", name, k, mx,
                 tol);
    RS_CHECK_MSG(same == GREEDY, "%s seq%d: greedy id %d is %d, llama.cpp's %d", name, k, same,
                 same < GREEDY ? got[same] : 0, same < GREEDY ? want[same] : 0);
    *worst = fmax(*worst, mx);
    return 0;
}

static int check_refdata(const char *name, double tol)
{
    char rel[128], path[1024];
    snprintf(rel, sizeof(rel), "arch/%s.gguf", name);
    if (rs_test_refdata(rel, path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    static const int lens[] = {16, 48, 64};
    static const int isas[] = {RS_MODEL_ISA_AUTO, RS_MODEL_ISA_PORTABLE}; /* auto: AVX2 if any */
    for (size_t v = 0; v < 2; v++) {
        struct run r;
        double worst = 0;
        RS_CHECK(run_open(&r, path, isas[v]) == 0);
        for (size_t i = 0; i < 3; i++)
            if (check_prompt(&r, name, lens[i], tol, &worst) != 0)
                return 1;
        fprintf(stderr, "%s (%s): worst max |logit - llama.cpp| over 3 prompts %.3g\n", name,
                rs_model_describe(r.m), worst);
        run_close(&r);
    }
    return 0;
}

/*
 * Tolerances (refdata arch/README.md section 7): the anchor's F32 files within
 * 1e-4; gemma2 within 5e-3 with an exact GELU (the anchor reads an F16 GELU
 * table, we do not); qwen3/gemma3 within 5e-3 against ik_llama.cpp, whose V
 * cache is F16 (ours is F32).
 */
static int test_refdata_llama(void) { return check_refdata("llama", 1e-4); }
static int test_refdata_llama_hd48(void) { return check_refdata("llama-hd48", 1e-4); }
static int test_refdata_qwen2(void) { return check_refdata("qwen2", 1e-4); }
static int test_refdata_qwen3(void) { return check_refdata("qwen3", 5e-3); }
static int test_refdata_gemma2(void) { return check_refdata("gemma2", 5e-3); }
static int test_refdata_gemma3(void) { return check_refdata("gemma3", 5e-3); }
static int test_refdata_phi3(void) { return check_refdata("phi3", 1e-4); }

/* --- quantized llama.cpp files: the integer dot against llama.cpp's own error ------------- */

/* Max |a - b| over n rows of VOCAB; *agree counts rows with the same argmax. */
static double max_diff(const float *a, const float *b, int n, int *agree)
{
    double mx = 0;
    for (int p = 0; p < n; p++) {
        for (int v = 0; v < VOCAB; v++)
            mx = fmax(mx, fabs((double)a[(size_t)p * VOCAB + v] - b[(size_t)p * VOCAB + v]));
        *agree += argmax(a + (size_t)p * VOCAB, VOCAB) == argmax(b + (size_t)p * VOCAB, VOCAB);
    }
    return mx;
}

/* Our logits for prompt ids (k positions, one step each) into out (k x VOCAB); dot:
 * RS_MODEL_DOT_*. */
static int our_logits(const char *path, int isa, int dot, const int32_t *ids, int k, float *out,
                      char *desc, size_t desc_len)
{
    struct rs_model_opts o;
    char err[512];
    rs_model_opts_default(&o);
    o.isa = isa;
    o.dot = dot;
    struct run r;
    memset(&r, 0, sizeof(r));
    RS_CHECK_MSG(rs_model_load(path, &o, &r.m, err, sizeof(err)) == RS_OK, "%s: %s", path, err);
    RS_CHECK(rs_kvcache_create(r.m, 64, 8, &r.kv) == RS_OK);
    for (uint32_t i = 0; i < 32; i++)
        r.table[i] = (i * 7 + 3) % 32;
    for (int p = 0; p < k; p++) {
        const float *l = step(&r, ids + p, 1, (uint32_t)p, r.table);
        RS_CHECK(l != NULL);
        memcpy(out + (size_t)p * VOCAB, l, VOCAB * sizeof(float));
    }
    snprintf(desc, desc_len, "%s", rs_model_describe(r.m));
    run_close(&r);
    return 0;
}

/*
 * One llama256 quantized file over its 3 prompts. The bound is llama.cpp's
 * own error: max |llama.cpp quantized - llama.cpp F32| over the same
 * prompts, read from the refdata files, not chosen here. Our integer-dot
 * logits must be at least that close to llama.cpp's quantized logits (it
 * quantizes activations too, with coarser scales); and the AVX2 and
 * AVX-512 VNNI integer dots (the rest of the model is the same AVX2 code)
 * must give the same bits (the portable one: test_kernels, per GEMM, which
 * also holds AVX2's interleaved Q4_0 rows to the plain rows' bits).
 */
static int check_quantized(const char *name)
{
    char rel[128], path[1024], file[128], desc[3][96];
    snprintf(rel, sizeof(rel), "arch/%s.gguf", name);
    if (rs_test_refdata(rel, path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    static const int lens[] = {16, 48, 64};
    double e_llama = 0, d_int8 = 0, d_exact = 0, f_int8 = 0;
    int agree_int8 = 0, agree_exact = 0, n_pos = 0, dummy = 0;
    for (size_t i = 0; i < 3; i++) {
        int k = lens[i];
        int32_t ids[64];
        snprintf(file, sizeof(file), "%s.seq%d.ids", name, k);
        RS_CHECK(read_ids(file, ids, 64) == k);
        snprintf(file, sizeof(file), "%s.seq%d.logits.f32", name, k);
        float *q = read_logits(file, k);
        snprintf(file, sizeof(file), "llama256-f32.seq%d.logits.f32", k);
        float *f = read_logits(file, k);
        float *o8 = malloc((size_t)k * VOCAB * 4), *ox = malloc((size_t)k * VOCAB * 4);
        float *alt = malloc((size_t)k * VOCAB * 4);
        RS_CHECK(q != NULL && f != NULL && o8 != NULL && ox != NULL && alt != NULL);
        RS_CHECK(our_logits(path, RS_MODEL_ISA_AUTO, RS_MODEL_DOT_INT8, ids, k, o8, desc[0], 96) == 0);
        RS_CHECK(our_logits(path, RS_MODEL_ISA_AUTO, RS_MODEL_DOT_EXACT, ids, k, ox, desc[1], 96) ==
                 0);
        RS_CHECK(our_logits(path, RS_MODEL_ISA_AVX2, RS_MODEL_DOT_INT8, ids, k, alt, desc[2], 96) ==
                 0);
        RS_CHECK_MSG(memcmp(alt, o8, (size_t)k * VOCAB * 4) == 0,
                     "%s seq%d: %s and %s integer dots differ", name, k, desc[0], desc[2]);
        /* with AVX2 every quantized type reads its rows interleaved (kern_qdot_interleave) */
        if (kern_isa_supported(KERN_AVX2))
            RS_CHECK_MSG(strstr(desc[2], "matrices interleaved") != NULL, "%s", desc[2]);

        e_llama = fmax(e_llama, max_diff(q, f, k, &dummy));
        d_int8 = fmax(d_int8, max_diff(o8, q, k, &agree_int8));
        d_exact = fmax(d_exact, max_diff(ox, q, k, &agree_exact));
        f_int8 = fmax(f_int8, max_diff(o8, f, k, &dummy));
        n_pos += k;
        free(q), free(f), free(o8), free(ox), free(alt);
    }
    fprintf(stderr,
            "%s: max |dlogit| vs llama.cpp: integer dot (%s) %.3g, top-1 %d/%d; exact-dot %.3g, "
            "top-1 %d/%d; llama.cpp vs its F32 model %.3g, ours (integer) vs F32 %.3g\n",
            name, desc[0], d_int8, agree_int8, n_pos, d_exact, agree_exact, n_pos, e_llama, f_int8);
    RS_CHECK_MSG(d_int8 <= e_llama, "%s: integer-dot logits %g from llama.cpp's, beyond its own "
                 "error %g vs F32", name, d_int8, e_llama);
    return 0;
}

static int test_refdata_llama256_q8_0(void) { return check_quantized("llama256-q8_0"); }
static int test_refdata_llama256_q4_0(void) { return check_quantized("llama256-q4_0"); }
static int test_refdata_llama256_q4_k_m(void) { return check_quantized("llama256-q4_k_m"); }
static int test_refdata_llama256_q5_k_m(void) { return check_quantized("llama256-q5_k_m"); }
static int test_refdata_llama256_q6_k(void) { return check_quantized("llama256-q6_k"); }

/*
 * The default dot resolves per CPU variant and weight type (launcherd/README.md,
 * "Which dot by default"): with AVX-512 VNNI integer dots for every quantized
 * type, with AVX-512 VNNI and with AVX2 (the widened path on other CPUs and with
 * --exact-dot). Checked on the logits of llama.cpp-made files: Q4_K_M (Q4_K and
 * Q6_K), Q4_0 and Q8_0; the widened default is checked on the portable variant.
 */
static int test_default_dot_per_cpu_and_type(void)
{
    static const struct {
        const char *model;
        int isa, want;
    } cases[] = {
        {"llama256-q4_k_m", RS_MODEL_ISA_AVX2, RS_MODEL_DOT_INT8},
        {"llama256-q8_0", RS_MODEL_ISA_AVX2, RS_MODEL_DOT_INT8},
        {"llama256-q8_0", RS_MODEL_ISA_PORTABLE, RS_MODEL_DOT_EXACT},
        {"llama256-q4_0", RS_MODEL_ISA_AVX2, RS_MODEL_DOT_INT8},
        {"llama256-q4_k_m", RS_MODEL_ISA_AVX512, RS_MODEL_DOT_INT8},
        {"llama256-q8_0", RS_MODEL_ISA_AVX512, RS_MODEL_DOT_INT8},
    };
    char path[1024], name[128], desc[96];
    int32_t ids[64];
    float *a = malloc(16 * VOCAB * 4), *b = malloc(16 * VOCAB * 4);
    RS_CHECK(a != NULL && b != NULL);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int want = cases[i].want, isa = cases[i].isa;
        snprintf(name, sizeof(name), "arch/%s.gguf", cases[i].model);
        if (rs_test_refdata(name, path, sizeof(path)) == NULL) {
            free(a), free(b);
            return RS_TEST_SKIP;
        }
        if (!kern_isa_supported((enum kern_isa)isa))
            continue;
        snprintf(name, sizeof(name), "%s.seq16.ids", cases[i].model);
        RS_CHECK(read_ids(name, ids, 64) == 16);
        RS_CHECK(our_logits(path, isa, RS_MODEL_DOT_AUTO, ids, 16, a, desc, sizeof(desc)) == 0);
        RS_CHECK_MSG(strstr(desc, want == RS_MODEL_DOT_INT8 ? "int8-dot (auto)" : "exact-dot (auto)"),
                     "%s: %s", cases[i].model, desc);
        RS_CHECK(our_logits(path, isa, want, ids, 16, b, desc, sizeof(desc)) == 0);
        RS_CHECK_MSG(memcmp(a, b, 16 * VOCAB * 4) == 0, "%s %s: the default is not the %s dot",
                     cases[i].model, desc, want == RS_MODEL_DOT_INT8 ? "integer" : "widened");
        RS_CHECK(our_logits(path, isa, RS_MODEL_DOT_INT8 + RS_MODEL_DOT_EXACT - want, ids, 16, b,
                            desc, sizeof(desc)) == 0);
        RS_CHECK_MSG(memcmp(a, b, 16 * VOCAB * 4) != 0, "%s %s: both dots gave the same logits",
                     cases[i].model, desc);
    }
    free(a), free(b);
    return 0;
}

/* --- random shapes vs the double reference ---------------------------------------------- */

#define N_REF 20 /* positions: longer than every window below */

static int against_reference(const char *path, int isa, double tol)
{
    char err[512];
    struct rs_model_opts o;
    rs_model_opts_default(&o);
    o.isa = isa;
    o.dot = RS_MODEL_DOT_EXACT; /* the reference multiplies the dequantized weights in float */
    rs_model *m;
    RS_CHECK_MSG(rs_model_load(path, &o, &m, err, sizeof(err)) == RS_OK, "%s", err);
    const struct rs_model_hparams *hp = rs_model_hparams(m);
    struct ref_model r;
    RS_CHECK(ref_open(rs_model_gguf(m), &r) == 0);
    int32_t toks[N_REF];
    for (int i = 0; i < N_REF; i++)
        toks[i] = (int32_t)((i * 37 + 1) % hp->n_vocab);
    double *want = malloc((size_t)N_REF * hp->n_vocab * sizeof(double));
    ref_forward(&r, toks, N_REF, want);
    rs_kvcache *kv;
    RS_CHECK(rs_kvcache_create(m, 16, 4, &kv) == RS_OK);
    uint32_t table[8] = {5, 0, 7, 2, 9, 11, 3, 14};
    double worst = 0, mag = 0;
    for (int p = 0; p < N_REF; p++) {
        struct rs_model_seq s = {toks + p, 1, (uint32_t)p, table, 8, 1};
        RS_CHECK(rs_model_step(m, kv, &s, 1) == RS_OK);
        const float *got = rs_model_logits(m, 0);
        for (uint32_t v = 0; v < hp->n_vocab; v++) {
            worst = fmax(worst, fabs(got[v] - want[(size_t)p * hp->n_vocab + v]));
            mag = fmax(mag, fabs(want[(size_t)p * hp->n_vocab + v]));
        }
    }
    fprintf(stderr, "%s (%s, %u layers, %u local, window %u, head_dim %u, %u/%u heads): "
            "largest |engine - reference| %.3g, logits up to %.3g\n", hp->arch,
            rs_model_describe(m), hp->n_layers, hp->n_local, hp->swa_window, hp->head_dim,
            hp->n_heads, hp->n_kv_heads, worst, mag);
    RS_CHECK_MSG(worst < tol * fmax(1.0, mag), "logits differ from the reference by %g (logits up to %g)",
                 worst, mag);
    free(want);
    rs_kvcache_destroy(&kv);
    rs_model_destroy(&m);
    return 0;
}

/*
 * A random model of args, weights scaled x2 so attention is sharp (a RoPE,
 * window or mask mistake shows), then optionally converted to `type`;
 * checked with both kernel variants: max |engine - reference| within 1e-5
 * of the largest logit magnitude (at least 1), float32 rounding over a few
 * layers.
 */
static int check_random(const char *args, const char *type)
{
    char base[512], path[512], scaled[512];
    RS_CHECK(tu_mkmodel("arch-base", args, base, sizeof(base)) != NULL);
    snprintf(scaled, sizeof(scaled), "%s/arch-scaled.gguf", rs_test_tmpdir());
    struct tu_edit e = {.scale_prefix = "blk.", .scale = 2.0f};
    RS_CHECK(tu_rewrite(base, scaled, &e) == 0);
    snprintf(path, sizeof(path), "%s", scaled);
    if (type != NULL) {
        char cargs[1200];
        snprintf(cargs, sizeof(cargs), "--convert '%s' --type %s", scaled, type);
        RS_CHECK(tu_mkmodel(type, cargs, path, sizeof(path)) != NULL);
    }
    RS_CHECK(against_reference(path, RS_MODEL_ISA_AUTO, 1e-5) == 0);
    return against_reference(path, RS_MODEL_ISA_PORTABLE, 1e-5);
}

#define COMMON "--vocab 300 --seed 11 --norm-std 0.2 --type f32 "

static int test_random_llama_head_dim_gqa4(void)
{
    return check_random(COMMON "--arch llama --dim 64 --layers 3 --heads 4 --kv-heads 1 "
                               "--head-dim 24 --ffn 80", NULL);
}

static int test_random_qwen2_matches_reference(void)
{
    return check_random(COMMON "--arch qwen2 --dim 96 --layers 2 --heads 6 --kv-heads 2 --ffn 64",
                        NULL);
}

static int test_random_qwen3_matches_reference(void)
{
    return check_random(COMMON "--arch qwen3 --dim 64 --layers 3 --heads 8 --kv-heads 2 "
                               "--head-dim 12 --ffn 72", NULL);
}

static int test_random_gemma2_window_softcaps(void)
{
    return check_random(COMMON "--arch gemma2 --dim 48 --layers 4 --heads 2 --kv-heads 1 "
                               "--head-dim 32 --ffn 56 --swa 5 --softcap 2,3", NULL);
}

static int test_random_gemma3_local_global(void)
{
    return check_random(COMMON "--arch gemma3 --dim 64 --layers 7 --heads 4 --kv-heads 2 "
                               "--head-dim 16 --ffn 48 --swa 6", NULL);
}

static int test_random_phi3_fused_window(void)
{
    return check_random(COMMON "--arch phi3 --dim 64 --layers 2 --heads 4 --kv-heads 2 "
                               "--ffn 96 --swa 7", NULL);
}

/* Row views of fused quantized matrices start at a row's byte offset; Q8_0 checks them. */
static int test_random_phi3_q8_0_fused_views(void)
{
    return check_random(COMMON "--arch phi3 --dim 64 --layers 2 --heads 4 --kv-heads 2 "
                               "--ffn 96 --swa 7", "q8_0");
}

/* --- what an architecture does not accept ------------------------------------------------ */

static int expect_refusal(const char *args, const struct tu_edit *e, rs_err want,
                          const char *needle)
{
    char base[512], path[512], err[512];
    RS_CHECK(tu_mkmodel("refuse-base", args, base, sizeof(base)) != NULL);
    snprintf(path, sizeof(path), "%s/refuse.gguf", rs_test_tmpdir());
    RS_CHECK(tu_rewrite(base, path, e) == 0);
    rs_model *m = NULL;
    err[0] = '\0';
    rs_err rc = rs_model_load(path, NULL, &m, err, sizeof(err));
    rs_model_destroy(&m);
    RS_CHECK_MSG(rc == want, "got %s (%s), want %s", rs_strerror(rc), err, rs_strerror(want));
    RS_CHECK_MSG(strstr(err, needle) != NULL, "message '%s' does not name '%s'", err, needle);
    return 0;
}

#define SMALL "--vocab 300 --dim 32 --layers 2 --heads 2 --ffn 48 --arch "

static void set_arch_mamba(rs_gguf_writer *w)
{
    rs_gguf_writer_set_str(w, "general.architecture", "mamba");
}

static void set_value_length_8(rs_gguf_writer *w)
{
    rs_gguf_writer_set_u32(w, "qwen3.attention.value_length", 8);
}

static int test_unknown_architecture_lists_supported(void)
{
    struct tu_edit e = {.set = set_arch_mamba};
    if (expect_refusal(SMALL "llama", &e, RS_EUNSUPPORTED, "'mamba'") != 0)
        return 1;
    return expect_refusal(SMALL "llama", &e, RS_EUNSUPPORTED,
                          "llama, qwen2, qwen3, gemma2, gemma3, phi3");
}

static int test_missing_arch_tensors_are_named(void)
{
    struct tu_edit bias = {.drop_tensor = "blk.1.attn_v.bias"};
    struct tu_edit qkn = {.drop_tensor = "blk.0.attn_k_norm.weight"};
    struct tu_edit post = {.drop_tensor = "blk.1.post_ffw_norm.weight"};
    struct tu_edit qkv = {.drop_tensor = "blk.0.attn_qkv.weight"};
    struct tu_edit out = {.drop_tensor = "output.weight"};
    if (expect_refusal(SMALL "qwen2", &bias, RS_EINVAL, "missing tensor blk.1.attn_v.bias") ||
        expect_refusal(SMALL "qwen3", &qkn, RS_EINVAL, "blk.0.attn_k_norm.weight") ||
        expect_refusal(SMALL "gemma2", &post, RS_EINVAL, "blk.1.post_ffw_norm.weight") ||
        expect_refusal(SMALL "phi3", &qkv, RS_EINVAL, "blk.0.attn_qkv.weight"))
        return 1;
    return expect_refusal(SMALL "phi3", &out, RS_EINVAL, "missing tensor output.weight");
}

static int test_missing_arch_keys_are_named(void)
{
    struct tu_edit swa = {.drop_key = "gemma3.attention.sliding_window"};
    struct tu_edit eps = {.drop_key = "qwen2.attention.layer_norm_rms_epsilon"};
    struct tu_edit vl = {.set = set_value_length_8};
    if (expect_refusal(SMALL "gemma3", &swa, RS_EINVAL, "gemma3.attention.sliding_window") ||
        expect_refusal(SMALL "qwen2", &eps, RS_EINVAL, "qwen2.attention.layer_norm_rms_epsilon"))
        return 1;
    return expect_refusal(SMALL "qwen3", &vl, RS_EUNSUPPORTED, "value_length 8");
}

/* A tensor the architecture's graph does not read is refused, never silently ignored. */
static int test_tensors_foreign_to_the_arch_are_refused(void)
{
    struct tu_edit out = {.dup_tensor = "token_embd.weight", .dup_name = "output.weight"};
    struct tu_edit bias = {.dup_tensor = "blk.0.attn_norm.weight", .dup_name = "blk.0.attn_q.bias"};
    struct tu_edit lr = {.dup_tensor = "blk.0.attn_norm.weight",
                         .dup_name = "rope_factors_long.weight"};
    if (expect_refusal(SMALL "gemma2", &out, RS_EINVAL, "output.weight is not part of a gemma2") ||
        expect_refusal(SMALL "qwen3", &bias, RS_EINVAL, "blk.0.attn_q.bias is not part of a qwen3"))
        return 1;
    return expect_refusal(SMALL "phi3", &lr, RS_EINVAL, "rope_factors_long.weight");
}

/* Hyperparameters resolved from the descriptor, as the forward passes read them. */
static int test_descriptor_resolves_hparams(void)
{
    char path[512], err[256];
    RS_CHECK(tu_mkmodel("g3", SMALL "gemma3 --layers 12 --swa 9 --head-dim 24", path,
                        sizeof(path)) != NULL);
    rs_model *m;
    RS_CHECK_MSG(rs_model_load(path, NULL, &m, err, sizeof(err)) == RS_OK, "%s", err);
    const struct rs_model_hparams *hp = rs_model_hparams(m);
    RS_CHECK(strcmp(hp->arch, "gemma3") == 0 && hp->rope_neox && hp->ffn_gelu);
    RS_CHECK(hp->head_dim == 24 && hp->swa_window == 9 && hp->n_local == 10);
    RS_CHECK(hp->local_rope_base == 10000.0f && hp->rope_freq_base == 1000000.0f);
    RS_CHECK(fabsf(hp->embd_scale - sqrtf(32.0f)) < 1e-6f && hp->attn_softcap == 0.0f);
    RS_CHECK(fabsf(hp->attn_scale - 1.0f / sqrtf(24.0f)) < 1e-7f);
    /* 12 layers of K and V, 16 tokens, 2 KV heads of 24 floats. */
    RS_CHECK(rs_kvcache_block_bytes(m, 16) == 2 * 12 * 16 * 48 * sizeof(float));
    rs_model_destroy(&m);
    RS_CHECK(tu_mkmodel("g2", SMALL "gemma2 --layers 46 --head-dim 8", path, sizeof(path)) != NULL);
    RS_CHECK_MSG(rs_model_load(path, NULL, &m, err, sizeof(err)) == RS_OK, "%s", err);
    hp = rs_model_hparams(m);
    /* The 27B type (46 layers) scales the query by n_embd / n_head = 16, not head_dim. */
    RS_CHECK(hp->tied_output && hp->n_local == 23 && hp->attn_softcap == 50.0f &&
             hp->final_softcap == 30.0f && fabsf(hp->attn_scale - 0.25f) < 1e-7f);
    rs_model_destroy(&m);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_default_dot_per_cpu_and_type),
    RS_TEST(test_refdata_llama),
    RS_TEST(test_refdata_llama_hd48),
    RS_TEST(test_refdata_qwen2),
    RS_TEST(test_refdata_qwen3),
    RS_TEST(test_refdata_gemma2),
    RS_TEST(test_refdata_gemma3),
    RS_TEST(test_refdata_phi3),
    RS_TEST(test_refdata_llama256_q8_0),
    RS_TEST(test_refdata_llama256_q4_0),
    RS_TEST(test_refdata_llama256_q4_k_m),
    RS_TEST(test_refdata_llama256_q5_k_m),
    RS_TEST(test_refdata_llama256_q6_k),
    RS_TEST(test_random_llama_head_dim_gqa4),
    RS_TEST(test_random_qwen2_matches_reference),
    RS_TEST(test_random_qwen3_matches_reference),
    RS_TEST(test_random_gemma2_window_softcaps),
    RS_TEST(test_random_gemma3_local_global),
    RS_TEST(test_random_phi3_fused_window),
    RS_TEST(test_random_phi3_q8_0_fused_views),
    RS_TEST(test_unknown_architecture_lists_supported),
    RS_TEST(test_missing_arch_tensors_are_named),
    RS_TEST(test_missing_arch_keys_are_named),
    RS_TEST(test_tensors_foreign_to_the_arch_are_refused),
    RS_TEST(test_descriptor_resolves_hparams),
};
RS_TEST_MAIN(cases)

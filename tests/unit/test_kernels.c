/* SPDX-License-Identifier: MIT */
/*
 * CPU kernels: each variant against a double-precision reference within a
 * rounding bound; the SIMD and portable variants against each other; and the
 * bitwise properties batch invariance rests on (a row's result does not
 * depend on the other rows, the column split or the tile path; a quantized
 * matrix gives exactly the result of its dequantized F32 copy).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/quant.h"
#include "launcherd/engine/kernels.h"
#include "launcherd/engine/qdot.h"
#include "tests/rs_test.h"
#include "tests/unit/engine_testutil.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static const enum rs_ggml_type types[] = {RS_GGML_F32,  RS_GGML_F16,  RS_GGML_BF16,
                                           RS_GGML_Q8_0, RS_GGML_Q4_0, RS_GGML_Q4_K,
                                           RS_GGML_Q5_K, RS_GGML_Q6_K};
#define N_TYPES (sizeof(types) / sizeof(types[0]))

/* K rounded up to a whole number of the type's blocks. */
static uint32_t fit_cols(enum rs_ggml_type t, uint32_t K)
{
    uint32_t b = (uint32_t)rs_ggml_block_size(t);
    return (K + b - 1) / b * b;
}

/*
 * A rows x cols matrix of `type` with random values; *deq gets its values as
 * the test's own dequantizer (engine_testutil.h) reads them.
 */
static struct kern_mat make_mat(enum rs_ggml_type type, uint32_t rows, uint32_t cols, float **deq)
{
    struct kern_mat m = {NULL, type, rows, cols, (size_t)rs_ggml_row_bytes(type, cols), 0, 0};
    float *src = malloc((size_t)rows * cols * sizeof(float));
    uint8_t *data = malloc((size_t)rows * m.row_bytes);
    *deq = malloc((size_t)rows * cols * sizeof(float));
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        src[i] = frand();
    /* Block types get random blocks: any scale and quant bits, not only a quantizer's. */
    int random_blocks = type == RS_GGML_Q4_0 || type == RS_GGML_Q4_K || type == RS_GGML_Q5_K ||
                        type == RS_GGML_Q6_K || !rs_quant_supported(type);
    if (!random_blocks)
        for (uint32_t r = 0; r < rows; r++)
            rs_quant_row_from_f32(type, src + (size_t)r * cols, data + r * m.row_bytes, cols);
    else
        tu_random_blocks(type, data, rows * m.row_bytes / rs_ggml_type_size(type), &rng);
    for (uint32_t r = 0; r < rows; r++)
        tu_dequant_row(type, data + r * m.row_bytes, *deq + (size_t)r * cols, cols);
    free(src);
    m.data = data;
    return m;
}

static float *rand_vec(size_t n)
{
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        v[i] = frand();
    return v;
}

static int have_avx2(void)
{
    return kern_isa_supported(KERN_AVX2);
}

/* |y - exact| <= 2 K eps sum|w x| for every element, for both variants and every type. */
static int check_gemm_vs_reference(enum kern_isa isa)
{
    static const uint32_t shapes[][3] = {{1, 7, 5}, {3, 64, 9}, {5, 172, 13}, {17, 96, 8},
                                         {2, 8, 4},  {4, 33, 6}, {1, 200, 1}};
    for (size_t ti = 0; ti < N_TYPES; ti++)
        for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
            uint32_t M = shapes[si][0], K = fit_cols(types[ti], shapes[si][1]), N = shapes[si][2];
            float *deq, *x = rand_vec((size_t)M * K), *y = calloc((size_t)M * N, sizeof(float));
            struct kern_mat w = make_mat(types[ti], N, K, &deq);
            float *scr = malloc(kern_gemm_scratch_floats(K) * sizeof(float));
            kern_gemm(isa, &w, x, K, M, y, N, 0, N, 0, scr);
            for (uint32_t m = 0; m < M; m++)
                for (uint32_t n = 0; n < N; n++) {
                    double exact = 0, mag = 0;
                    for (uint32_t k = 0; k < K; k++) {
                        exact += (double)deq[(size_t)n * K + k] * x[(size_t)m * K + k];
                        mag += fabs((double)deq[(size_t)n * K + k] * x[(size_t)m * K + k]);
                    }
                    double got = y[(size_t)m * N + n];
                    RS_CHECK_MSG(fabs(got - exact) <= 2.0 * K * 0x1p-24 * mag + 1e-30,
                                 "%s %s M%u K%u N%u (%u,%u): %g vs %g", kern_isa_name(isa),
                                 rs_ggml_type_name(types[ti]), M, K, N, m, n, got, exact);
                }
            free(deq), free(x), free(y), free(scr), free((void *)w.data);
        }
    return 0;
}

static int test_gemm_portable_matches_reference(void)
{
    return check_gemm_vs_reference(KERN_PORTABLE);
}

static int test_gemm_avx2_matches_reference(void)
{
    if (!have_avx2())
        return 0; /* nothing to check on this CPU; the portable case still runs */
    return check_gemm_vs_reference(KERN_AVX2);
}

/* SIMD and portable agree to within the same bound (they differ only in FMA rounding). */
static int test_gemm_avx2_matches_portable(void)
{
    if (!have_avx2())
        return 0;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        uint32_t M = 9, K = 256, N = 11;
        float *deq, *x = rand_vec((size_t)M * K);
        float *a = calloc((size_t)M * N, sizeof(float)), *b = calloc((size_t)M * N, sizeof(float));
        struct kern_mat w = make_mat(types[ti], N, K, &deq);
        float *scr = malloc(kern_gemm_scratch_floats(K) * sizeof(float));
        kern_gemm(KERN_AVX2, &w, x, K, M, a, N, 0, N, 0, scr);
        kern_gemm(KERN_PORTABLE, &w, x, K, M, b, N, 0, N, 0, scr);
        for (uint32_t m = 0; m < M; m++)
            for (uint32_t n = 0; n < N; n++) {
                double mag = 0;
                for (uint32_t k = 0; k < K; k++)
                    mag += fabs((double)deq[(size_t)n * K + k] * x[(size_t)m * K + k]);
                float va = a[m * N + n], vb = b[m * N + n];
                RS_CHECK_MSG(fabs((double)va - vb) <= 4.0 * K * 0x1p-24 * mag, "%s (%u,%u): %g vs %g",
                             rs_ggml_type_name(types[ti]), m, n, va, vb);
            }
        free(deq), free(x), free(a), free(b), free(scr), free((void *)w.data);
    }
    return 0;
}

/*
 * The heart of batch invariance: row m of a many-row GEMM (panel path, any
 * column slicing) equals, bit for bit, the same row computed alone (register
 * path) and the F32 matrix of the dequantized values.
 */
/* Long K too, and at 2048 more than one of the AVX2 GEMM's activation blocks. */
static const uint32_t inv_shapes[][2] = {{23, 148}, {23, 1100}, {50, 2048}};

static int check_rows_invariant(enum kern_isa isa)
{
    for (size_t i = 0; i < N_TYPES * 3; i++) {
        size_t ti = i / 3;
        uint32_t M = inv_shapes[i % 3][0], K = fit_cols(types[ti], inv_shapes[i % 3][1]), N = 19;
        float *deq, *x = rand_vec((size_t)M * K);
        struct kern_mat w = make_mat(types[ti], N, K, &deq);
        struct kern_mat wf = {deq, RS_GGML_F32, N, K, (size_t)K * 4, 0, 0};
        float *all = calloc((size_t)M * N, sizeof(float)), *one = calloc(N, sizeof(float));
        float *f32 = calloc((size_t)M * N, sizeof(float));
        float *scr = malloc(kern_gemm_scratch_floats(K) * sizeof(float));
        /* Odd column slices, as different thread counts would cut them. */
        static const uint32_t cuts[] = {0, 3, 4, 11, 12, 19};
        for (size_t c = 0; c + 1 < sizeof(cuts) / sizeof(cuts[0]); c++)
            kern_gemm(isa, &w, x, K, M, all, N, cuts[c], cuts[c + 1], 0, scr);
        kern_gemm(isa, &wf, x, K, M, f32, N, 0, N, 0, scr);
        RS_CHECK_MSG(memcmp(all, f32, (size_t)M * N * 4) == 0,
                     "%s %s K%u: differs from dequantized F32", kern_isa_name(isa),
                     rs_ggml_type_name(types[ti]), K);
        for (uint32_t m = 0; m < M; m++) {
            for (uint32_t rows = 1; rows <= 3 && m + rows <= M; rows++) {
                float *few = calloc((size_t)rows * N, sizeof(float));
                kern_gemm(isa, &w, x + (size_t)m * K, K, rows, few, N, 0, N, 0, scr);
                RS_CHECK_MSG(memcmp(few, all + (size_t)m * N, N * 4) == 0,
                             "%s %s K%u: row %u differs in a %u-row batch", kern_isa_name(isa),
                             rs_ggml_type_name(types[ti]), K, m, rows);
                free(few);
            }
        }
        free(deq), free(x), free(all), free(one), free(f32), free(scr), free((void *)w.data);
    }
    return 0;
}

static int test_gemm_rows_bitwise_invariant_avx2(void)
{
    return have_avx2() ? check_rows_invariant(KERN_AVX2) : 0;
}

static int test_gemm_rows_bitwise_invariant_portable(void)
{
    return check_rows_invariant(KERN_PORTABLE);
}

static int test_gemm_rows_bitwise_invariant_avx512(void)
{
    return kern_isa_supported(KERN_AVX512) ? check_rows_invariant(KERN_AVX512) : 0;
}

/*
 * The AVX-512 prompt GEMM gives AVX2's bits for every type, row count (tile
 * remainders 1..5, the AVX2 hand-off at 3 rows), K with and without an 8-lane
 * tail, column slices with and without a whole 8-row panel, and accumulate.
 */
static int test_gemm_avx512_matches_avx2_bitwise(void)
{
    if (!kern_isa_supported(KERN_AVX512))
        return 0; /* nothing to check on this CPU */
    static const uint32_t shapes[][3] = {{4, 64, 8},  {5, 37, 9},   {6, 256, 16}, {7, 300, 17},
                                         {13, 96, 24}, {3, 64, 16}, {29, 515, 11}, {12, 8, 7}};
    for (size_t ti = 0; ti < N_TYPES; ti++)
        for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
            for (int pass = 0; pass < 4; pass++) {
                int acc = pass & 1, sliced = pass >> 1;
                uint32_t M = shapes[si][0], K = fit_cols(types[ti], shapes[si][1]);
                uint32_t N = shapes[si][2];
                float *deq, *x = rand_vec((size_t)M * K), *base = rand_vec((size_t)M * N);
                float *a = malloc((size_t)M * N * 4), *b = malloc((size_t)M * N * 4);
                memcpy(a, base, (size_t)M * N * 4);
                memcpy(b, base, (size_t)M * N * 4);
                struct kern_mat w = make_mat(types[ti], N, K, &deq);
                float *scr = malloc(kern_gemm_scratch_floats(K) * sizeof(float));
                /* Whole, or cut as threads would: an odd start, a slice of one whole panel. */
                uint32_t cuts[4] = {0, N < 5 ? N : 5, N < 13 ? N : 13, N};
                for (int c = 0; c < 3; c++) {
                    uint32_t n0 = sliced ? cuts[c] : 0, n1 = sliced ? cuts[c + 1] : N;
                    if (n0 < n1) {
                        kern_gemm(KERN_AVX512, &w, x, K, M, a, N, n0, n1, acc, scr);
                        kern_gemm(KERN_AVX2, &w, x, K, M, b, N, n0, n1, acc, scr);
                    }
                    if (!sliced)
                        break;
                }
                RS_CHECK_MSG(memcmp(a, b, (size_t)M * N * 4) == 0,
                             "%s M%u K%u N%u accumulate %d: AVX-512 differs from AVX2",
                             rs_ggml_type_name(types[ti]), M, K, N, acc);
                free(deq), free(x), free(base), free(a), free(b), free(scr), free((void *)w.data);
            }
    return 0;
}

/* accumulate = 1 adds the rounded dot to what y held. */
static int test_gemm_accumulate_adds_to_output(void)
{
    uint32_t M = 5, K = 40, N = 6;
    float *deq, *x = rand_vec((size_t)M * K), *base = rand_vec((size_t)M * N);
    struct kern_mat w = make_mat(RS_GGML_F16, N, K, &deq);
    float *scr = malloc(kern_gemm_scratch_floats(K) * sizeof(float));
    for (int isa = 0; isa <= (have_avx2() ? 1 : 0); isa++) {
        float *y = malloc((size_t)M * N * 4), *d = calloc((size_t)M * N, 4);
        memcpy(y, base, (size_t)M * N * 4);
        kern_gemm((enum kern_isa)isa, &w, x, K, M, y, N, 0, N, 1, scr);
        kern_gemm((enum kern_isa)isa, &w, x, K, M, d, N, 0, N, 0, scr);
        for (uint32_t i = 0; i < M * N; i++)
            RS_CHECK(y[i] == base[i] + d[i]);
        free(y), free(d);
    }
    free(deq), free(x), free(base), free(scr), free((void *)w.data);
    return 0;
}

/*
 * Attention over a paged cache with a scrambled block table, vs a double
 * reference: positions first..npos-1 visible (a sliding window when first >
 * 0), scores soft-capped when cap > 0.
 */
static int check_attention(enum kern_isa isa, uint32_t hd, uint32_t group, uint32_t first,
                           uint32_t npos, float cap)
{
    uint32_t bs = 4, nkv = 2, nblocks = (npos + bs - 1) / bs + 3;
    size_t stride = (size_t)nkv * bs * hd;
    float *k = rand_vec(nblocks * stride), *v = rand_vec(nblocks * stride);
    uint32_t *table = malloc(nblocks * sizeof(uint32_t));
    for (uint32_t i = 0; i < nblocks; i++)
        table[i] = (i * 5 + 2) % nblocks; /* a permutation (5 and nblocks coprime below) */
    float *q = rand_vec((size_t)group * hd), *out = malloc((size_t)group * hd * 4);
    float *scores = malloc((size_t)group * npos * 4);
    struct kern_kv_layout lay = {k, v, stride, bs, hd};
    float scale = 1.0f / sqrtf((float)hd);
    uint32_t kvh = 1;
    struct kern_attn a = {first, npos, scale, cap};
    kern_attention(isa, &lay, table, kvh, group, &a, q, scores, out);
    for (uint32_t g = 0; g < group; g++) {
        double s[512], mx = -1e300, sum = 0;
        for (uint32_t t = first; t < npos; t++) {
            const float *kt = k + table[t / bs] * stride + ((size_t)kvh * bs + t % bs) * hd;
            double d = 0;
            for (uint32_t i = 0; i < hd; i++)
                d += (double)q[g * hd + i] * kt[i];
            s[t] = d * scale;
            if (cap > 0)
                s[t] = cap * tanh(s[t] / cap);
            mx = s[t] > mx ? s[t] : mx;
        }
        for (uint32_t t = first; t < npos; t++)
            sum += (s[t] = exp(s[t] - mx));
        for (uint32_t i = 0; i < hd; i++) {
            double o = 0;
            for (uint32_t t = first; t < npos; t++)
                o += s[t] / sum * v[table[t / bs] * stride + ((size_t)kvh * bs + t % bs) * hd + i];
            RS_CHECK_MSG(fabs(o - out[g * hd + i]) < 1e-5, "%s hd%u g%u [%u,%u) cap %g: %g vs %g",
                         kern_isa_name(isa), hd, g, first, npos, (double)cap, out[g * hd + i], o);
        }
    }
    if (npos - 1 > first) { /* two rows at once: the row before, and this one, bit for bit */
        float *q0 = rand_vec((size_t)group * hd), *o0 = malloc((size_t)group * hd * 4);
        float *p0 = malloc((size_t)group * hd * 4), *p1 = malloc((size_t)group * hd * 4);
        float *sc2 = malloc((size_t)group * (2 * npos + 1) * 4);
        struct kern_attn a0 = {first, npos - 1, scale, cap};
        kern_attention(isa, &lay, table, kvh, group, &a0, q0, scores, o0);
        kern_attention2(isa, &lay, table, kvh, group, &a0, q0, q, sc2, p0, p1);
        RS_CHECK_MSG(memcmp(p0, o0, (size_t)group * hd * 4) == 0 &&
                         memcmp(p1, out, (size_t)group * hd * 4) == 0,
                     "%s hd%u [%u,%u) cap %g: two rows at once differ from one by one",
                     kern_isa_name(isa), hd, first, npos, (double)cap);
        free(q0), free(o0), free(p0), free(p1), free(sc2);
    }
    free(k), free(v), free(table), free(q), free(out), free(scores);
    return 0;
}

static int test_attention_matches_reference(void)
{
    static const uint32_t cases[][3] = {{8, 2, 1},   {8, 2, 37}, {24, 1, 13},
                                        {64, 4, 200}, {6, 3, 9},  {44, 2, 23}};
    for (int isa = 0; isa <= (have_avx2() ? 1 : 0); isa++)
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
            if (check_attention((enum kern_isa)isa, cases[c][0], cases[c][1], 0, cases[c][2],
                                0.0f) != 0)
                return 1;
    return 0;
}

/* Sliding windows starting inside a block, on a block boundary, of one position; soft-caps. */
static int test_attention_window_and_softcap_match_reference(void)
{
    static const uint32_t cases[][4] = {{8, 2, 5, 37}, {32, 2, 8, 16}, {24, 1, 12, 13},
                                        {72, 4, 101, 200}, {6, 3, 3, 9}, {16, 2, 0, 30}};
    static const float caps[] = {0.0f, 2.0f, 50.0f};
    for (int isa = 0; isa <= (have_avx2() ? 1 : 0); isa++)
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
            for (size_t j = 0; j < sizeof(caps) / sizeof(caps[0]); j++)
                if (check_attention((enum kern_isa)isa, cases[c][0], cases[c][1], cases[c][2],
                                    cases[c][3], caps[j]) != 0)
                    return 1;
    return 0;
}

/*
 * RoPE with base, linear scale and per-frequency factors, vs double math:
 * pair i is (2i, 2i+1) in the normal pairing, (i, i + rope/2) in NEOX; the
 * dims past rope_dim are untouched.
 */
static int check_rope(int neox)
{
    uint32_t hd = 12, rope = 8, heads = 3;
    float ff[4] = {1.0f, 2.0f, 4.0f, 8.0f}, cs[8];
    for (int with_ff = 0; with_ff < 2; with_ff++) {
        float *x = rand_vec(heads * hd), *y = malloc(heads * hd * 4);
        memcpy(y, x, heads * hd * 4);
        uint32_t pos = 37;
        kern_rope_table(pos, rope, 500.0f, 0.25f, with_ff ? ff : NULL, cs);
        for (uint32_t h = 0; h < heads; h++)
            kern_rope_head(y + h * hd, rope, neox, cs);
        for (uint32_t h = 0; h < heads; h++) {
            for (uint32_t i = rope; i < hd; i++)
                RS_CHECK(y[h * hd + i] == x[h * hd + i]);
            for (uint32_t i = 0; i < rope / 2; i++) {
                uint32_t i0 = neox ? i : 2 * i, i1 = neox ? i + rope / 2 : 2 * i + 1;
                const float *a = x + h * hd, *b = y + h * hd;
                double th = pos * 0.25 * pow(500.0, -2.0 * i / rope) / (with_ff ? ff[i] : 1);
                double e0 = a[i0] * cos(th) - a[i1] * sin(th);
                double e1 = a[i0] * sin(th) + a[i1] * cos(th);
                RS_CHECK_MSG(fabs(b[i0] - e0) < 1e-6 && fabs(b[i1] - e1) < 1e-6, "neox %d h%u i%u",
                             neox, h, i);
            }
        }
        free(x), free(y);
    }
    return 0;
}

static int test_rope_rotates_adjacent_pairs(void)
{
    return check_rope(0);
}

static int test_rope_neox_rotates_halves(void)
{
    return check_rope(1);
}

/* GeGLU (tanh GELU) in both variants vs double math; the final-logit soft-cap too. */
static int test_geglu_and_softcap_match_reference(void)
{
    uint32_t n = 77;
    float *g0 = rand_vec(n), *u = rand_vec(n), *g = malloc(n * 4);
    for (uint32_t i = 0; i < n; i++)
        g0[i] *= 6.0f; /* both tails of the GELU */
    for (int isa = 0; isa <= (have_avx2() ? 1 : 0); isa++) {
        memcpy(g, g0, n * 4);
        kern_geglu((enum kern_isa)isa, g, u, 29);
        kern_geglu((enum kern_isa)isa, g + 29, u + 29, n - 29);
        for (uint32_t i = 0; i < n; i++) {
            double x = g0[i];
            double e = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))) * u[i];
            RS_CHECK_MSG(fabs(g[i] - e) <= 2e-6 * (1 + fabs(e)), "%s %u: %g vs %g",
                         kern_isa_name((enum kern_isa)isa), i, g[i], e);
        }
    }
    for (int isa = 0; isa <= (have_avx2() ? 1 : 0); isa++) {
        memcpy(g, g0, n * 4);
        kern_softcap((enum kern_isa)isa, g, n, 3.0f);
        for (uint32_t i = 0; i < n; i++)
            RS_CHECK_MSG(fabs(g[i] - 3.0 * tanh(g0[i] / 3.0)) < 1e-6, "%s %u",
                         kern_isa_name((enum kern_isa)isa), i);
    }
    free(g0), free(u), free(g);
    return 0;
}

static int test_rmsnorm_and_swiglu_match_reference(void)
{
    uint32_t n = 75;
    float *x = rand_vec(n), *w = rand_vec(n), *out = malloc(n * 4);
    kern_rmsnorm(x, w, n, 1e-5f, out);
    double ss = 0;
    for (uint32_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    double sc = 1.0 / sqrt(ss / n + 1e-5);
    for (uint32_t i = 0; i < n; i++)
        RS_CHECK(fabs(out[i] - w[i] * x[i] * sc) < 1e-6);
    float *g = rand_vec(n), *u = rand_vec(n), *g0 = malloc(n * 4);
    for (uint32_t i = 0; i < n; i++) /* cover the whole range of the vector exp, and beyond */
        g[i] *= i % 5 == 0 ? 120.0f : 12.0f;
    memcpy(g0, g, n * 4);
    for (int isa = 0; isa <= (have_avx2() ? 1 : 0); isa++) {
        memcpy(g, g0, n * 4);
        /* Two slices, as two threads cut a row: a lane's value must not depend on the cut. */
        kern_swiglu((enum kern_isa)isa, g, u, 37);
        kern_swiglu((enum kern_isa)isa, g + 37, u + 37, n - 37);
        for (uint32_t i = 0; i < n; i++) {
            double want = g0[i] / (1 + exp(-(double)g0[i])) * u[i];
            RS_CHECK_MSG(fabs(g[i] - want) <= 1e-6 * (1 + fabs(want)), "%s: silu(%g)*%g = %g, not %g",
                         kern_isa_name((enum kern_isa)isa), g0[i], u[i], g[i], want);
        }
        float one[1];
        for (uint32_t i = 0; i < n; i++) { /* the same value alone (tail path) */
            one[0] = g0[i];
            kern_swiglu((enum kern_isa)isa, one, u + i, 1);
            RS_CHECK(memcmp(one, g + i, 4) == 0);
        }
    }
    free(x), free(w), free(out), free(g), free(u), free(g0);
    return 0;
}

/* Every variant widens every type to exactly the values the test's own dequantizer reads. */
static int test_widen_matches_reference_dequantizer(void)
{
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        uint32_t K = fit_cols(types[ti], 520), N = 5;
        float *deq, *row = malloc(K * sizeof(float));
        struct kern_mat w = make_mat(types[ti], N, K, &deq);
        for (int isa = 0; isa <= (have_avx2() ? 1 : 0); isa++)
            for (uint32_t n = 0; n < N; n++) {
                kern_widen_row((enum kern_isa)isa, &w, n, row);
                for (uint32_t k = 0; k < K; k++)
                    RS_CHECK_MSG(memcmp(&row[k], &deq[(size_t)n * K + k], 4) == 0,
                                 "%s %s row %u [%u]: %g vs %g", kern_isa_name((enum kern_isa)isa),
                                 rs_ggml_type_name(types[ti]), n, k, row[k], deq[(size_t)n * K + k]);
            }
        /* common/quant's dequantizer (what ringserve-mkmodel --convert reads with) agrees */
        for (uint32_t n = 0; n < N && rs_quant_supported(types[ti]); n++) {
            RS_CHECK(rs_quant_row_to_f32(types[ti], (const uint8_t *)w.data + n * w.row_bytes,
                                         row, K) == RS_OK);
            RS_CHECK_MSG(memcmp(row, deq + (size_t)n * K, K * sizeof(float)) == 0,
                         "common/quant %s row %u differs", rs_ggml_type_name(types[ti]), n);
        }
        free(deq), free(row), free((void *)w.data);
    }
    return 0;
}

static int test_isa_detection_is_consistent(void)
{
    RS_CHECK(kern_isa_supported(KERN_PORTABLE));
    enum kern_isa best = kern_isa_detect();
    RS_CHECK(kern_isa_supported(best));
#if defined(__x86_64__)
    /* Each variant claims only CPUs with its instructions (AVX512 once passed on AVX2 alone). */
    RS_CHECK(!kern_isa_supported(KERN_AVX512) || (__builtin_cpu_supports("avx512vnni") &&
                                                   __builtin_cpu_supports("avx512bw")));
    RS_CHECK(!kern_isa_supported(KERN_AVX2) || __builtin_cpu_supports("fma"));
    RS_CHECK(best != KERN_AVX512 || __builtin_cpu_supports("avx512f"));
#endif
    RS_CHECK(strcmp(kern_isa_name(KERN_AVX2), "avx2") == 0);
    RS_CHECK(kern_type_supported(RS_GGML_Q8_0) && kern_type_supported(RS_GGML_Q4_K));
    RS_CHECK(kern_type_supported(RS_GGML_Q5_K) && !kern_type_supported(RS_GGML_Q5_0) &&
             !kern_type_supported(RS_GGML_Q4_1));
    return 0;
}

/* --- integer dot products (qdot.h) ---------------------------------------------------- */

static const enum rs_ggml_type qtypes[] = {RS_GGML_Q8_0, RS_GGML_Q4_0, RS_GGML_Q4_K,
                                           RS_GGML_Q5_K, RS_GGML_Q6_K};
#define N_QTYPES (sizeof(qtypes) / sizeof(qtypes[0]))

/* M x N outputs of the integer dot with `isa`, in column slices (as threads cut them). */
/* Y = X W^T in two slices; accumulate: added to a Y that holds i / 7 at index i. */
static float *qgemm_acc(enum kern_isa isa, struct kern_mat *w, const float *x, uint32_t M,
                        int accumulate)
{
    float *y = calloc((size_t)M * w->rows, sizeof(float));
    float *scr = malloc(kern_gemm_scratch_floats(w->cols) * sizeof(float));
    for (size_t i = 0; accumulate && i < (size_t)M * w->rows; i++)
        y[i] = (float)i / 7.0f;
    w->qdot = 1;
    uint32_t cut = w->rows / 3;
    kern_gemm(isa, w, x, w->cols, M, y, w->rows, 0, cut, accumulate, scr);
    kern_gemm(isa, w, x, w->cols, M, y, w->rows, cut, w->rows, accumulate, scr);
    free(scr);
    return y;
}

static float *qgemm(enum kern_isa isa, struct kern_mat *w, const float *x, uint32_t M)
{
    return qgemm_acc(isa, w, x, M, 0);
}

/* Activations with a zero row, a huge row and a tiny one beside random rows. */
static float *qdot_inputs(uint32_t M, uint32_t K)
{
    float *x = rand_vec((size_t)M * K);
    for (uint32_t k = 0; k < K; k++) {
        x[k] = 0.0f;
        x[K + k] *= 3e4f;
        x[2 * (size_t)K + k] *= 1e-30f;
    }
    return x;
}

/* Portable, AVX2 and AVX-512 VNNI integer dots give the same bits for every type. */
static int test_qdot_variants_agree_bitwise(void)
{
    for (size_t ti = 0; ti < N_QTYPES; ti++) {
        /* Q8_0/Q4_0: 17 blocks, not a multiple of the 8 lanes; an odd count in the last group */
        uint32_t M = 21, N = 13, K = rs_ggml_block_size(qtypes[ti]) == 32 ? 544 : 512;
        float *deq, *x = qdot_inputs(M, K);
        struct kern_mat w = make_mat(qtypes[ti], N, K, &deq);
        RS_CHECK(kern_qdot_supported(qtypes[ti]));
        float *ref = qgemm(KERN_PORTABLE, &w, x, M);
        for (int isa = KERN_AVX2; isa <= KERN_AVX512; isa++) {
            if (!kern_isa_supported((enum kern_isa)isa)) {
                fprintf(stderr, "%s: not on this CPU\n", kern_isa_name((enum kern_isa)isa));
                continue;
            }
            float *got = qgemm((enum kern_isa)isa, &w, x, M);
            RS_CHECK_MSG(memcmp(got, ref, (size_t)M * N * 4) == 0, "%s %s: differs from portable",
                         kern_isa_name((enum kern_isa)isa), rs_ggml_type_name(qtypes[ti]));
            free(got);
            /* 1-3 rows (decode) take the row dots, not the panel */
            for (uint32_t few = 1; few <= 3; few++) {
                float *a = qgemm((enum kern_isa)isa, &w, x + (size_t)few * K, few);
                float *b = qgemm(KERN_PORTABLE, &w, x + (size_t)few * K, few);
                RS_CHECK_MSG(memcmp(a, b, (size_t)few * N * 4) == 0,
                             "%s %s: %u rows differ from portable",
                             kern_isa_name((enum kern_isa)isa), rs_ggml_type_name(qtypes[ti]), few);
                free(a), free(b);
            }
        }
        for (uint32_t n = 0; n < N; n++)
            RS_CHECK(ref[n] == 0.0f); /* the zero row */
        free(ref), free(deq), free(x), free((void *)w.data);
    }
    return 0;
}

/* Bitwise equal, or both NaN (the payload is the hardware's choice). */
static int same_floats(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0 && !(isnan(a[i]) && isnan(b[i]))) {
            fprintf(stderr, "output %zu: %.9g, expected %.9g\n", i, a[i], b[i]);
            return 0;
        }
    return 1;
}

/*
 * The panel GEMMs, AVX-512 VNNI and AVX2 (prompts: more rows than one chunk
 * of 96 or 64, slices that are not a multiple of the 4-row tile, a row count
 * that leaves a part-filled register, a row with a NaN and one with an inf),
 * give the portable dot's bits.
 */
static int test_qdot_panel_matches_portable(void)
{
    int ran = 0;
    for (int isa = KERN_AVX2; isa <= KERN_AVX512; isa++) {
        if (!kern_isa_supported((enum kern_isa)isa)) {
            fprintf(stderr, "%s: not on this CPU\n", kern_isa_name((enum kern_isa)isa));
            continue;
        }
        ran++;
        /* shapes: a partial last tile, weight tile and block group; then two chunks, more
         * weight rows than one pass unpacks, and K in several passes with a partial last */
        for (size_t si = 0; si < 2 * N_QTYPES; si++) {
            size_t ti = si % N_QTYPES;
            int k32 = rs_ggml_block_size(qtypes[ti]) == 32;
            uint32_t M = si < N_QTYPES ? 113 : 150, N = si < N_QTYPES ? 14 : 53;
            uint32_t K = si < N_QTYPES ? (k32 ? 288 : 512) : (k32 ? 800 : 1280);
            float *deq, *x = qdot_inputs(M, K);
            x[5 * (size_t)K + 7] = NAN;
            x[6 * (size_t)K + K - 1] = INFINITY;
            struct kern_mat w = make_mat(qtypes[ti], N, K, &deq);
            int acc = si >= N_QTYPES; /* the second shape adds to y */
            float *ref = qgemm_acc(KERN_PORTABLE, &w, x, M, acc);
            float *got = qgemm_acc((enum kern_isa)isa, &w, x, M, acc);
            RS_CHECK_MSG(same_floats(got, ref, (size_t)M * N),
                         "%s %s %ux%ux%u: panel differs from portable",
                         kern_isa_name((enum kern_isa)isa), rs_ggml_type_name(qtypes[ti]), M, N, K);
            RS_CHECK(isnan(ref[5 * (size_t)N])); /* a NaN value makes its span's d NaN */
            RS_CHECK(isnan(ref[6 * (size_t)N])); /* the inf row: d = inf times level 0 */
            free(ref), free(got), free(deq), free(x), free((void *)w.data);
        }
    }
    return ran ? 0 : RS_TEST_SKIP;
}

/* y = x w^T of w's columns [c0, c0 + kc) (as a tensor-parallel shard reads them), in slices. */
static float *qgemm_cols(enum kern_isa isa, const struct kern_mat *w, const float *x, uint32_t M,
                         uint32_t c0, uint32_t kc)
{
    struct kern_mat v = kern_mat_cols(w, c0, kc);
    return qgemm(isa, &v, x + c0, M);
}

/*
 * Rows interleaved for the batch-1 dot (kern_qdot_interleave) give the plain
 * rows' bits on every path that reads them: one activation row (8-row dot),
 * a few (the 8-row dot per row), many (the panel), a slice that cuts a group
 * (its rows gathered), outputs added into y, and a column shard (--tp).
 */
static int test_qdot_interleaved_rows_match_plain(void)
{
    int ran = 0;
    for (size_t ti = 0; ti < N_QTYPES; ti++) {
        uint32_t N = 56, K = rs_ggml_block_size(qtypes[ti]) == 32 ? 544 : 512;
        float *deq, *x = qdot_inputs(23, K), *xr = x + 3 * (size_t)K; /* xr: random rows */
        struct kern_mat w = make_mat(qtypes[ti], N, K, &deq);
        w.qdot = 1;
        RS_CHECK(kern_qdot_interleave(KERN_PORTABLE, &w) == 0); /* no 8-row dot to read them */
        for (int isa = KERN_AVX2; isa <= KERN_AVX512; isa++) {
            uint32_t g = kern_isa_supported((enum kern_isa)isa)
                             ? kern_qdot_interleave((enum kern_isa)isa, &w) : 0;
            if (isa == KERN_AVX2 && kern_isa_supported(KERN_AVX2)) /* every type */
                RS_CHECK(g == 8);
            if (g == 0)
                continue;
            ran++;
            size_t bytes = (size_t)N * w.row_bytes;
            uint8_t *il = malloc(bytes);
            memcpy(il, w.data, bytes);
            struct kern_mat wi = w;
            RS_CHECK(kern_interleave_rows(&wi, il, g) == RS_OK);
            RS_CHECK(memcmp(il, w.data, bytes) != 0); /* the layout did change */
            wi.data = il, wi.interleave = g;
            for (uint32_t M = 1; M <= 20; M += M < 3 ? 2 : 17)
                for (int acc = 0; acc < 2; acc++) {
                    const float *xm = M < 20 ? xr : x; /* 20: the zero, huge and tiny rows too */
                    float *a = qgemm_acc((enum kern_isa)isa, &w, xm, M, acc);
                    float *b = qgemm_acc((enum kern_isa)isa, &wi, xm, M, acc);
                    RS_CHECK_MSG(same_floats(b, a, (size_t)M * N), "%s %s: %u rows, acc %d",
                                 kern_isa_name((enum kern_isa)isa),
                                 rs_ggml_type_name(qtypes[ti]), M, acc);
                    free(a), free(b);
                }
            uint32_t c0 = K / 2 / 32 * 32, kc = K - c0; /* the second of two shards */
            for (uint32_t M = 1; M <= 20; M += 19) {
                float *a = qgemm_cols((enum kern_isa)isa, &w, M < 20 ? xr : x, M, c0, kc);
                float *b = qgemm_cols((enum kern_isa)isa, &wi, M < 20 ? xr : x, M, c0, kc);
                RS_CHECK_MSG(same_floats(b, a, (size_t)M * N), "%s %s: shard, %u rows",
                             kern_isa_name((enum kern_isa)isa), rs_ggml_type_name(qtypes[ti]), M);
                free(a), free(b);
            }
            free(il);
        }
        struct kern_mat odd = w;
        odd.rows = N - 1; /* not whole groups */
        RS_CHECK(kern_qdot_interleave(KERN_AVX2, &odd) == 0);
        RS_CHECK(kern_interleave_rows(&odd, (void *)(uintptr_t)w.data, 8) == RS_EINVAL);
        free(deq), free(x), free((void *)w.data);
    }
    return ran ? 0 : RS_TEST_SKIP;
}

/*
 * The activation quantizer gives the scalar code's levels, scales and sums
 * with every CPU variant, for both spans: random rows, a zero row, -0, values
 * far below 2^-120 (a span that would overflow 127 / amax), huge ones, and
 * spans holding an inf or a NaN (the SIMD code hands those to the scalar one).
 */
static int test_qdot_quantizer_variants_agree(void)
{
    const uint32_t K = 544 + 256 * 2; /* 33 blocks: padding in the last group; 4 K-quant spans */
    float *x = rand_vec(K);
    x[3] = -0.0f;
    for (uint32_t k = 32; k < 64; k++)
        x[k] = x[k] * 1e-39f; /* subnormal block */
    for (uint32_t k = 256; k < 288; k++)
        x[k] = 0.0f;
    x[300] = 3e38f, x[301] = -3e38f;
    x[400] = INFINITY;
    x[520] = NAN;
    void *ma = malloc(kq_act_bytes(K)), *mb = malloc(kq_act_bytes(K));
    struct kq_act a, b;
    kq_act_at(ma, K, &a);
    kq_act_at(mb, K, &b);
    for (uint32_t span = 32; span <= 256; span *= 8) {
        uint32_t n = K / span * span;
        kq_quantize_row_on(KERN_PORTABLE, x, n, span, &a);
        for (int isa = KERN_AVX2; isa <= KERN_AVX512; isa++) {
            if (!kern_isa_supported((enum kern_isa)isa))
                continue;
            memset(mb, 0x5a, kq_act_bytes(K));
            kq_act_at(mb, K, &b);
            kq_quantize_row_on((enum kern_isa)isa, x, n, span, &b);
            RS_CHECK_MSG(memcmp(a.q, b.q, (size_t)kq_padded_blocks(n) * KQ_BLOCK) == 0,
                         "span %u: levels differ", span);
            RS_CHECK_MSG(memcmp(a.s, b.s, kq_padded_blocks(n) * 4) == 0, "span %u: sums differ", span);
            RS_CHECK_MSG(same_floats(a.d, b.d, kq_padded_blocks(n)), "span %u: scales differ", span);
            RS_CHECK_MSG(memcmp(a.h, b.h, kq_padded_blocks(n) * 4) == 0,
                         "span %u: 16-level sums differ", span);
        }
        for (uint32_t i = 0; i < 2 * kq_padded_blocks(n); i++) { /* h: each 16 levels' sum */
            int sum = 0;
            for (uint32_t k = 0; k < 16; k++)
                sum += a.q[16 * i + k];
            RS_CHECK_MSG(a.h[i] == sum, "span %u: 16-level sum %u is %d, not %d", span, i,
                         a.h[i], sum);
        }
        for (uint32_t i = 0; i < KQ_BLOCK; i++) /* the subnormal block's levels are 0 */
            RS_CHECK(span != 32 || a.q[KQ_BLOCK + i] == 0);
    }
    free(ma), free(mb), free(x);
    return 0;
}

/* Row m of a many-row integer GEMM equals the row alone and in 2- and 3-row batches. */
static int test_qdot_rows_invariant(void)
{
    enum kern_isa isa = kern_isa_detect();
    for (size_t ti = 0; ti < N_QTYPES; ti++) {
        uint32_t M = 37, N = 11, K = 256; /* 37 rows: more than one 16-row chunk */
        float *deq, *x = qdot_inputs(M, K);
        struct kern_mat w = make_mat(qtypes[ti], N, K, &deq);
        float *all = qgemm(isa, &w, x, M);
        for (uint32_t m = 0; m < M; m++)
            for (uint32_t rows = 1; rows <= 3 && m + rows <= M; rows++) {
                float *few = qgemm(isa, &w, x + (size_t)m * K, rows);
                RS_CHECK_MSG(memcmp(few, all + (size_t)m * N, (size_t)rows * N * 4) == 0,
                             "%s: row %u differs in a %u-row batch", rs_ggml_type_name(qtypes[ti]),
                             m, rows);
                free(few);
            }
        free(all), free(deq), free(x), free((void *)w.data);
    }
    return 0;
}

/*
 * Against the exact dot of the dequantized weights: quantizing x moves each
 * value by at most half its span's step d = amax / 127 (span: 32 values, 256
 * for the K-quants), so the dot moves by at most sum_s d_s / 2 * sum_{i in s} |w_i|; float rounding adds a few ulps
 * of sum |w x| on top (2^-20 of it allowed).
 */
static int test_qdot_within_activation_rounding(void)
{
    for (size_t ti = 0; ti < N_QTYPES; ti++) {
        uint32_t M = 5, N = 9, K = 512;
        float *deq, *x = qdot_inputs(M, K);
        struct kern_mat w = make_mat(qtypes[ti], N, K, &deq);
        float *y = qgemm(kern_isa_detect(), &w, x, M);
        for (uint32_t m = 0; m < M; m++)
            for (uint32_t n = 0; n < N; n++) {
                const float *xr = x + (size_t)m * K, *wr = deq + (size_t)n * K;
                double exact = 0, bound = 0, mag = 0;
                uint32_t span = (uint32_t)rs_ggml_block_size(qtypes[ti]);
                for (uint32_t b = 0; b < K / span; b++) {
                    double amax = 0, wsum = 0;
                    for (uint32_t i = b * span; i < (b + 1) * span; i++) {
                        amax = fmax(amax, fabs(xr[i]));
                        wsum += fabs(wr[i]);
                        exact += (double)wr[i] * xr[i];
                        mag += fabs((double)wr[i] * xr[i]);
                    }
                    bound += amax / 127 / 2 * wsum;
                }
                double err = fabs(y[(size_t)m * N + n] - exact);
                RS_CHECK_MSG(err <= bound * (1 + 1e-6) + mag * 0x1p-20, "%s row %u col %u: %g > %g",
                             rs_ggml_type_name(qtypes[ti]), m, n, err, bound);
            }
        free(y), free(deq), free(x), free((void *)w.data);
    }
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_gemm_portable_matches_reference),
    RS_TEST(test_gemm_avx2_matches_reference),
    RS_TEST(test_gemm_avx2_matches_portable),
    RS_TEST(test_gemm_rows_bitwise_invariant_avx2),
    RS_TEST(test_gemm_rows_bitwise_invariant_portable),
    RS_TEST(test_gemm_rows_bitwise_invariant_avx512),
    RS_TEST(test_gemm_avx512_matches_avx2_bitwise),
    RS_TEST(test_gemm_accumulate_adds_to_output),
    RS_TEST(test_attention_matches_reference),
    RS_TEST(test_rope_rotates_adjacent_pairs),
    RS_TEST(test_rope_neox_rotates_halves),
    RS_TEST(test_geglu_and_softcap_match_reference),
    RS_TEST(test_attention_window_and_softcap_match_reference),
    RS_TEST(test_rmsnorm_and_swiglu_match_reference),
    RS_TEST(test_widen_matches_reference_dequantizer),
    RS_TEST(test_isa_detection_is_consistent),
    RS_TEST(test_qdot_variants_agree_bitwise),
    RS_TEST(test_qdot_quantizer_variants_agree),
    RS_TEST(test_qdot_rows_invariant),
    RS_TEST(test_qdot_panel_matches_portable),
    RS_TEST(test_qdot_interleaved_rows_match_plain),
    RS_TEST(test_qdot_within_activation_rounding),
};
RS_TEST_MAIN(cases)

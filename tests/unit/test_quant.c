/* SPDX-License-Identifier: MIT */
/*
 * common/quant: F16/BF16 rounding checked against an independent reference
 * (nearest representable value found by binary search over the ordered
 * half/bfloat16 values, ties to even), the SIMD row paths against the scalar
 * definition over every half and a million random floats, and Q8_0 against
 * ggml's block layout and rounding rule.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/gguf.h"
#include "common/quant.h"
#include "tests/rs_test.h"

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t rng = 0x1234567887654321ull;

static uint32_t rand32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* Value of a non-negative half by its definition (independent of quant.c). */
static double half_value(uint32_t h)
{
    uint32_t e = h >> 10, m = h & 0x3ff;
    return e == 0 ? ldexp((double)m, -24) : ldexp(1.0 + m / 1024.0, (int)e - 15);
}

static double bf16_value(uint32_t h)
{
    return (double)from_bits(h << 16);
}

/*
 * Round-to-nearest-even of |x| into a format whose non-negative finite values
 * are ordered by their bit patterns 0..max_bits; `beyond` is the value the
 * next pattern would have with an unbounded exponent (overflow threshold).
 */
static uint32_t ref_round(double ax, double (*value)(uint32_t), uint32_t max_bits, double beyond,
                          uint32_t inf_bits)
{
    uint32_t lo = 0, hi = max_bits;
    if (ax >= value(max_bits)) {
        double mid = (value(max_bits) + beyond) / 2;
        return ax < mid || (ax == mid && (max_bits & 1) == 0) ? max_bits : inf_bits;
    }
    while (hi - lo > 1) { /* value(lo) <= ax < value(hi) */
        uint32_t m = lo + (hi - lo) / 2;
        if (value(m) <= ax)
            lo = m;
        else
            hi = m;
    }
    double dl = ax - value(lo), dh = value(hi) - ax;
    if (dl < dh)
        return lo;
    if (dh < dl)
        return hi;
    return (lo & 1) == 0 ? lo : hi;
}

static uint16_t ref_f16(float x)
{
    uint16_t sign = (bits(x) >> 16) & 0x8000;
    return sign | (uint16_t)ref_round(fabs((double)x), half_value, 0x7bff, 65536.0, 0x7c00);
}

static uint16_t ref_bf16(float x)
{
    uint16_t sign = (bits(x) >> 16) & 0x8000;
    return sign | (uint16_t)ref_round(fabs((double)x), bf16_value, 0x7f7f, ldexp(1.0, 128), 0x7f80);
}

/* Interesting floats: around every half boundary, midpoints, extremes. */
static float edge_value(size_t i)
{
    static const float fixed[] = {0.0f,    -0.0f,       1.0f,      65504.0f, 65519.99f, 65520.0f,
                                  65536.0f, 1e30f,      0x1p-24f,  0x1p-25f, 0x1.8p-25f, 0x1p-26f,
                                  0x1p-14f, 0x1.ffcp-15f, 1e-45f,  3.4e38f,  INFINITY,  -INFINITY};
    if (i < sizeof(fixed) / sizeof(fixed[0]))
        return fixed[i];
    /* A half value plus or minus a little, or the midpoint to its neighbour. */
    uint32_t h = rand32() % 0x7c00;
    double v = half_value(h), next = half_value(h + 1 < 0x7c00 ? h + 1 : h);
    double pick[4] = {v, (v + next) / 2, nextafter(v, 1e9), nextafter((v + next) / 2, 0)};
    float f = (float)pick[rand32() % 4];
    return (rand32() & 1) ? -f : f;
}

static int test_f16_rounding_matches_reference(void)
{
    for (size_t i = 0; i < 300000; i++) {
        float x = i < 150000 ? edge_value(i) : from_bits(rand32() ^ (rand32() << 16));
        if (isnan(x))
            continue;
        uint16_t got = rs_quant_f16_from_f32(x), want = ref_f16(x);
        RS_CHECK_MSG(got == want, "x=%a got 0x%04x want 0x%04x", (double)x, got, want);
    }
    return 0;
}

static int test_f16_every_half_round_trips(void)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = rs_quant_f16_to_f32((uint16_t)h);
        int is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
        if (is_nan) {
            RS_CHECK(isnan(f));
            RS_CHECK(rs_quant_f16_from_f32(f) == (h | 0x200)); /* quieted, payload kept */
            continue;
        }
        double want = half_value(h & 0x7fff);
        if ((h & 0x7fff) == 0x7c00)
            want = INFINITY;
        RS_CHECK_MSG((double)fabsf(f) == want && (signbit(f) != 0) == ((h & 0x8000) != 0),
                     "h=0x%04x f=%a", h, (double)f);
        RS_CHECK_MSG(rs_quant_f16_from_f32(f) == h, "h=0x%04x", h);
    }
    return 0;
}

static int test_bf16_rounding_matches_reference(void)
{
    for (size_t i = 0; i < 300000; i++) {
        uint32_t u = rand32() ^ (rand32() << 16);
        if (i % 3 == 0)
            u = (u & 0xffff0000u) | 0x8000u; /* exact ties */
        float x = from_bits(u);
        if (isnan(x))
            continue;
        uint16_t got = rs_quant_bf16_from_f32(x), want = ref_bf16(x);
        RS_CHECK_MSG(got == want, "x=%a got 0x%04x want 0x%04x", (double)x, got, want);
    }
    float nan = from_bits(0x7f800001u); /* signalling NaN with a low payload */
    RS_CHECK(isnan(rs_quant_bf16_to_f32(rs_quant_bf16_from_f32(nan))));
    for (uint32_t h = 0; h < 65536; h++) {
        float f = rs_quant_bf16_to_f32((uint16_t)h);
        RS_CHECK(bits(f) == h << 16);
        if (!isnan(f))
            RS_CHECK(rs_quant_bf16_from_f32(f) == h);
    }
    return 0;
}

static int test_row_paths_match_scalar(void)
{
    enum { N = 1 << 16 };
    uint16_t *h = malloc(N * 2), *h2 = malloc(N * 2);
    float *f = malloc(N * 4);
    RS_CHECK(h && h2 && f);
    for (uint32_t i = 0; i < N; i++)
        h[i] = (uint16_t)i;
    rs_quant_row_f16_to_f32(h, f, N);
    for (uint32_t i = 0; i < N; i++)
        RS_CHECK_MSG(bits(f[i]) == bits(rs_quant_f16_to_f32(h[i])), "h=0x%04x", i);
    for (int round = 0; round < 16; round++) {
        for (uint32_t i = 0; i < N; i++)
            f[i] = round == 0 ? edge_value(i) : from_bits(rand32() ^ (rand32() << 16));
        size_t n = N - (size_t)round; /* odd lengths exercise the scalar tail */
        rs_quant_row_f32_to_f16(f, h, n);
        rs_quant_row_f32_to_bf16(f, h2, n);
        for (size_t i = 0; i < n; i++) {
            RS_CHECK_MSG(h[i] == rs_quant_f16_from_f32(f[i]), "x=%a", (double)f[i]);
            RS_CHECK(h2[i] == rs_quant_bf16_from_f32(f[i]));
        }
        rs_quant_row_bf16_to_f32(h2, f, n);
        for (size_t i = 0; i < n; i++)
            RS_CHECK(bits(f[i]) == (uint32_t)h2[i] << 16);
    }
    free(h);
    free(h2);
    free(f);
    return 0;
}

static int test_q8_0_block_layout_and_rounding(void)
{
    RS_CHECK(sizeof(struct rs_quant_block_q8_0) == RS_QUANT_Q8_0_BYTES);
    RS_CHECK(rs_ggml_type_size(RS_GGML_Q8_0) == RS_QUANT_Q8_0_BYTES);
    float x[64];
    /* Block 0: amax 127 gives d = 1 exactly, so x*id is x: ties show the rule. */
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 16) + 0.5f;
    x[31] = 127.0f;
    /* Block 1: all zero. */
    memset(x + 32, 0, 32 * sizeof(float));
    uint8_t q[2 * RS_QUANT_Q8_0_BYTES];
    rs_quant_row_q8_0_quantize(x, q, 64);
    RS_CHECK(q[0] == 0x00 && q[1] == 0x3c); /* fp16 1.0, little-endian */
    for (int j = 0; j < 31; j++) {
        int8_t v = (int8_t)q[2 + j];
        double xa = fabs((double)x[j]);
        int want = (int)(xa + 0.5); /* half away from zero, as roundf */
        RS_CHECK_MSG(v == (x[j] < 0 ? -want : want), "j=%d x=%g q=%d", j, (double)x[j], v);
    }
    RS_CHECK((int8_t)q[2 + 31] == 127);
    for (int j = 0; j < RS_QUANT_Q8_0_BYTES; j++)
        RS_CHECK(q[RS_QUANT_Q8_0_BYTES + j] == 0);
    float y[64];
    rs_quant_row_q8_0_dequantize(q, y, 64);
    for (int j = 0; j < 32; j++)
        RS_CHECK(y[j] == (float)(int8_t)q[2 + j] && y[32 + j] == 0.0f);
    return 0;
}

static int test_q8_0_error_bound_random(void)
{
    enum { N = 32 * 512 };
    float *x = malloc(N * 4), *y = malloc(N * 4);
    uint8_t *q = malloc(N / 32 * RS_QUANT_Q8_0_BYTES);
    RS_CHECK(x && y && q);
    for (int i = 0; i < N; i++) /* magnitudes spread over many binades */
        x[i] = ldexpf((float)(rand32() % 2001) / 1000.0f - 1.0f, (int)(i / 32 % 24) - 12);
    rs_quant_row_q8_0_quantize(x, q, N);
    rs_quant_row_q8_0_dequantize(q, y, N);
    for (int b = 0; b < N / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        uint16_t dh;
        memcpy(&dh, q + b * RS_QUANT_Q8_0_BYTES, 2);
        float d = rs_quant_f16_to_f32(dh);
        RS_CHECK(dh == rs_quant_f16_from_f32(amax / 127.0f));
        int saw_extreme = 0;
        for (int j = 0; j < 32; j++) {
            int8_t v = (int8_t)q[b * RS_QUANT_Q8_0_BYTES + 2 + j];
            saw_extreme |= v == 127 || v == -127;
            RS_CHECK(y[b * 32 + j] == (float)v * d);
            /* Rounding error d/2 plus the error of storing d as a half. */
            double bound = d / 2.0 + 127.0 * fabs((double)d - amax / 127.0) + 1e-30;
            RS_CHECK_MSG(fabs((double)y[b * 32 + j] - x[b * 32 + j]) <= bound * 1.0001,
                         "b=%d j=%d", b, j);
        }
        RS_CHECK(amax == 0 || saw_extreme);
    }
    free(x);
    free(y);
    free(q);
    return 0;
}

/* Bit-exact against ggml's reference formula written with libm: d, then roundf(x * (1/d)). */
static int test_q8_0_matches_ggml_reference_formula(void)
{
    enum { N = 32 * 4096 };
    float *x = malloc(N * 4);
    uint8_t *q = malloc(N / 32 * RS_QUANT_Q8_0_BYTES);
    RS_CHECK(x && q);
    for (int i = 0; i < N; i++) {
        x[i] = from_bits(rand32() ^ (rand32() << 16));
        if (!isfinite(x[i]) || i % 5 != 0) /* mostly ordinary values, some of every exponent */
            x[i] = ((float)(rand32() % 20001) - 10000.0f) / (float)(1 + rand32() % 977);
        if (i / 32 % 8 == 3) /* blocks with d = 1 and many exact halves: the tie rule */
            x[i] = i % 32 == 0 ? 127.0f : (float)((int)(rand32() % 509) - 254) / 2;
    }
    rs_quant_row_q8_0_quantize(x, q, N);
    for (int b = 0; b < N / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        uint16_t dh;
        memcpy(&dh, q + b * RS_QUANT_Q8_0_BYTES, 2);
        RS_CHECK(dh == rs_quant_f16_from_f32(d));
        for (int j = 0; j < 32; j++) {
            int8_t want = (int8_t)roundf(x[b * 32 + j] * id);
            RS_CHECK_MSG((int8_t)q[b * RS_QUANT_Q8_0_BYTES + 2 + j] == want, "b=%d j=%d x=%a", b,
                         j, (double)x[b * 32 + j]);
        }
    }
    free(x);
    free(q);
    return 0;
}

static int test_q8_0_nonfinite_input_is_defined(void)
{
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)j;
    x[3] = NAN;
    x[7] = INFINITY;
    x[9] = -INFINITY;
    uint8_t q[RS_QUANT_Q8_0_BYTES];
    rs_quant_row_q8_0_quantize(x, q, 32); /* UBSan would flag a bad float->int cast */
    for (int j = 0; j < 32; j++) {
        RS_CHECK(q[2 + j] != 0x80); /* -128 never occurs: the quotient is clamped */
    }
    return 0;
}

/*
 * A hand-made Q4_0 block: the extreme -4 gives d = -4 / -8 = 0.5, so every
 * multiple of 0.5 in [-4, 3.5] is stored exactly as nibble x / 0.5 + 8 (low
 * nibbles hold values 0..15, high nibbles values 16..31); 3.75 and 3.25 are
 * ties that round up (8.5 + 7.5 = 16 clamps to 15, 8.5 + 6.5 = 15).
 */
static int test_q4_0_block_layout_and_rounding(void)
{
    RS_CHECK(rs_ggml_type_size(RS_GGML_Q4_0) == RS_QUANT_Q4_0_BYTES);
    float x[32], y[32];
    for (int j = 0; j < 16; j++) {
        x[j] = (float)(j - 8) * 0.5f;        /* -4 .. 3.5 */
        x[16 + j] = (float)(7 - j) * 0.5f;   /* 3.5 .. -4 */
    }
    x[31] = 3.75f;
    x[30] = 3.25f;
    uint8_t q[RS_QUANT_Q4_0_BYTES];
    rs_quant_row_q4_0_quantize(x, q, 32);
    RS_CHECK(q[0] == 0x00 && q[1] == 0x38); /* fp16 0.5, little-endian */
    for (int j = 0; j < 16; j++) {
        int lo = q[2 + j] & 15, hi = q[2 + j] >> 4;
        RS_CHECK_MSG(lo == j, "lo %d: %d", j, lo);
        int want_hi = j == 15 ? 15 : j == 14 ? 15 : 15 - j;
        RS_CHECK_MSG(hi == want_hi, "hi %d: %d", j, hi);
    }
    rs_quant_row_q4_0_dequantize(q, y, 32);
    for (int j = 0; j < 30; j++)
        RS_CHECK_MSG(y[j] == x[j], "j=%d %g != %g", j, (double)y[j], (double)x[j]);
    RS_CHECK(y[30] == 3.5f && y[31] == 3.5f);
    return 0;
}

/* Random blocks: the extreme survives exactly, every value within one step, d as stored. */
static int test_q4_0_error_bound_random(void)
{
    enum { N = 32 * 512 };
    float *x = malloc(N * 4), *y = malloc(N * 4);
    uint8_t *q = malloc(N / 32 * RS_QUANT_Q4_0_BYTES);
    RS_CHECK(x && y && q);
    for (int i = 0; i < N; i++)
        x[i] = ldexpf((float)(rand32() % 2001) / 1000.0f - 1.0f, (int)(i / 32 % 24) - 12);
    rs_quant_row_q4_0_quantize(x, q, N);
    RS_CHECK(rs_quant_row_to_f32(RS_GGML_Q4_0, q, y, N) == RS_OK);
    for (int b = 0; b < N / 32; b++) {
        const float *xb = x + b * 32, *yb = y + b * 32;
        int e = 0;
        for (int j = 1; j < 32; j++)
            e = fabsf(xb[j]) > fabsf(xb[e]) ? j : e; /* the first of equals */
        uint16_t dh;
        memcpy(&dh, q + b * RS_QUANT_Q4_0_BYTES, 2);
        RS_CHECK(dh == rs_quant_f16_from_f32(xb[e] / -8.0f));
        const double d = fabs((double)rs_quant_f16_to_f32(dh));
        /* The extreme is -8 steps: exact but for storing d as a half. */
        RS_CHECK((q[b * RS_QUANT_Q4_0_BYTES + 2 + e % 16] >> (e < 16 ? 0 : 4) & 15) == 0);
        RS_CHECK(fabs((double)yb[e] - xb[e]) <= 8 * fabs(d - fabs(xb[e]) / 8.0) + 1e-30);
        for (int j = 0; j < 32; j++) {
            /* Half a step, a whole one on the clamped far side, plus d's own rounding. */
            double bound = d + 9 * fabs(d - fabs(xb[e]) / 8.0) + 1e-30;
            RS_CHECK_MSG(fabs((double)yb[j] - xb[j]) <= bound * 1.0001, "b=%d j=%d", b, j);
        }
    }
    free(x);
    free(y);
    free(q);
    return 0;
}

/* NaN and inf give some block, not undefined behaviour (UBSan checks the casts). */
static int test_q4_0_nonfinite_input_is_defined(void)
{
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)j;
    x[3] = NAN;
    x[9] = INFINITY;
    x[20] = -INFINITY;
    uint8_t q[RS_QUANT_Q4_0_BYTES];
    rs_quant_row_q4_0_quantize(x, q, 32);
    x[9] = x[20] = 1.0f;
    for (int j = 0; j < 32; j++)
        x[j] = NAN;
    rs_quant_row_q4_0_quantize(x, q, 32);
    return 0;
}

/*
 * Eight identical sub-blocks of the 16 levels 0, 0.1, ..., 1.5 (twice over):
 * the fit finds scale 0.1 and offset 0 for each, so every sub-block stores
 * sc = 63 and m = 0 under d = fp16(0.1 / 63), the levels come back as the
 * nibbles, and the values within d's fp16 rounding.
 */
static int test_q4_k_recovers_exact_levels(void)
{
    RS_CHECK(rs_ggml_type_size(RS_GGML_Q4_K) == RS_QUANT_Q4_K_BYTES);
    float x[256], y[256];
    for (int i = 0; i < 256; i++)
        x[i] = (float)(i % 16) * 0.1f;
    uint8_t q[RS_QUANT_Q4_K_BYTES];
    rs_quant_row_q4_k_quantize(x, q, 256);
    uint16_t dh, mh;
    memcpy(&dh, q, 2);
    memcpy(&mh, q + 2, 2);
    RS_CHECK_MSG(dh == rs_quant_f16_from_f32(0.1f / 63.0f), "d 0x%04x", dh);
    RS_CHECK(mh == 0);
    for (int j = 0; j < 4; j++) /* 63, and in the top two bits the high bits of 63 again */
        RS_CHECK_MSG(q[4 + j] == 0xff && q[8 + j] == 0, "scale byte %d: %u %u", j, q[4 + j],
                     q[8 + j]);
    for (int j = 0; j < 4; j++) /* sub-blocks 4..7: low 4 bits of 63 here, high two above */
        RS_CHECK_MSG(q[12 + j] == 15, "scale byte %d: %u", 8 + j, q[12 + j]);
    for (int i = 0; i < 128; i++) {
        int c = i / 32, k = i % 32; /* chunk c: values 64c + k (low) and 64c + 32 + k (high) */
        RS_CHECK_MSG((q[16 + i] & 15) == (64 * c + k) % 16 && q[16 + i] >> 4 == (64 * c + 32 + k) % 16,
                     "byte %d: 0x%02x", i, q[16 + i]);
    }
    RS_CHECK(rs_quant_row_to_f32(RS_GGML_Q4_K, q, y, 256) == RS_OK);
    for (int i = 0; i < 256; i++)
        RS_CHECK_MSG(fabsf(y[i] - x[i]) <= 1.5f * 0x1p-11f * 1.01f, "i=%d %g vs %g", i,
                     (double)y[i], (double)x[i]);
    return 0;
}

/*
 * Round trip of 64 random 256-value blocks (uniform, each block at its own
 * scale over several binades) through a K-quant type: the worst block's rms
 * error over its rms value.
 */
static double kquant_worst_block_error(enum rs_ggml_type type)
{
    enum { N = 256 * 64 };
    float *x = malloc(N * 4), *y = malloc(N * 4);
    uint8_t *q = malloc(rs_ggml_row_bytes(type, N));
    double worst = -1;
    if (x && y && q) {
        for (int i = 0; i < N; i++)
            x[i] = ldexpf((float)(rand32() % 2001) / 1000.0f - 1.0f, (int)(i / 256 % 12) - 6);
        rs_quant_row_from_f32(type, x, q, N);
        rs_quant_row_to_f32(type, q, y, N);
        for (int b = 0; b < N / 256; b++) {
            double e2 = 0, x2 = 0;
            for (int i = 0; i < 256; i++) {
                double d = (double)y[b * 256 + i] - x[b * 256 + i];
                e2 += d * d;
                x2 += (double)x[b * 256 + i] * x[b * 256 + i];
            }
            worst = fmax(worst, sqrt(e2 / x2));
        }
    }
    free(x);
    free(y);
    free(q);
    return worst;
}

/* NaN and infinities in a block, then a block of NaN: some block, no undefined behaviour
 * (UBSan checks the float-to-int conversions). */
static int kquant_nonfinite_is_defined(enum rs_ggml_type type)
{
    float x[256];
    uint8_t q[256];
    for (int i = 0; i < 256; i++)
        x[i] = (float)i;
    x[3] = NAN;
    x[40] = INFINITY;
    x[200] = -INFINITY;
    RS_CHECK(rs_quant_row_from_f32(type, x, q, 256) == RS_OK);
    for (int i = 0; i < 256; i++)
        x[i] = NAN;
    RS_CHECK(rs_quant_row_from_f32(type, x, q, 256) == RS_OK);
    return 0;
}

static int test_q4_k_error_random(void)
{
    double worst = kquant_worst_block_error(RS_GGML_Q4_K);
    fprintf(stderr, "q4_k: worst block rms error / rms %.4f\n", worst);
    /* 16 levels over a uniform sub-block: measured 0.062 here */
    RS_CHECK_MSG(worst > 0 && worst < 0.08, "worst block rms error / rms %g", worst);
    return 0;
}

static int test_q4_k_nonfinite_input_is_defined(void)
{
    return kquant_nonfinite_is_defined(RS_GGML_Q4_K);
}

/*
 * Every 16-value sub-block holds -4, -3.5, ..., 3.5: scale 1/8 fits exactly
 * (levels 4i - 32), so d = 1 / (-128 * 8) = -2^-10 (fp16 0x9400), every
 * int8 scale is -128, and the values come back exactly.
 */
static int test_q6_k_recovers_exact_levels(void)
{
    RS_CHECK(rs_ggml_type_size(RS_GGML_Q6_K) == RS_QUANT_Q6_K_BYTES);
    float x[256], y[256];
    for (int i = 0; i < 256; i++)
        x[i] = (float)(i % 16 - 8) * 0.5f;
    uint8_t q[RS_QUANT_Q6_K_BYTES];
    rs_quant_row_q6_k_quantize(x, q, 256);
    RS_CHECK_MSG(q[208] == 0x00 && q[209] == 0x94, "d 0x%02x%02x", q[209], q[208]);
    for (int j = 0; j < 16; j++)
        RS_CHECK_MSG((int8_t)q[192 + j] == -128, "scale %d: %d", j, (int8_t)q[192 + j]);
    for (int h = 0; h < 2; h++) /* level of value v is 4 (v % 16): its low 4 bits in ql */
        for (int i = 0; i < 32; i++) {
            int v = 128 * h + i;
            RS_CHECK((q[64 * h + i] & 15) == (4 * (v % 16) & 15));
            RS_CHECK(q[128 + 32 * h + i] >> 6 == (4 * ((v + 96) % 16)) >> 4);
        }
    RS_CHECK(rs_quant_row_to_f32(RS_GGML_Q6_K, q, y, 256) == RS_OK);
    RS_CHECK(memcmp(x, y, sizeof(x)) == 0);
    return 0;
}

static int test_q5_k_error_random(void)
{
    double worst = kquant_worst_block_error(RS_GGML_Q5_K);
    fprintf(stderr, "q5_k: worst block rms error / rms %.4f\n", worst);
    /* 32 levels per 32-value sub-block: about half Q4_K's error */
    RS_CHECK_MSG(worst > 0 && worst < 0.045, "worst block rms error / rms %g", worst);
    return 0;
}

static int test_q5_k_nonfinite_input_is_defined(void)
{
    return kquant_nonfinite_is_defined(RS_GGML_Q5_K);
}

static int test_q6_k_error_random(void)
{
    double worst = kquant_worst_block_error(RS_GGML_Q6_K);
    fprintf(stderr, "q6_k: worst block rms error / rms %.4f\n", worst);
    /* 64 levels over each 16-value sub-block: measured 0.015 here */
    RS_CHECK_MSG(worst > 0 && worst < 0.02, "worst block rms error / rms %g", worst);
    return 0;
}

static int test_q6_k_nonfinite_input_is_defined(void)
{
    return kquant_nonfinite_is_defined(RS_GGML_Q6_K);
}

static int test_generic_row_dispatch(void)
{
    float src[64], dst[64];
    uint8_t buf[64 * 4];
    for (int i = 0; i < 64; i++)
        src[i] = (float)i * 0.25f - 8.0f; /* exact in every type */
    const enum rs_ggml_type types[] = {RS_GGML_F32, RS_GGML_F16, RS_GGML_BF16};
    for (size_t t = 0; t < 3; t++) {
        RS_CHECK(rs_quant_supported(types[t]));
        RS_CHECK(rs_quant_row_from_f32(types[t], src, buf, 64) == RS_OK);
        RS_CHECK(rs_quant_row_to_f32(types[t], buf, dst, 64) == RS_OK);
        RS_CHECK(memcmp(src, dst, sizeof(src)) == 0);
    }
    RS_CHECK(rs_quant_row_from_f32(RS_GGML_Q8_0, src, buf, 64) == RS_OK);
    RS_CHECK(rs_quant_row_to_f32(RS_GGML_Q8_0, buf, dst, 64) == RS_OK);
    RS_CHECK(rs_quant_row_from_f32(RS_GGML_Q8_0, src, buf, 48) == RS_EINVAL);
    RS_CHECK(rs_quant_supported(RS_GGML_Q4_0));
    RS_CHECK(rs_quant_row_from_f32(RS_GGML_Q4_0, src, buf, 64) == RS_OK);
    RS_CHECK(rs_quant_row_to_f32(RS_GGML_Q4_0, buf, dst, 64) == RS_OK);
    RS_CHECK(rs_quant_row_from_f32(RS_GGML_Q4_0, src, buf, 40) == RS_EINVAL);
    RS_CHECK(rs_quant_row_to_f32(RS_GGML_Q5_0, buf, dst, 32) == RS_EUNSUPPORTED);
    RS_CHECK(rs_quant_row_from_f32((enum rs_ggml_type)99, src, buf, 32) == RS_EUNSUPPORTED);
    RS_CHECK(!rs_quant_supported(RS_GGML_Q5_0) && !rs_quant_supported(RS_GGML_Q4_1));
    return 0;
}

/* The traits table and the file format's table agree on every type both know. */
static int test_traits_match_gguf_table(void)
{
    size_t i = 0;
    for (const struct rs_quant_traits *t; (t = rs_quant_traits_at(i)) != NULL; i++) {
        RS_CHECK_MSG(rs_ggml_block_size(t->type) == t->block, "%s block", t->name);
        RS_CHECK_MSG(rs_ggml_type_size(t->type) == t->bytes, "%s bytes", t->name);
        RS_CHECK_MSG(strcmp(rs_ggml_type_name(t->type), t->name) == 0, "%s name", t->name);
        RS_CHECK(rs_quant_traits_of(t->type) == t);
    }
    RS_CHECK(i == 8);
    RS_CHECK(rs_quant_traits_of(RS_GGML_Q5_0) == NULL);
    return 0;
}

/*
 * Every 32-value sub-block holds 0, 0.1, ..., 3.1: levels 0..31 at scale 0.1 fit
 * exactly, so sc = 63, m = 0 under d = fp16(0.1 / 63); the low nibbles sit at bytes
 * 48 + 32c + k (chunk c, value 64c + k low, 64c + 32 + k high) and the fifth bit of
 * both halves at bits 2c, 2c + 1 of byte 16 + k: set for k >= 16.
 */
static int test_q5_k_recovers_exact_levels(void)
{
    RS_CHECK(rs_ggml_type_size(RS_GGML_Q5_K) == RS_QUANT_Q5_K_BYTES);
    float x[256], y[256];
    for (int i = 0; i < 256; i++)
        x[i] = (float)(i % 32) * 0.1f;
    uint8_t q[RS_QUANT_Q5_K_BYTES];
    rs_quant_row_q5_k_quantize(x, q, 256);
    uint16_t dh, mh;
    memcpy(&dh, q, 2);
    memcpy(&mh, q + 2, 2);
    RS_CHECK_MSG(dh == rs_quant_f16_from_f32(0.1f / 63.0f), "d 0x%04x", dh);
    RS_CHECK(mh == 0);
    for (int j = 0; j < 4; j++)
        RS_CHECK_MSG(q[4 + j] == 0xff && q[8 + j] == 0 && q[12 + j] == 15, "scale bytes %d", j);
    for (int k = 0; k < 32; k++)
        RS_CHECK_MSG(q[16 + k] == (k >= 16 ? 0xff : 0), "high byte %d: 0x%02x", k, q[16 + k]);
    for (int i = 0; i < 128; i++) {
        int k = i % 32;
        RS_CHECK_MSG(q[48 + i] == ((k & 15) | (k & 15) << 4), "byte %d: 0x%02x", i, q[48 + i]);
    }
    RS_CHECK(rs_quant_row_to_f32(RS_GGML_Q5_K, q, y, 256) == RS_OK);
    for (int i = 0; i < 256; i++)
        RS_CHECK_MSG(fabsf(y[i] - x[i]) <= 3.1f * 0x1p-11f * 1.01f, "i=%d %g vs %g", i,
                     (double)y[i], (double)x[i]);
    return 0;
}

/* Float64 sums of a dequantized tensor, as NAME.dequant.json states them. */
static int check_dequant_entry(const rs_gguf *g, json_t *e, const char *file)
{
    const char *name = json_string_value(json_object_get(e, "name"));
    int64_t ti = rs_gguf_find_tensor(g, name);
    RS_CHECK_MSG(ti >= 0, "%s: no tensor %s", file, name);
    const struct rs_gguf_tensor *t = rs_gguf_tensor(g, (uint64_t)ti);
    RS_CHECK_MSG(strcmp(rs_ggml_type_name(t->type),
                        json_string_value(json_object_get(e, "type"))) == 0, "%s type", name);
    uint64_t cols = t->ne[0], rows = t->ne[1], rb = rs_ggml_row_bytes(t->type, cols);
    float *row = malloc(cols * sizeof(float));
    RS_CHECK(row != NULL);
    double sum = 0, sabs = 0, ssq = 0;
    for (uint64_t r = 0; r < rows; r++) {
        RS_CHECK(rs_quant_row_to_f32(t->type, (const uint8_t *)t->data + r * rb, row, cols) == RS_OK);
        for (uint64_t i = 0; i < cols; i++) {
            sum += row[i], sabs += fabs(row[i]), ssq += (double)row[i] * row[i];
            json_t *sample = r == 0 && i < 32 ? json_array_get(json_object_get(e, "row0_first32"), i)
                             : r == rows - 1 && i >= cols - 32
                                 ? json_array_get(json_object_get(e, "last_row_last32"), i - (cols - 32))
                                 : NULL;
            RS_CHECK_MSG(sample == NULL || (float)json_number_value(sample) == row[i],
                         "%s %s row %llu col %llu: %g vs %g", file, name, (unsigned long long)r,
                         (unsigned long long)i, (double)row[i], json_number_value(sample));
        }
    }
    free(row);
    const char *keys[3] = {"sum", "sum_abs", "sum_sq"};
    const double got[3] = {sum, sabs, ssq};
    for (int k = 0; k < 3; k++) { /* the README's bound: relative 1e-6 (of sum_abs for sum) */
        double want = json_number_value(json_object_get(e, keys[k]));
        double scale = k == 0 ? json_number_value(json_object_get(e, "sum_abs")) : fabs(want);
        RS_CHECK_MSG(fabs(got[k] - want) <= 1e-6 * scale, "%s %s %s: %.9g vs %.9g", file, name,
                     keys[k], got[k], want);
    }
    return 0;
}

/* Our decoders against llama.cpp-made files (llama-quantize's own Q8_0/Q4_0/Q4_K/Q5_K/Q6_K
 * bytes), not only against our own quantizer: every tensor's sums and sample values. */
static int test_llamacpp_quantized_files_decode(void)
{
    const char *names[] = {"q8_0", "q4_0", "q4_k_m", "q5_k_m", "q6_k"};
    for (size_t n = 0; n < sizeof(names) / sizeof(names[0]); n++) {
        char rel[96], gpath[512], jpath[512];
        snprintf(rel, sizeof(rel), "arch/llama256-%s.gguf", names[n]);
        if (rs_test_refdata(rel, gpath, sizeof(gpath)) == NULL)
            return RS_TEST_SKIP;
        snprintf(rel, sizeof(rel), "arch/llama256-%s.dequant.json", names[n]);
        if (rs_test_refdata(rel, jpath, sizeof(jpath)) == NULL)
            return RS_TEST_SKIP;
        rs_gguf *g = NULL;
        RS_CHECK(rs_gguf_open(gpath, &g, NULL, 0) == RS_OK);
        json_t *root = json_load_file(jpath, 0, NULL), *e;
        RS_CHECK(root != NULL);
        size_t i, seen = 0;
        json_array_foreach(json_object_get(root, "tensors"), i, e) {
            if (check_dequant_entry(g, e, names[n]) != 0)
                return 1;
            seen++;
        }
        fprintf(stderr, "%s: %zu tensors decode as llama.cpp's\n", names[n], seen);
        RS_CHECK(seen >= 15);
        json_decref(root);
        rs_gguf_close(&g);
    }
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_f16_rounding_matches_reference),
    RS_TEST(test_f16_every_half_round_trips),
    RS_TEST(test_bf16_rounding_matches_reference),
    RS_TEST(test_row_paths_match_scalar),
    RS_TEST(test_q8_0_block_layout_and_rounding),
    RS_TEST(test_q8_0_error_bound_random),
    RS_TEST(test_q8_0_matches_ggml_reference_formula),
    RS_TEST(test_q8_0_nonfinite_input_is_defined),
    RS_TEST(test_q4_0_block_layout_and_rounding),
    RS_TEST(test_q4_0_error_bound_random),
    RS_TEST(test_q4_0_nonfinite_input_is_defined),
    RS_TEST(test_q4_k_recovers_exact_levels),
    RS_TEST(test_q4_k_error_random),
    RS_TEST(test_q4_k_nonfinite_input_is_defined),
    RS_TEST(test_q5_k_recovers_exact_levels),
    RS_TEST(test_q5_k_error_random),
    RS_TEST(test_q5_k_nonfinite_input_is_defined),
    RS_TEST(test_q6_k_recovers_exact_levels),
    RS_TEST(test_q6_k_error_random),
    RS_TEST(test_q6_k_nonfinite_input_is_defined),
    RS_TEST(test_generic_row_dispatch),
    RS_TEST(test_traits_match_gguf_table),
    RS_TEST(test_llamacpp_quantized_files_decode),
};
RS_TEST_MAIN(cases)

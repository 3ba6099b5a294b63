/* SPDX-License-Identifier: MIT */
/*
 * F16 / BF16 / Q8_0 conversions. The scalar functions are the definition
 * (bit manipulation, no FPU rounding mode assumed); the F16C row paths are
 * checked against them over every half value and many floats by
 * tests/unit/test_quant.c. Q8_0 follows ggml's quantize_row_q8_0_ref bit for
 * bit (same float operations in the same order).
 */
#include "common/quant.h"

#include <math.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#define QUANT_X86 1
#endif

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Magnitudes below the smallest normal half (2^-14): round to a subnormal. */
static inline uint16_t f16_subnormal(uint32_t ax)
{
    uint32_t e = ax >> 23;
    if (e < 102) /* below 2^-25: rounds to zero */
        return 0;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14..24: half ulp 2^-24 over the f32 mantissa */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++; /* may carry into the smallest normal, which is the right encoding */
    return (uint16_t)q;
}

uint16_t rs_quant_f16_from_f32(float x)
{
    uint32_t u = f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t ax = u & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet it, keep the top payload bits */
        return sign | 0x7e00u | (uint16_t)((ax >> 13) & 0x3ffu);
    if (ax >= 0x477ff000u) /* >= 65520 rounds (ties to even) to infinity */
        return sign | 0x7c00u;
    if (ax < 0x38800000u)
        return sign | f16_subnormal(ax);
    /* Rebias the exponent (127 -> 15) and round the 13 dropped bits to even. */
    ax += 0xc8000fffu + ((ax >> 13) & 1u);
    return sign | (uint16_t)(ax >> 13);
}

float rs_quant_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) /* inf, or NaN made quiet as the F16C instruction does */
        return bits_f32(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
    if (e == 0) /* zero or subnormal: m * 2^-24, exact in F32 */
        return bits_f32(sign | f32_bits((float)m * 0x1p-24f));
    return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t rs_quant_bf16_from_f32(float x)
{
    uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float rs_quant_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

#ifdef QUANT_X86
/*
 * CPUID leaf 1: AVX (ECX bit 28), F16C (bit 29), OSXSAVE (bit 27), and the OS
 * saving YMM state (XCR0 bits 1-2). Asked directly because clang 14's
 * __builtin_cpu_supports does not know "f16c". Cached: 1 yes, 2 no, 0 unknown.
 */
static int have_f16c(void)
{
    static atomic_int cached;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v == 0) {
        unsigned a, b, c, d;
        int ok = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27)) && (c & (1u << 28)) &&
                 (c & (1u << 29));
        if (ok) {
            unsigned lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            ok = (lo & 6u) == 6u;
        }
        v = ok ? 1 : 2;
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v == 1;
}

__attribute__((target("avx,f16c"))) static size_t f16_to_f32_f16c(const uint16_t *src,
                                                                    float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    return i;
}

__attribute__((target("avx,f16c"))) static size_t f32_to_f16_f16c(const float *src,
                                                                    uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(void *)(dst + i), h);
    }
    return i;
}
#endif

void rs_quant_row_f16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
#ifdef QUANT_X86
    if (have_f16c())
        i = f16_to_f32_f16c(src, dst, n);
#endif
    for (; i < n; i++)
        dst[i] = rs_quant_f16_to_f32(src[i]);
}

void rs_quant_row_f32_to_f16(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
#ifdef QUANT_X86
    if (have_f16c())
        i = f32_to_f16_f16c(src, dst, n);
#endif
    for (; i < n; i++)
        dst[i] = rs_quant_f16_from_f32(src[i]);
}

void rs_quant_row_f32_to_bf16(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = rs_quant_bf16_from_f32(src[i]);
}

void rs_quant_row_bf16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
#ifdef __SSE2__
    const __m128i zero = _mm_setzero_si128();
    for (; i + 8 <= n; i += 8) { /* interleaving zeros below each value shifts it up 16 */
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
        _mm_storeu_si128((__m128i *)(void *)(dst + i), _mm_unpacklo_epi16(zero, h));
        _mm_storeu_si128((__m128i *)(void *)(dst + i + 4), _mm_unpackhi_epi16(zero, h));
    }
#endif
    for (; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &u, 4);
    }
}

/*
 * roundf (half away from zero) of v in [-127, 127], without the libm call:
 * v - trunc(v) is exact there, so comparing it with 0.5 decides exactly.
 */
static inline int8_t round_half_away(float v)
{
    int t = (int)v;
    float frac = v - (float)t;
    t += (frac >= 0.5f) - (frac <= -0.5f);
    return (int8_t)t;
}

void rs_quant_row_q8_0_quantize(const float *src, void *dst, size_t n)
{
    uint8_t *out = dst;
    for (size_t b = 0; b < n / RS_QUANT_Q8_0_BLOCK; b++) {
        const float *x = src + b * RS_QUANT_Q8_0_BLOCK;
        struct rs_quant_block_q8_0 blk;
        float amax = 0.0f;
        for (int j = 0; j < RS_QUANT_Q8_0_BLOCK; j++) {
            float a = fabsf(x[j]);
            amax = a > amax ? a : amax; /* NaN never wins, as with fmaxf */
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        blk.d = rs_quant_f16_from_f32(d);
        for (int j = 0; j < RS_QUANT_Q8_0_BLOCK; j++) {
            /* The clamp only guards non-finite input (NaN -> -127); finite x stay in range. */
            float v = x[j] * id;
            v = v >= -127.0f ? v : -127.0f;
            v = v <= 127.0f ? v : 127.0f;
            blk.qs[j] = round_half_away(v);
        }
        memcpy(out + b * RS_QUANT_Q8_0_BYTES, &blk, RS_QUANT_Q8_0_BYTES);
    }
}

#ifdef __SSE2__
/* 16 int8 at q times d into y[0..16): sign-extend via unpack + arithmetic shift. */
static inline void q8_16(const uint8_t *q, __m128 d, float *y)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)q);
    const __m128i lo = _mm_srai_epi16(_mm_unpacklo_epi8(v, v), 8);
    const __m128i hi = _mm_srai_epi16(_mm_unpackhi_epi8(v, v), 8);
    const __m128i w[4] = {_mm_srai_epi32(_mm_unpacklo_epi16(lo, lo), 16),
                          _mm_srai_epi32(_mm_unpackhi_epi16(lo, lo), 16),
                          _mm_srai_epi32(_mm_unpacklo_epi16(hi, hi), 16),
                          _mm_srai_epi32(_mm_unpackhi_epi16(hi, hi), 16)};
    for (int k = 0; k < 4; k++)
        _mm_storeu_ps(y + 4 * k, _mm_mul_ps(_mm_cvtepi32_ps(w[k]), d));
}
#endif

void rs_quant_row_q8_0_dequantize(const void *src, float *dst, size_t n)
{
    const uint8_t *in = src;
    for (size_t b = 0; b < n / RS_QUANT_Q8_0_BLOCK; b++) {
        const uint8_t *blk = in + b * RS_QUANT_Q8_0_BYTES;
        uint16_t dh;
        memcpy(&dh, blk, 2);
        const float d = rs_quant_f16_to_f32(dh);
        float *y = dst + b * RS_QUANT_Q8_0_BLOCK;
#ifdef __SSE2__
        q8_16(blk + 2, _mm_set1_ps(d), y); /* same int -> float and product as below */
        q8_16(blk + 18, _mm_set1_ps(d), y + 16);
#else
        const int8_t *qs = (const int8_t *)(blk + 2);
        for (int j = 0; j < RS_QUANT_Q8_0_BLOCK; j++)
            y[j] = (float)qs[j] * d;
#endif
    }
}

void rs_quant_row_q4_0_quantize(const float *src, void *dst, size_t n)
{
    uint8_t *out = dst;
    for (size_t b = 0; b < n / RS_QUANT_Q4_0_BLOCK; b++) {
        const float *x = src + b * RS_QUANT_Q4_0_BLOCK;
        uint8_t *blk = out + b * RS_QUANT_Q4_0_BYTES;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < RS_QUANT_Q4_0_BLOCK; j++) {
            if (amax < fabsf(x[j])) { /* the first of equal magnitudes keeps its sign */
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        /* The signed extreme maps to exactly -8 steps: the one value Q4_0 keeps exactly. */
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t dh = rs_quant_f16_from_f32(d);
        memcpy(blk, &dh, 2);
        for (int j = 0; j < RS_QUANT_Q4_0_BLOCK / 2; j++) {
            uint8_t q[2];
            for (int h = 0; h < 2; h++) {
                /* Truncating v + 8.5 rounds half up; the clamps only guard the far side
                 * (a value just past +amax) and non-finite input (NaN -> 0). */
                float v = x[j + h * 16] * id + 8.5f;
                v = v >= 0.0f ? v : 0.0f;
                v = v <= 15.0f ? v : 15.0f;
                q[h] = (uint8_t)v;
            }
            blk[2 + j] = (uint8_t)(q[0] | q[1] << 4);
        }
    }
}

void rs_quant_row_q4_0_dequantize(const void *src, float *dst, size_t n)
{
    const uint8_t *in = src;
    for (size_t b = 0; b < n / RS_QUANT_Q4_0_BLOCK; b++) {
        const uint8_t *blk = in + b * RS_QUANT_Q4_0_BYTES;
        uint16_t dh;
        memcpy(&dh, blk, 2);
        const float d = rs_quant_f16_to_f32(dh);
        float *y = dst + b * RS_QUANT_Q4_0_BLOCK;
        for (int j = 0; j < RS_QUANT_Q4_0_BLOCK / 2; j++) {
            y[j] = (float)((blk[2 + j] & 15) - 8) * d; /* exact: 4 bits times 11 */
            y[j + 16] = (float)((blk[2 + j] >> 4) - 8) * d;
        }
    }
}

/* --- Q4_K and Q5_K ---------------------------------------------------------------------- */

/* Round to nearest, ties to even (the default rounding mode), for |v| < 2^22. */
static inline int nearest(float v)
{
    return (int)lrintf(v);
}

static inline uint8_t clamp_u(int v, int hi)
{
    return (uint8_t)(v < 0 ? 0 : v > hi ? hi : v);
}

/* sum w (scale * l + min - x)^2 over a sub-block. */
static float weighted_error(const float *x, const float *w, const uint8_t *l, float scale,
                            float min)
{
    float e = 0;
    for (int i = 0; i < 32; i++) {
        float diff = scale * (float)l[i] + min - x[i];
        e += w[i] * diff * diff;
    }
    return e;
}

/* How a K-quant with a scale and an offset per 32 values fits them (ggml's parameters). */
struct kq_fit {
    int nmax;    /* top level: 15 (Q4_K) or 31 (Q5_K) */
    float rmin;  /* first stretch of the range, in levels */
    int nstep;   /* stretches tried after it, 0.1 level apart */
};

/*
 * One 32-value sub-block as scale * l - m (l in 0..nmax, m >= 0): start from
 * the range [min(x, 0), max x], then try nstep + 1 stretched ranges, each
 * followed by the weighted least-squares scale and offset for its levels,
 * keeping the best (ggml's make_qkx2_quants). Returns the scale and sets *m;
 * l gets the levels.
 */
static float kq_fit_sub(const float *x, const float *w, const struct kq_fit *f, uint8_t *l,
                        float *m)
{
    float lo = x[0], hi = x[0], sum_w = 0, sum_x = 0;
    for (int i = 0; i < 32; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    lo = lo > 0 ? 0 : lo;
    if (!(hi > lo)) { /* constant (or NaN) sub-block */
        memset(l, 0, 32);
        *m = -lo;
        return 0;
    }
    float iscale = (float)f->nmax / (hi - lo), scale = 1.0f / iscale, min = lo;
    for (int i = 0; i < 32; i++)
        l[i] = clamp_u(nearest(iscale * (x[i] - lo)), f->nmax);
    float best = weighted_error(x, w, l, scale, min);
    for (int step = 0; step <= f->nstep; step++) {
        uint8_t trial[32];
        float sl = 0, sl2 = 0, sxl = 0;
        iscale = (f->rmin + 0.1f * (float)step + (float)f->nmax) / (hi - lo);
        for (int i = 0; i < 32; i++) {
            trial[i] = clamp_u(nearest(iscale * (x[i] - lo)), f->nmax);
            sl += w[i] * trial[i];
            sl2 += w[i] * trial[i] * trial[i];
            sxl += w[i] * trial[i] * x[i];
        }
        float det = sum_w * sl2 - sl * sl;
        if (!(det > 0))
            continue;
        float t_scale = (sum_w * sxl - sum_x * sl) / det;
        float t_min = (sl2 * sum_x - sl * sxl) / det;
        if (t_min > 0) { /* levels must stay above a non-positive offset */
            t_min = 0;
            t_scale = sxl / sl2;
        }
        float e = weighted_error(x, w, trial, t_scale, t_min);
        if (e < best) {
            memcpy(l, trial, 32);
            best = e;
            scale = t_scale;
            min = t_min;
        }
    }
    *m = -min;
    return scale;
}

/* Packs the 6-bit scale and min of sub-block j into ggml's 12 scale bytes. */
static void q4k_put_scale_min(uint8_t *s, int j, uint8_t sc, uint8_t m)
{
    if (j < 4) {
        s[j] = sc;
        s[j + 4] = m;
    } else {
        s[j + 4] = (uint8_t)((sc & 15) | (m & 15) << 4);
        s[j - 4] |= (uint8_t)((sc >> 4) << 6);
        s[j] |= (uint8_t)((m >> 4) << 6);
    }
}

/*
 * One 256-value Q4_K (five_bit 0) or Q5_K block: fit the sub-blocks, quantize
 * their scales and mins to 6 bits under two fp16 super-scales, re-level every
 * value against the stored scales, pack (Q5_K: the fifth bits into qh).
 */
static void kq_block(const float *x, uint8_t *blk, int five_bit)
{
    static const struct kq_fit q4 = {15, -1.0f, 20}, q5 = {31, -0.5f, 15};
    const int nmax = five_bit ? 31 : 15;
    float w[32], scales[8], mins[8], max_scale = 0, max_min = 0;
    uint8_t l[256];
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int i = 0; i < 32; i++)
            sum_x2 += xs[i] * xs[i];
        float av = sqrtf(sum_x2 / 32);
        for (int i = 0; i < 32; i++) /* large values matter more, as in ggml */
            w[i] = av + fabsf(xs[i]);
        scales[j] = kq_fit_sub(xs, w, five_bit ? &q5 : &q4, l + 32 * j, &mins[j]);
        max_scale = scales[j] > max_scale ? scales[j] : max_scale;
        max_min = mins[j] > max_min ? mins[j] : max_min;
    }
    float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0, inv_min = max_min > 0 ? 63.0f / max_min : 0;
    uint8_t *sc = blk + 4;
    memset(sc, 0, 12);
    for (int j = 0; j < 8; j++)
        q4k_put_scale_min(sc, j, clamp_u(nearest(inv_scale * scales[j]), 63),
                          clamp_u(nearest(inv_min * mins[j]), 63));
    const uint16_t dh = rs_quant_f16_from_f32(max_scale / 63.0f);
    const uint16_t mh = rs_quant_f16_from_f32(max_min / 63.0f);
    memcpy(blk, &dh, 2);
    memcpy(blk + 2, &mh, 2);
    for (int j = 0; j < 8; j++) {
        uint8_t s6, m6;
        rs_quant_k_scale_min(sc, j, &s6, &m6);
        const float d = rs_quant_f16_to_f32(dh) * s6, dm = rs_quant_f16_to_f32(mh) * m6;
        if (d == 0)
            continue; /* keeps the fitted levels, as ggml does */
        for (int i = 0; i < 32; i++) {
            float v = (x[32 * j + i] + dm) / d;
            v = v >= 0 ? v : 0; /* also sends NaN to 0 before the conversion */
            l[32 * j + i] = clamp_u(nearest(v < (float)nmax + 1 ? v : (float)nmax + 1), nmax);
        }
    }
    uint8_t *qs = blk + (five_bit ? 48 : 16), *qh = blk + 16;
    if (five_bit)
        memset(qh, 0, 32);
    for (int c = 0; c < 4; c++) /* per 64 values: 32 bytes, low nibble first half */
        for (int i = 0; i < 32; i++) {
            uint8_t a = l[64 * c + i], b = l[64 * c + 32 + i];
            qs[32 * c + i] = (uint8_t)((a & 15) | (b & 15) << 4);
            if (five_bit) /* bit 2c: value i of the chunk's first half; 2c + 1: second */
                qh[i] |= (uint8_t)((a >> 4) << (2 * c) | (b >> 4) << (2 * c + 1));
        }
}

void rs_quant_row_q4_k_quantize(const float *src, void *dst, size_t n)
{
    for (size_t b = 0; b < n / RS_QUANT_Q4_K_BLOCK; b++)
        kq_block(src + b * RS_QUANT_Q4_K_BLOCK, (uint8_t *)dst + b * RS_QUANT_Q4_K_BYTES, 0);
}

void rs_quant_row_q5_k_quantize(const float *src, void *dst, size_t n)
{
    for (size_t b = 0; b < n / RS_QUANT_Q5_K_BLOCK; b++)
        kq_block(src + b * RS_QUANT_Q5_K_BLOCK, (uint8_t *)dst + b * RS_QUANT_Q5_K_BYTES, 1);
}

/* Q4_K (five_bit 0) or Q5_K blocks to floats: fl(d*sc * l - dmin*m), one rounding. */
static void kq_dequantize(const uint8_t *src, float *dst, size_t n, int five_bit)
{
    const size_t bytes = five_bit ? RS_QUANT_Q5_K_BYTES : RS_QUANT_Q4_K_BYTES;
    for (size_t b = 0; b < n / 256; b++) {
        const uint8_t *blk = src + b * bytes, *qh = blk + 16, *qs = blk + (five_bit ? 48 : 16);
        float *y = dst + b * 256;
        uint16_t dh, mh;
        memcpy(&dh, blk, 2);
        memcpy(&mh, blk + 2, 2);
        const float d = rs_quant_f16_to_f32(dh), dmin = rs_quant_f16_to_f32(mh);
        for (int j = 0; j < 8; j++) {
            uint8_t s6, m6;
            rs_quant_k_scale_min(blk + 4, j, &s6, &m6);
            const float d1 = d * s6, m1 = dmin * m6; /* exact: 11 bits times 6 */
            const uint8_t *q = qs + 32 * (j / 2);
            for (int i = 0; i < 32; i++) {
                int l = j % 2 ? q[i] >> 4 : q[i] & 15;
                if (five_bit)
                    l |= (qh[i] >> j & 1) << 4;
                y[32 * j + i] = d1 * (float)l - m1; /* exact product: one rounding, fused or not */
            }
        }
    }
}

void rs_quant_row_q4_k_dequantize(const void *src, float *dst, size_t n)
{
    kq_dequantize(src, dst, n, 0);
}

void rs_quant_row_q5_k_dequantize(const void *src, float *dst, size_t n)
{
    kq_dequantize(src, dst, n, 1);
}

/* --- Q6_K ------------------------------------------------------------------------------- */

/*
 * Levels l in -32..31 for 16 values as scale * l, weights x^2 (large values
 * matter most): from the scale that maps the signed extreme to -32, try 18
 * nearby ones and keep the levels with the best weighted least-squares fit
 * (ggml's make_qx_quants with nmax 32, rmse_type 1). Returns the scale; l
 * gets the levels plus 32.
 */
static float q6k_fit_sub(const float *x, uint8_t *l)
{
    float amax = 0, max = 0;
    for (int i = 0; i < 16; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (!(amax >= 1e-15f)) { /* all (near) zero, or NaN */
        memset(l, 32, 16);
        return 0;
    }
    float best = 0, scale = 0;
    for (int step = 0; step <= 18; step++) {
        /* step 0 is the plain range; then -0.9 .. +0.9 around it, skipping 0 */
        int t = step == 0 ? 0 : step <= 9 ? step - 10 : step - 9;
        float iscale = -(32.0f + 0.1f * (float)t) / max, slx = 0, sl2 = 0;
        int lv[16];
        for (int i = 0; i < 16; i++) {
            int q = nearest(iscale * x[i]);
            lv[i] = q < -32 ? -32 : q > 31 ? 31 : q;
            float w = x[i] * x[i];
            slx += w * x[i] * (float)lv[i];
            sl2 += w * (float)lv[i] * (float)lv[i];
        }
        if (step == 0 || (sl2 > 0 && slx * slx > best * sl2)) {
            for (int i = 0; i < 16; i++)
                l[i] = (uint8_t)(lv[i] + 32);
            scale = sl2 > 0 ? slx / sl2 : 0;
            best = scale * slx;
        }
    }
    return scale;
}

/* One 256-value block: fit 16 sub-blocks, store their scales as int8 under one fp16 d
 * (the largest maps to -128), re-level every value against the stored scales, pack. */
static void q6k_block(const float *x, uint8_t *blk)
{
    uint8_t l[256];
    float scales[16], max_scale = 0, max_abs = 0;
    for (int j = 0; j < 16; j++) {
        scales[j] = q6k_fit_sub(x + 16 * j, l + 16 * j);
        if (fabsf(scales[j]) > max_abs) {
            max_abs = fabsf(scales[j]);
            max_scale = scales[j];
        }
    }
    memset(blk, 0, RS_QUANT_Q6_K_BYTES);
    if (!(max_abs >= 1e-15f))
        return; /* an all-zero block */
    const float iscale = -128.0f / max_scale;
    const uint16_t dh = rs_quant_f16_from_f32(1.0f / iscale);
    memcpy(blk + 208, &dh, 2);
    int8_t *sc = (int8_t *)(blk + 192);
    for (int j = 0; j < 16; j++) {
        int v = nearest(iscale * scales[j]);
        sc[j] = (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v);
    }
    for (int j = 0; j < 16; j++) {
        const float d = rs_quant_f16_to_f32(dh) * (float)sc[j];
        if (d == 0)
            continue;
        for (int i = 0; i < 16; i++) {
            float v = x[16 * j + i] / d;
            v = v >= -32 ? v : -32; /* also sends NaN to -32 before the conversion */
            int q = nearest(v <= 31 ? v : 31);
            l[16 * j + i] = (uint8_t)(q + 32);
        }
    }
    uint8_t *ql = blk, *qh = blk + 128;
    for (int h = 0; h < 2; h++, ql += 64, qh += 32) /* per 128 values, as ggml lays them */
        for (int i = 0; i < 32; i++) {
            const uint8_t *lv = l + 128 * h + i;
            ql[i] = (uint8_t)((lv[0] & 15) | (lv[64] & 15) << 4);
            ql[i + 32] = (uint8_t)((lv[32] & 15) | (lv[96] & 15) << 4);
            qh[i] = (uint8_t)(lv[0] >> 4 | (lv[32] >> 4) << 2 | (lv[64] >> 4) << 4 |
                              (lv[96] >> 4) << 6);
        }
}

void rs_quant_row_q6_k_quantize(const float *src, void *dst, size_t n)
{
    for (size_t b = 0; b < n / RS_QUANT_Q6_K_BLOCK; b++)
        q6k_block(src + b * RS_QUANT_Q6_K_BLOCK, (uint8_t *)dst + b * RS_QUANT_Q6_K_BYTES);
}

void rs_quant_q6_k_levels(const uint8_t *blk, int8_t q[RS_QUANT_Q6_K_BLOCK])
{
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
        for (int i = 0; i < 32; i++) {
            const int lv[4] = {(ql[i] & 15) | (qh[i] & 3) << 4,
                               (ql[i + 32] & 15) | (qh[i] >> 2 & 3) << 4,
                               (ql[i] >> 4) | (qh[i] >> 4 & 3) << 4,
                               (ql[i + 32] >> 4) | (qh[i] >> 6 & 3) << 4};
            for (int k = 0; k < 4; k++)
                q[128 * h + 32 * k + i] = (int8_t)(lv[k] - 32);
        }
    }
}

void rs_quant_row_q6_k_dequantize(const void *src, float *dst, size_t n)
{
    for (size_t b = 0; b < n / RS_QUANT_Q6_K_BLOCK; b++) {
        const uint8_t *blk = (const uint8_t *)src + b * RS_QUANT_Q6_K_BYTES;
        const int8_t *sc = (const int8_t *)(blk + 192);
        uint16_t dh;
        memcpy(&dh, blk + 208, 2);
        const float d = rs_quant_f16_to_f32(dh);
        int8_t q[RS_QUANT_Q6_K_BLOCK];
        rs_quant_q6_k_levels(blk, q);
        float *y = dst + b * RS_QUANT_Q6_K_BLOCK;
        for (int j = 0; j < RS_QUANT_Q6_K_BLOCK; j++) /* (d * sc) * q: exact, 11 + 8 + 6 bits */
            y[j] = d * (float)sc[j / 16] * (float)q[j];
    }
}

/* F32 rows are stored as they are computed: a copy each way. */
static void f32_to_f32(const void *src, float *dst, size_t n)
{
    memcpy(dst, src, n * sizeof(float));
}

static void f32_from_f32(const float *src, void *dst, size_t n)
{
    memcpy(dst, src, n * sizeof(float));
}

static void f16_to_f32(const void *src, float *dst, size_t n)
{
    rs_quant_row_f16_to_f32(src, dst, n);
}

static void f16_from_f32(const float *src, void *dst, size_t n)
{
    rs_quant_row_f32_to_f16(src, dst, n);
}

static void bf16_to_f32(const void *src, float *dst, size_t n)
{
    rs_quant_row_bf16_to_f32(src, dst, n);
}

static void bf16_from_f32(const float *src, void *dst, size_t n)
{
    rs_quant_row_f32_to_bf16(src, dst, n);
}

/* The one list of weight types this project computes with; indexed by nothing, searched
 * (eight entries) so that a type's entry is one line wherever it sits. */
static const struct rs_quant_traits traits[] = {
    {RS_GGML_F32, "F32", 1, 4, f32_to_f32, f32_from_f32},
    {RS_GGML_F16, "F16", 1, 2, f16_to_f32, f16_from_f32},
    {RS_GGML_BF16, "BF16", 1, 2, bf16_to_f32, bf16_from_f32},
    {RS_GGML_Q8_0, "Q8_0", RS_QUANT_Q8_0_BLOCK, RS_QUANT_Q8_0_BYTES,
     rs_quant_row_q8_0_dequantize, rs_quant_row_q8_0_quantize},
    {RS_GGML_Q4_0, "Q4_0", RS_QUANT_Q4_0_BLOCK, RS_QUANT_Q4_0_BYTES,
     rs_quant_row_q4_0_dequantize, rs_quant_row_q4_0_quantize},
    {RS_GGML_Q4_K, "Q4_K", RS_QUANT_Q4_K_BLOCK, RS_QUANT_Q4_K_BYTES,
     rs_quant_row_q4_k_dequantize, rs_quant_row_q4_k_quantize},
    {RS_GGML_Q5_K, "Q5_K", RS_QUANT_Q5_K_BLOCK, RS_QUANT_Q5_K_BYTES,
     rs_quant_row_q5_k_dequantize, rs_quant_row_q5_k_quantize},
    {RS_GGML_Q6_K, "Q6_K", RS_QUANT_Q6_K_BLOCK, RS_QUANT_Q6_K_BYTES,
     rs_quant_row_q6_k_dequantize, rs_quant_row_q6_k_quantize},
};

const struct rs_quant_traits *rs_quant_traits_of(enum rs_ggml_type t)
{
    for (size_t i = 0; i < sizeof(traits) / sizeof(traits[0]); i++)
        if (traits[i].type == t)
            return &traits[i];
    return NULL;
}

const struct rs_quant_traits *rs_quant_traits_at(size_t i)
{
    return i < sizeof(traits) / sizeof(traits[0]) ? &traits[i] : NULL;
}

int rs_quant_supported(enum rs_ggml_type t)
{
    return rs_quant_traits_of(t) != NULL;
}

rs_err rs_quant_row_to_f32(enum rs_ggml_type type, const void *src, float *dst, uint64_t n)
{
    const struct rs_quant_traits *tr = rs_quant_traits_of(type);
    if (tr == NULL)
        return RS_EUNSUPPORTED;
    if (n % tr->block != 0)
        return RS_EINVAL;
    tr->to_f32(src, dst, n);
    return RS_OK;
}

rs_err rs_quant_row_from_f32(enum rs_ggml_type type, const float *src, void *dst, uint64_t n)
{
    const struct rs_quant_traits *tr = rs_quant_traits_of(type);
    if (tr == NULL)
        return RS_EUNSUPPORTED;
    if (n % tr->block != 0)
        return RS_EINVAL;
    tr->from_f32(src, dst, n);
    return RS_OK;
}

/* SPDX-License-Identifier: MIT */
/*
 * The integer-dot formats (qdot.h): activation row quantization, the
 * per-type weight unpackers (one table), and the portable dot that defines
 * the bits every variant gives.
 */
#include "launcherd/engine/qdot.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "common/quant.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static size_t up32(size_t n)
{
    return (n + 31) & ~(size_t)31;
}

size_t kq_act_bytes(uint32_t K)
{
    size_t nbp = kq_padded_blocks(K);
    return up32(nbp * KQ_BLOCK) + up32(nbp * 4) + up32(nbp * 4) + up32(nbp * 4);
}

size_t kq_wrow_bytes(uint32_t K)
{
    size_t nbp = kq_padded_blocks(K);
    return up32(nbp * KQ_BLOCK) + up32(nbp * 32) + 2 * up32(nbp * 4) + up32(nbp * 2);
}

void kq_act_at(void *mem, uint32_t K, struct kq_act *a)
{
    size_t nbp = kq_padded_blocks(K);
    uint8_t *p = mem;
    a->q = (int8_t *)p;
    a->d = (float *)(p + up32(nbp * KQ_BLOCK));
    a->s = (int32_t *)(p + up32(nbp * KQ_BLOCK) + up32(nbp * 4));
    a->h = (int16_t *)(p + up32(nbp * KQ_BLOCK) + 2 * up32(nbp * 4));
}

void kq_wrow_at(void *mem, uint32_t K, struct kq_wrow *w)
{
    size_t nbp = kq_padded_blocks(K);
    uint8_t *p = mem;
    w->q = (int8_t *)p;
    w->sc = (int16_t *)(p + up32(nbp * KQ_BLOCK));
    w->ws = (float *)(p + up32(nbp * KQ_BLOCK) + up32(nbp * 32));
    w->wm = (float *)(p + up32(nbp * KQ_BLOCK) + up32(nbp * 32) + up32(nbp * 4));
    w->mi = (int16_t *)(p + up32(nbp * KQ_BLOCK) + up32(nbp * 32) + 2 * up32(nbp * 4));
}

uint32_t kq_span(enum rs_ggml_type t)
{
    return t == RS_GGML_Q4_K || t == RS_GGML_Q5_K || t == RS_GGML_Q6_K ? 256 : KQ_BLOCK;
}

/* One span (32 or 256 values) of row x starting at s0, scalar. */
static void quantize_span(const float *x, uint32_t s0, uint32_t span, const struct kq_act *a)
{
    const float *xs = x + s0;
    float amax = 0.0f;
    for (uint32_t i = 0; i < span; i++) {
        float v = fabsf(xs[i]);
        amax = v > amax || v != v ? v : amax; /* a NaN sticks (fmaxf would drop it) */
    }
    int finite = amax <= 3.4028235e38f; /* false for inf and NaN */
    /* below 2^-120, 127 / amax would overflow to inf (and inf * 0 is NaN): such a span's
     * levels are 0, as a zero span's */
    float id = finite && amax >= 0x1p-120f ? 127.0f / amax : 0.0f;
    for (uint32_t b = s0 / KQ_BLOCK; b < (s0 + span) / KQ_BLOCK; b++) {
        int32_t sum = 0;
        for (int i = 0; i < KQ_BLOCK; i++) {
            /* |x * id| <= 127 up to one rounding, which rounds back to 127; adding and
             * removing 1.5 * 2^23 rounds it half-even (below 2^22 in magnitude), as
             * nearbyintf does, without a libm call per value */
            float r = (x[b * KQ_BLOCK + i] * id + 12582912.0f) - 12582912.0f;
            int v = finite ? (int)r : 0;
            a->q[b * KQ_BLOCK + i] = (int8_t)v;
            sum += v;
        }
        a->d[b] = finite ? amax / 127.0f : amax; /* inf or NaN carries into the dot */
        a->s[b] = sum;
    }
}

void kq_quantize_row_on(enum kern_isa isa, const float *x, uint32_t K, uint32_t span,
                        const struct kq_act *a)
{
    uint32_t nb = K / KQ_BLOCK, nbp = kq_padded_blocks(K);
    for (uint32_t s0 = 0; s0 < K; s0 += span) {
        uint32_t b = s0 / KQ_BLOCK;
        if (isa == KERN_PORTABLE ||
            kq_avx2_quantize_span(x + s0, span, a->q + (size_t)b * KQ_BLOCK, a->d + b, a->s + b) != 0)
            quantize_span(x, s0, span, a);
    }
    memset(a->q + (size_t)nb * KQ_BLOCK, 0, (size_t)(nbp - nb) * KQ_BLOCK);
    for (uint32_t b = nb; b < nbp; b++)
        a->d[b] = 0.0f, a->s[b] = 0;
    /* from the levels, so every variant's sums are the same; O(K) beside a dot's O(K N) */
    for (uint32_t i = 0; i < 2 * nbp; i++) {
        int sum = 0;
        for (int k = 0; k < KQ_BLOCK / 2; k++)
            sum += a->q[(size_t)i * (KQ_BLOCK / 2) + k];
        a->h[i] = (int16_t)sum; /* |sum| <= 16 x 127 */
    }
}

void kq_quantize_row(const float *x, uint32_t K, uint32_t span, const struct kq_act *a)
{
    /* profiled: a twelfth of an integer-dot prompt went to the scalar quantizer */
    static _Atomic int simd = -1;
    int on = atomic_load_explicit(&simd, memory_order_relaxed);
    if (on < 0) {
        on = kern_isa_supported(KERN_AVX2);
        atomic_store_explicit(&simd, on, memory_order_relaxed);
    }
    kq_quantize_row_on(on ? KERN_AVX2 : KERN_PORTABLE, x, K, span, a);
}

static float half(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return rs_quant_f16_to_f32(h);
}

/* Block b's two 16-value multipliers, in maddubs pair order (8 pairs each). */
static void put_sc(const struct kq_wrow *w, uint32_t b, int sc0, int sc1)
{
    for (int i = 0; i < 8; i++) {
        w->sc[16 * b + i] = (int16_t)sc0;
        w->sc[16 * b + 8 + i] = (int16_t)sc1;
    }
}

static void unpack_q8_0(const uint8_t *src, uint32_t K, const struct kq_wrow *w)
{
    for (uint32_t b = 0; b < K / 32; b++) {
        const uint8_t *blk = src + (size_t)b * RS_QUANT_Q8_0_BYTES;
        memcpy(w->q + 32 * b, blk + 2, 32);
        put_sc(w, b, 1, 1);
        w->ws[b] = half(blk), w->wm[b] = 0.0f, w->mi[b] = 0;
    }
}

static void unpack_q4_0(const uint8_t *src, uint32_t K, const struct kq_wrow *w)
{
    for (uint32_t b = 0; b < K / 32; b++) {
        const uint8_t *blk = src + (size_t)b * RS_QUANT_Q4_0_BYTES;
        for (int i = 0; i < 16; i++) {
            w->q[32 * b + i] = (int8_t)((blk[2 + i] & 15) - 8);
            w->q[32 * b + 16 + i] = (int8_t)((blk[2 + i] >> 4) - 8);
        }
        put_sc(w, b, 1, 1);
        w->ws[b] = half(blk), w->wm[b] = 0.0f, w->mi[b] = 0;
    }
}

/* Q4_K (five_bit 0) and Q5_K: sub-block j of super-block s is activation block 8s + j. */
static void unpack_kq(const uint8_t *src, uint32_t K, const struct kq_wrow *w, int five_bit)
{
    size_t bytes = five_bit ? RS_QUANT_Q5_K_BYTES : RS_QUANT_Q4_K_BYTES;
    for (uint32_t s = 0; s < K / 256; s++) {
        const uint8_t *blk = src + s * bytes, *qh = blk + 16, *ql = blk + (five_bit ? 48 : 16);
        float d = half(blk), dmin = half(blk + 2);
        for (int j = 0; j < 8; j++) {
            uint32_t b = 8 * s + (uint32_t)j;
            int c = j / 2, hi = j % 2;
            uint8_t sc, m;
            rs_quant_k_scale_min(blk + 4, j, &sc, &m);
            for (int k = 0; k < 32; k++) {
                int v = hi ? ql[32 * c + k] >> 4 : ql[32 * c + k] & 15;
                if (five_bit)
                    v |= (qh[k] >> (2 * c + hi) & 1) << 4;
                w->q[32 * b + k] = (int8_t)v;
            }
            put_sc(w, b, sc, sc);
            w->ws[b] = d, w->wm[b] = dmin, w->mi[b] = m;
        }
    }
}

static void unpack_q4_k(const uint8_t *src, uint32_t K, const struct kq_wrow *w)
{
    unpack_kq(src, K, w, 0);
}

static void unpack_q5_k(const uint8_t *src, uint32_t K, const struct kq_wrow *w)
{
    unpack_kq(src, K, w, 1);
}

/* Q6_K: run r of half h (values 128h + 32r + i) is activation block 8s + 4h + r. */
static void unpack_q6_k(const uint8_t *src, uint32_t K, const struct kq_wrow *w)
{
    for (uint32_t s = 0; s < K / 256; s++) {
        const uint8_t *blk = src + s * RS_QUANT_Q6_K_BYTES;
        const int8_t *sc = (const int8_t *)(blk + 192);
        float d = half(blk + 208);
        rs_quant_q6_k_levels(blk, w->q + 256 * s);
        for (int h = 0; h < 2; h++) {
            for (int r = 0; r < 4; r++) {
                uint32_t b = 8 * s + 4 * (uint32_t)h + (uint32_t)r;
                put_sc(w, b, sc[8 * h + 2 * r], sc[8 * h + 2 * r + 1]);
                w->ws[b] = d, w->wm[b] = 0.0f, w->mi[b] = 0;
            }
        }
    }
}

/* Every type with an integer dot product: adding one is a line here plus its unpacker. */
static const struct {
    enum rs_ggml_type type;
    void (*unpack)(const uint8_t *src, uint32_t K, const struct kq_wrow *w);
} unpackers[] = {
    {RS_GGML_Q8_0, unpack_q8_0}, {RS_GGML_Q4_0, unpack_q4_0}, {RS_GGML_Q4_K, unpack_q4_k},
    {RS_GGML_Q5_K, unpack_q5_k}, {RS_GGML_Q6_K, unpack_q6_k},
};

int kq_type_supported(enum rs_ggml_type t)
{
    for (size_t i = 0; i < sizeof(unpackers) / sizeof(unpackers[0]); i++)
        if (unpackers[i].type == t)
            return 1;
    return 0;
}

void kq_unpack_row(enum rs_ggml_type t, const uint8_t *src, uint32_t K, const struct kq_wrow *w)
{
    uint32_t nb = K / KQ_BLOCK, nbp = kq_padded_blocks(K);
    for (size_t i = 0; i < sizeof(unpackers) / sizeof(unpackers[0]); i++)
        if (unpackers[i].type == t)
            unpackers[i].unpack(src, K, w);
    memset(w->q + (size_t)nb * KQ_BLOCK, 0, (size_t)(nbp - nb) * KQ_BLOCK);
    for (uint32_t b = nb; b < nbp; b++) {
        put_sc(w, b, 0, 0);
        w->ws[b] = 0.0f, w->wm[b] = 0.0f, w->mi[b] = 0;
    }
}

static int32_t block_isum(const struct kq_wrow *w, const struct kq_act *x, uint32_t b)
{
    int32_t isum = 0;
    for (int i = 0; i < KQ_BLOCK; i++)
        isum += w->sc[16 * b + i / 2] * w->q[32 * b + i] * x->q[32 * b + i];
    return isum;
}

/* Q8_0, Q4_0: a float term per block, added in block order. */
static float dot_blocks(const struct kq_wrow *w, const struct kq_act *x, uint32_t K)
{
    float acc = 0.0f;
    for (uint32_t b = 0; b < K / KQ_BLOCK; b++)
        acc = acc + (w->ws[b] * x->d[b]) * (float)block_isum(w, x, b);
    return acc;
}

/* K-quants: integer sums over each super-block, one float term per super-block. */
static float dot_super(const struct kq_wrow *w, const struct kq_act *x, uint32_t K)
{
    float acc = 0.0f;
    for (uint32_t b0 = 0; b0 < K / KQ_BLOCK; b0 += 8) {
        int32_t isum = 0, msum = 0;
        for (uint32_t b = b0; b < b0 + 8; b++) {
            isum += block_isum(w, x, b);
            msum += w->mi[b] * x->s[b];
        }
        float dx = x->d[b0];
        acc = acc + (((w->ws[b0] * dx) * (float)isum) - ((w->wm[b0] * dx) * (float)msum));
    }
    return acc;
}

void kq_dot_portable(enum rs_ggml_type t, const struct kq_wrow *w, const struct kq_act *const *x,
                     int n, uint32_t K, float *out)
{
    for (int m = 0; m < n; m++)
        out[m] = kq_span(t) == KQ_BLOCK ? dot_blocks(w, x[m], K) : dot_super(w, x[m], K);
}

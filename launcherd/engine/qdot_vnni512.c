/* SPDX-License-Identifier: MIT */
/*
 * The K-quants' row dots (qdot.h) in 512-bit registers, for decode: one
 * weight super-block is unpacked once into unsigned levels (no sign work:
 * vpmaddubsw takes them as its unsigned operand), each 64-value register
 * holding two activation blocks, and then, per activation row, vpmaddubsw
 * pairs levels with activation levels into int16 and vpdpwssd multiplies
 * those by the sub-block multipliers straight into int32. Q6_K's levels are
 * stored +32: its -32 x (sum of the activation pair) comes off in int16,
 * where it is exact. The super-block's integer sums are qdot.h's, so the
 * float step (the 256-bit variants', term for term) gives the same bits.
 * Target attributes only; qdot_gemm.c uses this table for KERN_AVX512 before
 * qdot_vnni.c's (which keeps Q8_0 and Q4_0).
 */
#include "launcherd/engine/qdot.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#include "common/quant.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define V5_TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define V5_INL static inline __attribute__((always_inline)) V5_TGT

/* One super-block in registers: four 64-value level registers and their multipliers. */
struct v5_super {
    __m512i q[4];  /* levels of blocks (lo[k], hi[k]) per register, see blocks[] */
    __m512i sc[4]; /* int16 multiplier of each level pair, in vpmaddubsw's output order */
    float d, dmin;
    int mi[8];
};

/* Q4_K / Q5_K: register r holds activation blocks blocks[r][0] (low 256 bits) and [1]. */
static const int kq_blocks[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};

/* Multipliers of the level pairs of blocks a (lanes 0-15) and b (16-31) from 8 int16 scales. */
V5_INL __m512i v5_pair_scales(__m512i sc16, int a, int b)
{
    __m512i idx = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16((short)a),
                                          _mm512_set1_epi16((short)b));
    return _mm512_permutexvar_epi16(idx, sc16);
}

/* The 6-bit scales and mins of a Q4_K/Q5_K super-block, as rs_quant_k_scale_min, 8 at a time. */
V5_INL void v5_k_scales(const uint8_t *s12, uint8_t sc[8], uint8_t m[8])
{
    uint32_t u[3];
    memcpy(u, s12, 12);
    uint32_t w[4] = {u[0] & 0x3f3f3f3fu, (u[2] & 0x0f0f0f0fu) | ((u[0] >> 6) & 0x03030303u) << 4,
                     u[1] & 0x3f3f3f3fu,
                     ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 6) & 0x03030303u) << 4};
    memcpy(sc, w, 8);
    memcpy(m, w + 2, 8);
}

V5_INL void v5_load_kq(const uint8_t *row, uint32_t g, struct v5_super *o, int five_bit)
{
    size_t bytes = five_bit ? RS_QUANT_Q5_K_BYTES : RS_QUANT_Q4_K_BYTES;
    const uint8_t *blk = row + (size_t)g * bytes, *ql = blk + (five_bit ? 48 : 16);
    const __m512i m4 = _mm512_set1_epi8(15);
    uint16_t h[2];
    memcpy(h, blk, 4);
    o->d = _cvtsh_ss(h[0]), o->dmin = _cvtsh_ss(h[1]);
    for (int t = 0; t < 2; t++) {
        __m512i q = _mm512_loadu_si512(ql + 64 * t);
        __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        if (five_bit) {
            /* bit 2c + part of high byte i is the fifth bit of chunk c's value i */
            __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 16)));
            const __m512i one = _mm512_set1_epi8(1);
            __m512i s0 = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16((short)(4 * t)),
                                                 _mm512_set1_epi16((short)(4 * t + 2)));
            __m512i s1 = _mm512_add_epi16(s0, _mm512_set1_epi16(1));
            lo = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, s0), one), 4));
            hi = _mm512_or_si512(hi, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, s1), one), 4));
        }
        o->q[2 * t] = lo, o->q[2 * t + 1] = hi;
    }
    uint8_t sc[8], m[8];
    v5_k_scales(blk + 4, sc, m);
    __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc)));
    for (int r = 0; r < 4; r++)
        o->sc[r] = v5_pair_scales(sc16, kq_blocks[r][0], kq_blocks[r][1]);
    for (int j = 0; j < 8; j++)
        o->mi[j] = m[j];
}

/* Q6_K: register 2h + k holds blocks 4h + 2k, 4h + 2k + 1 (contiguous), levels + 32. */
V5_INL void v5_load_q6_k(const uint8_t *row, uint32_t g, struct v5_super *o)
{
    const uint8_t *blk = row + (size_t)g * RS_QUANT_Q6_K_BYTES;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(0x03);
    uint16_t dh;
    memcpy(&dh, blk + 208, 2);
    __m512i sc16 = _mm512_castsi256_si512(
        _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192))));
    for (int h = 0; h < 2; h++) {
        __m512i l = _mm512_loadu_si512(blk + 64 * h); /* [ql 0-31 | ql 32-63] of this half */
        __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)));
        __m512i s01 = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_setzero_si512(), _mm512_set1_epi16(2));
        __m512i s23 = _mm512_add_epi16(s01, _mm512_set1_epi16(4));
        __m512i h01 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, s01), m3), 4);
        __m512i h23 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, s23), m3), 4);
        o->q[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), h01);
        o->q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), h23);
        /* 16 values per multiplier: pairs 0-7 of a 32-value block take sc[2b], 8-15 sc[2b + 1] */
        for (int k = 0; k < 2; k++) {
            int s0 = 8 * h + 4 * k;
            __m512i idx = _mm512_mask_blend_epi16(
                0xFFFF0000u,
                _mm512_mask_blend_epi16(0xFF00u, _mm512_set1_epi16((short)s0), _mm512_set1_epi16((short)(s0 + 1))),
                _mm512_mask_blend_epi16(0xFF000000u, _mm512_set1_epi16((short)(s0 + 2)),
                                        _mm512_set1_epi16((short)(s0 + 3))));
            o->sc[2 * h + k] = _mm512_permutexvar_epi16(idx, sc16);
        }
    }
    o->d = _cvtsh_ss(dh), o->dmin = 0.0f;
    for (int j = 0; j < 8; j++)
        o->mi[j] = 0;
}

/* Activation blocks a and b of row x in one register. */
V5_INL __m512i v5_act2(const struct kq_act *x, uint32_t a, uint32_t b)
{
    __m256i lo = _mm256_loadu_si256((const __m256i *)(x->q + (size_t)KQ_BLOCK * a));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo),
                              _mm256_loadu_si256((const __m256i *)(x->q + (size_t)KQ_BLOCK * b)), 1);
}

/* Super-block g against n activation rows: one integer sum each, one float term (qdot.h). */
V5_INL void v5_super_dot(const struct v5_super *w, const struct kq_act *const *x, int n,
                         uint32_t g, int q6, float *acc)
{
    const __m512i ones = _mm512_set1_epi8(1);
    for (int m = 0; m < n; m++) {
        __m512i v = _mm512_setzero_si512();
        for (int r = 0; r < 4; r++) {
            __m512i xa = q6 ? _mm512_loadu_si512(x[m]->q + (size_t)KQ_BLOCK * (8 * g + 2 * r))
                            : v5_act2(x[m], 8 * g + kq_blocks[r][0], 8 * g + kq_blocks[r][1]);
            __m512i p = _mm512_maddubs_epi16(w->q[r], xa);
            if (q6) /* levels are stored + 32 */
                p = _mm512_sub_epi16(p, _mm512_slli_epi16(_mm512_maddubs_epi16(ones, xa), 5));
            v = _mm512_dpwssd_epi32(v, p, w->sc[r]);
        }
        int32_t msum = 0;
        for (int j = 0; j < 8; j++)
            msum += w->mi[j] * x[m]->s[8 * g + j];
        float dx = x[m]->d[8 * g];
        acc[m] = acc[m] + (((w->d * dx) * (float)_mm512_reduce_add_epi32(v)) -
                           ((w->dmin * dx) * (float)msum));
    }
}

#define V5_DOT(NAME, LOAD, Q6)                                                                   \
    V5_TGT static void NAME(const uint8_t *row, const struct kq_act *const *x, int n,           \
                            uint32_t K, float *out)                                              \
    {                                                                                            \
        float acc[KQ_DOT_ROWS] = {0};                                                            \
        for (uint32_t g = 0; g < K / 256; g++) {                                                 \
            struct v5_super w;                                                                   \
            LOAD;                                                                                \
            v5_super_dot(&w, x, n, g, Q6, acc);                                                  \
        }                                                                                        \
        for (int m = 0; m < n; m++)                                                              \
            out[m] = acc[m];                                                                     \
    }
V5_DOT(v5_q4_k, v5_load_kq(row, g, &w, 0), 0)
V5_DOT(v5_q5_k, v5_load_kq(row, g, &w, 1), 0)
V5_DOT(v5_q6_k, v5_load_q6_k(row, g, &w), 1)

const struct kq_raw_dot kq_vnni512_table[] = {
    {RS_GGML_Q4_K, v5_q4_k}, {RS_GGML_Q5_K, v5_q5_k}, {RS_GGML_Q6_K, v5_q6_k}, {RS_GGML_F32, NULL},
};

#else

const struct kq_raw_dot kq_vnni512_table[] = {{RS_GGML_F32, NULL}};

#endif

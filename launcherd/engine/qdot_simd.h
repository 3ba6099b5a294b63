/* SPDX-License-Identifier: MIT */
/*
 * The integer dot of qdot.h in 256-bit registers, written once for the two
 * x86 variants that include it: qdot_avx2.c (vpmaddubsw + vpmaddwd) and
 * qdot_vnni.c (vpdpbusd). The includer defines QD_TGT (target attribute),
 * QD_PREFIX(name) (its function names) and QD_BLOCK_SUM(wabs, xs, sc): eight
 * int32 whose total is a block's isum. Weight blocks are unpacked in
 * registers, 8 activation blocks (one group) at a time, into exactly the
 * levels, multipliers and scales qdot.c's unpackers write (integer work, and
 * the same float conversions); the float step is the portable dot's, lane for
 * lane, with no contraction. So every variant gives the portable bits.
 */
#include <immintrin.h>
#include <string.h>

#include "common/quant.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define QD_INL static inline __attribute__((always_inline)) QD_TGT

/* One group of 8 weight blocks as qdot.h's kq_wrow holds them. */
struct qd_group {
    __m256i q[8], sc[8];
    __m256 ws;        /* Q8_0, Q4_0: each block's scale */
    float d, dmin;    /* K-quants: the super-block's scale and offset scale */
    int mi[8];        /* K-quants: each block's integer offset (Q4_K/Q5_K's m; 0 for Q6_K) */
};

/* Lane j of the result is the total of v[j]'s eight lanes (integer: any order is exact). */
QD_INL __m256i qd_hsum8(const __m256i v[8])
{
    __m256i a = _mm256_hadd_epi32(v[0], v[1]), b = _mm256_hadd_epi32(v[2], v[3]);
    __m256i c = _mm256_hadd_epi32(v[4], v[5]), d = _mm256_hadd_epi32(v[6], v[7]);
    __m256i ab = _mm256_hadd_epi32(a, b), cd = _mm256_hadd_epi32(c, d);
    return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20),
                            _mm256_permute2x128_si256(ab, cd, 0x31));
}

/* The fixed tree of kernels.h: ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)). */
QD_INL float qd_tree(__m256 a)
{
    __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 s2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

QD_INL __m256i qd_sc2(int lo, int hi)
{
    return _mm256_set_m128i(_mm_set1_epi16((short)hi), _mm_set1_epi16((short)lo));
}

/* The fp16 scale at byte offset off of each of the group's n (<= 8) blocks of `bytes`. */
QD_INL __m256 qd_halves(const uint8_t *p, size_t bytes, size_t off, int n)
{
    uint16_t h[8] = {0};
    for (int j = 0; j < n; j++)
        memcpy(&h[j], p + (size_t)j * bytes + off, 2);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
}

/* Q8_0 / Q4_0: blocks 8g .. 8g + 7 (those past nb zero, as the padding). */
QD_INL void qd_load_q8_0(const uint8_t *row, uint32_t g, uint32_t nb, struct qd_group *o)
{
    int n = nb - 8 * g < 8 ? (int)(nb - 8 * g) : 8;
    const uint8_t *p = row + (size_t)8 * g * RS_QUANT_Q8_0_BYTES;
    for (int j = 0; j < 8; j++) {
        o->q[j] = j < n ? _mm256_loadu_si256((const __m256i *)(p + j * RS_QUANT_Q8_0_BYTES + 2))
                        : _mm256_setzero_si256();
        o->sc[j] = _mm256_set1_epi16(j < n);
    }
    o->ws = qd_halves(p, RS_QUANT_Q8_0_BYTES, 0, n);
}

QD_INL void qd_load_q4_0(const uint8_t *row, uint32_t g, uint32_t nb, struct qd_group *o)
{
    int n = nb - 8 * g < 8 ? (int)(nb - 8 * g) : 8;
    const uint8_t *p = row + (size_t)8 * g * RS_QUANT_Q4_0_BYTES;
    const __m128i m4 = _mm_set1_epi8(15), k8 = _mm256_castsi256_si128(_mm256_set1_epi8(8));
    for (int j = 0; j < 8; j++) {
        if (j < n) {
            __m128i b = _mm_loadu_si128((const __m128i *)(p + j * RS_QUANT_Q4_0_BYTES + 2));
            __m128i lo = _mm_sub_epi8(_mm_and_si128(b, m4), k8);
            __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), m4), k8);
            o->q[j] = _mm256_set_m128i(hi, lo);
        } else {
            o->q[j] = _mm256_setzero_si256();
        }
        o->sc[j] = _mm256_set1_epi16(j < n);
    }
    o->ws = qd_halves(p, RS_QUANT_Q4_0_BYTES, 0, n);
}

/* Q4_K / Q5_K super-block g: chunk c's low nibbles are block 2c, its high ones 2c + 1. */
QD_INL void qd_load_kq(const uint8_t *row, uint32_t g, struct qd_group *o, int five_bit)
{
    size_t bytes = five_bit ? RS_QUANT_Q5_K_BYTES : RS_QUANT_Q4_K_BYTES;
    const uint8_t *blk = row + (size_t)g * bytes, *ql = blk + (five_bit ? 48 : 16);
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 16));
    uint16_t h[2];
    memcpy(h, blk, 4);
    o->d = _cvtsh_ss(h[0]), o->dmin = _cvtsh_ss(h[1]);
    for (int c = 0; c < 4; c++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(ql + 32 * c));
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (five_bit) {
            __m256i b0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), one);
            __m256i b1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c + 1)), one);
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(b0, 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(b1, 4));
        }
        o->q[2 * c] = lo, o->q[2 * c + 1] = hi;
    }
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        rs_quant_k_scale_min(blk + 4, j, &sc, &m);
        o->sc[j] = _mm256_set1_epi16(sc);
        o->mi[j] = m;
    }
}

/* Q6_K super-block g: run r of half h is block 4h + r. */
QD_INL void qd_load_q6_k(const uint8_t *row, uint32_t g, struct qd_group *o)
{
    const uint8_t *blk = row + (size_t)g * RS_QUANT_Q6_K_BYTES;
    const int8_t *sc = (const int8_t *)(blk + 192);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    const __m256i m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
    uint16_t dh;
    memcpy(&dh, blk + 208, 2);
    for (int h = 0; h < 2; h++) {
        __m256i l0 = _mm256_loadu_si256((const __m256i *)(blk + 64 * h));
        __m256i l1 = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
        /* 16-bit shifts are safe: every mask keeps bits that stay inside their byte. */
        __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4)),
            _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                            _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30))};
        for (int r = 0; r < 4; r++) {
            o->q[4 * h + r] = _mm256_sub_epi8(q[r], k32);
            o->sc[4 * h + r] = qd_sc2(sc[8 * h + 2 * r], sc[8 * h + 2 * r + 1]);
        }
    }
    o->d = _cvtsh_ss(dh), o->dmin = 0.0f;
    for (int j = 0; j < 8; j++)
        o->mi[j] = 0;
}

/* Q8_0, Q4_0: one group (8 blocks) against n activation rows, a term per block into acc. */
QD_INL void qd_group_dot(const struct qd_group *w, const struct kq_act *const *x, int n,
                         uint32_t g, __m256 *acc)
{
    __m256i wabs[8];
    for (int j = 0; j < 8; j++)
        wabs[j] = _mm256_sign_epi8(w->q[j], w->q[j]);
    for (int m = 0; m < n; m++) {
        __m256i v[8];
        for (int j = 0; j < 8; j++) {
            __m256i xq = _mm256_loadu_si256((const __m256i *)(x[m]->q + 32 * (8 * g + j)));
            v[j] = QD_BLOCK_SUM(wabs[j], _mm256_sign_epi8(xq, w->q[j]), w->sc[j]);
        }
        __m256 fi = _mm256_cvtepi32_ps(qd_hsum8(v));
        __m256 dx = _mm256_loadu_ps(x[m]->d + 8 * g);
        acc[m] = _mm256_add_ps(acc[m], _mm256_mul_ps(_mm256_mul_ps(w->ws, dx), fi));
    }
}

/* K-quants: super-block g against n activation rows, one integer sum each, one float term. */
QD_INL void qd_super_dot(const struct qd_group *w, const struct kq_act *const *x, int n,
                         uint32_t g, float *acc)
{
    __m256i wabs[8];
    for (int j = 0; j < 8; j++)
        wabs[j] = _mm256_sign_epi8(w->q[j], w->q[j]);
    for (int m = 0; m < n; m++) {
        __m256i v = _mm256_setzero_si256();
        int32_t msum = 0;
        for (int j = 0; j < 8; j++) {
            __m256i xq = _mm256_loadu_si256((const __m256i *)(x[m]->q + 32 * (8 * g + j)));
            v = _mm256_add_epi32(v, QD_BLOCK_SUM(wabs[j], _mm256_sign_epi8(xq, w->q[j]), w->sc[j]));
            msum += w->mi[j] * x[m]->s[8 * g + j];
        }
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
        float dx = x[m]->d[8 * g];
        acc[m] = acc[m] + (((w->d * dx) * (float)_mm_cvtsi128_si32(h)) -
                           ((w->dmin * dx) * (float)msum));
    }
}

/* One dot function per type, its loader inlined. */
#define QD_DOT_BLOCKS(TYPE, LOAD)                                                                \
    QD_TGT static void QD_PREFIX(TYPE)(const uint8_t *row, const struct kq_act *const *x, int n, \
                                       uint32_t K, float *out)                                  \
    {                                                                                            \
        uint32_t nb = K / KQ_BLOCK, ng = kq_padded_blocks(K) / 8;                                 \
        __m256 acc[KQ_DOT_ROWS];                                                                 \
        for (int m = 0; m < n; m++)                                                              \
            acc[m] = _mm256_setzero_ps();                                                        \
        for (uint32_t g = 0; g < ng; g++) {                                                      \
            struct qd_group w;                                                                   \
            LOAD(row, g, nb, &w);                                                                \
            qd_group_dot(&w, x, n, g, acc);                                                      \
        }                                                                                        \
        for (int m = 0; m < n; m++)                                                              \
            out[m] = qd_tree(acc[m]);                                                            \
    }
#define QD_DOT_SUPER(TYPE, LOAD)                                                                 \
    QD_TGT static void QD_PREFIX(TYPE)(const uint8_t *row, const struct kq_act *const *x, int n, \
                                       uint32_t K, float *out)                                  \
    {                                                                                            \
        float acc[KQ_DOT_ROWS] = {0};                                                            \
        for (uint32_t g = 0; g < K / 256; g++) {                                                 \
            struct qd_group w;                                                                   \
            LOAD;                                                                                \
            qd_super_dot(&w, x, n, g, acc);                                                      \
        }                                                                                        \
        for (int m = 0; m < n; m++)                                                              \
            out[m] = acc[m];                                                                     \
    }
QD_DOT_BLOCKS(q8_0, qd_load_q8_0)
QD_DOT_BLOCKS(q4_0, qd_load_q4_0)
QD_DOT_SUPER(q4_k, qd_load_kq(row, g, &w, 0))
QD_DOT_SUPER(q5_k, qd_load_kq(row, g, &w, 1))
QD_DOT_SUPER(q6_k, qd_load_q6_k(row, g, &w))

const struct kq_raw_dot QD_PREFIX(table)[] = {
    {RS_GGML_Q8_0, QD_PREFIX(q8_0)}, {RS_GGML_Q4_0, QD_PREFIX(q4_0)},
    {RS_GGML_Q4_K, QD_PREFIX(q4_k)}, {RS_GGML_Q5_K, QD_PREFIX(q5_k)},
    {RS_GGML_Q6_K, QD_PREFIX(q6_k)}, {RS_GGML_F32, NULL},
};

/* SPDX-License-Identifier: MIT */
/*
 * The integer dot of qdot.h in 256-bit registers, written once for the two
 * x86 variants that include it: qdot_avx2.c (vpmaddubsw + vpmaddwd) and
 * qdot_vnni.c (vpdpbusd). The includer defines QD_TGT (target attribute),
 * QD_PREFIX(name) (its function names) and QD_BLOCK_SUM(wabs, xs, sc): eight
 * int32 whose total is a block's isum. Weight blocks are unpacked in
 * registers, 8 activation blocks (one group) at a time, into exactly the
 * levels, multipliers and scales qdot.c's unpackers write (integer work, and
 * the same float conversions); the float step is the portable dot's, term for
 * term, with no contraction. So every variant gives the portable bits.
 */
#include "launcherd/engine/qdot_load.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Lane j of the result is the total of v[j]'s eight lanes (integer: any order is exact). */
QD_INL __m256i qd_hsum8(const __m256i v[8])
{
    __m256i a = _mm256_hadd_epi32(v[0], v[1]), b = _mm256_hadd_epi32(v[2], v[3]);
    __m256i c = _mm256_hadd_epi32(v[4], v[5]), d = _mm256_hadd_epi32(v[6], v[7]);
    __m256i ab = _mm256_hadd_epi32(a, b), cd = _mm256_hadd_epi32(c, d);
    return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20),
                            _mm256_permute2x128_si256(ab, cd, 0x31));
}

/* Q8_0, Q4_0: one group (8 blocks) against n activation rows, its terms added into acc in
 * block order (the padding's terms are +0, which leaves a sum that started at +0 unchanged). */
QD_INL void qd_group_dot(const struct qd_group *w, const struct kq_act *const *x, int n,
                         uint32_t g, float *acc)
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
        float t[8];
        _mm256_storeu_ps(t, _mm256_mul_ps(_mm256_mul_ps(w->ws, dx), fi));
        float a = acc[m];
        for (int j = 0; j < 8; j++)
            a = a + t[j];
        acc[m] = a;
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
        float acc[KQ_DOT_ROWS] = {0};                                                            \
        for (uint32_t g = 0; g < ng; g++) {                                                      \
            struct qd_group w;                                                                   \
            LOAD(row, g, nb, &w);                                                                \
            qd_group_dot(&w, x, n, g, acc);                                                      \
        }                                                                                        \
        for (int m = 0; m < n; m++)                                                              \
            out[m] = acc[m];                                                                     \
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

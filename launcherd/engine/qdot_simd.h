/* SPDX-License-Identifier: MIT */
/*
 * The integer dot of qdot.h in 256-bit registers, written once for the two
 * x86 variants that include it: qdot_avx2.c (vpmaddubsw + vpmaddwd) and
 * qdot_vnni.c (vpdpbusd). The includer defines QD_TGT (target attribute),
 * QD_NAME (the function to define) and QD_BLOCK_SUM(wabs, xs, sc): eight int32
 * whose total is block b's isum. Only the integer step differs, and it is
 * exact; the float step below is the portable dot's, lane for lane, with no
 * contraction, so every variant gives the portable bits.
 */
#include <immintrin.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define QD_INL static inline __attribute__((always_inline)) QD_TGT

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

QD_TGT void QD_NAME(const struct kq_wrow *w, const struct kq_act *const *x, int n, uint32_t K,
                    float *out)
{
    uint32_t nbp = kq_padded_blocks(K);
    __m256 acc[4];
    for (int m = 0; m < n; m++)
        acc[m] = _mm256_setzero_ps();
    for (uint32_t g = 0; g < nbp; g += 8) {
        __m256i wabs[8], sc[8];
        for (int j = 0; j < 8; j++) {
            wabs[j] = _mm256_loadu_si256((const __m256i *)(w->q + 32 * (g + j)));
            sc[j] = _mm256_loadu_si256((const __m256i *)(w->sc + 16 * (g + j)));
        }
        const __m256 ws = _mm256_loadu_ps(w->ws + g), wm = _mm256_loadu_ps(w->wm + g);
        for (int m = 0; m < n; m++) {
            __m256i v[8];
            for (int j = 0; j < 8; j++) {
                __m256i xq = _mm256_loadu_si256((const __m256i *)(x[m]->q + 32 * (g + j)));
                v[j] = QD_BLOCK_SUM(_mm256_sign_epi8(wabs[j], wabs[j]),
                                    _mm256_sign_epi8(xq, wabs[j]), sc[j]);
            }
            __m256 fi = _mm256_cvtepi32_ps(qd_hsum8(v));
            __m256 dx = _mm256_loadu_ps(x[m]->d + g);
            __m256 fs = _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(x[m]->s + g)));
            __m256 t = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(ws, dx), fi),
                                     _mm256_mul_ps(_mm256_mul_ps(wm, dx), fs));
            acc[m] = _mm256_add_ps(acc[m], t);
        }
    }
    for (int m = 0; m < n; m++)
        out[m] = qd_tree(acc[m]);
}

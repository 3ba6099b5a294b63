/* SPDX-License-Identifier: MIT */
/*
 * Private to the AVX2 kernel files (gemm_avx2.c, attn_avx2.c): the target
 * attributes and the reductions both use, so the fixed lane tree of
 * kernels.h is written once. Compiled with target attributes, never with
 * -mavx2, so the binary still runs on any x86-64.
 */
#ifndef RS_ENGINE_AVX2_IMPL_H
#define RS_ENGINE_AVX2_IMPL_H

#if defined(__x86_64__)

#include <immintrin.h>
#include <stdint.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TGT

#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 8")
#endif

/* --- reductions ----------------------------------------------------------- */

/* The fixed tree of kernels.h for one accumulator. */
INL float hsum1(__m256 a)
{
    __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 s2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

/* Four accumulators reduced at once; lane i equals hsum1 of the i-th argument. */
INL __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d)
{
    __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 b4 = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
    __m128 c4 = _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
    __m128 d4 = _mm_add_ps(_mm256_castps256_ps128(d), _mm256_extractf128_ps(d, 1));
    __m128 ab = _mm_add_ps(_mm_movelh_ps(a4, b4), _mm_movehl_ps(b4, a4));
    __m128 cd = _mm_add_ps(_mm_movelh_ps(c4, d4), _mm_movehl_ps(d4, c4));
    return _mm_add_ps(_mm_shuffle_ps(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                      _mm_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* Lanes [0, n) set, for the zero-padded last step (n in 1..7). */
INL __m256i tail_mask(uint32_t n)
{
    static const int32_t ramp[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(ramp + 8 - n));
}

#endif
#endif

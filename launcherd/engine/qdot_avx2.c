/* SPDX-License-Identifier: MIT */
/*
 * AVX2 integer dot (qdot.h): |w| times sign(x, w) by vpmaddubsw (pairs of
 * u8 x s8 into int16: at most 2 * 128 * 127, no saturation), then vpmaddwd by
 * the 16-value multipliers into int32. Target attributes, never -mavx2: the
 * binary runs on any x86-64 and kernels.c calls this only when the CPU has AVX2.
 */
#include "launcherd/engine/qdot.h"

#if defined(__x86_64__)

#define QD_TGT __attribute__((target("avx2,fma,f16c")))
#define QD_PREFIX(n) kq_avx2_##n
#define QD_BLOCK_SUM(wabs, xs, sc) _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, xs), sc)
/* two 16-level products added in int16: at most 2 x (2 x 15 x 127), nibbles only */
#define QD_HALVES_SUM(lo, xlo, hi, xhi)                                                         \
    _mm256_madd_epi16(                                                                          \
        _mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo), _mm256_maddubs_epi16(hi, xhi)),         \
        _mm256_set1_epi16(1))
#include "launcherd/engine/qdot_simd.h"

/* The largest of 8 floats (none a NaN: max is then exact in any order). */
QD_INL float qd_hmax(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* qdot.c's scalar span, 8 values an instruction: the same products, sums and roundings. */
QD_TGT int kq_avx2_quantize_span(const float *x, uint32_t span, int8_t *q, float *d, int32_t *s)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 big = _mm256_set1_ps(3.4028235e38f);
    __m256 mx = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (uint32_t i = 0; i < span; i += 8) {
        __m256 v = _mm256_and_ps(_mm256_loadu_ps(x + i), absmask);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, big, _CMP_NLE_UQ)); /* inf or NaN */
        mx = _mm256_max_ps(mx, v);
    }
    if (_mm256_movemask_ps(bad) != 0)
        return -1;
    float amax = qd_hmax(mx);
    const __m256 id = _mm256_set1_ps(amax >= 0x1p-120f ? 127.0f / amax : 0.0f); /* as qdot.c */
    const __m256 round = _mm256_set1_ps(12582912.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (uint32_t b = 0; b < span / KQ_BLOCK; b++) {
        __m256i v[4];
        QD_UNROLL for (int k = 0; k < 4; k++) {
            __m256 xv = _mm256_loadu_ps(x + (size_t)b * KQ_BLOCK + 8 * k);
            __m256 r = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(xv, id), round), round);
            v[k] = _mm256_cvttps_epi32(r); /* r is a whole number in [-127, 127] */
        }
        __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]),
                                           _mm256_packs_epi32(v[2], v[3]));
        _mm256_storeu_si256((__m256i *)(q + (size_t)b * KQ_BLOCK),
                            _mm256_permutevar8x32_epi32(bytes, order));
        __m256i t = _mm256_add_epi32(_mm256_add_epi32(v[0], v[1]), _mm256_add_epi32(v[2], v[3]));
        s[b] = qd_hsum(t);
        d[b] = amax / 127.0f;
    }
    return 0;
}

#else

int kq_avx2_quantize_span(const float *x, uint32_t span, int8_t *q, float *d, int32_t *s)
{
    (void)x, (void)span, (void)q, (void)d, (void)s;
    return -1;
}

const struct kq_raw_dot kq_avx2_table[] = {{RS_GGML_F32, NULL, NULL, 0}};

#endif

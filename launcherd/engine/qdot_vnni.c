/* SPDX-License-Identifier: MIT */
/*
 * AVX-512 VNNI integer dot (qdot.h): vpdpbusd sums four u8 x s8 products
 * straight into int32 (no int16 stage), then each half-block's four lanes
 * are multiplied by its 16-value multiplier. 256-bit registers (AVX512VL):
 * the same layout as the AVX2 variant. Target attributes only; kernels.c
 * calls this when the CPU reports avx512f, avx512bw, avx512vl and avx512vnni.
 */
#include "launcherd/engine/qdot.h"

#if defined(__x86_64__)

#define QD_TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
/* [sc0 x4, sc1 x4] from the pair-order multipliers [sc0 x8, sc1 x8]. */
#define QD_SC32(sc)                                                                             \
    _mm256_cvtepi16_epi32(_mm_unpacklo_epi64(_mm256_castsi256_si128(sc),                        \
                                             _mm256_extracti128_si256(sc, 1)))
#define QD_NAME kq_dot_vnni
#define QD_BLOCK_SUM(wabs, xs, sc)                                                              \
    _mm256_mullo_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), wabs, xs), QD_SC32(sc))
#include "launcherd/engine/qdot_simd.h"

#else

void kq_dot_vnni(const struct kq_wrow *w, const struct kq_act *const *x, int n, uint32_t K,
                 float *out)
{
    kq_dot_portable(w, x, n, K, out);
}

#endif

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
#define QD_PREFIX(n) kq_vnni_##n
#define QD_BLOCK_SUM(wabs, xs, sc)                                                              \
    _mm256_mullo_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), wabs, xs), QD_SC32(sc))
#define QD_HALVES_SUM(lo, xlo, hi, xhi)                                                         \
    _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, xlo), hi, xhi)
#include "launcherd/engine/qdot_simd.h"

#else

const struct kq_raw_dot kq_vnni_table[] = {{RS_GGML_F32, NULL, NULL, 0}};

#endif

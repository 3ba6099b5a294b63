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
#include "launcherd/engine/qdot_simd.h"

#else

const struct kq_raw_dot kq_avx2_table[] = {{RS_GGML_F32, NULL}};

#endif

/* SPDX-License-Identifier: MIT */
/*
 * The panel GEMM of qdot_panel.h with AVX2: vpmaddwd multiplies a broadcast
 * pair of weight values by 8 rows' pairs of activation levels and vpaddd adds
 * them in (16 products for two instructions, against 8 for one 256-bit FMA),
 * in a QP_NR x QP_MV x 8 tile of outputs. For Q4_0, Q4_K and Q5_K, the quad
 * path: vpmaddubsw multiplies a broadcast of four u8 weight levels by 8 rows'
 * four s8 activation levels (32 products an instruction), summed in int16 over
 * a block and widened once by vpmaddwd with its multiplier. One-thread 512-token
 * prompts (bench/decode, 768-dim models): Q4_0 363 -> 510 tok/s, Q4_K_M 382 ->
 * 485, Q5_K_M 353 -> 456 (best of 3, alternating). Rows are quantized by
 * kq_quantize_row (its AVX2 spans) and interleaved into the chunk: O(rows x K)
 * next to the tiles' O(rows x K x N). Target attributes only; qdot_gemm.c
 * calls it when the CPU has AVX2 (and not AVX-512 VNNI, whose panel is wider).
 */
#include "launcherd/engine/qdot.h"

#if defined(__x86_64__)

#define QD_TGT __attribute__((target("avx2,fma,f16c")))
#include "launcherd/engine/qdot_load.h"

#define QP_PREFIX(n) kq_panel_avx2_##n
#define QP_W 8                      /* activation rows a register */
#define QP_MV 2                     /* QP_W-row activation vectors per register tile */
#define QP_NR 3                     /* weight rows per register tile */
#define QP_MC (QP_W * QP_MV * 8)    /* activation rows per chunk: eight tiles' worth */
#define QP_VI __m256i
#define QP_VF __m256
#define QP_ZI() _mm256_setzero_si256()
#define QP_ZF() _mm256_setzero_ps()
#define QP_LDI(p) _mm256_loadu_si256((const __m256i *)(p))
#define QP_LDF(p) _mm256_loadu_ps(p)
#define QP_STF(p, v) _mm256_storeu_ps(p, v)
#define QP_SET1I(v) _mm256_set1_epi32(v)
#define QP_SET1F(v) _mm256_set1_ps(v)
#define QP_DOT(acc, a, b) _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
#define QP_CVT(v) _mm256_cvtepi32_ps(v)
#define QP_ADDF(a, b) _mm256_add_ps(a, b)
#define QP_SUBF(a, b) _mm256_sub_ps(a, b)
#define QP_MULF(a, b) _mm256_mul_ps(a, b)
#define QP_STORE_LEVELS(dst, q, sc) store_levels(dst, q, sc)
#define QP_QUAD 1 /* the u8 x s8 path of qdot_panel.h for Q4_0, Q4_K and Q5_K */
#define QP_DOT4(acc, w, x) _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, x))
#define QP_WIDEN(a16, m16) _mm256_madd_epi16(a16, m16)
#define QP_SET1W(v) _mm256_set1_epi16(v)
#define QP_ADDI(a, b) _mm256_add_epi32(a, b)
#define QP_SUBI(a, b) _mm256_sub_epi32(a, b)
#define QP_QUANTIZE_FAST(x, K, span, c, i) (-1)

/* 32 int8 levels times their pair-order multipliers (qdot.h's sc) as 32 int16 at dst. */
QD_INL void store_levels(int32_t *dst, __m256i q, __m256i sc)
{
    __m256i e0 = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(sc)); /* pairs 0-7 */
    __m256i e1 = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(sc, 1));
    __m256i l0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)); /* levels 0-15 */
    __m256i l1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1));
    _mm256_storeu_si256((__m256i *)dst,
                        _mm256_mullo_epi16(l0, _mm256_or_si256(e0, _mm256_slli_epi32(e0, 16))));
    _mm256_storeu_si256((__m256i *)(dst + 8),
                        _mm256_mullo_epi16(l1, _mm256_or_si256(e1, _mm256_slli_epi32(e1, 16))));
}

#include "launcherd/engine/qdot_panel.h"

#else

size_t kq_panel_avx2_scratch_bytes(uint32_t K)
{
    (void)K;
    return 0;
}

int kq_panel_avx2_gemm(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                       float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate,
                       void *scratch)
{
    (void)w, (void)x, (void)ldx, (void)n_rows, (void)y, (void)ldy, (void)n0, (void)n1;
    (void)accumulate, (void)scratch;
    return -1;
}

#endif

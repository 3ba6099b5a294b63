/* SPDX-License-Identifier: MIT */
/*
 * The panel GEMM of qdot_panel.h with AVX-512 VNNI: vpdpwssd multiplies a
 * broadcast pair of weight values by 16 rows' pairs of activation levels
 * (twice the 512-bit FMA's products per instruction), in a 4 x 3 x 16 tile of
 * outputs; rows are quantized straight into the chunk, 16 values an
 * instruction. Target attributes only; qdot_gemm.c calls it when the CPU
 * reports avx512f, avx512bw, avx512vl and avx512vnni.
 * Leaves out: AVX-512 without VNNI (the AVX2 panel runs there).
 */
#include "launcherd/engine/qdot.h"

#if defined(__x86_64__)

#define QD_TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#include "launcherd/engine/qdot_load.h"

#define QP_PREFIX(n) kq_panel512_##n
#define QP_W 16                     /* activation rows a register */
#define QP_MV 3                     /* QP_W-row activation vectors per register tile */
#define QP_NR 4                     /* weight rows per register tile */
#define QP_MC (QP_W * QP_MV * 2)    /* activation rows per chunk: two tiles' worth */
#define QP_VI __m512i
#define QP_VF __m512
#define QP_ZI() _mm512_setzero_si512()
#define QP_ZF() _mm512_setzero_ps()
#define QP_LDI(p) _mm512_loadu_si512(p)
#define QP_LDF(p) _mm512_loadu_ps(p)
#define QP_STF(p, v) _mm512_storeu_ps(p, v)
#define QP_SET1I(v) _mm512_set1_epi32(v)
#define QP_SET1F(v) _mm512_set1_ps(v)
#define QP_DOT(acc, a, b) _mm512_dpwssd_epi32(acc, a, b)
#define QP_CVT(v) _mm512_cvtepi32_ps(v)
#define QP_ADDF(a, b) _mm512_add_ps(a, b)
#define QP_SUBF(a, b) _mm512_sub_ps(a, b)
#define QP_MULF(a, b) _mm512_mul_ps(a, b)
#define QP_STORE_LEVELS(dst, q, sc) _mm512_storeu_si512(dst, level_times_sc(q, sc))
#define QP_QUANTIZE_FAST quantize_fast

struct qp_chunk;
QD_TGT static int quantize_fast(const float *x, uint32_t K, uint32_t span, const struct qp_chunk *c,
                                uint32_t i);

/* 32 int8 levels times their pair-order multipliers (qdot.h's sc) as 32 int16. */
QD_INL __m512i level_times_sc(__m256i q, __m256i sc)
{
    __m512i e = _mm512_cvtepu16_epi32(sc); /* one multiplier per pair: copy it to both halves */
    return _mm512_mullo_epi16(_mm512_cvtepi8_epi16(q), _mm512_or_si512(e, _mm512_slli_epi32(e, 16)));
}

#include "launcherd/engine/qdot_panel.h"

/*
 * kq_quantize_row's levels, scales and sums for a row whose values are all
 * finite, straight into the chunk: the maximum is exact in any order, and each
 * level is the same rounded multiply, add and subtract. Returns -1 (nothing
 * trustworthy written) when the row holds an inf or a NaN.
 */
QD_TGT static int quantize_fast(const float *x, uint32_t K, uint32_t span, const struct qp_chunk *c,
                                uint32_t i)
{
    const __m512 big = _mm512_set1_ps(3.4028235e38f), magic = _mm512_set1_ps(12582912.0f);
    for (uint32_t s0 = 0; s0 < K; s0 += span) {
        __m512 mx = _mm512_setzero_ps();
        for (uint32_t k = s0; k < s0 + span; k += 16) {
            __m512 v = _mm512_abs_ps(_mm512_loadu_ps(x + k));
            if (_mm512_cmp_ps_mask(v, big, _CMP_NLE_UQ)) /* inf or NaN */
                return -1;
            mx = _mm512_max_ps(mx, v);
        }
        float amax = _mm512_reduce_max_ps(mx);
        float id = amax >= 0x1p-120f ? 127.0f / amax : 0.0f; /* as qdot.c */
        __m512 idv = _mm512_set1_ps(id);
        for (uint32_t b = s0 / KQ_BLOCK; b < (s0 + span) / KQ_BLOCK; b++) {
            int32_t sum = 0;
            for (int h = 0; h < 2; h++) {
                __m512 v = _mm512_loadu_ps(x + (size_t)b * KQ_BLOCK + 16 * h);
                __m512 r = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(v, idv), magic), magic);
                __m512i q = _mm512_cvtps_epi32(r); /* r is already an integer: exact */
                sum += _mm512_reduce_add_epi32(q);
                /* two levels per int32: (q[2j] & 0xffff) | q[2j + 1] << 16 */
                __m512i odd = _mm512_srli_epi64(q, 32), even = _mm512_and_si512(q, _mm512_set1_epi64(0xffff));
                __m512i pr = _mm512_or_si512(even, _mm512_slli_epi64(odd, 16));
                __m256i pairs = _mm512_cvtepi64_epi32(pr);
                int32_t tmp[8];
                _mm256_storeu_si256((__m256i *)tmp, pairs);
                size_t p0 = ((size_t)b * KQ_BLOCK + 16 * (size_t)h) / 2;
                for (int j = 0; j < 8; j++)
                    c->xq[qp_xq_at(c, p0 + (size_t)j, i)] = tmp[j];
            }
            c->dx[(size_t)b * QP_MC + i] = amax / 127.0f;
            int32_t *xs = (int32_t *)c->xs + (size_t)(b / 2) * QP_MC + i;
            int16_t *half = (int16_t *)xs + (b & 1); /* little-endian: block 2q low, 2q + 1 high */
            *half = (int16_t)sum;
        }
    }
    return 0;
}

#else

size_t kq_panel512_scratch_bytes(uint32_t K)
{
    (void)K;
    return 0;
}

int kq_panel512_gemm(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                     float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate, void *scratch)
{
    (void)w, (void)x, (void)ldx, (void)n_rows, (void)y, (void)ldy, (void)n0, (void)n1;
    (void)accumulate, (void)scratch;
    return -1;
}

#endif

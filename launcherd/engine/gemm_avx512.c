/* SPDX-License-Identifier: MIT */
/*
 * AVX-512 float GEMM for prompts (KERN_AVX512, more than 3 activation rows;
 * fewer rows are bandwidth-bound and run AVX2's register path). Weights are
 * widened to the values AVX2 multiplies by (F32/F16/BF16 straight into the
 * panel, the block types through AVX2's widening) into an F32 panel of 8 rows,
 * interleaved in pairs: one 512-bit register holds 8 consecutive k of row 2p
 * in its low half and of row 2p + 1 in its high half, so each half is one of
 * AVX2's 8-lane accumulators, fed the same FMAs in the same order, reduced by
 * the same tree (kernels.h). Hence the same bits as KERN_AVX2 for every
 * output, at twice the work per instruction. Register tile: 6 activation rows
 * x 4 row pairs (24 accumulators of the 32 registers).
 * Compiled with target attributes, never -mavx512f, so the binary still runs
 * on any x86-64 (kernels.c calls it only when the CPU reports AVX-512).
 */
#include "launcherd/engine/kernels.h"

#define NW 8 /* weight rows per panel: 2 * NP */

size_t kern_gemm_avx512_scratch_floats(uint32_t cols)
{
    size_t kpad = ((size_t)cols + 7) & ~(size_t)7;
    return (NW + 1) * kpad + 16; /* the panel from the first cache line, then one widened row */
}

#if defined(__x86_64__)

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "launcherd/engine/avx2_impl.h"

#define TGT512 __attribute__((target("avx512f,avx2,fma,f16c")))
#define INL512 static inline __attribute__((always_inline)) TGT512

#define MR 6    /* activation rows per register tile */
#define NP 4    /* weight row pairs per register tile */
#define DIRECT_ROWS 3 /* up to this many rows AVX2's register path is the faster */

/* 8 floats at p in both halves of a register. */
INL512 __m512 bcast8(const float *p)
{
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p))));
}

/* Lanes [0, n) set, n in 1..8. */
INL512 __m256i tail_mask_any(uint32_t n)
{
    return n == 8 ? _mm256_set1_epi32(-1) : tail_mask(n);
}

/* The first n (1..7) floats at p, the rest zero, in both halves. */
INL512 __m512 bcast8_tail(const float *p, uint32_t n)
{
    __m256 v = _mm256_maskload_ps(p, tail_mask(n));
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(v)));
}

/* y[0..7] (+)= the reduced sums of the 8 weight rows (pair p: low half row 2p, high 2p + 1). */
INL512 void store8(const __m512 acc[NP], float *y, int accumulate)
{
    __m256 r[NW];
    for (int p = 0; p < NP; p++) {
        r[2 * p] = _mm512_castps512_ps256(acc[p]);
        r[2 * p + 1] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p]), 1));
    }
    __m128 lo = hsum4(r[0], r[1], r[2], r[3]), hi = hsum4(r[4], r[5], r[6], r[7]);
    if (accumulate) {
        lo = _mm_add_ps(_mm_loadu_ps(y), lo);
        hi = _mm_add_ps(_mm_loadu_ps(y + 4), hi);
    }
    _mm_storeu_ps(y, lo);
    _mm_storeu_ps(y + 4, hi);
}

/*
 * mr activation rows at x times the panel's 8 rows: per 8 k, lane j of each
 * half accumulates w[k + j] * x[k + j] with one FMA, as AVX2's tile does
 * (the zero-padded last step included).
 */
INL512 void tile(int mr, const float *panel, const float *x, size_t ldx, uint32_t K, float *y,
                 size_t ldy, int accumulate)
{
    __m512 acc[MR][NP];
    UNROLL for (int m = 0; m < mr; m++) UNROLL for (int p = 0; p < NP; p++) acc[m][p] =
        _mm512_setzero_ps();
    uint32_t k = 0;
    for (; k + 8 <= K; k += 8, panel += NP * 16) {
        __m512 wv[NP];
        UNROLL for (int p = 0; p < NP; p++) wv[p] = _mm512_loadu_ps(panel + 16 * p);
        UNROLL for (int m = 0; m < mr; m++) {
            __m512 xv = bcast8(x + (size_t)m * ldx + k);
            UNROLL for (int p = 0; p < NP; p++) acc[m][p] = _mm512_fmadd_ps(wv[p], xv, acc[m][p]);
        }
    }
    if (k < K) { /* the zero-padded last step, as AVX2's */
        __m512 wv[NP];
        UNROLL for (int p = 0; p < NP; p++) wv[p] = _mm512_loadu_ps(panel + 16 * p);
        UNROLL for (int m = 0; m < mr; m++) {
            __m512 xv = bcast8_tail(x + (size_t)m * ldx + k, K - k);
            UNROLL for (int p = 0; p < NP; p++) acc[m][p] = _mm512_fmadd_ps(wv[p], xv, acc[m][p]);
        }
    }
    UNROLL for (int m = 0; m < mr; m++) store8(acc[m], y + (size_t)m * ldy, accumulate);
}

#define TILE_CASE(MR_) tile(MR_, panel, x + (size_t)m * ldx, ldx, K, y + (size_t)m * ldy, ldy, \
                            accumulate)

/* Rows [0, mrows) of x against one panel. */
TGT512 static void panel_rows(const float *panel, const float *x, size_t ldx, uint32_t mrows,
                              uint32_t K, float *y, size_t ldy, int accumulate)
{
    uint32_t m = 0;
    for (; m + MR <= mrows; m += MR)
        TILE_CASE(MR);
    switch (mrows - m) { /* the remainder, each a tile shape of its own */
    case 5: TILE_CASE(5); break;
    case 4: TILE_CASE(4); break;
    case 3: TILE_CASE(3); break;
    case 2: TILE_CASE(2); break;
    case 1: TILE_CASE(1); break;
    default: break;
    }
}

/*
 * Rows n .. n + 7 of w widened (kern_widen_row_avx2: the values AVX2 multiplies
 * by) into the pair-interleaved panel: chunk c of pair p at panel + (c NP + p) 16.
 * row: kpad floats of scratch for one widened row.
 */
/* 8 16-bit values at p (n < 8: the first n, the rest zero, which is +0 in F16 and BF16). */
INL512 __m128i load8_h16(const uint16_t *p, uint32_t n)
{
    if (n == 8)
        return _mm_loadu_si128((const __m128i *)p);
    uint16_t t[8] = {0};
    memcpy(t, p, n * sizeof(uint16_t));
    return _mm_loadu_si128((const __m128i *)t);
}

/*
 * F32, F16 and BF16 rows a, b straight into their pair's panel slots, 16
 * values an instruction (the conversions are exact: the values AVX2 widens).
 */
TGT512 static void widen_pair_float(const struct kern_mat *w, uint32_t a, uint32_t kpad,
                                   float *dst)
{
    const uint8_t *ra = (const uint8_t *)w->data + (size_t)a * w->row_bytes;
    const uint8_t *rb = ra + w->row_bytes;
    uint32_t K = w->cols;
    for (uint32_t k = 0; k < kpad; k += 8, dst += NP * 16) {
        uint32_t n = K - k < 8 ? K - k : 8;
        __m512 v;
        if (w->type == RS_GGML_F32) {
            __m256 lo = _mm256_maskload_ps((const float *)ra + k, tail_mask_any(n));
            __m256 hi = _mm256_maskload_ps((const float *)rb + k, tail_mask_any(n));
            v = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)),
                                                    _mm256_castps_pd(hi), 1));
        } else {
            __m256i h = _mm256_set_m128i(load8_h16((const uint16_t *)rb + k, n),
                                         load8_h16((const uint16_t *)ra + k, n));
            v = w->type == RS_GGML_F16
                    ? _mm512_cvtph_ps(h)
                    : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        }
        _mm512_storeu_ps(dst, v);
    }
}

/*
 * Rows n .. n + 7 of w widened (the values AVX2 multiplies by) into the
 * pair-interleaved panel: chunk c of pair p at panel + (c NP + p) 16. row:
 * kpad floats of scratch for one widened row (block types).
 */
TGT512 static void widen_panel(const struct kern_mat *w, uint32_t n, uint32_t kpad, float *row,
                               float *panel)
{
    if (w->type == RS_GGML_F32 || w->type == RS_GGML_F16 || w->type == RS_GGML_BF16) {
        for (int p = 0; p < NP; p++)
            widen_pair_float(w, n + 2 * (uint32_t)p, kpad, panel + (size_t)p * 16);
        return;
    }
    for (int r = 0; r < NW; r++) {
        kern_widen_row_avx2(w, n + (uint32_t)r, row);
        memset(row + w->cols, 0, (kpad - w->cols) * sizeof(float));
        float *dst = panel + (size_t)(r / 2) * 16 + (size_t)(r & 1) * 8;
        for (uint32_t c = 0; c < kpad / 8; c++)
            _mm256_storeu_ps(dst + (size_t)c * NP * 16, _mm256_loadu_ps(row + 8 * (size_t)c));
    }
}

/*
 * Rows of activations per block: half of this core's L2, so a block of x stays
 * there across panels and the panels (re-widened per block) are widened as few
 * times as that allows. Measured on a 2 MB-L2 Xeon, F16 768-dim prompt 512, one
 * thread: 423 tok/s with AVX2's 384 KB block, 495 with 1 MB.
 */
static uint32_t m_block_rows(uint32_t K)
{
    static _Atomic long half_l2;
    long half = atomic_load_explicit(&half_l2, memory_order_relaxed);
    if (half == 0) {
        long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        half = l2 >= 256 * 1024 && l2 <= 64l * 1024 * 1024 ? l2 / 2 : 512 * 1024;
        atomic_store_explicit(&half_l2, half, memory_order_relaxed);
    }
    uint32_t rows = (uint32_t)((size_t)half / (4u * (K ? K : 1)));
    rows = rows / MR * MR;
    return rows < MR ? MR : rows;
}

void kern_gemm_avx512(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                      float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate,
                      float *scratch)
{
    if (n_rows <= DIRECT_ROWS || n0 >= n1 || n1 - n0 < NW) {
        kern_gemm_avx2(w, x, ldx, n_rows, y, ldy, n0, n1, accumulate, scratch);
        return;
    }
    uint32_t K = w->cols, kpad = (K + 7) & ~7u, mb = m_block_rows(K);
    uint32_t n_end = n0 + (n1 - n0) / NW * NW;
    /* 64-byte aligned: every panel load is one cache line (a split load costs two). */
    float *panel = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *row = panel + (size_t)NW * kpad;
    for (uint32_t m0 = 0; m0 < n_rows; m0 += mb) {
        uint32_t mrows = n_rows - m0 < mb ? n_rows - m0 : mb;
        for (uint32_t n = n0; n < n_end; n += NW) {
            widen_panel(w, n, kpad, row, panel);
            panel_rows(panel, x + (size_t)m0 * ldx, ldx, mrows, K, y + (size_t)m0 * ldy + n, ldy,
                       accumulate);
        }
    }
    if (n_end < n1) /* the last rows of the slice: the same bits from AVX2 */
        kern_gemm_avx2(w, x, ldx, n_rows, y, ldy, n_end, n1, accumulate, scratch);
}

#else /* not x86-64: kernels.c never selects this */

void kern_gemm_avx512(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                      float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate,
                      float *scratch)
{
    kern_gemm_portable(w, x, ldx, n_rows, y, ldy, n0, n1, accumulate, scratch);
}

#endif

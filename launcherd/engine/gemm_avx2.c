/* SPDX-License-Identifier: MIT */
/*
 * AVX2 + FMA + F16C GEMM, compiled with target attributes so the binary
 * still runs on any x86-64 (kernels.c calls it only when the CPU has them).
 * Register tiles of up to 3 activation rows x 4 weight rows, 8 lanes along
 * K per accumulator, reduced by the fixed tree of kernels.h; weights widened
 * in registers up to 3 rows, else into a 4-row F32 panel all row tiles
 * reuse (same bits either way). F16 and BF16 widen in registers at every
 * batch size: one conversion per row tile cost less than the panel's store
 * and reload (perf of a 16-row F16 decode: 16 % in widening, the tiles at
 * about half the FMA peak; 8 to 16 rows ran 30-60 % faster without it).
 * Leaves out: AVX-512 (same FMA throughput on the Zen 4 this was tuned on).
 */
#include "launcherd/engine/kernels.h"

#include "common/quant.h"

#if defined(__x86_64__)

#include <math.h>
#include <string.h>

#include "launcherd/engine/avx2_impl.h"

#define MR 3 /* activation rows per register tile */
#define NR 4 /* weight rows per register tile */
#define Q8_BYTES RS_QUANT_Q8_0_BYTES
#define Q4_BYTES RS_QUANT_Q4_0_BYTES

/* --- reductions and prefetch ---------------------------------------------- */

/* Writes (or adds) an MR_ x NR_ block of reduced sums at y. */
INL void store_tile(int mr, int nr, __m256 acc[MR][NR], float *y, size_t ldy, int accumulate)
{
    UNROLL for (int m = 0; m < mr; m++) {
        float *ym = y + (size_t)m * ldy;
        if (nr == NR) {
            __m128 s = hsum4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]);
            if (accumulate)
                s = _mm_add_ps(_mm_loadu_ps(ym), s);
            _mm_storeu_ps(ym, s);
        } else {
            UNROLL for (int n = 0; n < nr; n++) {
                float s = hsum1(acc[m][n]);
                ym[n] = accumulate ? ym[n] + s : s;
            }
        }
    }
}

/*
 * Software prefetch of the next weight tile. The rows of a tile are read as
 * NR interleaved short streams, which the hardware prefetcher does not
 * follow well (measured: decode GEMV fell to ~9 GB/s from DRAM); pulling
 * the next tile's bytes in while this one computes restores streaming speed.
 * Prefetches never fault and never change results.
 */
struct pf {
    const char *p, *end;
    int to_l2; /* F32 tiles are large: into L2 only, measured faster than into L1 */
};

/* Cache lines of one block column of a full tile (NR blocks of `bytes`), rounded up. */
#define PF_LINES(bytes) ((int)((NR * (bytes) + 63) / 64))

/* Prefetches lines [*p, *p + 64 n) below end; p lives in a register of the caller. */
INL void pf_lines(const char **p, const char *end, int to_l2, int n)
{
    for (int i = 0; i < n && *p < end; i++, *p += 64) {
        if (to_l2)
            _mm_prefetch(*p, _MM_HINT_T1);
        else
            _mm_prefetch(*p, _MM_HINT_T0);
    }
}

/* --- widening loads ------------------------------------------------------- */

INL __m256 load_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

INL __m256 load_bf16(const uint16_t *p)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/*
 * The widening steps every block type is built from, shared by the panel
 * (widen_*) and register (tile_*) paths so both give the same bits by
 * construction. i8x8: 8 signed bytes (the low 8 of v) times scale; exact
 * products for every type here (at most 23 significant bits).
 */
INL __m256 i8x8(__m128i v, __m256 scale)
{
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), scale);
}

/* 8 unsigned bytes (the low 8 of v) as d * q - m: the product is exact, one rounding. */
INL __m256 u8x8_affine(__m128i v, __m256 d, __m256 m)
{
    return _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), m);
}

/* Bytes 8i .. 8i + 7 of q (i in 0..3), in the low half. */
INL __m128i quarter(__m256i q, int i)
{
    __m128i h = i < 2 ? _mm256_castsi256_si128(q) : _mm256_extracti128_si256(q, 1);
    return i & 1 ? _mm_srli_si128(h, 8) : h;
}

/* 8 values q[0..7] * d of a Q8_0 block. */
INL __m256 load_q8(const int8_t *q, __m256 d)
{
    return i8x8(_mm_loadl_epi64((const __m128i *)q), d);
}

/* The 32 nibbles of a Q4_0 block minus 8, as signed bytes: values 0-15 in lo, 16-31 in hi. */
INL void q4_bytes(const uint8_t *q, __m128i *lo, __m128i *hi)
{
    const __m128i raw = _mm_loadu_si128((const __m128i *)q), m = _mm_set1_epi8(15);
    const __m128i eight = _mm_set1_epi8(8);
    *lo = _mm_sub_epi8(_mm_and_si128(raw, m), eight);
    *hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), m), eight);
}

INL __m256 q8_scale(const uint8_t *block)
{
    uint16_t h;
    memcpy(&h, block, 2);
    return _mm256_set1_ps(_cvtsh_ss(h));
}

/* Widens 16-bit values [k, n) into 8 floats, zero-padded (F16 and BF16 zero is +0). */
INL __m256 load_tail16(const uint16_t *p, uint32_t n, int bf16)
{
    uint16_t t[8] = {0};
    memcpy(t, p, n * sizeof(uint16_t));
    return bf16 ? load_bf16(t) : load_f16(t);
}

/* --- F32 weight rows (the matrix itself or a widened panel) --------------- */

INL void tile_f32(int mr, int nr, const float *const *wr, const float *x, size_t ldx, uint32_t K,
                  float *y, size_t ldy, int accumulate, struct pf pf)
{
    __m256 acc[MR][NR];
    UNROLL for (int m = 0; m < mr; m++) UNROLL for (int n = 0; n < nr; n++) acc[m][n] =
        _mm256_setzero_ps();
    uint32_t k = 0;
    for (; k + 8 <= K; k += 8) {
        pf_lines(&pf.p, pf.end, pf.to_l2, nr * 32 / 64);
        __m256 xv[MR];
        UNROLL for (int m = 0; m < mr; m++) xv[m] = _mm256_loadu_ps(x + (size_t)m * ldx + k);
        UNROLL for (int n = 0; n < nr; n++) {
            __m256 wv = _mm256_loadu_ps(wr[n] + k);
            UNROLL for (int m = 0; m < mr; m++) acc[m][n] = _mm256_fmadd_ps(wv, xv[m], acc[m][n]);
        }
    }
    if (k < K) {
        __m256i mask = tail_mask(K - k);
        __m256 xv[MR];
        UNROLL for (int m = 0; m < mr; m++) xv[m] =
            _mm256_maskload_ps(x + (size_t)m * ldx + k, mask);
        UNROLL for (int n = 0; n < nr; n++) {
            __m256 wv = _mm256_maskload_ps(wr[n] + k, mask);
            UNROLL for (int m = 0; m < mr; m++) acc[m][n] = _mm256_fmadd_ps(wv, xv[m], acc[m][n]);
        }
    }
    store_tile(mr, nr, acc, y, ldy, accumulate);
}

/* Same, widening F16 (bf16 = 0) or BF16 (bf16 = 1) rows in registers. */
INL void tile_h16(int mr, int nr, int bf16, const uint16_t *const *wr, const float *x, size_t ldx,
                  uint32_t K, float *y, size_t ldy, int accumulate, struct pf pf)
{
    __m256 acc[MR][NR];
    UNROLL for (int m = 0; m < mr; m++) UNROLL for (int n = 0; n < nr; n++) acc[m][n] =
        _mm256_setzero_ps();
    uint32_t k = 0;
    for (; k + 8 <= K; k += 8) {
        pf_lines(&pf.p, pf.end, pf.to_l2, nr == NR ? 1 : 0);
        __m256 xv[MR];
        UNROLL for (int m = 0; m < mr; m++) xv[m] = _mm256_loadu_ps(x + (size_t)m * ldx + k);
        UNROLL for (int n = 0; n < nr; n++) {
            __m256 wv = bf16 ? load_bf16(wr[n] + k) : load_f16(wr[n] + k);
            UNROLL for (int m = 0; m < mr; m++) acc[m][n] = _mm256_fmadd_ps(wv, xv[m], acc[m][n]);
        }
    }
    if (k < K) {
        __m256i mask = tail_mask(K - k);
        __m256 xv[MR];
        UNROLL for (int m = 0; m < mr; m++) xv[m] =
            _mm256_maskload_ps(x + (size_t)m * ldx + k, mask);
        UNROLL for (int n = 0; n < nr; n++) {
            __m256 wv = load_tail16(wr[n] + k, K - k, bf16);
            UNROLL for (int m = 0; m < mr; m++) acc[m][n] = _mm256_fmadd_ps(wv, xv[m], acc[m][n]);
        }
    }
    store_tile(mr, nr, acc, y, ldy, accumulate);
}

/* Same over Q8_0 rows (K a multiple of 32): one scale load per block. */
INL void tile_q8(int mr, int nr, const uint8_t *const *wr, const float *x, size_t ldx, uint32_t K,
                 float *y, size_t ldy, int accumulate, struct pf pf)
{
    __m256 acc[MR][NR];
    UNROLL for (int m = 0; m < mr; m++) UNROLL for (int n = 0; n < nr; n++) acc[m][n] =
        _mm256_setzero_ps();
    for (uint32_t b = 0; b < K / 32; b++) {
        pf_lines(&pf.p, pf.end, pf.to_l2, nr == NR ? PF_LINES(Q8_BYTES) : 0);
        UNROLL for (int n = 0; n < nr; n++) {
            const uint8_t *blk = wr[n] + (size_t)b * Q8_BYTES;
            __m256 d = q8_scale(blk);
            const int8_t *q = (const int8_t *)(blk + 2);
            UNROLL for (int j = 0; j < 4; j++) {
                __m256 wv = load_q8(q + 8 * j, d);
                UNROLL for (int m = 0; m < mr; m++) acc[m][n] = _mm256_fmadd_ps(
                    wv, _mm256_loadu_ps(x + (size_t)m * ldx + b * 32 + 8 * j), acc[m][n]);
            }
        }
    }
    store_tile(mr, nr, acc, y, ldy, accumulate);
}

/*
 * Same over Q4_0 rows (K a multiple of 32). Value k of a block is the low
 * nibble of byte k for k < 16 and the high nibble of byte k - 16 after, so the
 * four 8-value steps take bytes 0-7 low, 8-15 low, 0-7 high, 8-15 high: the
 * panel's k order, hence the panel's bits.
 */
INL void tile_q4(int mr, int nr, const uint8_t *const *wr, const float *x, size_t ldx, uint32_t K,
                 float *y, size_t ldy, int accumulate, struct pf pf)
{
    __m256 acc[MR][NR];
    UNROLL for (int m = 0; m < mr; m++) UNROLL for (int n = 0; n < nr; n++) acc[m][n] =
        _mm256_setzero_ps();
    for (uint32_t b = 0; b < K / 32; b++) {
        pf_lines(&pf.p, pf.end, pf.to_l2, nr == NR ? PF_LINES(Q4_BYTES) : 0);
        UNROLL for (int n = 0; n < nr; n++) {
            const uint8_t *blk = wr[n] + (size_t)b * Q4_BYTES;
            __m256 d = q8_scale(blk);
            __m128i lo, hi;
            q4_bytes(blk + 2, &lo, &hi);
            const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
            UNROLL for (int j = 0; j < 4; j++) {
                __m256 wv = i8x8(part[j], d);
                UNROLL for (int m = 0; m < mr; m++) acc[m][n] = _mm256_fmadd_ps(
                    wv, _mm256_loadu_ps(x + (size_t)m * ldx + b * 32 + 8 * j), acc[m][n]);
            }
        }
    }
    store_tile(mr, nr, acc, y, ldy, accumulate);
}

/* --- drivers -------------------------------------------------------------- */

/* Rows of activations per block, so one block of x stays in L2 across weight tiles. */
static uint32_t m_block_rows(uint32_t K)
{
    uint32_t rows = (uint32_t)((384u * 1024u) / (4u * (K ? K : 1)));
    rows = rows / MR * MR;
    return rows < MR ? MR : rows;
}

/* --- Q4_0, Q4_K, Q5_K, Q6_K blocks (layouts as ggml's; see common/quant.h) ---- */

INL void widen_q4_0(const uint8_t *b, float *y)
{
    __m256 d = q8_scale(b);
    __m128i lo, hi;
    q4_bytes(b + 2, &lo, &hi);
    _mm256_storeu_ps(y, i8x8(lo, d));
    _mm256_storeu_ps(y + 8, i8x8(_mm_srli_si128(lo, 8), d));
    _mm256_storeu_ps(y + 16, i8x8(hi, d));
    _mm256_storeu_ps(y + 24, i8x8(_mm_srli_si128(hi, 8), d));
}

/* 32 nibbles (bytes 0..15 each) as d1 * q - m1. */
INL void st_q4k(float *y, __m256i q, float d1, float m1)
{
    __m256 d = _mm256_set1_ps(d1), m = _mm256_set1_ps(m1);
    for (int i = 0; i < 4; i++)
        _mm256_storeu_ps(y + 8 * i, u8x8_affine(quarter(q, i), d, m));
}

INL void widen_q4_k(const uint8_t *b, float *y)
{
    uint16_t h[2];
    memcpy(h, b, 4);
    float d = _cvtsh_ss(h[0]), dmin = _cvtsh_ss(h[1]);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int j = 0; j < 4; j++, y += 64) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * j));
        uint8_t sc, m;
        rs_quant_k_scale_min(b + 4, 2 * j, &sc, &m);
        st_q4k(y, _mm256_and_si256(q, m4), d * sc, dmin * m);
        rs_quant_k_scale_min(b + 4, 2 * j + 1, &sc, &m);
        st_q4k(y + 32, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4), d * sc, dmin * m);
    }
}

/* The 32 5-bit values of Q5_K chunk j, low (half 0) or high (half 1) nibbles plus bit
 * 2j + half of each high byte as 16 (16-bit shifts: every mask keeps bits inside a byte). */
INL __m256i q5k_values(__m256i q, __m256i qh, int j, int half)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256i nib = half ? _mm256_and_si256(_mm256_srli_epi16(q, 4), m4) : _mm256_and_si256(q, m4);
    __m256i bit = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j + half)), one);
    return _mm256_or_si256(nib, _mm256_slli_epi16(bit, 4));
}

INL void widen_q5_k(const uint8_t *b, float *y)
{
    uint16_t h[2];
    memcpy(h, b, 4);
    float d = _cvtsh_ss(h[0]), dmin = _cvtsh_ss(h[1]);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 16));
    for (int j = 0; j < 4; j++, y += 64) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(b + 48 + 32 * j));
        uint8_t sc, m;
        rs_quant_k_scale_min(b + 4, 2 * j, &sc, &m);
        st_q4k(y, q5k_values(q, qh, j, 0), d * sc, dmin * m);
        rs_quant_k_scale_min(b + 4, 2 * j + 1, &sc, &m);
        st_q4k(y + 32, q5k_values(q, qh, j, 1), d * sc, dmin * m);
    }
}

/* 32 signed 6-bit values: the first 16 scaled by d * sc[0], the next 16 by d * sc[1]. */
INL void st_q6k(float *y, __m256i q, float d, const int8_t *sc)
{
    for (int i = 0; i < 4; i++)
        _mm256_storeu_ps(y + 8 * i, i8x8(quarter(q, i), _mm256_set1_ps(d * (float)sc[i / 2])));
}

INL void widen_q6_k(const uint8_t *b, float *y)
{
    uint16_t dh;
    memcpy(&dh, b + 208, 2);
    float d = _cvtsh_ss(dh);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    const __m256i m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
    const int8_t *sc = (const int8_t *)(b + 192);
    for (int n = 0; n < 2; n++, y += 128, sc += 8) {
        __m256i l0 = _mm256_loadu_si256((const __m256i *)(b + 64 * n));
        __m256i l1 = _mm256_loadu_si256((const __m256i *)(b + 64 * n + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * n));
        /* 16-bit shifts are safe: every mask keeps bits that stay inside their byte. */
        __m256i q1 = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                     _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
        __m256i q2 = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                     _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
        __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                     _mm256_and_si256(qh, m30));
        __m256i q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                     _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
        st_q6k(y, _mm256_sub_epi8(q1, k32), d, sc);
        st_q6k(y + 32, _mm256_sub_epi8(q2, k32), d, sc + 2);
        st_q6k(y + 64, _mm256_sub_epi8(q3, k32), d, sc + 4);
        st_q6k(y + 96, _mm256_sub_epi8(q4, k32), d, sc + 6);
    }
}


/* 32 nibbles (bytes of q, 0..15 each) as d1 * q - m1, as st_q4k widens them, 8 at a time,
 * each folded into the mr accumulators of one weight row against x at xk. */
INL void fma_q4k32(int mr, __m256i q, __m256 d1, __m256 m1, const float *x, size_t ldx,
                   uint32_t xk, __m256 *acc)
{
    UNROLL for (int i = 0; i < 4; i++) {
        __m256 wv = u8x8_affine(quarter(q, i), d1, m1);
        UNROLL for (int m = 0; m < mr; m++) acc[m] = _mm256_fmadd_ps(
            wv, _mm256_loadu_ps(x + (size_t)m * ldx + xk + 8 * i), acc[m]);
    }
}

/*
 * Same over Q4_K (five_bit 0, K a multiple of 256) or Q5_K rows: values
 * widened exactly as widen_q4_k / widen_q5_k give them (the panel's bits), in
 * the panel's k order: per 64-value chunk, the low nibbles of its 32 bytes,
 * then the high ones (Q5_K: each with its fifth bit from qh).
 */
INL void tile_kq(int mr, int nr, int five_bit, const uint8_t *const *wr, const float *x,
                 size_t ldx, uint32_t K, float *y, size_t ldy, int accumulate, struct pf pf)
{
    __m256 acc[MR][NR], col[MR];
    UNROLL for (int m = 0; m < mr; m++) UNROLL for (int n = 0; n < nr; n++) acc[m][n] =
        _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const size_t bytes = five_bit ? RS_QUANT_Q5_K_BYTES : RS_QUANT_Q4_K_BYTES;
    for (uint32_t b = 0; b < K / 256; b++) {
        pf_lines(&pf.p, pf.end, pf.to_l2, nr == NR ? PF_LINES(bytes) : 0);
        UNROLL for (int n = 0; n < nr; n++) {
            const uint8_t *blk = wr[n] + (size_t)b * bytes;
            uint16_t h[2];
            memcpy(h, blk, 4);
            const float d = _cvtsh_ss(h[0]), dmin = _cvtsh_ss(h[1]);
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 16));
            UNROLL for (int m = 0; m < mr; m++) col[m] = acc[m][n];
            for (int j = 0; j < 4; j++) {
                __m256i q = _mm256_loadu_si256((const __m256i *)(blk + (five_bit ? 48 : 16) + 32 * j));
                for (int half = 0; half < 2; half++) {
                    uint8_t sc, mn;
                    rs_quant_k_scale_min(blk + 4, 2 * j + half, &sc, &mn);
                    __m256i v = five_bit ? q5k_values(q, qh, j, half)
                                : half   ? _mm256_and_si256(_mm256_srli_epi16(q, 4), m4)
                                         : _mm256_and_si256(q, m4);
                    fma_q4k32(mr, v, _mm256_set1_ps(d * sc), _mm256_set1_ps(dmin * mn), x, ldx,
                              b * 256 + 64 * j + 32 * half, col);
                }
            }
            UNROLL for (int m = 0; m < mr; m++) acc[m][n] = col[m];
        }
    }
    store_tile(mr, nr, acc, y, ldy, accumulate);
}

#define Q6K_BYTES RS_QUANT_Q6_K_BYTES

/* 32 signed 6-bit values (bytes of q, -32..31), 8 at a time times d * sc[g / 2] (exact, as
 * st_q6k widens them), each folded into the mr accumulators against x at xk. */
INL void fma_q6k32(int mr, __m256i q, float d, const int8_t *sc, const float *x, size_t ldx,
                   uint32_t xk, __m256 *acc)
{
    UNROLL for (int i = 0; i < 4; i++) {
        __m256 wv = i8x8(quarter(q, i), _mm256_set1_ps(d * (float)sc[i / 2]));
        UNROLL for (int m = 0; m < mr; m++) acc[m] = _mm256_fmadd_ps(
            wv, _mm256_loadu_ps(x + (size_t)m * ldx + xk + 8 * i), acc[m]);
    }
}

/*
 * Same over Q6_K rows (K a multiple of 256): each 128-value half's four
 * 32-value runs rebuilt from low nibbles and 2-bit highs exactly as
 * widen_q6_k does, in the panel's k order.
 */
INL void tile_q6k(int mr, int nr, const uint8_t *const *wr, const float *x, size_t ldx,
                  uint32_t K, float *y, size_t ldy, int accumulate, struct pf pf)
{
    __m256 acc[MR][NR], col[MR];
    UNROLL for (int m = 0; m < mr; m++) UNROLL for (int n = 0; n < nr; n++) acc[m][n] =
        _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    const __m256i m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
    for (uint32_t b = 0; b < K / 256; b++) {
        pf_lines(&pf.p, pf.end, pf.to_l2, nr == NR ? PF_LINES(Q6K_BYTES) : 0);
        UNROLL for (int n = 0; n < nr; n++) {
            const uint8_t *blk = wr[n] + (size_t)b * Q6K_BYTES;
            uint16_t dh;
            memcpy(&dh, blk + 208, 2);
            const float d = _cvtsh_ss(dh);
            const int8_t *sc = (const int8_t *)(blk + 192);
            UNROLL for (int m = 0; m < mr; m++) col[m] = acc[m][n];
            for (int h = 0; h < 2; h++, sc += 8) {
                __m256i l0 = _mm256_loadu_si256((const __m256i *)(blk + 64 * h));
                __m256i l1 = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32));
                __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
                const __m256i q[4] = {
                    _mm256_or_si256(_mm256_and_si256(l0, m4),
                                    _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4)),
                    _mm256_or_si256(_mm256_and_si256(l1, m4),
                                    _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                    _mm256_and_si256(qh, m30)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                    _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30))};
                for (int r = 0; r < 4; r++)
                    fma_q6k32(mr, _mm256_sub_epi8(q[r], k32), d, sc + 2 * r, x, ldx,
                              b * 256 + 128 * h + 32 * r, col);
            }
            UNROLL for (int m = 0; m < mr; m++) acc[m][n] = col[m];
        }
    }
    store_tile(mr, nr, acc, y, ldy, accumulate);
}

/* Row widening of each type into a panel (K values; F16/BF16 zero-pad to a multiple of 8). */
TGT static void row_q4_0(const uint8_t *src, uint32_t K, float *dst)
{
    for (uint32_t k = 0; k < K; k += RS_QUANT_Q4_0_BLOCK)
        widen_q4_0(src + (size_t)k / RS_QUANT_Q4_0_BLOCK * RS_QUANT_Q4_0_BYTES, dst + k);
}

TGT static void row_q4_k(const uint8_t *src, uint32_t K, float *dst)
{
    for (uint32_t k = 0; k < K; k += RS_QUANT_Q4_K_BLOCK)
        widen_q4_k(src + (size_t)k / RS_QUANT_Q4_K_BLOCK * RS_QUANT_Q4_K_BYTES, dst + k);
}

TGT static void row_q5_k(const uint8_t *src, uint32_t K, float *dst)
{
    for (uint32_t k = 0; k < K; k += RS_QUANT_Q5_K_BLOCK)
        widen_q5_k(src + (size_t)k / RS_QUANT_Q5_K_BLOCK * RS_QUANT_Q5_K_BYTES, dst + k);
}

TGT static void row_q6_k(const uint8_t *src, uint32_t K, float *dst)
{
    for (uint32_t k = 0; k < K; k += RS_QUANT_Q6_K_BLOCK)
        widen_q6_k(src + (size_t)k / RS_QUANT_Q6_K_BLOCK * RS_QUANT_Q6_K_BYTES, dst + k);
}

TGT static void row_q8_0(const uint8_t *src, uint32_t K, float *dst)
{
    for (uint32_t k = 0; k < K; k += RS_QUANT_Q8_0_BLOCK) {
        const uint8_t *blk = src + (size_t)(k / RS_QUANT_Q8_0_BLOCK) * Q8_BYTES;
        __m256 d = q8_scale(blk);
        for (int j = 0; j < 4; j++)
            _mm256_storeu_ps(dst + k + 8 * j, load_q8((const int8_t *)blk + 2 + 8 * j, d));
    }
}

TGT static void row_h16(const uint8_t *src, uint32_t K, float *dst, int bf16)
{
    const uint16_t *h = (const uint16_t *)src;
    uint32_t k = 0;
    for (; k + 8 <= K; k += 8)
        _mm256_storeu_ps(dst + k, bf16 ? load_bf16(h + k) : load_f16(h + k));
    if (k < K)
        _mm256_storeu_ps(dst + k, load_tail16(h + k, K - k, bf16));
}

TGT static void row_f16(const uint8_t *src, uint32_t K, float *dst)
{
    row_h16(src, K, dst, 0);
}

TGT static void row_bf16(const uint8_t *src, uint32_t K, float *dst)
{
    row_h16(src, K, dst, 1);
}

/* One type's AVX2 entry points: widening of a row (for panels), the register tiles of one
 * weight tile against rows [0, mrows) of x, and whether more than MR rows go through a
 * widened F32 panel (else register tiles at every batch size). */
struct avx2_type {
    enum rs_ggml_type type;
    void (*widen)(const uint8_t *src, uint32_t K, float *dst);
    void (*tiles)(int nr, const void *const *wr, const float *x, size_t ldx, uint32_t mrows,
                  uint32_t K, float *y, size_t ldy, int accumulate, struct pf pf);
    int panel;
};

/* Widens rows n .. n+nr-1 of w into panel rows of kpad floats (zero-padded). */
static void widen_rows(const struct avx2_type *t, const struct kern_mat *w, uint32_t n, int nr,
                       uint32_t kpad, float *panel)
{
    for (int r = 0; r < nr; r++)
        t->widen((const uint8_t *)w->data + (size_t)(n + r) * w->row_bytes, w->cols,
                 panel + (size_t)r * kpad);
}

/* The bytes of the weight tile after rows [n, n + NR) within the slice's end n1. */
static struct pf next_tile(const struct kern_mat *w, uint32_t n, uint32_t n1)
{
    struct pf f = {NULL, NULL, w->type == RS_GGML_F32};
    if (n + 2 * NR <= n1) {
        f.p = (const char *)w->data + (size_t)(n + NR) * w->row_bytes;
        f.end = f.p + NR * w->row_bytes;
    }
    return f;
}

/*
 * Every row tile of one weight tile (nr rows at wr) against rows [0, mrows) of x, one
 * function per type with its tile shapes inlined; the first row tile prefetches the next
 * weight tile.
 */
#define TILES_FN(NAME, TILE)                                                                     \
    TGT static void NAME(int nr, const void *const *wr, const float *x, size_t ldx,            \
                         uint32_t mrows, uint32_t K, float *y, size_t ldy, int accumulate,     \
                         struct pf pf)                                                          \
    {                                                                                            \
        const struct pf none = {NULL, NULL, 0};                                                  \
        uint32_t m = 0;                                                                          \
        if (nr == NR) {                                                                          \
            for (; m + MR <= mrows; m += MR)                                                     \
                TILE(MR, NR);                                                                    \
            if (mrows - m == 2)                                                                  \
                TILE(2, NR);                                                                     \
            else if (mrows - m == 1)                                                             \
                TILE(1, NR);                                                                     \
            return;                                                                              \
        }                                                                                        \
        for (; m + MR <= mrows; m += MR)                                                         \
            TILE(MR, 1);                                                                         \
        if (mrows - m == 2)                                                                      \
            TILE(2, 1);                                                                          \
        else if (mrows - m == 1)                                                                 \
            TILE(1, 1);                                                                          \
    }
/* the arguments every tile takes after its weight rows, at row tile m */
#define AT_M x + (size_t)m * ldx, ldx, K, y + (size_t)m * ldy, ldy, accumulate, m == 0 ? pf : none
#define WR8 (const uint8_t *const *)wr
#define WR16 (const uint16_t *const *)wr
#define T_Q8(M, N) tile_q8(M, N, WR8, AT_M)
#define T_Q4(M, N) tile_q4(M, N, WR8, AT_M)
#define T_Q4K(M, N) tile_kq(M, N, 0, WR8, AT_M)
#define T_Q5K(M, N) tile_kq(M, N, 1, WR8, AT_M)
#define T_Q6K(M, N) tile_q6k(M, N, WR8, AT_M)
#define T_F32(M, N) tile_f32(M, N, (const float *const *)wr, AT_M)
#define T_F16(M, N) tile_h16(M, N, 0, WR16, AT_M)
#define T_BF16(M, N) tile_h16(M, N, 1, WR16, AT_M)
TILES_FN(tiles_f32, T_F32)
TILES_FN(tiles_q8_0, T_Q8)
TILES_FN(tiles_q4_0, T_Q4)
TILES_FN(tiles_q4_k, T_Q4K)
TILES_FN(tiles_q5_k, T_Q5K)
TILES_FN(tiles_q6_k, T_Q6K)
TILES_FN(tiles_f16, T_F16)
TILES_FN(tiles_bf16, T_BF16)

/* F32 rows need no widening: a copy (the AVX-512 panel widens through this table too). */
static void row_f32(const uint8_t *src, uint32_t K, float *dst)
{
    memcpy(dst, src, (size_t)K * sizeof(float));
}

/* The AVX2 entry points of every type kernels.c's table gives this ISA. */
static const struct avx2_type avx2_types[] = {
    {RS_GGML_F32, row_f32, tiles_f32, 0},
    {RS_GGML_F16, row_f16, tiles_f16, 0},    {RS_GGML_BF16, row_bf16, tiles_bf16, 0},
    {RS_GGML_Q8_0, row_q8_0, tiles_q8_0, 1}, {RS_GGML_Q4_0, row_q4_0, tiles_q4_0, 1},
    {RS_GGML_Q4_K, row_q4_k, tiles_q4_k, 1}, {RS_GGML_Q5_K, row_q5_k, tiles_q5_k, 1},
    {RS_GGML_Q6_K, row_q6_k, tiles_q6_k, 1},
};

static const struct avx2_type *avx2_type_of(enum rs_ggml_type t)
{
    for (size_t i = 0; i < sizeof(avx2_types) / sizeof(avx2_types[0]); i++)
        if (avx2_types[i].type == t)
            return &avx2_types[i];
    return NULL;
}

/*
 * Blocks of m_block_rows activation rows (one when n_rows <= MR), each against every weight
 * tile of [n0, n1). With a panel (types that take one, more than MR rows) each weight tile
 * is widened to F32 once per block and run through F32's tiles (same bits as the type's
 * register tiles), its next tile's raw rows prefetched into L2: the widening otherwise
 * waits on them (profiled: 9% of a one-thread F16 prefill).
 */
static void gemm_tiles(const struct avx2_type *t, const struct kern_mat *w, const float *x,
                       size_t ldx, uint32_t n_rows, float *y, size_t ldy, uint32_t n0,
                       uint32_t n1, int accumulate, float *panel)
{
    const struct avx2_type *run = panel != NULL ? avx2_type_of(RS_GGML_F32) : t;
    uint32_t K = w->cols, kpad = (K + 7) & ~7u, mb = m_block_rows(K);
    for (uint32_t m0 = 0; m0 < n_rows; m0 += mb) {
        uint32_t mrows = n_rows - m0 < mb ? n_rows - m0 : mb;
        for (uint32_t n = n0; n < n1;) {
            int nr = n1 - n >= NR ? NR : 1;
            const void *wr[NR];
            if (panel != NULL)
                widen_rows(t, w, n, nr, kpad, panel);
            for (int r = 0; r < nr; r++)
                wr[r] = panel != NULL ? (const void *)(panel + (size_t)r * kpad)
                                      : (const uint8_t *)w->data + (size_t)(n + r) * w->row_bytes;
            struct pf f = next_tile(w, n, n1);
            f.to_l2 |= panel != NULL;
            run->tiles(nr, wr, x + (size_t)m0 * ldx, ldx, mrows, K, y + (size_t)m0 * ldy + n,
                       ldy, accumulate, f);
            n += (uint32_t)nr;
        }
    }
}

void kern_widen_row_avx2(const struct kern_mat *w, uint32_t row, float *dst)
{
    avx2_type_of(w->type)->widen((const uint8_t *)w->data + (size_t)row * w->row_bytes, w->cols,
                                 dst);
}

void kern_gemm_avx2(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                    float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate,
                    float *scratch)
{
    if (n_rows == 0 || n0 >= n1)
        return;
    /* every type was checked at load against kernels.c's table */
    const struct avx2_type *t = avx2_type_of(w->type);
    gemm_tiles(t, w, x, ldx, n_rows, y, ldy, n0, n1, accumulate,
               n_rows > MR && t->panel ? scratch : NULL);
}

#else /* not x86-64: kernels.c never selects these */

void kern_gemm_avx2(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                    float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate,
                    float *scratch)
{
    kern_gemm_portable(w, x, ldx, n_rows, y, ldy, n0, n1, accumulate, scratch);
}

void kern_widen_row_avx2(const struct kern_mat *w, uint32_t row, float *dst)
{
    kern_widen_row_portable(w, row, dst);
}

#endif

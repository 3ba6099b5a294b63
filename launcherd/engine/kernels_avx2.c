/* SPDX-License-Identifier: MIT */
/*
 * AVX2 + FMA + F16C kernels, compiled with target attributes so the binary
 * still runs on any x86-64 (kernels.c calls them only when the CPU has them).
 * GEMM: register tiles of up to 3 activation rows x 4 weight rows, 8 lanes
 * along K per accumulator, reduced by the fixed tree of kernels.h; weights
 * widened in registers up to 3 rows, else into a 4-row F32 panel all row
 * tiles reuse (same bits either way). Q4_0/Q4_K/Q6_K always use the panel.
 * Leaves out: AVX-512 (same FMA throughput on the Zen 4 this was tuned on).
 */
#include "launcherd/engine/kernels.h"

#include "common/quant.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TGT

#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 8")
#endif

#define MR 3 /* activation rows per register tile */
#define NR 4 /* weight rows per register tile */
#define Q8_BYTES 34
#define Q4_BYTES 18

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

/* Issues prefetches for lines [*p, *p + 64 n) below end; p lives in a register of the caller. */
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
        pf_lines(&pf.p, pf.end, pf.to_l2, nr == NR ? 3 : 0); /* 4 x 34 bytes per block */
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
        pf_lines(&pf.p, pf.end, pf.to_l2, nr == NR ? 2 : 0); /* 4 x 18 bytes per block */
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

/* One weight tile of nr rows (pointers wr) against rows [0, mrows) of x. */
#define F32_TILE_CASE(MR_, NR_)                                                                  \
    tile_f32(MR_, NR_, wr, x + (size_t)m * ldx, ldx, K, y + (size_t)m * ldy, ldy, accumulate,    \
             m == 0 ? pf : none)

TGT static void f32_tile_rows(const float *const *wr, int nr, const float *x, size_t ldx,
                              uint32_t mrows, uint32_t K, float *y, size_t ldy, int accumulate,
                              struct pf pf)
{
    struct pf none = {NULL, NULL, 0};
    uint32_t m = 0;
    if (nr == NR) {
        for (; m + MR <= mrows; m += MR)
            F32_TILE_CASE(MR, NR);
        if (mrows - m == 2)
            F32_TILE_CASE(2, NR);
        else if (mrows - m == 1)
            F32_TILE_CASE(1, NR);
        return;
    }
    for (; m + MR <= mrows; m += MR)
        F32_TILE_CASE(MR, 1);
    for (; m < mrows; m++)
        F32_TILE_CASE(1, 1);
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
    const size_t bytes = five_bit ? 176 : 144;
    for (uint32_t b = 0; b < K / 256; b++) {
        pf_lines(&pf.p, pf.end, pf.to_l2, nr == NR ? (five_bit ? 11 : 9) : 0); /* 4 blocks */
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

#define Q6K_BYTES 210

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
        pf_lines(&pf.p, pf.end, pf.to_l2, nr == NR ? 14 : 0); /* 4 x 210 bytes per block */
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

/* Row-at-a-time widening of the block types into panels (each also has a register path for
 * up to MR rows). */
TGT static void widen_blocks(enum rs_ggml_type type, const uint8_t *src, uint32_t K, float *dst)
{
    if (type == RS_GGML_Q4_0)
        for (uint32_t k = 0; k < K; k += 32)
            widen_q4_0(src + (size_t)k / 32 * 18, dst + k);
    else if (type == RS_GGML_Q4_K)
        for (uint32_t k = 0; k < K; k += 256)
            widen_q4_k(src + (size_t)k / 256 * 144, dst + k);
    else if (type == RS_GGML_Q5_K)
        for (uint32_t k = 0; k < K; k += 256)
            widen_q5_k(src + (size_t)k / 256 * 176, dst + k);
    else
        for (uint32_t k = 0; k < K; k += 256)
            widen_q6_k(src + (size_t)k / 256 * 210, dst + k);
}

static int is_block_type(enum rs_ggml_type t)
{
    return t == RS_GGML_Q4_0 || t == RS_GGML_Q4_K || t == RS_GGML_Q5_K || t == RS_GGML_Q6_K;
}

/* Widens rows n .. n+nr-1 of w into panel rows of kpad floats (zero-padded). */
TGT static void widen_rows(const struct kern_mat *w, uint32_t n, int nr, uint32_t kpad,
                           float *panel)
{
    uint32_t K = w->cols;
    for (int r = 0; r < nr; r++) {
        const uint8_t *src = (const uint8_t *)w->data + (size_t)(n + r) * w->row_bytes;
        float *dst = panel + (size_t)r * kpad;
        uint32_t k = 0;
        if (is_block_type(w->type)) {
            widen_blocks(w->type, src, K, dst);
        } else if (w->type == RS_GGML_Q8_0) {
            for (; k < K; k += 32) {
                const uint8_t *blk = src + (size_t)(k / 32) * Q8_BYTES;
                __m256 d = q8_scale(blk);
                for (int j = 0; j < 4; j++)
                    _mm256_storeu_ps(dst + k + 8 * j, load_q8((const int8_t *)blk + 2 + 8 * j, d));
            }
        } else {
            int bf16 = w->type == RS_GGML_BF16;
            const uint16_t *h = (const uint16_t *)src;
            for (; k + 8 <= K; k += 8)
                _mm256_storeu_ps(dst + k, bf16 ? load_bf16(h + k) : load_f16(h + k));
            if (k < K)
                _mm256_storeu_ps(dst + k, load_tail16(h + k, K - k, bf16));
        }
    }
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

static void gemm_f32(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                     float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate)
{
    uint32_t K = w->cols, mb = m_block_rows(K);
    for (uint32_t m0 = 0; m0 < n_rows; m0 += mb) {
        uint32_t mrows = n_rows - m0 < mb ? n_rows - m0 : mb;
        for (uint32_t n = n0; n < n1;) {
            int nr = n1 - n >= NR ? NR : 1;
            const float *wr[NR];
            for (int r = 0; r < nr; r++)
                wr[r] = (const float *)((const uint8_t *)w->data + (size_t)(n + r) * w->row_bytes);
            struct pf f = next_tile(w, n, n1);
            f32_tile_rows(wr, nr, x + (size_t)m0 * ldx, ldx, mrows, K, y + (size_t)m0 * ldy + n,
                          ldy, accumulate, f);
            n += (uint32_t)nr;
        }
    }
}

/* Widened panels: from 4 rows on, each widening is reused by every row tile. */
static void gemm_panel(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                       float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate,
                       float *panel)
{
    uint32_t K = w->cols, kpad = (K + 7) & ~7u, mb = m_block_rows(K);
    for (uint32_t m0 = 0; m0 < n_rows; m0 += mb) {
        uint32_t mrows = n_rows - m0 < mb ? n_rows - m0 : mb;
        for (uint32_t n = n0; n < n1;) {
            int nr = n1 - n >= NR ? NR : 1;
            widen_rows(w, n, nr, kpad, panel);
            const float *wr[NR];
            for (int r = 0; r < nr; r++)
                wr[r] = panel + (size_t)r * kpad;
            /* The next tile's raw rows, into L2 while this one computes: widen_rows
             * otherwise waits on them (profiled: 9% of a one-thread F16 prefill). */
            struct pf f = next_tile(w, n, n1);
            f.to_l2 = 1;
            f32_tile_rows(wr, nr, x + (size_t)m0 * ldx, ldx, mrows, K, y + (size_t)m0 * ldy + n,
                          ldy, accumulate, f);
            n += (uint32_t)nr;
        }
    }
}

/* Up to MR rows: widen in registers (no panel round trip; decode is bandwidth-bound). */
#define DIRECT_CASE(MR_, NR_)                                                                    \
    do {                                                                                         \
        if (w->type == RS_GGML_Q8_0)                                                             \
            tile_q8(MR_, NR_, (const uint8_t *const *)wr, x, ldx, K, yn, ldy, accumulate, f);   \
        else if (w->type == RS_GGML_Q4_0)                                                        \
            tile_q4(MR_, NR_, (const uint8_t *const *)wr, x, ldx, K, yn, ldy, accumulate, f);   \
        else if (w->type == RS_GGML_Q4_K) /* a constant five_bit: one inlined copy each */     \
            tile_kq(MR_, NR_, 0, (const uint8_t *const *)wr, x, ldx, K, yn, ldy, accumulate, f); \
        else if (w->type == RS_GGML_Q5_K)                                                        \
            tile_kq(MR_, NR_, 1, (const uint8_t *const *)wr, x, ldx, K, yn, ldy, accumulate, f); \
        else if (w->type == RS_GGML_Q6_K)                                                        \
            tile_q6k(MR_, NR_, (const uint8_t *const *)wr, x, ldx, K, yn, ldy, accumulate, f);  \
        else                                                                                     \
            tile_h16(MR_, NR_, w->type == RS_GGML_BF16, (const uint16_t *const *)wr, x, ldx, K,  \
                     yn, ldy, accumulate, f);                                                    \
    } while (0)

TGT static void gemm_direct(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                            float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate)
{
    uint32_t K = w->cols;
    for (uint32_t n = n0; n < n1;) {
        int nr = n1 - n >= NR ? NR : 1;
        const void *wr[NR];
        for (int r = 0; r < nr; r++)
            wr[r] = (const uint8_t *)w->data + (size_t)(n + r) * w->row_bytes;
        float *yn = y + n;
        struct pf f = next_tile(w, n, n1);
        if (nr == NR) {
            if (n_rows == 3)
                DIRECT_CASE(3, NR);
            else if (n_rows == 2)
                DIRECT_CASE(2, NR);
            else
                DIRECT_CASE(1, NR);
        } else {
            if (n_rows == 3)
                DIRECT_CASE(3, 1);
            else if (n_rows == 2)
                DIRECT_CASE(2, 1);
            else
                DIRECT_CASE(1, 1);
        }
        n += (uint32_t)nr;
    }
}

void kern_widen_row_avx2(const struct kern_mat *w, uint32_t row, float *dst)
{
    if (is_block_type(w->type))
        widen_blocks(w->type, (const uint8_t *)w->data + (size_t)row * w->row_bytes, w->cols, dst);
    else /* exact conversions: the same bits either way */
        kern_widen_row_portable(w, row, dst);
}

void kern_gemm_avx2(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                    float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate,
                    float *scratch)
{
    if (n_rows == 0 || n0 >= n1)
        return;
    if (w->type == RS_GGML_F32)
        gemm_f32(w, x, ldx, n_rows, y, ldy, n0, n1, accumulate);
    else if (n_rows <= MR)
        gemm_direct(w, x, ldx, n_rows, y, ldy, n0, n1, accumulate);
    else
        gemm_panel(w, x, ldx, n_rows, y, ldy, n0, n1, accumulate, scratch);
}

/* --- attention ------------------------------------------------------------ */

/* The 8-lane accumulator of dot(a, b) over n (kernels.h order), before the tree. */
INL __m256 dot_acc(const float *a, const float *b, uint32_t n)
{
    __m256 acc = _mm256_setzero_ps();
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    if (i < n) {
        __m256i mask = tail_mask(n - i);
        acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, mask), _mm256_maskload_ps(b + i, mask),
                              acc);
    }
    return acc;
}

/*
 * Four dot_acc at once, interleaved so the four FMA chains overlap (one
 * chain alone waits on FMA latency); each accumulator sees the same
 * operations dot_acc would give it.
 */
INL __m128 dot4(const float *q, const float *k, uint32_t hd)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const float *k1 = k + hd, *k2 = k1 + hd, *k3 = k2 + hd;
    uint32_t i = 0;
    for (; i + 8 <= hd; i += 8) {
        __m256 qv = _mm256_loadu_ps(q + i);
        a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + i), a0);
        a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k1 + i), a1);
        a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k2 + i), a2);
        a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k3 + i), a3);
    }
    if (i < hd) {
        __m256i mask = tail_mask(hd - i);
        __m256 qv = _mm256_maskload_ps(q + i, mask);
        a0 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k + i, mask), a0);
        a1 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k1 + i, mask), a1);
        a2 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k2 + i, mask), a2);
        a3 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k3 + i, mask), a3);
    }
    return hsum4(a0, a1, a2, a3);
}

/* Scores of query q against the n keys at k (rows of hd floats), 4 at a time through hsum4. */
INL void scores_block(const float *q, const float *k, uint32_t n, uint32_t hd, float scale,
                      float *out)
{
    uint32_t j = 0;
    __m128 sc = _mm_set1_ps(scale);
    for (; j + 4 <= n; j += 4)
        _mm_storeu_ps(out + j, _mm_mul_ps(dot4(q, k + (size_t)j * hd, hd), sc));
    for (; j < n; j++)
        out[j] = hsum1(dot_acc(q, k + (size_t)j * hd, hd)) * scale;
}

/*
 * e^x for 8 lanes: Cephes-style range reduction x = n ln2 + r, a degree-6
 * polynomial for e^r, then 2^n through the exponent bits. Within 1 ulp of
 * the correctly rounded e^x for x in [-87, 88] (measured on a 1e-4 grid);
 * below -88.37 it gives 0, above +88.37 it saturates near 2.4e38 (never inf).
 * One fixed function of x, so a lane's result never depends on its
 * neighbours or on where a tail was padded.
 */
INL __m256 exp8(__m256 x)
{
    x = _mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f));
    x = _mm256_max_ps(x, _mm256_set1_ps(-88.3762626647949f));
    __m256 fx = _mm256_floor_ps(
        _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), x);
    y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
    __m256i n = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(n));
}

/* Loads lanes [0, n) of p (n < 8), the rest `fill`. */
INL __m256 load_part(const float *p, uint32_t n, float fill)
{
    float t[8] = {fill, fill, fill, fill, fill, fill, fill, fill};
    memcpy(t, p, n * sizeof(float));
    return _mm256_loadu_ps(t);
}

INL void store_part(float *p, __m256 v, uint32_t n)
{
    float t[8];
    _mm256_storeu_ps(t, v);
    memcpy(p, t, n * sizeof(float));
}

/* Softmax of s[0..n) in place; the sum runs in 8 position-strided lanes and the fixed tree. */
TGT static void softmax8(float *s, uint32_t n)
{
    __m256 mx = _mm256_set1_ps(-INFINITY);
    uint32_t t = 0;
    for (; t + 8 <= n; t += 8)
        mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + t));
    if (t < n)
        mx = _mm256_max_ps(mx, load_part(s + t, n - t, -INFINITY));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    __m256 m = _mm256_broadcastss_ps(m4), sum = _mm256_setzero_ps();
    for (t = 0; t + 8 <= n; t += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t), m));
        _mm256_storeu_ps(s + t, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (t < n) { /* padded lanes hold max - max = 0 -> 1; masked out of the sum */
        __m256 e = exp8(_mm256_sub_ps(load_part(s + t, n - t, 0.0f), m));
        store_part(s + t, e, n - t);
        sum = _mm256_add_ps(sum, _mm256_and_ps(e, _mm256_castsi256_ps(tail_mask(n - t))));
    }
    __m256 inv = _mm256_set1_ps(1.0f / hsum1(sum));
    for (t = 0; t + 8 <= n; t += 8)
        _mm256_storeu_ps(s + t, _mm256_mul_ps(_mm256_loadu_ps(s + t), inv));
    for (; t < n; t++)
        s[t] *= _mm256_cvtss_f32(inv);
}

TGT void kern_swiglu_avx2(float *g, const float *u, uint32_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(g + i);
        __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v));
        __m256 silu = _mm256_div_ps(v, _mm256_add_ps(one, e));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
    }
    if (i < n) {
        __m256 v = load_part(g + i, n - i, 0.0f);
        __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v));
        __m256 r = _mm256_mul_ps(_mm256_div_ps(v, _mm256_add_ps(one, e)), load_part(u + i, n - i, 0));
        store_part(g + i, r, n - i);
    }
}

/*
 * out[0..8*nv) = sum over t of p[t] * v_t, v_t at the paged positions; each
 * element accumulates in position order in a register (nv <= 8 vectors).
 */
INL void pv_chunk(const struct kern_kv_layout *kv, const uint32_t *table, size_t off,
                  uint32_t n_pos, const float *p, int nv, float *out)
{
    __m256 acc[8];
    UNROLL for (int j = 0; j < 8; j++) acc[j] = _mm256_setzero_ps();
    uint32_t bs = kv->block_size, hd = kv->head_dim;
    for (uint32_t t0 = 0; t0 < n_pos; t0 += bs) {
        const float *v = kv->v + table[t0 / bs] * kv->block_stride + off;
        uint32_t n = n_pos - t0 < bs ? n_pos - t0 : bs;
        for (uint32_t t = 0; t < n; t++, v += hd) {
            __m256 pt = _mm256_set1_ps(p[t0 + t]);
            UNROLL for (int j = 0; j < 8; j++) if (j < nv) acc[j] =
                _mm256_fmadd_ps(pt, _mm256_loadu_ps(v + 8 * j), acc[j]);
        }
    }
    UNROLL for (int j = 0; j < 8; j++) if (j < nv) _mm256_storeu_ps(out + 8 * j, acc[j]);
}

/* The same for the last hd % 8 elements, one scalar FMA chain each. */
static void pv_tail(const struct kern_kv_layout *kv, const uint32_t *table, size_t off,
                    uint32_t n_pos, const float *p, uint32_t n_el, float *out)
{
    uint32_t bs = kv->block_size;
    for (uint32_t i = 0; i < n_el; i++) {
        float acc = 0.0f;
        for (uint32_t t = 0; t < n_pos; t++)
            acc = fmaf(p[t], kv->v[table[t / bs] * kv->block_stride + off +
                                   (size_t)(t % bs) * kv->head_dim + i],
                       acc);
        out[i] = acc;
    }
}

TGT void kern_attention_avx2(const struct kern_kv_layout *kv, const uint32_t *table,
                             uint32_t kv_head, uint32_t n_group, uint32_t n_pos, float scale,
                             const float *q, float *scores, float *out)
{
    uint32_t hd = kv->head_dim, bs = kv->block_size;
    size_t head_off = (size_t)kv_head * bs * hd;
    for (uint32_t t0 = 0; t0 < n_pos; t0 += bs) {
        const float *k = kv->k + table[t0 / bs] * kv->block_stride + head_off;
        uint32_t n = n_pos - t0 < bs ? n_pos - t0 : bs;
        for (uint32_t g = 0; g < n_group; g++)
            scores_block(q + (size_t)g * hd, k, n, hd, scale, scores + (size_t)g * n_pos + t0);
    }
    for (uint32_t g = 0; g < n_group; g++) {
        const float *p = scores + (size_t)g * n_pos;
        float *o = out + (size_t)g * hd;
        softmax8(scores + (size_t)g * n_pos, n_pos);
        uint32_t d = 0;
        for (; d + 64 <= hd; d += 64)
            pv_chunk(kv, table, head_off + d, n_pos, p, 8, o + d);
        if (hd - d >= 8)
            pv_chunk(kv, table, head_off + d, n_pos, p, (int)((hd - d) / 8), o + d);
        d += (hd - d) / 8 * 8;
        if (d < hd)
            pv_tail(kv, table, head_off + d, n_pos, p, hd - d, o + d);
    }
}

#else /* not x86-64: kernels.c never selects these */

void kern_gemm_avx2(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                    float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate,
                    float *scratch)
{
    kern_gemm_portable(w, x, ldx, n_rows, y, ldy, n0, n1, accumulate, scratch);
}

void kern_attention_avx2(const struct kern_kv_layout *kv, const uint32_t *table,
                         uint32_t kv_head, uint32_t n_group, uint32_t n_pos, float scale,
                         const float *q, float *scores, float *out)
{
    kern_attention_portable(kv, table, kv_head, n_group, n_pos, scale, q, scores, out);
}

void kern_swiglu_avx2(float *g, const float *u, uint32_t n)
{
    kern_swiglu_portable(g, u, n);
}

void kern_widen_row_avx2(const struct kern_mat *w, uint32_t row, float *dst)
{
    kern_widen_row_portable(w, row, dst);
}

#endif

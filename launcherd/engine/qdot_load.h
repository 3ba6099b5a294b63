/* SPDX-License-Identifier: MIT */
/*
 * In-register unpacking of quantized weight blocks, 8 activation blocks (one
 * group) at a time, into exactly the levels, multipliers and scales qdot.c's
 * unpackers write (integer work and the same float conversions). Shared by
 * the row dots (qdot_simd.h) and the AVX-512 panel GEMM (qdot_panel.c); the
 * includer defines QD_TGT, its target attribute.
 */
#ifndef RS_ENGINE_QDOT_LOAD_H
#define RS_ENGINE_QDOT_LOAD_H

#include <immintrin.h>
#include <string.h>

#include "common/quant.h"

#define QD_INL static inline __attribute__((always_inline)) QD_TGT
#if defined(__clang__)
#define QD_UNROLL _Pragma("clang loop unroll(full)")
#else
#define QD_UNROLL _Pragma("GCC unroll 8")
#endif

/* One group of 8 weight blocks as qdot.h's kq_wrow holds them. */
struct qd_group {
    __m256i q[8], sc[8];
    __m256 ws;     /* Q8_0, Q4_0: each block's scale */
    float d, dmin; /* K-quants: the super-block's scale and offset scale */
    __m256i mi;    /* K-quants: each block's integer offset, int32 lanes (Q4_K/Q5_K's m; 0 for
                      Q6_K), built in a register: an array stored in parts and read back whole
                      waits for the stores to drain (no forwarding) */
};

/* Multipliers [s[a] x8 | s[b] x8] (the maddubs lane order) from 8 int16 in both lanes of s. */
QD_INL __m256i qd_pick2(__m256i s, int a, int b)
{
    return _mm256_shuffle_epi8(s, _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 + 0x0202 * b)),
                                                   _mm_set1_epi16((short)(0x0100 + 0x0202 * a))));
}

/* 8 int16 in both 128-bit lanes. */
QD_INL __m256i qd_both_lanes(__m128i v)
{
    return _mm256_broadcastsi128_si256(v);
}

/* 8 fp16 values as floats, inserted one by one into a register: on Zen 3 a gather of the 8
 * took a quarter of a Q4_0 decode's time, and 8 2-byte stores read back as one 16-byte load do
 * not forward and stall (perf). */
QD_INL __m256 qd_halves8(const uint16_t h[8])
{
    __m128i v = _mm_cvtsi32_si128(h[0]);
    v = _mm_insert_epi16(v, h[1], 1), v = _mm_insert_epi16(v, h[2], 2);
    v = _mm_insert_epi16(v, h[3], 3), v = _mm_insert_epi16(v, h[4], 4);
    v = _mm_insert_epi16(v, h[5], 5), v = _mm_insert_epi16(v, h[6], 6);
    v = _mm_insert_epi16(v, h[7], 7);
    return _mm256_cvtph_ps(v);
}

/* The fp16 scale at the start of each of the group's n (<= 8) blocks of `bytes`; +0 past n. */
QD_INL __m256 qd_halves(const uint8_t *p, size_t bytes, int n)
{
    uint16_t h[8];
    QD_UNROLL for (int i = 0; i < 8; i++) {
        h[i] = 0;
        if (i < n)
            memcpy(&h[i], p + (size_t)i * bytes, 2);
    }
    return qd_halves8(h);
}

/*
 * Block j of a group, one at a time: the row dots fuse each block's unpacking
 * into its use (a whole group does not fit in the 16 registers, and spilled
 * it is read back from the stack), the loaders below gather all 8.
 */

/* Blocks in group g of a row of nb blocks (the last group may be short). */
QD_INL int qd_group_blocks(uint32_t g, uint32_t nb)
{
    return nb - 8 * g < 8 ? (int)(nb - 8 * g) : 8;
}

/* Q8_0 levels of block j at p (the group's first block; step bytes after block 0); zero from
 * block n on. */
QD_INL __m256i qd_q8_0_block(const uint8_t *p, size_t step, int j, int n)
{
    return j < n ? _mm256_loadu_si256((const __m256i *)(p + (size_t)j * step + 2))
                 : _mm256_setzero_si256();
}

/* Q4_0 nibbles (level + 8) of block j (step bytes after block 0): values 0-15 the low ones,
 * 16-31 the high. */
QD_INL __m256i qd_q4_0_nibbles(const uint8_t *p, size_t step, int j, int n)
{
    if (j >= n)
        return _mm256_setzero_si256();
    const __m128i m4 = _mm_set1_epi8(15);
    __m128i b = _mm_loadu_si128((const __m128i *)(p + (size_t)j * step + 2));
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m4), _mm_and_si128(b, m4));
}

/* Q4_K / Q5_K levels of block j (0..7): chunk j / 2's low (even j) or high nibbles, and for
 * Q5_K bit j of each high byte (at blk + 16) as 16 (16-bit shifts are safe: the mask keeps
 * bit 4 of each byte, which only that byte's bit j reaches). */
QD_INL __m256i qd_kq_block(const uint8_t *blk, int j, int five_bit)
{
    const __m256i m4 = _mm256_set1_epi8(15);
    const uint8_t *ql = blk + (five_bit ? 48 : 16);
    __m256i q = _mm256_loadu_si256((const __m256i *)(ql + 32 * (j / 2)));
    __m256i v = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(q, 4) : q, m4);
    if (five_bit) { /* bit j moved straight to bit 4: one shift, not two (none for j = 4) */
        __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 16));
        __m256i b = j < 4   ? _mm256_slli_epi16(qh, 4 - j)
                    : j > 4 ? _mm256_srli_epi16(qh, j - 4)
                            : qh;
        v = _mm256_or_si256(v, _mm256_and_si256(b, _mm256_set1_epi8(16)));
    }
    return v;
}

/* Q4_K / Q5_K: the 8 block multipliers as int16 in both lanes (for qd_pick2), the offsets. */
QD_INL __m256i qd_kq_scales(const uint8_t *blk, __m256i *mi)
{
    uint64_t sc8, m8;
    rs_quant_k_scales8(blk + 4, &sc8, &m8);
    *mi = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m8));
    return qd_both_lanes(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc8)));
}

/* Q6_K levels of block j = 4h + r plus 32 (0..63, never negative): run r of half h (16-bit
 * shifts are safe: every mask keeps bits that stay inside their byte). */
QD_INL __m256i qd_q6_block_u(const uint8_t *blk, int j)
{
    const int h = j / 4, r = j % 4;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256i l = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32 * (r & 1)));
    __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
    __m256i lo = _mm256_and_si256(r < 2 ? l : _mm256_srli_epi16(l, 4), m4);
    __m256i hi = r == 0   ? _mm256_slli_epi16(qh, 4)
                 : r == 1 ? _mm256_slli_epi16(qh, 2)
                 : r == 2 ? qh
                          : _mm256_srli_epi16(qh, 2);
    return _mm256_or_si256(lo, _mm256_and_si256(hi, m30));
}

/* Q6_K levels of block j (-32..31). */
QD_INL __m256i qd_q6_block(const uint8_t *blk, int j)
{
    return _mm256_sub_epi8(qd_q6_block_u(blk, j), _mm256_set1_epi8(32));
}

/* Q6_K: the multipliers of half h's 8 sub-blocks as int16 in both lanes. */
QD_INL __m256i qd_q6_scales(const uint8_t *blk, int h)
{
    return qd_both_lanes(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(blk + 192 + 8 * h))));
}

/* Q6_K: the multipliers of all 16 sub-blocks as int16, in order. */
QD_INL __m256i qd_q6_scales16(const uint8_t *blk)
{
    return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192)));
}

QD_INL float qd_half_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Q8_0 / Q4_0: blocks 8g .. 8g + 7, step bytes apart (those past nb zero, as the padding). */
QD_INL void qd_load_q8_0(const uint8_t *row, size_t step, uint32_t g, uint32_t nb,
                         struct qd_group *o)
{
    int n = qd_group_blocks(g, nb);
    const uint8_t *p = row + (size_t)8 * g * step;
    QD_UNROLL for (int j = 0; j < 8; j++) {
        o->q[j] = qd_q8_0_block(p, step, j, n);
        o->sc[j] = _mm256_set1_epi16(1); /* padding blocks are zero levels */
    }
    o->ws = qd_halves(p, step, n);
    o->d = o->dmin = 0.0f, o->mi = _mm256_setzero_si256(); /* every field set: no type reads junk */
}

QD_INL void qd_load_q4_0(const uint8_t *row, size_t step, uint32_t g, uint32_t nb,
                         struct qd_group *o)
{
    int n = qd_group_blocks(g, nb);
    const uint8_t *p = row + (size_t)8 * g * step;
    QD_UNROLL for (int j = 0; j < 8; j++) {
        __m256i nib = qd_q4_0_nibbles(p, step, j, n);
        o->q[j] = j < n ? _mm256_sub_epi8(nib, _mm256_set1_epi8(8)) : nib;
        o->sc[j] = _mm256_set1_epi16(1);
    }
    o->ws = qd_halves(p, step, n);
    o->d = o->dmin = 0.0f, o->mi = _mm256_setzero_si256();
}

/* Q4_K / Q5_K super-block g (step bytes after super-block 0). */
QD_INL void qd_load_kq(const uint8_t *row, size_t step, uint32_t g, struct qd_group *o,
                       int five_bit)
{
    const uint8_t *blk = row + (size_t)g * step;
    o->d = qd_half_at(blk), o->dmin = qd_half_at(blk + 2);
    __m256i s16 = qd_kq_scales(blk, &o->mi);
    QD_UNROLL for (int j = 0; j < 8; j++) {
        o->q[j] = qd_kq_block(blk, j, five_bit);
        o->sc[j] = qd_pick2(s16, j, j);
    }
    o->ws = _mm256_setzero_ps();
}

/* Q6_K super-block g (step bytes after super-block 0): run r of half h is block 4h + r. */
QD_INL void qd_load_q6_k(const uint8_t *row, size_t step, uint32_t g, struct qd_group *o)
{
    const uint8_t *blk = row + (size_t)g * step;
    QD_UNROLL for (int h = 0; h < 2; h++) {
        __m256i s16 = qd_q6_scales(blk, h);
        QD_UNROLL for (int r = 0; r < 4; r++) {
            o->q[4 * h + r] = qd_q6_block(blk, 4 * h + r);
            o->sc[4 * h + r] = qd_pick2(s16, 2 * r, 2 * r + 1);
        }
    }
    o->d = qd_half_at(blk + 208), o->dmin = 0.0f;
    o->mi = _mm256_setzero_si256(), o->ws = _mm256_setzero_ps();
}

#endif

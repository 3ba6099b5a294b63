/* SPDX-License-Identifier: MIT */
/*
 * The integer dot of qdot.h in 256-bit registers, written once for the two
 * x86 variants that include it: qdot_avx2.c (vpmaddubsw + vpmaddwd) and
 * qdot_vnni.c (vpdpbusd). The includer defines QD_TGT (target attribute),
 * QD_PREFIX(name) (its function names) and QD_BLOCK_SUM(wabs, xs, sc): eight
 * int32 whose total is a block's isum. Weight blocks are unpacked in
 * registers (qdot_load.h), each where it is used, into exactly the levels,
 * multipliers and scales qdot.c's unpackers write (integer work, and the same
 * float conversions); the float step is the portable dot's, term for term,
 * with no contraction. So every variant gives the portable bits.
 * Profiled (perf, batch-1 decode, 2-core Zen 3) and fixed: a whole 8-block
 * group unpacked at once spilled from the 16 registers and was read back from
 * the stack (so one row, and every K-quant row, unpacks block by block, later
 * rows reading the bytes from L1); the accumulator made a round trip through
 * memory per group (one row keeps it in a register); the fp16 scales, stored
 * in halves and read back whole, failed store forwarding (now inserted from
 * scalar loads: a gather was slower still); the first loads of each block
 * waited on DRAM (the stream is prefetched QD_PF_AHEAD bytes ahead). The
 * unsigned operand needs no sign work where the levels are never negative
 * (Q4_K, Q5_K; Q4_0 as nibbles, its 8 x sum(x) taken off in int32; Q6_K as
 * level + 32, its 32 x sum of multiplier x 16-level sum of x taken off per
 * super-block: a quarter fewer instructions than the sign fix per block, and
 * the same integer sums).
 */
#include "launcherd/engine/qdot_load.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Lane j of the result is the total of v[j]'s eight lanes (integer: any order is exact). */
QD_INL __m256i qd_hsum8(const __m256i v[8])
{
    __m256i a = _mm256_hadd_epi32(v[0], v[1]), b = _mm256_hadd_epi32(v[2], v[3]);
    __m256i c = _mm256_hadd_epi32(v[4], v[5]), d = _mm256_hadd_epi32(v[6], v[7]);
    __m256i ab = _mm256_hadd_epi32(a, b), cd = _mm256_hadd_epi32(c, d);
    return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20),
                            _mm256_permute2x128_si256(ab, cd, 0x31));
}

/* The total of 8 int32 lanes. */
QD_INL int32_t qd_hsum(__m256i v)
{
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(h);
}

/*
 * A row dot reads one short stream, and the hardware prefetcher left the
 * first loads of every block waiting on DRAM. Prefetches never fault and
 * never change results.
 */
#define QD_PF_AHEAD 2048

QD_INL void qd_prefetch(const uint8_t *p, size_t len)
{
    for (size_t off = 0; off < len; off += 64)
        _mm_prefetch((const char *)p + QD_PF_AHEAD + off, _MM_HINT_T0);
}

/* The 8 block terms of group g of row x (block sums v, weight scales ws) added to a in block
 * order (the padding's terms are +0, which leaves a sum that started at +0 unchanged). */
QD_INL float qd_group_tail(const __m256i v[8], __m256 ws, int q4, const struct kq_act *x,
                           uint32_t g, float a)
{
    __m256i isum = qd_hsum8(v);
    if (q4) /* (nibble - 8) . x = nibble . x - 8 sum(x) */
        isum = _mm256_sub_epi32(
            isum, _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(x->s + 8 * g)), 3));
    __m256 dx = _mm256_loadu_ps(x->d + 8 * g);
    float t[8];
    _mm256_storeu_ps(t, _mm256_mul_ps(_mm256_mul_ps(ws, dx), _mm256_cvtepi32_ps(isum)));
    QD_UNROLL for (int j = 0; j < 8; j++)
        a = a + t[j];
    return a;
}

/* Q8_0 / Q4_0 group g (n blocks at p, scales ws) of row x, each block unpacked where it is
 * used (rows after the first read the bytes from L1: a whole unpacked group spills). */
QD_INL float qd_group_term(const uint8_t *p, int n, __m256 ws, int q4, const struct kq_act *x,
                           uint32_t g, float a)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i v[8];
    QD_UNROLL for (int j = 0; j < 8; j++) {
        __m256i xq = _mm256_loadu_si256((const __m256i *)(x->q + 32 * (8 * g + j)));
        if (q4) {
            v[j] = QD_BLOCK_SUM(qd_q4_0_nibbles(p, RS_QUANT_Q4_0_BYTES, j, n), xq, ones);
        } else {
            __m256i q = qd_q8_0_block(p, RS_QUANT_Q8_0_BYTES, j, n);
            v[j] = QD_BLOCK_SUM(_mm256_sign_epi8(q, q), _mm256_sign_epi8(xq, q), ones);
        }
    }
    return qd_group_tail(v, ws, q4, x, g, a);
}

/* K-quants: super-block g of row x, its integer sums (v: the blocks', mi: the offsets) as one
 * float term added to acc. offs: the type has offsets. */
QD_INL float qd_super_tail(__m256i v, float d, float dmin, __m256i mi, int offs,
                           const struct kq_act *x, uint32_t g, float acc)
{
    int32_t isum = qd_hsum(v);
    int32_t msum = offs ? qd_hsum(_mm256_mullo_epi32(
                              mi, _mm256_loadu_si256((const __m256i *)(x->s + 8 * g))))
                        : 0; /* Q6_K: mi is 0, so is its sum, and dmin is 0 */
    float dx = x->d[8 * g];
    return acc + (((d * dx) * (float)isum) - ((dmin * dx) * (float)msum));
}

/* The integer sums of super-block blk (kind 4: Q4_K, 5: Q5_K, 6: Q6_K) against row x's
 * super-block g: the blocks' (8 lanes to add up), and in *mi the offsets (0 for Q6_K). Each
 * block is unpacked where it is used (rows after the first read the bytes from L1:
 * re-unpacking costs less than a whole unpacked group spilled from the 16 registers). */
QD_INL __m256i qd_super_isum(const uint8_t *blk, int kind, const struct kq_act *x, uint32_t g,
                             __m256i *mi)
{
    __m256i v[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    __m256i s16[2];
    *mi = _mm256_setzero_si256();
    if (kind == 6)
        s16[0] = qd_q6_scales(blk, 0), s16[1] = qd_q6_scales(blk, 1);
    else
        s16[0] = s16[1] = qd_kq_scales(blk, mi);
    QD_UNROLL for (int j = 0; j < 8; j++) {
        __m256i xq = _mm256_loadu_si256((const __m256i *)(x->q + 32 * (8 * g + j)));
        __m256i p;
        if (kind == 6) /* levels + 32: unsigned, no sign fix (the offset comes off below) */
            p = QD_BLOCK_SUM(qd_q6_block_u(blk, j), xq,
                             qd_pick2(s16[j / 4], 2 * (j % 4), 2 * (j % 4) + 1));
        else
            p = QD_BLOCK_SUM(qd_kq_block(blk, j, kind == 5), xq, qd_pick2(s16[0], j, j));
        v[j & 1] = _mm256_add_epi32(v[j & 1], p);
    }
    __m256i sum = _mm256_add_epi32(v[0], v[1]);
    if (kind == 6) { /* sum (q - 32) sc x = sum q sc x - 32 sum_i sc_i (x's 16-level sum i) */
        __m256i c = _mm256_madd_epi16(qd_q6_scales16(blk),
                                      _mm256_loadu_si256((const __m256i *)(x->h + 16 * g)));
        sum = _mm256_sub_epi32(sum, _mm256_slli_epi32(c, 5));
    }
    return sum;
}

/* The super-block's scale and offset scale (Q6_K: none, 0). */
QD_INL const uint8_t *qd_super_d(const uint8_t *blk, int kind)
{
    return blk + (kind == 6 ? 208 : 0);
}

/* Super-block g of row x straight from the row's bytes, as one float term added to acc. */
QD_INL float qd_super_term1(const uint8_t *blk, int kind, const struct kq_act *x, uint32_t g,
                            float acc)
{
    __m256i mi, v = qd_super_isum(blk, kind, x, g, &mi);
    float d = qd_half_at(qd_super_d(blk, kind)), dmin = kind == 6 ? 0.0f : qd_half_at(blk + 2);
    return qd_super_tail(v, d, dmin, mi, kind != 6, x, g, acc);
}

/* Q8_0 (q4 = 0) / Q4_0 (q4 = 1) row against n activation rows. One row has a loop of its own:
 * sharing the many-row loop, gcc kept its sum on the stack, a store and a load on the chain of
 * 8 in-order adds per group (perf, one-thread Q4_0 decode). */
QD_INL void qd_blocks_dot(const uint8_t *row, const struct kq_act *const *x, int n, uint32_t K,
                          int q4, float *out)
{
    const size_t bytes = q4 ? RS_QUANT_Q4_0_BYTES : RS_QUANT_Q8_0_BYTES;
    uint32_t nb = K / KQ_BLOCK, ng = kq_padded_blocks(K) / 8;
    float acc[KQ_DOT_ROWS] = {0}, a = 0.0f;
    if (n == 1) {
        for (uint32_t g = 0; g < ng; g++) {
            const uint8_t *p = row + (size_t)8 * g * bytes;
            int nbg = qd_group_blocks(g, nb);
            qd_prefetch(p, 8 * bytes);
            a = qd_group_term(p, nbg, qd_halves(p, bytes, nbg), q4, x[0], g, a);
        }
        out[0] = a;
        return;
    }
    for (uint32_t g = 0; g < ng; g++) {
        const uint8_t *p = row + (size_t)8 * g * bytes;
        int nbg = qd_group_blocks(g, nb);
        qd_prefetch(p, 8 * bytes);
        __m256 ws = qd_halves(p, bytes, nbg);
        for (int m = 0; m < n; m++)
            acc[m] = qd_group_term(p, nbg, ws, q4, x[m], g, acc[m]);
    }
    for (int m = 0; m < n; m++)
        out[m] = acc[m];
}

/*
 * Q4_0: 8 weight rows (plain or interleaved, qdot.h) against one activation row. One
 * register holds two rows' 16 bytes (a 128-bit half each), so each nibble
 * split and each multiply serves two rows against the activations' low or
 * high 16 levels, broadcast to both halves: QD_HALVES_SUM leaves a row's four
 * partial sums in its half. Three horizontal adds then give the 8 rows'
 * block sums in the lane order rows 0 2 4 6 | 1 3 5 7 (hadd interleaves its
 * operands within each half); the scales are loaded in that order and the
 * result unpermuted once at the end. Lane r adds its term (ws * dx) * isum in
 * block order: the one-row dot's terms in its order, so its bits, with one
 * vector add per block where the one-row dot spends 8 scalar adds and the
 * lane extractions per 8 blocks (perf of one-thread Q4_0 decode:
 * instruction-bound, not bound by the adds' latency). The padding blocks'
 * +0 terms are skipped (qdot.h). Q8_0 has its own, over interleaved rows only.
 */
QD_TGT static void QD_PREFIX(q4_0_rows8)(const uint8_t *row, size_t row_step,
                                         size_t block_step, const struct kq_act *x, uint32_t K,
                                         float *out)
{
    const uint32_t pf_every = 64 / RS_QUANT_Q4_0_BYTES; /* blocks per cache line, at least */
    const int interleaved = block_step > row_step;
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps();
    for (uint32_t b = 0; b < K / KQ_BLOCK; b++) {
        const uint8_t *p = row + (size_t)b * block_step;
        if (interleaved) /* one stream: its lines a fixed distance ahead */
            QD_UNROLL for (int l = 0; l < 3; l++)
                _mm_prefetch((const char *)p + QD_PF_AHEAD + 64 * l, _MM_HINT_T0);
        else if (b % pf_every == 0) /* the next 8 rows' same spot: 8 interleaved streams are
                                       more than the hardware prefetcher follows, and 2 KB
                                       ahead would land inside this group */
            QD_UNROLL for (int r = 8; r < 16; r++)
                _mm_prefetch((const char *)p + (size_t)r * row_step, _MM_HINT_T0);
        const __m128i *xb = (const __m128i *)(x->q + 32 * (size_t)b);
        __m256i xlo = _mm256_broadcastsi128_si256(_mm_loadu_si128(xb));
        __m256i xhi = _mm256_broadcastsi128_si256(_mm_loadu_si128(xb + 1));
        __m256i v[4];
        QD_UNROLL for (int k = 0; k < 4; k++) {
            const uint8_t *r0 = p + (size_t)(2 * k) * row_step + 2;
            __m256i w = _mm256_loadu2_m128i((const __m128i *)(r0 + row_step), (const __m128i *)r0);
            v[k] = QD_HALVES_SUM(_mm256_and_si256(w, m4), xlo,
                                 _mm256_and_si256(_mm256_srli_epi16(w, 4), m4), xhi);
        }
        /* rows 0 2 4 6 | 1 3 5 7: hadd interleaves its operands within each half */
        __m256i sums = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]),
                                         _mm256_hadd_epi32(v[2], v[3]));
        /* (nibble - 8) . x = nibble . x - 8 sum(x) */
        __m256i isum = _mm256_sub_epi32(sums, _mm256_set1_epi32(8 * x->s[b]));
        uint16_t h[8]; /* the scales in the same lane order */
        QD_UNROLL for (int i = 0; i < 8; i++)
            memcpy(&h[i], p + (size_t)(i < 4 ? 2 * i : 2 * i - 7) * row_step, 2);
        __m256 ws = qd_halves8(h);
        __m256 s = _mm256_mul_ps(ws, _mm256_set1_ps(x->d[b]));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(s, _mm256_cvtepi32_ps(isum)));
    }
    /* row r is in lane r / 2 (even r) or 4 + r / 2 (odd r) */
    _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(acc, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/*
 * Q8_0: 8 weight rows against one activation row, over interleaved rows (its
 * one-row dot stays for plain ones: 8 streams cost it more than the adds
 * saved). Per block, each row's sign-fixed products; one horizontal-add tree
 * gives the 8 rows' block sums in lane order, and lane r adds (ws * dx) * isum
 * in block order: the one-row dot's terms in its order, so its bits.
 */
QD_TGT static void QD_PREFIX(q8_0_rows8)(const uint8_t *row, size_t row_step,
                                         size_t block_step, const struct kq_act *x, uint32_t K,
                                         float *out)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (uint32_t b = 0; b < K / KQ_BLOCK; b++) {
        const uint8_t *p = row + (size_t)b * block_step;
        QD_UNROLL for (int l = 0; l < 5; l++) /* 8 blocks, 272 bytes: one stream, a fixed
                                                  distance ahead */
            _mm_prefetch((const char *)p + QD_PF_AHEAD + 64 * l, _MM_HINT_T0);
        __m256i xq = _mm256_loadu_si256((const __m256i *)(x->q + 32 * (size_t)b));
        __m256i v[8];
        uint16_t h[8];
        QD_UNROLL for (int r = 0; r < 8; r++) {
            __m256i q = qd_q8_0_block(p + (size_t)r * row_step, 0, 0, 1);
            v[r] = QD_BLOCK_SUM(_mm256_sign_epi8(q, q), _mm256_sign_epi8(xq, q), ones);
            memcpy(&h[r], p + (size_t)r * row_step, 2);
        }
        __m256 s = _mm256_mul_ps(qd_halves8(h), _mm256_set1_ps(x->d[b]));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(s, _mm256_cvtepi32_ps(qd_hsum8(v))));
    }
    _mm256_storeu_ps(out, acc);
}

/* One row's super-block sums folded to 4 lanes: its blocks' sums low, its offsets' high. */
QD_INL __m256i qd_super_fold(__m256i v, __m256i mi, int offs, const struct kq_act *x, uint32_t g)
{
    __m128i i4 = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    __m128i m4 = _mm_setzero_si128();
    if (offs) {
        __m256i m = _mm256_mullo_epi32(mi, _mm256_loadu_si256((const __m256i *)(x->s + 8 * g)));
        m4 = _mm_add_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    }
    return _mm256_set_m128i(m4, i4);
}

/*
 * K-quants: 8 weight rows (plain or interleaved, qdot.h) against one
 * activation row, lane r the one-row dot's bits for row r. Per super-block,
 * each row's integer sums fold to 4 lanes (blocks low, offsets high); two
 * horizontal-add trees over rows 0-3 and 4-7 and two lane swaps give the 8
 * rows' isum and msum, then each lane adds qd_super_tail's term, the same
 * float operations in the same order. The one-row dot spent two horizontal
 * sums and a chain of scalar float operations per super-block (perf: a
 * quarter of its samples). Over plain rows the 8 streams were slower than
 * the one-row dot from DRAM; over interleaved rows it reads one stream.
 */
QD_INL void qd_super_rows8(const uint8_t *row, size_t row_step, size_t block_step,
                           const struct kq_act *x, uint32_t K, int kind, float *out)
{
    const size_t bytes = kind == 6 ? RS_QUANT_Q6_K_BYTES
                         : kind == 5 ? RS_QUANT_Q5_K_BYTES : RS_QUANT_Q4_K_BYTES;
    __m256 acc = _mm256_setzero_ps();
    for (uint32_t g = 0; g < K / 256; g++) {
        const uint8_t *p = row + (size_t)g * block_step;
        __m256i f[8];
        uint16_t hd[8], hm[8];
        QD_UNROLL for (int r = 0; r < 8; r++) {
            const uint8_t *blk = p + (size_t)r * row_step;
            qd_prefetch(blk, bytes);
            __m256i mi, v = qd_super_isum(blk, kind, x, g, &mi);
            f[r] = qd_super_fold(v, mi, kind != 6, x, g);
            memcpy(&hd[r], qd_super_d(blk, kind), 2);
            hm[r] = 0;
            if (kind != 6)
                memcpy(&hm[r], blk + 2, 2);
        }
        /* low halves: isum of rows 0-3 (a) and 4-7 (b); high halves: their msums */
        __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(f[0], f[1]), _mm256_hadd_epi32(f[2], f[3]));
        __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(f[4], f[5]), _mm256_hadd_epi32(f[6], f[7]));
        __m256 isum = _mm256_cvtepi32_ps(_mm256_permute2x128_si256(a, b, 0x20));
        __m256 msum = _mm256_cvtepi32_ps(_mm256_permute2x128_si256(a, b, 0x31));
        __m256 dx = _mm256_set1_ps(x->d[8 * g]);
        __m256 t = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(qd_halves8(hd), dx), isum),
                                 _mm256_mul_ps(_mm256_mul_ps(qd_halves8(hm), dx), msum));
        acc = _mm256_add_ps(acc, t);
    }
    _mm256_storeu_ps(out, acc);
}

/* K-quant row (kind 4: Q4_K, 5: Q5_K, 6: Q6_K) against n activation rows. */
QD_INL void qd_super_dot(const uint8_t *row, const struct kq_act *const *x, int n, uint32_t K,
                         int kind, float *out)
{
    const size_t bytes = kind == 6 ? RS_QUANT_Q6_K_BYTES
                         : kind == 5 ? RS_QUANT_Q5_K_BYTES : RS_QUANT_Q4_K_BYTES;
    float acc[KQ_DOT_ROWS] = {0}, a = 0.0f;
    if (n == 1) {
        for (uint32_t g = 0; g < K / 256; g++) {
            qd_prefetch(row + (size_t)g * bytes, bytes);
            a = qd_super_term1(row + (size_t)g * bytes, kind, x[0], g, a);
        }
        out[0] = a;
        return;
    }
    for (uint32_t g = 0; g < K / 256; g++) {
        qd_prefetch(row + (size_t)g * bytes, bytes);
        for (int m = 0; m < n; m++)
            acc[m] = qd_super_term1(row + (size_t)g * bytes, kind, x[m], g, acc[m]);
    }
    for (int m = 0; m < n; m++)
        out[m] = acc[m];
}

#define QD_DOT(TYPE, CALL)                                                                      \
    QD_TGT static void QD_PREFIX(TYPE)(const uint8_t *row, const struct kq_act *const *x, int n, \
                                       uint32_t K, float *out)                                  \
    {                                                                                            \
        CALL;                                                                                    \
    }
QD_DOT(q8_0, qd_blocks_dot(row, x, n, K, 0, out))
QD_DOT(q4_0, qd_blocks_dot(row, x, n, K, 1, out))
QD_DOT(q4_k, qd_super_dot(row, x, n, K, 4, out))
QD_DOT(q5_k, qd_super_dot(row, x, n, K, 5, out))
QD_DOT(q6_k, qd_super_dot(row, x, n, K, 6, out))

#define QD_DOT8(TYPE, KIND)                                                                     \
    QD_TGT static void QD_PREFIX(TYPE##_rows8)(const uint8_t *row, size_t row_step,             \
                                               size_t block_step, const struct kq_act *x,       \
                                               uint32_t K, float *out)                          \
    {                                                                                            \
        qd_super_rows8(row, row_step, block_step, x, K, KIND, out);                              \
    }
QD_DOT8(q4_k, 4)
QD_DOT8(q5_k, 5)
QD_DOT8(q6_k, 6)

const struct kq_raw_dot QD_PREFIX(table)[] = {
    {RS_GGML_Q8_0, QD_PREFIX(q8_0), QD_PREFIX(q8_0_rows8), 0},
    {RS_GGML_Q4_0, QD_PREFIX(q4_0), QD_PREFIX(q4_0_rows8), 1},
    {RS_GGML_Q4_K, QD_PREFIX(q4_k), QD_PREFIX(q4_k_rows8), 0},
    {RS_GGML_Q5_K, QD_PREFIX(q5_k), QD_PREFIX(q5_k_rows8), 0},
    {RS_GGML_Q6_K, QD_PREFIX(q6_k), QD_PREFIX(q6_k_rows8), 0},
    {RS_GGML_F32, NULL, NULL, 0},
};

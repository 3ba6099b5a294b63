/* SPDX-License-Identifier: MIT */
/*
 * The K-quants' row dots (qdot.h) in 512-bit registers, for decode: one
 * weight super-block is unpacked once into unsigned levels (no sign work:
 * vpmaddubsw takes them as its unsigned operand), each 64-value register
 * holding two activation blocks, and then, per activation row, vpmaddubsw
 * pairs levels with activation levels into int16 and vpdpwssd multiplies
 * those by the sub-block multipliers straight into int32. Q6_K's levels are
 * stored +32: its -32 x (sum of the activation pair) comes off in int16,
 * where it is exact. The super-block's integer sums are qdot.h's, so the
 * float step (the 256-bit variants', term for term) gives the same bits.
 * Target attributes only; qdot_gemm.c uses this table for KERN_AVX512 before
 * qdot_vnni.c's (which keeps Q8_0 and Q4_0).
 */
#include "launcherd/engine/qdot.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#include "common/quant.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define V5_TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define V5_INL static inline __attribute__((always_inline)) V5_TGT

/* One super-block in registers: four 64-value level registers and their multipliers. */
struct v5_super {
    __m512i q[4];  /* levels of blocks (lo[k], hi[k]) per register, see blocks[] */
    __m512i sc[4]; /* int16 multiplier of each level pair, in vpmaddubsw's output order */
    float d, dmin;
    __m256i mi; /* each block's integer offset (Q4_K/Q5_K's m; 0 for Q6_K), int32 lanes: built
                   and read in registers (as an int array it was stored in halves and read back
                   whole before the stores could forward: the row dot's hottest stall) */
};

/* Q4_K / Q5_K: register r holds activation blocks blocks[r][0] (low 256 bits) and [1]. */
static const int kq_blocks[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};

/* Multipliers of the level pairs of blocks a (lanes 0-15) and b (16-31) from 8 int16 scales. */
V5_INL __m512i v5_pair_scales(__m512i sc16, int a, int b)
{
    __m512i idx = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16((short)a),
                                          _mm512_set1_epi16((short)b));
    return _mm512_permutexvar_epi16(idx, sc16);
}

/*
 * Prefetch of the weight bytes V5_PF_AHEAD past the `len` bytes a dot is about
 * to read (into the next rows: a matrix's rows are contiguous). A row dot
 * reads one short stream, and the hardware prefetcher left its first loads of
 * every block waiting on DRAM (perf: a third of Q8_0's batch-1 decode on the
 * scale loads). Prefetches never fault and never change results.
 */
#define V5_PF_AHEAD 2048

V5_INL void v5_prefetch(const uint8_t *p, size_t len)
{
    for (size_t off = 0; off < len; off += 64)
        _mm_prefetch((const char *)p + V5_PF_AHEAD + off, _MM_HINT_T0);
}

V5_INL void v5_load_kq(const uint8_t *row, uint32_t g, struct v5_super *o, int five_bit)
{
    size_t bytes = five_bit ? RS_QUANT_Q5_K_BYTES : RS_QUANT_Q4_K_BYTES;
    const uint8_t *blk = row + (size_t)g * bytes, *ql = blk + (five_bit ? 48 : 16);
    const __m512i m4 = _mm512_set1_epi8(15);
    v5_prefetch(blk, bytes);
    uint16_t h[2];
    memcpy(h, blk, 4);
    o->d = _cvtsh_ss(h[0]), o->dmin = _cvtsh_ss(h[1]);
    for (int t = 0; t < 2; t++) {
        __m512i q = _mm512_loadu_si512(ql + 64 * t);
        __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        if (five_bit) {
            /* bit 2c + part of high byte i is the fifth bit of chunk c's value i */
            __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 16)));
            const __m512i one = _mm512_set1_epi8(1);
            __m512i s0 = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16((short)(4 * t)),
                                                 _mm512_set1_epi16((short)(4 * t + 2)));
            __m512i s1 = _mm512_add_epi16(s0, _mm512_set1_epi16(1));
            lo = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, s0), one), 4));
            hi = _mm512_or_si512(hi, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, s1), one), 4));
        }
        o->q[2 * t] = lo, o->q[2 * t + 1] = hi;
    }
    uint64_t sc8, m8;
    rs_quant_k_scales8(blk + 4, &sc8, &m8);
    __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc8)));
    for (int r = 0; r < 4; r++)
        o->sc[r] = v5_pair_scales(sc16, kq_blocks[r][0], kq_blocks[r][1]);
    o->mi = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m8));
}

/* Q6_K: register 2h + k holds blocks 4h + 2k, 4h + 2k + 1 (contiguous), levels + 32. */
V5_INL void v5_load_q6_k(const uint8_t *row, uint32_t g, struct v5_super *o)
{
    const uint8_t *blk = row + (size_t)g * RS_QUANT_Q6_K_BYTES;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(0x03);
    v5_prefetch(blk, RS_QUANT_Q6_K_BYTES);
    uint16_t dh;
    memcpy(&dh, blk + 208, 2);
    __m512i sc16 = _mm512_castsi256_si512(
        _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192))));
    for (int h = 0; h < 2; h++) {
        __m512i l = _mm512_loadu_si512(blk + 64 * h); /* [ql 0-31 | ql 32-63] of this half */
        __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)));
        __m512i s01 = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_setzero_si512(), _mm512_set1_epi16(2));
        __m512i s23 = _mm512_add_epi16(s01, _mm512_set1_epi16(4));
        __m512i h01 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, s01), m3), 4);
        __m512i h23 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, s23), m3), 4);
        o->q[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), h01);
        o->q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), h23);
        /* 16 values per multiplier: pairs 0-7 of a 32-value block take sc[2b], 8-15 sc[2b + 1] */
        for (int k = 0; k < 2; k++) {
            int s0 = 8 * h + 4 * k;
            __m512i idx = _mm512_mask_blend_epi16(
                0xFFFF0000u,
                _mm512_mask_blend_epi16(0xFF00u, _mm512_set1_epi16((short)s0), _mm512_set1_epi16((short)(s0 + 1))),
                _mm512_mask_blend_epi16(0xFF000000u, _mm512_set1_epi16((short)(s0 + 2)),
                                        _mm512_set1_epi16((short)(s0 + 3))));
            o->sc[2 * h + k] = _mm512_permutexvar_epi16(idx, sc16);
        }
    }
    o->d = _cvtsh_ss(dh), o->dmin = 0.0f;
    o->mi = _mm256_setzero_si256();
}

/* Activation blocks a and b of row x in one register. */
V5_INL __m512i v5_act2(const struct kq_act *x, uint32_t a, uint32_t b)
{
    __m256i lo = _mm256_loadu_si256((const __m256i *)(x->q + (size_t)KQ_BLOCK * a));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo),
                              _mm256_loadu_si256((const __m256i *)(x->q + (size_t)KQ_BLOCK * b)), 1);
}

/* The total of 8 int32 lanes (integer: any order is exact). */
V5_INL int32_t v5_hsum8(__m256i v)
{
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(h);
}

/* Super-block g against activation row x: its term (qdot.h) added to acc. */
V5_INL float v5_super_term(const struct v5_super *w, const struct kq_act *x, uint32_t g, int q6,
                           float acc)
{
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i v = _mm512_setzero_si512();
    for (int r = 0; r < 4; r++) {
        __m512i xa = q6 ? _mm512_loadu_si512(x->q + (size_t)KQ_BLOCK * (8 * g + 2 * r))
                        : v5_act2(x, 8 * g + kq_blocks[r][0], 8 * g + kq_blocks[r][1]);
        __m512i p = _mm512_maddubs_epi16(w->q[r], xa);
        if (q6) /* levels are stored + 32 */
            p = _mm512_sub_epi16(p, _mm512_slli_epi16(_mm512_maddubs_epi16(ones, xa), 5));
        v = _mm512_dpwssd_epi32(v, p, w->sc[r]);
    }
    /* Q6_K has no offsets: msum is 0, and the float step below is the same expression */
    int32_t msum = q6 ? 0
                      : v5_hsum8(_mm256_mullo_epi32(
                            w->mi, _mm256_loadu_si256((const __m256i *)(x->s + 8 * g))));
    float dx = x->d[8 * g];
    return acc + (((w->d * dx) * (float)_mm512_reduce_add_epi32(v)) -
                  ((w->dmin * dx) * (float)msum));
}

/* Super-block g against n activation rows: one integer sum each, one float term (qdot.h). */
V5_INL void v5_super_dot(const struct v5_super *w, const struct kq_act *const *x, int n,
                         uint32_t g, int q6, float *acc)
{
    for (int m = 0; m < n; m++)
        acc[m] = v5_super_term(w, x[m], g, q6, acc[m]);
}

/*
 * Q8_0 / Q4_0: one group (8 blocks, two per register) against n activation
 * rows. Q8_0 pairs |w| with x carrying w's sign (vpdpbusd); Q4_0 pairs its
 * unsigned nibbles with x and takes 8 x (the block's level sum) off, exact in
 * int32. The 8 block sums come out of one transposing reduction, then each
 * block's term (ws * dx) * isum is added in block order, as qdot.h says.
 */
struct v5_group {
    __m512i u[4];   /* unsigned operand: |levels| (Q8_0) or nibbles (Q4_0), blocks 2r, 2r + 1 */
    __mmask64 neg[4]; /* Q8_0: lanes whose level is negative */
    __m256 ws;      /* each block's scale (0 past the row's end) */
};

V5_INL __m512i v5_two(const uint8_t *a, const uint8_t *b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* Blocks 8g .. 8g + 7 of a Q8_0 (q4 = 0) or Q4_0 row; those at or past nb are zero. */
V5_INL void v5_load_q8q4(const uint8_t *row, uint32_t g, uint32_t nb, int q4,
                         struct v5_group *o)
{
    const size_t bytes = q4 ? RS_QUANT_Q4_0_BYTES : RS_QUANT_Q8_0_BYTES;
    const uint8_t *p = row + (size_t)8 * g * bytes;
    v5_prefetch(p, 8 * bytes);
    int n = nb - 8 * g < 8 ? (int)(nb - 8 * g) : 8;
    /* The 8 fp16 scales gathered in registers: built in memory half by half, they were
     * read back whole before the stores could forward (perf: the group's hottest stall). */
    const __m256i at = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                          _mm256_set1_epi32((int)bytes));
    __m256i words = _mm256_mmask_i32gather_epi32(_mm256_setzero_si256(), (__mmask8)((1u << n) - 1),
                                                 at, p, 1);
    o->ws = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_and_si256(words, _mm256_set1_epi32(0xFFFF))));
    const __m512i m4 = _mm512_set1_epi8(15);
    for (int r = 0; r < 4; r++) {
        __m512i v = _mm512_setzero_si512();
        if (2 * r + 1 < n && !q4) {
            v = v5_two(p + (size_t)(2 * r) * bytes + 2, p + (size_t)(2 * r + 1) * bytes + 2);
        } else if (2 * r + 1 < n) { /* 16 bytes a block: values 0-15 low nibbles, 16-31 high */
            __m256i bytes2 = _mm256_set_m128i(
                _mm_loadu_si128((const __m128i *)(p + (size_t)(2 * r + 1) * bytes + 2)),
                _mm_loadu_si128((const __m128i *)(p + (size_t)(2 * r) * bytes + 2)));
            __m256i lo = _mm256_and_si256(bytes2, _mm512_castsi512_si256(m4));
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes2, 4), _mm512_castsi512_si256(m4));
            /* [lo 2r | lo 2r+1 | hi 2r | hi 2r+1] -> [lo 2r | hi 2r | lo 2r+1 | hi 2r+1] */
            __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            v = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
        } else if (2 * r < n) { /* the row's last block alone */
            if (q4) {
                __m128i b = _mm_loadu_si128((const __m128i *)(p + (size_t)(2 * r) * bytes + 2));
                __m128i lo = _mm_and_si128(b, _mm_set1_epi8(15));
                __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(15));
                v = _mm512_castsi256_si512(_mm256_set_m128i(hi, lo));
                v = _mm512_maskz_mov_epi64(0x0F, v);
            } else {
                v = _mm512_castsi256_si512(
                    _mm256_loadu_si256((const __m256i *)(p + (size_t)(2 * r) * bytes + 2)));
                v = _mm512_maskz_mov_epi64(0x0F, v);
            }
        }
        o->neg[r] = q4 ? 0 : _mm512_movepi8_mask(v);
        o->u[r] = q4 ? v : _mm512_abs_epi8(v);
    }
}

/* The 8 block sums [b0 .. b7] of 4 registers of 16 int32 lanes (block 2r: lanes 0-7, 2r + 1:
 * lanes 8-15 of register r); integer, so any order is exact. */
V5_INL __m256i v5_block_sums(const __m512i v[4])
{
    __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[0], v[1]),
                                   _mm512_unpackhi_epi32(v[0], v[1]));
    __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2], v[3]),
                                   _mm512_unpackhi_epi32(v[2], v[3]));
    /* element i of 128-bit lane L: the total of register i's lane L */
    __m512i t = _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
    __m256i l01 = _mm512_castsi512_si256(t), l23 = _mm512_extracti64x4_epi64(t, 1);
    /* lanes 0 + 1: element i is block 2i; lanes 2 + 3: block 2i + 1 */
    __m128i even = _mm_add_epi32(_mm256_castsi256_si128(l01), _mm256_extracti128_si256(l01, 1));
    __m128i odd = _mm_add_epi32(_mm256_castsi256_si128(l23), _mm256_extracti128_si256(l23, 1));
    return _mm256_permutevar8x32_epi32(_mm256_set_m128i(odd, even),
                                       _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

V5_INL void v5_group_dot(const struct v5_group *w, const struct kq_act *const *x, int n,
                         uint32_t g, int q4, float *acc)
{
    for (int m = 0; m < n; m++) {
        __m512i v[4];
        for (int r = 0; r < 4; r++) {
            __m512i xq = _mm512_loadu_si512(x[m]->q + (size_t)KQ_BLOCK * (8 * g + 2 * r));
            if (!q4) /* x takes w's sign (levels are at least -127: negation is exact) */
                xq = _mm512_mask_sub_epi8(xq, w->neg[r], _mm512_setzero_si512(), xq);
            v[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w->u[r], xq);
        }
        __m256i isum = v5_block_sums(v);
        if (q4) /* (nibble - 8) . x = nibble . x - 8 sum(x) */
            isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(
                                              _mm256_loadu_si256((const __m256i *)(x[m]->s + 8 * g)), 3));
        __m256 dx = _mm256_loadu_ps(x[m]->d + 8 * g);
        float t[8];
        _mm256_storeu_ps(t, _mm256_mul_ps(_mm256_mul_ps(w->ws, dx), _mm256_cvtepi32_ps(isum)));
        float a = acc[m];
        for (int j = 0; j < 8; j++)
            a = a + t[j];
        acc[m] = a;
    }
}

#define V5_DOT_BLOCKS(NAME, Q4)                                                                  \
    V5_TGT static void NAME(const uint8_t *row, const struct kq_act *const *x, int n,           \
                            uint32_t K, float *out)                                              \
    {                                                                                            \
        uint32_t nb = K / KQ_BLOCK, ng = kq_padded_blocks(K) / 8;                                 \
        float acc[KQ_DOT_ROWS] = {0};                                                            \
        for (uint32_t g = 0; g < ng; g++) {                                                      \
            struct v5_group w;                                                                   \
            v5_load_q8q4(row, g, nb, Q4, &w);                                                    \
            v5_group_dot(&w, x, n, g, Q4, acc);                                                  \
        }                                                                                        \
        for (int m = 0; m < n; m++)                                                              \
            out[m] = acc[m];                                                                     \
    }
V5_DOT_BLOCKS(v5_q8_0, 0)
V5_DOT_BLOCKS(v5_q4_0, 1)

/* One row dot per K-quant; one activation row (decode) keeps its accumulator in a register. */
#define V5_DOT(NAME, LOAD, Q6)                                                                   \
    V5_TGT static void NAME(const uint8_t *row, const struct kq_act *const *x, int n,           \
                            uint32_t K, float *out)                                              \
    {                                                                                            \
        if (n == 1) {                                                                            \
            float a = 0.0f;                                                                      \
            for (uint32_t g = 0; g < K / 256; g++) {                                             \
                struct v5_super w;                                                               \
                LOAD;                                                                            \
                a = v5_super_term(&w, x[0], g, Q6, a);                                           \
            }                                                                                    \
            out[0] = a;                                                                          \
            return;                                                                              \
        }                                                                                        \
        float acc[KQ_DOT_ROWS] = {0};                                                            \
        for (uint32_t g = 0; g < K / 256; g++) {                                                 \
            struct v5_super w;                                                                   \
            LOAD;                                                                                \
            v5_super_dot(&w, x, n, g, Q6, acc);                                                  \
        }                                                                                        \
        for (int m = 0; m < n; m++)                                                              \
            out[m] = acc[m];                                                                     \
    }
V5_DOT(v5_q4_k, v5_load_kq(row, g, &w, 0), 0)
V5_DOT(v5_q5_k, v5_load_kq(row, g, &w, 1), 0)
V5_DOT(v5_q6_k, v5_load_q6_k(row, g, &w), 1)

const struct kq_raw_dot kq_vnni512_table[] = {
    {RS_GGML_Q8_0, v5_q8_0, NULL, 0}, {RS_GGML_Q4_0, v5_q4_0, NULL, 0},
    {RS_GGML_Q4_K, v5_q4_k, NULL, 0}, {RS_GGML_Q5_K, v5_q5_k, NULL, 0},
    {RS_GGML_Q6_K, v5_q6_k, NULL, 0}, {RS_GGML_F32, NULL, NULL, 0},
};

#else

const struct kq_raw_dot kq_vnni512_table[] = {{RS_GGML_F32, NULL, NULL, 0}};

#endif

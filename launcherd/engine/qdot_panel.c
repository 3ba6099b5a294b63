/* SPDX-License-Identifier: MIT */
/*
 * The integer dot of qdot.h for prompts: an AVX-512 VNNI GEMM over panels.
 * A chunk of up to QP_MC activation rows is quantized once (the levels of
 * qdot.h's kq_quantize_row) and stored interleaved, so that one 512-bit load
 * holds two adjacent levels of 16 rows; QP_NR weight rows at a time are
 * unpacked in registers (qdot_load.h) into int16 rows of level x sub-block
 * multiplier. Then vpdpwssd multiplies a broadcast pair of weight values by
 * 16 rows' pairs of activation levels: every lane of a register tile
 * (QP_NR weight rows x QP_MV x 16 activation rows) is one output, its
 * integer sum over a block (Q8_0, Q4_0) or super-block (K-quants) exact,
 * then the float step of qdot.h term for term. So the outputs are the row
 * dots' bits, whatever the chunk, the tile or the slice.
 * Why int16 x int16 and not vpdpbusd's u8 x s8: the K-quants' sub-block
 * multipliers fold into the weights (|level x multiplier| <= 4096), so the
 * super-block sum needs no per-block multiply and no sign fix, and every type
 * runs one loop. Half vpdpbusd's products per instruction, still twice the
 * 512-bit FMA's.
 * Leaves out: AVX-512 without VNNI, and other ISAs (-1: the row dots run).
 */
#include "launcherd/engine/qdot.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)

#define QD_TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#include "launcherd/engine/qdot_load.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#define QP_UNROLL _Pragma("clang loop unroll(full)")
#else
#define QP_UNROLL _Pragma("GCC unroll 16")
#endif

#define QP_MV 3                /* 16-row activation vectors per register tile */
#define QP_NR 4                /* weight rows per register tile */
#define QP_MC (16 * QP_MV * 2) /* activation rows per chunk: two tiles' worth */

/* A quantized chunk of activation rows, rows interleaved (stride QP_MC). */
struct qp_chunk {
    int32_t *xq; /* [Kp / 2][QP_MC]: levels 2p, 2p + 1 of a row as two int16 */
    float *dx;   /* [nbp][QP_MC]: each block's scale */
    int32_t *xs; /* [nbp / 2][QP_MC]: level sums of blocks 2q, 2q + 1 as two int16 */
};

/* QP_NR unpacked weight rows. */
struct qp_wtile {
    int32_t *w;  /* [QP_NR][Kp / 2]: pairs of level x multiplier, as two int16 */
    float *ws;   /* [QP_NR][nbp]: block scale (Q8_0, Q4_0) or super-block d at index s */
    float *wm;   /* [QP_NR][nbp]: K-quants' super-block dmin at index s */
    int32_t *mi; /* [QP_NR][nbp / 2]: offsets of blocks 2q, 2q + 1 as two int16 */
};

static size_t up64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

size_t kq_panel_scratch_bytes(uint32_t K)
{
    size_t nbp = kq_padded_blocks(K), kp = nbp * KQ_BLOCK;
    return up64(kp * QP_MC * 2) + up64(nbp * QP_MC * 4) + up64(nbp * QP_MC * 2) +
           up64(kq_act_bytes(K)) + up64(QP_NR * kp * 2) + 2 * up64(QP_NR * nbp * 4) +
           up64(QP_NR * nbp * 2) + 64;
}

static void layout(void *scratch, uint32_t K, struct qp_chunk *c, struct qp_wtile *t,
                   struct kq_act *a)
{
    size_t nbp = kq_padded_blocks(K), kp = nbp * KQ_BLOCK;
    uint8_t *p = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    c->xq = (int32_t *)p, p += up64(kp * QP_MC * 2);
    c->dx = (float *)p, p += up64(nbp * QP_MC * 4);
    c->xs = (int32_t *)p, p += up64(nbp * QP_MC * 2);
    kq_act_at(p, K, a), p += up64(kq_act_bytes(K));
    t->w = (int32_t *)p, p += up64(QP_NR * kp * 2);
    t->ws = (float *)p, p += up64(QP_NR * nbp * 4);
    t->wm = (float *)p, p += up64(QP_NR * nbp * 4);
    t->mi = (int32_t *)p;
}

static int32_t pair16(int32_t lo, int32_t hi)
{
    return (int32_t)((uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16);
}

/* --- activations ------------------------------------------------------------------ */

/* Row i of the chunk from a quantized kq_act (any row: the scalar quantizer's output). */
static void chunk_put(const struct qp_chunk *c, uint32_t i, const struct kq_act *a, uint32_t K)
{
    uint32_t nbp = kq_padded_blocks(K);
    for (uint32_t p = 0; p < nbp * KQ_BLOCK / 2; p++)
        c->xq[(size_t)p * QP_MC + i] = pair16(a->q[2 * p], a->q[2 * p + 1]);
    for (uint32_t b = 0; b < nbp; b++)
        c->dx[(size_t)b * QP_MC + i] = a->d[b];
    for (uint32_t q = 0; q < nbp / 2; q++)
        c->xs[(size_t)q * QP_MC + i] = pair16(a->s[2 * q], a->s[2 * q + 1]);
}

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
                    c->xq[(p0 + (size_t)j) * QP_MC + i] = tmp[j];
            }
            c->dx[(size_t)b * QP_MC + i] = amax / 127.0f;
            int32_t *xs = (int32_t *)c->xs + (size_t)(b / 2) * QP_MC + i;
            int16_t *half = (int16_t *)xs + (b & 1); /* little-endian: block 2q low, 2q + 1 high */
            *half = (int16_t)sum;
        }
    }
    return 0;
}

/* Rows m0 .. m0 + mc - 1 of x into the chunk, rows mc .. up to the tile zero. */
static void chunk_fill(const struct qp_chunk *c, struct kq_act *a, const float *x, size_t ldx,
                       uint32_t m0, uint32_t mc, uint32_t K, uint32_t span)
{
    uint32_t nbp = kq_padded_blocks(K), nb = K / KQ_BLOCK;
    uint32_t mcp = (mc + 16 * QP_MV - 1) / (16 * QP_MV) * (16 * QP_MV);
    for (uint32_t i = 0; i < mcp; i++) {
        const float *row = i < mc ? x + (size_t)(m0 + i) * ldx : NULL;
        if (row != NULL && quantize_fast(row, K, span, c, i) == 0) {
            /* the padding blocks: zero levels, scales and sums, as kq_quantize_row */
            for (uint32_t p = nb * KQ_BLOCK / 2; p < nbp * KQ_BLOCK / 2; p++)
                c->xq[(size_t)p * QP_MC + i] = 0;
            for (uint32_t b = nb; b < nbp; b++) {
                c->dx[(size_t)b * QP_MC + i] = 0.0f;
                ((int16_t *)(c->xs + (size_t)(b / 2) * QP_MC + i))[b & 1] = 0;
            }
            continue;
        }
        if (row != NULL) {
            kq_quantize_row(row, K, span, a);
        } else {
            memset(a->q, 0, (size_t)nbp * KQ_BLOCK);
            for (uint32_t b = 0; b < nbp; b++)
                a->d[b] = 0.0f, a->s[b] = 0;
        }
        chunk_put(c, i, a, K);
    }
}

/* --- weights ---------------------------------------------------------------------- */

/* 32 int8 levels times their pair-order multipliers (qdot.h's sc) as 32 int16. */
QD_INL __m512i level_times_sc(__m256i q, __m256i sc)
{
    __m512i e = _mm512_cvtepu16_epi32(sc); /* one multiplier per pair: copy it to both halves */
    return _mm512_mullo_epi16(_mm512_cvtepi8_epi16(q), _mm512_or_si512(e, _mm512_slli_epi32(e, 16)));
}

/* Row r of the tile from weight row `src` of type t (NULL: a zero row past the slice). */
QD_TGT static void unpack_row(enum rs_ggml_type t, const uint8_t *src, uint32_t K,
                              const struct qp_wtile *wt, int r)
{
    uint32_t nbp = kq_padded_blocks(K), nb = K / KQ_BLOCK;
    int32_t *w = wt->w + (size_t)r * nbp * KQ_BLOCK / 2;
    float *ws = wt->ws + (size_t)r * nbp, *wm = wt->wm + (size_t)r * nbp;
    int16_t *mi = (int16_t *)(wt->mi + (size_t)r * nbp / 2);
    if (src == NULL) {
        memset(w, 0, (size_t)nbp * KQ_BLOCK * 2);
        memset(ws, 0, nbp * 4), memset(wm, 0, nbp * 4), memset(mi, 0, nbp * 2);
        return;
    }
    for (uint32_t g = 0; g < nbp / 8; g++) {
        struct qd_group o;
        if (t == RS_GGML_Q8_0)
            qd_load_q8_0(src, g, nb, &o);
        else if (t == RS_GGML_Q4_0)
            qd_load_q4_0(src, g, nb, &o);
        else if (t == RS_GGML_Q6_K)
            qd_load_q6_k(src, g, &o);
        else
            qd_load_kq(src, g, &o, t == RS_GGML_Q5_K);
        for (int j = 0; j < 8; j++)
            _mm512_storeu_si512(w + (size_t)(8 * g + j) * 16, level_times_sc(o.q[j], o.sc[j]));
        if (kq_span(t) == KQ_BLOCK) {
            _mm256_storeu_ps(ws + 8 * g, o.ws);
        } else {
            ws[g] = o.d, wm[g] = o.dmin;
            _mm_storeu_si128((__m128i *)(mi + 8 * g), _mm256_cvtepi32_epi16(o.mi));
        }
    }
}

/* --- register tiles --------------------------------------------------------------- */

/*
 * The integer sums of pairs [p0, p0 + np) for QP_NR weight rows x mv vectors
 * of 16 activation rows starting at row lane v0 (a multiple of 16) into acc.
 */
QD_INL void tile_isum(const struct qp_chunk *c, const struct qp_wtile *wt, size_t wstride, int mv,
                      uint32_t v0, uint32_t p0, uint32_t np, __m512i acc[QP_NR][QP_MV])
{
    QP_UNROLL for (int r = 0; r < QP_NR; r++)
        QP_UNROLL for (int j = 0; j < mv; j++)
            acc[r][j] = _mm512_setzero_si512();
    for (uint32_t p = p0; p < p0 + np; p++) {
        const int32_t *xp = c->xq + (size_t)p * QP_MC + v0;
        __m512i xv[QP_MV];
        QP_UNROLL for (int j = 0; j < mv; j++)
            xv[j] = _mm512_loadu_si512(xp + 16 * j);
        QP_UNROLL for (int r = 0; r < QP_NR; r++) {
            __m512i wb = _mm512_set1_epi32(wt->w[(size_t)r * wstride + p]);
            QP_UNROLL for (int j = 0; j < mv; j++)
                acc[r][j] = _mm512_dpwssd_epi32(acc[r][j], xv[j], wb);
        }
    }
}

/* Q8_0, Q4_0: acc += (ws_b * dx_b) * isum_b, block by block. */
QD_INL void tile_blocks(const struct qp_chunk *c, const struct qp_wtile *wt, uint32_t K, int mv,
                        uint32_t v0, __m512 facc[QP_NR][QP_MV])
{
    uint32_t nbp = kq_padded_blocks(K);
    for (uint32_t b = 0; b < K / KQ_BLOCK; b++) {
        __m512i acc[QP_NR][QP_MV];
        tile_isum(c, wt, (size_t)nbp * KQ_BLOCK / 2, mv, v0, b * KQ_BLOCK / 2, KQ_BLOCK / 2, acc);
        QP_UNROLL for (int j = 0; j < mv; j++) {
            __m512 dx = _mm512_loadu_ps(c->dx + (size_t)b * QP_MC + v0 + 16 * j);
            QP_UNROLL for (int r = 0; r < QP_NR; r++) {
                __m512 s = _mm512_mul_ps(_mm512_set1_ps(wt->ws[(size_t)r * nbp + b]), dx);
                facc[r][j] = _mm512_add_ps(facc[r][j], _mm512_mul_ps(s, _mm512_cvtepi32_ps(acc[r][j])));
            }
        }
    }
}

/* K-quants: acc += ((d * dx) * isum) - ((dmin * dx) * msum), super-block by super-block. */
QD_INL void tile_super(const struct qp_chunk *c, const struct qp_wtile *wt, uint32_t K, int mv,
                       uint32_t v0, int mins, __m512 facc[QP_NR][QP_MV])
{
    uint32_t nbp = kq_padded_blocks(K);
    for (uint32_t s = 0; s < K / 256; s++) {
        __m512i acc[QP_NR][QP_MV];
        tile_isum(c, wt, (size_t)nbp * KQ_BLOCK / 2, mv, v0, s * 128, 128, acc);
        QP_UNROLL for (int j = 0; j < mv; j++) {
            __m512 dx = _mm512_loadu_ps(c->dx + (size_t)8 * s * QP_MC + v0 + 16 * j);
            __m512i xs[4];
            QP_UNROLL for (int q = 0; q < 4; q++)
                xs[q] = _mm512_loadu_si512(c->xs + (size_t)(4 * s + q) * QP_MC + v0 + 16 * j);
            QP_UNROLL for (int r = 0; r < QP_NR; r++) {
                __m512i ms = _mm512_setzero_si512();
                if (mins) {
                    QP_UNROLL for (int q = 0; q < 4; q++)
                        ms = _mm512_dpwssd_epi32(
                            ms, xs[q], _mm512_set1_epi32(wt->mi[(size_t)r * nbp / 2 + 4 * s + q]));
                }
                __m512 d = _mm512_mul_ps(_mm512_set1_ps(wt->ws[(size_t)r * nbp + s]), dx);
                __m512 dm = _mm512_mul_ps(_mm512_set1_ps(wt->wm[(size_t)r * nbp + s]), dx);
                __m512 t = _mm512_sub_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(acc[r][j])),
                                         _mm512_mul_ps(dm, _mm512_cvtepi32_ps(ms)));
                facc[r][j] = _mm512_add_ps(facc[r][j], t);
            }
        }
    }
}

/* One tile: rows v0 .. v0 + 16 mv - 1 of the chunk (those below mc stored) x weight rows n.. */
QD_INL void tile(enum rs_ggml_type t, const struct qp_chunk *c, const struct qp_wtile *wt,
                 uint32_t K, int mv, uint32_t v0, uint32_t mc, float *y, size_t ldy, uint32_t n,
                 uint32_t nr, int accumulate)
{
    __m512 facc[QP_NR][QP_MV];
    QP_UNROLL for (int r = 0; r < QP_NR; r++)
        QP_UNROLL for (int j = 0; j < mv; j++)
            facc[r][j] = _mm512_setzero_ps();
    if (kq_span(t) == KQ_BLOCK)
        tile_blocks(c, wt, K, mv, v0, facc);
    else
        tile_super(c, wt, K, mv, v0, t != RS_GGML_Q6_K, facc);
    for (uint32_t r = 0; r < nr; r++)
        for (int j = 0; j < mv; j++) {
            float out[16];
            _mm512_storeu_ps(out, facc[r][j]);
            for (uint32_t l = 0; l < 16 && v0 + 16 * (uint32_t)j + l < mc; l++) {
                float *ym = y + (size_t)(v0 + 16 * (uint32_t)j + l) * ldy + n + r;
                *ym = accumulate ? *ym + out[l] : out[l];
            }
        }
}

/* Every tile of one chunk against weight rows [n, n + nr) already unpacked. */
QD_TGT static void chunk_tiles(enum rs_ggml_type t, const struct qp_chunk *c,
                               const struct qp_wtile *wt, uint32_t K, uint32_t mc, float *y,
                               size_t ldy, uint32_t n, uint32_t nr, int accumulate)
{
    for (uint32_t v0 = 0; v0 < mc; v0 += 16 * QP_MV) {
        uint32_t left = mc - v0;
        if (left > 32)
            tile(t, c, wt, K, 3, v0, mc, y, ldy, n, nr, accumulate);
        else if (left > 16)
            tile(t, c, wt, K, 2, v0, mc, y, ldy, n, nr, accumulate);
        else
            tile(t, c, wt, K, 1, v0, mc, y, ldy, n, nr, accumulate);
    }
}

int kq_panel_gemm(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows, float *y,
                  size_t ldy, uint32_t n0, uint32_t n1, int accumulate, void *scratch)
{
    if (!kq_type_supported(w->type))
        return -1;
    uint32_t K = w->cols;
    struct qp_chunk c;
    struct qp_wtile wt;
    struct kq_act a;
    layout(scratch, K, &c, &wt, &a);
    for (uint32_t m0 = 0; m0 < n_rows; m0 += QP_MC) {
        uint32_t mc = n_rows - m0 < QP_MC ? n_rows - m0 : QP_MC;
        chunk_fill(&c, &a, x, ldx, m0, mc, K, kq_span(w->type));
        for (uint32_t n = n0; n < n1; n += QP_NR) {
            uint32_t nr = n1 - n < QP_NR ? n1 - n : QP_NR;
            for (int r = 0; r < QP_NR; r++) {
                const uint8_t *src = (uint32_t)r < nr
                                         ? (const uint8_t *)w->data + (size_t)(n + r) * w->row_bytes
                                         : NULL;
                unpack_row(w->type, src, K, &wt, r);
            }
            chunk_tiles(w->type, &c, &wt, K, mc, y + (size_t)m0 * ldy, ldy, n, nr, accumulate);
        }
    }
    return 0;
}

#else

size_t kq_panel_scratch_bytes(uint32_t K)
{
    (void)K;
    return 0;
}

int kq_panel_gemm(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows, float *y,
                  size_t ldy, uint32_t n0, uint32_t n1, int accumulate, void *scratch)
{
    (void)w, (void)x, (void)ldx, (void)n_rows, (void)y, (void)ldy, (void)n0, (void)n1;
    (void)accumulate, (void)scratch;
    return -1;
}

#endif

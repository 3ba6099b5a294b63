/* SPDX-License-Identifier: MIT */
/*
 * The integer dot of qdot.h for prompts, as a GEMM over panels, written once
 * for the two x86 variants that include it: qdot_panel.c (AVX-512 VNNI,
 * vpdpwssd, 16 activation rows a register) and qdot_panel_avx2.c (AVX2,
 * vpmaddwd then vpaddd, 8 rows a register). A chunk of up to QP_MC
 * activation rows is quantized once (the levels of qdot.h's kq_quantize_row)
 * and stored interleaved, so that one vector load holds two adjacent levels
 * of QP_W rows; QP_NR weight rows at a time are unpacked in registers
 * (qdot_load.h) into int16 rows of level x sub-block multiplier. Then a
 * broadcast pair of weight values multiplies QP_W rows' pairs of activation
 * levels: every lane of a register tile (QP_NR weight rows x QP_MV x QP_W
 * activation rows) is one output, its integer sum over a block (Q8_0, Q4_0)
 * or super-block (K-quants) exact, then the float step of qdot.h term for
 * term. So the outputs are the row dots' bits, whatever the variant, the
 * chunk, the tile or the slice.
 * Why int16 x int16 for Q8_0 and Q6_K: their levels are signed (u8 x s8
 * needs a sign fix per weight, and a broadcast weight cannot carry it to the
 * activation rows), and the sub-block multipliers fold into the weights
 * (|level x multiplier| <= 4096), so the super-block sum needs no per-block
 * multiply. Q4_0, Q4_K and Q5_K, whose levels are small and never negative,
 * take the u8 x s8 quad path where the includer has one (QP_QUAD, below).
 * Loop order: a chunk of activation rows, then QP_G weight tiles unpacked,
 * then each activation tile against all of them, QP_KB blocks at a time.
 * The includer defines QD_TGT (target attribute), QP_PREFIX(name), the tile
 * geometry QP_W, QP_MV, QP_NR, QP_MC, the vector types QP_VI / QP_VF and
 * their operations (QP_ZI, QP_ZF, QP_LDI, QP_LDF, QP_STF, QP_SET1I,
 * QP_SET1F, QP_DOT, QP_CVT, QP_ADDF, QP_SUBF, QP_MULF), QP_STORE_LEVELS(dst,
 * q, sc) (32 levels times their pair multipliers as 32 int16 at dst) and
 * QP_QUANTIZE_FAST(x, K, span, c, i) (a row straight into the chunk, or -1
 * to take the scalar quantizer's levels); for the quad path also QP_QUAD,
 * QP_DOT4, QP_WIDEN, QP_SET1W, QP_ADDI and QP_SUBI.
 */
#include <math.h>
#include <string.h>

#include "launcherd/engine/qdot_load.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#define QP_UNROLL _Pragma("clang loop unroll(full)")
#define QP_UNROLL2 _Pragma("clang loop unroll_count(2)")
#else
#define QP_UNROLL _Pragma("GCC unroll 16")
#define QP_UNROLL2 _Pragma("GCC unroll 2")
#endif

#define QP_TW (QP_W * QP_MV) /* activation rows of a full register tile */

/*
 * A quantized chunk of activation rows, rows interleaved. The levels are
 * stored tile by tile, so that a tile reads one contiguous stream: with the
 * chunk's rows side by side (stride QP_MC), each step of a tile touched a new
 * 64-byte line per vector, and perf of the AVX2 Q8_0 prompt had the tile
 * waiting on those L2 loads.
 */
struct qp_chunk {
    int32_t *xq;   /* [QP_MC / QP_TW][nsteps][QP_TW]: step p of a row, levels 2p, 2p + 1 as two
                      int16 or, quad chunks, levels 4p .. 4p + 3 as four int8 */
    float *dx;     /* [nbp][QP_MC]: each block's scale */
    int32_t *xs;   /* [nbp / 2][QP_MC]: level sums of blocks 2q, 2q + 1 as two int16 */
    size_t nsteps; /* Kp / 2, or Kp / 4 for a quad chunk */
    int quad;      /* 1: the levels of quad_type's u8 x s8 path */
};

/* Index in xq of step p of chunk row i. */
static inline size_t qp_xq_at(const struct qp_chunk *c, size_t p, uint32_t i)
{
    return ((size_t)(i / QP_TW) * c->nsteps + p) * QP_TW + i % QP_TW;
}

/*
 * The quad path (an includer that defines QP_QUAD): for weight levels that are
 * never negative and at most 31 (Q4_0's nibbles, Q4_K, Q5_K), a broadcast of
 * four weight levels (u8) times QP_W rows' four activation levels (s8) by
 * QP_DOT4, pairs of products added in int16 over a block (4-bit: at most
 * 8 x 2 x 15 x 127) or half-block (5-bit: 4 x 2 x 31 x 127), then widened to
 * int32 by QP_WIDEN with the block's multiplier. Half the multiplies of the
 * int16 x int16 pairs; the integer sums are the same, so are the bits.
 */
static int quad_type(enum rs_ggml_type t)
{
#ifdef QP_QUAD
    return t == RS_GGML_Q4_0 || t == RS_GGML_Q4_K || t == RS_GGML_Q5_K;
#else
    (void)t;
    return 0;
#endif
}

/* QP_NR unpacked weight rows. */
struct qp_wtile {
    int32_t *w;  /* [QP_NR][Kp / 2]: pairs of level x multiplier, as two int16 */
    float *ws;   /* [QP_NR][nbp]: block scale (Q8_0, Q4_0) or super-block d at index s */
    float *wm;   /* [QP_NR][nbp]: K-quants' super-block dmin at index s */
    int32_t *mi; /* [QP_NR][nbp / 2]: offsets of blocks 2q, 2q + 1 as two int16 */
    int16_t *sc; /* [QP_NR][nbp]: quad path, K-quants: each block's multiplier */
};

static size_t up64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/*
 * Weight tiles unpacked at once: each activation tile then runs against all
 * of them while its levels stay in L1, and writes QP_G x QP_NR adjacent
 * outputs of each of its rows. One weight tile at a time, every tile stored
 * QP_NR outputs into each of its rows (8 KB apart at N = 2048): a tenth of
 * the AVX2 Q8_0 prompt's time in those stores (perf).
 */
#define QP_G 8

static size_t wtile_bytes(size_t nbp)
{
    return up64(QP_NR * nbp * KQ_BLOCK * 2) + 2 * up64(QP_NR * nbp * 4) + 2 * up64(QP_NR * nbp * 2);
}

size_t QP_PREFIX(scratch_bytes)(uint32_t K)
{
    size_t nbp = kq_padded_blocks(K), kp = nbp * KQ_BLOCK;
    return up64(kp * QP_MC * 2) + up64(nbp * QP_MC * 4) + up64(nbp * QP_MC * 2) +
           up64(kq_act_bytes(K)) + QP_G * wtile_bytes(nbp) + 64;
}

static void layout(void *scratch, enum rs_ggml_type type, uint32_t K, struct qp_chunk *c,
                   struct qp_wtile t[QP_G], struct kq_act *a)
{
    size_t nbp = kq_padded_blocks(K), kp = nbp * KQ_BLOCK;
    uint8_t *p = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    c->quad = quad_type(type), c->nsteps = kp / (c->quad ? 4 : 2);
    c->xq = (int32_t *)p, p += up64(kp * QP_MC * 2);
    c->dx = (float *)p, p += up64(nbp * QP_MC * 4);
    c->xs = (int32_t *)p, p += up64(nbp * QP_MC * 2);
    kq_act_at(p, K, a), p += up64(kq_act_bytes(K));
    for (int g = 0; g < QP_G; g++) {
        t[g].w = (int32_t *)p, p += up64(QP_NR * kp * 2);
        t[g].ws = (float *)p, p += up64(QP_NR * nbp * 4);
        t[g].wm = (float *)p, p += up64(QP_NR * nbp * 4);
        t[g].mi = (int32_t *)p, p += up64(QP_NR * nbp * 2);
        t[g].sc = (int16_t *)p, p += up64(QP_NR * nbp * 2);
    }
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
    for (uint32_t p = 0; p < c->nsteps; p++) {
        int32_t v;
        if (c->quad)
            memcpy(&v, a->q + 4 * (size_t)p, 4);
        else
            v = pair16(a->q[2 * p], a->q[2 * p + 1]);
        c->xq[qp_xq_at(c, p, i)] = v;
    }
    for (uint32_t b = 0; b < nbp; b++)
        c->dx[(size_t)b * QP_MC + i] = a->d[b];
    for (uint32_t q = 0; q < nbp / 2; q++)
        c->xs[(size_t)q * QP_MC + i] = pair16(a->s[2 * q], a->s[2 * q + 1]);
}

/* Rows m0 .. m0 + mc - 1 of x into the chunk, rows mc .. up to the tile zero. */
static void chunk_fill(const struct qp_chunk *c, struct kq_act *a, const float *x, size_t ldx,
                       uint32_t m0, uint32_t mc, uint32_t K, uint32_t span)
{
    uint32_t nbp = kq_padded_blocks(K), nb = K / KQ_BLOCK;
    uint32_t mcp = (mc + QP_W * QP_MV - 1) / (QP_W * QP_MV) * (QP_W * QP_MV);
    for (uint32_t i = 0; i < mcp; i++) {
        const float *row = i < mc ? x + (size_t)(m0 + i) * ldx : NULL;
        if (row != NULL && QP_QUANTIZE_FAST(row, K, span, c, i) == 0) {
            /* the padding blocks: zero levels, scales and sums, as kq_quantize_row */
            for (uint32_t p = (uint32_t)(c->nsteps / nbp * nb); p < c->nsteps; p++)
                c->xq[qp_xq_at(c, p, i)] = 0;
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

/* K-quant super-block g's scale, offset scale and offsets into row r's arrays. */
QD_INL void store_super(const struct qd_group *o, uint32_t g, float *ws, float *wm, int16_t *mi)
{
    ws[g] = o->d, wm[g] = o->dmin;
    __m256i m16 = _mm256_packs_epi32(o->mi, o->mi); /* offsets <= 63: no saturation */
    _mm_storeu_si128((__m128i *)(mi + 8 * g),
                     _mm256_castsi256_si128(_mm256_permute4x64_epi64(m16, 0x08)));
}

/* Quad path: groups [g0, g1) of weight row `src` (its blocks `step` bytes apart) as u8 levels
 * (Q4_0: its nibbles, level + 8), 4 per int32 of w. */
QD_TGT static void unpack_quads(enum rs_ggml_type t, const uint8_t *src, size_t step, uint32_t K,
                                uint32_t g0, uint32_t g1, uint8_t *w, float *ws, float *wm,
                                int16_t *mi, int16_t *sc)
{
    uint32_t nb = K / KQ_BLOCK;
    for (uint32_t g = g0; g < g1; g++) {
        if (t == RS_GGML_Q4_0) {
            const uint8_t *p = src + (size_t)8 * g * step;
            int n = qd_group_blocks(g, nb);
            for (int j = 0; j < 8; j++)
                _mm256_storeu_si256((__m256i *)(w + (size_t)(8 * g + j) * KQ_BLOCK),
                                    qd_q4_0_nibbles(p, step, j, n));
            _mm256_storeu_ps(ws + 8 * g, qd_halves(p, step, n));
            continue;
        }
        struct qd_group o;
        qd_load_kq(src, step, g, &o, t == RS_GGML_Q5_K);
        for (int j = 0; j < 8; j++) {
            _mm256_storeu_si256((__m256i *)(w + (size_t)(8 * g + j) * KQ_BLOCK), o.q[j]);
            sc[8 * g + j] = (int16_t)_mm256_extract_epi16(o.sc[j], 0); /* every lane holds it */
        }
        store_super(&o, g, ws, wm, mi);
    }
}

/* Groups [g0, g1) of row r of the tile from weight row `src` of type t, its blocks `step`
 * bytes apart (NULL: a zero row past the slice, zeroed whole with group 0). */
QD_TGT static void unpack_row(enum rs_ggml_type t, const uint8_t *src, size_t step, uint32_t K,
                              uint32_t g0, uint32_t g1, const struct qp_wtile *wt, int r)
{
    uint32_t nbp = kq_padded_blocks(K), nb = K / KQ_BLOCK;
    int32_t *w = wt->w + (size_t)r * nbp * KQ_BLOCK / 2;
    float *ws = wt->ws + (size_t)r * nbp, *wm = wt->wm + (size_t)r * nbp;
    int16_t *mi = (int16_t *)(wt->mi + (size_t)r * nbp / 2), *sc = wt->sc + (size_t)r * nbp;
    if (src == NULL) {
        if (g0 > 0)
            return;
        memset(w, 0, (size_t)nbp * KQ_BLOCK * 2);
        memset(ws, 0, nbp * 4), memset(wm, 0, nbp * 4), memset(mi, 0, nbp * 2);
        memset(sc, 0, nbp * 2);
        return;
    }
    if (quad_type(t)) {
        unpack_quads(t, src, step, K, g0, g1, (uint8_t *)w, ws, wm, mi, sc);
        return;
    }
    for (uint32_t g = g0; g < g1; g++) {
        struct qd_group o;
        if (t == RS_GGML_Q8_0)
            qd_load_q8_0(src, step, g, nb, &o);
        else if (t == RS_GGML_Q4_0)
            qd_load_q4_0(src, step, g, nb, &o);
        else if (t == RS_GGML_Q6_K)
            qd_load_q6_k(src, step, g, &o);
        else
            qd_load_kq(src, step, g, &o, t == RS_GGML_Q5_K);
        for (int j = 0; j < 8; j++)
            QP_STORE_LEVELS(w + (size_t)(8 * g + j) * 16, o.q[j], o.sc[j]);
        if (kq_span(t) == KQ_BLOCK)
            _mm256_storeu_ps(ws + 8 * g, o.ws);
        else
            store_super(&o, g, ws, wm, mi);
    }
}

/* --- register tiles --------------------------------------------------------------- */

#ifdef QP_QUAD
#define QP_STEP(quad, acc, x, w) ((quad) ? QP_DOT4(acc, w, x) : QP_DOT(acc, x, w))
#else
#define QP_STEP(quad, acc, x, w) QP_DOT(acc, x, w)
#endif

/*
 * The integer sums of steps [p0, p0 + np) for QP_NR weight rows x mv vectors
 * of QP_W activation rows starting at row lane v0 (a multiple of QP_W) into
 * acc: pairs into int32, or (quad, a constant) quads into int16.
 */
QD_INL void tile_isum(const struct qp_chunk *c, const struct qp_wtile *wt, size_t wstride, int mv,
                      uint32_t v0, uint32_t p0, uint32_t np, int quad, QP_VI acc[QP_NR][QP_MV])
{
    (void)quad; /* read only by the includers with a quad path */
    QP_UNROLL for (int r = 0; r < QP_NR; r++)
        QP_UNROLL for (int j = 0; j < mv; j++)
            acc[r][j] = QP_ZI();
    /* np is even; unrolled twice, gcc keeps each accumulator in one register (once, it moved
     * all 8 of AVX2's after every step) */
    QP_UNROLL2 for (uint32_t p = p0; p < p0 + np; p++) {
        const int32_t *xp = c->xq + qp_xq_at(c, p, v0); /* v0: a multiple of QP_TW */
        QP_VI xv[QP_MV];
        QP_UNROLL for (int j = 0; j < mv; j++)
            xv[j] = QP_LDI(xp + QP_W * j);
        QP_UNROLL for (int r = 0; r < QP_NR; r++) {
            QP_VI wb = QP_SET1I(wt->w[(size_t)r * wstride + p]);
            QP_UNROLL for (int j = 0; j < mv; j++)
                acc[r][j] = QP_STEP(quad, acc[r][j], xv[j], wb);
        }
    }
}

/* Q8_0, Q4_0: acc += (ws_b * dx_b) * isum_b, block by block. */
QD_INL void tile_blocks(const struct qp_chunk *c, const struct qp_wtile *wt, uint32_t K,
                        uint32_t b0, uint32_t b1, int mv, uint32_t v0, QP_VF facc[QP_NR][QP_MV])
{
    uint32_t nbp = kq_padded_blocks(K);
    for (uint32_t b = b0; b < b1; b++) {
        QP_VI acc[QP_NR][QP_MV];
        tile_isum(c, wt, (size_t)nbp * KQ_BLOCK / 2, mv, v0, b * KQ_BLOCK / 2, KQ_BLOCK / 2, 0,
                  acc);
        QP_UNROLL for (int j = 0; j < mv; j++) {
            QP_VF dx = QP_LDF(c->dx + (size_t)b * QP_MC + v0 + QP_W * j);
            QP_UNROLL for (int r = 0; r < QP_NR; r++) {
                QP_VF s = QP_MULF(QP_SET1F(wt->ws[(size_t)r * nbp + b]), dx);
                facc[r][j] = QP_ADDF(facc[r][j], QP_MULF(s, QP_CVT(acc[r][j])));
            }
        }
    }
}

/* K-quants: super-block s's term ((d * dx) * isum) - ((dmin * dx) * msum) added to facc. */
QD_INL void super_term(const struct qp_chunk *c, const struct qp_wtile *wt, uint32_t nbp,
                       uint32_t s, int mv, uint32_t v0, int mins, QP_VI acc[QP_NR][QP_MV],
                       QP_VF facc[QP_NR][QP_MV])
{
    QP_UNROLL for (int j = 0; j < mv; j++) {
        QP_VF dx = QP_LDF(c->dx + (size_t)8 * s * QP_MC + v0 + QP_W * j);
        QP_UNROLL for (int r = 0; r < QP_NR; r++) {
            QP_VI ms = QP_ZI();
            if (mins) {
                QP_UNROLL for (int q = 0; q < 4; q++)
                    ms = QP_DOT(ms, QP_LDI(c->xs + (size_t)(4 * s + q) * QP_MC + v0 + QP_W * j),
                                QP_SET1I(wt->mi[(size_t)r * nbp / 2 + 4 * s + q]));
            }
            QP_VF d = QP_MULF(QP_SET1F(wt->ws[(size_t)r * nbp + s]), dx);
            QP_VF dm = QP_MULF(QP_SET1F(wt->wm[(size_t)r * nbp + s]), dx);
            QP_VF t = QP_SUBF(QP_MULF(d, QP_CVT(acc[r][j])), QP_MULF(dm, QP_CVT(ms)));
            facc[r][j] = QP_ADDF(facc[r][j], t);
        }
    }
}

/* K-quants: acc += ((d * dx) * isum) - ((dmin * dx) * msum), super-block by super-block. */
QD_INL void tile_super(const struct qp_chunk *c, const struct qp_wtile *wt, uint32_t K, uint32_t b0,
                       uint32_t b1, int mv, uint32_t v0, int mins, QP_VF facc[QP_NR][QP_MV])
{
    uint32_t nbp = kq_padded_blocks(K);
    for (uint32_t s = b0 / 8; s < b1 / 8; s++) {
        QP_VI acc[QP_NR][QP_MV];
        tile_isum(c, wt, (size_t)nbp * KQ_BLOCK / 2, mv, v0, s * 128, 128, 0, acc);
        super_term(c, wt, nbp, s, mv, v0, mins, acc, facc);
    }
}

#ifdef QP_QUAD
/* Quad path, Q4_0: isum_b = nibbles . x - 8 sum(x), then the term of tile_blocks. */
QD_INL void tile_blocks_quad(const struct qp_chunk *c, const struct qp_wtile *wt, uint32_t K,
                             uint32_t b0, uint32_t b1, int mv, uint32_t v0,
                             QP_VF facc[QP_NR][QP_MV])
{
    uint32_t nbp = kq_padded_blocks(K);
    for (uint32_t b = b0; b < b1; b++) {
        QP_VI a16[QP_NR][QP_MV];
        tile_isum(c, wt, (size_t)nbp * KQ_BLOCK / 2, mv, v0, b * KQ_BLOCK / 4, KQ_BLOCK / 4, 1,
                  a16);
        QP_VI eight = QP_SET1I(b & 1 ? 8 << 16 : 8); /* picks block b's half of the pair */
        QP_UNROLL for (int j = 0; j < mv; j++) {
            QP_VF dx = QP_LDF(c->dx + (size_t)b * QP_MC + v0 + QP_W * j);
            QP_VI xs8 = QP_WIDEN(QP_LDI(c->xs + (size_t)(b / 2) * QP_MC + v0 + QP_W * j), eight);
            QP_UNROLL for (int r = 0; r < QP_NR; r++) {
                QP_VI isum = QP_SUBI(QP_WIDEN(a16[r][j], QP_SET1W(1)), xs8);
                QP_VF s = QP_MULF(QP_SET1F(wt->ws[(size_t)r * nbp + b]), dx);
                facc[r][j] = QP_ADDF(facc[r][j], QP_MULF(s, QP_CVT(isum)));
            }
        }
    }
}

/* Quad path, Q4_K / Q5_K (five_bit): each block's (Q5_K: half-block's) int16 sums widened
 * by its multiplier into the super-block's int32 sums, then the term of tile_super. */
QD_INL void tile_super_quad(const struct qp_chunk *c, const struct qp_wtile *wt, uint32_t K,
                            uint32_t b0, uint32_t b1, int mv, uint32_t v0, int five_bit,
                            QP_VF facc[QP_NR][QP_MV])
{
    uint32_t nbp = kq_padded_blocks(K), runs = five_bit ? 2 : 1, nq = KQ_BLOCK / 4 / runs;
    for (uint32_t s = b0 / 8; s < b1 / 8; s++) {
        QP_VI acc[QP_NR][QP_MV];
        QP_UNROLL for (int r = 0; r < QP_NR; r++)
            QP_UNROLL for (int j = 0; j < mv; j++)
                acc[r][j] = QP_ZI();
        for (uint32_t b = 8 * s; b < 8 * s + 8; b++)
            for (uint32_t h = 0; h < runs; h++) {
                QP_VI a16[QP_NR][QP_MV];
                tile_isum(c, wt, (size_t)nbp * KQ_BLOCK / 2, mv, v0, b * KQ_BLOCK / 4 + h * nq,
                          nq, 1, a16);
                QP_UNROLL for (int r = 0; r < QP_NR; r++) {
                    QP_VI m = QP_SET1W(wt->sc[(size_t)r * nbp + b]);
                    QP_UNROLL for (int j = 0; j < mv; j++)
                        acc[r][j] = QP_ADDI(acc[r][j], QP_WIDEN(a16[r][j], m));
                }
            }
        super_term(c, wt, nbp, s, mv, v0, 1, acc, facc);
    }
}
#endif

/* Blocks of K a tile's pass covers: its activation levels (QP_TW rows, 16 KB as int16
 * pairs) stay in L1 while every unpacked weight tile runs against them; whole K at 2048
 * was 64 KB, read from L2 once per weight tile (a K = 2048 Q8_0 prompt GEMM was a fifth
 * slower than before the weight tiles shared a pass). A multiple of 8: K-quant
 * super-blocks stay whole. */
#define QP_KB 16

/* One tile: rows v0 .. v0 + QP_W mv - 1 of the chunk x the weight tile's rows, blocks
 * [b0, b1) added into facc. */
QD_INL void tile(enum rs_ggml_type t, const struct qp_chunk *c, const struct qp_wtile *wt,
                 uint32_t K, uint32_t b0, uint32_t b1, int mv, uint32_t v0,
                 QP_VF facc[QP_NR][QP_MV])
{
#ifdef QP_QUAD
    if (c->quad && t == RS_GGML_Q4_0)
        tile_blocks_quad(c, wt, K, b0, b1, mv, v0, facc);
    else if (c->quad)
        tile_super_quad(c, wt, K, b0, b1, mv, v0, t == RS_GGML_Q5_K, facc);
    else
#endif
        if (kq_span(t) == KQ_BLOCK)
        tile_blocks(c, wt, K, b0, b1, mv, v0, facc);
    else
        tile_super(c, wt, K, b0, b1, mv, v0, t != RS_GGML_Q6_K, facc);
}

/* Activation rows v0 .. v0 + QP_W mv - 1 against the nr weight rows unpacked in wt, pass by
 * pass over K (each output's terms still added in block order), into out column by column
 * (QP_TW floats a column). mv is a constant at each call: with it variable, gcc copied each
 * column with a rep movsq (4 % of a Q4_0 prompt's tile time). */
QD_INL void tile_rows(enum rs_ggml_type t, const struct qp_chunk *c, const struct qp_wtile *wt,
                      uint32_t K, int mv, uint32_t v0, uint32_t nr, QP_VF facc[QP_G][QP_NR][QP_MV],
                      float *out)
{
    for (uint32_t g = 0; g * QP_NR < nr; g++)
        QP_UNROLL for (int r = 0; r < QP_NR; r++)
            QP_UNROLL for (int j = 0; j < mv; j++)
                facc[g][r][j] = QP_ZF();
    for (uint32_t b0 = 0; b0 < K / KQ_BLOCK; b0 += QP_KB) {
        uint32_t b1 = K / KQ_BLOCK - b0 < QP_KB ? K / KQ_BLOCK : b0 + QP_KB;
        for (uint32_t g = 0; g * QP_NR < nr; g++)
            tile(t, c, wt + g, K, b0, b1, mv, v0, facc[g]);
    }
    for (uint32_t o = 0; o < nr; o++)
        QP_UNROLL for (int j = 0; j < mv; j++)
            QP_STF(out + (size_t)o * QP_TW + QP_W * j, facc[o / QP_NR][o % QP_NR][j]);
}

/* y[l][c] = out[c][l] for 8 rows x 8 columns (out: QP_TW floats a column), or y += that. */
QD_INL void flush8x8(const float *out, float *y, size_t ldy, int accumulate)
{
    __m256 r[8], u[8];
    for (int i = 0; i < 8; i++)
        r[i] = _mm256_loadu_ps(out + (size_t)i * QP_TW);
    for (int i = 0; i < 8; i += 2) {
        u[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        u[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(u[i], u[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(u[i], u[i + 2], 0xEE);
        r[i + 2] = _mm256_shuffle_ps(u[i + 1], u[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(u[i + 1], u[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        __m256 lo = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20); /* row i */
        __m256 hi = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31); /* row i + 4 */
        float *y0 = y + (size_t)i * ldy, *y1 = y + (size_t)(i + 4) * ldy;
        if (accumulate) {
            lo = _mm256_add_ps(_mm256_loadu_ps(y0), lo);
            hi = _mm256_add_ps(_mm256_loadu_ps(y1), hi);
        }
        _mm256_storeu_ps(y0, lo);
        _mm256_storeu_ps(y1, hi);
    }
}

/* An activation tile's outputs (out: column o's QP_TW rows at o QP_TW) into its `rows` rows of
 * y from column 0, nr columns: 8 x 8 blocks transposed in registers, the edges one by one. */
QD_INL void flush_tile(const float *out, uint32_t rows, uint32_t nr, float *y, size_t ldy,
                       int accumulate)
{
    uint32_t r8 = rows / 8 * 8, c8 = nr / 8 * 8;
    for (uint32_t l = 0; l < r8; l += 8)
        for (uint32_t o = 0; o < c8; o += 8)
            flush8x8(out + (size_t)o * QP_TW + l, y + (size_t)l * ldy + o, ldy, accumulate);
    for (uint32_t l = 0; l < rows; l++)
        for (uint32_t o = l < r8 ? c8 : 0; o < nr; o++) {
            float *ym = y + (size_t)l * ldy + o;
            *ym = accumulate ? *ym + out[(size_t)o * QP_TW + l] : out[(size_t)o * QP_TW + l];
        }
}

/*
 * Every tile of one chunk against the weight tiles unpacked in wt, of weight
 * rows [n, n + nr) (nr <= QP_G QP_NR). An activation tile's outputs gather in
 * `out` and go to y when the tile is done: stored straight from each tile,
 * every row of y (8 KB apart at N = 2048, so all in one L1 set) took QP_NR
 * floats from each weight tile, and those stores were a quarter of the AVX2
 * Q4_K prompt's tile time (perf); flushed one float at a time, 13 % of the
 * Q4_0 prompt's.
 */
QD_TGT static void chunk_tiles(enum rs_ggml_type t, const struct qp_chunk *c,
                               const struct qp_wtile *wt, uint32_t K, uint32_t mc, float *y,
                               size_t ldy, uint32_t n, uint32_t nr, int accumulate)
{
    QP_VF facc[QP_G][QP_NR][QP_MV];
    float out[QP_TW * QP_G * QP_NR]; /* column-major: the tile's vectors stored whole */
    for (uint32_t v0 = 0; v0 < mc; v0 += QP_TW) {
        uint32_t rows = mc - v0 < QP_TW ? mc - v0 : QP_TW;
        int mv = (int)((rows + QP_W - 1) / QP_W);
        /* the outputs' lines, fetched while the tile computes: y is rarely cached, and each
         * row is a miss of its own (flushing them took 15 % of a Q4_0 prompt's tile time) */
        for (uint32_t l = 0; l < rows; l++) {
            const char *ym = (const char *)(y + (size_t)(v0 + l) * ldy + n);
            _mm_prefetch(ym, _MM_HINT_T0);
            _mm_prefetch(ym + (nr - 1) * sizeof(float), _MM_HINT_T0);
        }
#if QP_MV >= 3
        if (mv == 3)
            tile_rows(t, c, wt, K, 3, v0, nr, facc, out);
        else
#endif
            if (mv == 2)
            tile_rows(t, c, wt, K, 2, v0, nr, facc, out);
        else
            tile_rows(t, c, wt, K, 1, v0, nr, facc, out);
        flush_tile(out, rows, nr, y + (size_t)v0 * ldy + n, ldy, accumulate);
    }
}

/*
 * Weight rows [n, n + nr) into the tiles; rows [n + nr, n1) follow. Plain
 * rows one after the other. Interleaved rows (kern_mat_row) group by group
 * across the rows, the order of their bytes, and the next pass's bytes
 * prefetched a few lines per row unpacked: row by row, with no prefetch, the
 * hardware prefetcher did not follow them (perf of a batch-16 Q6_K decode: 56 %
 * of the unpacking samples on the first load of a super-block, waiting on
 * DRAM, and the pass a third slower than plain). Plain rows are one stream
 * across passes, which it follows. A column slice (--tp) skips the prefetch:
 * it would fetch other shards' bytes.
 */
QD_TGT static void unpack_pass(const struct kern_mat *w, uint32_t n, uint32_t nr, uint32_t n1,
                               const struct qp_wtile *wt)
{
    const uint32_t K = w->cols, ng = kq_padded_blocks(K) / 8;
    const uint32_t rows = (nr + QP_NR - 1) / QP_NR * QP_NR, per = w->interleave ? 1 : ng;
    const uint8_t *src[QP_G * QP_NR];
    size_t step = 0;
    for (uint32_t r = 0; r < rows; r++)
        src[r] = r < nr ? kern_mat_row(w, n + r, &step) : NULL;
    const char *pf = (const char *)w->data + (size_t)(n + nr) * w->row_bytes, *pf_end = pf;
    if (w->interleave && (size_t)rs_ggml_row_bytes(w->type, K) == w->row_bytes)
        pf_end += (size_t)(n1 - (n + nr) < nr ? n1 - (n + nr) : nr) * w->row_bytes;
    size_t pf_each = ((size_t)(pf_end - pf) / 64 + (size_t)ng * rows - 1) / ((size_t)ng * rows);
    for (uint32_t g = 0; g < ng; g += per)
        for (uint32_t r = 0; r < rows; r++) {
            for (size_t l = 0; l < pf_each && pf < pf_end; l++, pf += 64)
                _mm_prefetch(pf, _MM_HINT_T0);
            unpack_row(w->type, src[r], step, K, g, g + per, &wt[r / QP_NR], (int)(r % QP_NR));
        }
}

int QP_PREFIX(gemm)(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                    float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate, void *scratch)
{
    if (!kq_type_supported(w->type))
        return -1;
    uint32_t K = w->cols;
    struct qp_chunk c;
    struct qp_wtile wt[QP_G];
    struct kq_act a;
    layout(scratch, w->type, K, &c, wt, &a);
    for (uint32_t m0 = 0; m0 < n_rows; m0 += QP_MC) {
        uint32_t mc = n_rows - m0 < QP_MC ? n_rows - m0 : QP_MC;
        chunk_fill(&c, &a, x, ldx, m0, mc, K, kq_span(w->type));
        for (uint32_t n = n0; n < n1; n += QP_G * QP_NR) {
            uint32_t nr = n1 - n < QP_G * QP_NR ? n1 - n : QP_G * QP_NR;
            unpack_pass(w, n, nr, n1, wt);
            chunk_tiles(w->type, &c, wt, K, mc, y + (size_t)m0 * ldy, ldy, n, nr, accumulate);
        }
    }
    return 0;
}

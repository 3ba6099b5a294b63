/* SPDX-License-Identifier: MIT */
/*
 * Y = X W^T through the integer dot (qdot.h): activation rows quantized in
 * chunks of KQ_ROWS into the thread's scratch, then each weight row of the
 * slice dotted with up to KQ_DOT_ROWS rows at a time: unpacked in registers by the
 * SIMD variants, into scratch by the portable one; one activation row against
 * 8 weight rows at a time where the variant has a dot8: over interleaved rows
 * (kern_mat_row; every quantized type with AVX2) for every activation row,
 * over plain ones for a single row where it is faster there (Q4_0). Each
 * output is one kq dot of its own weight row and its own activation row, so
 * chunking, slicing and the batch never change a bit. With AVX-512 VNNI and
 * at least KQ_PANEL_MIN_ROWS rows, the panel GEMM (qdot_panel.c) computes the
 * same bits faster; with AVX2, the 256-bit panel (qdot_panel_avx2.c).
 */
#include <string.h>

#include "launcherd/engine/qdot.h"

#define KQ_ROWS 16 /* activation rows quantized per chunk: 16 x ~1.2 K bytes stay in L1/L2 */

typedef void (*kq_raw_fn)(const uint8_t *, const struct kq_act *const *, int, uint32_t, float *);
typedef void (*kq_raw8_fn)(const uint8_t *, size_t, size_t, const struct kq_act *, uint32_t,
                           float *);

/* Room for one weight row gathered out of an interleaved group: Q8_0's, the widest type
 * (rounded to 32: the activation rows after it start aligned). */
static size_t plain_row_bytes(uint32_t K)
{
    return ((size_t)rs_ggml_row_bytes(RS_GGML_Q8_0, K) + 31) & ~(size_t)31;
}

size_t kern_qgemm_scratch_bytes(uint32_t K)
{
    size_t rows = kq_wrow_bytes(K) + KQ_ROWS * kq_act_bytes(K) + plain_row_bytes(K) + 32;
    size_t p512 = kq_panel512_scratch_bytes(K), p256 = kq_panel_avx2_scratch_bytes(K);
    size_t panel = p512 > p256 ? p512 : p256;
    return rows > panel ? rows : panel;
}

/* The SIMD entry of type t in tab, or NULL. */
static const struct kq_raw_dot *raw_in(const struct kq_raw_dot *tab, enum rs_ggml_type t)
{
    for (; tab != NULL && tab->dot != NULL; tab++)
        if (tab->type == t)
            return tab;
    return NULL;
}

/* The SIMD dots of type t for isa (NULL: the portable unpack-then-dot). AVX-512: the
 * 512-bit dots first, the 256-bit VNNI ones for the rest. */
static const struct kq_raw_dot *raw_for(enum kern_isa isa, enum rs_ggml_type t)
{
    const struct kq_raw_dot *e = isa == KERN_AVX512 ? raw_in(kq_vnni512_table, t) : NULL;
    if (e == NULL)
        e = raw_in(isa == KERN_AVX512 ? kq_vnni_table : isa == KERN_AVX2 ? kq_avx2_table : NULL, t);
    return e;
}

uint32_t kern_qdot_interleave(enum kern_isa isa, const struct kern_mat *w)
{
    const struct kq_raw_dot *e = w->qdot ? raw_for(isa, w->type) : NULL;
    return e != NULL && e->dot8 != NULL && w->rows % 8 == 0 ? 8 : 0;
}

/* Weight rows n .. n + 7 (row r's block b at row_step * r + block_step * b) against act, into
 * y[n ..]. */
static void dot8_into(kq_raw8_fn dot8, const struct kern_mat *w, uint32_t n, size_t row_step,
                      size_t block_step, const struct kq_act *act, float *y, int accumulate)
{
    float out[8];
    dot8((const uint8_t *)w->data + (size_t)n * w->row_bytes, row_step, block_step, act, w->cols,
         out);
    for (int r = 0; r < 8; r++)
        y[n + (uint32_t)r] = accumulate ? y[n + (uint32_t)r] + out[r] : out[r];
}

/* One activation row: weight rows 8 at a time through dot8, from n0; returns the first left. */
static uint32_t rows8(kq_raw8_fn dot8, const struct kern_mat *w, const struct kq_act *act,
                      float *y, uint32_t n0, uint32_t n1, int accumulate)
{
    uint32_t n = n0;
    for (; dot8 != NULL && n + 8 <= n1; n += 8)
        dot8_into(dot8, w, n, w->row_bytes, rs_ggml_type_size(w->type), act, y, accumulate);
    return n;
}

/* Weight row n (its bytes at row, plain) against the mr quantized rows at act. */
static void one_row(const struct kq_raw_dot *e, const struct kern_mat *w, const struct kq_wrow *wr,
                    const uint8_t *row, const struct kq_act *const *act, uint32_t mr, float *y,
                    size_t ldy, uint32_t n, int accumulate)
{
    kq_raw_fn raw = e != NULL ? e->dot : NULL;
    if (raw == NULL)
        kq_unpack_row(w->type, row, w->cols, wr);
    for (uint32_t r = 0; r < mr; r += KQ_DOT_ROWS) {
        int cnt = mr - r < KQ_DOT_ROWS ? (int)(mr - r) : KQ_DOT_ROWS;
        float out[KQ_DOT_ROWS];
        if (raw != NULL)
            raw(row, act + r, cnt, w->cols, out);
        else
            kq_dot_portable(w->type, wr, act + r, cnt, w->cols, out);
        for (int i = 0; i < cnt; i++) {
            float *ym = y + (size_t)(r + (uint32_t)i) * ldy + n;
            *ym = accumulate ? *ym + out[i] : out[i];
        }
    }
}

/*
 * Interleaved weights: whole groups through dot8 (rows8's bits), once per
 * activation row, the group's bytes still in L1 for the next; a row of a group
 * that [n0, n1) cuts is gathered into `plain` first.
 */
static void chunk_interleaved(const struct kq_raw_dot *e, const struct kern_mat *w,
                              const struct kq_wrow *wr, uint8_t *plain,
                              const struct kq_act *const *act, uint32_t mr, float *y, size_t ldy,
                              uint32_t n0, uint32_t n1, int accumulate)
{
    const uint32_t g = w->interleave;
    const size_t bb = rs_ggml_type_size(w->type), nb = w->cols / rs_ggml_block_size(w->type);
    for (uint32_t n = n0; n < n1;) {
        if (e != NULL && e->dot8 != NULL && g == 8 && n % g == 0 && n + g <= n1) {
            for (uint32_t m = 0; m < mr; m++)
                dot8_into(e->dot8, w, n, bb, g * bb, act[m], y + (size_t)m * ldy, accumulate);
            n += g;
            continue;
        }
        size_t step;
        const uint8_t *src = kern_mat_row(w, n, &step);
        for (size_t b = 0; b < nb; b++)
            memcpy(plain + b * bb, src + b * step, bb);
        one_row(e, w, wr, plain, act, mr, y, ldy, n, accumulate);
        n++;
    }
}

/* Weight rows [n0, n1) against the mr quantized rows at act, into y's rows. */
static void chunk(const struct kq_raw_dot *e, const struct kern_mat *w, const struct kq_wrow *wr,
                  uint8_t *plain, const struct kq_act *const *act, uint32_t mr, float *y,
                  size_t ldy, uint32_t n0, uint32_t n1, int accumulate)
{
    if (w->interleave != 0) {
        chunk_interleaved(e, w, wr, plain, act, mr, y, ldy, n0, n1, accumulate);
        return;
    }
    if (mr == 1 && e != NULL && e->dot8_plain)
        n0 = rows8(e->dot8, w, act[0], y, n0, n1, accumulate);
    for (uint32_t n = n0; n < n1; n++)
        one_row(e, w, wr, (const uint8_t *)w->data + (size_t)n * w->row_bytes, act, mr, y, ldy,
                n, accumulate);
}

void kern_qgemm(enum kern_isa isa, const struct kern_mat *w, const float *x, size_t ldx,
                uint32_t n_rows, float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate,
                void *scratch)
{
    if (n_rows >= KQ_PANEL_MIN_ROWS && isa == KERN_AVX512 &&
        kq_panel512_gemm(w, x, ldx, n_rows, y, ldy, n0, n1, accumulate, scratch) == 0)
        return;
    if (n_rows >= KQ_PANEL_MIN_ROWS && isa == KERN_AVX2 &&
        kq_panel_avx2_gemm(w, x, ldx, n_rows, y, ldy, n0, n1, accumulate, scratch) == 0)
        return;
    uint32_t K = w->cols;
    uint8_t *base = (uint8_t *)(((uintptr_t)scratch + 31) & ~(uintptr_t)31);
    struct kq_wrow wr;
    kq_wrow_at(base, K, &wr);
    uint8_t *plain = base + kq_wrow_bytes(K), *actmem = plain + plain_row_bytes(K);
    struct kq_act acts[KQ_ROWS];
    const struct kq_act *ap[KQ_ROWS];
    const struct kq_raw_dot *raw = raw_for(isa, w->type);
    for (uint32_t m0 = 0; m0 < n_rows; m0 += KQ_ROWS) {
        uint32_t mr = n_rows - m0 < KQ_ROWS ? n_rows - m0 : KQ_ROWS;
        for (uint32_t r = 0; r < mr; r++) {
            kq_act_at(actmem + r * kq_act_bytes(K), K, &acts[r]);
            kq_quantize_row(x + (size_t)(m0 + r) * ldx, K, kq_span(w->type), &acts[r]);
            ap[r] = &acts[r];
        }
        chunk(raw, w, &wr, plain, ap, mr, y + (size_t)m0 * ldy, ldy, n0, n1, accumulate);
    }
}

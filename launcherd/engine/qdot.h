/* SPDX-License-Identifier: MIT */
/*
 * Private to the kernels: integer dot products for quantized weights, as
 * llama.cpp computes them. An activation row is quantized per 32-value block
 * (float d = amax / 127, int8 q = round-half-even(x * 127 / amax), and the
 * block's sum of q): a function of that block alone, so of the row alone,
 * whatever else is in the batch and however the row is split (--tp).
 * For the K-quants the activation scale spans the 256-value super-block
 * (one d for its 8 blocks, as ggml's Q8_K), so the integer sum runs over the
 * whole super-block. A weight row is unpacked per 32-value block into int8
 * levels, two 16-value integer multipliers (the K-quants' sub-block scales; 1
 * otherwise), a float scale ws, a float offset scale wm and an integer
 * offset mi (Q4_K/Q5_K's dmin and m; 0 otherwise). Then
 *   isum_b = sc0 * sum_{i<16} w_i x_i + sc1 * sum_{i>=16} w_i x_i   (exact int32)
 *   Q8_0, Q4_0: t_b = (ws_b * dx_b) * isum_b, added in increasing b into one float
 *     accumulator that starts at +0 (so it is never -0, and the +0 terms of padding
 *     blocks leave it unchanged: a variant may add them or skip them);
 *   K-quants, super-block s of blocks b = 8s .. 8s + 7 (exact int32 sums, then float):
 *     t_s = ((ws * dx) * (float)sum_b isum_b) - ((wm * dx) * (float)sum_b mi_b xsum_b),
 *     added in increasing s into one float accumulator.
 * The integer part is exact and the float part is elementwise IEEE arithmetic
 * without contraction, so the portable, AVX2 and AVX-512 VNNI variants give the
 * same bits (the kernel tests check it), and the result does not depend on tiling.
 * One float accumulator per output (not a lane per block) is what lets the
 * AVX-512 panel GEMM keep a whole tile's outputs in registers.
 * Leaves out: types without a weight level format (F32, F16, BF16 use the float GEMM).
 */
#ifndef RS_ENGINE_QDOT_H
#define RS_ENGINE_QDOT_H

#include <stddef.h>
#include <stdint.h>

#include "launcherd/engine/kernels.h"

#define KQ_BLOCK 32 /* values per activation block */

/* One quantized activation row; arrays hold nbp = blocks rounded up to 8 (zero-padded). */
struct kq_act {
    int8_t *q;  /* nbp * 32 levels */
    float *d;   /* nbp scales */
    int32_t *s; /* nbp block sums of q */
    int16_t *h; /* nbp * 2 sums of each 16 levels (the Q6_K row dots' correction for levels
                   read without their -32 offset; qdot_simd.h) */
};

/* One unpacked weight row, same padding. */
struct kq_wrow {
    int8_t *q;   /* nbp * 32 levels */
    int16_t *sc; /* nbp * 16: the multiplier of each pair of levels (maddubs lane order) */
    float *ws;   /* nbp */
    float *wm;   /* nbp */
    int16_t *mi; /* nbp */
};

/* Blocks of a K-value row, padded to a multiple of 8. */
static inline uint32_t kq_padded_blocks(uint32_t K)
{
    return (K / KQ_BLOCK + 7) & ~7u;
}

/* Bytes of one kq_act / kq_wrow of K values (each array 32-byte aligned inside). */
size_t kq_act_bytes(uint32_t K);
size_t kq_wrow_bytes(uint32_t K);

/* Lays out a kq_act / kq_wrow in `mem` (32-byte aligned, kq_*_bytes(K) bytes). */
void kq_act_at(void *mem, uint32_t K, struct kq_act *a);
void kq_wrow_at(void *mem, uint32_t K, struct kq_wrow *w);

/* Values one activation scale spans for weights of type t: 256 for the K-quants, else 32. */
uint32_t kq_span(enum rs_ggml_type t);

/* Quantizes K floats (a multiple of span, 32 or 256): one d per span, repeated in d[] for
 * each of its 32-value blocks. A span holding an inf or a NaN gives q = 0 and a non-finite d
 * (so the dot is non-finite, as the exact path's would be). */
void kq_quantize_row(const float *x, uint32_t K, uint32_t span, const struct kq_act *a);

/* The same with the given kernels (KERN_PORTABLE: scalar only), for the tests: every
 * variant gives the same levels, scales and sums. */
void kq_quantize_row_on(enum kern_isa isa, const float *x, uint32_t K, uint32_t span,
                        const struct kq_act *a);

/* AVX2: one span of finite values quantized as kq_quantize_row does (blocks of 32 from q, d,
 * s); -1, nothing written, when the span holds an inf or a NaN (the scalar code's case). */
int kq_avx2_quantize_span(const float *x, uint32_t span, int8_t *q, float *d, int32_t *s);

/* 1 when type t has an integer dot product. */
int kq_type_supported(enum rs_ggml_type t);

/* Unpacks one row of K values of type t (kq_type_supported) at src. */
void kq_unpack_row(enum rs_ggml_type t, const uint8_t *src, uint32_t K, const struct kq_wrow *w);

/* The dot of one unpacked weight row of type t with n activation rows (n <= KQ_DOT_ROWS). */
#define KQ_DOT_ROWS 8
void kq_dot_portable(enum rs_ggml_type t, const struct kq_wrow *w, const struct kq_act *const *x, int n, uint32_t K,
                     float *out);

/*
 * A SIMD variant's dot straight from a weight row's stored bytes (unpacked in
 * registers, same bits as kq_unpack_row + kq_dot_portable). Tables end with
 * dot == NULL; a variant the build or CPU lacks has only that entry.
 */
struct kq_raw_dot {
    enum rs_ggml_type type;
    void (*dot)(const uint8_t *row, const struct kq_act *const *x, int n, uint32_t K, float *out);
    /* optional: 8 weight rows against one activation row, out[r] the same bits as dot(row r)
     * (decode: one vector lane per weight row); row r's block b at row + r * row_step +
     * b * block_step (plain rows: row_bytes, the block's bytes; interleaved: the reverse) */
    void (*dot8)(const uint8_t *row, size_t row_step, size_t block_step, const struct kq_act *x,
                 uint32_t K, float *out);
    int dot8_plain; /* 1: dot8 beats dot over plain rows too (Q4_0); 0: only over interleaved
                       ones (the K-quants: 8 streams were slower from DRAM than one) */
};
extern const struct kq_raw_dot kq_avx2_table[], kq_vnni_table[], kq_vnni512_table[];

/*
 * The panel GEMMs (qdot_panel.h) for many activation rows, AVX-512 VNNI
 * (qdot_panel.c) and AVX2 (qdot_panel_avx2.c): the same outputs, bit for bit,
 * as the row dots. Each returns 0 when it computed y, or -1 when the build or
 * the type has no panel path (the caller then runs the row dots); call one
 * only when the CPU has its instructions.
 */
#define KQ_PANEL_MIN_ROWS 8 /* fewer rows: the row dots are faster (bench/decode) */
size_t kq_panel512_scratch_bytes(uint32_t K);
int kq_panel512_gemm(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                     float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate, void *scratch);
size_t kq_panel_avx2_scratch_bytes(uint32_t K);
int kq_panel_avx2_gemm(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                       float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate,
                       void *scratch);

/* Bytes of per-thread scratch kern_qgemm needs for K inputs (any alignment). */
size_t kern_qgemm_scratch_bytes(uint32_t K);

/* kern_gemm for a matrix with w->qdot set (same contract; scratch: kern_qgemm_scratch_bytes). */
void kern_qgemm(enum kern_isa isa, const struct kern_mat *w, const float *x, size_t ldx,
                uint32_t n_rows, float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate,
                void *scratch);

#endif

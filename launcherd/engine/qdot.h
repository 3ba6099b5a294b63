/* SPDX-License-Identifier: MIT */
/*
 * Private to the kernels: integer dot products for quantized weights, as
 * llama.cpp computes them. An activation row is quantized per 32-value block
 * (float d = amax / 127, int8 q = round-half-even(x * 127 / amax), and the
 * block's sum of q): a function of that block alone, so of the row alone,
 * whatever else is in the batch and however the row is split (--tp).
 * A weight row is unpacked per 32-value block into int8 levels, two 16-value
 * integer multipliers (the K-quants' sub-block scales; 1 otherwise), a float
 * scale ws and a float offset wm (Q4_K/Q5_K's dmin * m; 0 otherwise). Then
 *   isum_b = sc0 * sum_{i<16} w_i x_i + sc1 * sum_{i>=16} w_i x_i   (exact int32)
 *   t_b    = ((ws_b * dx_b) * isum_b) - ((wm_b * dx_b) * xsum_b)    (float, that order)
 *   lane b % 8 of an 8-lane accumulator adds t_b in increasing b (blocks padded to a
 *   multiple of 8 with t = +0), and the lanes are reduced by kernels.h's fixed tree.
 * The integer part is exact and the float part is elementwise IEEE arithmetic
 * without contraction, so the portable, AVX2 and AVX-512 VNNI variants give the
 * same bits (the kernel tests check it), and the result does not depend on tiling.
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
};

/* One unpacked weight row, same padding. */
struct kq_wrow {
    int8_t *q;   /* nbp * 32 levels */
    int16_t *sc; /* nbp * 16: the multiplier of each pair of levels (maddubs lane order) */
    float *ws;   /* nbp */
    float *wm;   /* nbp */
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

/* Quantizes K floats (a multiple of 32). Non-finite blocks give q = 0 and a non-finite d. */
void kq_quantize_row(const float *x, uint32_t K, const struct kq_act *a);

/* 1 when type t has an integer dot product. */
int kq_type_supported(enum rs_ggml_type t);

/* Unpacks one row of K values of type t (kq_type_supported) at src. */
void kq_unpack_row(enum rs_ggml_type t, const uint8_t *src, uint32_t K, const struct kq_wrow *w);

/* The dot of one unpacked weight row with n activation rows (n <= KQ_DOT_ROWS), into out[0..n). */
#define KQ_DOT_ROWS 8
void kq_dot_portable(const struct kq_wrow *w, const struct kq_act *const *x, int n, uint32_t K,
                     float *out);

/*
 * A SIMD variant's dot straight from a weight row's stored bytes (unpacked in
 * registers, same bits as kq_unpack_row + kq_dot_portable). Tables end with
 * dot == NULL; a variant the build or CPU lacks has only that entry.
 */
struct kq_raw_dot {
    enum rs_ggml_type type;
    void (*dot)(const uint8_t *row, const struct kq_act *const *x, int n, uint32_t K, float *out);
};
extern const struct kq_raw_dot kq_avx2_table[], kq_vnni_table[];

/* Bytes of per-thread scratch kern_qgemm needs for K inputs (any alignment). */
size_t kern_qgemm_scratch_bytes(uint32_t K);

/* kern_gemm for a matrix with w->qdot set (same contract; scratch: kern_qgemm_scratch_bytes). */
void kern_qgemm(enum kern_isa isa, const struct kern_mat *w, const float *x, size_t ldx,
                uint32_t n_rows, float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate,
                void *scratch);

#endif

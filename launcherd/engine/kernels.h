/* SPDX-License-Identifier: MIT */
/*
 * CPU kernels of the forward pass: matrix times activations over F32, F16,
 * BF16, Q8_0, Q4_0, Q4_K, Q5_K and Q6_K weights (widened to F32 on the fly,
 * or, for the quantized types, integer dot products over activations
 * quantized per 32-value block: qdot.h), paged
 * attention for one query row (causal, optionally a sliding window and a
 * score soft-cap), and the row-local ops (RMSNorm, RoPE in both pairings,
 * SwiGLU, GeGLU, soft-cap).
 * Batch invariance is a property of these kernels: see "Reduction order" below.
 * Leaves out: Q4_1, Q5_0/Q5_1, Q2_K/Q3_K and the IQ types (launcherd/README.md),
 * AVX-512 float kernels other than the prompt GEMM (attention and decode run AVX2's).
 */
#ifndef RS_ENGINE_KERNELS_H
#define RS_ENGINE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "common/gguf.h"

/*
 * Reduction order. Every output element is computed by one fixed sequence of
 * float operations that depends only on the length of the reduction, never on
 * how many rows are in the batch, how the work is tiled or which thread runs it:
 *   dot(w, x) over K: lane j of an 8-lane accumulator sums w[k]*x[k] for
 *   k = j, j+8, ... in increasing k (a zero-padded last step covers K % 8);
 *   the lanes are then added in the fixed tree ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)).
 * Weights are widened to F32 by one fixed function per element: exactly for
 * F16, BF16, Q8_0 (d*q), Q4_0 (d*(q-8)) and Q6_K ((d*sc)*q, at most 23
 * significant bits); Q4_K's (d*sc)*q - dmin*m has an exact product and one
 * rounding, in every variant (the value ggml's dequantize_row_q4_K gives).
 * So a quantized matrix gives bit for bit the result of the F32 matrix
 * holding its dequantized values. The AVX2 variant uses FMA for each step;
 * the portable variant a rounded multiply then add, so the two differ in the
 * last bits (the test checks a tolerance) and a process uses one. The AVX-512
 * prompt GEMM runs two of those 8-lane accumulators per register, so it gives
 * AVX2's bits exactly.
 */

/* Instruction-set variant, chosen once at model load. */
enum kern_isa {
    KERN_PORTABLE = 0, /* plain C, any x86-64 (or other) CPU */
    KERN_AVX2 = 1,     /* AVX2 + FMA + F16C */
    KERN_AVX512 = 2,   /* AVX2 + AVX-512 F/BW/VL/VNNI: the prompt GEMM in 512-bit registers
                          (same bits as AVX2's), VNNI integer dots, AVX2's other kernels */
};

/* The best variant this CPU runs. Any thread. */
enum kern_isa kern_isa_detect(void);

/* 1 when this CPU can run `isa`. */
int kern_isa_supported(enum kern_isa isa);

/* "portable", "avx2" or "avx512". */
const char *kern_isa_name(enum kern_isa isa);

/* A weight matrix: `rows` output features of `cols` inputs each (ggml ne[1] x ne[0]). */
struct kern_mat {
    const void *data;       /* borrowed: rows * row_bytes bytes (usually the mmap'd file) */
    enum rs_ggml_type type; /* F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K or Q6_K */
    uint32_t rows;
    uint32_t cols;    /* a multiple of the type's block: 32 (Q8_0, Q4_0), 256 (K-quants) */
    size_t row_bytes; /* rs_ggml_row_bytes(type, cols) */
    int qdot;         /* 1: integer dot products over quantized activations (qdot.h; only for
                         types kern_qdot_supported accepts); 0: widened to F32 (--exact-dot) */
    uint32_t interleave; /* 0: row after row; 8 (kern_qdot_interleave): rows in groups of 8,
                            block by block (kern_mat_row); only the integer dot reads those */
};

/*
 * Row n's first block, and in *step the bytes from one of its blocks to the
 * next. Interleaved, group n / 8 holds its 8 rows' block 0s, then their block
 * 1s, ...: a batch-1 dot over 8 rows reads one stream instead of 8, which the
 * hardware prefetcher follows at the memory's speed (launcherd/README.md).
 */
static inline const uint8_t *kern_mat_row(const struct kern_mat *w, uint32_t n, size_t *step)
{
    const uint8_t *base = (const uint8_t *)w->data;
    if (w->interleave == 0) {
        *step = rs_ggml_type_size(w->type);
        return base + (size_t)n * w->row_bytes;
    }
    size_t bb = rs_ggml_type_size(w->type), g = w->interleave;
    *step = g * bb;
    return base + (size_t)(n / g) * g * w->row_bytes + (size_t)(n % g) * bb;
}

/* Columns [c0, c0 + n) of every row of w (c0 at a block start), as a matrix of its own. */
static inline struct kern_mat kern_mat_cols(const struct kern_mat *w, uint32_t c0, uint32_t n)
{
    struct kern_mat v = *w;
    size_t off = (size_t)rs_ggml_row_bytes(w->type, c0); /* interleaved: a group's c0 blocks */
    v.data = (const uint8_t *)w->data + (w->interleave != 0 ? off * w->interleave : off);
    v.cols = n;
    return v;
}

/*
 * The rows of a group kern_gemm with w->qdot reads interleaved on variant
 * isa (8: a type whose 8-row decode dot is built, and whole groups of rows),
 * or 0. The caller then lays the bytes out with kern_interleave_rows.
 */
uint32_t kern_qdot_interleave(enum kern_isa isa, const struct kern_mat *w);

/*
 * Reorders w's bytes at data (writable; w->interleave still 0) into groups of
 * `group` rows, block by block. In place, through a buffer of one group.
 * RS_ENOMEM leaves the rows as they were.
 */
rs_err kern_interleave_rows(const struct kern_mat *w, void *data, uint32_t group);

/* 1 when weights of type t have an integer dot product (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K). */
int kern_qdot_supported(enum rs_ggml_type t);

/*
 * 1 when the default (RS_MODEL_DOT_AUTO) multiplies weights of type t by
 * integer dots on variant isa: where bench/decode measured them faster at
 * batch 1 and no slower at batch 16 than the exact path (launcherd/README.md).
 */
int kern_qdot_preferred(enum kern_isa isa, enum rs_ggml_type t);

/* 1 when the GEMM handles weights of type t. */
int kern_type_supported(enum rs_ggml_type t);

/*
 * Widens row `row` of w into w->cols floats at dst: the values the GEMM
 * multiplies by (same bits from every variant). For embedding lookups and tests.
 */
void kern_widen_row(enum kern_isa isa, const struct kern_mat *w, uint32_t row, float *dst);

/* Floats of per-thread scratch kern_gemm needs for matrices of `cols` inputs. */
size_t kern_gemm_scratch_floats(uint32_t cols);

/*
 * Y = X W^T over a slice of output features:
 *   y[m * ldy + n] (+)= dot(row n of w, x + m * ldx)   for m < n_rows, n0 <= n < n1
 * (with w->qdot, dot is qdot.h's integer dot of the quantized row instead)
 * accumulate = 0 stores the dot; 1 adds it to the value already in y (the
 * residual connection; the dot is rounded first, then added). x holds
 * n_rows rows of w->cols floats; x and y must not overlap. scratch:
 * kern_gemm_scratch_floats(w->cols) floats owned by the calling thread.
 * Any thread; threads may work on disjoint [n0, n1) slices concurrently.
 */
void kern_gemm(enum kern_isa isa, const struct kern_mat *w, const float *x, size_t ldx,
               uint32_t n_rows, float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate,
               float *scratch);

/*
 * Paged KV cache geometry of one layer, as the attention kernel reads it.
 * Position t of a sequence lives in block table[t / block_size], slot
 * t % block_size; inside a block, KV head h's vectors for the block's slots
 * are contiguous: k + block * block_stride + (h * block_size + slot) * head_dim.
 */
struct kern_kv_layout {
    const float *k;      /* this layer's keys, n_blocks * block_stride floats */
    const float *v;      /* values, same layout */
    size_t block_stride; /* floats per block per layer: n_kv_heads * block_size * head_dim */
    uint32_t block_size; /* tokens per block */
    uint32_t head_dim;
};

/*
 * Position t's key or value row (base: kv->k or kv->v) through the block
 * table; off: the KV head's offset in a block (kv_head x block_size x
 * head_dim), plus any offset within the row. The block's later positions follow it.
 */
static inline const float *kern_kv_row(const struct kern_kv_layout *kv, const float *base,
                                       const uint32_t *table, size_t off, uint32_t t)
{
    uint32_t bs = kv->block_size;
    return base + table[t / bs] * kv->block_stride + off + (size_t)(t % bs) * kv->head_dim;
}

/* What one query row attends to, and how its scores are formed. */
struct kern_attn {
    uint32_t first; /* first visible position (a sliding window's start); 0: from the start */
    uint32_t n_pos; /* positions first .. n_pos - 1 are visible (the query's own is n_pos - 1) */
    float scale;    /* multiplies each q . k */
    float softcap;  /* > 0: a scaled score s becomes softcap * tanh(s / softcap); 0: none */
};

/*
 * Attention of one query row for the n_group query heads that share KV head
 * kv_head (GQA), over positions a->first .. a->n_pos - 1 of one sequence:
 *   out[g] = sum_t softmax_t(cap(scale * q[g] . k_t)) v_t
 * q and out: n_group * head_dim floats. table: the sequence's block table,
 * at least ceil(n_pos / block_size) entries, all already validated. scores:
 * scratch of n_group * (n_pos - first) floats. Reductions run in position
 * order, so a row's result does not depend on what else is in the batch.
 */
void kern_attention(enum kern_isa isa, const struct kern_kv_layout *kv, const uint32_t *table,
                    uint32_t kv_head, uint32_t n_group, const struct kern_attn *a,
                    const float *q, float *scores, float *out);

/*
 * kern_attention for two query rows of one sequence at consecutive positions:
 * row 0 sees a's span, row 1 the same span and one position more (n_pos).
 * Same bits as two kern_attention calls; the AVX2 kernel loads each key and
 * value once for both rows. scores: n_group * (2 (n_pos - first) + 1) floats.
 */
void kern_attention2(enum kern_isa isa, const struct kern_kv_layout *kv, const uint32_t *table,
                     uint32_t kv_head, uint32_t n_group, const struct kern_attn *a,
                     const float *q0, const float *q1, float *scores, float *out0, float *out1);

/* out[i] = x[i] * w[i] / sqrt(mean(x^2) + eps), n values; ISA-independent. */
void kern_rmsnorm(const float *x, const float *w, uint32_t n, float eps, float *out);

/*
 * Rotation table for one position: cs[2i] = cos(theta_i), cs[2i+1] =
 * sin(theta_i), theta_i = pos * pos_scale * base^(-2i / rope_dim) / ff[i]
 * (ff = freq_factors, or 1 when NULL), for i < rope_dim / 2, computed in
 * double precision and rounded once.
 */
void kern_rope_table(uint32_t pos, uint32_t rope_dim, float base, float pos_scale,
                     const float *freq_factors, float *cs);

/*
 * Rotates one head's first rope_dim values by the table from
 * kern_rope_table: pair i (i < rope_dim / 2) is (x[2i], x[2i+1]) for the
 * "normal" pairing (llama GGUFs, whose converter permutes Q/K for it), or
 * (x[i], x[i + rope_dim/2]) when neox (rotate-half: qwen2/3, gemma, phi3).
 */
void kern_rope_head(float *x, uint32_t rope_dim, int neox, const float *cs);

/*
 * g[i] = silu(g[i]) * u[i], n values (SwiGLU). The AVX2 variant uses its own
 * vector e^x (attn_avx2.c, within 1 ulp of e^x), the portable one libm's
 * expf; each is one fixed function per element.
 */
void kern_swiglu(enum kern_isa isa, float *g, const float *u, uint32_t n);

/*
 * g[i] = gelu(g[i]) * u[i], n values (GeGLU), with the tanh form
 * gelu(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) = x / (1 + e^(-2 sqrt(2/pi)(...))):
 * the portable variant evaluates the first with tanhf, the AVX2 one the
 * second with its e^x. One fixed function per element each.
 */
void kern_geglu(enum kern_isa isa, float *g, const float *u, uint32_t n);

/*
 * x[i] = cap * tanh(x[i] * (1 / cap)), n values (the final-logit soft-cap,
 * and the attention scores' inside kern_attention): the portable variant
 * with libm's tanhf, the AVX2 one with its vector tanh (from its e^x).
 */
void kern_softcap(enum kern_isa isa, float *x, uint32_t n, float cap);

/* --- variants, called through the dispatchers above ----------------------- */
void kern_gemm_portable(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                        float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate,
                        float *scratch);
void kern_gemm_avx2(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                    float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate,
                    float *scratch);
void kern_gemm_avx512(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                      float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate,
                      float *scratch);
size_t kern_gemm_avx512_scratch_floats(uint32_t cols);
void kern_attention_portable(const struct kern_kv_layout *kv, const uint32_t *table,
                             uint32_t kv_head, uint32_t n_group, const struct kern_attn *a,
                             const float *q, float *scores, float *out);
void kern_attention_avx2(const struct kern_kv_layout *kv, const uint32_t *table,
                         uint32_t kv_head, uint32_t n_group, const struct kern_attn *a,
                         const float *q, float *scores, float *out);
void kern_attention2_portable(const struct kern_kv_layout *kv, const uint32_t *table,
                              uint32_t kv_head, uint32_t n_group, const struct kern_attn *a,
                              const float *q0, const float *q1, float *scores, float *out0,
                              float *out1);
void kern_attention2_avx2(const struct kern_kv_layout *kv, const uint32_t *table,
                          uint32_t kv_head, uint32_t n_group, const struct kern_attn *a,
                          const float *q0, const float *q1, float *scores, float *out0,
                          float *out1);
void kern_swiglu_portable(float *g, const float *u, uint32_t n);
void kern_geglu_portable(float *g, const float *u, uint32_t n);
void kern_softcap_portable(float *x, uint32_t n, float cap);
void kern_softcap_avx2(float *x, uint32_t n, float cap);
void kern_geglu_avx2(float *g, const float *u, uint32_t n);
void kern_widen_row_portable(const struct kern_mat *w, uint32_t row, float *dst);
void kern_widen_row_avx2(const struct kern_mat *w, uint32_t row, float *dst);
void kern_swiglu_avx2(float *g, const float *u, uint32_t n);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * Internal to the CUDA backend (launcherd/cuda/): the backend state, the
 * error-check macro, and the C entry points of the kernels (each .cu file
 * launches its own kernels on the given stream and returns the launch
 * status). Host files are C11 (gcc/clang); .cu files are CUDA C++ that
 * export these functions with C linkage. Shapes follow the CPU backend
 * (cpu_forward.h): rows are batch tokens, matrices are `rows` outputs of
 * `cols` inputs in ggml order, the paged KV cache has the CPU layout.
 */
#ifndef RS_CUDA_IMPL_H
#define RS_CUDA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "common/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Logs the failing call with file:line and the CUDA error text; evaluates to RS_EDEVICE. */
rs_err cu_fail(const char *file, int line, const char *what, cudaError_t e);

#define RS_CUDA_CHECK(call)                                                                        \
    do {                                                                                           \
        cudaError_t rs_cuda_e_ = (call);                                                           \
        if (rs_cuda_e_ != cudaSuccess)                                                             \
            return cu_fail(__FILE__, __LINE__, #call, rs_cuda_e_);                                 \
    } while (0)

/* Weight types the kernels read (the ggml codes, as enum rs_ggml_type). */
#define CU_T_F32 0
#define CU_T_F16 1
#define CU_T_Q8_0 8
#define CU_T_BF16 30

/* A weight matrix in device memory: rows outputs of cols inputs, row_bytes apart. */
struct cu_mat {
    const void *data;
    int type; /* CU_T_* */
    uint32_t rows, cols;
    size_t row_bytes;
};

/* Per-step geometry the attention and KV kernels read (device pointers). */
struct cu_rows {
    const int32_t *tok;      /* (rows) token ids */
    const uint32_t *pos;     /* (rows) positions */
    const uint32_t *seq;     /* (rows) sequence index */
    const uint32_t *tab_off; /* (n_seqs) offset of each sequence's table in tables */
    const uint32_t *tables;  /* packed block tables */
    const uint32_t *want;    /* (n_want) row whose logits are wanted */
    uint32_t n_rows, n_want;
};

/* Paged KV geometry of one layer (device pointers, CPU layout). */
struct cu_kv_layer {
    float *k, *v;
    size_t block_stride; /* floats per block: n_kv_heads * block_size * head_dim */
    uint32_t block_size, head_dim, n_kv_heads;
};

/* --- kernels (k_*.cu); each returns cudaGetLastError() of its launch ------------------ */

/*
 * Structured output (k_mask.cu): for each of n_rows rows of n_vocab logits,
 * when rows_with_mask[r], the mask row masks + r * stride_words (tokens whose
 * bit is clear become -INFINITY), then biases bias_off[r]..bias_off[r+1] of
 * bias_tok/bias_val in order, as common/mask_apply.c. All device pointers.
 */
cudaError_t cu_mask_apply(float *logits, uint32_t n_rows, uint32_t n_vocab,
                          const uint32_t *masks, size_t stride_words,
                          const uint32_t *rows_with_mask, const int32_t *bias_tok,
                          const float *bias_val, const uint32_t *bias_off, cudaStream_t s);

/* x[r] = row tok[r] of the embedding matrix, widened to F32, times scale (dim = e->cols). */
cudaError_t cu_embed(const struct cu_mat *e, const struct cu_rows *r, float scale, float *x,
                     cudaStream_t s);

/* out[r] = w * x[r] / sqrt(mean(x[r]^2) + eps); src row of output r is rows[r] when rows != NULL.
 */
cudaError_t cu_rmsnorm(const float *x, const float *w, uint32_t n_rows, uint32_t dim, float eps,
                       const uint32_t *rows, float *out, cudaStream_t s);

/* x[r] += w * t[r] / sqrt(mean(t[r]^2) + eps): a sublayer's output, post-normed, into the residual. */
cudaError_t cu_rmsnorm_add(const float *t, const float *w, uint32_t n_rows, uint32_t dim,
                           float eps, float *x, cudaStream_t s);

/*
 * What finishing Q and K after their GEMMs takes: biases (NULL: none; bv is
 * added to V), per-head RMSNorm weights (NULL: none), and RoPE of the first
 * rope_dim dims of each head, pairs (2i, 2i+1) or (i, i + rope_dim/2) (neox),
 * angles pos * pos_scale * base^(-2i/rope_dim) / ff[i] in double.
 */
struct cu_qk {
    const float *bq, *bk, *bv, *q_norm, *k_norm, *ff;
    uint32_t n_heads, n_kv_heads, head_dim, rope_dim;
    int neox;
    float base, pos_scale, eps;
};

/* Finishes q (n_heads) and k (n_kv_heads) of every row in place; adds bv to v. */
cudaError_t cu_qk_finish(float *q, float *k, float *v, const struct cu_rows *r,
                         const struct cu_qk *a, cudaStream_t s);

/* Writes each row's k and v (n_kv_heads * head_dim) into its cache slot. */
cudaError_t cu_kv_store(const float *k, const float *v, const struct cu_rows *r,
                        const struct cu_kv_layer *kv, cudaStream_t s);

/*
 * Causal paged attention: out[r, head h] over positions 0..pos[r] of the
 * row's sequence, or only the last `window` of them (window 0: all); scores
 * are scale * q.k, then softcap * tanh(s / softcap) when softcap > 0.
 */
cudaError_t cu_attention(const float *q, const struct cu_rows *r, const struct cu_kv_layer *kv,
                         uint32_t n_heads, float scale, uint32_t window, float softcap,
                         float *out, cudaStream_t s);

/* g[i] = silu(g[i]) * u[i] over n values. */
cudaError_t cu_swiglu(float *g, const float *u, size_t n, cudaStream_t s);

/* g[i] = gelu(g[i]) * u[i] over n values, the tanh GELU as the CPU's portable kernel. */
cudaError_t cu_geglu(float *g, const float *u, size_t n, cudaStream_t s);

/* x[i] = cap * tanh(x[i] / cap) over n values (the final-logit soft-cap). */
cudaError_t cu_softcap(float *x, size_t n, float cap, cudaStream_t s);

/* dst = src rounded to F16 (to_bf16 0) or BF16 (1), n values. */
cudaError_t cu_to_half(const float *src, void *dst, size_t n, int to_bf16, cudaStream_t s);

/* Q8_0 matrix -> F32 (rows x cols), for the cuBLAS path of large batches. */
cudaError_t cu_q8_0_to_f32(const struct cu_mat *w, float *dst, cudaStream_t s);

/*
 * y[m * ldy + n] (+)= dot(row n of w, x + m * ldx) for m < n_rows, all n:
 * one warp per output feature, F32 activations, a fixed reduction order that
 * depends only on cols (batch invariant). Rows are processed 8 at a time.
 */
cudaError_t cu_gemm_rows(const struct cu_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                         float *y, size_t ldy, int accumulate, cudaStream_t s);

/* --- sampling (k_sample.cu) ------------------------------------------------------------ */

/* One row's request to the device sampler. */
struct cu_sample_req {
    uint32_t logit_row; /* row of the logits matrix */
    float temperature;  /* < 1e-5: greedy */
    float min_p;
    float top_p;   /* 1 = off */
    int32_t top_k; /* 0 = off */
    uint64_t seed, step;
    int32_t n_logprobs; /* 0..20 */
};

/* Per-row scratch of the device sampler (device memory, n rows each). */
struct cu_sample_scratch {
    float *w;     /* n_vocab: e^x weights */
    float *ls;    /* n_vocab: sanitized logits */
    int32_t *v;   /* n_vocab: candidate ids */
    double *bsum; /* n_vocab / 256 + 1: partial sums */
    double *mass; /* 1024: top-p buckets */
};

/* One row's answer (the layout of rs_sample_result's first fields, plus ok). */
struct cu_sample_out {
    int32_t token; /* -1: no finite logit */
    float logprob;
    int32_t n_top;
    int32_t top_ids[20];
    float top_logprobs[20];
};

/*
 * Samples n rows of logits (n_vocab floats each, device) as the CPU sampler
 * does without penalties: same NaN/inf rules, same e^x polynomial and
 * summation order, same selections (k_select.cuh) and (seed, step) hash, so
 * the same logits give the same token and logprobs. scr: scratch for n
 * rows (device); req and out are device arrays.
 */
cudaError_t cu_sample(const float *logits, uint32_t n_vocab, const struct cu_sample_req *req,
                      uint32_t n, const struct cu_sample_scratch *scr, struct cu_sample_out *out,
                      cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif

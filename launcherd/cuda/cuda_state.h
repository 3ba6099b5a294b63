/* SPDX-License-Identifier: MIT */
/*
 * The CUDA backend's state, shared by its host files (C11): cuda_backend.c
 * (the table, load, KV, logits, sampling), cuda_upload.c (weights into
 * device memory), cuda_step.c (inputs, the forward pass, CUDA graphs) and
 * cuda_gemm.c (cuBLAS or the batch-invariant kernel). Internal.
 */
#ifndef RS_CUDA_STATE_H
#define RS_CUDA_STATE_H

#include <cublas_v2.h>
#include <stdint.h>

#include "launcherd/cuda/cuda_impl.h"
#include "launcherd/engine/backend.h"
#include "launcherd/engine/sampler.h"

#define CU_SMALL_ROWS 8  /* GEMMs over at most this many rows use the warp-per-feature kernel */
#define CU_MAX_GRAPHS 16 /* decode graphs kept (one per batch size) */

struct cu_layer {
    const float *attn_norm, *ffn_norm; /* device, dim */
    const float *bq, *bk, *bv;         /* device biases, or NULL (llama_layer's) */
    const float *q_norm, *k_norm;      /* device, head_dim, or NULL */
    const float *post_attn, *post_ffn; /* device, dim, or NULL */
    int local;                         /* sliding window and the local RoPE */
    struct cu_mat wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct cu_kv {
    float *mem; /* per layer: K blocks then V blocks, as the CPU cache */
    uint32_t n_blocks, block_size;
    size_t block_stride; /* floats per block per layer, K or V */
    size_t layer_floats; /* n_blocks * block_stride */
};

struct cu_graph {
    uint32_t n_rows;
    void *kv; /* the cache it was captured against */
    cudaGraphExec_t exec;
};

struct cu_state {
    const struct llama_desc *d;
    struct rs_model_hparams hp;
    int device, deterministic, use_graphs;
    char describe[192];
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;

    char *weights; /* device copy of the GGUF tensor data section */
    uint64_t weights_bytes;
    float *vecs; /* device copy of llama_desc.vectors (norms, rope_freqs) */
    struct cu_layer *layers;
    struct cu_mat tok_embd, output;
    const float *output_norm, *rope_freqs;
    float *wtmp; /* Q8_0 matrix widened for cuBLAS (largest Q8_0 matrix), or NULL */
    uint64_t load_ns, load_bytes;
    int load_direct;

    /* step scratch (device), for cap_rows rows; regrowing it drops the graphs */
    uint32_t cap_rows, cap_want;
    float *x, *xn, *q, *k, *v, *att, *gate, *up, *xl, *logits;
    void *half; /* rows x max(dim, q dim, ffn) F16/BF16 GEMM inputs */

    /* step inputs: one pinned host area copied to one device area */
    void *in_host, *in_dev;
    size_t in_cap;
    struct cu_rows rows;
    uint32_t n_seqs, n_want;
    int32_t *seq_logit; /* host (n_seqs): logits row of each sequence or -1 */
    uint32_t cap_seqs;
    cudaEvent_t ev_in;

    /* logits on the host, copied on the first logits() after a step */
    float *h_logits;
    uint32_t cap_h_logits;
    int h_logits_valid;

    /* device sampling */
    struct cu_sample_scratch scr;
    struct cu_sample_req *sreq, *h_sreq;
    struct cu_sample_out *sout, *h_sout;
    uint32_t cap_sample;

    struct cu_graph graphs[CU_MAX_GRAPHS];
    uint32_t n_graphs;
};

/* Uploads every weight matrix and vector (cuda_upload.c). Logs and returns the failure. */
rs_err cu_upload(struct cu_state *s);

/* Frees what cu_upload allocated. */
void cu_upload_free(struct cu_state *s);

/* y (+)= x W^T over n rows (cuda_gemm.c); x has w->cols floats per row. */
rs_err cu_gemm(struct cu_state *s, const struct cu_mat *w, const float *x, uint32_t n, float *y,
               size_t ldy, int accumulate);

/* One forward step (cuda_step.c). */
rs_err cu_step(struct cu_state *s, struct cu_kv *kv, const struct rs_model_seq *seqs,
               uint32_t n_seqs);

/* Frees the step scratch, inputs and graphs (cuda_step.c). */
void cu_step_free(struct cu_state *s);

/* The backend's sample slot (cuda_sample.c); see backend.h. */
rs_err cu_sample_rows(struct cu_state *s, const uint32_t *seq,
                      const struct rs_sampling_params *params, const uint64_t *steps, uint32_t n,
                      struct rs_sample_result *out);

/* Frees the sampling buffers (cuda_sample.c). */
void cu_sample_free(struct cu_state *s);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * A model as the backends see it, for every architecture of the descriptor
 * table (arch.h): hyperparameters read from GGUF metadata with the
 * architecture resolved into numbers and per-layer flags, and a checked view
 * of every weight tensor (presence, type, shape), so a backend never meets a
 * tensor it cannot use or a file tensor it would ignore. Fused tensors
 * (phi3's attn_qkv, ffn_up) become row views, so backends see separate
 * Q/K/V and gate/up matrices. Weights are borrowed from the open mapping.
 * Leaves out: architectures the table does not list (refused by name).
 */
#ifndef RS_ENGINE_LLAMA_H
#define RS_ENGINE_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "common/gguf.h"
#include "launcherd/engine/model.h"

/* A 2-D weight: `rows` outputs of `cols` inputs (ggml ne[1] x ne[0]), row-major. */
struct llama_mat {
    const char *name; /* tensor name, borrowed from the GGUF reader */
    const void *data; /* borrowed from the mapping */
    enum rs_ggml_type type;
    uint32_t rows;
    uint32_t cols;
    size_t row_bytes;
};

struct llama_layer {
    const float *attn_norm; /* dim, F32 (widened at load when stored narrower) */
    const float *ffn_norm;  /* dim */
    const float *bq, *bk, *bv; /* q (n_heads * head_dim) and k, v (kv_dim) biases, or NULL */
    const float *q_norm, *k_norm; /* head_dim: RMSNorm weight of each head, or NULL */
    const float *post_attn_norm;  /* dim: normalizes attention's output before the residual */
    const float *post_ffn_norm;   /* dim: the same for the FFN's output; both NULL or both set */
    int local;              /* 1: sliding window (hp.swa_window) and the local RoPE base */
    struct llama_mat wq;    /* n_heads * head_dim x dim (a row view of attn_qkv when fused) */
    struct llama_mat wk;    /* n_kv_heads * head_dim x dim */
    struct llama_mat wv;    /* n_kv_heads * head_dim x dim */
    struct llama_mat wo;    /* dim x n_heads * head_dim */
    struct llama_mat w_gate; /* ffn_dim x dim (the first ffn_dim rows of ffn_up when fused) */
    struct llama_mat w_up;   /* ffn_dim x dim */
    struct llama_mat w_down; /* dim x ffn_dim */
};

struct llama_desc {
    struct rs_model_hparams hp;
    struct llama_mat tok_embd;  /* n_vocab x dim */
    struct llama_mat output;    /* n_vocab x dim; equals tok_embd when tied */
    const float *output_norm;   /* dim */
    const float *rope_freqs;    /* rope_dim / 2 divisors of each frequency, or NULL */
    struct llama_layer *layers; /* n_layers, owned */
    float *vectors;             /* owned F32 storage of the norms, biases and rope_freqs */
    size_t n_vectors;           /* floats in vectors */
    const rs_gguf *gguf;        /* the open file (borrowed), for backends that read it themselves */
    /* 1: the matrices are the model's own private, read-only copy (rs_gguf_open_private), and
     * the one backend loaded on this desc may lay them out anew in place (the CPU backend's
     * interleaved rows); 0 (llama_desc_load's default): memory the caller owns, left as is */
    int own_weights;
};

/*
 * Fills d from the open file g (borrowed: keep it open while d is used).
 * Returns RS_OK, RS_EINVAL (missing key or tensor, wrong shape, inconsistent
 * hyperparameters, a tensor the architecture does not have), RS_EUNSUPPORTED
 * (an architecture not in the table, the message listing those that are;
 * a tensor type or RoPE scaling not handled) or RS_ENOMEM; the message naming the key or tensor is logged and
 * written to err. On failure d holds nothing to free.
 */
rs_err llama_desc_load(const rs_gguf *g, struct llama_desc *d, char *err, size_t err_len);

/* Frees what llama_desc_load allocated; accepts a zeroed or freed desc. */
void llama_desc_free(struct llama_desc *d);

#endif

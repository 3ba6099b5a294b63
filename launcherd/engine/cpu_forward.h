/* SPDX-License-Identifier: MIT */
/*
 * State shared by the CPU backend's table (cpu_backend.c) and its forward
 * pass (cpu_forward.c): the weights as kernel views, the pool, the step's
 * scratch and the current batch. Internal to launcherd/engine.
 */
#ifndef RS_ENGINE_CPU_FORWARD_H
#define RS_ENGINE_CPU_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#include "launcherd/engine/backend.h"
#include "launcherd/engine/kernels.h"
#include "launcherd/engine/pool.h"

struct cpu_kv {
    float *mem;          /* per layer: K blocks then V blocks (kern_kv_layout) */
    uint32_t n_blocks;
    uint32_t block_size;
    size_t block_stride; /* floats per block per layer, K or V: n_kv_heads * block_size * head_dim */
    size_t layer_floats; /* n_blocks * block_stride */
};

struct cpu_layer {
    struct kern_mat wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct cpu_state {
    const struct llama_desc *d; /* borrowed from the front; norms and embeddings read from it */
    struct rs_model_hparams hp;
    enum kern_isa isa;
    struct pool *pool;
    int nt;
    int tp;          /* tensor-parallel shards, >= 1 */
    float *partial;  /* tp > 1: (tp, cap_rows, dim) partial sums of the Wo / Wdown shards */
    struct cpu_layer *layers;
    struct kern_mat tok_embd;
    struct kern_mat output;
    char describe[96];

    /* Step scratch, grown on demand (cap_*), carved by cpu_carve_rows. Rows = batch tokens. */
    float *rows_mem;
    uint32_t cap_rows;
    float *x;    /* (rows, dim) residual stream */
    float *xn;   /* (rows, dim) normalized input of the next GEMM */
    float *q;    /* (rows, n_heads * head_dim) */
    float *k;    /* (rows, kv_dim) */
    float *v;    /* (rows, kv_dim) */
    float *att;  /* (rows, n_heads * head_dim) attention output */
    float *gate; /* (rows, ffn_dim), then the gated activation (SwiGLU / GeGLU) */
    float *up;   /* (rows, ffn_dim) */
    float *rope; /* (n_rope, rows, rope_dim) rotation tables per row: [0] global, [1] local */
    uint32_t *row_seq; /* (rows) sequence index of each row, then (rows) its position */
    uint32_t *row_pos;
    float *thread_mem; /* per thread: GEMM panel + attention scores */
    uint32_t cap_npos;
    float *logits; /* (want, n_vocab) then (want, dim) normalized last rows */
    uint32_t cap_want;
    int32_t *seq_logit; /* per sequence: its logits row, or -1 */
    uint32_t cap_seqs;

    /* The current step (set by cpu_step before pool_run). */
    struct cpu_kv *kv;
    const struct rs_model_seq *seqs;
    uint32_t n_seqs, n_rows, n_want;
    int n_rope;                   /* 1, or 2 when local layers have a RoPE of their own */
    uint32_t attn_split[2][1025]; /* [local] thread t runs attention units [s[t], s[t+1]) */
};

/* Floats of per-row scratch, and of per-thread scratch for contexts of npos positions. */
size_t cpu_row_floats(const struct rs_model_hparams *hp);
size_t cpu_thread_floats(const struct rs_model_hparams *hp, uint32_t npos);

/* Points x, xn, ... into rows_mem for cap_rows rows. */
void cpu_carve_rows(struct cpu_state *s);

/* Fills row_seq/row_pos, seq_logit and the attention split for the current step. */
void cpu_plan_step(struct cpu_state *s);

/* The step as an SPMD function for pool_run (arg is the cpu_state). */
void cpu_forward_thread(void *arg, int tid, int n_threads);

#endif

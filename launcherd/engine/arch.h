/* SPDX-License-Identifier: MIT */
/*
 * The architecture descriptor table: one entry per `general.architecture`
 * the engine serves, saying what differs from llama (RoPE pairing, biases,
 * q/k norms, extra norms, embedding scale, FFN activation, soft-caps,
 * sliding-window pattern, fused tensors, output tying, query scale). The
 * loader (llama.c) reads the entry once and resolves it into plain numbers
 * and per-layer flags (rs_model_hparams, llama_layer); the forward passes
 * only ever see those, never an architecture name.
 * Leaves out: mixture-of-experts, LongRoPE, ALiBi, non-RMS norms (the
 * families the table lists use none of them).
 */
#ifndef RS_ENGINE_ARCH_H
#define RS_ENGINE_ARCH_H

#include <stddef.h>
#include <stdint.h>

/* Whether a tensor (or key) is read, and whether the file must have it. */
enum arch_need {
    ARCH_NEVER = 0,    /* not part of this architecture: present in a file is an error */
    ARCH_OPTIONAL = 1, /* read when present */
    ARCH_REQUIRED = 2, /* a file without it is refused */
};

/* Which layers attend through the sliding window (and use the local RoPE base). */
enum arch_swa {
    ARCH_SWA_NONE = 0,  /* every layer is global */
    ARCH_SWA_ALL = 1,   /* every layer is local (phi3) */
    ARCH_SWA_EVEN = 2,  /* layers 0, 2, 4, ... are local (gemma2) */
    ARCH_SWA_SIXTH = 3, /* layer il is global iff (il + 1) % 6 == 0, else local (gemma3) */
};

/* Feature bits of an entry. */
#define ARCH_EMBD_SCALE 0x01u   /* token embeddings times sqrt(n_embd) (gemma) */
#define ARCH_GEGLU 0x02u        /* FFN act is GELU (tanh form) of the gate; else SiLU (SwiGLU) */
#define ARCH_FUSED_QKV 0x04u    /* attn_qkv holds [Q | K | V] output rows (phi3) */
#define ARCH_FUSED_UP 0x08u     /* ffn_up holds [gate | up] output rows, no ffn_gate (phi3) */
#define ARCH_SOFTCAP 0x10u      /* attn/final logit soft-caps, keys with defaults 50 / 30 */
#define ARCH_ROPE_NEOX 0x20u    /* RoPE rotates (i, i + n_rot/2); else adjacent pairs (2i, 2i+1) */
#define ARCH_ROPE_FREQS 0x40u   /* rope_freqs.weight frequency divisors may be present (llama 3.1) */
#define ARCH_VOCAB_KEY 0x80u    /* <arch>.vocab_size, when present, must equal token_embd's rows */

struct arch_def {
    const char *name;          /* general.architecture, also the metadata key prefix */
    unsigned flags;            /* ARCH_* bits */
    enum arch_need qkv_bias;   /* blk.N.attn_{q,k,v}.bias, added before RoPE (qwen2) */
    enum arch_need qk_norm;    /* blk.N.attn_{q,k}_norm.weight: RMSNorm per head (qwen3, gemma3) */
    enum arch_need post_norms; /* blk.N.post_attention_norm / post_ffw_norm (gemma2/3) */
    enum arch_need output;     /* output.weight; absent or NEVER: logits use token_embd */
    enum arch_swa swa;         /* which layers are local */
    enum arch_need swa_key;    /* <arch>.attention.sliding_window */
    uint32_t swa_default;      /* window when the key is optional and absent */
    float local_rope_base;     /* > 0: local layers use this base and no scaling (gemma3) */
    uint32_t big_layers;       /* block_count that makes the query scale 1/sqrt(n_embd/n_head)
                                  (the gemma 27B types); 0: always 1/sqrt(head_dim) */
};

/* The entry for `name` (n bytes, not NUL-terminated), or NULL. */
const struct arch_def *arch_find(const char *name, size_t n);

/* Writes the supported names, comma-separated ("llama, qwen2, ..."), into buf; returns buf. */
const char *arch_names(char *buf, size_t len);

/* 1 when layer il of an n-layer model of pattern swa is local (sliding window). */
int arch_layer_is_local(enum arch_swa swa, uint32_t il);

#endif

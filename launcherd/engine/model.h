/* SPDX-License-Identifier: MIT */
/*
 * The model runtime's public API, what launcherd (and the tools, tests and
 * benches) call: load a GGUF of a served architecture (arch.c: llama,
 * qwen2, qwen3, gemma2, gemma3, phi3), make a paged KV cache, run one
 * forward step over any mix of prefill chunks and decode tokens, read the
 * logits. The caller (schedulerd, through the batch ring) owns block
 * allocation; the engine touches K/V only through checked block tables.
 * Results are batch invariant (launcherd/README.md, "Batch invariance").
 * Leaves out: tokenization (common/), sampling (sampler.h), scheduling.
 */
#ifndef RS_MODEL_H
#define RS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/gguf.h"

/*
 * Hyperparameters, read from the GGUF metadata and checked against the
 * tensors, with the architecture's descriptor (launcherd/engine/arch.h)
 * already resolved into numbers: the forward passes read these, never the
 * architecture name.
 */
struct rs_model_hparams {
    const char *arch;      /* general.architecture ("llama", "qwen2", ...; static storage) */
    uint32_t n_vocab;      /* rows of token_embd.weight */
    uint32_t dim;          /* embedding width */
    uint32_t n_layers;
    uint32_t n_heads;      /* query heads */
    uint32_t n_kv_heads;   /* key/value heads (GQA when < n_heads) */
    uint32_t head_dim;     /* attention.key_length (= value_length), default dim / n_heads */
    uint32_t ffn_dim;      /* gated FFN hidden width */
    uint32_t rope_dim;     /* leading dims of each head that RoPE rotates (even) */
    uint32_t ctx_len;      /* trained context length (informational; not enforced) */
    float rope_freq_base;  /* theta base, default 10000 */
    float rope_scale;      /* linear scaling factor (positions are divided by it); 1 = none */
    float rms_eps;         /* RMSNorm epsilon */
    int tied_output;       /* 1: no output.weight, logits use token_embd.weight */
    int has_rope_freqs;    /* 1: rope_freqs.weight divides each frequency (Llama 3.1 style) */
    int rope_neox;         /* 1: RoPE rotates (i, i + rope_dim/2) (NEOX); 0: (2i, 2i+1) */
    int ffn_gelu;          /* 1: GeGLU, GELU (tanh form) of the gate; 0: SwiGLU, SiLU */
    float embd_scale;      /* token embeddings are multiplied by this (1, or sqrt(dim)) */
    float attn_scale;      /* multiplies every q.k score (1/sqrt(head_dim) unless the arch says) */
    float attn_softcap;    /* > 0: scores become c * tanh(s / c) before the softmax; 0: none */
    float final_softcap;   /* > 0: logits become c * tanh(l / c); 0: none */
    uint32_t swa_window;   /* local layers see the last swa_window positions, the query's
                              included; 0 when no layer is local */
    uint32_t n_local;      /* layers that are local (sliding window) */
    float local_rope_base; /* RoPE base of local layers */
    float local_rope_scale; /* and their linear scaling factor */
};

/* Kernel variants (rs_model_opts.isa). */
#define RS_MODEL_ISA_AUTO (-1)  /* best the CPU supports */
#define RS_MODEL_ISA_PORTABLE 0 /* plain C */
#define RS_MODEL_ISA_AVX2 1     /* AVX2 + FMA + F16C */
#define RS_MODEL_ISA_AVX512 2   /* AVX-512 prompt GEMM and VNNI integer dots, else AVX2's */

/* How quantized weights are multiplied on the CPU (rs_model_opts.dot). */
#define RS_MODEL_DOT_AUTO 0  /* per CPU variant and type, the faster measured (kern_qdot_preferred) */
#define RS_MODEL_DOT_EXACT 1 /* widened to F32 (--exact-dot) */
#define RS_MODEL_DOT_INT8 2  /* integer dot products over 8-bit activations (--int8-dot) */

/* The --isa names (NULL-terminated) and their RS_MODEL_ISA_* values, for option tables. */
extern const char *const rs_model_isa_names[];
extern const int rs_model_isa_values[];

#define RS_MODEL_DEFAULT_MAX_TOKENS 4096 /* rows per step unless set */

struct rs_model_opts {
    const char *backend;        /* NULL or "cpu"; "cuda" (builds with nvcc); "auto": cuda when it
                                   loads (a device, supported weights), else cpu */
    int n_threads;              /* 0: the CPUs this process may run on */
    int isa;                    /* RS_MODEL_ISA_* */
    uint32_t max_batch_tokens;  /* most tokens in one step; 0: RS_MODEL_DEFAULT_MAX_TOKENS */
    unsigned barrier_spin_us;   /* spin before sleeping at a phase barrier inside a step */
    unsigned idle_spin_us;      /* spin before sleeping between steps; 0 = sleep at once */
    int tp;                     /* tensor-parallel shards (0, 1: none): heads and FFN columns split
                                   in tp, the Wo and Wdown partial sums all-reduced in shard order;
                                   CPU: shards over the pool's threads; see launcherd/cuda/
                                   README.md, "Tensor parallelism" */
    int deterministic;          /* batch-invariant kernels on every backend: a row's logits do
                                   not depend on its companions (the CPU's always are; CUDA:
                                   no cuBLAS, also RS_CUDA_DETERMINISTIC=1) */
    int dot;                    /* CPU, quantized weights (RS_MODEL_DOT_*): AUTO (default) the
                                   faster one measured on this CPU variant and weight type
                                   (integer with AVX-512 VNNI or AVX2, widened on other
                                   CPUs); EXACT widens them to
                                   F32 times F32 activations; INT8 quantizes each activation
                                   row to 8-bit blocks and uses integer dot products, as
                                   llama.cpp does (launcherd/README.md, "Integer dot
                                   products") */
};

/* Defaults: cpu backend, all CPUs, auto ISA, 4096 tokens, 50 us barrier spin, no idle spin. */
void rs_model_opts_default(struct rs_model_opts *o);

typedef struct rs_model rs_model;

/*
 * Maps the GGUF at `path`, reads and checks the hyperparameters, checks
 * every tensor's presence, type and shape, and prepares the backend (CPU:
 * weights stay a read-only view of the mapping; threads are started).
 * opts may be NULL (defaults). Returns RS_OK, RS_EIO (file), RS_EINVAL
 * (malformed file or bad option), RS_EUNSUPPORTED (valid but not handled,
 * e.g. a Q5_K tensor or YaRN scaling), RS_ENOMEM; on failure a message naming
 * the key or tensor is logged and written to err (may be NULL).
 * *out owns the model: rs_model_destroy it. Any thread.
 */
rs_err rs_model_load(const char *path, const struct rs_model_opts *opts, rs_model **out,
                     char *err, size_t err_len);

/* Frees the model (every KV cache made from it must be destroyed first); accepts NULL, clears *m. */
void rs_model_destroy(rs_model **m);

/* The model's hyperparameters; borrowed until rs_model_destroy. Any thread. */
const struct rs_model_hparams *rs_model_hparams(const rs_model *m);

/* The open GGUF (borrowed until rs_model_destroy), e.g. to build the vocab from the same file. */
const rs_gguf *rs_model_gguf(const rs_model *m);

/* One line naming the backend, kernel variant and thread count, e.g. "cpu avx2 2 threads". */
const char *rs_model_describe(const rs_model *m);

/*
 * 1 when the loaded backend copies host memory to a device, so host pages
 * it reads (the shared-memory rings) are worth pinning for DMA
 * (backend.h RS_BACKEND_CAP_HOST_DMA); 0 for the CPU backend. Any thread.
 */
int rs_model_host_dma(const rs_model *m);

/* --- paged KV cache ----------------------------------------------------------------------- */

#define RS_KVCACHE_DEFAULT_BLOCK 16 /* tokens per block unless the caller says otherwise */

typedef struct rs_kvcache rs_kvcache;

/* Bytes of K and V one block of block_size tokens holds over all layers (for sizing). */
size_t rs_kvcache_block_bytes(const rs_model *m, uint32_t block_size);

/*
 * Allocates n_blocks blocks of block_size tokens for model m (which it
 * borrows). Returns RS_OK, RS_EINVAL (zero sizes), RS_ERANGE (more bytes than
 * the host's RAM) or RS_ENOMEM. *out owns the cache. Block contents start as zeros.
 */
rs_err rs_kvcache_create(rs_model *m, uint32_t n_blocks, uint32_t block_size, rs_kvcache **out);

/* Accepts NULL and clears *kv. */
void rs_kvcache_destroy(rs_kvcache **kv);

/* The cache's blocks, and tokens per block, as created. Any thread. */
uint32_t rs_kvcache_n_blocks(const rs_kvcache *kv);
uint32_t rs_kvcache_block_size(const rs_kvcache *kv);

/* --- one forward step -------------------------------------------------------------------- */

/* One sequence's part of a step: a prefill chunk, or one decode token. */
struct rs_model_seq {
    const int32_t *tokens;        /* n_tokens ids, each < n_vocab (borrowed for the call) */
    uint32_t n_tokens;            /* >= 1 */
    uint32_t pos0;                /* position of tokens[0]; positions below hold K/V already */
    const uint32_t *block_table;  /* block of position p is block_table[p / block_size] */
    uint32_t n_blocks;            /* entries in block_table; >= ceil((pos0 + n_tokens) / block_size) */
    int want_logits;              /* 1: produce next-token logits after the last token */
};

/*
 * Runs the model over n_seqs sequences in one batch: writes K/V of every new
 * token into its slot, then produces logits for the sequences that asked.
 * Validates everything first and returns RS_EINVAL (bad token id, table too
 * short, block index >= the cache's blocks, a sequence longer than the whole
 * cache, two tokens writing one slot,
 * kv from another model, n_tokens 0), RS_ERANGE (more than max_batch_tokens
 * tokens) or RS_ENOMEM (scratch growth), in which case nothing was written.
 * One thread at a time per model (the launcher's step thread).
 */
rs_err rs_model_step(rs_model *m, rs_kvcache *kv, const struct rs_model_seq *seqs,
                     uint32_t n_seqs);

/*
 * Logits (n_vocab floats) of sequence `seq` (its index in the last step's
 * array), or NULL when it did not ask for them. Borrowed until the next step.
 */
const float *rs_model_logits(rs_model *m, uint32_t seq);

/*
 * Samples the next token of n sequences of the last step on the backend's
 * device, where the logits are (CUDA: no copy of the logits to the host):
 * out[i] for sequence seq[i] with params[i] at output index steps[i], the
 * same result rs_sampler_sample gives from rs_model_logits(m, seq[i]) with
 * no token history. RS_EUNSUPPORTED (nothing done) when the backend has no
 * device sampler (CPU) or some params need penalties (the history): then
 * sample on the host. RS_EINVAL for bad params or a sequence without logits.
 * The step thread.
 */
struct rs_sampling_params;
struct rs_sample_result;
rs_err rs_model_sample(rs_model *m, const uint32_t *seq, const struct rs_sampling_params *params,
                       const uint64_t *steps, uint32_t n, struct rs_sample_result *out);

#endif

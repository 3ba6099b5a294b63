/* SPDX-License-Identifier: MIT */
/*
 * The table of served architectures (see arch.h). Each entry is what
 * llama.cpp's loader and graph for that `general.architecture` do, with the
 * tensor names and keys its GGUF writer uses; launcherd/README.md,
 * "Architectures", explains each column. Adding an architecture is one entry
 * here plus, if it needs a new kind of step, that step in the forward passes.
 */
#include "launcherd/engine/arch.h"

#include <stdio.h>
#include <string.h>

static const struct arch_def ARCHS[] = {
    /* Llama 1/2/3, Mistral (incl. Nemo's head_dim != n_embd/n_head), TinyLlama, SmolLM. */
    {.name = "llama",
     .flags = ARCH_ROPE_FREQS | ARCH_VOCAB_KEY,
     .qkv_bias = ARCH_OPTIONAL,
     .output = ARCH_OPTIONAL},
    /* Qwen2 / Qwen2.5: q/k/v biases, NEOX RoPE. */
    {.name = "qwen2",
     .flags = ARCH_ROPE_NEOX | ARCH_VOCAB_KEY,
     .qkv_bias = ARCH_REQUIRED,
     .output = ARCH_OPTIONAL},
    /* Qwen3 (dense): per-head q/k RMSNorm before RoPE, no biases. */
    {.name = "qwen3",
     .flags = ARCH_ROPE_NEOX | ARCH_VOCAB_KEY,
     .qk_norm = ARCH_REQUIRED,
     .output = ARCH_OPTIONAL},
    /* Gemma 2: scaled embeddings, GeGLU, post norms, soft-caps, even layers local, always tied. */
    {.name = "gemma2",
     .flags = ARCH_ROPE_NEOX | ARCH_EMBD_SCALE | ARCH_GEGLU | ARCH_SOFTCAP | ARCH_VOCAB_KEY,
     .post_norms = ARCH_REQUIRED,
     .output = ARCH_NEVER,
     .swa = ARCH_SWA_EVEN,
     .swa_key = ARCH_OPTIONAL,
     .swa_default = 4096,
     .big_layers = 46},
    /* Gemma 3 (text): gemma2 without soft-caps, plus q/k norms; 5 local : 1 global layers. */
    {.name = "gemma3",
     .flags = ARCH_ROPE_NEOX | ARCH_EMBD_SCALE | ARCH_GEGLU | ARCH_VOCAB_KEY,
     .qk_norm = ARCH_REQUIRED,
     .post_norms = ARCH_REQUIRED,
     .output = ARCH_OPTIONAL,
     .swa = ARCH_SWA_SIXTH,
     .swa_key = ARCH_REQUIRED,
     .local_rope_base = 10000.0f,
     .big_layers = 62},
    /* Phi-3 / Phi-3.5 (mini, medium): fused tensors, a window on every layer. */
    {.name = "phi3",
     .flags = ARCH_ROPE_NEOX | ARCH_FUSED_QKV | ARCH_FUSED_UP | ARCH_VOCAB_KEY,
     .output = ARCH_REQUIRED,
     .swa = ARCH_SWA_ALL,
     .swa_key = ARCH_REQUIRED},
};

#define N_ARCHS (sizeof(ARCHS) / sizeof(ARCHS[0]))

const struct arch_def *arch_find(const char *name, size_t n)
{
    for (size_t i = 0; i < N_ARCHS; i++)
        if (strlen(ARCHS[i].name) == n && memcmp(ARCHS[i].name, name, n) == 0)
            return &ARCHS[i];
    return NULL;
}

const char *arch_names(char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_ARCHS && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", ARCHS[i].name);
    return buf;
}

int arch_layer_is_local(enum arch_swa swa, uint32_t il)
{
    switch (swa) {
    case ARCH_SWA_ALL: return 1;
    case ARCH_SWA_EVEN: return il % 2 == 0;
    case ARCH_SWA_SIXTH: return (il + 1) % 6 != 0;
    default: return 0;
    }
}

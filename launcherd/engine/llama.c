/* SPDX-License-Identifier: MIT */
/*
 * GGUF -> llama_desc for every architecture in arch.c: hyperparameters from
 * `<arch>.*` metadata with llama.cpp's defaults, the descriptor resolved into
 * numbers and per-layer flags, then every tensor checked against them, and
 * no tensor left over (llama.cpp refuses a file with tensors its graph does
 * not use; so do we, rather than silently ignore one). A file is outside
 * input: each failure names the key or tensor and what was expected.
 */
#include "launcherd/engine/llama.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/quant.h"
#include "launcherd/engine/arch.h"
#include "launcherd/engine/kernels.h"

/* Upper bounds that keep every size computed from them far from overflow. */
#define MAX_DIM (1u << 16)
#define MAX_FFN (1u << 20)
#define MAX_LAYERS 1024u
#define MAX_HEADS 1024u
#define MAX_VOCAB (1u << 24)

/* One load: the file, its architecture, which tensors were taken, where errors go. */
struct ld {
    const rs_gguf *g;
    const struct arch_def *a;
    uint8_t *used; /* per tensor of the file: 1 once a check took it */
    char *err;
    size_t len;
};

static rs_err fail(const struct ld *c, rs_err rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static rs_err fail(const struct ld *c, rs_err rc, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    rs_log_error("model: %s", msg);
    if (c->err != NULL && c->len > 0)
        snprintf(c->err, c->len, "%s", msg);
    return rc;
}

/* Reads <arch>.<key> as u32; a missing key gives `def` unless required. */
static rs_err get_u32(const struct ld *c, const char *key, int required, uint32_t def,
                      uint32_t *out)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", c->a->name, key);
    rs_err rc = rs_gguf_get_u32(c->g, full, out);
    if (rc == RS_ENOENT && !required) {
        *out = def;
        return RS_OK;
    }
    if (rc == RS_ENOENT)
        return fail(c, RS_EINVAL, "missing metadata key %s", full);
    if (rc != RS_OK)
        return fail(c, RS_EINVAL, "metadata key %s is not an unsigned 32-bit value", full);
    return RS_OK;
}

/* Reads <arch>.<key> as a finite float > 0; a missing key gives `def` unless required. */
static rs_err get_f32(const struct ld *c, const char *key, int required, float def, float *out)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", c->a->name, key);
    rs_err rc = rs_gguf_get_f32(c->g, full, out);
    if (rc == RS_ENOENT && !required) {
        *out = def;
        return RS_OK;
    }
    if (rc == RS_ENOENT)
        return fail(c, RS_EINVAL, "missing metadata key %s", full);
    if (rc != RS_OK)
        return fail(c, RS_EINVAL, "metadata key %s is not a float", full);
    if (!isfinite(*out) || *out <= 0.0f)
        return fail(c, RS_EINVAL, "metadata key %s = %g, must be finite and > 0", full,
                    (double)*out);
    return RS_OK;
}

static int has_key(const struct ld *c, const char *key)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", c->a->name, key);
    return rs_gguf_find_key(c->g, full) >= 0;
}

static rs_err find_arch(struct ld *c, struct rs_model_hparams *hp)
{
    struct rs_gguf_str arch;
    char names[256];
    if (rs_gguf_get_str(c->g, "general.architecture", &arch) != RS_OK)
        return fail(c, RS_EINVAL, "missing string key general.architecture");
    c->a = arch_find(arch.ptr, arch.len);
    if (c->a == NULL)
        return fail(c, RS_EUNSUPPORTED,
                    "general.architecture '%.*s' is not supported; supported: %s",
                    (int)(arch.len > 64 ? 64 : arch.len), arch.ptr,
                    arch_names(names, sizeof(names)));
    hp->arch = c->a->name;
    return RS_OK;
}

/* rope.scaling.type none|linear (absent: linear when a factor is given, as llama.cpp). */
static rs_err read_rope_scaling(const struct ld *c, struct rs_model_hparams *hp)
{
    char key[128];
    struct rs_gguf_str type = {"linear", 6};
    snprintf(key, sizeof(key), "%s.rope.scaling.type", c->a->name);
    rs_err rc = rs_gguf_get_str(c->g, key, &type);
    if (rc != RS_OK && rc != RS_ENOENT)
        return fail(c, RS_EINVAL, "%s is not a string", key);
    int none = type.len == 4 && memcmp(type.ptr, "none", 4) == 0;
    int linear = type.len == 6 && memcmp(type.ptr, "linear", 6) == 0;
    if (!none && !linear)
        return fail(c, RS_EUNSUPPORTED, "%s '%.*s' is not supported (none, linear)", key,
                    (int)(type.len > 32 ? 32 : type.len), type.ptr);
    float factor = 1.0f;
    if (has_key(c, "rope.scaling.factor"))
        rc = get_f32(c, "rope.scaling.factor", 1, 1.0f, &factor);
    else
        rc = get_f32(c, "rope.scale_linear", 0, 1.0f, &factor);
    if (rc != RS_OK)
        return rc;
    hp->rope_scale = none ? 1.0f : factor;
    return RS_OK;
}

static rs_err read_counts(const struct ld *c, struct rs_model_hparams *hp)
{
    rs_err rc;
    if ((rc = get_u32(c, "embedding_length", 1, 0, &hp->dim)) != RS_OK ||
        (rc = get_u32(c, "block_count", 1, 0, &hp->n_layers)) != RS_OK ||
        (rc = get_u32(c, "feed_forward_length", 1, 0, &hp->ffn_dim)) != RS_OK ||
        (rc = get_u32(c, "attention.head_count", 1, 0, &hp->n_heads)) != RS_OK ||
        (rc = get_u32(c, "attention.head_count_kv", 0, hp->n_heads, &hp->n_kv_heads)) != RS_OK ||
        (rc = get_u32(c, "context_length", 0, 0, &hp->ctx_len)) != RS_OK)
        return rc;
    if (hp->dim == 0 || hp->dim > MAX_DIM || hp->n_layers == 0 || hp->n_layers > MAX_LAYERS ||
        hp->ffn_dim == 0 || hp->ffn_dim > MAX_FFN || hp->n_heads == 0 || hp->n_heads > MAX_HEADS)
        return fail(c, RS_EINVAL,
                    "hyperparameters out of range: dim %u, layers %u, ffn %u, heads %u", hp->dim,
                    hp->n_layers, hp->ffn_dim, hp->n_heads);
    if (hp->n_kv_heads == 0 || hp->n_heads % hp->n_kv_heads != 0)
        return fail(c, RS_EINVAL, "head_count %u is not a multiple of head_count_kv %u",
                    hp->n_heads, hp->n_kv_heads);
    return RS_OK;
}

/* head_dim from attention.key_length (default dim / heads), value_length equal; rope_dim. */
static rs_err read_head_dims(const struct ld *c, struct rs_model_hparams *hp)
{
    rs_err rc;
    uint32_t kl, vl, def = hp->dim / hp->n_heads;
    int given = has_key(c, "attention.key_length");
    if (!given && hp->dim % hp->n_heads != 0)
        return fail(c, RS_EINVAL, "embedding_length %u is not a multiple of head_count %u",
                    hp->dim, hp->n_heads);
    if ((rc = get_u32(c, "attention.key_length", 0, def, &kl)) != RS_OK ||
        (rc = get_u32(c, "attention.value_length", 0, kl, &vl)) != RS_OK)
        return rc;
    if (kl == 0 || kl > 1024 || kl % 2 != 0)
        return fail(c, RS_EUNSUPPORTED, "head dimension (%s.attention.key_length) %u: must be "
                    "even and in 2..1024", c->a->name, kl);
    if (vl != kl)
        return fail(c, RS_EUNSUPPORTED, "%s.attention.value_length %u differs from key_length %u",
                    c->a->name, vl, kl);
    hp->head_dim = kl;
    if ((rc = get_u32(c, "rope.dimension_count", 0, kl, &hp->rope_dim)) != RS_OK)
        return rc;
    if (hp->rope_dim % 2 != 0 || hp->rope_dim > kl)
        return fail(c, RS_EINVAL, "rope.dimension_count %u must be even and <= %u",
                    hp->rope_dim, kl);
    return RS_OK;
}

/* The sliding window and which layers use it. */
static rs_err read_window(const struct ld *c, struct rs_model_hparams *hp)
{
    const struct arch_def *a = c->a;
    uint32_t w = 0;
    if (a->swa_key != ARCH_NEVER) {
        rs_err rc = get_u32(c, "attention.sliding_window", a->swa_key == ARCH_REQUIRED,
                            a->swa_default, &w);
        if (rc != RS_OK)
            return rc;
    }
    /* A window of 0 means none (llama.cpp: Phi-4 writes it so). */
    hp->swa_window = a->swa == ARCH_SWA_NONE ? 0 : w;
    hp->n_local = 0;
    for (uint32_t il = 0; hp->swa_window > 0 && il < hp->n_layers; il++)
        hp->n_local += (uint32_t)arch_layer_is_local(a->swa, il);
    hp->local_rope_base = a->local_rope_base > 0 ? a->local_rope_base : hp->rope_freq_base;
    hp->local_rope_scale = a->local_rope_base > 0 ? 1.0f : hp->rope_scale;
    return RS_OK;
}

/* Embedding scale, query scale, soft-caps, activation, RoPE pairing. */
static rs_err read_arch_params(const struct ld *c, struct rs_model_hparams *hp)
{
    const struct arch_def *a = c->a;
    hp->rope_neox = (a->flags & ARCH_ROPE_NEOX) != 0;
    hp->ffn_gelu = (a->flags & ARCH_GEGLU) != 0;
    hp->embd_scale = (a->flags & ARCH_EMBD_SCALE) ? sqrtf((float)hp->dim) : 1.0f;
    /* The gemma 27B types scale the query by n_embd / n_head, chosen by the layer count. */
    uint32_t qd = a->big_layers != 0 && hp->n_layers == a->big_layers ? hp->dim / hp->n_heads
                                                                       : hp->head_dim;
    hp->attn_scale = 1.0f / sqrtf((float)qd);
    hp->attn_softcap = hp->final_softcap = 0.0f;
    rs_err rc = RS_OK;
    if (a->flags & ARCH_SOFTCAP) {
        rc = get_f32(c, "attn_logit_softcapping", 0, 50.0f, &hp->attn_softcap);
        if (rc == RS_OK)
            rc = get_f32(c, "final_logit_softcapping", 0, 30.0f, &hp->final_softcap);
    }
    return rc;
}

static rs_err read_hparams(struct ld *c, struct rs_model_hparams *hp)
{
    memset(hp, 0, sizeof(*hp));
    rs_err rc;
    if ((rc = find_arch(c, hp)) != RS_OK || (rc = read_counts(c, hp)) != RS_OK ||
        (rc = read_head_dims(c, hp)) != RS_OK ||
        (rc = get_f32(c, "rope.freq_base", 0, 10000.0f, &hp->rope_freq_base)) != RS_OK ||
        (rc = get_f32(c, "attention.layer_norm_rms_epsilon", 1, 0, &hp->rms_eps)) != RS_OK ||
        (rc = read_rope_scaling(c, hp)) != RS_OK || (rc = read_window(c, hp)) != RS_OK)
        return rc;
    return read_arch_params(c, hp);
}

/* The tensor `name`, marked as taken, or NULL. */
static const struct rs_gguf_tensor *find(const struct ld *c, const char *name)
{
    int64_t i = rs_gguf_find_tensor(c->g, name);
    if (i < 0)
        return NULL;
    c->used[i] = 1;
    return rs_gguf_tensor(c->g, (uint64_t)i);
}

static rs_err check_shape(const struct ld *c, const struct rs_gguf_tensor *t, uint64_t ne0,
                          uint64_t ne1)
{
    if (t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == 1 && t->ne[3] == 1)
        return RS_OK;
    return fail(c, RS_EINVAL,
                "tensor %s has shape [%llu, %llu, %llu, %llu], expected [%llu, %llu]", t->name,
                (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
                (unsigned long long)ne0, (unsigned long long)ne1);
}

/* A matrix of `rows` x `cols` (ggml [cols, rows]) in a type the kernels handle. */
static rs_err get_mat(const struct ld *c, const char *name, uint32_t cols, uint32_t rows,
                      struct llama_mat *m)
{
    const struct rs_gguf_tensor *t = find(c, name);
    if (t == NULL)
        return fail(c, RS_EINVAL, "missing tensor %s", name);
    if (!kern_type_supported(t->type))
        return fail(c, RS_EUNSUPPORTED,
                    "tensor %s has type %s; supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, "
                    "Q6_K", name, rs_ggml_type_name(t->type));
    rs_err rc = check_shape(c, t, cols, rows);
    if (rc != RS_OK)
        return rc;
    if ((uintptr_t)t->data % (t->type == RS_GGML_F32 ? 4 : 2) != 0)
        return fail(c, RS_EUNSUPPORTED, "tensor %s data is not aligned to its element type",
                    name);
    m->name = t->name;
    m->data = t->data;
    m->type = t->type;
    m->rows = rows;
    m->cols = cols;
    m->row_bytes = (size_t)rs_ggml_row_bytes(t->type, cols);
    return RS_OK;
}

/* Rows [r0, r0 + n) of a fused matrix, as a matrix of its own (a view, no copy). */
static struct llama_mat row_view(const struct llama_mat *m, uint32_t r0, uint32_t n)
{
    struct llama_mat v = *m;
    v.data = (const uint8_t *)m->data + (size_t)r0 * m->row_bytes;
    v.rows = n;
    return v;
}

/* A vector of n values, widened to F32 into dst. */
static rs_err get_vec(const struct ld *c, const char *name, uint32_t n, float *dst)
{
    const struct rs_gguf_tensor *t = find(c, name);
    if (t == NULL)
        return fail(c, RS_EINVAL, "missing tensor %s", name);
    if (t->type != RS_GGML_F32 && t->type != RS_GGML_F16 && t->type != RS_GGML_BF16)
        return fail(c, RS_EUNSUPPORTED, "tensor %s has type %s; supported: F32, F16, BF16",
                    name, rs_ggml_type_name(t->type));
    rs_err rc = check_shape(c, t, n, 1);
    if (rc != RS_OK)
        return rc;
    if (t->type != RS_GGML_F32 && (uintptr_t)t->data % 2 != 0)
        return fail(c, RS_EUNSUPPORTED, "tensor %s data is not 2-byte aligned", name);
    if (t->type == RS_GGML_F32)
        memcpy(dst, t->data, (size_t)n * sizeof(float)); /* the mapping may be unaligned for F32 */
    else
        rs_quant_row_to_f32(t->type, t->data, dst, n);
    for (uint32_t i = 0; i < n; i++)
        if (!isfinite(dst[i]))
            return fail(c, RS_EINVAL, "tensor %s has a non-finite value at %u", name, i);
    return RS_OK;
}

/* A per-layer vector blk.<il>.<what> of n values per `need`; *out stays NULL when absent. */
static rs_err layer_vec(const struct ld *c, uint32_t il, const char *what, enum arch_need need,
                        uint32_t n, float **vec, const float **out)
{
    char name[RS_GGUF_MAX_NAME + 1];
    snprintf(name, sizeof(name), "blk.%u.%s", il, what);
    *out = NULL;
    if (need == ARCH_NEVER || (need == ARCH_OPTIONAL && rs_gguf_find_tensor(c->g, name) < 0))
        return RS_OK;
    rs_err rc = get_vec(c, name, n, *vec);
    if (rc == RS_OK) {
        *out = *vec;
        *vec += n;
    }
    return rc;
}

/* Floats of vector storage one layer may need (norms, biases, q/k norms, post norms). */
static size_t layer_vec_floats(const struct arch_def *a, const struct rs_model_hparams *hp)
{
    size_t qd = (size_t)hp->n_heads * hp->head_dim, kvd = (size_t)hp->n_kv_heads * hp->head_dim;
    return 2 * (size_t)hp->dim + (a->qkv_bias ? qd + 2 * kvd : 0) +
           (a->qk_norm ? 2 * (size_t)hp->head_dim : 0) + (a->post_norms ? 2 * (size_t)hp->dim : 0);
}

/* Q, K, V (separate, or row views of attn_qkv) and the output projection. */
static rs_err load_attn_mats(const struct ld *c, const struct rs_model_hparams *hp, uint32_t il,
                             struct llama_layer *l)
{
    uint32_t d = hp->dim, qd = hp->n_heads * hp->head_dim, kvd = hp->n_kv_heads * hp->head_dim;
    char name[RS_GGUF_MAX_NAME + 1];
    rs_err rc;
    snprintf(name, sizeof(name), "blk.%u.attn_output.weight", il);
    if ((rc = get_mat(c, name, qd, d, &l->wo)) != RS_OK)
        return rc;
    if (c->a->flags & ARCH_FUSED_QKV) {
        struct llama_mat qkv;
        snprintf(name, sizeof(name), "blk.%u.attn_qkv.weight", il);
        if ((rc = get_mat(c, name, d, qd + 2 * kvd, &qkv)) != RS_OK)
            return rc;
        l->wq = row_view(&qkv, 0, qd);
        l->wk = row_view(&qkv, qd, kvd);
        l->wv = row_view(&qkv, qd + kvd, kvd);
        return RS_OK;
    }
    static const char *const parts[3] = {"attn_q", "attn_k", "attn_v"};
    struct llama_mat *m[3] = {&l->wq, &l->wk, &l->wv};
    uint32_t rows[3] = {qd, kvd, kvd};
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof(name), "blk.%u.%s.weight", il, parts[i]);
        if ((rc = get_mat(c, name, d, rows[i], m[i])) != RS_OK)
            return rc;
    }
    return RS_OK;
}

/* Gate, up (separate, or the two halves of a fused ffn_up) and down. */
static rs_err load_ffn_mats(const struct ld *c, const struct rs_model_hparams *hp, uint32_t il,
                            struct llama_layer *l)
{
    uint32_t d = hp->dim, f = hp->ffn_dim;
    char name[RS_GGUF_MAX_NAME + 1];
    rs_err rc;
    snprintf(name, sizeof(name), "blk.%u.ffn_down.weight", il);
    if ((rc = get_mat(c, name, f, d, &l->w_down)) != RS_OK)
        return rc;
    snprintf(name, sizeof(name), "blk.%u.ffn_up.weight", il);
    if (c->a->flags & ARCH_FUSED_UP) {
        struct llama_mat up;
        if ((rc = get_mat(c, name, d, 2 * f, &up)) != RS_OK)
            return rc;
        l->w_gate = row_view(&up, 0, f);
        l->w_up = row_view(&up, f, f);
        return RS_OK;
    }
    if ((rc = get_mat(c, name, d, f, &l->w_up)) != RS_OK)
        return rc;
    snprintf(name, sizeof(name), "blk.%u.ffn_gate.weight", il);
    return get_mat(c, name, d, f, &l->w_gate);
}

/* One block's matrices and vectors; *vec advances past the vectors it filled. */
static rs_err load_layer(const struct ld *c, const struct rs_model_hparams *hp, uint32_t il,
                         struct llama_layer *l, float **vec)
{
    const struct arch_def *a = c->a;
    uint32_t d = hp->dim, qd = hp->n_heads * hp->head_dim, kvd = hp->n_kv_heads * hp->head_dim;
    uint32_t hd = hp->head_dim;
    rs_err rc;
    if ((rc = load_attn_mats(c, hp, il, l)) != RS_OK || (rc = load_ffn_mats(c, hp, il, l)) != RS_OK ||
        (rc = layer_vec(c, il, "attn_norm.weight", ARCH_REQUIRED, d, vec, &l->attn_norm)) != RS_OK ||
        (rc = layer_vec(c, il, "ffn_norm.weight", ARCH_REQUIRED, d, vec, &l->ffn_norm)) != RS_OK ||
        (rc = layer_vec(c, il, "attn_q.bias", a->qkv_bias, qd, vec, &l->bq)) != RS_OK ||
        (rc = layer_vec(c, il, "attn_k.bias", a->qkv_bias, kvd, vec, &l->bk)) != RS_OK ||
        (rc = layer_vec(c, il, "attn_v.bias", a->qkv_bias, kvd, vec, &l->bv)) != RS_OK ||
        (rc = layer_vec(c, il, "attn_q_norm.weight", a->qk_norm, hd, vec, &l->q_norm)) != RS_OK ||
        (rc = layer_vec(c, il, "attn_k_norm.weight", a->qk_norm, hd, vec, &l->k_norm)) != RS_OK ||
        (rc = layer_vec(c, il, "post_attention_norm.weight", a->post_norms, d, vec,
                        &l->post_attn_norm)) != RS_OK ||
        (rc = layer_vec(c, il, "post_ffw_norm.weight", a->post_norms, d, vec,
                        &l->post_ffn_norm)) != RS_OK)
        return rc;
    /* Optional pieces come as a set: half a set would silently compute something else. */
    if ((l->bq == NULL) != (l->bk == NULL) || (l->bq == NULL) != (l->bv == NULL) ||
        (l->q_norm == NULL) != (l->k_norm == NULL) ||
        (l->post_attn_norm == NULL) != (l->post_ffn_norm == NULL))
        return fail(c, RS_EINVAL, "block %u has only some of its attn_{q,k,v}.bias, "
                    "attn_{q,k}_norm or post_{attention,ffw}_norm tensors", il);
    l->local = hp->swa_window > 0 && arch_layer_is_local(a->swa, il);
    return RS_OK;
}

static rs_err load_globals(const struct ld *c, struct llama_desc *d, float **vec)
{
    struct rs_model_hparams *hp = &d->hp;
    rs_err rc = get_mat(c, "token_embd.weight", hp->dim, hp->n_vocab, &d->tok_embd);
    if (rc != RS_OK)
        return rc;
    hp->tied_output = c->a->output == ARCH_NEVER ||
                      (c->a->output == ARCH_OPTIONAL &&
                       rs_gguf_find_tensor(c->g, "output.weight") < 0);
    if (hp->tied_output)
        d->output = d->tok_embd;
    else if ((rc = get_mat(c, "output.weight", hp->dim, hp->n_vocab, &d->output)) != RS_OK)
        return rc;
    if ((rc = get_vec(c, "output_norm.weight", hp->dim, *vec)) != RS_OK)
        return rc;
    d->output_norm = *vec;
    *vec += hp->dim;
    hp->has_rope_freqs = (c->a->flags & ARCH_ROPE_FREQS) &&
                         rs_gguf_find_tensor(c->g, "rope_freqs.weight") >= 0;
    if (hp->has_rope_freqs) {
        if ((rc = get_vec(c, "rope_freqs.weight", hp->rope_dim / 2, *vec)) != RS_OK)
            return rc;
        d->rope_freqs = *vec;
        *vec += hp->rope_dim / 2;
    }
    return RS_OK;
}

/* n_vocab from token_embd's rows, cross-checked with <arch>.vocab_size when present. */
static rs_err read_vocab_size(const struct ld *c, struct rs_model_hparams *hp)
{
    int64_t i = rs_gguf_find_tensor(c->g, "token_embd.weight");
    if (i < 0)
        return fail(c, RS_EINVAL, "missing tensor token_embd.weight");
    const struct rs_gguf_tensor *t = rs_gguf_tensor(c->g, (uint64_t)i);
    if (t->ne[1] == 0 || t->ne[1] > MAX_VOCAB)
        return fail(c, RS_EINVAL, "tensor token_embd.weight has %llu rows (1..%u allowed)",
                    (unsigned long long)t->ne[1], MAX_VOCAB);
    hp->n_vocab = (uint32_t)t->ne[1];
    uint32_t declared = hp->n_vocab;
    rs_err rc = (c->a->flags & ARCH_VOCAB_KEY) ? get_u32(c, "vocab_size", 0, hp->n_vocab, &declared)
                                                : RS_OK;
    if (rc != RS_OK)
        return rc;
    if (declared != hp->n_vocab)
        return fail(c, RS_EINVAL, "%s.vocab_size %u differs from token_embd rows %u",
                    c->a->name, declared, hp->n_vocab);
    return RS_OK;
}

/* Every tensor of the file was taken by some check: a leftover one is refused by name. */
static rs_err check_all_used(const struct ld *c)
{
    for (uint64_t i = 0; i < rs_gguf_n_tensors(c->g); i++)
        if (!c->used[i])
            return fail(c, RS_EINVAL, "tensor %s is not part of a %s model as this engine "
                        "(and llama.cpp) reads it", rs_gguf_tensor(c->g, i)->name, c->a->name);
    return RS_OK;
}

static rs_err load_tensors(struct ld *c, struct llama_desc *d)
{
    struct rs_model_hparams *hp = &d->hp;
    d->n_vectors = hp->dim + hp->rope_dim / 2 + (size_t)hp->n_layers * layer_vec_floats(c->a, hp);
    d->vectors = calloc(d->n_vectors, sizeof(float));
    d->layers = calloc(hp->n_layers, sizeof(*d->layers));
    c->used = calloc(rs_gguf_n_tensors(c->g) + 1, 1);
    if (d->vectors == NULL || d->layers == NULL || c->used == NULL)
        return fail(c, RS_ENOMEM, "out of memory for %u layers", hp->n_layers);
    float *vec = d->vectors;
    rs_err rc = load_globals(c, d, &vec);
    for (uint32_t il = 0; rc == RS_OK && il < hp->n_layers; il++)
        rc = load_layer(c, hp, il, &d->layers[il], &vec);
    return rc == RS_OK ? check_all_used(c) : rc;
}

rs_err llama_desc_load(const rs_gguf *g, struct llama_desc *d, char *err, size_t len)
{
    memset(d, 0, sizeof(*d));
    d->gguf = g;
    struct ld c = {.g = g, .err = err, .len = len};
    rs_err rc = read_hparams(&c, &d->hp);
    if (rc == RS_OK)
        rc = read_vocab_size(&c, &d->hp);
    if (rc == RS_OK)
        rc = load_tensors(&c, d);
    free(c.used);
    if (rc != RS_OK)
        llama_desc_free(d);
    return rc;
}

void llama_desc_free(struct llama_desc *d)
{
    free(d->layers);
    free(d->vectors);
    d->layers = NULL;
    d->vectors = NULL;
}

/* SPDX-License-Identifier: MIT */
/*
 * GGUF -> llama_desc: hyperparameters from `llama.*` metadata with
 * llama.cpp's defaults, then every tensor checked against them. A file is
 * outside input: each failure names the key or tensor and what was expected.
 */
#include "launcherd/engine/llama.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/quant.h"
#include "launcherd/engine/kernels.h"

/* Upper bounds that keep every size computed from them far from overflow. */
#define MAX_DIM (1u << 16)
#define MAX_FFN (1u << 20)
#define MAX_LAYERS 1024u
#define MAX_HEADS 1024u
#define MAX_VOCAB (1u << 24)

static rs_err fail(char *err, size_t err_len, rs_err rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static rs_err fail(char *err, size_t err_len, rs_err rc, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    rs_log_error("model: %s", msg);
    if (err != NULL && err_len > 0)
        snprintf(err, err_len, "%s", msg);
    return rc;
}

/* Reads llama.<key> as u32; a missing key gives `def` unless required. */
static rs_err get_u32(const rs_gguf *g, const char *key, int required, uint32_t def,
                      uint32_t *out, char *err, size_t err_len)
{
    char full[128];
    snprintf(full, sizeof(full), "llama.%s", key);
    rs_err rc = rs_gguf_get_u32(g, full, out);
    if (rc == RS_ENOENT && !required) {
        *out = def;
        return RS_OK;
    }
    if (rc == RS_ENOENT)
        return fail(err, err_len, RS_EINVAL, "missing metadata key %s", full);
    if (rc != RS_OK)
        return fail(err, err_len, RS_EINVAL, "metadata key %s is not an unsigned 32-bit value",
                    full);
    return RS_OK;
}

static rs_err get_f32(const rs_gguf *g, const char *key, int required, float def, float *out,
                      char *err, size_t err_len)
{
    char full[128];
    snprintf(full, sizeof(full), "llama.%s", key);
    rs_err rc = rs_gguf_get_f32(g, full, out);
    if (rc == RS_ENOENT && !required) {
        *out = def;
        return RS_OK;
    }
    if (rc == RS_ENOENT)
        return fail(err, err_len, RS_EINVAL, "missing metadata key %s", full);
    if (rc != RS_OK)
        return fail(err, err_len, RS_EINVAL, "metadata key %s is not a float", full);
    if (!isfinite(*out) || *out <= 0.0f)
        return fail(err, err_len, RS_EINVAL, "metadata key %s = %g, must be finite and > 0",
                    full, (double)*out);
    return RS_OK;
}

static rs_err check_arch(const rs_gguf *g, char *err, size_t err_len)
{
    struct rs_gguf_str arch;
    if (rs_gguf_get_str(g, "general.architecture", &arch) != RS_OK)
        return fail(err, err_len, RS_EINVAL, "missing string key general.architecture");
    if (arch.len != 5 || memcmp(arch.ptr, "llama", 5) != 0)
        return fail(err, err_len, RS_EUNSUPPORTED,
                    "general.architecture is '%.*s'; only 'llama' is supported",
                    (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
    return RS_OK;
}

/* rope.scaling.type none|linear (absent: linear when a factor is given, as llama.cpp). */
static rs_err read_rope_scaling(const rs_gguf *g, struct rs_model_hparams *hp, char *err,
                                size_t err_len)
{
    struct rs_gguf_str type = {"linear", 6};
    rs_err rc = rs_gguf_get_str(g, "llama.rope.scaling.type", &type);
    if (rc != RS_OK && rc != RS_ENOENT)
        return fail(err, err_len, RS_EINVAL, "llama.rope.scaling.type is not a string");
    int none = type.len == 4 && memcmp(type.ptr, "none", 4) == 0;
    int linear = type.len == 6 && memcmp(type.ptr, "linear", 6) == 0;
    if (!none && !linear)
        return fail(err, err_len, RS_EUNSUPPORTED,
                    "llama.rope.scaling.type '%.*s' is not supported (none, linear)",
                    (int)(type.len > 32 ? 32 : type.len), type.ptr);
    float factor = 1.0f;
    if (rs_gguf_find_key(g, "llama.rope.scaling.factor") >= 0)
        rc = get_f32(g, "rope.scaling.factor", 1, 1.0f, &factor, err, err_len);
    else
        rc = get_f32(g, "rope.scale_linear", 0, 1.0f, &factor, err, err_len);
    if (rc != RS_OK)
        return rc;
    hp->rope_scale = none ? 1.0f : factor;
    return RS_OK;
}

static rs_err read_dims(const rs_gguf *g, struct rs_model_hparams *hp, char *err, size_t len)
{
    rs_err rc;
    if ((rc = get_u32(g, "embedding_length", 1, 0, &hp->dim, err, len)) != RS_OK ||
        (rc = get_u32(g, "block_count", 1, 0, &hp->n_layers, err, len)) != RS_OK ||
        (rc = get_u32(g, "feed_forward_length", 1, 0, &hp->ffn_dim, err, len)) != RS_OK ||
        (rc = get_u32(g, "attention.head_count", 1, 0, &hp->n_heads, err, len)) != RS_OK ||
        (rc = get_u32(g, "attention.head_count_kv", 0, hp->n_heads, &hp->n_kv_heads, err,
                      len)) != RS_OK ||
        (rc = get_u32(g, "context_length", 0, 0, &hp->ctx_len, err, len)) != RS_OK)
        return rc;
    if (hp->dim == 0 || hp->dim > MAX_DIM || hp->n_layers == 0 || hp->n_layers > MAX_LAYERS ||
        hp->ffn_dim == 0 || hp->ffn_dim > MAX_FFN || hp->n_heads == 0 || hp->n_heads > MAX_HEADS)
        return fail(err, len, RS_EINVAL,
                    "hyperparameters out of range: dim %u, layers %u, ffn %u, heads %u", hp->dim,
                    hp->n_layers, hp->ffn_dim, hp->n_heads);
    if (hp->dim % hp->n_heads != 0)
        return fail(err, len, RS_EINVAL, "embedding_length %u is not a multiple of head_count %u",
                    hp->dim, hp->n_heads);
    if (hp->n_kv_heads == 0 || hp->n_heads % hp->n_kv_heads != 0)
        return fail(err, len, RS_EINVAL, "head_count %u is not a multiple of head_count_kv %u",
                    hp->n_heads, hp->n_kv_heads);
    hp->head_dim = hp->dim / hp->n_heads;
    if (hp->head_dim % 2 != 0)
        return fail(err, len, RS_EUNSUPPORTED, "head dimension %u is odd", hp->head_dim);
    uint32_t kl, vl;
    if ((rc = get_u32(g, "attention.key_length", 0, hp->head_dim, &kl, err, len)) != RS_OK ||
        (rc = get_u32(g, "attention.value_length", 0, hp->head_dim, &vl, err, len)) != RS_OK)
        return rc;
    if (kl != hp->head_dim || vl != hp->head_dim)
        return fail(err, len, RS_EUNSUPPORTED,
                    "attention.key_length %u / value_length %u differ from dim/heads %u", kl, vl,
                    hp->head_dim);
    if ((rc = get_u32(g, "rope.dimension_count", 0, hp->head_dim, &hp->rope_dim, err, len)) !=
        RS_OK)
        return rc;
    if (hp->rope_dim % 2 != 0 || hp->rope_dim > hp->head_dim)
        return fail(err, len, RS_EINVAL, "rope.dimension_count %u must be even and <= %u",
                    hp->rope_dim, hp->head_dim);
    return RS_OK;
}

static rs_err read_hparams(const rs_gguf *g, struct rs_model_hparams *hp, char *err, size_t len)
{
    memset(hp, 0, sizeof(*hp));
    rs_err rc;
    if ((rc = check_arch(g, err, len)) != RS_OK || (rc = read_dims(g, hp, err, len)) != RS_OK ||
        (rc = get_f32(g, "rope.freq_base", 0, 10000.0f, &hp->rope_freq_base, err, len)) !=
            RS_OK ||
        (rc = get_f32(g, "attention.layer_norm_rms_epsilon", 1, 0, &hp->rms_eps, err, len)) !=
            RS_OK)
        return rc;
    return read_rope_scaling(g, hp, err, len);
}

static const struct rs_gguf_tensor *find(const rs_gguf *g, const char *name)
{
    int64_t i = rs_gguf_find_tensor(g, name);
    return i < 0 ? NULL : rs_gguf_tensor(g, (uint64_t)i);
}

static rs_err check_shape(const struct rs_gguf_tensor *t, uint64_t ne0, uint64_t ne1, char *err,
                          size_t len)
{
    if (t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == 1 && t->ne[3] == 1)
        return RS_OK;
    return fail(err, len, RS_EINVAL,
                "tensor %s has shape [%llu, %llu, %llu, %llu], expected [%llu, %llu]", t->name,
                (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
                (unsigned long long)ne0, (unsigned long long)ne1);
}

/* A matrix of `rows` x `cols` (ggml [cols, rows]) in a type the kernels handle. */
static rs_err get_mat(const rs_gguf *g, const char *name, uint32_t cols, uint32_t rows,
                      struct llama_mat *m, char *err, size_t len)
{
    const struct rs_gguf_tensor *t = find(g, name);
    if (t == NULL)
        return fail(err, len, RS_EINVAL, "missing tensor %s", name);
    if (!kern_type_supported(t->type))
        return fail(err, len, RS_EUNSUPPORTED,
                    "tensor %s has type %s; supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, "
                    "Q6_K", name,
                    rs_ggml_type_name(t->type));
    rs_err rc = check_shape(t, cols, rows, err, len);
    if (rc != RS_OK)
        return rc;
    if ((uintptr_t)t->data % (t->type == RS_GGML_F32 ? 4 : 2) != 0)
        return fail(err, len, RS_EUNSUPPORTED, "tensor %s data is not aligned to its element type",
                    name);
    m->name = t->name;
    m->data = t->data;
    m->type = t->type;
    m->rows = rows;
    m->cols = cols;
    m->row_bytes = (size_t)rs_ggml_row_bytes(t->type, cols);
    return RS_OK;
}

/* A vector of n values, widened to F32 into dst. */
static rs_err get_vec(const rs_gguf *g, const char *name, uint32_t n, float *dst, char *err,
                      size_t len)
{
    const struct rs_gguf_tensor *t = find(g, name);
    if (t == NULL)
        return fail(err, len, RS_EINVAL, "missing tensor %s", name);
    if (t->type != RS_GGML_F32 && t->type != RS_GGML_F16 && t->type != RS_GGML_BF16)
        return fail(err, len, RS_EUNSUPPORTED, "tensor %s has type %s; supported: F32, F16, BF16",
                    name, rs_ggml_type_name(t->type));
    rs_err rc = check_shape(t, n, 1, err, len);
    if (rc != RS_OK)
        return rc;
    if (t->type != RS_GGML_F32 && (uintptr_t)t->data % 2 != 0)
        return fail(err, len, RS_EUNSUPPORTED, "tensor %s data is not 2-byte aligned", name);
    if (t->type == RS_GGML_F32)
        memcpy(dst, t->data, (size_t)n * sizeof(float)); /* the mapping may be unaligned for F32 */
    else
        rs_quant_row_to_f32(t->type, t->data, dst, n);
    for (uint32_t i = 0; i < n; i++)
        if (!isfinite(dst[i]))
            return fail(err, len, RS_EINVAL, "tensor %s has a non-finite value at %u", name, i);
    return RS_OK;
}

static rs_err load_layer(const rs_gguf *g, const struct rs_model_hparams *hp, uint32_t il,
                         struct llama_layer *l, float *vec, char *err, size_t len)
{
    uint32_t d = hp->dim, qd = hp->n_heads * hp->head_dim, kvd = hp->n_kv_heads * hp->head_dim;
    struct {
        const char *suffix;
        struct llama_mat *m;
        uint32_t cols, rows;
    } mats[] = {
        {"attn_q", &l->wq, d, qd},          {"attn_k", &l->wk, d, kvd},
        {"attn_v", &l->wv, d, kvd},         {"attn_output", &l->wo, qd, d},
        {"ffn_gate", &l->w_gate, d, hp->ffn_dim}, {"ffn_up", &l->w_up, d, hp->ffn_dim},
        {"ffn_down", &l->w_down, hp->ffn_dim, d},
    };
    char name[RS_GGUF_MAX_NAME + 1];
    rs_err rc;
    for (size_t i = 0; i < sizeof(mats) / sizeof(mats[0]); i++) {
        snprintf(name, sizeof(name), "blk.%u.%s.weight", il, mats[i].suffix);
        if ((rc = get_mat(g, name, mats[i].cols, mats[i].rows, mats[i].m, err, len)) != RS_OK)
            return rc;
    }
    snprintf(name, sizeof(name), "blk.%u.attn_norm.weight", il);
    if ((rc = get_vec(g, name, d, vec, err, len)) != RS_OK)
        return rc;
    snprintf(name, sizeof(name), "blk.%u.ffn_norm.weight", il);
    if ((rc = get_vec(g, name, d, vec + d, err, len)) != RS_OK)
        return rc;
    l->attn_norm = vec;
    l->ffn_norm = vec + d;
    return RS_OK;
}

static rs_err load_globals(const rs_gguf *g, struct llama_desc *d, float *vec, char *err,
                           size_t len)
{
    struct rs_model_hparams *hp = &d->hp;
    rs_err rc = get_mat(g, "token_embd.weight", hp->dim, hp->n_vocab, &d->tok_embd, err, len);
    if (rc != RS_OK)
        return rc;
    hp->tied_output = find(g, "output.weight") == NULL;
    if (hp->tied_output)
        d->output = d->tok_embd;
    else if ((rc = get_mat(g, "output.weight", hp->dim, hp->n_vocab, &d->output, err, len)) !=
             RS_OK)
        return rc;
    if ((rc = get_vec(g, "output_norm.weight", hp->dim, vec, err, len)) != RS_OK)
        return rc;
    d->output_norm = vec;
    hp->has_rope_freqs = find(g, "rope_freqs.weight") != NULL;
    if (hp->has_rope_freqs) {
        float *rf = vec + hp->dim;
        if ((rc = get_vec(g, "rope_freqs.weight", hp->rope_dim / 2, rf, err, len)) != RS_OK)
            return rc;
        d->rope_freqs = rf;
    }
    return RS_OK;
}

/* n_vocab from token_embd's rows, cross-checked with llama.vocab_size when present. */
static rs_err read_vocab_size(const rs_gguf *g, struct rs_model_hparams *hp, char *err,
                              size_t len)
{
    const struct rs_gguf_tensor *t = find(g, "token_embd.weight");
    if (t == NULL)
        return fail(err, len, RS_EINVAL, "missing tensor token_embd.weight");
    if (t->ne[1] == 0 || t->ne[1] > MAX_VOCAB)
        return fail(err, len, RS_EINVAL, "tensor token_embd.weight has %llu rows (1..%u allowed)",
                    (unsigned long long)t->ne[1], MAX_VOCAB);
    hp->n_vocab = (uint32_t)t->ne[1];
    uint32_t declared;
    rs_err rc = get_u32(g, "vocab_size", 0, hp->n_vocab, &declared, err, len);
    if (rc != RS_OK)
        return rc;
    if (declared != hp->n_vocab)
        return fail(err, len, RS_EINVAL, "llama.vocab_size %u differs from token_embd rows %u",
                    declared, hp->n_vocab);
    return RS_OK;
}

rs_err llama_desc_load(const rs_gguf *g, struct llama_desc *d, char *err, size_t len)
{
    memset(d, 0, sizeof(*d));
    d->gguf = g;
    rs_err rc = read_hparams(g, &d->hp, err, len);
    if (rc == RS_OK)
        rc = read_vocab_size(g, &d->hp, err, len);
    if (rc != RS_OK)
        return rc;
    struct rs_model_hparams *hp = &d->hp;
    size_t n_vec = (size_t)hp->dim * (2u * hp->n_layers + 1) + hp->rope_dim / 2;
    d->vectors = malloc(n_vec * sizeof(float));
    d->layers = calloc(hp->n_layers, sizeof(*d->layers));
    if (d->vectors == NULL || d->layers == NULL) {
        llama_desc_free(d);
        return fail(err, len, RS_ENOMEM, "out of memory for %u layers", hp->n_layers);
    }
    float *vec = d->vectors;
    rc = load_globals(g, d, vec, err, len);
    vec += hp->dim + hp->rope_dim / 2;
    for (uint32_t il = 0; rc == RS_OK && il < hp->n_layers; il++, vec += 2 * hp->dim)
        rc = load_layer(g, hp, il, &d->layers[il], vec, err, len);
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

/* SPDX-License-Identifier: MIT */
/*
 * The reference forward pass (ref_forward.h): each architecture's own small
 * table, the tensors widened to doubles, and one layer at a time in plain
 * loops. Part of rs_testlib.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/engine_testutil.h"
#include "tests/unit/ref_forward.h"

/* What an architecture computes, as the refdata README states it. */
struct ref_arch {
    const char *name;
    int neox;       /* rotate-half RoPE */
    int embd_scale; /* embeddings times sqrt(n_embd) */
    int gelu;       /* GeGLU with the tanh GELU; else SwiGLU */
    int softcap;    /* attention / final logit soft-caps (keys; defaults 50 / 30) */
    int fused;      /* attn_qkv [Q|K|V], ffn_up [gate|up] */
    int swa;        /* 0 none, 1 every layer, 2 even layers, 6 all but (il+1) % 6 == 0 */
    double local_base; /* > 0: local layers' RoPE base, without scaling */
    uint32_t big;   /* layer count whose query scale is 1/sqrt(n_embd/n_head) */
};

static const struct ref_arch REF_ARCHS[] = {
    {"llama", 0, 0, 0, 0, 0, 0, 0, 0},     {"qwen2", 1, 0, 0, 0, 0, 0, 0, 0},
    {"qwen3", 1, 0, 0, 0, 0, 0, 0, 0},     {"gemma2", 1, 1, 1, 1, 0, 2, 0, 46},
    {"gemma3", 1, 1, 1, 0, 0, 6, 10000, 62}, {"phi3", 1, 0, 0, 0, 1, 1, 0, 0},
};


static uint32_t ref_u32(const struct ref_model *r, const char *key, uint32_t def)
{
    char full[128];
    uint32_t v = def;
    snprintf(full, sizeof(full), "%s.%s", r->a->name, key);
    rs_gguf_get_u32(r->g, full, &v);
    return v;
}

static double ref_f32(const struct ref_model *r, const char *key, double def)
{
    char full[128];
    float v;
    snprintf(full, sizeof(full), "%s.%s", r->a->name, key);
    return rs_gguf_get_f32(r->g, full, &v) == RS_OK ? v : def;
}

/* Reads the metadata; returns 0, or 1 for an architecture the reference does not know. */
int ref_open(const rs_gguf *g, struct ref_model *r)
{
    struct rs_gguf_str arch;
    memset(r, 0, sizeof(*r));
    r->g = g;
    if (rs_gguf_get_str(g, "general.architecture", &arch) != RS_OK)
        return 1;
    for (size_t i = 0; i < sizeof(REF_ARCHS) / sizeof(REF_ARCHS[0]); i++)
        if (strlen(REF_ARCHS[i].name) == arch.len && memcmp(REF_ARCHS[i].name, arch.ptr, arch.len) == 0)
            r->a = &REF_ARCHS[i];
    if (r->a == NULL)
        return 1;
    r->dim = ref_u32(r, "embedding_length", 0), r->layers = ref_u32(r, "block_count", 0);
    r->heads = ref_u32(r, "attention.head_count", 1);
    r->kv_heads = ref_u32(r, "attention.head_count_kv", r->heads);
    r->hd = ref_u32(r, "attention.key_length", r->dim / r->heads);
    r->rope_dim = ref_u32(r, "rope.dimension_count", r->hd);
    r->ffn = ref_u32(r, "feed_forward_length", 0);
    r->vocab = (uint32_t)rs_gguf_tensor(g, (uint64_t)rs_gguf_find_tensor(g, "token_embd.weight"))->ne[1];
    r->eps = ref_f32(r, "attention.layer_norm_rms_epsilon", 1e-5);
    r->base = ref_f32(r, "rope.freq_base", 10000.0);
    r->rope_scale = ref_f32(r, "rope.scaling.factor", 1.0);
    r->window = r->a->swa ? ref_u32(r, "attention.sliding_window", 4096) : 0;
    uint32_t qs = r->layers == r->a->big ? r->dim / r->heads : r->hd;
    r->attn_scale = 1.0 / sqrt((double)qs);
    r->cap_attn = r->a->softcap ? ref_f32(r, "attn_logit_softcapping", 50.0) : 0;
    r->cap_final = r->a->softcap ? ref_f32(r, "final_logit_softcapping", 30.0) : 0;
    return 0;
}

/* Tensor `name` (or `fallback`) as doubles, widened exactly from its stored type; NULL absent. */
static double *ref_tensor(const struct ref_model *r, const char *name, const char *fallback)
{
    int64_t i = rs_gguf_find_tensor(r->g, name);
    if (i < 0 && fallback != NULL)
        i = rs_gguf_find_tensor(r->g, fallback);
    if (i < 0)
        return NULL;
    const struct rs_gguf_tensor *t = rs_gguf_tensor(r->g, (uint64_t)i);
    size_t rows = t->ne[1], cols = t->ne[0], rb = rs_ggml_row_bytes(t->type, cols);
    double *out = malloc(rows * cols * sizeof(double));
    float *row = malloc(cols * sizeof(float));
    for (size_t y = 0; y < rows; y++) {
        tu_dequant_row(t->type, (const uint8_t *)t->data + y * rb, row, cols);
        for (size_t x = 0; x < cols; x++)
            out[y * cols + x] = row[x];
    }
    free(row);
    return out;
}

static double *ref_layer_tensor(const struct ref_model *r, uint32_t l, const char *what)
{
    char name[96];
    snprintf(name, sizeof(name), "blk.%u.%s", l, what);
    return ref_tensor(r, name, NULL);
}

static void ref_matvec(const double *w, const double *x, size_t rows, size_t cols, double *y)
{
    for (size_t i = 0; i < rows; i++) {
        double s = 0;
        for (size_t j = 0; j < cols; j++)
            s += w[i * cols + j] * x[j];
        y[i] = s;
    }
}

static void ref_norm(const double *x, const double *w, size_t n, double eps, double *out)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double sc = 1.0 / sqrt(ss / n + eps);
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] * sc * w[i];
}

static int ref_local(const struct ref_model *r, uint32_t l)
{
    int s = r->a->swa;
    return r->window > 0 && (s == 1 || (s == 2 && l % 2 == 0) || (s == 6 && (l + 1) % 6 != 0));
}

/* RoPE of each head's first rope_dim values: adjacent pairs, or halves (NEOX). */
static void ref_rope(const struct ref_model *r, double *v, size_t heads, uint32_t pos, int local,
                     const double *ff)
{
    double base = local && r->a->local_base > 0 ? r->a->local_base : r->base;
    double scale = local && r->a->local_base > 0 ? 1.0 : r->rope_scale;
    uint32_t half = r->rope_dim / 2;
    for (size_t h = 0; h < heads; h++)
        for (uint32_t i = 0; i < half; i++) {
            double th = pos / scale * pow(base, -2.0 * i / (double)r->rope_dim);
            if (ff != NULL)
                th /= ff[i];
            double *p = v + h * r->hd;
            size_t i0 = r->a->neox ? i : 2 * i, i1 = r->a->neox ? i + half : 2 * i + 1;
            double a = p[i0], b = p[i1];
            p[i0] = a * cos(th) - b * sin(th);
            p[i1] = a * sin(th) + b * cos(th);
        }
}

/* GQA attention of position pos over kc/vc (rows of kv_dim), window and soft-cap as the arch. */
static void ref_attention(const struct ref_model *r, const double *q, const double *kc,
                          const double *vc, uint32_t pos, int local, double *out)
{
    size_t hd = r->hd, kvd = (size_t)r->kv_heads * hd;
    uint32_t first = local && pos + 1 > r->window ? pos + 1 - r->window : 0;
    double *s = malloc((pos + 1) * sizeof(double));
    for (uint32_t h = 0; h < r->heads; h++) {
        size_t kh = h / (r->heads / r->kv_heads);
        double mx = -1e300, sum = 0;
        for (uint32_t t = first; t <= pos; t++) {
            double d = 0;
            for (size_t i = 0; i < hd; i++)
                d += q[h * hd + i] * kc[t * kvd + kh * hd + i];
            s[t] = d * r->attn_scale;
            if (r->cap_attn > 0)
                s[t] = r->cap_attn * tanh(s[t] / r->cap_attn);
            mx = s[t] > mx ? s[t] : mx;
        }
        for (uint32_t t = first; t <= pos; t++)
            sum += (s[t] = exp(s[t] - mx));
        for (size_t i = 0; i < hd; i++) {
            double o = 0;
            for (uint32_t t = first; t <= pos; t++)
                o += s[t] / sum * vc[t * kvd + kh * hd + i];
            out[h * hd + i] = o;
        }
    }
    free(s);
}

/* One layer's weights as doubles (fused ones split here); ref_weights_free releases them. */
struct ref_weights {
    double *an, *fn, *wq, *wk, *wv, *wo, *wg, *wu, *wd, *bq, *bk, *bv, *qn, *kn, *pa, *pf;
    double *qkv, *up2;
};

static void ref_weights_load(const struct ref_model *r, uint32_t l, struct ref_weights *w)
{
    size_t d = r->dim, qd = (size_t)r->heads * r->hd, kvd = (size_t)r->kv_heads * r->hd;
    memset(w, 0, sizeof(*w));
    w->an = ref_layer_tensor(r, l, "attn_norm.weight");
    w->fn = ref_layer_tensor(r, l, "ffn_norm.weight");
    w->wo = ref_layer_tensor(r, l, "attn_output.weight");
    w->wd = ref_layer_tensor(r, l, "ffn_down.weight");
    if (r->a->fused) {
        w->qkv = ref_layer_tensor(r, l, "attn_qkv.weight");
        w->wq = w->qkv, w->wk = w->qkv + qd * d, w->wv = w->qkv + (qd + kvd) * d;
        w->up2 = ref_layer_tensor(r, l, "ffn_up.weight");
        w->wg = w->up2, w->wu = w->up2 + (size_t)r->ffn * d;
    } else {
        w->wq = ref_layer_tensor(r, l, "attn_q.weight");
        w->wk = ref_layer_tensor(r, l, "attn_k.weight");
        w->wv = ref_layer_tensor(r, l, "attn_v.weight");
        w->wg = ref_layer_tensor(r, l, "ffn_gate.weight");
        w->wu = ref_layer_tensor(r, l, "ffn_up.weight");
    }
    w->bq = ref_layer_tensor(r, l, "attn_q.bias"), w->bk = ref_layer_tensor(r, l, "attn_k.bias");
    w->bv = ref_layer_tensor(r, l, "attn_v.bias");
    w->qn = ref_layer_tensor(r, l, "attn_q_norm.weight");
    w->kn = ref_layer_tensor(r, l, "attn_k_norm.weight");
    w->pa = ref_layer_tensor(r, l, "post_attention_norm.weight");
    w->pf = ref_layer_tensor(r, l, "post_ffw_norm.weight");
}

static void ref_weights_free(struct ref_weights *w)
{
    if (w->qkv == NULL)
        free(w->wq), free(w->wk), free(w->wv), free(w->wg), free(w->wu);
    free(w->qkv), free(w->up2), free(w->an), free(w->fn), free(w->wo), free(w->wd);
    free(w->bq), free(w->bk), free(w->bv), free(w->qn), free(w->kn), free(w->pa), free(w->pf);
}

static double ref_gelu(double x)
{
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* Projections of xn into q and this position's K/V row: biases, q/k norms, RoPE. */
static void ref_qkv(const struct ref_model *r, const struct ref_weights *w, const double *xn,
                    uint32_t pos, int local, const double *ff, double *q, double *k, double *v)
{
    size_t d = r->dim, hd = r->hd, qd = (size_t)r->heads * hd, kvd = (size_t)r->kv_heads * hd;
    ref_matvec(w->wq, xn, qd, d, q);
    ref_matvec(w->wk, xn, kvd, d, k);
    ref_matvec(w->wv, xn, kvd, d, v);
    for (size_t i = 0; w->bq != NULL && i < qd; i++)
        q[i] += w->bq[i];
    for (size_t i = 0; w->bk != NULL && i < kvd; i++)
        k[i] += w->bk[i], v[i] += w->bv[i];
    for (size_t h = 0; w->qn != NULL && h < r->heads; h++)
        ref_norm(q + h * hd, w->qn, hd, r->eps, q + h * hd);
    for (size_t h = 0; w->kn != NULL && h < r->kv_heads; h++)
        ref_norm(k + h * hd, w->kn, hd, r->eps, k + h * hd);
    ref_rope(r, q, r->heads, pos, local, ff);
    ref_rope(r, k, r->kv_heads, pos, local, ff);
}

/* One layer at position pos; kc/vc hold this layer's K/V of earlier positions. */
static void ref_layer(const struct ref_model *r, uint32_t l, uint32_t pos, const double *ff,
                      double *x, double *kc, double *vc)
{
    size_t d = r->dim, qd = (size_t)r->heads * r->hd, kvd = (size_t)r->kv_heads * r->hd;
    size_t f = r->ffn, big = (qd > d ? qd : d) > f ? (qd > d ? qd : d) : f;
    struct ref_weights w;
    ref_weights_load(r, l, &w);
    int local = ref_local(r, l);
    double *xn = malloc(big * 8), *q = malloc(qd * 8), *att = malloc(qd * 8), *o = malloc(big * 8);
    double *g = malloc(f * 8), *u = malloc(f * 8);
    ref_norm(x, w.an, d, r->eps, xn);
    ref_qkv(r, &w, xn, pos, local, ff, q, kc + pos * kvd, vc + pos * kvd);
    ref_attention(r, q, kc, vc, pos, local, att);
    ref_matvec(w.wo, att, d, qd, o);
    if (w.pa != NULL)
        ref_norm(o, w.pa, d, r->eps, o);
    for (size_t i = 0; i < d; i++)
        x[i] += o[i];
    ref_norm(x, w.fn, d, r->eps, xn);
    ref_matvec(w.wg, xn, f, d, g);
    ref_matvec(w.wu, xn, f, d, u);
    for (size_t i = 0; i < f; i++)
        g[i] = (r->a->gelu ? ref_gelu(g[i]) : g[i] / (1 + exp(-g[i]))) * u[i];
    ref_matvec(w.wd, g, d, f, o);
    if (w.pf != NULL)
        ref_norm(o, w.pf, d, r->eps, o);
    for (size_t i = 0; i < d; i++)
        x[i] += o[i];
    ref_weights_free(&w);
    free(xn), free(q), free(att), free(o), free(g), free(u);
}

/* Logits after each of toks[0..n) through the reference, into out (n x vocab). */
void ref_forward(const struct ref_model *r, const int32_t *toks, uint32_t n, double *out)
{
    size_t d = r->dim, kvd = (size_t)r->kv_heads * r->hd, V = r->vocab;
    double *emb = ref_tensor(r, "token_embd.weight", NULL);
    double *outw = ref_tensor(r, "output.weight", "token_embd.weight");
    double *on = ref_tensor(r, "output_norm.weight", NULL);
    double *ff = ref_tensor(r, "rope_freqs.weight", NULL);
    double *kc = calloc((size_t)r->layers * n * kvd, 8), *vc = calloc((size_t)r->layers * n * kvd, 8);
    double *x = malloc(d * 8), *xn = malloc(d * 8);
    double es = r->a->embd_scale ? sqrt((double)d) : 1.0;
    for (uint32_t p = 0; p < n; p++) {
        for (size_t i = 0; i < d; i++)
            x[i] = emb[(size_t)toks[p] * d + i] * es;
        for (uint32_t l = 0; l < r->layers; l++)
            ref_layer(r, l, p, ff, x, kc + (size_t)l * n * kvd, vc + (size_t)l * n * kvd);
        ref_norm(x, on, d, r->eps, xn);
        double *lo = out + (size_t)p * V;
        ref_matvec(outw, xn, V, d, lo);
        for (size_t i = 0; r->cap_final > 0 && i < V; i++)
            lo[i] = r->cap_final * tanh(lo[i] / r->cap_final);
    }
    free(emb), free(outw), free(on), free(ff), free(kc), free(vc), free(x), free(xn);
}

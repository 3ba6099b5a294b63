/* SPDX-License-Identifier: MIT */
/*
 * The llama forward pass against published outputs: greedy decoding of the
 * real stories260K model must give exactly the 256 ids that reproduce
 * llama2.c's published text (refdata README sections 6 and 7), with every
 * kernel variant and thread count. And against an independent, naive
 * double-precision forward pass written here, on random models that use what
 * stories260K does not: RoPE frequency base and linear scaling, a partial
 * rope dimension, tied output, quantized weights.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"
#include "common/quant.h"
#include "launcherd/engine/model.h"
#include "tests/rs_test.h"
#include "tests/unit/engine_testutil.h"

/* Reads the space-separated ids of refdata/expected/<name> into ids (at most cap). */
static int read_ids(const char *rel, int32_t *ids, int cap)
{
    char path[1024];
    if (rs_test_refdata(rel, path, sizeof(path)) == NULL)
        return -1;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    int n = 0;
    while (n < cap && fscanf(f, "%d", &ids[n]) == 1)
        n++;
    fclose(f);
    return n;
}

static int argmax(const float *v, uint32_t n)
{
    int best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = (int)i;
    return best;
}

/* Greedy decoding from BOS for n steps, one token per step, into out. */
static int greedy(int isa, int threads, int32_t *out, int n)
{
    char path[1024], err[256];
    if (rs_test_refdata("stories260K.gguf", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    struct rs_model_opts o;
    rs_model_opts_default(&o);
    o.isa = isa;
    o.n_threads = threads;
    rs_model *m;
    RS_CHECK_MSG(rs_model_load(path, &o, &m, err, sizeof(err)) == RS_OK, "%s", err);
    rs_kvcache *kv;
    RS_CHECK(rs_kvcache_create(m, 32, 16, &kv) == RS_OK);
    uint32_t table[32];
    for (uint32_t i = 0; i < 32; i++)
        table[i] = 31 - i; /* any permutation: the table, not the order, decides */
    int32_t tok = 1;
    for (int i = 0; i < n; i++) {
        struct rs_model_seq s = {&tok, 1, (uint32_t)i, table, 32, 1};
        RS_CHECK(rs_model_step(m, kv, &s, 1) == RS_OK);
        tok = argmax(rs_model_logits(m, 0), rs_model_hparams(m)->n_vocab);
        out[i] = tok;
    }
    rs_kvcache_destroy(&kv);
    rs_model_destroy(&m);
    return 0;
}

static int check_greedy(int isa, int threads)
{
    int32_t want[256], got[256];
    if (read_ids("expected/stories260K.greedy-n256.ids", want, 256) != 256)
        return RS_TEST_SKIP;
    int rc = greedy(isa, threads, got, 256);
    if (rc != 0)
        return rc;
    for (int i = 0; i < 256; i++)
        RS_CHECK_MSG(got[i] == want[i], "step %d: got %d, want %d", i, got[i], want[i]);
    return 0;
}

static int test_stories260k_greedy_ids(void)
{
    return check_greedy(RS_MODEL_ISA_AUTO, 0);
}

static int test_stories260k_greedy_ids_portable(void)
{
    return check_greedy(RS_MODEL_ISA_PORTABLE, 1);
}

static int test_stories260k_greedy_ids_3_threads(void)
{
    return check_greedy(RS_MODEL_ISA_AUTO, 3);
}


/* --- an independent reference: plain loops in double precision ------------------------ */

struct ref_model {
    const struct rs_model_hparams *hp;
    const rs_gguf *g;
};

/* Tensor `name` (or `fallback`) as doubles, widened exactly from its stored type. */
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
    snprintf(name, sizeof(name), "blk.%u.%s.weight", l, what);
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

/* Rotates pairs (2i, 2i+1), i < rope_dim / 2, of each head, as llama's GGUF layout expects. */
static void ref_rope(double *v, size_t heads, const struct rs_model_hparams *hp, uint32_t pos)
{
    for (size_t h = 0; h < heads; h++)
        for (uint32_t i = 0; i < hp->rope_dim / 2; i++) {
            double th = pos / (double)hp->rope_scale *
                        pow(hp->rope_freq_base, -2.0 * i / (double)hp->rope_dim);
            double *p = v + h * hp->head_dim + 2 * i, a = p[0], b = p[1];
            p[0] = a * cos(th) - b * sin(th);
            p[1] = a * sin(th) + b * cos(th);
        }
}

/* Causal GQA attention of one position over kc/vc (n_pos rows of kv_dim). */
static void ref_attention(const struct rs_model_hparams *hp, const double *q, const double *kc,
                          const double *vc, uint32_t n_pos, double *out)
{
    size_t hd = hp->head_dim, kvd = (size_t)hp->n_kv_heads * hd;
    double *s = malloc(n_pos * sizeof(double));
    for (uint32_t h = 0; h < hp->n_heads; h++) {
        size_t kh = h / (hp->n_heads / hp->n_kv_heads);
        double mx = -1e300, sum = 0;
        for (uint32_t t = 0; t < n_pos; t++) {
            double d = 0;
            for (size_t i = 0; i < hd; i++)
                d += q[h * hd + i] * kc[t * kvd + kh * hd + i];
            s[t] = d / sqrt((double)hd);
            mx = s[t] > mx ? s[t] : mx;
        }
        for (uint32_t t = 0; t < n_pos; t++)
            sum += (s[t] = exp(s[t] - mx));
        for (size_t i = 0; i < hd; i++) {
            double o = 0;
            for (uint32_t t = 0; t < n_pos; t++)
                o += s[t] / sum * vc[t * kvd + kh * hd + i];
            out[h * hd + i] = o;
        }
    }
    free(s);
}

/* One layer at position pos; kc/vc hold this layer's K/V of earlier positions. */
static void ref_layer(const struct ref_model *r, uint32_t l, uint32_t pos, double *x, double *kc,
                      double *vc)
{
    const struct rs_model_hparams *hp = r->hp;
    size_t d = hp->dim, kvd = (size_t)hp->n_kv_heads * hp->head_dim, f = hp->ffn_dim;
    double *an = ref_layer_tensor(r, l, "attn_norm"), *fn = ref_layer_tensor(r, l, "ffn_norm");
    double *wq = ref_layer_tensor(r, l, "attn_q"), *wk = ref_layer_tensor(r, l, "attn_k");
    double *wv = ref_layer_tensor(r, l, "attn_v"), *wo = ref_layer_tensor(r, l, "attn_output");
    double *wg = ref_layer_tensor(r, l, "ffn_gate"), *wu = ref_layer_tensor(r, l, "ffn_up");
    double *wd = ref_layer_tensor(r, l, "ffn_down");
    double *xn = malloc(d * 8), *q = malloc(d * 8), *att = malloc(d * 8), *o = malloc(d * 8);
    double *g = malloc(f * 8), *u = malloc(f * 8);
    ref_norm(x, an, d, hp->rms_eps, xn);
    ref_matvec(wq, xn, d, d, q);
    ref_matvec(wk, xn, kvd, d, kc + pos * kvd);
    ref_matvec(wv, xn, kvd, d, vc + pos * kvd);
    ref_rope(q, hp->n_heads, hp, pos);
    ref_rope(kc + pos * kvd, hp->n_kv_heads, hp, pos);
    ref_attention(hp, q, kc, vc, pos + 1, att);
    ref_matvec(wo, att, d, d, o);
    for (size_t i = 0; i < d; i++)
        x[i] += o[i];
    ref_norm(x, fn, d, hp->rms_eps, xn);
    ref_matvec(wg, xn, f, d, g);
    ref_matvec(wu, xn, f, d, u);
    for (size_t i = 0; i < f; i++)
        g[i] = g[i] / (1 + exp(-g[i])) * u[i];
    ref_matvec(wd, g, d, f, o);
    for (size_t i = 0; i < d; i++)
        x[i] += o[i];
    free(an), free(fn), free(wq), free(wk), free(wv), free(wo), free(wg), free(wu), free(wd);
    free(xn), free(q), free(att), free(o), free(g), free(u);
}

/* Logits after each of toks[0..n) through the reference, into out (n x vocab). */
static void ref_forward(const struct ref_model *r, const int32_t *toks, uint32_t n, double *out)
{
    const struct rs_model_hparams *hp = r->hp;
    size_t d = hp->dim, kvd = (size_t)hp->n_kv_heads * hp->head_dim, V = hp->n_vocab;
    double *emb = ref_tensor(r, "token_embd.weight", NULL);
    double *outw = ref_tensor(r, "output.weight", "token_embd.weight");
    double *on = ref_tensor(r, "output_norm.weight", NULL);
    double *kc = calloc((size_t)hp->n_layers * n * kvd, 8), *vc = calloc((size_t)hp->n_layers * n * kvd, 8);
    double *x = malloc(d * 8), *xn = malloc(d * 8);
    for (uint32_t p = 0; p < n; p++) {
        memcpy(x, emb + (size_t)toks[p] * d, d * 8);
        for (uint32_t l = 0; l < hp->n_layers; l++)
            ref_layer(r, l, p, x, kc + (size_t)l * n * kvd, vc + (size_t)l * n * kvd);
        ref_norm(x, on, d, hp->rms_eps, xn);
        ref_matvec(outw, xn, V, d, out + (size_t)p * V);
    }
    free(emb), free(outw), free(on), free(kc), free(vc), free(x), free(xn);
}

/* The engine's logits after every position of a 12-token sequence match the reference. */
static int check_against_reference(const char *path, int isa)
{
    char err[256];
    struct rs_model_opts o;
    rs_model_opts_default(&o);
    o.isa = isa;
    rs_model *m;
    RS_CHECK_MSG(rs_model_load(path, &o, &m, err, sizeof(err)) == RS_OK, "%s", err);
    const struct rs_model_hparams *hp = rs_model_hparams(m);
    struct ref_model r = {hp, rs_model_gguf(m)};
    enum { N = 12 };
    int32_t toks[N];
    for (int i = 0; i < N; i++)
        toks[i] = (int32_t)((i * 37 + 1) % hp->n_vocab);
    double *want = malloc((size_t)N * hp->n_vocab * sizeof(double));
    ref_forward(&r, toks, N, want);
    rs_kvcache *kv;
    RS_CHECK(rs_kvcache_create(m, 8, 4, &kv) == RS_OK);
    uint32_t table[4] = {5, 0, 7, 2};
    double worst = 0;
    for (int p = 0; p < N; p++) {
        struct rs_model_seq s = {toks + p, 1, (uint32_t)p, table, 4, 1};
        RS_CHECK(rs_model_step(m, kv, &s, 1) == RS_OK);
        const float *got = rs_model_logits(m, 0);
        for (uint32_t v = 0; v < hp->n_vocab; v++) {
            double e = fabs(got[v] - want[(size_t)p * hp->n_vocab + v]);
            worst = e > worst ? e : worst;
        }
    }
    fprintf(stderr, "%s: largest |engine - reference| logit difference %.3g\n", path, worst);
    RS_CHECK_MSG(worst < 2e-5, "logits differ from the reference by %g", worst);
    free(want);
    rs_kvcache_destroy(&kv);
    rs_model_destroy(&m);
    return 0;
}

static void set_rope_linear_3(rs_gguf_writer *w)
{
    rs_gguf_writer_set_str(w, "llama.rope.scaling.type", "linear");
    rs_gguf_writer_set_f32(w, "llama.rope.scaling.factor", 3.0f);
    rs_gguf_writer_set_u32(w, "llama.rope.dimension_count", 10);
}

/*
 * A random F32 model with GQA, freq base 500, linear scaling x3 and RoPE on
 * 10 of 16 head dims; layer weights scaled x3 so attention is sharp and a
 * RoPE mistake would show.
 */
static int make_scaled_model(const char *type, const char *extra, char *path, size_t len)
{
    char base[512], args[256];
    snprintf(args, sizeof(args),
             "--dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 300 --seed 9 "
             "--rope-base 500 --type f32 %s", extra);
    RS_CHECK(tu_mkmodel("ref-base", args, base, sizeof(base)) != NULL);
    char scaled[512];
    snprintf(scaled, sizeof(scaled), "%s/ref-scaled.gguf", rs_test_tmpdir());
    struct tu_edit e = {.scale_prefix = "blk.", .scale = 3.0f, .set = set_rope_linear_3};
    RS_CHECK(tu_rewrite(base, scaled, &e) == 0);
    if (strcmp(type, "f32") == 0) {
        snprintf(path, len, "%s", scaled);
        return 0;
    }
    char cargs[1200];
    snprintf(cargs, sizeof(cargs), "--convert '%s' --type %s", scaled, type);
    RS_CHECK(tu_mkmodel(type, cargs, path, len) != NULL);
    return 0;
}

static int test_matches_reference_rope_scaling_gqa(void)
{
    char path[512];
    RS_CHECK(make_scaled_model("f32", "", path, sizeof(path)) == 0);
    RS_CHECK(check_against_reference(path, RS_MODEL_ISA_AUTO) == 0);
    return check_against_reference(path, RS_MODEL_ISA_PORTABLE);
}

static int test_matches_reference_q8_0_tied(void)
{
    char path[512];
    RS_CHECK(make_scaled_model("q8_0", "--tied", path, sizeof(path)) == 0);
    RS_CHECK(check_against_reference(path, RS_MODEL_ISA_AUTO) == 0);
    return check_against_reference(path, RS_MODEL_ISA_PORTABLE);
}

static int test_matches_reference_f16_bf16(void)
{
    char path[512];
    RS_CHECK(make_scaled_model("f16", "", path, sizeof(path)) == 0);
    RS_CHECK(check_against_reference(path, RS_MODEL_ISA_AUTO) == 0);
    RS_CHECK(make_scaled_model("bf16", "", path, sizeof(path)) == 0);
    return check_against_reference(path, RS_MODEL_ISA_AUTO);
}

static enum rs_ggml_type kquant_mix(const char *name)
{
    if (strstr(name, "ffn_down") != NULL || strstr(name, "attn_v") != NULL)
        return RS_GGML_Q6_K;
    if (strstr(name, "ffn_gate") != NULL || strcmp(name, "token_embd.weight") == 0)
        return RS_GGML_Q4_0;
    if (strstr(name, "attn_output") != NULL || strstr(name, "ffn_up") != NULL)
        return RS_GGML_Q5_K;
    return RS_GGML_Q4_K;
}

/* Q4_0, Q4_K, Q5_K and Q6_K weights (random blocks) through both variants vs the reference. */
static int test_matches_reference_q4_0_q4_k_q5_k_q6_k(void)
{
    char base[512], path[512];
    RS_CHECK(tu_mkmodel("kq-base", "--dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 512 "
                                   "--vocab 300 --type f32 --seed 4", base, sizeof(base)) != NULL);
    snprintf(path, sizeof(path), "%s/kq.gguf", rs_test_tmpdir());
    struct tu_edit e = {.randomize = kquant_mix};
    RS_CHECK(tu_rewrite(base, path, &e) == 0);
    RS_CHECK(check_against_reference(path, RS_MODEL_ISA_AUTO) == 0);
    return check_against_reference(path, RS_MODEL_ISA_PORTABLE);
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_stories260k_greedy_ids),
    RS_TEST(test_stories260k_greedy_ids_portable),
    RS_TEST(test_stories260k_greedy_ids_3_threads),
    RS_TEST(test_matches_reference_rope_scaling_gqa),
    RS_TEST(test_matches_reference_q8_0_tied),
    RS_TEST(test_matches_reference_f16_bf16),
    RS_TEST(test_matches_reference_q4_0_q4_k_q5_k_q6_k),
};
RS_TEST_MAIN(cases)

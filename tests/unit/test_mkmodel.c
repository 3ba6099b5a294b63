/* SPDX-License-Identifier: MIT */
/*
 * ringserve-mkmodel, run as a real process: the llama tensor names, shapes,
 * types and metadata it writes, and those of every other --arch; the byte-level vocab; determinism per seed
 * and weight statistics; --vocab-from; the engine loading and running what it
 * makes; and exit status 2 with a message for every bad argument.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/gguf.h"
#include "common/quant.h"
#include "launcherd/engine/model.h"
#include "tests/rs_test.h"
#include "tests/unit/mkmodel_util.h"

static int make(const char *const *args)
{
    char err[2048];
    int rc = mkmodel_run(args, err, sizeof(err));
    RS_CHECK_MSG(rc == 0, "mkmodel exited %d: %s", rc, err);
    return 0;
}

static int check_u32(const rs_gguf *g, const char *key, uint32_t want)
{
    uint32_t v = 0;
    RS_CHECK_MSG(rs_gguf_get_u32(g, key, &v) == RS_OK && v == want, "%s = %u, want %u", key, v,
                 want);
    return 0;
}

static int check_tensor(const rs_gguf *g, const char *name, enum rs_ggml_type type, uint64_t ne0,
                        uint64_t ne1)
{
    int64_t i = rs_gguf_find_tensor(g, name);
    RS_CHECK_MSG(i >= 0, "%s missing", name);
    const struct rs_gguf_tensor *t = rs_gguf_tensor(g, (uint64_t)i);
    RS_CHECK_MSG(t->type == type && t->ne[0] == ne0 && t->ne[1] == ne1 &&
                     t->n_dims == (ne1 == 1 ? 1u : 2u),
                 "%s: %s %llux%llu", name, rs_ggml_type_name(t->type),
                 (unsigned long long)t->ne[0], (unsigned long long)t->ne[1]);
    return 0;
}

static int test_writes_llama_layout_and_metadata(void)
{
    char out[512], err[256];
    mkmodel_tmp("m.gguf", out, sizeof(out));
    const char *args[] = {"-o", out, "--dim", "64", "--layers", "2", "--heads", "4",
                          "--kv-heads", "2", "--ffn", "96", "--vocab", "300", "--ctx", "128",
                          "--type", "q8_0", "--rope-base", "500000", NULL};
    RS_CHECK(make(args) == 0);
    rs_gguf *g;
    RS_CHECK_MSG(rs_gguf_open(out, &g, err, sizeof(err)) == RS_OK, "%s", err);
    struct rs_gguf_str s;
    float f;
    RS_CHECK(rs_gguf_get_str(g, "general.architecture", &s) == RS_OK && s.len == 5 &&
             memcmp(s.ptr, "llama", 5) == 0);
    RS_CHECK(check_u32(g, "general.file_type", 7) == 0);
    RS_CHECK(check_u32(g, "llama.context_length", 128) == 0);
    RS_CHECK(check_u32(g, "llama.embedding_length", 64) == 0);
    RS_CHECK(check_u32(g, "llama.block_count", 2) == 0);
    RS_CHECK(check_u32(g, "llama.feed_forward_length", 96) == 0);
    RS_CHECK(check_u32(g, "llama.attention.head_count", 4) == 0);
    RS_CHECK(check_u32(g, "llama.attention.head_count_kv", 2) == 0);
    RS_CHECK(check_u32(g, "llama.rope.dimension_count", 16) == 0);
    RS_CHECK(check_u32(g, "llama.vocab_size", 300) == 0);
    RS_CHECK(rs_gguf_get_f32(g, "llama.rope.freq_base", &f) == RS_OK && f == 500000.0f);
    RS_CHECK(rs_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f) == RS_OK &&
             f == 1e-5f);
    const enum rs_ggml_type q = RS_GGML_Q8_0, f32 = RS_GGML_F32;
    RS_CHECK(check_tensor(g, "token_embd.weight", q, 64, 300) == 0);
    RS_CHECK(check_tensor(g, "output.weight", q, 64, 300) == 0);
    RS_CHECK(check_tensor(g, "output_norm.weight", f32, 64, 1) == 0);
    RS_CHECK(check_tensor(g, "blk.1.attn_norm.weight", f32, 64, 1) == 0);
    RS_CHECK(check_tensor(g, "blk.1.attn_q.weight", q, 64, 64) == 0);
    RS_CHECK(check_tensor(g, "blk.1.attn_k.weight", q, 64, 32) == 0);
    RS_CHECK(check_tensor(g, "blk.1.attn_v.weight", q, 64, 32) == 0);
    RS_CHECK(check_tensor(g, "blk.1.attn_output.weight", q, 64, 64) == 0);
    RS_CHECK(check_tensor(g, "blk.1.ffn_norm.weight", f32, 64, 1) == 0);
    RS_CHECK(check_tensor(g, "blk.1.ffn_gate.weight", q, 64, 96) == 0);
    RS_CHECK(check_tensor(g, "blk.1.ffn_up.weight", q, 64, 96) == 0);
    RS_CHECK(check_tensor(g, "blk.1.ffn_down.weight", q, 96, 64) == 0);
    RS_CHECK(rs_gguf_n_tensors(g) == 3 + 2 * 9);
    const float *norm = rs_gguf_tensor(g, (uint64_t)rs_gguf_find_tensor(g, "output_norm.weight"))
                            ->data;
    for (int i = 0; i < 64; i++)
        RS_CHECK(norm[i] == 1.0f);
    rs_gguf_close(&g);
    unlink(out);
    return 0;
}

/* --arch: each architecture's extra tensors and keys, as llama.cpp's converters write them. */
static int test_writes_arch_layouts(void)
{
    static const struct {
        const char *arch;
        const char *present[4], *absent[3], *key;
        uint32_t n_tensors; /* 2 layers */
    } cases[] = {
        {"qwen2", {"blk.1.attn_q.bias", "blk.1.attn_k.bias", "blk.1.attn_v.bias", "output.weight"},
         {"blk.0.attn_q_norm.weight", NULL, NULL}, "qwen2.attention.head_count_kv", 3 + 2 * 12},
        {"qwen3", {"blk.0.attn_q_norm.weight", "blk.1.attn_k_norm.weight", NULL, NULL},
         {"blk.0.attn_q.bias", NULL, NULL}, "qwen3.attention.key_length", 3 + 2 * 11},
        {"gemma2", {"blk.0.post_attention_norm.weight", "blk.1.post_ffw_norm.weight", NULL, NULL},
         {"output.weight", "blk.0.attn_q_norm.weight", NULL}, "gemma2.attn_logit_softcapping",
         2 + 2 * 11},
        {"gemma3", {"blk.0.post_ffw_norm.weight", "blk.1.attn_q_norm.weight", NULL, NULL},
         {"blk.0.attn_q.bias", NULL, NULL}, "gemma3.attention.sliding_window", 3 + 2 * 13},
        {"phi3", {"blk.0.attn_qkv.weight", "output.weight", NULL, NULL},
         {"blk.0.attn_q.weight", "blk.0.ffn_gate.weight", NULL},
         "phi3.rope.scaling.original_context_length", 3 + 2 * 6},
    };
    char out[512], err[256];
    mkmodel_tmp("a.gguf", out, sizeof(out));
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const char *args[] = {"-o", out, "--arch", cases[c].arch, "--dim", "64", "--layers", "2",
                              "--heads", "4", "--kv-heads", "2", "--head-dim", "24", "--ffn",
                              "96", "--vocab", "300", NULL};
        RS_CHECK(make(args) == 0);
        rs_gguf *g;
        RS_CHECK_MSG(rs_gguf_open(out, &g, err, sizeof(err)) == RS_OK, "%s", err);
        for (int i = 0; i < 4 && cases[c].present[i] != NULL; i++)
            RS_CHECK_MSG(rs_gguf_find_tensor(g, cases[c].present[i]) >= 0, "%s: no %s",
                         cases[c].arch, cases[c].present[i]);
        for (int i = 0; i < 3 && cases[c].absent[i] != NULL; i++)
            RS_CHECK_MSG(rs_gguf_find_tensor(g, cases[c].absent[i]) < 0, "%s: has %s",
                         cases[c].arch, cases[c].absent[i]);
        RS_CHECK_MSG(rs_gguf_find_key(g, cases[c].key) >= 0, "%s: no %s", cases[c].arch,
                     cases[c].key);
        RS_CHECK_MSG(rs_gguf_n_tensors(g) == cases[c].n_tensors, "%s: %llu tensors",
                     cases[c].arch, (unsigned long long)rs_gguf_n_tensors(g));
        char key[96];
        snprintf(key, sizeof(key), "%s.attention.value_length", cases[c].arch);
        RS_CHECK(check_u32(g, key, 24) == 0);
        /* head_dim 24 x 4 heads = 96 query rows (not dim 64); phi3 fuses Q|K|V = 96 + 2 x 48. */
        if (strcmp(cases[c].arch, "phi3") == 0)
            RS_CHECK(check_tensor(g, "blk.1.attn_qkv.weight", RS_GGML_F32, 64, 192) == 0 &&
                     check_tensor(g, "blk.1.ffn_up.weight", RS_GGML_F32, 64, 192) == 0);
        else
            RS_CHECK(check_tensor(g, "blk.1.attn_q.weight", RS_GGML_F32, 64, 96) == 0);
        RS_CHECK(check_tensor(g, "blk.1.attn_output.weight", RS_GGML_F32, 96, 64) == 0);
        rs_gguf_close(&g);
        rs_model *m;
        RS_CHECK_MSG(rs_model_load(out, NULL, &m, err, sizeof(err)) == RS_OK, "%s: %s",
                     cases[c].arch, err);
        RS_CHECK(strcmp(rs_model_hparams(m)->arch, cases[c].arch) == 0);
        rs_model_destroy(&m);
        unlink(out);
    }
    return 0;
}

static int test_byte_vocab_contents(void)
{
    char out[512], err[256];
    mkmodel_tmp("v.gguf", out, sizeof(out));
    const char *args[] = {"-o", out, "--dim", "8", "--layers", "1", "--heads", "2", "--ffn",
                          "8", "--vocab", "261", "--tied", NULL};
    RS_CHECK(make(args) == 0);
    rs_gguf *g;
    RS_CHECK_MSG(rs_gguf_open(out, &g, err, sizeof(err)) == RS_OK, "%s", err);
    struct rs_gguf_str s;
    RS_CHECK(rs_gguf_get_str(g, "tokenizer.ggml.model", &s) == RS_OK && s.len == 5 &&
             memcmp(s.ptr, "llama", 5) == 0);
    RS_CHECK(check_u32(g, "tokenizer.ggml.bos_token_id", 256) == 0);
    RS_CHECK(check_u32(g, "tokenizer.ggml.eos_token_id", 257) == 0);
    int b;
    RS_CHECK(rs_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == RS_OK && b == 1);
    RS_CHECK(rs_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b) == RS_OK && b == 0);
    enum rs_gguf_type et;
    uint64_t n;
    RS_CHECK(rs_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n) == RS_OK && n == 261);
    RS_CHECK(rs_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n) == RS_OK && n == 261 &&
             et == RS_GGUF_F32);
    RS_CHECK(rs_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n) == RS_OK && n == 261 &&
             et == RS_GGUF_I32);
    for (uint64_t i = 0; i < 261; i++) {
        char want[32];
        int64_t type;
        double score;
        if (i < 256)
            snprintf(want, sizeof(want), "<0x%02X>", (unsigned)i);
        else
            snprintf(want, sizeof(want), "%s", i == 256 ? "<s>" : i == 257 ? "</s>" : "");
        if (i >= 258)
            snprintf(want, sizeof(want), "<unused_%u>", (unsigned)(i - 258));
        RS_CHECK(rs_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s) == RS_OK);
        RS_CHECK_MSG(s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0, "token %llu",
                     (unsigned long long)i);
        RS_CHECK(rs_gguf_arr_i64(g, "tokenizer.ggml.token_type", i, &type) == RS_OK);
        RS_CHECK(type == (i < 256 ? 6 : i < 258 ? 3 : 5));
        RS_CHECK(rs_gguf_arr_f64(g, "tokenizer.ggml.scores", i, &score) == RS_OK && score == 0);
    }
    RS_CHECK(rs_gguf_find_tensor(g, "output.weight") < 0); /* --tied */
    rs_gguf_close(&g);
    unlink(out);
    return 0;
}

/* Reads the F32 values of `name` (any supported type) into a new buffer. */
static float *tensor_f32(const rs_gguf *g, const char *name, uint64_t *n)
{
    int64_t i = rs_gguf_find_tensor(g, name);
    if (i < 0)
        return NULL;
    const struct rs_gguf_tensor *t = rs_gguf_tensor(g, (uint64_t)i);
    *n = t->ne[0] * t->ne[1];
    float *v = malloc(*n * sizeof(float));
    if (v != NULL && rs_quant_row_to_f32(t->type, t->data, v, *n) != RS_OK) {
        free(v);
        v = NULL;
    }
    return v;
}

static int test_seeded_weights_are_deterministic_and_scaled(void)
{
    char a[512], b[512], c[512], err[256];
    mkmodel_tmp("s1.gguf", a, sizeof(a));
    mkmodel_tmp("s2.gguf", b, sizeof(b));
    mkmodel_tmp("s3.gguf", c, sizeof(c));
    const char *base[] = {"--dim", "128", "--layers", "1", "--heads", "2", "--ffn", "256",
                          "--vocab", "300", "--seed", NULL, "-o", NULL, NULL};
    base[11] = "42", base[13] = a;
    RS_CHECK(make(base) == 0);
    base[13] = b;
    RS_CHECK(make(base) == 0);
    base[11] = "43", base[13] = c;
    RS_CHECK(make(base) == 0);
    rs_gguf *ga, *gb, *gc;
    RS_CHECK_MSG(rs_gguf_open(a, &ga, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK(rs_gguf_open(b, &gb, err, sizeof(err)) == RS_OK);
    RS_CHECK(rs_gguf_open(c, &gc, err, sizeof(err)) == RS_OK);
    RS_CHECK(rs_gguf_file_size(ga) == rs_gguf_file_size(gb));
    uint64_t n;
    float *x = tensor_f32(ga, "blk.0.ffn_up.weight", &n);
    float *y = tensor_f32(gb, "blk.0.ffn_up.weight", &n);
    float *z = tensor_f32(gc, "blk.0.ffn_up.weight", &n);
    RS_CHECK(x && y && z && memcmp(x, y, n * sizeof(float)) == 0);
    double sum = 0, sq = 0, same = 0, amax = 0;
    for (uint64_t i = 0; i < n; i++) {
        sum += x[i];
        sq += (double)x[i] * x[i];
        same += x[i] == z[i];
        amax = fabs(x[i]) > amax ? fabs(x[i]) : amax;
    }
    double mean = sum / n, std = sqrt(sq / n - mean * mean);
    RS_CHECK_MSG(fabs(mean) < 0.0005 && fabs(std - 0.02) < 0.0005, "mean %g std %g", mean, std);
    RS_CHECK_MSG(amax <= 0.02 * 3.47 && amax > 0.02 * 2.5, "max |w| %g", amax);
    RS_CHECK(same < n / 100); /* another seed, other weights */
    free(x);
    free(y);
    free(z);
    rs_gguf_close(&ga);
    rs_gguf_close(&gb);
    rs_gguf_close(&gc);
    unlink(a);
    unlink(b);
    unlink(c);
    return 0;
}

/* The same seed gives the same underlying weights in every type, rounded. */
static int test_types_share_the_seeded_weights(void)
{
    /* Worst rounding per type for weights within 3.47 std: half a step of F16/BF16/Q8_0;
     * a whole step (amax / 8) for Q4_0, whose far side clamps at +7 steps. */
    static const char *const types[] = {"f32", "f16", "bf16", "q8_0", "q4_0"};
    static const double tol[] = {0, 0.02 * 3.47 / 2048, 0.02 * 3.47 / 256, 0.02 * 3.47 / 127,
                                 0.02 * 3.47 / 8 * 1.001};
    enum { N_TYPES = sizeof(types) / sizeof(types[0]) };
    char path[N_TYPES][512], err[256];
    rs_gguf *g[N_TYPES];
    float *w[N_TYPES];
    uint64_t n;
    for (int t = 0; t < N_TYPES; t++) {
        char name[32];
        snprintf(name, sizeof(name), "t%d.gguf", t);
        mkmodel_tmp(name, path[t], sizeof(path[t]));
        const char *args[] = {"-o", path[t], "--dim", "64", "--layers", "1", "--heads", "2",
                              "--ffn", "64", "--vocab", "258", "--type", types[t], NULL};
        RS_CHECK(make(args) == 0);
        RS_CHECK_MSG(rs_gguf_open(path[t], &g[t], err, sizeof(err)) == RS_OK, "%s", err);
        w[t] = tensor_f32(g[t], "blk.0.attn_q.weight", &n);
        RS_CHECK(w[t] != NULL);
    }
    for (int t = 1; t < N_TYPES; t++) {
        double max = 0;
        for (uint64_t i = 0; i < n; i++)
            max = fmax(max, fabs((double)w[t][i] - w[0][i]));
        RS_CHECK_MSG(max <= tol[t] && max > 0, "%s: max diff %g", types[t], max);
    }
    for (int t = 0; t < N_TYPES; t++) {
        free(w[t]);
        rs_gguf_close(&g[t]);
        unlink(path[t]);
    }
    return 0;
}

static int test_engine_runs_generated_models(void)
{
    static const char *const types[] = {"f32", "f16", "bf16", "q8_0", "q4_0"};
    for (int t = 0; t < 5; t++) {
        char out[512], err[256];
        mkmodel_tmp("run.gguf", out, sizeof(out));
        const char *args[] = {"-o", out, "--dim", "64", "--layers", "3", "--heads", "4",
                              "--kv-heads", "1", "--ffn", "128", "--vocab", "400", "--type",
                              types[t], t % 2 ? "--tied" : NULL, NULL};
        RS_CHECK(make(args) == 0);
        rs_model *m;
        RS_CHECK_MSG(rs_model_load(out, NULL, &m, err, sizeof(err)) == RS_OK, "%s", err);
        RS_CHECK(rs_model_hparams(m)->tied_output == (t % 2));
        rs_kvcache *kv;
        uint32_t table[4] = {0, 1, 2, 3};
        int32_t toks[40];
        for (int i = 0; i < 40; i++)
            toks[i] = (i * 37) % 400;
        RS_CHECK(rs_kvcache_create(m, 4, 16, &kv) == RS_OK);
        struct rs_model_seq s = {toks, 40, 0, table, 4, 1};
        RS_CHECK(rs_model_step(m, kv, &s, 1) == RS_OK);
        const float *l = rs_model_logits(m, 0);
        double sq = 0;
        for (int i = 0; i < 400; i++) {
            RS_CHECK(isfinite(l[i]));
            sq += (double)l[i] * l[i];
        }
        double rms = sqrt(sq / 400); /* ~0.02 * sqrt(dim) * rms(normed x): sane, not 0 */
        RS_CHECK_MSG(rms > 0.05 && rms < 5, "%s: logit rms %g", types[t], rms);
        rs_kvcache_destroy(&kv);
        rs_model_destroy(&m);
        unlink(out);
    }
    return 0;
}

/* --text-output: the byte and control logits are exactly 0 and greedy picks past them. */
static int test_text_output_never_picks_a_byte_token(void)
{
    char out[512], err[256];
    mkmodel_tmp("text.gguf", out, sizeof(out));
    const char *args[] = {"-o", out, "--dim", "64", "--layers", "2", "--heads", "4", "--ffn",
                          "128", "--vocab", "600", "--type", "f16", "--text-output", NULL};
    RS_CHECK(make(args) == 0);
    rs_model *m;
    RS_CHECK_MSG(rs_model_load(out, NULL, &m, err, sizeof(err)) == RS_OK, "%s", err);
    rs_kvcache *kv;
    uint32_t table[4] = {0, 1, 2, 3};
    RS_CHECK(rs_kvcache_create(m, 4, 16, &kv) == RS_OK);
    for (int p = 0; p < 8; p++) { /* prompts of byte tokens, which the model reads as usual */
        int32_t toks[24];
        for (int i = 0; i < 24; i++)
            toks[i] = (p * 131 + i * 37) % 258;
        struct rs_model_seq s = {toks, 24, 0, table, 4, 1};
        RS_CHECK(rs_model_step(m, kv, &s, 1) == RS_OK);
        const float *l = rs_model_logits(m, 0);
        int best = 0;
        for (int i = 1; i < 600; i++)
            best = l[i] > l[best] ? i : best;
        for (int i = 0; i < 258; i++)
            RS_CHECK_MSG(l[i] == 0.0f, "prompt %d: logit of token %d is %g", p, i, l[i]);
        RS_CHECK_MSG(best >= 258 && l[best] > 0, "prompt %d: greedy picks %d", p, best);
    }
    rs_kvcache_destroy(&kv);
    rs_model_destroy(&m);
    unlink(out);
    return 0;
}

static int test_vocab_from_copies_tokenizer_keys(void)
{
    char src[1024], out[512], err[2048];
    if (rs_test_refdata("stories260K.gguf", src, sizeof(src)) == NULL)
        return RS_TEST_SKIP;
    mkmodel_tmp("vf.gguf", out, sizeof(out));
    const char *args[] = {"-o", out, "--dim", "32", "--layers", "1", "--heads", "2", "--ffn",
                          "64", "--vocab-from", src, NULL, NULL, NULL};
    RS_CHECK(make(args) == 0);
    rs_gguf *a, *b;
    RS_CHECK(rs_gguf_open(src, &a, err, 256) == RS_OK);
    RS_CHECK_MSG(rs_gguf_open(out, &b, err, 256) == RS_OK, "%s", err);
    int copied = 0;
    for (uint64_t i = 0; i < rs_gguf_n_kv(a); i++) {
        struct rs_gguf_str k = rs_gguf_kv_key(a, i);
        if (k.len < 10 || memcmp(k.ptr, "tokenizer.", 10) != 0)
            continue;
        char key[128];
        snprintf(key, sizeof(key), "%.*s", (int)k.len, k.ptr);
        int64_t j = rs_gguf_find_key(b, key);
        const void *ra, *rb;
        uint64_t la, lb;
        RS_CHECK_MSG(j >= 0, "%s not copied", key);
        RS_CHECK(rs_gguf_kv_raw(a, i, &ra, &la) == RS_OK);
        RS_CHECK(rs_gguf_kv_raw(b, (uint64_t)j, &rb, &lb) == RS_OK);
        RS_CHECK(la == lb && memcmp(ra, rb, la) == 0);
        copied++;
    }
    RS_CHECK(copied >= 6);
    RS_CHECK(check_u32(b, "llama.vocab_size", 512) == 0);
    RS_CHECK(check_tensor(b, "token_embd.weight", RS_GGML_F32, 32, 512) == 0);
    rs_gguf_close(&a);
    rs_gguf_close(&b);
    args[12] = "--vocab", args[13] = "512";
    RS_CHECK(make(args) == 0);
    args[13] = "500";
    RS_CHECK(mkmodel_run(args, err, sizeof(err)) == 2);
    RS_CHECK_MSG(strstr(err, "--vocab 500") != NULL, "%s", err);
    unlink(out);
    return 0;
}

/* Every bad argument: exit status 2 and a message naming it. */
static int test_bad_arguments_exit_2(void)
{
    char out[512], err[2048];
    mkmodel_tmp("bad.gguf", out, sizeof(out));
    static const struct {
        const char *needle;
        const char *args[20];
    } cases[] = {
        {"-o", {"--dim", "8", "--layers", "1", "--heads", "2", "--ffn", "8", "--vocab", "300"}},
        {"--dim", {"-o", "X", "--dim", "0", "--layers", "1", "--heads", "1", "--ffn", "8"}},
        {"--dim", {"-o", "X", "--dim", "8x", "--layers", "1", "--heads", "1", "--ffn", "8"}},
        {"--layers", {"-o", "X", "--dim", "8", "--layers", "-1", "--heads", "1", "--ffn", "8"}},
        {"--vocab", {"-o", "X", "--dim", "8", "--layers", "1", "--heads", "2", "--ffn", "8"}},
        {"--vocab", {"-o", "X", "--dim", "8", "--layers", "1", "--heads", "2", "--ffn", "8",
                     "--vocab", "257"}},
        {"--heads", {"-o", "X", "--dim", "10", "--layers", "1", "--heads", "4", "--ffn", "8",
                     "--vocab", "300"}},
        {"even", {"-o", "X", "--dim", "6", "--layers", "1", "--heads", "2", "--ffn", "8",
                  "--vocab", "300"}},
        {"--kv-heads", {"-o", "X", "--dim", "8", "--layers", "1", "--heads", "2", "--kv-heads",
                        "3", "--ffn", "8", "--vocab", "300"}},
        {"--type", {"-o", "X", "--dim", "8", "--layers", "1", "--heads", "2", "--ffn", "8",
                    "--vocab", "300", "--type", "q5_0"}},
        {"--rope-base", {"-o", "X", "--dim", "8", "--layers", "1", "--heads", "2", "--ffn", "8",
                         "--vocab", "300", "--rope-base", "nan"}},
        {"--threads", {"-o", "X", "--dim", "8", "--layers", "1", "--heads", "2", "--ffn", "8",
                       "--vocab", "300", "--threads", "0"}},
        {"--seed", {"-o", "X", "--dim", "8", "--layers", "1", "--heads", "2", "--ffn", "8",
                    "--vocab", "300", "--seed", "-4"}},
        {"--ctx", {"-o", "X", "--dim", "8", "--layers", "1", "--heads", "2", "--ffn", "8",
                   "--vocab", "300", "--ctx", "0"}},
        {"--arch", {"-o", "X", "--dim", "8", "--layers", "1", "--heads", "2", "--ffn", "8",
                    "--vocab", "300", "--arch", "mamba"}},
        {"--tied", {"-o", "X", "--dim", "8", "--layers", "1", "--heads", "2", "--ffn", "8",
                    "--vocab", "300", "--arch", "phi3", "--tied"}},
        {"--text-output", {"-o", "X", "--dim", "8", "--layers", "1", "--heads", "2", "--ffn",
                           "8", "--vocab", "300", "--tied", "--text-output"}},
        {"--swa", {"-o", "X", "--dim", "8", "--layers", "1", "--heads", "2", "--ffn", "8",
                   "--vocab", "300", "--swa", "4"}},
        {"--softcap", {"-o", "X", "--dim", "8", "--layers", "1", "--heads", "2", "--ffn", "8",
                       "--vocab", "300", "--arch", "gemma2", "--softcap", "2"}},
        {"--head-dim", {"-o", "X", "--dim", "8", "--layers", "1", "--heads", "2", "--ffn", "8",
                        "--vocab", "300", "--head-dim", "0"}},
        {"--bogus", {"-o", "X", "--bogus"}},
        {"needs a value", {"-o", "X", "--dim"}},
        {"unexpected", {"-o", "X", "stray"}},
        {"--convert takes only", {"--convert", "in.gguf", "-o", "X", "--dim", "8"}},
        {"--convert", {"--convert", "/nonexistent.gguf", "-o", "X"}},
        {"--vocab-from", {"-o", "X", "--dim", "8", "--layers", "1", "--heads", "2", "--ffn", "8",
                          "--vocab-from", "/nonexistent.gguf"}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *args[20];
        memcpy(args, cases[i].args, sizeof(args));
        for (int j = 0; args[j] != NULL; j++)
            if (strcmp(args[j], "X") == 0)
                args[j] = out;
        int rc = mkmodel_run(args, err, sizeof(err));
        RS_CHECK_MSG(rc == 2, "case %zu exited %d: %s", i, rc, err);
        RS_CHECK_MSG(strstr(err, cases[i].needle) != NULL, "case %zu: '%s' lacks '%s'", i, err,
                     cases[i].needle);
        RS_CHECK(access(out, F_OK) != 0); /* nothing written */
    }
    const char *help[] = {"--help", NULL};
    RS_CHECK(mkmodel_run(help, err, sizeof(err)) == 0);
    return 0;
}

/* --convert refuses types it cannot decode, naming the tensor; writes nothing. */
static int test_convert_rejects_unsupported_input(void)
{
    char in[512], out[512], err[2048];
    mkmodel_tmp("q50.gguf", in, sizeof(in));
    mkmodel_tmp("q50out.gguf", out, sizeof(out));
    rs_gguf_writer *w;
    static uint8_t blocks[22 * 4];
    RS_CHECK(rs_gguf_writer_create(&w) == RS_OK);
    RS_CHECK(rs_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", RS_GGML_Q5_0, 2,
                                       (uint64_t[]){64, 2}, blocks) == RS_OK);
    RS_CHECK(rs_gguf_writer_write(w, in) == RS_OK);
    rs_gguf_writer_destroy(&w);
    const char *args[] = {"--convert", in, "-o", out, "--type", "f16", NULL};
    RS_CHECK(mkmodel_run(args, err, sizeof(err)) == 1);
    RS_CHECK_MSG(strstr(err, "blk.0.attn_q.weight: type Q5_0") != NULL, "%s", err);
    RS_CHECK(access(out, F_OK) != 0);
    const char *to_f32[] = {"--convert", in, "-o", out, "--type", "f32", NULL};
    RS_CHECK(mkmodel_run(to_f32, err, sizeof(err)) == 1); /* Q5_0 -> F32 needs decoding too */
    RS_CHECK(access(out, F_OK) != 0);
    unlink(in);
    return 0;
}

/*
 * Q4_K needs 256-value rows: a 256-dim model gets Q4_K attention and FFN-in
 * matrices (ffn_down's 320-value rows fall back to F16) holding the seeded
 * weights within 4-bit rounding, and the engine runs it.
 */
static int test_q4_k_model(void)
{
    char f32[512], q4k[512], err[2048];
    mkmodel_tmp("k32.gguf", f32, sizeof(f32));
    mkmodel_tmp("k4.gguf", q4k, sizeof(q4k));
    const char *a32[] = {"-o", f32, "--dim", "256", "--layers", "1", "--heads", "4", "--ffn",
                         "320", "--vocab", "258", NULL};
    const char *a4[] = {"-o", q4k, "--dim", "256", "--layers", "1", "--heads", "4", "--ffn",
                        "320", "--vocab", "258", "--type", "q4_k", NULL};
    RS_CHECK(make(a32) == 0);
    RS_CHECK(mkmodel_run(a4, err, sizeof(err)) == 0);
    RS_CHECK_MSG(strstr(err, "blk.0.ffn_down.weight: row length 320") != NULL, "%s", err);
    rs_gguf *g32, *g4;
    uint64_t n, n4;
    uint32_t ft;
    RS_CHECK(rs_gguf_open(f32, &g32, err, 256) == RS_OK);
    RS_CHECK(rs_gguf_open(q4k, &g4, err, 256) == RS_OK);
    RS_CHECK(rs_gguf_get_u32(g4, "general.file_type", &ft) == RS_OK && ft == 14);
    RS_CHECK(check_tensor(g4, "blk.0.attn_q.weight", RS_GGML_Q4_K, 256, 256) == 0);
    RS_CHECK(check_tensor(g4, "blk.0.ffn_down.weight", RS_GGML_F16, 320, 256) == 0);
    float *w = tensor_f32(g32, "blk.0.ffn_up.weight", &n), *w4 = tensor_f32(g4,
                                                                             "blk.0.ffn_up.weight", &n4);
    RS_CHECK(w != NULL && w4 != NULL && n == n4);
    double e2 = 0, x2 = 0;
    for (uint64_t i = 0; i < n; i++) {
        e2 += ((double)w4[i] - w[i]) * ((double)w4[i] - w[i]);
        x2 += (double)w[i] * w[i];
    }
    /* Measured 0.069 (Q4_0 on the same kind of weights: 0.085). */
    RS_CHECK_MSG(sqrt(e2 / x2) > 0 && sqrt(e2 / x2) < 0.1, "rms diff / rms %g",
                 sqrt(e2 / x2));
    fprintf(stderr, "q4_k ffn_up: rms diff / rms %.4f\n", sqrt(e2 / x2));
    free(w);
    free(w4);
    rs_gguf_close(&g32);
    rs_gguf_close(&g4);
    rs_model *m;
    RS_CHECK_MSG(rs_model_load(q4k, NULL, &m, err, sizeof(err)) == RS_OK, "%s", err);
    rs_model_destroy(&m);
    unlink(f32);
    unlink(q4k);
    return 0;
}

/*
 * --type q4_k_m / q5_k_m: Q4_K / Q5_K, with Q6_K for output.weight and for
 * attn_v / ffn_down in layers 0, 1 and 14, 15 (the first and last eighth of
 * 16) and 4, 7, 10, 13 (every third from the first eighth on, offset 2), as
 * llama.cpp's _M mixes; file type 15 / 17. The same mix comes out of
 * --convert from the F32 model, and the engine loads it.
 */
static int check_k_m_mix(const char *type, enum rs_ggml_type base, uint32_t file_type)
{
    char out[512], f32[512], conv[512], err[2048];
    mkmodel_tmp("km.gguf", out, sizeof(out));
    mkmodel_tmp("km32.gguf", f32, sizeof(f32));
    mkmodel_tmp("kmc.gguf", conv, sizeof(conv));
    const char *args[] = {"-o", out, "--dim", "256", "--layers", "16", "--heads", "4", "--ffn",
                          "256", "--vocab", "300", "--type", type, NULL};
    const char *a32[] = {"-o", f32, "--dim", "256", "--layers", "16", "--heads", "4", "--ffn",
                         "256", "--vocab", "300", NULL};
    const char *ac[] = {"--convert", f32, "-o", conv, "--type", type, NULL};
    RS_CHECK(make(args) == 0 && make(a32) == 0);
    RS_CHECK_MSG(mkmodel_run(ac, err, sizeof(err)) == 0, "%s", err);
    const char *files[] = {out, conv};
    for (int f = 0; f < 2; f++) {
        rs_gguf *g;
        uint32_t ft;
        RS_CHECK(rs_gguf_open(files[f], &g, err, 256) == RS_OK);
        RS_CHECK(rs_gguf_get_u32(g, "general.file_type", &ft) == RS_OK && ft == file_type);
        RS_CHECK(check_tensor(g, "output.weight", RS_GGML_Q6_K, 256, 300) == 0);
        RS_CHECK(check_tensor(g, "token_embd.weight", base, 256, 300) == 0);
        for (int b = 0; b < 16; b++) {
            int more = b <= 1 || b >= 14 || b == 4 || b == 7 || b == 10 || b == 13;
            enum rs_ggml_type want = more ? RS_GGML_Q6_K : base;
            char v[64], down[64], q[64];
            snprintf(v, sizeof(v), "blk.%d.attn_v.weight", b);
            snprintf(down, sizeof(down), "blk.%d.ffn_down.weight", b);
            snprintf(q, sizeof(q), "blk.%d.attn_q.weight", b);
            RS_CHECK_MSG(check_tensor(g, v, want, 256, 256) == 0, "%s %s", type, v);
            RS_CHECK_MSG(check_tensor(g, down, want, 256, 256) == 0, "%s %s", type, down);
            RS_CHECK_MSG(check_tensor(g, q, base, 256, 256) == 0, "%s %s", type, q);
        }
        rs_gguf_close(&g);
    }
    rs_model *m;
    RS_CHECK_MSG(rs_model_load(out, NULL, &m, err, sizeof(err)) == RS_OK, "%s", err);
    rs_model_destroy(&m);
    unlink(out);
    unlink(f32);
    unlink(conv);
    return 0;
}

static int test_k_m_mixes(void)
{
    RS_CHECK(check_k_m_mix("q4_k_m", RS_GGML_Q4_K, 15) == 0);
    return check_k_m_mix("q5_k_m", RS_GGML_Q5_K, 17);
}

/* Whole-file bytes of a and b equal (1) or not (0). */
static int same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa != NULL && fb != NULL;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        same = ca == cb;
        if (ca == EOF)
            break;
    }
    if (fa != NULL)
        fclose(fa);
    if (fb != NULL)
        fclose(fb);
    return same;
}

/* Quantizing threads split rows: generated and converted files are byte-identical for 1 or 3. */
static int test_threads_do_not_change_bytes(void)
{
    char one[512], three[512], c1[512], c4[512];
    mkmodel_tmp("th1.gguf", one, sizeof(one));
    mkmodel_tmp("th3.gguf", three, sizeof(three));
    mkmodel_tmp("thc1.gguf", c1, sizeof(c1));
    mkmodel_tmp("thc4.gguf", c4, sizeof(c4));
    const char *a1[] = {"-o", one, "--dim", "256", "--layers", "2", "--heads", "4", "--ffn",
                        "512", "--vocab", "300", "--type", "q4_k_m", "--threads", "1", NULL};
    const char *a3[] = {"-o", three, "--dim", "256", "--layers", "2", "--heads", "4", "--ffn",
                        "512", "--vocab", "300", "--type", "q4_k_m", "--threads", "3", NULL};
    const char *v1[] = {"--convert", one, "-o", c1, "--type", "q8_0", "--threads", "1", NULL};
    const char *v4[] = {"--convert", one, "-o", c4, "--type", "q8_0", "--threads", "4", NULL};
    RS_CHECK(make(a1) == 0 && make(a3) == 0 && make(v1) == 0 && make(v4) == 0);
    RS_CHECK_MSG(same_file(one, three), "generated q4_k_m differs between 1 and 3 threads");
    RS_CHECK_MSG(same_file(c1, c4), "converted q8_0 differs between 1 and 4 threads");
    unlink(one), unlink(three), unlink(c1), unlink(c4);
    return 0;
}

static int test_q8_0_falls_back_to_f16_for_partial_blocks(void)
{
    char out[512], err[2048];
    mkmodel_tmp("fb.gguf", out, sizeof(out));
    const char *args[] = {"-o", out, "--dim", "64", "--layers", "1", "--heads", "2", "--ffn",
                          "80", "--vocab", "258", "--type", "q8_0", NULL};
    RS_CHECK(mkmodel_run(args, err, sizeof(err)) == 0);
    RS_CHECK_MSG(strstr(err, "blk.0.ffn_down.weight: row length 80") != NULL, "%s", err);
    rs_gguf *g;
    RS_CHECK(rs_gguf_open(out, &g, err, 256) == RS_OK);
    RS_CHECK(check_tensor(g, "blk.0.ffn_down.weight", RS_GGML_F16, 80, 64) == 0);
    RS_CHECK(check_tensor(g, "blk.0.ffn_up.weight", RS_GGML_Q8_0, 64, 80) == 0);
    rs_gguf_close(&g);
    unlink(out);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_writes_llama_layout_and_metadata),
    RS_TEST(test_writes_arch_layouts),
    RS_TEST(test_byte_vocab_contents),
    RS_TEST(test_seeded_weights_are_deterministic_and_scaled),
    RS_TEST(test_types_share_the_seeded_weights),
    RS_TEST(test_engine_runs_generated_models),
    RS_TEST(test_text_output_never_picks_a_byte_token),
    RS_TEST(test_vocab_from_copies_tokenizer_keys),
    RS_TEST(test_bad_arguments_exit_2),
    RS_TEST(test_convert_rejects_unsupported_input),
    RS_TEST(test_q4_k_model),
    RS_TEST(test_k_m_mixes),
    RS_TEST(test_threads_do_not_change_bytes),
    RS_TEST(test_q8_0_falls_back_to_f16_for_partial_blocks),
};
RS_TEST_MAIN(cases)

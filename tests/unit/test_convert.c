/* SPDX-License-Identifier: MIT */
/*
 * Weight-type conversion of the real stories260K model with
 * `ringserve-mkmodel --convert`, checked through the engine: the F16, BF16,
 * Q8_0 and Q4_0 conversions run the F32 model's own 64-token greedy continuation
 * (teacher-forced, one decode step per token) and their logits must stay
 * within the tolerances below; F32 -> F32 must be bit-identical, in bytes and
 * in logits. Tolerances were measured on this model (tools/README.md) and set
 * at about twice the measured error.
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

#define STEPS 64

/* Tolerances per target type: max |logit - F32 logit|, rms diff / rms logit, least top-1
 * agreement. */
static const struct {
    const char *type;
    enum rs_ggml_type ggml;
    uint32_t file_type;
    double max_abs, max_rms;
    int min_top1; /* of STEPS */
} targets[] = {
    /* measured: max |diff| 0.0113, 0.0884, 0.267, 8.66; rms diff / rms logit 2.4e-4, 2.1e-3,
     * 5.9e-3, 0.127; top-1 64/64 for the first three, 55/64 for Q4_0 (logits span about
     * +-15 here; 4-bit weights on a 64-dim model are that coarse, as with llama.cpp's). */
    {"f16", RS_GGML_F16, 1, 0.025, 5e-4, STEPS},
    {"bf16", RS_GGML_BF16, 32, 0.2, 4.2e-3, STEPS - 1},
    {"q8_0", RS_GGML_Q8_0, 7, 0.5, 1.2e-2, STEPS - 1},
    {"q4_0", RS_GGML_Q4_0, 2, 17.5, 0.25, STEPS * 3 / 4},
};

static int argmax(const float *v, uint32_t n)
{
    int best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = (int)i;
    return best;
}

/*
 * Logits of every step of `tokens` (decode one token at a time) into out.
 * With `greedy`, tokens[i + 1] is first set to the argmax of step i's logits.
 */
static int run_logits(const char *path, int32_t *tokens, int n, float *out, uint32_t *vocab,
                      int greedy)
{
    char err[256];
    struct rs_model_opts o;
    rs_model_opts_default(&o);
    o.n_threads = 1;
    o.dot = RS_MODEL_DOT_EXACT; /* quantized weights widened: the F32 model's bits */
    rs_model *m;
    RS_CHECK_MSG(rs_model_load(path, &o, &m, err, sizeof(err)) == RS_OK, "%s: %s", path, err);
    uint32_t nv = rs_model_hparams(m)->n_vocab;
    rs_kvcache *kv;
    uint32_t table[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    RS_CHECK(rs_kvcache_create(m, 8, 16, &kv) == RS_OK);
    for (int i = 0; i < n; i++) {
        struct rs_model_seq s = {&tokens[i], 1, (uint32_t)i, table, 8, 1};
        RS_CHECK(rs_model_step(m, kv, &s, 1) == RS_OK);
        memcpy(out + (size_t)i * nv, rs_model_logits(m, 0), nv * sizeof(float));
        if (greedy)
            tokens[i + 1] = argmax(out + (size_t)i * nv, nv);
    }
    *vocab = nv;
    rs_kvcache_destroy(&kv);
    rs_model_destroy(&m);
    return 0;
}

static int convert(const char *src, const char *type, const char *dst)
{
    char err[1024];
    const char *args[] = {"--convert", src, "-o", dst, "--type", type, NULL};
    int rc = mkmodel_run(args, err, sizeof(err));
    RS_CHECK_MSG(rc == 0, "mkmodel --convert %s exited %d: %s", type, rc, err);
    return 0;
}

static int check_types(const char *path, enum rs_ggml_type want, uint32_t file_type)
{
    char err[256];
    rs_gguf *g;
    uint32_t ft;
    RS_CHECK_MSG(rs_gguf_open(path, &g, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK(rs_gguf_get_u32(g, "general.file_type", &ft) == RS_OK && ft == file_type);
    for (uint64_t i = 0; i < rs_gguf_n_tensors(g); i++) {
        const struct rs_gguf_tensor *t = rs_gguf_tensor(g, i);
        enum rs_ggml_type expect = t->n_dims == 1 ? RS_GGML_F32 : want;
        if (t->n_dims == 2 && t->ne[0] % rs_ggml_block_size(want) != 0)
            expect = RS_GGML_F16; /* ffn_down rows of 172 cannot be Q8_0 */
        RS_CHECK_MSG(t->type == expect, "%s is %s", t->name, rs_ggml_type_name(t->type));
    }
    rs_gguf_close(&g);
    return 0;
}

static int test_conversions_match_f32_logits(void)
{
    char src[1024], dst[512];
    if (rs_test_refdata("stories260K.gguf", src, sizeof(src)) == NULL)
        return RS_TEST_SKIP;
    int32_t tokens[STEPS + 1];
    uint32_t nv = 512;
    float *ref = malloc((size_t)STEPS * nv * sizeof(float));
    float *got = malloc((size_t)STEPS * nv * sizeof(float));
    tokens[0] = 1; /* BOS, then the F32 model's own greedy continuation */
    RS_CHECK(ref && got && run_logits(src, tokens, STEPS, ref, &nv, 1) == 0 && nv == 512);
    for (size_t t = 0; t < sizeof(targets) / sizeof(targets[0]); t++) {
        mkmodel_tmp("conv.gguf", dst, sizeof(dst));
        RS_CHECK(convert(src, targets[t].type, dst) == 0);
        RS_CHECK(check_types(dst, targets[t].ggml, targets[t].file_type) == 0);
        RS_CHECK(run_logits(dst, tokens, STEPS, got, &nv, 0) == 0);
        double max_abs = 0, sq = 0, ref_sq = 0;
        int top1 = 0;
        for (int i = 0; i < STEPS; i++) {
            const float *a = ref + (size_t)i * nv, *b = got + (size_t)i * nv;
            top1 += argmax(a, nv) == argmax(b, nv);
            for (uint32_t v = 0; v < nv; v++) {
                double d = fabs((double)a[v] - b[v]);
                max_abs = d > max_abs ? d : max_abs;
                sq += d * d;
                ref_sq += (double)a[v] * a[v];
            }
        }
        fprintf(stderr, "%s vs f32 over %d steps: max |diff| %.5f, rms diff / rms %.2e, "
                "top-1 agreement %d/%d\n", targets[t].type, STEPS, max_abs, sqrt(sq / ref_sq),
                top1, STEPS);
        RS_CHECK_MSG(max_abs <= targets[t].max_abs, "%s: max |diff| %g > %g", targets[t].type,
                     max_abs, targets[t].max_abs);
        RS_CHECK_MSG(sqrt(sq / ref_sq) <= targets[t].max_rms, "%s: rms diff / rms %g > %g",
                     targets[t].type, sqrt(sq / ref_sq), targets[t].max_rms);
        RS_CHECK_MSG(top1 >= targets[t].min_top1, "%s: top-1 %d < %d", targets[t].type, top1,
                     targets[t].min_top1);
        RS_CHECK(max_abs > 0); /* a conversion that changed nothing was not a conversion */
        unlink(dst);
    }
    free(ref);
    free(got);
    return 0;
}

static int test_f32_to_f32_is_bit_identical(void)
{
    char src[1024], dst[512], err[256];
    if (rs_test_refdata("stories260K.gguf", src, sizeof(src)) == NULL)
        return RS_TEST_SKIP;
    mkmodel_tmp("same.gguf", dst, sizeof(dst));
    RS_CHECK(convert(src, "f32", dst) == 0);
    rs_gguf *a, *b;
    RS_CHECK_MSG(rs_gguf_open(src, &a, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK_MSG(rs_gguf_open(dst, &b, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK(rs_gguf_n_tensors(a) == rs_gguf_n_tensors(b));
    for (uint64_t i = 0; i < rs_gguf_n_tensors(a); i++) {
        const struct rs_gguf_tensor *x = rs_gguf_tensor(a, i), *y = rs_gguf_tensor(b, i);
        RS_CHECK(strcmp(x->name, y->name) == 0 && x->type == y->type && x->nbytes == y->nbytes);
        RS_CHECK(memcmp(x->ne, y->ne, sizeof(x->ne)) == 0);
        RS_CHECK_MSG(memcmp(x->data, y->data, x->nbytes) == 0, "%s differs", x->name);
    }
    for (uint64_t i = 0; i < rs_gguf_n_kv(a); i++) { /* every key kept verbatim */
        struct rs_gguf_str k = rs_gguf_kv_key(a, i);
        char key[128];
        snprintf(key, sizeof(key), "%.*s", (int)k.len, k.ptr);
        int64_t j = rs_gguf_find_key(b, key);
        const void *ra, *rb;
        uint64_t la, lb;
        RS_CHECK_MSG(j >= 0, "%s lost", key);
        RS_CHECK(rs_gguf_kv_raw(a, i, &ra, &la) == RS_OK);
        RS_CHECK(rs_gguf_kv_raw(b, (uint64_t)j, &rb, &lb) == RS_OK);
        RS_CHECK(la == lb && memcmp(ra, rb, la) == 0);
    }
    uint32_t ft;
    RS_CHECK(rs_gguf_get_u32(b, "general.file_type", &ft) == RS_OK && ft == 0);
    rs_gguf_close(&a);
    rs_gguf_close(&b);
    int32_t tokens[8] = {1, 403, 407, 261, 378, 432, 383, 286};
    uint32_t nv;
    float *la = malloc(8 * 512 * sizeof(float)), *lb = malloc(8 * 512 * sizeof(float));
    RS_CHECK(la && lb && run_logits(src, tokens, 8, la, &nv, 0) == 0);
    RS_CHECK(run_logits(dst, tokens, 8, lb, &nv, 0) == 0);
    RS_CHECK(memcmp(la, lb, 8 * 512 * sizeof(float)) == 0);
    free(la);
    free(lb);
    unlink(dst);
    return 0;
}

/* F16 -> F32 widens exactly; Q8_0 -> Q8_0 and F16 -> F16 copy bytes. */
static int test_conversion_chains_are_exact(void)
{
    char src[1024], f16[512], f32[512], again[512], err[256];
    if (rs_test_refdata("stories260K.gguf", src, sizeof(src)) == NULL)
        return RS_TEST_SKIP;
    mkmodel_tmp("c16.gguf", f16, sizeof(f16));
    mkmodel_tmp("c32.gguf", f32, sizeof(f32));
    mkmodel_tmp("c16b.gguf", again, sizeof(again));
    RS_CHECK(convert(src, "f16", f16) == 0);
    RS_CHECK(convert(f16, "f32", f32) == 0);
    RS_CHECK(convert(f16, "f16", again) == 0);
    rs_gguf *h, *w, *h2;
    RS_CHECK_MSG(rs_gguf_open(f16, &h, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK_MSG(rs_gguf_open(f32, &w, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK_MSG(rs_gguf_open(again, &h2, err, sizeof(err)) == RS_OK, "%s", err);
    for (uint64_t i = 0; i < rs_gguf_n_tensors(h); i++) {
        const struct rs_gguf_tensor *a = rs_gguf_tensor(h, i), *b = rs_gguf_tensor(w, i);
        const struct rs_gguf_tensor *c = rs_gguf_tensor(h2, i);
        RS_CHECK(c->type == a->type && memcmp(a->data, c->data, a->nbytes) == 0);
        if (a->type != RS_GGML_F16)
            continue;
        RS_CHECK(b->type == RS_GGML_F32);
        const uint16_t *x = a->data;
        const float *y = b->data;
        for (uint64_t e = 0; e < a->nbytes / 2; e++)
            RS_CHECK(memcmp(&y[e], &(float){rs_quant_f16_to_f32(x[e])}, 4) == 0);
    }
    rs_gguf_close(&h);
    rs_gguf_close(&w);
    rs_gguf_close(&h2);
    unlink(f16);
    unlink(f32);
    unlink(again);
    return 0;
}

/*
 * The engine dequantizes weights on the fly with F32 activations, so each
 * converted model must give exactly the logits of its own weights widened to
 * F32 (converted back with --type f32): this pins the engine's F16/BF16/Q8_0
 * decoding to common/quant.c bit for bit.
 */
static int test_converted_models_equal_their_f32_widening(void)
{
    char src[1024], low[512], wide[512];
    if (rs_test_refdata("stories260K.gguf", src, sizeof(src)) == NULL)
        return RS_TEST_SKIP;
    int32_t tokens[17] = {1};
    uint32_t nv;
    float *a = malloc(16 * 512 * sizeof(float)), *b = malloc(16 * 512 * sizeof(float));
    RS_CHECK(a && b && run_logits(src, tokens, 16, a, &nv, 1) == 0);
    for (size_t t = 0; t < sizeof(targets) / sizeof(targets[0]); t++) {
        mkmodel_tmp("low.gguf", low, sizeof(low));
        mkmodel_tmp("wide.gguf", wide, sizeof(wide));
        RS_CHECK(convert(src, targets[t].type, low) == 0);
        RS_CHECK(convert(low, "f32", wide) == 0);
        RS_CHECK(run_logits(low, tokens, 16, a, &nv, 0) == 0);
        RS_CHECK(run_logits(wide, tokens, 16, b, &nv, 0) == 0);
        RS_CHECK_MSG(memcmp(a, b, 16 * 512 * sizeof(float)) == 0, "%s", targets[t].type);
    }
    unlink(low);
    unlink(wide);
    free(a);
    free(b);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_conversions_match_f32_logits),
    RS_TEST(test_f32_to_f32_is_bit_identical),
    RS_TEST(test_conversion_chains_are_exact),
    RS_TEST(test_converted_models_equal_their_f32_widening),
};
RS_TEST_MAIN(cases)

/* SPDX-License-Identifier: MIT */
/*
 * The llama forward pass against published outputs: greedy decoding of the
 * real stories260K model must give exactly the 256 ids that reproduce
 * llama2.c's published text (refdata README sections 6 and 7), with every
 * kernel variant and thread count. And against an independent, naive
 * double-precision forward pass (ref_forward.h), on random models that use what
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
#include "tests/unit/ref_forward.h"

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


/* The engine's logits after every position of a 12-token sequence match the reference. */
static int check_against_reference(const char *path, int isa)
{
    char err[256];
    struct rs_model_opts o;
    rs_model_opts_default(&o);
    o.isa = isa;
    o.dot = RS_MODEL_DOT_EXACT; /* the reference multiplies the dequantized weights in float */
    rs_model *m;
    RS_CHECK_MSG(rs_model_load(path, &o, &m, err, sizeof(err)) == RS_OK, "%s", err);
    const struct rs_model_hparams *hp = rs_model_hparams(m);
    struct ref_model r;
    RS_CHECK(ref_open(rs_model_gguf(m), &r) == 0);
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

/* SPDX-License-Identifier: MIT */
/*
 * Model loading and step validation: hyperparameters come from the file
 * with llama.cpp's defaults; a malformed or unsupported file is refused with
 * a message naming the tensor or key; a bad batch (token id, block table,
 * slot, size) is refused with RS_EINVAL/RS_ERANGE before anything runs, so
 * the cache is untouched and later steps give the same logits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "launcherd/engine/model.h"
#include "tests/rs_test.h"
#include "tests/unit/engine_testutil.h"

#define BASE_ARGS "--dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 300 --seed 5"

static const char *base_model(char *path, size_t len)
{
    return tu_mkmodel("base", BASE_ARGS " --type f16 --rope-base 500", path, len);
}

/* Loads a rewritten copy of the base model; returns the rs_err and the message in err. */
static rs_err load_edited(const struct tu_edit *e, char *err, size_t err_len)
{
    char base[512], path[512];
    if (base_model(base, sizeof(base)) == NULL)
        return RS_EIO;
    snprintf(path, sizeof(path), "%s/edited.gguf", rs_test_tmpdir());
    if (tu_rewrite(base, path, e) != 0)
        return RS_EIO;
    rs_model *m = NULL;
    err[0] = '\0';
    rs_err rc = rs_model_load(path, NULL, &m, err, err_len);
    rs_model_destroy(&m);
    return rc;
}

static int expect_refusal(const struct tu_edit *e, rs_err want, const char *needle)
{
    char err[512];
    rs_err rc = load_edited(e, err, sizeof(err));
    RS_CHECK_MSG(rc == want, "got %s (%s), want %s", rs_strerror(rc), err, rs_strerror(want));
    RS_CHECK_MSG(strstr(err, needle) != NULL, "message '%s' does not name '%s'", err, needle);
    return 0;
}

static int test_reads_hyperparameters(void)
{
    char path[512], err[256];
    RS_CHECK(base_model(path, sizeof(path)) != NULL);
    rs_model *m;
    RS_CHECK_MSG(rs_model_load(path, NULL, &m, err, sizeof(err)) == RS_OK, "%s", err);
    const struct rs_model_hparams *hp = rs_model_hparams(m);
    RS_CHECK(hp->dim == 64 && hp->n_layers == 2 && hp->n_heads == 4 && hp->n_kv_heads == 2);
    RS_CHECK(hp->head_dim == 16 && hp->ffn_dim == 96 && hp->n_vocab == 300);
    RS_CHECK(hp->rope_dim == 16 && hp->rope_freq_base == 500.0f && hp->rope_scale == 1.0f);
    RS_CHECK(hp->rms_eps > 0 && !hp->tied_output && !hp->has_rope_freqs);
    RS_CHECK(strstr(rs_model_describe(m), "cpu") != NULL);
    /* Two layers of K and V, 16 tokens, 2 KV heads of 16 floats. */
    RS_CHECK(rs_kvcache_block_bytes(m, 16) == 2 * 2 * 16 * 32 * sizeof(float));
    rs_model_destroy(&m);
    RS_CHECK(m == NULL);
    return 0;
}

static int test_tied_output_uses_token_embd(void)
{
    char path[512], err[256];
    RS_CHECK(tu_mkmodel("tied", BASE_ARGS " --type q8_0 --tied", path, sizeof(path)) != NULL);
    rs_model *m;
    RS_CHECK_MSG(rs_model_load(path, NULL, &m, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK(rs_model_hparams(m)->tied_output);
    rs_kvcache *kv;
    RS_CHECK(rs_kvcache_create(m, 4, 16, &kv) == RS_OK);
    int32_t tok[3] = {1, 7, 9};
    uint32_t table[1] = {2};
    struct rs_model_seq s = {tok, 3, 0, table, 1, 1};
    RS_CHECK(rs_model_step(m, kv, &s, 1) == RS_OK);
    const float *l = rs_model_logits(m, 0);
    RS_CHECK(l != NULL && isfinite(l[0]) && isfinite(l[299]));
    rs_kvcache_destroy(&kv);
    rs_model_destroy(&m);
    return 0;
}

static int test_missing_tensor_is_named(void)
{
    struct tu_edit e = {.drop_tensor = "blk.1.ffn_up.weight"};
    return expect_refusal(&e, RS_EINVAL, "blk.1.ffn_up.weight");
}

static int test_missing_output_norm_is_named(void)
{
    struct tu_edit e = {.drop_tensor = "output_norm.weight"};
    return expect_refusal(&e, RS_EINVAL, "output_norm.weight");
}

static int test_wrong_shape_is_named(void)
{
    struct tu_edit e = {.shape_tensor = "blk.0.attn_k.weight", .ne0 = 64, .ne1 = 64};
    return expect_refusal(&e, RS_EINVAL, "blk.0.attn_k.weight has shape [64, 64");
}

static int test_unsupported_type_is_named(void)
{
    struct tu_edit e = {.type_tensor = "blk.0.attn_q.weight", .type = RS_GGML_Q4_1};
    if (expect_refusal(&e, RS_EUNSUPPORTED, "blk.0.attn_q.weight has type Q4_1") != 0)
        return 1;
    struct tu_edit n = {.type_tensor = "blk.1.ffn_norm.weight", .type = RS_GGML_Q8_0};
    return expect_refusal(&n, RS_EUNSUPPORTED, "blk.1.ffn_norm.weight");
}

static void set_heads_5(rs_gguf_writer *w)
{
    rs_gguf_writer_set_u32(w, "llama.attention.head_count", 5);
}

static void set_kv_heads_3(rs_gguf_writer *w)
{
    rs_gguf_writer_set_u32(w, "llama.attention.head_count_kv", 3);
}

static void set_arch_gpt2(rs_gguf_writer *w)
{
    rs_gguf_writer_set_str(w, "general.architecture", "gpt2");
}

static void set_yarn(rs_gguf_writer *w)
{
    rs_gguf_writer_set_str(w, "llama.rope.scaling.type", "yarn");
}

static void set_vocab_301(rs_gguf_writer *w)
{
    rs_gguf_writer_set_u32(w, "llama.vocab_size", 301);
}

static void set_rope_dim_odd(rs_gguf_writer *w)
{
    rs_gguf_writer_set_u32(w, "llama.rope.dimension_count", 7);
}

static void set_eps_negative(rs_gguf_writer *w)
{
    rs_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", -1.0f);
}

static void set_block_count_str(rs_gguf_writer *w)
{
    rs_gguf_writer_set_str(w, "llama.block_count", "two");
}

static int test_inconsistent_hyperparameters_refused(void)
{
    struct tu_edit heads = {.set = set_heads_5}, kvh = {.set = set_kv_heads_3};
    struct tu_edit voc = {.set = set_vocab_301}, rope = {.set = set_rope_dim_odd};
    struct tu_edit eps = {.set = set_eps_negative}, bc = {.set = set_block_count_str};
    if (expect_refusal(&heads, RS_EINVAL, "head_count 5") != 0 ||
        expect_refusal(&kvh, RS_EINVAL, "head_count_kv 3") != 0 ||
        expect_refusal(&voc, RS_EINVAL, "llama.vocab_size 301") != 0 ||
        expect_refusal(&rope, RS_EINVAL, "rope.dimension_count 7") != 0 ||
        expect_refusal(&eps, RS_EINVAL, "layer_norm_rms_epsilon") != 0)
        return 1;
    return expect_refusal(&bc, RS_EINVAL, "llama.block_count");
}

static int test_missing_key_is_named(void)
{
    struct tu_edit e = {.drop_key = "llama.attention.layer_norm_rms_epsilon"};
    if (expect_refusal(&e, RS_EINVAL, "llama.attention.layer_norm_rms_epsilon") != 0)
        return 1;
    struct tu_edit f = {.drop_key = "llama.embedding_length"};
    return expect_refusal(&f, RS_EINVAL, "llama.embedding_length");
}

static int test_unsupported_architecture_and_scaling(void)
{
    struct tu_edit a = {.set = set_arch_gpt2}, y = {.set = set_yarn};
    if (expect_refusal(&a, RS_EUNSUPPORTED, "gpt2") != 0)
        return 1;
    return expect_refusal(&y, RS_EUNSUPPORTED, "yarn");
}

static int test_not_a_model_file(void)
{
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/garbage.gguf", rs_test_tmpdir());
    FILE *f = fopen(path, "wb");
    RS_CHECK(f != NULL);
    fputs("definitely not gguf", f);
    fclose(f);
    rs_model *m = (rs_model *)1;
    RS_CHECK(rs_model_load(path, NULL, &m, err, sizeof(err)) != RS_OK && m == NULL);
    RS_CHECK(rs_model_load("/nonexistent.gguf", NULL, &m, err, sizeof(err)) == RS_EIO);
    RS_CHECK(strstr(err, "nonexistent") != NULL);
    return 0;
}

static int test_bad_options_refused(void)
{
    char path[512], err[256];
    RS_CHECK(base_model(path, sizeof(path)) != NULL);
    struct rs_model_opts o;
    rs_model *m;
    rs_model_opts_default(&o);
    o.n_threads = -1;
    RS_CHECK(rs_model_load(path, &o, &m, err, sizeof(err)) == RS_EINVAL);
    rs_model_opts_default(&o);
    o.isa = 9;
    RS_CHECK(rs_model_load(path, &o, &m, err, sizeof(err)) == RS_EINVAL);
    rs_model_opts_default(&o);
    o.backend = "tpu";
    RS_CHECK(rs_model_load(path, &o, &m, err, sizeof(err)) == RS_EINVAL);
    RS_CHECK(strstr(err, "tpu") != NULL);
    return 0;
}

static int test_kvcache_sizes_checked(void)
{
    char path[512], err[256];
    RS_CHECK(base_model(path, sizeof(path)) != NULL);
    rs_model *m;
    RS_CHECK_MSG(rs_model_load(path, NULL, &m, err, sizeof(err)) == RS_OK, "%s", err);
    rs_kvcache *kv;
    RS_CHECK(rs_kvcache_create(m, 0, 16, &kv) == RS_EINVAL && kv == NULL);
    RS_CHECK(rs_kvcache_create(m, 4, 0, &kv) == RS_EINVAL);
    RS_CHECK(rs_kvcache_create(m, UINT32_MAX, 65536, &kv) != RS_OK);
    RS_CHECK(rs_kvcache_create(m, 3, 5, &kv) == RS_OK);
    RS_CHECK(rs_kvcache_n_blocks(kv) == 3 && rs_kvcache_block_size(kv) == 5);
    rs_kvcache_destroy(&kv);
    RS_CHECK(kv == NULL);
    rs_model_destroy(&m);
    return 0;
}

/* Every malformed batch is refused; the cache is untouched (same logits afterwards). */
static int test_step_rejects_bad_batches(void)
{
    char path[512], err[256];
    RS_CHECK(base_model(path, sizeof(path)) != NULL);
    struct rs_model_opts o;
    rs_model_opts_default(&o);
    o.max_batch_tokens = 8;
    rs_model *m, *other;
    RS_CHECK_MSG(rs_model_load(path, &o, &m, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK(rs_model_load(path, &o, &other, err, sizeof(err)) == RS_OK);
    rs_kvcache *kv, *kv_other;
    RS_CHECK(rs_kvcache_create(m, 4, 4, &kv) == RS_OK);
    RS_CHECK(rs_kvcache_create(other, 4, 4, &kv_other) == RS_OK);
    int32_t good[5] = {1, 2, 3, 4, 5}, bad_hi[2] = {1, 300}, bad_neg[2] = {1, -1}, nine[9] = {0};
    uint32_t t01[2] = {0, 1}, t0[1] = {0}, t9[2] = {0, 9}, t00[2] = {0, 0}, t23[2] = {2, 3};
    struct rs_model_seq ref = {good, 5, 0, t01, 2, 1};
    RS_CHECK(rs_model_step(m, kv, &ref, 1) == RS_OK);
    float want[300];
    memcpy(want, rs_model_logits(m, 0), sizeof(want));
    const struct {
        struct rs_model_seq s[2];
        uint32_t n;
        rs_err rc;
        const char *what;
    } cases[] = {
        {{{bad_hi, 2, 0, t23, 2, 1}}, 1, RS_EINVAL, "token id >= vocab"},
        {{{bad_neg, 2, 0, t23, 2, 1}}, 1, RS_EINVAL, "negative token id"},
        {{{good, 5, 0, t0, 1, 1}}, 1, RS_EINVAL, "table too short"},
        {{{good, 5, 0, t9, 2, 1}}, 1, RS_EINVAL, "block index >= cache blocks"},
        {{{good, 5, 0, t00, 2, 1}}, 1, RS_EINVAL, "one block twice: two tokens per slot"},
        {{{good, 2, 0, t23, 2, 1}, {good, 1, 1, t23, 2, 1}}, 2, RS_EINVAL, "two sequences, one slot"},
        {{{good, 0, 0, t23, 2, 1}}, 1, RS_EINVAL, "no tokens"},
        {{{NULL, 2, 0, t23, 2, 1}}, 1, RS_EINVAL, "NULL tokens"},
        {{{good, 2, 0, NULL, 2, 1}}, 1, RS_EINVAL, "NULL table"},
        {{{good, 2, UINT32_MAX - 1, t23, 2, 1}}, 1, RS_EINVAL, "position overflow"},
        {{{nine, 9, 0, t23, 2, 1}}, 1, RS_ERANGE, "more than max_batch_tokens"},
        {{{good, 1, 0, t23, 2, 1}}, 0, RS_EINVAL, "empty batch"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rs_err rc = rs_model_step(m, kv, cases[i].s, cases[i].n);
        RS_CHECK_MSG(rc == cases[i].rc, "%s: got %s", cases[i].what, rs_strerror(rc));
        RS_CHECK(rs_model_logits(m, 0) == NULL);
    }
    struct rs_model_seq g = {good, 2, 0, t23, 2, 1};
    RS_CHECK(rs_model_step(m, kv_other, &g, 1) == RS_EINVAL); /* another model's cache */
    RS_CHECK(rs_model_step(m, kv, &ref, 1) == RS_OK);          /* the same work again */
    RS_CHECK(memcmp(rs_model_logits(m, 0), want, sizeof(want)) == 0);
    struct rs_model_seq no_logits = {good, 1, 0, t23, 2, 0};
    RS_CHECK(rs_model_step(m, kv, &no_logits, 1) == RS_OK && rs_model_logits(m, 0) == NULL);
    RS_CHECK(rs_model_logits(m, 1) == NULL);
    rs_kvcache_destroy(&kv);
    rs_kvcache_destroy(&kv_other);
    rs_model_destroy(&m);
    rs_model_destroy(&other);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_reads_hyperparameters),
    RS_TEST(test_tied_output_uses_token_embd),
    RS_TEST(test_missing_tensor_is_named),
    RS_TEST(test_missing_output_norm_is_named),
    RS_TEST(test_wrong_shape_is_named),
    RS_TEST(test_unsupported_type_is_named),
    RS_TEST(test_inconsistent_hyperparameters_refused),
    RS_TEST(test_missing_key_is_named),
    RS_TEST(test_unsupported_architecture_and_scaling),
    RS_TEST(test_not_a_model_file),
    RS_TEST(test_bad_options_refused),
    RS_TEST(test_kvcache_sizes_checked),
    RS_TEST(test_step_rejects_bad_batches),
};
RS_TEST_MAIN(cases)

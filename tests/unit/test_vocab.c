/* SPDX-License-Identifier: MIT */
/*
 * Vocab loading: every refdata vocab (vocab-only and model GGUFs) with the
 * special ids and flags its metadata implies, the byte-only vocab that
 * ringserve-mkmodel writes (built here with the GGUF writer), end-of-turn
 * detection by text, pieces, clear errors for missing or malformed keys,
 * and one vocab shared by threads.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/detok.h"
#include "common/gguf.h"
#include "common/tokenizer.h"
#include "common/vocab.h"
#include "tests/rs_test.h"

static rs_vocab *load_ref(const char *rel)
{
    char path[1024], err[512];
    rs_vocab *v = NULL;
    if (rs_test_refdata(rel, path, sizeof(path)) == NULL)
        return NULL;
    if (rs_vocab_load_file(path, &v, err, sizeof(err)) != RS_OK)
        fprintf(stderr, "%s: %s\n", rel, err);
    return v;
}

struct expect {
    const char *file;
    uint32_t n;
    enum rs_vocab_kind kind;
    int32_t bos, eos, unk, pad, eot;
    int add_bos;
    const char *pre;
};

/* refdata README section 4 (and sections 2-3 for the model files). */
static const struct expect EXPECTED[] = {
    {"tokenizer/ggml-vocab-llama-spm.gguf", 32000, RS_VOCAB_SPM, 1, 2, 0, -1, -1, 1, ""},
    {"tokenizer/ggml-vocab-phi-3.gguf", 32064, RS_VOCAB_SPM, 1, 32000, 0, 32000, 32007, 1, ""},
    {"tokenizer/ggml-vocab-baichuan.gguf", 64000, RS_VOCAB_SPM, 1, 2, 0, 0, -1, 1, ""},
    {"tokenizer/ggml-vocab-deepseek-coder.gguf", 32256, RS_VOCAB_BPE, 32013, 32014, -1, 32014,
     32014, 1, "deepseek-coder"},
    {"tokenizer/ggml-vocab-falcon.gguf", 65024, RS_VOCAB_BPE, 11, 11, -1, -1, 11, 0, "falcon"},
    {"tokenizer/ggml-vocab-gpt-2.gguf", 50257, RS_VOCAB_BPE, 50256, 50256, -1, -1, 50256, 0,
     "gpt2"},
    {"tokenizer/ggml-vocab-gpt-neox.gguf", 50432, RS_VOCAB_BPE, 0, 0, 0, -1, 0, 0, "default"},
    {"tokenizer/ggml-vocab-mpt.gguf", 50432, RS_VOCAB_BPE, 0, 0, 0, -1, 0, 0, "gpt2"},
    {"stories260K.gguf", 512, RS_VOCAB_SPM, 1, 2, 0, -1, -1, 1, ""},
    {"llama-2-tiny-random.gguf", 32000, RS_VOCAB_SPM, 1, 2, 0, -1, -1, 1, ""},
};

static int test_loads_every_refdata_vocab(void)
{
    int skipped = 0;
    for (size_t i = 0; i < sizeof(EXPECTED) / sizeof(EXPECTED[0]); i++) {
        const struct expect *e = &EXPECTED[i];
        rs_vocab *v = load_ref(e->file);
        if (v == NULL) {
            skipped++;
            continue;
        }
        RS_CHECK_MSG(rs_vocab_n_tokens(v) == e->n && rs_vocab_kind(v) == e->kind, "%s", e->file);
        RS_CHECK_MSG(rs_vocab_bos(v) == e->bos && rs_vocab_eos(v) == e->eos, "%s: bos %d eos %d",
                     e->file, rs_vocab_bos(v), rs_vocab_eos(v));
        RS_CHECK_MSG(rs_vocab_unk(v) == e->unk && rs_vocab_pad(v) == e->pad, "%s: unk %d pad %d",
                     e->file, rs_vocab_unk(v), rs_vocab_pad(v));
        RS_CHECK_MSG(rs_vocab_eot(v) == e->eot, "%s: eot %d", e->file, rs_vocab_eot(v));
        RS_CHECK_MSG(rs_vocab_add_bos(v) == e->add_bos && !rs_vocab_add_eos(v), "%s", e->file);
        RS_CHECK(rs_vocab_add_space_prefix(v) == (e->kind == RS_VOCAB_SPM));
        RS_CHECK_MSG(strcmp(rs_vocab_pre(v), e->pre) == 0, "%s: pre %s", e->file, rs_vocab_pre(v));
        RS_CHECK(rs_vocab_is_eog(v, e->eos) && !rs_vocab_is_eog(v, (e->eos + 1) % (int32_t)e->n));
        RS_CHECK(!rs_vocab_is_eog(v, -1) && !rs_vocab_is_eog(v, (int32_t)e->n));
        rs_vocab_destroy(&v);
        RS_CHECK(v == NULL);
    }
    return skipped == (int)(sizeof(EXPECTED) / sizeof(EXPECTED[0])) ? RS_TEST_SKIP : 0;
}

static int test_pieces_and_types(void)
{
    rs_vocab *v = load_ref("tokenizer/ggml-vocab-llama-spm.gguf");
    if (v == NULL)
        return RS_TEST_SKIP;
    size_t len;
    const char *p = rs_vocab_token_piece(v, 15043, 0, &len);
    RS_CHECK(len == 6 && memcmp(p, " Hello", 6) == 0);
    p = rs_vocab_token_text(v, 15043, &len);
    RS_CHECK(len == 8 && memcmp(p, "\xE2\x96\x81Hello", 8) == 0);
    RS_CHECK(rs_vocab_find(v, "<0x0A>", 6) == 13 && rs_vocab_token_type(v, 13) == RS_TOKEN_BYTE);
    p = rs_vocab_token_piece(v, 13, 0, &len);
    RS_CHECK(len == 1 && p[0] == '\n');
    RS_CHECK(rs_vocab_token_type(v, 2) == RS_TOKEN_CONTROL);
    RS_CHECK(rs_vocab_token_piece(v, 2, 0, &len) != NULL && len == 0);
    p = rs_vocab_token_piece(v, 2, 1, &len);
    RS_CHECK(len == 4 && memcmp(p, "</s>", 4) == 0);
    RS_CHECK(rs_vocab_token_piece(v, 32000, 0, &len) == NULL);
    RS_CHECK(rs_vocab_token_score(v, 29871) < -1e8f); /* "▁" alone, README section 3 */
    rs_vocab_destroy(&v);
    v = load_ref("tokenizer/ggml-vocab-gpt-2.gguf");
    if (v == NULL)
        return RS_TEST_SKIP;
    int32_t world = rs_vocab_find(v, "\xC4\xA0world", 7); /* "Ġworld" */
    RS_CHECK(world == 995);
    p = rs_vocab_token_piece(v, world, 0, &len);
    RS_CHECK(len == 6 && memcmp(p, " world", 6) == 0);
    rs_vocab_destroy(&v);
    return 0;
}

/* --- synthetic vocabs through the GGUF writer ---------------------------------------- */

struct synth {
    const char *model;   /* tokenizer.ggml.model, NULL: absent */
    const char *pre;     /* NULL: absent */
    const char **tokens; /* NULL: absent */
    size_t n;
    const int32_t *types; /* NULL: absent */
    size_t n_scores;      /* 0: absent */
    const char **merges;  /* NULL: absent */
    size_t n_merges;
    int64_t bos; /* -1: absent */
};

static rs_err load_synth(const struct synth *s, rs_vocab **v, char *err, size_t err_len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/synth.gguf", rs_test_tmpdir());
    rs_gguf_writer *w = NULL;
    if (rs_gguf_writer_create(&w) != RS_OK)
        return RS_ENOMEM;
    float scores[512] = {0};
    if (s->model)
        rs_gguf_writer_set_str(w, "tokenizer.ggml.model", s->model);
    if (s->pre)
        rs_gguf_writer_set_str(w, "tokenizer.ggml.pre", s->pre);
    if (s->tokens)
        rs_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", s->tokens, NULL, s->n);
    if (s->types)
        rs_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", RS_GGUF_I32, s->types, s->n);
    if (s->n_scores)
        rs_gguf_writer_set_arr(w, "tokenizer.ggml.scores", RS_GGUF_F32, scores, s->n_scores);
    if (s->merges)
        rs_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", s->merges, NULL, s->n_merges);
    if (s->bos >= 0)
        rs_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)s->bos);
    rs_err rc = rs_gguf_writer_write(w, path);
    rs_gguf_writer_destroy(&w);
    if (rc == RS_OK)
        rc = rs_vocab_load_file(path, v, err, err_len);
    unlink(path);
    return rc;
}

static int test_missing_or_malformed_keys_are_clear_errors(void)
{
    const char *toks[] = {"<unk>", "<s>", "</s>", "a", "b", "ab"};
    const char *bad_merges[] = {"a b"};
    char err[1024];
    rs_vocab *v = NULL;
    struct synth s = {NULL, NULL, toks, 6, NULL, 0, NULL, 0, -1};
    RS_CHECK(load_synth(&s, &v, err, sizeof(err)) == RS_ENOENT && strstr(err, "model") && !v);
    s.model = "bert";
    RS_CHECK(load_synth(&s, &v, err, sizeof(err)) == RS_EUNSUPPORTED && strstr(err, "bert"));
    s.model = "gpt2";
    RS_CHECK(load_synth(&s, &v, err, sizeof(err)) == RS_ENOENT && strstr(err, "merges"));
    s.merges = bad_merges;
    s.n_merges = 1;
    s.pre = "no-such-pre";
    RS_CHECK(load_synth(&s, &v, err, sizeof(err)) == RS_EUNSUPPORTED && strstr(err, "no-such-pre"));
    s = (struct synth){"llama", NULL, NULL, 0, NULL, 0, NULL, 0, -1};
    RS_CHECK(load_synth(&s, &v, err, sizeof(err)) == RS_ENOENT && strstr(err, "tokens"));
    s = (struct synth){"llama", NULL, toks, 6, NULL, 5, NULL, 0, -1};
    RS_CHECK(load_synth(&s, &v, err, sizeof(err)) == RS_EINVAL && strstr(err, "scores"));
    s = (struct synth){"llama", NULL, toks, 6, NULL, 6, NULL, 0, 6};
    RS_CHECK(load_synth(&s, &v, err, sizeof(err)) == RS_OK); /* bad BOS id: default kept */
    RS_CHECK(rs_vocab_bos(v) == 1 && rs_vocab_n_tokens(v) == 6);
    rs_vocab_destroy(&v);
    return 0;
}

static int test_gpt2_vocab_with_merges(void)
{
    const char *toks[] = {
        "a", "b", "c", "ab", "abc", "\xC4\xA0", "\xC4\xA0\x61\x62\x63", "<|endoftext|>"};
    const int32_t types[] = {1, 1, 1, 1, 1, 1, 1, 3};
    const char *merges[] = {"a b", "ab c", "\xC4\xA0 abc", "x y"};
    char err[1024];
    rs_vocab *v = NULL;
    struct synth s = {"gpt2", "gpt-2", toks, 8, types, 0, merges, 4, -1};
    RS_CHECK_MSG(load_synth(&s, &v, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK(rs_vocab_eot(v) == 7 && rs_vocab_is_eog(v, 7) && rs_vocab_bos(v) == -1);
    rs_tokenizer *t = NULL;
    int32_t ids[16];
    size_t n;
    RS_CHECK(rs_tokenizer_create(v, &t) == RS_OK);
    RS_CHECK(rs_tokenizer_encode(t, "abc abcb", 8, 0, ids, 16, &n) == RS_OK);
    RS_CHECK(n == 3 && ids[0] == 4 && ids[1] == 6 && ids[2] == 1);
    RS_CHECK(rs_tokenizer_encode(t, "<|endoftext|>", 13, RS_TOKENIZE_PARSE_SPECIAL, ids, 16, &n) ==
                 RS_OK &&
             n == 1 && ids[0] == 7);
    rs_tokenizer_destroy(&t);
    rs_vocab_destroy(&v);
    return 0;
}

/* ringserve-mkmodel's vocab: <0x00>..<0xFF> (byte), <s>, </s> (control), <unused_N> fillers. */
static rs_err load_byte_only_vocab(rs_vocab **v, size_t n_fill)
{
    static char names[256 + 2 + 64][16];
    const char *toks[256 + 2 + 64];
    int32_t types[256 + 2 + 64];
    size_t n = 258 + n_fill;
    for (size_t i = 0; i < n; i++) {
        if (i < 256)
            snprintf(names[i], sizeof(names[i]), "<0x%02X>", (unsigned)i);
        else if (i < 258)
            snprintf(names[i], sizeof(names[i]), "%s", i == 256 ? "<s>" : "</s>");
        else
            snprintf(names[i], sizeof(names[i]), "<unused_%zu>", i - 258);
        toks[i] = names[i];
        types[i] = i < 256 ? 6 : i < 258 ? 3 : 5;
    }
    char path[512], err[512];
    snprintf(path, sizeof(path), "%s/bytevocab.gguf", rs_test_tmpdir());
    rs_gguf_writer *w = NULL;
    float scores[256 + 2 + 64] = {0};
    rs_err rc = rs_gguf_writer_create(&w);
    if (rc != RS_OK)
        return rc;
    rs_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    rs_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, n);
    rs_gguf_writer_set_arr(w, "tokenizer.ggml.scores", RS_GGUF_F32, scores, n);
    rs_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", RS_GGUF_I32, types, n);
    rs_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 256);
    rs_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 257);
    rs_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1);
    rs_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", 0);
    rc = rs_gguf_writer_write(w, path);
    rs_gguf_writer_destroy(&w);
    if (rc == RS_OK)
        rc = rs_vocab_load_file(path, v, err, sizeof(err));
    if (rc != RS_OK)
        fprintf(stderr, "byte-only vocab: %s\n", err);
    unlink(path);
    return rc;
}

static int test_byte_only_vocab_encodes_every_byte(void)
{
    rs_vocab *v = NULL;
    RS_CHECK(load_byte_only_vocab(&v, 40) == RS_OK);
    RS_CHECK(rs_vocab_bos(v) == 256 && rs_vocab_eos(v) == 257 && rs_vocab_unk(v) == -1);
    RS_CHECK(rs_vocab_add_bos(v) && rs_vocab_is_eog(v, 257) && rs_vocab_n_tokens(v) == 298);
    const char text[] = "Hi, w\xC3\xB6rld!\n\xF0\x9F\xA6\x99\xFF";
    const char escaped[] = "\xE2\x96\x81Hi,\xE2\x96\x81w\xC3\xB6rld!\n\xF0\x9F\xA6\x99\xFF";
    rs_tokenizer *t = NULL;
    int32_t ids[64];
    size_t n;
    RS_CHECK(rs_tokenizer_create(v, &t) == RS_OK);
    RS_CHECK(rs_tokenizer_encode(t, text, sizeof(text) - 1, RS_TOKENIZE_ADD_SPECIAL, ids, 64, &n) ==
             RS_OK);
    RS_CHECK(n == 1 + sizeof(escaped) - 1 && ids[0] == 256);
    for (size_t i = 1; i < n; i++) /* every byte (spaces as U+2581's bytes) is its byte token */
        RS_CHECK(ids[i] == (uint8_t)escaped[i - 1]);
    char out[128];
    size_t len;
    RS_CHECK(rs_detok_decode(v, ids, n - 1, 0, out, sizeof(out), &len) == RS_OK);
    RS_CHECK(len == sizeof(text) - 2 && memcmp(out, text, len) == 0); /* round trip (valid part) */
    rs_tokenizer_destroy(&t);
    rs_vocab_destroy(&v);
    return 0;
}

/* The file ringserve-mkmodel itself writes (its byte-level vocab, --vocab-only). */
static int test_reads_mkmodel_byte_vocab(void)
{
    char path[512], cmd[1024], err[512];
    snprintf(path, sizeof(path), "%s/mkmodel-vocab.gguf", rs_test_tmpdir());
    snprintf(cmd, sizeof(cmd),
             "'%s/ringserve-mkmodel' -o '%s' --dim 64 --layers 1 --heads 1 --ffn 64 --vocab 300 "
             "--vocab-only >/dev/null 2>&1",
             rs_test_bindir(), path);
    RS_CHECK_MSG(system(cmd) == 0, "%s failed", cmd);
    rs_vocab *v = NULL;
    RS_CHECK_MSG(rs_vocab_load_file(path, &v, err, sizeof(err)) == RS_OK, "%s", err);
    unlink(path);
    RS_CHECK(rs_vocab_n_tokens(v) == 300 && rs_vocab_bos(v) == 256 && rs_vocab_eos(v) == 257);
    RS_CHECK(rs_vocab_token_type(v, 299) == RS_TOKEN_UNUSED && !rs_vocab_is_eog(v, 299));
    const char text[] = "Hi \xC3\xA9\n";
    int32_t ids[32];
    size_t n, len;
    char out[64];
    rs_tokenizer *t = NULL;
    RS_CHECK(rs_tokenizer_create(v, &t) == RS_OK);
    RS_CHECK(rs_tokenizer_encode(t, text, sizeof(text) - 1, RS_TOKENIZE_ADD_SPECIAL, ids, 32, &n) ==
             RS_OK);
    RS_CHECK(n == 1 + 3 + 2 + 3 + 2 + 1 && ids[0] == 256 && ids[4] == 'H' && ids[5] == 'i');
    RS_CHECK(rs_detok_decode(v, ids, n, 0, out, sizeof(out), &len) == RS_OK);
    RS_CHECK(len == sizeof(text) - 1 && memcmp(out, text, len) == 0);
    rs_tokenizer_destroy(&t);
    rs_vocab_destroy(&v);
    return 0;
}

/* --- threads -------------------------------------------------------------------------- */

struct thread_job {
    const rs_vocab *v;
    const char *text;
    size_t len;
    int32_t *ids;
    size_t n;
    rs_err rc;
};

static void *encode_thread(void *arg)
{
    struct thread_job *j = arg;
    rs_tokenizer *t = NULL;
    j->rc = rs_tokenizer_create(j->v, &t);
    for (int rep = 0; rep < 20 && j->rc == RS_OK; rep++)
        j->rc = rs_tokenizer_encode(t, j->text, j->len, 0, j->ids, 4096, &j->n);
    rs_tokenizer_destroy(&t);
    return NULL;
}

static int test_one_vocab_shared_by_threads(void)
{
    rs_vocab *v = load_ref("tokenizer/ggml-vocab-gpt-2.gguf");
    if (v == NULL)
        return RS_TEST_SKIP;
    static char text[8192];
    size_t len = 0;
    while (len + 64 < sizeof(text))
        len += (size_t)snprintf(text + len, sizeof(text) - len,
                                "Thread %zu says h\xC3\xA9llo to \xE4\xB8\x96\xE7\x95\x8C. ", len);
    static int32_t ids[4][4096];
    struct thread_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct thread_job){v, text, len, ids[i], 0, RS_OK};
        RS_CHECK(pthread_create(&th[i], NULL, encode_thread, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        RS_CHECK(jobs[i].rc == RS_OK && jobs[i].n == jobs[0].n && jobs[0].n > 100);
        RS_CHECK(memcmp(ids[i], ids[0], jobs[0].n * sizeof(int32_t)) == 0);
    }
    rs_vocab_destroy(&v);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_loads_every_refdata_vocab),
    RS_TEST(test_pieces_and_types),
    RS_TEST(test_missing_or_malformed_keys_are_clear_errors),
    RS_TEST(test_gpt2_vocab_with_merges),
    RS_TEST(test_byte_only_vocab_encodes_every_byte),
    RS_TEST(test_reads_mkmodel_byte_vocab),
    RS_TEST(test_one_vocab_shared_by_threads),
};
RS_TEST_MAIN(cases)

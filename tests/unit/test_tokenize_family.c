/* SPDX-License-Identifier: MIT */
/*
 * The tokenizer conventions of the model families the engine serves, on
 * llama.cpp's vocab files (refdata/tokenizer) and gemma/qwen2-style copies
 * of them: phi3's special tokens swallow the whitespace after them (by
 * general.name, as llama.cpp), except <s>, <unk> and <|endoftext|>; gemma's
 * SentencePiece without a space prefix (tokenizer.ggml.add_space_prefix =
 * false), its control tokens parsed only on request and <end_of_turn> as
 * end of turn; qwen2's pre-tokenizer splitting digits one by one and no BOS.
 * Expected ids are built from encodings of the plain pieces, so the test
 * states the convention rather than copying any tokenizer's output.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/detok.h"
#include "common/tokenizer.h"
#include "common/vocab.h"
#include "tests/rs_test.h"
#include "tests/unit/engine_testutil.h"

#define CAP 256

static rs_vocab *load_path(const char *path)
{
    char err[512];
    rs_vocab *v = NULL;
    if (rs_vocab_load_file(path, &v, err, sizeof(err)) != RS_OK)
        fprintf(stderr, "%s: %s\n", path, err);
    return v;
}

/* The ids of text (flags RS_TOKENIZE_*) appended at out[*n]. */
static int enc(const rs_vocab *v, const char *text, unsigned flags, int32_t *out, size_t *n)
{
    rs_tokenizer *t;
    size_t got = 0;
    RS_CHECK(rs_tokenizer_create(v, &t) == RS_OK);
    RS_CHECK(rs_tokenizer_encode(t, text, strlen(text), flags, out + *n, CAP - *n, &got) == RS_OK);
    rs_tokenizer_destroy(&t);
    *n += got;
    return 0;
}

static int same(const int32_t *a, size_t na, const int32_t *b, size_t nb, const char *what)
{
    int eq = na == nb && memcmp(a, b, na * sizeof(*a)) == 0;
    if (!eq) {
        fprintf(stderr, "%s: got", what);
        for (size_t i = 0; i < na; i++)
            fprintf(stderr, " %d", a[i]);
        fprintf(stderr, "; want");
        for (size_t i = 0; i < nb; i++)
            fprintf(stderr, " %d", b[i]);
        fputc('\n', stderr);
    }
    RS_CHECK_MSG(eq, "%s", what);
    return 0;
}

/* The text the detokenizer makes of ids (prev: the token before them, or -1). */
static int detok(const rs_vocab *v, int32_t prev, const int32_t *ids, size_t n, char *out,
                 size_t cap)
{
    struct rs_detok d;
    size_t o = 0, k;
    rs_detok_init(&d, v, prev, 0);
    for (size_t i = 0; i < n; i++) {
        RS_CHECK(o + rs_detok_max_out(v) < cap);
        RS_CHECK(rs_detok_feed(v, &d, ids[i], out + o, cap - o, &k) == RS_OK);
        o += k;
    }
    RS_CHECK(rs_detok_flush(v, &d, out + o, cap - o, &k) == RS_OK);
    out[o + k] = '\0';
    return 0;
}

static int32_t id_of(const rs_vocab *v, const char *text)
{
    return rs_vocab_find(v, text, strlen(text));
}

/* Phi-3 (general.name "Phi3"): "<|user|>\n" is one token; <s> keeps its following space. */
static int test_phi3_special_tokens_strip_following_whitespace(void)
{
    char path[1024];
    if (rs_test_refdata("tokenizer/ggml-vocab-phi-3.gguf", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    rs_vocab *v = load_path(path);
    RS_CHECK(v != NULL);
    int32_t user = id_of(v, "<|user|>"), end = id_of(v, "<|end|>"), asst = id_of(v, "<|assistant|>");
    RS_CHECK(user >= 0 && end >= 0 && asst >= 0);
    int32_t got[CAP], want[CAP];
    size_t ng = 0, nw = 0;
    const unsigned ps = RS_TOKENIZE_PARSE_SPECIAL;
    RS_CHECK(enc(v, "<|user|>\nHello there<|end|>\n \t<|assistant|>\n", ps, got, &ng) == 0);
    want[nw++] = user;
    RS_CHECK(enc(v, "Hello there", 0, want, &nw) == 0);
    want[nw++] = end;
    want[nw++] = asst;
    RS_CHECK(same(got, ng, want, nw, "phi3 chat turn") == 0);
    /* <s> is exempt: the space after it stays text (a doubled space prefix). */
    ng = nw = 0;
    RS_CHECK(enc(v, "<s> Hi", ps, got, &ng) == 0);
    want[nw++] = 1;
    RS_CHECK(enc(v, " Hi", 0, want, &nw) == 0);
    RS_CHECK(same(got, ng, want, nw, "phi3 <s> keeps its space") == 0);
    /* </s> is user-defined here: split out even without parse_special, and it strips too. */
    ng = nw = 0;
    RS_CHECK(enc(v, "a</s>  b", 0, got, &ng) == 0);
    RS_CHECK(enc(v, "a", 0, want, &nw) == 0);
    want[nw++] = id_of(v, "</s>");
    RS_CHECK(enc(v, "b", 0, want, &nw) == 0);
    RS_CHECK(same(got, ng, want, nw, "phi3 </s>") == 0);
    rs_vocab_destroy(&v);
    return 0;
}

static void set_name_llama(rs_gguf_writer *w)
{
    rs_gguf_writer_set_str(w, "general.name", "LLaMA v2");
}

/* The same vocab under another name keeps the newline after a special token. */
static int test_phi3_rule_follows_the_model_name(void)
{
    char path[1024], copy[1024];
    if (rs_test_refdata("tokenizer/ggml-vocab-phi-3.gguf", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    snprintf(copy, sizeof(copy), "%s/renamed.gguf", rs_test_tmpdir());
    struct tu_edit e = {.set = set_name_llama};
    RS_CHECK(tu_rewrite(path, copy, &e) == 0);
    rs_vocab *v = load_path(copy);
    RS_CHECK(v != NULL);
    int32_t got[CAP], want[CAP];
    size_t ng = 0, nw = 0;
    RS_CHECK(enc(v, "<|user|>\nHi", RS_TOKENIZE_PARSE_SPECIAL, got, &ng) == 0);
    want[nw++] = id_of(v, "<|user|>");
    RS_CHECK(enc(v, "\nHi", 0, want, &nw) == 0);
    RS_CHECK(same(got, ng, want, nw, "no strip without the phi3 name") == 0);
    rs_vocab_destroy(&v);
    return 0;
}

/* --- gemma: SentencePiece without a space prefix ---------------------------------------- */

static const rs_gguf *gemma_src;

/* The llama-spm vocab with two tokens renamed to gemma's turn markers (control) and no prefix. */
static void set_gemma(rs_gguf_writer *w)
{
    enum rs_gguf_type et;
    uint64_t n;
    rs_gguf_get_arr(gemma_src, "tokenizer.ggml.tokens", &et, &n);
    int64_t ki = rs_gguf_find_key(gemma_src, "tokenizer.ggml.tokens");
    const char **text = malloc(n * sizeof(*text));
    char **own = malloc(n * sizeof(*own));
    int32_t *types = malloc(n * sizeof(*types));
    for (uint64_t i = 0; i < n; i++) {
        struct rs_gguf_str s = rs_gguf_arr_str_at(gemma_src, (uint64_t)ki, i);
        own[i] = strndup(s.ptr, s.len);
        text[i] = own[i];
        int64_t t = 1;
        rs_gguf_arr_i64(gemma_src, "tokenizer.ggml.token_type", i, &t);
        types[i] = (int32_t)t;
    }
    text[n - 2] = "<start_of_turn>", text[n - 1] = "<end_of_turn>";
    types[n - 2] = types[n - 1] = 3; /* control */
    rs_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", text, NULL, n);
    rs_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", RS_GGUF_I32, types, n);
    rs_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", 0);
    rs_gguf_writer_set_str(w, "general.name", "gemma-2-2b-it");
    for (uint64_t i = 0; i < n; i++)
        free(own[i]);
    free(own), free(text), free(types);
}

static rs_vocab *gemma_vocab(void)
{
    char path[1024], copy[1024], err[256];
    if (rs_test_refdata("tokenizer/ggml-vocab-llama-spm.gguf", path, sizeof(path)) == NULL)
        return NULL;
    rs_gguf *g;
    if (rs_gguf_open(path, &g, err, sizeof(err)) != RS_OK)
        return NULL;
    gemma_src = g;
    snprintf(copy, sizeof(copy), "%s/gemma-vocab.gguf", rs_test_tmpdir());
    struct tu_edit e = {.set = set_gemma};
    int rc = tu_rewrite(path, copy, &e);
    rs_gguf_close(&g);
    return rc == 0 ? load_path(copy) : NULL;
}

static int test_gemma_no_space_prefix_and_turn_tokens(void)
{
    char path[1024], text[512];
    if (rs_test_refdata("tokenizer/ggml-vocab-llama-spm.gguf", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    rs_vocab *v = gemma_vocab(), *llama = load_path(path);
    RS_CHECK(v != NULL && llama != NULL);
    RS_CHECK(!rs_vocab_add_space_prefix(v) && rs_vocab_add_space_prefix(llama));
    int32_t sot = id_of(v, "<start_of_turn>"), eot = id_of(v, "<end_of_turn>");
    RS_CHECK(rs_vocab_eot(v) == eot && rs_vocab_is_eog(v, eot) && !rs_vocab_is_eog(v, sot));
    int32_t a[CAP], b[CAP];
    size_t na = 0, nb = 0;
    /* No prefix: the ids decode to the text exactly, the first piece without its "▁". */
    RS_CHECK(enc(v, "Hello world", RS_TOKENIZE_ADD_SPECIAL, a, &na) == 0);
    RS_CHECK(na >= 2 && a[0] == rs_vocab_bos(v));
    size_t tl;
    const char *t0 = rs_vocab_token_text(v, a[1], &tl);
    RS_CHECK(tl < 3 || memcmp(t0, "\xE2\x96\x81", 3) != 0);
    RS_CHECK(detok(v, a[0], a + 1, na - 1, text, sizeof(text)) == 0 &&
             strcmp(text, "Hello world") == 0);
    RS_CHECK(enc(llama, "Hello world", 0, b, &nb) == 0);
    RS_CHECK_MSG(na - 1 != nb || memcmp(a + 1, b, nb * 4) != 0, "prefix made no difference");
    /* A turn: no space prefix after the control tokens either. */
    na = nb = 0;
    RS_CHECK(enc(v, "<start_of_turn>user\nHi<end_of_turn>", RS_TOKENIZE_PARSE_SPECIAL, a, &na) == 0);
    b[nb++] = sot;
    RS_CHECK(enc(v, "user\nHi", 0, b, &nb) == 0);
    b[nb++] = eot;
    RS_CHECK(same(a, na, b, nb, "gemma turn") == 0);
    /* Control tokens are text unless parsing specials was asked for. */
    na = 0;
    RS_CHECK(enc(v, "<end_of_turn>", 0, a, &na) == 0);
    for (size_t i = 0; i < na; i++)
        RS_CHECK(a[i] != eot);
    rs_vocab_destroy(&v);
    rs_vocab_destroy(&llama);
    return 0;
}

/* --- qwen2: byte-level BPE, digits one by one, no BOS ----------------------------------- */

static void set_pre_qwen2(rs_gguf_writer *w)
{
    rs_gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
}

static int test_qwen2_pre_tokenizer_splits_digits(void)
{
    char path[1024], copy[1024];
    if (rs_test_refdata("tokenizer/ggml-vocab-gpt-2.gguf", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    snprintf(copy, sizeof(copy), "%s/qwen2-vocab.gguf", rs_test_tmpdir());
    struct tu_edit e = {.set = set_pre_qwen2};
    RS_CHECK(tu_rewrite(path, copy, &e) == 0);
    rs_vocab *q = load_path(copy), *g = load_path(path);
    RS_CHECK(q != NULL && g != NULL);
    RS_CHECK(strcmp(rs_vocab_pre(q), "qwen2") == 0 && !rs_vocab_add_bos(q));
    int32_t a[CAP], b[CAP];
    size_t na = 0, nb = 0;
    RS_CHECK(enc(q, "year 2024", RS_TOKENIZE_ADD_SPECIAL, a, &na) == 0);
    RS_CHECK(enc(q, "year", 0, b, &nb) == 0);
    static const char *const digits[] = {" ", "2", "0", "2", "4"};
    for (int i = 0; i < 5; i++)
        RS_CHECK(enc(q, digits[i], 0, b, &nb) == 0);
    RS_CHECK(same(a, na, b, nb, "qwen2: every digit its own pre-token, no BOS") == 0);
    /* gpt-2's \p{N}+ keeps "2024" one word, so its merges may join the digits. */
    na = 0;
    RS_CHECK(enc(g, "year 2024", 0, a, &na) == 0);
    RS_CHECK(na < nb);
    rs_vocab_destroy(&q);
    rs_vocab_destroy(&g);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_phi3_special_tokens_strip_following_whitespace),
    RS_TEST(test_phi3_rule_follows_the_model_name),
    RS_TEST(test_gemma_no_space_prefix_and_turn_tokens),
    RS_TEST(test_qwen2_pre_tokenizer_splits_digits),
};
RS_TEST_MAIN(cases)

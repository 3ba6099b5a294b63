/* SPDX-License-Identifier: MIT */
/*
 * The structured-output matcher and its masks on the real refdata vocabs
 * (llama-spm 32000 SentencePiece with byte tokens, gpt-2 50257 and falcon 65024
 * byte-level BPE, stories260K's 512): every mask equals the brute-force mask
 * (each token checked by a full decode) on many random states of JSON schema,
 * any-JSON and recursive GBNF grammars; replay equals step by step; lazy and
 * eager caches agree, also filled by several threads at once; choices, end
 * tokens, control tokens, partial UTF-8 across tokens, dead ends, the depth and
 * ambiguity caps, compile-time limits, the compiled-grammar cache, and the
 * printer (printed GBNF compiles to the same masks).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"
#include "tests/rs_test.h"
#include "tests/unit/grammar_testutil.h"

static const char *schema_nested =
    "{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":1200},"
    "\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\",null]},\"maxItems\":3},"
    "\"pos\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},"
    "\"y\":{\"type\":\"number\",\"exclusiveMinimum\":0.5}},\"required\":[\"x\"]}},"
    "\"required\":[\"id\",\"name\"]}";

static const char *gbnf_lists =
    "root ::= list\n"
    "list ::= \"[\" ws (item (\",\" ws item)*)? \"]\"\n"
    "item ::= [0-9]{1,3} | \"\\\"\" [a-z\\u00e9]{0,4} \"\\\"\" | list\n"
    "ws ::= \" \"?\n";

/* Random walks with the brute-force mask compared at every step. */
static int walks_exact(const char *vocab, enum rs_constraint_kind kind, const char *text,
                       int walks, uint32_t steps)
{
    struct gt_vocab x;
    int rc = gt_vocab_load(vocab, &x);
    if (rc)
        return rc;
    rs_grammar *g = gt_compile(&x, kind, text, 0);
    RS_CHECK(g != NULL);
    for (int i = 0; i < walks && rc == 0; i++) {
        rs_grammar_matcher *m;
        RS_CHECK(rs_grammar_matcher_create(g, &m) == RS_OK);
        struct gt_walk w;
        rc = gt_walk_run(m, &x, (uint64_t)i + 1, steps, 0.1, 1, &w);
        rs_grammar_matcher_destroy(&m);
    }
    rs_grammar_release(&g);
    gt_vocab_free(&x);
    return rc;
}

static int test_mask_exact_json_schema_gpt2(void)
{
    return walks_exact("tokenizer/ggml-vocab-gpt-2.gguf", RS_CONSTRAINT_JSON_SCHEMA,
                       schema_nested, 3, 25);
}

static int test_mask_exact_json_object_llama_spm(void)
{
    return walks_exact("tokenizer/ggml-vocab-llama-spm.gguf", RS_CONSTRAINT_JSON_OBJECT, NULL, 3,
                       25);
}

static int test_mask_exact_gbnf_recursive_falcon(void)
{
    return walks_exact("tokenizer/ggml-vocab-falcon.gguf", RS_CONSTRAINT_GBNF, gbnf_lists, 3, 25);
}

static int test_mask_exact_regex_and_choice_small_vocab(void)
{
    int rc = walks_exact("stories260K.gguf", RS_CONSTRAINT_REGEX,
                         "(ab|a[0-9]{2,4}|[^a-z\\n]{3})+(x|yz)?", 20, 40);
    if (rc)
        return rc;
    return walks_exact("stories260K.gguf", RS_CONSTRAINT_GBNF,
                       "root ::= (\"the \" | \"a \") [a-z]+ (\" \" root)?", 20, 40);
}

/* Replaying every prefix of a walk gives the state accepting it token by token did. */
static int test_replay_equals_step_by_step(void)
{
    struct gt_vocab x;
    int rc = gt_vocab_load("tokenizer/ggml-vocab-gpt-2.gguf", &x);
    if (rc)
        return rc;
    rs_grammar *g = gt_compile(&x, RS_CONSTRAINT_JSON_OBJECT, NULL, 0);
    RS_CHECK(g != NULL);
    rs_grammar_matcher *a, *b;
    RS_CHECK(rs_grammar_matcher_create(g, &a) == RS_OK);
    RS_CHECK(rs_grammar_matcher_create(g, &b) == RS_OK);
    struct gt_walk w;
    RS_CHECK(gt_walk_run(a, &x, 7, 60, 0.0, 0, &w) == 0);
    RS_CHECK(w.n_tokens > 10);
    size_t nw = rs_grammar_mask_words(x.n);
    uint32_t *ra = calloc(nw, 4), *rb = calloc(nw, 4);
    rs_grammar_matcher_reset(a);
    for (uint32_t k = 0; k <= w.n_tokens; k++) {
        size_t done;
        RS_CHECK(rs_grammar_matcher_replay(b, w.tokens, k, &done) == RS_OK && done == k);
        RS_CHECK(rs_grammar_matcher_fill_mask(a, ra, nw, NULL) == RS_OK);
        RS_CHECK(rs_grammar_matcher_fill_mask(b, rb, nw, NULL) == RS_OK);
        RS_CHECK_MSG(memcmp(ra, rb, nw * 4) == 0, "masks differ after %u tokens", k);
        RS_CHECK(rs_grammar_matcher_can_end(a) == rs_grammar_matcher_can_end(b));
        if (k < w.n_tokens)
            RS_CHECK(rs_grammar_matcher_accept(a, w.tokens[k]) == RS_OK);
    }
    /* a refused token in a replay names its position and stops there */
    int32_t bad[3] = {w.tokens[0], w.tokens[0], w.tokens[0]};
    size_t done = 99;
    if (rs_grammar_matcher_replay(b, bad, 3, &done) != RS_OK)
        RS_CHECK(done >= 1 && done < 3);
    free(ra);
    free(rb);
    rs_grammar_matcher_destroy(&a);
    rs_grammar_matcher_destroy(&b);
    rs_grammar_release(&g);
    gt_vocab_free(&x);
    return 0;
}

struct thread_arg {
    rs_grammar *g;
    const struct gt_vocab *x;
    int seed, rc;
    int32_t tokens[64];
    uint32_t n_tokens;
};

static void *walk_thread(void *p)
{
    struct thread_arg *t = p;
    rs_grammar_matcher *m;
    if (rs_grammar_matcher_create(t->g, &m) != RS_OK) {
        t->rc = 1;
        return NULL;
    }
    struct gt_walk w;
    t->rc = gt_walk_run(m, t->x, (uint64_t)t->seed, 40, 0.05, 0, &w);
    t->n_tokens = w.n_tokens < 64 ? w.n_tokens : 64;
    memcpy(t->tokens, w.tokens, t->n_tokens * sizeof(int32_t));
    rs_grammar_matcher_destroy(&m);
    return NULL;
}

/* A lazy cache filled by four threads at once gives the masks an eager one gives. */
static int test_lazy_cache_filled_by_threads_equals_eager(void)
{
    struct gt_vocab x;
    int rc = gt_vocab_load("tokenizer/ggml-vocab-llama-spm.gguf", &x);
    if (rc)
        return rc;
    rs_grammar *lazy = gt_compile(&x, RS_CONSTRAINT_JSON_SCHEMA, schema_nested, RS_GRAMMAR_LAZY);
    rs_grammar *eager = gt_compile(&x, RS_CONSTRAINT_JSON_SCHEMA, schema_nested, 0);
    RS_CHECK(lazy != NULL && eager != NULL);
    struct rs_grammar_stats st;
    rs_grammar_stats(lazy, &st);
    RS_CHECK(st.n_cached == 0);
    rs_grammar_stats(eager, &st);
    RS_CHECK(st.n_cached == st.n_classes);
    pthread_t th[4];
    struct thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct thread_arg){lazy, &x, i + 11, 0, {0}, 0};
        RS_CHECK(pthread_create(&th[i], NULL, walk_thread, &args[i]) == 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    size_t nw = rs_grammar_mask_words(x.n);
    uint32_t *ra = calloc(nw, 4), *rb = calloc(nw, 4);
    for (int i = 0; i < 4; i++) {
        RS_CHECK(args[i].rc == 0);
        rs_grammar_matcher *a, *b;
        RS_CHECK(rs_grammar_matcher_create(lazy, &a) == RS_OK);
        RS_CHECK(rs_grammar_matcher_create(eager, &b) == RS_OK);
        for (uint32_t k = 0; k <= args[i].n_tokens; k++) {
            RS_CHECK(rs_grammar_matcher_fill_mask(a, ra, nw, NULL) == RS_OK);
            RS_CHECK(rs_grammar_matcher_fill_mask(b, rb, nw, NULL) == RS_OK);
            RS_CHECK_MSG(memcmp(ra, rb, nw * 4) == 0, "thread %d step %u", i, k);
            if (k < args[i].n_tokens) {
                RS_CHECK(rs_grammar_matcher_accept(a, args[i].tokens[k]) == RS_OK);
                RS_CHECK(rs_grammar_matcher_accept(b, args[i].tokens[k]) == RS_OK);
            }
        }
        rs_grammar_matcher_destroy(&a);
        rs_grammar_matcher_destroy(&b);
    }
    rs_grammar_stats(lazy, &st);
    RS_CHECK(st.n_cached > 0 && st.n_cached <= st.n_classes);
    free(ra);
    free(rb);
    rs_grammar_release(&lazy);
    rs_grammar_release(&eager);
    gt_vocab_free(&x);
    return 0;
}

/* A choice constraint only ever yields one of its choices (prefixes of each other too). */
static int test_choice_returns_one_of_the_choices(void)
{
    static const char *vocabs[] = {"tokenizer/ggml-vocab-gpt-2.gguf",
                                   "tokenizer/ggml-vocab-llama-spm.gguf"};
    const char *choices[] = {"yes", "no", "maybe so", "n\xc3\xb6", "no way", ""};
    size_t lens[6];
    for (int i = 0; i < 6; i++)
        lens[i] = strlen(choices[i]);
    for (int v = 0; v < 2; v++) {
        struct gt_vocab x;
        int rc = gt_vocab_load(vocabs[v], &x);
        if (rc)
            return rc;
        struct rs_constraint c = {RS_CONSTRAINT_CHOICE, NULL, 0, choices, lens, 5};
        rs_grammar *g;
        char err[256];
        RS_CHECK_MSG(rs_grammar_compile(x.gv, &c, NULL, 0, &g, err, sizeof(err)) == RS_OK, "%s",
                     err);
        int seen[5] = {0};
        for (int i = 0; i < 60; i++) {
            rs_grammar_matcher *m;
            RS_CHECK(rs_grammar_matcher_create(g, &m) == RS_OK);
            struct gt_walk w;
            RS_CHECK(gt_walk_run(m, &x, (uint64_t)i + 100, 30, 0.5, i < 5, &w) == 0);
            RS_CHECK_MSG(w.ended, "no end after '%s'", w.text);
            int which = -1;
            for (int k = 0; k < 5; k++)
                if (w.len == lens[k] && memcmp(w.text, choices[k], lens[k]) == 0)
                    which = k;
            RS_CHECK_MSG(which >= 0, "output '%s' is not a choice", w.text);
            seen[which]++;
            rs_grammar_matcher_destroy(&m);
        }
        RS_CHECK(seen[0] > 0 && seen[2] > 0); /* the walk explores */
        rs_grammar_release(&g);
        gt_vocab_free(&x);
    }
    return 0;
}

/* End tokens are allowed exactly when the grammar can end; control tokens never. */
static int test_end_tokens_exactly_when_grammar_can_end(void)
{
    struct gt_vocab x;
    int rc = gt_vocab_load("tokenizer/ggml-vocab-llama-spm.gguf", &x);
    if (rc)
        return rc;
    rs_grammar *g = gt_compile(&x, RS_CONSTRAINT_GBNF, "root ::= [0-9]+ (\"-\" [0-9]+)?", 0);
    RS_CHECK(g != NULL);
    rs_grammar_matcher *m;
    RS_CHECK(rs_grammar_matcher_create(g, &m) == RS_OK);
    size_t nw = rs_grammar_mask_words(x.n);
    uint32_t *row = calloc(nw, 4);
    int32_t eos = rs_vocab_eos(x.v), bos = rs_vocab_bos(x.v);
    const char *feed[] = {"1", "2", "-", "3"};
    int can_end[] = {0, 1, 1, 0, 1}; /* before each feed, then at the end */
    for (int i = 0; i <= 4; i++) {
        unsigned flags;
        RS_CHECK(rs_grammar_matcher_fill_mask(m, row, nw, &flags) == RS_OK);
        RS_CHECK(rs_grammar_matcher_can_end(m) == can_end[i]);
        RS_CHECK(gt_bit(row, (uint32_t)eos) == can_end[i]);
        RS_CHECK(!!(flags & RS_GRAMMAR_MASK_END) == can_end[i]);
        RS_CHECK(!gt_bit(row, (uint32_t)bos) && !rs_grammar_matcher_check(m, bos));
        for (uint32_t t = 0; t < x.n; t++)
            if (rs_vocab_token_type(x.v, (int32_t)t) == RS_TOKEN_CONTROL && t != (uint32_t)eos)
                RS_CHECK(!gt_bit(row, t));
        RS_CHECK(rs_grammar_matcher_check(m, eos) == can_end[i]);
        if (i < 4)
            RS_CHECK(rs_grammar_matcher_accept_bytes(m, feed[i], 1) == RS_OK);
    }
    RS_CHECK(!rs_grammar_matcher_is_finished(m));
    RS_CHECK(rs_grammar_matcher_accept(m, eos) == RS_OK);
    RS_CHECK(rs_grammar_matcher_is_finished(m));
    RS_CHECK(rs_grammar_matcher_accept_bytes(m, "4", 1) == RS_EINVAL);
    free(row);
    rs_grammar_matcher_destroy(&m);
    rs_grammar_release(&g);
    gt_vocab_free(&x);
    return 0;
}

/* A grammar that cannot continue reports it: only the end tokens, and is_finished. */
static int test_finished_when_nothing_can_follow(void)
{
    struct gt_vocab x;
    int rc = gt_vocab_load("tokenizer/ggml-vocab-gpt-2.gguf", &x);
    if (rc)
        return rc;
    rs_grammar *g = gt_compile(&x, RS_CONSTRAINT_REGEX, "ab(c|d)", 0);
    RS_CHECK(g != NULL);
    rs_grammar_matcher *m;
    RS_CHECK(rs_grammar_matcher_create(g, &m) == RS_OK);
    size_t nw = rs_grammar_mask_words(x.n);
    uint32_t *row = calloc(nw, 4);
    unsigned flags;
    RS_CHECK(rs_grammar_matcher_accept_bytes(m, "abd", 3) == RS_OK);
    RS_CHECK(rs_grammar_matcher_is_finished(m) && rs_grammar_matcher_can_end(m));
    RS_CHECK(rs_grammar_matcher_fill_mask(m, row, nw, &flags) == RS_OK);
    RS_CHECK(flags == (RS_GRAMMAR_MASK_END | RS_GRAMMAR_MASK_ONLY_END));
    uint32_t n_set = 0;
    for (uint32_t t = 0; t < x.n; t++)
        n_set += gt_bit(row, t);
    RS_CHECK(n_set == 1 && gt_bit(row, (uint32_t)rs_vocab_eos(x.v)));
    RS_CHECK(rs_grammar_matcher_fill_mask(m, row, nw - 1, &flags) == RS_EINVAL);
    free(row);
    rs_grammar_matcher_destroy(&m);
    rs_grammar_release(&g);
    gt_vocab_free(&x);
    return 0;
}

/* A character split over byte tokens: each byte is a state of its own. */
static int test_partial_utf8_across_tokens(void)
{
    struct gt_vocab x;
    int rc = gt_vocab_load("stories260K.gguf", &x);
    if (rc)
        return rc;
    rs_grammar *g = gt_compile(&x, RS_CONSTRAINT_GBNF, "root ::= [\\u65e5\\u672c]+ \"!\"", 0);
    RS_CHECK(g != NULL);
    rs_grammar_matcher *m;
    RS_CHECK(rs_grammar_matcher_create(g, &m) == RS_OK);
    size_t nw = rs_grammar_mask_words(x.n);
    uint32_t *row = calloc(nw, 4);
    /* 日 = E6 97 A5, 本 = E6 9C AC: byte tokens <0xE6> ... */
    const uint8_t want[] = {0xE6, 0x97, 0xA5, 0xE6, 0x9C, 0xAC};
    for (int i = 0; i < 6; i++) {
        RS_CHECK(rs_grammar_matcher_fill_mask(m, row, nw, NULL) == RS_OK);
        RS_CHECK(gt_mask_is_exact(m, &x, row) == 0);
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", want[i]);
        int32_t t = rs_vocab_find(x.v, name, strlen(name));
        RS_CHECK(t >= 0 && gt_bit(row, (uint32_t)t));
        uint32_t n_set = 0;
        for (uint32_t k = 0; k < x.n; k++)
            n_set += gt_bit(row, k);
        RS_CHECK_MSG(n_set == (i % 3 == 0 ? 1u : i % 3 == 1 ? 2u : 1u) || i == 3,
                     "step %d: %u tokens allowed", i, n_set);
        RS_CHECK(rs_grammar_matcher_accept(m, t) == RS_OK);
        RS_CHECK(!rs_grammar_matcher_can_end(m));
    }
    RS_CHECK(rs_grammar_matcher_accept_bytes(m, "!", 1) == RS_OK);
    RS_CHECK(rs_grammar_matcher_is_finished(m));
    free(row);
    rs_grammar_matcher_destroy(&m);
    rs_grammar_release(&g);
    gt_vocab_free(&x);
    return 0;
}

/* Writes a SentencePiece vocab-only GGUF with exactly these normal tokens after <unk> <s> </s>. */
static const char *small_vocab(const char *const *toks, uint32_t n, char *path, size_t cap)
{
    const char *all[16] = {"<unk>", "<s>", "</s>"};
    int32_t types[16] = {RS_TOKEN_UNKNOWN, RS_TOKEN_CONTROL, RS_TOKEN_CONTROL};
    float scores[16] = {0};
    for (uint32_t i = 0; i < n; i++)
        all[3 + i] = toks[i], types[3 + i] = RS_TOKEN_NORMAL, scores[3 + i] = -(float)i;
    snprintf(path, cap, "%s/small-vocab.gguf", rs_test_tmpdir());
    rs_gguf_writer *w = NULL;
    if (rs_gguf_writer_create(&w) != RS_OK)
        return NULL;
    rs_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    rs_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", all, NULL, n + 3);
    rs_gguf_writer_set_arr(w, "tokenizer.ggml.scores", RS_GGUF_F32, scores, n + 3);
    rs_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", RS_GGUF_I32, types, n + 3);
    rs_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    rs_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    rs_err rc = rs_gguf_writer_write(w, path);
    rs_gguf_writer_destroy(&w);
    return rc == RS_OK ? path : NULL;
}

/* When the grammar needs bytes no token has, the mask is empty and says so. */
static int test_dead_end_is_reported(void)
{
    static const char *const toks[] = {"a", "b", "ab", "\xe2\x96\x81\x61"};
    char path[1024], err[256];
    RS_CHECK(small_vocab(toks, 4, path, sizeof(path)) != NULL);
    struct gt_vocab x = {0};
    RS_CHECK_MSG(rs_vocab_load_file(path, &x.v, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK(rs_grammar_vocab_create(x.v, &x.gv) == RS_OK);
    x.n = rs_vocab_n_tokens(x.v);
    rs_grammar *g = gt_compile(&x, RS_CONSTRAINT_GBNF, "root ::= (\"a\" | \" a\") \"c\"", 0);
    RS_CHECK(g != NULL);
    rs_grammar_matcher *m;
    RS_CHECK(rs_grammar_matcher_create(g, &m) == RS_OK);
    uint32_t row[1];
    unsigned flags;
    RS_CHECK(rs_grammar_matcher_fill_mask(m, row, 1, &flags) == RS_OK);
    RS_CHECK(flags == 0 && row[0] == ((1u << 3) | (1u << 6))); /* "a" and "▁a" */
    RS_CHECK(rs_grammar_matcher_accept(m, 6) == RS_OK);
    RS_CHECK(rs_grammar_matcher_fill_mask(m, row, 1, &flags) == RS_OK);
    RS_CHECK(flags == RS_GRAMMAR_MASK_DEAD && row[0] == 0);
    RS_CHECK(!rs_grammar_matcher_is_finished(m) && !rs_grammar_matcher_can_end(m));
    rs_grammar_matcher_destroy(&m);
    rs_grammar_release(&g);
    gt_vocab_free(&x);
    return 0;
}

/* Near the depth limit the masks still equal full decodes (the cache is bypassed there). */
static int test_depth_limit_masks_stay_exact(void)
{
    struct gt_vocab x;
    int rc = gt_vocab_load("tokenizer/ggml-vocab-gpt-2.gguf", &x);
    if (rc)
        return rc;
    struct rs_grammar_limits lim;
    rs_grammar_limits_default(&lim);
    lim.max_stack_depth = 6;
    struct rs_constraint c = {RS_CONSTRAINT_GBNF, gbnf_lists, strlen(gbnf_lists), NULL, NULL, 0};
    rs_grammar *g;
    char err[256];
    RS_CHECK_MSG(rs_grammar_compile(x.gv, &c, &lim, 0, &g, err, sizeof(err)) == RS_OK, "%s", err);
    rs_grammar_matcher *m;
    RS_CHECK(rs_grammar_matcher_create(g, &m) == RS_OK);
    /* four lists deep, then walk at random from there */
    RS_CHECK(rs_grammar_matcher_accept_bytes(m, "[[[[", 4) == RS_OK);
    RS_CHECK(rs_grammar_matcher_accept_bytes(m, "[[[[[[", 6) == RS_EINVAL);
    struct gt_walk w;
    RS_CHECK(gt_walk_run(m, &x, 5, 12, 0.0, 1, &w) == 0);
    rs_grammar_matcher_destroy(&m);
    rs_grammar_release(&g);
    gt_vocab_free(&x);
    return 0;
}

/* Too many parse stacks at once is RS_ERANGE with the state unchanged, never a wrong answer. */
static int test_ambiguity_cap_is_an_error(void)
{
    struct gt_vocab x;
    int rc = gt_vocab_load("stories260K.gguf", &x);
    if (rc)
        return rc;
    struct rs_grammar_limits lim;
    rs_grammar_limits_default(&lim);
    lim.max_stacks = 8;
    /* x and y are both recursive, so "a" may continue either: one more stack per "a" */
    const char *t = "root ::= x\nx ::= \"a\" x \"b\" | \"a\" y\ny ::= \"a\" y \"c\" | \"\"";
    struct rs_constraint c = {RS_CONSTRAINT_GBNF, t, strlen(t), NULL, NULL, 0};
    rs_grammar *g;
    char err[256];
    RS_CHECK_MSG(rs_grammar_compile(x.gv, &c, &lim, 0, &g, err, sizeof(err)) == RS_OK, "%s", err);
    rs_grammar_matcher *m;
    RS_CHECK(rs_grammar_matcher_create(g, &m) == RS_OK);
    RS_CHECK(rs_grammar_matcher_accept_bytes(m, "aaa", 3) == RS_OK); /* 7 stacks */
    RS_CHECK(rs_grammar_matcher_accept_bytes(m, "aaaaaaaaaaaaaaaaaaaa", 20) == RS_ERANGE);
    RS_CHECK(rs_grammar_matcher_accept_bytes(m, "bb", 2) == RS_OK); /* state was unchanged */
    RS_CHECK(rs_grammar_matcher_can_end(m));
    rs_grammar_matcher_destroy(&m);
    rs_grammar_release(&g);
    gt_vocab_free(&x);
    return 0;
}

static int expect_compile_error(const struct gt_vocab *x, enum rs_constraint_kind kind,
                                const char *text, const struct rs_grammar_limits *lim, rs_err want,
                                const char *msg_part)
{
    struct rs_constraint c = {kind, text, strlen(text), NULL, NULL, 0};
    rs_grammar *g = NULL;
    char err[512] = "";
    rs_err rc = rs_grammar_compile(x->gv, &c, lim, RS_GRAMMAR_LAZY, &g, err, sizeof(err));
    RS_CHECK_MSG(rc == want, "'%s': got %s (%s), want %s", text, rs_strerror(rc), err,
                 rs_strerror(want));
    RS_CHECK_MSG(strstr(err, msg_part) != NULL, "'%s': message '%s' lacks '%s'", text, err,
                 msg_part);
    RS_CHECK(g == NULL);
    return 0;
}

/* Every size limit is checked at compile time with a message naming it. */
static int test_limits_refused_at_compile(void)
{
    struct gt_vocab x;
    int rc = gt_vocab_load("stories260K.gguf", &x);
    if (rc)
        return rc;
    struct rs_grammar_limits lim;
    rs_grammar_limits_default(&lim);
    lim.max_states = 50;
    RS_CHECK(expect_compile_error(&x, RS_CONSTRAINT_REGEX, "[a-z]{100}", &lim, RS_ERANGE,
                                  "max_states") == 0);
    rs_grammar_limits_default(&lim);
    lim.max_text = 10;
    RS_CHECK(expect_compile_error(&x, RS_CONSTRAINT_GBNF, "root ::= \"0123456789\"", &lim,
                                  RS_ERANGE, "limit") == 0);
    rs_grammar_limits_default(&lim);
    lim.max_rules = 3;
    RS_CHECK(expect_compile_error(&x, RS_CONSTRAINT_GBNF, "root ::= a\na ::= b\nb ::= c\nc ::= \"x\"",
                                  &lim, RS_ERANGE, "rules") == 0);
    rs_grammar_limits_default(&lim);
    RS_CHECK(expect_compile_error(&x, RS_CONSTRAINT_GBNF, "root ::= \"a\"{1,20000}", &lim,
                                  RS_ERANGE, "line 1, column 16") == 0);
    lim.max_nesting = 4;
    RS_CHECK(expect_compile_error(&x, RS_CONSTRAINT_JSON_SCHEMA,
                                  "{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{}}}}}}",
                                  &lim, RS_ERANGE, "#/items/items/items/items") == 0);
    RS_CHECK(expect_compile_error(&x, RS_CONSTRAINT_GBNF, "root ::= root \"a\" | \"b\"", NULL,
                                  RS_EINVAL, "left recursion") == 0);
    RS_CHECK(expect_compile_error(&x, RS_CONSTRAINT_GBNF, "root ::= x\nx ::= \"a\" x", NULL,
                                  RS_EINVAL, "matches no string") == 0);
    gt_vocab_free(&x);
    return 0;
}

/* Same content, same compiled grammar; least recently used evicted past the bound. */
static int test_grammar_cache_hits_and_evicts(void)
{
    struct gt_vocab x;
    int rc = gt_vocab_load("stories260K.gguf", &x);
    if (rc)
        return rc;
    rs_grammar_cache *cache;
    RS_CHECK(rs_grammar_cache_create(x.gv, 2, SIZE_MAX, &cache) == RS_OK);
    const char *a = "root ::= \"a\"+", *b = "root ::= \"b\"+", *c = "root ::= \"c\"+";
    char a2[32];
    strcpy(a2, a); /* equal content at another address */
    struct rs_constraint ca = {RS_CONSTRAINT_GBNF, a, strlen(a), NULL, NULL, 0};
    struct rs_constraint ca2 = {RS_CONSTRAINT_GBNF, a2, strlen(a2), NULL, NULL, 0};
    struct rs_constraint cb = {RS_CONSTRAINT_GBNF, b, strlen(b), NULL, NULL, 0};
    struct rs_constraint cc = {RS_CONSTRAINT_GBNF, c, strlen(c), NULL, NULL, 0};
    struct rs_constraint rx = {RS_CONSTRAINT_REGEX, a, strlen(a), NULL, NULL, 0};
    rs_grammar *g1, *g2, *g3;
    int hit;
    char err[256];
    RS_CHECK(rs_constraint_hash(&ca) == rs_constraint_hash(&ca2));
    RS_CHECK(rs_constraint_hash(&ca) != rs_constraint_hash(&rx));
    RS_CHECK(rs_grammar_cache_get(cache, &ca, NULL, 0, &g1, &hit, err, sizeof(err)) == RS_OK && !hit);
    RS_CHECK(rs_grammar_cache_get(cache, &ca2, NULL, 0, &g2, &hit, err, sizeof(err)) == RS_OK && hit);
    RS_CHECK(g1 == g2);
    rs_grammar_release(&g2);
    /* the same text as a regex is another constraint */
    RS_CHECK(rs_grammar_cache_get(cache, &rx, NULL, 0, &g2, &hit, err, sizeof(err)) == RS_OK && !hit);
    RS_CHECK(g2 != g1);
    rs_grammar_release(&g2);
    RS_CHECK(rs_grammar_cache_get(cache, &cb, NULL, 0, &g3, &hit, err, sizeof(err)) == RS_OK && !hit);
    rs_grammar_release(&g3);
    RS_CHECK(rs_grammar_cache_get(cache, &cc, NULL, 0, &g3, &hit, err, sizeof(err)) == RS_OK && !hit);
    rs_grammar_release(&g3);
    /* a was evicted (least recently used); g1 still works: references keep it alive */
    RS_CHECK(rs_grammar_cache_get(cache, &ca, NULL, 0, &g2, &hit, err, sizeof(err)) == RS_OK && !hit);
    rs_grammar_matcher *m;
    RS_CHECK(rs_grammar_matcher_create(g1, &m) == RS_OK);
    RS_CHECK(rs_grammar_matcher_accept_bytes(m, "aaa", 3) == RS_OK);
    rs_grammar_matcher_destroy(&m);
    /* errors are not cached and carry their message */
    struct rs_constraint bad = {RS_CONSTRAINT_GBNF, "root ::= (", 10, NULL, NULL, 0};
    RS_CHECK(rs_grammar_cache_get(cache, &bad, NULL, 0, &g3, &hit, err, sizeof(err)) == RS_EINVAL);
    RS_CHECK(strstr(err, "line 1, column 10") != NULL);
    rs_grammar_release(&g1);
    rs_grammar_release(&g2);
    rs_grammar_cache_destroy(&cache);
    gt_vocab_free(&x);
    return 0;
}

/* The printed GBNF of a converted grammar compiles to the same masks. */
static int test_printed_gbnf_gives_the_same_masks(void)
{
    struct gt_vocab x;
    int rc = gt_vocab_load("tokenizer/ggml-vocab-llama-spm.gguf", &x);
    if (rc)
        return rc;
    rs_grammar *a = gt_compile(&x, RS_CONSTRAINT_JSON_SCHEMA, schema_nested, RS_GRAMMAR_LAZY);
    RS_CHECK(a != NULL);
    size_t n;
    RS_CHECK(rs_grammar_print(a, NULL, 0, &n) == RS_ERANGE && n > 100);
    char *txt = malloc(n + 1);
    RS_CHECK(rs_grammar_print(a, txt, n + 1, &n) == RS_OK);
    rs_grammar *b = gt_compile(&x, RS_CONSTRAINT_GBNF, txt, RS_GRAMMAR_LAZY);
    RS_CHECK(b != NULL);
    size_t nw = rs_grammar_mask_words(x.n);
    uint32_t *ra = calloc(nw, 4), *rb = calloc(nw, 4);
    for (int i = 0; i < 4; i++) {
        rs_grammar_matcher *ma, *mb;
        RS_CHECK(rs_grammar_matcher_create(a, &ma) == RS_OK);
        RS_CHECK(rs_grammar_matcher_create(b, &mb) == RS_OK);
        struct gt_walk w;
        RS_CHECK(gt_walk_run(ma, &x, (uint64_t)i + 40, 40, 0.0, 0, &w) == 0);
        rs_grammar_matcher_reset(ma);
        for (uint32_t k = 0; k <= w.n_tokens; k++) {
            RS_CHECK(rs_grammar_matcher_fill_mask(ma, ra, nw, NULL) == RS_OK);
            RS_CHECK(rs_grammar_matcher_fill_mask(mb, rb, nw, NULL) == RS_OK);
            RS_CHECK_MSG(memcmp(ra, rb, nw * 4) == 0, "walk %d step %u", i, k);
            if (k < w.n_tokens) {
                RS_CHECK(rs_grammar_matcher_accept(ma, w.tokens[k]) == RS_OK);
                RS_CHECK(rs_grammar_matcher_accept(mb, w.tokens[k]) == RS_OK);
            }
        }
        rs_grammar_matcher_destroy(&ma);
        rs_grammar_matcher_destroy(&mb);
    }
    free(ra);
    free(rb);
    free(txt);
    rs_grammar_release(&a);
    rs_grammar_release(&b);
    gt_vocab_free(&x);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_mask_exact_json_schema_gpt2),
    RS_TEST(test_mask_exact_json_object_llama_spm),
    RS_TEST(test_mask_exact_gbnf_recursive_falcon),
    RS_TEST(test_mask_exact_regex_and_choice_small_vocab),
    RS_TEST(test_replay_equals_step_by_step),
    RS_TEST(test_lazy_cache_filled_by_threads_equals_eager),
    RS_TEST(test_choice_returns_one_of_the_choices),
    RS_TEST(test_end_tokens_exactly_when_grammar_can_end),
    RS_TEST(test_finished_when_nothing_can_follow),
    RS_TEST(test_partial_utf8_across_tokens),
    RS_TEST(test_dead_end_is_reported),
    RS_TEST(test_depth_limit_masks_stay_exact),
    RS_TEST(test_ambiguity_cap_is_an_error),
    RS_TEST(test_limits_refused_at_compile),
    RS_TEST(test_grammar_cache_hits_and_evicts),
    RS_TEST(test_printed_gbnf_gives_the_same_masks),
};

RS_TEST_MAIN(cases)

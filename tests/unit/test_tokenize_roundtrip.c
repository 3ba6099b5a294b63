/* SPDX-License-Identifier: MIT */
/*
 * Random text: decode(encode(s)) == s on valid UTF-8 (ASCII, CJK, emoji with
 * joiners, combining marks, whitespace runs) for byte-fallback SentencePiece
 * vocabs (llama-spm, phi-3, baichuan, a byte-only vocab as ringserve-mkmodel
 * writes) and byte-level BPE vocabs; and the fast encoders equal plain
 * quadratic re-implementations of the two algorithms written here from their
 * definitions (SentencePiece: merge the best-scoring pair, leftmost on ties,
 * over the whole text; BPE: merge the lowest-ranked pair per pre-token, looked
 * up by its GGUF merge string).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/detok.h"
#include "common/pretok.h"
#include "common/tokenizer.h"
#include "common/vocab.h"
#include "tests/rs_test.h"

#define MAX_IDS 8192

static const char *const PIECES[] = {
    "the",
    "Hello",
    "world",
    "tokenizer",
    "x",
    "I",
    "a",
    "42",
    "2024",
    "3.14",
    ",",
    ".",
    "!",
    "?",
    "'s",
    "'re",
    "(",
    ")",
    "{",
    "}",
    "=>",
    "->",
    "#include",
    "_",
    "-",
    "\"",
    " ",
    " ",
    " ",
    "  ",
    "    ",
    "\t",
    "\n",
    "\n\n",
    "   \n",
    "\r\n",
    "\xE4\xB8\xAD\xE6\x96\x87",
    "\xE8\xAA\x9E",
    "\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF",
    "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",
    "\xF0\x9F\xA6\x99",
    "\xF0\x9F\x98\x80",
    "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB",
    "\xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F",
    "e\xCC\x81",
    "a\xCC\x88\xCC\x81",
    "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82",
    "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7",
    "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87",
    "\xC3\xBC",
    "\xC3\xA9t\xC3\xA9",
    "\xE2\x82\xAC",
    "\xC2\xA0",
    "\xE3\x80\x80",
    "\xEF\xBC\x81",
    "\xE2\x80\xA6",
    "\xF0\x90\x8D\x88",
    "\xF4\x8F\xBF\xBF",
    "\xEF\xBF\xBD",
    "<s>",
    "<|endoftext|>",
    /* Not "</s>": phi-3 makes it a user-defined token, always split out, and SentencePiece
     * then prefixes a space to the text after it (as llama.cpp and HF's legacy Llama do). */
};
#define N_PIECES (sizeof(PIECES) / sizeof(PIECES[0]))

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static size_t random_text(char *buf, size_t max_units)
{
    size_t n = 0, units = rnd((uint32_t)max_units + 1);
    for (size_t u = 0; u < units; u++) {
        const char *p = PIECES[rnd(N_PIECES)];
        memcpy(buf + n, p, strlen(p));
        n += strlen(p);
    }
    return n;
}

static rs_vocab *load_vocab(const char *rel)
{
    char path[1024], err[512];
    rs_vocab *v = NULL;
    if (rs_test_refdata(rel, path, sizeof(path)) == NULL)
        return NULL;
    if (rs_vocab_load_file(path, &v, err, sizeof(err)) != RS_OK)
        fprintf(stderr, "%s: %s\n", rel, err);
    return v;
}

/* decode(encode(s)) == s, with BOS where the vocab adds it (SentencePiece drops its space). */
static int round_trip(rs_vocab *v, int iterations)
{
    static char text[8192], back[32768];
    static int32_t ids[MAX_IDS];
    rs_tokenizer *t = NULL;
    RS_CHECK(rs_tokenizer_create(v, &t) == RS_OK);
    for (int it = 0; it < iterations; it++) {
        size_t len = random_text(text, 60), n = 0, m = 0;
        RS_CHECK(rs_tokenizer_encode(t, text, len, RS_TOKENIZE_ADD_SPECIAL, ids, MAX_IDS, &n) ==
                 RS_OK);
        RS_CHECK(rs_detok_decode(v, ids, n, 0, back, sizeof(back), &m) == RS_OK);
        RS_CHECK_MSG(m == len && memcmp(back, text, len) == 0,
                     "iteration %d:\nin  [%.*s]\nout [%.*s]", it, (int)len, text, (int)m, back);
    }
    rs_tokenizer_destroy(&t);
    rs_vocab_destroy(&v);
    return 0;
}

static int round_trip_ref(const char *rel, int iterations)
{
    rs_vocab *v = load_vocab(rel);
    return v == NULL ? RS_TEST_SKIP : round_trip(v, iterations);
}

static int test_round_trip_llama_spm(void)
{
    return round_trip_ref("tokenizer/ggml-vocab-llama-spm.gguf", 400);
}
static int test_round_trip_phi3(void)
{
    return round_trip_ref("tokenizer/ggml-vocab-phi-3.gguf", 200);
}
static int test_round_trip_baichuan(void)
{
    return round_trip_ref("tokenizer/ggml-vocab-baichuan.gguf", 200);
}
static int test_round_trip_gpt2(void)
{
    return round_trip_ref("tokenizer/ggml-vocab-gpt-2.gguf", 400);
}
static int test_round_trip_mpt(void)
{
    return round_trip_ref("tokenizer/ggml-vocab-mpt.gguf", 200);
}
static int test_round_trip_gpt_neox(void)
{
    return round_trip_ref("tokenizer/ggml-vocab-gpt-neox.gguf", 200);
}
static int test_round_trip_falcon(void)
{
    return round_trip_ref("tokenizer/ggml-vocab-falcon.gguf", 200);
}
static int test_round_trip_deepseek_coder(void)
{
    return round_trip_ref("tokenizer/ggml-vocab-deepseek-coder.gguf", 200);
}

/* The byte-only vocab ringserve-mkmodel writes without --vocab-from. */
static int test_round_trip_byte_only_vocab(void)
{
    static char names[258][8];
    const char *toks[258];
    int32_t types[258];
    for (int i = 0; i < 258; i++) {
        if (i < 256)
            snprintf(names[i], sizeof(names[i]), "<0x%02X>", i);
        else
            snprintf(names[i], sizeof(names[i]), "%s", i == 256 ? "<s>" : "</s>");
        toks[i] = names[i];
        types[i] = i < 256 ? 6 : 3;
    }
    char path[512], err[512];
    snprintf(path, sizeof(path), "%s/bytes.gguf", rs_test_tmpdir());
    rs_gguf_writer *w = NULL;
    RS_CHECK(rs_gguf_writer_create(&w) == RS_OK);
    RS_CHECK(rs_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama") == RS_OK);
    RS_CHECK(rs_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 258) == RS_OK);
    RS_CHECK(rs_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", RS_GGUF_I32, types, 258) ==
             RS_OK);
    RS_CHECK(rs_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 256) == RS_OK);
    RS_CHECK(rs_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 257) == RS_OK);
    RS_CHECK(rs_gguf_writer_write(w, path) == RS_OK);
    rs_gguf_writer_destroy(&w);
    rs_vocab *v = NULL;
    RS_CHECK_MSG(rs_vocab_load_file(path, &v, err, sizeof(err)) == RS_OK, "%s", err);
    unlink(path);
    return round_trip(v, 200);
}

/* --- SentencePiece reference: best-scoring pair over the whole text, O(n^2) ------------- */

struct ref_sym {
    size_t off, len;
};

static int32_t spm_token(const rs_vocab *v, const char *s, size_t n)
{
    int32_t id = rs_vocab_find(v, s, n);
    enum rs_token_type ty = rs_vocab_token_type(v, id);
    return id >= 0 && (ty == RS_TOKEN_NORMAL || ty == RS_TOKEN_USER_DEFINED) ? id : -1;
}

static size_t spm_reference(const rs_vocab *v, const char *text, size_t len, int32_t *ids)
{
    static char esc[16384];
    static struct ref_sym sym[16384];
    size_t e = 0, k = 0, n = 0;
    memcpy(esc, "\xE2\x96\x81", 3);
    e = 3;
    for (size_t i = 0; i < len; i++)
        if (text[i] == ' ')
            memcpy(esc + e, "\xE2\x96\x81", 3), e += 3;
        else
            esc[e++] = text[i];
    for (size_t i = 0; i < e;) { /* valid UTF-8 input: lead bytes give the lengths */
        unsigned char b = (unsigned char)esc[i];
        size_t l = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        sym[k++] = (struct ref_sym){i, l};
        i += l;
    }
    for (;;) {
        size_t best = SIZE_MAX;
        float best_score = 0;
        for (size_t i = 0; i + 1 < k; i++) {
            int32_t id = spm_token(v, esc + sym[i].off, sym[i].len + sym[i + 1].len);
            if (id >= 0 && (best == SIZE_MAX || rs_vocab_token_score(v, id) > best_score)) {
                best = i;
                best_score = rs_vocab_token_score(v, id);
            }
        }
        if (best == SIZE_MAX)
            break;
        sym[best].len += sym[best + 1].len;
        memmove(sym + best + 1, sym + best + 2, (k - best - 2) * sizeof(*sym));
        k--;
    }
    for (size_t i = 0; i < k; i++) {
        int32_t id = spm_token(v, esc + sym[i].off, sym[i].len);
        if (id >= 0) {
            ids[n++] = id;
            continue;
        }
        for (size_t j = 0; j < sym[i].len; j++) {
            char name[8];
            snprintf(name, sizeof(name), "<0x%02X>", (unsigned char)esc[sym[i].off + j]);
            ids[n++] = rs_vocab_find(v, name, 6);
        }
    }
    return n;
}

static int test_spm_equals_quadratic_reference(void)
{
    rs_vocab *v = load_vocab("tokenizer/ggml-vocab-llama-spm.gguf");
    if (v == NULL)
        return RS_TEST_SKIP;
    static char text[4096];
    static int32_t a[MAX_IDS], b[MAX_IDS];
    rs_tokenizer *t = NULL;
    RS_CHECK(rs_tokenizer_create(v, &t) == RS_OK);
    for (int it = 0; it < 300; it++) {
        size_t len = random_text(text, 24), na = 0;
        if (len == 0)
            continue;
        RS_CHECK(rs_tokenizer_encode(t, text, len, 0, a, MAX_IDS, &na) == RS_OK);
        size_t nb = spm_reference(v, text, len, b);
        RS_CHECK_MSG(na == nb && memcmp(a, b, na * sizeof(*a)) == 0, "iteration %d: [%.*s]", it,
                     (int)len, text);
    }
    rs_tokenizer_destroy(&t);
    rs_vocab_destroy(&v);
    return 0;
}

/* --- byte-level BPE reference: lowest-ranked pair by its GGUF merge string, O(n^2) ------ */

struct bpe_ref {
    const rs_vocab *v;
    const char **merges; /* sorted merge strings */
    int32_t *rank;       /* rank of merges[i] */
    size_t n_merges;
    int32_t *ids;
    size_t n_ids;
};

static const char **sort_base;
static int cmp_merge(const void *a, const void *b)
{
    return strcmp(sort_base[*(const int32_t *)a], sort_base[*(const int32_t *)b]);
}

/* Byte b in GPT-2's byte-level alphabet, as UTF-8. */
static size_t byte_char(unsigned b, char *out)
{
    unsigned cp = b;
    if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
        cp = 0x100;
        for (unsigned x = 0; x < b; x++)
            cp += !((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static int32_t merge_rank(const struct bpe_ref *r, const char *a, const char *b)
{
    char key[512];
    snprintf(key, sizeof(key), "%s %s", a, b);
    size_t lo = 0, hi = r->n_merges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(r->merges[mid], key);
        if (c == 0)
            return r->rank[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static rs_err bpe_ref_word(void *user, const char *w, size_t n)
{
    struct bpe_ref *r = user;
    static char sym[256][512];
    size_t k = 0;
    for (size_t i = 0; i < n && k < 256; i++)
        sym[k][byte_char((unsigned char)w[i], sym[k])] = '\0', k++;
    for (;;) {
        size_t best = SIZE_MAX;
        int32_t best_rank = 0;
        for (size_t i = 0; i + 1 < k; i++) {
            int32_t rk = merge_rank(r, sym[i], sym[i + 1]);
            if (rk >= 0 && (best == SIZE_MAX || rk < best_rank))
                best = i, best_rank = rk;
        }
        if (best == SIZE_MAX)
            break;
        size_t la = strlen(sym[best]), lb = strlen(sym[best + 1]);
        memcpy(sym[best] + la, sym[best + 1], lb + 1);
        memmove(sym + best + 1, sym + best + 2, (k - best - 2) * sizeof(sym[0]));
        k--;
    }
    for (size_t i = 0; i < k; i++)
        r->ids[r->n_ids++] = rs_vocab_find(r->v, sym[i], strlen(sym[i]));
    return RS_OK;
}

static int test_bpe_equals_quadratic_reference(void)
{
    char path[1024], err[512];
    if (rs_test_refdata("tokenizer/ggml-vocab-gpt-2.gguf", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    rs_gguf *g = NULL;
    rs_vocab *v = NULL;
    RS_CHECK(rs_gguf_open(path, &g, err, sizeof(err)) == RS_OK);
    RS_CHECK(rs_vocab_load(g, &v, err, sizeof(err)) == RS_OK);
    enum rs_gguf_type et;
    struct bpe_ref r = {v, NULL, NULL, 0, NULL, 0};
    RS_CHECK(rs_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &r.n_merges) == RS_OK);
    const char **strs = calloc(r.n_merges, sizeof(*strs));
    r.merges = calloc(r.n_merges, sizeof(*r.merges));
    r.rank = calloc(r.n_merges, sizeof(*r.rank));
    r.ids = calloc(MAX_IDS, sizeof(*r.ids));
    for (size_t i = 0; i < r.n_merges; i++) {
        struct rs_gguf_str s;
        RS_CHECK(rs_gguf_arr_str(g, "tokenizer.ggml.merges", i, &s) == RS_OK);
        strs[i] = strndup(s.ptr, s.len);
        r.rank[i] = (int32_t)i;
    }
    sort_base = strs;
    qsort(r.rank, r.n_merges, sizeof(*r.rank), cmp_merge);
    for (size_t i = 0; i < r.n_merges; i++)
        r.merges[i] = strs[r.rank[i]];
    rs_pretok *p = NULL;
    rs_pretok_state *st = NULL;
    rs_tokenizer *t = NULL;
    RS_CHECK(rs_pretok_create("gpt-2", RS_PRETOK_PCRE_ONLY, &p, err, sizeof(err)) == RS_OK);
    RS_CHECK(rs_pretok_state_create(p, &st) == RS_OK && rs_tokenizer_create(v, &t) == RS_OK);
    static char text[4096];
    static int32_t a[MAX_IDS];
    for (int it = 0; it < 300; it++) {
        size_t len = random_text(text, 30), na = 0;
        r.n_ids = 0;
        RS_CHECK(rs_pretok_split(p, st, text, len, bpe_ref_word, &r) == RS_OK);
        RS_CHECK(rs_tokenizer_encode(t, text, len, 0, a, MAX_IDS, &na) == RS_OK);
        RS_CHECK_MSG(na == r.n_ids && memcmp(a, r.ids, na * sizeof(*a)) == 0,
                     "iteration %d: [%.*s]", it, (int)len, text);
    }
    rs_tokenizer_destroy(&t);
    rs_pretok_state_destroy(&st);
    rs_pretok_destroy(&p);
    for (size_t i = 0; i < r.n_merges; i++)
        free((void *)strs[i]);
    free(strs);
    free(r.merges);
    free(r.rank);
    free(r.ids);
    rs_vocab_destroy(&v);
    rs_gguf_close(&g);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_round_trip_llama_spm),
    RS_TEST(test_round_trip_phi3),
    RS_TEST(test_round_trip_baichuan),
    RS_TEST(test_round_trip_gpt2),
    RS_TEST(test_round_trip_mpt),
    RS_TEST(test_round_trip_gpt_neox),
    RS_TEST(test_round_trip_falcon),
    RS_TEST(test_round_trip_deepseek_coder),
    RS_TEST(test_round_trip_byte_only_vocab),
    RS_TEST(test_spm_equals_quadratic_reference),
    RS_TEST(test_bpe_equals_quadratic_reference),
};
RS_TEST_MAIN(cases)

/* SPDX-License-Identifier: MIT */
/*
 * Incremental detokenizer: stories260K's published greedy text from its ids
 * (refdata README sections 6-7), token-by-token equals one-shot equals an
 * independent reference (concatenated pieces, repaired by a table-driven
 * maximal-subpart decoder written here), with the state copied through a
 * byte buffer between tokens as postprocd keeps it in shared memory; split
 * characters, ill-formed bytes, the BOS space rule, special tokens, errors.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/detok.h"
#include "common/vocab.h"
#include "tests/rs_test.h"

_Static_assert(sizeof(struct rs_detok) == 12, "detok state is a fixed 12-byte plain struct");

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

static char *read_file(const char *rel, size_t *len)
{
    char path[1024];
    if (rs_test_refdata(rel, path, sizeof(path)) == NULL)
        return NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *buf = malloc(1 << 20);
    *len = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (buf)
        buf[*len] = '\0';
    return buf;
}

/* Feeds ids one at a time, moving the state through a byte copy each step; returns the length. */
static size_t feed_stepwise(const rs_vocab *v, int32_t prev, unsigned flags, const int32_t *ids,
                            size_t n, char *out)
{
    unsigned char saved[sizeof(struct rs_detok)];
    struct rs_detok d;
    rs_detok_init(&d, v, prev, flags);
    memcpy(saved, &d, sizeof(d));
    size_t total = 0, step;
    char *tmp = malloc(rs_detok_max_out(v));
    for (size_t i = 0; i < n; i++) {
        struct rs_detok resumed;
        memcpy(&resumed, saved, sizeof(resumed)); /* as if another process picked it up */
        if (rs_detok_feed(v, &resumed, ids[i], tmp, rs_detok_max_out(v), &step) != RS_OK)
            return (size_t)-1;
        memcpy(out + total, tmp, step);
        total += step;
        memcpy(saved, &resumed, sizeof(resumed));
    }
    memcpy(&d, saved, sizeof(d));
    if (rs_detok_flush(v, &d, out + total, 3, &step) != RS_OK)
        return (size_t)-1;
    free(tmp);
    return total + step;
}

static int test_stories260k_reproduces_published_text(void)
{
    rs_vocab *v = load_vocab("stories260K.gguf");
    size_t text_len = 0, ids_len = 0;
    char *text = read_file("expected/stories260K.greedy-n256.txt", &text_len);
    char *ids_txt = read_file("expected/stories260K.greedy-n256.ids", &ids_len);
    if (v == NULL || text == NULL || ids_txt == NULL)
        return RS_TEST_SKIP;
    int32_t ids[300];
    size_t n = 0;
    ids[n++] = rs_vocab_bos(v); /* generation starts from BOS, README section 6 */
    for (char *p = ids_txt, *end; n < 300; p = end) {
        long x = strtol(p, &end, 10);
        if (end == p)
            break;
        ids[n++] = (int32_t)x;
    }
    RS_CHECK(n == 257 && text_len == 565);
    static char out[8192];
    size_t len = feed_stepwise(v, RS_VOCAB_NONE, 0, ids, n, out);
    RS_CHECK_MSG(len == text_len && memcmp(out, text, len) == 0, "got %zu bytes:\n%.*s", len,
                 (int)len, out);
    /* the same with BOS as the prompt (postprocd's case) and one-shot */
    len = feed_stepwise(v, rs_vocab_bos(v), 0, ids + 1, n - 1, out);
    RS_CHECK(len == text_len && memcmp(out, text, len) == 0);
    RS_CHECK(rs_detok_decode(v, ids, n, 0, out, sizeof(out), &len) == RS_OK);
    RS_CHECK(len == text_len && memcmp(out, text, len) == 0);
    free(text);
    free(ids_txt);
    rs_vocab_destroy(&v);
    return 0;
}

/* Reference UTF-8 repair from the Unicode table of well-formed sequences (3-7). */
static size_t ref_sanitize(const unsigned char *s, size_t n, char *out)
{
    size_t i = 0, o = 0;
    while (i < n) {
        unsigned char b = s[i];
        unsigned need = 0, lo = 0x80, hi = 0xBF;
        if (b < 0x80) {
            out[o++] = (char)s[i++];
            continue;
        }
        if (b >= 0xC2 && b <= 0xDF)
            need = 1;
        else if (b >= 0xE0 && b <= 0xEF)
            need = 2, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
        else if (b >= 0xF0 && b <= 0xF4)
            need = 3, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
        size_t k = 1;
        while (k <= need && i + k < n && s[i + k] >= (k == 1 ? lo : 0x80) &&
               s[i + k] <= (k == 1 ? hi : 0xBF))
            k++;
        if (need > 0 && k == need + 1) {
            memcpy(out + o, s + i, k);
            o += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
        }
        i += k;
    }
    return o;
}

/* Concatenated pieces, repaired; SentencePiece: U+2581 -> ' ', and the BOS space rule. */
static size_t reference(const rs_vocab *v, const int32_t *ids, size_t n, unsigned flags, char *out)
{
    static unsigned char raw[1 << 20];
    static char fixed[3 << 20];
    size_t r = 0, len;
    for (size_t i = 0; i < n; i++) {
        const char *p = rs_vocab_token_piece(v, ids[i], flags & RS_DETOK_SPECIAL, &len);
        memcpy(raw + r, p, len);
        r += len;
    }
    size_t f = ref_sanitize(raw, r, fixed), o = 0;
    int spm = rs_vocab_kind(v) == RS_VOCAB_SPM;
    for (size_t i = 0; i < f;) {
        if (spm && i + 3 <= f && memcmp(fixed + i, "\xE2\x96\x81", 3) == 0) {
            out[o++] = ' ';
            i += 3;
        } else {
            out[o++] = fixed[i++];
        }
    }
    if (n > 0 && ids[0] == rs_vocab_bos(v) && rs_vocab_add_space_prefix(v) && o > 0 &&
        out[0] == ' ')
        memmove(out, out + 1, --o);
    return o;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* Random ids: ordinary tokens, byte tokens spelling (or breaking) characters, specials. */
static size_t random_ids(const rs_vocab *v, int32_t *ids, size_t max)
{
    size_t n = 0;
    if (rnd(2))
        ids[n++] = rs_vocab_bos(v);
    int32_t byte0 = rs_vocab_find(v, "<0x00>", 6);
    while (n + 4 < max) {
        uint32_t kind = rnd(8);
        if (kind < 4 || byte0 < 0) {
            ids[n++] = (int32_t)rnd(rs_vocab_n_tokens(v));
        } else if (kind < 6) { /* a whole character as byte tokens, sometimes cut short */
            static const uint32_t cps[] = {0xE9, 0x20AC, 0x1F999, 0x2581, 0x4E2D, 0x10FFFF};
            char u[4] = {0};
            uint32_t cp = cps[rnd(6)];
            size_t k = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
            if (k == 2)
                u[0] = (char)(0xC0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3F));
            else if (k == 3)
                u[0] = (char)(0xE0 | (cp >> 12)), u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
                u[2] = (char)(0x80 | (cp & 0x3F));
            else
                u[0] = (char)(0xF0 | (cp >> 18)), u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
                u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[3] = (char)(0x80 | (cp & 0x3F));
            size_t use = rnd(4) ? k : 1 + rnd((uint32_t)k);
            for (size_t j = 0; j < use; j++)
                ids[n++] = byte0 + (uint8_t)u[j];
        } else if (kind == 6) {
            ids[n++] = byte0 + (int32_t)rnd(256);
        } else {
            ids[n++] = rnd(2) ? rs_vocab_eos(v) : rs_vocab_unk(v) >= 0 ? rs_vocab_unk(v) : 0;
        }
    }
    return n;
}

static int incremental_vs_one_shot(const char *rel, unsigned flags, int iterations)
{
    rs_vocab *v = load_vocab(rel);
    if (v == NULL)
        return RS_TEST_SKIP;
    static int32_t ids[512];
    static char a[1 << 16], b[1 << 16], c[1 << 16];
    for (int it = 0; it < iterations; it++) {
        size_t n = random_ids(v, ids, 2 + rnd(200));
        size_t la = feed_stepwise(v, RS_VOCAB_NONE, flags, ids, n, a), lb = 0;
        RS_CHECK(la != (size_t)-1);
        RS_CHECK(rs_detok_decode(v, ids, n, flags, b, sizeof(b), &lb) == RS_OK);
        size_t lc = reference(v, ids, n, flags, c);
        RS_CHECK_MSG(la == lb && memcmp(a, b, la) == 0, "stepwise != one-shot (iteration %d)", it);
        RS_CHECK_MSG(la == lc && memcmp(a, c, la) == 0,
                     "detok != reference (iteration %d):\n"
                     "got  %.*s\nwant %.*s",
                     it, (int)la, a, (int)lc, c);
    }
    rs_vocab_destroy(&v);
    return 0;
}

static int test_incremental_equals_one_shot_llama(void)
{
    return incremental_vs_one_shot("tokenizer/ggml-vocab-llama-spm.gguf", 0, 300);
}

static int test_incremental_equals_one_shot_llama_special(void)
{
    return incremental_vs_one_shot("tokenizer/ggml-vocab-llama-spm.gguf", RS_DETOK_SPECIAL, 100);
}

static int test_incremental_equals_one_shot_gpt2(void)
{
    return incremental_vs_one_shot("tokenizer/ggml-vocab-gpt-2.gguf", 0, 300);
}

static int test_incremental_equals_one_shot_deepseek_coder(void)
{
    return incremental_vs_one_shot("tokenizer/ggml-vocab-deepseek-coder.gguf", RS_DETOK_SPECIAL,
                                   100);
}

/* Feeds one token and checks the delta. */
static int expect_feed(const rs_vocab *v, struct rs_detok *d, int32_t id, const char *want)
{
    char out[1024];
    size_t n = 99;
    RS_CHECK(rs_detok_feed(v, d, id, out, sizeof(out), &n) == RS_OK);
    RS_CHECK_MSG(n == strlen(want) && memcmp(out, want, n) == 0,
                 "token %d: got \"%.*s\" want \"%s\"", id, (int)n, out, want);
    return 0;
}

static int test_split_character_is_held_until_complete(void)
{
    rs_vocab *v = load_vocab("tokenizer/ggml-vocab-llama-spm.gguf");
    if (v == NULL)
        return RS_TEST_SKIP;
    struct rs_detok d;
    int32_t b0 = rs_vocab_find(v, "<0x00>", 6);
    rs_detok_init(&d, v, RS_VOCAB_NONE, 0);
    RS_CHECK(expect_feed(v, &d, b0 + 0xE2, "") == 0);
    RS_CHECK(d.n_pending == 1);
    RS_CHECK(expect_feed(v, &d, rs_vocab_eos(v), "") == 0); /* empty control piece: still waiting */
    RS_CHECK(expect_feed(v, &d, b0 + 0x82, "") == 0);
    RS_CHECK(expect_feed(v, &d, b0 + 0xAC, "\xE2\x82\xAC") == 0);
    RS_CHECK(d.n_pending == 0 && d.n_tokens == 4);
    rs_vocab_destroy(&v);
    return 0;
}

static int test_ill_formed_bytes_become_replacement(void)
{
    rs_vocab *v = load_vocab("tokenizer/ggml-vocab-llama-spm.gguf");
    if (v == NULL)
        return RS_TEST_SKIP;
    struct rs_detok d;
    char out[16];
    size_t n;
    int32_t b0 = rs_vocab_find(v, "<0x00>", 6);
    rs_detok_init(&d, v, RS_VOCAB_NONE, 0);
    RS_CHECK(expect_feed(v, &d, b0 + 0xFF, "\xEF\xBF\xBD") == 0);
    RS_CHECK(expect_feed(v, &d, b0 + 0xE2, "") == 0);
    RS_CHECK(expect_feed(v, &d, b0 + 'A',
                         "\xEF\xBF\xBD"
                         "A") == 0);
    RS_CHECK(expect_feed(v, &d, b0 + 0xF0, "") == 0);
    RS_CHECK(expect_feed(v, &d, b0 + 0x9F, "") == 0);
    RS_CHECK(rs_detok_flush(v, &d, out, sizeof(out), &n) == RS_OK);
    RS_CHECK(n == 3 && memcmp(out, "\xEF\xBF\xBD", 3) == 0 && d.n_pending == 0);
    rs_vocab_destroy(&v);
    return 0;
}

static int test_space_after_bos_is_dropped(void)
{
    rs_vocab *v = load_vocab("tokenizer/ggml-vocab-llama-spm.gguf");
    if (v == NULL)
        return RS_TEST_SKIP;
    struct rs_detok d;
    int32_t hello = rs_vocab_find(v, "\xE2\x96\x81Hello", 8);
    RS_CHECK(hello == 15043);
    rs_detok_init(&d, v, RS_VOCAB_NONE, 0);
    RS_CHECK(expect_feed(v, &d, rs_vocab_bos(v), "") == 0);
    RS_CHECK(expect_feed(v, &d, hello, "Hello") == 0);
    RS_CHECK(expect_feed(v, &d, hello, " Hello") == 0);
    rs_detok_init(&d, v, 3186 /* a prompt ending in "▁world" */, 0);
    RS_CHECK(expect_feed(v, &d, hello, " Hello") == 0);
    rs_detok_init(&d, v, rs_vocab_bos(v), 0);
    RS_CHECK(expect_feed(v, &d, 29871 /* "▁" */, "") == 0);
    RS_CHECK(expect_feed(v, &d, hello, " Hello") == 0);
    rs_vocab_destroy(&v);
    v = load_vocab("tokenizer/ggml-vocab-gpt-2.gguf");
    if (v == NULL)
        return RS_TEST_SKIP;
    rs_detok_init(&d, v, rs_vocab_bos(v), 0); /* byte-level BPE adds no space: nothing to drop */
    RS_CHECK(expect_feed(v, &d, rs_vocab_find(v, "\xC4\xA0world", 7), " world") == 0);
    rs_vocab_destroy(&v);
    return 0;
}

static int test_special_tokens_shown_only_on_request(void)
{
    rs_vocab *v = load_vocab("tokenizer/ggml-vocab-llama-spm.gguf");
    if (v == NULL)
        return RS_TEST_SKIP;
    struct rs_detok d;
    rs_detok_init(&d, v, RS_VOCAB_NONE, 0);
    RS_CHECK(expect_feed(v, &d, rs_vocab_eos(v), "") == 0);
    rs_detok_init(&d, v, RS_VOCAB_NONE, RS_DETOK_SPECIAL);
    RS_CHECK(expect_feed(v, &d, rs_vocab_eos(v), "</s>") == 0);
    rs_vocab_destroy(&v);
    return 0;
}

static int test_errors_leave_state_unchanged(void)
{
    rs_vocab *v = load_vocab("tokenizer/ggml-vocab-llama-spm.gguf");
    if (v == NULL)
        return RS_TEST_SKIP;
    struct rs_detok d, before;
    char out[64];
    size_t n;
    int32_t b0 = rs_vocab_find(v, "<0x00>", 6);
    rs_detok_init(&d, v, RS_VOCAB_NONE, 0);
    RS_CHECK(expect_feed(v, &d, b0 + 0xE2, "") == 0);
    before = d;
    RS_CHECK(rs_detok_feed(v, &d, (int32_t)rs_vocab_n_tokens(v), out, sizeof(out), &n) ==
             RS_EINVAL);
    RS_CHECK(rs_detok_feed(v, &d, -5, out, sizeof(out), &n) == RS_EINVAL);
    RS_CHECK(rs_detok_feed(v, &d, 15043, out, 2, &n) == RS_ERANGE);
    RS_CHECK(memcmp(&d, &before, sizeof(d)) == 0);
    size_t need;
    int32_t ids[2] = {15043, 3186};
    RS_CHECK(rs_detok_decode(v, ids, 2, 0, out, 3, &need) == RS_ERANGE && need == 12);
    RS_CHECK(memcmp(out, " He", 3) == 0);
    rs_vocab_destroy(&v);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_stories260k_reproduces_published_text),
    RS_TEST(test_incremental_equals_one_shot_llama),
    RS_TEST(test_incremental_equals_one_shot_llama_special),
    RS_TEST(test_incremental_equals_one_shot_gpt2),
    RS_TEST(test_incremental_equals_one_shot_deepseek_coder),
    RS_TEST(test_split_character_is_held_until_complete),
    RS_TEST(test_ill_formed_bytes_become_replacement),
    RS_TEST(test_space_after_bos_is_dropped),
    RS_TEST(test_special_tokens_shown_only_on_request),
    RS_TEST(test_errors_leave_state_unchanged),
};
RS_TEST_MAIN(cases)

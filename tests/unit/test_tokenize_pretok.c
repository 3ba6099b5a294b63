/* SPDX-License-Identifier: MIT */
/*
 * Pre-tokenizers and Unicode classes: every hand-written matcher agrees with
 * the PCRE2 version of its regex on random text (differential, per family),
 * known splits worked out by hand from the regexes, invalid UTF-8 handling,
 * and the generated Unicode tables.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/pretok.h"
#include "common/unicode.h"
#include "common/utf8.h"
#include "tests/rs_test.h"

#define MAX_WORDS 4096

struct words {
    size_t n;
    size_t off[MAX_WORDS], len[MAX_WORDS];
    const char *base;
};

static rs_err collect(void *user, const char *w, size_t len)
{
    struct words *ws = user;
    if (ws->n == MAX_WORDS)
        return RS_EFULL;
    ws->off[ws->n] = (size_t)(w - ws->base);
    ws->len[ws->n++] = len;
    return RS_OK;
}

static int split(const rs_pretok *p, const char *text, size_t len, struct words *ws)
{
    rs_pretok_state *st = NULL;
    if (rs_pretok_state_create(p, &st) != RS_OK)
        return -1;
    ws->n = 0;
    ws->base = text;
    rs_err rc = rs_pretok_split(p, st, text, len, collect, ws);
    rs_pretok_state_destroy(&st);
    return rc == RS_OK ? 0 : -1;
}

/* Text pieces the random strings are drawn from: every class the regexes distinguish. */
static const char *const ALPHABET[] = {
    "a",
    "Z",
    "hello",
    "x",
    "7",
    "42",
    "0",
    ".",
    ",",
    "!",
    "?",
    "'",
    "-",
    "_",
    "\"",
    "$",
    "+",
    "<",
    "=",
    ">",
    "^",
    "~",
    "|",
    "`",
    "(",
    ")",
    "/",
    "\\",
    "@",
    "#",
    " ",
    " ",
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "\r",
    "\v",
    "\f",
    "\xC2\x85",
    "\xC2\xA0",
    "\xE1\x9A\x80",
    "\xE2\x80\x80",
    "\xE2\x80\x8A",
    "\xE2\x80\xA8",
    "\xE3\x80\x80",
    "\xE2\x80\x8B",
    "\xC3\xA9",
    "\xC3\x9F",
    "\xD0\x96",
    "\xCE\xB1",
    "\xC7\x85",
    "\xE1\xBD\x97",
    "\xE4\xB8\xAD",
    "\xE8\xAA\x9E",
    "\xED\x95\x9C",
    "\xE3\x82\xAB",
    "\xE3\x81\x81",
    "\xD9\xA3",
    "\xEF\xBC\x93",
    "\xC2\xB2",
    "\xE2\x85\xAB",
    "\xCC\x81",
    "\xE0\xA4\x83",
    "\xE2\x82\xAC",
    "\xC2\xA9",
    "\xF0\x9F\x98\x80",
    "\xF0\x9F\xA6\x99",
    "\xE2\x80\x8D",
    "'s",
    "'S",
    "'ll",
    "'LL",
    "'re",
    "'Ve",
    "'d",
    "'t",
    "'m",
    "\xE2\x96\x81",
    "\xEF\xBC\x81",
    "\xEF\xBC\x8C",
    "\xE3\x80\x82",
    "\xE2\x80\xA6",
    "\xE3\x80\x81",
    "\xE0\xA5\xA4",
    "\xDB\x94",
    "\xD8\x8C",
    "\xE2\x80\x98",
    "\xE2\x80\x9F",
    "\xC2\xB5",
    "\xE2\x84\xAA",
    "\xC5\xBF",
    "\xE0\xA0\x80",
    "\xEA\xB0\x80",
    "\xE9\xBE\xA5",
    "\xEE\x80\x80",
    "\xF0\x90\x90\x80",
    "\xF0\x9E\xA4\x80",
};
#define N_ALPHABET (sizeof(ALPHABET) / sizeof(ALPHABET[0]))

static uint64_t rng = 0x243F6A8885A308D3ull;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static size_t random_text(char *buf, size_t cap)
{
    size_t n = 0, units = next_rand() % 48;
    for (size_t u = 0; u < units; u++) {
        const char *piece = ALPHABET[next_rand() % N_ALPHABET];
        size_t l = strlen(piece);
        if (n + l >= cap)
            break;
        memcpy(buf + n, piece, l);
        n += l;
    }
    return n;
}

static int same_split(const struct words *a, const struct words *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->off[i] != b->off[i] || a->len[i] != b->len[i])
            return 0;
    return 1;
}

static void print_split(const char *tag, const struct words *w)
{
    fprintf(stderr, "  %s:", tag);
    for (size_t i = 0; i < w->n; i++)
        fprintf(stderr, " [%.*s]", (int)w->len[i], w->base + w->off[i]);
    fputc('\n', stderr);
}

/* Hand-written vs PCRE2-only splits of random text for the family named `name`. */
static int differential(const char *name, int iterations)
{
    char err[256], text[1024];
    rs_pretok *hand = NULL, *pcre = NULL;
    RS_CHECK_MSG(rs_pretok_create(name, 0, &hand, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK_MSG(rs_pretok_create(name, RS_PRETOK_PCRE_ONLY, &pcre, err, sizeof(err)) == RS_OK,
                 "%s", err);
    size_t n_hand = 0;
    for (size_t i = 0; i < rs_pretok_n_steps(hand); i++)
        n_hand += (size_t)rs_pretok_step_is_hand(hand, i);
    RS_CHECK_MSG(n_hand > 0, "family %s has no hand-written step to compare", name);
    static struct words a, b;
    for (int it = 0; it < iterations; it++) {
        size_t len = random_text(text, sizeof(text));
        RS_CHECK(split(hand, text, len, &a) == 0 && split(pcre, text, len, &b) == 0);
        if (!same_split(&a, &b)) {
            fprintf(stderr, "%s: hand and PCRE2 differ on \"%.*s\"\n", name, (int)len, text);
            print_split("hand", &a);
            print_split("pcre", &b);
            return 1;
        }
    }
    rs_pretok_destroy(&hand);
    rs_pretok_destroy(&pcre);
    return 0;
}

static int test_differential_gpt2(void)
{
    return differential("gpt-2", 4000);
}
static int test_differential_llama3(void)
{
    return differential("llama-bpe", 4000);
}
static int test_differential_qwen2(void)
{
    return differential("qwen2", 4000);
}
static int test_differential_starcoder(void)
{
    return differential("starcoder", 3000);
}
static int test_differential_default(void)
{
    return differential("default", 3000);
}
static int test_differential_falcon(void)
{
    return differential("falcon", 3000);
}
static int test_differential_deepseek_coder(void)
{
    return differential("deepseek-coder", 3000);
}
static int test_differential_deepseek_llm(void)
{
    return differential("deepseek-llm", 2000);
}
static int test_differential_deepseek_v3(void)
{
    return differential("deepseek-v3", 2000);
}
static int test_differential_dbrx(void)
{
    return differential("dbrx", 1000);
}
static int test_differential_viking(void)
{
    return differential("viking", 1000);
}

/* Splits `text` with family `name` (both implementations) and compares to words separated by '|'.
 */
static int expect_split(const char *name, const char *text, const char *expected)
{
    char err[256];
    static struct words w;
    for (int pcre_only = 0; pcre_only <= 1; pcre_only++) {
        rs_pretok *p = NULL;
        RS_CHECK_MSG(rs_pretok_create(name, pcre_only ? RS_PRETOK_PCRE_ONLY : 0, &p, err,
                                      sizeof(err)) == RS_OK,
                     "%s", err);
        RS_CHECK(split(p, text, strlen(text), &w) == 0);
        rs_pretok_destroy(&p);
        char joined[1024];
        size_t o = 0;
        for (size_t i = 0; i < w.n && o + w.len[i] + 1 < sizeof(joined); i++) {
            if (i)
                joined[o++] = '|';
            memcpy(joined + o, text + w.off[i], w.len[i]);
            o += w.len[i];
        }
        joined[o] = '\0';
        RS_CHECK_MSG(strcmp(joined, expected) == 0, "%s (%s): got \"%s\" want \"%s\"", name,
                     pcre_only ? "pcre" : "hand", joined, expected);
    }
    return 0;
}

static int test_gpt2_known_splits(void)
{
    RS_CHECK(expect_split("gpt-2", "Hello world's 123  x", "Hello| world|'s| 123| | x") == 0);
    RS_CHECK(expect_split("gpt-2", "a\tb", "a|\t|b") == 0);
    RS_CHECK(expect_split("gpt-2", "x  \n", "x|  \n") == 0);
    RS_CHECK(expect_split("gpt-2", "I'LL go!!", "I|'|LL| go|!!") == 0);
    return 0;
}

static int test_llama3_known_splits(void)
{
    RS_CHECK(expect_split("llama-bpe", "Hello, y'all! 12345\n\n  x",
                          "Hello|,| y|'all|!| |123|45|\n\n| | x") == 0);
    RS_CHECK(expect_split("llama-bpe", "I'LL (go)\tnow", "I|'LL| (|go|)|\tnow") == 0);
    RS_CHECK(expect_split("qwen2", "x 2024", "x| |2|0|2|4") == 0);
    return 0;
}

static int test_multi_step_known_splits(void)
{
    /* falcon: punctuation runs first, then GPT-2, then groups of three ASCII digits. */
    RS_CHECK(expect_split("falcon", "a+b 12345!?", "a|+|b| |123|45|!?") == 0);
    /* starcoder: every digit alone, then GPT-2 on the rest. */
    RS_CHECK(expect_split("starcoder", "x12 y", "x|1|2| y") == 0);
    return 0;
}

/* deepseek-llm's \s+$ step: found by scanning back from the end, so a long run of spaces
 * that does not end the text is not retried from every start (quadratic in PCRE2). */
static int test_whitespace_at_end_step(void)
{
    RS_CHECK(expect_split("deepseek-llm", "ab \t\xC2\xA0 ", "ab| \t\xC2\xA0 ") == 0);
    RS_CHECK(expect_split("deepseek-llm", "ab  .", "ab| | .") == 0);
    size_t n = 200000;
    char *text = malloc(n + 2);
    memset(text, ' ', n);
    memcpy(text + n, "1", 2);
    char err[256];
    rs_pretok *p = NULL;
    static struct words w;
    RS_CHECK_MSG(rs_pretok_create("deepseek-llm", 0, &p, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK(split(p, text, n + 1, &w) == 0);
    RS_CHECK(w.n == 2 && w.len[0] == n && w.len[1] == 1);
    rs_pretok_destroy(&p);
    free(text);
    return 0;
}

static int test_invalid_utf8_is_its_own_word(void)
{
    static struct words w;
    char err[256];
    rs_pretok *p = NULL;
    RS_CHECK_MSG(rs_pretok_create("llama-bpe", 0, &p, err, sizeof(err)) == RS_OK, "%s", err);
    const char text[] = "ab\xFF\xFE cd\xE2\x82";
    RS_CHECK(split(p, text, sizeof(text) - 1, &w) == 0);
    RS_CHECK(w.n == 4);
    RS_CHECK(w.len[0] == 2 && w.len[1] == 2 && w.len[2] == 3 && w.len[3] == 2);
    rs_pretok_destroy(&p);
    return 0;
}

static int test_words_concatenate_to_input(void)
{
    static struct words w;
    char err[256], text[1024];
    const char *names[] = {"gpt-2",     "llama-bpe", "deepseek-llm", "deepseek-coder",
                           "poro-chat", "tekken",    "deepseek-v3"};
    for (size_t f = 0; f < sizeof(names) / sizeof(names[0]); f++) {
        rs_pretok *p = NULL;
        RS_CHECK_MSG(rs_pretok_create(names[f], 0, &p, err, sizeof(err)) == RS_OK, "%s", err);
        for (int it = 0; it < 300; it++) {
            size_t len = random_text(text, sizeof(text) - 8);
            if (it % 3 == 0) /* sprinkle invalid bytes */
                text[len++] = (char)(0x80 + next_rand() % 0x80);
            RS_CHECK(split(p, text, len, &w) == 0);
            size_t pos = 0;
            for (size_t i = 0; i < w.n; i++) {
                RS_CHECK(w.off[i] == pos && w.len[i] > 0);
                pos += w.len[i];
            }
            RS_CHECK(pos == len);
        }
        rs_pretok_destroy(&p);
    }
    return 0;
}

static int test_unknown_name_is_a_clear_error(void)
{
    char err[2048];
    rs_pretok *p = NULL;
    RS_CHECK(rs_pretok_create("no-such-pre", 0, &p, err, sizeof(err)) == RS_EUNSUPPORTED);
    RS_CHECK(p == NULL);
    RS_CHECK(strstr(err, "no-such-pre") != NULL && strstr(err, "llama-bpe") != NULL);
    return 0;
}

static int test_family_traits(void)
{
    char err[256];
    rs_pretok *p = NULL;
    RS_CHECK(rs_pretok_create("llama-bpe", 0, &p, err, sizeof(err)) == RS_OK);
    RS_CHECK(strcmp(rs_pretok_family(p), "llama3") == 0);
    RS_CHECK(rs_pretok_traits(p) == (RS_PRETOK_IGNORE_MERGES | RS_PRETOK_ADD_BOS));
    rs_pretok_destroy(&p);
    RS_CHECK(rs_pretok_create("command-r", 0, &p, err, sizeof(err)) == RS_OK);
    RS_CHECK(strcmp(rs_pretok_family(p), "starcoder") == 0 && rs_pretok_traits(p) == 0);
    rs_pretok_destroy(&p);
    return 0;
}

/* Flags of cp straight from the generated runs (binary search), independent of unicode.c. */
static uint8_t flags_from_runs(uint32_t cp)
{
    size_t lo = 0, hi = rs_unicode_n_runs;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if ((rs_unicode_runs[mid] >> 8) <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return (uint8_t)(rs_unicode_runs[lo] & 0xff);
}

static int test_unicode_tables_agree_with_runs(void)
{
    for (uint32_t cp = 0; cp < 0x110000; cp += (cp < 0x30000 ? 1 : 97))
        RS_CHECK_MSG(rs_unicode_flags(cp) == flags_from_runs(cp), "U+%04X", (unsigned)cp);
    RS_CHECK(rs_unicode_flags(0x110000) == 0);
    return 0;
}

static int test_unicode_known_classes(void)
{
    RS_CHECK(rs_unicode_flags('A') == RS_UNICODE_LETTER);
    RS_CHECK(rs_unicode_flags(' ') == (RS_UNICODE_SEPARATOR | RS_UNICODE_WHITESPACE));
    RS_CHECK(rs_unicode_flags(0x85) == (RS_UNICODE_OTHER | RS_UNICODE_WHITESPACE));
    RS_CHECK(rs_unicode_flags(0x3000) == (RS_UNICODE_SEPARATOR | RS_UNICODE_WHITESPACE));
    RS_CHECK(rs_unicode_flags(0x0663) == RS_UNICODE_NUMBER); /* Arabic-Indic three */
    RS_CHECK(rs_unicode_flags(0x216B) == RS_UNICODE_NUMBER); /* Roman numeral twelve (Nl) */
    RS_CHECK(rs_unicode_flags(0x0301) == RS_UNICODE_MARK);
    RS_CHECK(rs_unicode_flags(0x1F600) == RS_UNICODE_SYMBOL);
    RS_CHECK(rs_unicode_flags(0x4E2D) == RS_UNICODE_LETTER);
    RS_CHECK(rs_unicode_flags(0x200B) == RS_UNICODE_OTHER); /* zero width space is Cf */
    RS_CHECK(rs_unicode_flags(0x2581) == RS_UNICODE_SYMBOL);
    RS_CHECK(strcmp(rs_unicode_data_version, "14.0.0") == 0);
    return 0;
}

static int test_utf8_maximal_subparts(void)
{
    /* Each maximal ill-formed subpart becomes one U+FFFD (Unicode 14, table 3-8). */
    const char in[] = "a\xF0\x80\x80"
                      "b\xE2\x82"
                      "c\xED\xA0\x80"
                      "d\xF4\x90";
    char out[3 * sizeof(in)];
    size_t n = rs_utf8_sanitize(in, sizeof(in) - 1, out);
    const char want[] = "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                        "b\xEF\xBF\xBD"
                        "c\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                        "d\xEF\xBF\xBD\xEF\xBF\xBD";
    RS_CHECK(n == sizeof(want) - 1 && memcmp(out, want, n) == 0);
    RS_CHECK(rs_utf8_incomplete_tail("ab\xE2\x82", 4) == 2);
    RS_CHECK(rs_utf8_incomplete_tail("ab\xF0\x9F\x98", 5) == 3);
    RS_CHECK(rs_utf8_incomplete_tail("ab\xE2\x82\xAC", 5) == 0);
    RS_CHECK(rs_utf8_incomplete_tail("ab\x82", 3) == 0);
    RS_CHECK(rs_utf8_valid("\xF0\x9F\xA6\x99.cpp", 8));
    RS_CHECK(!rs_utf8_valid("\xC0\x80", 2));
    char enc[4];
    RS_CHECK(rs_utf8_encode(0x20AC, enc) == 3 && memcmp(enc, "\xE2\x82\xAC", 3) == 0);
    RS_CHECK(rs_utf8_encode(0x1F999, enc) == 4 && memcmp(enc, "\xF0\x9F\xA6\x99", 4) == 0);
    RS_CHECK(rs_utf8_encode(0xD800, enc) == 0 && rs_utf8_encode(0x110000, enc) == 0);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_differential_gpt2),
    RS_TEST(test_differential_llama3),
    RS_TEST(test_differential_qwen2),
    RS_TEST(test_differential_starcoder),
    RS_TEST(test_differential_default),
    RS_TEST(test_differential_falcon),
    RS_TEST(test_differential_deepseek_coder),
    RS_TEST(test_differential_deepseek_llm),
    RS_TEST(test_differential_deepseek_v3),
    RS_TEST(test_differential_dbrx),
    RS_TEST(test_differential_viking),
    RS_TEST(test_gpt2_known_splits),
    RS_TEST(test_llama3_known_splits),
    RS_TEST(test_multi_step_known_splits),
    RS_TEST(test_whitespace_at_end_step),
    RS_TEST(test_invalid_utf8_is_its_own_word),
    RS_TEST(test_words_concatenate_to_input),
    RS_TEST(test_unknown_name_is_a_clear_error),
    RS_TEST(test_family_traits),
    RS_TEST(test_unicode_tables_agree_with_runs),
    RS_TEST(test_unicode_known_classes),
    RS_TEST(test_utf8_maximal_subparts),
};
RS_TEST_MAIN(cases)

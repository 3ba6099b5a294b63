/* SPDX-License-Identifier: MIT */
/*
 * Regular expression constraints against PCRE2 as the independent oracle: for
 * a set of patterns in the supported subset, on random strings (and on
 * strings the constrained walk itself produced), the matcher accepts a string
 * exactly when PCRE2 finds an anchored complete or partial match (so both the
 * language and its prefixes agree), and ends exactly on complete matches.
 * Generation on the gpt-2 vocab yields full matches. Malformed and unsupported
 * patterns are refused naming the byte offset.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "tests/rs_test.h"
#include "tests/unit/grammar_testutil.h"

struct re_case {
    const char *re;
    const char *alphabet; /* UTF-8 characters random strings are made of */
    const char *example;  /* a full match random strings rarely hit, or NULL */
};

/* Alphabets avoid characters the two dialects treat apart on purpose (\r for '.', Unicode
 * letters and digits for \W and \D, which this subset keeps narrower than PCRE2's). */
static const struct re_case re_cases[] = {
    {"a|b", "abc", NULL},
    {"(ab)*c", "abc", NULL},
    {"[a-c]{2,3}", "abcd", NULL},
    {"x+y?z*", "xyz", NULL},
    {"(?:foo|bar)+", "fobar", NULL},
    {"[^abc]", "abcd\xc3\xa9\xe6\x97\xa5", NULL},
    {"\\d{1,3}(\\.\\d+)?", "019.a", NULL},
    {"[A-Za-z_][A-Za-z0-9_]*", "aZ_9-", NULL},
    {"(a|ab)(c|bcd)", "abcd", NULL},
    {"\xc3\xa9+|\xe6\x97\xa5\xe6\x9c\xac", "\xc3\xa9\xe6\x97\xa5\xe6\x9c\xac\x65", NULL},
    {"[\\u00e0-\\u00ff]{2}", "\xc3\xa0\xc3\xbf\xc3\x9f\x61", NULL},
    {"a.{2}b", "ab\n\xe2\x82\xac", NULL},
    {"\\w+@\\w+\\.com", "ab@.com", "a_1@b.com"},
    {"(x{2}){2,}", "xy", NULL},
    {"[-a]+", "-ab", NULL},
    {"[a\\-z]", "a-zb", NULL},
    {"\\$\\^\\.\\*", "$^.*a", NULL},
    {"(?<year>\\d{4})-\\d{2}", "12-a", NULL},
    {"[^\\d\\s]+", "a1 \t\xe2\x82\xac", NULL},
    {"\\S\\W", "a !\xe2\x82\xac", NULL},
    {"^abc$", "abc", NULL},
    {"a{0}b", "ab", NULL},
    {"(|a)b", "ab", NULL},
    {"a??b*?", "ab", NULL},
    {"\\x41\\u00e9\\u{1F600}", "A\xc3\xa9\xf0\x9f\x98\x80", NULL},
    {"[\\t\\n\\f\\v]+\\0?", "\t\n\f\va", NULL},
    {"(a|b)*abb", "ab", NULL},
};
#define N_RE (sizeof(re_cases) / sizeof(re_cases[0]))

struct oracle {
    pcre2_code *code;
    pcre2_match_data *md;
};

static int oracle_open(struct oracle *o, const char *re)
{
    int ec;
    PCRE2_SIZE off;
    char wrapped[1024]; /* anchored at both ends: \z, since PCRE2 refuses ENDANCHORED when
                           partial matching */
    snprintf(wrapped, sizeof(wrapped), "(?:%s)\\z", re);
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    pcre2_set_compile_extra_options(cc, PCRE2_EXTRA_ALT_BSUX); /* \uHHHH, \u{H..} as ECMA */
    o->code = pcre2_compile((PCRE2_SPTR)wrapped, PCRE2_ZERO_TERMINATED,
                            PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ALT_BSUX, &ec, &off, cc);
    pcre2_compile_context_free(cc);
    if (o->code == NULL)
        return -1;
    o->md = pcre2_match_data_create_from_pattern(o->code, NULL);
    return 0;
}

static void oracle_close(struct oracle *o)
{
    pcre2_match_data_free(o->md);
    pcre2_code_free(o->code);
}

/* 2: complete match; 1: a prefix of one; 0: neither. */
static int oracle_match(struct oracle *o, const char *s, size_t n)
{
    if (pcre2_match(o->code, (PCRE2_SPTR)s, n, 0, 0, o->md, NULL) >= 0)
        return 2;
    if (n == 0) /* PCRE2 reports no partial match on an empty subject; every pattern here
                   matches something, so "" is a prefix */
        return 1;
    int rc = pcre2_match(o->code, (PCRE2_SPTR)s, n, 0, PCRE2_PARTIAL_HARD, o->md, NULL);
    return rc >= 0 || rc == PCRE2_ERROR_PARTIAL;
}

/* What the matcher says about s: 2 complete, 1 prefix, 0 refused. */
static int engine_match(rs_grammar_matcher *m, const char *s, size_t n)
{
    rs_grammar_matcher_reset(m);
    if (rs_grammar_matcher_accept_bytes(m, s, n) != RS_OK)
        return 0;
    return rs_grammar_matcher_can_end(m) ? 2 : 1;
}

/* A random string of up to max_chars characters of alphabet a. */
static size_t random_string(const char *a, uint64_t *st, char *out, size_t max_chars)
{
    uint32_t starts[32];
    size_t n_chars = 0, len = strlen(a), k = 0;
    for (size_t i = 0; i < len; n_chars++) {
        starts[n_chars] = (uint32_t)i;
        uint32_t cp;
        i += rs_utf8_next(a + i, len - i, &cp);
    }
    starts[n_chars] = (uint32_t)len;
    size_t want = gt_rand(st) % (max_chars + 1);
    for (size_t c = 0; c < want; c++) {
        size_t j = gt_rand(st) % n_chars;
        memcpy(out + k, a + starts[j], starts[j + 1] - starts[j]);
        k += starts[j + 1] - starts[j];
    }
    return k;
}

static int test_regex_language_and_prefixes_match_pcre2(void)
{
    struct gt_vocab x;
    int rc = gt_vocab_load("stories260K.gguf", &x);
    if (rc)
        return rc;
    uint64_t st = 12345;
    for (size_t i = 0; i < N_RE; i++) {
        struct oracle o;
        RS_CHECK_MSG(oracle_open(&o, re_cases[i].re) == 0, "PCRE2 refused %s", re_cases[i].re);
        rs_grammar *g = gt_compile(&x, RS_CONSTRAINT_REGEX, re_cases[i].re, RS_GRAMMAR_LAZY);
        RS_CHECK(g != NULL);
        rs_grammar_matcher *m;
        RS_CHECK(rs_grammar_matcher_create(g, &m) == RS_OK);
        int n_full = 0;
        for (int k = 0; k < 3000; k++) {
            char s[128];
            size_t n = random_string(re_cases[i].alphabet, &st, s, 8);
            int want = oracle_match(&o, s, n), got = engine_match(m, s, n);
            RS_CHECK_MSG(got == want, "/%s/ on '%.*s': engine %d, PCRE2 %d", re_cases[i].re,
                         (int)n, s, got, want);
            n_full += want == 2;
        }
        /* positives from the constrained walk itself (byte tokens cover every byte) */
        for (int k = 0; k < 20; k++) {
            rs_grammar_matcher_reset(m);
            struct gt_walk w;
            RS_CHECK(gt_walk_run(m, &x, (uint64_t)k + 1, 24, 0.3, 0, &w) == 0);
            size_t n = w.len - rs_utf8_incomplete_tail(w.text, w.len);
            int want = oracle_match(&o, w.text, n);
            RS_CHECK_MSG(want >= 1 && (!w.ended || want == 2), "/%s/: walk output '%s' (ended "
                         "%d) is %d for PCRE2", re_cases[i].re, w.text, w.ended, want);
            n_full += w.ended;
        }
        if (re_cases[i].example != NULL) {
            const char *ex = re_cases[i].example;
            RS_CHECK(oracle_match(&o, ex, strlen(ex)) == 2 && engine_match(m, ex, strlen(ex)) == 2);
            n_full++;
        }
        RS_CHECK_MSG(n_full > 0, "/%s/: no full match seen", re_cases[i].re);
        rs_grammar_matcher_destroy(&m);
        rs_grammar_release(&g);
        oracle_close(&o);
    }
    gt_vocab_free(&x);
    return 0;
}

/* Constrained generation on a 50k vocab ends on full matches only. */
static int test_regex_generation_gives_full_matches(void)
{
    static const char *res[] = {"[0-9]{3}-[0-9]{4}", "(yes|no|maybe)!?",
                                "[A-Z][a-z]{1,8}( [A-Z][a-z]{1,8}){0,2}",
                                "\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])"};
    struct gt_vocab x;
    int rc = gt_vocab_load("tokenizer/ggml-vocab-gpt-2.gguf", &x);
    if (rc)
        return rc;
    for (size_t i = 0; i < sizeof(res) / sizeof(res[0]); i++) {
        struct oracle o;
        RS_CHECK(oracle_open(&o, res[i]) == 0);
        rs_grammar *g = gt_compile(&x, RS_CONSTRAINT_REGEX, res[i], 0);
        RS_CHECK(g != NULL);
        for (int k = 0; k < 15; k++) {
            rs_grammar_matcher *m;
            RS_CHECK(rs_grammar_matcher_create(g, &m) == RS_OK);
            struct gt_walk w;
            RS_CHECK(gt_walk_run(m, &x, (uint64_t)k + 50, 64, 0.3, 0, &w) == 0);
            RS_CHECK_MSG(w.ended, "/%s/: no end after '%s'", res[i], w.text);
            RS_CHECK_MSG(oracle_match(&o, w.text, w.len) == 2, "/%s/: '%s' is not a full match",
                         res[i], w.text);
            rs_grammar_matcher_destroy(&m);
        }
        rs_grammar_release(&g);
        oracle_close(&o);
    }
    gt_vocab_free(&x);
    return 0;
}

static int test_malformed_regexes_name_the_offset(void)
{
    static const struct {
        const char *re;
        rs_err rc;
        const char *msg;
    } cases[] = {
        {"(ab", RS_EINVAL, "offset 0: '(' is not closed"},
        {"ab)", RS_EINVAL, "offset 2: unmatched ')'"},
        {"a**", RS_EINVAL, "offset 2: '*' has nothing to repeat"},
        {"*a", RS_EINVAL, "offset 0: '*' has nothing to repeat"},
        {"[abc", RS_EINVAL, "offset 0: unterminated character class"},
        {"[]a]", RS_EINVAL, "offset 0: empty character class"},
        {"[z-a]", RS_EINVAL, "offset 2: range out of order"},
        {"a{3,1}", RS_EINVAL, "offset 1: quantifier {3,1}"},
        {"a{,3}", RS_EINVAL, "offset 1: '{' is not a valid quantifier"},
        {"a{99999}", RS_ERANGE, "offset 2: repetition count above the limit"},
        {"(a)\\1", RS_EUNSUPPORTED, "offset 3: backreferences"},
        {"a(?=b)", RS_EUNSUPPORTED, "offset 1: lookaround"},
        {"(?<!a)b", RS_EUNSUPPORTED, "offset 0: lookaround"},
        {"(?i)a", RS_EUNSUPPORTED, "offset 0: inline flags"},
        {"\\bword", RS_EUNSUPPORTED, "offset 0: word boundaries"},
        {"\\p{L}", RS_EUNSUPPORTED, "offset 0: Unicode property"},
        {"a++", RS_EUNSUPPORTED, "offset 2: possessive"},
        {"a^b", RS_EUNSUPPORTED, "offset 1: '^' is supported only at the very start"},
        {"a$b", RS_EUNSUPPORTED, "offset 1: '$' is supported only at the very end"},
        {"\\q", RS_EINVAL, "offset 0: unknown escape"},
        {"\\x4", RS_EINVAL, "offset 0: expected 2 hex digits"},
        {"\\uD800", RS_EINVAL, "offset 0: escape U+D800"},
        {"a\\", RS_EINVAL, "offset 1: '\\' at the end"},
        {"\xff", RS_EINVAL, "offset 0: invalid UTF-8"},
        {"[a-\\d]", RS_EINVAL, "offset 2: a range cannot end in a class escape"},
        {"(?P<n>a)", RS_EUNSUPPORTED, "offset 0: (?P<name>...)"},
        {"x{2", RS_EINVAL, "offset 1: unterminated quantifier"},
        {"[^\\x00-\\u{10FFFF}]", RS_EINVAL, "matches no string"},
    };
    struct gt_vocab x;
    int rc = gt_vocab_load("stories260K.gguf", &x);
    if (rc)
        return rc;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct rs_constraint c = {RS_CONSTRAINT_REGEX, cases[i].re, strlen(cases[i].re), NULL,
                                  NULL, 0};
        rs_grammar *g = NULL;
        char err[512] = "";
        rs_err r = rs_grammar_compile(x.gv, &c, NULL, RS_GRAMMAR_LAZY, &g, err, sizeof(err));
        RS_CHECK_MSG(r == cases[i].rc && strstr(err, cases[i].msg) != NULL,
                     "/%s/: got %s '%s', want %s '%s'", cases[i].re, rs_strerror(r), err,
                     rs_strerror(cases[i].rc), cases[i].msg);
    }
    char deep[600] = "";
    for (int i = 0; i < 270; i++)
        strcat(deep, "(");
    struct rs_constraint c = {RS_CONSTRAINT_REGEX, deep, strlen(deep), NULL, NULL, 0};
    rs_grammar *g = NULL;
    char err[256];
    RS_CHECK(rs_grammar_compile(x.gv, &c, NULL, 0, &g, err, sizeof(err)) == RS_ERANGE);
    RS_CHECK(strstr(err, "groups nested deeper than 256") != NULL);
    gt_vocab_free(&x);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_regex_language_and_prefixes_match_pcre2),
    RS_TEST(test_regex_generation_gives_full_matches),
    RS_TEST(test_malformed_regexes_name_the_offset),
};

RS_TEST_MAIN(cases)

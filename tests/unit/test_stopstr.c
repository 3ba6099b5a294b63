/* SPDX-License-Identifier: MIT */
/*
 * Stop-string matcher: stop strings split across deltas, false starts
 * released, the first stop string to complete wins, the result is the same
 * however the text is cut into deltas (checked against a direct search on
 * random text), UTF-8 boundaries, errors leave the state intact, and the
 * state survives a byte copy (shared memory).
 */
#include <stdint.h>
#include <string.h>

#include "common/stopstr.h"
#include "tests/rs_test.h"

_Static_assert(sizeof(struct rs_stopstr) == 264, "stop-string state is a fixed plain struct");

struct stream {
    struct rs_stopstr st;
    char released[4096];
    size_t n;
    int which;
};

static void stream_init(struct stream *s)
{
    rs_stopstr_init(&s->st);
    s->n = 0;
    s->which = -1;
}

/* Feeds a delta; appends what is released. Returns the rs_stopstr_feed result. */
static rs_err feed(struct stream *s, const char *const *stops, size_t n_stops, const char *text,
                   size_t len)
{
    size_t lens[16], out_n;
    char out[RS_STOPSTR_MAX_LEN + 1024];
    int which;
    for (size_t i = 0; i < n_stops; i++)
        lens[i] = strlen(stops[i]);
    rs_err rc =
        rs_stopstr_feed(&s->st, stops, lens, n_stops, text, len, out, sizeof(out), &out_n, &which);
    if (rc == RS_OK) {
        memcpy(s->released + s->n, out, out_n);
        s->n += out_n;
        if (which >= 0)
            s->which = which;
    }
    return rc;
}

static void finish(struct stream *s)
{
    size_t out_n;
    char out[RS_STOPSTR_MAX_LEN];
    if (rs_stopstr_finish(&s->st, out, sizeof(out), &out_n) == RS_OK) {
        memcpy(s->released + s->n, out, out_n);
        s->n += out_n;
    }
}

static int released_is(const struct stream *s, const char *want)
{
    RS_CHECK_MSG(s->n == strlen(want) && memcmp(s->released, want, s->n) == 0,
                 "released \"%.*s\", want \"%s\"", (int)s->n, s->released, want);
    return 0;
}

static int test_stop_split_across_deltas(void)
{
    const char *stops[] = {"\n\nUser:"};
    struct stream s;
    stream_init(&s);
    RS_CHECK(feed(&s, stops, 1, "Hello\n", 6) == RS_OK && released_is(&s, "Hello") == 0);
    RS_CHECK(s.st.n_held == 1);
    RS_CHECK(feed(&s, stops, 1, "\nUs", 3) == RS_OK && released_is(&s, "Hello") == 0);
    RS_CHECK(feed(&s, stops, 1, "er: more", 8) == RS_OK && released_is(&s, "Hello") == 0);
    RS_CHECK(s.which == 0 && s.st.matched);
    RS_CHECK(feed(&s, stops, 1, "later", 5) == RS_OK && released_is(&s, "Hello") == 0);
    finish(&s);
    RS_CHECK(released_is(&s, "Hello") == 0);
    return 0;
}

static int test_false_start_is_released(void)
{
    const char *stops[] = {"abc"};
    struct stream s;
    stream_init(&s);
    RS_CHECK(feed(&s, stops, 1, "xab", 3) == RS_OK && released_is(&s, "x") == 0);
    RS_CHECK(feed(&s, stops, 1, "x", 1) == RS_OK && released_is(&s, "xabx") == 0);
    RS_CHECK(feed(&s, stops, 1, "a", 1) == RS_OK && released_is(&s, "xabx") == 0);
    finish(&s);
    RS_CHECK(released_is(&s, "xabxa") == 0 && s.which == -1);
    return 0;
}

static int test_overlapping_prefixes(void)
{
    const char *stops[] = {"aab"};
    struct stream s;
    stream_init(&s);
    const char *text = "aaaab!";
    for (size_t i = 0; i < strlen(text); i++)
        RS_CHECK(feed(&s, stops, 1, text + i, 1) == RS_OK);
    RS_CHECK(released_is(&s, "aa") == 0 && s.which == 0);
    return 0;
}

static int test_first_completed_stop_wins(void)
{
    const char *stops[] = {"abcdef", "bcd", "cd"};
    struct stream s;
    stream_init(&s);
    RS_CHECK(feed(&s, stops, 3, "xabcdefg", 8) == RS_OK);
    /* "bcd" and "cd" both complete at the 'd'; the longer, earlier one wins */
    RS_CHECK(released_is(&s, "xa") == 0 && s.which == 1);
    return 0;
}

static int test_utf8_stays_whole(void)
{
    const char *stops[] = {"\xC3\xA9!"}; /* "é!" */
    struct stream s;
    stream_init(&s);
    RS_CHECK(feed(&s, stops, 1, "caf\xC3\xA9", 5) == RS_OK && released_is(&s, "caf") == 0);
    RS_CHECK(feed(&s, stops, 1, "s", 1) == RS_OK && released_is(&s, "caf\xC3\xA9s") == 0);
    RS_CHECK(feed(&s, stops, 1, "\xC3\xA9!", 3) == RS_OK && released_is(&s, "caf\xC3\xA9s") == 0);
    RS_CHECK(s.which == 0);
    return 0;
}

static int test_no_stops_passes_through(void)
{
    struct stream s;
    stream_init(&s);
    RS_CHECK(feed(&s, NULL, 0, "anything", 8) == RS_OK && released_is(&s, "anything") == 0);
    RS_CHECK(s.st.n_held == 0);
    return 0;
}

static int test_errors_leave_state_unchanged(void)
{
    const char *stops[] = {"abc", ""};
    size_t lens[] = {3, 0};
    struct stream s;
    stream_init(&s);
    RS_CHECK(feed(&s, stops, 1, "zab", 3) == RS_OK);
    struct rs_stopstr before = s.st;
    char out[8];
    size_t n;
    int which;
    RS_CHECK(rs_stopstr_feed(&s.st, stops, lens, 2, "c", 1, out, sizeof(out), &n, &which) ==
             RS_EINVAL); /* empty stop string */
    size_t too_long = RS_STOPSTR_MAX_LEN + 1;
    RS_CHECK(rs_stopstr_feed(&s.st, stops, &too_long, 1, "c", 1, out, sizeof(out), &n, &which) ==
             RS_EINVAL);
    RS_CHECK(rs_stopstr_feed(&s.st, stops, lens, 1, "cdef", 4, out, 3, &n, &which) == RS_ERANGE);
    RS_CHECK(memcmp(&s.st, &before, sizeof(before)) == 0);
    RS_CHECK(rs_stopstr_feed(&s.st, stops, lens, 1, "c", 1, out, sizeof(out), &n, &which) == RS_OK);
    RS_CHECK(n == 0 && which == 0 && released_is(&s, "z") == 0);
    return 0;
}

static uint64_t rng = 0xC0FFEE123456789ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* Direct answer: the text before the occurrence that ends first (ties: the longer stop). */
static size_t expected_release(const char *text, size_t n, char stops[][8], size_t n_stops,
                               int *which)
{
    for (size_t end = 1; end <= n; end++) {
        size_t best_start = SIZE_MAX;
        for (size_t i = 0; i < n_stops; i++) {
            size_t l = strlen(stops[i]);
            if (l <= end && memcmp(text + end - l, stops[i], l) == 0 && end - l < best_start) {
                best_start = end - l;
                *which = (int)i;
            }
        }
        if (best_start != SIZE_MAX)
            return best_start;
    }
    *which = -1;
    return n;
}

static int test_random_text_any_cutting(void)
{
    char text[256], stops[3][8];
    const char *sp[3];
    for (int it = 0; it < 3000; it++) {
        size_t n = rnd(120), n_stops = 1 + rnd(3);
        for (size_t i = 0; i < n; i++)
            text[i] = (char)('a' + rnd(3));
        for (size_t i = 0; i < n_stops; i++) {
            size_t l = 1 + rnd(6);
            for (size_t k = 0; k < l; k++)
                stops[i][k] = (char)('a' + rnd(3));
            stops[i][l] = '\0';
            sp[i] = stops[i];
        }
        int want_which;
        size_t want = expected_release(text, n, stops, n_stops, &want_which);
        struct stream s;
        stream_init(&s);
        for (size_t pos = 0; pos < n;) {
            size_t cut = 1 + rnd(8);
            if (cut > n - pos)
                cut = n - pos;
            RS_CHECK(feed(&s, sp, n_stops, text + pos, cut) == RS_OK);
            /* the state is plain data: move it through a byte copy between deltas */
            unsigned char raw[sizeof(struct rs_stopstr)];
            memcpy(raw, &s.st, sizeof(raw));
            memset(&s.st, 0xAB, sizeof(s.st));
            memcpy(&s.st, raw, sizeof(raw));
            pos += cut;
        }
        finish(&s);
        RS_CHECK_MSG(s.n == want && memcmp(s.released, text, want) == 0 && s.which == want_which,
                     "iteration %d: released %zu bytes (stop %d), want %zu (stop %d)", it, s.n,
                     s.which, want, want_which);
    }
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_stop_split_across_deltas),
    RS_TEST(test_false_start_is_released),
    RS_TEST(test_overlapping_prefixes),
    RS_TEST(test_first_completed_stop_wins),
    RS_TEST(test_utf8_stays_whole),
    RS_TEST(test_no_stops_passes_through),
    RS_TEST(test_errors_leave_state_unchanged),
    RS_TEST(test_random_text_any_cutting),
};
RS_TEST_MAIN(cases)

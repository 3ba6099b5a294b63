/* SPDX-License-Identifier: MIT */
/*
 * Stop-string matcher; see stopstr.h. Each call scans held + delta once per
 * stop string with a Knuth-Morris-Pratt automaton: the scan yields both the
 * earliest complete occurrence and, when there is none, the longest suffix
 * that is a prefix of the stop string (the part to hold back). Cost per call
 * is O(n_stops * (held + delta + stop length)) with no allocation.
 */
#include "common/stopstr.h"

#include <stdint.h>
#include <string.h>

void rs_stopstr_init(struct rs_stopstr *s)
{
    memset(s, 0, sizeof(*s));
    s->which = -1;
}

/* KMP failure function of p[0..m): fail[k] = longest proper border of p[0..k]. */
static void kmp_table(const char *p, size_t m, uint16_t *fail)
{
    fail[0] = 0;
    size_t k = 0;
    for (size_t q = 1; q < m; q++) {
        while (k > 0 && p[q] != p[k])
            k = fail[k - 1];
        if (p[q] == p[k])
            k++;
        fail[q] = (uint16_t)k;
    }
}

/*
 * Scans t[0..n) for p[0..m): returns the start of the first occurrence, or n
 * when none, and then sets *tail to the longest suffix of t that is a proper
 * prefix of p.
 */
static size_t kmp_scan(const char *t, size_t n, const char *p, size_t m, size_t *tail)
{
    uint16_t fail[RS_STOPSTR_MAX_LEN];
    kmp_table(p, m, fail);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        while (k > 0 && t[i] != p[k])
            k = fail[k - 1];
        if (t[i] == p[k])
            k++;
        if (k == m)
            return i + 1 - m;
    }
    *tail = k;
    return n;
}

static rs_err check_stops(const char *const *stops, const size_t *lens, size_t n_stops)
{
    if (n_stops > 0 && (stops == NULL || lens == NULL))
        return RS_EINVAL;
    for (size_t i = 0; i < n_stops; i++)
        if (stops[i] == NULL || lens[i] == 0 || lens[i] > RS_STOPSTR_MAX_LEN)
            return RS_EINVAL;
    return RS_OK;
}

rs_err rs_stopstr_feed(struct rs_stopstr *s, const char *const *stops, const size_t *lens,
                       size_t n_stops, const char *text, size_t len, char *out, size_t cap,
                       size_t *n_out, int *which)
{
    if (s == NULL || n_out == NULL || which == NULL || (text == NULL && len > 0) ||
        s->n_held >= RS_STOPSTR_MAX_LEN || check_stops(stops, lens, n_stops) != RS_OK)
        return RS_EINVAL;
    *which = -1;
    if (s->matched) {
        *n_out = 0;
        return RS_OK;
    }
    size_t n = s->n_held + len;
    if (cap < n || out == NULL)
        return RS_ERANGE;
    /* out holds the candidate text: held bytes, then the delta */
    memmove(out + s->n_held, text, len);
    memcpy(out, s->held, s->n_held);
    /* The stop string that completes first wins (the one a byte-by-byte stream would meet
     * first, so the result does not depend on how text is cut into deltas); at equal ends
     * the longer one, which starts earlier. */
    size_t first = n, end = SIZE_MAX, hold = 0;
    int hit = -1;
    for (size_t i = 0; i < n_stops; i++) {
        size_t tail = 0, at = kmp_scan(out, n, stops[i], lens[i], &tail);
        if (at < n && (at + lens[i] < end || (at + lens[i] == end && at < first))) {
            first = at;
            end = at + lens[i];
            hit = (int)i;
        }
        if (tail > hold)
            hold = tail;
    }
    if (hit >= 0) {
        s->matched = 1;
        s->which = hit;
        s->n_held = 0;
        *which = hit;
        *n_out = first;
        return RS_OK;
    }
    memcpy(s->held, out + n - hold, hold);
    s->n_held = (uint16_t)hold;
    *n_out = n - hold;
    return RS_OK;
}

rs_err rs_stopstr_finish(struct rs_stopstr *s, char *out, size_t cap, size_t *n_out)
{
    if (s == NULL || n_out == NULL || s->n_held >= RS_STOPSTR_MAX_LEN)
        return RS_EINVAL;
    if (s->matched || s->n_held == 0) {
        *n_out = 0;
        return RS_OK;
    }
    if (cap < s->n_held || out == NULL)
        return RS_ERANGE;
    memcpy(out, s->held, s->n_held);
    *n_out = s->n_held;
    s->n_held = 0;
    return RS_OK;
}

/* SPDX-License-Identifier: MIT */
/* UTF-8 decoding and repair by the maximal-subpart rule; see utf8.h. */
#include "common/utf8.h"

#include <string.h>

size_t rs_utf8_next(const char *s, size_t n, uint32_t *cp)
{
    const uint8_t *u = (const uint8_t *)s;
    uint8_t lead = u[0];
    unsigned len = rs_utf8_seq_len(lead);
    if (len == 1) {
        *cp = lead;
        return 1;
    }
    if (len == 0) {
        *cp = RS_UTF8_INVALID;
        return 1;
    }
    uint32_t v = lead & (0xFFu >> (len + 1));
    for (unsigned k = 1; k < len; k++) {
        if (k >= n || !rs_utf8_cont_ok(lead, k, u[k])) {
            *cp = RS_UTF8_INVALID;
            return k;
        }
        v = (v << 6) | (u[k] & 0x3Fu);
    }
    *cp = v;
    return len;
}

size_t rs_utf8_valid_prefix(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        /* ASCII runs dominate real text: test 8 bytes at a time. */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        if ((uint8_t)s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t k = rs_utf8_next(s + i, n - i, &cp);
        if (cp == RS_UTF8_INVALID)
            return i;
        i += k;
    }
    return n;
}

size_t rs_utf8_incomplete_tail(const char *s, size_t n)
{
    const uint8_t *u = (const uint8_t *)s;
    /* A lead byte at most 3 bytes from the end may start an unfinished sequence. */
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        uint8_t b = u[n - back];
        if (b >= 0x80 && b < 0xC0)
            continue; /* continuation: keep looking for its lead */
        unsigned len = rs_utf8_seq_len(b);
        if (len <= back)
            return 0;
        for (size_t k = 1; k < back; k++)
            if (!rs_utf8_cont_ok(b, (unsigned)k, u[n - back + k]))
                return 0;
        return back;
    }
    return 0;
}

size_t rs_utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            return 0;
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF)
        return 0;
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t rs_utf8_sanitize(const char *s, size_t n, char *out)
{
    size_t i = 0, o = 0;
    while (i < n) {
        size_t ok = rs_utf8_valid_prefix(s + i, n - i);
        memcpy(out + o, s + i, ok);
        o += ok;
        i += ok;
        if (i >= n)
            break;
        uint32_t cp;
        i += rs_utf8_next(s + i, n - i, &cp);
        memcpy(out + o, RS_UTF8_REPLACEMENT, 3);
        o += 3;
    }
    return o;
}

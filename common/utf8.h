/* SPDX-License-Identifier: MIT */
/*
 * UTF-8 decoding, validation and repair shared by the tokenizers, the
 * incremental detokenizer and the tools. Ill-formed input is handled by the
 * Unicode "maximal subpart" rule (the same as Python's errors='replace'): each
 * maximal prefix of a would-be sequence that cannot be completed is one error
 * unit. Leaves out: UTF-16/32, normalization, and case folding.
 */
#ifndef RS_UTF8_H
#define RS_UTF8_H

#include <stddef.h>
#include <stdint.h>

#define RS_UTF8_INVALID 0xFFFFFFFFu        /* code point reported for an ill-formed unit */
#define RS_UTF8_REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD, 3 bytes */

/*
 * Length of the valid UTF-8 sequence that lead byte `b` announces (1..4), or
 * 0 when b can never start one (continuation bytes, C0, C1, F5..FF).
 */
static inline unsigned rs_utf8_seq_len(uint8_t b)
{
    if (b < 0x80)
        return 1;
    if (b < 0xC2)
        return 0;
    if (b < 0xE0)
        return 2;
    if (b < 0xF0)
        return 3;
    return b < 0xF5 ? 4 : 0;
}

/*
 * Whether byte `b` may follow the bytes s[0..k) (k >= 1, s[0] a valid lead)
 * inside one sequence: the second byte has lead-specific bounds (no overlong
 * forms, no surrogates, nothing above U+10FFFF), later ones are 80..BF.
 */
static inline int rs_utf8_cont_ok(uint8_t lead, unsigned k, uint8_t b)
{
    if (k == 1) {
        if (lead == 0xE0)
            return b >= 0xA0 && b <= 0xBF;
        if (lead == 0xED)
            return b >= 0x80 && b <= 0x9F;
        if (lead == 0xF0)
            return b >= 0x90 && b <= 0xBF;
        if (lead == 0xF4)
            return b >= 0x80 && b <= 0x8F;
    }
    return b >= 0x80 && b <= 0xBF;
}

/*
 * Decodes the unit at s[0..n) (n >= 1). Returns the bytes it covers (>= 1)
 * and sets *cp to the code point, or to RS_UTF8_INVALID when those bytes are
 * one maximal ill-formed subpart (including a sequence truncated by n).
 * Pure; any thread.
 */
size_t rs_utf8_next(const char *s, size_t n, uint32_t *cp);

/* Bytes of the longest valid UTF-8 prefix of s[0..n). Any thread. */
size_t rs_utf8_valid_prefix(const char *s, size_t n);

/* 1 when s[0..n) is entirely valid UTF-8, else 0. Any thread. */
static inline int rs_utf8_valid(const char *s, size_t n)
{
    return rs_utf8_valid_prefix(s, n) == n;
}

/*
 * Length (0..3) of the trailing bytes of s[0..n) that are a valid but
 * incomplete sequence, i.e. that more bytes could still complete. Any thread.
 */
size_t rs_utf8_incomplete_tail(const char *s, size_t n);

/* Writes code point cp (<= U+10FFFF, not a surrogate) to out; returns 1..4, or 0 if invalid. */
size_t rs_utf8_encode(uint32_t cp, char out[4]);

/*
 * Copies s[0..n) to out, replacing each maximal ill-formed subpart by U+FFFD.
 * out must hold 3 * n bytes. Returns the bytes written. Any thread.
 */
size_t rs_utf8_sanitize(const char *s, size_t n, char *out);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * JSON building blocks for the schema and "any JSON object" front ends, as
 * IR rules: bounded insignificant whitespace (as llama.cpp's: nothing, one
 * space, or a newline and up to 20 spaces or tabs), string characters (raw,
 * or escaped; \u escapes never name a surrogate, so every escape is exactly
 * one code point and lengths count as a JSON parser counts them), strings,
 * numbers (up to 16 integer and 16 fraction digits, exponents of 1-2 digits,
 * so a bounded schema ends in a bounded number of tokens), and any value /
 * any object (recursive rules). Every value rule ends with its whitespace.
 * Leaves out: the schema keywords themselves (grammar_schema.c).
 */
#include <stdlib.h>
#include <string.h>

#include "common/grammar_impl.h"
#include "common/utf8.h"

#define WS_MAX 20
#define INT_DIGITS 16
#define FRAC_DIGITS 16
#define EXP_DIGITS 2

static uint32_t cls1(struct gx_ir *ir, uint32_t lo, uint32_t hi)
{
    uint32_t r[2] = {lo, hi};
    return gx_class(ir, r, 1, 0);
}

/* rule named name: defined by build(ir) the first time; a reference to it. */
static uint32_t named(struct gx_ir *ir, const char *name, uint32_t (*build)(struct gx_ir *))
{
    uint32_t r = gx_rule_get(ir, name, strlen(name));
    if (r == GX_NONE)
        return GX_NONE;
    if (ir->rules[r].body == GX_NONE) {
        ir->rules[r].body = 0; /* mark as being defined: recursive builders refer to it */
        uint32_t body = build(ir);
        if (body == GX_NONE)
            return GX_NONE;
        ir->rules[r].body = body;
    }
    return gx_ref(ir, r);
}

static uint32_t build_ws(struct gx_ir *ir)
{
    static const uint32_t sp_tab[] = {' ', ' ', '\t', '\t'};
    uint32_t indent = gx_rep(ir, gx_class(ir, sp_tab, 2, 0), 0, WS_MAX);
    uint32_t k[3] = {gx_empty(ir), gx_str(ir, " "), gx_seq2(ir, gx_str(ir, "\n"), indent)};
    return gx_alt(ir, k, 3);
}

uint32_t gx_json_ws(struct gx_ir *ir)
{
    return named(ir, "ws", build_ws);
}

static uint32_t hex(struct gx_ir *ir)
{
    static const uint32_t h[] = {'0', '9', 'a', 'f', 'A', 'F'};
    return gx_class(ir, h, 3, 0);
}

/* Four hex digits naming a code point outside U+D800..U+DFFF. */
static uint32_t hex4_scalar(struct gx_ir *ir)
{
    static const uint32_t lead[] = {'0', '9', 'a', 'c', 'A', 'C', 'e', 'f', 'E', 'F'};
    static const uint32_t d[] = {'d', 'd', 'D', 'D'};
    uint32_t any3 = gx_rep(ir, hex(ir), 3, 3);
    uint32_t not_d = gx_seq2(ir, gx_class(ir, lead, 5, 0), any3);
    uint32_t is_d = gx_seq3(ir, gx_class(ir, d, 2, 0), cls1(ir, '0', '7'), gx_rep(ir, hex(ir), 2, 2));
    return gx_alt2(ir, not_d, is_d);
}

static uint32_t build_char(struct gx_ir *ir)
{
    static const uint32_t bad[] = {0, 0x1F, '"', '"', '\\', '\\'};
    static const uint32_t esc[] = {'"', '"', '\\', '\\', '/', '/', 'b', 'b', 'f', 'f',
                                   'n', 'n', 'r', 'r', 't', 't'};
    uint32_t raw = gx_class(ir, bad, 3, 1);
    uint32_t e = gx_alt2(ir, gx_class(ir, esc, 8, 0), gx_seq2(ir, gx_str(ir, "u"), hex4_scalar(ir)));
    return gx_alt2(ir, raw, gx_seq2(ir, gx_str(ir, "\\"), e));
}

uint32_t gx_json_char(struct gx_ir *ir)
{
    return named(ir, "char", build_char);
}

static uint32_t build_string(struct gx_ir *ir)
{
    return gx_seq3(ir, gx_str(ir, "\""), gx_rep(ir, gx_json_char(ir), 0, GX_INF), gx_str(ir, "\""));
}

uint32_t gx_json_string(struct gx_ir *ir)
{
    return named(ir, "string", build_string);
}

static uint32_t build_integer(struct gx_ir *ir)
{
    uint32_t mag = gx_alt2(ir, gx_str(ir, "0"),
                           gx_seq2(ir, cls1(ir, '1', '9'), gx_rep(ir, cls1(ir, '0', '9'), 0,
                                                                  INT_DIGITS - 1)));
    return gx_seq2(ir, gx_rep(ir, gx_str(ir, "-"), 0, 1), mag);
}

uint32_t gx_json_integer(struct gx_ir *ir)
{
    return named(ir, "integer", build_integer);
}

static uint32_t build_number(struct gx_ir *ir)
{
    static const uint32_t e[] = {'e', 'e', 'E', 'E'}, sign[] = {'+', '+', '-', '-'};
    uint32_t frac = gx_seq2(ir, gx_str(ir, "."), gx_rep(ir, cls1(ir, '0', '9'), 1, FRAC_DIGITS));
    uint32_t exp = gx_seq3(ir, gx_class(ir, e, 2, 0), gx_rep(ir, gx_class(ir, sign, 2, 0), 0, 1),
                           gx_rep(ir, cls1(ir, '0', '9'), 1, EXP_DIGITS));
    return gx_seq3(ir, gx_json_integer(ir), gx_rep(ir, frac, 0, 1), gx_rep(ir, exp, 0, 1));
}

uint32_t gx_json_number(struct gx_ir *ir)
{
    return named(ir, "number", build_number);
}

/* "{" ws ( member ("," ws member)* )? "}" with member = string ws ":" ws value (value ends
 * with its whitespace; the object itself does not) */
static uint32_t build_object(struct gx_ir *ir)
{
    uint32_t ws = gx_json_ws(ir);
    uint32_t member = gx_seq(ir, (uint32_t[]){gx_json_string(ir), ws, gx_str(ir, ":"), ws,
                                              gx_json_value_rule(ir)}, 5);
    uint32_t more = gx_rep(ir, gx_seq3(ir, gx_str(ir, ","), ws, member), 0, GX_INF);
    uint32_t body = gx_rep(ir, gx_seq2(ir, member, more), 0, 1);
    return gx_seq(ir, (uint32_t[]){gx_str(ir, "{"), ws, body, gx_str(ir, "}")}, 4);
}

static uint32_t build_array(struct gx_ir *ir)
{
    uint32_t ws = gx_json_ws(ir), v = gx_json_value_rule(ir);
    uint32_t more = gx_rep(ir, gx_seq3(ir, gx_str(ir, ","), ws, v), 0, GX_INF);
    uint32_t body = gx_rep(ir, gx_seq2(ir, v, more), 0, 1);
    return gx_seq(ir, (uint32_t[]){gx_str(ir, "["), ws, body, gx_str(ir, "]")}, 4);
}

static uint32_t array_rule(struct gx_ir *ir)
{
    return named(ir, "array", build_array);
}

static uint32_t build_value(struct gx_ir *ir)
{
    uint32_t k[] = {gx_json_object_rule(ir), array_rule(ir), gx_json_string(ir),
                    gx_json_number(ir), gx_str(ir, "true"), gx_str(ir, "false"),
                    gx_str(ir, "null")};
    return gx_seq2(ir, gx_alt(ir, k, 7), gx_json_ws(ir));
}

uint32_t gx_json_value_rule(struct gx_ir *ir)
{
    return named(ir, "value", build_value);
}

uint32_t gx_json_object_rule(struct gx_ir *ir)
{
    return named(ir, "object", build_object);
}

rs_err gx_json_object_build(struct gx_ir *ir, char *err, size_t err_len)
{
    uint32_t root = gx_rule_get(ir, "root", 4);
    uint32_t body = gx_seq2(ir, gx_json_object_rule(ir), gx_json_ws(ir));
    if (root == GX_NONE || body == GX_NONE || ir->err != RS_OK)
        return gx_ir_error(ir, err, err_len);
    ir->rules[root].body = body;
    return RS_OK;
}

size_t gx_json_escape(uint32_t cp, char out[8])
{
    static const char hexd[] = "0123456789abcdef";
    static const char short_in[] = "\"\\\b\f\n\r\t", short_out[] = "\"\\bfnrt";
    const char *q = cp < 128 && cp != 0 ? strchr(short_in, (int)cp) : NULL;
    if (q != NULL) {
        out[0] = '\\';
        out[1] = short_out[q - short_in];
        return 2;
    }
    if (cp < 0x20) {
        memcpy(out, "\\u00", 4);
        out[4] = hexd[cp >> 4];
        out[5] = hexd[cp & 15];
        return 6;
    }
    return rs_utf8_encode(cp, out);
}

uint32_t gx_json_literal_string(struct gx_ir *ir, const char *s, size_t n)
{
    char *buf = malloc(n * 6 + 2);
    if (buf == NULL) {
        ir->err = RS_ENOMEM;
        return GX_NONE;
    }
    size_t k = 0;
    buf[k++] = '"';
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t step = rs_utf8_next(s + i, n - i, &cp);
        if (cp == RS_UTF8_INVALID)
            cp = 0xFFFD;
        k += gx_json_escape(cp, buf + k);
        i += step;
    }
    buf[k++] = '"';
    uint32_t out = gx_bytes(ir, buf, k);
    free(buf);
    return out;
}

uint32_t gx_json_class_char(struct gx_ir *ir, const uint32_t *ranges, size_t n)
{
    /* raw: the set minus '"', '\\' and controls; then one escape per such member */
    struct gx_list alts = {0};
    uint32_t *raw = malloc((3 * n + 1) * 2 * sizeof(uint32_t)); /* 3 pieces per pair */
    if (raw == NULL) {
        ir->err = RS_ENOMEM;
        return GX_NONE;
    }
    size_t nr = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t lo = ranges[2 * i], hi = ranges[2 * i + 1];
        for (uint32_t cp = lo; cp <= hi && cp < 0x20; cp++) {
            char b[8];
            gx_list_push(ir, &alts, gx_bytes(ir, b, gx_json_escape(cp, b)));
        }
        if (lo < 0x20)
            lo = 0x20;
        /* split around '"' (0x22) and '\\' (0x5C) */
        const uint32_t cut[2] = {'"', '\\'};
        for (int c = 0; c < 2 && lo <= hi; c++) {
            if (cut[c] < lo || cut[c] > hi)
                continue;
            char b[8];
            gx_list_push(ir, &alts, gx_bytes(ir, b, gx_json_escape(cut[c], b)));
            if (cut[c] > lo)
                raw[2 * nr] = lo, raw[2 * nr + 1] = cut[c] - 1, nr++;
            lo = cut[c] + 1;
        }
        if (lo <= hi)
            raw[2 * nr] = lo, raw[2 * nr + 1] = hi, nr++;
    }
    if (nr > 0)
        gx_list_push(ir, &alts, gx_class(ir, raw, nr, 0));
    free(raw);
    uint32_t out = alts.n ? gx_alt(ir, alts.v, alts.n) : gx_class(ir, NULL, 0, 0);
    gx_list_free(&alts);
    return out;
}

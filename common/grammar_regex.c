/* SPDX-License-Identifier: MIT */
/*
 * Regular expressions (a subset both ECMAScript and Python's re read the same
 * way) into the grammar IR, for --regex constraints and JSON schema
 * "pattern". The whole output (or string value) must match: ^ and $ are
 * accepted only at the very start and end. Supported: literals, escaped
 * metacharacters, \n \r \t \f \v \0 \xHH \uHHHH \u{H..}, `.` (not \n, \r,
 * U+2028, U+2029), [classes] with ranges and ^negation, \d \w \s (ASCII) and
 * \D \W \S (excluding every Unicode digit, word and space character, so both
 * dialects agree), groups (...), (?:...), (?<name>...), |, and the
 * quantifiers * + ? {m} {m,} {m,n} (lazy forms match the same strings).
 * Refused with the byte offset: backreferences, lookaround, \b \B, \p{..},
 * flags, possessive quantifiers, `{` that is not a quantifier, empty classes.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar_impl.h"
#include "common/unicode.h"
#include "common/utf8.h"

struct rp {
    struct gx_ir *ir;
    const char *s;
    size_t n, pos;
    int json;
    uint32_t depth, max_depth;
    const char *where;
    char *err;
    size_t err_len;
    rs_err rc;
};

/* A set of code points being assembled (pairs). */
struct cpset {
    uint32_t *r;
    size_t n, cap; /* n counts uint32 values (2 per pair) */
};

static int failf(struct rp *p, size_t at, rs_err rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int failf(struct rp *p, size_t at, rs_err rc, const char *fmt, ...)
{
    if (p->rc != RS_OK)
        return -1;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    gx_fail(p->err, p->err_len, rc, "%s%soffset %zu: %s", p->where, p->where[0] ? ": " : "",
            at, msg);
    p->rc = rc;
    return -1;
}

static int set_add(struct rp *p, struct cpset *c, uint32_t lo, uint32_t hi)
{
    if (GX_PUSH(c->r, c->n, c->cap, lo) || GX_PUSH(c->r, c->n, c->cap, hi)) {
        p->ir->err = RS_ENOMEM;
        return -1;
    }
    return 0;
}

static int set_add_all(struct rp *p, struct cpset *c, const uint32_t *r, size_t pairs)
{
    for (size_t i = 0; i < pairs; i++)
        if (set_add(p, c, r[2 * i], r[2 * i + 1]))
            return -1;
    return 0;
}

/* --- Unicode sets for \D \W \S, built once ------------------------------------------------- */

enum { U_DIGIT, U_WORD, U_SPACE, U_N };
static uint32_t *u_sets[U_N];
static size_t u_pairs[U_N];
static pthread_once_t u_once = PTHREAD_ONCE_INIT;

static int u_member(int which, uint32_t cp)
{
    uint8_t f = rs_unicode_flags(cp);
    if (which == U_DIGIT)
        return (f & RS_UNICODE_NUMBER) != 0;
    if (which == U_WORD)
        return (f & (RS_UNICODE_LETTER | RS_UNICODE_NUMBER | RS_UNICODE_MARK)) != 0 || cp == '_';
    return (f & RS_UNICODE_WHITESPACE) != 0 || (cp >= 0x1C && cp <= 0x1F) || cp == 0xFEFF ||
           (cp >= 0x09 && cp <= 0x0D) || cp == ' ';
}

static void u_build(void)
{
    for (int w = 0; w < U_N; w++) {
        size_t cap = 0, n = 0;
        uint32_t *r = NULL;
        for (uint32_t cp = 0; cp <= GX_MAX_CP; cp++) {
            if (!u_member(w, cp))
                continue;
            if (n > 0 && r[n - 1] + 1 == cp) {
                r[n - 1] = cp;
                continue;
            }
            if (GX_PUSH(r, n, cap, cp) || GX_PUSH(r, n, cap, cp)) {
                free(r);
                r = NULL;
                n = 0;
                break;
            }
        }
        u_sets[w] = r;
        u_pairs[w] = n / 2;
    }
}

/* The wide (Unicode) set of \d, \w or \s; NULL when it could not be built. */
static const uint32_t *u_set(int which, size_t *pairs)
{
    pthread_once(&u_once, u_build);
    *pairs = u_pairs[which];
    return u_sets[which];
}

static const uint32_t ascii_digit[] = {'0', '9'};
static const uint32_t ascii_word[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'};
static const uint32_t ascii_space[] = {'\t', '\r', ' ', ' '};

/*
 * Adds the set of class escape e (d w s D W S) to c: `wide` selects the
 * superset used inside a negated class (what the larger dialect would match).
 */
static int add_class_escape(struct rp *p, struct cpset *c, char e, int wide)
{
    int which = (e == 'd' || e == 'D') ? U_DIGIT : (e == 'w' || e == 'W') ? U_WORD : U_SPACE;
    int upper = e >= 'A' && e <= 'Z';
    const uint32_t *narrow = which == U_DIGIT ? ascii_digit : which == U_WORD ? ascii_word
                           : ascii_space;
    size_t narrow_pairs = which == U_DIGIT ? 1 : which == U_WORD ? 4 : 2;
    /* lower + narrow: ASCII; lower + wide: Unicode; upper: the complement of the other one */
    int use_wide = upper ? !wide : wide;
    size_t wp = 0;
    const uint32_t *w = use_wide ? u_set(which, &wp) : narrow; /* built on first need only */
    if (w == NULL) {
        p->ir->err = RS_ENOMEM;
        return -1;
    }
    const uint32_t *base = w;
    size_t base_pairs = use_wide ? wp : narrow_pairs;
    if (!upper)
        return set_add_all(p, c, base, base_pairs);
    uint32_t next = 0;
    for (size_t i = 0; i < base_pairs; i++) {
        if (base[2 * i] > next && set_add(p, c, next, base[2 * i] - 1))
            return -1;
        next = base[2 * i + 1] + 1;
    }
    return next <= GX_MAX_CP ? set_add(p, c, next, GX_MAX_CP) : 0;
}

/* --- lexing ---------------------------------------------------------------------------------- */

static int at(const struct rp *p, char c)
{
    return p->pos < p->n && p->s[p->pos] == c;
}

static int hexval(char c)
{
    return (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
         : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
}

static int read_hex(struct rp *p, size_t start, unsigned n, uint32_t *cp)
{
    uint32_t v = 0;
    for (unsigned i = 0; i < n; i++) {
        int d = p->pos < p->n ? hexval(p->s[p->pos]) : -1;
        if (d < 0)
            return failf(p, start, RS_EINVAL, "expected %u hex digits after the escape", n);
        v = v * 16 + (uint32_t)d;
        p->pos++;
    }
    *cp = v;
    return 0;
}

/* \u{H...} after "\u{". */
static int read_hex_braced(struct rp *p, size_t start, uint32_t *cp)
{
    uint32_t v = 0;
    unsigned k = 0;
    while (p->pos < p->n && hexval(p->s[p->pos]) >= 0 && k < 7)
        v = v * 16 + (uint32_t)hexval(p->s[p->pos++]), k++;
    if (k == 0 || !at(p, '}'))
        return failf(p, start, RS_EINVAL, "malformed \\u{...} escape");
    p->pos++;
    *cp = v;
    return 0;
}

enum { ESC_CHAR, ESC_CLASS };

/* An escape after '\\': a character (*cp) or a class letter (*cls). */
static int read_escape(struct rp *p, size_t start, uint32_t *cp, char *cls)
{
    if (p->pos >= p->n)
        return failf(p, start, RS_EINVAL, "'\\' at the end of the pattern");
    char e = p->s[p->pos++];
    static const char meta[] = "^$\\.*+?()[]{}|/-";
    static const char ctl_in[] = "nrtfv0", ctl_out[] = "\n\r\t\f\v";
    if (strchr("dDwWsS", e) != NULL)
        return *cls = e, ESC_CLASS;
    if (strchr(meta, e) != NULL)
        return *cp = (uint8_t)e, ESC_CHAR;
    if (strchr(ctl_in, e) != NULL) {
        if (e == '0' && p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
            return failf(p, start, RS_EUNSUPPORTED, "octal escapes are not supported");
        *cp = e == '0' ? 0 : (uint8_t)ctl_out[strchr(ctl_in, e) - ctl_in];
        return ESC_CHAR;
    }
    int rc = 0;
    if (e == 'x')
        rc = read_hex(p, start, 2, cp);
    else if (e == 'u' && at(p, '{'))
        p->pos++, rc = read_hex_braced(p, start, cp);
    else if (e == 'u')
        rc = read_hex(p, start, 4, cp);
    else if (e >= '1' && e <= '9')
        return failf(p, start, RS_EUNSUPPORTED, "backreferences are not supported");
    else if (e == 'b' || e == 'B')
        return failf(p, start, RS_EUNSUPPORTED, "word boundaries (\\b, \\B) are not supported");
    else if (e == 'p' || e == 'P')
        return failf(p, start, RS_EUNSUPPORTED, "Unicode property escapes are not supported");
    else
        return failf(p, start, RS_EINVAL, "unknown escape '\\%c'", e);
    if (rc)
        return -1;
    if (*cp > GX_MAX_CP || (*cp >= 0xD800 && *cp <= 0xDFFF))
        return failf(p, start, RS_EINVAL, "escape U+%04X is not a Unicode scalar value", *cp);
    return ESC_CHAR;
}

/* One literal character of the pattern text (UTF-8). */
static int read_raw(struct rp *p, uint32_t *cp)
{
    size_t k = rs_utf8_next(p->s + p->pos, p->n - p->pos, cp);
    if (*cp == RS_UTF8_INVALID)
        return failf(p, p->pos, RS_EINVAL, "invalid UTF-8 in the pattern");
    p->pos += k;
    return 0;
}

/* --- building ------------------------------------------------------------------------------ */

/* One character from set c (pairs), in the flavour's spelling. */
static uint32_t class_node(struct rp *p, struct cpset *c, int negate)
{
    if (!p->json)
        return gx_class(p->ir, c->r, c->n / 2, negate);
    /* normalize (and complement) through a plain class node, then respell for JSON */
    uint32_t plain = gx_class(p->ir, c->r, c->n / 2, negate);
    if (plain == GX_NONE)
        return GX_NONE;
    const struct gx_node *nd = &p->ir->nodes[plain];
    size_t pairs = nd->b;
    uint32_t *copy = malloc((pairs ? pairs : 1) * 2 * sizeof(uint32_t));
    if (copy == NULL) {
        p->ir->err = RS_ENOMEM;
        return GX_NONE;
    }
    if (pairs > 0)
        memcpy(copy, p->ir->ranges + 2 * (size_t)nd->a, pairs * 2 * sizeof(uint32_t));
    uint32_t out = gx_json_class_char(p->ir, copy, pairs);
    free(copy);
    return out;
}

static uint32_t char_node(struct rp *p, uint32_t cp)
{
    char buf[8];
    size_t k = p->json ? gx_json_escape(cp, buf) : rs_utf8_encode(cp, buf);
    return gx_bytes(p->ir, buf, k);
}

static uint32_t parse_class(struct rp *p)
{
    size_t start = p->pos++;
    int negate = at(p, '^');
    if (negate)
        p->pos++;
    struct cpset c = {0};
    uint32_t out = GX_NONE;
    if (at(p, ']')) {
        failf(p, start, RS_EINVAL, "empty character class (write '\\]' for a ']')");
        goto done;
    }
    while (!at(p, ']')) {
        uint32_t lo, hi;
        char cls = 0;
        size_t item = p->pos;
        if (p->pos >= p->n) {
            failf(p, start, RS_EINVAL, "unterminated character class");
            goto done;
        }
        int k = at(p, '\\') ? (p->pos++, read_escape(p, item, &lo, &cls)) : read_raw(p, &lo);
        if (k < 0)
            goto done;
        if (k == ESC_CLASS) {
            if (add_class_escape(p, &c, cls, negate))
                goto done;
            continue;
        }
        if (at(p, '[') && p->pos + 1 < p->n && strchr(":=.", p->s[p->pos + 1])) {
            failf(p, p->pos, RS_EUNSUPPORTED, "POSIX classes and set operations are not "
                  "supported");
            goto done;
        }
        hi = lo;
        if (at(p, '-') && p->pos + 1 < p->n && p->s[p->pos + 1] != ']') {
            size_t dash = p->pos++;
            int k2 = at(p, '\\') ? (p->pos++, read_escape(p, dash + 1, &hi, &cls)) : read_raw(p, &hi);
            if (k2 < 0)
                goto done;
            if (k2 == ESC_CLASS) {
                failf(p, dash, RS_EINVAL, "a range cannot end in a class escape");
                goto done;
            }
            if (hi < lo) {
                failf(p, dash, RS_EINVAL, "range out of order");
                goto done;
            }
        }
        if (set_add(p, &c, lo, hi))
            goto done;
    }
    p->pos++;
    out = class_node(p, &c, negate);
done:
    free(c.r);
    return out;
}

static uint32_t parse_alt(struct rp *p);

static uint32_t parse_group(struct rp *p)
{
    size_t start = p->pos++;
    if (at(p, '?')) {
        p->pos++;
        if (at(p, ':')) {
            p->pos++;
        } else if (at(p, '<') && p->pos + 1 < p->n && p->s[p->pos + 1] != '=' &&
                   p->s[p->pos + 1] != '!') {
            while (p->pos < p->n && p->s[p->pos] != '>')
                p->pos++;
            if (!at(p, '>'))
                return failf(p, start, RS_EINVAL, "unterminated group name"), GX_NONE;
            p->pos++;
        } else if (at(p, 'P') && p->pos + 1 < p->n && p->s[p->pos + 1] == '<') {
            return failf(p, start, RS_EUNSUPPORTED, "(?P<name>...) is Python-only; write "
                         "(?<name>...)"), GX_NONE;
        } else if (at(p, '=') || at(p, '!') || at(p, '<')) {
            return failf(p, start, RS_EUNSUPPORTED, "lookaround is not supported"), GX_NONE;
        } else {
            return failf(p, start, RS_EUNSUPPORTED, "inline flags and (?...) extensions are "
                         "not supported"), GX_NONE;
        }
    }
    if (++p->depth > p->max_depth)
        return failf(p, start, RS_ERANGE, "groups nested deeper than %u", p->max_depth), GX_NONE;
    uint32_t body = parse_alt(p);
    p->depth--;
    if (body == GX_NONE)
        return GX_NONE;
    if (!at(p, ')'))
        return failf(p, start, RS_EINVAL, "'(' is not closed"), GX_NONE;
    p->pos++;
    return body;
}

static uint32_t parse_atom(struct rp *p)
{
    size_t start = p->pos;
    char c = p->s[p->pos];
    if (c == '(')
        return parse_group(p);
    if (c == '[')
        return parse_class(p);
    if (c == '.') {
        static const uint32_t not_dot[] = {'\n', '\n', '\r', '\r', 0x2028, 0x2029};
        struct cpset s = {0};
        p->pos++;
        if (set_add_all(p, &s, not_dot, 3))
            return GX_NONE;
        uint32_t out = class_node(p, &s, 1);
        free(s.r);
        return out;
    }
    if (c == '^' || c == '$')
        return failf(p, start, RS_EUNSUPPORTED, "'%c' is supported only at the very %s of the "
                     "pattern", c, c == '^' ? "start" : "end"), GX_NONE;
    if (c == '*' || c == '+' || c == '?')
        return failf(p, start, RS_EINVAL, "'%c' has nothing to repeat", c), GX_NONE;
    if (c == '{')
        return failf(p, start, RS_EINVAL, "'{' is not a valid quantifier here (write '\\{')"),
               GX_NONE;
    if (c == ')')
        return failf(p, start, RS_EINVAL, "unmatched ')'"), GX_NONE;
    if (c == ']' || c == '}')
        return failf(p, start, RS_EINVAL, "unmatched '%c' (write '\\%c')", c, c), GX_NONE;
    uint32_t cp;
    if (c == '\\') {
        char cls = 0;
        p->pos++;
        int k = read_escape(p, start, &cp, &cls);
        if (k < 0)
            return GX_NONE;
        if (k == ESC_CLASS) {
            struct cpset s = {0};
            uint32_t out = add_class_escape(p, &s, cls, 0) ? GX_NONE : class_node(p, &s, 0);
            free(s.r);
            return out;
        }
        return char_node(p, cp);
    }
    if (read_raw(p, &cp))
        return GX_NONE;
    return char_node(p, cp);
}

static int read_uint(struct rp *p, uint32_t *v)
{
    size_t start = p->pos;
    uint64_t x = 0;
    while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        x = x * 10 + (uint64_t)(p->s[p->pos++] - '0');
        if (x > p->ir->lim->max_repeat)
            return failf(p, start, RS_ERANGE, "repetition count above the limit %u",
                         p->ir->lim->max_repeat);
    }
    *v = (uint32_t)x;
    return p->pos > start ? 0 : 1;
}

/* A quantifier at pos: 1 found (min/max set), 0 none, -1 error. */
static int parse_quant(struct rp *p, uint32_t *min, uint32_t *max)
{
    size_t start = p->pos;
    char c = p->pos < p->n ? p->s[p->pos] : '\0';
    if (c == '*' || c == '+' || c == '?') {
        p->pos++;
        *min = c == '+';
        *max = c == '?' ? 1 : GX_INF;
    } else if (c == '{') {
        p->pos++;
        int r = read_uint(p, min);
        if (r != 0)
            return r < 0 ? -1 : failf(p, start, RS_EINVAL, "'{' is not a valid quantifier "
                                      "(write '\\{', or {m}, {m,} or {m,n})");
        *max = *min;
        if (at(p, ',')) {
            p->pos++;
            r = read_uint(p, max);
            if (r < 0)
                return -1;
            if (r == 1)
                *max = GX_INF;
        }
        if (!at(p, '}'))
            return failf(p, start, RS_EINVAL, "unterminated quantifier");
        p->pos++;
        if (*max < *min)
            return failf(p, start, RS_EINVAL, "quantifier {%u,%u} has max below min", *min, *max);
    } else {
        return 0;
    }
    if (at(p, '?'))
        p->pos++; /* lazy: same strings */
    else if (at(p, '+'))
        return failf(p, p->pos, RS_EUNSUPPORTED, "possessive quantifiers are not supported");
    return 1;
}

static uint32_t parse_seq(struct rp *p)
{
    struct gx_list items = {0};
    uint32_t out = GX_NONE;
    while (p->pos < p->n && !at(p, '|') && !at(p, ')')) {
        if (at(p, '$') && p->pos + 1 == p->n && p->depth == 0)
            break;
        uint32_t atom = parse_atom(p);
        if (atom == GX_NONE)
            goto done;
        uint32_t min, max;
        int q = parse_quant(p, &min, &max);
        if (q < 0)
            goto done;
        if (q > 0) {
            atom = gx_rep(p->ir, atom, min, max);
            char c = p->pos < p->n ? p->s[p->pos] : '\0';
            if (c == '*' || c == '+' || c == '?' || c == '{') { /* both dialects refuse "a**" */
                failf(p, p->pos, RS_EINVAL, "'%c' has nothing to repeat", c);
                goto done;
            }
        }
        if (gx_list_push(p->ir, &items, atom))
            goto done;
    }
    out = gx_seq(p->ir, items.v, items.n);
done:
    gx_list_free(&items);
    return out;
}

static uint32_t parse_alt(struct rp *p)
{
    struct gx_list alts = {0};
    uint32_t out = GX_NONE;
    for (;;) {
        uint32_t seq = parse_seq(p);
        if (seq == GX_NONE || gx_list_push(p->ir, &alts, seq))
            goto done;
        if (!at(p, '|'))
            break;
        p->pos++;
    }
    out = gx_alt(p->ir, alts.v, alts.n);
done:
    gx_list_free(&alts);
    return out;
}

rs_err gx_regex_parse(struct gx_ir *ir, const char *re, size_t len, int flavour,
                      const char *where, uint32_t *out, char *err, size_t err_len)
{
    struct rp p = {ir, re, len, 0, flavour == GX_RE_JSON_BODY, 0, ir->lim->max_nesting * 4,
                   where ? where : "", err, err_len, RS_OK};
    if (len > ir->lim->max_text)
        return failf(&p, 0, RS_ERANGE, "pattern longer than %zu bytes", ir->lim->max_text), p.rc;
    if (at(&p, '^'))
        p.pos++;
    uint32_t node = parse_alt(&p);
    if (node != GX_NONE && at(&p, '$'))
        p.pos++;
    if (node != GX_NONE && p.pos < p.n)
        failf(&p, p.pos, RS_EINVAL, "unmatched ')'");
    if (p.rc != RS_OK)
        return p.rc;
    if (node == GX_NONE || ir->err != RS_OK)
        return gx_ir_error(ir, err, err_len);
    *out = node;
    return RS_OK;
}

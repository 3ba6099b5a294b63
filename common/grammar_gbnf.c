/* SPDX-License-Identifier: MIT */
/*
 * GBNF parser (llama.cpp's grammar syntax) into the grammar IR. Rules are
 * `name ::= alternatives`, one per line (a body continues over newlines only
 * after `|`, inside parentheses and right after `::=`); elements are "literal"
 * strings, [character classes] with ranges and ^negation, `.` (any character),
 * rule names and (groups), each optionally followed by *, +, ?, {m}, {m,},
 * {m,n} or {,n}; `#` starts a comment. Escapes: \n \r \t \\ \" \[ \] \xHH
 * \uHHHH \UHHHHHHHH (code points, as llama.cpp). Names also take '_'. The
 * start rule is "root". Every error names line and column (bytes, from 1).
 * Leaves out: llama.cpp's token references (<[id]>, <name>), refused.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar_impl.h"
#include "common/utf8.h"

struct gp {
    struct gx_ir *ir;
    const char *s;
    size_t n, pos;
    uint32_t depth, max_depth;
    char *err;
    size_t err_len;
    rs_err rc;
};

/* line:column of offset off. */
static void line_col(const char *s, size_t off, uint32_t *line, uint32_t *col)
{
    uint32_t l = 1, c = 1;
    for (size_t i = 0; i < off; i++) {
        if (s[i] == '\n')
            l++, c = 1;
        else
            c++;
    }
    *line = l;
    *col = c;
}

static int failf(struct gp *p, size_t at, rs_err rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int failf(struct gp *p, size_t at, rs_err rc, const char *fmt, ...)
{
    if (p->rc != RS_OK)
        return -1;
    uint32_t line, col;
    line_col(p->s, at, &line, &col);
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    gx_fail(p->err, p->err_len, rc, "line %u, column %u: %s", line, col, msg);
    p->rc = rc;
    return -1;
}

static int ir_failed(struct gp *p)
{
    if (p->ir->err == RS_OK)
        return 0;
    if (p->rc == RS_OK)
        p->rc = gx_ir_error(p->ir, p->err, p->err_len);
    return 1;
}

static int is_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

static int at(const struct gp *p, char c)
{
    return p->pos < p->n && p->s[p->pos] == c;
}

static void skip_space(struct gp *p, int newline_ok)
{
    while (p->pos < p->n) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->n && p->s[p->pos] != '\n' && p->s[p->pos] != '\r')
                p->pos++;
        } else {
            break;
        }
    }
}

static int hex_digits(struct gp *p, unsigned n, uint32_t *out)
{
    uint32_t v = 0;
    for (unsigned i = 0; i < n; i++) {
        if (p->pos >= p->n)
            return failf(p, p->pos, RS_EINVAL, "expected %u hex digits, got end of text", n);
        char c = p->s[p->pos];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0)
            return failf(p, p->pos, RS_EINVAL, "expected a hex digit, got '%c'", c);
        v = v * 16 + (uint32_t)d;
        p->pos++;
    }
    *out = v;
    return 0;
}

/* One character of a literal or class (escapes decoded) as a code point. */
static int read_char(struct gp *p, uint32_t *cp)
{
    size_t start = p->pos;
    if (p->pos >= p->n)
        return failf(p, start, RS_EINVAL, "unexpected end of text");
    if (p->s[p->pos] != '\\') {
        size_t k = rs_utf8_next(p->s + p->pos, p->n - p->pos, cp);
        if (*cp == RS_UTF8_INVALID)
            return failf(p, start, RS_EINVAL, "invalid UTF-8");
        p->pos += k;
        return 0;
    }
    p->pos++;
    if (p->pos >= p->n)
        return failf(p, start, RS_EINVAL, "unfinished escape at end of text");
    char e = p->s[p->pos++];
    static const char simple_in[] = "nrt\\\"[]-^", simple_out[] = "\n\r\t\\\"[]-^";
    const char *q = strchr(simple_in, e);
    if (q != NULL && e != '\0') {
        *cp = (uint8_t)simple_out[q - simple_in];
        return 0;
    }
    unsigned digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits == 0)
        return failf(p, start, RS_EINVAL, "unknown escape '\\%c'", e);
    if (hex_digits(p, digits, cp))
        return -1;
    if (*cp > GX_MAX_CP || (*cp >= 0xD800 && *cp <= 0xDFFF))
        return failf(p, start, RS_EINVAL, "escape U+%04X is not a Unicode scalar value", *cp);
    return 0;
}

static uint32_t parse_literal(struct gp *p)
{
    size_t start = p->pos++;
    char buf[256];
    size_t nb = 0;
    struct gx_list parts = {0};
    uint32_t out = GX_NONE;
    while (!at(p, '"')) {
        uint32_t cp;
        if (p->pos >= p->n || p->s[p->pos] == '\n') {
            failf(p, start, RS_EINVAL, "unterminated string literal");
            goto done;
        }
        if (read_char(p, &cp))
            goto done;
        if (nb + 4 > sizeof(buf)) {
            if (gx_list_push(p->ir, &parts, gx_bytes(p->ir, buf, nb)))
                goto done;
            nb = 0;
        }
        nb += rs_utf8_encode(cp, buf + nb);
    }
    p->pos++;
    if (gx_list_push(p->ir, &parts, gx_bytes(p->ir, buf, nb)) == 0)
        out = gx_seq(p->ir, parts.v, parts.n);
done:
    gx_list_free(&parts);
    return out;
}

static uint32_t parse_class(struct gp *p)
{
    size_t start = p->pos++;
    int negate = 0;
    if (at(p, '^'))
        negate = 1, p->pos++;
    uint32_t *r = NULL;
    size_t n = 0, cap = 0;
    uint32_t out = GX_NONE;
    while (!at(p, ']')) {
        uint32_t lo, hi;
        if (p->pos >= p->n) {
            failf(p, start, RS_EINVAL, "unterminated character class");
            goto done;
        }
        if (read_char(p, &lo))
            goto done;
        hi = lo;
        if (at(p, '-') && p->pos + 1 < p->n && p->s[p->pos + 1] != ']') {
            size_t dash = p->pos++;
            if (read_char(p, &hi))
                goto done;
            if (hi < lo) {
                failf(p, dash, RS_EINVAL, "character range U+%04X-U+%04X is reversed", lo, hi);
                goto done;
            }
        }
        if (GX_PUSH(r, n, cap, lo) || GX_PUSH(r, n, cap, hi)) {
            p->ir->err = RS_ENOMEM;
            goto done;
        }
    }
    p->pos++;
    out = gx_class(p->ir, r, n / 2, negate);
done:
    free(r);
    return out;
}

static uint32_t parse_alternates(struct gp *p, int nested);

static uint32_t parse_name_ref(struct gp *p)
{
    size_t start = p->pos;
    while (p->pos < p->n && is_word(p->s[p->pos]))
        p->pos++;
    uint32_t rule = gx_rule_get(p->ir, p->s + start, p->pos - start);
    if (rule == GX_NONE)
        return GX_NONE;
    struct gx_rule *r = &p->ir->rules[rule];
    if (r->body == GX_NONE && r->line == 0)
        line_col(p->s, start, &r->line, &r->col);
    return gx_ref(p->ir, rule);
}

static uint32_t parse_group(struct gp *p)
{
    size_t start = p->pos++;
    if (++p->depth > p->max_depth) {
        failf(p, start, RS_ERANGE, "parentheses nested deeper than %u", p->max_depth);
        return GX_NONE;
    }
    skip_space(p, 1);
    uint32_t body = parse_alternates(p, 1);
    p->depth--;
    if (body == GX_NONE)
        return GX_NONE;
    if (!at(p, ')')) {
        failf(p, start, RS_EINVAL, "'(' is not closed");
        return GX_NONE;
    }
    p->pos++;
    return body;
}

/* One element, or GX_NONE with *none set when no element starts here. */
static uint32_t parse_atom(struct gp *p, int *none)
{
    *none = 0;
    char c = p->pos < p->n ? p->s[p->pos] : '\0';
    if (c == '"')
        return parse_literal(p);
    if (c == '[')
        return parse_class(p);
    if (c == '(')
        return parse_group(p);
    if (c == '.') {
        p->pos++;
        return gx_class(p->ir, NULL, 0, 1);
    }
    if (c == '<') {
        failf(p, p->pos, RS_EUNSUPPORTED, "token references (<...>) are not supported");
        return GX_NONE;
    }
    if (p->pos < p->n && is_word(c))
        return parse_name_ref(p);
    *none = 1;
    return GX_NONE;
}

static int parse_count(struct gp *p, uint32_t *v)
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
    return p->pos > start ? 0 : 1; /* 1: no digits */
}

/* {m}, {m,}, {m,n}, {,n} after '{'. */
static int parse_braces(struct gp *p, uint32_t *min, uint32_t *max)
{
    size_t start = p->pos++;
    skip_space(p, 0);
    int no_min = parse_count(p, min);
    if (no_min < 0)
        return -1;
    if (no_min)
        *min = 0;
    skip_space(p, 0);
    *max = *min;
    if (at(p, ',')) {
        p->pos++;
        skip_space(p, 0);
        int no_max = parse_count(p, max);
        if (no_max < 0)
            return -1;
        if (no_max && no_min)
            return failf(p, start, RS_EINVAL, "expected a count in '{...}'");
        if (no_max)
            *max = GX_INF;
        skip_space(p, 0);
    } else if (no_min) {
        return failf(p, start, RS_EINVAL, "expected a count in '{...}'");
    }
    if (!at(p, '}'))
        return failf(p, start, RS_EINVAL, "expected '}' closing the repetition");
    p->pos++;
    if (*max < *min)
        return failf(p, start, RS_EINVAL, "repetition {%u,%u} has max below min", *min, *max);
    return 0;
}

/* Applies repetition operators following an element. */
static uint32_t parse_postfix(struct gp *p, uint32_t atom, int nested)
{
    for (;;) {
        char c = p->pos < p->n ? p->s[p->pos] : '\0';
        uint32_t min, max;
        if (c == '*')
            min = 0, max = GX_INF, p->pos++;
        else if (c == '+')
            min = 1, max = GX_INF, p->pos++;
        else if (c == '?')
            min = 0, max = 1, p->pos++;
        else if (c == '{') {
            if (parse_braces(p, &min, &max))
                return GX_NONE;
        } else
            return atom;
        atom = gx_rep(p->ir, atom, min, max);
        skip_space(p, nested);
    }
}

static uint32_t parse_sequence(struct gp *p, int nested)
{
    struct gx_list items = {0};
    uint32_t out = GX_NONE;
    for (;;) {
        int none;
        char c = p->pos < p->n ? p->s[p->pos] : '\0';
        if (c == '*' || c == '+' || c == '?' || c == '{') {
            failf(p, p->pos, RS_EINVAL, "'%c' has no element before it to repeat", c);
            goto done;
        }
        uint32_t atom = parse_atom(p, &none);
        if (none)
            break;
        if (atom == GX_NONE)
            goto done;
        skip_space(p, nested);
        atom = parse_postfix(p, atom, nested);
        if (atom == GX_NONE || gx_list_push(p->ir, &items, atom))
            goto done;
    }
    out = gx_seq(p->ir, items.v, items.n);
done:
    gx_list_free(&items);
    return out;
}

static uint32_t parse_alternates(struct gp *p, int nested)
{
    struct gx_list alts = {0};
    uint32_t out = GX_NONE;
    for (;;) {
        uint32_t seq = parse_sequence(p, nested);
        if (seq == GX_NONE || gx_list_push(p->ir, &alts, seq))
            goto done;
        if (!at(p, '|'))
            break;
        p->pos++;
        skip_space(p, 1);
    }
    out = gx_alt(p->ir, alts.v, alts.n);
done:
    gx_list_free(&alts);
    return out;
}

static int parse_rule(struct gp *p)
{
    size_t start = p->pos;
    while (p->pos < p->n && is_word(p->s[p->pos]))
        p->pos++;
    if (p->pos == start) {
        if (p->s[start] == '<')
            return failf(p, start, RS_EUNSUPPORTED, "token references (<...>) are not supported");
        return failf(p, start, RS_EINVAL, "expected a rule name");
    }
    size_t name_end = p->pos;
    skip_space(p, 0);
    if (p->n - p->pos < 3 || memcmp(p->s + p->pos, "::=", 3) != 0)
        return failf(p, p->pos, RS_EINVAL, "expected '::=' after rule name '%.*s'",
                     (int)(name_end - start > 64 ? 64 : name_end - start), p->s + start);
    p->pos += 3;
    uint32_t rule = gx_rule_get(p->ir, p->s + start, name_end - start);
    if (rule == GX_NONE) {
        ir_failed(p);
        return -1;
    }
    if (p->ir->rules[rule].body != GX_NONE)
        return failf(p, start, RS_EINVAL, "rule '%.*s' is defined twice",
                     (int)(name_end - start > 64 ? 64 : name_end - start), p->s + start);
    skip_space(p, 1);
    uint32_t body = parse_alternates(p, 0);
    if (body == GX_NONE)
        return -1;
    struct gx_rule *r = &p->ir->rules[rule];
    r->body = body;
    line_col(p->s, start, &r->line, &r->col);
    if (p->pos < p->n && p->s[p->pos] != '\n' && p->s[p->pos] != '\r')
        return failf(p, p->pos, RS_EINVAL, "unexpected '%c' (expected '|', an element or the "
                     "end of the line)", p->s[p->pos]);
    skip_space(p, 1);
    return 0;
}

/* Every referenced rule defined, and a root. */
static int check_rules(struct gp *p)
{
    for (size_t i = 0; i < p->ir->n_rules; i++) {
        const struct gx_rule *r = &p->ir->rules[i];
        if (r->body != GX_NONE)
            continue;
        size_t len;
        const char *name = gx_rule_name(p->ir, (uint32_t)i, &len);
        gx_fail(p->err, p->err_len, RS_EINVAL, "line %u, column %u: undefined rule '%.*s'",
                r->line, r->col, (int)(len > 64 ? 64 : len), name);
        return -1;
    }
    for (size_t i = 0; i < p->ir->n_rules; i++) {
        size_t len;
        const char *name = gx_rule_name(p->ir, (uint32_t)i, &len);
        if (len == 4 && memcmp(name, "root", 4) == 0)
            return 0;
    }
    gx_fail(p->err, p->err_len, RS_EINVAL, "line 1, column 1: the grammar has no rule 'root'");
    return -1;
}

rs_err gx_parse_gbnf(struct gx_ir *ir, const char *text, size_t len, char *err, size_t err_len)
{
    struct gp p = {ir, text, len, 0, 0, ir->lim->max_nesting * 4, err, err_len, RS_OK};
    if (memchr(text, '\0', len) != NULL)
        return failf(&p, (size_t)((const char *)memchr(text, '\0', len) - text), RS_EINVAL,
                     "NUL byte in the grammar"), p.rc;
    skip_space(&p, 1);
    while (p.pos < p.n) {
        if (parse_rule(&p)) {
            if (p.rc == RS_OK)
                ir_failed(&p);
            return p.rc != RS_OK ? p.rc : RS_EINVAL;
        }
    }
    if (ir_failed(&p))
        return p.rc;
    if (check_rules(&p))
        return RS_EINVAL;
    return RS_OK;
}

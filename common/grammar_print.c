/* SPDX-License-Identifier: MIT */
/*
 * rs_grammar_print: the grammar's IR written back as GBNF (every rule with a
 * body, root first), so what the JSON schema, regex and choice front ends
 * produced can be read, logged and fed back to the GBNF parser. Literals are
 * printed as their bytes with GBNF escapes for quotes, backslashes and
 * controls; classes as code point ranges. Leaves out: layout beyond one rule
 * per line.
 */
#include <stdio.h>
#include <string.h>

#include "common/grammar_impl.h"

struct out {
    char *p;
    size_t cap, n;
};

static void put(struct out *o, const char *s, size_t n)
{
    if (o->n < o->cap) {
        size_t k = o->cap - o->n < n ? o->cap - o->n : n;
        memcpy(o->p + o->n, s, k);
    }
    o->n += n;
}

static void puts_(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

/* One code point or byte as GBNF literal/class text. */
static void put_char(struct out *o, uint32_t c, int in_class)
{
    char b[16];
    if (c == '"' || c == '\\' || (in_class && (c == ']' || c == '-' || c == '^' || c == '[')))
        snprintf(b, sizeof(b), "\\%c", (char)c);
    else if (c == '\n')
        snprintf(b, sizeof(b), "\\n");
    else if (c == '\t')
        snprintf(b, sizeof(b), "\\t");
    else if (c == '\r')
        snprintf(b, sizeof(b), "\\r");
    else if (c < 0x20 || c == 0x7F)
        snprintf(b, sizeof(b), "\\x%02X", c);
    else if (c < 0x80)
        snprintf(b, sizeof(b), "%c", (char)c);
    else if (c <= 0xFFFF)
        snprintf(b, sizeof(b), "\\u%04X", c);
    else
        snprintf(b, sizeof(b), "\\U%08X", c);
    puts_(o, b);
}

static void put_node(struct out *o, const struct gx_ir *ir, uint32_t id, int paren, int depth);

static void put_bytes(struct out *o, const struct gx_ir *ir, const struct gx_node *nd)
{
    puts_(o, "\"");
    for (uint32_t i = 0; i < nd->b;) {
        const uint8_t *s = ir->bytes + nd->a + i;
        uint32_t n = nd->b - i, cp, k = 1;
        /* decode UTF-8 so non-ASCII prints as one \u escape (the literal holds valid UTF-8) */
        if (s[0] < 0x80) {
            cp = s[0];
        } else if (s[0] >= 0xF0 && n >= 4) {
            cp = (uint32_t)(s[0] & 7) << 18 | (uint32_t)(s[1] & 63) << 12 |
                 (uint32_t)(s[2] & 63) << 6 | (s[3] & 63), k = 4;
        } else if (s[0] >= 0xE0 && n >= 3) {
            cp = (uint32_t)(s[0] & 15) << 12 | (uint32_t)(s[1] & 63) << 6 | (s[2] & 63), k = 3;
        } else if (s[0] >= 0xC0 && n >= 2) {
            cp = (uint32_t)(s[0] & 31) << 6 | (s[1] & 63), k = 2;
        } else {
            cp = s[0];
        }
        put_char(o, cp, 0);
        i += k;
    }
    puts_(o, "\"");
}

static void put_class(struct out *o, const struct gx_ir *ir, const struct gx_node *nd)
{
    puts_(o, "[");
    for (uint32_t i = 0; i < nd->b; i++) {
        uint32_t lo = ir->ranges[2 * (nd->a + i)], hi = ir->ranges[2 * (nd->a + i) + 1];
        put_char(o, lo, 1);
        if (hi != lo) {
            puts_(o, "-");
            put_char(o, hi, 1);
        }
    }
    if (nd->b == 0) /* matches nothing: an empty negated-everything class */
        puts_(o, "^\\x00-\\U0010FFFF");
    puts_(o, "]");
}

static void put_list(struct out *o, const struct gx_ir *ir, const struct gx_node *nd, int depth)
{
    int alt = nd->kind == GX_ALT;
    for (uint32_t i = 0; i < nd->b; i++) {
        if (i > 0)
            puts_(o, alt ? " | " : " ");
        put_node(o, ir, ir->kids[nd->a + i], !alt, depth + 1);
    }
}

static void put_node(struct out *o, const struct gx_ir *ir, uint32_t id, int paren, int depth)
{
    const struct gx_node *nd = &ir->nodes[id];
    char b[48];
    size_t len;
    if (depth > 4096) {
        puts_(o, "...");
        return;
    }
    switch (nd->kind) {
    case GX_EMPTY:
        puts_(o, "\"\"");
        return;
    case GX_BYTES:
        put_bytes(o, ir, nd);
        return;
    case GX_CLASS:
        put_class(o, ir, nd);
        return;
    case GX_REF: {
        const char *name = gx_rule_name(ir, nd->a, &len);
        put(o, name, len);
        return;
    }
    case GX_SEQ:
    case GX_ALT:
        if (paren || nd->kind == GX_ALT)
            puts_(o, "(");
        put_list(o, ir, nd, depth);
        if (paren || nd->kind == GX_ALT)
            puts_(o, ")");
        return;
    default:
        if (paren == 2)
            puts_(o, "(");
        put_node(o, ir, nd->a, 2, depth + 1);
        if (nd->c == GX_INF)
            snprintf(b, sizeof(b), nd->b == 0 ? "*" : nd->b == 1 ? "+" : "{%u,}", nd->b);
        else if (nd->b == 0 && nd->c == 1)
            snprintf(b, sizeof(b), "?");
        else if (nd->b == nd->c)
            snprintf(b, sizeof(b), "{%u}", nd->b);
        else
            snprintf(b, sizeof(b), "{%u,%u}", nd->b, nd->c);
        puts_(o, b);
        if (paren == 2)
            puts_(o, ")");
    }
}

static void put_rule(struct out *o, const struct gx_ir *ir, uint32_t r)
{
    size_t len;
    const char *name = gx_rule_name(ir, r, &len);
    put(o, name, len);
    puts_(o, " ::= ");
    const struct gx_node *nd = &ir->nodes[ir->rules[r].body];
    if (nd->kind == GX_ALT)
        put_list(o, ir, nd, 0);
    else
        put_node(o, ir, ir->rules[r].body, 0, 0);
    puts_(o, "\n");
}

rs_err rs_grammar_print(const rs_grammar *g, char *buf, size_t cap, size_t *n)
{
    struct out o = {buf, cap ? cap - 1 : 0, 0};
    const struct gx_ir *ir = &g->ir;
    uint32_t root = g->a.rule_name[g->a.root];
    put_rule(&o, ir, root);
    for (uint32_t r = 0; r < ir->n_rules; r++)
        if (r != root && ir->rules[r].body != GX_NONE)
            put_rule(&o, ir, r);
    *n = o.n;
    if (cap > 0)
        buf[o.n < cap ? o.n : cap - 1] = '\0';
    return o.n < cap ? RS_OK : RS_ERANGE;
}

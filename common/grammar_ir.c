/* SPDX-License-Identifier: MIT */
/*
 * The grammar expression IR every front end builds (GBNF, JSON schema, regex,
 * choice): named rules whose bodies are trees of byte strings, code point
 * classes, rule references, sequences, alternatives and bounded repetitions.
 * Code point classes are normalized here (sorted, merged, negation resolved,
 * surrogates removed) so later stages see one form. Errors are sticky in the
 * IR (out of memory, too many rules or nodes) and reported once at the end.
 * Leaves out: turning the IR into automata (grammar_nfa.c, grammar_dfa.c).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar_impl.h"

#define GX_MAX_NODES (1u << 22) /* IR nodes per grammar; text limits keep real ones far below */

int gx_reserve(void **p, size_t *cap, size_t need, size_t esz)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 16;
    while (nc < need)
        nc *= 2;
    if (nc > SIZE_MAX / esz)
        return -1;
    void *q = realloc(*p, nc * esz);
    if (q == NULL)
        return -1;
    *p = q;
    *cap = nc;
    return 0;
}

rs_err gx_fail(char *err, size_t err_len, rs_err rc, const char *fmt, ...)
{
    if (err != NULL && err_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return rc;
}

rs_err gx_ir_error(const struct gx_ir *ir, char *err, size_t err_len)
{
    if (ir->err == RS_ENOMEM)
        return gx_fail(err, err_len, RS_ENOMEM, "out of memory building the grammar");
    return gx_fail(err, err_len, RS_ERANGE,
                   "grammar too large: more than %u rules or %u expression nodes",
                   ir->lim->max_rules, GX_MAX_NODES);
}

void gx_ir_init(struct gx_ir *ir, const struct rs_grammar_limits *lim)
{
    memset(ir, 0, sizeof(*ir));
    ir->lim = lim;
}

void gx_ir_fini(struct gx_ir *ir)
{
    free(ir->nodes);
    free(ir->bytes);
    free(ir->ranges);
    free(ir->kids);
    free(ir->rules);
    free(ir->names);
    memset(ir, 0, sizeof(*ir));
}

static uint32_t node_add(struct gx_ir *ir, uint8_t kind, uint32_t a, uint32_t b, uint32_t c)
{
    if (ir->err != RS_OK)
        return GX_NONE;
    if (ir->n_nodes >= GX_MAX_NODES) {
        ir->err = RS_ERANGE;
        return GX_NONE;
    }
    struct gx_node nd = {kind, a, b, c};
    if (GX_PUSH(ir->nodes, ir->n_nodes, ir->cap_nodes, nd) != 0) {
        ir->err = RS_ENOMEM;
        return GX_NONE;
    }
    return (uint32_t)(ir->n_nodes - 1);
}

uint32_t gx_empty(struct gx_ir *ir)
{
    return node_add(ir, GX_EMPTY, 0, 0, 0);
}

uint32_t gx_bytes(struct gx_ir *ir, const void *s, size_t n)
{
    if (n == 0)
        return gx_empty(ir);
    if (ir->err != RS_OK)
        return GX_NONE;
    if (n > UINT32_MAX / 2 ||
        gx_reserve((void **)&ir->bytes, &ir->cap_bytes, ir->n_bytes + n, 1) != 0) {
        ir->err = RS_ENOMEM;
        return GX_NONE;
    }
    memcpy(ir->bytes + ir->n_bytes, s, n);
    uint32_t off = (uint32_t)ir->n_bytes;
    ir->n_bytes += n;
    return node_add(ir, GX_BYTES, off, (uint32_t)n, 0);
}

uint32_t gx_str(struct gx_ir *ir, const char *s)
{
    return gx_bytes(ir, s, strlen(s));
}

static int cmp_range(const void *x, const void *y)
{
    const uint32_t *a = x, *b = y;
    return a[0] < b[0] ? -1 : a[0] > b[0];
}

/* Sorts and merges n pairs in place; returns the pairs left. */
static size_t ranges_normalize(uint32_t *r, size_t n)
{
    qsort(r, n, 2 * sizeof(uint32_t), cmp_range);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t lo = r[2 * i], hi = r[2 * i + 1];
        if (k > 0 && lo <= r[2 * k - 1] + 1) {
            if (hi > r[2 * k - 1])
                r[2 * k - 1] = hi;
        } else {
            r[2 * k] = lo;
            r[2 * k + 1] = hi;
            k++;
        }
    }
    return k;
}

/* Appends pair (lo, hi) to ir->ranges unless empty; 0 or -1. */
static int range_put(struct gx_ir *ir, uint32_t lo, uint32_t hi)
{
    if (lo > hi)
        return 0;
    if (gx_reserve((void **)&ir->ranges, &ir->cap_ranges, ir->n_ranges + 1, 2 * sizeof(uint32_t)))
        return -1;
    ir->ranges[2 * ir->n_ranges] = lo;
    ir->ranges[2 * ir->n_ranges + 1] = hi;
    ir->n_ranges++;
    return 0;
}

/* Appends [lo, hi] minus the surrogates; 0 or -1. */
static int range_put_cut(struct gx_ir *ir, uint32_t lo, uint32_t hi)
{
    if (lo <= 0xDFFF && hi >= 0xD800) {
        if (lo <= 0xD7FF && range_put(ir, lo, 0xD7FF))
            return -1;
        return hi >= 0xE000 ? range_put(ir, 0xE000, hi) : 0;
    }
    return range_put(ir, lo, hi);
}

/* Appends normalized r (n pairs, hi <= U+10FFFF), complemented if negate. */
static int ranges_emit(struct gx_ir *ir, const uint32_t *r, size_t n, int negate)
{
    if (!negate) {
        for (size_t i = 0; i < n; i++)
            if (range_put_cut(ir, r[2 * i], r[2 * i + 1]))
                return -1;
        return 0;
    }
    uint32_t next = 0; /* first code point not covered by r[0..i) */
    for (size_t i = 0; i < n; i++) {
        if (r[2 * i] > next && range_put_cut(ir, next, r[2 * i] - 1))
            return -1;
        next = r[2 * i + 1] + 1;
    }
    return next <= GX_MAX_CP ? range_put_cut(ir, next, GX_MAX_CP) : 0;
}

uint32_t gx_class(struct gx_ir *ir, const uint32_t *ranges, size_t n, int negate)
{
    if (ir->err != RS_OK)
        return GX_NONE;
    uint32_t *tmp = malloc((n ? n : 1) * 2 * sizeof(uint32_t));
    if (tmp == NULL) {
        ir->err = RS_ENOMEM;
        return GX_NONE;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t lo = ranges[2 * i], hi = ranges[2 * i + 1];
        if (lo > GX_MAX_CP || lo > hi)
            continue;
        tmp[2 * m] = lo;
        tmp[2 * m + 1] = hi > GX_MAX_CP ? GX_MAX_CP : hi;
        m++;
    }
    size_t k = ranges_normalize(tmp, m);
    size_t off = ir->n_ranges;
    int rc = ranges_emit(ir, tmp, k, negate);
    free(tmp);
    if (rc != 0) {
        ir->err = RS_ENOMEM;
        return GX_NONE;
    }
    return node_add(ir, GX_CLASS, (uint32_t)off, (uint32_t)(ir->n_ranges - off), 0);
}

uint32_t gx_ref(struct gx_ir *ir, uint32_t rule)
{
    if (rule == GX_NONE)
        return GX_NONE;
    return node_add(ir, GX_REF, rule, 0, 0);
}

static uint32_t listed(struct gx_ir *ir, uint8_t kind, const uint32_t *kids, size_t n)
{
    if (ir->err != RS_OK)
        return GX_NONE;
    for (size_t i = 0; i < n; i++)
        if (kids[i] == GX_NONE) {
            if (ir->err == RS_OK)
                ir->err = RS_ENOMEM;
            return GX_NONE;
        }
    if (n == 1)
        return kids[0];
    if (n == 0)
        return kind == GX_SEQ ? gx_empty(ir) : GX_NONE;
    if (gx_reserve((void **)&ir->kids, &ir->cap_kids, ir->n_kids + n, sizeof(uint32_t))) {
        ir->err = RS_ENOMEM;
        return GX_NONE;
    }
    memcpy(ir->kids + ir->n_kids, kids, n * sizeof(uint32_t));
    uint32_t off = (uint32_t)ir->n_kids;
    ir->n_kids += n;
    return node_add(ir, kind, off, (uint32_t)n, 0);
}

uint32_t gx_seq(struct gx_ir *ir, const uint32_t *kids, size_t n)
{
    return listed(ir, GX_SEQ, kids, n);
}

uint32_t gx_alt(struct gx_ir *ir, const uint32_t *kids, size_t n)
{
    return listed(ir, GX_ALT, kids, n);
}

uint32_t gx_seq2(struct gx_ir *ir, uint32_t a, uint32_t b)
{
    uint32_t k[2] = {a, b};
    return gx_seq(ir, k, 2);
}

uint32_t gx_seq3(struct gx_ir *ir, uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t k[3] = {a, b, c};
    return gx_seq(ir, k, 3);
}

uint32_t gx_alt2(struct gx_ir *ir, uint32_t a, uint32_t b)
{
    uint32_t k[2] = {a, b};
    return gx_alt(ir, k, 2);
}

uint32_t gx_rep(struct gx_ir *ir, uint32_t child, uint32_t min, uint32_t max)
{
    if (child == GX_NONE)
        return GX_NONE;
    if (min == 1 && max == 1)
        return child;
    if (max == 0)
        return gx_empty(ir);
    return node_add(ir, GX_REP, child, min, max);
}

static uint32_t rule_add(struct gx_ir *ir, const char *name, size_t len)
{
    if (ir->n_rules >= ir->lim->max_rules) {
        ir->err = RS_ERANGE;
        return GX_NONE;
    }
    if (gx_reserve((void **)&ir->names, &ir->cap_names, ir->n_names + len, 1)) {
        ir->err = RS_ENOMEM;
        return GX_NONE;
    }
    memcpy(ir->names + ir->n_names, name, len);
    struct gx_rule r = {(uint32_t)ir->n_names, (uint32_t)len, GX_NONE, 0, 0, 0, 0, 0};
    ir->n_names += len;
    if (GX_PUSH(ir->rules, ir->n_rules, ir->cap_rules, r)) {
        ir->err = RS_ENOMEM;
        return GX_NONE;
    }
    return (uint32_t)(ir->n_rules - 1);
}

uint32_t gx_rule_get(struct gx_ir *ir, const char *name, size_t len)
{
    if (ir->err != RS_OK)
        return GX_NONE;
    for (size_t i = 0; i < ir->n_rules; i++) /* rule counts are bounded; lookups rare */
        if (ir->rules[i].name_len == len && memcmp(ir->names + ir->rules[i].name_off, name, len) == 0)
            return (uint32_t)i;
    return rule_add(ir, name, len);
}

uint32_t gx_rule_fresh(struct gx_ir *ir, const char *base)
{
    if (ir->err != RS_OK)
        return GX_NONE;
    char name[96];
    int n = snprintf(name, sizeof(name), "%.80s-%zu", base, ir->n_rules);
    return rule_add(ir, name, (size_t)n);
}

const char *gx_rule_name(const struct gx_ir *ir, uint32_t rule, size_t *len)
{
    *len = ir->rules[rule].name_len;
    return ir->names + ir->rules[rule].name_off;
}

void gx_rule_set_origin(struct gx_ir *ir, uint32_t rule, const char *s, size_t len)
{
    if (rule == GX_NONE || ir->err != RS_OK)
        return;
    if (gx_reserve((void **)&ir->names, &ir->cap_names, ir->n_names + len, 1)) {
        ir->err = RS_ENOMEM;
        return;
    }
    memcpy(ir->names + ir->n_names, s, len);
    ir->rules[rule].origin_off = (uint32_t)ir->n_names;
    ir->rules[rule].origin_len = (uint32_t)len;
    ir->n_names += len;
}

void gx_rule_where(const struct gx_ir *ir, uint32_t rule, char *out, size_t cap)
{
    const struct gx_rule *r = &ir->rules[rule];
    size_t len;
    const char *name = gx_rule_name(ir, rule, &len);
    if (r->origin_len > 0)
        snprintf(out, cap, "%.*s", (int)(r->origin_len > 200 ? 200 : r->origin_len),
                 ir->names + r->origin_off);
    else if (r->line > 0)
        snprintf(out, cap, "line %u, column %u (rule '%.*s')", r->line, r->col,
                 (int)(len > 64 ? 64 : len), name);
    else
        snprintf(out, cap, "rule '%.*s'", (int)(len > 64 ? 64 : len), name);
}

int gx_list_push(struct gx_ir *ir, struct gx_list *l, uint32_t node)
{
    if (node == GX_NONE || ir->err != RS_OK) {
        if (ir->err == RS_OK)
            ir->err = RS_ENOMEM;
        return -1;
    }
    if (GX_PUSH(l->v, l->n, l->cap, node)) {
        ir->err = RS_ENOMEM;
        return -1;
    }
    return 0;
}

void gx_list_free(struct gx_list *l)
{
    free(l->v);
    memset(l, 0, sizeof(*l));
}

/* SPDX-License-Identifier: MIT */
/*
 * IR -> byte NFA. Decides which rules keep an automaton of their own: the
 * root, every rule a depth-first walk from the root reaches again while inside
 * it (that breaks every cycle), hoisted repetitions, and rules too large to
 * copy. Every other reference is inlined, so most grammars become a few large
 * per-rule automata whose states see far into the text (which is what makes
 * the token-mask cache decide most tokens without looking at the stack).
 * Code point classes become UTF-8 byte-range sequences sharing their prefixes.
 * Construction keeps one invariant: no edge ever enters a state a fragment
 * was given to start from, so alternatives and loops cannot leak into each other.
 */
#include <stdlib.h>
#include <string.h>

#include "common/grammar_impl.h"

#define INLINE_MAX 20000u    /* NFA states a rule may have and still be copied into callers */
#define HOIST_MIN 64u        /* a repeated expression this large is hoisted into a rule... */
#define HOIST_TOTAL 4096u    /* ...when its copies would exceed this */
#define MAX_WALK_DEPTH 4096u /* IR nesting */

struct nb {
    struct gx_ir *ir; /* repetitions may be hoisted into new rules */
    struct gn_nfa *n;
    uint64_t *size;   /* per IR rule: NFA states when inlined; 0 = not computed */
    uint8_t *mark;    /* per IR rule: DFS 1 on stack, 2 done */
    uint8_t *kept;    /* per IR rule */
    uint32_t *order;  /* rules in DFS postorder */
    uint32_t n_order;
    uint32_t depth;
    rs_err rc;
    char *err;
    size_t err_len;
};

void gn_free(struct gn_nfa **pn)
{
    struct gn_nfa *n = *pn;
    if (n == NULL)
        return;
    free(n->first);
    free(n->edges);
    free(n->kept_ir);
    free(n->ir_kept);
    free(n->kstart);
    free(n->kend);
    free(n);
    *pn = NULL;
}

static int nb_fail(struct nb *b, rs_err rc, const char *msg)
{
    if (b->rc == RS_OK) {
        b->rc = rc;
        gx_fail(b->err, b->err_len, rc, "%s", msg);
    }
    return -1;
}

/* --- UTF-8 byte ranges ---------------------------------------------------------------- */

typedef int (*utf8_emit)(void *ctx, const uint8_t *lo, const uint8_t *hi, int len);

static int enc(uint32_t cp, uint8_t *b)
{
    if (cp < 0x80)
        return b[0] = (uint8_t)cp, 1;
    if (cp < 0x800)
        return b[0] = (uint8_t)(0xC0 | cp >> 6), b[1] = (uint8_t)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000)
        return b[0] = (uint8_t)(0xE0 | cp >> 12), b[1] = (uint8_t)(0x80 | ((cp >> 6) & 63)),
               b[2] = (uint8_t)(0x80 | (cp & 63)), 3;
    b[0] = (uint8_t)(0xF0 | cp >> 18), b[1] = (uint8_t)(0x80 | ((cp >> 12) & 63));
    b[2] = (uint8_t)(0x80 | ((cp >> 6) & 63)), b[3] = (uint8_t)(0x80 | (cp & 63));
    return 4;
}

/* Splits [lo, hi] into ranges whose UTF-8 forms are products of byte ranges. */
static int utf8_split(uint32_t lo, uint32_t hi, utf8_emit emit, void *ctx)
{
    static const uint32_t len_max[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= len_max[i] && hi > len_max[i])
            return utf8_split(lo, len_max[i], emit, ctx) ||
                   utf8_split(len_max[i] + 1, hi, emit, ctx);
    if (hi < 0x80) {
        uint8_t a = (uint8_t)lo, z = (uint8_t)hi;
        return emit(ctx, &a, &z, 1);
    }
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0)
                return utf8_split(lo, lo | m, emit, ctx) || utf8_split((lo | m) + 1, hi, emit, ctx);
            if ((hi & m) != m)
                return utf8_split(lo, (hi & ~m) - 1, emit, ctx) || utf8_split(hi & ~m, hi, emit, ctx);
        }
    }
    uint8_t a[4], z[4];
    int n = enc(lo, a);
    enc(hi, z);
    return emit(ctx, a, z, n);
}

/* --- NFA storage --------------------------------------------------------------------- */

static uint32_t new_state(struct nb *b)
{
    struct gn_nfa *n = b->n;
    if (n->n_states >= n->max_states) {
        nb_fail(b, RS_ERANGE, "grammar too large: its automaton needs more states than the "
                "limit (max_states)");
        return GX_NONE;
    }
    if (n->n_states >= n->cap_states) {
        size_t cap = n->cap_states;
        if (gx_reserve((void **)&n->first, &cap, (size_t)n->n_states + 1, sizeof(uint32_t))) {
            nb_fail(b, RS_ENOMEM, "out of memory building the automaton");
            return GX_NONE;
        }
        n->cap_states = (uint32_t)cap;
    }
    n->first[n->n_states] = GX_NONE;
    return n->n_states++;
}

static int add_edge(struct nb *b, uint32_t from, uint32_t to, uint8_t kind, uint8_t lo, uint8_t hi,
                    uint32_t rule)
{
    struct gn_nfa *n = b->n;
    struct gn_edge e = {to, n->first[from], rule, kind, lo, hi};
    if (GX_PUSH(n->edges, n->n_edges, n->cap_edges, e))
        return nb_fail(b, RS_ENOMEM, "out of memory building the automaton");
    n->first[from] = (uint32_t)(n->n_edges - 1);
    return 0;
}

/* --- which rules keep an automaton ------------------------------------------------------ */

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a + b < a || a + b > UINT64_MAX / 4 ? UINT64_MAX / 4 : a + b;
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    return (b != 0 && a > UINT64_MAX / 4 / b) ? UINT64_MAX / 4 : a * b;
}

static int count_seq(void *ctx, const uint8_t *lo, const uint8_t *hi, int len)
{
    (void)lo, (void)hi;
    *(uint64_t *)ctx += (uint64_t)len;
    return 0;
}

static uint64_t class_size(const struct gx_ir *ir, const struct gx_node *nd)
{
    uint64_t n = 1;
    for (uint32_t i = 0; i < nd->b; i++)
        utf8_split(ir->ranges[2 * (nd->a + i)], ir->ranges[2 * (nd->a + i) + 1], count_seq, &n);
    return n;
}

static uint64_t rep_copies(const struct gx_node *nd)
{
    return nd->c == GX_INF ? (uint64_t)nd->b + 1 : nd->c;
}

/*
 * NFA states node would create. refs: 0 counts a reference as one state (local
 * size), 1 expands references to rules not kept (b->size must be known for them).
 */
static uint64_t node_size(struct nb *b, uint32_t id, int refs, uint32_t depth)
{
    const struct gx_node *nd = &b->ir->nodes[id];
    uint64_t s = 0;
    if (depth > MAX_WALK_DEPTH)
        return UINT64_MAX / 4;
    switch (nd->kind) {
    case GX_EMPTY:
        return 0;
    case GX_BYTES:
        return nd->b;
    case GX_CLASS:
        return class_size(b->ir, nd);
    case GX_REF:
        return refs && !b->kept[nd->a] ? b->size[nd->a] : 1;
    case GX_SEQ:
    case GX_ALT:
        for (uint32_t i = 0; i < nd->b; i++)
            s = sat_add(s, node_size(b, b->ir->kids[nd->a + i], refs, depth + 1));
        return s + (nd->kind == GX_ALT);
    default:
        return sat_add(sat_mul(node_size(b, nd->a, refs, depth + 1), rep_copies(nd)), 2);
    }
}

/* Large repeated expressions become rules of their own (one automaton, called n times). */
static int hoist_repeats(struct nb *b)
{
    size_t n0 = b->ir->n_nodes;
    for (size_t id = 0; id < n0; id++) {
        struct gx_node nd = b->ir->nodes[id];
        if (nd.kind != GX_REP || b->ir->nodes[nd.a].kind == GX_REF)
            continue;
        uint64_t child = node_size(b, nd.a, 0, 0);
        if (child < HOIST_MIN || sat_mul(child, rep_copies(&nd)) <= HOIST_TOTAL)
            continue;
        uint32_t r = gx_rule_fresh(b->ir, "repeat");
        uint32_t ref = gx_ref(b->ir, r);
        if (ref == GX_NONE)
            return -1;
        b->ir->rules[r].body = nd.a;
        b->ir->rules[r].noinline = 1;
        b->ir->nodes[id].a = ref;
    }
    return 0;
}

typedef int (*ref_fn)(struct nb *b, uint32_t rule, const struct gx_node *rep);

/* Calls fn for every reference in node id (rep: the repetition directly around it). */
static int each_ref(struct nb *b, uint32_t id, ref_fn fn, const struct gx_node *rep,
                    uint32_t depth)
{
    const struct gx_node *nd = &b->ir->nodes[id];
    if (depth > MAX_WALK_DEPTH)
        return nb_fail(b, RS_ERANGE, "grammar nested too deeply");
    if (nd->kind == GX_REF)
        return fn(b, nd->a, rep);
    if (nd->kind == GX_SEQ || nd->kind == GX_ALT) {
        for (uint32_t i = 0; i < nd->b; i++)
            if (each_ref(b, b->ir->kids[nd->a + i], fn, NULL, depth + 1))
                return -1;
    } else if (nd->kind == GX_REP) {
        return each_ref(b, nd->a, fn, nd, depth + 1);
    }
    return 0;
}

static int dfs_rule(struct nb *b, uint32_t rule);

static int dfs_visit(struct nb *b, uint32_t rule, const struct gx_node *rep)
{
    (void)rep;
    if (b->mark[rule] == 1) { /* back edge: the target keeps its automaton */
        b->kept[rule] = 1;
        return 0;
    }
    return b->mark[rule] == 0 ? dfs_rule(b, rule) : 0;
}

static int dfs_rule(struct nb *b, uint32_t rule)
{
    if (++b->depth > MAX_WALK_DEPTH)
        return nb_fail(b, RS_ERANGE, "grammar rules nested too deeply");
    b->mark[rule] = 1;
    if (b->ir->rules[rule].noinline)
        b->kept[rule] = 1;
    if (each_ref(b, b->ir->rules[rule].body, dfs_visit, NULL, 0))
        return -1;
    b->mark[rule] = 2;
    b->order[b->n_order++] = rule;
    b->depth--;
    return 0;
}

/* A rule copied many times by a repetition keeps its automaton instead. */
static int keep_repeated(struct nb *b, uint32_t rule, const struct gx_node *rep)
{
    if (rep != NULL && !b->kept[rule] && b->size[rule] >= HOIST_MIN &&
        sat_mul(b->size[rule], rep_copies(rep)) > HOIST_TOTAL)
        b->kept[rule] = 1;
    return 0;
}

/* Sizes in postorder (callees first); rules too large to copy keep their automaton. */
static int decide_kept(struct nb *b)
{
    for (uint32_t i = 0; i < b->n_order; i++) {
        uint32_t r = b->order[i];
        if (each_ref(b, b->ir->rules[r].body, keep_repeated, NULL, 0))
            return -1;
        b->size[r] = sat_add(node_size(b, b->ir->rules[r].body, 1, 0), 2);
        if (b->size[r] > INLINE_MAX)
            b->kept[r] = 1;
    }
    return 0;
}

/* --- construction ------------------------------------------------------------------------ */

/*
 * A class's UTF-8 sequences share their suffixes: the state that reads byte
 * range r and then goes on to state t is made once per (r, t), so the
 * continuation bytes of thousands of ranges (e.g. \W over Unicode) funnel into
 * a few states. Prefixes are merged later by the subset construction.
 */
struct csuffix {
    struct nb *b;
    uint32_t from, end;
    uint64_t *keys; /* (lo, hi, next) packed, + 1; 0 empty */
    uint32_t *vals;
    size_t mask, n;
};

static uint32_t suffix_state(struct csuffix *t, uint8_t lo, uint8_t hi, uint32_t next)
{
    uint64_t k = ((uint64_t)next << 16 | (uint64_t)lo << 8 | hi) + 1;
    if ((t->n + 1) * 2 > t->mask) {
        size_t slots = t->mask ? (t->mask + 1) * 2 : 64;
        uint64_t *nk = calloc(slots, sizeof(uint64_t));
        uint32_t *nv = malloc(slots * sizeof(uint32_t));
        if (nk == NULL || nv == NULL) {
            free(nk), free(nv);
            nb_fail(t->b, RS_ENOMEM, "out of memory building the automaton");
            return GX_NONE;
        }
        for (size_t i = 0; t->keys && i <= t->mask; i++)
            if (t->keys[i]) {
                size_t h = (t->keys[i] * 0x9E3779B97F4A7C15ull >> 20) & (slots - 1);
                while (nk[h])
                    h = (h + 1) & (slots - 1);
                nk[h] = t->keys[i], nv[h] = t->vals[i];
            }
        free(t->keys), free(t->vals);
        t->keys = nk, t->vals = nv, t->mask = slots - 1;
    }
    size_t h = (k * 0x9E3779B97F4A7C15ull >> 20) & t->mask;
    for (; t->keys[h]; h = (h + 1) & t->mask)
        if (t->keys[h] == k)
            return t->vals[h];
    uint32_t st = new_state(t->b);
    if (st == GX_NONE || add_edge(t->b, st, next, GN_BYTE, lo, hi, 0))
        return GX_NONE;
    t->keys[h] = k, t->vals[h] = st, t->n++;
    return st;
}

static int csuffix_emit(void *ctx, const uint8_t *lo, const uint8_t *hi, int len)
{
    struct csuffix *t = ctx;
    uint32_t next = t->end;
    for (int i = len - 1; i >= 1; i--) /* from the last byte back to the second */
        if ((next = suffix_state(t, lo[i], hi[i], next)) == GX_NONE)
            return -1;
    return add_edge(t->b, t->from, next, GN_BYTE, lo[0], hi[0], 0);
}

static uint32_t build_class(struct nb *b, const struct gx_node *nd, uint32_t from)
{
    struct csuffix t = {b, from, new_state(b), NULL, NULL, 0, 0};
    uint32_t out = t.end;
    for (uint32_t i = 0; i < nd->b && out != GX_NONE; i++)
        if (utf8_split(b->ir->ranges[2 * (nd->a + i)], b->ir->ranges[2 * (nd->a + i) + 1],
                       csuffix_emit, &t))
            out = GX_NONE;
    free(t.keys);
    free(t.vals);
    return out;
}

static uint32_t build(struct nb *b, uint32_t id, uint32_t from, uint32_t depth);

static uint32_t build_rep(struct nb *b, const struct gx_node *nd, uint32_t cur, uint32_t depth)
{
    for (uint32_t i = 0; i < nd->b && cur != GX_NONE; i++)
        cur = build(b, nd->a, cur, depth + 1);
    if (cur == GX_NONE)
        return GX_NONE;
    if (nd->c == GX_INF) {
        uint32_t s = new_state(b);
        if (s == GX_NONE || add_edge(b, cur, s, GN_EPS, 0, 0, 0))
            return GX_NONE;
        uint32_t e = build(b, nd->a, s, depth + 1);
        if (e == GX_NONE || add_edge(b, e, s, GN_EPS, 0, 0, 0))
            return GX_NONE;
        return s;
    }
    if (nd->c == nd->b)
        return cur;
    uint32_t end = new_state(b);
    if (end == GX_NONE)
        return GX_NONE;
    for (uint32_t i = nd->b; i < nd->c; i++) {
        if (add_edge(b, cur, end, GN_EPS, 0, 0, 0))
            return GX_NONE;
        if ((cur = build(b, nd->a, cur, depth + 1)) == GX_NONE)
            return GX_NONE;
    }
    return add_edge(b, cur, end, GN_EPS, 0, 0, 0) ? GX_NONE : end;
}

/* Builds node id starting at state from; returns its end state (GX_NONE: error). */
static uint32_t build(struct nb *b, uint32_t id, uint32_t from, uint32_t depth)
{
    const struct gx_node nd = b->ir->nodes[id];
    if (depth > MAX_WALK_DEPTH)
        return nb_fail(b, RS_ERANGE, "grammar nested too deeply"), GX_NONE;
    switch (nd.kind) {
    case GX_EMPTY:
        return from;
    case GX_BYTES: {
        uint32_t cur = from;
        for (uint32_t i = 0; i < nd.b; i++) {
            uint32_t t = new_state(b);
            uint8_t c = b->ir->bytes[nd.a + i];
            if (t == GX_NONE || add_edge(b, cur, t, GN_BYTE, c, c, 0))
                return GX_NONE;
            cur = t;
        }
        return cur;
    }
    case GX_CLASS:
        return build_class(b, &nd, from);
    case GX_REF: {
        if (!b->kept[nd.a])
            return build(b, b->ir->rules[nd.a].body, from, depth + 1);
        uint32_t t = new_state(b);
        if (t == GX_NONE || add_edge(b, from, t, GN_CALL, 0, 0, b->n->ir_kept[nd.a]))
            return GX_NONE;
        return t;
    }
    case GX_SEQ: {
        uint32_t cur = from;
        for (uint32_t i = 0; i < nd.b && cur != GX_NONE; i++)
            cur = build(b, b->ir->kids[nd.a + i], cur, depth + 1);
        return cur;
    }
    case GX_ALT: {
        uint32_t end = new_state(b);
        for (uint32_t i = 0; i < nd.b && end != GX_NONE; i++) {
            uint32_t e = build(b, b->ir->kids[nd.a + i], from, depth + 1);
            if (e == GX_NONE || add_edge(b, e, end, GN_EPS, 0, 0, 0))
                return GX_NONE;
        }
        return end;
    }
    default:
        return build_rep(b, &nd, from, depth);
    }
}

static uint32_t find_root(const struct gx_ir *ir)
{
    for (uint32_t i = 0; i < ir->n_rules; i++) {
        size_t len;
        const char *name = gx_rule_name(ir, i, &len);
        if (len == 4 && memcmp(name, "root", 4) == 0 && ir->rules[i].body != GX_NONE)
            return i;
    }
    return GX_NONE;
}

static int alloc_rule_arrays(struct nb *b, struct gn_nfa *n)
{
    size_t nr = b->ir->n_rules;
    b->size = calloc(nr, sizeof(*b->size));
    b->mark = calloc(nr, 1);
    b->kept = calloc(nr, 1);
    b->order = calloc(nr, sizeof(*b->order));
    n->ir_kept = malloc(nr * sizeof(uint32_t));
    n->kept_ir = malloc(nr * sizeof(uint32_t));
    n->kstart = malloc(nr * sizeof(uint32_t));
    n->kend = malloc(nr * sizeof(uint32_t));
    if (!b->size || !b->mark || !b->kept || !b->order || !n->ir_kept || !n->kept_ir ||
        !n->kstart || !n->kend)
        return nb_fail(b, RS_ENOMEM, "out of memory building the automaton");
    return 0;
}

static int build_all(struct nb *b, struct gn_nfa *n, uint32_t root)
{
    b->kept[root] = 1;
    if (dfs_rule(b, root) || decide_kept(b))
        return -1;
    for (uint32_t i = 0; i < b->ir->n_rules; i++)
        n->ir_kept[i] = GX_NONE;
    for (uint32_t i = 0; i < b->n_order; i++) {
        uint32_t r = b->order[i];
        if (b->kept[r]) {
            n->ir_kept[r] = n->n_kept;
            n->kept_ir[n->n_kept++] = r;
        }
    }
    for (uint32_t k = 0; k < n->n_kept; k++) {
        n->kstart[k] = new_state(b);
        if (n->kstart[k] == GX_NONE)
            return -1;
        n->kend[k] = build(b, b->ir->rules[n->kept_ir[k]].body, n->kstart[k], 0);
        if (n->kend[k] == GX_NONE)
            return -1;
    }
    return 0;
}

rs_err gn_build(struct gx_ir *ir, const struct rs_grammar_limits *lim, struct gn_nfa **out,
                char *err, size_t err_len)
{
    struct gn_nfa *n = calloc(1, sizeof(*n));
    struct nb b = {.ir = ir, .n = n, .err = err, .err_len = err_len};
    if (n == NULL)
        return gx_fail(err, err_len, RS_ENOMEM, "out of memory building the automaton");
    n->max_states = lim->max_states > UINT32_MAX / 8 ? UINT32_MAX : lim->max_states * 8;
    uint32_t root = find_root(ir);
    if (root == GX_NONE)
        nb_fail(&b, RS_EINVAL, "the grammar has no rule 'root'");
    else if (hoist_repeats(&b))
        b.rc = gx_ir_error(ir, err, err_len);
    else if (alloc_rule_arrays(&b, n) == 0)
        build_all(&b, n, root);
    free(b.size);
    free(b.mark);
    free(b.kept);
    free(b.order);
    if (b.rc != RS_OK) {
        gn_free(&n);
        return b.rc;
    }
    *out = n;
    return RS_OK;
}

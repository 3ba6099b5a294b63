/* SPDX-License-Identifier: MIT */
/*
 * The pushdown automaton: a set of parse stacks advanced one byte at a time.
 * A stack is a pair (top state, rest), the rest interned as a node (return
 * state, parent), so equal stacks are equal pairs and dedup is exact; a byte
 * inside the top rule changes only the top state and allocates nothing.
 * After each byte the set is closed: calls push the callee's start, ends pop
 * to the return state, and only stacks whose top can read a byte are kept.
 * Levels form a stack (level d + 1 is level d after one more byte) so trie
 * walks roll back by truncating; nodes are freed in the order they were made,
 * which keeps the intern table valid when entries are removed. GS_OPEN stands
 * for "an unknown stack below" when filling the token-mask cache.
 */
#include <stdlib.h>
#include <string.h>

#include "common/grammar_impl.h"

static uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    return x;
}

static uint64_t pair_key(uint32_t state, uint32_t parent)
{
    return (uint64_t)state << 32 | parent;
}

rs_err gs_init(struct gs_engine *e, const struct rs_grammar *g)
{
    memset(e, 0, sizeof(*e));
    e->g = g;
    e->table_mask = 255;
    e->table = calloc(e->table_mask + 1, sizeof(uint32_t));
    e->seen_mask = 255;
    e->seen = calloc(e->seen_mask + 1, sizeof(uint64_t));
    if (e->table == NULL || e->seen == NULL ||
        gx_reserve((void **)&e->lv, &e->cap_lv, (size_t)g->gv->max_len + 4,
                   sizeof(struct gs_level))) {
        gs_fini(e);
        return RS_ENOMEM;
    }
    e->n_levels = 0;
    return RS_OK;
}

void gs_fini(struct gs_engine *e)
{
    free(e->nodes);
    free(e->table);
    free(e->pairs);
    free(e->lv);
    free(e->work);
    free(e->path_state);
    free(e->path_level);
    free(e->seen);
    free(e->seen_used);
    memset(e, 0, sizeof(*e));
}

/* --- interned nodes ---------------------------------------------------------------------- */

static int table_grow(struct gs_engine *e)
{
    size_t slots = (e->table_mask + 1) * 2;
    uint32_t *t = calloc(slots, sizeof(uint32_t));
    if (t == NULL)
        return -1;
    for (size_t i = 0; i < e->n_nodes; i++) { /* index order = insertion order */
        size_t h = mix(pair_key(e->nodes[i].state, e->nodes[i].parent)) & (slots - 1);
        while (t[h])
            h = (h + 1) & (slots - 1);
        t[h] = (uint32_t)i + 1;
    }
    free(e->table);
    e->table = t;
    e->table_mask = slots - 1;
    return 0;
}

/* The node (state, parent), made when new. GX_NONE: out of memory. */
static uint32_t intern(struct gs_engine *e, uint32_t state, uint32_t parent)
{
    if ((e->n_nodes + 1) * 2 > e->table_mask && table_grow(e))
        return GX_NONE;
    size_t h = mix(pair_key(state, parent)) & e->table_mask;
    for (; e->table[h]; h = (h + 1) & e->table_mask) {
        const struct gs_node *nd = &e->nodes[e->table[h] - 1];
        if (nd->state == state && nd->parent == parent)
            return e->table[h] - 1;
    }
    if (e->n_nodes >= UINT32_MAX - 2 ||
        gx_reserve((void **)&e->nodes, &e->cap_nodes, e->n_nodes + 1, sizeof(struct gs_node)))
        return GX_NONE;
    uint32_t depth = (parent >= GS_OPEN ? 0 : e->nodes[parent].depth) + 1;
    e->nodes[e->n_nodes] = (struct gs_node){state, parent, depth};
    e->table[h] = (uint32_t)e->n_nodes + 1;
    return (uint32_t)e->n_nodes++;
}

/* Removes the table slot of node i (the newest still present). */
static void table_remove(struct gs_engine *e, uint32_t i)
{
    size_t h = mix(pair_key(e->nodes[i].state, e->nodes[i].parent)) & e->table_mask;
    while (e->table[h] != i + 1)
        h = (h + 1) & e->table_mask;
    e->table[h] = 0;
}

static void nodes_truncate(struct gs_engine *e, size_t mark)
{
    while (e->n_nodes > mark)
        table_remove(e, (uint32_t)--e->n_nodes);
}

/* --- closure ---------------------------------------------------------------------------- */

static void seen_clear(struct gs_engine *e)
{
    for (size_t i = 0; i < e->n_seen_used; i++)
        e->seen[e->seen_used[i]] = 0;
    e->n_seen_used = 0;
}

/* 1 when (state, parent) was already seen in this closure; else records it. -1: no memory. */
static int seen_test_set(struct gs_engine *e, struct gs_pair p)
{
    if ((e->n_seen_used + 1) * 2 > e->seen_mask) {
        size_t slots = (e->seen_mask + 1) * 2;
        uint64_t *t = calloc(slots, sizeof(uint64_t));
        if (t == NULL)
            return -1;
        size_t n_used = 0;
        for (size_t i = 0; i < e->n_seen_used; i++) {
            uint64_t k = e->seen[e->seen_used[i]];
            size_t h = mix(k - 1) & (slots - 1);
            while (t[h])
                h = (h + 1) & (slots - 1);
            t[h] = k;
            e->seen_used[n_used++] = (uint32_t)h;
        }
        free(e->seen);
        e->seen = t;
        e->seen_mask = slots - 1;
    }
    uint64_t k = pair_key(p.state, p.parent) + 1;
    size_t h = mix(k - 1) & e->seen_mask;
    for (; e->seen[h]; h = (h + 1) & e->seen_mask)
        if (e->seen[h] == k)
            return 1;
    size_t cap = e->cap_seen_used;
    if (gx_reserve((void **)&e->seen_used, &cap, e->n_seen_used + 1, sizeof(uint32_t)))
        return -1;
    e->cap_seen_used = cap;
    e->seen[h] = k;
    e->seen_used[e->n_seen_used++] = (uint32_t)h;
    return 0;
}

static int work_push(struct gs_engine *e, size_t *n, struct gs_pair p)
{
    if (gx_reserve((void **)&e->work, &e->cap_work, *n + 1, sizeof(struct gs_pair)))
        return -1;
    e->work[(*n)++] = p;
    return 0;
}

/* A live stack for the level being built. */
static int level_add(struct gs_engine *e, struct gs_level *lv, struct gs_pair p)
{
    if (lv->n >= e->g->lim.max_stacks) {
        lv->overflow = 1;
        return 0;
    }
    if (e->n_pairs >= e->cap_pairs &&
        gx_reserve((void **)&e->pairs, &e->cap_pairs, e->n_pairs + 1, sizeof(struct gs_pair)))
        return -1;
    e->pairs[e->n_pairs++] = p;
    lv->n++;
    uint32_t d = gs_depth(e, p);
    if (d > lv->max_depth)
        lv->max_depth = d;
    return 0;
}

/* Closes p into level lv: calls pushed, ends popped; live stacks appended. -1: no memory. */
static int closure(struct gs_engine *e, struct gs_level *lv, struct gs_pair p)
{
    const struct ga_auto *a = &e->g->a;
    size_t n_work = 0;
    if (work_push(e, &n_work, p))
        return -1;
    while (n_work > 0 && !lv->overflow) {
        struct gs_pair q = e->work[--n_work];
        int s = seen_test_set(e, q);
        if (s < 0)
            return -1;
        if (e->n_seen_used > 16 * (size_t)e->g->lim.max_stacks) {
            lv->overflow = 1;
            break;
        }
        if (s > 0)
            continue;
        const struct ga_state *st = &a->states[q.state];
        if (st->has_bytes && level_add(e, lv, q))
            return -1;
        int room = gs_depth(e, q) + 1 <= e->g->lim.max_stack_depth;
        for (uint32_t k = 0; k < st->n_calls; k++) {
            const struct ga_call *c = &a->calls[st->call_off + k];
            const struct ga_state *ret = &a->states[c->ret];
            /* a call in tail position needs no frame: the callee's end is the caller's */
            int tail = ret->final && !ret->has_bytes && ret->n_calls == 0;
            if (!tail && !room)
                continue; /* deeper than max_stack_depth: this path is dead */
            uint32_t np = q.parent; /* may be GS_BOTTOM, which is GX_NONE */
            if (!tail && (np = intern(e, c->ret, q.parent)) == GX_NONE)
                return -1;
            if (work_push(e, &n_work, (struct gs_pair){a->rule_start[c->rule], np}))
                return -1;
        }
        if (st->final) {
            if (q.parent == GS_BOTTOM)
                lv->end = 1;
            else if (q.parent == GS_OPEN)
                lv->popped = 1;
            else if (work_push(e, &n_work, (struct gs_pair){e->nodes[q.parent].state,
                                                            e->nodes[q.parent].parent}))
                return -1;
        }
    }
    return 0;
}

/* --- levels ------------------------------------------------------------------------------ */

void gs_reset(struct gs_engine *e)
{
    nodes_truncate(e, 0);
    e->n_pairs = 0;
    e->n_levels = 0;
}

/* Opens level d (d == n_levels) at the end of the pair buffer. */
static struct gs_level *level_open(struct gs_engine *e, uint32_t d)
{
    if (d >= e->cap_lv &&
        gx_reserve((void **)&e->lv, &e->cap_lv, (size_t)d + 1, sizeof(struct gs_level)))
        return NULL;
    struct gs_level *lv = &e->lv[d];
    memset(lv, 0, sizeof(*lv));
    lv->off = (uint32_t)e->n_pairs;
    lv->node_mark = (uint32_t)e->n_nodes;
    e->n_levels = d + 1;
    return lv;
}

int gs_start(struct gs_engine *e)
{
    gs_reset(e);
    struct gs_level *lv = level_open(e, 0);
    const struct ga_auto *a = &e->g->a;
    if (lv == NULL)
        return -1;
    int rc = closure(e, lv, (struct gs_pair){a->rule_start[a->root], GS_BOTTOM});
    seen_clear(e);
    return rc;
}

int gs_push(struct gs_engine *e, const struct gs_pair *p, uint32_t n)
{
    uint32_t d = e->n_levels;
    if (gx_reserve((void **)&e->pairs, &e->cap_pairs, e->n_pairs + n, sizeof(struct gs_pair)))
        return -1;
    struct gs_level *lv = level_open(e, d);
    if (lv == NULL)
        return -1;
    memcpy(e->pairs + e->n_pairs, p, n * sizeof(*p));
    e->n_pairs += n;
    lv->n = n;
    for (uint32_t i = 0; i < n; i++)
        if (gs_depth(e, p[i]) > lv->max_depth)
            lv->max_depth = gs_depth(e, p[i]);
    return (int)d;
}

void gs_truncate(struct gs_engine *e, uint32_t d)
{
    if (e->n_levels <= d + 1)
        return;
    if (e->n_nodes > e->lv[d + 1].node_mark)
        nodes_truncate(e, e->lv[d + 1].node_mark);
    e->n_pairs = e->lv[d].off + e->lv[d].n;
    e->n_levels = d + 1;
}

void gs_drop(struct gs_engine *e, uint32_t d)
{
    if (e->n_levels <= d)
        return;
    nodes_truncate(e, e->lv[d].node_mark);
    e->n_pairs = e->lv[d].off;
    e->n_levels = d;
}

int gs_step(struct gs_engine *e, uint32_t d, uint8_t b)
{
    const struct ga_auto *a = &e->g->a;
    gs_truncate(e, d);
    struct gs_level *lv = level_open(e, d + 1);
    if (lv == NULL)
        return -1;
    const struct gs_level *src = &e->lv[d];
    uint32_t off = src->off, n = src->n;
    int rc = 0;
    if (n == 1) { /* the common case: one stack, and often a plain byte inside a rule */
        struct gs_pair p = e->pairs[off];
        uint32_t t = ga_next(a, p.state, b);
        if (t == GX_NONE)
            return 0;
        const struct ga_state *st = &a->states[t];
        if (st->n_calls == 0 && !st->final) /* trimmed: it has bytes */
            return level_add(e, lv, (struct gs_pair){t, p.parent}) ? -1 : (int)lv->n;
        rc = closure(e, lv, (struct gs_pair){t, p.parent});
        seen_clear(e);
        return rc != 0 || lv->overflow ? -1 : (int)lv->n;
    }
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        struct gs_pair p = e->pairs[off + i];
        uint32_t t = ga_next(a, p.state, b);
        if (t != GX_NONE)
            rc = closure(e, lv, (struct gs_pair){t, p.parent});
    }
    seen_clear(e);
    if (rc != 0 || lv->overflow)
        return -1;
    return (int)lv->n;
}

/* Keeps only the nodes the stacks of level 0 reach, renumbered in order (parents first). */
static int compact(struct gs_engine *e)
{
    size_t n = e->n_nodes;
    uint32_t *map = malloc((n + 1) * sizeof(uint32_t));
    if (map == NULL)
        return -1;
    memset(map, 0, (n + 1) * sizeof(uint32_t)); /* 0: unused, 1: used */
    struct gs_level *lv = &e->lv[0];
    for (uint32_t i = 0; i < lv->n; i++)
        for (uint32_t x = e->pairs[lv->off + i].parent; x < GS_OPEN && !map[x]; x = e->nodes[x].parent)
            map[x] = 1;
    for (size_t i = 0; i < n; i++) /* clear the whole table through its entries */
        table_remove(e, (uint32_t)i);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!map[i])
            continue;
        struct gs_node nd = e->nodes[i];
        if (nd.parent < GS_OPEN)
            nd.parent = map[nd.parent] - 2;
        e->nodes[k] = nd;
        map[i] = (uint32_t)k + 2;
        size_t h = mix(pair_key(nd.state, nd.parent)) & e->table_mask;
        while (e->table[h])
            h = (h + 1) & e->table_mask;
        e->table[h] = (uint32_t)k + 1;
        k++;
    }
    e->n_nodes = k;
    for (uint32_t i = 0; i < lv->n; i++) {
        struct gs_pair *p = &e->pairs[lv->off + i];
        if (p->parent < GS_OPEN)
            p->parent = map[p->parent] - 2;
    }
    free(map);
    return 0;
}

int gs_commit(struct gs_engine *e, uint32_t d)
{
    struct gs_level top = e->lv[d];
    memmove(e->pairs, e->pairs + top.off, top.n * sizeof(struct gs_pair));
    e->n_pairs = top.n;
    top.off = 0;
    top.node_mark = 0;
    e->lv[0] = top;
    e->n_levels = 1;
    size_t live_bound = (size_t)top.n * (top.max_depth + 1);
    if (e->n_nodes > 2 * live_bound + 256)
        return compact(e);
    return 0;
}

/* --- byte paths from one stack ------------------------------------------------------------- */

int gs_path_init(struct gs_path *w, struct gs_engine *e, uint32_t base)
{
    size_t need = (size_t)e->g->gv->max_len + 2;
    if (e->cap_path < need) {
        size_t c1 = e->cap_path, c2 = e->cap_path;
        if (gx_reserve((void **)&e->path_state, &c1, need, sizeof(uint32_t)) ||
            gx_reserve((void **)&e->path_level, &c2, need, sizeof(uint32_t)))
            return -1;
        e->cap_path = c1 < c2 ? c1 : c2;
    }
    struct gs_pair p = e->pairs[e->lv[base].off];
    w->e = e;
    w->base = base;
    w->parent = p.parent;
    memset(&w->plain, 0, sizeof(w->plain));
    w->plain.n = 1;
    w->plain.max_depth = gs_depth(e, p);
    e->path_state[0] = p.state;
    e->path_level[0] = GX_NONE; /* plain: its closure is the level itself */
    gs_truncate(e, base);
    return 0;
}

int gs_path_step_levels(struct gs_path *w, uint32_t d, uint8_t b, const struct gs_level **lv)
{
    struct gs_engine *e = w->e;
    uint32_t src = e->path_level[d - 1];
    if (src == GX_NONE) {
        /* from here the levels decide: a level holding the stack reached at depth d - 1 */
        gs_truncate(e, w->base);
        struct gs_pair p = {e->path_state[d - 1], w->parent};
        int L = d == 1 ? (int)w->base : gs_push(e, &p, 1);
        if (L < 0)
            return -1;
        e->path_level[d - 1] = src = (uint32_t)L;
    }
    int r = gs_step(e, src, b);
    e->path_level[d] = src + 1;
    *lv = &e->lv[src + 1];
    return r;
}

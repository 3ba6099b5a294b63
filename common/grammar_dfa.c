/* SPDX-License-Identifier: MIT */
/*
 * NFA -> the automaton the matcher runs: per kept rule a DFA by subset
 * construction whose edges are byte classes (bytes no grammar range tells
 * apart share a class, so each state's table is n_bclass wide) and rule calls
 * (a call is a symbol too; the pushdown part is in grammar_stack.c). Then:
 * states that cannot reach their rule's end are trimmed (a matcher never
 * enters a state it cannot finish from); left recursion (a rule reaching itself
 * through calls without reading a byte) is refused with the rule's position;
 * and states are grouped into token-mask cache classes: two states share a
 * class when nothing within the longest token's length tells them apart
 * (bounded Moore refinement), which folds the long chains {m,n} repetitions
 * make into a few entries.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar_impl.h"

/* --- interned uint32 vectors --------------------------------------------------------------- */

struct vset {
    uint32_t *pool;
    size_t n_pool, cap_pool;
    uint32_t *off, *len;
    size_t n, cap_off, cap_len;
    uint32_t *table; /* item + 1; 0 empty */
    size_t mask;
};

static void vset_free(struct vset *v)
{
    free(v->pool);
    free(v->off);
    free(v->len);
    free(v->table);
    memset(v, 0, sizeof(*v));
}

static uint64_t vhash(const uint32_t *x, uint32_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (uint32_t i = 0; i < n; i++) {
        h ^= x[i];
        h *= 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    return h;
}

static int vset_grow(struct vset *v)
{
    size_t slots = v->mask ? (v->mask + 1) * 2 : 1024;
    uint32_t *t = calloc(slots, sizeof(uint32_t));
    if (t == NULL)
        return -1;
    for (size_t i = 0; i < v->n; i++) {
        size_t h = vhash(v->pool + v->off[i], v->len[i]) & (slots - 1);
        while (t[h])
            h = (h + 1) & (slots - 1);
        t[h] = (uint32_t)i + 1;
    }
    free(v->table);
    v->table = t;
    v->mask = slots - 1;
    return 0;
}

/* The item equal to x[0..n): existing, or added (*added = 1). GX_NONE: out of memory. */
static uint32_t vset_intern(struct vset *v, const uint32_t *x, uint32_t n, int *added)
{
    *added = 0;
    if ((v->n + 1) * 2 > v->mask && vset_grow(v))
        return GX_NONE;
    size_t h = vhash(x, n) & v->mask;
    for (; v->table[h]; h = (h + 1) & v->mask) {
        uint32_t i = v->table[h] - 1;
        if (v->len[i] == n && memcmp(v->pool + v->off[i], x, n * sizeof(uint32_t)) == 0)
            return i;
    }
    if (gx_reserve((void **)&v->pool, &v->cap_pool, v->n_pool + n, sizeof(uint32_t)) ||
        gx_reserve((void **)&v->off, &v->cap_off, v->n + 1, sizeof(uint32_t)) ||
        gx_reserve((void **)&v->len, &v->cap_len, v->n + 1, sizeof(uint32_t)))
        return GX_NONE;
    memcpy(v->pool + v->n_pool, x, n * sizeof(uint32_t));
    v->off[v->n] = (uint32_t)v->n_pool;
    v->len[v->n] = n;
    v->n_pool += n;
    v->table[h] = (uint32_t)v->n + 1;
    *added = 1;
    return (uint32_t)v->n++;
}

/* --- subset construction ---------------------------------------------------------------- */

struct vec {
    uint32_t *v;
    size_t n, cap;
};

struct db {
    const struct gx_ir *ir;
    const struct gn_nfa *nfa;
    const struct rs_grammar_limits *lim;
    struct ga_auto *a;
    struct vset sets;   /* DFA state -> its NFA state set */
    uint32_t *stamp;    /* per NFA state */
    uint32_t gen;
    struct vec stack, out;
    struct vec *bucket; /* three scratch vectors for expand_bytes */
    struct vec callv;   /* (rule, target) pairs */
    size_t cap_states, cap_calls;
    char *err;
    size_t err_len;
    rs_err rc;
};

static int db_fail(struct db *d, rs_err rc, const char *msg)
{
    if (d->rc == RS_OK) {
        d->rc = rc;
        gx_fail(d->err, d->err_len, rc, "%s", msg);
    }
    return -1;
}

static int vpush(struct vec *v, uint32_t x)
{
    return GX_PUSH(v->v, v->n, v->cap, x);
}

static int cmp_u32(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return a < b ? -1 : a > b;
}

/* eps-closure of seeds into d->out (sorted), keeping states with edges or the rule's end. */
static int closure(struct db *d, const uint32_t *seeds, size_t n, uint32_t kend)
{
    const struct gn_nfa *nf = d->nfa;
    if (++d->gen == 0) {
        memset(d->stamp, 0, nf->n_states * sizeof(uint32_t));
        d->gen = 1;
    }
    d->stack.n = d->out.n = 0;
    for (size_t i = 0; i < n; i++)
        if (d->stamp[seeds[i]] != d->gen) {
            d->stamp[seeds[i]] = d->gen;
            if (vpush(&d->stack, seeds[i]))
                return -1;
        }
    while (d->stack.n > 0) {
        uint32_t q = d->stack.v[--d->stack.n];
        int keep = q == kend;
        for (uint32_t e = nf->first[q]; e != GX_NONE; e = nf->edges[e].next) {
            const struct gn_edge *ed = &nf->edges[e];
            if (ed->kind != GN_EPS) {
                keep = 1;
                continue;
            }
            if (d->stamp[ed->to] != d->gen) {
                d->stamp[ed->to] = d->gen;
                if (vpush(&d->stack, ed->to))
                    return -1;
            }
        }
        if (keep && vpush(&d->out, q))
            return -1;
    }
    if (d->out.n > 1)
        qsort(d->out.v, d->out.n, sizeof(uint32_t), cmp_u32);
    return 0;
}

/* The DFA state for the set in d->out (rule r), creating it. GX_NONE: empty set or error. */
static uint32_t state_for(struct db *d, uint32_t r)
{
    if (d->out.n == 0)
        return GX_NONE;
    int added;
    uint32_t id = vset_intern(&d->sets, d->out.v, (uint32_t)d->out.n, &added);
    if (id == GX_NONE)
        return db_fail(d, RS_ENOMEM, "out of memory building the automaton"), GX_NONE;
    if (!added)
        return id;
    struct ga_auto *a = d->a;
    if (id >= d->lim->max_states)
        return db_fail(d, RS_ERANGE, "grammar too large: more automaton states than the limit "
                       "(max_states)"), GX_NONE;
    size_t need = (size_t)(id + 1) * a->n_bclass * sizeof(uint32_t);
    if (need > d->lim->max_memory)
        return db_fail(d, RS_ERANGE, "grammar too large: its automaton tables exceed the memory "
                       "limit (max_memory)"), GX_NONE;
    size_t cap = d->cap_states;
    if (gx_reserve((void **)&a->states, &cap, (size_t)id + 1, sizeof(struct ga_state)))
        return db_fail(d, RS_ENOMEM, "out of memory building the automaton"), GX_NONE;
    cap = d->cap_states;
    if (gx_reserve((void **)&a->next, &cap, ((size_t)id + 1), a->n_bclass * sizeof(uint32_t)))
        return db_fail(d, RS_ENOMEM, "out of memory building the automaton"), GX_NONE;
    d->cap_states = cap;
    memset(&a->states[id], 0, sizeof(a->states[id]));
    a->states[id].rule = r;
    a->n_states = id + 1;
    return id;
}

static int cmp_pair(const void *x, const void *y)
{
    const uint32_t *a = x, *b = y;
    return a[0] != b[0] ? (a[0] < b[0] ? -1 : 1) : (a[1] < b[1] ? -1 : a[1] > b[1]);
}

/* Byte transitions of DFA state s: classes are swept in spans where no edge starts or ends,
 * each span one target set (wide ranges such as [^"\\] cost one closure, not one per class). */
static int expand_bytes(struct db *d, uint32_t s, uint32_t kend)
{
    struct ga_auto *a = d->a;
    uint32_t r = a->states[s].rule;
    struct vec *ev = &d->bucket[0], *cut = &d->bucket[1], *tg = &d->bucket[2];
    ev->n = cut->n = 0;
    const uint32_t *set = d->sets.pool + d->sets.off[s];
    uint32_t n = d->sets.len[s];
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t e = d->nfa->first[set[i]]; e != GX_NONE; e = d->nfa->edges[e].next) {
            const struct gn_edge *ed = &d->nfa->edges[e];
            if (ed->kind != GN_BYTE)
                continue;
            uint32_t lo = a->bclass[ed->lo], hi = a->bclass[ed->hi];
            if (vpush(ev, lo) || vpush(ev, hi) || vpush(ev, ed->to) || vpush(cut, lo) ||
                vpush(cut, hi + 1))
                return db_fail(d, RS_ENOMEM, "out of memory building the automaton");
        }
    uint32_t *row = &a->next[(size_t)s * a->n_bclass];
    for (uint32_t c = 0; c < a->n_bclass; c++)
        row[c] = GX_NONE;
    if (cut->n == 0)
        return 0;
    qsort(cut->v, cut->n, sizeof(uint32_t), cmp_u32);
    for (size_t k = 0; k + 1 < cut->n; k++) {
        uint32_t c0 = cut->v[k], c1 = cut->v[k + 1]; /* span [c0, c1) */
        if (c0 == c1)
            continue;
        tg->n = 0;
        for (size_t i = 0; i < ev->n; i += 3)
            if (ev->v[i] <= c0 && c0 <= ev->v[i + 1] && vpush(tg, ev->v[i + 2]))
                return db_fail(d, RS_ENOMEM, "out of memory building the automaton");
        if (tg->n == 0)
            continue;
        if (closure(d, tg->v, tg->n, kend))
            return db_fail(d, RS_ENOMEM, "out of memory building the automaton");
        uint32_t t = state_for(d, r);
        if (t == GX_NONE && d->rc != RS_OK)
            return -1;
        row = &a->next[(size_t)s * a->n_bclass]; /* state_for may move the table */
        for (uint32_t c = c0; c < c1; c++)
            row[c] = t;
    }
    return 0;
}

/* Call transitions of DFA state s, appended to a->calls. */
static int expand_calls(struct db *d, uint32_t s, uint32_t kend)
{
    struct ga_auto *a = d->a;
    const uint32_t *set = d->sets.pool + d->sets.off[s];
    uint32_t n = d->sets.len[s], r = a->states[s].rule;
    d->callv.n = 0;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t e = d->nfa->first[set[i]]; e != GX_NONE; e = d->nfa->edges[e].next)
            if (d->nfa->edges[e].kind == GN_CALL &&
                (vpush(&d->callv, d->nfa->edges[e].rule) || vpush(&d->callv, d->nfa->edges[e].to)))
                return db_fail(d, RS_ENOMEM, "out of memory building the automaton");
    if (d->callv.n > 0)
        qsort(d->callv.v, d->callv.n / 2, 2 * sizeof(uint32_t), cmp_pair);
    uint32_t *cv = d->callv.v;
    size_t ncv = d->callv.n / 2;
    for (size_t i = 0; i < ncv;) {
        size_t j = i;
        struct vec seeds = {0};
        while (j < ncv && cv[2 * j] == cv[2 * i])
            if (vpush(&seeds, cv[2 * j++ + 1])) {
                free(seeds.v);
                return db_fail(d, RS_ENOMEM, "out of memory building the automaton");
            }
        int rc = closure(d, seeds.v, seeds.n, kend);
        free(seeds.v);
        if (rc)
            return db_fail(d, RS_ENOMEM, "out of memory building the automaton");
        uint32_t t = state_for(d, r);
        if (t == GX_NONE)
            return d->rc != RS_OK ? -1 : 0;
        if (a->states[s].n_calls == 0)
            a->states[s].call_off = (uint32_t)a->n_calls;
        if (a->states[s].n_calls == UINT16_MAX)
            return db_fail(d, RS_ERANGE, "grammar too large: a state calls too many rules");
        struct ga_call call = {cv[2 * i], t};
        if (GX_PUSH(a->calls, a->n_calls, d->cap_calls, call))
            return db_fail(d, RS_ENOMEM, "out of memory building the automaton");
        a->states[s].n_calls++;
        i = j;
    }
    return 0;
}

static void byte_classes(struct ga_auto *a, const struct gn_nfa *nf)
{
    uint8_t cut[257] = {0};
    for (size_t e = 0; e < nf->n_edges; e++)
        if (nf->edges[e].kind == GN_BYTE) {
            cut[nf->edges[e].lo] = 1;
            cut[nf->edges[e].hi + 1] = 1;
        }
    uint32_t c = 0;
    for (int b = 0; b < 256; b++) {
        if (b > 0 && cut[b])
            c++;
        a->bclass[b] = (uint8_t)c;
    }
    a->n_bclass = c + 1;
}

static int subset_construction(struct db *d)
{
    struct ga_auto *a = d->a;
    const struct gn_nfa *nf = d->nfa;
    a->n_rules = nf->n_kept;
    a->rule_start = malloc((nf->n_kept + 1) * sizeof(uint32_t));
    a->rule_name = malloc((nf->n_kept + 1) * sizeof(uint32_t));
    d->stamp = calloc(nf->n_states + 1, sizeof(uint32_t));
    d->bucket = calloc(3, sizeof(struct vec)); /* expand_bytes: edges, cuts, targets */
    if (!a->rule_start || !a->rule_name || !d->stamp || !d->bucket)
        return db_fail(d, RS_ENOMEM, "out of memory building the automaton");
    for (uint32_t r = 0; r < nf->n_kept; r++) {
        uint32_t first = a->n_states;
        a->rule_name[r] = nf->kept_ir[r];
        if (closure(d, &nf->kstart[r], 1, nf->kend[r]))
            return db_fail(d, RS_ENOMEM, "out of memory building the automaton");
        a->rule_start[r] = state_for(d, r);
        if (a->rule_start[r] == GX_NONE && d->rc == RS_OK) {
            char where[300], msg[400];
            gx_rule_where(d->ir, nf->kept_ir[r], where, sizeof(where));
            snprintf(msg, sizeof(msg), "%s: the rule matches no string", where);
            return db_fail(d, RS_EINVAL, msg);
        }
        if (a->rule_start[r] == GX_NONE)
            return -1;
        for (uint32_t s = first; s < a->n_states; s++) {
            uint32_t kend = nf->kend[r];
            const uint32_t *set = d->sets.pool + d->sets.off[s];
            a->states[s].final = bsearch(&kend, set, d->sets.len[s], sizeof(uint32_t),
                                         cmp_u32) != NULL;
            if (expand_bytes(d, s, kend) || expand_calls(d, s, kend))
                return -1;
        }
    }
    return 0;
}

/* --- trimming ------------------------------------------------------------------------------ */

/* Compressed adjacency: list i is v[off[i] .. off[i + 1]). */
struct csr {
    uint32_t *off, *v;
};

static void csr_free(struct csr *c)
{
    free(c->off);
    free(c->v);
}

/* Byte predecessors of every state (adjacent duplicate edges dropped). */
static int byte_preds(const struct ga_auto *a, struct csr *c)
{
    c->off = calloc((size_t)a->n_states + 2, sizeof(uint32_t));
    size_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t s = 0; s < a->n_states; s++) {
            uint32_t prev = GX_NONE;
            for (uint32_t k = 0; k < a->n_bclass; k++) {
                uint32_t t = a->next[(size_t)s * a->n_bclass + k];
                if (t == GX_NONE || t == prev)
                    continue;
                prev = t;
                if (pass == 0)
                    c->off[t + 2]++;
                else
                    c->v[c->off[t + 1]++] = s;
            }
        }
        if (pass == 0) {
            for (uint32_t s = 0; s < a->n_states; s++)
                c->off[s + 2] += c->off[s + 1];
            total = c->off[a->n_states + 1];
            c->v = malloc((total ? total : 1) * sizeof(uint32_t));
            if (c->v == NULL)
                return -1;
        }
    }
    return c->off ? 0 : -1;
}

struct trim {
    const struct ga_auto *a;
    uint8_t *useful, *prod;
    uint32_t *work;
    size_t n_work;
};

static void trim_mark(struct trim *t, uint32_t s)
{
    if (!t->useful[s]) {
        t->useful[s] = 1;
        t->work[t->n_work++] = s;
    }
}

/* Marks every state from which its rule can end (calls only to rules that can end). */
static void trim_propagate(struct trim *t, const struct csr *pred, const uint32_t *callers,
                           size_t n_callers)
{
    const struct ga_auto *a = t->a;
    for (int changed = 1; changed;) {
        while (t->n_work > 0) {
            uint32_t s = t->work[--t->n_work];
            for (uint32_t i = pred->off[s]; i < pred->off[s + 1]; i++)
                trim_mark(t, pred->v[i]);
            if (a->rule_start[a->states[s].rule] == s)
                t->prod[a->states[s].rule] = 1;
        }
        /* calls: one pass over the states that have any, until nothing changes */
        changed = 0;
        for (size_t i = 0; i < n_callers; i++) {
            uint32_t p = callers[i];
            const struct ga_state *st = &a->states[p];
            for (uint32_t k = 0; k < st->n_calls && !t->useful[p]; k++) {
                const struct ga_call *c = &a->calls[st->call_off + k];
                if (t->prod[c->rule] && t->useful[c->ret]) {
                    trim_mark(t, p);
                    changed = 1;
                }
            }
        }
    }
}

/* Drops edges into states that cannot finish and calls to rules that cannot end. */
static void trim_apply(struct ga_auto *a, const struct trim *t)
{
    for (uint32_t s = 0; s < a->n_states; s++) {
        struct ga_state *st = &a->states[s];
        uint32_t *row = &a->next[(size_t)s * a->n_bclass];
        for (uint32_t k = 0; k < a->n_bclass; k++)
            if (row[k] != GX_NONE && (!t->useful[row[k]] || !t->useful[s]))
                row[k] = GX_NONE;
        uint32_t kept = 0;
        for (uint32_t k = 0; k < st->n_calls; k++) {
            struct ga_call c = a->calls[st->call_off + k];
            if (t->useful[s] && t->prod[c.rule] && t->useful[c.ret])
                a->calls[st->call_off + kept++] = c;
        }
        st->n_calls = (uint16_t)kept;
        if (!t->useful[s])
            st->final = 0;
        st->has_bytes = 0;
        for (uint32_t k = 0; k < a->n_bclass; k++)
            if (row[k] != GX_NONE)
                st->has_bytes = 1;
    }
}

static int trim(struct db *d)
{
    struct ga_auto *a = d->a;
    struct csr pred = {0};
    struct trim t = {a, calloc(a->n_states, 1), calloc(a->n_rules, 1),
                     malloc(((size_t)a->n_states + 1) * sizeof(uint32_t)), 0};
    uint32_t *callers = malloc(((size_t)a->n_states + 1) * sizeof(uint32_t));
    size_t n_callers = 0;
    int rc = -1;
    if (!t.useful || !t.prod || !t.work || !callers || byte_preds(a, &pred)) {
        db_fail(d, RS_ENOMEM, "out of memory building the automaton");
        goto done;
    }
    for (uint32_t s = 0; s < a->n_states; s++) {
        if (a->states[s].final)
            trim_mark(&t, s);
        if (a->states[s].n_calls > 0)
            callers[n_callers++] = s;
    }
    trim_propagate(&t, &pred, callers, n_callers);
    if (!t.prod[a->root]) {
        db_fail(d, RS_EINVAL, "the grammar matches no string (every path through 'root' needs a "
                "rule that never ends)");
        goto done;
    }
    trim_apply(a, &t);
    rc = 0;
done:
    csr_free(&pred);
    free(t.useful);
    free(t.prod);
    free(t.work);
    free(callers);
    return rc;
}

/* --- nullable rules, left recursion ---------------------------------------------------- */

/* rule_nullable: the rule can end without reading a byte. */
static int nullable(struct ga_auto *a)
{
    uint8_t *reach = calloc(a->n_states, 1); /* state can end its rule through calls alone */
    a->rule_nullable = calloc(a->n_rules, 1);
    if (reach == NULL || a->rule_nullable == NULL) {
        free(reach);
        return -1;
    }
    for (uint32_t s = 0; s < a->n_states; s++)
        reach[s] = a->states[s].final;
    for (int changed = 1; changed;) {
        changed = 0;
        for (uint32_t s = a->n_states; s-- > 0;) {
            const struct ga_state *st = &a->states[s];
            for (uint32_t k = 0; k < st->n_calls && !reach[s]; k++) {
                const struct ga_call *c = &a->calls[st->call_off + k];
                if (a->rule_nullable[c->rule] && reach[c->ret])
                    reach[s] = 1, changed = 1;
            }
            uint32_t r = st->rule;
            if (reach[s] && a->rule_start[r] == s && !a->rule_nullable[r])
                a->rule_nullable[r] = 1, changed = 1;
        }
    }
    free(reach);
    return 0;
}

struct lr {
    const struct ga_auto *a;
    struct csr left;   /* rule -> rules it calls before reading a byte */
    uint8_t *color;
    uint32_t *len;     /* longest left-call chain below the rule */
    uint32_t cycle;    /* a rule on a cycle, or GX_NONE */
    uint32_t depth;
};

/* Rules rule r may call before reading a byte, into out (deduplicated with stamp). */
static int left_calls(const struct ga_auto *a, uint32_t r, struct vec *out, struct vec *stack,
                      uint32_t *stamp, uint32_t gen, uint32_t *rstamp)
{
    stack->n = 0;
    if (vpush(stack, a->rule_start[r]))
        return -1;
    stamp[a->rule_start[r]] = gen;
    while (stack->n > 0) {
        const struct ga_state *st = &a->states[stack->v[--stack->n]];
        for (uint32_t k = 0; k < st->n_calls; k++) {
            const struct ga_call *c = &a->calls[st->call_off + k];
            if (rstamp[c->rule] != gen) {
                rstamp[c->rule] = gen;
                if (vpush(out, c->rule))
                    return -1;
            }
            if (a->rule_nullable[c->rule] && stamp[c->ret] != gen) {
                stamp[c->ret] = gen;
                if (vpush(stack, c->ret))
                    return -1;
            }
        }
    }
    return 0;
}

static int build_left(struct lr *l)
{
    const struct ga_auto *a = l->a;
    struct vec out = {0}, stack = {0};
    uint32_t *stamp = calloc(a->n_states, sizeof(uint32_t));
    uint32_t *rstamp = calloc(a->n_rules, sizeof(uint32_t));
    l->left.off = calloc((size_t)a->n_rules + 1, sizeof(uint32_t));
    int rc = -1;
    if (stamp == NULL || rstamp == NULL || l->left.off == NULL)
        goto done;
    for (uint32_t r = 0; r < a->n_rules; r++) {
        if (left_calls(a, r, &out, &stack, stamp, r + 1, rstamp))
            goto done;
        l->left.off[r + 1] = (uint32_t)out.n;
    }
    l->left.v = out.v;
    out.v = NULL;
    rc = 0;
done:
    free(out.v);
    free(stack.v);
    free(stamp);
    free(rstamp);
    return rc;
}

/* Depth-first over left calls: finds a cycle or the longest chain under r. */
static uint32_t lr_visit(struct lr *l, uint32_t r)
{
    if (l->color[r] == 2)
        return l->len[r];
    if (l->color[r] == 1 || l->depth > 4096) {
        if (l->cycle == GX_NONE)
            l->cycle = r;
        return 0;
    }
    l->color[r] = 1;
    l->depth++;
    uint32_t best = 0;
    for (uint32_t i = l->left.off[r]; i < l->left.off[r + 1] && l->cycle == GX_NONE; i++) {
        uint32_t x = 1 + lr_visit(l, l->left.v[i]);
        if (x > best)
            best = x;
    }
    l->depth--;
    l->color[r] = 2;
    return l->len[r] = best;
}

static int left_recursion(struct db *d)
{
    struct ga_auto *a = d->a;
    struct lr l = {a, {0}, calloc(a->n_rules, 1), calloc(a->n_rules, sizeof(uint32_t)), GX_NONE, 0};
    int rc = -1;
    if (l.color == NULL || l.len == NULL || build_left(&l)) {
        db_fail(d, RS_ENOMEM, "out of memory building the automaton");
        goto done;
    }
    uint32_t best = 0;
    for (uint32_t r = 0; r < a->n_rules && l.cycle == GX_NONE; r++) {
        uint32_t x = lr_visit(&l, r);
        if (x > best)
            best = x;
    }
    if (l.cycle != GX_NONE) {
        char where[300], msg[400];
        gx_rule_where(d->ir, a->rule_name[l.cycle], where, sizeof(where));
        snprintf(msg, sizeof(msg), "%s: left recursion (the rule can reach itself without "
                 "reading any input)", where);
        db_fail(d, RS_EINVAL, msg);
        goto done;
    }
    a->push_bound = best + 1;
    rc = 0;
done:
    csr_free(&l.left);
    free(l.color);
    free(l.len);
    return rc;
}

/* --- cache classes ------------------------------------------------------------------------- */

/* Initial partition: same end flag, same byte presence, the very same calls. */
static int classes_init(const struct ga_auto *a, uint32_t *cls, uint32_t *n_cls)
{
    struct vset v = {0};
    struct vec key = {0};
    int rc = 0;
    for (uint32_t s = 0; s < a->n_states && rc == 0; s++) {
        const struct ga_state *st = &a->states[s];
        key.n = 0;
        rc |= vpush(&key, (uint32_t)st->final | (uint32_t)st->has_bytes << 1);
        for (uint32_t k = 0; k < st->n_calls; k++)
            rc |= vpush(&key, a->calls[st->call_off + k].rule) |
                  vpush(&key, a->calls[st->call_off + k].ret);
        int added;
        cls[s] = rc ? GX_NONE : vset_intern(&v, key.v, (uint32_t)key.n, &added);
        if (cls[s] == GX_NONE)
            rc = -1;
    }
    *n_cls = (uint32_t)v.n;
    vset_free(&v);
    free(key.v);
    return rc;
}

/* Each state's byte edges as runs of classes with the same target: (last class, target). */
struct runs {
    uint32_t *off; /* per state: runs off[s] .. off[s + 1] */
    uint32_t *v;   /* pairs */
};

static int runs_build(const struct ga_auto *a, struct runs *r)
{
    struct vec v = {0};
    r->off = malloc(((size_t)a->n_states + 1) * sizeof(uint32_t));
    if (r->off == NULL)
        return -1;
    for (uint32_t s = 0; s < a->n_states; s++) {
        const uint32_t *row = &a->next[(size_t)s * a->n_bclass];
        r->off[s] = (uint32_t)(v.n / 2);
        for (uint32_t k = 0; k < a->n_bclass; k++)
            if ((k + 1 == a->n_bclass || row[k + 1] != row[k]) &&
                (vpush(&v, k) || vpush(&v, row[k]))) {
                free(v.v);
                return -1;
            }
    }
    r->off[a->n_states] = (uint32_t)(v.n / 2);
    r->v = v.v;
    return 0;
}

/* One refinement round: the class plus the classes the byte edges lead to (runs merged). */
static int classes_refine(const struct ga_auto *a, const struct runs *runs, const uint32_t *cls,
                          uint32_t *out, uint32_t *n_out)
{
    struct vset v = {0};
    struct vec key = {0};
    int rc = 0;
    for (uint32_t s = 0; s < a->n_states && rc == 0; s++) {
        key.n = 0;
        rc |= vpush(&key, cls[s]);
        for (uint32_t i = runs->off[s]; i < runs->off[s + 1] && rc == 0; i++) {
            uint32_t t = runs->v[2 * i + 1], x = t == GX_NONE ? GX_NONE : cls[t];
            if (key.n > 1 && key.v[key.n - 1] == x)
                key.v[key.n - 2] = runs->v[2 * i]; /* same class as the run before: extend it */
            else
                rc |= vpush(&key, runs->v[2 * i]) | vpush(&key, x);
        }
        int added;
        out[s] = rc ? GX_NONE : vset_intern(&v, key.v, (uint32_t)key.n, &added);
        if (out[s] == GX_NONE)
            rc = -1;
    }
    *n_out = (uint32_t)v.n;
    vset_free(&v);
    free(key.v);
    return rc;
}

/* Classes for states with byte edges; states equal within max_len bytes share one. */
static int cache_classes(struct ga_auto *a, uint32_t max_len)
{
    uint32_t *cls = malloc(((size_t)a->n_states + 1) * sizeof(uint32_t));
    uint32_t *tmp = malloc(((size_t)a->n_states + 1) * sizeof(uint32_t));
    struct runs runs = {0};
    uint32_t n = 0, m = 0;
    int rc = -1;
    if (cls == NULL || tmp == NULL || runs_build(a, &runs) || classes_init(a, cls, &n))
        goto done;
    for (uint32_t round = 0; round < max_len; round++) {
        if (classes_refine(a, &runs, cls, tmp, &m))
            goto done;
        uint32_t *x = cls;
        cls = tmp, tmp = x;
        if (m == n)
            break;
        n = m;
    }
    /* compact: only states with byte edges get an entry */
    for (uint32_t i = 0; i < n; i++)
        tmp[i] = GX_NONE;
    a->class_rep = malloc(((size_t)n + 1) * sizeof(uint32_t));
    if (a->class_rep == NULL)
        goto done;
    a->n_classes = 0;
    for (uint32_t s = 0; s < a->n_states; s++) {
        if (!a->states[s].has_bytes) {
            a->states[s].cls = GX_NONE;
            continue;
        }
        if (tmp[cls[s]] == GX_NONE) {
            tmp[cls[s]] = a->n_classes;
            a->class_rep[a->n_classes++] = s;
        }
        a->states[s].cls = tmp[cls[s]];
    }
    rc = 0;
done:
    free(runs.off);
    free(runs.v);
    free(cls);
    free(tmp);
    return rc;
}

/* --- entry ----------------------------------------------------------------------------------- */

/* next[] entries become (state << 1) | plain (see ga_next). */
static void encode_next(struct ga_auto *a)
{
    size_t n = (size_t)a->n_states * a->n_bclass;
    for (size_t i = 0; i < n; i++) {
        uint32_t t = a->next[i];
        if (t != GX_NONE)
            a->next[i] = t << 1 | (a->states[t].n_calls == 0 && !a->states[t].final);
    }
}

void ga_free(struct ga_auto *a)
{
    free(a->next);
    free(a->states);
    free(a->calls);
    free(a->rule_start);
    free(a->rule_name);
    free(a->rule_nullable);
    free(a->class_rep);
    memset(a, 0, sizeof(*a));
}

static void db_free(struct db *d)
{
    vset_free(&d->sets);
    free(d->stamp);
    free(d->stack.v);
    free(d->out.v);
    if (d->bucket != NULL)
        for (uint32_t c = 0; c < 3; c++)
            free(d->bucket[c].v);
    free(d->bucket);
    free(d->callv.v);
}

rs_err ga_build(const struct gx_ir *ir, const struct gn_nfa *nfa,
                const struct rs_grammar_limits *lim, uint32_t max_token_len, struct ga_auto *a,
                char *err, size_t err_len)
{
    struct db d = {.ir = ir, .nfa = nfa, .lim = lim, .a = a, .err = err, .err_len = err_len};
    memset(a, 0, sizeof(*a));
    byte_classes(a, nfa);
    a->root = GX_NONE;
    for (uint32_t r = 0; r < nfa->n_kept; r++) {
        size_t len;
        const char *name = gx_rule_name(ir, nfa->kept_ir[r], &len);
        if (len == 4 && memcmp(name, "root", 4) == 0)
            a->root = r;
    }
    int rc = a->root == GX_NONE ? db_fail(&d, RS_EINVAL, "the grammar has no rule 'root'") : 0;
    if (rc == 0)
        rc = subset_construction(&d);
    if (rc == 0)
        rc = trim(&d);
    if (rc == 0 && nullable(a))
        rc = db_fail(&d, RS_ENOMEM, "out of memory building the automaton");
    if (rc == 0)
        rc = left_recursion(&d);
    if (rc == 0 && cache_classes(a, max_token_len ? max_token_len : 1))
        db_fail(&d, RS_ENOMEM, "out of memory building the automaton");
    db_free(&d);
    if (d.rc != RS_OK) {
        ga_free(a);
        return d.rc;
    }
    a->bytes = (size_t)a->n_states * (a->n_bclass * sizeof(uint32_t) + sizeof(struct ga_state)) +
               a->n_calls * sizeof(struct ga_call);
    encode_next(a);
    return RS_OK;
}

/* SPDX-License-Identifier: MIT */
/*
 * Compiled grammars cached by content: the key is the constraint's kind and
 * bytes plus the limits and flags it was compiled with (hashed for the
 * lookup, compared in full, so a hash collision never returns the wrong
 * grammar). Least-recently-used entries are evicted past max_entries or
 * max_bytes (automaton plus token-mask cache, as it has grown). One mutex;
 * compiling runs outside it, so a slow compile never blocks hits, and two
 * threads compiling the same constraint keep the first result.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar_impl.h"

struct centry {
    uint64_t hash, last_use;
    uint8_t *key;
    size_t key_len;
    rs_grammar *g;
};

struct rs_grammar_cache {
    const rs_grammar_vocab *gv;
    pthread_mutex_t mu;
    struct centry *e;
    size_t n, cap;
    uint32_t max_entries;
    size_t max_bytes;
    uint64_t clock;
};

rs_err rs_grammar_cache_create(const rs_grammar_vocab *gv, uint32_t max_entries, size_t max_bytes,
                               rs_grammar_cache **out)
{
    rs_grammar_cache *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return RS_ENOMEM;
    c->gv = gv;
    c->max_entries = max_entries ? max_entries : 1;
    c->max_bytes = max_bytes;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return RS_OK;
}

void rs_grammar_cache_destroy(rs_grammar_cache **pc)
{
    rs_grammar_cache *c = *pc;
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->n; i++) {
        free(c->e[i].key);
        rs_grammar_release(&c->e[i].g);
    }
    free(c->e);
    pthread_mutex_destroy(&c->mu);
    free(c);
    *pc = NULL;
}

struct buf {
    uint8_t *p;
    size_t n, cap;
    int oom;
};

static void put(struct buf *b, const void *s, size_t n)
{
    if (n == 0)
        return;
    if (b->oom || gx_reserve((void **)&b->p, &b->cap, b->n + n, 1)) {
        b->oom = 1;
        return;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void put_u64(struct buf *b, uint64_t v)
{
    put(b, &v, sizeof(v));
}

/* The full key: kind, content, limits (field by field: no padding bytes), flags. */
static int make_key(const struct rs_constraint *c, const struct rs_grammar_limits *l,
                    unsigned flags, struct buf *b)
{
    put_u64(b, (uint64_t)c->kind);
    if (c->kind == RS_CONSTRAINT_CHOICE) {
        put_u64(b, c->n_choices);
        for (uint32_t i = 0; i < c->n_choices; i++) {
            put_u64(b, c->choice_lens[i]);
            put(b, c->choices[i] ? c->choices[i] : "", c->choice_lens[i]);
        }
    } else if (c->kind != RS_CONSTRAINT_JSON_OBJECT) {
        put_u64(b, c->len);
        put(b, c->text ? c->text : "", c->len);
    }
    uint64_t f[] = {l->max_text, l->max_choices, l->max_rules, l->max_nesting, l->max_repeat,
                    l->max_states, l->max_memory, l->max_cache_memory, l->max_stack_depth,
                    l->max_stacks, flags};
    put(b, f, sizeof(f));
    return b->oom ? -1 : 0;
}

static size_t entry_bytes(const rs_grammar *g)
{
    return g->a.bytes + atomic_load_explicit(&((rs_grammar *)g)->cache_bytes, memory_order_relaxed);
}

/* Index of the entry with this key, or -1. Under the mutex. */
static long find(rs_grammar_cache *c, uint64_t h, const struct buf *k)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->e[i].hash == h && c->e[i].key_len == k->n && memcmp(c->e[i].key, k->p, k->n) == 0)
            return (long)i;
    return -1;
}

/* Drops least-recently-used entries over the bounds (keeping `keep`). Under the mutex. */
static void evict(rs_grammar_cache *c, size_t keep)
{
    for (;;) {
        size_t total = 0, lru = c->n;
        for (size_t i = 0; i < c->n; i++) {
            total += entry_bytes(c->e[i].g);
            if (i != keep && (lru == c->n || c->e[i].last_use < c->e[lru].last_use))
                lru = i;
        }
        if (lru == c->n || (c->n <= c->max_entries && total <= c->max_bytes))
            return;
        free(c->e[lru].key);
        rs_grammar_release(&c->e[lru].g);
        c->e[lru] = c->e[--c->n];
        if (keep == c->n)
            keep = lru;
    }
}

rs_err rs_grammar_cache_get(rs_grammar_cache *c, const struct rs_constraint *con,
                            const struct rs_grammar_limits *limits, unsigned flags,
                            rs_grammar **out, int *hit, char *err, size_t err_len)
{
    struct rs_grammar_limits lim;
    if (limits != NULL)
        lim = *limits;
    else
        rs_grammar_limits_default(&lim);
    if (con == NULL || (con->kind == RS_CONSTRAINT_CHOICE && con->n_choices > 0 &&
                        (con->choices == NULL || con->choice_lens == NULL)))
        return rs_grammar_compile(c->gv, con, &lim, flags, out, err, err_len);
    struct buf k = {0};
    if (make_key(con, &lim, flags, &k)) {
        free(k.p);
        return gx_fail(err, err_len, RS_ENOMEM, "out of memory");
    }
    uint64_t h = rs_constraint_hash(con) ^ (uint64_t)k.n * 0x9E3779B97F4A7C15ull;
    pthread_mutex_lock(&c->mu);
    long i = find(c, h, &k);
    if (i >= 0) {
        c->e[i].last_use = ++c->clock;
        *out = rs_grammar_retain(c->e[i].g);
        pthread_mutex_unlock(&c->mu);
        free(k.p);
        if (hit)
            *hit = 1;
        return RS_OK;
    }
    pthread_mutex_unlock(&c->mu);
    rs_grammar *g;
    rs_err rc = rs_grammar_compile(c->gv, con, &lim, flags, &g, err, err_len);
    if (rc != RS_OK) {
        free(k.p);
        return rc;
    }
    if (hit)
        *hit = 0;
    pthread_mutex_lock(&c->mu);
    i = find(c, h, &k);
    if (i >= 0) { /* another thread compiled it meanwhile: keep one */
        rs_grammar_release(&g);
        g = c->e[i].g;
        free(k.p);
    } else if (GX_PUSH(c->e, c->n, c->cap, ((struct centry){h, 0, k.p, k.n, g})) == 0) {
        i = (long)c->n - 1;
    } else {
        free(k.p);
        pthread_mutex_unlock(&c->mu);
        *out = g; /* uncached but usable */
        return RS_OK;
    }
    c->e[i].last_use = ++c->clock;
    *out = rs_grammar_retain(c->e[i].g);
    evict(c, (size_t)i);
    pthread_mutex_unlock(&c->mu);
    return RS_OK;
}

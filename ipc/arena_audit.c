/* SPDX-License-Identifier: MIT */
/*
 * Token arena audit (recovery) and invariant checks. Both build a map from
 * chunk to the (record, generation, position) that references it by
 * scanning every live record's published list; the audit decides each
 * candidate chunk against that map and re-verifies against the list right
 * before its CAS, so lists that change meanwhile are never broken.
 */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "ipc/arena.h"
#include "ipc/arena_impl.h"
#include "ipc/failpoint.h"
#include "ipc/role_impl.h"
#include "ipc/shm_impl.h"

struct ref_map {
    uint32_t rec1; /* record index + 1; 0 = unreferenced */
    uint32_t gen;
    uint32_t pos;  /* entry index in that list */
    uint32_t refs; /* how many lists reference the chunk (A4: at most 1) */
};

/* Fills map from every live record's published list. */
static void build_map(const rs_arena *a, struct ref_map *map)
{
    uint32_t n_rec = rs_table_size(a->table);
    for (uint32_t i = 0; i < n_rec; i++) {
        uint32_t st, gen, owner;
        rs_table_peek(a->table, i, &st, &gen, &owner);
        if (st == RS_TABLE_FREE)
            continue;
        struct arena_list *l = arena_list_at(a, i);
        uint32_t nent = arena_nchunks(a, list_len(atomic_load_explicit(&l->word,
                                                                       memory_order_acquire)));
        for (uint32_t j = 0; j < nent && j < a->max_entries; j++) {
            uint32_t c = (uint32_t)atomic_load_explicit(&l->entry[j], memory_order_relaxed);
            if (c >= a->n)
                continue;
            map[c].refs++;
            map[c].rec1 = i + 1;
            map[c].gen = gen;
            map[c].pos = j;
        }
    }
}

/* Does live record (i, gen) reference chunk c below its published length now? */
static int references(const rs_arena *a, uint32_t i, uint32_t gen, uint32_t c)
{
    uint32_t st, g, owner;
    rs_table_peek(a->table, i, &st, &g, &owner);
    if (st == RS_TABLE_FREE || g != gen)
        return 0;
    struct arena_list *l = arena_list_at(a, i);
    uint32_t nent = arena_nchunks(a, list_len(atomic_load_explicit(&l->word, memory_order_acquire)));
    for (uint32_t j = 0; j < nent && j < a->max_entries; j++)
        if ((uint32_t)atomic_load_explicit(&l->entry[j], memory_order_relaxed) == c)
            return 1;
    return 0;
}

/* Decides one candidate chunk observed as word w. */
static void audit_chunk(rs_arena *a, uint32_t c, uint64_t w, const struct ref_map *m)
{
    uint64_t next = 0;
    if (rs_sw_state(w) == RS_ARENA_RESERVED) {
        if (m->rec1 != 0 && references(a, m->rec1 - 1, m->gen, c))
            next = chunk_linked(m->rec1 - 1, m->gen);
    } else if (references(a, rs_sw_owner(w), rs_sw_gen(w), c)) {
        return; /* LINKED and still referenced */
    }
    if (atomic_compare_exchange_strong(&a->words[c], &w, next))
        atomic_fetch_add_explicit(next ? &a->h->audit_linked : &a->h->audit_freed, 1,
                                  memory_order_relaxed);
}

/* Pass 1: chunks to decide (RESERVED by a dead incarnation, or LINKED), with their words. */
static uint32_t collect(rs_arena *a, uint32_t *cand, uint64_t *seen)
{
    uint32_t n = 0;
    for (uint32_t c = 0; c < a->n; c++) {
        uint64_t w = atomic_load_explicit(&a->words[c], memory_order_acquire);
        uint32_t st = rs_sw_state(w);
        if (st == RS_ARENA_LINKED ||
            (st == RS_ARENA_RESERVED &&
             rs_role_inc_status(a->shm, rs_sw_owner(w)) == RS_INC_FENCED_DEAD)) {
            cand[n] = c;
            seen[n++] = w;
        }
    }
    return n;
}

rs_err rs_arena_recover(rs_arena *a)
{
    if (a->table == NULL)
        return RS_EINVAL;
    struct ref_map *map = calloc(a->n, sizeof(*map));
    uint32_t *cand = malloc(a->n * sizeof(*cand));
    uint64_t *seen = malloc(a->n * sizeof(*seen));
    if (map == NULL || cand == NULL || seen == NULL) {
        free(map), free(cand), free(seen);
        rs_log_error("arena %s: no memory for the audit map", a->name);
        return RS_ENOMEM;
    }
    /* Owners are judged dead before the map is built, so the map sees all their publishes. */
    uint32_t n = collect(a, cand, seen);
    build_map(a, map);
    for (uint32_t i = 0; i < n; i++) {
        audit_chunk(a, cand[i], seen[i], &map[cand[i]]);
        RS_FAILPOINT("arena.recover.chunk");
    }
    free(map), free(cand), free(seen);
    return RS_OK;
}

/* A1..A3 for chunk c; NULL if it holds. */
static const char *chunk_violation(const rs_arena *a, uint32_t c, uint64_t w,
                                   const struct ref_map *m)
{
    switch (rs_sw_state(w)) {
    case RS_ARENA_FREE: return w == 0 ? NULL : "A1 FREE chunk with owner bits";
    case RS_ARENA_LINKED:
        if (a->table != NULL && (m->rec1 != rs_sw_owner(w) + 1 || m->gen != rs_sw_gen(w)))
            return "A2 LINKED to a record that does not reference it";
        return NULL;
    case RS_ARENA_RESERVED:
        if (rs_role_inc_status(a->shm, rs_sw_owner(w)) == RS_INC_FENCED_DEAD)
            return "A3 RESERVED by a dead incarnation (audit pending)";
        return NULL;
    }
    (void)c;
    return "invalid chunk state";
}

/*
 * A4 for a referenced chunk: LINKED to its record, or RESERVED by that list's
 * writer, or (tail only) RESERVED by a fenced writer still alive, which the
 * next writer copies away when it takes the list over.
 */
static const char *ref_violation(const rs_arena *a, uint64_t w, const struct ref_map *m)
{
    if (m->refs > 1)
        return "A4 referenced by two lists";
    if (w == chunk_linked(m->rec1 - 1, m->gen))
        return NULL;
    uint64_t lw = atomic_load(&arena_list_at(a, m->rec1 - 1)->word);
    if (rs_sw_state(w) != RS_ARENA_RESERVED)
        return "A4 referenced chunk LINKED to another record";
    if (rs_sw_owner(w) == list_writer(lw))
        return NULL;
    int tail = list_len(lw) % a->ctok != 0 && m->pos == list_len(lw) / a->ctok;
    if (tail && rs_role_inc_status(a->shm, rs_sw_owner(w)) == RS_INC_FENCED_ALIVE)
        return NULL;
    return "A4 referenced chunk held by an incarnation that is not its list's writer";
}

rs_err rs_arena_check(const rs_arena *a, struct rs_arena_stats *out)
{
    struct rs_arena_stats st;
    memset(&st, 0, sizeof(st));
    struct ref_map *map = calloc(a->n, sizeof(*map));
    if (map == NULL)
        return RS_ENOMEM;
    if (a->table != NULL)
        build_map(a, map);
    rs_err e = RS_OK;
    for (uint32_t c = 0; c < a->n; c++) {
        uint64_t w = atomic_load_explicit(&a->words[c], memory_order_acquire);
        uint32_t s = rs_sw_state(w);
        st.n_free += s == RS_ARENA_FREE;
        st.n_reserved += s == RS_ARENA_RESERVED;
        st.n_linked += s == RS_ARENA_LINKED;
        const char *bad = chunk_violation(a, c, w, &map[c]);
        if (bad == NULL && map[c].rec1 != 0)
            bad = ref_violation(a, w, &map[c]);
        if (bad != NULL && e == RS_OK) {
            rs_log_error("arena %s: chunk %u (state %u, owner %u, gen %u): %s", a->name, c, s,
                         rs_sw_owner(w), rs_sw_gen(w), bad);
            e = RS_EMISMATCH;
        }
    }
    free(map);
    st.n_chunks = a->n;
    st.chunk_tokens = a->ctok;
    st.reserves = atomic_load(&a->h->reserves);
    st.frees = atomic_load(&a->h->frees);
    st.audit_freed = atomic_load(&a->h->audit_freed);
    st.audit_linked = atomic_load(&a->h->audit_linked);
    st.tail_copies = atomic_load(&a->h->tail_copies);
    if (out != NULL)
        *out = st;
    return e;
}

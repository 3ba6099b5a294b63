/* SPDX-License-Identifier: MIT */
/*
 * Token arena (see arena.h): region hooks, append with adoption of a fenced
 * writer's list, seal, read, and freeing a record's chunks. The audit and
 * checks are in arena_audit.c.
 */
#include "ipc/arena.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "ipc/arena_impl.h"
#include "ipc/failpoint.h"
#include "ipc/role_impl.h"
#include "ipc/shm_impl.h"

static uint64_t words_off(void)
{
    return sizeof(struct arena_hdr);
}

static uint64_t data_off(uint64_t n)
{
    return shm_align(words_off() + n * sizeof(uint64_t), SHM_PAGE);
}

static uint64_t arena_memsize(const struct shm_region_dir *d, char *why, size_t len)
{
    if (d->count == 0 || d->count > ARENA_MAX_CHUNKS || d->elem_bytes == 0 ||
        d->elem_bytes > ARENA_MAX_CHUNK_TOKENS || d->flags != 0) {
        shm_why(why, len, "arena '%s': %llu chunks of %llu tokens not in 1..2^24 x 1..2^20",
                d->name, (unsigned long long)d->count, (unsigned long long)d->elem_bytes);
        return 0;
    }
    return data_off(d->count) + d->count * d->elem_bytes * sizeof(int32_t);
}

static void arena_init(void *mem, const struct shm_region_dir *d,
                       const struct rs_shm_region_spec *spec)
{
    (void)spec;
    struct arena_hdr *h = mem;
    h->tag = RS_SHM_ARENA;
    h->n_chunks = (uint32_t)d->count;
    h->chunk_tokens = (uint32_t)d->elem_bytes;
    h->words_off = words_off();
    h->data_off = data_off(d->count); /* chunk words start at 0 = FREE (fallocate zeroes) */
}

static rs_err arena_validate(const void *mem, const struct shm_region_dir *d, uint32_t n_roles,
                             char *why, size_t len)
{
    (void)n_roles;
    const struct arena_hdr *h = mem;
    if (h->tag != RS_SHM_ARENA || h->n_chunks != d->count || h->chunk_tokens != d->elem_bytes ||
        h->words_off != words_off() || h->data_off != data_off(d->count))
        return shm_why(why, len, "arena '%s': its header disagrees with the directory", d->name);
    return RS_OK;
}

const struct shm_kind shm_kind_arena = {
    .name = "arena", .count_name = "chunks", .elem_name = "tokens per chunk",
    .memsize = arena_memsize, .init = arena_init, .validate = arena_validate,
};

uint64_t rs_arena_list_bytes(uint64_t max_tokens, uint64_t chunk_tokens)
{
    if (chunk_tokens == 0)
        return 0;
    return sizeof(uint64_t) * (1 + (max_tokens + chunk_tokens - 1) / chunk_tokens);
}

struct arena_list *arena_list_at(const struct rs_arena *a, uint32_t index)
{
    return (struct arena_list *)((uint8_t *)rs_table_record(a->table, index) + a->list_off);
}

rs_err rs_arena_open(rs_shm *shm, const char *name, rs_role *self, const rs_table *table,
                     uint64_t list_offset, rs_arena **out)
{
    uint64_t rec = table ? rs_table_record_bytes(table) : list_offset + 2 * sizeof(uint64_t);
    return rs_arena_open_sized(shm, name, self, table, list_offset,
                               rec > list_offset ? rec - list_offset : 0, out);
}

rs_err rs_arena_open_sized(rs_shm *shm, const char *name, rs_role *self, const rs_table *table,
                           uint64_t list_offset, uint64_t list_bytes, rs_arena **out)
{
    *out = NULL;
    const struct shm_region_dir *d = shm_find(shm, name, RS_SHM_ARENA);
    if (d == NULL)
        return RS_ENOENT;
    uint64_t rec = table ? rs_table_record_bytes(table) : list_offset + list_bytes;
    if ((table == NULL && self != NULL) || list_offset % 8 != 0 ||
        list_bytes < 2 * sizeof(uint64_t) || list_offset + list_bytes > rec) {
        rs_log_error("arena %s: a %llu-byte list at offset %llu does not fit %llu-byte records",
                     name, (unsigned long long)list_bytes, (unsigned long long)list_offset,
                     (unsigned long long)rec);
        return RS_EINVAL;
    }
    rs_arena *a = calloc(1, sizeof(*a));
    uint64_t entries = (list_bytes - sizeof(uint64_t)) / sizeof(uint64_t);
    if (entries * d->elem_bytes > UINT32_MAX)
        entries = UINT32_MAX / d->elem_bytes;
    if (a != NULL)
        a->scratch = malloc(entries * sizeof(uint32_t));
    if (a == NULL || a->scratch == NULL) {
        free(a);
        return RS_ENOMEM;
    }
    a->shm = shm;
    a->self = self;
    a->roles = shm->roles;
    a->table = table;
    a->h = (struct arena_hdr *)((uint8_t *)rs_shm_base(shm) + d->offset);
    a->words = (_Atomic uint64_t *)((uint8_t *)a->h + words_off());
    a->data = (int32_t *)((uint8_t *)a->h + data_off(d->count));
    a->n = (uint32_t)d->count;
    a->ctok = (uint32_t)d->elem_bytes;
    a->list_off = list_offset;
    a->max_entries = (uint32_t)entries;
    a->inc = self ? rs_role_inc(self) : 0;
    a->role = self ? rs_role_index(self) : 0;
    a->hint = a->inc % a->n;
    snprintf(a->name, sizeof(a->name), "%s", name);
    *out = a;
    return RS_OK;
}

void rs_arena_close(rs_arena **a)
{
    if (a == NULL || *a == NULL)
        return;
    free((*a)->scratch);
    free(*a);
    *a = NULL;
}

uint64_t rs_arena_capacity(const rs_arena *a)
{
    return (uint64_t)a->max_entries * a->ctok;
}

/* The list of a live record `ref`, or NULL (stale reference). */
static struct arena_list *live_list(const rs_arena *a, struct rs_table_ref ref)
{
    if (a->table == NULL || rs_table_get(a->table, ref, NULL, NULL) != RS_OK)
        return NULL;
    return arena_list_at(a, ref.index);
}

static rs_err writable(const rs_arena *a)
{
    if (a->self == NULL)
        return RS_EINVAL;
    return roles_is_current(a->roles, a->role, a->inc) ? RS_OK : RS_ESTALE;
}

rs_err rs_arena_list_init(rs_arena *a, struct rs_table_ref ref)
{
    rs_err e = writable(a);
    struct arena_list *l = e == RS_OK ? live_list(a, ref) : NULL;
    if (l == NULL)
        return e != RS_OK ? e : RS_ESTALE;
    atomic_store_explicit(&l->word, list_make(0, 0), memory_order_release);
    return RS_OK;
}

/* Decoded chunk index of an entry; n (invalid) if out of range. */
static uint32_t entry_chunk(const rs_arena *a, uint64_t e)
{
    uint32_t c = (uint32_t)e;
    return c < a->n ? c : a->n;
}

static rs_err reserve_chunk(rs_arena *a, uint32_t *out)
{
    for (uint32_t n = 0; n < a->n; n++) {
        uint32_t c = (a->hint + n) % a->n;
        uint64_t w = atomic_load_explicit(&a->words[c], memory_order_relaxed);
        if (w != 0)
            continue;
        if (atomic_compare_exchange_strong_explicit(&a->words[c], &w, chunk_reserved(a->inc),
                                                    memory_order_acquire, memory_order_relaxed)) {
            a->hint = (c + 1) % a->n;
            atomic_fetch_add_explicit(&a->h->reserves, 1, memory_order_relaxed);
            *out = c;
            return RS_OK;
        }
    }
    return RS_ENOMEM;
}

static void unreserve(rs_arena *a, const uint32_t *chunks, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        uint64_t mine = chunk_reserved(a->inc);
        if (atomic_compare_exchange_strong(&a->words[chunks[i]], &mine, 0))
            atomic_fetch_add_explicit(&a->h->frees, 1, memory_order_relaxed);
    }
}

/* --- adoption ----------------------------------------------------------------- */

/*
 * Makes the partial tail chunk of a just-adopted list ours: taken over when
 * nobody can still write it, copied to a fresh chunk when its owner is a
 * fenced process that is still alive (it may scribble past the length).
 */
static rs_err adopt_tail(rs_arena *a, struct rs_table_ref ref, struct arena_list *l, uint32_t len)
{
    uint32_t j = len / a->ctok, keep = len % a->ctok;
    for (int attempt = 0; attempt < 4; attempt++) {
        uint32_t t = entry_chunk(a, atomic_load_explicit(&l->entry[j], memory_order_acquire));
        if (t == a->n)
            return RS_EIO;
        uint64_t tw = atomic_load_explicit(&a->words[t], memory_order_acquire);
        if (tw == chunk_reserved(a->inc))
            return RS_OK;
        int linked_here = tw == chunk_linked(ref.index, ref.gen);
        int reserved = rs_sw_state(tw) == RS_ARENA_RESERVED;
        if (!linked_here && !reserved) {
            rs_log_error("arena %s: tail chunk %u of record %u is in state %u", a->name, t,
                         ref.index, rs_sw_state(tw));
            return RS_EIO;
        }
        enum rs_inc_status st = reserved ? rs_role_inc_status(a->shm, rs_sw_owner(tw))
                                         : RS_INC_FENCED_DEAD;
        if (st == RS_INC_CURRENT)
            return RS_ESTALE;
        if (st == RS_INC_FENCED_DEAD) {
            if (atomic_compare_exchange_strong(&a->words[t], &tw, chunk_reserved(a->inc)))
                return RS_OK;
            continue;
        }
        uint32_t c;
        if (reserve_chunk(a, &c) != RS_OK)
            return RS_ENOMEM;
        memcpy(a->data + (uint64_t)c * a->ctok, a->data + (uint64_t)t * a->ctok,
               keep * sizeof(int32_t));
        RS_FAILPOINT("arena.adopt.copied");
        atomic_store_explicit(&l->entry[j], ((uint64_t)a->inc << 32) | c, memory_order_release);
        atomic_fetch_add_explicit(&a->h->tail_copies, 1, memory_order_relaxed);
        return RS_OK;
    }
    return RS_ESTALE;
}

/* Takes the list over from a fenced writer (or none): the CAS fences its publishes. */
static rs_err adopt(rs_arena *a, struct rs_table_ref ref, struct arena_list *l, uint64_t *w)
{
    uint32_t prev = list_writer(*w);
    if (prev != 0 && rs_role_inc_status(a->shm, prev) == RS_INC_CURRENT) {
        rs_log_error("arena %s: record %u is written by live incarnation %u", a->name, ref.index,
                     prev);
        return RS_ESTALE;
    }
    uint64_t nw = list_make(list_len(*w), a->inc);
    if (!atomic_compare_exchange_strong(&l->word, w, nw))
        return RS_ESTALE;
    RS_FAILPOINT("arena.adopt.after_cas");
    *w = nw;
    return list_len(nw) % a->ctok ? adopt_tail(a, ref, l, list_len(nw)) : RS_OK;
}

/* --- append ------------------------------------------------------------------- */

/* Copies tokens to positions [len, len+n) through the tail entry and the new chunks. */
static void write_tokens(rs_arena *a, struct arena_list *l, uint32_t len, uint32_t first_new,
                         const uint32_t *newc, const int32_t *tokens, uint32_t n)
{
    uint64_t pos = len;
    for (uint32_t i = 0; i < n;) {
        uint32_t j = (uint32_t)(pos / a->ctok), off = (uint32_t)(pos % a->ctok);
        uint32_t c = j < first_new
                         ? entry_chunk(a, atomic_load_explicit(&l->entry[j], memory_order_relaxed))
                         : newc[j - first_new];
        uint32_t cnt = a->ctok - off < n - i ? a->ctok - off : n - i;
        memcpy(a->data + (uint64_t)c * a->ctok + off, tokens + i, cnt * sizeof(int32_t));
        pos += cnt;
        i += cnt;
    }
}

/* Stores the new entries unless the list moved on; a fenced writer's stale capture fails. */
static rs_err store_entries(rs_arena *a, struct arena_list *l, uint64_t w, uint32_t first_new,
                            const uint32_t *newc, uint32_t need)
{
    for (int attempt = 0; attempt < 4; attempt++) {
        uint64_t old[64];
        uint32_t done = 0;
        while (done < need) {
            uint32_t batch = need - done < 64 ? need - done : 64;
            for (uint32_t i = 0; i < batch; i++)
                old[i] = atomic_load_explicit(&l->entry[first_new + done + i], memory_order_acquire);
            if (atomic_load_explicit(&l->word, memory_order_acquire) != w)
                return RS_ESTALE;
            uint32_t i = 0;
            for (; i < batch; i++) {
                uint64_t mine = ((uint64_t)a->inc << 32) | newc[done + i];
                if (!atomic_compare_exchange_strong(&l->entry[first_new + done + i], &old[i],
                                                    mine))
                    break;
            }
            if (i < batch)
                break; /* a fenced writer stored meanwhile: capture again */
            done += batch;
        }
        if (done == need)
            return RS_OK;
    }
    return RS_ESTALE;
}

/* Links chunks that became full with this append (owned by us until now). */
static void link_full(rs_arena *a, struct arena_list *l, struct rs_table_ref ref, uint32_t len,
                      uint32_t new_len)
{
    for (uint32_t j = len / a->ctok; j < new_len / a->ctok; j++) {
        uint32_t c = entry_chunk(a, atomic_load_explicit(&l->entry[j], memory_order_relaxed));
        uint64_t mine = chunk_reserved(a->inc);
        if (c < a->n)
            atomic_compare_exchange_strong(&a->words[c], &mine, chunk_linked(ref.index, ref.gen));
    }
}

static rs_err append_chunks(rs_arena *a, struct rs_table_ref ref, struct arena_list *l, uint64_t w,
                            const int32_t *tokens, uint32_t n, uint32_t *newc)
{
    uint32_t len = list_len(w), first_new = arena_nchunks(a, len);
    uint32_t need = arena_nchunks(a, (uint64_t)len + n) - first_new, got = 0;
    if (len % a->ctok != 0) {
        uint32_t t = entry_chunk(a, atomic_load_explicit(&l->entry[len / a->ctok],
                                                         memory_order_acquire));
        if (t == a->n || atomic_load(&a->words[t]) != chunk_reserved(a->inc))
            return RS_ESTALE; /* our tail was taken over: we are fenced */
    }
    rs_err e = RS_OK;
    while (got < need && e == RS_OK)
        if ((e = reserve_chunk(a, &newc[got])) == RS_OK)
            got++;
    if (e == RS_OK) {
        write_tokens(a, l, len, first_new, newc, tokens, n);
        RS_FAILPOINT("arena.append.written");
        e = store_entries(a, l, w, first_new, newc, need);
    }
    RS_FAILPOINT("arena.append.before_publish");
    /* P1: publishes tokens and entries below the new length; pairs with C1 in read. */
    if (e == RS_OK && !atomic_compare_exchange_strong_explicit(
                          &l->word, &w, list_make(len + n, a->inc), memory_order_release,
                          memory_order_relaxed))
        e = RS_ESTALE;
    if (e != RS_OK) {
        unreserve(a, newc, got);
        return e;
    }
    RS_FAILPOINT("arena.append.after_publish");
    link_full(a, l, ref, len, len + n);
    return RS_OK;
}

rs_err rs_arena_append(rs_arena *a, struct rs_table_ref ref, const int32_t *tokens, uint32_t n)
{
    rs_err e = writable(a);
    struct arena_list *l = e == RS_OK ? live_list(a, ref) : NULL;
    if (l == NULL)
        return e != RS_OK ? e : RS_ESTALE;
    uint64_t w = atomic_load_explicit(&l->word, memory_order_acquire);
    if (list_writer(w) != a->inc && (e = adopt(a, ref, l, &w)) != RS_OK)
        return e;
    if (n == 0)
        return RS_OK;
    if ((uint64_t)list_len(w) + n > rs_arena_capacity(a)) {
        rs_log_error("arena %s: record %u would hold %llu tokens, capacity %llu", a->name,
                     ref.index, (unsigned long long)list_len(w) + n,
                     (unsigned long long)rs_arena_capacity(a));
        return RS_ERANGE;
    }
    uint32_t need = arena_nchunks(a, (uint64_t)list_len(w) + n) - arena_nchunks(a, list_len(w));
    uint32_t local[64], *newc = need <= 64 ? local : malloc(need * sizeof(uint32_t));
    if (newc == NULL)
        return RS_ENOMEM;
    e = append_chunks(a, ref, l, w, tokens, n, newc);
    if (newc != local)
        free(newc);
    if (e == RS_ENOMEM)
        rs_log_warn("arena %s: no free chunks for %u tokens of record %u", a->name, n, ref.index);
    return e;
}

rs_err rs_arena_seal(rs_arena *a, struct rs_table_ref ref)
{
    rs_err e = writable(a);
    struct arena_list *l = e == RS_OK ? live_list(a, ref) : NULL;
    if (l == NULL)
        return e != RS_OK ? e : RS_ESTALE;
    uint64_t w = atomic_load_explicit(&l->word, memory_order_acquire);
    if (list_writer(w) != a->inc)
        return RS_ESTALE;
    uint32_t len = list_len(w);
    if (len % a->ctok != 0) {
        uint32_t t = entry_chunk(a, atomic_load(&l->entry[len / a->ctok]));
        uint64_t mine = chunk_reserved(a->inc);
        if (t < a->n)
            atomic_compare_exchange_strong(&a->words[t], &mine, chunk_linked(ref.index, ref.gen));
    }
    return atomic_compare_exchange_strong(&l->word, &w, list_make(len, 0)) ? RS_OK : RS_ESTALE;
}

/* --- read and free -------------------------------------------------------------- */

rs_err rs_arena_len(const rs_arena *a, struct rs_table_ref ref, uint32_t *len)
{
    struct arena_list *l = live_list(a, ref);
    if (l == NULL)
        return RS_ESTALE;
    *len = list_len(atomic_load_explicit(&l->word, memory_order_acquire));
    return RS_OK;
}

rs_err rs_arena_read(const rs_arena *a, struct rs_table_ref ref, uint32_t from, uint32_t n,
                     int32_t *out, uint32_t *got)
{
    *got = 0;
    struct arena_list *l = live_list(a, ref);
    if (l == NULL)
        return RS_ESTALE;
    /* C1: acquires the writer's P1 publish: entries and tokens below len are complete. */
    uint32_t len = list_len(atomic_load_explicit(&l->word, memory_order_acquire));
    if (len > rs_arena_capacity(a))
        return RS_EIO;
    uint64_t end = (uint64_t)from + n < len ? (uint64_t)from + n : len;
    for (uint64_t pos = from; pos < end;) {
        uint32_t j = (uint32_t)(pos / a->ctok), off = (uint32_t)(pos % a->ctok);
        uint32_t c = entry_chunk(a, atomic_load_explicit(&l->entry[j], memory_order_relaxed));
        if (c == a->n)
            return RS_EIO;
        uint64_t cnt = a->ctok - off < end - pos ? a->ctok - off : end - pos;
        memcpy(out + (pos - from), a->data + (uint64_t)c * a->ctok + off, cnt * sizeof(int32_t));
        pos += cnt;
    }
    /* The record may have been freed and its chunks reused while we copied. */
    if (rs_table_get(a->table, ref, NULL, NULL) != RS_OK)
        return RS_ESTALE;
    *got = end > from ? (uint32_t)(end - from) : 0;
    return RS_OK;
}

rs_err rs_arena_free_record(rs_arena *a, rs_table *table, struct rs_table_ref ref, uint32_t from)
{
    rs_err e = writable(a);
    struct arena_list *l = e == RS_OK ? live_list(a, ref) : NULL;
    if (l == NULL)
        return e != RS_OK ? e : RS_ESTALE;
    uint32_t nent = arena_nchunks(a, list_len(atomic_load_explicit(&l->word, memory_order_acquire)));
    if (nent > a->max_entries)
        return RS_EIO;
    for (uint32_t j = 0; j < nent; j++)
        a->scratch[j] = entry_chunk(a, atomic_load_explicit(&l->entry[j], memory_order_relaxed));
    e = rs_table_free(table, ref, from);
    if (e != RS_OK)
        return e;
    RS_FAILPOINT("arena.free.after_record");
    for (uint32_t j = 0; j < nent; j++) {
        uint32_t c = a->scratch[j];
        uint64_t linked = chunk_linked(ref.index, ref.gen), mine = chunk_reserved(a->inc);
        if (c < a->n && (atomic_compare_exchange_strong(&a->words[c], &linked, 0) ||
                         atomic_compare_exchange_strong(&a->words[c], &mine, 0)))
            atomic_fetch_add_explicit(&a->h->frees, 1, memory_order_relaxed);
    }
    return RS_OK;
}

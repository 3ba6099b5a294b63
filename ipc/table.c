/* SPDX-License-Identifier: MIT */
/*
 * Slot table (see table.h): region hooks, claim/publish/transition/free by
 * CAS on the record's state word, iteration, recovery and checks.
 */
#include "ipc/table.h"

#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "ipc/failpoint.h"
#include "ipc/role_impl.h"
#include "ipc/shm_impl.h"
#include "ipc/stateword.h"

#define TABLE_MAX_RECORDS (1u << 24)
#define TABLE_MAX_BYTES (1u << 24)
#define TABLE_REC_HDR 64u /* state word, padded so user bytes start on a cache line */

struct table_hdr {
    uint32_t tag;
    uint32_t n_records;
    uint64_t rec_bytes;
    uint64_t stride;
    uint32_t start_gen;
    uint32_t pad;
    uint8_t pad2[32];
    alignas(64) _Atomic uint64_t claims;
    _Atomic uint64_t frees, reclaimed, full;
};
_Static_assert(sizeof(struct table_hdr) == 128, "table header is two lines");

struct rs_table {
    rs_shm *shm;
    rs_role *self;
    void *roles;
    struct table_hdr *h;
    uint8_t *recs;
    uint32_t n;
    uint64_t rec_bytes, stride;
    uint32_t inc, role;
    uint32_t hint; /* where the next claim scan starts */
    char name[32];
};

static uint64_t table_stride(uint64_t rec_bytes)
{
    return shm_align(TABLE_REC_HDR + rec_bytes, 64);
}

static uint64_t table_memsize(const struct shm_region_dir *d, char *why, size_t len)
{
    if (d->count == 0 || d->count > TABLE_MAX_RECORDS || d->elem_bytes > TABLE_MAX_BYTES ||
        d->flags != 0) {
        shm_why(why, len, "table '%s': %llu records of %llu bytes not in 1..2^24 x 0..2^24",
                d->name, (unsigned long long)d->count, (unsigned long long)d->elem_bytes);
        return 0;
    }
    return sizeof(struct table_hdr) + d->count * table_stride(d->elem_bytes);
}

static _Atomic uint64_t *rec_sw(const rs_table *t, uint32_t i)
{
    return (_Atomic uint64_t *)(t->recs + (uint64_t)i * t->stride);
}

static void table_init(void *mem, const struct shm_region_dir *d,
                       const struct rs_shm_region_spec *spec)
{
    (void)spec;
    struct table_hdr *h = mem;
    h->tag = RS_SHM_TABLE;
    h->n_records = (uint32_t)d->count;
    h->rec_bytes = d->elem_bytes;
    h->stride = table_stride(d->elem_bytes);
    h->start_gen = (uint32_t)d->start & RS_SW_GEN_MASK;
    uint8_t *recs = (uint8_t *)(h + 1);
    for (uint64_t i = 0; i < d->count; i++)
        atomic_store_explicit((_Atomic uint64_t *)(recs + i * h->stride),
                              rs_sw_make(RS_TABLE_FREE, h->start_gen, 0), memory_order_relaxed);
}

static rs_err table_validate(const void *mem, const struct shm_region_dir *d, uint32_t n_roles,
                             char *why, size_t len)
{
    (void)n_roles;
    const struct table_hdr *h = mem;
    if (h->tag != RS_SHM_TABLE || h->n_records != d->count || h->rec_bytes != d->elem_bytes ||
        h->stride != table_stride(d->elem_bytes) || h->start_gen != (d->start & RS_SW_GEN_MASK))
        return shm_why(why, len, "table '%s': its header disagrees with the directory", d->name);
    return RS_OK;
}

const struct shm_kind shm_kind_table = {
    .name = "table", .count_name = "records", .elem_name = "record bytes",
    .memsize = table_memsize, .init = table_init, .validate = table_validate,
};

rs_err rs_table_open(rs_shm *shm, const char *name, rs_role *self, rs_table **out)
{
    *out = NULL;
    const struct shm_region_dir *d = shm_find(shm, name, RS_SHM_TABLE);
    if (d == NULL)
        return RS_ENOENT;
    rs_table *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return RS_ENOMEM;
    t->shm = shm;
    t->self = self;
    t->roles = shm->roles;
    t->h = (struct table_hdr *)((uint8_t *)rs_shm_base(shm) + d->offset);
    t->recs = (uint8_t *)(t->h + 1);
    t->n = (uint32_t)d->count;
    t->rec_bytes = d->elem_bytes;
    t->stride = table_stride(d->elem_bytes);
    t->inc = self ? rs_role_inc(self) : 0;
    t->role = self ? rs_role_index(self) : 0;
    t->hint = t->inc % t->n; /* spread claimers over the table */
    snprintf(t->name, sizeof(t->name), "%s", name);
    *out = t;
    return RS_OK;
}

void rs_table_close(rs_table **t)
{
    if (t == NULL)
        return;
    free(*t);
    *t = NULL;
}

uint32_t rs_table_size(const rs_table *t)
{
    return t->n;
}

uint64_t rs_table_record_bytes(const rs_table *t)
{
    return t->rec_bytes;
}

void *rs_table_record(const rs_table *t, uint32_t index)
{
    return index < t->n ? t->recs + (uint64_t)index * t->stride + TABLE_REC_HDR : NULL;
}

void rs_table_peek(const rs_table *t, uint32_t index, uint32_t *state, uint32_t *gen,
                   uint32_t *owner)
{
    uint64_t w = index < t->n ? atomic_load_explicit(rec_sw(t, index), memory_order_acquire) : 0;
    *state = rs_sw_state(w);
    *gen = rs_sw_gen(w);
    *owner = rs_sw_owner(w);
}

static rs_err may_write(const rs_table *t, const char *op)
{
    if (t->self == NULL) {
        rs_log_error("table %s: %s needs a role", t->name, op);
        return RS_EINVAL;
    }
    return roles_is_current(t->roles, t->role, t->inc) ? RS_OK : RS_ESTALE;
}

rs_err rs_table_claim(rs_table *t, struct rs_table_ref *ref, void **rec)
{
    rs_err e = may_write(t, "claim");
    if (e != RS_OK)
        return e;
    for (uint32_t n = 0; n < t->n; n++) {
        uint32_t i = (t->hint + n) % t->n;
        _Atomic uint64_t *sw = rec_sw(t, i);
        uint64_t w = atomic_load_explicit(sw, memory_order_relaxed);
        if (rs_sw_state(w) != RS_TABLE_FREE)
            continue;
        uint64_t mine = rs_sw_make(RS_TABLE_CLAIMED, rs_sw_gen(w), t->inc);
        if (!atomic_compare_exchange_strong_explicit(sw, &w, mine, memory_order_acquire,
                                                     memory_order_relaxed))
            continue;
        RS_FAILPOINT("table.claim.after_cas");
        if (!roles_is_current(t->roles, t->role, t->inc)) {
            atomic_compare_exchange_strong(sw, &mine, w);
            return RS_ESTALE;
        }
        t->hint = (i + 1) % t->n;
        ref->index = i;
        ref->gen = rs_sw_gen(w);
        *rec = rs_table_record(t, i);
        atomic_fetch_add_explicit(&t->h->claims, 1, memory_order_relaxed);
        return RS_OK;
    }
    atomic_fetch_add_explicit(&t->h->full, 1, memory_order_relaxed);
    return RS_EFULL;
}

/* CAS record ref from (from, any owner) to (to, gen', us); 0 stale, -1 other state, 1 done. */
static int move(rs_table *t, struct rs_table_ref ref, uint32_t from, uint32_t to, int free_it,
                uint64_t *old)
{
    _Atomic uint64_t *sw = rec_sw(t, ref.index);
    uint64_t w = atomic_load_explicit(sw, memory_order_acquire);
    for (;;) {
        if (rs_sw_gen(w) != (ref.gen & RS_SW_GEN_MASK) || rs_sw_state(w) == RS_TABLE_FREE)
            return 0;
        if (rs_sw_state(w) != from)
            return -1;
        uint64_t nw = free_it ? rs_sw_make(RS_TABLE_FREE, rs_sw_gen_next(ref.gen), 0)
                              : rs_sw_make(to, ref.gen, t->inc);
        /* P1: releases the record contents written before; C1: acquires the previous owner's. */
        if (atomic_compare_exchange_weak_explicit(sw, &w, nw, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            *old = w;
            return 1;
        }
    }
}

static rs_err check_ref(const rs_table *t, struct rs_table_ref ref, const char *op)
{
    if (ref.index >= t->n) {
        rs_log_error("table %s: %s of record %u beyond %u", t->name, op, ref.index, t->n);
        return RS_EINVAL;
    }
    return may_write(t, op);
}

rs_err rs_table_publish(rs_table *t, struct rs_table_ref ref, uint32_t state)
{
    rs_err e = check_ref(t, ref, "publish");
    if (e != RS_OK || state < RS_TABLE_USER || state >= RS_TABLE_NSTATES)
        return e != RS_OK ? e : RS_EINVAL;
    _Atomic uint64_t *sw = rec_sw(t, ref.index);
    uint64_t mine = rs_sw_make(RS_TABLE_CLAIMED, ref.gen, t->inc);
    if (!atomic_compare_exchange_strong_explicit(sw, &mine, rs_sw_make(state, ref.gen, t->inc),
                                                 memory_order_release, memory_order_relaxed))
        return RS_ESTALE;
    return RS_OK;
}

rs_err rs_table_transition(rs_table *t, struct rs_table_ref ref, uint32_t from, uint32_t to)
{
    rs_err e = check_ref(t, ref, "transition");
    if (e != RS_OK || from < RS_TABLE_USER || to < RS_TABLE_USER || to >= RS_TABLE_NSTATES)
        return e != RS_OK ? e : RS_EINVAL;
    uint64_t old;
    int r = move(t, ref, from, to, 0, &old);
    if (r <= 0)
        return r == 0 ? RS_ESTALE : RS_EAGAIN;
    RS_FAILPOINT("table.transition.after_cas");
    if (!roles_is_current(t->roles, t->role, t->inc)) {
        uint64_t mine = rs_sw_make(to, ref.gen, t->inc);
        atomic_compare_exchange_strong(rec_sw(t, ref.index), &mine, old);
        return RS_ESTALE;
    }
    return RS_OK;
}

rs_err rs_table_free(rs_table *t, struct rs_table_ref ref, uint32_t from)
{
    rs_err e = check_ref(t, ref, "free");
    if (e != RS_OK || from == RS_TABLE_FREE || from >= RS_TABLE_NSTATES)
        return e != RS_OK ? e : RS_EINVAL;
    uint64_t old;
    int r = move(t, ref, from, RS_TABLE_FREE, 1, &old);
    if (r <= 0)
        return r == 0 ? RS_ESTALE : RS_EAGAIN;
    atomic_fetch_add_explicit(&t->h->frees, 1, memory_order_relaxed);
    return RS_OK;
}

rs_err rs_table_get(const rs_table *t, struct rs_table_ref ref, uint32_t *state, void **rec)
{
    if (ref.index >= t->n)
        return RS_EINVAL;
    /* C1: acquires the contents released by the last publish or transition. */
    uint64_t w = atomic_load_explicit(rec_sw(t, ref.index), memory_order_acquire);
    if (rs_sw_gen(w) != (ref.gen & RS_SW_GEN_MASK) || rs_sw_state(w) == RS_TABLE_FREE)
        return RS_ESTALE;
    if (state != NULL)
        *state = rs_sw_state(w);
    if (rec != NULL)
        *rec = rs_table_record(t, ref.index);
    return RS_OK;
}

rs_err rs_table_next(const rs_table *t, uint32_t *cursor, uint64_t state_mask,
                     struct rs_table_ref *ref, uint32_t *state)
{
    for (uint32_t i = *cursor; i < t->n; i++) {
        uint64_t w = atomic_load_explicit(rec_sw(t, i), memory_order_acquire);
        if (!((state_mask >> rs_sw_state(w)) & 1u))
            continue;
        ref->index = i;
        ref->gen = rs_sw_gen(w);
        if (state != NULL)
            *state = rs_sw_state(w);
        *cursor = i + 1;
        return RS_OK;
    }
    *cursor = t->n;
    return RS_ENOENT;
}

rs_err rs_table_recover(rs_table *t)
{
    for (uint32_t i = 0; i < t->n; i++) {
        _Atomic uint64_t *sw = rec_sw(t, i);
        uint64_t w = atomic_load_explicit(sw, memory_order_acquire);
        if (rs_sw_state(w) != RS_TABLE_CLAIMED || rs_sw_owner(w) == t->inc)
            continue;
        if (rs_role_inc_status(t->shm, rs_sw_owner(w)) != RS_INC_FENCED_DEAD)
            continue; /* a live claimer, or a stopped one that may still write the record */
        if (atomic_compare_exchange_strong(
                sw, &w, rs_sw_make(RS_TABLE_FREE, rs_sw_gen_next(rs_sw_gen(w)), 0))) {
            atomic_fetch_add_explicit(&t->h->reclaimed, 1, memory_order_relaxed);
            rs_log_info("table %s: record %u claimed by dead incarnation %u freed", t->name, i,
                        rs_sw_owner(w));
        }
        RS_FAILPOINT("table.recover.record");
    }
    return RS_OK;
}

static void note_owner(struct rs_table_stats *st, uint32_t owner)
{
    for (uint32_t i = 0; i < st->n_owners && i < 8; i++) {
        if (st->owner[i] == owner) {
            st->owner_records[i]++;
            return;
        }
    }
    if (st->n_owners < 8) {
        st->owner[st->n_owners] = owner;
        st->owner_records[st->n_owners] = 1;
    }
    st->n_owners++;
}

rs_err rs_table_check(const rs_table *t, struct rs_table_stats *out)
{
    struct rs_table_stats st;
    memset(&st, 0, sizeof(st));
    st.n_records = t->n;
    st.record_bytes = t->rec_bytes;
    rs_err e = RS_OK;
    for (uint32_t i = 0; i < t->n; i++) {
        uint64_t w = atomic_load_explicit(rec_sw(t, i), memory_order_acquire);
        uint32_t s = rs_sw_state(w), owner = rs_sw_owner(w);
        st.n_state[s]++;
        if (owner != 0)
            note_owner(&st, owner);
        const char *bad = NULL;
        if ((s == RS_TABLE_FREE) != (owner == 0))
            bad = "T1 owner does not match state";
        else if (s == RS_TABLE_CLAIMED && owner != t->inc &&
                 rs_role_inc_status(t->shm, owner) == RS_INC_FENCED_DEAD)
            bad = "T2 claimed by a dead incarnation";
        if (bad != NULL && e == RS_OK) {
            rs_log_error("table %s: record %u (state %u, gen %u, owner %u): %s", t->name, i, s,
                         rs_sw_gen(w), owner, bad);
            e = RS_EMISMATCH;
        }
    }
    st.claims = atomic_load(&t->h->claims);
    st.frees = atomic_load(&t->h->frees);
    st.reclaimed = atomic_load(&t->h->reclaimed);
    st.full = atomic_load(&t->h->full);
    if (out != NULL)
        *out = st;
    return e;
}

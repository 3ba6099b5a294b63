/* SPDX-License-Identifier: MIT */
/*
 * SPSC ring: region layout hooks and the hot path (claim, commit, get,
 * release). Recovery, helping and checks are in ring_recover.c. See ring.h
 * for the state machine; P1/C1 and P2/C2 label the release/acquire pairs.
 */
#include "ipc/ring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "ipc/crc32c.h"
#include "ipc/failpoint.h"
#include "ipc/ring_impl.h"
#include "ipc/role_impl.h"
#include "ipc/shm_impl.h"

static uint64_t ring_stride(uint64_t slot_bytes)
{
    return slot_bytes >= SHM_PAGE ? shm_align(slot_bytes, SHM_PAGE) : shm_align(slot_bytes, 64);
}

static uint64_t ring_payload_off(uint64_t n)
{
    return shm_align(sizeof(struct ring_hdr) + n * sizeof(struct ring_slot), SHM_PAGE);
}

static uint64_t ring_memsize(const struct shm_region_dir *d, char *why, size_t len)
{
    if (d->count < 2 || d->count > RING_MAX_SLOTS || (d->count & (d->count - 1)) != 0) {
        shm_why(why, len, "ring '%s': %llu slots is not a power of two in 2..2^20", d->name,
                (unsigned long long)d->count);
        return 0;
    }
    if (d->elem_bytes == 0 || d->elem_bytes > RING_MAX_SLOT_BYTES || (d->flags & ~RS_RING_CRC)) {
        shm_why(why, len, "ring '%s': slot bytes %llu not in 1..2^30, or unknown flags 0x%x",
                d->name, (unsigned long long)d->elem_bytes, d->flags);
        return 0;
    }
    return ring_payload_off(d->count) + d->count * ring_stride(d->elem_bytes);
}

static void ring_init(void *mem, const struct shm_region_dir *d,
                      const struct rs_shm_region_spec *spec)
{
    (void)spec;
    struct ring_hdr *h = mem;
    h->tag = RS_SHM_RING;
    h->n_slots = (uint32_t)d->count;
    h->slot_bytes = (uint32_t)d->elem_bytes;
    h->flags = d->flags;
    h->prod_role = d->prod_role;
    h->cons_role = d->cons_role;
    h->stride = ring_stride(d->elem_bytes);
    h->payload_off = ring_payload_off(d->count);
    h->start_seq = d->start;
    atomic_store_explicit(&h->cons_seq, d->start, memory_order_relaxed);
    atomic_store_explicit(&h->p_floor, d->start, memory_order_relaxed);
    uint32_t shift = (uint32_t)__builtin_ctzll(d->count);
    struct ring_slot *slots = (struct ring_slot *)(h + 1);
    for (uint64_t k = 0; k < d->count; k++) {
        /* Slot k first holds the first seq >= start that maps to it. */
        uint64_t first = d->start + ((k - d->start) & (d->count - 1));
        uint32_t lap = (uint32_t)(first >> shift) & RS_SW_GEN_MASK;
        atomic_store_explicit(&slots[k].sw, rs_sw_make(RS_RING_FREE, lap, 0),
                              memory_order_relaxed);
    }
}

static rs_err ring_validate(const void *mem, const struct shm_region_dir *d, uint32_t n_roles,
                            char *why, size_t len)
{
    const struct ring_hdr *h = mem;
    if (h->tag != RS_SHM_RING || h->n_slots != d->count || h->slot_bytes != d->elem_bytes ||
        h->flags != d->flags || h->stride != ring_stride(d->elem_bytes) ||
        h->payload_off != ring_payload_off(d->count) || h->start_seq != d->start)
        return shm_why(why, len, "ring '%s': its header disagrees with the directory", d->name);
    if (h->prod_role != d->prod_role || h->cons_role != d->cons_role || d->prod_role >= n_roles ||
        d->cons_role >= n_roles || d->prod_role == d->cons_role)
        return shm_why(why, len, "ring '%s': producer/consumer roles %u/%u invalid (%u roles)",
                       d->name, d->prod_role, d->cons_role, n_roles);
    return RS_OK;
}

const struct shm_kind shm_kind_ring = {
    .name = "ring", .count_name = "slots", .elem_name = "slot bytes",
    .memsize = ring_memsize, .init = ring_init, .validate = ring_validate,
};

const char *rs_ring_state_name(unsigned state)
{
    static const char *names[] = {"FREE",      "WRITING",   "COMMITTED",  "READING",
                                  "IN_FLIGHT", "ABANDONED", "QUARANTINED"};
    return state < RS_RING_NSTATES ? names[state] : "INVALID";
}

rs_err rs_ring_open(rs_shm *shm, const char *name, rs_role *self, rs_ring **out)
{
    *out = NULL;
    const struct shm_region_dir *d = shm_find(shm, name, RS_SHM_RING);
    if (d == NULL)
        return RS_ENOENT;
    enum ring_side side = RING_OBSERVER;
    if (self != NULL) {
        uint32_t idx = rs_role_index(self);
        side = idx == d->prod_role ? RING_PRODUCER : idx == d->cons_role ? RING_CONSUMER
                                                                         : RING_OBSERVER;
        if (side == RING_OBSERVER) {
            rs_log_error("ring %s: role %u is neither its producer nor its consumer", name, idx);
            return RS_EINVAL;
        }
    }
    rs_ring *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return RS_ENOMEM;
    r->shm = shm;
    r->self = self;
    r->roles = shm->roles;
    r->h = (struct ring_hdr *)((uint8_t *)rs_shm_base(shm) + d->offset);
    r->slots = (struct ring_slot *)(r->h + 1);
    /* Geometry comes from the validated directory, never re-read from shared memory. */
    r->n = (uint32_t)d->count;
    r->mask = r->n - 1;
    r->shift = (uint32_t)__builtin_ctz(r->n);
    r->slot_bytes = (uint32_t)d->elem_bytes;
    r->flags = d->flags;
    r->stride = ring_stride(d->elem_bytes);
    r->payload = (uint8_t *)r->h + ring_payload_off(d->count);
    r->prod_role = d->prod_role;
    r->cons_role = d->cons_role;
    r->side = side;
    r->hint_every = r->n / 2;
    r->inc = self ? rs_role_inc(self) : 0;
    snprintf(r->name, sizeof(r->name), "%s", name);
    *out = r;
    return RS_OK;
}

void rs_ring_close(rs_ring **ring)
{
    if (ring == NULL)
        return;
    free(*ring);
    *ring = NULL;
}

static rs_err side_ready(const rs_ring *r, enum ring_side side, const char *op)
{
    if (r->side != side || !r->recovered) {
        rs_log_error("ring %s: %s needs the %s side, recovered first", r->name, op,
                     side == RING_PRODUCER ? "producer" : "consumer");
        return RS_EINVAL;
    }
    return RS_OK;
}

static int is_current(const rs_ring *r)
{
    return roles_is_current(r->roles, r->side == RING_PRODUCER ? r->prod_role : r->cons_role,
                            r->inc);
}

/* --- producer ------------------------------------------------------------------ */

/* The claim proper, once slot k is FREE at its lap; RS_ESTALE if fenced meanwhile. */
static rs_err claim_slot(rs_ring *r, uint32_t k, uint64_t w, struct rs_ring_wr *wr)
{
    uint32_t lap = ring_lap(r, r->p_seq);
    uint64_t mine = rs_sw_make(RS_RING_WRITING, lap, r->inc);
    /* C2: acquires the consumer's P2 release, so its reads of this payload are over. */
    if (!atomic_compare_exchange_strong_explicit(&r->slots[k].sw, &w, mine, memory_order_acq_rel,
                                                 memory_order_acquire))
        return RS_EAGAIN;
    RS_FAILPOINT("ring.claim.after_cas");
    if (!is_current(r)) {
        atomic_compare_exchange_strong(&r->slots[k].sw, &mine, rs_sw_make(RS_RING_FREE, lap, 0));
        return RS_ESTALE;
    }
    wr->data = r->payload + (uint64_t)k * r->stride;
    wr->cap = r->slot_bytes;
    wr->seq = r->p_seq;
    wr->slot = k;
    wr->lap = lap;
    r->claimed = 1;
    return RS_OK;
}

rs_err rs_ring_try_claim(rs_ring *r, struct rs_ring_wr *wr)
{
    rs_err e = side_ready(r, RING_PRODUCER, "claim");
    if (e != RS_OK || r->claimed) {
        if (e == RS_OK)
            rs_log_error("ring %s: a claim is already outstanding", r->name);
        return RS_EINVAL;
    }
    if (!is_current(r))
        return RS_ESTALE;
    for (uint32_t tries = 0; tries <= 2 * r->n + 2; tries++) {
        uint32_t k = (uint32_t)r->p_seq & r->mask, lap = ring_lap(r, r->p_seq);
        uint64_t w = atomic_load_explicit(&r->slots[k].sw, memory_order_acquire);
        if (rs_sw_gen(w) == ring_lap_prev(lap)) {
            ring_count(&r->h->p_full);
            return RS_EFULL; /* the previous lap's record is not released yet */
        }
        if (rs_sw_gen(w) != lap) {
            rs_log_error("ring %s: slot %u lap %u, expected %u for seq %llu", r->name, k,
                         rs_sw_gen(w), lap, (unsigned long long)r->p_seq);
            return RS_EIO;
        }
        if (rs_sw_state(w) == RS_RING_FREE) {
            e = claim_slot(r, k, w, wr);
            if (e != RS_EAGAIN)
                return e;
            continue;
        }
        if (!ring_prod_help(r, k, w))
            return RS_EFULL;
    }
    return RS_EFULL;
}

rs_err rs_ring_commit(rs_ring *r, struct rs_ring_wr *wr, uint64_t id, uint32_t len)
{
    if (!r->claimed || r->side != RING_PRODUCER || wr->seq != r->p_seq) {
        rs_log_error("ring %s: commit without a matching claim", r->name);
        return RS_EINVAL;
    }
    if (len > r->slot_bytes) {
        rs_log_error("ring %s: record of %u bytes exceeds the %u-byte slot", r->name, len,
                     r->slot_bytes);
        return RS_EINVAL;
    }
    struct ring_slot *s = &r->slots[wr->slot];
    s->id = id;
    s->seq = wr->seq;
    s->len = len;
    s->writer = r->inc;
    s->crc = (r->flags & RS_RING_CRC) ? rs_crc32c(0, wr->data, len) : 0;
    RS_FAILPOINT("ring.commit.before");
    r->claimed = 0;
    uint64_t mine = rs_sw_make(RS_RING_WRITING, wr->lap, r->inc);
    if (!is_current(r)) {
        atomic_compare_exchange_strong(&s->sw, &mine, rs_sw_make(RS_RING_FREE, wr->lap, 0));
        return RS_ESTALE;
    }
    /* P1: publishes payload and descriptor; pairs with C1 in rs_ring_try_get. */
    if (!atomic_compare_exchange_strong_explicit(&s->sw, &mine,
                                                 rs_sw_make(RS_RING_COMMITTED, wr->lap, r->inc),
                                                 memory_order_release, memory_order_relaxed)) {
        rs_log_warn("ring %s: seq %llu taken from fenced incarnation %u", r->name,
                    (unsigned long long)wr->seq, r->inc);
        return RS_ESTALE;
    }
    r->p_seq++;
    ring_count(&r->h->p_commits);
    RS_FAILPOINT("ring.commit.after");
    return RS_OK;
}

rs_err rs_ring_abort(rs_ring *r, struct rs_ring_wr *wr)
{
    if (!r->claimed || r->side != RING_PRODUCER || wr->seq != r->p_seq)
        return RS_EINVAL;
    r->claimed = 0;
    uint64_t mine = rs_sw_make(RS_RING_WRITING, wr->lap, r->inc);
    if (!atomic_compare_exchange_strong(&r->slots[wr->slot].sw, &mine,
                                        rs_sw_make(RS_RING_FREE, wr->lap, 0)))
        return RS_ESTALE;
    return RS_OK;
}

/* --- consumer ------------------------------------------------------------------ */

void ring_advance_cons(struct rs_ring *r, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(&r->h->cons_seq, memory_order_acquire);
    while (seq_lt(cur, v) &&
           !atomic_compare_exchange_weak_explicit(&r->h->cons_seq, &cur, v, memory_order_release,
                                                  memory_order_acquire))
        ;
}

/*
 * Publishes the consumed-seq hint at least every n/2 releases, so it lags
 * the truth by less than one lap: recovery scans forward from it.
 */
static void publish_hint(rs_ring *r)
{
    if (r->c_rel - r->c_hint >= r->hint_every) {
        ring_advance_cons(r, r->c_rel);
        r->c_hint = r->c_rel;
    }
}

/* Skips the hole at c_read (ABANDONED) by re-lapping it QUARANTINED, one CAS. */
static void pass_hole(rs_ring *r, uint32_t k, uint64_t w)
{
    uint64_t next = rs_sw_make(RS_RING_QUARANTINED, rs_sw_gen_next(rs_sw_gen(w)), rs_sw_owner(w));
    atomic_compare_exchange_strong_explicit(&r->slots[k].sw, &w, next, memory_order_release,
                                            memory_order_relaxed);
    r->c_read++;
    r->c_rel++;
    ring_count(&r->h->c_holes);
    publish_hint(r);
}

/* A record committed by a fenced producer after its fence: never delivered. */
static int zombie_record(const rs_ring *r, uint32_t writer)
{
    if (writer == (uint32_t)atomic_load_explicit(&r->h->p_inc, memory_order_acquire))
        return 0;
    return !seq_lt(r->c_read, atomic_load_explicit(&r->h->p_floor, memory_order_acquire));
}

/* Takes the COMMITTED record of c_read in slot k. RS_EAGAIN asks the caller to look again. */
static rs_err take(rs_ring *r, uint32_t k, uint64_t w, struct rs_ring_rd *rd)
{
    struct ring_slot *s = &r->slots[k];
    uint32_t lap = rs_sw_gen(w);
    if (s->seq != r->c_read || s->len > r->slot_bytes) {
        rs_log_error("ring %s: slot %u holds seq %llu len %u, expected seq %llu", r->name, k,
                     (unsigned long long)s->seq, s->len, (unsigned long long)r->c_read);
        return RS_EIO;
    }
    if (zombie_record(r, rs_sw_owner(w))) {
        if (atomic_compare_exchange_strong(&s->sw, &w, rs_sw_make(RS_RING_FREE, lap, 0))) {
            ring_count(&r->h->c_discards);
            rs_log_warn("ring %s: discarded seq %llu from fenced incarnation %u", r->name,
                        (unsigned long long)r->c_read, rs_sw_owner(w));
        }
        return RS_EAGAIN;
    }
    uint64_t mine = rs_sw_make(RS_RING_READING, lap, r->inc);
    /* C1: acquires the producer's P1 commit: payload and descriptor are complete. */
    if (!atomic_compare_exchange_strong_explicit(&s->sw, &w, mine, memory_order_acquire,
                                                 memory_order_acquire))
        return RS_EAGAIN;
    RS_FAILPOINT("ring.get.after_cas");
    if (!is_current(r)) {
        atomic_compare_exchange_strong(&s->sw, &mine, w);
        return RS_ESTALE;
    }
    rd->data = r->payload + (uint64_t)k * r->stride;
    rd->len = s->len;
    rd->id = s->id;
    rd->seq = r->c_read;
    rd->writer = s->writer;
    rd->slot = k;
    rd->lap = lap;
    r->c_read++;
    ring_count(&r->h->c_gets);
    if ((r->flags & RS_RING_CRC) && rs_crc32c(0, rd->data, rd->len) != s->crc) {
        ring_count(&r->h->c_crc_errors);
        rs_log_req(RS_LOG_ERROR, RS_LOG_NOID, rd->id, "ring %s: seq %llu fails its CRC", r->name,
                   (unsigned long long)rd->seq);
        return RS_EIO;
    }
    return RS_OK;
}

/* Looks at the slot of c_read once. RS_EAGAIN: nothing now; 1 (as rs_err): look again. */
static rs_err get_step(rs_ring *r, struct rs_ring_rd *rd)
{
    uint32_t k = (uint32_t)r->c_read & r->mask, lap = ring_lap(r, r->c_read);
    uint64_t w = atomic_load_explicit(&r->slots[k].sw, memory_order_acquire);
    if (rs_sw_gen(w) == rs_sw_gen_next(lap)) {
        /* Already consumed: a fenced consumer passed this hole after our recovery. */
        if (r->c_read != r->c_rel)
            return RS_EAGAIN;
        r->c_read++, r->c_rel++;
        return (rs_err)1;
    }
    if (rs_sw_gen(w) != lap) {
        rs_log_error("ring %s: slot %u lap %u, expected %u for seq %llu", r->name, k, rs_sw_gen(w),
                     lap, (unsigned long long)r->c_read);
        return RS_EIO;
    }
    switch (rs_sw_state(w)) {
    case RS_RING_FREE:
    case RS_RING_QUARANTINED: /* the producer has not decided this seq yet */
    case RS_RING_WRITING: return RS_EAGAIN;
    case RS_RING_ABANDONED:
        if (r->c_read != r->c_rel)
            return RS_EAGAIN; /* pass holes with nothing held: releases stay in seq order */
        pass_hole(r, k, w);
        return (rs_err)1;
    case RS_RING_COMMITTED: {
        rs_err e = take(r, k, w, rd);
        return e == RS_EAGAIN ? (rs_err)1 : e;
    }
    default:
        if (rs_sw_owner(w) != r->inc && ring_cons_help(r, k, w))
            return (rs_err)1;
        rs_log_error("ring %s: slot %u is %s by incarnation %u at our next seq", r->name, k,
                     rs_ring_state_name(rs_sw_state(w)), rs_sw_owner(w));
        return RS_EIO;
    }
}

rs_err rs_ring_try_get(rs_ring *r, struct rs_ring_rd *rd)
{
    rs_err e = side_ready(r, RING_CONSUMER, "get");
    if (e != RS_OK)
        return e;
    if (r->c_read - r->c_rel >= r->n)
        return RS_EAGAIN;
    if (!is_current(r))
        return RS_ESTALE;
    for (uint32_t tries = 0; tries <= 2 * r->n + 2; tries++)
        if ((e = get_step(r, rd)) != (rs_err)1)
            return e;
    return RS_EAGAIN;
}

/* The held record rd, checked against this handle's window; 0 if not held. */
static int held(const rs_ring *r, const struct rs_ring_rd *rd)
{
    return r->side == RING_CONSUMER && !seq_lt(rd->seq, r->c_rel) && seq_lt(rd->seq, r->c_read) &&
           rd->slot == ((uint32_t)rd->seq & r->mask) && rd->lap == ring_lap(r, rd->seq);
}

rs_err rs_ring_mark_in_flight(rs_ring *r, const struct rs_ring_rd *rd)
{
    if (!held(r, rd))
        return RS_EINVAL;
    uint64_t reading = rs_sw_make(RS_RING_READING, rd->lap, r->inc);
    if (!atomic_compare_exchange_strong(&r->slots[rd->slot].sw, &reading,
                                        rs_sw_make(RS_RING_IN_FLIGHT, rd->lap, r->inc)))
        return RS_ESTALE;
    return RS_OK;
}

rs_err rs_ring_release(rs_ring *r, const struct rs_ring_rd *rd)
{
    if (!held(r, rd) || rd->seq != r->c_rel) {
        rs_log_error("ring %s: release of seq %llu, but the oldest held is %llu", r->name,
                     (unsigned long long)rd->seq, (unsigned long long)r->c_rel);
        return RS_EINVAL;
    }
    _Atomic uint64_t *sw = &r->slots[rd->slot].sw;
    uint64_t w = atomic_load_explicit(sw, memory_order_relaxed);
    if (rs_sw_owner(w) != r->inc || rs_sw_gen(w) != rd->lap ||
        (rs_sw_state(w) != RS_RING_READING && rs_sw_state(w) != RS_RING_IN_FLIGHT))
        return RS_ESTALE;
    RS_FAILPOINT("ring.release.before");
    /* P2: the next lap's FREE is the consumed record; pairs with C2 in the producer's claim. */
    if (!atomic_compare_exchange_strong_explicit(
            sw, &w, rs_sw_make(RS_RING_FREE, rs_sw_gen_next(rd->lap), 0), memory_order_release,
            memory_order_relaxed))
        return RS_ESTALE;
    r->c_rel++;
    ring_count(&r->h->c_releases);
    RS_FAILPOINT("ring.release.after");
    publish_hint(r);
    return RS_OK;
}

uint64_t rs_ring_consumed(const rs_ring *r)
{
    return r->side == RING_CONSUMER ? r->c_rel : ring_scan_consumed(r);
}

uint64_t rs_ring_next_seq(const rs_ring *r)
{
    return r->side == RING_PRODUCER ? r->p_seq : r->c_read;
}

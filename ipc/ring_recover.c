/* SPDX-License-Identifier: MIT */
/*
 * SPSC ring: recovery of each side, the helping steps the live side takes
 * when it meets a fenced incarnation's slot at its cursor, and the invariant
 * checker. Every step is one CAS guarded by the full expected word, so a
 * recoverer killed anywhere leaves a state the next run (or another recoverer) can
 * finish, and a stopped zombie resuming mid-step fails its CAS.
 */
#include <string.h>

#include "common/log.h"
#include "ipc/crc32c.h"
#include "ipc/failpoint.h"
#include "ipc/ring.h"
#include "ipc/ring_impl.h"
#include "ipc/role_impl.h"
#include "ipc/shm_impl.h"

/*
 * WRITING (or QUARANTINED) of a fenced producer at its lap: FREE if its
 * process is gone, else ABANDONED, which makes this seq a hole.
 */
static int reclaim_writing(struct rs_ring *r, uint32_t k, uint64_t w, enum rs_inc_status st)
{
    uint32_t lap = rs_sw_gen(w);
    int dead = st == RS_INC_FENCED_DEAD;
    uint64_t next = dead ? rs_sw_make(RS_RING_FREE, lap, 0)
                         : rs_sw_make(RS_RING_ABANDONED, lap, rs_sw_owner(w));
    if (!atomic_compare_exchange_strong(&r->slots[k].sw, &w, next))
        return 0;
    ring_count(dead ? &r->h->p_reclaims : &r->h->p_holes);
    rs_log_info("ring %s: slot %u %s by fenced incarnation %u -> %s", r->name, k,
                rs_ring_state_name(rs_sw_state(w)), rs_sw_owner(w),
                dead ? "FREE" : "ABANDONED (owner alive: a hole)");
    return !dead;
}

int ring_prod_help(struct rs_ring *r, uint32_t k, uint64_t w)
{
    uint32_t owner = rs_sw_owner(w), lap = rs_sw_gen(w), st = rs_sw_state(w);
    if (owner == r->inc)
        return 0;
    if (st == RS_RING_ABANDONED) {
        r->p_seq++; /* a hole already decided at this lap */
        return 1;
    }
    if (st != RS_RING_WRITING && st != RS_RING_QUARANTINED && st != RS_RING_COMMITTED)
        return 0; /* the consumer holds this lap's record: wait */
    enum rs_inc_status status = rs_role_inc_status(r->shm, owner);
    if (status == RS_INC_CURRENT)
        return 0; /* never touch a live incarnation's slot (we are probably fenced) */
    if (st != RS_RING_COMMITTED) {
        /* Past a hole at once: the consumer may skip it (and re-lap the slot) right away. */
        if (reclaim_writing(r, k, w, status))
            r->p_seq++;
    } else if (atomic_compare_exchange_strong(&r->slots[k].sw, &w,
                                              rs_sw_make(RS_RING_FREE, lap, 0))) {
        /* Committed at our next seq by someone else: a zombie's post-fence record. */
        ring_count(&r->h->p_reclaims);
    }
    return 1;
}

/* READING/IN_FLIGHT of a fenced consumer: COMMITTED again, for redelivery. */
static void reclaim_reading(struct rs_ring *r, uint32_t k, uint64_t w)
{
    struct ring_slot *s = &r->slots[k];
    if (atomic_compare_exchange_strong(&s->sw, &w,
                                       rs_sw_make(RS_RING_COMMITTED, rs_sw_gen(w), s->writer)))
        ring_count(&r->h->c_redelivered);
}

int ring_cons_help(struct rs_ring *r, uint32_t k, uint64_t w)
{
    uint32_t st = rs_sw_state(w);
    if (st != RS_RING_READING && st != RS_RING_IN_FLIGHT)
        return 0;
    if (rs_sw_owner(w) == r->inc || rs_role_inc_status(r->shm, rs_sw_owner(w)) == RS_INC_CURRENT)
        return 0;
    reclaim_reading(r, k, w);
    return 1;
}

/* 1 when the slot of seq x was re-lapped: x was consumed (released, or a hole passed). */
static int consumed_at(const struct rs_ring *r, uint64_t x)
{
    uint64_t w = atomic_load_explicit(&r->slots[x & r->mask].sw, memory_order_acquire);
    return rs_sw_gen(w) == rs_sw_gen_next(ring_lap(r, x));
}

uint64_t ring_scan_consumed(const struct rs_ring *r)
{
    /* The hint lags the truth by less than a lap, so at most n steps. */
    uint64_t c = atomic_load_explicit(&r->h->cons_seq, memory_order_acquire), x = c;
    while (x - c < r->n && consumed_at(r, x))
        x++;
    return x;
}

/* Holds a record or a decided hole of its lap (produced, not yet consumed). */
static int produced_at(const struct rs_ring *r, uint64_t x)
{
    uint64_t w = atomic_load_explicit(&r->slots[x & r->mask].sw, memory_order_acquire);
    uint32_t st = rs_sw_state(w);
    return rs_sw_gen(w) == ring_lap(r, x) &&
           (st == RS_RING_COMMITTED || st == RS_RING_READING || st == RS_RING_IN_FLIGHT ||
            st == RS_RING_ABANDONED);
}

/*
 * The producer's next seq: from the consumed-seq hint, past every consumed
 * seq and every produced one. A live consumer can only move seqs from
 * produced to consumed meanwhile, and both are passed, so no re-check.
 */
static uint64_t derive_next(struct rs_ring *r)
{
    uint64_t c = atomic_load_explicit(&r->h->cons_seq, memory_order_acquire), p = c;
    while (p - c < 2ull * r->n && (consumed_at(r, p) || produced_at(r, p)))
        p++;
    return p;
}

static rs_err recover_producer(struct rs_ring *r)
{
    RS_FAILPOINT("ring.recover.prod.begin");
    for (uint32_t k = 0; k < r->n; k++) {
        uint64_t w = atomic_load_explicit(&r->slots[k].sw, memory_order_acquire);
        if (rs_sw_state(w) != RS_RING_WRITING || rs_sw_owner(w) == r->inc)
            continue;
        enum rs_inc_status st = rs_role_inc_status(r->shm, rs_sw_owner(w));
        if (st == RS_INC_CURRENT)
            return RS_ESTALE; /* another live producer: we are the fenced one */
        reclaim_writing(r, k, w, st);
        RS_FAILPOINT("ring.recover.prod.slot");
    }
    uint64_t p = derive_next(r);
    atomic_store_explicit(&r->h->p_floor, p, memory_order_release);
    RS_FAILPOINT("ring.recover.prod.floor");
    atomic_store_explicit(&r->h->p_inc, r->inc, memory_order_release);
    r->p_seq = p;
    r->claimed = 0;
    ring_count(&r->h->p_recoveries);
    return RS_OK;
}

static rs_err recover_consumer(struct rs_ring *r)
{
    RS_FAILPOINT("ring.recover.cons.begin");
    for (uint32_t k = 0; k < r->n; k++) {
        uint64_t w = atomic_load_explicit(&r->slots[k].sw, memory_order_acquire);
        uint32_t st = rs_sw_state(w);
        if ((st != RS_RING_READING && st != RS_RING_IN_FLIGHT) || rs_sw_owner(w) == r->inc)
            continue;
        if (rs_role_inc_status(r->shm, rs_sw_owner(w)) == RS_INC_CURRENT)
            return RS_ESTALE;
        reclaim_reading(r, k, w);
        RS_FAILPOINT("ring.recover.cons.slot");
    }
    uint64_t c = ring_scan_consumed(r);
    ring_advance_cons(r, c);
    r->c_read = r->c_rel = r->c_hint = c;
    ring_count(&r->h->c_recoveries);
    return RS_OK;
}

rs_err rs_ring_recover(rs_ring *r)
{
    if (r->side == RING_OBSERVER)
        return RS_EINVAL;
    uint32_t role = r->side == RING_PRODUCER ? r->prod_role : r->cons_role;
    if (!roles_is_current(r->roles, role, r->inc)) {
        rs_log_error("ring %s: recovery by fenced incarnation %u refused", r->name, r->inc);
        return RS_ESTALE;
    }
    rs_err e = r->side == RING_PRODUCER ? recover_producer(r) : recover_consumer(r);
    r->recovered = e == RS_OK;
    return e;
}

/* --- invariants ------------------------------------------------------------------ */

static void note_owner(struct rs_ring_stats *st, uint32_t owner)
{
    for (uint32_t i = 0; i < st->n_owners && i < 8; i++) {
        if (st->owner[i] == owner) {
            st->owner_slots[i]++;
            return;
        }
    }
    if (st->n_owners < 8) {
        st->owner[st->n_owners] = owner;
        st->owner_slots[st->n_owners] = 1;
    }
    st->n_owners++;
}

/* I4: a held slot of a READY role must belong to that role's current incarnation. */
static int fenced_holder(const struct rs_ring *r, uint32_t role, uint32_t owner)
{
    uint64_t rw = atomic_load_explicit(&roles_rec(r->roles, role)->word, memory_order_acquire);
    return rs_sw_state(rw) == RS_ROLE_READY && rs_sw_owner(rw) != owner;
}

/* I3 for a slot holding a record: descriptor agrees with slot, lap and checksum. */
static int record_ok(const struct rs_ring *r, uint32_t k, uint64_t w)
{
    const struct ring_slot *s = &r->slots[k];
    if ((s->seq & r->mask) != k || ring_lap(r, s->seq) != rs_sw_gen(w) || s->len > r->slot_bytes)
        return 0;
    if (!(r->flags & RS_RING_CRC) || rs_sw_state(w) != RS_RING_COMMITTED)
        return 1;
    uint32_t crc = rs_crc32c_sw(0, r->payload + (uint64_t)k * r->stride, s->len);
    /* A record consumed and rewritten while we summed it is not a torn commit. */
    return crc == s->crc || atomic_load_explicit(&s->sw, memory_order_acquire) != w;
}

static const char *slot_violation(const struct rs_ring *r, uint32_t k, uint64_t w, uint64_t c)
{
    uint32_t st = rs_sw_state(w), owner = rs_sw_owner(w), g = rs_sw_gen(w);
    uint64_t next = c + ((k - c) & r->mask); /* the seq in [c, c+n) that lives in slot k */
    if (st >= RS_RING_NSTATES)
        return "invalid state";
    if (g != ring_lap(r, next))
        return "I1 lap does not match the consumed prefix";
    if ((st == RS_RING_FREE) != (owner == 0))
        return "I2 owner does not match state";
    if ((st == RS_RING_COMMITTED || st == RS_RING_READING || st == RS_RING_IN_FLIGHT) &&
        !record_ok(r, k, w))
        return "I3 descriptor, length or checksum wrong";
    if (st == RS_RING_WRITING && fenced_holder(r, r->prod_role, owner))
        return "I4 WRITING by a fenced producer after recovery";
    if ((st == RS_RING_READING || st == RS_RING_IN_FLIGHT) && fenced_holder(r, r->cons_role, owner))
        return "I4 held by a fenced consumer after recovery";
    return NULL;
}

static void fill_counters(const struct rs_ring *r, struct rs_ring_stats *st)
{
    const struct ring_hdr *h = r->h;
    st->n_slots = r->n;
    st->slot_bytes = r->slot_bytes;
    st->flags = r->flags;
    st->cons_hint = atomic_load(&h->cons_seq);
    st->p_floor = atomic_load(&h->p_floor);
    st->p_inc = (uint32_t)atomic_load(&h->p_inc);
    st->commits = atomic_load(&h->p_commits);
    st->full = atomic_load(&h->p_full);
    st->holes_made = atomic_load(&h->p_holes);
    st->p_reclaims = atomic_load(&h->p_reclaims);
    st->p_recoveries = atomic_load(&h->p_recoveries);
    st->gets = atomic_load(&h->c_gets);
    st->releases = atomic_load(&h->c_releases);
    st->discards = atomic_load(&h->c_discards);
    st->holes_passed = atomic_load(&h->c_holes);
    st->redelivered = atomic_load(&h->c_redelivered);
    st->crc_errors = atomic_load(&h->c_crc_errors);
    st->c_recoveries = atomic_load(&h->c_recoveries);
}

rs_err rs_ring_check(const rs_ring *r, struct rs_ring_stats *out)
{
    struct rs_ring_stats st;
    const char *bad = NULL;
    uint32_t bad_k = 0;
    uint64_t bad_w = 0;
    /* Rescan while the consumer moves under us, so a live consumer causes no false alarm. */
    uint64_t c = 0;
    for (int attempt = 0; attempt < 100; attempt++) {
        memset(&st, 0, sizeof(st));
        bad = NULL;
        c = ring_scan_consumed(r);
        for (uint32_t k = 0; k < r->n; k++) {
            uint64_t w = atomic_load_explicit(&r->slots[k].sw, memory_order_acquire);
            const char *v = slot_violation(r, k, w, c);
            if (v != NULL && bad == NULL)
                bad = v, bad_k = k, bad_w = w;
            if (rs_sw_state(w) < RS_RING_NSTATES)
                st.n_state[rs_sw_state(w)]++;
            if (rs_sw_owner(w) != 0)
                note_owner(&st, rs_sw_owner(w));
        }
        if (ring_scan_consumed(r) == c)
            break;
    }
    fill_counters(r, &st);
    st.cons_seq = c;
    if (out != NULL)
        *out = st;
    if (bad != NULL) {
        rs_log_error("ring %s: slot %u (%s, lap %u, owner %u): %s", r->name, bad_k,
                     rs_ring_state_name(rs_sw_state(bad_w)), rs_sw_gen(bad_w),
                     rs_sw_owner(bad_w), bad);
        return RS_EMISMATCH;
    }
    return RS_OK;
}

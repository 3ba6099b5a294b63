/* SPDX-License-Identifier: MIT */
/*
 * SPSC slot ring in shared memory: one producer role, one consumer role,
 * n_slots (a power of two) slots of at most slot_bytes payload each, records
 * in sequence order. Record `seq` always lives in slot seq % n_slots, and a
 * slot's generation is its lap (seq / n_slots mod 2^26), so a stale write
 * can never land in a later lap. Zero-copy: the producer fills the slot's
 * payload in place and commits; the consumer reads it in place and releases.
 * The consumer finds work from shared memory alone (slot of its next seq);
 * ZeroMQ is only a doorbell. Every record carries a 64-bit id, its seq, its
 * length, the committing incarnation and, on RS_RING_CRC rings, a CRC-32C.
 * Any process may be SIGKILLed anywhere; rs_ring_recover (run by the
 * restarted side before it marks its role ready) reclaims what the dead
 * incarnation held. Leaves out: several producers (one SPSC ring per
 * producer), blocking waits (callers sleep on the doorbell), batched calls.
 *
 * Slot state word (stateword.h): owner | gen = lap | state.
 *
 *   FREE/L ─claim──▶ WRITING/L/P ─commit─▶ COMMITTED/L/P ─get─▶ READING/L/C ─release─▶ FREE/L+1
 *     ▲  ◀─abort────┘    │                   │   ▲                │  │ ▲                    ▲
 *     │                  │ fenced P:         │   └─ recover/help ─┘  │ └── mark_in_flight   │
 *     │                  │ dead  -> FREE/L   │      (fenced C)       ▼      IN_FLIGHT/L/C ──┘
 *     │                  │ alive -> hole     │ zombie record:           (async copy pending)
 *     │                  ▼                   │ discard -> FREE/L
 *     │           ABANDONED/L/P' (a hole: seq L*n+k is never delivered)
 *     │                  │ consumer passes it
 *     │                  ▼
 *     │           QUARANTINED/L+1/P' ── producer at lap L+1, P' alive ──▶ ABANDONED/L+1/P'
 *     │                  │ P' dead
 *     └──── FREE/L+1 ◀───┘
 *
 * A slot's lap moving to L+1 is the consumed record of seq L*n+k: the
 * consumer's release is one CAS. The consumed-seq word in the ring header
 * is a hint, published every n/2 releases (monotonic CAS, so a late zombie
 * store cannot move it back); recovery scans the slots forward from it.
 *
 * | transition                     | who (process, function)             | atomic op        |
 * |--------------------------------|-------------------------------------|------------------|
 * | FREE/L -> WRITING/L/P          | producer, rs_ring_try_claim         | CAS acq_rel (C2) |
 * | WRITING/L/P -> COMMITTED/L/P   | producer, rs_ring_commit            | CAS release (P1) |
 * | WRITING/L/P -> FREE/L          | producer, rs_ring_abort             | CAS              |
 * | COMMITTED -> READING/L/C       | consumer, rs_ring_try_get           | CAS acquire (C1) |
 * | READING -> IN_FLIGHT           | consumer, rs_ring_mark_in_flight    | CAS              |
 * | READING|IN_FLIGHT -> FREE/L+1  | consumer, rs_ring_release           | CAS release (P2) |
 * | consumed-seq hint := c         | consumer, every n/2 releases;       | CAS max, release |
 * |                                | recovery                            |                  |
 * | WRITING/L/P' -> FREE/L         | producer, recover or claim; P' dead | CAS              |
 * | WRITING/L/P' -> ABANDONED/L    | producer, recover or claim; alive   | CAS              |
 * | ABANDONED/L -> QUARANTINED/L+1 | consumer, try_get                   | CAS release      |
 * | QUARANTINED/L -> FREE/L        | producer, claim; P' dead            | CAS              |
 * | QUARANTINED/L -> ABANDONED/L   | producer, claim; P' alive (a hole)  | CAS              |
 * | COMMITTED/L/P' -> FREE/L       | consumer get or producer claim:     | CAS              |
 * |                                | P' fenced and seq >= p_floor        |                  |
 * | READING|IN_FLIGHT/L/C' ->      | consumer, recover or get; C' fenced | CAS              |
 * |   COMMITTED/L/writer           |                                     |                  |
 * | p_floor, p_inc := next, P      | producer, rs_ring_recover           | store; release   |
 *
 * P1/C1: the commit's release publishes payload and descriptor to the
 * consumer's acquiring get. P2/C2: the release's FREE publishes "reads done"
 * to the producer's next claim of that slot, so it never overwrites a payload
 * still being read. Only the producer decides whether a seq is a hole
 * (ABANDONED at that seq's lap); the consumer skips only decided holes and
 * re-laps them QUARANTINED, which it treats like FREE (not yet produced).
 *
 * Fencing: claims, gets and commits check that their incarnation is still
 * the role's current one (after their CAS, undoing it if not). A stopped
 * process resumed after its replacement ran recovery therefore has every
 * call refused (RS_ESTALE); a slot it still held while alive became
 * ABANDONED (then QUARANTINED on later laps), so its late payload writes
 * land in a slot nobody else uses until its process is gone, and a record it
 * manages to commit after the fence is discarded (its incarnation is not
 * p_inc and its seq is at or past p_floor, the producer's restart point).
 *
 * Invariants (rs_ring_check):
 *   I1 with c the consumed prefix, slot k holds the lap of the one seq in
 *      [c, c+n) that maps to it;
 *   I2 FREE has owner 0; every other state names an owner;
 *   I3 a COMMITTED/READING/IN_FLIGHT slot's descriptor seq maps to that slot
 *      and lap, its length is <= slot_bytes, and on CRC rings a COMMITTED
 *      payload matches its checksum;
 *   I4 once a role is READY, no WRITING slot belongs to a fenced producer and
 *      no READING/IN_FLIGHT slot to a fenced consumer (recovery ran).
 */
#ifndef RS_RING_H
#define RS_RING_H

#include <stdint.h>

#include "common/err.h"
#include "ipc/role.h"
#include "ipc/shm.h"

#define RS_RING_CRC 1u /* region spec flag: keep and check a CRC-32C per record */

enum rs_ring_state {
    RS_RING_FREE = 0,
    RS_RING_WRITING = 1,
    RS_RING_COMMITTED = 2,
    RS_RING_READING = 3,
    RS_RING_IN_FLIGHT = 4,
    RS_RING_ABANDONED = 5,   /* a hole at this lap: the producer skipped the seq */
    RS_RING_QUARANTINED = 6, /* held by a live zombie, not yet decided for this lap */
    RS_RING_NSTATES = 7,
};

/* A claimed slot (producer side). */
struct rs_ring_wr {
    void *data;   /* payload to fill: cap bytes; owned by the producer until commit/abort */
    uint32_t cap; /* slot_bytes */
    uint64_t seq; /* sequence number this record will carry */
    uint32_t slot, lap;
};

/* A record being read (consumer side). */
struct rs_ring_rd {
    const void *data; /* payload, len bytes; borrowed until rs_ring_release */
    uint32_t len;
    uint64_t id;      /* the producer's record id (e.g. batch id) */
    uint64_t seq;
    uint32_t writer;  /* incarnation that committed it */
    uint32_t slot, lap;
};

struct rs_ring_stats {
    uint32_t n_slots, slot_bytes, flags;
    uint64_t n_state[RS_RING_NSTATES]; /* slots per state now */
    uint32_t n_owners;                 /* distinct owner incarnations (first 8 kept) */
    uint32_t owner[8];
    uint64_t owner_slots[8];
    uint64_t cons_seq;                 /* every seq below it has been consumed (exact) */
    uint64_t cons_hint;                /* the consumed-seq record in the ring (lags < a lap) */
    uint64_t p_floor;                  /* producer's restart seq at its last recovery */
    uint32_t p_inc;                    /* producer incarnation that ran that recovery */
    uint64_t commits, full, holes_made, p_reclaims, p_recoveries;           /* producer */
    uint64_t gets, releases, discards, holes_passed, redelivered, crc_errors,
        c_recoveries;                                                       /* consumer */
};

typedef struct rs_ring rs_ring;

/*
 * Opens ring region `name` of `shm` for `self`: the producer side when self's
 * role is the ring's producer, the consumer side when it is the consumer,
 * an observer (rs_ring_check only) when self is NULL; any other role is
 * RS_EINVAL. The side must call rs_ring_recover before its first claim/get.
 * RS_ENOENT/RS_EMISMATCH if no such ring. *out owns the handle; shm and self
 * must outlive it. One thread per handle.
 */
rs_err rs_ring_open(rs_shm *shm, const char *name, rs_role *self, rs_ring **out);

/* Frees the handle (shared state is untouched); accepts NULL, clears *ring. */
void rs_ring_close(rs_ring **ring);

/*
 * Reclaims what fenced incarnations of this side left (see the table) and
 * sets this handle's cursor: producer side WRITING -> FREE (owner dead) or
 * ABANDONED (owner alive), then the next seq (past everything consumed or
 * produced) becomes p_floor and p_inc is published; consumer side
 * READING/IN_FLIGHT -> COMMITTED (redelivery), then the cursor is the first
 * seq whose slot was not re-lapped. Idempotent; safe to re-run after being
 * killed halfway. RS_ESTALE if this incarnation is fenced, RS_EINVAL for an
 * observer. Run while the previous incarnation is dead or stopped.
 */
rs_err rs_ring_recover(rs_ring *r);

/*
 * Producer: claims the slot of the next seq. Returns RS_OK with *w filled,
 * RS_EFULL when that slot still holds an unreleased record (backpressure:
 * nothing is overwritten), RS_ESTALE when fenced, RS_EINVAL if a claim is
 * already outstanding or recovery has not run, RS_EIO on a corrupt slot.
 */
rs_err rs_ring_try_claim(rs_ring *r, struct rs_ring_wr *w);

/*
 * Producer: publishes the claimed record: `len` bytes of w->data (<= cap),
 * with record id `id` (and its CRC on CRC rings), in one release CAS.
 * RS_EINVAL for a bad len (the claim stays outstanding), RS_ESTALE when the
 * slot was taken from a fenced incarnation (the record is not published).
 */
rs_err rs_ring_commit(rs_ring *r, struct rs_ring_wr *w, uint64_t id, uint32_t len);

/* Producer: gives a claimed slot back unpublished (the seq is reused). */
rs_err rs_ring_abort(rs_ring *r, struct rs_ring_wr *w);

/*
 * Consumer: takes the record of the next seq. RS_OK with *rd filled;
 * RS_EAGAIN when it is not committed yet (or every slot is already held by
 * this consumer); RS_ESTALE when fenced; RS_EIO when the CRC does not match
 * (*rd is filled and the record is held: release it) or a slot is corrupt.
 * Records from a fenced producer committed after its fence are discarded
 * here, and holes (ABANDONED seqs) skipped. Several records may be held at
 * once; they must be released in seq order.
 */
rs_err rs_ring_try_get(rs_ring *r, struct rs_ring_rd *rd);

/* Consumer: marks a held record IN_FLIGHT (an async copy reads it). */
rs_err rs_ring_mark_in_flight(rs_ring *r, const struct rs_ring_rd *rd);

/*
 * Consumer: releases the oldest held record with one CAS to FREE for the
 * next lap, which is its consumed record. Call after the record's
 * downstream effect is durable; a consumer killed before this gets the
 * record again after recovery (at-least-once) and deduplicates by id or seq
 * against its own effect. RS_EINVAL if rd is not the oldest held record,
 * RS_ESTALE if fenced.
 */
rs_err rs_ring_release(rs_ring *r, const struct rs_ring_rd *rd);

/*
 * Every seq below the result was consumed (released, or a hole passed):
 * exact. The consumer handle knows it; others scan from the hint. Any process.
 */
uint64_t rs_ring_consumed(const rs_ring *r);

/* Next seq this handle will claim (producer) or get (consumer). */
uint64_t rs_ring_next_seq(const rs_ring *r);

/*
 * Checks I1..I4 and fills *st (may be NULL). Returns RS_OK, or RS_EMISMATCH
 * naming the slot and invariant in the log. Safe while others run (reads
 * only); tests call it after every step. Any handle, observers included.
 */
rs_err rs_ring_check(const rs_ring *r, struct rs_ring_stats *st);

/* Name of a slot state ("FREE", ...). */
const char *rs_ring_state_name(unsigned state);

#endif

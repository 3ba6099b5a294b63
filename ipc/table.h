/* SPDX-License-Identifier: MIT */
/*
 * Slot table: N fixed-size records in shared memory (the request table),
 * each with one state word. A record is claimed by CAS (FREE -> CLAIMED by
 * the claimer's incarnation), initialised privately, published into a
 * user-defined state, moved between user states, and freed (generation + 1).
 * A reference is (index, generation); any use through a stale reference is
 * RS_ESTALE. Recovery returns records claimed but never published by a dead
 * incarnation. Leaves out: ordering (iterate and sort if you need FIFO) and
 * locks of any kind; who may move which user state is the caller's
 * protocol.
 *
 * State word (stateword.h): owner = incarnation of the last claim or
 * transition | gen | state (0 FREE, 1 CLAIMED, 2..63 user states).
 *
 *            rs_table_claim (CAS)          rs_table_publish (CAS, release P1)
 *   FREE/g ───────────────────▶ CLAIMED/g/I ─────────────────────▶ S/g/I (S >= 2)
 *     ▲                             │                                 │  ▲
 *     │  rs_table_recover: I dead   │                                 │  │ rs_table_transition
 *     ├─────────────────────────────┘                                 │  │ (CAS S -> S')
 *     │                                                               ▼  │
 *     └──────────────────── rs_table_free (CAS S -> FREE/g+1) ─── S'/g/I'
 *
 * | transition            | who, function                        | atomic op         |
 * |-----------------------|--------------------------------------|-------------------|
 * | FREE/g -> CLAIMED/g/I | any current incarnation, claim       | CAS acquire       |
 * | CLAIMED/g/I -> S/g/I  | the claimer, publish                 | CAS release (P1)  |
 * | S/g -> S'/g/I'        | any current incarnation, transition  | CAS acq_rel (P1,C1)|
 * | S/g -> FREE/g+1       | any current incarnation, free        | CAS release       |
 * | CLAIMED/g/I -> FREE/g+1 | rs_table_recover, I dead           | CAS               |
 * | read state            | rs_table_get / rs_table_next         | load acquire (C1) |
 *
 * P1/C1: a publish or transition releases the record's contents written
 * before it; get/next acquire them.
 *
 * Invariants (rs_table_check):
 *   T1 FREE has owner 0; every other state has an owner.
 *   T2 no CLAIMED record belongs to a dead incarnation once recovery ran
 *      (records of a live, fenced incarnation stay until it dies).
 */
#ifndef RS_TABLE_H
#define RS_TABLE_H

#include <stdint.h>

#include "common/err.h"
#include "ipc/role.h"
#include "ipc/shm.h"

#define RS_TABLE_FREE 0u
#define RS_TABLE_CLAIMED 1u
#define RS_TABLE_USER 2u    /* first user state */
#define RS_TABLE_NSTATES 64u

/* A reference to one use of a record; stale once the record is freed. */
struct rs_table_ref {
    uint32_t index;
    uint32_t gen; /* 26 bits */
};

/* Packs a reference into 64 bits (for doorbells and logs) and back. */
static inline uint64_t rs_table_ref_pack(struct rs_table_ref r)
{
    return ((uint64_t)r.gen << 32) | r.index;
}

static inline struct rs_table_ref rs_table_ref_unpack(uint64_t v)
{
    struct rs_table_ref r = {(uint32_t)v, (uint32_t)(v >> 32)};
    return r;
}

struct rs_table_stats {
    uint32_t n_records;
    uint64_t record_bytes;
    uint64_t n_state[RS_TABLE_NSTATES]; /* records per state */
    uint32_t n_owners;                  /* distinct owners of non-FREE records (first 8 kept) */
    uint32_t owner[8];
    uint64_t owner_records[8];
    uint64_t claims, frees, reclaimed, full; /* counters since creation */
};

typedef struct rs_table rs_table;

/*
 * Opens table region `name`. `self` is the caller's role (claims and
 * transitions are refused once it is fenced); NULL opens read-only
 * (get, next, check). *out owns the handle; shm and self must outlive it.
 * RS_ENOENT / RS_EMISMATCH if no such table.
 */
rs_err rs_table_open(rs_shm *shm, const char *name, rs_role *self, rs_table **out);

/* Frees the handle; accepts NULL and clears *t. */
void rs_table_close(rs_table **t);

/* Records in the table, and user bytes per record. */
uint32_t rs_table_size(const rs_table *t);
uint64_t rs_table_record_bytes(const rs_table *t);

/*
 * Claims a FREE record: *ref names it, *rec points at its user bytes
 * (borrowed; private to the caller until published). RS_EFULL if none is
 * free, RS_ESTALE if fenced, RS_EINVAL without a role.
 */
rs_err rs_table_claim(rs_table *t, struct rs_table_ref *ref, void **rec);

/* Publishes a claimed record into user state `state` (2..63), release. */
rs_err rs_table_publish(rs_table *t, struct rs_table_ref ref, uint32_t state);

/*
 * Moves record `ref` from state `from` to `to` (both user states) by CAS.
 * RS_ESTALE if the generation moved on or we are fenced, RS_EAGAIN if the
 * record is not in `from` (someone else moved it: reread and decide).
 */
rs_err rs_table_transition(rs_table *t, struct rs_table_ref ref, uint32_t from, uint32_t to);

/* Frees record `ref`, which must be in state `from` (CLAIMED or a user state). */
rs_err rs_table_free(rs_table *t, struct rs_table_ref ref, uint32_t from);

/*
 * Reads record `ref`: *state (acquire) and *rec (user bytes, borrowed; may
 * change under the caller unless its protocol says otherwise). RS_ESTALE if
 * freed or reused since the reference was taken. Any thread.
 */
rs_err rs_table_get(const rs_table *t, struct rs_table_ref ref, uint32_t *state, void **rec);

/* User bytes of record `index` whatever its state (for iteration and audits). */
void *rs_table_record(const rs_table *t, uint32_t index);

/* The current state word fields of record `index`. */
void rs_table_peek(const rs_table *t, uint32_t index, uint32_t *state, uint32_t *gen,
                   uint32_t *owner);

/*
 * Iterates: from *cursor (start at 0), finds the next record whose state's
 * bit is set in `state_mask` (bit s = state s), returns its reference and
 * state, and advances *cursor. RS_ENOENT when none is left.
 */
rs_err rs_table_next(const rs_table *t, uint32_t *cursor, uint64_t state_mask,
                     struct rs_table_ref *ref, uint32_t *state);

/*
 * Frees records CLAIMED by incarnations that are fenced and dead (a claim
 * never published); records of a fenced process that is still alive (stopped)
 * are left until it is gone. Idempotent. Any current incarnation.
 */
rs_err rs_table_recover(rs_table *t);

/* Checks T1, T2 and fills *st (may be NULL). RS_EMISMATCH names the record. */
rs_err rs_table_check(const rs_table *t, struct rs_table_stats *st);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * Private layout of a ring region and the functions ring.c (hot path) and
 * ring_recover.c (recovery, checks) share.
 *
 *   [ring_hdr: 4 cache lines][ring_slot x n_slots][pad to page][payload x n_slots]
 */
#ifndef RS_RING_IMPL_H
#define RS_RING_IMPL_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>

#include "ipc/ring.h"
#include "ipc/stateword.h"

#define RING_MAX_SLOTS (1u << 20)
#define RING_MAX_SLOT_BYTES (1u << 30)

struct ring_hdr {
    /* line 0: written once by ring_init */
    uint32_t tag;       /* RS_SHM_RING */
    uint32_t n_slots;   /* power of two */
    uint32_t slot_bytes;
    uint32_t flags;     /* RS_RING_CRC */
    uint32_t prod_role, cons_role;
    uint64_t stride;    /* bytes between payloads */
    uint64_t payload_off; /* from the region start */
    uint64_t start_seq;
    /* line 1: written by the consumer side */
    alignas(64) _Atomic uint64_t cons_seq; /* hint: every seq below is consumed; lags < n */
    _Atomic uint64_t c_gets, c_releases, c_discards, c_holes, c_redelivered, c_crc_errors,
        c_recoveries;
    /* line 2: written by the producer side */
    alignas(64) _Atomic uint64_t p_commits;
    _Atomic uint64_t p_full, p_holes, p_reclaims, p_recoveries;
    /* line 3: the producer's fence, written only by its recovery; read by every get */
    alignas(64) _Atomic uint64_t p_floor;
    _Atomic uint64_t p_inc;
};

/* One slot descriptor: the state word and the record header, one cache line. */
struct ring_slot {
    _Atomic uint64_t sw;
    uint64_t id;     /* written by the producer while WRITING */
    uint64_t seq;
    uint32_t len;
    uint32_t crc;
    uint32_t writer; /* incarnation that committed */
    uint32_t pad;
    uint8_t pad2[24];
};
_Static_assert(sizeof(struct ring_slot) == 64, "slot descriptor is one cache line");
_Static_assert(sizeof(struct ring_hdr) == 256, "ring header is four cache lines");

enum ring_side { RING_OBSERVER = 0, RING_PRODUCER = 1, RING_CONSUMER = 2 };

struct rs_ring {
    rs_shm *shm;
    rs_role *self;
    void *roles;
    struct ring_hdr *h;
    struct ring_slot *slots;
    uint8_t *payload;
    uint64_t stride;
    uint32_t n, mask, shift, slot_bytes, flags, prod_role, cons_role;
    enum ring_side side;
    uint32_t inc;
    int recovered;
    uint64_t p_seq; /* producer: next seq to claim */
    int claimed;    /* producer: a claim is outstanding */
    uint64_t c_read; /* consumer: next seq to get */
    uint64_t c_rel;  /* consumer: oldest held seq (== c_read when none) */
    uint64_t c_hint; /* consumer: last consumed-seq hint published */
    uint32_t hint_every; /* publish the hint after this many releases (n/2) */
    char name[32];
};

static inline uint32_t ring_lap(const struct rs_ring *r, uint64_t seq)
{
    return (uint32_t)(seq >> r->shift) & RS_SW_GEN_MASK;
}

static inline uint32_t ring_lap_prev(uint32_t lap)
{
    return (lap - 1u) & RS_SW_GEN_MASK;
}

/* a < b in sequence order, correct across 2^64 wrap. */
static inline int seq_lt(uint64_t a, uint64_t b)
{
    return (int64_t)(a - b) < 0;
}

/* Relaxed single-writer counter bump (a zombie may race: counts are advisory). */
static inline void ring_count(_Atomic uint64_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* Raises cons_seq to at least v (monotonic, so a late zombie store cannot regress it). */
void ring_advance_cons(struct rs_ring *r, uint64_t v);

/* The exact consumed prefix: first seq at or past the hint whose slot is not yet re-lapped. */
uint64_t ring_scan_consumed(const struct rs_ring *r);

/* Producer helping: handles a foreign word at the slot of the next seq. Returns 1 to retry. */
int ring_prod_help(struct rs_ring *r, uint32_t k, uint64_t w);

/* Consumer helping: reclaims a fenced consumer's slot k. Returns 1 to retry. */
int ring_cons_help(struct rs_ring *r, uint32_t k, uint64_t w);

#endif

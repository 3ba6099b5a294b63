/* SPDX-License-Identifier: MIT */
/*
 * The 64-bit state word every shared-memory slot, record, chunk and role
 * carries (DESIGN.md principle 2: one ownership fact, one atomic word):
 *
 *   63                              32 31                      6 5      0
 *  +----------------------------------+-------------------------+--------+
 *  |  owner: incarnation (or index)   |  generation (26 bits)   | state  |
 *  +----------------------------------+-------------------------+--------+
 *
 * state: 6 bits, meaning per structure (ring.h, table.h, arena.h, role.h).
 * generation: 26 bits, bumped (mod 2^26) each time the thing is freed; a ring
 *   slot's generation is its lap (seq / n_slots mod 2^26).
 * owner: the 32-bit incarnation that holds it (0 = none); incarnations are
 *   handed out by the segment header, never reused, never 0 (shm.h). An arena
 *   chunk linked to a request stores the table index here instead.
 * Leaves out: nothing wider; 64 bits is the largest lock-free CAS in C11.
 */
#ifndef RS_STATEWORD_H
#define RS_STATEWORD_H

#include <stdatomic.h>
#include <stdint.h>

#define RS_SW_STATE_BITS 6
#define RS_SW_GEN_BITS 26
#define RS_SW_STATE_MASK ((1u << RS_SW_STATE_BITS) - 1u)
#define RS_SW_GEN_MASK ((1u << RS_SW_GEN_BITS) - 1u)

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free in shared memory");
_Static_assert(sizeof(_Atomic uint64_t) == 8, "state words are 8 bytes");

static inline uint64_t rs_sw_make(uint32_t state, uint32_t gen, uint32_t owner)
{
    return ((uint64_t)owner << 32) | ((uint64_t)(gen & RS_SW_GEN_MASK) << RS_SW_STATE_BITS) |
           (state & RS_SW_STATE_MASK);
}

static inline uint32_t rs_sw_state(uint64_t w)
{
    return (uint32_t)(w & RS_SW_STATE_MASK);
}

static inline uint32_t rs_sw_gen(uint64_t w)
{
    return (uint32_t)(w >> RS_SW_STATE_BITS) & RS_SW_GEN_MASK;
}

static inline uint32_t rs_sw_owner(uint64_t w)
{
    return (uint32_t)(w >> 32);
}

/* Generation `g` advanced by one, modulo 2^26. */
static inline uint32_t rs_sw_gen_next(uint32_t g)
{
    return (g + 1u) & RS_SW_GEN_MASK;
}

#endif

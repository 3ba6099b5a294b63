/* SPDX-License-Identifier: MIT */
/*
 * Role table: one record per pipeline role (tokenizerd, schedulerd,
 * launcherd, postprocd, plus generic roles for tests and tools) holding the
 * role's current incarnation, pid, start time, heartbeat, recovery phase and
 * counters. Starting a process for a role takes a new incarnation from the
 * segment header and publishes it in the role record: that store is the
 * fence, after which every ring/table/arena operation of the previous
 * incarnation is refused. The process then recovers each structure it
 * touches and marks the role ready. Leaves out: supervising (who restarts
 * whom is the supervisor's job; this only records and fences).
 *
 * Role state word (stateword.h layout):
 *   owner = current incarnation, gen = starts (mod 2^26), state = phase
 *
 *        rs_role_start (CAS, any phase)        rs_role_ready (CAS)
 *   NONE ─────────────────────▶ RECOVERING ───────────────────▶ READY
 *     ▲                         ▲    │                            │
 *     │                         └────┼────── rs_role_start ───────┤ (newer incarnation)
 *     │                              ▼                            ▼
 *     └── (never returns)        EXITED ◀────── rs_role_stop (CAS, same incarnation)
 *
 * | transition            | who                          | op                      |
 * |-----------------------|------------------------------|-------------------------|
 * | any -> RECOVERING/inc | new process, rs_role_start   | CAS (refused if a newer |
 * |                       |                              | incarnation holds it)   |
 * | RECOVERING -> READY   | same incarnation, ready      | CAS, release            |
 * | * -> EXITED           | same incarnation, stop       | CAS                     |
 *
 * Invariants (rs_role_check):
 *   R1 a role's incarnation only grows; it is never above the header counter.
 *   R2 an incarnation is current for at most one role.
 *   R3 the registry entry of a current incarnation names that role.
 */
#ifndef RS_ROLE_H
#define RS_ROLE_H

#include <stdint.h>

#include "common/err.h"
#include "ipc/shm.h"

#define RS_ROLE_MAX 16
#define RS_ROLE_NAME_MAX 23
#define RS_ROLE_REGISTRY 256 /* incarnations remembered for liveness checks */

enum rs_role_phase { RS_ROLE_NONE = 0, RS_ROLE_RECOVERING = 1, RS_ROLE_READY = 2, RS_ROLE_EXITED = 3 };

/* What an incarnation is now, for recovery decisions. */
enum rs_inc_status {
    RS_INC_CURRENT = 0,      /* the live incarnation of some role: never reclaim its things */
    RS_INC_FENCED_ALIVE = 1, /* replaced, but its process still exists (stopped or resumed) */
    RS_INC_FENCED_DEAD = 2,  /* replaced and its process is gone (or unknown: too old) */
};

/* One role record, as rs_role_info_at reports it. */
struct rs_role_info {
    char name[RS_ROLE_NAME_MAX + 1];
    uint32_t inc;             /* current incarnation, 0 = never started */
    enum rs_role_phase phase;
    uint32_t pid;
    int alive;                /* 1: that pid with that start time exists now */
    uint64_t started_ns;      /* CLOCK_MONOTONIC at the fence */
    uint64_t ready_ns;        /* CLOCK_MONOTONIC when marked ready (0: not yet) */
    uint64_t heartbeat_ns;    /* CLOCK_MONOTONIC of the last heartbeat */
    uint64_t n_starts;        /* incarnations started for this role */
    uint64_t n_ready;         /* of which reached ready */
};

/* A process's identity in a segment: its role and incarnation. */
typedef struct rs_role rs_role;

/*
 * Starts an incarnation of role `name` in `shm`: takes a new incarnation,
 * records pid and start time in the registry, then fences the previous
 * incarnation by publishing the new one (role phase RECOVERING). The caller
 * then recovers every structure it uses and calls rs_role_ready. The
 * supervisor must guarantee the previous incarnation is dead or stopped
 * while that recovery runs. Returns RS_ENOENT (no such role), RS_ERANGE
 * (incarnations spent), RS_ESTALE (a newer incarnation took the role first),
 * RS_ENOMEM. *out owns the handle (rs_role_stop); `shm` must outlive it.
 */
rs_err rs_role_start(rs_shm *shm, const char *name, rs_role **out);

/* Marks the role ready after recovery. RS_ESTALE if fenced meanwhile. */
rs_err rs_role_ready(rs_role *role);

/* Stores CLOCK_MONOTONIC now as the heartbeat (skipped once fenced). */
void rs_role_heartbeat(rs_role *role);

/* 1 while `role` is still its role's current incarnation, else 0. Any thread. */
int rs_role_current(const rs_role *role);

/* The handle's incarnation and role index. */
uint32_t rs_role_inc(const rs_role *role);
uint32_t rs_role_index(const rs_role *role);
rs_shm *rs_role_shm(const rs_role *role);

/* Marks the role EXITED if still current, frees the handle; accepts NULL, clears *role. */
void rs_role_stop(rs_role **role);

/* Number of roles in the segment, and record `i` (RS_ERANGE past the end). */
uint32_t rs_role_count(const rs_shm *shm);
rs_err rs_role_info_at(const rs_shm *shm, uint32_t i, struct rs_role_info *out);

/*
 * Current incarnation of role index i (0: never started, or i out of
 * range): one acquire load, cheap enough for every loop pass, unlike
 * rs_role_info_at (which reads /proc). Any process, any thread.
 */
uint32_t rs_role_current_inc(const rs_shm *shm, uint32_t i);

/* Index of role `name`, or -1. */
int rs_role_find(const rs_shm *shm, const char *name);

/*
 * Status of incarnation `inc`: current for some role, or fenced and then
 * alive or dead (pid plus /proc start time from the registry, so a reused
 * pid reads as dead; a zombie process reads as dead). An incarnation older
 * than the registry remembers reads as dead. Costs a /proc read: recovery
 * paths only.
 */
enum rs_inc_status rs_role_inc_status(const rs_shm *shm, uint32_t inc);

/*
 * Asserts R1..R3 (see above); returns RS_OK or RS_EMISMATCH, logging the
 * broken invariant. Tests call it; any process.
 */
rs_err rs_role_check(const rs_shm *shm);

#endif

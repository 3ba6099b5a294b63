/* SPDX-License-Identifier: MIT */
/*
 * Private layout of the roles region, and the inline fence check rings,
 * tables and arenas run on their hot paths (one acquire load of a line that
 * changes only when a role restarts).
 */
#ifndef RS_ROLE_IMPL_H
#define RS_ROLE_IMPL_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>

#include "ipc/role.h"
#include "ipc/stateword.h"

struct roles_hdr {
    uint32_t tag;     /* RS_SHM_ROLES */
    uint32_t n_roles; /* 1..RS_ROLE_MAX */
    uint32_t n_reg;   /* RS_ROLE_REGISTRY */
    uint32_t pad;
    uint8_t pad2[48];
};

struct role_rec {
    char name[RS_ROLE_NAME_MAX + 1];
    uint64_t index;
    alignas(64) _Atomic uint64_t word; /* owner=inc, gen=starts, state=phase */
    _Atomic uint64_t pid;
    _Atomic uint64_t start_ticks;      /* /proc/<pid>/stat field 22 */
    _Atomic uint64_t started_ns;
    _Atomic uint64_t ready_ns;
    _Atomic uint64_t heartbeat_ns;
    _Atomic uint64_t n_starts;
    _Atomic uint64_t n_ready;
};

/* Registry entry inc % RS_ROLE_REGISTRY: who ran incarnation `inc`. */
struct inc_reg {
    _Atomic uint64_t inc; /* written last (release); 0 while being rewritten */
    _Atomic uint64_t pid;
    _Atomic uint64_t start_ticks;
    _Atomic uint64_t role;
};

_Static_assert(sizeof(struct roles_hdr) == 64, "roles header is one line");
_Static_assert(sizeof(struct role_rec) == 128, "role record is two lines");

static inline struct role_rec *roles_rec(void *roles, uint32_t i)
{
    return (struct role_rec *)((uint8_t *)roles + sizeof(struct roles_hdr)) + i;
}

static inline struct inc_reg *roles_reg(void *roles, uint32_t i)
{
    struct roles_hdr *h = roles;
    return (struct inc_reg *)(roles_rec(roles, h->n_roles)) + (i % RS_ROLE_REGISTRY);
}

/* 1 while `inc` is the live incarnation of role `idx`. C-R: pairs with the fence CAS. */
static inline int roles_is_current(void *roles, uint32_t idx, uint32_t inc)
{
    uint64_t w = atomic_load_explicit(&roles_rec(roles, idx)->word, memory_order_acquire);
    return rs_sw_owner(w) == inc && rs_sw_state(w) != RS_ROLE_EXITED;
}

struct rs_role {
    rs_shm *shm;
    void *roles;
    uint32_t index;
    uint32_t inc;
};

#endif

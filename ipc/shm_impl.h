/* SPDX-License-Identifier: MIT */
/*
 * Private layout of a segment: the header in page 0, the region directory,
 * the process-local rs_shm handle, and the per-kind table entry (names,
 * size, init, validate) each region kind's module fills for shm.c. Only
 * ipc/ and its tests include this; tools and daemons go through shm.h
 * (rs_shm_peek reads a header without it).
 */
#ifndef RS_SHM_IMPL_H
#define RS_SHM_IMPL_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/shm.h"

#define SHM_PAGE 4096u
#define SHM_HDR_BYTES 4096u
#define SHM_MAX_BYTES (1ull << 40) /* 1 TiB: refuse anything larger as corrupt */

/* Segment states (shm_hdr.state). */
#define SHM_INITIALIZING 0u
#define SHM_READY 1u

/* One directory entry: 96 bytes, written once by the creator. */
struct shm_region_dir {
    char name[32];      /* NUL-terminated */
    uint32_t kind;      /* enum rs_shm_kind */
    uint32_t flags;
    uint64_t offset;    /* bytes from segment start, SHM_PAGE aligned */
    uint64_t size;      /* bytes */
    uint64_t count;
    uint64_t elem_bytes;
    uint64_t start;
    uint32_t prod_role; /* ring only: role indices */
    uint32_t cons_role;
    uint64_t reserved;
};
_Static_assert(sizeof(struct shm_region_dir) == 96, "directory entry layout");

struct shm_hdr {
    uint64_t magic;          /* RS_SHM_MAGIC */
    uint32_t layout_version; /* RS_SHM_LAYOUT_VERSION */
    uint32_t hdr_bytes;      /* SHM_HDR_BYTES */
    uint64_t total_bytes;    /* segment bytes, = file size */
    uint64_t layout_hash;    /* FNV-1a of the directory */
    uint64_t epoch;
    uint64_t created_ns;     /* CLOCK_REALTIME */
    uint32_t creator_pid;
    uint32_t n_regions;
    char boot_id[40];        /* /proc/sys/kernel/random/boot_id at creation */
    _Atomic uint32_t state;  /* SHM_INITIALIZING -> SHM_READY (release, once) */
    uint32_t pad0;
    alignas(64) _Atomic uint64_t incarnation; /* last incarnation handed out */
    alignas(64) struct shm_region_dir regions[RS_SHM_MAX_REGIONS];
};
_Static_assert(sizeof(struct shm_hdr) <= SHM_HDR_BYTES, "header fits page 0");

struct rs_shm {
    char name[256];
    int fd;
    unsigned flags;
    uint8_t *base;
    uint64_t size;
    struct shm_hdr *hdr;
    int locked;
    int cuda_registered;
    void *roles;      /* the ROLES region */
    uint32_t n_roles; /* validated at attach */
};

/* printf into a caller buffer (may be NULL); returns RS_EMISMATCH for chaining. */
rs_err shm_why(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Round x up to a multiple of a (a power of two). */
static inline uint64_t shm_align(uint64_t x, uint64_t a)
{
    return (x + a - 1) & ~(a - 1);
}

/*
 * One region kind: its names and hooks, filled by the module that owns the
 * kind (role.c, ring.c, table.c, arena.c; raw in shm.c) and looked up by
 * shm.c in one table indexed by enum rs_shm_kind, so a new kind is one
 * entry plus its file. memsize returns the region's bytes, or 0 for invalid
 * parameters (writing why); init formats zeroed memory from the directory
 * entry and the creator's spec; validate checks the region's own header
 * against its directory entry (n_roles: the segment's role count), reading
 * only within the region.
 */
struct shm_kind {
    const char *name;       /* "ring", ... (rs_shm_kind_name) */
    const char *count_name; /* what the spec's count is ("slots"), for attach messages */
    const char *elem_name;  /* what elem_bytes is ("slot bytes") */
    uint64_t (*memsize)(const struct shm_region_dir *d, char *why, size_t len);
    void (*init)(void *mem, const struct shm_region_dir *d, const struct rs_shm_region_spec *spec);
    rs_err (*validate)(const void *mem, const struct shm_region_dir *d, uint32_t n_roles,
                       char *why, size_t len);
};

extern const struct shm_kind shm_kind_roles; /* role.c */
extern const struct shm_kind shm_kind_ring;  /* ring.c */
extern const struct shm_kind shm_kind_table; /* table.c */
extern const struct shm_kind shm_kind_arena; /* arena.c */

/* Index of role `name` in a roles region of n_roles, or -1. */
int roles_find(const void *mem, uint32_t n_roles, const char *name);

/* The directory entry of region `name` of `kind`, or NULL (logged). */
const struct shm_region_dir *shm_find(const rs_shm *shm, const char *name, enum rs_shm_kind kind);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * Shared-memory segments: one named POSIX segment per pipeline instance
 * ("/ringserve-<instance>"), laid out by its creator as a directory of named
 * regions (roles, rings, slot tables, token arenas, raw bytes). The header
 * stores offsets, never pointers (each process maps at its own address),
 * plus magic, layout version, sizes, boot id, epoch and the incarnation
 * counter. Creation reserves every byte with fallocate (a full /dev/shm
 * fails here, not as SIGBUS later), locks pages (a refused mlock is a
 * warning) and uses mode 0600; attaching checks magic, version, sizes, boot
 * id and the expected layout, and names what differs.
 * Leaves out: memfd segments passed by a supervisor (named segments let the
 * tools and restarted stages find them), resizing, NUMA placement.
 */
#ifndef RS_SHM_H
#define RS_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define RS_SHM_MAGIC 0x314d485352535352ull /* "RSSRSHM1" little-endian */
#define RS_SHM_LAYOUT_VERSION 1u
#define RS_SHM_MAX_REGIONS 32
#define RS_SHM_REGION_NAME_MAX 31 /* bytes of a region name, NUL excluded */
#define RS_SHM_PREFIX "/ringserve-"

/* What a region holds; stored in the directory so tools can print any region. */
enum rs_shm_kind {
    RS_SHM_RAW = 1,   /* bytes the caller lays out (metrics, KV tables) */
    RS_SHM_ROLES = 2, /* role table: incarnations, pids, heartbeats (role.h); one per segment */
    RS_SHM_RING = 3,  /* SPSC slot ring (ring.h) */
    RS_SHM_TABLE = 4, /* slot table of fixed-size records (table.h) */
    RS_SHM_ARENA = 5, /* token arena of fixed-size chunks (arena.h) */
};

/*
 * One region of a layout. Fields by kind (unused ones 0):
 *   RAW:   bytes = region bytes.
 *   ROLES: count = number of roles (<= RS_ROLE_MAX), role_names = count names.
 *   RING:  count = slots (power of two, 2..2^20), elem_bytes = max payload bytes
 *          per slot (1..1 GiB), flags = RS_RING_CRC or 0, producer / consumer =
 *          role names, start = first sequence number (tests start near limits).
 *   TABLE: count = records (1..2^24), elem_bytes = user bytes per record,
 *          start = first generation of every record.
 *   ARENA: count = chunks (1..2^24), elem_bytes = tokens per chunk (1..2^20).
 */
struct rs_shm_region_spec {
    const char *name; /* 1..RS_SHM_REGION_NAME_MAX bytes, unique in the segment */
    enum rs_shm_kind kind;
    uint64_t count;
    uint64_t elem_bytes;
    uint64_t bytes;
    uint32_t flags;
    uint64_t start;
    const char *producer;
    const char *consumer;
    const char *const *role_names;
};

/* A region as stored in the directory (rs_shm_region_at). */
struct rs_shm_region_info {
    char name[RS_SHM_REGION_NAME_MAX + 1];
    enum rs_shm_kind kind;
    uint64_t offset;     /* bytes from the segment start; page aligned */
    uint64_t size;       /* bytes */
    uint64_t count;      /* as in the spec */
    uint64_t elem_bytes; /* as in the spec */
    uint32_t flags;
    uint64_t start;
    uint32_t producer_role; /* ring: role index */
    uint32_t consumer_role; /* ring: role index */
};

/* The header, as rs_shm_get_info reports it. */
struct rs_shm_info {
    char name[256];
    uint64_t size;             /* bytes mapped */
    uint32_t layout_version;
    uint64_t layout_hash;
    uint64_t epoch;
    uint64_t created_ns;       /* CLOCK_REALTIME ns at creation */
    uint32_t creator_pid;
    char boot_id[40];
    int stale_boot;            /* 1: created in an earlier boot of this host */
    int ready;                 /* 1: creator finished initialising */
    uint64_t incarnations;     /* incarnations handed out so far */
    uint32_t n_regions;
    int locked;                /* 1: this process holds the pages locked */
};

/* rs_shm_attach flags. */
#define RS_SHM_INSPECT 1u /* read-only mapping; tolerates stale boot and unfinished creation */

typedef struct rs_shm rs_shm;

/*
 * Builds "/ringserve-<instance>" into buf (buf_len bytes). instance: 1..200
 * bytes of [A-Za-z0-9._-]. Returns RS_EINVAL for a bad instance, RS_ERANGE if
 * buf is too small.
 */
rs_err rs_shm_name(const char *instance, char *buf, size_t buf_len);

/*
 * Creates segment `name` (leading '/', no other '/') with the regions of
 * `specs` (n of them, at most RS_SHM_MAX_REGIONS, exactly one ROLES), mode
 * 0600, every byte reserved with fallocate, pages locked when allowed (else a
 * warning naming RLIMIT_MEMLOCK), each region initialised, then published
 * ready. `epoch` is the caller's segment epoch (bumped by a supervisor on each
 * whole-pipeline restart). Returns RS_EEXIST if the name exists, RS_ENOMEM if
 * /dev/shm lacks the space (message gives need and free bytes), RS_EINVAL for a
 * bad spec (message names the region and field), RS_EIO for other system
 * errors. On failure nothing is left behind. *out owns the mapping
 * (rs_shm_detach). Called by the one creator (the supervisor or a test).
 */
rs_err rs_shm_create(const char *name, uint64_t epoch, const struct rs_shm_region_spec *specs,
                     size_t n, rs_shm **out);

/*
 * Maps existing segment `name`. Checks magic, layout version, header and file
 * size, that creation finished, the boot id, each region's directory entry
 * and own header, and, when `expect` is non-NULL, that the layout equals the
 * one `expect` (n_expect specs) would create. Failures: RS_ENOENT (no such
 * segment), RS_EMISMATCH (magic, version, size or layout differ: the message
 * says which field of which region), RS_ESTALE (created in an earlier boot),
 * RS_EAGAIN (creation not finished), RS_EIO. The message also goes to `why`
 * (why_len bytes; may be NULL). flags: 0 or RS_SHM_INSPECT (read-only, for
 * tools). A writable attach also requires the segment to be owned by this
 * process's euid with no group or other mode bits, else RS_EINVAL with a
 * message naming owner and mode (another local user may have created the
 * name first). *out owns the mapping. Any process.
 */
rs_err rs_shm_attach(const char *name, const struct rs_shm_region_spec *expect, size_t n_expect,
                     unsigned flags, char *why, size_t why_len, rs_shm **out);

/*
 * Reads segment `name`'s header with one pread, without mapping, locking or
 * validating the segment: for tools that list or inspect segments, and for
 * a daemon that must tell a segment still being created from a malformed
 * one. RS_OK with *out filled as rs_shm_get_info would (size is the file
 * size, locked 0; the header may be changing: a snapshot); RS_ENOENT when
 * there is no such segment; RS_EAGAIN when it exists but its creator has
 * not yet sized it or written its magic; RS_EMISMATCH when it is not a
 * ringserve segment (another magic, or not a regular file); RS_EINVAL for a
 * bad name; RS_EIO otherwise (e.g. no permission). Logs nothing. Any
 * process, any thread.
 */
rs_err rs_shm_peek(const char *name, struct rs_shm_info *out);

/*
 * Removes segment `name` when it is this service's own (owner uid = euid) and
 * holds no usable image: another program's bytes (bad magic), a directory that
 * fails validation, a creation whose creator process is gone, or a file left
 * unsized or headerless for 30 s. Returns RS_OK when it removed it (logged as
 * a warning naming why), RS_EEXIST when it may be live or is a valid segment
 * (left alone: a valid one of another configuration is refused by attach, not
 * replaced), RS_EINVAL when another uid owns it (left untouched, logged with
 * owner and mode), RS_EAGAIN when the name changed files meanwhile, RS_ENOENT,
 * RS_EIO. For the stage that attaches or creates; any process.
 */
rs_err rs_shm_reclaim(const char *name);

/* Unmaps and closes (the segment stays); accepts NULL and clears *shm. */
void rs_shm_detach(rs_shm **shm);

/* Removes the name `name` (mappings stay valid). RS_ENOENT if absent. */
rs_err rs_shm_unlink(const char *name);

/*
 * Checks a segment image of `size` bytes at `base` as attach does (magic,
 * version, sizes, directory, per-region headers), reading nothing outside it.
 * Returns RS_OK or RS_EMISMATCH with the reason in `why`. Pure; any thread.
 */
rs_err rs_shm_validate(const void *base, uint64_t size, char *why, size_t why_len);

/*
 * Finds region `name` of kind `kind`: *base (borrowed: valid until detach)
 * and *size (bytes; may be NULL). RS_ENOENT if absent, RS_EMISMATCH if its
 * kind differs (both logged).
 */
rs_err rs_shm_region(const rs_shm *shm, const char *name, enum rs_shm_kind kind, void **base,
                     uint64_t *size);

/* Directory entry `i` (0 <= i < info.n_regions); RS_ERANGE otherwise. */
rs_err rs_shm_region_at(const rs_shm *shm, uint32_t i, struct rs_shm_region_info *out);

/* Header summary of an attached segment. */
void rs_shm_get_info(const rs_shm *shm, struct rs_shm_info *out);

/* Mapping base (borrowed until detach); for pointer arithmetic in tools. */
void *rs_shm_base(const rs_shm *shm);

/*
 * Takes a new incarnation from the header counter (atomic fetch-add): never
 * 0, never reused within the segment. RS_ERANGE when the 32-bit space is
 * spent (re-create the segment with a new epoch). Called by rs_role_start.
 */
rs_err rs_shm_incarnation_new(rs_shm *shm, uint32_t *inc);

/*
 * Registers this process's mapping with cudaHostRegister so DMA goes straight
 * from the rings (each process registers its own mapping once; detach
 * unregisters). Returns RS_OK, RS_EUNSUPPORTED when built without CUDA or no
 * CUDA device is present (callers skip: not a failure), RS_EDEVICE if the
 * driver refuses (logged with the CUDA error). Calling twice is RS_OK.
 */
rs_err rs_shm_cuda_register(rs_shm *shm);

/* Name of a kind ("ring", ...), or "unknown". */
const char *rs_shm_kind_name(enum rs_shm_kind kind);

#endif

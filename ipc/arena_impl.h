/* SPDX-License-Identifier: MIT */
/*
 * Private layout of an arena region and of a token list, shared by arena.c
 * (append, read, free) and arena_audit.c (recovery, checks).
 *
 *   [arena_hdr: 2 lines][chunk words x n_chunks][pad to page][tokens x n_chunks x chunk_tokens]
 *   token list in a record: [word: len | writer][entry x max_entries: chunk | writer]
 */
#ifndef RS_ARENA_IMPL_H
#define RS_ARENA_IMPL_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>

#include "ipc/arena.h"
#include "ipc/stateword.h"

#define ARENA_MAX_CHUNKS (1u << 24)
#define ARENA_MAX_CHUNK_TOKENS (1u << 20)

struct arena_hdr {
    uint32_t tag;
    uint32_t n_chunks;
    uint32_t chunk_tokens;
    uint32_t pad;
    uint64_t words_off; /* from the region start */
    uint64_t data_off;
    uint8_t pad2[32];
    alignas(64) _Atomic uint64_t reserves;
    _Atomic uint64_t frees, audit_freed, audit_linked, tail_copies;
};
_Static_assert(sizeof(struct arena_hdr) == 128, "arena header is two lines");

struct arena_list {
    _Atomic uint64_t word;     /* len (low 32) | writer incarnation (high 32) */
    _Atomic uint64_t entry[];  /* chunk index (low 32) | incarnation that stored it (high 32) */
};

struct rs_arena {
    rs_shm *shm;
    rs_role *self;
    void *roles;
    const rs_table *table;
    struct arena_hdr *h;
    _Atomic uint64_t *words;
    int32_t *data;
    uint32_t n, ctok;          /* chunks, tokens per chunk */
    uint64_t list_off;
    uint32_t max_entries;
    uint32_t inc, role;
    uint32_t hint;
    uint32_t *scratch;         /* max_entries chunk indices (free_record) */
    char name[32];
};

static inline uint32_t list_len(uint64_t w)
{
    return (uint32_t)w;
}

static inline uint32_t list_writer(uint64_t w)
{
    return (uint32_t)(w >> 32);
}

static inline uint64_t list_make(uint32_t len, uint32_t writer)
{
    return ((uint64_t)writer << 32) | len;
}

/* Chunks that hold `len` tokens. */
static inline uint32_t arena_nchunks(const struct rs_arena *a, uint64_t len)
{
    return (uint32_t)((len + a->ctok - 1) / a->ctok);
}

static inline uint64_t chunk_reserved(uint32_t inc)
{
    return rs_sw_make(RS_ARENA_RESERVED, 0, inc);
}

static inline uint64_t chunk_linked(uint32_t index, uint32_t gen)
{
    return rs_sw_make(RS_ARENA_LINKED, gen, index);
}

/* The list of record `index` (no state check). */
struct arena_list *arena_list_at(const struct rs_arena *a, uint32_t index);

#endif

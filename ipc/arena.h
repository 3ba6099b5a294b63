/* SPDX-License-Identifier: MIT */
/*
 * Token arena: per-request token arrays (int32 token ids: prompt, then
 * generated tokens) that grow to the model context without a worst-case
 * reservation per request. The arena is a pool of fixed-size chunks
 * (chunk_tokens ids each); a request's token list lives inside its request
 * record (slot table) at a fixed offset: one length word, then one entry per
 * chunk. Appending reserves chunks, writes tokens, records the chunks in the
 * list, and publishes the new length with one release CAS; full chunks are
 * then linked to the record (index, generation). Readers see exactly the
 * published prefix. Leaves out: shrinking a list, sharing chunks between
 * requests (prefix reuse copies), more than one writer at a time per list.
 *
 * Chunk state word (stateword.h):
 *   FREE      0
 *   RESERVED  owner = incarnation that may write it (a writer's tail or new
 *             chunks, or a quarantined tail of a fenced writer still alive)
 *   LINKED    owner = record index, gen = record generation (full, immutable)
 *
 *          reserve (CAS)               link after publish (CAS)
 *   FREE ─────────────────▶ RESERVED/I ─────────────────────────▶ LINKED/(i,g)
 *    ▲ ▲                      │  ▲   │                                  │
 *    │ └── publish failed /   │  │   └ adopt: I dead -> RESERVED/me     │ adopt: tail -> RESERVED/me
 *    │     audit: I dead and  │  └─────────────────────────────────────-┘ (only a partial tail)
 *    │     unreferenced ◀─────┘
 *    └──── free_record / audit: record (i,g) gone or not referencing it ◀── LINKED
 *
 * List word (in the record): len (tokens, 32 bits) | writer incarnation
 * (32 bits). List entries: chunk index (32 bits) | incarnation that wrote
 * the entry (32 bits), so a fenced writer's late entry store fails its CAS.
 *
 * | transition                        | who, function               | atomic op         |
 * |-----------------------------------|-----------------------------|-------------------|
 * | chunk FREE -> RESERVED/I          | writer, append              | CAS acquire       |
 * | entry j := (chunk, I)             | writer, append              | CAS (vs capture)  |
 * | list (len, I) -> (len+n, I)       | writer, append              | CAS release (P1)  |
 * | chunk RESERVED/I -> LINKED/(i,g)  | writer after publish, audit | CAS               |
 * | list (len, J) -> (len, I)         | new writer, adopt (J fenced)| CAS               |
 * | tail RESERVED/J|LINKED -> RESERVED/I | adopt, J dead (no copy)  | CAS               |
 * | tail copied to a new chunk        | adopt, J alive (stopped)    | entry store       |
 * | chunk -> FREE                     | free_record, audit, failure | CAS               |
 * | read len, entries, tokens         | any, read / len             | load acquire (C1) |
 *
 * Fencing: a writer checks it is current before appending, captures the
 * entries it will write, re-checks the list word, then CASes the entries;
 * its publish is a CAS on (len, itself). A new writer adopts a list by
 * CASing the writer field, which makes every later publish of the old one
 * fail; if the old writer is still alive its partial tail chunk (the only
 * chunk it could still scribble into below a future length) is copied and
 * left RESERVED by it until it dies.
 *
 * Invariants (rs_arena_check, quiescent):
 *   A1 FREE chunks have word 0.
 *   A2 a LINKED chunk's record is live with that generation and its list
 *      references the chunk below the published length.
 *   A3 a RESERVED chunk belongs to a current incarnation or a fenced one
 *      still alive (a dead owner means the audit is pending).
 *   A4 every chunk a live list references below its length is LINKED to that
 *      record, or RESERVED by that list's writer (or, for the partial tail
 *      only, by a fenced writer still alive, until the next writer copies
 *      it); no chunk is referenced twice.
 */
#ifndef RS_ARENA_H
#define RS_ARENA_H

#include <stdint.h>

#include "common/err.h"
#include "ipc/role.h"
#include "ipc/shm.h"
#include "ipc/table.h"

#define RS_ARENA_FREE 0u
#define RS_ARENA_RESERVED 1u
#define RS_ARENA_LINKED 2u

/* Bytes of a token list holding up to max_tokens with chunk_tokens per chunk. */
uint64_t rs_arena_list_bytes(uint64_t max_tokens, uint64_t chunk_tokens);

struct rs_arena_stats {
    uint32_t n_chunks, chunk_tokens;
    uint64_t n_free, n_reserved, n_linked;
    uint64_t reserves, frees, audit_freed, audit_linked, tail_copies; /* counters */
};

typedef struct rs_arena rs_arena;

/*
 * Opens arena region `name` for token lists stored in the records of
 * `table`, each at byte `list_offset` of the record (8-aligned; the list
 * takes the rest of the record, so capacity = rs_arena_capacity()). `self`
 * is the caller's role (NULL: read-only). An observer (self NULL) may pass
 * table NULL: only rs_arena_check's chunk counts then work (tools). Returns
 * RS_EINVAL if the record leaves no room for a list. *out owns the handle; shm, self and table must
 * outlive it.
 */
rs_err rs_arena_open(rs_shm *shm, const char *name, rs_role *self, const rs_table *table,
                     uint64_t list_offset, rs_arena **out);

/*
 * Same, for a list that takes only list_bytes of each record from
 * list_offset (rs_arena_list_bytes sizes it), so one record can hold several
 * lists, each in its own arena region (the pipeline's token list and its
 * logprob list). RS_EINVAL if [list_offset, list_offset + list_bytes) does
 * not fit the record or holds no entry.
 */
rs_err rs_arena_open_sized(rs_shm *shm, const char *name, rs_role *self, const rs_table *table,
                           uint64_t list_offset, uint64_t list_bytes, rs_arena **out);

/* Frees the handle; accepts NULL and clears *a. */
void rs_arena_close(rs_arena **a);

/* Most tokens one list can hold (record space and chunk size bound it). */
uint64_t rs_arena_capacity(const rs_arena *a);

/*
 * Empties the list of record `ref` (claimed by the caller, not yet
 * published): len 0, no writer. Call once per claim before any append.
 */
rs_err rs_arena_list_init(rs_arena *a, struct rs_table_ref ref);

/*
 * Appends n tokens to the list of `ref` (all or nothing). Takes over the
 * list first if its writer is another, fenced incarnation (or none).
 * Returns RS_OK; RS_ERANGE past capacity; RS_ENOMEM when the arena has too
 * few free chunks (nothing changes); RS_ESTALE if the record is gone, we are
 * fenced, or a live incarnation writes this list.
 */
rs_err rs_arena_append(rs_arena *a, struct rs_table_ref ref, const int32_t *tokens, uint32_t n);

/*
 * Hands the list over: links its partial tail chunk and clears the writer,
 * so another role may append without a fence (e.g. prompt written, decoding
 * next). RS_ESTALE if the caller is not the list's writer.
 */
rs_err rs_arena_seal(rs_arena *a, struct rs_table_ref ref);

/* Published length of the list of `ref` in tokens. RS_ESTALE if the record is gone. */
rs_err rs_arena_len(const rs_arena *a, struct rs_table_ref ref, uint32_t *len);

/*
 * Copies tokens [from, from+n) of the published list into out, stopping at
 * its length; *got = tokens copied. RS_ESTALE if the record was freed
 * (before or during the copy). Any process, any thread.
 */
rs_err rs_arena_read(const rs_arena *a, struct rs_table_ref ref, uint32_t from, uint32_t n,
                     int32_t *out, uint32_t *got);

/*
 * Frees record `ref` (in state `from`) in `table` and returns its chunks:
 * the chunk list is copied first, the record freed, then each chunk
 * unlinked by CAS. A crash in between leaves chunks the audit frees. Only
 * this arena's list is returned: another list of the same record (another
 * arena, rs_arena_open_sized) is left to that arena's audit, which frees it
 * if it was sealed (a tail still RESERVED by a live writer stays until that
 * writer frees it or dies).
 */
rs_err rs_arena_free_record(rs_arena *a, rs_table *table, struct rs_table_ref ref,
                            uint32_t from);

/*
 * Audit and recovery: links RESERVED chunks of dead incarnations that a
 * published list references, frees the other ones, and frees LINKED chunks
 * whose record is gone or does not reference them. Chunks of live or
 * stopped incarnations are left alone. Idempotent, safe to re-run after
 * being killed; may run while other processes append. Returns RS_ENOMEM if
 * its scratch map cannot be allocated.
 */
rs_err rs_arena_recover(rs_arena *a);

/* Checks A1..A4 (exact when no append/free runs) and fills *st (may be NULL). */
rs_err rs_arena_check(const rs_arena *a, struct rs_arena_stats *st);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * The KV block tables in shared memory: one row per running slot listing
 * the KV blocks of the request that holds it, in position order, and one
 * prefix-cache entry per KV block. schedulerd writes both (it owns the
 * blocks); launcherd reads the rows in place for every step. A row counts
 * only while its owner record is RUNNING (pipeline_req.h Q6, Q7), so a row
 * left behind by a killed schedulerd means nothing. Leaves out the
 * allocation and caching policies (schedulerd/kv_block.c) and the K/V
 * memory itself (launcherd's, private).
 *
 * | write                          | who        | op                              |
 * |--------------------------------|------------|---------------------------------|
 * | row blocks, n_blocks, owner    | schedulerd | plain, then owner store release |
 * |                                |            | (P4: publishes the entries)     |
 * | block appended                 | schedulerd | entry, then n_blocks release    |
 * | row cleared                    | schedulerd | owner 0, n_blocks 0 (release)   |
 * | row read                       | launcherd  | owner, n_blocks acquire (C4)    |
 * | kvmeta tok_hash, parent, word  | schedulerd | fields, then word release       |
 */
#ifndef RS_PIPELINE_KV_H
#define RS_PIPELINE_KV_H

#include <stdatomic.h>
#include <stdint.h>

#include "ipc/pipeline.h"

/* One running slot's block table: blocks[0..n_blocks) in position order. */
struct rs_pipe_kvrow {
    _Atomic uint64_t owner; /* rs_table_ref_pack of the request + 1, 0 = unused */
    _Atomic uint32_t n_blocks;
    uint32_t pad;
    uint32_t blocks[];      /* max_blocks_per_seq entries */
};

/* Per KV block prefix-cache entry (schedulerd only; survives its restarts). */
struct rs_pipe_kvmeta {
    _Atomic uint64_t hash;  /* chained hash of the block's tokens and its prefix */
    _Atomic uint64_t word;  /* launcher incarnation whose K/V it describes << 32 | 1 = valid */
    /* schedulerd's hit verification (written before word, read after it): a lookup must also
     * match a second, independently seeded hash of the block's own tokens and the block that
     * held the previous block_size tokens (parent), so a false hit needs two 64-bit collisions */
    uint64_t tok_hash;
    uint32_t parent;        /* block of the preceding tokens, UINT32_MAX for a first block */
    uint32_t pad;
};

/* KV row of running slot s. */
static inline struct rs_pipe_kvrow *rs_pipe_kvrow_at(const struct rs_pipe *p, uint32_t s)
{
    return (struct rs_pipe_kvrow *)(p->kv_rows + (uint64_t)s * p->kvrow_bytes);
}

#endif

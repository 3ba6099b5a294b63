/* SPDX-License-Identifier: MIT */
/*
 * The mask ring: region "masks", next to the batch ring, one row per running
 * slot (max_seqs rows, indexed by the KV table row the batch names), each a
 * row header (the row index: which request and output index the mask is
 * for) and the token mask for it, rs_grammar_mask_words(n_vocab) 32-bit
 * words, bit (t & 31) of word (t >> 5) allowing token t. Bulk mask data
 * never crosses ZeroMQ.
 *
 * Who writes: launcherd owns every structured-output matcher (launcherd/mask.c
 * says why) and its mask thread fills a row while the model thread runs the
 * forward pass the row is for; the sampler waits for the row, then applies
 * it (CPU: common/mask_apply.h; CUDA: the rows are copied to the device from
 * this pinned region, launcherd/cuda/k_mask.cu).
 *
 *   ready 0 ─writer: header + words─▶ ready 1 (release, P1) ─reader acquires (C1)
 *   ready 1 ─writer, next mask for this slot─▶ ready 0 (relaxed) ─▶ ...
 *
 * Invariants: M1 a row with ready 1 holds the complete mask of output
 * `out_index` of request `ref` (packed table ref). M2 a reader uses a row
 * only when ready is 1 and (ref, out_index) are the ones it samples, so a
 * row left half written by a killed launcher (ready 0) or naming another
 * request or step is never applied; a restarted launcher recomputes it by
 * replaying the request's output tokens.
 */
#ifndef RS_PIPELINE_MASK_H
#define RS_PIPELINE_MASK_H

#include <stdatomic.h>
#include <stdint.h>

#include "ipc/pipeline.h"

/* Row flags (rs_pipe_mask_row.flags). */
#define RS_PIPE_MASK_HAS_ROW 0x1u  /* words[] restrict the tokens (else only biases apply) */
#define RS_PIPE_MASK_ONLY_END 0x2u /* nothing but end-of-generation may follow: finish stop */
#define RS_PIPE_MASK_DEAD 0x4u     /* no token is allowed: a dead end */
#define RS_PIPE_MASK_FAILED 0x8u   /* the constraint could not be loaded or replayed */

struct rs_pipe_mask_row {
    _Atomic uint32_t ready; /* 1: the row below is complete (P1) */
    uint32_t flags;         /* RS_PIPE_MASK_* */
    uint64_t ref;           /* rs_table_ref_pack of the request */
    uint32_t out_index;     /* the output token this mask constrains */
    uint32_t n_words;       /* words that follow */
    uint64_t pad[5];        /* header is one cache line */
    uint32_t words[];       /* n_words */
};

/* Bytes of one row and of the region for c. */
static inline uint64_t rs_pipe_mask_row_bytes(const struct rs_pipe_config *c)
{
    uint64_t b = sizeof(struct rs_pipe_mask_row) + ((uint64_t)c->n_vocab + 31) / 32 * 4;
    return (b + 63u) & ~63ull;
}

static inline uint64_t rs_pipe_mask_region_bytes(const struct rs_pipe_config *c)
{
    return (uint64_t)c->max_seqs * rs_pipe_mask_row_bytes(c);
}

/* Row of running slot `slot` (< max_seqs). */
static inline struct rs_pipe_mask_row *rs_pipe_mask_row_at(const struct rs_pipe *p, uint32_t slot)
{
    return (struct rs_pipe_mask_row *)(p->masks + (uint64_t)slot * rs_pipe_mask_row_bytes(&p->cfg));
}

#endif

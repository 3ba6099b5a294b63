/* SPDX-License-Identifier: MIT */
/*
 * The batch descriptor: one record of the "batches" ring (ring.h), written
 * by schedulerd and read in place by launcherd, naming the sequences of one
 * model step (request, KV row, positions, how many tokens, whether to
 * sample) followed by the step's token ids. It is another process's output,
 * so launcherd checks it (rs_pipe_batch_check) before anything uses it.
 * Leaves out how the plan is made (schedulerd/plan.c) and what the step
 * returns (pipeline_result.h).
 */
#ifndef RS_PIPELINE_BATCH_H
#define RS_PIPELINE_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "ipc/pipeline.h"

struct rs_pipe_batch_seq {
    uint32_t req_index, req_gen; /* the request (table reference) */
    uint32_t run_slot;           /* its KV table row */
    uint32_t pos0;               /* position of its first token in this step */
    uint32_t n_tokens;           /* tokens in this step (prefill chunk or 1) */
    uint32_t n_blocks;           /* block table entries the step may use */
    uint32_t tok_off;            /* index of its first token in the batch's token array */
    uint32_t want_logits;        /* 1: sample output token `out_index` after the last token */
    uint32_t out_index;          /* output index of the token to sample */
    uint32_t pad;
};

struct rs_pipe_batch {
    uint64_t batch_id;
    uint64_t planned_ns;         /* CLOCK_MONOTONIC when committed */
    uint32_t launcher_inc;       /* launcher incarnation whose KV the plan assumes */
    uint32_t n_seqs;
    uint32_t n_tokens;           /* total tokens */
    uint32_t pad;
    /* then n_seqs struct rs_pipe_batch_seq, then n_tokens int32 token ids */
};

/* Bytes of a batch record with n_seqs sequences and n_tokens tokens. */
static inline uint64_t rs_pipe_batch_bytes(uint32_t n_seqs, uint32_t n_tokens)
{
    return sizeof(struct rs_pipe_batch) + (uint64_t)n_seqs * sizeof(struct rs_pipe_batch_seq) +
           (uint64_t)n_tokens * sizeof(int32_t);
}

/* Sequence array and token array of a batch record. */
static inline struct rs_pipe_batch_seq *rs_pipe_batch_seqs(const struct rs_pipe_batch *b)
{
    return (struct rs_pipe_batch_seq *)(b + 1);
}
static inline int32_t *rs_pipe_batch_tokens(const struct rs_pipe_batch *b)
{
    return (int32_t *)(rs_pipe_batch_seqs(b) + b->n_seqs);
}

/*
 * Checks a batch record read from the ring against the configuration before
 * anything uses it (it is another process's output): sizes, offsets, token
 * ids, slots, block counts. RS_OK or RS_EPROTO with a message in err.
 */
rs_err rs_pipe_batch_check(const struct rs_pipe *p, const void *data, uint32_t len, char *err,
                           size_t err_len);

#endif

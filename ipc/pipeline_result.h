/* SPDX-License-Identifier: MIT */
/*
 * The step result: one record of the "results" ring (ring.h), written by
 * launcherd for every batch it took and read by schedulerd, which applies
 * it to its requests (token appended, K/V extent). Like the batch, it is
 * another process's output and is checked (rs_pipe_result_check) before
 * use. Leaves out the sampled tokens themselves (they are in the requests'
 * token lists; a row only says where the list now ends).
 *
 * Rows by status. OK: one row per batch seq, in batch order. KV_LOST: one
 * row per seq, token -1, computed 0 (nothing ran; the launcher holds no K/V
 * for any request). ERROR: either 0 rows (the batch record itself was
 * rejected: bad checksum or failed rs_pipe_batch_check; nothing ran) or one
 * row per seq with what was done: a seq the launcher refused (its KV row
 * does not belong to it, its block ids are out of range, its request is
 * inconsistent) or a failed model step leaves token -1 and computed = pos0
 * (K/V unchanged); a refused request also gets its finish word (ERROR, who
 * launcherd) so schedulerd ends it instead of replanning it forever.
 */
#ifndef RS_PIPELINE_RESULT_H
#define RS_PIPELINE_RESULT_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "ipc/pipeline.h"

enum rs_pipe_result_status {
    RS_PIPE_RESULT_OK = 0,
    RS_PIPE_RESULT_KV_LOST = 1, /* planned for an older launcher: not run; replan from scratch */
    RS_PIPE_RESULT_ERROR = 2,   /* the step failed; rows carry what was done */
};

struct rs_pipe_result_row {
    uint32_t req_index, req_gen;
    int32_t token;             /* sampled token, -1 when the row sampled nothing */
    uint32_t n_tokens;         /* list length after the append */
    uint32_t computed;         /* pos0 + n_tokens of its batch seq: K/V now held up to here */
    uint32_t pad;
};

struct rs_pipe_result {
    uint64_t batch_id;
    uint32_t status;           /* enum rs_pipe_result_status */
    uint32_t launcher_inc;
    uint32_t n_rows;           /* == the batch's n_seqs */
    uint32_t pad;
    uint64_t forward_ns;       /* time in the model step */
    uint64_t picked_ns;        /* launcher took the batch (CLOCK_MONOTONIC) */
    uint64_t done_ns;          /* results committed */
    uint64_t sample_ns;        /* time sampling, appending tokens and logprobs, stop rules */
    /* then n_rows struct rs_pipe_result_row */
};

/* Bytes of a result record with n_rows rows. */
static inline uint64_t rs_pipe_result_bytes(uint32_t n_rows)
{
    return sizeof(struct rs_pipe_result) + (uint64_t)n_rows * sizeof(struct rs_pipe_result_row);
}

static inline struct rs_pipe_result_row *rs_pipe_result_rows(const struct rs_pipe_result *r)
{
    return (struct rs_pipe_result_row *)(r + 1);
}

/*
 * Checks a result record read from the ring against the configuration
 * (row count, status, request indices, token ids, extents). RS_OK or
 * RS_EPROTO with a message in err.
 */
rs_err rs_pipe_result_check(const struct rs_pipe *p, const void *data, uint32_t len, char *err,
                            size_t err_len);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * Per-token logprobs (launcherd writes, postprocd reads). A request that
 * asks for N = sampling.n_logprobs > 0 alternatives gets one logprob entry
 * per output token, in a second per-request list stored like the token list
 * (arena.h) but in its own arena region "logprobs" (chunks of
 * RS_PIPE_LP_CHUNK_WORDS int32 words). Entry k (output token k) is the words
 * [k * W, (k + 1) * W) of that list, W = rs_pipe_lp_entry_words(N):
 *
 *   word 0          the sampled token id (equals output token k)
 *   word 1          its natural-log probability (float bits)
 *   word 2          n_top: alternatives filled below (<= N; min(N, n_vocab))
 *   words 3..3+N    top ids, most likely first (entries past n_top are -1)
 *   words 3+N..3+2N their logprobs (float bits)
 *
 * Order: launcherd appends entry k (one all-or-nothing append, published
 * with a release CAS) BEFORE it appends output token k to the token list,
 * so a reader that has seen token k (acquire) finds entry k complete. A
 * launcher killed between the two redoes the step later and finds the
 * entry already there (kept; the sampler is pure, so it is the same). The
 * list is restarted at k = 0 (a reused record may still hold an earlier
 * request's entries) and sealed after each append, so every chunk is linked
 * to its record and the arena audit (rs_arena_recover, which launcherd runs
 * when the region is full, and every stage at start) reclaims the chunks of
 * freed records: postprocd frees records as before, with
 * rs_arena_free_record on the token arena, and does nothing for logprobs.
 * Leaves out computing the values (the sampler, common/sampling.h) and
 * their wire encoding (ipc/wire_server.c).
 */
#ifndef RS_PIPELINE_LOGPROB_H
#define RS_PIPELINE_LOGPROB_H

#include <stdint.h>

#include "common/err.h"
#include "common/sampling.h"
#include "ipc/pipeline.h"
#include "ipc/table.h"
#include "ipc/wire.h"

#define RS_PIPE_LP_CHUNK_WORDS 2048u               /* 8 KiB chunks */
#define RS_PIPE_LP_MAX_TOP RS_SAMPLING_MAX_LOGPROBS /* == RS_WIRE_LOGPROBS_MAX */
#define RS_PIPE_LP_POOL_BYTES (16ull << 20)        /* region size unless one request needs more */

/* Words of one logprob entry with n_top alternatives. */
static inline uint32_t rs_pipe_lp_entry_words(uint32_t n_top)
{
    return 3u + 2u * n_top;
}

/* Chunks of the "logprobs" region of an instance of configuration c. Any process. */
uint32_t rs_pipe_lp_pool_chunks(const struct rs_pipe_config *c);

/* Chunks a logprob list of n_tokens entries with n_top alternatives takes (0 when n_top is 0). */
static inline uint64_t rs_pipe_lp_chunks_for(uint64_t n_tokens, uint32_t n_top)
{
    uint64_t words = n_top == 0 ? 0 : n_tokens * rs_pipe_lp_entry_words(n_top);
    return (words + RS_PIPE_LP_CHUNK_WORDS - 1) / RS_PIPE_LP_CHUNK_WORDS;
}

/* Bytes of a record's logprob list, and its offset in the record (after the token list). */
uint64_t rs_pipe_lp_list_bytes(const struct rs_pipe_config *c);
uint64_t rs_pipe_lp_list_offset(const struct rs_pipe_config *c);

/*
 * launcherd only: stores the logprobs of output token k of request `ref`
 * (sample result r; the record's N = sampling.n_logprobs > 0) as entry k of
 * its logprob list. Call before appending the token (see above). k = 0
 * restarts the list (so a redone k = 0 is written again, with the same
 * values); an entry k > 0 already there is kept (a redone step).
 * Returns RS_OK; RS_EINVAL (the request asked for none); RS_ENOMEM when the
 * region is full even after reclaiming freed records' chunks; RS_ESTALE
 * (record freed, or this incarnation fenced); RS_EIO when the list holds
 * fewer than k entries (a caller bug, logged).
 */
rs_err rs_pipe_logprob_put(struct rs_pipe *p, struct rs_table_ref ref, uint32_t k,
                           const struct rs_sample_result *r);

/*
 * Reads entry k of request ref's logprob list into *out (ipc/wire.h), whose
 * token must be `token` (output token k, read from the token list first).
 * Returns RS_OK; RS_ENOENT when the request asked for no logprobs or entry
 * k is not written (it always is once token k is visible); RS_ESTALE when
 * the record was freed; RS_EIO when the entry names another token or is
 * malformed (logged). Any process and thread (postprocd).
 */
rs_err rs_pipe_logprob_read(const struct rs_pipe *p, struct rs_table_ref ref, uint32_t k,
                            int32_t token, struct rs_wire_logprob *out);

#endif

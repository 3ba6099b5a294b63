/* SPDX-License-Identifier: MIT */
/*
 * A request's structured-output constraint in shared memory: tokenizerd
 * stores what the client sent (kind, text, choices, logit_bias,
 * allowed_token_ids) as a third per-request list in the record, in its own
 * arena region "constraints" (chunks of RS_PIPE_CX_CHUNK_WORDS int32 words),
 * while the record is CLAIMED, and seals it before the publish (P1 of
 * pipeline_req.h releases it). It is immutable afterwards, so any stage,
 * a restarted one included, rebuilds the matcher from it by replaying the
 * output tokens (common/grammar.h). Records that carry one have
 * RS_PIPE_F_CONSTRAINED set. Chunks of freed records are reclaimed by the
 * arena audit (as logprobs, pipeline_logprob.h); tokenizerd runs it when
 * the region is full.
 *
 * Layout (int32 words):
 *   0 magic RS_PIPE_CX_MAGIC    1 kind (enum rs_wire_cx_kind)   2 text bytes
 *   3 n_choices                 4 n_bias                        5 n_allowed
 *   6 bytes of all choices      7 min_tokens                    8.. n_choices choice lengths
 *   then the text, then the choices (bytes, each part padded to a word),
 *   then n_bias pairs (token, float bits), then n_allowed token ids.
 * Leaves out compiling (tokenizerd, launcherd) and the wire (wire_constraint.h).
 */
#ifndef RS_PIPELINE_CONSTRAINT_H
#define RS_PIPELINE_CONSTRAINT_H

#include <stdint.h>

#include "common/err.h"
#include "ipc/pipeline.h"
#include "ipc/table.h"
#include "ipc/wire_constraint.h"

#define RS_PIPE_F_CONSTRAINED 0x100u /* rs_pipe_req.flags: a constraints list is stored */
#define RS_PIPE_CX_MAGIC 0x58435352  /* "RSCX" */
#define RS_PIPE_CX_CHUNK_WORDS 2048u /* 8 KiB chunks */
#define RS_PIPE_CX_POOL_BYTES (16ull << 20) /* region size unless one request needs more */
#define RS_PIPE_CX_HEAD_WORDS 8u

/* Most words one constraint can take (every wire bound at its maximum). */
#define RS_PIPE_CX_MAX_WORDS                                                                \
    (RS_PIPE_CX_HEAD_WORDS + RS_WIRE_CX_CHOICES_MAX + RS_WIRE_CX_TEXT_MAX / 4 +            \
     RS_WIRE_CX_CHOICE_BYTES_MAX / 4 + RS_WIRE_CX_CHOICES_MAX + 1 +                         \
     2 * RS_WIRE_LOGIT_BIAS_MAX + RS_WIRE_ALLOWED_IDS_MAX)

/* Bytes of a record's constraints list, its offset in the record, and the region's chunks. */
uint64_t rs_pipe_cx_list_bytes(const struct rs_pipe_config *c);
uint64_t rs_pipe_cx_list_offset(const struct rs_pipe_config *c);
uint32_t rs_pipe_cx_chunks(const struct rs_pipe_config *c);

/*
 * tokenizerd, record ref CLAIMED: stores c (validated) as the record's
 * constraints list and seals it. words: scratch of RS_PIPE_CX_MAX_WORDS.
 * RS_OK; RS_ENOMEM when the region is full even after reclaiming freed
 * records' chunks; RS_ESTALE (fenced).
 */
rs_err rs_pipe_cx_put(struct rs_pipe *p, struct rs_table_ref ref,
                      const struct rs_wire_constraint *c, int32_t *words);

/*
 * A stored constraint read back: views into `words` (the caller's buffer of
 * RS_PIPE_CX_MAX_WORDS, which rs_pipe_cx_get filled).
 */
struct rs_pipe_cx {
    enum rs_wire_cx_kind kind;
    const char *text;
    uint32_t text_len;
    uint32_t n_choices;
    const char *choices[RS_WIRE_CX_CHOICES_MAX];
    size_t choice_lens[RS_WIRE_CX_CHOICES_MAX];
    uint32_t n_bias;
    const int32_t *bias_words; /* n_bias (token, float bits) pairs */
    uint32_t n_allowed;
    const int32_t *allowed;
    uint32_t min_tokens; /* end-of-generation tokens are banned before this many outputs */
};

/*
 * Reads ref's constraint into words and fills *out. RS_OK; RS_ENOENT (the
 * record has none); RS_ESTALE (freed); RS_EIO (malformed, logged). Any
 * process and thread.
 */
rs_err rs_pipe_cx_get(const struct rs_pipe *p, struct rs_table_ref ref, int32_t *words,
                      struct rs_pipe_cx *out);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * Token sampler over one row of logits: greedy; temperature; top-k; top-p;
 * min-p; repetition, presence and frequency penalties; top-N logprobs.
 *
 * Sampling is a pure function of (params, logits, token history, step): the
 * random draw for the token at output index `step` comes from a counter-based
 * generator keyed by (seed, step), with no state carried between calls. So a
 * request recomputed after a crash or a preemption samples exactly the same
 * tokens, and the params struct (plain data, no pointers) can live in shared
 * memory.
 */
#ifndef RS_SAMPLER_H
#define RS_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/sampling.h"

/* The parameters, the result and their validator are common/sampling.h, shared with the wire
 * code and tokenizerd. */

typedef struct rs_sampler rs_sampler;

/* Scratch for a vocab of n_vocab tokens; one per thread. *out owns it. */
rs_err rs_sampler_create(int32_t n_vocab, rs_sampler **out);
void rs_sampler_destroy(rs_sampler **s);

/*
 * Samples the token at output index `step` (0 for the first generated token).
 * logits: n_vocab floats; modified in place (penalties, temperature).
 * tokens: the prompt (n_prompt ids) followed by the n_output ids generated so
 * far, for the penalties. Returns RS_OK with *out filled, or RS_EINVAL.
 */
rs_err rs_sampler_sample(rs_sampler *s, const struct rs_sampling_params *p, float *logits,
                         const int32_t *tokens, size_t n_prompt, size_t n_output, uint64_t step,
                         struct rs_sample_result *out);

#endif

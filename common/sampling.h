/* SPDX-License-Identifier: MIT */
/*
 * A request's sampling parameters and one sampled token's result, as plain
 * data (no pointers) so both live in shared memory, plus the one validator
 * of the parameters' ranges. tokenizerd validates what a client sent with
 * it (through the wire validator), the engine validates again before it
 * samples, and both say the same thing about the same bad value. The
 * sampler itself (the algorithm) is launcherd/engine/sampler.h.
 * Leaves out: defaults a client did not send (the wire protocol's), and the
 * token budget (max_tokens belongs to the request, not to sampling).
 */
#ifndef RS_SAMPLING_H
#define RS_SAMPLING_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* Most top alternatives a request may ask for (the wire's RS_WIRE_LOGPROBS_MAX). */
#define RS_SAMPLING_MAX_LOGPROBS 20

/* Per-request sampling parameters; plain data, valid in shared memory. */
struct rs_sampling_params {
    float temperature;        /* 0 = greedy (argmax); otherwise > 0 */
    int32_t top_k;            /* 0 = off; keep the k most likely tokens */
    float top_p;              /* 1 = off; keep the smallest set with mass >= top_p */
    float min_p;              /* 0 = off; drop tokens with p < min_p * p_max */
    float repetition_penalty; /* 1 = off; over prompt and output tokens (CTRL/vLLM rule) */
    float presence_penalty;   /* 0 = off; subtracted once per token present in the output */
    float frequency_penalty;  /* 0 = off; subtracted per occurrence in the output */
    uint64_t seed;            /* keys the counter-based random draws */
    int32_t n_logprobs;       /* 0..RS_SAMPLING_MAX_LOGPROBS top alternatives to report */
};

/* Parameters that change nothing: greedy, no penalties, no logprobs. Any thread. */
void rs_sampling_params_default(struct rs_sampling_params *p);

/*
 * Checks every field's range. RS_OK, or RS_EINVAL with err (err_len bytes;
 * may be NULL) naming the field by its request name and the rule, e.g.
 * "field 'top_p': must be in (0, 1], got 1.5" (n_logprobs is the request's
 * 'logprobs'). Fields are checked in the order of the wire protocol's
 * table, so the first bad one is named. Pure; any thread.
 */
rs_err rs_sampling_params_validate(const struct rs_sampling_params *p, char *err, size_t err_len);

/* What sampling one token produced: the token and, when asked, its top alternatives. */
struct rs_sample_result {
    int32_t token;          /* the sampled token id */
    float logprob;          /* log-probability of `token` (see sampler.c for which distribution) */
    int32_t n_top;          /* entries filled in top_ids/top_logprobs */
    int32_t top_ids[RS_SAMPLING_MAX_LOGPROBS];
    float top_logprobs[RS_SAMPLING_MAX_LOGPROBS];
};

#endif

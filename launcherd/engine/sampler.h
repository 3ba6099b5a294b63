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

#define RS_SAMPLER_MAX_LOGPROBS 20

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
    int32_t n_logprobs;       /* 0..RS_SAMPLER_MAX_LOGPROBS top alternatives to report */
};

/* Parameters that change nothing: greedy, no penalties, no logprobs. */
void rs_sampling_params_default(struct rs_sampling_params *p);

/* RS_OK, or RS_EINVAL with a message naming the bad field in err. */
rs_err rs_sampling_params_validate(const struct rs_sampling_params *p, char *err, size_t err_len);

struct rs_sample_result {
    int32_t token;          /* the sampled token id */
    float logprob;          /* log-probability of `token` (see sampler.c for which distribution) */
    int32_t n_top;          /* entries filled in top_ids/top_logprobs */
    int32_t top_ids[RS_SAMPLER_MAX_LOGPROBS];
    float top_logprobs[RS_SAMPLER_MAX_LOGPROBS];
};

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

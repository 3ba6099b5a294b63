/* SPDX-License-Identifier: MIT */
/*
 * Defaults and the range rules of the sampling parameters (sampling.h). The
 * rules are vLLM's and the wire protocol's (ipc/PROTOCOL.md §3.1); NaN fails
 * every rule because each is written as the range a good value lies in.
 */
#include "common/sampling.h"

#include <math.h>
#include <stdio.h>

void rs_sampling_params_default(struct rs_sampling_params *p)
{
    *p = (struct rs_sampling_params){.temperature = 0.0f, .top_k = 0, .top_p = 1.0f,
                                     .min_p = 0.0f, .repetition_penalty = 1.0f,
                                     .presence_penalty = 0.0f, .frequency_penalty = 0.0f,
                                     .seed = 0, .n_logprobs = 0};
}

static rs_err bad(char *err, size_t err_len, const char *field, const char *rule, double v)
{
    if (err != NULL && err_len > 0)
        snprintf(err, err_len, "field '%s': %s, got %g", field, rule, v);
    return RS_EINVAL;
}

rs_err rs_sampling_params_validate(const struct rs_sampling_params *p, char *err, size_t err_len)
{
    if (!(isfinite(p->temperature) && p->temperature >= 0))
        return bad(err, err_len, "temperature", "must be finite and >= 0", p->temperature);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return bad(err, err_len, "top_p", "must be in (0, 1]", p->top_p);
    if (p->top_k < 0)
        return bad(err, err_len, "top_k", "must be >= 0 (0 = off)", p->top_k);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return bad(err, err_len, "min_p", "must be in [0, 1]", p->min_p);
    if (!(isfinite(p->repetition_penalty) && p->repetition_penalty > 0))
        return bad(err, err_len, "repetition_penalty", "must be finite and > 0",
                   p->repetition_penalty);
    if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2))
        return bad(err, err_len, "presence_penalty", "must be in [-2, 2]", p->presence_penalty);
    if (!(p->frequency_penalty >= -2 && p->frequency_penalty <= 2))
        return bad(err, err_len, "frequency_penalty", "must be in [-2, 2]", p->frequency_penalty);
    if (p->n_logprobs < 0 || p->n_logprobs > RS_SAMPLING_MAX_LOGPROBS) {
        if (err != NULL && err_len > 0)
            snprintf(err, err_len, "field 'logprobs': must be 0..%d, got %d",
                     RS_SAMPLING_MAX_LOGPROBS, (int)p->n_logprobs);
        return RS_EINVAL;
    }
    return RS_OK;
}

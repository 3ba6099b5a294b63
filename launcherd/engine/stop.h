/* SPDX-License-Identifier: MIT */
/*
 * Token-level stop rules for one request: end-of-generation tokens (EOS, EOT
 * and the like, unless ignore_eos), the request's own stop token ids, its
 * max_tokens, and the model's context length. Decides, after each sampled
 * token, whether the request is finished and why (the OpenAI finish_reason).
 * Plain data and pure functions, so the parameters can live in the shared
 * request record and any daemon can call it. Leaves out stop strings (text
 * level, in postprocd) and min_tokens (launcherd/mask.c bans the
 * end-of-generation tokens while fewer than min_tokens outputs exist).
 */
#ifndef RS_STOP_H
#define RS_STOP_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define RS_STOP_MAX_IDS 16

enum rs_finish_reason {
    RS_FINISH_NONE = 0,   /* keep generating */
    RS_FINISH_STOP = 1,   /* an end-of-generation or stop token id was sampled */
    RS_FINISH_LENGTH = 2, /* max_tokens reached, or the context is full */
};

/* Per-request stop parameters; plain data, valid in shared memory. */
struct rs_stop_params {
    uint32_t max_tokens;                /* >= 1: most output tokens to generate */
    int32_t ignore_eos;                 /* 1: end-of-generation ids do not stop (0 or 1) */
    int32_t n_stop_ids;                 /* 0..RS_STOP_MAX_IDS entries used in stop_ids */
    int32_t stop_ids[RS_STOP_MAX_IDS];  /* extra token ids that stop (vLLM stop_token_ids) */
};

/*
 * RS_OK, or RS_EINVAL with a message naming the field in err: max_tokens 0,
 * ignore_eos not 0/1, n_stop_ids outside 0..16, a stop id outside
 * [0, n_vocab). Any thread.
 */
rs_err rs_stop_params_validate(const struct rs_stop_params *p, int32_t n_vocab, char *err,
                               size_t err_len);

/*
 * Whether the request ends with `token`, its n_output-th generated token
 * (n_output counts `token`, so >= 1). eog_ids: the vocab's end-of-generation
 * ids (n_eog of them; borrowed for the call). max_ctx: the model's context
 * length in tokens (0 = unlimited); n_prompt + n_output reaching it ends the
 * request, as there is no room for the next token. A stop token wins over a
 * length limit reached at the same token (the vLLM order). Pure; any thread.
 */
enum rs_finish_reason rs_stop_check(const struct rs_stop_params *p, const int32_t *eog_ids,
                                    size_t n_eog, int32_t token, uint64_t n_prompt,
                                    uint64_t n_output, uint64_t max_ctx);

/* "stop", "length", or NULL for RS_FINISH_NONE / an unknown value. */
const char *rs_finish_reason_name(enum rs_finish_reason r);

#endif

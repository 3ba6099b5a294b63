/* SPDX-License-Identifier: MIT */
/*
 * Token-level stop rules (stop.h). A linear scan of at most 16 stop ids and
 * the vocab's few end-of-generation ids per token: cheaper than any set.
 */
#include "launcherd/engine/stop.h"

#include <stdio.h>

static rs_err bad(char *err, size_t err_len, const char *fmt, long v)
    __attribute__((format(printf, 3, 0)));

static rs_err bad(char *err, size_t err_len, const char *fmt, long v)
{
    if (err != NULL && err_len > 0)
        snprintf(err, err_len, fmt, v);
    return RS_EINVAL;
}

rs_err rs_stop_params_validate(const struct rs_stop_params *p, int32_t n_vocab, char *err,
                               size_t err_len)
{
    if (p->max_tokens == 0)
        return bad(err, err_len, "max_tokens = %ld: must be >= 1", 0);
    if (p->ignore_eos != 0 && p->ignore_eos != 1)
        return bad(err, err_len, "ignore_eos = %ld: must be 0 or 1", p->ignore_eos);
    if (p->n_stop_ids < 0 || p->n_stop_ids > RS_STOP_MAX_IDS)
        return bad(err, err_len, "n_stop_ids = %ld: must be in [0, 16]", p->n_stop_ids);
    for (int32_t i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] < 0 || p->stop_ids[i] >= n_vocab)
            return bad(err, err_len, "stop_ids: %ld is outside the vocab", p->stop_ids[i]);
    return RS_OK;
}

static int contains(const int32_t *ids, size_t n, int32_t token)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == token)
            return 1;
    return 0;
}

enum rs_finish_reason rs_stop_check(const struct rs_stop_params *p, const int32_t *eog_ids,
                                    size_t n_eog, int32_t token, uint64_t n_prompt,
                                    uint64_t n_output, uint64_t max_ctx)
{
    size_t n_stop = p->n_stop_ids > 0 && p->n_stop_ids <= RS_STOP_MAX_IDS ? (size_t)p->n_stop_ids
                                                                           : 0;
    if (!p->ignore_eos && eog_ids != NULL && contains(eog_ids, n_eog, token))
        return RS_FINISH_STOP;
    if (contains(p->stop_ids, n_stop, token))
        return RS_FINISH_STOP;
    if (n_output >= p->max_tokens || (max_ctx > 0 && n_prompt + n_output >= max_ctx))
        return RS_FINISH_LENGTH;
    return RS_FINISH_NONE;
}

const char *rs_finish_reason_name(enum rs_finish_reason r)
{
    switch (r) {
    case RS_FINISH_STOP: return "stop";
    case RS_FINISH_LENGTH: return "length";
    default: return NULL;
    }
}

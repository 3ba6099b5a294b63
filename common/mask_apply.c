/* SPDX-License-Identifier: MIT */
/*
 * The CPU side of structured output's last step (see mask_apply.h): one pass
 * over the mask words, skipping words that allow all 32 tokens and filling
 * words that allow none, then the biases. The count of tokens left comes
 * from popcounts of the mask plus the few tokens a -100 bias removed, so
 * the logits are never rescanned.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/mask_apply.h"

rs_err rs_logit_bias_validate(const struct rs_logit_bias *b, size_t n, uint32_t n_vocab,
                              char *err, size_t err_len)
{
    for (size_t i = 0; i < n; i++) {
        const char *why = NULL;
        if (b[i].token < 0 || (uint32_t)b[i].token >= n_vocab)
            why = "token id outside the vocab";
        else if (!isfinite(b[i].bias) || fabsf(b[i].bias) > RS_LOGIT_BIAS_MAX)
            why = "bias must be a number in [-100, 100]";
        if (why != NULL) {
            if (err != NULL && err_len > 0)
                snprintf(err, err_len, "logit_bias entry %zu (token %d, bias %g): %s", i,
                         (int)b[i].token, (double)b[i].bias, why);
            return RS_EINVAL;
        }
    }
    return RS_OK;
}

rs_err rs_mask_from_ids(uint32_t *row, size_t n_words, uint32_t n_vocab, const int32_t *ids,
                        size_t n, char *err, size_t err_len)
{
    if (n_words < ((size_t)n_vocab + 31) / 32) {
        if (err != NULL && err_len > 0)
            snprintf(err, err_len, "mask row of %zu words is too small for %u tokens", n_words,
                     n_vocab);
        return RS_EINVAL;
    }
    memset(row, 0, n_words * sizeof(uint32_t));
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= n_vocab) {
            if (err != NULL && err_len > 0)
                snprintf(err, err_len, "allowed token id %d (entry %zu) is outside the vocab of "
                         "%u tokens", (int)ids[i], i, n_vocab);
            return RS_EINVAL;
        }
        row[ids[i] >> 5] |= 1u << (ids[i] & 31);
    }
    return RS_OK;
}

void rs_mask_and(uint32_t *dst, const uint32_t *src, size_t n_words)
{
    for (size_t i = 0; i < n_words; i++)
        dst[i] &= src[i];
}

/* Applies one word's 32 (or fewer, at the end) tokens; returns those allowed. */
static uint32_t apply_word(float *l, uint32_t w, uint32_t n)
{
    if (w == UINT32_MAX && n == 32)
        return 32;
    for (uint32_t j = 0; j < n; j++)
        if (!((w >> j) & 1))
            l[j] = -INFINITY;
    return (uint32_t)__builtin_popcount(n == 32 ? w : w & ((1u << n) - 1));
}

void rs_mask_apply(float *logits, uint32_t n_vocab, const uint32_t *mask,
                   const struct rs_logit_bias *bias, size_t n_bias, uint32_t *n_allowed)
{
    uint32_t allowed = n_vocab;
    if (mask != NULL) {
        allowed = 0;
        for (uint32_t t = 0; t < n_vocab; t += 32) {
            uint32_t n = n_vocab - t < 32 ? n_vocab - t : 32;
            allowed += apply_word(logits + t, mask[t >> 5], n);
        }
    }
    for (size_t i = 0; i < n_bias; i++) {
        uint32_t t = (uint32_t)bias[i].token;
        if (t >= n_vocab || logits[t] == -INFINITY) /* masked already (or banned twice) */
            continue;
        if (bias[i].bias <= RS_LOGIT_BIAS_BAN) {
            logits[t] = -INFINITY;
            allowed--;
        } else {
            logits[t] += bias[i].bias;
        }
    }
    if (n_allowed != NULL)
        *n_allowed = allowed;
}

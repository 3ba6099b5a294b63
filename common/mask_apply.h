/* SPDX-License-Identifier: MIT */
/*
 * Applying structured-output constraints to one row of logits before
 * sampling, on the CPU: a token mask row (32-bit words, bit t & 31 of word
 * t >> 5 allows token t; from rs_grammar_matcher_fill_mask or an allowed-ids
 * list) and a logit_bias list. Disallowed tokens become -INFINITY; a bias is
 * added to the logit (OpenAI semantics: -100..100; -100 bans the token, +100
 * in practice forces it), except on tokens the mask already removed. Masks
 * win over biases. Leaves out: the CUDA kernel, the shared-memory ring rows.
 */
#ifndef RS_MASK_APPLY_H
#define RS_MASK_APPLY_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define RS_LOGIT_BIAS_MAX 100.0f /* |bias| above this is refused */
#define RS_LOGIT_BIAS_BAN -100.0f /* this bias (or lower) removes the token outright */

struct rs_logit_bias {
    int32_t token;
    float bias;
};

/*
 * RS_OK, or RS_EINVAL naming the first entry whose token is outside
 * [0, n_vocab) or whose bias is not finite or beyond +-100.
 */
rs_err rs_logit_bias_validate(const struct rs_logit_bias *b, size_t n, uint32_t n_vocab,
                              char *err, size_t err_len);

/*
 * A mask row allowing exactly ids[0..n) (an allowed-token-ids list) into
 * row[0..n_words) with n_words >= ceil(n_vocab / 32). RS_EINVAL naming the
 * first id outside [0, n_vocab). Call once per request; AND it with grammar
 * masks (rs_mask_and) each step.
 */
rs_err rs_mask_from_ids(uint32_t *row, size_t n_words, uint32_t n_vocab, const int32_t *ids,
                        size_t n, char *err, size_t err_len);

/* dst[i] &= src[i] for n_words words. */
void rs_mask_and(uint32_t *dst, const uint32_t *src, size_t n_words);

/*
 * Applies mask (NULL: every token allowed; else ceil(n_vocab / 32) words)
 * and then bias[0..n_bias) (validated) to logits[0..n_vocab) in place.
 * *n_allowed (may be NULL) gets the tokens whose logit is still above
 * -INFINITY; 0 means nothing can be sampled (the caller finishes the request).
 * Any thread; no allocation.
 */
void rs_mask_apply(float *logits, uint32_t n_vocab, const uint32_t *mask,
                   const struct rs_logit_bias *bias, size_t n_bias, uint32_t *n_allowed);

#endif

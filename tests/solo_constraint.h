/* SPDX-License-Identifier: MIT */
/*
 * Structured output in the solo reference (tests/solo_ref.h): the request's
 * constraint compiled against the vocab in this process, its matcher walked
 * token by token, the mask, allowed ids and logit_bias applied to each
 * step's logits before sampling, as launcherd does, so a constrained
 * request run through the daemons (with crashes or not) must match it byte
 * for byte. Code in solo_constraint.c (rs_testlib).
 */
#ifndef RS_SOLO_CONSTRAINT_H
#define RS_SOLO_CONSTRAINT_H

#include <stdint.h>

#include "common/grammar.h"
#include "common/mask_apply.h"
#include "ipc/wire_client.h"

struct solo_cx {
    int on;                 /* the request carries a constraint, bias or allowed list */
    rs_grammar_vocab *gv;
    rs_grammar_matcher *m;  /* NULL without a grammar */
    uint32_t *row, *allowed; /* mask words; allowed ids as a row (or NULL) */
    struct rs_logit_bias *bias; /* the request's, then bans of the eog ids */
    uint32_t n_bias, n_eog, n_vocab;
    uint32_t min_tokens, n_out; /* eog banned while n_out < min_tokens */
};

/* What the constraint says about a step. */
enum solo_cx_verdict { SOLO_CX_SAMPLE, SOLO_CX_END, SOLO_CX_DEAD };

/* Prepares cx for g on vocab v (n_vocab logits). 0, or 1 (printed). */
int solo_cx_begin(struct solo_cx *cx, const rs_vocab *v, uint32_t n_vocab,
                  const struct rs_wire_generate *g, const int32_t *eog, uint32_t n_eog);

/* Applies the step's mask and biases to logits; what to do with the step. */
enum solo_cx_verdict solo_cx_apply(struct solo_cx *cx, float *logits);

/* Advances over the sampled token. 0, or 1 (printed). */
int solo_cx_accept(struct solo_cx *cx, int32_t tok);

void solo_cx_end(struct solo_cx *cx);

#endif

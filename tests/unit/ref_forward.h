/* SPDX-License-Identifier: MIT */
/*
 * An independent reference forward pass for the engine's tests: plain loops
 * in double precision over the tensors read straight from the GGUF, for
 * every architecture the engine serves. It restates each architecture from
 * the refdata README (../shared/refdata/arch/README.md, section 4) with its
 * own small table and reads every key itself, so it shares no code or
 * resolution with the engine's loader (launcherd/engine/llama.c, arch.c).
 * Used by test_forward.c and test_arch.c; the code is ref_forward.c
 * (rs_testlib). Leaves out: speed (a 26-layer model over 20 positions takes
 * milliseconds only because the test models are small).
 */
#ifndef RS_TEST_REF_FORWARD_H
#define RS_TEST_REF_FORWARD_H

#include <stdint.h>

#include "common/gguf.h"

struct ref_arch; /* what an architecture computes (ref_forward.c's table) */

/* A model as the reference reads it: its GGUF (borrowed) and the hyperparameters. */
struct ref_model {
    const rs_gguf *g;
    const struct ref_arch *a;
    uint32_t dim, layers, heads, kv_heads, hd, rope_dim, ffn, vocab, window;
    double eps, base, rope_scale, attn_scale, cap_attn, cap_final;
};

/* Reads the metadata; returns 0, or 1 for an architecture the reference does not know. */
int ref_open(const rs_gguf *g, struct ref_model *r);

/* Logits after each of toks[0..n) through the reference, into out (n x vocab). */
void ref_forward(const struct ref_model *r, const int32_t *toks, uint32_t n, double *out);

#endif

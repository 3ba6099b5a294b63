/* SPDX-License-Identifier: MIT */
/*
 * The cost model of one model step, fitted from measured steps: time =
 * fixed + prefill_tokens * per_prefill + decode_tokens * per_decode, by
 * least squares over the latest RS_STEP_COST_WINDOW steps. launcherd feeds
 * it every step it runs and publishes the fit in its metrics block;
 * schedulerd sizes each step's prefill from it (schedulerd/budget.c). A
 * window (not an exponential average) so a change of load or host shows in
 * the fit within that many steps, and a least-squares fit with an intercept
 * because a CPU step's weight reads cost the same for 1 token as for 16.
 * Beside the window it keeps the latest step of each shape class (prefill
 * and decode token counts, by powers of four), and where the window's
 * shapes vary too little to tell the terms apart, the fit adds those whose
 * class the window lacks: a busy server's steps are nearly all one shape
 * (the budget's own mix of decodes and a chunk), from which the terms
 * cannot be told apart, while its first burst of prompts or a lull of pure
 * decodes told them apart well. Leaves out where the figures are kept
 * (ipc/pipeline_metrics.h).
 */
#ifndef RS_STEP_COST_H
#define RS_STEP_COST_H

#include <stdint.h>

#define RS_STEP_COST_WINDOW 64 /* steps the fit looks back on */
#define RS_STEP_COST_BUCKETS 6 /* token-count classes: 0, 1-3, 4-15, 16-63, 64-255, 256+ */
#define RS_STEP_COST_SHAPES (RS_STEP_COST_BUCKETS * RS_STEP_COST_BUCKETS)
/* A kept shape older than this many steps is not used: the host may have changed. */
#define RS_STEP_COST_KEEP_AGE 4096

/* One measured step. */
struct rs_step_cost_sample {
    uint32_t prefill, decode; /* tokens: sequences of more than one token / of one */
    uint64_t ns;              /* the step's model and sampling time */
};

/* The fit's state: a ring of the latest samples. Plain memory, one thread. */
struct rs_step_cost {
    struct rs_step_cost_sample s[RS_STEP_COST_WINDOW];
    uint32_t n, next; /* samples held (<= WINDOW) and the slot the next one goes to */
    uint64_t added;   /* samples added so far */
    /* the latest sample of each shape class, and when it was added (1 + its index; 0: none) */
    struct rs_step_cost_sample keep[RS_STEP_COST_SHAPES];
    uint64_t keep_at[RS_STEP_COST_SHAPES];
};

/* A fitted model; every figure >= 0. */
struct rs_step_cost_fit {
    uint64_t fixed_ns;   /* per step, whatever it holds */
    uint64_t prefill_ps; /* per prefill token, picoseconds */
    uint64_t decode_ps;  /* per decode token, picoseconds */
};

void rs_step_cost_init(struct rs_step_cost *c);

/* Adds one measured step (a step of no tokens is ignored). */
void rs_step_cost_add(struct rs_step_cost *c, uint32_t prefill, uint32_t decode, uint64_t ns);

/*
 * Fits the window and the kept shapes it lacks. Where the samples cannot tell the terms apart (every
 * step the same shape), the fit leans to no fixed cost and to equal prefill
 * and decode costs: that over-estimates the cost of tokens the window never
 * saw, so a budget planned from it errs short, and the next steps' varied
 * shapes correct it. Returns 0 with *out set, -1 with no samples yet.
 */
int rs_step_cost_solve(const struct rs_step_cost *c, struct rs_step_cost_fit *out);

/* The fit's time for a step of that shape, ns. */
uint64_t rs_step_cost_predict(const struct rs_step_cost_fit *f, uint32_t prefill, uint32_t decode);

#endif

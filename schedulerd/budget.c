/* SPDX-License-Identifier: MIT */
/*
 * The step-time budget: how many prefill tokens the next step may take so
 * that, by launcherd's measured cost model (its cost_* gauges, common/
 * step_cost.h), the step stays under --max-step-ms. Decodes are never cut
 * (each is one token of a request already streaming: cutting one stalls its
 * client for a whole step); the prefill chunks and admissions share what is
 * left, and at least --min-prefill-tokens, so a new request's first token
 * still comes while many decodes fill the budget. With no budget, or no fit
 * published yet, the step takes --max-batched-tokens as before. Outputs do
 * not depend on the chunking (DESIGN.md 4), so the budget moves only time.
 * The budget protects streams from a prompt's stall; while more clients
 * wait for a first token than there are streams (a burst), it would trade
 * the many's TTFT for the few's ITL, so it is lifted (--no-burst-lift
 * keeps it).
 */
#include <string.h>

#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "schedulerd/sched.h"

uint32_t budget_prefill(const struct budget_opts *o, const struct rs_step_cost_fit *fit,
                        uint32_t n_decode, uint32_t cap)
{
    if (!(o->max_step_ms > 0) || fit->prefill_ps == 0)
        return cap;
    uint64_t step_ns = (uint64_t)(o->max_step_ms * 1e6 + 0.5);
    uint64_t used_ns = rs_step_cost_predict(fit, 0, n_decode);
    uint64_t n = used_ns < step_ns ? (step_ns - used_ns) * 1000u / fit->prefill_ps : 0;
    if (n < o->min_prefill)
        n = o->min_prefill;
    return n < cap ? (uint32_t)n : cap;
}

int budget_fit(const struct sched *s, struct rs_step_cost_fit *fit)
{
    const struct rs_metrics_block *lm = &s->p->metrics->stage[RS_PIPE_STAGE_LAUNCHERD];
    if (atomic_load_explicit(&lm->counter[RS_M_LAU_COST_STEPS], memory_order_relaxed) == 0)
        return -1;
    fit->fixed_ns = atomic_load_explicit(&lm->counter[RS_M_LAU_COST_FIXED_NS],
                                         memory_order_relaxed);
    fit->prefill_ps = atomic_load_explicit(&lm->counter[RS_M_LAU_COST_PREFILL_PS],
                                           memory_order_relaxed);
    fit->decode_ps = atomic_load_explicit(&lm->counter[RS_M_LAU_COST_DECODE_PS],
                                          memory_order_relaxed);
    return 0;
}

/* Owners counted at most: a lift needs more waiting owners than streams, so with this many
 * established streams or more the budget stays. */
#define BURST_OWNERS_MAX 64

/* Adds idx's owner to seen[0..n) if new: 1 added, 0 already there. */
static uint32_t owner_add(const struct sched *s, const uint8_t **seen, uint32_t n, uint32_t idx)
{
    const uint8_t *o = rs_pipe_req_at(s->p, idx)->owner;
    for (uint32_t i = 0; i < n; i++)
        if (memcmp(seen[i], o, SCHED_OWNER_LEN) == 0)
            return 0;
    seen[n] = o;
    return 1;
}

/* Owners of the requests waiting for a first token, counted up to stop: running ones with
 * prompt left, and queued ones, as many new owners as free slots could admit. */
static uint32_t waiting_owners(const struct sched *s, uint32_t stop)
{
    const uint8_t *seen[BURST_OWNERS_MAX];
    uint32_t n = 0, queued = 0;
    for (uint32_t i = 0; i < s->n_run && n < stop; i++) {
        const struct sreq *sr = &s->req[s->run[i]];
        if (sr->len - sr->n_computed > 1)
            n += owner_add(s, seen, n, s->run[i]);
    }
    for (uint32_t i = 0; i < s->n_heap && n < stop && queued < s->n_free_slots; i++) {
        uint32_t added = owner_add(s, seen, n, s->heap[i]);
        n += added, queued += added;
    }
    return n;
}

/*
 * 1 in a burst: more owners wait for a first token than there are
 * established streams (running requests with one token left, read by their
 * client, past their second output). Owners, so that one client's flood of
 * prompts counts once and cannot lift the budget over another's stream;
 * established, so that the streams a burst itself started one step ago do
 * not end its lift.
 */
static int burst(const struct sched *s)
{
    uint32_t streams = 0;
    for (uint32_t i = 0; i < s->n_run && streams < BURST_OWNERS_MAX; i++) {
        uint32_t idx = s->run[i];
        const struct sreq *sr = &s->req[idx];
        streams += sr->len - sr->n_computed == 1 && sr->len - sr->n_prompt >= 2 &&
                   !fair_paused(s, idx);
    }
    return streams < BURST_OWNERS_MAX && waiting_owners(s, streams + 1) > streams;
}

uint32_t budget_step(struct sched *s, uint32_t n_decode, uint32_t cap)
{
    struct rs_step_cost_fit fit = {0};
    uint32_t n = cap;
    if (s->budget.max_step_ms > 0 && budget_fit(s, &fit) == 0) {
        if (s->budget.burst_lift && burst(s))
            rs_counter_add(&s->m->counter[RS_M_SCH_BUDGET_LIFTED], 1);
        else
            n = budget_prefill(&s->budget, &fit, n_decode, cap);
    }
    rs_gauge_set(&s->m->counter[RS_M_SCH_PREFILL_BUDGET_LAST], n);
    return n;
}

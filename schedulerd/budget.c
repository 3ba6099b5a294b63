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
 * The budget protects streams from a prompt's stall; while the requests
 * waiting for a first token are at least as many as the streams (a burst),
 * it would trade the many's TTFT for the few's ITL, so it is lifted
 * (--no-burst-lift keeps it).
 */
#include "ipc/pipeline_metrics.h"
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

/* 1 when the requests waiting for a first token are at least as many as the streams: those
 * prefilling, and the waiting ones a free slot could admit, against every running request
 * with one token left that a reader takes (decoding now or deferred by its owner's share). */
static int burst(const struct sched *s, uint32_t n_prefilling)
{
    uint32_t waiting = n_prefilling + (s->n_heap < s->n_free_slots ? s->n_heap : s->n_free_slots);
    uint32_t streams = 0;
    for (uint32_t i = 0; i < s->n_run && streams <= waiting; i++) {
        uint32_t idx = s->run[i];
        streams += s->req[idx].len - s->req[idx].n_computed == 1 && !fair_paused(s, idx);
    }
    return waiting > 0 && waiting >= streams;
}

uint32_t budget_step(struct sched *s, uint32_t n_decode, uint32_t n_prefilling, uint32_t cap)
{
    struct rs_step_cost_fit fit = {0};
    uint32_t n = cap;
    if (s->budget.max_step_ms > 0 && budget_fit(s, &fit) == 0) {
        if (s->budget.burst_lift && burst(s, n_prefilling))
            rs_counter_add(&s->m->counter[RS_M_SCH_BUDGET_LIFTED], 1);
        else
            n = budget_prefill(&s->budget, &fit, n_decode, cap);
    }
    rs_gauge_set(&s->m->counter[RS_M_SCH_PREFILL_BUDGET_LAST], n);
    return n;
}

/* SPDX-License-Identifier: MIT */
/*
 * The measured step cost schedulerd budgets with: after every step, its
 * shape (prefill tokens: sequences of more than one token; decode tokens:
 * sequences of one) and its time (forward + sampling) go into the windowed
 * fit (common/step_cost.h), and the fit is published as launcherd's cost_*
 * gauges. Gauges are written one by one (relaxed): a planner that reads
 * between two stores mixes two consecutive fits for one step, which only
 * moves that step's chunk a little. A new incarnation starts an empty
 * window and leaves its predecessor's figures up until its first step.
 * Leaves out the budget itself (schedulerd/budget.c).
 */
#include "ipc/pipeline_metrics.h"
#include "launcherd/launcher.h"

void launcher_cost_note(struct launcher *l, const struct rs_pipe_batch_seq *seqs, uint32_t n_seqs,
                        uint64_t ns)
{
    uint32_t prefill = 0, decode = 0;
    for (uint32_t i = 0; i < n_seqs; i++) {
        if (seqs[i].n_tokens == 1)
            decode++;
        else
            prefill += seqs[i].n_tokens;
    }
    rs_step_cost_add(&l->cost, prefill, decode, ns);
    struct rs_step_cost_fit fit;
    if (rs_step_cost_solve(&l->cost, &fit) != 0)
        return;
    struct rs_metrics_block *m = &l->p->metrics->stage[RS_PIPE_STAGE_LAUNCHERD];
    rs_gauge_set(&m->counter[RS_M_LAU_COST_FIXED_NS], fit.fixed_ns);
    rs_gauge_set(&m->counter[RS_M_LAU_COST_PREFILL_PS], fit.prefill_ps);
    rs_gauge_set(&m->counter[RS_M_LAU_COST_DECODE_PS], fit.decode_ps);
    rs_gauge_set(&m->counter[RS_M_LAU_COST_STEPS], l->cost.n);
}

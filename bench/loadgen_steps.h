/* SPDX-License-Identifier: MIT */
/*
 * bench_loadgen --sweep-step-ms: the same native load (same prompts, the
 * --clients concurrency) at each schedulerd step-time budget, the instance
 * stopped and started again per budget with --max-step-ms (so every run
 * starts with an empty KV cache and a fresh cost fit), then one table:
 * output throughput, TTFT p50/p99, ITL p50/p99, the shares of steps whose
 * prefill the budget held back and of steps it was lifted for as a burst
 * (schedulerd --no-burst-lift), and the cost model launcherd fitted (fixed
 * ms per step, us per prefill and decode token) as the run left it.
 * Included by bench_loadgen.c after its run and instance functions.
 */
#ifndef RS_LOADGEN_STEPS_H
#define RS_LOADGEN_STEPS_H

struct step_row {
    double ms, tps, ttft50, ttft99, itl50, itl99;
    uint64_t steps, limited, lifted, fixed_ns, prefill_ps, decode_ps;
};

static uint64_t step_metric(struct lg *g, enum rs_pipe_stage st, unsigned i)
{
    struct rs_pipe *v = rs_harness_view(g->h);
    return v != NULL ? atomic_load(&v->metrics->stage[st].counter[i]) : 0;
}

/* Restarts the instance at budget ms and runs the native load; 0, or -1 (printed). */
static int step_run(struct lg *g, double ms, struct step_row *r)
{
    struct figures f;
    memset(&f, 0, sizeof(f));
    close_clients(g);
    rs_harness_stop(g->h, 0);
    snprintf(g->a.step_ms, sizeof(g->a.step_ms), "%g", ms);
    printf("=================== --max-step-ms %g ===================\n", ms);
    if (start_instance(&g->a, g->h) != 0 || run_mode(g, LG_NATIVE, &f) != 0)
        return -1;
    *r = (struct step_row){.ms = ms, .tps = tok_per_s(&f), .ttft50 = f.ttft.p50,
                           .ttft99 = f.ttft.p99, .itl50 = f.itl.p50, .itl99 = f.itl.p99};
    r->steps = step_metric(g, RS_PIPE_STAGE_SCHEDULERD, RS_M_SCH_STEPS);
    r->limited = step_metric(g, RS_PIPE_STAGE_SCHEDULERD, RS_M_SCH_BUDGET_LIMITED);
    r->lifted = step_metric(g, RS_PIPE_STAGE_SCHEDULERD, RS_M_SCH_BUDGET_LIFTED);
    r->fixed_ns = step_metric(g, RS_PIPE_STAGE_LAUNCHERD, RS_M_LAU_COST_FIXED_NS);
    r->prefill_ps = step_metric(g, RS_PIPE_STAGE_LAUNCHERD, RS_M_LAU_COST_PREFILL_PS);
    r->decode_ps = step_metric(g, RS_PIPE_STAGE_LAUNCHERD, RS_M_LAU_COST_DECODE_PS);
    return f.failed > 0 ? -1 : 0;
}

static int sweep_steps(struct lg *g)
{
    struct step_row rows[32];
    size_t n = 0;
    for (const char *p = g->a.sweep_step; *p != '\0' && n < 32;) {
        char *end;
        double ms = strtod(p, &end);
        if (end == p || !(ms >= 0) || ms > 600000 || (*end != ',' && *end != '\0')) {
            fprintf(stderr, "bench_loadgen: --sweep-step-ms takes budgets like 0,20,50\n");
            return 2;
        }
        if (step_run(g, ms, &rows[n]) != 0)
            return 1;
        n++;
        p = *end == ',' ? end + 1 : end;
    }
    printf("============ Step-time budget sweep (%u clients) ============\n", g->a.clients);
    printf("%8s %9s %9s %9s %8s %8s %9s %9s %8s %9s %9s\n", "budget", "tok/s", "TTFT p50",
           "TTFT p99", "ITL p50", "ITL p99", "limited", "lifted", "fixed", "prefill", "decode");
    printf("%8s %9s %9s %9s %8s %8s %9s %9s %8s %9s %9s\n", "ms", "", "ms", "ms", "ms", "ms",
           "steps", "steps", "ms", "us/tok", "us/tok");
    for (size_t i = 0; i < n; i++) {
        const struct step_row *r = &rows[i];
        char b[16];
        snprintf(b, sizeof(b), r->ms > 0 ? "%g" : "off", r->ms);
        double per = r->steps ? 100.0 / (double)r->steps : 0.0;
        printf("%8s %9.1f %9.1f %9.1f %8.1f %8.1f %8.1f%% %8.1f%% %8.2f %9.1f %9.1f\n", b,
               r->tps, r->ttft50, r->ttft99, r->itl50, r->itl99, per * (double)r->limited,
               per * (double)r->lifted,
               (double)r->fixed_ns / 1e6, (double)r->prefill_ps / 1e6,
               (double)r->decode_ps / 1e6);
    }
    return 0;
}

#endif

/* SPDX-License-Identifier: MIT */
/*
 * bench_launch: launcherd driven alone. This program plays schedulerd and
 * tokenizerd on a real segment (tests/integration/launch_driver.h), starts
 * the real launcherd binary, and runs batches of decodes at batch 1, 8 and
 * 16. Per batch size it prints step throughput (steps/s, tokens/s), the
 * pickup latency from the batch commit to the launcher taking it, and the
 * ring overhead per step: the driver's commit-to-result time minus the
 * launcher's model step and sampling, split into pickup, the launcher's own
 * bookkeeping (checks, block tables, list appends, result record) and the
 * way back (result commit to the driver reading it).
 * Leaves out: prefill speed (bench/decode) and the planner (bench/schedule).
 */
#include "bench/launch_bench.h"

static void report(uint32_t B, const struct lb_step *st, uint32_t n, uint64_t *v)
{
    LB_FIELD(v, st, n, wall);
    double wall_mean = lb_mean_us(v, n), wall_p50 = lb_q_us(v, n, 0.5),
           wall_p99 = lb_q_us(v, n, 0.99);
    LB_FIELD(v, st, n, fwd);
    double fwd = lb_mean_us(v, n);
    LB_FIELD(v, st, n, smp);
    double smp = lb_mean_us(v, n);
    LB_FIELD(v, st, n, pickup);
    double pick_mean = lb_mean_us(v, n), pick_p50 = lb_q_us(v, n, 0.5),
           pick_p99 = lb_q_us(v, n, 0.99);
    for (uint32_t i = 0; i < n; i++)
        v[i] = st[i].inside - st[i].fwd - st[i].smp;
    double own = lb_mean_us(v, n);
    for (uint32_t i = 0; i < n; i++)
        v[i] = st[i].wall - st[i].fwd - st[i].smp;
    double ovh_mean = lb_mean_us(v, n), ovh_p50 = lb_q_us(v, n, 0.5), ovh_p99 = lb_q_us(v, n, 0.99);
    double back = ovh_mean - pick_mean - own;
    printf(
        "batch %2u: %8.1f steps/s %9.1f tok/s | step %8.1f us (p50 %.1f p99 %.1f): forward %.1f, "
        "sampling %.1f\n",
        B, 1e6 / wall_mean, 1e6 * B / wall_mean, wall_mean, wall_p50, wall_p99, fwd, smp);
    printf("          pickup commit->launcher p50 %.1f us p99 %.1f us | ring overhead per step "
           "%.1f us (p50 %.1f p99 %.1f) = %.2f%% of the step: pickup %.1f + launcher "
           "bookkeeping %.1f + result->driver %.1f\n",
           pick_p50, pick_p99, ovh_mean, ovh_p50, ovh_p99, 100.0 * ovh_mean / wall_mean, pick_mean,
           own, back);
}

int main(int argc, char **argv)
{
    struct lb_args a;
    int rc = lb_parse(argc, argv, &a,
                      "Drives launcherd alone (this program plays schedulerd) with decode\n"
                      "batches and prints step throughput, pickup latency and ring overhead.\n");
    if (rc != 0)
        return rc == 1 ? 0 : rc;
    static struct ld d;
    char dir[200];
    if (lb_setup(&d, &a, "bl", dir, sizeof(dir)) != 0)
        return 1;
    printf("launcherd: %s, %d threads (0 = all CPUs), spin %u us; %u-token prompts, %u decode "
           "steps x %u phases per batch size\n",
           a.model, a.threads, a.spin_us, a.prompt, a.steps, a.reps);
    uint32_t n = a.steps * a.reps;
    struct lb_step *st = calloc(n, sizeof(*st));
    uint64_t *v = calloc(n, sizeof(*v));
    rc = st == NULL || v == NULL;
    for (uint32_t bi = 0; rc == 0 && bi < a.n_batches; bi++) {
        for (uint32_t r = 0; rc == 0 && r < a.reps; r++)
            rc = lb_run_phase(&d, &a, a.batches[bi], st + (size_t)r * a.steps, NULL);
        if (rc == 0)
            report(a.batches[bi], st, n, v);
    }
    free(st);
    free(v);
    lb_cleanup(&d, dir);
    return rc == 0 ? 0 : 1;
}

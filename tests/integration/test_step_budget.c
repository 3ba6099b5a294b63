/* SPDX-License-Identifier: MIT */
/*
 * The step-time budget through the four real daemons on stories260K:
 * schedulerd at a budget no step can meet (1 us) plans every step's prefill
 * at --min-prefill-tokens from the cost launcherd measured and published.
 * The first request runs alone (its steps give launcherd a fit to publish);
 * then every prompt is prefilled 3 tokens at a time beside the decodes of
 * the others; each client must still get exactly its solo output (computed in
 * this process, tests/solo_ref.h), and the counters must show that the
 * budget was what sized the steps (--no-burst-lift: eleven prompts beside
 * no stream are a burst). By default the same burst lifts the budget.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "client/client.h"
#include "common/clock.h"
#include "ipc/pipeline_metrics.h"
#include "tests/pipeline_harness.h"
#include "tests/rs_test.h"
#include "tests/solo_ref.h"
#include "tests/stream_rec.h"

#define MODEL "stories260K.gguf"
#define CTX 512
#define N_JOBS 12

struct job {
    struct rs_wire_generate g;
    struct solo_out ref;
    struct stream_rec s;
};

static void on_event(const struct rs_client_event *ev)
{
    stream_rec_add(&((struct job *)ev->user)->s, ev);
}

static uint64_t metric(struct rs_harness *h, enum rs_pipe_stage st, unsigned i)
{
    struct rs_pipe *v = rs_harness_view(h);
    return v != NULL ? atomic_load(&v->metrics->stage[st].counter[i]) : 0;
}

static int references(const char *model, struct job *jobs)
{
    struct solo_ref s;
    if (solo_open(&s, model, CTX) != 0)
        return 1;
    int failed = 0;
    for (uint32_t i = 0; i < N_JOBS && !failed; i++)
        failed = solo_run(&s, &jobs[i].g, &jobs[i].ref) != 0;
    solo_close(&s);
    return failed;
}

static int same_as_solo(const struct job *j, uint32_t i)
{
    const struct rs_client_result *r = &j->s.res;
    RS_CHECK_MSG(j->s.n_finals == 1 && !j->s.out_of_order && r->status == RS_CLIENT_OK,
                 "request %u: %u finals, status %s", i, j->s.n_finals,
                 rs_client_status_name(r->status));
    RS_CHECK_MSG(r->finish_reason == j->ref.finish && r->n_tokens == j->ref.n_tokens &&
                     memcmp(r->tokens, j->ref.tokens, r->n_tokens * sizeof(int32_t)) == 0,
                 "request %u: %u tokens (%s), solo %u (%s)", i, r->n_tokens,
                 rs_wire_finish_name(r->finish_reason), j->ref.n_tokens,
                 rs_wire_finish_name(j->ref.finish));
    RS_CHECK_MSG(r->text_len == j->ref.text_len && memcmp(r->text, j->ref.text, r->text_len) == 0,
                 "request %u: text differs:\n%s\n---- solo ----\n%s", i, r->text, j->ref.text);
    return 0;
}

/* Runs jobs[from, to) together; 0 when each got its final. */
static int run_jobs(struct rs_harness *h, struct job *jobs, uint32_t from, uint32_t to)
{
    struct rs_client_opts co;
    rs_client *c = NULL;
    rs_client_opts_default(&co);
    co.rundir = h->rundir;
    co.request_timeout_ms = 180000;
    RS_CHECK(rs_client_create(&co, &c) == RS_OK);
    int failed = 0;
    for (uint32_t i = from; i < to && !failed; i++)
        failed = rs_client_submit(c, &jobs[i].g, NULL, on_event, &jobs[i], NULL) != RS_OK;
    for (uint64_t end = rs_clock_ms() + 180000; !failed;) {
        uint32_t done = 0;
        for (uint32_t i = from; i < to; i++)
            done += jobs[i].s.n_finals > 0;
        if (done == to - from)
            break;
        failed = rs_clock_ms() >= end || rs_client_poll(c, 50) < 0;
    }
    rs_client_destroy(&c);
    return failed;
}

/* The two-phase run under schedulerd arguments sx (n of them); the counters after it. */
static int budget_run(const char *const *sx, int n, uint64_t *limited, uint64_t *lifted)
{
    static struct job jobs[N_JOBS];
    static char model[512];
    struct rs_harness h;
    memset(jobs, 0, sizeof(jobs));
    if (rs_test_refdata(MODEL, model, sizeof(model)) == NULL)
        return RS_TEST_SKIP;
    for (uint32_t i = 0; i < N_JOBS; i++)
        solo_mixed_request(&jobs[i].g, i, 120);
    jobs[0].g.max_tokens = 40; /* a fit needs steps: cost_steps counts them */
    RS_CHECK(references(model, jobs) == 0);
    struct rs_harness_opts o = {0};
    o.model = model;
    o.n_ctx = CTX;
    o.max_requests = 64;
    for (int i = 0; i < n; i++)
        o.extra[RS_PIPE_STAGE_SCHEDULERD][i] = sx[i];
    RS_CHECK(rs_harness_start(&h, &o) == RS_OK);
    int failed = run_jobs(&h, jobs, 0, 1) || run_jobs(&h, jobs, 1, N_JOBS);
    for (uint32_t i = 0; i < N_JOBS && !failed; i++)
        failed = same_as_solo(&jobs[i], i) != 0;
    *limited = metric(&h, RS_PIPE_STAGE_SCHEDULERD, RS_M_SCH_BUDGET_LIMITED);
    *lifted = metric(&h, RS_PIPE_STAGE_SCHEDULERD, RS_M_SCH_BUDGET_LIFTED);
    uint64_t fitted = metric(&h, RS_PIPE_STAGE_LAUNCHERD, RS_M_LAU_COST_STEPS);
    uint64_t per_tok = metric(&h, RS_PIPE_STAGE_LAUNCHERD, RS_M_LAU_COST_PREFILL_PS);
    fprintf(stderr, "%llu budget-limited steps, %llu lifted; fit over %llu steps, %llu ps per "
            "prefill token\n", (unsigned long long)*limited, (unsigned long long)*lifted,
            (unsigned long long)fitted, (unsigned long long)per_tok);
    if (failed)
        rs_harness_dump_logs(&h, RS_PIPE_N_STAGES);
    rs_harness_stop(&h, failed);
    for (uint32_t i = 0; i < N_JOBS; i++) {
        solo_out_fini(&jobs[i].ref);
        rs_client_result_fini(&jobs[i].s.res);
    }
    RS_CHECK(!failed);
    RS_CHECK_MSG(fitted > 0 && per_tok > 0, "launcherd published no cost model");
    return 0;
}

static int test_unmeetable_budget_keeps_every_output(void)
{
    const char *sx[] = {"--max-step-ms", "0.001", "--min-prefill-tokens", "3", "--no-burst-lift"};
    uint64_t limited = 0, lifted = 0;
    int rc = budget_run(sx, 5, &limited, &lifted);
    if (rc != 0)
        return rc;
    RS_CHECK_MSG(limited > 0, "the budget never sized a step");
    RS_CHECK_MSG(lifted == 0, "the budget was lifted %llu times under --no-burst-lift",
                 (unsigned long long)lifted);
    return 0;
}

/* Eleven requests at once beside no stream: the budget steps aside, outputs unchanged. */
static int test_a_burst_lifts_the_budget(void)
{
    const char *sx[] = {"--max-step-ms", "0.001", "--min-prefill-tokens", "3"};
    uint64_t limited = 0, lifted = 0;
    int rc = budget_run(sx, 4, &limited, &lifted);
    if (rc != 0)
        return rc;
    RS_CHECK_MSG(lifted > 0, "the budget was never lifted for the burst");
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_unmeetable_budget_keeps_every_output),
    RS_TEST(test_a_burst_lifts_the_budget),
};
RS_TEST_MAIN(cases)

/* SPDX-License-Identifier: MIT */
/*
 * schedulerd's step-time budget in process over a real segment (the
 * planner of test_sched_plan.c, the checking launcher of sched_fixture.h):
 * the cost model is injected into launcherd's cost_* gauges as launcherd
 * would publish it, changed every two steps, and every planned step's
 * prefill must be what that model allows under --max-step-ms for the
 * decodes the step holds: the budget when prompts are waiting for it, never
 * more, at least --min-prefill-tokens, at most the token budget; no budget
 * and no published fit leave --max-batched-tokens. Outputs are checked by
 * the fixture as in every planner test (chunking changes none). With the
 * burst lift on (each request its own client), the same run must plan
 * --max-batched-tokens exactly while more clients wait for a first token
 * than streams are past their second output, and the model's budget
 * otherwise; both must occur. One client's flood of prompts never lifts
 * the budget over another client's stream; three clients' prompts do.
 */
#include <stdlib.h>
#include <string.h>

#include "ipc/pipeline_batch.h"
#include "ipc/pipeline_metrics.h"
#include "schedulerd/sched.h"
#include "tests/unit/sched_fixture.h"

#define N_REQ 8
#define PROMPT 400
#define MAX_TOKENS 256 /* --max-batched-tokens */

/* One cost model as launcherd publishes it (ns; ps per token), and the budget in force. */
struct cost_case {
    uint64_t fixed_ns, prefill_ps, decode_ps, steps;
    double max_step_ms;
};

/* Cycled every two steps: a plain model, dearer prefill, decodes over the budget, a fixed
 * cost over it, prefill so cheap the token budget binds, the budget off, no fit yet. */
static const struct cost_case cases_tab[] = {
    {2000000, 100000000, 500000, 1, 20.0},     {2000000, 250000000, 500000, 9, 20.0},
    {1000000, 50000000, 3000000000ull, 9, 20.0}, {25000000, 50000000, 500000, 9, 20.0},
    {100000, 1000000, 1000000, 9, 20.0},        {2000000, 100000000, 500000, 9, 0.0},
    {2000000, 100000000, 500000, 0, 20.0},
};
#define N_CASES (sizeof(cases_tab) / sizeof(cases_tab[0]))

static void publish(struct sfx *f, const struct cost_case *k)
{
    struct rs_metrics_block *m = &f->lau->metrics->stage[RS_PIPE_STAGE_LAUNCHERD];
    rs_gauge_set(&m->counter[RS_M_LAU_COST_FIXED_NS], k->fixed_ns);
    rs_gauge_set(&m->counter[RS_M_LAU_COST_PREFILL_PS], k->prefill_ps);
    rs_gauge_set(&m->counter[RS_M_LAU_COST_DECODE_PS], k->decode_ps);
    rs_gauge_set(&m->counter[RS_M_LAU_COST_STEPS], k->steps);
}

/* What the model allows, worked out here in floating point from the figures alone. */
static uint32_t allowed(const struct cost_case *k, uint32_t min_prefill, uint32_t n_decode)
{
    uint32_t cap = MAX_TOKENS - n_decode;
    if (k->max_step_ms <= 0 || k->steps == 0)
        return cap;
    double left_ns = k->max_step_ms * 1e6 - (double)k->fixed_ns -
                     (double)n_decode * (double)k->decode_ps / 1000.0;
    double n = left_ns > 0 ? left_ns / ((double)k->prefill_ps / 1000.0) : 0;
    if (n < min_prefill)
        n = min_prefill;
    return n < cap ? (uint32_t)n : cap;
}

struct run {
    struct sfx f;
    struct rs_pipe *sp;
    struct sched *s;
    uint32_t prompt_left[N_REQ]; /* prompt tokens not yet planned, per request */
    uint32_t seen[N_CASES];      /* steps checked under each case while prompts waited */
    uint32_t lifted;             /* steps planned with the budget lifted for a burst */
    uint32_t decoded[N_REQ];     /* decode steps planned so far, per request */
};

/* Clients waiting for a first token (prompt left) before the step: one request each, and
 * every one has a slot. */
static uint32_t first_token_waiters(const struct run *r)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < N_REQ; i++)
        n += r->prompt_left[i] > 0;
    return n;
}

/* The planned step against case k. 0, or -1 with the reason printed. */
static int check_step(struct run *r, const struct rs_pipe_batch *b, const struct cost_case *k)
{
    const struct rs_pipe_batch_seq *q = rs_pipe_batch_seqs(b);
    uint32_t n_decode = 0, prefill = 0, waiting_prompt = 0, tail_prompt = 0, established = 0;
    uint32_t waiters = first_token_waiters(r);
    for (uint32_t i = 0; i < N_REQ; i++)
        waiting_prompt += r->prompt_left[i];
    for (uint32_t i = 0; i < b->n_seqs; i++) {
        uint32_t j = 0;
        while (j < N_REQ && r->f.req[j].ref.index != q[i].req_index)
            j++;
        RS_CHECK(j < N_REQ);
        int decode = q[i].n_tokens == 1 && q[i].want_logits; /* the planner's "one left" */
        n_decode += (uint32_t)decode;
        established += decode && r->decoded[j]++ > 0; /* its second output came before */
        prefill += decode ? 0 : q[i].n_tokens;
        uint32_t end = q[i].pos0 + q[i].n_tokens, in_prompt = 0;
        if (q[i].pos0 < PROMPT)
            in_prompt = (end < PROMPT ? end : PROMPT) - q[i].pos0;
        tail_prompt += decode ? in_prompt : 0;
        r->prompt_left[j] -= in_prompt;
    }
    uint32_t want = allowed(k, r->s->budget.min_prefill, n_decode);
    /* a burst (fair shares off: every stream decodes): the token budget alone */
    int lift = r->s->budget.burst_lift && k->max_step_ms > 0 && k->steps > 0 &&
               waiters > established;
    if (lift) {
        want = MAX_TOKENS - n_decode;
        r->lifted++;
    }
    uint64_t got = sfx_metric(&r->f, RS_M_SCH_PREFILL_BUDGET_LAST);
    RS_CHECK_MSG(got == want, "case %u, %u decodes: budget %llu, the model allows %u",
                 (unsigned)(k - cases_tab), n_decode, (unsigned long long)got, want);
    RS_CHECK_MSG(prefill <= want, "%u prefill tokens planned over a budget of %u", prefill, want);
    if (waiting_prompt - tail_prompt >= want) { /* enough prompt waited to fill it */
        RS_CHECK_MSG(prefill == want, "case %u: %u prefill tokens planned, budget %u",
                     (unsigned)(k - cases_tab), prefill, want);
        r->seen[k - cases_tab] += !lift;
    }
    return 0;
}

/* 8 requests submitted together, planned to the end under the cost models cycled from
 * cases_tab[first]. */
static int run_budget(struct run *r, uint32_t burst_lift, uint32_t first)
{
    struct rs_pipe_config c;
    char err[256];
    memset(r, 0, sizeof(*r));
    int rc = sfx_config(&c, 512, 256, 8, MAX_TOKENS);
    if (rc != 0 || sfx_open(&r->f, &c) != 0)
        return rc != 0 ? rc : 1;
    RS_CHECK(rs_pipe_open(&r->f.cfg, RS_PIPE_STAGE_SCHEDULERD, &r->sp, err, sizeof(err)) == RS_OK);
    RS_CHECK(sched_create(r->sp, NULL, &r->s) == RS_OK && rs_role_ready(r->sp->role) == RS_OK);
    r->s->budget = (struct budget_opts){20.0, 8, 0, burst_lift};
    int32_t prompt[PROMPT];
    for (uint32_t i = 0; i < N_REQ; i++) {
        sfx_prompt(prompt, PROMPT, 0, 0, 2000 + i);
        RS_CHECK(sfx_submit(&r->f, prompt, PROMPT, 24, 0) == (int)i);
        rs_pipe_req_at(r->f.tok, r->f.req[i].ref.index)->owner[0] = (uint8_t)(1 + i);
        r->prompt_left[i] = PROMPT;
    }
    uint64_t limited = 0;
    struct sfx_batch bt;
    for (uint32_t step = 0;; step++) {
        const struct cost_case *k = &cases_tab[(step / 2 + first) % N_CASES];
        publish(&r->f, k);
        r->s->budget.max_step_ms = k->max_step_ms;
        RS_CHECK(step < 400 && sched_work(r->s, 1) >= 0 && sfx_audit(&r->f) == 0);
        int got = sfx_take(&r->f, &bt);
        RS_CHECK_MSG(got >= 0 && sfx_reap(&r->f) >= 0, "%s", r->f.why);
        if (got == 0)
            break;
        RS_CHECK(check_step(r, bt.b, k) == 0);
        RS_CHECK(sfx_answer(&r->f, &bt) == 0);
    }
    limited = sfx_metric(&r->f, RS_M_SCH_BUDGET_LIMITED);
    RS_CHECK(r->s->n_run == 0 && r->s->n_heap == 0);
    for (uint32_t i = 0; i < N_REQ; i++)
        RS_CHECK_MSG(r->f.req[i].done && r->f.req[i].n_out == 24, "request %u: %u outputs", i,
                     r->f.req[i].n_out);
    RS_CHECK(limited > 0);
    RS_CHECK_MSG(sfx_metric(&r->f, RS_M_SCH_BUDGET_LIFTED) == r->lifted,
                 "%llu steps counted lifted, %u planned so",
                 (unsigned long long)sfx_metric(&r->f, RS_M_SCH_BUDGET_LIFTED), r->lifted);
    sched_destroy(&r->s);
    rs_pipe_close(&r->sp);
    sfx_close(&r->f);
    return 0;
}

static int test_planned_prefill_follows_the_measured_cost(void)
{
    static struct run r;
    RS_CHECK(run_budget(&r, 0, 0) == 0);
    for (uint32_t k = 0; k < N_CASES; k++) /* every case met a step with prompts waiting */
        RS_CHECK_MSG(r.seen[k] > 0, "case %u never planned with prompts waiting", k);
    RS_CHECK(r.lifted == 0);
    return 0;
}

static int test_a_burst_lifts_the_budget_while_clients_outnumber_streams(void)
{
    static struct run r;
    /* from case 3: the steps after the lift meet models whose budget binds */
    RS_CHECK(run_budget(&r, 1, 3) == 0);
    uint32_t budgeted = 0;
    for (uint32_t k = 0; k < N_CASES; k++)
        budgeted += r.seen[k];
    RS_CHECK_MSG(r.lifted > 0 && budgeted > 0, "%u steps lifted, %u budgeted with prompts waiting",
                 r.lifted, budgeted);
    return 0;
}


/* Plans and answers one step; its prefill budget in *budget. */
static int one_step(struct run *r, uint64_t *budget)
{
    struct sfx_batch bt;
    RS_CHECK(sched_work(r->s, 1) >= 0 && sfx_audit(&r->f) == 0);
    int got = sfx_take(&r->f, &bt);
    RS_CHECK_MSG(got > 0 && sfx_reap(&r->f) >= 0, "%s", r->f.why);
    *budget = sfx_metric(&r->f, RS_M_SCH_PREFILL_BUDGET_LAST);
    RS_CHECK(sfx_answer(&r->f, &bt) == 0);
    return 0;
}

/* Submits n requests of client `owner` with prompts of len tokens; 0 or -1. */
static int submit_as(struct run *r, uint8_t owner, uint32_t n, uint32_t len, uint32_t seed)
{
    int32_t prompt[PROMPT];
    for (uint32_t i = 0; i < n; i++) {
        sfx_prompt(prompt, len, 0, 0, seed + i);
        int idx = sfx_submit(&r->f, prompt, len, 200, 0);
        RS_CHECK(idx >= 0);
        rs_pipe_req_at(r->f.tok, r->f.req[idx].ref.index)->owner[0] = owner;
    }
    return 0;
}

static int test_one_clients_flood_never_lifts_the_budget_over_another(void)
{
    static struct run r;
    struct rs_pipe_config c;
    char err[256];
    uint64_t budget = 0;
    memset(&r, 0, sizeof(r));
    int rc = sfx_config(&c, 512, 256, 8, MAX_TOKENS);
    if (rc != 0 || sfx_open(&r.f, &c) != 0)
        return rc != 0 ? rc : 1;
    RS_CHECK(rs_pipe_open(&r.f.cfg, RS_PIPE_STAGE_SCHEDULERD, &r.sp, err, sizeof(err)) == RS_OK);
    RS_CHECK(sched_create(r.sp, NULL, &r.s) == RS_OK && rs_role_ready(r.sp->role) == RS_OK);
    r.s->budget = (struct budget_opts){20.0, 8, 0, 1};
    publish(&r.f, &cases_tab[0]);
    RS_CHECK(submit_as(&r, 1, 1, 16, 3000) == 0); /* client 1's stream, past its 2nd output */
    for (int i = 0; i < 3; i++)
        RS_CHECK(one_step(&r, &budget) == 0);
    uint64_t lifted = sfx_metric(&r.f, RS_M_SCH_BUDGET_LIFTED);
    RS_CHECK(submit_as(&r, 2, 6, PROMPT, 3100) == 0); /* client 2 floods */
    for (int i = 0; i < 2; i++) { /* 2 x 175 tokens: none of the flood is decoding yet */
        RS_CHECK(one_step(&r, &budget) == 0);
        RS_CHECK_MSG(budget == allowed(&cases_tab[0], 8, 1), "flood step %d: budget %llu", i,
                     (unsigned long long)budget);
    }
    RS_CHECK(sfx_metric(&r.f, RS_M_SCH_BUDGET_LIFTED) == lifted);
    RS_CHECK(submit_as(&r, 3, 1, 64, 3200) == 0 && submit_as(&r, 4, 1, 64, 3300) == 0);
    RS_CHECK(one_step(&r, &budget) == 0); /* clients 2, 3, 4 wait beside one stream */
    RS_CHECK_MSG(budget == MAX_TOKENS - 1, "three clients waiting: budget %llu",
                 (unsigned long long)budget);
    RS_CHECK(sfx_metric(&r.f, RS_M_SCH_BUDGET_LIFTED) == lifted + 1);
    sched_destroy(&r.s);
    rs_pipe_close(&r.sp);
    sfx_close(&r.f);
    return 0;
}

static int test_budget_arithmetic_bounds(void)
{
    struct budget_opts o = {10.0, 16, 0, 0};
    struct rs_step_cost_fit f = {1000000, 200000000, 400000000}; /* 1 ms, 200 us, 400 us */
    RS_CHECK(budget_prefill(&o, &f, 0, 1000) == 45);  /* (10 - 1) ms / 200 us */
    RS_CHECK(budget_prefill(&o, &f, 10, 1000) == 25); /* (10 - 1 - 4) ms / 200 us */
    RS_CHECK(budget_prefill(&o, &f, 30, 1000) == 16); /* decodes alone over: the minimum */
    RS_CHECK(budget_prefill(&o, &f, 0, 20) == 20);    /* the token budget binds */
    RS_CHECK(budget_prefill(&o, &f, 30, 10) == 10);   /* even below the minimum */
    f.prefill_ps = 0;                                 /* no prefill cost known: no budget */
    RS_CHECK(budget_prefill(&o, &f, 0, 777) == 777);
    o.max_step_ms = 0;
    f.prefill_ps = 200000000;
    RS_CHECK(budget_prefill(&o, &f, 0, 777) == 777);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_planned_prefill_follows_the_measured_cost),
    RS_TEST(test_a_burst_lifts_the_budget_while_clients_outnumber_streams),
    RS_TEST(test_one_clients_flood_never_lifts_the_budget_over_another),
    RS_TEST(test_budget_arithmetic_bounds),
};
RS_TEST_MAIN(cases)

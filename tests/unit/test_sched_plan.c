/* SPDX-License-Identifier: MIT */
/*
 * schedulerd's planner in process over a real segment: this test plays
 * tokenizerd, launcherd (tokens at no cost, every batch checked against the
 * lists, block tables and a simulated K/V cache) and postprocd (outputs
 * checked, records freed), and calls the scheduler's pass directly. Covers
 * prefill then decode, the per-step budgets, chunked prefill mixed with
 * decodes, preemption order under FCFS and priority, prefix-cache hits (also
 * between running requests), cancels, a launcher restart and the context end.
 */
#include <stdlib.h>
#include <string.h>

#include "ipc/pipeline_batch.h"
#include "ipc/pipeline_kv.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "schedulerd/sched.h"
#include "tests/unit/sched_fixture.h"

struct px {
    struct sfx f;
    struct rs_pipe *sp;
    struct sched *s;
};

static int px_open(struct px *x, struct rs_pipe_config *c)
{
    char err[256];
    memset(x, 0, sizeof(*x));
    if (sfx_open(&x->f, c) != 0)
        return 1;
    if (rs_pipe_open(&x->f.cfg, RS_PIPE_STAGE_SCHEDULERD, &x->sp, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "open: %s\n", err);
        return 1;
    }
    if (sched_create(x->sp, NULL, &x->s) != RS_OK || rs_role_ready(x->sp->role) != RS_OK)
        return 1;
    return 0;
}

static void px_close(struct px *x)
{
    sched_destroy(&x->s);
    rs_pipe_close(&x->sp);
    sfx_close(&x->f);
}

/* One scheduler pass, then the audit and the pool's own invariants. */
static int px_work(struct px *x)
{
    if (sched_work(x->s, 1) < 0 || kv_block_check(&x->s->kv) != RS_OK)
        return -1;
    return sfx_audit(&x->f);
}

/* Pass, take the batch (1) or find none (0); -1 on a failed check. */
static int px_plan(struct px *x, struct sfx_batch *bt)
{
    if (px_work(x) != 0)
        return -1;
    return sfx_take(&x->f, bt);
}

/* Runs steps until nothing is left; returns the steps run or -1. */
static int px_run(struct px *x, int max_steps)
{
    struct sfx_batch bt;
    for (int step = 0; step < max_steps; step++) {
        int got = px_plan(x, &bt);
        if (got < 0 || sfx_reap(&x->f) < 0)
            return -1;
        if (got == 0)
            return x->s->n_run == 0 && x->s->n_heap == 0 ? step : -1;
        if (sfx_answer(&x->f, &bt) != 0)
            return -1;
    }
    return -1;
}

static int submit(struct px *x, uint32_t n, uint32_t shared, uint32_t family, uint32_t max_tokens,
                  int32_t prio)
{
    int32_t prompt[1024];
    sfx_prompt(prompt, n, shared, family, x->f.n_req + 1000);
    return sfx_submit(&x->f, prompt, n, max_tokens, prio);
}

static const struct rs_pipe_batch_seq *seq_of(const struct sfx_batch *bt, uint32_t idx)
{
    const struct rs_pipe_batch_seq *s = rs_pipe_batch_seqs(bt->b);
    for (uint32_t i = 0; i < bt->b->n_seqs; i++)
        if (s[i].req_index == idx)
            return &s[i];
    return NULL;
}

static int test_prefill_then_decodes_to_the_end(void)
{
    struct rs_pipe_config c;
    struct px x;
    int rc = sfx_config(&c, 128, 64, 8, 256);
    if (rc != 0 || (rc = px_open(&x, &c)) != 0)
        return rc;
    const uint32_t len[3] = {20, 33, 7};
    for (int i = 0; i < 3; i++)
        RS_CHECK(submit(&x, len[i], 0, 0, 5, 0) == i);
    struct sfx_batch bt;
    RS_CHECK(px_plan(&x, &bt) == 1 && bt.b->n_seqs == 3 && bt.b->n_tokens == 60);
    for (int i = 0; i < 3; i++) {
        const struct rs_pipe_batch_seq *q = seq_of(&bt, x.f.req[i].ref.index);
        RS_CHECK(q && q->pos0 == 0 && q->n_tokens == len[i] && q->want_logits && !q->out_index);
    }
    RS_CHECK(sfx_answer(&x.f, &bt) == 0);
    RS_CHECK(px_plan(&x, &bt) == 1 && bt.b->n_seqs == 3 && bt.b->n_tokens == 3);
    for (int i = 0; i < 3; i++) {
        const struct rs_pipe_batch_seq *q = seq_of(&bt, x.f.req[i].ref.index);
        RS_CHECK(q && q->pos0 == len[i] && q->n_tokens == 1 && q->out_index == 1);
    }
    RS_CHECK(sfx_answer(&x.f, &bt) == 0);
    RS_CHECK_MSG(px_run(&x, 20) == 3, "%s", x.f.why);
    for (int i = 0; i < 3; i++)
        RS_CHECK(x.f.req[i].done && x.f.req[i].reason == RS_WIRE_FINISH_LENGTH &&
                 x.f.req[i].n_out == 5);
    RS_CHECK(sfx_metric(&x.f, RS_M_SCH_STEPS) == 5 && sfx_metric(&x.f, RS_M_SCH_FINISHED) == 3);
    RS_CHECK(sfx_metric(&x.f, RS_M_SCH_PREFILL_TOKENS) == 60);
    RS_CHECK(sfx_metric(&x.f, RS_M_SCH_DECODE_TOKENS) == 12);
    RS_CHECK(sfx_metric(&x.f, RS_M_SCH_KV_USED) == 0 && x.s->kv.n_used == 0);
    px_close(&x);
    return 0;
}

static int test_budgets_cap_every_step_and_decodes_come_first(void)
{
    struct rs_pipe_config c;
    struct px x;
    int rc = sfx_config(&c, 128, 256, 4, 32);
    if (rc != 0 || (rc = px_open(&x, &c)) != 0)
        return rc;
    for (int i = 0; i < 10; i++)
        RS_CHECK(submit(&x, 40, 0, 0, 3, 0) >= 0);
    struct sfx_batch bt;
    int steps = 0, got;
    while ((got = px_plan(&x, &bt)) == 1) {
        RS_CHECK(bt.b->n_seqs <= 4 && bt.b->n_tokens <= 32);
        const struct rs_pipe_batch_seq *q = rs_pipe_batch_seqs(bt.b);
        int seen_chunk = 0;
        for (uint32_t i = 0; i < bt.b->n_seqs; i++) {
            int decode = q[i].n_tokens == 1 && q[i].want_logits && q[i].out_index > 0;
            RS_CHECK(!(decode && seen_chunk)); /* running decodes before prefill chunks */
            seen_chunk |= !decode;
        }
        RS_CHECK(sfx_answer(&x.f, &bt) == 0 && sfx_reap(&x.f) >= 0);
        RS_CHECK(++steps < 200);
    }
    RS_CHECK_MSG(got == 0 && sfx_reap(&x.f) >= 0, "%s", x.f.why);
    for (int i = 0; i < 10; i++)
        RS_CHECK(x.f.req[i].done && x.f.req[i].n_out == 3);
    RS_CHECK(x.f.max_seqs_seen == 4 && x.f.max_tokens_seen == 32);
    px_close(&x);
    return 0;
}

static int test_chunked_prefill_runs_beside_decodes(void)
{
    struct rs_pipe_config c;
    struct px x;
    int rc = sfx_config(&c, 256, 64, 8, 16);
    if (rc != 0 || (rc = px_open(&x, &c)) != 0)
        return rc;
    int a = submit(&x, 5, 0, 0, 30, 0);
    struct sfx_batch bt;
    RS_CHECK(px_plan(&x, &bt) == 1 && sfx_answer(&x.f, &bt) == 0);
    int b = submit(&x, 100, 0, 0, 2, 0);
    uint32_t pos = 0;
    while (pos < 100) {
        RS_CHECK(px_plan(&x, &bt) == 1);
        const struct rs_pipe_batch_seq *qa = seq_of(&bt, x.f.req[a].ref.index);
        const struct rs_pipe_batch_seq *qb = seq_of(&bt, x.f.req[b].ref.index);
        RS_CHECK(qa && qa->n_tokens == 1 && qb && qb->pos0 == pos); /* a is never starved */
        RS_CHECK(qb->n_tokens == (100 - pos < 15 ? 100 - pos : 15));
        RS_CHECK(qb->want_logits == (pos + qb->n_tokens == 100));
        pos += qb->n_tokens;
        RS_CHECK(sfx_answer(&x.f, &bt) == 0);
    }
    RS_CHECK_MSG(px_run(&x, 100) > 0, "%s", x.f.why);
    RS_CHECK(x.f.req[a].n_out == 30 && x.f.req[b].n_out == 2);
    px_close(&x);
    return 0;
}

static int test_preemption_takes_the_latest_arrival(void)
{
    struct rs_pipe_config c;
    struct px x;
    int rc = sfx_config(&c, 64, 8, 4, 256);
    if (rc != 0 || (rc = px_open(&x, &c)) != 0)
        return rc;
    for (int i = 0; i < 3; i++)
        RS_CHECK(submit(&x, 16, 0, 0, 40, 0) == i);
    RS_CHECK_MSG(px_run(&x, 400) > 0, "%s", x.f.why);
    RS_CHECK(sfx_metric(&x.f, RS_M_SCH_PREEMPTIONS) > 0);
    RS_CHECK(x.f.req[0].n_preempted == 0 && x.f.req[2].n_preempted > 0);
    for (int i = 0; i < 3; i++)
        RS_CHECK(x.f.req[i].done && x.f.req[i].n_out == 40);
    px_close(&x);
    return 0;
}

static int test_priority_orders_admission_and_preemption(void)
{
    struct rs_pipe_config c;
    struct px x;
    int rc = sfx_config(&c, 64, 64, 1, 256);
    if (rc != 0)
        return rc;
    c.priority_policy = 1;
    if ((rc = px_open(&x, &c)) != 0)
        return rc;
    const int32_t prio[3] = {5, 1, 3};
    for (int i = 0; i < 3; i++)
        RS_CHECK(submit(&x, 8, 0, 0, 2, prio[i]) == i);
    const int order[3] = {1, 2, 0};
    struct sfx_batch bt;
    for (int k = 0; k < 3; k++) {
        RS_CHECK(px_plan(&x, &bt) == 1 && bt.b->n_seqs == 1);
        RS_CHECK(rs_pipe_batch_seqs(bt.b)[0].req_index == x.f.req[order[k]].ref.index);
        RS_CHECK(sfx_answer(&x.f, &bt) == 0); /* its prefill */
        RS_CHECK(px_plan(&x, &bt) == 1 && sfx_answer(&x.f, &bt) == 0); /* its decode */
    }
    RS_CHECK_MSG(px_run(&x, 10) >= 0, "%s", x.f.why);
    px_close(&x);

    /* an earlier request of lower priority is the victim when blocks run out */
    if ((rc = sfx_config(&c, 64, 5, 2, 256)) != 0)
        return rc;
    c.priority_policy = 1;
    if ((rc = px_open(&x, &c)) != 0)
        return rc;
    RS_CHECK(submit(&x, 16, 0, 0, 40, 9) == 0);
    RS_CHECK(submit(&x, 16, 0, 0, 40, 0) == 1);
    RS_CHECK_MSG(px_run(&x, 400) > 0, "%s", x.f.why);
    RS_CHECK(x.f.req[0].n_preempted > 0 && x.f.req[1].n_preempted == 0);
    RS_CHECK(x.f.req[0].n_out == 40 && x.f.req[1].n_out == 40);
    px_close(&x);
    return 0;
}

/* The record of fixture request i, as tokenizerd wrote it (the scheduler reads it later). */
static struct rs_pipe_req *rec_of(struct px *x, int i)
{
    return rs_pipe_req_at(x->f.tok, x->f.req[i].ref.index);
}

/*
 * One client's flood does not starve another: six requests of owner A,
 * then two of owner B, one running slot. Admission alternates between the
 * owners (A0 B0 A1 B1), FCFS within each, then A's rest.
 */
static int test_owners_take_turns_in_the_waiting_queue(void)
{
    struct rs_pipe_config c;
    struct px x;
    int rc = sfx_config(&c, 64, 64, 1, 256);
    if (rc != 0)
        return rc;
    if ((rc = px_open(&x, &c)) != 0)
        return rc;
    for (int i = 0; i < 8; i++) {
        RS_CHECK(submit(&x, 8, 0, 0, 2, 0) == i);
        rec_of(&x, i)->owner[0] = i < 6 ? 0xa : 0xb;
    }
    const int order[8] = {0, 6, 1, 7, 2, 3, 4, 5};
    struct sfx_batch bt;
    for (int k = 0; k < 8; k++) {
        RS_CHECK(px_plan(&x, &bt) == 1 && bt.b->n_seqs == 1);
        RS_CHECK_MSG(rs_pipe_batch_seqs(bt.b)[0].req_index == x.f.req[order[k]].ref.index,
                     "admission %d: record %u, expected request %d", k,
                     rs_pipe_batch_seqs(bt.b)[0].req_index, order[k]);
        RS_CHECK(sfx_answer(&x.f, &bt) == 0); /* its prefill */
        RS_CHECK(px_plan(&x, &bt) == 1 && sfx_answer(&x.f, &bt) == 0); /* its decode */
    }
    RS_CHECK_MSG(px_run(&x, 10) >= 0, "%s", x.f.why);
    px_close(&x);
    return 0;
}

/* Requests of owner byte `o` running (st SR_RUNNING) or waiting (SR_WAITING). */
static uint32_t owned(struct px *x, uint8_t o, uint8_t st)
{
    uint32_t n = 0;
    for (int i = 0; i < (int)x->f.n_req; i++)
        n += rec_of(x, i)->owner[0] == o && x->s->req[x->f.req[i].ref.index].st == st &&
             !x->f.req[i].done;
    return n;
}

/*
 * The running-slot cap (2 of 4 slots): owner A floods 8 requests while
 * nobody else waits and takes all 4 slots (a client alone is never held
 * back). Owner B then submits 3; they come between A's by round. When two
 * of A's end, B takes both slots (A, at its cap, is passed over though its
 * next request is ahead of B's second); once nothing of B waits, A goes
 * past its cap again. A's requests start in their own order and all 11
 * complete with their tokens checked.
 */
static int test_an_owner_at_its_running_cap_is_passed_over(void)
{
    struct rs_pipe_config c;
    struct px x;
    int rc = sfx_config(&c, 64, 64, 4, 256);
    if (rc != 0)
        return rc;
    if ((rc = px_open(&x, &c)) != 0)
        return rc;
    x.s->owner_cap = sched_owner_cap(4, 50);
    RS_CHECK(x.s->owner_cap == 2 && sched_owner_cap(4, 1) == 1 && sched_owner_cap(4, 100) == 0);
    for (int i = 0; i < 8; i++) {
        RS_CHECK(submit(&x, 8, 0, 0, 3 + (uint32_t)i % 2, 0) == i);
        rec_of(&x, i)->owner[0] = 0xa;
    }
    struct sfx_batch bt;
    RS_CHECK(px_plan(&x, &bt) == 1 && bt.b->n_seqs == 4 && owned(&x, 0xa, SR_RUNNING) == 4);
    RS_CHECK(sfx_answer(&x.f, &bt) == 0);
    for (int i = 8; i < 11; i++) {
        RS_CHECK(submit(&x, 8, 0, 0, 3, 0) == i);
        rec_of(&x, i)->owner[0] = 0xb;
    }
    int b_started = 0, a_over_cap_late = 0, a_next = 4;
    for (int step = 0; step < 60; step++) {
        int got = px_plan(&x, &bt);
        RS_CHECK_MSG(got >= 0, "%s", x.f.why);
        uint32_t a = owned(&x, 0xa, SR_RUNNING), b = owned(&x, 0xb, SR_RUNNING);
        if (!b_started && b > 0) {
            RS_CHECK_MSG(a == 2 && b == 2, "B admitted beside A: A runs %u, B %u", a, b);
            b_started = 1;
        }
        a_over_cap_late |= b_started && owned(&x, 0xb, SR_WAITING) == 0 && a > 2;
        for (int i = 4; i < 8; i++) /* A's waiting requests start in their order */
            if (i >= a_next && x.s->req[x.f.req[i].ref.index].st == SR_RUNNING) {
                RS_CHECK_MSG(i == a_next, "A's request %d started before %d", i, a_next);
                a_next++;
            }
        RS_CHECK_MSG(sfx_reap(&x.f) >= 0, "%s", x.f.why);
        if (got == 0)
            break;
        RS_CHECK(sfx_answer(&x.f, &bt) == 0);
    }
    RS_CHECK(b_started && a_over_cap_late);
    for (int i = 0; i < 11; i++)
        RS_CHECK_MSG(x.f.req[i].n_out == (i < 8 ? 3 + (uint32_t)i % 2 : 3),
                     "request %d made %u tokens", i, x.f.req[i].n_out);
    RS_CHECK(a_next == 8 && x.s->n_run == 0 && x.s->n_heap == 0);
    px_close(&x);
    return 0;
}

/*
 * The fair level from its definition, by trying every level in turn from
 * the smallest demand up: the largest lam such that every level from there
 * to lam keeps the owners above it (demand > level) within (factor - 1)
 * times the cost of a step of the others' decodes; the smallest demand when
 * even that does not; UINT32_MAX when no owner is above it.
 */
static uint32_t level_by_search(const uint32_t *m, uint32_t k, double factor, double fixed_ns,
                                double decode_ps)
{
    uint32_t max = 0, min = UINT32_MAX;
    for (uint32_t i = 0; i < k; i++) {
        max = m[i] > max ? m[i] : max;
        min = m[i] < min ? m[i] : min;
    }
    if (k < 2 || factor <= 0 || decode_ps <= 0)
        return UINT32_MAX;
    uint32_t ok = min;
    for (uint32_t lam = min; lam <= max; lam++) {
        double heavy = 0, light = 0;
        uint32_t n_heavy = 0;
        for (uint32_t i = 0; i < k; i++) {
            if (m[i] > lam) {
                heavy += lam;
                n_heavy++;
            } else {
                light += m[i];
            }
        }
        if (n_heavy == 0)
            return UINT32_MAX;
        if (heavy * decode_ps > (factor - 1) * (fixed_ns * 1000.0 + light * decode_ps))
            break;
        ok = lam;
    }
    return ok;
}

/* share_level_of against the search over random owners, demands, factors and costs. */
static int test_fair_level_is_the_largest_that_keeps_the_others_within_the_factor(void)
{
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    uint32_t limited = 0, free_steps = 0;
    for (int t = 0; t < 20000; t++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t k = 1 + (uint32_t)(rng >> 60), m[16], copy[16];
        for (uint32_t i = 0; i < k; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            m[i] = 1 + (uint32_t)((rng >> 33) % ((rng >> 62) == 0 ? 64 : 4));
            copy[i] = m[i];
        }
        static const double factors[] = {0, 1, 1.5, 2, 3, 8};
        struct rs_step_cost_fit fit = {.fixed_ns = (rng >> 20) % 3 == 0 ? 0 : (rng >> 24) % 200000,
                                       .decode_ps = 1000000 + (rng >> 40) % 50000000};
        double f = factors[(rng >> 8) % 6];
        uint32_t want = level_by_search(m, k, f, (double)fit.fixed_ns, (double)fit.decode_ps);
        uint32_t got = share_level_of(copy, k, f, &fit);
        RS_CHECK_MSG(got == want, "case %d: %u owners (%u, %u, ..), factor %g, fixed %llu ns, "
                     "decode %llu ps: level %u, search says %u", t, k, m[0], k > 1 ? m[1] : 0, f,
                     (unsigned long long)fit.fixed_ns, (unsigned long long)fit.decode_ps, got,
                     want);
        limited += got != UINT32_MAX;
        free_steps += got == UINT32_MAX && k > 1 && f > 0;
    }
    struct rs_step_cost_fit none = {0};
    uint32_t two[2] = {1, 50};
    RS_CHECK(share_level_of(two, 2, 2.0, &none) == UINT32_MAX); /* no fit: no limit */
    RS_CHECK(limited > 1000 && free_steps > 1000); /* both outcomes were exercised */
    return 0;
}

/* Decodes of owner byte o in the batch. */
static uint32_t decodes_of(struct px *x, const struct sfx_batch *bt, uint8_t o)
{
    const struct rs_pipe_batch_seq *q = rs_pipe_batch_seqs(bt->b);
    uint32_t n = 0;
    for (uint32_t i = 0; i < bt->b->n_seqs; i++)
        n += q[i].n_tokens == 1 && rs_pipe_req_at(x->f.tok, q[i].req_index)->owner[0] == o;
    return n;
}

/*
 * Owner A runs 6 streams beside owner B's one, with a cost model whose
 * fixed cost is small (a CPU) or large (a GPU), at factors 2 and 0 (off).
 * Each step A decodes at most the fair level the definition gives for the
 * step's demands (1 with the small fixed cost and factor 2: B's step may
 * cost twice its own decode), and once B is done A decodes all it has;
 * with the large fixed cost or factor 0 nothing is deferred. Every request
 * completes with its tokens checked by the fixture.
 */
static int test_a_busy_owner_defers_decodes_beside_a_light_one(void)
{
    static const struct {
        uint64_t fixed_ns;
        double factor;
    } cases[] = {{0, 2.0}, {1000, 2.0}, {500000, 2.0}, {0, 0.0}};
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct rs_pipe_config c;
        struct px x;
        int rc = sfx_config(&c, 256, 64, 8, 256);
        if (rc != 0 || (rc = px_open(&x, &c)) != 0)
            return rc;
        x.s->budget.fair_factor = cases[k].factor;
        struct rs_metrics_block *lm = &x.f.lau->metrics->stage[RS_PIPE_STAGE_LAUNCHERD];
        rs_gauge_set(&lm->counter[RS_M_LAU_COST_FIXED_NS], cases[k].fixed_ns);
        rs_gauge_set(&lm->counter[RS_M_LAU_COST_PREFILL_PS], 1000000);
        rs_gauge_set(&lm->counter[RS_M_LAU_COST_DECODE_PS], 1000000);
        rs_gauge_set(&lm->counter[RS_M_LAU_COST_STEPS], 9);
        for (int i = 0; i < 7; i++) {
            RS_CHECK(submit(&x, 8, 0, 0, i < 6 ? 12 : 6, 0) == i);
            rec_of(&x, i)->owner[0] = i < 6 ? 0xa : 0xb;
        }
        struct sfx_batch bt;
        uint32_t beside = 0, alone_full = 0;
        for (int step = 0; step < 200; step++) {
            int got = px_plan(&x, &bt);
            RS_CHECK_MSG(got >= 0 && sfx_reap(&x.f) >= 0, "%s", x.f.why);
            if (got == 0)
                break;
            uint32_t m[2] = {0, 0}; /* the step's demands: decodes planned or deferred */
            for (uint32_t i = 0; i < x.s->n_run; i++) {
                const struct sreq *sr = &x.s->req[x.s->run[i]];
                if (sr->len - sr->n_computed == 1)
                    m[rs_pipe_req_at(x.f.tok, x.s->run[i])->owner[0] == 0xb]++;
            }
            uint32_t a = decodes_of(&x, &bt, 0xa), b = decodes_of(&x, &bt, 0xb);
            uint32_t lvl = m[0] > 0 && m[1] > 0
                               ? level_by_search(m, 2, cases[k].factor, (double)cases[k].fixed_ns,
                                                 1e6)
                               : UINT32_MAX;
            uint32_t want_a = lvl < m[0] ? lvl : m[0];
            RS_CHECK_MSG(a == want_a && b == m[1], "case %zu step %d: A decoded %u of %u, B %u"
                         " of %u; level %u", k, step, a, m[0], b, m[1], lvl);
            beside += m[0] > 0 && m[1] > 0;
            alone_full += m[1] == 0 && m[0] > 1 && a == m[0];
            RS_CHECK(sfx_answer(&x.f, &bt) == 0);
        }
        uint64_t deferred = sfx_metric(&x.f, RS_M_SCH_FAIR_DEFERRED);
        RS_CHECK_MSG((deferred > 0) == (k < 2), "case %zu: %llu decodes deferred", k,
                     (unsigned long long)deferred);
        RS_CHECK(beside > 0 && alone_full > 0);
        for (int i = 0; i < 7; i++)
            RS_CHECK_MSG(x.f.req[i].n_out == (i < 6 ? 12u : 6u), "request %d made %u tokens",
                         i, x.f.req[i].n_out);
        RS_CHECK(x.s->n_run == 0 && x.s->n_heap == 0);
        px_close(&x);
    }
    return 0;
}

/*
 * A stream nobody reads (postprocd marked its client unreachable and sent
 * nothing) pauses FAIR_PAUSE_BACKLOG tokens ahead, keeping its slot and KV
 * blocks, while another request runs to its end; once the client reads
 * again it resumes and completes.
 */
static int test_a_stream_nobody_reads_pauses_with_its_kv_kept(void)
{
    struct rs_pipe_config c;
    struct px x;
    int rc = sfx_config(&c, 256, 64, 2, 256);
    if (rc != 0)
        return rc;
    if ((rc = px_open(&x, &c)) != 0)
        return rc;
    RS_CHECK(submit(&x, 8, 0, 0, 150, 0) == 0);
    rec_of(&x, 0)->flags |= RS_PIPE_F_STREAM;
    rec_of(&x, 0)->unreachable_ns = 1;
    RS_CHECK(submit(&x, 8, 0, 0, 100, 0) == 1);
    rec_of(&x, 1)->owner[0] = 1;
    struct sfx_batch bt;
    int got = 1;
    for (int step = 0; step < 400 && got == 1; step++) {
        got = px_plan(&x, &bt);
        RS_CHECK_MSG(got >= 0 && sfx_reap(&x.f) >= 0, "%s", x.f.why);
        if (got == 1)
            RS_CHECK(sfx_answer(&x.f, &bt) == 0);
    }
    uint32_t idx = x.f.req[0].ref.index, len = 0;
    RS_CHECK(rs_arena_len(x.f.tok->tokens, x.f.req[0].ref, &len) == RS_OK);
    RS_CHECK_MSG(len - 8 == FAIR_PAUSE_BACKLOG, "the unread stream made %u tokens", len - 8);
    RS_CHECK(x.f.req[1].n_out == 100);
    RS_CHECK(x.s->n_run == 1 && x.s->req[idx].slot != SCHED_NONE && x.s->req[idx].n_blocks > 0);
    rec_of(&x, 0)->unreachable_ns = 0; /* the client reads again */
    RS_CHECK_MSG(px_run(&x, 400) > 0, "%s", x.f.why);
    RS_CHECK(x.f.req[0].n_out == 150);
    px_close(&x);
    return 0;
}

static int test_prefix_hit_skips_cached_blocks(void)
{
    struct rs_pipe_config c;
    struct px x;
    int rc = sfx_config(&c, 256, 64, 8, 256);
    if (rc != 0 || (rc = px_open(&x, &c)) != 0)
        return rc;
    RS_CHECK(submit(&x, 70, 64, 1, 2, 0) == 0);
    RS_CHECK_MSG(px_run(&x, 10) == 2, "%s", x.f.why);
    RS_CHECK(x.s->kv.n_idle == 4); /* its 4 full blocks stay cached after it ended */
    int b = submit(&x, 74, 64, 1, 2, 0);
    struct sfx_batch bt;
    RS_CHECK(px_plan(&x, &bt) == 1 && bt.b->n_seqs == 1);
    const struct rs_pipe_batch_seq *q = seq_of(&bt, x.f.req[b].ref.index);
    RS_CHECK(q && q->pos0 == 64 && q->n_tokens == 10 && q->want_logits);
    RS_CHECK(sfx_answer(&x.f, &bt) == 0);
    RS_CHECK_MSG(px_run(&x, 10) > 0, "%s", x.f.why);
    RS_CHECK(x.f.req[b].n_cached == 64 && x.f.req[0].n_cached == 0);
    RS_CHECK(sfx_metric(&x.f, RS_M_SCH_PREFIX_QUERY) == 70 + 74);
    RS_CHECK(sfx_metric(&x.f, RS_M_SCH_PREFIX_HIT) == 64);
    px_close(&x);
    return 0;
}

static int test_whole_prompt_cached_still_computes_its_last_block(void)
{
    struct rs_pipe_config c;
    struct px x;
    int rc = sfx_config(&c, 128, 64, 8, 256);
    if (rc != 0 || (rc = px_open(&x, &c)) != 0)
        return rc;
    RS_CHECK(submit(&x, 48, 48, 2, 2, 0) == 0);
    RS_CHECK_MSG(px_run(&x, 10) == 2, "%s", x.f.why);
    int b = submit(&x, 48, 48, 2, 2, 0); /* the same 48 tokens: 3 full blocks cached */
    struct sfx_batch bt;
    RS_CHECK(px_plan(&x, &bt) == 1);
    const struct rs_pipe_batch_seq *q = seq_of(&bt, x.f.req[b].ref.index);
    RS_CHECK(q && q->pos0 == 32 && q->n_tokens == 16 && q->want_logits);
    RS_CHECK(sfx_answer(&x.f, &bt) == 0);
    RS_CHECK_MSG(px_run(&x, 10) > 0, "%s", x.f.why);
    RS_CHECK(x.f.req[b].n_cached == 32);
    px_close(&x);
    return 0;
}

static int test_running_requests_share_prefix_blocks(void)
{
    struct rs_pipe_config c;
    struct px x;
    int rc = sfx_config(&c, 256, 64, 8, 256);
    if (rc != 0 || (rc = px_open(&x, &c)) != 0)
        return rc;
    RS_CHECK(submit(&x, 66, 64, 3, 20, 0) == 0);
    struct sfx_batch bt;
    RS_CHECK(px_plan(&x, &bt) == 1 && sfx_answer(&x.f, &bt) == 0);
    int b = submit(&x, 80, 64, 3, 20, 0);
    RS_CHECK(px_plan(&x, &bt) == 1);
    const struct rs_pipe_batch_seq *q = seq_of(&bt, x.f.req[b].ref.index);
    RS_CHECK(q && q->pos0 == 64);
    uint32_t a_slot = x.s->req[x.f.req[0].ref.index].slot, b_slot = q->run_slot;
    for (int k = 0; k < 4; k++) /* the same physical blocks, shared by two running tables */
        RS_CHECK(rs_pipe_kvrow_at(x.sp, a_slot)->blocks[k] ==
                 rs_pipe_kvrow_at(x.sp, b_slot)->blocks[k]);
    RS_CHECK(x.s->kv.n_used == 5 + 1); /* a: 5 blocks; b: 4 shared + 1 of its own */
    RS_CHECK(sfx_answer(&x.f, &bt) == 0);
    RS_CHECK_MSG(px_run(&x, 100) > 0, "%s", x.f.why);
    RS_CHECK(x.f.req[0].n_out == 20 && x.f.req[b].n_out == 20);
    px_close(&x);
    return 0;
}

static int test_cancels_free_blocks_before_the_next_step(void)
{
    struct rs_pipe_config c;
    struct px x;
    int rc = sfx_config(&c, 128, 64, 2, 256);
    if (rc != 0 || (rc = px_open(&x, &c)) != 0)
        return rc;
    for (int i = 0; i < 3; i++)
        RS_CHECK(submit(&x, 20, 0, 0, 50, 0) == i);
    struct sfx_batch bt;
    uint32_t abort_word = rs_pipe_finish_make(RS_WIRE_FINISH_ABORT, RS_PIPE_STAGE_TOKENIZERD, 0);
    RS_CHECK(px_plan(&x, &bt) == 1 && bt.b->n_seqs == 2 && sfx_answer(&x.f, &bt) == 0);
    /* a waiting request cancelled: finished at once, never runs */
    struct rs_table_ref rc2 = x.f.req[2].ref;
    RS_CHECK(rs_pipe_finish_set(rs_pipe_req_at(x.sp, rc2.index), abort_word));
    sched_note_cancel(x.s, rc2.index, rc2.gen);
    uint32_t state;
    RS_CHECK(rs_table_get(x.sp->requests, rc2, &state, NULL) == RS_OK &&
             state == RS_PIPE_REQ_FINISHED);
    /* a running request cancelled while its batch is in flight: ends when the result lands */
    RS_CHECK(px_plan(&x, &bt) == 1 && bt.b->n_seqs == 2);
    struct rs_table_ref r0 = x.f.req[0].ref, r1 = x.f.req[1].ref;
    RS_CHECK(rs_pipe_finish_set(rs_pipe_req_at(x.sp, r0.index), abort_word));
    sched_note_cancel(x.s, r0.index, r0.gen);
    RS_CHECK(x.s->req[r0.index].st == SR_RUNNING); /* in flight: not yet */
    RS_CHECK(sfx_answer(&x.f, &bt) == 0);
    RS_CHECK(px_plan(&x, &bt) == 1 && bt.b->n_seqs == 1 && seq_of(&bt, r1.index));
    RS_CHECK(x.s->kv.n_used == 2 && sfx_metric(&x.f, RS_M_SCH_KV_USED) == 2);
    RS_CHECK(sfx_answer(&x.f, &bt) == 0);
    /* a running request cancelled between steps: its blocks are free before the next plan */
    RS_CHECK(result_poll(x.s) == 1 && x.s->inflight_id == 0);
    RS_CHECK(rs_pipe_finish_set(rs_pipe_req_at(x.sp, r1.index), abort_word));
    sched_note_cancel(x.s, r1.index, r1.gen);
    RS_CHECK(x.s->kv.n_used == 0 && x.s->n_run == 0);
    RS_CHECK(atomic_load(&rs_pipe_kvrow_at(x.sp, 0)->owner) == 0 &&
             atomic_load(&rs_pipe_kvrow_at(x.sp, 1)->owner) == 0);
    RS_CHECK(px_plan(&x, &bt) == 0 && sfx_reap(&x.f) == 3);
    for (int i = 0; i < 3; i++)
        RS_CHECK(x.f.req[i].reason == RS_WIRE_FINISH_ABORT);
    RS_CHECK(x.f.req[2].n_out == 0 && x.f.req[0].n_out == 2 && x.f.req[1].n_out == 3);
    px_close(&x);
    return 0;
}

static int test_launcher_restart_reprefills_with_identical_outputs(void)
{
    struct rs_pipe_config c;
    struct px x;
    int rc = sfx_config(&c, 128, 64, 4, 256);
    if (rc != 0 || (rc = px_open(&x, &c)) != 0)
        return rc;
    RS_CHECK(submit(&x, 40, 32, 4, 12, 0) == 0);
    RS_CHECK(submit(&x, 35, 32, 4, 12, 0) == 1);
    struct sfx_batch bt;
    for (int i = 0; i < 5; i++)
        RS_CHECK(px_plan(&x, &bt) == 1 && sfx_answer(&x.f, &bt) == 0);
    RS_CHECK(px_plan(&x, &bt) == 1);
    RS_CHECK(sfx_restart_launcher(&x.f) == 0); /* K/V gone; the batch it held comes again */
    RS_CHECK(sfx_take(&x.f, &bt) == 1 && bt.kv_lost);
    RS_CHECK(sfx_answer(&x.f, &bt) == 0 && x.f.kv_lost == 1);
    RS_CHECK(px_plan(&x, &bt) == 1 && bt.b->launcher_inc == rs_role_inc(x.f.lau->role));
    for (int i = 0; i < 2; i++) { /* prompt + the 5 outputs so far, from position 0 */
        const struct rs_pipe_batch_seq *q = seq_of(&bt, x.f.req[i].ref.index);
        RS_CHECK(q && q->pos0 == 0 && q->n_tokens == x.f.req[i].n_prompt + 5 && q->want_logits);
    }
    RS_CHECK(sfx_answer(&x.f, &bt) == 0);
    RS_CHECK_MSG(px_run(&x, 40) > 0, "%s", x.f.why);
    RS_CHECK(sfx_metric(&x.f, RS_M_SCH_LAUNCHER_RESETS) == 1);
    RS_CHECK(x.f.req[0].n_out == 12 && x.f.req[1].n_out == 12 && x.f.req[0].n_preempted == 1);
    px_close(&x);
    return 0;
}

static int test_context_end_finishes_with_length(void)
{
    struct rs_pipe_config c;
    struct px x;
    int rc = sfx_config(&c, 32, 16, 4, 256);
    if (rc != 0 || (rc = px_open(&x, &c)) != 0)
        return rc;
    RS_CHECK(submit(&x, 10, 0, 0, 1000, 0) == 0); /* the launcher would go on forever */
    RS_CHECK_MSG(px_run(&x, 100) > 0, "%s", x.f.why);
    RS_CHECK(x.f.req[0].reason == RS_WIRE_FINISH_LENGTH && x.f.req[0].n_out == 22);
    px_close(&x);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_prefill_then_decodes_to_the_end),
    RS_TEST(test_budgets_cap_every_step_and_decodes_come_first),
    RS_TEST(test_chunked_prefill_runs_beside_decodes),
    RS_TEST(test_preemption_takes_the_latest_arrival),
    RS_TEST(test_priority_orders_admission_and_preemption),
    RS_TEST(test_owners_take_turns_in_the_waiting_queue),
    RS_TEST(test_an_owner_at_its_running_cap_is_passed_over),
    RS_TEST(test_fair_level_is_the_largest_that_keeps_the_others_within_the_factor),
    RS_TEST(test_a_busy_owner_defers_decodes_beside_a_light_one),
    RS_TEST(test_a_stream_nobody_reads_pauses_with_its_kv_kept),
    RS_TEST(test_prefix_hit_skips_cached_blocks),
    RS_TEST(test_whole_prompt_cached_still_computes_its_last_block),
    RS_TEST(test_running_requests_share_prefix_blocks),
    RS_TEST(test_cancels_free_blocks_before_the_next_step),
    RS_TEST(test_launcher_restart_reprefills_with_identical_outputs),
    RS_TEST(test_context_end_finishes_with_length),
};
RS_TEST_MAIN(cases)

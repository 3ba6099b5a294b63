/* SPDX-License-Identifier: MIT */
/*
 * The step cost fit (common/step_cost.h) on synthetic steps: a model with a
 * fixed cost and distinct prefill and decode costs is recovered from varied
 * step shapes; the window forgets a host that changed; steps that are all
 * one shape (the terms cannot be told apart) still predict that shape and
 * never under-estimate a prefill token; a window of one shape borrows the
 * latest step of the shapes it lacks, until that step grows too old, and
 * not when that makes a token free; no samples, no fit.
 */
#include <stddef.h>
#include <stdint.h>

#include "common/step_cost.h"
#include "tests/rs_test.h"

/* Time of a step under a known model: ns, per-token costs in ps. */
static uint64_t truth(uint64_t fixed, uint64_t pre_ps, uint64_t dec_ps, uint32_t p, uint32_t d)
{
    return fixed + (pre_ps * p + dec_ps * d) / 1000u;
}

static uint64_t absdiff(uint64_t a, uint64_t b)
{
    return a > b ? a - b : b - a;
}

/* The fit is the model (fixed ns, per-token ps) within 1 %. */
static int check_fit(const struct rs_step_cost_fit *f, uint64_t fixed, uint64_t pre_ps,
                     uint64_t dec_ps)
{
    RS_CHECK_MSG(absdiff(f->fixed_ns, fixed) < fixed / 100, "fixed %llu ns",
                 (unsigned long long)f->fixed_ns);
    RS_CHECK_MSG(absdiff(f->prefill_ps, pre_ps) < pre_ps / 100, "prefill %llu ps",
                 (unsigned long long)f->prefill_ps);
    RS_CHECK_MSG(absdiff(f->decode_ps, dec_ps) < dec_ps / 100, "decode %llu ps",
                 (unsigned long long)f->decode_ps);
    return 0;
}

/* Steps of shapes (p, d) drawn from a small LCG: prefill 0..511, decodes 0..31. */
static void feed(struct rs_step_cost *c, uint64_t fixed, uint64_t pre_ps, uint64_t dec_ps,
                 uint32_t n, uint32_t seed)
{
    uint32_t x = seed;
    for (uint32_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        uint32_t p = (x >> 8) % 512, d = (x >> 20) % 32;
        rs_step_cost_add(c, p, d, truth(fixed, pre_ps, dec_ps, p, d));
    }
}

static int test_varied_steps_recover_the_model(void)
{
    struct rs_step_cost c;
    struct rs_step_cost_fit f;
    rs_step_cost_init(&c);
    RS_CHECK(rs_step_cost_solve(&c, &f) == -1);
    /* 3 ms of weight reads, 90 us per prefill token, 400 us per decode token */
    feed(&c, 3000000, 90000000, 400000000, 200, 7);
    RS_CHECK(rs_step_cost_solve(&c, &f) == 0);
    return check_fit(&f, 3000000, 90000000, 400000000);
}

static int test_the_window_forgets_an_older_host(void)
{
    struct rs_step_cost c;
    struct rs_step_cost_fit f;
    rs_step_cost_init(&c);
    feed(&c, 1000000, 20000000, 50000000, 500, 1);
    feed(&c, 8000000, 300000000, 900000000, RS_STEP_COST_WINDOW, 2); /* only the new host left */
    RS_CHECK(c.n == RS_STEP_COST_WINDOW && rs_step_cost_solve(&c, &f) == 0);
    return check_fit(&f, 8000000, 300000000, 900000000);
}

static int test_one_shape_predicts_itself_and_errs_long_on_prefill(void)
{
    struct rs_step_cost c;
    struct rs_step_cost_fit f;
    rs_step_cost_init(&c);
    rs_step_cost_add(&c, 0, 0, 123456); /* no tokens: ignored */
    for (int i = 0; i < 40; i++)         /* pure decode steps of 16 */
        rs_step_cost_add(&c, 0, 16, truth(4000000, 100000000, 250000000, 0, 16));
    RS_CHECK(c.n == 40 && rs_step_cost_solve(&c, &f) == 0);
    uint64_t want = truth(4000000, 100000000, 250000000, 0, 16);
    RS_CHECK_MSG(absdiff(rs_step_cost_predict(&f, 0, 16), want) < want / 100,
                 "predicts %llu ns, measured %llu", (unsigned long long)rs_step_cost_predict(&f, 0, 16),
                 (unsigned long long)want);
    RS_CHECK_MSG(f.prefill_ps >= 100000000, "prefill token %llu ps under the true 100 us",
                 (unsigned long long)f.prefill_ps);
    return 0;
}

static int test_one_shape_window_borrows_the_shapes_it_lacks(void)
{
    struct rs_step_cost c;
    struct rs_step_cost_fit f;
    rs_step_cost_init(&c);
    /* a first burst: prompts alone, then decodes alone at a few batch sizes */
    const uint32_t burst[][2] = {{1024, 0}, {512, 0}, {0, 1}, {0, 4}, {0, 16}};
    for (size_t i = 0; i < sizeof(burst) / sizeof(burst[0]); i++)
        rs_step_cost_add(&c, burst[i][0], burst[i][1],
                         truth(30000000, 1000000000, 2000000000, burst[i][0], burst[i][1]));
    for (int i = 0; i < 3 * RS_STEP_COST_WINDOW; i++) /* then the budget's one mix */
        rs_step_cost_add(&c, 40, 16, truth(30000000, 1000000000, 2000000000, 40, 16));
    RS_CHECK(rs_step_cost_solve(&c, &f) == 0);
    RS_CHECK(check_fit(&f, 30000000, 1000000000, 2000000000) == 0);
    /* much later, the kept shapes are too old to trust: one shape again, prefill errs long */
    for (int i = 0; i < RS_STEP_COST_KEEP_AGE; i++)
        rs_step_cost_add(&c, 40, 16, truth(30000000, 1000000000, 2000000000, 40, 16));
    RS_CHECK(rs_step_cost_solve(&c, &f) == 0);
    RS_CHECK_MSG(f.fixed_ns < 30000000 && f.prefill_ps > 1000000000,
                 "fixed %llu ns, prefill %llu ps", (unsigned long long)f.fixed_ns,
                 (unsigned long long)f.prefill_ps);
    return 0;
}

/* Kept steps that tilt the fit to a token cost of nothing fall back to the window's own fit. */
static int test_a_borrowed_fit_with_a_free_token_is_not_used(void)
{
    struct rs_step_cost c;
    struct rs_step_cost_fit f;
    rs_step_cost_init(&c);
    rs_step_cost_add(&c, 1024, 0, 1000000); /* a noisy, implausibly fast prompt step */
    for (int i = 0; i < RS_STEP_COST_WINDOW; i++)
        rs_step_cost_add(&c, 40, 16, 2000000);
    RS_CHECK(rs_step_cost_solve(&c, &f) == 0);
    RS_CHECK_MSG(f.prefill_ps > 0 && f.decode_ps > 0, "prefill %llu ps, decode %llu ps",
                 (unsigned long long)f.prefill_ps, (unsigned long long)f.decode_ps);
    uint64_t p = rs_step_cost_predict(&f, 40, 16);
    RS_CHECK_MSG(absdiff(p, 2000000) < 20000, "predicts %llu ns", (unsigned long long)p);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_varied_steps_recover_the_model),
    RS_TEST(test_the_window_forgets_an_older_host),
    RS_TEST(test_one_shape_predicts_itself_and_errs_long_on_prefill),
    RS_TEST(test_one_shape_window_borrows_the_shapes_it_lacks),
    RS_TEST(test_a_borrowed_fit_with_a_free_token_is_not_used),
};
RS_TEST_MAIN(cases)

/* SPDX-License-Identifier: MIT */
/*
 * Least-squares fit of the step cost model (step_cost.h): the 3x3 normal
 * equations of the window's samples plus two small ridge terms (fixed cost
 * toward 0, prefill cost toward the decode cost) that keep the system
 * solvable when the samples do not tell the terms apart, solved by Gaussian
 * elimination with partial pivoting. A window of 64 and at most 36 kept
 * shapes make this ~1000 multiply-adds per step: nothing beside a model step.
 */
#include <math.h>
#include <string.h>

#include "common/step_cost.h"

/* Ridge weight relative to the data's own scale: negligible wherever the data decide. */
#define RIDGE 1e-7
/* Token spread below which the window cannot separate the terms (window_too_alike). */
#define MIN_SPREAD 16.0

void rs_step_cost_init(struct rs_step_cost *c)
{
    memset(c, 0, sizeof(*c));
}

static uint32_t bucket(uint32_t tokens)
{
    uint32_t b = 0;
    while (tokens > 0 && b + 1 < RS_STEP_COST_BUCKETS) {
        b++;
        tokens >>= 2;
    }
    return b;
}

static uint32_t shape_of(const struct rs_step_cost_sample *s)
{
    return bucket(s->prefill) * RS_STEP_COST_BUCKETS + bucket(s->decode);
}

void rs_step_cost_add(struct rs_step_cost *c, uint32_t prefill, uint32_t decode, uint64_t ns)
{
    if (prefill == 0 && decode == 0)
        return;
    struct rs_step_cost_sample s = {prefill, decode, ns};
    c->s[c->next] = s;
    c->next = (c->next + 1) % RS_STEP_COST_WINDOW;
    if (c->n < RS_STEP_COST_WINDOW)
        c->n++;
    c->added++;
    c->keep[shape_of(&s)] = s;
    c->keep_at[shape_of(&s)] = c->added;
}

/* Adds one sample to the normal equations. */
static void accumulate(double a[3][3], double b[3], double *tok2,
                       const struct rs_step_cost_sample *s)
{
    double v[3] = {1.0, (double)s->prefill, (double)s->decode}, t = (double)s->ns;
    for (int r = 0; r < 3; r++) {
        for (int k = 0; k < 3; k++)
            a[r][k] += v[r] * v[k];
        b[r] += v[r] * t;
    }
    *tok2 += v[1] * v[1] + v[2] * v[2];
}

/* Solves a x = b in place (3x3); 0, or -1 when singular. */
static int solve3(double a[3][3], double b[3], double x[3])
{
    for (int k = 0; k < 3; k++) {
        int piv = k;
        for (int i = k + 1; i < 3; i++)
            if (fabs(a[i][k]) > fabs(a[piv][k]))
                piv = i;
        if (fabs(a[piv][k]) < 1e-300)
            return -1;
        for (int j = 0; j < 3; j++) {
            double t = a[k][j];
            a[k][j] = a[piv][j];
            a[piv][j] = t;
        }
        double t = b[k];
        b[k] = b[piv];
        b[piv] = t;
        for (int i = k + 1; i < 3; i++) {
            double f = a[i][k] / a[k][k];
            for (int j = k; j < 3; j++)
                a[i][j] -= f * a[k][j];
            b[i] -= f * b[k];
        }
    }
    for (int k = 2; k >= 0; k--) {
        double v = b[k];
        for (int j = k + 1; j < 3; j++)
            v -= a[k][j] * x[j];
        x[k] = v / a[k][k];
    }
    return 0;
}

static uint64_t nonneg(double v)
{
    return v > 0 && isfinite(v) ? (uint64_t)llround(v) : 0;
}

/*
 * Whether the window's shapes vary too little, in some direction of (prefill,
 * decode), to tell the terms apart: the smaller eigenvalue of their scatter
 * matrix under one step's worth of MIN_SPREAD tokens. A window that decides
 * the fit on its own borrows nothing, so a host that changed is forgotten
 * within the window.
 */
static int window_too_alike(const struct rs_step_cost *c)
{
    double mp = 0, md = 0, spp = 0, sdd = 0, spd = 0;
    for (uint32_t i = 0; i < c->n; i++) {
        mp += c->s[i].prefill;
        md += c->s[i].decode;
    }
    mp /= c->n;
    md /= c->n;
    for (uint32_t i = 0; i < c->n; i++) {
        double p = c->s[i].prefill - mp, d = c->s[i].decode - md;
        spp += p * p;
        sdd += d * d;
        spd += p * d;
    }
    double half = (spp - sdd) / 2, low = (spp + sdd) / 2 - sqrt(half * half + spd * spd);
    return low < (double)MIN_SPREAD * MIN_SPREAD;
}

/* Least squares over the window, and the kept shapes it lacks when `borrow`; 0 or -1. */
static int solve_window(const struct rs_step_cost *c, int borrow, double x[3])
{
    double a[3][3] = {{0}}, b[3] = {0}, tok2 = 0;
    uint8_t seen[RS_STEP_COST_SHAPES] = {0};
    for (uint32_t i = 0; i < c->n; i++) {
        accumulate(a, b, &tok2, &c->s[i]);
        seen[shape_of(&c->s[i])] = 1;
    }
    uint32_t n = c->n;
    for (uint32_t k = 0; k < RS_STEP_COST_SHAPES && borrow; k++)
        if (!seen[k] && c->keep_at[k] != 0 && c->added - c->keep_at[k] < RS_STEP_COST_KEEP_AGE) {
            accumulate(a, b, &tok2, &c->keep[k]);
            n++;
        }
    double r0 = RIDGE * (double)n, rp = RIDGE * (tok2 > 0 ? tok2 : 1.0);
    a[0][0] += r0; /* fixed -> 0 */
    a[1][1] += rp; /* prefill - decode -> 0 */
    a[2][2] += rp;
    a[1][2] -= rp;
    a[2][1] -= rp;
    return solve3(a, b, x);
}

/*
 * A fit with borrowed shapes is kept only when every term comes out positive
 * (fixed may be 0): on a model whose steps take a millisecond, timing noise
 * can tilt the line through a few kept steps to a token cost of zero or
 * less, which would switch the budget off. Then the window's own fit, which
 * errs long, is used.
 */
int rs_step_cost_solve(const struct rs_step_cost *c, struct rs_step_cost_fit *out)
{
    if (c->n == 0)
        return -1;
    double x[3] = {0};
    int borrow = window_too_alike(c);
    if (solve_window(c, borrow, x) != 0)
        return -1;
    if (borrow && !(x[0] >= 0 && x[1] > 0 && x[2] > 0) && solve_window(c, 0, x) != 0)
        return -1;
    out->fixed_ns = nonneg(x[0]);
    out->prefill_ps = nonneg(x[1] * 1000.0);
    out->decode_ps = nonneg(x[2] * 1000.0);
    return 0;
}

uint64_t rs_step_cost_predict(const struct rs_step_cost_fit *f, uint32_t prefill, uint32_t decode)
{
    return f->fixed_ns + (f->prefill_ps * prefill + f->decode_ps * decode) / 1000u;
}

/* SPDX-License-Identifier: MIT */
/*
 * Least-squares fit of the step cost model (step_cost.h): the 3x3 normal
 * equations of the window's samples plus two small ridge terms (fixed cost
 * toward 0, prefill cost toward the decode cost) that keep the system
 * solvable when the samples do not tell the terms apart, solved by Gaussian
 * elimination with partial pivoting. A window of 64 makes this ~600
 * multiply-adds per step: nothing beside a model step.
 */
#include <math.h>
#include <string.h>

#include "common/step_cost.h"

/* Ridge weight relative to the data's own scale: negligible wherever the data decide. */
#define RIDGE 1e-7

void rs_step_cost_init(struct rs_step_cost *c)
{
    memset(c, 0, sizeof(*c));
}

void rs_step_cost_add(struct rs_step_cost *c, uint32_t prefill, uint32_t decode, uint64_t ns)
{
    if (prefill == 0 && decode == 0)
        return;
    c->s[c->next] = (struct rs_step_cost_sample){prefill, decode, ns};
    c->next = (c->next + 1) % RS_STEP_COST_WINDOW;
    if (c->n < RS_STEP_COST_WINDOW)
        c->n++;
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

int rs_step_cost_solve(const struct rs_step_cost *c, struct rs_step_cost_fit *out)
{
    if (c->n == 0)
        return -1;
    double a[3][3] = {{0}}, b[3] = {0}, x[3] = {0}, tok2 = 0;
    for (uint32_t i = 0; i < c->n; i++) {
        const struct rs_step_cost_sample *s = &c->s[i];
        double v[3] = {1.0, (double)s->prefill, (double)s->decode}, t = (double)s->ns;
        for (int r = 0; r < 3; r++) {
            for (int k = 0; k < 3; k++)
                a[r][k] += v[r] * v[k];
            b[r] += v[r] * t;
        }
        tok2 += v[1] * v[1] + v[2] * v[2];
    }
    double r0 = RIDGE * (double)c->n, rp = RIDGE * (tok2 > 0 ? tok2 : 1.0);
    a[0][0] += r0; /* fixed -> 0 */
    a[1][1] += rp; /* prefill - decode -> 0 */
    a[2][2] += rp;
    a[1][2] -= rp;
    a[2][1] -= rp;
    if (solve3(a, b, x) != 0)
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

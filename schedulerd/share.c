/* SPDX-License-Identifier: MIT */
/*
 * Owners' shares of a step's decodes. Every running request of every owner
 * decodes each step unless the step would then cost the lighter owners too
 * much: when several owners decode, the owners above a fair level decode at
 * most that many of their sequences this step (the first ones in running
 * order, so within an owner the oldest finish first), so that by launcherd's
 * measured cost model their decodes add at most (F - 1) times the cost of a
 * step holding only the lighter owners' decodes (F = --fair-step-factor):
 * a client with one stream beside a flood sees its steps at most F times
 * slower than without the flood, where batching is not free (a CPU; a GPU's
 * fixed cost per step makes the level high and it rarely binds). The level
 * is max-min fair (water-filling over the owners' demands, smallest first),
 * never below the lighter owners' own demand, and there is none with one
 * owner, F = 0 or no fit yet. A deferred decode keeps its slot and KV
 * blocks and runs in a later step: outputs are unchanged (DESIGN.md 4).
 * Cost per step: O(running) to count, O(owners log owners) for the level.
 * Leaves out which requests run at all (plan.c).
 */
#include <stdlib.h>
#include <string.h>

#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "schedulerd/sched.h"

struct share_owner {
    const uint8_t *d;  /* the owner digest, in its request record */
    uint32_t demand;   /* decodes it could run this step */
    uint32_t planned;  /* decodes planned so far this step */
    uint32_t at;       /* its hash slot */
};

struct share {
    uint32_t cap;             /* hash slots: a power of two >= 2 * max_seqs */
    uint32_t max;             /* owners at most: max_seqs (one per running request) */
    uint32_t *slot;           /* owner index + 1 per hash slot, 0 empty */
    struct share_owner *o;    /* max_seqs */
    uint32_t n_owner, level;  /* this step's owners; decodes one owner may plan */
    uint32_t *demand;         /* max_seqs of scratch: demands, sorted */
};

rs_err share_create(uint32_t max_seqs, struct share **out)
{
    uint32_t cap = 16;
    while (cap < 2u * max_seqs)
        cap <<= 1;
    struct share *sh = calloc(1, sizeof(*sh));
    if (sh != NULL) {
        sh->slot = calloc(cap, sizeof(uint32_t));
        sh->o = calloc(max_seqs, sizeof(*sh->o));
        sh->demand = calloc(max_seqs, sizeof(uint32_t));
    }
    if (sh == NULL || sh->slot == NULL || sh->o == NULL || sh->demand == NULL) {
        share_destroy(&sh);
        return RS_ENOMEM;
    }
    sh->cap = cap;
    sh->max = max_seqs;
    sh->level = UINT32_MAX;
    *out = sh;
    return RS_OK;
}

void share_destroy(struct share **sh)
{
    if (sh == NULL || *sh == NULL)
        return;
    free((*sh)->slot);
    free((*sh)->o);
    free((*sh)->demand);
    free(*sh);
    *sh = NULL;
}

void share_reset(struct share *sh)
{
    for (uint32_t i = 0; i < sh->n_owner; i++)
        sh->slot[sh->o[i].at] = 0;
    sh->n_owner = 0;
    sh->level = UINT32_MAX;
}

/* The owner of d this step, added when new; NULL past max owners (not reached: one per
 * running request). */
static struct share_owner *owner_of(struct share *sh, const uint8_t *d)
{
    uint64_t h;
    memcpy(&h, d, sizeof(h));
    uint32_t k = (uint32_t)h & (sh->cap - 1);
    for (; sh->slot[k] != 0; k = (k + 1) & (sh->cap - 1))
        if (memcmp(sh->o[sh->slot[k] - 1].d, d, SCHED_OWNER_LEN) == 0)
            return &sh->o[sh->slot[k] - 1];
    if (sh->n_owner >= sh->max)
        return NULL;
    struct share_owner *o = &sh->o[sh->n_owner];
    *o = (struct share_owner){d, 0, 0, k};
    sh->slot[k] = ++sh->n_owner;
    return o;
}

void share_demand(struct sched *s, uint32_t idx)
{
    struct share_owner *o = owner_of(s->share, rs_pipe_req_at(s->p, idx)->owner);
    if (o != NULL)
        o->demand++;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

uint32_t share_level_of(uint32_t *m, uint32_t k, double factor, const struct rs_step_cost_fit *fit)
{
    if (k < 2 || !(factor > 0) || fit->decode_ps == 0)
        return UINT32_MAX;
    qsort(m, k, sizeof(*m), cmp_u32);
    double light = 0, extra = factor > 1 ? factor - 1 : 0;
    for (uint32_t j = 1; j < k; j++) {
        light += m[j - 1]; /* owners 0..j-1 decode all they have */
        if (m[j] == m[j - 1])
            continue; /* no level lies between them */
        /* Levels m[j-1] .. m[j]-1 hold owners j.. to the level: the largest that fits. */
        double allow_ps = extra * ((double)fit->fixed_ns * 1000.0 + light * (double)fit->decode_ps);
        double lam = allow_ps / ((double)(k - j) * (double)fit->decode_ps);
        if (lam < m[j - 1]) /* none: the levels that fit ended below m[j-1] (or none did) */
            return m[j - 1] > m[0] ? m[j - 1] - 1 : m[0];
        if (lam < (double)m[j] - 1)
            return (uint32_t)lam;
    }
    return UINT32_MAX;
}

void share_plan_level(struct sched *s, const struct rs_step_cost_fit *fit)
{
    struct share *sh = s->share;
    for (uint32_t i = 0; i < sh->n_owner; i++)
        sh->demand[i] = sh->o[i].demand;
    sh->level = share_level_of(sh->demand, sh->n_owner, s->budget.fair_factor, fit);
    rs_gauge_set(&s->m->counter[RS_M_SCH_FAIR_LEVEL_LAST],
                 sh->level == UINT32_MAX ? 0 : sh->level);
}

int share_take(struct sched *s, uint32_t idx)
{
    struct share *sh = s->share;
    if (sh->level == UINT32_MAX)
        return 1;
    struct share_owner *o = owner_of(sh, rs_pipe_req_at(s->p, idx)->owner);
    if (o == NULL)
        return 1;
    if (o->planned >= sh->level) {
        rs_counter_add(&s->m->counter[RS_M_SCH_FAIR_DEFERRED], 1);
        return 0;
    }
    o->planned++;
    return 1;
}

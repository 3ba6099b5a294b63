/* SPDX-License-Identifier: MIT */
/*
 * Step planning (iteration-level continuous batching): which sequences run
 * in the next step and how many tokens each, under the per-step budgets
 * max_seqs and max_batched_tokens. Order: running decodes, then running
 * prefill chunks (both in (prio, handle) order), then admission of waiting
 * requests in the same order with prefix-cache hits, without skipping the
 * head of the queue except to pass over an owner holding its running-slot
 * cap while another owner waits (owner_cap; those heads keep their place).
 * When blocks run out, the latest running requests not yet in the batch are
 * preempted for recompute (lowest priority, then latest arrival, first).
 * Owners above the step's fair level (share.c) defer some decodes. The
 * step-time budget (budget.c) sizes what the chunks and admissions may
 * take once the decodes are planned. Cost per step is O(running + admitted
 * tokens), plus O(running) per head passed over for the cap. Leaves out
 * writing the batch (batch.c).
 */
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/failpoint.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "ipc/wire_server.h"
#include "schedulerd/sched.h"

static uint32_t min_u32(uint32_t a, uint32_t b)
{
    return a < b ? a : b;
}

static void add_seq(struct sched *s, uint32_t idx, uint32_t pos0, uint32_t n)
{
    struct sreq *sr = &s->req[idx];
    s->plan[s->n_plan++] = (struct plan_seq){idx, pos0, n, pos0 + n == sr->len};
    s->plan_tokens += n;
    sr->in_batch = 1;
}

/* The finish word request idx ends with now (0 = it runs on). */
static uint32_t finish_due(struct sched *s, uint32_t idx)
{
    struct sreq *sr = &s->req[idx];
    uint32_t w = atomic_load_explicit(&rs_pipe_req_at(s->p, idx)->finish, memory_order_acquire);
    if (w != 0)
        return w;
    if (sr->len >= s->cfg.n_ctx)
        return rs_pipe_finish_make(RS_WIRE_FINISH_LENGTH, RS_PIPE_STAGE_SCHEDULERD, 0);
    if (sr->st == SR_RUNNING && sr->len <= sr->n_computed) {
        rs_log_req(RS_LOG_ERROR, sr->handle, RS_LOG_NOID,
                   "list of %u tokens all computed but no token was appended: failing it",
                   sr->len);
        return rs_pipe_finish_make(RS_WIRE_FINISH_ERROR, RS_PIPE_STAGE_SCHEDULERD,
                                   RS_WIRE_INTERNAL);
    }
    return 0;
}

/* The latest running request not in the batch and not idx, or SCHED_NONE. */
static uint32_t victim(const struct sched *s, uint32_t idx)
{
    for (uint32_t i = s->n_run; i-- > 0;) {
        uint32_t v = s->run[i];
        if (v != idx && !s->req[v].in_batch)
            return v;
    }
    return SCHED_NONE;
}

/*
 * Gives running request idx blocks up to position `upto`, preempting later
 * requests when the pool is short. 1: done; 0: idx itself was preempted
 * (nothing else could give way); RS_ESTALE once fenced.
 */
static int grow(struct sched *s, uint32_t idx, uint32_t upto)
{
    struct sreq *sr = &s->req[idx];
    uint32_t bs = s->cfg.block_size, want = (upto + bs - 1) / bs;
    uint32_t need = want > sr->n_blocks ? want - sr->n_blocks : 0;
    while (kv_block_available(&s->kv) < need) {
        uint32_t v = victim(s, idx);
        rs_err rc = req_preempt(s, v != SCHED_NONE ? v : idx, 1);
        if (rc == RS_ESTALE && s->fenced)
            return RS_ESTALE;
        if (v == SCHED_NONE)
            return 0;
    }
    for (uint32_t k = 0; k < need; k++)
        req_row_append(s, idx, kv_block_alloc(&s->kv));
    return 1;
}

/*
 * One pass over the running list: decodes (want 1 token) or chunks (more).
 * Returns how many chunk candidates the decode pass passed over (0: no
 * chunk pass needed), or RS_ESTALE once fenced.
 */
static int plan_running(struct sched *s, uint32_t *budget, int decodes)
{
    int chunks = 0;
    for (uint32_t i = 0; i < s->n_run;) {
        uint32_t idx = s->run[i];
        struct sreq *sr = &s->req[idx];
        if (decodes) { /* the first pass also ends what has a finish word */
            uint32_t w = finish_due(s, idx);
            if (w != 0) {
                if (req_finish(s, idx, w) == RS_ESTALE && s->fenced)
                    return RS_ESTALE;
                continue;
            }
        }
        int full = *budget == 0 || s->n_plan >= s->cfg.max_seqs;
        if (full && !decodes)
            break;
        uint32_t need = sr->len - sr->n_computed;
        if (full || sr->in_batch || (need == 1) != decodes ||
            (need == 1 && fair_paused(s, idx))) { /* a stream nobody reads waits, KV kept */
            chunks += need > 1;
            i++;
            continue;
        }
        if (decodes && !share_take(s, idx)) { /* its owner's share of this step is taken */
            i++;
            continue;
        }
        uint32_t chunk = min_u32(need, *budget), pos0 = sr->n_computed, n_run = s->n_run;
        int g = grow(s, idx, pos0 + chunk);
        if (g < 0)
            return g;
        if (g == 0) {
            i = runq_find(s, idx); /* idx left: the next one moved up (or victims before it) */
            continue;
        }
        add_seq(s, idx, pos0, chunk);
        *budget -= chunk;
        if (s->n_run != n_run) /* victims may have left from before idx */
            i = runq_find(s, idx);
        i++;
    }
    return chunks;
}

uint32_t plan_prefix_match(struct sched *s, const int32_t *tok, uint32_t len)
{
    uint32_t bs = s->cfg.block_size;
    if (!s->cfg.prefix_caching || len == 0)
        return 0;
    uint32_t max = (len - 1) / bs, n = 0, parent = SCHED_NONE;
    uint64_t h = 0;
    for (uint32_t k = 0; k < max; k++) {
        const int32_t *t = tok + (uint64_t)k * bs;
        h = kv_block_hash_chain(h, t, bs);
        uint32_t b = kv_block_lookup(&s->kv, h, kv_block_hash_tokens(t, bs), parent);
        if (b == SCHED_NONE)
            break;
        s->blkbuf[n] = b;
        s->hashbuf[n] = h;
        parent = b;
        n++;
    }
    return n;
}

/* Blocks of idx's cached prefix that are IDLE now (holding them takes them off the LRU). */
static uint32_t idle_hits(const struct sched *s, uint32_t n_hit)
{
    uint32_t n = 0;
    for (uint32_t k = 0; k < n_hit; k++)
        n += s->kv.ref[s->blkbuf[k]] == 0;
    return n;
}

/* Publishes the admission of idx (row written first, then WAITING -> RUNNING). */
static int admit_commit(struct sched *s, uint32_t idx, uint32_t n_hit, uint32_t n_blocks)
{
    struct sreq *sr = &s->req[idx];
    struct rs_pipe_req *r = rs_pipe_req_at(s->p, idx);
    struct rs_table_ref ref = {idx, sr->gen};
    uint32_t slot = s->free_slots[--s->n_free_slots], hit_tok = n_hit * s->cfg.block_size;
    req_row_open(s, ref, slot, s->blkbuf, n_blocks);
    r->run_slot = slot;
    r->n_computed = hit_tok;
    r->inflight_batch = 0;
    RS_FAILPOINT("sched.admit.row");
    uint64_t now = rs_clock_ns();
    if (r->scheduled_ns == 0) { /* first admission: usage and queue wait */
        r->scheduled_ns = now;
        r->n_cached = min_u32(hit_tok, sr->n_prompt);
        if (now > r->accepted_ns && r->accepted_ns != 0)
            rs_hist_add_ns(&s->m->hist[RS_H_SCH_QUEUE_WAIT], now - r->accepted_ns);
    }
    rs_err rc = rs_table_transition(s->p->requests, ref, RS_PIPE_REQ_WAITING,
                                    RS_PIPE_REQ_RUNNING);
    if (rc != RS_OK) {
        /* Fenced (stopped here and replaced): the row may be the new incarnation's by now,
         * so it is left alone; this process exits without undoing anything. */
        if (!rs_role_current(s->p->role))
            return sched_fence(s);
        req_row_clear(s, slot);
        s->free_slots[s->n_free_slots++] = slot;
        for (uint32_t k = n_blocks; k-- > 0;)
            kv_block_release(&s->kv, s->blkbuf[k]);
        rs_log_req(RS_LOG_ERROR, sr->handle, RS_LOG_NOID,
                   "record %u: WAITING -> RUNNING refused (%s): dropped", idx, rs_strerror(rc));
        waitq_remove(s, idx);
        sr->st = SR_NONE;
        return 0;
    }
    RS_FAILPOINT("sched.admit.running");
    waitq_remove(s, idx);
    sr->st = SR_RUNNING;
    sr->slot = slot;
    sr->n_blocks = n_blocks;
    sr->n_computed = hit_tok;
    sr->n_hashed = n_hit;
    sr->last_hash = n_hit ? s->hashbuf[n_hit - 1] : 0;
    sr->last_cached = n_hit ? s->blkbuf[n_hit - 1] : SCHED_NONE;
    sr->next_tok = -1;
    runq_insert(s, idx);
    return 1;
}

/*
 * Admits waiting request idx if its first chunk's blocks fit: 1 admitted (or
 * dropped as broken), 0 it does not fit (admission stops: no skipping the
 * head), RS_ESTALE once fenced.
 */
static int admit(struct sched *s, uint32_t idx, uint32_t *budget)
{
    struct sreq *sr = &s->req[idx];
    uint32_t bs = s->cfg.block_size, len = sr->len, got = 0;
    struct rs_table_ref ref = {idx, sr->gen};
    if (rs_arena_read(s->p->tokens, ref, 0, len, s->tokbuf, &got) != RS_OK || got != len) {
        rs_log_req(RS_LOG_ERROR, sr->handle, RS_LOG_NOID, "token list unreadable: failing it");
        rs_err rc = req_finish(s, idx, rs_pipe_finish_make(RS_WIRE_FINISH_ERROR,
                                                            RS_PIPE_STAGE_SCHEDULERD,
                                                            RS_WIRE_INTERNAL));
        return rc == RS_ESTALE && s->fenced ? RS_ESTALE : 1;
    }
    uint32_t n_hit = plan_prefix_match(s, s->tokbuf, len), hit_tok = n_hit * bs;
    uint32_t chunk = min_u32(len - hit_tok, *budget);
    uint32_t n_blocks = (hit_tok + chunk + bs - 1) / bs, need = n_blocks - n_hit;
    if (kv_block_available(&s->kv) < need + idle_hits(s, n_hit))
        return 0;
    for (uint32_t k = 0; k < n_hit; k++)
        kv_block_hold(&s->kv, s->blkbuf[k]);
    for (uint32_t k = n_hit; k < n_blocks; k++)
        s->blkbuf[k] = kv_block_alloc(&s->kv);
    int rc = admit_commit(s, idx, n_hit, n_blocks);
    if (rc <= 0)
        return rc < 0 ? rc : 1;
    if (s->cfg.prefix_caching) {
        rs_counter_add(&s->m->counter[RS_M_SCH_PREFIX_QUERY], len);
        rs_counter_add(&s->m->counter[RS_M_SCH_PREFIX_HIT], hit_tok);
    }
    rs_log_req(RS_LOG_DEBUG, sr->handle, RS_LOG_NOID, "running: slot %u, %u cached tokens of %u",
               sr->slot, hit_tok, len);
    add_seq(s, idx, hit_tok, chunk);
    *budget -= chunk;
    return 1;
}

/* 1 when idx's owner holds owner_cap running slots (paused streams hold theirs too). */
static int over_cap(const struct sched *s, uint32_t idx)
{
    const uint8_t *o = rs_pipe_req_at(s->p, idx)->owner;
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_run && n < s->owner_cap; i++)
        n += memcmp(rs_pipe_req_at(s->p, s->run[i])->owner, o, SCHED_OWNER_LEN) == 0;
    return n >= s->owner_cap;
}

/*
 * The next waiting request to consider: the head, unless its owner is at
 * its cap; then heads are set aside until one of an owner below its cap
 * (or one with a finish word, to be ended). When only capped owners wait,
 * everything goes back and the head is taken anyway (*capped_only set for
 * the rest of the step): the cap makes room for others, it never idles a
 * slot. SCHED_NONE when nothing waits.
 */
static uint32_t admit_next(struct sched *s, int *capped_only)
{
    while (s->owner_cap != 0 && !*capped_only && s->n_heap > 0 &&
           finish_due(s, waitq_top(s)) == 0 && over_cap(s, waitq_top(s)))
        waitq_set_aside(s);
    if (s->n_heap == 0 && s->n_aside > 0) {
        *capped_only = 1;
        waitq_restore(s);
    }
    return waitq_top(s);
}

static int plan_admit(struct sched *s, uint32_t *budget)
{
    int capped_only = 0, rc = 0;
    while (*budget > 0 && s->n_plan < s->cfg.max_seqs && s->n_free_slots > 0) {
        uint32_t idx = admit_next(s, &capped_only);
        if (idx == SCHED_NONE)
            break;
        uint32_t w = finish_due(s, idx);
        int got = w != 0 ? (int)req_finish(s, idx, w) : admit(s, idx, budget);
        if (got == RS_ESTALE && s->fenced) {
            rc = RS_ESTALE;
            break;
        }
        if (got == 0 && w == 0)
            break;
    }
    waitq_restore(s); /* what was passed over keeps its place for the next step */
    return rc;
}

/* Counts each owner's decodes and sets the step's fair level (share.c). */
static void plan_shares(struct sched *s)
{
    struct rs_step_cost_fit fit = {0};
    share_reset(s->share);
    if (!(s->budget.fair_factor > 0) || budget_fit(s, &fit) != 0) {
        rs_gauge_set(&s->m->counter[RS_M_SCH_FAIR_LEVEL_LAST], 0);
        return;
    }
    for (uint32_t i = 0; i < s->n_run; i++) {
        uint32_t idx = s->run[i];
        const struct sreq *sr = &s->req[idx];
        if (sr->len - sr->n_computed == 1 && !sr->in_batch && !fair_paused(s, idx) &&
            finish_due(s, idx) == 0)
            share_demand(s, idx);
    }
    share_plan_level(s, &fit);
}

int plan_step(struct sched *s)
{
    uint32_t budget = s->cfg.max_batched_tokens;
    s->n_plan = 0;
    s->plan_tokens = 0;
    if (s->fenced)
        return RS_ESTALE;
    plan_shares(s);
    int rc = plan_running(s, &budget, 1);
    uint32_t left = budget;
    if (rc >= 0) /* the decode pass planned only decodes: the budget sizes the rest */
        budget = budget_step(s, s->n_plan, left);
    int limited = budget < left;
    if (rc > 0)
        rc = plan_running(s, &budget, 0);
    if (rc >= 0)
        rc = plan_admit(s, &budget);
    if (rc >= 0 && limited && budget == 0) /* the step budget ran out before the token one */
        rs_counter_add(&s->m->counter[RS_M_SCH_BUDGET_LIMITED], 1);
    return rc < 0 ? rc : (int)s->n_plan;
}

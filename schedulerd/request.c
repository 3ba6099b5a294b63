/* SPDX-License-Identifier: MIT */
/*
 * Lifecycle moves of one request that schedulerd owns (WAITING, RUNNING):
 * adoption into the private indexes, finishing, recompute preemption, the
 * launcher reset, its KV row, and offering its full blocks to the prefix
 * cache. Every shared-memory write is ordered so that a SIGKILL between any
 * two leaves a state rebuild.c turns into a consistent one: a KV row counts
 * only while its owner is RUNNING, so rows are written before WAITING ->
 * RUNNING and cleared after RUNNING -> WAITING/FINISHED. Leaves out the
 * choice of which request moves (plan.c, result.c).
 */
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/failpoint.h"
#include "ipc/pipeline_kv.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "ipc/wire_server.h"
#include "schedulerd/sched.h"

static struct rs_table_ref ref_of(const struct sched *s, uint32_t idx)
{
    return (struct rs_table_ref){idx, s->req[idx].gen};
}

/* Maps a failed transition to the fence or a logged surprise. */
static rs_err transition(struct sched *s, uint32_t idx, uint32_t from, uint32_t to)
{
    rs_err rc = rs_table_transition(s->p->requests, ref_of(s, idx), from, to);
    if (rc == RS_OK)
        return RS_OK;
    if (!rs_role_current(s->p->role))
        return sched_fence(s);
    rs_log_req(RS_LOG_ERROR, s->req[idx].handle, RS_LOG_NOID,
               "record %u: state %u -> %u refused (%s): dropped from the schedule", idx, from, to,
               rs_strerror(rc));
    return rc;
}

rs_err req_adopt(struct sched *s, struct rs_table_ref ref)
{
    uint32_t state;
    void *rec;
    if (s->fenced)
        return RS_ESTALE;
    if (rs_table_get(s->p->requests, ref, &state, &rec) != RS_OK || state != RS_PIPE_REQ_WAITING)
        return RS_ESTALE;
    struct sreq *sr = &s->req[ref.index];
    if (sr->st != SR_NONE) {
        if (sr->gen == ref.gen)
            return RS_OK;
        rs_log_error("record %u: generation %u replaced %u while tracked; forgetting the old one",
                     ref.index, ref.gen, sr->gen);
        return RS_ESTALE; /* cannot happen while we own WAITING/RUNNING; keep the old mirror */
    }
    struct rs_pipe_req *r = rec;
    uint32_t len = 0;
    if (rs_arena_len(s->p->tokens, ref, &len) != RS_OK)
        return RS_ESTALE;
    memset(sr, 0, sizeof(*sr));
    sr->gen = ref.gen;
    sr->st = SR_WAITING;
    sr->prio = s->cfg.priority_policy ? r->priority : 0;
    sr->handle = r->handle;
    sr->n_prompt = r->n_prompt;
    sr->len = len;
    sr->slot = SCHED_NONE;
    sr->last_cached = SCHED_NONE;
    sr->next_tok = -1;
    r->run_slot = RS_PIPE_NO_SLOT;
    r->n_computed = 0;
    r->inflight_batch = 0;
    waitq_push(s, ref.index);
    if (r->n_prompt == 0 || r->n_prompt > len || len > s->cfg.n_ctx) {
        rs_log_req(RS_LOG_ERROR, r->handle, RS_LOG_NOID,
                   "record %u: prompt %u tokens, list %u, context %u: inconsistent, failing it",
                   ref.index, r->n_prompt, len, s->cfg.n_ctx);
        return req_finish(s, ref.index,
                          rs_pipe_finish_make(RS_WIRE_FINISH_ERROR, RS_PIPE_STAGE_SCHEDULERD,
                                              RS_WIRE_INTERNAL));
    }
    rs_log_req(RS_LOG_DEBUG, r->handle, RS_LOG_NOID, "waiting: record %u, %u tokens", ref.index,
               len);
    return RS_OK;
}

void req_row_open(struct sched *s, struct rs_table_ref ref, uint32_t slot, const uint32_t *blocks,
                  uint32_t n)
{
    struct rs_pipe_kvrow *row = rs_pipe_kvrow_at(s->p, slot);
    memcpy(row->blocks, blocks, n * sizeof(uint32_t));
    atomic_store_explicit(&row->n_blocks, n, memory_order_relaxed);
    /* P: the owner store publishes the entries (launcherd acquires owner). */
    atomic_store_explicit(&row->owner, rs_table_ref_pack(ref) + 1, memory_order_release);
    s->slot_req[slot] = ref.index;
}

void req_row_append(struct sched *s, uint32_t idx, uint32_t b)
{
    struct sreq *sr = &s->req[idx];
    struct rs_pipe_kvrow *row = rs_pipe_kvrow_at(s->p, sr->slot);
    row->blocks[sr->n_blocks] = b;
    RS_FAILPOINT("sched.row.append");
    sr->n_blocks++;
    atomic_store_explicit(&row->n_blocks, sr->n_blocks, memory_order_release);
}

void req_row_clear(struct sched *s, uint32_t slot)
{
    struct rs_pipe_kvrow *row = rs_pipe_kvrow_at(s->p, slot);
    atomic_store_explicit(&row->owner, 0, memory_order_release);
    atomic_store_explicit(&row->n_blocks, 0, memory_order_release);
    s->slot_req[slot] = SCHED_NONE;
}

/* Gives running request idx's slot and blocks back (deepest block first to the LRU). */
static void drop_kv(struct sched *s, uint32_t idx)
{
    struct sreq *sr = &s->req[idx];
    const struct rs_pipe_kvrow *row = rs_pipe_kvrow_at(s->p, sr->slot);
    uint32_t n = sr->n_blocks;
    memcpy(s->blkbuf, row->blocks, n * sizeof(uint32_t));
    req_row_clear(s, sr->slot);
    for (uint32_t k = n; k-- > 0;)
        kv_block_release(&s->kv, s->blkbuf[k]);
    s->free_slots[s->n_free_slots++] = sr->slot;
    runq_remove(s, idx);
    sr->slot = SCHED_NONE;
    sr->n_blocks = 0;
    sr->n_hashed = 0;
    sr->last_hash = 0;
    sr->last_cached = SCHED_NONE;
    sr->n_computed = 0;
    sr->next_tok = -1;
}

rs_err req_finish(struct sched *s, uint32_t idx, uint32_t word)
{
    if (s->fenced || !rs_role_current(s->p->role))
        return sched_fence(s); /* the record's plain fields below are the new incarnation's */
    struct sreq *sr = &s->req[idx];
    struct rs_pipe_req *r = rs_pipe_req_at(s->p, idx);
    if (word != 0)
        rs_pipe_finish_set(r, word);
    uint32_t from = sr->st == SR_RUNNING ? RS_PIPE_REQ_RUNNING : RS_PIPE_REQ_WAITING;
    r->finished_ns = rs_clock_ns();
    r->run_slot = RS_PIPE_NO_SLOT; /* rebuild maps rows to requests by the row's owner */
    rs_err rc = transition(s, idx, from, RS_PIPE_REQ_FINISHED);
    if (rc == RS_ESTALE && s->fenced)
        return rc;
    RS_FAILPOINT("sched.finish.moved");
    if (sr->st == SR_RUNNING)
        drop_kv(s, idx);
    else
        waitq_remove(s, idx);
    sr->st = SR_NONE;
    sr->in_batch = 0;
    if (rc != RS_OK)
        return RS_OK;
    uint32_t w = atomic_load_explicit(&r->finish, memory_order_acquire);
    rs_counter_add(&s->m->counter[RS_M_SCH_FINISHED], 1);
    rs_log_req(RS_LOG_DEBUG, sr->handle, RS_LOG_NOID, "finished: reason %u by stage %u",
               rs_pipe_finish_reason(w), rs_pipe_finish_who(w));
    s->n_unannounced++; /* one wake for postprocd per pass (sched_announce) */
    return RS_OK;
}

rs_err req_preempt(struct sched *s, uint32_t idx, int count)
{
    if (s->fenced)
        return RS_ESTALE;
    struct sreq *sr = &s->req[idx];
    struct rs_pipe_req *r = rs_pipe_req_at(s->p, idx);
    rs_err rc = transition(s, idx, RS_PIPE_REQ_RUNNING, RS_PIPE_REQ_WAITING);
    if (rc != RS_OK) {
        if (!s->fenced) {
            drop_kv(s, idx);
            sr->st = SR_NONE;
        }
        return rc;
    }
    RS_FAILPOINT("sched.preempt.moved");
    /* WAITING is still ours: these writes may follow the transition. */
    r->n_computed = 0;
    r->run_slot = RS_PIPE_NO_SLOT;
    r->inflight_batch = 0;
    r->n_preempted++;
    drop_kv(s, idx);
    sr->st = SR_WAITING;
    sr->in_batch = 0;
    waitq_push(s, idx);
    if (count)
        rs_counter_add(&s->m->counter[RS_M_SCH_PREEMPTIONS], 1);
    rs_log_req(count ? RS_LOG_INFO : RS_LOG_DEBUG, sr->handle, RS_LOG_NOID,
               "preempted for recompute (%u times so far)", r->n_preempted);
    return RS_OK;
}

void req_register_blocks(struct sched *s, uint32_t idx)
{
    struct sreq *sr = &s->req[idx];
    uint32_t bs = s->cfg.block_size, full = sr->n_computed / bs;
    if (!s->cfg.prefix_caching || full <= sr->n_hashed || sr->slot == SCHED_NONE)
        return;
    if (full > sr->n_blocks)
        full = sr->n_blocks;
    uint32_t from = sr->n_hashed * bs, n = (full - sr->n_hashed) * bs, got = 0;
    if (rs_arena_read(s->p->tokens, ref_of(s, idx), from, n, s->tokbuf, &got) != RS_OK ||
        got != n)
        return; /* retried with the next result */
    const struct rs_pipe_kvrow *row = rs_pipe_kvrow_at(s->p, sr->slot);
    /* the block caching the previous tokens may be another request's copy of ours */
    uint32_t parent = sr->n_hashed > 0 ? sr->last_cached : SCHED_NONE;
    uint64_t h = sr->last_hash;
    for (uint32_t k = sr->n_hashed; k < full; k++) {
        const int32_t *t = s->tokbuf + (k - sr->n_hashed) * bs;
        h = kv_block_hash_chain(h, t, bs);
        parent = kv_block_register(&s->kv, row->blocks[k], h, kv_block_hash_tokens(t, bs),
                                   parent);
    }
    sr->n_hashed = full;
    sr->last_hash = h;
    sr->last_cached = parent;
}

rs_err req_reset_all(struct sched *s, uint32_t inc)
{
    uint32_t had = s->n_run;
    while (s->n_run > 0) {
        rs_err rc = req_preempt(s, s->run[s->n_run - 1], 0);
        if (rc == RS_ESTALE && s->fenced)
            return rc;
        RS_FAILPOINT("sched.reset.preempted");
    }
    kv_block_forget_all(&s->kv, inc);
    /* Last: until this store a restart redoes the reset. */
    atomic_store_explicit(&s->p->shared->kv_launcher_inc, inc, memory_order_release);
    if (s->kv_inc != 0)
        rs_counter_add(&s->m->counter[RS_M_SCH_LAUNCHER_RESETS], 1);
    rs_log_info("launcher incarnation %u -> %u: %u running requests re-prefill from prompt + "
                "outputs, prefix cache cleared", s->kv_inc, inc, had);
    s->kv_inc = inc;
    return RS_OK;
}

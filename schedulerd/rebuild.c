/* SPDX-License-Identifier: MIT */
/*
 * Restart from shared memory: every private index of the scheduler is
 * rebuilt from the request table (WAITING and RUNNING records), the KV rows
 * (a row counts only when its owner is a RUNNING record; others are cleared),
 * the block refcounts they imply, kv_meta (cached blocks of the current
 * kv_launcher_inc), and the batch in flight. The batch in flight is taken to
 * be the last id allocated; if the launcher has released it (or it was never
 * committed) and no answer is in the result ring, result_poll forgets it.
 * A RUNNING record whose row is missing or broken is demoted to WAITING
 * (recompute). Cost: O(max_requests + max_seqs x max_blocks_per_seq +
 * n_kv_blocks + tokens of running requests). Leaves out the loop (sched.c).
 */
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/failpoint.h"
#include "ipc/pipeline_kv.h"
#include "ipc/pipeline_req.h"
#include "schedulerd/sched.h"

/* The slot whose row names ref, trying the record's run_slot first; SCHED_NONE if none. */
static uint32_t find_row(const struct sched *s, struct rs_table_ref ref, uint32_t hint)
{
    uint64_t owner = rs_table_ref_pack(ref) + 1;
    if (hint < s->cfg.max_seqs &&
        atomic_load_explicit(&rs_pipe_kvrow_at(s->p, hint)->owner, memory_order_acquire) == owner)
        return hint;
    for (uint32_t slot = 0; slot < s->cfg.max_seqs; slot++)
        if (atomic_load_explicit(&rs_pipe_kvrow_at(s->p, slot)->owner, memory_order_acquire) ==
            owner)
            return slot;
    return SCHED_NONE;
}

/* 1 when row `slot` is a valid table for a list of len tokens with n_computed done. */
static int row_valid(const struct sched *s, uint32_t slot, uint32_t len, uint32_t n_computed,
                     uint32_t *stamp, uint32_t mark)
{
    const struct rs_pipe_kvrow *row = rs_pipe_kvrow_at(s->p, slot);
    uint32_t n = atomic_load_explicit(&row->n_blocks, memory_order_acquire);
    if (s->slot_req[slot] != SCHED_NONE || n > s->cfg.max_blocks_per_seq ||
        n_computed > len || (uint64_t)n_computed > (uint64_t)n * s->cfg.block_size)
        return 0;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t b = row->blocks[k];
        if (b >= s->cfg.n_kv_blocks || stamp[b] == mark)
            return 0;
        stamp[b] = mark;
    }
    return 1;
}

/* Takes RUNNING record ref back, or demotes it to WAITING when its row does not hold up. */
static rs_err adopt_running(struct sched *s, struct rs_table_ref ref, uint32_t *ref_count,
                            uint32_t *stamp)
{
    struct rs_pipe_req *r = rs_pipe_req_at(s->p, ref.index);
    uint32_t len = 0;
    if (rs_arena_len(s->p->tokens, ref, &len) != RS_OK)
        return RS_OK; /* freed meanwhile: cannot be, RUNNING is ours */
    uint32_t slot = find_row(s, ref, r->run_slot);
    int ok = slot != SCHED_NONE && r->n_prompt > 0 && r->n_prompt <= len &&
             len <= s->cfg.n_ctx && row_valid(s, slot, len, r->n_computed, stamp, ref.index + 1);
    if (!ok) {
        rs_log_req(RS_LOG_WARN, r->handle, RS_LOG_NOID,
                   "running record %u has no consistent KV row: re-prefilling it", ref.index);
        rs_err rc = rs_table_transition(s->p->requests, ref, RS_PIPE_REQ_RUNNING,
                                        RS_PIPE_REQ_WAITING);
        if (rc != RS_OK)
            return rs_role_current(s->p->role) ? RS_OK : sched_fence(s);
        r->n_preempted++;
        return req_adopt(s, ref) == RS_ESTALE && s->fenced ? RS_ESTALE : RS_OK;
    }
    const struct rs_pipe_kvrow *row = rs_pipe_kvrow_at(s->p, slot);
    struct sreq *sr = &s->req[ref.index];
    memset(sr, 0, sizeof(*sr));
    sr->gen = ref.gen;
    sr->st = SR_RUNNING;
    sr->prio = s->cfg.priority_policy ? r->priority : 0;
    sr->handle = r->handle;
    sr->n_prompt = r->n_prompt;
    sr->len = len;
    sr->n_computed = r->n_computed;
    sr->slot = slot;
    sr->n_blocks = atomic_load_explicit(&row->n_blocks, memory_order_acquire);
    sr->last_cached = SCHED_NONE;
    sr->next_tok = -1;
    sr->heap_pos = SCHED_NONE;
    for (uint32_t k = 0; k < sr->n_blocks; k++)
        ref_count[row->blocks[k]]++;
    s->slot_req[slot] = ref.index;
    r->run_slot = slot;
    runq_insert(s, ref.index);
    return RS_OK;
}

/* Requests from the table; rows nobody running owns are cleared; free slot stack. */
static rs_err rebuild_requests(struct sched *s, uint32_t *ref_count, uint32_t *stamp)
{
    uint32_t cursor = 0, state;
    struct rs_table_ref ref;
    uint64_t mask = 1ull << RS_PIPE_REQ_WAITING | 1ull << RS_PIPE_REQ_RUNNING;
    while (rs_table_next(s->p->requests, &cursor, mask, &ref, &state) == RS_OK) {
        rs_err rc = state == RS_PIPE_REQ_RUNNING ? adopt_running(s, ref, ref_count, stamp)
                                                 : req_adopt(s, ref);
        if (rc == RS_ESTALE && s->fenced)
            return rc;
        RS_FAILPOINT("sched.rebuild.record");
    }
    s->n_free_slots = 0;
    for (uint32_t slot = s->cfg.max_seqs; slot-- > 0;) {
        if (s->slot_req[slot] != SCHED_NONE)
            continue;
        if (atomic_load_explicit(&rs_pipe_kvrow_at(s->p, slot)->owner, memory_order_acquire))
            req_row_clear(s, slot);
        s->free_slots[s->n_free_slots++] = slot;
    }
    return RS_OK;
}

/* Marks the records of the batch taken to be in flight; clears every other mark. */
static void rebuild_flight(struct sched *s)
{
    uint64_t next = atomic_load_explicit(&s->p->shared->next_batch, memory_order_acquire);
    s->inflight_id = next > 1 ? next - 1 : 0;
    s->inflight_guess = 1;
    s->inflight_ns = rs_clock_ns();
    s->n_flight = 0;
    for (uint32_t i = 0; i < s->n_run; i++) {
        uint32_t idx = s->run[i];
        struct rs_pipe_req *r = rs_pipe_req_at(s->p, idx);
        if (s->inflight_id != 0 && r->inflight_batch == s->inflight_id &&
            s->n_flight < s->cfg.max_seqs) {
            s->req[idx].in_batch = 1;
            s->flight[s->n_flight++] = idx;
        } else {
            r->inflight_batch = 0;
        }
    }
}

rs_err rebuild_all(struct sched *s)
{
    struct rs_pipe_shared *sh = s->p->shared;
    uint64_t zero = 0; /* batch ids start at 1: 0 means "none" in the records */
    atomic_compare_exchange_strong_explicit(&sh->next_batch, &zero, 1, memory_order_acq_rel,
                                            memory_order_acquire);
    s->kv_inc = (uint32_t)atomic_load_explicit(&sh->kv_launcher_inc, memory_order_acquire);
    for (uint32_t slot = 0; slot < s->cfg.max_seqs; slot++)
        s->slot_req[slot] = SCHED_NONE;
    uint32_t *ref_count = calloc(s->cfg.n_kv_blocks, sizeof(uint32_t));
    uint32_t *stamp = calloc(s->cfg.n_kv_blocks, sizeof(uint32_t));
    rs_err rc = ref_count && stamp ? rebuild_requests(s, ref_count, stamp) : RS_ENOMEM;
    if (rc == RS_OK) {
        kv_block_rebuild(&s->kv, s->kv_inc, ref_count);
        for (uint32_t i = 0; i < s->n_run; i++)
            req_register_blocks(s, s->run[i]); /* idempotent: re-derives the hash chains */
        rebuild_flight(s);
        sched_gauges(s);
        rs_log_info("rebuilt from shared memory: %u waiting, %u running, KV %u used / %u cached "
                    "/ %u free, launcher %u, batch %llu maybe in flight",
                    s->n_heap, s->n_run, s->kv.n_used, s->kv.n_idle, s->kv.n_free, s->kv_inc,
                    (unsigned long long)s->inflight_id);
    } else if (rc == RS_ENOMEM) {
        rs_log_error("rebuild: out of memory for %u blocks", s->cfg.n_kv_blocks);
    }
    free(ref_count);
    free(stamp);
    if (rc == RS_OK && s->inflight_id != 0 && result_poll(s) == RS_ESTALE)
        rc = RS_ESTALE;
    return rc;
}

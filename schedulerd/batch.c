/* SPDX-License-Identifier: MIT */
/*
 * Writing the planned step into the batch ring: the slot is claimed first
 * (a full ring means no planning at all, so no state moves without a batch
 * to carry it), the plan is written in place (header, sequences, token ids
 * read from each request's list), every record in it is marked with the batch
 * id, and one commit publishes it; then launcherd is rung. A decode's input
 * token comes from the previous result when known, so the common step reads
 * no token list. Leaves out what to run (plan.c).
 */
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/failpoint.h"
#include "ipc/pipeline_batch.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "ipc/wire_server.h"
#include "schedulerd/sched.h"

/* Writes one sequence and its tokens and marks its record; 0 when its tokens could not be read. */
static int write_seq(struct sched *s, const struct plan_seq *ps, struct rs_pipe_batch_seq *seq,
                     int32_t *tok, uint32_t tok_off, uint64_t id)
{
    struct sreq *sr = &s->req[ps->idx];
    struct rs_table_ref ref = {ps->idx, sr->gen};
    int32_t *dst = tok + tok_off;
    if (ps->n_tokens == 1 && ps->pos0 + 1 == sr->len && sr->next_tok >= 0) {
        dst[0] = sr->next_tok;
    } else {
        uint32_t got = 0;
        if (rs_arena_read(s->p->tokens, ref, ps->pos0, ps->n_tokens, dst, &got) != RS_OK ||
            got != ps->n_tokens)
            return 0;
    }
    *seq = (struct rs_pipe_batch_seq){
        .req_index = ps->idx, .req_gen = sr->gen, .run_slot = sr->slot, .pos0 = ps->pos0,
        .n_tokens = ps->n_tokens, .n_blocks = sr->n_blocks, .tok_off = tok_off,
        .want_logits = ps->want_logits, .out_index = sr->len - sr->n_prompt};
    rs_pipe_req_at(s->p, ps->idx)->inflight_batch = id;
    /* a decode extends a list with outputs by one; everything else is prefill */
    if (ps->n_tokens == 1 && ps->pos0 + 1 == sr->len && sr->len > sr->n_prompt)
        s->plan_decode++;
    else
        s->plan_prefill += ps->n_tokens;
    return 1;
}

/*
 * Fills the claimed slot from s->plan for batch `id`: sequences first, then
 * tokens (their offset depends on the final count, so a sequence whose
 * tokens cannot be read is dropped and the tokens are moved down), marking
 * each record in flight. Returns the sequences kept.
 */
static uint32_t write_batch(struct sched *s, struct rs_pipe_batch *b, uint64_t id,
                            uint32_t *n_tokens)
{
    struct rs_pipe_batch_seq *seqs = (struct rs_pipe_batch_seq *)(b + 1);
    int32_t *tok = (int32_t *)(seqs + s->n_plan);
    uint32_t n = 0, off = 0;
    s->plan_prefill = s->plan_decode = 0;
    for (uint32_t i = 0; i < s->n_plan; i++) {
        const struct plan_seq *ps = &s->plan[i];
        if (write_seq(s, ps, &seqs[n], tok, off, id)) {
            off += ps->n_tokens;
            s->flight[n++] = ps->idx;
            continue;
        }
        struct sreq *sr = &s->req[ps->idx];
        sr->in_batch = 0;
        rs_log_req(RS_LOG_ERROR, sr->handle, RS_LOG_NOID, "token list unreadable: failing it");
        rs_pipe_finish_set(rs_pipe_req_at(s->p, ps->idx),
                           rs_pipe_finish_make(RS_WIRE_FINISH_ERROR, RS_PIPE_STAGE_SCHEDULERD,
                                               RS_WIRE_INTERNAL));
    }
    if (n < s->n_plan && n > 0) /* the token array starts right after the kept sequences */
        memmove(seqs + n, tok, off * sizeof(int32_t));
    *n_tokens = off;
    s->n_flight = n;
    return n;
}

/* Stamps the header of batch `id` (records already marked) and commits. */
static int commit(struct sched *s, struct rs_ring_wr *w, struct rs_pipe_batch *b, uint64_t id,
                  uint32_t n_tokens, uint64_t t0)
{
    RS_FAILPOINT("sched.batch.marked");
    b->batch_id = id;
    b->launcher_inc = s->kv_inc;
    b->n_seqs = s->n_flight;
    b->n_tokens = n_tokens;
    b->pad = 0;
    b->planned_ns = rs_clock_ns();
    uint64_t plan_ns = b->planned_ns - t0;
    rs_gauge_set(&s->m->counter[RS_M_SCH_PLAN_NS_LAST], plan_ns);
    rs_hist_add_ns(&s->m->hist[RS_H_SCH_PLAN], plan_ns);
    sched_gauges(s); /* before the commit: whoever sees the batch sees the KV figures of its plan */
    rs_err rc = rs_ring_commit(s->p->batches, w, id,
                               (uint32_t)rs_pipe_batch_bytes(s->n_flight, n_tokens));
    if (rc != RS_OK) {
        if (rc == RS_ESTALE)
            return sched_fence(s);
        rs_log_error("batch %llu: commit failed (%s)", (unsigned long long)id, rs_strerror(rc));
        rs_ring_abort(s->p->batches, w);
        result_clear_flight(s);
        return 0;
    }
    RS_FAILPOINT("sched.batch.committed");
    s->inflight_id = id;
    s->inflight_ns = b->planned_ns;
    s->inflight_guess = 0;
    rs_counter_add(&s->m->counter[RS_M_SCH_STEPS], 1);
    rs_counter_add(&s->m->counter[RS_M_SCH_PREFILL_TOKENS], s->plan_prefill);
    rs_counter_add(&s->m->counter[RS_M_SCH_DECODE_TOKENS], s->plan_decode);
    rs_log_req(RS_LOG_DEBUG, RS_LOG_NOID, id, "batch: %u seqs, %u tokens, planned in %llu ns",
               s->n_flight, n_tokens, (unsigned long long)plan_ns);
    sched_ring(s, RS_PIPE_STAGE_LAUNCHERD, RS_WIRE_DOOR_BATCH_READY, id, w->slot);
    return 1;
}

int batch_step(struct sched *s)
{
    if (s->fenced)
        return RS_ESTALE;
    if (s->inflight_id != 0)
        return 0;
    struct rs_ring_wr w;
    rs_err rc = rs_ring_try_claim(s->p->batches, &w);
    if (rc == RS_ESTALE)
        return sched_fence(s);
    if (rc != RS_OK) {
        if (rc != RS_EFULL)
            rs_log_error("batch ring: claim failed (%s)", rs_strerror(rc));
        return 0;
    }
    uint64_t t0 = rs_clock_ns(), id = 0;
    int n = plan_step(s);
    uint32_t n_tokens = 0;
    s->n_flight = 0;
    if (n > 0 && rs_pipe_batch_bytes((uint32_t)n, s->plan_tokens) <= w.cap) {
        /* ids need not be dense: one spent on a batch that ends up empty is never seen */
        id = atomic_fetch_add_explicit(&s->p->shared->next_batch, 1, memory_order_acq_rel);
        n = (int)write_batch(s, w.data, id, &n_tokens);
    }
    else if (n > 0) /* cannot happen: the slot is sized for max_seqs and max_batched_tokens */
        rs_log_error("plan of %d seqs and %u tokens does not fit a batch slot", n, s->plan_tokens);
    if (n <= 0 || s->n_flight == 0) {
        for (uint32_t i = 0; i < s->n_plan; i++)
            s->req[s->plan[i].idx].in_batch = 0;
        s->n_flight = 0;
        rs_ring_abort(s->p->batches, &w);
        return n < 0 ? n : 0;
    }
    return commit(s, &w, w.data, id, n_tokens, t0);
}

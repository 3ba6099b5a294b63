/* SPDX-License-Identifier: MIT */
/*
 * Applying launcherd's answer to the batch in flight: per row, n_computed :=
 * the row's K/V extent (an absolute value, checked against the request's
 * list and blocks), the next decode's input token, newly full blocks into the
 * prefix cache; then every request of the batch whose finish word is set is
 * finished (its blocks freed before the next step). A row is applied only
 * while its record still names the batch (inflight_batch), which the apply
 * clears last, so a result redelivered after a schedulerd restart is applied
 * once. Results for other batches (a launcher restart repeats an answered one
 * as KV_LOST) are released unused. Leaves out what KV_LOST implies (sched.c
 * compares the launcher's incarnation and resets).
 */
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/failpoint.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "ipc/pipeline_result.h"
#include "ipc/wire_server.h"
#include "schedulerd/sched.h"

static void apply_row(struct sched *s, const struct rs_pipe_result *res,
                      const struct rs_pipe_result_row *row)
{
    uint32_t idx = row->req_index;
    struct sreq *sr = &s->req[idx];
    struct rs_pipe_req *r = rs_pipe_req_at(s->p, idx);
    if (sr->st != SR_RUNNING || sr->gen != row->req_gen || !sr->in_batch ||
        r->inflight_batch != res->batch_id)
        return; /* not in this batch, or applied before a restart */
    /* A step appends at most one token: a reported length in [len, len + 1] is taken as is
     * (it saves reading the list's length word, which launcherd just wrote); anything else
     * (a KV_LOST row, a launcher that appended before dying) is read from the list. */
    uint32_t len = row->n_tokens;
    if (len < sr->len || len > sr->len + 1 || len > s->cfg.n_ctx || len < row->computed) {
        len = sr->len;
        rs_arena_len(s->p->tokens, (struct rs_table_ref){idx, sr->gen}, &len);
    }
    sr->len = len;
    uint32_t c = row->computed, old = sr->n_computed;
    if (res->status == RS_PIPE_RESULT_KV_LOST) {
        c = old;
    } else if (c < old || c > len || c > sr->n_blocks * s->cfg.block_size) {
        rs_log_req(RS_LOG_ERROR, sr->handle, res->batch_id,
                   "result row: computed %u outside [%u, min(list %u, blocks %u)]: ignored", c,
                   old, len, sr->n_blocks * s->cfg.block_size);
        c = old;
    }
    sr->n_computed = c;
    r->n_computed = c;
    sr->next_tok = row->token >= 0 && len == c + 1 ? row->token : -1;
    if (c > old)
        req_register_blocks(s, idx);
    if (res->status == RS_PIPE_RESULT_ERROR && c == old) {
        rs_log_req(RS_LOG_ERROR, sr->handle, res->batch_id, "the launcher failed its step");
        rs_pipe_finish_set(r, rs_pipe_finish_make(RS_WIRE_FINISH_ERROR,
                                                  RS_PIPE_STAGE_SCHEDULERD, RS_WIRE_INTERNAL));
    }
    r->inflight_batch = 0; /* last: a redelivered result skips this row */
    sr->in_batch = 0;
}

void result_clear_flight(struct sched *s)
{
    for (uint32_t i = 0; i < s->n_flight; i++) {
        uint32_t idx = s->flight[i];
        struct sreq *sr = &s->req[idx];
        if (sr->st == SR_NONE)
            continue;
        if (!sr->in_batch)
            continue; /* its row was applied, which cleared its mark */
        /* no row answered it: refresh what the launcher may have done */
        rs_arena_len(s->p->tokens, (struct rs_table_ref){idx, sr->gen}, &sr->len);
        sr->next_tok = -1;
        rs_pipe_req_at(s->p, idx)->inflight_batch = 0;
        sr->in_batch = 0;
    }
    s->n_flight = 0;
    s->inflight_id = 0;
    s->inflight_guess = 0;
}

/* After the rows: ends what has a finish word, then the batch is no longer in flight. */
static int finish_flight(struct sched *s)
{
    for (uint32_t i = 0; i < s->n_flight; i++) {
        uint32_t idx = s->flight[i];
        struct sreq *sr = &s->req[idx];
        if (sr->st == SR_NONE)
            continue;
        uint32_t w = atomic_load_explicit(&rs_pipe_req_at(s->p, idx)->finish,
                                          memory_order_acquire);
        if (w != 0 && req_finish(s, idx, 0) == RS_ESTALE && s->fenced)
            return RS_ESTALE;
    }
    result_clear_flight(s);
    return 0;
}

static int apply(struct sched *s, const struct rs_pipe_result *res)
{
    const struct rs_pipe_result_row *rows = rs_pipe_result_rows(res);
    const uint32_t n_rows = res->n_rows; /* read once, as checked */
    for (uint32_t i = 0; i < n_rows; i++) {
        /* Stopped here and replaced, this process would go on reading a result slot that
         * recovery redelivered and the launcher has since refilled with another batch's rows. */
        if (!rs_role_current(s->p->role))
            return sched_fence(s);
        apply_row(s, res, &rows[i]);
        RS_FAILPOINT("sched.apply.row");
    }
    if (res->status != RS_PIPE_RESULT_OK)
        rs_log_req(RS_LOG_WARN, RS_LOG_NOID, res->batch_id, "result status %s (launcher %u)",
                   res->status == RS_PIPE_RESULT_KV_LOST ? "kv_lost" : "error",
                   res->launcher_inc);
    uint64_t now = rs_clock_ns();
    if (now > s->inflight_ns)
        rs_hist_add_ns(&s->m->hist[RS_H_SCH_STEP], now - s->inflight_ns);
    int rc = finish_flight(s);
    rs_gauge_set(&s->m->counter[RS_M_SCH_APPLIED_NS_LAST], rs_clock_ns());
    return rc;
}

/* Takes one result record; 1 applied, 0 none or not ours, RS_ESTALE fenced. */
static int take_one(struct sched *s, int *got)
{
    struct rs_ring_rd rd;
    memset(&rd, 0, sizeof(rd));
    rs_err rc = rs_ring_try_get(s->p->results, &rd);
    *got = rc == RS_OK || (rc == RS_EIO && rd.data != NULL);
    if (rc == RS_EAGAIN)
        return 0;
    if (rc == RS_ESTALE)
        return sched_fence(s);
    char err[256] = "";
    int ok = rc == RS_OK &&
             rs_pipe_result_check(s->p, rd.data, rd.len, err, sizeof(err)) == RS_OK;
    const struct rs_pipe_result *res = rd.data;
    int applied = 0;
    if (!ok) {
        rs_log_error("result record seq %llu rejected: %s", (unsigned long long)rd.seq,
                     rc != RS_OK ? rs_strerror(rc) : err);
    } else if (s->inflight_id == 0 || res->batch_id != s->inflight_id) {
        rs_log_info("result for batch %llu, which is not in flight (%llu): released unused",
                    (unsigned long long)res->batch_id, (unsigned long long)s->inflight_id);
    } else {
        applied = apply(s, res);
        if (applied < 0)
            return applied;
        applied = 1;
        RS_FAILPOINT("sched.apply.done");
    }
    if (*got && rs_ring_release(s->p->results, &rd) == RS_ESTALE)
        return sched_fence(s);
    return applied;
}

int result_poll(struct sched *s)
{
    if (s->fenced)
        return RS_ESTALE;
    /* Read first: launcherd commits a result before it releases the batch, so once the batch
     * ring is drained the answer, if any, is visible to the gets below. */
    int drained = rs_ring_consumed(s->p->batches) == rs_ring_next_seq(s->p->batches);
    int applied = 0;
    for (;;) {
        int got = 0, rc = take_one(s, &got);
        if (rc < 0)
            return rc;
        applied += rc;
        if (!got)
            break;
    }
    if (s->inflight_id != 0 && drained) {
        if (s->inflight_guess) /* answered and applied before the restart, or never committed */
            rs_log_info("batch %llu is not in flight after all", (unsigned long long)s->inflight_id);
        else
            rs_log_warn("batch %llu left the ring without an answer: replanning its requests",
                        (unsigned long long)s->inflight_id);
        result_clear_flight(s);
    }
    return applied;
}

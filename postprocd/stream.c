/* SPDX-License-Identifier: MIT */
/*
 * The live path: every pass scans the published requests (doorbells only
 * wake the loop; a lost one costs a tick, DESIGN.md principle 1), feeds each
 * new output token through the request's cursor, and sends one delta per
 * token (seq = output index) when the request streams. The cursor is
 * published only after zmq took the delta, so a crash in between resends
 * that one delta with the same seq after the restart. A stop string ends
 * the request here (finish word + cancel doorbell); tokens after it are
 * ignored. Leaves out the final message and release (final.c).
 */
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/failpoint.h"
#include "ipc/pipeline_logprob.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "postprocd/postd.h"

#define READ_BATCH 256u

static struct rs_metrics_block *metrics(struct postd *d)
{
    return &d->p->metrics->stage[RS_PIPE_STAGE_POSTPROCD];
}

void postd_finish_request(struct postd *d, struct rs_table_ref ref, struct rs_pipe_req *r,
                          unsigned reason, unsigned code, unsigned cancel_reason)
{
    if (!rs_pipe_finish_set(r, rs_pipe_finish_make(reason, RS_PIPE_STAGE_POSTPROCD, code)))
        return; /* another stage ended it first; it rings schedulerd itself */
    struct rs_wire_door door;
    memset(&door, 0, offsetof(struct rs_wire_door, entries));
    door.kind = RS_WIRE_DOOR_CANCEL;
    door.u.cancel.slot = ref.index;
    door.u.cancel.gen = ref.gen;
    door.u.cancel.reason = cancel_reason;
    rs_pipe_door_send(d->doors, RS_PIPE_STAGE_SCHEDULERD, &door);
}

rs_err postd_read_output(const struct postd *d, struct rs_table_ref ref,
                         const struct rs_pipe_req *r, uint32_t from, uint32_t n, int32_t *out,
                         uint32_t *got)
{
    rs_err rc = rs_arena_read(d->p->tokens, ref, r->n_prompt + from, n, out, got);
    if (rc == RS_OK && *got < n)
        return RS_ENOENT;
    return rc;
}

rs_err postd_logprob(const struct postd *d, struct rs_table_ref ref, uint32_t k, int32_t tok,
                     struct rs_wire_logprob *lp)
{
    rs_err rc = rs_pipe_logprob_read(d->p, ref, k, tok, lp);
    if (rc != RS_OK)
        rs_log_error("logprobs of output token %u of record %u unreadable: %s", k, ref.index,
                     rs_strerror(rc));
    return rc;
}

/* Encodes the delta of output token `tok` (index seq) with its released text. */
static rs_err encode_delta(struct postd *d, struct rs_table_ref ref, const struct rs_pipe_req *r,
                           uint64_t seq, int32_t tok, size_t n_text)
{
    struct rs_wire_server_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_DELTA;
    memcpy(m.id, r->id, sizeof(m.id));
    uint32_t tok32 = (uint32_t)tok;
    m.u.delta.seq = seq;
    m.u.delta.text = (struct rs_wire_str){d->released, (uint32_t)n_text};
    m.u.delta.tokens = (struct rs_wire_ids){.n = 1, .vals = &tok32};
    if (r->sampling.n_logprobs > 0) {
        rs_err rc = postd_logprob(d, ref, (uint32_t)seq, tok, &d->lps[0]);
        if (rc != RS_OK)
            return rc;
        m.u.delta.has_logprobs = true;
        m.u.delta.logprobs = (struct rs_wire_lps){.n = 1, .vals = d->lps};
    }
    return rs_wire_server_encode(&m, &d->out);
}

/* A failure that is not the client's: the request ends with an error. */
static void fail_request(struct postd *d, struct rs_table_ref ref, struct rs_pipe_req *r,
                         rs_err rc)
{
    rs_log_req(RS_LOG_ERROR, r->handle, RS_LOG_NOID, "output of '%s' cannot be produced (%s): "
               "ending it with an error", r->id, rs_strerror(rc));
    postd_finish_request(d, ref, r, RS_WIRE_FINISH_ERROR, RS_WIRE_INTERNAL, RS_WIRE_CANCEL_ERROR);
}

/*
 * Runs one token through a copy of the cursor, sends its delta when the
 * request streams, then publishes. RS_OK, a send error (cursor unchanged),
 * or another error after which the request was failed.
 */
static rs_err step(struct postd *d, struct rs_table_ref ref, struct rs_pipe_req *r,
                   struct rs_pipe_cursor *c, int32_t tok, int32_t prev, uint64_t now)
{
    struct rs_pipe_cursor next = *c;
    size_t n_text;
    int matched;
    uint64_t t0 = rs_clock_ns();
    if (next.n_done == 0)
        postd_cursor_start(d, &next, prev);
    rs_err rc = postd_cursor_feed(d, r, &next, tok, &n_text, &matched);
    rs_hist_add_ns(&metrics(d)->hist[RS_H_POST_DETOK], rs_clock_ns() - t0);
    if (rc == RS_OK && (r->flags & RS_PIPE_F_STREAM)) {
        rc = encode_delta(d, ref, r, c->n_done, tok, n_text);
        if (rc == RS_OK && (rc = postd_send(d, r, now)) != RS_OK)
            return rc; /* not delivered: keep the cursor, retry on a later pass */
        if (rc == RS_OK)
            rs_counter_add(&metrics(d)->counter[RS_M_POST_DELTAS], 1);
    }
    if (rc != RS_OK) {
        fail_request(d, ref, r, rc);
        return rc;
    }
    RS_FAILPOINT("postprocd.delta_sent"); /* crash test: the delta is out, the cursor is not */
    if (!rs_role_current(d->p->role)) {
        /* Replaced while stopped here: the new incarnation owns the cursor now, and a stale
         * publish would move it back (crash.chaos.stopped_stage_replaced_then_resumed_...). */
        d->fenced = 1;
        return RS_ESTALE;
    }
    postd_cursor_publish(r, &next);
    *c = next;
    if (matched) {
        rs_counter_add(&metrics(d)->counter[RS_M_POST_STOP_HITS], 1);
        rs_log_req(RS_LOG_DEBUG, r->handle, RS_LOG_NOID, "stop string %d matched at output "
                   "token %u", next.stop.which, next.n_done - 1);
        postd_finish_request(d, ref, r, RS_WIRE_FINISH_STOP, 0, RS_WIRE_CANCEL_STOP);
    }
    return RS_OK;
}

/* Processes the output tokens [c->n_done, n_out). RS_OK when all went out. */
static rs_err advance(struct postd *d, struct rs_table_ref ref, struct rs_pipe_req *r,
                      struct rs_pipe_cursor *c, uint32_t n_out, uint64_t now)
{
    int32_t prev = c->n_done == 0 ? postd_prev_token(d, ref, r) : RS_VOCAB_NONE;
    while (c->n_done < n_out && !c->stop.matched) {
        uint32_t want = n_out - c->n_done < READ_BATCH ? n_out - c->n_done : READ_BATCH, got;
        rs_err rc = postd_read_output(d, ref, r, c->n_done, want, d->toks, &got);
        if (rc != RS_OK)
            return rc;
        for (uint32_t i = 0; i < got && !c->stop.matched; i++)
            if ((rc = step(d, ref, r, c, d->toks[i], prev, now)) != RS_OK)
                return rc;
    }
    return RS_OK;
}

static struct postd_slot *slot_of(struct postd *d, struct rs_table_ref ref)
{
    struct postd_slot *s = &d->slots[ref.index];
    if (!s->known || s->gen != ref.gen) {
        memset(s, 0, sizeof(*s));
        s->gen = ref.gen;
        s->known = 1;
    }
    return s;
}

/* The client has been unreachable past the timeout: abort, and release once finished. */
static void give_up(struct postd *d, struct rs_table_ref ref, struct rs_pipe_req *r,
                    struct postd_slot *s, uint32_t state)
{
    if (!s->gone_logged) {
        s->gone_logged = 1;
        rs_counter_add(&metrics(d)->counter[RS_M_POST_GONE], 1);
        rs_log_req(RS_LOG_WARN, r->handle, RS_LOG_NOID, "client of '%s' unreachable for over "
                   "%llu ms: aborting the request", r->id,
                   (unsigned long long)(d->client_timeout_ns / 1000000u));
    }
    postd_finish_request(d, ref, r, RS_WIRE_FINISH_ABORT, 0, RS_WIRE_CANCEL_GONE);
    if (state == RS_PIPE_REQ_FINISHED)
        postd_release(d, ref, "client gone");
}

static void request(struct postd *d, struct rs_table_ref ref, uint32_t state, uint64_t now)
{
    struct rs_pipe_req *r = rs_pipe_req_at(d->p, ref.index);
    struct postd_slot *s = slot_of(d, ref);
    const struct rs_pipe_cursor *cur = rs_pipe_cursor_cur(r); /* only this process writes it */
    if (cur->final_sent) {
        if (s->final_at_ns == 0)
            s->final_at_ns = now; /* sent before a restart: the linger starts again */
        if (now - s->final_at_ns >= d->linger_ns)
            postd_release(d, ref, "linger over");
        return;
    }
    if (r->unreachable_ns != 0 && now - r->unreachable_ns >= d->client_timeout_ns) {
        give_up(d, ref, r, s, state);
        return;
    }
    uint32_t len, word = atomic_load_explicit(&r->finish, memory_order_acquire);
    /* After postprocd itself failed the request, its output stops where the failure was. */
    int failed_here = rs_pipe_finish_reason(word) == RS_WIRE_FINISH_ERROR &&
                      rs_pipe_finish_who(word) == RS_PIPE_STAGE_POSTPROCD;
    /* State was read before the length: FINISHED means the list is final (no more appends). */
    if (rs_arena_len(d->p->tokens, ref, &len) != RS_OK || len < r->n_prompt)
        return;
    int idle = cur->n_done >= len - r->n_prompt || cur->stop.matched || failed_here;
    if (idle && state != RS_PIPE_REQ_FINISHED)
        return; /* the common case on a pass: nothing new for this request */
    struct rs_pipe_cursor c = *cur;
    if (!failed_here && advance(d, ref, r, &c, len - r->n_prompt, now) != RS_OK)
        return;
    if (state == RS_PIPE_REQ_FINISHED && postd_send_final(d, ref, r, &c, now) == RS_OK)
        s->final_at_ns = now;
}

void postd_scan(struct postd *d)
{
    uint32_t cursor = 0, state;
    struct rs_table_ref ref;
    uint64_t published = ~((1ull << RS_TABLE_USER) - 1);
    uint64_t now = rs_clock_ns();
    while (rs_table_next(d->p->requests, &cursor, published, &ref, &state) == RS_OK) {
        if (!rs_role_current(d->p->role)) {
            d->fenced = 1;
            return;
        }
        request(d, ref, state, now);
    }
}

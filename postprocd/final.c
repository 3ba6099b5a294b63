/* SPDX-License-Identifier: MIT */
/*
 * The end of a request: the final message (finish_reason, usage, timings),
 * the output walker that recomputes a request's messages from its token
 * list (non-streamed output, and resume after a gap), and releasing the
 * record after the linger period. The walker is deterministic (detokenizer
 * and stop matcher are pure functions of the tokens), so a replay resends
 * byte-identical messages under the same sequence numbers and a client
 * simply drops the ones it has. Non-streamed output larger than one message
 * (RS_WIRE_OUT_TOKENS_MAX tokens or RS_WIRE_TEXT_MAX bytes) goes out as
 * deltas before the final (PROTOCOL.md §4.5).
 */
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/failpoint.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "postprocd/postd.h"


/* A message being assembled: d->msg_tokens, d->lps and d->text hold its contents. */
struct walk {
    struct postd *d;
    struct rs_table_ref ref;
    struct rs_pipe_req *r;
    uint64_t from_seq, seq, now;
    uint32_t n_toks;
    size_t n_text;
};

static struct rs_metrics_block *metrics(struct postd *d)
{
    return &d->p->metrics->stage[RS_PIPE_STAGE_POSTPROCD];
}

static uint64_t since_us(uint64_t from_ns, uint64_t to_ns)
{
    return from_ns != 0 && to_ns > from_ns ? rs_clock_ns_to_us(to_ns - from_ns) : 0;
}

static void fill_out(struct walk *w, struct rs_wire_delta *out)
{
    out->seq = w->seq;
    out->text = (struct rs_wire_str){w->d->text, (uint32_t)w->n_text};
    out->tokens = (struct rs_wire_ids){.n = w->n_toks, .vals = w->d->msg_tokens};
    if (w->r->sampling.n_logprobs > 0) {
        out->has_logprobs = true;
        out->logprobs = (struct rs_wire_lps){.n = w->n_toks, .vals = w->d->lps};
    }
}

/* Sends the assembled message when its seq is wanted, then starts the next one. */
static rs_err emit(struct walk *w, const struct rs_wire_server_msg *m)
{
    rs_err rc = RS_OK;
    if (w->seq >= w->from_seq) {
        rc = rs_wire_server_encode(m, &w->d->out);
        if (rc == RS_OK)
            rc = postd_send(w->d, w->r, w->now);
        if (rc == RS_OK && m->type == RS_WIRE_T_DELTA)
            rs_counter_add(&metrics(w->d)->counter[RS_M_POST_DELTAS], 1);
    }
    w->seq++;
    w->n_toks = 0;
    w->n_text = 0;
    return rc;
}

static rs_err emit_delta(struct walk *w)
{
    struct rs_wire_server_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_DELTA;
    memcpy(m.id, w->r->id, sizeof(m.id));
    fill_out(w, &m.u.delta);
    return emit(w, &m);
}

/* finish_reason and error code from the finish word (and the cursor's stop match). */
static void finish_of(const struct rs_pipe_req *r, int stop_matched, struct rs_wire_final *f)
{
    uint32_t word = atomic_load_explicit(&r->finish, memory_order_acquire);
    unsigned reason = rs_pipe_finish_reason(word);
    if (reason == RS_WIRE_FINISH_NONE || reason >= RS_WIRE_FINISH_COUNT) {
        rs_log_req(RS_LOG_WARN, r->handle, RS_LOG_NOID, "'%s' finished with finish word 0x%x: "
                   "reported as an internal error", r->id, word);
        reason = RS_WIRE_FINISH_ERROR;
    }
    if (stop_matched && reason != RS_WIRE_FINISH_ERROR)
        reason = RS_WIRE_FINISH_STOP; /* our stop string cut the output, whoever ended it */
    f->finish_reason = (enum rs_wire_finish)reason;
    f->error = RS_WIRE_OK;
    if (reason == RS_WIRE_FINISH_ERROR) {
        unsigned code = rs_pipe_finish_code(word);
        f->error = code > RS_WIRE_OK && code < RS_WIRE_CODE_COUNT ? (enum rs_wire_code)code
                                                                  : RS_WIRE_INTERNAL;
    }
}

static rs_err emit_final(struct walk *w, uint32_t n_done, int stop_matched)
{
    const struct rs_pipe_req *r = w->r;
    struct rs_wire_server_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_FINAL;
    memcpy(m.id, r->id, sizeof(m.id));
    struct rs_wire_final *f = &m.u.final;
    fill_out(w, &f->out);
    finish_of(r, stop_matched, f);
    char why[96];
    if (f->finish_reason == RS_WIRE_FINISH_ERROR) {
        unsigned who = rs_pipe_finish_who(atomic_load(&r->finish));
        int n = snprintf(why, sizeof(why), "the request failed in %s",
                         rs_pipe_stage_name((enum rs_pipe_stage)who));
        f->message = (struct rs_wire_str){why, (uint32_t)n};
    }
    f->usage = (struct rs_wire_usage){.prompt_tokens = r->n_prompt, .completion_tokens = n_done,
                                      .cached_tokens = r->n_cached};
    uint64_t end = r->finished_ns != 0 ? r->finished_ns : w->now;
    f->timings = (struct rs_wire_timings){
        .queue_us = since_us(r->accepted_ns, r->scheduled_ns),
        .ttft_us = since_us(r->accepted_ns, atomic_load(&r->first_token_ns)),
        .total_us = since_us(r->accepted_ns, end)};
    return emit(w, &m);
}

/* Adds text to the message, closing the current one first when it would not fit. */
static rs_err add_text(struct walk *w, const char *text, size_t n)
{
    rs_err rc = RS_OK;
    if (w->n_text + n > RS_WIRE_TEXT_MAX)
        rc = emit_delta(w);
    memcpy(w->d->text + w->n_text, text, n);
    w->n_text += n;
    return rc;
}

/* Adds output token k with its text; streaming requests send it as its own delta. */
static rs_err add_token(struct walk *w, uint32_t k, int32_t tok, size_t n_text)
{
    struct postd *d = w->d;
    int stream = (w->r->flags & RS_PIPE_F_STREAM) != 0;
    rs_err rc = RS_OK;
    if (!stream && (w->n_toks == RS_WIRE_OUT_TOKENS_MAX || w->n_text + n_text > RS_WIRE_TEXT_MAX))
        rc = emit_delta(w);
    if (rc != RS_OK)
        return rc;
    if (w->r->sampling.n_logprobs > 0 && w->seq >= w->from_seq &&
        (rc = postd_logprob(d, w->ref, k, tok, &d->lps[w->n_toks])) != RS_OK)
        return rc;
    d->msg_tokens[w->n_toks++] = (uint32_t)tok;
    memcpy(d->text + w->n_text, d->released, n_text);
    w->n_text += n_text;
    return stream ? emit_delta(w) : RS_OK;
}

rs_err postd_walk(struct postd *d, struct rs_table_ref ref, struct rs_pipe_req *r,
                  uint32_t n_tokens, uint64_t from_seq, int with_final, uint64_t now)
{
    struct walk w = {.d = d, .ref = ref, .r = r, .from_seq = from_seq, .now = now};
    struct rs_pipe_cursor c;
    postd_cursor_start(d, &c, postd_prev_token(d, ref, r));
    rs_err rc = RS_OK;
    for (uint32_t done = 0; done < n_tokens && rc == RS_OK;) {
        uint32_t want = n_tokens - done < 256 ? n_tokens - done : 256, got;
        rc = postd_read_output(d, ref, r, done, want, d->toks, &got);
        for (uint32_t i = 0; i < got && rc == RS_OK; i++, done++) {
            size_t n_text;
            int matched;
            rc = postd_cursor_feed(d, r, &c, d->toks[i], &n_text, &matched);
            if (rc == RS_OK)
                rc = add_token(&w, done, d->toks[i], n_text);
        }
    }
    if (rc != RS_OK || !with_final)
        return rc;
    size_t n_text;
    if ((rc = postd_cursor_flush(d, r, &c, &n_text)) == RS_OK &&
        (rc = add_text(&w, d->released, n_text)) == RS_OK)
        rc = emit_final(&w, c.n_done, c.stop.matched);
    return rc;
}

/* Streaming: the final carries only what the cursor still holds back. */
static rs_err stream_final(struct postd *d, struct rs_table_ref ref, struct rs_pipe_req *r,
                           struct rs_pipe_cursor *c, uint64_t now)
{
    struct walk w = {.d = d, .ref = ref, .r = r, .from_seq = 0, .seq = c->n_done, .now = now};
    size_t n_text;
    rs_err rc = postd_cursor_flush(d, r, c, &n_text);
    if (rc != RS_OK)
        return rc;
    memcpy(d->text, d->released, n_text);
    w.n_text = n_text;
    return emit_final(&w, c->n_done, c->stop.matched);
}

static void final_metrics(struct postd *d, const struct rs_pipe_req *r, uint32_t n_done)
{
    struct rs_metrics_block *m = metrics(d);
    uint64_t first = atomic_load(&r->first_token_ns), end = r->finished_ns;
    rs_counter_add(&m->counter[RS_M_POST_FINALS], 1);
    if (first != 0)
        rs_hist_add(&m->hist[RS_H_POST_TTFT], since_us(r->accepted_ns, first));
    if (first != 0 && end > first && n_done > 1)
        rs_hist_add(&m->hist[RS_H_POST_TPOT], since_us(first, end) / (n_done - 1));
    if (end != 0)
        rs_hist_add(&m->hist[RS_H_POST_E2E], since_us(r->accepted_ns, end));
}

rs_err postd_send_final(struct postd *d, struct rs_table_ref ref, struct rs_pipe_req *r,
                        const struct rs_pipe_cursor *c, uint64_t now)
{
    struct rs_pipe_cursor next = *c;
    if (next.n_done == 0)
        postd_cursor_start(d, &next, postd_prev_token(d, ref, r));
    rs_err rc = (r->flags & RS_PIPE_F_STREAM)
                    ? stream_final(d, ref, r, &next, now)
                    : postd_walk(d, ref, r, next.n_done, 0, 1, now);
    if (rc != RS_OK)
        return rc;
    RS_FAILPOINT("postprocd.final_sent"); /* crash test: the final is out, final_sent is not */
    if (!rs_role_current(d->p->role)) {
        /* Replaced while stopped: a final_sent written now would let the new incarnation
         * release output whose final may never have left this process. */
        d->fenced = 1;
        return RS_ESTALE;
    }
    next.final_sent = 1;
    postd_cursor_publish(r, &next);
    final_metrics(d, r, next.n_done);
    rs_log_req(RS_LOG_DEBUG, r->handle, RS_LOG_NOID, "final of '%s' sent: %u tokens",
               r->id, next.n_done);
    return RS_OK;
}

int postd_release(struct postd *d, struct rs_table_ref ref, const char *why)
{
    uint64_t handle = rs_pipe_req_at(d->p, ref.index)->handle;
    rs_err rc = rs_arena_free_record(d->p->tokens, d->p->requests, ref, RS_PIPE_REQ_FINISHED);
    if (rc == RS_OK) {
        rs_log_req(RS_LOG_DEBUG, handle, RS_LOG_NOID, "released (%s)", why);
        return 1;
    }
    if (rc == RS_ESTALE && !rs_role_current(d->p->role))
        d->fenced = 1;
    else if (rc != RS_EAGAIN && rc != RS_ESTALE)
        rs_log_req(RS_LOG_ERROR, handle, RS_LOG_NOID, "cannot release record %u: %s",
                   ref.index, rs_strerror(rc));
    return 0;
}

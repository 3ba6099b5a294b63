/* SPDX-License-Identifier: MIT */
/*
 * Messages from the daemons. tokenizerd: ack (stop resending, send a
 * pending cancel), error (a refused generate ends the request; an error
 * about a cancel is only logged). postprocd: welcome, delta and final, each
 * checked against the request's next expected sequence number: a repeat is
 * dropped, a jump means something was lost, so the message is dropped and a
 * resume asks for everything from the first missing one (postprocd replays in
 * order with the same numbers). Nothing is buffered out of order, so memory
 * stays bounded however the stream is mangled.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_impl.h"
#include "common/clock.h"
#include "common/log.h"

/* A message string for %.*s: never NULL. */
#define STR_ARGS(s) (int)(s).len, (s).len > 0 ? (s).ptr : ""

static void on_ack(rs_client *c, struct creq *q, const struct rs_wire_ack *a, uint64_t now)
{
    if (q->acked)
        return; /* the answer to a resend */
    c->tok_resends = 0;
    q->acked = true;
    q->handle = a->handle;
    q->seed = a->seed;
    q->prompt_tokens = a->prompt_tokens;
    q->gen_due_ns = 0;
    q->last_rx_ns = now;
    free(q->gen_msg); /* committed: never sent again */
    q->gen_msg = NULL;
    c->st.acked++;
    if (q->cancel_wanted)
        creq_send_cancel(c, q, now);
    if (q->replay && q->next_seq == 0)
        creq_send_resume(c, q, now); /* output of an earlier submission comes at once */
    if (q->want_ack && q->cb != NULL) {
        struct rs_client_event ev;
        creq_event_init(q, &ev, RS_CLIENT_EV_ACK, now);
        ev.seq = 0;
        c->events++;
        q->cb(&ev);
    }
}

static void on_tok_error(rs_client *c, struct creq *q, const struct rs_wire_server_msg *m)
{
    const struct rs_wire_err_reply *e = &m->u.error;
    if (q->acked || q->next_seq > 0) {
        /* About a cancel (the request already ended, say): the final still comes. */
        rs_log_debug("client: tokenizerd about '%s': %s: %.*s", q->id, rs_wire_code_name(e->code),
                     STR_ARGS(e->message));
        return;
    }
    if (e->code == RS_WIRE_FORBIDDEN && q->forbidden < 3) {
        /* The generate may have arrived on a connection tokenizerd had not bound to us yet
         * (the hello lost with a connection that dropped between the two): send both again. */
        q->forbidden++;
        q->gen_due_ns = rs_clock_ns();
        return;
    }
    rs_log_debug("client: request '%s' refused: %s: %.*s", q->id, rs_wire_code_name(e->code),
                 STR_ARGS(e->message));
    creq_fail(c, q, RS_CLIENT_REFUSED, e->code, e->message.ptr, e->message.len);
}

/*
 * The sequence check: 1 when m is the next message of q, 0 when it must be
 * dropped (a repeat, or after a gap: a resume goes out unless one is pending).
 */
static int in_order(rs_client *c, struct creq *q, uint64_t seq, uint64_t now)
{
    q->last_rx_ns = now;
    if (seq == q->next_seq)
        return 1;
    if (seq < q->next_seq) {
        c->st.duplicates++;
        return 0;
    }
    c->st.gaps++;
    if (!q->resume_pending || now - q->resume_ns >= (uint64_t)c->stall_ms * 1000000ull) {
        rs_log_info("client: request '%s': got seq %llu, expected %llu: resuming", q->id,
                    (unsigned long long)seq, (unsigned long long)q->next_seq);
        creq_send_resume(c, q, now);
        q->resume_pending = true;
    }
    return 0;
}

/* Fills the output part of ev from a delta (tokens and logprobs copied out of the message). */
static void fill_output(rs_client *c, struct rs_client_event *ev, const struct rs_wire_delta *d)
{
    ev->seq = d->seq;
    ev->text = d->text.len > 0 ? d->text.ptr : "";
    ev->text_len = d->text.len;
    ev->n_tokens = rs_wire_ids_copy(&d->tokens, c->tok_buf, RS_WIRE_OUT_TOKENS_MAX);
    ev->tokens = c->tok_buf;
    if (d->has_logprobs && d->logprobs.n > 0) {
        if (c->lp_buf == NULL)
            c->lp_buf = malloc(sizeof(*c->lp_buf) * RS_WIRE_OUT_TOKENS_MAX);
        if (c->lp_buf != NULL) {
            rs_wire_lps_copy(&d->logprobs, c->lp_buf, RS_WIRE_OUT_TOKENS_MAX);
            ev->logprobs = c->lp_buf;
        } else {
            rs_log_error("client: out of memory for the logprobs of '%s'", ev->id);
        }
    }
}

/* Counts the message as progress of q: the stall clock restarts. */
static void advance(struct creq *q, const struct rs_client_event *ev, uint32_t stall_ms)
{
    q->next_seq++;
    q->n_out += ev->n_tokens;
    q->resume_pending = false;
    q->stall_ivl_ms = stall_ms;
}

static void on_delta(rs_client *c, struct creq *q, const struct rs_wire_delta *d, uint64_t now)
{
    if (!in_order(c, q, d->seq, now))
        return;
    struct rs_client_event ev;
    creq_event_init(q, &ev, RS_CLIENT_EV_DELTA, now);
    fill_output(c, &ev, d);
    advance(q, &ev, c->stall_ms);
    c->st.deltas++;
    c->events++;
    if (q->cb != NULL)
        q->cb(&ev);
}

static void on_final(rs_client *c, struct creq *q, const struct rs_wire_final *f, uint64_t now)
{
    char msg[RS_WIRE_MESSAGE_MAX + 1];
    if (!in_order(c, q, f->out.seq, now))
        return;
    struct rs_client_event ev;
    creq_event_init(q, &ev, RS_CLIENT_EV_FINAL, now);
    fill_output(c, &ev, &f->out);
    ev.status = RS_CLIENT_OK;
    ev.finish_reason = f->finish_reason;
    ev.usage = f->usage;
    ev.timings = f->timings;
    ev.error = f->error;
    snprintf(msg, sizeof(msg), "%.*s", STR_ARGS(f->message));
    ev.message = msg;
    if (!client_keeps(c, q->id))
        client_send_release(c, q->id);
    creq_finish(c, q, &ev);
}

static void on_post_error(rs_client *c, struct creq *q, const struct rs_wire_err_reply *e)
{
    if (e->code == RS_WIRE_NOT_FOUND && (q->acked || q->next_seq > 0)) {
        rs_log_warn("client: postprocd no longer holds the output of '%s' (from seq %llu)",
                    q->id, (unsigned long long)q->next_seq);
        creq_fail(c, q, RS_CLIENT_LOST, e->code, e->message.ptr, e->message.len);
        return;
    }
    rs_log_warn("client: postprocd about '%s': %s: %.*s", q->id, rs_wire_code_name(e->code),
                STR_ARGS(e->message));
}

static void on_welcome(rs_client *c, uint64_t now)
{
    c->welcomed = true;
    c->hellos_unanswered = 0;
    c->hello_due_ns = 0;
    c->hello_ivl_ms = CLIENT_HELLO_FIRST_MS;
    for (uint32_t i = 0; i < c->n_live; i++) {
        struct creq *q = &c->reqs[c->live[i]];
        if (!q->acked && !q->gen_sent_once)
            q->gen_due_ns = now; /* waiting for this welcome */
    }
}

void client_on_message(rs_client *c, bool from_post, const uint8_t *buf, size_t len,
                       uint64_t now)
{
    struct rs_wire_server_msg m;
    struct rs_wire_error err;
    if (rs_wire_server_decode(buf, len, &m, &err) != RS_OK) {
        c->st.malformed++;
        rs_log_warn("client: undecodable message from %s: %s: %s",
                    from_post ? "postprocd" : "tokenizerd", rs_wire_code_name(err.code), err.msg);
        return;
    }
    if (m.type == RS_WIRE_T_WELCOME) {
        if (from_post)
            on_welcome(c, now);
        return;
    }
    struct creq *q = m.id[0] != '\0' ? creq_find(c, m.id, strlen(m.id)) : NULL;
    if (q == NULL && from_post && m.type == RS_WIRE_T_FINAL && !client_keeps(c, m.id))
        client_send_release(c, m.id); /* a repeat after ours was lost: postprocd still holds it */
    if (q == NULL) {
        if (m.type == RS_WIRE_T_ERROR && m.id[0] == '\0')
            rs_log_warn("client: %s refused a message: %s: %.*s",
                        from_post ? "postprocd" : "tokenizerd",
                        rs_wire_code_name(m.u.error.code), STR_ARGS(m.u.error.message));
        c->st.strays++;
        return;
    }
    if (!from_post && m.type == RS_WIRE_T_ACK)
        on_ack(c, q, &m.u.ack, now);
    else if (!from_post && m.type == RS_WIRE_T_ERROR)
        on_tok_error(c, q, &m);
    else if (from_post && m.type == RS_WIRE_T_DELTA)
        on_delta(c, q, &m.u.delta, now);
    else if (from_post && m.type == RS_WIRE_T_FINAL)
        on_final(c, q, &m.u.final, now);
    else if (from_post && m.type == RS_WIRE_T_ERROR)
        on_post_error(c, q, &m.u.error);
    else
        c->st.strays++;
}

/* SPDX-License-Identifier: MIT */
/*
 * The client's requests in flight: a fixed table (max_requests slots, so a
 * client's memory is bounded) with an id hash, submit and cancel, and the
 * timers that make delivery reliable: resend a generate tokenizerd has not
 * acknowledged, retry a cancel until the final comes, resume a request that
 * went quiet (postprocd may have lost the tail of its output), say hello
 * again, and end a request whose time limit passed. Intervals back off, so a
 * long outage costs a few messages, not a flood.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_impl.h"
#include "common/clock.h"
#include "common/log.h"

#define MS 1000000ull
#define SEND_RETRY_MS 100u /* retry of a send refused because the daemon is not connected */

static uint64_t id_hash(const char *id, size_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)id[i]) * 1099511628211ull;
    return h;
}

rs_err creq_table_init(rs_client *c, uint32_t cap)
{
    c->cap = cap;
    c->index_cap = 16;
    while (c->index_cap < 2 * cap)
        c->index_cap *= 2;
    c->reqs = calloc(cap, sizeof(*c->reqs));
    c->live = calloc(cap, sizeof(*c->live));
    c->free_slots = calloc(cap, sizeof(*c->free_slots));
    c->index = calloc(c->index_cap, sizeof(*c->index));
    if (c->reqs == NULL || c->live == NULL || c->free_slots == NULL || c->index == NULL)
        return RS_ENOMEM;
    for (uint32_t i = 0; i < cap; i++)
        c->free_slots[i] = cap - 1 - i;
    c->n_free = cap;
    return RS_OK;
}

void creq_table_fini(rs_client *c)
{
    for (uint32_t i = 0; i < c->n_live && c->reqs != NULL; i++)
        free(c->reqs[c->live[i]].gen_msg);
    free(c->reqs);
    free(c->live);
    free(c->free_slots);
    free(c->index);
    c->reqs = NULL;
    c->n_live = 0;
}

struct creq *creq_find(rs_client *c, const char *id, size_t len)
{
    uint32_t mask = c->index_cap - 1;
    for (uint32_t i = (uint32_t)id_hash(id, len) & mask; c->index[i] != 0; i = (i + 1) & mask) {
        struct creq *q = &c->reqs[c->index[i] - 1];
        if (strlen(q->id) == len && memcmp(q->id, id, len) == 0)
            return q;
    }
    return NULL;
}

static void index_insert(rs_client *c, uint32_t slot)
{
    uint32_t mask = c->index_cap - 1;
    const char *id = c->reqs[slot].id;
    uint32_t i = (uint32_t)id_hash(id, strlen(id)) & mask;
    while (c->index[i] != 0)
        i = (i + 1) & mask;
    c->index[i] = slot + 1;
}

/* Linear-probing delete with backward shift, so lookups never need tombstones. */
static void index_remove(rs_client *c, uint32_t slot)
{
    uint32_t mask = c->index_cap - 1;
    const char *id = c->reqs[slot].id;
    uint32_t i = (uint32_t)id_hash(id, strlen(id)) & mask;
    while (c->index[i] != slot + 1)
        i = (i + 1) & mask;
    for (uint32_t j = (i + 1) & mask; c->index[j] != 0; j = (j + 1) & mask) {
        const char *jid = c->reqs[c->index[j] - 1].id;
        uint32_t home = (uint32_t)id_hash(jid, strlen(jid)) & mask;
        /* the entry at j may move to the hole at i unless its home lies in (i, j] */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            c->index[i] = c->index[j];
            i = j;
        }
    }
    c->index[i] = 0;
}

static void slot_free(rs_client *c, struct creq *q)
{
    uint32_t slot = (uint32_t)(q - c->reqs);
    index_remove(c, slot);
    free(q->gen_msg);
    uint32_t last = c->live[--c->n_live];
    c->live[q->pos] = last;
    c->reqs[last].pos = q->pos;
    memset(q, 0, sizeof(*q));
    c->free_slots[c->n_free++] = slot;
}

void creq_event_init(const struct creq *q, struct rs_client_event *ev, enum rs_client_ev_kind k,
                     uint64_t now)
{
    memset(ev, 0, sizeof(*ev));
    ev->kind = k;
    ev->id = q->id;
    ev->user = q->user;
    ev->seq = q->next_seq;
    ev->text = "";
    ev->submit_ns = q->submit_ns;
    ev->recv_ns = now;
    ev->acked = q->acked;
    ev->handle = q->handle;
    ev->seed = q->seed;
    ev->prompt_tokens = q->prompt_tokens;
    ev->message = "";
}

void creq_finish(rs_client *c, struct creq *q, struct rs_client_event *ev)
{
    c->st.finished++;
    c->events++;
    if (q->cb != NULL)
        q->cb(ev);
    slot_free(c, q);
}

void creq_fail(rs_client *c, struct creq *q, enum rs_client_status status,
               enum rs_wire_code code, const char *msg, size_t msg_len)
{
    char text[RS_WIRE_MESSAGE_MAX + 1];
    struct rs_client_event ev;
    size_t n = msg_len < RS_WIRE_MESSAGE_MAX ? msg_len : RS_WIRE_MESSAGE_MAX;
    if (n > 0)
        memcpy(text, msg, n);
    text[n] = '\0';
    creq_event_init(q, &ev, RS_CLIENT_EV_FINAL, rs_clock_ns());
    ev.status = status;
    ev.finish_reason = RS_WIRE_FINISH_ERROR;
    ev.error = code;
    ev.message = text;
    ev.usage.prompt_tokens = q->prompt_tokens;
    ev.usage.completion_tokens = q->n_out;
    creq_finish(c, q, &ev);
}

/* A request id: the given one (checked), or the next counter value not in flight. */
static rs_err pick_id(rs_client *c, const char *given, char *out)
{
    if (given != NULL) {
        size_t len = strlen(given);
        if (!rs_wire_id_valid(given, len)) {
            rs_log_error("client: request id '%.64s' must be 1..%d printable ASCII bytes, "
                         "no spaces", given, RS_WIRE_ID_MAX);
            return RS_EINVAL;
        }
        if (creq_find(c, given, len) != NULL)
            return RS_EEXIST;
        memcpy(out, given, len + 1);
        return RS_OK;
    }
    do
        snprintf(out, RS_CLIENT_ID_CAP, "%llu", (unsigned long long)++c->next_id);
    while (creq_find(c, out, strlen(out)) != NULL);
    return RS_OK;
}

/* Encodes the generate once; resends reuse the same bytes (tokenizerd dedups on them). */
static rs_err encode_generate(rs_client *c, const char *id, const struct rs_wire_generate *g,
                              uint8_t **msg, size_t *len)
{
    struct rs_wire_client_msg m;
    m.type = RS_WIRE_T_GENERATE;
    memcpy(m.id, id, strlen(id) + 1);
    m.u.gen = *g;
    rs_err rc = rs_wire_client_encode(&m, &c->enc);
    if (rc != RS_OK) {
        rs_log_error("client: request '%s' cannot be encoded (%s): see above", id,
                     rs_strerror(rc));
        return RS_EINVAL;
    }
    *msg = malloc(c->enc.len);
    if (*msg == NULL)
        return RS_ENOMEM;
    memcpy(*msg, c->enc.data, c->enc.len);
    *len = c->enc.len;
    return RS_OK;
}

rs_err rs_client_submit(rs_client *c, const struct rs_wire_generate *g,
                        const struct rs_client_req_opts *o, rs_client_cb cb, void *user,
                        char *id_out)
{
    char id[RS_CLIENT_ID_CAP];
    if (c == NULL || g == NULL)
        return RS_EINVAL;
    rs_err rc = pick_id(c, o != NULL ? o->id : NULL, id);
    if (rc != RS_OK)
        return rc;
    if (c->n_free == 0)
        return RS_EFULL;
    uint8_t *msg;
    size_t len;
    if ((rc = encode_generate(c, id, g, &msg, &len)) != RS_OK)
        return rc;
    uint32_t slot = c->free_slots[--c->n_free];
    struct creq *q = &c->reqs[slot];
    uint64_t now = rs_clock_ns();
    uint32_t limit = o != NULL && o->timeout_ms != 0 ? o->timeout_ms : c->request_timeout_ms;
    memset(q, 0, sizeof(*q));
    memcpy(q->id, id, sizeof(id));
    q->cb = cb;
    q->user = user;
    q->gen_msg = msg;
    q->gen_len = len;
    q->submit_ns = now;
    q->deadline_ns = limit != 0 ? now + limit * MS : 0;
    q->gen_ivl_ms = c->ack_timeout_ms;
    q->stall_ivl_ms = c->stall_ms;
    q->gen_due_ns = now; /* sent by the timers once postprocd has welcomed us */
    q->want_ack = o != NULL && o->want_ack;
    q->replay = o != NULL && o->replay;
    q->pos = c->n_live;
    c->live[c->n_live++] = slot;
    index_insert(c, slot);
    c->st.submitted++;
    if (c->welcomed)
        creq_send_generate(c, q, now);
    if (id_out != NULL)
        memcpy(id_out, id, sizeof(id));
    return RS_OK;
}

rs_err rs_client_replay(rs_client *c, const char *id, rs_client_cb cb, void *user)
{
    struct creq *q = id != NULL ? creq_find(c, id, strlen(id)) : NULL;
    if (q == NULL)
        return RS_ENOENT;
    q->cb = cb;
    q->user = user;
    uint64_t now = rs_clock_ns();
    if (q->acked && q->want_ack && cb != NULL) {
        struct rs_client_event ev;
        creq_event_init(q, &ev, RS_CLIENT_EV_ACK, now);
        ev.seq = 0;
        cb(&ev);
    }
    if (q->next_seq == 0)
        return RS_OK; /* nothing was delivered yet: the new callback gets everything anyway */
    /* Everything again from seq 0; what is in flight now arrives as a gap and is dropped. */
    q->next_seq = 0;
    q->n_out = 0;
    creq_send_resume(c, q, now);
    q->resume_pending = true;
    return RS_OK;
}

bool client_keeps(const rs_client *c, const char *id)
{
    return c->keep_len > 0 && strncmp(id, c->keep_prefix, c->keep_len) == 0;
}

rs_err rs_client_cancel(rs_client *c, const char *id)
{
    struct creq *q = id != NULL ? creq_find(c, id, strlen(id)) : NULL;
    if (q == NULL)
        return RS_ENOENT;
    if (q->cancel_wanted)
        return RS_OK;
    q->cancel_wanted = true;
    if (q->acked)
        creq_send_cancel(c, q, rs_clock_ns());
    return RS_OK;
}

void creq_send_generate(rs_client *c, struct creq *q, uint64_t now)
{
    /* The hello first on the same connection (ordered): after a tokenizerd restart or a
     * reconnect the new connection is bound to this client before the generate arrives. */
    client_unpark(c, false, now);
    if (client_hello_tok(c) != RS_OK ||
        client_send(c, c->tok, q->gen_msg, q->gen_len) != RS_OK) {
        q->gen_due_ns = now + SEND_RETRY_MS * MS; /* not connected: the handshake also retries */
        return;
    }
    c->st.gen_sent++;
    if (q->gen_sent_once) {
        c->st.gen_resent++;
        rs_log_info("client: request '%s' not acknowledged: sent again", q->id);
        /* A send that opens a new connection says nothing about it: counting it would
         * reconnect at once, and a server slower than the 100 ms park never gets to answer. */
        if (!q->gen_new_conn && ++c->tok_resends >= 2) {
            c->tok_resends = 0;
            client_reconnect(c, false); /* the next resend goes on the new connection */
        }
    }
    q->gen_sent_once = true;
    q->gen_new_conn = false;
    q->gen_due_ns = now + (uint64_t)q->gen_ivl_ms * MS;
    q->gen_ivl_ms = q->gen_ivl_ms * 2 > CLIENT_BACKOFF_MAX_MS ? CLIENT_BACKOFF_MAX_MS
                                                              : q->gen_ivl_ms * 2;
}

void creq_send_cancel(rs_client *c, struct creq *q, uint64_t now)
{
    struct rs_wire_client_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_CANCEL;
    memcpy(m.id, q->id, strlen(q->id) + 1);
    bool sent = client_hello_tok(c) == RS_OK && client_send_msg(c, c->tok, &m) == RS_OK;
    c->st.cancels_sent += sent;
    /* Until the final arrives: a cancel can be lost with a tokenizerd that died. */
    q->cancel_due_ns = now + (uint64_t)(sent ? c->ack_timeout_ms : SEND_RETRY_MS) * MS;
}

void client_send_release(rs_client *c, const char *id)
{
    struct rs_wire_client_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_RELEASE;
    snprintf(m.id, sizeof(m.id), "%s", id);
    if (client_send_msg(c, c->post, &m) == RS_OK)
        c->st.releases++;
}

void creq_send_resume(rs_client *c, struct creq *q, uint64_t now)
{
    struct rs_wire_client_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_RESUME;
    memcpy(m.id, q->id, strlen(q->id) + 1);
    m.u.resume.from_seq = q->next_seq;
    if (client_send_msg(c, c->post, &m) == RS_OK) {
        c->st.resumes++;
        rs_log_debug("client: resume '%s' from seq %llu", q->id,
                     (unsigned long long)q->next_seq);
    }
    q->resume_ns = now;
}

static uint64_t min_due(uint64_t a, uint64_t b)
{
    return b != 0 && b < a ? b : a;
}

/* One request's timers; returns its next due time (UINT64_MAX: none) or 0 once it ended. */
static uint64_t creq_timers(rs_client *c, struct creq *q, uint64_t now)
{
    if (q->deadline_ns != 0 && now >= q->deadline_ns) {
        if (q->acked)
            creq_send_cancel(c, q, now); /* the server need not finish what nobody reads */
        c->st.timeouts++;
        rs_log_info("client: request '%s' timed out", q->id);
        creq_fail(c, q, RS_CLIENT_TIMEOUT, RS_WIRE_INTERNAL, "timed out", 9);
        return 0;
    }
    uint64_t due = min_due(UINT64_MAX, q->deadline_ns);
    if (!q->acked && c->welcomed) {
        if (q->gen_due_ns != 0 && now >= q->gen_due_ns)
            creq_send_generate(c, q, now);
        due = min_due(due, q->gen_due_ns);
    }
    if (q->acked && q->cancel_wanted) {
        if (q->cancel_due_ns != 0 && now >= q->cancel_due_ns)
            creq_send_cancel(c, q, now);
        due = min_due(due, q->cancel_due_ns);
    }
    if (q->acked || q->next_seq > 0) {
        uint64_t quiet_since = q->last_rx_ns > q->resume_ns ? q->last_rx_ns : q->resume_ns;
        uint64_t stall_at = quiet_since + (uint64_t)q->stall_ivl_ms * MS;
        if (now >= stall_at) {
            /* Nothing for a while: its tail may have died with a postprocd. */
            creq_send_resume(c, q, now);
            q->stall_ivl_ms = q->stall_ivl_ms * 2 > CLIENT_BACKOFF_MAX_MS
                                  ? CLIENT_BACKOFF_MAX_MS
                                  : q->stall_ivl_ms * 2;
            if (now - c->hello_ns >= (uint64_t)c->stall_ms * MS && c->hello_due_ns == 0)
                c->hello_due_ns = now;
            stall_at = now + (uint64_t)q->stall_ivl_ms * MS;
        }
        due = min_due(due, stall_at);
    }
    return due;
}

uint64_t client_timers(rs_client *c, uint64_t now)
{
    uint64_t due = UINT64_MAX;
    if (c->hello_due_ns != 0 && now >= c->hello_due_ns)
        client_send_hello(c, now);
    due = min_due(due, c->hello_due_ns);
    /* Downwards: a freed request's place is taken by the last one, already visited. */
    for (uint32_t i = c->n_live; i-- > 0;) {
        if (i >= c->n_live)
            continue; /* a callback ended several requests */
        uint64_t d = creq_timers(c, &c->reqs[c->live[i]], now);
        due = d != 0 ? min_due(due, d) : due;
    }
    return due;
}

/* SPDX-License-Identifier: MIT */
/*
 * The client's connections: routing id, endpoints (runtime directory or
 * explicit, tcp:// with CURVE), the two DEALERs and a ZeroMQ socket monitor
 * on each, so a daemon that comes back is noticed at once (tokenizerd:
 * resend what it did not acknowledge; postprocd: hello and resume) instead
 * of after a stall timeout, and the poll loop that drives everything. The
 * per-request logic is in request.c and receive.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "client/client_impl.h"
#include "common/clock.h"
#include "common/log.h"
#include "ipc/rundir.h"
#include "ipc/zcert.h"

#define MSGS_PER_PASS 4096 /* messages handled per socket per poll, so timers still run */
#define MON_EVENTS (ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED |                 \
                    ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)

void rs_client_opts_default(struct rs_client_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->max_requests = 1024;
    o->ack_timeout_ms = 1000;
    o->stall_ms = 1000;
    o->request_timeout_ms = 600000;
}

const char *rs_client_status_name(enum rs_client_status s)
{
    static const char *const names[] = {"ok", "refused", "timeout", "lost"};
    return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown";
}

/* "rsc-" and 24 random hex digits: printable, first byte not zero, unique per client. */
static void pick_routing_id(rs_client *c)
{
    uint8_t rnd[12];
    if (getrandom(rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd)) {
        uint64_t t = rs_clock_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)c;
        for (size_t i = 0; i < sizeof(rnd); i++)
            rnd[i] = (uint8_t)(t >> (8 * (i % 8)) ^ i * 131u);
    }
    memcpy(c->rid, "rsc-", 4);
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf((char *)c->rid + 4 + 2 * i, 3, "%02x", rnd[i]);
    c->rid_len = 4 + 2 * sizeof(rnd);
}

/* 32 random bytes as 64 hex digits: the secret that makes this client's requests its own. */
static rs_err pick_secret(rs_client *c)
{
    uint8_t rnd[32];
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        return RS_EIO; /* a guessable secret would be no secret: refuse instead */
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf(c->secret + 2 * i, 3, "%02x", rnd[i]);
    c->secret_len = 2 * sizeof(rnd);
    return RS_OK;
}

static rs_err endpoint_of(const struct rs_client_opts *o, const char *given, const char *file,
                          char *out, size_t cap)
{
    if (given != NULL) {
        if (strlen(given) >= cap) {
            rs_log_error("client: endpoint '%s' is longer than %zu bytes", given, cap - 1);
            return RS_EINVAL;
        }
        snprintf(out, cap, "%s", given);
        return RS_OK;
    }
    char dir[512];
    if (o->rundir != NULL)
        snprintf(dir, sizeof(dir), "%s", o->rundir);
    else
        rs_rundir_default(o->instance != NULL ? o->instance : "default", dir, sizeof(dir));
    return rs_rundir_endpoint(dir, file, out, cap);
}

/* Opens one DEALER (CURVE for tcp://) and its monitor PAIR. */
static rs_err open_dealer(rs_client *c, const struct rs_client_opts *o, const char *ep,
                          const char *server_key, const char *name, rs_zsock **s, void **mon)
{
    struct rs_zsock_cfg cfg;
    struct rs_zcert cert;
    rs_zsock_cfg_default(RS_ZSOCK_DEALER, &cfg);
    cfg.routing_id = c->rid;
    cfg.routing_id_len = c->rid_len;
    if (strncmp(ep, "tcp://", 6) == 0) {
        if (o->curve_secret_file == NULL || server_key == NULL) {
            rs_log_error("client: %s endpoint %s is tcp://: needs a CURVE key pair file and "
                         "the server's public key", name, ep);
            return RS_EINVAL;
        }
        rs_err rc = rs_zcert_load(o->curve_secret_file, &cert);
        if (rc != RS_OK)
            return rc;
        cfg.curve = &cert;
        cfg.curve_server_public = server_key;
    }
    rs_err rc = rs_zsock_create(c->zctx, RS_ZSOCK_DEALER, ep, &cfg, s);
    memset(&cert, 0, sizeof(cert));
    if (rc != RS_OK)
        return rc;
    char mep[96];
    snprintf(mep, sizeof(mep), "inproc://rs-client-%p-%s", (void *)c, name);
    if (zmq_socket_monitor(rs_zsock_handle(*s), mep, MON_EVENTS) != 0 ||
        (*mon = zmq_socket(c->zctx, ZMQ_PAIR)) == NULL || zmq_connect(*mon, mep) != 0) {
        rs_log_error("client: monitor of the %s socket: %s", name, zmq_strerror(errno));
        return RS_EIO;
    }
    int zero = 0;
    zmq_setsockopt(*mon, ZMQ_LINGER, &zero, sizeof(zero));
    return RS_OK;
}

static rs_err check_opts(const struct rs_client_opts *o)
{
    if (o->keep_prefix != NULL && strlen(o->keep_prefix) > RS_WIRE_ID_MAX) {
        rs_log_error("client: keep_prefix is longer than a request id (%d bytes)",
                     RS_WIRE_ID_MAX);
        return RS_EINVAL;
    }
    if (o->max_requests == 0 || o->max_requests > (1u << 20) || o->ack_timeout_ms == 0 ||
        o->stall_ms == 0) {
        rs_log_error("client: max_requests must be 1..1048576, ack_timeout_ms and stall_ms > 0");
        return RS_EINVAL;
    }
    if (o->routing_id != NULL &&
        (o->routing_id_len == 0 || o->routing_id_len > RS_CLIENT_RID_MAX ||
         ((const uint8_t *)o->routing_id)[0] == 0)) {
        rs_log_error("client: routing id must be 1..%d bytes, first byte not zero",
                     RS_CLIENT_RID_MAX);
        return RS_EINVAL;
    }
    if (o->secret != NULL && !rs_wire_secret_valid(o->secret, strlen(o->secret))) {
        rs_log_error("client: the secret must be %d..%d printable ASCII characters",
                     RS_WIRE_SECRET_MIN, RS_WIRE_SECRET_MAX);
        return RS_EINVAL;
    }
    return RS_OK;
}

static rs_err open_all(rs_client *c, const struct rs_client_opts *o)
{
    char tok_ep[RS_ZSOCK_ENDPOINT_MAX], post_ep[RS_ZSOCK_ENDPOINT_MAX];
    const char *post_key = o->curve_postprocd_public != NULL ? o->curve_postprocd_public
                                                             : o->curve_server_public;
    rs_err rc = endpoint_of(o, o->tokenizerd_endpoint, "tokenizerd.sock", tok_ep, sizeof(tok_ep));
    if (rc == RS_OK)
        rc = endpoint_of(o, o->postprocd_endpoint, "postprocd.sock", post_ep, sizeof(post_ep));
    if (rc == RS_OK)
        rc = open_dealer(c, o, tok_ep, o->curve_server_public, "tokenizerd", &c->tok,
                         &c->mon_tok);
    if (rc == RS_OK)
        rc = open_dealer(c, o, post_ep, post_key, "postprocd", &c->post, &c->mon_post);
    if (rc == RS_OK)
        rc = creq_table_init(c, o->max_requests);
    if (rc == RS_OK) {
        c->tok_buf = malloc(sizeof(uint32_t) * RS_WIRE_OUT_TOKENS_MAX);
        rc = c->tok_buf != NULL ? RS_OK : RS_ENOMEM;
    }
    return rc;
}

rs_err rs_client_create(const struct rs_client_opts *o, rs_client **out)
{
    struct rs_client_opts def;
    if (o == NULL) {
        rs_client_opts_default(&def);
        o = &def;
    }
    *out = NULL;
    rs_err rc = check_opts(o);
    if (rc != RS_OK)
        return rc;
    rs_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return RS_ENOMEM;
    c->zctx = o->zctx;
    if (c->zctx == NULL) {
        c->zctx = zmq_ctx_new();
        c->own_ctx = true;
    }
    if (o->routing_id != NULL) {
        memcpy(c->rid, o->routing_id, o->routing_id_len);
        c->rid_len = o->routing_id_len;
    } else {
        pick_routing_id(c);
    }
    if (o->secret != NULL) {
        c->secret_len = strlen(o->secret);
        memcpy(c->secret, o->secret, c->secret_len + 1);
    } else if (o->routing_id == NULL && pick_secret(c) != RS_OK) {
        rs_client_destroy(&c);
        return RS_EIO;
    }
    if (o->keep_prefix != NULL) {
        c->keep_len = strlen(o->keep_prefix);
        memcpy(c->keep_prefix, o->keep_prefix, c->keep_len + 1);
    }
    c->ack_timeout_ms = o->ack_timeout_ms;
    c->stall_ms = o->stall_ms;
    c->request_timeout_ms = o->request_timeout_ms;
    c->hello_ivl_ms = CLIENT_HELLO_FIRST_MS;
    rs_wire_buf_init(&c->enc, RS_WIRE_CLIENT_MSG_MAX);
    rc = c->zctx != NULL ? open_all(c, o) : RS_EIO;
    if (rc != RS_OK) {
        rs_client_destroy(&c);
        return rc;
    }
    c->hello_due_ns = rs_clock_ns();
    *out = c;
    return RS_OK;
}

static void close_dealer(rs_zsock **s, void **mon)
{
    if (*s != NULL && *mon != NULL)
        zmq_socket_monitor(rs_zsock_handle(*s), NULL, 0);
    if (*mon != NULL)
        zmq_close(*mon);
    *mon = NULL;
    rs_zsock_destroy(s);
}

void rs_client_destroy(rs_client **cp)
{
    rs_client *c = cp != NULL ? *cp : NULL;
    if (c == NULL)
        return;
    close_dealer(&c->tok, &c->mon_tok);
    close_dealer(&c->post, &c->mon_post);
    creq_table_fini(c);
    rs_wire_buf_fini(&c->enc);
    free(c->tok_buf);
    free(c->lp_buf);
    if (c->own_ctx && c->zctx != NULL)
        zmq_ctx_term(c->zctx);
    free(c);
    *cp = NULL;
}

rs_err client_send(rs_client *c, rs_zsock *s, const uint8_t *body, size_t len)
{
    rs_err rc = rs_zsock_send(s, body, len);
    if (rc != RS_OK)
        c->st.send_fail++;
    return rc;
}

rs_err client_send_msg(rs_client *c, rs_zsock *s, const struct rs_wire_client_msg *m)
{
    rs_err rc = rs_wire_client_encode(m, &c->enc);
    return rc == RS_OK ? client_send(c, s, c->enc.data, c->enc.len) : rc;
}

rs_err client_hello_tok(rs_client *c)
{
    struct rs_wire_client_msg m;
    if (c->secret_len == 0)
        return RS_OK;
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_HELLO;
    m.u.hello.secret = (struct rs_wire_str){c->secret, (uint32_t)c->secret_len};
    return client_send_msg(c, c->tok, &m);
}

void client_reconnect(rs_client *c, bool post)
{
    rs_zsock *s = post ? c->post : c->tok;
    rs_log_info("client: %s does not answer on this connection: connecting again",
                post ? "postprocd" : "tokenizerd");
    if (zmq_disconnect(rs_zsock_handle(s), rs_zsock_endpoint(s)) != 0)
        rs_log_warn("client: disconnecting from %s: %s", rs_zsock_endpoint(s),
                    zmq_strerror(zmq_errno()));
    c->parked_ns[post] = rs_clock_ns();
}

void client_unpark(rs_client *c, bool post, uint64_t now)
{
    if (c->parked_ns[post] == 0 || now - c->parked_ns[post] < 100000000ull)
        return; /* 100 ms: the daemon sees the old connection close first */
    rs_zsock *s = post ? c->post : c->tok;
    c->parked_ns[post] = 0;
    if (zmq_connect(rs_zsock_handle(s), rs_zsock_endpoint(s)) != 0)
        rs_log_warn("client: reconnecting to %s: %s", rs_zsock_endpoint(s),
                    zmq_strerror(zmq_errno()));
}

void client_send_hello(rs_client *c, uint64_t now)
{
    struct rs_wire_client_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_HELLO;
    m.u.hello.secret = (struct rs_wire_str){c->secret, (uint32_t)c->secret_len};
    client_unpark(c, true, now);
    if (client_send_msg(c, c->post, &m) == RS_OK) {
        c->st.hellos++;
        c->hello_ns = now;
        if (++c->hellos_unanswered >= 5) {
            c->hellos_unanswered = 0;
            client_reconnect(c, true);
        }
    }
    /* Retried until a welcome clears it: the first ones go out before the connection is up. */
    c->hello_due_ns = now + (uint64_t)c->hello_ivl_ms * 1000000ull;
    c->hello_ivl_ms = c->hello_ivl_ms * 2 > 1000 ? 1000 : c->hello_ivl_ms * 2;
}

/* A daemon's socket reconnected: redo what may have been lost with the old connection. */
static void on_handshake(rs_client *c, bool post, uint64_t now)
{
    bool was_down = post ? c->post_down : c->tok_down;
    if (was_down) {
        c->st.reconnects++;
        rs_log_info("client: %s is back: %s", post ? "postprocd" : "tokenizerd",
                    post ? "hello and resume" : "resending unacknowledged requests");
    }
    if (post) {
        c->post_down = false;
        c->hello_ivl_ms = CLIENT_HELLO_FIRST_MS;
        client_send_hello(c, now);
    } else {
        c->tok_down = false;
        c->tok_resends = 0; /* a new connection: only its own unanswered resends count */
    }
    for (uint32_t i = 0; i < c->n_live; i++) {
        struct creq *q = &c->reqs[c->live[i]];
        if (!post && !q->acked) {
            q->gen_due_ns = now;
            q->gen_new_conn = true;
        } else if (!post && q->cancel_wanted) {
            q->cancel_due_ns = now;
        } else if (post && was_down && (q->acked || q->next_seq > 0)) {
            creq_send_resume(c, q, now);
        }
    }
}

/* Reads one monitor event (two frames: event id + value, endpoint). */
static void on_monitor(rs_client *c, bool post, uint64_t now)
{
    void *mon = post ? c->mon_post : c->mon_tok;
    for (int n = 0; n < 64; n++) {
        zmq_msg_t f;
        zmq_msg_init(&f);
        if (zmq_msg_recv(&f, mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&f);
            return;
        }
        uint16_t ev = 0;
        if (zmq_msg_size(&f) >= 2)
            memcpy(&ev, zmq_msg_data(&f), 2);
        while (zmq_msg_more(&f)) { /* the endpoint frame */
            zmq_msg_close(&f);
            zmq_msg_init(&f);
            if (zmq_msg_recv(&f, mon, ZMQ_DONTWAIT) < 0)
                break;
        }
        zmq_msg_close(&f);
        const char *who = post ? "postprocd" : "tokenizerd";
        if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            on_handshake(c, post, now);
        } else if (ev == ZMQ_EVENT_DISCONNECTED) {
            rs_log_info("client: lost the connection to %s; reconnecting", who);
            *(post ? &c->post_down : &c->tok_down) = true;
        } else if (ev & (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)) {
            rs_log_error("client: %s refused the handshake (%s)", who,
                         ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ? "CURVE key not accepted"
                                                               : "protocol error");
        }
    }
}

/* Handles every message waiting on one DEALER. */
static void drain(rs_client *c, bool post, uint64_t now)
{
    rs_zsock *s = post ? c->post : c->tok;
    for (int n = 0; n < MSGS_PER_PASS; n++) {
        zmq_msg_t body;
        zmq_msg_init(&body);
        rs_err rc = rs_zsock_recv(s, NULL, &body, 0);
        if (rc == RS_OK)
            client_on_message(c, post, zmq_msg_data(&body), zmq_msg_size(&body), now);
        else if (rc == RS_EPROTO || rc == RS_ERANGE)
            c->st.malformed++;
        zmq_msg_close(&body);
        if (rc == RS_EAGAIN || rc == RS_EIO)
            return;
    }
}

#define ITEMS_PER_CLIENT 4

static void fill_items(rs_client *c, zmq_pollitem_t *it)
{
    void *socks[ITEMS_PER_CLIENT] = {rs_zsock_handle(c->tok), rs_zsock_handle(c->post),
                                     c->mon_tok, c->mon_post};
    for (int i = 0; i < ITEMS_PER_CLIENT; i++)
        it[i] = (zmq_pollitem_t){.socket = socks[i], .events = ZMQ_POLLIN};
}

/* Handles what the poll found for one client, then its timers; returns its events so far. */
static int service(rs_client *c, const zmq_pollitem_t *it, uint64_t *next_due)
{
    uint64_t now = rs_clock_ns();
    if (it[2].revents & ZMQ_POLLIN)
        on_monitor(c, false, now);
    if (it[3].revents & ZMQ_POLLIN)
        on_monitor(c, true, now);
    /* tokenizerd first, and also when only postprocd was readable at poll time: an ack
     * tokenizerd sent before the request was scheduled is then read before its output. */
    if ((it[0].revents | it[1].revents) & ZMQ_POLLIN)
        drain(c, false, now);
    if (it[1].revents & ZMQ_POLLIN)
        drain(c, true, now);
    uint64_t due = client_timers(c, rs_clock_ns());
    if (due < *next_due)
        *next_due = due;
    return c->events;
}

/* Milliseconds zmq_poll may sleep: the caller's limit, cut to the earliest client timer. */
static long poll_wait(rs_client *const *cs, size_t n, int timeout_ms)
{
    uint64_t now = rs_clock_ns(), due = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        cs[i]->events = 0;
        uint64_t d = client_timers(cs[i], now);
        due = d < due ? d : due;
    }
    long wait = timeout_ms;
    if (due != UINT64_MAX) {
        uint64_t left_ms = due > now ? (due - now + 999999) / 1000000 : 0;
        if (timeout_ms < 0 || left_ms < (uint64_t)timeout_ms)
            wait = (long)left_ms;
    }
    return wait;
}

int rs_client_poll_fds(rs_client *const *cs, size_t n, struct rs_client_pollfd *fds,
                       size_t n_fds, int timeout_ms)
{
    zmq_pollitem_t stack_items[16 * ITEMS_PER_CLIENT];
    size_t n_items = n * ITEMS_PER_CLIENT + n_fds;
    zmq_pollitem_t *items = n_items <= 16 * ITEMS_PER_CLIENT
                                ? stack_items
                                : malloc(n_items * sizeof(*items));
    if (items == NULL)
        return RS_ENOMEM;
    for (size_t i = 0; i < n; i++)
        fill_items(cs[i], &items[i * ITEMS_PER_CLIENT]);
    for (size_t i = 0; i < n_fds; i++)
        items[n * ITEMS_PER_CLIENT + i] =
            (zmq_pollitem_t){.fd = fds[i].fd, .events = fds[i].events};
    long wait = poll_wait(cs, n, timeout_ms);
    int total = 0;
    if (zmq_poll(items, (int)n_items, wait) < 0 && errno != EINTR) {
        rs_log_error("client: zmq_poll: %s", zmq_strerror(errno));
        total = RS_EIO;
    }
    for (size_t i = 0; i < n_fds; i++)
        fds[i].revents = total < 0 ? 0 : items[n * ITEMS_PER_CLIENT + i].revents;
    for (size_t i = 0; i < n && total >= 0; i++) {
        uint64_t next = UINT64_MAX;
        total += service(cs[i], &items[i * ITEMS_PER_CLIENT], &next);
    }
    if (items != stack_items)
        free(items);
    return total;
}

int rs_client_poll_set(rs_client *const *cs, size_t n, int timeout_ms)
{
    return rs_client_poll_fds(cs, n, NULL, 0, timeout_ms);
}

int rs_client_poll(rs_client *c, int timeout_ms)
{
    return rs_client_poll_set(&c, 1, timeout_ms);
}

rs_err rs_client_wait(rs_client *c, int timeout_ms)
{
    uint64_t end = timeout_ms < 0 ? UINT64_MAX : rs_clock_ms() + (uint64_t)timeout_ms;
    while (c->n_live > 0) {
        uint64_t now = rs_clock_ms();
        if (now >= end)
            return RS_EAGAIN;
        int left = end == UINT64_MAX || end - now > 1000 ? 1000 : (int)(end - now);
        int rc = rs_client_poll(c, left);
        if (rc < 0)
            return (rs_err)rc;
    }
    return RS_OK;
}

uint32_t rs_client_in_flight(const rs_client *c)
{
    return c->n_live;
}

bool rs_client_connected(const rs_client *c)
{
    return c->welcomed;
}

const uint8_t *rs_client_routing_id(const rs_client *c, size_t *len)
{
    *len = c->rid_len;
    return c->rid;
}

void rs_client_stats(const rs_client *c, struct rs_client_stats *out)
{
    *out = c->st;
}

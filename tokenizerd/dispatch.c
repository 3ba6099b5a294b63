/* SPDX-License-Identifier: MIT */
/*
 * One client message at a time: receive from a ROUTER, decode strictly,
 * answer every mistake with an error reply naming the field (never crash,
 * keep serving), and route generate / cancel / hello. Replies never block:
 * a client that left or is not reading loses its reply and resends (intake
 * is idempotent). Leaves out what a generate does (intake.c).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/failpoint.h"
#include "ipc/pipeline_config.h"
#include "ipc/pipeline_metrics.h"
#include "tokenizerd/tokd.h"

void tokd_send(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer)
{
    rs_err rc = rs_zsock_router_send(sock, peer, t->out.data, t->out.len);
    if (rc != RS_OK)
        rs_log_debug("reply to a client not sent: %s (it resends unacknowledged requests)",
                     rs_strerror(rc));
}

/*
 * Refusals are the client's mistakes, not ours: one info line a second at
 * most (with a count of the quiet ones), so a misbehaving client cannot
 * flood the log; the metrics count every one.
 */
static void refusal_log(const char *id, enum rs_wire_code code, const char *msg)
{
    static uint64_t last_ns, quiet;
    uint64_t now = rs_clock_ns();
    if (last_ns != 0 && now - last_ns < 1000000000ull) {
        quiet++;
        return;
    }
    rs_log_info("refused request '%s': %s: %s (%llu more refusals not logged before this)", id,
                rs_wire_code_name(code), msg, (unsigned long long)quiet);
    last_ns = now;
    quiet = 0;
}

void tokd_reply_error(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                      const char *id, enum rs_wire_code code, const char *fmt, ...)
{
    struct rs_wire_error err = {.code = code};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err.msg, sizeof(err.msg), fmt, ap);
    va_end(ap);
    if (code != RS_WIRE_OVERLOADED) /* counted on its own */
        rs_counter_add(&t->p->metrics->stage[RS_PIPE_STAGE_TOKENIZERD].counter[RS_M_TOK_REJECTED],
                       1);
    refusal_log(id, code, err.msg);
    if (rs_wire_error_reply(id, &err, &t->out) == RS_OK)
        tokd_send(t, sock, peer);
    else
        rs_log_error("cannot encode an error reply (%s)", rs_wire_code_name(code));
}

static void welcome(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer)
{
    struct rs_wire_server_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_WELCOME;
    m.u.welcome.server = (struct rs_wire_str){RS_PIPE_TOKENIZERD, sizeof(RS_PIPE_TOKENIZERD) - 1};
    if (rs_wire_server_encode(&m, &t->out) == RS_OK)
        tokd_send(t, sock, peer);
}

/*
 * A hello binds the routing id to its owner (credentials + secret). Another
 * owner's hello under a routing id that is bound is a takeover attempt: it
 * is refused, answered `forbidden` and logged (never the secret).
 */
static void hello(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                  const struct rs_pipe_conn *conn, const struct rs_wire_client_msg *m)
{
    if (rs_pipe_owner_hello_refused(t->owners, t->p, peer, conn, &m->u.hello.secret))
        tokd_reply_error(t, sock, peer, "", RS_WIRE_FORBIDDEN, "this routing id belongs to "
                         "another client; pick another one");
    else
        welcome(t, sock, peer);
}

/* Decodes and routes one received body. */
static rs_err handle(struct tokd *t, rs_zsock *sock, int tcp, const struct rs_zsock_peer *peer,
                     const zmq_msg_t *body, uint64_t arrival_ns)
{
    struct rs_wire_client_msg m;
    struct rs_wire_error err;
    rs_counter_add(&t->p->metrics->stage[RS_PIPE_STAGE_TOKENIZERD].counter[RS_M_TOK_RECEIVED], 1);
    if (rs_wire_client_decode(zmq_msg_data((zmq_msg_t *)body), zmq_msg_size((zmq_msg_t *)body),
                              &m, &err) != RS_OK) {
        tokd_reply_error(t, sock, peer, m.id, err.code, "%s", err.msg);
        return RS_OK;
    }
    struct rs_pipe_conn conn;
    struct rs_pipe_owner owner;
    if (rs_pipe_conn_of(body, tcp, &conn) != RS_OK) {
        tokd_reply_error(t, sock, peer, m.id, RS_WIRE_INTERNAL, "cannot tell which client "
                         "sent this (no peer credentials on the connection)");
        return RS_OK;
    }
    rs_pipe_owner_map_owner(t->owners, peer->id, peer->len, &conn, &owner);
    switch (m.type) {
    case RS_WIRE_T_GENERATE:
        return tokd_generate(t, sock, tcp, peer, &m, &owner, arrival_ns);
    case RS_WIRE_T_CANCEL:
        tokd_cancel(t, sock, tcp, peer, &m, &owner);
        return RS_OK;
    case RS_WIRE_T_HELLO:
        hello(t, sock, peer, &conn, &m);
        return RS_OK;
    default:
        tokd_reply_error(t, sock, peer, m.id, RS_WIRE_BAD_REQUEST, "tokenizerd takes generate, "
                         "cancel and hello; send %s to postprocd", rs_wire_type_name(m.type));
        return RS_OK;
    }
}

rs_err tokd_drain(struct tokd *t, rs_zsock *sock, int tcp, uint32_t max)
{
    for (uint32_t n = 0; n < max; n++) {
        struct rs_zsock_peer peer = {.len = 0};
        zmq_msg_t body;
        zmq_msg_init(&body);
        rs_err rc = rs_zsock_recv(sock, &peer, &body, 0);
        uint64_t arrival_ns = rs_clock_ns();
        if (rc == RS_OK) {
            RS_FAILPOINT("tokenizerd.message"); /* tests: a slow tokenizerd (":delay=MS") */
            rc = handle(t, sock, tcp, &peer, &body, arrival_ns);
        } else if (rc == RS_ERANGE && peer.len > 0) {
            tokd_reply_error(t, sock, &peer, "", RS_WIRE_TOO_LARGE, "message is over %u bytes",
                             RS_WIRE_CLIENT_MSG_MAX);
        } else if (rc == RS_EPROTO && peer.len > 0) {
            tokd_reply_error(t, sock, &peer, "", RS_WIRE_BAD_REQUEST, "envelope must be [empty "
                             "frame][msgpack body] (a DEALER socket)");
        }
        zmq_msg_close(&body);
        if (rc == RS_EAGAIN || rc == RS_EIO)
            return RS_OK; /* nothing more waiting (an I/O error was logged) */
        if (rc == RS_ESTALE)
            return rc;
    }
    return RS_OK;
}

/* SPDX-License-Identifier: MIT */
/*
 * postprocd's side of the client sockets: sending a request's messages to
 * the routing id it was submitted under (ROUTER_MANDATORY turns an absent
 * client into RS_ENOENT, which starts the client timeout instead of losing
 * anything), and the messages clients send postprocd: hello (answered with
 * welcome) and resume (replays a request's messages from a sequence number).
 * Anything else gets an error reply naming the problem.
 */
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "postprocd/postd.h"

static void count(struct postd *d, unsigned i)
{
    rs_counter_add(&d->p->metrics->stage[RS_PIPE_STAGE_POSTPROCD].counter[i], 1);
}

/*
 * Output goes only to the connection that said hello as the request's owner
 * (pipeline_owner.h); anything else is "not connected" (RS_ENOENT): the
 * output stays in shared memory until the owner says hello again.
 */
rs_err postd_send(struct postd *d, struct rs_pipe_req *r, uint64_t now)
{
    int tcp = (r->flags & RS_PIPE_F_TCP) != 0;
    rs_zsock *sock = rs_pipe_front_sock(&d->front, tcp);
    struct rs_zsock_peer peer;
    struct rs_pipe_owner owner;
    peer.len = r->client_len <= RS_PIPE_CLIENT_MAX ? r->client_len : RS_PIPE_CLIENT_MAX;
    memcpy(peer.id, r->client, peer.len);
    memcpy(owner.d, r->owner, sizeof(owner.d));
    rs_err rc = RS_ENOENT; /* also: a tcp client while this postprocd has no --listen */
    if (sock != NULL && rs_pipe_owner_map_may_send(d->owners, tcp, peer.id, peer.len, &owner))
        rc = rs_zsock_router_send(sock, &peer, d->out.data, d->out.len);
    if (rc == RS_OK) {
        if (r->unreachable_ns != 0)
            r->unreachable_ns = 0;
        return RS_OK;
    }
    count(d, RS_M_POST_SEND_FAIL);
    if (r->unreachable_ns == 0) {
        r->unreachable_ns = now;
        rs_log_req(RS_LOG_INFO, r->handle, RS_LOG_NOID, "client of '%s' unreachable (%s): "
                   "holding its output", r->id, rs_strerror(rc));
    }
    return rc;
}

static void reply(struct postd *d, rs_zsock *sock, const struct rs_zsock_peer *peer)
{
    rs_err rc = rs_zsock_router_send(sock, peer, d->out.data, d->out.len);
    if (rc != RS_OK)
        rs_log_debug("reply to a client not sent: %s", rs_strerror(rc));
}

static void reply_error(struct postd *d, rs_zsock *sock, const struct rs_zsock_peer *peer,
                        const char *id, enum rs_wire_code code, const char *msg)
{
    struct rs_wire_error err = {.code = code};
    snprintf(err.msg, sizeof(err.msg), "%s", msg);
    rs_log_debug("refused a client message ('%s'): %s: %s", id, rs_wire_code_name(code), msg);
    if (rs_wire_error_reply(id, &err, &d->out) == RS_OK)
        reply(d, sock, peer);
}

static void welcome(struct postd *d, rs_zsock *sock, const struct rs_zsock_peer *peer)
{
    struct rs_wire_server_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_WELCOME;
    m.u.welcome.server = (struct rs_wire_str){RS_PIPE_POSTPROCD, sizeof(RS_PIPE_POSTPROCD) - 1};
    if (rs_wire_server_encode(&m, &d->out) == RS_OK)
        reply(d, sock, peer);
}

/*
 * A hello binds the routing id to its owner: from then on this connection
 * receives that owner's output. Another owner's hello under a bound routing
 * id (a takeover attempt) is refused, logged and answered `forbidden`; the
 * bound owner keeps its output.
 */
static void hello(struct postd *d, rs_zsock *sock, const struct rs_zsock_peer *peer,
                  const struct rs_pipe_conn *conn, const struct rs_wire_client_msg *m)
{
    if (rs_pipe_owner_hello_refused(d->owners, d->p, peer, conn, &m->u.hello.secret))
        reply_error(d, sock, peer, "", RS_WIRE_FORBIDDEN, "this routing id belongs to another "
                    "client; pick another one");
    else
        welcome(d, sock, peer);
}

/* The published record of (transport, peer, id): a linear scan, as resumes are rare. */
static int find_request(struct postd *d, int tcp, const struct rs_zsock_peer *peer,
                        const char *id, struct rs_table_ref *ref)
{
    uint32_t cursor = 0, state;
    uint64_t published = ~((1ull << RS_TABLE_USER) - 1);
    size_t id_len = strlen(id);
    while (rs_table_next(d->p->requests, &cursor, published, ref, &state) == RS_OK) {
        const struct rs_pipe_req *r = rs_pipe_req_at(d->p, ref->index);
        if (r->client_len == peer->len && memcmp(r->client, peer->id, peer->len) == 0 &&
            ((r->flags & RS_PIPE_F_TCP) != 0) == (tcp != 0) &&
            strnlen(r->id, sizeof(r->id)) == id_len && memcmp(r->id, id, id_len) == 0)
            return 1;
    }
    return 0;
}

/* 1 when r belongs to owner; otherwise logs the refusal of what (the secret is never logged). */
static int owned(const struct rs_pipe_req *r, const struct rs_pipe_owner *owner, const char *what)
{
    if (memcmp(r->owner, owner->d, sizeof(owner->d)) == 0)
        return 1;
    char tag[9];
    rs_pipe_owner_tag(owner, tag);
    rs_log_req(RS_LOG_WARN, r->handle, RS_LOG_NOID, "refused %s of '%s' from client %s: the "
               "request belongs to another client", what, r->id, tag);
    return 0;
}

static void resume(struct postd *d, rs_zsock *sock, int tcp, const struct rs_zsock_peer *peer,
                   const struct rs_wire_client_msg *m, const struct rs_pipe_owner *owner)
{
    struct rs_table_ref ref;
    uint64_t now = rs_clock_ns();
    if (!find_request(d, tcp, peer, m->id, &ref)) {
        reply_error(d, sock, peer, m->id, RS_WIRE_NOT_FOUND, "no request with this id from "
                    "this client (unknown, or its output was released)");
        return;
    }
    struct rs_pipe_req *r = rs_pipe_req_at(d->p, ref.index);
    if (!owned(r, owner, "a resume")) {
        reply_error(d, sock, peer, m->id, RS_WIRE_FORBIDDEN, "the request belongs to another "
                    "client (routing id and owner must both match)");
        return;
    }
    struct rs_pipe_cursor c = *rs_pipe_cursor_cur(r);
    count(d, RS_M_POST_REPLAYS);
    rs_log_req(RS_LOG_INFO, r->handle, RS_LOG_NOID, "resume '%s' from seq %llu (%u tokens "
               "sent%s)", r->id, (unsigned long long)m->u.resume.from_seq, c.n_done,
               c.final_sent ? ", final sent" : "");
    rs_err rc = postd_walk(d, ref, r, c.n_done, m->u.resume.from_seq, c.final_sent != 0, now);
    if (rc != RS_OK && rc != RS_ENOENT && rc != RS_EFULL)
        rs_log_req(RS_LOG_WARN, r->handle, RS_LOG_NOID, "resume of '%s' failed: %s", r->id,
                   rs_strerror(rc));
}

/*
 * The client has the final: free the request now instead of after the
 * linger. Only a request whose final was sent is released; anything else
 * (unknown id, a repeat, output still streaming) is ignored without a reply.
 */
static void release(struct postd *d, int tcp, const struct rs_zsock_peer *peer,
                    const struct rs_wire_client_msg *m, const struct rs_pipe_owner *owner)
{
    struct rs_table_ref ref;
    if (!find_request(d, tcp, peer, m->id, &ref))
        return;
    struct rs_pipe_req *r = rs_pipe_req_at(d->p, ref.index);
    if (owned(r, owner, "a release") && rs_pipe_cursor_cur(r)->final_sent)
        postd_release(d, ref, "released by the client");
}

static void handle(struct postd *d, rs_zsock *sock, int tcp, const struct rs_zsock_peer *peer,
                   zmq_msg_t *body)
{
    struct rs_wire_client_msg m;
    struct rs_wire_error err;
    if (rs_wire_client_decode(zmq_msg_data(body), zmq_msg_size(body), &m, &err) != RS_OK) {
        reply_error(d, sock, peer, m.id, err.code, err.msg);
        return;
    }
    struct rs_pipe_conn conn;
    struct rs_pipe_owner owner;
    if (rs_pipe_conn_of(body, tcp, &conn) != RS_OK) {
        reply_error(d, sock, peer, m.id, RS_WIRE_INTERNAL, "cannot tell which client sent this "
                    "(no peer credentials on the connection)");
        return;
    }
    rs_pipe_owner_map_owner(d->owners, peer->id, peer->len, &conn, &owner);
    if (m.type == RS_WIRE_T_HELLO)
        hello(d, sock, peer, &conn, &m);
    else if (m.type == RS_WIRE_T_RESUME)
        resume(d, sock, tcp, peer, &m, &owner);
    else if (m.type == RS_WIRE_T_RELEASE)
        release(d, tcp, peer, &m, &owner);
    else
        reply_error(d, sock, peer, m.id, RS_WIRE_BAD_REQUEST, "postprocd takes hello, resume and "
                    "release; send generate and cancel to tokenizerd");
}

void postd_drain_clients(struct postd *d, rs_zsock *sock, int tcp, uint32_t max)
{
    for (uint32_t n = 0; n < max; n++) {
        struct rs_zsock_peer peer = {.len = 0};
        zmq_msg_t body;
        zmq_msg_init(&body);
        rs_err rc = rs_zsock_recv(sock, &peer, &body, 0);
        if (rc == RS_OK)
            handle(d, sock, tcp, &peer, &body);
        else if (rc == RS_ERANGE && peer.len > 0)
            reply_error(d, sock, &peer, "", RS_WIRE_TOO_LARGE, "message over the size limit");
        else if (rc == RS_EPROTO && peer.len > 0)
            reply_error(d, sock, &peer, "", RS_WIRE_BAD_REQUEST,
                        "envelope must be [empty frame][msgpack body] (a DEALER socket)");
        zmq_msg_close(&body);
        if (rc == RS_EAGAIN || rc == RS_EIO)
            return;
    }
}

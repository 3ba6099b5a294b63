/* SPDX-License-Identifier: MIT */
/*
 * ZeroMQ sockets configured the way ringserve needs them (PROTOCOL.md §2):
 * the four roles (client-facing ROUTER, doorbell PULL bind on the side that
 * stays up; doorbell PUSH and client DEALER connect), each with bounded
 * high-water marks, LINGER 0, ZMTP heartbeats, ROUTER_MANDATORY, IMMEDIATE
 * and CURVE where it applies, plus send/receive wrappers that never block
 * unless asked, bound message sizes and turn every zmq errno into an rs_err
 * with a logged reason. Message contents are wire.h's business, not this.
 * One rs_zsock belongs to one thread (zmq sockets are not thread-safe).
 */
#ifndef RS_ZSOCK_H
#define RS_ZSOCK_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "common/err.h"
#include "ipc/zauth.h"
#include "ipc/zcert.h"

#define RS_ZSOCK_PEER_MAX 255     /* bytes of a ZeroMQ routing id */
#define RS_ZSOCK_ENDPOINT_MAX 256 /* bytes of an endpoint string, NUL included */

enum rs_zsock_role {
    RS_ZSOCK_ROUTER, /* binds; client-facing (tokenizerd, postprocd) */
    RS_ZSOCK_PULL,   /* binds; a stage's inbound doorbells */
    RS_ZSOCK_PUSH,   /* connects; doorbells to another stage, dropped when it is absent */
    RS_ZSOCK_DEALER, /* connects; a client (or a test) talking to a ROUTER */
};

/* Options; rs_zsock_cfg_default fills the role's defaults (PROTOCOL.md §2 table). */
struct rs_zsock_cfg {
    int sndhwm;                /* messages queued per peer for sending */
    int rcvhwm;                /* messages queued per peer on receipt */
    int heartbeat_ivl_ms;      /* ZMTP PING interval; 0 = no heartbeats */
    int heartbeat_timeout_ms;  /* drop a peer silent this long */
    int heartbeat_ttl_ms;      /* asks the peer to drop us after this long (multiple of 100) */
    int reconnect_ivl_ms;      /* connecting roles: first retry */
    int reconnect_ivl_max_ms;  /* connecting roles: backoff cap */
    size_t max_body;           /* bytes of one received body; larger ones are rejected */
    int64_t max_frame;         /* ZMQ_MAXMSGSIZE: a larger frame drops the connection */
    const void *routing_id;    /* DEALER: routing id (borrowed), 1..255 bytes, first byte != 0 */
    size_t routing_id_len;
    const struct rs_zcert *curve;      /* own key pair: ROUTER = server, DEALER = client */
    const char *curve_server_public;   /* DEALER with CURVE: the server's public key, z85 */
    rs_zauth *zauth;                   /* ROUTER with CURVE: the running ZAP handler */
    unsigned ipc_mode;                 /* bound ipc:// socket file mode (e.g. 0660) */
    unsigned max_conns;                /* bound roles: connections kept open at once; more
                                          are closed (zsock_cap.h). Default: env
                                          RINGSERVE_MAX_CONNS, else 1024 */
    unsigned max_conns_per_peer;       /* of those, per peer uid (ipc) or address (tcp).
                                          Default: env RINGSERVE_MAX_CONNS_PER_PEER, else 256 */
    int take_over;                     /* bind over a live ipc:// listener (warned): for a
                                          stage that has just fenced the previous incarnation,
                                          which may be SIGSTOPped but still holds the path */
};

/* Received-side identity of a client (a ROUTER message's first frame). */
struct rs_zsock_peer {
    uint8_t id[RS_ZSOCK_PEER_MAX];
    uint8_t len;
};

struct rs_zsock_stats {
    uint64_t sent;     /* messages handed to zmq */
    uint64_t dropped;  /* sends refused: peer absent, unknown or at its high-water mark */
    uint64_t received; /* well-formed messages returned to the caller */
    uint64_t rejected; /* received messages refused: bad envelope or body too large */
    uint64_t conns_refused; /* bound roles: connections closed at a cap */
    uint32_t conns_open;    /* bound roles: connections open now */
};

typedef struct rs_zsock rs_zsock;

/* Fills cfg with the defaults of role. Any thread. */
void rs_zsock_cfg_default(enum rs_zsock_role role, struct rs_zsock_cfg *cfg);

/*
 * Creates a socket of role on zctx and binds (ROUTER, PULL) or connects
 * (PUSH, DEALER) it to endpoint. cfg NULL = defaults. Endpoints: ipc:// and
 * inproc:// for every role; tcp:// only for ROUTER/DEALER with CURVE
 * configured (RS_EINVAL otherwise: remote clients must authenticate). An
 * ipc:// bind refuses a path a live process is listening on (RS_EEXIST),
 * removes a stale one, and chmods the socket file to cfg->ipc_mode.
 * Returns RS_OK with *out owned by the caller, RS_EINVAL, RS_EEXIST,
 * RS_EUNSUPPORTED (libzmq without CURVE), RS_EIO (logged). Calling thread
 * becomes the socket's owner.
 */
rs_err rs_zsock_create(void *zctx, enum rs_zsock_role role, const char *endpoint,
                       const struct rs_zsock_cfg *cfg, rs_zsock **out);

/* Closes the socket (pending messages are discarded: LINGER 0). Accepts NULL; clears *s. */
void rs_zsock_destroy(rs_zsock **s);

/* The zmq socket, for zmq_poll. Borrowed: valid until rs_zsock_destroy. */
void *rs_zsock_handle(rs_zsock *s);

/* The endpoint bound or connected (wildcards resolved, e.g. tcp://127.0.0.1:41234). */
const char *rs_zsock_endpoint(const rs_zsock *s);

/* Counters since creation. Owner thread. */
void rs_zsock_stats(const rs_zsock *s, struct rs_zsock_stats *out);

/*
 * PUSH: sends one doorbell without blocking. DEALER: sends [empty][body]
 * without blocking. RS_OK; RS_EAGAIN when no peer is connected or the peer
 * is at its high-water mark (the message is dropped and counted: doorbells
 * are hints, clients retry); RS_EINVAL for a wrong role; RS_EIO otherwise.
 */
rs_err rs_zsock_send(rs_zsock *s, const void *body, size_t len);

/*
 * ROUTER: sends [peer][empty][body] to peer without blocking. RS_OK;
 * RS_ENOENT when no such peer is connected (ROUTER_MANDATORY: never a
 * silent drop); RS_EFULL when the peer is at its high-water mark (retry
 * later); RS_EIO otherwise. Each failure is counted as dropped.
 */
rs_err rs_zsock_router_send(rs_zsock *s, const struct rs_zsock_peer *peer, const void *body,
                            size_t len);

/*
 * Receives one message, waiting up to timeout_ms (0 = do not wait, -1 =
 * until one arrives or a signal interrupts). body must be initialised
 * (zmq_msg_init); it receives the body frame, owned by the caller (close it
 * with zmq_msg_close). ROUTER: peer gets the sender's id, even when the
 * message is rejected, so the caller can answer with an error. Returns
 * RS_OK; RS_EAGAIN when nothing arrived in time (or EINTR); RS_EPROTO for an
 * envelope other than [peer][empty][body] / [empty][body] (all frames
 * drained) or RS_ERANGE for a body over cfg.max_body, both logged and
 * counted as rejected; RS_EIO otherwise.
 */
rs_err rs_zsock_recv(rs_zsock *s, struct rs_zsock_peer *peer, zmq_msg_t *body, int timeout_ms);

/* True when the id was chosen by the client (libzmq generates ids that start with 0). */
int rs_zsock_peer_is_named(const struct rs_zsock_peer *peer);

#endif

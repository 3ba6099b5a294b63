/* SPDX-License-Identifier: MIT */
/*
 * Who owns a request. A client is named by what the transport proves (the
 * peer's uid over ipc, from SO_PEERCRED on the connection; its CURVE public
 * key over tcp, the `User-Id` ZAP set) plus the secret its `hello` carried,
 * so neither another user nor another process of the same user can pose as
 * it. The owner is a 16-byte BLAKE2b digest of those, stored in each request
 * record; the secret itself is never stored or logged. Also the per-daemon
 * map from a routing id to the owner and the one connection that said hello
 * under it, which tokenizerd and postprocd consult before acting on a
 * message or sending a request's output. Leaves out quotas (pipeline_quota.h).
 */
#ifndef RS_PIPELINE_OWNER_H
#define RS_PIPELINE_OWNER_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "common/err.h"
#include "ipc/pipeline.h"

#define RS_PIPE_OWNER_LEN 16
#define RS_PIPE_OWNER_KEY_MAX 40 /* a z85 CURVE public key */

/* An owner digest; all zero only for records written before owners existed. */
struct rs_pipe_owner {
    uint8_t d[RS_PIPE_OWNER_LEN];
};

/* The connection a message arrived on and what the transport says about its peer. */
struct rs_pipe_conn {
    int fd;              /* libzmq's socket descriptor (ZMQ_SRCFD), -1 = unknown */
    uint64_t dev, ino;   /* fstat of fd when the message was read: fd numbers are reused */
    int tcp;
    uint32_t uid;        /* ipc: the peer process's uid */
    char key[RS_PIPE_OWNER_KEY_MAX + 1]; /* tcp: CURVE public key, or the peer address */
};

/*
 * The connection and credentials of a received message body (read before
 * zmq_msg_close). RS_OK, or RS_EIO when the kernel or libzmq would not say
 * (logged once by the caller; such a message is refused). Any thread that
 * owns the socket.
 */
rs_err rs_pipe_conn_of(const zmq_msg_t *body, int tcp, struct rs_pipe_conn *out);

/* 1 while c's descriptor still is the connection it was when c was read. */
int rs_pipe_conn_alive(const struct rs_pipe_conn *c);

/* The owner of a client with credentials c and secret (len 0: none sent). */
void rs_pipe_owner_make(const struct rs_pipe_conn *c, const char *secret, size_t len,
                        struct rs_pipe_owner *out);

static inline int rs_pipe_owner_eq(const struct rs_pipe_owner *a, const struct rs_pipe_owner *b)
{
    int diff = 0;
    for (int i = 0; i < RS_PIPE_OWNER_LEN; i++)
        diff |= a->d[i] ^ b->d[i];
    return diff == 0;
}

/* 8 hex digits naming an owner in logs (a digest prefix: says nothing about the secret). */
void rs_pipe_owner_tag(const struct rs_pipe_owner *o, char out[9]);

/*
 * The routing-id map of one daemon: (transport, routing id) -> the owner
 * that said hello under it and that hello's connection. Bounded (entries
 * whose connection closed are reused first), private to the daemon's
 * thread, rebuilt by clients saying hello again after a restart.
 */
typedef struct rs_pipe_owner_map rs_pipe_owner_map;

rs_err rs_pipe_owner_map_create(uint32_t capacity, rs_pipe_owner_map **out);
void rs_pipe_owner_map_destroy(rs_pipe_owner_map **m);

/* What rs_pipe_owner_map_hello decided. */
enum rs_pipe_bind {
    RS_PIPE_BIND_NEW = 0,   /* first hello under this routing id */
    RS_PIPE_BIND_SAME,      /* the same owner again (a reconnect, a repeat) */
    RS_PIPE_BIND_REFUSED,   /* another owner holds the routing id: a takeover */
};

/*
 * A hello from conn (secret as sent) under routing id rid (rid_len <= 64)
 * of transport conn->tcp. Another owner's binding is replaced only when its
 * connection closed and p (may be NULL) holds no request of that owner
 * under rid; otherwise the hello is REFUSED (the caller logs and answers
 * `forbidden`). *owner gets the hello's owner either way. Daemon thread.
 */
enum rs_pipe_bind rs_pipe_owner_map_hello(rs_pipe_owner_map *m, const struct rs_pipe *p,
                                          const uint8_t *rid, uint32_t rid_len,
                                          const struct rs_pipe_conn *conn, const char *secret,
                                          size_t secret_len, struct rs_pipe_owner *owner);

/*
 * A daemon's answer to a hello on peer's connection: binds the routing id
 * through rs_pipe_owner_map_hello and returns 0 (answer `welcome`), or, for
 * a takeover attempt by another owner, logs it (owner tag, uid, key; never
 * the secret) and returns 1 (answer `forbidden`). tokenizerd and postprocd
 * both answer hellos this way. Daemon thread.
 */
struct rs_zsock_peer;
struct rs_wire_str;
int rs_pipe_owner_hello_refused(rs_pipe_owner_map *m, const struct rs_pipe *p,
                                const struct rs_zsock_peer *peer, const struct rs_pipe_conn *conn,
                                const struct rs_wire_str *secret);

/*
 * The owner of a message from conn under rid: the bound owner when conn is
 * the connection that said hello, else the owner of conn's credentials
 * with no secret (a client that sends no hello). Daemon thread.
 */
void rs_pipe_owner_map_owner(rs_pipe_owner_map *m, const uint8_t *rid, uint32_t rid_len,
                             const struct rs_pipe_conn *conn, struct rs_pipe_owner *owner);

/*
 * 1 when output of a request owned by owner may go to rid now: the
 * routing id is bound to that owner and its hello's connection is still
 * open (libzmq routes rid there and nowhere else: the client ROUTERs do not
 * hand a routing id over to a second connection). Daemon thread.
 */
int rs_pipe_owner_map_may_send(rs_pipe_owner_map *m, int tcp, const uint8_t *rid,
                               uint32_t rid_len, const struct rs_pipe_owner *owner);

/* 1 when p holds a published request of owner under (tcp, rid). Any process. */
int rs_pipe_owner_holds(const struct rs_pipe *p, int tcp, const uint8_t *rid, uint32_t rid_len,
                        const struct rs_pipe_owner *owner);

#endif

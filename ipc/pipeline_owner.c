/* SPDX-License-Identifier: MIT */
/*
 * Request owners (pipeline_owner.h): the credentials of a connection, the
 * owner digest, and the routing-id map. The connection is named by libzmq's
 * ZMQ_SRCFD plus that descriptor's inode, since a closed descriptor's
 * number is soon given to another connection. Leaves out what a daemon does
 * with a refusal (it logs and answers `forbidden`).
 */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/pipeline_owner.h"
#include "ipc/pipeline_req.h"
#include "ipc/wire.h"
#include "ipc/zsock.h"

#define PROBES 16

struct bind_entry {
    uint8_t used, tcp, rid_len;
    uint8_t rid[RS_PIPE_CLIENT_MAX];
    struct rs_pipe_owner owner;
    struct rs_pipe_conn conn;
    uint64_t last_ns;
};

struct rs_pipe_owner_map {
    uint32_t cap; /* a power of two */
    struct bind_entry *e;
};

rs_err rs_pipe_conn_of(const zmq_msg_t *body, int tcp, struct rs_pipe_conn *out)
{
    memset(out, 0, sizeof(*out));
    out->tcp = tcp;
    out->fd = zmq_msg_get(body, ZMQ_SRCFD);
    struct stat st;
    if (out->fd < 0 || fstat(out->fd, &st) != 0)
        return RS_EIO;
    out->dev = (uint64_t)st.st_dev;
    out->ino = (uint64_t)st.st_ino;
    if (tcp) {
        /* CURVE: ZAP sets User-Id to the client's z85 key; the address is only a fallback */
        const char *k = zmq_msg_gets(body, "User-Id");
        if (k == NULL || *k == '\0')
            k = zmq_msg_gets(body, "Peer-Address");
        if (k == NULL)
            return RS_EIO;
        snprintf(out->key, sizeof(out->key), "%s", k);
        return RS_OK;
    }
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(out->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return RS_EIO;
    out->uid = (uint32_t)cred.uid;
    return RS_OK;
}

int rs_pipe_conn_alive(const struct rs_pipe_conn *c)
{
    struct stat st;
    return c->fd >= 0 && fstat(c->fd, &st) == 0 && (uint64_t)st.st_dev == c->dev &&
           (uint64_t)st.st_ino == c->ino;
}

void rs_pipe_owner_make(const struct rs_pipe_conn *c, const char *secret, size_t len,
                        struct rs_pipe_owner *out)
{
    crypto_generichash_state h;
    uint8_t head[6] = {'r', 's', 'o', 'w', 'n', (uint8_t)(c->tcp != 0)};
    uint8_t n[8];
    crypto_generichash_init(&h, NULL, 0, RS_PIPE_OWNER_LEN);
    crypto_generichash_update(&h, head, sizeof(head));
    if (c->tcp) {
        size_t kl = strnlen(c->key, sizeof(c->key));
        crypto_generichash_update(&h, (const uint8_t *)&kl, sizeof(kl));
        crypto_generichash_update(&h, (const uint8_t *)c->key, kl);
    } else {
        crypto_generichash_update(&h, (const uint8_t *)&c->uid, sizeof(c->uid));
    }
    uint64_t l = len; /* length first: (key, secret) pairs cannot run into each other */
    memcpy(n, &l, sizeof(n));
    crypto_generichash_update(&h, n, sizeof(n));
    if (len != 0)
        crypto_generichash_update(&h, (const uint8_t *)secret, len);
    crypto_generichash_final(&h, out->d, RS_PIPE_OWNER_LEN);
}

void rs_pipe_owner_tag(const struct rs_pipe_owner *o, char out[9])
{
    snprintf(out, 9, "%02x%02x%02x%02x", o->d[0], o->d[1], o->d[2], o->d[3]);
}

rs_err rs_pipe_owner_map_create(uint32_t capacity, rs_pipe_owner_map **out)
{
    uint32_t cap = 64;
    while (cap < capacity && cap < (1u << 24))
        cap <<= 1;
    rs_pipe_owner_map *m = calloc(1, sizeof(*m));
    if (m != NULL)
        m->e = calloc(cap, sizeof(struct bind_entry));
    if (m == NULL || m->e == NULL) {
        free(m);
        return RS_ENOMEM;
    }
    m->cap = cap;
    *out = m;
    return RS_OK;
}

void rs_pipe_owner_map_destroy(rs_pipe_owner_map **m)
{
    if (m == NULL || *m == NULL)
        return;
    free((*m)->e);
    free(*m);
    *m = NULL;
}

static uint32_t rid_hash(int tcp, const uint8_t *rid, uint32_t len)
{
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)(tcp != 0);
    for (uint32_t i = 0; i < len; i++)
        h = (h ^ rid[i]) * 0x100000001b3ull;
    return (uint32_t)(h ^ (h >> 32));
}

static int entry_is(const struct bind_entry *e, int tcp, const uint8_t *rid, uint32_t len)
{
    return e->used && e->tcp == (tcp != 0) && e->rid_len == len && memcmp(e->rid, rid, len) == 0;
}

/* The entry of (tcp, rid), or NULL; with make, a free, dead or least recent one to fill. */
static struct bind_entry *lookup(rs_pipe_owner_map *m, int tcp, const uint8_t *rid,
                                 uint32_t len, int make)
{
    uint32_t h = rid_hash(tcp, rid, len);
    struct bind_entry *spare = NULL;
    for (uint32_t i = 0; i < PROBES; i++) {
        struct bind_entry *e = &m->e[(h + i) & (m->cap - 1)];
        if (entry_is(e, tcp, rid, len))
            return e;
        if (!make)
            continue;
        if (!e->used || !rs_pipe_conn_alive(&e->conn)) {
            if (spare == NULL || spare->used)
                spare = e;
        } else if (spare == NULL || (spare->used && e->last_ns < spare->last_ns)) {
            spare = e;
        }
    }
    return spare;
}

static void fill(struct bind_entry *e, const uint8_t *rid, uint32_t len,
                 const struct rs_pipe_conn *conn, const struct rs_pipe_owner *owner)
{
    e->used = 1;
    e->tcp = (uint8_t)(conn->tcp != 0);
    e->rid_len = (uint8_t)len;
    memcpy(e->rid, rid, len);
    e->owner = *owner;
    e->conn = *conn;
    e->last_ns = rs_clock_ns();
}

enum rs_pipe_bind rs_pipe_owner_map_hello(rs_pipe_owner_map *m, const struct rs_pipe *p,
                                          const uint8_t *rid, uint32_t rid_len,
                                          const struct rs_pipe_conn *conn, const char *secret,
                                          size_t secret_len, struct rs_pipe_owner *owner)
{
    rs_pipe_owner_make(conn, secret, secret_len, owner);
    if (rid_len == 0 || rid_len > RS_PIPE_CLIENT_MAX)
        return RS_PIPE_BIND_REFUSED; /* no request can name it: nothing to bind */
    struct bind_entry *e = lookup(m, conn->tcp, rid, rid_len, 1);
    if (e == NULL)
        return RS_PIPE_BIND_REFUSED; /* unreachable: lookup always finds a spare */
    if (!entry_is(e, conn->tcp, rid, rid_len)) {
        fill(e, rid, rid_len, conn, owner);
        return RS_PIPE_BIND_NEW;
    }
    if (rs_pipe_owner_eq(&e->owner, owner)) {
        fill(e, rid, rid_len, conn, owner); /* the same client, maybe on a new connection */
        return RS_PIPE_BIND_SAME;
    }
    /* Another owner under a bound routing id: never while the first one's connection is
     * open or any of its requests is still held, so its output cannot be redirected. */
    if (rs_pipe_conn_alive(&e->conn) ||
        (p != NULL && rs_pipe_owner_holds(p, conn->tcp, rid, rid_len, &e->owner)))
        return RS_PIPE_BIND_REFUSED;
    fill(e, rid, rid_len, conn, owner);
    return RS_PIPE_BIND_NEW;
}

static int same_conn(const struct rs_pipe_conn *a, const struct rs_pipe_conn *b)
{
    return a->fd == b->fd && a->dev == b->dev && a->ino == b->ino;
}

/*
 * A message under a routing id whose hello connection is still open came on
 * that connection: the client ROUTERs never hand a connected routing id to a
 * second connection. So when the descriptor libzmq reports for it does not
 * match (ZMQ_SRCFD is read per message and can differ), the same transport
 * credentials are enough; without this a client's generate could be stored
 * under its credentials alone, and its own resends, holding the secret, be
 * refused as another owner's.
 */
static int same_peer_while_open(const struct rs_pipe_conn *bound, const struct rs_pipe_conn *c)
{
    if (bound->tcp != c->tcp || !rs_pipe_conn_alive(bound))
        return 0;
    return c->tcp ? strcmp(bound->key, c->key) == 0 : bound->uid == c->uid;
}

void rs_pipe_owner_map_owner(rs_pipe_owner_map *m, const uint8_t *rid, uint32_t rid_len,
                             const struct rs_pipe_conn *conn, struct rs_pipe_owner *owner)
{
    struct bind_entry *e = NULL;
    if (rid_len > 0 && rid_len <= RS_PIPE_CLIENT_MAX)
        e = lookup(m, conn->tcp, rid, rid_len, 0);
    if (e != NULL && (same_conn(&e->conn, conn) || same_peer_while_open(&e->conn, conn))) {
        e->last_ns = rs_clock_ns();
        *owner = e->owner;
        return;
    }
    rs_pipe_owner_make(conn, NULL, 0, owner);
}

int rs_pipe_owner_map_may_send(rs_pipe_owner_map *m, int tcp, const uint8_t *rid,
                               uint32_t rid_len, const struct rs_pipe_owner *owner)
{
    if (rid_len == 0 || rid_len > RS_PIPE_CLIENT_MAX)
        return 0;
    struct bind_entry *e = lookup(m, tcp, rid, rid_len, 0);
    return e != NULL && rs_pipe_owner_eq(&e->owner, owner) && rs_pipe_conn_alive(&e->conn);
}

int rs_pipe_owner_holds(const struct rs_pipe *p, int tcp, const uint8_t *rid, uint32_t rid_len,
                        const struct rs_pipe_owner *owner)
{
    uint32_t cursor = 0, state;
    struct rs_table_ref ref;
    uint64_t published = ~((1ull << RS_TABLE_USER) - 1);
    while (rs_table_next(p->requests, &cursor, published, &ref, &state) == RS_OK) {
        const struct rs_pipe_req *r = rs_pipe_req_at(p, ref.index);
        struct rs_pipe_owner o;
        memcpy(o.d, r->owner, sizeof(o.d));
        if (((r->flags & RS_PIPE_F_TCP) != 0) == (tcp != 0) && r->client_len == rid_len &&
            memcmp(r->client, rid, rid_len) == 0 && rs_pipe_owner_eq(&o, owner))
            return 1;
    }
    return 0;
}

int rs_pipe_owner_hello_refused(rs_pipe_owner_map *m, const struct rs_pipe *p,
                                const struct rs_zsock_peer *peer, const struct rs_pipe_conn *conn,
                                const struct rs_wire_str *secret)
{
    struct rs_pipe_owner owner;
    if (peer->len > RS_PIPE_CLIENT_MAX ||
        rs_pipe_owner_map_hello(m, p, peer->id, peer->len, conn, secret->ptr, secret->len,
                                &owner) != RS_PIPE_BIND_REFUSED)
        return 0;
    char tag[9];
    rs_pipe_owner_tag(&owner, tag);
    rs_log_warn("routing id takeover refused: a hello from client %s (uid %u%s%s) under a "
                "routing id another client holds", tag, conn->uid, conn->tcp ? ", key " : "",
                conn->tcp ? conn->key : "");
    return 1;
}

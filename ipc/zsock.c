/* SPDX-License-Identifier: MIT */
/*
 * ZeroMQ socket setup (zsock.h): option sets per role, the transport
 * policy (tcp only with CURVE; doorbells same-host), a guard against binding
 * over a live ipc:// listener (libzmq would silently unlink it), and
 * send/receive wrappers with explicit envelopes and size bounds. Rejections
 * are logged at most once a second per socket, so a hostile or broken peer
 * cannot flood the log; the counters keep the full count.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/failpoint_sys.h"
#include "ipc/wire.h"
#include "ipc/zsock.h"
#include "ipc/zsock_cap.h"

#ifndef ZMQ_ZAP_ENFORCE_DOMAIN
#define ZMQ_ZAP_ENFORCE_DOMAIN 93 /* libzmq >= 4.3 (a draft option in its header) */
#endif

struct rs_zsock {
    void *s;
    enum rs_zsock_role role;
    size_t max_body;
    char endpoint[RS_ZSOCK_ENDPOINT_MAX];
    struct rs_zsock_stats st;
    rs_zsock_cap *cap; /* bound roles: the connection caps */
    uint64_t last_log_ns; /* rate limit of rejection lines */
    uint64_t quiet;       /* rejections not logged since the last line */
};

static const char *role_name(enum rs_zsock_role role)
{
    static const char *const names[] = {"ROUTER", "PULL", "PUSH", "DEALER"};
    return (unsigned)role < 4 ? names[role] : "?";
}

/* A positive count from env `name` (logged when malformed), else `dflt`. */
static unsigned env_count(const char *name, unsigned dflt)
{
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0')
        return dflt;
    char *end;
    unsigned long n = strtoul(v, &end, 10);
    if (*end != '\0' || n == 0 || n > 1000000) {
        rs_log_warn("zsock: %s='%s' is not a count in 1..1000000; using %u", name, v, dflt);
        return dflt;
    }
    return (unsigned)n;
}

void rs_zsock_cfg_default(enum rs_zsock_role role, struct rs_zsock_cfg *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->sndhwm = role == RS_ZSOCK_ROUTER ? 10000 : 1000;
    cfg->rcvhwm = role == RS_ZSOCK_DEALER ? 10000 : 1000;
    if (role != RS_ZSOCK_PULL) { /* PULL answers the PUSH side's PINGs */
        cfg->heartbeat_ivl_ms = 1000;
        cfg->heartbeat_timeout_ms = 3000;
        cfg->heartbeat_ttl_ms = 3000;
    }
    cfg->reconnect_ivl_ms = role == RS_ZSOCK_PUSH ? 10 : 50;
    cfg->reconnect_ivl_max_ms = role == RS_ZSOCK_PUSH ? 100 : 1000;
    cfg->max_body = role == RS_ZSOCK_ROUTER   ? RS_WIRE_CLIENT_MSG_MAX
                    : role == RS_ZSOCK_DEALER ? RS_WIRE_SERVER_MSG_MAX
                                              : RS_WIRE_DOOR_MSG_MAX;
    cfg->max_frame = 2 * (int64_t)cfg->max_body;
    cfg->ipc_mode = 0660;
    cfg->max_conns = env_count("RINGSERVE_MAX_CONNS", 1024);
    cfg->max_conns_per_peer = env_count("RINGSERVE_MAX_CONNS_PER_PEER", 256);
}

/* Logs a rejection or drop unless one was logged less than a second ago. */
static void note(struct rs_zsock *z, const char *what, const char *detail)
{
    uint64_t now = rs_clock_ns();
    if (z->last_log_ns != 0 && now - z->last_log_ns < 1000000000ull) {
        z->quiet++;
        return;
    }
    rs_log_warn("zsock %s %s: %s: %s (%llu similar not logged since the last line)",
                role_name(z->role), z->endpoint, what, detail, (unsigned long long)z->quiet);
    z->last_log_ns = now;
    z->quiet = 0;
}

static rs_err setopt(struct rs_zsock *z, int opt, const void *v, size_t len, const char *name)
{
    if (rs_sys.zmq_setsockopt(z->s, opt, v, len) == 0)
        return RS_OK;
    rs_log_error("zsock %s %s: setting %s: %s", role_name(z->role), z->endpoint, name,
                 zmq_strerror(errno));
    return RS_EIO;
}

static rs_err setint(struct rs_zsock *z, int opt, int v, const char *name)
{
    return setopt(z, opt, &v, sizeof(v), name);
}

static rs_err apply_options(struct rs_zsock *z, const struct rs_zsock_cfg *c)
{
    rs_err e = setint(z, ZMQ_LINGER, 0, "ZMQ_LINGER");
    if (e == RS_OK)
        e = setint(z, ZMQ_SNDHWM, c->sndhwm, "ZMQ_SNDHWM");
    if (e == RS_OK)
        e = setint(z, ZMQ_RCVHWM, c->rcvhwm, "ZMQ_RCVHWM");
    if (e == RS_OK)
        e = setopt(z, ZMQ_MAXMSGSIZE, &c->max_frame, sizeof(c->max_frame), "ZMQ_MAXMSGSIZE");
    if (e == RS_OK && c->heartbeat_ivl_ms > 0) {
        e = setint(z, ZMQ_HEARTBEAT_IVL, c->heartbeat_ivl_ms, "ZMQ_HEARTBEAT_IVL");
        if (e == RS_OK)
            e = setint(z, ZMQ_HEARTBEAT_TIMEOUT, c->heartbeat_timeout_ms, "ZMQ_HEARTBEAT_TIMEOUT");
        if (e == RS_OK)
            e = setint(z, ZMQ_HEARTBEAT_TTL, c->heartbeat_ttl_ms, "ZMQ_HEARTBEAT_TTL");
    }
    if (e == RS_OK && (z->role == RS_ZSOCK_PUSH || z->role == RS_ZSOCK_DEALER)) {
        e = setint(z, ZMQ_IMMEDIATE, 1, "ZMQ_IMMEDIATE");
        if (e == RS_OK)
            e = setint(z, ZMQ_RECONNECT_IVL, c->reconnect_ivl_ms, "ZMQ_RECONNECT_IVL");
        if (e == RS_OK)
            e = setint(z, ZMQ_RECONNECT_IVL_MAX, c->reconnect_ivl_max_ms, "ZMQ_RECONNECT_IVL_MAX");
    }
    if (e == RS_OK && z->role == RS_ZSOCK_ROUTER) {
        e = setint(z, ZMQ_ROUTER_MANDATORY, 1, "ZMQ_ROUTER_MANDATORY");
        if (e == RS_OK)
            e = setint(z, ZMQ_ROUTER_HANDOVER, 1, "ZMQ_ROUTER_HANDOVER");
    }
    if (e == RS_OK && z->role == RS_ZSOCK_DEALER && c->routing_id_len > 0)
        e = setopt(z, ZMQ_ROUTING_ID, c->routing_id, c->routing_id_len, "ZMQ_ROUTING_ID");
    return e;
}

static rs_err apply_curve(struct rs_zsock *z, const struct rs_zsock_cfg *c)
{
    if (c->curve == NULL)
        return RS_OK;
    rs_err e = setint(z, ZMQ_HANDSHAKE_IVL, 5000, "ZMQ_HANDSHAKE_IVL");
    if (e == RS_OK && z->role == RS_ZSOCK_ROUTER) {
        e = setint(z, ZMQ_CURVE_SERVER, 1, "ZMQ_CURVE_SERVER");
        if (e == RS_OK)
            e = setopt(z, ZMQ_ZAP_DOMAIN, "ringserve", 9, "ZMQ_ZAP_DOMAIN");
        /* Without it libzmq lets every CURVE client in while no ZAP handler answers
         * (one that died, say): fail closed. A libzmq without the option refuses here. */
        if (e == RS_OK)
            e = setint(z, ZMQ_ZAP_ENFORCE_DOMAIN, 1, "ZMQ_ZAP_ENFORCE_DOMAIN");
    } else if (e == RS_OK) {
        e = setopt(z, ZMQ_CURVE_SERVERKEY, c->curve_server_public, RS_ZCERT_Z85_LEN + 1,
                   "ZMQ_CURVE_SERVERKEY");
        if (e == RS_OK)
            e = setopt(z, ZMQ_CURVE_PUBLICKEY, c->curve->public_z85, RS_ZCERT_Z85_LEN + 1,
                       "ZMQ_CURVE_PUBLICKEY");
    }
    if (e == RS_OK)
        e = setopt(z, ZMQ_CURVE_SECRETKEY, c->curve->secret_z85, RS_ZCERT_Z85_LEN + 1,
                   "ZMQ_CURVE_SECRETKEY");
    return e;
}

static rs_err refuse(const char *ep, const char *why)
{
    rs_log_error("zsock: refusing %s: %s", ep, why);
    return RS_EINVAL;
}

/* The transport policy of PROTOCOL.md §2; logs why an endpoint is refused. */
static rs_err check_policy(enum rs_zsock_role role, const char *ep, const struct rs_zsock_cfg *c)
{
    bool tcp = strncmp(ep, "tcp://", 6) == 0, ipc = strncmp(ep, "ipc://", 6) == 0;
    bool door = role == RS_ZSOCK_PUSH || role == RS_ZSOCK_PULL;
    if (strlen(ep) >= RS_ZSOCK_ENDPOINT_MAX)
        return refuse(ep, "endpoint longer than 255 bytes");
    if (!tcp && !ipc && strncmp(ep, "inproc://", 9) != 0)
        return refuse(ep, "only ipc://, inproc:// and (with CURVE) tcp:// endpoints");
    if (ipc && strlen(ep + 6) > sizeof(((struct sockaddr_un *)0)->sun_path) - 1) {
        refuse(ep, "ipc path over 107 bytes, the kernel's limit (sun_path)");
        return RS_ERANGE;
    }
    if (door && (tcp || c->curve != NULL))
        return refuse(ep, "doorbells stay on this host: ipc:// without CURVE");
    if (tcp && c->curve == NULL)
        return refuse(ep, "tcp:// requires CURVE keys (remote clients must authenticate)");
    if (c->curve != NULL && !rs_zcert_key_valid(c->curve->secret_z85, strlen(c->curve->secret_z85)))
        return refuse(ep, "CURVE needs this side's secret key");
    if (c->curve != NULL && role == RS_ZSOCK_ROUTER && c->zauth == NULL)
        return refuse(ep, "a CURVE server needs a running ZAP handler (rs_zauth_create), "
                          "or libzmq would accept any client key");
    if (c->curve != NULL && role == RS_ZSOCK_DEALER &&
        (c->curve_server_public == NULL ||
         !rs_zcert_key_valid(c->curve_server_public, strlen(c->curve_server_public))))
        return refuse(ep, "a CURVE client needs the server's public key");
    if (c->curve != NULL && !zmq_has("curve")) {
        rs_log_error("zsock: %s: this libzmq was built without CURVE", ep);
        return RS_EUNSUPPORTED;
    }
    if (role == RS_ZSOCK_DEALER && c->routing_id_len > 0 &&
        (c->routing_id_len > RS_ZSOCK_PEER_MAX || ((const uint8_t *)c->routing_id)[0] == 0))
        return refuse(ep, "routing id must be 1..255 bytes not starting with a zero byte");
    return RS_OK;
}

/*
 * RS_EEXIST when a process is accepting connections on the ipc path (a stale
 * file is fine); with take_over, a warning and RS_OK (libzmq then replaces
 * the path, and the old listener gets no new connections).
 */
static rs_err ipc_in_use(const char *path, int take_over)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strcmp(path, "*") == 0)
        return RS_OK;
    strcpy(sa.sun_path, path); /* length checked by check_policy */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return RS_OK; /* let the bind report the problem */
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    close(fd);
    if (rc == 0 && take_over) {
        rs_log_warn("zsock: ipc://%s is held by an older incarnation (stopped?): taking it over",
                    path);
        return RS_OK;
    }
    if (rc == 0) {
        rs_log_error("zsock: ipc://%s is in use by a running process; refusing to take it over",
                     path);
        return RS_EEXIST;
    }
    return RS_OK;
}

/* Binds or connects; resolves the endpoint name; chmods a bound ipc socket file. */
static rs_err attach(struct rs_zsock *z, const char *ep, const struct rs_zsock_cfg *c)
{
    bool bind = z->role == RS_ZSOCK_ROUTER || z->role == RS_ZSOCK_PULL;
    bool ipc = strncmp(ep, "ipc://", 6) == 0;
    if (bind && ipc && ipc_in_use(ep + 6, c->take_over) != RS_OK)
        return RS_EEXIST;
    if ((bind ? rs_sys.zmq_bind(z->s, ep) : rs_sys.zmq_connect(z->s, ep)) != 0) {
        rs_log_error("zsock %s: %s %s: %s", role_name(z->role), bind ? "bind" : "connect", ep,
                     zmq_strerror(errno));
        return errno == EADDRINUSE ? RS_EEXIST : RS_EIO;
    }
    size_t len = sizeof(z->endpoint);
    if (zmq_getsockopt(z->s, ZMQ_LAST_ENDPOINT, z->endpoint, &len) != 0 || z->endpoint[0] == 0)
        snprintf(z->endpoint, sizeof(z->endpoint), "%s", ep);
    if (bind && ipc && chmod(z->endpoint + 6, c->ipc_mode) != 0) {
        rs_log_error("zsock: chmod %o %s: %s", c->ipc_mode, z->endpoint + 6, strerror(errno));
        return RS_EIO;
    }
    return RS_OK;
}

rs_err rs_zsock_create(void *zctx, enum rs_zsock_role role, const char *endpoint,
                       const struct rs_zsock_cfg *cfg, rs_zsock **out)
{
    static const int types[] = {ZMQ_ROUTER, ZMQ_PULL, ZMQ_PUSH, ZMQ_DEALER};
    struct rs_zsock_cfg defaults;
    *out = NULL;
    if ((unsigned)role > RS_ZSOCK_DEALER || endpoint == NULL)
        return RS_EINVAL;
    if (cfg == NULL) {
        rs_zsock_cfg_default(role, &defaults);
        cfg = &defaults;
    }
    rs_err e = check_policy(role, endpoint, cfg);
    if (e != RS_OK)
        return e;
    struct rs_zsock *z = rs_sys.calloc(1, sizeof(*z));
    if (z == NULL)
        return RS_ENOMEM;
    z->role = role;
    z->max_body = cfg->max_body;
    snprintf(z->endpoint, sizeof(z->endpoint), "%s", endpoint);
    z->s = rs_sys.zmq_socket(zctx, types[role]);
    if (z->s == NULL) {
        rs_log_error("zsock: zmq_socket(%s): %s", role_name(role), zmq_strerror(errno));
        free(z);
        return RS_EIO;
    }
    e = apply_options(z, cfg);
    if (e == RS_OK)
        e = apply_curve(z, cfg);
    if (e == RS_OK)
        e = attach(z, endpoint, cfg);
    if (e == RS_OK && (role == RS_ZSOCK_ROUTER || role == RS_ZSOCK_PULL))
        e = rs_zsock_cap_start(zctx, z->s, z->endpoint, cfg->max_conns, cfg->max_conns_per_peer,
                               &z->cap);
    if (e != RS_OK) {
        rs_zsock_destroy(&z);
        return e;
    }
    *out = z;
    return RS_OK;
}

void rs_zsock_destroy(rs_zsock **sp)
{
    if (sp == NULL || *sp == NULL)
        return;
    rs_zsock_cap_stop((*sp)->s, &(*sp)->cap);
    zmq_close((*sp)->s);
    free(*sp);
    *sp = NULL;
}

void *rs_zsock_handle(rs_zsock *s)
{
    return s->s;
}

const char *rs_zsock_endpoint(const rs_zsock *s)
{
    return s->endpoint;
}

void rs_zsock_stats(const rs_zsock *s, struct rs_zsock_stats *out)
{
    *out = s->st;
    if (s->cap != NULL) {
        struct rs_zsock_cap_stats cs;
        rs_zsock_cap_stats(s->cap, &cs);
        out->conns_refused = cs.refused;
        out->conns_open = cs.open;
    }
}

int rs_zsock_peer_is_named(const struct rs_zsock_peer *peer)
{
    return peer->len > 0 && peer->id[0] != 0;
}

/* Maps a failed non-blocking send: full/absent peer = drop (counted), else an I/O error. */
static rs_err send_failed(struct rs_zsock *z)
{
    int err = errno;
    z->st.dropped++;
    if (err == EAGAIN || err == EINTR)
        return RS_EAGAIN;
    rs_log_error("zsock %s %s: send: %s", role_name(z->role), z->endpoint, zmq_strerror(err));
    return RS_EIO;
}

/*
 * Sends a frame after the first of a message. Once the first frame is queued the message
 * cannot be taken back, so a failure here (EINTR, an injected fault) is retried once,
 * blocking: left half-sent, the next message would be glued onto it and both lost.
 */
static rs_err send_rest(struct rs_zsock *z, const void *buf, size_t len, int flags)
{
    for (int attempt = 0; attempt < 2; attempt++)
        if (rs_sys.zmq_send(z->s, buf, len, flags) >= 0)
            return RS_OK;
    return RS_EIO;
}

rs_err rs_zsock_send(rs_zsock *z, const void *body, size_t len)
{
    if (z->role != RS_ZSOCK_PUSH && z->role != RS_ZSOCK_DEALER) {
        rs_log_error("zsock %s: rs_zsock_send needs a PUSH or DEALER socket", z->endpoint);
        return RS_EINVAL;
    }
    if (z->role == RS_ZSOCK_DEALER && rs_sys.zmq_send(z->s, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return send_failed(z);
    if (z->role == RS_ZSOCK_PUSH) {
        if (rs_sys.zmq_send(z->s, len ? body : "", len, ZMQ_DONTWAIT) < 0)
            return send_failed(z);
    } else if (send_rest(z, len ? body : "", len, 0) != RS_OK) {
        /* The delimiter went out, so the pipe has room: only a broken socket gets here. */
        return send_failed(z);
    }
    z->st.sent++;
    return RS_OK;
}

rs_err rs_zsock_router_send(rs_zsock *z, const struct rs_zsock_peer *peer, const void *body,
                            size_t len)
{
    if (z->role != RS_ZSOCK_ROUTER)
        return RS_EINVAL;
    if (rs_sys.zmq_send(z->s, peer->id, peer->len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        int err = errno;
        z->st.dropped++;
        if (err == EHOSTUNREACH) {
            note(z, "send", "no connected peer has that routing id (ROUTER_MANDATORY)");
            return RS_ENOENT;
        }
        if (err == EAGAIN) {
            note(z, "send", "peer at its high-water mark");
            return RS_EFULL;
        }
        rs_log_error("zsock ROUTER %s: send: %s", z->endpoint, zmq_strerror(err));
        return RS_EIO;
    }
    if (send_rest(z, "", 0, ZMQ_SNDMORE) != RS_OK ||
        send_rest(z, len ? body : "", len, 0) != RS_OK) {
        rs_log_error("zsock ROUTER %s: send body: %s", z->endpoint, zmq_strerror(errno));
        return RS_EIO;
    }
    z->st.sent++;
    return RS_OK;
}

/* Waits up to timeout_ms for input: RS_OK when readable, RS_EAGAIN otherwise. */
static rs_err wait_input(struct rs_zsock *z, int timeout_ms)
{
    if (timeout_ms == 0)
        return RS_OK; /* the non-blocking receive decides */
    zmq_pollitem_t it = {.socket = z->s, .events = ZMQ_POLLIN};
    int rc = rs_sys.zmq_poll(&it, 1, timeout_ms);
    if (rc > 0)
        return RS_OK;
    if (rc == 0 || errno == EINTR)
        return RS_EAGAIN;
    rs_log_error("zsock %s %s: poll: %s", role_name(z->role), z->endpoint, zmq_strerror(errno));
    return RS_EIO;
}

/* Receives one frame of a message into m (initialised); *more says whether frames follow. */
static rs_err recv_frame(struct rs_zsock *z, zmq_msg_t *m, int *more)
{
    if (rs_sys.zmq_msg_recv(m, z->s, ZMQ_DONTWAIT) < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return RS_EAGAIN;
        rs_log_error("zsock %s %s: recv: %s", role_name(z->role), z->endpoint,
                     zmq_strerror(errno));
        return RS_EIO;
    }
    *more = zmq_msg_more(m);
    return RS_OK;
}

/*
 * Receives a frame after the first of a message: the whole message has arrived, so a
 * failure here (EINTR, an injected fault) is retried once; otherwise the rest of this
 * message would be read as the start of the next.
 */
static rs_err recv_rest(struct rs_zsock *z, zmq_msg_t *m, int *more)
{
    rs_err e = recv_frame(z, m, more);
    return e == RS_OK ? e : recv_frame(z, m, more);
}

/* Discards the rest of a message (multipart messages arrive whole, so this never waits). */
static void drain(struct rs_zsock *z, int more)
{
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (recv_rest(z, &m, &more) != RS_OK)
            more = 0;
        zmq_msg_close(&m);
    }
}

static rs_err reject(struct rs_zsock *z, zmq_msg_t *body, int more, rs_err e, const char *why)
{
    drain(z, more);
    zmq_msg_close(body);
    zmq_msg_init(body);
    z->st.rejected++;
    note(z, "rejected a message", why);
    return e;
}

rs_err rs_zsock_recv(rs_zsock *z, struct rs_zsock_peer *peer, zmq_msg_t *body, int timeout_ms)
{
    int more = 0;
    if (z->role == RS_ZSOCK_PUSH)
        return RS_EINVAL;
    rs_err e = wait_input(z, timeout_ms);
    if (e == RS_OK && z->role == RS_ZSOCK_ROUTER) {
        zmq_msg_t id;
        zmq_msg_init(&id);
        e = recv_frame(z, &id, &more);
        if (e == RS_OK && peer != NULL) {
            peer->len = (uint8_t)(zmq_msg_size(&id) < RS_ZSOCK_PEER_MAX ? zmq_msg_size(&id)
                                                                         : RS_ZSOCK_PEER_MAX);
            memcpy(peer->id, zmq_msg_data(&id), peer->len);
        }
        zmq_msg_close(&id);
        if (e == RS_OK && !more)
            return reject(z, body, 0, RS_EPROTO, "routing id without a body");
    }
    if (e == RS_OK && z->role != RS_ZSOCK_PULL) { /* the empty delimiter frame */
        e = z->role == RS_ZSOCK_ROUTER ? recv_rest(z, body, &more) : recv_frame(z, body, &more);
        if (e == RS_OK && (zmq_msg_size(body) != 0 || !more))
            return reject(z, body, more, RS_EPROTO, "no empty delimiter frame before the body");
    }
    if (e == RS_OK)
        e = z->role == RS_ZSOCK_PULL ? recv_frame(z, body, &more) : recv_rest(z, body, &more);
    if (e != RS_OK)
        return e;
    if (more)
        return reject(z, body, more, RS_EPROTO, "more than one body frame");
    if (zmq_msg_size(body) > z->max_body)
        return reject(z, body, 0, RS_ERANGE, "body over the size limit");
    z->st.received++;
    return RS_OK;
}

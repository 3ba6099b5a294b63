/* SPDX-License-Identifier: MIT */
/*
 * Client endpoints of tokenizerd and postprocd (pipeline_front.h): the
 * option table shared by both, the tcp-needs-CURVE rule, and binding the ipc and
 * tcp ROUTERs. One place, so both frontends always apply the same access
 * policy.
 */
#include "ipc/pipeline_front.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "ipc/rundir.h"

void rs_pipe_front_opts_init(struct rs_pipe_front_opts *o)
{
    memset(o, 0, sizeof(*o));
}

#define FRONT_STR(nm, field, a, h)                                                               \
    {.name = nm, .kind = RS_OPT_STR, .off = offsetof(struct rs_pipe_front_opts, field),          \
     .size = sizeof(((struct rs_pipe_front_opts *)0)->field), .arg = a, .help = h}

const struct rs_opt rs_pipe_front_opt_table[] = {
    FRONT_STR("listen", listen, "tcp://HOST:PORT",
              "also serve remote clients there (off by default);\n"
              "requires --curve-secret and --curve-allow"),
    FRONT_STR("curve-secret", curve_secret, "FILE",
              "this server's CURVE key pair (ringserve-keygen; mode 0600)"),
    FRONT_STR("curve-allow", curve_allow, "FILE",
              "client public keys allowed over tcp, one per line"),
    {0},
};

rs_err rs_pipe_front_check(const struct rs_pipe_front_opts *o, char *err, size_t err_len)
{
    int curve = o->curve_secret[0] != '\0' || o->curve_allow[0] != '\0';
    if (o->listen[0] == '\0') {
        if (curve) {
            snprintf(err, err_len, "--curve-secret/--curve-allow only apply with --listen");
            return RS_EINVAL;
        }
        return RS_OK;
    }
    if (strncmp(o->listen, "tcp://", 6) != 0) {
        snprintf(err, err_len, "--listen %s: only tcp://HOST:PORT (local clients use the "
                 "ipc socket in the runtime directory)", o->listen);
        return RS_EINVAL;
    }
    if (o->curve_secret[0] == '\0' || o->curve_allow[0] == '\0') {
        snprintf(err, err_len, "--listen %s refused: remote clients must authenticate, so tcp "
                 "needs --curve-secret FILE and --curve-allow FILE (ringserve-keygen writes "
                 "key pairs)", o->listen);
        return RS_EINVAL;
    }
    return RS_OK;
}

/*
 * A client ROUTER keeps a routing id on the connection that has it: a second
 * connection under the same id is ignored by libzmq (ROUTER_HANDOVER off),
 * so nobody can take a client's output over by reusing its id. The daemons
 * also send a request's output only to the connection that said hello as
 * its owner (pipeline_owner.h); a client whose connection dropped
 * reconnects and says hello again.
 */
static rs_err keep_routing_ids(rs_zsock *s, char *err, size_t err_len)
{
    int off = 0;
    if (zmq_setsockopt(rs_zsock_handle(s), ZMQ_ROUTER_HANDOVER, &off, sizeof(off)) == 0)
        return RS_OK;
    snprintf(err, err_len, "ZMQ_ROUTER_HANDOVER: %s", zmq_strerror(zmq_errno()));
    return RS_EIO;
}

static rs_err open_tcp(struct rs_pipe_front *f, void *zctx, const struct rs_pipe_front_opts *o,
                       char *err, size_t err_len)
{
    rs_err rc = rs_zcert_load(o->curve_secret, &f->cert);
    if (rc == RS_OK && f->cert.secret_z85[0] == '\0')
        rc = RS_EINVAL;
    if (rc != RS_OK) {
        snprintf(err, err_len, "--curve-secret %s: cannot load a key pair with a secret key "
                 "(%s)", o->curve_secret, rs_strerror(rc));
        return rc;
    }
    rc = rs_zauth_create(zctx, o->curve_allow, &f->zauth);
    if (rc != RS_OK) {
        snprintf(err, err_len, "--curve-allow %s: %s", o->curve_allow, rs_strerror(rc));
        return rc;
    }
    struct rs_zsock_cfg cfg;
    rs_zsock_cfg_default(RS_ZSOCK_ROUTER, &cfg);
    cfg.curve = &f->cert;
    cfg.zauth = f->zauth;
    rc = rs_zsock_create(zctx, RS_ZSOCK_ROUTER, o->listen, &cfg, &f->tcp);
    if (rc != RS_OK) {
        snprintf(err, err_len, "cannot listen on %s: %s", o->listen, rs_strerror(rc));
        return rc;
    }
    if ((rc = keep_routing_ids(f->tcp, err, err_len)) != RS_OK)
        return rc;
    rs_log_info("serving CURVE clients on %s (allowlist %s)", rs_zsock_endpoint(f->tcp),
                o->curve_allow);
    return RS_OK;
}

rs_err rs_pipe_front_open(struct rs_pipe_front *f, void *zctx, const char *rundir,
                          const char *name, const struct rs_pipe_front_opts *o, char *err,
                          size_t err_len)
{
    char file[96], ep[RS_ZSOCK_ENDPOINT_MAX];
    memset(f, 0, sizeof(*f));
    snprintf(file, sizeof(file), "%s.sock", name);
    rs_err rc = rs_rundir_endpoint(rundir, file, ep, sizeof(ep));
    if (rc != RS_OK) {
        snprintf(err, err_len, "runtime directory %s: socket path for %s too long", rundir, file);
        return rc;
    }
    struct rs_zsock_cfg cfg;
    rs_zsock_cfg_default(RS_ZSOCK_ROUTER, &cfg);
    cfg.take_over = 1; /* the stage fenced its predecessor before binding (rs_pipe_open) */
    rc = rs_zsock_create(zctx, RS_ZSOCK_ROUTER, ep, &cfg, &f->ipc);
    if (rc != RS_OK) {
        snprintf(err, err_len, "cannot bind %s: %s%s", ep, rs_strerror(rc),
                 rc == RS_EEXIST ? " (another instance is serving there)" : "");
        return rc;
    }
    if ((rc = keep_routing_ids(f->ipc, err, err_len)) != RS_OK) {
        rs_pipe_front_close(f);
        return rc;
    }
    if (o->listen[0] != '\0' && (rc = open_tcp(f, zctx, o, err, err_len)) != RS_OK) {
        rs_pipe_front_close(f);
        return rc;
    }
    return RS_OK;
}

void rs_pipe_front_close(struct rs_pipe_front *f)
{
    rs_zsock_destroy(&f->tcp);
    rs_zsock_destroy(&f->ipc);
    rs_zauth_destroy(&f->zauth);
}

int rs_pipe_front_poll_items(const struct rs_pipe_front *f, zmq_pollitem_t *items,
                             rs_zsock **socks)
{
    int n = 0;
    socks[n++] = f->ipc;
    if (f->tcp != NULL)
        socks[n++] = f->tcp;
    for (int i = 0; i < n; i++)
        items[i] = (zmq_pollitem_t){.socket = rs_zsock_handle(socks[i]), .events = ZMQ_POLLIN};
    return n;
}

/* SPDX-License-Identifier: MIT */
/*
 * The client-facing endpoints of the two frontend daemons (tokenizerd and
 * postprocd), which must offer the same access rules (PROTOCOL.md §2.3): a
 * ROUTER on ipc://<rundir>/<stage>.sock, where the runtime directory's mode
 * is the gate (0700, or 0750 with `--group`), and optionally a second ROUTER
 * on `--listen tcp://HOST:PORT` that only CURVE-authenticated clients whose
 * public key is in `--curve-allow` can reach. tcp without CURVE is refused
 * at argument time. Leaves out what the daemons say on these sockets.
 */
#ifndef RS_PIPELINE_FRONT_H
#define RS_PIPELINE_FRONT_H

#include <stddef.h>
#include <zmq.h>

#include "common/err.h"
#include "common/opt.h"
#include "ipc/zauth.h"
#include "ipc/zcert.h"
#include "ipc/zsock.h"

#define RS_PIPE_FRONT_PATH_MAX 512

/* The frontend options (`--listen`, `--curve-secret`, `--curve-allow`; --group is every
 * stage's, ipc/stage.h). */
struct rs_pipe_front_opts {
    char listen[RS_ZSOCK_ENDPOINT_MAX];         /* tcp://HOST:PORT; "" = no remote clients */
    char curve_secret[RS_PIPE_FRONT_PATH_MAX];  /* this server's key pair file (0600) */
    char curve_allow[RS_PIPE_FRONT_PATH_MAX];   /* allowlist of client public keys */
};

/* The client sockets of one frontend daemon; zero it before rs_pipe_front_open. */
struct rs_pipe_front {
    rs_zsock *ipc;         /* ROUTER on ipc://<rundir>/<name>.sock; always open */
    rs_zsock *tcp;         /* ROUTER on opts.listen with CURVE, or NULL */
    rs_zauth *zauth;       /* ZAP handler for tcp, or NULL */
    struct rs_zcert cert;  /* server key pair when tcp is on */
};

/* Empty options (ipc only, owner-only rundir). Any thread. */
void rs_pipe_front_opts_init(struct rs_pipe_front_opts *o);

/* The frontend options as a table (common/opt.h) over struct rs_pipe_front_opts. */
extern const struct rs_opt rs_pipe_front_opt_table[];
#define RS_PIPE_FRONT_OPTS_TITLE                                                                 \
    "client access options (give tokenizerd and postprocd the same ones)"

/*
 * Cross-option rules, after every option was parsed: --listen needs a
 * tcp:// endpoint plus both --curve-secret and --curve-allow (remote clients
 * must authenticate), and the CURVE files need --listen. RS_OK or RS_EINVAL
 * with err naming the rule. main only.
 */
rs_err rs_pipe_front_check(const struct rs_pipe_front_opts *o, char *err, size_t err_len);

/*
 * Binds the ROUTER(s): ipc://<rundir>/<name>.sock (rundir must be prepared:
 * rs_rundir_prepare), and with opts->listen the tcp ROUTER after loading the
 * key pair and starting the ZAP handler on zctx. Returns RS_OK, or what
 * rs_zcert_load / rs_zauth_create / rs_zsock_create returned, with err
 * naming the step; f is then closed. The calling thread owns the sockets.
 */
rs_err rs_pipe_front_open(struct rs_pipe_front *f, void *zctx, const char *rundir,
                          const char *name, const struct rs_pipe_front_opts *o, char *err,
                          size_t err_len);

/* Closes the sockets and stops the ZAP handler; safe on a zeroed or partly opened f. */
void rs_pipe_front_close(struct rs_pipe_front *f);

/*
 * Fills items[0..n) for zmq_poll (ZMQ_POLLIN) and socks[0..n) with the open
 * client sockets, ipc first, then tcp when it is on; returns n (1 or 2).
 * items and socks need 2 entries. The calling thread (the sockets' owner).
 */
int rs_pipe_front_poll_items(const struct rs_pipe_front *f, zmq_pollitem_t *items,
                             rs_zsock **socks);

/* The socket for a client of that transport (tcp: 1), or NULL when it is not open. */
static inline rs_zsock *rs_pipe_front_sock(const struct rs_pipe_front *f, int tcp)
{
    return tcp ? f->tcp : f->ipc;
}

#endif

/* SPDX-License-Identifier: MIT */
/*
 * Connection caps of a bound ZeroMQ socket (ipc/ internal; zsock.c starts
 * one per bind). libzmq accepts every connection and aborts its ipc listener
 * when accept() meets the open-file limit, so ~1,000 idle connections from
 * one local user could crash a daemon. A monitor thread sees each accepted
 * connection and shuts down (shutdown(2); libzmq then closes it) any beyond
 * the cap of the endpoint, beyond the cap of its peer (uid over ipc://,
 * address over tcp://), or whose descriptor number comes near the current
 * RLIMIT_NOFILE. Leaves out: refusing before accept (libzmq offers no hook).
 */
#ifndef RS_ZSOCK_CAP_H
#define RS_ZSOCK_CAP_H

#include <stdint.h>

#include "common/err.h"

typedef struct rs_zsock_cap rs_zsock_cap;

struct rs_zsock_cap_stats {
    uint64_t accepted; /* connections kept */
    uint64_t refused;  /* connections shut at a cap */
    uint32_t open;     /* connections open now */
};

/*
 * Starts capping `sock` (a bound socket of zctx; call from its owning
 * thread, before it serves) at max_total connections, max_per_peer per uid or
 * address. `label` names it in logs (the endpoint). RS_OK with *out owned;
 * RS_EIO when the monitor cannot start. Raises this process's soft
 * RLIMIT_NOFILE to its hard limit once (logged).
 */
rs_err rs_zsock_cap_start(void *zctx, void *sock, const char *label, uint32_t max_total,
                          uint32_t max_per_peer, rs_zsock_cap **out);

/* Stops the monitor and frees; call before closing the socket. Accepts NULL, clears *c. */
void rs_zsock_cap_stop(void *sock, rs_zsock_cap **c);

/* Counters; any thread. */
void rs_zsock_cap_stats(const rs_zsock_cap *c, struct rs_zsock_cap_stats *out);

/* accept() calls on a unix socket that met the open-file limit (their errno remapped). */
uint64_t rs_zsock_cap_accept_emfile(void);

#endif

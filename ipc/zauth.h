/* SPDX-License-Identifier: MIT */
/*
 * ZAP handler (ZeroMQ RFC 27) for CURVE: a thread answering libzmq's
 * authentication requests on inproc://zeromq.zap.01, accepting only client
 * public keys listed in an allowlist file and logging every refusal (at most
 * one line a second, with a count of the ones folded in). The file is read
 * again whenever it changes, so revoking a key needs no restart; a file that
 * cannot be read or parsed refuses everyone (fails closed). Accepted clients
 * get their z85 key as the ZeroMQ "User-Id" of their messages.
 *
 * Allowlist format: one z85 public key per line, bare or as "public = KEY"
 * (so .pub files written by rs_zcert_save can be concatenated); a line
 * starting with '#' is a comment, as is anything after whitespace + '#'.
 */
#ifndef RS_ZAUTH_H
#define RS_ZAUTH_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"

#define RS_ZAUTH_KEYS_MAX 4096 /* keys one allowlist may hold */

typedef struct rs_zauth rs_zauth;

struct rs_zauth_stats {
    uint64_t allowed; /* handshakes accepted */
    uint64_t refused; /* handshakes refused */
    uint64_t reloads; /* times the allowlist was (re)read */
};

/*
 * Starts the handler on zctx, which must outlive it; create it before any
 * CURVE socket of that context binds. The allowlist must be readable now.
 * RS_OK with *out owned by the caller; RS_EEXIST when the context already has
 * a ZAP handler; RS_ENOENT / RS_EINVAL for the file; RS_EIO. Any thread.
 */
rs_err rs_zauth_create(void *zctx, const char *allowlist_path, rs_zauth **out);

/* Stops the thread (within ~100 ms) and frees. Call before zmq_ctx_term. Accepts NULL. */
void rs_zauth_destroy(rs_zauth **z);

/*
 * false once the handler thread has ended on an error. It then logs and sends
 * the process SIGTERM: libzmq refuses every CURVE handshake while no handler
 * answers (the sockets set ZMQ_ZAP_ENFORCE_DOMAIN), so the daemon stops and
 * its supervisor restarts it instead of it serving deaf, or open. Any thread.
 */
bool rs_zauth_alive(const rs_zauth *z);

/* Counters; any thread. */
void rs_zauth_stats(const rs_zauth *z, struct rs_zauth_stats *out);

#endif

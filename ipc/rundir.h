/* SPDX-License-Identifier: MIT */
/*
 * The runtime directory holding the daemons' ipc:// sockets (PROTOCOL.md
 * §2.2). Access control for local clients is the directory's permissions:
 * only the service user (mode 0700), or also one configured group (0750,
 * group-owned), may enter it and so reach a socket. A directory that would
 * let anyone else in, or that someone else owns, is refused rather than
 * fixed, since the mistake may be deliberate elsewhere. Sockets are zsock.h's.
 */
#ifndef RS_RUNDIR_H
#define RS_RUNDIR_H

#include <stddef.h>

#include "common/err.h"

/* Longest ipc socket path: sizeof(sockaddr_un.sun_path) - 1 for the NUL. */
#define RS_RUNDIR_PATH_MAX 107

/*
 * Creates dir (its parent must exist) with mode 0700, or 0750 owned by group
 * when group is not NULL/"", or checks an existing one: a real directory (no
 * symlink), owned by this process's effective uid, with exactly that mode
 * and group. RS_OK; RS_ENOENT (parent or group missing); RS_EINVAL (wrong
 * type, owner, mode or group: the log says which and how to fix it);
 * RS_EIO. Any thread (call before binding).
 */
rs_err rs_rundir_prepare(const char *dir, const char *group);

/*
 * Writes "ipc://<dir>/<name>" into out (cap bytes). RS_OK; RS_ERANGE when
 * the socket path would exceed RS_RUNDIR_PATH_MAX bytes (logged with the
 * length) or out is too small; RS_EINVAL for a name containing '/'. Any thread.
 */
rs_err rs_rundir_endpoint(const char *dir, const char *name, char *out, size_t cap);

/*
 * The default runtime directory of an instance, the one every daemon and
 * client agrees on without being told: $RINGSERVE_RUNDIR, else
 * $XDG_RUNTIME_DIR/ringserve-<instance>, else /tmp/ringserve-<uid>-<instance>.
 * Written into out (cap bytes, truncated). Any thread.
 */
void rs_rundir_default(const char *instance, char *out, size_t cap);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * CURVE key pairs for tcp:// access (PROTOCOL.md §2.3): generate one with
 * libzmq's zmq_curve_keypair, save it as text files (z85, the encoding
 * libzmq takes), load and check it. A secret key file must be private to its
 * owner (mode 0600), as ssh requires of identity files. The allowlist of
 * client keys is zauth.h's; the socket options are zsock.h's.
 *
 * File format, one "name = value" per line, '#' starts a comment:
 *   public = <40 z85 characters>
 *   secret = <40 z85 characters>      (secret key files only)
 */
#ifndef RS_ZCERT_H
#define RS_ZCERT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"

#define RS_ZCERT_Z85_LEN 40 /* z85 characters of a 32-byte key */

struct rs_zcert {
    char public_z85[RS_ZCERT_Z85_LEN + 1]; /* NUL-terminated */
    char secret_z85[RS_ZCERT_Z85_LEN + 1]; /* "" when only the public key is known */
};

/* A fresh key pair. RS_OK, or RS_EUNSUPPORTED when libzmq lacks CURVE. Any thread. */
rs_err rs_zcert_generate(struct rs_zcert *out);

/*
 * Writes the key pair: secret_path gets both keys, created with mode 0600
 * and never overwritten (RS_EEXIST); public_path (may be NULL) gets the
 * public key, mode 0644, also never overwritten. RS_OK, RS_EINVAL (no
 * secret in c), RS_EEXIST, RS_EIO (logged). Any thread.
 */
rs_err rs_zcert_save(const struct rs_zcert *c, const char *secret_path, const char *public_path);

/*
 * Reads a key file. A secret key must match the public key in the same file
 * and the file must not be readable by group or others. RS_OK; RS_ENOENT;
 * RS_EINVAL for a malformed file (the line is logged); RS_EIO. Any thread.
 */
rs_err rs_zcert_load(const char *path, struct rs_zcert *out);

/* True when z85 is exactly RS_ZCERT_Z85_LEN z85 characters (a 32-byte key). Any thread. */
bool rs_zcert_key_valid(const char *z85, size_t len);

#endif

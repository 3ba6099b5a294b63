/* SPDX-License-Identifier: MIT */
/*
 * The one error enum of ringserve. Fallible calls return rs_err (RS_OK = 0,
 * failures negative); the failure site logs the detail, callers propagate.
 */
#ifndef RS_ERR_H
#define RS_ERR_H

typedef enum rs_err {
    RS_OK = 0,
    RS_ENOMEM = -1,    /* allocation or shared-memory space exhausted */
    RS_EINVAL = -2,    /* bad argument or malformed input */
    RS_EAGAIN = -3,    /* nothing to do now / resource busy; retry later */
    RS_ESTALE = -4,    /* fenced: stale generation or older incarnation */
    RS_EIO = -5,       /* system call or file I/O failed */
    RS_EPROTO = -6,    /* wire message violates the protocol */
    RS_EDEVICE = -7,   /* accelerator (CUDA/NCCL) failure */
    RS_ENOENT = -8,    /* named thing does not exist */
    RS_EEXIST = -9,    /* named thing already exists */
    RS_ERANGE = -10,   /* value out of the allowed range, or too large */
    RS_EMISMATCH = -11,/* layout, version or magic mismatch */
    RS_EFULL = -12,    /* ring, table or queue full (backpressure) */
    RS_EUNSUPPORTED = -13, /* valid but not supported by this build */
} rs_err;

/* Static text for an error code; never NULL. Any thread. */
const char *rs_strerror(rs_err err);

#endif

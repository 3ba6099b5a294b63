/* SPDX-License-Identifier: MIT */
/* Text for the rs_err codes. */
#include "common/err.h"

const char *rs_strerror(rs_err err)
{
    switch (err) {
    case RS_OK: return "success";
    case RS_ENOMEM: return "out of memory";
    case RS_EINVAL: return "invalid argument or input";
    case RS_EAGAIN: return "try again";
    case RS_ESTALE: return "stale generation or fenced incarnation";
    case RS_EIO: return "I/O or system call failure";
    case RS_EPROTO: return "protocol violation";
    case RS_EDEVICE: return "device failure";
    case RS_ENOENT: return "not found";
    case RS_EEXIST: return "already exists";
    case RS_ERANGE: return "out of range";
    case RS_EMISMATCH: return "layout, version or magic mismatch";
    case RS_EFULL: return "full";
    case RS_EUNSUPPORTED: return "unsupported";
    }
    return "unknown error";
}

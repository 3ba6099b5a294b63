/* SPDX-License-Identifier: MIT */
/* Doorbell sockets between stages; see pipeline_door.h. */
#include "ipc/pipeline_door.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/pipeline_config.h"
#include "ipc/rundir.h"

int rs_pipe_door_has_inbox(enum rs_pipe_stage stage)
{
    return stage == RS_PIPE_STAGE_SCHEDULERD || stage == RS_PIPE_STAGE_LAUNCHERD ||
           stage == RS_PIPE_STAGE_POSTPROCD;
}

static int fault_from_env(void)
{
    const char *f = getenv("RS_DOORBELL_FAULT");
    if (f == NULL || f[0] == '\0')
        return RS_PIPE_DOOR_FAULT_NONE;
    if (strcmp(f, "drop") == 0)
        return RS_PIPE_DOOR_FAULT_DROP;
    if (strcmp(f, "dup") == 0)
        return RS_PIPE_DOOR_FAULT_DUP;
    rs_log_warn("RS_DOORBELL_FAULT=%s is neither drop nor dup: ignored", f);
    return RS_PIPE_DOOR_FAULT_NONE;
}

static rs_err endpoint(const char *rundir, enum rs_pipe_stage s, char *out, size_t cap)
{
    char name[64];
    snprintf(name, sizeof(name), "%s.door", rs_pipe_stage_name(s));
    return rs_rundir_endpoint(rundir, name, out, cap);
}

rs_err rs_pipe_doors_open(struct rs_pipe_doors *d, void *zctx, const char *rundir,
                          enum rs_pipe_stage self)
{
    memset(d, 0, sizeof(*d));
    d->self = self;
    d->fault = fault_from_env();
    if (d->fault != RS_PIPE_DOOR_FAULT_NONE)
        rs_log_warn("doorbell fault mode: %s every doorbell sent",
                    d->fault == RS_PIPE_DOOR_FAULT_DROP ? "dropping" : "duplicating");
    char ep[RS_ZSOCK_ENDPOINT_MAX];
    rs_err rc;
    if (rs_pipe_door_has_inbox(self)) {
        struct rs_zsock_cfg cfg;
        rs_zsock_cfg_default(RS_ZSOCK_PULL, &cfg);
        cfg.take_over = 1; /* the caller fenced its predecessor (rs_pipe_open) before this */
        if ((rc = endpoint(rundir, self, ep, sizeof(ep))) != RS_OK ||
            (rc = rs_zsock_create(zctx, RS_ZSOCK_PULL, ep, &cfg, &d->inbox)) != RS_OK)
            goto fail;
    }
    for (int s = 0; s < RS_PIPE_N_STAGES; s++) {
        if (s == (int)self || !rs_pipe_door_has_inbox((enum rs_pipe_stage)s))
            continue;
        if ((rc = endpoint(rundir, (enum rs_pipe_stage)s, ep, sizeof(ep))) != RS_OK ||
            (rc = rs_zsock_create(zctx, RS_ZSOCK_PUSH, ep, NULL, &d->to[s])) != RS_OK)
            goto fail;
    }
    return RS_OK;
fail:
    rs_pipe_doors_close(d);
    return rc;
}

void rs_pipe_doors_close(struct rs_pipe_doors *d)
{
    rs_zsock_destroy(&d->inbox);
    for (int s = 0; s < RS_PIPE_N_STAGES; s++)
        rs_zsock_destroy(&d->to[s]);
}

rs_err rs_pipe_door_send(struct rs_pipe_doors *d, enum rs_pipe_stage to,
                         const struct rs_wire_door *door)
{
    if ((unsigned)to >= RS_PIPE_N_STAGES || d->to[to] == NULL)
        return RS_EINVAL;
    uint8_t mem[RS_WIRE_DOOR_MSG_MAX];
    struct rs_wire_buf buf;
    rs_wire_buf_init_fixed(&buf, mem, sizeof(mem));
    struct rs_wire_door stamped = *door;
    if (stamped.sent_ns == 0)
        stamped.sent_ns = rs_clock_ns();
    rs_err rc = rs_wire_door_encode(&stamped, &buf);
    if (rc != RS_OK)
        return RS_EINVAL;
    if (d->fault == RS_PIPE_DOOR_FAULT_DROP) {
        d->dropped++;
        return RS_OK;
    }
    int copies = d->fault == RS_PIPE_DOOR_FAULT_DUP ? 2 : 1;
    for (int i = 0; i < copies; i++) {
        if (rs_zsock_send(d->to[to], buf.data, buf.len) == RS_OK)
            d->sent++;
        else
            d->dropped++;
    }
    return RS_OK;
}

rs_err rs_pipe_door_ring(struct rs_pipe_doors *d, enum rs_pipe_stage to,
                         enum rs_wire_door_kind kind, uint64_t a, uint64_t b)
{
    struct rs_wire_door door;
    memset(&door, 0, offsetof(struct rs_wire_door, entries));
    door.kind = kind;
    door.u.f[0] = a;
    door.u.f[1] = b;
    return rs_pipe_door_send(d, to, &door);
}

rs_err rs_pipe_door_recv(struct rs_pipe_doors *d, struct rs_wire_door *out, int timeout_ms)
{
    if (d->inbox == NULL)
        return RS_EINVAL;
    zmq_msg_t body;
    zmq_msg_init(&body);
    rs_err rc = rs_zsock_recv(d->inbox, NULL, &body, timeout_ms);
    if (rc == RS_OK) {
        struct rs_wire_error err;
        rc = rs_wire_door_decode(zmq_msg_data(&body), zmq_msg_size(&body), out, &err);
        if (rc != RS_OK)
            rs_log_warn("dropping a malformed doorbell: %s", err.msg);
    }
    zmq_msg_close(&body);
    return rc;
}

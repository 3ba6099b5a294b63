/* SPDX-License-Identifier: MIT */
/*
 * Doorbells between the stages of one instance: each stage that is rung
 * (schedulerd, launcherd, postprocd) binds a PULL inbox at
 * ipc://<rundir>/<stage>.door; senders connect a PUSH to every inbox. A
 * doorbell only says "look at shared memory" (DESIGN.md principle 1): it is
 * sent without blocking, may be dropped or duplicated, and receivers also
 * rescan on a timer. RS_DOORBELL_FAULT=drop|dup in the environment drops or
 * duplicates every doorbell this process sends, which the tests use to show
 * that nothing depends on delivery.
 */
#ifndef RS_PIPELINE_DOOR_H
#define RS_PIPELINE_DOOR_H

#include "ipc/pipeline_config.h"
#include "ipc/wire_door.h"
#include "ipc/zsock.h"

#define RS_PIPE_DOOR_FAULT_NONE 0
#define RS_PIPE_DOOR_FAULT_DROP 1
#define RS_PIPE_DOOR_FAULT_DUP 2

struct rs_pipe_doors {
    enum rs_pipe_stage self;
    rs_zsock *inbox;                     /* this stage's PULL; NULL for tokenizerd */
    rs_zsock *to[RS_PIPE_N_STAGES];      /* PUSH to each other stage's inbox */
    int fault;                           /* RS_PIPE_DOOR_FAULT_* from the environment */
    uint64_t sent, dropped;
};

/* True when `stage` has an inbox (is ever rung). */
int rs_pipe_door_has_inbox(enum rs_pipe_stage stage);

/*
 * Binds self's inbox (if it has one) and connects to the others' under
 * rundir (which must exist: rs_rundir_prepare). Call after rs_pipe_open: the
 * bind takes the path over from an older incarnation that still holds it
 * (a SIGSTOPped stage), which the fence has already made harmless. Returns RS_OK or what
 * rs_zsock_create returned (logged). The calling thread owns the sockets.
 */
rs_err rs_pipe_doors_open(struct rs_pipe_doors *d, void *zctx, const char *rundir,
                          enum rs_pipe_stage self);

/* Closes every socket; safe on a zeroed or partly opened struct. */
void rs_pipe_doors_close(struct rs_pipe_doors *d);

/*
 * Encodes and sends `door` to stage `to` without blocking; a full or absent
 * receiver drops it (counted, RS_OK: doorbells are hints). RS_EINVAL for a
 * stage without an inbox or a door that does not encode.
 */
rs_err rs_pipe_door_send(struct rs_pipe_doors *d, enum rs_pipe_stage to,
                         const struct rs_wire_door *door);

/* Shorthand: a doorbell of `kind` with up to two integer fields. */
rs_err rs_pipe_door_ring(struct rs_pipe_doors *d, enum rs_pipe_stage to,
                         enum rs_wire_door_kind kind, uint64_t a, uint64_t b);

/*
 * Receives and decodes one doorbell from the inbox, waiting up to
 * timeout_ms. RS_OK; RS_EAGAIN when none arrived; RS_EPROTO for a malformed
 * one (logged and dropped: the caller just rescans).
 */
rs_err rs_pipe_door_recv(struct rs_pipe_doors *d, struct rs_wire_door *out, int timeout_ms);

#endif

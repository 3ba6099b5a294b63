/* SPDX-License-Identifier: MIT */
/*
 * Doorbells between stages (ipc/PROTOCOL.md §5): compact msgpack arrays
 * [v, kind, sent_ns, ...] of small integers that only name what changed in
 * shared memory. They are hints: fire-and-forget, idempotent, may be lost or
 * duplicated, so a receiver rescans shared memory instead of trusting one.
 * To add a kind: a value in enum rs_wire_door_kind, a row in wire_door.c's
 * table and, when it has integer fields, a struct in the union below.
 */
#ifndef RS_WIRE_DOOR_H
#define RS_WIRE_DOOR_H

#include "ipc/wire.h"

#define RS_WIRE_DOOR_FIELDS_MAX 4    /* integer fields after sent_ns */
#define RS_WIRE_DOOR_TOKENS_MAX 1024 /* (slot, gen, n_generated) entries in tokens_ready */

enum rs_wire_door_kind {
    RS_WIRE_DOOR_NONE = 0,
    RS_WIRE_DOOR_REQUEST_READY = 1, /* tokenizerd -> schedulerd: a request record was committed */
    RS_WIRE_DOOR_CANCEL = 2,        /* tokenizerd/postprocd -> schedulerd: finish a request */
    RS_WIRE_DOOR_BATCH_READY = 3,   /* schedulerd -> launcherd: a batch ring slot was committed */
    RS_WIRE_DOOR_BATCH_DONE = 4,    /* launcherd -> schedulerd: a result ring slot was committed */
    RS_WIRE_DOOR_TOKENS_READY = 5,  /* launcherd -> postprocd: requests got new tokens */
    RS_WIRE_DOOR_WAKE = 6,          /* any -> any: rescan shared memory */
    RS_WIRE_DOOR_KIND_COUNT
};

/* Why a cancel doorbell was rung. */
enum rs_wire_cancel_reason {
    RS_WIRE_CANCEL_CLIENT = 1,     /* the client sent cancel */
    RS_WIRE_CANCEL_STOP = 2,       /* postprocd matched a stop string */
    RS_WIRE_CANCEL_GONE = 3,       /* the client disconnected or cannot be reached */
    RS_WIRE_CANCEL_ERROR = 4,      /* postprocd failed the request */
    RS_WIRE_CANCEL_REASON_MAX = 4
};

/* One request that received tokens: (request table index, generation, tokens generated so far). */
struct rs_wire_door_tok {
    uint32_t slot;
    uint64_t gen;
    uint32_t n_generated;
};

struct rs_wire_door {
    enum rs_wire_door_kind kind;
    uint64_t sent_ns; /* sender's CLOCK_MONOTONIC ns (rs_clock_ns), 0 = not stamped */
    union {
        uint64_t f[RS_WIRE_DOOR_FIELDS_MAX]; /* the integer fields in wire order */
        struct { uint64_t slot, gen; } request;          /* request_ready */
        struct { uint64_t slot, gen, reason; } cancel;   /* reason: rs_wire_cancel_reason */
        struct { uint64_t batch_id, ring_slot; } batch;  /* batch_ready, batch_done */
        struct { uint64_t batch_id; } tokens;            /* tokens_ready; entries below */
    } u;
    uint32_t n_entries; /* tokens_ready only */
    struct rs_wire_door_tok entries[RS_WIRE_DOOR_TOKENS_MAX];
};

/* "request_ready", ...; "none" for anything else. Any thread. */
const char *rs_wire_door_kind_name(enum rs_wire_door_kind kind);

/*
 * Decodes one doorbell of len bytes (at most RS_WIRE_DOOR_MSG_MAX) into *out
 * (no views: everything is copied, out owns nothing). RS_OK, or RS_EPROTO
 * with err filled. Any thread.
 */
rs_err rs_wire_door_decode(const void *buf, size_t len, struct rs_wire_door *out,
                           struct rs_wire_error *err);

/*
 * Encodes d into out (reset first; a fixed buffer of RS_WIRE_DOOR_MSG_MAX
 * bytes always suffices). RS_OK, RS_EINVAL for a field out of range
 * (logged), RS_ERANGE when out is too small. Any thread.
 */
rs_err rs_wire_door_encode(const struct rs_wire_door *d, struct rs_wire_buf *out);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * A call's insides, shared by call.c (starting, detaching, grace timers,
 * re-attach) and call_output.c (pipeline events into the OpenAI answer).
 * References: one for the HTTP request while it is attached, one per choice
 * the client library still delivers to this call; the last one frees it.
 */
#ifndef GW_CALL_IMPL_H
#define GW_CALL_IMPL_H

#include "gatewayd/format.h"
#include "gatewayd/gw.h"

struct gw_choice {
    struct gw_call *call;
    uint32_t index;            /* choices[].index */
    uint32_t prompt_i;         /* the prompt it continues */
    char id[RS_CLIENT_ID_CAP]; /* its pipeline request id */
    bool live;                 /* the library delivers its events to this call */
    bool acked, done;
    enum rs_wire_finish finish;
    struct rs_wire_usage usage;
    uint32_t prompt_tokens;
    struct gw_buf text; /* non-stream: everything generated */
    json_t *lp;         /* logprobs so far (non-stream), format.h's shape */
    uint64_t chars;     /* code points of text so far (completions text_offset) */
    bool head_sent;     /* stream: the role delta (chat) or echo went out */
};

struct gw_call {
    struct gw *g;
    uint32_t refs;
    struct gw_req *req; /* the HTTP request answered, NULL once detached */
    struct gw_oai_req p;
    char stem[RS_CLIENT_ID_CAP];         /* pipeline id stem (choices: stem or stem.i) */
    char resp_id[RS_CLIENT_ID_CAP + 16]; /* "cmpl-<stem>" / "chatcmpl-<stem>" */
    bool keyed;                          /* ids derived from an idempotency key */
    uint64_t hash;    /* of every choice's encoded generate (a retry must match) */
    uint64_t created; /* unix seconds */
    uint32_t n, n_acked, n_done;
    struct gw_choice *ch;
    bool failed; /* err is the answer (before the stream) or was sent in it */
    struct gw_err err;
    bool superseded;     /* a retry took its pipeline requests over */
    bool stream_started; /* the SSE response was queued */
    bool stream_ended;   /* [DONE] is in sse */
    struct gw_buf sse;   /* stream bytes MHD has not taken yet, from sse_off */
    size_t sse_off;
    uint64_t orphan_until_ns;
    bool orphaned, in_map;
    struct gw_call *orphan_next, *map_next;
    struct gw_call *prev, *next; /* every call of this gatewayd (gw.calls) */
};

/* The client library's callback for every choice (ev->user is the gw_choice). */
void call_on_event(const struct rs_client_event *ev);

/* Drops one reference; the last frees the call. */
void call_unref(struct gw_call *c);

/* Ends c with an error: its answer, or an error event in its stream; wakes its request. */
void call_fail(struct gw_call *c, int status, const char *msg);

/* Fills g for prompt prompt_i of p (the hand-off to the pipeline); 0 or -1 with e. */
/*
 * response_format (json_object, json_schema), logit_bias and min_tokens of p
 * onto the wire request g (gatewayd/constraint.c). 0, or -1 with e set (400
 * naming the field) for what the pipeline cannot do. Strings borrow p.
 */
int gw_sampling_constraints(const struct gw_oai_req *p, struct rs_wire_generate *g,
                            struct gw_err *e);

int gw_call_prepare(const struct gw_oai_req *p, uint32_t prompt_i, struct rs_wire_generate *g,
                    struct gw_err *e);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * Daemon -> client messages (ipc/PROTOCOL.md §4): ack and error from
 * tokenizerd, delta and final from postprocd, welcome from either in reply to
 * hello. Daemons encode them; the client library decodes them as strictly as
 * the daemons decode requests (a server bug shows up as a clear error, not as
 * garbage). Routing to the client's identity is zsock.h's job.
 */
#ifndef RS_WIRE_SERVER_H
#define RS_WIRE_SERVER_H

#include "ipc/wire.h"

/* Why a request ended (finish_reason). */
enum rs_wire_finish {
    RS_WIRE_FINISH_NONE = 0,
    RS_WIRE_FINISH_STOP,   /* EOS, a stop string or a stop token */
    RS_WIRE_FINISH_LENGTH, /* max_tokens reached or the context is full */
    RS_WIRE_FINISH_ABORT,  /* cancelled by the client */
    RS_WIRE_FINISH_ERROR,  /* the server failed the request (error code in final.error) */
    RS_WIRE_FINISH_COUNT
};

/* "stop", "length", "abort", "error"; "none" otherwise. Any thread. */
const char *rs_wire_finish_name(enum rs_wire_finish f);

struct rs_wire_ack {
    uint32_t prompt_tokens; /* prompt length after tokenizing, BOS included */
    uint64_t handle;        /* server's name for the request (for logs and tools) */
    uint64_t seed;          /* the sampling seed used (the client's, or the one picked) */
};

struct rs_wire_err_reply {
    enum rs_wire_code code;     /* never RS_WIRE_OK */
    struct rs_wire_str message; /* UTF-8, <= RS_WIRE_MESSAGE_MAX bytes */
};

struct rs_wire_welcome {
    struct rs_wire_str server; /* the daemon's name, e.g. "postprocd" */
};

/* Output of one or more steps; seq counts deltas of a request from 0 (final included). */
struct rs_wire_delta {
    uint64_t seq;
    struct rs_wire_str text;   /* UTF-8, <= RS_WIRE_TEXT_MAX bytes */
    struct rs_wire_ids tokens; /* <= RS_WIRE_OUT_TOKENS_MAX ids */
    bool has_logprobs;         /* request asked for logprobs */
    struct rs_wire_lps logprobs; /* one entry per token, same order, same token ids */
};

struct rs_wire_usage {
    uint32_t prompt_tokens;     /* BOS included */
    uint32_t completion_tokens; /* generated */
    uint32_t cached_tokens;     /* prompt tokens served from the prefix cache */
};

struct rs_wire_timings {
    uint64_t queue_us; /* accepted -> first scheduled, microseconds */
    uint64_t ttft_us;  /* accepted -> first token sampled; 0 when none was */
    uint64_t total_us; /* accepted -> finished */
};

/* The last message of a request: its remaining output plus the summary. */
struct rs_wire_final {
    struct rs_wire_delta out;
    enum rs_wire_finish finish_reason;
    struct rs_wire_usage usage;
    struct rs_wire_timings timings;
    enum rs_wire_code error;    /* set iff finish_reason is ERROR; else RS_WIRE_OK */
    struct rs_wire_str message; /* optional detail with ERROR; len 0 = none */
};

struct rs_wire_server_msg {
    enum rs_wire_type type;      /* ACK, ERROR, WELCOME, DELTA or FINAL */
    char id[RS_WIRE_ID_MAX + 1]; /* request id; "" for welcome and for errors about
                                    messages whose id could not be read */
    union {
        struct rs_wire_ack ack;
        struct rs_wire_err_reply error;
        struct rs_wire_welcome welcome;
        struct rs_wire_delta delta;
        struct rs_wire_final final;
    } u;
};

/*
 * Decodes one daemon message of len bytes (at most RS_WIRE_SERVER_MSG_MAX).
 * RS_OK, or RS_EPROTO with err filled and out->id set when readable. Views
 * in *out borrow buf. Allocates nothing. Any thread.
 */
rs_err rs_wire_server_decode(const void *buf, size_t len, struct rs_wire_server_msg *out,
                             struct rs_wire_error *err);

/*
 * Encodes m into out (reset first). RS_OK, RS_EINVAL when m holds something
 * the decoder would reject (logged), RS_ERANGE when out's limit is too small.
 * Any thread.
 */
rs_err rs_wire_server_encode(const struct rs_wire_server_msg *m, struct rs_wire_buf *out);

/*
 * Encodes the error reply for a failed decode or validation: id (may be ""),
 * err->code and err->msg. Same returns as rs_wire_server_encode. Any thread.
 */
rs_err rs_wire_error_reply(const char *id, const struct rs_wire_error *err,
                           struct rs_wire_buf *out);

#endif

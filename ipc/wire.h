/* SPDX-License-Identifier: MIT */
/*
 * Wire protocol, common part: the protocol version, the error codes every
 * reply and decoder uses, hard size limits, views into a received message and
 * the bounded output buffer the encoders write to. The messages themselves are
 * in wire_client.h (client -> daemons), wire_server.h (daemons -> client) and
 * wire_door.h (doorbells between stages); ipc/PROTOCOL.md documents them all.
 * Decoders never allocate: what they return points into the message buffer.
 * Leaves out sockets (zsock.h) and anything in shared memory.
 */
#ifndef RS_WIRE_H
#define RS_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* The protocol version every message carries ("v"); bumped on any incompatible change. */
#define RS_WIRE_VERSION 2

/* Hard limits. Decoders reject anything larger; encoders refuse to produce it. */
#define RS_WIRE_ID_MAX 64                 /* request id: 1..64 printable ASCII bytes */
#define RS_WIRE_PROMPT_MAX (1u << 20)     /* prompt text, bytes of UTF-8 */
#define RS_WIRE_PROMPT_IDS_MAX 131072u    /* prompt token ids */
#define RS_WIRE_STOP_MAX 16               /* stop strings per request */
#define RS_WIRE_STOP_LEN_MAX 256          /* bytes per stop string */
#define RS_WIRE_STOP_IDS_MAX 64           /* stop token ids per request */
#define RS_WIRE_LOGPROBS_MAX 20           /* top alternatives per generated token */
#define RS_WIRE_TOKEN_MAX 0x7fffffffu     /* largest token id (fits int32) */
#define RS_WIRE_OUT_TOKENS_MAX 4096u      /* token ids in one delta or final */
#define RS_WIRE_TEXT_MAX (1u << 20)       /* text bytes in one delta or final */
#define RS_WIRE_MESSAGE_MAX 1024          /* human-readable message in error/final */
#define RS_WIRE_NAME_MAX 64               /* short strings: server name, codes, map keys */
#define RS_WIRE_DEPTH_MAX 8               /* nesting accepted when skipping a value */
#define RS_WIRE_CLIENT_MSG_MAX (2u << 20) /* bytes of one client -> daemon message */
#define RS_WIRE_SERVER_MSG_MAX (4u << 20) /* bytes of one daemon -> client message */
#define RS_WIRE_DOOR_MSG_MAX 32768u       /* bytes of one doorbell */

/* Error codes sent to clients (as the strings rs_wire_code_name gives) and set by decoders. */
enum rs_wire_code {
    RS_WIRE_OK = 0,
    RS_WIRE_BAD_REQUEST,         /* not a msgpack map, truncated, duplicate key, bad value */
    RS_WIRE_MISSING_FIELD,       /* a required field is absent */
    RS_WIRE_UNKNOWN_FIELD,       /* a key this version does not define */
    RS_WIRE_WRONG_TYPE,          /* a field has the wrong msgpack type */
    RS_WIRE_TOO_LARGE,           /* message, string or array over its limit */
    RS_WIRE_INVALID_PARAM,       /* a value outside its allowed range */
    RS_WIRE_PROMPT_TOO_LONG,     /* the prompt does not fit the model's context */
    RS_WIRE_OVERLOADED,          /* queue full; retry later */
    RS_WIRE_DUPLICATE,           /* a request with this id is already in flight */
    RS_WIRE_NOT_FOUND,           /* no request with this id */
    RS_WIRE_INTERNAL,            /* the server failed; not the client's fault */
    RS_WIRE_UNSUPPORTED_VERSION, /* "v" is not RS_WIRE_VERSION */
    RS_WIRE_FORBIDDEN,           /* the request, or the routing id, belongs to another client */
    RS_WIRE_CONSTRAINT_DEAD,     /* (final only) the constraint allowed no token at some step */
    RS_WIRE_CODE_COUNT
};

/* Message types ("type" of a client-facing map). Doorbells have kinds instead (wire_door.h). */
enum rs_wire_type {
    RS_WIRE_T_NONE = 0,
    RS_WIRE_T_GENERATE, /* client -> tokenizerd */
    RS_WIRE_T_CANCEL,   /* client -> tokenizerd */
    RS_WIRE_T_HELLO,    /* client -> tokenizerd or postprocd */
    RS_WIRE_T_RESUME,   /* client -> postprocd */
    RS_WIRE_T_ACK,      /* tokenizerd -> client */
    RS_WIRE_T_ERROR,    /* tokenizerd or postprocd -> client */
    RS_WIRE_T_WELCOME,  /* reply to hello */
    RS_WIRE_T_DELTA,    /* postprocd -> client */
    RS_WIRE_T_FINAL,    /* postprocd -> client */
    RS_WIRE_T_RELEASE,  /* client -> postprocd: the final arrived; free the request now */
    RS_WIRE_T_COUNT
};

/* The type's wire name ("generate", ...); "none" for RS_WIRE_T_NONE or past the enum. */
const char *rs_wire_type_name(enum rs_wire_type type);

/* A decoder's or validator's verdict: the code and a message naming the field. */
struct rs_wire_error {
    enum rs_wire_code code;
    char msg[256]; /* NUL-terminated, e.g. "field 'top_p': expected float, got string" */
};

/* The code's wire name ("bad_request", ...); "unknown" past the enum. Any thread. */
const char *rs_wire_code_name(enum rs_wire_code code);

/* Parses a wire name (len bytes, not NUL-terminated). RS_OK or RS_ENOENT. Any thread. */
rs_err rs_wire_code_parse(const char *name, size_t len, enum rs_wire_code *out);

/*
 * A string: a view into a decoded message (valid as long as the message
 * buffer) or, for encoding, into the caller's memory. Not NUL-terminated.
 */
struct rs_wire_str {
    const char *ptr;
    uint32_t len; /* bytes */
};

/*
 * A list of token ids (each 0..RS_WIRE_TOKEN_MAX). For encoding, set `vals`
 * (borrowed, n entries). Decoders set `packed`: the validated msgpack bytes of
 * the n integers inside the message buffer (valid as long as it), which
 * rs_wire_ids_copy unpacks and encoders copy verbatim.
 */
struct rs_wire_ids {
    uint32_t n;
    const uint32_t *vals;
    const uint8_t *packed;
    size_t packed_len; /* bytes at packed */
};

/* Copies up to cap ids of v into dst; returns how many were copied. Any thread. */
uint32_t rs_wire_ids_copy(const struct rs_wire_ids *v, uint32_t *dst, uint32_t cap);

/* The log-probabilities of one generated token and its top alternatives. */
struct rs_wire_logprob {
    uint32_t token;   /* the generated token id */
    float logprob;    /* its natural-log probability */
    uint32_t n_top;   /* 0..RS_WIRE_LOGPROBS_MAX entries used below */
    uint32_t top_ids[RS_WIRE_LOGPROBS_MAX];
    float top_logprobs[RS_WIRE_LOGPROBS_MAX];
};

/* A list of rs_wire_logprob; vals for encoding, packed from decoders (as rs_wire_ids). */
struct rs_wire_lps {
    uint32_t n;
    const struct rs_wire_logprob *vals;
    const uint8_t *packed;
    size_t packed_len;
};

/* Copies up to cap entries of v into dst; returns how many were copied. Any thread. */
uint32_t rs_wire_lps_copy(const struct rs_wire_lps *v, struct rs_wire_logprob *dst, uint32_t cap);

/*
 * Output buffer of the encoders. Either growable heap memory up to `max`
 * bytes (rs_wire_buf_init) or fixed caller memory (rs_wire_buf_init_fixed,
 * no allocation: for doorbells on the hot path). Encoders reset len to 0 and
 * write one message; a message that would not fit fails with RS_ERANGE.
 */
struct rs_wire_buf {
    uint8_t *data; /* message bytes [0, len) */
    size_t len;
    size_t cap;    /* bytes available at data */
    size_t max;    /* growth limit */
    bool owned;    /* data is heap memory this struct frees */
    bool failed;   /* a write did not fit (or allocation failed) since the last reset */
};

/* Growable buffer of at most max bytes; allocates on first write. Any thread. */
void rs_wire_buf_init(struct rs_wire_buf *b, size_t max);

/* Fixed buffer over mem (borrowed, cap bytes); never allocates. Any thread. */
void rs_wire_buf_init_fixed(struct rs_wire_buf *b, void *mem, size_t cap);

/* Frees owned memory; the struct may be initialised again. Accepts a zeroed struct. */
void rs_wire_buf_fini(struct rs_wire_buf *b);

/* True when id is 1..RS_WIRE_ID_MAX bytes, each printable ASCII 0x21..0x7e. */
bool rs_wire_id_valid(const char *id, size_t len);

#endif

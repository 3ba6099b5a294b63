/* SPDX-License-Identifier: MIT */
/*
 * Client -> daemon messages (ipc/PROTOCOL.md §3): generate and cancel to
 * tokenizerd, resume to postprocd, hello to either. Decoding is strict
 * (types, unknown keys, sizes) and allocation-free; semantic checks (ranges,
 * prompt vs context) are a separate validator so tokenizerd can answer each
 * class of mistake with its own code. Tokenizing and admission are not here.
 */
#ifndef RS_WIRE_CLIENT_H
#define RS_WIRE_CLIENT_H

#include "common/sampling.h"
#include "ipc/wire.h"
#include "ipc/wire_doc.h"
#include "ipc/wire_constraint.h"

/* Bits of rs_wire_generate.has: which optional fields the message carries. */
#define RS_WIRE_GEN_PROMPT (1u << 0)
#define RS_WIRE_GEN_PROMPT_IDS (1u << 1)
#define RS_WIRE_GEN_MAX_TOKENS (1u << 2)
#define RS_WIRE_GEN_TEMPERATURE (1u << 3)
#define RS_WIRE_GEN_TOP_P (1u << 4)
#define RS_WIRE_GEN_TOP_K (1u << 5)
#define RS_WIRE_GEN_MIN_P (1u << 6)
#define RS_WIRE_GEN_REPETITION_PENALTY (1u << 7)
#define RS_WIRE_GEN_PRESENCE_PENALTY (1u << 8)
#define RS_WIRE_GEN_FREQUENCY_PENALTY (1u << 9)
#define RS_WIRE_GEN_SEED (1u << 10)
#define RS_WIRE_GEN_STOP (1u << 11)
#define RS_WIRE_GEN_STOP_TOKEN_IDS (1u << 12)
#define RS_WIRE_GEN_IGNORE_EOS (1u << 13)
#define RS_WIRE_GEN_LOGPROBS (1u << 14)
#define RS_WIRE_GEN_STREAM (1u << 15)
#define RS_WIRE_GEN_PRIORITY (1u << 16)
#define RS_WIRE_GEN_MESSAGES (1u << 17)
#define RS_WIRE_GEN_TOOLS (1u << 18)
#define RS_WIRE_GEN_ADD_GENERATION_PROMPT (1u << 19)
#define RS_WIRE_GEN_CHAT_TEMPLATE_KWARGS (1u << 20)
#define RS_WIRE_GEN_CONSTRAINT (1u << 21)        /* cx.kind, cx.text, cx.choices */
#define RS_WIRE_GEN_LOGIT_BIAS (1u << 22)        /* cx.n_bias, cx.bias */
#define RS_WIRE_GEN_ALLOWED_TOKEN_IDS (1u << 23) /* cx.allowed */
#define RS_WIRE_GEN_MIN_TOKENS (1u << 24)        /* cx.min_tokens */

/*
 * A generation request. Absent fields hold the defaults below (PROTOCOL.md
 * §3.1 justifies them); the encoder writes exactly the fields whose bit is in
 * `has`. Decoded strings and id lists are views into the message buffer.
 */
struct rs_wire_generate {
    uint32_t has;                  /* RS_WIRE_GEN_* bits */
    struct rs_wire_str prompt;     /* UTF-8, <= RS_WIRE_PROMPT_MAX bytes; "" = BOS alone */
    struct rs_wire_ids prompt_ids; /* used as given (no BOS added), <= RS_WIRE_PROMPT_IDS_MAX */
    uint32_t max_tokens;           /* absent (0): until the context is full */
    float temperature;             /* 1.0; 0 = greedy */
    float top_p;                   /* 1.0 = off; in (0, 1] */
    int32_t top_k;                 /* 0 = off; >= 0 */
    float min_p;                   /* 0 = off; in [0, 1] */
    float repetition_penalty;      /* 1.0 = off; > 0 */
    float presence_penalty;        /* 0 = off; in [-2, 2] */
    float frequency_penalty;       /* 0 = off; in [-2, 2] */
    uint64_t seed;                 /* absent: tokenizerd picks one and reports it nowhere */
    uint32_t n_stop;               /* stop strings used in stop[] */
    struct rs_wire_str stop[RS_WIRE_STOP_MAX];   /* each 1..RS_WIRE_STOP_LEN_MAX bytes */
    uint32_t n_stop_ids;                         /* entries used in stop_ids[] */
    uint32_t stop_ids[RS_WIRE_STOP_IDS_MAX];     /* stop when one of these is sampled */
    bool ignore_eos;               /* false; true = do not stop at the model's EOS token */
    bool stream;                   /* false = one final message; true = a delta per step */
    uint32_t logprobs;             /* 0 = none; 1..RS_WIRE_LOGPROBS_MAX alternatives per token */
    int32_t priority;              /* 0; lower values are scheduled first */
    /* A conversation instead of a prompt, rendered by the model's chat template: */
    struct rs_wire_doc messages;   /* array of 1..RS_WIRE_MESSAGES_MAX maps (role, content, ...) */
    struct rs_wire_doc tools;      /* array of <= RS_WIRE_TOOLS_MAX tool definitions (maps) */
    bool add_generation_prompt;    /* true: the prompt ends opening the assistant's turn */
    struct rs_wire_doc template_kwargs; /* chat_template_kwargs: map of further variables */
    struct rs_wire_constraint cx;  /* structured output (wire_constraint.h); kind NONE = off */
};

/* A hello's optional `secret`: RS_WIRE_SECRET_MIN..MAX printable ASCII bytes (0x21..0x7e). */
#define RS_WIRE_SECRET_MIN 16
#define RS_WIRE_SECRET_MAX 128

/* A decoded or to-be-encoded client message. */
struct rs_wire_client_msg {
    enum rs_wire_type type;       /* GENERATE, CANCEL, HELLO, RESUME or RELEASE */
    char id[RS_WIRE_ID_MAX + 1];  /* request id, NUL-terminated; "" for hello */
    union {
        struct rs_wire_generate gen;
        struct {
            uint64_t from_seq; /* first delta sequence number wanted again */
        } resume;
        struct {
            struct rs_wire_str secret; /* the client's secret; len 0 = none sent */
        } hello;
    } u;
};

/* 1 when s (len bytes) is a valid hello secret (RS_WIRE_SECRET_MIN..MAX printable ASCII). */
bool rs_wire_secret_valid(const char *s, size_t len);

/* Sets every field of g to its default and has to 0. Any thread. */
void rs_wire_generate_init(struct rs_wire_generate *g);

/*
 * Decodes one client message of len bytes (at most RS_WIRE_CLIENT_MSG_MAX).
 * Returns RS_OK, or RS_EPROTO with err->code/msg saying what is wrong and
 * out->id set to the request id when the message carried a readable one (so
 * the error reply can name it; "" otherwise). Strings and id lists in *out
 * borrow buf: valid while buf is. Allocates nothing. Any thread.
 */
rs_err rs_wire_client_decode(const void *buf, size_t len, struct rs_wire_client_msg *out,
                             struct rs_wire_error *err);

/*
 * Encodes m into out (reset first). Returns RS_OK, RS_EINVAL when m holds
 * something the decoder would reject (logged), or RS_ERANGE when out's limit
 * is too small. Any thread.
 */
rs_err rs_wire_client_encode(const struct rs_wire_client_msg *m, struct rs_wire_buf *out);

/* What the validator knows about the served model; 0 = unknown, check skipped. */
struct rs_wire_limits {
    uint32_t n_ctx;   /* context length, tokens */
    uint32_t n_vocab; /* vocabulary size: token ids must be below it */
};

/*
 * Semantic checks of a decoded generate: exactly one of prompt/prompt_ids/
 * messages (tools, add_generation_prompt, chat_template_kwargs only with messages),
 * every parameter in range, token ids below n_vocab, prompt_ids shorter than
 * n_ctx. Returns RS_OK, or RS_EINVAL with err naming the field (codes
 * invalid_param, missing_field, prompt_too_long). Any thread.
 */
rs_err rs_wire_generate_validate(const struct rs_wire_generate *g,
                                 const struct rs_wire_limits *lim, struct rs_wire_error *err);

/*
 * The sampling parameters g asks for: its fields (their defaults when
 * absent), the seed as sent (tokenizerd picks one when it is absent) and
 * logprobs as n_logprobs. The validator above checks them with
 * rs_sampling_params_validate (common/sampling.h). Any thread.
 */
void rs_wire_generate_sampling(const struct rs_wire_generate *g, struct rs_sampling_params *out);

/*
 * The context check for a text prompt once tokenized: n_prompt tokens (BOS
 * included) must leave room for one generated token in n_ctx. RS_OK, or
 * RS_EINVAL with code prompt_too_long. Any thread.
 */
rs_err rs_wire_prompt_check(uint32_t n_prompt, uint32_t n_ctx, struct rs_wire_error *err);

#endif

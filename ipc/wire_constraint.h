/* SPDX-License-Identifier: MIT */
/*
 * The structured-output fields of a generate (ipc/PROTOCOL.md §3.1,
 * "Constraints"): "constraint" (a GBNF grammar, a JSON schema, any JSON
 * object, a regular expression or a choice among literal strings),
 * "logit_bias" (token id -> bias) and "allowed_token_ids". Decoded strictly
 * and bounded here; whether a grammar, schema or regex is well formed is
 * tokenizerd's check at intake (common/grammar.h compiles it against the
 * model's vocab). Views borrow the message buffer as every decoded field does.
 * Leaves out compiling, storing (pipeline_constraint.h) and applying masks.
 */
#ifndef RS_WIRE_CONSTRAINT_H
#define RS_WIRE_CONSTRAINT_H

#include <stdint.h>

#include "common/err.h"
#include "ipc/wire.h"

#define RS_WIRE_CX_TEXT_MAX 65536u    /* bytes of a grammar, JSON schema or regex */
#define RS_WIRE_CX_CHOICES_MAX 256u   /* literal strings of a choice */
#define RS_WIRE_CX_CHOICE_LEN_MAX 4096u /* bytes per choice */
#define RS_WIRE_CX_CHOICE_BYTES_MAX 65536u /* bytes of all choices together */
#define RS_WIRE_LOGIT_BIAS_MAX 1024u  /* logit_bias entries */
#define RS_WIRE_ALLOWED_IDS_MAX 16384u /* allowed_token_ids entries */

/* "constraint" kinds; the values equal common/grammar.h's enum rs_constraint_kind. */
enum rs_wire_cx_kind {
    RS_WIRE_CX_NONE = 0,
    RS_WIRE_CX_GBNF = 1,
    RS_WIRE_CX_JSON_SCHEMA = 2,
    RS_WIRE_CX_JSON_OBJECT = 3,
    RS_WIRE_CX_REGEX = 4,
    RS_WIRE_CX_CHOICE = 5,
};

/* The wire name of a kind ("gbnf", "json_schema", "json_object", "regex", "choice"). */
const char *rs_wire_cx_kind_name(enum rs_wire_cx_kind k);

/* One logit_bias entry as decoded. */
struct rs_wire_bias {
    uint32_t token;
    float bias;
};

/*
 * The constraint fields of one generate. For encoding set the values
 * (borrowed); decoders set views into the message (`bias_packed`: the
 * validated map bytes, unpacked by rs_wire_bias_copy).
 */
struct rs_wire_constraint {
    enum rs_wire_cx_kind kind;      /* NONE when "constraint" is absent */
    struct rs_wire_str text;        /* GBNF, JSON schema, regex (UTF-8) */
    uint32_t n_choices;
    struct rs_wire_str choices[RS_WIRE_CX_CHOICES_MAX];
    uint32_t n_bias;
    const struct rs_wire_bias *bias; /* encoding */
    const uint8_t *bias_packed;      /* decoding: n_bias key/value pairs */
    size_t bias_packed_len;
    struct rs_wire_ids allowed;      /* allowed_token_ids; n = 0 when absent */
    uint32_t min_tokens;             /* min_tokens: end-of-generation held back before it */
};

/* Copies up to cap bias entries of c into dst; returns how many. Any thread. */
uint32_t rs_wire_bias_copy(const struct rs_wire_constraint *c, struct rs_wire_bias *dst,
                           uint32_t cap);

/*
 * Semantic checks with the model's vocab size (0: skipped): a kind's text
 * present and non-empty where it needs one, choices non-empty, token ids
 * below n_vocab, biases finite in [-100, 100]. RS_OK, or RS_EINVAL with err
 * (invalid_param) naming the field and item. Any thread.
 */
rs_err rs_wire_constraint_validate(const struct rs_wire_constraint *c, uint32_t n_vocab,
                                   struct rs_wire_error *err);

/* 64-bit hash of every constraint field (the intake hash mixes it in). Any thread. */
uint64_t rs_wire_constraint_hash(const struct rs_wire_constraint *c, uint64_t h);

#endif

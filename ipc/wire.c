/* SPDX-License-Identifier: MIT */
/*
 * Wire protocol common part (wire.h): names of error codes and message types,
 * the encoders' output buffer, UTF-8 and id checks, and unpacking of the
 * token-id and logprob views decoders return. Message-specific code is in
 * wire_client.c, wire_server.c and wire_door.c; the msgpack reader and writer
 * in wire_read.c and wire_write.c.
 */
#include <stdlib.h>
#include <string.h>

#include "ipc/wire_impl.h"

static const char *const code_names[RS_WIRE_CODE_COUNT] = {
    [RS_WIRE_OK] = "ok",
    [RS_WIRE_BAD_REQUEST] = "bad_request",
    [RS_WIRE_MISSING_FIELD] = "missing_field",
    [RS_WIRE_UNKNOWN_FIELD] = "unknown_field",
    [RS_WIRE_WRONG_TYPE] = "wrong_type",
    [RS_WIRE_TOO_LARGE] = "too_large",
    [RS_WIRE_INVALID_PARAM] = "invalid_param",
    [RS_WIRE_PROMPT_TOO_LONG] = "prompt_too_long",
    [RS_WIRE_OVERLOADED] = "overloaded",
    [RS_WIRE_DUPLICATE] = "duplicate",
    [RS_WIRE_NOT_FOUND] = "not_found",
    [RS_WIRE_INTERNAL] = "internal",
    [RS_WIRE_UNSUPPORTED_VERSION] = "unsupported_version",
    [RS_WIRE_FORBIDDEN] = "forbidden",
    [RS_WIRE_CONSTRAINT_DEAD] = "constraint_dead_end",
};

static const char *const type_names[RS_WIRE_T_COUNT] = {
    [RS_WIRE_T_NONE] = "none",       [RS_WIRE_T_GENERATE] = "generate",
    [RS_WIRE_T_CANCEL] = "cancel",   [RS_WIRE_T_HELLO] = "hello",
    [RS_WIRE_T_RESUME] = "resume",   [RS_WIRE_T_ACK] = "ack",
    [RS_WIRE_T_ERROR] = "error",     [RS_WIRE_T_WELCOME] = "welcome",
    [RS_WIRE_T_DELTA] = "delta",     [RS_WIRE_T_FINAL] = "final",
    [RS_WIRE_T_RELEASE] = "release",
};

const char *rs_wire_code_name(enum rs_wire_code code)
{
    return (unsigned)code < RS_WIRE_CODE_COUNT ? code_names[code] : "unknown";
}

rs_err rs_wire_code_parse(const char *name, size_t len, enum rs_wire_code *out)
{
    for (int i = 0; i < RS_WIRE_CODE_COUNT; i++) {
        if (strlen(code_names[i]) == len && memcmp(code_names[i], name, len) == 0) {
            *out = (enum rs_wire_code)i;
            return RS_OK;
        }
    }
    return RS_ENOENT;
}

const char *rs_wire_type_name(enum rs_wire_type type)
{
    return (unsigned)type < RS_WIRE_T_COUNT ? type_names[type] : "none";
}

void rs_wire_buf_init(struct rs_wire_buf *b, size_t max)
{
    *b = (struct rs_wire_buf){.max = max, .owned = true};
}

void rs_wire_buf_init_fixed(struct rs_wire_buf *b, void *mem, size_t cap)
{
    *b = (struct rs_wire_buf){.data = mem, .cap = cap, .max = cap};
}

void rs_wire_buf_fini(struct rs_wire_buf *b)
{
    if (b->owned)
        free(b->data);
    *b = (struct rs_wire_buf){0};
}

bool rs_wire_id_valid(const char *id, size_t len)
{
    if (len == 0 || len > RS_WIRE_ID_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)id[i] < 0x21 || (unsigned char)id[i] > 0x7e)
            return false;
    return true;
}

uint32_t rs_wire_ids_copy(const struct rs_wire_ids *v, uint32_t *dst, uint32_t cap)
{
    uint32_t n = v->n < cap ? v->n : cap;
    if (n == 0)
        return 0;
    if (v->vals != NULL) {
        memcpy(dst, v->vals, (size_t)n * sizeof(*dst));
        return n;
    }
    struct rs_wire_error err;
    struct wire_rd r;
    wire_rd_init(&r, v->packed, v->packed_len, &err);
    for (uint32_t i = 0; i < n; i++)
        if (wire_rd_u32(&r, &dst[i], RS_WIRE_TOKEN_MAX) != RS_OK)
            return i; /* unreachable for a view a decoder validated */
    return n;
}

uint32_t rs_wire_lps_copy(const struct rs_wire_lps *v, struct rs_wire_logprob *dst, uint32_t cap)
{
    uint32_t n = v->n < cap ? v->n : cap;
    if (n == 0)
        return 0;
    if (v->vals != NULL) {
        memcpy(dst, v->vals, (size_t)n * sizeof(*dst));
        return n;
    }
    struct rs_wire_error err;
    struct wire_rd r;
    wire_rd_init(&r, v->packed, v->packed_len, &err);
    for (uint32_t i = 0; i < n; i++) {
        memset(&dst[i], 0, sizeof(dst[i]));
        if (wire_rd_lp(&r, &dst[i]) != RS_OK)
            return i; /* unreachable for a view a decoder validated */
    }
    return n;
}

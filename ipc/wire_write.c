/* SPDX-License-Identifier: MIT */
/*
 * msgpack writer for the wire encoders (see wire_impl.h): msgpack-c's packer
 * (float32 for floats, strings, maps) writing into an rs_wire_buf that refuses
 * to grow past its limit; unsigned integers and array headers, the whole of a
 * doorbell, are packed inline (smallest encoding, as msgpack-c would) because
 * the per-item callback dominated the doorbell profile. Also the checks the
 * encoders run so they never emit a message our own decoders would reject.
 */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/utf8.h"
#include "ipc/wire_impl.h"

static int buf_write(void *data, const char *p, size_t n)
{
    struct rs_wire_buf *b = data;
    if (b->failed || n > b->max - b->len) {
        b->failed = true;
        return -1;
    }
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : b->max < 256 ? b->max : 256;
        while (cap - b->len < n)
            cap = cap > b->max / 2 ? b->max : cap * 2;
        uint8_t *mem = b->owned ? realloc(b->data, cap) : NULL;
        if (mem == NULL) {
            b->failed = true;
            return -1;
        }
        b->data = mem;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

void wire_wr_begin(struct wire_wr *w, struct rs_wire_buf *b)
{
    b->len = 0;
    b->failed = false;
    w->b = b;
    msgpack_packer_init(&w->pk, b, buf_write);
}

rs_err wire_wr_end(struct wire_wr *w)
{
    if (!w->b->failed)
        return RS_OK;
    rs_log_error("wire: message does not fit its buffer (limit %zu bytes)", w->b->max);
    w->b->len = 0;
    return RS_ERANGE;
}

/* Appends n <= 9 header bytes, straight into the buffer when there is room. */
static inline void put_small(struct wire_wr *w, const uint8_t *p, size_t n)
{
    struct rs_wire_buf *b = w->b;
    if (b->failed || n > b->cap - b->len) {
        (void)buf_write(b, (const char *)p, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        b->data[b->len + i] = p[i];
    b->len += n;
}

/* A format byte then v big-endian in n = 1, 2, 4 or 8 bytes; returns 1 + n. */
static inline size_t with_be(uint8_t *out, uint8_t format, uint64_t v, unsigned n)
{
    uint16_t v16 = __builtin_bswap16((uint16_t)v);
    uint32_t v32 = __builtin_bswap32((uint32_t)v);
    uint64_t v64 = __builtin_bswap64(v);
    out[0] = format;
    switch (n) {
    case 1: out[1] = (uint8_t)v; break;
    case 2: memcpy(out + 1, &v16, 2); break;
    case 4: memcpy(out + 1, &v32, 4); break;
    default: memcpy(out + 1, &v64, 8); break;
    }
    return 1 + n;
}

void wire_wr_map(struct wire_wr *w, uint32_t n)
{
    (void)msgpack_pack_map(&w->pk, n);
}

/* Integers and array headers are what doorbells are made of: packed here, not via callbacks. */
void wire_wr_array(struct wire_wr *w, uint32_t n)
{
    uint8_t h[5];
    size_t len = n <= 15 ? (h[0] = (uint8_t)(0x90 | n), 1)
                 : n <= 0xffff ? with_be(h, 0xdc, n, 2) : with_be(h, 0xdd, n, 4);
    put_small(w, h, len);
}

void wire_wr_key(struct wire_wr *w, const char *key)
{
    (void)msgpack_pack_str_with_body(&w->pk, key, strlen(key));
}

void wire_wr_str(struct wire_wr *w, const char *p, size_t len)
{
    (void)msgpack_pack_str_with_body(&w->pk, len ? p : "", len);
}

/* Packs v at out (9 bytes available); returns the bytes used. */
static inline size_t pack_uint(uint8_t *out, uint64_t v)
{
    if (v <= 0x7f) {
        out[0] = (uint8_t)v;
        return 1;
    }
    return v <= 0xff         ? with_be(out, 0xcc, v, 1)
           : v <= 0xffff     ? with_be(out, 0xcd, v, 2)
           : v <= 0xffffffff ? with_be(out, 0xce, v, 4)
                             : with_be(out, 0xcf, v, 8);
}

void wire_wr_u64(struct wire_wr *w, uint64_t v)
{
    struct rs_wire_buf *b = w->b;
    if (!b->failed && b->cap - b->len >= 9) {
        b->len += pack_uint(b->data + b->len, v);
        return;
    }
    uint8_t h[9];
    put_small(w, h, pack_uint(h, v));
}

void wire_wr_i64(struct wire_wr *w, int64_t v)
{
    (void)msgpack_pack_int64(&w->pk, v);
}

void wire_wr_f32(struct wire_wr *w, float v)
{
    (void)msgpack_pack_float(&w->pk, v);
}

void wire_wr_bool(struct wire_wr *w, bool v)
{
    (void)(v ? msgpack_pack_true(&w->pk) : msgpack_pack_false(&w->pk));
}

void wire_wr_ids(struct wire_wr *w, const struct rs_wire_ids *ids)
{
    wire_wr_array(w, ids->n);
    if (ids->vals == NULL) { /* a decoded view: its bytes were validated, copy them as they are */
        if (ids->packed_len > 0)
            (void)buf_write(w->b, (const char *)ids->packed, ids->packed_len);
        return;
    }
    for (uint32_t i = 0; i < ids->n; i++)
        wire_wr_u64(w, ids->vals[i]);
}

void wire_wr_raw(struct wire_wr *w, const void *p, size_t n)
{
    if (n > 0)
        (void)buf_write(w->b, p, n);
}

void wire_wr_lps(struct wire_wr *w, const struct rs_wire_lps *lps)
{
    wire_wr_array(w, lps->n);
    if (lps->vals == NULL) {
        if (lps->packed_len > 0)
            (void)buf_write(w->b, (const char *)lps->packed, lps->packed_len);
        return;
    }
    for (uint32_t i = 0; i < lps->n; i++) {
        const struct rs_wire_logprob *lp = &lps->vals[i];
        wire_wr_array(w, 3);
        wire_wr_u64(w, lp->token);
        wire_wr_f32(w, lp->logprob);
        wire_wr_array(w, lp->n_top);
        for (uint32_t j = 0; j < lp->n_top; j++) {
            wire_wr_array(w, 2);
            wire_wr_u64(w, lp->top_ids[j]);
            wire_wr_f32(w, lp->top_logprobs[j]);
        }
    }
}

void wire_wr_head(struct wire_wr *w, enum rs_wire_type type)
{
    const char *name = rs_wire_type_name(type);
    wire_wr_key(w, "v");
    wire_wr_u64(w, RS_WIRE_VERSION);
    wire_wr_key(w, "type");
    wire_wr_str(w, name, strlen(name));
}

rs_err wire_check_text(const char *what, const struct rs_wire_str *s, uint32_t max)
{
    if (s->len > max) {
        rs_log_error("wire: cannot encode %s: %u bytes, at most %u", what, s->len, max);
        return RS_EINVAL;
    }
    if (s->len > 0 && s->ptr == NULL) {
        rs_log_error("wire: cannot encode %s: NULL with length %u", what, s->len);
        return RS_EINVAL;
    }
    size_t bad = rs_utf8_valid_prefix(s->ptr, s->len);
    if (bad != s->len) {
        rs_log_error("wire: cannot encode %s: invalid UTF-8 at byte %zu", what, bad);
        return RS_EINVAL;
    }
    return RS_OK;
}

static bool token_ok(const char *what, uint32_t id)
{
    if (id <= RS_WIRE_TOKEN_MAX)
        return true;
    rs_log_error("wire: cannot encode %s: token id %u past %u", what, id, RS_WIRE_TOKEN_MAX);
    return false;
}

rs_err wire_check_ids(const char *what, const struct rs_wire_ids *ids, uint32_t max)
{
    if (ids->n > max || (ids->n > 0 && ids->vals == NULL && ids->packed == NULL)) {
        rs_log_error("wire: cannot encode %s: %u ids (at most %u) or no storage", what, ids->n,
                     max);
        return RS_EINVAL;
    }
    for (uint32_t i = 0; ids->vals != NULL && i < ids->n; i++)
        if (!token_ok(what, ids->vals[i]))
            return RS_EINVAL;
    return RS_OK;
}

rs_err wire_check_lps(const char *what, const struct rs_wire_lps *lps, uint32_t max)
{
    if (lps->n > max || (lps->n > 0 && lps->vals == NULL && lps->packed == NULL)) {
        rs_log_error("wire: cannot encode %s: %u entries (at most %u) or no storage", what,
                     lps->n, max);
        return RS_EINVAL;
    }
    for (uint32_t i = 0; lps->vals != NULL && i < lps->n; i++) {
        const struct rs_wire_logprob *lp = &lps->vals[i];
        if (lp->n_top > RS_WIRE_LOGPROBS_MAX) {
            rs_log_error("wire: cannot encode %s: %u alternatives, at most %d", what, lp->n_top,
                         RS_WIRE_LOGPROBS_MAX);
            return RS_EINVAL;
        }
        if (!token_ok(what, lp->token))
            return RS_EINVAL;
        for (uint32_t j = 0; j < lp->n_top; j++)
            if (!token_ok(what, lp->top_ids[j]))
                return RS_EINVAL;
    }
    return RS_OK;
}

/* SPDX-License-Identifier: MIT */
/*
 * Strict msgpack reader for the wire decoders (see wire_impl.h). Hand-written
 * rather than msgpack_unpack_next because the unpacker builds an object tree
 * in a zone sized by the message's claims, while this reader walks the bytes
 * in place: no allocation, counts checked against the bytes left before any
 * loop, nesting bounded. It knows msgpack's formats, not our messages.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/utf8.h"
#include "ipc/wire_doc.h"
#include "ipc/wire_impl.h"

void wire_rd_init(struct wire_rd *r, const void *buf, size_t len, struct rs_wire_error *err)
{
    r->p = buf;
    r->end = len > 0 ? r->p + len : r->p; /* buf may be NULL when len is 0 */
    r->err = err;
    r->field = NULL;
    r->index = -1;
    err->code = RS_WIRE_OK;
    err->msg[0] = '\0';
}

/* Kind of each msgpack format byte (a table: this runs for every value read). */
static const uint8_t kind_of[256] = {
    [0x00 ... 0x7f] = WK_INT,   [0x80 ... 0x8f] = WK_MAP,   [0x90 ... 0x9f] = WK_ARRAY,
    [0xa0 ... 0xbf] = WK_STR,   [0xc0] = WK_NIL,            [0xc1] = WK_BAD,
    [0xc2 ... 0xc3] = WK_BOOL,  [0xc4 ... 0xc6] = WK_BIN,   [0xc7 ... 0xc9] = WK_EXT,
    [0xca ... 0xcb] = WK_FLOAT, [0xcc ... 0xd3] = WK_INT,   [0xd4 ... 0xd8] = WK_EXT,
    [0xd9 ... 0xdb] = WK_STR,   [0xdc ... 0xdd] = WK_ARRAY, [0xde ... 0xdf] = WK_MAP,
    [0xe0 ... 0xff] = WK_INT,
};

enum wire_kind wire_rd_kind(const struct wire_rd *r)
{
    return r->p < r->end ? (enum wire_kind)kind_of[*r->p] : WK_END;
}

const char *wire_kind_name(enum wire_kind kind)
{
    static const char *const names[] = {
        [WK_NIL] = "nil",       [WK_BOOL] = "boolean", [WK_INT] = "integer",
        [WK_FLOAT] = "float",   [WK_STR] = "string",   [WK_BIN] = "binary",
        [WK_ARRAY] = "array",   [WK_MAP] = "map",      [WK_EXT] = "extension",
        [WK_BAD] = "the never-used byte 0xc1",         [WK_END] = "end of message",
    };
    return (unsigned)kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "?";
}

rs_err wire_set_error(struct rs_wire_error *err, enum rs_wire_code code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    err->code = code;
    rs_log_debug("wire: %s: %s", rs_wire_code_name(code), err->msg);
    return RS_EPROTO;
}

rs_err wire_fail(struct wire_rd *r, enum rs_wire_code code, const char *fmt, ...)
{
    char detail[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    if (r->field == NULL)
        return wire_set_error(r->err, code, "%s", detail);
    if (r->index >= 0)
        return wire_set_error(r->err, code, "field '%s' item %" PRId64 ": %s", r->field, r->index,
                              detail);
    return wire_set_error(r->err, code, "field '%s': %s", r->field, detail);
}

/* Big-endian integer of n = 1, 2, 4 or 8 bytes. */
static inline uint64_t load_be(const uint8_t *p, unsigned n)
{
    uint16_t v16;
    uint32_t v32;
    uint64_t v64;
    switch (n) {
    case 1: return p[0];
    case 2: memcpy(&v16, p, 2); return __builtin_bswap16(v16);
    case 4: memcpy(&v32, p, 4); return __builtin_bswap32(v32);
    default: memcpy(&v64, p, 8); return __builtin_bswap64(v64);
    }
}

/* Consumes 1 + n header bytes; the value of the n bytes after the format byte. */
static bool take(struct wire_rd *r, unsigned n, uint64_t *v)
{
    if ((size_t)(r->end - r->p) < 1 + (size_t)n)
        return false;
    *v = load_be(r->p + 1, n);
    r->p += 1 + n;
    return true;
}

static rs_err truncated(struct wire_rd *r)
{
    return wire_fail(r, RS_WIRE_BAD_REQUEST, "message truncated");
}

/* Payload of a str/bin/ext of len bytes (plus skip bytes, e.g. the ext type). */
static rs_err take_payload(struct wire_rd *r, struct wire_tok *t, uint64_t len, unsigned skip)
{
    if ((uint64_t)(r->end - r->p) < len + skip)
        return truncated(r);
    t->len = (uint32_t)len;
    t->data = r->p + skip;
    r->p += skip + len;
    return RS_OK;
}

/* Container of n items, each at least min_bytes long: n is checked against what is left. */
static rs_err take_count(struct wire_rd *r, struct wire_tok *t, uint64_t n, unsigned min_bytes)
{
    if (n > (uint64_t)(r->end - r->p) / min_bytes)
        return truncated(r);
    t->len = (uint32_t)n;
    return RS_OK;
}

static rs_err rd_int_tok(struct wire_rd *r, struct wire_tok *t, uint8_t b)
{
    uint64_t v;
    if (b <= 0x7f || b >= 0xe0) {
        r->p++;
        t->neg = b >= 0xe0;
        t->u = b;
        t->i = (int8_t)b;
        return RS_OK;
    }
    unsigned n = 1u << ((b - 0xcc) & 3);
    if (!take(r, n, &v))
        return truncated(r);
    if (b <= 0xcf) { /* uint8..uint64 */
        t->neg = false;
        t->u = v;
        return RS_OK;
    }
    int64_t s = n == 1 ? (int8_t)v : n == 2 ? (int16_t)v : n == 4 ? (int32_t)v : (int64_t)v;
    t->neg = s < 0;
    t->i = s;
    t->u = (uint64_t)s;
    return RS_OK;
}

static rs_err rd_float_tok(struct wire_rd *r, struct wire_tok *t, uint8_t b)
{
    uint64_t v;
    if (!take(r, b == 0xca ? 4 : 8, &v))
        return truncated(r);
    if (b == 0xca) {
        uint32_t bits = (uint32_t)v;
        float f;
        memcpy(&f, &bits, sizeof(f));
        t->f = f;
    } else {
        memcpy(&t->f, &v, sizeof(t->f));
    }
    return RS_OK;
}

/* Reads one header (and skips its payload for str/bin/ext). */
static rs_err rd_tok(struct wire_rd *r, struct wire_tok *t)
{
    uint64_t v;
    t->kind = wire_rd_kind(r);
    if (t->kind == WK_END)
        return truncated(r);
    uint8_t b = *r->p;
    switch (t->kind) {
    case WK_INT: return rd_int_tok(r, t, b);
    case WK_FLOAT: return rd_float_tok(r, t, b);
    case WK_NIL: r->p++; return RS_OK;
    case WK_BOOL: r->p++; t->b = b == 0xc3; return RS_OK;
    case WK_BAD: return wire_fail(r, RS_WIRE_BAD_REQUEST, "invalid msgpack byte 0xc1");
    case WK_STR:
        if (b >= 0xa0 && b <= 0xbf) {
            r->p++;
            return take_payload(r, t, b & 0x1f, 0);
        }
        return take(r, 1u << (b - 0xd9), &v) ? take_payload(r, t, v, 0) : truncated(r);
    case WK_BIN:
        return take(r, 1u << (b - 0xc4), &v) ? take_payload(r, t, v, 0) : truncated(r);
    case WK_EXT:
        if (b >= 0xd4) {
            r->p++;
            return take_payload(r, t, 1u << (b - 0xd4), 1);
        }
        return take(r, 1u << (b - 0xc7), &v) ? take_payload(r, t, v, 1) : truncated(r);
    case WK_ARRAY:
        if (b <= 0x9f) {
            r->p++;
            return take_count(r, t, b & 0x0f, 1);
        }
        return take(r, b == 0xdc ? 2 : 4, &v) ? take_count(r, t, v, 1) : truncated(r);
    case WK_MAP:
        if (b <= 0x8f) {
            r->p++;
            return take_count(r, t, b & 0x0f, 2);
        }
        return take(r, b == 0xde ? 2 : 4, &v) ? take_count(r, t, v, 2) : truncated(r);
    case WK_END: break;
    }
    return truncated(r);
}

rs_err wire_rd_tok(struct wire_rd *r, struct wire_tok *t)
{
    return rd_tok(r, t);
}

/* Reads a header that must be of kind `want`; `what` names it in the error. */
static rs_err rd_expect(struct wire_rd *r, struct wire_tok *t, enum wire_kind want, const char *what)
{
    enum wire_kind k = wire_rd_kind(r);
    if (k != want && !(want == WK_FLOAT && k == WK_INT)) {
        if (k == WK_END)
            return truncated(r);
        return wire_fail(r, RS_WIRE_WRONG_TYPE, "expected %s, got %s", what, wire_kind_name(k));
    }
    return rd_tok(r, t);
}

rs_err wire_rd_map(struct wire_rd *r, uint32_t *n)
{
    struct wire_tok t;
    rs_err e = rd_expect(r, &t, WK_MAP, "map");
    *n = e == RS_OK ? t.len : 0;
    return e;
}

rs_err wire_rd_array(struct wire_rd *r, uint32_t *n, uint32_t max)
{
    struct wire_tok t;
    rs_err e = rd_expect(r, &t, WK_ARRAY, "array");
    if (e != RS_OK)
        return e;
    if (t.len > max)
        return wire_fail(r, RS_WIRE_TOO_LARGE, "%" PRIu32 " items, at most %" PRIu32, t.len, max);
    *n = t.len;
    return RS_OK;
}

rs_err wire_rd_array_exact(struct wire_rd *r, uint32_t n)
{
    struct wire_tok t;
    if (n <= 15 && r->p < r->end && *r->p == (0x90 | n) && (size_t)(r->end - r->p) > n) {
        r->p++; /* fixarray with room for its n items: the doorbell entries' case */
        return RS_OK;
    }
    rs_err e = rd_expect(r, &t, WK_ARRAY, "array");
    if (e != RS_OK)
        return e;
    if (t.len != n)
        return wire_fail(r, RS_WIRE_BAD_REQUEST, "array of %" PRIu32 " items, expected %" PRIu32,
                         t.len, n);
    return RS_OK;
}

rs_err wire_rd_str(struct wire_rd *r, struct rs_wire_str *s, uint32_t max)
{
    struct wire_tok t;
    rs_err e = rd_expect(r, &t, WK_STR, "string");
    if (e != RS_OK)
        return e;
    if (t.len > max)
        return wire_fail(r, RS_WIRE_TOO_LARGE, "string of %" PRIu32 " bytes, at most %" PRIu32,
                         t.len, max);
    s->ptr = (const char *)t.data;
    s->len = t.len;
    return RS_OK;
}

rs_err wire_rd_text(struct wire_rd *r, struct rs_wire_str *s, uint32_t max)
{
    rs_err e = wire_rd_str(r, s, max);
    if (e != RS_OK)
        return e;
    size_t bad = rs_utf8_valid_prefix(s->ptr, s->len);
    if (bad != s->len)
        return wire_fail(r, RS_WIRE_BAD_REQUEST, "invalid UTF-8 at byte %zu", bad);
    return RS_OK;
}

rs_err wire_rd_id(struct wire_rd *r, char out[RS_WIRE_ID_MAX + 1], bool allow_empty)
{
    struct rs_wire_str s;
    rs_err e = wire_rd_str(r, &s, RS_WIRE_ID_MAX);
    if (e != RS_OK)
        return e;
    if (!(allow_empty && s.len == 0) && !rs_wire_id_valid(s.ptr, s.len))
        return wire_fail(r, RS_WIRE_INVALID_PARAM,
                         "must be 1..%d printable ASCII characters (0x21..0x7e)", RS_WIRE_ID_MAX);
    memcpy(out, s.ptr, s.len);
    out[s.len] = '\0';
    return RS_OK;
}

/* Fast path for the common case, a non-negative fixint or uint8..64 that is all there. */
static inline bool fast_uint(struct wire_rd *r, uint64_t *v)
{
    uint8_t b = *r->p;
    if (b <= 0x7f) {
        *v = b;
        r->p++;
        return true;
    }
    if (b < 0xcc || b > 0xcf)
        return false;
    unsigned n = 1u << (b - 0xcc);
    if ((size_t)(r->end - r->p) <= n)
        return false;
    *v = load_be(r->p + 1, n);
    r->p += 1 + n;
    return true;
}

rs_err wire_rd_u64(struct wire_rd *r, uint64_t *v, uint64_t max)
{
    struct wire_tok t;
    uint64_t u;
    if (r->p < r->end) {
        const uint8_t *at = r->p;
        if (fast_uint(r, &u)) {
            if (u <= max) {
                *v = u;
                return RS_OK;
            }
            r->p = at; /* out of range: the slow path reports it */
        }
    }
    rs_err e = rd_expect(r, &t, WK_INT, "integer");
    if (e != RS_OK)
        return e;
    if (t.neg)
        return wire_fail(r, RS_WIRE_INVALID_PARAM, "%" PRId64 " out of range 0..%" PRIu64, t.i,
                         max);
    if (t.u > max)
        return wire_fail(r, RS_WIRE_INVALID_PARAM, "%" PRIu64 " out of range 0..%" PRIu64, t.u,
                         max);
    *v = t.u;
    return RS_OK;
}

rs_err wire_rd_u32(struct wire_rd *r, uint32_t *v, uint32_t max)
{
    uint64_t w = 0;
    const uint8_t *at = r->p;
    if (r->p < r->end && fast_uint(r, &w)) {
        if (w <= max) {
            *v = (uint32_t)w;
            return RS_OK;
        }
        r->p = at; /* out of range: the slow path reports it */
    }
    rs_err e = wire_rd_u64(r, &w, max);
    if (e == RS_OK)
        *v = (uint32_t)w;
    return e;
}

rs_err wire_rd_i64(struct wire_rd *r, int64_t *v, int64_t min, int64_t max)
{
    struct wire_tok t;
    rs_err e = rd_expect(r, &t, WK_INT, "integer");
    if (e != RS_OK)
        return e;
    if (!t.neg && t.u > (uint64_t)INT64_MAX)
        return wire_fail(r, RS_WIRE_INVALID_PARAM, "%" PRIu64 " out of range %" PRId64
                         "..%" PRId64, t.u, min, max);
    int64_t s = t.neg ? t.i : (int64_t)t.u;
    if (s < min || s > max)
        return wire_fail(r, RS_WIRE_INVALID_PARAM, "%" PRId64 " out of range %" PRId64
                         "..%" PRId64, s, min, max);
    *v = s;
    return RS_OK;
}

rs_err wire_rd_f32(struct wire_rd *r, float *v)
{
    struct wire_tok t;
    rs_err e = rd_expect(r, &t, WK_FLOAT, "float");
    if (e != RS_OK)
        return e;
    double d = t.kind == WK_FLOAT ? t.f : t.neg ? (double)t.i : (double)t.u;
    /* Out-of-range double -> float is undefined in C; make it the IEEE infinity. */
    if (d > FLT_MAX)
        *v = INFINITY;
    else if (d < -FLT_MAX)
        *v = -INFINITY;
    else
        *v = (float)d;
    return RS_OK;
}

rs_err wire_rd_bool(struct wire_rd *r, bool *v)
{
    struct wire_tok t;
    rs_err e = rd_expect(r, &t, WK_BOOL, "boolean");
    if (e == RS_OK)
        *v = t.b;
    return e;
}

/* Skips one value nested at most max_depth (<= RS_WIRE_DOC_DEPTH_MAX) levels, iteratively. */
static rs_err skip_value(struct wire_rd *r, int max_depth)
{
    uint64_t left[RS_WIRE_DOC_DEPTH_MAX];
    int depth = 0;
    do {
        struct wire_tok t;
        rs_err e = rd_tok(r, &t);
        if (e != RS_OK)
            return e;
        if (depth > 0)
            left[depth - 1]--;
        if ((t.kind == WK_ARRAY || t.kind == WK_MAP) && t.len > 0) {
            if (depth == max_depth)
                return wire_fail(r, RS_WIRE_TOO_LARGE, "nested deeper than %d levels",
                                 max_depth);
            left[depth++] = (uint64_t)t.len * (t.kind == WK_MAP ? 2 : 1);
        }
        while (depth > 0 && left[depth - 1] == 0)
            depth--;
    } while (depth > 0);
    return RS_OK;
}

rs_err wire_rd_skip(struct wire_rd *r)
{
    return skip_value(r, RS_WIRE_DEPTH_MAX);
}

rs_err wire_rd_ids(struct wire_rd *r, struct rs_wire_ids *out, uint32_t max)
{
    uint32_t n = 0;
    rs_err e = wire_rd_array(r, &n, max);
    if (e != RS_OK)
        return e;
    const uint8_t *start = r->p;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id;
        r->index = i;
        e = wire_rd_u32(r, &id, RS_WIRE_TOKEN_MAX);
        if (e != RS_OK)
            return e;
    }
    r->index = -1;
    *out = (struct rs_wire_ids){.n = n, .packed = start, .packed_len = (size_t)(r->p - start)};
    return RS_OK;
}

/* [token, logprob, [[id, logprob], ...]]; r->index names the entry. */
rs_err wire_rd_lp(struct wire_rd *r, struct rs_wire_logprob *out)
{
    rs_err e = wire_rd_array_exact(r, 3);
    if (e == RS_OK)
        e = wire_rd_u32(r, &out->token, RS_WIRE_TOKEN_MAX);
    if (e == RS_OK)
        e = wire_rd_f32(r, &out->logprob);
    if (e == RS_OK)
        e = wire_rd_array(r, &out->n_top, RS_WIRE_LOGPROBS_MAX);
    for (uint32_t j = 0; e == RS_OK && j < out->n_top; j++) {
        e = wire_rd_array_exact(r, 2);
        if (e == RS_OK)
            e = wire_rd_u32(r, &out->top_ids[j], RS_WIRE_TOKEN_MAX);
        if (e == RS_OK)
            e = wire_rd_f32(r, &out->top_logprobs[j]);
    }
    return e;
}

rs_err wire_rd_lps(struct wire_rd *r, struct rs_wire_lps *out, uint32_t max)
{
    uint32_t n = 0;
    rs_err e = wire_rd_array(r, &n, max);
    if (e != RS_OK)
        return e;
    const uint8_t *start = r->p;
    for (uint32_t i = 0; i < n; i++) {
        struct rs_wire_logprob lp;
        r->index = i;
        e = wire_rd_lp(r, &lp);
        if (e != RS_OK)
            return e;
    }
    r->index = -1;
    *out = (struct rs_wire_lps){.n = n, .packed = start, .packed_len = (size_t)(r->p - start)};
    return RS_OK;
}

rs_err wire_rd_done(struct wire_rd *r)
{
    if (r->p != r->end) {
        r->field = NULL;
        return wire_fail(r, RS_WIRE_BAD_REQUEST, "%zu trailing bytes after the message",
                         (size_t)(r->end - r->p));
    }
    return RS_OK;
}

/* Copies a key into buf for an error message: at most 32 bytes, unprintables as '?'. */
static const char *key_for_msg(const struct rs_wire_str *k, char buf[40])
{
    uint32_t n = k->len < 32 ? k->len : 32;
    for (uint32_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)k->ptr[i];
        buf[i] = c >= 0x20 && c < 0x7f && c != '\'' ? (char)c : '?';
    }
    strcpy(buf + n, k->len > 32 ? "..." : "");
    return buf;
}

static int find_key(const struct wire_field *tab, unsigned n_tab, const struct rs_wire_str *k)
{
    for (unsigned i = 0; i < n_tab; i++)
        if (strlen(tab[i].key) == k->len && memcmp(tab[i].key, k->ptr, k->len) == 0)
            return (int)i;
    return -1;
}

rs_err wire_rd_fields(struct wire_rd *r, uint32_t n_pairs, const struct wire_field *tab,
                      unsigned n_tab, uint64_t required, wire_field_fn fn, void *ctx,
                      uint64_t *seen)
{
    const char *parent = r->field;
    char kbuf[40];
    *seen = 0;
    for (uint32_t i = 0; i < n_pairs; i++) {
        struct rs_wire_str k;
        r->field = parent;
        if (wire_rd_kind(r) != WK_STR && wire_rd_kind(r) != WK_END)
            return wire_fail(r, RS_WIRE_WRONG_TYPE, "map key %" PRIu32 ": expected string, got %s",
                             i, wire_kind_name(wire_rd_kind(r)));
        rs_err e = wire_rd_str(r, &k, UINT32_MAX);
        if (e != RS_OK)
            return e;
        int idx = find_key(tab, n_tab, &k);
        if (idx < 0)
            return wire_fail(r, RS_WIRE_UNKNOWN_FIELD, "unknown field '%s'", key_for_msg(&k, kbuf));
        if (*seen & (1ull << idx))
            return wire_fail(r, RS_WIRE_BAD_REQUEST, "field '%s' given twice", tab[idx].key);
        *seen |= 1ull << idx;
        r->field = tab[idx].path;
        e = fn(r, (unsigned)idx, ctx);
        if (e != RS_OK)
            return e;
    }
    r->field = parent;
    uint64_t missing = required & ~*seen;
    if (missing != 0)
        return wire_fail(r, RS_WIRE_MISSING_FIELD, "missing field '%s'",
                         tab[__builtin_ctzll(missing)].path);
    return RS_OK;
}

static rs_err header_pair(struct wire_rd *r, const struct rs_wire_str *k, struct wire_hdr *h,
                          bool *have_v)
{
    if (k->len == 1 && k->ptr[0] == 'v') {
        struct wire_tok t;
        r->field = "v";
        rs_err e = rd_expect(r, &t, WK_INT, "integer");
        if (e != RS_OK)
            return e;
        if (t.neg)
            return wire_fail(r, RS_WIRE_UNSUPPORTED_VERSION, "protocol version %" PRId64
                             " is not supported (this server speaks %d)", t.i, RS_WIRE_VERSION);
        if (t.u != RS_WIRE_VERSION)
            return wire_fail(r, RS_WIRE_UNSUPPORTED_VERSION, "protocol version %" PRIu64
                             " is not supported (this server speaks %d)", t.u, RS_WIRE_VERSION);
        *have_v = true;
        return RS_OK;
    }
    if (k->len == 4 && memcmp(k->ptr, "type", 4) == 0) {
        struct rs_wire_str t;
        r->field = "type";
        rs_err e = wire_rd_str(r, &t, RS_WIRE_NAME_MAX);
        if (e != RS_OK)
            return e;
        for (int i = 1; i < RS_WIRE_T_COUNT; i++) {
            const char *name = rs_wire_type_name((enum rs_wire_type)i);
            if (strlen(name) == t.len && memcmp(name, t.ptr, t.len) == 0)
                h->type = (enum rs_wire_type)i;
        }
        char buf[40];
        if (h->type == RS_WIRE_T_NONE)
            return wire_fail(r, RS_WIRE_BAD_REQUEST, "unknown message type '%s'",
                             key_for_msg(&t, buf));
        return RS_OK;
    }
    if (k->len == 2 && memcmp(k->ptr, "id", 2) == 0 && wire_rd_kind(r) == WK_STR) {
        struct rs_wire_error ignored;
        struct wire_rd peek = *r;
        peek.err = &ignored;
        if (wire_rd_id(&peek, h->id, false) != RS_OK)
            h->id[0] = '\0';
    }
    /* The header pass does not know which keys are documents (wire_doc.h), so it lets any
     * value nest as deep as a document may; each field's decoder then holds it to its own
     * bound (scalars and id lists: RS_WIRE_DEPTH_MAX; unknown keys are refused). */
    return skip_value(r, RS_WIRE_DOC_DEPTH_MAX);
}

rs_err wire_rd_header(const void *buf, size_t len, size_t max_len, struct wire_hdr *h,
                      struct rs_wire_error *err)
{
    struct wire_rd r;
    uint32_t n;
    bool have_v = false;
    wire_rd_init(&r, buf, len, err);
    h->type = RS_WIRE_T_NONE;
    h->id[0] = '\0';
    if (len > max_len)
        return wire_fail(&r, RS_WIRE_TOO_LARGE, "message of %zu bytes, at most %zu", len, max_len);
    if (wire_rd_kind(&r) != WK_MAP)
        return wire_fail(&r, RS_WIRE_BAD_REQUEST, "message must be a msgpack map, got %s",
                         wire_kind_name(wire_rd_kind(&r)));
    rs_err e = wire_rd_map(&r, &n);
    for (uint32_t i = 0; e == RS_OK && i < n; i++) {
        struct rs_wire_str k;
        r.field = NULL;
        if (wire_rd_kind(&r) != WK_STR && wire_rd_kind(&r) != WK_END)
            return wire_fail(&r, RS_WIRE_WRONG_TYPE, "map key %" PRIu32
                             ": expected string, got %s", i, wire_kind_name(wire_rd_kind(&r)));
        e = wire_rd_str(&r, &k, UINT32_MAX);
        if (e == RS_OK)
            e = header_pair(&r, &k, h, &have_v);
    }
    if (e == RS_OK)
        e = wire_rd_done(&r);
    r.field = NULL;
    if (e == RS_OK && !have_v)
        return wire_fail(&r, RS_WIRE_MISSING_FIELD, "missing field 'v'");
    if (e == RS_OK && h->type == RS_WIRE_T_NONE)
        return wire_fail(&r, RS_WIRE_MISSING_FIELD, "missing field 'type'");
    return e;
}

rs_err wire_rd_message(const void *buf, size_t len, size_t max_len, struct wire_hdr *h,
                       struct wire_rd *r, uint32_t *n_fields, struct rs_wire_error *err)
{
    rs_err e = wire_rd_header(buf, len, max_len, h, err);
    if (e != RS_OK)
        return e;
    wire_rd_init(r, buf, len, err);
    (void)wire_rd_map(r, n_fields); /* the header pass proved it is a map */
    return RS_OK;
}

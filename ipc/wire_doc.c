/* SPDX-License-Identifier: MIT */
/*
 * Conversation documents (wire_doc.h): the strict in-place walk the decoder
 * runs over a free-form value, packing JSON into msgpack for clients, and the
 * conversion back to JSON for tokenizerd. The walk is iterative with a fixed
 * stack, so a hostile message costs its own bytes and a bounded node count;
 * the two converters recurse, but only over values the walk (or the packer's
 * own depth check) has bounded to RS_WIRE_DOC_DEPTH_MAX levels.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/utf8.h"
#include "ipc/wire_doc.h"
#include "ipc/wire_impl.h"

/* A scalar (or a map key when is_key) of a document: only what JSON can say. */
static rs_err doc_scalar(struct wire_rd *r, const struct wire_tok *t, bool is_key)
{
    if (is_key && t->kind != WK_STR)
        return wire_fail(r, RS_WIRE_WRONG_TYPE, "map key: expected string, got %s",
                         wire_kind_name(t->kind));
    switch (t->kind) {
    case WK_STR: {
        if (is_key && t->len > RS_WIRE_DOC_KEY_MAX)
            return wire_fail(r, RS_WIRE_TOO_LARGE, "map key of %" PRIu32 " bytes, at most %u",
                             t->len, RS_WIRE_DOC_KEY_MAX);
        size_t bad = rs_utf8_valid_prefix((const char *)t->data, t->len);
        if (bad != t->len)
            return wire_fail(r, RS_WIRE_BAD_REQUEST, "invalid UTF-8 at byte %zu of a string",
                             bad);
        return RS_OK;
    }
    case WK_BIN:
    case WK_EXT:
        return wire_fail(r, RS_WIRE_WRONG_TYPE, "%s has no JSON form", wire_kind_name(t->kind));
    case WK_INT:
        if (!t->neg && t->u > (uint64_t)INT64_MAX)
            return wire_fail(r, RS_WIRE_INVALID_PARAM, "integer %" PRIu64 " beyond int64",
                             t->u);
        return RS_OK;
    case WK_FLOAT:
        if (!isfinite(t->f))
            return wire_fail(r, RS_WIRE_INVALID_PARAM, "non-finite number has no JSON form");
        return RS_OK;
    default:
        return RS_OK;
    }
}

/* Walk state: per open container, entries left (map: keys + values) and whether a map. */
struct doc_walk {
    uint64_t left[RS_WIRE_DOC_DEPTH_MAX];
    bool is_map[RS_WIRE_DOC_DEPTH_MAX];
    int depth;
    uint32_t nodes;
};

/* Reads the next value's header inside the walk; opens it when it is a container. */
static rs_err doc_step(struct wire_rd *r, struct doc_walk *w, enum wire_kind item, uint32_t n_top)
{
    int d = w->depth - 1;
    bool is_key = w->is_map[d] && (w->left[d] % 2) == 0;
    struct wire_tok t;
    if (d == 0 && !w->is_map[0])
        r->index = (int64_t)(n_top - w->left[0]);
    if (d == 0 && item != WK_END && wire_rd_kind(r) != item && wire_rd_kind(r) != WK_END)
        return wire_fail(r, RS_WIRE_WRONG_TYPE, "expected %s, got %s", wire_kind_name(item),
                         wire_kind_name(wire_rd_kind(r)));
    rs_err e = wire_rd_tok(r, &t);
    if (e == RS_OK && ++w->nodes > RS_WIRE_DOC_NODES_MAX)
        e = wire_fail(r, RS_WIRE_TOO_LARGE, "more than %u values", RS_WIRE_DOC_NODES_MAX);
    if (e == RS_OK)
        e = doc_scalar(r, &t, is_key);
    if (e != RS_OK)
        return e;
    w->left[d]--;
    if ((t.kind == WK_ARRAY || t.kind == WK_MAP) && t.len > 0) {
        if (w->depth == RS_WIRE_DOC_DEPTH_MAX)
            return wire_fail(r, RS_WIRE_TOO_LARGE, "nested deeper than %d levels",
                             RS_WIRE_DOC_DEPTH_MAX);
        w->is_map[w->depth] = t.kind == WK_MAP;
        w->left[w->depth++] = (uint64_t)t.len * (t.kind == WK_MAP ? 2 : 1);
    }
    return RS_OK;
}

rs_err wire_rd_doc(struct wire_rd *r, struct rs_wire_doc *out, enum wire_kind top,
                   enum wire_kind item, uint32_t max_items)
{
    const uint8_t *start = r->p;
    struct doc_walk w = {.depth = 1, .nodes = 1};
    struct wire_tok t;
    if (wire_rd_kind(r) != top && wire_rd_kind(r) != WK_END)
        return wire_fail(r, RS_WIRE_WRONG_TYPE, "expected %s, got %s", wire_kind_name(top),
                         wire_kind_name(wire_rd_kind(r)));
    rs_err e = wire_rd_tok(r, &t);
    if (e != RS_OK)
        return e;
    if (t.len > max_items)
        return wire_fail(r, RS_WIRE_TOO_LARGE, "%" PRIu32 " entries, at most %" PRIu32, t.len,
                         max_items);
    w.is_map[0] = top == WK_MAP;
    w.left[0] = (uint64_t)t.len * (top == WK_MAP ? 2 : 1);
    while (w.depth > 0) {
        if (w.left[w.depth - 1] == 0) {
            w.depth--;
            continue;
        }
        e = doc_step(r, &w, item, t.len);
        if (e != RS_OK)
            return e;
    }
    r->index = -1;
    *out = (struct rs_wire_doc){.n = t.len, .packed = start, .len = (size_t)(r->p - start)};
    return RS_OK;
}

rs_err wire_check_doc(const char *what, const struct rs_wire_doc *d, enum wire_kind top,
                      enum wire_kind item, uint32_t max_items)
{
    struct rs_wire_error err;
    struct rs_wire_doc seen;
    struct wire_rd r;
    wire_rd_init(&r, d->packed, d->packed ? d->len : 0, &err);
    r.field = what;
    rs_err e = wire_rd_doc(&r, &seen, top, item, max_items);
    if (e == RS_OK && (r.p != r.end || seen.n != d->n))
        e = wire_fail(&r, RS_WIRE_BAD_REQUEST, "bytes past the value or a wrong count");
    if (e != RS_OK)
        rs_log_error("wire: cannot encode %s: %s", what, err.msg);
    return e == RS_OK ? RS_OK : RS_EINVAL;
}

/* ---- JSON -> msgpack ------------------------------------------------------ */

/* Packing state: values (keys included) written so far, as the decoder's walk counts them. */
struct pack {
    struct wire_wr w;
    uint32_t nodes;
};

static rs_err pack_value(struct pack *pk, const json_t *j, int depth)
{
    struct wire_wr *w = &pk->w;
    const char *key;
    json_t *v;
    size_t i;
    if (++pk->nodes > RS_WIRE_DOC_NODES_MAX ||
        ((json_is_object(j) || json_is_array(j)) && depth >= RS_WIRE_DOC_DEPTH_MAX))
        return RS_EINVAL;
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        wire_wr_map(w, (uint32_t)json_object_size(j));
        json_object_foreach ((json_t *)j, key, v) {
            size_t n = strlen(key);
            if (n > RS_WIRE_DOC_KEY_MAX || ++pk->nodes > RS_WIRE_DOC_NODES_MAX)
                return RS_EINVAL;
            wire_wr_str(w, key, n);
            if (pack_value(pk, v, depth + 1) != RS_OK)
                return RS_EINVAL;
        }
        return RS_OK;
    case JSON_ARRAY:
        wire_wr_array(w, (uint32_t)json_array_size(j));
        json_array_foreach (j, i, v)
            if (pack_value(pk, v, depth + 1) != RS_OK)
                return RS_EINVAL;
        return RS_OK;
    case JSON_STRING: wire_wr_str(w, json_string_value(j), json_string_length(j)); return RS_OK;
    case JSON_INTEGER: wire_wr_i64(w, (int64_t)json_integer_value(j)); return RS_OK;
    case JSON_REAL:
        if (!isfinite(json_real_value(j)))
            return RS_EINVAL;
        msgpack_pack_double(&w->pk, json_real_value(j));
        return RS_OK;
    case JSON_TRUE: wire_wr_bool(w, true); return RS_OK;
    case JSON_FALSE: wire_wr_bool(w, false); return RS_OK;
    case JSON_NULL: msgpack_pack_nil(&w->pk); return RS_OK;
    }
    return RS_EINVAL;
}

rs_err rs_wire_doc_pack(const json_t *j, struct rs_wire_buf *out, struct rs_wire_doc *doc)
{
    struct pack pk = {.nodes = 0};
    if (j == NULL || !(json_is_array(j) || json_is_object(j))) {
        rs_log_error("wire: a document is a JSON array or object");
        return RS_EINVAL;
    }
    wire_wr_begin(&pk.w, out);
    if (pack_value(&pk, j, 0) != RS_OK) {
        rs_log_error("wire: document nested deeper than %d levels, over %u values, with a key "
                     "over %u bytes or a non-finite number", RS_WIRE_DOC_DEPTH_MAX,
                     RS_WIRE_DOC_NODES_MAX, RS_WIRE_DOC_KEY_MAX);
        return RS_EINVAL;
    }
    rs_err e = wire_wr_end(&pk.w);
    if (e != RS_OK)
        return e;
    *doc = (struct rs_wire_doc){
        .n = (uint32_t)(json_is_array(j) ? json_array_size(j) : json_object_size(j)),
        .packed = out->data, .len = out->len};
    return RS_OK;
}

/* ---- msgpack -> JSON ------------------------------------------------------ */

struct to_json {
    struct wire_rd r;
    struct rs_wire_error err;
    char *msg;
    size_t msg_size;
    rs_err e;
};

static json_t *json_value(struct to_json *c);

static json_t *json_map(struct to_json *c, uint32_t n)
{
    json_t *o = json_object();
    for (uint32_t i = 0; o != NULL && i < n; i++) {
        struct wire_tok k;
        if (wire_rd_tok(&c->r, &k) != RS_OK || k.kind != WK_STR) {
            c->e = RS_EINVAL;
            snprintf(c->msg, c->msg_size, "map key is not a string");
            break;
        }
        if (json_object_getn(o, (const char *)k.data, k.len) != NULL) {
            c->e = RS_EINVAL;
            snprintf(c->msg, c->msg_size, "key '%.*s' given twice in one map",
                     (int)(k.len > 64 ? 64 : k.len), (const char *)k.data);
            break;
        }
        json_t *v = json_value(c);
        if (v == NULL || json_object_setn_new(o, (const char *)k.data, k.len, v) != 0)
            break;
    }
    if (c->e == RS_OK && o != NULL && json_object_size(o) == n)
        return o;
    json_decref(o);
    if (c->e == RS_OK)
        c->e = RS_ENOMEM;
    return NULL;
}

static json_t *json_value(struct to_json *c)
{
    struct wire_tok t;
    json_t *v = NULL;
    if (c->e != RS_OK)
        return NULL;
    if (wire_rd_tok(&c->r, &t) != RS_OK) {
        c->e = RS_EINVAL;
        snprintf(c->msg, c->msg_size, "malformed document: %s", c->err.msg);
        return NULL;
    }
    switch (t.kind) {
    case WK_NIL: v = json_null(); break;
    case WK_BOOL: v = json_boolean(t.b); break;
    case WK_INT: v = json_integer(t.neg ? (json_int_t)t.i : (json_int_t)t.u); break;
    case WK_FLOAT: v = json_real(t.f); break;
    case WK_STR: v = json_stringn((const char *)t.data, t.len); break;
    case WK_MAP: return json_map(c, t.len);
    case WK_ARRAY:
        v = json_array();
        for (uint32_t i = 0; v != NULL && i < t.len; i++)
            if (json_array_append_new(v, json_value(c)) != 0) {
                json_decref(v);
                v = NULL;
            }
        break;
    default:
        c->e = RS_EINVAL;
        snprintf(c->msg, c->msg_size, "%s has no JSON form", wire_kind_name(t.kind));
        return NULL;
    }
    if (v == NULL && c->e == RS_OK) {
        c->e = RS_ENOMEM;
        snprintf(c->msg, c->msg_size, "out of memory");
    }
    return v;
}

rs_err rs_wire_doc_to_json(const struct rs_wire_doc *d, json_t **out, char *msg,
                           size_t msg_size)
{
    struct to_json c = {.msg = msg, .msg_size = msg_size, .e = RS_OK};
    if (msg_size > 0)
        msg[0] = '\0';
    wire_rd_init(&c.r, d->packed, d->packed ? d->len : 0, &c.err);
    *out = json_value(&c);
    return *out != NULL ? RS_OK : (c.e != RS_OK ? c.e : RS_EINVAL);
}

/* SPDX-License-Identifier: MIT */
/*
 * Doorbells (wire_door.h): one table row per kind drives both the encoder
 * and the strict decoder, so adding a kind is a row, not new code. The
 * layout is positional ([v, kind, sent_ns, fields..., entries?]) because
 * doorbells are hot and only our own stages send them.
 */
#include <inttypes.h>
#include <string.h>

#include "common/log.h"
#include "ipc/wire_door.h"
#include "ipc/wire_impl.h"

struct door_desc {
    const char *name;
    unsigned n_fields;                           /* integer fields after sent_ns */
    const char *field[RS_WIRE_DOOR_FIELDS_MAX];  /* names for error messages */
    uint64_t min[RS_WIRE_DOOR_FIELDS_MAX];
    uint64_t max[RS_WIRE_DOOR_FIELDS_MAX];
    bool entries;                                /* a trailing list of rs_wire_door_tok */
};

static const struct door_desc kinds[RS_WIRE_DOOR_KIND_COUNT] = {
    [RS_WIRE_DOOR_REQUEST_READY] = {"request_ready", 2, {"slot", "gen"}, {0, 0},
                                    {UINT32_MAX, UINT64_MAX}, false},
    [RS_WIRE_DOOR_CANCEL] = {"cancel", 3, {"slot", "gen", "reason"}, {0, 0, 1},
                             {UINT32_MAX, UINT64_MAX, RS_WIRE_CANCEL_REASON_MAX}, false},
    [RS_WIRE_DOOR_BATCH_READY] = {"batch_ready", 2, {"batch_id", "ring_slot"}, {0, 0},
                                  {UINT64_MAX, UINT32_MAX}, false},
    [RS_WIRE_DOOR_BATCH_DONE] = {"batch_done", 2, {"batch_id", "ring_slot"}, {0, 0},
                                 {UINT64_MAX, UINT32_MAX}, false},
    [RS_WIRE_DOOR_TOKENS_READY] = {"tokens_ready", 1, {"batch_id"}, {0}, {UINT64_MAX}, true},
    [RS_WIRE_DOOR_WAKE] = {"wake", 0, {NULL}, {0}, {0}, false},
};

const char *rs_wire_door_kind_name(enum rs_wire_door_kind kind)
{
    if (kind <= RS_WIRE_DOOR_NONE || kind >= RS_WIRE_DOOR_KIND_COUNT)
        return "none";
    return kinds[kind].name;
}

static rs_err rd_entries(struct wire_rd *r, struct rs_wire_door *out)
{
    r->field = "entries";
    rs_err e = wire_rd_array(r, &out->n_entries, RS_WIRE_DOOR_TOKENS_MAX);
    for (uint32_t i = 0; e == RS_OK && i < out->n_entries; i++) {
        struct rs_wire_door_tok *t = &out->entries[i];
        r->index = i;
        e = wire_rd_array_exact(r, 3);
        if (e == RS_OK)
            e = wire_rd_u32(r, &t->slot, UINT32_MAX);
        if (e == RS_OK)
            e = wire_rd_u64(r, &t->gen, UINT64_MAX);
        if (e == RS_OK)
            e = wire_rd_u32(r, &t->n_generated, UINT32_MAX);
    }
    r->index = -1;
    return e;
}

static rs_err rd_fields(struct wire_rd *r, const struct door_desc *d, struct rs_wire_door *out)
{
    for (unsigned i = 0; i < d->n_fields; i++) {
        r->field = d->field[i];
        rs_err e = wire_rd_u64(r, &out->u.f[i], d->max[i]);
        if (e != RS_OK)
            return e;
        if (out->u.f[i] < d->min[i])
            return wire_fail(r, RS_WIRE_INVALID_PARAM, "%" PRIu64 " out of range %" PRIu64
                             "..%" PRIu64, out->u.f[i], d->min[i], d->max[i]);
    }
    return d->entries ? rd_entries(r, out) : RS_OK;
}

/* Reads [v, kind, ...]'s first two items and checks the item count n against the kind. */
static rs_err rd_head(struct wire_rd *r, uint32_t n, struct rs_wire_door *out)
{
    uint64_t v, kind;
    r->field = "v";
    rs_err e = wire_rd_u64(r, &v, UINT64_MAX);
    if (e != RS_OK)
        return e;
    if (v != RS_WIRE_VERSION)
        return wire_fail(r, RS_WIRE_UNSUPPORTED_VERSION, "protocol version %" PRIu64
                         " is not supported (this build speaks %d)", v, RS_WIRE_VERSION);
    r->field = "kind";
    e = wire_rd_u64(r, &kind, UINT8_MAX);
    if (e != RS_OK)
        return e;
    if (kind == RS_WIRE_DOOR_NONE || kind >= RS_WIRE_DOOR_KIND_COUNT)
        return wire_fail(r, RS_WIRE_BAD_REQUEST, "unknown doorbell kind %" PRIu64, kind);
    out->kind = (enum rs_wire_door_kind)kind;
    const struct door_desc *d = &kinds[kind];
    uint32_t want = 3 + d->n_fields + (d->entries ? 1 : 0);
    r->field = NULL;
    if (n != want)
        return wire_fail(r, RS_WIRE_BAD_REQUEST, "%s doorbell of %" PRIu32 " items, expected %"
                         PRIu32, d->name, n, want);
    r->field = "sent_ns";
    return wire_rd_u64(r, &out->sent_ns, UINT64_MAX);
}

rs_err rs_wire_door_decode(const void *buf, size_t len, struct rs_wire_door *out,
                           struct rs_wire_error *err)
{
    struct wire_rd r;
    uint32_t n;
    wire_rd_init(&r, buf, len, err);
    out->kind = RS_WIRE_DOOR_NONE;
    out->sent_ns = 0;
    out->n_entries = 0;
    memset(&out->u, 0, sizeof(out->u));
    if (len > RS_WIRE_DOOR_MSG_MAX)
        return wire_fail(&r, RS_WIRE_TOO_LARGE, "doorbell of %zu bytes, at most %u", len,
                         RS_WIRE_DOOR_MSG_MAX);
    if (wire_rd_kind(&r) != WK_ARRAY)
        return wire_fail(&r, RS_WIRE_BAD_REQUEST, "doorbell must be a msgpack array, got %s",
                         wire_kind_name(wire_rd_kind(&r)));
    rs_err e = wire_rd_array(&r, &n, UINT32_MAX);
    if (e == RS_OK && n < 2)
        e = wire_fail(&r, RS_WIRE_BAD_REQUEST, "doorbell of %" PRIu32 " items is too short", n);
    if (e == RS_OK)
        e = rd_head(&r, n, out);
    if (e == RS_OK)
        e = rd_fields(&r, &kinds[out->kind], out);
    if (e == RS_OK)
        e = wire_rd_done(&r);
    if (e != RS_OK)
        out->kind = RS_WIRE_DOOR_NONE;
    return e;
}

static rs_err check_door(const struct rs_wire_door *d)
{
    if (d->kind <= RS_WIRE_DOOR_NONE || d->kind >= RS_WIRE_DOOR_KIND_COUNT) {
        rs_log_error("wire: cannot encode doorbell of kind %d", (int)d->kind);
        return RS_EINVAL;
    }
    const struct door_desc *k = &kinds[d->kind];
    for (unsigned i = 0; i < k->n_fields; i++) {
        if (d->u.f[i] < k->min[i] || d->u.f[i] > k->max[i]) {
            rs_log_error("wire: cannot encode %s doorbell: %s %" PRIu64 " out of range", k->name,
                         k->field[i], d->u.f[i]);
            return RS_EINVAL;
        }
    }
    if (k->entries && d->n_entries > RS_WIRE_DOOR_TOKENS_MAX) {
        rs_log_error("wire: cannot encode %s doorbell: %u entries, at most %d", k->name,
                     d->n_entries, RS_WIRE_DOOR_TOKENS_MAX);
        return RS_EINVAL;
    }
    return RS_OK;
}

rs_err rs_wire_door_encode(const struct rs_wire_door *d, struct rs_wire_buf *out)
{
    struct wire_wr w;
    rs_err e = check_door(d);
    if (e != RS_OK)
        return e;
    const struct door_desc *k = &kinds[d->kind];
    wire_wr_begin(&w, out);
    wire_wr_array(&w, 3 + k->n_fields + (k->entries ? 1 : 0));
    wire_wr_u64(&w, RS_WIRE_VERSION);
    wire_wr_u64(&w, (uint64_t)d->kind);
    wire_wr_u64(&w, d->sent_ns);
    for (unsigned i = 0; i < k->n_fields; i++)
        wire_wr_u64(&w, d->u.f[i]);
    if (k->entries) {
        wire_wr_array(&w, d->n_entries);
        for (uint32_t i = 0; i < d->n_entries; i++) {
            wire_wr_array(&w, 3);
            wire_wr_u64(&w, d->entries[i].slot);
            wire_wr_u64(&w, d->entries[i].gen);
            wire_wr_u64(&w, d->entries[i].n_generated);
        }
    }
    return wire_wr_end(&w);
}

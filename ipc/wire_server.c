/* SPDX-License-Identifier: MIT */
/*
 * Daemon -> client messages (wire_server.h): field tables, strict decoding
 * (including the cross-field rules: logprobs match tokens one to one, an
 * error code only with finish_reason "error") and encoding that checks the
 * same rules first. PROTOCOL.md §4 lists the same fields.
 */
#include <inttypes.h>
#include <string.h>

#include "common/log.h"
#include "common/utf8.h"
#include "ipc/wire_impl.h"
#include "ipc/wire_server.h"

static const struct wire_field ack_fields[] = {
    {"v", "v"}, {"type", "type"}, {"id", "id"},
    {"prompt_tokens", "prompt_tokens"}, {"handle", "handle"}, {"seed", "seed"}};
static const struct wire_field error_fields[] = {
    {"v", "v"}, {"type", "type"}, {"id", "id"}, {"code", "code"}, {"message", "message"}};
static const struct wire_field welcome_fields[] = {{"v", "v"}, {"type", "type"}, {"server", "server"}};
/* delta is the first 7 entries of final. */
static const struct wire_field final_fields[] = {
    {"v", "v"}, {"type", "type"}, {"id", "id"}, {"seq", "seq"}, {"text", "text"},
    {"tokens", "tokens"}, {"logprobs", "logprobs"}, {"finish_reason", "finish_reason"},
    {"usage", "usage"}, {"timings", "timings"}, {"error", "error"}, {"message", "message"}};
#define DELTA_N 7
#define DELTA_REQUIRED 0x3full /* v type id seq text tokens */
#define FINAL_REQUIRED (DELTA_REQUIRED | 0x380ull) /* + finish_reason usage timings */
#define F_LOGPROBS (1ull << 6)
#define F_ERROR (1ull << 10)
#define F_MESSAGE (1ull << 11)
static const struct wire_field usage_fields[] = {
    {"prompt_tokens", "usage.prompt_tokens"},
    {"completion_tokens", "usage.completion_tokens"},
    {"cached_tokens", "usage.cached_tokens"}};
static const struct wire_field timings_fields[] = {
    {"queue_us", "timings.queue_us"}, {"ttft_us", "timings.ttft_us"},
    {"total_us", "timings.total_us"}};

static const char *const finish_names[RS_WIRE_FINISH_COUNT] = {
    [RS_WIRE_FINISH_NONE] = "none", [RS_WIRE_FINISH_STOP] = "stop",
    [RS_WIRE_FINISH_LENGTH] = "length", [RS_WIRE_FINISH_ABORT] = "abort",
    [RS_WIRE_FINISH_ERROR] = "error"};

const char *rs_wire_finish_name(enum rs_wire_finish f)
{
    return (unsigned)f < RS_WIRE_FINISH_COUNT ? finish_names[f] : "none";
}

static rs_err rd_code(struct wire_rd *r, enum rs_wire_code *code)
{
    struct rs_wire_str s;
    rs_err e = wire_rd_str(r, &s, RS_WIRE_NAME_MAX);
    if (e != RS_OK)
        return e;
    if (rs_wire_code_parse(s.ptr, s.len, code) != RS_OK || *code == RS_WIRE_OK)
        return wire_fail(r, RS_WIRE_INVALID_PARAM, "not an error code");
    return RS_OK;
}

static rs_err rd_finish(struct wire_rd *r, enum rs_wire_finish *f)
{
    struct rs_wire_str s;
    rs_err e = wire_rd_str(r, &s, RS_WIRE_NAME_MAX);
    if (e != RS_OK)
        return e;
    for (int i = 1; i < RS_WIRE_FINISH_COUNT; i++) {
        if (strlen(finish_names[i]) == s.len && memcmp(finish_names[i], s.ptr, s.len) == 0) {
            *f = (enum rs_wire_finish)i;
            return RS_OK;
        }
    }
    return wire_fail(r, RS_WIRE_INVALID_PARAM, "expected stop, length, abort or error");
}

static rs_err simple_field(struct wire_rd *r, unsigned idx, void *ctx)
{
    struct rs_wire_server_msg *m = ctx;
    if (idx < 2)
        return wire_rd_skip(r); /* v, type: checked by wire_rd_header */
    switch (m->type) {
    case RS_WIRE_T_ACK:
        if (idx == 2)
            return wire_rd_id(r, m->id, false);
        if (idx == 3)
            return wire_rd_u32(r, &m->u.ack.prompt_tokens, UINT32_MAX);
        return wire_rd_u64(r, idx == 4 ? &m->u.ack.handle : &m->u.ack.seed, UINT64_MAX);
    case RS_WIRE_T_ERROR:
        if (idx == 2)
            return wire_rd_id(r, m->id, true);
        if (idx == 3)
            return rd_code(r, &m->u.error.code);
        return wire_rd_text(r, &m->u.error.message, RS_WIRE_MESSAGE_MAX);
    default: /* welcome */
        return wire_rd_text(r, &m->u.welcome.server, RS_WIRE_NAME_MAX);
    }
}

static rs_err usage_field(struct wire_rd *r, unsigned idx, void *ctx)
{
    struct rs_wire_usage *u = ctx;
    uint32_t *dst[] = {&u->prompt_tokens, &u->completion_tokens, &u->cached_tokens};
    return wire_rd_u32(r, dst[idx], UINT32_MAX);
}

static rs_err timings_field(struct wire_rd *r, unsigned idx, void *ctx)
{
    struct rs_wire_timings *t = ctx;
    uint64_t *dst[] = {&t->queue_us, &t->ttft_us, &t->total_us};
    return wire_rd_u64(r, dst[idx], UINT64_MAX);
}

static rs_err rd_nested(struct wire_rd *r, const struct wire_field *tab, wire_field_fn fn,
                        void *ctx)
{
    uint32_t n;
    uint64_t seen;
    rs_err e = wire_rd_map(r, &n);
    return e != RS_OK ? e : wire_rd_fields(r, n, tab, 3, 0x7, fn, ctx, &seen);
}

/* delta and final (a delta's fields are final's first seven). */
static rs_err output_field(struct wire_rd *r, unsigned idx, void *ctx)
{
    struct rs_wire_server_msg *m = ctx;
    struct rs_wire_delta *d = m->type == RS_WIRE_T_FINAL ? &m->u.final.out : &m->u.delta;
    struct rs_wire_final *f = &m->u.final;
    switch (idx) {
    case 0: case 1: return wire_rd_skip(r);
    case 2: return wire_rd_id(r, m->id, false);
    case 3: return wire_rd_u64(r, &d->seq, UINT64_MAX);
    case 4: return wire_rd_text(r, &d->text, RS_WIRE_TEXT_MAX);
    case 5: return wire_rd_ids(r, &d->tokens, RS_WIRE_OUT_TOKENS_MAX);
    case 6: d->has_logprobs = true; return wire_rd_lps(r, &d->logprobs, RS_WIRE_OUT_TOKENS_MAX);
    case 7: return rd_finish(r, &f->finish_reason);
    case 8: return rd_nested(r, usage_fields, usage_field, &f->usage);
    case 9: return rd_nested(r, timings_fields, timings_field, &f->timings);
    case 10: return rd_code(r, &f->error);
    default: return wire_rd_text(r, &f->message, RS_WIRE_MESSAGE_MAX);
    }
}

/* Index of the first logprob entry whose token differs from tokens[i], or -1. */
static int64_t lps_mismatch(const struct rs_wire_delta *d)
{
    struct rs_wire_error ignored;
    struct wire_rd rt, rl;
    if (d->tokens.vals == NULL)
        wire_rd_init(&rt, d->tokens.packed, d->tokens.packed_len, &ignored);
    if (d->logprobs.vals == NULL)
        wire_rd_init(&rl, d->logprobs.packed, d->logprobs.packed_len, &ignored);
    for (uint32_t i = 0; i < d->tokens.n; i++) {
        uint32_t tok;
        struct rs_wire_logprob lp;
        if (d->tokens.vals != NULL)
            tok = d->tokens.vals[i];
        else if (wire_rd_u32(&rt, &tok, RS_WIRE_TOKEN_MAX) != RS_OK)
            return i;
        if (d->logprobs.vals != NULL)
            lp.token = d->logprobs.vals[i].token;
        else if (wire_rd_lp(&rl, &lp) != RS_OK)
            return i;
        if (lp.token != tok)
            return i;
    }
    return -1;
}

/* Rules across fields of a delta or final; `what` names the failure for the caller. */
static const char *output_rule(const struct rs_wire_delta *d, int64_t *at)
{
    *at = -1;
    if (!d->has_logprobs)
        return NULL;
    if (d->logprobs.n != d->tokens.n)
        return "field 'logprobs': one entry per token expected";
    if ((*at = lps_mismatch(d)) >= 0)
        return "field 'logprobs': entry token differs from 'tokens'";
    return NULL;
}

static const char *final_rule(const struct rs_wire_final *f, bool has_error, bool has_message)
{
    if ((f->finish_reason == RS_WIRE_FINISH_ERROR) != has_error)
        return "field 'error': required with finish_reason \"error\" and only with it";
    if (has_message && !has_error)
        return "field 'message': only with finish_reason \"error\"";
    return NULL;
}

static rs_err decode_output(struct wire_rd *r, uint32_t n, struct rs_wire_server_msg *m)
{
    uint64_t seen;
    bool final = m->type == RS_WIRE_T_FINAL;
    rs_err e = wire_rd_fields(r, n, final_fields, final ? 12 : DELTA_N,
                              final ? FINAL_REQUIRED : DELTA_REQUIRED, output_field, m, &seen);
    if (e != RS_OK)
        return e;
    int64_t at;
    const char *rule = output_rule(final ? &m->u.final.out : &m->u.delta, &at);
    r->field = NULL;
    if (rule != NULL && at >= 0)
        return wire_fail(r, RS_WIRE_BAD_REQUEST, "%s (item %" PRId64 ")", rule, at);
    if (rule == NULL && final)
        rule = final_rule(&m->u.final, seen & F_ERROR, seen & F_MESSAGE);
    return rule ? wire_fail(r, RS_WIRE_BAD_REQUEST, "%s", rule) : RS_OK;
}

rs_err rs_wire_server_decode(const void *buf, size_t len, struct rs_wire_server_msg *out,
                             struct rs_wire_error *err)
{
    struct wire_hdr h;
    struct wire_rd r;
    uint32_t n;
    uint64_t seen;
    memset(out, 0, sizeof(*out));
    rs_err e = wire_rd_message(buf, len, RS_WIRE_SERVER_MSG_MAX, &h, &r, &n, err);
    memcpy(out->id, h.id, sizeof(out->id));
    if (e != RS_OK)
        return e;
    out->type = h.type;
    switch (h.type) {
    case RS_WIRE_T_ACK: e = wire_rd_fields(&r, n, ack_fields, 6, 0x3f, simple_field, out, &seen);
        break;
    case RS_WIRE_T_ERROR:
        e = wire_rd_fields(&r, n, error_fields, 5, 0x1f, simple_field, out, &seen);
        break;
    case RS_WIRE_T_WELCOME:
        e = wire_rd_fields(&r, n, welcome_fields, 3, 0x7, simple_field, out, &seen);
        break;
    case RS_WIRE_T_DELTA:
    case RS_WIRE_T_FINAL: e = decode_output(&r, n, out); break;
    default:
        r.field = "type";
        e = wire_fail(&r, RS_WIRE_BAD_REQUEST, "'%s' is not a message a server sends",
                      rs_wire_type_name(h.type));
    }
    if (e == RS_OK)
        e = wire_rd_done(&r);
    if (e != RS_OK)
        memcpy(out->id, h.id, sizeof(out->id));
    return e;
}

static rs_err encode_refused(const char *type, const char *why)
{
    rs_log_error("wire: cannot encode %s: %s", type, why);
    return RS_EINVAL;
}

static rs_err check_output(const char *type, const struct rs_wire_delta *d)
{
    int64_t at;
    rs_err e = wire_check_text("text", &d->text, RS_WIRE_TEXT_MAX);
    if (e == RS_OK)
        e = wire_check_ids("tokens", &d->tokens, RS_WIRE_OUT_TOKENS_MAX);
    if (e == RS_OK && d->has_logprobs)
        e = wire_check_lps("logprobs", &d->logprobs, RS_WIRE_OUT_TOKENS_MAX);
    const char *rule = e == RS_OK ? output_rule(d, &at) : NULL;
    return rule ? encode_refused(type, rule) : e;
}

static void wr_output(struct wire_wr *w, const struct rs_wire_delta *d)
{
    wire_wr_key(w, "seq");
    wire_wr_u64(w, d->seq);
    wire_wr_key(w, "text");
    wire_wr_str(w, d->text.ptr, d->text.len);
    wire_wr_key(w, "tokens");
    wire_wr_ids(w, &d->tokens);
    if (d->has_logprobs) {
        wire_wr_key(w, "logprobs");
        wire_wr_lps(w, &d->logprobs);
    }
}

static void wr_triple(struct wire_wr *w, const struct wire_field *tab, const uint64_t v[3])
{
    wire_wr_map(w, 3);
    for (int i = 0; i < 3; i++) {
        wire_wr_key(w, tab[i].key);
        wire_wr_u64(w, v[i]);
    }
}

static rs_err encode_final(struct wire_wr *w, const struct rs_wire_final *f)
{
    bool has_error = f->error != RS_WIRE_OK, has_message = f->message.len > 0;
    if (f->finish_reason <= RS_WIRE_FINISH_NONE || f->finish_reason >= RS_WIRE_FINISH_COUNT)
        return encode_refused("final", "no finish_reason");
    if ((unsigned)f->error >= RS_WIRE_CODE_COUNT)
        return encode_refused("final", "unknown error code");
    const char *rule = final_rule(f, has_error, has_message);
    if (rule != NULL)
        return encode_refused("final", rule);
    rs_err e = check_output("final", &f->out);
    if (e == RS_OK && has_message)
        e = wire_check_text("message", &f->message, RS_WIRE_MESSAGE_MAX);
    if (e != RS_OK)
        return e;
    wire_wr_map(w, 9 + f->out.has_logprobs + has_error + has_message);
    wire_wr_head(w, RS_WIRE_T_FINAL);
    wire_wr_key(w, "id");
    return RS_OK;
}

static void wr_final_tail(struct wire_wr *w, const struct rs_wire_final *f)
{
    const uint64_t usage[3] = {f->usage.prompt_tokens, f->usage.completion_tokens,
                               f->usage.cached_tokens};
    const uint64_t timings[3] = {f->timings.queue_us, f->timings.ttft_us, f->timings.total_us};
    const char *finish = rs_wire_finish_name(f->finish_reason);
    wr_output(w, &f->out);
    wire_wr_key(w, "finish_reason");
    wire_wr_str(w, finish, strlen(finish));
    wire_wr_key(w, "usage");
    wr_triple(w, usage_fields, usage);
    wire_wr_key(w, "timings");
    wr_triple(w, timings_fields, timings);
    if (f->error != RS_WIRE_OK) {
        const char *code = rs_wire_code_name(f->error);
        wire_wr_key(w, "error");
        wire_wr_str(w, code, strlen(code));
    }
    if (f->message.len > 0) {
        wire_wr_key(w, "message");
        wire_wr_str(w, f->message.ptr, f->message.len);
    }
}

/* Writes the map header, "v", "type" and the "id" key of m; the caller writes the rest. */
static rs_err encode_head(struct wire_wr *w, const struct rs_wire_server_msg *m)
{
    const struct rs_wire_err_reply *er = &m->u.error;
    rs_err e = RS_OK;
    switch (m->type) {
    case RS_WIRE_T_ACK: wire_wr_map(w, 6); break;
    case RS_WIRE_T_ERROR:
        if (er->code <= RS_WIRE_OK || er->code >= RS_WIRE_CODE_COUNT)
            return encode_refused("error", "no error code");
        e = wire_check_text("message", &er->message, RS_WIRE_MESSAGE_MAX);
        wire_wr_map(w, 5);
        break;
    case RS_WIRE_T_WELCOME:
        e = wire_check_text("server", &m->u.welcome.server, RS_WIRE_NAME_MAX);
        wire_wr_map(w, 3);
        break;
    case RS_WIRE_T_DELTA:
        e = check_output("delta", &m->u.delta);
        wire_wr_map(w, 6 + m->u.delta.has_logprobs);
        break;
    case RS_WIRE_T_FINAL: return encode_final(w, &m->u.final);
    default: return encode_refused(rs_wire_type_name(m->type), "not a server message");
    }
    if (e != RS_OK)
        return e;
    wire_wr_head(w, m->type);
    if (m->type != RS_WIRE_T_WELCOME)
        wire_wr_key(w, "id");
    return RS_OK;
}

rs_err rs_wire_server_encode(const struct rs_wire_server_msg *m, struct rs_wire_buf *out)
{
    struct wire_wr w;
    size_t id_len = strnlen(m->id, sizeof(m->id));
    bool id_ok = m->type == RS_WIRE_T_WELCOME ? id_len == 0
                 : m->type == RS_WIRE_T_ERROR ? id_len == 0 || rs_wire_id_valid(m->id, id_len)
                                              : rs_wire_id_valid(m->id, id_len);
    if (!id_ok)
        return encode_refused(rs_wire_type_name(m->type), "bad request id");
    wire_wr_begin(&w, out);
    rs_err e = encode_head(&w, m);
    if (e != RS_OK)
        return e;
    if (m->type != RS_WIRE_T_WELCOME)
        wire_wr_str(&w, m->id, id_len);
    switch (m->type) {
    case RS_WIRE_T_ACK:
        wire_wr_key(&w, "prompt_tokens");
        wire_wr_u64(&w, m->u.ack.prompt_tokens);
        wire_wr_key(&w, "handle");
        wire_wr_u64(&w, m->u.ack.handle);
        wire_wr_key(&w, "seed");
        wire_wr_u64(&w, m->u.ack.seed);
        break;
    case RS_WIRE_T_ERROR: {
        const char *code = rs_wire_code_name(m->u.error.code);
        wire_wr_key(&w, "code");
        wire_wr_str(&w, code, strlen(code));
        wire_wr_key(&w, "message");
        wire_wr_str(&w, m->u.error.message.ptr, m->u.error.message.len);
        break;
    }
    case RS_WIRE_T_WELCOME:
        wire_wr_key(&w, "server");
        wire_wr_str(&w, m->u.welcome.server.ptr, m->u.welcome.server.len);
        break;
    case RS_WIRE_T_DELTA: wr_output(&w, &m->u.delta); break;
    default: wr_final_tail(&w, &m->u.final); break;
    }
    return wire_wr_end(&w);
}

rs_err rs_wire_error_reply(const char *id, const struct rs_wire_error *err,
                           struct rs_wire_buf *out)
{
    struct rs_wire_server_msg m = {.type = RS_WIRE_T_ERROR};
    size_t id_len = id ? strnlen(id, RS_WIRE_ID_MAX + 1) : 0;
    if (rs_wire_id_valid(id, id_len))
        memcpy(m.id, id, id_len);
    m.u.error.code = err->code > RS_WIRE_OK && err->code < RS_WIRE_CODE_COUNT ? err->code
                                                                              : RS_WIRE_INTERNAL;
    size_t len = strnlen(err->msg, sizeof(err->msg));
    m.u.error.message.ptr = err->msg;
    m.u.error.message.len = (uint32_t)rs_utf8_valid_prefix(err->msg, len); /* valid prefix */
    return rs_wire_server_encode(&m, out);
}

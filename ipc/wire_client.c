/* SPDX-License-Identifier: MIT */
/*
 * Client -> daemon messages (wire_client.h): decode in two passes (header,
 * then the type's field table), encode from the same tables, and the
 * semantic validator. The key tables are the single definition of each
 * message's fields; PROTOCOL.md §3 lists the same names.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "common/log.h"
#include "ipc/wire_client.h"
#include "ipc/wire_constraint_impl.h"
#include "ipc/wire_impl.h"

_Static_assert(RS_WIRE_LOGPROBS_MAX == RS_SAMPLING_MAX_LOGPROBS,
               "the wire's logprob bound is the sampler's");

/* generate: entries 0..2 are the header, entry 3 + k has presence bit 1 << k. */
static const struct wire_field gen_fields[] = {
    {"v", "v"},
    {"type", "type"},
    {"id", "id"},
    {"prompt", "prompt"},
    {"prompt_ids", "prompt_ids"},
    {"max_tokens", "max_tokens"},
    {"temperature", "temperature"},
    {"top_p", "top_p"},
    {"top_k", "top_k"},
    {"min_p", "min_p"},
    {"repetition_penalty", "repetition_penalty"},
    {"presence_penalty", "presence_penalty"},
    {"frequency_penalty", "frequency_penalty"},
    {"seed", "seed"},
    {"stop", "stop"},
    {"stop_token_ids", "stop_token_ids"},
    {"ignore_eos", "ignore_eos"},
    {"logprobs", "logprobs"},
    {"stream", "stream"},
    {"priority", "priority"},
    {"messages", "messages"},
    {"tools", "tools"},
    {"add_generation_prompt", "add_generation_prompt"},
    {"chat_template_kwargs", "chat_template_kwargs"},
    {"constraint", "constraint"},
    {"logit_bias", "logit_bias"},
    {"allowed_token_ids", "allowed_token_ids"},
    {"min_tokens", "min_tokens"},
};
#define GEN_FIRST_OPT 3
#define N_GEN_FIELDS (sizeof(gen_fields) / sizeof(gen_fields[0]))

/* cancel / resume / hello / release share one table; each requires its own subset. */
static const struct wire_field small_fields[] = {
    {"v", "v"}, {"type", "type"}, {"id", "id"}, {"from_seq", "from_seq"}};
#define SMALL_HEAD 0x3u /* v, type */
#define SMALL_ID 0x4u
#define SMALL_FROM 0x8u

/* hello has its own table: its one optional field is the client's secret (never logged). */
static const struct wire_field hello_fields[] = {{"v", "v"}, {"type", "type"}, {"secret", "secret"}};

void rs_wire_generate_init(struct rs_wire_generate *g)
{
    memset(g, 0, sizeof(*g));
    g->temperature = 1.0f;
    g->top_p = 1.0f;
    g->repetition_penalty = 1.0f;
    g->add_generation_prompt = true;
}

static rs_err rd_stop(struct wire_rd *r, struct rs_wire_generate *g)
{
    rs_err e = wire_rd_array(r, &g->n_stop, RS_WIRE_STOP_MAX);
    for (uint32_t i = 0; e == RS_OK && i < g->n_stop; i++) {
        r->index = i;
        e = wire_rd_text(r, &g->stop[i], RS_WIRE_STOP_LEN_MAX);
    }
    r->index = -1;
    return e;
}

static rs_err rd_stop_ids(struct wire_rd *r, struct rs_wire_generate *g)
{
    struct rs_wire_ids ids;
    rs_err e = wire_rd_ids(r, &ids, RS_WIRE_STOP_IDS_MAX);
    if (e == RS_OK)
        g->n_stop_ids = rs_wire_ids_copy(&ids, g->stop_ids, RS_WIRE_STOP_IDS_MAX);
    return e;
}

static rs_err gen_field(struct wire_rd *r, unsigned idx, void *ctx)
{
    struct rs_wire_client_msg *m = ctx;
    struct rs_wire_generate *g = &m->u.gen;
    int64_t i64;
    rs_err e;
    switch (idx) {
    case 0: case 1: return wire_rd_skip(r); /* checked by wire_rd_header */
    case 2: return wire_rd_id(r, m->id, false);
    case 3: return wire_rd_text(r, &g->prompt, RS_WIRE_PROMPT_MAX);
    case 4: return wire_rd_ids(r, &g->prompt_ids, RS_WIRE_PROMPT_IDS_MAX);
    case 5: return wire_rd_u32(r, &g->max_tokens, UINT32_MAX);
    case 6: return wire_rd_f32(r, &g->temperature);
    case 7: return wire_rd_f32(r, &g->top_p);
    case 8:
        e = wire_rd_i64(r, &i64, INT32_MIN, INT32_MAX);
        g->top_k = (int32_t)i64;
        return e;
    case 9: return wire_rd_f32(r, &g->min_p);
    case 10: return wire_rd_f32(r, &g->repetition_penalty);
    case 11: return wire_rd_f32(r, &g->presence_penalty);
    case 12: return wire_rd_f32(r, &g->frequency_penalty);
    case 13: return wire_rd_u64(r, &g->seed, UINT64_MAX);
    case 14: return rd_stop(r, g);
    case 15: return rd_stop_ids(r, g);
    case 16: return wire_rd_bool(r, &g->ignore_eos);
    case 17: return wire_rd_u32(r, &g->logprobs, UINT32_MAX);
    case 18: return wire_rd_bool(r, &g->stream);
    case 19:
        e = wire_rd_i64(r, &i64, INT32_MIN, INT32_MAX);
        g->priority = (int32_t)i64;
        return e;
    case 20: return wire_rd_doc(r, &g->messages, WK_ARRAY, WK_MAP, RS_WIRE_MESSAGES_MAX);
    case 21: return wire_rd_doc(r, &g->tools, WK_ARRAY, WK_MAP, RS_WIRE_TOOLS_MAX);
    case 22: return wire_rd_bool(r, &g->add_generation_prompt);
    case 23: return wire_rd_doc(r, &g->template_kwargs, WK_MAP, WK_END, RS_WIRE_KWARGS_MAX);
    case 24: return wire_rd_constraint(r, &g->cx);
    case 25: return wire_rd_logit_bias(r, &g->cx);
    case 26: return wire_rd_allowed_ids(r, &g->cx);
    case 27: return wire_rd_u32(r, &g->cx.min_tokens, UINT32_MAX);
    }
    return wire_fail(r, RS_WIRE_INTERNAL, "no decoder for field %u", idx);
}

static rs_err small_field(struct wire_rd *r, unsigned idx, void *ctx)
{
    struct rs_wire_client_msg *m = ctx;
    switch (idx) {
    case 2: return wire_rd_id(r, m->id, false);
    case 3: return wire_rd_u64(r, &m->u.resume.from_seq, UINT64_MAX);
    default: return wire_rd_skip(r);
    }
}

/* The secret: printable ASCII like an id, so it can live in a config file or an env var. */
static rs_err hello_field(struct wire_rd *r, unsigned idx, void *ctx)
{
    struct rs_wire_client_msg *m = ctx;
    if (idx != 2)
        return wire_rd_skip(r);
    rs_err e = wire_rd_str(r, &m->u.hello.secret, RS_WIRE_SECRET_MAX);
    if (e == RS_OK && !rs_wire_secret_valid(m->u.hello.secret.ptr, m->u.hello.secret.len))
        return wire_fail(r, RS_WIRE_INVALID_PARAM, "must be %d..%d printable ASCII characters "
                         "(0x21..0x7e)", RS_WIRE_SECRET_MIN, RS_WIRE_SECRET_MAX);
    return e;
}

bool rs_wire_secret_valid(const char *s, size_t len)
{
    if (len < RS_WIRE_SECRET_MIN || len > RS_WIRE_SECRET_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
            return false;
    return true;
}

/* Fields of cancel/resume/hello/release: which of small_fields each may and must carry. */
static uint64_t small_allowed(enum rs_wire_type t)
{
    return t == RS_WIRE_T_RESUME                             ? SMALL_HEAD | SMALL_ID | SMALL_FROM
           : t == RS_WIRE_T_CANCEL || t == RS_WIRE_T_RELEASE ? SMALL_HEAD | SMALL_ID
                                                             : SMALL_HEAD;
}

rs_err rs_wire_client_decode(const void *buf, size_t len, struct rs_wire_client_msg *out,
                             struct rs_wire_error *err)
{
    struct wire_hdr h;
    struct wire_rd r;
    uint32_t n;
    uint64_t seen;
    memset(out, 0, sizeof(*out));
    rs_err e = wire_rd_message(buf, len, RS_WIRE_CLIENT_MSG_MAX, &h, &r, &n, err);
    memcpy(out->id, h.id, sizeof(out->id));
    if (e != RS_OK)
        return e;
    out->type = h.type;
    if (h.type == RS_WIRE_T_GENERATE) {
        rs_wire_generate_init(&out->u.gen);
        e = wire_rd_fields(&r, n, gen_fields, N_GEN_FIELDS, 0x7, gen_field, out, &seen);
        out->u.gen.has = (uint32_t)(seen >> GEN_FIRST_OPT);
    } else if (h.type == RS_WIRE_T_HELLO) {
        e = wire_rd_fields(&r, n, hello_fields, 3, SMALL_HEAD, hello_field, out, &seen);
    } else if (h.type == RS_WIRE_T_CANCEL || h.type == RS_WIRE_T_RESUME ||
               h.type == RS_WIRE_T_RELEASE) {
        uint64_t allowed = small_allowed(h.type);
        unsigned n_tab = 64 - (unsigned)__builtin_clzll(allowed);
        e = wire_rd_fields(&r, n, small_fields, n_tab, allowed, small_field, out, &seen);
    } else {
        r.field = "type";
        e = wire_fail(&r, RS_WIRE_BAD_REQUEST, "'%s' is not a message a client sends",
                      rs_wire_type_name(h.type));
    }
    if (e == RS_OK)
        e = wire_rd_done(&r);
    if (e != RS_OK)
        memcpy(out->id, h.id, sizeof(out->id)); /* only the id the header pass vetted */
    return e;
}

static void wr_stop(struct wire_wr *w, const struct rs_wire_generate *g)
{
    wire_wr_array(w, g->n_stop);
    for (uint32_t i = 0; i < g->n_stop; i++)
        wire_wr_str(w, g->stop[i].ptr, g->stop[i].len);
}

/* Writes optional field k (presence bit 1 << k) of g. */
static void wr_gen_field(struct wire_wr *w, const struct rs_wire_generate *g, unsigned k)
{
    struct rs_wire_ids stop_ids = {.n = g->n_stop_ids, .vals = g->stop_ids};
    wire_wr_key(w, gen_fields[GEN_FIRST_OPT + k].key);
    switch (k + GEN_FIRST_OPT) {
    case 3: wire_wr_str(w, g->prompt.ptr, g->prompt.len); break;
    case 4: wire_wr_ids(w, &g->prompt_ids); break;
    case 5: wire_wr_u64(w, g->max_tokens); break;
    case 6: wire_wr_f32(w, g->temperature); break;
    case 7: wire_wr_f32(w, g->top_p); break;
    case 8: wire_wr_i64(w, g->top_k); break;
    case 9: wire_wr_f32(w, g->min_p); break;
    case 10: wire_wr_f32(w, g->repetition_penalty); break;
    case 11: wire_wr_f32(w, g->presence_penalty); break;
    case 12: wire_wr_f32(w, g->frequency_penalty); break;
    case 13: wire_wr_u64(w, g->seed); break;
    case 14: wr_stop(w, g); break;
    case 15: wire_wr_ids(w, &stop_ids); break;
    case 16: wire_wr_bool(w, g->ignore_eos); break;
    case 17: wire_wr_u64(w, g->logprobs); break;
    case 18: wire_wr_bool(w, g->stream); break;
    case 19: wire_wr_i64(w, g->priority); break;
    case 20: wire_wr_raw(w, g->messages.packed, g->messages.len); break;
    case 21: wire_wr_raw(w, g->tools.packed, g->tools.len); break;
    case 22: wire_wr_bool(w, g->add_generation_prompt); break;
    case 23: wire_wr_raw(w, g->template_kwargs.packed, g->template_kwargs.len); break;
    case 24: wire_wr_constraint(w, &g->cx); break;
    case 25: wire_wr_logit_bias(w, &g->cx); break;
    case 26: wire_wr_ids(w, &g->cx.allowed); break;
    case 27: wire_wr_u64(w, g->cx.min_tokens); break;
    }
}

/* What the decoder enforces on a generate, checked before encoding. */
static rs_err check_gen(const struct rs_wire_generate *g)
{
    struct rs_wire_ids stop_ids = {.n = g->n_stop_ids, .vals = g->stop_ids};
    if ((g->has >> (N_GEN_FIELDS - GEN_FIRST_OPT)) != 0) {
        rs_log_error("wire: cannot encode generate: unknown presence bits 0x%x", g->has);
        return RS_EINVAL;
    }
    rs_err e = RS_OK;
    if (g->has & RS_WIRE_GEN_PROMPT)
        e = wire_check_text("prompt", &g->prompt, RS_WIRE_PROMPT_MAX);
    if (e == RS_OK && (g->has & RS_WIRE_GEN_PROMPT_IDS))
        e = wire_check_ids("prompt_ids", &g->prompt_ids, RS_WIRE_PROMPT_IDS_MAX);
    if (e == RS_OK && (g->has & RS_WIRE_GEN_MESSAGES))
        e = wire_check_doc("messages", &g->messages, WK_ARRAY, WK_MAP, RS_WIRE_MESSAGES_MAX);
    if (e == RS_OK && (g->has & RS_WIRE_GEN_TOOLS))
        e = wire_check_doc("tools", &g->tools, WK_ARRAY, WK_MAP, RS_WIRE_TOOLS_MAX);
    if (e == RS_OK && (g->has & RS_WIRE_GEN_CHAT_TEMPLATE_KWARGS))
        e = wire_check_doc("chat_template_kwargs", &g->template_kwargs, WK_MAP, WK_END,
                           RS_WIRE_KWARGS_MAX);
    if (e == RS_OK && (g->has & RS_WIRE_GEN_STOP_TOKEN_IDS))
        e = wire_check_ids("stop_token_ids", &stop_ids, RS_WIRE_STOP_IDS_MAX);
    if (e == RS_OK && (g->has & RS_WIRE_GEN_STOP)) {
        if (g->n_stop > RS_WIRE_STOP_MAX) {
            rs_log_error("wire: cannot encode stop: %u strings, at most %d", g->n_stop,
                         RS_WIRE_STOP_MAX);
            return RS_EINVAL;
        }
        for (uint32_t i = 0; e == RS_OK && i < g->n_stop; i++)
            e = wire_check_text("stop", &g->stop[i], RS_WIRE_STOP_LEN_MAX);
    }
    if (e == RS_OK)
        e = wire_check_constraint(&g->cx, (g->has & RS_WIRE_GEN_CONSTRAINT) != 0,
                                  (g->has & RS_WIRE_GEN_LOGIT_BIAS) != 0,
                                  (g->has & RS_WIRE_GEN_ALLOWED_TOKEN_IDS) != 0);
    return e;
}

static rs_err encode_generate(const struct rs_wire_client_msg *m, struct wire_wr *w)
{
    const struct rs_wire_generate *g = &m->u.gen;
    rs_err e = check_gen(g);
    if (e != RS_OK)
        return e;
    wire_wr_map(w, 3 + (uint32_t)__builtin_popcount(g->has));
    wire_wr_head(w, RS_WIRE_T_GENERATE);
    wire_wr_key(w, "id");
    wire_wr_str(w, m->id, strlen(m->id));
    for (unsigned k = 0; k < N_GEN_FIELDS - GEN_FIRST_OPT; k++)
        if (g->has & (1u << k))
            wr_gen_field(w, g, k);
    return RS_OK;
}

static rs_err encode_hello(const struct rs_wire_client_msg *m, struct wire_wr *w)
{
    const struct rs_wire_str *sec = &m->u.hello.secret;
    if (sec->len != 0 && !rs_wire_secret_valid(sec->ptr, sec->len)) {
        rs_log_error("wire: cannot encode hello: the secret is not %d..%d printable ASCII bytes",
                     RS_WIRE_SECRET_MIN, RS_WIRE_SECRET_MAX);
        return RS_EINVAL;
    }
    wire_wr_map(w, sec->len != 0 ? 3 : 2);
    wire_wr_head(w, RS_WIRE_T_HELLO);
    if (sec->len != 0) {
        wire_wr_key(w, "secret");
        wire_wr_str(w, sec->ptr, sec->len);
    }
    return wire_wr_end(w);
}

rs_err rs_wire_client_encode(const struct rs_wire_client_msg *m, struct rs_wire_buf *out)
{
    struct wire_wr w;
    size_t id_len = strnlen(m->id, sizeof(m->id));
    bool needs_id = m->type != RS_WIRE_T_HELLO;
    if (needs_id ? !rs_wire_id_valid(m->id, id_len) : id_len != 0) {
        rs_log_error("wire: cannot encode %s: bad request id", rs_wire_type_name(m->type));
        return RS_EINVAL;
    }
    wire_wr_begin(&w, out);
    switch (m->type) {
    case RS_WIRE_T_GENERATE: {
        rs_err e = encode_generate(m, &w);
        if (e != RS_OK)
            return e;
        break;
    }
    case RS_WIRE_T_CANCEL:
    case RS_WIRE_T_RESUME:
    case RS_WIRE_T_HELLO:
    case RS_WIRE_T_RELEASE:
        if (m->type == RS_WIRE_T_HELLO)
            return encode_hello(m, &w);
        wire_wr_map(&w, m->type == RS_WIRE_T_RESUME ? 4 : 3);
        wire_wr_head(&w, m->type);
        if (needs_id) {
            wire_wr_key(&w, "id");
            wire_wr_str(&w, m->id, id_len);
        }
        if (m->type == RS_WIRE_T_RESUME) {
            wire_wr_key(&w, "from_seq");
            wire_wr_u64(&w, m->u.resume.from_seq);
        }
        break;
    default:
        rs_log_error("wire: %s is not a client message", rs_wire_type_name(m->type));
        return RS_EINVAL;
    }
    return wire_wr_end(&w);
}

/* Index of the first id >= limit in v (its value in *val), or -1. */
static int64_t first_id_at_least(const struct rs_wire_ids *v, uint32_t limit, uint32_t *val)
{
    struct rs_wire_error ignored;
    struct wire_rd r;
    if (v->vals == NULL)
        wire_rd_init(&r, v->packed, v->packed_len, &ignored);
    for (uint32_t i = 0; i < v->n; i++) {
        uint32_t id = 0;
        if (v->vals != NULL)
            id = v->vals[i];
        else if (wire_rd_u32(&r, &id, RS_WIRE_TOKEN_MAX) != RS_OK)
            return i; /* not a validated view: refuse it */
        if (id >= limit) {
            *val = id;
            return i;
        }
    }
    return -1;
}

#define INVALID(err, ...) (wire_set_error(err, RS_WIRE_INVALID_PARAM, __VA_ARGS__), RS_EINVAL)

/* tools, add_generation_prompt and chat_template_kwargs only mean something with messages. */
static rs_err validate_chat(const struct rs_wire_generate *g, struct rs_wire_error *err)
{
    static const struct {
        uint32_t bit;
        const char *name;
    } only_chat[] = {{RS_WIRE_GEN_TOOLS, "tools"},
                     {RS_WIRE_GEN_ADD_GENERATION_PROMPT, "add_generation_prompt"},
                     {RS_WIRE_GEN_CHAT_TEMPLATE_KWARGS, "chat_template_kwargs"}};
    if ((g->has & RS_WIRE_GEN_MESSAGES) && g->messages.n == 0)
        return INVALID(err, "field 'messages': must not be empty");
    for (size_t i = 0; !(g->has & RS_WIRE_GEN_MESSAGES) && i < 3; i++)
        if (g->has & only_chat[i].bit)
            return INVALID(err, "field '%s': only with 'messages'", only_chat[i].name);
    return RS_OK;
}

static rs_err validate_prompt(const struct rs_wire_generate *g, const struct rs_wire_limits *lim,
                              struct rs_wire_error *err)
{
    bool text = g->has & RS_WIRE_GEN_PROMPT, ids = g->has & RS_WIRE_GEN_PROMPT_IDS;
    bool chat = g->has & RS_WIRE_GEN_MESSAGES;
    uint32_t bad;
    int64_t at;
    if (!text && !ids && !chat) {
        wire_set_error(err, RS_WIRE_MISSING_FIELD,
                       "missing field 'prompt' (or 'prompt_ids', or 'messages')");
        return RS_EINVAL;
    }
    if ((int)text + (int)ids + (int)chat > 1)
        return INVALID(err, "give one of 'prompt', 'prompt_ids' and 'messages'");
    if (ids && g->prompt_ids.n == 0)
        return INVALID(err, "field 'prompt_ids': must not be empty");
    if (ids && lim->n_vocab && (at = first_id_at_least(&g->prompt_ids, lim->n_vocab, &bad)) >= 0)
        return INVALID(err, "field 'prompt_ids' item %" PRId64 ": token %u not below the "
                       "vocabulary size %u", at, bad, lim->n_vocab);
    if (ids && lim->n_ctx && g->prompt_ids.n >= lim->n_ctx)
        return rs_wire_prompt_check(g->prompt_ids.n, lim->n_ctx, err);
    return validate_chat(g, err);
}

void rs_wire_generate_sampling(const struct rs_wire_generate *g, struct rs_sampling_params *out)
{
    *out = (struct rs_sampling_params){
        .temperature = g->temperature, .top_k = g->top_k, .top_p = g->top_p, .min_p = g->min_p,
        .repetition_penalty = g->repetition_penalty, .presence_penalty = g->presence_penalty,
        .frequency_penalty = g->frequency_penalty, .seed = g->seed,
        .n_logprobs = g->logprobs > INT32_MAX ? INT32_MAX : (int32_t)g->logprobs};
}

/* max_tokens here; the sampling ranges are common/sampling.c's, the one place they live. */
static rs_err validate_sampling(const struct rs_wire_generate *g, struct rs_wire_error *err)
{
    if ((g->has & RS_WIRE_GEN_MAX_TOKENS) && g->max_tokens == 0)
        return INVALID(err, "field 'max_tokens': must be >= 1 (omit it to fill the context)");
    struct rs_sampling_params sp;
    char msg[sizeof(err->msg)];
    rs_wire_generate_sampling(g, &sp);
    if (rs_sampling_params_validate(&sp, msg, sizeof(msg)) != RS_OK)
        return INVALID(err, "%s", msg);
    return RS_OK;
}

rs_err rs_wire_generate_validate(const struct rs_wire_generate *g,
                                 const struct rs_wire_limits *lim, struct rs_wire_error *err)
{
    err->code = RS_WIRE_OK;
    err->msg[0] = '\0';
    rs_err e = validate_prompt(g, lim, err);
    if (e == RS_OK)
        e = validate_sampling(g, err);
    if (e != RS_OK)
        return e;
    for (uint32_t i = 0; i < g->n_stop; i++)
        if (g->stop[i].len == 0)
            return INVALID(err, "field 'stop' item %u: must not be empty", i);
    for (uint32_t i = 0; lim->n_vocab && i < g->n_stop_ids; i++)
        if (g->stop_ids[i] >= lim->n_vocab)
            return INVALID(err, "field 'stop_token_ids' item %u: token %u not below the "
                           "vocabulary size %u", i, g->stop_ids[i], lim->n_vocab);
    return rs_wire_constraint_validate(&g->cx, lim->n_vocab, err);
}

rs_err rs_wire_prompt_check(uint32_t n_prompt, uint32_t n_ctx, struct rs_wire_error *err)
{
    if (n_prompt < n_ctx)
        return RS_OK;
    wire_set_error(err, RS_WIRE_PROMPT_TOO_LONG, "prompt is %u tokens; the model's context is "
                   "%u tokens, which leaves no room to generate", n_prompt, n_ctx);
    return RS_EINVAL;
}

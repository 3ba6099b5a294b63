/* SPDX-License-Identifier: MIT */
/*
 * OpenAI response shapes (format.h) as jansson objects, and the SSE framing
 * of a stream: every event is one `data: {json}` line and a blank line, the
 * stream ends with `data: [DONE]`. Logprobs of -inf (a token the sampler
 * could not have picked) are written as -9999.0, which is what vLLM sends,
 * since JSON has no infinity. Leaves out tool calls in responses.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "gatewayd/format.h"
#include "gatewayd/gw.h"

#define LP_FLOOR (-9999.0)

int gw_buf_put(struct gw_buf *b, const void *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (q == NULL)
            return -1;
        b->p = q;
        b->cap = cap;
    }
    if (n > 0)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

void gw_buf_free(struct gw_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

json_t *gw_fmt_error(const struct gw_err *e)
{
    json_t *o = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", e->message, "type",
                     e->type != NULL ? e->type : "invalid_request_error", "param",
                     e->param[0] != '\0' ? json_string(e->param) : json_null(), "code",
                     e->code != NULL ? json_string(e->code) : json_null());
    /* never NULL: gw_err_set keeps the strings valid UTF-8, but a body must go out anyway */
    return o != NULL ? o
                     : json_pack("{s:{s:s, s:s, s:n, s:n}}", "error", "message",
                                 "error message not representable", "type", "server_error",
                                 "param", "code");
}

json_t *gw_fmt_usage(uint64_t prompt, uint64_t completion, uint64_t cached)
{
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)prompt,
                     "completion_tokens", (json_int_t)completion, "total_tokens",
                     (json_int_t)(prompt + completion), "prompt_tokens_details", "cached_tokens",
                     (json_int_t)cached);
}

const char *gw_fmt_finish(enum rs_wire_finish f)
{
    return f == RS_WIRE_FINISH_LENGTH ? "length" : f == RS_WIRE_FINISH_ABORT ? "abort" : "stop";
}

uint64_t gw_fmt_chars(const char *s, size_t n)
{
    uint64_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((uint8_t)s[i] & 0xc0) != 0x80;
    return k;
}

/* The piece's bytes with ill-formed UTF-8 replaced by U+FFFD, as a JSON string. */
static json_t *piece_string(const char *p, size_t n)
{
    char out[3 * 64];
    char *heap = NULL, *o = n * 3 <= sizeof(out) ? out : (heap = malloc(n * 3));
    if (o == NULL)
        return json_string("");
    json_t *s = json_stringn(o, rs_utf8_sanitize(p, n, o));
    free(heap);
    return s != NULL ? s : json_string("");
}

json_t *gw_fmt_token(const rs_vocab *v, uint32_t id)
{
    size_t n = 0;
    const char *p = v != NULL ? rs_vocab_token_piece(v, (int32_t)id, 1, &n) : NULL;
    return p != NULL ? piece_string(p, n) : json_string("");
}

static json_t *token_bytes(const rs_vocab *v, uint32_t id)
{
    size_t n = 0;
    const char *p = v != NULL ? rs_vocab_token_piece(v, (int32_t)id, 1, &n) : NULL;
    json_t *a = json_array();
    for (size_t i = 0; p != NULL && i < n; i++)
        json_array_append_new(a, json_integer((uint8_t)p[i]));
    return a;
}

static json_t *lp_value(float lp)
{
    return json_real(isfinite(lp) && lp > LP_FLOOR ? (double)lp : LP_FLOOR);
}

json_t *gw_fmt_lp_new(enum gw_api api)
{
    if (api == GW_API_CHAT)
        return json_pack("{s:[], s:n}", "content", "refusal");
    return json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs",
                     "text_offset");
}

/* One chat entry: {token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}. */
static json_t *chat_entry(const rs_vocab *v, const struct rs_wire_logprob *lp, uint32_t top)
{
    json_t *alts = json_array();
    for (uint32_t j = 0; j < top && j < lp->n_top; j++)
        json_array_append_new(alts,
                              json_pack("{s:o, s:o, s:o}", "token", gw_fmt_token(v, lp->top_ids[j]),
                                        "logprob", lp_value(lp->top_logprobs[j]), "bytes",
                                        token_bytes(v, lp->top_ids[j])));
    return json_pack("{s:o, s:o, s:o, s:o}", "token", gw_fmt_token(v, lp->token), "logprob",
                     lp_value(lp->logprob), "bytes", token_bytes(v, lp->token), "top_logprobs",
                     alts);
}

/* Completions' top_logprobs entry: {text: logprob} of the top alternatives and the token. */
static json_t *completion_top(const rs_vocab *v, const struct rs_wire_logprob *lp, uint32_t top)
{
    json_t *d = json_object();
    for (uint32_t j = 0; j < top && j < lp->n_top; j++) {
        json_t *t = gw_fmt_token(v, lp->top_ids[j]);
        if (json_object_get(d, json_string_value(t)) == NULL)
            json_object_set_new(d, json_string_value(t), lp_value(lp->top_logprobs[j]));
        json_decref(t);
    }
    json_t *t = gw_fmt_token(v, lp->token); /* the sampled token is always listed */
    if (json_object_get(d, json_string_value(t)) == NULL)
        json_object_set_new(d, json_string_value(t), lp_value(lp->logprob));
    json_decref(t);
    return d;
}

void gw_fmt_lp_add(enum gw_api api, json_t *obj, const rs_vocab *v,
                   const struct rs_wire_logprob *lp, uint32_t n, uint32_t top, uint64_t *chars)
{
    if (api == GW_API_CHAT) {
        json_t *content = json_object_get(obj, "content");
        for (uint32_t i = 0; i < n; i++)
            json_array_append_new(content, chat_entry(v, &lp[i], top));
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        json_t *t = gw_fmt_token(v, lp[i].token);
        json_array_append_new(json_object_get(obj, "text_offset"),
                              json_integer((json_int_t)*chars));
        *chars += gw_fmt_chars(json_string_value(t), json_string_length(t));
        json_array_append_new(json_object_get(obj, "tokens"), t);
        json_array_append_new(json_object_get(obj, "token_logprobs"), lp_value(lp[i].logprob));
        json_array_append_new(json_object_get(obj, "top_logprobs"), completion_top(v, &lp[i], top));
    }
}

json_t *gw_fmt_object(const struct gw_fmt_head *h, bool chunk)
{
    const char *object = h->api == GW_API_CHAT
                             ? (chunk ? "chat.completion.chunk" : "chat.completion")
                             : "text_completion";
    json_t *o =
        json_pack("{s:s, s:s, s:I, s:s, s:n, s:[]}", "id", h->id, "object", object, "created",
                  (json_int_t)h->created, "model", h->model, "system_fingerprint", "choices");
    if (o != NULL && chunk && h->usage_null)
        json_object_set_new(o, "usage", json_null());
    return o;
}

json_t *gw_fmt_choice(enum gw_api api, bool chunk, uint32_t index, const char *text, size_t len,
                      bool role, json_t *logprobs, const char *finish)
{
    json_t *c = json_pack("{s:i}", "index", (int)index);
    json_t *fin = finish != NULL ? json_string(finish) : json_null();
    json_t *lp = logprobs != NULL ? logprobs : json_null();
    if (api == GW_API_COMPLETIONS) {
        json_object_set_new(c, "text", json_stringn(text != NULL ? text : "", len));
    } else if (!chunk) {
        json_object_set_new(c, "message",
                            json_pack("{s:s, s:s%, s:n}", "role", "assistant", "content",
                                      text != NULL ? text : "", len, "refusal"));
    } else {
        json_t *d = json_object();
        if (role)
            json_object_set_new(d, "role", json_string("assistant"));
        if (role || len > 0 || (finish == NULL && text != NULL))
            json_object_set_new(d, "content", json_stringn(text != NULL ? text : "", len));
        json_object_set_new(c, "delta", d);
    }
    json_object_set_new(c, "logprobs", lp);
    json_object_set_new(c, "finish_reason", fin);
    return c;
}

int gw_fmt_sse(struct gw_buf *b, json_t *obj)
{
    char *s = obj != NULL ? json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(obj);
    if (s == NULL)
        return -1;
    int rc = gw_buf_put(b, "data: ", 6) || gw_buf_put(b, s, strlen(s)) || gw_buf_put(b, "\n\n", 2);
    free(s);
    return rc ? -1 : 0;
}

int gw_fmt_sse_done(struct gw_buf *b)
{
    return gw_buf_put(b, "data: [DONE]\n\n", 14);
}

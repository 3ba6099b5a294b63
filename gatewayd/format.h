/* SPDX-License-Identifier: MIT */
/*
 * OpenAI response shapes, built as jansson objects: completion and chat
 * completion objects, their streaming chunks (chat: the role delta first,
 * then content deltas, then an empty delta with the finish reason), usage,
 * both logprobs formats (completions: tokens / token_logprobs /
 * top_logprobs / text_offset; chat: content[{token, logprob, bytes,
 * top_logprobs}]), the error object, and SSE framing. Pure functions of
 * their arguments and the vocab (token texts), so tests check them without
 * a server. Leaves out tool calls in responses (nothing generates them yet).
 */
#ifndef GW_FORMAT_H
#define GW_FORMAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/vocab.h"
#include "gatewayd/oai.h"
#include "ipc/wire_server.h"

struct gw_buf;

/* What every object of one response shares. */
struct gw_fmt_head {
    enum gw_api api;
    const char *id; /* "cmpl-..." / "chatcmpl-..." */
    const char *model;
    uint64_t created; /* unix seconds */
    bool usage_null;  /* stream_options.include_usage: chunks carry "usage": null */
};

/* {"error": {"message", "type", "param", "code"}} */
json_t *gw_fmt_error(const struct gw_err *e);

/* {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details"} */
json_t *gw_fmt_usage(uint64_t prompt, uint64_t completion, uint64_t cached);

/* "stop", "length", "abort" (the OpenAI finish_reason of a pipeline finish). */
const char *gw_fmt_finish(enum rs_wire_finish f);

/* The token's text as a JSON string (its bytes; invalid UTF-8 as U+FFFD). v may be NULL. */
json_t *gw_fmt_token(const rs_vocab *v, uint32_t id);

/*
 * Logprobs of n tokens. Completions: appended to obj (made by
 * gw_fmt_lp_new), text_offset from *chars (code points of the text before
 * these tokens; advanced). Chat: entries appended to obj's "content". top:
 * alternatives to show per token (0..20).
 */
json_t *gw_fmt_lp_new(enum gw_api api);
void gw_fmt_lp_add(enum gw_api api, json_t *obj, const rs_vocab *v,
                   const struct rs_wire_logprob *lp, uint32_t n, uint32_t top, uint64_t *chars);

/* An empty response object: id, object, created, model, "choices": [] (+ usage null). */
json_t *gw_fmt_object(const struct gw_fmt_head *h, bool chunk);

/*
 * One choice. Non-stream: text is the whole output, finish set. Stream:
 * text the delta; role = true makes the chat role delta; finish NULL while
 * running. logprobs (taken) may be NULL.
 */
json_t *gw_fmt_choice(enum gw_api api, bool chunk, uint32_t index, const char *text, size_t len,
                      bool role, json_t *logprobs, const char *finish);

/* Appends "data: <compact json>\n\n" (obj taken). 0 or -1 (out of memory). */
int gw_fmt_sse(struct gw_buf *b, json_t *obj);
/* Appends "data: [DONE]\n\n". */
int gw_fmt_sse_done(struct gw_buf *b);

/* Code points in s[0..n) (UTF-8 lead bytes). */
uint64_t gw_fmt_chars(const char *s, size_t n);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * Pipeline events into the OpenAI answer. A stream starts once every choice
 * is acknowledged (so a refusal is still an HTTP error status, not an event);
 * each delta becomes one chunk, chat choices open with the role delta, each
 * choice ends with a chunk carrying its finish_reason, then the usage chunk
 * (stream_options.include_usage) and [DONE]. A failure after the stream
 * started is one `data: {"error": ...}` event before [DONE]. Without
 * streaming, text and logprobs are collected per choice into one response.
 * Prompt tokens are counted once per prompt, however many choices share it.
 */
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "gatewayd/call_impl.h"

static void head_of(const struct gw_call *c, struct gw_fmt_head *h)
{
    h->api = c->p.api;
    h->id = c->resp_id;
    h->model = c->g->model_name;
    h->created = c->created;
    h->usage_null = c->p.include_usage;
}

static void wake(struct gw_call *c)
{
    if (c->req != NULL)
        gw_req_wake(c->req);
}

static void cancel_others(struct gw_call *c)
{
    for (uint32_t i = 0; i < c->n; i++)
        if (c->ch[i].live && !c->ch[i].done)
            rs_client_cancel(c->g->client, c->ch[i].id);
}

void call_fail(struct gw_call *c, int status, const char *msg)
{
    if (c->failed)
        return;
    c->failed = true;
    gw_err_set(&c->err, status, "", "%s", msg);
    if (c->stream_started && !c->stream_ended) {
        gw_fmt_sse(&c->sse, gw_fmt_error(&c->err));
        gw_fmt_sse_done(&c->sse);
        c->stream_ended = true;
    }
    wake(c);
}

/* One chunk with one choice into the stream (choice taken). */
static void emit(struct gw_call *c, json_t *choice)
{
    struct gw_fmt_head h;
    head_of(c, &h);
    json_t *o = gw_fmt_object(&h, true);
    json_array_append_new(json_object_get(o, "choices"), choice);
    if (gw_fmt_sse(&c->sse, o) != 0 || c->sse.len - c->sse_off > c->g->o.stream_buffer_max) {
        cancel_others(c);
        call_fail(c, 500, "the client reads the stream too slowly (buffer limit reached)");
        return;
    }
    wake(c);
}

/* The tokens' logprobs as format.h's object, or NULL when not asked. */
static json_t *logprobs_of(struct gw_call *c, struct gw_choice *ch,
                           const struct rs_client_event *ev, json_t *into)
{
    if (!c->p.logprobs || ev->logprobs == NULL || ev->n_tokens == 0)
        return into;
    json_t *o = into != NULL ? into : gw_fmt_lp_new(c->p.api);
    gw_fmt_lp_add(c->p.api, o, c->g->vocab, ev->logprobs, ev->n_tokens, c->p.top_logprobs,
                  &ch->chars);
    return o;
}

static void on_output(struct gw_call *c, struct gw_choice *ch, const struct rs_client_event *ev)
{
    if (c->failed)
        return;
    if (!c->p.stream) {
        if (gw_buf_put(&ch->text, ev->text, ev->text_len) != 0) {
            cancel_others(c);
            call_fail(c, 500, "out of memory collecting the output");
            return;
        }
        ch->lp = logprobs_of(c, ch, ev, ch->lp);
        return;
    }
    /* One chunk per pipeline message with tokens, even when its text is held back (a
     * possible stop-string prefix, an incomplete character): clients see every step. */
    json_t *lp = logprobs_of(c, ch, ev, NULL);
    if (ev->text_len > 0 || ev->n_tokens > 0 || lp != NULL)
        emit(c, gw_fmt_choice(c->p.api, true, ch->index, ev->text, ev->text_len, false, lp, NULL));
}

/* What a choice opens with in a stream: chat's role delta, the echoed prompt. */
static void on_ack(struct gw_call *c, struct gw_choice *ch, const struct rs_client_event *ev)
{
    if (!ch->acked) {
        ch->acked = true;
        c->n_acked++;
    }
    ch->prompt_tokens = ev->prompt_tokens;
    const struct gw_prompt *pr =
        c->p.api == GW_API_COMPLETIONS ? &c->p.prompts[ch->prompt_i] : NULL;
    if (c->p.echo && pr != NULL && !pr->is_ids)
        ch->chars = gw_fmt_chars(pr->text, pr->text_len);
    if (c->p.stream && !ch->head_sent && !c->failed) {
        ch->head_sent = true;
        if (c->p.api == GW_API_CHAT)
            emit(c, gw_fmt_choice(GW_API_CHAT, true, ch->index, "", 0, true, NULL, NULL));
        else if (c->p.echo && pr != NULL && !pr->is_ids && pr->text_len > 0)
            emit(c, gw_fmt_choice(GW_API_COMPLETIONS, true, ch->index, pr->text, pr->text_len,
                                  false, NULL, NULL));
    }
    if (c->n_acked == c->n)
        wake(c); /* the stream can start */
}

/* HTTP status and message of a request that ended without the server's normal final. */
static int failure_of(const struct gw_call *c, const struct rs_client_event *ev, char *msg,
                      size_t cap, const char **code)
{
    enum rs_wire_code k = ev->error;
    *code = NULL;
    snprintf(msg, cap, "%s", ev->message[0] != '\0' ? ev->message : rs_wire_code_name(k));
    if (ev->status == RS_CLIENT_TIMEOUT)
        return 504;
    if (ev->status == RS_CLIENT_LOST)
        return 503; /* a whole-pipeline restart lost it: worth a retry */
    if (k == RS_WIRE_PROMPT_TOO_LONG)
        *code = "context_length_exceeded";
    if (k == RS_WIRE_OVERLOADED)
        return 429;
    if (k == RS_WIRE_DUPLICATE) {
        *code = "idempotency_key_reused";
        return 409;
    }
    (void)c;
    return k == RS_WIRE_INTERNAL || k == RS_WIRE_UNSUPPORTED_VERSION || k == RS_WIRE_OK ? 500 : 400;
}

/* The OpenAI field a pipeline message names ("field 'prompt_ids': ..."). */
static void param_of(const struct gw_call *c, const char *msg, char *out, size_t cap)
{
    const char *f = strstr(msg, "field '");
    out[0] = '\0';
    if (f == NULL)
        return;
    f += 7;
    size_t n = strcspn(f, "'");
    if (n == 10 && strncmp(f, "prompt_ids", 10) == 0)
        snprintf(out, cap, "%s", c->p.api == GW_API_CHAT ? "messages" : "prompt");
    else if (n == 8 && strncmp(f, "logprobs", 8) == 0 && c->p.api == GW_API_CHAT)
        snprintf(out, cap, "top_logprobs");
    else
        snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), f);
}

static void on_failed(struct gw_call *c, const struct rs_client_event *ev)
{
    char msg[RS_WIRE_MESSAGE_MAX + 1];
    const char *code;
    int status = failure_of(c, ev, msg, sizeof(msg), &code);
    if (ev->error == RS_WIRE_PROMPT_TOO_LONG && c->p.api == GW_API_CHAT)
        snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), " (the rendered conversation)");
    rs_log_info("call %s: request '%s' failed: %s (%s)", c->stem, ev->id,
                rs_client_status_name(ev->status), msg);
    cancel_others(c);
    call_fail(c, status, msg);
    c->err.code = code;
    if (!c->stream_started && status == 400)
        param_of(c, msg, c->err.param, sizeof(c->err.param));
    if (!c->stream_started && status == 400 && ev->error == RS_WIRE_PROMPT_TOO_LONG)
        snprintf(c->err.param, sizeof(c->err.param), "%s",
                 c->p.api == GW_API_CHAT ? "messages" : "prompt");
}

static void stream_tail(struct gw_call *c)
{
    if (c->n_done < c->n || c->failed || c->stream_ended)
        return;
    if (c->p.include_usage) {
        struct gw_fmt_head h;
        uint64_t pt = 0, ct = 0, cached = 0;
        for (uint32_t i = 0; i < c->n; i++) {
            ct += c->ch[i].usage.completion_tokens;
            if (i % c->p.n == 0) {
                pt += c->ch[i].usage.prompt_tokens;
                cached += c->ch[i].usage.cached_tokens;
            }
        }
        head_of(c, &h);
        h.usage_null = false;
        json_t *o = gw_fmt_object(&h, true);
        json_object_set_new(o, "usage", gw_fmt_usage(pt, ct, cached));
        gw_fmt_sse(&c->sse, o);
    }
    gw_fmt_sse_done(&c->sse);
    c->stream_ended = true;
    wake(c);
}

static void on_final(struct gw_call *c, struct gw_choice *ch, const struct rs_client_event *ev)
{
    ch->done = true;
    ch->live = false;
    c->n_done++;
    if (ev->status != RS_CLIENT_OK || ev->finish_reason == RS_WIRE_FINISH_ERROR) {
        on_failed(c, ev);
    } else {
        on_output(c, ch, ev);
        ch->finish = ev->finish_reason;
        ch->usage = ev->usage;
        if (c->p.stream && !c->failed)
            emit(c, gw_fmt_choice(c->p.api, true, ch->index, NULL, 0, false, NULL,
                                  gw_fmt_finish(ev->finish_reason)));
    }
    if (c->p.stream)
        stream_tail(c);
    else if (c->n_done == c->n)
        wake(c);
    call_unref(c);
}

void call_on_event(const struct rs_client_event *ev)
{
    struct gw_choice *ch = ev->user;
    struct gw_call *c = ch->call;
    if (ev->kind == RS_CLIENT_EV_ACK)
        on_ack(c, ch, ev);
    else if (ev->kind == RS_CLIENT_EV_DELTA)
        on_output(c, ch, ev);
    else if (ev->kind == RS_CLIENT_EV_FINAL)
        on_final(c, ch, ev);
}

/* --- what the HTTP side reads ---------------------------------------------------------------- */

bool gw_call_streaming(const struct gw_call *c)
{
    return c->p.stream;
}

bool gw_call_has_answer(const struct gw_call *c)
{
    return c->failed || (c->p.stream ? c->n_acked == c->n : c->n_done == c->n);
}

static json_t *full_response(struct gw_call *c)
{
    struct gw_fmt_head h;
    uint64_t pt = 0, ct = 0, cached = 0;
    head_of(c, &h);
    json_t *o = gw_fmt_object(&h, false), *choices = json_object_get(o, "choices");
    for (uint32_t i = 0; i < c->n; i++) {
        struct gw_choice *ch = &c->ch[i];
        const struct gw_prompt *pr =
            c->p.api == GW_API_COMPLETIONS ? &c->p.prompts[ch->prompt_i] : NULL;
        struct gw_buf text = {0};
        if (c->p.echo && pr != NULL && !pr->is_ids)
            gw_buf_put(&text, pr->text, pr->text_len);
        gw_buf_put(&text, ch->text.p, ch->text.len);
        json_t *lp = ch->lp != NULL ? ch->lp : (c->p.logprobs ? gw_fmt_lp_new(c->p.api) : NULL);
        ch->lp = NULL;
        json_array_append_new(choices, gw_fmt_choice(c->p.api, false, ch->index, text.p, text.len,
                                                     false, lp, gw_fmt_finish(ch->finish)));
        gw_buf_free(&text);
        ct += ch->usage.completion_tokens;
        if (i % c->p.n == 0) {
            pt += ch->usage.prompt_tokens;
            cached += ch->usage.cached_tokens;
        }
    }
    json_object_set_new(o, "usage", gw_fmt_usage(pt, ct, cached));
    return o;
}

int gw_call_answer(struct gw_call *c, int *status, json_t **body, struct gw_err *e)
{
    *body = NULL;
    if (c->failed && !c->stream_started) {
        *e = c->err;
        *status = c->err.status;
        return -1;
    }
    *status = 200;
    if (c->p.stream) {
        c->stream_started = true;
        return 0;
    }
    *body = full_response(c);
    return 0;
}

ssize_t gw_call_read(struct gw_call *c, char *buf, size_t max)
{
    size_t avail = c->sse.len - c->sse_off;
    if (avail == 0)
        return c->stream_ended ? -1 : 0;
    size_t n = avail < max ? avail : max;
    memcpy(buf, c->sse.p + c->sse_off, n);
    c->sse_off += n;
    if (c->sse_off == c->sse.len)
        c->sse.len = c->sse_off = 0; /* drained: the buffer starts over */
    return (ssize_t)n;
}

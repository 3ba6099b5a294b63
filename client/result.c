/* SPDX-License-Identifier: MIT */
/*
 * Collecting a request's events into one result (text, token ids, the
 * arrival time of each token for latency figures, the final's summary), and
 * the blocking rs_client_generate_sync built on it for callers that want one
 * answer and no event loop. Arrays grow geometrically; a result is freed with
 * rs_client_result_fini.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_impl.h"
#include "common/clock.h"

/* Grows *p (elements of size sz, capacity *cap) to hold need elements. */
static int grow(void **p, size_t sz, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * sz);
    if (q == NULL)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

static rs_err add_output(struct rs_client_result *r, const struct rs_client_event *ev)
{
    size_t need = (size_t)r->n_tokens + ev->n_tokens, kcap = r->tokens_cap;
    if (grow((void **)&r->text, 1, &r->text_cap, r->text_len + ev->text_len + 1) != 0 ||
        grow((void **)&r->tokens, sizeof(uint32_t), &kcap, need) != 0 ||
        grow((void **)&r->token_ns, sizeof(uint64_t), &r->tokens_cap, need) != 0)
        return RS_ENOMEM;
    memcpy(r->text + r->text_len, ev->text, ev->text_len);
    r->text_len += ev->text_len;
    r->text[r->text_len] = '\0';
    for (uint32_t i = 0; i < ev->n_tokens; i++) {
        r->tokens[r->n_tokens + i] = ev->tokens[i];
        r->token_ns[r->n_tokens + i] = ev->recv_ns;
    }
    r->n_tokens += ev->n_tokens;
    return RS_OK;
}

rs_err rs_client_result_add(struct rs_client_result *r, const struct rs_client_event *ev)
{
    if (r->id[0] == '\0')
        snprintf(r->id, sizeof(r->id), "%s", ev->id);
    r->submit_ns = ev->submit_ns;
    if (ev->acked) {
        r->handle = ev->handle;
        r->seed = ev->seed;
        r->prompt_tokens = ev->prompt_tokens;
    }
    rs_err rc = add_output(r, ev);
    if (ev->kind == RS_CLIENT_EV_FINAL) {
        r->end_ns = ev->recv_ns;
        r->status = ev->status;
        r->finish_reason = ev->finish_reason;
        r->usage = ev->usage;
        r->timings = ev->timings;
        r->error = ev->error;
        snprintf(r->message, sizeof(r->message), "%s", ev->message);
    }
    return rc;
}

void rs_client_result_fini(struct rs_client_result *r)
{
    free(r->text);
    free(r->tokens);
    free(r->token_ns);
    memset(r, 0, sizeof(*r));
}

struct sync_ctx {
    struct rs_client_result *out;
    rs_client_cb cb;
    void *user;
    bool done;
    rs_err rc;
};

static void sync_cb(const struct rs_client_event *ev)
{
    struct sync_ctx *s = ev->user;
    if (rs_client_result_add(s->out, ev) != RS_OK)
        s->rc = RS_ENOMEM;
    if (ev->kind == RS_CLIENT_EV_FINAL)
        s->done = true;
    if (s->cb != NULL) {
        struct rs_client_event mine = *ev;
        mine.user = s->user;
        s->cb(&mine);
    }
}

rs_err rs_client_generate_sync(rs_client *c, const struct rs_wire_generate *g,
                               uint32_t timeout_ms, rs_client_cb cb, void *user,
                               struct rs_client_result *out)
{
    struct sync_ctx s = {.out = out, .cb = cb, .user = user, .rc = RS_OK};
    struct rs_client_req_opts o = {.timeout_ms = timeout_ms};
    memset(out, 0, sizeof(*out));
    rs_err rc = rs_client_submit(c, g, &o, sync_cb, &s, out->id);
    if (rc != RS_OK)
        return rc;
    /* Ends: every request gets a final, at the latest when its time limit passes. */
    while (!s.done) {
        int n = rs_client_poll(c, 1000);
        if (n < 0)
            return (rs_err)n;
    }
    return s.rc;
}

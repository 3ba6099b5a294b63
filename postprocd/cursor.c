/* SPDX-License-Identifier: MIT */
/*
 * The per-request output cursor (pipeline.h struct rs_pipe_cursor): the
 * incremental detokenizer followed by the stop-string matcher, both plain
 * state kept in the request record, so a restarted postprocd continues where
 * the last published cursor stopped. Publishing is double-buffered: the spare
 * copy is written, then cursor_idx flips with one release store, so a crash
 * leaves either the old or the new cursor, never a mix. Leaves out sending
 * (client.c) and when to publish (after the message went to zmq: stream.c).
 */
#include <string.h>

#include "common/detok.h"
#include "common/log.h"
#include "common/stopstr.h"
#include "ipc/failpoint.h"
#include "ipc/pipeline_req.h"
#include "postprocd/postd.h"

void postd_cursor_start(const struct postd *d, struct rs_pipe_cursor *c, int32_t prev_token)
{
    memset(c, 0, sizeof(*c));
    rs_detok_init(&c->detok, d->vocab, prev_token, 0);
    rs_stopstr_init(&c->stop);
}

int32_t postd_prev_token(const struct postd *d, struct rs_table_ref ref,
                         const struct rs_pipe_req *r)
{
    int32_t tok;
    uint32_t got = 0;
    if (r->n_prompt == 0 ||
        rs_arena_read(d->p->tokens, ref, r->n_prompt - 1, 1, &tok, &got) != RS_OK || got != 1)
        return RS_VOCAB_NONE;
    return tok;
}

/* Runs text through the stop matcher into d->released. */
static rs_err stop_feed(struct postd *d, const struct rs_pipe_req *r, struct rs_pipe_cursor *c,
                        const char *text, size_t len, size_t *n_text, int *matched)
{
    const char *stops[RS_WIRE_STOP_MAX];
    size_t lens[RS_WIRE_STOP_MAX];
    size_t n_stops = rs_pipe_req_stops(r, stops, lens);
    int which = -1;
    rs_err rc = rs_stopstr_feed(&c->stop, stops, lens, n_stops, text, len, d->released,
                                RS_STOPSTR_MAX_LEN + d->detok_max, n_text, &which);
    *matched = which >= 0;
    return rc;
}

rs_err postd_cursor_feed(struct postd *d, const struct rs_pipe_req *r, struct rs_pipe_cursor *c,
                         int32_t tok, size_t *n_text, int *matched)
{
    size_t n = 0;
    *n_text = 0;
    *matched = 0;
    rs_err rc = rs_detok_feed(d->vocab, &c->detok, tok, d->step, d->detok_max, &n);
    if (rc == RS_OK)
        rc = stop_feed(d, r, c, d->step, n, n_text, matched);
    if (rc != RS_OK) {
        rs_log_req(RS_LOG_ERROR, r->handle, RS_LOG_NOID, "output token %u (id %d) cannot be "
                   "decoded: %s", c->n_done, tok, rs_strerror(rc));
        return rc;
    }
    c->n_done++;
    c->text_bytes += *n_text;
    return RS_OK;
}

rs_err postd_cursor_flush(struct postd *d, const struct rs_pipe_req *r, struct rs_pipe_cursor *c,
                          size_t *n_text)
{
    char tail[8];
    size_t n = 0, held = 0;
    int matched = 0;
    *n_text = 0;
    rs_err rc = rs_detok_flush(d->vocab, &c->detok, tail, sizeof(tail), &n);
    if (rc == RS_OK && n > 0)
        rc = stop_feed(d, r, c, tail, n, n_text, &matched);
    /* The released bytes so far sit at d->released; the held ones follow them. */
    if (rc == RS_OK)
        rc = rs_stopstr_finish(&c->stop, d->released + *n_text, RS_STOPSTR_MAX_LEN, &held);
    if (rc != RS_OK)
        return rc;
    *n_text += held;
    c->text_bytes += *n_text;
    return RS_OK;
}

void postd_cursor_publish(struct rs_pipe_req *r, const struct rs_pipe_cursor *c)
{
    uint32_t idx = atomic_load_explicit(&r->cursor_idx, memory_order_relaxed) & 1u;
    r->cursor[idx ^ 1u] = *c;
    RS_FAILPOINT("postprocd.cursor_copied"); /* crash test: spare written, not yet current */
    /* P1: the spare copy is complete before it becomes current (readers: rs_pipe_cursor_cur). */
    atomic_store_explicit(&r->cursor_idx, idx ^ 1u, memory_order_release);
}

/* SPDX-License-Identifier: MIT */
/*
 * postprocd's internal interface: the daemon state main.c owns and the
 * functions of its concept files (cursor.c: detokenizer + stop strings over
 * the per-request cursor in shared memory; stream.c: new tokens -> deltas,
 * the table scan; final.c: the final message, the output walker that
 * replays a request's messages, linger and release; client.c: hello,
 * resume and sending to a request's client). One thread runs all of it.
 */
#ifndef RS_POSTD_H
#define RS_POSTD_H

#include <stdint.h>

#include "common/vocab.h"
#include "ipc/pipeline_door.h"
#include "ipc/pipeline_front.h"
#include "ipc/pipeline_owner.h"
#include "ipc/pipeline_req.h"
#include "ipc/wire_client.h"
#include "ipc/wire_server.h"

/* Private per-record bookkeeping (lost on restart; rebuilt from what it caches). */
struct postd_slot {
    uint32_t gen;         /* record generation this entry describes */
    uint8_t known;        /* 0: first sight since start or reuse */
    uint8_t gone_logged;
    uint64_t final_at_ns; /* when the final went out (or was first seen sent), 0 = not yet */
};

struct postd {
    struct rs_pipe *p;             /* borrowed: the stage's opened instance */
    struct rs_pipe_doors *doors;   /* borrowed: the stage's doorbells (ipc/stage.h) */
    struct rs_pipe_front front;
    rs_pipe_owner_map *owners;   /* routing id -> the owner whose hello bound it (client.c) */
    rs_vocab *vocab;
    uint64_t linger_ns;          /* keep a finished request this long for resume */
    uint64_t client_timeout_ns;  /* abort a request whose client is unreachable this long */
    struct postd_slot *slots;    /* max_requests */
    size_t detok_max;            /* rs_detok_max_out */
    char *step;                  /* detok output of one token: detok_max bytes */
    char *released;              /* stop-matcher output: RS_STOPSTR_MAX_LEN + detok_max bytes */
    char *text;                  /* text of one message: RS_WIRE_TEXT_MAX bytes */
    uint32_t *msg_tokens;        /* tokens of one message: RS_WIRE_OUT_TOKENS_MAX */
    struct rs_wire_logprob *lps; /* logprobs of one message: RS_WIRE_OUT_TOKENS_MAX */
    int32_t *toks;               /* a request's output tokens read from the arena: n_ctx */
    struct rs_wire_buf out;      /* encoder buffer */
    int fenced;                  /* a shared-memory call said we are fenced: exit */
};

/* --- cursor.c ------------------------------------------------------------------------------ */

/* Starts c for request r: nothing done, detokenizer after prev_token (last prompt token). */
void postd_cursor_start(const struct postd *d, struct rs_pipe_cursor *c, int32_t prev_token);

/*
 * Feeds output token tok of r through c's detokenizer and stop matcher.
 * Writes the text it releases to d->released (*n_text bytes) and sets
 * *matched when a stop string completed with it (c->stop.matched then
 * stays set). Returns RS_OK or RS_EINVAL (token outside the vocab, logged).
 */
rs_err postd_cursor_feed(struct postd *d, const struct rs_pipe_req *r, struct rs_pipe_cursor *c,
                         int32_t tok, size_t *n_text, int *matched);

/* Ends c's text: held-back bytes and an incomplete character, into d->released. */
rs_err postd_cursor_flush(struct postd *d, const struct rs_pipe_req *r, struct rs_pipe_cursor *c,
                          size_t *n_text);

/* Makes c the current cursor of r: write the spare copy, then flip (release). */
void postd_cursor_publish(struct rs_pipe_req *r, const struct rs_pipe_cursor *c);

/* The last prompt token of ref (the detokenizer's context), or RS_VOCAB_NONE. */
int32_t postd_prev_token(const struct postd *d, struct rs_table_ref ref,
                         const struct rs_pipe_req *r);

/* --- client.c ------------------------------------------------------------------------------ */

/*
 * Sends d->out to r's client (on the transport it came from). RS_OK clears
 * r->unreachable_ns; a failure (RS_ENOENT: not connected, RS_EFULL: not
 * reading) starts it and is counted. The message stays in shared memory
 * either way: a later pass or a resume sends it again.
 */
rs_err postd_send(struct postd *d, struct rs_pipe_req *r, uint64_t now);

/* Receives and answers up to max client messages waiting on sock (hello, resume, errors). */
void postd_drain_clients(struct postd *d, rs_zsock *sock, int tcp, uint32_t max);

/* --- stream.c ------------------------------------------------------------------------------ */

/* One pass over every published request: new tokens, finals, linger, client timeouts. */
void postd_scan(struct postd *d);

/* Sets r's finish word (reason, postprocd, code) and, if this call set it, rings schedulerd. */
void postd_finish_request(struct postd *d, struct rs_table_ref ref, struct rs_pipe_req *r,
                          unsigned reason, unsigned code, unsigned cancel_reason);

/* Output token k (0-based) of ref into *tok via the arena. RS_OK, RS_ESTALE, RS_ENOENT. */
rs_err postd_read_output(const struct postd *d, struct rs_table_ref ref,
                         const struct rs_pipe_req *r, uint32_t from, uint32_t n, int32_t *out,
                         uint32_t *got);

/* Fills lp for output token k of ref (the request asked for logprobs). RS_OK or the error. */
rs_err postd_logprob(const struct postd *d, struct rs_table_ref ref, uint32_t k, int32_t tok,
                     struct rs_wire_logprob *lp);

/* --- final.c ------------------------------------------------------------------------------- */

/*
 * Replays request ref's messages from its first token over its first
 * n_tokens output tokens (the cursor's n_done) and sends those with
 * seq >= from_seq; with_final also produces the final message (the
 * request must be FINISHED). Deterministic: a replay sends byte-identical
 * messages with the same seqs. Returns RS_OK or the first send error (the
 * caller keeps its cursor and tries later).
 */
rs_err postd_walk(struct postd *d, struct rs_table_ref ref, struct rs_pipe_req *r,
                  uint32_t n_tokens, uint64_t from_seq, int with_final, uint64_t now);

/*
 * The end of a FINISHED request whose tokens were all processed (cursor c):
 * sends its final (streaming: the flushed remainder; otherwise the whole
 * output), then marks final_sent in the cursor. RS_OK or a send error.
 */
rs_err postd_send_final(struct postd *d, struct rs_table_ref ref, struct rs_pipe_req *r,
                        const struct rs_pipe_cursor *c, uint64_t now);

/* Frees the record (token lists included) once it is FINISHED; 1 when freed. */
int postd_release(struct postd *d, struct rs_table_ref ref, const char *why);

#endif

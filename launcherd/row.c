/* SPDX-License-Identifier: MIT */
/*
 * One row of a step: the request's next output token. Everything here is
 * keyed by absolute positions so a redone step changes nothing: the token
 * for output k goes to list position n_prompt + k, so when the list already
 * holds it (a launcher killed after the append, or a batch planned twice)
 * that token is kept, not sampled again; otherwise it is sampled as a pure
 * function of (params, logits, history, k), its logprobs are stored first
 * (pipeline.h "logprobs"), then it is appended. Stop rules set the finish
 * word by CAS, which is idempotent too. Leaves out: stop strings (text,
 * postprocd) and freeing anything (schedulerd and postprocd).
 */
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/failpoint.h"
#include "ipc/pipeline_batch.h"
#include "ipc/pipeline_constraint.h"
#include "ipc/pipeline_logprob.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "ipc/pipeline_result.h"
#include "ipc/wire_server.h"
#include "launcherd/engine/stop.h"
#include "launcherd/launcher.h"

static struct rs_metrics_block *metrics(struct launcher *l)
{
    return &l->p->metrics->stage[RS_PIPE_STAGE_LAUNCHERD];
}

void launcher_fail_request(struct launcher *l, uint64_t batch_id, struct rs_table_ref ref,
                           const char *why)
{
    void *rec;
    if (!rs_role_current(l->p->role))
        return; /* replaced while stopped: its view of the batch may be stale; write nothing */
    if (rs_table_get(l->p->requests, ref, NULL, &rec) != RS_OK) {
        rs_log_req(RS_LOG_WARN, RS_LOG_NOID, batch_id, "record %u (gen %u) is gone: %s", ref.index,
                   ref.gen, why);
        return;
    }
    struct rs_pipe_req *r = rec;
    uint32_t word =
        rs_pipe_finish_make(RS_WIRE_FINISH_ERROR, RS_PIPE_STAGE_LAUNCHERD, RS_WIRE_INTERNAL);
    int set = rs_pipe_finish_set(r, word);
    rs_counter_add(&metrics(l)->counter[RS_M_LAU_SEQ_ERRORS], 1);
    rs_log_req(RS_LOG_ERROR, r->handle, batch_id, "request failed%s: %s",
               set ? "" : " (it was already finishing)", why);
}

/* Whether `tok`, output k of r, ends it (EOS/EOG, stop ids, max_tokens, context). */
static enum rs_finish_reason stop_reason(const struct launcher *l, const struct rs_pipe_req *r,
                                         int32_t tok, uint32_t k)
{
    struct rs_stop_params sp;
    memset(&sp, 0, sizeof(sp));
    sp.max_tokens = r->max_tokens;
    sp.ignore_eos = (r->flags & RS_PIPE_F_IGNORE_EOS) != 0;
    uint32_t n_ids = r->n_stop_ids < RS_WIRE_STOP_IDS_MAX ? r->n_stop_ids : RS_WIRE_STOP_IDS_MAX;
    sp.n_stop_ids = (int32_t)(n_ids < RS_STOP_MAX_IDS ? n_ids : RS_STOP_MAX_IDS);
    memcpy(sp.stop_ids, r->stop_ids, (size_t)sp.n_stop_ids * sizeof(int32_t));
    enum rs_finish_reason why =
        rs_stop_check(&sp, l->eog, l->n_eog, tok, r->n_prompt, (uint64_t)k + 1, l->p->cfg.n_ctx);
    /* The wire allows more stop ids than stop.h holds: the rest are checked here. */
    for (uint32_t i = (uint32_t)sp.n_stop_ids; i < n_ids && why != RS_FINISH_STOP; i++)
        if (r->stop_ids[i] == tok)
            why = RS_FINISH_STOP;
    return why;
}

static void apply_stop(struct launcher *l, uint64_t batch_id, struct rs_pipe_req *r, int32_t tok,
                       uint32_t k)
{
    enum rs_finish_reason why = stop_reason(l, r, tok, k);
    if (why == RS_FINISH_NONE)
        return;
    unsigned reason = why == RS_FINISH_STOP ? RS_WIRE_FINISH_STOP : RS_WIRE_FINISH_LENGTH;
    if (rs_pipe_finish_set(r, rs_pipe_finish_make(reason, RS_PIPE_STAGE_LAUNCHERD, 0))) {
        rs_counter_add(&metrics(l)->counter[RS_M_LAU_FINISHED], 1);
        rs_log_req(RS_LOG_DEBUG, r->handle, batch_id, "finished (%s) at output %u, token %d",
                   rs_finish_reason_name(why), k, tok);
    }
}

/*
 * A list write refused as stale: nothing to do when the record is gone or
 * this incarnation is fenced; otherwise another live process holds the list
 * (a writer that never sealed it), which no retry fixes, so the request fails.
 */
static void write_refused(struct launcher *l, uint64_t batch_id, struct rs_table_ref ref,
                          const char *what)
{
    if (rs_table_get(l->p->requests, ref, NULL, NULL) == RS_OK && rs_role_current(l->p->role))
        launcher_fail_request(l, batch_id, ref, what);
}

static int uses_history(const struct rs_sampling_params *sp)
{
    return sp->repetition_penalty != 1.0f || sp->presence_penalty != 0.0f ||
           sp->frequency_penalty != 0.0f;
}

/*
 * A constraint that ends the request instead of a token: accepting nothing more is
 * `stop`; no token allowed is an error naming the dead end; a constraint that cannot be
 * loaded fails the request.
 */
static void constraint_finish(struct launcher *l, uint64_t batch_id, struct rs_table_ref ref,
                              struct rs_pipe_req *r, enum launcher_mask_verdict v, uint32_t k)
{
    if (v == LAUNCHER_MASK_FAILED) {
        launcher_fail_request(l, batch_id, ref, "its constraint could not be applied");
        return;
    }
    unsigned reason = v == LAUNCHER_MASK_END ? RS_WIRE_FINISH_STOP : RS_WIRE_FINISH_ERROR;
    unsigned code = v == LAUNCHER_MASK_END ? 0 : RS_WIRE_CONSTRAINT_DEAD;
    if (rs_pipe_finish_set(r, rs_pipe_finish_make(reason, RS_PIPE_STAGE_LAUNCHERD, code))) {
        rs_counter_add(&metrics(l)->counter[RS_M_LAU_FINISHED], 1);
        rs_log_req(v == LAUNCHER_MASK_END ? RS_LOG_DEBUG : RS_LOG_WARN, r->handle, batch_id,
                   "constraint %s at output %u", v == LAUNCHER_MASK_END
                   ? "complete: finished (stop)" : "allows no token: dead end", k);
    }
}

/* Samples output k (list position pos) of r from lg; stores its logprobs. -1 when it failed. */
static int32_t sample(struct launcher *l, uint64_t batch_id, const struct rs_pipe_batch_seq *s,
                      struct rs_pipe_req *r, uint32_t k, uint32_t pos, const float *lg)
{
    struct rs_table_ref ref = {s->req_index, s->req_gen};
    struct rs_sampling_params sp = r->sampling; /* copied: read once from shared memory */
    const int32_t *hist = NULL;
    uint32_t n_prompt = 0, n_out = 0, got = 0;
    if (uses_history(&sp)) {
        if (rs_arena_read(l->p->tokens, ref, 0, pos, l->history, &got) != RS_OK || got != pos) {
            launcher_fail_request(l, batch_id, ref, "cannot read its token list");
            return -1;
        }
        hist = l->history;
        n_prompt = r->n_prompt;
        n_out = k;
    }
    memcpy(l->logits, lg, (size_t)l->n_vocab * sizeof(float));
    if (r->flags & RS_PIPE_F_CONSTRAINED) {
        enum launcher_mask_verdict v = launcher_mask_apply(l, s, k, l->logits);
        if (v >= LAUNCHER_MASK_END) {
            constraint_finish(l, batch_id, ref, r, v, k);
            return -1;
        }
    }
    struct rs_sample_result res;
    if (rs_sampler_sample(l->smp, &sp, l->logits, hist, n_prompt, n_out, k, &res) != RS_OK) {
        launcher_fail_request(l, batch_id, ref, "the sampler refused its parameters");
        return -1;
    }
    if (sp.n_logprobs > 0) {
        rs_err rc = rs_pipe_logprob_put(l->p, ref, k, &res);
        if (rc == RS_ESTALE)
            write_refused(l, batch_id, ref, "its logprob list is written by another process");
        else if (rc != RS_OK)
            launcher_fail_request(l, batch_id, ref,
                                  rc == RS_ENOMEM ? "no room left for its logprobs"
                                                  : "cannot store its logprobs");
        if (rc != RS_OK)
            return -1;
        RS_FAILPOINT("launcher.row.after_logprobs");
    }
    return res.token;
}

/* Notes a request with new tokens for postprocd's tokens_ready doorbell. */
static void note_tokens(struct launcher *l, struct rs_table_ref ref, uint32_t n_generated)
{
    struct rs_wire_door *d = &l->door;
    if (d->n_entries < RS_WIRE_DOOR_TOKENS_MAX)
        d->entries[d->n_entries++] = (struct rs_wire_door_tok){ref.index, ref.gen, n_generated};
}

/* The first output's time, set once by whichever launcher gets there (a replacement too). */
static void mark_first_token(struct rs_pipe_req *r, uint32_t k)
{
    uint64_t zero = 0;
    if (k == 0)
        atomic_compare_exchange_strong_explicit(&r->first_token_ns, &zero, rs_clock_ns(),
                                                memory_order_relaxed, memory_order_relaxed);
}

/* The list already holds output k: report that token and re-apply the stop rules. */
static int keep(struct launcher *l, uint64_t batch_id, struct rs_table_ref ref,
                struct rs_pipe_req *r, uint32_t k, uint32_t pos, uint32_t len,
                struct rs_pipe_result_row *row)
{
    int32_t tok;
    uint32_t got = 0;
    if (rs_arena_read(l->p->tokens, ref, pos, 1, &tok, &got) != RS_OK || got != 1)
        return 0;
    rs_counter_add(&metrics(l)->counter[RS_M_LAU_REDONE], 1);
    rs_log_req(RS_LOG_INFO, r->handle, batch_id, "output %u was already appended: kept", k);
    mark_first_token(r, k);
    apply_stop(l, batch_id, r, tok, k);
    row->token = tok;
    note_tokens(l, ref, len - r->n_prompt);
    return 1;
}

int launcher_row(struct launcher *l, uint64_t batch_id, const struct rs_pipe_batch_seq *s,
                 const float *lg, struct rs_pipe_result_row *row)
{
    struct rs_table_ref ref = {s->req_index, s->req_gen};
    void *rec;
    uint32_t len = 0;
    if (rs_table_get(l->p->requests, ref, NULL, &rec) != RS_OK ||
        rs_arena_len(l->p->tokens, ref, &len) != RS_OK)
        return 0;
    struct rs_pipe_req *r = rec;
    uint32_t pos = s->pos0 + s->n_tokens, k = s->out_index; /* pos == n_prompt + k (step.c) */
    row->n_tokens = len;
    if (len > pos)
        return keep(l, batch_id, ref, r, k, pos, len, row);
    int32_t prev;
    uint32_t got = 0;
    /* A launcher killed between appending output k - 1 and its stop rules left the request
     * unfinished; they are pure, so applying them again here is exact. */
    if (k > 0 && rs_arena_read(l->p->tokens, ref, pos - 1, 1, &prev, &got) == RS_OK && got == 1)
        apply_stop(l, batch_id, r, prev, k - 1);
    if (atomic_load_explicit(&r->finish, memory_order_acquire) != 0)
        return 0; /* cancelled or stopped while in flight: no more tokens */
    int32_t tok = sample(l, batch_id, s, r, k, pos, lg);
    if (tok < 0)
        return 0;
    rs_err rc = rs_arena_append(l->p->tokens, ref, &tok, 1);
    /* Sealed, the tail chunk is linked to the record, so postprocd's rs_arena_free_record
     * returns it; left reserved by this live incarnation, nothing would ever free it. */
    if (rc == RS_OK)
        rc = rs_arena_seal(l->p->tokens, ref);
    if (rc == RS_ESTALE)
        write_refused(l, batch_id, ref, "its token list is written by another process");
    else if (rc != RS_OK)
        launcher_fail_request(l, batch_id, ref, rs_strerror(rc));
    if (rc != RS_OK)
        return 0;
    RS_FAILPOINT("launcher.row.after_append");
    /* Stopped here and replaced, a zombie must write nothing more: the batch's other rows are
     * fenced by run_batch, but this row's stop rules and first-token time come after the
     * append (redone by the replacement, which reads the token in the list). */
    if (!rs_role_current(l->p->role))
        return 0;
    mark_first_token(r, k);
    rs_counter_add(&metrics(l)->counter[RS_M_LAU_SAMPLED], 1);
    apply_stop(l, batch_id, r, tok, k);
    /* The next mask is computed while this result travels and the next forward pass runs. */
    if ((r->flags & RS_PIPE_F_CONSTRAINED) && atomic_load(&r->finish) == 0)
        launcher_mask_queue(l, s, k + 1);
    row->token = tok;
    row->n_tokens = len + 1;
    note_tokens(l, ref, len + 1 - r->n_prompt);
    return 1;
}

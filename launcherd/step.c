/* SPDX-License-Identifier: MIT */
/*
 * One batch: batch ring record -> checks -> one model step -> sampling of
 * the rows that want logits -> result ring record. A record that fails its
 * checks is answered (ERROR, no rows) rather than dropped, because
 * schedulerd keeps one batch in flight and waits for its answer; a batch
 * planned for another launcher incarnation is answered KV_LOST without
 * running, because this process holds none of the K/V it assumes. A seq
 * whose block table or request does not match the batch is refused alone
 * (and its request failed) so one bad entry never stalls its companions.
 * Leaves out: the per-row work (row.c) and the ring and doorbell plumbing
 * (serve.c).
 */
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/failpoint.h"
#include "ipc/pipeline_batch.h"
#include "ipc/pipeline_kv.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "ipc/pipeline_result.h"
#include "launcherd/launcher.h"

#define REFUSED UINT32_MAX

static struct rs_metrics_block *metrics(struct launcher *l)
{
    return &l->p->metrics->stage[RS_PIPE_STAGE_LAUNCHERD];
}

static uint32_t result_len(uint32_t n_rows)
{
    return (uint32_t)(sizeof(struct rs_pipe_result) + n_rows * sizeof(struct rs_pipe_result_row));
}

/* Published list length of ref, 0 when the record is gone. */
static uint32_t list_len(struct launcher *l, struct rs_table_ref ref)
{
    uint32_t len = 0;
    if (rs_arena_len(l->p->tokens, ref, &len) != RS_OK)
        return 0;
    return len;
}

static uint32_t reject(struct launcher *l, const struct rs_ring_rd *rd, struct rs_pipe_result *res,
                       const char *why)
{
    rs_log_req(RS_LOG_ERROR, RS_LOG_NOID, rd->id, "batch rejected (ring seq %llu, %u bytes): %s",
               (unsigned long long)rd->seq, rd->len, why);
    rs_counter_add(&metrics(l)->counter[RS_M_LAU_REJECTED], 1);
    res->status = RS_PIPE_RESULT_ERROR;
    res->n_rows = 0;
    return result_len(0);
}

static uint32_t kv_lost(struct launcher *l, const struct rs_pipe_batch *b,
                        struct rs_pipe_result *res)
{
    rs_log_req(RS_LOG_INFO, RS_LOG_NOID, b->batch_id,
               "batch planned for launcher incarnation %u, this is %u: KV_LOST", b->launcher_inc,
               rs_role_inc(l->p->role));
    rs_counter_add(&metrics(l)->counter[RS_M_LAU_KV_LOST], 1);
    const struct rs_pipe_batch_seq *seqs = rs_pipe_batch_seqs(b);
    struct rs_pipe_result_row *rows = rs_pipe_result_rows(res);
    for (uint32_t i = 0; i < b->n_seqs; i++) {
        struct rs_table_ref ref = {seqs[i].req_index, seqs[i].req_gen};
        rows[i] = (struct rs_pipe_result_row){
            .req_index = ref.index, .req_gen = ref.gen, .token = -1, .n_tokens = list_len(l, ref)};
    }
    res->status = RS_PIPE_RESULT_KV_LOST;
    res->n_rows = b->n_seqs;
    return result_len(b->n_seqs);
}

/* The block table of seq s from its KV row, copied to table; NULL plus why when it is not s's. */
static const char *copy_table(struct launcher *l, const struct rs_pipe_batch_seq *s,
                              struct rs_table_ref ref, uint32_t *table)
{
    const struct rs_pipe_kvrow *row = rs_pipe_kvrow_at(l->p, s->run_slot);
    if (atomic_load_explicit(&row->owner, memory_order_acquire) != rs_table_ref_pack(ref) + 1)
        return "its KV table row belongs to another request";
    if (atomic_load_explicit(&row->n_blocks, memory_order_acquire) < s->n_blocks)
        return "its KV table row has fewer blocks than the batch says";
    for (uint32_t j = 0; j < s->n_blocks; j++) {
        table[j] = row->blocks[j];
        if (table[j] >= l->p->cfg.n_kv_blocks)
            return "its KV table names a block outside the pool";
    }
    return NULL;
}

/* Why seq s may not run (NULL: it may); *gone when its request no longer exists. */
static const char *admit(struct launcher *l, const struct rs_pipe_batch_seq *s, uint32_t *table,
                         int *gone)
{
    struct rs_table_ref ref = {s->req_index, s->req_gen};
    uint32_t state;
    void *rec;
    *gone = rs_table_get(l->p->requests, ref, &state, &rec) != RS_OK;
    if (*gone)
        return "its request record was freed";
    if (state != RS_PIPE_REQ_RUNNING)
        return "its request is not RUNNING";
    const struct rs_pipe_req *r = rec;
    uint64_t end = (uint64_t)s->pos0 + s->n_tokens;
    if (list_len(l, ref) < end)
        return "its token list is shorter than the positions the batch runs";
    if (s->want_logits && (uint64_t)r->n_prompt + s->out_index != end)
        return "its output index does not follow the positions the batch runs";
    return copy_table(l, s, ref, table);
}

/* Fills l->seqs with the seqs that may run; refused ones get their row (and request failed). */
static uint32_t prepare(struct launcher *l, const struct rs_pipe_batch *b, uint32_t n_seqs,
                        struct rs_pipe_result_row *rows, uint32_t *n_refused)
{
    const struct rs_pipe_batch_seq *seqs = rs_pipe_batch_seqs(b);
    const int32_t *tokens = rs_pipe_batch_tokens(b);
    uint32_t n_run = 0;
    for (uint32_t i = 0; i < n_seqs; i++) {
        const struct rs_pipe_batch_seq *s = &seqs[i];
        struct rs_table_ref ref = {s->req_index, s->req_gen};
        uint32_t *table = l->tables + (size_t)i * l->p->cfg.max_blocks_per_seq;
        int gone;
        const char *why = admit(l, s, table, &gone);
        rows[i] = (struct rs_pipe_result_row){
            .req_index = ref.index, .req_gen = ref.gen, .token = -1, .computed = s->pos0};
        if (why != NULL) {
            l->run_of[i] = REFUSED;
            (*n_refused)++;
            rows[i].n_tokens = list_len(l, ref);
            if (!gone)
                launcher_fail_request(l, b->batch_id, ref, why);
            else
                rs_log_req(RS_LOG_WARN, RS_LOG_NOID, b->batch_id, "seq %u skipped: %s", i, why);
            continue;
        }
        l->run_of[i] = n_run;
        if (s->want_logits) /* a constrained row's mask is computed during the forward pass */
            launcher_mask_queue(l, s, s->out_index);
        l->seqs[n_run++] = (struct rs_model_seq){.tokens = tokens + s->tok_off,
                                                 .n_tokens = s->n_tokens,
                                                 .pos0 = s->pos0,
                                                 .block_table = table,
                                                 .n_blocks = s->n_blocks,
                                                 .want_logits = (int)s->want_logits};
    }
    return n_run;
}

/* A failed step: nothing was written (model.h); requests fail only when it is their input. */
static void step_failed(struct launcher *l, const struct rs_pipe_batch *b, uint32_t n_seqs,
                        rs_err rc, struct rs_pipe_result_row *rows)
{
    rs_log_req(RS_LOG_ERROR, RS_LOG_NOID, b->batch_id, "model step over %u seqs failed: %s",
               n_seqs, rs_strerror(rc));
    const struct rs_pipe_batch_seq *seqs = rs_pipe_batch_seqs(b);
    for (uint32_t i = 0; i < n_seqs; i++) {
        if (l->run_of[i] == REFUSED)
            continue;
        struct rs_table_ref ref = {seqs[i].req_index, seqs[i].req_gen};
        rows[i].n_tokens = list_len(l, ref);
        if (rc == RS_EINVAL) /* refused as input: it would fail the same way if replanned */
            launcher_fail_request(l, b->batch_id, ref, "the model refused the batch");
    }
}

/* The step and the row phase for a checked batch of this incarnation. */
static uint32_t run_batch(struct launcher *l, const struct rs_pipe_batch *b,
                          struct rs_pipe_result *res, struct launcher_step_info *info)
{
    struct rs_pipe_result_row *rows = rs_pipe_result_rows(res);
    const struct rs_pipe_batch_seq *seqs = rs_pipe_batch_seqs(b);
    /* Read once, as checked: a process stopped mid-step and replaced finds the slot holding
     * another batch when it resumes (ring recovery redelivered this one). */
    const uint32_t n_seqs = b->n_seqs;
    uint32_t n_run = prepare(l, b, n_seqs, rows, &info->n_refused);
    uint64_t t0 = rs_clock_ns();
    rs_err rc = n_run > 0 ? rs_model_step(l->model, l->kv, l->seqs, n_run) : RS_OK;
    uint64_t t1 = rs_clock_ns();
    res->forward_ns = t1 - t0;
    RS_FAILPOINT("launcher.step.after_forward");
    if (rc != RS_OK) {
        step_failed(l, b, n_seqs, rc, rows);
        info->n_refused = n_seqs;
    } else {
        for (uint32_t i = 0; i < n_seqs; i++) {
            if (!rs_role_current(l->p->role))
                break; /* fenced: the rows belong to the new incarnation (nothing commits) */
            if (l->run_of[i] == REFUSED)
                continue;
            const struct rs_pipe_batch_seq *s = &seqs[i];
            if (s->want_logits)
                info->n_sampled += (uint32_t)launcher_row(
                    l, b->batch_id, s, rs_model_logits(l->model, l->run_of[i]), &rows[i]);
            else
                rows[i].n_tokens = list_len(l, (struct rs_table_ref){s->req_index, s->req_gen});
            rows[i].computed = s->pos0 + s->n_tokens;
        }
    }
    res->sample_ns = rs_clock_ns() - t1;
    if (rc == RS_OK)
        launcher_cost_note(l, seqs, n_seqs, res->forward_ns + res->sample_ns);
    res->status = info->n_refused == 0 ? RS_PIPE_RESULT_OK : RS_PIPE_RESULT_ERROR;
    res->n_rows = n_seqs;
    struct rs_metrics_block *m = metrics(l);
    rs_counter_add(&m->counter[RS_M_LAU_STEPS], 1);
    rs_counter_add(&m->counter[RS_M_LAU_TOKENS], b->n_tokens);
    rs_hist_add_ns(&m->hist[RS_H_LAU_FORWARD], res->forward_ns);
    rs_hist_add_ns(&m->hist[RS_H_LAU_SAMPLE], res->sample_ns);
    return result_len(n_seqs);
}

uint32_t launcher_run(struct launcher *l, const struct rs_ring_rd *rd, int crc_ok, void *out,
                      uint32_t cap, struct launcher_step_info *info)
{
    struct rs_pipe_result *res = out;
    memset(res, 0, sizeof(*res));
    memset(info, 0, sizeof(*info));
    res->batch_id = info->batch_id = rd->id;
    res->launcher_inc = rs_role_inc(l->p->role);
    res->picked_ns = rs_clock_ns();
    l->door.n_entries = 0;
    const struct rs_pipe_batch *b = rd->data;
    char why[256];
    uint32_t len;
    if (!crc_ok)
        len = reject(l, rd, res, "its checksum does not match");
    else if (rs_pipe_batch_check(l->p, rd->data, rd->len, why, sizeof(why)) != RS_OK)
        len = reject(l, rd, res, why);
    else if (b->batch_id != rd->id)
        len = reject(l, rd, res, "its batch id differs from the ring record's");
    else if (result_len(b->n_seqs) > cap)
        len = reject(l, rd, res, "its result would not fit a result slot");
    else if (b->launcher_inc != res->launcher_inc)
        len = kv_lost(l, b, res);
    else {
        if (b->planned_ns != 0 && res->picked_ns > b->planned_ns)
            rs_hist_add_ns(&metrics(l)->hist[RS_H_LAU_PICKUP], res->picked_ns - b->planned_ns);
        len = run_batch(l, b, res, info);
    }
    info->status = res->status;
    info->n_rows = res->n_rows;
    return len;
}

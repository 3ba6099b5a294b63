/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: result records as a buggy or hostile launcherd could
 * write them, applied by schedulerd's real code (in process, over a real
 * segment). Each input perturbs the honest answer to the batch in flight:
 * status, row count, record length, batch id, which request a row names,
 * the computed extent and list length it claims, whether tokens were really
 * appended. After every input the scheduler must still hold its invariants:
 * the block pool checks, every KV row belongs to a RUNNING record on that
 * slot, the KV gauges add up, and the next batch passes rs_pipe_batch_check.
 * Requests that end (even as errors) are freed and replaced.
 */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "ipc/pipeline_batch.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "ipc/pipeline_result.h"
#include "schedulerd/sched.h"
#include "tests/unit/sched_fixture.h"

static struct sfx fz;
static struct rs_pipe *fz_sp;
static struct sched *fz_s;

static void fz_report(void)
{
    fprintf(stderr, "fuzz_sched_result: %llu batches answered, %llu steps planned, %llu requests "
            "finished, %llu preemptions, %llu prefix-hit tokens\n",
            (unsigned long long)fz.batches, (unsigned long long)sfx_metric(&fz, RS_M_SCH_STEPS),
            (unsigned long long)sfx_metric(&fz, RS_M_SCH_FINISHED),
            (unsigned long long)sfx_metric(&fz, RS_M_SCH_PREEMPTIONS),
            (unsigned long long)sfx_metric(&fz, RS_M_SCH_PREFIX_HIT));
}

static int fz_init(void)
{
    struct rs_pipe_config c;
    char err[256];
    if (sfx_config(&c, 64, 10, 4, 64) != 0 || sfx_open(&fz, &c) != 0 ||
        rs_pipe_open(&fz.cfg, RS_PIPE_STAGE_SCHEDULERD, &fz_sp, err, sizeof(err)) != RS_OK ||
        sched_create(fz_sp, NULL, &fz_s) != RS_OK || rs_role_ready(fz_sp->role) != RS_OK)
        return -1;
    fz.hostile_launcher = 1; /* e.g. lists past the context: what schedulerd must survive */
    rs_log_set_level((enum rs_log_level)(RS_LOG_ERROR + 1)); /* every input logs rejections */
    atexit(fz_report);
    return 0;
}

/* Frees what finished (outputs of perturbed runs are not checked) and keeps four requests live. */
static void fz_refill(const uint8_t *d, size_t n)
{
    for (uint32_t i = 0; i < fz.n_req; i++) {
        struct sfx_req *q = &fz.req[i];
        uint32_t st;
        if (!q->done && rs_table_get(fz.post->requests, q->ref, &st, NULL) == RS_OK &&
            st == RS_PIPE_REQ_FINISHED) {
            rs_arena_free_record(fz.post->tokens, fz.post->requests, q->ref, RS_PIPE_REQ_FINISHED);
            q->done = 1;
        }
    }
    uint32_t live = 0;
    for (uint32_t i = 0; i < fz.n_req; i++)
        live += !fz.req[i].done;
    if (fz.n_req > SFX_MAX_REQ - 8) { /* recycle the bookkeeping, not the segment */
        uint32_t k = 0;
        for (uint32_t i = 0; i < fz.n_req; i++)
            if (!fz.req[i].done)
                fz.req[k++] = fz.req[i];
        fz.n_req = k;
    }
    for (uint32_t i = live; i < 4; i++) {
        int32_t prompt[64];
        uint32_t len = 3 + (n > i ? d[i] : i) % 38;
        sfx_prompt(prompt, len, 16, i % 2, fz.n_req);
        sfx_submit(&fz, prompt, len, 1 + (len % 20), 0);
    }
}

/* The honest row for seq q (appending its token when asked), then the input's perturbation. */
static void fz_row(const struct rs_pipe_batch_seq *q, const uint8_t *p, int append,
                   struct rs_pipe_result_row *row)
{
    struct rs_table_ref ref = {q->req_index, q->req_gen};
    uint32_t len = 0;
    rs_arena_len(fz.lau->tokens, ref, &len);
    int32_t tok = -1;
    if (q->want_logits && append) {
        tok = (int32_t)(3 + p[2] % 200);
        if (rs_arena_append(fz.lau->tokens, ref, &tok, 1) == RS_OK &&
            rs_arena_seal(fz.lau->tokens, ref) == RS_OK)
            len++;
    } else if (q->want_logits) {
        tok = (int32_t)p[2] - 8; /* claimed, never appended */
    }
    *row = (struct rs_pipe_result_row){q->req_index, q->req_gen, tok,
                                       len + (uint32_t)(int8_t)p[1] % 3,
                                       q->pos0 + q->n_tokens + (uint32_t)(int8_t)p[0], 0};
    switch (p[3] % 5) {
    case 1: row->req_index = (q->req_index + 1) % fz.cfg.max_requests; break;
    case 2: row->req_index = p[4] % (fz.cfg.max_requests + 2); break;
    case 3: row->req_gen = q->req_gen + 1; break;
    default: break;
    }
}

/* Answers the batch in hand with the input's perturbations; releases the batch. */
static void fz_answer(struct rs_ring_rd *rd, const uint8_t *d, size_t n)
{
    const struct rs_pipe_batch *b = rd->data;
    const struct rs_pipe_batch_seq *seqs = rs_pipe_batch_seqs(b);
    uint8_t hdr[4] = {0};
    memcpy(hdr, d, n < 4 ? n : 4);
    struct rs_ring_wr w;
    if (rs_ring_try_claim(fz.lau->results, &w) != RS_OK)
        abort();
    struct rs_pipe_result *res = w.data;
    memset(res, 0, sizeof(*res));
    res->batch_id = hdr[0] & 1 ? b->batch_id + hdr[1] % 3 + 1 : b->batch_id;
    res->status = hdr[0] & 2 ? hdr[1] % 4 : RS_PIPE_RESULT_OK;
    res->launcher_inc = rs_role_inc(fz.lau->role);
    int32_t nr = (int32_t)b->n_seqs + (hdr[0] & 4 ? (int8_t)hdr[2] % 3 : 0);
    res->n_rows = nr < 0 ? 0 : (uint32_t)nr > fz.cfg.max_seqs ? fz.cfg.max_seqs : (uint32_t)nr;
    struct rs_pipe_result_row *rows = rs_pipe_result_rows(res);
    for (uint32_t i = 0; i < res->n_rows; i++) {
        static const uint8_t zero[5];
        const uint8_t *p = n >= 4 + 5 * (i + 1) ? d + 4 + 5 * i : zero;
        fz_row(&seqs[i < b->n_seqs ? i : 0], p, !(hdr[0] & 8), &rows[i]);
    }
    uint32_t len = (uint32_t)(sizeof(*res) + res->n_rows * sizeof(*rows));
    if (hdr[0] & 16)
        len -= (uint32_t)(hdr[3] % 8) + 1;
    if (rs_ring_commit(fz.lau->results, &w, res->batch_id, len) != RS_OK ||
        rs_ring_release(fz.lau->batches, rd) != RS_OK)
        abort();
}

/* Aborts (the fuzzer's crash) unless every invariant holds between steps. */
static void fz_check(void)
{
    if (kv_block_check(&fz_s->kv) != RS_OK || sfx_audit(&fz) != 0) {
        fprintf(stderr, "invariant broken: %s\n", fz.why);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        if (fz_init() != 0)
            abort();
        ready = 1;
    }
    fz_refill(data, size);
    if (sched_work(fz_s, 1) < 0)
        abort();
    fz_check();
    struct rs_ring_rd rd;
    char err[256];
    if (rs_ring_try_get(fz.lau->batches, &rd) != RS_OK)
        return 0; /* nothing to run this time */
    if (rs_pipe_batch_check(fz.lau, rd.data, rd.len, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "schedulerd wrote a bad batch: %s\n", err);
        abort();
    }
    fz.batches++;
    fz_answer(&rd, data, size);
    if (sched_work(fz_s, 1) < 0)
        abort();
    fz_check();
    return 0;
}

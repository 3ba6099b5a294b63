/* SPDX-License-Identifier: MIT */
/*
 * Validation of batch and result records before use (pipeline_batch.h,
 * pipeline_result.h): they are another process's output, possibly from a
 * bug or a fenced incarnation.
 */
#include "ipc/pipeline_batch.h"
#include "ipc/pipeline_result.h"

#include <stdio.h>
#include <string.h>

static rs_err bad(char *err, size_t err_len, const char *what, unsigned long long a,
                  unsigned long long b)
{
    snprintf(err, err_len, "%s (%llu vs %llu)", what, a, b);
    return RS_EPROTO;
}

static rs_err check_seq(const struct rs_pipe *p, const struct rs_pipe_batch_seq *s,
                        uint32_t n_tokens, char *err, size_t err_len)
{
    const struct rs_pipe_config *c = &p->cfg;
    if (s->req_index >= c->max_requests)
        return bad(err, err_len, "batch seq: request index out of range", s->req_index,
                   c->max_requests);
    if (s->run_slot >= c->max_seqs)
        return bad(err, err_len, "batch seq: running slot out of range", s->run_slot,
                   c->max_seqs);
    if (s->n_tokens == 0 || s->tok_off > n_tokens || s->n_tokens > n_tokens - s->tok_off)
        return bad(err, err_len, "batch seq: token range outside the batch", s->tok_off,
                   n_tokens);
    if ((uint64_t)s->pos0 + s->n_tokens > c->n_ctx)
        return bad(err, err_len, "batch seq: positions past the context", s->pos0 + 0ull,
                   c->n_ctx);
    uint64_t need = ((uint64_t)s->pos0 + s->n_tokens + c->block_size - 1) / c->block_size;
    if (s->n_blocks < need || s->n_blocks > c->max_blocks_per_seq)
        return bad(err, err_len, "batch seq: block count does not cover its positions",
                   s->n_blocks, need);
    if (s->want_logits > 1)
        return bad(err, err_len, "batch seq: want_logits is not 0 or 1", s->want_logits, 1);
    return RS_OK;
}

rs_err rs_pipe_batch_check(const struct rs_pipe *p, const void *data, uint32_t len, char *err,
                           size_t err_len)
{
    const struct rs_pipe_batch *b = data;
    if (len < sizeof(*b))
        return bad(err, err_len, "batch record shorter than its header", len, sizeof(*b));
    if (b->n_seqs == 0 || b->n_seqs > p->cfg.max_seqs)
        return bad(err, err_len, "batch: sequence count out of range", b->n_seqs,
                   p->cfg.max_seqs);
    if (b->n_tokens == 0 || b->n_tokens > p->cfg.max_batched_tokens)
        return bad(err, err_len, "batch: token count out of range", b->n_tokens,
                   p->cfg.max_batched_tokens);
    if (rs_pipe_batch_bytes(b->n_seqs, b->n_tokens) != len)
        return bad(err, err_len, "batch: record length does not match its counts", len,
                   rs_pipe_batch_bytes(b->n_seqs, b->n_tokens));
    const struct rs_pipe_batch_seq *seqs = rs_pipe_batch_seqs(b);
    uint64_t covered = 0;
    for (uint32_t i = 0; i < b->n_seqs; i++) {
        rs_err rc = check_seq(p, &seqs[i], b->n_tokens, err, err_len);
        if (rc != RS_OK)
            return rc;
        for (uint32_t j = 0; j < i; j++)
            if (seqs[j].req_index == seqs[i].req_index || seqs[j].run_slot == seqs[i].run_slot)
                return bad(err, err_len, "batch: a request or slot appears twice", i, j);
        covered += seqs[i].n_tokens;
    }
    if (covered != b->n_tokens)
        return bad(err, err_len, "batch: sequences do not cover the token array", covered,
                   b->n_tokens);
    const int32_t *tok = rs_pipe_batch_tokens(b);
    for (uint32_t i = 0; i < b->n_tokens; i++)
        if (tok[i] < 0 || (uint32_t)tok[i] >= p->cfg.n_vocab)
            return bad(err, err_len, "batch: token id outside the vocabulary", (uint32_t)tok[i],
                       p->cfg.n_vocab);
    return RS_OK;
}

rs_err rs_pipe_result_check(const struct rs_pipe *p, const void *data, uint32_t len, char *err,
                            size_t err_len)
{
    const struct rs_pipe_result *r = data;
    if (len < sizeof(*r))
        return bad(err, err_len, "result record shorter than its header", len, sizeof(*r));
    if (r->n_rows > p->cfg.max_seqs || len != rs_pipe_result_bytes(r->n_rows))
        return bad(err, err_len, "result: row count does not match its length", r->n_rows, len);
    if (r->status > RS_PIPE_RESULT_ERROR)
        return bad(err, err_len, "result: unknown status", r->status, RS_PIPE_RESULT_ERROR);
    const struct rs_pipe_result_row *rows = rs_pipe_result_rows(r);
    for (uint32_t i = 0; i < r->n_rows; i++) {
        if (rows[i].req_index >= p->cfg.max_requests)
            return bad(err, err_len, "result row: request index out of range",
                       rows[i].req_index, p->cfg.max_requests);
        if (rows[i].token >= 0 && (uint32_t)rows[i].token >= p->cfg.n_vocab)
            return bad(err, err_len, "result row: token outside the vocabulary",
                       (uint32_t)rows[i].token, p->cfg.n_vocab);
        if (rows[i].computed > p->cfg.n_ctx)
            return bad(err, err_len, "result row: computed past the context", rows[i].computed,
                       p->cfg.n_ctx);
        if (rows[i].n_tokens > p->cfg.n_ctx)
            return bad(err, err_len, "result row: length past the context", rows[i].n_tokens,
                       p->cfg.n_ctx);
    }
    return RS_OK;
}

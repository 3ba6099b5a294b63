/* SPDX-License-Identifier: MIT */
/*
 * Per-token logprobs of requests that ask for them: launcherd stores one
 * fixed-size entry per output token in the request's logprob list (a second
 * arena list in the record, region "logprobs"), postprocd reads it back for
 * the delta. The layout and the ordering rules are in pipeline_logprob.h.
 * Leaves out: computing the values (the sampler) and their
 * wire encoding (wire_server.c).
 */
#include <string.h>

#include "common/log.h"
#include "ipc/pipeline_logprob.h"
#include "ipc/pipeline_req.h"

_Static_assert(RS_PIPE_LP_MAX_TOP == RS_WIRE_LOGPROBS_MAX,
               "a logprob entry must fit the wire's alternatives");

/* The record's N (alternatives per token): RS_OK, RS_ENOENT (none asked), RS_ESTALE. */
static rs_err lp_n_top(const struct rs_pipe *p, struct rs_table_ref ref, uint32_t *n)
{
    void *rec;
    if (rs_table_get(p->requests, ref, NULL, &rec) != RS_OK)
        return RS_ESTALE;
    int32_t want = ((const struct rs_pipe_req *)rec)->sampling.n_logprobs;
    if (want <= 0)
        return RS_ENOENT;
    *n = want > (int32_t)RS_PIPE_LP_MAX_TOP ? RS_PIPE_LP_MAX_TOP : (uint32_t)want;
    return RS_OK;
}

static int32_t float_bits(float f)
{
    int32_t w;
    memcpy(&w, &f, sizeof(w));
    return w;
}

static float bits_float(int32_t w)
{
    float f;
    memcpy(&f, &w, sizeof(f));
    return f;
}

/* Entry words for sample result r with n alternatives (unused ones: id -1, logprob 0). */
static void lp_encode(const struct rs_sample_result *r, uint32_t n, int32_t *e)
{
    uint32_t n_top = r->n_top < 0 ? 0 : (uint32_t)r->n_top;
    if (n_top > n)
        n_top = n;
    e[0] = r->token;
    e[1] = float_bits(r->logprob);
    e[2] = (int32_t)n_top;
    for (uint32_t i = 0; i < n; i++) {
        e[3 + i] = i < n_top ? r->top_ids[i] : -1;
        e[3 + n + i] = i < n_top ? float_bits(r->top_logprobs[i]) : 0;
    }
}

/* Appends one entry; when the region is full, reclaims freed records' chunks once and retries. */
static rs_err lp_append(struct rs_pipe *p, struct rs_table_ref ref, const int32_t *e, uint32_t w)
{
    rs_err rc = rs_arena_append(p->logprobs, ref, e, w);
    if (rc == RS_ENOMEM) {
        rs_log_info("logprob region full: reclaiming the chunks of freed requests");
        rc = rs_arena_recover(p->logprobs);
        if (rc == RS_OK)
            rc = rs_arena_append(p->logprobs, ref, e, w);
    }
    /* Sealed, every chunk is linked to the record, so the audit reclaims it once freed. */
    return rc == RS_OK ? rs_arena_seal(p->logprobs, ref) : rc;
}

rs_err rs_pipe_logprob_put(struct rs_pipe *p, struct rs_table_ref ref, uint32_t k,
                           const struct rs_sample_result *r)
{
    uint32_t n;
    rs_err rc = lp_n_top(p, ref, &n);
    if (rc != RS_OK)
        return rc == RS_ENOENT ? RS_EINVAL : rc;
    uint32_t w = rs_pipe_lp_entry_words(n);
    uint64_t first = (uint64_t)k * w;
    if (first + w > rs_arena_capacity(p->logprobs))
        return RS_ERANGE;
    if (k == 0) {
        rc = rs_arena_list_init(p->logprobs, ref); /* may hold an earlier request's entries */
    } else {
        uint32_t len;
        if ((rc = rs_arena_len(p->logprobs, ref, &len)) != RS_OK)
            return rc;
        if (len >= first + w)
            return RS_OK; /* written before a crash: the same values (pure sampler) */
        if (len != first) {
            rs_log_error("logprobs of record %u: %u words stored, entry %u starts at %llu",
                         ref.index, len, k, (unsigned long long)first);
            return RS_EIO;
        }
    }
    if (rc != RS_OK)
        return rc;
    int32_t e[3 + 2 * RS_PIPE_LP_MAX_TOP];
    lp_encode(r, n, e);
    return lp_append(p, ref, e, w);
}

rs_err rs_pipe_logprob_read(const struct rs_pipe *p, struct rs_table_ref ref, uint32_t k,
                            int32_t token, struct rs_wire_logprob *out)
{
    uint32_t n, got = 0;
    rs_err rc = lp_n_top(p, ref, &n);
    if (rc != RS_OK)
        return rc;
    uint32_t w = rs_pipe_lp_entry_words(n);
    uint64_t first = (uint64_t)k * w;
    if (first + w > rs_arena_capacity(p->logprobs))
        return RS_ENOENT;
    int32_t e[3 + 2 * RS_PIPE_LP_MAX_TOP];
    if ((rc = rs_arena_read(p->logprobs, ref, (uint32_t)first, w, e, &got)) != RS_OK)
        return rc;
    if (got < w)
        return RS_ENOENT;
    if (e[0] != token || e[2] < 0 || (uint32_t)e[2] > n) {
        rs_log_error("logprobs of record %u entry %u: token %d (expected %d), %d alternatives",
                     ref.index, k, e[0], token, e[2]);
        return RS_EIO;
    }
    memset(out, 0, sizeof(*out));
    out->token = (uint32_t)e[0];
    out->logprob = bits_float(e[1]);
    out->n_top = (uint32_t)e[2];
    for (uint32_t i = 0; i < out->n_top; i++) {
        if (e[3 + i] < 0 || (uint32_t)e[3 + i] >= p->cfg.n_vocab) {
            rs_log_error("logprobs of record %u entry %u: alternative id %d outside the vocab",
                         ref.index, k, e[3 + i]);
            return RS_EIO;
        }
        out->top_ids[i] = (uint32_t)e[3 + i];
        out->top_logprobs[i] = bits_float(e[3 + n + i]);
    }
    return RS_OK;
}

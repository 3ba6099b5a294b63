/* SPDX-License-Identifier: MIT */
/*
 * The request record's accessors and its invariant check (pipeline_req.h):
 * stop strings as arrays, and Q1..Q7 read from the table, the token arena
 * and the KV rows. The check allocates one slot map of max_seqs entries.
 */
#include "ipc/pipeline_req.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "ipc/pipeline_kv.h"

size_t rs_pipe_req_stops(const struct rs_pipe_req *r, const char **ptrs, size_t *lens)
{
    size_t n = r->n_stop <= RS_WIRE_STOP_MAX ? r->n_stop : RS_WIRE_STOP_MAX;
    for (size_t i = 0; i < n; i++) {
        ptrs[i] = r->stop[i];
        lens[i] = r->stop_len[i] <= RS_WIRE_STOP_LEN_MAX ? r->stop_len[i] : RS_WIRE_STOP_LEN_MAX;
    }
    return n;
}

static rs_err broken(const char *inv, uint32_t idx, const char *what, unsigned long long a,
                     unsigned long long b)
{
    rs_log_error("request record %u: invariant %s broken: %s (%llu vs %llu)", idx, inv, what, a,
                 b);
    return RS_EMISMATCH;
}

/* Q2..Q5 for published record idx (ref), whose token list holds len tokens. */
static rs_err check_published(const struct rs_pipe *p, uint32_t idx, uint32_t state,
                              const struct rs_pipe_req *r, uint32_t len)
{
    uint32_t w = atomic_load_explicit(&r->finish, memory_order_acquire);
    if (state == RS_PIPE_REQ_FINISHED && w == 0)
        return broken("Q2", idx, "FINISHED without a finish word", state, w);
    if (w != 0 && (rs_pipe_finish_reason(w) < 1 || rs_pipe_finish_reason(w) > 4 ||
                   rs_pipe_finish_who(w) >= RS_PIPE_N_STAGES))
        return broken("Q3", idx, "finish word names no reason or stage", rs_pipe_finish_reason(w),
                      rs_pipe_finish_who(w));
    if (r->n_prompt == 0 || r->n_prompt > len || len > p->cfg.n_ctx)
        return broken("Q4", idx, "prompt / token list / context out of order", r->n_prompt, len);
    if (r->n_computed > len)
        return broken("Q4", idx, "K/V computed past the token list", r->n_computed, len);
    uint32_t done = rs_pipe_cursor_cur((struct rs_pipe_req *)r)->n_done;
    if (done > len - r->n_prompt)
        return broken("Q5", idx, "deltas sent past the output", done, len - r->n_prompt);
    return RS_OK;
}

/* Q6's row half and Q7 for KV row s (slot_of: slot -> the RUNNING record holding it). */
static rs_err check_row(const struct rs_pipe *p, uint32_t s, const uint32_t *slot_of)
{
    const struct rs_pipe_kvrow *row = rs_pipe_kvrow_at(p, s);
    uint64_t owner = atomic_load_explicit(&row->owner, memory_order_acquire);
    if (slot_of[s] != RS_PIPE_NO_SLOT) {
        uint32_t state, gen, inc;
        rs_table_peek(p->requests, slot_of[s], &state, &gen, &inc);
        struct rs_table_ref want = {slot_of[s], gen};
        if (owner != rs_table_ref_pack(want) + 1)
            return broken("Q6", slot_of[s], "RUNNING record's slot row names another owner", s,
                          owner);
    }
    if (owner == 0)
        return RS_OK;
    struct rs_table_ref ref = rs_table_ref_unpack(owner - 1);
    uint32_t state, gen, inc;
    if (ref.index >= p->cfg.max_requests)
        return broken("Q7", ref.index, "KV row owner outside the table", s, ref.index);
    rs_table_peek(p->requests, ref.index, &state, &gen, &inc);
    if (state != RS_PIPE_REQ_RUNNING || gen != ref.gen)
        return RS_OK; /* a stale row: it counts for nothing and rebuild clears it */
    uint32_t slot = rs_pipe_req_at(p, ref.index)->run_slot;
    if (slot != s && slot != RS_PIPE_NO_SLOT)
        return broken("Q7", ref.index, "RUNNING record's row is not its slot", s, slot);
    uint32_t n = atomic_load_explicit(&row->n_blocks, memory_order_acquire);
    if (n > p->cfg.max_blocks_per_seq)
        return broken("Q7", ref.index, "KV row longer than a sequence", n,
                      p->cfg.max_blocks_per_seq);
    for (uint32_t k = 0; k < n; k++)
        if (row->blocks[k] >= p->cfg.n_kv_blocks)
            return broken("Q7", ref.index, "KV row names a block outside the pool",
                          row->blocks[k], p->cfg.n_kv_blocks);
    return RS_OK;
}

/* Q1, Q4..Q6 over the table; fills slot_of (slot -> RUNNING record) for Q6. */
static rs_err check_records(const struct rs_pipe *p, uint32_t *slot_of,
                            struct rs_pipe_req_stats *st)
{
    for (uint32_t i = 0; i < p->cfg.max_requests; i++) {
        uint32_t state, gen, inc, len = 0;
        rs_table_peek(p->requests, i, &state, &gen, &inc);
        if (state > RS_PIPE_REQ_FINISHED)
            return broken("Q1", i, "state outside the table above", state, RS_PIPE_REQ_FINISHED);
        st->n_state[state]++;
        if (state < RS_PIPE_REQ_WAITING)
            continue;
        const struct rs_pipe_req *r = rs_pipe_req_at(p, i);
        if (rs_arena_len(p->tokens, (struct rs_table_ref){i, gen}, &len) != RS_OK)
            return broken("Q4", i, "published record without a readable token list", state, 0);
        rs_err rc = check_published(p, i, state, r, len);
        if (rc != RS_OK)
            return rc;
        if (state != RS_PIPE_REQ_RUNNING)
            continue;
        uint32_t slot = r->run_slot;
        if (slot == RS_PIPE_NO_SLOT) {
            st->n_finishing++;
            continue;
        }
        if (slot >= p->cfg.max_seqs)
            return broken("Q6", i, "RUNNING record's slot out of range", slot, p->cfg.max_seqs);
        if (slot_of[slot] != RS_PIPE_NO_SLOT)
            return broken("Q6", i, "two RUNNING records hold one slot", slot, slot_of[slot]);
        slot_of[slot] = i;
    }
    return RS_OK;
}

rs_err rs_pipe_req_check(const struct rs_pipe *p, struct rs_pipe_req_stats *out)
{
    struct rs_pipe_req_stats st;
    memset(&st, 0, sizeof(st));
    uint32_t *slot_of = malloc(sizeof(uint32_t) * p->cfg.max_seqs);
    if (slot_of == NULL)
        return RS_ENOMEM;
    for (uint32_t s = 0; s < p->cfg.max_seqs; s++)
        slot_of[s] = RS_PIPE_NO_SLOT;
    rs_err rc = check_records(p, slot_of, &st);
    for (uint32_t s = 0; rc == RS_OK && s < p->cfg.max_seqs; s++)
        rc = check_row(p, s, slot_of);
    free(slot_of);
    if (out != NULL)
        *out = st;
    return rc;
}

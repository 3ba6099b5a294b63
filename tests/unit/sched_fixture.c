/* SPDX-License-Identifier: MIT */
/*
 * The scheduler fixture (sched_fixture.h): a real segment opened as the other
 * three stages around schedulerd's code, with simulated K/V and the audits.
 * Part of rs_testlib, linked by the tests and benches that include the header.
 */
#include "tests/unit/sched_fixture.h"

char sfx_instance[64];

void sfx_atexit(void)
{
    if (sfx_instance[0] != '\0')
        rs_pipe_unlink(sfx_instance);
}

int sfx_config(struct rs_pipe_config *c, uint32_t n_ctx, uint32_t kv_blocks,
               uint32_t max_seqs, uint32_t max_tokens)
{
    char path[480];
    if (rs_test_refdata("stories260K.gguf", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    rs_pipe_config_default(c);
    rs_test_unique_name("sched", c->instance, sizeof(c->instance));
    snprintf(c->model_path, sizeof(c->model_path), "%s", path);
    c->n_ctx = n_ctx;
    c->n_kv_blocks = kv_blocks;
    c->max_seqs = max_seqs;
    c->max_batched_tokens = max_tokens;
    c->max_requests = 256;
    return 0;
}

int sfx_fail(struct sfx *f, const char *fmt, ...)
{
    if (f->why[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(f->why, sizeof(f->why), fmt, ap);
        va_end(ap);
    }
    fprintf(stderr, "sched fixture: %s\n", f->why);
    return -1;
}

int sfx_open(struct sfx *f, struct rs_pipe_config *cfg)
{
    char err[256];
    memset(f, 0, sizeof(*f));
    if (rs_harness_config_resolve(cfg, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "resolve: %s\n", err);
        return 1;
    }
    f->cfg = *cfg;
    if (sfx_instance[0] == '\0')
        atexit(sfx_atexit);
    snprintf(sfx_instance, sizeof(sfx_instance), "%s", cfg->instance);
    if (rs_pipe_open(cfg, RS_PIPE_STAGE_TOKENIZERD, &f->tok, err, sizeof(err)) != RS_OK ||
        rs_pipe_open(cfg, RS_PIPE_STAGE_LAUNCHERD, &f->lau, err, sizeof(err)) != RS_OK ||
        rs_pipe_open(cfg, RS_PIPE_STAGE_POSTPROCD, &f->post, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "open: %s\n", err);
        return 1;
    }
    rs_role_ready(f->tok->role);
    rs_role_ready(f->lau->role);
    rs_role_ready(f->post->role);
    size_t cells = (size_t)cfg->n_kv_blocks * cfg->block_size;
    f->simkv = malloc(cells * sizeof(int32_t));
    if (f->simkv == NULL)
        return 1;
    memset(f->simkv, 0xff, cells * sizeof(int32_t));
    f->sim_inc = rs_role_inc(f->lau->role);
    return 0;
}

void sfx_close(struct sfx *f)
{
    rs_pipe_close(&f->tok);
    rs_pipe_close(&f->lau);
    rs_pipe_close(&f->post);
    free(f->simkv);
    f->simkv = NULL;
    rs_pipe_unlink(f->cfg.instance);
}

int sfx_restart_launcher(struct sfx *f)
{
    char err[256];
    rs_pipe_close(&f->lau);
    if (rs_pipe_open(&f->cfg, RS_PIPE_STAGE_LAUNCHERD, &f->lau, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "reopen launcher: %s\n", err);
        return 1;
    }
    rs_role_ready(f->lau->role);
    memset(f->simkv, 0xff, (size_t)f->cfg.n_kv_blocks * f->cfg.block_size * sizeof(int32_t));
    f->sim_inc = rs_role_inc(f->lau->role);
    return 0;
}

int32_t sfx_token(const struct sfx *f, uint64_t handle, uint32_t i)
{
    uint64_t z = handle * 0x9e3779b97f4a7c15ull + i + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (int32_t)(3 + z % (f->cfg.n_vocab - 3));
}

int sfx_submit(struct sfx *f, const int32_t *prompt, uint32_t n, uint32_t max_tokens,
               int32_t priority)
{
    struct rs_table_ref ref;
    void *rec;
    if (f->n_req >= SFX_MAX_REQ || rs_table_claim(f->tok->requests, &ref, &rec) != RS_OK)
        return -1;
    struct rs_pipe_req *r = rec;
    memset(r, 0, sizeof(*r));
    r->handle = atomic_fetch_add(&f->tok->shared->next_handle, 1) + 1;
    r->arrival_ns = r->accepted_ns = rs_clock_ns();
    snprintf(r->id, sizeof(r->id), "req-%llu", (unsigned long long)r->handle);
    r->n_prompt = n;
    r->max_tokens = max_tokens;
    r->priority = priority;
    r->run_slot = RS_PIPE_NO_SLOT;
    rs_sampling_params_default(&r->sampling);
    if (rs_arena_list_init(f->tok->tokens, ref) != RS_OK ||
        rs_arena_append(f->tok->tokens, ref, prompt, n) != RS_OK ||
        rs_arena_seal(f->tok->tokens, ref) != RS_OK ||
        rs_table_publish(f->tok->requests, ref, RS_PIPE_REQ_WAITING) != RS_OK)
        return -1;
    struct sfx_req *q = &f->req[f->n_req];
    memset(q, 0, sizeof(*q));
    q->handle = r->handle;
    q->ref = ref;
    q->n_prompt = n;
    q->max_tokens = max_tokens;
    return (int)f->n_req++;
}

void sfx_prompt(int32_t *out, uint32_t n, uint32_t shared, uint32_t family,
                uint32_t unique)
{
    for (uint32_t i = 0; i < n; i++)
        out[i] = i < shared ? (int32_t)(5 + (family * 131 + i * 7) % 500)
                            : (int32_t)(5 + (unique * 977 + i * 13) % 500);
    out[0] = 1; /* BOS */
}

int32_t *sfx_list(struct rs_pipe *p, struct rs_table_ref ref, uint32_t *len)
{
    if (rs_arena_len(p->tokens, ref, len) != RS_OK)
        return NULL;
    int32_t *t = malloc(((size_t)*len + 1) * sizeof(int32_t));
    uint32_t got = 0;
    if (t != NULL && (rs_arena_read(p->tokens, ref, 0, *len, t, &got) != RS_OK || got != *len)) {
        free(t);
        return NULL;
    }
    return t;
}

uint32_t sfx_block_users(const struct sfx *f, uint32_t b)
{
    uint32_t n = 0;
    for (uint32_t s = 0; s < f->cfg.max_seqs; s++) {
        const struct rs_pipe_kvrow *row = rs_pipe_kvrow_at(f->lau, s);
        if (atomic_load(&row->owner) == 0)
            continue;
        uint32_t nb = atomic_load(&row->n_blocks);
        for (uint32_t k = 0; k < nb && k < f->cfg.max_blocks_per_seq; k++)
            n += row->blocks[k] == b;
    }
    return n;
}

int sfx_check_seq(struct sfx *f, const struct rs_pipe_batch *b,
                  const struct rs_pipe_batch_seq *q)
{
    struct rs_table_ref ref = {q->req_index, q->req_gen};
    uint32_t state, len, bs = f->cfg.block_size;
    void *rec;
    if (rs_table_get(f->lau->requests, ref, &state, &rec) != RS_OK ||
        state != RS_PIPE_REQ_RUNNING)
        return sfx_fail(f, "batch %llu: record %u is not RUNNING", (unsigned long long)b->batch_id,
                        q->req_index);
    const struct rs_pipe_req *r = rec;
    const struct rs_pipe_kvrow *row = rs_pipe_kvrow_at(f->lau, q->run_slot);
    if (atomic_load(&row->owner) != rs_table_ref_pack(ref) + 1 ||
        atomic_load(&row->n_blocks) < q->n_blocks || r->run_slot != q->run_slot)
        return sfx_fail(f, "record %u: row %u does not belong to it", q->req_index, q->run_slot);
    int32_t *list = sfx_list(f->lau, ref, &len);
    if (list == NULL)
        return sfx_fail(f, "record %u: list unreadable", q->req_index);
    const int32_t *tok = rs_pipe_batch_tokens(b) + q->tok_off;
    int bad = q->pos0 + q->n_tokens > len || (q->want_logits != (q->pos0 + q->n_tokens == len)) ||
              (q->want_logits && q->out_index != len - r->n_prompt);
    for (uint32_t i = 0; !bad && i < q->n_tokens; i++)
        bad = tok[i] != list[q->pos0 + i];
    for (uint32_t p = 0; !bad && p < q->pos0; p++) /* the K/V the plan says exists does */
        bad = f->simkv[(size_t)row->blocks[p / bs] * bs + p % bs] != list[p];
    for (uint32_t p = q->pos0; !bad && p < q->pos0 + q->n_tokens; p++) /* never into shared */
        bad = sfx_block_users(f, row->blocks[p / bs]) > 1 &&
              f->simkv[(size_t)row->blocks[p / bs] * bs + p % bs] != list[p];
    free(list);
    if (bad)
        return sfx_fail(f, "batch %llu, record %u (pos0 %u, %u tokens, list %u): tokens, logits "
                        "flag or computed K/V wrong", (unsigned long long)b->batch_id,
                        q->req_index, q->pos0, q->n_tokens, len);
    return 0;
}

int sfx_take(struct sfx *f, struct sfx_batch *bt)
{
    char err[256];
    memset(bt, 0, sizeof(*bt));
    rs_err rc = rs_ring_try_get(f->lau->batches, &bt->rd);
    if (rc == RS_EAGAIN)
        return 0;
    if (rc != RS_OK)
        return sfx_fail(f, "batch ring get: %s", rs_strerror(rc));
    if (rs_pipe_batch_check(f->lau, bt->rd.data, bt->rd.len, err, sizeof(err)) != RS_OK)
        return sfx_fail(f, "batch record rejected: %s", err);
    bt->b = bt->rd.data;
    bt->kv_lost = bt->b->launcher_inc != rs_role_inc(f->lau->role);
    f->batches++;
    if (bt->b->n_seqs > f->max_seqs_seen)
        f->max_seqs_seen = bt->b->n_seqs;
    if (bt->b->n_tokens > f->max_tokens_seen)
        f->max_tokens_seen = bt->b->n_tokens;
    const struct rs_pipe_batch_seq *seqs = rs_pipe_batch_seqs(bt->b);
    for (uint32_t i = 0; !bt->kv_lost && i < bt->b->n_seqs; i++)
        if (sfx_check_seq(f, bt->b, &seqs[i]) != 0)
            return -1;
    return 1;
}

int sfx_run_seq(struct sfx *f, const struct rs_pipe_batch_seq *q,
                struct rs_pipe_result_row *row)
{
    struct rs_table_ref ref = {q->req_index, q->req_gen};
    uint32_t bs = f->cfg.block_size, len = 0;
    void *rec;
    const struct rs_pipe_kvrow *kr = rs_pipe_kvrow_at(f->lau, q->run_slot);
    int32_t *list = sfx_list(f->lau, ref, &len);
    if (list == NULL || rs_table_get(f->lau->requests, ref, NULL, &rec) != RS_OK) {
        free(list);
        return sfx_fail(f, "record %u vanished during its step", q->req_index);
    }
    struct rs_pipe_req *r = rec;
    for (uint32_t p = q->pos0; p < q->pos0 + q->n_tokens; p++)
        f->simkv[(size_t)kr->blocks[p / bs] * bs + p % bs] = list[p];
    *row = (struct rs_pipe_result_row){.req_index = q->req_index, .req_gen = q->req_gen,
                                       .token = -1, .n_tokens = len,
                                       .computed = q->pos0 + q->n_tokens};
    if (q->want_logits) {
        int32_t t = sfx_token(f, r->handle, q->out_index);
        if (len > r->n_prompt + q->out_index) { /* a redo: the list already has it */
            t = list[r->n_prompt + q->out_index];
        } else if (rs_arena_append(f->lau->tokens, ref, &t, 1) != RS_OK ||
                   rs_arena_seal(f->lau->tokens, ref) != RS_OK) { /* as launcherd: see row.c */
            free(list);
            return sfx_fail(f, "record %u: append failed", q->req_index);
        }
        row->token = t;
        row->n_tokens = r->n_prompt + q->out_index + 1;
        if (q->out_index + 1 >= r->max_tokens)
            rs_pipe_finish_set(r, rs_pipe_finish_make(RS_WIRE_FINISH_LENGTH,
                                                      RS_PIPE_STAGE_LAUNCHERD, 0));
    }
    free(list);
    return 0;
}

int sfx_answer(struct sfx *f, struct sfx_batch *bt)
{
    struct rs_ring_wr w;
    rs_err rc;
    while ((rc = rs_ring_try_claim(f->lau->results, &w)) == RS_EFULL)
        usleep(100);
    if (rc != RS_OK)
        return sfx_fail(f, "result ring claim: %s", rs_strerror(rc));
    struct rs_pipe_result *res = w.data;
    memset(res, 0, sizeof(*res));
    res->batch_id = bt->b->batch_id;
    res->status = bt->kv_lost ? RS_PIPE_RESULT_KV_LOST : RS_PIPE_RESULT_OK;
    res->launcher_inc = rs_role_inc(f->lau->role);
    res->n_rows = bt->b->n_seqs;
    res->picked_ns = rs_clock_ns();
    struct rs_pipe_result_row *rows = rs_pipe_result_rows(res);
    const struct rs_pipe_batch_seq *seqs = rs_pipe_batch_seqs(bt->b);
    for (uint32_t i = 0; i < bt->b->n_seqs; i++) {
        if (bt->kv_lost) {
            rows[i] = (struct rs_pipe_result_row){seqs[i].req_index, seqs[i].req_gen, -1, 0, 0, 0};
            continue;
        }
        if (sfx_run_seq(f, &seqs[i], &rows[i]) != 0)
            return -1;
    }
    f->kv_lost += bt->kv_lost;
    res->done_ns = rs_clock_ns();
    uint32_t len = (uint32_t)(sizeof(*res) + res->n_rows * sizeof(*rows));
    if (rs_ring_commit(f->lau->results, &w, res->batch_id, len) != RS_OK ||
        rs_ring_release(f->lau->batches, &bt->rd) != RS_OK)
        return sfx_fail(f, "result commit or batch release failed");
    return 0;
}

int sfx_reap(struct sfx *f)
{
    int n = 0;
    for (uint32_t i = 0; i < f->n_req; i++) {
        struct sfx_req *q = &f->req[i];
        uint32_t state, len;
        void *rec;
        if (q->done || rs_table_get(f->post->requests, q->ref, &state, &rec) != RS_OK ||
            state != RS_PIPE_REQ_FINISHED)
            continue;
        const struct rs_pipe_req *r = rec;
        int32_t *list = sfx_list(f->post, q->ref, &len);
        if (list == NULL)
            return sfx_fail(f, "finished record %u: list unreadable", q->ref.index);
        q->reason = rs_pipe_finish_reason(atomic_load(&r->finish));
        q->n_out = len - q->n_prompt;
        q->n_cached = r->n_cached;
        q->n_preempted = r->n_preempted;
        int bad = q->reason == RS_WIRE_FINISH_LENGTH && q->n_out != q->max_tokens &&
                  len != f->cfg.n_ctx;
        for (uint32_t k = 0; !bad && k < q->n_out; k++)
            bad = list[q->n_prompt + k] != sfx_token(f, q->handle, k);
        free(list);
        if (bad)
            return sfx_fail(f, "request %llu: %u outputs, reason %u: lost, repeated or wrong "
                            "tokens", (unsigned long long)q->handle, q->n_out, q->reason);
        if (rs_arena_free_record(f->post->tokens, f->post->requests, q->ref,
                                 RS_PIPE_REQ_FINISHED) != RS_OK)
            return sfx_fail(f, "free of record %u failed", q->ref.index);
        q->done = 1;
        n++;
    }
    return n;
}

uint64_t sfx_metric(const struct sfx *f, unsigned i)
{
    return atomic_load(&f->tok->metrics->stage[RS_PIPE_STAGE_SCHEDULERD].counter[i]);
}

int sfx_audit_row(struct sfx *f, uint32_t s, uint32_t *users, int count)
{
    const struct rs_pipe_config *c = &f->cfg;
    const struct rs_pipe_kvrow *row = rs_pipe_kvrow_at(f->tok, s);
    uint64_t owner = atomic_load(&row->owner);
    if (owner == 0)
        return 0;
    struct rs_table_ref o = rs_table_ref_unpack(owner - 1);
    uint32_t state, nb = atomic_load(&row->n_blocks);
    void *rec;
    if (rs_table_get(f->tok->requests, o, &state, &rec) != RS_OK ||
        state != RS_PIPE_REQ_RUNNING || ((struct rs_pipe_req *)rec)->run_slot != s ||
        nb > c->max_blocks_per_seq)
        return sfx_fail(f, "row %u: owner %u/%u is not a RUNNING record on it", s, o.index,
                        o.gen);
    const struct rs_pipe_req *r = rec;
    for (uint32_t k = 0; k < nb; k++) {
        uint32_t b = row->blocks[k];
        if (b >= c->n_kv_blocks)
            return sfx_fail(f, "row %u: block %u out of range", s, b);
        if (count)
            users[b]++;
        else if (users[b] > 1 && (k + 1) * c->block_size > r->n_computed)
            return sfx_fail(f, "row %u: block %u at %u is shared but not computed", s, b, k);
    }
    return 1;
}

int sfx_audit(struct sfx *f)
{
    const struct rs_pipe_config *c = &f->cfg;
    uint32_t *users = calloc(c->n_kv_blocks, sizeof(uint32_t)), used = 0, cached = 0, rows = 0;
    uint32_t running = 0, cursor = 0, state;
    struct rs_table_ref ref;
    int rc = users ? 0 : -1;
    for (int pass = 1; pass >= 0; pass--)
        for (uint32_t s = 0; rc >= 0 && s < c->max_seqs; s++) {
            rc = sfx_audit_row(f, s, users, pass);
            rows += pass && rc > 0;
        }
    while (rc >= 0 && rs_table_next(f->tok->requests, &cursor, 1ull << RS_PIPE_REQ_RUNNING, &ref,
                                    &state) == RS_OK)
        running++;
    uint64_t inc = atomic_load(&f->tok->shared->kv_launcher_inc);
    for (uint32_t b = 0; rc >= 0 && b < c->n_kv_blocks; b++) {
        used += users[b] > 0;
        cached += users[b] == 0 && atomic_load(&f->tok->kv_meta[b].word) == (inc << 32 | 1);
    }
    free(users);
    if (rc < 0)
        return rc;
    if (!f->hostile_launcher && rs_pipe_req_check(f->tok, NULL) != RS_OK)
        return sfx_fail(f, "audit: request record invariants (logged above)");
    uint64_t g_used = sfx_metric(f, RS_M_SCH_KV_USED), g_free = sfx_metric(f, RS_M_SCH_KV_FREE);
    uint64_t g_cached = sfx_metric(f, RS_M_SCH_KV_CACHED);
    if (running != rows || g_used != used || g_cached != cached ||
        g_used + g_free + g_cached != c->n_kv_blocks)
        return sfx_fail(f, "audit: %u running vs %u rows; used %llu vs %u in rows; cached %llu "
                        "vs %u in kv_meta; free %llu; pool %u", running, rows,
                        (unsigned long long)g_used, used, (unsigned long long)g_cached, cached,
                        (unsigned long long)g_free, c->n_kv_blocks);
    return 0;
}

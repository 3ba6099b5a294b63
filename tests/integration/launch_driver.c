/* SPDX-License-Identifier: MIT */
/*
 * The launcherd driver (launch_driver.h): a segment opened as schedulerd and
 * tokenizerd around the real launcherd binary.
 * Part of rs_testlib, linked by the tests and benches that include the header.
 */
#include "tests/integration/launch_driver.h"

int ld_fail(const char *what, const char *detail)
{
    fprintf(stderr, "launch driver: %s: %s\n", what, detail);
    return -1;
}

uint32_t ld_gcd(uint32_t a, uint32_t b)
{
    while (b != 0) {
        uint32_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int ld_config(struct ld *d, const char *model, const char *tag, uint32_t n_ctx,
              uint32_t max_requests, uint32_t max_seqs, uint32_t max_batched,
              uint32_t kv_blocks)
{
    char err[512];
    memset(d, 0, offsetof(struct ld, batch_buf));
    rs_pipe_config_default(&d->cfg);
    static unsigned seq;
    snprintf(d->cfg.instance, sizeof(d->cfg.instance), "ld-%s-%d-%u", tag, (int)getpid(), seq++);
    snprintf(d->cfg.model_path, sizeof(d->cfg.model_path), "%s", model);
    d->cfg.n_ctx = n_ctx;
    d->cfg.max_requests = max_requests;
    d->cfg.max_seqs = max_seqs;
    d->cfg.max_batched_tokens = max_batched;
    uint32_t mbps = (n_ctx + d->cfg.block_size - 1) / d->cfg.block_size;
    d->cfg.n_kv_blocks = kv_blocks != 0 ? kv_blocks : max_seqs * mbps;
    if (rs_harness_config_resolve(&d->cfg, err, sizeof(err)) != RS_OK)
        return ld_fail("config", err);
    for (d->stride = 37; ld_gcd(d->stride, d->cfg.n_kv_blocks) != 1; d->stride += 2) {
    }
    return 0;
}

int ld_open(struct ld *d, const char *bin, const char *rundir, const char *log_path)
{
    char err[512];
    if (strlen(bin) >= sizeof(d->bin) || strlen(rundir) >= sizeof(d->rundir) ||
        strlen(log_path) >= sizeof(d->log_path))
        return ld_fail("ld_open", "path too long");
    memcpy(d->bin, bin, strlen(bin) + 1);
    memcpy(d->rundir, rundir, strlen(rundir) + 1);
    memcpy(d->log_path, log_path, strlen(log_path) + 1);
    if (rs_pipe_open(&d->cfg, RS_PIPE_STAGE_SCHEDULERD, &d->sched, err, sizeof(err)) != RS_OK ||
        rs_pipe_open(&d->cfg, RS_PIPE_STAGE_TOKENIZERD, &d->tok, err, sizeof(err)) != RS_OK)
        return ld_fail("rs_pipe_open", err);
    d->zctx = zmq_ctx_new();
    if (d->zctx == NULL || rs_rundir_prepare(rundir, NULL) != RS_OK ||
        rs_pipe_doors_open(&d->doors, d->zctx, rundir, RS_PIPE_STAGE_SCHEDULERD) != RS_OK)
        return ld_fail("doorbells", rundir);
    return 0;
}

int ld_role(struct ld *d, struct rs_role_info *info)
{
    int idx = rs_role_find(d->sched->shm, RS_PIPE_LAUNCHERD);
    return idx >= 0 && rs_role_info_at(d->sched->shm, (uint32_t)idx, info) == RS_OK ? 0 : -1;
}

int ld_spawn(struct ld *d)
{
    struct rs_role_info before = {0};
    ld_role(d, &before);
    char ctx[16], blocks[16], reqs[16], seqs[16], toks[16];
    snprintf(ctx, sizeof(ctx), "%u", d->cfg.n_ctx);
    snprintf(blocks, sizeof(blocks), "%u", d->cfg.n_kv_blocks);
    snprintf(reqs, sizeof(reqs), "%u", d->cfg.max_requests);
    snprintf(seqs, sizeof(seqs), "%u", d->cfg.max_seqs);
    snprintf(toks, sizeof(toks), "%u", d->cfg.max_batched_tokens);
    const char *argv[LD_MAX_ARGS] = {d->bin,
                                     "--instance",
                                     d->cfg.instance,
                                     "--model",
                                     d->cfg.model_path,
                                     "--ctx",
                                     ctx,
                                     "--kv-blocks",
                                     blocks,
                                     "--max-requests",
                                     reqs,
                                     "--max-seqs",
                                     seqs,
                                     "--max-batched-tokens",
                                     toks,
                                     "--rundir",
                                     d->rundir};
    int argc = 17;
    for (int i = 0; i < d->n_extra && argc < LD_MAX_ARGS - 1; i++)
        argv[argc++] = d->extra[i];
    fflush(NULL);
    /* The environment is set here, not in the child: between fork and exec the child may
     * not allocate (another thread may have held the allocator's lock at the fork). */
    if (d->failpoint != NULL)
        setenv("RS_FAILPOINT", d->failpoint, 1);
    else
        unsetenv("RS_FAILPOINT");
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(d->log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0)
            dup2(fd, STDERR_FILENO);
        execv(d->bin, (char *const *)argv);
        _exit(127);
    }
    unsetenv("RS_FAILPOINT");
    if (pid < 0)
        return ld_fail("fork", strerror(errno));
    d->pid = pid;
    d->died = 0;
    for (int ms = 0; ms < 60000; ms++) {
        struct rs_role_info now;
        if (ld_role(d, &now) == 0 && now.inc != before.inc && now.phase == RS_ROLE_READY &&
            now.pid == (uint32_t)pid) {
            d->inc = now.inc;
            return 0;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            d->pid = 0;
            return ld_fail("launcherd exited before ready", d->log_path);
        }
        usleep(1000);
    }
    return ld_fail("launcherd not ready within 60 s", d->log_path);
}

int ld_stop(struct ld *d, int sig)
{
    if (d->pid <= 0)
        return -1;
    kill(d->pid, sig);
    int st = 0;
    while (waitpid(d->pid, &st, 0) < 0 && errno == EINTR) {
    }
    d->pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void ld_close(struct ld *d)
{
    if (d->pid > 0)
        ld_stop(d, SIGTERM);
    rs_pipe_doors_close(&d->doors);
    if (d->zctx != NULL)
        zmq_ctx_term(d->zctx);
    d->zctx = NULL;
    rs_pipe_close(&d->sched);
    rs_pipe_close(&d->tok);
    rs_pipe_unlink(d->cfg.instance);
}

int ld_submit(struct ld *d, const int32_t *prompt, uint32_t n_prompt,
              const struct rs_sampling_params *sp, uint32_t max_tokens,
              uint32_t flags, const int32_t *stop_ids, uint32_t n_stop_ids,
              struct ld_req *out)
{
    void *rec;
    struct rs_table_ref ref;
    if (rs_table_claim(d->tok->requests, &ref, &rec) != RS_OK)
        return ld_fail("submit", "request table full");
    struct rs_pipe_req *r = rec;
    memset(r, 0, sizeof(*r));
    r->handle = atomic_fetch_add(&d->tok->shared->next_handle, 1) + 1;
    r->arrival_ns = r->accepted_ns = rs_clock_ns();
    snprintf(r->id, sizeof(r->id), "req-%llu", (unsigned long long)r->handle);
    r->flags = flags;
    r->n_prompt = n_prompt;
    r->max_tokens = max_tokens;
    r->sampling = *sp;
    r->n_stop_ids = n_stop_ids;
    if (n_stop_ids > 0)
        memcpy(r->stop_ids, stop_ids, n_stop_ids * sizeof(int32_t));
    r->run_slot = RS_PIPE_NO_SLOT;
    if (rs_arena_list_init(d->tok->tokens, ref) != RS_OK ||
        rs_arena_append(d->tok->tokens, ref, prompt, n_prompt) != RS_OK ||
        rs_arena_seal(d->tok->tokens, ref) != RS_OK ||
        rs_table_publish(d->tok->requests, ref, RS_PIPE_REQ_WAITING) != RS_OK)
        return ld_fail("submit", "prompt");
    *out = (struct ld_req){.ref = ref, .slot = RS_PIPE_NO_SLOT, .n_prompt = n_prompt};
    return 0;
}

uint32_t ld_block(const struct ld *d, uint32_t s, uint32_t j)
{
    uint64_t k = (uint64_t)s * d->cfg.max_blocks_per_seq + j;
    return (uint32_t)(k * d->stride % d->cfg.n_kv_blocks);
}

int ld_admit(struct ld *d, struct ld_req *q, uint32_t slot)
{
    struct rs_pipe_req *r = rs_pipe_req_at(d->sched, q->ref.index);
    if (rs_table_transition(d->sched->requests, q->ref, RS_PIPE_REQ_WAITING, RS_PIPE_REQ_RUNNING) !=
        RS_OK)
        return ld_fail("admit", "transition");
    r->run_slot = slot;
    struct rs_pipe_kvrow *row = rs_pipe_kvrow_at(d->sched, slot);
    uint32_t n = d->cfg.max_blocks_per_seq;
    if ((uint64_t)(slot + 1) * n > d->cfg.n_kv_blocks)
        return ld_fail("admit", "too few KV blocks for that slot");
    for (uint32_t j = 0; j < n; j++)
        row->blocks[j] = ld_block(d, slot, j);
    atomic_store_explicit(&row->n_blocks, n, memory_order_release);
    atomic_store_explicit(&row->owner, rs_table_ref_pack(q->ref) + 1, memory_order_release);
    q->slot = slot;
    q->n_computed = 0;
    return 0;
}

int ld_list(struct ld *d, const struct ld_req *q, int32_t *out, uint32_t cap)
{
    uint32_t got = 0;
    if (rs_arena_read(d->sched->tokens, q->ref, 0, cap, out, &got) != RS_OK)
        return -1;
    return (int)got;
}

uint32_t ld_len(struct ld *d, const struct ld_req *q)
{
    uint32_t len = 0;
    rs_arena_len(d->sched->tokens, q->ref, &len);
    return len;
}

int ld_commit(struct ld *d, const struct ld_seq *seqs, uint32_t n, uint32_t inc,
              uint64_t *id)
{
    struct rs_ring_wr wr;
    if (rs_ring_try_claim(d->sched->batches, &wr) != RS_OK)
        return ld_fail("commit", "batch ring full");
    struct rs_pipe_batch *b = wr.data;
    uint32_t total = 0;
    for (uint32_t i = 0; i < n; i++)
        total += seqs[i].n_tokens;
    *b = (struct rs_pipe_batch){.batch_id = atomic_fetch_add(&d->sched->shared->next_batch, 1) + 1,
                                .launcher_inc = inc,
                                .n_seqs = n,
                                .n_tokens = total};
    struct rs_pipe_batch_seq *bs = rs_pipe_batch_seqs(b);
    int32_t *tok = rs_pipe_batch_tokens(b);
    uint32_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        const struct ld_seq *s = &seqs[i];
        uint32_t len = ld_len(d, s->q), got = 0;
        uint32_t end = s->pos0 + s->n_tokens, bs_ = d->cfg.block_size;
        bs[i] = (struct rs_pipe_batch_seq){.req_index = s->q->ref.index,
                                           .req_gen = s->q->ref.gen,
                                           .run_slot = s->q->slot,
                                           .pos0 = s->pos0,
                                           .n_tokens = s->n_tokens,
                                           .n_blocks = (end + bs_ - 1) / bs_,
                                           .tok_off = off,
                                           .want_logits = end == len,
                                           .out_index = len - s->q->n_prompt};
        if (rs_arena_read(d->sched->tokens, s->q->ref, s->pos0, s->n_tokens, tok + off, &got) !=
                RS_OK ||
            got != s->n_tokens)
            return ld_fail("commit", "request list shorter than the seq");
        off += s->n_tokens;
    }
    b->planned_ns = d->last_planned_ns = rs_clock_ns();
    *id = b->batch_id;
    if (rs_ring_commit(d->sched->batches, &wr, b->batch_id,
                       (uint32_t)rs_pipe_batch_bytes(n, total)) != RS_OK)
        return ld_fail("commit", "rs_ring_commit");
    rs_pipe_door_ring(&d->doors, RS_PIPE_STAGE_LAUNCHERD, RS_WIRE_DOOR_BATCH_READY, *id, wr.slot);
    return 0;
}

int ld_exited(struct ld *d)
{
    int st;
    if (d->pid <= 0 || waitpid(d->pid, &st, WNOHANG) != d->pid)
        return 0;
    d->pid = 0;
    d->died = 1;
    return 1;
}

const struct rs_pipe_result *ld_result(struct ld *d, int timeout_ms)
{
    uint64_t start = rs_clock_ns(), deadline = start + (uint64_t)timeout_ms * 1000000ull;
    struct rs_wire_door door;
    for (;;) {
        struct rs_ring_rd rd;
        rs_err rc = rs_ring_try_get(d->sched->results, &rd);
        if (rc == RS_OK) {
            d->last_seen_ns = rs_clock_ns();
            char err[256];
            int ok = rd.len <= sizeof(d->batch_buf) &&
                     rs_pipe_result_check(d->sched, rd.data, rd.len, err, sizeof(err)) == RS_OK;
            if (ok)
                memcpy(d->batch_buf, rd.data, rd.len);
            else
                fprintf(stderr, "launch driver: bad result record: %s\n", err);
            rs_ring_release(d->sched->results, &rd);
            return ok ? (const struct rs_pipe_result *)d->batch_buf : NULL;
        }
        if (rc != RS_EAGAIN || rs_clock_ns() > deadline || d->died)
            return NULL;
        if (ld_exited(d))
            continue; /* one more look: it may have committed just before exiting */
        if (rs_clock_ns() - start >= d->spin_ns)
            rs_pipe_door_recv(&d->doors, &door, 10);
        else
            sched_yield();
    }
}

const struct rs_pipe_result *ld_result_for(struct ld *d, uint64_t id, int timeout_ms,
                                           int *older)
{
    for (;;) {
        const struct rs_pipe_result *r = ld_result(d, timeout_ms);
        if (r == NULL || r->batch_id == id)
            return r;
        if (older != NULL)
            (*older)++;
    }
}

uint32_t ld_finish(struct ld *d, const struct ld_req *q)
{
    return atomic_load(&rs_pipe_req_at(d->sched, q->ref.index)->finish);
}

int ld_step(struct ld *d, struct ld_req *qs, uint32_t n, uint32_t inc)
{
    struct ld_seq seqs[LD_MAX_SEQS];
    uint32_t ns = 0, budget = d->cfg.max_batched_tokens;
    for (uint32_t i = 0; i < n && ns < LD_MAX_SEQS; i++) {
        uint32_t len = ld_len(d, &qs[i]);
        if (ld_finish(d, &qs[i]) != 0 || qs[i].n_computed >= len)
            continue;
        uint32_t want = len - qs[i].n_computed;
        if (want > budget)
            want = budget; /* a prefill chunk; the rest runs in later steps */
        if (want == 0)
            break;
        seqs[ns++] = (struct ld_seq){&qs[i], qs[i].n_computed, want};
        budget -= want;
    }
    if (ns == 0)
        return 3;
    uint64_t id;
    if (ld_commit(d, seqs, ns,
                  inc != 0 ? inc : rs_pipe_stage_inc(d->sched, RS_PIPE_STAGE_LAUNCHERD), &id) != 0)
        return -1;
    const struct rs_pipe_result *r = ld_result_for(d, id, 30000, NULL);
    if (r == NULL)
        return ld_fail("step", d->died ? "launcherd exited" : "no result within 30 s");
    const struct rs_pipe_result_row *rows = rs_pipe_result_rows(r);
    for (uint32_t i = 0; i < ns; i++) {
        struct ld_req *q = (struct ld_req *)seqs[i].q;
        if (r->status == RS_PIPE_RESULT_KV_LOST)
            continue;
        if (r->n_rows == ns && rows[i].req_index == q->ref.index)
            q->n_computed = rows[i].computed;
    }
    if (r->status == RS_PIPE_RESULT_KV_LOST)
        for (uint32_t i = 0; i < n; i++)
            qs[i].n_computed = 0;
    return (int)r->status;
}

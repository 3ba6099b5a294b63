/* SPDX-License-Identifier: MIT */
/*
 * The real launcherd binary driven alone (launch_driver.h): this process
 * plays tokenizerd and schedulerd on a real segment, starts, replaces and
 * SIGKILLs launcherd, and checks what it appends against the published
 * stories260K greedy ids and against the engine and sampler run in this
 * process (batch invariance and the pure sampler make them bit-identical).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ipc/pipeline_batch.h"
#include "ipc/pipeline_kv.h"
#include "ipc/pipeline_logprob.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "ipc/pipeline_result.h"
#include "ipc/wire_server.h"
#include "launcherd/engine/model.h"
#include "launcherd/engine/sampler.h"
#include "tests/integration/launch_driver.h"
#include "tests/rs_test.h"

#define N_REF 256
#define BOS 1

static struct ld D; /* large (result buffer): static */

/* The published greedy continuation of BOS (refdata/expected). */
static int load_expected(int32_t *ids)
{
    char path[512];
    if (rs_test_refdata("expected/stories260K.greedy-n256.ids", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f != NULL && n < N_REF && fscanf(f, "%d", &ids[n]) == 1)
        n++;
    if (f != NULL)
        fclose(f);
    return n == N_REF ? 0 : 1;
}

/* A fresh instance on stories260K with launcherd (one thread) serving it. */
static int setup(const char *tag, uint32_t max_seqs, uint32_t max_batched)
{
    char model[512], rundir[300], log[300];
    if (rs_test_refdata("stories260K.gguf", model, sizeof(model)) == NULL)
        return RS_TEST_SKIP;
    if (ld_config(&D, model, tag, 512, 16, max_seqs, max_batched, 0) != 0)
        return 1;
    D.extra[0] = "--threads";
    D.extra[1] = "1";
    D.extra[2] = "--deterministic"; /* outputs compare bitwise with ref_generate on a GPU too */
    D.n_extra = 3;
    snprintf(rundir, sizeof(rundir), "%s/run-%s", rs_test_tmpdir(), tag);
    snprintf(log, sizeof(log), "%s/%s.log", rs_test_tmpdir(), tag);
    char bin[300];
    snprintf(bin, sizeof(bin), "%s/launcherd", rs_test_bindir());
    if (ld_open(&D, bin, rundir, log) != 0 || ld_spawn(&D) != 0)
        return 1;
    return 0;
}

/* Whether launcherd's log contains `needle` (on a line that also contains `also`, if given). */
static int log_has(const char *needle, const char *also)
{
    FILE *f = fopen(D.log_path, "r");
    char line[2048];
    int found = 0;
    while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, needle) != NULL && (also == NULL || strstr(line, also) != NULL);
    if (f != NULL)
        fclose(f);
    return found;
}

static struct rs_sampling_params greedy(void)
{
    struct rs_sampling_params sp;
    rs_sampling_params_default(&sp);
    return sp;
}

/* Submits and admits a request with prompt [BOS] in running slot `slot`. */
static int start_req(struct ld_req *q, uint32_t slot, const struct rs_sampling_params *sp,
                     uint32_t max_tokens, const int32_t *stop_ids, uint32_t n_stop)
{
    int32_t bos = BOS;
    if (ld_submit(&D, &bos, 1, sp, max_tokens, 0, stop_ids, n_stop, q) != 0)
        return 1;
    return ld_admit(&D, q, slot) != 0;
}

/* Runs steps until every request finished; returns the number of steps or -1. */
static int run_all(struct ld_req *qs, uint32_t n)
{
    for (int steps = 0; steps < 4096; steps++) {
        int st = ld_step(&D, qs, n, 0);
        if (st == 3)
            return steps;
        if (st != RS_PIPE_RESULT_OK) {
            fprintf(stderr, "step %d: status %d\n", steps, st);
            return -1;
        }
    }
    return -1;
}

/* Output tokens of q (after its prompt) into out; returns how many. */
static int outputs(const struct ld_req *q, int32_t *out, uint32_t cap)
{
    int32_t all[600];
    int n = ld_list(&D, q, all, 600);
    if (n < (int)q->n_prompt)
        return -1;
    int m = n - (int)q->n_prompt;
    if (m > (int)cap)
        m = (int)cap;
    memcpy(out, all + q->n_prompt, (size_t)m * sizeof(int32_t));
    return m;
}

/*
 * Frees the requests as postprocd does (token arena only) and audits both
 * arenas: every chunk must be free again, so nothing the launcher wrote (its
 * token tails, logprob lists, a killed incarnation's leftovers) leaks.
 */
static int no_chunk_leaks(const struct ld_req *qs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        RS_CHECK(rs_arena_free_record(D.sched->tokens, D.sched->requests, qs[i].ref,
                                      RS_PIPE_REQ_RUNNING) == RS_OK);
    rs_arena *arenas[2] = {D.sched->tokens, D.sched->logprobs};
    for (int k = 0; k < 2; k++) {
        struct rs_arena_stats st;
        RS_CHECK(rs_arena_recover(arenas[k]) == RS_OK);
        RS_CHECK(rs_arena_check(arenas[k], &st) == RS_OK);
        RS_CHECK_MSG(st.n_free == st.n_chunks,
                     "arena %d: %llu of %u chunks free (%llu reserved, "
                     "%llu linked)",
                     k, (unsigned long long)st.n_free, st.n_chunks,
                     (unsigned long long)st.n_reserved, (unsigned long long)st.n_linked);
    }
    return 0;
}

static uint64_t counter(unsigned i)
{
    return atomic_load(&D.sched->metrics->stage[RS_PIPE_STAGE_LAUNCHERD].counter[i]);
}

static int test_greedy_decode_reproduces_published_ids(void)
{
    int32_t expect[N_REF], got[N_REF + 8];
    int rc = load_expected(expect);
    if (rc == 0)
        rc = setup("greedy", 8, 512);
    if (rc != 0)
        return rc;
    struct ld_req q;
    struct rs_sampling_params sp = greedy();
    RS_CHECK(start_req(&q, 3, &sp, N_REF, NULL, 0) == 0);
    int steps = run_all(&q, 1);
    RS_CHECK_MSG(steps == N_REF, "%d steps", steps);
    RS_CHECK(outputs(&q, got, N_REF + 8) == N_REF);
    for (int i = 0; i < N_REF; i++)
        RS_CHECK_MSG(got[i] == expect[i], "output %d: %d, published %d", i, got[i], expect[i]);
    uint32_t fin = ld_finish(&D, &q);
    RS_CHECK(rs_pipe_finish_reason(fin) == RS_WIRE_FINISH_LENGTH);
    RS_CHECK(rs_pipe_finish_who(fin) == RS_PIPE_STAGE_LAUNCHERD);
    RS_CHECK(atomic_load(&rs_pipe_req_at(D.sched, q.ref.index)->first_token_ns) != 0);
    RS_CHECK(counter(RS_M_LAU_SAMPLED) == N_REF && counter(RS_M_LAU_STEPS) == N_REF);
    RS_CHECK(log_has("loaded in", "backend cpu") || log_has("loaded in", "backend cuda"));
    RS_CHECK(log_has("ready", "after opening the pipeline"));
    /* the tail chunk is sealed: the free alone returns every chunk, no audit needed */
    RS_CHECK(rs_arena_free_record(D.sched->tokens, D.sched->requests, q.ref, RS_PIPE_REQ_RUNNING) ==
             RS_OK);
    struct rs_arena_stats st;
    RS_CHECK(rs_arena_check(D.sched->tokens, &st) == RS_OK && st.n_free == st.n_chunks);
    RS_CHECK(ld_stop(&D, SIGTERM) == 0);
    ld_close(&D);
    return 0;
}

/* The engine and sampler in this process: prompt, then n_out sampled outputs into ids. */
static int ref_generate(const int32_t *prompt, uint32_t n_prompt,
                        const struct rs_sampling_params *sp, uint32_t n_out, int32_t *ids,
                        struct rs_sample_result *res)
{
    struct rs_model_opts o;
    rs_model_opts_default(&o);
    o.n_threads = 1;
    o.backend = "auto";  /* what launcherd picks: on a GPU host both run the GPU */
    o.deterministic = 1; /* as launcherd --deterministic: bitwise the same there too */
    rs_model *m = NULL;
    rs_kvcache *kv = NULL;
    rs_sampler *smp = NULL;
    char err[256];
    uint32_t total = n_prompt + n_out, nb = (total + 15) / 16, table[64];
    if (nb > 64 || rs_model_load(D.cfg.model_path, &o, &m, err, sizeof(err)) != RS_OK ||
        rs_kvcache_create(m, nb, 16, &kv) != RS_OK ||
        rs_sampler_create((int32_t)D.cfg.n_vocab, &smp) != RS_OK)
        return 1;
    for (uint32_t j = 0; j < nb; j++)
        table[j] = j;
    float *lg = malloc(D.cfg.n_vocab * sizeof(float));
    memcpy(ids, prompt, n_prompt * sizeof(int32_t));
    int rc = lg == NULL;
    uint32_t pos = 0, len = n_prompt;
    for (uint32_t k = 0; rc == 0 && k < n_out; k++) {
        struct rs_model_seq s = {ids + pos, len - pos, pos, table, nb, 1};
        if (rs_model_step(m, kv, &s, 1) != RS_OK) {
            rc = 1;
            break;
        }
        pos = len;
        memcpy(lg, rs_model_logits(m, 0), D.cfg.n_vocab * sizeof(float));
        if (rs_sampler_sample(smp, sp, lg, ids, n_prompt, k, k, &res[k]) != RS_OK)
            rc = 1;
        ids[len++] = res[k].token;
    }
    free(lg);
    rs_sampler_destroy(&smp);
    rs_kvcache_destroy(&kv);
    rs_model_destroy(&m);
    return rc;
}

static int check_logprobs(const struct ld_req *q, const int32_t *out,
                          const struct rs_sample_result *res, uint32_t n)
{
    for (uint32_t k = 0; k < n; k++) {
        struct rs_wire_logprob lp;
        rs_err rc = rs_pipe_logprob_read(D.sched, q->ref, k, out[k], &lp);
        RS_CHECK_MSG(rc == RS_OK, "entry %u: %s", k, rs_strerror(rc));
        RS_CHECK(lp.token == (uint32_t)res[k].token && lp.logprob == res[k].logprob);
        RS_CHECK(lp.n_top == (uint32_t)res[k].n_top && lp.n_top > 0);
        for (uint32_t i = 0; i < lp.n_top; i++)
            RS_CHECK(lp.top_ids[i] == (uint32_t)res[k].top_ids[i] &&
                     lp.top_logprobs[i] == res[k].top_logprobs[i]);
    }
    struct rs_wire_logprob lp;
    RS_CHECK(rs_pipe_logprob_read(D.sched, q->ref, n, 0, &lp) == RS_ENOENT);
    return 0;
}

/*
 * q's outputs (all max_tokens, or fewer ending in a stop) equal the engine and
 * sampler run here; so do its logprob entries; published: the expected ids.
 */
static int same_as_in_process(const struct ld_req *q, const struct rs_sampling_params *sp,
                              uint32_t max_tokens, const int32_t *published)
{
    static int32_t out[N_REF], ref[N_REF + 1];
    static struct rs_sample_result res[N_REF];
    int32_t bos = BOS;
    int n = outputs(q, out, N_REF);
    RS_CHECK(n > 0 && (uint32_t)n <= max_tokens);
    uint32_t why = rs_pipe_finish_reason(ld_finish(&D, q));
    RS_CHECK_MSG((uint32_t)n == max_tokens ? why == RS_WIRE_FINISH_LENGTH
                                           : why == RS_WIRE_FINISH_STOP && out[n - 1] == 2,
                 "%d outputs, finish %u", n, why);
    RS_CHECK(ref_generate(&bos, 1, sp, (uint32_t)n, ref, res) == 0);
    for (int k = 0; k < n; k++)
        RS_CHECK_MSG(out[k] == ref[1 + k], "output %d: %d, in-process %d", k, out[k], ref[1 + k]);
    if (published != NULL)
        RS_CHECK(memcmp(out, published, (size_t)n * sizeof(int32_t)) == 0);
    struct rs_wire_logprob lp;
    if (sp->n_logprobs > 0)
        return check_logprobs(q, out, res, (uint32_t)n);
    RS_CHECK(rs_pipe_logprob_read(D.sched, q->ref, 0, out[0], &lp) == RS_ENOENT);
    return 0;
}

static int test_companions_match_in_process_sampling(void)
{
    enum { N = 4, OUT = 48 };
    int32_t expect[N_REF];
    int rc = load_expected(expect);
    if (rc == 0)
        rc = setup("companions", 8, 512);
    if (rc != 0)
        return rc;
    struct rs_sampling_params sp[N];
    for (int i = 0; i < N; i++)
        sp[i] = greedy();
    sp[1].temperature = 0.9f;
    sp[1].seed = 7;
    sp[1].n_logprobs = 5;
    sp[2].temperature = 0.7f;
    sp[2].top_k = 40;
    sp[2].top_p = 0.9f;
    sp[2].repetition_penalty = 1.3f;
    sp[2].frequency_penalty = 0.2f;
    sp[2].seed = 99;
    sp[3].presence_penalty = 0.5f;
    sp[3].n_logprobs = 20;
    struct ld_req q[N];
    for (int i = 0; i < N; i++)
        RS_CHECK(start_req(&q[i], (uint32_t)(7 - i), &sp[i], OUT, NULL, 0) == 0);
    RS_CHECK(run_all(q, N) > 0);
    for (int i = 0; i < N; i++)
        RS_CHECK_MSG(same_as_in_process(&q[i], &sp[i], OUT, i == 0 ? expect : NULL) == 0,
                     "request %d", i);
    RS_CHECK(no_chunk_leaks(q, N) == 0);
    ld_close(&D);
    return 0;
}

static int test_stale_incarnation_gets_kv_lost(void)
{
    int rc = setup("kvlost", 8, 512);
    if (rc != 0)
        return rc;
    struct ld_req q;
    struct rs_sampling_params sp = greedy();
    RS_CHECK(start_req(&q, 0, &sp, 64, NULL, 0) == 0);
    RS_CHECK(ld_step(&D, &q, 1, 0) == RS_PIPE_RESULT_OK);
    RS_CHECK(ld_step(&D, &q, 1, 0) == RS_PIPE_RESULT_OK);
    uint32_t len = ld_len(&D, &q), inc = D.inc;
    uint32_t stale[2] = {inc - 1, 0}; /* an earlier launcher; no launcher when planned */
    for (int i = 0; i < 2; i++) {
        struct ld_seq s = {&q, q.n_computed, len - q.n_computed};
        uint64_t id;
        RS_CHECK(ld_commit(&D, &s, 1, stale[i], &id) == 0);
        const struct rs_pipe_result *r = ld_result_for(&D, id, 30000, NULL);
        RS_CHECK(r != NULL && r->status == RS_PIPE_RESULT_KV_LOST && r->n_rows == 1);
        RS_CHECK(r->launcher_inc == inc);
        const struct rs_pipe_result_row *row = rs_pipe_result_rows(r);
        RS_CHECK(row->token == -1 && row->computed == 0 && row->n_tokens == len);
        RS_CHECK(row->req_index == q.ref.index && row->req_gen == q.ref.gen);
        RS_CHECK(ld_len(&D, &q) == len); /* nothing ran */
    }
    RS_CHECK(counter(RS_M_LAU_KV_LOST) == 2);
    q.n_computed = 0; /* re-prefill, as schedulerd does after KV_LOST */
    RS_CHECK(ld_step(&D, &q, 1, 0) == RS_PIPE_RESULT_OK);
    RS_CHECK(ld_len(&D, &q) == len + 1 && q.n_computed == len);
    ld_close(&D);
    return 0;
}

/*
 * SIGKILLs launcherd at random moments after committing a batch, restarts
 * it, and re-prefills like schedulerd; the tokens must equal the published
 * greedy ids anyway (nothing lost, nothing appended twice).
 */
static int test_sigkill_mid_step_then_reprefill_continues(void)
{
    int32_t expect[N_REF], got[N_REF + 8];
    int rc = load_expected(expect);
    if (rc == 0)
        rc = setup("sigkill", 8, 512);
    if (rc != 0)
        return rc;
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    struct ld_req q[2];
    struct rs_sampling_params sp = greedy(), sp2 = greedy();
    sp2.temperature = 1.0f;
    sp2.seed = 5;
    RS_CHECK(start_req(&q[0], 1, &sp, N_REF, NULL, 0) == 0);
    RS_CHECK(start_req(&q[1], 2, &sp2, 200, NULL, 0) == 0);
    int kills = 0, answered_before = 0;
    for (int step = 0; step < 2000; step++) {
        if (step % 37 != 20 || kills >= 6) {
            int st = ld_step(&D, q, 2, 0);
            if (st == 3)
                break;
            RS_CHECK_MSG(st == RS_PIPE_RESULT_OK || st == RS_PIPE_RESULT_KV_LOST, "status %d", st);
            continue;
        }
        /* commit a step, kill launcherd somewhere in it, restart, then re-prefill everything */
        struct ld_seq s[2];
        uint32_t ns = 0;
        for (int i = 0; i < 2; i++) {
            uint32_t len = ld_len(&D, &q[i]);
            if (ld_finish(&D, &q[i]) == 0 && q[i].n_computed < len)
                s[ns++] = (struct ld_seq){&q[i], q[i].n_computed, len - q[i].n_computed};
        }
        uint64_t id;
        RS_CHECK(ns > 0 && ld_commit(&D, s, ns, D.inc, &id) == 0);
        static const int spread_us[] = {1, 30, 100, 300, 1000, 3000};
        usleep((useconds_t)(rand() % spread_us[kills % 6]));
        RS_CHECK(ld_stop(&D, SIGKILL) == 128 + SIGKILL);
        kills++;
        RS_CHECK(ld_spawn(&D) == 0);
        for (int i = 0; i < 2; i++)
            q[i].n_computed = 0;
        /* the killed batch's answer (if it got out) and the new launcher's KV_LOST come first */
        const struct rs_pipe_result *r = ld_result(&D, 30000);
        RS_CHECK(r != NULL && r->batch_id == id);
        answered_before += r->status == RS_PIPE_RESULT_OK;
        int st = ld_step(&D, q, 2, 0);
        RS_CHECK(st == RS_PIPE_RESULT_OK);
    }
    fprintf(stderr, "seed %u: %d kills, %d batches answered before the kill\n", seed, kills,
            answered_before);
    RS_CHECK(kills == 6);
    RS_CHECK(outputs(&q[0], got, N_REF + 8) == N_REF);
    for (int i = 0; i < N_REF; i++)
        RS_CHECK_MSG(got[i] == expect[i], "output %d: %d, published %d", i, got[i], expect[i]);
    RS_CHECK(same_as_in_process(&q[1], &sp2, 200, NULL) == 0);
    RS_CHECK(no_chunk_leaks(q, 2) == 0);
    ld_close(&D);
    return 0;
}

/*
 * launcherd kills itself at named points (RS_FAILPOINT: its own between the
 * step, the logprob append, the token append and the result commit, and the
 * ring's and arena's inside them); after each death a clean restart and a
 * re-prefill must continue with exactly the tokens of a run without crashes.
 */
static int test_failpoints_then_reprefill_continue(void)
{
    static const char *const points[] = {
        "launcher.step.after_forward:3",  "launcher.row.after_logprobs:4",
        "launcher.row.after_append:5",    "launcher.result.before_commit:6",
        "launcher.result.after_commit:7", "arena.append.written:9",
        "arena.append.after_publish:10",  "arena.adopt.after_cas:2",
        "ring.get.after_cas:8",           "ring.commit.after:5",
        "ring.release.after:11",          "launcher.row.after_append:1",
    };
    enum { N_POINTS = sizeof(points) / sizeof(points[0]) };
    int32_t expect[N_REF];
    int rc = load_expected(expect);
    if (rc == 0)
        rc = setup("failpoints", 8, 512);
    if (rc != 0)
        return rc;
    struct rs_sampling_params sp[3] = {greedy(), greedy(), greedy()};
    sp[1].temperature = 0.8f;
    sp[1].seed = 11;
    sp[1].n_logprobs = 4;
    sp[2].temperature = 1.1f;
    sp[2].top_p = 0.95f;
    sp[2].repetition_penalty = 1.2f;
    sp[2].seed = 12;
    sp[2].n_logprobs = 1;
    struct ld_req q[3];
    for (int i = 0; i < 3; i++)
        RS_CHECK(start_req(&q[i], (uint32_t)i, &sp[i], i == 0 ? N_REF : 150, NULL, 0) == 0);
    int deaths = 0, next = 0;
    D.failpoint = points[next++];
    RS_CHECK(ld_stop(&D, SIGTERM) == 0 && ld_spawn(&D) == 0);
    for (int step = 0; step < 4000; step++) {
        int st = ld_step(&D, q, 3, 0);
        if (st == 3)
            break;
        if (st < 0 && D.died) { /* it killed itself: restart (armed with the next point) */
            deaths++;
            fprintf(stderr, "launcherd died at %s\n", D.failpoint);
            D.failpoint = next < N_POINTS ? points[next++] : NULL;
            RS_CHECK(ld_spawn(&D) == 0);
            for (int i = 0; i < 3; i++)
                q[i].n_computed = 0;
            continue;
        }
        RS_CHECK_MSG(st == RS_PIPE_RESULT_OK || st == RS_PIPE_RESULT_KV_LOST, "status %d", st);
    }
    fprintf(stderr, "%d failpoint deaths\n", deaths);
    RS_CHECK(deaths == N_POINTS); /* every point fired (a renamed label would not) */
    RS_CHECK(same_as_in_process(&q[0], &sp[0], N_REF, expect) == 0);
    RS_CHECK(same_as_in_process(&q[1], &sp[1], 150, NULL) == 0);
    RS_CHECK(same_as_in_process(&q[2], &sp[2], 150, NULL) == 0);
    RS_CHECK(no_chunk_leaks(q, 3) == 0);
    D.failpoint = NULL;
    ld_close(&D);
    return 0;
}

/* Commits a hand-made batch record of len bytes and returns its result. */
static const struct rs_pipe_result *raw_batch(const void *rec, uint32_t len, uint64_t id)
{
    struct rs_ring_wr wr;
    if (rs_ring_try_claim(D.sched->batches, &wr) != RS_OK || len > wr.cap)
        return NULL;
    memcpy(wr.data, rec, len);
    if (rs_ring_commit(D.sched->batches, &wr, id, len) != RS_OK)
        return NULL;
    rs_pipe_door_ring(&D.doors, RS_PIPE_STAGE_LAUNCHERD, RS_WIRE_DOOR_BATCH_READY, id, wr.slot);
    return ld_result_for(&D, id, 30000, NULL);
}

static int test_malformed_batch_is_rejected_and_serving_continues(void)
{
    int rc = setup("malformed", 8, 512);
    if (rc != 0)
        return rc;
    struct ld_req q;
    struct rs_sampling_params sp = greedy();
    RS_CHECK(start_req(&q, 0, &sp, 64, NULL, 0) == 0);
    union {
        struct rs_pipe_batch b;
        uint64_t words[512];
    } u;
    for (int bad = 0; bad < 5; bad++) {
        memset(&u, 0, sizeof(u));
        uint64_t id = 1000 + (uint64_t)bad;
        u.b = (struct rs_pipe_batch){
            .batch_id = id, .launcher_inc = D.inc, .n_seqs = 1, .n_tokens = 1};
        *rs_pipe_batch_seqs(&u.b) = (struct rs_pipe_batch_seq){.req_index = q.ref.index,
                                                               .req_gen = q.ref.gen,
                                                               .run_slot = 0,
                                                               .n_tokens = 1,
                                                               .n_blocks = 1,
                                                               .want_logits = 1};
        rs_pipe_batch_tokens(&u.b)[0] = BOS;
        uint32_t len = (uint32_t)rs_pipe_batch_bytes(1, 1);
        if (bad == 0)
            rs_pipe_batch_tokens(&u.b)[0] = (int32_t)D.cfg.n_vocab; /* token outside the vocab */
        else if (bad == 1)
            len -= 4; /* truncated */
        else if (bad == 2)
            u.b.n_seqs = 0;
        else if (bad == 3)
            rs_pipe_batch_seqs(&u.b)->run_slot = D.cfg.max_seqs; /* no such KV row */
        else
            u.b.batch_id = 7; /* disagrees with the ring record's id */
        const struct rs_pipe_result *r = raw_batch(&u, len, id);
        RS_CHECK_MSG(r != NULL && r->status == RS_PIPE_RESULT_ERROR && r->n_rows == 0,
                     "malformed batch %d", bad);
        char tag[64];
        snprintf(tag, sizeof(tag), "batch=%llu", (unsigned long long)id);
        RS_CHECK_MSG(log_has("batch rejected", tag), "no log line for batch %llu",
                     (unsigned long long)id);
        RS_CHECK(ld_len(&D, &q) == 1 && ld_finish(&D, &q) == 0);
    }
    RS_CHECK(counter(RS_M_LAU_REJECTED) == 5);
    for (int i = 0; i < 3; i++) /* still serving */
        RS_CHECK(ld_step(&D, &q, 1, 0) == RS_PIPE_RESULT_OK);
    RS_CHECK(ld_len(&D, &q) == 4);
    RS_CHECK(kill(D.pid, 0) == 0);
    ld_close(&D);
    return 0;
}

static int test_bad_seq_fails_its_request_alone(void)
{
    int rc = setup("badseq", 8, 512);
    if (rc != 0)
        return rc;
    struct ld_req q[2];
    struct rs_sampling_params sp = greedy();
    RS_CHECK(start_req(&q[0], 0, &sp, 64, NULL, 0) == 0);
    RS_CHECK(start_req(&q[1], 1, &sp, 64, NULL, 0) == 0);
    RS_CHECK(ld_step(&D, q, 2, 0) == RS_PIPE_RESULT_OK);
    /* schedulerd bug: request 1's KV row now names another request */
    struct rs_pipe_kvrow *row = rs_pipe_kvrow_at(D.sched, 1);
    atomic_store(&row->owner, rs_table_ref_pack(q[0].ref) + 1);
    int st = ld_step(&D, q, 2, 0);
    RS_CHECK(st == RS_PIPE_RESULT_ERROR);
    const struct rs_pipe_result *r = (const struct rs_pipe_result *)D.batch_buf;
    const struct rs_pipe_result_row *rows = rs_pipe_result_rows(r);
    RS_CHECK(r->n_rows == 2 && rows[0].token >= 0 && rows[1].token == -1);
    RS_CHECK(rows[1].computed == 1); /* K/V unchanged: its step did not run */
    uint32_t fin = ld_finish(&D, &q[1]);
    RS_CHECK(rs_pipe_finish_reason(fin) == RS_WIRE_FINISH_ERROR);
    RS_CHECK(rs_pipe_finish_who(fin) == RS_PIPE_STAGE_LAUNCHERD);
    RS_CHECK(ld_finish(&D, &q[0]) == 0 && ld_len(&D, &q[0]) == 3 && ld_len(&D, &q[1]) == 2);
    RS_CHECK(log_has("request failed", "KV table row belongs to another request"));
    RS_CHECK(ld_step(&D, q, 2, 0) == RS_PIPE_RESULT_OK); /* the other one carries on */
    RS_CHECK(ld_len(&D, &q[0]) == 4);
    ld_close(&D);
    return 0;
}

static int test_list_held_by_a_live_writer_fails_the_request(void)
{
    int rc = setup("unsealed", 8, 512);
    if (rc != 0)
        return rc;
    struct ld_req q[2];
    struct rs_sampling_params sp = greedy();
    RS_CHECK(start_req(&q[0], 0, &sp, 64, NULL, 0) == 0);
    RS_CHECK(start_req(&q[1], 1, &sp, 64, NULL, 0) == 0);
    /* a tokenizerd bug: it appends to the published prompt and never seals it again */
    int32_t extra = 300;
    RS_CHECK(rs_arena_append(D.tok->tokens, q[1].ref, &extra, 1) == RS_OK);
    rs_pipe_req_at(D.tok, q[1].ref.index)->n_prompt = 2;
    q[1].n_prompt = 2;
    RS_CHECK(ld_step(&D, q, 2, 0) == RS_PIPE_RESULT_OK);
    const struct rs_pipe_result *r = (const struct rs_pipe_result *)D.batch_buf;
    RS_CHECK(rs_pipe_result_rows(r)[0].token >= 0 && rs_pipe_result_rows(r)[1].token == -1);
    RS_CHECK(rs_pipe_finish_reason(ld_finish(&D, &q[1])) == RS_WIRE_FINISH_ERROR);
    RS_CHECK(ld_len(&D, &q[1]) == 2 && ld_finish(&D, &q[0]) == 0);
    RS_CHECK(log_has("request failed", "written by another process"));
    RS_CHECK(counter(RS_M_LAU_SEQ_ERRORS) == 1);
    ld_close(&D);
    return 0;
}

static int test_redone_step_keeps_the_token(void)
{
    int rc = setup("redo", 8, 512);
    if (rc != 0)
        return rc;
    struct ld_req q;
    struct rs_sampling_params sp = greedy();
    sp.temperature = 1.0f;
    sp.seed = 3;
    sp.n_logprobs = 3;
    RS_CHECK(start_req(&q, 0, &sp, 64, NULL, 0) == 0);
    for (int i = 0; i < 5; i++)
        RS_CHECK(ld_step(&D, &q, 1, 0) == RS_PIPE_RESULT_OK);
    uint32_t len = ld_len(&D, &q);
    /* the same decode planned twice (e.g. by a schedulerd that lost the first result) */
    struct ld_seq s = {&q, len - 1, 1};
    uint64_t id1, id2;
    RS_CHECK(ld_commit(&D, &s, 1, D.inc, &id1) == 0);
    const struct rs_pipe_result *r = ld_result_for(&D, id1, 30000, NULL);
    RS_CHECK(r != NULL && r->status == RS_PIPE_RESULT_OK);
    int32_t tok = rs_pipe_result_rows(r)->token;
    RS_CHECK(tok >= 0 && ld_len(&D, &q) == len + 1);
    s.n_tokens = 1;
    s.pos0 = len - 1;
    /* ld_commit derives out_index from the list, which now holds it: plan it by hand */
    struct rs_ring_wr wr;
    RS_CHECK(rs_ring_try_claim(D.sched->batches, &wr) == RS_OK);
    struct rs_pipe_batch *b = wr.data;
    id2 = id1 + 100;
    *b = (struct rs_pipe_batch){.batch_id = id2, .launcher_inc = D.inc, .n_seqs = 1, .n_tokens = 1};
    *rs_pipe_batch_seqs(b) = (struct rs_pipe_batch_seq){.req_index = q.ref.index,
                                                        .req_gen = q.ref.gen,
                                                        .run_slot = 0,
                                                        .pos0 = len - 1,
                                                        .n_tokens = 1,
                                                        .n_blocks = (len + 15) / 16,
                                                        .want_logits = 1,
                                                        .out_index = len - 1};
    int32_t last;
    uint32_t got;
    RS_CHECK(rs_arena_read(D.sched->tokens, q.ref, len - 1, 1, &last, &got) == RS_OK);
    rs_pipe_batch_tokens(b)[0] = last;
    RS_CHECK(rs_ring_commit(D.sched->batches, &wr, id2, (uint32_t)rs_pipe_batch_bytes(1, 1)) ==
             RS_OK);
    r = ld_result_for(&D, id2, 30000, NULL);
    RS_CHECK(r != NULL && r->status == RS_PIPE_RESULT_OK);
    RS_CHECK(rs_pipe_result_rows(r)->token == tok && rs_pipe_result_rows(r)->n_tokens == len + 1);
    RS_CHECK(ld_len(&D, &q) == len + 1 && counter(RS_M_LAU_REDONE) == 1);
    struct rs_wire_logprob lp;
    RS_CHECK(rs_pipe_logprob_read(D.sched, q.ref, len - 1, tok, &lp) == RS_OK);
    RS_CHECK(rs_pipe_logprob_read(D.sched, q.ref, len, 0, &lp) == RS_ENOENT);
    ld_close(&D);
    return 0;
}

static int test_stop_id_and_max_tokens_finish(void)
{
    int32_t expect[N_REF];
    int rc = load_expected(expect);
    if (rc == 0)
        rc = setup("stop", 8, 512);
    if (rc != 0)
        return rc;
    int32_t stop = expect[10];
    int first = 0;
    while (expect[first] != stop)
        first++;
    struct ld_req q[2];
    struct rs_sampling_params sp = greedy();
    int32_t ids[20];
    for (int i = 0; i < 20; i++) /* the stop id past stop.h's 16 */
        ids[i] = i == 19 ? stop : 3 + i;
    RS_CHECK(start_req(&q[0], 0, &sp, N_REF, ids, 20) == 0);
    RS_CHECK(start_req(&q[1], 1, &sp, 7, NULL, 0) == 0);
    RS_CHECK(run_all(q, 2) > 0);
    int32_t out[N_REF];
    RS_CHECK(outputs(&q[0], out, N_REF) == first + 1 && out[first] == stop);
    RS_CHECK(rs_pipe_finish_reason(ld_finish(&D, &q[0])) == RS_WIRE_FINISH_STOP);
    RS_CHECK(outputs(&q[1], out, N_REF) == 7);
    RS_CHECK(rs_pipe_finish_reason(ld_finish(&D, &q[1])) == RS_WIRE_FINISH_LENGTH);
    RS_CHECK(counter(RS_M_LAU_FINISHED) == 2);
    ld_close(&D);
    return 0;
}

static int test_cancelled_request_gets_no_more_tokens(void)
{
    int rc = setup("cancel", 8, 512);
    if (rc != 0)
        return rc;
    struct ld_req q;
    struct rs_sampling_params sp = greedy();
    RS_CHECK(start_req(&q, 0, &sp, 64, NULL, 0) == 0);
    RS_CHECK(ld_step(&D, &q, 1, 0) == RS_PIPE_RESULT_OK);
    uint32_t len = ld_len(&D, &q);
    struct rs_pipe_req *r = rs_pipe_req_at(D.tok, q.ref.index);
    RS_CHECK(rs_pipe_finish_set(
        r, rs_pipe_finish_make(RS_WIRE_FINISH_ABORT, RS_PIPE_STAGE_TOKENIZERD, 0)));
    struct ld_seq s = {&q, q.n_computed, len - q.n_computed};
    uint64_t id;
    RS_CHECK(ld_commit(&D, &s, 1, D.inc, &id) == 0);
    const struct rs_pipe_result *res = ld_result_for(&D, id, 30000, NULL);
    RS_CHECK(res != NULL && res->status == RS_PIPE_RESULT_OK);
    RS_CHECK(rs_pipe_result_rows(res)->token == -1 && rs_pipe_result_rows(res)->computed == len);
    RS_CHECK(ld_len(&D, &q) == len);
    RS_CHECK(rs_pipe_finish_who(ld_finish(&D, &q)) == RS_PIPE_STAGE_TOKENIZERD);
    ld_close(&D);
    return 0;
}

static int test_fenced_launcher_exits_without_writing(void)
{
    int rc = setup("fenced", 8, 512);
    if (rc != 0)
        return rc;
    struct ld_req q0;
    struct rs_sampling_params sp0 = greedy();
    RS_CHECK(start_req(&q0, 1, &sp0, 64, NULL, 0) == 0);
    RS_CHECK(ld_step(&D, &q0, 1, 0) == RS_PIPE_RESULT_OK);
    RS_CHECK(kill(D.pid, SIGSTOP) == 0);
    /* While it is stopped, another incarnation takes the launcher role (the fence), and a
     * batch planned for the stopped one is committed: it must never be answered by it. */
    struct rs_pipe *usurper;
    char err[256];
    RS_CHECK(rs_pipe_open(&D.cfg, RS_PIPE_STAGE_LAUNCHERD, &usurper, err, sizeof(err)) == RS_OK);
    uint32_t len = ld_len(&D, &q0);
    struct ld_seq s = {&q0, q0.n_computed, len - q0.n_computed};
    uint64_t id;
    RS_CHECK(ld_commit(&D, &s, 1, D.inc, &id) == 0);
    RS_CHECK(kill(D.pid, SIGCONT) == 0);
    int st = 0;
    for (int ms = 0; ms < 10000 && waitpid(D.pid, &st, WNOHANG) == 0; ms++)
        usleep(1000);
    D.pid = 0;
    RS_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    RS_CHECK(log_has("fenced", NULL));
    RS_CHECK(ld_len(&D, &q0) == len); /* it appended nothing */
    struct rs_ring_rd rd;
    RS_CHECK(rs_ring_try_get(D.sched->results, &rd) == RS_EAGAIN); /* and answered nothing */
    rs_pipe_close(&usurper);
    RS_CHECK(ld_spawn(&D) == 0); /* a real launcher again: answers the batch KV_LOST */
    const struct rs_pipe_result *r = ld_result(&D, 30000);
    RS_CHECK(r != NULL && r->batch_id == id && r->status == RS_PIPE_RESULT_KV_LOST);
    struct ld_req q;
    struct rs_sampling_params sp = greedy();
    RS_CHECK(start_req(&q, 0, &sp, 4, NULL, 0) == 0);
    RS_CHECK(run_all(&q, 1) == 4);
    ld_close(&D);
    return 0;
}

static int run_cmd(const char *const *argv, const char *out_path)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int file_has(const char *path, const char *needle)
{
    char buf[8192];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    return strstr(buf, needle) != NULL;
}

static int test_bad_arguments_exit_2(void)
{
    char bin[300], out[300], model[512];
    if (rs_test_refdata("stories260K.gguf", model, sizeof(model)) == NULL)
        return RS_TEST_SKIP;
    snprintf(bin, sizeof(bin), "%s/launcherd", rs_test_bindir());
    snprintf(out, sizeof(out), "%s/args.out", rs_test_tmpdir());
    const char *help[] = {bin, "--help", NULL};
    RS_CHECK(run_cmd(help, out) == 0 && file_has(out, "--threads") && file_has(out, "--kv-blocks"));
    const char *unknown[] = {bin, "--model", model, "--frobnicate", NULL};
    RS_CHECK(run_cmd(unknown, out) == 2 && file_has(out, "unknown option '--frobnicate'"));
    const char *threads[] = {bin, "--model", model, "--threads", "many", NULL};
    RS_CHECK(run_cmd(threads, out) == 2 && file_has(out, "--threads"));
    const char *nomodel[] = {bin, "--threads", "1", NULL};
    RS_CHECK(run_cmd(nomodel, out) == 2 && file_has(out, "--model"));
    const char *missing[] = {bin, "--model", "/nonexistent.gguf", NULL};
    RS_CHECK(run_cmd(missing, out) == 2 && file_has(out, "nonexistent"));
    const char *novalue[] = {bin, "--model", model, "--isa", NULL};
    RS_CHECK(run_cmd(novalue, out) == 2 && file_has(out, "needs a value"));
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_greedy_decode_reproduces_published_ids),
    RS_TEST(test_companions_match_in_process_sampling),
    RS_TEST(test_stale_incarnation_gets_kv_lost),
    RS_TEST(test_sigkill_mid_step_then_reprefill_continues),
    RS_TEST(test_malformed_batch_is_rejected_and_serving_continues),
    RS_TEST(test_bad_seq_fails_its_request_alone),
    RS_TEST(test_list_held_by_a_live_writer_fails_the_request),
    RS_TEST(test_redone_step_keeps_the_token),
    RS_TEST(test_stop_id_and_max_tokens_finish),
    RS_TEST(test_cancelled_request_gets_no_more_tokens),
    RS_TEST(test_fenced_launcher_exits_without_writing),
    RS_TEST(test_failpoints_then_reprefill_continue),
    RS_TEST(test_bad_arguments_exit_2),
};
RS_TEST_MAIN(cases)

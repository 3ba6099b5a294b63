/* SPDX-License-Identifier: MIT */
/*
 * The whole pipeline through the four real daemons on stories260K, each output
 * checked against its solo run computed in-process (tests/solo_ref.h): 32
 * mixed concurrent clients; a cancel mid-stream returns every KV block; a pool
 * that forces preemption; a prefix-cache hit (fewer prefilled tokens); bad
 * messages and parameters refused while good requests complete; a full table
 * answers "overloaded". Each case ends with rs_harness_audit. The CLI's
 * published text, 10 clients, cancel-with-abort and the client-side crash
 * cases are it.client.* (test_client.c), not repeated here.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/client.h"
#include "common/clock.h"
#include "ipc/pipeline.h"
#include "ipc/pipeline_metrics.h"
#include "tests/integration/front_fixture.h"
#include "tests/pipeline_harness.h"
#include "tests/rs_test.h"
#include "tests/solo_ref.h"
#include "tests/stream_rec.h"

#define MODEL "stories260K.gguf"
#define CTX 512
#define LINGER "300" /* postprocd --linger-ms: records are freed soon after their final */

/* One request: what was asked, its solo output, and what the client delivered. */
struct job {
    struct rs_wire_generate g;
    struct solo_out ref;
    struct stream_rec s; /* what the client delivered */
};

static void on_event(const struct rs_client_event *ev)
{
    stream_rec_add(&((struct job *)ev->user)->s, ev);
}

static void job_fini(struct job *j)
{
    solo_out_fini(&j->ref);
    rs_client_result_fini(&j->s.res);
}

static int start(struct rs_harness *h, uint32_t max_requests, uint32_t kv_blocks, uint32_t max_seqs)
{
    static char model[512];
    struct rs_harness_opts o = {0};
    if (rs_test_refdata(MODEL, model, sizeof(model)) == NULL)
        return RS_TEST_SKIP;
    o.model = model;
    o.n_ctx = CTX;
    o.max_requests = max_requests;
    o.n_kv_blocks = kv_blocks;
    o.max_seqs = max_seqs;
    o.extra[RS_PIPE_STAGE_POSTPROCD][0] = "--linger-ms";
    o.extra[RS_PIPE_STAGE_POSTPROCD][1] = LINGER;
    o.extra[RS_PIPE_STAGE_TOKENIZERD][0] = "--owner-share"; /* one client sees the whole table */
    o.extra[RS_PIPE_STAGE_TOKENIZERD][1] = "100";
    return rs_harness_start(h, &o) == RS_OK ? 0 : 1;
}

static rs_client *client_of(const struct rs_harness *h)
{
    return rs_harness_client(h, 180000);
}

/* Solo outputs of jobs[0..n), from the engine in this process. */
static int references(struct job *jobs, uint32_t n)
{
    char model[512];
    struct solo_ref s;
    if (rs_test_refdata(MODEL, model, sizeof(model)) == NULL || solo_open(&s, model, CTX) != 0)
        return 1;
    int failed = 0;
    for (uint32_t i = 0; i < n && !failed; i++)
        failed = solo_run(&s, &jobs[i].g, &jobs[i].ref) != 0;
    solo_close(&s);
    return failed;
}

/* j delivered exactly its solo output: every delta once and in order, one final. */
static int same_as_solo(const struct job *j, const char *what)
{
    const struct rs_client_result *r = &j->s.res;
    RS_CHECK_MSG(j->s.n_finals == 1 && !j->s.out_of_order, "%s: %u finals, out of order %d", what,
                 j->s.n_finals, j->s.out_of_order);
    RS_CHECK_MSG(r->status == RS_CLIENT_OK, "%s: status %s (%s: %s)", what,
                 rs_client_status_name(r->status), rs_wire_code_name(r->error), r->message);
    RS_CHECK_MSG(r->finish_reason == j->ref.finish, "%s: finish %s, solo %s", what,
                 rs_wire_finish_name(r->finish_reason), rs_wire_finish_name(j->ref.finish));
    RS_CHECK_MSG(r->n_tokens == j->ref.n_tokens &&
                     memcmp(r->tokens, j->ref.tokens, r->n_tokens * sizeof(int32_t)) == 0,
                 "%s: %u tokens differ from the solo run's %u", what, r->n_tokens, j->ref.n_tokens);
    RS_CHECK_MSG(r->text_len == j->ref.text_len && memcmp(r->text, j->ref.text, r->text_len) == 0,
                 "%s: text differs:\n%s\n---- solo ----\n%s", what, r->text, j->ref.text);
    RS_CHECK_MSG(r->usage.completion_tokens == j->ref.n_tokens &&
                     r->usage.prompt_tokens == j->ref.n_prompt,
                 "%s: usage %u + %u, solo %u + %u", what, r->usage.prompt_tokens,
                 r->usage.completion_tokens, j->ref.n_prompt, j->ref.n_tokens);
    RS_CHECK_MSG(j->g.stream || j->s.n_deltas == 0, "%s: %u deltas for a non-streamed request",
                 what, j->s.n_deltas);
    return 0;
}

/* Polls cs until every job has its final or limit_ms passed; 0 when all did. */
static int wait_jobs(rs_client *const *cs, size_t n_clients, const struct job *jobs, uint32_t n,
                     uint32_t limit_ms)
{
    uint64_t end = rs_clock_ms() + limit_ms;
    for (;;) {
        uint32_t done = 0;
        for (uint32_t i = 0; i < n; i++)
            done += jobs[i].s.n_finals > 0;
        if (done == n)
            return 0;
        if (rs_clock_ms() >= end || rs_client_poll_set(cs, n_clients, 50) < 0) {
            fprintf(stderr, "%u of %u requests finished\n", done, n);
            return 1;
        }
    }
}

/* Waits (up to 10 s) until no record is left (lingering ones included), then audits. */
static int audit_idle(struct rs_harness *h)
{
    struct rs_harness_audit a;
    struct rs_pipe *v = rs_harness_view(h);
    struct rs_table_stats st = {0};
    for (uint64_t end = rs_clock_ms() + 10000; v != NULL && rs_clock_ms() < end; usleep(20000))
        if (rs_table_check(v->requests, &st) == RS_OK && st.n_state[RS_TABLE_FREE] == st.n_records)
            break;
    usleep(50000); /* the last free's chunk unlinks and schedulerd's next gauges */
    return rs_harness_audit(h, &a);
}

static uint64_t counter(struct rs_harness *h, enum rs_pipe_stage s, unsigned i)
{
    struct rs_pipe *v = rs_harness_view(h);
    return v != NULL ? atomic_load(&v->metrics->stage[s].counter[i]) : 0;
}

#define N_MIXED 32

/* The published text is the one fixed reference: the solo generator must reproduce it. */
static int check_published(const struct job *j)
{
    char path[512], want[4096];
    if (rs_test_refdata("expected/stories260K.greedy-n256.txt", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    FILE *f = fopen(path, "rb");
    size_t n = f != NULL ? fread(want, 1, sizeof(want), f) : 0;
    if (f != NULL)
        fclose(f);
    RS_CHECK_MSG(n > 0 && j->ref.text_len == n && memcmp(j->ref.text, want, n) == 0,
                 "the solo generator does not reproduce the published text:\n%s", j->ref.text);
    return 0;
}

static int test_32_concurrent_clients_each_get_their_solo_output(void)
{
    static struct job jobs[N_MIXED];
    rs_client *cs[N_MIXED] = {0};
    struct rs_harness h;
    memset(jobs, 0, sizeof(jobs));
    for (uint32_t i = 0; i < N_MIXED; i++)
        solo_mixed_request(&jobs[i].g, i, 240);
    jobs[0].g.max_tokens = 256; /* BOS alone, greedy: the published text */
    int rc = start(&h, 128, 0, 0);
    if (rc != 0)
        return rc;
    int failed = references(jobs, N_MIXED) || check_published(&jobs[0]) != 0;
    for (uint32_t i = 0; i < N_MIXED && !failed; i++)
        failed = (cs[i] = client_of(&h)) == NULL ||
                 rs_client_submit(cs[i], &jobs[i].g, NULL, on_event, &jobs[i], NULL) != RS_OK;
    failed = failed || wait_jobs(cs, N_MIXED, jobs, N_MIXED, 240000) != 0;
    for (uint32_t i = 0; i < N_MIXED && !failed; i++) {
        char what[64];
        snprintf(what, sizeof(what), "client %u ('%s', %u tokens)", i,
                 solo_prompts[i % SOLO_N_PROMPTS], jobs[i].g.max_tokens);
        failed = same_as_solo(&jobs[i], what) != 0;
    }
    failed = failed || audit_idle(&h) != 0;
    if (failed)
        rs_harness_dump_logs(&h, RS_PIPE_N_STAGES);
    for (uint32_t i = 0; i < N_MIXED; i++) {
        rs_client_destroy(&cs[i]);
        job_fini(&jobs[i]);
    }
    rs_harness_stop(&h, failed);
    return failed;
}

/* A greedy request that runs the whole context: prompt + max_tokens = CTX. */
static void full_context(struct rs_wire_generate *g, const char *prompt)
{
    rs_wire_generate_init(g);
    g->has =
        RS_WIRE_GEN_PROMPT | RS_WIRE_GEN_TEMPERATURE | RS_WIRE_GEN_STREAM | RS_WIRE_GEN_IGNORE_EOS;
    g->prompt = (struct rs_wire_str){prompt, (uint32_t)strlen(prompt)};
    g->temperature = 0;
    g->stream = true;
    g->ignore_eos = true;
}

/* Cancels its request once it has `after` deltas. */
struct cancel_job {
    struct job j;
    rs_client *c;
    uint32_t after;
    uint64_t kv_used_at_cancel;
    struct rs_harness *h;
};

static void cancel_cb(const struct rs_client_event *ev)
{
    struct cancel_job *cj = ev->user;
    on_event(ev);
    if (ev->kind == RS_CLIENT_EV_DELTA && cj->j.s.n_deltas == cj->after) {
        cj->kv_used_at_cancel = counter(cj->h, RS_PIPE_STAGE_SCHEDULERD, RS_M_SCH_KV_USED);
        rs_client_cancel(cj->c, ev->id);
    }
}

/*
 * A pool of exactly one full context (CTX / 16 = 32 blocks): the cancelled
 * request held most of it, so the next full-context request can only run
 * without a preemption if every block came back.
 */
static int test_cancel_mid_stream_returns_every_kv_block(void)
{
    struct rs_harness h;
    static struct cancel_job cj;
    static struct job next;
    memset(&cj, 0, sizeof(cj));
    memset(&next, 0, sizeof(next));
    int rc = start(&h, 16, CTX / 16, 4);
    if (rc != 0)
        return rc;
    cj.h = &h;
    cj.after = 300;
    full_context(&cj.j.g, "Once upon a time");
    full_context(&next.g, "The dog");
    int failed = references(&next, 1) || (cj.c = client_of(&h)) == NULL ||
                 rs_client_submit(cj.c, &cj.j.g, NULL, cancel_cb, &cj, NULL) != RS_OK ||
                 wait_jobs(&cj.c, 1, &cj.j, 1, 120000) != 0;
    const struct rs_client_result *r = &cj.j.s.res;
    if (!failed && (r->status != RS_CLIENT_OK || r->finish_reason != RS_WIRE_FINISH_ABORT ||
                    cj.j.s.out_of_order || r->n_tokens < cj.after || r->n_tokens >= CTX - 4 ||
                    cj.kv_used_at_cancel < cj.after / 16)) {
        fprintf(stderr,
                "cancelled request: status %s, finish %s, %u tokens, %llu blocks in "
                "use at the cancel\n",
                rs_client_status_name(r->status), rs_wire_finish_name(r->finish_reason),
                r->n_tokens, (unsigned long long)cj.kv_used_at_cancel);
        failed = 1;
    }
    failed = failed || audit_idle(&h) != 0; /* all 32 blocks back: none used, no row held */
    uint64_t preempted = counter(&h, RS_PIPE_STAGE_SCHEDULERD, RS_M_SCH_PREEMPTIONS);
    failed = failed || rs_client_submit(cj.c, &next.g, NULL, on_event, &next, NULL) != RS_OK ||
             wait_jobs(&cj.c, 1, &next, 1, 120000) != 0 || same_as_solo(&next, "next") != 0;
    uint64_t preempted2 = counter(&h, RS_PIPE_STAGE_SCHEDULERD, RS_M_SCH_PREEMPTIONS);
    failed = failed || audit_idle(&h) != 0;
    if (failed)
        rs_harness_dump_logs(&h, RS_PIPE_N_STAGES);
    rs_client_destroy(&cj.c);
    rs_harness_stop(&h, failed);
    job_fini(&cj.j);
    job_fini(&next);
    RS_CHECK(!failed);
    RS_CHECK_MSG(preempted == 0 && preempted2 == 0, "preemptions %llu then %llu",
                 (unsigned long long)preempted, (unsigned long long)preempted2);
    return 0;
}

#define N_PRESSED 8

/* 8 requests of up to 240 tokens (up to 15 blocks each) share a pool of 40 blocks. */
static int test_small_kv_pool_preempts_with_identical_outputs(void)
{
    static struct job jobs[N_PRESSED];
    rs_client *c = NULL;
    struct rs_harness h;
    memset(jobs, 0, sizeof(jobs));
    for (uint32_t i = 0; i < N_PRESSED; i++) {
        solo_mixed_request(&jobs[i].g, i, 240);
        jobs[i].g.max_tokens = 180 + 7 * i;
        jobs[i].g.ignore_eos = true;
    }
    int rc = start(&h, 32, 40, 8);
    if (rc != 0)
        return rc;
    int failed = references(jobs, N_PRESSED) || (c = client_of(&h)) == NULL;
    for (uint32_t i = 0; i < N_PRESSED && !failed; i++)
        failed = rs_client_submit(c, &jobs[i].g, NULL, on_event, &jobs[i], NULL) != RS_OK;
    failed = failed || wait_jobs(&c, 1, jobs, N_PRESSED, 240000) != 0;
    for (uint32_t i = 0; i < N_PRESSED && !failed; i++) {
        char what[32];
        snprintf(what, sizeof(what), "request %u", i);
        failed = same_as_solo(&jobs[i], what) != 0;
    }
    uint64_t preempted = counter(&h, RS_PIPE_STAGE_SCHEDULERD, RS_M_SCH_PREEMPTIONS);
    failed = failed || audit_idle(&h) != 0;
    if (failed)
        rs_harness_dump_logs(&h, RS_PIPE_N_STAGES);
    rs_client_destroy(&c);
    for (uint32_t i = 0; i < N_PRESSED; i++)
        job_fini(&jobs[i]);
    rs_harness_stop(&h, failed);
    RS_CHECK(!failed);
    fprintf(stderr, "%llu preemptions\n", (unsigned long long)preempted);
    RS_CHECK_MSG(preempted > 0, "the pool never ran short: no preemption happened");
    return 0;
}

static const char long_prompt[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park with her friends. One day, she saw a big red ball under a tree and she wanted to "
    "play with it, so she ran to the tree and picked it up. Then her mom called her";

/* Runs j alone on c; the scheduler's prefill counter grows by *prefilled meanwhile. */
static int run_counted(struct rs_harness *h, rs_client *c, struct job *j, uint64_t *prefilled)
{
    uint64_t before = counter(h, RS_PIPE_STAGE_SCHEDULERD, RS_M_SCH_PREFILL_TOKENS);
    RS_CHECK(rs_client_submit(c, &j->g, NULL, on_event, j, NULL) == RS_OK);
    RS_CHECK(wait_jobs(&c, 1, j, 1, 120000) == 0);
    *prefilled = counter(h, RS_PIPE_STAGE_SCHEDULERD, RS_M_SCH_PREFILL_TOKENS) - before;
    return 0;
}

static int test_prefix_cache_hit_same_output_fewer_prefilled_tokens(void)
{
    static struct job first, again;
    struct rs_harness h;
    memset(&first, 0, sizeof(first));
    memset(&again, 0, sizeof(again));
    solo_mixed_request(&first.g, 1, 240);
    first.g.prompt = (struct rs_wire_str){long_prompt, (uint32_t)strlen(long_prompt)};
    first.g.max_tokens = 40;
    again.g = first.g;
    int rc = start(&h, 16, 0, 0);
    if (rc != 0)
        return rc;
    rs_client *c = client_of(&h);
    uint64_t p1 = 0, p2 = 0, hits0 = counter(&h, RS_PIPE_STAGE_SCHEDULERD, RS_M_SCH_PREFIX_HIT);
    int failed = references(&first, 1) || c == NULL || run_counted(&h, c, &first, &p1) != 0 ||
                 run_counted(&h, c, &again, &p2) != 0;
    again.ref = first.ref; /* the same request: the same solo output */
    failed = failed || same_as_solo(&first, "first") != 0 || same_as_solo(&again, "again") != 0;
    uint64_t hits = counter(&h, RS_PIPE_STAGE_SCHEDULERD, RS_M_SCH_PREFIX_HIT) - hits0;
    uint32_t cached = again.s.res.usage.cached_tokens, n_prompt = first.ref.n_prompt;
    failed = failed || audit_idle(&h) != 0;
    if (failed)
        rs_harness_dump_logs(&h, RS_PIPE_N_STAGES);
    memset(&again.ref, 0, sizeof(again.ref));
    rs_client_destroy(&c);
    job_fini(&first);
    job_fini(&again);
    rs_harness_stop(&h, failed);
    RS_CHECK(!failed);
    fprintf(stderr, "prompt %u tokens: prefilled %llu, then %llu with %u cached (%llu hit)\n",
            n_prompt, (unsigned long long)p1, (unsigned long long)p2, cached,
            (unsigned long long)hits);
    RS_CHECK_MSG(p1 >= n_prompt && p2 < p1 && p2 + cached == p1,
                 "prefilled %llu then %llu, "
                 "%u cached",
                 (unsigned long long)p1, (unsigned long long)p2, cached);
    RS_CHECK(cached >= 16 && cached % 16 == 0 && hits == cached);
    RS_CHECK(first.s.res.usage.cached_tokens == 0);
    return 0;
}

/* One malformed message: its bytes into sb, the request id and error code it must get. */
static void pack_bad(int which, msgpack_sbuffer *sb, const char **id, enum rs_wire_code *code)
{
    msgpack_packer pk;
    msgpack_sbuffer_clear(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    *id = "bad";
    switch (which) {
    case 0: /* not msgpack */
        msgpack_sbuffer_write(sb, "\xc1\xc1\xc1 no msgpack", 14);
        *id = "", *code = RS_WIRE_BAD_REQUEST;
        break;
    case 1: /* a map that claims more pairs than it has */
        fx_pack_head(&pk, RS_WIRE_VERSION, "generate", "bad", 2);
        fx_pack_str(&pk, "prompt"), fx_pack_str(&pk, "hi");
        *code = RS_WIRE_BAD_REQUEST;
        break;
    case 2:
        fx_pack_head(&pk, RS_WIRE_VERSION, "generate", "bad", 2);
        fx_pack_str(&pk, "prompt"), fx_pack_str(&pk, "hi");
        fx_pack_str(&pk, "temprature"), msgpack_pack_double(&pk, 0.5);
        *code = RS_WIRE_UNKNOWN_FIELD;
        break;
    case 3:
        fx_pack_head(&pk, RS_WIRE_VERSION, "generate", "bad", 2);
        fx_pack_str(&pk, "prompt"), fx_pack_str(&pk, "hi");
        fx_pack_str(&pk, "stream"), fx_pack_str(&pk, "yes");
        *code = RS_WIRE_WRONG_TYPE;
        break;
    default:
        fx_pack_head(&pk, RS_WIRE_VERSION, "generate", "bad", 1);
        fx_pack_str(&pk, "prompt"), msgpack_pack_int(&pk, 42);
        *code = RS_WIRE_WRONG_TYPE;
        break;
    }
}

/* Sends each malformed message on a raw DEALER and checks its error reply. */
static int send_malformed(struct rs_harness *h, void *zctx)
{
    struct fx_inst in;
    struct fx_client raw;
    memset(&in, 0, sizeof(in));
    RS_CHECK(strlen(h->rundir) < sizeof(in.rundir));
    memcpy(in.rundir, h->rundir, strlen(h->rundir) + 1);
    in.zctx = zctx;
    RS_CHECK(fx_client_open(&in, "tokenizerd", "raw-client", &raw) == 0);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    int failed = 0;
    for (int which = 0; which < 5 && !failed; which++) {
        const char *id;
        enum rs_wire_code code;
        struct rs_wire_server_msg m;
        pack_bad(which, &sb, &id, &code);
        failed = fx_send_raw(&raw, sb.data, sb.size) != 0 || fx_recv(&raw, 5000, &m) != 0 ||
                 m.type != RS_WIRE_T_ERROR || m.u.error.code != code || strcmp(m.id, id) != 0;
        if (failed)
            fprintf(stderr, "malformed message %d: no %s error for '%s'\n", which,
                    rs_wire_code_name(code), id);
    }
    msgpack_sbuffer_destroy(&sb);
    fx_client_close(&raw);
    return failed;
}

/* Requests the library sends as they are and the server must refuse, with their codes. */
static void refused_request(int which, struct rs_wire_generate *g, char *buf, size_t cap,
                            enum rs_wire_code *code)
{
    rs_wire_generate_init(g);
    g->has = RS_WIRE_GEN_PROMPT;
    g->prompt = (struct rs_wire_str){"The dog", 7};
    *code = RS_WIRE_INVALID_PARAM;
    switch (which) {
    case 0: { /* ~4 tokens per repetition, far over the 512-token context */
        size_t n = 0;
        while (n + 17 < cap) {
            memcpy(buf + n, "Once upon a time ", 17);
            n += 17;
        }
        g->prompt = (struct rs_wire_str){buf, (uint32_t)n};
        *code = RS_WIRE_PROMPT_TOO_LONG;
        break;
    }
    case 1:
        g->has |= RS_WIRE_GEN_TOP_P, g->top_p = 1.5f;
        break;
    case 2:
        g->has |= RS_WIRE_GEN_TEMPERATURE, g->temperature = -1.0f;
        break;
    case 3:
        g->has |= RS_WIRE_GEN_REPETITION_PENALTY, g->repetition_penalty = 0.0f;
        break;
    default:
        g->has |= RS_WIRE_GEN_STOP_TOKEN_IDS, g->n_stop_ids = 1, g->stop_ids[0] = 100000;
        break;
    }
}

#define N_GOOD 6
#define N_REFUSED 5

static int check_refused(const struct job *bad, const enum rs_wire_code *codes)
{
    for (int i = 0; i < N_REFUSED; i++)
        RS_CHECK_MSG(bad[i].s.n_finals == 1 && bad[i].s.res.status == RS_CLIENT_REFUSED &&
                         bad[i].s.res.error == codes[i],
                     "bad request %d: status %s, error %s (%s), expected %s", i,
                     rs_client_status_name(bad[i].s.res.status),
                     rs_wire_code_name(bad[i].s.res.error), bad[i].s.res.message,
                     rs_wire_code_name(codes[i]));
    return 0;
}

static int test_bad_requests_get_errors_while_good_ones_complete(void)
{
    static struct job good[N_GOOD], bad[N_REFUSED];
    static char long_text[6000];
    enum rs_wire_code codes[N_REFUSED];
    struct rs_harness h;
    memset(good, 0, sizeof(good));
    memset(bad, 0, sizeof(bad));
    for (uint32_t i = 0; i < N_GOOD; i++) {
        solo_mixed_request(&good[i].g, i + 40, 240);
        good[i].g.max_tokens = 120 + 10 * i;
    }
    for (int i = 0; i < N_REFUSED; i++)
        refused_request(i, &bad[i].g, long_text, sizeof(long_text), &codes[i]);
    int rc = start(&h, 32, 0, 0);
    if (rc != 0)
        return rc;
    void *zctx = zmq_ctx_new();
    rs_client *c = client_of(&h), *cb = client_of(&h);
    int failed = references(good, N_GOOD) || c == NULL || cb == NULL || zctx == NULL;
    for (uint32_t i = 0; i < N_GOOD && !failed; i++)
        failed = rs_client_submit(c, &good[i].g, NULL, on_event, &good[i], NULL) != RS_OK;
    for (uint64_t t = rs_clock_ms() + 300; !failed && rs_clock_ms() < t;)
        rs_client_poll(c, 10); /* the good ones are running now */
    failed = failed || send_malformed(&h, zctx) != 0;
    for (int i = 0; i < N_REFUSED && !failed; i++)
        failed = rs_client_submit(cb, &bad[i].g, NULL, on_event, &bad[i], NULL) != RS_OK;
    rs_client *both[2] = {c, cb};
    failed = failed || wait_jobs(both, 2, bad, N_REFUSED, 30000) != 0 ||
             check_refused(bad, codes) != 0 || wait_jobs(both, 2, good, N_GOOD, 240000) != 0;
    for (uint32_t i = 0; i < N_GOOD && !failed; i++)
        failed = same_as_solo(&good[i], "good request") != 0;
    uint64_t rejected = counter(&h, RS_PIPE_STAGE_TOKENIZERD, RS_M_TOK_REJECTED);
    failed = failed || audit_idle(&h) != 0;
    if (failed)
        rs_harness_dump_logs(&h, RS_PIPE_N_STAGES);
    rs_client_destroy(&c);
    rs_client_destroy(&cb);
    if (zctx != NULL)
        zmq_ctx_term(zctx);
    for (int i = 0; i < N_GOOD; i++)
        job_fini(&good[i]);
    for (int i = 0; i < N_REFUSED; i++)
        job_fini(&bad[i]);
    rs_harness_stop(&h, failed);
    RS_CHECK(!failed);
    RS_CHECK_MSG(rejected == 5 + N_REFUSED, "tokenizerd rejected %llu",
                 (unsigned long long)rejected);
    return 0;
}

#define N_BURST 10
#define TABLE 4

static int test_full_table_answers_overloaded(void)
{
    static struct job jobs[N_BURST];
    struct rs_harness h;
    memset(jobs, 0, sizeof(jobs));
    for (uint32_t i = 0; i < N_BURST; i++) {
        solo_mixed_request(&jobs[i].g, i, 240);
        jobs[i].g.max_tokens = 200;
        jobs[i].g.ignore_eos = true;
    }
    int rc = start(&h, TABLE, 0, TABLE);
    if (rc != 0)
        return rc;
    rs_client *c = client_of(&h);
    int failed = references(jobs, N_BURST) || c == NULL;
    for (uint32_t i = 0; i < N_BURST && !failed; i++)
        failed = rs_client_submit(c, &jobs[i].g, NULL, on_event, &jobs[i], NULL) != RS_OK;
    failed = failed || wait_jobs(&c, 1, jobs, N_BURST, 240000) != 0;
    uint32_t n_ok = 0, n_over = 0;
    for (uint32_t i = 0; i < N_BURST && !failed; i++) {
        if (jobs[i].s.res.status == RS_CLIENT_REFUSED &&
            jobs[i].s.res.error == RS_WIRE_OVERLOADED && jobs[i].s.n_deltas == 0)
            n_over++;
        else if ((failed = same_as_solo(&jobs[i], "accepted request")) == 0)
            n_ok++;
    }
    uint64_t overloaded = counter(&h, RS_PIPE_STAGE_TOKENIZERD, RS_M_TOK_OVERLOADED);
    failed = failed || audit_idle(&h) != 0;
    if (failed)
        rs_harness_dump_logs(&h, RS_PIPE_N_STAGES);
    rs_client_destroy(&c);
    for (uint32_t i = 0; i < N_BURST; i++)
        job_fini(&jobs[i]);
    rs_harness_stop(&h, failed);
    RS_CHECK(!failed);
    fprintf(stderr, "%u completed, %u overloaded\n", n_ok, n_over);
    RS_CHECK_MSG(n_ok >= TABLE && n_over >= 1 && n_ok + n_over == N_BURST && overloaded == n_over,
                 "%u completed, %u overloaded (counter %llu)", n_ok, n_over,
                 (unsigned long long)overloaded);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_32_concurrent_clients_each_get_their_solo_output),
    RS_TEST(test_cancel_mid_stream_returns_every_kv_block),
    RS_TEST(test_small_kv_pool_preempts_with_identical_outputs),
    RS_TEST(test_prefix_cache_hit_same_output_fewer_prefilled_tokens),
    RS_TEST(test_bad_requests_get_errors_while_good_ones_complete),
    RS_TEST(test_full_table_answers_overloaded),
};

RS_TEST_MAIN(cases)

/* SPDX-License-Identifier: MIT */
/*
 * The client library and ringserve-cli against the four real daemons
 * (tests/pipeline_harness.h) on stories260K: the CLI prints the published
 * greedy text, concurrent clients each get their solo output, cancel ends a
 * stream with abort, and the crash cases of DESIGN.md §3 seen from a client:
 * tokenizerd killed before it acknowledged (stopped, mid-intake by failpoint,
 * at random moments) still runs each request exactly once (counted by the
 * segment's handle counter), and postprocd killed mid-stream (at random, or
 * right after a send by failpoint) still gives the callback every delta
 * exactly once, in order, byte-identical to a run without crashes.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/client.h"
#include "common/clock.h"
#include "ipc/pipeline.h"
#include "ipc/rundir.h"
#include "ipc/wire.h"
#include "ipc/zcert.h"
#include "ipc/zsock.h"
#include "tests/pipeline_harness.h"
#include "tests/rs_test.h"
#include "tests/stream_rec.h"

#define MODEL "stories260K.gguf"
#define CTX 1024
#define MODEL_TEXT RS_SOURCE_DIR "/README.md" /* real English text for prompts */

static void on_event(const struct rs_client_event *ev)
{
    stream_rec_add(ev->user, ev);
}

static int start(struct rs_harness *h, char *model, size_t cap)
{
    struct rs_harness_opts o = {0};
    if (rs_test_refdata(MODEL, model, cap) == NULL)
        return RS_TEST_SKIP;
    o.model = model;
    o.n_ctx = CTX;
    o.max_requests = 64;
    return rs_harness_start(h, &o) == RS_OK ? 0 : 1;
}

static rs_client *client_of(const struct rs_harness *h)
{
    return rs_harness_client(h, 120000);
}

/* A greedy streaming request for prompt, max tokens n. */
static void greedy(struct rs_wire_generate *g, const char *prompt, uint32_t n, bool ignore_eos)
{
    rs_wire_generate_init(g);
    g->has = RS_WIRE_GEN_PROMPT | RS_WIRE_GEN_MAX_TOKENS | RS_WIRE_GEN_TEMPERATURE |
             RS_WIRE_GEN_STREAM | RS_WIRE_GEN_IGNORE_EOS;
    g->prompt = (struct rs_wire_str){prompt, (uint32_t)strlen(prompt)};
    g->max_tokens = n;
    g->temperature = 0;
    g->stream = true;
    g->ignore_eos = ignore_eos;
}

/* Polls c until r's final arrived (or limit_ms passed); 0 when it did. */
static int wait_final(rs_client *c, struct stream_rec *r, uint32_t limit_ms)
{
    uint64_t end = rs_clock_ms() + limit_ms;
    while (r->n_finals == 0 && rs_clock_ms() < end)
        if (rs_client_poll(c, 100) < 0)
            return 1;
    return r->n_finals == 1 ? 0 : 1;
}

/* The solo reference: g run alone, to completion, on a fresh client. */
static int reference(const struct rs_harness *h, const struct rs_wire_generate *g,
                     struct rs_client_result *out)
{
    rs_client *c = client_of(h);
    if (c == NULL || rs_client_generate_sync(c, g, 0, NULL, NULL, out) != RS_OK ||
        out->status != RS_CLIENT_OK || out->n_tokens == 0) {
        fprintf(stderr, "reference run failed (status %s)\n", rs_client_status_name(out->status));
        rs_client_destroy(&c);
        return 1;
    }
    rs_client_destroy(&c);
    return 0;
}

/* r delivered exactly ref's output: every delta once, in order, one final. */
static int same_output(const struct stream_rec *r, const struct rs_client_result *ref)
{
    RS_CHECK_MSG(r->n_finals == 1 && !r->out_of_order, "%u finals, out of order %d", r->n_finals,
                 r->out_of_order);
    RS_CHECK_MSG(r->res.status == RS_CLIENT_OK, "status %s (%s: %s)",
                 rs_client_status_name(r->res.status), rs_wire_code_name(r->res.error),
                 r->res.message);
    RS_CHECK_MSG(r->res.n_tokens == ref->n_tokens, "%u tokens, reference %u", r->res.n_tokens,
                 ref->n_tokens);
    RS_CHECK(memcmp(r->res.tokens, ref->tokens, ref->n_tokens * sizeof(uint32_t)) == 0);
    RS_CHECK_MSG(r->res.text_len == ref->text_len &&
                     memcmp(r->res.text, ref->text, ref->text_len) == 0,
                 "text differs:\n%s\n---- reference ----\n%s", r->res.text, ref->text);
    RS_CHECK(r->res.usage.completion_tokens == ref->n_tokens);
    return 0;
}

/* Requests the instance accepted so far (handles are handed out from 1, once per request). */
static uint64_t handles_issued(struct rs_harness *h)
{
    struct rs_pipe *v = rs_harness_view(h);
    return v != NULL ? atomic_load(&v->shared->next_handle) - 1 : UINT64_MAX;
}

static void print_stats(const char *what, rs_client *c)
{
    struct rs_client_stats st;
    rs_client_stats(c, &st);
    fprintf(stderr, "%s: sent %llu generates (%llu resent), %llu deltas, %llu repeats dropped, "
            "%llu gaps, %llu resumes, %llu hellos, %llu reconnects\n", what,
            (unsigned long long)st.gen_sent, (unsigned long long)st.gen_resent,
            (unsigned long long)st.deltas, (unsigned long long)st.duplicates,
            (unsigned long long)st.gaps, (unsigned long long)st.resumes,
            (unsigned long long)st.hellos, (unsigned long long)st.reconnects);
}

/* Runs argv[0] with argv, stdin from /dev/null, stdout into the file out; its wait status. */
static int run_to_file(const char *const *argv, const char *out)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY), fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(in, 0);
        dup2(fd, 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return st;
}

/* Runs ringserve-cli with args, stdin from /dev/null, stdout into out (cap bytes). */
static int run_cli(const struct rs_harness *h, const char *const *args, char *out, size_t cap,
                   size_t *len)
{
    char bin[600], path[400];
    const char *argv[32] = {bin, "--rundir", h->rundir};
    int n = 3;
    snprintf(bin, sizeof(bin), "%s/ringserve-cli", rs_test_bindir());
    snprintf(path, sizeof(path), "%s/cli.out", rs_test_tmpdir());
    for (int i = 0; args[i] != NULL && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    int st = run_to_file(argv, path);
    FILE *f = fopen(path, "rb");
    *len = f != NULL ? fread(out, 1, cap, f) : 0;
    if (f != NULL)
        fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int test_cli_greedy_from_bos_prints_published_text(void)
{
    struct rs_harness h;
    char model[512], path[512], want[4096], got[4096], got2[4096];
    if (rs_test_refdata("expected/stories260K.greedy-n256.txt", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    FILE *f = fopen(path, "rb");
    size_t want_len = f != NULL ? fread(want, 1, sizeof(want), f) : 0, got_len, got2_len;
    if (f != NULL)
        fclose(f);
    RS_CHECK(want_len > 0);
    int rc = start(&h, model, sizeof(model));
    if (rc != 0)
        return rc;
    const char *arg_prompt[] = {"--max-tokens", "256", "--temperature", "0", "", NULL};
    const char *stdin_prompt[] = {"--max-tokens", "256", "--temperature", "0", NULL};
    int code = run_cli(&h, arg_prompt, got, sizeof(got), &got_len);
    int same = code == 0 && got_len == want_len && memcmp(got, want, want_len) == 0;
    /* no prompt argument: the prompt is stdin, here empty: BOS alone again */
    int code2 = run_cli(&h, stdin_prompt, got2, sizeof(got2), &got2_len);
    int same2 = code2 == 0 && got2_len == want_len && memcmp(got2, want, want_len) == 0;
    if (!same || !same2)
        rs_harness_dump_logs(&h, RS_PIPE_N_STAGES);
    rs_harness_stop(&h, 0);
    RS_CHECK_MSG(same, "exit %d, %zu bytes:\n%.*s", code, got_len, (int)got_len, got);
    RS_CHECK_MSG(same2, "stdin prompt: exit %d, %zu bytes", code2, got2_len);
    return 0;
}

#define N_CLIENTS 10

static int test_concurrent_clients_get_their_solo_output(void)
{
    static const char *const prompts[N_CLIENTS] = {
        "Once upon a time", "The dog", "Lily and Tom", "One day", "The sun was",
        "A little bird", "Tim had a", "There was a big", "Mom said", ""};
    struct rs_harness h;
    char model[512];
    struct rs_client_result ref[N_CLIENTS] = {0};
    struct stream_rec r[N_CLIENTS] = {0};
    rs_client *cs[N_CLIENTS] = {0};
    struct rs_wire_generate g;
    int rc = start(&h, model, sizeof(model)), failed = 0;
    if (rc != 0)
        return rc;
    for (int i = 0; i < N_CLIENTS && !failed; i++) {
        greedy(&g, prompts[i], 48 + 8 * (uint32_t)i, false);
        failed = reference(&h, &g, &ref[i]);
    }
    for (int i = 0; i < N_CLIENTS && !failed; i++) {
        greedy(&g, prompts[i], 48 + 8 * (uint32_t)i, false);
        failed = (cs[i] = client_of(&h)) == NULL ||
                 rs_client_submit(cs[i], &g, NULL, on_event, &r[i], NULL) != RS_OK;
    }
    uint64_t end = rs_clock_ms() + 60000;
    for (int done = 0; !failed && done < N_CLIENTS && rs_clock_ms() < end;) {
        failed = rs_client_poll_set(cs, N_CLIENTS, 100) < 0;
        done = 0;
        for (int i = 0; i < N_CLIENTS; i++)
            done += r[i].n_finals > 0;
    }
    for (int i = 0; i < N_CLIENTS && !failed; i++) {
        if (same_output(&r[i], &ref[i]) != 0) {
            fprintf(stderr, "client %d ('%s') differs from its solo run\n", i, prompts[i]);
            failed = 1;
        }
    }
    if (failed)
        rs_harness_dump_logs(&h, RS_PIPE_N_STAGES);
    for (int i = 0; i < N_CLIENTS; i++) {
        rs_client_destroy(&cs[i]);
        rs_client_result_fini(&ref[i]);
        rs_client_result_fini(&r[i].res);
    }
    rs_harness_stop(&h, 0);
    return failed;
}

/* Cancels after `after` deltas. */
struct cancel_rec {
    struct stream_rec r;
    rs_client *c;
    uint32_t after;
};

static void cancel_cb(const struct rs_client_event *ev)
{
    struct cancel_rec *cr = ev->user;
    on_event(ev);
    if (ev->kind == RS_CLIENT_EV_DELTA && cr->r.n_deltas == cr->after)
        rs_client_cancel(cr->c, ev->id);
}

static int test_cancel_mid_stream_ends_with_abort(void)
{
    struct rs_harness h;
    char model[512];
    struct rs_wire_generate g;
    struct cancel_rec cr = {.after = 10};
    int rc = start(&h, model, sizeof(model));
    if (rc != 0)
        return rc;
    cr.c = client_of(&h);
    RS_CHECK(cr.c != NULL);
    greedy(&g, "Once upon a time", CTX - 16, true);
    RS_CHECK(rs_client_submit(cr.c, &g, NULL, cancel_cb, &cr, NULL) == RS_OK);
    int ok = wait_final(cr.c, &cr.r, 60000) == 0;
    if (!ok)
        rs_harness_dump_logs(&h, RS_PIPE_N_STAGES);
    rs_client_destroy(&cr.c);
    rs_harness_stop(&h, 0);
    struct rs_client_result *res = &cr.r.res;
    RS_CHECK(ok && !cr.r.out_of_order && res->status == RS_CLIENT_OK);
    RS_CHECK_MSG(res->finish_reason == RS_WIRE_FINISH_ABORT, "finish_reason %s after %u tokens",
                 rs_wire_finish_name(res->finish_reason), res->n_tokens);
    RS_CHECK(res->n_tokens >= 10 && res->n_tokens < CTX - 16);
    RS_CHECK_MSG(res->usage.completion_tokens == res->n_tokens, "usage %u, received %u",
                 res->usage.completion_tokens, res->n_tokens);
    rs_client_result_fini(res);
    return 0;
}

static int test_refused_request_ends_with_the_servers_error(void)
{
    struct rs_harness h;
    char model[512];
    struct rs_wire_generate g;
    struct stream_rec r;
    memset(&r, 0, sizeof(r));
    int rc = start(&h, model, sizeof(model));
    if (rc != 0)
        return rc;
    rs_client *c = client_of(&h);
    RS_CHECK(c != NULL);
    greedy(&g, "Once upon a time", 8, false);
    g.has |= RS_WIRE_GEN_TOP_P;
    g.top_p = 1.5f; /* the client passes it on; tokenizerd's validator refuses it */
    RS_CHECK(rs_client_submit(c, &g, NULL, on_event, &r, NULL) == RS_OK);
    int ok = wait_final(c, &r, 30000) == 0;
    int in_flight = rs_client_in_flight(c);
    rs_client_destroy(&c);
    rs_harness_stop(&h, 0);
    RS_CHECK(ok && r.n_deltas == 0);
    RS_CHECK_MSG(r.res.status == RS_CLIENT_REFUSED && r.res.error == RS_WIRE_INVALID_PARAM,
                 "status %s, error %s", rs_client_status_name(r.res.status),
                 rs_wire_code_name(r.res.error));
    RS_CHECK_MSG(strstr(r.res.message, "top_p") != NULL, "message: %s", r.res.message);
    RS_CHECK(in_flight == 0);
    rs_client_result_fini(&r.res);
    return 0;
}

/* With a 30 s linger, only the client's release can free a finished request within seconds. */
static int test_release_frees_finished_requests_at_once(void)
{
    struct rs_harness h;
    char model[512];
    struct rs_wire_generate g;
    int rc = start(&h, model, sizeof(model));
    if (rc != 0)
        return rc;
    rs_client *c = client_of(&h);
    RS_CHECK(c != NULL);
    greedy(&g, "Once upon a time", 16, false);
    for (int i = 0; i < 4; i++) {
        struct rs_client_result res;
        RS_CHECK(rs_client_generate_sync(c, &g, 0, NULL, NULL, &res) == RS_OK);
        RS_CHECK(res.status == RS_CLIENT_OK);
        rs_client_result_fini(&res);
    }
    struct rs_client_stats st;
    rs_client_stats(c, &st);
    struct rs_harness_audit a;
    int findings = 1;
    for (uint64_t end = rs_clock_ms() + 5000; findings != 0 && rs_clock_ms() < end;) {
        rs_client_poll(c, 50);
        findings = rs_harness_audit(&h, &a);
    }
    rs_client_destroy(&c);
    rs_harness_stop(&h, 0);
    RS_CHECK_MSG(st.releases == 4, "%llu releases sent", (unsigned long long)st.releases);
    RS_CHECK_MSG(findings == 0 && a.records_busy == 0, "%llu records still held",
                 (unsigned long long)a.records_busy);
    return 0;
}

static int test_cancel_before_ack_ends_with_abort(void)
{
    struct rs_harness h;
    char model[512], id[RS_CLIENT_ID_CAP];
    struct rs_wire_generate g;
    struct stream_rec r;
    memset(&r, 0, sizeof(r));
    int rc = start(&h, model, sizeof(model));
    if (rc != 0)
        return rc;
    rs_client *c = client_of(&h);
    RS_CHECK(c != NULL);
    greedy(&g, "Once upon a time", CTX - 16, true);
    /* No poll between the two calls: the cancel is sent before any ack can arrive, so the
     * library must hold it and send it after the ack. */
    RS_CHECK(rs_client_submit(c, &g, NULL, on_event, &r, id) == RS_OK);
    RS_CHECK(rs_client_cancel(c, id) == RS_OK);
    RS_CHECK(rs_client_cancel(c, "no-such-request") == RS_ENOENT);
    int ok = wait_final(c, &r, 60000) == 0;
    rs_client_destroy(&c);
    rs_harness_stop(&h, 0);
    RS_CHECK(ok && !r.out_of_order && r.res.status == RS_CLIENT_OK);
    RS_CHECK_MSG(r.res.finish_reason == RS_WIRE_FINISH_ABORT, "finish_reason %s after %u tokens",
                 rs_wire_finish_name(r.res.finish_reason), r.res.n_tokens);
    RS_CHECK(r.res.n_tokens < CTX - 16);
    rs_client_result_fini(&r.res);
    return 0;
}

/* Submits g on c and returns once tokenizerd was handed the generate. */
static int submit_sent(rs_client *c, const struct rs_wire_generate *g, struct stream_rec *r)
{
    struct rs_client_stats st;
    rs_client_stats(c, &st);
    uint64_t sent = st.gen_sent, end = rs_clock_ms() + 5000;
    RS_CHECK(rs_client_submit(c, g, NULL, on_event, r, NULL) == RS_OK);
    do {
        rs_client_poll(c, 5);
        rs_client_stats(c, &st);
    } while (st.gen_sent == sent && rs_clock_ms() < end);
    RS_CHECK_MSG(st.gen_sent > sent, "the generate was never sent");
    return 0;
}

static int test_tokenizerd_killed_before_ack_runs_request_once(void)
{
    struct rs_harness h;
    char model[512];
    struct rs_wire_generate g;
    struct rs_client_result ref = {0};
    struct stream_rec r = {0};
    int rc = start(&h, model, sizeof(model));
    if (rc != 0)
        return rc;
    greedy(&g, "", 64, false);
    rs_client *c = client_of(&h);
    /* The reference on this client: its connection to tokenizerd is up (a stopped
     * tokenizerd could not finish the handshake, and nothing would be sent at all). */
    RS_CHECK(c != NULL && rs_client_generate_sync(c, &g, 0, NULL, NULL, &ref) == RS_OK);
    RS_CHECK(ref.status == RS_CLIENT_OK && ref.n_tokens > 0);
    uint64_t before = handles_issued(&h);
    /* Stopped, it cannot read the generate; killed, the message dies with it. */
    rs_harness_signal(&h, RS_PIPE_STAGE_TOKENIZERD, SIGSTOP);
    RS_CHECK(submit_sent(c, &g, &r) == 0);
    rs_harness_signal(&h, RS_PIPE_STAGE_TOKENIZERD, SIGKILL);
    RS_CHECK(rs_harness_start_stage(&h, RS_PIPE_STAGE_TOKENIZERD, NULL, 1) == RS_OK);
    int ok = wait_final(c, &r, 60000) == 0 && same_output(&r, &ref) == 0;
    uint64_t ran = handles_issued(&h) - before;
    print_stats("tokenizerd stopped and killed", c);
    struct rs_client_stats st;
    rs_client_stats(c, &st);
    if (!ok)
        rs_harness_dump_logs(&h, RS_PIPE_N_STAGES);
    rs_client_destroy(&c);
    rs_harness_stop(&h, 0);
    RS_CHECK(ok);
    RS_CHECK_MSG(ran == 1, "the request was accepted %llu times", (unsigned long long)ran);
    RS_CHECK(st.gen_resent >= 1);
    rs_client_result_fini(&ref);
    rs_client_result_fini(&r.res);
    return 0;
}

static int test_tokenizerd_killed_mid_intake_runs_request_once(void)
{
    struct rs_harness h;
    char model[512];
    struct rs_wire_generate g;
    struct rs_client_result ref = {0};
    struct stream_rec r = {0};
    int rc = start(&h, model, sizeof(model));
    if (rc != 0)
        return rc;
    greedy(&g, "Lily and Tom", 64, false);
    RS_CHECK(reference(&h, &g, &ref) == 0);
    /* The next tokenizerd kills itself right after claiming a record for the request. */
    RS_CHECK(rs_harness_start_stage(&h, RS_PIPE_STAGE_TOKENIZERD,
                                    "RS_FAILPOINT=table.claim.after_cas:1", 1) == RS_OK);
    rs_client *c = client_of(&h);
    RS_CHECK(c != NULL);
    uint64_t before = handles_issued(&h), end = rs_clock_ms() + 10000;
    RS_CHECK(rs_client_submit(c, &g, NULL, on_event, &r, NULL) == RS_OK);
    while (rs_harness_alive(&h, RS_PIPE_STAGE_TOKENIZERD) && rs_clock_ms() < end)
        rs_client_poll(c, 5);
    RS_CHECK_MSG(!rs_harness_alive(&h, RS_PIPE_STAGE_TOKENIZERD), "the failpoint did not fire");
    RS_CHECK(rs_harness_start_stage(&h, RS_PIPE_STAGE_TOKENIZERD, NULL, 1) == RS_OK);
    int ok = wait_final(c, &r, 60000) == 0 && same_output(&r, &ref) == 0;
    uint64_t ran = handles_issued(&h) - before;
    print_stats("tokenizerd killed mid-intake", c);
    if (!ok)
        rs_harness_dump_logs(&h, RS_PIPE_N_STAGES);
    rs_client_destroy(&c);
    rs_harness_stop(&h, 0);
    RS_CHECK(ok);
    RS_CHECK_MSG(ran == 1, "the request was accepted %llu times", (unsigned long long)ran);
    rs_client_result_fini(&ref);
    rs_client_result_fini(&r.res);
    return 0;
}

static int test_tokenizerd_killed_at_random_moments_runs_each_request_once(void)
{
    struct rs_harness h;
    char model[512];
    struct rs_wire_generate g;
    struct rs_client_result ref = {0};
    int rc = start(&h, model, sizeof(model)), failed = 0;
    if (rc != 0)
        return rc;
    greedy(&g, "The sun was", 40, false);
    RS_CHECK(reference(&h, &g, &ref) == 0);
    rs_client *c = client_of(&h);
    RS_CHECK(c != NULL);
    srand(1);
    for (int it = 0; it < 8 && !failed; it++) {
        struct stream_rec r = {0};
        uint64_t before = handles_issued(&h);
        uint64_t kill_at = rs_clock_ns() + (uint64_t)(rand() % 3000) * 1000; /* 0..3 ms */
        failed = rs_client_submit(c, &g, NULL, on_event, &r, NULL) != RS_OK;
        while (!failed && rs_clock_ns() < kill_at)
            rs_client_poll(c, 0);
        rs_harness_signal(&h, RS_PIPE_STAGE_TOKENIZERD, SIGKILL);
        failed = failed || rs_harness_start_stage(&h, RS_PIPE_STAGE_TOKENIZERD, NULL, 1) != RS_OK ||
                 wait_final(c, &r, 60000) != 0 || same_output(&r, &ref) != 0;
        uint64_t ran = handles_issued(&h) - before;
        if (!failed && ran != 1) {
            fprintf(stderr, "iteration %d: accepted %llu times\n", it, (unsigned long long)ran);
            failed = 1;
        }
        rs_client_result_fini(&r.res);
    }
    print_stats("tokenizerd killed 8 times", c);
    if (failed)
        rs_harness_dump_logs(&h, RS_PIPE_N_STAGES);
    rs_client_destroy(&c);
    rs_harness_stop(&h, 0);
    rs_client_result_fini(&ref);
    return failed;
}

/*
 * A restarted tokenizerd slower than the client's 100 ms reconnect park (each
 * message handled 250 ms late): the resends that open the new connection must
 * not count as unanswered ones, else a client with two unacknowledged requests
 * reconnects the moment it resends, every answer goes to a closed connection,
 * and the resends pile up faster than the slow tokenizerd drains them.
 */
static int test_slow_tokenizerd_after_restart_acks_every_request(void)
{
    enum { N = 3 };
    struct rs_harness h;
    char model[512];
    struct rs_wire_generate g;
    struct rs_client_result ref = {0};
    struct stream_rec r[N];
    memset(r, 0, sizeof(r));
    int rc = start(&h, model, sizeof(model));
    if (rc != 0)
        return rc;
    greedy(&g, "Once upon", 24, false);
    RS_CHECK(reference(&h, &g, &ref) == 0);
    rs_client *c = client_of(&h);
    RS_CHECK(c != NULL && rs_client_generate_sync(c, &g, 0, NULL, NULL, &r[0].res) == RS_OK);
    rs_client_result_fini(&r[0].res);
    memset(&r[0], 0, sizeof(r[0]));
    uint64_t before = handles_issued(&h);
    rs_harness_signal(&h, RS_PIPE_STAGE_TOKENIZERD, SIGSTOP);
    for (int i = 0; i < N; i++)
        RS_CHECK(submit_sent(c, &g, &r[i]) == 0);
    RS_CHECK(rs_harness_start_stage(&h, RS_PIPE_STAGE_TOKENIZERD,
                                    "RS_FAILPOINT=tokenizerd.message:1:delay=250", 1) == RS_OK);
    int done = 0;
    for (uint64_t end = rs_clock_ms() + 30000; done < N && rs_clock_ms() < end;) {
        rs_client_poll(c, 10);
        done = 0;
        for (int i = 0; i < N; i++)
            done += r[i].n_finals > 0;
    }
    int ok = done == N;
    for (int i = 0; ok && i < N; i++)
        ok = wait_final(c, &r[i], 10000) == 0 && same_output(&r[i], &ref) == 0;
    uint64_t ran = handles_issued(&h) - before;
    print_stats("slow tokenizerd after a restart", c);
    if (!ok)
        rs_harness_dump_logs(&h, RS_PIPE_N_STAGES);
    rs_client_destroy(&c);
    rs_harness_stop(&h, 0);
    RS_CHECK_MSG(ok, "%d of %d requests finished", done, N);
    RS_CHECK_MSG(ran == N, "%llu acceptances for %d requests", (unsigned long long)ran, N);
    for (int i = 0; i < N; i++)
        rs_client_result_fini(&r[i].res);
    rs_client_result_fini(&ref);
    return 0;
}

/* Kills postprocd after `after` deltas (SIGKILL in the callback's poll loop) and restarts it. */
static int test_postprocd_killed_mid_stream_each_delta_once(void)
{
    struct rs_harness h;
    char model[512];
    struct rs_wire_generate g;
    struct rs_client_result ref = {0};
    int rc = start(&h, model, sizeof(model)), failed = 0;
    if (rc != 0)
        return rc;
    greedy(&g, "Once upon a time", 600, true);
    RS_CHECK(reference(&h, &g, &ref) == 0);
    rs_client *c = client_of(&h);
    RS_CHECK(c != NULL);
    for (uint32_t after = 5; after <= 405 && !failed; after += 200) {
        struct stream_rec r = {0};
        failed = rs_client_submit(c, &g, NULL, on_event, &r, NULL) != RS_OK;
        uint64_t end = rs_clock_ms() + 30000;
        while (!failed && r.n_deltas < after && r.n_finals == 0 && rs_clock_ms() < end)
            rs_client_poll(c, 1);
        rs_harness_signal(&h, RS_PIPE_STAGE_POSTPROCD, SIGKILL);
        for (uint64_t t = rs_clock_ms() + 30; rs_clock_ms() < t;)
            rs_client_poll(c, 5); /* the rest is generated while postprocd is down */
        failed = failed || rs_harness_start_stage(&h, RS_PIPE_STAGE_POSTPROCD, NULL, 1) != RS_OK ||
                 wait_final(c, &r, 60000) != 0 || same_output(&r, &ref) != 0;
        if (failed)
            fprintf(stderr, "postprocd killed after %u deltas\n", after);
        rs_client_result_fini(&r.res);
    }
    print_stats("postprocd killed mid-stream", c);
    if (failed)
        rs_harness_dump_logs(&h, RS_PIPE_N_STAGES);
    rs_client_destroy(&c);
    rs_harness_stop(&h, 0);
    rs_client_result_fini(&ref);
    return failed;
}

/*
 * postprocd dies by failpoint right after handing a message to ZeroMQ, before
 * recording it: the restarted one sends it again with the same seq (or the
 * message was lost with the process, and the client resumes). Either way the
 * callback sees it once.
 */
static int crash_after_send(const char *failpoint, uint32_t n_tokens)
{
    struct rs_harness h;
    char model[512];
    struct rs_wire_generate g;
    struct rs_client_result ref = {0};
    struct stream_rec r = {0};
    int rc = start(&h, model, sizeof(model));
    if (rc != 0)
        return rc;
    greedy(&g, "Tim had a", n_tokens, true);
    RS_CHECK(reference(&h, &g, &ref) == 0);
    RS_CHECK(rs_harness_start_stage(&h, RS_PIPE_STAGE_POSTPROCD, failpoint, 1) == RS_OK);
    rs_client *c = client_of(&h);
    RS_CHECK(c != NULL && rs_client_submit(c, &g, NULL, on_event, &r, NULL) == RS_OK);
    uint64_t end = rs_clock_ms() + 20000;
    while (rs_harness_alive(&h, RS_PIPE_STAGE_POSTPROCD) && rs_clock_ms() < end)
        rs_client_poll(c, 5);
    int fired = !rs_harness_alive(&h, RS_PIPE_STAGE_POSTPROCD);
    int ok = fired && rs_harness_start_stage(&h, RS_PIPE_STAGE_POSTPROCD, NULL, 1) == RS_OK &&
             wait_final(c, &r, 60000) == 0 && same_output(&r, &ref) == 0;
    for (uint64_t t = rs_clock_ms() + 300; rs_clock_ms() < t;)
        rs_client_poll(c, 10); /* a repeated final arrives after the first, if at all */
    print_stats(failpoint, c);
    if (!ok)
        rs_harness_dump_logs(&h, RS_PIPE_N_STAGES);
    rs_client_destroy(&c);
    rs_harness_stop(&h, 0);
    RS_CHECK_MSG(fired, "the failpoint did not fire");
    RS_CHECK(ok && r.n_finals == 1);
    rs_client_result_fini(&ref);
    rs_client_result_fini(&r.res);
    return 0;
}

static int test_postprocd_crash_after_delta_sent_delivers_once(void)
{
    return crash_after_send("RS_FAILPOINT=postprocd.delta_sent:40", 200);
}

static int test_postprocd_crash_after_final_sent_delivers_once(void)
{
    return crash_after_send("RS_FAILPOINT=postprocd.final_sent:1", 50);
}

/* A TCP port free right now on 127.0.0.1 (the kernel picks it; a race is possible but rare). */
static int free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* Key pair `name` saved under the test's scratch directory; paths into sec and pub. */
static int keypair(const char *name, struct rs_zcert *c, char *sec, char *pub, size_t cap)
{
    snprintf(sec, cap, "%s/%s.key", rs_test_tmpdir(), name);
    snprintf(pub, cap, "%s/%s.pub", rs_test_tmpdir(), name);
    return rs_zcert_generate(c) == RS_OK && rs_zcert_save(c, sec, pub) == RS_OK ? 0 : 1;
}

/*
 * Another socket (same user, no secret: another owner) connects to
 * postprocd under the client's routing id, says hello and asks for the
 * client's request (id "1", the library's first) from seq 0, for a second.
 * Returns how many messages it received: the daemon ignores a second
 * connection under a live routing id, so nothing, not even a welcome.
 */
static int steal_routing_id(const struct rs_harness *h, rs_client *c)
{
    char ep[RS_ZSOCK_ENDPOINT_MAX];
    struct rs_zsock_cfg cfg;
    struct rs_wire_client_msg hello, resume;
    struct rs_wire_buf enc;
    rs_zsock *s = NULL;
    void *zctx = zmq_ctx_new();
    int got = 0;
    rs_zsock_cfg_default(RS_ZSOCK_DEALER, &cfg);
    cfg.routing_id = rs_client_routing_id(c, &cfg.routing_id_len);
    memset(&hello, 0, sizeof(hello));
    hello.type = RS_WIRE_T_HELLO;
    memset(&resume, 0, sizeof(resume));
    resume.type = RS_WIRE_T_RESUME;
    snprintf(resume.id, sizeof(resume.id), "1");
    rs_wire_buf_init(&enc, RS_WIRE_CLIENT_MSG_MAX);
    if (rs_rundir_endpoint(h->rundir, "postprocd.sock", ep, sizeof(ep)) != RS_OK ||
        rs_zsock_create(zctx, RS_ZSOCK_DEALER, ep, &cfg, &s) != RS_OK)
        got = -1;
    for (uint64_t end = rs_clock_ms() + 1000; got >= 0 && rs_clock_ms() < end;) {
        zmq_msg_t body;
        if (rs_wire_client_encode(&hello, &enc) == RS_OK)
            rs_zsock_send(s, enc.data, enc.len); /* refused until connected (IMMEDIATE) */
        if (rs_wire_client_encode(&resume, &enc) == RS_OK)
            rs_zsock_send(s, enc.data, enc.len);
        zmq_msg_init(&body);
        got += rs_zsock_recv(s, NULL, &body, 100) == RS_OK;
        zmq_msg_close(&body);
    }
    rs_wire_buf_fini(&enc);
    rs_zsock_destroy(&s);
    zmq_ctx_term(zctx);
    return got;
}

static int test_another_socket_under_the_client_routing_id_gets_nothing(void)
{
    struct rs_harness h;
    char model[512];
    struct rs_wire_generate g;
    struct rs_client_result ref = {0};
    struct stream_rec r = {0};
    int rc = start(&h, model, sizeof(model));
    if (rc != 0)
        return rc;
    greedy(&g, "Once upon a time", 600, true);
    RS_CHECK(reference(&h, &g, &ref) == 0);
    rs_client *c = client_of(&h);
    RS_CHECK(c != NULL && rs_client_submit(c, &g, NULL, on_event, &r, NULL) == RS_OK);
    for (uint64_t end = rs_clock_ms() + 30000; r.n_deltas < 5 && rs_clock_ms() < end;)
        rs_client_poll(c, 5);
    int got = r.n_deltas >= 5 && r.n_finals == 0 ? steal_routing_id(&h, c) : -1;
    int ok = got == 0 && wait_final(c, &r, 60000) == 0 && same_output(&r, &ref) == 0;
    print_stats("another socket under the routing id", c);
    if (!ok)
        rs_harness_dump_logs(&h, RS_PIPE_N_STAGES);
    rs_client_destroy(&c);
    rs_harness_stop(&h, 0);
    rs_client_result_fini(&ref);
    rs_client_result_fini(&r.res);
    RS_CHECK_MSG(got == 0, "the other socket received %d messages", got);
    RS_CHECK(ok);
    return 0;
}

static int test_tcp_with_curve_serves_allowed_key_only(void)
{
    struct rs_harness h;
    struct rs_harness_opts o = {0};
    struct rs_zcert srv, ok_key, bad_key;
    char model[512], srv_sec[400], srv_pub[400], ok_sec[400], ok_pub[400], bad_sec[400],
        bad_pub[400], tok_ep[64], post_ep[64];
    if (rs_test_refdata(MODEL, model, sizeof(model)) == NULL)
        return RS_TEST_SKIP;
    RS_CHECK(keypair("server", &srv, srv_sec, srv_pub, sizeof(srv_sec)) == 0);
    RS_CHECK(keypair("allowed", &ok_key, ok_sec, ok_pub, sizeof(ok_sec)) == 0);
    RS_CHECK(keypair("refused", &bad_key, bad_sec, bad_pub, sizeof(bad_sec)) == 0);
    int p1 = free_port(), p2 = free_port();
    RS_CHECK(p1 > 0 && p2 > 0 && p1 != p2);
    snprintf(tok_ep, sizeof(tok_ep), "tcp://127.0.0.1:%d", p1);
    snprintf(post_ep, sizeof(post_ep), "tcp://127.0.0.1:%d", p2);
    const char *tok_args[] = {"--listen", tok_ep, "--curve-secret", srv_sec, "--curve-allow",
                              ok_pub, NULL};
    const char *post_args[] = {"--listen", post_ep, "--curve-secret", srv_sec, "--curve-allow",
                               ok_pub, NULL};
    memcpy(o.extra[RS_PIPE_STAGE_TOKENIZERD], tok_args, sizeof(tok_args));
    memcpy(o.extra[RS_PIPE_STAGE_POSTPROCD], post_args, sizeof(post_args));
    o.model = model;
    o.n_ctx = CTX;
    o.max_requests = 64;
    RS_CHECK(rs_harness_start(&h, &o) == RS_OK);
    struct rs_wire_generate g;
    struct rs_client_result ref = {0}, got = {0}, refused = {0};
    greedy(&g, "Once upon a time", 32, false);
    int failed = reference(&h, &g, &ref); /* over ipc:// */
    struct rs_client_opts co;
    rs_client_opts_default(&co);
    co.tokenizerd_endpoint = tok_ep;
    co.postprocd_endpoint = post_ep;
    co.curve_secret_file = ok_sec;
    co.curve_server_public = srv.public_z85;
    rs_client *c = NULL, *bad = NULL;
    failed |= rs_client_create(&co, &c) != RS_OK ||
              rs_client_generate_sync(c, &g, 30000, NULL, NULL, &got) != RS_OK;
    co.curve_secret_file = bad_sec; /* a key not in the allowlist: refused at the handshake */
    failed |= rs_client_create(&co, &bad) != RS_OK ||
              rs_client_generate_sync(bad, &g, 1500, NULL, NULL, &refused) != RS_OK;
    if (failed)
        rs_harness_dump_logs(&h, RS_PIPE_N_STAGES);
    rs_client_destroy(&c);
    rs_client_destroy(&bad);
    rs_harness_stop(&h, 0);
    const char *files[] = {srv_sec, srv_pub, ok_sec, ok_pub, bad_sec, bad_pub};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        unlink(files[i]);
    RS_CHECK(!failed);
    RS_CHECK_MSG(got.status == RS_CLIENT_OK && got.n_tokens == ref.n_tokens &&
                     memcmp(got.tokens, ref.tokens, ref.n_tokens * sizeof(uint32_t)) == 0,
                 "tcp client: status %s, %u tokens", rs_client_status_name(got.status),
                 got.n_tokens);
    RS_CHECK_MSG(refused.status == RS_CLIENT_TIMEOUT && refused.n_tokens == 0,
                 "unlisted key: status %s", rs_client_status_name(refused.status));
    rs_client_result_fini(&ref);
    rs_client_result_fini(&got);
    rs_client_result_fini(&refused);
    return 0;
}

/* bench_loadgen's short version: it starts its own instance; only completion is checked. */
static int test_loadgen_short_runs_complete(void)
{
    char model[512], bin[600], out[400], line[4096];
    if (rs_test_refdata(MODEL, model, sizeof(model)) == NULL)
        return RS_TEST_SKIP;
    snprintf(bin, sizeof(bin), "%s/bench_loadgen", rs_test_bindir());
    snprintf(out, sizeof(out), "%s/loadgen.out", rs_test_tmpdir());
    const char *closed[] = {bin, "--start", "--model", model, "--threads", "1", "--clients", "4",
                            "--requests", "12", "--prompt-len", "8:40", "--output-len", "4:24",
                            "--json", NULL};
    const char *poisson[] = {bin, "--start", "--model", model, "--threads", "1", "--clients",
                             "3", "--requests", "10", "--rate", "200", "--text", MODEL_TEXT,
                             "--json", NULL};
    const char *const *runs[] = {closed, poisson};
    for (int r = 0; r < 2; r++) {
        int st = run_to_file(runs[r], out), found = 0;
        FILE *f = fopen(out, "r");
        while (f != NULL && fgets(line, sizeof(line), f) != NULL)
            found |= strncmp(line, "{\"requests\":", 12) == 0 &&
                     strstr(line, r == 0 ? "{\"requests\":12,\"failed\":0,"
                                         : "{\"requests\":10,\"failed\":0,") != NULL;
        if (f != NULL)
            fclose(f);
        RS_CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0 && found, "run %d: status 0x%x", r,
                     st);
    }
    return 0;
}

/*
 * The short version of bench/chaos --hostile: two well-behaved clients beside
 * a flood, unread streams and routing-id thieves (the attacker in its own
 * process). The bench exits 0 only when no good request was lost or changed
 * and no thief received output; its printed counts are checked as well.
 */
static int test_hostile_neighbours_short_run_loses_nothing(void)
{
    char model[512], bin[600], out[400], line[512];
    if (rs_test_refdata(MODEL, model, sizeof(model)) == NULL)
        return RS_TEST_SKIP;
    snprintf(bin, sizeof(bin), "%s/bench_chaos_hostile", rs_test_bindir());
    snprintf(out, sizeof(out), "%s/hostile.out", rs_test_tmpdir());
    const char *argv[] = {bin, "--good", "2", "--requests", "3", "--floods", "1",
                          "--flood-each", "40", "--unread", "4", NULL};
    int st = run_to_file(argv, out), good = 0, thieves = 0;
    FILE *f = fopen(out, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        good |= strstr(line, "hostile: 6 completed, 0 lost, 0 changed") != NULL;
        thieves |= strstr(line, "2 thieves:") != NULL && strstr(line, " 0 of them output") != NULL;
    }
    if (f != NULL)
        fclose(f);
    RS_CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0 && good && thieves,
                 "status 0x%x, good line %d, thieves line %d", st, good, thieves);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_cli_greedy_from_bos_prints_published_text),
    RS_TEST(test_hostile_neighbours_short_run_loses_nothing),
    RS_TEST(test_concurrent_clients_get_their_solo_output),
    RS_TEST(test_cancel_mid_stream_ends_with_abort),
    RS_TEST(test_refused_request_ends_with_the_servers_error),
    RS_TEST(test_cancel_before_ack_ends_with_abort),
    RS_TEST(test_release_frees_finished_requests_at_once),
    RS_TEST(test_tokenizerd_killed_before_ack_runs_request_once),
    RS_TEST(test_tokenizerd_killed_mid_intake_runs_request_once),
    RS_TEST(test_tokenizerd_killed_at_random_moments_runs_each_request_once),
    RS_TEST(test_slow_tokenizerd_after_restart_acks_every_request),
    RS_TEST(test_postprocd_killed_mid_stream_each_delta_once),
    RS_TEST(test_postprocd_crash_after_delta_sent_delivers_once),
    RS_TEST(test_postprocd_crash_after_final_sent_delivers_once),
    RS_TEST(test_another_socket_under_the_client_routing_id_gets_nothing),
    RS_TEST(test_tcp_with_curve_serves_allowed_key_only),
    RS_TEST(test_loadgen_short_runs_complete),
};

RS_TEST_MAIN(cases)

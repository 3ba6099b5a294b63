/* SPDX-License-Identifier: MIT */
/*
 * A stopped stage's leftovers are reclaimed once it dies, without waiting for
 * another stage to restart: tokenizerd stopped (SIGSTOP, by failpoint) in the
 * middle of writing a prompt holds a CLAIMED record and a RESERVED token
 * chunk; its replacement fences it and serves, the old process is resumed and
 * exits, and the replacement's periodic sweep then frees what it held, so the
 * shared-memory audit is clean while every daemon keeps running.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "client/client.h"
#include "common/clock.h"
#include "ipc/pipeline_config.h"
#include "tests/pipeline_harness.h"
#include "tests/rs_test.h"

/* What the client saw of the one request. */
struct seen {
    int finals;
    enum rs_client_status status;
    enum rs_wire_finish finish;
    uint32_t tokens, completion_tokens;
};

static void on_event(const struct rs_client_event *ev)
{
    struct seen *s = ev->user;
    s->tokens += ev->n_tokens;
    if (ev->kind != RS_CLIENT_EV_FINAL)
        return;
    s->finals++;
    s->status = ev->status;
    s->finish = ev->finish_reason;
    s->completion_tokens = ev->usage.completion_tokens;
}

/* 0 once pid is stopped, 1 while it is not (or if it exited instead). */
static int is_stopped(pid_t pid)
{
    int st;
    return waitpid(pid, &st, WUNTRACED | WNOHANG) == pid && WIFSTOPPED(st) ? 0 : 1;
}

static int test_stopped_tokenizerd_leftovers_freed_after_it_dies(void)
{
    struct rs_harness h;
    struct rs_harness_opts o = {0};
    char model[512];
    if (rs_test_refdata("stories260K.gguf", model, sizeof(model)) == NULL)
        return RS_TEST_SKIP;
    o.model = model;
    o.n_ctx = 256;
    o.max_requests = 16;
    RS_CHECK(rs_harness_start(&h, &o) == RS_OK);
    rs_harness_signal(&h, RS_PIPE_STAGE_TOKENIZERD, SIGTERM);
    RS_CHECK(rs_harness_start_stage(&h, RS_PIPE_STAGE_TOKENIZERD,
                                    "RS_FAILPOINT=arena.append.written:1:stop", 1) == RS_OK);
    struct rs_client_opts co;
    rs_client *c = NULL;
    rs_client_opts_default(&co);
    co.rundir = h.rundir;
    RS_CHECK(rs_client_create(&co, &c) == RS_OK);
    struct rs_wire_generate g;
    rs_wire_generate_init(&g);
    g.has = RS_WIRE_GEN_PROMPT | RS_WIRE_GEN_MAX_TOKENS | RS_WIRE_GEN_TEMPERATURE;
    g.prompt = (struct rs_wire_str){"Once upon a time", 16};
    g.max_tokens = 8;
    g.temperature = 0;
    struct seen seen = {0};
    RS_CHECK(rs_client_submit(c, &g, NULL, on_event, &seen, NULL) == RS_OK);
    pid_t zombie = rs_harness_forget(&h, RS_PIPE_STAGE_TOKENIZERD);
    int stopped = 1;
    for (uint64_t end = rs_clock_ms() + 20000; stopped != 0 && rs_clock_ms() < end;) {
        rs_client_poll(c, 10);
        stopped = is_stopped(zombie);
    }
    RS_CHECK_MSG(stopped == 0, "tokenizerd did not stop at its failpoint");
    RS_CHECK(rs_harness_start_stage(&h, RS_PIPE_STAGE_TOKENIZERD, NULL, 1) == RS_OK);
    kill(zombie, SIGCONT);
    int st = 0;
    RS_CHECK(waitpid(zombie, &st, 0) == zombie);
    RS_CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1, "the resumed zombie did not exit 1");
    RS_CHECK(rs_client_wait(c, 60000) == RS_OK); /* the client resent; the request ran */
    /* ...to an OK final: its tokens, no error and no timeout standing in for one */
    RS_CHECK_MSG(seen.finals == 1 && seen.status == RS_CLIENT_OK, "%d finals, status %s",
                 seen.finals, rs_client_status_name(seen.status));
    RS_CHECK_MSG(seen.finish == RS_WIRE_FINISH_LENGTH || seen.finish == RS_WIRE_FINISH_STOP,
                 "finish reason %s", rs_wire_finish_name(seen.finish));
    RS_CHECK_MSG(seen.tokens >= 1 && seen.tokens <= 8 && seen.tokens == seen.completion_tokens,
                 "%u tokens streamed, %u in the usage", seen.tokens, seen.completion_tokens);
    struct rs_harness_audit a;
    int findings = 1;
    for (uint64_t end = rs_clock_ms() + 15000; findings != 0 && rs_clock_ms() < end;) {
        rs_client_poll(c, 100);
        findings = rs_harness_audit(&h, &a);
    }
    rs_client_destroy(&c);
    rs_harness_stop(&h, findings != 0);
    RS_CHECK_MSG(findings == 0, "%d findings: %llu records, %llu reserved chunks", findings,
                 (unsigned long long)a.records_busy, (unsigned long long)a.chunks_reserved);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_stopped_tokenizerd_leftovers_freed_after_it_dies),
};
RS_TEST_MAIN(cases)

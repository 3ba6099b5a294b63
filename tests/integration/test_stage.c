/* SPDX-License-Identifier: MIT */
/*
 * The stage skeleton (ipc/stage.h) as the four real daemons run it: the
 * same generated --help, the same refusals with exit 2 and a line naming
 * the problem, and the same orderly stop on SIGTERM (exit 0, role EXITED).
 * The fenced exit is checked under load by crash.chaos
 * stopped_stage_replaced_then_resumed_is_fenced.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/pipeline.h"
#include "tests/pipeline_harness.h"
#include "tests/rs_test.h"

static const char *const daemons[RS_PIPE_N_STAGES] = {"tokenizerd", "schedulerd", "launcherd",
                                                      "postprocd"};

static int test_every_daemon_has_the_same_help_and_refusals(void)
{
    char model[512], bad_model[600];
    static char out[16384];
    if (rs_test_refdata("stories260K.gguf", model, sizeof(model)) == NULL)
        return RS_TEST_SKIP;
    snprintf(bad_model, sizeof(bad_model), "--model=%s/nonexistent.gguf", rs_test_tmpdir());
    for (int s = 0; s < RS_PIPE_N_STAGES; s++) {
        const char *d = daemons[s];
        const char *help[] = {"--help", NULL};
        RS_CHECK_MSG(rs_test_run(d, help, out, sizeof(out)) == 0, "%s --help", d);
        RS_CHECK_MSG(strstr(out, "--model PATH") && strstr(out, "--max-seqs N") &&
                         strstr(out, "--group NAME") && strstr(out, "--cpus LIST") &&
                         strstr(out, "-h, --help"),
                     "%s --help lacks a shared option:\n%s", d, out);
        const char *unknown[] = {"--model", model, "--frobnicate", NULL};
        RS_CHECK(rs_test_run(d, unknown, out, sizeof(out)) == 2);
        RS_CHECK_MSG(strstr(out, "unknown option '--frobnicate'"), "%s: %s", d, out);
        const char *nomodel[] = {"--ctx=64", NULL};
        RS_CHECK(rs_test_run(d, nomodel, out, sizeof(out)) == 2 && strstr(out, "no model"));
        const char *badval[] = {"--model", model, "--max-seqs=0", NULL};
        RS_CHECK(rs_test_run(d, badval, out, sizeof(out)) == 2);
        RS_CHECK_MSG(strstr(out, "option --max-seqs: '0' is not an integer in 1..4096"), "%s: %s",
                     d, out);
        const char *missing[] = {bad_model, NULL};
        RS_CHECK(rs_test_run(d, missing, out, sizeof(out)) == 2 && strstr(out, "nonexistent.gguf"));
        const char *operand[] = {"--model", model, "stray", NULL};
        RS_CHECK(rs_test_run(d, operand, out, sizeof(out)) == 2 && strstr(out, "unexpected argument"));
    }
    return 0;
}

/* SIGTERM: every stage exits 0 and leaves its role EXITED (the orderly close ran). */
static int test_sigterm_stops_every_stage_in_order(void)
{
    char model[512];
    if (rs_test_refdata("stories260K.gguf", model, sizeof(model)) == NULL)
        return RS_TEST_SKIP;
    struct rs_harness h;
    struct rs_harness_opts o = {.model = model, .n_ctx = 128, .max_requests = 16,
                                .n_kv_blocks = 64, .max_seqs = 4, .max_batched_tokens = 64};
    memset(&h, 0, sizeof(h));
    RS_CHECK(rs_harness_start(&h, &o) == RS_OK);
    for (int s = RS_PIPE_N_STAGES - 1; s >= 0; s--) {
        struct rs_role_info info;
        int code = rs_harness_signal(&h, (enum rs_pipe_stage)s, SIGTERM);
        RS_CHECK_MSG(code == 0, "%s exited %d on SIGTERM", daemons[s], code);
        RS_CHECK(rs_harness_role(&h, (enum rs_pipe_stage)s, &info) == RS_OK);
        RS_CHECK_MSG(info.phase == RS_ROLE_EXITED, "%s left its role in phase %d", daemons[s],
                     info.phase);
    }
    rs_harness_stop(&h, 0);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_every_daemon_has_the_same_help_and_refusals),
    RS_TEST(test_sigterm_stops_every_stage_in_order),
};

RS_TEST_MAIN(cases)

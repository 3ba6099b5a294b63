/* SPDX-License-Identifier: MIT */
/*
 * The real schedulerd binary driven alone: this test opens the instance as
 * tokenizerd (writes request records and rings request_ready / cancel), as
 * launcherd (answers every batch at no cost after checking it against the
 * token lists, the KV rows and a simulated K/V cache; see
 * tests/unit/sched_fixture.h) and as postprocd (checks outputs, frees
 * finished records), over real doorbell sockets. Covers end-to-end serving
 * with budgets, chunking and preemption, prefix-cache hits read from the
 * metrics, cancels freeing blocks before the next step, a launcher restart,
 * lost and repeated doorbells, a malformed result, bad arguments and
 * configurations, fencing of a stopped old incarnation, and SIGKILLs at
 * random points followed by restarts (nothing lost or repeated, no KV block
 * leaked: refcounts audited against the tables).
 */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "ipc/pipeline_batch.h"
#include "ipc/pipeline_door.h"
#include "ipc/pipeline_kv.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "ipc/pipeline_result.h"
#include "ipc/rundir.h"
#include "tests/unit/sched_fixture.h"

struct ix {
    struct sfx f;
    char rundir[128];
    void *zctx;
    struct rs_pipe_doors lau, post;
    pid_t child;
    char log[300];     /* the child's stderr when set */
    const char *fault; /* RS_DOORBELL_FAULT for the child */
    char failpoint[64];/* RS_FAILPOINT for the child when set */
    uint64_t kills, restarts;
};

static pid_t ix_pid_to_kill;

static void ix_atexit(void)
{
    if (ix_pid_to_kill > 0) {
        kill(ix_pid_to_kill, SIGKILL);
        waitpid(ix_pid_to_kill, NULL, 0);
    }
}

/* Signals the current schedulerd (never pid 0 or -1: that would hit our own group). */
static void ix_kill(struct ix *x, int sig)
{
    if (x->child > 0)
        kill(x->child, sig);
}

/* Starts build/bin/schedulerd with the instance's options (plus extra) and no wait. */
static pid_t ix_spawn(struct ix *x, const char *const *extra)
{
    const struct rs_pipe_config *c = &x->f.cfg;
    char path[400], ctx[16], kv[16], seqs[16], toks[16], reqs[16];
    snprintf(path, sizeof(path), "%s/schedulerd", rs_test_bindir());
    snprintf(ctx, sizeof(ctx), "%u", c->n_ctx);
    snprintf(kv, sizeof(kv), "%u", c->n_kv_blocks);
    snprintf(seqs, sizeof(seqs), "%u", c->max_seqs);
    snprintf(toks, sizeof(toks), "%u", c->max_batched_tokens);
    snprintf(reqs, sizeof(reqs), "%u", c->max_requests);
    const char *argv[40] = {path, "--instance", c->instance, "--model", c->model_path,
                            "--ctx", ctx, "--kv-blocks", kv, "--max-seqs", seqs,
                            "--max-batched-tokens", toks, "--max-requests", reqs,
                            "--rundir", x->rundir};
    int n = 17;
    if (!c->prefix_caching)
        argv[n++] = "--no-prefix-caching";
    if (c->priority_policy) {
        argv[n++] = "--policy";
        argv[n++] = "priority";
    }
    for (int i = 0; extra != NULL && extra[i] != NULL && n < 39; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    /* Set here, not in the child: between fork and exec the child may not allocate. */
    if (x->fault != NULL)
        setenv("RS_DOORBELL_FAULT", x->fault, 1);
    if (x->failpoint[0] != '\0')
        setenv("RS_FAILPOINT", x->failpoint, 1);
    pid_t pid = fork();
    if (pid == 0) {
        if (x->log[0] != '\0') {
            int fd = open(x->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (fd >= 0)
                dup2(fd, 2);
        }
        execv(path, (char *const *)argv);
        _exit(127);
    }
    unsetenv("RS_DOORBELL_FAULT");
    unsetenv("RS_FAILPOINT");
    return pid;
}

/* Waits until schedulerd's role is READY under process pid; 0 ok. */
static int ix_wait_ready(struct ix *x, pid_t pid)
{
    for (int i = 0; i < 3000; i++) {
        struct rs_role_info info;
        if (rs_role_info_at(x->f.tok->shm, RS_PIPE_STAGE_SCHEDULERD, &info) == RS_OK &&
            info.phase == RS_ROLE_READY && info.pid == (uint32_t)pid)
            return 0;
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            fprintf(stderr, "schedulerd exited before becoming ready\n");
            return 1;
        }
        usleep(2000);
    }
    fprintf(stderr, "schedulerd not ready after 6 s\n");
    return 1;
}

static int ix_start(struct ix *x)
{
    x->child = ix_spawn(x, NULL);
    ix_pid_to_kill = x->child;
    return x->child > 0 ? ix_wait_ready(x, x->child) : 1;
}

static int ix_open(struct ix *x, struct rs_pipe_config *c, const char *fault)
{
    memset(x, 0, sizeof(*x));
    if (sfx_open(&x->f, c) != 0)
        return 1;
    atexit(ix_atexit);
    snprintf(x->rundir, sizeof(x->rundir), "%s/run-%s", rs_test_tmpdir(), c->instance + 6);
    x->fault = fault;
    x->zctx = zmq_ctx_new();
    if (x->fault != NULL) /* our doorbells to schedulerd are dropped or doubled as well */
        setenv("RS_DOORBELL_FAULT", x->fault, 1);
    int bad = rs_rundir_prepare(x->rundir, NULL) != RS_OK ||
              rs_pipe_doors_open(&x->lau, x->zctx, x->rundir, RS_PIPE_STAGE_LAUNCHERD) != RS_OK ||
              rs_pipe_doors_open(&x->post, x->zctx, x->rundir, RS_PIPE_STAGE_POSTPROCD) != RS_OK;
    unsetenv("RS_DOORBELL_FAULT");
    return bad ? 1 : ix_start(x);
}

/* SIGTERM, then the exit status schedulerd gave (0 expected). */
static int ix_stop(struct ix *x)
{
    int st = -1;
    if (x->child > 0) {
        kill(x->child, SIGTERM);
        waitpid(x->child, &st, 0);
        x->child = ix_pid_to_kill = 0;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void ix_close(struct ix *x)
{
    if (x->child > 0)
        ix_stop(x);
    rs_pipe_doors_close(&x->lau);
    rs_pipe_doors_close(&x->post);
    zmq_ctx_term(x->zctx);
    sfx_close(&x->f);
    char p[200];
    const char *names[] = {"schedulerd.door", "launcherd.door", "postprocd.door"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof(p), "%s/%s", x->rundir, names[i]);
        unlink(p);
    }
    rmdir(x->rundir);
    rmdir(rs_test_tmpdir()); /* when nothing else of this process is left in it */
}

static int ix_submit(struct ix *x, uint32_t n, uint32_t shared, uint32_t family, uint32_t max_tokens)
{
    int32_t prompt[512];
    sfx_prompt(prompt, n, shared, family, x->f.n_req + 7);
    int i = sfx_submit(&x->f, prompt, n, max_tokens, 0);
    if (i >= 0)
        rs_pipe_door_ring(&x->lau, RS_PIPE_STAGE_SCHEDULERD, RS_WIRE_DOOR_REQUEST_READY,
                          x->f.req[i].ref.index, x->f.req[i].ref.gen);
    return i;
}

static int all_done(const struct ix *x)
{
    for (uint32_t i = 0; i < x->f.n_req; i++)
        if (!x->f.req[i].done)
            return 0;
    return 1;
}

/* Takes the next batch, waiting up to wait_ms on the launcher doorbell: 1, 0 or -1. */
static int ix_take(struct ix *x, struct sfx_batch *bt, int wait_ms)
{
    struct rs_wire_door d;
    uint64_t until = rs_clock_ms() + (uint64_t)wait_ms;
    for (;;) {
        int got = sfx_take(&x->f, bt);
        if (got != 0 || rs_clock_ms() >= until)
            return got;
        rs_pipe_door_recv(&x->lau, &d, 5);
        while (rs_pipe_door_recv(&x->post, &d, 0) == RS_OK) {
        }
    }
}

static int ix_answer(struct ix *x, struct sfx_batch *bt)
{
    uint64_t id = bt->b->batch_id;
    if (sfx_answer(&x->f, bt) != 0)
        return -1;
    rs_pipe_door_ring(&x->lau, RS_PIPE_STAGE_SCHEDULERD, RS_WIRE_DOOR_BATCH_DONE, id, 0);
    return sfx_reap(&x->f) < 0 ? -1 : 0;
}

/* Serves until every request is reaped (audit at each batch): 0, or -1 (x->f.why). */
static int ix_serve(struct ix *x, int budget_ms)
{
    struct sfx_batch bt;
    uint64_t until = rs_clock_ms() + (uint64_t)budget_ms;
    while (!all_done(x)) {
        if (rs_clock_ms() > until)
            return sfx_fail(&x->f, "not done after %d ms", budget_ms);
        int got = ix_take(x, &bt, 20);
        if (got < 0 || (got == 1 && (sfx_audit(&x->f) != 0 || ix_answer(x, &bt) != 0)))
            return -1;
        if (got == 0 && sfx_reap(&x->f) < 0)
            return -1;
    }
    return 0;
}

/* After everything finished: no row owned, no block used, gauges add up. */
static int ix_final_audit(struct ix *x)
{
    for (int i = 0; i < 200 && sfx_metric(&x->f, RS_M_SCH_RUNNING) != 0; i++)
        usleep(5000); /* the pass that finished the last request updates the gauges last */
    if (sfx_audit(&x->f) != 0)
        return -1;
    if (sfx_metric(&x->f, RS_M_SCH_KV_USED) != 0 || sfx_metric(&x->f, RS_M_SCH_WAITING) != 0)
        return sfx_fail(&x->f, "KV blocks still used or requests waiting at the end");
    return 0;
}

static int test_serves_requests_end_to_end(void)
{
    struct rs_pipe_config c;
    struct ix x;
    int rc = sfx_config(&c, 256, 128, 8, 64);
    if (rc != 0 || (rc = ix_open(&x, &c, NULL)) != 0)
        return rc;
    for (uint32_t i = 0; i < 12; i++)
        RS_CHECK(ix_submit(&x, 5 + i * 9, 0, 0, 3 + i % 7) >= 0);
    RS_CHECK_MSG(ix_serve(&x, 20000) == 0, "%s", x.f.why);
    RS_CHECK_MSG(ix_final_audit(&x) == 0, "%s", x.f.why);
    RS_CHECK(x.f.max_seqs_seen <= 8 && x.f.max_tokens_seen <= 64 && x.f.max_tokens_seen > 8);
    RS_CHECK(sfx_metric(&x.f, RS_M_SCH_FINISHED) == 12 && sfx_metric(&x.f, RS_M_SCH_STEPS) > 0);
    RS_CHECK(sfx_metric(&x.f, RS_M_SCH_PLAN_NS_LAST) > 0);
    RS_CHECK(ix_stop(&x) == 0); /* SIGTERM: clean exit */
    ix_close(&x);
    return 0;
}

static int test_chunking_and_preemption_under_a_small_pool(void)
{
    struct rs_pipe_config c;
    struct ix x;
    int rc = sfx_config(&c, 128, 12, 6, 24);
    if (rc != 0 || (rc = ix_open(&x, &c, NULL)) != 0)
        return rc;
    for (uint32_t i = 0; i < 10; i++)
        RS_CHECK(ix_submit(&x, 30 + i * 3, 0, 0, 30) >= 0);
    RS_CHECK_MSG(ix_serve(&x, 30000) == 0, "%s", x.f.why);
    RS_CHECK_MSG(ix_final_audit(&x) == 0, "%s", x.f.why);
    RS_CHECK(sfx_metric(&x.f, RS_M_SCH_PREEMPTIONS) > 0 && x.f.max_tokens_seen == 24);
    for (uint32_t i = 0; i < 10; i++)
        RS_CHECK(x.f.req[i].n_out == 30);
    ix_close(&x);
    return 0;
}

static int test_prefix_cache_hits_show_in_the_metrics(void)
{
    struct rs_pipe_config c;
    struct ix x;
    int rc = sfx_config(&c, 256, 64, 8, 256);
    if (rc != 0 || (rc = ix_open(&x, &c, NULL)) != 0)
        return rc;
    RS_CHECK(ix_submit(&x, 100, 96, 5, 4) == 0);
    RS_CHECK_MSG(ix_serve(&x, 10000) == 0, "%s", x.f.why);
    RS_CHECK(ix_submit(&x, 110, 96, 5, 4) == 1 && ix_submit(&x, 97, 96, 5, 4) == 2);
    RS_CHECK_MSG(ix_serve(&x, 10000) == 0, "%s", x.f.why);
    RS_CHECK(x.f.req[0].n_cached == 0 && x.f.req[1].n_cached == 96 && x.f.req[2].n_cached == 96);
    RS_CHECK(sfx_metric(&x.f, RS_M_SCH_PREFIX_HIT) == 192);
    RS_CHECK(sfx_metric(&x.f, RS_M_SCH_PREFIX_QUERY) == 100 + 110 + 97);
    RS_CHECK_MSG(ix_final_audit(&x) == 0, "%s", x.f.why);
    ix_close(&x);
    return 0;
}

static int test_cancel_frees_blocks_before_the_next_step(void)
{
    struct rs_pipe_config c;
    struct ix x;
    int rc = sfx_config(&c, 256, 64, 8, 256);
    if (rc != 0 || (rc = ix_open(&x, &c, NULL)) != 0)
        return rc;
    RS_CHECK(ix_submit(&x, 40, 0, 0, 100) == 0 && ix_submit(&x, 20, 0, 0, 6) == 1);
    struct sfx_batch bt;
    for (int i = 0; i < 3; i++)
        RS_CHECK(ix_take(&x, &bt, 5000) == 1 && ix_answer(&x, &bt) == 0);
    RS_CHECK(ix_take(&x, &bt, 5000) == 1 && bt.b->n_seqs == 2);
    uint64_t used = sfx_metric(&x.f, RS_M_SCH_KV_USED);
    struct rs_table_ref r0 = x.f.req[0].ref;
    RS_CHECK(rs_pipe_finish_set(rs_pipe_req_at(x.f.tok, r0.index),
                                rs_pipe_finish_make(RS_WIRE_FINISH_ABORT,
                                                    RS_PIPE_STAGE_TOKENIZERD, 0)));
    rs_pipe_door_ring(&x.lau, RS_PIPE_STAGE_SCHEDULERD, RS_WIRE_DOOR_CANCEL, r0.index, r0.gen);
    RS_CHECK(ix_answer(&x, &bt) == 0);
    RS_CHECK(ix_take(&x, &bt, 5000) == 1 && bt.b->n_seqs == 1);
    RS_CHECK(rs_pipe_batch_seqs(bt.b)[0].req_index != r0.index);
    uint32_t state;
    RS_CHECK(rs_table_get(x.f.tok->requests, r0, &state, NULL) != RS_OK ||
             state == RS_PIPE_REQ_FINISHED);
    RS_CHECK(sfx_metric(&x.f, RS_M_SCH_KV_USED) == used - 3); /* 40 tokens + 3 = 3 blocks */
    RS_CHECK_MSG(sfx_audit(&x.f) == 0, "%s", x.f.why);
    RS_CHECK(ix_answer(&x, &bt) == 0);
    RS_CHECK_MSG(ix_serve(&x, 10000) == 0, "%s", x.f.why);
    RS_CHECK(x.f.req[0].reason == RS_WIRE_FINISH_ABORT && x.f.req[0].n_out == 4);
    RS_CHECK(x.f.req[1].reason == RS_WIRE_FINISH_LENGTH && x.f.req[1].n_out == 6);
    RS_CHECK_MSG(ix_final_audit(&x) == 0, "%s", x.f.why);
    ix_close(&x);
    return 0;
}

static int test_launcher_restart_reprefills_with_identical_outputs(void)
{
    struct rs_pipe_config c;
    struct ix x;
    int rc = sfx_config(&c, 256, 64, 8, 256);
    if (rc != 0 || (rc = ix_open(&x, &c, NULL)) != 0)
        return rc;
    for (uint32_t i = 0; i < 4; i++)
        RS_CHECK(ix_submit(&x, 30 + i, 16, 1, 20) >= 0);
    struct sfx_batch bt;
    for (int i = 0; i < 6; i++)
        RS_CHECK(ix_take(&x, &bt, 5000) == 1 && ix_answer(&x, &bt) == 0);
    RS_CHECK(ix_take(&x, &bt, 5000) == 1);
    RS_CHECK(sfx_restart_launcher(&x.f) == 0); /* the held batch comes back to the new one */
    RS_CHECK(ix_take(&x, &bt, 5000) == 1 && bt.kv_lost && ix_answer(&x, &bt) == 0);
    RS_CHECK(ix_take(&x, &bt, 5000) == 1 && !bt.kv_lost);
    for (uint32_t i = 0; i < bt.b->n_seqs; i++)
        RS_CHECK(rs_pipe_batch_seqs(bt.b)[i].pos0 == 0);
    RS_CHECK(ix_answer(&x, &bt) == 0);
    RS_CHECK_MSG(ix_serve(&x, 10000) == 0, "%s", x.f.why);
    RS_CHECK(sfx_metric(&x.f, RS_M_SCH_LAUNCHER_RESETS) == 1);
    for (uint32_t i = 0; i < 4; i++)
        RS_CHECK(x.f.req[i].n_out == 20 && x.f.req[i].n_preempted == 1);
    RS_CHECK_MSG(ix_final_audit(&x) == 0, "%s", x.f.why);
    ix_close(&x);
    return 0;
}

static int run_with_fault(const char *fault)
{
    struct rs_pipe_config c;
    struct ix x;
    int rc = sfx_config(&c, 256, 64, 4, 64);
    if (rc != 0 || (rc = ix_open(&x, &c, fault)) != 0)
        return rc;
    for (uint32_t i = 0; i < 6; i++)
        RS_CHECK(ix_submit(&x, 10 + i * 5, 0, 0, 5) >= 0);
    RS_CHECK_MSG(ix_serve(&x, 20000) == 0, "%s", x.f.why);
    RS_CHECK_MSG(ix_final_audit(&x) == 0, "%s", x.f.why);
    ix_close(&x);
    return 0;
}

static int test_lost_doorbells_are_covered_by_rescans(void)
{
    return run_with_fault("drop");
}

static int test_repeated_doorbells_are_harmless(void)
{
    return run_with_fault("dup");
}

static int test_malformed_result_is_rejected_and_serving_goes_on(void)
{
    struct rs_pipe_config c;
    struct ix x;
    int rc = sfx_config(&c, 256, 64, 8, 256);
    if (rc != 0 || (rc = ix_open(&x, &c, NULL)) != 0)
        return rc;
    char log[300];
    snprintf(log, sizeof(log), "%s/malformed.log", rs_test_tmpdir());
    RS_CHECK(ix_stop(&x) == 0); /* again, with its stderr captured */
    snprintf(x.log, sizeof(x.log), "%s", log);
    RS_CHECK(ix_start(&x) == 0);
    x.log[0] = '\0';
    RS_CHECK(ix_submit(&x, 20, 0, 0, 5) == 0);
    struct sfx_batch bt;
    RS_CHECK(ix_take(&x, &bt, 5000) == 1);
    struct rs_ring_wr w;
    RS_CHECK(rs_ring_try_claim(x.f.lau->results, &w) == RS_OK);
    struct rs_pipe_result *res = w.data;
    memset(res, 0, sizeof(*res));
    res->batch_id = bt.b->batch_id;
    res->n_rows = 5; /* more rows than the record holds */
    RS_CHECK(rs_ring_commit(x.f.lau->results, &w, res->batch_id, sizeof(*res)) == RS_OK);
    RS_CHECK(rs_ring_release(x.f.lau->batches, &bt.rd) == RS_OK);
    rs_pipe_door_ring(&x.lau, RS_PIPE_STAGE_SCHEDULERD, RS_WIRE_DOOR_BATCH_DONE, 0, 0);
    /* the same batch's work is planned again and the request completes */
    RS_CHECK_MSG(ix_serve(&x, 10000) == 0, "%s", x.f.why);
    RS_CHECK(x.f.req[0].n_out == 5);
    RS_CHECK(ix_stop(&x) == 0);
    FILE *f = fopen(log, "r");
    char line[1024];
    int seen = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        seen |= strstr(line, "rejected: result: row count does not match its length") != NULL;
    if (f != NULL)
        fclose(f);
    unlink(log);
    RS_CHECK(seen);
    ix_close(&x);
    return 0;
}

/* Runs schedulerd with extra arguments (stderr to a file) and returns its exit status. */
static int exit_status(struct ix *x, const char *const *extra, const char *want)
{
    snprintf(x->log, sizeof(x->log), "%s/args.log", rs_test_tmpdir());
    pid_t pid = ix_spawn(x, extra);
    int st = -1;
    waitpid(pid, &st, 0);
    FILE *f = fopen(x->log, "r");
    char buf[4096] = "";
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    unlink(x->log);
    x->log[0] = '\0';
    if (want != NULL && strstr(buf, want) == NULL) {
        fprintf(stderr, "stderr lacks '%s':\n%s\n", want, buf);
        return -1;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int test_bad_arguments_and_configurations_are_refused(void)
{
    struct rs_pipe_config c;
    struct ix x;
    int rc = sfx_config(&c, 256, 64, 8, 256);
    if (rc != 0 || (rc = ix_open(&x, &c, NULL)) != 0)
        return rc;
    RS_CHECK(ix_stop(&x) == 0);
    const char *bogus[] = {"--bogus", NULL};
    const char *zero[] = {"--max-seqs", "0", NULL};
    const char *layout[] = {"--kv-blocks", "99", NULL};
    const char *policy[] = {"--policy", "priority", NULL};
    const char *help[] = {"--help", NULL};
    RS_CHECK(exit_status(&x, bogus, "unknown option '--bogus'") == 2);
    RS_CHECK(exit_status(&x, zero, "--max-seqs") == 2);
    RS_CHECK(exit_status(&x, layout, "region 'kv_meta'") == 1);
    RS_CHECK(exit_status(&x, policy, "priority_policy is 0 there, 1 here") == 1);
    RS_CHECK(exit_status(&x, help, NULL) == 0);
    ix_close(&x);
    return 0;
}

/* State words of every record and KV row owner, to tell whether anyone wrote. */
static uint64_t snapshot(const struct ix *x)
{
    uint64_t h = 0;
    for (uint32_t i = 0; i < x->f.cfg.max_requests; i++) {
        uint32_t st, gen, owner;
        rs_table_peek(x->f.tok->requests, i, &st, &gen, &owner);
        const struct rs_pipe_req *r = rs_pipe_req_at(x->f.tok, i);
        h = h * 1000003 + st + ((uint64_t)gen << 8) + ((uint64_t)owner << 40) + r->n_computed +
            r->inflight_batch;
    }
    for (uint32_t s = 0; s < x->f.cfg.max_seqs; s++)
        h = h * 1000003 + atomic_load(&rs_pipe_kvrow_at(x->f.tok, s)->owner) +
            atomic_load(&rs_pipe_kvrow_at(x->f.tok, s)->n_blocks);
    return h * 1000003 + atomic_load(&x->f.tok->shared->next_batch);
}

static int test_stopped_old_incarnation_is_fenced(void)
{
    struct rs_pipe_config c;
    struct ix x;
    int rc = sfx_config(&c, 256, 64, 8, 256);
    if (rc != 0 || (rc = ix_open(&x, &c, NULL)) != 0)
        return rc;
    for (uint32_t i = 0; i < 4; i++)
        RS_CHECK(ix_submit(&x, 12, 0, 0, 30) >= 0);
    struct sfx_batch bt;
    for (int i = 0; i < 3; i++)
        RS_CHECK(ix_take(&x, &bt, 5000) == 1 && ix_answer(&x, &bt) == 0);
    ix_kill(&x, SIGSTOP); /* hung, not dead: a supervisor gives up on it */
    struct rs_pipe *newer;
    char err[256];
    RS_CHECK(rs_pipe_open(&x.f.cfg, RS_PIPE_STAGE_SCHEDULERD, &newer, err, sizeof(err)) == RS_OK);
    RS_CHECK(ix_submit(&x, 12, 0, 0, 30) >= 0); /* work it could be tempted to take */
    uint64_t before = snapshot(&x);
    ix_kill(&x, SIGCONT);
    int st = 0;
    RS_CHECK(waitpid(x.child, &st, 0) == x.child && WIFEXITED(st) && WEXITSTATUS(st) == 1);
    RS_CHECK(snapshot(&x) == before); /* it wrote nothing once it woke up fenced */
    rs_pipe_close(&newer);
    RS_CHECK(ix_start(&x) == 0);
    RS_CHECK_MSG(ix_serve(&x, 10000) == 0, "%s", x.f.why);
    RS_CHECK_MSG(ix_final_audit(&x) == 0, "%s", x.f.why);
    ix_close(&x);
    return 0;
}

static int test_sigkill_at_random_points_loses_nothing(void)
{
    struct rs_pipe_config c;
    struct ix x;
    int rc = sfx_config(&c, 128, 14, 6, 48);
    if (rc != 0 || (rc = ix_open(&x, &c, NULL)) != 0)
        return rc;
    for (uint32_t i = 0; i < 50; i++)
        RS_CHECK(ix_submit(&x, 8 + (i * 7) % 40, i % 3 ? 16 : 0, i % 4, 6 + i % 30) >= 0);
    srand(12345);
    struct sfx_batch bt;
    uint64_t until = rs_clock_ms() + 60000, next_kill = rs_clock_ms() + 5;
    while (!all_done(&x) && x.kills < 100) {
        RS_CHECK_MSG(rs_clock_ms() < until, "not done after 60 s, %llu kills",
                     (unsigned long long)x.kills);
        if (rs_clock_ms() >= next_kill) {
            ix_kill(&x, SIGKILL);
            waitpid(x.child, NULL, 0);
            x.kills++;
            if (rand() % 2) /* sometimes the launcher answers while schedulerd is down */
                while (sfx_take(&x.f, &bt) == 1)
                    RS_CHECK_MSG(ix_answer(&x, &bt) == 0, "%s", x.f.why);
            RS_CHECK(ix_start(&x) == 0);
            next_kill = rs_clock_ms() + (uint64_t)(rand() % 12);
            continue;
        }
        int got = ix_take(&x, &bt, 2);
        RS_CHECK_MSG(got >= 0, "%s", x.f.why);
        if (got == 1) {
            RS_CHECK_MSG(sfx_audit(&x.f) == 0, "%s", x.f.why);
            if (rand() % 4 == 0)
                usleep((useconds_t)(rand() % 3000)); /* kills land while a batch is held too */
            RS_CHECK_MSG(ix_answer(&x, &bt) == 0, "%s", x.f.why);
        }
        RS_CHECK_MSG(sfx_reap(&x.f) >= 0, "%s", x.f.why);
    }
    RS_CHECK_MSG(ix_serve(&x, 30000) == 0, "%s", x.f.why);
    RS_CHECK_MSG(ix_final_audit(&x) == 0, "%s", x.f.why);
    fprintf(stderr, "sigkill: %llu kills, %llu batches, %llu preemptions, all 50 requests exact\n",
            (unsigned long long)x.kills, (unsigned long long)x.f.batches,
            (unsigned long long)sfx_metric(&x.f, RS_M_SCH_PREEMPTIONS));
    RS_CHECK(x.kills >= 10);
    ix_close(&x);
    return 0;
}

/* Keeps `live` requests submitted and not yet reaped. */
static int top_up(struct ix *x, uint32_t live, uint32_t total)
{
    uint32_t open = 0;
    for (uint32_t i = 0; i < x->f.n_req; i++)
        open += !x->f.req[i].done;
    while (open < live && x->f.n_req < total) {
        uint32_t k = x->f.n_req;
        if (ix_submit(x, 10 + (k * 11) % 50, k % 2 ? 32 : 0, k % 3, 8 + k % 24) < 0)
            return -1;
        open++;
    }
    return 0;
}

/* Serves until schedulerd dies (1) or `batches` were answered (0); -1 on a failed check. */
static int serve_until_death(struct ix *x, int batches, int launcher_restart_at)
{
    struct sfx_batch bt;
    for (int n = 0; n < batches;) {
        int st;
        if (waitpid(x->child, &st, WNOHANG) == x->child) {
            x->child = ix_pid_to_kill = 0;
            return WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? 1 : sfx_fail(&x->f, "exit %d", st);
        }
        if (n == launcher_restart_at && sfx_restart_launcher(&x->f) != 0)
            return -1;
        int got = ix_take(x, &bt, 5);
        if (got < 0 || (got == 1 && ix_answer(x, &bt) != 0) || top_up(x, 12, 400) != 0)
            return -1;
        n += got;
    }
    return 0;
}

static int test_crash_at_each_failpoint_recovers(void)
{
    static const char *const points[] = {
        "sched.admit.row",     "sched.admit.running", "sched.batch.marked", "sched.batch.committed",
        "sched.apply.row",     "sched.apply.done",    "sched.finish.moved", "sched.preempt.moved",
        "sched.row.append",    "sched.kv.register",   "sched.reset.preempted",
        "sched.rebuild.record"};
    struct rs_pipe_config c;
    struct ix x;
    int rc = sfx_config(&c, 128, 20, 6, 48);
    if (rc != 0 || (rc = ix_open(&x, &c, NULL)) != 0)
        return rc;
    RS_CHECK(top_up(&x, 12, 400) == 0);
    int fired = 0, runs = 0;
    for (size_t p = 0; p < sizeof(points) / sizeof(points[0]); p++)
        for (int pass = 1; pass <= 3; pass += 2, runs++) {
            if (x.child > 0) { /* the previous incarnation, if the point did not fire */
                kill(x.child, SIGKILL);
                waitpid(x.child, NULL, 0);
            }
            snprintf(x.failpoint, sizeof(x.failpoint), "%s:%d", points[p], pass);
            x.child = ix_spawn(&x, NULL);
            ix_pid_to_kill = x.child;
            x.failpoint[0] = '\0';
            /* a launcher restart mid-run makes the reset path run */
            int got = serve_until_death(&x, 40, strstr(points[p], "reset") ? 3 : -1);
            RS_CHECK_MSG(got >= 0, "%s at %s:%d", x.f.why, points[p], pass);
            fired += got;
        }
    if (x.child > 0) {
        kill(x.child, SIGKILL);
        waitpid(x.child, NULL, 0);
    }
    RS_CHECK(ix_start(&x) == 0);
    RS_CHECK_MSG(ix_serve(&x, 60000) == 0, "%s", x.f.why);
    RS_CHECK_MSG(ix_final_audit(&x) == 0, "%s", x.f.why);
    fprintf(stderr, "failpoints: %d of %d runs crashed at their point, %u requests all exact\n",
            fired, runs, x.f.n_req);
    RS_CHECK(fired >= runs * 3 / 4);
    ix_close(&x);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_serves_requests_end_to_end),
    RS_TEST(test_chunking_and_preemption_under_a_small_pool),
    RS_TEST(test_prefix_cache_hits_show_in_the_metrics),
    RS_TEST(test_cancel_frees_blocks_before_the_next_step),
    RS_TEST(test_launcher_restart_reprefills_with_identical_outputs),
    RS_TEST(test_lost_doorbells_are_covered_by_rescans),
    RS_TEST(test_repeated_doorbells_are_harmless),
    RS_TEST(test_malformed_result_is_rejected_and_serving_goes_on),
    RS_TEST(test_bad_arguments_and_configurations_are_refused),
    RS_TEST(test_stopped_old_incarnation_is_fenced),
    RS_TEST(test_sigkill_at_random_points_loses_nothing),
    RS_TEST(test_crash_at_each_failpoint_recovers),
};
RS_TEST_MAIN(cases)

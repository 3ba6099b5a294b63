/* SPDX-License-Identifier: MIT */
/*
 * schedulerd's restart from shared memory, in process: the scheduler object
 * is dropped at chosen points (between steps, with a batch in flight, with
 * its result already in the ring, after planning but before the commit) and
 * a new incarnation rebuilds; queues, block refcounts, the prefix cache and
 * the batch in flight must come back so that every output is exactly what a
 * run without the restart gives. Also: stale or broken KV rows are repaired,
 * a fenced scheduler writes nothing, a launcher that changed while the
 * scheduler was down triggers the re-prefill.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/failpoint.h"
#include "ipc/pipeline_batch.h"
#include "ipc/pipeline_kv.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "schedulerd/sched.h"
#include "tests/unit/sched_fixture.h"

struct rx {
    struct sfx f;
    struct rs_pipe *sp;
    struct sched *s;
};

static int rx_start(struct rx *x)
{
    char err[256];
    if (rs_pipe_open(&x->f.cfg, RS_PIPE_STAGE_SCHEDULERD, &x->sp, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "open: %s\n", err);
        return 1;
    }
    if (sched_create(x->sp, NULL, &x->s) != RS_OK || rs_role_ready(x->sp->role) != RS_OK)
        return 1;
    return kv_block_check(&x->s->kv) == RS_OK ? 0 : 1;
}

/* Drops the scheduler without touching shared memory, then starts a new incarnation. */
static int rx_restart(struct rx *x)
{
    sched_destroy(&x->s);
    rs_pipe_close(&x->sp);
    return rx_start(x);
}

static int rx_open(struct rx *x, struct rs_pipe_config *c)
{
    memset(x, 0, sizeof(*x));
    return sfx_open(&x->f, c) != 0 ? 1 : rx_start(x);
}

static void rx_close(struct rx *x)
{
    sched_destroy(&x->s);
    rs_pipe_close(&x->sp);
    sfx_close(&x->f);
}

static int rx_plan(struct rx *x, struct sfx_batch *bt)
{
    if (sched_work(x->s, 1) < 0 || kv_block_check(&x->s->kv) != RS_OK || sfx_audit(&x->f) != 0)
        return -1;
    return sfx_take(&x->f, bt);
}

static int rx_run(struct rx *x, int max_steps)
{
    struct sfx_batch bt;
    for (int step = 0; step < max_steps; step++) {
        int got = rx_plan(x, &bt);
        if (got < 0 || sfx_reap(&x->f) < 0)
            return -1;
        if (got == 0)
            return x->s->n_run == 0 && x->s->n_heap == 0 ? step : -1;
        if (sfx_answer(&x->f, &bt) != 0)
            return -1;
    }
    return -1;
}

/* Six requests sharing a prefix in pairs, more than the slots: waiting, running, cached blocks. */
static int rx_load(struct rx *x)
{
    int32_t prompt[128];
    for (uint32_t i = 0; i < 6; i++) {
        sfx_prompt(prompt, 40 + i, 32, i / 2, i);
        if (sfx_submit(&x->f, prompt, 40 + i, 10 + i, 0) < 0)
            return 1;
    }
    return 0;
}

static int all_exact(const struct rx *x)
{
    for (uint32_t i = 0; i < x->f.n_req; i++)
        if (!x->f.req[i].done || x->f.req[i].n_out != x->f.req[i].max_tokens)
            return 0;
    return 1;
}

static int test_restart_between_steps_restores_everything(void)
{
    struct rs_pipe_config c;
    struct rx x;
    int rc = sfx_config(&c, 128, 40, 3, 64);
    if (rc != 0 || (rc = rx_open(&x, &c)) != 0)
        return rc;
    RS_CHECK(rx_load(&x) == 0);
    struct sfx_batch bt;
    for (int i = 0; i < 6; i++)
        RS_CHECK(rx_plan(&x, &bt) == 1 && sfx_answer(&x.f, &bt) == 0 && sfx_reap(&x.f) >= 0);
    RS_CHECK(result_poll(x.s) == 1 && x.s->inflight_id == 0);
    struct kv_block_pool before = x.s->kv; /* counts only: its arrays go with the object */
    uint32_t ref[64], cached[64];
    for (uint32_t b = 0; b < c.n_kv_blocks; b++) {
        ref[b] = x.s->kv.ref[b];
        cached[b] = x.s->kv.cached[b];
    }
    uint32_t n_run = x.s->n_run, n_heap = x.s->n_heap, run[8], computed[8];
    for (uint32_t i = 0; i < n_run; i++) {
        run[i] = x.s->run[i];
        computed[i] = x.s->req[run[i]].n_computed;
    }
    RS_CHECK(rx_restart(&x) == 0);
    RS_CHECK(x.s->n_run == n_run && x.s->n_heap == n_heap && x.s->inflight_id == 0);
    for (uint32_t i = 0; i < n_run; i++)
        RS_CHECK(x.s->run[i] == run[i] && x.s->req[run[i]].n_computed == computed[i]);
    RS_CHECK(x.s->kv.n_used == before.n_used && x.s->kv.n_idle == before.n_idle &&
             x.s->kv.n_free == before.n_free);
    for (uint32_t b = 0; b < c.n_kv_blocks; b++)
        RS_CHECK(x.s->kv.ref[b] == ref[b] && x.s->kv.cached[b] == cached[b]);
    RS_CHECK(sfx_audit(&x.f) == 0);
    RS_CHECK_MSG(rx_run(&x, 200) > 0, "%s", x.f.why);
    RS_CHECK(all_exact(&x));
    rx_close(&x);
    return 0;
}

static int test_restart_with_a_batch_in_flight_waits_for_its_result(void)
{
    struct rs_pipe_config c;
    struct rx x;
    int rc = sfx_config(&c, 128, 64, 4, 64);
    if (rc != 0 || (rc = rx_open(&x, &c)) != 0)
        return rc;
    RS_CHECK(rx_load(&x) == 0);
    struct sfx_batch bt;
    for (int i = 0; i < 3; i++)
        RS_CHECK(rx_plan(&x, &bt) == 1 && sfx_answer(&x.f, &bt) == 0);
    RS_CHECK(rx_plan(&x, &bt) == 1);
    uint64_t id = bt.b->batch_id;
    uint32_t n = bt.b->n_seqs;
    RS_CHECK(rx_restart(&x) == 0); /* the launcher holds the batch meanwhile */
    RS_CHECK(x.s->inflight_id == id && x.s->n_flight == n);
    RS_CHECK(sched_work(x.s, 1) == 0 && x.s->inflight_id == id); /* nothing new is planned */
    RS_CHECK(sfx_answer(&x.f, &bt) == 0);
    RS_CHECK_MSG(rx_run(&x, 200) > 0, "%s", x.f.why);
    RS_CHECK(all_exact(&x));
    rx_close(&x);
    return 0;
}

static int test_restart_applies_a_result_left_in_the_ring(void)
{
    struct rs_pipe_config c;
    struct rx x;
    int rc = sfx_config(&c, 128, 64, 4, 64);
    if (rc != 0 || (rc = rx_open(&x, &c)) != 0)
        return rc;
    RS_CHECK(rx_load(&x) == 0);
    struct sfx_batch bt;
    RS_CHECK(rx_plan(&x, &bt) == 1 && sfx_answer(&x.f, &bt) == 0);
    RS_CHECK(rx_plan(&x, &bt) == 1 && sfx_answer(&x.f, &bt) == 0); /* answered, not applied */
    uint32_t idx = rs_pipe_batch_seqs(bt.b)[0].req_index;
    uint32_t before = rs_pipe_req_at(x.sp, idx)->n_computed;
    RS_CHECK(rx_restart(&x) == 0);
    RS_CHECK(x.s->inflight_id == 0 && x.s->req[idx].n_computed == before + 1);
    RS_CHECK(rs_pipe_req_at(x.sp, idx)->inflight_batch == 0);
    RS_CHECK_MSG(rx_run(&x, 200) > 0, "%s", x.f.why);
    RS_CHECK(all_exact(&x));
    rx_close(&x);
    return 0;
}

/* RUNNING records whose inflight_batch names a batch. */
static uint32_t marked_running(struct rs_pipe *p)
{
    uint32_t cursor = 0, state, n = 0;
    struct rs_table_ref ref;
    while (rs_table_next(p->requests, &cursor, 1ull << RS_PIPE_REQ_RUNNING, &ref, &state) ==
           RS_OK)
        n += rs_pipe_req_at(p, ref.index)->inflight_batch != 0;
    return n;
}

/*
 * A scheduler killed (failpoint sched.batch.marked, in a child process that
 * is that incarnation) after marking its records for the next batch and
 * before committing it: the next incarnation finds no batch in the rings,
 * clears the marks and runs everything to the same outputs.
 */
static int test_restart_before_the_commit_forgets_the_plan(void)
{
    struct rs_pipe_config c;
    struct rx x;
    int rc = sfx_config(&c, 128, 64, 4, 64);
    if (rc != 0 || (rc = rx_open(&x, &c)) != 0)
        return rc;
    RS_CHECK(rx_load(&x) == 0);
    struct sfx_batch bt;
    RS_CHECK(rx_plan(&x, &bt) == 1 && sfx_answer(&x.f, &bt) == 0);
    sched_destroy(&x.s);
    rs_pipe_close(&x.sp);
    pid_t pid = fork();
    RS_CHECK(pid >= 0);
    if (pid == 0) {
        if (rs_failpoint_set("sched.batch.marked:1") != RS_OK || rx_start(&x) != 0)
            _exit(2);
        for (int i = 0; i < 4; i++)
            sched_work(x.s, 1); /* applies the result, plans, marks: killed there */
        _exit(3);
    }
    int st = 0;
    RS_CHECK(waitpid(pid, &st, 0) == pid);
    RS_CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
                 "the scheduler ended with status 0x%x instead of dying at its failpoint", st);
    RS_CHECK(marked_running(x.f.tok) > 0); /* it died with its records marked */
    RS_CHECK(rx_start(&x) == 0);
    RS_CHECK(x.s->inflight_id == 0); /* nothing in the rings: the plan is gone */
    RS_CHECK(marked_running(x.sp) == 0);
    RS_CHECK_MSG(rx_run(&x, 200) > 0, "%s", x.f.why);
    RS_CHECK(all_exact(&x));
    rx_close(&x);
    return 0;
}

static int test_stale_rows_and_broken_records_are_repaired(void)
{
    struct rs_pipe_config c;
    struct rx x;
    int rc = sfx_config(&c, 128, 64, 4, 256);
    if (rc != 0 || (rc = rx_open(&x, &c)) != 0)
        return rc;
    RS_CHECK(rx_load(&x) == 0);
    struct sfx_batch bt;
    RS_CHECK(rx_plan(&x, &bt) == 1 && sfx_answer(&x.f, &bt) == 0);
    RS_CHECK(result_poll(x.s) == 1 && x.s->n_run == 4 && x.s->n_heap == 2);
    uint32_t a = x.s->run[0], b = x.s->run[1], w = waitq_top(x.s);
    uint32_t slot_a = x.s->req[a].slot, slot_b = x.s->req[b].slot;
    sched_destroy(&x.s);
    rs_pipe_close(&x.sp);
    /* a: its row lost (as if cleared by a crash); b: a block out of range in its row;
     * a free row claiming the waiting request w */
    atomic_store(&rs_pipe_kvrow_at(x.f.tok, slot_a)->owner, 0);
    rs_pipe_kvrow_at(x.f.tok, slot_b)->blocks[0] = 1000000;
    uint32_t st, gen, owner;
    rs_table_peek(x.f.tok->requests, w, &st, &gen, &owner);
    struct rs_table_ref wref = {w, gen};
    atomic_store(&rs_pipe_kvrow_at(x.f.tok, slot_a)->owner, rs_table_ref_pack(wref) + 1);
    RS_CHECK(rx_start(&x) == 0);
    RS_CHECK(x.s->req[a].st == SR_WAITING && x.s->req[b].st == SR_WAITING);
    RS_CHECK(rs_pipe_req_at(x.sp, a)->n_preempted == 1 && rs_pipe_req_at(x.sp, b)->n_preempted == 1);
    RS_CHECK(atomic_load(&rs_pipe_kvrow_at(x.sp, slot_a)->owner) == 0);
    RS_CHECK(x.s->n_run == 2 && x.s->n_free_slots == 2);
    RS_CHECK_MSG(sfx_audit(&x.f) == 0, "%s", x.f.why);
    RS_CHECK_MSG(rx_run(&x, 300) > 0, "%s", x.f.why);
    RS_CHECK(all_exact(&x));
    rx_close(&x);
    return 0;
}

static int test_fenced_scheduler_writes_nothing(void)
{
    struct rs_pipe_config c;
    struct rx x;
    int rc = sfx_config(&c, 128, 64, 4, 64);
    if (rc != 0 || (rc = rx_open(&x, &c)) != 0)
        return rc;
    RS_CHECK(rx_load(&x) == 0);
    struct sfx_batch bt;
    RS_CHECK(rx_plan(&x, &bt) == 1 && sfx_answer(&x.f, &bt) == 0);
    struct rs_pipe *old_p = x.sp;
    struct sched *old = x.s;
    x.sp = NULL;
    x.s = NULL;
    RS_CHECK(rx_start(&x) == 0); /* a new incarnation while the old one still exists */
    uint64_t next = atomic_load(&x.sp->shared->next_batch);
    uint32_t st_before[8];
    for (uint32_t i = 0; i < 8; i++)
        rs_table_peek(x.sp->requests, i, &st_before[i], &(uint32_t){0}, &(uint32_t){0});
    RS_CHECK(sched_work(old, 1) == RS_ESTALE && old->fenced);
    RS_CHECK(atomic_load(&x.sp->shared->next_batch) == next);
    for (uint32_t i = 0; i < 8; i++) {
        uint32_t st;
        rs_table_peek(x.sp->requests, i, &st, &(uint32_t){0}, &(uint32_t){0});
        RS_CHECK(st == st_before[i]);
    }
    sched_destroy(&old);
    rs_pipe_close(&old_p);
    RS_CHECK_MSG(rx_run(&x, 200) > 0, "%s", x.f.why);
    RS_CHECK(all_exact(&x));
    rx_close(&x);
    return 0;
}

static int test_launcher_change_while_down_reprefills(void)
{
    struct rs_pipe_config c;
    struct rx x;
    int rc = sfx_config(&c, 128, 64, 4, 64);
    if (rc != 0 || (rc = rx_open(&x, &c)) != 0)
        return rc;
    RS_CHECK(rx_load(&x) == 0);
    struct sfx_batch bt;
    for (int i = 0; i < 3; i++)
        RS_CHECK(rx_plan(&x, &bt) == 1 && sfx_answer(&x.f, &bt) == 0);
    RS_CHECK(result_poll(x.s) == 1);
    sched_destroy(&x.s);
    rs_pipe_close(&x.sp);
    RS_CHECK(sfx_restart_launcher(&x.f) == 0);
    RS_CHECK(rx_start(&x) == 0);
    RS_CHECK(rx_plan(&x, &bt) == 1);
    const struct rs_pipe_batch_seq *q = rs_pipe_batch_seqs(bt.b);
    for (uint32_t i = 0; i < bt.b->n_seqs; i++)
        RS_CHECK(q[i].pos0 == 0); /* everything from the start: the old K/V is gone */
    RS_CHECK(sfx_metric(&x.f, RS_M_SCH_LAUNCHER_RESETS) == 1);
    RS_CHECK(sfx_answer(&x.f, &bt) == 0);
    RS_CHECK_MSG(rx_run(&x, 200) > 0, "%s", x.f.why);
    RS_CHECK(all_exact(&x));
    rx_close(&x);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_restart_between_steps_restores_everything),
    RS_TEST(test_restart_with_a_batch_in_flight_waits_for_its_result),
    RS_TEST(test_restart_applies_a_result_left_in_the_ring),
    RS_TEST(test_restart_before_the_commit_forgets_the_plan),
    RS_TEST(test_stale_rows_and_broken_records_are_repaired),
    RS_TEST(test_fenced_scheduler_writes_nothing),
    RS_TEST(test_launcher_change_while_down_reprefills),
};
RS_TEST_MAIN(cases)

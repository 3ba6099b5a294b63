/* SPDX-License-Identifier: MIT */
/*
 * One pass of the serving loop (the stage skeleton, ipc/stage.h, runs the
 * heartbeat, the watchdog and the fence check around it): a wait of at most
 * one tick for a doorbell, then a rescan of the batch ring that processes every
 * committed batch, whether or not its doorbell arrived (DESIGN.md principle
 * 1). A batch is released only after its result is committed, so a launcher
 * killed in between gets the batch again on restart (at-least-once) and,
 * being a new incarnation, answers KV_LOST: schedulerd may then see two
 * results for one batch id, the second KV_LOST, which it handles like a
 * launcher change. With --spin-us, the loop keeps polling the ring (no
 * sleep) for that long after each batch, so a batch committed right after
 * the previous result is picked up without a doorbell's latency (DESIGN.md
 * principle 7: a bounded spin, off by default). Leaves out: what a batch
 * does (step.c, row.c).
 */
#include <sched.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/failpoint.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_result.h"
#include "ipc/stage.h"
#include "launcherd/launcher.h"

/* Waits up to timeout_ms for a doorbell, then drains the inbox; contents are hints only. */
static void wait_doorbells(struct launcher *l, struct rs_pipe_doors *d, int timeout_ms)
{
    while (rs_pipe_door_recv(d, &l->rx, timeout_ms) == RS_OK)
        timeout_ms = 0;
}

/* Takes the next batch into l->rd. 1 held, 0 none, -1 fenced or corrupt ring. */
static int take_batch(struct launcher *l)
{
    if (l->held)
        return 1;
    memset(&l->rd, 0, sizeof(l->rd));
    rs_err rc = rs_ring_try_get(l->p->batches, &l->rd);
    if (rc == RS_EAGAIN)
        return 0;
    if (rc == RS_OK || (rc == RS_EIO && l->rd.data != NULL)) {
        l->held = 1;
        l->crc_ok = rc == RS_OK;
        return 1;
    }
    rs_log_error("batch ring: %s; this launcher cannot continue", rs_strerror(rc));
    return -1;
}

/* Rings schedulerd (result ready) and postprocd (requests with new tokens). */
static void ring_done(struct launcher *l, struct rs_pipe_doors *d,
                      const struct launcher_step_info *info, uint32_t result_slot)
{
    rs_pipe_door_ring(d, RS_PIPE_STAGE_SCHEDULERD, RS_WIRE_DOOR_BATCH_DONE, info->batch_id,
                      result_slot);
    if (l->door.n_entries > 0) {
        l->door.kind = RS_WIRE_DOOR_TOKENS_READY;
        l->door.sent_ns = 0;
        l->door.u.tokens.batch_id = info->batch_id;
        rs_pipe_door_send(d, RS_PIPE_STAGE_POSTPROCD, &l->door);
    }
}

/* Answers the held batch into a result slot. 1 done, 0 result ring full, -1 fenced. */
static int answer(struct launcher *l, struct rs_pipe_doors *d)
{
    struct rs_ring_wr wr;
    rs_err rc = rs_ring_try_claim(l->p->results, &wr);
    if (rc == RS_EFULL)
        return 0; /* schedulerd has not consumed earlier results: keep the batch, retry */
    if (rc != RS_OK) {
        rs_log_error("result ring: %s", rs_strerror(rc));
        return -1;
    }
    struct launcher_step_info info;
    uint32_t len = launcher_run(l, &l->rd, l->crc_ok, wr.data, wr.cap, &info);
    struct rs_pipe_result *res = wr.data;
    res->done_ns = rs_clock_ns();
    RS_FAILPOINT("launcher.result.before_commit");
    /* P1 (ring.h): the commit publishes the rows; schedulerd's get acquires them. */
    rc = rs_ring_commit(l->p->results, &wr, info.batch_id, len);
    RS_FAILPOINT("launcher.result.after_commit");
    if (rc != RS_OK || (rc = rs_ring_release(l->p->batches, &l->rd)) != RS_OK) {
        rs_log_req(RS_LOG_ERROR, RS_LOG_NOID, info.batch_id, "rings: %s", rs_strerror(rc));
        return -1;
    }
    l->held = 0;
    if (info.status != RS_PIPE_RESULT_KV_LOST && info.status != RS_PIPE_RESULT_ERROR)
        rs_hist_add_ns(&l->p->metrics->stage[RS_PIPE_STAGE_LAUNCHERD].hist[RS_H_LAU_STEP],
                       res->done_ns - res->picked_ns);
    ring_done(l, d, &info, wr.slot);
    return 1;
}

/* Every committed batch, in order. Returns how many were answered, -1 to stop. */
static int serve_batches(struct launcher *l, struct rs_pipe_doors *d)
{
    int n = 0;
    for (;;) {
        if (!rs_role_current(l->p->role))
            return -1;
        int got = take_batch(l);
        if (got <= 0)
            return got < 0 ? -1 : n;
        int done = answer(l, d);
        if (done <= 0)
            return done < 0 ? -1 : n;
        n++;
    }
}

rs_err launcher_pass(struct launcher *l, struct rs_pipe_doors *doors)
{
    if (l->spin_until != 0 && rs_clock_ns() < l->spin_until)
        sched_yield(); /* spinning: the doorbells wait in the inbox; let the planner run */
    else
        wait_doorbells(l, doors, l->busy ? 0 : RS_STAGE_TICK_MS);
    int n = serve_batches(l, doors);
    if (n < 0)
        return rs_role_current(l->p->role) ? RS_EIO : RS_ESTALE;
    if (n > 0 && l->spin_ns > 0)
        l->spin_until = rs_clock_ns() + l->spin_ns;
    l->busy = n > 0;
    return RS_OK;
}

/* SPDX-License-Identifier: MIT */
/*
 * The scheduler object and one pass of its loop: results first, then the
 * periodic table rescan (lost doorbells: new WAITING records, finish words of
 * requests not in flight), then the launcher incarnation check (a new one
 * means its K/V is gone: everything running re-prefills), then the next
 * batch. Doorbell hints enter through sched_note_*. Leaves out sockets and
 * the process (main.c).
 */
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "schedulerd/sched.h"

#define RESCAN_NS 10000000ull /* the loop's tick */

rs_err sched_fence(struct sched *s)
{
    if (!s->fenced)
        rs_log_error("fenced: a newer schedulerd incarnation took over; writing nothing more");
    s->fenced = 1;
    return RS_ESTALE;
}

void sched_ring(struct sched *s, enum rs_pipe_stage to, enum rs_wire_door_kind kind, uint64_t a,
                uint64_t b)
{
    if (s->doors != NULL)
        rs_pipe_door_ring(s->doors, to, kind, a, b);
}

void sched_announce(struct sched *s)
{
    if (s->n_unannounced == 0)
        return;
    sched_ring(s, RS_PIPE_STAGE_POSTPROCD, RS_WIRE_DOOR_WAKE, 0, 0);
    s->n_unannounced = 0;
}

void sched_gauges(struct sched *s)
{
    _Atomic uint64_t *c = s->m->counter;
    rs_gauge_set(&c[RS_M_SCH_KV_USED], s->kv.n_used);
    rs_gauge_set(&c[RS_M_SCH_KV_FREE], s->kv.n_free);
    rs_gauge_set(&c[RS_M_SCH_KV_CACHED], s->kv.n_idle);
    rs_gauge_set(&c[RS_M_SCH_WAITING], s->n_heap);
    rs_gauge_set(&c[RS_M_SCH_RUNNING], s->n_run);
}

void sched_destroy(struct sched **sp)
{
    if (sp == NULL || *sp == NULL)
        return;
    struct sched *s = *sp;
    kv_block_fini(&s->kv);
    free(s->req);
    free(s->heap);
    free(s->run);
    free(s->free_slots);
    free(s->slot_req);
    free(s->plan);
    free(s->flight);
    free(s->tokbuf);
    free(s->blkbuf);
    free(s->hashbuf);
    free(s->aside);
    fair_destroy(&s->fair);
    share_destroy(&s->share);
    free(s);
    *sp = NULL;
}

rs_err sched_create(struct rs_pipe *p, struct rs_pipe_doors *doors, struct sched **out)
{
    *out = NULL;
    struct sched *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return RS_ENOMEM;
    s->p = p;
    s->doors = doors;
    s->cfg = p->cfg;
    s->m = &p->metrics->stage[RS_PIPE_STAGE_SCHEDULERD];
    s->rescan_ns = RESCAN_NS;
    const struct rs_pipe_config *c = &s->cfg;
    s->req = calloc(c->max_requests, sizeof(*s->req));
    s->heap = calloc(c->max_requests, sizeof(uint32_t));
    s->run = calloc(c->max_seqs, sizeof(uint32_t));
    s->free_slots = calloc(c->max_seqs, sizeof(uint32_t));
    s->slot_req = calloc(c->max_seqs, sizeof(uint32_t));
    s->plan = calloc(c->max_seqs, sizeof(*s->plan));
    s->flight = calloc(c->max_seqs, sizeof(uint32_t));
    s->tokbuf = calloc(c->n_ctx, sizeof(int32_t));
    s->blkbuf = calloc(c->max_blocks_per_seq, sizeof(uint32_t));
    s->hashbuf = calloc(c->max_blocks_per_seq, sizeof(uint64_t));
    s->aside = calloc(c->max_requests, sizeof(uint32_t));
    rs_err rc = RS_ENOMEM;
    if (fair_create(c->max_requests, &s->fair) != RS_OK)
        s->fair = NULL;
    if (share_create(c->max_seqs, &s->share) != RS_OK)
        s->share = NULL;
    if (s->req && s->heap && s->run && s->free_slots && s->slot_req && s->plan && s->flight &&
        s->tokbuf && s->blkbuf && s->hashbuf && s->aside && s->fair && s->share)
        rc = kv_block_init(&s->kv, p->kv_meta, c->n_kv_blocks, c->block_size);
    else
        rs_log_error("scheduler state for %u requests: out of memory", c->max_requests);
    if (rc == RS_OK) {
        fair_rebuilding(s->fair, 1);
        rc = rebuild_all(s);
        fair_rebuilding(s->fair, 0);
    }
    if (rc != RS_OK) {
        sched_destroy(&s);
        return rc;
    }
    *out = s;
    return RS_OK;
}

uint32_t sched_owner_cap(uint32_t max_seqs, uint32_t share)
{
    if (share >= 100)
        return 0;
    uint32_t cap = (uint32_t)(((uint64_t)max_seqs * share + 99) / 100);
    return cap > 0 ? cap : 1;
}

void sched_note_ready(struct sched *s, uint32_t idx, uint32_t gen)
{
    if (idx < s->cfg.max_requests)
        req_adopt(s, (struct rs_table_ref){idx, gen});
}

void sched_note_cancel(struct sched *s, uint32_t idx, uint32_t gen)
{
    if (idx >= s->cfg.max_requests)
        return;
    struct sreq *sr = &s->req[idx];
    if (sr->st == SR_NONE)
        req_adopt(s, (struct rs_table_ref){idx, gen});
    if (sr->st == SR_NONE || sr->gen != gen || sr->in_batch)
        return; /* unknown, or in flight: the result's application ends it */
    if (atomic_load_explicit(&rs_pipe_req_at(s->p, idx)->finish, memory_order_acquire) != 0)
        req_finish(s, idx, 0);
}

void sched_rescan(struct sched *s)
{
    uint32_t cursor = 0, state;
    struct rs_table_ref ref;
    uint64_t mask = 1ull << RS_PIPE_REQ_WAITING | 1ull << RS_PIPE_REQ_RUNNING;
    while (!s->fenced && rs_table_next(s->p->requests, &cursor, mask, &ref, &state) == RS_OK) {
        struct sreq *sr = &s->req[ref.index];
        if (sr->st == SR_NONE && state == RS_PIPE_REQ_WAITING) {
            req_adopt(s, ref); /* its request_ready doorbell was lost */
            continue;
        }
        if (sr->st == SR_NONE || sr->gen != ref.gen || sr->in_batch)
            continue;
        uint32_t w = atomic_load_explicit(&rs_pipe_req_at(s->p, ref.index)->finish,
                                          memory_order_acquire);
        if (w != 0)
            req_finish(s, ref.index, 0); /* its cancel doorbell was lost */
    }
    s->last_rescan_ns = rs_clock_ns();
}

int sched_work(struct sched *s, int force_rescan)
{
    if (s->fenced || !rs_role_current(s->p->role))
        return sched_fence(s);
    int rc = result_poll(s);
    if (rc < 0)
        return rc;
    sched_announce(s); /* before planning: postprocd's final need not wait for the next step */
    if (force_rescan || rs_clock_ns() - s->last_rescan_ns >= s->rescan_ns)
        sched_rescan(s);
    if (s->fenced)
        return RS_ESTALE;
    rc = 0;
    if (s->inflight_id == 0) {
        uint32_t inc = rs_pipe_stage_inc(s->p, RS_PIPE_STAGE_LAUNCHERD);
        if (inc != s->kv_inc && req_reset_all(s, inc) == RS_ESTALE)
            return RS_ESTALE;
        if (inc != 0) /* without a launcher nothing could run the batch */
            rc = batch_step(s);
    }
    sched_announce(s);
    sched_gauges(s);
    return rc;
}

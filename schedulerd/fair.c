/* SPDX-License-Identifier: MIT */
/*
 * Fairness among clients. The waiting queue orders by (priority, round,
 * arrival): a request's round is its owner's (ipc/pipeline_owner.h) next
 * round when it first waits, max(the owner's last round + 1, the round now
 * being served), so the queue serves one request of each owner per round
 * (start-time fair queuing with unit costs) and FCFS within one owner; an
 * owner that floods the queue only pushes its own requests back. A
 * preempted request keeps its round (it goes back where it was). Rounds
 * are private: after a restart what was already waiting runs FCFS (round
 * 0) before anything newer. Also
 * the pause of a stream nobody reads: postprocd marks a request whose
 * client is not taking its messages (unreachable_ns); once it is
 * FAIR_PAUSE_BACKLOG tokens ahead of what was sent, schedulerd stops
 * decoding it, keeping its KV blocks, until the client reads again (or
 * postprocd's client timeout ends it). Leaves out the order within a
 * batch (plan.c).
 */
#include <stdlib.h>
#include <string.h>

#include "ipc/pipeline_req.h"
#include "schedulerd/sched.h"

#define PROBES 16

struct fair_owner {
    uint8_t used;
    uint8_t d[16];
    uint64_t last; /* round of the owner's latest stamped request */
};

struct fair {
    uint32_t cap; /* a power of two */
    uint64_t round; /* the round being served: the latest admitted request's */
    int rebuilding; /* start-up: what already waits keeps FCFS (round 0) */
    struct fair_owner *e;
};

rs_err fair_create(uint32_t max_requests, struct fair **out)
{
    uint32_t cap = 64;
    while (cap < 4u * max_requests && cap < (1u << 24))
        cap <<= 1;
    struct fair *f = calloc(1, sizeof(*f));
    if (f != NULL)
        f->e = calloc(cap, sizeof(*f->e));
    if (f == NULL || f->e == NULL) {
        free(f);
        return RS_ENOMEM;
    }
    f->cap = cap;
    *out = f;
    return RS_OK;
}

void fair_destroy(struct fair **f)
{
    if (f == NULL || *f == NULL)
        return;
    free((*f)->e);
    free(*f);
    *f = NULL;
}

/* The owner's entry; a full probe window gives up its stalest owner (it has the lowest
 * round, so it is the one least likely to still have requests waiting). */
static struct fair_owner *owner_of(struct fair *f, const uint8_t d[16])
{
    uint64_t h;
    memcpy(&h, d, sizeof(h));
    struct fair_owner *spare = NULL;
    for (uint32_t i = 0; i < PROBES; i++) {
        struct fair_owner *e = &f->e[(h + i) & (f->cap - 1)];
        if (e->used && memcmp(e->d, d, 16) == 0)
            return e;
        if (spare == NULL || (spare->used && (!e->used || e->last < spare->last)))
            spare = e;
    }
    spare->used = 1;
    memcpy(spare->d, d, 16);
    spare->last = 0;
    return spare;
}

void fair_stamp(struct sched *s, uint32_t idx)
{
    struct sreq *sr = &s->req[idx];
    if (sr->stamped)
        return; /* preempted: back in its old place */
    sr->stamped = 1;
    if (s->fair->rebuilding) {
        sr->round = 0; /* found in table order, not arrival order: FCFS among them */
        return;
    }
    const struct rs_pipe_req *r = rs_pipe_req_at(s->p, idx);
    struct fair_owner *o = owner_of(s->fair, r->owner);
    uint64_t round = o->last + 1 > s->fair->round ? o->last + 1 : s->fair->round;
    o->last = round;
    sr->round = round;
}

void fair_rebuilding(struct fair *f, int on)
{
    f->rebuilding = on;
}

void fair_served(struct sched *s, uint32_t idx)
{
    if (s->req[idx].round > s->fair->round)
        s->fair->round = s->req[idx].round;
}

int fair_paused(const struct sched *s, uint32_t idx)
{
    struct rs_pipe_req *r = rs_pipe_req_at(s->p, idx);
    if (!(r->flags & RS_PIPE_F_STREAM) || r->unreachable_ns == 0)
        return 0;
    uint32_t out = s->req[idx].len - s->req[idx].n_prompt;
    uint32_t sent = rs_pipe_cursor_cur(r)->n_done;
    return out >= sent + FAIR_PAUSE_BACKLOG;
}

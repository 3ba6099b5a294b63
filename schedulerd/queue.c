/* SPDX-License-Identifier: MIT */
/*
 * The two private orderings of requests: the waiting queue (an indexed
 * binary min-heap, so a cancelled request leaves it in O(log n)) and the
 * running list (an array kept sorted, walked in order every step; victims of
 * preemption come from its tail). Both order by (prio, round, handle): prio
 * is the request's priority under the priority policy and 0 under FCFS,
 * round its owner's fair-queuing round (fair.c), handle the arrival number. Leaves out what a position means (plan.c).
 */
#include <string.h>

#include "schedulerd/sched.h"

static int key_less(const struct sreq *a, const struct sreq *b)
{
    if (a->prio != b->prio)
        return a->prio < b->prio;
    return a->round != b->round ? a->round < b->round : a->handle < b->handle;
}

static void heap_set(struct sched *s, uint32_t pos, uint32_t idx)
{
    s->heap[pos] = idx;
    s->req[idx].heap_pos = pos;
}

static void sift_up(struct sched *s, uint32_t pos)
{
    uint32_t idx = s->heap[pos];
    while (pos > 0) {
        uint32_t parent = (pos - 1) / 2;
        if (!key_less(&s->req[idx], &s->req[s->heap[parent]]))
            break;
        heap_set(s, pos, s->heap[parent]);
        pos = parent;
    }
    heap_set(s, pos, idx);
}

static void sift_down(struct sched *s, uint32_t pos)
{
    uint32_t idx = s->heap[pos];
    for (;;) {
        uint32_t c = 2 * pos + 1;
        if (c >= s->n_heap)
            break;
        if (c + 1 < s->n_heap && key_less(&s->req[s->heap[c + 1]], &s->req[s->heap[c]]))
            c++;
        if (!key_less(&s->req[s->heap[c]], &s->req[idx]))
            break;
        heap_set(s, pos, s->heap[c]);
        pos = c;
    }
    heap_set(s, pos, idx);
}

void waitq_push(struct sched *s, uint32_t idx)
{
    fair_stamp(s, idx);
    s->heap[s->n_heap] = idx;
    s->req[idx].heap_pos = s->n_heap++;
    sift_up(s, s->n_heap - 1);
}

/* Takes the entry at heap position pos out. */
static void remove_at(struct sched *s, uint32_t pos)
{
    s->req[s->heap[pos]].heap_pos = SCHED_NONE;
    uint32_t last = s->heap[--s->n_heap];
    if (pos == s->n_heap)
        return;
    heap_set(s, pos, last);
    sift_up(s, pos);
    sift_down(s, s->req[last].heap_pos);
}

void waitq_remove(struct sched *s, uint32_t idx)
{
    uint32_t pos = s->req[idx].heap_pos;
    if (pos >= s->n_heap || s->heap[pos] != idx)
        return;
    if (pos == 0)
        fair_served(s, idx); /* the top leaves when admitted (a cancel anywhere does not) */
    remove_at(s, pos);
}

void waitq_set_aside(struct sched *s)
{
    uint32_t idx = s->heap[0];
    remove_at(s, 0); /* not served: it goes back with its round and handle unchanged */
    s->aside[s->n_aside++] = idx;
}

void waitq_restore(struct sched *s)
{
    while (s->n_aside > 0)
        waitq_push(s, s->aside[--s->n_aside]); /* stamped already: keeps its key */
}

/* First position whose request does not order before idx. */
static uint32_t run_lower_bound(const struct sched *s, uint32_t idx)
{
    uint32_t lo = 0, hi = s->n_run;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (key_less(&s->req[s->run[mid]], &s->req[idx]))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

uint32_t runq_find(const struct sched *s, uint32_t idx)
{
    return run_lower_bound(s, idx);
}

void runq_insert(struct sched *s, uint32_t idx)
{
    uint32_t pos = run_lower_bound(s, idx);
    memmove(&s->run[pos + 1], &s->run[pos], (s->n_run - pos) * sizeof(uint32_t));
    s->run[pos] = idx;
    s->n_run++;
}

void runq_remove(struct sched *s, uint32_t idx)
{
    uint32_t pos = run_lower_bound(s, idx);
    if (pos >= s->n_run || s->run[pos] != idx)
        return;
    memmove(&s->run[pos], &s->run[pos + 1], (s->n_run - pos - 1) * sizeof(uint32_t));
    s->n_run--;
}

/* SPDX-License-Identifier: MIT */
/*
 * The engine's persistent worker pool: every thread runs each job once with
 * its own tid; a barrier makes every write before it visible to every thread
 * after it; this holds with futex-only waits, with spinning, and with more
 * threads than cores (so waits really sleep and wake); thread 0 is always the
 * caller, and a pool of one starts no thread at all.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcherd/engine/pool.h"
#include "tests/rs_test.h"

#define MAX_T 8
#define PHASES 6

struct job {
    struct pool *p;
    atomic_int runs[MAX_T];
    int slots[PHASES][MAX_T]; /* plain ints: only barriers order them */
    int round;
    atomic_int errors;
    pthread_t caller;       /* the thread calling pool_run: thread 0 must be it */
    atomic_int off_caller;  /* runs of tid 0 on another thread */
};

static void job_fn(void *arg, int tid, int n)
{
    struct job *j = arg;
    atomic_fetch_add(&j->runs[tid], 1);
    if (tid == 0 && !pthread_equal(pthread_self(), j->caller))
        atomic_fetch_add(&j->off_caller, 1);
    for (int ph = 0; ph < PHASES; ph++) {
        j->slots[ph][tid] = j->round * 1000 + ph * 10 + tid;
        pool_barrier(j->p);
        for (int t = 0; t < n; t++)
            if (j->slots[ph][t] != j->round * 1000 + ph * 10 + t)
                atomic_fetch_add(&j->errors, 1);
    }
}

static int check_pool(int n, unsigned barrier_spin, unsigned idle_spin, int rounds)
{
    struct job *j = calloc(1, sizeof(*j));
    j->caller = pthread_self();
    RS_CHECK(pool_create(n, barrier_spin, idle_spin, &j->p) == RS_OK);
    RS_CHECK(pool_size(j->p) == n);
    for (int r = 0; r < rounds; r++) {
        j->round = r;
        pool_run(j->p, job_fn, j);
        /* pool_run returned: every thread finished this round's writes. */
        for (int t = 0; t < n; t++)
            RS_CHECK_MSG(j->slots[PHASES - 1][t] == r * 1000 + (PHASES - 1) * 10 + t,
                         "round %d thread %d", r, t);
    }
    for (int t = 0; t < n; t++)
        RS_CHECK_MSG(atomic_load(&j->runs[t]) == rounds, "thread %d ran %d of %d jobs", t,
                     atomic_load(&j->runs[t]), rounds);
    RS_CHECK(atomic_load(&j->errors) == 0);
    RS_CHECK_MSG(atomic_load(&j->off_caller) == 0, "thread 0 ran off the caller %d times",
                 atomic_load(&j->off_caller));
    pool_destroy(&j->p);
    RS_CHECK(j->p == NULL);
    free(j);
    return 0;
}

/* Threads of this process now (/proc/self/status), or -1. */
static int thread_count(void)
{
    char line[128];
    int n = -1;
    FILE *f = fopen("/proc/self/status", "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return n;
}

/* One thread: no worker is started and every job runs on the caller, in pool_run itself. */
static int test_single_thread_runs_inline(void)
{
    struct pool *p;
    int before = thread_count();
    RS_CHECK(before > 0 && pool_create(1, 0, 0, &p) == RS_OK);
    RS_CHECK_MSG(thread_count() == before, "a pool of one started %d threads",
                 thread_count() - before);
    pool_destroy(&p);
    return check_pool(1, 0, 0, 100);
}

static int test_barriers_futex_only(void)
{
    return check_pool(2, 0, 0, 300) || check_pool(3, 0, 0, 200);
}

static int test_barriers_with_spinning(void)
{
    return check_pool(2, 50, 20, 300) || check_pool(4, 50, 0, 200);
}

static int test_oversubscribed_pool(void)
{
    return check_pool(MAX_T, 10, 0, 100);
}

static int test_bad_sizes_refused(void)
{
    struct pool *p = (struct pool *)1;
    RS_CHECK(pool_create(0, 0, 0, &p) == RS_EINVAL && p == NULL);
    RS_CHECK(pool_create(2000, 0, 0, &p) == RS_EINVAL && p == NULL);
    pool_destroy(NULL);
    pool_destroy(&p);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_single_thread_runs_inline),
    RS_TEST(test_barriers_futex_only),
    RS_TEST(test_barriers_with_spinning),
    RS_TEST(test_oversubscribed_pool),
    RS_TEST(test_bad_sizes_refused),
};
RS_TEST_MAIN(cases)

/* SPDX-License-Identifier: MIT */
/*
 * Persistent worker pool: futex sleeps, bounded spins, one central barrier.
 * See pool.h. The wake-up protocol is Dekker-style on seq_cst atomics: a
 * waiter counts itself in `sleepers` before re-checking the word it sleeps
 * on, a waker changes the word before reading `sleepers`, so one of the two
 * always sees the other and no wake-up is lost.
 */
#include "launcherd/engine/pool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"

struct pool {
    int n;
    pthread_t *threads;
    pool_fn fn; /* current job; written before job_seq is bumped */
    void *arg;
    int stop;
    uint64_t barrier_spin_ns;
    uint64_t idle_spin_ns;
    _Alignas(64) atomic_uint job_seq; /* futex word: bumped once per pool_run */
    atomic_uint job_sleepers;
    _Alignas(64) atomic_uint bar_count; /* threads arrived at the current barrier */
    _Alignas(64) atomic_uint bar_phase; /* futex word: bumped when a barrier opens */
    atomic_uint bar_sleepers;
};

struct worker_arg {
    struct pool *p;
    int tid;
};

static void futex_wait(atomic_uint *w, unsigned old)
{
    /* EAGAIN (value changed) and EINTR both mean: re-check the word. */
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAIT_PRIVATE, old, NULL, NULL, 0);
}

static void futex_wake_all(atomic_uint *w)
{
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spins until *w != old or spin_ns pass; returns 1 when it changed. */
static int spin_for_change(atomic_uint *w, unsigned old, uint64_t spin_ns)
{
    if (spin_ns == 0)
        return atomic_load(w) != old;
    uint64_t start = rs_clock_ns();
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(w, memory_order_acquire) != old)
            return 1;
        cpu_relax();
        if ((i & 255) == 0 && rs_clock_ns() - start > spin_ns)
            return 0;
    }
}

static void wait_for_change(atomic_uint *w, unsigned old, atomic_uint *sleepers, uint64_t spin_ns)
{
    if (spin_for_change(w, old, spin_ns))
        return;
    atomic_fetch_add(sleepers, 1);
    while (atomic_load(w) == old)
        futex_wait(w, old);
    atomic_fetch_sub(sleepers, 1);
}

static void bump_and_wake(atomic_uint *w, atomic_uint *sleepers)
{
    atomic_fetch_add(w, 1);
    if (atomic_load(sleepers) != 0)
        futex_wake_all(w);
}

void pool_barrier(struct pool *p)
{
    if (p->n == 1)
        return;
    /* The phase cannot move before this thread arrives, so this read is current. */
    unsigned phase = atomic_load(&p->bar_phase);
    if (atomic_fetch_add(&p->bar_count, 1) + 1 == (unsigned)p->n) {
        atomic_store(&p->bar_count, 0);
        bump_and_wake(&p->bar_phase, &p->bar_sleepers);
        return;
    }
    wait_for_change(&p->bar_phase, phase, &p->bar_sleepers, p->barrier_spin_ns);
}

static void *worker_main(void *a)
{
    struct worker_arg wa = *(struct worker_arg *)a;
    free(a);
    struct pool *p = wa.p;
    unsigned seen = 0;
    for (;;) {
        wait_for_change(&p->job_seq, seen, &p->job_sleepers, p->idle_spin_ns);
        seen = atomic_load(&p->job_seq);
        if (p->stop)
            return NULL;
        p->fn(p->arg, wa.tid, p->n);
        pool_barrier(p);
    }
}

void pool_run(struct pool *p, pool_fn fn, void *arg)
{
    p->fn = fn;
    p->arg = arg;
    if (p->n > 1)
        bump_and_wake(&p->job_seq, &p->job_sleepers);
    fn(arg, 0, p->n);
    pool_barrier(p);
}

int pool_size(const struct pool *p)
{
    return p->n;
}

static void stop_workers(struct pool *p, int n_started)
{
    p->stop = 1;
    bump_and_wake(&p->job_seq, &p->job_sleepers);
    for (int i = 0; i < n_started; i++)
        pthread_join(p->threads[i], NULL);
}

/* Creates worker tid with every signal blocked: signals belong to the daemon's main thread. */
static int start_worker(struct pool *p, int tid)
{
    struct worker_arg *wa = malloc(sizeof(*wa));
    if (wa == NULL)
        return ENOMEM;
    wa->p = p;
    wa->tid = tid;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&p->threads[tid - 1], NULL, worker_main, wa);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        free(wa);
    return rc;
}

rs_err pool_create(int n_threads, unsigned barrier_spin_us, unsigned idle_spin_us,
                   struct pool **out)
{
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024) {
        rs_log_error("pool: thread count %d out of range 1..1024", n_threads);
        return RS_EINVAL;
    }
    struct pool *p = calloc(1, sizeof(*p));
    if (p == NULL || (p->threads = calloc((size_t)n_threads, sizeof(pthread_t))) == NULL) {
        free(p);
        rs_log_error("pool: out of memory for %d threads", n_threads);
        return RS_ENOMEM;
    }
    p->n = n_threads;
    p->barrier_spin_ns = (uint64_t)barrier_spin_us * 1000;
    p->idle_spin_ns = (uint64_t)idle_spin_us * 1000;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && n_threads > CPU_COUNT(&set)) {
        /* More threads than CPUs: a spinner would burn the slice its peer needs. */
        p->barrier_spin_ns = p->idle_spin_ns = 0;
    }
    for (int t = 1; t < n_threads; t++) {
        int rc = start_worker(p, t);
        if (rc != 0) {
            rs_log_error("pool: starting worker %d of %d: %s", t, n_threads, strerror(rc));
            stop_workers(p, t - 1);
            free(p->threads);
            free(p);
            return rc == ENOMEM ? RS_ENOMEM : RS_EIO;
        }
    }
    *out = p;
    return RS_OK;
}

void pool_destroy(struct pool **pp)
{
    if (pp == NULL || *pp == NULL)
        return;
    struct pool *p = *pp;
    stop_workers(p, p->n - 1);
    free(p->threads);
    free(p);
    *pp = NULL;
}

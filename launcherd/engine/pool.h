/* SPDX-License-Identifier: MIT */
/*
 * Persistent worker pool for the CPU forward pass. Threads are created once;
 * a step runs one SPMD function on every thread (the caller is thread 0) with
 * barriers between its phases, so a step costs one wake-up, not one per phase.
 * Idle workers sleep on a futex (DESIGN.md principle 7: a 2-core host also
 * runs three other stages); barriers spin for a bounded time before sleeping,
 * because phases inside a step are short and balanced.
 * Leaves out: work stealing (each phase splits its work statically, which is
 * also what keeps results independent of timing) and CPU pinning.
 */
#ifndef RS_ENGINE_POOL_H
#define RS_ENGINE_POOL_H

#include "common/err.h"

struct pool;

/* Work run on every thread: tid in [0, n_threads). */
typedef void (*pool_fn)(void *arg, int tid, int n_threads);

/*
 * Starts n_threads - 1 workers (n_threads >= 1; the caller of pool_run is
 * thread 0). barrier_spin_us: how long a thread waiting at a barrier spins
 * before sleeping on the futex (0: sleep at once). idle_spin_us: the same for
 * workers waiting for the next pool_run (0, the default elsewhere, means no
 * busy waiting between steps). Both spins are dropped when n_threads exceeds
 * the CPUs in the affinity mask. *out owns the pool: pool_destroy it.
 * Returns RS_ENOMEM or RS_EIO (thread creation failed) on failure.
 */
rs_err pool_create(int n_threads, unsigned barrier_spin_us, unsigned idle_spin_us,
                   struct pool **out);

/* Stops and joins the workers; accepts NULL and clears *p. Not during pool_run. */
void pool_destroy(struct pool **p);

/* Threads in the pool, the caller of pool_run included. */
int pool_size(const struct pool *p);

/*
 * Runs fn(arg, tid, n) on all threads and returns when every thread has
 * returned from fn. One caller thread at a time (the launcher's step thread).
 */
void pool_run(struct pool *p, pool_fn fn, void *arg);

/*
 * Waits until all threads of the current pool_run reach the barrier; only
 * inside fn, called by every thread the same number of times. Writes made
 * before the barrier are visible to every thread after it.
 */
void pool_barrier(struct pool *p);

#endif

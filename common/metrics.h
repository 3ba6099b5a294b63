/* SPDX-License-Identifier: MIT */
/*
 * Counters, gauges and latency histograms that live in shared memory, one
 * block per stage, so `ringserve-stat` (or any tool) reads every stage's
 * figures without asking it (DESIGN.md principle 9). Plain data, no
 * pointers; updates are relaxed atomics (figures, not synchronisation), so
 * a stage killed mid-update loses at most that one increment.
 * Histograms are log2 buckets of microseconds: bucket b holds values in
 * [2^(b-1), 2^b) us (bucket 0: < 1 us); quantiles are reported as the
 * bucket's upper bound, i.e. within a factor of two, which is what a live
 * view and a p99 goal need. Exact percentiles come from the benchmarks.
 */
#ifndef RS_METRICS_H
#define RS_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "common/clock.h"

#define RS_METRICS_BUCKETS 40
#define RS_METRICS_COUNTERS 24
#define RS_METRICS_HISTS 8

struct rs_hist {
    _Atomic uint64_t count;
    _Atomic uint64_t sum_us;
    _Atomic uint64_t max_us;
    _Atomic uint64_t bucket[RS_METRICS_BUCKETS];
};

/* One stage's figures; names come from the stage's table (ipc/metrics_names). */
struct rs_metrics_block {
    _Atomic uint64_t counter[RS_METRICS_COUNTERS];
    struct rs_hist hist[RS_METRICS_HISTS];
};

static inline unsigned rs_hist_bucket(uint64_t us)
{
    unsigned b = us == 0 ? 0 : 64u - (unsigned)__builtin_clzll(us);
    return b < RS_METRICS_BUCKETS ? b : RS_METRICS_BUCKETS - 1;
}

/* Records one value in microseconds. Any process; the block's owner stage in practice. */
static inline void rs_hist_add(struct rs_hist *h, uint64_t us)
{
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->bucket[rs_hist_bucket(us)], 1, memory_order_relaxed);
    uint64_t m = atomic_load_explicit(&h->max_us, memory_order_relaxed);
    while (us > m && !atomic_compare_exchange_weak_explicit(&h->max_us, &m, us,
                                                             memory_order_relaxed,
                                                             memory_order_relaxed)) {
    }
}

/* Records one duration given in nanoseconds (histograms hold microseconds). */
static inline void rs_hist_add_ns(struct rs_hist *h, uint64_t ns)
{
    rs_hist_add(h, rs_clock_ns_to_us(ns));
}

static inline void rs_counter_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static inline void rs_gauge_set(_Atomic uint64_t *c, uint64_t v)
{
    atomic_store_explicit(c, v, memory_order_relaxed);
}

/* Upper bound (us) of the bucket holding quantile q (0..1); 0 when empty. Any thread. */
uint64_t rs_hist_quantile(const struct rs_hist *h, double q);

/* Mean in microseconds; 0 when empty. */
double rs_hist_mean(const struct rs_hist *h);

#endif

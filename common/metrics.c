/* SPDX-License-Identifier: MIT */
/* Reading shared-memory histograms (metrics.h); updates are inline there. */
#include "common/metrics.h"

uint64_t rs_hist_quantile(const struct rs_hist *h, double q)
{
    uint64_t n = atomic_load_explicit(&h->count, memory_order_relaxed);
    if (n == 0)
        return 0;
    uint64_t want = (uint64_t)(q * (double)n);
    if (want >= n)
        want = n - 1;
    uint64_t seen = 0;
    for (unsigned b = 0; b < RS_METRICS_BUCKETS; b++) {
        seen += atomic_load_explicit(&h->bucket[b], memory_order_relaxed);
        if (seen > want) {
            uint64_t upper = b == 0 ? 1 : 1ull << b;
            uint64_t max = atomic_load_explicit(&h->max_us, memory_order_relaxed);
            return upper < max ? upper : max;
        }
    }
    return atomic_load_explicit(&h->max_us, memory_order_relaxed);
}

double rs_hist_mean(const struct rs_hist *h)
{
    uint64_t n = atomic_load_explicit(&h->count, memory_order_relaxed);
    return n ? (double)atomic_load_explicit(&h->sum_us, memory_order_relaxed) / (double)n : 0.0;
}

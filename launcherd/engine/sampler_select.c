/* SPDX-License-Identifier: MIT */
/*
 * Selection for the sampler (sampler_impl.h): bounded-heap top-k, quickselect
 * top-k and quickselect-on-mass top-p. Quickselects use a median-of-3 pivot
 * and fall back to heapsort after 2 log2(n) rounds, so no input is quadratic.
 */
#include "launcherd/engine/sampler_impl.h"

#include <math.h>

#define HEAP_MAX_K 4096 /* bounded heap while k <= this and k <= n / 8 */

static inline void swap_i32(int32_t *a, int32_t *b)
{
    int32_t t = *a;
    *a = *b;
    *b = t;
}

/* Heap with the worst id at the root: a sort pops it to the end, a top-k evicts it. */
static void sift_down(int32_t *v, size_t root, size_t n, const float *l)
{
    for (size_t child; (child = 2 * root + 1) < n; root = child) {
        if (child + 1 < n && sampler_better(l, v[child], v[child + 1]))
            child++; /* the worse child */
        if (!sampler_better(l, v[root], v[child]))
            return;
        swap_i32(&v[root], &v[child]);
    }
}

void sampler_sort_best_first(int32_t *v, size_t n, const float *l)
{
    for (size_t i = n / 2; i-- > 0;)
        sift_down(v, i, n, l);
    for (size_t end = n; end > 1; end--) {
        swap_i32(&v[0], &v[end - 1]);
        sift_down(v, 0, end - 1, l);
    }
}

static size_t median3(const int32_t *v, size_t a, size_t b, size_t c, const float *l)
{
    if (sampler_better(l, v[a], v[b]))
        return sampler_better(l, v[b], v[c]) ? b : sampler_better(l, v[a], v[c]) ? c : a;
    return sampler_better(l, v[a], v[c]) ? a : sampler_better(l, v[b], v[c]) ? c : b;
}

/* Moves ids better than a median-of-3 pivot to the front of v[lo..hi); returns the pivot's slot. */
static size_t partition(int32_t *v, size_t lo, size_t hi, const float *l)
{
    size_t p = median3(v, lo, lo + (hi - lo) / 2, hi - 1, l);
    swap_i32(&v[p], &v[hi - 1]);
    const int32_t pivot = v[hi - 1];
    size_t store = lo;
    for (size_t i = lo; i < hi - 1; i++)
        if (sampler_better(l, v[i], pivot))
            swap_i32(&v[i], &v[store++]);
    swap_i32(&v[store], &v[hi - 1]);
    return store;
}

static size_t round_limit(size_t n)
{
    return 2 * (size_t)(log2((double)n + 1.0) + 1.0);
}

static void quickselect(int32_t *v, size_t n, size_t k, const float *l)
{
    size_t lo = 0, hi = n, rounds = 0, limit = round_limit(n);
    while (hi - lo > 16 && k > lo && k < hi && ++rounds <= limit) {
        size_t store = partition(v, lo, hi, l);
        if (k <= store)
            hi = store;
        else
            lo = store + 1;
    }
    if (k > lo && k < hi) /* small or stubborn range: sorting it settles the split */
        sampler_sort_best_first(v + lo, hi - lo, l);
}

/* One pass keeping the k best in a heap; most ids lose one comparison with the root. */
static void heap_select(int32_t *v, size_t n, size_t k, const float *l)
{
    for (size_t i = 0; i < k; i++)
        v[i] = (int32_t)i;
    for (size_t i = k / 2; i-- > 0;)
        sift_down(v, i, k, l);
    float worst = l[v[0]];
    for (size_t i = k; i < n; i++) {
        if (!(l[i] > worst)) /* ties lose too: a later id ranks after an earlier one */
            continue;
        v[0] = (int32_t)i;
        sift_down(v, 0, k, l);
        worst = l[v[0]];
    }
}

void sampler_top_ids(int32_t *v, size_t n, size_t k, const float *l)
{
    if (k == 0)
        return;
    if (k <= HEAP_MAX_K && k <= n / 8) {
        heap_select(v, n, k, l);
        return;
    }
    for (size_t i = 0; i < n; i++)
        v[i] = (int32_t)i;
    if (k < n)
        quickselect(v, n, k, l);
}

size_t sampler_select_mass(int32_t *v, size_t n, const float *l, const float *w, double target)
{
    size_t lo = 0, hi = n, rounds = 0, limit = round_limit(n);
    double acc = 0.0; /* mass of v[0..lo), below target; the answer lies in (lo, hi] */
    while (hi - lo > 1) {
        if (++rounds > limit) { /* bad pivots: sort the rest and scan it */
            sampler_sort_best_first(v + lo, hi - lo, l);
            for (size_t i = lo; i < hi; i++)
                if ((acc += w[v[i]]) >= target)
                    return i + 1;
            return hi;
        }
        size_t store = partition(v, lo, hi, l);
        double mass = 0.0;
        for (size_t i = lo; i < store; i++)
            mass += w[v[i]];
        if (acc + mass >= target) {
            hi = store; /* store > lo: acc alone is below target */
        } else if (acc + mass + w[v[store]] >= target) {
            return store + 1;
        } else {
            acc += mass + w[v[store]];
            lo = store + 1;
        }
    }
    return hi > 0 ? hi : 1;
}

/* SPDX-License-Identifier: MIT */
/*
 * The CPU sampler's selections (launcherd/engine/sampler_select.c and the
 * top-p, min-p and draw steps of sampler.c), ported line for line as
 * device functions that one thread runs per request row. The CPU draw
 * walks its candidates in the order these selections leave them, so the
 * GPU must leave them in exactly that order to draw the same token: same
 * bounded heap, same median-of-3 quickselect with the same round limit,
 * same mass quickselect, same 1024 logit buckets, same float and double
 * operations (written with round-to-nearest intrinsics where nvcc could
 * otherwise contract them). Single-threaded on purpose: the order is the
 * algorithm's, not a parallel one's. Keep in step with the CPU files.
 */
#ifndef RS_CUDA_K_SELECT_CUH
#define RS_CUDA_K_SELECT_CUH

#include <math.h>
#include <stdint.h>

#define SEL_HEAP_MAX_K 4096
#define SEL_NUC_BUCKETS 1024

__device__ __forceinline__ bool sel_better(const float *l, int32_t a, int32_t b)
{
    return l[a] > l[b] || (l[a] == l[b] && a < b);
}

__device__ __forceinline__ void sel_swap(int32_t *a, int32_t *b)
{
    int32_t t = *a;
    *a = *b;
    *b = t;
}

__device__ inline void sel_sift_down(int32_t *v, size_t root, size_t n, const float *l)
{
    for (size_t child; (child = 2 * root + 1) < n; root = child) {
        if (child + 1 < n && sel_better(l, v[child], v[child + 1]))
            child++;
        if (!sel_better(l, v[root], v[child]))
            return;
        sel_swap(&v[root], &v[child]);
    }
}

__device__ inline void sel_sort_best_first(int32_t *v, size_t n, const float *l)
{
    for (size_t i = n / 2; i-- > 0;)
        sel_sift_down(v, i, n, l);
    for (size_t end = n; end > 1; end--) {
        sel_swap(&v[0], &v[end - 1]);
        sel_sift_down(v, 0, end - 1, l);
    }
}

__device__ inline size_t sel_median3(const int32_t *v, size_t a, size_t b, size_t c, const float *l)
{
    if (sel_better(l, v[a], v[b]))
        return sel_better(l, v[b], v[c]) ? b : sel_better(l, v[a], v[c]) ? c : a;
    return sel_better(l, v[a], v[c]) ? a : sel_better(l, v[b], v[c]) ? c : b;
}

__device__ inline size_t sel_partition(int32_t *v, size_t lo, size_t hi, const float *l)
{
    size_t p = sel_median3(v, lo, lo + (hi - lo) / 2, hi - 1, l);
    sel_swap(&v[p], &v[hi - 1]);
    const int32_t pivot = v[hi - 1];
    size_t store = lo;
    for (size_t i = lo; i < hi - 1; i++)
        if (sel_better(l, v[i], pivot))
            sel_swap(&v[i], &v[store++]);
    sel_swap(&v[store], &v[hi - 1]);
    return store;
}

__device__ inline size_t sel_round_limit(size_t n)
{
    return 2 * (size_t)(log2((double)n + 1.0) + 1.0);
}

__device__ inline void sel_quickselect(int32_t *v, size_t n, size_t k, const float *l)
{
    size_t lo = 0, hi = n, rounds = 0, limit = sel_round_limit(n);
    while (hi - lo > 16 && k > lo && k < hi && ++rounds <= limit) {
        size_t store = sel_partition(v, lo, hi, l);
        if (k <= store)
            hi = store;
        else
            lo = store + 1;
    }
    if (k > lo && k < hi)
        sel_sort_best_first(v + lo, hi - lo, l);
}

__device__ inline void sel_heap_select(int32_t *v, size_t n, size_t k, const float *l)
{
    for (size_t i = 0; i < k; i++)
        v[i] = (int32_t)i;
    for (size_t i = k / 2; i-- > 0;)
        sel_sift_down(v, i, k, l);
    float worst = l[v[0]];
    for (size_t i = k; i < n; i++) {
        if (!(l[i] > worst))
            continue;
        v[0] = (int32_t)i;
        sel_sift_down(v, 0, k, l);
        worst = l[v[0]];
    }
}

/* sampler_top_ids */
__device__ inline void sel_top_ids(int32_t *v, size_t n, size_t k, const float *l)
{
    if (k == 0)
        return;
    if (k <= SEL_HEAP_MAX_K && k <= n / 8) {
        sel_heap_select(v, n, k, l);
        return;
    }
    for (size_t i = 0; i < n; i++)
        v[i] = (int32_t)i;
    if (k < n)
        sel_quickselect(v, n, k, l);
}

/* sampler_select_mass */
__device__ inline size_t sel_select_mass(int32_t *v, size_t n, const float *l, const float *w,
                                         double target)
{
    size_t lo = 0, hi = n, rounds = 0, limit = sel_round_limit(n);
    double acc = 0.0;
    while (hi - lo > 1) {
        if (++rounds > limit) {
            sel_sort_best_first(v + lo, hi - lo, l);
            for (size_t i = lo; i < hi; i++)
                if ((acc += (double)w[v[i]]) >= target)
                    return i + 1;
            return hi;
        }
        size_t store = sel_partition(v, lo, hi, l);
        double mass = 0.0;
        for (size_t i = lo; i < store; i++)
            mass += (double)w[v[i]];
        if (acc + mass >= target) {
            hi = store;
        } else if (acc + mass + (double)w[v[store]] >= target) {
            return store + 1;
        } else {
            acc += mass + (double)w[v[store]];
            lo = store + 1;
        }
    }
    return hi > 0 ? hi : 1;
}

/* The bucket of logit x (sampler.c: (int)((x - lo) * scale)). */
__device__ __forceinline__ int sel_bucket(float x, float lo, float scale)
{
    return __float2int_rz(__fmul_rn(__fsub_rn(x, lo), scale));
}

/* nucleus_buckets; mass: SEL_NUC_BUCKETS doubles of scratch. */
__device__ inline size_t sel_nucleus_buckets(double *mass, int32_t *v, size_t m, const float *l,
                                             const float *w, double target)
{
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < m; i++) {
        lo = l[v[i]] < lo ? l[v[i]] : lo;
        hi = l[v[i]] > hi ? l[v[i]] : hi;
    }
    float span = __fsub_rn(hi, lo);
    if (!(span > 0.0f) || !isfinite(span))
        return sel_select_mass(v, m, l, w, target);
    const float scale = __fdiv_rn((float)(SEL_NUC_BUCKETS - 1), span);
    for (int b = 0; b < SEL_NUC_BUCKETS; b++)
        mass[b] = 0.0;
    for (size_t i = 0; i < m; i++)
        mass[sel_bucket(l[v[i]], lo, scale)] += (double)w[v[i]];
    int cross = SEL_NUC_BUCKETS - 1;
    double above = 0.0;
    for (; cross > 0 && above + mass[cross] < target; cross--)
        above += mass[cross];
    size_t kept = 0, in_cross = 0;
    for (size_t i = 0; i < m; i++) {
        int b = sel_bucket(l[v[i]], lo, scale);
        if (b > cross) {
            int32_t t = v[i];
            v[i] = v[kept + in_cross];
            v[kept + in_cross] = v[kept];
            v[kept++] = t;
        } else if (b == cross) {
            int32_t t = v[i];
            v[i] = v[kept + in_cross];
            v[kept + in_cross++] = t;
        }
    }
    return kept + sel_select_mass(v + kept, in_cross, l, w, target - above);
}

/* nucleus_all: candidates into v, returns the nucleus size. */
__device__ inline size_t sel_nucleus_all(double *mass, int32_t *v, const float *l, const float *w,
                                         size_t n, float top_p, double z)
{
    const float eps = (float)((1.0 - (double)top_p) * z / (double)n);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (w[i] >= eps && w[i] > 0.0f)
            v[m++] = (int32_t)i;
    return sel_nucleus_buckets(mass, v, m, l, w, (double)top_p * z);
}

/* draw_set: min-p over v[0..k), then the draw. */
__device__ inline int32_t sel_draw_set(int32_t *v, size_t k, const float *w, float min_p, double u)
{
    size_t m = 0;
    double total = 0.0, cum = 0.0;
    for (size_t i = 0; i < k; i++)
        if (w[v[i]] >= min_p && w[v[i]] > 0.0f) {
            v[m++] = v[i];
            total += (double)w[v[i]];
        }
    const double r = u * total;
    for (size_t i = 0; i < m; i++) {
        cum += (double)w[v[i]];
        if (cum > r)
            return v[i];
    }
    return v[m - 1];
}

#endif

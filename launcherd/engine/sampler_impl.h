/* SPDX-License-Identifier: MIT */
/*
 * Private to sampler.c and sampler_select.c: selection over token ids under
 * one total order (higher logit first, ties to the lower id), so every
 * selection result is a pure function of the logits whatever the algorithm.
 */
#ifndef RS_SAMPLER_IMPL_H
#define RS_SAMPLER_IMPL_H

#include <stddef.h>
#include <stdint.h>

/* 1 when token a ranks before token b. */
static inline int sampler_better(const float *l, int32_t a, int32_t b)
{
    return l[a] > l[b] || (l[a] == l[b] && a < b);
}

/* Sorts ids v[0..n) best first (heapsort: in place, O(n log n) worst case). */
void sampler_sort_best_first(int32_t *v, size_t n, const float *l);

/*
 * Writes the k best ids of 0..n-1 to v[0..k) in no particular order (v holds
 * n ids). A bounded heap over one pass when k is small next to n (the usual
 * top-k and logprob case), else quickselect with a sorting fallback.
 */
void sampler_top_ids(int32_t *v, size_t n, size_t k, const float *l);

/*
 * top-p without sorting: reorders v[0..n) so v[0..m) is the shortest
 * best-first prefix whose mass (w indexed by token id) reaches `target`;
 * returns m (>= 1). Expected O(n).
 */
size_t sampler_select_mass(int32_t *v, size_t n, const float *l, const float *w, double target);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * The sampler behind sampler.h. Order of operations (vLLM / llama.cpp):
 *   1. raw statistics: log-softmax normaliser and top-N logprobs of the raw
 *      logits, before anything changes them (vLLM's default "raw_logprobs");
 *   2. penalties: repetition over prompt + output tokens (logit / r when
 *      positive, * r otherwise), then frequency (* count) and presence over
 *      output tokens only;
 *   3. greedy argmax when temperature < 1e-5 (0 is greedy; vLLM treats tiny
 *      temperatures the same way, since 1/T would overflow);
 *   4. temperature, 5. top-k, 6. top-p (over the top-k survivors), 7. min-p
 *      (relative to the most likely survivor), 8. one inverse-CDF draw with
 *      u = hash(seed, step).
 * Ties between equal logits always go to the lower token id, so every step
 * is a pure function of its inputs whatever the selection algorithm does.
 * Nothing sorts the vocab: a quickselect finds the best k, a quickselect on
 * probability mass finds the top-p nucleus (expected O(n) each); only the
 * <= 20 logprobs are sorted.
 */
#include "launcherd/engine/sampler.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

#define GREEDY_BELOW 1e-5f  /* temperatures under this sample greedily */
#define MAX_VOCAB (1 << 26)

struct rs_sampler {
    int32_t n_vocab;
    int32_t *idx;    /* (n_vocab) candidate token ids */
    float *w;        /* (n_vocab) unnormalised probabilities exp((l - max) / T) */
    float *saved;    /* (n_vocab) raw logit of each penalised token, valid where mark == stamp */
    uint32_t *mark;  /* (n_vocab) stamp of the step that last penalised the token */
    uint32_t *count; /* (n_vocab) occurrences in the output; all zero between calls */
    uint32_t stamp;
};

void rs_sampling_params_default(struct rs_sampling_params *p)
{
    *p = (struct rs_sampling_params){.temperature = 0.0f, .top_k = 0, .top_p = 1.0f,
                                     .min_p = 0.0f, .repetition_penalty = 1.0f,
                                     .presence_penalty = 0.0f, .frequency_penalty = 0.0f,
                                     .seed = 0, .n_logprobs = 0};
}

static rs_err bad(char *err, size_t err_len, const char *field, double v, const char *rule)
{
    if (err != NULL && err_len > 0)
        snprintf(err, err_len, "%s = %g: %s", field, v, rule);
    return RS_EINVAL;
}

rs_err rs_sampling_params_validate(const struct rs_sampling_params *p, char *err, size_t err_len)
{
    if (!isfinite(p->temperature) || p->temperature < 0.0f)
        return bad(err, err_len, "temperature", p->temperature, "must be finite and >= 0");
    if (p->top_k < 0)
        return bad(err, err_len, "top_k", p->top_k, "must be >= 0 (0 = off)");
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return bad(err, err_len, "top_p", p->top_p, "must be in (0, 1]");
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return bad(err, err_len, "min_p", p->min_p, "must be in [0, 1]");
    if (!isfinite(p->repetition_penalty) || p->repetition_penalty <= 0.0f)
        return bad(err, err_len, "repetition_penalty", p->repetition_penalty,
                   "must be finite and > 0 (1 = off)");
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return bad(err, err_len, "presence_penalty", p->presence_penalty, "must be in [-2, 2]");
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return bad(err, err_len, "frequency_penalty", p->frequency_penalty,
                   "must be in [-2, 2]");
    if (p->n_logprobs < 0 || p->n_logprobs > RS_SAMPLER_MAX_LOGPROBS)
        return bad(err, err_len, "n_logprobs", p->n_logprobs, "must be in [0, 20]");
    return RS_OK;
}

rs_err rs_sampler_create(int32_t n_vocab, rs_sampler **out)
{
    *out = NULL;
    if (n_vocab <= 0 || n_vocab > MAX_VOCAB) {
        rs_log_error("sampler: n_vocab %d not in 1..%d", n_vocab, MAX_VOCAB);
        return RS_EINVAL;
    }
    rs_sampler *s = calloc(1, sizeof(*s));
    size_t n = (size_t)n_vocab;
    if (s != NULL) {
        s->n_vocab = n_vocab;
        s->idx = malloc(n * sizeof(*s->idx));
        s->w = malloc(n * sizeof(*s->w));
        s->saved = malloc(n * sizeof(*s->saved));
        s->mark = calloc(n, sizeof(*s->mark));
        s->count = calloc(n, sizeof(*s->count));
    }
    if (s == NULL || !s->idx || !s->w || !s->saved || !s->mark || !s->count) {
        rs_sampler_destroy(&s);
        rs_log_error("sampler: out of memory for a vocab of %d", n_vocab);
        return RS_ENOMEM;
    }
    *out = s;
    return RS_OK;
}

void rs_sampler_destroy(rs_sampler **sp)
{
    if (sp == NULL || *sp == NULL)
        return;
    rs_sampler *s = *sp;
    free(s->idx);
    free(s->w);
    free(s->saved);
    free(s->mark);
    free(s->count);
    free(s);
    *sp = NULL;
}

/* --- selection over a total order: higher logit first, then lower id ------- */

static inline int better(const float *l, int32_t a, int32_t b)
{
    return l[a] > l[b] || (l[a] == l[b] && a < b);
}

static inline void swap_i32(int32_t *a, int32_t *b)
{
    int32_t t = *a;
    *a = *b;
    *b = t;
}

static void sift_down(int32_t *v, size_t root, size_t n, const float *l)
{
    for (size_t child; (child = 2 * root + 1) < n; root = child) {
        if (child + 1 < n && better(l, v[child], v[child + 1]))
            child++; /* the worse child: a "worst-first" heap sorts best-first */
        if (!better(l, v[root], v[child]))
            return;
        swap_i32(&v[root], &v[child]);
    }
}

/* Sorts v[0..n) best first; heapsort: in place, O(n log n) worst case. */
static void sort_best_first(int32_t *v, size_t n, const float *l)
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
    if (better(l, v[a], v[b]))
        return better(l, v[b], v[c]) ? b : better(l, v[a], v[c]) ? c : a;
    return better(l, v[a], v[c]) ? a : better(l, v[b], v[c]) ? c : b;
}

/*
 * Reorders v[0..n) so that v[0..k) holds the k best entries (in no particular
 * order). Quickselect with a median-of-3 pivot; after 2 log2(n) rounds it
 * sorts what is left, so the worst case stays O(n log n).
 */
static void select_best(int32_t *v, size_t n, size_t k, const float *l)
{
    size_t lo = 0, hi = n, rounds = 0;
    size_t limit = 2 * (size_t)(log2((double)n + 1.0) + 1.0);
    while (hi - lo > 16 && k > lo && k < hi) {
        if (++rounds > limit)
            break;
        size_t p = median3(v, lo, lo + (hi - lo) / 2, hi - 1, l);
        swap_i32(&v[p], &v[hi - 1]);
        int32_t pivot = v[hi - 1];
        size_t store = lo;
        for (size_t i = lo; i < hi - 1; i++)
            if (better(l, v[i], pivot))
                swap_i32(&v[i], &v[store++]);
        swap_i32(&v[store], &v[hi - 1]);
        if (k <= store)
            hi = store;
        else
            lo = store + 1;
    }
    if (k > lo && k < hi)
        sort_best_first(v + lo, hi - lo, l);
}

/* --- random draw ------------------------------------------------------------ */

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) for (seed, step): a counter-based hash, no state. */
static double uniform01(uint64_t seed, uint64_t step)
{
    uint64_t h = mix64(mix64(seed) + (step + 1) * 0x9e3779b97f4a7c15ull);
    return (double)(h >> 11) * 0x1p-53;
}

/* --- the steps ---------------------------------------------------------------- */

/* NaN logits become -inf (never sampled), +inf becomes FLT_MAX; returns the max. */
static float sanitize_max(float *l, size_t n)
{
    float max = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        float v = l[i];
        if (v != v)
            l[i] = v = -INFINITY;
        else if (v > FLT_MAX)
            l[i] = v = FLT_MAX;
        max = v > max ? v : max;
    }
    return max;
}

/* log(sum(exp(l))) of the raw logits, around their max for range. */
static double log_normaliser(const float *l, size_t n, float max)
{
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += expf(l[i] - max);
    return (double)max + log(sum);
}

/* The n_top best raw logits as logprobs, best first. Uses s->idx. */
static void fill_logprobs(rs_sampler *s, const float *l, size_t n, size_t n_top, double lse,
                          struct rs_sample_result *out)
{
    int32_t *v = s->idx;
    for (size_t i = 0; i < n; i++)
        v[i] = (int32_t)i;
    select_best(v, n, n_top, l);
    sort_best_first(v, n_top, l);
    for (size_t i = 0; i < n_top; i++) {
        out->top_ids[i] = v[i];
        out->top_logprobs[i] = (float)((double)l[v[i]] - lse);
    }
    out->n_top = (int32_t)n_top;
}

/*
 * Repetition penalty on each distinct token of prompt + output, then
 * frequency and presence penalties on output tokens, in place. The raw value
 * of every changed logit goes to s->saved (for the logprob). Returns 1 when
 * anything was changed this call (s->mark then names those tokens).
 */
static int penalise(rs_sampler *s, const struct rs_sampling_params *p, float *l,
                    const int32_t *tokens, size_t n_prompt, size_t n_output)
{
    const float rep = p->repetition_penalty;
    const int use_rep = rep != 1.0f;
    const int use_add = p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    if ((!use_rep && !(use_add && n_output > 0)) || n_prompt + n_output == 0)
        return 0;
    if (++s->stamp == 0) { /* wrapped: forget every old stamp */
        memset(s->mark, 0, (size_t)s->n_vocab * sizeof(*s->mark));
        s->stamp = 1;
    }
    const int32_t *gen = tokens + n_prompt;
    for (size_t i = 0; i < n_output; i++)
        s->count[gen[i]]++;
    for (size_t i = use_rep ? 0 : n_prompt; i < n_prompt + n_output; i++) {
        int32_t t = tokens[i];
        if (s->mark[t] == s->stamp)
            continue;
        s->mark[t] = s->stamp;
        s->saved[t] = l[t];
        float v = l[t];
        if (use_rep)
            v = v > 0.0f ? v / rep : v * rep;
        if (s->count[t] > 0) {
            v -= p->frequency_penalty * (float)s->count[t];
            v -= p->presence_penalty;
        }
        l[t] = v > FLT_MAX ? FLT_MAX : v; /* a finite max keeps (l - max) defined */
    }
    for (size_t i = 0; i < n_output; i++)
        s->count[gen[i]] = 0;
    return 1;
}

static int32_t argmax(const float *l, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (l[i] > l[best])
            best = i;
    return (int32_t)best;
}

/* No top-k/top-p: min-p and the draw over the whole vocab in id order. */
static int32_t draw_all(rs_sampler *s, const float *l, size_t n, float max, float inv_t,
                        float min_p, double u)
{
    double total = 0.0, cum = 0.0;
    for (size_t i = 0; i < n; i++) {
        float w = expf((l[i] - max) * inv_t);
        s->w[i] = w >= min_p ? w : 0.0f;
        total += s->w[i];
    }
    const double r = u * total;
    int32_t last = argmax(l, n);
    for (size_t i = 0; i < n; i++) {
        if (s->w[i] <= 0.0f)
            continue;
        cum += s->w[i];
        last = (int32_t)i;
        if (cum > r)
            break;
    }
    return last;
}

/*
 * top-p without sorting: reorders v[0..n) so that v[0..m) is the shortest
 * best-first prefix whose mass (w, by token id) reaches `target`, by
 * quickselect on mass: partition, keep the better side if its mass suffices,
 * else bank it and go right. Expected O(n). Returns m (>= 1).
 */
static size_t select_mass(int32_t *v, size_t n, const float *l, const float *w, double target)
{
    size_t lo = 0, hi = n; /* v[0..lo) banked (mass acc < target); answer in (lo, hi] */
    size_t rounds = 0, limit = 2 * (size_t)(log2((double)n + 1.0) + 1.0);
    double acc = 0.0;
    while (hi - lo > 1) {
        if (++rounds > limit) { /* bad pivots: sort the rest and scan it */
            sort_best_first(v + lo, hi - lo, l);
            for (size_t i = lo; i < hi; i++)
                if ((acc += w[v[i]]) >= target)
                    return i + 1;
            return hi;
        }
        size_t p = median3(v, lo, lo + (hi - lo) / 2, hi - 1, l);
        swap_i32(&v[p], &v[hi - 1]);
        const int32_t pivot = v[hi - 1];
        size_t store = lo;
        double mass = 0.0;
        for (size_t i = lo; i < hi - 1; i++)
            if (better(l, v[i], pivot)) {
                mass += w[v[i]];
                swap_i32(&v[i], &v[store++]);
            }
        swap_i32(&v[store], &v[hi - 1]);
        if (acc + mass >= target) {
            hi = store; /* store > lo: acc alone is below target */
        } else if (acc + mass + w[pivot] >= target) {
            return store + 1;
        } else {
            acc += mass + w[pivot];
            lo = store + 1;
        }
    }
    return hi > 0 ? hi : 1;
}

/* min-p over the candidates v[0..k) (w by token id; the best has w = 1), then the draw. */
static int32_t draw_set(int32_t *v, size_t k, const float *w, float min_p, double u)
{
    size_t m = 0;
    double total = 0.0, cum = 0.0;
    for (size_t i = 0; i < k; i++)
        if (w[v[i]] >= min_p && w[v[i]] > 0.0f) {
            v[m++] = v[i];
            total += w[v[i]];
        }
    const double r = u * total;
    for (size_t i = 0; i < m; i++) {
        cum += w[v[i]];
        if (cum > r)
            return v[i];
    }
    return v[m - 1]; /* rounding guard; m >= 1 since the best token has w = 1 */
}

/*
 * temperature, top-k, top-p, min-p and the draw. Candidates stay in the order
 * the selections leave them (a deterministic function of the logits); no
 * step sorts them.
 */
static int32_t sample_tempered(rs_sampler *s, const struct rs_sampling_params *p,
                               const float *l, uint64_t step)
{
    const size_t n = (size_t)s->n_vocab;
    const float inv_t = 1.0f / p->temperature;
    const double u = uniform01(p->seed, step);
    const int use_k = p->top_k > 0 && (size_t)p->top_k < n;
    const float max = l[argmax(l, n)];
    if (!use_k && p->top_p >= 1.0f)
        return draw_all(s, l, n, max, inv_t, p->min_p, u);
    int32_t *v = s->idx;
    float *w = s->w;
    for (size_t i = 0; i < n; i++)
        v[i] = (int32_t)i;
    size_t k = n;
    if (use_k) {
        k = (size_t)p->top_k;
        select_best(v, n, k, l);
    }
    double z = 0.0;
    for (size_t i = 0; i < k; i++) {
        w[v[i]] = expf((l[v[i]] - max) * inv_t);
        z += w[v[i]];
    }
    if (p->top_p < 1.0f)
        k = select_mass(v, k, l, w, (double)p->top_p * z);
    return draw_set(v, k, w, p->min_p, u);
}

static rs_err check_history(const rs_sampler *s, const int32_t *tokens, size_t n)
{
    if (n > 0 && tokens == NULL) {
        rs_log_error("sampler: %zu history tokens but no token array", n);
        return RS_EINVAL;
    }
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->n_vocab) {
            rs_log_error("sampler: history token %zu is %d, outside the vocab of %d", i,
                         tokens[i], s->n_vocab);
            return RS_EINVAL;
        }
    return RS_OK;
}

rs_err rs_sampler_sample(rs_sampler *s, const struct rs_sampling_params *p, float *logits,
                         const int32_t *tokens, size_t n_prompt, size_t n_output, uint64_t step,
                         struct rs_sample_result *out)
{
    char err[160];
    if (s == NULL || p == NULL || logits == NULL || out == NULL)
        return RS_EINVAL;
    if (rs_sampling_params_validate(p, err, sizeof(err)) != RS_OK) {
        rs_log_error("sampler: %s", err);
        return RS_EINVAL;
    }
    if (n_output > SIZE_MAX - n_prompt || check_history(s, tokens, n_prompt + n_output) != RS_OK)
        return RS_EINVAL;
    const size_t n = (size_t)s->n_vocab;
    const float raw_max = sanitize_max(logits, n);
    if (raw_max == -INFINITY) {
        rs_log_error("sampler: no finite logit among %zu", n);
        return RS_EINVAL;
    }
    memset(out, 0, sizeof(*out));
    const double lse = log_normaliser(logits, n, raw_max);
    size_t n_top = (size_t)p->n_logprobs < n ? (size_t)p->n_logprobs : n;
    if (n_top > 0)
        fill_logprobs(s, logits, n, n_top, lse, out);
    const int penalised = penalise(s, p, logits, tokens, n_prompt, n_output);
    int32_t tok = p->temperature < GREEDY_BELOW ? argmax(logits, n)
                                                : sample_tempered(s, p, logits, step);
    float raw = penalised && s->mark[tok] == s->stamp ? s->saved[tok] : logits[tok];
    out->token = tok;
    out->logprob = (float)((double)raw - lse);
    return RS_OK;
}

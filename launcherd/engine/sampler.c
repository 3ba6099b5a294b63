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
 * Nothing sorts the vocab: a bounded heap (or quickselect) finds the best k;
 * top-p drops ids too light to matter, buckets the rest by logit and selects
 * on mass only inside the bucket where the nucleus ends (sampler_select.c);
 * only the <= 20 logprobs are sorted. exp and sums run four lanes wide with
 * SSE2 (bench/sampler prints the cost per token).
 */
#include "launcherd/engine/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "launcherd/engine/sampler_impl.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define GREEDY_BELOW 1e-5f  /* temperatures under this sample greedily */
#define MAX_VOCAB (1 << 26)
#define BLOCK 256 /* values per partial sum (sums and the draw's scan work by block) */
#define NUC_BUCKETS 1024 /* logit buckets top-p sorts its candidates into */

struct rs_sampler {
    int32_t n_vocab;
    int32_t *idx;    /* (n_vocab) candidate token ids */
    float *w;        /* (n_vocab) unnormalised probabilities exp((l - max) / T) */
    float *saved;    /* (n_vocab) raw logit of each penalised token, valid where mark == stamp */
    double *bsum;    /* (n_vocab / BLOCK + 1) partial sums of w per block */
    double mass[NUC_BUCKETS]; /* top-p: probability mass per logit bucket */
    uint32_t *mark;  /* (n_vocab) stamp of the step that last penalised the token */
    uint32_t *count; /* (n_vocab) occurrences in the output; all zero between calls */
    uint32_t stamp;
};

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
        s->bsum = malloc((n / BLOCK + 1) * sizeof(*s->bsum));
    }
    if (s == NULL || !s->idx || !s->w || !s->saved || !s->mark || !s->count || !s->bsum) {
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
    free(s->bsum);
    free(s);
    *sp = NULL;
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

/* --- vector-friendly exp and sums -------------------------------------------- */

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/*
 * exp(x) for x <= 0 (Cephes' expf polynomial; relative error below 8.4e-8,
 * under one float epsilon, checked against exp() for every float in (-87, 0]),
 * 0 below -87 and for -inf. The SSE2 version below does the same operations on four lanes;
 * libm's expf is a call per element and was 3/4 of the sampler's time.
 */
static inline float exp_nonpos(float x)
{
    const float c = x > -87.0f ? x : -87.0f;
    const float fn = (float)(int)(c * 1.44269504089f - 0.5f); /* round(c / ln 2), c <= 0 */
    const float r = c - fn * 0.693359375f - fn * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const float v = p * bits_f32((uint32_t)((int)fn + 127) << 23);
    return x > -87.0f ? v : 0.0f;
}

#ifdef __SSE2__
/* exp_nonpos on four lanes with the same operations, so lanes and tail agree bit for bit. */
static inline __m128 exp_nonpos4(__m128 x)
{
    const __m128 floor = _mm_set1_ps(-87.0f);
    const __m128 c = _mm_max_ps(x, floor);
    const __m128 t = _mm_sub_ps(_mm_mul_ps(c, _mm_set1_ps(1.44269504089f)), _mm_set1_ps(0.5f));
    const __m128i ni = _mm_cvttps_epi32(t);
    const __m128 fn = _mm_cvtepi32_ps(ni);
    __m128 r = _mm_sub_ps(c, _mm_mul_ps(fn, _mm_set1_ps(0.693359375f)));
    r = _mm_sub_ps(r, _mm_mul_ps(fn, _mm_set1_ps(-2.12194440e-4f)));
    __m128 p = _mm_set1_ps(1.9875691500e-4f);
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.3981999507e-3f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(8.3334519073e-3f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(4.1665795894e-2f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.6666665459e-1f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(5.0000001201e-1f));
    p = _mm_add_ps(_mm_add_ps(_mm_mul_ps(_mm_mul_ps(p, r), r), r), _mm_set1_ps(1.0f));
    const __m128i e = _mm_slli_epi32(_mm_add_epi32(ni, _mm_set1_epi32(127)), 23);
    const __m128 v = _mm_mul_ps(p, _mm_castsi128_ps(e));
    return _mm_and_ps(v, _mm_cmpgt_ps(x, floor));
}
#endif

/* w[i] = exp((l[i] - max) * scale); four lanes at a time where SSE2 exists. */
static void exp_row(const float *l, float *w, size_t n, float max, float scale)
{
    size_t i = 0;
#ifdef __SSE2__
    const __m128 vmax = _mm_set1_ps(max), vscale = _mm_set1_ps(scale);
    for (; i + 4 <= n; i += 4) {
        __m128 x = _mm_mul_ps(_mm_sub_ps(_mm_loadu_ps(l + i), vmax), vscale);
        _mm_storeu_ps(w + i, exp_nonpos4(x));
    }
#endif
    for (; i < n; i++)
        w[i] = exp_nonpos((l[i] - max) * scale);
}

/* Eight float lanes over w[lo..hi) (hi - lo a multiple of 8), summed in lane order. */
static double lanes8(const float *w, size_t lo, size_t hi)
{
    float lane[8] = {0};
#ifdef __SSE2__
    __m128 a = _mm_setzero_ps(), b = _mm_setzero_ps();
    for (size_t i = lo; i < hi; i += 8) {
        a = _mm_add_ps(a, _mm_loadu_ps(w + i));
        b = _mm_add_ps(b, _mm_loadu_ps(w + i + 4));
    }
    _mm_storeu_ps(lane, a);
    _mm_storeu_ps(lane + 4, b);
#else
    for (size_t i = lo; i < hi; i += 8)
        for (int j = 0; j < 8; j++)
            lane[j] += w[i + j];
#endif
    double sum = 0.0;
    for (int j = 0; j < 8; j++)
        sum += lane[j];
    return sum;
}

/* Sums w by blocks of BLOCK (eight float lanes each, then double) into bsum; returns the total. */
static double block_sums(const float *w, size_t n, double *bsum)
{
    double total = 0.0;
    for (size_t b = 0, lo = 0; lo < n; b++, lo += BLOCK) {
        const size_t hi = lo + BLOCK < n ? lo + BLOCK : n, mid = lo + (hi - lo) / 8 * 8;
        double sum = lanes8(w, lo, mid);
        for (size_t i = mid; i < hi; i++)
            sum += w[i];
        bsum[b] = sum;
        total += sum;
    }
    return total;
}

/*
 * The id where the running sum of w first exceeds r: whole blocks first,
 * then one block element by element. Rounding between the block sums and
 * the element sums can leave r unreached; the last positive weight then wins.
 */
static int32_t scan_draw(const float *w, size_t n, const double *bsum, double r)
{
    const size_t nb = (n + BLOCK - 1) / BLOCK;
    size_t b = 0;
    double cum = 0.0;
    for (; b + 1 < nb && cum + bsum[b] <= r; b++)
        cum += bsum[b];
    for (size_t i = b * BLOCK; i < n && i < (b + 1) * BLOCK; i++)
        if (w[i] > 0.0f && (cum += w[i]) > r)
            return (int32_t)i;
    for (size_t i = n; i-- > 0;)
        if (w[i] > 0.0f)
            return (int32_t)i;
    return 0;
}

/* --- the steps ---------------------------------------------------------------- */

/* Max of l[0..n) and whether any value is NaN or +inf (four lanes with SSE2). */
static float max_and_check(const float *l, size_t n, int *bad)
{
    float max = -INFINITY;
    size_t i = 0;
    *bad = 0;
#ifdef __SSE2__
    __m128 vmax = _mm_set1_ps(-INFINITY), vbad = _mm_setzero_ps();
    const __m128 big = _mm_set1_ps(FLT_MAX);
    for (; i + 4 <= n; i += 4) {
        __m128 x = _mm_loadu_ps(l + i);
        vbad = _mm_or_ps(vbad, _mm_or_ps(_mm_cmpunord_ps(x, x), _mm_cmpgt_ps(x, big)));
        vmax = _mm_max_ps(vmax, x);
    }
    float lane[4];
    _mm_storeu_ps(lane, vmax);
    for (int j = 0; j < 4; j++)
        max = lane[j] > max ? lane[j] : max;
    *bad = _mm_movemask_ps(vbad) != 0;
#endif
    for (; i < n; i++) {
        *bad |= l[i] != l[i] || l[i] > FLT_MAX;
        max = l[i] > max ? l[i] : max;
    }
    return max;
}

/* First index i with l[i] == v (0 when none). */
static int32_t first_equal(const float *l, size_t n, float v)
{
    size_t i = 0;
#ifdef __SSE2__
    const __m128 vv = _mm_set1_ps(v);
    for (; i + 4 <= n; i += 4) {
        int m = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(l + i), vv));
        if (m != 0)
            return (int32_t)(i + (size_t)__builtin_ctz((unsigned)m));
    }
#endif
    for (; i < n; i++)
        if (l[i] == v)
            return (int32_t)i;
    return 0;
}

/*
 * NaN logits become -inf (never sampled), +inf becomes FLT_MAX. Returns the
 * max and sets *best to its first index.
 */
static float sanitize_max(float *l, size_t n, int32_t *best)
{
    int bad;
    float max = max_and_check(l, n, &bad);
    if (bad) { /* rare: fix in place, then the max is of the fixed values */
        for (size_t i = 0; i < n; i++)
            l[i] = l[i] != l[i] ? -INFINITY : l[i] > FLT_MAX ? FLT_MAX : l[i];
        max = max_and_check(l, n, &bad);
    }
    *best = first_equal(l, n, max);
    return max;
}

/* The n_top best raw logits as logprobs, best first. Uses s->idx. */
static void fill_logprobs(rs_sampler *s, const float *l, size_t n, size_t n_top, double lse,
                          struct rs_sample_result *out)
{
    int32_t *v = s->idx;
    sampler_top_ids(v, n, n_top, l);
    sampler_sort_best_first(v, n_top, l);
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

/* First index of the max of finite (sanitized) logits. */
static int32_t argmax(const float *l, size_t n)
{
    int bad;
    return first_equal(l, n, max_and_check(l, n, &bad));
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
 * Cuts v[0..m) (ids with w > 0) to the top-p nucleus when it is large: one
 * pass puts each id's mass in one of NUC_BUCKETS buckets by logit (a linear,
 * hence monotone, map), the buckets above the one where the mass crosses
 * `target` are kept whole, and only that bucket is selected on. Returns the
 * nucleus size; v[0..size) holds it.
 */
static size_t nucleus_buckets(double *mass, int32_t *v, size_t m, const float *l,
                              const float *w, double target)
{
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < m; i++) {
        lo = l[v[i]] < lo ? l[v[i]] : lo;
        hi = l[v[i]] > hi ? l[v[i]] : hi;
    }
    if (!(hi - lo > 0.0f) || !isfinite(hi - lo))
        return sampler_select_mass(v, m, l, w, target);
    const float scale = (NUC_BUCKETS - 1) / (hi - lo);
    memset(mass, 0, NUC_BUCKETS * sizeof(*mass));
    for (size_t i = 0; i < m; i++)
        mass[(int)((l[v[i]] - lo) * scale)] += w[v[i]];
    int cross = NUC_BUCKETS - 1;
    double above = 0.0;
    for (; cross > 0 && above + mass[cross] < target; cross--)
        above += mass[cross];
    size_t kept = 0, in_cross = 0;
    for (size_t i = 0; i < m; i++) { /* kept ids first, then the crossing bucket's */
        int b = (int)((l[v[i]] - lo) * scale);
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
    return kept + sampler_select_mass(v + kept, in_cross, l, w, target - above);
}

/*
 * top-p over the whole vocab (w over all ids, total z): ids whose w is below
 * (1 - top_p) z / n cannot be in the nucleus (all of them together hold less
 * than the 1 - top_p it leaves out), so only the rest is selected on.
 */
static size_t nucleus_all(rs_sampler *s, const float *l, size_t n, float top_p, double z)
{
    const float *w = s->w;
    const float eps = (float)((1.0 - top_p) * z / (double)n);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (w[i] >= eps && w[i] > 0.0f)
            s->idx[m++] = (int32_t)i;
    return nucleus_buckets(s->mass, s->idx, m, l, w, (double)top_p * z);
}

/*
 * temperature, top-k, top-p, min-p and the draw. Candidates stay in the order
 * the selections leave them (a deterministic function of the logits); no
 * step sorts them.
 */
static int32_t sample_tempered(rs_sampler *s, const struct rs_sampling_params *p,
                               const float *l, float max, uint64_t step)
{
    const size_t n = (size_t)s->n_vocab;
    const float inv_t = 1.0f / p->temperature;
    const double u = uniform01(p->seed, step);
    float *w = s->w;
    if (p->top_k > 0 && (size_t)p->top_k < n) {
        int32_t *v = s->idx;
        size_t k = (size_t)p->top_k;
        sampler_top_ids(v, n, k, l);
        double z = 0.0;
        for (size_t i = 0; i < k; i++)
            z += w[v[i]] = exp_nonpos((l[v[i]] - max) * inv_t);
        if (p->top_p < 1.0f)
            k = sampler_select_mass(v, k, l, w, (double)p->top_p * z);
        return draw_set(v, k, w, p->min_p, u);
    }
    exp_row(l, w, n, max, inv_t);
    if (p->top_p < 1.0f) {
        double z = block_sums(w, n, s->bsum);
        size_t k = nucleus_all(s, l, n, p->top_p, z);
        return draw_set(s->idx, k, w, p->min_p, u);
    }
    if (p->min_p > 0.0f)
        for (size_t i = 0; i < n; i++)
            w[i] = w[i] >= p->min_p ? w[i] : 0.0f;
    return scan_draw(w, n, s->bsum, u * block_sums(w, n, s->bsum));
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
    int32_t best;
    const float raw_max = sanitize_max(logits, n, &best);
    if (raw_max == -INFINITY) {
        rs_log_error("sampler: no finite logit among %zu", n);
        return RS_EINVAL;
    }
    memset(out, 0, sizeof(*out));
    exp_row(logits, s->w, n, raw_max, 1.0f);
    const double lse = (double)raw_max + log(block_sums(s->w, n, s->bsum));
    size_t n_top = (size_t)p->n_logprobs < n ? (size_t)p->n_logprobs : n;
    if (n_top > 0)
        fill_logprobs(s, logits, n, n_top, lse, out);
    const int penalised = penalise(s, p, logits, tokens, n_prompt, n_output);
    if (penalised)
        best = argmax(logits, n);
    int32_t tok = p->temperature < GREEDY_BELOW ? best
                                                : sample_tempered(s, p, logits, logits[best], step);
    float raw = penalised && s->mark[tok] == s->stamp ? s->saved[tok] : logits[tok];
    out->token = tok;
    out->logprob = (float)((double)raw - lse);
    return RS_OK;
}

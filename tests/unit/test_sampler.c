/* SPDX-License-Identifier: MIT */
/*
 * The sampler against straightforward reference computations done here in
 * double precision with full sorts: distributions (chi-square over 10^5 draws
 * at different steps), the exact candidate sets of top-k / top-p / min-p,
 * penalties on exactly the affected logits, logprobs, reproducibility per
 * (seed, step), parameter validation and hostile logits.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "launcherd/engine/sampler.h"
#include "tests/rs_test.h"

/* Regularized upper incomplete gamma Q(a, x): series below a + 1, else continued fraction. */
static double gamma_q(double a, double x)
{
    double front = exp(-x + a * log(x) - lgamma(a));
    if (x < a + 1) {
        double term = 1 / a, sum = term;
        for (int n = 1; n < 10000 && term > 1e-17 * sum; n++)
            sum += term *= x / (a + n);
        return 1 - sum * front;
    }
    double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
    for (int i = 1; i < 10000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        d = d != 0 ? 1 / d : 1e300;
        c = b + an / c;
        h *= d * c;
        if (fabs(d * c - 1) < 1e-15)
            break;
    }
    return front * h;
}

/* The chi-square value a correct sampler exceeds with probability 1e-6. */
static double chi2_crit(int dof)
{
    double lo = 0, hi = 10000;
    for (int i = 0; i < 200; i++) {
        double mid = (lo + hi) / 2;
        if (gamma_q(dof / 2.0, mid / 2) > 1e-6)
            lo = mid;
        else
            hi = mid;
    }
    return dof > 0 ? lo : -1;
}

static uint64_t rng = 88172645463325252ull;

static double rand01(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}

static struct rs_sampling_params params(float temp, uint64_t seed)
{
    struct rs_sampling_params p;
    rs_sampling_params_default(&p);
    p.temperature = temp;
    p.seed = seed;
    return p;
}

/* Samples once from a private copy of `logits` (the sampler edits it). */
static int32_t draw(rs_sampler *s, const struct rs_sampling_params *p, const float *logits,
                    int n, uint64_t step)
{
    float *l = malloc((size_t)n * sizeof(float));
    struct rs_sample_result r;
    memcpy(l, logits, (size_t)n * sizeof(float));
    rs_err rc = rs_sampler_sample(s, p, l, NULL, 0, 0, step, &r);
    free(l);
    return rc == RS_OK ? r.token : -1;
}

/* Reference: token ids best first (higher logit, then lower id). */
static const float *sort_logits;

static int cmp_desc(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (sort_logits[x] != sort_logits[y])
        return sort_logits[x] > sort_logits[y] ? -1 : 1;
    return x < y ? -1 : 1;
}

static void ref_order(const float *l, int n, int32_t *order)
{
    for (int i = 0; i < n; i++)
        order[i] = i;
    sort_logits = l;
    qsort(order, (size_t)n, sizeof(int32_t), cmp_desc);
}

/*
 * Reference candidate set and probabilities after temperature, top-k, top-p,
 * min-p (the documented order), in double precision. prob[i] is 0 outside.
 */
static void ref_probs(const float *l, int n, const struct rs_sampling_params *p, double *prob)
{
    int32_t *order = malloc((size_t)n * sizeof(int32_t));
    ref_order(l, n, order);
    int k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    double z = 0, max = l[order[0]];
    for (int i = 0; i < k; i++)
        z += exp((l[order[i]] - max) / p->temperature);
    if (p->top_p < 1.0f) {
        double cum = 0;
        int m = 0;
        while (m < k && cum < p->top_p * z)
            cum += exp((l[order[m++]] - max) / p->temperature);
        k = m;
    }
    int m = 0;
    while (m < k && exp((l[order[m]] - max) / p->temperature) >= p->min_p)
        m++;
    double total = 0;
    memset(prob, 0, (size_t)n * sizeof(double));
    for (int i = 0; i < m; i++)
        total += prob[order[i]] = exp((l[order[i]] - max) / p->temperature);
    for (int i = 0; i < n; i++)
        prob[i] /= total;
    free(order);
}

/*
 * Draws `draws` tokens at steps 0.. and returns the chi-square statistic of
 * their frequencies against prob, with its degrees of freedom in *dof; -1
 * when a token of probability 0 was drawn or a cell expects under 5 draws.
 */
static double chi_square(rs_sampler *s, const struct rs_sampling_params *p, const float *l, int n,
                         const double *prob, int draws, int *dof)
{
    long *count = calloc((size_t)n, sizeof(long));
    double chi = 0;
    int cells = 0;
    for (int i = 0; i < draws; i++) {
        int32_t t = draw(s, p, l, n, (uint64_t)i);
        if (t < 0 || t >= n || prob[t] <= 0) {
            fprintf(stderr, "token %d drawn but excluded\n", t);
            chi = -1;
            break;
        }
        count[t]++;
    }
    for (int i = 0; i < n && chi >= 0; i++)
        if (prob[i] > 0) {
            double e = prob[i] * draws;
            chi = e < 5 ? -1 : chi + (count[i] - e) * (count[i] - e) / e;
            cells++;
        }
    free(count);
    *dof = cells - 1;
    return chi;
}

/* Frequencies of 10^5 draws match prob: chi-square below its 1e-6 quantile. */
static int chi_square_ok(rs_sampler *s, const struct rs_sampling_params *p, const float *l, int n,
                         const double *prob, int draws)
{
    int dof;
    double chi = chi_square(s, p, l, n, prob, draws, &dof);
    RS_CHECK_MSG(chi >= 0 && chi < chi2_crit(dof), "chi-square %.2f over %d dof, limit %.2f",
                 chi, dof, chi2_crit(dof));
    return 0;
}

/* 1 when the validator's message starts "field '<name>':" (the request's field names). */
static int names_field(const char *err, const char *name)
{
    char want[64];
    snprintf(want, sizeof(want), "field '%s':", name);
    return strncmp(err, want, strlen(want)) == 0;
}

static int test_validate_names_each_bad_field(void)
{
    struct rs_sampling_params p;
    char err[160];
    rs_sampling_params_default(&p);
    RS_CHECK(rs_sampling_params_validate(&p, err, sizeof(err)) == RS_OK);
    p.top_p = 1.0f, p.min_p = 1.0f, p.n_logprobs = 20, p.presence_penalty = -2.0f;
    RS_CHECK(rs_sampling_params_validate(&p, err, sizeof(err)) == RS_OK);
    const struct {
        const char *field;
        float *f;
        float v;
    } fbad[] = {
        {"temperature", &p.temperature, NAN},
        {"temperature", &p.temperature, INFINITY},
        {"temperature", &p.temperature, -0.5f},
        {"top_p", &p.top_p, 0.0f},
        {"top_p", &p.top_p, 1.0001f},
        {"top_p", &p.top_p, NAN},
        {"min_p", &p.min_p, -0.01f},
        {"min_p", &p.min_p, 1.5f},
        {"min_p", &p.min_p, NAN},
        {"repetition_penalty", &p.repetition_penalty, 0},
        {"repetition_penalty", &p.repetition_penalty, -1},
        {"repetition_penalty", &p.repetition_penalty, INFINITY},
        {"repetition_penalty", &p.repetition_penalty, NAN},
        {"presence_penalty", &p.presence_penalty, 2.5f},
        {"presence_penalty", &p.presence_penalty, NAN},
        {"frequency_penalty", &p.frequency_penalty, -3},
        {"frequency_penalty", &p.frequency_penalty, INFINITY},
    };
    for (size_t i = 0; i < sizeof(fbad) / sizeof(fbad[0]); i++) {
        rs_sampling_params_default(&p);
        *fbad[i].f = fbad[i].v;
        RS_CHECK(rs_sampling_params_validate(&p, err, sizeof(err)) == RS_EINVAL);
        RS_CHECK_MSG(names_field(err, fbad[i].field), "%s", err);
    }
    const struct {
        const char *field;
        int32_t *f;
        int32_t v;
    } ibad[] = {{"top_k", &p.top_k, -1}, {"logprobs", &p.n_logprobs, -1},
                {"logprobs", &p.n_logprobs, 21}};
    for (size_t i = 0; i < sizeof(ibad) / sizeof(ibad[0]); i++) {
        rs_sampling_params_default(&p);
        *ibad[i].f = ibad[i].v;
        RS_CHECK(rs_sampling_params_validate(&p, err, sizeof(err)) == RS_EINVAL);
        RS_CHECK_MSG(names_field(err, ibad[i].field), "%s", err);
        /* sample refuses the same parameters */
        rs_sampler *s;
        float l[4] = {0, 1, 2, 3};
        struct rs_sample_result r;
        RS_CHECK(rs_sampler_create(4, &s) == RS_OK);
        RS_CHECK(rs_sampler_sample(s, &p, l, NULL, 0, 0, 0, &r) == RS_EINVAL);
        rs_sampler_destroy(&s);
    }
    return 0;
}

static int test_greedy_takes_argmax_lowest_id_on_ties(void)
{
    rs_sampler *s;
    RS_CHECK(rs_sampler_create(6, &s) == RS_OK);
    struct rs_sampling_params p = params(0.0f, 1);
    float l[6] = {1, 5, 2, 5, -1, 4};
    for (uint64_t step = 0; step < 10; step++)
        RS_CHECK(draw(s, &p, l, 6, step) == 1);
    p.temperature = 1e-6f; /* below the greedy threshold */
    RS_CHECK(draw(s, &p, l, 6, 3) == 1);
    rs_sampler_destroy(&s);
    RS_CHECK(s == NULL);
    return 0;
}

static int test_temperature_matches_softmax_frequencies(void)
{
    rs_sampler *s;
    const float l[8] = {1.0f, 0.5f, 2.0f, -0.5f, 1.5f, 0.0f, 0.8f, -1.0f};
    double prob[8];
    RS_CHECK(rs_sampler_create(8, &s) == RS_OK);
    const float temps[2] = {1.0f, 0.7f};
    for (int t = 0; t < 2; t++) {
        struct rs_sampling_params p = params(temps[t], 1234 + (uint64_t)t);
        ref_probs(l, 8, &p, prob);
        RS_CHECK(chi_square_ok(s, &p, l, 8, prob, 100000) == 0);
    }
    rs_sampler_destroy(&s);
    return 0;
}

/* A sharply wrong sampler must fail the same check: it has power. */
static int test_chi_square_detects_a_wrong_temperature(void)
{
    rs_sampler *s;
    const float l[8] = {1.0f, 0.5f, 2.0f, -0.5f, 1.5f, 0.0f, 0.8f, -1.0f};
    double prob[8];
    RS_CHECK(rs_sampler_create(8, &s) == RS_OK);
    struct rs_sampling_params p = params(1.0f, 99), q = params(1.15f, 99);
    ref_probs(l, 8, &q, prob); /* expectations for T = 1.15, draws at T = 1 */
    int dof;
    double chi = chi_square(s, &p, l, 8, prob, 100000, &dof);
    RS_CHECK_MSG(chi > chi2_crit(dof), "chi-square %.2f missed a 15%% temperature error", chi);
    rs_sampler_destroy(&s);
    return 0;
}

static void random_logits(float *l, int n, double scale)
{
    for (int i = 0; i < n; i++)
        l[i] = (float)((rand01() - 0.5) * scale);
}

/* Every draw of `p` over random logits falls in the reference candidate set. */
static int only_candidates(int n, const struct rs_sampling_params *p, int rounds, int draws)
{
    rs_sampler *s;
    float *l = malloc((size_t)n * sizeof(float));
    double *prob = malloc((size_t)n * sizeof(double));
    RS_CHECK(rs_sampler_create(n, &s) == RS_OK);
    for (int r = 0; r < rounds; r++) {
        random_logits(l, n, 8.0);
        if (r % 2)
            for (int i = 0; i < n; i += 7)
                l[i] = l[0]; /* many ties */
        ref_probs(l, n, p, prob);
        for (int d = 0; d < draws; d++) {
            int32_t t = draw(s, p, l, n, (uint64_t)(r * draws + d));
            RS_CHECK_MSG(t >= 0 && prob[t] > 0, "round %d: token %d is excluded", r, t);
        }
    }
    rs_sampler_destroy(&s);
    free(l);
    free(prob);
    return 0;
}

static int test_top_k_top_p_min_p_never_return_excluded_tokens(void)
{
    struct rs_sampling_params p = params(1.0f, 7);
    p.top_k = 10;
    RS_CHECK(only_candidates(1000, &p, 20, 200) == 0);
    p = params(0.8f, 8);
    p.top_p = 0.5f;
    RS_CHECK(only_candidates(1000, &p, 20, 200) == 0);
    p = params(1.3f, 9);
    p.min_p = 0.3f;
    RS_CHECK(only_candidates(1000, &p, 20, 200) == 0);
    p = params(0.7f, 10);
    p.top_k = 50, p.top_p = 0.9f, p.min_p = 0.05f;
    RS_CHECK(only_candidates(1000, &p, 20, 200) == 0);
    p.top_k = 300; /* large k: quickselect instead of the bounded heap */
    RS_CHECK(only_candidates(1000, &p, 10, 100) == 0);
    p.top_k = 1; /* top-k 1 is greedy */
    RS_CHECK(only_candidates(300, &p, 5, 50) == 0);
    return 0;
}

static int test_filtered_distributions_match_reference(void)
{
    enum { N = 40 };
    float l[N];
    double prob[N];
    rs_sampler *s;
    RS_CHECK(rs_sampler_create(N, &s) == RS_OK);
    for (int i = 0; i < N; i++)
        l[i] = (float)(-0.15 * i + 0.05 * (i % 3)); /* gently falling */
    struct rs_sampling_params p = params(1.0f, 5);
    p.top_k = 5;
    ref_probs(l, N, &p, prob);
    RS_CHECK(chi_square_ok(s, &p, l, N, prob, 100000) == 0);
    p = params(0.9f, 6);
    p.top_p = 0.3f;
    ref_probs(l, N, &p, prob);
    RS_CHECK(chi_square_ok(s, &p, l, N, prob, 100000) == 0);
    p = params(1.0f, 7);
    p.min_p = 0.25f;
    ref_probs(l, N, &p, prob);
    RS_CHECK(chi_square_ok(s, &p, l, N, prob, 100000) == 0);
    rs_sampler_destroy(&s);
    return 0;
}

/* A nearly flat vocab: the nucleus holds most tokens, all of which can be drawn. */
static int test_top_p_flat_distribution_reaches_deep_ranks(void)
{
    enum { N = 5000 };
    static float l[N];
    static double prob[N];
    rs_sampler *s;
    RS_CHECK(rs_sampler_create(N, &s) == RS_OK);
    random_logits(l, N, 0.5);
    struct rs_sampling_params p = params(1.0f, 11);
    p.top_p = 0.95f;
    ref_probs(l, N, &p, prob);
    int32_t order[N];
    ref_order(l, N, order);
    int rank_of[N], deepest = 0;
    for (int i = 0; i < N; i++)
        rank_of[order[i]] = i;
    for (int d = 0; d < 3000; d++) {
        int32_t t = draw(s, &p, l, N, (uint64_t)d);
        RS_CHECK(t >= 0 && prob[t] > 0);
        deepest = rank_of[t] > deepest ? rank_of[t] : deepest;
    }
    RS_CHECK_MSG(deepest > 1024, "deepest rank drawn %d: nucleus cut short", deepest);
    rs_sampler_destroy(&s);
    return 0;
}

static int test_penalties_change_exactly_the_affected_logits(void)
{
    enum { N = 64 };
    float l[N], ref[N];
    rs_sampler *s;
    RS_CHECK(rs_sampler_create(N, &s) == RS_OK);
    random_logits(l, N, 6.0);
    l[3] = 0.0f; /* zero: the repetition rule's "otherwise" branch */
    const int32_t tokens[] = {3, 5, 9, 5, /* prompt */ 9, 9, 11, 5, 20};
    const size_t n_prompt = 4, n_output = 5;
    struct rs_sampling_params p = params(0.0f, 0);
    p.repetition_penalty = 1.3f, p.presence_penalty = 0.5f, p.frequency_penalty = 0.25f;
    memcpy(ref, l, sizeof(l));
    int out_count[N] = {0}, seen[N] = {0};
    for (size_t i = n_prompt; i < n_prompt + n_output; i++)
        out_count[tokens[i]]++;
    for (size_t i = 0; i < n_prompt + n_output; i++) {
        int t = tokens[i];
        if (seen[t]++)
            continue;
        ref[t] = ref[t] > 0 ? ref[t] / 1.3f : ref[t] * 1.3f;
        if (out_count[t]) {
            ref[t] -= 0.25f * (float)out_count[t];
            ref[t] -= 0.5f;
        }
    }
    struct rs_sample_result r;
    RS_CHECK(rs_sampler_sample(s, &p, l, tokens, n_prompt, n_output, 0, &r) == RS_OK);
    RS_CHECK(memcmp(l, ref, sizeof(l)) == 0);
    /* Presence/frequency alone leave prompt-only tokens (3) untouched. */
    random_logits(l, N, 6.0);
    memcpy(ref, l, sizeof(l));
    p.repetition_penalty = 1.0f;
    RS_CHECK(rs_sampler_sample(s, &p, l, tokens, n_prompt, n_output, 0, &r) == RS_OK);
    for (int t = 0; t < N; t++) {
        float want = out_count[t] ? ref[t] - 0.25f * (float)out_count[t] - 0.5f : ref[t];
        RS_CHECK_MSG(l[t] == want, "token %d: %g != %g", t, (double)l[t], (double)want);
    }
    rs_sampler_destroy(&s);
    return 0;
}

static int test_penalty_moves_greedy_and_logprob_stays_raw(void)
{
    float l[5] = {0.1f, 3.0f, 2.9f, -1.0f, 0.0f};
    rs_sampler *s;
    RS_CHECK(rs_sampler_create(5, &s) == RS_OK);
    struct rs_sampling_params p = params(0.0f, 0);
    p.repetition_penalty = 2.0f;
    const int32_t hist[1] = {1};
    struct rs_sample_result r;
    double lse = 0;
    for (int i = 0; i < 5; i++)
        lse += exp((double)l[i]);
    lse = log(lse);
    RS_CHECK(rs_sampler_sample(s, &p, l, hist, 1, 0, 0, &r) == RS_OK);
    RS_CHECK(r.token == 2);
    /* Penalise the winner instead: the logprob is still of the raw logits. */
    float l2[5] = {0.1f, 3.0f, 2.9f, -1.0f, 0.0f};
    const int32_t hist2[2] = {2, 1};
    p.repetition_penalty = 1.01f;
    RS_CHECK(rs_sampler_sample(s, &p, l2, hist2, 2, 0, 0, &r) == RS_OK);
    RS_CHECK(r.token == 1);
    RS_CHECK(fabs((double)r.logprob - (3.0 - lse)) < 1e-5);
    rs_sampler_destroy(&s);
    return 0;
}

static int test_logprobs_match_reference_log_softmax(void)
{
    enum { N = 1000 };
    static float l[N], orig[N];
    rs_sampler *s;
    RS_CHECK(rs_sampler_create(N, &s) == RS_OK);
    random_logits(orig, N, 20.0);
    orig[17] = orig[400] = 30.0f; /* a tie at the top */
    double lse = 0, max = 30.0;
    for (int i = 0; i < N; i++)
        lse += exp((double)orig[i] - max);
    lse = max + log(lse);
    int32_t order[N];
    ref_order(orig, N, order);
    struct rs_sampling_params p = params(0.9f, 3);
    p.n_logprobs = 20, p.top_k = 100, p.frequency_penalty = 1.0f;
    const int32_t hist[3] = {17, 17, 5};
    struct rs_sample_result r;
    memcpy(l, orig, sizeof(l));
    RS_CHECK(rs_sampler_sample(s, &p, l, hist, 0, 3, 42, &r) == RS_OK);
    RS_CHECK(r.n_top == 20 && r.top_ids[0] == 17 && r.top_ids[1] == 400);
    for (int i = 0; i < 20; i++) {
        RS_CHECK(r.top_ids[i] == order[i]);
        RS_CHECK(fabs(r.top_logprobs[i] - ((double)orig[order[i]] - lse)) < 1e-4);
    }
    RS_CHECK(fabs(r.logprob - ((double)orig[r.token] - lse)) < 1e-4);
    /* More logprobs asked than the vocab has. */
    rs_sampler *t;
    float tiny[3] = {0.0f, 1.0f, 2.0f};
    RS_CHECK(rs_sampler_create(3, &t) == RS_OK);
    RS_CHECK(rs_sampler_sample(t, &p, tiny, NULL, 0, 0, 0, &r) == RS_OK);
    RS_CHECK(r.n_top == 3 && r.top_ids[0] == 2 && r.top_ids[2] == 0);
    double sum = 0;
    for (int i = 0; i < 3; i++)
        sum += exp((double)r.top_logprobs[i]);
    RS_CHECK(fabs(sum - 1.0) < 1e-5);
    rs_sampler_destroy(&t);
    rs_sampler_destroy(&s);
    return 0;
}

static int test_same_seed_and_step_give_same_token(void)
{
    enum { N = 1000 };
    static float l[N];
    rs_sampler *a, *b;
    RS_CHECK(rs_sampler_create(N, &a) == RS_OK && rs_sampler_create(N, &b) == RS_OK);
    random_logits(l, N, 0.1); /* nearly flat: a different draw gives a different token */
    int differ_seed = 0, differ_step = 0;
    const int32_t hist[4] = {1, 2, 3, 2};
    for (uint64_t i = 0; i < 200; i++) {
        struct rs_sampling_params p = params(1.0f, i), q = params(1.0f, i + 1000);
        p.repetition_penalty = q.repetition_penalty = 1.1f;
        int32_t x = draw(a, &p, l, N, i), y;
        /* Another instance, after unrelated work, agrees. */
        (void)draw(b, &q, l, N, 7);
        float *c = malloc(sizeof(l));
        struct rs_sample_result r;
        memcpy(c, l, sizeof(l));
        RS_CHECK(rs_sampler_sample(b, &p, c, hist, 4, 0, i, &r) == RS_OK);
        free(c);
        y = draw(b, &p, l, N, i);
        RS_CHECK(x == y);
        differ_seed += draw(a, &q, l, N, i) != x;
        differ_step += draw(a, &p, l, N, i + 1) != x;
    }
    RS_CHECK_MSG(differ_seed >= 190 && differ_step >= 190, "%d %d", differ_seed, differ_step);
    rs_sampler_destroy(&a);
    rs_sampler_destroy(&b);
    return 0;
}

static int test_hostile_logits_and_history(void)
{
    rs_sampler *s;
    struct rs_sample_result r;
    RS_CHECK(rs_sampler_create(6, &s) == RS_OK);
    struct rs_sampling_params p = params(1.0f, 1);
    for (uint64_t step = 0; step < 200; step++) {
        float l[6] = {NAN, 1.0f, -INFINITY, NAN, 0.5f, -INFINITY};
        RS_CHECK(rs_sampler_sample(s, &p, l, NULL, 0, 0, step, &r) == RS_OK);
        RS_CHECK(r.token == 1 || r.token == 4);
    }
    float inf[6] = {0, INFINITY, 0, 0, 0, 0};
    RS_CHECK(rs_sampler_sample(s, &p, inf, NULL, 0, 0, 0, &r) == RS_OK && r.token == 1);
    float none[6] = {NAN, -INFINITY, NAN, NAN, -INFINITY, NAN};
    RS_CHECK(rs_sampler_sample(s, &p, none, NULL, 0, 0, 0, &r) == RS_EINVAL);
    float big[6] = {FLT_MAX, -FLT_MAX, 0, 0, 0, 0};
    p.repetition_penalty = 0.5f; /* FLT_MAX / 0.5 overflows: clamped, still sampled */
    const int32_t h0[1] = {0};
    RS_CHECK(rs_sampler_sample(s, &p, big, h0, 1, 0, 0, &r) == RS_OK && r.token == 0);
    float l[6] = {0, 1, 2, 3, 4, 5};
    const int32_t bad_hist[2] = {1, 6};
    RS_CHECK(rs_sampler_sample(s, &p, l, bad_hist, 1, 1, 0, &r) == RS_EINVAL);
    const int32_t neg_hist[1] = {-1};
    RS_CHECK(rs_sampler_sample(s, &p, l, neg_hist, 1, 0, 0, &r) == RS_EINVAL);
    RS_CHECK(rs_sampler_sample(s, &p, l, NULL, 1, 0, 0, &r) == RS_EINVAL);
    RS_CHECK(rs_sampler_sample(NULL, &p, l, NULL, 0, 0, 0, &r) == RS_EINVAL);
    rs_sampler_destroy(&s);
    RS_CHECK(rs_sampler_create(0, &s) == RS_EINVAL && s == NULL);
    RS_CHECK(rs_sampler_create(-5, &s) == RS_EINVAL);
    return 0;
}

/* A 256k vocab with top-k: the partial selection picks the reference set. */
static int test_large_vocab_top_k_matches_full_sort(void)
{
    enum { N = 256000, K = 40 };
    float *l = malloc(N * sizeof(float));
    int32_t *order = malloc(N * sizeof(int32_t));
    char *in_top = calloc(N, 1);
    rs_sampler *s;
    RS_CHECK(l && order && in_top && rs_sampler_create(N, &s) == RS_OK);
    random_logits(l, N, 30.0);
    ref_order(l, N, order);
    float tie = l[order[K - 5]];
    for (int i = 0; i < N; i += 5000)
        l[i] = tie; /* a band of ties across the cut */
    ref_order(l, N, order);
    RS_CHECK(l[order[K - 1]] == tie && l[order[K]] == tie);
    for (int i = 0; i < K; i++)
        in_top[order[i]] = 1;
    struct rs_sampling_params p = params(2.0f, 77);
    p.top_k = K, p.n_logprobs = 20;
    for (uint64_t step = 0; step < 20; step++) {
        struct rs_sample_result r;
        float *c = malloc(N * sizeof(float));
        memcpy(c, l, N * sizeof(float));
        RS_CHECK(rs_sampler_sample(s, &p, c, NULL, 0, 0, step, &r) == RS_OK);
        free(c);
        RS_CHECK(in_top[r.token]);
        for (int i = 0; i < 20; i++)
            RS_CHECK(r.top_ids[i] == order[i]);
    }
    p.top_k = 5000, p.n_logprobs = 0; /* past the heap's limit: quickselect */
    memset(in_top, 0, N);
    for (int i = 0; i < 5000; i++)
        in_top[order[i]] = 1;
    for (uint64_t step = 0; step < 5; step++) {
        struct rs_sample_result r;
        float *c = malloc(N * sizeof(float));
        memcpy(c, l, N * sizeof(float));
        RS_CHECK(rs_sampler_sample(s, &p, c, NULL, 0, 0, step, &r) == RS_OK);
        free(c);
        RS_CHECK(in_top[r.token]);
    }
    rs_sampler_destroy(&s);
    free(l);
    free(order);
    free(in_top);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_validate_names_each_bad_field),
    RS_TEST(test_greedy_takes_argmax_lowest_id_on_ties),
    RS_TEST(test_temperature_matches_softmax_frequencies),
    RS_TEST(test_chi_square_detects_a_wrong_temperature),
    RS_TEST(test_top_k_top_p_min_p_never_return_excluded_tokens),
    RS_TEST(test_filtered_distributions_match_reference),
    RS_TEST(test_top_p_flat_distribution_reaches_deep_ranks),
    RS_TEST(test_penalties_change_exactly_the_affected_logits),
    RS_TEST(test_penalty_moves_greedy_and_logprob_stays_raw),
    RS_TEST(test_logprobs_match_reference_log_softmax),
    RS_TEST(test_same_seed_and_step_give_same_token),
    RS_TEST(test_hostile_logits_and_history),
    RS_TEST(test_large_vocab_top_k_matches_full_sort),
};
RS_TEST_MAIN(cases)

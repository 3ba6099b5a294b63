/* SPDX-License-Identifier: MIT */
/*
 * Applying masks, logit_bias and allowed-token-ids lists to logits, then
 * sampling with the real sampler: -100 bans a token (never sampled, also
 * when it is the argmax), +100 forces it (greedy and sampled), masks win over
 * biases, allowed-ids lists confine sampling, every logit is either untouched
 * plus its bias or -INFINITY with the allowed count right (also for vocab
 * sizes that are not a multiple of 32), and bad lists are refused by entry.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/mask_apply.h"
#include "launcherd/engine/sampler.h"
#include "tests/rs_test.h"

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static void random_logits(float *l, uint32_t n, uint64_t *s)
{
    for (uint32_t i = 0; i < n; i++)
        l[i] = (float)(rnd(s) % 8000) / 1000.0f - 4.0f;
}

/* Samples once from a copy of logits (temperature 0: greedy). */
static int32_t sample(rs_sampler *smp, const float *logits, uint32_t n, float temp, uint64_t step)
{
    float *tmp = malloc(n * sizeof(float));
    memcpy(tmp, logits, n * sizeof(float));
    struct rs_sampling_params p;
    rs_sampling_params_default(&p);
    p.temperature = temp;
    p.seed = 99;
    struct rs_sample_result r;
    int32_t hist[1] = {0};
    rs_err rc = rs_sampler_sample(smp, &p, tmp, hist, 1, 0, step, &r);
    free(tmp);
    return rc == RS_OK ? r.token : -1;
}

static int test_bias_minus_100_bans_plus_100_forces(void)
{
    const uint32_t n = 32000;
    float *base = malloc(n * sizeof(float)), *l = malloc(n * sizeof(float));
    uint64_t s = 1;
    random_logits(base, n, &s);
    rs_sampler *smp;
    RS_CHECK(rs_sampler_create((int32_t)n, &smp) == RS_OK);
    int32_t top = sample(smp, base, n, 0.0f, 0);
    /* ban the argmax: greedy picks something else, sampling never picks it */
    struct rs_logit_bias ban = {top, -100.0f};
    memcpy(l, base, n * sizeof(float));
    uint32_t left;
    rs_mask_apply(l, n, NULL, &ban, 1, &left);
    RS_CHECK(left == n - 1 && l[top] == -INFINITY);
    RS_CHECK(sample(smp, l, n, 0.0f, 0) != top);
    for (uint64_t k = 0; k < 300; k++)
        RS_CHECK(sample(smp, l, n, 1.5f, k) != top);
    /* force a low token: greedy and sampled both pick it */
    int32_t low = 0;
    for (uint32_t i = 1; i < n; i++)
        if (base[i] < base[low])
            low = (int32_t)i;
    struct rs_logit_bias force = {low, 100.0f};
    memcpy(l, base, n * sizeof(float));
    rs_mask_apply(l, n, NULL, &force, 1, &left);
    RS_CHECK(left == n && l[low] == base[low] + 100.0f);
    RS_CHECK(sample(smp, l, n, 0.0f, 0) == low);
    for (uint64_t k = 0; k < 300; k++)
        RS_CHECK(sample(smp, l, n, 1.0f, k) == low);
    /* a mask wins over a forcing bias */
    uint32_t *mask = calloc((n + 31) / 32, sizeof(uint32_t));
    for (uint32_t i = 0; i < n; i += 3)
        mask[i >> 5] |= 1u << (i & 31);
    mask[low >> 5] &= ~(1u << (low & 31));
    memcpy(l, base, n * sizeof(float));
    rs_mask_apply(l, n, mask, &force, 1, &left);
    RS_CHECK(l[low] == -INFINITY);
    int32_t t = sample(smp, l, n, 1.0f, 3);
    RS_CHECK(t != low && t % 3 == 0);
    free(mask);
    free(base);
    free(l);
    rs_sampler_destroy(&smp);
    return 0;
}

/* Every logit is either its own plus its bias, or -INFINITY where the mask or a ban says. */
static int test_apply_is_exact_for_odd_vocab_sizes(void)
{
    static const uint32_t sizes[] = {1, 31, 32, 33, 512, 50257, 65024};
    uint64_t s = 7;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        uint32_t n = sizes[k], nw = (n + 31) / 32;
        float *base = malloc(n * sizeof(float)), *l = malloc(n * sizeof(float));
        uint32_t *mask = malloc(nw * sizeof(uint32_t));
        random_logits(base, n, &s);
        for (uint32_t w = 0; w < nw; w++) /* all-ones, all-zero and mixed words */
            mask[w] = w % 3 == 0 ? UINT32_MAX : w % 3 == 1 ? 0 : (uint32_t)rnd(&s);
        struct rs_logit_bias b[3] = {{0, -100.0f}, {(int32_t)(n - 1), 2.5f}, {(int32_t)(n / 2), -3}};
        memcpy(l, base, n * sizeof(float));
        uint32_t left;
        rs_mask_apply(l, n, mask, b, 3, &left);
        uint32_t count = 0;
        for (uint32_t i = 0; i < n; i++) {
            int allowed = (mask[i >> 5] >> (i & 31)) & 1;
            float want = allowed ? base[i] : -INFINITY;
            for (int j = 0; j < 3; j++) /* biases in list order, after the mask */
                if ((uint32_t)b[j].token == i && want != -INFINITY)
                    want = b[j].bias <= -100.0f ? -INFINITY : want + b[j].bias;
            RS_CHECK_MSG(l[i] == want, "n %u token %u: %g, want %g", n, i, l[i], want);
            count += l[i] != -INFINITY;
        }
        RS_CHECK_MSG(left == count, "n %u: allowed %u, counted %u", n, left, count);
        free(base);
        free(l);
        free(mask);
    }
    return 0;
}

/* An allowed-token-ids list confines sampling; ANDed with another mask it intersects. */
static int test_allowed_ids_confine_sampling(void)
{
    const uint32_t n = 50257, nw = (n + 31) / 32;
    const int32_t ids[] = {5, 77, 1000, 50256, 31};
    uint32_t *row = malloc(nw * 4), *other = malloc(nw * 4);
    char err[256];
    RS_CHECK(rs_mask_from_ids(row, nw, n, ids, 5, err, sizeof(err)) == RS_OK);
    float *base = malloc(n * sizeof(float)), *l = malloc(n * sizeof(float));
    uint64_t s = 3;
    random_logits(base, n, &s);
    rs_sampler *smp;
    RS_CHECK(rs_sampler_create((int32_t)n, &smp) == RS_OK);
    for (uint64_t k = 0; k < 200; k++) {
        memcpy(l, base, n * sizeof(float));
        uint32_t left;
        rs_mask_apply(l, n, row, NULL, 0, &left);
        RS_CHECK(left == 5);
        int32_t t = sample(smp, l, n, 1.0f, k);
        RS_CHECK(t == 5 || t == 77 || t == 1000 || t == 50256 || t == 31);
    }
    memset(other, 0, nw * 4);
    other[1000 >> 5] |= 1u << (1000 & 31);
    other[6 >> 5] |= 1u << (6 & 31);
    rs_mask_and(other, row, nw);
    memcpy(l, base, n * sizeof(float));
    uint32_t left;
    rs_mask_apply(l, n, other, NULL, 0, &left);
    RS_CHECK(left == 1 && sample(smp, l, n, 1.0f, 0) == 1000);
    /* nothing left: the count says so */
    memset(other, 0, nw * 4);
    rs_mask_apply(l, n, other, NULL, 0, &left);
    RS_CHECK(left == 0);
    rs_sampler_destroy(&smp);
    free(base);
    free(l);
    free(row);
    free(other);
    return 0;
}

static int test_bad_lists_refused_by_entry(void)
{
    char err[256];
    uint32_t row[4];
    const int32_t bad_ids[] = {3, 128};
    RS_CHECK(rs_mask_from_ids(row, 4, 128, bad_ids, 2, err, sizeof(err)) == RS_EINVAL);
    RS_CHECK(strstr(err, "id 128 (entry 1)") != NULL);
    RS_CHECK(rs_mask_from_ids(row, 3, 128, bad_ids, 1, err, sizeof(err)) == RS_EINVAL);
    struct rs_logit_bias b[] = {{1, 5.0f}, {2, NAN}};
    RS_CHECK(rs_logit_bias_validate(b, 2, 10, err, sizeof(err)) == RS_EINVAL);
    RS_CHECK(strstr(err, "entry 1") != NULL);
    b[1] = (struct rs_logit_bias){2, 100.5f};
    RS_CHECK(rs_logit_bias_validate(b, 2, 10, err, sizeof(err)) == RS_EINVAL);
    b[1] = (struct rs_logit_bias){-1, 1.0f};
    RS_CHECK(rs_logit_bias_validate(b, 2, 10, err, sizeof(err)) == RS_EINVAL);
    RS_CHECK(strstr(err, "token -1") != NULL);
    b[1] = (struct rs_logit_bias){9, -100.0f};
    RS_CHECK(rs_logit_bias_validate(b, 2, 10, err, sizeof(err)) == RS_OK);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_bias_minus_100_bans_plus_100_forces),
    RS_TEST(test_apply_is_exact_for_odd_vocab_sizes),
    RS_TEST(test_allowed_ids_confine_sampling),
    RS_TEST(test_bad_lists_refused_by_entry),
};

RS_TEST_MAIN(cases)

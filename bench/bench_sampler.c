/* SPDX-License-Identifier: MIT */
/*
 * Sampler cost per token for common vocab sizes and parameter sets, next to
 * the floor every sampler pays: one expf pass over the vocab (the log-softmax
 * normaliser that the reported logprob needs), measured in the same run.
 * Logits are N(0, 3^2) (peaked like a language model's) or flat (the top-p
 * worst case, where the nucleus holds most of the vocab).
 * Usage: bench_sampler [ITERATIONS]   (default 200 per configuration)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "launcherd/engine/sampler.h"
#include "common/opt.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x853c49e6748fea9bull;

static double gauss(void)
{
    double u[2];
    for (int i = 0; i < 2; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        u[i] = ((double)(rng >> 11) + 0.5) * 0x1p-53;
    }
    return sqrt(-2 * log(u[0])) * cos(2 * M_PI * u[1]);
}

struct config {
    const char *name;
    float temp, top_p, min_p, rep;
    int32_t top_k, n_logprobs, flat;
};

static const struct config configs[] = {
    {"greedy", 0, 1, 0, 1, 0, 0, 0},
    {"greedy + 20 logprobs", 0, 1, 0, 1, 0, 20, 0},
    {"temp 0.8", 0.8f, 1, 0, 1, 0, 0, 0},
    {"top-k 40", 0.8f, 1, 0, 1, 40, 0, 0},
    {"top-p 0.95", 0.8f, 0.95f, 0, 1, 0, 0, 0},
    {"top-p 0.95, flat logits", 1.0f, 0.95f, 0, 1, 0, 0, 1},
    {"k 40 p 0.9 min-p 0.05 rep 1.1, 512 hist", 0.8f, 0.9f, 0.05f, 1.1f, 40, 5, 0},
};

/* Median of `iters` timings of fn over fresh copies of the logits. */
static double time_config(rs_sampler *s, const struct config *c, const float *src, float *work,
                          int32_t n, int iters, const int32_t *hist)
{
    struct rs_sampling_params p;
    struct rs_sample_result r;
    rs_sampling_params_default(&p);
    p.temperature = c->temp, p.top_p = c->top_p, p.min_p = c->min_p;
    p.repetition_penalty = c->rep, p.top_k = c->top_k, p.n_logprobs = c->n_logprobs;
    double *t = malloc((size_t)iters * sizeof(double));
    for (int i = 0; i < iters; i++) {
        memcpy(work, src, (size_t)n * sizeof(float));
        double t0 = now();
        if (rs_sampler_sample(s, &p, work, hist, c->rep != 1 ? 512 : 0, 0, (uint64_t)i, &r) != 0)
            return -1;
        t[i] = now() - t0;
    }
    for (int i = 1; i < iters; i++) /* insertion sort: iters is small */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    double med = t[iters / 2];
    free(t);
    return med;
}

static double expf_pass(const float *l, int32_t n, int iters)
{
    volatile double sink = 0;
    double best = 1e9;
    for (int i = 0; i < iters; i++) {
        double t0 = now(), sum = 0;
        for (int32_t j = 0; j < n; j++)
            sum += expf(l[j] - 10.0f);
        sink += sum;
        double dt = now() - t0;
        best = dt < best ? dt : best;
    }
    (void)sink;
    return best;
}

int main(int argc, char **argv)
{
    int first, code = rs_opt_main("bench_sampler",
                                  "usage: bench_sampler [ITERATIONS >= 1]\n"
                                  "Sampler cost per token.\n",
                                  NULL, 0, argc, argv, RS_OPT_OPERANDS, &first);
    if (code >= 0)
        return code;
    argv += first - 1, argc -= first - 1; /* the operands are argv[1..] as before */
    int iters = argc > 1 ? atoi(argv[1]) : 200;
    if (iters < 1) {
        fprintf(stderr, "usage: bench_sampler [ITERATIONS >= 1]\n");
        return 2;
    }
    const int32_t vocabs[] = {32000, 128256, 256000};
    int32_t hist[512];
    for (int i = 0; i < 512; i++)
        hist[i] = (i * 7919) % 32000;
    for (size_t v = 0; v < 3; v++) {
        int32_t n = vocabs[v];
        float *peaked = malloc((size_t)n * 4), *flat = malloc((size_t)n * 4),
              *work = malloc((size_t)n * 4);
        rs_sampler *s;
        if (!peaked || !flat || !work || rs_sampler_create(n, &s) != 0)
            return 1;
        for (int32_t i = 0; i < n; i++) {
            peaked[i] = (float)(3 * gauss());
            flat[i] = (float)(0.05 * gauss());
        }
        double floor = expf_pass(peaked, n, iters);
        printf("vocab %d: one expf pass over the vocab (floor) %.1f us\n", n, floor * 1e6);
        for (size_t c = 0; c < sizeof(configs) / sizeof(configs[0]); c++) {
            double t = time_config(s, &configs[c], configs[c].flat ? flat : peaked, work, n,
                                   iters, hist);
            printf("  %-42s %8.1f us/token  %5.2fx floor\n", configs[c].name, t * 1e6,
                   t / floor);
        }
        rs_sampler_destroy(&s);
        free(peaked);
        free(flat);
        free(work);
    }
    return 0;
}

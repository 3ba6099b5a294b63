/* SPDX-License-Identifier: MIT */
/*
 * Row conversion throughput of common/quant.c: dequantize (F16, BF16, Q8_0
 * -> F32) and quantize (F32 -> each), in F32 values per second and output
 * GB/s, over a buffer far larger than the caches, next to memcpy of the same
 * F32 bytes measured in the same run (the streaming limit a dequantizer that
 * writes F32 can approach). Also the same rows when they are cache resident
 * (one 4096-value row, as in an embedding lookup).
 * Usage: bench_quant [MIB_OF_F32]   (default 256)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/quant.h"
#include "common/opt.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Best of `reps` runs of converting n values, in seconds. */
static double best_of(int reps, enum rs_ggml_type t, int to_f32, const void *q, float *f,
                      size_t n, size_t row)
{
    double best = 1e9;
    size_t rb = rs_ggml_row_bytes(t, row);
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        for (size_t i = 0; i < n; i += row) {
            if (to_f32)
                rs_quant_row_to_f32(t, (const char *)q + i / row * rb, f + i, row);
            else
                rs_quant_row_from_f32(t, f + i, (char *)q + i / row * rb, row);
        }
        double dt = now() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    int first, code = rs_opt_main("bench_quant",
                                  "usage: bench_quant [MIB_OF_F32 in 1..16384]\n"
                                  "Dequantization throughput against memcpy.\n",
                                  NULL, 0, argc, argv, RS_OPT_OPERANDS, &first);
    if (code >= 0)
        return code;
    argv += first - 1, argc -= first - 1; /* the operands are argv[1..] as before */
    long mib = argc > 1 ? atol(argv[1]) : 256;
    if (mib < 1 || mib > 16384) {
        fprintf(stderr, "usage: bench_quant [MIB_OF_F32 in 1..16384]\n");
        return 2;
    }
    const size_t row = 4096, n = (size_t)mib * 1024 * 1024 / 4 / row * row;
    float *f = malloc(n * 4), *g = malloc(n * 4);
    void *q = malloc(n * 2 + n / 32 * 34);
    if (!f || !g || !q)
        return 1;
    for (size_t i = 0; i < n; i++)
        f[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    memcpy(g, f, n * 4); /* touch every page once */
    double tm = 1e9;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        memcpy(g, f, n * 4);
        double dt = now() - t0;
        tm = dt < tm ? dt : tm;
    }
    printf("%zu F32 values (%.0f MiB); memcpy of that many F32 bytes: %.2f GB/s\n", n,
           n * 4.0 / 1048576, n * 4.0 / tm / 1e9);
    const enum rs_ggml_type types[] = {RS_GGML_F16, RS_GGML_BF16, RS_GGML_Q8_0};
    for (size_t k = 0; k < 3; k++) {
        enum rs_ggml_type t = types[k];
        double tq = best_of(3, t, 0, q, f, n, row);
        double td = best_of(5, t, 1, q, g, n, row);
        double tc = best_of(2000, t, 1, q, g, row, row);
        printf("  %-5s quantize %6.0f M/s | dequantize %6.0f M/s = %5.2f GB/s F32 out, "
               "%.2fx memcpy | one cached row %6.0f M/s\n",
               rs_ggml_type_name(t), n / tq / 1e6, n / td / 1e6, n * 4.0 / td / 1e9, tm / td,
               row / tc / 1e6);
    }
    free(f);
    free(g);
    free(q);
    return 0;
}

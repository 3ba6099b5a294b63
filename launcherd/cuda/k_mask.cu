/* SPDX-License-Identifier: MIT */
/*
 * Structured-output masks on the device: token mask rows (32-bit words, bit
 * t & 31 of word t >> 5 allows token t, the mask ring's layout,
 * ipc/pipeline_mask.h) and logit_bias lists applied to rows of logits before
 * sampling, with exactly the CPU's results (common/mask_apply.c): disallowed
 * tokens become -INFINITY, each bias is added in list order (one thread per
 * row walks its list, so a token listed twice gets both, as on the CPU),
 * skipping tokens already removed; a bias of -100 or less removes the token.
 */
#include <math.h>
#include <stdint.h>

#include "launcherd/cuda/cuda_impl.h"

#define MASK_THREADS 256

__global__ void mask_rows_k(float *logits, uint32_t n_vocab, const uint32_t *masks,
                            size_t stride_words, const uint32_t *rows_with_mask)
{
    uint32_t r = blockIdx.y;
    if (!rows_with_mask[r])
        return;
    const uint32_t *m = masks + (size_t)r * stride_words;
    float *l = logits + (size_t)r * n_vocab;
    for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < n_vocab;
         t += gridDim.x * blockDim.x)
        if (!((m[t >> 5] >> (t & 31)) & 1u))
            l[t] = -INFINITY;
}

__global__ void bias_rows_k(float *logits, uint32_t n_vocab, const int32_t *tok,
                            const float *bias, const uint32_t *off)
{
    uint32_t r = blockIdx.x;
    float *l = logits + (size_t)r * n_vocab;
    for (uint32_t i = off[r]; i < off[r + 1]; i++) {
        uint32_t t = (uint32_t)tok[i];
        if (t >= n_vocab || l[t] == -INFINITY)
            continue;
        l[t] = bias[i] <= -100.0f ? -INFINITY : __fadd_rn(l[t], bias[i]);
    }
}

extern "C" cudaError_t cu_mask_apply(float *logits, uint32_t n_rows, uint32_t n_vocab,
                                     const uint32_t *masks, size_t stride_words,
                                     const uint32_t *rows_with_mask, const int32_t *bias_tok,
                                     const float *bias_val, const uint32_t *bias_off,
                                     cudaStream_t s)
{
    if (n_rows == 0)
        return cudaSuccess;
    unsigned gx = (n_vocab + MASK_THREADS - 1) / MASK_THREADS;
    dim3 grid(gx < 64 ? gx : 64, n_rows);
    mask_rows_k<<<grid, MASK_THREADS, 0, s>>>(logits, n_vocab, masks, stride_words,
                                              rows_with_mask);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    bias_rows_k<<<n_rows, 1, 0, s>>>(logits, n_vocab, bias_tok, bias_val, bias_off);
    return cudaGetLastError();
}

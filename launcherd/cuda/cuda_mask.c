/* SPDX-License-Identifier: MIT */
/*
 * rs_cuda_mask_apply (cuda_mask.h): one host-to-device copy of the rows
 * that carry a mask, the bias lists flattened with per-row offsets, the two
 * kernels of k_mask.cu, one copy back. Device buffers live for the call.
 */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "launcherd/cuda/cuda_impl.h"
#include "launcherd/cuda/cuda_mask.h"

struct mask_bufs {
    float *logits;
    uint32_t *masks, *with, *off;
    int32_t *tok;
    float *val;
};

static void bufs_free(struct mask_bufs *d)
{
    cudaFree(d->logits);
    cudaFree(d->masks);
    cudaFree(d->with);
    cudaFree(d->off);
    cudaFree(d->tok);
    cudaFree(d->val);
}

/* Host staging: mask rows packed (absent rows zero), row flags, flattened biases. */
static rs_err stage(uint32_t n_rows, const uint32_t *const *masks, size_t stride,
                    const struct rs_logit_bias *const *bias, const uint32_t *n_bias,
                    uint32_t *hm, uint32_t *hw, uint32_t *ho, int32_t *ht, float *hv)
{
    uint32_t k = 0;
    for (uint32_t r = 0; r < n_rows; r++) {
        hw[r] = masks[r] != NULL;
        if (masks[r] != NULL)
            memcpy(hm + (size_t)r * stride, masks[r], stride * 4);
        ho[r] = k;
        for (uint32_t i = 0; i < n_bias[r]; i++, k++) {
            ht[k] = bias[r][i].token;
            hv[k] = bias[r][i].bias;
        }
    }
    ho[n_rows] = k;
    return RS_OK;
}

static rs_err run(float *logits, uint32_t n_rows, uint32_t n_vocab, size_t stride,
                  const uint32_t *hm, const uint32_t *hw, const uint32_t *ho, const int32_t *ht,
                  const float *hv, uint32_t nb, struct mask_bufs *d)
{
    size_t lb = (size_t)n_rows * n_vocab * 4, mb = (size_t)n_rows * stride * 4;
    RS_CUDA_CHECK(cudaMalloc((void **)&d->logits, lb));
    RS_CUDA_CHECK(cudaMalloc((void **)&d->masks, mb));
    RS_CUDA_CHECK(cudaMalloc((void **)&d->with, n_rows * 4u));
    RS_CUDA_CHECK(cudaMalloc((void **)&d->off, (n_rows + 1u) * 4u));
    RS_CUDA_CHECK(cudaMalloc((void **)&d->tok, (nb + 1u) * 4u));
    RS_CUDA_CHECK(cudaMalloc((void **)&d->val, (nb + 1u) * 4u));
    RS_CUDA_CHECK(cudaMemcpy(d->logits, logits, lb, cudaMemcpyHostToDevice));
    RS_CUDA_CHECK(cudaMemcpy(d->masks, hm, mb, cudaMemcpyHostToDevice));
    RS_CUDA_CHECK(cudaMemcpy(d->with, hw, n_rows * 4u, cudaMemcpyHostToDevice));
    RS_CUDA_CHECK(cudaMemcpy(d->off, ho, (n_rows + 1u) * 4u, cudaMemcpyHostToDevice));
    RS_CUDA_CHECK(cudaMemcpy(d->tok, ht, (nb + 1u) * 4u, cudaMemcpyHostToDevice));
    RS_CUDA_CHECK(cudaMemcpy(d->val, hv, (nb + 1u) * 4u, cudaMemcpyHostToDevice));
    RS_CUDA_CHECK(cu_mask_apply(d->logits, n_rows, n_vocab, d->masks, stride, d->with, d->tok,
                                d->val, d->off, 0));
    RS_CUDA_CHECK(cudaMemcpy(logits, d->logits, lb, cudaMemcpyDeviceToHost));
    return RS_OK;
}

rs_err rs_cuda_mask_apply(float *logits, uint32_t n_rows, uint32_t n_vocab,
                          const uint32_t *const *masks, size_t stride_words,
                          const struct rs_logit_bias *const *bias, const uint32_t *n_bias)
{
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0)
        return RS_EDEVICE;
    uint32_t nb = 0;
    for (uint32_t r = 0; r < n_rows; r++)
        nb += n_bias[r];
    uint32_t *hm = calloc((size_t)n_rows * stride_words + 1, 4), *hw = calloc(n_rows + 1u, 4);
    uint32_t *ho = calloc(n_rows + 1u, 4);
    int32_t *ht = calloc(nb + 1u, 4);
    float *hv = calloc(nb + 1u, 4);
    rs_err rc = hm && hw && ho && ht && hv ? RS_OK : RS_ENOMEM;
    if (rc == RS_OK)
        rc = stage(n_rows, masks, stride_words, bias, n_bias, hm, hw, ho, ht, hv);
    struct mask_bufs d;
    memset(&d, 0, sizeof(d));
    if (rc == RS_OK)
        rc = run(logits, n_rows, n_vocab, stride_words, hm, hw, ho, ht, hv, nb, &d);
    bufs_free(&d);
    free(hm);
    free(hw);
    free(ho);
    free(ht);
    free(hv);
    return rc;
}

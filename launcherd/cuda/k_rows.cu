/* SPDX-License-Identifier: MIT */
/*
 * Row-local kernels of the forward pass, one thread block per row (or a
 * grid-stride loop for element-wise ops): embedding lookup, RMSNorm (sum of
 * squares in double, fixed reduction tree), RoPE (angles in double, rounded
 * once, as kern_rope_table), the paged KV store, SwiGLU, F32 -> F16/BF16
 * for cuBLAS inputs, and Q8_0 -> F32. Arithmetic that the CPU does without
 * FMA is written with explicit round-to-nearest intrinsics so nvcc cannot
 * contract it, keeping the two backends' results as close as possible.
 */
#include <math.h>

#include "launcherd/cuda/k_common.cuh"

#define ROW_THREADS 256

static unsigned grid_for(size_t n, unsigned threads)
{
    size_t g = (n + threads - 1) / threads;
    return (unsigned)(g < 65535 * 16 ? (g > 0 ? g : 1) : 65535 * 16);
}

__global__ void embed_k(const uint8_t *e, size_t row_bytes, int type, uint32_t cols,
                        const int32_t *tok, float *x)
{
    uint32_t r = blockIdx.x;
    const uint8_t *row = e + (size_t)tok[r] * row_bytes;
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x)
        x[(size_t)r * cols + c] = cu_widen(type, row, c);
}

extern "C" cudaError_t cu_embed(const struct cu_mat *e, const struct cu_rows *r, float *x,
                                cudaStream_t s)
{
    embed_k<<<r->n_rows, ROW_THREADS, 0, s>>>((const uint8_t *)e->data, e->row_bytes, e->type,
                                              e->cols, r->tok, x);
    return cudaGetLastError();
}

__global__ void rmsnorm_k(const float *x, const float *w, uint32_t dim, float eps,
                          const uint32_t *rows, float *out)
{
    __shared__ double red[32];
    uint32_t r = blockIdx.x, src = rows != NULL ? rows[r] : r;
    const float *xr = x + (size_t)src * dim;
    double acc = 0.0;
    /* Unrolled so several loads are in flight (the same additions in the same order):
       one block per row is latency-bound at batch 1. */
#pragma unroll 8
    for (uint32_t c = threadIdx.x; c < dim; c += blockDim.x)
        acc += (double)xr[c] * (double)xr[c];
    double mean = cu_block_sum_d(acc, red) / dim;
    float scale = (float)(1.0 / sqrt(mean + (double)eps));
#pragma unroll 8
    for (uint32_t c = threadIdx.x; c < dim; c += blockDim.x)
        out[(size_t)r * dim + c] = __fmul_rn(w[c], __fmul_rn(xr[c], scale));
}

extern "C" cudaError_t cu_rmsnorm(const float *x, const float *w, uint32_t n_rows, uint32_t dim,
                                  float eps, const uint32_t *rows, float *out, cudaStream_t s)
{
    if (n_rows == 0)
        return cudaSuccess;
    rmsnorm_k<<<n_rows, ROW_THREADS, 0, s>>>(x, w, dim, eps, rows, out);
    return cudaGetLastError();
}

/* Rotates one adjacent pair by pair index j's angle for position p. */
__device__ __forceinline__ void rope_pair(float *x, uint32_t j, double p, uint32_t rope_dim,
                                          float base, const float *ff)
{
    double theta = p * pow((double)base, -2.0 * (double)j / (double)rope_dim);
    if (ff != NULL)
        theta /= (double)ff[j];
    float co = (float)cos(theta), si = (float)sin(theta);
    float a = x[0], b = x[1];
    x[0] = __fsub_rn(__fmul_rn(a, co), __fmul_rn(b, si));
    x[1] = __fadd_rn(__fmul_rn(a, si), __fmul_rn(b, co));
}

__global__ void rope_k(float *q, float *k, const uint32_t *pos, uint32_t n_heads,
                       uint32_t n_kv_heads, uint32_t hd, uint32_t rope_dim, float base,
                       float pos_scale, const float *ff)
{
    uint32_t r = blockIdx.x, half = hd / 2, nq = n_heads * half, n = (n_heads + n_kv_heads) * half;
    double p = (double)pos[r] * (double)pos_scale;
    for (uint32_t t = blockIdx.y * blockDim.x + threadIdx.x; t < n; t += gridDim.y * blockDim.x) {
        int is_q = t < nq;
        uint32_t u = is_q ? t : t - nq, head = u / half, j = u % half;
        if (2 * j >= rope_dim)
            continue;
        float *row = is_q ? q + (size_t)r * n_heads * hd : k + (size_t)r * n_kv_heads * hd;
        rope_pair(row + (size_t)head * hd + 2 * j, j, p, rope_dim, base, ff);
    }
}

extern "C" cudaError_t cu_rope(float *q, float *k, const struct cu_rows *r, uint32_t n_heads,
                               uint32_t n_kv_heads, uint32_t head_dim, uint32_t rope_dim,
                               float base, float pos_scale, const float *freq_factors,
                               cudaStream_t s)
{
    /* A pair per thread: each pair's double pow/cos/sin is the cost, so a row gets
       several blocks (one block per row took 16 us at batch 1 on the 8B shape). */
    uint32_t pairs = (n_heads + n_kv_heads) * (head_dim / 2);
    dim3 grid(r->n_rows, (pairs + ROW_THREADS - 1) / ROW_THREADS);
    rope_k<<<grid, ROW_THREADS, 0, s>>>(q, k, r->pos, n_heads, n_kv_heads, head_dim, rope_dim, base,
                                        pos_scale, freq_factors);
    return cudaGetLastError();
}

__global__ void kv_store_k(const float *k, const float *v, const uint32_t *pos, const uint32_t *seq,
                           const uint32_t *tab_off, const uint32_t *tables, float *kc, float *vc,
                           size_t block_stride, uint32_t bs, uint32_t hd, uint32_t kvd)
{
    uint32_t r = blockIdx.x, p = pos[r];
    size_t blk = (size_t)tables[tab_off[seq[r]] + p / bs] * block_stride;
    for (uint32_t c = threadIdx.x; c < kvd; c += blockDim.x) {
        size_t off = blk + ((size_t)(c / hd) * bs + p % bs) * hd + c % hd;
        kc[off] = k[(size_t)r * kvd + c];
        vc[off] = v[(size_t)r * kvd + c];
    }
}

extern "C" cudaError_t cu_kv_store(const float *k, const float *v, const struct cu_rows *r,
                                   const struct cu_kv_layer *kv, cudaStream_t s)
{
    kv_store_k<<<r->n_rows, ROW_THREADS, 0, s>>>(k, v, r->pos, r->seq, r->tab_off, r->tables, kv->k,
                                                 kv->v, kv->block_stride, kv->block_size,
                                                 kv->head_dim, kv->n_kv_heads * kv->head_dim);
    return cudaGetLastError();
}

__global__ void swiglu_k(float *g, const float *u, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = g[i];
        g[i] = __fmul_rn(__fdiv_rn(v, __fadd_rn(1.0f, expf(-v))), u[i]);
    }
}

extern "C" cudaError_t cu_swiglu(float *g, const float *u, size_t n, cudaStream_t s)
{
    swiglu_k<<<grid_for(n, ROW_THREADS), ROW_THREADS, 0, s>>>(g, u, n);
    return cudaGetLastError();
}

__global__ void to_half_k(const float *src, void *dst, size_t n, int to_bf16)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (to_bf16)
            ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(src[i]);
        else
            ((__half *)dst)[i] = __float2half_rn(src[i]);
    }
}

extern "C" cudaError_t cu_to_half(const float *src, void *dst, size_t n, int to_bf16,
                                  cudaStream_t s)
{
    to_half_k<<<grid_for(n, ROW_THREADS), ROW_THREADS, 0, s>>>(src, dst, n, to_bf16);
    return cudaGetLastError();
}

__global__ void q8_to_f32_k(const uint8_t *w, size_t row_bytes, uint32_t cols, size_t n, float *dst)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = cu_widen(CU_T_Q8_0, w + (i / cols) * row_bytes, (uint32_t)(i % cols));
}

extern "C" cudaError_t cu_q8_0_to_f32(const struct cu_mat *w, float *dst, cudaStream_t s)
{
    size_t n = (size_t)w->rows * w->cols;
    q8_to_f32_k<<<grid_for(n, ROW_THREADS), ROW_THREADS, 0, s>>>((const uint8_t *)w->data,
                                                                 w->row_bytes, w->cols, n, dst);
    return cudaGetLastError();
}

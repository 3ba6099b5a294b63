/* SPDX-License-Identifier: MIT */
/*
 * Row-local kernels of the forward pass, one thread block per row (or per
 * (row, head), or a grid-stride loop for element-wise ops): embedding lookup
 * (with the gemma scale), RMSNorm (sum of squares in double, fixed reduction
 * tree; also added into the residual for post norms), the Q/K finishing step
 * (biases, per-head RMSNorm, RoPE in both pairings with angles in double,
 * rounded once, as kern_rope_table), the paged KV store, SwiGLU, GeGLU, the
 * logit soft-cap, F32 -> F16/BF16 for cuBLAS inputs, and Q8_0 -> F32. Arithmetic that the CPU does without
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
                        const int32_t *tok, float scale, float *x)
{
    uint32_t r = blockIdx.x;
    const uint8_t *row = e + (size_t)tok[r] * row_bytes;
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = cu_widen(type, row, c);
        x[(size_t)r * cols + c] = scale != 1.0f ? __fmul_rn(v, scale) : v;
    }
}

extern "C" cudaError_t cu_embed(const struct cu_mat *e, const struct cu_rows *r, float scale,
                                float *x, cudaStream_t s)
{
    embed_k<<<r->n_rows, ROW_THREADS, 0, s>>>((const uint8_t *)e->data, e->row_bytes, e->type,
                                              e->cols, r->tok, scale, x);
    return cudaGetLastError();
}

/* out[r] (+)= w * x[src] * scale, scale from x[src]'s mean square; add: into the residual. */
__global__ void rmsnorm_k(const float *x, const float *w, uint32_t dim, float eps,
                          const uint32_t *rows, int add, float *out)
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
    for (uint32_t c = threadIdx.x; c < dim; c += blockDim.x) {
        float v = __fmul_rn(w[c], __fmul_rn(xr[c], scale));
        float *o = out + (size_t)r * dim + c;
        *o = add ? __fadd_rn(*o, v) : v;
    }
}

extern "C" cudaError_t cu_rmsnorm(const float *x, const float *w, uint32_t n_rows, uint32_t dim,
                                  float eps, const uint32_t *rows, float *out, cudaStream_t s)
{
    if (n_rows == 0)
        return cudaSuccess;
    rmsnorm_k<<<n_rows, ROW_THREADS, 0, s>>>(x, w, dim, eps, rows, 0, out);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_rmsnorm_add(const float *t, const float *w, uint32_t n_rows,
                                      uint32_t dim, float eps, float *x, cudaStream_t s)
{
    if (n_rows == 0)
        return cudaSuccess;
    rmsnorm_k<<<n_rows, ROW_THREADS, 0, s>>>(t, w, dim, eps, NULL, 1, x);
    return cudaGetLastError();
}

#define QK_THREADS 128

/* Rotates the pair (x0, x1) by pair index j's angle for position p. */
__device__ __forceinline__ void rope_pair(float *x0, float *x1, uint32_t j, double p,
                                          uint32_t rope_dim, float base, const float *ff)
{
    double theta = p * pow((double)base, -2.0 * (double)j / (double)rope_dim);
    if (ff != NULL)
        theta /= (double)ff[j];
    float co = (float)cos(theta), si = (float)sin(theta);
    float a = *x0, b = *x1;
    *x0 = __fsub_rn(__fmul_rn(a, co), __fmul_rn(b, si));
    *x1 = __fadd_rn(__fmul_rn(a, si), __fmul_rn(b, co));
}

/* One block per (row, head) over the Q heads then the K heads: bias, norm, RoPE in shared memory. */
__global__ void qk_finish_k(float *q, float *k, float *v, const uint32_t *pos, struct cu_qk a)
{
    extern __shared__ float hs[];
    __shared__ double red[32];
    uint32_t r = blockIdx.x, h = blockIdx.y, hd = a.head_dim, is_q = h < a.n_heads;
    uint32_t hh = is_q ? h : h - a.n_heads, nh = is_q ? a.n_heads : a.n_kv_heads;
    float *x = (is_q ? q : k) + ((size_t)r * nh + hh) * hd;
    const float *b = is_q ? a.bq : a.bk, *nw = is_q ? a.q_norm : a.k_norm;
    double acc = 0.0;
    for (uint32_t c = threadIdx.x; c < hd; c += blockDim.x) {
        float e = b != NULL ? __fadd_rn(x[c], b[(size_t)hh * hd + c]) : x[c];
        hs[c] = e;
        acc += (double)e * (double)e;
    }
    if (!is_q && a.bv != NULL) {
        float *vr = v + ((size_t)r * a.n_kv_heads + hh) * hd;
        for (uint32_t c = threadIdx.x; c < hd; c += blockDim.x)
            vr[c] = __fadd_rn(vr[c], a.bv[(size_t)hh * hd + c]);
    }
    if (nw != NULL) { /* the same for every thread of the block: the reduction is safe */
        float sc = (float)(1.0 / sqrt(cu_block_sum_d(acc, red) / hd + (double)a.eps));
        for (uint32_t c = threadIdx.x; c < hd; c += blockDim.x)
            hs[c] = __fmul_rn(nw[c], __fmul_rn(hs[c], sc));
    }
    __syncthreads();
    uint32_t half = a.rope_dim / 2;
    double p = (double)pos[r] * (double)a.pos_scale;
    for (uint32_t j = threadIdx.x; j < half; j += blockDim.x) {
        uint32_t i0 = a.neox ? j : 2 * j, i1 = a.neox ? j + half : 2 * j + 1;
        rope_pair(&hs[i0], &hs[i1], j, p, a.rope_dim, a.base, a.ff);
    }
    __syncthreads();
    for (uint32_t c = threadIdx.x; c < hd; c += blockDim.x)
        x[c] = hs[c];
}

extern "C" cudaError_t cu_qk_finish(float *q, float *k, float *v, const struct cu_rows *r,
                                    const struct cu_qk *a, cudaStream_t s)
{
    if (r->n_rows == 0)
        return cudaSuccess;
    dim3 grid(r->n_rows, a->n_heads + a->n_kv_heads);
    qk_finish_k<<<grid, QK_THREADS, a->head_dim * sizeof(float), s>>>(q, k, v, r->pos, *a);
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

__global__ void geglu_k(float *g, const float *u, size_t n)
{
    const float c = 0.79788456080286535588f, a = 0.044715f; /* sqrt(2/pi), the cubic term */
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = g[i];
        float in = __fmul_rn(__fmul_rn(c, x), __fadd_rn(1.0f, __fmul_rn(__fmul_rn(a, x), x)));
        g[i] = __fmul_rn(__fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanhf(in))), u[i]);
    }
}

extern "C" cudaError_t cu_geglu(float *g, const float *u, size_t n, cudaStream_t s)
{
    geglu_k<<<grid_for(n, ROW_THREADS), ROW_THREADS, 0, s>>>(g, u, n);
    return cudaGetLastError();
}

__global__ void softcap_k(float *x, size_t n, float cap)
{
    float inv = 1.0f / cap;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = __fmul_rn(cap, tanhf(__fmul_rn(x[i], inv)));
}

extern "C" cudaError_t cu_softcap(float *x, size_t n, float cap, cudaStream_t s)
{
    softcap_k<<<grid_for(n, ROW_THREADS), ROW_THREADS, 0, s>>>(x, n, cap);
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

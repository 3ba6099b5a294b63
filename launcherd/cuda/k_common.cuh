/* SPDX-License-Identifier: MIT */
/*
 * Device functions shared by the kernels: widening one weight element of any
 * supported type to F32 (exact for F16, BF16 and Q8_0, as on the CPU), and
 * block reductions with a fixed order (a warp's xor-shuffle tree, then the
 * warps' partials in warp order), so a result never depends on timing.
 */
#ifndef RS_CUDA_K_COMMON_CUH
#define RS_CUDA_K_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "launcherd/cuda/cuda_impl.h"

#define CU_Q8_BLOCK 32
#define CU_Q8_BYTES 34

__device__ __forceinline__ float cu_bf16_f32(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

__device__ __forceinline__ float cu_f16_f32(uint16_t h)
{
    return __half2float(__ushort_as_half(h));
}

/* Element c of a row of `type` starting at p (Q8_0: d * q, exact in F32). */
__device__ __forceinline__ float cu_widen(int type, const uint8_t *p, uint32_t c)
{
    switch (type) {
    case CU_T_F32:
        return ((const float *)p)[c];
    case CU_T_F16:
        return cu_f16_f32(((const uint16_t *)p)[c]);
    case CU_T_BF16:
        return cu_bf16_f32(((const uint16_t *)p)[c]);
    default: { /* CU_T_Q8_0: blocks of a 2-byte half scale and 32 int8 */
        const uint8_t *b = p + (size_t)(c / CU_Q8_BLOCK) * CU_Q8_BYTES;
        uint16_t d = (uint16_t)(b[0] | (b[1] << 8));
        return __fmul_rn(cu_f16_f32(d), (float)(int8_t)b[2 + c % CU_Q8_BLOCK]);
    }
    }
}

__device__ __forceinline__ float cu_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double cu_warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float cu_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/*
 * Block-wide sum / max for blockDim.x a multiple of 32 (at most 1024);
 * every thread gets the result. red: 32 floats (or doubles) of shared memory.
 * Contains __syncthreads: call from every thread.
 */
__device__ __forceinline__ float cu_block_sum(float v, float *red)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_sum(v);
    __syncthreads(); /* red may still be read from a previous call */
    if (lane == 0)
        red[w] = v;
    __syncthreads();
    float t = 0.0f;
    for (int i = 0; i < nw; i++)
        t += red[i];
    return t;
}

__device__ __forceinline__ double cu_block_sum_d(double v, double *red)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_sum_d(v);
    __syncthreads();
    if (lane == 0)
        red[w] = v;
    __syncthreads();
    double t = 0.0;
    for (int i = 0; i < nw; i++)
        t += red[i];
    return t;
}

__device__ __forceinline__ float cu_block_max(float v, float *red)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_max(v);
    __syncthreads();
    if (lane == 0)
        red[w] = v;
    __syncthreads();
    float t = red[0];
    for (int i = 1; i < nw; i++)
        t = fmaxf(t, red[i]);
    return t;
}

#endif

/* SPDX-License-Identifier: MIT */
/*
 * Matrix times a few activation rows, one warp per output feature: the
 * decode GEMM (bandwidth-bound: each weight row is read once for up to 8
 * rows) and, in deterministic mode, every GEMM. Lane j handles the 8-value
 * groups j, j+32, ... of the row in increasing order with FMA into one
 * accumulator per activation row; the 32 lane sums are combined by the
 * xor-shuffle tree. That order depends only on the row length, so a row's
 * result is the same bits whatever else is in the batch (batch invariant),
 * and activations stay F32 (no rounding to the weight type).
 * Leaves out: tensor cores (large batches go to cuBLAS unless deterministic).
 */
#include "launcherd/cuda/k_common.cuh"

#define G_WARPS 8 /* output features per block */
#define G_ROWS 8  /* activation rows per pass */

/* The 8 weights at k0 (k0 % 8 == 0) of row p; vec: 16-byte loads allowed. */
template <int T>
__device__ __forceinline__ void load8(const uint8_t *p, uint32_t k0, uint32_t K, bool vec, float *w)
{
    if constexpr (T == CU_T_Q8_0) { /* K is whole blocks; the 8 values share one scale */
        const uint8_t *b = p + (size_t)(k0 / CU_Q8_BLOCK) * CU_Q8_BYTES;
        float d = cu_f16_f32((uint16_t)(b[0] | (b[1] << 8)));
        for (int i = 0; i < 8; i++)
            w[i] = __fmul_rn(d, (float)(int8_t)b[2 + k0 % CU_Q8_BLOCK + i]);
    } else if (vec && k0 + 8 <= K) {
        if constexpr (T == CU_T_F32) {
            float4 a = ((const float4 *)p)[k0 / 4], b = ((const float4 *)p)[k0 / 4 + 1];
            w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
            w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
        } else {
            uint4 u = ((const uint4 *)p)[k0 / 8];
            uint32_t v[4] = {u.x, u.y, u.z, u.w};
            for (int i = 0; i < 4; i++) {
                uint16_t lo = (uint16_t)(v[i] & 0xffffu), hi = (uint16_t)(v[i] >> 16);
                w[2 * i] = T == CU_T_F16 ? cu_f16_f32(lo) : cu_bf16_f32(lo);
                w[2 * i + 1] = T == CU_T_F16 ? cu_f16_f32(hi) : cu_bf16_f32(hi);
            }
        }
    } else {
        for (int i = 0; i < 8; i++)
            w[i] = k0 + i < K ? cu_widen(T, p, k0 + i) : 0.0f;
    }
}

/* 8 weights of a 16-byte-aligned group as loaded: two float4 (F32) or one uint4 (16-bit). */
template <int T> struct raw8 {
    uint4 u;
};
template <> struct raw8<CU_T_F32> {
    float4 a, b;
};

template <int T>
__device__ __forceinline__ raw8<T> fetch8(const uint8_t *p, uint32_t k0)
{
    raw8<T> r;
    if constexpr (T == CU_T_F32) {
        r.a = __ldg((const float4 *)p + k0 / 4);
        r.b = __ldg((const float4 *)p + k0 / 4 + 1);
    } else {
        r.u = __ldg((const uint4 *)p + k0 / 8);
    }
    return r;
}

template <int T>
__device__ __forceinline__ void widen8(const raw8<T> &r, float *w)
{
    if constexpr (T == CU_T_F32) {
        w[0] = r.a.x, w[1] = r.a.y, w[2] = r.a.z, w[3] = r.a.w;
        w[4] = r.b.x, w[5] = r.b.y, w[6] = r.b.z, w[7] = r.b.w;
    } else {
        uint32_t v[4] = {r.u.x, r.u.y, r.u.z, r.u.w};
        for (int i = 0; i < 4; i++) {
            uint16_t lo = (uint16_t)(v[i] & 0xffffu), hi = (uint16_t)(v[i] >> 16);
            w[2 * i] = T == CU_T_F16 ? cu_f16_f32(lo) : cu_bf16_f32(lo);
            w[2 * i + 1] = T == CU_T_F16 ? cu_f16_f32(hi) : cu_bf16_f32(hi);
        }
    }
}

/* sum[r] += the 8 weights w times row r's 8 activations at k0, in index order. */
template <int R>
__device__ __forceinline__ void fma8(const float *w, const float *x, size_t ldx, uint32_t k0,
                                     float *sum)
{
    for (int r = 0; r < R; r++) {
        const float *xr = x + (size_t)r * ldx + k0;
        float4 a = ((const float4 *)xr)[0], b = ((const float4 *)xr)[1];
        float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        for (int i = 0; i < 8; i++)
            sum[r] = fmaf(w[i], xv[i], sum[r]);
    }
}

/*
 * Groups in flight per lane on the aligned path. A decode GEMM is bound by
 * memory latency unless each lane has several 16-byte loads outstanding:
 * one at a time (the general loop below) ran the 8B model's K/V projections
 * at 14% of HBM bandwidth (ncu, tests/gpu/run.sh's profile phase).
 */
#define G_INFLIGHT 8

template <int T, int R>
__global__ void gemm_rows_k(const uint8_t *w, size_t row_bytes, uint32_t N, uint32_t K,
                            const float *x, size_t ldx, float *y, size_t ldy, int acc, bool vec)
{
    uint32_t n = blockIdx.x * G_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (n >= N)
        return;
    const uint8_t *wr = w + (size_t)n * row_bytes;
    float sum[R];
    for (int r = 0; r < R; r++)
        sum[r] = 0.0f;
    uint32_t k0 = lane * 8;
    if constexpr (T != CU_T_Q8_0) {
        /* The same groups in the same order as the loop below (so the same bits), but
           G_INFLIGHT loads started before the first is used. */
        if (vec) {
            for (; k0 + (G_INFLIGHT - 1) * 256 + 8 <= K; k0 += G_INFLIGHT * 256) {
                raw8<T> g[G_INFLIGHT];
#pragma unroll
                for (int u = 0; u < G_INFLIGHT; u++)
                    g[u] = fetch8<T>(wr, k0 + u * 256);
#pragma unroll
                for (int u = 0; u < G_INFLIGHT; u++) {
                    float wv[8];
                    widen8<T>(g[u], wv);
                    fma8<R>(wv, x, ldx, k0 + u * 256, sum);
                }
            }
        }
    }
    for (; k0 < K; k0 += 256) {
        float wv[8];
        load8<T>(wr, k0, K, vec, wv);
        for (int r = 0; r < R; r++) {
            const float *xr = x + (size_t)r * ldx + k0;
            float xv[8];
            if (vec && k0 + 8 <= K) {
                float4 a = ((const float4 *)xr)[0], b = ((const float4 *)xr)[1];
                xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w;
                xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
            } else {
                for (int i = 0; i < 8; i++)
                    xv[i] = k0 + i < K ? xr[i] : 0.0f;
            }
            for (int i = 0; i < 8; i++)
                sum[r] = fmaf(wv[i], xv[i], sum[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        float s = cu_warp_sum(sum[r]);
        if (lane == 0)
            y[(size_t)r * ldy + n] = acc ? __fadd_rn(y[(size_t)r * ldy + n], s) : s;
    }
}

template <int T>
static cudaError_t launch_rows(const struct cu_mat *w, const float *x, size_t ldx, uint32_t rows,
                               float *y, size_t ldy, int acc, bool vec, cudaStream_t s)
{
    dim3 grid((w->rows + G_WARPS - 1) / G_WARPS), block(G_WARPS * 32);
    const uint8_t *p = (const uint8_t *)w->data;
#define RS_G(R)                                                                                    \
    case R:                                                                                        \
        gemm_rows_k<T, R>                                                                          \
            <<<grid, block, 0, s>>>(p, w->row_bytes, w->rows, w->cols, x, ldx, y, ldy, acc, vec);  \
        break
    switch (rows) {
        RS_G(1);
        RS_G(2);
        RS_G(3);
        RS_G(4);
        RS_G(5);
        RS_G(6);
        RS_G(7);
        RS_G(8);
    default:
        return cudaErrorInvalidValue;
    }
#undef RS_G
    return cudaGetLastError();
}

extern "C" cudaError_t cu_gemm_rows(const struct cu_mat *w, const float *x, size_t ldx,
                                    uint32_t n_rows, float *y, size_t ldy, int accumulate,
                                    cudaStream_t s)
{
    /* 16-byte loads need every weight row, and every activation row, 16-byte aligned. */
    bool vec = ((uintptr_t)w->data % 16 == 0) && w->row_bytes % 16 == 0 &&
               ((uintptr_t)x % 16 == 0) && ldx % 4 == 0 && w->cols % 8 == 0 && w->type != CU_T_Q8_0;
    for (uint32_t r0 = 0; r0 < n_rows; r0 += G_ROWS) {
        uint32_t r = n_rows - r0 < G_ROWS ? n_rows - r0 : G_ROWS;
        const float *xr = x + (size_t)r0 * ldx;
        float *yr = y + (size_t)r0 * ldy;
        cudaError_t e;
        switch (w->type) {
        case CU_T_F32:
            e = launch_rows<CU_T_F32>(w, xr, ldx, r, yr, ldy, accumulate, vec, s);
            break;
        case CU_T_F16:
            e = launch_rows<CU_T_F16>(w, xr, ldx, r, yr, ldy, accumulate, vec, s);
            break;
        case CU_T_BF16:
            e = launch_rows<CU_T_BF16>(w, xr, ldx, r, yr, ldy, accumulate, vec, s);
            break;
        case CU_T_Q8_0:
            e = launch_rows<CU_T_Q8_0>(w, xr, ldx, r, yr, ldy, accumulate, false, s);
            break;
        default:
            return cudaErrorInvalidValue;
        }
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

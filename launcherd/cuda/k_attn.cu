/* SPDX-License-Identifier: MIT */
/*
 * Paged causal attention, one thread block per (query row, query head),
 * for prefill chunks and decode alike: the row at position p attends to
 * positions 0..p of its sequence through the block table (the chunk's own
 * K/V were stored first), so a chunk sees the cached prefix and itself; on
 * a sliding-window layer only to the last `window` of them (p included).
 * Scores may be soft-capped (gemma2: cap * tanh(s / cap), before the softmax).
 * Positions go by tiles of 256: each thread computes whole scores (a
 * sequential dot over head_dim), the tile's max and sum use the fixed block
 * reduction, the running output is rescaled (online softmax) and each
 * thread accumulates its head dims over the tile in position order. So a
 * row's result depends only on its own sequence, never on the batch.
 * Leaves out: split-K over long contexts (flash-decoding); head_dim > 512.
 */
#include <math.h>

#include "launcherd/cuda/k_common.cuh"

#define ATT_THREADS 128
#define ATT_TILE 256
#define ATT_DIMS 4 /* head dims per thread: head_dim <= ATT_THREADS * ATT_DIMS */

struct att_args {
    const float *q;
    float *out;
    const float *kc, *vc;
    const uint32_t *pos, *seq, *tab_off, *tables;
    size_t block_stride;
    uint32_t bs, hd, group, n_heads, window;
    float scale, softcap;
};

/* Scores of positions t0 .. t0+n-1 into sc (scaled); returns nothing, syncs after. */
__device__ __forceinline__ void tile_scores(const struct att_args &a, const float *qs,
                                            const uint32_t *table, uint32_t kvh, uint32_t t0,
                                            uint32_t n, float *sc)
{
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
        uint32_t t = t0 + i;
        const float *kp = a.kc + (size_t)table[t / a.bs] * a.block_stride +
                          ((size_t)kvh * a.bs + t % a.bs) * a.hd;
        float s = 0.0f;
        for (uint32_t d = 0; d < a.hd; d++)
            s = fmaf(qs[d], kp[d], s);
        s = __fmul_rn(s, a.scale);
        sc[i] = a.softcap > 0.0f ? __fmul_rn(a.softcap, tanhf(__fmul_rn(s, 1.0f / a.softcap))) : s;
    }
    __syncthreads();
}

__global__ void attention_k(struct att_args a)
{
    extern __shared__ float sm[];
    __shared__ float red[32];
    float *qs = sm, *sc = sm + a.hd;
    uint32_t r = blockIdx.x, h = blockIdx.y, kvh = h / a.group, n_pos = a.pos[r] + 1;
    uint32_t first = a.window > 0 && n_pos > a.window ? n_pos - a.window : 0;
    const uint32_t *table = a.tables + a.tab_off[a.seq[r]];
    const float *qr = a.q + ((size_t)r * a.n_heads + h) * a.hd;
    for (uint32_t d = threadIdx.x; d < a.hd; d += blockDim.x)
        qs[d] = qr[d];
    __syncthreads();
    float acc[ATT_DIMS] = {0.0f, 0.0f, 0.0f, 0.0f}, m = -INFINITY, l = 0.0f;
    for (uint32_t t0 = first; t0 < n_pos; t0 += ATT_TILE) {
        uint32_t n = n_pos - t0 < ATT_TILE ? n_pos - t0 : ATT_TILE;
        tile_scores(a, qs, table, kvh, t0, n, sc);
        float tmax = -INFINITY;
        for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
            tmax = fmaxf(tmax, sc[i]);
        float nm = fmaxf(m, cu_block_max(tmax, red));
        float corr = m == -INFINITY ? 0.0f : expf(m - nm);
        float part = 0.0f;
        for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
            sc[i] = expf(sc[i] - nm);
            part += sc[i];
        }
        l = l * corr + cu_block_sum(part, red); /* the sum's syncs also publish sc */
        for (int j = 0; j < ATT_DIMS; j++) {
            uint32_t d = threadIdx.x + (uint32_t)j * blockDim.x;
            if (d >= a.hd)
                break;
            float s = acc[j] * corr;
            for (uint32_t i = 0; i < n; i++) {
                uint32_t t = t0 + i;
                const float *vp = a.vc + (size_t)table[t / a.bs] * a.block_stride +
                                  ((size_t)kvh * a.bs + t % a.bs) * a.hd;
                s = fmaf(sc[i], vp[d], s);
            }
            acc[j] = s;
        }
        m = nm;
        __syncthreads(); /* sc is rewritten by the next tile */
    }
    float *o = a.out + ((size_t)r * a.n_heads + h) * a.hd;
    for (int j = 0; j < ATT_DIMS; j++) {
        uint32_t d = threadIdx.x + (uint32_t)j * blockDim.x;
        if (d < a.hd)
            o[d] = acc[j] / l;
    }
}

extern "C" cudaError_t cu_attention(const float *q, const struct cu_rows *r,
                                    const struct cu_kv_layer *kv, uint32_t n_heads, float scale,
                                    uint32_t window, float softcap, float *out, cudaStream_t s)
{
    if (kv->head_dim > ATT_THREADS * ATT_DIMS)
        return cudaErrorInvalidValue;
    struct att_args a = {q,
                         out,
                         kv->k,
                         kv->v,
                         r->pos,
                         r->seq,
                         r->tab_off,
                         r->tables,
                         kv->block_stride,
                         kv->block_size,
                         kv->head_dim,
                         n_heads / kv->n_kv_heads,
                         n_heads,
                         window,
                         scale,
                         softcap};
    dim3 grid(r->n_rows, n_heads);
    size_t smem = (kv->head_dim + ATT_TILE) * sizeof(float);
    attention_k<<<grid, ATT_THREADS, smem, s>>>(a);
    return cudaGetLastError();
}

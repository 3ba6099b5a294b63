/* SPDX-License-Identifier: MIT */
/*
 * The sampler on the GPU, one thread block per request row, for requests
 * without penalties (the host sampler does those, as they need the token
 * history): greedy, temperature, top-k, top-p, min-p, raw logprobs and the
 * top-N alternatives. It repeats the CPU sampler's arithmetic
 * (launcherd/engine/sampler.c) step for step, so the same logits give the
 * same token and the same logprobs: the whole-vocab passes run on all the
 * block's threads, the selections that fix the candidates' order on one
 * (k_select.cuh);
 * NaN -> -inf and +inf -> FLT_MAX; ties to the lower id; Cephes' e^x
 * polynomial with every operation rounded as written (no FMA contraction);
 * sums in blocks of 256 values, eight float lanes each, then double, then
 * the blocks in order; the inverse-CDF scan block by block, then element by
 * element; u = SplitMix64(seed, step). The only step that may differ is the
 * last bit of a double log() in the logprobs (CUDA's log is within 1 ulp).
 */
#include <float.h>
#include <math.h>

#include "launcherd/cuda/k_common.cuh"
#include "launcherd/cuda/k_select.cuh"

#define S_THREADS 256
#define S_BLOCK 256 /* values per partial sum, as sampler.c's BLOCK */
#define GREEDY_BELOW 1e-5f

__device__ __forceinline__ float san(float v)
{
    return v != v ? -INFINITY : (v > FLT_MAX ? FLT_MAX : v);
}

/* 1 when token a (value va) ranks before token b: higher value, ties to the lower id. */
__device__ __forceinline__ bool better(float va, int32_t a, float vb, int32_t b)
{
    return va > vb || (va == vb && a < b);
}

__device__ __forceinline__ float exp_nonpos(float x)
{
    const float c = x > -87.0f ? x : -87.0f;
    const float fn = __int2float_rn(__float2int_rz(__fsub_rn(__fmul_rn(c, 1.44269504089f), 0.5f)));
    const float r =
        __fsub_rn(__fsub_rn(c, __fmul_rn(fn, 0.693359375f)), __fmul_rn(fn, -2.12194440e-4f));
    float p = 1.9875691500e-4f;
    p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
    p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
    p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
    p = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(p, r), r), r), 1.0f);
    const float v = __fmul_rn(p, __uint_as_float((uint32_t)(__float2int_rz(fn) + 127) << 23));
    return x > -87.0f ? v : 0.0f;
}

__device__ __forceinline__ uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ double uniform01(uint64_t seed, uint64_t step)
{
    uint64_t h = mix64(mix64(seed) + (step + 1) * 0x9e3779b97f4a7c15ull);
    return (double)(h >> 11) * 0x1p-53;
}

/* Block sums of w (sampler.c block_sums): each thread does whole blocks; returns the total. */
__device__ double block_sums(const float *w, uint32_t n, double *bsum, double *total_sh)
{
    uint32_t nb = (n + S_BLOCK - 1) / S_BLOCK;
    for (uint32_t b = threadIdx.x; b < nb; b += blockDim.x) {
        uint32_t lo = b * S_BLOCK, hi = lo + S_BLOCK < n ? lo + S_BLOCK : n;
        uint32_t mid = lo + (hi - lo) / 8 * 8;
        float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (uint32_t i = lo; i < mid; i += 8)
            for (int j = 0; j < 8; j++)
                lane[j] = __fadd_rn(lane[j], w[i + j]);
        double sum = 0.0;
        for (int j = 0; j < 8; j++)
            sum += (double)lane[j];
        for (uint32_t i = mid; i < hi; i++)
            sum += (double)w[i];
        bsum[b] = sum;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (uint32_t b = 0; b < nb; b++)
            t += bsum[b];
        *total_sh = t;
    }
    __syncthreads();
    return *total_sh;
}

/* sampler.c scan_draw, on one thread. */
__device__ int32_t scan_draw(const float *w, uint32_t n, const double *bsum, double r)
{
    uint32_t nb = (n + S_BLOCK - 1) / S_BLOCK, b = 0;
    double cum = 0.0;
    for (; b + 1 < nb && cum + bsum[b] <= r; b++)
        cum += bsum[b];
    for (uint32_t i = b * S_BLOCK; i < n && i < (b + 1) * S_BLOCK; i++)
        if (w[i] > 0.0f && (cum += (double)w[i]) > r)
            return (int32_t)i;
    for (uint32_t i = n; i-- > 0;)
        if (w[i] > 0.0f)
            return (int32_t)i;
    return 0;
}

/*
 * The best token under the total order among those ranking after (pv, pi)
 * (all tokens when pi < 0). Every thread gets the answer.
 */
__device__ int32_t best_after(const float *l, uint32_t n, float pv, int32_t pi, float *sv,
                              int32_t *si)
{
    float bv = -INFINITY;
    int32_t bi = -1;
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = san(l[i]);
        if (pi >= 0 && !better(pv, pi, v, (int32_t)i))
            continue;
        if (bi < 0 || better(v, (int32_t)i, bv, bi))
            bv = v, bi = (int32_t)i;
    }
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (uint32_t s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float ov = sv[threadIdx.x + s];
            int32_t oi = si[threadIdx.x + s];
            if (oi >= 0 &&
                (si[threadIdx.x] < 0 || better(ov, oi, sv[threadIdx.x], si[threadIdx.x])))
                sv[threadIdx.x] = ov, si[threadIdx.x] = oi;
        }
        __syncthreads();
    }
    int32_t r = si[0];
    __syncthreads();
    return r;
}

/* w = exp_nonpos((l - max) * scale) over the sanitized row, then min-p when asked. */
__device__ void exp_row(const float *l, float *w, uint32_t n, float max, float scale, float min_p)
{
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = exp_nonpos(__fmul_rn(__fsub_rn(l[i], max), scale));
        w[i] = min_p > 0.0f && !(v >= min_p) ? 0.0f : v;
    }
    __syncthreads();
}

/* sample_tempered on the sanitized logits ls; the caller's w holds raw e^x weights. */
__device__ int32_t tempered(const struct cu_sample_req &q, const float *ls, uint32_t n, float max,
                            float *w, int32_t *v, double *bsum, double *mass, double *total,
                            int32_t *tok_sh)
{
    const float inv_t = __fdiv_rn(1.0f, q.temperature);
    const double u = uniform01(q.seed, q.step);
    if (q.top_k > 0 && (uint32_t)q.top_k < n) {
        if (threadIdx.x == 0) {
            size_t k = (size_t)q.top_k;
            sel_top_ids(v, n, k, ls);
            double z = 0.0;
            for (size_t i = 0; i < k; i++) {
                float wi = exp_nonpos(__fmul_rn(__fsub_rn(ls[v[i]], max), inv_t));
                w[v[i]] = wi;
                z += (double)wi;
            }
            if (q.top_p < 1.0f)
                k = sel_select_mass(v, k, ls, w, (double)q.top_p * z);
            *tok_sh = sel_draw_set(v, k, w, q.min_p, u);
        }
        __syncthreads();
        return *tok_sh;
    }
    if (q.top_p < 1.0f) {
        exp_row(ls, w, n, max, inv_t, 0.0f);
        double z = block_sums(w, n, bsum, total);
        if (threadIdx.x == 0) {
            size_t k = sel_nucleus_all(mass, v, ls, w, n, q.top_p, z);
            *tok_sh = sel_draw_set(v, k, w, q.min_p, u);
        }
        __syncthreads();
        return *tok_sh;
    }
    exp_row(ls, w, n, max, inv_t, q.min_p);
    double r = u * block_sums(w, n, bsum, total);
    if (threadIdx.x == 0)
        *tok_sh = scan_draw(w, n, bsum, r);
    __syncthreads();
    return *tok_sh;
}

__global__ void sample_k(const float *logits, uint32_t n, const struct cu_sample_req *reqs,
                         struct cu_sample_scratch scr, struct cu_sample_out *outs)
{
    __shared__ float sv[S_THREADS];
    __shared__ int32_t si[S_THREADS];
    __shared__ double total;
    __shared__ int32_t tok_sh;
    const struct cu_sample_req q = reqs[blockIdx.x];
    const float *raw = logits + (size_t)q.logit_row * n;
    size_t off = (size_t)blockIdx.x * n;
    float *w = scr.w + off, *ls = scr.ls + off;
    int32_t *v = scr.v + off;
    double *bsum = scr.bsum + (size_t)blockIdx.x * (n / S_BLOCK + 1);
    double *mass = scr.mass + (size_t)blockIdx.x * SEL_NUC_BUCKETS;
    struct cu_sample_out *o = &outs[blockIdx.x];
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) /* sanitize_max's in-place fix */
        ls[i] = san(raw[i]);
    __syncthreads();
    int32_t best = best_after(ls, n, 0.0f, -1, sv, si);
    float raw_max = ls[best];
    if (raw_max == -INFINITY) {
        if (threadIdx.x == 0)
            o->token = -1, o->n_top = 0;
        return;
    }
    exp_row(ls, w, n, raw_max, 1.0f, 0.0f);
    const double lse = (double)raw_max + log(block_sums(w, n, bsum, &total));
    int32_t prev = -1, n_top = q.n_logprobs < (int32_t)n ? q.n_logprobs : (int32_t)n;
    for (int32_t k = 0; k < n_top; k++) {
        prev = k == 0 ? best : best_after(ls, n, ls[prev], prev, sv, si);
        if (threadIdx.x == 0) {
            o->top_ids[k] = prev;
            o->top_logprobs[k] = (float)((double)ls[prev] - lse);
        }
    }
    int32_t tok = best;
    if (!(q.temperature < GREEDY_BELOW))
        tok = tempered(q, ls, n, raw_max, w, v, bsum, mass, &total, &tok_sh);
    if (threadIdx.x == 0) {
        o->token = tok;
        o->logprob = (float)((double)ls[tok] - lse);
        o->n_top = n_top;
    }
}

extern "C" cudaError_t cu_sample(const float *logits, uint32_t n_vocab,
                                 const struct cu_sample_req *req, uint32_t n,
                                 const struct cu_sample_scratch *scr, struct cu_sample_out *out,
                                 cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    sample_k<<<n, S_THREADS, 0, s>>>(logits, n_vocab, req, *scr, out);
    return cudaGetLastError();
}

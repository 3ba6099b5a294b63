/* SPDX-License-Identifier: MIT */
/*
 * The CUDA backend's table (rs_backend_cuda): load (device check, stream,
 * cuBLAS, weights uploaded once), the paged KV cache in device memory,
 * step (cuda_step.c), logits copied to the host on demand, and device
 * sampling for the requests the device sampler covers. With no device (or
 * no driver) load returns RS_EDEVICE after one log line "no CUDA device",
 * and the front falls back to the CPU when the backend was "auto".
 * Settings from the environment (read once at load): RS_CUDA_DEVICE
 * (ordinal, default 0), RS_CUDA_DETERMINISTIC=1 (batch-invariant kernels
 * for every GEMM, no cuBLAS), RS_CUDA_GRAPHS=0 (no decode graphs).
 * Leaves out: tensor parallelism over several GPUs (NCCL), F16/quantized KV.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "launcherd/cuda/cuda_state.h"

#define BLAS_WS_BYTES (32u << 20)

rs_err cu_fail(const char *file, int line, const char *what, cudaError_t e)
{
    rs_log_write(RS_LOG_ERROR, RS_LOG_NOID, RS_LOG_NOID, file, line, "cuda: %s: %s (%s)", what,
                 cudaGetErrorString(e), cudaGetErrorName(e));
    return RS_EDEVICE;
}

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? atoi(v) : dflt;
}

static void cuda_destroy(void *st)
{
    struct cu_state *s = st;
    if (s == NULL)
        return;
    if (s->stream != NULL)
        cudaStreamSynchronize(s->stream);
    cu_step_free(s);
    cu_upload_free(s);
    cu_sample_free(s);
    cudaFreeHost(s->h_logits);
    if (s->blas != NULL)
        cublasDestroy(s->blas);
    cudaFree(s->blas_ws);
    if (s->ev_in != NULL)
        cudaEventDestroy(s->ev_in);
    if (s->stream != NULL)
        cudaStreamDestroy(s->stream);
    free(s);
}

/* The device count, or 0 after logging why there is none. */
static int device_count(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        rs_log_info("cuda: no CUDA device (%s)",
                    e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices");
        cudaGetLastError(); /* not sticky, but start every later call clean */
        return 0;
    }
    return n;
}

static rs_err open_device(struct cu_state *s)
{
    RS_CUDA_CHECK(cudaSetDevice(s->device));
    RS_CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    RS_CUDA_CHECK(cudaEventCreateWithFlags(&s->ev_in, cudaEventDisableTiming));
    cublasStatus_t bs = cublasCreate(&s->blas);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetStream(s->blas, s->stream);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        rs_log_error("cuda: cuBLAS set-up failed: %s", cublasGetStatusString(bs));
        return RS_EDEVICE;
    }
    /* A fixed workspace: cuBLAS then allocates nothing inside graph capture. */
    RS_CUDA_CHECK(cudaMalloc(&s->blas_ws, BLAS_WS_BYTES));
    bs = cublasSetWorkspace(s->blas, s->blas_ws, BLAS_WS_BYTES);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        rs_log_error("cuda: cublasSetWorkspace: %s", cublasGetStatusString(bs));
        return RS_EDEVICE;
    }
    return RS_OK;
}

static void describe(struct cu_state *s)
{
    struct cudaDeviceProp p;
    size_t free_b = 0, total_b = 0;
    if (cudaGetDeviceProperties(&p, s->device) != cudaSuccess)
        snprintf(p.name, sizeof(p.name), "?");
    cudaMemGetInfo(&free_b, &total_b);
    snprintf(s->describe, sizeof(s->describe),
             "cuda %d %.60s sm_%d%d %.0f GiB, weights %.2f GB in %.2f s (%.2f GB/s), %s%s",
             s->device, p.name, p.major, p.minor, (double)total_b / (1u << 30),
             (double)s->load_bytes / 1e9, (double)s->load_ns / 1e9,
             s->load_ns ? (double)s->load_bytes / (double)s->load_ns : 0.0,
             s->deterministic ? "deterministic" : "cuBLAS above 8 rows",
             s->use_graphs ? ", decode graphs" : "");
}

static rs_err cuda_load(const struct llama_desc *d, const struct rs_model_opts *opts, void **out)
{
    *out = NULL;
    int n = device_count();
    if (n == 0)
        return RS_EDEVICE;
    if (opts->tp > 1) {
        rs_log_error("cuda: tensor parallelism (tp %d) is not built for the GPU yet", opts->tp);
        return RS_EUNSUPPORTED;
    }
    if (d->hp.head_dim > 512 || d->hp.head_dim % 2 != 0) {
        rs_log_error("cuda: head size %u not handled (even, at most 512)", d->hp.head_dim);
        return RS_EUNSUPPORTED;
    }
    struct cu_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return RS_ENOMEM;
    s->d = d;
    s->hp = d->hp;
    s->device = env_int("RS_CUDA_DEVICE", 0);
    s->deterministic = opts->deterministic || env_int("RS_CUDA_DETERMINISTIC", 0) != 0;
    s->use_graphs = env_int("RS_CUDA_GRAPHS", 1) != 0;
    rs_err rc = RS_OK;
    if (s->device < 0 || s->device >= n) {
        rs_log_error("cuda: RS_CUDA_DEVICE=%d, but there are %d devices", s->device, n);
        rc = RS_EINVAL;
    }
    if (rc == RS_OK)
        rc = open_device(s);
    if (rc == RS_OK)
        rc = cu_upload(s);
    if (rc != RS_OK) {
        cuda_destroy(s);
        return rc;
    }
    describe(s);
    *out = s;
    return RS_OK;
}

static size_t cuda_kv_block_bytes(const void *st, uint32_t block_size)
{
    const struct cu_state *s = st;
    size_t kv_dim = (size_t)s->hp.n_kv_heads * s->hp.head_dim;
    return 2 * (size_t)s->hp.n_layers * block_size * kv_dim * sizeof(float);
}

static rs_err cuda_kv_alloc(void *st, uint32_t n_blocks, uint32_t block_size, void **out)
{
    struct cu_state *s = st;
    *out = NULL;
    RS_CUDA_CHECK(cudaSetDevice(s->device));
    struct cu_kv *kv = calloc(1, sizeof(*kv));
    if (kv == NULL)
        return RS_ENOMEM;
    size_t bytes = cuda_kv_block_bytes(s, block_size) * n_blocks;
    cudaError_t e = cudaMalloc((void **)&kv->mem, bytes);
    if (e == cudaSuccess)
        e = cudaMemsetAsync(kv->mem, 0, bytes, s->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess) {
        rs_log_error("cuda: KV cache of %zu bytes: %s", bytes, cudaGetErrorString(e));
        cudaFree(kv->mem);
        free(kv);
        cudaGetLastError();
        return e == cudaErrorMemoryAllocation ? RS_ENOMEM : RS_EDEVICE;
    }
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->block_stride = (size_t)s->hp.n_kv_heads * block_size * s->hp.head_dim;
    kv->layer_floats = kv->block_stride * n_blocks;
    *out = kv;
    return RS_OK;
}

static void cuda_kv_free(void *st, void *kvp)
{
    struct cu_state *s = st;
    struct cu_kv *kv = kvp;
    if (kv == NULL)
        return;
    cudaStreamSynchronize(s->stream);
    for (uint32_t i = 0; i < s->n_graphs;) { /* graphs captured against this cache */
        if (s->graphs[i].kv == kv) {
            cudaGraphExecDestroy(s->graphs[i].exec);
            s->graphs[i] = s->graphs[--s->n_graphs];
        } else {
            i++;
        }
    }
    cudaFree(kv->mem);
    free(kv);
}

/* The device is per thread: a step may come from another thread than the load's. */
static rs_err cuda_step_slot(void *st, void *kv, const struct rs_model_seq *seqs, uint32_t n)
{
    RS_CUDA_CHECK(cudaSetDevice(((struct cu_state *)st)->device));
    return cu_step(st, kv, seqs, n);
}

static rs_err cuda_sync(void *st)
{
    struct cu_state *s = st;
    RS_CUDA_CHECK(cudaStreamSynchronize(s->stream));
    return RS_OK;
}

/* Copies every wanted row's logits to the host once per step. */
static rs_err host_logits(struct cu_state *s)
{
    size_t n = (size_t)s->n_want * s->hp.n_vocab;
    if (s->n_want > s->cap_h_logits) {
        cudaFreeHost(s->h_logits);
        s->h_logits = NULL;
        s->cap_h_logits = 0;
        RS_CUDA_CHECK(cudaHostAlloc((void **)&s->h_logits, n * sizeof(float), 0));
        s->cap_h_logits = s->n_want;
    }
    RS_CUDA_CHECK(cudaMemcpyAsync(s->h_logits, s->logits, n * sizeof(float), cudaMemcpyDeviceToHost,
                                  s->stream));
    RS_CUDA_CHECK(cudaStreamSynchronize(s->stream));
    s->h_logits_valid = 1;
    return RS_OK;
}

static const float *cuda_logits(void *st, uint32_t seq)
{
    struct cu_state *s = st;
    if (seq >= s->n_seqs || s->seq_logit[seq] < 0)
        return NULL;
    if (!s->h_logits_valid && host_logits(s) != RS_OK)
        return NULL;
    return s->h_logits + (size_t)s->seq_logit[seq] * s->hp.n_vocab;
}

static const char *cuda_describe(const void *st)
{
    return ((const struct cu_state *)st)->describe;
}

static rs_err cuda_sample(void *st, const uint32_t *seq, const struct rs_sampling_params *params,
                          const uint64_t *steps, uint32_t n, struct rs_sample_result *out)
{
    RS_CUDA_CHECK(cudaSetDevice(((struct cu_state *)st)->device));
    return cu_sample_rows(st, seq, params, steps, n, out);
}

const struct rs_backend_ops rs_backend_cuda = {
    .name = "cuda",
    .caps = RS_BACKEND_CAP_HOST_DMA,
    .load = cuda_load,
    .destroy = cuda_destroy,
    .kv_block_bytes = cuda_kv_block_bytes,
    .kv_alloc = cuda_kv_alloc,
    .kv_free = cuda_kv_free,
    .step = cuda_step_slot,
    .logits = cuda_logits,
    .sync = cuda_sync,
    .describe = cuda_describe,
    .sample = cuda_sample,
};

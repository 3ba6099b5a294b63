/* SPDX-License-Identifier: MIT */
/*
 * bench_cuda: the CUDA backend on one GGUF, each figure next to the
 * physical limit measured in the same run. Decode tokens/s at several batch
 * sizes (prompts prefilled first; each step is the forward pass plus greedy
 * sampling on the device, as a GPU launcher runs it), batch-1 decode against
 * the HBM bound (weight bytes read per step / device-to-device copy
 * bandwidth), the largest batch's GEMMs alone (cuBLAS on the model's layer
 * shapes) against the BF16 tensor-core rate of one large cuBLAS GEMM,
 * prefill tokens/s, weight upload time, and host->device copies straight
 * from a cudaHostRegister'd shared-memory segment against cudaMallocHost.
 * Usage: bench_cuda -m MODEL [--batches 1,16,64,256] [--prompt 128] [--steps 32]
 *                   [--prefill 512] [--ring-mib 256]
 * Without a CUDA device it prints why and exits 0 (nothing to measure).
 */
#include <stdio.h>

#ifndef RS_HAVE_CUDA
int main(void)
{
    printf("bench_cuda: built without CUDA (nvcc was not found): nothing to measure\n");
    return 0;
}
#else
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/gguf.h"
#include "common/opt.h"
#include "ipc/shm.h"
#include "launcherd/engine/model.h"
#include "launcherd/engine/sampler.h"

#define MAX_B 8

struct args {
    const char *model;
    uint32_t batches[MAX_B], n_batches, prompt, steps, prefill, ring_mib;
};

static double now_s(void)
{
    return (double)rs_clock_ns() / 1e9;
}

/* Device-to-device copy bandwidth (bytes read + written per second), best of 5 over 2 GiB. */
static double hbm_bandwidth(void)
{
    size_t n = (size_t)2 << 30;
    void *a = NULL, *b = NULL;
    double best = 0;
    if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess)
        return 0;
    cudaMemset(a, 1, n);
    for (int r = 0; r < 6; r++) {
        cudaDeviceSynchronize();
        double t0 = now_s();
        cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
        cudaDeviceSynchronize();
        double bw = 2.0 * (double)n / (now_s() - t0);
        best = r > 0 && bw > best ? bw : best; /* the first is a warm-up */
    }
    cudaFree(a);
    cudaFree(b);
    return best;
}

/* Bytes a decode step reads from weights: every matrix but the embedding (one row of it). */
static double weight_bytes(const rs_gguf *g)
{
    double sum = 0;
    int tied = rs_gguf_find_tensor(g, "output.weight") < 0;
    for (uint64_t i = 0; i < rs_gguf_n_tensors(g); i++) {
        const struct rs_gguf_tensor *t = rs_gguf_tensor(g, i);
        if (strcmp(t->name, "token_embd.weight") != 0 || tied)
            sum += (double)t->nbytes;
    }
    return sum;
}

struct run {
    rs_model *m;
    rs_kvcache *kv;
    uint32_t *tables, nbps; /* blocks per sequence */
    int32_t *toks;          /* per sequence: prompt + steps ids */
    uint32_t ctx;
};

/* Prefills b sequences of `prompt` random tokens, in steps of at most max_tokens. */
static int prefill_all(struct run *r, uint32_t b, uint32_t prompt, uint32_t max_tokens)
{
    struct rs_model_seq *s = calloc(b, sizeof(*s));
    uint32_t per = max_tokens / prompt > 0 ? max_tokens / prompt : 1, rc = 0;
    for (uint32_t i0 = 0; i0 < b && rc == 0; i0 += per) {
        uint32_t n = b - i0 < per ? b - i0 : per;
        for (uint32_t i = 0; i < n; i++)
            s[i] = (struct rs_model_seq){r->toks + (size_t)(i0 + i) * r->ctx,    prompt,  0,
                                         r->tables + (size_t)(i0 + i) * r->nbps, r->nbps, 1};
        rc = rs_model_step(r->m, r->kv, s, n) != RS_OK;
    }
    free(s);
    return (int)rc;
}

/* steps decode steps of b sequences (forward + device greedy sampling); returns seconds. */
static double decode(struct run *r, uint32_t b, uint32_t prompt, uint32_t steps)
{
    struct rs_model_seq *s = calloc(b, sizeof(*s));
    struct rs_sampling_params *p = calloc(b, sizeof(*p));
    struct rs_sample_result *out = calloc(b, sizeof(*out));
    uint32_t *seq = calloc(b, sizeof(uint32_t));
    uint64_t *st = calloc(b, sizeof(uint64_t));
    int32_t *cur = calloc(b, sizeof(int32_t)); /* contiguous ids, as in a batch record */
    double t = -1;
    for (uint32_t i = 0; i < b; i++) {
        rs_sampling_params_default(&p[i]);
        seq[i] = i;
        cur[i] = r->toks[(size_t)i * r->ctx + prompt];
    }
    double t0 = now_s();
    for (uint32_t k = 0; k < steps; k++) {
        for (uint32_t i = 0; i < b; i++) {
            s[i] = (struct rs_model_seq){&cur[i], 1, prompt + k, r->tables + (size_t)i * r->nbps,
                                         r->nbps, 1};
            st[i] = k;
        }
        if (rs_model_step(r->m, r->kv, s, b) != RS_OK ||
            rs_model_sample(r->m, seq, p, st, b, out) != RS_OK)
            goto done;
        for (uint32_t i = 0; i < b; i++)
            cur[i] = out[i].token;
    }
    t = now_s() - t0;
done:
    free(s), free(p), free(out), free(seq), free(st), free(cur);
    return t;
}

static int setup(struct run *r, rs_model *m, uint32_t b, uint32_t ctx)
{
    memset(r, 0, sizeof(*r));
    r->m = m;
    r->ctx = ctx;
    r->nbps = (ctx + 15) / 16;
    uint32_t nv = rs_model_hparams(m)->n_vocab;
    if (rs_kvcache_create(m, b * r->nbps, 16, &r->kv) != RS_OK)
        return 1;
    r->tables = malloc((size_t)b * r->nbps * sizeof(uint32_t));
    r->toks = malloc((size_t)b * ctx * sizeof(int32_t));
    for (size_t i = 0; i < (size_t)b * r->nbps; i++)
        r->tables[i] = (uint32_t)i;
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < (size_t)b * ctx; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        r->toks[i] = (int32_t)(x % nv);
    }
    return 0;
}

static void teardown(struct run *r)
{
    rs_kvcache_destroy(&r->kv);
    free(r->tables);
    free(r->toks);
}

/* TFLOP/s of one large BF16 GEMM (the practical tensor-core bound), best of 5. */
static double peak_bf16(cublasHandle_t h)
{
    int n = 8192;
    void *a, *b, *c;
    float one = 1, zero = 0;
    double best = 0;
    if (cudaMalloc(&a, (size_t)n * n * 2) || cudaMalloc(&b, (size_t)n * n * 2) ||
        cudaMalloc(&c, (size_t)n * n * 4))
        return 0;
    cudaMemset(a, 0x3c, (size_t)n * n * 2), cudaMemset(b, 0x3c, (size_t)n * n * 2);
    for (int r = 0; r < 6; r++) {
        cudaDeviceSynchronize();
        double t0 = now_s();
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF,
                     n, &zero, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        cudaDeviceSynchronize();
        double tf = 2.0 * n * (double)n * n / (now_s() - t0) / 1e12;
        best = r > 0 && tf > best ? tf : best;
    }
    cudaFree(a), cudaFree(b), cudaFree(c);
    return best;
}

/*
 * The model's GEMMs at `rows` rows alone: one layer's seven shapes, n_layers
 * times, plus the output matrix, BF16 weights and activations (random),
 * F32 output. Returns TFLOP/s.
 */
static double layer_gemms(cublasHandle_t h, const struct rs_model_hparams *hp, int rows)
{
    int d = (int)hp->dim, kv = (int)(hp->n_kv_heads * hp->head_dim), f = (int)hp->ffn_dim;
    int shapes[8][2] = {{d, d}, {kv, d}, {kv, d}, {d, d},
                        {f, d}, {f, d},  {d, f},  {(int)hp->n_vocab, d}};
    void *w[8], *x, *y;
    float one = 1, zero = 0;
    double flops = 0, best = 1e30;
    if (cudaMalloc(&x, (size_t)rows * f * 2) || cudaMalloc(&y, (size_t)rows * hp->n_vocab * 4))
        return 0;
    for (int i = 0; i < 8; i++)
        if (cudaMalloc(&w[i], (size_t)shapes[i][0] * shapes[i][1] * 2) != cudaSuccess)
            return 0;
    for (int i = 0; i < 8; i++)
        flops += 2.0 * shapes[i][0] * shapes[i][1] * rows * (i < 7 ? hp->n_layers : 1);
    for (int r = 0; r < 4; r++) {
        cudaDeviceSynchronize();
        double t0 = now_s();
        for (uint32_t l = 0; l <= hp->n_layers; l++)
            for (int i = l < hp->n_layers ? 0 : 7; i < (l < hp->n_layers ? 7 : 8); i++)
                cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, shapes[i][0], rows, shapes[i][1], &one,
                             w[i], CUDA_R_16BF, shapes[i][1], x, CUDA_R_16BF, shapes[i][1], &zero,
                             y, CUDA_R_32F, shapes[i][0], CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        cudaDeviceSynchronize();
        double t = now_s() - t0;
        best = r > 0 && t < best ? t : best;
    }
    for (int i = 0; i < 8; i++)
        cudaFree(w[i]);
    cudaFree(x), cudaFree(y);
    return flops / best / 1e12;
}

/* Host -> device from a registered shared-memory mapping vs cudaMallocHost memory, GB/s. */
static void pinned_ring(uint32_t mib)
{
    char name[64];
    snprintf(name, sizeof(name), "/rs-bench-cuda-%d", (int)getpid());
    static const char *const roles[] = {"launcherd"};
    struct rs_shm_region_spec spec[2] = {
        {.name = "roles", .kind = RS_SHM_ROLES, .count = 1, .role_names = roles},
        {.name = "ring", .kind = RS_SHM_RAW, .bytes = (uint64_t)mib << 20}};
    rs_shm *shm;
    void *ring, *host, *dev;
    uint64_t size;
    size_t n = (size_t)mib << 20;
    if (rs_shm_create(name, 1, spec, 2, &shm) != RS_OK) {
        printf("pinned ring: cannot create a %u MiB segment in /dev/shm (skipped)\n", mib);
        return;
    }
    rs_shm_unlink(name);
    rs_err reg = rs_shm_cuda_register(shm);
    rs_shm_region(shm, "ring", RS_SHM_RAW, &ring, &size);
    cudaMallocHost(&host, n);
    cudaMalloc(&dev, n);
    memset(ring, 1, n), memset(host, 1, n);
    double best[2] = {0, 0};
    for (int r = 0; r < 8; r++)
        for (int k = 0; k < 2; k++) {
            cudaDeviceSynchronize();
            double t0 = now_s();
            cudaMemcpyAsync(dev, k == 0 ? ring : host, n, cudaMemcpyHostToDevice, 0);
            cudaDeviceSynchronize();
            double bw = (double)n / (now_s() - t0) / 1e9;
            best[k] = r > 0 && bw > best[k] ? bw : best[k];
        }
    printf("pinned ring: %u MiB H2D from the registered segment %.1f GB/s (register: %s), "
           "from cudaMallocHost %.1f GB/s -> ratio %.2f\n",
           mib, best[0], rs_strerror(reg), best[1], best[0] / best[1]);
    cudaFreeHost(host), cudaFree(dev);
    rs_shm_detach(&shm);
}

static void decode_all(rs_model *m, const struct args *a, double bw, double wbytes)
{
    for (uint32_t i = 0; i < a->n_batches; i++) {
        uint32_t b = a->batches[i];
        struct run r;
        if (setup(&r, m, b, a->prompt + a->steps + 8) != 0 ||
            prefill_all(&r, b, a->prompt, 4096) != 0) {
            printf("decode b=%u: setup or prefill failed\n", b);
            teardown(&r);
            continue;
        }
        decode(&r, b, a->prompt, 3); /* warm-up: graphs captured, caches warm */
        double t = decode(&r, b, a->prompt + 3, a->steps);
        double step = t / a->steps;
        printf("decode b=%u: %.1f tok/s, %.3f ms per step (ctx %u..%u)", b, b * a->steps / t,
               step * 1e3, a->prompt + 3, a->prompt + 3 + a->steps);
        if (b == 1)
            printf("; HBM bound %.3f ms (%.2f GB / %.0f GB/s) -> ratio %.2f", wbytes / bw * 1e3,
                   wbytes / 1e9, bw / 1e9, wbytes / bw / step);
        printf("\n");
        fflush(stdout);
        teardown(&r);
    }
}

static void prefill_speed(rs_model *m, uint32_t n)
{
    struct run r;
    if (setup(&r, m, 1, n + 1) == 0 && prefill_all(&r, 1, n, n) == 0) {
        rs_model_logits(m, 0); /* sync */
        double best = 1e30;
        for (int k = 0; k < 3; k++) {
            double t0 = now_s();
            prefill_all(&r, 1, n, n);
            rs_model_logits(m, 0);
            double t = now_s() - t0;
            best = t < best ? t : best;
        }
        printf("prefill %u tokens: %.0f tok/s (%.2f ms)\n", n, n / best, best * 1e3);
    }
    teardown(&r);
}

#define A(f) offsetof(struct args, f)
#define N(nm, f, h)                                                                              \
    {.name = nm, .kind = RS_OPT_U32, .off = A(f), .min = 1, .max = 1 << 20, .arg = "N", .help = h}
static const struct rs_opt opts[] = {
    {.name = "model", .short_name = 'm', .kind = RS_OPT_ARG, .off = A(model), .arg = "MODEL",
     .help = "the model (required)"},
    {.name = "batches", .kind = RS_OPT_U32_LIST, .off = A(batches), .size = MAX_B,
     .count_off = A(n_batches), .min = 1, .max = 4096, .arg = "N,...",
     .help = "decode batch sizes (default 1,16,64,256)"},
    N("prompt", prompt, "prompt tokens per sequence (default 128)"),
    N("steps", steps, "decode steps (default 32)"),
    N("prefill", prefill, "prefill tokens (default 512)"),
    N("ring-mib", ring_mib, "registered segment for the copy figure, MiB (default 256)"),
    {0},
};

/* -1 to run, else the exit code. */
static int parse(int argc, char **argv, struct args *a)
{
    *a = (struct args){NULL, {1, 16, 64, 256}, 4, 128, 32, 512, 256};
    struct rs_opt_group g = {NULL, opts, a, NULL};
    int code = rs_opt_main("bench_cuda", "usage: bench_cuda -m MODEL [options]\n", &g, 1, argc,
                           argv, 0, NULL);
    if (code < 0 && a->model == NULL) {
        fprintf(stderr, "bench_cuda: -m MODEL is required\n");
        return 2;
    }
    return code;
}

int main(int argc, char **argv)
{
    struct args a;
    char err[256];
    int code = parse(argc, argv, &a);
    if (code >= 0)
        return code;
    int nd = 0;
    if (cudaGetDeviceCount(&nd) != cudaSuccess || nd == 0) {
        printf("bench_cuda: no CUDA device: nothing to measure\n");
        return 0;
    }
    struct rs_model_opts o;
    rs_model_opts_default(&o);
    o.backend = "cuda";
    rs_model *m;
    double t0 = now_s();
    if (rs_model_load(a.model, &o, &m, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "bench_cuda: %s\n", err);
        return 1;
    }
    printf("model %s loaded in %.2f s: %s\n", a.model, now_s() - t0, rs_model_describe(m));
    double bw = hbm_bandwidth(), wb = weight_bytes(rs_model_gguf(m));
    printf("hbm: device-to-device copy %.0f GB/s (read + write)\n", bw / 1e9);
    decode_all(m, &a, bw, wb);
    prefill_speed(m, a.prefill);
    cublasHandle_t h;
    if (cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) {
        uint32_t big = a.batches[a.n_batches - 1];
        double peak = peak_bf16(h), g = layer_gemms(h, rs_model_hparams(m), (int)big);
        printf("gemm: the model's GEMMs at %u rows %.0f TFLOP/s; one 8192^3 BF16 GEMM %.0f "
               "TFLOP/s -> ratio %.2f\n",
               big, g, peak, g / peak);
        cublasDestroy(h);
    }
    pinned_ring(a.ring_mib);
    rs_model_destroy(&m);
    return 0;
}
#endif

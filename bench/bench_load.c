/* SPDX-License-Identifier: MIT */
/*
 * Weight loading bandwidth (launcherd/engine/load_uring.h) next to a plain
 * sequential read() of the same bytes measured in the same run: io_uring
 * through the page cache and with O_DIRECT, mmap with every page touched
 * (what the CPU backend pays as it faults weights in), and on a CUDA host
 * the GPU path (io_uring -> page-locked staging -> cudaMemcpyAsync into
 * device memory). Each mode runs cold (the file's pages dropped from the
 * page cache first with fsync + POSIX_FADV_DONTNEED) and warm (cached).
 * Usage: bench_load FILE [--reps N] [--mode cold|warm|both] [--depth D] [--chunk-kib K]
 *                  [--max-mib M]
 * The span is the GGUF tensor data section when FILE is a GGUF, else the whole file;
 * --max-mib keeps its first M MiB (for quick runs on very large files).
 */
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/gguf.h"
#include "common/opt.h"
#include "launcherd/engine/load_uring.h"

#ifdef RS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define PLAIN_CHUNK (4u << 20)

struct span {
    const char *path;
    uint64_t off, len;
};

static void drop_cache(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return;
    fsync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

/* read() of the span in 4 MiB pieces into one buffer, with a touch per page like the sinks. */
static double plain_read(const struct span *s, volatile uint64_t *sink)
{
    int fd = open(s->path, O_RDONLY);
    char *buf = malloc(PLAIN_CHUNK);
    if (fd < 0 || buf == NULL)
        return -1;
    uint64_t t0 = rs_clock_ns(), done = 0, acc = 0;
    while (done < s->len) {
        size_t want = s->len - done < PLAIN_CHUNK ? (size_t)(s->len - done) : PLAIN_CHUNK;
        ssize_t n = pread(fd, buf, want, (off_t)(s->off + done));
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i += 4096)
            acc += (uint8_t)buf[i];
        done += (uint64_t)n;
    }
    double dt = (double)(rs_clock_ns() - t0) / 1e9;
    *sink += acc;
    free(buf);
    close(fd);
    return done == s->len ? (double)s->len / 1e9 / dt : -1;
}

static double mmap_touch(const struct span *s, volatile uint64_t *sink)
{
    int fd = open(s->path, O_RDONLY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0)
        return -1;
    uint64_t t0 = rs_clock_ns(), acc = 0;
    const uint8_t *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return -1;
    for (uint64_t i = s->off; i < s->off + s->len; i += 4096)
        acc += m[i];
    munmap((void *)m, (size_t)sb.st_size);
    *sink += acc;
    return (double)s->len / 1e9 / ((double)(rs_clock_ns() - t0) / 1e9);
}

struct touch_ctx {
    uint64_t acc;
};

static rs_err touch_put(void *ctx, unsigned buf, uint64_t off, const void *data, size_t len)
{
    (void)buf, (void)off;
    struct touch_ctx *t = ctx;
    for (size_t i = 0; i < len; i += 4096)
        t->acc += ((const uint8_t *)data)[i];
    return RS_OK;
}

static double uring(const struct span *s, struct rs_load_opts *o, void *const *staging,
                    const struct rs_load_sink *sink, int *direct)
{
    struct rs_load_stats st;
    if (rs_load_file(s->path, s->off, s->len, staging, o, sink, &st) != RS_OK)
        return -1;
    *direct = st.direct;
    return (double)st.bytes / 1e9 / ((double)st.ns / 1e9);
}

#ifdef RS_HAVE_CUDA
/* The GPU path: each staging buffer's copy has an event; a buffer is refilled after it. */
struct gpu_ctx {
    char *dev;
    uint64_t base;
    cudaStream_t stream;
    cudaEvent_t ev[4096];
};

static rs_err gpu_put(void *ctx, unsigned buf, uint64_t off, const void *data, size_t len)
{
    struct gpu_ctx *g = ctx;
    if (cudaMemcpyAsync(g->dev + (off - g->base), data, len, cudaMemcpyHostToDevice, g->stream) !=
            cudaSuccess ||
        cudaEventRecord(g->ev[buf], g->stream) != cudaSuccess)
        return RS_EDEVICE;
    return RS_OK;
}

static rs_err gpu_wait(void *ctx, unsigned buf)
{
    struct gpu_ctx *g = ctx;
    return cudaEventSynchronize(g->ev[buf]) == cudaSuccess ? RS_OK : RS_EDEVICE;
}

/* Staging from cudaHostAlloc and a device buffer of the span; -1 without a device. */
static double gpu_load(const struct span *s, struct rs_load_opts *o, int *direct)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
        return -2;
    struct gpu_ctx g = {.base = s->off};
    void *staging[4096];
    unsigned nb = rs_load_staging_count(o);
    double r = -1;
    if (cudaMalloc((void **)&g.dev, s->len) != cudaSuccess || cudaStreamCreate(&g.stream) != 0)
        return -1;
    for (unsigned i = 0; i < nb; i++)
        if (cudaHostAlloc(&staging[i], rs_load_staging_bytes(o), cudaHostAllocDefault) != 0 ||
            cudaEventCreateWithFlags(&g.ev[i], cudaEventDisableTiming) != 0)
            return -1;
    struct rs_load_sink sink = {&g, gpu_put, gpu_wait};
    uint64_t t0 = rs_clock_ns();
    struct rs_load_stats st;
    if (rs_load_file(s->path, s->off, s->len, staging, o, &sink, &st) == RS_OK &&
        cudaStreamSynchronize(g.stream) == cudaSuccess)
        r = (double)s->len / 1e9 / ((double)(rs_clock_ns() - t0) / 1e9);
    *direct = st.direct;
    for (unsigned i = 0; i < nb; i++) {
        cudaFreeHost(staging[i]);
        cudaEventDestroy(g.ev[i]);
    }
    cudaStreamDestroy(g.stream);
    cudaFree(g.dev);
    return r;
}
#endif

static void line(const char *temp, const char *what, double gbs, double ref)
{
    if (gbs == -2)
        printf("%-5s %-34s  (no CUDA device)\n", temp, what);
    else if (gbs < 0)
        printf("%-5s %-34s  FAILED\n", temp, what);
    else
        printf("%-5s %-34s %7.2f GB/s  %5.2fx read()\n", temp, what, gbs, gbs / ref);
}

static double best(double a, double b)
{
    return a > b ? a : b;
}

/* One temperature (cold: pages dropped before each run), best of reps per mode. */
static void run_all(const struct span *s, int cold, int reps, struct rs_load_opts *o,
                    void *const *staging)
{
    volatile uint64_t sink = 0;
    struct touch_ctx tc = {0};
    struct rs_load_sink ts = {&tc, touch_put, NULL};
    double r_plain = -1, r_buf = -1, r_dir = -1, r_mmap = -1, r_gpu = -2;
    int d_buf = 0, d_dir = 0, d_gpu = 0;
    const char *temp = cold ? "cold" : "warm";
    if (!cold)
        plain_read(s, &sink); /* fill the cache */
    for (int r = 0; r < reps; r++) {
        if (cold)
            drop_cache(s->path);
        r_plain = best(r_plain, plain_read(s, &sink));
        if (cold)
            drop_cache(s->path);
        o->direct = 0;
        r_buf = best(r_buf, uring(s, o, staging, &ts, &d_buf));
        if (cold)
            drop_cache(s->path);
        o->direct = 1;
        r_dir = best(r_dir, uring(s, o, staging, &ts, &d_dir));
        if (cold)
            drop_cache(s->path);
        r_mmap = best(r_mmap, mmap_touch(s, &sink));
#ifdef RS_HAVE_CUDA
        if (cold)
            drop_cache(s->path);
        r_gpu = best(r_gpu, gpu_load(s, o, &d_gpu));
#endif
    }
    (void)d_buf, (void)d_gpu;
    line(temp, "read() 4 MiB sequential", r_plain, r_plain);
    line(temp, "io_uring, page cache", r_buf, r_plain);
    line(temp, d_dir ? "io_uring, O_DIRECT" : "io_uring, O_DIRECT refused->cache", r_dir, r_plain);
    line(temp, "mmap + touch every page", r_mmap, r_plain);
    line(temp, "io_uring -> pinned -> GPU", r_gpu, r_plain);
    fflush(stdout);
}

static int find_span(const char *path, struct span *s)
{
    char err[256];
    rs_gguf *g;
    struct stat sb;
    s->path = path;
    if (rs_gguf_open(path, &g, err, sizeof(err)) == RS_OK) {
        s->off = rs_gguf_data_offset(g);
        s->len = rs_gguf_file_size(g) - s->off;
        rs_gguf_close(&g);
        return 0;
    }
    if (stat(path, &sb) != 0 || sb.st_size == 0)
        return -1;
    s->off = 0;
    s->len = (uint64_t)sb.st_size;
    return 0;
}

struct load_args {
    int reps, mode; /* mode: 0 cold, 1 warm, 2 both */
    uint32_t depth, chunk_kib;
    uint64_t max_mib;
};

static const char *const modes[] = {"cold", "warm", "both", NULL};

#define LA(f) offsetof(struct load_args, f)

int main(int argc, char **argv)
{
    struct span s;
    struct rs_load_opts o;
    struct load_args a = {3, 2, 0, 0, 0};
    rs_load_opts_default(&o);
    o.progress = 0;
    a.depth = o.depth;
    a.chunk_kib = (uint32_t)(o.chunk / 1024);
    const struct rs_opt opts[] = {
        {.name = "reps", .kind = RS_OPT_INT, .off = LA(reps), .min = 1, .max = 1000, .arg = "N",
         .help = "runs per figure, the best is shown (default 3)"},
        {.name = "mode", .kind = RS_OPT_CHOICE, .off = LA(mode), .choices = modes,
         .arg = "cold|warm|both", .help = "page cache dropped, kept, or both (default both)"},
        {.name = "depth", .kind = RS_OPT_U32, .off = LA(depth), .min = RS_LOAD_MIN_DEPTH,
         .max = 4096, .arg = "D", .help = "io_uring queue depth"},
        {.name = "chunk-kib", .kind = RS_OPT_U32, .off = LA(chunk_kib),
         .min = 4, .max = 1 << 20, .arg = "K", .help = "read size, a multiple of 4 KiB"},
        {.name = "max-mib", .kind = RS_OPT_U64, .off = LA(max_mib), .min = 1,
         .max = 1 << 30, .arg = "M", .help = "read at most M MiB of the span"},
        {0},
    };
    struct rs_opt_group g = {NULL, opts, &a, NULL};
    int first, code = rs_opt_main("bench_load", "usage: bench_load FILE [options]\n"
                                  "io_uring weight-load throughput of FILE's tensor data.\n",
                                  &g, 1, argc, argv, RS_OPT_OPERANDS, &first);
    if (code >= 0)
        return code;
    if (argc - first != 1 || find_span(argv[first], &s) != 0) {
        fprintf(stderr, "bench_load: give one readable FILE (see --help)\n");
        return 2;
    }
    int reps = a.reps, mode = a.mode;
    o.depth = a.depth;
    o.chunk = (size_t)a.chunk_kib * 1024;
    if (a.max_mib != 0 && a.max_mib << 20 < s.len)
        s.len = a.max_mib << 20;
    if (reps < 1 || o.depth < RS_LOAD_MIN_DEPTH || o.depth > 4096 || o.chunk % 4096 != 0) {
        fprintf(stderr, "bench_load: reps >= 1, depth 16..4096, chunk a multiple of 4 KiB\n");
        return 2;
    }
    unsigned nb = rs_load_staging_count(&o);
    void **staging = calloc(nb, sizeof(void *));
    for (unsigned i = 0; i < nb; i++)
        if (posix_memalign(&staging[i], RS_LOAD_ALIGN, rs_load_staging_bytes(&o)) != 0)
            return 1;
    printf("bench_load: %s, %.3f GB span at offset %llu, depth %u, %zu KiB reads, best of %d\n",
           s.path, (double)s.len / 1e9, (unsigned long long)s.off, o.depth, o.chunk / 1024, reps);
    if (mode != 1)
        run_all(&s, 1, reps, &o, staging);
    if (mode != 0)
        run_all(&s, 0, reps, &o, staging);
    for (unsigned i = 0; i < nb; i++)
        free(staging[i]);
    free(staging);
    return 0;
}

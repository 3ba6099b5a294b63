/* SPDX-License-Identifier: MIT */
/*
 * Bulk file reads with io_uring (liburing) for weight loading: one byte
 * span of a file (a GGUF's tensor data section) is read as large chunks,
 * many in flight, into caller-owned staging buffers (page-locked ones for a
 * GPU), and each chunk is handed to a sink that copies it on (memcpy, or
 * cudaMemcpyAsync into device memory). O_DIRECT is used when the file
 * system takes it, so a cold load streams from the disk without filling the
 * page cache twice. Loads over a second show a progress bar on stderr.
 * Leaves out: the CPU backend, which keeps mmap (launcherd/README.md, "Weight
 * loading": bench/load measured mmap as fast or faster on a warm cache and
 * it shares the page cache between restarts), and writing.
 */
#ifndef RS_ENGINE_LOAD_URING_H
#define RS_ENGINE_LOAD_URING_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define RS_LOAD_MIN_DEPTH 16 /* reads in flight, at least */
#define RS_LOAD_DEFAULT_DEPTH 32
#define RS_LOAD_DEFAULT_CHUNK                                                                      \
    (1u << 20)              /* bytes per read (bench/load: best warm, near best cold) */
#define RS_LOAD_ALIGN 4096u /* O_DIRECT alignment of offsets, sizes, buffers */

/* Where chunks go. put and wait run on the loading thread. */
struct rs_load_sink {
    void *ctx;
    /*
     * Takes len bytes of the file starting at file_off, held in staging
     * buffer `buf` (valid until this sink's wait(buf) returns, or until put
     * returns when wait is NULL). Chunks arrive in completion order, not
     * file order; together they cover the span exactly once. Returning an
     * error stops the load with that error.
     */
    rs_err (*put)(void *ctx, unsigned buf, uint64_t file_off, const void *data, size_t len);
    /* Optional: blocks until buffer buf's last put is finished with (e.g. its copy's event). */
    rs_err (*wait)(void *ctx, unsigned buf);
};

struct rs_load_opts {
    unsigned depth;    /* reads in flight, >= RS_LOAD_MIN_DEPTH; 0 = RS_LOAD_DEFAULT_DEPTH */
    size_t chunk;      /* bytes per read, a multiple of RS_LOAD_ALIGN; 0 = RS_LOAD_DEFAULT_CHUNK */
    int direct;        /* 1: O_DIRECT when the file system accepts it; 0: through the page cache */
    int progress;      /* 1: progress bar on stderr once the load has run for a second */
    const char *label; /* name for the progress bar and logs (e.g. the file name); may be NULL */
};

/* What a load did. */
struct rs_load_stats {
    uint64_t bytes;      /* bytes handed to the sink (the span's length) */
    uint64_t read_bytes; /* bytes read from the file (aligned windows may read a little more) */
    uint64_t ns;         /* wall time of the load */
    uint32_t reads;      /* read requests completed (short reads resubmitted count again) */
    int direct;          /* 1 when O_DIRECT was in effect */
};

/* Defaults: depth 32, 1 MiB chunks, O_DIRECT, progress bar on. */
void rs_load_opts_default(struct rs_load_opts *o);

/*
 * Bytes of staging one load needs per buffer (chunk + one alignment unit,
 * since an unaligned span start shifts every window) and the number of
 * buffers (= depth). The caller allocates n buffers of that size, each
 * RS_LOAD_ALIGN-aligned.
 */
size_t rs_load_staging_bytes(const struct rs_load_opts *o);
unsigned rs_load_staging_count(const struct rs_load_opts *o);

/*
 * Reads bytes [off, off + len) of the file at path through `sink`, using
 * staging[0 .. rs_load_staging_count(o)) (each rs_load_staging_bytes(o)
 * bytes, RS_LOAD_ALIGN-aligned). o may be NULL (defaults). Returns RS_OK
 * with *st filled (st may be NULL), RS_EINVAL (bad options, unaligned
 * staging, len 0), RS_EIO (open or read failed, or the file ends before
 * off + len; logged with the offset), RS_ENOMEM (ring set-up), or what the
 * sink returned. Any one thread; no global state.
 */
rs_err rs_load_file(const char *path, uint64_t off, uint64_t len, void *const *staging,
                    const struct rs_load_opts *o, const struct rs_load_sink *sink,
                    struct rs_load_stats *st);

/*
 * Fraction (0..1) of the pages of [off, off + len) of the file at path that
 * are in the page cache now (mincore over a private read-only mapping), or
 * -1 when it cannot tell. Loaders use it to pick O_DIRECT only for a cold
 * file: bench/load measured O_DIRECT several times slower than the page
 * cache when the file is cached. Any thread.
 */
double rs_load_cached_fraction(const char *path, uint64_t off, uint64_t len);

#endif

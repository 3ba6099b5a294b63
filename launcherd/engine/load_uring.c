/* SPDX-License-Identifier: MIT */
/*
 * io_uring span reader behind load_uring.h. The span is cut into windows
 * of `chunk` bytes starting at the span's start rounded down to 4 KiB, so
 * every O_DIRECT read is aligned; each window is one read into one staging
 * buffer, up to `depth` in flight. A short read is resubmitted for its rest;
 * a read that O_DIRECT refuses (EINVAL) is retried through the page cache
 * and the rest of the load stays there. Where io_uring itself is not
 * available (kernel.io_uring_disabled, seccomp), the same windows are read
 * with pread so a load never fails for want of it (logged once).
 */
#include "launcherd/engine/load_uring.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"

/* One window in flight in one staging buffer. */
struct win {
    uint64_t start; /* file offset of the window (aligned) */
    uint32_t want;  /* bytes the read asks for */
    uint32_t got;   /* bytes read so far */
    int busy;
};

struct loader {
    int fd_direct, fd_buf; /* fd_direct -1 when not in effect */
    uint64_t off, end;     /* the span [off, end) */
    uint64_t first, n_win; /* first window's offset, windows in the span */
    uint64_t next_win;     /* next window to read */
    size_t chunk;
    unsigned depth;
    void *const *staging;
    struct win *w; /* per buffer */
    const struct rs_load_sink *sink;
    const struct rs_load_opts *o;
    struct rs_load_stats st;
    uint64_t t0, last_bar;
    int bar_shown;
};

void rs_load_opts_default(struct rs_load_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->depth = RS_LOAD_DEFAULT_DEPTH;
    o->chunk = RS_LOAD_DEFAULT_CHUNK;
    o->direct = 1;
    o->progress = 1;
}

static void resolve(const struct rs_load_opts *in, struct rs_load_opts *o)
{
    if (in != NULL)
        *o = *in;
    else
        rs_load_opts_default(o);
    if (o->depth == 0)
        o->depth = RS_LOAD_DEFAULT_DEPTH;
    if (o->chunk == 0)
        o->chunk = RS_LOAD_DEFAULT_CHUNK;
}

size_t rs_load_staging_bytes(const struct rs_load_opts *in)
{
    struct rs_load_opts o;
    resolve(in, &o);
    return o.chunk;
}

unsigned rs_load_staging_count(const struct rs_load_opts *in)
{
    struct rs_load_opts o;
    resolve(in, &o);
    return o.depth;
}

static void progress(struct loader *l, int final)
{
    if (!l->o->progress)
        return;
    uint64_t now = rs_clock_ns();
    if (!final && (now - l->t0 < 1000000000ull || now - l->last_bar < 100000000ull))
        return;
    if (final && !l->bar_shown)
        return;
    l->last_bar = now;
    l->bar_shown = 1;
    double frac = (double)l->st.bytes / (double)(l->end - l->off), s = (double)(now - l->t0) / 1e9;
    char bar[41];
    int fill = (int)(frac * 40.0);
    for (int i = 0; i < 40; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[40] = '\0';
    fprintf(stderr, "\r%s [%s] %5.1f%% %.2f/%.2f GB %.2f GB/s%s",
            l->o->label ? l->o->label : "loading", bar, 100.0 * frac, (double)l->st.bytes / 1e9,
            (double)(l->end - l->off) / 1e9, (double)l->st.bytes / 1e9 / (s > 0 ? s : 1e-9),
            final ? "\n" : "");
    fflush(stderr);
}

/* Fills buffer b's window record for window k. */
static void plan_window(struct loader *l, unsigned b, uint64_t k)
{
    struct win *w = &l->w[b];
    uint64_t start = l->first + k * l->chunk;
    uint64_t end_al = (l->end + RS_LOAD_ALIGN - 1) & ~(uint64_t)(RS_LOAD_ALIGN - 1);
    uint64_t stop = start + l->chunk < end_al ? start + l->chunk : end_al;
    w->start = start;
    w->want = (uint32_t)(stop - start);
    w->got = 0;
    w->busy = 1;
}

/* Hands the useful part of a finished window to the sink. */
static rs_err deliver(struct loader *l, unsigned b)
{
    struct win *w = &l->w[b];
    uint64_t lo = w->start > l->off ? w->start : l->off;
    uint64_t hi = w->start + w->want < l->end ? w->start + w->want : l->end;
    const char *data = (const char *)l->staging[b] + (lo - w->start);
    rs_err rc = l->sink->put(l->sink->ctx, b, lo, data, (size_t)(hi - lo));
    l->st.bytes += hi - lo;
    w->busy = 0;
    progress(l, 0);
    return rc;
}

/*
 * Accounts res bytes read into window b. Returns 1 when the window is
 * complete, 0 when the rest must be read again, or an rs_err.
 */
static int account(struct loader *l, unsigned b, int res)
{
    struct win *w = &l->w[b];
    uint64_t need = (w->start + w->want < l->end ? w->start + w->want : l->end) - w->start;
    if (res < 0) {
        rs_log_error("load: read of %u bytes at offset %llu: %s", w->want - w->got,
                     (unsigned long long)(w->start + w->got), strerror(-res));
        return RS_EIO;
    }
    w->got += (uint32_t)res;
    l->st.read_bytes += (uint64_t)res;
    l->st.reads++;
    if (w->got >= need)
        return 1;
    if (res == 0) {
        rs_log_error("load: the file ends at offset %llu, before the span's end %llu",
                     (unsigned long long)(w->start + w->got), (unsigned long long)l->end);
        return RS_EIO;
    }
    return 0;
}

static void prep(struct loader *l, struct io_uring *ring, unsigned b)
{
    struct win *w = &l->w[b];
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    int fd = l->fd_direct >= 0 ? l->fd_direct : l->fd_buf;
    io_uring_prep_read(sqe, fd, (char *)l->staging[b] + w->got, w->want - w->got,
                       w->start + w->got);
    io_uring_sqe_set_data64(sqe, b);
}

/* Queues reads into every idle buffer while windows remain. */
static rs_err fill(struct loader *l, struct io_uring *ring, unsigned *inflight)
{
    for (unsigned b = 0; b < l->depth && l->next_win < l->n_win; b++) {
        if (l->w[b].busy)
            continue;
        if (l->sink->wait != NULL) {
            rs_err rc = l->sink->wait(l->sink->ctx, b);
            if (rc != RS_OK)
                return rc;
        }
        plan_window(l, b, l->next_win++);
        prep(l, ring, b);
        (*inflight)++;
    }
    return RS_OK;
}

/* One completion: retry, resubmit the rest, or deliver. */
static rs_err complete(struct loader *l, struct io_uring *ring, unsigned b, int res,
                       unsigned *inflight)
{
    if (res == -EINTR || res == -EAGAIN) {
        prep(l, ring, b);
        return RS_OK;
    }
    if (res == -EINVAL && l->fd_direct >= 0) {
        rs_log_info("load: O_DIRECT read refused (EINVAL); reading through the page cache");
        l->fd_direct = -1; /* closed by the caller, which kept the fd */
        prep(l, ring, b);
        return RS_OK;
    }
    int r = account(l, b, res);
    if (r == 0) {
        prep(l, ring, b);
        return RS_OK;
    }
    (*inflight)--;
    return r < 0 ? (rs_err)r : deliver(l, b);
}

static rs_err run_uring(struct loader *l, struct io_uring *ring)
{
    unsigned inflight = 0;
    rs_err rc = RS_OK;
    while (rc == RS_OK && (inflight > 0 || l->next_win < l->n_win)) {
        if ((rc = fill(l, ring, &inflight)) != RS_OK)
            break;
        int s = io_uring_submit_and_wait(ring, 1);
        if (s < 0 && s != -EINTR) {
            rs_log_error("load: io_uring submit: %s", strerror(-s));
            rc = RS_EIO;
            break;
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(ring, head, cqe)
        {
            seen++;
            if (rc == RS_OK)
                rc = complete(l, ring, (unsigned)io_uring_cqe_get_data64(cqe), cqe->res, &inflight);
            else
                inflight--; /* after an error: a read reaped and dropped */
        }
        io_uring_cq_advance(ring, seen);
    }
    /* On an error, reap what is still in flight so no read lands in a buffer after return. */
    if (rc != RS_OK && inflight > 0)
        io_uring_submit(ring); /* resubmissions prepared in the last pass */
    while (rc != RS_OK && inflight > 0) {
        struct io_uring_cqe *cqe;
        if (io_uring_wait_cqe(ring, &cqe) != 0)
            break;
        io_uring_cqe_seen(ring, cqe);
        inflight--;
    }
    return rc;
}

/* The same windows with pread, for hosts without io_uring. */
static rs_err run_pread(struct loader *l)
{
    for (; l->next_win < l->n_win; l->next_win++) {
        if (l->sink->wait != NULL) {
            rs_err rc = l->sink->wait(l->sink->ctx, 0);
            if (rc != RS_OK)
                return rc;
        }
        plan_window(l, 0, l->next_win);
        int r = 0;
        while (r == 0) {
            struct win *w = &l->w[0];
            int fd = l->fd_direct >= 0 ? l->fd_direct : l->fd_buf;
            ssize_t n = pread(fd, (char *)l->staging[0] + w->got, w->want - w->got,
                              (off_t)(w->start + w->got));
            if (n < 0 && errno == EINVAL && l->fd_direct >= 0) {
                l->fd_direct = -1;
                continue;
            }
            if (n < 0 && errno == EINTR)
                continue;
            r = account(l, 0, n < 0 ? -errno : (int)n);
        }
        if (r < 0)
            return (rs_err)r;
        rs_err rc = deliver(l, 0);
        if (rc != RS_OK)
            return rc;
    }
    return RS_OK;
}

static rs_err check_args(const char *path, uint64_t len, void *const *staging,
                         const struct rs_load_opts *o, const struct rs_load_sink *sink)
{
    const char *bad = NULL;
    if (path == NULL || sink == NULL || sink->put == NULL || staging == NULL)
        bad = "missing path, sink or staging";
    else if (len == 0)
        bad = "empty span";
    else if (o->depth < RS_LOAD_MIN_DEPTH || o->depth > 4096)
        bad = "depth must be 16..4096";
    else if (o->chunk % RS_LOAD_ALIGN != 0 || o->chunk > (1u << 30))
        bad = "chunk must be a multiple of 4096, at most 1 GiB";
    for (unsigned b = 0; bad == NULL && b < o->depth; b++)
        if (staging[b] == NULL || ((uintptr_t)staging[b] & (RS_LOAD_ALIGN - 1)) != 0)
            bad = "staging buffers must be 4096-aligned";
    if (bad != NULL) {
        rs_log_error("load %s: %s", path ? path : "(null)", bad);
        return RS_EINVAL;
    }
    return RS_OK;
}

/* Opens the buffered and (when asked and accepted) O_DIRECT descriptors; checks the size. */
static rs_err open_file(struct loader *l, const char *path, int direct)
{
    struct stat sb;
    l->fd_direct = -1;
    l->fd_buf = open(path, O_RDONLY | O_CLOEXEC);
    if (l->fd_buf < 0 || fstat(l->fd_buf, &sb) != 0) {
        rs_log_error("load: cannot open %s: %s", path, strerror(errno));
        return RS_EIO;
    }
    if ((uint64_t)sb.st_size < l->end) {
        rs_log_error("load: %s is %lld bytes, the span ends at %llu", path, (long long)sb.st_size,
                     (unsigned long long)l->end);
        return RS_EIO;
    }
    if (direct)
        l->fd_direct = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT); /* -1: not supported here */
    return RS_OK;
}

rs_err rs_load_file(const char *path, uint64_t off, uint64_t len, void *const *staging,
                    const struct rs_load_opts *in, const struct rs_load_sink *sink,
                    struct rs_load_stats *st)
{
    struct rs_load_opts o;
    resolve(in, &o);
    rs_err rc = check_args(path, len, staging, &o, sink);
    if (rc != RS_OK)
        return rc;
    struct loader l = {.off = off,
                       .end = off + len,
                       .chunk = o.chunk,
                       .depth = o.depth,
                       .staging = staging,
                       .sink = sink,
                       .o = &o,
                       .t0 = rs_clock_ns()};
    l.first = off & ~(uint64_t)(RS_LOAD_ALIGN - 1);
    l.n_win = (l.end - l.first + o.chunk - 1) / o.chunk;
    l.w = calloc(o.depth, sizeof(*l.w));
    if (l.w == NULL)
        return RS_ENOMEM;
    rc = open_file(&l, path, o.direct);
    int fd_direct = l.fd_direct;
    struct io_uring ring;
    int ur = rc == RS_OK ? io_uring_queue_init(o.depth, &ring, 0) : -1;
    if (rc == RS_OK && ur < 0)
        rs_log_warn("load: io_uring unavailable (%s); reading %s with pread", strerror(-ur), path);
    if (rc == RS_OK)
        rc = ur == 0 ? run_uring(&l, &ring) : run_pread(&l);
    if (ur == 0)
        io_uring_queue_exit(&ring);
    l.st.direct = l.fd_direct >= 0;
    l.st.ns = rs_clock_ns() - l.t0;
    if (rc == RS_OK)
        progress(&l, 1);
    if (fd_direct >= 0)
        close(fd_direct);
    if (l.fd_buf >= 0)
        close(l.fd_buf);
    free(l.w);
    if (st != NULL)
        *st = l.st;
    return rc;
}

double rs_load_cached_fraction(const char *path, uint64_t off, uint64_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || len == 0 || off + len > (uint64_t)sb.st_size) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    long page = sysconf(_SC_PAGESIZE);
    uint64_t first = off / (uint64_t)page * (uint64_t)page, span = off + len - first;
    void *m = mmap(NULL, (size_t)span, PROT_READ, MAP_SHARED, fd, (off_t)first);
    close(fd);
    if (m == MAP_FAILED)
        return -1;
    size_t n = (size_t)((span + (uint64_t)page - 1) / (uint64_t)page), in = 0;
    unsigned char *vec = malloc(n);
    double r = -1;
    if (vec != NULL && mincore(m, (size_t)span, vec) == 0) {
        for (size_t i = 0; i < n; i++)
            in += vec[i] & 1;
        r = (double)in / (double)n;
    }
    free(vec);
    munmap(m, (size_t)span);
    return r;
}

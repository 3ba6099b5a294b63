/* SPDX-License-Identifier: MIT */
/*
 * The io_uring span reader (launcherd/engine/load_uring.h): every byte of a
 * span handed to the sink exactly once and equal to the file, for aligned
 * and unaligned spans, through O_DIRECT and the page cache, on ext4 and
 * tmpfs; a staging buffer never refilled before the sink's wait released it;
 * errors (short file, missing file, bad options, a failing sink) returned as
 * documented; and a real GGUF's tensor data section read back equal to the
 * reader's mapping.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/gguf.h"
#include "launcherd/engine/load_uring.h"
#include "tests/rs_test.h"

#define NBUF_MAX 64

struct collect {
    uint8_t *dst;  /* the span's bytes by file offset - base */
    uint8_t *seen; /* times each byte was delivered */
    uint64_t base, len;
    int pending[NBUF_MAX]; /* put and not yet waited for */
    int n_put, n_wait, refill_early, fail_at;
};

static rs_err put(void *ctx, unsigned buf, uint64_t off, const void *data, size_t len)
{
    struct collect *c = ctx;
    if (c->fail_at > 0 && ++c->n_put == c->fail_at)
        return RS_EDEVICE;
    if (off < c->base || off + len > c->base + c->len)
        return RS_ERANGE;
    memcpy(c->dst + (off - c->base), data, len);
    for (size_t i = 0; i < len; i++)
        c->seen[off - c->base + i]++;
    c->refill_early += c->pending[buf];
    c->pending[buf] = 1;
    return RS_OK;
}

static rs_err wait_buf(void *ctx, unsigned buf)
{
    struct collect *c = ctx;
    c->n_wait++;
    c->pending[buf] = 0;
    return RS_OK;
}

/* A file of n pseudo-random bytes; returns its contents (caller frees). */
static uint8_t *make_file(const char *path, size_t n)
{
    uint8_t *b = malloc(n);
    uint64_t s = 0x9e3779b97f4a7c15ull ^ n;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        b[i] = (uint8_t)s;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, b, n) != (ssize_t)n) {
        free(b);
        b = NULL;
    }
    if (fd >= 0)
        close(fd);
    return b;
}

struct staging {
    void *buf[NBUF_MAX];
    unsigned n;
};

static int staging_alloc(struct staging *s, const struct rs_load_opts *o)
{
    s->n = rs_load_staging_count(o);
    if (s->n > NBUF_MAX)
        return 1;
    for (unsigned i = 0; i < s->n; i++)
        if (posix_memalign(&s->buf[i], RS_LOAD_ALIGN, rs_load_staging_bytes(o)) != 0)
            return 1;
    return 0;
}

static void staging_free(struct staging *s)
{
    for (unsigned i = 0; i < s->n; i++)
        free(s->buf[i]);
}

/* Reads [off, off+len) of path and checks it against ref; returns 0 when exact. */
static int read_check(const char *path, const uint8_t *ref, uint64_t off, uint64_t len,
                      const struct rs_load_opts *o, int use_wait, struct rs_load_stats *st)
{
    struct staging s;
    RS_CHECK(staging_alloc(&s, o) == 0);
    struct collect c = {.dst = calloc(1, len), .seen = calloc(1, len), .base = off, .len = len};
    struct rs_load_sink sink = {&c, put, use_wait ? wait_buf : NULL};
    rs_err rc = rs_load_file(path, off, len, s.buf, o, &sink, st);
    RS_CHECK_MSG(rc == RS_OK, "%s", rs_strerror(rc));
    RS_CHECK(memcmp(c.dst, ref + off, len) == 0);
    for (uint64_t i = 0; i < len; i++)
        RS_CHECK_MSG(c.seen[i] == 1, "byte %llu delivered %d times", (unsigned long long)i,
                     c.seen[i]);
    RS_CHECK(st->bytes == len && st->read_bytes >= len && st->reads >= 1);
    free(c.dst);
    free(c.seen);
    staging_free(&s);
    return 0;
}

static void small_opts(struct rs_load_opts *o, int direct)
{
    rs_load_opts_default(o);
    o->depth = 16;
    o->chunk = 64 * 1024;
    o->direct = direct;
    o->progress = 0;
}

static int test_spans_read_exactly(void)
{
    char path[512];
    size_t n = 5 * 1024 * 1024 + 123;
    snprintf(path, sizeof(path), "%s/span.bin", rs_test_tmpdir());
    uint8_t *ref = make_file(path, n);
    RS_CHECK(ref != NULL);
    static const uint64_t spans[][2] = {{0, 5 * 1024 * 1024 + 123},
                                        {1, 100},
                                        {4095, 2},
                                        {4096, 65536},
                                        {12345, 3 * 1024 * 1024 + 7},
                                        {5 * 1024 * 1024, 123},
                                        {65535, 65537}};
    for (int direct = 0; direct <= 1; direct++)
        for (size_t i = 0; i < sizeof(spans) / sizeof(spans[0]); i++) {
            struct rs_load_opts o;
            struct rs_load_stats st;
            small_opts(&o, direct);
            if (read_check(path, ref, spans[i][0], spans[i][1], &o, i % 2, &st) != 0) {
                fprintf(stderr, "span %zu (direct %d) failed\n", i, direct);
                return 1;
            }
            RS_CHECK(direct || st.direct == 0);
        }
    unlink(path);
    free(ref);
    return 0;
}

static int test_direct_on_ext4_and_fallback_on_tmpfs(void)
{
    char path[512];
    size_t n = 2 * 1024 * 1024 + 9;
    struct rs_load_opts o;
    struct rs_load_stats st;
    snprintf(path, sizeof(path), "%s/direct.bin", rs_test_tmpdir());
    uint8_t *ref = make_file(path, n);
    RS_CHECK(ref != NULL);
    small_opts(&o, 1);
    RS_CHECK(read_check(path, ref, 3, n - 3, &o, 1, &st) == 0);
    fprintf(stderr, "%s: O_DIRECT %s\n", rs_test_tmpdir(), st.direct ? "in effect" : "refused");
    unlink(path);
    /* tmpfs: O_DIRECT may be refused at open or read; the content must not care. */
    char name[64];
    rs_test_unique_name("/dev/shm/rs-load", name, sizeof(name));
    uint8_t *ref2 = make_file(name, n);
    RS_CHECK(ref2 != NULL);
    RS_CHECK(read_check(name, ref2, 4096, n - 4096, &o, 0, &st) == 0);
    unlink(name);
    free(ref);
    free(ref2);
    return 0;
}

static int test_buffers_refilled_only_after_wait(void)
{
    char path[512];
    size_t n = 3 * 1024 * 1024;
    struct rs_load_opts o;
    struct staging s;
    small_opts(&o, 0);
    snprintf(path, sizeof(path), "%s/wait.bin", rs_test_tmpdir());
    uint8_t *ref = make_file(path, n);
    RS_CHECK(ref != NULL && staging_alloc(&s, &o) == 0);
    struct collect c = {.dst = calloc(1, n), .seen = calloc(1, n), .base = 0, .len = n};
    /* A put into a buffer still pending would mean it was refilled before wait released it. */
    struct rs_load_sink sink = {&c, put, wait_buf};
    RS_CHECK(rs_load_file(path, 0, n, s.buf, &o, &sink, NULL) == RS_OK);
    RS_CHECK(memcmp(c.dst, ref, n) == 0);
    /* 48 windows over 16 buffers: each refill waited first. */
    RS_CHECK_MSG(c.n_wait >= 48 && c.refill_early == 0, "%d waits, %d early refills", c.n_wait,
                 c.refill_early);
    free(c.dst);
    free(c.seen);
    staging_free(&s);
    unlink(path);
    free(ref);
    return 0;
}

static int test_errors_are_reported(void)
{
    char path[512];
    size_t n = 1024 * 1024;
    struct rs_load_opts o;
    struct staging s;
    small_opts(&o, 1);
    snprintf(path, sizeof(path), "%s/err.bin", rs_test_tmpdir());
    uint8_t *ref = make_file(path, n);
    RS_CHECK(ref != NULL && staging_alloc(&s, &o) == 0);
    struct collect c = {.dst = calloc(1, n + 10), .seen = calloc(1, n + 10), .len = n + 10};
    struct rs_load_sink sink = {&c, put, NULL};
    RS_CHECK(rs_load_file(path, 0, n + 10, s.buf, &o, &sink, NULL) == RS_EIO);
    RS_CHECK(rs_load_file("/nonexistent/file", 0, 10, s.buf, &o, &sink, NULL) == RS_EIO);
    RS_CHECK(rs_load_file(path, 0, 0, s.buf, &o, &sink, NULL) == RS_EINVAL);
    struct rs_load_opts bad = o;
    bad.depth = 8;
    RS_CHECK(rs_load_file(path, 0, 10, s.buf, &bad, &sink, NULL) == RS_EINVAL);
    bad = o;
    bad.chunk = 5000;
    RS_CHECK(rs_load_file(path, 0, 10, s.buf, &bad, &sink, NULL) == RS_EINVAL);
    void *shifted[NBUF_MAX];
    memcpy(shifted, s.buf, sizeof(void *) * s.n);
    shifted[3] = (char *)s.buf[3] + 8;
    RS_CHECK(rs_load_file(path, 0, 10, shifted, &o, &sink, NULL) == RS_EINVAL);
    struct rs_load_sink no_put = {&c, NULL, NULL};
    RS_CHECK(rs_load_file(path, 0, 10, s.buf, &o, &no_put, NULL) == RS_EINVAL);
    /* The sink's own error stops the load and comes back unchanged. */
    c.len = n;
    c.fail_at = 3;
    RS_CHECK(rs_load_file(path, 0, n, s.buf, &o, &sink, NULL) == RS_EDEVICE);
    free(c.dst);
    free(c.seen);
    staging_free(&s);
    unlink(path);
    free(ref);
    return 0;
}

static int test_gguf_data_section_matches_mapping(void)
{
    char ref_path[1024], err[256];
    if (rs_test_refdata("stories260K.gguf", ref_path, sizeof(ref_path)) == NULL)
        return RS_TEST_SKIP;
    rs_gguf *g;
    RS_CHECK(rs_gguf_open(ref_path, &g, err, sizeof(err)) == RS_OK);
    uint64_t off = rs_gguf_data_offset(g), len = rs_gguf_file_size(g) - off;
    struct rs_load_opts o;
    struct rs_load_stats st;
    struct staging s;
    rs_load_opts_default(&o);
    o.progress = 0;
    RS_CHECK(staging_alloc(&s, &o) == 0);
    struct collect c = {.dst = calloc(1, len), .seen = calloc(1, len), .base = off, .len = len};
    struct rs_load_sink sink = {&c, put, wait_buf};
    RS_CHECK(rs_load_file(ref_path, off, len, s.buf, &o, &sink, &st) == RS_OK);
    for (uint64_t i = 0; i < rs_gguf_n_tensors(g); i++) {
        const struct rs_gguf_tensor *t = rs_gguf_tensor(g, i);
        RS_CHECK_MSG(memcmp(c.dst + t->offset, t->data, t->nbytes) == 0, "tensor %s", t->name);
    }
    RS_CHECK(st.bytes == len);
    free(c.dst);
    free(c.seen);
    staging_free(&s);
    rs_gguf_close(&g);
    return 0;
}

static int test_cached_fraction_sees_the_page_cache(void)
{
    char path[512];
    size_t n = 4 * 1024 * 1024;
    snprintf(path, sizeof(path), "%s/cached.bin", rs_test_tmpdir());
    uint8_t *ref = make_file(path, n);
    RS_CHECK(ref != NULL);
    int fd = open(path, O_RDONLY);
    RS_CHECK(fd >= 0);
    uint8_t *tmp = malloc(n);
    RS_CHECK(pread(fd, tmp, n, 0) == (ssize_t)n); /* every page cached */
    double warm = rs_load_cached_fraction(path, 100, n - 200);
    RS_CHECK_MSG(warm == 1.0, "warm fraction %f", warm);
    RS_CHECK(fsync(fd) == 0 && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
    double cold = rs_load_cached_fraction(path, 0, n);
    RS_CHECK_MSG(cold >= 0.0 && cold < 0.5, "fraction after dropping the pages %f", cold);
    RS_CHECK(rs_load_cached_fraction(path, 0, n + 1) == -1);
    RS_CHECK(rs_load_cached_fraction("/nonexistent", 0, 1) == -1);
    close(fd);
    unlink(path);
    free(tmp);
    free(ref);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_cached_fraction_sees_the_page_cache),
    RS_TEST(test_spans_read_exactly),
    RS_TEST(test_direct_on_ext4_and_fallback_on_tmpfs),
    RS_TEST(test_buffers_refilled_only_after_wait),
    RS_TEST(test_errors_are_reported),
    RS_TEST(test_gguf_data_section_matches_mapping),
};

RS_TEST_MAIN(cases)

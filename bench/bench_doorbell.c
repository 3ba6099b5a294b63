/* SPDX-License-Identifier: MIT */
/*
 * Doorbell benchmark: one-way latency (p50/p99/p99.9/max) and peak rate of
 * real doorbells (rs_wire_door encode -> rs_zsock PUSH -> ipc:// -> PULL ->
 * decode) between two processes, next to the same measurements over a raw
 * AF_UNIX SOCK_SEQPACKET pair measured in the same run: the kernel's own
 * wake-up latency floor, and its one-write-per-message rate (which zmq can
 * beat by batching several doorbells per write). Latency = receiver's
 * CLOCK_MONOTONIC minus the sent_ns the sender stamped, paced at a moderate
 * rate; the receiver blocks in poll as the daemons do (no spinning). No CPU
 * pinning: figures include scheduling, so a busy host shows in p99.
 * Usage: bench_doorbell [-n latency_msgs] [-r rate_per_s] [-p peak_msgs]
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/opt.h"
#include "ipc/wire_door.h"
#include "ipc/zsock.h"

struct result {
    uint64_t n;        /* messages received */
    double p50, p99, p999, max; /* one-way latency, microseconds */
    double secs;       /* first to last receipt */
};

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void summarize(uint64_t *lat, uint64_t n, uint64_t t0, uint64_t t1, struct result *r)
{
    memset(r, 0, sizeof(*r));
    r->n = n;
    r->secs = (double)(t1 - t0) / 1e9;
    if (n == 0)
        return;
    qsort(lat, n, sizeof(*lat), cmp_u64);
    r->p50 = (double)lat[n / 2] / 1e3;
    r->p99 = (double)lat[n * 99 / 100] / 1e3;
    r->p999 = (double)lat[n * 999 / 1000] / 1e3;
    r->max = (double)lat[n - 1] / 1e3;
}

/* Sleeps until the absolute monotonic time t_ns. */
static void sleep_until(uint64_t t_ns)
{
    struct timespec ts = {(time_t)(t_ns / 1000000000ull), (long)(t_ns % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* ---- raw AF_UNIX floor ---------------------------------------------------- */

static void raw_receiver(int fd, uint64_t n, int out)
{
    uint64_t *lat = calloc(n, sizeof(*lat)), got = 0, t0 = 0, t1 = 0, stamp;
    while (got < n && read(fd, &stamp, sizeof(stamp)) == (ssize_t)sizeof(stamp)) {
        t1 = rs_clock_ns();
        t0 = got == 0 ? t1 : t0;
        if (stamp != 0)
            lat[got] = t1 - stamp;
        got++;
    }
    struct result r;
    summarize(lat, got, t0, t1, &r);
    if (write(out, &r, sizeof(r)) != (ssize_t)sizeof(r))
        _exit(1);
    _exit(0);
}

/* rate 0 = as fast as possible (stamps 0: throughput only). */
static int run_raw(uint64_t n, double rate, struct result *r)
{
    int sv[2], res[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0 || pipe(res) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        raw_receiver(sv[1], n, res[1]);
    }
    close(sv[1]);
    uint64_t next = rs_clock_ns(), step = rate > 0 ? (uint64_t)(1e9 / rate) : 0;
    for (uint64_t i = 0; i < n; i++) {
        if (step) {
            sleep_until(next += step);
        }
        uint64_t stamp = step ? rs_clock_ns() : 0;
        if (write(sv[0], &stamp, sizeof(stamp)) != (ssize_t)sizeof(stamp))
            return -1;
    }
    ssize_t got = read(res[0], r, sizeof(*r));
    waitpid(pid, NULL, 0);
    close(sv[0]);
    close(res[0]);
    close(res[1]);
    return got == (ssize_t)sizeof(*r) ? 0 : -1;
}

/* ---- ZeroMQ doorbells ------------------------------------------------------ */

/* Receives batch_ready doorbells until n arrived or the sentinel (wake, sent_ns 0). */
static void zmq_receiver(const char *ep, uint64_t n, int ready, int out)
{
    void *ctx = zmq_ctx_new();
    rs_zsock *pull;
    uint64_t *lat = calloc(n, sizeof(*lat)), got = 0, t0 = 0, t1 = 0;
    static struct rs_wire_door d;
    struct rs_wire_error err;
    if (rs_zsock_create(ctx, RS_ZSOCK_PULL, ep, NULL, &pull) != RS_OK || lat == NULL)
        _exit(1);
    if (write(ready, "r", 1) != 1)
        _exit(1);
    zmq_msg_t m;
    zmq_msg_init(&m);
    while (got < n) {
        if (rs_zsock_recv(pull, NULL, &m, -1) != RS_OK)
            continue;
        uint64_t now = rs_clock_ns();
        if (rs_wire_door_decode(zmq_msg_data(&m), zmq_msg_size(&m), &d, &err) != RS_OK)
            _exit(2);
        if (d.kind == RS_WIRE_DOOR_WAKE) {
            if (d.sent_ns == 0)
                break; /* sentinel */
            continue;  /* connection probe */
        }
        t1 = now;
        t0 = got == 0 ? now : t0;
        lat[got++] = d.sent_ns ? now - d.sent_ns : 0;
    }
    struct result r;
    summarize(lat, got, t0, t1, &r);
    if (write(out, &r, sizeof(r)) != (ssize_t)sizeof(r))
        _exit(1);
    zmq_msg_close(&m);
    rs_zsock_destroy(&pull);
    zmq_ctx_term(ctx);
    _exit(0);
}

/*
 * Encodes and sends one doorbell; while the queue is full (or not yet connected) it
 * sleeps in zmq_poll for room rather than spinning, which on a small host would take
 * the CPU the receiver needs. Returns how many times it had to wait.
 */
static uint64_t ring(rs_zsock *push, struct rs_wire_door *d, struct rs_wire_buf *buf)
{
    uint64_t waits = 0;
    if (rs_wire_door_encode(d, buf) != RS_OK)
        return 0;
    while (rs_zsock_send(push, buf->data, buf->len) == RS_EAGAIN) {
        zmq_pollitem_t it = {.socket = rs_zsock_handle(push), .events = ZMQ_POLLOUT};
        zmq_poll(&it, 1, 10);
        waits++;
    }
    return waits;
}

static int run_zmq(uint64_t n, double rate, struct result *r, uint64_t *retries, size_t *size)
{
    char ep[128];
    int ready[2], res[2];
    snprintf(ep, sizeof(ep), "ipc:///tmp/rs-bench-door-%d", (int)getpid());
    if (pipe(ready) != 0 || pipe(res) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0)
        zmq_receiver(ep, n, ready[1], res[1]);
    char c;
    if (read(ready[0], &c, 1) != 1)
        return -1;
    void *ctx = zmq_ctx_new();
    rs_zsock *push;
    uint8_t mem[RS_WIRE_DOOR_MSG_MAX];
    struct rs_wire_buf buf;
    rs_wire_buf_init_fixed(&buf, mem, sizeof(mem));
    if (rs_zsock_create(ctx, RS_ZSOCK_PUSH, ep, NULL, &push) != RS_OK)
        return -1;
    struct rs_wire_door probe = {.kind = RS_WIRE_DOOR_WAKE, .sent_ns = 1};
    ring(push, &probe, &buf); /* waits for the connection (IMMEDIATE refuses until then) */
    struct rs_wire_door d = {.kind = RS_WIRE_DOOR_BATCH_READY};
    uint64_t next = rs_clock_ns(), step = rate > 0 ? (uint64_t)(1e9 / rate) : 0;
    *retries = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (step)
            sleep_until(next += step);
        d.u.batch.batch_id = i;
        d.u.batch.ring_slot = i & 63;
        d.sent_ns = step ? rs_clock_ns() : 0;
        *retries += ring(push, &d, &buf);
    }
    *size = buf.len;
    struct rs_wire_door end = {.kind = RS_WIRE_DOOR_WAKE};
    ring(push, &end, &buf);
    ssize_t got = read(res[0], r, sizeof(*r));
    waitpid(pid, NULL, 0);
    rs_zsock_destroy(&push);
    zmq_ctx_term(ctx);
    close(ready[0]);
    close(ready[1]);
    close(res[0]);
    close(res[1]);
    return got == (ssize_t)sizeof(*r) ? 0 : -1;
}

/* In-process encode + decode of a batch_ready and of a 64-entry tokens_ready, ns per doorbell. */
static void codec_cost(uint64_t n, double *small_ns, double *tokens_ns)
{
    static struct rs_wire_door d, back;
    uint8_t mem[RS_WIRE_DOOR_MSG_MAX];
    struct rs_wire_buf buf;
    struct rs_wire_error err;
    uint64_t sum = 0;
    rs_wire_buf_init_fixed(&buf, mem, sizeof(mem));
    for (int pass = 0; pass < 2; pass++) {
        memset(&d, 0, sizeof(d));
        d.kind = pass ? RS_WIRE_DOOR_TOKENS_READY : RS_WIRE_DOOR_BATCH_READY;
        d.n_entries = pass ? 64 : 0;
        for (uint32_t i = 0; i < d.n_entries; i++)
            d.entries[i] = (struct rs_wire_door_tok){i * 7, 1000 + i, 300 + i};
        uint64_t t0 = rs_clock_ns();
        for (uint64_t i = 0; i < n; i++) {
            d.sent_ns = t0 + i;
            d.u.f[0] = i;
            if (rs_wire_door_encode(&d, &buf) == RS_OK &&
                rs_wire_door_decode(buf.data, buf.len, &back, &err) == RS_OK)
                sum += back.u.f[0];
        }
        *(pass ? tokens_ns : small_ns) = (double)(rs_clock_ns() - t0) / (double)n;
    }
    if (sum == 0)
        fprintf(stderr, "codec loop decoded nothing\n");
}

static void print_latency(const char *what, const struct result *r)
{
    printf("  %-38s p50 %7.1f us   p99 %7.1f us   p99.9 %7.1f us   max %8.1f us  (n=%llu)\n",
           what, r->p50, r->p99, r->p999, r->max, (unsigned long long)r->n);
}

struct door_args {
    uint64_t n, peak_n;
    double rate;
};

#define DA(f) offsetof(struct door_args, f)

int main(int argc, char **argv)
{
    struct door_args a = {100000, 1000000, 20000};
    const struct rs_opt opts[] = {
        {.name = "messages", .short_name = 'n', .kind = RS_OPT_U64, .off = DA(n), .min = 1,
         .max = 1ll << 40, .arg = "N",
         .help = "paced messages for the latency figure (default 100000)"},
        {.name = "peak", .short_name = 'p', .kind = RS_OPT_U64, .off = DA(peak_n), .min = 1,
         .max = 1ll << 40, .arg = "N",
         .help = "messages for the peak-rate figure (default 1000000)"},
        {.name = "rate", .short_name = 'r', .kind = RS_OPT_DOUBLE, .off = DA(rate), .min = 1,
         .max = 100000000, .arg = "R", .help = "paced messages per second (default 20000)"},
        {0},
    };
    struct rs_opt_group g = {NULL, opts, &a, NULL};
    int code = rs_opt_main("bench_doorbell", "usage: bench_doorbell [options]\n"
                           "One-way doorbell latency against a raw AF_UNIX floor.\n",
                           &g, 1, argc, argv, 0, NULL);
    if (code >= 0)
        return code;
    uint64_t n = a.n, peak_n = a.peak_n;
    double rate = a.rate;
    prctl(PR_SET_TIMERSLACK, 1UL); /* pace to the microsecond, not the default 50 us slack */
    struct result raw, zl, rawp, zp;
    uint64_t retries_l, retries_p;
    size_t size = 0, psize = 0;
    if (run_raw(n, rate, &raw) || run_zmq(n, rate, &zl, &retries_l, &size) ||
        run_raw(peak_n, 0, &rawp) || run_zmq(peak_n, 0, &zp, &retries_p, &psize)) {
        fprintf(stderr, "%s: a run failed\n", argv[0]);
        return 1;
    }
    printf("bench_doorbell: one-way latency, %llu messages paced at %.0f/s, two processes, "
           "%ld CPUs\n", (unsigned long long)n, rate, sysconf(_SC_NPROCESSORS_ONLN));
    print_latency("raw AF_UNIX seqpacket (floor)", &raw);
    print_latency("doorbell (msgpack+zmq ipc PUSH/PULL)", &zl);
    printf("  doorbell %zu bytes; ratio to floor: p50 %.2fx  p99 %.2fx; goal p99 <= 50 us: %s\n",
           size, zl.p50 / raw.p50, zl.p99 / raw.p99, zl.p99 <= 50 ? "met" : "NOT met");
    double small_ns, tokens_ns;
    codec_cost(1000000, &small_ns, &tokens_ns);
    printf("  msgpack encode+decode in-process: %.0f ns per batch_ready, %.0f ns per "
           "tokens_ready of 64 entries\n", small_ns, tokens_ns);
    double raw_rate = (double)rawp.n / rawp.secs, z_rate = (double)zp.n / zp.secs;
    printf("bench_doorbell: peak rate, %llu messages sent back to back\n",
           (unsigned long long)peak_n);
    printf("  %-38s %10.0f msg/s\n", "raw AF_UNIX seqpacket, 1 write/message", raw_rate);
    printf("  %-38s %10.0f msg/s  (%.2fx raw: zmq batches writes; the sender waited for room "
           "%llu times)\n",
           "doorbell (msgpack+zmq ipc PUSH/PULL)", z_rate, z_rate / raw_rate,
           (unsigned long long)retries_p);
    return 0;
}

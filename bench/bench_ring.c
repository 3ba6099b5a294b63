/* SPDX-License-Identifier: MIT */
/*
 * bench_ring: the SPSC ring between two real processes (pinned to two CPUs
 * when there are two).
 *   1. handoffs per second with 8-byte records in 64-byte slots (claim,
 *      write, commit / get, read, release), with and without CRC-32C;
 *   2. payload GB/s for large slots, the producer copying each record in
 *      and the consumer copying it out, next to plain memcpy GB/s of the
 *      same size measured in the same run, and their ratio.
 * Goals (reported, never asserted): >= 10 M handoffs/s; payload >= 0.8 x
 * memcpy. Each figure is the best of --reps runs (the host is shared: the
 * load average is printed, since two spinning processes only hand off while
 * both run). Also printed: the cost of a handoff in one process (both sides
 * interleaved, no cross-core traffic), which contention does not distort,
 * and what attaching a segment costs a restarting stage (validation plus
 * locking every page), for 64 MiB to 1 GiB.
 * Usage: bench_ring [--records N] [--bytes GiB] [--reps R]
 */
#include <sched.h>
#include <stdalign.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/opt.h"
#include "common/log.h"
#include "ipc/crc32c.h"
#include "ipc/ring.h"
#include "ipc/role.h"
#include "ipc/shm.h"

struct sync {
    _Atomic uint64_t ready; /* children attached and recovered */
    _Atomic uint64_t go;
    _Atomic uint64_t t0, t1; /* consumer: first get, last release (ns) */
    _Atomic uint64_t bad;    /* records that failed their check */
};

struct run {
    uint32_t slots, slot_bytes, flags;
    uint64_t records;
    int copy; /* 1: copy payload in and out (GB/s); 0: 8-byte records (handoffs) */
};

/* CPU seconds used by reaped children so far. */
static double children_cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

/* Share of a run's wall time its two processes were on a CPU (1 = both all the time). */
static double g_on_cpu;

static int n_cpus(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
}

static void pin(int which)
{
    cpu_set_t set, mine;
    if (sched_getaffinity(0, sizeof(mine), &mine) != 0 || CPU_COUNT(&mine) < 2)
        return;
    int seen = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (CPU_ISSET(c, &mine) && seen++ == which) {
            CPU_ZERO(&set);
            CPU_SET(c, &set);
            sched_setaffinity(0, sizeof(set), &set);
            return;
        }
    }
}

static int g_spin_only; /* two CPUs: the sides never need each other's CPU */

static inline void cpu_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    atomic_signal_fence(memory_order_seq_cst); /* keep the loop; no portable pause hint */
#endif
}

/*
 * Waiting for the other side. Polling the slot the other side is writing
 * steals that cache line on every poll (measured: 0.3 M handoffs/s with a
 * bare pause loop, 12 M/s with waits of 64..256 pauses), so a failed poll
 * waits `wait` pause instructions, doubling up to 128, and progress halves
 * it. On one CPU it yields instead.
 */
static void backoff(unsigned *wait)
{
    if (!g_spin_only) {
        sched_yield();
        return;
    }
    for (unsigned i = 0; i < *wait; i++)
        cpu_pause();
    *wait = *wait == 0 ? 1 : *wait < 128 ? *wait * 2 : 128;
}

static void wait_go(struct sync *s)
{
    atomic_fetch_add(&s->ready, 1);
    while (!atomic_load_explicit(&s->go, memory_order_acquire))
        ;
}

static int producer(rs_shm *shm, struct sync *s, const struct run *run)
{
    rs_role *me;
    rs_ring *r;
    pin(0);
    if (rs_role_start(shm, "prod", &me) || rs_ring_open(shm, "r", me, &r) || rs_ring_recover(r) ||
        rs_role_ready(me))
        return 1;
    uint8_t *src = malloc(run->slot_bytes);
    memset(src, 0x5a, run->slot_bytes);
    wait_go(s);
    unsigned wait = 0;
    for (uint64_t i = 0; i < run->records;) {
        struct rs_ring_wr w;
        if (rs_ring_try_claim(r, &w) != RS_OK) {
            backoff(&wait); /* full */
            continue;
        }
        wait /= 2;
        uint32_t len = run->copy ? run->slot_bytes : 8;
        if (run->copy)
            memcpy(w.data, src, len);
        else
            memcpy(w.data, &i, 8);
        if (rs_ring_commit(r, &w, i, len) != RS_OK)
            return 2;
        i++;
    }
    return 0;
}

static int consumer(rs_shm *shm, struct sync *s, const struct run *run)
{
    rs_role *me;
    rs_ring *r;
    pin(1);
    if (rs_role_start(shm, "cons", &me) || rs_ring_open(shm, "r", me, &r) || rs_ring_recover(r) ||
        rs_role_ready(me))
        return 1;
    uint8_t *dst = malloc(run->slot_bytes);
    uint64_t bad = 0;
    wait_go(s);
    unsigned wait = 0;
    for (uint64_t i = 0; i < run->records;) {
        struct rs_ring_rd rd;
        rs_err e = rs_ring_try_get(r, &rd);
        if (e == RS_EAGAIN) {
            backoff(&wait); /* empty */
            continue;
        }
        wait /= 2;
        if (i == 0)
            atomic_store(&s->t0, rs_clock_ns());
        if (run->copy) {
            memcpy(dst, rd.data, rd.len);
            bad += e != RS_OK || rd.len != run->slot_bytes || dst[rd.len - 1] != 0x5a;
        } else {
            uint64_t v;
            memcpy(&v, rd.data, 8);
            bad += e != RS_OK || v != i;
        }
        if (rs_ring_release(r, &rd) != RS_OK)
            return 2;
        i++;
    }
    atomic_store(&s->t1, rs_clock_ns());
    atomic_store(&s->bad, bad);
    return 0;
}

/* One run: fresh segment, two processes; returns seconds (first get to last release). */
static double run_once(const struct run *run)
{
    static const char *const roles[] = {"prod", "cons"};
    char name[64];
    snprintf(name, sizeof(name), "/rs-bench-ring-%d", (int)getpid());
    shm_unlink(name);
    struct rs_shm_region_spec spec[3] = {
        {.name = "roles", .kind = RS_SHM_ROLES, .count = 2, .role_names = roles},
        {.name = "r", .kind = RS_SHM_RING, .count = run->slots, .elem_bytes = run->slot_bytes,
         .flags = run->flags, .producer = "prod", .consumer = "cons"},
        {.name = "sync", .kind = RS_SHM_RAW, .bytes = sizeof(struct sync)},
    };
    rs_shm *shm;
    void *base;
    if (rs_shm_create(name, 1, spec, 3, &shm) != RS_OK ||
        rs_shm_region(shm, "sync", RS_SHM_RAW, &base, NULL) != RS_OK)
        return -1;
    struct sync *s = base;
    pid_t p = fork();
    if (p == 0)
        _exit(producer(shm, s, run));
    pid_t c = fork();
    if (c == 0)
        _exit(consumer(shm, s, run));
    while (atomic_load(&s->ready) < 2)
        usleep(100);
    double cpu0 = children_cpu();
    uint64_t w0 = rs_clock_ns();
    atomic_store_explicit(&s->go, 1, memory_order_release);
    int sp, sc;
    waitpid(p, &sp, 0);
    waitpid(c, &sc, 0);
    g_on_cpu = (children_cpu() - cpu0) / (2 * (rs_clock_ns() - w0) / 1e9);
    double secs = (atomic_load(&s->t1) - atomic_load(&s->t0)) / 1e9;
    if (!WIFEXITED(sp) || WEXITSTATUS(sp) || !WIFEXITED(sc) || WEXITSTATUS(sc) ||
        atomic_load(&s->bad)) {
        fprintf(stderr, "bench_ring: run failed (producer %d, consumer %d, bad %llu)\n", sp, sc,
                (unsigned long long)atomic_load(&s->bad));
        secs = -1;
    }
    rs_shm_detach(&shm);
    shm_unlink(name);
    return secs;
}

/* Best time of reps runs; g_on_cpu is left as that run's on-CPU share. */
static double best_of(const struct run *run, int reps)
{
    double best = -1, on_cpu = 0;
    for (int i = 0; i < reps; i++) {
        double t = run_once(run);
        if (t < 0)
            return -1;
        if (best < 0 || t < best)
            best = t, on_cpu = g_on_cpu;
    }
    g_on_cpu = on_cpu;
    return best;
}

/*
 * memcpy GB/s of `size`-byte copies over the ring's working set: record i
 * goes from source slot i % slots to destination slot i % slots, so caches
 * help it exactly as much as they help the ring. Best of reps.
 */
static double memcpy_gbs(size_t size, uint32_t slots, uint64_t total, int reps)
{
    uint8_t *a = aligned_alloc(4096, size * slots), *b = aligned_alloc(4096, size * slots);
    if (a == NULL || b == NULL)
        return -1;
    memset(a, 0x5a, size * slots);
    memset(b, 0, size * slots);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        uint64_t n = total / size, t0 = rs_clock_ns();
        for (uint64_t i = 0; i < n; i++) {
            memcpy(b + (i % slots) * size, a + (i % slots) * size, size);
            __asm__ volatile("" : : "r"(b) : "memory"); /* keep every copy */
        }
        double gbs = (double)(n * size) / ((rs_clock_ns() - t0) / 1e9) / 1e9;
        best = gbs > best ? gbs : best;
    }
    free(a), free(b);
    return best;
}

/* Both sides in this process, 512 records at a time: CPU cost per handoff. */
static double in_process_ns(uint64_t records)
{
    static const char *const roles[] = {"prod", "cons"};
    char name[64];
    snprintf(name, sizeof(name), "/rs-bench-ring1-%d", (int)getpid());
    shm_unlink(name);
    struct rs_shm_region_spec spec[2] = {
        {.name = "roles", .kind = RS_SHM_ROLES, .count = 2, .role_names = roles},
        {.name = "r", .kind = RS_SHM_RING, .count = 1024, .elem_bytes = 64, .producer = "prod",
         .consumer = "cons"},
    };
    rs_shm *shm;
    rs_role *p, *c;
    rs_ring *rp, *rc;
    if (rs_shm_create(name, 1, spec, 2, &shm) || rs_role_start(shm, "prod", &p) ||
        rs_role_start(shm, "cons", &c) || rs_ring_open(shm, "r", p, &rp) ||
        rs_ring_open(shm, "r", c, &rc) || rs_ring_recover(rp) || rs_ring_recover(rc))
        return -1;
    uint64_t t0 = rs_clock_ns(), bad = 0;
    for (uint64_t i = 0; i < records;) {
        uint64_t j = i;
        for (int b = 0; b < 512; b++, i++) {
            struct rs_ring_wr w;
            bad += rs_ring_try_claim(rp, &w) != RS_OK;
            memcpy(w.data, &i, 8);
            bad += rs_ring_commit(rp, &w, i, 8) != RS_OK;
        }
        for (int b = 0; b < 512; b++, j++) {
            struct rs_ring_rd rd;
            uint64_t v = 0;
            bad += rs_ring_try_get(rc, &rd) != RS_OK;
            memcpy(&v, rd.data, 8);
            bad += v != j || rs_ring_release(rc, &rd) != RS_OK;
        }
    }
    double ns = (double)(rs_clock_ns() - t0) / (double)records;
    rs_ring_close(&rp), rs_ring_close(&rc), rs_role_stop(&p), rs_role_stop(&c);
    rs_shm_detach(&shm);
    shm_unlink(name);
    return bad ? -1 : ns;
}

/*
 * The floor for a software handoff on this host, measured in the same run: a
 * bare Lamport SPSC queue of 8-byte values between two processes (indices on
 * their own lines, each side caching the other's index), no crash safety.
 */
struct bare_q {
    alignas(64) _Atomic uint64_t head;
    alignas(64) _Atomic uint64_t tail;
    alignas(64) _Atomic uint64_t go, ready;
    alignas(64) uint64_t buf[1024];
};

/* Producer side of the bare queue: `size`-byte payloads copied into `slots` buffers. */
static void bare_produce(struct bare_q *q, uint8_t *bufs, uint64_t records, uint32_t size,
                         uint32_t slots)
{
    uint8_t *src = malloc(size ? size : 1);
    memset(src, 0x5a, size);
    uint64_t tail_seen = 0;
    unsigned wait = 0;
    for (uint64_t i = 0; i < records; i++) {
        while (i - tail_seen >= slots) {
            backoff(&wait);
            tail_seen = atomic_load_explicit(&q->tail, memory_order_acquire);
        }
        wait /= 2;
        if (size)
            memcpy(bufs + (i % slots) * size, src, size);
        else
            q->buf[i % 1024] = i;
        atomic_store_explicit(&q->head, i + 1, memory_order_release);
    }
}

static int bare_consume(struct bare_q *q, uint8_t *bufs, uint64_t records, uint32_t size,
                        uint32_t slots)
{
    uint8_t *dst = malloc(size ? size : 1);
    uint64_t head_seen = 0, bad = 0;
    unsigned wait = 0;
    for (uint64_t i = 0; i < records; i++) {
        while (i >= head_seen) {
            backoff(&wait);
            head_seen = atomic_load_explicit(&q->head, memory_order_acquire);
        }
        wait /= 2;
        if (size) {
            memcpy(dst, bufs + (i % slots) * size, size);
            bad += dst[size - 1] != 0x5a;
        } else {
            bad += q->buf[i % 1024] != i;
        }
        atomic_store_explicit(&q->tail, i + 1, memory_order_release);
    }
    return bad != 0;
}

/*
 * The bare queue between two processes: 8-byte values in its own array when
 * size is 0 (slots 1024), else `size`-byte payloads copied in and out of
 * `slots` shared buffers, exactly as the ring's payload runs do. Seconds.
 */
static double bare_queue(uint64_t records, uint32_t size, uint32_t slots)
{
    size_t bytes = sizeof(struct bare_q) + (size_t)size * slots;
    struct bare_q *q = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (q == MAP_FAILED)
        return -1;
    memset(q, 0, bytes);
    uint8_t *bufs = (uint8_t *)(q + 1);
    pid_t p = fork();
    if (p == 0) {
        pin(0);
        atomic_fetch_add(&q->ready, 1);
        while (!atomic_load(&q->go))
            ;
        bare_produce(q, bufs, records, size, size ? slots : 1024);
        _exit(0);
    }
    pid_t c = fork();
    if (c == 0) {
        pin(1);
        atomic_fetch_add(&q->ready, 1);
        while (!atomic_load(&q->go))
            ;
        _exit(bare_consume(q, bufs, records, size, size ? slots : 1024));
    }
    while (atomic_load(&q->ready) < 2)
        usleep(100);
    uint64_t t0 = rs_clock_ns();
    atomic_store(&q->go, 1);
    int sp, sc;
    waitpid(p, &sp, 0);
    waitpid(c, &sc, 0);
    double t = (rs_clock_ns() - t0) / 1e9;
    munmap(q, bytes);
    return WIFEXITED(sc) && WEXITSTATUS(sc) == 0 ? t : -1;
}

static double bare_best(uint64_t records, uint32_t size, uint32_t slots, int reps)
{
    double best = -1;
    for (int i = 0; i < reps; i++) {
        double t = bare_queue(records, size, slots);
        best = best < 0 || (t > 0 && t < best) ? t : best;
    }
    return best;
}

static void handoffs(uint64_t records, int reps)
{
    double bare = bare_best(records, 0, 1024, reps);
    if (bare > 0)
        printf("floor: bare SPSC queue of 8-byte values between the same two CPUs (no crash "
               "safety): %.2f M handoffs/s (%.1f ns each)\n", records / bare / 1e6, 1e9 * bare / records);
    double best = -1;
    for (int i = 0; i < reps; i++) {
        double ns = in_process_ns(records / 4 - records / 4 % 512 + 512);
        best = best < 0 || (ns > 0 && ns < best) ? ns : best;
    }
    printf("one process, both sides interleaved (no cross-core traffic): %.1f ns per handoff "
           "(claim+commit+get+release)\n", best);
    for (int crc = 0; crc <= 1; crc++) {
        struct run run = {.slots = 1024, .slot_bytes = 64, .flags = crc ? RS_RING_CRC : 0,
                          .records = records, .copy = 0};
        double t = best_of(&run, reps);
        if (t <= 0)
            continue;
        double rate = records / t;
        printf("handoffs, 8-byte records, 1024 x 64 B slots%s: %llu in %.3f s = %.2f M handoffs/s "
               "(%.1f ns each), %.2f x the floor, processes on CPU %.0f%% of the run "
               "[goal >= 10 M/s]\n",
               crc ? ", crc32c" : "", (unsigned long long)records, t, rate / 1e6, 1e9 / rate,
               bare > 0 ? bare / t : 0, 100 * g_on_cpu);
    }
}

static void payload(uint64_t total, int reps)
{
    static const uint32_t sizes[] = {4096, 65536, 524288, 2097152};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint32_t size = sizes[i];
        struct run run = {.slots = size >= 524288 ? 8 : 32, .slot_bytes = size, .flags = 0,
                          .records = total / size, .copy = 1};
        double t = best_of(&run, reps), on_cpu = g_on_cpu;
        double bare = bare_best(run.records, size, run.slots, reps);
        double mc = memcpy_gbs(size, run.slots, total / 4, reps);
        if (t <= 0)
            continue;
        double gbs = (double)run.records * size / t / 1e9;
        double bgbs = bare > 0 ? (double)run.records * size / bare / 1e9 : 0;
        printf("payload %7u B x %2u slots: ring %.2f GB/s (copied in and out, processes on CPU "
               "%.0f%%); bare queue copying the same %.2f GB/s; memcpy in one process %.2f GB/s "
               "(same size and working set): ring/memcpy %.2f [goal >= 0.8], ring/bare %.2f\n",
               size, run.slots, gbs, 100 * on_cpu, bgbs, mc, gbs / mc, bgbs > 0 ? gbs / bgbs : 0);
    }
}

/* Create, then attach (validate + mlock) as a restarting stage would, per segment size. */
static void attach_cost(void)
{
    static const char *const roles[] = {"a"};
    char name[64];
    snprintf(name, sizeof(name), "/rs-bench-attach-%d", (int)getpid());
    for (uint64_t mib = 64; mib <= 1024; mib *= 4) {
        struct rs_shm_region_spec spec[2] = {
            {.name = "roles", .kind = RS_SHM_ROLES, .count = 1, .role_names = roles},
            {.name = "raw", .kind = RS_SHM_RAW, .bytes = mib << 20},
        };
        rs_shm *shm, *a;
        shm_unlink(name);
        if (rs_shm_create(name, 1, spec, 2, &shm) != RS_OK)
            return;
        uint64_t t0 = rs_clock_ns();
        rs_err e = rs_shm_attach(name, spec, 2, 0, NULL, 0, &a);
        uint64_t t1 = rs_clock_ns();
        struct rs_shm_info info;
        if (e == RS_OK)
            rs_shm_get_info(a, &info);
        printf("attach of a %4llu MiB segment (validate + lock every page): %.1f ms%s\n",
               (unsigned long long)mib, (t1 - t0) / 1e6,
               e != RS_OK ? " (failed)" : info.locked ? "" : " (mlock refused: not locked)");
        rs_shm_detach(&a);
        rs_shm_detach(&shm);
        shm_unlink(name);
    }
}

struct ring_args {
    uint64_t records, gib;
    int reps;
};

int main(int argc, char **argv)
{
    struct ring_args a = {20000000, 4, 3};
    static const struct rs_opt opts[] = {
        {.name = "records", .kind = RS_OPT_U64, .off = offsetof(struct ring_args, records),
         .min = 1, .max = 1ll << 40, .arg = "N", .help = "handoffs measured (default 20000000)"},
        {.name = "bytes", .kind = RS_OPT_U64, .off = offsetof(struct ring_args, gib), .min = 1,
         .max = 1024, .arg = "GiB", .help = "payload bytes moved per figure (default 4)"},
        {.name = "reps", .kind = RS_OPT_INT, .off = offsetof(struct ring_args, reps), .min = 1,
         .max = 1000, .arg = "R", .help = "runs per figure, the best is shown (default 3)"},
        {0},
    };
    struct rs_opt_group g = {NULL, opts, &a, NULL};
    int code = rs_opt_main("bench_ring", "usage: bench_ring [options]\n"
                           "Ring handoffs and payload copies between two processes.\n",
                           &g, 1, argc, argv, 0, NULL);
    if (code >= 0)
        return code;
    uint64_t records = a.records, gib = a.gib;
    int reps = a.reps;
    rs_log_set_level(RS_LOG_WARN);
    g_spin_only = n_cpus() >= 2;
    double load[3] = {0, 0, 0};
    getloadavg(load, 3);
    printf("bench_ring: %d CPUs (%s), load average %.2f, crc32c %s, best of %d\n", n_cpus(),
           n_cpus() >= 2 ? "producer and consumer pinned apart" : "sharing one CPU", load[0],
           rs_crc32c_hw() ? "SSE4.2" : "table", reps);
    handoffs(records, reps);
    payload(gib << 30, reps);
    attach_cost();
    return 0;
}

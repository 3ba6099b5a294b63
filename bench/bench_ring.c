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
 * interleaved, no cross-core traffic), which contention does not distort.
 * Usage: bench_ring [--records N] [--bytes GiB] [--reps R]
 */
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
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

/* Spins briefly, then yields: on a loaded host the other side needs the CPU. */
static void backoff(unsigned *spins)
{
    if (++*spins % 256 == 0)
        sched_yield();
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
    unsigned spins = 0;
    for (uint64_t i = 0; i < run->records;) {
        struct rs_ring_wr w;
        if (rs_ring_try_claim(r, &w) != RS_OK) {
            backoff(&spins); /* full */
            continue;
        }
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
    unsigned spins = 0;
    for (uint64_t i = 0; i < run->records;) {
        struct rs_ring_rd rd;
        rs_err e = rs_ring_try_get(r, &rd);
        if (e == RS_EAGAIN) {
            backoff(&spins); /* empty */
            continue;
        }
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
    atomic_store_explicit(&s->go, 1, memory_order_release);
    int sp, sc;
    waitpid(p, &sp, 0);
    waitpid(c, &sc, 0);
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

static double best_of(const struct run *run, int reps)
{
    double best = -1;
    for (int i = 0; i < reps; i++) {
        double t = run_once(run);
        if (t < 0)
            return -1;
        if (best < 0 || t < best)
            best = t;
    }
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

static void handoffs(uint64_t records, int reps)
{
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
               "(%.1f ns each) [goal >= 10 M/s]\n",
               crc ? ", crc32c" : "", (unsigned long long)records, t, rate / 1e6, 1e9 / rate);
    }
}

static void payload(uint64_t total, int reps)
{
    static const uint32_t sizes[] = {4096, 65536, 524288, 2097152};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint32_t size = sizes[i];
        struct run run = {.slots = size >= 524288 ? 8 : 32, .slot_bytes = size, .flags = 0,
                          .records = total / size, .copy = 1};
        double t = best_of(&run, reps);
        double mc = memcpy_gbs(size, run.slots, total / 4, reps);
        if (t <= 0)
            continue;
        double gbs = (double)run.records * size / t / 1e9;
        printf("payload %7u B x %2u slots: ring %.2f GB/s (copied in and out), memcpy %.2f GB/s "
               "(same size and working set, this run): ratio %.2f [goal >= 0.8]\n",
               size, run.slots, gbs, mc, gbs / mc);
    }
}

int main(int argc, char **argv)
{
    uint64_t records = 20000000, gib = 4;
    int reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--records") == 0)
            records = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--bytes") == 0)
            gib = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--reps") == 0)
            reps = atoi(argv[i + 1]);
        else
            return fprintf(stderr, "usage: bench_ring [--records N] [--bytes GiB] [--reps R]\n"), 2;
    }
    if (records == 0 || gib == 0 || reps < 1)
        return fprintf(stderr, "bench_ring: --records, --bytes and --reps must be positive\n"), 2;
    rs_log_set_level(RS_LOG_WARN);
    double load[3] = {0, 0, 0};
    getloadavg(load, 3);
    printf("bench_ring: %d CPUs (%s), load average %.2f, crc32c %s, best of %d\n", n_cpus(),
           n_cpus() >= 2 ? "producer and consumer pinned apart" : "sharing one CPU", load[0],
           rs_crc32c_hw() ? "SSE4.2" : "table", reps);
    handoffs(records, reps);
    payload(gib << 30, reps);
    return 0;
}

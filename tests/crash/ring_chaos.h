/* SPDX-License-Identifier: MIT */
/*
 * Ring chaos: a producer and a consumer process on one SPSC ring, SIGKILLed
 * (or stopped) at random points or at failpoints and restarted, then an
 * audit. Shared by the crash tests (tests/crash/test_ring.c, bounded kill
 * counts) and bench/bench_ring_chaos.c (runs for a chosen time).
 *
 * Records are deterministic functions of their seq (id, length, bytes), so a
 * restarted producer rewrites exactly what a dead one left uncommitted and
 * the consumer can verify every byte. The consumer's downstream effect is an
 * append to a delivery log in the segment (entry, then count, release); it
 * deduplicates a redelivered record by seq against the last logged entry.
 * The final audit: the log holds strictly increasing seqs, each with its own
 * id, covering every seq from start to end except the ring's holes; the ring
 * is empty (every slot FREE or a hole of a still-live zombie), both roles
 * check out, nothing is left WRITING/READING, and no owner is stale.
 * Leaves out: threads (one process per side, as in the pipeline).
 */
#ifndef RS_RING_CHAOS_H
#define RS_RING_CHAOS_H

#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "ipc/failpoint.h"
#include "ipc/ring.h"
#include "ipc/role.h"
#include "ipc/shm.h"

#define CHAOS_NO_END UINT64_MAX

/* Exit codes of the chaos children. */
enum { CHAOS_DONE = 0, CHAOS_SETUP = 10, CHAOS_BAD_RECORD = 11, CHAOS_ORDER = 12,
       CHAOS_FENCED = 13, CHAOS_RING_ERR = 14 };

struct chaos_cfg {
    uint32_t slots, slot_bytes, flags; /* ring geometry */
    uint64_t start_seq;
    uint64_t max_records; /* delivery log capacity */
    int kills;            /* SIGKILLs to deliver before stopping (storm) */
    double seconds;       /* or: keep killing for this long (bench), when > 0 */
    unsigned max_delay_us; /* kills are U(0, max_delay_us) apart */
    int victims;          /* 1 producer, 2 consumer, 3 both */
    uint32_t seed;
};

struct chaos_log {
    _Atomic uint64_t count;   /* entries delivered (after dedup) */
    _Atomic uint64_t dups;    /* redeliveries dropped by the dedup */
    _Atomic uint64_t stop;    /* parent: producer should finish */
    _Atomic uint64_t end;     /* producer's final seq, once stopped (CHAOS_NO_END before) */
    uint64_t cap;             /* entries the log holds: the producer idles before exceeding it */
    uint64_t start;           /* the ring's first seq */
    uint64_t pad[2];
    struct {
        uint64_t seq, id;
    } e[];
};

struct chaos {
    struct chaos_cfg cfg;
    char name[96];
    rs_shm *shm;
    rs_ring *obs;
    struct chaos_log *log;
    pid_t prod, cons;
    uint64_t kills, prod_kills, cons_kills, restarts;
    uint32_t rng;
    uint32_t dead_inc[2]; /* per role: incarnation current when it was last killed */
};

uint64_t chaos_mix(uint64_t x);

uint64_t chaos_id(uint64_t seq);

uint32_t chaos_len(uint64_t seq, uint32_t slot_bytes);

void chaos_fill(uint8_t *p, uint64_t seq, uint32_t len);

int chaos_verify(const uint8_t *p, uint64_t seq, uint32_t len);

void chaos_pause(unsigned spins);

/* Attaches, starts `role`, opens and recovers the ring; failpoint `fp` armed first. */
int chaos_join(const char *name, const char *role, const char *fp, rs_shm **shm,
               rs_role **r, rs_ring **ring, struct chaos_log **log);

/* The producer: deterministic records until told to stop; then publishes its end. */
int chaos_producer(const char *name, const char *fp);

/* The consumer's effect: log the record unless it is a redelivery. */
int chaos_deliver(struct chaos_log *log, const struct rs_ring_rd *rd);

/* The consumer: verifies, logs (deduplicated) and releases until the producer's end. */
int chaos_consumer(const char *name, const char *fp, uint32_t slot_bytes);

pid_t chaos_spawn(struct chaos *c, int producer, const char *fp);

int chaos_wait(pid_t pid);

const char *chaos_exit_name(int code);

/* Creates the segment: roles, the ring, the delivery log. 0 on success. */
int chaos_create(struct chaos *c, const struct chaos_cfg *cfg, const char *tag);

void chaos_destroy(struct chaos *c);

uint32_t chaos_rand(struct chaos *c);

/* A child that exited on its own during the storm is a failure: report it. */
int chaos_reap_unexpected(struct chaos *c);

/* Waits (up to 10 s) until role `idx` is READY under an incarnation newer than `old`. */
void chaos_wait_ready(struct chaos *c, uint32_t idx, uint32_t old);

/*
 * One random SIGKILL of a victim, then its restart. Half the kills first let
 * the victim finish starting (READY), so however slow restarts are on a
 * loaded host, kills land both in start-up/recovery and mid-operation.
 */
int chaos_kill_one(struct chaos *c);

/* Runs both sides and kills per cfg (count or seconds). 0 on success. */
int chaos_storm(struct chaos *c);

/* Waits up to `seconds` for pid; -1 on timeout (then kills it). */
int chaos_wait_for(pid_t pid, double seconds);

/*
 * Checks the outcome (see the file comment). holes_ok: a live zombie may
 * have left holes. Prints the figures. 0 when everything holds.
 */
int chaos_audit(struct chaos *c, int holes_ok, double elapsed_s);

/* Stops the producer, lets the consumer drain, audits. 0 when everything holds. */
int chaos_finish(struct chaos *c, int holes_ok, double elapsed_s);

/* Storm + finish for one configuration; prints and returns 0 on success. */
int chaos_run(const struct chaos_cfg *cfg, const char *tag);

#endif

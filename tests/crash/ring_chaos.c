/* SPDX-License-Identifier: MIT */
/*
 * The ring kill storm (ring_chaos.h): producer and consumer processes,
 * kills at failpoints, and the exactly-once audit of what was delivered.
 * Part of rs_testlib, linked by the tests and benches that include the header.
 */
#include "tests/crash/ring_chaos.h"

uint64_t chaos_mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t chaos_id(uint64_t seq)
{
    return chaos_mix(seq ^ 0xC4A05ull);
}

uint32_t chaos_len(uint64_t seq, uint32_t slot_bytes)
{
    return 8 + (uint32_t)(chaos_mix(seq) % (slot_bytes - 7));
}

void chaos_fill(uint8_t *p, uint64_t seq, uint32_t len)
{
    for (uint32_t i = 0; i < len; i += 8) {
        uint64_t v = chaos_mix(seq * 0x10000 + i);
        memcpy(p + i, &v, len - i < 8 ? len - i : 8);
    }
}

int chaos_verify(const uint8_t *p, uint64_t seq, uint32_t len)
{
    for (uint32_t i = 0; i < len; i += 8) {
        uint64_t v = chaos_mix(seq * 0x10000 + i);
        if (memcmp(p + i, &v, len - i < 8 ? len - i : 8) != 0)
            return 0;
    }
    return 1;
}

void chaos_pause(unsigned spins)
{
    if (spins % 64 == 63) {
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    } else {
        sched_yield();
    }
}

int chaos_join(const char *name, const char *role, const char *fp, rs_shm **shm,
               rs_role **r, rs_ring **ring, struct chaos_log **log)
{
    void *base;
    if (rs_shm_attach(name, NULL, 0, 0, NULL, 0, shm) != RS_OK ||
        rs_shm_region(*shm, "log", RS_SHM_RAW, &base, NULL) != RS_OK)
        return CHAOS_SETUP;
    *log = base;
    rs_failpoint_set(fp);
    if (rs_role_start(*shm, role, r) != RS_OK || rs_ring_open(*shm, "r", *r, ring) != RS_OK ||
        rs_ring_recover(*ring) != RS_OK || rs_role_ready(*r) != RS_OK)
        return CHAOS_SETUP;
    return 0;
}

int chaos_producer(const char *name, const char *fp)
{
    rs_shm *shm;
    rs_role *role;
    rs_ring *r;
    struct chaos_log *log;
    int rc = chaos_join(name, "prod", fp, &shm, &role, &r, &log);
    for (unsigned spins = 0; rc == 0;) {
        if (atomic_load_explicit(&log->stop, memory_order_acquire)) {
            atomic_store_explicit(&log->end, rs_ring_next_seq(r), memory_order_release);
            return CHAOS_DONE;
        }
        if (rs_ring_next_seq(r) - log->start >= log->cap) {
            chaos_pause(63); /* the log is full: wait for the stop */
            continue;
        }
        struct rs_ring_wr w;
        rs_err e = rs_ring_try_claim(r, &w);
        if (e == RS_EFULL) {
            chaos_pause(spins++);
            continue;
        }
        if (e != RS_OK)
            return e == RS_ESTALE ? CHAOS_FENCED : CHAOS_RING_ERR;
        uint32_t len = chaos_len(w.seq, w.cap);
        chaos_fill(w.data, w.seq, len);
        e = rs_ring_commit(r, &w, chaos_id(w.seq), len);
        if (e != RS_OK)
            return e == RS_ESTALE ? CHAOS_FENCED : CHAOS_RING_ERR;
    }
    return rc;
}

int chaos_deliver(struct chaos_log *log, const struct rs_ring_rd *rd)
{
    if (rd->id != chaos_id(rd->seq) || !chaos_verify(rd->data, rd->seq, rd->len))
        return CHAOS_BAD_RECORD;
    uint64_t n = atomic_load_explicit(&log->count, memory_order_acquire);
    if (n > 0 && (int64_t)(log->e[n - 1].seq - rd->seq) >= 0) {
        if (log->e[n - 1].seq != rd->seq)
            return CHAOS_ORDER; /* an older seq than one already logged: reordering */
        atomic_fetch_add_explicit(&log->dups, 1, memory_order_relaxed);
        return 0;
    }
    log->e[n].seq = rd->seq;
    log->e[n].id = rd->id;
    atomic_store_explicit(&log->count, n + 1, memory_order_release);
    return 0;
}

int chaos_consumer(const char *name, const char *fp, uint32_t slot_bytes)
{
    rs_shm *shm;
    rs_role *role;
    rs_ring *r;
    struct chaos_log *log;
    int rc = chaos_join(name, "cons", fp, &shm, &role, &r, &log);
    for (unsigned spins = 0; rc == 0;) {
        struct rs_ring_rd rd;
        rs_err e = rs_ring_try_get(r, &rd);
        if (e == RS_EAGAIN) {
            uint64_t end = atomic_load_explicit(&log->end, memory_order_acquire);
            if (end != CHAOS_NO_END && rs_ring_consumed(r) == end)
                return CHAOS_DONE;
            chaos_pause(spins++);
            continue;
        }
        if (e != RS_OK)
            return e == RS_ESTALE ? CHAOS_FENCED : e == RS_EIO ? CHAOS_BAD_RECORD : CHAOS_RING_ERR;
        if (rd.len != chaos_len(rd.seq, slot_bytes))
            return CHAOS_BAD_RECORD;
        rc = chaos_deliver(log, &rd);
        RS_FAILPOINT("chaos.after_effect"); /* effect durable, record not released */
        if (rc == 0 && (e = rs_ring_release(r, &rd)) != RS_OK)
            rc = e == RS_ESTALE ? CHAOS_FENCED : CHAOS_RING_ERR;
    }
    return rc;
}

pid_t chaos_spawn(struct chaos *c, int producer, const char *fp)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0)
        _exit(producer ? chaos_producer(c->name, fp)
                       : chaos_consumer(c->name, fp, c->cfg.slot_bytes));
    c->restarts++;
    return pid;
}

int chaos_wait(pid_t pid)
{
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

const char *chaos_exit_name(int code)
{
    switch (code) {
    case CHAOS_DONE: return "done";
    case CHAOS_SETUP: return "setup failed";
    case CHAOS_BAD_RECORD: return "record corrupt (id, length, payload or crc)";
    case CHAOS_ORDER: return "records out of order";
    case CHAOS_FENCED: return "fenced";
    case CHAOS_RING_ERR: return "ring error";
    default: return code > 128 ? "killed by a signal" : "unknown";
    }
}

int chaos_create(struct chaos *c, const struct chaos_cfg *cfg, const char *tag)
{
    static const char *const roles[] = {"prod", "cons"};
    memset(c, 0, sizeof(*c));
    c->cfg = *cfg;
    c->rng = cfg->seed ? cfg->seed : 1;
    snprintf(c->name, sizeof(c->name), "/rs-chaos-%s-%d", tag, (int)getpid());
    shm_unlink(c->name); /* a leftover of an earlier run with this pid */
    struct rs_shm_region_spec s[3] = {
        {.name = "roles", .kind = RS_SHM_ROLES, .count = 2, .role_names = roles},
        {.name = "r", .kind = RS_SHM_RING, .count = cfg->slots, .elem_bytes = cfg->slot_bytes,
         .flags = cfg->flags, .producer = "prod", .consumer = "cons", .start = cfg->start_seq},
        {.name = "log", .kind = RS_SHM_RAW,
         .bytes = sizeof(struct chaos_log) + cfg->max_records * 16},
    };
    void *base;
    if (rs_shm_create(c->name, 1, s, 3, &c->shm) != RS_OK ||
        rs_shm_region(c->shm, "log", RS_SHM_RAW, &base, NULL) != RS_OK ||
        rs_ring_open(c->shm, "r", NULL, &c->obs) != RS_OK)
        return 1;
    c->log = base;
    c->log->cap = cfg->max_records;
    c->log->start = cfg->start_seq;
    atomic_store(&c->log->end, CHAOS_NO_END);
    return 0;
}

void chaos_destroy(struct chaos *c)
{
    if (c->prod > 0)
        kill(c->prod, SIGKILL), chaos_wait(c->prod);
    if (c->cons > 0)
        kill(c->cons, SIGKILL), chaos_wait(c->cons);
    rs_ring_close(&c->obs);
    rs_shm_detach(&c->shm);
    rs_shm_unlink(c->name);
}

uint32_t chaos_rand(struct chaos *c)
{
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 17;
    c->rng ^= c->rng << 5;
    return c->rng;
}

int chaos_reap_unexpected(struct chaos *c)
{
    pid_t *pids[2] = {&c->prod, &c->cons};
    for (int i = 0; i < 2; i++) {
        int st;
        if (*pids[i] > 0 && waitpid(*pids[i], &st, WNOHANG) == *pids[i]) {
            int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            fprintf(stderr, "chaos: %s exited unexpectedly: %d (%s)\n", i ? "consumer" : "producer",
                    code, chaos_exit_name(code));
            *pids[i] = 0;
            return 1;
        }
    }
    return 0;
}

void chaos_wait_ready(struct chaos *c, uint32_t idx, uint32_t old)
{
    for (int i = 0; i < 100000; i++) {
        struct rs_role_info ri;
        if (rs_role_info_at(c->shm, idx, &ri) == RS_OK && ri.inc > old &&
            ri.phase == RS_ROLE_READY)
            return;
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

int chaos_kill_one(struct chaos *c)
{
    int producer = c->cfg.victims == 1 || (c->cfg.victims == 3 && (chaos_rand(c) & 1));
    uint32_t role = producer ? 0 : 1;
    if (chaos_rand(c) & 2)
        chaos_wait_ready(c, role, c->dead_inc[role]);
    struct timespec ts = {0, (long)(chaos_rand(c) % (c->cfg.max_delay_us + 1)) * 1000};
    nanosleep(&ts, NULL);
    if (chaos_reap_unexpected(c))
        return 1;
    pid_t *pid = producer ? &c->prod : &c->cons;
    kill(*pid, SIGKILL);
    int code = chaos_wait(*pid);
    if (code != 128 + SIGKILL) {
        fprintf(stderr, "chaos: %s ended with %d (%s) before the kill\n",
                producer ? "producer" : "consumer", code, chaos_exit_name(code));
        return 1;
    }
    c->kills++;
    producer ? c->prod_kills++ : c->cons_kills++;
    struct rs_role_info ri;
    if (rs_role_info_at(c->shm, role, &ri) == RS_OK)
        c->dead_inc[role] = ri.inc;
    *pid = chaos_spawn(c, producer, NULL);
    return rs_ring_check(c->obs, NULL) != RS_OK;
}

int chaos_storm(struct chaos *c)
{
    if (c->prod <= 0)
        c->prod = chaos_spawn(c, 1, NULL);
    if (c->cons <= 0)
        c->cons = chaos_spawn(c, 0, NULL);
    uint64_t deadline = rs_clock_ns() + (uint64_t)(c->cfg.seconds * 1e9);
    while (c->cfg.seconds > 0 ? rs_clock_ns() < deadline : c->kills < (uint64_t)c->cfg.kills)
        if (chaos_kill_one(c) != 0)
            return 1;
    return 0;
}

int chaos_wait_for(pid_t pid, double seconds)
{
    uint64_t deadline = rs_clock_ns() + (uint64_t)(seconds * 1e9);
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (rs_clock_ns() > deadline) {
            kill(pid, SIGKILL);
            chaos_wait(pid);
            return -1;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

int chaos_audit(struct chaos *c, int holes_ok, double elapsed_s)
{
    struct rs_ring_stats st;
    uint64_t start = c->cfg.start_seq, end = atomic_load(&c->log->end);
    uint64_t n = atomic_load(&c->log->count), span = end - start;
    int bad = rs_ring_check(c->obs, &st) != RS_OK || rs_role_check(c->shm) != RS_OK;
    if (bad)
        fprintf(stderr, "chaos: ring or role invariants broken\n");
    if (st.cons_seq != end ||
        st.n_state[RS_RING_FREE] + st.n_state[RS_RING_QUARANTINED] != st.n_slots)
        bad = fprintf(stderr, "chaos: ring not drained: consumed %llu of end %llu\n",
                      (unsigned long long)(st.cons_seq - start), (unsigned long long)span);
    if (!holes_ok && (st.holes_passed != 0 || st.n_state[RS_RING_QUARANTINED] != 0))
        bad = fprintf(stderr, "chaos: %llu holes without a zombie\n",
                      (unsigned long long)st.holes_passed);
    if (n + st.holes_passed != span)
        bad = fprintf(stderr, "chaos: %llu delivered + %llu holes != %llu committed\n",
                      (unsigned long long)n, (unsigned long long)st.holes_passed,
                      (unsigned long long)span);
    for (uint64_t i = 0; i < n && i < c->cfg.max_records; i++) {
        uint64_t seq = c->log->e[i].seq, off = seq - start;
        if (off >= span || c->log->e[i].id != chaos_id(seq) ||
            (i > 0 && (int64_t)(seq - c->log->e[i - 1].seq) <= 0)) {
            bad = fprintf(stderr, "chaos: log entry %llu (seq %llu) out of order or wrong id\n",
                          (unsigned long long)i, (unsigned long long)seq);
            break;
        }
    }
    printf("chaos %s: %llu kills (producer %llu, consumer %llu), %llu records delivered once, "
           "%llu redeliveries dropped by dedup, %llu redelivered by recovery, %llu holes, "
           "%llu full waits, %.2f s\n",
           c->name, (unsigned long long)c->kills, (unsigned long long)c->prod_kills,
           (unsigned long long)c->cons_kills, (unsigned long long)n,
           (unsigned long long)atomic_load(&c->log->dups), (unsigned long long)st.redelivered,
           (unsigned long long)st.holes_passed, (unsigned long long)st.full, elapsed_s);
    fflush(stdout);
    return bad != 0;
}

int chaos_finish(struct chaos *c, int holes_ok, double elapsed_s)
{
    atomic_store_explicit(&c->log->stop, 1, memory_order_release);
    if (c->prod <= 0)
        c->prod = chaos_spawn(c, 1, NULL);
    if (c->cons <= 0)
        c->cons = chaos_spawn(c, 0, NULL);
    int pc = chaos_wait_for(c->prod, 60), cc = chaos_wait_for(c->cons, 60);
    c->prod = c->cons = 0;
    if (pc != CHAOS_DONE || cc != CHAOS_DONE) {
        fprintf(stderr, "chaos: producer %d (%s), consumer %d (%s) at the end\n", pc,
                pc < 0 ? "timeout" : chaos_exit_name(pc), cc,
                cc < 0 ? "timeout" : chaos_exit_name(cc));
        return 1;
    }
    return chaos_audit(c, holes_ok, elapsed_s);
}

int chaos_run(const struct chaos_cfg *cfg, const char *tag)
{
    struct chaos c;
    if (chaos_create(&c, cfg, tag) != 0)
        return 1;
    uint64_t t0 = rs_clock_ns();
    int rc = chaos_storm(&c);
    if (rc == 0)
        rc = chaos_finish(&c, 0, (rs_clock_ns() - t0) / 1e9);
    chaos_destroy(&c);
    return rc;
}

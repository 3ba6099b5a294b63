/* SPDX-License-Identifier: MIT */
/*
 * Slot table + token arena crash tests with real processes. A writer claims
 * request records, grows each one's token list in random pieces to a
 * length fixed by the record's reference, seals it and marks it DONE; a
 * reaper verifies every token of DONE records and frees them (record, then
 * chunks), running the table and arena audits now and then as a stage
 * would. Both are SIGKILLed at random and restarted (each start recovers);
 * a writer is also stopped mid-append, replaced and resumed. At the end no
 * record, chunk or owner may be left: table all FREE, arena all FREE, every
 * invariant holding, and no token ever read wrong.
 */
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "ipc/arena.h"
#include "ipc/failpoint.h"
#include "ipc/role.h"
#include "ipc/shm.h"
#include "ipc/table.h"
#include "tests/rs_test.h"

#define N_REC 48
#define N_CHUNKS 384
#define CHUNK_TOKENS 16
#define LIST_OFF 64
#define GROWING 2u
#define DONE 3u

enum { OK = 0, SETUP = 10, BAD_TOKENS = 11, FENCED = 13, ERR = 14 };

struct ctl {
    _Atomic uint64_t stop;     /* parent: writer finishes its lists and exits */
    _Atomic uint64_t reaped;   /* records verified and freed */
    _Atomic uint64_t appended; /* tokens published */
};

struct proc {
    rs_shm *shm;
    rs_role *role;
    rs_table *t;
    rs_arena *a;
    struct ctl *ctl;
};

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static int32_t tok(struct rs_table_ref r, uint32_t i)
{
    return (int32_t)mix(rs_table_ref_pack(r) * 1000003ull + i);
}

static uint32_t target_len(struct rs_table_ref r)
{
    return 1 + (uint32_t)(mix(rs_table_ref_pack(r)) % 700);
}

static int join(const char *name, const char *role, const char *fp, struct proc *p)
{
    void *ctl;
    if (rs_shm_attach(name, NULL, 0, 0, NULL, 0, &p->shm) != RS_OK ||
        rs_shm_region(p->shm, "ctl", RS_SHM_RAW, &ctl, NULL) != RS_OK)
        return SETUP;
    p->ctl = ctl;
    rs_failpoint_set(fp);
    if (rs_role_start(p->shm, role, &p->role) != RS_OK ||
        rs_table_open(p->shm, "req", p->role, &p->t) != RS_OK ||
        rs_arena_open(p->shm, "tok", p->role, p->t, LIST_OFF, &p->a) != RS_OK ||
        rs_table_recover(p->t) != RS_OK || rs_arena_recover(p->a) != RS_OK ||
        rs_role_ready(p->role) != RS_OK)
        return SETUP;
    return 0;
}

static int code_of(rs_err e)
{
    return e == RS_ESTALE ? FENCED : ERR;
}

/* Appends the next piece of GROWING record r; DONE once it reaches its length. */
static int grow(struct proc *p, struct rs_table_ref r, uint32_t *rng)
{
    uint32_t len, target = target_len(r);
    rs_err e = rs_arena_len(p->a, r, &len);
    if (e != RS_OK)
        return code_of(e);
    *rng = *rng * 1103515245u + 12345u;
    uint32_t n = 1 + (*rng >> 8) % 40;
    if (n > target - len)
        n = target - len;
    int32_t buf[64];
    for (uint32_t i = 0; i < n; i++)
        buf[i] = tok(r, len + i);
    if ((e = rs_arena_append(p->a, r, buf, n)) == RS_ENOMEM)
        return OK; /* the arena is full until the reaper frees: try later */
    if (e != RS_OK)
        return code_of(e);
    atomic_fetch_add_explicit(&p->ctl->appended, n, memory_order_relaxed);
    if (len + n < target)
        return OK;
    if ((e = rs_arena_seal(p->a, r)) != RS_OK || (e = rs_table_transition(p->t, r, GROWING, DONE)))
        return code_of(e);
    return OK;
}

static int writer(const char *name, const char *fp)
{
    struct proc p;
    int rc = join(name, "writer", fp, &p);
    uint32_t rng = (uint32_t)getpid();
    while (rc == OK) {
        uint32_t cursor = 0, st, growing = 0;
        struct rs_table_ref r;
        while (rc == OK && rs_table_next(p.t, &cursor, 1ull << GROWING, &r, &st) == RS_OK)
            rc = grow(&p, r, &rng), growing++;
        int stop = atomic_load_explicit(&p.ctl->stop, memory_order_acquire) != 0;
        if (rc == OK && stop && growing == 0) {
            rs_role_stop(&p.role);
            return OK;
        }
        /* At most 4 lists grow at once (4 x 700 tokens fit the arena), so some always finish. */
        void *rec;
        rs_err e = stop || growing >= 4 ? RS_EFULL : rs_table_claim(p.t, &r, &rec);
        if (e == RS_OK && ((e = rs_arena_list_init(p.a, r)) != RS_OK ||
                           (e = rs_table_publish(p.t, r, GROWING)) != RS_OK))
            rc = code_of(e);
        else if (e != RS_OK && e != RS_EFULL)
            rc = code_of(e);
        sched_yield();
    }
    return rc;
}

/* Verifies every token of DONE record r, then frees it. */
static int reap(struct proc *p, struct rs_table_ref r)
{
    int32_t buf[1024];
    uint32_t got, target = target_len(r);
    rs_err e = rs_arena_read(p->a, r, 0, 1024, buf, &got);
    if (e != RS_OK)
        return code_of(e);
    if (got != target)
        return BAD_TOKENS;
    for (uint32_t i = 0; i < got; i++)
        if (buf[i] != tok(r, i))
            return BAD_TOKENS;
    if ((e = rs_arena_free_record(p->a, p->t, r, DONE)) != RS_OK)
        return code_of(e);
    atomic_fetch_add_explicit(&p->ctl->reaped, 1, memory_order_relaxed);
    return OK;
}

static int writer_exited(const rs_shm *shm)
{
    struct rs_role_info ri;
    return rs_role_info_at(shm, 0, &ri) == RS_OK && ri.phase == RS_ROLE_EXITED;
}

static int reaper(const char *name, const char *fp)
{
    struct proc p;
    int rc = join(name, "reaper", fp, &p);
    for (unsigned loop = 0; rc == OK; loop++) {
        uint32_t cursor = 0, st, live = 0;
        struct rs_table_ref r;
        while (rc == OK && rs_table_next(p.t, &cursor, 1ull << DONE, &r, &st) == RS_OK)
            rc = reap(&p, r);
        if (loop % 64 == 63 && rc == OK) /* the periodic audit a stage runs */
            rc = rs_table_recover(p.t) != RS_OK || rs_arena_recover(p.a) != RS_OK ? ERR : OK;
        cursor = 0;
        while (rs_table_next(p.t, &cursor, ~1ull, &r, &st) == RS_OK)
            live++;
        if (rc == OK && live == 0 && writer_exited(p.shm)) {
            /* A last audit, for chunks of writers that died since the previous one. */
            if (rs_table_recover(p.t) != RS_OK || rs_arena_recover(p.a) != RS_OK)
                return ERR;
            rs_role_stop(&p.role);
            return OK;
        }
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
    return rc;
}

struct storm {
    char name[96];
    rs_shm *shm;
    struct ctl *ctl;
    pid_t writer, reaper;
    uint64_t kills;
    uint32_t rng;
};

static pid_t spawn(struct storm *s, int is_writer, const char *fp)
{
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0)
        _exit(is_writer ? writer(s->name, fp) : reaper(s->name, fp));
    return pid;
}

static int wait_code(pid_t pid, double seconds)
{
    uint64_t deadline = rs_clock_ns() + (uint64_t)(seconds * 1e9);
    for (;;) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (rs_clock_ns() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static int storm_create(struct storm *s, const char *tag)
{
    static const char *const roles[] = {"writer", "reaper"};
    struct rs_shm_region_spec spec[4] = {
        {.name = "roles", .kind = RS_SHM_ROLES, .count = 2, .role_names = roles},
        {.name = "req", .kind = RS_SHM_TABLE, .count = N_REC, .elem_bytes = 1024},
        {.name = "tok", .kind = RS_SHM_ARENA, .count = N_CHUNKS, .elem_bytes = CHUNK_TOKENS},
        {.name = "ctl", .kind = RS_SHM_RAW, .bytes = sizeof(struct ctl)},
    };
    void *ctl;
    memset(s, 0, sizeof(*s));
    s->rng = 2024;
    snprintf(s->name, sizeof(s->name), "/rs-arena-%s-%d", tag, (int)getpid());
    shm_unlink(s->name);
    if (rs_shm_create(s->name, 1, spec, 4, &s->shm) != RS_OK ||
        rs_shm_region(s->shm, "ctl", RS_SHM_RAW, &ctl, NULL) != RS_OK)
        return 1;
    s->ctl = ctl;
    return 0;
}

static void storm_destroy(struct storm *s)
{
    if (s->writer > 0)
        kill(s->writer, SIGKILL), waitpid(s->writer, NULL, 0);
    if (s->reaper > 0)
        kill(s->reaper, SIGKILL), waitpid(s->reaper, NULL, 0);
    rs_shm_detach(&s->shm);
    shm_unlink(s->name);
}

/* Stops, drains, and checks that nothing leaked. */
static int storm_finish(struct storm *s)
{
    atomic_store(&s->ctl->stop, 1);
    if (s->writer <= 0)
        s->writer = spawn(s, 1, NULL);
    if (s->reaper <= 0)
        s->reaper = spawn(s, 0, NULL);
    int wc = wait_code(s->writer, 60), rc = wait_code(s->reaper, 60);
    s->writer = s->reaper = 0;
    if (wc != OK || rc != OK) {
        fprintf(stderr, "arena storm: writer %d reaper %d at the end\n", wc, rc);
        return 1;
    }
    rs_table *t;
    rs_arena *a;
    struct rs_table_stats ts;
    struct rs_arena_stats as;
    int bad = rs_table_open(s->shm, "req", NULL, &t) != RS_OK ||
              rs_arena_open(s->shm, "tok", NULL, t, LIST_OFF, &a) != RS_OK;
    bad = bad || rs_table_check(t, &ts) != RS_OK || rs_arena_check(a, &as) != RS_OK ||
          rs_role_check(s->shm) != RS_OK;
    bad = bad || ts.n_state[RS_TABLE_FREE] != N_REC || as.n_free != N_CHUNKS;
    printf("arena storm %s: %llu kills, %llu requests verified and freed, %llu tokens appended, "
           "%llu chunks reserved, %llu freed by the audit, %llu linked by the audit, %llu tail "
           "copies, %llu claims reclaimed; leaked: %llu records, %llu chunks\n",
           s->name, (unsigned long long)s->kills, (unsigned long long)atomic_load(&s->ctl->reaped),
           (unsigned long long)atomic_load(&s->ctl->appended), (unsigned long long)as.reserves,
           (unsigned long long)as.audit_freed, (unsigned long long)as.audit_linked,
           (unsigned long long)as.tail_copies, (unsigned long long)ts.reclaimed,
           (unsigned long long)(N_REC - ts.n_state[RS_TABLE_FREE]),
           (unsigned long long)(N_CHUNKS - as.n_free));
    rs_arena_close(&a);
    rs_table_close(&t);
    return bad;
}

static int test_kill_storm_writer_and_reaper(void)
{
    struct storm s;
    RS_CHECK(storm_create(&s, "storm") == 0);
    s.writer = spawn(&s, 1, NULL);
    s.reaper = spawn(&s, 0, NULL);
    int rc = 0;
    while (rc == 0 && s.kills < 200) {
        s.rng ^= s.rng << 13, s.rng ^= s.rng >> 17, s.rng ^= s.rng << 5;
        struct timespec ts = {0, (long)(s.rng % 3000) * 1000};
        nanosleep(&ts, NULL);
        pid_t *victim = (s.rng >> 20) % 3 ? &s.writer : &s.reaper;
        kill(*victim, SIGKILL);
        int code = wait_code(*victim, 10);
        if (code != 128 + SIGKILL)
            rc = fprintf(stderr, "arena storm: %s ended with %d\n",
                         victim == &s.writer ? "writer" : "reaper", code);
        *victim = spawn(&s, victim == &s.writer, NULL);
        s.kills++;
    }
    if (rc == 0)
        rc = storm_finish(&s);
    storm_destroy(&s);
    RS_CHECK(rc == 0);
    return 0;
}

/* A writer stopped at `fp`, replaced, resumed: refused, and nothing it held leaks. */
static int zombie_writer(const char *fp)
{
    struct storm s;
    if (storm_create(&s, "zombie") != 0)
        return 1;
    pid_t zombie = spawn(&s, 1, fp);
    s.reaper = spawn(&s, 0, NULL);
    int st, rc = waitpid(zombie, &st, WUNTRACED) != zombie || !WIFSTOPPED(st);
    if (rc == 0) {
        s.writer = spawn(&s, 1, NULL);
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
        kill(zombie, SIGCONT);
        int code = wait_code(zombie, 30);
        if (code != FENCED)
            rc = fprintf(stderr, "zombie writer %s ended with %d, expected fenced\n", fp, code);
    } else {
        kill(zombie, SIGKILL), waitpid(zombie, NULL, 0);
    }
    if (rc == 0)
        rc = storm_finish(&s);
    storm_destroy(&s);
    return rc != 0;
}

static int test_stopped_writer_replaced_then_resumed_is_refused(void)
{
    RS_CHECK(zombie_writer("arena.append.written:40:stop") == 0);
    RS_CHECK(zombie_writer("arena.append.before_publish:40:stop") == 0);
    RS_CHECK(zombie_writer("table.claim.after_cas:10:stop") == 0);
    return 0;
}

/* Kills a start-up at `fp` (an audit step) and expects it to die there. */
static int die_in_audit(struct storm *s, int is_writer, const char *fp)
{
    int code = wait_code(spawn(s, is_writer, fp), 30);
    s->kills++;
    if (code != 128 + SIGKILL)
        fprintf(stderr, "%s %s: ended with %d, not at the failpoint\n",
                is_writer ? "writer" : "reaper", fp, code);
    return code != 128 + SIGKILL;
}

static int test_killed_during_the_audit_twice(void)
{
    static const char *debris[] = {"arena.append.written:25", "arena.append.after_publish:25",
                                   "table.claim.after_cas:7"};
    static const char *audit[] = {"arena.recover.chunk:1", "arena.recover.chunk:3",
                                  "table.recover.record:1"};
    for (size_t i = 0; i < 3; i++) {
        struct storm s;
        RS_CHECK(storm_create(&s, "audit") == 0);
        /* A writer dies mid-operation, leaving debris; two starts die inside the audit. */
        int rc = die_in_audit(&s, 1, debris[i]) || die_in_audit(&s, 1, audit[i]) ||
                 die_in_audit(&s, 0, "arena.recover.chunk:2");
        if (rc == 0)
            rc = storm_finish(&s);
        storm_destroy(&s);
        RS_CHECK_MSG(rc == 0, "debris %s, audit death %s", debris[i], audit[i]);
    }
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_kill_storm_writer_and_reaper),
    RS_TEST(test_stopped_writer_replaced_then_resumed_is_refused),
    RS_TEST(test_killed_during_the_audit_twice),
};

RS_TEST_MAIN(cases)

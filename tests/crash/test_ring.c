/* SPDX-License-Identifier: MIT */
/*
 * Ring crash tests with real processes (see ring_chaos.h): random SIGKILL
 * storms of producer and consumer (1,000 kills across the four storm cases),
 * a kill at every failpoint of claim/commit/get/release, kills during
 * recovery (twice in a row), a producer and a consumer SIGSTOPped, replaced
 * and SIGCONTed (their writes refused; also resumed while the replacement is
 * still starting), and a full ring whose consumer is killed (backpressure, no
 * overwrite). Each ends with the chaos audit: every committed record
 * delivered exactly once after dedup, in order, intact, no slot or owner leaked.
 */
#include <string.h>

#include "tests/crash/ring_chaos.h"
#include "tests/rs_test.h"

static struct chaos_cfg base_cfg(void)
{
    struct chaos_cfg cfg = {.slots = 16, .slot_bytes = 512, .flags = RS_RING_CRC,
                            .max_records = 1u << 18, .kills = 250, .max_delay_us = 2000,
                            .victims = 3, .seed = 12345};
    return cfg;
}

static int test_kill_storm_both_sides(void)
{
    struct chaos_cfg cfg = base_cfg();
    return chaos_run(&cfg, "both");
}

static int test_kill_storm_two_slot_ring(void)
{
    struct chaos_cfg cfg = base_cfg();
    cfg.slots = 2;
    cfg.seed = 777;
    return chaos_run(&cfg, "tiny");
}

static int test_kill_storm_consumer_behind_a_full_ring(void)
{
    struct chaos_cfg cfg = base_cfg();
    cfg.slots = 4;
    cfg.victims = 2;
    cfg.seed = 4242;
    return chaos_run(&cfg, "cons");
}

static int test_kill_storm_across_seq_and_lap_wrap(void)
{
    struct chaos_cfg cfg = base_cfg();
    cfg.start_seq = UINT64_MAX - 2000; /* seq wraps 2^64 and the lap wraps 2^26 together */
    cfg.seed = 99;
    struct chaos c;
    RS_CHECK(chaos_create(&c, &cfg, "wrap") == 0);
    uint64_t t0 = rs_clock_ns();
    int rc = chaos_storm(&c);
    /* Keep going until the run has crossed the wrap, still killing. */
    while (rc == 0 && rs_ring_consumed(c.obs) - cfg.start_seq < 4000)
        rc = chaos_kill_one(&c);
    if (rc == 0)
        rc = chaos_finish(&c, 0, (rs_clock_ns() - t0) / 1e9);
    uint64_t end = atomic_load(&c.log->end);
    chaos_destroy(&c);
    RS_CHECK(rc == 0);
    RS_CHECK_MSG(end < cfg.start_seq, "run ended at %llu: never crossed 2^64",
                 (unsigned long long)end);
    return 0;
}

/* The victim side runs with failpoint spec `fp`, dies there, restarts; then audit. */
static int die_at(const char *fp, int producer)
{
    struct chaos_cfg cfg = base_cfg();
    cfg.slots = 8;
    struct chaos c;
    if (chaos_create(&c, &cfg, "step") != 0)
        return 1;
    c.prod = chaos_spawn(&c, 1, producer ? fp : NULL);
    c.cons = chaos_spawn(&c, 0, producer ? NULL : fp);
    pid_t *victim = producer ? &c.prod : &c.cons;
    int code = chaos_wait_for(*victim, 30);
    *victim = 0;
    int rc = code != 128 + SIGKILL;
    if (rc)
        fprintf(stderr, "%s: victim ended with %d (%s), not at the failpoint\n", fp, code,
                chaos_exit_name(code));
    c.kills++;
    producer ? c.prod_kills++ : c.cons_kills++;
    if (rc == 0)
        rc = chaos_finish(&c, 0, 0);
    chaos_destroy(&c);
    return rc;
}

static int test_kill_at_every_operation_step(void)
{
    static const struct {
        const char *label;
        int producer;
    } steps[] = {
        {"ring.claim.after_cas", 1}, {"ring.commit.before", 1},     {"ring.commit.after", 1},
        {"ring.get.after_cas", 0},   {"ring.release.before", 0},    {"ring.release.after", 0},
        {"chaos.after_effect", 0}, /* redelivered after the effect: the dedup drops it */
    };
    static const int nth[] = {1, 2, 17};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        for (size_t j = 0; j < 3; j++) {
            char fp[96];
            snprintf(fp, sizeof(fp), "%s:%d", steps[i].label, nth[j]);
            RS_CHECK_MSG(die_at(fp, steps[i].producer) == 0, "failpoint %s", fp);
        }
    }
    return 0;
}

/* Leaves a WRITING slot (dead producer) and a READING slot (dead consumer). */
static int leave_debris(struct chaos *c)
{
    c->prod = chaos_spawn(c, 1, "ring.commit.before:6");
    c->cons = chaos_spawn(c, 0, "ring.get.after_cas:3");
    int pc = chaos_wait_for(c->prod, 30), cc = chaos_wait_for(c->cons, 30);
    c->prod = c->cons = 0;
    c->kills += 2, c->prod_kills++, c->cons_kills++;
    struct rs_ring_stats st;
    if (pc != 128 + SIGKILL || cc != 128 + SIGKILL || rs_ring_check(c->obs, &st) != RS_OK ||
        st.n_state[RS_RING_WRITING] != 1 || st.n_state[RS_RING_READING] != 1) {
        fprintf(stderr, "debris: producer %d consumer %d\n", pc, cc);
        return 1;
    }
    return 0;
}

/* Starts the side of `role` with failpoint `fp` and expects it to die there. */
static int die_recovering(struct chaos *c, const char *role, const char *fp)
{
    pid_t pid = chaos_spawn(c, strcmp(role, "prod") == 0, fp);
    int code = chaos_wait_for(pid, 30);
    c->kills++;
    strcmp(role, "prod") == 0 ? c->prod_kills++ : c->cons_kills++;
    if (code != 128 + SIGKILL)
        fprintf(stderr, "%s %s: ended with %d (%s)\n", role, fp, code, chaos_exit_name(code));
    return code != 128 + SIGKILL;
}

static int test_killed_during_recovery_twice(void)
{
    static const struct {
        const char *role, *label;
    } points[] = {
        {"prod", "role.start.before_fence"}, {"prod", "role.start.after_fence"},
        {"prod", "ring.recover.prod.begin"}, {"prod", "ring.recover.prod.slot"},
        {"prod", "ring.recover.prod.floor"}, {"cons", "role.start.after_fence"},
        {"cons", "ring.recover.cons.begin"}, {"cons", "ring.recover.cons.slot"},
    };
    for (size_t i = 0; i < sizeof(points) / sizeof(points[0]); i++) {
        struct chaos_cfg cfg = base_cfg();
        cfg.slots = 8;
        struct chaos c;
        RS_CHECK(chaos_create(&c, &cfg, "recov") == 0);
        char fp[96], again[96];
        snprintf(fp, sizeof(fp), "%s:1", points[i].label);
        snprintf(again, sizeof(again), "ring.recover.%s.begin:1", points[i].role);
        int rc = leave_debris(&c) || die_recovering(&c, points[i].role, fp) ||
                 die_recovering(&c, points[i].role, again); /* a second death */
        if (rc == 0)
            rc = chaos_finish(&c, 0, 0);
        chaos_destroy(&c);
        RS_CHECK_MSG(rc == 0, "recovery point %s of %s", points[i].label, points[i].role);
    }
    return 0;
}

/* Spawns the zombie (stopping itself at `fp`) and the other side. 0 once it is stopped. */
static int start_zombie(struct chaos *c, const char *fp, int producer, pid_t *zombie)
{
    *zombie = chaos_spawn(c, producer, fp);
    if (producer)
        c->cons = chaos_spawn(c, 0, NULL);
    else
        c->prod = chaos_spawn(c, 1, NULL);
    int st;
    if (waitpid(*zombie, &st, WUNTRACED) == *zombie && WIFSTOPPED(st))
        return 0;
    fprintf(stderr, "zombie %s did not stop at its failpoint\n", fp);
    kill(*zombie, SIGKILL), chaos_wait(*zombie);
    return 1;
}

/*
 * Waits until `pid` holds role `idx` in phase READY, i.e. has fenced the
 * zombie and run its recovery. A fixed sleep is not enough: on a loaded host
 * the replacement may not even have fenced 50 ms later, and a zombie resumed
 * then is still the current incarnation (or gives its claim back itself).
 */
static int wait_replacement_ready(struct chaos *c, uint32_t idx, pid_t pid)
{
    uint64_t deadline = rs_clock_ns() + 30ull * 1000000000ull;
    struct rs_role_info ri;
    while (rs_role_info_at(c->shm, idx, &ri) == RS_OK &&
           (ri.pid != (uint32_t)pid || ri.phase != RS_ROLE_READY)) {
        if (rs_clock_ns() > deadline) {
            fprintf(stderr, "replacement %d not READY after 30 s\n", (int)pid);
            return 1;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* Resumes the zombie: it must exit fenced. 0 when it did. */
static int resume_fenced(pid_t zombie, const char *fp)
{
    kill(zombie, SIGCONT);
    int code = chaos_wait_for(zombie, 30);
    if (code != CHAOS_FENCED)
        fprintf(stderr, "zombie %s ended with %d (%s), expected fenced\n", fp, code,
                chaos_exit_name(code));
    return code != CHAOS_FENCED;
}

/* Audits (holes allowed) and checks them: expect_holes 1 some, 0 none, -1 either. */
static int zombie_audit(struct chaos *c, const char *fp, int expect_holes)
{
    struct rs_ring_stats rs;
    int rc = chaos_finish(c, 1, 0);
    if (rc == 0 && rs_ring_check(c->obs, &rs) == RS_OK && expect_holes >= 0 &&
        (rs.holes_passed > 0) != expect_holes)
        rc = fprintf(stderr, "zombie %s: %llu holes\n", fp, (unsigned long long)rs.holes_passed);
    return rc != 0;
}

/* Stops one side at `fp` (":stop"), starts a replacement, resumes the zombie once replaced. */
static int zombie_case(const char *fp, int producer, int expect_holes)
{
    struct chaos_cfg cfg = base_cfg();
    cfg.slots = 8;
    struct chaos c;
    pid_t zombie;
    if (chaos_create(&c, &cfg, "zombie") != 0)
        return 1;
    int rc = start_zombie(&c, fp, producer, &zombie);
    if (rc == 0) {
        pid_t repl = chaos_spawn(&c, producer, NULL);
        *(producer ? &c.prod : &c.cons) = repl;
        struct timespec ts = {0, 50 * 1000000}; /* the replacement runs on a while */
        if (wait_replacement_ready(&c, producer ? 0 : 1, repl) != 0) {
            kill(zombie, SIGKILL), chaos_wait(zombie);
            rc = 1;
        } else {
            nanosleep(&ts, NULL);
            rc = resume_fenced(zombie, fp);
            nanosleep(&ts, NULL);
        }
    }
    if (rc == 0)
        rc = zombie_audit(&c, fp, expect_holes);
    chaos_destroy(&c);
    return rc != 0;
}

/*
 * The zombie resumes while its replacement is held at `repl_fp` (":stop"),
 * as a loaded host holds a process it just forked. Held after its fence
 * (fenced_first), the zombie must give back what it holds (a release already
 * under way completes: its effect is done) and exit fenced on its own, before
 * the replacement runs on: no hole. Held before the fence,
 * the zombie is still the current incarnation and runs on until the
 * replacement fences it.
 */
static int zombie_before_recovery(const char *fp, int producer, const char *repl_fp,
                                  int fenced_first)
{
    struct chaos_cfg cfg = base_cfg();
    cfg.slots = 8;
    struct chaos c;
    pid_t zombie;
    if (chaos_create(&c, &cfg, "early") != 0)
        return 1;
    int st, rc = start_zombie(&c, fp, producer, &zombie);
    if (rc == 0) {
        pid_t repl = chaos_spawn(&c, producer, repl_fp);
        *(producer ? &c.prod : &c.cons) = repl;
        if (waitpid(repl, &st, WUNTRACED) != repl || !WIFSTOPPED(st)) {
            fprintf(stderr, "replacement did not stop at %s\n", repl_fp);
            kill(zombie, SIGKILL), chaos_wait(zombie);
            rc = 1;
        } else if (fenced_first) {
            rc = resume_fenced(zombie, fp);
            kill(repl, SIGCONT);
        } else {
            kill(zombie, SIGCONT);
            struct timespec ts = {0, 50 * 1000000}; /* the zombie runs on as the current one */
            nanosleep(&ts, NULL);
            kill(repl, SIGCONT);
            rc = resume_fenced(zombie, fp);
        }
        /* The replacement recovers and runs on: it reuses what the zombie gave back. */
        if (rc == 0 && wait_replacement_ready(&c, producer ? 0 : 1, repl) == 0) {
            struct timespec ts = {0, 50 * 1000000};
            nanosleep(&ts, NULL);
        }
    }
    if (rc == 0)
        rc = zombie_audit(&c, fp, fenced_first ? 0 : -1);
    chaos_destroy(&c);
    return rc != 0;
}

static int test_stopped_producer_replaced_then_resumed_is_refused(void)
{
    RS_CHECK(zombie_case("ring.commit.before:20:stop", 1, 1) == 0);
    RS_CHECK(zombie_case("ring.claim.after_cas:20:stop", 1, 1) == 0);
    RS_CHECK(zombie_case("ring.commit.after:20:stop", 1, 0) == 0);
    return 0;
}

static int test_stopped_consumer_replaced_then_resumed_is_refused(void)
{
    RS_CHECK(zombie_case("ring.get.after_cas:20:stop", 0, 0) == 0);
    RS_CHECK(zombie_case("ring.release.before:20:stop", 0, 0) == 0);
    RS_CHECK(zombie_case("ring.release.after:20:stop", 0, 0) == 0);
    return 0;
}

/*
 * The interleavings a loaded host produces when the replacement is slow to
 * start (crash.ring.stopped_producer_replaced_then_resumed_is_refused once
 * saw "0 holes" from one): the zombie resumes after the fence but before
 * recovery, or before the fence.
 */
static int test_zombie_resumed_before_its_replacement_recovered(void)
{
    static const struct {
        const char *fp, *repl_fp;
        int producer, fenced_first;
    } cases[] = {
        {"ring.claim.after_cas:20:stop", "role.start.after_fence:1:stop", 1, 1},
        {"ring.claim.after_cas:20:stop", "ring.recover.prod.begin:1:stop", 1, 1},
        {"ring.commit.before:20:stop", "role.start.after_fence:1:stop", 1, 1},
        {"ring.claim.after_cas:20:stop", "role.start.before_fence:1:stop", 1, 0},
        {"ring.commit.before:20:stop", "role.start.before_fence:1:stop", 1, 0},
        {"ring.get.after_cas:20:stop", "role.start.after_fence:1:stop", 0, 1},
        {"ring.release.before:20:stop", "ring.recover.cons.begin:1:stop", 0, 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        RS_CHECK_MSG(zombie_before_recovery(cases[i].fp, cases[i].producer, cases[i].repl_fp,
                                            cases[i].fenced_first) == 0,
                     "zombie %s, replacement held at %s", cases[i].fp, cases[i].repl_fp);
    return 0;
}

static int wait_full(struct chaos *c, uint64_t min_full, struct rs_ring_stats *st)
{
    for (int i = 0; i < 10000; i++) {
        if (rs_ring_check(c->obs, st) != RS_OK)
            return 1;
        if (st->full >= min_full)
            return 0;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return 1;
}

static int test_full_ring_with_killed_consumer_never_overwrites(void)
{
    struct chaos_cfg cfg = base_cfg();
    cfg.slots = 4;
    struct chaos c;
    RS_CHECK(chaos_create(&c, &cfg, "full") == 0);
    c.prod = chaos_spawn(&c, 1, NULL);
    struct rs_ring_stats st;
    int rc = wait_full(&c, 100, &st);
    rc = rc || st.commits != 4 || st.n_state[RS_RING_COMMITTED] != 4;
    /* A consumer takes one record, dies holding the second: still full, nothing overwritten. */
    c.cons = chaos_spawn(&c, 0, "ring.get.after_cas:2");
    rc = rc || chaos_wait_for(c.cons, 30) != 128 + SIGKILL;
    c.cons = 0, c.kills++, c.cons_kills++;
    rc = rc || rs_ring_check(c.obs, &st) != RS_OK;
    rc = rc || wait_full(&c, st.full + 100, &st); /* the producer is blocked again */
    rc = rc || st.commits != 5 || st.releases != 1 || st.n_state[RS_RING_READING] != 1;
    if (rc == 0)
        rc = chaos_finish(&c, 0, 0);
    chaos_destroy(&c);
    RS_CHECK_MSG(rc == 0, "commits %llu releases %llu", (unsigned long long)st.commits,
                 (unsigned long long)st.releases);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_kill_storm_both_sides),
    RS_TEST(test_kill_storm_two_slot_ring),
    RS_TEST(test_kill_storm_consumer_behind_a_full_ring),
    RS_TEST(test_kill_storm_across_seq_and_lap_wrap),
    RS_TEST(test_kill_at_every_operation_step),
    RS_TEST(test_killed_during_recovery_twice),
    RS_TEST(test_stopped_producer_replaced_then_resumed_is_refused),
    RS_TEST(test_stopped_consumer_replaced_then_resumed_is_refused),
    RS_TEST(test_zombie_resumed_before_its_replacement_recovered),
    RS_TEST(test_full_ring_with_killed_consumer_never_overwrites),
};

RS_TEST_MAIN(cases)

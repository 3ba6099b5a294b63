/* SPDX-License-Identifier: MIT */
/*
 * Role table: incarnations only grow, a new start fences the previous one,
 * an older incarnation can never take a role back, and the liveness status
 * tells current, fenced-but-alive (stopped) and dead apart using real child
 * processes, including a reused pid.
 */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "ipc/failpoint.h"
#include "ipc/role.h"
#include "ipc/role_impl.h"
#include "ipc/shm.h"
#include "tests/rs_test.h"
#include "tests/unit/ipc_fixture.h"

static const char *const names[] = {"alpha", "beta", "gamma"};

static int setup(struct fx *f)
{
    struct rs_shm_region_spec s[1] = {
        {.name = "roles", .kind = RS_SHM_ROLES, .count = 3, .role_names = names}};
    return fx_create(f, s, 1);
}

static int test_start_fences_previous_incarnation(void)
{
    struct fx f;
    RS_CHECK(setup(&f) == 0);
    rs_role *a, *b, *c;
    RS_CHECK(rs_role_start(f.shm, "alpha", &a) == RS_OK && rs_role_inc(a) == 1);
    RS_CHECK(rs_role_current(a) && rs_role_ready(a) == RS_OK);
    RS_CHECK(rs_role_start(f.shm, "beta", &c) == RS_OK && rs_role_inc(c) == 2);
    RS_CHECK(rs_role_start(f.shm, "alpha", &b) == RS_OK && rs_role_inc(b) == 3);
    RS_CHECK(!rs_role_current(a) && rs_role_current(b) && rs_role_current(c));
    RS_CHECK(rs_role_ready(a) == RS_ESTALE);
    struct rs_role_info ri;
    RS_CHECK(rs_role_info_at(f.shm, 0, &ri) == RS_OK);
    RS_CHECK(ri.inc == 3 && ri.phase == RS_ROLE_RECOVERING && ri.n_starts == 2 && ri.n_ready == 1);
    RS_CHECK(ri.pid == (uint32_t)getpid() && ri.alive);
    RS_CHECK(rs_role_ready(b) == RS_OK);
    RS_CHECK(rs_role_info_at(f.shm, 0, &ri) == RS_OK && ri.phase == RS_ROLE_READY);
    RS_CHECK(rs_role_info_at(f.shm, 0, &ri) == RS_OK && ri.ready_ns >= ri.started_ns);
    RS_CHECK(rs_role_check(f.shm) == RS_OK);
    rs_role_stop(&a); /* fenced: stopping it leaves the role alone */
    RS_CHECK(rs_role_info_at(f.shm, 0, &ri) == RS_OK && ri.phase == RS_ROLE_READY);
    rs_role_stop(&b);
    RS_CHECK(b == NULL && rs_role_info_at(f.shm, 0, &ri) == RS_OK && ri.phase == RS_ROLE_EXITED);
    rs_role_stop(&c);
    rs_role_stop(&c);
    fx_destroy(&f);
    return 0;
}

static int test_unknown_role_is_enoent(void)
{
    struct fx f;
    RS_CHECK(setup(&f) == 0);
    rs_role *a;
    RS_CHECK(rs_role_start(f.shm, "delta", &a) == RS_ENOENT && a == NULL);
    RS_CHECK(rs_role_find(f.shm, "gamma") == 2 && rs_role_find(f.shm, "x") == -1);
    RS_CHECK(rs_role_count(f.shm) == 3);
    fx_destroy(&f);
    return 0;
}

static int test_heartbeat_advances_until_fenced(void)
{
    struct fx f;
    RS_CHECK(setup(&f) == 0);
    rs_role *a, *b;
    struct rs_role_info r1, r2;
    RS_CHECK(rs_role_start(f.shm, "beta", &a) == RS_OK);
    RS_CHECK(rs_role_info_at(f.shm, 1, &r1) == RS_OK);
    usleep(2000);
    rs_role_heartbeat(a);
    RS_CHECK(rs_role_info_at(f.shm, 1, &r2) == RS_OK && r2.heartbeat_ns > r1.heartbeat_ns);
    RS_CHECK(rs_role_start(f.shm, "beta", &b) == RS_OK);
    RS_CHECK(rs_role_info_at(f.shm, 1, &r1) == RS_OK);
    usleep(2000);
    rs_role_heartbeat(a); /* fenced: must not touch the new incarnation's record */
    RS_CHECK(rs_role_info_at(f.shm, 1, &r2) == RS_OK && r2.heartbeat_ns == r1.heartbeat_ns);
    rs_role_stop(&a);
    rs_role_stop(&b);
    fx_destroy(&f);
    return 0;
}

struct child_arg {
    struct fx *f;
    const char *spec;
};

/* Takes an incarnation, stops before the fence (failpoint), then tries to fence. */
static int late_fencer(void *p)
{
    struct child_arg *c = p;
    rs_shm *shm;
    if (rs_shm_attach(c->f->name, NULL, 0, 0, NULL, 0, &shm) != RS_OK)
        return 10;
    rs_failpoint_set(c->spec);
    rs_role *r;
    rs_err e = rs_role_start(shm, "gamma", &r);
    return e == RS_ESTALE ? 0 : 20 + (e == RS_OK);
}

static int test_older_incarnation_cannot_take_role_back(void)
{
    struct fx f;
    RS_CHECK(setup(&f) == 0);
    struct child_arg arg = {&f, "role.start.before_fence:1:stop"};
    pid_t pid = fx_spawn(late_fencer, &arg);
    int st;
    RS_CHECK(waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st)); /* holds inc 1, not published */
    rs_role *b;
    RS_CHECK(rs_role_start(f.shm, "gamma", &b) == RS_OK && rs_role_inc(b) == 2);
    RS_CHECK(kill(pid, SIGCONT) == 0);
    int rc = fx_wait(pid);
    RS_CHECK_MSG(rc == 0, "late fencer exit %d", rc);
    RS_CHECK(rs_role_current(b));
    rs_role_stop(&b);
    fx_destroy(&f);
    return 0;
}

/* Starts a role and waits to be signalled. */
static int holder(void *p)
{
    struct fx *f = p;
    rs_shm *shm;
    rs_role *r;
    if (rs_shm_attach(f->name, NULL, 0, 0, NULL, 0, &shm) != RS_OK ||
        rs_role_start(shm, "alpha", &r) != RS_OK || rs_role_ready(r) != RS_OK)
        return 10;
    for (;;)
        pause();
}

static int wait_ready(const rs_shm *shm, uint32_t role, uint32_t *inc)
{
    for (int i = 0; i < 5000; i++) {
        struct rs_role_info ri;
        if (rs_role_info_at(shm, role, &ri) == RS_OK && ri.phase == RS_ROLE_READY) {
            *inc = ri.inc;
            return 0;
        }
        usleep(1000);
    }
    return 1;
}

static int test_inc_status_tells_current_stopped_and_dead(void)
{
    struct fx f;
    RS_CHECK(setup(&f) == 0);
    pid_t pid = fx_spawn(holder, &f);
    uint32_t inc;
    RS_CHECK(wait_ready(f.shm, 0, &inc) == 0);
    RS_CHECK(rs_role_inc_status(f.shm, inc) == RS_INC_CURRENT);
    RS_CHECK(kill(pid, SIGSTOP) == 0);
    rs_role *b;
    RS_CHECK(rs_role_start(f.shm, "alpha", &b) == RS_OK);
    RS_CHECK(rs_role_inc_status(f.shm, inc) == RS_INC_FENCED_ALIVE); /* stopped, not dead */
    RS_CHECK(rs_role_inc_status(f.shm, rs_role_inc(b)) == RS_INC_CURRENT);
    RS_CHECK(kill(pid, SIGKILL) == 0);
    siginfo_t si;
    RS_CHECK(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) == 0); /* dead, not yet reaped */
    RS_CHECK(rs_role_inc_status(f.shm, inc) == RS_INC_FENCED_DEAD);
    fx_wait(pid);
    RS_CHECK(rs_role_inc_status(f.shm, inc) == RS_INC_FENCED_DEAD);
    RS_CHECK(rs_role_inc_status(f.shm, 0) == RS_INC_FENCED_DEAD);
    RS_CHECK(rs_role_inc_status(f.shm, 999) == RS_INC_FENCED_DEAD); /* never made */
    rs_role_stop(&b);
    fx_destroy(&f);
    return 0;
}

static int test_reused_pid_reads_as_dead(void)
{
    struct fx f;
    RS_CHECK(setup(&f) == 0);
    rs_role *a, *b;
    RS_CHECK(rs_role_start(f.shm, "beta", &a) == RS_OK);
    RS_CHECK(rs_role_start(f.shm, "beta", &b) == RS_OK);
    RS_CHECK(rs_role_inc_status(f.shm, rs_role_inc(a)) == RS_INC_FENCED_ALIVE);
    /* Same pid, other start time: the pid was reused by another process. */
    void *roles;
    RS_CHECK(rs_shm_region(f.shm, "roles", RS_SHM_ROLES, &roles, NULL) == RS_OK);
    struct inc_reg *e = roles_reg(roles, rs_role_inc(a));
    atomic_store(&e->start_ticks, atomic_load(&e->start_ticks) + 1);
    RS_CHECK(rs_role_inc_status(f.shm, rs_role_inc(a)) == RS_INC_FENCED_DEAD);
    /* An incarnation pushed out of the registry is treated as gone. */
    atomic_store(&e->inc, rs_role_inc(a) + RS_ROLE_REGISTRY);
    RS_CHECK(rs_role_inc_status(f.shm, rs_role_inc(a)) == RS_INC_FENCED_DEAD);
    rs_role_stop(&a);
    rs_role_stop(&b);
    fx_destroy(&f);
    return 0;
}

static int test_check_detects_broken_invariants(void)
{
    struct fx f;
    RS_CHECK(setup(&f) == 0);
    rs_role *a;
    RS_CHECK(rs_role_start(f.shm, "alpha", &a) == RS_OK && rs_role_check(f.shm) == RS_OK);
    void *roles;
    RS_CHECK(rs_shm_region(f.shm, "roles", RS_SHM_ROLES, &roles, NULL) == RS_OK);
    uint64_t w = atomic_load(&roles_rec(roles, 0)->word);
    atomic_store(&roles_rec(roles, 1)->word, w); /* one incarnation current for two roles */
    RS_CHECK(rs_role_check(f.shm) == RS_EMISMATCH);
    atomic_store(&roles_rec(roles, 1)->word, rs_sw_make(RS_ROLE_READY, 0, 77)); /* never made */
    RS_CHECK(rs_role_check(f.shm) == RS_EMISMATCH);
    rs_role_stop(&a);
    fx_destroy(&f);
    return 0;
}

static int test_failpoint_specs_are_checked(void)
{
    RS_CHECK(rs_failpoint_set("nocolon") == RS_EINVAL);
    RS_CHECK(rs_failpoint_set("x:0") == RS_EINVAL);
    RS_CHECK(rs_failpoint_set("x:3:bogus") == RS_EINVAL);
    RS_CHECK(rs_failpoint_set(":3") == RS_EINVAL);
    RS_CHECK(rs_failpoint_set("unit.test.label:3") == RS_OK);
    RS_FAILPOINT("unit.test.label");
    RS_FAILPOINT("other.label");
    RS_FAILPOINT("unit.test.label");
    RS_CHECK(rs_failpoint_passes() == 2); /* the third pass would kill us */
    RS_CHECK(rs_failpoint_set(NULL) == RS_OK && rs_failpoint_passes() == 0);
    RS_CHECK(rs_failpoint_set("x:1:delay=") == RS_EINVAL);
    RS_CHECK(rs_failpoint_set("x:1:delay=0") == RS_EINVAL);
    RS_CHECK(rs_failpoint_set("x:1:delay=60001") == RS_EINVAL);
    RS_CHECK(rs_failpoint_set("x:1:delay=5ms") == RS_EINVAL);
    RS_CHECK(rs_failpoint_set("x:1:delay=-5") == RS_EINVAL);
    /* A delay fires at the n-th pass and every later one, and never kills. */
    RS_CHECK(rs_failpoint_set("unit.test.slow:2:delay=20") == RS_OK);
    RS_FAILPOINT("unit.test.slow");
    uint64_t t1 = rs_clock_ns();
    RS_FAILPOINT("unit.test.slow");
    RS_FAILPOINT("unit.test.slow");
    uint64_t t2 = rs_clock_ns();
    RS_CHECK(rs_failpoint_passes() == 3);
    RS_CHECK_MSG(t2 - t1 >= 40000000ull, "two delayed passes took %llu ns",
                 (unsigned long long)(t2 - t1));
    RS_CHECK(rs_failpoint_set(NULL) == RS_OK);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_start_fences_previous_incarnation),
    RS_TEST(test_unknown_role_is_enoent),
    RS_TEST(test_heartbeat_advances_until_fenced),
    RS_TEST(test_older_incarnation_cannot_take_role_back),
    RS_TEST(test_inc_status_tells_current_stopped_and_dead),
    RS_TEST(test_reused_pid_reads_as_dead),
    RS_TEST(test_check_detects_broken_invariants),
    RS_TEST(test_failpoint_specs_are_checked),
};

RS_TEST_MAIN(cases)

/* SPDX-License-Identifier: MIT */
/*
 * Slot table: the claim/publish/transition/free cycle, stale references
 * refused everywhere, a full table, iteration by state, recovery of claims
 * left by a dead child process (and not by a stopped one), fencing, and
 * generation wraparound.
 */
#include <string.h>
#include <unistd.h>

#include "ipc/failpoint.h"
#include "ipc/role.h"
#include "ipc/shm.h"
#include "ipc/stateword.h"
#include "ipc/table.h"
#include "tests/rs_test.h"
#include "tests/unit/ipc_fixture.h"

static const char *const names[] = {"a", "b"};

struct tfx {
    struct fx f;
    rs_role *role;
    rs_table *t;
};

static int tfx_open(struct tfx *x, uint32_t n, uint64_t start_gen)
{
    struct rs_shm_region_spec s[2] = {
        {.name = "roles", .kind = RS_SHM_ROLES, .count = 2, .role_names = names},
        {.name = "req", .kind = RS_SHM_TABLE, .count = n, .elem_bytes = 100, .start = start_gen},
    };
    memset(x, 0, sizeof(*x));
    return fx_create(&x->f, s, 2) != 0 || rs_role_start(x->f.shm, "a", &x->role) != RS_OK ||
           rs_table_open(x->f.shm, "req", x->role, &x->t) != RS_OK ||
           rs_table_recover(x->t) != RS_OK || rs_role_ready(x->role) != RS_OK;
}

static void tfx_close(struct tfx *x)
{
    rs_table_close(&x->t);
    rs_role_stop(&x->role);
    fx_destroy(&x->f);
}

static int test_claim_publish_transition_free_cycle(void)
{
    struct tfx x;
    RS_CHECK(tfx_open(&x, 8, 0) == 0);
    struct rs_table_ref ref;
    void *rec, *rec2;
    uint32_t st;
    RS_CHECK(rs_table_claim(x.t, &ref, &rec) == RS_OK && ref.index < 8 && ref.gen == 0);
    RS_CHECK(rs_table_record_bytes(x.t) == 100 && ((uintptr_t)rec % 64) == 0);
    strcpy(rec, "request one");
    RS_CHECK(rs_table_get(x.t, ref, &st, &rec2) == RS_OK && st == RS_TABLE_CLAIMED && rec2 == rec);
    RS_CHECK(rs_table_publish(x.t, ref, 1) == RS_EINVAL); /* not a user state */
    RS_CHECK(rs_table_publish(x.t, ref, 5) == RS_OK);
    RS_CHECK(rs_table_publish(x.t, ref, 5) == RS_ESTALE); /* no longer CLAIMED */
    RS_CHECK(rs_table_transition(x.t, ref, 6, 7) == RS_EAGAIN); /* not in state 6 */
    RS_CHECK(rs_table_transition(x.t, ref, 5, 6) == RS_OK);
    RS_CHECK(rs_table_get(x.t, ref, &st, &rec2) == RS_OK && st == 6);
    RS_CHECK(strcmp(rec2, "request one") == 0);
    RS_CHECK(rs_table_check(x.t, NULL) == RS_OK);
    RS_CHECK(rs_table_free(x.t, ref, 5) == RS_EAGAIN);
    RS_CHECK(rs_table_free(x.t, ref, 6) == RS_OK);
    uint32_t gen, owner;
    rs_table_peek(x.t, ref.index, &st, &gen, &owner);
    RS_CHECK(st == RS_TABLE_FREE && gen == 1 && owner == 0);
    struct rs_table_stats s;
    RS_CHECK(rs_table_check(x.t, &s) == RS_OK && s.n_state[0] == 8 && s.claims == 1 && s.frees == 1);
    RS_CHECK(rs_table_ref_unpack(rs_table_ref_pack(ref)).index == ref.index);
    RS_CHECK(rs_table_ref_unpack(rs_table_ref_pack(ref)).gen == ref.gen);
    tfx_close(&x);
    return 0;
}

static int test_stale_reference_is_refused_everywhere(void)
{
    struct tfx x;
    RS_CHECK(tfx_open(&x, 1, 0) == 0);
    struct rs_table_ref old, cur;
    void *rec;
    RS_CHECK(rs_table_claim(x.t, &old, &rec) == RS_OK && rs_table_publish(x.t, old, 2) == RS_OK);
    RS_CHECK(rs_table_free(x.t, old, 2) == RS_OK);
    RS_CHECK(rs_table_claim(x.t, &cur, &rec) == RS_OK && cur.index == old.index);
    RS_CHECK(cur.gen == old.gen + 1 && rs_table_publish(x.t, cur, 2) == RS_OK);
    RS_CHECK(rs_table_get(x.t, old, NULL, NULL) == RS_ESTALE);
    RS_CHECK(rs_table_transition(x.t, old, 2, 3) == RS_ESTALE);
    RS_CHECK(rs_table_free(x.t, old, 2) == RS_ESTALE);
    RS_CHECK(rs_table_publish(x.t, old, 3) == RS_ESTALE);
    RS_CHECK(rs_table_get(x.t, cur, NULL, NULL) == RS_OK);
    struct rs_table_ref bad = {5, 0};
    RS_CHECK(rs_table_get(x.t, bad, NULL, NULL) == RS_EINVAL);
    tfx_close(&x);
    return 0;
}

static int test_full_table_returns_efull(void)
{
    struct tfx x;
    RS_CHECK(tfx_open(&x, 4, 0) == 0);
    struct rs_table_ref ref[5];
    void *rec;
    for (int i = 0; i < 4; i++)
        RS_CHECK(rs_table_claim(x.t, &ref[i], &rec) == RS_OK);
    RS_CHECK(rs_table_claim(x.t, &ref[4], &rec) == RS_EFULL);
    RS_CHECK(rs_table_free(x.t, ref[2], RS_TABLE_CLAIMED) == RS_OK);
    RS_CHECK(rs_table_claim(x.t, &ref[4], &rec) == RS_OK && ref[4].index == ref[2].index);
    struct rs_table_stats s;
    RS_CHECK(rs_table_check(x.t, &s) == RS_OK && s.full == 1 && s.n_state[1] == 4);
    tfx_close(&x);
    return 0;
}

static int test_next_iterates_by_state_mask(void)
{
    struct tfx x;
    RS_CHECK(tfx_open(&x, 16, 0) == 0);
    struct rs_table_ref ref;
    void *rec;
    for (uint32_t i = 0; i < 10; i++) {
        RS_CHECK(rs_table_claim(x.t, &ref, &rec) == RS_OK);
        RS_CHECK(rs_table_publish(x.t, ref, 2 + i % 3) == RS_OK);
    }
    uint32_t cursor = 0, st, n = 0;
    while (rs_table_next(x.t, &cursor, (1ull << 3) | (1ull << 4), &ref, &st) == RS_OK) {
        RS_CHECK(st == 3 || st == 4);
        RS_CHECK(rs_table_get(x.t, ref, &st, NULL) == RS_OK);
        n++;
    }
    RS_CHECK(n == 6 && cursor == 16);
    cursor = 0, n = 0;
    while (rs_table_next(x.t, &cursor, 1ull << RS_TABLE_FREE, &ref, &st) == RS_OK)
        n++;
    RS_CHECK(n == 6);
    tfx_close(&x);
    return 0;
}

struct claimer {
    const char *name;
    const char *fp;
};

/* A child incarnation of role "b": claims 3 records, publishes one, then stops or exits. */
static int claimer_main(void *p)
{
    struct claimer *c = p;
    rs_shm *shm;
    rs_role *role;
    rs_table *t;
    if (rs_shm_attach(c->name, NULL, 0, 0, NULL, 0, &shm) != RS_OK ||
        rs_role_start(shm, "b", &role) != RS_OK || rs_table_open(shm, "req", role, &t) != RS_OK)
        return 10;
    struct rs_table_ref ref;
    void *rec;
    for (int i = 0; i < 3; i++)
        if (rs_table_claim(t, &ref, &rec) != RS_OK)
            return 11;
    if (rs_table_publish(t, ref, 9) != RS_OK)
        return 12;
    rs_failpoint_set(c->fp);
    RS_FAILPOINT("test.claimer.done");
    return 0;
}

static int test_recover_frees_claims_of_dead_incarnations_only(void)
{
    struct tfx x;
    RS_CHECK(tfx_open(&x, 8, 0) == 0);
    struct claimer c = {x.f.name, "test.claimer.done:1:stop"};
    pid_t pid = fx_spawn(claimer_main, &c);
    int ws;
    RS_CHECK(waitpid(pid, &ws, WUNTRACED) == pid && WIFSTOPPED(ws));
    struct rs_table_stats s;
    RS_CHECK(rs_table_recover(x.t) == RS_OK); /* claimer is current for role b */
    RS_CHECK(rs_table_check(x.t, &s) == RS_OK && s.n_state[1] == 2 && s.n_state[9] == 1);
    rs_role *b2;
    RS_CHECK(rs_role_start(x.f.shm, "b", &b2) == RS_OK); /* fenced now, but still alive */
    RS_CHECK(rs_table_recover(x.t) == RS_OK);
    RS_CHECK(rs_table_check(x.t, &s) == RS_OK && s.n_state[1] == 2 && s.reclaimed == 0);
    RS_CHECK(kill(pid, SIGKILL) == 0 && fx_wait(pid) == 128 + SIGKILL);
    RS_CHECK(rs_table_check(x.t, &s) == RS_EMISMATCH); /* T2: dead claims not yet recovered */
    RS_CHECK(rs_table_recover(x.t) == RS_OK && rs_table_recover(x.t) == RS_OK);
    RS_CHECK(rs_table_check(x.t, &s) == RS_OK && s.n_state[1] == 0 && s.n_state[9] == 1);
    RS_CHECK(s.reclaimed == 2 && s.n_state[0] == 7);
    rs_role_stop(&b2);
    tfx_close(&x);
    return 0;
}

static int test_fenced_incarnation_cannot_change_records(void)
{
    struct tfx x;
    RS_CHECK(tfx_open(&x, 8, 0) == 0);
    struct rs_table_ref ref;
    void *rec;
    RS_CHECK(rs_table_claim(x.t, &ref, &rec) == RS_OK && rs_table_publish(x.t, ref, 2) == RS_OK);
    rs_role *a2;
    rs_table *t2;
    RS_CHECK(rs_role_start(x.f.shm, "a", &a2) == RS_OK);
    RS_CHECK(rs_table_open(x.f.shm, "req", a2, &t2) == RS_OK);
    RS_CHECK(rs_table_claim(x.t, &ref, &rec) == RS_ESTALE);
    RS_CHECK(rs_table_transition(x.t, ref, 2, 3) == RS_ESTALE);
    RS_CHECK(rs_table_free(x.t, ref, 2) == RS_ESTALE);
    RS_CHECK(rs_table_transition(t2, ref, 2, 3) == RS_OK);
    rs_table *ro;
    RS_CHECK(rs_table_open(x.f.shm, "req", NULL, &ro) == RS_OK);
    RS_CHECK(rs_table_claim(ro, &ref, &rec) == RS_EINVAL && rs_table_get(ro, ref, NULL, NULL) == 0);
    rs_table_close(&ro);
    rs_table_close(&t2);
    rs_role_stop(&a2);
    tfx_close(&x);
    return 0;
}

static int test_generation_wraps_past_2_26(void)
{
    struct tfx x;
    RS_CHECK(tfx_open(&x, 1, RS_SW_GEN_MASK - 1) == 0);
    struct rs_table_ref refs[4];
    void *rec;
    for (int i = 0; i < 4; i++) {
        RS_CHECK(rs_table_claim(x.t, &refs[i], &rec) == RS_OK);
        RS_CHECK(refs[i].gen == ((RS_SW_GEN_MASK - 1 + (uint32_t)i) & RS_SW_GEN_MASK));
        RS_CHECK(rs_table_free(x.t, refs[i], RS_TABLE_CLAIMED) == RS_OK);
    }
    RS_CHECK(refs[2].gen == 0 && refs[3].gen == 1);
    struct rs_table_ref cur;
    RS_CHECK(rs_table_claim(x.t, &cur, &rec) == RS_OK && cur.gen == 2);
    for (int i = 0; i < 4; i++)
        RS_CHECK(rs_table_get(x.t, refs[i], NULL, NULL) == RS_ESTALE);
    tfx_close(&x);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_claim_publish_transition_free_cycle),
    RS_TEST(test_stale_reference_is_refused_everywhere),
    RS_TEST(test_full_table_returns_efull),
    RS_TEST(test_next_iterates_by_state_mask),
    RS_TEST(test_recover_frees_claims_of_dead_incarnations_only),
    RS_TEST(test_fenced_incarnation_cannot_change_records),
    RS_TEST(test_generation_wraps_past_2_26),
};

RS_TEST_MAIN(cases)

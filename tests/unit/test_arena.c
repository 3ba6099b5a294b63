/* SPDX-License-Identifier: MIT */
/*
 * Token arena: appends across chunk boundaries read back exactly; capacity
 * and a full arena refuse without changing anything; freeing a record
 * returns its chunks; the audit repairs what a child process killed at each
 * append/free step left behind; a new writer takes over a dead writer's list
 * (no copy) or a live fenced writer's list (tail copied, the old writer
 * refused); seal hands a list to another role; invariants hold throughout.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ipc/arena.h"
#include "ipc/arena_impl.h"
#include "ipc/failpoint.h"
#include "ipc/role.h"
#include "ipc/shm.h"
#include "ipc/table.h"
#include "tests/rs_test.h"
#include "tests/unit/ipc_fixture.h"

#define LIST_OFF 64
static const char *const names[] = {"w1", "w2", "rd"};

struct afx {
    struct fx f;
    rs_role *role;
    rs_table *t;
    rs_arena *a;
};

static int afx_attach(struct afx *x, const char *role)
{
    return rs_role_start(x->f.shm, role, &x->role) != RS_OK ||
           rs_table_open(x->f.shm, "req", x->role, &x->t) != RS_OK ||
           rs_arena_open(x->f.shm, "tok", x->role, x->t, LIST_OFF, &x->a) != RS_OK ||
           rs_table_recover(x->t) != RS_OK || rs_arena_recover(x->a) != RS_OK ||
           rs_role_ready(x->role) != RS_OK;
}

static void afx_detach(struct afx *x)
{
    rs_arena_close(&x->a);
    rs_table_close(&x->t);
    rs_role_stop(&x->role);
}

static int afx_open(struct afx *x, uint32_t chunks)
{
    struct rs_shm_region_spec s[3] = {
        {.name = "roles", .kind = RS_SHM_ROLES, .count = 3, .role_names = names},
        {.name = "req", .kind = RS_SHM_TABLE, .count = 16, .elem_bytes = 256},
        {.name = "tok", .kind = RS_SHM_ARENA, .count = chunks, .elem_bytes = 8},
    };
    memset(x, 0, sizeof(*x));
    return fx_create(&x->f, s, 3) != 0 || afx_attach(x, "w1") != 0;
}

static void afx_close(struct afx *x)
{
    afx_detach(x);
    fx_destroy(&x->f);
}

/* Token i of record `id`'s stream. */
static int32_t tok(uint32_t id, uint32_t i)
{
    return (int32_t)(id * 100000 + i);
}

static rs_err append_range(rs_arena *a, struct rs_table_ref ref, uint32_t id, uint32_t from,
                           uint32_t n)
{
    int32_t buf[256];
    for (uint32_t i = 0; i < n; i++)
        buf[i] = tok(id, from + i);
    return rs_arena_append(a, ref, buf, n);
}

/* The list of ref holds exactly tokens 0..len-1 of stream id. */
static int list_is(const rs_arena *a, struct rs_table_ref ref, uint32_t id, uint32_t len)
{
    int32_t buf[512];
    uint32_t got, l;
    if (rs_arena_len(a, ref, &l) != RS_OK || l != len)
        return 0;
    if (rs_arena_read(a, ref, 0, 512, buf, &got) != RS_OK || got != len)
        return 0;
    for (uint32_t i = 0; i < len; i++)
        if (buf[i] != tok(id, i))
            return 0;
    return 1;
}

static int new_request(struct afx *x, struct rs_table_ref *ref)
{
    void *rec;
    return rs_table_claim(x->t, ref, &rec) != RS_OK || rs_arena_list_init(x->a, *ref) != RS_OK ||
           rs_table_publish(x->t, *ref, 2) != RS_OK;
}

static int test_appends_across_chunks_read_back_exactly(void)
{
    struct afx x;
    RS_CHECK(afx_open(&x, 64) == 0);
    RS_CHECK(rs_arena_capacity(x.a) == (256 - LIST_OFF - 8) / 8 * 8);
    struct rs_table_ref r;
    RS_CHECK(new_request(&x, &r) == 0);
    uint32_t len = 0, steps[] = {5, 3, 1, 7, 16, 20, 0, 9};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        RS_CHECK(append_range(x.a, r, 7, len, steps[i]) == RS_OK);
        len += steps[i];
        RS_CHECK(list_is(x.a, r, 7, len) && rs_arena_check(x.a, NULL) == RS_OK);
    }
    int32_t mid[10];
    uint32_t got;
    RS_CHECK(rs_arena_read(x.a, r, 30, 10, mid, &got) == RS_OK && got == 10 && mid[0] == tok(7, 30));
    RS_CHECK(rs_arena_read(x.a, r, len - 2, 10, mid, &got) == RS_OK && got == 2);
    RS_CHECK(rs_arena_read(x.a, r, len + 5, 10, mid, &got) == RS_OK && got == 0);
    struct rs_arena_stats st;
    RS_CHECK(rs_arena_check(x.a, &st) == RS_OK && st.n_linked == len / 8 && st.n_reserved == 1);
    RS_CHECK(rs_arena_seal(x.a, r) == RS_OK);
    RS_CHECK(rs_arena_check(x.a, &st) == RS_OK && st.n_linked == (len + 7) / 8 && st.n_reserved == 0);
    afx_close(&x);
    return 0;
}

static int test_capacity_and_full_arena_refuse_without_change(void)
{
    struct afx x;
    RS_CHECK(afx_open(&x, 6) == 0); /* 48 tokens in all */
    struct rs_table_ref r1, r2;
    RS_CHECK(new_request(&x, &r1) == 0 && new_request(&x, &r2) == 0);
    RS_CHECK(append_range(x.a, r1, 1, 0, 30) == RS_OK); /* 4 chunks */
    struct rs_arena_stats before, after;
    RS_CHECK(rs_arena_check(x.a, &before) == RS_OK && before.n_free == 2);
    RS_CHECK(append_range(x.a, r2, 2, 0, 20) == RS_ENOMEM); /* needs 3 */
    RS_CHECK(rs_arena_check(x.a, &after) == RS_OK && after.n_free == 2 && list_is(x.a, r2, 2, 0));
    RS_CHECK(append_range(x.a, r2, 2, 0, 16) == RS_OK && list_is(x.a, r2, 2, 16));
    RS_CHECK(append_range(x.a, r1, 1, 30, 2) == RS_OK); /* fits in its tail chunk */
    RS_CHECK(append_range(x.a, r1, 1, 32, 1) == RS_ENOMEM && list_is(x.a, r1, 1, 32));
    uint32_t cap = (uint32_t)rs_arena_capacity(x.a);
    int32_t *big = calloc(cap + 1, sizeof(int32_t));
    RS_CHECK(big != NULL && rs_arena_append(x.a, r2, big, cap) == RS_ERANGE);
    free(big);
    RS_CHECK(list_is(x.a, r2, 2, 16) && rs_arena_check(x.a, NULL) == RS_OK);
    afx_close(&x);
    return 0;
}

static int test_free_record_returns_every_chunk(void)
{
    struct afx x;
    RS_CHECK(afx_open(&x, 64) == 0);
    struct rs_table_ref r[4];
    for (int i = 0; i < 4; i++) {
        RS_CHECK(new_request(&x, &r[i]) == 0);
        RS_CHECK(append_range(x.a, r[i], (uint32_t)i, 0, 11 + 9 * (uint32_t)i) == RS_OK);
    }
    for (int i = 0; i < 4; i++) {
        RS_CHECK(rs_arena_free_record(x.a, x.t, r[i], 2) == RS_OK);
        RS_CHECK(rs_arena_read(x.a, r[i], 0, 1, NULL, &(uint32_t){0}) == RS_ESTALE);
        RS_CHECK(rs_arena_check(x.a, NULL) == RS_OK);
    }
    struct rs_arena_stats st;
    RS_CHECK(rs_arena_check(x.a, &st) == RS_OK && st.n_free == 64 && st.reserves == st.frees);
    RS_CHECK(rs_arena_free_record(x.a, x.t, r[0], 2) == RS_ESTALE);
    afx_close(&x);
    return 0;
}

struct writer {
    const char *name;
    const char *role;
    const char *fp;
    uint32_t index, gen; /* record to append to */
    uint32_t from, n;
    int free_it;
};

/* Child incarnation: appends (or frees) one record, dying at the armed failpoint. */
static int writer_main(void *p)
{
    struct writer *w = p;
    struct afx x;
    memset(&x, 0, sizeof(x));
    if (rs_shm_attach(w->name, NULL, 0, 0, NULL, 0, &x.f.shm) != RS_OK || afx_attach(&x, w->role))
        return 10;
    rs_failpoint_set(w->fp);
    struct rs_table_ref ref = {w->index, w->gen};
    rs_err e = w->free_it ? rs_arena_free_record(x.a, x.t, ref, 2)
                          : append_range(x.a, ref, 5, w->from, w->n);
    afx_detach(&x); /* a clean exit marks the role EXITED */
    return e == RS_OK ? 0 : 20;
}

/* Runs a child incarnation of `role`; a child of w1 fences this process's w1 handle. */
static int run_writer(struct afx *x, const char *role, struct rs_table_ref r, const char *fp,
                      uint32_t from, uint32_t n, int free_it)
{
    struct writer w = {x->f.name, role, fp, r.index, r.gen, from, n, free_it};
    return fx_wait(fx_spawn(writer_main, &w));
}

/* This process starts a new incarnation of w1 (after a child replaced it), recovering. */
static int restart_w1(struct afx *x)
{
    afx_detach(x);
    return afx_attach(x, "w1");
}

static int test_audit_repairs_every_append_and_free_crash_point(void)
{
    static const char *points[] = {"arena.append.written", "arena.append.before_publish",
                                   "arena.append.after_publish", "arena.adopt.after_cas"};
    for (size_t p = 0; p < sizeof(points) / sizeof(points[0]); p++) {
        struct afx x;
        RS_CHECK(afx_open(&x, 64) == 0);
        struct rs_table_ref r;
        RS_CHECK(new_request(&x, &r) == 0 && append_range(x.a, r, 5, 0, 13) == RS_OK);
        char fp[64];
        snprintf(fp, sizeof(fp), "%s:1", points[p]);
        RS_CHECK_MSG(run_writer(&x, "w1", r, fp, 13, 20, 0) == 128 + SIGKILL, "%s", points[p]);
        RS_CHECK(restart_w1(&x) == 0); /* its start ran the audit */
        uint32_t len;
        RS_CHECK(rs_arena_len(x.a, r, &len) == RS_OK);
        int published = len == 33;
        RS_CHECK_MSG(len == 13 || published, "%s: len %u", points[p], len);
        RS_CHECK(rs_arena_recover(x.a) == RS_OK && rs_arena_check(x.a, NULL) == RS_OK);
        RS_CHECK(rs_arena_recover(x.a) == RS_OK && rs_arena_check(x.a, NULL) == RS_OK);
        /* Our writer takes the list over again and continues where it really ends. */
        RS_CHECK(append_range(x.a, r, 5, len, 40 - len) == RS_OK && list_is(x.a, r, 5, 40));
        RS_CHECK(rs_arena_free_record(x.a, x.t, r, 2) == RS_OK);
        /* The child copied our old tail away (we were alive); that chunk stays
         * quarantined under our previous incarnation, which is this live process. */
        struct rs_arena_stats st;
        RS_CHECK(rs_arena_check(x.a, &st) == RS_OK && st.tail_copies == 1);
        RS_CHECK_MSG(st.n_free == 63 && st.n_reserved == 1, "%s: %llu free", points[p],
                     (unsigned long long)st.n_free);
        afx_close(&x);
    }
    return 0;
}

static int test_audit_frees_chunks_of_a_record_freed_by_a_dead_process(void)
{
    struct afx x;
    RS_CHECK(afx_open(&x, 64) == 0);
    struct rs_table_ref r;
    RS_CHECK(new_request(&x, &r) == 0 && append_range(x.a, r, 5, 0, 29) == RS_OK);
    RS_CHECK(rs_arena_seal(x.a, r) == RS_OK);
    RS_CHECK(run_writer(&x, "w2", r, "arena.free.after_record:1", 0, 0, 1) == 128 + SIGKILL);
    struct rs_arena_stats st;
    RS_CHECK(rs_arena_check(x.a, &st) == RS_EMISMATCH && st.n_linked == 4); /* orphans */
    RS_CHECK(rs_arena_recover(x.a) == RS_OK);
    RS_CHECK(rs_arena_check(x.a, &st) == RS_OK && st.n_free == 64 && st.audit_freed == 4);
    afx_close(&x);
    return 0;
}

static int test_dead_writers_list_is_taken_over_without_copy(void)
{
    struct afx x;
    RS_CHECK(afx_open(&x, 64) == 0);
    struct rs_table_ref r;
    RS_CHECK(new_request(&x, &r) == 0 && append_range(x.a, r, 5, 0, 4) == RS_OK);
    RS_CHECK(rs_arena_seal(x.a, r) == RS_OK);
    RS_CHECK(run_writer(&x, "w2", r, NULL, 4, 7, 0) == 0); /* child w2 appends and exits */
    RS_CHECK(list_is(x.a, r, 5, 11));
    RS_CHECK(append_range(x.a, r, 5, 11, 10) == RS_OK && list_is(x.a, r, 5, 21));
    struct rs_arena_stats st;
    RS_CHECK(rs_arena_check(x.a, &st) == RS_OK && st.tail_copies == 0);
    afx_close(&x);
    return 0;
}

static int test_live_fenced_writer_is_refused_and_its_tail_copied(void)
{
    struct afx x;
    RS_CHECK(afx_open(&x, 64) == 0);
    struct rs_table_ref r;
    RS_CHECK(new_request(&x, &r) == 0 && append_range(x.a, r, 5, 0, 13) == RS_OK);
    struct afx y; /* a second incarnation of w1 in this process: x becomes the zombie */
    memset(&y, 0, sizeof(y));
    y.f = x.f;
    RS_CHECK(afx_attach(&y, "w1") == 0);
    RS_CHECK(append_range(y.a, r, 5, 13, 6) == RS_OK && list_is(y.a, r, 5, 19));
    RS_CHECK(append_range(x.a, r, 5, 13, 6) == RS_ESTALE);
    RS_CHECK(rs_arena_seal(x.a, r) == RS_ESTALE);
    struct rs_arena_stats st;
    RS_CHECK(rs_arena_check(y.a, &st) == RS_OK && st.tail_copies == 1);
    RS_CHECK(st.n_reserved == 2); /* y's tail, and the zombie's old tail kept until it dies */
    RS_CHECK(rs_arena_free_record(y.a, y.t, r, 2) == RS_OK);
    RS_CHECK(rs_arena_check(y.a, &st) == RS_OK && st.n_free == 63);
    afx_detach(&y);
    afx_close(&x);
    return 0;
}

static int test_seal_hands_the_list_to_another_role(void)
{
    struct afx x;
    RS_CHECK(afx_open(&x, 64) == 0);
    struct rs_table_ref r;
    RS_CHECK(new_request(&x, &r) == 0 && append_range(x.a, r, 5, 0, 10) == RS_OK);
    struct afx y;
    memset(&y, 0, sizeof(y));
    y.f = x.f;
    RS_CHECK(afx_attach(&y, "w2") == 0);
    RS_CHECK(append_range(y.a, r, 5, 10, 3) == RS_ESTALE); /* w1 is live and still writes it */
    RS_CHECK(rs_arena_seal(x.a, r) == RS_OK);
    RS_CHECK(append_range(y.a, r, 5, 10, 3) == RS_OK && list_is(x.a, r, 5, 13));
    RS_CHECK(append_range(x.a, r, 5, 13, 3) == RS_ESTALE); /* now w2 writes it */
    RS_CHECK(rs_arena_check(x.a, NULL) == RS_OK);
    afx_detach(&y);
    afx_close(&x);
    return 0;
}

static int test_check_detects_a_doubly_referenced_chunk(void)
{
    struct afx x;
    RS_CHECK(afx_open(&x, 64) == 0);
    struct rs_table_ref r1, r2;
    RS_CHECK(new_request(&x, &r1) == 0 && new_request(&x, &r2) == 0);
    RS_CHECK(append_range(x.a, r1, 1, 0, 8) == RS_OK && append_range(x.a, r2, 2, 0, 8) == RS_OK);
    RS_CHECK(rs_arena_check(x.a, NULL) == RS_OK);
    struct arena_list *l1 = arena_list_at(x.a, r1.index), *l2 = arena_list_at(x.a, r2.index);
    atomic_store(&l2->entry[0], atomic_load(&l1->entry[0]));
    RS_CHECK(rs_arena_check(x.a, NULL) == RS_EMISMATCH);
    afx_close(&x);
    return 0;
}

static int test_two_sized_lists_in_one_record_are_independent(void)
{
    static const char *const roles[] = {"w1"};
    struct rs_shm_region_spec s[4] = {
        {.name = "roles", .kind = RS_SHM_ROLES, .count = 1, .role_names = roles},
        {.name = "req", .kind = RS_SHM_TABLE, .count = 4, .elem_bytes = 512},
        {.name = "tok", .kind = RS_SHM_ARENA, .count = 32, .elem_bytes = 8},
        {.name = "lp", .kind = RS_SHM_ARENA, .count = 32, .elem_bytes = 4},
    };
    struct fx f;
    RS_CHECK(fx_create(&f, s, 4) == 0);
    rs_role *role;
    rs_table *t;
    rs_arena *a, *b, *bad;
    uint64_t la = rs_arena_list_bytes(64, 8), lb = rs_arena_list_bytes(64, 4);
    RS_CHECK(rs_role_start(f.shm, "w1", &role) == RS_OK);
    RS_CHECK(rs_table_open(f.shm, "req", role, &t) == RS_OK);
    RS_CHECK(rs_arena_open_sized(f.shm, "tok", role, t, 64, la, &a) == RS_OK);
    RS_CHECK(rs_arena_open_sized(f.shm, "lp", role, t, 64 + la, lb, &b) == RS_OK);
    RS_CHECK(rs_arena_open_sized(f.shm, "lp", role, t, 500, 64, &bad) == RS_EINVAL);
    RS_CHECK(rs_arena_capacity(a) == 64 && rs_arena_capacity(b) == 64);
    struct rs_table_ref r;
    void *rec;
    RS_CHECK(rs_table_claim(t, &r, &rec) == RS_OK && rs_table_publish(t, r, 2) == RS_OK);
    RS_CHECK(rs_arena_list_init(a, r) == RS_OK && rs_arena_list_init(b, r) == RS_OK);
    RS_CHECK(append_range(a, r, 1, 0, 20) == RS_OK && append_range(b, r, 2, 0, 13) == RS_OK);
    RS_CHECK(append_range(a, r, 1, 20, 45) == RS_ERANGE);
    RS_CHECK(list_is(a, r, 1, 20) && list_is(b, r, 2, 13));
    RS_CHECK(rs_arena_recover(a) == RS_OK && rs_arena_recover(b) == RS_OK);
    RS_CHECK(rs_arena_check(a, NULL) == RS_OK && rs_arena_check(b, NULL) == RS_OK);
    RS_CHECK(list_is(a, r, 1, 20) && list_is(b, r, 2, 13));
    /* Free the record through one arena: the other list, sealed, is orphaned for its audit
     * (a tail still RESERVED by a live writer would stay until that writer frees it or dies). */
    struct rs_arena_stats st;
    RS_CHECK(rs_arena_seal(b, r) == RS_OK && rs_arena_free_record(a, t, r, 2) == RS_OK);
    RS_CHECK(rs_arena_check(b, &st) == RS_EMISMATCH && st.n_free == 28);
    RS_CHECK(rs_arena_recover(b) == RS_OK && rs_arena_check(b, &st) == RS_OK && st.n_free == 32);
    RS_CHECK(rs_arena_check(a, &st) == RS_OK && st.n_free == 32);
    rs_arena_close(&a), rs_arena_close(&b), rs_table_close(&t), rs_role_stop(&role);
    fx_destroy(&f);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_appends_across_chunks_read_back_exactly),
    RS_TEST(test_capacity_and_full_arena_refuse_without_change),
    RS_TEST(test_free_record_returns_every_chunk),
    RS_TEST(test_audit_repairs_every_append_and_free_crash_point),
    RS_TEST(test_audit_frees_chunks_of_a_record_freed_by_a_dead_process),
    RS_TEST(test_dead_writers_list_is_taken_over_without_copy),
    RS_TEST(test_live_fenced_writer_is_refused_and_its_tail_copied),
    RS_TEST(test_seal_hands_the_list_to_another_role),
    RS_TEST(test_check_detects_a_doubly_referenced_chunk),
    RS_TEST(test_two_sized_lists_in_one_record_are_independent),
};

RS_TEST_MAIN(cases)

/* SPDX-License-Identifier: MIT */
/*
 * SPSC ring: order, payload and checksum; backpressure without overwrite;
 * misuse refused; recovery of each side after a real child process dies at
 * a failpoint (WRITING freed and its seq reused, READING redelivered, DONE
 * not redelivered); recovery idempotence; fencing of a replaced producer and
 * consumer; discarding a record committed after the fence; holes; sequence
 * and lap wraparound. rs_ring_check runs after every step.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ipc/failpoint.h"
#include "ipc/ring.h"
#include "ipc/ring_impl.h"
#include "ipc/role.h"
#include "ipc/shm.h"
#include "tests/rs_test.h"
#include "tests/unit/ipc_fixture.h"

static const char *const names[] = {"prod", "cons", "other"};

struct rfx {
    struct fx f;
    rs_role *pr, *cr;
    rs_ring *p, *c;
};

static int rfx_open(struct rfx *x, uint32_t slots, uint32_t flags, uint64_t start)
{
    struct rs_shm_region_spec s[2] = {
        {.name = "roles", .kind = RS_SHM_ROLES, .count = 3, .role_names = names},
        {.name = "r", .kind = RS_SHM_RING, .count = slots, .elem_bytes = 256, .flags = flags,
         .producer = "prod", .consumer = "cons", .start = start},
    };
    memset(x, 0, sizeof(*x));
    if (fx_create(&x->f, s, 2) != 0)
        return 1;
    return rs_role_start(x->f.shm, "prod", &x->pr) != RS_OK ||
           rs_role_start(x->f.shm, "cons", &x->cr) != RS_OK ||
           rs_ring_open(x->f.shm, "r", x->pr, &x->p) != RS_OK ||
           rs_ring_open(x->f.shm, "r", x->cr, &x->c) != RS_OK || rs_ring_recover(x->p) != RS_OK ||
           rs_ring_recover(x->c) != RS_OK || rs_role_ready(x->pr) != RS_OK ||
           rs_role_ready(x->cr) != RS_OK;
}

static void rfx_close(struct rfx *x)
{
    rs_ring_close(&x->p);
    rs_ring_close(&x->c);
    rs_role_stop(&x->pr);
    rs_role_stop(&x->cr);
    fx_destroy(&x->f);
}

static void fill(uint8_t *p, uint64_t id, uint32_t len)
{
    for (uint32_t i = 0; i < len; i++)
        p[i] = (uint8_t)(id * 131 + i);
}

static int pattern_ok(const uint8_t *p, uint64_t id, uint32_t len)
{
    for (uint32_t i = 0; i < len; i++)
        if (p[i] != (uint8_t)(id * 131 + i))
            return 0;
    return 1;
}

static rs_err produce(rs_ring *p, uint64_t id, uint32_t len)
{
    struct rs_ring_wr w;
    rs_err e = rs_ring_try_claim(p, &w);
    if (e != RS_OK)
        return e;
    fill(w.data, id, len);
    return rs_ring_commit(p, &w, id, len);
}

/* Gets, checks and releases one record; returns its id and seq. */
static rs_err consume(rs_ring *c, uint64_t *id, uint64_t *seq)
{
    struct rs_ring_rd rd;
    rs_err e = rs_ring_try_get(c, &rd);
    if (e != RS_OK)
        return e;
    if (!pattern_ok(rd.data, rd.id, rd.len))
        return RS_EIO;
    *id = rd.id;
    *seq = rd.seq;
    return rs_ring_release(c, &rd);
}

static int test_fifo_order_payload_and_seq(void)
{
    struct rfx x;
    RS_CHECK(rfx_open(&x, 8, RS_RING_CRC, 0) == 0);
    uint64_t next_id = 1000, want_id = 1000, want_seq = 0, id, seq;
    for (int round = 0; round < 50; round++) {
        int burst = 1 + round % 8;
        for (int i = 0; i < burst; i++, next_id++)
            RS_CHECK(produce(x.p, next_id, (uint32_t)(next_id % 257)) == RS_OK);
        RS_CHECK(rs_ring_check(x.p, NULL) == RS_OK);
        for (int i = 0; i < burst; i++) {
            RS_CHECK(consume(x.c, &id, &seq) == RS_OK);
            RS_CHECK(id == want_id++ && seq == want_seq++);
            RS_CHECK(rs_ring_check(x.c, NULL) == RS_OK);
        }
        RS_CHECK(consume(x.c, &id, &seq) == RS_EAGAIN);
    }
    struct rs_ring_stats st;
    RS_CHECK(rs_ring_check(x.c, &st) == RS_OK && st.n_state[RS_RING_FREE] == 8);
    RS_CHECK(st.commits == want_seq && st.releases == want_seq && st.cons_seq == want_seq);
    RS_CHECK(rs_ring_consumed(x.c) == want_seq && rs_ring_next_seq(x.p) == want_seq);
    rfx_close(&x);
    return 0;
}

static int test_full_ring_returns_efull_without_overwrite(void)
{
    struct rfx x;
    RS_CHECK(rfx_open(&x, 4, RS_RING_CRC, 0) == 0);
    for (uint64_t i = 0; i < 4; i++)
        RS_CHECK(produce(x.p, i, 200) == RS_OK);
    RS_CHECK(produce(x.p, 99, 200) == RS_EFULL);
    struct rs_ring_rd rd[4];
    for (int i = 0; i < 4; i++) {
        RS_CHECK(rs_ring_try_get(x.c, &rd[i]) == RS_OK && rd[i].id == (uint64_t)i);
        RS_CHECK(produce(x.p, 99, 200) == RS_EFULL); /* held, not released: still full */
    }
    RS_CHECK(rs_ring_try_get(x.c, &rd[0]) == RS_EAGAIN); /* all slots held */
    for (int i = 0; i < 4; i++)
        RS_CHECK(pattern_ok(rd[i].data, rd[i].id, rd[i].len));
    RS_CHECK(rs_ring_release(x.c, &rd[0]) == RS_OK);
    RS_CHECK(produce(x.p, 4, 10) == RS_OK && produce(x.p, 5, 10) == RS_EFULL);
    for (int i = 1; i < 4; i++)
        RS_CHECK(pattern_ok(rd[i].data, rd[i].id, rd[i].len) && rs_ring_release(x.c, &rd[i]) == 0);
    struct rs_ring_stats st;
    RS_CHECK(rs_ring_check(x.p, &st) == RS_OK && st.full >= 6);
    rfx_close(&x);
    return 0;
}

static int test_misuse_is_refused(void)
{
    struct rfx x;
    RS_CHECK(rfx_open(&x, 4, 0, 0) == 0);
    struct rs_ring_wr w, w2;
    struct rs_ring_rd rd, rd2;
    RS_CHECK(rs_ring_try_get(x.p, &rd) == RS_EINVAL);   /* producer side cannot get */
    RS_CHECK(rs_ring_try_claim(x.c, &w) == RS_EINVAL);  /* consumer side cannot claim */
    RS_CHECK(rs_ring_try_claim(x.p, &w) == RS_OK);
    RS_CHECK(rs_ring_try_claim(x.p, &w2) == RS_EINVAL); /* one claim at a time */
    RS_CHECK(rs_ring_commit(x.p, &w, 1, 257) == RS_EINVAL); /* longer than the slot */
    RS_CHECK(rs_ring_commit(x.p, &w, 1, 256) == RS_OK);
    RS_CHECK(rs_ring_commit(x.p, &w, 1, 10) == RS_EINVAL); /* no claim outstanding */
    RS_CHECK(produce(x.p, 2, 10) == RS_OK);
    RS_CHECK(rs_ring_try_get(x.c, &rd) == RS_OK && rs_ring_try_get(x.c, &rd2) == RS_OK);
    RS_CHECK(rs_ring_release(x.c, &rd2) == RS_EINVAL); /* out of order */
    RS_CHECK(rs_ring_release(x.c, &rd) == RS_OK && rs_ring_release(x.c, &rd) == RS_EINVAL);
    RS_CHECK(rs_ring_release(x.c, &rd2) == RS_OK);
    rs_ring *obs, *bad;
    rs_role *other;
    RS_CHECK(rs_ring_open(x.f.shm, "r", NULL, &obs) == RS_OK);
    RS_CHECK(rs_ring_recover(obs) == RS_EINVAL && rs_ring_try_claim(obs, &w) == RS_EINVAL);
    RS_CHECK(rs_role_start(x.f.shm, "other", &other) == RS_OK);
    RS_CHECK(rs_ring_open(x.f.shm, "r", other, &bad) == RS_EINVAL && bad == NULL);
    RS_CHECK(rs_ring_open(x.f.shm, "nope", NULL, &bad) == RS_ENOENT);
    rs_ring *fresh;
    RS_CHECK(rs_ring_open(x.f.shm, "r", x.pr, &fresh) == RS_OK);
    RS_CHECK(rs_ring_try_claim(fresh, &w) == RS_EINVAL); /* recover first */
    rs_ring_close(&fresh);
    rs_ring_close(&obs);
    rs_role_stop(&other);
    rfx_close(&x);
    return 0;
}

static int test_abort_gives_the_seq_back(void)
{
    struct rfx x;
    RS_CHECK(rfx_open(&x, 4, RS_RING_CRC, 0) == 0);
    struct rs_ring_wr w;
    RS_CHECK(rs_ring_try_claim(x.p, &w) == RS_OK && w.seq == 0);
    RS_CHECK(rs_ring_abort(x.p, &w) == RS_OK && rs_ring_abort(x.p, &w) == RS_EINVAL);
    uint64_t id, seq;
    RS_CHECK(consume(x.c, &id, &seq) == RS_EAGAIN);
    RS_CHECK(produce(x.p, 7, 5) == RS_OK && consume(x.c, &id, &seq) == RS_OK);
    RS_CHECK(id == 7 && seq == 0);
    rfx_close(&x);
    return 0;
}

static int test_crc_catches_a_scribbled_payload(void)
{
    struct rfx x;
    RS_CHECK(rfx_open(&x, 4, RS_RING_CRC, 0) == 0);
    struct rs_ring_wr w;
    RS_CHECK(rs_ring_try_claim(x.p, &w) == RS_OK);
    fill(w.data, 5, 100);
    RS_CHECK(rs_ring_commit(x.p, &w, 5, 100) == RS_OK);
    RS_CHECK(rs_ring_check(x.c, NULL) == RS_OK);
    ((uint8_t *)w.data)[17] ^= 0x40; /* a torn or scribbled record */
    RS_CHECK(rs_ring_check(x.c, NULL) == RS_EMISMATCH);
    struct rs_ring_rd rd;
    RS_CHECK(rs_ring_try_get(x.c, &rd) == RS_EIO && rd.id == 5);
    RS_CHECK(rs_ring_release(x.c, &rd) == RS_OK);
    struct rs_ring_stats st;
    RS_CHECK(rs_ring_check(x.c, &st) == RS_OK && st.crc_errors == 1);
    rfx_close(&x);
    return 0;
}

static int test_in_flight_then_release(void)
{
    struct rfx x;
    RS_CHECK(rfx_open(&x, 4, 0, 0) == 0);
    RS_CHECK(produce(x.p, 1, 8) == RS_OK);
    struct rs_ring_rd rd;
    RS_CHECK(rs_ring_try_get(x.c, &rd) == RS_OK);
    RS_CHECK(rs_ring_mark_in_flight(x.c, &rd) == RS_OK);
    struct rs_ring_stats st;
    RS_CHECK(rs_ring_check(x.c, &st) == RS_OK && st.n_state[RS_RING_IN_FLIGHT] == 1);
    RS_CHECK(rs_ring_mark_in_flight(x.c, &rd) == RS_ESTALE); /* already */
    RS_CHECK(rs_ring_release(x.c, &rd) == RS_OK);
    RS_CHECK(rs_ring_check(x.c, &st) == RS_OK && st.n_state[RS_RING_FREE] == 4);
    rfx_close(&x);
    return 0;
}

/* --- recovery with real processes ------------------------------------------------- */

struct child {
    const char *name;  /* segment */
    const char *role;
    const char *fp;    /* failpoint spec, or NULL */
    int ops;           /* records to produce or consume before the failpoint fires */
};

/* A producer or consumer incarnation in its own process. */
static int child_main(void *p)
{
    struct child *c = p;
    rs_shm *shm;
    rs_role *role;
    rs_ring *r;
    if (rs_shm_attach(c->name, NULL, 0, 0, NULL, 0, &shm) != RS_OK ||
        rs_role_start(shm, c->role, &role) != RS_OK || rs_ring_open(shm, "r", role, &r) != RS_OK ||
        rs_ring_recover(r) != RS_OK || rs_role_ready(role) != RS_OK)
        return 10;
    rs_failpoint_set(c->fp);
    int is_prod = strcmp(c->role, "prod") == 0;
    for (int i = 0; i < c->ops; i++) {
        uint64_t id, seq;
        rs_err e = is_prod ? produce(r, 1000 + rs_ring_next_seq(r), 64) : consume(r, &id, &seq);
        if (e != RS_OK)
            return 20;
    }
    return 0;
}

static int run_child(const char *name, const char *role, const char *fp, int ops)
{
    struct child c = {name, role, fp, ops};
    return fx_wait(fx_spawn(child_main, &c));
}

/* Restarts the parent's side `which` (fencing the old handle) and recovers it. */
static int restart(struct rfx *x, int producer)
{
    rs_role **role = producer ? &x->pr : &x->cr;
    rs_ring **ring = producer ? &x->p : &x->c;
    rs_ring_close(ring);
    rs_role_stop(role);
    return rs_role_start(x->f.shm, producer ? "prod" : "cons", role) != RS_OK ||
           rs_ring_open(x->f.shm, "r", *role, ring) != RS_OK || rs_ring_recover(*ring) != RS_OK ||
           rs_role_ready(*role) != RS_OK;
}

static int test_dead_producers_uncommitted_slot_is_freed_and_seq_reused(void)
{
    struct rfx x;
    RS_CHECK(rfx_open(&x, 8, RS_RING_CRC, 0) == 0);
    /* Child produces 3, then dies holding the 4th slot WRITING. */
    RS_CHECK(run_child(x.f.name, "prod", "ring.commit.before:4", 5) == 128 + SIGKILL);
    struct rs_ring_stats st;
    RS_CHECK(rs_ring_check(x.c, &st) == RS_OK && st.n_state[RS_RING_WRITING] == 1);
    RS_CHECK(restart(&x, 1) == 0);
    RS_CHECK(rs_ring_check(x.c, &st) == RS_OK && st.n_state[RS_RING_WRITING] == 0);
    RS_CHECK(st.p_reclaims == 1 && st.p_floor == 3 && rs_ring_next_seq(x.p) == 3);
    RS_CHECK(produce(x.p, 1003, 64) == RS_OK);
    uint64_t id, seq;
    for (uint64_t i = 0; i < 4; i++)
        RS_CHECK(consume(x.c, &id, &seq) == RS_OK && seq == i && id == 1000 + i);
    RS_CHECK(consume(x.c, &id, &seq) == RS_EAGAIN);
    rfx_close(&x);
    return 0;
}

static int test_dead_producers_committed_records_are_kept(void)
{
    struct rfx x;
    RS_CHECK(rfx_open(&x, 8, RS_RING_CRC, 0) == 0);
    /* Dies right after its 2nd commit, before returning from it. */
    RS_CHECK(run_child(x.f.name, "prod", "ring.commit.after:2", 5) == 128 + SIGKILL);
    RS_CHECK(restart(&x, 1) == 0 && rs_ring_next_seq(x.p) == 2);
    RS_CHECK(produce(x.p, 1002, 64) == RS_OK);
    uint64_t id, seq;
    for (uint64_t i = 0; i < 3; i++)
        RS_CHECK(consume(x.c, &id, &seq) == RS_OK && seq == i && id == 1000 + i);
    rfx_close(&x);
    return 0;
}

static int test_dead_consumers_reading_record_is_redelivered(void)
{
    struct rfx x;
    RS_CHECK(rfx_open(&x, 8, RS_RING_CRC, 0) == 0);
    for (uint64_t i = 0; i < 4; i++)
        RS_CHECK(produce(x.p, 1000 + i, 64) == RS_OK);
    /* Consumes one, then dies holding the 2nd READING. */
    RS_CHECK(run_child(x.f.name, "cons", "ring.get.after_cas:2", 3) == 128 + SIGKILL);
    RS_CHECK(restart(&x, 0) == 0);
    struct rs_ring_stats st;
    RS_CHECK(rs_ring_check(x.c, &st) == RS_OK && st.redelivered == 1 && st.cons_seq == 1);
    uint64_t id, seq;
    for (uint64_t i = 1; i < 4; i++)
        RS_CHECK(consume(x.c, &id, &seq) == RS_OK && seq == i && id == 1000 + i);
    rfx_close(&x);
    return 0;
}

static int test_consumer_dead_after_release_is_not_redelivered(void)
{
    struct rfx x;
    RS_CHECK(rfx_open(&x, 8, RS_RING_CRC, 0) == 0);
    for (uint64_t i = 0; i < 4; i++)
        RS_CHECK(produce(x.p, 1000 + i, 64) == RS_OK);
    /* Dies right after its 2nd release CAS, before publishing the consumed-seq hint. */
    RS_CHECK(run_child(x.f.name, "cons", "ring.release.after:2", 3) == 128 + SIGKILL);
    struct rs_ring_stats st;
    RS_CHECK(rs_ring_check(x.c, &st) == RS_OK && st.cons_seq == 2 && st.cons_hint == 0);
    RS_CHECK(restart(&x, 0) == 0);
    RS_CHECK(rs_ring_check(x.c, &st) == RS_OK && st.cons_hint == 2 && st.redelivered == 0);
    uint64_t id, seq;
    RS_CHECK(consume(x.c, &id, &seq) == RS_OK && seq == 2);
    /* Killed just before the release CAS: still held, so redelivered. */
    RS_CHECK(run_child(x.f.name, "cons", "ring.release.before:1", 1) == 128 + SIGKILL);
    RS_CHECK(restart(&x, 0) == 0);
    RS_CHECK(rs_ring_check(x.c, &st) == RS_OK && st.cons_seq == 3 && st.redelivered == 1);
    RS_CHECK(consume(x.c, &id, &seq) == RS_OK && seq == 3 && id == 1003);
    RS_CHECK(rs_ring_check(x.c, &st) == RS_OK && st.n_state[RS_RING_FREE] == 8);
    RS_CHECK(consume(x.c, &id, &seq) == RS_EAGAIN);
    rfx_close(&x);
    return 0;
}

static int test_recovery_is_idempotent(void)
{
    struct rfx x;
    RS_CHECK(rfx_open(&x, 8, RS_RING_CRC, 0) == 0);
    for (uint64_t i = 0; i < 5; i++)
        RS_CHECK(produce(x.p, 1000 + i, 64) == RS_OK);
    RS_CHECK(run_child(x.f.name, "cons", "ring.get.after_cas:2", 3) == 128 + SIGKILL);
    RS_CHECK(run_child(x.f.name, "prod", "ring.commit.before:1", 1) == 128 + SIGKILL);
    RS_CHECK(restart(&x, 0) == 0 && restart(&x, 1) == 0);
    struct rs_ring_stats a, b;
    RS_CHECK(rs_ring_check(x.p, &a) == RS_OK);
    RS_CHECK(rs_ring_recover(x.p) == RS_OK && rs_ring_recover(x.c) == RS_OK);
    RS_CHECK(rs_ring_recover(x.p) == RS_OK && rs_ring_recover(x.c) == RS_OK);
    RS_CHECK(rs_ring_check(x.p, &b) == RS_OK);
    RS_CHECK(memcmp(a.n_state, b.n_state, sizeof(a.n_state)) == 0 && a.cons_seq == b.cons_seq);
    RS_CHECK(a.p_floor == b.p_floor && rs_ring_next_seq(x.p) == 5);
    uint64_t id, seq;
    for (uint64_t i = 1; i < 5; i++)
        RS_CHECK(consume(x.c, &id, &seq) == RS_OK && seq == i);
    rfx_close(&x);
    return 0;
}

/* --- fencing -------------------------------------------------------------------------- */

/* A second producer incarnation in this process; the old handle becomes the zombie. */
static int new_producer(struct rfx *x, rs_role **role, rs_ring **ring)
{
    return rs_role_start(x->f.shm, "prod", role) != RS_OK ||
           rs_ring_open(x->f.shm, "r", *role, ring) != RS_OK || rs_ring_recover(*ring) != RS_OK ||
           rs_role_ready(*role) != RS_OK;
}

/* Produces one record whose id is its seq (holes make seqs skip). */
static rs_err produce_seqid(rs_ring *p)
{
    struct rs_ring_wr w;
    rs_err e = rs_ring_try_claim(p, &w);
    if (e != RS_OK)
        return e;
    fill(w.data, w.seq, 16);
    return rs_ring_commit(p, &w, w.seq, 16);
}

static int test_replaced_producer_is_refused_and_its_slot_is_a_hole(void)
{
    struct rfx x;
    RS_CHECK(rfx_open(&x, 8, RS_RING_CRC, 0) == 0);
    RS_CHECK(produce_seqid(x.p) == RS_OK && produce_seqid(x.p) == RS_OK);
    struct rs_ring_wr w;
    RS_CHECK(rs_ring_try_claim(x.p, &w) == RS_OK && w.seq == 2);
    rs_role *pr2;
    rs_ring *p2;
    RS_CHECK(new_producer(&x, &pr2, &p2) == 0);
    /* The zombie is alive (it is us), so its slot is ABANDONED, not reused. */
    RS_CHECK(rs_ring_next_seq(p2) == 3);
    fill(w.data, 2, 16); /* its late writes land in the abandoned slot only */
    RS_CHECK(rs_ring_commit(x.p, &w, 2, 16) == RS_ESTALE);
    RS_CHECK(rs_ring_try_claim(x.p, &w) == RS_ESTALE);
    uint64_t id, seq, want[] = {0, 1, 3, 4, 5};
    for (int i = 0; i < 3; i++)
        RS_CHECK(produce_seqid(p2) == RS_OK);
    for (int i = 0; i < 5; i++) {
        RS_CHECK(consume(x.c, &id, &seq) == RS_OK && seq == want[i] && id == want[i]);
        RS_CHECK(rs_ring_check(x.c, NULL) == RS_OK);
    }
    /* Next lap: the zombie still lives, so seq 10 is skipped too; 7 records fill the ring. */
    for (int i = 0; i < 7; i++)
        RS_CHECK(produce_seqid(p2) == RS_OK);
    RS_CHECK(produce_seqid(p2) == RS_EFULL);
    struct rs_ring_stats st;
    RS_CHECK(rs_ring_check(x.c, &st) == RS_OK && st.holes_made == 2 && st.p_reclaims == 0);
    RS_CHECK(st.n_state[RS_RING_ABANDONED] == 1 && st.n_state[RS_RING_COMMITTED] == 7);
    int n = 0;
    while (consume(x.c, &id, &seq) == RS_OK && ++n)
        RS_CHECK(seq != 10 && seq == id);
    RS_CHECK(n == 7 && rs_ring_check(x.c, &st) == RS_OK && st.holes_passed == 2);
    rs_ring_close(&p2);
    rs_role_stop(&pr2);
    rfx_close(&x);
    return 0;
}

static int test_abandoned_slot_is_reused_once_its_owner_is_dead(void)
{
    struct rfx x;
    RS_CHECK(rfx_open(&x, 4, RS_RING_CRC, 0) == 0);
    /* A producer child stops itself mid-write; its replacement abandons the slot. */
    struct child c = {x.f.name, "prod", "ring.commit.before:2:stop", 3};
    pid_t pid = fx_spawn(child_main, &c);
    int st;
    RS_CHECK(waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st));
    RS_CHECK(restart(&x, 1) == 0 && rs_ring_next_seq(x.p) == 2);
    struct rs_ring_stats rst;
    RS_CHECK(rs_ring_check(x.p, &rst) == RS_OK && rst.n_state[RS_RING_ABANDONED] == 1);
    RS_CHECK(produce(x.p, 1002, 64) == RS_OK); /* seq 2 */
    uint64_t id, seq;
    RS_CHECK(consume(x.c, &id, &seq) == RS_OK && seq == 0);
    RS_CHECK(consume(x.c, &id, &seq) == RS_OK && seq == 2); /* seq 1 is the hole */
    /* The zombie resumes: its commit and its next claim are refused; it exits 20. */
    RS_CHECK(kill(pid, SIGCONT) == 0 && fx_wait(pid) == 20);
    /* Its process is gone now, so the next lap reuses the slot (no hole at seq 5). */
    for (uint64_t s = 3; s < 7; s++)
        RS_CHECK(produce(x.p, 1000 + s, 64) == RS_OK);
    for (uint64_t s = 3; s < 7; s++)
        RS_CHECK(consume(x.c, &id, &seq) == RS_OK && seq == s && id == 1000 + s);
    RS_CHECK(rs_ring_check(x.c, &rst) == RS_OK && rst.holes_made == 1 && rst.holes_passed == 1);
    RS_CHECK(rst.n_state[RS_RING_FREE] == 4);
    rfx_close(&x);
    return 0;
}

static int test_record_committed_after_the_fence_is_discarded(void)
{
    struct rfx x;
    RS_CHECK(rfx_open(&x, 8, RS_RING_CRC, 0) == 0);
    RS_CHECK(produce(x.p, 0, 16) == RS_OK && produce(x.p, 1, 16) == RS_OK);
    uint32_t zombie = rs_role_inc(x.pr);
    rs_role *pr2;
    rs_ring *p2;
    RS_CHECK(new_producer(&x, &pr2, &p2) == 0 && rs_ring_next_seq(p2) == 2);
    /* Forge what a zombie stopped between its fence check and its claim would leave. */
    struct ring_slot *s = (struct ring_slot *)((struct ring_hdr *)p2->h + 1) + 2;
    s->id = 666, s->seq = 2, s->len = 0, s->writer = zombie, s->crc = 0;
    atomic_store(&s->sw, rs_sw_make(RS_RING_COMMITTED, 0, zombie));
    uint64_t id, seq;
    RS_CHECK(consume(x.c, &id, &seq) == RS_OK && seq == 0);
    RS_CHECK(consume(x.c, &id, &seq) == RS_OK && seq == 1);
    RS_CHECK(consume(x.c, &id, &seq) == RS_EAGAIN);
    struct rs_ring_stats st;
    RS_CHECK(rs_ring_check(x.c, &st) == RS_OK && st.discards == 1);
    RS_CHECK(produce(p2, 2, 16) == RS_OK && consume(x.c, &id, &seq) == RS_OK && id == 2);
    rs_ring_close(&p2);
    rs_role_stop(&pr2);
    rfx_close(&x);
    return 0;
}

static int test_replaced_consumer_is_refused_and_its_record_redelivered(void)
{
    struct rfx x;
    RS_CHECK(rfx_open(&x, 8, RS_RING_CRC, 0) == 0);
    RS_CHECK(produce(x.p, 0, 16) == RS_OK && produce(x.p, 1, 16) == RS_OK);
    struct rs_ring_rd rd;
    RS_CHECK(rs_ring_try_get(x.c, &rd) == RS_OK && rd.seq == 0);
    rs_role *cr2;
    rs_ring *c2;
    RS_CHECK(rs_role_start(x.f.shm, "cons", &cr2) == RS_OK);
    RS_CHECK(rs_ring_open(x.f.shm, "r", cr2, &c2) == RS_OK && rs_ring_recover(c2) == RS_OK);
    RS_CHECK(rs_role_ready(cr2) == RS_OK);
    RS_CHECK(rs_ring_release(x.c, &rd) == RS_ESTALE);
    RS_CHECK(rs_ring_try_get(x.c, &rd) == RS_ESTALE);
    uint64_t id, seq;
    RS_CHECK(consume(c2, &id, &seq) == RS_OK && seq == 0);
    RS_CHECK(consume(c2, &id, &seq) == RS_OK && seq == 1);
    struct rs_ring_stats st;
    RS_CHECK(rs_ring_check(c2, &st) == RS_OK && st.redelivered == 1 && st.n_state[0] == 8);
    rs_ring_close(&c2);
    rs_role_stop(&cr2);
    rfx_close(&x);
    return 0;
}

/* --- wraparound -------------------------------------------------------------------------- */

static int run_through(struct rfx *x, uint64_t n, uint64_t *next_id)
{
    uint64_t id, seq, want_seq = rs_ring_next_seq(x->c);
    for (uint64_t i = 0; i < n; i++) {
        RS_CHECK(produce(x->p, *next_id, (uint32_t)(*next_id % 200)) == RS_OK);
        RS_CHECK(consume(x->c, &id, &seq) == RS_OK && id == *next_id && seq == want_seq);
        RS_CHECK(rs_ring_check(x->c, NULL) == RS_OK);
        (*next_id)++, want_seq++;
    }
    return 0;
}

static int test_seq_wraps_past_2_64(void)
{
    struct rfx x;
    RS_CHECK(rfx_open(&x, 8, RS_RING_CRC, UINT64_MAX - 11) == 0);
    uint64_t id = 1;
    RS_CHECK(run_through(&x, 6, &id) == 0);
    /* A producer dies mid-write right before the wrap; recovery must find seq 2^64-6. */
    RS_CHECK(run_child(x.f.name, "prod", "ring.commit.before:1", 1) == 128 + SIGKILL);
    RS_CHECK(restart(&x, 1) == 0 && rs_ring_next_seq(x.p) == UINT64_MAX - 5);
    RS_CHECK(run_through(&x, 30, &id) == 0);
    RS_CHECK(rs_ring_next_seq(x.p) == 24 && rs_ring_consumed(x.c) == 24);
    rfx_close(&x);
    return 0;
}

static int test_lap_wraps_past_2_26(void)
{
    struct rfx x;
    uint64_t start = (((uint64_t)1 << 26) - 2) * 8 + 3; /* two laps before the wrap, mid-lap */
    RS_CHECK(rfx_open(&x, 8, 0, start) == 0);
    uint64_t id = 1;
    RS_CHECK(run_through(&x, 40, &id) == 0);
    for (int i = 0; i < 3; i++, id++)
        RS_CHECK(produce(x.p, id, 8) == RS_OK);
    RS_CHECK(run_child(x.f.name, "cons", "ring.release.after:2", 3) == 128 + SIGKILL);
    RS_CHECK(restart(&x, 0) == 0 && rs_ring_next_seq(x.c) == start + 42);
    uint64_t got, seq;
    RS_CHECK(consume(x.c, &got, &seq) == RS_OK && got == id - 1);
    RS_CHECK(run_through(&x, 40, &id) == 0);
    rfx_close(&x);
    return 0;
}

static int test_check_detects_a_broken_slot(void)
{
    struct rfx x;
    RS_CHECK(rfx_open(&x, 8, 0, 0) == 0);
    struct ring_slot *s = (struct ring_slot *)((struct ring_hdr *)x.p->h + 1);
    atomic_store(&s[3].sw, rs_sw_make(RS_RING_FREE, 0, 5)); /* FREE with an owner */
    RS_CHECK(rs_ring_check(x.c, NULL) == RS_EMISMATCH);
    atomic_store(&s[3].sw, rs_sw_make(RS_RING_FREE, 7, 0)); /* wrong lap */
    RS_CHECK(rs_ring_check(x.c, NULL) == RS_EMISMATCH);
    atomic_store(&s[3].sw, rs_sw_make(RS_RING_FREE, 0, 0));
    RS_CHECK(rs_ring_check(x.c, NULL) == RS_OK);
    rfx_close(&x);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_fifo_order_payload_and_seq),
    RS_TEST(test_full_ring_returns_efull_without_overwrite),
    RS_TEST(test_misuse_is_refused),
    RS_TEST(test_abort_gives_the_seq_back),
    RS_TEST(test_crc_catches_a_scribbled_payload),
    RS_TEST(test_in_flight_then_release),
    RS_TEST(test_dead_producers_uncommitted_slot_is_freed_and_seq_reused),
    RS_TEST(test_dead_producers_committed_records_are_kept),
    RS_TEST(test_dead_consumers_reading_record_is_redelivered),
    RS_TEST(test_consumer_dead_after_release_is_not_redelivered),
    RS_TEST(test_recovery_is_idempotent),
    RS_TEST(test_replaced_producer_is_refused_and_its_slot_is_a_hole),
    RS_TEST(test_abandoned_slot_is_reused_once_its_owner_is_dead),
    RS_TEST(test_record_committed_after_the_fence_is_discarded),
    RS_TEST(test_replaced_consumer_is_refused_and_its_record_redelivered),
    RS_TEST(test_seq_wraps_past_2_64),
    RS_TEST(test_lap_wraps_past_2_26),
    RS_TEST(test_check_detects_a_broken_slot),
};

RS_TEST_MAIN(cases)

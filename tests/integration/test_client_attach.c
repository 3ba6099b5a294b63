/* SPDX-License-Identifier: MIT */
/*
 * The client library's re-attach support against the four real daemons on
 * stories260K: the opt-in ack event; a second client process under the same
 * routing id (a restarted caller) submitting the same request with `replay`
 * gets its whole output from seq 0, generated once, and with keep_prefix
 * the finished request lingers so it can be replayed again (without it, a
 * resubmission runs anew); rs_client_replay hands a running request to a
 * new callback that receives everything from seq 0; rs_client_poll_fds
 * wakes for a plain file descriptor.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/client.h"
#include "common/clock.h"
#include "ipc/pipeline_req.h"
#include "ipc/table.h"
#include "tests/pipeline_harness.h"
#include "tests/rs_test.h"
#include "tests/stream_rec.h"

#define MODEL "stories260K.gguf"
#define RID "attach-test-client"

static void on_event(const struct rs_client_event *ev)
{
    struct stream_rec *r = ev->user;
    if (ev->kind == RS_CLIENT_EV_ACK) {
        r->res.handle = ev->handle; /* what the ack said; checked by the cases */
        return;
    }
    stream_rec_add(r, ev);
}

static int start(struct rs_harness *h)
{
    char model[512];
    struct rs_harness_opts o = {0};
    if (rs_test_refdata(MODEL, model, sizeof(model)) == NULL)
        return RS_TEST_SKIP;
    o.model = model;
    o.n_ctx = 1024;
    o.max_requests = 64;
    return rs_harness_start(h, &o) == RS_OK ? 0 : 1;
}

static rs_client *client_of(const struct rs_harness *h, const char *rid, const char *keep)
{
    struct rs_client_opts o;
    rs_client *c = NULL;
    rs_client_opts_default(&o);
    o.rundir = h->rundir;
    o.request_timeout_ms = 120000;
    o.routing_id = rid;
    o.routing_id_len = rid != NULL ? strlen(rid) : 0;
    o.keep_prefix = keep;
    return rs_client_create(&o, &c) == RS_OK ? c : NULL;
}

static void greedy(struct rs_wire_generate *g, uint32_t n)
{
    rs_wire_generate_init(g);
    g->has = RS_WIRE_GEN_PROMPT | RS_WIRE_GEN_MAX_TOKENS | RS_WIRE_GEN_TEMPERATURE |
             RS_WIRE_GEN_STREAM | RS_WIRE_GEN_IGNORE_EOS;
    g->prompt = (struct rs_wire_str){"Once upon a time", 16};
    g->max_tokens = n;
    g->temperature = 0;
    g->stream = true;
    g->ignore_eos = true;
}

static int wait_final(rs_client *c, struct stream_rec *r)
{
    for (uint64_t end = rs_clock_ms() + 60000; r->n_finals == 0 && rs_clock_ms() < end;)
        if (rs_client_poll(c, 100) < 0)
            return 1;
    return r->n_finals == 1 ? 0 : 1;
}

static uint64_t handles_issued(struct rs_harness *h)
{
    return atomic_load(&rs_harness_view(h)->shared->next_handle) - 1;
}

/*
 * 1 once no published record holds request id `id` (its release took effect), 0 after ms.
 * The releasing client c stays open meanwhile: its sockets do not linger, so a release
 * still queued when it is destroyed can be dropped, and one in flight can reach postprocd
 * after a new client's resubmission reached tokenizerd (which then replays the kept one).
 */
static int wait_released(struct rs_harness *h, rs_client *c, const char *id, uint32_t ms)
{
    const uint64_t published = (1ull << RS_PIPE_REQ_WAITING) | (1ull << RS_PIPE_REQ_RUNNING) |
                               (1ull << RS_PIPE_REQ_FINISHED);
    struct rs_pipe *v = rs_harness_view(h);
    for (uint64_t end = rs_clock_ms() + ms; rs_clock_ms() < end;) {
        uint32_t cursor = 0, state;
        struct rs_table_ref ref;
        int held = 0;
        while (!held && rs_table_next(v->requests, &cursor, published, &ref, &state) == RS_OK)
            held = strncmp(rs_pipe_req_at(v, ref.index)->id, id, RS_WIRE_ID_MAX + 1) == 0;
        if (!held)
            return 1;
        if (rs_client_poll(c, 5) < 0)
            return 0;
    }
    return 0;
}

static int same(const struct stream_rec *r, const struct rs_client_result *ref)
{
    RS_CHECK_MSG(r->n_finals == 1 && !r->out_of_order && r->res.status == RS_CLIENT_OK,
                 "finals %u, out of order %d, status %s", r->n_finals, r->out_of_order,
                 rs_client_status_name(r->res.status));
    RS_CHECK_MSG(r->res.text_len == ref->text_len &&
                     memcmp(r->res.text, ref->text, ref->text_len) == 0,
                 "text differs:\n%s\n---- reference ----\n%s", r->res.text, ref->text);
    return 0;
}

static int reference(struct rs_harness *h, struct rs_client_result *ref)
{
    struct rs_wire_generate g;
    rs_client *c = client_of(h, NULL, NULL);
    greedy(&g, 600);
    int ok = c != NULL && rs_client_generate_sync(c, &g, 0, NULL, NULL, ref) == RS_OK &&
             ref->status == RS_CLIENT_OK;
    rs_client_destroy(&c);
    return ok ? 0 : 1;
}

static int test_ack_event_comes_first_when_asked(void)
{
    struct rs_harness h = {0};
    struct stream_rec r = {0};
    struct rs_wire_generate g;
    int rc = start(&h);
    if (rc != 0)
        return rc;
    rs_client *c = client_of(&h, NULL, NULL);
    struct rs_client_req_opts o = {.want_ack = true};
    greedy(&g, 8);
    int ok = c != NULL && rs_client_submit(c, &g, &o, on_event, &r, NULL) == RS_OK;
    while (ok && r.res.handle == 0 && r.n_deltas == 0)
        ok = rs_client_poll(c, 1000) >= 0;
    int ack_first = r.res.handle != 0 && r.n_deltas == 0;
    ok = ok && wait_final(c, &r) == 0;
    rs_client_destroy(&c);
    rs_harness_stop(&h, !ok);
    rs_client_result_fini(&r.res);
    RS_CHECK_MSG(ok && ack_first, "ok %d, ack first %d", ok, ack_first);
    return 0;
}

/* A caller killed mid-stream comes back as a new process under the same routing id. */
static int test_a_new_client_under_the_same_routing_id_replays_from_seq_0(void)
{
    struct rs_harness h = {0};
    struct rs_client_result ref = {0};
    struct stream_rec first = {0}, again = {0}, third = {0}, fresh = {0};
    struct rs_wire_generate g;
    int rc = start(&h);
    if (rc != 0)
        return rc;
    int ok = reference(&h, &ref) == 0;
    uint64_t h0 = handles_issued(&h);
    struct rs_client_req_opts o = {.id = "k-request-1", .replay = true};
    greedy(&g, 600);
    rs_client *a = client_of(&h, RID, "k-");
    ok = ok && a != NULL && rs_client_submit(a, &g, &o, on_event, &first, NULL) == RS_OK;
    while (ok && first.n_deltas < 20)
        ok = rs_client_poll(a, 1000) >= 0;
    rs_client_destroy(&a); /* gone without a cancel, as a killed process */
    rs_client *b = client_of(&h, RID, "k-");
    ok = ok && b != NULL && rs_client_submit(b, &g, &o, on_event, &again, NULL) == RS_OK &&
         wait_final(b, &again) == 0;
    rs_client_destroy(&b);
    int same_again = ok && same(&again, &ref) == 0;
    /* kept (not released): a third process replays the finished request */
    rs_client *c = client_of(&h, RID, "k-");
    ok = ok && c != NULL && rs_client_submit(c, &g, &o, on_event, &third, NULL) == RS_OK &&
         wait_final(c, &third) == 0;
    int same_third = ok && same(&third, &ref) == 0;
    uint64_t runs = handles_issued(&h) - h0;
    /* one live connection per routing id: a second one is ignored while c holds it */
    rs_client_destroy(&c);
    /* without the keep prefix the final releases it: the same submission then runs anew */
    struct rs_client_req_opts o2 = {.id = "plain-1", .replay = true};
    rs_client *d = client_of(&h, RID, NULL);
    struct stream_rec d1 = {0};
    ok = ok && d != NULL && rs_client_submit(d, &g, &o2, on_event, &d1, NULL) == RS_OK &&
         wait_final(d, &d1) == 0;
    int released = ok && wait_released(&h, d, "plain-1", 30000);
    rs_client_destroy(&d);
    d = client_of(&h, RID, NULL);
    ok = ok && d != NULL && rs_client_submit(d, &g, &o2, on_event, &fresh, NULL) == RS_OK &&
         wait_final(d, &fresh) == 0;
    uint64_t runs_plain = handles_issued(&h) - h0 - runs;
    rs_client_destroy(&c);
    rs_client_destroy(&d);
    rs_harness_stop(&h, !ok);
    struct stream_rec *recs[] = {&first, &again, &third, &d1};
    for (size_t i = 0; i < sizeof(recs) / sizeof(recs[0]); i++)
        rs_client_result_fini(&recs[i]->res);
    RS_CHECK_MSG(ok && same_again && same_third, "ok %d, replay %d, second replay %d", ok,
                 same_again, same_third);
    RS_CHECK_MSG(runs == 1, "the kept request ran %llu times", (unsigned long long)runs);
    RS_CHECK_MSG(released, "the released request's record was still held after 30 s");
    RS_CHECK_MSG(runs_plain == 2, "the released one ran %llu times, want 2",
                 (unsigned long long)runs_plain);
    int fresh_same = same(&fresh, &ref) == 0;
    rs_client_result_fini(&fresh.res);
    rs_client_result_fini(&ref);
    RS_CHECK(fresh_same);
    return 0;
}

static int test_replay_hands_a_running_request_to_a_new_callback(void)
{
    struct rs_harness h = {0};
    struct rs_client_result ref = {0};
    struct stream_rec old = {0}, neu = {0};
    struct rs_wire_generate g;
    char id[RS_CLIENT_ID_CAP];
    int rc = start(&h);
    if (rc != 0)
        return rc;
    int ok = reference(&h, &ref) == 0;
    rs_client *c = client_of(&h, NULL, NULL);
    greedy(&g, 600);
    ok = ok && c != NULL && rs_client_submit(c, &g, NULL, on_event, &old, id) == RS_OK;
    while (ok && old.n_deltas < 30)
        ok = rs_client_poll(c, 1000) >= 0;
    uint32_t old_seen = old.n_deltas;
    ok = ok && rs_client_replay(c, id, on_event, &neu) == RS_OK &&
         rs_client_replay(c, "no-such-id", on_event, &neu) == RS_ENOENT;
    ok = ok && wait_final(c, &neu) == 0;
    rs_client_destroy(&c);
    rs_harness_stop(&h, !ok);
    int moved = old.n_deltas == old_seen && old.n_finals == 0;
    int whole = ok && same(&neu, &ref) == 0 && neu.n_deltas > old_seen;
    rs_client_result_fini(&old.res);
    rs_client_result_fini(&neu.res);
    rs_client_result_fini(&ref);
    RS_CHECK_MSG(ok, "%s", "run failed");
    RS_CHECK_MSG(moved, "the old callback got %u more", old.n_deltas - old_seen);
    RS_CHECK_MSG(whole, "replayed %u deltas", neu.n_deltas);
    return 0;
}

static int test_poll_fds_wakes_for_a_plain_descriptor(void)
{
    struct rs_client_opts o;
    rs_client *c = NULL;
    int p[2];
    rs_client_opts_default(&o);
    o.rundir = rs_test_tmpdir(); /* no daemon: the client connects to nothing */
    RS_CHECK(rs_client_create(&o, &c) == RS_OK && pipe(p) == 0);
    struct rs_client_pollfd fd = {.fd = p[0], .events = RS_CLIENT_POLLIN};
    RS_CHECK(rs_client_poll_fds(&c, 1, &fd, 1, 0) >= 0 && fd.revents == 0);
    RS_CHECK(write(p[1], "x", 1) == 1);
    int rc = rs_client_poll_fds(&c, 1, &fd, 1, 10000);
    rs_client_destroy(&c);
    close(p[0]);
    close(p[1]);
    RS_CHECK_MSG(rc >= 0 && (fd.revents & RS_CLIENT_POLLIN), "rc %d revents %d", rc, fd.revents);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_ack_event_comes_first_when_asked),
    RS_TEST(test_a_new_client_under_the_same_routing_id_replays_from_seq_0),
    RS_TEST(test_replay_hands_a_running_request_to_a_new_callback),
    RS_TEST(test_poll_fds_wakes_for_a_plain_descriptor),
};

RS_TEST_MAIN(cases)

/* SPDX-License-Identifier: MIT */
/*
 * The client library's delivery rules, against a peer that plays tokenizerd
 * and postprocd at the wire level (real ROUTER sockets, the real encoders),
 * so the cases a crash produces only by chance happen on purpose: repeated
 * and skipped sequence numbers, a missing ack, silence, a refusal, released
 * output. The real daemons are exercised in tests/integration/test_client.c.
 * Also: option and id checks, the bounded table, time limits with no server.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "client/options.h"
#include "common/clock.h"
#include "ipc/rundir.h"
#include "ipc/wire_client.h"
#include "ipc/wire_server.h"
#include "ipc/zsock.h"
#include "tests/rs_test.h"

/* What the callback saw. */
struct rec {
    uint64_t seqs[64];
    uint32_t n_deltas, n_finals;
    char text[256];
    struct rs_client_event final; /* id/message pointers not kept */
    enum rs_wire_code final_error;
    int out_of_order;
};

static void on_event(const struct rs_client_event *ev)
{
    struct rec *r = ev->user;
    uint64_t expect = r->n_deltas;
    if (ev->kind == RS_CLIENT_EV_DELTA) {
        if (ev->seq != expect || r->n_finals > 0)
            r->out_of_order = 1;
        if (r->n_deltas < 64)
            r->seqs[r->n_deltas] = ev->seq;
        r->n_deltas++;
    } else {
        r->n_finals++;
        r->final = *ev;
        r->final_error = ev->error;
    }
    strncat(r->text, ev->text, ev->text_len < sizeof(r->text) - strlen(r->text) - 1
                                   ? ev->text_len
                                   : sizeof(r->text) - strlen(r->text) - 1);
}

/* The scripted daemons: a ROUTER on each of the two client endpoints. */
struct peer {
    void *zctx;
    char rundir[256];
    rs_zsock *tok, *post;
    struct rs_zsock_peer who;     /* the client's routing id (from its first message) */
    uint8_t body[65536];
    size_t len;
    struct rs_wire_buf out;
    int auto_welcome; /* after the first: answer any further hello (the client retries) */
};

static int peer_open(struct peer *p)
{
    char name[64], ep[RS_ZSOCK_ENDPOINT_MAX];
    memset(p, 0, sizeof(*p));
    rs_test_unique_name("cl", name, sizeof(name));
    snprintf(p->rundir, sizeof(p->rundir), "%s/%s", rs_test_tmpdir(), name);
    p->zctx = zmq_ctx_new();
    rs_wire_buf_init(&p->out, RS_WIRE_SERVER_MSG_MAX);
    if (rs_rundir_prepare(p->rundir, NULL) != RS_OK)
        return 1;
    if (rs_rundir_endpoint(p->rundir, "tokenizerd.sock", ep, sizeof(ep)) != RS_OK ||
        rs_zsock_create(p->zctx, RS_ZSOCK_ROUTER, ep, NULL, &p->tok) != RS_OK)
        return 1;
    if (rs_rundir_endpoint(p->rundir, "postprocd.sock", ep, sizeof(ep)) != RS_OK ||
        rs_zsock_create(p->zctx, RS_ZSOCK_ROUTER, ep, NULL, &p->post) != RS_OK)
        return 1;
    return 0;
}

static void peer_close(struct peer *p)
{
    rs_zsock_destroy(&p->tok);
    rs_zsock_destroy(&p->post);
    rs_wire_buf_fini(&p->out);
    zmq_ctx_term(p->zctx);
}

static rs_client *client_for(struct peer *p, uint32_t ack_ms, uint32_t stall_ms)
{
    struct rs_client_opts o;
    rs_client *c = NULL;
    rs_client_opts_default(&o);
    o.rundir = p->rundir;
    o.ack_timeout_ms = ack_ms;
    o.stall_ms = stall_ms;
    o.zctx = p->zctx;
    return rs_client_create(&o, &c) == RS_OK ? c : NULL;
}

static int peer_send(struct peer *p, rs_zsock *s, const struct rs_wire_server_msg *m);

static int peer_send_welcome(struct peer *p)
{
    struct rs_wire_server_msg w = {.type = RS_WIRE_T_WELCOME};
    w.u.welcome.server = (struct rs_wire_str){"postprocd", 9};
    return peer_send(p, p->post, &w);
}

/*
 * Drives the client while waiting up to ms for a message on s; decodes it
 * into *m. 0, or 1 on timeout. The client's routing id is remembered.
 */
static int peer_recv(struct peer *p, rs_client *c, rs_zsock *s, int ms,
                     struct rs_wire_client_msg *m)
{
    uint64_t end = rs_clock_ms() + (uint64_t)ms;
    do {
        zmq_msg_t body;
        zmq_msg_init(&body);
        struct rs_zsock_peer who;
        if (rs_zsock_recv(s, &who, &body, 0) == RS_OK) {
            struct rs_wire_error err;
            p->len = zmq_msg_size(&body);
            memcpy(p->body, zmq_msg_data(&body), p->len < sizeof(p->body) ? p->len : 0);
            zmq_msg_close(&body);
            p->who = who;
            if (rs_wire_client_decode(p->body, p->len, m, &err) != RS_OK)
                return 1;
            if (!(p->auto_welcome && s == p->post && m->type == RS_WIRE_T_HELLO))
                return 0;
            if (peer_send_welcome(p) != 0)
                return 1;
            continue;
        }
        zmq_msg_close(&body);
        rs_client_poll(c, 2);
    } while (rs_clock_ms() < end);
    return 1;
}

/* Polls the client for ms milliseconds. */
static void pump(rs_client *c, int ms)
{
    uint64_t end = rs_clock_ms() + (uint64_t)ms;
    while (rs_clock_ms() < end)
        rs_client_poll(c, 2);
}

static int peer_send(struct peer *p, rs_zsock *s, const struct rs_wire_server_msg *m)
{
    if (rs_wire_server_encode(m, &p->out) != RS_OK)
        return 1;
    return rs_zsock_router_send(s, &p->who, p->out.data, p->out.len) == RS_OK ? 0 : 1;
}

/* hello -> welcome: what the client does first. */
static int peer_welcome(struct peer *p, rs_client *c)
{
    struct rs_wire_client_msg m;
    if (peer_recv(p, c, p->post, 3000, &m) != 0 || m.type != RS_WIRE_T_HELLO)
        return 1;
    p->auto_welcome = 1;
    return peer_send_welcome(p);
}

static int peer_ack(struct peer *p, const char *id)
{
    struct rs_wire_server_msg a = {.type = RS_WIRE_T_ACK};
    snprintf(a.id, sizeof(a.id), "%s", id);
    a.u.ack = (struct rs_wire_ack){.prompt_tokens = 3, .handle = 77, .seed = 5};
    return peer_send(p, p->tok, &a);
}

/* A delta (final = 0) or final of seq carrying text "<seq>," and token seq. */
static int peer_out(struct peer *p, const char *id, uint64_t seq, int final)
{
    static uint32_t tok;
    char text[24];
    struct rs_wire_server_msg d;
    memset(&d, 0, sizeof(d));
    snprintf(d.id, sizeof(d.id), "%s", id);
    snprintf(text, sizeof(text), "%llu,", (unsigned long long)seq);
    tok = (uint32_t)seq;
    struct rs_wire_delta *o = final ? &d.u.final.out : &d.u.delta;
    o->seq = seq;
    o->text = (struct rs_wire_str){text, (uint32_t)strlen(text)};
    o->tokens = (struct rs_wire_ids){.n = 1, .vals = &tok};
    d.type = final ? RS_WIRE_T_FINAL : RS_WIRE_T_DELTA;
    if (final) {
        d.u.final.finish_reason = RS_WIRE_FINISH_LENGTH;
        d.u.final.usage = (struct rs_wire_usage){3, (uint32_t)seq + 1, 0};
    }
    return peer_send(p, p->post, &d);
}

static void gen_bos(struct rs_wire_generate *g)
{
    rs_wire_generate_init(g);
    g->has = RS_WIRE_GEN_PROMPT | RS_WIRE_GEN_STREAM;
    g->prompt = (struct rs_wire_str){"", 0};
    g->stream = true;
}

/* Submits one request and plays welcome + ack; returns its id in id. */
static int start_request(struct peer *p, rs_client *c, struct rec *r, char *id)
{
    struct rs_wire_generate g;
    struct rs_wire_client_msg m;
    gen_bos(&g);
    if (rs_client_submit(c, &g, NULL, on_event, r, id) != RS_OK || peer_welcome(p, c) != 0)
        return 1;
    if (peer_recv(p, c, p->tok, 3000, &m) != 0 || m.type != RS_WIRE_T_GENERATE ||
        strcmp(m.id, id) != 0)
        return 1;
    return peer_ack(p, id);
}

static int test_repeats_dropped_and_gap_resumed_in_order(void)
{
    struct peer p;
    struct rec r = {0};
    char id[RS_CLIENT_ID_CAP];
    struct rs_wire_client_msg m;
    struct rs_client_stats st;
    RS_CHECK(peer_open(&p) == 0);
    rs_client *c = client_for(&p, 5000, 5000);
    RS_CHECK(c != NULL && start_request(&p, c, &r, id) == 0);
    /* 0 1 1 0 (repeats) then 3 4 (2 is missing) */
    uint64_t sent[] = {0, 1, 1, 0, 3, 4};
    for (size_t i = 0; i < sizeof(sent) / sizeof(sent[0]); i++)
        RS_CHECK(peer_out(&p, id, sent[i], 0) == 0);
    RS_CHECK(peer_recv(&p, c, p.post, 3000, &m) == 0);
    RS_CHECK_MSG(m.type == RS_WIRE_T_RESUME && m.u.resume.from_seq == 2,
                 "type %d from %llu", m.type, (unsigned long long)m.u.resume.from_seq);
    /* postprocd replays from 2 (3 and 4 again), then goes on and ends */
    for (uint64_t s = 2; s <= 5; s++)
        RS_CHECK(peer_out(&p, id, s, 0) == 0);
    RS_CHECK(peer_out(&p, id, 6, 1) == 0);
    RS_CHECK(peer_out(&p, id, 5, 0) == 0); /* a stray repeat after the end */
    pump(c, 100);
    rs_client_stats(c, &st);
    RS_CHECK_MSG(r.n_deltas == 6 && r.n_finals == 1 && !r.out_of_order, "%u deltas %u finals",
                 r.n_deltas, r.n_finals);
    RS_CHECK_MSG(strcmp(r.text, "0,1,2,3,4,5,6,") == 0, "text '%s'", r.text);
    RS_CHECK(r.final.status == RS_CLIENT_OK && r.final.finish_reason == RS_WIRE_FINISH_LENGTH);
    RS_CHECK(r.final.handle == 77 && r.final.seed == 5 && r.final.usage.completion_tokens == 7);
    RS_CHECK_MSG(st.duplicates == 2 && st.gaps == 2 && st.resumes == 1 && st.strays == 1,
                 "dups %llu gaps %llu resumes %llu strays %llu",
                 (unsigned long long)st.duplicates, (unsigned long long)st.gaps,
                 (unsigned long long)st.resumes, (unsigned long long)st.strays);
    RS_CHECK(rs_client_in_flight(c) == 0);
    rs_client_destroy(&c);
    peer_close(&p);
    return 0;
}

static int test_unacked_generate_resent_with_same_bytes(void)
{
    struct peer p;
    struct rec r = {0};
    char id[RS_CLIENT_ID_CAP];
    struct rs_wire_generate g;
    struct rs_wire_client_msg m;
    uint8_t first[4096];
    size_t first_len;
    RS_CHECK(peer_open(&p) == 0);
    rs_client *c = client_for(&p, 50, 5000);
    RS_CHECK(c != NULL);
    gen_bos(&g);
    g.has |= RS_WIRE_GEN_MAX_TOKENS;
    g.max_tokens = 9;
    RS_CHECK(rs_client_submit(c, &g, NULL, on_event, &r, id) == RS_OK);
    RS_CHECK(peer_welcome(&p, c) == 0);
    RS_CHECK(peer_recv(&p, c, p.tok, 3000, &m) == 0 && m.type == RS_WIRE_T_GENERATE);
    first_len = p.len;
    memcpy(first, p.body, first_len);
    /* no ack: the same message again (tokenizerd dedups on it), with backoff */
    RS_CHECK(peer_recv(&p, c, p.tok, 3000, &m) == 0 && m.type == RS_WIRE_T_GENERATE);
    RS_CHECK(p.len == first_len && memcmp(p.body, first, first_len) == 0);
    RS_CHECK(m.u.gen.max_tokens == 9 && strcmp(m.id, id) == 0);
    RS_CHECK(peer_ack(&p, id) == 0 && peer_ack(&p, id) == 0); /* the second answers a resend */
    pump(c, 300);                                             /* > 2 resend intervals */
    zmq_msg_t body;
    zmq_msg_init(&body);
    RS_CHECK_MSG(rs_zsock_recv(p.tok, NULL, &body, 0) == RS_EAGAIN, "resent after the ack");
    zmq_msg_close(&body);
    struct rs_client_stats st;
    rs_client_stats(c, &st);
    RS_CHECK(st.gen_resent >= 1 && st.acked == 1 && r.n_finals == 0);
    RS_CHECK(peer_out(&p, id, 0, 1) == 0);
    pump(c, 50);
    RS_CHECK(r.n_finals == 1 && r.final.status == RS_CLIENT_OK);
    rs_client_destroy(&c);
    peer_close(&p);
    return 0;
}

static int test_refused_request_ends_with_the_servers_error(void)
{
    struct peer p;
    struct rec r = {0};
    char id[RS_CLIENT_ID_CAP];
    struct rs_wire_generate g;
    struct rs_wire_client_msg m;
    RS_CHECK(peer_open(&p) == 0);
    rs_client *c = client_for(&p, 5000, 5000);
    RS_CHECK(c != NULL);
    gen_bos(&g);
    g.has |= RS_WIRE_GEN_TOP_P;
    g.top_p = 1.5f; /* the server's validator refuses it, not the client */
    RS_CHECK(rs_client_submit(c, &g, NULL, on_event, &r, id) == RS_OK);
    RS_CHECK(peer_welcome(&p, c) == 0);
    RS_CHECK(peer_recv(&p, c, p.tok, 3000, &m) == 0 && m.type == RS_WIRE_T_GENERATE);
    struct rs_wire_error err = {.code = RS_WIRE_INVALID_PARAM};
    snprintf(err.msg, sizeof(err.msg), "field 'top_p': must be in (0, 1], got 1.5");
    RS_CHECK(rs_wire_error_reply(id, &err, &p.out) == RS_OK);
    RS_CHECK(rs_zsock_router_send(p.tok, &p.who, p.out.data, p.out.len) == RS_OK);
    pump(c, 100);
    RS_CHECK(r.n_finals == 1 && r.n_deltas == 0);
    RS_CHECK(r.final.status == RS_CLIENT_REFUSED && r.final.finish_reason == RS_WIRE_FINISH_ERROR);
    RS_CHECK(r.final_error == RS_WIRE_INVALID_PARAM && rs_client_in_flight(c) == 0);
    rs_client_destroy(&c);
    peer_close(&p);
    return 0;
}

static int test_silent_request_resumed_then_lost_output_reported(void)
{
    struct peer p;
    struct rec r = {0};
    char id[RS_CLIENT_ID_CAP];
    struct rs_wire_client_msg m;
    RS_CHECK(peer_open(&p) == 0);
    rs_client *c = client_for(&p, 5000, 60);
    RS_CHECK(c != NULL && start_request(&p, c, &r, id) == 0);
    RS_CHECK(peer_out(&p, id, 0, 0) == 0 && peer_out(&p, id, 1, 0) == 0);
    /* then nothing: after the stall interval the client asks from seq 2, and says hello */
    RS_CHECK(peer_recv(&p, c, p.post, 3000, &m) == 0);
    RS_CHECK_MSG(m.type == RS_WIRE_T_RESUME && m.u.resume.from_seq == 2 && strcmp(m.id, id) == 0,
                 "type %d", m.type);
    struct rs_wire_error err = {.code = RS_WIRE_NOT_FOUND};
    snprintf(err.msg, sizeof(err.msg), "no request with this id from this client");
    RS_CHECK(rs_wire_error_reply(id, &err, &p.out) == RS_OK);
    RS_CHECK(rs_zsock_router_send(p.post, &p.who, p.out.data, p.out.len) == RS_OK);
    pump(c, 100);
    RS_CHECK(r.n_deltas == 2 && r.n_finals == 1 && r.final.status == RS_CLIENT_LOST);
    RS_CHECK(r.final.usage.completion_tokens == 2);
    rs_client_destroy(&c);
    peer_close(&p);
    return 0;
}

static int test_cancel_before_ack_goes_out_after_it(void)
{
    struct peer p;
    struct rec r = {0};
    char id[RS_CLIENT_ID_CAP];
    struct rs_wire_generate g;
    struct rs_wire_client_msg m;
    RS_CHECK(peer_open(&p) == 0);
    rs_client *c = client_for(&p, 5000, 5000);
    RS_CHECK(c != NULL);
    gen_bos(&g);
    RS_CHECK(rs_client_submit(c, &g, NULL, on_event, &r, id) == RS_OK);
    RS_CHECK(rs_client_cancel(c, id) == RS_OK);
    RS_CHECK(rs_client_cancel(c, "no-such-request") == RS_ENOENT);
    RS_CHECK(peer_welcome(&p, c) == 0);
    RS_CHECK(peer_recv(&p, c, p.tok, 3000, &m) == 0 && m.type == RS_WIRE_T_GENERATE);
    pump(c, 50);
    zmq_msg_t body;
    zmq_msg_init(&body);
    RS_CHECK_MSG(rs_zsock_recv(p.tok, NULL, &body, 0) == RS_EAGAIN, "cancel before the ack");
    zmq_msg_close(&body);
    RS_CHECK(peer_ack(&p, id) == 0);
    RS_CHECK(peer_recv(&p, c, p.tok, 3000, &m) == 0);
    RS_CHECK(m.type == RS_WIRE_T_CANCEL && strcmp(m.id, id) == 0);
    RS_CHECK(peer_out(&p, id, 0, 1) == 0);
    pump(c, 50);
    RS_CHECK(r.n_finals == 1);
    rs_client_destroy(&c);
    peer_close(&p);
    return 0;
}

static int test_request_times_out_with_no_server(void)
{
    struct rs_client_opts o;
    struct rs_wire_generate g;
    struct rec r = {0};
    rs_client *c;
    char dir[256], name[64];
    rs_test_unique_name("cl-none", name, sizeof(name));
    snprintf(dir, sizeof(dir), "%s/%s", rs_test_tmpdir(), name);
    rs_client_opts_default(&o);
    o.rundir = dir; /* nothing listens there */
    RS_CHECK(rs_client_create(&o, &c) == RS_OK);
    gen_bos(&g);
    struct rs_client_req_opts ro = {.timeout_ms = 150};
    uint64_t t0 = rs_clock_ms();
    RS_CHECK(rs_client_submit(c, &g, &ro, on_event, &r, NULL) == RS_OK);
    RS_CHECK(rs_client_wait(c, 5000) == RS_OK);
    RS_CHECK(rs_clock_ms() - t0 >= 150);
    RS_CHECK(r.n_finals == 1 && r.final.status == RS_CLIENT_TIMEOUT);
    RS_CHECK(r.final.finish_reason == RS_WIRE_FINISH_ERROR && !rs_client_connected(c));
    /* the overall limit of rs_client_wait */
    RS_CHECK(rs_client_submit(c, &g, NULL, on_event, &r, NULL) == RS_OK);
    RS_CHECK(rs_client_wait(c, 100) == RS_EAGAIN && rs_client_in_flight(c) == 1);
    rs_client_destroy(&c);
    return 0;
}

static int test_ids_checked_and_table_bounded(void)
{
    struct rs_client_opts o;
    struct rs_wire_generate g;
    rs_client *c;
    char dir[256], name[64], id[RS_CLIENT_ID_CAP];
    rs_test_unique_name("cl-ids", name, sizeof(name));
    snprintf(dir, sizeof(dir), "%s/%s", rs_test_tmpdir(), name);
    rs_client_opts_default(&o);
    o.rundir = dir;
    o.max_requests = 3;
    RS_CHECK(rs_client_create(&o, &c) == RS_OK);
    size_t rid_len;
    const uint8_t *rid = rs_client_routing_id(c, &rid_len);
    RS_CHECK(rid_len > 0 && rid_len <= RS_CLIENT_RID_MAX && rid[0] != 0);
    gen_bos(&g);
    struct rs_client_req_opts bad = {.id = "has space"}, dup = {.id = "1"};
    RS_CHECK(rs_client_submit(c, &g, &bad, NULL, NULL, id) == RS_EINVAL);
    RS_CHECK(rs_client_submit(c, &g, &dup, NULL, NULL, id) == RS_OK && strcmp(id, "1") == 0);
    RS_CHECK(rs_client_submit(c, &g, &dup, NULL, NULL, id) == RS_EEXIST);
    RS_CHECK(rs_client_submit(c, &g, NULL, NULL, NULL, id) == RS_OK && strcmp(id, "2") == 0);
    RS_CHECK(rs_client_submit(c, &g, NULL, NULL, NULL, id) == RS_OK);
    RS_CHECK(rs_client_submit(c, &g, NULL, NULL, NULL, id) == RS_EFULL);
    g.prompt = (struct rs_wire_str){"\xff", 1}; /* not UTF-8: the encoder refuses it */
    rs_client_destroy(&c);
    o.max_requests = 4;
    RS_CHECK(rs_client_create(&o, &c) == RS_OK);
    RS_CHECK(rs_client_submit(c, &g, NULL, NULL, NULL, id) == RS_EINVAL);
    RS_CHECK(rs_client_in_flight(c) == 0);
    rs_client_destroy(&c);
    o.routing_id = "\0bad";
    o.routing_id_len = 4;
    RS_CHECK(rs_client_create(&o, &c) == RS_EINVAL && c == NULL);
    return 0;
}

static int test_flags_parse_request_fields(void)
{
    char *argv[] = {"x", "--max-tokens", "12", "--temperature", "0.5", "--top-k", "7",
                    "--stop", "END", "--stop", "\n\n", "--stop-token-ids", "2,13",
                    "--seed", "18446744073709551615", "--no-stream", "--ignore-eos",
                    "--top-p", "abc", "--nonsense"};
    int argc = (int)(sizeof(argv) / sizeof(argv[0])), i;
    char err[256];
    struct rs_client_gen_args a;
    rs_client_gen_args_init(&a);
    for (i = 1; i < 17; i++)
        RS_CHECK_MSG(rs_client_gen_parse(&a, argc, argv, &i, err, sizeof(err)) == 1, "%s", err);
    RS_CHECK(a.gen.max_tokens == 12 && a.gen.temperature == 0.5f && a.gen.top_k == 7);
    RS_CHECK(a.gen.n_stop == 2 && a.gen.stop[1].len == 2 && a.gen.n_stop_ids == 2 &&
             a.gen.stop_ids[1] == 13);
    RS_CHECK(a.gen.seed == UINT64_MAX && !a.gen.stream && a.gen.ignore_eos);
    RS_CHECK((a.gen.has & RS_WIRE_GEN_TOP_P) == 0);
    i = 17;
    RS_CHECK(rs_client_gen_parse(&a, argc, argv, &i, err, sizeof(err)) == -1);
    RS_CHECK(strstr(err, "--top-p") != NULL);
    i = 19;
    RS_CHECK(rs_client_gen_parse(&a, argc, argv, &i, err, sizeof(err)) == 0);
    uint32_t *ids, n;
    RS_CHECK(rs_client_parse_ids("1,2,3", &ids, &n, err, sizeof(err)) == 0 && n == 3);
    free(ids);
    RS_CHECK(rs_client_parse_ids("1,,3", &ids, &n, err, sizeof(err)) == -1);
    RS_CHECK(rs_client_parse_ids("2147483648", &ids, &n, err, sizeof(err)) == -1);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_repeats_dropped_and_gap_resumed_in_order),
    RS_TEST(test_unacked_generate_resent_with_same_bytes),
    RS_TEST(test_refused_request_ends_with_the_servers_error),
    RS_TEST(test_silent_request_resumed_then_lost_output_reported),
    RS_TEST(test_cancel_before_ack_goes_out_after_it),
    RS_TEST(test_request_times_out_with_no_server),
    RS_TEST(test_ids_checked_and_table_bounded),
    RS_TEST(test_flags_parse_request_fields),
};

RS_TEST_MAIN(cases)

/* SPDX-License-Identifier: MIT */
/*
 * The client library on its own: option and id checks, the bounded request
 * table, flag parsing, and time limits when no server answers. Everything
 * that needs a server runs against the four real daemons in
 * tests/integration/test_client.c (delivery exactly once across kills of
 * tokenizerd and postprocd, refusals, cancels) and tests/integration/
 * test_ops.py (requests lost to a whole-pipeline restart).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "client/options.h"
#include "common/clock.h"
#include "ipc/wire_client.h"
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

static void gen_bos(struct rs_wire_generate *g)
{
    rs_wire_generate_init(g);
    g->has = RS_WIRE_GEN_PROMPT | RS_WIRE_GEN_STREAM;
    g->prompt = (struct rs_wire_str){"", 0};
    g->stream = true;
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

/* Parses argv with the request flags alone; rs_opt_parse's result. */
static int gen_parse(struct rs_client_gen_args *a, int argc, char **argv, char *err, size_t len)
{
    struct rs_opt_group g = {RS_CLIENT_GEN_TITLE, rs_client_gen_opts, a, NULL};
    rs_client_gen_args_init(a);
    return rs_opt_parse(&g, 1, argc, argv, 0, NULL, err, len);
}

static int test_flags_parse_request_fields(void)
{
    char *argv[] = {"x", "--max-tokens", "12", "--temperature=0.5", "--top-k", "7",
                    "--stop", "END", "--stop", "\n\n", "--stop-token-ids", "2,13",
                    "--seed", "18446744073709551615", "--no-stream", "--ignore-eos"};
    int argc = (int)(sizeof(argv) / sizeof(argv[0]));
    char err[256];
    struct rs_client_gen_args a;
    RS_CHECK_MSG(gen_parse(&a, argc, argv, err, sizeof(err)) == RS_OPT_OK, "%s", err);
    RS_CHECK(a.gen.max_tokens == 12 && a.gen.temperature == 0.5f && a.gen.top_k == 7);
    RS_CHECK(a.gen.n_stop == 2 && a.gen.stop[1].len == 2 && a.gen.n_stop_ids == 2 &&
             a.gen.stop_ids[1] == 13);
    RS_CHECK(a.gen.seed == UINT64_MAX && !a.gen.stream && a.gen.ignore_eos);
    uint32_t want = RS_WIRE_GEN_MAX_TOKENS | RS_WIRE_GEN_TEMPERATURE | RS_WIRE_GEN_TOP_K |
                    RS_WIRE_GEN_STOP | RS_WIRE_GEN_STOP_TOKEN_IDS | RS_WIRE_GEN_SEED |
                    RS_WIRE_GEN_STREAM | RS_WIRE_GEN_IGNORE_EOS;
    RS_CHECK_MSG(a.gen.has == want, "has 0x%x, want 0x%x", a.gen.has, want);
    char *bad[] = {"x", "--top-p", "abc"};
    RS_CHECK(gen_parse(&a, 3, bad, err, sizeof(err)) == RS_OPT_ERROR);
    RS_CHECK(strstr(err, "--top-p") != NULL && (a.gen.has & RS_WIRE_GEN_TOP_P) == 0);
    char *other[] = {"x", "--nonsense"};
    RS_CHECK(gen_parse(&a, 2, other, err, sizeof(err)) == RS_OPT_ERROR);
    RS_CHECK(strstr(err, "unknown option '--nonsense'") != NULL);
    uint32_t *ids, n;
    RS_CHECK(rs_client_parse_ids("1,2,3", &ids, &n, err, sizeof(err)) == 0 && n == 3);
    free(ids);
    RS_CHECK(rs_client_parse_ids("1,,3", &ids, &n, err, sizeof(err)) == -1);
    RS_CHECK(rs_client_parse_ids("2147483648", &ids, &n, err, sizeof(err)) == -1);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_request_times_out_with_no_server),
    RS_TEST(test_ids_checked_and_table_bounded),
    RS_TEST(test_flags_parse_request_fields),
};

RS_TEST_MAIN(cases)

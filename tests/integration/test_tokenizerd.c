/* SPDX-License-Identifier: MIT */
/*
 * The real tokenizerd binary driven alone: the test opens the instance as
 * schedulerd (reads the committed records, receives the doorbells, frees
 * records the way postprocd would) and talks to tokenizerd as ZeroMQ
 * clients with DEALER sockets, the wire encoders and hand-packed msgpack.
 * Proves: a generate becomes exactly the record it describes; every kind of
 * bad request gets its error code while good requests from another client
 * keep flowing; a resend is acknowledged again and not run twice, also
 * across a SIGKILL of tokenizerd; a full table answers "overloaded"; cancel
 * sets the finish word and rings schedulerd; access options (group rundir,
 * tcp only with CURVE, unlisted keys refused).
 */
#include <grp.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/tokenizer.h"
#include "common/vocab.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_logprob.h"
#include "ipc/pipeline_req.h"
#include "tests/integration/front_fixture.h"

#define MODEL "stories260K.gguf"
#define N_CTX 256

struct env {
    struct fx_inst in;
    struct rs_pipe *sched; /* the test as schedulerd */
    struct rs_pipe_doors doors;
    struct fx_daemon tokd;
};

static struct rs_wire_door door; /* ~20 KiB */

/* Tests of one client's view of the whole table lift the per-client share (owner tests
 * below set their own). */
static const char *const whole_table[] = {"--owner-share", "100", NULL};

static int setup(struct env *e, uint32_t max_requests, const char *const *extra)
{
    if (extra == NULL)
        extra = whole_table;
    memset(e, 0, sizeof(*e));
    int rc = fx_inst_init(&e->in, MODEL, N_CTX, max_requests);
    if (rc != 0)
        return rc;
    if ((e->sched = fx_open(&e->in, RS_PIPE_STAGE_SCHEDULERD)) == NULL ||
        rs_pipe_doors_open(&e->doors, e->in.zctx, e->in.rundir, RS_PIPE_STAGE_SCHEDULERD) !=
            RS_OK ||
        fx_daemon_start(&e->in, "tokenizerd", &e->tokd, extra) != 0)
        return 1;
    return fx_daemon_ready(e->sched, RS_PIPE_TOKENIZERD, &e->tokd);
}

/* Stops tokenizerd (a clean stop must exit 0) and removes the instance. */
static int teardown(struct env *e)
{
    int status = fx_daemon_stop(&e->tokd);
    if (status != 0)
        fx_daemon_dump_log(&e->tokd);
    rs_pipe_doors_close(&e->doors);
    rs_pipe_close(&e->sched);
    fx_inst_fini_ex(&e->in, status == 0);
    return status == 0 ? 0 : 1;
}

static int expect_error(struct fx_client *c, const char *id, enum rs_wire_code code)
{
    struct rs_wire_server_msg m;
    RS_CHECK_MSG(fx_recv(c, 3000, &m) == 0, "no reply, expected error %s",
                 rs_wire_code_name(code));
    RS_CHECK_MSG(m.type == RS_WIRE_T_ERROR, "got %s, expected error %s", rs_wire_type_name(m.type),
                 rs_wire_code_name(code));
    RS_CHECK_MSG(m.u.error.code == code && strcmp(m.id, id) == 0,
                 "got error %s for '%s' (%.*s), expected %s for '%s'",
                 rs_wire_code_name(m.u.error.code), m.id, (int)m.u.error.message.len,
                 m.u.error.message.ptr, rs_wire_code_name(code), id);
    return 0;
}

static int expect_ack(struct fx_client *c, const char *id, struct rs_wire_ack *ack)
{
    struct rs_wire_server_msg m;
    RS_CHECK_MSG(fx_recv(c, 3000, &m) == 0, "no ack for '%s'", id);
    RS_CHECK_MSG(m.type == RS_WIRE_T_ACK && strcmp(m.id, id) == 0, "got %s for '%s' (%.*s)",
                 rs_wire_type_name(m.type), m.id,
                 m.type == RS_WIRE_T_ERROR ? (int)m.u.error.message.len : 0,
                 m.type == RS_WIRE_T_ERROR ? m.u.error.message.ptr : "");
    *ack = m.u.ack;
    return 0;
}

/* The next request_ready doorbell: its record reference. */
static int expect_ready(struct env *e, struct rs_table_ref *ref)
{
    RS_CHECK_MSG(rs_pipe_door_recv(&e->doors, &door, 3000) == RS_OK, "no doorbell");
    RS_CHECK_MSG(door.kind == RS_WIRE_DOOR_REQUEST_READY, "doorbell %s",
                 rs_wire_door_kind_name(door.kind));
    ref->index = (uint32_t)door.u.request.slot;
    ref->gen = (uint32_t)door.u.request.gen;
    return 0;
}

static uint32_t count_published(const struct rs_pipe *p)
{
    struct rs_table_stats st;
    rs_table_check(p->requests, &st);
    uint32_t n = 0;
    for (uint32_t s = RS_TABLE_USER; s < RS_TABLE_NSTATES; s++)
        n += (uint32_t)st.n_state[s];
    return n;
}

/* Frees record ref as postprocd does after a final (schedulerd's FINISHED first). */
static int free_record(struct rs_pipe *p, struct rs_table_ref ref)
{
    RS_CHECK(rs_table_transition(p->requests, ref, RS_PIPE_REQ_WAITING, RS_PIPE_REQ_FINISHED) ==
             RS_OK);
    RS_CHECK(rs_arena_free_record(p->tokens, p->requests, ref, RS_PIPE_REQ_FINISHED) == RS_OK);
    return 0;
}

static int tokenize(const char *model, const char *text, int32_t *ids, size_t cap, size_t *n)
{
    rs_vocab *v;
    rs_tokenizer *t;
    char err[256];
    RS_CHECK(rs_vocab_load_file(model, &v, err, sizeof(err)) == RS_OK);
    RS_CHECK(rs_tokenizer_create(v, &t) == RS_OK);
    RS_CHECK(rs_tokenizer_encode(t, text, strlen(text),
                                 RS_TOKENIZE_ADD_SPECIAL | RS_TOKENIZE_PARSE_SPECIAL, ids, cap,
                                 n) == RS_OK);
    rs_tokenizer_destroy(&t);
    rs_vocab_destroy(&v);
    return 0;
}

static const char PROMPT[] = "Once upon a time, there was a little girl named Lily.";

/* Every generate field lands in the record; the prompt is the vocab's tokenization. */
static int check_full_record(struct env *e, const struct rs_wire_ack *ack, struct rs_table_ref ref)
{
    int32_t want[N_CTX], got[N_CTX];
    size_t n_want;
    uint32_t state, n_got;
    void *rec;
    if (tokenize(e->in.model, PROMPT, want, N_CTX, &n_want) != 0)
        return 1;
    RS_CHECK(rs_table_get(e->sched->requests, ref, &state, &rec) == RS_OK);
    const struct rs_pipe_req *r = rec;
    RS_CHECK(state == RS_PIPE_REQ_WAITING);
    RS_CHECK(ack->prompt_tokens == n_want && r->n_prompt == n_want && ack->seed == 42);
    RS_CHECK(r->handle == ack->handle && ack->handle >= 1);
    RS_CHECK(strcmp(r->id, "full") == 0 && r->client_len == 2 && memcmp(r->client, "c1", 2) == 0);
    RS_CHECK(r->flags == (RS_PIPE_F_STREAM | RS_PIPE_F_IGNORE_EOS) && r->max_tokens == 20);
    RS_CHECK(r->priority == -3 && r->sampling.seed == 42 && r->sampling.n_logprobs == 3);
    RS_CHECK(r->sampling.temperature == 0.75f && r->sampling.top_p == 0.9f &&
             r->sampling.top_k == 40 && r->sampling.min_p == 0.05f &&
             r->sampling.repetition_penalty == 1.1f && r->sampling.presence_penalty == 0.5f &&
             r->sampling.frequency_penalty == -0.5f);
    RS_CHECK(r->n_stop == 2 && r->stop_len[0] == 7 && memcmp(r->stop[0], "The end", 7) == 0 &&
             r->stop_len[1] == 2 && memcmp(r->stop[1], "\n\n", 2) == 0);
    RS_CHECK(r->n_stop_ids == 2 && r->stop_ids[0] == 13 && r->stop_ids[1] == 2);
    RS_CHECK(atomic_load(&r->finish) == 0 && r->run_slot == RS_PIPE_NO_SLOT);
    RS_CHECK(r->arrival_ns != 0 && r->arrival_ns <= r->accepted_ns);
    RS_CHECK(rs_arena_len(e->sched->tokens, ref, &n_got) == RS_OK && n_got == n_want);
    RS_CHECK(rs_arena_read(e->sched->tokens, ref, 0, N_CTX, got, &n_got) == RS_OK);
    RS_CHECK(n_got == n_want && memcmp(got, want, n_want * sizeof(int32_t)) == 0);
    return 0;
}

/* A generate that sets every field away from its default. */
static int send_full(struct fx_client *c)
{
    struct rs_wire_client_msg m;
    fx_generate(&m, "full", PROMPT);
    struct rs_wire_generate *g = &m.u.gen;
    static const uint32_t stop_ids[] = {13, 2};
    g->has |= RS_WIRE_GEN_MAX_TOKENS | RS_WIRE_GEN_TEMPERATURE | RS_WIRE_GEN_TOP_P |
              RS_WIRE_GEN_TOP_K | RS_WIRE_GEN_MIN_P | RS_WIRE_GEN_REPETITION_PENALTY |
              RS_WIRE_GEN_PRESENCE_PENALTY | RS_WIRE_GEN_FREQUENCY_PENALTY | RS_WIRE_GEN_SEED |
              RS_WIRE_GEN_STOP | RS_WIRE_GEN_STOP_TOKEN_IDS | RS_WIRE_GEN_IGNORE_EOS |
              RS_WIRE_GEN_LOGPROBS | RS_WIRE_GEN_STREAM | RS_WIRE_GEN_PRIORITY;
    g->max_tokens = 20, g->temperature = 0.75f, g->top_p = 0.9f, g->top_k = 40;
    g->min_p = 0.05f, g->repetition_penalty = 1.1f, g->presence_penalty = 0.5f;
    g->frequency_penalty = -0.5f, g->seed = 42, g->ignore_eos = true, g->logprobs = 3;
    g->stream = true, g->priority = -3, g->n_stop = 2, g->n_stop_ids = 2;
    g->stop[0] = (struct rs_wire_str){"The end", 7};
    g->stop[1] = (struct rs_wire_str){"\n\n", 2};
    memcpy(g->stop_ids, stop_ids, sizeof(stop_ids));
    return fx_send(c, &m);
}

static int test_generate_becomes_the_record_it_describes(void)
{
    struct env e;
    int rc = setup(&e, 16, NULL);
    if (rc != 0)
        return rc;
    struct fx_client c;
    RS_CHECK(fx_client_open(&e.in, "tokenizerd", "c1", &c) == 0 && send_full(&c) == 0);
    struct rs_wire_client_msg m;
    struct rs_wire_ack ack;
    struct rs_table_ref ref;
    RS_CHECK(expect_ack(&c, "full", &ack) == 0 && expect_ready(&e, &ref) == 0);
    RS_CHECK(check_full_record(&e, &ack, ref) == 0);

    /* Defaults: no seed (one is picked and reported), no max_tokens (the context's room). */
    fx_generate(&m, "empty", "");
    RS_CHECK(fx_send(&c, &m) == 0);
    RS_CHECK(expect_ack(&c, "empty", &ack) == 0 && expect_ready(&e, &ref) == 0);
    const struct rs_pipe_req *r = rs_pipe_req_at(e.sched, ref.index);
    RS_CHECK(ack.prompt_tokens == 1 && r->n_prompt == 1 && r->sampling.seed == ack.seed);
    RS_CHECK(r->max_tokens == N_CTX - 1 && r->flags == 0 && r->sampling.temperature == 1.0f);
    int32_t tok;
    uint32_t got;
    RS_CHECK(rs_arena_read(e.sched->tokens, ref, 0, 1, &tok, &got) == RS_OK && got == 1);
    RS_CHECK(tok == 1); /* stories260K's BOS: an empty prompt is BOS alone */

    /* prompt_ids are used exactly as given (no BOS added). */
    static const uint32_t ids[] = {400, 261, 378, 7, 300};
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_GENERATE;
    snprintf(m.id, sizeof(m.id), "ids");
    rs_wire_generate_init(&m.u.gen);
    m.u.gen.has = RS_WIRE_GEN_PROMPT_IDS | RS_WIRE_GEN_MAX_TOKENS;
    m.u.gen.prompt_ids = (struct rs_wire_ids){.n = 5, .vals = ids};
    m.u.gen.max_tokens = 1000; /* more than fits: the context's room wins */
    RS_CHECK(fx_send(&c, &m) == 0);
    RS_CHECK(expect_ack(&c, "ids", &ack) == 0 && expect_ready(&e, &ref) == 0);
    int32_t stored[8];
    RS_CHECK(rs_arena_read(e.sched->tokens, ref, 0, 8, stored, &got) == RS_OK && got == 5);
    for (int i = 0; i < 5; i++)
        RS_CHECK(stored[i] == (int32_t)ids[i]);
    RS_CHECK(rs_pipe_req_at(e.sched, ref.index)->max_tokens == N_CTX - 5);
    struct rs_metrics_block *mb = &e.sched->metrics->stage[RS_PIPE_STAGE_TOKENIZERD];
    /* tokenizerd counts a request just after its ack and doorbell (intake_us runs to the
     * ack), so the third count can trail the third ack by a moment */
    for (uint64_t end = rs_clock_ms() + 5000;
         atomic_load(&mb->hist[RS_H_TOK_INTAKE].count) < 3 && rs_clock_ms() < end;)
        usleep(1000);
    RS_CHECK(atomic_load(&mb->counter[RS_M_TOK_ACCEPTED]) == 3);
    RS_CHECK(atomic_load(&mb->hist[RS_H_TOK_INTAKE].count) == 3);
    fx_client_close(&c);
    return teardown(&e);
}

/* Hand-packed bad messages and the code each must get. */
static size_t pack_bad(int which, msgpack_sbuffer *sb, const char **id, enum rs_wire_code *code)
{
    msgpack_packer pk;
    msgpack_sbuffer_clear(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    *id = "bad";
    switch (which) {
    case 0: /* not msgpack at all */
        msgpack_sbuffer_write(sb, "\xc1\xc1garbage", 9);
        *id = "", *code = RS_WIRE_BAD_REQUEST;
        break;
    case 1: /* a map cut short */
        fx_pack_head(&pk, RS_WIRE_VERSION, "generate", "bad", 1);
        *code = RS_WIRE_BAD_REQUEST; /* the id was readable, so the error names it */
        break;
    case 2:
        fx_pack_head(&pk, RS_WIRE_VERSION, "generate", "bad", 2);
        fx_pack_str(&pk, "prompt"), fx_pack_str(&pk, "hi");
        fx_pack_str(&pk, "colour"), fx_pack_str(&pk, "blue");
        *code = RS_WIRE_UNKNOWN_FIELD;
        break;
    case 3:
        fx_pack_head(&pk, RS_WIRE_VERSION, "generate", "bad", 2);
        fx_pack_str(&pk, "prompt"), fx_pack_str(&pk, "hi");
        fx_pack_str(&pk, "max_tokens"), fx_pack_str(&pk, "ten");
        *code = RS_WIRE_WRONG_TYPE;
        break;
    case 4:
        fx_pack_head(&pk, RS_WIRE_VERSION + 1, "generate", "bad", 1);
        fx_pack_str(&pk, "prompt"), fx_pack_str(&pk, "hi");
        *id = "", *code = RS_WIRE_UNSUPPORTED_VERSION; /* nothing past 'v' is read */
        break;
    case 5:
        fx_pack_head(&pk, RS_WIRE_VERSION, "generate", "bad", 2);
        fx_pack_str(&pk, "prompt"), fx_pack_str(&pk, "hi");
        fx_pack_str(&pk, "top_p"), msgpack_pack_double(&pk, 1.5);
        *code = RS_WIRE_INVALID_PARAM;
        break;
    case 6:
        fx_pack_head(&pk, RS_WIRE_VERSION, "generate", "bad", 0);
        *code = RS_WIRE_MISSING_FIELD;
        break;
    case 7: /* the client asks tokenizerd for what postprocd does */
        fx_pack_head(&pk, RS_WIRE_VERSION, "resume", "bad", 1);
        fx_pack_str(&pk, "from_seq"), msgpack_pack_int(&pk, 0);
        *code = RS_WIRE_BAD_REQUEST;
        break;
    default: /* stop token id past the vocab */
        fx_pack_head(&pk, RS_WIRE_VERSION, "generate", "bad", 2);
        fx_pack_str(&pk, "prompt"), fx_pack_str(&pk, "hi");
        fx_pack_str(&pk, "stop_token_ids"), msgpack_pack_array(&pk, 1), msgpack_pack_int(&pk, 512);
        *code = RS_WIRE_INVALID_PARAM;
        break;
    }
    return sb->size;
}

/* A prompt of n repetitions of "Once upon a time " (tokenizes to more than N_CTX). */
static char *long_prompt(int n)
{
    static const char unit[] = "Once upon a time ";
    char *s = malloc(sizeof(unit) * (size_t)n + 1);
    s[0] = '\0';
    for (int i = 0; i < n; i++)
        strcat(s, unit);
    return s;
}

static int send_good(struct fx_client *good, int i)
{
    struct rs_wire_client_msg m;
    char id[16];
    snprintf(id, sizeof(id), "good-%d", i);
    fx_generate(&m, id, "Lily went to the park.");
    return fx_send(good, &m);
}

static int test_bad_requests_get_their_codes_while_good_ones_flow(void)
{
    struct env e;
    int rc = setup(&e, 32, NULL);
    if (rc != 0)
        return rc;
    struct fx_client bad, good, anon;
    RS_CHECK(fx_client_open(&e.in, "tokenizerd", "bad-client", &bad) == 0);
    RS_CHECK(fx_client_open(&e.in, "tokenizerd", "good-client", &good) == 0);
    RS_CHECK(fx_client_open(&e.in, "tokenizerd", NULL, &anon) == 0);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    int n_good = 0;
    for (int which = 0; which <= 8; which++) {
        const char *id;
        enum rs_wire_code code;
        size_t len = pack_bad(which, &sb, &id, &code);
        RS_CHECK(send_good(&good, n_good++) == 0);
        RS_CHECK(fx_send_raw(&bad, sb.data, len) == 0);
        RS_CHECK_MSG(expect_error(&bad, id, code) == 0, "bad message %d", which);
    }
    msgpack_sbuffer_destroy(&sb);
    struct rs_wire_client_msg m;
    char *text = long_prompt(200); /* ~800 tokens: over the 256-token context */
    fx_generate(&m, "long", text);
    RS_CHECK(fx_send(&bad, &m) == 0 && expect_error(&bad, "long", RS_WIRE_PROMPT_TOO_LONG) == 0);
    free(text);
    static uint32_t ids[N_CTX];
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_GENERATE;
    snprintf(m.id, sizeof(m.id), "long-ids");
    rs_wire_generate_init(&m.u.gen);
    m.u.gen.has = RS_WIRE_GEN_PROMPT_IDS;
    m.u.gen.prompt_ids = (struct rs_wire_ids){.n = N_CTX, .vals = ids};
    RS_CHECK(fx_send(&bad, &m) == 0);
    RS_CHECK(expect_error(&bad, "long-ids", RS_WIRE_PROMPT_TOO_LONG) == 0);
    fx_generate(&m, "both", "hi");
    m.u.gen.has |= RS_WIRE_GEN_PROMPT_IDS;
    m.u.gen.prompt_ids = (struct rs_wire_ids){.n = 2, .vals = ids};
    RS_CHECK(fx_send(&bad, &m) == 0 && expect_error(&bad, "both", RS_WIRE_INVALID_PARAM) == 0);
    /* Over the 2 MiB message limit: refused before decoding. */
    size_t big = RS_WIRE_CLIENT_MSG_MAX + 4096;
    char *blob = calloc(1, big);
    RS_CHECK(fx_send_raw(&bad, blob, big) == 0 && expect_error(&bad, "", RS_WIRE_TOO_LARGE) == 0);
    free(blob);
    /* A client without a routing id could never receive its output. */
    fx_generate(&m, "anon", "hi");
    RS_CHECK(fx_send(&anon, &m) == 0 && expect_error(&anon, "anon", RS_WIRE_BAD_REQUEST) == 0);
    for (int i = 0; i < n_good; i++) {
        char id[16];
        struct rs_wire_ack ack;
        snprintf(id, sizeof(id), "good-%d", i);
        RS_CHECK(expect_ack(&good, id, &ack) == 0);
    }
    RS_CHECK(count_published(e.sched) == (uint32_t)n_good);
    struct rs_metrics_block *mb = &e.sched->metrics->stage[RS_PIPE_STAGE_TOKENIZERD];
    RS_CHECK(atomic_load(&mb->counter[RS_M_TOK_ACCEPTED]) == (uint64_t)n_good);
    RS_CHECK(atomic_load(&mb->counter[RS_M_TOK_REJECTED]) == 14);
    fx_client_close(&bad);
    fx_client_close(&good);
    fx_client_close(&anon);
    return teardown(&e);
}

/*
 * Once a request's final was sent, its id may name a new request (different
 * content): the old record is released and a new one runs; the same content
 * is still a resend.
 */
static int reuse_after_final(struct env *e, struct fx_client *c)
{
    struct rs_wire_client_msg m;
    struct rs_wire_ack old, fresh, again;
    struct rs_table_ref ref;
    while (rs_pipe_door_recv(&e->doors, &door, 100) == RS_OK) {
    }
    fx_generate(&m, "reuse", "First story.");
    RS_CHECK(fx_send(c, &m) == 0 && expect_ack(c, "reuse", &old) == 0);
    RS_CHECK(expect_ready(e, &ref) == 0);
    RS_CHECK(rs_table_transition(e->sched->requests, ref, RS_PIPE_REQ_WAITING,
                                 RS_PIPE_REQ_FINISHED) == RS_OK);
    RS_CHECK(fx_send(c, &m) == 0 && expect_ack(c, "reuse", &again) == 0); /* a late resend */
    RS_CHECK(again.handle == old.handle);
    fx_generate(&m, "reuse", "Second story.");
    RS_CHECK(fx_send(c, &m) == 0 && expect_error(c, "reuse", RS_WIRE_DUPLICATE) == 0);
    struct rs_pipe_req *r = rs_pipe_req_at(e->sched, ref.index); /* postprocd sent the final */
    r->cursor[1] = r->cursor[0];
    r->cursor[1].final_sent = 1;
    atomic_store(&r->cursor_idx, 1);
    uint32_t before = count_published(e->sched);
    RS_CHECK(fx_send(c, &m) == 0 && expect_ack(c, "reuse", &fresh) == 0);
    RS_CHECK(fresh.handle > old.handle && count_published(e->sched) == before);
    uint32_t state;
    void *rec;
    RS_CHECK(rs_table_get(e->sched->requests, ref, &state, &rec) == RS_ESTALE); /* released */
    RS_CHECK(fx_send(c, &m) == 0 && expect_ack(c, "reuse", &again) == 0);
    RS_CHECK(again.handle == fresh.handle);
    return 0;
}

static int test_resend_is_acked_again_not_run_twice(void)
{
    struct env e;
    int rc = setup(&e, 16, NULL);
    if (rc != 0)
        return rc;
    struct fx_client c;
    RS_CHECK(fx_client_open(&e.in, "tokenizerd", "resender", &c) == 0);
    struct rs_wire_client_msg m;
    struct rs_wire_ack a1, a2, a3;
    struct rs_table_ref ref;
    fx_generate(&m, "r1", "The cat sat.");
    RS_CHECK(fx_send(&c, &m) == 0 && expect_ack(&c, "r1", &a1) == 0);
    RS_CHECK(fx_send(&c, &m) == 0 && expect_ack(&c, "r1", &a2) == 0);
    RS_CHECK(a1.handle == a2.handle && a1.seed == a2.seed && a1.prompt_tokens == a2.prompt_tokens);
    RS_CHECK(expect_ready(&e, &ref) == 0);
    RS_CHECK(rs_pipe_door_recv(&e.doors, &door, 200) == RS_EAGAIN); /* rung once */
    RS_CHECK(count_published(e.sched) == 1);
    /* Same id, different content, while the first is in flight. */
    fx_generate(&m, "r1", "The dog sat.");
    RS_CHECK(fx_send(&c, &m) == 0 && expect_error(&c, "r1", RS_WIRE_DUPLICATE) == 0);
    /* Another client may use the same request id: ids are per client. */
    struct fx_client other;
    RS_CHECK(fx_client_open(&e.in, "tokenizerd", "other", &other) == 0);
    fx_generate(&m, "r1", "The cat sat.");
    RS_CHECK(fx_send(&other, &m) == 0 && expect_ack(&other, "r1", &a3) == 0);
    RS_CHECK(a3.handle != a1.handle && count_published(e.sched) == 2);
    /* SIGKILL tokenizerd; the restarted one rebuilds its index from the table. */
    fx_daemon_kill(&e.tokd);
    RS_CHECK(fx_daemon_start(&e.in, "tokenizerd", &e.tokd, NULL) == 0);
    RS_CHECK(fx_daemon_ready(e.sched, RS_PIPE_TOKENIZERD, &e.tokd) == 0);
    RS_CHECK(fx_send(&c, &m) == 0 && expect_ack(&c, "r1", &a2) == 0);
    RS_CHECK(a2.handle == a1.handle && count_published(e.sched) == 2);
    /* Once the request is over and released, the id is free for a new request. */
    RS_CHECK(free_record(e.sched, ref) == 0);
    RS_CHECK(fx_send(&c, &m) == 0 && expect_ack(&c, "r1", &a2) == 0);
    RS_CHECK(a2.handle > a3.handle);
    struct rs_metrics_block *mb = &e.sched->metrics->stage[RS_PIPE_STAGE_TOKENIZERD];
    RS_CHECK(atomic_load(&mb->counter[RS_M_TOK_DUPLICATES]) >= 1);
    RS_CHECK(reuse_after_final(&e, &c) == 0);
    fx_client_close(&c);
    fx_client_close(&other);
    return teardown(&e);
}

static int test_full_table_answers_overloaded(void)
{
    struct env e;
    int rc = setup(&e, 4, NULL);
    if (rc != 0)
        return rc;
    struct fx_client c;
    RS_CHECK(fx_client_open(&e.in, "tokenizerd", "greedy", &c) == 0);
    struct rs_wire_client_msg m;
    struct rs_wire_ack ack;
    char id[16];
    for (int i = 0; i < 6; i++) {
        snprintf(id, sizeof(id), "q%d", i);
        fx_generate(&m, id, "A big dog.");
        RS_CHECK(fx_send(&c, &m) == 0);
    }
    for (int i = 0; i < 6; i++) {
        snprintf(id, sizeof(id), "q%d", i);
        RS_CHECK(i < 4 ? expect_ack(&c, id, &ack) == 0
                       : expect_error(&c, id, RS_WIRE_OVERLOADED) == 0);
    }
    RS_CHECK(count_published(e.sched) == 4);
    /* Room again after one is released: the retry is accepted. */
    struct rs_table_ref ref;
    RS_CHECK(expect_ready(&e, &ref) == 0 && free_record(e.sched, ref) == 0);
    fx_generate(&m, "q4", "A big dog.");
    RS_CHECK(fx_send(&c, &m) == 0 && expect_ack(&c, "q4", &ack) == 0);
    struct rs_metrics_block *mb = &e.sched->metrics->stage[RS_PIPE_STAGE_TOKENIZERD];
    RS_CHECK(atomic_load(&mb->counter[RS_M_TOK_OVERLOADED]) == 2);
    fx_client_close(&c);
    return teardown(&e);
}

/* A hello carrying secret (16+ printable bytes); returns the reply's type, or -1 on silence. */
static int say_hello(struct fx_client *c, const char *secret, enum rs_wire_code *code)
{
    struct rs_wire_client_msg m;
    struct rs_wire_server_msg r;
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_HELLO;
    m.u.hello.secret = (struct rs_wire_str){secret, (uint32_t)strlen(secret)};
    if (fx_send(c, &m) != 0 || fx_recv(c, 300, &r) != 0)
        return -1;
    *code = r.type == RS_WIRE_T_ERROR ? r.u.error.code : RS_WIRE_OK;
    return (int)r.type;
}

/* Connects under rid and says hello until answered, on a fresh connection each try. */
static int reconnect_hello(struct env *e, const char *rid, const char *secret,
                           struct fx_client *c, enum rs_wire_code *code)
{
    for (int i = 0; i < 50; i++) {
        RS_CHECK(fx_client_open(&e->in, "tokenizerd", rid, c) == 0);
        if (say_hello(c, secret, code) != -1)
            return 0;
        fx_client_close(c);
    }
    RS_CHECK_MSG(0, "no answer to hello under '%s'", rid);
    return 1;
}

static uint64_t tokenized(const struct env *e)
{
    return atomic_load(
        &e->sched->metrics->stage[RS_PIPE_STAGE_TOKENIZERD].hist[RS_H_TOK_TOKENIZE].count);
}

/*
 * One client cannot take every request slot: with --owner-share 50 of an
 * 8-record table, a flooding client gets 4 and then `overloaded`, while a
 * second client (same uid, its own secret) still gets its 4. A prompt over
 * the share is refused before it is tokenized (the tokenize histogram's
 * count does not move, even for a 1 MiB prompt).
 */
static int test_one_client_gets_its_share_before_tokenizing(void)
{
    static const char *const half[] = {"--owner-share", "50", NULL};
    struct env e;
    int rc = setup(&e, 8, half);
    if (rc != 0)
        return rc;
    struct fx_client flood, calm;
    struct rs_wire_client_msg m;
    struct rs_wire_ack ack;
    enum rs_wire_code code;
    char id[16];
    RS_CHECK(fx_client_open(&e.in, "tokenizerd", "flood", &flood) == 0);
    RS_CHECK(fx_client_open(&e.in, "tokenizerd", "calm", &calm) == 0);
    for (int i = 0; i < 6; i++) {
        snprintf(id, sizeof(id), "f%d", i);
        fx_generate(&m, id, "A big dog.");
        RS_CHECK(fx_send(&flood, &m) == 0);
        RS_CHECK(i < 4 ? expect_ack(&flood, id, &ack) == 0
                       : expect_error(&flood, id, RS_WIRE_OVERLOADED) == 0);
    }
    uint64_t before = tokenized(&e);
    static char big[RS_WIRE_PROMPT_MAX];
    memset(big, 'a', sizeof(big));
    fx_generate(&m, "huge", "");
    m.u.gen.prompt = (struct rs_wire_str){big, sizeof(big)};
    RS_CHECK(fx_send(&flood, &m) == 0 && expect_error(&flood, "huge", RS_WIRE_OVERLOADED) == 0);
    RS_CHECK_MSG(tokenized(&e) == before, "a refused prompt was tokenized");
    RS_CHECK(say_hello(&calm, "calm-client-secret-0001", &code) == RS_WIRE_T_WELCOME);
    for (int i = 0; i < 4; i++) {
        snprintf(id, sizeof(id), "c%d", i);
        fx_generate(&m, id, "A big dog.");
        RS_CHECK(fx_send(&calm, &m) == 0 && expect_ack(&calm, id, &ack) == 0);
    }
    RS_CHECK(count_published(e.sched) == 8);
    fx_client_close(&flood);
    fx_client_close(&calm);
    return teardown(&e);
}

/*
 * The routing id is not a credential. While the owner is connected a second
 * connection under its routing id is ignored (nothing it sends arrives);
 * once the owner left, another owner's hello under it is refused
 * (`forbidden`: the owner's request is still held), and its cancel of the
 * owner's request, or a generate reusing the id, too: the request keeps
 * running. The owner, back with its secret, can still cancel it.
 */
static int test_another_owner_cannot_cancel_or_take_the_routing_id(void)
{
    struct env e;
    int rc = setup(&e, 8, NULL);
    if (rc != 0)
        return rc;
    struct fx_client owner, thief;
    struct rs_wire_client_msg m;
    struct rs_wire_server_msg r;
    struct rs_wire_ack ack;
    struct rs_table_ref ref;
    enum rs_wire_code code;
    const char *mine = "owner-secret-0123456789", *theirs = "thief-secret-9876543210";
    RS_CHECK(fx_client_open(&e.in, "tokenizerd", "victim", &owner) == 0);
    RS_CHECK(say_hello(&owner, mine, &code) == RS_WIRE_T_WELCOME);
    fx_generate(&m, "x", "A big dog.");
    RS_CHECK(fx_send(&owner, &m) == 0 && expect_ack(&owner, "x", &ack) == 0);
    RS_CHECK(expect_ready(&e, &ref) == 0);
    RS_CHECK(fx_client_open(&e.in, "tokenizerd", "victim", &thief) == 0);
    RS_CHECK_MSG(say_hello(&thief, theirs, &code) == -1, "a second connection under a live "
                 "routing id was answered");
    fx_client_close(&thief);
    fx_client_close(&owner);
    /* A connection made before libzmq saw the owner's close stays ignored: reconnect. */
    RS_CHECK(reconnect_hello(&e, "victim", theirs, &thief, &code) == 0);
    RS_CHECK_MSG(code == RS_WIRE_FORBIDDEN, "takeover hello answered %s", rs_wire_code_name(code));
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_CANCEL;
    snprintf(m.id, sizeof(m.id), "x");
    RS_CHECK(fx_send(&thief, &m) == 0 && expect_error(&thief, "x", RS_WIRE_FORBIDDEN) == 0);
    fx_generate(&m, "x", "Something else.");
    RS_CHECK(fx_send(&thief, &m) == 0 && expect_error(&thief, "x", RS_WIRE_FORBIDDEN) == 0);
    RS_CHECK(atomic_load(&rs_pipe_req_at(e.sched, ref.index)->finish) == 0);
    fx_client_close(&thief);
    RS_CHECK(reconnect_hello(&e, "victim", mine, &owner, &code) == 0 && code == RS_WIRE_OK);
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_CANCEL;
    snprintf(m.id, sizeof(m.id), "x");
    RS_CHECK(fx_send(&owner, &m) == 0);
    for (int i = 0; i < 300 && atomic_load(&rs_pipe_req_at(e.sched, ref.index)->finish) == 0; i++)
        (void)fx_recv(&owner, 10, &r);
    uint32_t w = atomic_load(&rs_pipe_req_at(e.sched, ref.index)->finish);
    RS_CHECK(rs_pipe_finish_reason(w) == RS_WIRE_FINISH_ABORT);
    fx_client_close(&owner);
    return teardown(&e);
}

/* Sends n generates asking for 20 logprobs each (ids prefix%d); counts acks and overloads. */
static int logprob_flood(struct fx_client *c, const char *prefix, int n, int *acks, int *over)
{
    struct rs_wire_client_msg m;
    struct rs_wire_server_msg r;
    char id[32];
    *acks = *over = 0;
    for (int i = 0; i < n; i++) {
        snprintf(id, sizeof(id), "%s%d", prefix, i);
        fx_generate(&m, id, "A big dog.");
        m.u.gen.logprobs = 20;
        m.u.gen.has |= RS_WIRE_GEN_LOGPROBS;
        RS_CHECK(fx_send(c, &m) == 0 && fx_recv(c, 3000, &r) == 0);
        RS_CHECK_MSG(r.type == RS_WIRE_T_ACK ||
                         (r.type == RS_WIRE_T_ERROR && r.u.error.code == RS_WIRE_OVERLOADED),
                     "'%s': %s", id, rs_wire_type_name(r.type));
        *acks += r.type == RS_WIRE_T_ACK;
        *over += r.type == RS_WIRE_T_ERROR;
    }
    return 0;
}

/*
 * Logprob space is reserved at admission, never taken mid-generation: with
 * 512 records of a 256-token context the logprob region (16 MiB, 2048
 * chunks) holds 341 requests' worst case (6 chunks each), not 512. One
 * client asking for 300 such requests gets 256 (beyond its 25% share only
 * while a share stays free) and `overloaded` for the rest; another client
 * still gets the 85 that fit, and the reservations never exceed the region.
 */
static int test_logprob_space_is_reserved_at_admission(void)
{
    static const char *const quarter[] = {"--owner-share", "25", NULL};
    struct env e;
    int rc = setup(&e, 512, quarter);
    if (rc != 0)
        return rc;
    struct fx_client flood, calm;
    enum rs_wire_code code;
    int acks, over;
    RS_CHECK(fx_client_open(&e.in, "tokenizerd", "lp-flood", &flood) == 0);
    RS_CHECK(fx_client_open(&e.in, "tokenizerd", "lp-calm", &calm) == 0);
    RS_CHECK(logprob_flood(&flood, "f", 300, &acks, &over) == 0);
    RS_CHECK_MSG(acks == 256 && over == 44, "flood: %d accepted, %d overloaded", acks, over);
    RS_CHECK(say_hello(&calm, "calm-client-secret-0002", &code) == RS_WIRE_T_WELCOME);
    RS_CHECK(logprob_flood(&calm, "c", 86, &acks, &over) == 0);
    RS_CHECK_MSG(acks == 85 && over == 1, "second client: %d accepted, %d overloaded", acks, over);
    uint64_t chunks = 0;
    for (uint32_t i = 0; i < 512; i++) {
        uint32_t state, gen, inc;
        rs_table_peek(e.sched->requests, i, &state, &gen, &inc);
        const struct rs_pipe_req *r = rs_pipe_req_at(e.sched, i);
        if (state >= RS_TABLE_USER)
            chunks += rs_pipe_lp_chunks_for(r->max_tokens, (uint32_t)r->sampling.n_logprobs);
    }
    RS_CHECK_MSG(chunks <= rs_pipe_lp_pool_chunks(&e.sched->cfg), "%llu chunks reserved of %u",
                 (unsigned long long)chunks, rs_pipe_lp_pool_chunks(&e.sched->cfg));
    fx_client_close(&flood);
    fx_client_close(&calm);
    return teardown(&e);
}

static int test_cancel_sets_the_finish_word_and_rings(void)
{
    struct env e;
    int rc = setup(&e, 8, NULL);
    if (rc != 0)
        return rc;
    struct fx_client c;
    RS_CHECK(fx_client_open(&e.in, "tokenizerd", "canceller", &c) == 0);
    struct rs_wire_client_msg m;
    struct rs_wire_ack ack;
    struct rs_table_ref ref;
    fx_generate(&m, "x", "Tom had a ball.");
    RS_CHECK(fx_send(&c, &m) == 0 && expect_ack(&c, "x", &ack) == 0 && expect_ready(&e, &ref) == 0);
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_CANCEL;
    snprintf(m.id, sizeof(m.id), "x");
    RS_CHECK(fx_send(&c, &m) == 0);
    RS_CHECK(rs_pipe_door_recv(&e.doors, &door, 3000) == RS_OK);
    RS_CHECK(door.kind == RS_WIRE_DOOR_CANCEL && door.u.cancel.slot == ref.index &&
             door.u.cancel.gen == ref.gen && door.u.cancel.reason == RS_WIRE_CANCEL_CLIENT);
    uint32_t w = atomic_load(&rs_pipe_req_at(e.sched, ref.index)->finish);
    RS_CHECK(rs_pipe_finish_reason(w) == RS_WIRE_FINISH_ABORT &&
             rs_pipe_finish_who(w) == RS_PIPE_STAGE_TOKENIZERD);
    snprintf(m.id, sizeof(m.id), "nobody");
    RS_CHECK(fx_send(&c, &m) == 0 && expect_error(&c, "nobody", RS_WIRE_NOT_FOUND) == 0);
    m.type = RS_WIRE_T_HELLO;
    m.id[0] = '\0';
    struct rs_wire_server_msg w2;
    RS_CHECK(fx_send(&c, &m) == 0 && fx_recv(&c, 3000, &w2) == 0 && w2.type == RS_WIRE_T_WELCOME);
    fx_client_close(&c);
    return teardown(&e);
}

/* --listen without CURVE is refused at start; with it, only listed keys get through. */
static int test_tcp_needs_curve_and_refuses_unlisted_keys(void)
{
    struct env e;
    struct fx_curve k;
    int rc = fx_inst_init(&e.in, MODEL, N_CTX, 8);
    if (rc != 0)
        return rc;
    RS_CHECK(fx_curve_setup(&k) == 0);
    const char *plain[] = {"--listen", k.listen, NULL};
    RS_CHECK(fx_daemon_start(&e.in, "tokenizerd", &e.tokd, plain) == 0);
    RS_CHECK(fx_daemon_wait(&e.tokd) == 2); /* refused before touching anything */
    fx_inst_fini(&e.in);
    RS_CHECK(setup(&e, 8, k.args) == 0);
    struct fx_client in, out;
    RS_CHECK(fx_curve_client(&e.in, &k, 1, "remote", &in) == 0);
    RS_CHECK(fx_curve_client(&e.in, &k, 0, "remote", &out) == 0);
    struct rs_wire_client_msg m;
    struct rs_wire_server_msg reply;
    fx_generate(&m, "remote-1", "Hello");
    RS_CHECK(fx_send(&in, &m) == 0);
    struct rs_wire_ack ack;
    RS_CHECK(expect_ack(&in, "remote-1", &ack) == 0);
    struct rs_table_ref ref;
    RS_CHECK(expect_ready(&e, &ref) == 0);
    RS_CHECK(rs_pipe_req_at(e.sched, ref.index)->flags & RS_PIPE_F_TCP);
    /* The unlisted key never completes the handshake: nothing it sends arrives. */
    rs_zsock_send(out.s, "x", 1);
    RS_CHECK(fx_recv(&out, 1000, &reply) != 0);
    RS_CHECK(count_published(e.sched) == 1);
    fx_client_close(&in);
    fx_client_close(&out);
    return teardown(&e);
}

/* --group: the runtime directory is group-enterable (0750), sockets 0660. */
static int test_group_option_opens_the_rundir_to_a_group(void)
{
    struct env e;
    struct group *gr = getgrgid(getegid());
    RS_CHECK(gr != NULL);
    char group[64];
    snprintf(group, sizeof(group), "%s", gr->gr_name);
    int rc = fx_inst_init(&e.in, MODEL, N_CTX, 8);
    if (rc != 0)
        return rc;
    /* A fresh directory that the daemon creates itself. */
    snprintf(e.in.rundir + strlen(e.in.rundir), sizeof(e.in.rundir) - strlen(e.in.rundir), "-g");
    const char *extra[] = {"--group", group, NULL};
    RS_CHECK(fx_daemon_start(&e.in, "tokenizerd", &e.tokd, extra) == 0);
    struct rs_pipe *p = fx_open(&e.in, RS_PIPE_STAGE_SCHEDULERD);
    RS_CHECK(p != NULL && fx_daemon_ready(p, RS_PIPE_TOKENIZERD, &e.tokd) == 0);
    struct stat st;
    char sock[300];
    RS_CHECK(stat(e.in.rundir, &st) == 0);
    RS_CHECK_MSG((st.st_mode & 07777) == 0750 && st.st_gid == gr->gr_gid, "mode %o gid %u",
                 (unsigned)(st.st_mode & 07777), (unsigned)st.st_gid);
    snprintf(sock, sizeof(sock), "%s/tokenizerd.sock", e.in.rundir);
    RS_CHECK(stat(sock, &st) == 0 && (st.st_mode & 0777) == 0660);
    RS_CHECK(fx_daemon_stop(&e.tokd) == 0);
    rs_pipe_close(&p);
    fx_inst_fini_ex(&e.in, 1);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_generate_becomes_the_record_it_describes),
    RS_TEST(test_bad_requests_get_their_codes_while_good_ones_flow),
    RS_TEST(test_resend_is_acked_again_not_run_twice),
    RS_TEST(test_full_table_answers_overloaded),
    RS_TEST(test_cancel_sets_the_finish_word_and_rings),
    RS_TEST(test_one_client_gets_its_share_before_tokenizing),
    RS_TEST(test_logprob_space_is_reserved_at_admission),
    RS_TEST(test_another_owner_cannot_cancel_or_take_the_routing_id),
    RS_TEST(test_tcp_needs_curve_and_refuses_unlisted_keys),
    RS_TEST(test_group_option_opens_the_rundir_to_a_group),
};
RS_TEST_MAIN(cases)

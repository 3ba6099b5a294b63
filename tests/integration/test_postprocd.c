/* SPDX-License-Identifier: MIT */
/*
 * The real postprocd binary driven alone: the test opens the instance as
 * tokenizerd (commits request records), schedulerd (moves them to RUNNING
 * and FINISHED, receives cancel doorbells) and launcherd (appends output
 * tokens and logprobs, rings tokens_ready — or not: a lost doorbell must
 * cost only a tick), and reads the output as a ZeroMQ client. Output tokens
 * are stories260K's published greedy ids plus byte tokens that split UTF-8
 * characters. Proves: one delta per token with seq = output index and text
 * equal to the one-shot detokenization; stop strings split across tokens
 * end the request and never appear; a SIGKILL mid-stream followed by a
 * restart resends at most the last delta, with the same seq and content;
 * resume replays byte-identical messages; an unreachable client times out;
 * logprobs travel with their tokens; client mistakes get error replies.
 */
#include <math.h>
#include <unistd.h>

#include "common/detok.h"
#include "common/vocab.h"
#include "ipc/pipeline_logprob.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_owner.h"
#include "ipc/pipeline_req.h"
#include "launcherd/engine/sampler.h"
#include "tests/integration/front_fixture.h"

#define MODEL "stories260K.gguf"
#define N_CTX 512
#define BOS 1
#define MAX_OUT 300
#define MAX_MSGS 400

struct env {
    struct fx_inst in;
    struct rs_pipe *tok, *sched, *lau; /* the test's three roles */
    struct rs_pipe_doors doors;        /* schedulerd's inbox; rings postprocd */
    struct fx_daemon post;
    rs_vocab *vocab;
    int32_t out[MAX_OUT];              /* output ids every request generates */
    uint32_t n_out;
};

static struct rs_wire_door door; /* ~20 KiB */

/* Greedy ids of the published stories260K output, then "é世" as byte tokens (UTF-8 split). */
static int load_outputs(struct env *e)
{
    char path[480];
    if (rs_test_refdata("expected/stories260K.greedy-n256.ids", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    FILE *f = fopen(path, "r");
    RS_CHECK(f != NULL);
    int v;
    while (e->n_out < 256 && fscanf(f, "%d", &v) == 1)
        e->out[e->n_out++] = v;
    fclose(f);
    RS_CHECK(e->n_out == 256);
    static const unsigned char tail[] = {0xc3, 0xa9, 0xe4, 0xb8, 0x96};
    for (size_t i = 0; i < sizeof(tail); i++)
        e->out[e->n_out++] = 3 + tail[i]; /* <0xXX> byte tokens are ids 3..258 */
    return 0;
}

/* Starts postprocd (with RS_FAILPOINT=failpoint when not NULL) and waits until it is ready. */
static int start_post(struct env *e, const char *const *extra, const char *failpoint)
{
    if (failpoint != NULL)
        setenv("RS_FAILPOINT", failpoint, 1);
    int rc = fx_daemon_start(&e->in, "postprocd", &e->post, extra);
    unsetenv("RS_FAILPOINT");
    RS_CHECK(rc == 0);
    return fx_daemon_ready(e->sched, RS_PIPE_POSTPROCD, &e->post);
}

static int setup_model(struct env *e, const char *model, uint32_t n_ctx,
                       const char *const *extra)
{
    char err[256];
    memset(e, 0, sizeof(*e));
    int rc = fx_inst_init(&e->in, model, n_ctx, 16);
    if (rc == 0)
        rc = load_outputs(e);
    if (rc != 0)
        return rc;
    RS_CHECK(rs_vocab_load_file(e->in.model, &e->vocab, err, sizeof(err)) == RS_OK);
    RS_CHECK((e->tok = fx_open(&e->in, RS_PIPE_STAGE_TOKENIZERD)) != NULL);
    RS_CHECK((e->sched = fx_open(&e->in, RS_PIPE_STAGE_SCHEDULERD)) != NULL);
    RS_CHECK((e->lau = fx_open(&e->in, RS_PIPE_STAGE_LAUNCHERD)) != NULL);
    RS_CHECK(rs_pipe_doors_open(&e->doors, e->in.zctx, e->in.rundir, RS_PIPE_STAGE_SCHEDULERD) ==
             RS_OK);
    return start_post(e, extra, NULL);
}

static int setup(struct env *e, const char *const *extra)
{
    return setup_model(e, MODEL, N_CTX, extra);
}

static int teardown(struct env *e)
{
    int status = fx_daemon_stop(&e->post);
    if (status != 0)
        fx_daemon_dump_log(&e->post);
    rs_pipe_doors_close(&e->doors);
    rs_pipe_close(&e->tok);
    rs_pipe_close(&e->sched);
    rs_pipe_close(&e->lau);
    rs_vocab_destroy(&e->vocab);
    fx_inst_fini_ex(&e->in, status == 0);
    return status == 0 ? 0 : 1;
}

/* --- the test as tokenizerd, schedulerd and launcherd -------------------------------------- */

struct req_opts {
    int stream, tcp;
    const char *key;    /* tcp: the client's CURVE public key (its owner), NULL over ipc */
    const char *secret; /* the secret of the owner's hello, NULL = none */
    const char *stops[2];
    int n_logprobs;
};

/* Commits a request (prompt: BOS) from client `client` as tokenizerd does, and runs it. */
static int make_request(struct env *e, const char *id, const char *client,
                        const struct req_opts *o, struct rs_table_ref *ref)
{
    void *rec;
    RS_CHECK(rs_table_claim(e->tok->requests, ref, &rec) == RS_OK);
    struct rs_pipe_req *r = rec;
    memset(r, 0, sizeof(*r));
    snprintf(r->id, sizeof(r->id), "%s", id);
    r->client_len = (uint8_t)strlen(client);
    memcpy(r->client, client, r->client_len);
    /* the owner tokenizerd would record: this process's uid (ipc) or the client's CURVE key
     * (tcp), no secret: the test clients' hello carries none */
    struct rs_pipe_conn cred = {.tcp = o->tcp, .uid = (uint32_t)getuid()};
    if (o->key != NULL)
        snprintf(cred.key, sizeof(cred.key), "%s", o->key);
    struct rs_pipe_owner owner;
    rs_pipe_owner_make(&cred, o->secret, o->secret != NULL ? strlen(o->secret) : 0, &owner);
    memcpy(r->owner, owner.d, sizeof(r->owner));
    r->flags = (o->stream ? RS_PIPE_F_STREAM : 0) | (o->tcp ? RS_PIPE_F_TCP : 0);
    r->n_prompt = 1;
    r->max_tokens = N_CTX - 1;
    rs_sampling_params_default(&r->sampling);
    r->sampling.n_logprobs = o->n_logprobs;
    for (int i = 0; i < 2 && o->stops[i] != NULL; i++) {
        r->stop_len[i] = (uint16_t)strlen(o->stops[i]);
        memcpy(r->stop[i], o->stops[i], r->stop_len[i]);
        r->n_stop++;
    }
    r->run_slot = RS_PIPE_NO_SLOT;
    r->arrival_ns = r->accepted_ns = rs_clock_ns();
    int32_t bos = BOS;
    RS_CHECK(rs_arena_list_init(e->tok->tokens, *ref) == RS_OK);
    RS_CHECK(rs_arena_append(e->tok->tokens, *ref, &bos, 1) == RS_OK);
    RS_CHECK(rs_arena_seal(e->tok->tokens, *ref) == RS_OK);
    r->handle = atomic_fetch_add(&e->tok->shared->next_handle, 1) + 1;
    RS_CHECK(rs_table_publish(e->tok->requests, *ref, RS_PIPE_REQ_WAITING) == RS_OK);
    RS_CHECK(rs_table_transition(e->sched->requests, *ref, RS_PIPE_REQ_WAITING,
                                 RS_PIPE_REQ_RUNNING) == RS_OK);
    r->scheduled_ns = r->accepted_ns + 3000000; /* known timings for the final's figures */
    return 0;
}

/* Appends output tokens [from, to) of e->out as launcherd does; rings postprocd if asked. */
static int append(struct env *e, struct rs_table_ref ref, uint32_t from, uint32_t to, int ring)
{
    struct rs_pipe_req *r = rs_pipe_req_at(e->lau, ref.index);
    if (to > from)
        RS_CHECK(rs_arena_append(e->lau->tokens, ref, e->out + from, to - from) == RS_OK);
    if (from == 0 && to > 0)
        atomic_store(&r->first_token_ns, r->accepted_ns + 5000000);
    if (ring) {
        memset(&door, 0, sizeof(door));
        door.kind = RS_WIRE_DOOR_TOKENS_READY;
        door.n_entries = 1;
        door.entries[0] = (struct rs_wire_door_tok){ref.index, ref.gen, to};
        RS_CHECK(rs_pipe_door_send(&e->doors, RS_PIPE_STAGE_POSTPROCD, &door) == RS_OK);
    }
    return 0;
}

/* Ends a request as schedulerd does: finish word (unless set), timestamps, FINISHED. */
static int finish(struct env *e, struct rs_table_ref ref, uint32_t word)
{
    struct rs_pipe_req *r = rs_pipe_req_at(e->sched, ref.index);
    rs_pipe_finish_set(r, word);
    r->n_cached = 16;
    r->finished_ns = r->accepted_ns + 50000000;
    RS_CHECK(rs_table_transition(e->sched->requests, ref, RS_PIPE_REQ_RUNNING,
                                 RS_PIPE_REQ_FINISHED) == RS_OK);
    rs_pipe_door_ring(&e->doors, RS_PIPE_STAGE_POSTPROCD, RS_WIRE_DOOR_WAKE, 0, 0);
    return 0;
}

static int record_state(const struct env *e, struct rs_table_ref ref)
{
    uint32_t state;
    void *rec;
    return rs_table_get(e->sched->requests, ref, &state, &rec) == RS_OK ? (int)state : -1;
}

/* Waits until ref's record is freed (postprocd released it). */
static int wait_freed(const struct env *e, struct rs_table_ref ref, int ms)
{
    for (int i = 0; i < ms / 5; i++) {
        if (record_state(e, ref) < 0)
            return 0;
        usleep(5000);
    }
    return 1;
}

/* The one-shot detokenization of BOS + out[0..n): what the client must end up with. */
static size_t one_shot(const struct env *e, uint32_t n, char *text, size_t cap)
{
    int32_t ids[MAX_OUT + 1];
    ids[0] = BOS;
    memcpy(ids + 1, e->out, n * sizeof(int32_t));
    size_t len = 0;
    if (rs_detok_decode(e->vocab, ids, n + 1, 0, text, cap, &len) != RS_OK)
        return (size_t)-1;
    return len;
}

/* --- the client side: one request's output as received ------------------------------------ */

struct rx {
    const char *id;
    char text[16384];
    size_t len;
    size_t seq_off[MAX_MSGS + 1]; /* text offset where message seq starts */
    uint32_t toks[MAX_OUT];
    uint32_t n_toks;
    uint64_t next;                 /* next expected seq */
    int final;                     /* final received */
    struct rs_wire_final fin;      /* its scalar fields (views not kept) */
    uint32_t repeats, gaps, resumes, max_per_msg;
    uint32_t bad_repeats;          /* repeats of other than the last message, unasked */
    uint64_t resumed_at, resumed_ms; /* next seq and time of the last resume sent */
    struct rs_wire_logprob lps[MAX_OUT];
    uint8_t *raw[MAX_MSGS + 1];    /* raw bytes of each message (for replay comparison) */
    size_t raw_len[MAX_MSGS + 1];
};

static void rx_init(struct rx *x, const char *id)
{
    memset(x, 0, sizeof(*x));
    x->id = id;
}

static void rx_fini(struct rx *x)
{
    for (int i = 0; i <= MAX_MSGS; i++)
        free(x->raw[i]);
}

/* Takes one delta or final of this request. 0, or 1 when it breaks a rule. */
static int rx_take(struct rx *x, const struct fx_client *c, const struct rs_wire_server_msg *m)
{
    const struct rs_wire_delta *d = m->type == RS_WIRE_T_FINAL ? &m->u.final.out : &m->u.delta;
    RS_CHECK(d->seq <= MAX_MSGS && d->tokens.n <= MAX_OUT);
    if (d->seq < x->next) { /* a repeat: must be the very same message */
        RS_CHECK_MSG(x->raw[d->seq] != NULL && x->raw_len[d->seq] == c->len &&
                     memcmp(x->raw[d->seq], c->buf, c->len) == 0, "repeat of seq %llu differs",
                     (unsigned long long)d->seq);
        x->repeats++;
        if (x->resumes == 0 && d->seq + 1 != x->next) {
            fprintf(stderr, "'%s': seq %llu repeated while %llu was the last received\n", x->id,
                    (unsigned long long)d->seq, (unsigned long long)x->next - 1);
            x->bad_repeats++;
        }
        return 0;
    }
    if (d->seq > x->next) {
        x->gaps++;
        return 0; /* the caller asks for a resume */
    }
    x->seq_off[d->seq] = x->len;
    RS_CHECK(x->len + d->text.len <= sizeof(x->text));
    memcpy(x->text + x->len, d->text.ptr, d->text.len);
    x->len += d->text.len;
    RS_CHECK(x->n_toks + d->tokens.n <= MAX_OUT);
    if (d->has_logprobs)
        RS_CHECK(rs_wire_lps_copy(&d->logprobs, x->lps + x->n_toks, MAX_OUT - x->n_toks) ==
                 d->tokens.n);
    x->n_toks += rs_wire_ids_copy(&d->tokens, x->toks + x->n_toks, MAX_OUT - x->n_toks);
    if (d->tokens.n > x->max_per_msg)
        x->max_per_msg = d->tokens.n;
    x->raw[d->seq] = malloc(c->len);
    memcpy(x->raw[d->seq], c->buf, c->len);
    x->raw_len[d->seq] = c->len;
    x->next++;
    if (m->type == RS_WIRE_T_FINAL) {
        x->final = 1;
        x->fin = m->u.final;
    }
    return 0;
}

static int send_resume(struct fx_client *c, const char *id, uint64_t from)
{
    struct rs_wire_client_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_RESUME;
    snprintf(m.id, sizeof(m.id), "%s", id);
    m.u.resume.from_seq = from;
    return fx_send(c, &m);
}

/* The secret the pumped client's hellos carry (NULL: none, like the other test clients). */
static const char *pump_secret;

static void send_hello_with(struct fx_client *c, const char *secret)
{
    struct rs_wire_client_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_HELLO;
    if (secret != NULL)
        m.u.hello.secret = (struct rs_wire_str){secret, (uint32_t)strlen(secret)};
    (void)fx_send(c, &m);
}

static void send_hello(struct fx_client *c)
{
    send_hello_with(c, pump_secret);
}

/* Receives for up to ms, routing messages to the rx of their id; gaps ask for a resume. */
static int pump(struct fx_client *c, struct rx **rxs, int n, int ms)
{
    struct rs_wire_server_msg m;
    uint64_t end = rs_clock_ms() + (uint64_t)ms, quiet_since = rs_clock_ms();
    while (rs_clock_ms() < end) {
        if (fx_recv(c, 10, &m) != 0) {
            /* Quiet: say hello again, as the client library does on a stall. A restarted
             * postprocd sends output only to a connection that said hello (PROTOCOL.md 3.3). */
            if (rs_clock_ms() - quiet_since >= 200) {
                send_hello(c);
                quiet_since = rs_clock_ms();
            }
            continue;
        }
        quiet_since = rs_clock_ms();
        if (m.type == RS_WIRE_T_WELCOME)
            continue; /* the answer to one of those hellos */
        RS_CHECK_MSG(m.type == RS_WIRE_T_DELTA || m.type == RS_WIRE_T_FINAL, "unexpected %s",
                     rs_wire_type_name(m.type));
        int k = 0;
        while (k < n && strcmp(rxs[k]->id, m.id) != 0)
            k++;
        RS_CHECK_MSG(k < n, "message for unknown request '%s'", m.id);
        uint32_t gaps = rxs[k]->gaps;
        RS_CHECK(rx_take(rxs[k], c, &m) == 0);
        /* One resume per gap: later messages of the same gap would only ask again. */
        struct rx *x = rxs[k];
        if (x->gaps != gaps && (x->resumes == 0 || x->resumed_at != x->next ||
                                rs_clock_ms() - x->resumed_ms > 300)) {
            x->resumes++;
            x->resumed_at = x->next;
            x->resumed_ms = rs_clock_ms();
            RS_CHECK(send_resume(c, x->id, x->next) == 0);
        }
    }
    return 0;
}

/* Pumps until every rx has its final (resuming an idle one every 500 ms), at most ms. */
static int pump_finals(struct fx_client *c, struct rx **rxs, int n, int ms)
{
    for (int waited = 0; waited < ms; waited += 100) {
        int done = 1;
        for (int k = 0; k < n; k++)
            done &= rxs[k]->final;
        if (done)
            return 0;
        if (waited > 0 && waited % 500 == 0)
            send_hello(c); /* first: a restarted postprocd answers only a bound connection */
        if (waited > 0 && waited % 500 == 0)
            for (int k = 0; k < n; k++)
                if (!rxs[k]->final) {
                    rxs[k]->resumes++;
                    RS_CHECK(send_resume(c, rxs[k]->id, rxs[k]->next) == 0);
                }
        RS_CHECK(pump(c, rxs, n, 100) == 0);
    }
    fprintf(stderr, "finals missing after %d ms\n", ms);
    return 1;
}

static int hello(struct fx_client *c)
{
    struct rs_wire_client_msg m;
    struct rs_wire_server_msg w;
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_HELLO;
    RS_CHECK(fx_send(c, &m) == 0 && fx_recv(c, 5000, &w) == 0 && w.type == RS_WIRE_T_WELCOME);
    RS_CHECK(w.u.welcome.server.len == 9 && memcmp(w.u.welcome.server.ptr, "postprocd", 9) == 0);
    return 0;
}

/* The text received equals the one-shot decode of the first n tokens, tokens included. */
static int check_output(const struct env *e, const struct rx *x, uint32_t n)
{
    static char want[16384];
    size_t len = one_shot(e, n, want, sizeof(want));
    RS_CHECK_MSG(x->len == len && memcmp(x->text, want, len) == 0,
                 "'%s': text differs: got %zu bytes, want %zu", x->id, x->len, len);
    RS_CHECK_MSG(x->n_toks == n, "'%s': %u tokens, want %u", x->id, x->n_toks, n);
    for (uint32_t i = 0; i < n; i++)
        RS_CHECK(x->toks[i] == (uint32_t)e->out[i]);
    RS_CHECK(x->fin.usage.prompt_tokens == 1 && x->fin.usage.completion_tokens == n);
    return 0;
}

/* --- tests --------------------------------------------------------------------------------- */

static int test_deltas_per_token_equal_one_shot_text(void)
{
    struct env e;
    const char *extra[] = {"--linger-ms", "300", NULL};
    int rc = setup(&e, extra);
    if (rc != 0)
        return rc;
    struct fx_client c;
    RS_CHECK(fx_client_open(&e.in, "postprocd", "reader", &c) == 0 && hello(&c) == 0);
    struct rs_table_ref a, b;
    struct req_opts so = {.stream = 1}, no = {.stream = 0};
    RS_CHECK(make_request(&e, "a", "reader", &so, &a) == 0);
    RS_CHECK(make_request(&e, "b", "reader", &no, &b) == 0);
    static struct rx ra, rb;
    rx_init(&ra, "a");
    rx_init(&rb, "b");
    struct rx *rxs[] = {&ra, &rb};
    for (uint32_t from = 0, step = 0; from < e.n_out; from += 7, step++) {
        uint32_t to = from + 7 < e.n_out ? from + 7 : e.n_out;
        /* Every other doorbell is "lost": postprocd must find the tokens on its tick. */
        RS_CHECK(append(&e, a, from, to, step % 2) == 0 && append(&e, b, from, to, 0) == 0);
        RS_CHECK(pump(&c, rxs, 2, 2) == 0);
    }
    uint32_t word = rs_pipe_finish_make(RS_WIRE_FINISH_LENGTH, RS_PIPE_STAGE_LAUNCHERD, 0);
    RS_CHECK(finish(&e, a, word) == 0 && finish(&e, b, word) == 0);
    RS_CHECK(pump_finals(&c, rxs, 2, 5000) == 0);
    RS_CHECK(ra.repeats == 0 && ra.gaps == 0 && rb.repeats == 0);
    RS_CHECK(check_output(&e, &ra, e.n_out) == 0 && check_output(&e, &rb, e.n_out) == 0);
    RS_CHECK(ra.next == e.n_out + 1 && ra.max_per_msg == 1); /* one delta per token + final */
    RS_CHECK(rb.next == 1);                                   /* non-streamed: the final only */
    for (uint32_t i = 0; i < e.n_out; i++) /* the first byte of "é" completes nothing yet */
        if (e.out[i] == 3 + 0xc3)
            RS_CHECK(ra.seq_off[i + 1] == ra.seq_off[i]);
    for (int k = 0; k < 2; k++) {
        struct rs_wire_final *f = &rxs[k]->fin;
        RS_CHECK(f->finish_reason == RS_WIRE_FINISH_LENGTH && f->usage.cached_tokens == 16);
        RS_CHECK(f->timings.queue_us == 3000 && f->timings.ttft_us == 5000 &&
                 f->timings.total_us == 50000);
    }
    RS_CHECK(wait_freed(&e, a, 3000) == 0 && wait_freed(&e, b, 3000) == 0); /* after the linger */
    struct rs_metrics_block *mb = &e.sched->metrics->stage[RS_PIPE_STAGE_POSTPROCD];
    RS_CHECK(atomic_load(&mb->counter[RS_M_POST_DELTAS]) == e.n_out);
    RS_CHECK(atomic_load(&mb->counter[RS_M_POST_FINALS]) == 2);
    rx_fini(&ra);
    rx_fini(&rb);
    fx_client_close(&c);
    return teardown(&e);
}

/*
 * A stop string made of the last two bytes of output token k's text and the
 * first two of token k+1's, whose first occurrence in the whole text is there;
 * *pos = its offset. Found from the one-shot decodes of growing prefixes.
 */
static int pick_stop(const struct env *e, char *stop, size_t *pos, uint32_t *k_out)
{
    static char full[16384], pre[16384];
    size_t n_full = one_shot(e, 256, full, sizeof(full));
    full[n_full] = '\0';
    for (uint32_t k = 30; k + 2 < 256; k++) {
        size_t a = one_shot(e, k, pre, sizeof(pre));   /* text before token k */
        size_t b = one_shot(e, k + 1, pre, sizeof(pre)); /* ... through token k */
        size_t c = one_shot(e, k + 2, pre, sizeof(pre)); /* ... through token k+1 */
        if (b < a + 2 || c < b + 2)
            continue;
        memcpy(stop, full + b - 2, 4);
        stop[4] = '\0';
        char *first = strstr(full, stop);
        if (first != NULL && (size_t)(first - full) == b - 2) {
            *pos = b - 2;
            *k_out = k;
            return 0;
        }
    }
    return 1;
}

static int test_stop_string_split_across_tokens_ends_the_request(void)
{
    struct env e;
    int rc = setup(&e, NULL);
    if (rc != 0)
        return rc;
    char stop[8];
    size_t pos;
    uint32_t k;
    RS_CHECK(pick_stop(&e, stop, &pos, &k) == 0);
    struct fx_client c;
    RS_CHECK(fx_client_open(&e.in, "postprocd", "stopper", &c) == 0 && hello(&c) == 0);
    struct rs_table_ref a, b;
    struct req_opts so = {.stream = 1, .stops = {stop}};
    struct req_opts no = {.stream = 0, .stops = {"zqzq", stop}};
    RS_CHECK(make_request(&e, "a", "stopper", &so, &a) == 0);
    RS_CHECK(make_request(&e, "b", "stopper", &no, &b) == 0);
    /* The launcher runs on past the stop string: postprocd must ignore what follows. */
    RS_CHECK(append(&e, a, 0, 256, 1) == 0 && append(&e, b, 0, 256, 1) == 0);
    int cancelled = 0;
    for (int i = 0; i < 2; i++) {
        RS_CHECK(rs_pipe_door_recv(&e.doors, &door, 5000) == RS_OK);
        RS_CHECK(door.kind == RS_WIRE_DOOR_CANCEL && door.u.cancel.reason == RS_WIRE_CANCEL_STOP);
        cancelled |= door.u.cancel.slot == a.index ? 1 : door.u.cancel.slot == b.index ? 2 : 0;
    }
    RS_CHECK(cancelled == 3);
    uint32_t w = atomic_load(&rs_pipe_req_at(e.sched, a.index)->finish);
    RS_CHECK(rs_pipe_finish_reason(w) == RS_WIRE_FINISH_STOP &&
             rs_pipe_finish_who(w) == RS_PIPE_STAGE_POSTPROCD);
    RS_CHECK(finish(&e, a, 0) == 0 && finish(&e, b, 0) == 0);
    static struct rx ra, rb;
    rx_init(&ra, "a");
    rx_init(&rb, "b");
    struct rx *rxs[] = {&ra, &rb};
    RS_CHECK(pump_finals(&c, rxs, 2, 5000) == 0);
    static char full[16384];
    RS_CHECK(one_shot(&e, 256, full, sizeof(full)) > pos);
    for (int i = 0; i < 2; i++) {
        struct rx *x = rxs[i];
        RS_CHECK_MSG(x->len == pos && memcmp(x->text, full, pos) == 0, "'%s': %zu bytes, want %zu",
                     x->id, x->len, pos);
        RS_CHECK(x->fin.finish_reason == RS_WIRE_FINISH_STOP);
        RS_CHECK(x->fin.usage.completion_tokens == k + 2 && x->n_toks == k + 2);
    }
    RS_CHECK(ra.next == k + 3); /* deltas for tokens 0..k+1, then the final */
    RS_CHECK(atomic_load(&e.sched->metrics->stage[RS_PIPE_STAGE_POSTPROCD]
                              .counter[RS_M_POST_STOP_HITS]) == 2);
    rx_fini(&ra);
    rx_fini(&rb);
    fx_client_close(&c);
    return teardown(&e);
}

#define N_KILLS 5

/* Streams three requests while postprocd is SIGKILLed and restarted N_KILLS times. */
static int test_sigkill_mid_stream_resends_at_most_the_last_delta(void)
{
    struct env e;
    int rc = setup(&e, NULL);
    if (rc != 0)
        return rc;
    unsigned seed = (unsigned)getpid();
    srand(seed);
    struct fx_client c;
    RS_CHECK(fx_client_open(&e.in, "postprocd", "survivor", &c) == 0 && hello(&c) == 0);
    static struct rx rx[3];
    struct rx *rxs[3] = {&rx[0], &rx[1], &rx[2]};
    struct rs_table_ref ref[3];
    static const char *ids[3] = {"k0", "k1", "k2"};
    struct req_opts so = {.stream = 1};
    for (int i = 0; i < 3; i++) {
        rx_init(&rx[i], ids[i]);
        RS_CHECK(make_request(&e, ids[i], "survivor", &so, &ref[i]) == 0);
    }
    int kills = 0;
    for (uint32_t from = 0, to, step = 1; from < e.n_out; from = to, step++) {
        /* Every 8th step a burst of 30 per request, and a SIGKILL while postprocd sends it. */
        int burst = step % 8 == 0 && kills < N_KILLS;
        to = from + (burst ? 30 : 3) < e.n_out ? from + (burst ? 30 : 3) : e.n_out;
        for (int i = 0; i < 3; i++)
            RS_CHECK(append(&e, ref[i], from, to, 1) == 0);
        if (!burst) {
            RS_CHECK(pump(&c, rxs, 3, 3) == 0);
        } else {
            usleep((useconds_t)(rand() % 600));
            fx_daemon_kill(&e.post);
            RS_CHECK(fx_daemon_start(&e.in, "postprocd", &e.post, NULL) == 0);
            RS_CHECK(fx_daemon_ready(e.sched, RS_PIPE_POSTPROCD, &e.post) == 0);
            kills++;
        }
    }
    uint32_t word = rs_pipe_finish_make(RS_WIRE_FINISH_LENGTH, RS_PIPE_STAGE_LAUNCHERD, 0);
    for (int i = 0; i < 3; i++)
        RS_CHECK(finish(&e, ref[i], word) == 0);
    RS_CHECK(pump_finals(&c, rxs, 3, 10000) == 0);
    for (int i = 0; i < 3; i++) {
        RS_CHECK(check_output(&e, &rx[i], e.n_out) == 0);
        fprintf(stderr, "'%s': %u repeats, %u gaps, %u resumes over %d kills (seed %u)\n",
                ids[i], rx[i].repeats, rx[i].gaps, rx[i].resumes, kills, seed);
        /* Unasked, a restarted postprocd repeats at most the last delta sent (same seq). */
        RS_CHECK(rx[i].bad_repeats == 0);
        rx_fini(&rx[i]);
    }
    RS_CHECK(kills == N_KILLS);
    fx_client_close(&c);
    return teardown(&e);
}

/*
 * postprocd kills itself at a chosen step of the send-then-publish order
 * (ipc/failpoint.h); the cursor left in shared memory must be the one
 * before that step, and the restarted postprocd must deliver the rest with
 * nothing lost and only the unpublished message possibly repeated.
 */
static int crash_at(const char *failpoint, uint32_t want_done, int want_final_sent)
{
    struct env e;
    int rc = setup(&e, NULL);
    if (rc != 0)
        return rc;
    fx_daemon_stop(&e.post);
    RS_CHECK(start_post(&e, NULL, failpoint) == 0);
    struct fx_client c;
    RS_CHECK(fx_client_open(&e.in, "postprocd", "crashy", &c) == 0 && hello(&c) == 0);
    struct rs_table_ref ref;
    struct req_opts so = {.stream = 1};
    RS_CHECK(make_request(&e, "f", "crashy", &so, &ref) == 0);
    static struct rx x;
    rx_init(&x, "f");
    struct rx *rxs[] = {&x};
    RS_CHECK(append(&e, ref, 0, 60, 1) == 0);
    if (want_final_sent >= 0)
        RS_CHECK(finish(&e, ref, rs_pipe_finish_make(RS_WIRE_FINISH_LENGTH,
                                                     RS_PIPE_STAGE_LAUNCHERD, 0)) == 0);
    RS_CHECK_MSG(fx_daemon_wait(&e.post) == 128 + SIGKILL, "%s did not fire", failpoint);
    const struct rs_pipe_cursor *cur = rs_pipe_cursor_cur(rs_pipe_req_at(e.sched, ref.index));
    RS_CHECK_MSG(cur->n_done == want_done && (int)cur->final_sent == (want_final_sent > 0),
                 "%s: cursor at %u tokens, final_sent %u", failpoint, cur->n_done,
                 cur->final_sent);
    RS_CHECK(start_post(&e, NULL, NULL) == 0);
    if (want_final_sent < 0)
        RS_CHECK(finish(&e, ref, rs_pipe_finish_make(RS_WIRE_FINISH_LENGTH,
                                                     RS_PIPE_STAGE_LAUNCHERD, 0)) == 0);
    RS_CHECK(pump_finals(&c, rxs, 1, 10000) == 0);
    RS_CHECK(check_output(&e, &x, 60) == 0 && x.bad_repeats == 0);
    rx_fini(&x);
    fx_client_close(&c);
    return teardown(&e);
}

static int test_crash_after_a_delta_before_its_cursor(void)
{
    return crash_at("postprocd.delta_sent:25", 24, -1);
}

static int test_crash_between_cursor_copy_and_flip(void)
{
    return crash_at("postprocd.cursor_copied:40", 39, -1);
}

static int test_crash_after_the_final_before_final_sent(void)
{
    return crash_at("postprocd.final_sent:1", 60, 0);
}

/* Non-streamed output over 4096 tokens: a delta with the first 4096, then the final. */
static int test_long_unstreamed_output_is_split_before_the_final(void)
{
    enum { N = 5000 };
    char model[300], cmd[900];
    snprintf(model, sizeof(model), "%s/long-ctx.gguf", rs_test_tmpdir());
    snprintf(cmd, sizeof(cmd), "'%s/ringserve-mkmodel' -o '%s' --dim 16 --layers 1 --heads 2 "
             "--ffn 32 --vocab 300 --ctx 8192 --vocab-only > /dev/null", rs_test_bindir(), model);
    RS_CHECK(system(cmd) == 0);
    struct env e;
    int rc = setup_model(&e, model, 8192, NULL);
    if (rc != 0)
        return rc;
    struct fx_client c;
    RS_CHECK(fx_client_open(&e.in, "postprocd", "long", &c) == 0 && hello(&c) == 0);
    struct rs_table_ref ref;
    struct req_opts no = {.stream = 0};
    RS_CHECK(make_request(&e, "long", "long", &no, &ref) == 0);
    static int32_t out[N];
    for (int i = 0; i < N; i++) /* the made-up vocab's ids 0..255 are its byte tokens */
        out[i] = i % 50 == 49 ? '\n' : 'a' + i % 26;
    RS_CHECK(rs_arena_append(e.lau->tokens, ref, out, N) == RS_OK);
    RS_CHECK(finish(&e, ref, rs_pipe_finish_make(RS_WIRE_FINISH_LENGTH, RS_PIPE_STAGE_LAUNCHERD,
                                                 0)) == 0);
    static char want[N + 16], got[N + 16];
    size_t n_want, n_got = 0;
    RS_CHECK(rs_detok_decode(e.vocab, out, N, 0, want, sizeof(want), &n_want) == RS_OK);
    uint32_t counts[2];
    for (int k = 0; k < 2; k++) {
        struct rs_wire_server_msg m;
        RS_CHECK(fx_recv(&c, 5000, &m) == 0);
        RS_CHECK(m.type == (k == 0 ? RS_WIRE_T_DELTA : RS_WIRE_T_FINAL));
        const struct rs_wire_delta *d = k == 0 ? &m.u.delta : &m.u.final.out;
        RS_CHECK(d->seq == (uint64_t)k && n_got + d->text.len <= sizeof(got));
        memcpy(got + n_got, d->text.ptr, d->text.len);
        n_got += d->text.len;
        counts[k] = d->tokens.n;
        if (k == 1)
            RS_CHECK(m.u.final.usage.completion_tokens == N);
    }
    RS_CHECK(counts[0] == RS_WIRE_OUT_TOKENS_MAX && counts[1] == N - RS_WIRE_OUT_TOKENS_MAX);
    RS_CHECK(n_got == n_want && memcmp(got, want, n_want) == 0);
    fx_client_close(&c);
    return teardown(&e);
}

static int test_resume_replays_identical_messages(void)
{
    struct env e;
    const char *extra[] = {"--linger-ms", "1500", NULL};
    int rc = setup(&e, extra);
    if (rc != 0)
        return rc;
    struct fx_client c;
    RS_CHECK(fx_client_open(&e.in, "postprocd", "replayer", &c) == 0 && hello(&c) == 0);
    struct rs_table_ref a, b;
    struct req_opts so = {.stream = 1}, no = {.stream = 0};
    RS_CHECK(make_request(&e, "a", "replayer", &so, &a) == 0);
    RS_CHECK(make_request(&e, "b", "replayer", &no, &b) == 0);
    uint32_t word = rs_pipe_finish_make(RS_WIRE_FINISH_STOP, RS_PIPE_STAGE_LAUNCHERD, 0);
    RS_CHECK(append(&e, a, 0, 100, 1) == 0 && append(&e, b, 0, 100, 1) == 0);
    RS_CHECK(finish(&e, a, word) == 0 && finish(&e, b, word) == 0);
    static struct rx first_a, first_b, again_a, again_b;
    rx_init(&first_a, "a");
    rx_init(&first_b, "b");
    struct rx *rxs[] = {&first_a, &first_b};
    RS_CHECK(pump_finals(&c, rxs, 2, 5000) == 0 && first_a.next == 101);
    /* A client that lost everything from seq 10 on asks again: the same bytes come back. */
    rx_init(&again_a, "a");
    again_a.next = 10;
    rx_init(&again_b, "b");
    RS_CHECK(send_resume(&c, "a", 10) == 0 && send_resume(&c, "b", 0) == 0);
    struct rx *rxs2[] = {&again_a, &again_b};
    RS_CHECK(pump_finals(&c, rxs2, 2, 5000) == 0);
    RS_CHECK(again_a.next == 101 && again_a.repeats == 0 && again_b.next == 1);
    for (uint64_t s = 10; s <= 100; s++)
        RS_CHECK(again_a.raw_len[s] == first_a.raw_len[s] &&
                 memcmp(again_a.raw[s], first_a.raw[s], first_a.raw_len[s]) == 0);
    RS_CHECK(again_b.raw_len[0] == first_b.raw_len[0] &&
             memcmp(again_b.raw[0], first_b.raw[0], first_b.raw_len[0]) == 0);
    RS_CHECK(atomic_load(&e.sched->metrics->stage[RS_PIPE_STAGE_POSTPROCD]
                              .counter[RS_M_POST_REPLAYS]) == 2);
    /* After the linger the output is released: resume is not_found. */
    RS_CHECK(wait_freed(&e, a, 5000) == 0);
    RS_CHECK(send_resume(&c, "a", 0) == 0);
    struct rs_wire_server_msg m;
    RS_CHECK(fx_recv(&c, 3000, &m) == 0 && m.type == RS_WIRE_T_ERROR &&
             m.u.error.code == RS_WIRE_NOT_FOUND && strcmp(m.id, "a") == 0);
    rx_fini(&first_a), rx_fini(&first_b), rx_fini(&again_a), rx_fini(&again_b);
    fx_client_close(&c);
    return teardown(&e);
}

static int test_unreachable_client_times_out(void)
{
    struct env e;
    const char *extra[] = {"--client-timeout-ms", "300", NULL};
    int rc = setup(&e, extra);
    if (rc != 0)
        return rc;
    struct fx_client c;
    RS_CHECK(fx_client_open(&e.in, "postprocd", "present", &c) == 0 && hello(&c) == 0);
    struct rs_table_ref ghost, live;
    struct req_opts so = {.stream = 1};
    RS_CHECK(make_request(&e, "g", "ghost", &so, &ghost) == 0); /* never connects */
    RS_CHECK(make_request(&e, "l", "present", &so, &live) == 0);
    RS_CHECK(append(&e, ghost, 0, 20, 1) == 0 && append(&e, live, 0, 20, 1) == 0);
    static struct rx rl;
    rx_init(&rl, "l");
    struct rx *rxs[] = {&rl};
    for (int i = 0; i < 50 && rl.next < 20; i++) /* the other client is not held up */
        RS_CHECK(pump(&c, rxs, 1, 100) == 0);
    RS_CHECK(rl.next == 20);
    RS_CHECK(rs_pipe_door_recv(&e.doors, &door, 5000) == RS_OK);
    RS_CHECK(door.kind == RS_WIRE_DOOR_CANCEL && door.u.cancel.slot == ghost.index &&
             door.u.cancel.reason == RS_WIRE_CANCEL_GONE);
    uint32_t w = atomic_load(&rs_pipe_req_at(e.sched, ghost.index)->finish);
    RS_CHECK(rs_pipe_finish_reason(w) == RS_WIRE_FINISH_ABORT &&
             rs_pipe_finish_who(w) == RS_PIPE_STAGE_POSTPROCD);
    RS_CHECK(finish(&e, ghost, 0) == 0);
    RS_CHECK(wait_freed(&e, ghost, 3000) == 0); /* released at once: nobody to linger for */
    struct rs_metrics_block *mb = &e.sched->metrics->stage[RS_PIPE_STAGE_POSTPROCD];
    RS_CHECK(atomic_load(&mb->counter[RS_M_POST_GONE]) == 1);
    RS_CHECK(atomic_load(&mb->counter[RS_M_POST_SEND_FAIL]) >= 1);
    RS_CHECK(record_state(&e, live) == RS_PIPE_REQ_RUNNING);
    rx_fini(&rl);
    fx_client_close(&c);
    return teardown(&e);
}

/* Output tokens and logprobs from the real sampler over made-up logits. */
static int sample_outputs(struct env *e, struct rs_sample_result *res, uint32_t n)
{
    rs_sampler *s;
    RS_CHECK(rs_sampler_create((int32_t)e->in.cfg.n_vocab, &s) == RS_OK);
    struct rs_sampling_params sp;
    rs_sampling_params_default(&sp);
    sp.n_logprobs = 3;
    sp.temperature = 0.8f;
    sp.seed = 7;
    static float logits[4096];
    for (uint32_t k = 0; k < n; k++) {
        for (uint32_t i = 0; i < e->in.cfg.n_vocab; i++)
            logits[i] = 3.0f * sinf(0.37f * (float)i + (float)k);
        RS_CHECK(rs_sampler_sample(s, &sp, logits, e->out, 0, k, k, &res[k]) == RS_OK);
        e->out[k] = res[k].token;
    }
    e->n_out = n;
    rs_sampler_destroy(&s);
    return 0;
}

/* Connects under rid until a hello is answered (a connection libzmq ignored is replaced). */
static int hello_answer(struct env *e, const char *rid, const char *secret, struct fx_client *c,
                        struct rs_wire_server_msg *w)
{
    for (int i = 0; i < 50; i++) {
        RS_CHECK(fx_client_open(&e->in, "postprocd", rid, c) == 0);
        send_hello_with(c, secret);
        if (fx_recv(c, 300, w) == 0)
            return 0;
        fx_client_close(c);
    }
    RS_CHECK_MSG(0, "no answer to hello under '%s'", rid);
    return 1;
}

/*
 * Another owner under a client's routing id receives none of its output. A
 * second connection while the owner is connected is ignored; after the
 * owner left, the other owner's hello is refused (`forbidden`, the
 * request is still held), its resume too, and nothing is sent to it while
 * the request streams on. The owner comes back with its secret, resumes,
 * and has every token exactly once.
 */
static int test_another_owner_under_the_routing_id_gets_nothing(void)
{
    struct env e;
    int rc = setup(&e, NULL);
    if (rc != 0)
        return rc;
    const char *mine = "owner-secret-0123456789", *theirs = "thief-secret-9876543210";
    struct fx_client owner, thief;
    struct rs_wire_server_msg w;
    RS_CHECK(hello_answer(&e, "victim", mine, &owner, &w) == 0 && w.type == RS_WIRE_T_WELCOME);
    struct rs_table_ref ref;
    struct req_opts so = {.stream = 1, .secret = mine};
    RS_CHECK(make_request(&e, "v1", "victim", &so, &ref) == 0);
    static struct rx x;
    rx_init(&x, "v1");
    struct rx *rxs[] = {&x};
    RS_CHECK(fx_client_open(&e.in, "postprocd", "victim", &thief) == 0);
    send_hello_with(&thief, theirs);
    RS_CHECK(append(&e, ref, 0, 10, 1) == 0);
    pump_secret = mine;
    for (int i = 0; i < 100 && x.next < 10; i++)
        RS_CHECK(pump(&owner, rxs, 1, 20) == 0);
    RS_CHECK(x.next == 10);
    RS_CHECK_MSG(fx_recv(&thief, 300, &w) != 0, "the second connection got a %s",
                 rs_wire_type_name(w.type));
    fx_client_close(&thief);
    fx_client_close(&owner);
    RS_CHECK(hello_answer(&e, "victim", theirs, &thief, &w) == 0);
    RS_CHECK_MSG(w.type == RS_WIRE_T_ERROR && w.u.error.code == RS_WIRE_FORBIDDEN,
                 "takeover hello answered %s", rs_wire_type_name(w.type));
    RS_CHECK(append(&e, ref, 10, 20, 1) == 0);
    RS_CHECK(send_resume(&thief, "v1", 0) == 0);
    RS_CHECK(fx_recv(&thief, 1000, &w) == 0 && w.type == RS_WIRE_T_ERROR &&
             w.u.error.code == RS_WIRE_FORBIDDEN);
    RS_CHECK_MSG(fx_recv(&thief, 300, &w) != 0, "the other owner got a %s",
                 rs_wire_type_name(w.type));
    fx_client_close(&thief);
    RS_CHECK(hello_answer(&e, "victim", mine, &owner, &w) == 0 && w.type == RS_WIRE_T_WELCOME);
    RS_CHECK(finish(&e, ref, rs_pipe_finish_make(RS_WIRE_FINISH_LENGTH, RS_PIPE_STAGE_LAUNCHERD,
                                                 0)) == 0);
    x.resumes++;
    RS_CHECK(send_resume(&owner, "v1", x.next) == 0);
    RS_CHECK(pump_finals(&owner, rxs, 1, 5000) == 0 && check_output(&e, &x, 20) == 0);
    pump_secret = NULL;
    rx_fini(&x);
    fx_client_close(&owner);
    return teardown(&e);
}

/* A request that came over tcp is answered on the tcp ROUTER, not to an ipc namesake. */
static int test_tcp_client_is_answered_over_tcp(void)
{
    struct env e;
    struct fx_curve k;
    RS_CHECK(fx_curve_setup(&k) == 0);
    int rc = setup(&e, k.args);
    if (rc != 0)
        return rc;
    struct fx_client remote, local;
    RS_CHECK(fx_curve_client(&e.in, &k, 1, "remote", &remote) == 0 && hello(&remote) == 0);
    RS_CHECK(fx_client_open(&e.in, "postprocd", "remote", &local) == 0 && hello(&local) == 0);
    struct rs_table_ref ref;
    struct req_opts so = {.stream = 1, .tcp = 1, .key = k.good.public_z85};
    RS_CHECK(make_request(&e, "tr", "remote", &so, &ref) == 0);
    RS_CHECK(append(&e, ref, 0, 30, 1) == 0);
    RS_CHECK(finish(&e, ref, rs_pipe_finish_make(RS_WIRE_FINISH_LENGTH, RS_PIPE_STAGE_LAUNCHERD,
                                                 0)) == 0);
    static struct rx x;
    rx_init(&x, "tr");
    struct rx *rxs[] = {&x};
    RS_CHECK(pump_finals(&remote, rxs, 1, 5000) == 0 && check_output(&e, &x, 30) == 0);
    struct rs_wire_server_msg m;
    RS_CHECK(fx_recv(&local, 300, &m) != 0); /* same routing id over ipc: nothing */
    rx_fini(&x);
    fx_client_close(&remote);
    fx_client_close(&local);
    return teardown(&e);
}

static int test_logprobs_travel_with_their_tokens(void)
{
    struct env e;
    int rc = setup(&e, NULL);
    if (rc != 0)
        return rc;
    static struct rs_sample_result res[40];
    RS_CHECK(sample_outputs(&e, res, 40) == 0);
    struct fx_client c;
    RS_CHECK(fx_client_open(&e.in, "postprocd", "lp", &c) == 0 && hello(&c) == 0);
    struct rs_table_ref ref[2];
    struct req_opts o[2] = {{.stream = 1, .n_logprobs = 3}, {.stream = 0, .n_logprobs = 3}};
    static struct rx rx[2];
    struct rx *rxs[] = {&rx[0], &rx[1]};
    for (int i = 0; i < 2; i++) {
        rx_init(&rx[i], i ? "nl" : "sl");
        RS_CHECK(make_request(&e, rx[i].id, "lp", &o[i], &ref[i]) == 0);
        for (uint32_t k = 0; k < 40; k++) /* the launcher writes entry k before token k */
            RS_CHECK(rs_pipe_logprob_put(e.lau, ref[i], k, &res[k]) == RS_OK &&
                     append(&e, ref[i], k, k + 1, 1) == 0);
        RS_CHECK(finish(&e, ref[i], rs_pipe_finish_make(RS_WIRE_FINISH_LENGTH,
                                                       RS_PIPE_STAGE_LAUNCHERD, 0)) == 0);
    }
    RS_CHECK(pump_finals(&c, rxs, 2, 5000) == 0);
    for (int i = 0; i < 2; i++) {
        RS_CHECK(check_output(&e, &rx[i], 40) == 0);
        for (uint32_t k = 0; k < 40; k++) {
            const struct rs_wire_logprob *lp = &rx[i].lps[k];
            RS_CHECK(lp->token == (uint32_t)res[k].token && lp->logprob == res[k].logprob);
            RS_CHECK(lp->n_top == (uint32_t)res[k].n_top && lp->n_top == 3);
            for (uint32_t j = 0; j < lp->n_top; j++)
                RS_CHECK(lp->top_ids[j] == (uint32_t)res[k].top_ids[j] &&
                         lp->top_logprobs[j] == res[k].top_logprobs[j]);
        }
        rx_fini(&rx[i]);
    }
    fx_client_close(&c);
    return teardown(&e);
}

static int expect_error(struct fx_client *c, const char *id, enum rs_wire_code code)
{
    struct rs_wire_server_msg m;
    RS_CHECK(fx_recv(c, 3000, &m) == 0 && m.type == RS_WIRE_T_ERROR);
    RS_CHECK_MSG(m.u.error.code == code && strcmp(m.id, id) == 0, "got %s for '%s', want %s",
                 rs_wire_code_name(m.u.error.code), m.id, rs_wire_code_name(code));
    return 0;
}

static int test_client_mistakes_get_error_replies(void)
{
    struct env e;
    int rc = setup(&e, NULL);
    if (rc != 0)
        return rc;
    struct fx_client c;
    RS_CHECK(fx_client_open(&e.in, "postprocd", "clumsy", &c) == 0 && hello(&c) == 0);
    RS_CHECK(fx_send_raw(&c, "\x93\x01", 2) == 0 && expect_error(&c, "", RS_WIRE_BAD_REQUEST) == 0);
    struct rs_wire_client_msg m;
    fx_generate(&m, "gen", "hi");
    RS_CHECK(fx_send(&c, &m) == 0 && expect_error(&c, "gen", RS_WIRE_BAD_REQUEST) == 0);
    RS_CHECK(send_resume(&c, "nobody", 0) == 0);
    RS_CHECK(expect_error(&c, "nobody", RS_WIRE_NOT_FOUND) == 0);
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    fx_pack_head(&pk, RS_WIRE_VERSION, "resume", "r", 1);
    fx_pack_str(&pk, "from_seq");
    fx_pack_str(&pk, "ten");
    RS_CHECK(fx_send_raw(&c, sb.data, sb.size) == 0);
    RS_CHECK(expect_error(&c, "r", RS_WIRE_WRONG_TYPE) == 0);
    msgpack_sbuffer_destroy(&sb);
    /* A request of another client is not found under this client's name. */
    struct rs_table_ref ref;
    struct req_opts so = {.stream = 1};
    RS_CHECK(make_request(&e, "theirs", "someone-else", &so, &ref) == 0);
    RS_CHECK(send_resume(&c, "theirs", 0) == 0);
    RS_CHECK(expect_error(&c, "theirs", RS_WIRE_NOT_FOUND) == 0);
    RS_CHECK(hello(&c) == 0); /* still serving */
    fx_client_close(&c);
    return teardown(&e);
}

/* A cancelled request ends "abort" with the tokens it got; a failed one "error" with its code. */
static int test_abort_and_error_finals(void)
{
    struct env e;
    int rc = setup(&e, NULL);
    if (rc != 0)
        return rc;
    struct fx_client c;
    RS_CHECK(fx_client_open(&e.in, "postprocd", "ender", &c) == 0 && hello(&c) == 0);
    struct rs_table_ref a, b;
    struct req_opts so = {.stream = 1}, no = {.stream = 0};
    RS_CHECK(make_request(&e, "ab", "ender", &so, &a) == 0);
    RS_CHECK(make_request(&e, "er", "ender", &no, &b) == 0);
    RS_CHECK(append(&e, a, 0, 12, 1) == 0 && append(&e, b, 0, 5, 1) == 0);
    RS_CHECK(finish(&e, a, rs_pipe_finish_make(RS_WIRE_FINISH_ABORT, RS_PIPE_STAGE_TOKENIZERD,
                                               0)) == 0);
    RS_CHECK(finish(&e, b, rs_pipe_finish_make(RS_WIRE_FINISH_ERROR, RS_PIPE_STAGE_LAUNCHERD,
                                               RS_WIRE_INTERNAL)) == 0);
    static struct rx ra, rb;
    rx_init(&ra, "ab");
    rx_init(&rb, "er");
    struct rx *rxs[] = {&ra, &rb};
    RS_CHECK(pump_finals(&c, rxs, 2, 5000) == 0);
    RS_CHECK(check_output(&e, &ra, 12) == 0 && check_output(&e, &rb, 5) == 0);
    RS_CHECK(ra.fin.finish_reason == RS_WIRE_FINISH_ABORT && ra.fin.error == RS_WIRE_OK);
    RS_CHECK(rb.fin.finish_reason == RS_WIRE_FINISH_ERROR && rb.fin.error == RS_WIRE_INTERNAL);
    rx_fini(&ra);
    rx_fini(&rb);
    fx_client_close(&c);
    return teardown(&e);
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_deltas_per_token_equal_one_shot_text),
    RS_TEST(test_stop_string_split_across_tokens_ends_the_request),
    RS_TEST(test_sigkill_mid_stream_resends_at_most_the_last_delta),
    RS_TEST(test_crash_after_a_delta_before_its_cursor),
    RS_TEST(test_crash_between_cursor_copy_and_flip),
    RS_TEST(test_crash_after_the_final_before_final_sent),
    RS_TEST(test_long_unstreamed_output_is_split_before_the_final),
    RS_TEST(test_resume_replays_identical_messages),
    RS_TEST(test_unreachable_client_times_out),
    RS_TEST(test_tcp_client_is_answered_over_tcp),
    RS_TEST(test_another_owner_under_the_routing_id_gets_nothing),
    RS_TEST(test_logprobs_travel_with_their_tokens),
    RS_TEST(test_client_mistakes_get_error_replies),
    RS_TEST(test_abort_and_error_finals),
};
RS_TEST_MAIN(cases)

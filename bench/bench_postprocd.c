/* SPDX-License-Identifier: MIT */
/*
 * postprocd driven alone: the driver starts the real daemon and plays
 * tokenizerd (commits streaming requests), launcherd (appends one output
 * token per request per step and rings tokens_ready with every request of
 * the step, as a real launcher does) and schedulerd (finishes them), while a
 * client thread receives the deltas. Output ids are real text (the published
 * stories260K story) tokenized with the model's vocab; every request has two
 * stop strings that never match, so the matcher works on every token.
 * Prints: token appended -> delta received p50/p99 closed-loop; deltas/s at
 * full speed; the detokenize + stop-string cost per token in-process and in
 * postprocd's own histogram; and the raw ZeroMQ ROUTER -> DEALER message rate
 * for the same message size measured in the same run (the floor).
 * Usage: bench_postprocd [-m MODEL] [-r requests] [-t tokens] [-l latency_steps]
 */
#include <pthread.h>
#include <stdatomic.h>

#include "bench/front_bench.h"
#include "common/detok.h"
#include "common/opt.h"
#include "common/stopstr.h"
#include "common/tokenizer.h"
#include "ipc/pipeline_door.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "ipc/wire_client.h"
#include "ipc/wire_server.h"

#define MAX_REQ 512
static const char *const STOPS[2] = {"\n\nTHE END\n\n", "<|never|>"};

struct opts {
    const char *model;
    int requests, tokens, lat_steps;
};

struct drv {
    struct fb_inst b;
    struct rs_pipe *tok, *sched, *lau;
    struct rs_pipe_doors doors;
    void *zctx;
    int32_t *out; /* output ids, tokens long */
    int n_out;
    struct rs_table_ref ref[MAX_REQ];
};

static struct rs_wire_door door;

/* Real text as output ids: the stories260K story tokenized with the model's vocab, repeated. */
static int make_outputs(struct drv *d, int n)
{
    static char text[8192];
    FILE *f = fopen(RS_SOURCE_DIR "/../shared/refdata/expected/stories260K.greedy-n256.txt", "r");
    size_t len = f != NULL ? fread(text, 1, sizeof(text) - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    if (len == 0)
        len = (size_t)snprintf(text, sizeof(text), "Once upon a time, there was a girl.");
    rs_vocab *v;
    rs_tokenizer *t;
    char err[256];
    int32_t ids[4096];
    size_t n_ids = 0;
    if (rs_vocab_load_file(d->b.cfg.model_path, &v, err, sizeof(err)) != RS_OK ||
        rs_tokenizer_create(v, &t) != RS_OK ||
        rs_tokenizer_encode(t, text, len, 0, ids, 4096, &n_ids) != RS_OK || n_ids == 0)
        return 1;
    d->out = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++)
        d->out[i] = ids[(size_t)i % n_ids];
    d->n_out = n;
    rs_tokenizer_destroy(&t);
    rs_vocab_destroy(&v);
    return 0;
}

/* tokenizerd's part: commit a streaming request from client "bench" (prompt: BOS). */
static int commit(struct drv *d, int k, const char *prefix)
{
    void *rec;
    struct rs_table_ref *ref = &d->ref[k];
    if (rs_table_claim(d->tok->requests, ref, &rec) != RS_OK)
        return 1;
    struct rs_pipe_req *r = rec;
    memset(r, 0, sizeof(*r));
    snprintf(r->id, sizeof(r->id), "%s%d", prefix, k);
    memcpy(r->client, "bench", 5);
    r->client_len = 5;
    r->flags = RS_PIPE_F_STREAM;
    r->n_prompt = 1;
    r->max_tokens = d->b.cfg.n_ctx - 1;
    rs_sampling_params_default(&r->sampling);
    for (int i = 0; i < 2; i++) {
        r->stop_len[i] = (uint16_t)strlen(STOPS[i]);
        memcpy(r->stop[i], STOPS[i], r->stop_len[i]);
    }
    r->n_stop = 2;
    r->run_slot = RS_PIPE_NO_SLOT;
    r->arrival_ns = r->accepted_ns = rs_clock_ns();
    int32_t bos = 1;
    if (rs_arena_list_init(d->tok->tokens, *ref) != RS_OK ||
        rs_arena_append(d->tok->tokens, *ref, &bos, 1) != RS_OK ||
        rs_arena_seal(d->tok->tokens, *ref) != RS_OK ||
        rs_table_publish(d->tok->requests, *ref, RS_PIPE_REQ_WAITING) != RS_OK)
        return 1;
    return rs_table_transition(d->sched->requests, *ref, RS_PIPE_REQ_WAITING,
                               RS_PIPE_REQ_RUNNING) != RS_OK;
}

/* launcherd's part: output token `step` for requests [0, n), one tokens_ready doorbell. */
static int step(struct drv *d, int n, int s)
{
    memset(&door, 0, offsetof(struct rs_wire_door, entries));
    door.kind = RS_WIRE_DOOR_TOKENS_READY;
    for (int k = 0; k < n; k++) {
        if (rs_arena_append(d->lau->tokens, d->ref[k], &d->out[s], 1) != RS_OK)
            return 1;
        if (k < RS_WIRE_DOOR_TOKENS_MAX)
            door.entries[door.n_entries++] = (struct rs_wire_door_tok){
                d->ref[k].index, d->ref[k].gen, (uint32_t)s + 1};
    }
    return rs_pipe_door_send(&d->doors, RS_PIPE_STAGE_POSTPROCD, &door) != RS_OK;
}

/* schedulerd's part: finish requests [0, n) (LENGTH) so postprocd sends their finals. */
static void finish_all(struct drv *d, int n)
{
    for (int k = 0; k < n; k++) {
        struct rs_pipe_req *r = rs_pipe_req_at(d->sched, d->ref[k].index);
        rs_pipe_finish_set(r, rs_pipe_finish_make(RS_WIRE_FINISH_LENGTH, RS_PIPE_STAGE_LAUNCHERD,
                                                  0));
        r->finished_ns = rs_clock_ns();
        rs_table_transition(d->sched->requests, d->ref[k], RS_PIPE_REQ_RUNNING,
                            RS_PIPE_REQ_FINISHED);
    }
}

/* Receives one message: 1 delta, 2 final, 0 other, -1 timeout. */
static int recv_one(rs_zsock *s, int timeout_ms, size_t *len)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (rs_zsock_recv(s, NULL, &m, timeout_ms) != RS_OK) {
        zmq_msg_close(&m);
        return -1;
    }
    struct rs_wire_server_msg r;
    struct rs_wire_error err;
    int kind = 0;
    if (rs_wire_server_decode(zmq_msg_data(&m), zmq_msg_size(&m), &r, &err) == RS_OK)
        kind = r.type == RS_WIRE_T_DELTA ? 1 : r.type == RS_WIRE_T_FINAL ? 2 : 0;
    if (len != NULL)
        *len = zmq_msg_size(&m);
    zmq_msg_close(&m);
    return kind;
}

/* Closed loop: each step waits for its n deltas; latency = append -> delta received. */
static int latency_phase(struct drv *d, rs_zsock *s, int n, int steps, size_t *delta_len)
{
    uint64_t *lat = calloc((size_t)(n * steps), sizeof(uint64_t));
    int got = 0;
    for (int k = 0; k < n; k++)
        if (commit(d, k, "lat-") != 0)
            return 1;
    for (int st = 0; st < steps; st++) {
        uint64_t t0 = rs_clock_ns();
        if (step(d, n, st) != 0)
            return 1;
        for (int k = 0; k < n; k++) {
            if (recv_one(s, 5000, delta_len) != 1)
                return 1;
            lat[got++] = rs_clock_ns() - t0;
        }
    }
    finish_all(d, n);
    for (int k = 0; k < n; k++)
        if (recv_one(s, 5000, NULL) != 2)
            return 1;
    printf("closed loop, %d requests x %d steps: token appended -> delta received p50 %.1f us, "
           "p99 %.1f us (the step's last delta p50 %.1f us)\n", n, steps,
           fb_quantile_us(lat, (size_t)got, 0.5), fb_quantile_us(lat, (size_t)got, 0.99),
           fb_quantile_us(lat, (size_t)got, (double)(n - 1) / n));
    free(lat);
    return 0;
}

struct rx_arg {
    rs_zsock *s;
    int expect_deltas, expect_finals;
    atomic_int deltas;
    uint64_t t_last;
    int failed;
};

static void *receiver(void *arg)
{
    struct rx_arg *a = arg;
    int finals = 0;
    while (atomic_load(&a->deltas) < a->expect_deltas || finals < a->expect_finals) {
        int k = recv_one(a->s, 10000, NULL);
        if (k < 0 || k == 0) {
            a->failed = 1;
            return NULL;
        }
        if (k == 1)
            atomic_fetch_add(&a->deltas, 1);
        else
            finals++;
        a->t_last = rs_clock_ns();
    }
    return NULL;
}

/* Full speed: all steps appended back to back while a thread receives. */
static double throughput_phase(struct drv *d, rs_zsock *s, int n, int steps)
{
    struct rx_arg a = {.s = s, .expect_deltas = n * steps, .expect_finals = n};
    for (int k = 0; k < n; k++)
        if (commit(d, k, "tp-") != 0)
            return 0;
    pthread_t th;
    pthread_create(&th, NULL, receiver, &a);
    uint64_t t0 = rs_clock_ns();
    for (int st = 0; st < steps; st++)
        if (step(d, n, st) != 0)
            return 0;
    uint64_t t_appended = rs_clock_ns();
    finish_all(d, n);
    pthread_join(th, NULL);
    if (a.failed)
        return 0;
    double secs = (double)(a.t_last - t0) / 1e9, rate = (double)(n * steps) / secs;
    printf("full speed, %d requests x %d tokens: %.0f deltas/s (%.2f us per delta; the driver "
           "appended everything in %.1f ms)\n", n, steps, rate, 1e6 / rate,
           (double)(t_appended - t0) / 1e6);
    return rate;
}

/* The per-token work postprocd does (detokenizer + stop matcher), in this process. */
static void detok_in_process(const struct drv *d)
{
    rs_vocab *v;
    char err[256], step_out[1024], rel[2048];
    if (rs_vocab_load_file(d->b.cfg.model_path, &v, err, sizeof(err)) != RS_OK)
        return;
    size_t lens[2] = {strlen(STOPS[0]), strlen(STOPS[1])}, n, m;
    int which, rounds = 200;
    uint64_t t0 = rs_clock_ns(), bytes = 0;
    for (int r = 0; r < rounds; r++) {
        struct rs_detok dt;
        struct rs_stopstr ss;
        rs_detok_init(&dt, v, 1, 0);
        rs_stopstr_init(&ss);
        for (int i = 0; i < d->n_out; i++) {
            rs_detok_feed(v, &dt, d->out[i], step_out, sizeof(step_out), &n);
            rs_stopstr_feed(&ss, STOPS, lens, 2, step_out, n, rel, sizeof(rel), &m, &which);
            bytes += m;
        }
    }
    double ns = (double)(rs_clock_ns() - t0) / ((double)rounds * d->n_out);
    printf("detokenize + stop strings in-process: %.0f ns per token (%.1f bytes of text per "
           "token)\n", ns, (double)bytes / ((double)rounds * d->n_out));
    rs_vocab_destroy(&v);
}

#define O(f) offsetof(struct opts, f)
static const struct rs_opt opts[] = {
    {.name = "model", .short_name = 'm', .kind = RS_OPT_ARG, .off = O(model), .arg = "MODEL",
     .help = "the model (default: llama-2-tiny-random from ../shared/refdata)"},
    {.name = "requests", .short_name = 'r', .kind = RS_OPT_INT, .off = O(requests), .min = 1,
     .max = MAX_REQ, .arg = "N", .help = "requests (default 64)"},
    {.name = "tokens", .short_name = 't', .kind = RS_OPT_INT, .off = O(tokens), .min = 1,
     .max = 2000, .arg = "N", .help = "tokens per request (default 256)"},
    {.name = "latency-steps", .short_name = 'l', .kind = RS_OPT_INT, .off = O(lat_steps),
     .min = 1, .max = 2000, .arg = "N", .help = "steps of the latency figure, <= tokens (200)"},
    {0},
};

/* -1 to run, else the exit code. */
static int parse(int argc, char **argv, struct opts *o)
{
    o->model = RS_SOURCE_DIR "/../shared/refdata/llama-2-tiny-random.gguf";
    o->requests = 64, o->tokens = 256, o->lat_steps = 200;
    struct rs_opt_group g = {NULL, opts, o, NULL};
    int code = rs_opt_main("bench_postprocd",
                           "usage: bench_postprocd [options]\n"
                           "postprocd alone: deltas per second and delivery latency.\n",
                           &g, 1, argc, argv, 0, NULL);
    if (code < 0 && o->lat_steps > o->tokens) {
        fprintf(stderr, "bench_postprocd: --latency-steps must not exceed --tokens\n");
        code = 2;
    }
    return code;
}

static int open_roles(struct drv *d)
{
    char err[256];
    if (rs_pipe_open(&d->b.cfg, RS_PIPE_STAGE_TOKENIZERD, &d->tok, err, sizeof(err)) != RS_OK ||
        rs_pipe_open(&d->b.cfg, RS_PIPE_STAGE_SCHEDULERD, &d->sched, err, sizeof(err)) != RS_OK ||
        rs_pipe_open(&d->b.cfg, RS_PIPE_STAGE_LAUNCHERD, &d->lau, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    rs_role_ready(d->tok->role), rs_role_ready(d->sched->role), rs_role_ready(d->lau->role);
    d->zctx = zmq_ctx_new();
    return rs_pipe_doors_open(&d->doors, d->zctx, d->b.rundir, RS_PIPE_STAGE_SCHEDULERD) != RS_OK;
}

/* Bytes of a typical delta (one token, 3 bytes of text), for the floor's message size. */
static size_t typical_delta_len(void)
{
    struct rs_wire_server_msg m;
    struct rs_wire_buf buf;
    uint32_t tok = 1000;
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_DELTA;
    snprintf(m.id, sizeof(m.id), "tp-10");
    m.u.delta.seq = 100;
    m.u.delta.text = (struct rs_wire_str){" a ", 3};
    m.u.delta.tokens = (struct rs_wire_ids){.n = 1, .vals = &tok};
    rs_wire_buf_init(&buf, 4096);
    size_t len = rs_wire_server_encode(&m, &buf) == RS_OK ? buf.len : 64;
    rs_wire_buf_fini(&buf);
    return len;
}

static int run(struct drv *d, const struct opts *o)
{
    double rt, raw;
    size_t raw_len = typical_delta_len();
    if (fb_raw_floor(d->b.rundir, raw_len, 1000, 200000, &rt, &raw) != 0)
        return 1;
    printf("floor, raw ZeroMQ ipc ROUTER -> DEALER, %zu-byte messages: %.0f messages/s; round "
           "trip p50 %.1f us\n", raw_len, raw, rt);
    rs_zsock *s = fb_dealer(d->zctx, d->b.rundir, "postprocd", "bench");
    static const uint8_t hello[] = {0x82, 0xa1, 'v', 0x01, 0xa4, 't', 'y', 'p', 'e',
                                    0xa5, 'h', 'e', 'l', 'l', 'o'};
    size_t delta_len = 0;
    if (s == NULL || fb_send(s, hello, sizeof(hello)) != 0 || recv_one(s, 5000, NULL) != 0)
        return 1;
    int n_lat = o->requests < 16 ? o->requests : 16;
    if (latency_phase(d, s, n_lat, o->lat_steps, &delta_len) != 0)
        return 1;
    double rate = throughput_phase(d, s, o->requests, o->tokens);
    if (rate <= 0)
        return 1;
    const struct rs_metrics_block *m = &d->sched->metrics->stage[RS_PIPE_STAGE_POSTPROCD];
    printf("postprocd's own histogram: detokenize (per token, incl. stop strings) mean %.2f us; "
           "%llu deltas, %llu finals, %llu send failures\n",
           rs_hist_mean(&m->hist[RS_H_POST_DETOK]),
           (unsigned long long)atomic_load(&m->counter[RS_M_POST_DELTAS]),
           (unsigned long long)atomic_load(&m->counter[RS_M_POST_FINALS]),
           (unsigned long long)atomic_load(&m->counter[RS_M_POST_SEND_FAIL]));
    detok_in_process(d);
    rs_zsock_destroy(&s);
    printf("=> deltas/s is %.0f%% of the raw message rate (deltas are %zu bytes)\n",
           100.0 * rate / raw, delta_len);
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    int code = parse(argc, argv, &o);
    if (code >= 0)
        return code;
    static struct drv d;
    if (fb_init(&d.b, o.model, 2048, 1024) != 0 || open_roles(&d) != 0 ||
        make_outputs(&d, o.tokens) != 0)
        return 1;
    uint64_t t_exec = rs_clock_ns();
    if (fb_start(&d.b, "postprocd", NULL) != 0 || fb_ready(&d.b, d.sched, RS_PIPE_POSTPROCD) != 0)
        return 1;
    printf("bench_postprocd: model %s, %d streaming requests x %d tokens; postprocd exec -> "
           "ready %.1f ms (5 ms polls)\n", d.b.cfg.model_path, o.requests, o.tokens,
           (double)(rs_clock_ns() - t_exec) / 1e6);
    int rc = run(&d, &o);
    rs_pipe_doors_close(&d.doors);
    zmq_ctx_term(d.zctx);
    rs_pipe_close(&d.tok), rs_pipe_close(&d.sched), rs_pipe_close(&d.lau);
    fb_fini(&d.b);
    free(d.out);
    return rc;
}

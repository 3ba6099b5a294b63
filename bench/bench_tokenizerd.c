/* SPDX-License-Identifier: MIT */
/*
 * tokenizerd driven alone: the driver starts the real daemon, plays the
 * clients (DEALER sockets, real wire messages) and, in a second thread,
 * schedulerd + postprocd (every committed record is released at once, so
 * the table never fills). Prints intake latency (generate sent -> ack
 * received) p50/p99/p99.9 closed-loop and under load, requests/s with
 * several clients keeping a window of requests outstanding, the daemon's
 * own tokenize/intake histograms, the in-process tokenizer cost of the same
 * prompt, and the raw ZeroMQ round trip and message rate over the same kind
 * of socket measured in the same run (the floor). With --chat FILE.jinja
 * tokenizerd renders conversations with that template and every request is
 * an 8-message conversation instead of the prompt: the two runs' intake
 * figures differ by what rendering adds on the intake path.
 * Usage: bench_tokenizerd [-m MODEL] [-n requests] [-c clients] [-w window] [-l latency_n]
 *                         [--chat FILE.jinja]
 */
#include <pthread.h>
#include <stdatomic.h>

#include "bench/front_bench.h"
#include "common/opt.h"
#include "common/tokenizer.h"
#include "ipc/pipeline_door.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "ipc/wire_client.h"
#include "ipc/wire_doc.h"
#include "ipc/wire_server.h"

#define MAX_CLIENTS 16

struct opts {
    const char *model;
    const char *chat; /* --chat FILE.jinja: conversations rendered with it */
    int n, clients, window, n_lat;
};

static char prompt[4096] = "Once upon a time, there was a little girl named Lily. She loved to "
                           "play outside in the sunshine with her friends and her dog Max.";

/* --chat: the conversation every request carries (packed once). */
static struct rs_wire_buf conv_buf;
static struct rs_wire_doc conv;
static int use_chat;

/* Eight messages (system, then user/assistant turns) cut from the prompt's text. */
static int make_conversation(void)
{
    static const char *const roles[] = {"system", "user", "assistant", "user",
                                        "assistant", "user", "assistant", "user"};
    json_t *msgs = json_array();
    size_t len = strlen(prompt), part = len / 8;
    for (int i = 0; i < 8; i++)
        json_array_append_new(msgs, json_pack("{s:s,s:s%}", "role", roles[i], "content",
                                              prompt + i * part, part));
    rs_wire_buf_init(&conv_buf, RS_WIRE_CLIENT_MSG_MAX);
    int rc = json_array_size(msgs) == 8 && rs_wire_doc_pack(msgs, &conv_buf, &conv) == RS_OK;
    json_decref(msgs);
    use_chat = rc;
    return rc ? 0 : 1;
}

static atomic_int stop_freer;
static atomic_ulong freed;

/* schedulerd + postprocd stand-in: releases every committed record. */
static void *freer(void *arg)
{
    struct rs_pipe *p = arg;
    while (!atomic_load(&stop_freer)) {
        uint32_t cursor = 0, state;
        struct rs_table_ref ref;
        int any = 0;
        while (rs_table_next(p->requests, &cursor, 1ull << RS_PIPE_REQ_WAITING, &ref, &state) ==
               RS_OK) {
            if (rs_table_transition(p->requests, ref, RS_PIPE_REQ_WAITING,
                                    RS_PIPE_REQ_FINISHED) == RS_OK &&
                rs_arena_free_record(p->tokens, p->requests, ref, RS_PIPE_REQ_FINISHED) == RS_OK)
                atomic_fetch_add(&freed, 1), any = 1;
        }
        if (!any)
            usleep(200);
    }
    return NULL;
}

static size_t encode_generate(struct rs_wire_buf *buf, int client, int i)
{
    struct rs_wire_client_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_GENERATE;
    snprintf(m.id, sizeof(m.id), "c%d-%d", client, i);
    rs_wire_generate_init(&m.u.gen);
    m.u.gen.has = RS_WIRE_GEN_MAX_TOKENS | RS_WIRE_GEN_STREAM |
                  (use_chat ? RS_WIRE_GEN_MESSAGES : RS_WIRE_GEN_PROMPT);
    m.u.gen.prompt = (struct rs_wire_str){prompt, (uint32_t)strlen(prompt)};
    m.u.gen.messages = conv;
    m.u.gen.max_tokens = 64;
    m.u.gen.stream = true;
    return rs_wire_client_encode(&m, buf) == RS_OK ? buf->len : 0;
}

/* Receives one reply; 1 for an ack, 0 for anything else, -1 on timeout. */
static int recv_reply(rs_zsock *s, int timeout_ms, int *client, int *i)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (rs_zsock_recv(s, NULL, &m, timeout_ms) != RS_OK) {
        zmq_msg_close(&m);
        return -1;
    }
    struct rs_wire_server_msg r;
    struct rs_wire_error err;
    int ok = rs_wire_server_decode(zmq_msg_data(&m), zmq_msg_size(&m), &r, &err) == RS_OK &&
             r.type == RS_WIRE_T_ACK;
    if (ok && sscanf(r.id, "c%d-%d", client, i) != 2)
        ok = 0;
    if (!ok && r.type == RS_WIRE_T_ERROR)
        fprintf(stderr, "error reply: %.*s\n", (int)r.u.error.message.len, r.u.error.message.ptr);
    zmq_msg_close(&m);
    return ok;
}

/* Closed loop, one client: each generate waits for its ack. */
static int latency_phase(struct fb_inst *b, void *zctx, int n, struct rs_wire_buf *buf,
                         double *p50)
{
    rs_zsock *s = fb_dealer(zctx, b->rundir, "tokenizerd", "lat");
    uint64_t *lat = calloc((size_t)n, sizeof(uint64_t));
    int c, i;
    uint64_t t_start = rs_clock_ns();
    for (int k = 0; k < n; k++) {
        size_t len = encode_generate(buf, 99, k);
        uint64_t t0 = rs_clock_ns();
        if (len == 0 || fb_send(s, buf->data, len) != 0 || recv_reply(s, 5000, &c, &i) != 1)
            return 1;
        lat[k] = rs_clock_ns() - t0;
    }
    double secs = (double)(rs_clock_ns() - t_start) / 1e9;
    *p50 = fb_quantile_us(lat, (size_t)n, 0.5);
    printf("closed loop, 1 client, %d requests: intake latency p50 %.1f us, p99 %.1f us, "
           "p99.9 %.1f us, max %.1f us; %.0f requests/s\n", n, *p50,
           fb_quantile_us(lat, (size_t)n, 0.99),
           fb_quantile_us(lat, (size_t)n, 0.999), fb_quantile_us(lat, (size_t)n, 1.0),
           (double)n / secs);
    free(lat);
    rs_zsock_destroy(&s);
    return 0;
}

/* Open loop with a window: each client keeps `window` requests outstanding. */
static int load_phase(struct fb_inst *b, void *zctx, const struct opts *o, struct rs_wire_buf *buf)
{
    rs_zsock *s[MAX_CLIENTS];
    zmq_pollitem_t items[MAX_CLIENTS];
    int per = o->n / o->clients, sent[MAX_CLIENTS] = {0}, acked = 0, total = per * o->clients;
    uint64_t *t_sent = calloc((size_t)total, sizeof(uint64_t));
    uint64_t *lat = calloc((size_t)total, sizeof(uint64_t));
    for (int c = 0; c < o->clients; c++) {
        char rid[16];
        snprintf(rid, sizeof(rid), "load-%d", c);
        s[c] = fb_dealer(zctx, b->rundir, "tokenizerd", rid);
        items[c] = (zmq_pollitem_t){.socket = rs_zsock_handle(s[c]), .events = ZMQ_POLLIN};
    }
    uint64_t t_start = rs_clock_ns();
    for (int c = 0; c < o->clients; c++)
        for (; sent[c] < o->window && sent[c] < per; sent[c]++) {
            t_sent[c * per + sent[c]] = rs_clock_ns();
            fb_send(s[c], buf->data, encode_generate(buf, c, sent[c]));
        }
    while (acked < total) {
        if (zmq_poll(items, o->clients, 5000) <= 0) {
            fprintf(stderr, "no reply for 5 s (%d of %d acked)\n", acked, total);
            return 1;
        }
        for (int c = 0; c < o->clients; c++) {
            int cl, i, r;
            while ((r = recv_reply(s[c], 0, &cl, &i)) >= 0) {
                if (r == 0)
                    return 1;
                lat[acked++] = rs_clock_ns() - t_sent[cl * per + i];
                if (sent[c] < per) {
                    t_sent[c * per + sent[c]] = rs_clock_ns();
                    fb_send(s[c], buf->data, encode_generate(buf, c, sent[c]++));
                }
            }
        }
    }
    double secs = (double)(rs_clock_ns() - t_start) / 1e9;
    printf("%d clients x window %d, %d requests: %.0f requests/s; intake latency p50 %.1f us, "
           "p99 %.1f us\n", o->clients, o->window, total, (double)total / secs,
           fb_quantile_us(lat, (size_t)total, 0.5), fb_quantile_us(lat, (size_t)total, 0.99));
    for (int c = 0; c < o->clients; c++)
        rs_zsock_destroy(&s[c]);
    free(t_sent);
    free(lat);
    return 0;
}

/* The tokenizer alone on the same prompt, in this process. */
static double tokenize_us(const char *model)
{
    rs_vocab *v;
    rs_tokenizer *t;
    char err[256];
    int32_t ids[4096];
    size_t n = 0;
    if (rs_vocab_load_file(model, &v, err, sizeof(err)) != RS_OK ||
        rs_tokenizer_create(v, &t) != RS_OK)
        return 0;
    uint64_t t0 = rs_clock_ns();
    for (int i = 0; i < 2000; i++)
        rs_tokenizer_encode(t, prompt, strlen(prompt), RS_TOKENIZE_ADD_SPECIAL, ids, 4096, &n);
    double us = (double)(rs_clock_ns() - t0) / 1e3 / 2000;
    printf("tokenizer in-process: %zu-byte prompt -> %zu tokens in %.1f us\n", strlen(prompt), n,
           us);
    rs_tokenizer_destroy(&t);
    rs_vocab_destroy(&v);
    return us;
}

static void load_prompt(void)
{
    FILE *f = fopen(RS_SOURCE_DIR "/../shared/refdata/expected/stories260K.greedy-n256.txt", "r");
    if (f == NULL)
        return;
    size_t n = fread(prompt, 1, sizeof(prompt) - 1, f);
    prompt[n] = '\0';
    fclose(f);
}

#define O(f) offsetof(struct opts, f)
#define N(nm, c, f, hi, h)                                                                       \
    {.name = nm, .short_name = c, .kind = RS_OPT_INT, .off = O(f), .min = 1, .max = hi,          \
     .arg = "N", .help = h}
static const struct rs_opt opts[] = {
    {.name = "model", .short_name = 'm', .kind = RS_OPT_ARG, .off = O(model), .arg = "MODEL",
     .help = "the model (default: llama-2-tiny-random from ../shared/refdata)"},
    N("requests", 'n', n, 1 << 24, "requests (default 20000)"),
    N("clients", 'c', clients, MAX_CLIENTS, "client connections (default 4)"),
    N("window", 'w', window, 1 << 20, "requests in flight per client (default 32)"),
    N("latency-requests", 'l', n_lat, 1 << 24, "requests of the latency figure (default 2000)"),
    {.name = "chat", .kind = RS_OPT_ARG, .off = O(chat), .arg = "FILE.jinja",
     .help = "send an 8-message conversation, rendered by tokenizerd\n"
             "--chat-template FILE, instead of the prompt"},
    {0},
};

/* -1 to run, else the exit code. */
static int parse(int argc, char **argv, struct opts *o)
{
    o->model = RS_SOURCE_DIR "/../shared/refdata/llama-2-tiny-random.gguf";
    o->n = 20000, o->clients = 4, o->window = 32, o->n_lat = 2000;
    struct rs_opt_group g = {NULL, opts, o, NULL};
    return rs_opt_main("bench_tokenizerd",
                       "usage: bench_tokenizerd [options]\n"
                       "tokenizerd alone: intake rate and latency from several clients.\n",
                       &g, 1, argc, argv, 0, NULL);
}

static void print_daemon_hists(const struct rs_pipe *p)
{
    const struct rs_metrics_block *m = &p->metrics->stage[RS_PIPE_STAGE_TOKENIZERD];
    printf("tokenizerd's own histograms: tokenize mean %.1f us (p99 <= %llu us), intake "
           "(received -> acked) mean %.1f us (p99 <= %llu us); %llu accepted, %llu overloaded\n",
           rs_hist_mean(&m->hist[RS_H_TOK_TOKENIZE]),
           (unsigned long long)rs_hist_quantile(&m->hist[RS_H_TOK_TOKENIZE], 0.99),
           rs_hist_mean(&m->hist[RS_H_TOK_INTAKE]),
           (unsigned long long)rs_hist_quantile(&m->hist[RS_H_TOK_INTAKE], 0.99),
           (unsigned long long)atomic_load(&m->counter[RS_M_TOK_ACCEPTED]),
           (unsigned long long)atomic_load(&m->counter[RS_M_TOK_OVERLOADED]));
}

int main(int argc, char **argv)
{
    struct opts o;
    int code = parse(argc, argv, &o);
    if (code >= 0)
        return code;
    load_prompt();
    struct fb_inst b;
    char err[256];
    struct rs_pipe *p;
    if (fb_init(&b, o.model, 2048, 1024) != 0 ||
        rs_pipe_open(&b.cfg, RS_PIPE_STAGE_SCHEDULERD, &p, err, sizeof(err)) != RS_OK)
        return 1;
    rs_role_ready(p->role);
    uint64_t t_exec = rs_clock_ns();
    const char *chat_args[] = {"--chat-template", o.chat, NULL};
    if ((o.chat != NULL && make_conversation() != 0) ||
        fb_start(&b, "tokenizerd", o.chat != NULL ? chat_args : NULL) != 0 ||
        fb_ready(&b, p, RS_PIPE_TOKENIZERD) != 0)
        return 1;
    printf("bench_tokenizerd: model %s, %s %zu bytes%s%s; tokenizerd exec -> ready %.1f ms "
           "(5 ms polls)\n", b.cfg.model_path, use_chat ? "8-message conversation of" : "prompt",
           strlen(prompt), use_chat ? ", rendered with " : "", use_chat ? o.chat : "",
           (double)(rs_clock_ns() - t_exec) / 1e6);
    pthread_t th;
    pthread_create(&th, NULL, freer, p);
    void *zctx = zmq_ctx_new();
    struct rs_wire_buf buf;
    rs_wire_buf_init(&buf, RS_WIRE_CLIENT_MSG_MAX);
    double p50 = 0, rt = 0, rate = 0;
    /* The floor first, on the same idle daemon host, then the daemon's own path. */
    int rc = fb_raw_floor(b.rundir, encode_generate(&buf, 0, 0), 2000, 50000, &rt, &rate);
    if (rc == 0)
        printf("floor, raw ZeroMQ ipc DEALER<->ROUTER with the same message size: round trip "
               "p50 %.1f us, %.0f messages/s one way\n", rt, rate);
    if (rc == 0)
        rc = latency_phase(&b, zctx, o.n_lat, &buf, &p50);
    if (rc == 0)
        rc = load_phase(&b, zctx, &o, &buf);
    atomic_store(&stop_freer, 1);
    pthread_join(th, NULL);
    print_daemon_hists(p);
    double tok = tokenize_us(o.model);
    if (rc == 0)
        printf("=> closed-loop intake p50 is %.2fx the bare round trip (%+.1f us; tokenizing "
               "is %.1f us of it)\n", p50 / rt, p50 - rt, tok);
    rs_wire_buf_fini(&buf);
    rs_wire_buf_fini(&conv_buf);
    zmq_ctx_term(zctx);
    rs_pipe_close(&p);
    fb_fini(&b);
    return rc;
}

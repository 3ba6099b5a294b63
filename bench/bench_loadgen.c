/* SPDX-License-Identifier: MIT */
/*
 * Load generator for a running ringserve instance, after vLLM's
 * benchmark_serving: N clients driven from one event loop, closed loop
 * (C requests always in flight) or Poisson arrivals at a rate, prompt and
 * output lengths fixed or uniform, prompts from real text tokenized with the
 * model's vocab or random token ids, ignore_eos to force the output length,
 * a warm-up phase, then TTFT, TPOT, inter-token latency and end-to-end
 * latency (mean, p50, p90, p99) and request and token throughput. With
 * --start it starts the four daemons itself (tests/pipeline_harness.h).
 * --http drives the same load through gatewayd (OpenAI streaming
 * completions, loadgen_http.h) right after the native ZeroMQ run, so the
 * gateway's cost is read against the native path in the same run; --sweep
 * repeats both over concurrencies and plots them (gnuplot); --idle holds
 * idle keep-alive connections meanwhile; --storm SIGKILLs gatewayd while
 * clients retry with Idempotency-Keys and counts requests run twice;
 * --sweep-step-ms restarts the instance at each schedulerd step-time budget
 * (loadgen_steps.h). Leaves out: goodput SLOs, burstiness other than Poisson.
 */
#include <math.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "client/client.h"
#include "client/options.h"
#include "common/clock.h"
#include "common/json.h"
#include "common/log.h"
#include "common/opt.h"
#include "common/tokenizer.h"
#include "common/vocab.h"
#include "ipc/pipeline_config.h"
#include "ipc/pipeline_metrics.h"
#include "tests/pipeline_harness.h"

struct span {
    uint32_t lo, hi; /* uniform in [lo, hi]; lo == hi: fixed */
};

struct lg_args {
    struct rs_client_gen_args gen;
    struct rs_client_conn_args conn;
    uint32_t clients, concurrency, requests, warmup, vocab, threads;
    struct rs_pipe_args pipe; /* --model and the pipeline options for --start */
    double rate;              /* requests/s; 0 = closed loop */
    struct span prompt_len, output_len;
    const char *model, *text;
    int start, allow_eos, json;
    uint64_t rng;
    const char *http;         /* gatewayd's URL, "start" (loadgen starts one), or NULL */
    const char *sweep;        /* concurrencies "1,4,16", or NULL */
    const char *plot;         /* the sweep's PNG (default build/loadgen-sweep.png) */
    uint32_t idle;            /* idle keep-alive connections held during the HTTP run */
    struct span storm;        /* --storm A:B ms between gatewayd SIGKILLs; 0 = off */
    int no_native;            /* --no-native: only the HTTP run */
    uint32_t rounds;          /* --rounds R: native and HTTP alternated R times */
    const char *sweep_step;   /* --sweep-step-ms budgets "0,20,50", or NULL */
    char step_ms[32];         /* schedulerd --max-step-ms of the next --start ("": its default) */
    int no_burst_lift;        /* --no-burst-lift: passed to schedulerd */
};

struct lg;

/* One request's timeline (client clock, ns) and sizes. */
struct lg_req {
    struct lg *g;
    uint64_t submit_ns, first_ns, last_ns, end_ns;
    uint32_t n_prompt, n_out, retries;
    uint64_t srv_queue_us, srv_ttft_us;
    uint8_t measured, done, failed;
    char *text;               /* the output, kept for the storm's comparison */
    size_t text_len, text_cap;
};

enum lg_mode { LG_NATIVE, LG_HTTP };

struct lg {
    struct lg_args a;
    rs_client **cs;
    struct lg_req *reqs;
    uint32_t n_total, next, in_flight, done;
    uint64_t *itl;           /* inter-token gaps of measured requests, ns */
    size_t n_itl, cap_itl;
    int32_t *corpus;         /* --text tokenized, or NULL */
    size_t n_corpus;
    uint32_t *pool;          /* ids random prompts draw from */
    uint32_t n_pool;
    int32_t bos;
    uint32_t *prompt;        /* one prompt being built */
    uint64_t rng;
    enum lg_mode mode;
    struct rs_harness *h;    /* the instance --start made, else NULL */
    int ep;                  /* HTTP: the epoll set */
    struct sockaddr_in http_addr;
    char http_prefix[128];   /* "/v1" */
    struct hconn *conns;     /* HTTP: one per request in flight */
    uint32_t n_conns;
    int *idle_fds;           /* --idle connections */
    uint16_t gw_port;        /* --http start: the gatewayd loadgen runs */
    pid_t gw_pid;
    unsigned gw_starts;
    uint64_t run_tag;        /* storm: makes this run's Idempotency-Keys unique */
    int keep_text;
    uint64_t next_kill_ns;   /* storm */
    uint64_t kill_rng;       /* the storm's own draws (the prompts' stay the native run's) */
    unsigned kills;
    uint64_t killed_ns;      /* the last SIGKILL, until gatewayd serves again */
    double *restart_ms;      /* storm: SIGKILL -> serving, per kill */
};

static void lg_token_arrived(struct lg *g, struct lg_req *q, uint64_t now);
#include "bench/loadgen_http.h"

static uint64_t rnd(struct lg *g)
{
    g->rng ^= g->rng >> 12; /* xorshift64* */
    g->rng ^= g->rng << 25;
    g->rng ^= g->rng >> 27;
    return g->rng * 2685821657736338717ull;
}

static uint32_t draw(struct lg *g, struct span s)
{
    return s.lo + (uint32_t)(rnd(g) % ((uint64_t)s.hi - s.lo + 1));
}

/* Output arrived for q at `now`: its first token, or an inter-token gap. */
static void lg_token_arrived(struct lg *g, struct lg_req *q, uint64_t now)
{
    if (q->first_ns == 0) {
        q->first_ns = now;
    } else if (q->measured && q->last_ns != 0) {
        if (g->n_itl == g->cap_itl) {
            size_t cap = g->cap_itl ? g->cap_itl * 2 : 4096;
            uint64_t *p = realloc(g->itl, cap * sizeof(*p));
            if (p != NULL) {
                g->itl = p;
                g->cap_itl = cap;
            }
        }
        if (g->n_itl < g->cap_itl)
            g->itl[g->n_itl++] = now - q->last_ns;
    }
    q->last_ns = now;
}

static void on_event(const struct rs_client_event *ev)
{
    struct lg_req *q = ev->user;
    if (ev->n_tokens > 0)
        lg_token_arrived(q->g, q, ev->recv_ns);
    if (q->g->keep_text && ev->text_len > 0)
        hbuf_put(&q->text, &q->text_len, &q->text_cap, ev->text, ev->text_len);
    if (ev->kind != RS_CLIENT_EV_FINAL)
        return;
    q->end_ns = ev->recv_ns;
    q->n_out = ev->usage.completion_tokens;
    q->srv_queue_us = ev->timings.queue_us;
    q->srv_ttft_us = ev->timings.ttft_us;
    q->failed = ev->status != RS_CLIENT_OK || ev->finish_reason == RS_WIRE_FINISH_ERROR;
    if (q->failed)
        fprintf(stderr, "loadgen: request '%s' failed: %s %s %s\n", ev->id,
                rs_client_status_name(ev->status), rs_wire_code_name(ev->error), ev->message);
    q->done = 1;
    q->g->done++;
    q->g->in_flight--;
}

/* --- prompts -------------------------------------------------------------------------------- */

/* Tokenizes --text once with the model's own vocab (no BOS: prompts add their own). */
static int tokenize_text(struct lg *g, const rs_vocab *v)
{
    FILE *f = fopen(g->a.text, "rb");
    char *buf = malloc(64u << 20);
    size_t len = f != NULL && buf != NULL ? fread(buf, 1, (64u << 20) - 1, f) : 0;
    rs_tokenizer *t = NULL;
    int rc = -1;
    g->corpus = malloc(sizeof(int32_t) * (len + 1));
    if (len > 0 && g->corpus != NULL && rs_tokenizer_create(v, &t) == RS_OK &&
        rs_tokenizer_encode(t, buf, len, 0, g->corpus, len + 1, &g->n_corpus) == RS_OK &&
        g->n_corpus > 0)
        rc = 0;
    else
        fprintf(stderr, "loadgen: cannot read or tokenize %s\n", g->a.text);
    rs_tokenizer_destroy(&t);
    free(buf);
    if (f != NULL)
        fclose(f);
    return rc;
}

/* Random prompts draw from the model's ordinary tokens (normal and byte), never control ones. */
static int load_vocab(struct lg *g)
{
    char err[256];
    rs_vocab *v = NULL;
    g->bos = RS_VOCAB_NONE;
    if (g->a.model == NULL) {
        g->pool = malloc(sizeof(uint32_t) * g->a.vocab);
        for (uint32_t i = 3; g->pool != NULL && i < g->a.vocab; i++)
            g->pool[g->n_pool++] = i; /* no vocab at hand: skip the usual unk/bos/eos ids */
        return g->n_pool > 0 ? 0 : -1;
    }
    if (rs_vocab_load_file(g->a.model, &v, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "loadgen: %s: %s\n", g->a.model, err);
        return -1;
    }
    uint32_t n = rs_vocab_n_tokens(v);
    g->pool = malloc(sizeof(uint32_t) * n);
    for (uint32_t i = 0; g->pool != NULL && i < n; i++) {
        enum rs_token_type t = rs_vocab_token_type(v, (int32_t)i);
        if ((t == RS_TOKEN_NORMAL || t == RS_TOKEN_BYTE) && !rs_vocab_is_eog(v, (int32_t)i))
            g->pool[g->n_pool++] = i;
    }
    g->bos = rs_vocab_add_bos(v) ? rs_vocab_bos(v) : RS_VOCAB_NONE;
    int ok = g->a.text == NULL || tokenize_text(g, v) == 0;
    rs_vocab_destroy(&v);
    return ok && g->n_pool > 0 ? 0 : -1;
}

/* A prompt of exactly n ids: BOS (when the vocab adds one), then text or random tokens. */
static void build_prompt(struct lg *g, uint32_t n)
{
    uint32_t k = 0;
    if (g->bos != RS_VOCAB_NONE)
        g->prompt[k++] = (uint32_t)g->bos;
    size_t at = g->n_corpus > 0 ? rnd(g) % g->n_corpus : 0;
    for (; k < n; k++)
        g->prompt[k] = g->n_corpus > 0 ? (uint32_t)g->corpus[at++ % g->n_corpus]
                                       : g->pool[rnd(g) % g->n_pool];
}

/* --- running -------------------------------------------------------------------------------- */

/* The request i would be: its generate (prompt in g->prompt) and its timeline reset. */
static void make_request(struct lg *g, uint32_t i, int measured, struct rs_wire_generate *gen)
{
    struct lg_req *q = &g->reqs[i];
    uint32_t n = draw(g, g->a.prompt_len);
    *gen = g->a.gen.gen;
    build_prompt(g, n);
    gen->has |= RS_WIRE_GEN_PROMPT_IDS | RS_WIRE_GEN_MAX_TOKENS | RS_WIRE_GEN_STREAM;
    gen->prompt_ids = (struct rs_wire_ids){.n = n, .vals = g->prompt};
    gen->max_tokens = draw(g, g->a.output_len);
    gen->stream = true;
    if (!g->a.allow_eos) {
        gen->has |= RS_WIRE_GEN_IGNORE_EOS;
        gen->ignore_eos = true;
    }
    if (!(gen->has & RS_WIRE_GEN_TEMPERATURE)) {
        gen->has |= RS_WIRE_GEN_TEMPERATURE;
        gen->temperature = 0;
    }
    char *text = q->text;
    size_t cap = q->text_cap;
    *q = (struct lg_req){.g = g, .n_prompt = n, .measured = (uint8_t)measured, .text = text,
                         .text_cap = cap};
    q->submit_ns = rs_clock_ns();
}

static struct hconn *free_conn(struct lg *g)
{
    for (uint32_t i = 0; i < g->n_conns; i++)
        if (g->conns[i].state == H_FREE && g->conns[i].retry_at == 0)
            return &g->conns[i];
    return NULL;
}

static int submit(struct lg *g, uint32_t i, int measured)
{
    struct rs_wire_generate gen;
    make_request(g, i, measured, &gen);
    rs_err rc = RS_OK;
    if (g->mode == LG_HTTP) {
        struct hconn *h = free_conn(g);
        rc = h != NULL && hc_request(h, i, &gen) == 0 ? RS_OK : RS_EIO;
    } else {
        rc = rs_client_submit(g->cs[i % g->a.clients], &gen, NULL, on_event, &g->reqs[i], NULL);
    }
    if (rc != RS_OK) {
        fprintf(stderr, "loadgen: submit: %s\n", rs_strerror(rc));
        return -1;
    }
    g->in_flight++;
    return 0;
}

/* A response ended (ok: [DONE] and the last chunk came). Storm: a failure is retried. */
static void hc_finish(struct hconn *h, int ok, uint64_t now)
{
    struct lg *g = h->g;
    struct lg_req *q = &g->reqs[h->req];
    ok = ok && h->status == 200 && !q->failed;
    if (!ok || h->status != 200)
        hc_close(h);
    h->have_head = h->done = 0;
    h->sse_len = 0;
    if (!ok && g->a.storm.lo > 0) { /* the same request, the same key, a moment later */
        q->retries++;
        q->first_ns = q->last_ns = 0;
        q->n_out = 0;
        q->text_len = 0;
        q->failed = 0;
        h->retry_at = now + 20000000ull;
        h->state = H_FREE;
        return;
    }
    if (!ok)
        fprintf(stderr, "loadgen: HTTP request %u failed (status %d)\n", h->req, h->status);
    q->end_ns = now;
    q->failed = !ok;
    q->done = 1;
    g->done++;
    g->in_flight--;
    h->state = H_FREE;
    h->retry_at = 0;
}

/* Storm: SIGKILL gatewayd every A..B ms and restart it at once, timing its return. */
static void storm_tick(struct lg *g, uint64_t now)
{
    if (g->killed_ns != 0 && gw_probe(g->gw_port)) {
        g->restart_ms[g->kills - 1] = (double)(rs_clock_ns() - g->killed_ns) / 1e6;
        g->killed_ns = 0;
    }
    if (g->killed_ns != 0 || now < g->next_kill_ns)
        return;
    gw_kill(g);
    g->killed_ns = rs_clock_ns();
    gw_spawn(g, g->h, 0);
    g->kills++;
    g->kill_rng ^= g->kill_rng << 13;
    g->kill_rng ^= g->kill_rng >> 7;
    g->kill_rng ^= g->kill_rng << 17;
    g->next_kill_ns = now + 1000000ull * (g->a.storm.lo + g->kill_rng % (g->a.storm.hi -
                                                                          g->a.storm.lo + 1));
}

static int http_poll(struct lg *g, int wait_ms)
{
    struct epoll_event evs[256];
    int n = epoll_wait(g->ep, evs, 256, wait_ms > 20 ? 20 : wait_ms);
    uint64_t now = rs_clock_ns();
    for (int i = 0; i < n; i++)
        hc_on_event(evs[i].data.ptr, evs[i].events, now);
    for (uint32_t i = 0; i < g->n_conns; i++) {
        struct hconn *h = &g->conns[i];
        if (h->retry_at != 0 && now >= h->retry_at) {
            h->retry_at = 0;
            h->out_off = 0;
            h->state = H_CONNECTING;
            if (hc_connect(h) != 0)
                h->retry_at = now + 20000000ull;
        }
    }
    if (g->a.storm.lo > 0 && g->kills < 100000)
        storm_tick(g, rs_clock_ns());
    return n < 0 && errno != EINTR ? -1 : 0;
}

/* Requests [first, first + count): closed loop, or Poisson arrivals when rate > 0. */
static int run_phase(struct lg *g, uint32_t first, uint32_t count, int measured, double rate)
{
    uint32_t end = first + count, cap = g->a.concurrency;
    uint64_t next_arrival = rs_clock_ns();
    g->next = first;
    while (g->done < end) {
        uint64_t now = rs_clock_ns();
        while (g->next < end && g->in_flight < cap && (rate <= 0 || now >= next_arrival) &&
               (g->mode == LG_NATIVE || free_conn(g) != NULL)) {
            if (submit(g, g->next++, measured) != 0)
                return -1;
            if (rate > 0) { /* exponential gaps: a Poisson process */
                double u = ((double)(rnd(g) >> 11) + 1.0) / 9007199254740993.0;
                next_arrival += (uint64_t)(-log(u) / rate * 1e9);
            }
        }
        int wait = 1000;
        if (rate > 0 && g->next < end && g->in_flight < cap)
            wait = next_arrival > now ? (int)((next_arrival - now) / 1000000 + 1) : 0;
        int rc = g->mode == LG_HTTP ? http_poll(g, wait)
                                    : rs_client_poll_set(g->cs, g->a.clients, wait);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* --- figures -------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Percentile p (0..100) of sorted v[0..n), linearly interpolated (numpy's default). */
static double pct(const double *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    double pos = p / 100.0 * (double)(n - 1);
    size_t lo = (size_t)pos;
    return lo + 1 < n ? v[lo] + (v[lo + 1] - v[lo]) * (pos - (double)lo) : v[lo];
}

struct dist {
    double mean, p50, p90, p99;
    size_t n;
};

static struct dist summarize(double *v, size_t n)
{
    struct dist d = {.n = n};
    qsort(v, n, sizeof(double), cmp_double);
    for (size_t i = 0; i < n; i++)
        d.mean += v[i] / (double)n;
    d.p50 = pct(v, n, 50);
    d.p90 = pct(v, n, 90);
    d.p99 = pct(v, n, 99);
    return d;
}

static void print_dist(const char *title, const char *name, struct dist d)
{
    printf("%-50s\n", title);
    printf("Mean %s (ms):%*s%.2f\n", name, (int)(33 - strlen(name)), "", d.mean);
    printf("P50 %s (ms):%*s%.2f\n", name, (int)(34 - strlen(name)), "", d.p50);
    printf("P90 %s (ms):%*s%.2f\n", name, (int)(34 - strlen(name)), "", d.p90);
    printf("P99 %s (ms):%*s%.2f\n", name, (int)(34 - strlen(name)), "", d.p99);
}

/* A distribution as {mean, p50, p90, p99}, rounded to `decimals` places. */
static json_t *dist_json(const struct dist *d, int decimals)
{
    return json_pack("{s:o,s:o,s:o,s:o}", "mean", rs_json_real(d->mean, decimals), "p50",
                     rs_json_real(d->p50, decimals), "p90", rs_json_real(d->p90, decimals),
                     "p99", rs_json_real(d->p99, decimals));
}

/* Per-request figures of the measured, successful requests. */
struct figures {
    struct dist ttft, tpot, itl, e2e;
    uint32_t ok, failed;
    uint64_t in_tokens, out_tokens, t0, t1;
    double srv_queue_ms, srv_ttft_ms;
};

static int collect(struct lg *g, uint32_t first, struct figures *f)
{
    size_t n = g->n_total - first, k = 0, kt = 0;
    double *ttft = calloc(n + 1, sizeof(double)), *tpot = calloc(n + 1, sizeof(double));
    double *e2e = calloc(n + 1, sizeof(double)), *itl = calloc(g->n_itl + 1, sizeof(double));
    if (ttft == NULL || tpot == NULL || e2e == NULL || itl == NULL)
        return -1;
    memset(f, 0, sizeof(*f));
    f->t0 = UINT64_MAX;
    for (uint32_t i = first; i < g->n_total; i++) {
        const struct lg_req *q = &g->reqs[i];
        f->t0 = q->submit_ns < f->t0 ? q->submit_ns : f->t0;
        f->t1 = q->end_ns > f->t1 ? q->end_ns : f->t1;
        if (q->failed || q->first_ns == 0) {
            f->failed++;
            continue;
        }
        f->ok++;
        f->in_tokens += q->n_prompt;
        f->out_tokens += q->n_out;
        ttft[k] = (double)(q->first_ns - q->submit_ns) / 1e6;
        e2e[k++] = (double)(q->end_ns - q->submit_ns) / 1e6;
        if (q->n_out > 1) /* vLLM's TPOT: (e2e - ttft) / (output tokens - 1) */
            tpot[kt++] = (double)(q->end_ns - q->first_ns) / 1e6 / (double)(q->n_out - 1);
        f->srv_queue_ms += (double)q->srv_queue_us / 1e3;
        f->srv_ttft_ms += (double)q->srv_ttft_us / 1e3;
    }
    for (size_t i = 0; i < g->n_itl; i++)
        itl[i] = (double)g->itl[i] / 1e6;
    f->ttft = summarize(ttft, k);
    f->e2e = summarize(e2e, k);
    f->tpot = summarize(tpot, kt);
    f->itl = summarize(itl, g->n_itl);
    if (f->ok > 0) {
        f->srv_queue_ms /= f->ok;
        f->srv_ttft_ms /= f->ok;
    }
    free(ttft);
    free(tpot);
    free(e2e);
    free(itl);
    return 0;
}

static void report(const struct lg *g, const struct figures *f)
{
    double secs = f->t1 > f->t0 ? (double)(f->t1 - f->t0) / 1e9 : 0;
    printf("============ Serving Benchmark Result ============\n");
    printf("%-40s %s\n", "Path:", g->mode == LG_HTTP ? "HTTP (gatewayd, OpenAI streaming)"
                                                     : "native (ZeroMQ client library)");
    printf("%-40s %u (%u clients, %s)\n", "Successful requests:", f->ok, g->a.clients,
           g->a.rate > 0 ? "Poisson arrivals" : "closed loop");
    if (g->a.rate > 0)
        printf("%-40s %.2f req/s, at most %u in flight\n", "Arrival rate:", g->a.rate,
               g->a.concurrency);
    else
        printf("%-40s %u\n", "Concurrency:", g->a.concurrency);
    printf("%-40s %u\n", "Failed requests:", f->failed);
    printf("%-40s %.2f\n", "Benchmark duration (s):", secs);
    printf("%-40s %llu\n", "Total input tokens:", (unsigned long long)f->in_tokens);
    printf("%-40s %llu\n", "Total generated tokens:", (unsigned long long)f->out_tokens);
    printf("%-40s %.2f\n", "Request throughput (req/s):", secs > 0 ? f->ok / secs : 0);
    printf("%-40s %.2f\n", "Output token throughput (tok/s):",
           secs > 0 ? (double)f->out_tokens / secs : 0);
    printf("%-40s %.2f\n", "Total token throughput (tok/s):",
           secs > 0 ? (double)(f->in_tokens + f->out_tokens) / secs : 0);
    print_dist("---------------Time to First Token----------------", "TTFT", f->ttft);
    print_dist("-----Time per Output Token (excl. 1st token)------", "TPOT", f->tpot);
    print_dist("---------------Inter-token Latency----------------", "ITL", f->itl);
    print_dist("----------------End-to-end Latency----------------", "E2EL", f->e2e);
    if (g->mode == LG_NATIVE) {
        printf("-------------Server side (from finals)-------------\n");
        printf("%-40s %.2f\n", "Mean queue time (ms):", f->srv_queue_ms);
        printf("%-40s %.2f\n", "Mean server TTFT (ms):", f->srv_ttft_ms);
    }
    struct rusage ru; /* this process only: the clients' cost, not the daemons' */
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
                 (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    printf("%-40s %.2f (%.1f%% of one core over the run)\n", "Load generator CPU (s):", cpu,
           secs > 0 ? 100.0 * cpu / secs : 0);
    printf("==================================================\n");
    if (!g->a.json)
        return;
    rs_json_print(stdout, json_pack("{s:I,s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:s}", "requests",
                                    (json_int_t)f->ok, "failed", (json_int_t)f->failed,
                                    "duration_s", rs_json_real(secs, 3), "req_per_s",
                                    rs_json_real(secs > 0 ? f->ok / secs : 0, 3),
                                    "output_tok_per_s",
                                    rs_json_real(secs > 0 ? (double)f->out_tokens / secs : 0, 2),
                                    "ttft_ms", dist_json(&f->ttft, 2), "tpot_ms",
                                    dist_json(&f->tpot, 3), "itl_ms", dist_json(&f->itl, 3),
                                    "e2e_ms", dist_json(&f->e2e, 2), "path",
                                    g->mode == LG_HTTP ? "http" : "native"));
}

/* --- arguments ------------------------------------------------------------------------------- */

static const char usage[] =
    "usage: bench_loadgen [options]\n"
    "Drives a ringserve instance with N clients and prints TTFT, TPOT, inter-token\n"
    "and end-to-end latency (mean, p50, p90, p99) and throughput, as vLLM's\n"
    "benchmark_serving. Prompts are prompt_ids of exactly --prompt-len tokens (BOS\n"
    "first when the vocab adds one): windows of --text tokenized with the model's\n"
    "vocab, else random ordinary tokens. Requests are greedy with ignore_eos unless\n"
    "the flags say otherwise, so outputs are --output-len tokens long. Without\n"
    "--start it connects with the connection flags. With --http the same load then\n"
    "goes through gatewayd (gatewayd/README.md).\n";

static int parse_span(void *dst, const struct rs_opt *o, const char *v, char *err, size_t len)
{
    struct span *s = (struct span *)((char *)dst + o->off);
    char *end;
    unsigned long a = strtoul(v, &end, 10), b = a;
    if (*end == ':')
        b = strtoul(end + 1, &end, 10);
    if (*end != '\0' || v[0] == '-' || a == 0 || b < a || b > (1u << 20)) {
        snprintf(err, len, "option --%s: '%.40s' is not N or A:B with 1 <= A <= B <= 2^20",
                 o->name, v);
        return -1;
    }
    *s = (struct span){(uint32_t)a, (uint32_t)b};
    return 0;
}

#define LG(f) offsetof(struct lg_args, f)
#define LG_U32(nm, f, lo, h)                                                                     \
    {.name = nm, .kind = RS_OPT_U32, .off = LG(f), .min = lo, .max = 1000000, .arg = "N",        \
     .help = h}

static const struct rs_opt load_opts[] = {
    LG_U32("clients", clients, 1, "client connections, one event loop (default 16)"),
    LG_U32("concurrency", concurrency, 1,
           "closed loop: N requests in flight (default --clients);\n"
           "with --rate: at most N in flight (default unlimited)"),
    {.name = "rate", .kind = RS_OPT_DOUBLE, .off = LG(rate), .min = 0, .max = 1000000,
     .arg = "R", .help = "Poisson arrivals, R requests/s (default: closed loop)"},
    LG_U32("requests", requests, 1, "measured requests (default 64)"),
    LG_U32("warmup", warmup, 0, "requests run first and not measured (default --clients)"),
    {.name = "prompt-len", .kind = RS_OPT_CALL, .parse = parse_span, .off = LG(prompt_len),
     .arg = "N|A:B", .help = "prompt tokens, fixed or uniform in [A, B] (default 128)"},
    {.name = "output-len", .kind = RS_OPT_CALL, .parse = parse_span, .off = LG(output_len),
     .arg = "N|A:B", .help = "max_tokens, fixed or uniform (default 128)"},
    {.name = "allow-eos", .kind = RS_OPT_FLAG, .off = LG(allow_eos), .val = 1,
     .help = "let requests stop at EOS (default: ignore_eos)"},
    LG_U32("vocab", vocab, 4, "without --model: random ids in [3, N)"),
    {.name = "text", .kind = RS_OPT_ARG, .off = LG(text), .arg = "FILE",
     .help = "real text for prompts (needs --model)"},
    {.name = "rng-seed", .kind = RS_OPT_U64, .off = LG(rng), .min = 1, .max = INT64_MAX,
     .arg = "N", .help = "prompts, lengths and arrivals (default 1)"},
    {.name = "json", .kind = RS_OPT_FLAG, .off = LG(json), .val = 1,
     .help = "also print the figures as one JSON line"},
    {.name = "start", .kind = RS_OPT_FLAG, .off = LG(start), .val = 1,
     .help = "start the four daemons on --model (a private instance)"},
    LG_U32("threads", threads, 1, "launcherd threads with --start (default 2)"),
    {0},
};

/* The HTTP side: gatewayd driven with the native run's prompts (loadgen_http.h). */
static const struct rs_opt http_opts[] = {
    {.name = "http", .kind = RS_OPT_ARG, .off = LG(http), .arg = "URL|start",
     .help = "after the native run, the same load (same prompts) as\n"
             "OpenAI streaming completions to gatewayd at URL\n"
             "(http://127.0.0.1:8080/v1), or to one loadgen starts on\n"
             "its --start instance; then HTTP against native"},
    {.name = "no-native", .kind = RS_OPT_FLAG, .off = LG(no_native), .val = 1,
     .help = "only the HTTP run"},
    {.name = "sweep", .kind = RS_OPT_ARG, .off = LG(sweep), .arg = "C1,C2,...",
     .help = "both runs at each concurrency (clients = C): a table,\n"
             "and a PNG chart (gnuplot) of throughput and TTFT/TPOT"},
    {.name = "sweep-step-ms", .kind = RS_OPT_ARG, .off = LG(sweep_step), .arg = "MS1,MS2,...",
     .help = "(--start) the native run at each schedulerd step-time\n"
             "budget (--max-step-ms; 0: off), the instance restarted\n"
             "per budget: throughput, TTFT and ITL p50/p99 per budget"},
    {.name = "no-burst-lift", .kind = RS_OPT_FLAG, .off = LG(no_burst_lift), .val = 1,
     .help = "(--start) schedulerd keeps its step-time budget in\n"
             "bursts too (its --no-burst-lift)"},
    {.name = "plot", .kind = RS_OPT_ARG, .off = LG(plot), .arg = "FILE",
     .help = "the chart (default build/loadgen-sweep.png)"},
    {.name = "rounds", .kind = RS_OPT_U32, .off = LG(rounds), .min = 1, .max = 100000,
     .arg = "R",
     .help = "native and HTTP runs alternated R times (the host's\n"
             "load drifts); the comparison per round and the median"},
    {.name = "idle", .kind = RS_OPT_U32, .off = LG(idle), .min = 0, .max = 100000, .arg = "N",
     .help = "hold N idle keep-alive connections to gatewayd during\n"
             "the HTTP run (each answers twice; threads and RSS)"},
    {.name = "storm", .kind = RS_OPT_CALL, .parse = parse_span, .off = LG(storm),
     .arg = "A:B",
     .help = "(--start, --http start) SIGKILL gatewayd every A..B ms\n"
             "while clients retry with Idempotency-Keys; counts runs\n"
             "per request and compares outputs with the native run"},
    {0},
};

/* --model builds the prompts; the sizes go to the daemons --start runs. */
static const char *const pipe_taken[] = {"model", "ctx", "max-seqs", "max-batched-tokens",
                                         "kv-blocks", NULL};

static int check_args(struct lg_args *a, char *err, size_t len)
{
    if (a->clients == 0)
        a->clients = 16;
    if (a->concurrency == 0)
        a->concurrency = a->rate > 0 ? UINT32_MAX : a->clients;
    if (a->warmup == UINT32_MAX)
        a->warmup = a->clients;
    if (a->requests == 0) {
        snprintf(err, len, "--requests must be at least 1");
        return -1;
    }
    if (a->http != NULL && strcmp(a->http, "start") == 0 && !a->start) {
        snprintf(err, len, "--http start needs --start");
        return -1;
    }
    if ((a->storm.lo > 0 || a->idle > 0) && a->http == NULL) {
        snprintf(err, len, "--storm and --idle need --http");
        return -1;
    }
    if (a->storm.lo > 0 && (a->http == NULL || strcmp(a->http, "start") != 0)) {
        snprintf(err, len, "--storm needs --start --http start (loadgen must own gatewayd)");
        return -1;
    }
    if (a->sweep_step != NULL && (!a->start || a->sweep != NULL || a->http != NULL)) {
        snprintf(err, len, "--sweep-step-ms needs --start, without --sweep and --http");
        return -1;
    }
    if (a->no_native && (a->http == NULL || a->storm.lo > 0)) {
        snprintf(err, len, "--no-native needs --http, and --storm compares with the native run");
        return -1;
    }
    if (a->model == NULL && (a->start || a->text != NULL || a->vocab < 4)) {
        snprintf(err, len, "--start and --text need --model; random prompts need --model or "
                           "--vocab N");
        return -1;
    }
    return 0;
}

/* 0 parsed, 1 --help, 2 error printed. */
static int parse_args(int argc, char **argv, struct lg_args *a)
{
    char err[512];
    memset(a, 0, sizeof(*a));
    rs_client_gen_args_init(&a->gen);
    rs_client_conn_args_init(&a->conn);
    rs_pipe_args_init(&a->pipe);
    a->requests = 64;
    a->warmup = UINT32_MAX;
    a->threads = 2;
    a->rng = 1;
    a->prompt_len = a->output_len = (struct span){128, 128};
    a->rounds = 1;
    const struct rs_opt_group g[] = {
        {"load", load_opts, a, NULL},
        {"model and instance (--start)", rs_pipe_opts, &a->pipe, pipe_taken},
        {"HTTP (gatewayd)", http_opts, a, NULL},
        {RS_CLIENT_GEN_TITLE, rs_client_gen_opts, &a->gen, NULL},
        {RS_CLIENT_CONN_TITLE, rs_client_conn_opts, &a->conn, NULL},
    };
    int r = rs_opt_parse(g, 5, argc, argv, 0, NULL, err, sizeof(err));
    if (r == RS_OPT_HELP) {
        rs_opt_help(stdout, usage, g, 5);
        return 1;
    }
    if (r == RS_OPT_OK)
        a->model = a->pipe.cfg.model_path[0] != '\0' ? a->pipe.cfg.model_path : NULL;
    if (r != RS_OPT_OK || check_args(a, err, sizeof(err)) != 0) {
        fprintf(stderr, "bench_loadgen: %s\n", err);
        return 2;
    }
    return 0;
}

/* --- main ------------------------------------------------------------------------------------ */

static int start_instance(struct lg_args *a, struct rs_harness *h)
{
    struct rs_harness_opts o = {0};
    o.model = a->model;
    o.n_ctx = a->pipe.cfg.n_ctx;
    o.max_seqs = a->pipe.cfg.max_seqs;
    o.max_batched_tokens = a->pipe.cfg.max_batched_tokens;
    o.n_kv_blocks = a->pipe.cfg.n_kv_blocks;
    o.max_requests = a->clients * 4 > 1024 ? a->clients * 4 : 1024;
    o.launcher_threads = a->threads;
    o.fast_kernels = 1;
    o.ready_timeout_ms = 120000;
    int nx = 0;
    if (a->step_ms[0] != '\0') {
        o.extra[RS_PIPE_STAGE_SCHEDULERD][nx++] = "--max-step-ms";
        o.extra[RS_PIPE_STAGE_SCHEDULERD][nx++] = a->step_ms;
    }
    if (a->no_burst_lift)
        o.extra[RS_PIPE_STAGE_SCHEDULERD][nx++] = "--no-burst-lift";
    char bindir[512];
    ssize_t n = readlink("/proc/self/exe", bindir, sizeof(bindir) - 1);
    if (n > 0 && getenv("RS_BIN") == NULL) { /* the daemons sit beside this program */
        bindir[n] = '\0';
        *strrchr(bindir, '/') = '\0';
        o.bindir = bindir;
    }
    uint64_t t0 = rs_clock_ms();
    if (rs_harness_start(h, &o) != RS_OK) {
        fprintf(stderr, "bench_loadgen: the daemons did not start (logs above)\n");
        return -1;
    }
    fprintf(stderr, "loadgen: started the four daemons on %s in %llu ms (launcherd %u "
            "threads)\n", a->model, (unsigned long long)(rs_clock_ms() - t0), a->threads);
    a->conn.opts.rundir = h->rundir;
    return 0;
}

static void close_clients(struct lg *g)
{
    for (uint32_t i = 0; g->cs != NULL && i < g->a.clients; i++)
        rs_client_destroy(&g->cs[i]);
    free(g->cs);
    g->cs = NULL;
}

static int connect_clients(struct lg *g)
{
    g->cs = calloc(g->a.clients, sizeof(*g->cs));
    if (g->cs == NULL)
        return -1;
    for (uint32_t i = 0; i < g->a.clients; i++)
        if (rs_client_create(&g->a.conn.opts, &g->cs[i]) != RS_OK)
            return -1;
    uint64_t end = rs_clock_ms() + 30000;
    for (uint32_t up = 0; up < g->a.clients && rs_clock_ms() < end;) {
        rs_client_poll_set(g->cs, g->a.clients, 50);
        up = 0;
        for (uint32_t i = 0; i < g->a.clients; i++)
            up += rs_client_connected(g->cs[i]);
    }
    for (uint32_t i = 0; i < g->a.clients; i++)
        if (!rs_client_connected(g->cs[i])) {
            fprintf(stderr, "bench_loadgen: no answer from postprocd after 30 s\n");
            return -1;
        }
    return 0;
}

/* HTTP connections for up to max(concurrency, clients) requests in flight. */
static int http_conns(struct lg *g)
{
    for (uint32_t i = 0; g->conns != NULL && i < g->n_conns; i++) {
        hc_close(&g->conns[i]);
        free(g->conns[i].out);
        free(g->conns[i].in);
        free(g->conns[i].sse);
    }
    free(g->conns);
    uint32_t n = g->a.concurrency > g->a.clients ? g->a.concurrency : g->a.clients;
    g->n_conns = n > 4096 ? 4096 : n;
    g->conns = calloc(g->n_conns, sizeof(*g->conns));
    for (uint32_t i = 0; g->conns != NULL && i < g->n_conns; i++) {
        g->conns[i].g = g;
        g->conns[i].fd = -1;
    }
    return g->conns != NULL ? 0 : -1;
}

static int http_setup(struct lg *g)
{
    char url[160];
    if (strcmp(g->a.http, "start") == 0) {
        g->gw_port = free_port();
        if (g->gw_port == 0 || gw_spawn(g, g->h, 1) != 0) {
            fprintf(stderr, "bench_loadgen: gatewayd did not start (log in %s)\n", g->h->dir);
            return -1;
        }
        snprintf(url, sizeof(url), "http://127.0.0.1:%u/v1", g->gw_port);
        fprintf(stderr, "loadgen: started gatewayd on %s\n", url);
    } else {
        snprintf(url, sizeof(url), "%s", g->a.http);
    }
    if (http_url(url, &g->http_addr, g->http_prefix, sizeof(g->http_prefix)) != 0) {
        fprintf(stderr, "bench_loadgen: --http: '%s' is not http://IPV4:PORT[/v1]\n", url);
        return -1;
    }
    g->ep = epoll_create1(EPOLL_CLOEXEC);
    return g->ep >= 0 ? http_conns(g) : -1;
}

/* --idle N: connections that each answered one request, then sit idle. */
static int idle_open(struct lg *g)
{
    static const char req[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    char buf[2048];
    g->idle_fds = calloc(g->a.idle, sizeof(int));
    for (uint32_t i = 0; g->idle_fds != NULL && i < g->a.idle; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        g->idle_fds[i] = fd;
        struct timeval tv = {.tv_sec = 30};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if (fd < 0 || connect(fd, (struct sockaddr *)&g->http_addr, sizeof(g->http_addr)) != 0 ||
            send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) <= 0 || recv(fd, buf, sizeof(buf), 0) < 12 ||
            strncmp(buf, "HTTP/1.1 200", 12) != 0) {
            fprintf(stderr, "bench_loadgen: idle connection %u failed: %s\n", i, strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* Each idle connection answers a second request; reports gatewayd's threads and memory. */
static void idle_report(struct lg *g)
{
    static const char req[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    char buf[2048];
    uint32_t ok = 0;
    long rss = 0;
    int threads = g->gw_pid > 0 ? proc_threads(g->gw_pid, &rss) : -1;
    for (uint32_t i = 0; i < g->a.idle; i++)
        ok += send(g->idle_fds[i], req, sizeof(req) - 1, MSG_NOSIGNAL) > 0 &&
              recv(g->idle_fds[i], buf, sizeof(buf), 0) >= 12 &&
              strncmp(buf, "HTTP/1.1 200", 12) == 0;
    printf("------------Idle keep-alive connections------------\n");
    printf("%-40s %u of %u (held through the HTTP run)\n", "Answered again:", ok, g->a.idle);
    if (threads >= 0)
        printf("%-40s %d threads, %.1f MiB resident\n", "gatewayd:", threads, rss / 1024.0);
    for (uint32_t i = 0; i < g->a.idle; i++)
        close(g->idle_fds[i]);
    free(g->idle_fds);
    g->idle_fds = NULL;
}

/* Warm-up, then the measured requests, on one path; prints its report. */
static int run_mode(struct lg *g, enum lg_mode mode, struct figures *f)
{
    g->mode = mode;
    g->rng = g->a.rng; /* the same prompts and lengths on both paths */
    g->n_total = g->a.warmup + g->a.requests;
    g->n_itl = 0;
    g->next = g->done = g->in_flight = 0;
    if (mode == LG_NATIVE && g->cs == NULL && connect_clients(g) != 0)
        return -1;
    if (g->a.warmup > 0 && run_phase(g, 0, g->a.warmup, 0, 0) != 0)
        return -1;
    double cpu0 = mode == LG_HTTP && g->gw_pid > 0 ? proc_cpu_s(g->gw_pid) : -1;
    if (run_phase(g, g->a.warmup, g->a.requests, 1, g->a.rate) != 0 ||
        collect(g, g->a.warmup, f) != 0)
        return -1;
    report(g, f);
    double cpu1 = cpu0 >= 0 ? proc_cpu_s(g->gw_pid) : -1;
    if (cpu1 >= 0 && f->out_tokens > 0) /* the gateway's own cost, whatever the host's load */
        printf("%-40s %.3f s for %llu tokens = %.1f us/token (%.2f%% of a core at 255 tok/s)\n",
               "gatewayd CPU over the measured run:", cpu1 - cpu0,
               (unsigned long long)f->out_tokens, (cpu1 - cpu0) * 1e6 / (double)f->out_tokens,
               (cpu1 - cpu0) / (double)f->out_tokens * 255 * 100);
    return 0;
}

static double tok_per_s(const struct figures *f)
{
    double secs = f->t1 > f->t0 ? (double)(f->t1 - f->t0) / 1e9 : 0;
    return secs > 0 ? (double)f->out_tokens / secs : 0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, uint32_t n)
{
    qsort(v, n, sizeof(double), cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Per round and the median over rounds: HTTP / native throughput, TTFT and TPOT deltas. */
static void compare(const struct figures *n, const struct figures *h, uint32_t rounds)
{
    double ratio[64], dttft[64], dtpot[64];
    printf("------------HTTP against native (same run)---------\n");
    for (uint32_t r = 0; r < rounds; r++) {
        ratio[r] = tok_per_s(&n[r]) > 0 ? tok_per_s(&h[r]) / tok_per_s(&n[r]) : 0;
        dttft[r] = h[r].ttft.p50 - n[r].ttft.p50;
        dtpot[r] = h[r].tpot.p50 - n[r].tpot.p50;
        if (rounds > 1)
            printf("round %u: %.1f / %.1f tok/s = %.3fx, median TTFT %+.2f ms, TPOT %+.3f ms\n",
                   r + 1, tok_per_s(&h[r]), tok_per_s(&n[r]), ratio[r], dttft[r], dtpot[r]);
    }
    const char *over = rounds > 1 ? " (median of the rounds)" : "";
    printf("Output throughput, HTTP / native:        %.3fx (goal >= 0.95)%s\n",
           median(ratio, rounds), over);
    printf("Median TTFT, HTTP - native (ms):         %+.2f (goal <= 1 ms)%s\n",
           median(dttft, rounds), over);
    printf("Median TPOT, HTTP - native (ms):         %+.3f%s\n", median(dtpot, rounds), over);
    printf("==================================================\n");
}

/* --- the storm ------------------------------------------------------------------------------ */

static int storm(struct lg *g)
{
    struct figures f;
    uint32_t n = g->a.warmup + g->a.requests;
    char **native = calloc(n, sizeof(char *));
    size_t *native_len = calloc(n, sizeof(size_t));
    g->keep_text = 1;
    if (native == NULL || native_len == NULL || run_mode(g, LG_NATIVE, &f) != 0)
        return 1;
    for (uint32_t i = 0; i < n; i++) { /* the references: the same prompts, without crashes */
        native[i] = g->reqs[i].text;
        native_len[i] = g->reqs[i].text_len;
        g->reqs[i].text = NULL;
        g->reqs[i].text_cap = g->reqs[i].text_len = 0;
    }
    _Atomic uint64_t *acc = &rs_harness_view(g->h)->metrics->stage[RS_PIPE_STAGE_TOKENIZERD]
                                 .counter[RS_M_TOK_ACCEPTED];
    uint64_t acc0 = atomic_load(acc);
    g->run_tag = rs_clock_ns();
    g->kill_rng = g->run_tag | 1;
    g->restart_ms = calloc(100000, sizeof(double));
    g->next_kill_ns = rs_clock_ns() + 1000000ull * g->a.storm.lo;
    if (run_mode(g, LG_HTTP, &f) != 0)
        return 1;
    while (g->killed_ns != 0 && gw_probe(g->gw_port) == 0)
        usleep(1000);
    if (g->killed_ns != 0)
        g->restart_ms[g->kills - 1] = (double)(rs_clock_ns() - g->killed_ns) / 1e6;
    uint64_t runs = atomic_load(acc) - acc0;
    uint32_t same = 0, retries = 0;
    for (uint32_t i = 0; i < n; i++) {
        int eq = g->reqs[i].text_len == native_len[i] &&
                 memcmp(g->reqs[i].text, native[i], native_len[i]) == 0;
        if (!eq && same == i)
            fprintf(stderr, "loadgen: request %u differs from the native run: %zu bytes vs %zu "
                    "(%u retries)\n", i, g->reqs[i].text_len, native_len[i], g->reqs[i].retries);
        same += eq;
        retries += g->reqs[i].retries;
        free(native[i]);
    }
    free(native);
    free(native_len);
    struct dist r = summarize(g->restart_ms, g->kills);
    printf("-------------gatewayd SIGKILL storm----------------\n");
    printf("%-40s %u (every %u..%u ms)\n", "gatewayd SIGKILLs:", g->kills, g->a.storm.lo,
           g->a.storm.hi);
    printf("%-40s %u, retried %u times (same Idempotency-Key)\n", "Requests:", n, retries);
    printf("%-40s %llu (runs twice: %lld)\n", "Accepted by tokenizerd:", (unsigned long long)runs,
           (long long)runs - (long long)n);
    printf("%-40s %u of %u\n", "Outputs identical to the native run:", same, n);
    printf("%-40s p50 %.1f / p90 %.1f / p99 %.1f\n", "SIGKILL -> serving again (ms):", r.p50,
           r.p90, r.p99);
    printf("==================================================\n");
    free(g->restart_ms);
    return runs == n && same == n ? 0 : 1;
}

/* --- the sweep ------------------------------------------------------------------------------ */

struct sweep_row {
    uint32_t c;
    double tps[2], ttft50[2], ttft99[2], tpot50[2], tpot99[2];
};

static void sweep_plot(const struct lg *g, const struct sweep_row *rows, size_t n)
{
    const char *png = g->a.plot != NULL ? g->a.plot : "build/loadgen-sweep.png";
    char dat[600], gp[600], cmd[1400];
    snprintf(dat, sizeof(dat), "%s.dat", png);
    snprintf(gp, sizeof(gp), "%s.gp", png);
    FILE *d = fopen(dat, "w"), *s = fopen(gp, "w");
    if (d == NULL || s == NULL) {
        fprintf(stderr, "bench_loadgen: cannot write %s\n", d == NULL ? dat : gp);
        if (d != NULL)
            fclose(d);
        if (s != NULL)
            fclose(s);
        return;
    }
    fprintf(d, "# concurrency native_tok_s http_tok_s native_ttft50 native_ttft99 http_ttft50 "
               "http_ttft99 native_tpot50 native_tpot99 http_tpot50 http_tpot99 (ms)\n");
    for (size_t i = 0; i < n; i++)
        fprintf(d, "%u %.2f %.2f %.2f %.2f %.2f %.2f %.3f %.3f %.3f %.3f\n", rows[i].c,
                rows[i].tps[0], rows[i].tps[1], rows[i].ttft50[0], rows[i].ttft99[0],
                rows[i].ttft50[1], rows[i].ttft99[1], rows[i].tpot50[0], rows[i].tpot99[0],
                rows[i].tpot50[1], rows[i].tpot99[1]);
    fclose(d);
    fprintf(s, "set terminal png size 1400,520\nset output '%s'\nset multiplot layout 1,3\n"
               "set key top left\nset grid\nset logscale x 2\nset xlabel 'concurrency'\n"
               "set title 'output throughput'\nset ylabel 'tok/s'\n"
               "plot '%s' u 1:2 w lp t 'native', '' u 1:3 w lp t 'HTTP'\n"
               "set title 'TTFT'\nset ylabel 'ms'\nset logscale y\n"
               "plot '%s' u 1:4 w lp t 'native p50', '' u 1:5 w lp t 'native p99', "
               "'' u 1:6 w lp t 'HTTP p50', '' u 1:7 w lp t 'HTTP p99'\n"
               "set title 'TPOT'\n"
               "plot '%s' u 1:8 w lp t 'native p50', '' u 1:9 w lp t 'native p99', "
               "'' u 1:10 w lp t 'HTTP p50', '' u 1:11 w lp t 'HTTP p99'\n"
               "unset multiplot\n", png, dat, dat, dat);
    fclose(s);
    snprintf(cmd, sizeof(cmd), "gnuplot '%s'", gp);
    if (system(cmd) == 0)
        printf("chart: %s (data %s, script %s)\n", png, dat, gp);
    else
        fprintf(stderr, "bench_loadgen: gnuplot failed (ops/setup installs gnuplot-nox); data "
                "in %s\n", dat);
}

static int sweep(struct lg *g)
{
    struct sweep_row rows[32];
    size_t n = 0;
    int http = g->a.http != NULL, native = !g->a.no_native;
    for (const char *p = g->a.sweep; *p != '\0' && n < 32;) {
        char *end;
        unsigned long c = strtoul(p, &end, 10);
        if (c == 0 || c > 4096 || (*end != ',' && *end != '\0')) {
            fprintf(stderr, "bench_loadgen: --sweep takes concurrencies like 1,4,16\n");
            return 2;
        }
        struct figures f[2];
        memset(f, 0, sizeof(f));
        close_clients(g);
        g->a.clients = g->a.concurrency = g->a.warmup = (uint32_t)c;
        if ((http && http_conns(g) != 0) || (native && run_mode(g, LG_NATIVE, &f[0]) != 0) ||
            (http && run_mode(g, LG_HTTP, &f[1]) != 0))
            return 1;
        rows[n] = (struct sweep_row){.c = (uint32_t)c};
        for (int m = 0; m < 2; m++) {
            rows[n].tps[m] = tok_per_s(&f[m]);
            rows[n].ttft50[m] = f[m].ttft.p50;
            rows[n].ttft99[m] = f[m].ttft.p99;
            rows[n].tpot50[m] = f[m].tpot.p50;
            rows[n].tpot99[m] = f[m].tpot.p99;
        }
        n++;
        p = *end == ',' ? end + 1 : end;
    }
    printf("=================== Concurrency sweep ====================\n");
    printf("%4s %-7s %10s %10s %10s %10s %10s\n", "C", "path", "tok/s", "TTFT p50", "TTFT p99",
           "TPOT p50", "TPOT p99");
    for (size_t i = 0; i < n; i++)
        for (int m = 0; m < 2; m++)
            if ((m == 0 && native) || (m == 1 && http))
                printf("%4u %-7s %10.1f %10.2f %10.2f %10.3f %10.3f\n", rows[i].c,
                       m ? "http" : "native", rows[i].tps[m], rows[i].ttft50[m], rows[i].ttft99[m],
                       rows[i].tpot50[m], rows[i].tpot99[m]);
    sweep_plot(g, rows, n);
    return 0;
}

#include "bench/loadgen_steps.h"

static int run(struct lg *g)
{
    static struct figures fn[64], fh[64];
    uint32_t max_prompt = g->a.prompt_len.hi;
    uint32_t n_max = g->a.requests + 4096;
    g->n_total = g->a.warmup + g->a.requests;
    g->reqs = calloc(n_max, sizeof(*g->reqs));
    g->prompt = malloc(sizeof(uint32_t) * max_prompt);
    if (g->reqs == NULL || g->prompt == NULL || load_vocab(g) != 0)
        return 1;
    if (g->a.http != NULL && http_setup(g) != 0)
        return 1;
    if (g->a.sweep != NULL)
        return sweep(g);
    if (g->a.sweep_step != NULL)
        return sweep_steps(g);
    if (g->a.storm.lo > 0)
        return storm(g);
    uint32_t rounds = g->a.rounds > 64 ? 64 : g->a.rounds, failed = 0;
    if (g->a.http == NULL) {
        for (uint32_t r = 0; r < rounds; r++)
            if (run_mode(g, LG_NATIVE, &fn[r]) != 0 || fn[r].failed > 0)
                return 1;
        return 0;
    }
    if (g->a.idle > 0 && idle_open(g) != 0)
        return 1;
    for (uint32_t r = 0; r < rounds; r++) {
        if ((!g->a.no_native && run_mode(g, LG_NATIVE, &fn[r]) != 0) ||
            run_mode(g, LG_HTTP, &fh[r]) != 0)
            return 1;
        failed += fh[r].failed + (g->a.no_native ? 0 : fn[r].failed);
    }
    if (g->a.idle > 0)
        idle_report(g);
    if (!g->a.no_native)
        compare(fn, fh, rounds);
    return failed > 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    struct lg g;
    struct rs_harness h;
    memset(&g, 0, sizeof(g));
    memset(&h, 0, sizeof(h));
    g.ep = -1;
    rs_log_init("loadgen");
    if (getenv("RS_LOG_LEVEL") == NULL)
        rs_log_set_level(RS_LOG_WARN);
    int rc = parse_args(argc, argv, &g.a);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    if (g.a.start && start_instance(&g.a, &h) != 0)
        return 1;
    g.h = g.a.start ? &h : NULL;
    rc = run(&g);
    close_clients(&g);
    gw_kill(&g);
    if (g.a.start)
        rs_harness_stop(&h, rc != 0);
    for (uint32_t i = 0; g.reqs != NULL && i < g.a.requests + 4096; i++)
        free(g.reqs[i].text);
    free(g.reqs);
    free(g.prompt);
    free(g.pool);
    free(g.corpus);
    free(g.itl);
    return rc;
}

/* SPDX-License-Identifier: MIT */
/*
 * Load generator for a running ringserve instance, after
 * vLLM's benchmark_serving: N clients driven from one event loop, closed loop
 * (C requests always in flight) or Poisson arrivals at a rate, prompt and
 * output lengths fixed or uniform, prompts from real text tokenized with the
 * model's vocab or random token ids, ignore_eos to force the output length,
 * a warm-up phase, then TTFT, TPOT, inter-token latency and end-to-end
 * latency (mean, p50, p90, p99) and request and token throughput. With
 * --start it starts the four daemons itself (tests/pipeline_harness.h).
 * Leaves out: goodput SLOs, burstiness other than Poisson.
 */
#include <math.h>
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
};

struct lg;

/* One request's timeline (client clock, ns) and sizes. */
struct lg_req {
    struct lg *g;
    uint64_t submit_ns, first_ns, last_ns, end_ns;
    uint32_t n_prompt, n_out;
    uint64_t srv_queue_us, srv_ttft_us;
    uint8_t measured, done, failed;
};

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
};

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

static void on_event(const struct rs_client_event *ev)
{
    struct lg_req *q = ev->user;
    if (ev->n_tokens > 0) {
        if (q->first_ns == 0)
            q->first_ns = ev->recv_ns;
        else if (q->measured && q->last_ns != 0) {
            struct lg *g = q->g;
            if (g->n_itl == g->cap_itl) {
                size_t cap = g->cap_itl ? g->cap_itl * 2 : 4096;
                uint64_t *p = realloc(g->itl, cap * sizeof(*p));
                if (p != NULL) {
                    g->itl = p;
                    g->cap_itl = cap;
                }
            }
            if (g->n_itl < g->cap_itl)
                g->itl[g->n_itl++] = ev->recv_ns - q->last_ns;
        }
        q->last_ns = ev->recv_ns;
    }
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

static int submit(struct lg *g, uint32_t i, int measured)
{
    struct rs_wire_generate gen = g->a.gen.gen;
    struct lg_req *q = &g->reqs[i];
    uint32_t n = draw(g, g->a.prompt_len);
    build_prompt(g, n);
    gen.has |= RS_WIRE_GEN_PROMPT_IDS | RS_WIRE_GEN_MAX_TOKENS | RS_WIRE_GEN_STREAM;
    gen.prompt_ids = (struct rs_wire_ids){.n = n, .vals = g->prompt};
    gen.max_tokens = draw(g, g->a.output_len);
    gen.stream = true;
    if (!g->a.allow_eos) {
        gen.has |= RS_WIRE_GEN_IGNORE_EOS;
        gen.ignore_eos = true;
    }
    if (!(gen.has & RS_WIRE_GEN_TEMPERATURE)) {
        gen.has |= RS_WIRE_GEN_TEMPERATURE;
        gen.temperature = 0;
    }
    *q = (struct lg_req){.g = g, .n_prompt = n, .measured = (uint8_t)measured};
    q->submit_ns = rs_clock_ns();
    rs_err rc = rs_client_submit(g->cs[i % g->a.clients], &gen, NULL, on_event, q, NULL);
    if (rc != RS_OK) {
        fprintf(stderr, "loadgen: submit: %s\n", rs_strerror(rc));
        return -1;
    }
    g->in_flight++;
    return 0;
}

/* Requests [first, first + count): closed loop, or Poisson arrivals when rate > 0. */
static int run_phase(struct lg *g, uint32_t first, uint32_t count, int measured, double rate)
{
    uint32_t end = first + count, cap = g->a.concurrency;
    uint64_t next_arrival = rs_clock_ns();
    g->next = first;
    while (g->done < end) {
        uint64_t now = rs_clock_ns();
        while (g->next < end && g->in_flight < cap && (rate <= 0 || now >= next_arrival)) {
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
        if (rs_client_poll_set(g->cs, g->a.clients, wait) < 0)
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

/* Per-request figures of the measured, successful requests. */
/* A distribution as {mean, p50, p90, p99}, rounded to `decimals` places. */
static json_t *dist_json(const struct dist *d, int decimals)
{
    return json_pack("{s:o,s:o,s:o,s:o}", "mean", rs_json_real(d->mean, decimals), "p50",
                     rs_json_real(d->p50, decimals), "p90", rs_json_real(d->p90, decimals),
                     "p99", rs_json_real(d->p99, decimals));
}

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
    printf("-------------Server side (from finals)-------------\n");
    printf("%-40s %.2f\n", "Mean queue time (ms):", f->srv_queue_ms);
    printf("%-40s %.2f\n", "Mean server TTFT (ms):", f->srv_ttft_ms);
    struct rusage ru; /* this process only: the clients' cost, not the daemons' */
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
                 (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    printf("%-40s %.2f (%.1f%% of one core over the run)\n", "Load generator CPU (s):", cpu,
           secs > 0 ? 100.0 * cpu / secs : 0);
    printf("==================================================\n");
    if (!g->a.json)
        return;
    rs_json_print(stdout, json_pack("{s:I,s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "requests",
                                    (json_int_t)f->ok, "failed", (json_int_t)f->failed,
                                    "duration_s", rs_json_real(secs, 3), "req_per_s",
                                    rs_json_real(secs > 0 ? f->ok / secs : 0, 3),
                                    "output_tok_per_s",
                                    rs_json_real(secs > 0 ? (double)f->out_tokens / secs : 0, 2),
                                    "ttft_ms", dist_json(&f->ttft, 2), "tpot_ms",
                                    dist_json(&f->tpot, 3), "itl_ms", dist_json(&f->itl, 3),
                                    "e2e_ms", dist_json(&f->e2e, 2)));
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
    "--start it connects with the connection flags.\n";

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
    const struct rs_opt_group g[] = {
        {"load", load_opts, a, NULL},
        {"model and instance (--start)", rs_pipe_opts, &a->pipe, pipe_taken},
        {RS_CLIENT_GEN_TITLE, rs_client_gen_opts, &a->gen, NULL},
        {RS_CLIENT_CONN_TITLE, rs_client_conn_opts, &a->conn, NULL},
    };
    int r = rs_opt_parse(g, 4, argc, argv, 0, NULL, err, sizeof(err));
    if (r == RS_OPT_HELP) {
        rs_opt_help(stdout, usage, g, 4);
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

static int run(struct lg *g)
{
    struct figures f;
    uint32_t max_prompt = g->a.prompt_len.hi;
    g->n_total = g->a.warmup + g->a.requests;
    g->reqs = calloc(g->n_total, sizeof(*g->reqs));
    g->prompt = malloc(sizeof(uint32_t) * max_prompt);
    if (g->reqs == NULL || g->prompt == NULL || load_vocab(g) != 0 || connect_clients(g) != 0)
        return 1;
    g->rng = g->a.rng;
    if (g->a.warmup > 0 && run_phase(g, 0, g->a.warmup, 0, 0) != 0)
        return 1;
    if (run_phase(g, g->a.warmup, g->a.requests, 1, g->a.rate) != 0 ||
        collect(g, g->a.warmup, &f) != 0)
        return 1;
    report(g, &f);
    return f.failed > 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    struct lg g;
    struct rs_harness h;
    memset(&g, 0, sizeof(g));
    memset(&h, 0, sizeof(h));
    rs_log_init("loadgen");
    if (getenv("RS_LOG_LEVEL") == NULL)
        rs_log_set_level(RS_LOG_WARN);
    int rc = parse_args(argc, argv, &g.a);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    if (g.a.start && start_instance(&g.a, &h) != 0)
        return 1;
    rc = run(&g);
    for (uint32_t i = 0; g.cs != NULL && i < g.a.clients; i++)
        rs_client_destroy(&g.cs[i]);
    if (g.a.start)
        rs_harness_stop(&h, rc != 0);
    free(g.cs);
    free(g.reqs);
    free(g.prompt);
    free(g.pool);
    free(g.corpus);
    free(g.itl);
    return rc;
}

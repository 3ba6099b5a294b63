/* SPDX-License-Identifier: MIT */
/*
 * GET /metrics: the Prometheus text format (version 0.0.4) with the names
 * vLLM users already graph, prefixed `ringserve:` and labelled model_name,
 * read from the stages' counters and histograms in shared memory (one table
 * row per metric), plus every raw stage counter, per-stage restarts and
 * liveness, and gatewayd's own figures. Histograms are the stages' log2
 * buckets of microseconds: bucket b counts values below 2^b us, exported as
 * le = 2^b / 10^6 seconds, so quantiles computed from them are good within
 * a factor of two (common/metrics.h). Leaves out metrics nobody records.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "gatewayd/gw.h"
#include "ipc/pipeline_metrics.h"

enum kind { COUNTER, GAUGE, HIST };

struct prom {
    const char *name, *help;
    enum kind kind;
    enum rs_pipe_stage stage;
    unsigned idx;                          /* counter or histogram index of the stage */
    double (*fn)(const struct rs_pipe *p); /* computed gauge instead of idx */
};

static double kv_usage(const struct rs_pipe *p)
{
    uint64_t used =
        atomic_load_explicit(&p->metrics->stage[RS_PIPE_STAGE_SCHEDULERD].counter[RS_M_SCH_KV_USED],
                             memory_order_relaxed);
    return p->cfg.n_kv_blocks > 0 ? (double)used / p->cfg.n_kv_blocks : 0;
}

static const struct prom table[] = {
    {"ringserve:num_requests_running", "Requests holding KV blocks (scheduled)", GAUGE,
     RS_PIPE_STAGE_SCHEDULERD, RS_M_SCH_RUNNING, NULL},
    {"ringserve:num_requests_waiting", "Requests waiting to be scheduled", GAUGE,
     RS_PIPE_STAGE_SCHEDULERD, RS_M_SCH_WAITING, NULL},
    {"ringserve:kv_cache_usage_perc", "Fraction of KV blocks in use (1 = full)", GAUGE,
     RS_PIPE_STAGE_SCHEDULERD, 0, kv_usage},
    {"ringserve:prompt_tokens_total", "Prompt tokens accepted (BOS included)", COUNTER,
     RS_PIPE_STAGE_TOKENIZERD, RS_M_TOK_PROMPT_TOKENS, NULL},
    {"ringserve:generation_tokens_total", "Tokens generated", COUNTER, RS_PIPE_STAGE_LAUNCHERD,
     RS_M_LAU_SAMPLED, NULL},
    {"ringserve:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache", COUNTER,
     RS_PIPE_STAGE_SCHEDULERD, RS_M_SCH_PREFIX_QUERY, NULL},
    {"ringserve:prefix_cache_hits_total", "Prompt tokens served by the prefix cache", COUNTER,
     RS_PIPE_STAGE_SCHEDULERD, RS_M_SCH_PREFIX_HIT, NULL},
    {"ringserve:num_preemptions_total", "Recompute preemptions", COUNTER, RS_PIPE_STAGE_SCHEDULERD,
     RS_M_SCH_PREEMPTIONS, NULL},
    {"ringserve:request_success_total", "Requests finished (final message sent)", COUNTER,
     RS_PIPE_STAGE_POSTPROCD, RS_M_POST_FINALS, NULL},
    {"ringserve:time_to_first_token_seconds", "Accepted to first token", HIST,
     RS_PIPE_STAGE_POSTPROCD, RS_H_POST_TTFT, NULL},
    {"ringserve:time_per_output_token_seconds", "Time per output token after the first", HIST,
     RS_PIPE_STAGE_POSTPROCD, RS_H_POST_TPOT, NULL},
    {"ringserve:e2e_request_latency_seconds", "Accepted to finished", HIST, RS_PIPE_STAGE_POSTPROCD,
     RS_H_POST_E2E, NULL},
    {"ringserve:request_queue_time_seconds", "Accepted to first scheduled", HIST,
     RS_PIPE_STAGE_SCHEDULERD, RS_H_SCH_QUEUE_WAIT, NULL},
};

static int put(struct gw_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int put(struct gw_buf *b, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    return n < 0 ? -1
                 : gw_buf_put(b, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

/* A label value with \, " and newlines escaped. */
static void label(const char *s, char *out, size_t cap)
{
    size_t k = 0;
    for (; *s != '\0' && k + 3 < cap; s++) {
        if (*s == '\\' || *s == '"' || *s == '\n')
            out[k++] = '\\';
        out[k++] = *s == '\n' ? 'n' : *s;
    }
    out[k] = '\0';
}

static void hist(struct gw_buf *b, const struct prom *m, const struct rs_hist *h, const char *lb)
{
    uint64_t cum = 0;
    for (unsigned i = 0; i < RS_METRICS_BUCKETS; i++) {
        cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        put(b, "%s_bucket{%s,le=\"%g\"} %" PRIu64 "\n", m->name, lb, (double)(1ull << i) / 1e6,
            cum);
    }
    put(b, "%s_bucket{%s,le=\"+Inf\"} %" PRIu64 "\n", m->name, lb,
        atomic_load_explicit(&h->count, memory_order_relaxed));
    put(b, "%s_sum{%s} %.6f\n", m->name, lb,
        (double)atomic_load_explicit(&h->sum_us, memory_order_relaxed) / 1e6);
    put(b, "%s_count{%s} %" PRIu64 "\n", m->name, lb,
        atomic_load_explicit(&h->count, memory_order_relaxed));
}

static void pipeline_table(struct gw_buf *b, const struct rs_pipe *p, const char *lb)
{
    static const char *const types[] = {"counter", "gauge", "histogram"};
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        const struct prom *m = &table[i];
        const struct rs_metrics_block *blk = &p->metrics->stage[m->stage];
        put(b, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name, types[m->kind]);
        if (m->kind == HIST)
            hist(b, m, &blk->hist[m->idx], lb);
        else if (m->fn != NULL)
            put(b, "%s{%s} %g\n", m->name, lb, m->fn(p));
        else
            put(b, "%s{%s} %" PRIu64 "\n", m->name, lb,
                atomic_load_explicit(&blk->counter[m->idx], memory_order_relaxed));
    }
}

/* Per stage: up, restarts, and every raw counter under its ipc/pipeline.h name. */
static void stages(struct gw_buf *b, const struct rs_pipe *p, const char *lb)
{
    put(b, "# HELP ringserve:stage_up 1 when the stage is ready and its process alive\n"
           "# TYPE ringserve:stage_up gauge\n");
    put(b, "# HELP ringserve:stage_restarts_total Starts of the stage in this segment, minus "
           "one\n# TYPE ringserve:stage_restarts_total counter\n");
    put(b, "# HELP ringserve:stage_counter A stage's own counter (ringserve-stat names)\n"
           "# TYPE ringserve:stage_counter untyped\n");
    for (int s = 0; s < RS_PIPE_N_STAGES; s++) {
        const char *name = rs_pipe_stage_name((enum rs_pipe_stage)s);
        struct rs_role_info ri = {0};
        int idx = rs_role_find(p->shm, name);
        if (idx >= 0)
            rs_role_info_at(p->shm, (uint32_t)idx, &ri);
        put(b, "ringserve:stage_up{%s,stage=\"%s\"} %d\n", lb, name,
            ri.phase == RS_ROLE_READY && ri.alive);
        put(b, "ringserve:stage_restarts_total{%s,stage=\"%s\"} %" PRIu64 "\n", lb, name,
            ri.n_starts > 0 ? ri.n_starts - 1 : 0);
        for (unsigned i = 0; rs_pipe_metric_name((enum rs_pipe_stage)s, 0, i) != NULL; i++)
            put(b, "ringserve:stage_counter{%s,stage=\"%s\",name=\"%s\"} %" PRIu64 "\n", lb, name,
                rs_pipe_metric_name((enum rs_pipe_stage)s, 0, i),
                atomic_load_explicit(&p->metrics->stage[s].counter[i], memory_order_relaxed));
    }
}

static void gateway(struct gw_buf *b, const struct gw *g, const char *lb)
{
    static const char *const classes[] = {"other", "1xx", "2xx", "3xx", "4xx", "5xx"};
    put(b, "# HELP ringserve:http_requests_total HTTP responses by status class\n"
           "# TYPE ringserve:http_requests_total counter\n");
    for (int i = 0; i < 6; i++)
        put(b, "ringserve:http_requests_total{%s,code=\"%s\"} %" PRIu64 "\n", lb, classes[i],
            g->st.http_requests[i]);
    const struct {
        const char *name, *type, *help;
        uint64_t v;
    } own[] = {
        {"http_connections", "gauge", "Open HTTP connections", g->st.connections},
        {"http_streams", "gauge", "Open SSE streams", g->st.streams},
        {"gateway_requests_in_flight", "gauge", "Generations gatewayd follows", g->st.calls},
        {"gateway_reattached_total", "counter", "Retries that took over a running request",
         g->st.reattached},
        {"gateway_cancelled_total", "counter", "Requests cancelled as their client left",
         g->st.cancelled},
        {"gateway_slow_connections_closed_total", "counter",
         "Connections closed for idling or sending too slowly", g->st.slow_closed},
        {"gateway_start_time_seconds", "gauge", "When this gatewayd started (unix time)",
         g->started_unix},
    };
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
        put(b, "# HELP ringserve:%s %s\n# TYPE ringserve:%s %s\nringserve:%s{%s} %" PRIu64 "\n",
            own[i].name, own[i].help, own[i].name, own[i].type, own[i].name, lb, own[i].v);
}

int gw_metrics_text(struct gw *g, struct gw_buf *out)
{
    char name[300], lb[320];
    label(g->model_name, name, sizeof(name));
    snprintf(lb, sizeof(lb), "model_name=\"%s\"", name);
    if (g->seg.p != NULL) {
        pipeline_table(out, g->seg.p, lb);
        stages(out, g->seg.p, lb);
    }
    gateway(out, g, lb);
    return out->p != NULL ? 0 : -1;
}

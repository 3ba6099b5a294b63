/* SPDX-License-Identifier: MIT */
/*
 * ringserve-stat: a running instance's figures, read from its shared memory
 * without asking any stage (DESIGN.md principle 9): per stage its role state
 * (incarnation, pid, alive, heartbeat age, starts, ready), counters and
 * latency histograms; the request table; KV block usage. Modes: a live view
 * refreshed every --interval ms (default), --once, --json (one object),
 * --latency-table (the per-stage table ops/demo prints), --wait-ready S
 * (exit 0 once all four stages are ready and alive). It maps the segment
 * read-only (rs_pipe_inspect) and never writes to it.
 * Exit codes: 0 done, 1 instance not running (or not ready in time), 2 usage.
 */
#include <errno.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/json.h"
#include "common/metrics.h"
#include "common/opt.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"

#define MAX_REQ_ROWS 4096u

struct opts {
    struct rs_pipe_args pipe; /* --instance (the pipeline's option) */
    const char *instance;     /* pipe.cfg.instance */
    uint32_t interval_ms;
    int once, json, latency, requests;
    int wait_ready_s;         /* -1: not given */
};

/* One stage's role record and figures. */
struct stage_view {
    struct rs_role_info role;
    int found;
    const struct rs_metrics_block *m;
};

/* Everything one refresh shows. */
struct snapshot {
    struct rs_pipe *p;
    struct rs_shm_info shm;
    struct stage_view st[RS_PIPE_N_STAGES];
    uint64_t n_state[5]; /* FREE, CLAIMED, WAITING, RUNNING, FINISHED */
    uint64_t now_ns;
    int all_ready;
};

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

#define OPT(f) offsetof(struct opts, f)
static const struct rs_opt stat_opts[] = {
    {.name = "interval", .kind = RS_OPT_U32, .off = OPT(interval_ms), .min = 50, .max = 3600000,
     .arg = "MS", .help = "live view refreshed every MS ms (default 1000); Ctrl-C quits"},
    {.name = "once", .kind = RS_OPT_FLAG, .off = OPT(once), .val = 1,
     .help = "print the view once"},
    {.name = "json", .kind = RS_OPT_FLAG, .off = OPT(json), .val = 1,
     .help = "one JSON object: stages, counters, histograms, requests, KV"},
    {.name = "latency-table", .kind = RS_OPT_FLAG, .off = OPT(latency), .val = 1,
     .help = "per-stage latency table (count, mean, p50, p90, p99, max)"},
    {.name = "wait-ready", .kind = RS_OPT_INT, .off = OPT(wait_ready_s), .min = 0, .max = 86400,
     .arg = "SECONDS",
     .help = "wait until all four stages are ready and alive (exit 0),\n"
             "else exit 1 naming the stages that are not"},
    {.name = "requests", .kind = RS_OPT_INT, .off = OPT(requests), .min = 0, .max = MAX_REQ_ROWS,
     .arg = "N", .help = "request rows to show (default 16; JSON: all, up to 4096)"},
    {0},
};

static const char *const pipe_taken[] = {"instance", NULL};

static const char usage[] =
    "usage: ringserve-stat [--instance NAME] [--interval MS | --once | --json |\n"
    "                      --latency-table | --wait-ready SECONDS] [--requests N]\n"
    "A running instance's figures, read from its shared memory. Exit status: 0 done,\n"
    "1 the instance is not running (or not ready in time), 2 bad usage.\n";

/* Returns 0 to run (or after --help: *done), else the exit code (2) after printing. */
static int parse_args(int argc, char **argv, struct opts *o, int *done)
{
    char err[256];
    memset(o, 0, sizeof(*o));
    rs_pipe_args_init(&o->pipe);
    o->interval_ms = 1000;
    o->requests = -1;
    o->wait_ready_s = -1;
    *done = 0;
    const struct rs_opt_group g[] = {{NULL, rs_pipe_opts, &o->pipe, pipe_taken},
                                     {NULL, stat_opts, o, NULL}};
    int r = rs_opt_parse(g, 2, argc, argv, 0, NULL, err, sizeof(err));
    o->instance = o->pipe.cfg.instance;
    if (r == RS_OPT_HELP) {
        rs_opt_help(stdout, usage, g, 2);
        *done = 1;
        return 0;
    }
    if (r == RS_OPT_OK && o->once + o->json + o->latency + (o->wait_ready_s >= 0) > 1)
        snprintf(err, sizeof(err), "--once, --json, --latency-table and --wait-ready exclude "
                 "each other"), r = RS_OPT_ERROR;
    if (r != RS_OPT_OK) {
        fprintf(stderr, "ringserve-stat: %s\n", err);
        return 2;
    }
    return 0;
}

enum seg_presence { SEG_ABSENT, SEG_FORMING, SEG_PRESENT };

/* Whether /dev/shm holds the instance's segment, and whether its creator has sized it and
 * written its header yet. Checked before attaching, so that "not running" and "starting" are
 * plain messages rather than the attach errors the library logs. */
static enum seg_presence segment_presence(const char *instance)
{
    char name[300];
    struct rs_shm_info info;
    if (rs_shm_name(instance, name, sizeof(name)) != RS_OK)
        return SEG_ABSENT;
    rs_err rc = rs_shm_peek(name, &info);
    if (rc == RS_ENOENT)
        return SEG_ABSENT;
    return rc == RS_OK && info.ready ? SEG_PRESENT : SEG_FORMING;
}

/* Attaches read-only. RS_OK, or an error with the reason in err. */
static rs_err snapshot_open(const char *instance, struct snapshot *s, char *err, size_t err_len)
{
    memset(s, 0, sizeof(*s));
    enum seg_presence seg = segment_presence(instance);
    if (seg == SEG_ABSENT) {
        snprintf(err, err_len, "instance '%s' is not running (no segment /dev/shm/ringserve-%s)",
                 instance, instance);
        return RS_ENOENT;
    }
    if (seg == SEG_FORMING) {
        snprintf(err, err_len,
                 "instance '%s' is starting: its segment is being created (if that "
                 "lasts, its creator died: ringserve-shm rm /ringserve-%s)",
                 instance, instance);
        return RS_EAGAIN;
    }
    rs_err rc = rs_pipe_inspect(instance, &s->p, err, err_len);
    if (rc != RS_OK)
        return rc;
    rs_shm_get_info(s->p->shm, &s->shm);
    return RS_OK;
}

static void snapshot_fill(struct snapshot *s)
{
    s->now_ns = rs_clock_ns();
    s->all_ready = 1;
    for (int k = 0; k < RS_PIPE_N_STAGES; k++) {
        struct stage_view *v = &s->st[k];
        int idx = rs_role_find(s->p->shm, rs_pipe_stage_name((enum rs_pipe_stage)k));
        v->found = idx >= 0 && rs_role_info_at(s->p->shm, (uint32_t)idx, &v->role) == RS_OK;
        v->m = &s->p->metrics->stage[k];
        if (!v->found || v->role.phase != RS_ROLE_READY || !v->role.alive)
            s->all_ready = 0;
    }
    uint32_t n = rs_table_size(s->p->requests);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t state, gen, owner;
        rs_table_peek(s->p->requests, i, &state, &gen, &owner);
        s->n_state[state < 5 ? state : 0]++;
    }
}

static const char *phase_name(enum rs_role_phase ph)
{
    static const char *names[] = {"NONE", "RECOVERING", "READY", "EXITED"};
    return (unsigned)ph < 4 ? names[ph] : "?";
}

static const char *req_state_name(uint32_t s)
{
    static const char *names[] = {"FREE", "CLAIMED", "WAITING", "RUNNING", "FINISHED"};
    return s < 5 ? names[s] : "?";
}

static const char *finish_name(uint32_t w)
{
    static const char *names[] = {"-", "stop", "length", "abort", "error"};
    unsigned r = rs_pipe_finish_reason(w);
    return w == 0 ? "-" : r < 5 ? names[r] : "?";
}

/* Heartbeat age in ms; -1 when the role never started. */
static double hb_age_ms(const struct snapshot *s, const struct stage_view *v)
{
    if (!v->found || v->role.inc == 0)
        return -1;
    return ((double)s->now_ns - (double)v->role.heartbeat_ns) / 1e6;
}

static uint64_t counter(const struct rs_metrics_block *m, unsigned i)
{
    return atomic_load_explicit(&m->counter[i], memory_order_relaxed);
}

/* "850us", "12.3ms", "1.52s" */
static void fmt_us(double us, char *out, size_t len)
{
    if (us < 1)
        snprintf(out, len, "<1us");
    else if (us < 1000)
        snprintf(out, len, "%.0fus", us);
    else if (us < 1e6)
        snprintf(out, len, "%.*fms", us < 1e4 ? 2 : 1, us / 1e3);
    else
        snprintf(out, len, "%.2fs", us / 1e6);
}

/* --- text views ------------------------------------------------------------------------------ */

static void print_roles(const struct snapshot *s)
{
    printf("%-11s %6s %-10s %8s %-5s %10s %7s %7s %9s\n", "STAGE", "INC", "PHASE", "PID", "ALIVE",
           "HEARTBEAT", "STARTS", "READY", "RECOVERY");
    for (int k = 0; k < RS_PIPE_N_STAGES; k++) {
        const struct stage_view *v = &s->st[k];
        const struct rs_role_info *r = &v->role;
        char hb[32] = "-", rec[32] = "-";
        double age = hb_age_ms(s, v);
        if (age >= 0)
            fmt_us(age * 1e3, hb, sizeof(hb));
        if (r->ready_ns != 0 && r->ready_ns >= r->started_ns)
            fmt_us((double)(r->ready_ns - r->started_ns) / 1e3, rec, sizeof(rec));
        printf("%-11s %6u %-10s %8u %-5s %10s %7llu %7llu %9s\n",
               rs_pipe_stage_name((enum rs_pipe_stage)k), r->inc, phase_name(r->phase), r->pid,
               r->inc == 0 ? "-"
               : r->alive  ? "yes"
                           : "NO",
               hb, (unsigned long long)r->n_starts, (unsigned long long)r->n_ready, rec);
    }
}

static void print_counters(const struct snapshot *s)
{
    for (int k = 0; k < RS_PIPE_N_STAGES; k++) {
        printf("%-11s", rs_pipe_stage_name((enum rs_pipe_stage)k));
        int col = 11;
        for (unsigned i = 0; i < RS_METRICS_COUNTERS; i++) {
            const char *name = rs_pipe_metric_name((enum rs_pipe_stage)k, 0, i);
            if (name == NULL)
                break;
            if (strstr(name, "_ns_last") != NULL)
                continue; /* timestamps, not figures to read */
            char cell[96];
            int n = snprintf(cell, sizeof(cell), " %s=%llu", name,
                             (unsigned long long)counter(s->st[k].m, i));
            if (col + n > 100) {
                printf("\n%-11s", "");
                col = 11;
            }
            fputs(cell, stdout);
            col += n;
        }
        printf("\n");
    }
}

static void print_latency(const struct snapshot *s)
{
    printf("%-11s %-14s %8s %9s %9s %9s %9s %9s\n", "STAGE", "LATENCY", "COUNT", "MEAN", "P50",
           "P90", "P99", "MAX");
    for (int k = 0; k < RS_PIPE_N_STAGES; k++)
        for (unsigned i = 0; i < RS_METRICS_HISTS; i++) {
            const char *name = rs_pipe_metric_name((enum rs_pipe_stage)k, 1, i);
            if (name == NULL)
                break;
            const struct rs_hist *h = &s->st[k].m->hist[i];
            uint64_t n = atomic_load_explicit(&h->count, memory_order_relaxed);
            char label[32], mean[16] = "-", p50[16] = "-", p90[16] = "-", p99[16] = "-",
                            mx[16] = "-";
            snprintf(label, sizeof(label), "%.*s", (int)(strlen(name) - 3), name); /* no _us */
            if (n != 0) {
                fmt_us(rs_hist_mean(h), mean, sizeof(mean));
                fmt_us((double)rs_hist_quantile(h, 0.50), p50, sizeof(p50));
                fmt_us((double)rs_hist_quantile(h, 0.90), p90, sizeof(p90));
                fmt_us((double)rs_hist_quantile(h, 0.99), p99, sizeof(p99));
                fmt_us((double)atomic_load_explicit(&h->max_us, memory_order_relaxed), mx,
                       sizeof(mx));
            }
            printf("%-11s %-14s %8llu %9s %9s %9s %9s %9s\n",
                   rs_pipe_stage_name((enum rs_pipe_stage)k), label, (unsigned long long)n, mean,
                   p50, p90, p99, mx);
        }
    printf("(quantiles are log2-bucket upper bounds: within 2x; exact figures come from bench/)\n");
}

/* Output tokens of a record so far (list length - prompt); 0 when unreadable. */
static uint32_t req_out_tokens(const struct rs_pipe *p, struct rs_table_ref ref,
                               const struct rs_pipe_req *r)
{
    uint32_t len = 0;
    if (rs_arena_len(p->tokens, ref, &len) != RS_OK || len < r->n_prompt)
        return 0;
    return len - r->n_prompt;
}

/* Copy of a record's request id with anything unprintable replaced (the record may change
 * under us: it is another process's memory). */
static void req_id(const struct rs_pipe_req *r, char *out, size_t len)
{
    size_t n = strnlen(r->id, RS_WIRE_ID_MAX);
    if (n >= len)
        n = len - 1;
    for (size_t i = 0; i < n; i++) {
        char c = r->id[i];
        out[i] = c > 0x20 && c < 0x7f && c != '"' && c != '\\' ? c : '?';
    }
    out[n] = '\0';
}

static void print_requests(const struct snapshot *s, int rows)
{
    printf("requests: %llu waiting, %llu running, %llu finished (final pending), %llu in intake, "
           "%llu free of %u\n",
           (unsigned long long)s->n_state[2], (unsigned long long)s->n_state[3],
           (unsigned long long)s->n_state[4], (unsigned long long)s->n_state[1],
           (unsigned long long)s->n_state[0], rs_table_size(s->p->requests));
    uint32_t cursor = 0, state;
    struct rs_table_ref ref;
    int shown = 0;
    while (shown < rows && rs_table_next(s->p->requests, &cursor, 0x1cu, &ref, &state) == RS_OK) {
        const struct rs_pipe_req *r = rs_pipe_req_at(s->p, ref.index);
        char id[RS_WIRE_ID_MAX + 1];
        req_id(r, id, sizeof(id));
        if (shown++ == 0)
            printf("  %8s %-9s %-24s %7s %7s %6s %8s\n", "HANDLE", "STATE", "ID", "PROMPT", "OUT",
                   "SENT", "FINISH");
        printf("  %8llu %-9s %-24.24s %7u %7u %6u %8s\n", (unsigned long long)r->handle,
               req_state_name(state), id, r->n_prompt, req_out_tokens(s->p, ref, r),
               rs_pipe_cursor_cur((struct rs_pipe_req *)r)->n_done,
               finish_name(atomic_load_explicit(&r->finish, memory_order_relaxed)));
    }
}

static void print_kv(const struct snapshot *s)
{
    const struct rs_metrics_block *m = s->st[RS_PIPE_STAGE_SCHEDULERD].m;
    printf("kv blocks: %llu used, %llu cached (unused, reusable), %llu free of %u (%u tokens "
           "each)\n",
           (unsigned long long)counter(m, RS_M_SCH_KV_USED),
           (unsigned long long)counter(m, RS_M_SCH_KV_CACHED),
           (unsigned long long)counter(m, RS_M_SCH_KV_FREE), s->p->cfg.n_kv_blocks,
           s->p->cfg.block_size);
}

static void print_text(const struct snapshot *s, int rows)
{
    char age[32];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double up = (double)ts.tv_sec + ts.tv_nsec / 1e9 - (double)s->shm.created_ns / 1e9;
    fmt_us(up * 1e6, age, sizeof(age));
    printf("ringserve instance %s: segment %s, epoch %llu, up %s%s, %s\n", s->p->cfg.instance,
           s->shm.name, (unsigned long long)s->shm.epoch, age,
           s->shm.stale_boot ? " (STALE: earlier boot)" : "",
           s->all_ready ? "all stages ready" : "NOT all stages ready");
    printf("model %s, ctx %u, %u seqs / %u tokens per step, prefix caching %s, policy %s\n\n",
           s->p->cfg.model_path, s->p->cfg.n_ctx, s->p->cfg.max_seqs, s->p->cfg.max_batched_tokens,
           s->p->cfg.prefix_caching ? "on" : "off",
           s->p->cfg.priority_policy ? "priority" : "fcfs");
    print_roles(s);
    printf("\n");
    print_counters(s);
    printf("\n");
    print_kv(s);
    print_requests(s, rows);
    printf("\n");
    print_latency(s);
}

/* --- JSON (common/json.h) ------------------------------------------------------------------ */

static json_t *json_config(const struct rs_pipe_config *c)
{
    return json_pack("{s:o,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:b,s:s}", "model",
                     rs_json_cstr(c->model_path), "model_bytes", rs_json_u64(c->model_bytes),
                     "n_vocab", (json_int_t)c->n_vocab, "n_ctx", (json_int_t)c->n_ctx,
                     "block_size", (json_int_t)c->block_size, "n_kv_blocks",
                     (json_int_t)c->n_kv_blocks, "max_requests", (json_int_t)c->max_requests,
                     "max_seqs", (json_int_t)c->max_seqs, "max_batched_tokens",
                     (json_int_t)c->max_batched_tokens, "prefix_caching", c->prefix_caching != 0,
                     "policy", c->priority_policy ? "priority" : "fcfs");
}

static json_t *json_hist(const struct rs_hist *h)
{
    return json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}", "count",
                     rs_json_u64(atomic_load_explicit(&h->count, memory_order_relaxed)),
                     "mean_us", rs_json_real(rs_hist_mean(h), 1), "p50_us",
                     rs_json_u64(rs_hist_quantile(h, 0.5)), "p90_us",
                     rs_json_u64(rs_hist_quantile(h, 0.9)), "p99_us",
                     rs_json_u64(rs_hist_quantile(h, 0.99)), "max_us",
                     rs_json_u64(atomic_load_explicit(&h->max_us, memory_order_relaxed)));
}

/* A stage's counters or histograms as one object, by the names of its metric list. */
static json_t *json_metrics(const struct snapshot *s, int k, int hist)
{
    json_t *o = json_object();
    const struct rs_metrics_block *m = s->st[k].m;
    for (unsigned i = 0; o != NULL && i < (hist ? RS_METRICS_HISTS : RS_METRICS_COUNTERS); i++) {
        const char *name = rs_pipe_metric_name((enum rs_pipe_stage)k, hist, i);
        if (name == NULL)
            break;
        rs_json_set(o, name, hist ? json_hist(&m->hist[i]) : rs_json_u64(counter(m, i)));
    }
    return o;
}

static json_t *json_stage(const struct snapshot *s, int k)
{
    const struct stage_view *v = &s->st[k];
    const struct rs_role_info *r = &v->role;
    double rec = r->ready_ns >= r->started_ns && r->ready_ns ? (r->ready_ns - r->started_ns) / 1e6
                                                              : -1;
    return json_pack("{s:s,s:I,s:s,s:I,s:b,s:b,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "name",
                     rs_pipe_stage_name((enum rs_pipe_stage)k), "inc", (json_int_t)r->inc,
                     "phase", phase_name(r->phase), "pid", (json_int_t)r->pid, "alive",
                     r->alive != 0, "ready", r->phase == RS_ROLE_READY && r->alive,
                     "heartbeat_age_ms", rs_json_real(hb_age_ms(s, v), 1), "starts",
                     rs_json_u64(r->n_starts), "restarts",
                     rs_json_u64(r->n_starts > 0 ? r->n_starts - 1 : 0), "ready_count",
                     rs_json_u64(r->n_ready), "recovery_ms", rs_json_real(rec, 3), "counters",
                     json_metrics(s, k, 0), "histograms", json_metrics(s, k, 1));
}

static json_t *json_requests(const struct snapshot *s, int rows)
{
    json_t *list = json_array();
    uint32_t cursor = 0, state;
    struct rs_table_ref ref;
    int shown = 0;
    while (list != NULL && shown++ < rows &&
           rs_table_next(s->p->requests, &cursor, 0x1cu, &ref, &state) == RS_OK) {
        const struct rs_pipe_req *r = rs_pipe_req_at(s->p, ref.index);
        uint32_t fw = atomic_load_explicit(&r->finish, memory_order_relaxed);
        json_array_append_new(
            list, json_pack("{s:I,s:o,s:o,s:s,s:I,s:I,s:I,s:s,s:I}", "index",
                            (json_int_t)ref.index, "handle", rs_json_u64(r->handle), "id",
                            rs_json_text(r->id, strnlen(r->id, RS_WIRE_ID_MAX)), "state",
                            req_state_name(state), "n_prompt", (json_int_t)r->n_prompt,
                            "n_output", (json_int_t)req_out_tokens(s->p, ref, r), "n_sent",
                            (json_int_t)rs_pipe_cursor_cur((struct rs_pipe_req *)r)->n_done,
                            "finish", finish_name(fw), "n_preempted",
                            (json_int_t)r->n_preempted));
    }
    return json_pack("{s:I,s:o,s:o,s:o,s:o,s:o,s:o}", "capacity",
                     (json_int_t)rs_table_size(s->p->requests), "free",
                     rs_json_u64(s->n_state[0]), "intake", rs_json_u64(s->n_state[1]), "waiting",
                     rs_json_u64(s->n_state[2]), "running", rs_json_u64(s->n_state[3]),
                     "finished", rs_json_u64(s->n_state[4]), "list", list);
}

static int print_json(const struct snapshot *s, int rows)
{
    const struct rs_metrics_block *m = s->st[RS_PIPE_STAGE_SCHEDULERD].m;
    json_t *stages = json_array();
    for (int k = 0; stages != NULL && k < RS_PIPE_N_STAGES; k++)
        json_array_append_new(stages, json_stage(s, k));
    json_t *kv = json_pack("{s:I,s:I,s:o,s:o,s:o}", "blocks", (json_int_t)s->p->cfg.n_kv_blocks,
                           "block_size", (json_int_t)s->p->cfg.block_size, "used",
                           rs_json_u64(counter(m, RS_M_SCH_KV_USED)), "cached",
                           rs_json_u64(counter(m, RS_M_SCH_KV_CACHED)), "free",
                           rs_json_u64(counter(m, RS_M_SCH_KV_FREE)));
    json_t *o = json_pack("{s:o,s:o,s:o,s:o,s:b,s:o,s:b,s:o,s:o,s:o,s:o}", "instance",
                          rs_json_cstr(s->p->cfg.instance), "segment", rs_json_cstr(s->shm.name),
                          "epoch", rs_json_u64(s->shm.epoch), "created_unix_ns",
                          rs_json_u64(s->shm.created_ns), "stale_boot", s->shm.stale_boot != 0,
                          "incarnations", rs_json_u64(s->shm.incarnations), "ready",
                          s->all_ready != 0, "config", json_config(&s->p->cfg), "stages",
                          stages, "kv", kv, "requests", json_requests(s, rows));
    if (o == NULL) {
        fprintf(stderr, "ringserve-stat: out of memory building the JSON\n");
        return 1;
    }
    return rs_json_print(stdout, o) == 0 ? 0 : 1;
}

/* --- modes ----------------------------------------------------------------------------------- */

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !g_stop) {
    }
}

/* Polls every 50 ms until every stage is ready and alive; 0, or 1 after the deadline. */
static int wait_ready(const struct opts *o)
{
    uint64_t deadline = rs_clock_ns() + (uint64_t)o->wait_ready_s * 1000000000ull;
    char err[512] = "";
    for (;;) {
        struct snapshot s;
        if (snapshot_open(o->instance, &s, err, sizeof(err)) == RS_OK) {
            snapshot_fill(&s);
            int ready = s.all_ready;
            snprintf(err, sizeof(err), "instance '%s' not ready:", o->instance);
            for (int k = 0; k < RS_PIPE_N_STAGES && !ready; k++) {
                const struct rs_role_info *r = &s.st[k].role;
                if (r->phase == RS_ROLE_READY && r->alive)
                    continue;
                size_t n = strlen(err);
                snprintf(err + n, sizeof(err) - n, " %s %s%s",
                         rs_pipe_stage_name((enum rs_pipe_stage)k), phase_name(r->phase),
                         r->inc != 0 && !r->alive ? " (dead)" : "");
            }
            rs_pipe_close(&s.p);
            if (ready)
                return 0;
        }
        if (rs_clock_ns() >= deadline || g_stop) {
            fprintf(stderr, "ringserve-stat: %s (waited %d s)\n", err, o->wait_ready_s);
            return 1;
        }
        sleep_ms(50);
    }
}

/* Live view: re-attaches every refresh, so a whole-pipeline restart (new segment) shows. */
static int live(const struct opts *o)
{
    int rows = o->requests < 0 ? 16 : o->requests;
    while (!g_stop) {
        struct snapshot s;
        char err[512];
        rs_err rc = snapshot_open(o->instance, &s, err, sizeof(err));
        printf("\033[H\033[2J");
        if (rc == RS_OK) {
            snapshot_fill(&s);
            print_text(&s, rows);
            rs_pipe_close(&s.p);
        } else {
            printf("%s; retrying every %u ms\n", err, o->interval_ms);
        }
        printf("\n(refresh every %u ms; Ctrl-C quits)\n", o->interval_ms);
        fflush(stdout);
        sleep_ms(o->interval_ms);
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    int done;
    int rc = parse_args(argc, argv, &o, &done);
    if (rc != 0 || done)
        return rc;
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (o.wait_ready_s >= 0)
        return wait_ready(&o);
    if (!o.once && !o.json && !o.latency)
        return live(&o);
    struct snapshot s;
    char err[512];
    if (snapshot_open(o.instance, &s, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "ringserve-stat: %s\n", err);
        return 1;
    }
    snapshot_fill(&s);
    if (o.json)
        rc = print_json(&s, o.requests < 0 ? (int)MAX_REQ_ROWS : o.requests);
    else if (o.latency)
        print_latency(&s);
    else
        print_text(&s, o.requests < 0 ? 16 : o.requests);
    rs_pipe_close(&s.p);
    return rc;
}

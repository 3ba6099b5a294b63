/* SPDX-License-Identifier: MIT */
/*
 * Chat-template render time on the request intake path: each real template
 * that handles tools (every ../shared/refdata/chat-templates template whose
 * text mentions `tools`, largest first, or the files named on the command
 * line) compiled once, then rendered --iters times for an 8-message
 * tool-calling conversation with two tools (system, user, assistant tool
 * call, tool result, assistant, user, assistant, user), one thread, each
 * render timed alone. Prints per template: compile time, output bytes, render
 * p50/p99/max in microseconds; then the JSON parse of the same conversation
 * (what intake does before rendering) and the worst p99 against the 100 us
 * goal. The assistant's tool call has its arguments as a JSON object
 * (transformers' shape); a template that refuses that gets the OpenAI wire
 * shape (arguments as a JSON string, content null) instead, marked "(s)".
 * Templates that refuse both are listed with their error.
 */
#include <dirent.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/jinja.h"
#include "common/opt.h"

#define MAX_T 128

static const char conversation[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"You are a helpful travel assistant. Answer briefly and "
    "use the tools when they help.\"},"
    "{\"role\": \"user\", \"content\": \"What's the weather in Paris tomorrow, and is the Louvre "
    "open?\"},"
    "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"call12345\", \"type\": "
    "\"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
    "\"day\": \"tomorrow\", \"unit\": \"celsius\"}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"call12345\", \"name\": \"get_weather\", \"content\": "
    "\"{\\\"temperature\\\": 14, \\\"condition\\\": \\\"light rain\\\"}\"},"
    "{\"role\": \"assistant\", \"content\": \"Tomorrow Paris will be 14 \\u00b0C with light rain. "
    "The Louvre is open 9:00-18:00 except Tuesdays.\"},"
    "{\"role\": \"user\", \"content\": \"Great. Can you suggest a caf\\u00e9 near the museum?\"},"
    "{\"role\": \"assistant\", \"content\": \"Try Caf\\u00e9 Marly, on the Cour Napol\\u00e9on "
    "side: it looks onto the pyramid.\"},"
    "{\"role\": \"user\", \"content\": \"Thanks! Book a table for two at 13:00, please.\"}],"
    "\"tools\": ["
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather "
    "forecast for a city.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
    "{\"type\": \"string\", \"description\": \"City name\"}, \"day\": {\"type\": \"string\", \"description\": \"Which day\", "
    "\"enum\": [\"today\", \"tomorrow\"]}, \"unit\": {\"type\": \"string\", \"description\": \"Unit\", \"enum\": [\"celsius\", "
    "\"fahrenheit\"]}}, \"required\": [\"city\"]}}},"
    "{\"type\": \"function\", \"function\": {\"name\": \"book_table\", \"description\": \"Reserve "
    "a restaurant table.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"restaurant\": "
    "{\"type\": \"string\", \"description\": \"Restaurant name\"}, \"time\": {\"type\": \"string\", \"description\": \"HH:MM\"}, "
    "\"people\": {\"type\": \"integer\", \"description\": \"Guests\", \"minimum\": 1}}, \"required\": [\"restaurant\", \"time\", "
    "\"people\"]}}}]}";

static double clock_us(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static double now_us(void) { return clock_us(CLOCK_MONOTONIC); }

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *sorted, int n, double p)
{
    int i = (int)(p * (n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

struct tfile {
    char *path, *src;
    size_t len;
};

static int by_size_desc(const void *a, const void *b)
{
    const struct tfile *x = a, *y = b;
    return x->len < y->len ? 1 : x->len > y->len ? -1 : strcmp(x->path, y->path);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    *len = b ? fread(b, 1, (size_t)n, f) : 0;
    fclose(f);
    return b;
}

/* Whether the text contains the word `tools` (as the corpus picks its tool templates). */
static int mentions_tools(const char *s, size_t n)
{
    for (size_t i = 0; i + 5 <= n; i++) {
        if (memcmp(s + i, "tools", 5) != 0)
            continue;
        int l = i > 0 && (s[i - 1] == '_' || ((s[i - 1] | 32) >= 'a' && (s[i - 1] | 32) <= 'z'));
        char c = i + 5 < n ? s[i + 5] : ' ';
        int r = c == '_' || ((c | 32) >= 'a' && (c | 32) <= 'z') || (c >= '0' && c <= '9');
        if (!l && !r)
            return 1;
    }
    return 0;
}

static unsigned load_dir(struct tfile *t)
{
    const char *root = getenv("RS_REFDATA");
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/chat-templates/templates", root && *root ? root : "../shared/refdata");
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "bench_template: %s: no templates (set RS_REFDATA)\n", dir);
        return 0;
    }
    unsigned n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && n < MAX_T;) {
        if (!strstr(e->d_name, ".jinja"))
            continue;
        char path[1400];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        size_t len;
        char *src = slurp(path, &len);
        if (src && mentions_tools(src, len))
            t[n++] = (struct tfile){strdup(path), src, len};
        else
            free(src);
    }
    closedir(d);
    return n;
}

/* The conversation, and the same exchange in the OpenAI wire shape (string arguments, null content). */
static json_t *openai_shape(const json_t *conv)
{
    json_t *c = json_deep_copy(conv);
    json_t *msg = json_array_get(json_object_get(c, "messages"), 2);
    json_t *fn = json_object_get(json_array_get(json_object_get(msg, "tool_calls"), 0), "function");
    char *args = json_dumps(json_object_get(fn, "arguments"), JSON_COMPACT);
    json_object_set_new(fn, "arguments", json_string(args));
    free(args);
    json_object_set_new(msg, "content", json_null());
    return c;
}

struct result {
    double p50, p99, cpu99;
};

/* Compiles, finds a conversation shape the template accepts, times renders; 0 if it refuses. */
static int measure(const struct tfile *f, struct rs_jinja_ctx *ctx, const json_t *conv,
                   const json_t *conv_s, int iters, double *t, struct result *res)
{
    const char *name = strrchr(f->path, '/') ? strrchr(f->path, '/') + 1 : f->path;
    rs_jinja *tp;
    struct rs_jinja_error err = {0};
    double c0 = now_us();
    if (rs_jinja_compile(f->src, f->len, &tp, &err) != RS_OK) {
        printf("%-46.46s compile error: %s\n", name, err.msg);
        rs_jinja_error_fini(&err);
        return 0;
    }
    double compile_us = now_us() - c0;
    char *out;
    size_t n = 0;
    int shape = 0;
    ctx->messages = json_object_get(conv, "messages");
    if (rs_jinja_render(tp, ctx, &out, &n, &err) != RS_OK) {
        ctx->messages = json_object_get(conv_s, "messages");
        shape = 1;
        if (rs_jinja_render(tp, ctx, &out, &n, &err) != RS_OK) {
            printf("%-46.46s refuses this conversation: %s error: %.60s\n", name,
                   rs_jinja_errkind_name(err.kind), err.msg);
            rs_jinja_error_fini(&err);
            rs_jinja_destroy(&tp);
            return 0;
        }
    }
    free(out);
    struct rs_jinja_stats stats;
    ctx->stats = &stats;
    rs_jinja_render(tp, ctx, &out, &n, NULL);
    free(out);
    ctx->stats = NULL;
    for (int i = 0; i < iters / 10; i++) { /* warm up caches and the allocator */
        rs_jinja_render(tp, ctx, &out, &n, NULL);
        free(out);
    }
    for (int pass = 0; pass < 2; pass++) { /* wall clock, then the thread's CPU time */
        clockid_t id = pass ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
        for (int i = 0; i < iters; i++) {
            double a = clock_us(id);
            rs_jinja_render(tp, ctx, &out, &n, NULL);
            t[i] = clock_us(id) - a;
            free(out);
        }
        qsort(t, (size_t)iters, sizeof(double), cmp_d);
        if (pass)
            res->cpu99 = pct(t, iters, 0.99);
        else
            res->p50 = pct(t, iters, 0.5), res->p99 = pct(t, iters, 0.99);
    }
    double max = t[iters - 1];
    char label[64];
    snprintf(label, sizeof(label), "%.42s%s", name, shape ? " (s)" : "");
    printf("%-46.46s %9zu %10.0f %8zu %7llu %7zu %9.1f %9.1f %9.1f %9.1f\n", label, f->len, compile_us,
           n, (unsigned long long)stats.steps, stats.memory / 1024, res->p50, res->p99, max, res->cpu99);
    rs_jinja_destroy(&tp);
    return 1;
}

struct args {
    int iters, top;
};

static const struct rs_opt opt_table[] = {
    {.name = "iters", .kind = RS_OPT_INT, .off = offsetof(struct args, iters), .min = 10,
     .max = 10000000, .arg = "N", .help = "renders per template (default 2000)"},
    {.name = "top", .kind = RS_OPT_INT, .off = offsetof(struct args, top), .min = 0,
     .max = MAX_T, .arg = "K", .help = "only the K largest templates (default: all)"},
    {0},
};

static const char usage[] =
    "usage: bench_template [--iters N] [--top K] [TEMPLATE.jinja...]\n"
    "Render time of chat templates that handle tools (default: every refdata one)\n"
    "for an 8-message tool-calling conversation, one thread.\n";

int main(int argc, char **argv)
{
    struct args a = {.iters = 2000, .top = 0};
    struct rs_opt_group g = {NULL, opt_table, &a, NULL};
    int first = argc;
    int code = rs_opt_main("bench_template", usage, &g, 1, argc, argv, RS_OPT_OPERANDS, &first);
    if (code >= 0)
        return code;
    int iters = a.iters, top = a.top;
    static struct tfile files[MAX_T];
    unsigned nf = 0;
    for (int i = first; i < argc && nf < MAX_T; i++) {
        size_t len;
        char *src = slurp(argv[i], &len);
        if (src)
            files[nf++] = (struct tfile){strdup(argv[i]), src, len};
    }
    if (!nf && !(nf = load_dir(files)))
        return 0; /* nothing to measure: said why */
    qsort(files, nf, sizeof(files[0]), by_size_desc);
    if (top > 0 && (unsigned)top < nf)
        nf = (unsigned)top;
    json_error_t je;
    json_t *conv = json_loads(conversation, 0, &je);
    if (!conv) {
        fprintf(stderr, "bench_template: conversation: %s\n", je.text);
        return 1;
    }
    json_t *conv_s = openai_shape(conv);
    double *t = malloc(sizeof(double) * (size_t)iters);
    struct tm date = {.tm_year = 126, .tm_mon = 0, .tm_mday = 15, .tm_wday = 4, .tm_yday = 14};
    struct rs_jinja_ctx ctx = {.tools = json_object_get(conv, "tools"), .add_generation_prompt = 1,
                               .bos_token = "<s>", .eos_token = "</s>", .now = &date};
    printf("8-message tool-calling conversation (%zu bytes of JSON, 2 tools), add_generation_prompt, "
           "%d renders each, one thread\n\n", strlen(conversation), iters);
    printf("%-46s %9s %10s %8s %7s %7s %9s %9s %9s %9s\n", "template", "src bytes", "compile us",
           "out B", "steps", "KiB", "p50 us", "p99 us", "max us", "cpu p99");
    double worst = 0, worst_cpu = 0, sum50 = 0;
    int measured = 0;
    for (unsigned f = 0; f < nf; f++) {
        struct result r = {0, 0, 0};
        if (!measure(&files[f], &ctx, conv, conv_s, iters, t, &r))
            continue;
        worst = r.p99 > worst ? r.p99 : worst;
        worst_cpu = r.cpu99 > worst_cpu ? r.cpu99 : worst_cpu;
        sum50 += r.p50;
        measured++;
    }
    for (int i = 0; i < iters; i++) {
        double a = now_us();
        json_t *j = json_loads(conversation, 0, &je);
        t[i] = now_us() - a;
        json_decref(j);
    }
    qsort(t, (size_t)iters, sizeof(double), cmp_d);
    printf("\njansson parse of the conversation JSON: p50 %.1f us, p99 %.1f us\n", pct(t, iters, 0.5),
           pct(t, iters, 0.99));
    if (measured)
        printf("render over %d templates: mean p50 %.1f us, worst p99 %.1f us wall, %.1f us CPU "
               "(goal <= 100 us: %s)\n",
               measured, sum50 / measured, worst, worst_cpu, worst <= 100 ? "met" : "NOT met");
    double load[3];
    if (getloadavg(load, 3) == 3)
        printf("load average %.2f %.2f %.2f (a shared host inflates the tail)\n", load[0], load[1], load[2]);
    free(t);
    json_decref(conv);
    json_decref(conv_s);
    for (unsigned f = 0; f < nf; f++) {
        free(files[f].path);
        free(files[f].src);
    }
    return 0;
}

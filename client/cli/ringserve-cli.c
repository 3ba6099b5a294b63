/* SPDX-License-Identifier: MIT */
/*
 * ringserve-cli: send generate requests to a running instance from a shell.
 * The prompt comes from the arguments or stdin (an empty prompt is BOS
 * alone); only the generated text goes to stdout, diagnostics to stderr.
 * Every request field has a flag named after it; --json prints one JSON
 * object per request with the token ids, usage and timings (the server's and
 * this client's, per token). --n and --concurrency send many at once. It is
 * also the client library's reference user. A conversation (--messages FILE,
 * or --system/--user) is sent as `messages`, for the server to render with
 * the model's chat template.
 */
#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/chat.h"
#include "client/client.h"
#include "client/options.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/opt.h"
#include "common/utf8.h"

/* One prompt: text (len bytes, borrowed or owned), token ids (owned) or the conversation. */
struct cli_prompt {
    const char *text;
    size_t len;
    uint32_t *ids;
    uint32_t n_ids;
    int chat; /* the generate's chat fields come from cli_args.chat_gen */
};

struct cli_args {
    struct rs_client_gen_args gen;
    struct rs_client_conn_args conn;
    struct cli_prompt *prompts;
    uint32_t n_prompts;
    uint32_t n, concurrency;
    const char *id;
    const char *prompt_file;
    const char *prompt_ids;
    const char *messages_file, *system, *user;
    struct rs_client_chat chat;       /* the conversation's packed bytes */
    struct rs_wire_generate chat_gen; /* its messages/tools/kwargs views and bits */
    int json, verbose;
    char *owned; /* stdin or prompt-file bytes */
};

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* One request to make and what came back. */
struct job {
    const struct cli_prompt *prompt;
    uint32_t index;
    char id[RS_CLIENT_ID_CAP];
    struct rs_client_result res;
    struct rs_wire_logprob *lps; /* --json with --logprobs: one per token */
    uint32_t n_lps, cap_lps;
    int submitted, done, printed;
    struct run *run;
};

struct run {
    struct cli_args *a;
    rs_client *c;
    struct job *jobs;
    uint32_t n_jobs, next_submit, next_print, in_flight, failed;
    int live_stream; /* one text request: print deltas as they arrive */
};

static int keep_logprobs(struct job *j, const struct rs_client_event *ev)
{
    if (ev->logprobs == NULL || ev->n_tokens == 0)
        return 0;
    if (j->n_lps + ev->n_tokens > j->cap_lps) {
        uint32_t cap = j->cap_lps ? j->cap_lps : 64;
        while (cap < j->n_lps + ev->n_tokens)
            cap *= 2;
        struct rs_wire_logprob *p = realloc(j->lps, cap * sizeof(*p));
        if (p == NULL)
            return -1;
        j->lps = p;
        j->cap_lps = cap;
    }
    memcpy(j->lps + j->n_lps, ev->logprobs, ev->n_tokens * sizeof(*ev->logprobs));
    j->n_lps += ev->n_tokens;
    return 0;
}

static void on_event(const struct rs_client_event *ev)
{
    struct job *j = ev->user;
    struct run *r = j->run;
    if (rs_client_result_add(&j->res, ev) != RS_OK || keep_logprobs(j, ev) != 0)
        fprintf(stderr, "ringserve-cli: out of memory collecting request '%s'\n", ev->id);
    if (r->live_stream && ev->text_len > 0) {
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
    }
    if (ev->kind != RS_CLIENT_EV_FINAL)
        return;
    j->done = 1;
    r->in_flight--;
    if (ev->status != RS_CLIENT_OK || ev->finish_reason == RS_WIRE_FINISH_ERROR) {
        r->failed++;
        fprintf(stderr, "ringserve-cli: request '%s' %s: %s%s%s\n", ev->id,
                ev->status == RS_CLIENT_OK ? "failed" : rs_client_status_name(ev->status),
                rs_wire_code_name(ev->error), ev->message[0] ? ": " : "", ev->message);
    }
}

/* The generate of job j from the parsed flags. */
static void job_generate(const struct run *r, const struct job *j, struct rs_wire_generate *g)
{
    *g = r->a->gen.gen;
    if (j->prompt->chat) {
        const struct rs_wire_generate *c = &r->a->chat_gen;
        g->has |= c->has;
        g->messages = c->messages;
        g->tools = c->tools;
        g->template_kwargs = c->template_kwargs;
        g->add_generation_prompt = c->add_generation_prompt;
    } else if (j->prompt->ids != NULL) {
        g->has |= RS_WIRE_GEN_PROMPT_IDS;
        g->prompt_ids = (struct rs_wire_ids){.n = j->prompt->n_ids, .vals = j->prompt->ids};
    } else {
        g->has |= RS_WIRE_GEN_PROMPT;
        g->prompt = (struct rs_wire_str){j->prompt->text, (uint32_t)j->prompt->len};
    }
}

static int submit_next(struct run *r)
{
    struct job *j = &r->jobs[r->next_submit];
    struct rs_wire_generate g;
    char idbuf[RS_CLIENT_ID_CAP];
    struct rs_client_req_opts o = {.timeout_ms = 0}; /* the client's: --timeout */
    job_generate(r, j, &g);
    if (r->a->id != NULL) {
        if (r->n_jobs == 1)
            snprintf(idbuf, sizeof(idbuf), "%s", r->a->id);
        else
            snprintf(idbuf, sizeof(idbuf), "%.50s-%u", r->a->id, j->index);
        o.id = idbuf;
    }
    rs_err rc = rs_client_submit(r->c, &g, &o, on_event, j, j->id);
    if (rc != RS_OK) {
        fprintf(stderr, "ringserve-cli: cannot submit request %u: %s\n", j->index,
                rc == RS_EINVAL ? "a field is out of the wire protocol's limits (see above)"
                                : rs_strerror(rc));
        return -1;
    }
    j->submitted = 1;
    r->next_submit++;
    r->in_flight++;
    return 0;
}

/* Prints finished jobs in submission order (text mode: the whole output, then a newline). */
static void print_ready(struct run *r)
{
    while (r->next_print < r->n_jobs && r->jobs[r->next_print].done) {
        struct job *j = &r->jobs[r->next_print++];
        if (r->a->json)
            rs_client_result_json(stdout, &j->res, j->index, r->a->gen.gen.logprobs ? j->lps : NULL,
                                  j->n_lps);
        else if (!r->live_stream) {
            fwrite(j->res.text, 1, j->res.text_len, stdout);
            fputc('\n', stdout);
        } else if (isatty(STDOUT_FILENO)) {
            fputc('\n', stdout); /* a terminal prompt after the text, not inside it */
        }
        fflush(stdout);
    }
}

static void cancel_all(struct run *r)
{
    for (uint32_t i = 0; i < r->next_submit; i++)
        if (!r->jobs[i].done)
            rs_client_cancel(r->c, r->jobs[i].id);
}

/* Submits up to --concurrency at a time until every job has its final. */
static int drive(struct run *r)
{
    int cancelled = 0;
    uint64_t give_up = 0;
    while (r->next_print < r->n_jobs) {
        while (!interrupted && r->next_submit < r->n_jobs && r->in_flight < r->a->concurrency)
            if (submit_next(r) != 0)
                return 1;
        if (interrupted && !cancelled) {
            fprintf(stderr, "ringserve-cli: interrupted: cancelling\n");
            cancel_all(r);
            cancelled = 1;
            give_up = rs_clock_ms() + 3000;
            r->n_jobs = r->next_submit; /* nothing more is sent */
        }
        if (cancelled && rs_clock_ms() > give_up)
            return 130;
        if (r->in_flight > 0 && rs_client_poll(r->c, 200) < 0)
            return 1;
        print_ready(r);
    }
    return interrupted ? 130 : r->failed ? 1 : 0;
}

/* Reads all of f into a new buffer (*out, NUL-terminated) of *len bytes; 0 or -1. */
static int read_all(FILE *f, char **out, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (n < cap - 1)
            break;
        if (cap > (size_t)RS_WIRE_PROMPT_MAX * 64)
            break; /* far past any prompt limit: stop reading, the check below refuses it */
        char *b = realloc(buf, cap * 2);
        if (b == NULL)
            free(buf);
        buf = b;
        cap *= 2;
    }
    if (buf == NULL || ferror(f)) {
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

/* The prompt of the positional arguments argv[first..argc), joined by spaces, or stdin. */
static int prompt_from_args(struct cli_args *a, int argc, char **argv, int first)
{
    size_t len = 0;
    if (first >= argc) {
        if (read_all(stdin, &a->owned, &len) != 0) {
            fprintf(stderr, "ringserve-cli: cannot read the prompt from stdin\n");
            return -1;
        }
    } else {
        for (int i = first; i < argc; i++)
            len += strlen(argv[i]) + 1;
        if ((a->owned = malloc(len)) == NULL)
            return -1;
        a->owned[0] = '\0';
        for (int i = first; i < argc; i++) {
            strcat(a->owned, argv[i]);
            if (i + 1 < argc)
                strcat(a->owned, " ");
        }
        len = strlen(a->owned);
    }
    a->prompts = calloc(1, sizeof(*a->prompts));
    if (a->prompts == NULL)
        return -1;
    a->prompts[0] = (struct cli_prompt){.text = a->owned, .len = len};
    a->n_prompts = 1;
    return 0;
}

/* One prompt per line of --prompt-file (the newline is not part of it). */
static int prompts_from_file(struct cli_args *a)
{
    FILE *f = fopen(a->prompt_file, "r");
    size_t len, n = 0;
    if (f == NULL || read_all(f, &a->owned, &len) != 0) {
        fprintf(stderr, "ringserve-cli: cannot read %s: %s\n", a->prompt_file, strerror(errno));
        if (f != NULL)
            fclose(f);
        return -1;
    }
    fclose(f);
    for (size_t i = 0; i < len; i++)
        n += a->owned[i] == '\n';
    a->prompts = calloc(n + 1, sizeof(*a->prompts));
    if (a->prompts == NULL)
        return -1;
    for (char *p = a->owned, *end = a->owned + len; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t l = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
        a->prompts[a->n_prompts++] = (struct cli_prompt){.text = p, .len = l};
        p += l + 1;
    }
    if (a->n_prompts == 0) {
        fprintf(stderr, "ringserve-cli: %s holds no prompt\n", a->prompt_file);
        return -1;
    }
    return 0;
}

/* The conversation of --messages FILE.json ('-': stdin) or --system/--user, as one prompt. */
static int load_chat(struct cli_args *a, int argc, int first)
{
    char err[512];
    size_t len = 0;
    if (first < argc || a->prompt_file != NULL || a->prompt_ids != NULL) {
        fprintf(stderr, "ringserve-cli: a conversation (--messages, --system, --user) takes no "
                "other prompt\n");
        return -1;
    }
    if (a->messages_file != NULL && (a->system != NULL || a->user != NULL)) {
        fprintf(stderr, "ringserve-cli: give --messages or --system/--user, not both\n");
        return -1;
    }
    if (a->messages_file == NULL && a->user == NULL) {
        fprintf(stderr, "ringserve-cli: --system needs --user\n");
        return -1;
    }
    if (a->messages_file != NULL) {
        int std = strcmp(a->messages_file, "-") == 0;
        FILE *f = std ? stdin : fopen(a->messages_file, "r");
        int bad = f == NULL || read_all(f, &a->owned, &len) != 0;
        if (f != NULL && !std)
            fclose(f);
        if (bad) {
            fprintf(stderr, "ringserve-cli: cannot read %s: %s\n", a->messages_file,
                    strerror(errno));
            return -1;
        }
    }
    if ((a->messages_file != NULL
             ? rs_client_chat_parse(&a->chat, a->owned, len, &a->chat_gen, err, sizeof(err))
             : rs_client_chat_simple(&a->chat, a->system, a->user, &a->chat_gen, err,
                                     sizeof(err))) != RS_OK) {
        fprintf(stderr, "ringserve-cli: %s: %s\n", a->messages_file ? a->messages_file
                : "--system/--user", err);
        return -1;
    }
    if ((a->prompts = calloc(1, sizeof(*a->prompts))) == NULL)
        return -1;
    a->prompts[0].chat = 1;
    a->n_prompts = 1;
    return 0;
}

/* The prompt(s) from --prompt-ids, --prompt-file or the arguments; checked for UTF-8. */
static int load_prompts(struct cli_args *a, int argc, char **argv, int first)
{
    char err[256];
    if (a->messages_file != NULL || a->system != NULL || a->user != NULL)
        return load_chat(a, argc, first);
    if (a->prompt_ids != NULL) {
        if (first < argc || a->prompt_file != NULL) {
            fprintf(stderr, "ringserve-cli: --prompt-ids takes no text prompt as well\n");
            return -1;
        }
        a->prompts = calloc(1, sizeof(*a->prompts));
        a->n_prompts = 1;
        if (a->prompts == NULL ||
            rs_client_parse_ids(a->prompt_ids, &a->prompts[0].ids, &a->prompts[0].n_ids, err,
                                sizeof(err)) != 0) {
            fprintf(stderr, "ringserve-cli: --prompt-ids: %s\n", err);
            return -1;
        }
        return 0;
    }
    if (a->prompt_file != NULL && first < argc) {
        fprintf(stderr, "ringserve-cli: --prompt-file takes no prompt arguments as well\n");
        return -1;
    }
    if ((a->prompt_file != NULL ? prompts_from_file(a) : prompt_from_args(a, argc, argv, first)))
        return -1;
    for (uint32_t i = 0; i < a->n_prompts; i++) {
        size_t bad = rs_utf8_valid_prefix(a->prompts[i].text, a->prompts[i].len);
        if (bad < a->prompts[i].len || a->prompts[i].len > RS_WIRE_PROMPT_MAX) {
            fprintf(stderr, "ringserve-cli: prompt %u: %s\n", i,
                    bad < a->prompts[i].len ? "not valid UTF-8" : "longer than 1 MiB");
            return -1;
        }
    }
    return 0;
}

#define CLI(f) offsetof(struct cli_args, f)
#define COUNT(nm, f, h)                                                                          \
    {.name = nm, .kind = RS_OPT_U32, .off = CLI(f), .min = 1, .max = 1000000, .arg = "N",        \
     .help = h}

static const struct rs_opt cli_opts[] = {
    {.name = "prompt-ids", .kind = RS_OPT_ARG, .off = CLI(prompt_ids), .arg = "ID,...",
     .help = "token ids instead of text (no BOS added)"},
    {.name = "prompt-file", .kind = RS_OPT_ARG, .off = CLI(prompt_file), .arg = "FILE",
     .help = "one prompt per line (UTF-8)"},
    {.name = "messages", .kind = RS_OPT_ARG, .off = CLI(messages_file), .arg = "FILE.json",
     .help = "a conversation for the model's chat template: a messages\n"
             "array, or {\"messages\": [...], \"tools\": [...],\n"
             "\"chat_template_kwargs\": {...}} ('-' reads stdin)"},
    {.name = "system", .kind = RS_OPT_ARG, .off = CLI(system), .arg = "TEXT",
     .help = "a system message (with --user)"},
    {.name = "user", .kind = RS_OPT_ARG, .off = CLI(user), .arg = "TEXT",
     .help = "a user message: a one-turn conversation"},
    {.name = "no-generation-prompt", .kind = RS_OPT_BOOL,
     .off = CLI(chat_gen.add_generation_prompt), .val = 0,
     .has_bit = RS_WIRE_GEN_ADD_GENERATION_PROMPT, .has_off = CLI(chat_gen.has),
     .help = "render the conversation without the assistant turn's\n"
             "opening (continue the last message)"},
    COUNT("n", n, "send each prompt N times (default 1)"),
    COUNT("concurrency", concurrency, "at most N requests in flight (default 1)"),
    {.name = "id", .kind = RS_OPT_ARG, .off = CLI(id), .arg = "ID",
     .help = "request id (with several requests: ID-<k>)"},
    {.name = "json", .kind = RS_OPT_FLAG, .off = CLI(json), .val = 1,
     .help = "one JSON object per request and line: text, token\n"
             "ids, finish_reason, usage, server and client timings\n"
             "(per-token arrival times), seed, logprobs"},
    {.name = "verbose", .short_name = 'v', .kind = RS_OPT_FLAG, .off = CLI(verbose), .val = 1,
     .help = "log reconnections and resends to stderr"},
    {0},
};

static const char usage[] =
    "usage: ringserve-cli [options] [PROMPT...]\n"
    "Sends a generate request to a running ringserve instance and streams the\n"
    "generated text to stdout. The prompt is the arguments joined by spaces, or\n"
    "all of stdin when there are none (read as is: a trailing newline is part of\n"
    "it); an empty prompt is BOS alone. Options end at the first argument that is\n"
    "not one (or at --). Exit status: 0 when every request ended normally, 1 when\n"
    "one failed (the reason goes to stderr), 2 for bad options.\n";

/* 0 parsed, 1 after --help, 2 after printing an error. */
static int cli_parse(int argc, char **argv, struct cli_args *a)
{
    char err[512];
    int first;
    memset(a, 0, sizeof(*a));
    rs_client_gen_args_init(&a->gen);
    rs_wire_generate_init(&a->chat_gen); /* before parsing: --no-generation-prompt sets it */
    rs_client_conn_args_init(&a->conn);
    a->n = a->concurrency = 1;
    const struct rs_opt_group g[] = {
        {RS_CLIENT_GEN_TITLE, rs_client_gen_opts, &a->gen, NULL},
        {RS_CLIENT_CX_TITLE, rs_client_cx_opts, &a->gen, NULL},
        {"prompt and output", cli_opts, a, NULL},
        {RS_CLIENT_CONN_TITLE, rs_client_conn_opts, &a->conn, NULL},
    };
    int r = rs_opt_parse(g, 4, argc, argv, RS_OPT_OPERANDS | RS_OPT_IN_ORDER, &first, err,
                         sizeof(err));
    if (r == RS_OPT_HELP) {
        rs_opt_help(stdout, usage, g, 4);
        return 1;
    }
    if (r != RS_OPT_OK) {
        fprintf(stderr, "ringserve-cli: %s\n", err);
        return 2;
    }
    return load_prompts(a, argc, argv, first) == 0 ? 0 : 2;
}

static void cli_args_fini(struct cli_args *a)
{
    for (uint32_t i = 0; i < a->n_prompts && a->prompts != NULL; i++)
        free(a->prompts[i].ids);
    free(a->prompts);
    free(a->owned);
    rs_client_chat_fini(&a->chat);
    rs_client_gen_args_fini(&a->gen);
}

static int run_jobs(struct cli_args *a)
{
    struct run r = {.a = a};
    rs_err rc = rs_client_create(&a->conn.opts, &r.c);
    if (rc != RS_OK) {
        fprintf(stderr, "ringserve-cli: cannot create the client: %s\n", rs_strerror(rc));
        return 1;
    }
    r.n_jobs = a->n_prompts * a->n;
    r.jobs = calloc(r.n_jobs, sizeof(*r.jobs));
    if (r.jobs == NULL) {
        rs_client_destroy(&r.c);
        return 1;
    }
    for (uint32_t i = 0; i < r.n_jobs; i++)
        r.jobs[i] = (struct job){.prompt = &a->prompts[i / a->n], .index = i, .run = &r};
    r.live_stream = !a->json && r.n_jobs == 1;
    int code = drive(&r);
    for (uint32_t i = 0; i < a->n_prompts * a->n; i++) {
        rs_client_result_fini(&r.jobs[i].res);
        free(r.jobs[i].lps);
    }
    free(r.jobs);
    rs_client_destroy(&r.c);
    return code;
}

int main(int argc, char **argv)
{
    struct cli_args a;
    rs_log_init("ringserve-cli");
    int rc = cli_parse(argc, argv, &a);
    if (rc != 0) {
        cli_args_fini(&a);
        return rc == 1 ? 0 : 2; /* 1: --help printed */
    }
    if (getenv("RS_LOG_LEVEL") == NULL)
        rs_log_set_level(a.verbose ? RS_LOG_INFO : RS_LOG_WARN);
    signal(SIGINT, on_sigint);
    signal(SIGPIPE, SIG_IGN);
    int code = run_jobs(&a);
    cli_args_fini(&a);
    return code;
}

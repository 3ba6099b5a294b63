/* SPDX-License-Identifier: MIT */
/*
 * ringserve-template: renders a chat template for a conversation exactly as
 * Hugging Face transformers' apply_chat_template would, with the renderer
 * the server uses (common/jinja.h). The template comes from a file or from a
 * GGUF's tokenizer.chat_template (then BOS/EOS default to the model's own
 * token text); the conversation is a JSON object {messages, tools?,
 * documents?} (or a bare messages array). Prints the rendered bytes and
 * nothing else; on an error prints it with the template's line:column on
 * stderr and exits 1. Leaves out tokenizing the result (ringserve-tokenize).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"
#include "common/jinja.h"
#include "common/log.h"
#include "common/opt.h"
#include "common/vocab.h"

#define MAX_TEMPLATE (16u << 20)

struct opts {
    const char *tmpl, *model, *messages, *bos, *eos, *date, *vars;
    int gen;
};

#define O(f) offsetof(struct opts, f)
#define TEXT(nm, f, a, h) {.name = nm, .kind = RS_OPT_ARG, .off = O(f), .arg = a, .help = h}

static const struct rs_opt opt_table[] = {
    {.name = "template", .short_name = 't', .kind = RS_OPT_ARG, .off = O(tmpl),
     .arg = "FILE.jinja", .help = "the template text (Jinja)"},
    {.name = "model", .short_name = 'm', .kind = RS_OPT_ARG, .off = O(model), .arg = "FILE.gguf",
     .help = "use the GGUF's tokenizer.chat_template; BOS/EOS default\nto the model's tokens"},
    TEXT("messages", messages, "FILE.json",
         "{\"messages\": [...], \"tools\": [...]} or a messages array\n('-' reads stdin; "
         "required)"),
    {.name = "add-generation-prompt", .kind = RS_OPT_FLAG, .off = O(gen), .val = 1,
     .help = "end with the assistant turn's opening"},
    TEXT("bos", bos, "TEXT", "bos_token (default empty, or the model's)"),
    TEXT("eos", eos, "TEXT", "eos_token (default empty, or the model's)"),
    TEXT("date", date, "YYYY-MM-DD", "the date strftime_now formats (default: the local clock)"),
    TEXT("vars", vars, "JSON", "extra template variables, e.g. '{\"enable_thinking\": false}'"),
    {0},
};

static const char usage[] =
    "usage: ringserve-template (--template FILE.jinja | --model FILE.gguf)\n"
    "                          --messages FILE.json [options]\n"
    "Renders the chat template for the conversation and prints the exact text.\n";

/* -1 to run, else the exit code. */
static int parse_args(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof(*o));
    struct rs_opt_group g = {NULL, opt_table, o, NULL};
    int code = rs_opt_main("ringserve-template", usage, &g, 1, argc, argv, 0, NULL);
    if (code >= 0)
        return code;
    if (!o->tmpl == !o->model) {
        fprintf(stderr, "ringserve-template: give exactly one of --template and --model\n");
        return 2;
    }
    if (!o->messages) {
        fprintf(stderr, "ringserve-template: --messages FILE.json is required\n");
        return 2;
    }
    return -1;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 65536;
            if (cap > MAX_TEMPLATE + 1) {
                free(buf);
                fclose(f);
                return NULL;
            }
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0)
            break;
    }
    fclose(f);
    *len = n;
    return buf;
}

static char *dup_text(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* Template text and default BOS/EOS from a GGUF. */
static int load_model(const char *path, char **tmpl, size_t *len, char **bos, char **eos)
{
    rs_gguf *g;
    char err[256];
    if (rs_gguf_open(path, &g, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "ringserve-template: %s: %s\n", path, err);
        return 1;
    }
    struct rs_gguf_str s;
    if (rs_gguf_get_str(g, "tokenizer.chat_template", &s) != RS_OK) {
        fprintf(stderr, "ringserve-template: %s has no tokenizer.chat_template\n", path);
        rs_gguf_close(&g);
        return 1;
    }
    *tmpl = dup_text(s.ptr, s.len);
    *len = s.len;
    rs_vocab *v;
    if (rs_vocab_load(g, &v, err, sizeof(err)) == RS_OK) {
        size_t n;
        const char *t;
        if (rs_vocab_bos(v) >= 0 && (t = rs_vocab_token_text(v, rs_vocab_bos(v), &n)) != NULL)
            *bos = dup_text(t, n);
        if (rs_vocab_eos(v) >= 0 && (t = rs_vocab_token_text(v, rs_vocab_eos(v), &n)) != NULL)
            *eos = dup_text(t, n);
        rs_vocab_destroy(&v);
    } else {
        fprintf(stderr, "ringserve-template: warning: %s: vocab not loaded (%s); BOS/EOS empty\n",
                path, err);
    }
    rs_gguf_close(&g);
    return *tmpl ? 0 : 1;
}

static json_t *load_conversation(const char *path)
{
    json_error_t je;
    json_t *j = strcmp(path, "-") == 0 ? json_loadf(stdin, JSON_ALLOW_NUL, &je)
                                       : json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!j) {
        fprintf(stderr, "ringserve-template: %s:%d:%d: %s\n", path, je.line, je.column, je.text);
        return NULL;
    }
    if (json_is_array(j)) {
        json_t *o = json_object();
        json_object_set_new(o, "messages", j);
        return o;
    }
    if (!json_is_object(j) || !json_is_array(json_object_get(j, "messages"))) {
        fprintf(stderr, "ringserve-template: %s: expected an object with a \"messages\" array\n",
                path);
        json_decref(j);
        return NULL;
    }
    return j;
}

static int render(const struct opts *o, const char *src, size_t len, const char *bos,
                  const char *eos, json_t *conv, json_t *vars)
{
    const char *name = o->tmpl ? o->tmpl : o->model;
    struct rs_jinja_error err = {0};
    rs_jinja *t;
    if (rs_jinja_compile(src, len, &t, &err) != RS_OK) {
        fprintf(stderr, "ringserve-template: %s:%u:%u: %s error: %s\n", name, err.line, err.col,
                rs_jinja_errkind_name(err.kind), err.msg ? err.msg : "");
        rs_jinja_error_fini(&err);
        return 1;
    }
    struct tm date;
    struct rs_jinja_ctx ctx = {
        .messages = json_object_get(conv, "messages"),
        .tools = json_object_get(conv, "tools"),
        .documents = json_object_get(conv, "documents"),
        .vars = vars,
        .add_generation_prompt = o->gen,
        .bos_token = bos,
        .eos_token = eos,
    };
    if (o->date) {
        if (rs_jinja_parse_time(o->date, &date) != RS_OK) {
            fprintf(stderr, "ringserve-template: --date '%s' is not YYYY-MM-DD[ HH:MM:SS]\n",
                    o->date);
            rs_jinja_destroy(&t);
            return 2;
        }
        ctx.now = &date;
    }
    char *out;
    size_t out_len;
    int rc = 0;
    if (rs_jinja_render(t, &ctx, &out, &out_len, &err) != RS_OK) {
        if (err.kind == RS_JINJA_ERR_RAISE)
            fprintf(stderr, "ringserve-template: %s:%u:%u: raise_exception: %s\n", name, err.line,
                    err.col, err.msg);
        else
            fprintf(stderr, "ringserve-template: %s:%u:%u: %s error: %s\n", name, err.line,
                    err.col, rs_jinja_errkind_name(err.kind), err.msg ? err.msg : "");
        rs_jinja_error_fini(&err);
        rc = 1;
    } else {
        if (fwrite(out, 1, out_len, stdout) != out_len || fflush(stdout) != 0)
            rc = 1;
        free(out);
    }
    rs_jinja_destroy(&t);
    return rc;
}

int main(int argc, char **argv)
{
    struct opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return rc;
    rs_log_init("template");
    char *src = NULL, *bos = NULL, *eos = NULL;
    size_t len = 0;
    if (o.model) {
        if (load_model(o.model, &src, &len, &bos, &eos))
            return 1;
    } else if (!(src = read_file(o.tmpl, &len))) {
        fprintf(stderr, "ringserve-template: cannot read %s (missing, or over 16 MiB)\n", o.tmpl);
        return 1;
    }
    json_t *vars = NULL;
    if (o.vars) {
        json_error_t je;
        vars = json_loads(o.vars, JSON_ALLOW_NUL, &je);
        if (!vars || !json_is_object(vars)) {
            fprintf(stderr, "ringserve-template: --vars must be a JSON object (%s)\n",
                    vars ? "not an object" : je.text);
            json_decref(vars);
            free(src);
            return 2;
        }
    }
    json_t *conv = load_conversation(o.messages);
    if (!conv) {
        rc = 1;
    } else {
        rc = render(&o, src, len, o.bos ? o.bos : bos, o.eos ? o.eos : eos, conv, vars);
        json_decref(conv);
    }
    json_decref(vars);
    free(src);
    free(bos);
    free(eos);
    return rc;
}

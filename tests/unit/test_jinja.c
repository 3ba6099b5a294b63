/* SPDX-License-Identifier: MIT */
/*
 * The chat-template renderer against Hugging Face transformers' own output:
 * every case of ../shared/refdata/chat-templates (63 real templates x their
 * conversations x add_generation_prompt, 1,356 cases) rendered byte for byte,
 * each expected error an error (raise_exception ones with the exact message,
 * the others of the same Python exception type); then ringserve-template,
 * the tool, on the same files and on a GGUF's own tokenizer.chat_template.
 * One ctest case runs the whole corpus and prints its counts and any
 * mismatch; it skips (77) when the refdata is absent.
 */
#include <sys/wait.h>

#include "tests/unit/jinja_fixture.h"

#define MAX_FILE (4u << 20)

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(MAX_FILE);
    size_t n = buf ? fread(buf, 1, MAX_FILE - 1, f) : 0;
    fclose(f);
    if (buf)
        buf[n] = 0;
    *len = n;
    return buf;
}

/* Splits a TSV line in place into at most max fields. */
static int split_tsv(char *line, char **f, int max)
{
    int n = 0;
    f[n++] = line;
    for (char *p = line; *p && n < max; p++)
        if (*p == '\t') {
            *p = 0;
            f[n++] = p + 1;
        }
    return n;
}

static enum rs_jinja_errkind kind_of(const char *python_type)
{
    static const struct {
        const char *py;
        enum rs_jinja_errkind k;
    } map[] = {
        {"UndefinedError", RS_JINJA_ERR_UNDEFINED}, {"TypeError", RS_JINJA_ERR_TYPE},
        {"SecurityError", RS_JINJA_ERR_SECURITY},   {"TemplateRuntimeError", RS_JINJA_ERR_RUNTIME},
        {"ValueError", RS_JINJA_ERR_VALUE},         {"TemplateSyntaxError", RS_JINJA_ERR_SYNTAX},
        {"TemplateError", RS_JINJA_ERR_RAISE},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (!strcmp(map[i].py, python_type))
            return map[i].k;
    return RS_JINJA_ERR_NONE;
}

struct corpus_stats {
    int cases, ok, rendered, raised, other_errors;
};

/* One case: returns 1 when it matches, else prints why. */
static int run_case(const char *dir, char **f, rs_jinja *t, json_t *conv, struct corpus_stats *s)
{
    const char *tmpl = f[0], *convname = f[1], *bos = f[3], *eos = f[4], *exp = f[5], *res = f[6];
    char path[2400];
    size_t want_len;
    snprintf(path, sizeof(path), "%s/%s", dir, exp);
    char *want = slurp(path, &want_len);
    if (!want) {
        fprintf(stderr, "  %s: cannot read\n", path);
        return 0;
    }
    struct tm date;
    rs_jinja_parse_time("2026-01-15", &date);
    struct rs_jinja_ctx ctx = {
        .messages = json_object_get(conv, "messages"),
        .tools = json_object_get(conv, "tools"),
        .add_generation_prompt = !strcmp(f[2], "true"),
        .bos_token = bos,
        .eos_token = eos,
        .now = &date,
    };
    char *out = NULL;
    size_t n = 0;
    struct rs_jinja_error err = {0};
    rs_err rc = rs_jinja_render(t, &ctx, &out, &n, &err);
    int ok;
    if (!strcmp(res, "ok")) {
        ok = rc == RS_OK && n == want_len && memcmp(out, want, n) == 0;
        s->rendered += ok;
    } else if (!strcmp(res, "raise_exception")) {
        ok = rc != RS_OK && err.kind == RS_JINJA_ERR_RAISE && err.msg_len == want_len &&
             memcmp(err.msg, want, want_len) == 0;
        s->raised += ok;
    } else {
        ok = rc != RS_OK && err.kind == kind_of(f[7]);
        s->other_errors += ok;
    }
    if (!ok) {
        fprintf(stderr, "  MISMATCH %s x %s gen=%s: want %s", tmpl, convname, f[2], res);
        if (rc == RS_OK)
            fprintf(stderr, ", got %zu bytes of output\n", n);
        else
            fprintf(stderr, ", got %s error at %u:%u: %s\n", rs_jinja_errkind_name(err.kind), err.line,
                    err.col, err.msg);
    }
    free(out);
    free(want);
    rs_jinja_error_fini(&err);
    return ok;
}

static int test_golden_corpus(void)
{
    char dir[1024], path[1200];
    if (!rs_test_refdata("chat-templates/cases.tsv", path, sizeof(path)))
        return RS_TEST_SKIP;
    snprintf(dir, sizeof(dir), "%.*s", (int)(strlen(path) - strlen("/cases.tsv")), path);
    size_t len;
    char *tsv = slurp(path, &len);
    RS_CHECK(tsv != NULL);
    struct corpus_stats s = {0};
    char cur_t[256] = "", cur_c[256] = "";
    rs_jinja *t = NULL;
    json_t *conv = NULL;
    char *line = strchr(tsv, '\n') + 1; /* header */
    int compile_failures = 0;
    for (char *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        char *f[8];
        if (split_tsv(line, f, 8) != 8)
            continue;
        s.cases++;
        if (strcmp(cur_t, f[0]) != 0) {
            rs_jinja_destroy(&t);
            snprintf(cur_t, sizeof(cur_t), "%s", f[0]);
            snprintf(path, sizeof(path), "%s/templates/%s.jinja", dir, f[0]);
            size_t tl;
            char *src = slurp(path, &tl);
            struct rs_jinja_error err = {0};
            if (!src || rs_jinja_compile(src, tl, &t, &err) != RS_OK) {
                fprintf(stderr, "  %s does not compile: %s\n", f[0], err.msg ? err.msg : "unreadable");
                compile_failures++;
            }
            rs_jinja_error_fini(&err);
            free(src);
        }
        if (strcmp(cur_c, f[1]) != 0) {
            json_decref(conv);
            snprintf(cur_c, sizeof(cur_c), "%s", f[1]);
            snprintf(path, sizeof(path), "%s/conversations/%s.json", dir, f[1]);
            json_error_t je;
            conv = json_load_file(path, 0, &je);
            RS_CHECK_MSG(conv != NULL, "%s: %s", path, je.text);
        }
        if (t && run_case(dir, f, t, conv, &s))
            s.ok++;
    }
    rs_jinja_destroy(&t);
    json_decref(conv);
    free(tsv);
    fprintf(stderr,
            "jinja golden corpus: %d/%d cases match (%d rendered byte-exact, %d raise_exception with "
            "the exact message, %d other errors of Python's type); %d templates failed to compile\n",
            s.ok, s.cases, s.rendered, s.raised, s.other_errors, compile_failures);
    RS_CHECK(s.cases == 1356);
    RS_CHECK(s.ok == s.cases);
    return 0;
}

/* Runs the tool with argv; captures stdout and stderr; returns the exit status. */
static int run_tool(char *const argv[], char **out, size_t *out_len, char **err)
{
    char o[512], e[512];
    snprintf(o, sizeof(o), "%s/tool.out", rs_test_tmpdir());
    snprintf(e, sizeof(e), "%s/tool.err", rs_test_tmpdir());
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(o, "wb", stdout) || !freopen(e, "wb", stderr))
            _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    size_t el;
    *out = slurp(o, out_len);
    *err = slurp(e, &el);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int test_tool_renders_exact_bytes(void)
{
    char dir[1024], tool[1024], tmpl[1200], conv[1200], want_path[1200];
    if (!rs_test_refdata("chat-templates/cases.tsv", dir, sizeof(dir)))
        return RS_TEST_SKIP;
    dir[strlen(dir) - strlen("/cases.tsv")] = 0;
    snprintf(tool, sizeof(tool), "%s/ringserve-template", rs_test_bindir());
    snprintf(tmpl, sizeof(tmpl), "%s/templates/meta-llama-Llama-3.1-8B-Instruct.jinja", dir);
    snprintf(conv, sizeof(conv), "%s/conversations/tool_call_openai.json", dir);
    snprintf(want_path, sizeof(want_path),
             "%s/expected/meta-llama-Llama-3.1-8B-Instruct__tool_call_openai__gen1.txt", dir);
    char *argv[] = {tool, "--template", tmpl, "--messages", conv, "--add-generation-prompt",
                    "--bos", "<|begin_of_text|>", "--eos=<|eot_id|>", "--date=2026-01-15", NULL};
    char *out, *err;
    size_t n, wl;
    int rc = run_tool(argv, &out, &n, &err);
    char *want = slurp(want_path, &wl);
    RS_CHECK_MSG(rc == 0, "exit %d: %s", rc, err);
    RS_CHECK(want && n == wl && memcmp(out, want, n) == 0);
    free(out), free(err), free(want);

    /* a raise_exception case: exit 1, the message and position on stderr, nothing on stdout */
    snprintf(tmpl, sizeof(tmpl), "%s/templates/google-gemma-2-2b-it.jinja", dir);
    snprintf(conv, sizeof(conv), "%s/conversations/system_user.json", dir);
    char *argv2[] = {tool, "--template", tmpl, "--messages", conv, NULL};
    rc = run_tool(argv2, &out, &n, &err);
    RS_CHECK_MSG(rc == 1 && n == 0 && strstr(err, "raise_exception: System role not supported") &&
                     strstr(err, ".jinja:1:"),
                 "exit %d, stderr %s", rc, err);
    free(out), free(err);

    char *argv3[] = {tool, "--template", tmpl, NULL}; /* usage error */
    rc = run_tool(argv3, &out, &n, &err);
    RS_CHECK(rc == 2 && strstr(err, "--messages"));
    free(out), free(err);
    return 0;
}

static int test_tool_reads_gguf_template(void)
{
    char gguf[1024], dir[1024], tool[1024], conv[1200], want_path[1200];
    if (!rs_test_refdata("tokenizer/ggml-vocab-phi-3.gguf", gguf, sizeof(gguf)) ||
        !rs_test_refdata("chat-templates/cases.tsv", dir, sizeof(dir)))
        return RS_TEST_SKIP;
    dir[strlen(dir) - strlen("/cases.tsv")] = 0;
    snprintf(tool, sizeof(tool), "%s/ringserve-template", rs_test_bindir());
    snprintf(conv, sizeof(conv), "%s/conversations/multi_turn.json", dir);
    /* the vocab-only GGUF carries Phi-3-mini's template; BOS/EOS come from its vocab */
    snprintf(want_path, sizeof(want_path), "%s/expected/tct-Phi-3-mini__multi_turn__gen1.txt", dir);
    char *argv[] = {tool, "--model", gguf, "--messages", conv, "--add-generation-prompt", NULL};
    char *out, *err;
    size_t n, wl;
    int rc = run_tool(argv, &out, &n, &err);
    char *want = slurp(want_path, &wl);
    RS_CHECK_MSG(rc == 0, "exit %d: %s", rc, err);
    RS_CHECK(want && n == wl && memcmp(out, want, n) == 0);
    free(out), free(err), free(want);

    char other[1024];
    if (!rs_test_refdata("tokenizer/ggml-vocab-gpt-2.gguf", other, sizeof(other)))
        return RS_TEST_SKIP;
    char *argv2[] = {tool, "--model", other, "--messages", conv, NULL};
    rc = run_tool(argv2, &out, &n, &err);
    RS_CHECK_MSG(rc == 1 && strstr(err, "no tokenizer.chat_template"), "exit %d: %s", rc, err);
    free(out), free(err);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_golden_corpus),
    RS_TEST(test_tool_renders_exact_bytes),
    RS_TEST(test_tool_reads_gguf_template),
};
RS_TEST_MAIN(cases)

/* SPDX-License-Identifier: MIT */
/*
 * Structured output through the four real daemons (tests/pipeline_harness.h)
 * on the refdata models: JSON-schema outputs, greedy and sampled, parse and
 * validate with python3-jsonschema (tests/grammar_validate.py); GBNF and
 * regex outputs are accepted by Python's own parser and re module; a choice
 * returns one of its choices; logit_bias -100 bans a token and +100 forces
 * it; allowed_token_ids bounds the output; an unconstrained request's
 * output is bitwise its solo output while it shares batches with
 * constrained ones; every malformed constraint gets an error at intake
 * naming the field and the position.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/client.h"
#include "ipc/pipeline_metrics.h"
#include "common/clock.h"
#include "tests/pipeline_harness.h"
#include "tests/rs_test.h"
#include "tests/stream_rec.h"

#define SPM_MODEL "llama-2-tiny-random.gguf" /* 32,000-token vocab, random weights */
#define STORIES "stories260K.gguf"
#define CTX 512

static int start(struct rs_harness *h, const char *model, char *path, size_t cap)
{
    struct rs_harness_opts o = {0};
    if (rs_test_refdata(model, path, cap) == NULL)
        return RS_TEST_SKIP;
    o.model = path;
    o.n_ctx = CTX;
    o.max_requests = 64;
    o.max_seqs = 8;
    return rs_harness_start(h, &o) == RS_OK ? 0 : 1;
}

static rs_client *client_of(const struct rs_harness *h)
{
    return rs_harness_client(h, 120000);
}

/* A request for prompt: greedy when seed is 0, else sampled at temperature 0.9 with it. */
static void request(struct rs_wire_generate *g, const char *prompt, uint32_t n, uint64_t seed)
{
    rs_wire_generate_init(g);
    g->has = RS_WIRE_GEN_PROMPT | RS_WIRE_GEN_MAX_TOKENS | RS_WIRE_GEN_TEMPERATURE |
             RS_WIRE_GEN_STREAM;
    g->prompt = (struct rs_wire_str){prompt, (uint32_t)strlen(prompt)};
    g->max_tokens = n;
    g->temperature = seed == 0 ? 0.0f : 0.9f;
    g->stream = true;
    if (seed != 0) {
        g->has |= RS_WIRE_GEN_SEED;
        g->seed = seed;
    }
}

static void with_text(struct rs_wire_generate *g, enum rs_wire_cx_kind k, const char *text)
{
    g->has |= RS_WIRE_GEN_CONSTRAINT;
    g->cx.kind = k;
    g->cx.text = (struct rs_wire_str){text, text ? (uint32_t)strlen(text) : 0};
}

/* Runs g alone to its final on client c. 0 with *out filled (free it), else 1. */
static int run(rs_client *c, const struct rs_wire_generate *g, struct rs_client_result *out)
{
    memset(out, 0, sizeof(*out));
    if (rs_client_generate_sync(c, g, 0, NULL, NULL, out) != RS_OK) {
        fprintf(stderr, "generate_sync failed\n");
        return 1;
    }
    return 0;
}

/* Runs python3 on script with arg; its exit status (77: a module missing). */
static int python(const char *script, const char *arg)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s '%s'", script, arg);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

/* Appends {"schema": schema, "text": text} as one JSON line (text escaped by Python's rules). */
static void json_line(FILE *f, const char *schema, const char *text, size_t len)
{
    fprintf(f, "{\"schema\": %s, \"text\": \"", schema);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fprintf(f, "\"}\n");
}

static const char *const schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"tags\":{\"type\":\"array\",\"items\":{\"enum\":"
    "[\"red\",\"green\",\"blue\"]},\"minItems\":1,\"maxItems\":3},\"ok\":{\"type\":\"boolean\"}},"
    "\"required\":[\"tags\",\"ok\"],\"additionalProperties\":false}",
    "{\"$defs\":{\"pt\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\","
    "\"minimum\":-10,\"maximum\":10}},\"required\":[\"x\"],\"additionalProperties\":false}},"
    "\"type\":\"object\",\"properties\":{\"p\":{\"$ref\":\"#/$defs/pt\"},\"id\":{\"anyOf\":"
    "[{\"type\":\"integer\",\"minimum\":1,\"maximum\":99},{\"type\":\"string\",\"pattern\":"
    "\"^[a-z]{2,4}$\"}]}},\"required\":[\"p\",\"id\"],\"additionalProperties\":false}",
};

static int test_json_schema_outputs_validate_greedy_and_sampled(void)
{
    struct rs_harness h = {0};
    char model[512], path[] = "/tmp/rs-cx-XXXXXX";
    int rc = start(&h, SPM_MODEL, model, sizeof(model));
    if (rc != 0)
        return rc;
    rs_client *c = client_of(&h);
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    int fails = c == NULL || f == NULL;
    for (size_t s = 0; !fails && s < sizeof(schemas) / sizeof(schemas[0]); s++)
        for (uint64_t seed = 0; seed < 3 && !fails; seed++) {
            struct rs_wire_generate g;
            struct rs_client_result res;
            request(&g, "Here is the record:", 300, seed * 7919);
            with_text(&g, RS_WIRE_CX_JSON_SCHEMA, schemas[s]);
            fails |= run(c, &g, &res);
            if (fails)
                break;
            if (res.status != RS_CLIENT_OK || res.finish_reason != RS_WIRE_FINISH_STOP) {
                fprintf(stderr, "schema %zu seed %llu: status %s finish %d (%s) text %s\n", s,
                        (unsigned long long)seed, rs_client_status_name(res.status),
                        res.finish_reason, res.message, res.text);
                fails = 1;
            }
            json_line(f, schemas[s], res.text, res.text_len);
            rs_client_result_fini(&res);
        }
    if (f != NULL)
        fclose(f);
    rs_client_destroy(&c);
    if (fails)
        rs_harness_dump_logs(&h, RS_PIPE_STAGE_LAUNCHERD);
    rs_harness_stop(&h, fails);
    int v = fails ? 1 : python(RS_SOURCE_DIR "/tests/grammar_validate.py", path);
    unlink(path);
    return v == 77 ? RS_TEST_SKIP : v;
}


/* Python as the independent recogniser of text: exits 0 when `check` (a Python expression
 * over the string t) holds. */
static int python_check(const char *check, const char *text, size_t len)
{
    char path[] = "/tmp/rs-cx-text-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, text, len) != (ssize_t)len) {
        if (fd >= 0)
            close(fd);
        return 1;
    }
    close(fd);
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "/usr/bin/python3 -c 'import ast, json, re, sys; t = open(sys.argv[1], encoding=\"utf-8\")"
             ".read(); sys.exit(0 if (%s) else 1)' %s", check, path);
    int st = system(cmd);
    unlink(path);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

/* Runs g on c and checks the output stopped and passes `check` (see python_check). */
static int run_checked(rs_client *c, struct rs_wire_generate *g, const char *check,
                       const char *what)
{
    struct rs_client_result res;
    if (run(c, g, &res) != 0)
        return 1;
    int bad = res.status != RS_CLIENT_OK || res.finish_reason != RS_WIRE_FINISH_STOP ||
              python_check(check, res.text, res.text_len) != 0;
    if (bad)
        fprintf(stderr, "%s: status %s finish %d (%s: %s), output %u tokens: '%s'\n", what,
                rs_client_status_name(res.status), res.finish_reason,
                rs_wire_code_name(res.error), res.message, res.n_tokens, res.text);
    rs_client_result_fini(&res);
    return bad;
}

/* Arithmetic over integers, parentheses one level deep (so a random model ends within
 * max_tokens): what Python's own parser must accept as an expression. */
static const char arith_gbnf[] =
    "root ::= expr\n"
    "expr ::= term (ws op ws term){0,6}\n"
    "op ::= [-+*/]\n"
    "term ::= num | \"(\" ws num (ws op ws num){0,3} ws \")\"\n"
    "num ::= [1-9] [0-9]{0,3}\n"
    "ws ::= \" \"?\n";
/* A list of lower-case words, UTF-8 heavy: each item a Greek or CJK word. */
static const char list_gbnf[] =
    "root ::= \"[\" item (\", \" item){0,4} \"]\"\n"
    "item ::= [α-ω]{1,5} | [一-龥]{1,3}\n";

static int test_gbnf_and_regex_outputs_are_accepted_by_a_separate_recogniser(void)
{
    struct rs_harness h = {0};
    char model[512];
    int rc = start(&h, SPM_MODEL, model, sizeof(model));
    if (rc != 0)
        return rc;
    rs_client *c = client_of(&h);
    int fails = c == NULL;
    for (uint64_t seed = 0; seed < 3 && !fails; seed++) {
        struct rs_wire_generate g;
        request(&g, "Compute:", 200, seed * 31);
        with_text(&g, RS_WIRE_CX_GBNF, arith_gbnf);
        fails |= run_checked(c, &g, "isinstance(ast.parse(t, mode=\"eval\"), ast.Expression) "
                             "and re.fullmatch(r\"[0-9()+*/ -]+\", t)", "arithmetic");
        request(&g, "List:", 200, seed * 37);
        with_text(&g, RS_WIRE_CX_GBNF, list_gbnf);
        fails |= run_checked(c, &g, "re.fullmatch(r\"\\[([α-ω]{1,5}|[一-龥]{1,3})"
                             "(, ([α-ω]{1,5}|[一-龥]{1,3})){0,4}\\]\", t)", "utf-8 list");
        request(&g, "Date:", 200, seed * 41);
        with_text(&g, RS_WIRE_CX_REGEX, "(19|20)[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]");
        fails |= run_checked(c, &g, "re.fullmatch(r\"(19|20)\\d\\d-(0[1-9]|1[0-2])-[0-3]\\d\", t)",
                             "regex");
    }
    rs_client_destroy(&c);
    if (fails)
        rs_harness_dump_logs(&h, RS_PIPE_STAGE_LAUNCHERD);
    rs_harness_stop(&h, fails);
    return fails;
}

static int test_choice_returns_one_of_the_choices(void)
{
    struct rs_harness h = {0};
    char model[512];
    int rc = start(&h, STORIES, model, sizeof(model));
    if (rc != 0)
        return rc;
    rs_client *c = client_of(&h);
    int fails = c == NULL;
    static const char *const choices[] = {"yes", "no", "the cat sat", "maybe later"};
    for (uint64_t seed = 0; seed < 4 && !fails; seed++) {
        struct rs_wire_generate g;
        request(&g, "Once upon a time", 50, seed * 101);
        g.has |= RS_WIRE_GEN_CONSTRAINT;
        g.cx.kind = RS_WIRE_CX_CHOICE;
        g.cx.n_choices = 4;
        for (int i = 0; i < 4; i++)
            g.cx.choices[i] = (struct rs_wire_str){choices[i], (uint32_t)strlen(choices[i])};
        fails |= run_checked(c, &g, "t in (\"yes\", \"no\", \"the cat sat\", \"maybe later\")",
                             "choice");
    }
    rs_client_destroy(&c);
    rs_harness_stop(&h, fails);
    return fails;
}

static int test_logit_bias_minus_100_bans_plus_100_forces_and_allowed_ids_bound(void)
{
    struct rs_harness h = {0};
    char model[512];
    int rc = start(&h, STORIES, model, sizeof(model));
    if (rc != 0)
        return rc;
    rs_client *c = client_of(&h);
    struct rs_wire_generate g;
    struct rs_client_result base, ban, force, allow;
    int fails = c == NULL;
    request(&g, "Once upon a time", 24, 0);
    fails = fails || run(c, &g, &base) || base.n_tokens == 0;
    /* Ban every token of the unconstrained greedy output: none of them may appear. */
    struct rs_wire_bias bias[24];
    uint32_t n_bias = 0;
    for (uint32_t i = 0; !fails && i < base.n_tokens; i++) {
        int seen = 0;
        for (uint32_t j = 0; j < n_bias; j++)
            seen |= bias[j].token == base.tokens[i];
        if (!seen)
            bias[n_bias++] = (struct rs_wire_bias){base.tokens[i], -100.0f};
    }
    request(&g, "Once upon a time", 24, 0);
    g.has |= RS_WIRE_GEN_LOGIT_BIAS;
    g.cx.n_bias = n_bias;
    g.cx.bias = bias;
    fails = fails || run(c, &g, &ban) || ban.n_tokens == 0;
    for (uint32_t i = 0; !fails && i < ban.n_tokens; i++)
        for (uint32_t j = 0; j < n_bias; j++)
            RS_CHECK_MSG(ban.tokens[i] != bias[j].token, "banned token %u at output %u",
                         bias[j].token, i);
    /* +100 on one token the model would not pick: every output is that token. */
    struct rs_wire_bias up = {bias[0].token == 300 ? 301 : 300, 100.0f};
    request(&g, "Once upon a time", 8, 0);
    g.has |= RS_WIRE_GEN_LOGIT_BIAS;
    g.cx.n_bias = 1;
    g.cx.bias = &up;
    fails = fails || run(c, &g, &force) || force.n_tokens != 8;
    for (uint32_t i = 0; !fails && i < force.n_tokens; i++)
        RS_CHECK_MSG(force.tokens[i] == up.token, "output %u is %u, forced %u", i,
                     force.tokens[i], up.token);
    /* allowed_token_ids: sampled outputs stay inside the list. */
    uint32_t ids[] = {300, 301, 302, 400, 401};
    request(&g, "Once upon a time", 16, 77);
    g.has |= RS_WIRE_GEN_ALLOWED_TOKEN_IDS;
    g.cx.allowed = (struct rs_wire_ids){.n = 5, .vals = ids};
    fails = fails || run(c, &g, &allow) || allow.n_tokens != 16;
    for (uint32_t i = 0; !fails && i < allow.n_tokens; i++) {
        int in = 0;
        for (int j = 0; j < 5; j++)
            in |= allow.tokens[i] == ids[j];
        RS_CHECK_MSG(in, "output %u is %u, not an allowed id", i, allow.tokens[i]);
    }
    rs_client_result_fini(&base);
    rs_client_result_fini(&ban);
    rs_client_result_fini(&force);
    rs_client_result_fini(&allow);
    rs_client_destroy(&c);
    rs_harness_stop(&h, fails);
    return fails;
}

static void on_event(const struct rs_client_event *ev)
{
    stream_rec_add(ev->user, ev);
}

/* Polls c until every one of recs[0..n) has its final; 0 when they did. */
static int wait_all(rs_client *c, struct stream_rec *recs, int n)
{
    uint64_t end = rs_clock_ms() + 120000;
    for (;;) {
        int done = 0;
        for (int i = 0; i < n; i++)
            done += recs[i].n_finals > 0;
        if (done == n)
            return 0;
        if (rs_clock_ms() > end || rs_client_poll(c, 100) < 0)
            return 1;
    }
}

static int test_unconstrained_output_unchanged_when_batched_with_constrained(void)
{
    struct rs_harness h = {0};
    char model[512];
    int rc = start(&h, STORIES, model, sizeof(model));
    if (rc != 0)
        return rc;
    rs_client *c = client_of(&h);
    struct rs_wire_generate plain, cx[3];
    struct rs_client_result solo;
    request(&plain, "Once upon a time", 64, 0);
    plain.has |= RS_WIRE_GEN_IGNORE_EOS;
    plain.ignore_eos = true;
    int fails = c == NULL || run(c, &plain, &solo);
    request(&cx[0], "The dog", 64, 5);
    with_text(&cx[0], RS_WIRE_CX_JSON_OBJECT, NULL);
    request(&cx[1], "A girl", 64, 0);
    with_text(&cx[1], RS_WIRE_CX_REGEX, "[a-z ]{10,60}\\.");
    struct rs_wire_bias b = {13, -100.0f};
    request(&cx[2], "One day", 64, 9);
    cx[2].has |= RS_WIRE_GEN_LOGIT_BIAS;
    cx[2].cx.n_bias = 1;
    cx[2].cx.bias = &b;
    struct stream_rec recs[4];
    memset(recs, 0, sizeof(recs));
    char id[RS_CLIENT_ID_CAP];
    for (int i = 0; !fails && i < 4; i++)
        fails |= rs_client_submit(c, i == 1 ? &plain : &cx[i == 0 ? 0 : i - 1], 0, on_event,
                                  &recs[i], id) != RS_OK;
    fails = fails || wait_all(c, recs, 4);
    if (!fails) {
        struct stream_rec *r = &recs[1];
        RS_CHECK_MSG(r->res.status == RS_CLIENT_OK && r->res.n_tokens == solo.n_tokens,
                     "status %s, %u tokens, solo %u", rs_client_status_name(r->res.status),
                     r->res.n_tokens, solo.n_tokens);
        RS_CHECK(memcmp(r->res.tokens, solo.tokens, solo.n_tokens * 4) == 0);
        for (int i = 0; i < 4; i++)
            RS_CHECK_MSG(recs[i].res.status == RS_CLIENT_OK &&
                             recs[i].res.finish_reason != RS_WIRE_FINISH_ERROR,
                         "request %d: %s (%s)", i, rs_client_status_name(recs[i].res.status),
                         recs[i].res.message);
        RS_CHECK_MSG(python_check("re.fullmatch(r\"[a-z ]{10,60}\\.\", t)", recs[2].res.text,
                                  recs[2].res.text_len) == 0, "regex output '%s'",
                     recs[2].res.text);
    }
    struct rs_pipe *v = rs_harness_view(&h);
    if (v != NULL)
        fprintf(stderr, "mask rows %llu, sampler waited %llu times\n",
                (unsigned long long)v->metrics->stage[RS_PIPE_STAGE_LAUNCHERD]
                    .counter[RS_M_LAU_MASK_ROWS],
                (unsigned long long)v->metrics->stage[RS_PIPE_STAGE_LAUNCHERD]
                    .counter[RS_M_LAU_MASK_WAITS]);
    for (int i = 0; i < 4; i++)
        rs_client_result_fini(&recs[i].res);
    rs_client_result_fini(&solo);
    rs_client_destroy(&c);
    rs_harness_stop(&h, fails);
    return fails;
}

/* One malformed constraint: refused at intake with code and a message containing `want`. */
struct bad_case {
    enum rs_wire_cx_kind kind;
    const char *text;
    int n_choices;
    uint32_t bias_token, allowed_id;
    float bias;
    enum rs_wire_code code;
    const char *want;
};

static int test_malformed_constraints_each_get_an_error_naming_the_position(void)
{
    static const struct bad_case bad[] = {
        {RS_WIRE_CX_GBNF, "root ::= \"a\" | (\n", 0, 0, 0, 0, RS_WIRE_INVALID_PARAM, "line 1"},
        {RS_WIRE_CX_GBNF, "root ::= missing\n", 0, 0, 0, 0, RS_WIRE_INVALID_PARAM, "missing"},
        {RS_WIRE_CX_REGEX, "ab(c", 0, 0, 0, 0, RS_WIRE_INVALID_PARAM, "offset"},
        {RS_WIRE_CX_JSON_SCHEMA, "{\"type\": \"object\",", 0, 0, 0, 0, RS_WIRE_INVALID_PARAM,
         "line"},
        {RS_WIRE_CX_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":\"x\"}", 0, 0, 0, 0,
         RS_WIRE_INVALID_PARAM, "minimum"},
        {RS_WIRE_CX_CHOICE, NULL, 0, 0, 0, 0, RS_WIRE_INVALID_PARAM, "choices"},
        {RS_WIRE_CX_NONE, NULL, 0, 999999, 0, 1.0f, RS_WIRE_INVALID_PARAM, "logit_bias"},
        {RS_WIRE_CX_NONE, NULL, 0, 5, 0, 150.0f, RS_WIRE_INVALID_PARAM, "logit_bias"},
        {RS_WIRE_CX_NONE, NULL, 0, 0, 999999, 0, RS_WIRE_INVALID_PARAM, "allowed_token_ids"},
    };
    struct rs_harness h = {0};
    char model[512];
    int rc = start(&h, STORIES, model, sizeof(model));
    if (rc != 0)
        return rc;
    rs_client *c = client_of(&h);
    int fails = c == NULL;
    for (size_t i = 0; !fails && i < sizeof(bad) / sizeof(bad[0]); i++) {
        const struct bad_case *b = &bad[i];
        struct rs_wire_generate g;
        struct rs_client_result res;
        struct rs_wire_bias bias = {b->bias_token, b->bias};
        uint32_t allowed = b->allowed_id;
        request(&g, "Once", 8, 0);
        if (b->kind != RS_WIRE_CX_NONE)
            with_text(&g, b->kind, b->text);
        if (b->kind == RS_WIRE_CX_CHOICE)
            g.cx.n_choices = 0;
        if (b->bias_token != 0) {
            g.has |= RS_WIRE_GEN_LOGIT_BIAS;
            g.cx.n_bias = 1;
            g.cx.bias = &bias;
        }
        if (b->allowed_id != 0) {
            g.has |= RS_WIRE_GEN_ALLOWED_TOKEN_IDS;
            g.cx.allowed = (struct rs_wire_ids){.n = 1, .vals = &allowed};
        }
        if (run(c, &g, &res) != 0)
            return 1;
        fprintf(stderr, "case %zu: %s: %s\n", i, rs_wire_code_name(res.error), res.message);
        RS_CHECK_MSG(res.status != RS_CLIENT_OK && res.error == b->code &&
                         strstr(res.message, b->want) != NULL,
                     "case %zu: status %s, %s: '%s' (want %s naming '%s')", i,
                     rs_client_status_name(res.status), rs_wire_code_name(res.error),
                     res.message, rs_wire_code_name(b->code), b->want);
        rs_client_result_fini(&res);
    }
    /* ...and the server still serves a well-formed constrained request afterwards. */
    struct rs_wire_generate g;
    request(&g, "Once", 40, 0);
    with_text(&g, RS_WIRE_CX_REGEX, "(yes|no)");
    fails |= run_checked(c, &g, "t in (\"yes\", \"no\")", "after refusals");
    rs_client_destroy(&c);
    rs_harness_stop(&h, fails);
    return fails;
}

/* Writes text into a new file under the test's scratch directory; its path in buf. */
static const char *scratch_file(const char *name, const char *text, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", rs_test_tmpdir(), name);
    FILE *f = fopen(buf, "w");
    if (f == NULL)
        return NULL;
    fputs(text, f);
    fclose(f);
    return buf;
}

static int test_cli_flags_carry_each_constraint(void)
{
    struct rs_harness h = {0};
    char model[512], schema[600], bad[600], out[8192];
    int rc = start(&h, STORIES, model, sizeof(model));
    if (rc != 0)
        return rc;
    int fails = scratch_file("s.json", "{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":"
                             "[1,2,3]}},\"required\":[\"k\"],\"additionalProperties\":false}",
                             schema, sizeof(schema)) == NULL ||
                scratch_file("bad.gbnf", "root ::= (\n", bad, sizeof(bad)) == NULL;
    const char *choice[] = {"--rundir", h.rundir, "--temperature", "0", "--choice", "yes",
                            "--choice", "no", "Once", NULL};
    const char *js[] = {"--rundir", h.rundir, "--temperature", "0", "--max-tokens", "40",
                        "--json-schema", schema, "Once", NULL};
    const char *re[] = {"--rundir", h.rundir, "--seed", "3", "--regex", "[0-9]{4}",
                        "--logit-bias", "300:-100", "Once", NULL};
    const char *ids[] = {"--rundir", h.rundir, "--max-tokens", "5", "--json",
                         "--allowed-token-ids", "300,301", "Once", NULL};
    const char *grammar[] = {"--rundir", h.rundir, "--grammar", bad, "Once", NULL};
    const char *two[] = {"--rundir", h.rundir, "--json-object", "--regex", "a", "Once", NULL};
    if (!fails) {
        int code = rs_test_run("ringserve-cli", choice, out, sizeof(out));
        RS_CHECK_MSG(code == 0 && (strcmp(out, "yes") == 0 || strcmp(out, "no") == 0),
                     "--choice: exit %d '%s'", code, out);
        code = rs_test_run("ringserve-cli", js, out, sizeof(out));
        RS_CHECK_MSG(code == 0 && python_check("json.loads(t)[\"k\"] in (1, 2, 3)", out,
                                               strlen(out)) == 0,
                     "--json-schema: exit %d '%s'", code, out);
        code = rs_test_run("ringserve-cli", re, out, sizeof(out));
        RS_CHECK_MSG(code == 0 && strlen(out) == 4 && strspn(out, "0123456789") == 4,
                     "--regex: exit %d '%s'", code, out);
        code = rs_test_run("ringserve-cli", ids, out, sizeof(out));
        RS_CHECK_MSG(code == 0 && python_check("set(json.loads(t)[\"tokens\"]) <= {300, 301}",
                                               out, strlen(out)) == 0,
                     "--allowed-token-ids: exit %d '%s'", code, out);
        code = rs_test_run("ringserve-cli", grammar, out, sizeof(out));
        RS_CHECK_MSG(code != 0 && strstr(out, "line 1, column") != NULL,
                     "--grammar (malformed): exit %d '%s'", code, out);
        code = rs_test_run("ringserve-cli", two, out, sizeof(out));
        RS_CHECK_MSG(code == 2 && strstr(out, "one kind per request") != NULL,
                     "two kinds: exit %d '%s'", code, out);
    }
    rs_harness_stop(&h, fails);
    return fails;
}

static int test_min_tokens_holds_back_end_of_generation(void)
{
    struct rs_harness h = {0};
    char model[512];
    int rc = start(&h, STORIES, model, sizeof(model));
    if (rc != 0)
        return rc;
    rs_client *c = client_of(&h);
    struct rs_wire_generate g;
    struct rs_client_result base, held;
    struct rs_wire_bias eos = {2, 100.0f}; /* stories260K's </s>, pushed to the top */
    request(&g, "Once upon a time", 20, 0);
    g.has |= RS_WIRE_GEN_LOGIT_BIAS;
    g.cx.n_bias = 1;
    g.cx.bias = &eos;
    int fails = c == NULL || run(c, &g, &base);
    RS_CHECK_MSG(fails || (base.finish_reason == RS_WIRE_FINISH_STOP && base.n_tokens <= 1),
                 "without min_tokens: finish %d after %u tokens", base.finish_reason,
                 base.n_tokens);
    g.has |= RS_WIRE_GEN_MIN_TOKENS;
    g.cx.min_tokens = 5;
    fails = fails || run(c, &g, &held);
    RS_CHECK_MSG(fails || (held.finish_reason == RS_WIRE_FINISH_STOP &&
                           held.n_tokens == base.n_tokens + 5),
                 "min_tokens 5: finish %d after %u tokens (%u without)", held.finish_reason,
                 held.n_tokens, base.n_tokens);
    for (uint32_t i = 0; !fails && i < 5; i++)
        RS_CHECK_MSG(held.tokens[i] != 2, "end-of-generation at output %u", i);
    rs_client_result_fini(&base);
    rs_client_result_fini(&held);
    rs_client_destroy(&c);
    rs_harness_stop(&h, fails);
    return fails;
}

/* A grammar and an allowed-ids list with nothing in common: a dead end at the first step,
 * finished with error code constraint_dead_end (not a hang, not an unmasked sample). */
static int test_dead_end_finishes_with_its_own_error_code(void)
{
    struct rs_harness h = {0};
    char model[512];
    int rc = start(&h, STORIES, model, sizeof(model));
    if (rc != 0)
        return rc;
    rs_client *c = client_of(&h);
    struct rs_wire_generate g;
    struct rs_client_result res;
    uint32_t byte_z = 3 + 'z'; /* stories260K's byte token <0x7A> */
    request(&g, "Once", 8, 0);
    with_text(&g, RS_WIRE_CX_REGEX, "yes");
    g.has |= RS_WIRE_GEN_ALLOWED_TOKEN_IDS;
    g.cx.allowed = (struct rs_wire_ids){.n = 1, .vals = &byte_z};
    int fails = c == NULL || run(c, &g, &res);
    RS_CHECK_MSG(fails || (res.finish_reason == RS_WIRE_FINISH_ERROR &&
                           res.error == RS_WIRE_CONSTRAINT_DEAD && res.n_tokens == 0),
                 "finish %d, code %s, %u tokens", res.finish_reason,
                 rs_wire_code_name(res.error), res.n_tokens);
    if (!fails)
        rs_client_result_fini(&res);
    rs_client_destroy(&c);
    rs_harness_stop(&h, fails);
    return fails;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_json_schema_outputs_validate_greedy_and_sampled),
    RS_TEST(test_gbnf_and_regex_outputs_are_accepted_by_a_separate_recogniser),
    RS_TEST(test_choice_returns_one_of_the_choices),
    RS_TEST(test_logit_bias_minus_100_bans_plus_100_forces_and_allowed_ids_bound),
    RS_TEST(test_unconstrained_output_unchanged_when_batched_with_constrained),
    RS_TEST(test_malformed_constraints_each_get_an_error_naming_the_position),
    RS_TEST(test_cli_flags_carry_each_constraint),
    RS_TEST(test_min_tokens_holds_back_end_of_generation),
    RS_TEST(test_dead_end_finishes_with_its_own_error_code),
};

RS_TEST_MAIN(cases)

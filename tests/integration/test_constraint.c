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
#include <unistd.h>

#include "client/client.h"
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
    struct rs_client_opts o;
    rs_client *c = NULL;
    rs_client_opts_default(&o);
    o.rundir = h->rundir;
    o.request_timeout_ms = 120000;
    return rs_client_create(&o, &c) == RS_OK ? c : NULL;
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

static const struct rs_test_case cases[] = {
    RS_TEST(test_json_schema_outputs_validate_greedy_and_sampled),
};

RS_TEST_MAIN(cases)

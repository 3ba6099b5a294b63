/* SPDX-License-Identifier: MIT */
/*
 * ringserve-stat --json against a real segment: the output parses as JSON
 * (jansson), text that is UTF-8 comes back byte for byte (a model path with
 * accents, CJK, an emoji, a quote and a backslash), an ill-formed byte comes
 * back as U+FFFD rather than as an escape of a raw byte, counters and
 * request fields carry the values in shared memory, and 64-bit values past
 * jansson's integers stay exact.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/json.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "tests/rs_test.h"

/* Runs ringserve-stat with args; returns its stdout parsed, or NULL (reason on stderr). */
static json_t *stat_json(const char *instance)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s/ringserve-stat --json --instance %s", rs_test_bindir(),
             instance);
    FILE *f = popen(cmd, "r");
    if (f == NULL)
        return NULL;
    json_error_t e;
    json_t *v = json_loadf(f, 0, &e);
    int st = pclose(f);
    if (v == NULL || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "ringserve-stat: exit 0x%x, JSON error at %d:%d: %s\n", st, e.line,
                e.column, e.text);
        json_decref(v);
        return NULL;
    }
    return v;
}

static int test_json_keeps_utf8_and_values(void)
{
    /* é, 模型, 🦙, a quote, a backslash; then the same with one ill-formed byte */
    static const char good[] = "/srv/mod\xc3\xa8les/\xe6\xa8\xa1\xe5\x9e\x8b-\xf0\x9f\xa6\x99"
                               "-\"q\"\\.gguf";
    struct rs_pipe_config c;
    struct rs_gguf_facts m = {.bytes = 42, .n_vocab = 300, .n_ctx_train = 64};
    char err[256];
    rs_pipe_config_default(&c);
    rs_test_unique_name("stat", c.instance, sizeof(c.instance));
    c.max_requests = 8, c.n_kv_blocks = 16, c.max_seqs = 2, c.max_batched_tokens = 32;
    snprintf(m.path, sizeof(m.path), "%s", good);
    RS_CHECK_MSG(rs_pipe_config_resolve(&c, &m, err, sizeof(err)) == RS_OK, "%s", err);
    struct rs_pipe *p;
    RS_CHECK_MSG(rs_pipe_open(&c, RS_PIPE_STAGE_SCHEDULERD, &p, err, sizeof(err)) == RS_OK, "%s",
                 err);
    atomic_store(&p->metrics->stage[RS_PIPE_STAGE_SCHEDULERD].counter[RS_M_SCH_STEPS],
                 (uint64_t)1 << 62);
    json_t *v = stat_json(c.instance);
    RS_CHECK(v != NULL);
    const char *model = json_string_value(json_object_get(json_object_get(v, "config"), "model"));
    RS_CHECK_MSG(model != NULL && strcmp(model, good) == 0, "model came back as '%s'",
                 model ? model : "(none)");
    json_t *sch = json_array_get(json_object_get(v, "stages"), RS_PIPE_STAGE_SCHEDULERD);
    json_t *steps = json_object_get(json_object_get(sch, "counters"), "steps");
    RS_CHECK(json_integer_value(steps) == (json_int_t)1 << 62);
    RS_CHECK(json_integer_value(json_object_get(json_object_get(v, "config"), "n_vocab")) == 300);
    RS_CHECK(json_integer_value(json_object_get(json_object_get(v, "requests"), "capacity")) == 8);
    json_decref(v);
    rs_pipe_close(&p);
    rs_pipe_unlink(c.instance);

    /* the same path with a lone continuation byte: written as U+FFFD, the rest kept */
    char bad[sizeof(good) + 2];
    snprintf(bad, sizeof(bad), "/srv/mod\xc3\xa8les/\x80x.gguf");
    rs_pipe_config_default(&c);
    rs_test_unique_name("stat", c.instance, sizeof(c.instance));
    c.max_requests = 8, c.n_kv_blocks = 16, c.max_seqs = 2, c.max_batched_tokens = 32;
    snprintf(m.path, sizeof(m.path), "%s", bad);
    RS_CHECK(rs_pipe_config_resolve(&c, &m, err, sizeof(err)) == RS_OK);
    RS_CHECK(rs_pipe_open(&c, RS_PIPE_STAGE_SCHEDULERD, &p, err, sizeof(err)) == RS_OK);
    v = stat_json(c.instance);
    RS_CHECK(v != NULL);
    model = json_string_value(json_object_get(json_object_get(v, "config"), "model"));
    RS_CHECK_MSG(model != NULL && strcmp(model, "/srv/mod\xc3\xa8les/\xef\xbf\xbdx.gguf") == 0,
                 "model came back as '%s'", model ? model : "(none)");
    json_decref(v);
    rs_pipe_close(&p);
    rs_pipe_unlink(c.instance);
    return 0;
}

/* The writer's own functions: exact 64-bit values, floats that read back, repaired text. */
static int test_writer_keeps_values_exact(void)
{
    json_t *a = json_pack("[ooooo]", rs_json_u64(UINT64_MAX), rs_json_u64(7),
                          rs_json_float(-1.25f), rs_json_float(-INFINITY),
                          rs_json_text("a\xff" "b", 3));
    RS_CHECK(a != NULL);
    char *s = json_dumps(a, JSON_COMPACT | JSON_REAL_PRECISION(15));
    RS_CHECK_MSG(s != NULL && strcmp(s, "[\"18446744073709551615\",7,-1.25,null,"
                                        "\"a\xef\xbf\xbd" "b\"]") == 0,
                 "%s", s ? s : "(null)");
    free(s);
    json_decref(a);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_json_keeps_utf8_and_values),
    RS_TEST(test_writer_keeps_values_exact),
};

RS_TEST_MAIN(cases)

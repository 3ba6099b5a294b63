/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target over the chat-template renderer's compiler and evaluator:
 * the input is a template. It is compiled; if it compiles it is rendered for
 * a fixed conversation (system, user, assistant with a tool call, tool) with
 * tools, under small bounds so every input finishes quickly. Checks: no
 * crash, leak or sanitizer report; every failure carries a kind and a
 * message, and a position inside the template when it is a compile error;
 * rendered text is valid UTF-8 (templates and JSON strings are, and no
 * operation may split a character); a second render of the same compiled
 * template gives the same bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jinja.h"
#include "common/utf8.h"

static json_t *conv;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_jinja_template: %s\n", what);
        __builtin_trap();
    }
}

static void init(void)
{
    if (conv)
        return;
    json_error_t je;
    conv = json_loads(
        "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
        " {\"role\": \"user\", \"content\": \" Hi \\u00e9\\u4e2d\\ud83d\\ude00 {{x}} \"},"
        " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", \"type\":"
        " \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1, \"b\": [2.5, true]}}}]},"
        " {\"role\": \"tool\", \"content\": \"{\\\"r\\\": 1}\", \"name\": \"f\"}],"
        " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
        " \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}}}]}",
        0, &je);
    check(conv != NULL, "built-in conversation does not parse");
}

static unsigned lines_of(const uint8_t *d, size_t n)
{
    unsigned k = 1;
    for (size_t i = 0; i < n; i++)
        k += d[i] == '\n' || (d[i] == '\r' && (i + 1 == n || d[i + 1] != '\n'));
    return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init();
    rs_jinja *t;
    struct rs_jinja_error err = {0};
    if (rs_jinja_compile((const char *)data, size, &t, &err) != RS_OK) {
        check(err.kind != RS_JINJA_ERR_NONE && err.msg && err.msg_len == strlen(err.msg),
              "compile error without kind or message");
        check(err.line <= lines_of(data, size), "compile error line past the template");
        rs_jinja_error_fini(&err);
        return 0;
    }
    struct tm date = {.tm_year = 126, .tm_mon = 0, .tm_mday = 15, .tm_wday = 4, .tm_yday = 14};
    struct rs_jinja_limits lim = {.max_steps = 200000, .max_output = 1u << 20,
                                  .max_memory = 64u << 20, .max_depth = 40};
    json_t *vars = json_pack("{s:b,s:s}", "enable_thinking", 0, "reasoning_effort", "low");
    struct rs_jinja_ctx ctx = {
        .messages = json_object_get(conv, "messages"),
        .tools = json_object_get(conv, "tools"),
        .vars = vars,
        .add_generation_prompt = size & 1,
        .bos_token = "<s>",
        .eos_token = "</s>",
        .now = &date,
        .limits = &lim,
    };
    char *out = NULL, *again = NULL;
    size_t n, n2;
    rs_err rc = rs_jinja_render(t, &ctx, &out, &n, &err);
    if (rc == RS_OK) {
        check(out[n] == 0, "output not NUL-terminated");
        check(rs_utf8_valid(out, n), "output is not valid UTF-8");
        check(rs_jinja_render(t, &ctx, &again, &n2, NULL) == RS_OK && n2 == n &&
                  memcmp(out, again, n) == 0,
              "second render differs");
    } else {
        check(out == NULL && err.kind != RS_JINJA_ERR_NONE && err.msg != NULL,
              "render error without kind or message");
        check(err.kind != RS_JINJA_ERR_SYNTAX || err.line > 0, "syntax error at render time");
    }
    free(out);
    free(again);
    rs_jinja_error_fini(&err);
    json_decref(vars);
    rs_jinja_destroy(&t);
    return 0;
}

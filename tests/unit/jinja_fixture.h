/* SPDX-License-Identifier: MIT */
/*
 * Functions for the chat-template renderer's unit tests: compile and render a
 * template given inline, with variables from a JSON object (messages, tools,
 * bos_token, eos_token and add_generation_prompt taken from it, the rest
 * passed as template variables), the date pinned to 2026-01-15, and checks
 * that compare the output byte for byte or the error's kind (and position).
 * Expected values are Python Jinja2 3.1's, written by hand in each test.
 * The code is jinja_fixture.c (rs_testlib).
 */
#ifndef RS_TEST_JINJA_FIXTURE_H
#define RS_TEST_JINJA_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jinja.h"
#include "tests/rs_test.h"

/* One compile and render: the result code, the output (owned) or the error (owned). */
struct jt_result {
    rs_err rc;
    char *out;
    size_t len;
    struct rs_jinja_error err;
    int compiled;
};

/* Frees r's output and error and clears it. */
void jt_free(struct jt_result *r);

/* Renders tmpl with the variables of JSON object `vars` (may be NULL) under lim (NULL: the
 * defaults); *r owned by the caller (jt_free). */
void jt_run_lim(const char *tmpl, const char *vars, const struct rs_jinja_limits *lim,
                struct jt_result *r);

/* jt_run_lim with the default limits. */
void jt_run(const char *tmpl, const char *vars, struct jt_result *r);

/* 1 when the output is want[0..want_len) byte for byte; else prints both at file:line, 0. */
int jt_check_out(const char *file, int line, const char *tmpl, const char *vars, const char *want,
                 size_t want_len);

/* 1 when rendering fails with kind (at eline:ecol and with msg_part, when given); else
 * prints what came at file:line, 0. */
int jt_check_err(const char *file, int line, const char *tmpl, const char *vars,
                 enum rs_jinja_errkind kind, unsigned eline, unsigned ecol, const char *msg_part);

/* Expected output given as a C string literal (may contain NUL via sizeof). */
#define OUT(tmpl, vars, want)                                                                      \
    do {                                                                                           \
        if (!jt_check_out(__FILE__, __LINE__, tmpl, vars, want, sizeof(want) - 1))                 \
            return 1;                                                                              \
    } while (0)

#define ERR(tmpl, vars, kind)                                                                      \
    do {                                                                                           \
        if (!jt_check_err(__FILE__, __LINE__, tmpl, vars, RS_JINJA_ERR_##kind, 0, 0, NULL))        \
            return 1;                                                                              \
    } while (0)

#define ERR_AT(tmpl, vars, kind, line, col, msg)                                                   \
    do {                                                                                           \
        if (!jt_check_err(__FILE__, __LINE__, tmpl, vars, RS_JINJA_ERR_##kind, line, col, msg))    \
            return 1;                                                                              \
    } while (0)

#endif

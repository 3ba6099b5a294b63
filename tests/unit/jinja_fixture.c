/* SPDX-License-Identifier: MIT */
/*
 * The chat-template renderer tests' fixture (jinja_fixture.h): compile and
 * render with variables from JSON, the date pinned, and the checks behind
 * OUT, ERR and ERR_AT. Part of rs_testlib.
 */
#include "tests/unit/jinja_fixture.h"

void jt_free(struct jt_result *r)
{
    free(r->out);
    rs_jinja_error_fini(&r->err);
    memset(r, 0, sizeof(*r));
}

void jt_run_lim(const char *tmpl, const char *vars, const struct rs_jinja_limits *lim,
                struct jt_result *r)
{
    memset(r, 0, sizeof(*r));
    rs_jinja *t;
    r->rc = rs_jinja_compile(tmpl, strlen(tmpl), &t, &r->err);
    if (r->rc != RS_OK)
        return;
    r->compiled = 1;
    json_error_t je;
    json_t *v = vars ? json_loads(vars, JSON_ALLOW_NUL, &je) : json_object();
    if (!v) {
        fprintf(stderr, "bad test JSON: %s\n", je.text);
        abort();
    }
    json_t *msgs = json_incref(json_object_get(v, "messages"));
    json_t *tools = json_incref(json_object_get(v, "tools"));
    json_t *bos = json_incref(json_object_get(v, "bos_token"));
    json_t *eos = json_incref(json_object_get(v, "eos_token"));
    json_t *gen = json_object_get(v, "add_generation_prompt");
    int g = gen && json_is_true(gen);
    json_object_del(v, "messages");
    json_object_del(v, "tools");
    json_object_del(v, "bos_token");
    json_object_del(v, "eos_token");
    json_object_del(v, "add_generation_prompt");
    json_t *empty = json_array();
    struct tm date;
    rs_jinja_parse_time("2026-01-15", &date);
    struct rs_jinja_ctx ctx = {
        .messages = msgs ? msgs : empty,
        .tools = tools,
        .vars = v,
        .add_generation_prompt = g,
        .bos_token = bos ? json_string_value(bos) : NULL,
        .eos_token = eos ? json_string_value(eos) : NULL,
        .now = &date,
        .limits = lim,
    };
    r->rc = rs_jinja_render(t, &ctx, &r->out, &r->len, &r->err);
    json_decref(msgs);
    json_decref(tools);
    json_decref(bos);
    json_decref(eos);
    json_decref(empty);
    json_decref(v);
    rs_jinja_destroy(&t);
}

void jt_run(const char *tmpl, const char *vars, struct jt_result *r)
{
    jt_run_lim(tmpl, vars, NULL, r);
}

int jt_check_out(const char *file, int line, const char *tmpl, const char *vars, const char *want,
                 size_t want_len)
{
    struct jt_result r;
    jt_run(tmpl, vars, &r);
    int ok = r.rc == RS_OK && r.len == want_len && memcmp(r.out, want, want_len) == 0;
    if (!ok) {
        fprintf(stderr, "%s:%d: template %s\n  want [%.*s]\n", file, line, tmpl, (int)want_len,
                want);
        if (r.rc == RS_OK)
            fprintf(stderr, "  got  [%.*s]\n", (int)r.len, r.out);
        else
            fprintf(stderr, "  got error %s at %u:%u: %s\n", rs_jinja_errkind_name(r.err.kind),
                    r.err.line, r.err.col, r.err.msg);
    }
    jt_free(&r);
    return ok;
}

int jt_check_err(const char *file, int line, const char *tmpl, const char *vars,
                 enum rs_jinja_errkind kind, unsigned eline, unsigned ecol, const char *msg_part)
{
    struct jt_result r;
    jt_run(tmpl, vars, &r);
    int ok = r.rc != RS_OK && r.err.kind == kind && (!eline || r.err.line == eline) &&
             (!ecol || r.err.col == ecol) &&
             (!msg_part || (r.err.msg && strstr(r.err.msg, msg_part)));
    if (!ok) {
        fprintf(stderr, "%s:%d: template %s\n  want error %s", file, line, tmpl,
                rs_jinja_errkind_name(kind));
        if (eline)
            fprintf(stderr, " at %u:%u", eline, ecol);
        if (msg_part)
            fprintf(stderr, " containing [%s]", msg_part);
        if (r.rc == RS_OK)
            fprintf(stderr, "\n  got output [%.*s]\n", (int)r.len, r.out);
        else
            fprintf(stderr, "\n  got error %s at %u:%u: %s\n", rs_jinja_errkind_name(r.err.kind),
                    r.err.line, r.err.col, r.err.msg);
    }
    jt_free(&r);
    return ok;
}

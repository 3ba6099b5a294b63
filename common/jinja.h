/* SPDX-License-Identifier: MIT */
/*
 * Chat-template renderer: the Jinja2 language as Hugging Face transformers
 * runs it for apply_chat_template (ImmutableSandboxedEnvironment with
 * trim_blocks, lstrip_blocks and loop controls; tojson as json.dumps;
 * raise_exception and strftime_now), byte-exact on real model templates.
 * Compile once per template (immutable: share it between threads), render per
 * request with a context of JSON values. Leaves out template inheritance and
 * loading ({% extends %}, {% include %}, {% import %}, blocks), autoescaping
 * and the async mode: compiling a template that uses them is an error naming
 * the construct and its line:column. common/README.md lists what is supported.
 */
#ifndef RS_JINJA_H
#define RS_JINJA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common/err.h"

typedef struct rs_jinja rs_jinja;

/* What went wrong; the Jinja2/Python exception a kind corresponds to in brackets. */
enum rs_jinja_errkind {
    RS_JINJA_ERR_NONE = 0,
    RS_JINJA_ERR_SYNTAX,      /* the template does not compile [TemplateSyntaxError] */
    RS_JINJA_ERR_UNSUPPORTED, /* valid Jinja that this renderer does not implement */
    RS_JINJA_ERR_RAISE,       /* the template called raise_exception(msg): msg is exact */
    RS_JINJA_ERR_UNDEFINED,   /* an undefined value was used [UndefinedError] */
    RS_JINJA_ERR_TYPE,        /* [TypeError] */
    RS_JINJA_ERR_VALUE,       /* [ValueError, ZeroDivisionError, OverflowError, IndexError] */
    RS_JINJA_ERR_SECURITY,    /* the immutable sandbox refused (list.append, ...) [SecurityError] */
    RS_JINJA_ERR_RUNTIME,     /* [TemplateRuntimeError]: unknown filter, set on a non-namespace */
    RS_JINJA_ERR_LIMIT,       /* a bound of struct rs_jinja_limits was reached */
    RS_JINJA_ERR_INPUT,       /* the context is malformed (messages not an array, ...) */
};

/*
 * An error: its kind, the template position (1-based line and column in
 * characters; 0 when the error is not at a template position, e.g. bad
 * input) and a message (owned, NUL-terminated, msg_len bytes; for
 * RS_JINJA_ERR_RAISE exactly the string the template passed). Release with
 * rs_jinja_error_fini; a zeroed struct is empty.
 */
struct rs_jinja_error {
    enum rs_jinja_errkind kind;
    unsigned line, col;
    char *msg;
    size_t msg_len;
};

void rs_jinja_error_fini(struct rs_jinja_error *e);

/* Static name of a kind ("syntax", "raise_exception", "undefined", ...). */
const char *rs_jinja_errkind_name(enum rs_jinja_errkind kind);

/*
 * Bounds on one render; a zero field takes the default in brackets. Reaching
 * one stops the render with RS_JINJA_ERR_LIMIT naming the bound.
 *   max_steps   expression and statement evaluations, loop iterations and
 *               characters produced by string operations [20,000,000]
 *   max_output  bytes of rendered text [32 MiB]
 *   max_memory  bytes of values and buffers the render allocates [256 MiB]
 *   max_depth   nested macro calls, caller() and recursive loops [200]
 */
struct rs_jinja_limits {
    uint64_t max_steps;
    size_t max_output;
    size_t max_memory;
    unsigned max_depth;
};

/* What one render used (filled on success and on failure), to compare with the limits. */
struct rs_jinja_stats {
    uint64_t steps;  /* counted as for max_steps */
    size_t memory;   /* bytes allocated, as for max_memory */
    size_t output;   /* bytes of rendered text (0 on failure) */
};

/*
 * One request's variables, all borrowed for the duration of the call.
 *   messages              JSON array of message objects (required), passed as
 *                         parsed: object key order kept, null is None, integers
 *                         and reals stay distinct
 *   tools, documents      JSON values or NULL (NULL and JSON null are None,
 *                         as transformers passes them: always defined)
 *   vars                  NULL or a JSON object of further template variables
 *                         (enable_thinking, reasoning_effort, ...); its keys may
 *                         not be one of the six names above or below
 *   add_generation_prompt boolean
 *   bos_token, eos_token  NUL-terminated text, NULL for ""
 *   now                   the time strftime_now formats (naive, as Python's
 *                         datetime), or NULL for the local clock at that call
 *   limits                NULL for the defaults
 *   stats                 NULL, or filled with what the render used
 */
struct rs_jinja_ctx {
    const json_t *messages;
    const json_t *tools;
    const json_t *documents;
    const json_t *vars;
    int add_generation_prompt;
    const char *bos_token;
    const char *eos_token;
    const struct tm *now;
    const struct rs_jinja_limits *limits;
    struct rs_jinja_stats *stats;
};

/*
 * Compiles the template text src[0..len) (UTF-8). On success *out owns the
 * compiled template (rs_jinja_destroy it); it is immutable, so any number of
 * threads may render it at once. On failure returns RS_EINVAL (syntax or a
 * construct this renderer leaves out: err->kind says which, with line:col),
 * RS_ERANGE (template larger than 16 MiB or nested deeper than 200) or
 * RS_ENOMEM, and fills err (may be NULL). Any thread.
 */
rs_err rs_jinja_compile(const char *src, size_t len, rs_jinja **out, struct rs_jinja_error *err);

/* Frees a compiled template; accepts NULL and clears *t. No render may be running on it. */
void rs_jinja_destroy(rs_jinja **t);

/*
 * Renders t with ctx. On success *out owns the text (malloc'd, NUL-terminated
 * after out_len bytes; free it). On failure returns RS_EINVAL (template error:
 * raise_exception, undefined, type, sandbox, ... with line:col of the failing
 * expression), RS_ERANGE (a limit), RS_ENOMEM, and fills err (may be NULL);
 * *out is NULL. Any thread; t is only read.
 */
rs_err rs_jinja_render(const rs_jinja *t, const struct rs_jinja_ctx *ctx, char **out,
                       size_t *out_len, struct rs_jinja_error *err);

/*
 * Parses "YYYY-MM-DD" or "YYYY-MM-DD HH:MM:SS" into *tm (local, naive; the
 * weekday and day of year filled in). RS_EINVAL if malformed or not a real date.
 */
rs_err rs_jinja_parse_time(const char *text, struct tm *tm);

#endif

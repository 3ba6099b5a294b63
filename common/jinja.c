/* SPDX-License-Identifier: MIT */
/*
 * Entry points of the chat-template renderer (common/jinja.h): compile (lex,
 * parse, resolve filters), render (bind the context's JSON to the template's
 * variables as transformers' apply_chat_template does, run, return the text),
 * and errors. Both entries own an arena and a longjmp target: any error deep
 * in the lexer, parser or evaluator unwinds here, where the arena is freed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jinja_syntax.h"
#include "common/utf8.h"

#define MAX_TEMPLATE (16u << 20)
#define COMPILE_MEMORY (512u << 20)
#define DEF_STEPS 20000000ull
#define DEF_OUTPUT (32u << 20)
#define DEF_MEMORY (256u << 20)
#define DEF_DEPTH 200

static const char *const kind_names[] = {
    "none", "syntax", "unsupported", "raise_exception", "undefined", "type", "value",
    "security", "runtime", "limit", "input",
};

const char *rs_jinja_errkind_name(enum rs_jinja_errkind kind)
{
    return (unsigned)kind < sizeof(kind_names) / sizeof(kind_names[0]) ? kind_names[kind] : "?";
}

void rs_jinja_error_fini(struct rs_jinja_error *e)
{
    if (!e)
        return;
    free(e->msg);
    memset(e, 0, sizeof(*e));
}

static void set_error(struct rs_jinja_error *err, enum rs_jinja_errkind kind, unsigned line,
                      unsigned col, const char *msg, size_t len)
{
    if (!err)
        return;
    free(err->msg);
    err->kind = kind;
    err->line = line;
    err->col = col;
    err->msg = malloc(len + 1);
    err->msg_len = err->msg ? len : 0;
    if (err->msg) {
        memcpy(err->msg, msg, len);
        err->msg[len] = 0;
    }
}

/* ---- compile ---------------------------------------------------------------------- */

struct compile_ctx {
    struct jcomp c;
    int oom;
};

static void compile_arena_fail(void *ctx, int oom)
{
    struct compile_ctx *cc = ctx;
    cc->oom = oom;
    jcomp_fail(&cc->c, 0, 0, RS_JINJA_ERR_LIMIT, "%s",
               oom ? "out of memory" : "template needs too much memory to compile");
}

rs_err rs_jinja_compile(const char *src, size_t len, rs_jinja **out, struct rs_jinja_error *err)
{
    if (!out || (!src && len)) {
        set_error(err, RS_JINJA_ERR_INPUT, 0, 0, "no template given", 17);
        return RS_EINVAL;
    }
    *out = NULL;
    if (len > MAX_TEMPLATE) {
        set_error(err, RS_JINJA_ERR_LIMIT, 0, 0, "template larger than 16 MiB", 27);
        return RS_ERANGE;
    }
    rs_jinja *t = calloc(1, sizeof(*t));
    struct compile_ctx *cc = calloc(1, sizeof(*cc));
    if (!t || !cc) {
        free(t);
        free(cc);
        set_error(err, RS_JINJA_ERR_LIMIT, 0, 0, "out of memory", 13);
        return RS_ENOMEM;
    }
    t->ar.limit = COMPILE_MEMORY;
    t->ar.fail = compile_arena_fail;
    t->ar.ctx = cc;
    cc->c.ar = &t->ar;
    if (setjmp(cc->c.jb)) {
        rs_err rc = cc->oom ? RS_ENOMEM : cc->c.kind == RS_JINJA_ERR_LIMIT ? RS_ERANGE : RS_EINVAL;
        set_error(err, cc->c.kind, cc->c.line, cc->c.col, cc->c.msg, strlen(cc->c.msg));
        ja_release(&t->ar);
        free(t);
        free(cc);
        return rc;
    }
    size_t ntok;
    struct jtoken *tok = jinja_lex(&cc->c, src ? src : "", src ? len : 0, &ntok);
    jinja_parse(&cc->c, t, tok, ntok);
    free(cc);
    t->ar.fail = NULL; /* never allocates again */
    *out = t;
    if (err)
        rs_jinja_error_fini(err);
    return RS_OK;
}

void rs_jinja_destroy(rs_jinja **t)
{
    if (!t || !*t)
        return;
    ja_release(&(*t)->ar);
    free(*t);
    *t = NULL;
}

/* ---- render -------------------------------------------------------------------------- */

struct render {
    jst st;
    int oom;
};

static void render_arena_fail(void *ctx, int oom)
{
    struct render *r = ctx;
    r->oom = oom;
    if (oom)
        jfail(&r->st, NULL, RS_JINJA_ERR_LIMIT, "out of memory");
    jfail(&r->st, NULL, RS_JINJA_ERR_LIMIT, "the render would use more than %zu bytes of memory",
          r->st.ar.limit);
}

static void bind(jst *st, jscope *g, uint32_t sym, jv v)
{
    if (sym != UINT32_MAX)
        jscope_set(st, g, sym, v);
}

static jv token_value(jst *st, const char *s, const char *what)
{
    if (!s)
        return JV_LIT("");
    size_t n = strlen(s);
    if (!rs_utf8_valid(s, n))
        jfail(st, NULL, RS_JINJA_ERR_INPUT, "%s is not valid UTF-8", what);
    return jv_str(s, n);
}

static const char *const reserved[] = {"messages", "tools", "documents", "add_generation_prompt",
                                       "bos_token", "eos_token", NULL};

/* The globals scope: builtins, then the request's variables (transformers' render kwargs). */
static jscope *make_globals(jst *st, const struct rs_jinja_ctx *ctx)
{
    jscope *g = jscope_new(st, NULL);
    for (unsigned i = 0; i < jinja_n_globals; i++) {
        jv f = {0};
        f.t = JT_FUNC;
        f.u.fn = &jinja_globals[i];
        jscope_set(st, g, SYM_FIRST_GLOBAL + i, f);
    }
    if (!ctx->messages || !json_is_array(ctx->messages))
        jfail(st, NULL, RS_JINJA_ERR_INPUT, "messages must be a JSON array");
    jscope_set(st, g, SYM_MESSAGES, jjson_to_value(st, ctx->messages, 0));
    jscope_set(st, g, SYM_TOOLS, jjson_to_value(st, ctx->tools, 0));
    jscope_set(st, g, SYM_DOCUMENTS, jjson_to_value(st, ctx->documents, 0));
    jscope_set(st, g, SYM_ADD_GEN, jv_bool(ctx->add_generation_prompt));
    jscope_set(st, g, SYM_BOS, token_value(st, ctx->bos_token, "bos_token"));
    jscope_set(st, g, SYM_EOS, token_value(st, ctx->eos_token, "eos_token"));
    if (ctx->vars && !json_is_null(ctx->vars)) {
        if (!json_is_object(ctx->vars))
            jfail(st, NULL, RS_JINJA_ERR_INPUT, "template variables must be a JSON object");
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)ctx->vars, key, val) {
            size_t kn = strlen(key);
            for (const char *const *r = reserved; *r; r++)
                if (!strcmp(*r, key))
                    jfail(st, NULL, RS_JINJA_ERR_INPUT,
                          "template variable '%s' is reserved (it has its own field)", key);
            bind(st, g, jinja_sym_find(st->t, key, kn), jjson_to_value(st, val, 0));
        }
    }
    return g;
}

static void run(jst *st, const struct rs_jinja_ctx *ctx)
{
    st->globals = make_globals(st, ctx);
    jscope *root = jscope_new(st, st->globals);
    jexec_list(st, root, st->t->body, st->t->nbody);
    jbuf_putc(st, &st->root, 0);
    st->root.n--;
}

rs_err rs_jinja_render(const rs_jinja *t, const struct rs_jinja_ctx *ctx, char **out,
                       size_t *out_len, struct rs_jinja_error *err)
{
    if (!t || !ctx || !out || !out_len) {
        set_error(err, RS_JINJA_ERR_INPUT, 0, 0, "no template or context given", 28);
        return RS_EINVAL;
    }
    *out = NULL;
    *out_len = 0;
    struct render *r = calloc(1, sizeof(*r));
    char *buf = malloc(4096);
    if (!r || !buf) {
        free(r);
        free(buf);
        set_error(err, RS_JINJA_ERR_LIMIT, 0, 0, "out of memory", 13);
        return RS_ENOMEM;
    }
    jst *st = &r->st;
    const struct rs_jinja_limits *lim = ctx->limits;
    jmp_buf jb;
    st->jb = &jb;
    st->t = t;
    st->max_steps = lim && lim->max_steps ? lim->max_steps : DEF_STEPS;
    st->max_output = lim && lim->max_output ? lim->max_output : DEF_OUTPUT;
    st->max_depth = lim && lim->max_depth ? lim->max_depth : DEF_DEPTH;
    st->ar.limit = lim && lim->max_memory ? lim->max_memory : DEF_MEMORY;
    st->ar.fail = render_arena_fail;
    st->ar.ctx = r;
    st->ar.used = 4096;
    st->now = ctx->now;
    st->root.p = buf;
    st->root.cap = 4096;
    st->root.heap = 1;
    st->out = &st->root;
    if (setjmp(jb)) {
        rs_err rc = r->oom ? RS_ENOMEM
                    : st->ekind == RS_JINJA_ERR_LIMIT ? RS_ERANGE : RS_EINVAL;
        if (ctx->stats)
            *ctx->stats = (struct rs_jinja_stats){st->steps, st->ar.used, 0};
        set_error(err, st->ekind, st->eline, st->ecol, st->emsg, st->emsg_len);
        free(st->root.p);
        ja_release(&st->ar);
        free(r);
        return rc;
    }
    run(st, ctx);
    *out = st->root.p;
    *out_len = st->root.n;
    if (ctx->stats)
        *ctx->stats = (struct rs_jinja_stats){st->steps, st->ar.used, st->root.n};
    ja_release(&st->ar);
    free(r);
    if (err)
        rs_jinja_error_fini(err);
    return RS_OK;
}

/* ---- dates --------------------------------------------------------------------------- */

static int days_in_month(int y, int m)
{
    static const int d[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 ? 28 + leap : d[m - 1];
}

rs_err rs_jinja_parse_time(const char *text, struct tm *tm)
{
    int y, mo, d, h = 0, mi = 0, s = 0, used = 0;
    if (!text || sscanf(text, "%4d-%2d-%2d%n", &y, &mo, &d, &used) != 3)
        return RS_EINVAL;
    if (text[used] == ' ' || text[used] == 'T') {
        int more = 0;
        if (sscanf(text + used + 1, "%2d:%2d:%2d%n", &h, &mi, &s, &more) != 3)
            return RS_EINVAL;
        used += 1 + more;
    }
    if (text[used] || y < 1 || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 ||
        mi > 59 || s > 59 || h < 0 || mi < 0 || s < 0)
        return RS_EINVAL;
    memset(tm, 0, sizeof(*tm));
    tm->tm_year = y - 1900;
    tm->tm_mon = mo - 1;
    tm->tm_mday = d;
    tm->tm_hour = h;
    tm->tm_min = mi;
    tm->tm_sec = s;
    int yday = d - 1;
    for (int k = 1; k < mo; k++)
        yday += days_in_month(y, k);
    tm->tm_yday = yday;
    /* days since 0001-01-01 (a Monday) */
    long yy = y - 1;
    long days = yy * 365 + yy / 4 - yy / 100 + yy / 400 + yday;
    tm->tm_wday = (int)((days + 1) % 7);
    tm->tm_isdst = -1;
    return RS_OK;
}

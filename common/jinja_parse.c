/* SPDX-License-Identifier: MIT */
/*
 * Chat-template parser: Jinja2 3.1's grammar (parser.py), building the tree
 * of jinja_impl.h. Operator precedence, chained comparisons, filters and tests
 * binding tighter than binary operators, `is` tests with one bare argument,
 * tuples, inline if, star-args and double-star kwargs in calls, and the statements for, if,
 * set (also ns.attr and blocks), macro, call, filter, with, print,
 * break/continue and transformers' generation. Filters and tests are resolved
 * here: an unknown name fails the compile unless it sits inside an if, where
 * Jinja defers the error to the moment it runs. Names are interned to ids.
 * Template loading ({% include %}, {% extends %}, {% import %}, blocks) and
 * {% autoescape %} are refused with a message naming the tag.
 */
#include <string.h>

#include "common/jinja_syntax.h"

#define MAX_DEPTH 200

struct parser {
    struct jcomp *c;
    rs_jinja *t;
    const struct jtoken *tok;
    size_t n, i;
    int soft;       /* inside an if of the current frame */
    unsigned loops; /* for loops enclosing the current frame's statements */
};

struct nvec {
    jnode **v;
    uint32_t n, cap;
};

static void nv_push(struct parser *p, struct nvec *v, jnode *x)
{
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 4;
        jnode **nv = ja_alloc(p->c->ar, cap * sizeof(*nv));
        if (v->n)
            memcpy(nv, v->v, v->n * sizeof(*nv));
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

/* ---- symbols ------------------------------------------------------------------ */

static uint32_t sym_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

uint32_t jinja_sym_find(const rs_jinja *t, const char *s, size_t n)
{
    if (!t->sym_cap)
        return UINT32_MAX;
    for (uint32_t h = sym_hash(s, n) & (t->sym_cap - 1);; h = (h + 1) & (t->sym_cap - 1)) {
        uint32_t e = t->sym_idx[h];
        if (!e)
            return UINT32_MAX;
        if (t->sym_len[e - 1] == n && memcmp(t->sym_name[e - 1], s, n) == 0)
            return e - 1;
    }
}

static uint32_t intern(struct parser *p, const char *s, size_t n)
{
    rs_jinja *t = p->t;
    uint32_t id = jinja_sym_find(t, s, n);
    if (id != UINT32_MAX)
        return id;
    if ((t->nsym + 1) * 2 > t->sym_cap) {
        uint32_t cap = t->sym_cap ? t->sym_cap * 2 : 64;
        const char **names = ja_alloc(p->c->ar, cap / 2 * sizeof(*names));
        uint32_t *lens = ja_alloc(p->c->ar, cap / 2 * sizeof(*lens));
        uint32_t *idx = ja_zalloc(p->c->ar, cap * sizeof(*idx));
        if (t->nsym) {
            memcpy(names, t->sym_name, t->nsym * sizeof(*names));
            memcpy(lens, t->sym_len, t->nsym * sizeof(*lens));
        }
        for (uint32_t k = 0; k < t->nsym; k++) {
            uint32_t h = sym_hash(names[k], lens[k]) & (cap - 1);
            while (idx[h])
                h = (h + 1) & (cap - 1);
            idx[h] = k + 1;
        }
        t->sym_name = names;
        t->sym_len = lens;
        t->sym_idx = idx;
        t->sym_cap = cap;
    }
    id = t->nsym++;
    char *copy = ja_alloc(p->c->ar, n + 1);
    memcpy(copy, s, n);
    copy[n] = 0;
    t->sym_name[id] = copy;
    t->sym_len[id] = (uint32_t)n;
    uint32_t h = sym_hash(s, n) & (t->sym_cap - 1);
    while (t->sym_idx[h])
        h = (h + 1) & (t->sym_cap - 1);
    t->sym_idx[h] = id + 1;
    return id;
}

static void intern_predefined(struct parser *p)
{
    static const char *const fixed[] = {"loop",     "caller", "varargs", "kwargs",
                                        "messages", "tools",  "documents",
                                        "add_generation_prompt", "bos_token", "eos_token"};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        intern(p, fixed[i], strlen(fixed[i]));
    for (unsigned i = 0; i < jinja_n_globals; i++)
        intern(p, jinja_globals[i].name, strlen(jinja_globals[i].name));
}

/* ---- tokens ------------------------------------------------------------------- */

static const struct jtoken *cur(struct parser *p) { return &p->tok[p->i]; }
static const struct jtoken *look(struct parser *p)
{
    return &p->tok[p->i + 1 < p->n ? p->i + 1 : p->i];
}
static const struct jtoken *next(struct parser *p)
{
    const struct jtoken *t = &p->tok[p->i];
    if (p->i + 1 < p->n)
        p->i++;
    return t;
}

static int is_op(const struct jtoken *t, int op) { return t->type == T_OP && t->op == op; }
static int is_name(const struct jtoken *t, const char *s)
{
    size_t n = strlen(s);
    return t->type == T_NAME && t->n == n && memcmp(t->s, s, n) == 0;
}

static const char *const op_text[] = {
    "+", "-", "/", "//", "*", "%", "**", "~", "[", "]", "(", ")", "{", "}",
    "==", "!=", ">", ">=", "<", "<=", "=", ".", ":", "|", ",", ";",
};

static void describe(const struct jtoken *t, char *buf, size_t len)
{
    switch (t->type) {
    case T_EOF: snprintf(buf, len, "end of template"); break;
    case T_DATA: snprintf(buf, len, "template data"); break;
    case T_VAR_BEGIN: snprintf(buf, len, "begin of print statement"); break;
    case T_VAR_END: snprintf(buf, len, "end of print statement"); break;
    case T_BLOCK_BEGIN: snprintf(buf, len, "begin of statement block"); break;
    case T_BLOCK_END: snprintf(buf, len, "end of statement block"); break;
    case T_NAME: snprintf(buf, len, "%.*s", (int)(t->n > 64 ? 64 : t->n), t->s); break;
    case T_STRING: snprintf(buf, len, "string"); break;
    case T_INT: snprintf(buf, len, "integer"); break;
    case T_FLOAT: snprintf(buf, len, "float"); break;
    default: snprintf(buf, len, "%s", op_text[t->op]); break;
    }
}

_Noreturn static void fail_at(struct parser *p, const struct jtoken *t, const char *fmt,
                              const char *arg)
{
    jcomp_fail(p->c, t->line, t->col, RS_JINJA_ERR_SYNTAX, fmt, arg);
}

_Noreturn static void fail_unexpected(struct parser *p, const struct jtoken *t)
{
    char d[96];
    describe(t, d, sizeof(d));
    fail_at(p, t, "unexpected '%s'", d);
}

static const struct jtoken *expect_op(struct parser *p, int op)
{
    const struct jtoken *t = cur(p);
    if (!is_op(t, op)) {
        char d[96], m[160];
        describe(t, d, sizeof(d));
        snprintf(m, sizeof(m), "expected token '%s', got '%s'", op_text[op], d);
        fail_at(p, t, "%s", m);
    }
    return next(p);
}

static const struct jtoken *expect_type(struct parser *p, int type, const char *what)
{
    const struct jtoken *t = cur(p);
    if (t->type != type) {
        char d[96], m[200];
        describe(t, d, sizeof(d));
        snprintf(m, sizeof(m), "expected token '%s', got '%s'", what, d);
        fail_at(p, t, "%s", m);
    }
    return next(p);
}

static void expect_name(struct parser *p, const char *name)
{
    if (!is_name(cur(p), name)) {
        char d[96], m[200];
        describe(cur(p), d, sizeof(d));
        snprintf(m, sizeof(m), "expected token '%s', got '%s'", name, d);
        fail_at(p, cur(p), "%s", m);
    }
    next(p);
}

static jnode *mk(struct parser *p, int kind, const struct jtoken *at)
{
    jnode *n = ja_zalloc(p->c->ar, sizeof(*n));
    n->k = (uint8_t)kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

static void enter(struct parser *p)
{
    if (++p->c->depth > MAX_DEPTH)
        jcomp_fail(p->c, cur(p)->line, cur(p)->col, RS_JINJA_ERR_SYNTAX,
                   "expressions nested more than %d deep", MAX_DEPTH);
}
static void leave(struct parser *p) { p->c->depth--; }

/* ---- expressions ---------------------------------------------------------------- */

static jnode *parse_expression(struct parser *p, int with_condexpr);
static jnode *parse_tuple(struct parser *p, int simplified, int with_condexpr,
                          const char *const *extra_end, int explicit_parens);
static jnode *parse_unary(struct parser *p, int with_filter);
static jnode *parse_primary(struct parser *p);
static jnode *parse_postfix(struct parser *p, jnode *node);
static jnode *parse_filter(struct parser *p, jnode *node, int start_inline);

static jnode *parse_or(struct parser *p);

static jnode *parse_condexpr(struct parser *p)
{
    jnode *e1 = parse_or(p);
    while (is_name(cur(p), "if")) {
        jnode *n = mk(p, N_COND, next(p));
        n->a = parse_or(p);
        n->b = e1;
        if (is_name(cur(p), "else")) {
            next(p);
            n->c = parse_condexpr(p);
        }
        e1 = n;
    }
    return e1;
}

static jnode *parse_expression(struct parser *p, int with_condexpr)
{
    enter(p);
    jnode *n = with_condexpr ? parse_condexpr(p) : parse_or(p);
    leave(p);
    return n;
}

static jnode *parse_not(struct parser *p);

static jnode *parse_and(struct parser *p)
{
    jnode *left = parse_not(p);
    while (is_name(cur(p), "and")) {
        jnode *n = mk(p, N_AND, next(p));
        n->a = left;
        n->b = parse_not(p);
        left = n;
    }
    return left;
}

static jnode *parse_or(struct parser *p)
{
    jnode *left = parse_and(p);
    while (is_name(cur(p), "or")) {
        jnode *n = mk(p, N_OR, next(p));
        n->a = left;
        n->b = parse_and(p);
        left = n;
    }
    return left;
}

static jnode *parse_math1(struct parser *p);

static jnode *parse_compare(struct parser *p)
{
    const struct jtoken *start = cur(p);
    jnode *expr = parse_math1(p);
    struct nvec ops = {0};
    for (;;) {
        const struct jtoken *t = cur(p);
        int op = -1;
        if (t->type == T_OP) {
            static const int map[][2] = {{TO_EQ, OP_EQ}, {TO_NE, OP_NE}, {TO_LT, OP_LT},
                                         {TO_LE, OP_LE}, {TO_GT, OP_GT}, {TO_GE, OP_GE}};
            for (size_t k = 0; k < 6; k++)
                if (t->op == map[k][0])
                    op = map[k][1];
            if (op >= 0)
                next(p);
        } else if (is_name(t, "in")) {
            next(p);
            op = OP_IN;
        } else if (is_name(t, "not") && is_name(look(p), "in")) {
            next(p);
            next(p);
            op = OP_NOTIN;
        }
        if (op < 0)
            break;
        jnode *o = mk(p, N_OPERAND, t);
        o->op = (uint8_t)op;
        o->a = parse_math1(p);
        nv_push(p, &ops, o);
    }
    if (!ops.n)
        return expr;
    jnode *n = mk(p, N_CMP, start);
    n->a = expr;
    n->l1 = ops.v;
    n->n1 = ops.n;
    return n;
}

static jnode *parse_not(struct parser *p)
{
    if (is_name(cur(p), "not")) {
        jnode *n = mk(p, N_NOT, next(p));
        enter(p);
        n->a = parse_not(p);
        leave(p);
        return n;
    }
    return parse_compare(p);
}

static jnode *binop(struct parser *p, const struct jtoken *t, int op, jnode *a, jnode *b)
{
    jnode *n = mk(p, N_BIN, t);
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(struct parser *p)
{
    jnode *left = parse_unary(p, 1);
    while (is_op(cur(p), TO_POW)) {
        const struct jtoken *t = next(p);
        left = binop(p, t, OP_POW, left, parse_unary(p, 1));
    }
    return left;
}

static jnode *parse_math2(struct parser *p)
{
    jnode *left = parse_pow(p);
    for (;;) {
        const struct jtoken *t = cur(p);
        int op = is_op(t, TO_MUL) ? OP_MUL : is_op(t, TO_DIV) ? OP_DIV
                 : is_op(t, TO_FLOORDIV) ? OP_FLOORDIV : is_op(t, TO_MOD) ? OP_MOD : -1;
        if (op < 0)
            return left;
        next(p);
        left = binop(p, t, op, left, parse_pow(p));
    }
}

static jnode *parse_concat(struct parser *p)
{
    const struct jtoken *start = cur(p);
    jnode *first = parse_math2(p);
    if (!is_op(cur(p), TO_TILDE))
        return first;
    struct nvec args = {0};
    nv_push(p, &args, first);
    while (is_op(cur(p), TO_TILDE)) {
        next(p);
        nv_push(p, &args, parse_math2(p));
    }
    jnode *n = mk(p, N_CONCAT, start);
    n->l1 = args.v;
    n->n1 = args.n;
    return n;
}

static jnode *parse_math1(struct parser *p)
{
    jnode *left = parse_concat(p);
    for (;;) {
        const struct jtoken *t = cur(p);
        int op = is_op(t, TO_ADD) ? OP_ADD : is_op(t, TO_SUB) ? OP_SUB : -1;
        if (op < 0)
            return left;
        next(p);
        left = binop(p, t, op, left, parse_concat(p));
    }
}

static jnode *parse_filter_expr(struct parser *p, jnode *node);

static jnode *parse_unary(struct parser *p, int with_filter)
{
    const struct jtoken *t = cur(p);
    jnode *node;
    enter(p);
    if (is_op(t, TO_SUB) || is_op(t, TO_ADD)) {
        next(p);
        node = mk(p, is_op(t, TO_SUB) ? N_NEG : N_POS, t);
        node->a = parse_unary(p, 0);
    } else {
        node = parse_primary(p);
    }
    node = parse_postfix(p, node);
    if (with_filter)
        node = parse_filter_expr(p, node);
    leave(p);
    return node;
}

static jnode *parse_list_or_dict(struct parser *p, int dict)
{
    const struct jtoken *t = next(p);
    int close = dict ? TO_RBRACE : TO_RBRACKET;
    struct nvec keys = {0}, vals = {0};
    while (!is_op(cur(p), close)) {
        if (keys.n)
            expect_op(p, TO_COMMA);
        if (is_op(cur(p), close))
            break;
        nv_push(p, &keys, parse_expression(p, 1));
        if (dict) {
            expect_op(p, TO_COLON);
            nv_push(p, &vals, parse_expression(p, 1));
        }
    }
    expect_op(p, close);
    jnode *n = mk(p, dict ? N_DICT : N_LIST, t);
    n->l1 = keys.v;
    n->n1 = keys.n;
    n->l2 = vals.v;
    n->n2 = vals.n;
    return n;
}

static jnode *parse_primary(struct parser *p)
{
    const struct jtoken *t = cur(p);
    jnode *n;
    if (t->type == T_NAME) {
        next(p);
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
            n = mk(p, N_CONST, t);
            n->val = jv_bool(t->s[0] == 't' || t->s[0] == 'T');
        } else if (is_name(t, "none") || is_name(t, "None")) {
            n = mk(p, N_CONST, t);
            n->val = jv_none();
        } else {
            n = mk(p, N_NAME, t);
            n->sym = intern(p, t->s, t->n);
            n->val = jv_str(p->t->sym_name[n->sym], t->n);
        }
    } else if (t->type == T_STRING) {
        n = mk(p, N_CONST, t);
        next(p);
        if (cur(p)->type != T_STRING) {
            n->val = jv_str(t->s, t->n);
        } else {
            size_t total = 0;
            for (size_t k = p->i - 1; k < p->n && p->tok[k].type == T_STRING; k++)
                total += p->tok[k].n;
            char *buf = ja_alloc(p->c->ar, total + 1);
            size_t off = 0;
            memcpy(buf, t->s, t->n);
            off = t->n;
            while (cur(p)->type == T_STRING) {
                memcpy(buf + off, cur(p)->s, cur(p)->n);
                off += cur(p)->n;
                next(p);
            }
            n->val = jv_str(buf, off);
        }
    } else if (t->type == T_INT || t->type == T_FLOAT) {
        next(p);
        n = mk(p, N_CONST, t);
        n->val = t->type == T_INT ? jv_int(t->i) : jv_float(t->f);
    } else if (is_op(t, TO_LPAREN)) {
        next(p);
        n = parse_tuple(p, 0, 1, NULL, 1);
        expect_op(p, TO_RPAREN);
    } else if (is_op(t, TO_LBRACKET)) {
        n = parse_list_or_dict(p, 0);
    } else if (is_op(t, TO_LBRACE)) {
        n = parse_list_or_dict(p, 1);
    } else {
        fail_unexpected(p, t);
    }
    return n;
}

static int is_tuple_end(struct parser *p, const char *const *extra_end)
{
    const struct jtoken *t = cur(p);
    if (t->type == T_VAR_END || t->type == T_BLOCK_END || is_op(t, TO_RPAREN))
        return 1;
    for (; extra_end && *extra_end; extra_end++)
        if (is_name(t, *extra_end))
            return 1;
    return 0;
}

static jnode *parse_tuple(struct parser *p, int simplified, int with_condexpr,
                          const char *const *extra_end, int explicit_parens)
{
    const struct jtoken *start = cur(p);
    struct nvec args = {0};
    int is_tuple = 0;
    for (;;) {
        if (args.n)
            expect_op(p, TO_COMMA);
        if (is_tuple_end(p, extra_end))
            break;
        jnode *e = simplified ? parse_primary(p) : parse_expression(p, with_condexpr);
        nv_push(p, &args, e);
        if (is_op(cur(p), TO_COMMA))
            is_tuple = 1;
        else
            break;
    }
    if (!is_tuple) {
        if (args.n)
            return args.v[0];
        if (!explicit_parens) {
            char d[96];
            describe(cur(p), d, sizeof(d));
            fail_at(p, cur(p), "Expected an expression, got '%s'", d);
        }
    }
    jnode *n = mk(p, N_TUPLE, start);
    n->l1 = args.v;
    n->n1 = args.n;
    return n;
}

/* Call arguments after '(' into n->l1 (positional), l2 (N_KW), b (*x), c (**x). */
static void parse_call_args(struct parser *p, jnode *n)
{
    const struct jtoken *lp = expect_op(p, TO_LPAREN);
    struct nvec args = {0}, kwargs = {0};
    int require_comma = 0;
    while (!is_op(cur(p), TO_RPAREN)) {
        if (require_comma) {
            expect_op(p, TO_COMMA);
            if (is_op(cur(p), TO_RPAREN))
                break;
        }
        const struct jtoken *t = cur(p);
        if (is_op(t, TO_MUL)) {
            if (n->b || n->c)
                fail_at(p, lp, "%s", "invalid syntax for function call expression");
            next(p);
            n->b = parse_expression(p, 1);
        } else if (is_op(t, TO_POW)) {
            if (n->c)
                fail_at(p, lp, "%s", "invalid syntax for function call expression");
            next(p);
            n->c = parse_expression(p, 1);
        } else if (t->type == T_NAME && is_op(look(p), TO_ASSIGN)) {
            if (n->c)
                fail_at(p, lp, "%s", "invalid syntax for function call expression");
            next(p);
            next(p);
            jnode *kw = mk(p, N_KW, t);
            kw->val = jv_str(t->s, t->n);
            kw->a = parse_expression(p, 1);
            nv_push(p, &kwargs, kw);
        } else {
            if (n->b || n->c || kwargs.n)
                fail_at(p, lp, "%s", "invalid syntax for function call expression");
            nv_push(p, &args, parse_expression(p, 1));
        }
        require_comma = 1;
    }
    expect_op(p, TO_RPAREN);
    n->l1 = args.v;
    n->n1 = args.n;
    n->l2 = kwargs.v;
    n->n2 = kwargs.n;
}

static jnode *parse_subscripted(struct parser *p)
{
    const struct jtoken *start = cur(p);
    jnode *parts[3] = {NULL, NULL, NULL};
    if (!is_op(cur(p), TO_COLON)) {
        jnode *e = parse_expression(p, 1);
        if (!is_op(cur(p), TO_COLON))
            return e;
        parts[0] = e;
    }
    next(p); /* ':' */
    if (!is_op(cur(p), TO_COLON) && !is_op(cur(p), TO_RBRACKET) && !is_op(cur(p), TO_COMMA))
        parts[1] = parse_expression(p, 1);
    if (is_op(cur(p), TO_COLON)) {
        next(p);
        if (!is_op(cur(p), TO_RBRACKET) && !is_op(cur(p), TO_COMMA))
            parts[2] = parse_expression(p, 1);
    }
    jnode *n = mk(p, N_SLICE, start);
    n->l1 = ja_alloc(p->c->ar, 3 * sizeof(jnode *));
    memcpy(n->l1, parts, sizeof(parts));
    n->n1 = 3;
    return n;
}

static jnode *parse_subscript(struct parser *p, jnode *node)
{
    const struct jtoken *t = next(p);
    if (is_op(t, TO_DOT)) {
        const struct jtoken *a = next(p);
        if (a->type == T_NAME) {
            jnode *n = mk(p, N_ATTR, t);
            n->a = node;
            n->val = jv_str(a->s, a->n);
            return n;
        }
        if (a->type != T_INT)
            fail_at(p, a, "%s", "expected name or number");
        jnode *n = mk(p, N_ITEM, t), *k = mk(p, N_CONST, a);
        k->val = jv_int(a->i);
        n->a = node;
        n->b = k;
        return n;
    }
    /* '[' */
    struct nvec args = {0};
    while (!is_op(cur(p), TO_RBRACKET)) {
        if (args.n)
            expect_op(p, TO_COMMA);
        nv_push(p, &args, parse_subscripted(p));
    }
    expect_op(p, TO_RBRACKET);
    if (args.n == 1 && args.v[0]->k == N_SLICE) {
        args.v[0]->a = node;
        return args.v[0];
    }
    for (uint32_t k = 0; k < args.n; k++)
        if (args.v[k]->k == N_SLICE)
            jcomp_fail(p->c, t->line, t->col, RS_JINJA_ERR_UNSUPPORTED,
                       "%s", "multi-dimensional slicing is not supported");
    if (!args.n)
        fail_at(p, t, "%s", "expected subscript expression");
    jnode *n = mk(p, N_ITEM, t);
    n->a = node;
    if (args.n == 1) {
        n->b = args.v[0];
    } else {
        n->b = mk(p, N_TUPLE, t);
        n->b->l1 = args.v;
        n->b->n1 = args.n;
    }
    return n;
}

static jnode *parse_call(struct parser *p, jnode *node)
{
    jnode *n = mk(p, N_CALL, cur(p));
    n->line = node->line; /* errors in a call point at what is called */
    n->col = node->col;
    n->a = node;
    parse_call_args(p, n);
    return n;
}

static jnode *parse_postfix(struct parser *p, jnode *node)
{
    for (;;) {
        const struct jtoken *t = cur(p);
        if (is_op(t, TO_DOT) || is_op(t, TO_LBRACKET))
            node = parse_subscript(p, node);
        else if (is_op(t, TO_LPAREN))
            node = parse_call(p, node);
        else
            return node;
    }
}

/* A filter or test name, dotted parts joined. */
static void parse_dotted(struct parser *p, jnode *n)
{
    const struct jtoken *t = expect_type(p, T_NAME, "name");
    if (!is_op(cur(p), TO_DOT)) {
        n->val = jv_str(t->s, t->n);
        return;
    }
    size_t total = t->n;
    for (size_t k = p->i; k + 1 < p->n && is_op(&p->tok[k], TO_DOT) && p->tok[k + 1].type == T_NAME;
         k += 2)
        total += 1 + p->tok[k + 1].n;
    char *buf = ja_alloc(p->c->ar, total + 1);
    size_t off = t->n;
    memcpy(buf, t->s, t->n);
    while (is_op(cur(p), TO_DOT)) {
        next(p);
        const struct jtoken *x = expect_type(p, T_NAME, "name");
        if (off + 1 + x->n > total)
            break;
        buf[off++] = '.';
        memcpy(buf + off, x->s, x->n);
        off += x->n;
    }
    n->val = jv_str(buf, off);
}

static void resolve(struct parser *p, jnode *n, int test)
{
    n->fn = test ? jinja_test_find(n->val.u.s, n->val.n) : jinja_filter_find(n->val.u.s, n->val.n);
    if (!n->fn && !p->soft)
        jcomp_fail(p->c, n->line, n->col, RS_JINJA_ERR_SYNTAX, "No %s named '%.*s'.",
                   test ? "test" : "filter", (int)(n->val.n > 64 ? 64 : n->val.n), n->val.u.s);
}

static jnode *parse_filter(struct parser *p, jnode *node, int start_inline)
{
    while (is_op(cur(p), TO_PIPE) || start_inline) {
        if (!start_inline)
            next(p);
        jnode *n = mk(p, N_FILTER, cur(p));
        parse_dotted(p, n);
        if (is_op(cur(p), TO_LPAREN))
            parse_call_args(p, n);
        n->a = node;
        resolve(p, n, 0);
        node = n;
        start_inline = 0;
    }
    return node;
}

static jnode *parse_test(struct parser *p, jnode *node)
{
    const struct jtoken *is = next(p);
    int negated = 0;
    if (is_name(cur(p), "not")) {
        next(p);
        negated = 1;
    }
    jnode *n = mk(p, N_TEST, cur(p));
    parse_dotted(p, n);
    n->a = node;
    const struct jtoken *t = cur(p);
    if (is_op(t, TO_LPAREN)) {
        parse_call_args(p, n);
    } else if ((t->type == T_NAME || t->type == T_STRING || t->type == T_INT ||
                t->type == T_FLOAT || is_op(t, TO_LBRACKET) || is_op(t, TO_LBRACE)) &&
               !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and")) {
        if (is_name(t, "is"))
            fail_at(p, t, "%s", "You cannot chain multiple tests with is");
        jnode *arg = parse_postfix(p, parse_primary(p));
        n->l1 = ja_alloc(p->c->ar, sizeof(jnode *));
        n->l1[0] = arg;
        n->n1 = 1;
    }
    resolve(p, n, 1);
    if (!negated)
        return n;
    jnode *no = mk(p, N_NOT, is);
    no->a = n;
    return no;
}

static jnode *parse_filter_expr(struct parser *p, jnode *node)
{
    for (;;) {
        const struct jtoken *t = cur(p);
        if (is_op(t, TO_PIPE))
            node = parse_filter(p, node, 0);
        else if (is_name(t, "is"))
            node = parse_test(p, node);
        else if (is_op(t, TO_LPAREN))
            node = parse_call(p, node);
        else
            return node;
    }
}

/* ---- statements ------------------------------------------------------------------ */

static int can_assign(const jnode *n)
{
    if (n->k == N_NAME)
        return 1;
    if (n->k != N_TUPLE)
        return 0;
    for (uint32_t k = 0; k < n->n1; k++)
        if (!can_assign(n->l1[k]))
            return 0;
    return 1;
}

static jnode *parse_assign_target(struct parser *p, int with_tuple, int name_only,
                                  const char *const *extra_end, int with_namespace)
{
    const struct jtoken *t = cur(p);
    jnode *target;
    if (with_namespace && t->type == T_NAME && is_op(look(p), TO_DOT)) {
        next(p);
        next(p);
        const struct jtoken *attr = expect_type(p, T_NAME, "name");
        target = mk(p, N_NSREF, t);
        target->sym = intern(p, t->s, t->n);
        target->val = jv_str(attr->s, attr->n);
        return target;
    }
    if (name_only) {
        expect_type(p, T_NAME, "name");
        p->i--;
        target = parse_primary(p);
    } else {
        target = with_tuple ? parse_tuple(p, 1, 1, extra_end, 0) : parse_primary(p);
    }
    if (!can_assign(target)) {
        const char *what = target->k == N_CONST ? "const" : target->k == N_TUPLE ? "tuple" : "expr";
        fail_at(p, t, "can't assign to '%s'", what);
    }
    return target;
}

static jnode **subparse(struct parser *p, const char *const *end, uint32_t *count);

/* Block body up to one of `end` (left as the current token; consumed when drop). */
static jnode **parse_statements(struct parser *p, const char *const *end, int drop,
                                uint32_t *count)
{
    if (is_op(cur(p), TO_COLON))
        next(p);
    expect_type(p, T_BLOCK_END, "end of statement block");
    const struct jtoken *open = cur(p);
    jnode **body = subparse(p, end, count);
    if (cur(p)->type == T_EOF) {
        char m[200];
        size_t k = (size_t)snprintf(m, sizeof(m), "Unexpected end of template. Jinja was looking "
                                                  "for the following tags: ");
        for (const char *const *e = end; *e && k < sizeof(m); e++)
            k += (size_t)snprintf(m + k, sizeof(m) - k, "%s'%s'", e == end ? "" : " or ", *e);
        (void)open;
        fail_at(p, cur(p), "%s", m);
    }
    if (drop)
        next(p);
    return body;
}

static void parse_signature(struct parser *p, jnode *n)
{
    struct nvec args = {0}, defs = {0};
    expect_op(p, TO_LPAREN);
    while (!is_op(cur(p), TO_RPAREN)) {
        if (args.n)
            expect_op(p, TO_COMMA);
        const struct jtoken *at = cur(p);
        jnode *arg = parse_assign_target(p, 0, 1, NULL, 0);
        for (uint32_t k = 0; k < args.n; k++)
            if (args.v[k]->sym == arg->sym)
                fail_at(p, at, "duplicate argument '%s' in function definition",
                        p->t->sym_name[arg->sym]);
        if (is_op(cur(p), TO_ASSIGN)) {
            next(p);
            nv_push(p, &defs, parse_expression(p, 1));
        } else if (defs.n) {
            fail_at(p, cur(p), "%s", "non-default argument follows default argument");
        }
        nv_push(p, &args, arg);
    }
    expect_op(p, TO_RPAREN);
    n->l1 = args.v;
    n->n1 = args.n;
    n->l2 = defs.v;
    n->n2 = defs.n;
}

/* Which of Jinja's special names (caller, varargs, kwargs) a macro body reads. */
static unsigned special_names(const jnode *n)
{
    if (!n)
        return 0;
    unsigned fl = 0;
    if (n->k == N_NAME)
        fl |= n->sym == SYM_CALLER ? NF_CALLER : n->sym == SYM_VARARGS ? NF_VARARGS
              : n->sym == SYM_KWARGS ? NF_KWARGS : 0;
    fl |= special_names(n->a) | special_names(n->b) | special_names(n->c);
    for (uint32_t k = 0; k < n->n1; k++)
        fl |= special_names(n->l1[k]);
    for (uint32_t k = 0; k < n->n2; k++)
        fl |= special_names(n->l2[k]);
    for (uint32_t k = 0; k < n->n3; k++)
        fl |= special_names(n->l3[k]);
    return fl;
}

/* A macro or call block body: a frame of its own (no enclosing loop, not soft). */
static void parse_macro_body(struct parser *p, jnode *n, const char *endtag)
{
    const char *const end[] = {endtag, NULL};
    int soft = p->soft;
    unsigned loops = p->loops;
    p->soft = 0;
    p->loops = 0;
    n->l3 = parse_statements(p, end, 1, &n->n3);
    p->soft = soft;
    p->loops = loops;
    for (uint32_t k = 0; k < n->n3; k++)
        n->fl |= (uint16_t)special_names(n->l3[k]);
}

static jnode *parse_for(struct parser *p, const struct jtoken *t)
{
    static const char *const in_end[] = {"in", NULL}, *const rec_end[] = {"recursive", NULL};
    static const char *const body_end[] = {"endfor", "else", NULL}, *const else_end[] = {"endfor", NULL};
    jnode *n = mk(p, N_FOR, t);
    n->a = parse_assign_target(p, 1, 0, in_end, 0);
    const jnode *tg = n->a;
    for (uint32_t k = 0; k <= tg->n1; k++) {
        const jnode *x = tg->k == N_NAME ? tg : k < tg->n1 ? tg->l1[k] : NULL;
        if (x && x->k == N_NAME && x->sym == SYM_LOOP)
            fail_at(p, t, "%s", "Can't assign to special loop variable in for-loop target");
        if (tg->k == N_NAME)
            break;
    }
    expect_name(p, "in");
    n->b = parse_tuple(p, 0, 0, rec_end, 0);
    int soft = p->soft;
    p->soft = 0;
    if (is_name(cur(p), "if")) {
        next(p);
        n->c = parse_expression(p, 1);
    }
    if (is_name(cur(p), "recursive")) {
        next(p);
        n->fl |= NF_RECURSIVE;
    }
    p->loops++;
    n->l1 = parse_statements(p, body_end, 0, &n->n1);
    p->loops--;
    if (is_name(next(p), "else"))
        n->l2 = parse_statements(p, else_end, 1, &n->n2);
    p->soft = soft;
    return n;
}

static jnode *parse_if(struct parser *p, const struct jtoken *t)
{
    static const char *const body_end[] = {"elif", "else", "endif", NULL};
    static const char *const else_end[] = {"endif", NULL};
    int soft = p->soft;
    p->soft = 1;
    jnode *result = mk(p, N_IF, t), *node = result;
    for (;;) {
        node->a = parse_tuple(p, 0, 0, NULL, 0);
        node->l1 = parse_statements(p, body_end, 0, &node->n1);
        const struct jtoken *e = next(p);
        if (is_name(e, "elif")) {
            jnode *el = mk(p, N_IF, e);
            node->l2 = ja_alloc(p->c->ar, sizeof(jnode *));
            node->l2[0] = el;
            node->n2 = 1;
            node = el;
            continue;
        }
        if (is_name(e, "else"))
            node->l2 = parse_statements(p, else_end, 1, &node->n2);
        break;
    }
    p->soft = soft;
    return result;
}

static jnode *parse_set(struct parser *p, const struct jtoken *t)
{
    static const char *const end[] = {"endset", NULL};
    jnode *target = parse_assign_target(p, 1, 0, NULL, 1);
    if (is_op(cur(p), TO_ASSIGN)) {
        next(p);
        jnode *n = mk(p, N_SET, t);
        n->a = target;
        n->b = parse_tuple(p, 0, 1, NULL, 0);
        return n;
    }
    jnode *n = mk(p, N_SETBLOCK, t);
    n->a = target;
    int soft = p->soft;
    p->soft = 0;
    n->b = parse_filter(p, NULL, 0);
    n->l1 = parse_statements(p, end, 1, &n->n1);
    p->soft = soft;
    return n;
}

static jnode *parse_with(struct parser *p, const struct jtoken *t)
{
    static const char *const end[] = {"endwith", NULL};
    jnode *n = mk(p, N_WITH, t);
    struct nvec targets = {0}, values = {0};
    while (cur(p)->type != T_BLOCK_END) {
        if (targets.n)
            expect_op(p, TO_COMMA);
        nv_push(p, &targets, parse_assign_target(p, 1, 0, NULL, 0));
        expect_op(p, TO_ASSIGN);
        nv_push(p, &values, parse_expression(p, 1));
    }
    n->l1 = targets.v;
    n->n1 = targets.n;
    n->l2 = values.v;
    n->n2 = values.n;
    int soft = p->soft;
    p->soft = 0;
    n->l3 = parse_statements(p, end, 1, &n->n3);
    p->soft = soft;
    return n;
}

/* {% generation %}: transformers' assistant-mask tag, which renders its body unchanged. */
static jnode *parse_generation(struct parser *p, const struct jtoken *t)
{
    static const char *const end[] = {"endgeneration", NULL};
    jnode *n = mk(p, N_WITH, t);
    int soft = p->soft;
    unsigned loops = p->loops;
    p->soft = 0;
    p->loops = 0;
    n->l3 = parse_statements(p, end, 1, &n->n3);
    p->soft = soft;
    p->loops = loops;
    return n;
}

static jnode *parse_statement(struct parser *p)
{
    const struct jtoken *t = cur(p);
    if (t->type != T_NAME)
        fail_at(p, t, "%s", "tag name expected");
    next(p);
    if (is_name(t, "for"))
        return parse_for(p, t);
    if (is_name(t, "if"))
        return parse_if(p, t);
    if (is_name(t, "set"))
        return parse_set(p, t);
    if (is_name(t, "macro")) {
        jnode *n = mk(p, N_MACRO, t);
        jnode *name = parse_assign_target(p, 0, 1, NULL, 0);
        n->sym = name->sym;
        n->val = name->val;
        parse_signature(p, n);
        parse_macro_body(p, n, "endmacro");
        return n;
    }
    if (is_name(t, "call")) {
        jnode *n = mk(p, N_CALLBLOCK, t);
        if (is_op(cur(p), TO_LPAREN))
            parse_signature(p, n);
        n->a = parse_expression(p, 1);
        if (n->a->k != N_CALL)
            fail_at(p, t, "%s", "expected call");
        parse_macro_body(p, n, "endcall");
        return n;
    }
    if (is_name(t, "filter")) {
        static const char *const end[] = {"endfilter", NULL};
        jnode *n = mk(p, N_FILTERBLOCK, t);
        int soft = p->soft;
        p->soft = 0;
        n->a = parse_filter(p, NULL, 1);
        n->l1 = parse_statements(p, end, 1, &n->n1);
        p->soft = soft;
        return n;
    }
    if (is_name(t, "with"))
        return parse_with(p, t);
    if (is_name(t, "print")) {
        jnode *n = mk(p, N_PRINT, t);
        n->a = parse_tuple(p, 0, 1, NULL, 0);
        return n;
    }
    if (is_name(t, "break") || is_name(t, "continue")) {
        if (!p->loops)
            fail_at(p, t, "'%s' outside loop", t->s[0] == 'b' ? "break" : "continue");
        return mk(p, t->s[0] == 'b' ? N_BREAK : N_CONTINUE, t);
    }
    if (is_name(t, "generation"))
        return parse_generation(p, t);
    static const char *const unsupported[] = {"block", "extends", "include", "import", "from",
                                              "autoescape", NULL};
    for (const char *const *u = unsupported; *u; u++)
        if (is_name(t, *u))
            jcomp_fail(p->c, t->line, t->col, RS_JINJA_ERR_UNSUPPORTED,
                       "{%% %s %%} is not supported: chat templates render on their own, "
                       "without loading or inheriting other templates or changing escaping",
                       *u);
    char d[96];
    describe(t, d, sizeof(d));
    fail_at(p, t, "Encountered unknown tag '%s'.", d);
}

static jnode **subparse(struct parser *p, const char *const *end, uint32_t *count)
{
    struct nvec body = {0};
    for (;;) {
        const struct jtoken *t = cur(p);
        if (t->type == T_EOF)
            break;
        if (t->type == T_DATA) {
            jnode *n = mk(p, N_DATA, t);
            n->val = jv_str(t->s, t->n);
            nv_push(p, &body, n);
            next(p);
        } else if (t->type == T_VAR_BEGIN) {
            next(p);
            jnode *n = mk(p, N_PRINT, t);
            n->a = parse_tuple(p, 0, 1, NULL, 0);
            expect_type(p, T_VAR_END, "end of print statement");
            nv_push(p, &body, n);
        } else if (t->type == T_BLOCK_BEGIN) {
            next(p);
            for (const char *const *e = end; e && *e; e++)
                if (is_name(cur(p), *e)) {
                    *count = body.n;
                    return body.v;
                }
            enter(p);
            nv_push(p, &body, parse_statement(p));
            leave(p);
            expect_type(p, T_BLOCK_END, "end of statement block");
        } else {
            fail_unexpected(p, t);
        }
    }
    *count = body.n;
    return body.v;
}

void jinja_parse(struct jcomp *c, rs_jinja *t, const struct jtoken *tok, size_t n)
{
    struct parser p = {.c = c, .t = t, .tok = tok, .n = n};
    intern_predefined(&p);
    t->body = subparse(&p, NULL, &t->nbody);
    if (cur(&p)->type != T_EOF)
        fail_unexpected(&p, cur(&p));
}

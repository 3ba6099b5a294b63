/* SPDX-License-Identifier: MIT */
/*
 * Jinja2 3.1's builtin tests (`x is defined`, `x is divisibleby 3`, ...) for
 * the chat-template renderer, with Python's type rules: bool is a number but
 * not an integer, Undefined is iterable and a sequence (it has __len__ and
 * __getitem__), a generator is iterable but not a sequence, Markup is a
 * string and escaped, comparison tests raise TypeError as < does.
 */
#include <string.h>

#include "common/jinja_impl.h"

#define P(...) ((const char *const[]){__VA_ARGS__, NULL})

static jv b(int x) { return jv_bool(x); }

static jv t_defined(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    return b(v.t != JT_UNDEF);
}
static jv t_undefined(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    return b(v.t == JT_UNDEF);
}
static jv t_none(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    return b(v.t == JT_NONE);
}
static jv t_boolean(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    return b(v.t == JT_BOOL);
}
static jv t_true(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    return b(v.t == JT_BOOL && v.u.i);
}
static jv t_false(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    return b(v.t == JT_BOOL && !v.u.i);
}
static jv t_string(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    return b(v.t == JT_STR);
}
static jv t_escaped(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    return b(v.t == JT_STR && v.mk);
}
static jv t_number(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    return b(jv_is_num(v));
}
static jv t_integer(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    return b(v.t == JT_INT);
}
static jv t_float(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    return b(v.t == JT_FLOAT);
}
static jv t_mapping(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    return b(v.t == JT_DICT);
}

static jv t_iterable(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    return b(v.t == JT_STR || v.t == JT_LIST || v.t == JT_DICT || v.t == JT_UNDEF ||
             v.t == JT_LOOP);
}

static jv t_sequence(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    if (v.t == JT_LIST)
        return b(v.u.l->kind != JL_ITER && v.u.l->kind != JL_VIEW);
    return b(v.t == JT_STR || v.t == JT_DICT || v.t == JT_UNDEF);
}

static jv t_callable(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    return b(v.t == JT_MACRO || v.t == JT_FUNC || v.t == JT_METHOD || v.t == JT_LOOP ||
             v.t == JT_UNDEF || (v.t == JT_OBJ && v.u.o->kind == JO_JOINER));
}

/* value % 2 == r, through Python's % (so "abc" is odd raises as in Python). */
static int mod_is(jst *st, const jnode *at, jv v, jv m, int64_t r)
{
    jv x = jeval_binop(st, at, OP_MOD, v, m);
    return jv_eq(st, at, x, jv_int(r));
}

static jv t_odd(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    return b(mod_is(st, at, v, jv_int(2), 1));
}
static jv t_even(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    return b(mod_is(st, at, v, jv_int(2), 0));
}
static jv t_divisibleby(jst *st, const jnode *at, jv v, struct jcall *c)
{
    return b(mod_is(st, at, v, c->a[0], 0));
}

static jv t_eq(jst *st, const jnode *at, jv v, struct jcall *c) { return b(jv_eq(st, at, v, c->a[0])); }
static jv t_ne(jst *st, const jnode *at, jv v, struct jcall *c) { return b(!jv_eq(st, at, v, c->a[0])); }
static jv t_lt(jst *st, const jnode *at, jv v, struct jcall *c) { return b(jcompare(st, at, OP_LT, v, c->a[0])); }
static jv t_le(jst *st, const jnode *at, jv v, struct jcall *c) { return b(jcompare(st, at, OP_LE, v, c->a[0])); }
static jv t_gt(jst *st, const jnode *at, jv v, struct jcall *c) { return b(jcompare(st, at, OP_GT, v, c->a[0])); }
static jv t_ge(jst *st, const jnode *at, jv v, struct jcall *c) { return b(jcompare(st, at, OP_GE, v, c->a[0])); }
static jv t_in(jst *st, const jnode *at, jv v, struct jcall *c) { return b(jcompare(st, at, OP_IN, v, c->a[0])); }

/* `is`: identity. None/True/False are singletons, CPython caches ints -5..256. */
static jv t_sameas(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)st, (void)at;
    jv o = c->a[0];
    if (v.t != o.t)
        return b(0);
    switch (v.t) {
    case JT_NONE:
    case JT_UNDEF:
        return b(v.t == JT_NONE || v.u.u == o.u.u);
    case JT_BOOL:
        return b(v.u.i == o.u.i);
    case JT_INT:
        return b(v.u.i == o.u.i && v.u.i >= -5 && v.u.i <= 256);
    case JT_FLOAT:
        return b(0);
    case JT_STR:
        return b(v.u.s == o.u.s && v.n == o.n);
    default:
        return b(v.u.l == o.u.l);
    }
}

static jv t_case(jst *st, const jnode *at, jv v, int upper)
{
    jv s = jv_to_str(st, at, v);
    int cased = 0;
    for (size_t i = 0; i < s.n;) {
        size_t adv;
        unsigned p = jcase_props(jstr_decode(s.u.s + i, s.n - i, &adv));
        i += adv;
        if (p & (upper ? JC_LOWER : JC_UPPER))
            return b(0);
        if ((p & JC_TITLE) != 0)
            return b(0);
        cased |= (p & (upper ? JC_UPPER : JC_LOWER)) != 0;
    }
    return b(cased);
}

static jv t_lower(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    return t_case(st, at, v, 0);
}
static jv t_upper(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    return t_case(st, at, v, 1);
}

static jv t_filter(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    return b(v.t == JT_STR && jinja_filter_find(v.u.s, v.n) != NULL);
}
static jv t_test(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    return b(v.t == JT_STR && jinja_test_find(v.u.s, v.n) != NULL);
}

/* Sorted by name as strcmp orders them. */
static const struct jbuiltin tests[] = {
    {"!=", P("other"), 1, 0, t_ne},
    {"<", P("other"), 1, 0, t_lt},
    {"<=", P("other"), 1, 0, t_le},
    {"==", P("other"), 1, 0, t_eq},
    {">", P("other"), 1, 0, t_gt},
    {">=", P("other"), 1, 0, t_ge},
    {"boolean", NULL, 0, 0, t_boolean},
    {"callable", NULL, 0, 0, t_callable},
    {"defined", NULL, 0, 0, t_defined},
    {"divisibleby", P("num"), 1, 0, t_divisibleby},
    {"eq", P("other"), 1, 0, t_eq},
    {"equalto", P("other"), 1, 0, t_eq},
    {"escaped", NULL, 0, 0, t_escaped},
    {"even", NULL, 0, 0, t_even},
    {"false", NULL, 0, 0, t_false},
    {"filter", NULL, 0, 0, t_filter},
    {"float", NULL, 0, 0, t_float},
    {"ge", P("other"), 1, 0, t_ge},
    {"greaterthan", P("other"), 1, 0, t_gt},
    {"gt", P("other"), 1, 0, t_gt},
    {"in", P("seq"), 1, 0, t_in},
    {"integer", NULL, 0, 0, t_integer},
    {"iterable", NULL, 0, 0, t_iterable},
    {"le", P("other"), 1, 0, t_le},
    {"lessthan", P("other"), 1, 0, t_lt},
    {"lower", NULL, 0, 0, t_lower},
    {"lt", P("other"), 1, 0, t_lt},
    {"mapping", NULL, 0, 0, t_mapping},
    {"ne", P("other"), 1, 0, t_ne},
    {"none", NULL, 0, 0, t_none},
    {"number", NULL, 0, 0, t_number},
    {"odd", NULL, 0, 0, t_odd},
    {"sameas", P("other"), 1, 0, t_sameas},
    {"sequence", NULL, 0, 0, t_sequence},
    {"string", NULL, 0, 0, t_string},
    {"test", NULL, 0, 0, t_test},
    {"true", NULL, 0, 0, t_true},
    {"undefined", NULL, 0, 0, t_undefined},
    {"upper", NULL, 0, 0, t_upper},
};

const struct jbuiltin *jinja_test_find(const char *name, size_t n)
{
    return jinja_builtin_search(tests, sizeof(tests) / sizeof(tests[0]), name, n);
}

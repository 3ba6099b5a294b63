/* SPDX-License-Identifier: MIT */
/*
 * Expression evaluation for the chat-template renderer, as Jinja2's compiled
 * code behaves under ImmutableSandboxedEnvironment: name lookup through the
 * scope chain (a macro reads the scope it was defined in, live), attribute
 * access trying the Python attribute (methods) before the item and item
 * access trying the item before the attribute, unsafe attributes (list.append,
 * dict.update, dunders) as undefined values that raise SecurityError when
 * used, Python operators (+ on str/list/tuple, * repetition, Markup escaping
 * its other operand, chained comparisons, `in`), slicing, calls with *args and
 * **kwargs bound to builtins by parameter name, filters, tests and macro calls.
 */
#include <string.h>

#include "common/jinja_impl.h"

#define MAX_ARGS 64

/* ---- scopes ---------------------------------------------------------------------- */

jscope *jscope_new(jst *st, jscope *parent)
{
    jscope *s = ja_alloc(&st->ar, sizeof(*s) + 4 * sizeof(struct jvar));
    s->parent = parent;
    s->v = (struct jvar *)(s + 1);
    s->n = 0;
    s->cap = 4;
    return s;
}

jv jscope_lookup(jst *st, jscope *sc, uint32_t sym, const jnode *at)
{
    for (jscope *s = sc; s; s = s->parent)
        for (uint32_t i = 0; i < s->n; i++)
            if (s->v[i].sym == sym)
                return s->v[i].v;
    (void)at;
    return jv_undef_name(st, st->t->sym_name[sym], st->t->sym_len[sym]);
}

void jscope_set(jst *st, jscope *sc, uint32_t sym, jv v)
{
    for (uint32_t i = 0; i < sc->n; i++)
        if (sc->v[i].sym == sym) {
            sc->v[i].v = v;
            return;
        }
    if (sc->n == sc->cap) {
        uint32_t cap = sc->cap * 2;
        struct jvar *nv = ja_alloc(&st->ar, cap * sizeof(*nv));
        memcpy(nv, sc->v, sc->n * sizeof(*nv));
        sc->v = nv;
        sc->cap = cap;
    }
    sc->v[sc->n].sym = sym;
    sc->v[sc->n].v = v;
    sc->n++;
}

/* ---- attribute and item access --------------------------------------------------- */

static int is_dunder(const char *s, size_t n)
{
    return n >= 4 && s[0] == '_' && s[1] == '_' && s[n - 1] == '_' && s[n - 2] == '_';
}

static jv bound(jst *st, jv self, const struct jbuiltin *m)
{
    struct jmethod *me = jalloc(st, sizeof(*me));
    me->self = self;
    me->m = m;
    jv v = {0};
    v.t = JT_METHOD;
    v.u.me = me;
    return v;
}

static jv macro_attr(jst *st, jv obj, const char *name, size_t len)
{
    const jnode *d = obj.u.m->def;
    if (len == 4 && memcmp(name, "name", 4) == 0)
        return d->k == N_MACRO ? d->val : JV_LIT("caller");
    return jv_undef_attr(st, obj, name, len);
}

/* Python getattr(obj, name) under the sandbox; *found = 0 when Python would raise AttributeError. */
static jv py_getattr(jst *st, const jnode *at, jv obj, const char *name, size_t len, int *found)
{
    *found = 1;
    if (obj.t == JT_NS) {
        jv *v = jdict_get_str(&obj.u.ns->d, name, len);
        if (v)
            return *v;
    } else if (obj.t == JT_LOOP) {
        int ok;
        jv v = jloop_attr(st, at, obj.u.lp, name, len, &ok);
        if (ok)
            return v;
    } else if (obj.t == JT_MACRO) {
        jv v = macro_attr(st, obj, name, len);
        if (v.t != JT_UNDEF)
            return v;
    } else if (jv_is_num(obj) && len == 4 && (!memcmp(name, "real", 4) || !memcmp(name, "imag", 4))) {
        if (name[0] == 'i')
            return obj.t == JT_FLOAT ? jv_float(0.0) : jv_int(0);
        return obj.t == JT_BOOL ? jv_int(obj.u.i) : obj;
    } else if (jv_is_intlike(obj) && ((len == 9 && !memcmp(name, "numerator", 9)) ||
                                      (len == 11 && !memcmp(name, "denominator", 11)))) {
        return jv_int(len == 9 ? obj.u.i : 1);
    } else if (obj.t == JT_OBJ && obj.u.o->kind == JO_CYCLER && len == 7 &&
               memcmp(name, "current", 7) == 0) {
        return obj.u.o->items->v[obj.u.o->pos];
    } else {
        int unsafe = 0;
        const struct jbuiltin *m = jinja_method_find(obj, name, len, &unsafe);
        if (m)
            return unsafe ? jv_undef_unsafe(st, obj, name, len) : bound(st, obj, m);
    }
    if (is_dunder(name, len))
        return jv_undef_unsafe(st, obj, name, len);
    *found = 0;
    return jv_undef();
}

jv jget_pyattr(jst *st, const jnode *at, jv obj, const char *name, size_t len)
{
    if (obj.t == JT_UNDEF)
        jv_undef_fail(st, at, obj);
    int found;
    jv v = py_getattr(st, at, obj, name, len, &found);
    return found ? v : jv_undef_attr(st, obj, name, len);
}

jv jget_attr(jst *st, const jnode *at, jv obj, const char *name, size_t len)
{
    if (obj.t == JT_UNDEF)
        jv_undef_fail(st, at, obj);
    int found;
    jv v = py_getattr(st, at, obj, name, len, &found);
    if (found)
        return v;
    if (obj.t == JT_DICT) {
        jv *p = jdict_get_str(obj.u.d, name, len);
        if (p)
            return *p;
    }
    return jv_undef_attr(st, obj, name, len);
}

/* obj[key] as Python; *ok = 0 where Python raises TypeError or LookupError. */
static jv py_getitem(jst *st, const jnode *at, jv obj, jv key, int *ok)
{
    *ok = 0;
    switch (obj.t) {
    case JT_DICT: {
        if (key.t == JT_LIST && key.u.l->kind != JL_TUPLE)
            return jv_undef(); /* unhashable */
        if (key.t == JT_DICT)
            return jv_undef();
        jv *p = jdict_get(st, at, obj.u.d, key);
        if (p) {
            *ok = 1;
            return *p;
        }
        return jv_undef();
    }
    case JT_LIST: {
        struct jlist *l = obj.u.l;
        if (l->kind == JL_ITER || l->kind == JL_VIEW || !jv_is_intlike(key))
            return jv_undef();
        int64_t i = key.u.i < 0 ? key.u.i + l->n : key.u.i;
        if (i < 0 || i >= l->n)
            return jv_undef();
        *ok = 1;
        return l->v[i];
    }
    case JT_STR:
        if (jv_is_intlike(key)) {
            jv ch = jstr_index(st, obj, key.u.i, ok);
            ch.mk = obj.mk;
            return ch;
        }
        return jv_undef();
    default:
        return jv_undef();
    }
}

jv jget_item(jst *st, const jnode *at, jv obj, jv key)
{
    if (obj.t == JT_UNDEF)
        jv_undef_fail(st, at, obj);
    int ok;
    jv v = py_getitem(st, at, obj, key, &ok);
    if (ok)
        return v;
    if (key.t == JT_STR) {
        int found;
        v = py_getattr(st, at, obj, key.u.s, key.n, &found);
        if (found)
            return v;
    }
    return jv_undef_item(st, obj, key);
}

static int64_t slice_bound(jst *st, const jnode *at, jv v, int *have)
{
    *have = v.t != JT_NONE && v.t != JT_MISSING;
    if (!*have)
        return 0;
    if (!jv_is_intlike(v))
        jfail(st, at, RS_JINJA_ERR_TYPE,
              "slice indices must be integers or None or have an __index__ method");
    return v.u.i;
}

static jv eval_slice(jst *st, jscope *sc, const jnode *n)
{
    jv obj = jeval(st, sc, n->a);
    jv part[3];
    for (int i = 0; i < 3; i++)
        part[i] = n->l1[i] ? jeval(st, sc, n->l1[i]) : jv_none();
    int hs, he, hp;
    int64_t start = slice_bound(st, n, part[0], &hs), stop = slice_bound(st, n, part[1], &he);
    int64_t step = slice_bound(st, n, part[2], &hp);
    if (!hp)
        step = 1;
    if (step == 0)
        jfail(st, n, RS_JINJA_ERR_VALUE, "slice step cannot be zero");
    if (obj.t == JT_UNDEF)
        jv_undef_fail(st, n, obj);
    if (obj.t == JT_STR) {
        jstep(st, n, obj.n / 64);
        return jstr_slice(st, obj, start, stop, step, hs, he);
    }
    if (obj.t == JT_DICT)
        jfail(st, n, RS_JINJA_ERR_TYPE, "unhashable type: 'slice'");
    if (obj.t != JT_LIST || obj.u.l->kind == JL_ITER || obj.u.l->kind == JL_VIEW)
        jfail(st, n, RS_JINJA_ERR_TYPE, "'%s' object is not subscriptable", jv_type_name(obj));
    const struct jlist *l = obj.u.l;
    int64_t count = jslice_adjust(l->n, &start, &stop, step, hs, he);
    struct jlist *r = jlist_new(st, l->kind, (uint32_t)count);
    for (int64_t k = 0, i = start; k < count; k++, i += step)
        r->v[k] = l->v[i];
    r->n = (uint32_t)count;
    if (l->kind == JL_RANGE) { /* Python: range(r0 + start*rs, r0 + stop*rs, rs*step) */
        int64_t a, b;
        if (__builtin_mul_overflow(start, l->rs, &a) || __builtin_add_overflow(l->r0, a, &r->r0) ||
            __builtin_mul_overflow(stop, l->rs, &b) || __builtin_add_overflow(l->r0, b, &r->r1) ||
            __builtin_mul_overflow(l->rs, step, &r->rs))
            jfail(st, n, RS_JINJA_ERR_UNSUPPORTED, "range bounds do not fit in 64 bits");
    }
    jstep(st, n, (uint64_t)count / 16);
    return jv_list(r);
}

/* ---- operators ----------------------------------------------------------------------- */

_Noreturn static void bad_operands(jst *st, const jnode *at, const char *op, jv a, jv b)
{
    if (a.t == JT_UNDEF)
        jv_undef_fail(st, at, a);
    if (b.t == JT_UNDEF)
        jv_undef_fail(st, at, b);
    if (a.t == JT_STR && !strcmp(op, "+"))
        jfail(st, at, RS_JINJA_ERR_TYPE, "can only concatenate str (not \"%s\") to str",
              jv_type_name(b));
    if (a.t == JT_LIST && a.u.l->kind == JL_LIST && !strcmp(op, "+"))
        jfail(st, at, RS_JINJA_ERR_TYPE, "can only concatenate list (not \"%s\") to list",
              jv_type_name(b));
    jfail(st, at, RS_JINJA_ERR_TYPE, "unsupported operand type(s) for %s: '%s' and '%s'", op,
          jv_type_name(a), jv_type_name(b));
}

static jv concat2(jst *st, const jnode *at, jv a, jv b)
{
    struct jbuf buf;
    jbuf_init(st, &buf, (size_t)a.n + b.n + 1);
    jbuf_put(st, &buf, a.u.s, a.n);
    jbuf_put(st, &buf, b.u.s, b.n);
    jstep(st, at, buf.n / 64);
    return jbuf_take(&buf);
}

static jv repeat(jst *st, const jnode *at, jv seq, int64_t times)
{
    if (times < 0)
        times = 0;
    if ((seq.t == JT_STR ? seq.n : seq.u.l->n) == 0 || times == 0) { /* nothing to repeat */
        if (seq.t == JT_STR)
            return seq.mk ? (jv){.t = JT_STR, .mk = 1, .u.s = ""} : JV_LIT("");
        return jv_list(jlist_new(st, seq.u.l->kind, 0));
    }
    if (seq.t == JT_STR) {
        if (seq.n && (uint64_t)times > st->max_output / seq.n)
            jfail(st, at, RS_JINJA_ERR_LIMIT, "string repetition would pass %zu bytes",
                  st->max_output);
        struct jbuf b;
        jbuf_init(st, &b, (size_t)(seq.n * times) + 1);
        for (int64_t i = 0; i < times; i++)
            jbuf_put(st, &b, seq.u.s, seq.n);
        jstep(st, at, b.n / 64);
        jv r = jbuf_take(&b);
        r.mk = seq.mk;
        return r;
    }
    const struct jlist *l = seq.u.l;
    if (l->n && (uint64_t)times > (1u << 24) / l->n)
        jfail(st, at, RS_JINJA_ERR_LIMIT, "list repetition too large");
    struct jlist *r = jlist_new(st, l->kind, (uint32_t)(l->n * times));
    for (int64_t i = 0; i < times; i++)
        for (uint32_t k = 0; k < l->n; k++)
            r->v[r->n++] = l->v[k];
    jstep(st, at, r->n / 16);
    return jv_list(r);
}

static int is_seq(jv v) { return v.t == JT_LIST && (v.u.l->kind == JL_LIST || v.u.l->kind == JL_TUPLE); }

static const char *const op_names[] = {"+", "-", "*", "/", "//", "%", "**"};

jv jeval_binop(jst *st, const jnode *at, int op, jv a, jv b)
{
    if (jv_is_num(a) && jv_is_num(b))
        return jnum_binop(st, at, op, a, b);
    if (op == OP_ADD) {
        if (a.t == JT_STR && b.t == JT_STR) {
            if (a.mk != b.mk) { /* Markup + str escapes the str, either side */
                jv r = concat2(st, at, jstr_escape(st, a), jstr_escape(st, b));
                r.mk = 1;
                return r;
            }
            jv r = concat2(st, at, a, b);
            r.mk = a.mk;
            return r;
        }
        if (is_seq(a) && is_seq(b) && a.u.l->kind == b.u.l->kind) {
            struct jlist *r = jlist_new(st, a.u.l->kind, a.u.l->n + b.u.l->n);
            if (a.u.l->n)
                memcpy(r->v, a.u.l->v, a.u.l->n * sizeof(jv));
            if (b.u.l->n)
                memcpy(r->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(jv));
            r->n = a.u.l->n + b.u.l->n;
            jstep(st, at, r->n / 16);
            return jv_list(r);
        }
    } else if (op == OP_MUL) {
        if ((a.t == JT_STR || is_seq(a)) && jv_is_intlike(b))
            return repeat(st, at, a, b.u.i);
        if ((b.t == JT_STR || is_seq(b)) && jv_is_intlike(a))
            return repeat(st, at, b, a.u.i);
    } else if (op == OP_MOD && a.t == JT_STR) {
        jv r = jstr_percent(st, at, a, b);
        return r;
    }
    bad_operands(st, at, op_names[op], a, b);
}

static int contains(jst *st, const jnode *at, jv needle, jv hay)
{
    switch (hay.t) {
    case JT_STR:
        if (needle.t != JT_STR) {
            if (needle.t == JT_UNDEF)
                jv_undef_fail(st, at, needle);
            jfail(st, at, RS_JINJA_ERR_TYPE, "'in <string>' requires string as left operand, not %s",
                  jv_type_name(needle));
        }
        jstep(st, at, hay.n / 64);
        return jstr_contains(hay.u.s, hay.n, needle.u.s, needle.n);
    case JT_DICT:
        if ((needle.t == JT_LIST && needle.u.l->kind != JL_TUPLE && needle.u.l->kind != JL_ITER) ||
            needle.t == JT_DICT)
            jfail(st, at, RS_JINJA_ERR_TYPE, "unhashable type: '%s'", jv_type_name(needle));
        return jdict_get(st, at, hay.u.d, needle) != NULL;
    case JT_LIST: {
        if (hay.u.l->kind == JL_VIEW && hay.u.l->tname && !strcmp(hay.u.l->tname, "dict_keys") &&
            needle.t == JT_DICT)
            jfail(st, at, RS_JINJA_ERR_TYPE, "unhashable type: 'dict'");
        uint32_t n;
        const struct jerrsave *pending;
        jv *items = jv_iter_items(st, at, hay, &n, &pending);
        for (uint32_t i = 0; i < n; i++) {
            jstep(st, at, 1);
            if (jv_eq(st, at, items[i], needle))
                return 1;
        }
        if (pending)
            jraise_saved(st, pending);
        return 0;
    }
    case JT_UNDEF:
        return 0;
    default:
        jfail(st, at, RS_JINJA_ERR_TYPE, "argument of type '%s' is not iterable", jv_type_name(hay));
    }
}

static const char *const cmp_names[] = {"==", "!=", "<", "<=", ">", ">="};

int jcompare(jst *st, const jnode *at, int op, jv a, jv b)
{
    switch (op) {
    case OP_EQ: return jv_eq(st, at, a, b);
    case OP_NE: return !jv_eq(st, at, a, b);
    case OP_IN: return contains(st, at, a, b);
    case OP_NOTIN: return !contains(st, at, a, b);
    default: {
        int c = jv_cmp(st, at, a, b, cmp_names[op - OP_EQ]);
        if (c == 2)
            return 0;
        return op == OP_LT ? c < 0 : op == OP_LE ? c <= 0 : op == OP_GT ? c > 0 : c >= 0;
    }
    }
}

static jv eval_cmp(jst *st, jscope *sc, const jnode *n)
{
    jv left = jeval(st, sc, n->a);
    for (uint32_t i = 0; i < n->n1; i++) {
        const jnode *o = n->l1[i];
        jv right = jeval(st, sc, o->a);
        if (!jcompare(st, o, o->op, left, right))
            return jv_bool(0);
        left = right;
    }
    return jv_bool(1);
}

static jv eval_concat(jst *st, jscope *sc, const jnode *n)
{
    struct jbuf b;
    jbuf_init(st, &b, 64);
    for (uint32_t i = 0; i < n->n1; i++) {
        jv v = jeval(st, sc, n->l1[i]);
        if (v.t == JT_STR)
            jbuf_put(st, &b, v.u.s, v.n);
        else
            jv_str_into(st, n->l1[i], &b, v);
    }
    jstep(st, n, b.n / 64);
    return jbuf_take(&b);
}

static jv eval_seq(jst *st, jscope *sc, const jnode *n)
{
    struct jlist *l = jlist_new(st, n->k == N_LIST ? JL_LIST : JL_TUPLE, n->n1);
    for (uint32_t i = 0; i < n->n1; i++)
        l->v[i] = jeval(st, sc, n->l1[i]);
    l->n = n->n1;
    return jv_list(l);
}

static jv eval_dict(jst *st, jscope *sc, const jnode *n)
{
    struct jdict *d = jdict_new(st, n->n1);
    for (uint32_t i = 0; i < n->n1; i++) {
        jv k = jeval(st, sc, n->l1[i]);
        jv v = jeval(st, sc, n->l2[i]);
        jdict_set(st, n->l1[i], d, k, v);
    }
    return jv_dict(d);
}

/* ---- calls ----------------------------------------------------------------------------- */

void jbind(jst *st, const jnode *at, const struct jbuiltin *b, jv *args, uint32_t nargs,
           struct jkwarg *kw, uint32_t nkw, struct jcall *c)
{
    memset(c, 0, sizeof(*c));
    uint32_t np = 0;
    while (b->params && b->params[np])
        np++;
    for (uint32_t i = 0; i < nargs; i++) {
        if (i < np) {
            c->a[i] = args[i];
        } else if (b->flags & JB_VARARGS) {
            c->rest = args + i;
            c->nrest = nargs - i;
            break;
        } else {
            jfail(st, at, RS_JINJA_ERR_TYPE, "%s() takes at most %u argument%s (%u given)",
                  b->name, np, np == 1 ? "" : "s", nargs);
        }
    }
    if (nkw && (b->flags & JB_POSONLY))
        jfail(st, at, RS_JINJA_ERR_TYPE, "%s() takes no keyword arguments", b->name);
    for (uint32_t k = 0; k < nkw; k++) {
        uint32_t i = 0;
        while (i < np && !(strlen(b->params[i]) == kw[k].len &&
                           memcmp(b->params[i], kw[k].name, kw[k].len) == 0))
            i++;
        if (i < np) {
            if (c->a[i].t != JT_MISSING)
                jfail(st, at, RS_JINJA_ERR_TYPE, "%s() got multiple values for argument '%s'",
                      b->name, b->params[i]);
            c->a[i] = kw[k].v;
        } else if (b->flags & JB_VARKW) {
            if (!c->kw)
                c->kw = ja_alloc(&st->ar, nkw * sizeof(struct jkwarg));
            c->kw[c->nkw++] = kw[k];
        } else {
            jfail(st, at, RS_JINJA_ERR_TYPE, "%s() got an unexpected keyword argument '%.*s'",
                  b->name, (int)kw[k].len, kw[k].name);
        }
    }
    for (uint32_t i = 0; i < b->nreq; i++)
        if (c->a[i].t == JT_MISSING)
            jfail(st, at, RS_JINJA_ERR_TYPE, "%s() missing required argument '%s'", b->name,
                  b->params[i]);
}

static jv call_builtin(jst *st, const jnode *at, const struct jbuiltin *b, jv self, jv *args,
                       uint32_t nargs, struct jkwarg *kw, uint32_t nkw)
{
    if (b->flags & JB_UNSUPPORTED)
        jfail(st, at, RS_JINJA_ERR_UNSUPPORTED, "'%s' is not supported by this renderer", b->name);
    struct jcall c;
    jbind(st, at, b, args, nargs, kw, nkw, &c);
    return b->fn(st, at, self, &c);
}

jv jcall_value(jst *st, const jnode *at, jv fn, jv *args, uint32_t nargs, struct jkwarg *kw,
               uint32_t nkw)
{
    switch (fn.t) {
    case JT_MACRO:
        return jmacro_call(st, at, fn.u.m, args, nargs, kw, nkw);
    case JT_FUNC:
        return call_builtin(st, at, fn.u.fn, jv_none(), args, nargs, kw, nkw);
    case JT_METHOD:
        return call_builtin(st, at, fn.u.me->m, fn.u.me->self, args, nargs, kw, nkw);
    case JT_LOOP:
        if (!(fn.u.lp->fornode->fl & NF_RECURSIVE))
            jfail(st, at, RS_JINJA_ERR_TYPE,
                  "The loop must be marked 'recursive' to be called recursively.");
        if (nargs != 1 || nkw)
            jfail(st, at, RS_JINJA_ERR_TYPE, "loop() takes exactly one iterable");
        return jloop_recurse(st, at, fn.u.lp, args[0]);
    case JT_OBJ:
        if (fn.u.o->kind == JO_JOINER && !nargs && !nkw) {
            if (!fn.u.o->used) {
                fn.u.o->used = 1;
                return JV_LIT("");
            }
            return fn.u.o->sep;
        }
        break;
    case JT_UNDEF:
        jv_undef_fail(st, at, fn);
    default:
        break;
    }
    jfail(st, at, RS_JINJA_ERR_TYPE, "'%s' object is not callable", jv_type_name(fn));
}

struct argv {
    jv *v;
    uint32_t n, cap;
    struct jkwarg *kw;
    uint32_t nkw, kwcap;
};

static void argv_push(jst *st, const jnode *at, struct argv *a, jv v)
{
    if (a->n == a->cap) {
        if (a->cap >= 1u << 16)
            jfail(st, at, RS_JINJA_ERR_LIMIT, "too many call arguments");
        uint32_t cap = a->cap * 2;
        jv *nv = ja_alloc(&st->ar, cap * sizeof(jv));
        memcpy(nv, a->v, a->n * sizeof(jv));
        a->v = nv;
        a->cap = cap;
    }
    a->v[a->n++] = v;
}

static void kw_push(jst *st, const jnode *at, struct argv *a, const char *name, size_t len, jv v)
{
    for (uint32_t i = 0; i < a->nkw; i++)
        if (a->kw[i].len == len && memcmp(a->kw[i].name, name, len) == 0)
            jfail(st, at, RS_JINJA_ERR_TYPE, "got multiple values for keyword argument '%.*s'",
                  (int)len, name);
    if (a->nkw == a->kwcap) {
        uint32_t cap = a->kwcap * 2;
        struct jkwarg *nk = ja_alloc(&st->ar, cap * sizeof(*nk));
        memcpy(nk, a->kw, a->nkw * sizeof(*nk));
        a->kw = nk;
        a->kwcap = cap;
    }
    a->kw[a->nkw].name = name;
    a->kw[a->nkw].len = (uint32_t)len;
    a->kw[a->nkw].v = v;
    a->nkw++;
}

/* Evaluates a call's arguments (l1, l2, *b, **c) of node n into a. */
static void eval_args(jst *st, jscope *sc, const jnode *n, struct argv *a)
{
    for (uint32_t i = 0; i < n->n1; i++)
        argv_push(st, n, a, jeval(st, sc, n->l1[i]));
    if (n->b) {
        jv dyn = jeval(st, sc, n->b);
        uint32_t cnt;
        const struct jerrsave *pending;
        jv *items = jv_iter_items(st, n->b, dyn, &cnt, &pending);
        if (pending)
            jraise_saved(st, pending);
        for (uint32_t i = 0; i < cnt; i++)
            argv_push(st, n, a, items[i]);
    }
    for (uint32_t i = 0; i < n->n2; i++) {
        const jnode *k = n->l2[i];
        kw_push(st, k, a, k->val.u.s, k->val.n, jeval(st, sc, k->a));
    }
    if (n->c) {
        jv dyn = jeval(st, sc, n->c);
        if (dyn.t != JT_DICT)
            jfail(st, n->c, RS_JINJA_ERR_TYPE, "argument after ** must be a mapping, not %s",
                  jv_type_name(dyn));
        for (uint32_t i = 0; i < dyn.u.d->n; i++) {
            jv k = dyn.u.d->kv[i].k;
            if (k.t != JT_STR)
                jfail(st, n->c, RS_JINJA_ERR_TYPE, "keywords must be strings");
            kw_push(st, n->c, a, k.u.s, k.n, dyn.u.d->kv[i].v);
        }
    }
}

#define ARGV_INIT(a, vbuf, kbuf)                                                              \
    struct argv a = {vbuf, 0, sizeof(vbuf) / sizeof(vbuf[0]), kbuf, 0, sizeof(kbuf) / sizeof(kbuf[0])}

jv jeval_call(jst *st, jscope *sc, const jnode *n, struct jmacro *caller)
{
    jv fn = jeval(st, sc, n->a);
    jv vbuf[8];
    struct jkwarg kbuf[8];
    ARGV_INIT(a, vbuf, kbuf);
    eval_args(st, sc, n, &a);
    if (caller) {
        jv cv = {0};
        cv.t = JT_MACRO;
        cv.u.m = caller;
        kw_push(st, n, &a, "caller", 6, cv);
    }
    return jcall_value(st, n, fn, a.v, a.n, a.kw, a.nkw);
}

/* ---- filters and tests ------------------------------------------------------------------ */

static jv apply_filter(jst *st, jscope *sc, const jnode *n, jv input)
{
    if (!n->fn)
        jfail(st, n, RS_JINJA_ERR_RUNTIME, "No filter named '%.*s' found.", (int)n->val.n,
              n->val.u.s);
    jv vbuf[8];
    struct jkwarg kbuf[8];
    ARGV_INIT(a, vbuf, kbuf);
    eval_args(st, sc, n, &a);
    return call_builtin(st, n, n->fn, input, a.v, a.n, a.kw, a.nkw);
}

jv jeval_filter_chain(jst *st, jscope *sc, const jnode *f, jv input)
{
    jv in = f->a ? jeval_filter_chain(st, sc, f->a, input) : input;
    return apply_filter(st, sc, f, in);
}

static jv eval_test(jst *st, jscope *sc, const jnode *n)
{
    jv input = jeval(st, sc, n->a);
    if (!n->fn)
        jfail(st, n, RS_JINJA_ERR_RUNTIME, "No test named '%.*s' found.", (int)n->val.n,
              n->val.u.s);
    jv vbuf[8];
    struct jkwarg kbuf[8];
    ARGV_INIT(a, vbuf, kbuf);
    eval_args(st, sc, n, &a);
    jv r = call_builtin(st, n, n->fn, input, a.v, a.n, a.kw, a.nkw);
    return jv_bool(jv_truthy(st, n, r));
}

jv jcall_filter_named(jst *st, const jnode *at, jv name, jv v, jv *args, uint32_t nargs,
                      struct jkwarg *kw, uint32_t nkw)
{
    const struct jbuiltin *f = name.t == JT_STR ? jinja_filter_find(name.u.s, name.n) : NULL;
    if (!f) {
        jv r = jv_repr(st, at, name);
        jfail(st, at, RS_JINJA_ERR_RUNTIME, "No filter named %.*s.", (int)r.n, r.u.s);
    }
    return call_builtin(st, at, f, v, args, nargs, kw, nkw);
}

int jcall_test_named(jst *st, const jnode *at, jv name, jv v, jv *args, uint32_t nargs,
                     struct jkwarg *kw, uint32_t nkw)
{
    const struct jbuiltin *f = name.t == JT_STR ? jinja_test_find(name.u.s, name.n) : NULL;
    if (!f) {
        jv r = jv_repr(st, at, name);
        jfail(st, at, RS_JINJA_ERR_RUNTIME, "No test named %.*s.", (int)r.n, r.u.s);
    }
    return jv_truthy(st, at, call_builtin(st, at, f, v, args, nargs, kw, nkw));
}

/* ---- macros -------------------------------------------------------------------------------- */

static int kw_take(struct jkwarg *kw, uint32_t nkw, uint8_t *used, const char *name, size_t len,
                   jv *out)
{
    for (uint32_t k = 0; k < nkw; k++)
        if (!used[k] && kw[k].len == len && memcmp(kw[k].name, name, len) == 0) {
            used[k] = 1;
            *out = kw[k].v;
            return 1;
        }
    return 0;
}

static const char *macro_name(const jnode *d)
{
    return d->k == N_MACRO ? d->val.u.s : "caller";
}

/* Binds a macro's parameters in scope s as Jinja's Macro.__call__ does. */
static void macro_bind(jst *st, const jnode *at, const jnode *d, jscope *s, jv *args,
                       uint32_t nargs, struct jkwarg *kw, uint32_t nkw)
{
    const rs_jinja *t = st->t;
    uint32_t np = d->n1;
    uint8_t ubuf[16], *used = nkw <= 16 ? ubuf : ja_alloc(&st->ar, nkw);
    memset(used, 0, nkw);
    int found_caller = 0;
    for (uint32_t i = 0; i < np; i++) {
        uint32_t sym = d->l1[i]->sym;
        jv v = jv_missing();
        if (i < nargs)
            v = args[i];
        else
            kw_take(kw, nkw, used, t->sym_name[sym], t->sym_len[sym], &v);
        if (sym == SYM_CALLER)
            found_caller = 1;
        jscope_set(st, s, sym, v);
    }
    if ((d->fl & NF_CALLER) && !found_caller) {
        jv c;
        if (!kw_take(kw, nkw, used, "caller", 6, &c))
            c = jv_undef_hint(st, "No caller defined");
        jscope_set(st, s, SYM_CALLER, c);
    }
    struct jdict *extra = (d->fl & NF_KWARGS) ? jdict_new(st, 0) : NULL;
    for (uint32_t k = 0; k < nkw; k++) {
        if (used[k])
            continue;
        if (extra) {
            jdict_set(st, at, extra, jv_str(kw[k].name, kw[k].len), kw[k].v);
            continue;
        }
        if (kw[k].len == 6 && !memcmp(kw[k].name, "caller", 6))
            jfail(st, at, RS_JINJA_ERR_TYPE,
                  "macro '%s' was invoked with two values for the special caller argument.",
                  macro_name(d));
        jfail(st, at, RS_JINJA_ERR_TYPE, "macro '%s' takes no keyword argument '%.*s'",
              macro_name(d), (int)kw[k].len, kw[k].name);
    }
    if (extra)
        jscope_set(st, s, SYM_KWARGS, jv_dict(extra));
    if (d->fl & NF_VARARGS) {
        struct jlist *va = jlist_new(st, JL_TUPLE, nargs > np ? nargs - np : 0);
        for (uint32_t i = np; i < nargs; i++)
            va->v[va->n++] = args[i];
        jscope_set(st, s, SYM_VARARGS, jv_list(va));
    } else if (nargs > np) {
        jfail(st, at, RS_JINJA_ERR_TYPE, "macro '%s' takes not more than %u argument(s)",
              macro_name(d), np);
    }
    /* defaults, in order, in the macro's own scope */
    uint32_t first_default = np - d->n2;
    for (uint32_t i = 0; i < np; i++) {
        struct jvar *var = NULL;
        for (uint32_t k = 0; k < s->n; k++)
            if (s->v[k].sym == d->l1[i]->sym)
                var = &s->v[k];
        if (var->v.t != JT_MISSING)
            continue;
        if (i >= first_default) {
            jv v = jeval(st, s, d->l2[i - first_default]);
            for (uint32_t k = 0; k < s->n; k++)
                if (s->v[k].sym == d->l1[i]->sym)
                    s->v[k].v = v;
        } else {
            char *hint = ja_alloc(&st->ar, 64 + t->sym_len[d->l1[i]->sym]);
            snprintf(hint, 64 + t->sym_len[d->l1[i]->sym], "parameter '%s' was not provided",
                     t->sym_name[d->l1[i]->sym]);
            var->v = jv_undef_hint(st, hint);
        }
    }
}

jv jmacro_call(jst *st, const jnode *at, struct jmacro *m, jv *args, uint32_t nargs,
               struct jkwarg *kw, uint32_t nkw)
{
    if (++st->depth > st->max_depth)
        jfail(st, at, RS_JINJA_ERR_LIMIT, "macro calls nested deeper than %u (runaway recursion?)",
              st->max_depth);
    const jnode *d = m->def;
    jscope *s = jscope_new(st, m->closure);
    macro_bind(st, at, d, s, args, nargs, kw, nkw);
    struct jbuf buf, *prev = st->out;
    jbuf_init(st, &buf, 256);
    st->out = &buf;
    jexec_list(st, s, d->l3, d->n3);
    st->out = prev;
    st->depth--;
    return jbuf_take(&buf);
}

/* ---- the evaluator ------------------------------------------------------------------------- */

jv jeval(jst *st, jscope *sc, const jnode *n)
{
    jstep(st, n, 1);
    switch (n->k) {
    case N_CONST:
        return n->val;
    case N_NAME:
        return jscope_lookup(st, sc, n->sym, n);
    case N_ATTR:
        return jget_attr(st, n, jeval(st, sc, n->a), n->val.u.s, n->val.n);
    case N_ITEM: {
        jv obj = jeval(st, sc, n->a);
        return jget_item(st, n, obj, jeval(st, sc, n->b));
    }
    case N_SLICE:
        return eval_slice(st, sc, n);
    case N_BIN: {
        jv a = jeval(st, sc, n->a);
        return jeval_binop(st, n, n->op, a, jeval(st, sc, n->b));
    }
    case N_NEG:
    case N_POS: {
        jv a = jeval(st, sc, n->a);
        if (!jv_is_num(a)) {
            if (a.t == JT_UNDEF)
                jv_undef_fail(st, n, a);
            jfail(st, n, RS_JINJA_ERR_TYPE, "bad operand type for unary %c: '%s'",
                  n->k == N_NEG ? '-' : '+', jv_type_name(a));
        }
        if (n->k == N_POS)
            return a.t == JT_BOOL ? jv_int(a.u.i) : a;
        return jnum_neg(st, n, a);
    }
    case N_NOT:
        return jv_bool(!jv_truthy(st, n, jeval(st, sc, n->a)));
    case N_AND: {
        jv a = jeval(st, sc, n->a);
        return jv_truthy(st, n, a) ? jeval(st, sc, n->b) : a;
    }
    case N_OR: {
        jv a = jeval(st, sc, n->a);
        return jv_truthy(st, n, a) ? a : jeval(st, sc, n->b);
    }
    case N_CMP:
        return eval_cmp(st, sc, n);
    case N_COND:
        if (jv_truthy(st, n, jeval(st, sc, n->a)))
            return jeval(st, sc, n->b);
        if (n->c)
            return jeval(st, sc, n->c);
        return jv_undef_hint(st, "the inline if-expression evaluated to false and no else "
                                 "section was defined.");
    case N_LIST:
    case N_TUPLE:
        return eval_seq(st, sc, n);
    case N_DICT:
        return eval_dict(st, sc, n);
    case N_CONCAT:
        return eval_concat(st, sc, n);
    case N_CALL:
        return jeval_call(st, sc, n, NULL);
    case N_FILTER:
        return apply_filter(st, sc, n, jeval(st, sc, n->a));
    case N_TEST:
        return eval_test(st, sc, n);
    default:
        jfail(st, n, RS_JINJA_ERR_SYNTAX, "not an expression");
    }
}

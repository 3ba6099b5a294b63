/* SPDX-License-Identifier: MIT */
/*
 * Statement execution for the chat-template renderer, with Jinja2's scoping:
 * a for loop gives each iteration a fresh scope over the enclosing one (a
 * plain {% set %} inside does not outlive the iteration; namespace attributes
 * do), macros, call blocks, set blocks, filter blocks and with blocks get a
 * scope of their own, if does not. The for loop filters with its inline if
 * before iterating (loop.length counts the kept items), runs its else when
 * nothing was iterated, and offers loop.index/index0/revindex/revindex0/
 * first/last/length/depth/depth0/previtem/nextitem/cycle()/changed() and
 * loop(...) in recursive loops. Also the error plumbing: jfail records the
 * error and longjmps to the render entry (or a jtry, for generators).
 */
#include <stdio.h>
#include <string.h>

#include "common/jinja_impl.h"

/* ---- errors -------------------------------------------------------------------------- */

static void set_pos(jst *st, const jnode *at)
{
    if (!at)
        at = st->cur_stmt;
    st->eline = at ? at->line : 0;
    st->ecol = at ? at->col : 0;
}

_Noreturn void jfail(jst *st, const jnode *at, enum rs_jinja_errkind kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(st->ebuf, sizeof(st->ebuf), fmt, ap);
    va_end(ap);
    st->ekind = kind;
    st->emsg = st->ebuf;
    st->emsg_len = k < 0 ? 0 : (size_t)k < sizeof(st->ebuf) ? (size_t)k : sizeof(st->ebuf) - 1;
    set_pos(st, at);
    longjmp(*st->jb, 1);
}

_Noreturn void jfail_str(jst *st, const jnode *at, enum rs_jinja_errkind kind, const char *msg,
                         size_t len)
{
    st->ekind = kind;
    st->emsg = msg;
    st->emsg_len = len;
    set_pos(st, at);
    longjmp(*st->jb, 1);
}

struct jerrsave *jerr_capture(jst *st)
{
    struct jerrsave *e = ja_alloc(&st->ar, sizeof(*e) + st->emsg_len + 1);
    e->kind = st->ekind;
    e->line = st->eline;
    e->col = st->ecol;
    e->msg = (char *)(e + 1);
    memcpy(e->msg, st->emsg, st->emsg_len);
    e->msg[st->emsg_len] = 0;
    e->len = st->emsg_len;
    return e;
}

_Noreturn void jraise_saved(jst *st, const struct jerrsave *e)
{
    st->ekind = e->kind;
    st->emsg = e->msg;
    st->emsg_len = e->len;
    st->eline = e->line;
    st->ecol = e->col;
    longjmp(*st->jb, 1);
}

int jtry(jst *st, void (*fn)(jst *st, void *arg), void *arg, struct jerrsave **saved)
{
    jmp_buf jb;
    jmp_buf *prev = st->jb;
    unsigned depth = st->depth, vdepth = st->vdepth;
    struct jbuf *out = st->out;
    const jnode *cur = st->cur_stmt;
    st->jb = &jb;
    if (setjmp(jb) == 0) {
        fn(st, arg);
        st->jb = prev;
        return 0;
    }
    st->jb = prev;
    st->depth = depth;
    st->vdepth = vdepth;
    st->out = out;
    st->cur_stmt = cur;
    if (st->ekind == RS_JINJA_ERR_LIMIT)
        longjmp(*st->jb, 1); /* bounds are not deferred */
    *saved = jerr_capture(st);
    return 1;
}

/* ---- assignment ------------------------------------------------------------------------ */

static void assign(jst *st, jscope *sc, const jnode *target, jv v);

static void unpack(jst *st, jscope *sc, const jnode *target, jv v)
{
    uint32_t n;
    const struct jerrsave *pending;
    jv *items = jv_iter_items(st, target, v, &n, &pending);
    if (pending)
        jraise_saved(st, pending);
    if (n < target->n1)
        jfail(st, target, RS_JINJA_ERR_VALUE, "not enough values to unpack (expected %u, got %u)",
              target->n1, n);
    if (n > target->n1)
        jfail(st, target, RS_JINJA_ERR_VALUE, "too many values to unpack (expected %u)",
              target->n1);
    for (uint32_t i = 0; i < n; i++)
        assign(st, sc, target->l1[i], items[i]);
}

/* The namespace an ns.attr target names; Jinja checks it before evaluating the value. */
static struct jns *ns_target(jst *st, jscope *sc, const jnode *target)
{
    jv ns = jscope_lookup(st, sc, target->sym, target);
    if (ns.t != JT_NS)
        jfail(st, target, RS_JINJA_ERR_RUNTIME, "cannot assign attribute on non-namespace object");
    return ns.u.ns;
}

static void assign(jst *st, jscope *sc, const jnode *target, jv v)
{
    if (target->k == N_NAME) {
        jscope_set(st, sc, target->sym, v);
    } else if (target->k == N_TUPLE) {
        unpack(st, sc, target, v);
    } else { /* N_NSREF */
        jdict_set(st, target, &ns_target(st, sc, target)->d, target->val, v);
    }
}

/* ---- loops ------------------------------------------------------------------------------- */

static jv cycle_impl(jst *st, const jnode *at, jv self, struct jcall *c)
{
    struct jloop *lp = self.u.lp;
    if (!c->nrest)
        jfail(st, at, RS_JINJA_ERR_TYPE, "no items for cycling given");
    return c->rest[lp->i % c->nrest];
}

static jv changed_impl(jst *st, const jnode *at, jv self, struct jcall *c)
{
    struct jloop *lp = self.u.lp;
    struct jlist *l = jlist_new(st, JL_TUPLE, c->nrest);
    for (uint32_t i = 0; i < c->nrest; i++)
        l->v[l->n++] = c->rest[i];
    jv now = jv_list(l);
    if (lp->last_changed.t != JT_MISSING && jv_eq(st, at, lp->last_changed, now))
        return jv_bool(0);
    lp->last_changed = now;
    return jv_bool(1);
}

static const struct jbuiltin cycle_b = {"cycle", NULL, 0, JB_VARARGS, cycle_impl};
static const struct jbuiltin changed_b = {"changed", NULL, 0, JB_VARARGS, changed_impl};

static int name_is(const char *s, size_t n, const char *w)
{
    return strlen(w) == n && memcmp(s, w, n) == 0;
}

jv jloop_attr(jst *st, const jnode *at, struct jloop *lp, const char *name, size_t n, int *found)
{
    (void)at;
    *found = 1;
    int64_t i = lp->i, len = lp->n;
    if (name_is(name, n, "index"))
        return jv_int(i + 1);
    if (name_is(name, n, "index0"))
        return jv_int(i);
    if (name_is(name, n, "revindex"))
        return jv_int(len - i);
    if (name_is(name, n, "revindex0"))
        return jv_int(len - i - 1);
    if (name_is(name, n, "first"))
        return jv_bool(i == 0);
    if (name_is(name, n, "last"))
        return jv_bool(i == len - 1);
    if (name_is(name, n, "length"))
        return jv_int(len);
    if (name_is(name, n, "depth"))
        return jv_int(lp->depth0 + 1);
    if (name_is(name, n, "depth0"))
        return jv_int(lp->depth0);
    if (name_is(name, n, "previtem"))
        return i > 0 ? lp->items[i - 1] : jv_undef_hint(st, "there is no previous item");
    if (name_is(name, n, "nextitem"))
        return i + 1 < len ? lp->items[i + 1] : jv_undef_hint(st, "there is no next item");
    if (name_is(name, n, "cycle") || name_is(name, n, "changed")) {
        struct jmethod *me = jalloc(st, sizeof(*me));
        me->self.t = JT_LOOP;
        me->self.u.lp = lp;
        me->m = name[1] == 'y' ? &cycle_b : &changed_b;
        jv v = {0};
        v.t = JT_METHOD;
        v.u.me = me;
        return v;
    }
    *found = 0;
    return jv_undef();
}

/* Items of `it` kept by the loop's inline if (evaluated with the target bound, before the loop). */
static jv *loop_filter(jst *st, jscope *sc, const jnode *n, jv *items, uint32_t *cnt)
{
    if (!n->c)
        return items;
    jv *kept = ja_alloc(&st->ar, (*cnt + 1) * sizeof(jv));
    uint32_t k = 0;
    jscope *ts = jscope_new(st, sc);
    for (uint32_t i = 0; i < *cnt; i++) {
        jstep(st, n, 1);
        ts->n = 0;
        assign(st, ts, n->a, items[i]);
        if (jv_truthy(st, n->c, jeval(st, ts, n->c)))
            kept[k++] = items[i];
    }
    *cnt = k;
    return kept;
}

static int run_loop(jst *st, jscope *sc, const jnode *n, jv iterable, uint32_t depth0)
{
    uint32_t cnt;
    const struct jerrsave *pending;
    jv *items = jv_iter_items(st, n->b, iterable, &cnt, &pending);
    items = loop_filter(st, sc, n, items, &cnt);
    if (cnt == 0) {
        if (pending)
            jraise_saved(st, pending);
        if (!n->n2)
            return 0;
        return jexec_list(st, jscope_new(st, sc), n->l2, n->n2);
    }
    struct jloop *lp = jalloc(st, sizeof(*lp));
    lp->items = items;
    lp->n = cnt;
    lp->depth0 = depth0;
    lp->fornode = n;
    lp->scope = sc;
    jv lv = {0};
    lv.t = JT_LOOP;
    lv.u.lp = lp;
    jscope *ls = jscope_new(st, sc);
    for (uint32_t i = 0; i < cnt; i++) {
        jstep(st, n, 1);
        lp->i = i;
        ls->n = 0;
        jscope_set(st, ls, SYM_LOOP, lv);
        assign(st, ls, n->a, items[i]);
        int r = jexec_list(st, ls, n->l1, n->n1);
        if (r == 1)
            return 0;
    }
    if (pending)
        jraise_saved(st, pending);
    return 0;
}

jv jloop_recurse(jst *st, const jnode *at, struct jloop *lp, jv iterable)
{
    if (++st->depth > st->max_depth)
        jfail(st, at, RS_JINJA_ERR_LIMIT, "recursive loop nested deeper than %u", st->max_depth);
    struct jbuf buf, *prev = st->out;
    jbuf_init(st, &buf, 256);
    st->out = &buf;
    run_loop(st, lp->scope, lp->fornode, iterable, lp->depth0 + 1);
    st->out = prev;
    st->depth--;
    return jbuf_take(&buf);
}

/* ---- statements ------------------------------------------------------------------------------ */

static void print_value(jst *st, const jnode *at, jv v)
{
    if (v.t == JT_STR)
        jbuf_put(st, st->out, v.u.s, v.n);
    else
        jv_str_into(st, at, st->out, v);
}

/* Runs body into a fresh buffer in a child scope; returns the text, or sets *ctl. */
static jv capture(jst *st, jscope *sc, jnode *const *body, uint32_t n, int *ctl)
{
    struct jbuf buf, *prev = st->out;
    jbuf_init(st, &buf, 128);
    st->out = &buf;
    *ctl = jexec_list(st, jscope_new(st, sc), body, n);
    st->out = prev;
    return jbuf_take(&buf);
}

static struct jmacro *make_macro(jst *st, const jnode *def, jscope *sc)
{
    struct jmacro *m = jalloc(st, sizeof(*m));
    m->def = def;
    m->closure = sc;
    return m;
}

static int exec_stmt(jst *st, jscope *sc, const jnode *n)
{
    int ctl;
    jv v;
    st->cur_stmt = n;
    switch (n->k) {
    case N_DATA:
        jbuf_put(st, st->out, n->val.u.s, n->val.n);
        return 0;
    case N_PRINT:
        print_value(st, n, jeval(st, sc, n->a));
        return 0;
    case N_IF:
        jstep(st, n, 1);
        if (jv_truthy(st, n, jeval(st, sc, n->a)))
            return jexec_list(st, sc, n->l1, n->n1);
        return jexec_list(st, sc, n->l2, n->n2);
    case N_FOR:
        return run_loop(st, sc, n, jeval(st, sc, n->b), 0);
    case N_SET:
        if (n->a->k == N_NSREF) {
            struct jns *ns = ns_target(st, sc, n->a);
            jdict_set(st, n->a, &ns->d, n->a->val, jeval(st, sc, n->b));
        } else {
            assign(st, sc, n->a, jeval(st, sc, n->b));
        }
        return 0;
    case N_SETBLOCK: {
        jscope *bs = jscope_new(st, sc);
        v = capture(st, bs, n->l1, n->n1, &ctl);
        if (ctl)
            return ctl;
        struct jns *ns = n->a->k == N_NSREF ? ns_target(st, sc, n->a) : NULL;
        if (n->b)
            v = jeval_filter_chain(st, bs, n->b, v);
        if (ns)
            jdict_set(st, n->a, &ns->d, n->a->val, v);
        else
            assign(st, sc, n->a, v);
        return 0;
    }
    case N_MACRO: {
        jv m = {0};
        m.t = JT_MACRO;
        m.u.m = make_macro(st, n, sc);
        jscope_set(st, sc, n->sym, m);
        return 0;
    }
    case N_CALLBLOCK:
        print_value(st, n, jeval_call(st, sc, n->a, make_macro(st, n, sc)));
        return 0;
    case N_FILTERBLOCK: {
        jscope *fs = jscope_new(st, sc);
        v = capture(st, fs, n->l1, n->n1, &ctl);
        if (ctl)
            return ctl;
        print_value(st, n, jeval_filter_chain(st, fs, n->a, v));
        return 0;
    }
    case N_WITH: {
        jscope *ws = jscope_new(st, sc);
        jv vals[16], *vp = n->n2 <= 16 ? vals : ja_alloc(&st->ar, n->n2 * sizeof(jv));
        for (uint32_t i = 0; i < n->n2; i++)
            vp[i] = jeval(st, sc, n->l2[i]);
        for (uint32_t i = 0; i < n->n1; i++)
            assign(st, ws, n->l1[i], vp[i]);
        return jexec_list(st, ws, n->l3, n->n3);
    }
    case N_BREAK:
        return 1;
    case N_CONTINUE:
        return 2;
    default:
        jfail(st, n, RS_JINJA_ERR_SYNTAX, "not a statement");
    }
}

int jexec_list(jst *st, jscope *sc, jnode *const *body, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        int r = exec_stmt(st, sc, body[i]);
        if (r)
            return r;
    }
    return 0;
}

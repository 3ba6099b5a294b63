/* SPDX-License-Identifier: MIT */
/*
 * Jinja2 3.1's builtin filters for the chat-template renderer, as they behave
 * with autoescape off, plus transformers' tojson (json.dumps). The filters
 * that are generator functions in Jinja (map, select, reject, selectattr,
 * rejectattr, items, unique, batch, slice) return one-shot iterators here too:
 * printing one or passing it to tojson fails as in Python, |list or a loop
 * consumes it, and an error while producing its items is raised only when it
 * is consumed. Leaves out the filters whose output depends on randomness,
 * HTML parsing or locale (random, urlize, striptags, filesizeformat, pprint,
 * wordwrap, xmlattr, urlencode, groupby): using one is a clear error.
 */
#include <math.h>
#include <string.h>

#include "common/jinja_impl.h"

#define P(...) ((const char *const[]){__VA_ARGS__, NULL})

static int is_missing(jv v) { return v.t == JT_MISSING; }

static jv soft_str(jst *st, const jnode *at, jv v) { return jv_to_str(st, at, v); }

int64_t jarg_int(jst *st, const jnode *at, jv v, const char *what)
{
    if (jv_is_intlike(v))
        return v.u.i;
    if (v.t == JT_UNDEF)
        jv_undef_fail(st, at, v);
    jfail(st, at, RS_JINJA_ERR_TYPE, "%s must be an integer, not '%s'", what, jv_type_name(v));
}

int jarg_bool(jst *st, const jnode *at, jv v, int dflt)
{
    return is_missing(v) ? dflt : jv_truthy(st, at, v);
}

static jv ignore_case(jst *st, jv v) { return v.t == JT_STR ? jstr_lower(st, v) : v; }

/* Jinja's make_attrgetter: attribute "a.b.0" looked up item-first on each part. */
jv jattr_path(jst *st, const jnode *at, jv item, jv attr, jv dflt)
{
    int have_default = !is_missing(dflt) && dflt.t != JT_NONE;
    if (is_missing(attr) || attr.t == JT_NONE)
        return item;
    if (attr.t != JT_STR) {
        item = jget_item(st, at, item, attr);
        return have_default && item.t == JT_UNDEF ? dflt : item;
    }
    const char *s = attr.u.s;
    size_t n = attr.n, a = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != '.')
            continue;
        jv part = jv_str(s + a, i - a);
        int digits = i > a;
        for (size_t k = a; k < i; k++)
            digits &= s[k] >= '0' && s[k] <= '9';
        if (digits) {
            int64_t v;
            if (jnum_parse_int(s + a, i - a, 10, &v) == 1)
                part = jv_int(v);
        }
        item = jget_item(st, at, item, part);
        if (have_default && item.t == JT_UNDEF)
            item = dflt;
        a = i + 1;
    }
    return item;
}

/* Items of anything iterable, raising a consumed generator's pending error. */
static jv *items_of(jst *st, const jnode *at, jv v, uint32_t *n)
{
    const struct jerrsave *pending;
    jv *items = jv_iter_items(st, at, v, n, &pending);
    if (pending)
        jraise_saved(st, pending);
    return items;
}

/* ---- sorting (stable, Python's < only) ---------------------------------------------------- */

struct keyed {
    jv key, item;
};

static void sort_keyed(jst *st, const jnode *at, struct keyed *a, uint32_t n, int rev)
{
    if (n < 2)
        return;
    struct keyed *tmp = ja_alloc(&st->ar, n * sizeof(*tmp));
    jstep(st, at, n);
    for (uint32_t w = 1; w < n; w *= 2) {
        for (uint32_t lo = 0; lo < n; lo += 2 * w) {
            uint32_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            uint32_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int c = rev ? jv_cmp(st, at, a[i].key, a[j].key, "<")
                            : jv_cmp(st, at, a[j].key, a[i].key, "<");
                tmp[k++] = c == -1 ? a[j++] : a[i++];
            }
            while (i < mid)
                tmp[k++] = a[i++];
            while (j < hi)
                tmp[k++] = a[j++];
        }
        memcpy(a, tmp, n * sizeof(*tmp));
    }
}

static jv f_sort(jst *st, const jnode *at, jv v, struct jcall *c)
{
    uint32_t n;
    jv *items = items_of(st, at, v, &n);
    int rev = jarg_bool(st, at, c->a[0], 0), cs = jarg_bool(st, at, c->a[1], 0);
    struct keyed *k = ja_alloc(&st->ar, (n + 1) * sizeof(*k));
    for (uint32_t i = 0; i < n; i++) {
        k[i].item = items[i];
        k[i].key = jattr_path(st, at, items[i], c->a[2], jv_missing());
        if (!cs)
            k[i].key = ignore_case(st, k[i].key);
    }
    sort_keyed(st, at, k, n, rev);
    struct jlist *l = jlist_new(st, JL_LIST, n);
    for (uint32_t i = 0; i < n; i++)
        l->v[i] = k[i].item;
    l->n = n;
    return jv_list(l);
}

static jv pair(jst *st, jv a, jv b)
{
    struct jlist *t = jlist_new(st, JL_TUPLE, 2);
    t->v[0] = a;
    t->v[1] = b;
    t->n = 2;
    return jv_list(t);
}

static jv f_dictsort(jst *st, const jnode *at, jv v, struct jcall *c)
{
    int cs = jarg_bool(st, at, c->a[0], 0), rev = jarg_bool(st, at, c->a[2], 0);
    int pos = 0;
    if (!is_missing(c->a[1])) {
        jv by = c->a[1];
        if (by.t == JT_STR && by.n == 5 && !memcmp(by.u.s, "value", 5))
            pos = 1;
        else if (!(by.t == JT_STR && by.n == 3 && !memcmp(by.u.s, "key", 3)))
            jfail(st, at, RS_JINJA_ERR_RUNTIME, "You can only sort by either \"key\" or \"value\"");
    }
    if (v.t != JT_DICT)
        jfail(st, at, RS_JINJA_ERR_UNDEFINED, "'%s object' has no attribute 'items'",
              jv_type_name(v));
    uint32_t n = v.u.d->n;
    struct keyed *k = ja_alloc(&st->ar, (n + 1) * sizeof(*k));
    for (uint32_t i = 0; i < n; i++) {
        k[i].item = pair(st, v.u.d->kv[i].k, v.u.d->kv[i].v);
        k[i].key = pos ? v.u.d->kv[i].v : v.u.d->kv[i].k;
        if (!cs)
            k[i].key = ignore_case(st, k[i].key);
    }
    sort_keyed(st, at, k, n, rev);
    struct jlist *l = jlist_new(st, JL_LIST, n);
    for (uint32_t i = 0; i < n; i++)
        l->v[i] = k[i].item;
    l->n = n;
    return jv_list(l);
}

static jv min_max(jst *st, const jnode *at, jv v, struct jcall *c, int want_max)
{
    uint32_t n;
    jv *items = items_of(st, at, v, &n);
    if (!n)
        return jv_undef_hint(st, "No aggregated item, sequence was empty.");
    int cs = jarg_bool(st, at, c->a[0], 0);
    jv best = items[0], bkey = jattr_path(st, at, items[0], c->a[1], jv_missing());
    if (!cs)
        bkey = ignore_case(st, bkey);
    for (uint32_t i = 1; i < n; i++) {
        jv key = jattr_path(st, at, items[i], c->a[1], jv_missing());
        if (!cs)
            key = ignore_case(st, key);
        int r = want_max ? jv_cmp(st, at, bkey, key, "<") : jv_cmp(st, at, key, bkey, "<");
        if (r == -1) {
            best = items[i];
            bkey = key;
        }
    }
    return best;
}

static jv f_max(jst *st, const jnode *at, jv v, struct jcall *c) { return min_max(st, at, v, c, 1); }
static jv f_min(jst *st, const jnode *at, jv v, struct jcall *c) { return min_max(st, at, v, c, 0); }

/* ---- generators ------------------------------------------------------------------------------ */

enum gen_kind { G_MAP, G_SELECT, G_REJECT, G_SELECTATTR, G_REJECTATTR, G_ITEMS, G_UNIQUE, G_BATCH,
                G_SLICE };

struct genjob {
    int kind;
    const jnode *at;
    jv input;
    struct jcall *c;
    struct jlist *out;
};

static void gen_map(jst *st, struct genjob *g, jv *items, uint32_t n)
{
    struct jcall *c = g->c;
    jv attr = jv_missing(), dflt = jv_missing();
    int by_attr = 0;
    for (uint32_t k = 0; k < c->nkw; k++) {
        if (c->kw[k].len == 9 && !memcmp(c->kw[k].name, "attribute", 9))
            attr = c->kw[k].v;
        else if (c->kw[k].len == 7 && !memcmp(c->kw[k].name, "default", 7))
            dflt = c->kw[k].v;
    }
    if (!c->nrest && !is_missing(attr)) {
        by_attr = 1;
        for (uint32_t k = 0; k < c->nkw; k++)
            if (!(c->kw[k].len == 9 && !memcmp(c->kw[k].name, "attribute", 9)) &&
                !(c->kw[k].len == 7 && !memcmp(c->kw[k].name, "default", 7)))
                jfail(st, g->at, RS_JINJA_ERR_RUNTIME, "Unexpected keyword argument '%.*s'",
                      (int)c->kw[k].len, c->kw[k].name);
    } else if (!c->nrest) {
        jfail(st, g->at, RS_JINJA_ERR_RUNTIME, "map requires a filter argument");
    }
    for (uint32_t i = 0; i < n; i++) {
        jstep(st, g->at, 1);
        jv r = by_attr ? jattr_path(st, g->at, items[i], attr, dflt)
                       : jcall_filter_named(st, g->at, c->rest[0], items[i], c->rest + 1,
                                            c->nrest - 1, c->kw, c->nkw);
        jlist_push(st, g->out, r);
    }
}

static void gen_select(jst *st, struct genjob *g, jv *items, uint32_t n)
{
    struct jcall *c = g->c;
    int attr = g->kind == G_SELECTATTR || g->kind == G_REJECTATTR;
    int reject = g->kind == G_REJECT || g->kind == G_REJECTATTR;
    uint32_t off = attr ? 1 : 0;
    if (attr && !c->nrest)
        jfail(st, g->at, RS_JINJA_ERR_RUNTIME, "Missing parameter for attribute name");
    for (uint32_t i = 0; i < n; i++) {
        jstep(st, g->at, 1);
        jv x = attr ? jattr_path(st, g->at, items[i], c->rest[0], jv_missing()) : items[i];
        int ok = c->nrest > off ? jcall_test_named(st, g->at, c->rest[off], x, c->rest + off + 1,
                                                   c->nrest - off - 1, c->kw, c->nkw)
                                : jv_truthy(st, g->at, x);
        if (ok != reject)
            jlist_push(st, g->out, items[i]);
    }
}

static void gen_unique(jst *st, struct genjob *g, jv *items, uint32_t n)
{
    struct jcall *c = g->c;
    int cs = jarg_bool(st, g->at, c->a[0], 0);
    struct jdict *seen = jdict_new(st, 0);
    for (uint32_t i = 0; i < n; i++) {
        jstep(st, g->at, 1);
        jv key = jattr_path(st, g->at, items[i], c->a[1], jv_missing());
        if (!cs)
            key = ignore_case(st, key);
        if (!jdict_get(st, g->at, seen, key)) {
            jdict_set(st, g->at, seen, key, jv_none());
            jlist_push(st, g->out, items[i]);
        }
    }
}

static void gen_batch(jst *st, struct genjob *g, jv *items, uint32_t n)
{
    int64_t count = jarg_int(st, g->at, g->c->a[0], "linecount");
    jv fill = g->c->a[1];
    struct jlist *cur = NULL;
    if (count <= 0 && n)
        jfail(st, g->at, RS_JINJA_ERR_VALUE, "batch size must be positive");
    for (uint32_t i = 0; i < n; i++) {
        if (!cur || cur->n == count) {
            cur = jlist_new(st, JL_LIST, 0);
            jlist_push(st, g->out, jv_list(cur));
        }
        jlist_push(st, cur, items[i]);
    }
    if (cur && cur->n < count && !is_missing(fill) && fill.t != JT_NONE)
        while (cur->n < count)
            jlist_push(st, cur, fill);
}

static void gen_slice(jst *st, struct genjob *g, jv *items, uint32_t n)
{
    int64_t slices = jarg_int(st, g->at, g->c->a[0], "slices");
    jv fill = g->c->a[1];
    if (slices <= 0)
        jfail(st, g->at, RS_JINJA_ERR_VALUE, "integer division or modulo by zero");
    if (slices > (1 << 20))
        jfail(st, g->at, RS_JINJA_ERR_LIMIT, "too many slices");
    jstep(st, g->at, (uint64_t)slices);
    int64_t per = n / slices, extra = n % slices, offset = 0;
    for (int64_t s = 0; s < slices; s++) {
        int64_t start = offset + s * per;
        if (s < extra)
            offset++;
        int64_t end = offset + (s + 1) * per;
        struct jlist *l = jlist_new(st, JL_LIST, (uint32_t)(end - start + 1));
        for (int64_t i = start; i < end; i++)
            l->v[l->n++] = items[i];
        if (!is_missing(fill) && fill.t != JT_NONE && s >= extra)
            jlist_push(st, l, fill);
        jlist_push(st, g->out, jv_list(l));
    }
}

static void gen_body(jst *st, void *arg)
{
    struct genjob *g = arg;
    jv v = g->input;
    if (g->kind == G_ITEMS) {
        if (v.t == JT_UNDEF)
            return;
        if (v.t != JT_DICT)
            jfail(st, g->at, RS_JINJA_ERR_TYPE, "Can only get item pairs from a mapping.");
        for (uint32_t i = 0; i < v.u.d->n; i++)
            jlist_push(st, g->out, pair(st, v.u.d->kv[i].k, v.u.d->kv[i].v));
        return;
    }
    int needs_truthy = g->kind <= G_REJECTATTR;
    if (needs_truthy && !jv_truthy(st, g->at, v))
        return;
    uint32_t n;
    jv *items = items_of(st, g->at, v, &n);
    switch (g->kind) {
    case G_MAP: gen_map(st, g, items, n); break;
    case G_UNIQUE: gen_unique(st, g, items, n); break;
    case G_BATCH: gen_batch(st, g, items, n); break;
    case G_SLICE: gen_slice(st, g, items, n); break;
    default: gen_select(st, g, items, n); break;
    }
}

static jv run_gen(jst *st, const jnode *at, int kind, jv input, struct jcall *c, const char *tname)
{
    struct jlist *l = jlist_new(st, JL_ITER, 0);
    l->tname = tname;
    struct genjob g = {kind, at, input, c, l};
    struct jerrsave *e = NULL;
    if (jtry(st, gen_body, &g, &e))
        l->err = e;
    return jv_list(l);
}

#define GEN(name, kind, tname)                                                                \
    static jv name(jst *st, const jnode *at, jv v, struct jcall *c)                           \
    {                                                                                         \
        return run_gen(st, at, kind, v, c, tname);                                            \
    }
GEN(f_map, G_MAP, "generator")
GEN(f_select, G_SELECT, "generator")
GEN(f_reject, G_REJECT, "generator")
GEN(f_selectattr, G_SELECTATTR, "generator")
GEN(f_rejectattr, G_REJECTATTR, "generator")
GEN(f_items, G_ITEMS, "generator")
GEN(f_unique, G_UNIQUE, "generator")
GEN(f_batch, G_BATCH, "generator")
GEN(f_slice, G_SLICE, "generator")

/* ---- strings ------------------------------------------------------------------------------------ */

static jv f_string(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    return soft_str(st, at, v);
}

static jv f_trim(jst *st, const jnode *at, jv v, struct jcall *c)
{
    jv s = soft_str(st, at, v), chars = c->a[0];
    if (is_missing(chars) || chars.t == JT_NONE)
        return jstr_strip(st, s, NULL, 0, 0, 3);
    if (chars.t != JT_STR)
        jfail(st, at, RS_JINJA_ERR_TYPE, "strip arg must be None or str");
    if (s.mk)
        chars = jstr_escape(st, chars);
    return jstr_strip(st, s, chars.u.s, chars.n, 1, 3);
}

static jv f_upper(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    return jstr_upper(st, soft_str(st, at, v));
}

static jv f_lower(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    return jstr_lower(st, soft_str(st, at, v));
}

static jv f_capitalize(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    return jstr_capitalize(st, soft_str(st, at, v));
}

/* Jinja's title: words split at runs of [-\s({\[<], each upper()-ed first char + lower()-ed rest. */
static jv f_title(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    jv s = soft_str(st, at, v);
    struct jbuf b;
    jbuf_init(st, &b, s.n + 4);
    jstep(st, at, s.n / 32);
    size_t i = 0;
    while (i < s.n) {
        size_t j = i, adv;
        int sep = -1;
        while (j < s.n) {
            uint32_t cp = jstr_decode(s.u.s + j, s.n - j, &adv);
            int is_sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' ||
                         jstr_isspace(cp);
            if (sep < 0)
                sep = is_sep;
            else if (sep != is_sep)
                break;
            j += adv;
        }
        if (sep) {
            jbuf_put(st, &b, s.u.s + i, j - i);
        } else {
            jstr_decode(s.u.s + i, s.n - i, &adv);
            jstr_upper_into(st, &b, s.u.s + i, adv);
            jstr_lower_into(st, &b, s.u.s + i + adv, j - i - adv);
        }
        i = j;
    }
    return jbuf_take(&b);
}

static jv f_replace(jst *st, const jnode *at, jv v, struct jcall *c)
{
    int64_t count = is_missing(c->a[2]) || c->a[2].t == JT_NONE ? -1
                    : jarg_int(st, at, c->a[2], "count");
    jv r = jstr_replace(st, at, soft_str(st, at, v), soft_str(st, at, c->a[0]),
                        soft_str(st, at, c->a[1]), count);
    r.mk = 0;
    return r;
}

static jv f_center(jst *st, const jnode *at, jv v, struct jcall *c)
{
    jv s = soft_str(st, at, v);
    int64_t width = is_missing(c->a[0]) ? 80 : jarg_int(st, at, c->a[0], "width");
    int64_t len = (int64_t)jstr_cplen(s.u.s, s.n);
    if (width <= len)
        return s;
    if (width > (int64_t)st->max_output)
        jfail(st, at, RS_JINJA_ERR_LIMIT, "center width too large");
    int64_t marg = width - len, left = marg / 2 + (marg & width & 1);
    jstep(st, at, (uint64_t)width / 64);
    struct jbuf b;
    jbuf_init(st, &b, (size_t)(s.n + marg));
    for (int64_t i = 0; i < left; i++)
        jbuf_putc(st, &b, ' ');
    jbuf_put(st, &b, s.u.s, s.n);
    for (int64_t i = 0; i < marg - left; i++)
        jbuf_putc(st, &b, ' ');
    jv r = jbuf_take(&b);
    r.mk = s.mk;
    return r;
}

static jv f_indent(jst *st, const jnode *at, jv v, struct jcall *c)
{
    if (v.t == JT_UNDEF)
        jv_undef_fail(st, at, v);
    if (v.t != JT_STR)
        jfail(st, at, RS_JINJA_ERR_TYPE, "unsupported operand type(s) for +=: '%s' and 'str'",
              jv_type_name(v));
    jv ind;
    if (!is_missing(c->a[0]) && c->a[0].t == JT_STR) {
        ind = c->a[0];
    } else {
        int64_t w = is_missing(c->a[0]) ? 4 : jarg_int(st, at, c->a[0], "width");
        if (w > 4096)
            jfail(st, at, RS_JINJA_ERR_LIMIT, "indent width too large");
        char *sp = ja_alloc(&st->ar, w > 0 ? (size_t)w : 1);
        memset(sp, ' ', w > 0 ? (size_t)w : 0);
        ind = jv_str(sp, w > 0 ? (size_t)w : 0);
    }
    int first = jarg_bool(st, at, c->a[1], 0), blank = jarg_bool(st, at, c->a[2], 0);
    struct jbuf b;
    jbuf_init(st, &b, v.n + v.n / 4 + 8);
    jbuf_put(st, &b, v.u.s, v.n);
    jbuf_putc(st, &b, '\n');
    jv lines = jstr_splitlines(st, jbuf_take(&b), 0);
    const struct jlist *l = lines.u.l;
    struct jbuf o;
    jbuf_init(st, &o, v.n + 8);
    if (first)
        jbuf_put(st, &o, ind.u.s, ind.n);
    for (uint32_t i = 0; i < l->n; i++) {
        jv line = l->v[i];
        if (i) {
            jbuf_putc(st, &o, '\n');
            if (blank || line.n)
                jbuf_put(st, &o, ind.u.s, ind.n);
        }
        jbuf_put(st, &o, line.u.s, line.n);
    }
    jv r = jbuf_take(&o);
    r.mk = v.mk;
    return r;
}

static jv f_truncate(jst *st, const jnode *at, jv v, struct jcall *c)
{
    if (v.t != JT_STR)
        jfail(st, at, RS_JINJA_ERR_TYPE, "object of type '%s' has no len()", jv_type_name(v));
    int64_t length = is_missing(c->a[0]) ? 255 : jarg_int(st, at, c->a[0], "length");
    int killwords = jarg_bool(st, at, c->a[1], 0);
    jv end = is_missing(c->a[2]) ? JV_LIT("...") : c->a[2];
    if (end.t != JT_STR)
        jfail(st, at, RS_JINJA_ERR_TYPE, "end must be a string");
    int64_t leeway = is_missing(c->a[3]) || c->a[3].t == JT_NONE ? 5
                     : jarg_int(st, at, c->a[3], "leeway");
    int64_t endlen = (int64_t)jstr_cplen(end.u.s, end.n);
    if (length < endlen)
        jfail(st, at, RS_JINJA_ERR_VALUE, "expected length >= %lld, got %lld", (long long)endlen,
              (long long)length);
    if (leeway < 0)
        jfail(st, at, RS_JINJA_ERR_VALUE, "expected leeway >= 0, got %lld", (long long)leeway);
    if ((int64_t)jstr_cplen(v.u.s, v.n) - length <= leeway) /* len <= length + leeway, no overflow */
        return v;
    jv head = jstr_slice(st, v, 0, length - endlen, 1, 1, 1);
    if (!killwords) {
        jv parts = jstr_split(st, at, head, JV_LIT(" "), 1, 1);
        head = parts.u.l->v[0];
    }
    return jeval_binop(st, at, OP_ADD, head, end);
}

static int is_word_cp(uint32_t cp)
{
    if (cp < 0x80)
        return cp == '_' || (cp >= '0' && cp <= '9') || ((cp | 32) >= 'a' && (cp | 32) <= 'z');
    return (jcase_props(cp) & (JC_ALPHA | JC_DECIMAL | JC_DIGIT | JC_NUMERIC)) != 0;
}

static jv f_wordcount(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    jv s = soft_str(st, at, v);
    int64_t n = 0;
    int in = 0;
    jstep(st, at, s.n / 32);
    for (size_t i = 0; i < s.n;) {
        size_t adv;
        int w = is_word_cp(jstr_decode(s.u.s + i, s.n - i, &adv));
        n += w && !in;
        in = w;
        i += adv;
    }
    return jv_int(n);
}

static jv f_format(jst *st, const jnode *at, jv v, struct jcall *c)
{
    if (c->nrest && c->nkw)
        jfail(st, at, RS_JINJA_ERR_RUNTIME,
              "can't handle positional and keyword arguments at the same time");
    jv args;
    if (c->nkw) {
        struct jdict *d = jdict_new(st, c->nkw);
        for (uint32_t i = 0; i < c->nkw; i++)
            jdict_set(st, at, d, jv_str(c->kw[i].name, c->kw[i].len), c->kw[i].v);
        args = jv_dict(d);
    } else {
        struct jlist *t = jlist_new(st, JL_TUPLE, c->nrest);
        for (uint32_t i = 0; i < c->nrest; i++)
            t->v[t->n++] = c->rest[i];
        args = jv_list(t);
    }
    return jstr_percent(st, at, soft_str(st, at, v), args);
}

static jv f_safe(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    jv s = soft_str(st, at, v);
    s.mk = 1;
    return s;
}

static jv f_escape(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    return jstr_escape(st, soft_str(st, at, v));
}

static jv f_forceescape(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    jv s = soft_str(st, at, v);
    s.mk = 0;
    return jstr_escape(st, s);
}

static jv f_join(jst *st, const jnode *at, jv v, struct jcall *c)
{
    uint32_t n;
    jv *items = items_of(st, at, v, &n);
    jv sep = is_missing(c->a[0]) ? JV_LIT("") : soft_str(st, at, c->a[0]);
    struct jbuf b;
    jbuf_init(st, &b, 64);
    for (uint32_t i = 0; i < n; i++) {
        if (i)
            jbuf_put(st, &b, sep.u.s, sep.n);
        jv x = jattr_path(st, at, items[i], c->a[1], jv_missing());
        if (x.t == JT_STR)
            jbuf_put(st, &b, x.u.s, x.n);
        else
            jv_str_into(st, at, &b, x);
    }
    jstep(st, at, b.n / 64 + n);
    return jbuf_take(&b);
}

static jv f_reverse(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    if (v.t == JT_STR)
        return jstr_slice(st, v, 0, 0, -1, 0, 0);
    uint32_t n;
    jv *items;
    const char *tname = "list_reverseiterator";
    if (v.t == JT_LIST && v.u.l->kind == JL_ITER) {
        items = items_of(st, at, v, &n);
        tname = NULL; /* reversed() refuses generators: Jinja then builds a list */
    } else {
        if (v.t == JT_DICT)
            tname = "dict_reversekeyiterator";
        else if (v.t == JT_LIST && v.u.l->kind == JL_RANGE)
            tname = "range_iterator";
        items = items_of(st, at, v, &n);
    }
    struct jlist *l = jlist_new(st, tname ? JL_ITER : JL_LIST, n);
    l->tname = tname;
    for (uint32_t i = 0; i < n; i++)
        l->v[i] = items[n - 1 - i];
    l->n = n;
    return jv_list(l);
}

/* ---- sequences and values ------------------------------------------------------------------------- */

static jv f_length(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    return jv_int(jv_len(st, at, v));
}

static jv f_list(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    uint32_t n;
    jv *items = items_of(st, at, v, &n);
    jstep(st, at, n / 16);
    struct jlist *l = jlist_new(st, JL_LIST, n);
    if (n)
        memcpy(l->v, items, n * sizeof(jv));
    l->n = n;
    return jv_list(l);
}

static jv f_first(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    uint32_t n;
    const struct jerrsave *pending;
    jv *items = jv_iter_items(st, at, v, &n, &pending);
    if (n)
        return items[0];
    if (pending)
        jraise_saved(st, pending);
    return jv_undef_hint(st, "No first item, sequence was empty.");
}

static jv f_last(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    if (v.t == JT_LIST && v.u.l->kind == JL_ITER)
        jfail(st, at, RS_JINJA_ERR_TYPE, "'%s' object is not reversible", jv_type_name(v));
    uint32_t n;
    jv *items = items_of(st, at, v, &n);
    if (n)
        return items[n - 1];
    return jv_undef_hint(st, "No last item, sequence was empty.");
}

static jv f_default(jst *st, const jnode *at, jv v, struct jcall *c)
{
    jv dflt = is_missing(c->a[0]) ? JV_LIT("") : c->a[0];
    if (v.t == JT_UNDEF || (jarg_bool(st, at, c->a[1], 0) && !jv_truthy(st, at, v)))
        return dflt;
    return v;
}

static jv f_attr(jst *st, const jnode *at, jv v, struct jcall *c)
{
    jv name = c->a[0];
    if (name.t != JT_STR)
        jfail(st, at, RS_JINJA_ERR_TYPE, "attribute name must be a string");
    return jget_pyattr(st, at, v, name.u.s, name.n); /* attributes only, never keys */
}

static jv f_sum(jst *st, const jnode *at, jv v, struct jcall *c)
{
    uint32_t n;
    jv *items = items_of(st, at, v, &n);
    jv acc = is_missing(c->a[1]) ? jv_int(0) : c->a[1];
    if (acc.t == JT_STR)
        jfail(st, at, RS_JINJA_ERR_TYPE, "sum() can't sum strings [use ''.join(seq) instead]");
    for (uint32_t i = 0; i < n; i++)
        acc = jeval_binop(st, at, OP_ADD, acc, jattr_path(st, at, items[i], c->a[0], jv_missing()));
    return acc;
}

static jv f_abs(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)c;
    if (v.t == JT_FLOAT)
        return jv_float(fabs(v.u.f));
    if (jv_is_intlike(v))
        return v.u.i < 0 ? jnum_neg(st, at, v) : jv_int(v.u.i);
    jfail(st, at, RS_JINJA_ERR_TYPE, "bad operand type for abs(): '%s'", jv_type_name(v));
}

static int float_of(jst *st, const jnode *at, jv v, double *out)
{
    if (v.t == JT_FLOAT) {
        *out = v.u.f;
        return 1;
    }
    if (jv_is_intlike(v)) {
        *out = (double)v.u.i;
        return 1;
    }
    if (v.t == JT_STR)
        return jnum_parse_float(v.u.s, v.n, out);
    if (v.t == JT_UNDEF)
        jv_undef_fail(st, at, v);
    return 0;
}

static jv f_float(jst *st, const jnode *at, jv v, struct jcall *c)
{
    double f;
    if (float_of(st, at, v, &f))
        return jv_float(f);
    return is_missing(c->a[0]) ? jv_float(0.0) : c->a[0];
}

static jv int_of_float(jst *st, const jnode *at, double f)
{
    if (isinf(f))
        jfail(st, at, RS_JINJA_ERR_VALUE, "cannot convert float infinity to integer");
    if (!(f > -9223372036854775809.0 && f < 9223372036854775808.0))
        jfail(st, at, RS_JINJA_ERR_UNSUPPORTED, "integer does not fit in 64 bits");
    return jv_int((int64_t)f);
}

static jv f_int(jst *st, const jnode *at, jv v, struct jcall *c)
{
    jv dflt = is_missing(c->a[0]) ? jv_int(0) : c->a[0];
    int64_t base = is_missing(c->a[1]) ? 10 : jarg_int(st, at, c->a[1], "base");
    if (jv_is_intlike(v))
        return jv_int(v.u.i);
    if (v.t == JT_FLOAT)
        return isnan(v.u.f) ? dflt : int_of_float(st, at, v.u.f);
    if (v.t == JT_UNDEF)
        jv_undef_fail(st, at, v);
    if (v.t == JT_STR) {
        int64_t i;
        int r = jnum_parse_int(v.u.s, v.n, (int)base, &i);
        if (r == 1)
            return jv_int(i);
        if (r < 0)
            jfail(st, at, RS_JINJA_ERR_UNSUPPORTED, "integer does not fit in 64 bits");
        double f;
        if (jnum_parse_float(v.u.s, v.n, &f))
            return isnan(f) ? dflt : int_of_float(st, at, f);
    }
    return dflt;
}

static jv f_round(jst *st, const jnode *at, jv v, struct jcall *c)
{
    int64_t prec = is_missing(c->a[0]) ? 0 : jarg_int(st, at, c->a[0], "precision");
    jv method = c->a[1];
    int m = 0; /* 0 common, 1 ceil, 2 floor */
    if (!is_missing(method)) {
        if (method.t == JT_STR && method.n == 4 && !memcmp(method.u.s, "ceil", 4))
            m = 1;
        else if (method.t == JT_STR && method.n == 5 && !memcmp(method.u.s, "floor", 5))
            m = 2;
        else if (!(method.t == JT_STR && method.n == 6 && !memcmp(method.u.s, "common", 6)))
            jfail(st, at, RS_JINJA_ERR_RUNTIME, "method must be common, ceil or floor");
    }
    if (!jv_is_num(v)) {
        if (v.t == JT_UNDEF)
            jv_undef_fail(st, at, v);
        jfail(st, at, RS_JINJA_ERR_TYPE, "type %s doesn't define __round__ method",
              jv_type_name(v));
    }
    if (m == 0) {
        if (v.t == JT_FLOAT)
            return jv_float(jnum_round(v.u.f, prec));
        if (prec >= 0)
            return jv_int(v.u.i);
        double r = jnum_round((double)v.u.i, prec); /* exact while |v| < 2^53 */
        return int_of_float(st, at, r);
    }
    jv scale = jnum_binop(st, at, OP_POW, jv_int(10), jv_int(prec));
    jv x = jnum_binop(st, at, OP_MUL, v, scale);
    double xf = x.t == JT_FLOAT ? x.u.f : (double)x.u.i;
    jv r = x.t == JT_FLOAT ? int_of_float(st, at, m == 1 ? ceil(xf) : floor(xf)) : jv_int(x.u.i);
    return jnum_binop(st, at, OP_DIV, r, scale);
}

static jv f_tojson(jst *st, const jnode *at, jv v, struct jcall *c)
{
    struct jdump_opts o = {0};
    o.ensure_ascii = jarg_bool(st, at, c->a[0], 0);
    jv ind = c->a[1];
    if (!is_missing(ind) && ind.t != JT_NONE) {
        o.indent_set = 1;
        if (ind.t == JT_STR) {
            o.indent = ind.u.s;
            o.indent_len = ind.n;
        } else {
            int64_t w = jarg_int(st, at, ind, "indent");
            if (w > 4096)
                jfail(st, at, RS_JINJA_ERR_LIMIT, "indent too large");
            char *sp = ja_alloc(&st->ar, w > 0 ? (size_t)w : 1);
            memset(sp, ' ', w > 0 ? (size_t)w : 0);
            o.indent = sp;
            o.indent_len = w > 0 ? (size_t)w : 0;
        }
    }
    jv sep = c->a[2];
    if (!is_missing(sep) && sep.t != JT_NONE) {
        uint32_t n;
        jv *parts = items_of(st, at, sep, &n);
        if (n != 2 || parts[0].t != JT_STR || parts[1].t != JT_STR)
            jfail(st, at, RS_JINJA_ERR_TYPE, "separators must be a pair of strings");
        o.item_sep = parts[0].u.s;
        o.item_sep_len = parts[0].n;
        o.key_sep = parts[1].u.s;
        o.key_sep_len = parts[1].n;
    } else {
        o.item_sep = o.indent_set ? "," : ", ";
        o.item_sep_len = o.indent_set ? 1 : 2;
        o.key_sep = ": ";
        o.key_sep_len = 2;
    }
    o.sort_keys = jarg_bool(st, at, c->a[3], 0);
    struct jbuf b;
    jbuf_init(st, &b, 128);
    jjson_dump(st, at, &b, v, &o);
    return jbuf_take(&b);
}

static jv f_unsupported(jst *st, const jnode *at, jv v, struct jcall *c)
{
    (void)v;
    (void)c;
    jfail(st, at, RS_JINJA_ERR_UNSUPPORTED, "this filter is not supported");
}

/* Sorted by name (binary search). */
static const struct jbuiltin filters[] = {
    {"abs", NULL, 0, 0, f_abs},
    {"attr", P("name"), 1, 0, f_attr},
    {"batch", P("linecount", "fill_with"), 1, 0, f_batch},
    {"capitalize", NULL, 0, 0, f_capitalize},
    {"center", P("width"), 0, 0, f_center},
    {"count", NULL, 0, 0, f_length},
    {"d", P("default_value", "boolean"), 0, 0, f_default},
    {"default", P("default_value", "boolean"), 0, 0, f_default},
    {"dictsort", P("case_sensitive", "by", "reverse"), 0, 0, f_dictsort},
    {"e", NULL, 0, 0, f_escape},
    {"escape", NULL, 0, 0, f_escape},
    {"filesizeformat", NULL, 0, JB_UNSUPPORTED | JB_VARARGS | JB_VARKW, f_unsupported},
    {"first", NULL, 0, 0, f_first},
    {"float", P("default"), 0, 0, f_float},
    {"forceescape", NULL, 0, 0, f_forceescape},
    {"format", NULL, 0, JB_VARARGS | JB_VARKW, f_format},
    {"groupby", NULL, 0, JB_UNSUPPORTED | JB_VARARGS | JB_VARKW, f_unsupported},
    {"indent", P("width", "first", "blank"), 0, 0, f_indent},
    {"int", P("default", "base"), 0, 0, f_int},
    {"items", NULL, 0, 0, f_items},
    {"join", P("d", "attribute"), 0, 0, f_join},
    {"last", NULL, 0, 0, f_last},
    {"length", NULL, 0, 0, f_length},
    {"list", NULL, 0, 0, f_list},
    {"lower", NULL, 0, 0, f_lower},
    {"map", NULL, 0, JB_VARARGS | JB_VARKW, f_map},
    {"max", P("case_sensitive", "attribute"), 0, 0, f_max},
    {"min", P("case_sensitive", "attribute"), 0, 0, f_min},
    {"pprint", NULL, 0, JB_UNSUPPORTED | JB_VARARGS | JB_VARKW, f_unsupported},
    {"random", NULL, 0, JB_UNSUPPORTED | JB_VARARGS | JB_VARKW, f_unsupported},
    {"reject", NULL, 0, JB_VARARGS | JB_VARKW, f_reject},
    {"rejectattr", NULL, 0, JB_VARARGS | JB_VARKW, f_rejectattr},
    {"replace", P("old", "new", "count"), 2, 0, f_replace},
    {"reverse", NULL, 0, 0, f_reverse},
    {"round", P("precision", "method"), 0, 0, f_round},
    {"safe", NULL, 0, 0, f_safe},
    {"select", NULL, 0, JB_VARARGS | JB_VARKW, f_select},
    {"selectattr", NULL, 0, JB_VARARGS | JB_VARKW, f_selectattr},
    {"slice", P("slices", "fill_with"), 1, 0, f_slice},
    {"sort", P("reverse", "case_sensitive", "attribute"), 0, 0, f_sort},
    {"string", NULL, 0, 0, f_string},
    {"striptags", NULL, 0, JB_UNSUPPORTED | JB_VARARGS | JB_VARKW, f_unsupported},
    {"sum", P("attribute", "start"), 0, 0, f_sum},
    {"title", NULL, 0, 0, f_title},
    {"tojson", P("ensure_ascii", "indent", "separators", "sort_keys"), 0, 0, f_tojson},
    {"trim", P("chars"), 0, 0, f_trim},
    {"truncate", P("length", "killwords", "end", "leeway"), 0, 0, f_truncate},
    {"unique", P("case_sensitive", "attribute"), 0, 0, f_unique},
    {"upper", NULL, 0, 0, f_upper},
    {"urlencode", NULL, 0, JB_UNSUPPORTED | JB_VARARGS | JB_VARKW, f_unsupported},
    {"urlize", NULL, 0, JB_UNSUPPORTED | JB_VARARGS | JB_VARKW, f_unsupported},
    {"wordcount", NULL, 0, 0, f_wordcount},
    {"wordwrap", NULL, 0, JB_UNSUPPORTED | JB_VARARGS | JB_VARKW, f_unsupported},
    {"xmlattr", NULL, 0, JB_UNSUPPORTED | JB_VARARGS | JB_VARKW, f_unsupported},
};

const struct jbuiltin *jinja_builtin_search(const struct jbuiltin *tab, size_t n, const char *name,
                                            size_t len)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const char *s = tab[mid].name;
        size_t sl = strlen(s);
        int c = memcmp(s, name, sl < len ? sl : len);
        if (c == 0)
            c = sl < len ? -1 : sl > len;
        if (c == 0)
            return &tab[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const struct jbuiltin *jinja_filter_find(const char *name, size_t n)
{
    return jinja_builtin_search(filters, sizeof(filters) / sizeof(filters[0]), name, n);
}

/* SPDX-License-Identifier: MIT */
/*
 * The global functions a chat template can call: Jinja2's defaults (range,
 * with the sandbox's 100,000-item cap; dict; namespace; joiner; cycler) and
 * transformers' raise_exception(msg) and strftime_now(fmt). strftime_now
 * formats the render's pinned time, or the local clock when none is pinned,
 * as Python's datetime.strftime does for a naive datetime (%f microseconds,
 * %z and %Z empty, the rest by the C library in the C locale). Leaves out
 * lipsum (random text).
 */
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "common/jinja_impl.h"

#define P(...) ((const char *const[]){__VA_ARGS__, NULL})
#define MAX_RANGE 100000

static jv g_range(jst *st, const jnode *at, jv self, struct jcall *c)
{
    (void)self;
    if (c->nrest < 1 || c->nrest > 3)
        jfail(st, at, RS_JINJA_ERR_TYPE, "range expected 1 to 3 arguments, got %u", c->nrest);
    int64_t v[3];
    for (uint32_t i = 0; i < c->nrest; i++) {
        jv a = c->rest[i];
        if (!jv_is_intlike(a)) {
            if (a.t == JT_UNDEF)
                jv_undef_fail(st, at, a);
            jfail(st, at, RS_JINJA_ERR_TYPE, "'%s' object cannot be interpreted as an integer",
                  jv_type_name(a));
        }
        v[i] = a.u.i;
    }
    int64_t start = c->nrest == 1 ? 0 : v[0], stop = c->nrest == 1 ? v[0] : v[1];
    int64_t step = c->nrest == 3 ? v[2] : 1;
    if (step == 0)
        jfail(st, at, RS_JINJA_ERR_VALUE, "range() arg 3 must not be zero");
    int64_t n = 0;
    if (step > 0 && start < stop)
        n = (int64_t)(((__int128)stop - start - 1) / step + 1);
    else if (step < 0 && start > stop)
        n = (int64_t)(((__int128)start - stop - 1) / -(__int128)step + 1);
    if (n > MAX_RANGE)
        jfail(st, at, RS_JINJA_ERR_VALUE,
              "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
    jstep(st, at, (uint64_t)n / 16);
    struct jlist *l = jlist_new(st, JL_RANGE, (uint32_t)n);
    for (int64_t i = 0; i < n; i++)
        l->v[i] = jv_int(start + i * step);
    l->n = (uint32_t)n;
    l->r0 = start;
    l->r1 = stop;
    l->rs = step;
    return jv_list(l);
}

/* dict(*args, **kwargs) into d: a mapping or an iterable of pairs, then the keywords. */
static void fill_dict(jst *st, const jnode *at, struct jdict *d, struct jcall *c, const char *what)
{
    if (c->nrest > 1)
        jfail(st, at, RS_JINJA_ERR_TYPE, "%s expected at most 1 argument, got %u", what, c->nrest);
    if (c->nrest) {
        jv src = c->rest[0];
        if (src.t == JT_DICT) {
            for (uint32_t i = 0; i < src.u.d->n; i++)
                jdict_set(st, at, d, src.u.d->kv[i].k, src.u.d->kv[i].v);
        } else {
            uint32_t n;
            const struct jerrsave *pending;
            jv *items = jv_iter_items(st, at, src, &n, &pending);
            if (pending)
                jraise_saved(st, pending);
            for (uint32_t i = 0; i < n; i++) {
                uint32_t k;
                const struct jerrsave *p2;
                jv *kv = jv_iter_items(st, at, items[i], &k, &p2);
                if (p2)
                    jraise_saved(st, p2);
                if (k != 2)
                    jfail(st, at, RS_JINJA_ERR_VALUE,
                          "dictionary update sequence element #%u has length %u; 2 is required", i,
                          k);
                jdict_set(st, at, d, kv[0], kv[1]);
            }
        }
    }
    for (uint32_t i = 0; i < c->nkw; i++)
        jdict_set(st, at, d, jv_str(c->kw[i].name, c->kw[i].len), c->kw[i].v);
}

static jv g_dict(jst *st, const jnode *at, jv self, struct jcall *c)
{
    (void)self;
    struct jdict *d = jdict_new(st, 4);
    fill_dict(st, at, d, c, "dict");
    return jv_dict(d);
}

static jv g_namespace(jst *st, const jnode *at, jv self, struct jcall *c)
{
    (void)self;
    struct jns *ns = jalloc(st, sizeof(*ns));
    fill_dict(st, at, &ns->d, c, "namespace");
    jv v = {0};
    v.t = JT_NS;
    v.u.ns = ns;
    return v;
}

static jv g_joiner(jst *st, const jnode *at, jv self, struct jcall *c)
{
    (void)at, (void)self;
    struct jobj *o = jalloc(st, sizeof(*o));
    o->kind = JO_JOINER;
    o->sep = c->a[0].t == JT_MISSING ? JV_LIT(", ") : c->a[0];
    jv v = {0};
    v.t = JT_OBJ;
    v.u.o = o;
    return v;
}

static jv g_cycler(jst *st, const jnode *at, jv self, struct jcall *c)
{
    (void)self;
    if (!c->nrest)
        jfail(st, at, RS_JINJA_ERR_RUNTIME, "at least one item has to be provided");
    struct jobj *o = jalloc(st, sizeof(*o));
    o->kind = JO_CYCLER;
    o->items = jlist_new(st, JL_TUPLE, c->nrest);
    for (uint32_t i = 0; i < c->nrest; i++)
        o->items->v[o->items->n++] = c->rest[i];
    jv v = {0};
    v.t = JT_OBJ;
    v.u.o = o;
    return v;
}

static jv g_raise(jst *st, const jnode *at, jv self, struct jcall *c)
{
    (void)self;
    jv msg = jv_to_str(st, at, c->a[0]);
    jfail_str(st, at, RS_JINJA_ERR_RAISE, msg.u.s, msg.n);
}

static jv g_strftime(jst *st, const jnode *at, jv self, struct jcall *c)
{
    (void)self;
    jv fmt = c->a[0];
    if (fmt.t != JT_STR)
        jfail(st, at, RS_JINJA_ERR_TYPE, "strftime() argument 1 must be str, not %s",
              jv_type_name(fmt));
    struct tm tm;
    long usec = 0;
    if (st->now) {
        tm = *st->now;
    } else {
        struct timeval tv;
        gettimeofday(&tv, NULL);
        time_t now = tv.tv_sec;
        localtime_r(&now, &tm);
        usec = (long)tv.tv_usec;
    }
    /* Python's _wrap_strftime for a naive datetime: %f, %z, %Z first */
    struct jbuf f;
    jbuf_init(st, &f, fmt.n + 16);
    for (size_t i = 0; i < fmt.n; i++) {
        if (fmt.u.s[i] == '%' && i + 1 < fmt.n) {
            char k = fmt.u.s[i + 1];
            if (k == 'f') {
                jbuf_printf(st, &f, "%06ld", usec);
                i++;
                continue;
            }
            if (k == 'z' || k == 'Z') {
                i++;
                continue;
            }
            jbuf_putc(st, &f, '%');
            jbuf_putc(st, &f, k);
            i++;
            continue;
        }
        jbuf_putc(st, &f, fmt.u.s[i]);
    }
    jbuf_putc(st, &f, 0);
    if (fmt.n == 0)
        return JV_LIT("");
    for (size_t cap = 256; cap <= 256 * (fmt.n + 16); cap *= 4) {
        char *out = ja_alloc(&st->ar, cap);
        size_t k = strftime(out, cap, f.p, &tm);
        if (k)
            return jv_str(out, k);
    }
    return JV_LIT("");
}

static jv g_unsupported(jst *st, const jnode *at, jv self, struct jcall *c)
{
    (void)self, (void)c;
    jfail(st, at, RS_JINJA_ERR_UNSUPPORTED, "lipsum() is not supported (random text)");
}

/* Order defines the symbol ids (SYM_FIRST_GLOBAL + index). */
const struct jbuiltin jinja_globals[] = {
    {"range", NULL, 0, JB_VARARGS, g_range},
    {"dict", NULL, 0, JB_VARARGS | JB_VARKW, g_dict},
    {"namespace", NULL, 0, JB_VARARGS | JB_VARKW, g_namespace},
    {"joiner", P("sep"), 0, 0, g_joiner},
    {"cycler", NULL, 0, JB_VARARGS, g_cycler},
    {"lipsum", NULL, 0, JB_UNSUPPORTED | JB_VARARGS | JB_VARKW, g_unsupported},
    {"raise_exception", P("message"), 1, 0, g_raise},
    {"strftime_now", P("format"), 1, 0, g_strftime},
};

const unsigned jinja_n_globals = sizeof(jinja_globals) / sizeof(jinja_globals[0]);

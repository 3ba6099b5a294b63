/* SPDX-License-Identifier: MIT */
/*
 * The chat-template renderer's value model: Python's types as Jinja2 hands
 * them to a template (None, bool, int, float, str, list, tuple, dict, the
 * generators and views filters return, namespace, macro, loop) and Jinja's
 * default Undefined, with Python's truthiness, ==, ordering (TypeError across
 * types), hashing (1 == 1.0 == True as one dict key), len(), iteration,
 * str() and repr(). Values live in the render's arena. Leaves out sets,
 * bytes and complex numbers (JSON input cannot make them).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jinja_impl.h"

#define MAX_VDEPTH 1000

/* ---- arena -------------------------------------------------------------------- */

struct ja_chunk {
    struct ja_chunk *next;
    size_t size;
};

void *ja_alloc(jarena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if ((size_t)(a->end - a->p) < n) {
        size_t size = a->next_chunk ? a->next_chunk : 16384;
        if (size < n + 16)
            size = n + 16;
        if (a->used + size > a->limit) {
            size = n + 16;
            if (a->used + size > a->limit)
                a->fail(a->ctx, 0);
        }
        struct ja_chunk *c = malloc(size);
        if (!c)
            a->fail(a->ctx, 1);
        c->next = a->head;
        c->size = size;
        a->head = c;
        a->used += size;
        a->p = (char *)c + 16;
        a->end = (char *)c + size;
        if (a->next_chunk < (1u << 20))
            a->next_chunk = size * 2;
    }
    void *r = a->p;
    a->p += n;
    return r;
}

void *ja_zalloc(jarena *a, size_t n)
{
    void *p = ja_alloc(a, n);
    memset(p, 0, n);
    return p;
}

void ja_release(jarena *a)
{
    for (struct ja_chunk *c = a->head, *nx; c; c = nx) {
        nx = c->next;
        free(c);
    }
    a->head = NULL;
    a->p = a->end = NULL;
    a->used = 0;
}

void *jalloc(jst *st, size_t n) { return ja_zalloc(&st->ar, n); }

jv jv_str_copy(jst *st, const char *s, size_t n)
{
    char *d = ja_alloc(&st->ar, n + 1);
    if (n)
        memcpy(d, s, n);
    d[n] = 0;
    return jv_str(d, n);
}

/* ---- buffers ------------------------------------------------------------------ */

void jbuf_init(jst *st, struct jbuf *b, size_t cap)
{
    b->p = ja_alloc(&st->ar, cap ? cap : 16);
    b->n = 0;
    b->cap = cap ? cap : 16;
    b->heap = 0;
}

void jbuf_grow(jst *st, struct jbuf *b, size_t extra)
{
    size_t need = b->n + extra;
    if (need > st->max_output || need < b->n)
        jfail(st, NULL, RS_JINJA_ERR_LIMIT,
              "the output (or a string the template builds) would pass %zu bytes", st->max_output);
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < need)
        cap *= 2;
    if (b->heap) {
        if (cap > b->cap && st->ar.used + (cap - b->cap) > st->ar.limit)
            jfail(st, NULL, RS_JINJA_ERR_LIMIT, "the render would use more than %zu bytes of memory",
                  st->ar.limit);
        char *p = realloc(b->p, cap);
        if (!p)
            jfail(st, NULL, RS_JINJA_ERR_LIMIT, "out of memory");
        st->ar.used += cap - b->cap;
        b->p = p;
    } else {
        char *p = ja_alloc(&st->ar, cap);
        if (b->n)
            memcpy(p, b->p, b->n);
        b->p = p;
    }
    b->cap = cap;
}

void jbuf_printf(jst *st, struct jbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (k < 0)
        return;
    if ((size_t)k < sizeof(tmp)) {
        jbuf_put(st, b, tmp, (size_t)k);
        return;
    }
    jbuf_grow(st, b, (size_t)k + 1);
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

jv jbuf_take(struct jbuf *b) { return jv_str(b->p, b->n); }

/* ---- undefined ---------------------------------------------------------------- */

static jv undef_make(jst *st, int kind, int exc, const char *name, size_t len, jv obj)
{
    struct jundef *u = jalloc(st, sizeof(*u));
    u->kind = (uint8_t)kind;
    u->exc = (uint8_t)exc;
    u->name = name;
    u->name_len = (uint32_t)len;
    u->obj = obj;
    jv v = jv_undef();
    v.u.u = u;
    return v;
}

jv jv_undef_name(jst *st, const char *name, size_t len)
{
    return undef_make(st, JU_NAME, RS_JINJA_ERR_UNDEFINED, name, len, jv_none());
}

jv jv_undef_attr(jst *st, jv obj, const char *name, size_t len)
{
    return undef_make(st, JU_ATTR, RS_JINJA_ERR_UNDEFINED, name, len, obj);
}

jv jv_undef_item(jst *st, jv obj, jv key)
{
    if (key.t == JT_STR)
        return jv_undef_attr(st, obj, key.u.s, key.n);
    jv r = jv_repr(st, NULL, key);
    return undef_make(st, JU_ITEM, RS_JINJA_ERR_UNDEFINED, r.u.s, r.n, obj);
}

jv jv_undef_hint(jst *st, const char *hint)
{
    return undef_make(st, JU_HINT, RS_JINJA_ERR_UNDEFINED, hint, strlen(hint), jv_none());
}

jv jv_undef_unsafe(jst *st, jv obj, const char *name, size_t len)
{
    return undef_make(st, JU_ATTR, RS_JINJA_ERR_SECURITY, name, len, obj);
}

_Noreturn void jv_undef_fail(jst *st, const jnode *at, jv v)
{
    const struct jundef *u = v.u.u;
    if (!u)
        jfail(st, at, RS_JINJA_ERR_UNDEFINED, "a value is undefined");
    int len = (int)(u->name_len > 200 ? 200 : u->name_len);
    const char *tn = jv_type_name(u->obj);
    if (u->exc == RS_JINJA_ERR_SECURITY)
        jfail(st, at, RS_JINJA_ERR_SECURITY, "access to attribute '%.*s' of '%s' object is unsafe.",
              len, u->name, tn);
    switch (u->kind) {
    case JU_NAME:
        jfail(st, at, RS_JINJA_ERR_UNDEFINED, "'%.*s' is undefined", len, u->name);
    case JU_ATTR:
        if (u->obj.t == JT_NONE)
            jfail(st, at, RS_JINJA_ERR_UNDEFINED, "'None' has no attribute '%.*s'", len, u->name);
        jfail(st, at, RS_JINJA_ERR_UNDEFINED, "'%s object' has no attribute '%.*s'", tn, len,
              u->name);
    case JU_ITEM:
        jfail(st, at, RS_JINJA_ERR_UNDEFINED, "%s object has no element %.*s", tn, len, u->name);
    default:
        jfail(st, at, RS_JINJA_ERR_UNDEFINED, "%.*s", len, u->name);
    }
}

/* ---- containers ----------------------------------------------------------------- */

struct jlist *jlist_new(jst *st, uint8_t kind, uint32_t cap)
{
    struct jlist *l = jalloc(st, sizeof(*l));
    l->kind = kind;
    if (cap) {
        l->v = ja_alloc(&st->ar, cap * sizeof(jv));
        l->cap = cap;
    }
    return l;
}

void jlist_push(jst *st, struct jlist *l, jv v)
{
    if (l->n == l->cap) {
        uint32_t cap = l->cap ? l->cap * 2 : 4;
        jv *nv = ja_alloc(&st->ar, (size_t)cap * sizeof(jv));
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

jv jv_list(struct jlist *l)
{
    jv v = {0};
    v.t = JT_LIST;
    v.u.l = l;
    return v;
}

struct jdict *jdict_new(jst *st, uint32_t cap)
{
    struct jdict *d = jalloc(st, sizeof(*d));
    if (cap) {
        d->kv = ja_alloc(&st->ar, cap * sizeof(struct jkv));
        d->cap = cap;
    }
    return d;
}

jv jv_dict(struct jdict *d)
{
    jv v = {0};
    v.t = JT_DICT;
    v.u.d = d;
    return v;
}

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

uint64_t jv_hash(jst *st, const jnode *at, jv v)
{
    switch (v.t) {
    case JT_STR:
        jstep(st, at, v.n / 128);
        return hash_bytes(v.u.s, v.n);
    case JT_INT:
    case JT_BOOL:
        return mix((uint64_t)v.u.i);
    case JT_FLOAT:
        if (v.u.f >= -9223372036854775808.0 && v.u.f < 9223372036854775808.0 &&
            v.u.f == trunc(v.u.f))
            return mix((uint64_t)(int64_t)v.u.f);
        {
            uint64_t bits;
            memcpy(&bits, &v.u.f, 8);
            return mix(bits);
        }
    case JT_NONE:
        return 0x9e3779b97f4a7c15ull;
    case JT_UNDEF:
        return 0x51afd7ed558ccdffull;
    case JT_LIST:
        if (v.u.l->kind == JL_TUPLE) {
            uint64_t h = 0x345678;
            if (++st->vdepth > MAX_VDEPTH)
                jfail(st, at, RS_JINJA_ERR_LIMIT, "value nested too deeply");
            for (uint32_t i = 0; i < v.u.l->n; i++)
                h = mix(h ^ jv_hash(st, at, v.u.l->v[i])) + i;
            st->vdepth--;
            return h;
        }
        if (v.u.l->kind == JL_ITER || v.u.l->kind == JL_RANGE)
            return mix((uint64_t)(uintptr_t)v.u.l);
        jfail(st, at, RS_JINJA_ERR_TYPE, "unhashable type: '%s'", jv_type_name(v));
    case JT_DICT:
        jfail(st, at, RS_JINJA_ERR_TYPE, "unhashable type: 'dict'");
    default:
        return mix((uint64_t)(uintptr_t)v.u.l);
    }
}

static void dict_index(jst *st, const jnode *at, struct jdict *d, uint32_t cap)
{
    uint32_t *idx = ja_zalloc(&st->ar, cap * sizeof(uint32_t));
    for (uint32_t i = 0; i < d->n; i++) {
        uint32_t h = (uint32_t)jv_hash(st, at, d->kv[i].k) & (cap - 1);
        while (idx[h])
            h = (h + 1) & (cap - 1);
        idx[h] = i + 1;
    }
    d->idx = idx;
    d->idx_cap = cap;
}

#define DICT_LINEAR 8

jv *jdict_get(jst *st, const jnode *at, const struct jdict *d, jv k)
{
    if (k.t == JT_STR)
        return jdict_get_str(d, k.u.s, k.n);
    uint64_t h = jv_hash(st, at, k); /* raises for unhashable keys, as Python */
    if (!d->idx) {
        for (uint32_t i = 0; i < d->n; i++)
            if (jv_eq(st, at, d->kv[i].k, k))
                return &d->kv[i].v;
        return NULL;
    }
    for (uint32_t p = (uint32_t)h & (d->idx_cap - 1);; p = (p + 1) & (d->idx_cap - 1)) {
        uint32_t e = d->idx[p];
        if (!e)
            return NULL;
        if (jv_eq(st, at, d->kv[e - 1].k, k))
            return &d->kv[e - 1].v;
    }
}

jv *jdict_get_str(const struct jdict *d, const char *s, size_t n)
{
    if (!d->idx) {
        for (uint32_t i = 0; i < d->n; i++) {
            const jv *k = &d->kv[i].k;
            if (k->t == JT_STR && k->n == n && memcmp(k->u.s, s, n) == 0)
                return &d->kv[i].v;
        }
        return NULL;
    }
    uint64_t h = hash_bytes(s, n);
    for (uint32_t p = (uint32_t)h & (d->idx_cap - 1);; p = (p + 1) & (d->idx_cap - 1)) {
        uint32_t e = d->idx[p];
        if (!e)
            return NULL;
        const jv *k = &d->kv[e - 1].k;
        if (k->t == JT_STR && k->n == n && memcmp(k->u.s, s, n) == 0)
            return &d->kv[e - 1].v;
    }
}

void jdict_set(jst *st, const jnode *at, struct jdict *d, jv k, jv v)
{
    jv *slot = jdict_get(st, at, d, k);
    if (slot) {
        *slot = v;
        return;
    }
    if (d->n == d->cap) {
        uint32_t cap = d->cap ? d->cap * 2 : 4;
        struct jkv *kv = ja_alloc(&st->ar, cap * sizeof(*kv));
        if (d->n)
            memcpy(kv, d->kv, d->n * sizeof(*kv));
        d->kv = kv;
        d->cap = cap;
    }
    d->kv[d->n].k = k;
    d->kv[d->n].v = v;
    d->n++;
    if (d->idx && d->n * 2 <= d->idx_cap) {
        uint32_t h = (uint32_t)jv_hash(st, at, k) & (d->idx_cap - 1);
        while (d->idx[h])
            h = (h + 1) & (d->idx_cap - 1);
        d->idx[h] = d->n;
    } else if (d->n > DICT_LINEAR) {
        uint32_t cap = 16;
        while (cap < d->n * 4)
            cap *= 2;
        dict_index(st, at, d, cap);
    }
}

/* ---- type names, truthiness, equality, order ------------------------------------ */

const char *jv_type_name(jv v)
{
    switch (v.t) {
    case JT_UNDEF: return "Undefined";
    case JT_NONE: return "NoneType";
    case JT_BOOL: return "bool";
    case JT_INT: return "int";
    case JT_FLOAT: return "float";
    case JT_STR: return v.mk ? "Markup" : "str";
    case JT_LIST:
        switch (v.u.l->kind) {
        case JL_LIST: return "list";
        case JL_TUPLE: return "tuple";
        case JL_RANGE: return "range";
        default: return v.u.l->tname ? v.u.l->tname : "generator";
        }
    case JT_DICT: return "dict";
    case JT_NS: return "Namespace";
    case JT_MACRO: return "Macro";
    case JT_FUNC: return "builtin_function_or_method";
    case JT_METHOD: return "method";
    case JT_LOOP: return "LoopContext";
    case JT_OBJ: return v.u.o->kind == JO_JOINER ? "Joiner" : "Cycler";
    default: return "missing";
    }
}

int jv_truthy(jst *st, const jnode *at, jv v)
{
    (void)st;
    (void)at;
    switch (v.t) {
    case JT_UNDEF:
    case JT_NONE:
    case JT_MISSING:
        return 0;
    case JT_BOOL:
    case JT_INT:
        return v.u.i != 0;
    case JT_FLOAT:
        return v.u.f != 0.0;
    case JT_STR:
        return v.n != 0;
    case JT_LIST:
        return v.u.l->kind == JL_ITER ? 1 : v.u.l->n != 0;
    case JT_DICT:
        return v.u.d->n != 0;
    default:
        return 1;
    }
}

/* Exact int == float, as Python compares them. */
static int int_eq_float(int64_t i, double f)
{
    if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0) || f != trunc(f))
        return 0;
    return (int64_t)f == i;
}

/* -1, 0, 1, or 2 when unordered (NaN). */
static int num_cmp(jv a, jv b)
{
    if (a.t != JT_FLOAT && b.t != JT_FLOAT)
        return a.u.i < b.u.i ? -1 : a.u.i > b.u.i;
    if (a.t == JT_FLOAT && b.t == JT_FLOAT) {
        if (isnan(a.u.f) || isnan(b.u.f))
            return 2;
        return a.u.f < b.u.f ? -1 : a.u.f > b.u.f;
    }
    int flip = a.t == JT_FLOAT;
    int64_t i = flip ? b.u.i : a.u.i;
    double f = flip ? a.u.f : b.u.f;
    int r;
    if (isnan(f))
        return 2;
    if (int_eq_float(i, f))
        r = 0;
    else if (f >= 9223372036854775808.0)
        r = -1;
    else if (f < -9223372036854775808.0)
        r = 1;
    else {
        double fl = floor(f);
        int64_t fi = (int64_t)fl; /* i vs f: compare with floor(f) then fraction */
        r = i < fi ? -1 : i > fi ? 1 : (f > fl ? -1 : 0);
    }
    return flip ? -r : r;
}

static int seq_kind_eq(const struct jlist *a, const struct jlist *b)
{
    int ka = a->kind == JL_RANGE ? JL_RANGE : a->kind, kb = b->kind == JL_RANGE ? JL_RANGE : b->kind;
    return ka == kb;
}

int jv_eq(jst *st, const jnode *at, jv a, jv b)
{
    if (jv_is_num(a) && jv_is_num(b))
        return num_cmp(a, b) == 0;
    if (a.t != b.t)
        return 0;
    switch (a.t) {
    case JT_STR:
        if (a.n != b.n)
            return 0;
        jstep(st, at, a.n / 128);
        return memcmp(a.u.s, b.u.s, a.n) == 0;
    case JT_NONE:
    case JT_UNDEF:
        return 1;
    case JT_LIST: {
        const struct jlist *x = a.u.l, *y = b.u.l;
        if (x == y)
            return 1;
        if (x->kind == JL_ITER || y->kind == JL_ITER || !seq_kind_eq(x, y) || x->n != y->n)
            return 0;
        if (x->kind == JL_VIEW && x->tname && strcmp(x->tname, "dict_values") == 0)
            return 0;
        if (++st->vdepth > MAX_VDEPTH)
            jfail(st, at, RS_JINJA_ERR_LIMIT, "value nested too deeply");
        jstep(st, at, x->n);
        int eq = 1;
        for (uint32_t i = 0; i < x->n && eq; i++)
            eq = jv_eq(st, at, x->v[i], y->v[i]);
        st->vdepth--;
        return eq;
    }
    case JT_DICT: {
        const struct jdict *x = a.u.d, *y = b.u.d;
        if (x == y)
            return 1;
        if (x->n != y->n)
            return 0;
        if (++st->vdepth > MAX_VDEPTH)
            jfail(st, at, RS_JINJA_ERR_LIMIT, "value nested too deeply");
        jstep(st, at, x->n);
        int eq = 1;
        for (uint32_t i = 0; i < x->n && eq; i++) {
            jv *o = jdict_get(st, at, y, x->kv[i].k);
            eq = o && jv_eq(st, at, x->kv[i].v, *o);
        }
        st->vdepth--;
        return eq;
    }
    case JT_METHOD:
        return a.u.me->m == b.u.me->m && jv_eq(st, at, a.u.me->self, b.u.me->self);
    default:
        return a.u.l == b.u.l;
    }
}

static const char *cmp_type_name(jv v)
{
    return v.t == JT_UNDEF ? "Undefined" : jv_type_name(v);
}

int jv_cmp(jst *st, const jnode *at, jv a, jv b, const char *opname)
{
    if (a.t == JT_UNDEF)
        jv_undef_fail(st, at, a);
    if (b.t == JT_UNDEF)
        jv_undef_fail(st, at, b);
    if (jv_is_num(a) && jv_is_num(b))
        return num_cmp(a, b);
    if (a.t == JT_STR && b.t == JT_STR) {
        size_t m = a.n < b.n ? a.n : b.n;
        jstep(st, at, m / 128);
        int c = m ? memcmp(a.u.s, b.u.s, m) : 0;
        return c < 0 ? -1 : c > 0 ? 1 : a.n < b.n ? -1 : a.n > b.n;
    }
    if (a.t == JT_LIST && b.t == JT_LIST && a.u.l->kind == b.u.l->kind &&
        (a.u.l->kind == JL_LIST || a.u.l->kind == JL_TUPLE)) {
        const struct jlist *x = a.u.l, *y = b.u.l;
        uint32_t m = x->n < y->n ? x->n : y->n;
        if (++st->vdepth > MAX_VDEPTH)
            jfail(st, at, RS_JINJA_ERR_LIMIT, "value nested too deeply");
        jstep(st, at, m);
        for (uint32_t i = 0; i < m; i++)
            if (!jv_eq(st, at, x->v[i], y->v[i])) {
                int r = jv_cmp(st, at, x->v[i], y->v[i], opname);
                st->vdepth--;
                return r;
            }
        st->vdepth--;
        return x->n < y->n ? -1 : x->n > y->n;
    }
    jfail(st, at, RS_JINJA_ERR_TYPE, "'%s' not supported between instances of '%s' and '%s'",
          opname, cmp_type_name(a), cmp_type_name(b));
}

/* ---- len and iteration ----------------------------------------------------------- */

int64_t jv_len(jst *st, const jnode *at, jv v)
{
    switch (v.t) {
    case JT_STR:
        jstep(st, at, v.n / 128);
        return (int64_t)jstr_cplen(v.u.s, v.n);
    case JT_LIST:
        if (v.u.l->kind != JL_ITER)
            return v.u.l->n;
        break;
    case JT_DICT:
        return v.u.d->n;
    case JT_UNDEF:
        return 0;
    case JT_LOOP:
        return v.u.lp->n;
    default:
        break;
    }
    jfail(st, at, RS_JINJA_ERR_TYPE, "object of type '%s' has no len()", jv_type_name(v));
}

jv *jv_iter_items(jst *st, const jnode *at, jv v, uint32_t *n, const struct jerrsave **pending)
{
    *pending = NULL;
    switch (v.t) {
    case JT_LIST: {
        struct jlist *l = v.u.l;
        if (l->kind == JL_ITER) {
            if (l->consumed) {
                *n = 0;
                return NULL;
            }
            l->consumed = 1;
            *pending = l->err;
        }
        *n = l->n;
        return l->v;
    }
    case JT_DICT: {
        jstep(st, at, v.u.d->n / 16);
        jv *keys = ja_alloc(&st->ar, (v.u.d->n + 1) * sizeof(jv));
        for (uint32_t i = 0; i < v.u.d->n; i++)
            keys[i] = v.u.d->kv[i].k;
        *n = v.u.d->n;
        return keys;
    }
    case JT_STR: {
        size_t cps = jstr_cplen(v.u.s, v.n);
        jstep(st, at, cps / 16);
        jv *chars = ja_alloc(&st->ar, (cps + 1) * sizeof(jv));
        size_t off = 0;
        for (size_t i = 0; i < cps; i++) {
            size_t adv;
            jstr_decode(v.u.s + off, v.n - off, &adv);
            chars[i] = jv_str(v.u.s + off, adv);
            off += adv;
        }
        *n = (uint32_t)cps;
        return chars;
    }
    case JT_UNDEF:
        *n = 0;
        return NULL;
    default:
        jfail(st, at, RS_JINJA_ERR_TYPE, "'%s' object is not iterable", jv_type_name(v));
    }
}

/* ---- str() and repr() ----------------------------------------------------------------- */

static void repr_string(jst *st, struct jbuf *b, const char *s, size_t n)
{
    int sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    jbuf_putc(st, b, q);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            i++;
            if (c == (unsigned char)q || c == '\\') {
                jbuf_putc(st, b, '\\');
                jbuf_putc(st, b, (char)c);
            } else if (c == '\t') {
                jbuf_lit(st, b, "\\t");
            } else if (c == '\n') {
                jbuf_lit(st, b, "\\n");
            } else if (c == '\r') {
                jbuf_lit(st, b, "\\r");
            } else if (c < 0x20 || c == 0x7f) {
                jbuf_printf(st, b, "\\x%02x", c);
            } else {
                jbuf_putc(st, b, (char)c);
            }
            continue;
        }
        size_t adv;
        uint32_t cp = jstr_decode(s + i, n - i, &adv);
        if (jcase_props(cp) & JC_PRINTABLE)
            jbuf_put(st, b, s + i, adv);
        else
            jbuf_printf(st, b, cp <= 0xff ? "\\x%02x" : cp <= 0xffff ? "\\u%04x" : "\\U%08x", cp);
        i += adv;
    }
    jbuf_putc(st, b, q);
}

static void repr_items(jst *st, const jnode *at, struct jbuf *b, const jv *v, uint32_t n)
{
    jstep(st, at, n);
    for (uint32_t i = 0; i < n; i++) {
        if (i)
            jbuf_lit(st, b, ", ");
        jv_repr_into(st, at, b, v[i]);
    }
}

static void repr_dict(jst *st, const jnode *at, struct jbuf *b, const struct jdict *d)
{
    jbuf_putc(st, b, '{');
    for (uint32_t i = 0; i < d->n; i++) {
        if (i)
            jbuf_lit(st, b, ", ");
        jv_repr_into(st, at, b, d->kv[i].k);
        jbuf_lit(st, b, ": ");
        jv_repr_into(st, at, b, d->kv[i].v);
    }
    jbuf_putc(st, b, '}');
}

static void repr_list(jst *st, const jnode *at, struct jbuf *b, const struct jlist *l, jv v)
{
    switch (l->kind) {
    case JL_LIST:
        jbuf_putc(st, b, '[');
        repr_items(st, at, b, l->v, l->n);
        jbuf_putc(st, b, ']');
        return;
    case JL_TUPLE:
        jbuf_putc(st, b, '(');
        repr_items(st, at, b, l->v, l->n);
        if (l->n == 1)
            jbuf_putc(st, b, ',');
        jbuf_putc(st, b, ')');
        return;
    case JL_RANGE:
        if (l->rs == 1)
            jbuf_printf(st, b, "range(%lld, %lld)", (long long)l->r0, (long long)l->r1);
        else
            jbuf_printf(st, b, "range(%lld, %lld, %lld)", (long long)l->r0, (long long)l->r1,
                        (long long)l->rs);
        return;
    case JL_VIEW:
        jbuf_put(st, b, l->tname, strlen(l->tname));
        jbuf_lit(st, b, "([");
        repr_items(st, at, b, l->v, l->n);
        jbuf_lit(st, b, "])");
        return;
    default:
        jfail(st, at, RS_JINJA_ERR_UNSUPPORTED,
              "a %s cannot be printed (Python shows its memory address); convert it with |list",
              jv_type_name(v));
    }
}

static void str_or_repr(jst *st, const jnode *at, struct jbuf *b, jv v, int repr)
{
    char num[40];
    switch (v.t) {
    case JT_STR:
        if (!repr) {
            jbuf_put(st, b, v.u.s, v.n);
        } else if (v.mk) {
            jbuf_lit(st, b, "Markup(");
            repr_string(st, b, v.u.s, v.n);
            jbuf_putc(st, b, ')');
        } else {
            repr_string(st, b, v.u.s, v.n);
        }
        return;
    case JT_NONE:
        jbuf_lit(st, b, "None");
        return;
    case JT_UNDEF:
        if (repr)
            jbuf_lit(st, b, "Undefined");
        return;
    case JT_BOOL:
        if (v.u.i)
            jbuf_lit(st, b, "True");
        else
            jbuf_lit(st, b, "False");
        return;
    case JT_INT:
        jbuf_put(st, b, num, (size_t)snprintf(num, sizeof(num), "%lld", (long long)v.u.i));
        return;
    case JT_FLOAT:
        jbuf_put(st, b, num, jnum_float_repr(v.u.f, num));
        return;
    default:
        break;
    }
    if (++st->vdepth > MAX_VDEPTH)
        jfail(st, at, RS_JINJA_ERR_LIMIT, "value nested too deeply to print");
    switch (v.t) {
    case JT_LIST:
        repr_list(st, at, b, v.u.l, v);
        break;
    case JT_DICT:
        repr_dict(st, at, b, v.u.d);
        break;
    case JT_NS:
        jbuf_lit(st, b, "<Namespace ");
        repr_dict(st, at, b, &v.u.ns->d);
        jbuf_putc(st, b, '>');
        break;
    case JT_MACRO: {
        const jnode *d = v.u.m->def;
        jbuf_lit(st, b, "<Macro ");
        if (d->k == N_MACRO)
            repr_string(st, b, d->val.u.s, d->val.n);
        else
            jbuf_lit(st, b, "'caller'");
        jbuf_putc(st, b, '>');
        break;
    }
    case JT_LOOP:
        jbuf_printf(st, b, "<LoopContext %u/%u>", v.u.lp->i + 1, v.u.lp->n);
        break;
    default:
        jfail(st, at, RS_JINJA_ERR_UNSUPPORTED,
              "a %s cannot be printed (Python shows its memory address)", jv_type_name(v));
    }
    st->vdepth--;
}

void jv_str_into(jst *st, const jnode *at, struct jbuf *b, jv v) { str_or_repr(st, at, b, v, 0); }
void jv_repr_into(jst *st, const jnode *at, struct jbuf *b, jv v) { str_or_repr(st, at, b, v, 1); }

jv jv_to_str(jst *st, const jnode *at, jv v)
{
    if (v.t == JT_STR)
        return v;
    if (v.t == JT_UNDEF)
        return JV_LIT("");
    struct jbuf b;
    jbuf_init(st, &b, 32);
    jv_str_into(st, at, &b, v);
    return jbuf_take(&b);
}

jv jv_repr(jst *st, const jnode *at, jv v)
{
    struct jbuf b;
    jbuf_init(st, &b, 32);
    jv_repr_into(st, at, &b, v);
    return jbuf_take(&b);
}

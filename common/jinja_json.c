/* SPDX-License-Identifier: MIT */
/*
 * JSON in and out of the chat-template renderer. In: a jansson value becomes
 * template values as Python's json.loads makes them (object key order kept,
 * integers and reals distinct, null as None; strings borrowed, not copied).
 * Out: the tojson filter as transformers defines it, json.dumps(value,
 * ensure_ascii, indent, separators, sort_keys), byte-exact: Python's default
 * separators (", " and ": ", or "," with an indent), its string escapes
 * (lower-case \u00XX; with ensure_ascii every non-ASCII character, astral ones
 * as surrogate pairs), float repr, Infinity/NaN, non-string keys converted,
 * and TypeError for what json cannot serialize (generators, Undefined, ...).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/jinja_impl.h"

#define MAX_JSON_DEPTH 512

jv jjson_to_value(jst *st, const json_t *j, unsigned depth)
{
    if (!j)
        return jv_none();
    if (depth > MAX_JSON_DEPTH)
        jfail(st, NULL, RS_JINJA_ERR_INPUT, "JSON input nested deeper than %d", MAX_JSON_DEPTH);
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        size_t n = json_object_size(j);
        struct jdict *d = jdict_new(st, (uint32_t)n);
        for (void *it = json_object_iter((json_t *)j); it;
             it = json_object_iter_next((json_t *)j, it)) {
            jv k = jv_str(json_object_iter_key(it), json_object_iter_key_len(it));
            jv v = jjson_to_value(st, json_object_iter_value(it), depth + 1);
            if (d->n < 8) { /* keys are unique: jansson merged duplicates */
                d->kv[d->n].k = k;
                d->kv[d->n].v = v;
                d->n++;
            } else {
                jdict_set(st, NULL, d, k, v);
            }
        }
        return jv_dict(d);
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        struct jlist *l = jlist_new(st, JL_LIST, (uint32_t)n);
        for (size_t i = 0; i < n; i++)
            l->v[i] = jjson_to_value(st, json_array_get(j, i), depth + 1);
        l->n = (uint32_t)n;
        return jv_list(l);
    }
    case JSON_STRING:
        return jv_str(json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        return jv_int((int64_t)json_integer_value(j));
    case JSON_REAL:
        return jv_float(json_real_value(j));
    case JSON_TRUE:
        return jv_bool(1);
    case JSON_FALSE:
        return jv_bool(0);
    default:
        return jv_none();
    }
}

/* ---- json.dumps ----------------------------------------------------------------- */

static const char hexd[] = "0123456789abcdef";

static void put_u(jst *st, struct jbuf *b, unsigned c)
{
    char e[6] = {'\\', 'u', hexd[(c >> 12) & 15], hexd[(c >> 8) & 15], hexd[(c >> 4) & 15],
                 hexd[c & 15]};
    jbuf_put(st, b, e, 6);
}

static void dump_string(jst *st, struct jbuf *b, const char *s, size_t n, int ascii)
{
    jbuf_putc(st, b, '"');
    size_t run = 0; /* start of the pending run of bytes copied as they are */
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default: break;
        }
        if (!esc && c >= 0x20 && (c < 0x7f || !ascii)) {
            i++;
            continue;
        }
        jbuf_put(st, b, s + run, i - run);
        if (esc) {
            jbuf_put(st, b, esc, 2);
            i++;
        } else if (c < 0x80) {
            put_u(st, b, c);
            i++;
        } else {
            size_t adv;
            uint32_t cp = jstr_decode(s + i, n - i, &adv);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                put_u(st, b, 0xD800 | (cp >> 10));
                put_u(st, b, 0xDC00 | (cp & 0x3FF));
            } else {
                put_u(st, b, cp);
            }
            i += adv;
        }
        run = i;
    }
    jbuf_put(st, b, s + run, n - run);
    jbuf_putc(st, b, '"');
}

static void dump_float(jst *st, struct jbuf *b, double f)
{
    char num[32];
    if (isnan(f))
        jbuf_lit(st, b, "NaN");
    else if (isinf(f))
        jbuf_put(st, b, f > 0 ? "Infinity" : "-Infinity", f > 0 ? 8 : 9);
    else
        jbuf_put(st, b, num, jnum_float_repr(f, num));
}

static void newline_indent(jst *st, struct jbuf *b, const struct jdump_opts *o, unsigned level)
{
    jbuf_putc(st, b, '\n');
    for (unsigned i = 0; i < level; i++)
        jbuf_put(st, b, o->indent, o->indent_len);
}

static void dump(jst *st, const jnode *at, struct jbuf *b, jv v, const struct jdump_opts *o,
                 unsigned level);

/* A dict key as json.dumps converts it. */
static void dump_key(jst *st, const jnode *at, struct jbuf *b, jv k, const struct jdump_opts *o)
{
    char num[40];
    switch (k.t) {
    case JT_STR:
        dump_string(st, b, k.u.s, k.n, o->ensure_ascii);
        return;
    case JT_BOOL:
        jbuf_put(st, b, k.u.i ? "\"true\"" : "\"false\"", k.u.i ? 6 : 7);
        return;
    case JT_NONE:
        jbuf_lit(st, b, "\"null\"");
        return;
    case JT_INT:
        jbuf_put(st, b, num, (size_t)snprintf(num, sizeof(num), "\"%lld\"", (long long)k.u.i));
        return;
    case JT_FLOAT:
        jbuf_putc(st, b, '"');
        dump_float(st, b, k.u.f);
        jbuf_putc(st, b, '"');
        return;
    default:
        jfail(st, at, RS_JINJA_ERR_TYPE, "keys must be str, int, float, bool or None, not %s",
              jv_type_name(k));
    }
}

/* Stable merge sort of dict items by key (json's sort_keys: sorted(d.items())). */
static void sort_items(jst *st, const jnode *at, struct jkv *kv, uint32_t n)
{
    if (n < 2)
        return;
    struct jkv *tmp = ja_alloc(&st->ar, n * sizeof(*tmp));
    for (uint32_t w = 1; w < n; w *= 2) {
        for (uint32_t lo = 0; lo < n; lo += 2 * w) {
            uint32_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            uint32_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = jv_cmp(st, at, kv[j].k, kv[i].k, "<") < 0 ? kv[j++] : kv[i++];
            while (i < mid)
                tmp[k++] = kv[i++];
            while (j < hi)
                tmp[k++] = kv[j++];
        }
        memcpy(kv, tmp, n * sizeof(*tmp));
    }
}

static void dump_dict(jst *st, const jnode *at, struct jbuf *b, const struct jdict *d,
                      const struct jdump_opts *o, unsigned level)
{
    if (!d->n) {
        jbuf_lit(st, b, "{}");
        return;
    }
    const struct jkv *kv = d->kv;
    if (o->sort_keys) {
        struct jkv *copy = ja_alloc(&st->ar, d->n * sizeof(*copy));
        memcpy(copy, d->kv, d->n * sizeof(*copy));
        sort_items(st, at, copy, d->n);
        kv = copy;
    }
    jbuf_putc(st, b, '{');
    if (o->indent_set)
        newline_indent(st, b, o, level + 1);
    for (uint32_t i = 0; i < d->n; i++) {
        if (i) {
            jbuf_put(st, b, o->item_sep, o->item_sep_len);
            if (o->indent_set)
                newline_indent(st, b, o, level + 1);
        }
        dump_key(st, at, b, kv[i].k, o);
        jbuf_put(st, b, o->key_sep, o->key_sep_len);
        dump(st, at, b, kv[i].v, o, level + 1);
    }
    if (o->indent_set)
        newline_indent(st, b, o, level);
    jbuf_putc(st, b, '}');
}

static void dump_list(jst *st, const jnode *at, struct jbuf *b, const struct jlist *l,
                      const struct jdump_opts *o, unsigned level)
{
    if (!l->n) {
        jbuf_lit(st, b, "[]");
        return;
    }
    jbuf_putc(st, b, '[');
    if (o->indent_set)
        newline_indent(st, b, o, level + 1);
    for (uint32_t i = 0; i < l->n; i++) {
        if (i) {
            jbuf_put(st, b, o->item_sep, o->item_sep_len);
            if (o->indent_set)
                newline_indent(st, b, o, level + 1);
        }
        dump(st, at, b, l->v[i], o, level + 1);
    }
    if (o->indent_set)
        newline_indent(st, b, o, level);
    jbuf_putc(st, b, ']');
}

static void dump(jst *st, const jnode *at, struct jbuf *b, jv v, const struct jdump_opts *o,
                 unsigned level)
{
    char num[40];
    switch (v.t) {
    case JT_NONE:
        jbuf_lit(st, b, "null");
        return;
    case JT_BOOL:
        jbuf_put(st, b, v.u.i ? "true" : "false", v.u.i ? 4 : 5);
        return;
    case JT_INT:
        jbuf_put(st, b, num, (size_t)snprintf(num, sizeof(num), "%lld", (long long)v.u.i));
        return;
    case JT_FLOAT:
        dump_float(st, b, v.u.f);
        return;
    case JT_STR:
        dump_string(st, b, v.u.s, v.n, o->ensure_ascii);
        return;
    case JT_DICT:
        break;
    case JT_LIST:
        if (v.u.l->kind == JL_LIST || v.u.l->kind == JL_TUPLE)
            break;
        /* fall through */
    default:
        jfail(st, at, RS_JINJA_ERR_TYPE, "Object of type %s is not JSON serializable",
              jv_type_name(v));
    }
    if (level >= MAX_JSON_DEPTH)
        jfail(st, at, RS_JINJA_ERR_LIMIT, "value nested too deeply for tojson");
    jstep(st, at, 1);
    if (v.t == JT_LIST)
        dump_list(st, at, b, v.u.l, o, level);
    else
        dump_dict(st, at, b, v.u.d, o, level);
}

void jjson_dump(jst *st, const jnode *at, struct jbuf *b, jv v, const struct jdump_opts *o)
{
    dump(st, at, b, v, o, 0);
}

/* SPDX-License-Identifier: MIT */
/*
 * JSON schema (JSON text, parsed with jansson) into the grammar IR: type
 * (one or a list), properties / required / additionalProperties, enum, const,
 * items / prefixItems / additionalItems / minItems / maxItems, minLength /
 * maxLength / pattern (grammar_regex.c), minimum / maximum / exclusive*
 * (grammar_number.c, draft-04 boolean forms too), anyOf / oneOf, single-entry
 * allOf, $ref to "#..." JSON pointers ($defs, definitions, recursion). Every
 * generated value validates: properties come in declared order, additional
 * properties only when additionalProperties is true or a schema (then after
 * the declared ones, with keys spelled so none equals a declared key), and
 * keywords this converter cannot honour are refused (RS_EUNSUPPORTED) rather
 * than ignored. Errors name the JSON pointer ("#/properties/age/minimum: ...").
 * Leaves out: multipleOf, not, if/then/else, uniqueItems, patternProperties,
 * min/maxProperties, contains, remote $refs; "format" is an annotation here.
 */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar_impl.h"
#include "common/utf8.h"

struct sc_ref {
    char *ptr;
    uint32_t rule;
};

struct sc {
    struct gx_ir *ir;
    json_t *doc;
    char *err;
    size_t err_len;
    rs_err rc;
    uint32_t depth;
    char path[1024];
    size_t plen;
    struct sc_ref *refs;
    size_t n_refs, cap_refs;
};

static uint32_t sc_value(struct sc *c, json_t *s);

static int failf(struct sc *c, rs_err rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int failf(struct sc *c, rs_err rc, const char *fmt, ...)
{
    if (c->rc != RS_OK)
        return -1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    gx_fail(c->err, c->err_len, rc, "#%s: %s", c->path, msg);
    c->rc = rc;
    return -1;
}

/* Appends "/key" (escaped as a JSON pointer) to the path; returns the old length. */
static size_t path_push(struct sc *c, const char *key)
{
    size_t old = c->plen;
    if (c->plen + 2 < sizeof(c->path))
        c->path[c->plen++] = '/';
    for (const char *k = key; *k && c->plen + 3 < sizeof(c->path); k++) {
        if (*k == '~' || *k == '/') {
            c->path[c->plen++] = '~';
            c->path[c->plen++] = *k == '~' ? '0' : '1';
        } else {
            c->path[c->plen++] = *k;
        }
    }
    c->path[c->plen] = '\0';
    return old;
}

static size_t path_push_index(struct sc *c, size_t i)
{
    char b[24];
    snprintf(b, sizeof(b), "%zu", i);
    return path_push(c, b);
}

static void path_pop(struct sc *c, size_t old)
{
    c->plen = old;
    c->path[old] = '\0';
}

/* --- keyword table ---------------------------------------------------------------------- */

enum kw_kind { KW_HANDLED, KW_UNSUPPORTED };

static const struct {
    const char *name;
    enum kw_kind kind;
} kw_table[] = {
    {"type", KW_HANDLED}, {"enum", KW_HANDLED}, {"const", KW_HANDLED}, {"anyOf", KW_HANDLED},
    {"oneOf", KW_HANDLED}, {"allOf", KW_HANDLED}, {"$ref", KW_HANDLED},
    {"properties", KW_HANDLED}, {"required", KW_HANDLED}, {"additionalProperties", KW_HANDLED},
    {"items", KW_HANDLED}, {"prefixItems", KW_HANDLED}, {"additionalItems", KW_HANDLED},
    {"minItems", KW_HANDLED}, {"maxItems", KW_HANDLED}, {"minLength", KW_HANDLED},
    {"maxLength", KW_HANDLED}, {"pattern", KW_HANDLED}, {"minimum", KW_HANDLED},
    {"maximum", KW_HANDLED}, {"exclusiveMinimum", KW_HANDLED}, {"exclusiveMaximum", KW_HANDLED},
    {"uniqueItems", KW_HANDLED}, {"multipleOf", KW_UNSUPPORTED}, {"not", KW_UNSUPPORTED},
    {"if", KW_UNSUPPORTED}, {"then", KW_UNSUPPORTED}, {"else", KW_UNSUPPORTED},
    {"patternProperties", KW_UNSUPPORTED}, {"propertyNames", KW_UNSUPPORTED},
    {"dependentRequired", KW_UNSUPPORTED}, {"dependentSchemas", KW_UNSUPPORTED},
    {"dependencies", KW_UNSUPPORTED}, {"minProperties", KW_UNSUPPORTED},
    {"maxProperties", KW_UNSUPPORTED}, {"contains", KW_UNSUPPORTED},
    {"minContains", KW_UNSUPPORTED}, {"maxContains", KW_UNSUPPORTED},
    {"unevaluatedProperties", KW_UNSUPPORTED}, {"unevaluatedItems", KW_UNSUPPORTED},
    {"$dynamicRef", KW_UNSUPPORTED}, {"$recursiveRef", KW_UNSUPPORTED},
};

/* -1: an unknown keyword (an annotation: ignored). */
static int kw_lookup(const char *k)
{
    for (size_t i = 0; i < sizeof(kw_table) / sizeof(kw_table[0]); i++)
        if (strcmp(kw_table[i].name, k) == 0)
            return (int)i;
    return -1;
}

/* Refuses unsupported keywords; counts handled ones other than `except`. */
static int check_keywords(struct sc *c, json_t *s, const char *except, int *n_other)
{
    const char *k;
    json_t *v;
    *n_other = 0;
    json_object_foreach(s, k, v) {
        int i = kw_lookup(k);
        if (i < 0)
            continue;
        if (kw_table[i].kind == KW_UNSUPPORTED) {
            size_t old = path_push(c, k);
            failf(c, RS_EUNSUPPORTED, "the keyword \"%s\" is not supported", k);
            path_pop(c, old);
            return -1;
        }
        if (strcmp(k, "uniqueItems") == 0 && json_is_true(v)) {
            size_t old = path_push(c, k);
            failf(c, RS_EUNSUPPORTED, "\"uniqueItems\": true is not supported");
            path_pop(c, old);
            return -1;
        }
        if (except == NULL || strcmp(k, except) != 0)
            (*n_other)++;
    }
    return 0;
}

/* --- small functions---------------------------------------------------------------------- */

static uint32_t with_ws(struct sc *c, uint32_t core)
{
    return core == GX_NONE ? GX_NONE : gx_seq2(c->ir, core, gx_json_ws(c->ir));
}

/* Nonnegative integer keyword k of s (absent: dflt). */
static int get_count(struct sc *c, json_t *s, const char *k, uint32_t dflt, uint32_t *out)
{
    json_t *v = json_object_get(s, k);
    *out = dflt;
    if (v == NULL)
        return 0;
    size_t old = path_push(c, k);
    int rc = 0;
    if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v) &&
        json_real_value(v) >= 0 && json_real_value(v) < 4e9)
        *out = (uint32_t)json_real_value(v);
    else if (!json_is_integer(v) || json_integer_value(v) < 0)
        rc = failf(c, RS_EINVAL, "expected a nonnegative integer");
    else if (json_integer_value(v) > (json_int_t)c->ir->lim->max_repeat)
        rc = failf(c, RS_ERANGE, "%lld is above the limit %u", (long long)json_integer_value(v),
                   c->ir->lim->max_repeat);
    else
        *out = (uint32_t)json_integer_value(v);
    path_pop(c, old);
    return rc;
}

/* The JSON text of v, compact, as a literal node followed by whitespace. */
static uint32_t literal(struct sc *c, json_t *v)
{
    char *txt = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
    if (txt == NULL) {
        c->ir->err = RS_ENOMEM;
        return GX_NONE;
    }
    uint32_t n = with_ws(c, gx_bytes(c->ir, txt, strlen(txt)));
    free(txt);
    return n;
}

/* Whether v has JSON type t ("integer" also matches integral reals, as validators do). */
static int type_matches(json_t *v, const char *t)
{
    if (strcmp(t, "string") == 0)
        return json_is_string(v);
    if (strcmp(t, "integer") == 0)
        return json_is_integer(v) ||
               (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v));
    if (strcmp(t, "number") == 0)
        return json_is_number(v);
    if (strcmp(t, "boolean") == 0)
        return json_is_boolean(v);
    if (strcmp(t, "null") == 0)
        return json_is_null(v);
    if (strcmp(t, "object") == 0)
        return json_is_object(v);
    return strcmp(t, "array") == 0 && json_is_array(v);
}

static int type_allows(json_t *type, json_t *v)
{
    if (type == NULL)
        return 1;
    if (json_is_string(type))
        return type_matches(v, json_string_value(type));
    size_t i;
    json_t *t;
    json_array_foreach(type, i, t) if (json_is_string(t) && type_matches(v, json_string_value(t)))
        return 1;
    return 0;
}

/* enum (array) or const (single value), keeping values of the schema's type. */
static uint32_t enum_node(struct sc *c, json_t *s, json_t *vals, const char *key)
{
    size_t old = path_push(c, key);
    struct gx_list l = {0};
    json_t *type = json_object_get(s, "type");
    uint32_t out = GX_NONE;
    if (json_is_array(vals) && strcmp(key, "enum") == 0) {
        size_t i;
        json_t *v;
        json_array_foreach(vals, i, v) if (type_allows(type, v) &&
                                           gx_list_push(c->ir, &l, literal(c, v)))
            goto done;
        if (l.n == 0) {
            failf(c, RS_EINVAL, "no value of the enum %s", json_array_size(vals)
                  ? "has the schema's type" : "(it is empty)");
            goto done;
        }
        out = gx_alt(c->ir, l.v, l.n);
    } else if (strcmp(key, "enum") == 0) {
        failf(c, RS_EINVAL, "\"enum\" must be an array");
    } else if (!type_allows(type, vals)) {
        failf(c, RS_EINVAL, "the \"const\" value does not have the schema's type");
    } else {
        out = literal(c, vals);
    }
done:
    gx_list_free(&l);
    path_pop(c, old);
    return out;
}

/* --- $ref ------------------------------------------------------------------------------------ */

/* Resolves "#/a/b~1c" in the document; NULL with an error when it does not exist. */
static json_t *resolve(struct sc *c, const char *ref)
{
    if (ref[0] != '#')
        return failf(c, RS_EUNSUPPORTED, "only local references (\"#...\") are supported, "
                     "not \"%.100s\"", ref), NULL;
    json_t *cur = c->doc;
    const char *p = ref + 1;
    while (*p == '/') {
        char seg[256];
        size_t n = 0;
        for (p++; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1'))
                ch = p[1] == '0' ? '~' : '/', p++;
            if (n + 1 >= sizeof(seg))
                return failf(c, RS_EINVAL, "reference segment too long"), NULL;
            seg[n++] = ch;
        }
        seg[n] = '\0';
        if (json_is_object(cur))
            cur = json_object_get(cur, seg);
        else if (json_is_array(cur) && n > 0 && strspn(seg, "0123456789") == n)
            cur = json_array_get(cur, strtoul(seg, NULL, 10));
        else
            cur = NULL;
        if (cur == NULL)
            return failf(c, RS_EINVAL, "reference \"%.100s\" does not resolve", ref), NULL;
    }
    if (*p != '\0')
        return failf(c, RS_EINVAL, "reference \"%.100s\" is not a JSON pointer", ref), NULL;
    return cur;
}

static uint32_t ref_node(struct sc *c, json_t *s)
{
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (ref == NULL)
        return failf(c, RS_EINVAL, "\"$ref\" must be a string"), GX_NONE;
    for (size_t i = 0; i < c->n_refs; i++)
        if (strcmp(c->refs[i].ptr, ref) == 0)
            return gx_ref(c->ir, c->refs[i].rule);
    json_t *target = resolve(c, ref);
    if (target == NULL)
        return GX_NONE;
    uint32_t rule = gx_rule_fresh(c->ir, "ref");
    struct sc_ref r = {strdup(ref), rule};
    if (r.ptr == NULL || rule == GX_NONE || GX_PUSH(c->refs, c->n_refs, c->cap_refs, r)) {
        free(r.ptr);
        c->ir->err = RS_ENOMEM;
        return GX_NONE;
    }
    gx_rule_set_origin(c->ir, rule, ref, strlen(ref));
    /* errors inside the target name the target's pointer */
    char saved[sizeof(c->path)];
    size_t saved_len = c->plen;
    memcpy(saved, c->path, sizeof(saved));
    snprintf(c->path, sizeof(c->path), "%s", ref + 1);
    c->plen = strlen(c->path);
    uint32_t body = sc_value(c, target);
    memcpy(c->path, saved, sizeof(saved));
    c->plen = saved_len;
    if (body == GX_NONE)
        return GX_NONE;
    c->ir->rules[rule].body = body;
    return gx_ref(c->ir, rule);
}

/* --- strings, numbers ---------------------------------------------------------------------- */

static uint32_t t_string(struct sc *c, json_t *s)
{
    json_t *pat = json_object_get(s, "pattern");
    uint32_t lo, hi;
    if (get_count(c, s, "minLength", 0, &lo) || get_count(c, s, "maxLength", GX_INF, &hi))
        return GX_NONE;
    int has_len = json_object_get(s, "minLength") || json_object_get(s, "maxLength");
    if (hi != GX_INF && hi < lo)
        return failf(c, RS_EINVAL, "maxLength %u is below minLength %u", hi, lo), GX_NONE;
    if (pat == NULL) {
        if (!has_len)
            return gx_json_string(c->ir);
        return gx_seq3(c->ir, gx_str(c->ir, "\""), gx_rep(c->ir, gx_json_char(c->ir), lo, hi),
                       gx_str(c->ir, "\""));
    }
    size_t old = path_push(c, "pattern");
    uint32_t body = GX_NONE;
    if (!json_is_string(pat))
        failf(c, RS_EINVAL, "\"pattern\" must be a string");
    else if (has_len)
        failf(c, RS_EUNSUPPORTED, "\"pattern\" together with minLength/maxLength is not "
              "supported (put the length in the pattern)");
    else {
        char where[sizeof(c->path) + 2];
        snprintf(where, sizeof(where), "#%s", c->path);
        rs_err rc = gx_regex_parse(c->ir, json_string_value(pat), json_string_length(pat),
                                   GX_RE_JSON_BODY, where, &body, c->err, c->err_len);
        if (rc != RS_OK)
            c->rc = rc, body = GX_NONE;
    }
    path_pop(c, old);
    if (body == GX_NONE)
        return GX_NONE;
    return gx_seq3(c->ir, gx_str(c->ir, "\""), body, gx_str(c->ir, "\""));
}

/* The bound under key k as decimal text into buf ("" when absent); -1 on error. */
static int bound_text(struct sc *c, json_t *s, const char *k, char *buf, size_t cap)
{
    json_t *v = json_object_get(s, k);
    buf[0] = '\0';
    if (v == NULL || json_is_boolean(v))
        return 0;
    size_t old = path_push(c, k);
    int rc = 0;
    if (json_is_integer(v)) {
        snprintf(buf, cap, "%lld", (long long)json_integer_value(v));
    } else if (json_is_real(v) && isfinite(json_real_value(v))) {
        double d = json_real_value(v);
        for (int prec = 1; prec <= 17; prec++) { /* shortest text that reads back as d */
            snprintf(buf, cap, "%.*g", prec, d);
            if (strtod(buf, NULL) == d)
                break;
        }
    } else {
        rc = failf(c, RS_EINVAL, "expected a number");
    }
    path_pop(c, old);
    return rc;
}

/* Picks the tighter of an inclusive bound (inc) and an exclusive one (exc) into *out. */
static const char *tighter(const char *inc, const char *exc, int lower, int *excl)
{
    *excl = 0;
    if (!*exc)
        return *inc ? inc : NULL;
    if (!*inc) {
        *excl = 1;
        return exc;
    }
    double a = strtod(inc, NULL), b = strtod(exc, NULL);
    int exc_wins = lower ? b >= a : b <= a;
    *excl = exc_wins;
    return exc_wins ? exc : inc;
}

static uint32_t t_number(struct sc *c, json_t *s, int integer)
{
    char mn[64], mx[64], emn[64], emx[64];
    if (bound_text(c, s, "minimum", mn, sizeof(mn)) || bound_text(c, s, "maximum", mx, sizeof(mx)) ||
        bound_text(c, s, "exclusiveMinimum", emn, sizeof(emn)) ||
        bound_text(c, s, "exclusiveMaximum", emx, sizeof(emx)))
        return GX_NONE;
    int lx, hx;
    const char *lo = tighter(mn, emn, 1, &lx), *hi = tighter(mx, emx, 0, &hx);
    /* draft-04: "exclusiveMinimum": true applies to "minimum" */
    if (json_is_true(json_object_get(s, "exclusiveMinimum")) && *mn)
        lx = 1;
    if (json_is_true(json_object_get(s, "exclusiveMaximum")) && *mx)
        hx = 1;
    if (lo == NULL && hi == NULL)
        return integer ? gx_json_integer(c->ir) : gx_json_number(c->ir);
    uint32_t out;
    char msg[256];
    rs_err rc = gx_number_range(c->ir, lo, lx, hi, hx, integer, &out, msg, sizeof(msg));
    if (rc != RS_OK)
        return failf(c, rc, "%s", msg), GX_NONE;
    return out;
}

/* --- objects -------------------------------------------------------------------------------- */

struct prop {
    const char *name;
    json_t *schema; /* NULL: any value */
    int required;
    uint32_t cp_off, cp_len; /* the name's code points in a shared buffer */
};

/* "name" ws ":" ws value, errors naming #/properties/name. */
static uint32_t member(struct sc *c, const char *name, uint32_t key, json_t *schema)
{
    size_t old = path_push(c, "properties");
    path_push(c, name);
    uint32_t v = schema ? sc_value(c, schema) : gx_json_value_rule(c->ir);
    path_pop(c, old);
    if (v == GX_NONE || key == GX_NONE)
        return GX_NONE;
    uint32_t ws = gx_json_ws(c->ir);
    return gx_seq(c->ir, (uint32_t[]){key, ws, gx_str(c->ir, ":"), ws, v}, 5);
}

/* Code point sets for extra keys: one JSON string character in `set` (pairs). */
static uint32_t key_char(struct sc *c, const uint32_t *except, size_t n_except)
{
    uint32_t *r = malloc((n_except + 1) * 2 * sizeof(uint32_t));
    if (r == NULL) {
        c->ir->err = RS_ENOMEM;
        return GX_NONE;
    }
    for (size_t i = 0; i < n_except; i++)
        r[2 * i] = r[2 * i + 1] = except[i];
    uint32_t plain = gx_class(c->ir, r, n_except, 1); /* normalized complement */
    free(r);
    if (plain == GX_NONE)
        return GX_NONE;
    const struct gx_node *nd = &c->ir->nodes[plain];
    size_t pairs = nd->b;
    uint32_t *copy = malloc((pairs + 1) * 2 * sizeof(uint32_t));
    if (copy == NULL) {
        c->ir->err = RS_ENOMEM;
        return GX_NONE;
    }
    if (pairs > 0)
        memcpy(copy, c->ir->ranges + 2 * (size_t)nd->a, pairs * 2 * sizeof(uint32_t));
    uint32_t out = gx_json_class_char(c->ir, copy, pairs);
    free(copy);
    return out;
}

/*
 * The rest of a JSON string literal (after the opening quote, up to and with the
 * closing one) whose value is not one of the names p[lo..hi), which share their first
 * d code points. Every character has one spelling, so unequal spellings mean unequal keys.
 */
static uint32_t not_names(struct sc *c, const struct prop *p, size_t lo, size_t hi,
                          const uint32_t *cps, uint32_t d)
{
    struct gx_list alts = {0}, nexts = {0};
    uint32_t quote = gx_str(c->ir, "\""), out = GX_NONE;
    int ends_here = 0;
    for (size_t i = lo; i < hi; i++)
        if (p[i].cp_len == d)
            ends_here = 1;
        else if (nexts.n == 0 || nexts.v[nexts.n - 1] != cps[p[i].cp_off + d])
            gx_list_push(c->ir, &nexts, cps[p[i].cp_off + d]);
    if (!ends_here)
        gx_list_push(c->ir, &alts, quote);
    uint32_t other = key_char(c, nexts.v, nexts.n);
    uint32_t any = gx_rep(c->ir, key_char(c, NULL, 0), 0, GX_INF);
    gx_list_push(c->ir, &alts, gx_seq3(c->ir, other, any, quote));
    for (size_t i = lo; i < hi;) {
        if (p[i].cp_len == d) {
            i++;
            continue;
        }
        uint32_t cp = cps[p[i].cp_off + d];
        size_t j = i;
        while (j < hi && p[j].cp_len > d && cps[p[j].cp_off + d] == cp)
            j++;
        char b[8];
        uint32_t ch = gx_bytes(c->ir, b, gx_json_escape(cp, b));
        if (gx_list_push(c->ir, &alts, gx_seq2(c->ir, ch, not_names(c, p, i, j, cps, d + 1))))
            goto done;
        i = j;
    }
    out = gx_alt(c->ir, alts.v, alts.n);
done:
    gx_list_free(&alts);
    gx_list_free(&nexts);
    return out;
}

static int prop_cmp_cps(const struct prop *a, const struct prop *b, const uint32_t *cps)
{
    uint32_t n = a->cp_len < b->cp_len ? a->cp_len : b->cp_len;
    for (uint32_t i = 0; i < n; i++)
        if (cps[a->cp_off + i] != cps[b->cp_off + i])
            return cps[a->cp_off + i] < cps[b->cp_off + i] ? -1 : 1;
    return a->cp_len < b->cp_len ? -1 : a->cp_len > b->cp_len;
}

/* Insertion sort (property counts are small) by code points, so equal prefixes are adjacent. */
static void sort_props(struct prop *p, size_t n, const uint32_t *cps)
{
    for (size_t i = 1; i < n; i++) {
        struct prop x = p[i];
        size_t j = i;
        while (j > 0 && prop_cmp_cps(&p[j - 1], &x, cps) > 0)
            p[j] = p[j - 1], j--;
        p[j] = x;
    }
}

/* Collects properties (declared order) and required names not among them into *out. */
static int collect_props(struct sc *c, json_t *props, json_t *req, json_t *addl,
                         struct prop **out, size_t *n_out)
{
    size_t n = 0, cap = 0;
    struct prop *p = NULL;
    const char *k;
    json_t *v;
    if (props != NULL)
        json_object_foreach(props, k, v) {
            struct prop x = {k, v, 0, 0, 0};
            if (GX_PUSH(p, n, cap, x))
                goto oom;
        }
    size_t i;
    json_array_foreach(req, i, v) {
        size_t old = path_push(c, "required");
        path_push_index(c, i);
        const char *name = json_string_value(v);
        path_pop(c, old);
        if (name == NULL)
            goto bad_required;
        size_t j = 0;
        while (j < n && strcmp(p[j].name, name) != 0)
            j++;
        if (j < n) {
            p[j].required = 1;
            continue;
        }
        if (json_is_false(addl)) {
            failf(c, RS_EINVAL, "required property \"%.100s\" is not in \"properties\" and "
                  "additionalProperties is false", name);
            goto fail;
        }
        struct prop x = {name, json_is_object(addl) ? addl : NULL, 1, 0, 0};
        if (GX_PUSH(p, n, cap, x))
            goto oom;
    }
    *out = p;
    *n_out = n;
    return 0;
bad_required:
    failf(c, RS_EINVAL, "\"required\" must list strings");
    goto fail;
oom:
    c->ir->err = RS_ENOMEM;
fail:
    free(p);
    return -1;
}

/* The extra-property member: a key equal to no declared one, then the additional schema. */
static uint32_t extra_member(struct sc *c, struct prop *p, size_t n, json_t *schema)
{
    uint32_t *cps = NULL;
    size_t ncp = 0, cap = 0;
    for (size_t i = 0; i < n; i++) {
        p[i].cp_off = (uint32_t)ncp;
        for (const char *q = p[i].name; *q;) {
            uint32_t cp;
            size_t k = rs_utf8_next(q, strlen(q), &cp);
            if (GX_PUSH(cps, ncp, cap, cp == RS_UTF8_INVALID ? 0xFFFD : cp)) {
                free(cps);
                c->ir->err = RS_ENOMEM;
                return GX_NONE;
            }
            q += k;
        }
        p[i].cp_len = (uint32_t)ncp - p[i].cp_off;
    }
    struct prop *sorted = malloc((n ? n : 1) * sizeof(*sorted));
    uint32_t key = GX_NONE, v = GX_NONE;
    if (sorted != NULL) {
        if (n > 0)
            memcpy(sorted, p, n * sizeof(*p));
        sort_props(sorted, n, cps);
        key = gx_seq2(c->ir, gx_str(c->ir, "\""), not_names(c, sorted, 0, n, cps, 0));
    } else {
        c->ir->err = RS_ENOMEM;
    }
    free(sorted);
    free(cps);
    size_t old = path_push(c, "additionalProperties");
    v = schema ? sc_value(c, schema) : gx_json_value_rule(c->ir);
    path_pop(c, old);
    if (key == GX_NONE || v == GX_NONE)
        return GX_NONE;
    uint32_t ws = gx_json_ws(c->ir);
    return gx_seq(c->ir, (uint32_t[]){key, ws, gx_str(c->ir, ":"), ws, v}, 5);
}

/* "{" ws members "}" with each optional member skippable and commas only between. */
static uint32_t object_body(struct sc *c, struct prop *p, size_t n, uint32_t extra)
{
    struct gx_ir *ir = c->ir;
    uint32_t ws = gx_json_ws(ir), comma = gx_str(ir, ",");
    uint32_t *kv = malloc((n + 1) * sizeof(uint32_t));
    if (kv == NULL) {
        ir->err = RS_ENOMEM;
        return GX_NONE;
    }
    for (size_t i = 0; i < n; i++)
        kv[i] = member(c, p[i].name, gx_json_literal_string(ir, p[i].name, strlen(p[i].name)),
                       p[i].schema);
    /* after: what may follow once something was written; first: while nothing was */
    uint32_t tail = extra != GX_NONE ? gx_rep(ir, gx_seq3(ir, comma, ws, extra), 0, GX_INF)
                                     : gx_empty(ir);
    uint32_t after = tail;
    uint32_t first = extra != GX_NONE ? gx_rep(ir, gx_seq2(ir, extra, tail), 0, 1) : gx_empty(ir);
    for (size_t i = n; i-- > 0;) {
        uint32_t part = gx_seq3(ir, comma, ws, kv[i]);
        uint32_t this_first = gx_seq2(ir, kv[i], after);
        first = p[i].required ? this_first : gx_alt2(ir, this_first, first);
        after = gx_seq2(ir, p[i].required ? part : gx_rep(ir, part, 0, 1), after);
    }
    free(kv);
    return gx_seq(ir, (uint32_t[]){gx_str(ir, "{"), ws, first, gx_str(ir, "}")}, 4);
}

static uint32_t t_object(struct sc *c, json_t *s)
{
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (props != NULL && !json_is_object(props))
        return failf(c, RS_EINVAL, "\"properties\" must be an object"), GX_NONE;
    if (req != NULL && !json_is_array(req))
        return failf(c, RS_EINVAL, "\"required\" must be an array"), GX_NONE;
    if (addl != NULL && !json_is_boolean(addl) && !json_is_object(addl))
        return failf(c, RS_EINVAL, "\"additionalProperties\" must be a boolean or a schema"),
               GX_NONE;
    if (props == NULL && req == NULL && (addl == NULL || json_is_true(addl)))
        return gx_json_object_rule(c->ir);
    struct prop *p;
    size_t n;
    if (collect_props(c, props, req, addl, &p, &n))
        return GX_NONE;
    uint32_t extra = GX_NONE, out = GX_NONE;
    int extras = addl != NULL && !json_is_false(addl);
    if (extras)
        extra = extra_member(c, p, n, json_is_object(addl) ? addl : NULL);
    if (!extras || extra != GX_NONE)
        out = object_body(c, p, n, extra);
    free(p);
    return out;
}

/* --- arrays --------------------------------------------------------------------------------- */

static uint32_t item_node(struct sc *c, json_t *schema, const char *key, size_t index, int indexed)
{
    size_t old = path_push(c, key);
    if (indexed)
        path_push_index(c, index);
    uint32_t v = schema ? sc_value(c, schema) : gx_json_value_rule(c->ir);
    path_pop(c, old);
    return v;
}

static uint32_t t_array(struct sc *c, json_t *s)
{
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    const char *prefix_key = "prefixItems", *items_key = "items";
    if (json_is_array(items)) { /* draft 4-7 tuple form */
        prefix = items, prefix_key = "items";
        items = json_object_get(s, "additionalItems"), items_key = "additionalItems";
    }
    if (prefix != NULL && !json_is_array(prefix))
        return failf(c, RS_EINVAL, "\"%s\" must be an array of schemas", prefix_key), GX_NONE;
    uint32_t m, M;
    if (get_count(c, s, "minItems", 0, &m) || get_count(c, s, "maxItems", GX_INF, &M))
        return GX_NONE;
    size_t k = prefix ? json_array_size(prefix) : 0;
    int tail_ok = items ? !json_is_false(items) : k == 0;
    if (!tail_ok && (M == GX_INF || M > k))
        M = (uint32_t)k;
    if (M < m)
        return failf(c, RS_EINVAL, "minItems %u exceeds the %u items allowed", m, M), GX_NONE;
    if (k > M)
        k = M;
    struct gx_ir *ir = c->ir;
    uint32_t ws = gx_json_ws(ir), comma = gx_str(ir, ",");
    uint32_t R = gx_empty(ir);
    if (tail_ok && (M == GX_INF || M > k)) {
        uint32_t T = item_node(c, json_is_object(items) ? items : NULL, items_key, 0, 0);
        uint32_t rmin = m > k ? m - (uint32_t)k : 0, rmax = M == GX_INF ? GX_INF : M - (uint32_t)k;
        uint32_t more = gx_seq3(ir, comma, ws, T);
        if (k > 0) {
            R = gx_rep(ir, more, rmin, rmax);
        } else {
            uint32_t run = gx_seq2(ir, T, gx_rep(ir, more, rmin ? rmin - 1 : 0,
                                                 rmax == GX_INF ? GX_INF : rmax - 1));
            R = rmin ? run : gx_rep(ir, run, 0, 1);
        }
    }
    for (size_t i = k; i-- > 0;) {
        uint32_t P = item_node(c, json_array_get(prefix, i), prefix_key, i, 1);
        uint32_t cur = gx_seq2(ir, i == 0 ? P : gx_seq3(ir, comma, ws, P), R);
        R = i < m ? cur : gx_rep(ir, cur, 0, 1);
    }
    return gx_seq(ir, (uint32_t[]){gx_str(ir, "["), ws, R, gx_str(ir, "]")}, 4);
}

/* --- dispatch ------------------------------------------------------------------------------- */

static uint32_t t_core(struct sc *c, json_t *s, const char *t)
{
    if (strcmp(t, "string") == 0)
        return t_string(c, s);
    if (strcmp(t, "integer") == 0 || strcmp(t, "number") == 0)
        return t_number(c, s, t[0] == 'i');
    if (strcmp(t, "boolean") == 0)
        return gx_alt2(c->ir, gx_str(c->ir, "true"), gx_str(c->ir, "false"));
    if (strcmp(t, "null") == 0)
        return gx_str(c->ir, "null");
    if (strcmp(t, "object") == 0)
        return t_object(c, s);
    if (strcmp(t, "array") == 0)
        return t_array(c, s);
    size_t old = path_push(c, "type");
    failf(c, RS_EINVAL, "unknown type \"%.40s\"", t);
    path_pop(c, old);
    return GX_NONE;
}

static int has_any(json_t *s, const char *const *keys)
{
    for (; *keys; keys++)
        if (json_object_get(s, *keys) != NULL)
            return 1;
    return 0;
}

/* The types a schema without "type" can take, judged by its keywords; NULL: any value. */
static uint32_t untyped(struct sc *c, json_t *s)
{
    static const char *const obj[] = {"properties", "required", "additionalProperties", NULL};
    static const char *const arr[] = {"items", "prefixItems", "additionalItems", "minItems",
                                      "maxItems", NULL};
    static const char *const str[] = {"minLength", "maxLength", "pattern", NULL};
    static const char *const num[] = {"minimum", "maximum", "exclusiveMinimum",
                                      "exclusiveMaximum", NULL};
    const char *const *groups[] = {obj, arr, str, num};
    const char *types[] = {"object", "array", "string", "number"};
    struct gx_list l = {0};
    for (int i = 0; i < 4; i++)
        if (has_any(s, groups[i]) && gx_list_push(c->ir, &l, with_ws(c, t_core(c, s, types[i])))) {
            gx_list_free(&l);
            return GX_NONE;
        }
    uint32_t out = l.n ? gx_alt(c->ir, l.v, l.n) : gx_json_value_rule(c->ir);
    gx_list_free(&l);
    return out;
}

static uint32_t typed(struct sc *c, json_t *s, json_t *type)
{
    if (json_is_string(type))
        return with_ws(c, t_core(c, s, json_string_value(type)));
    size_t old = path_push(c, "type");
    if (!json_is_array(type) || json_array_size(type) == 0) {
        failf(c, RS_EINVAL, "\"type\" must be a type name or a nonempty array of them");
        path_pop(c, old);
        return GX_NONE;
    }
    path_pop(c, old);
    struct gx_list l = {0};
    size_t i;
    json_t *t;
    json_array_foreach(type, i, t) {
        if (!json_is_string(t)) {
            old = path_push(c, "type");
            failf(c, RS_EINVAL, "\"type\" entries must be strings");
            path_pop(c, old);
            gx_list_free(&l);
            return GX_NONE;
        }
        if (gx_list_push(c->ir, &l, with_ws(c, t_core(c, s, json_string_value(t))))) {
            gx_list_free(&l);
            return GX_NONE;
        }
    }
    uint32_t out = gx_alt(c->ir, l.v, l.n);
    gx_list_free(&l);
    return out;
}

/* anyOf / oneOf (as anyOf) / a one-entry allOf. */
static uint32_t combinator(struct sc *c, json_t *s, const char *key, int n_other)
{
    json_t *list = json_object_get(s, key);
    size_t old = path_push(c, key);
    uint32_t out = GX_NONE;
    struct gx_list l = {0};
    if (n_other > 0)
        failf(c, RS_EUNSUPPORTED, "\"%s\" next to other validation keywords is not supported "
              "(move them into each alternative)", key);
    else if (!json_is_array(list) || json_array_size(list) == 0)
        failf(c, RS_EINVAL, "\"%s\" must be a nonempty array of schemas", key);
    else if (key[1] == 'l' && json_array_size(list) != 1)
        failf(c, RS_EUNSUPPORTED, "\"allOf\" with more than one schema is not supported");
    else {
        size_t i;
        json_t *sub;
        json_array_foreach(list, i, sub) {
            size_t o2 = path_push_index(c, i);
            uint32_t v = sc_value(c, sub);
            path_pop(c, o2);
            if (gx_list_push(c->ir, &l, v))
                goto done;
        }
        out = gx_alt(c->ir, l.v, l.n);
    }
done:
    gx_list_free(&l);
    path_pop(c, old);
    return out;
}

static uint32_t sc_value_inner(struct sc *c, json_t *s)
{
    if (json_is_true(s))
        return gx_json_value_rule(c->ir);
    if (json_is_false(s))
        return failf(c, RS_EINVAL, "the schema false allows no value"), GX_NONE;
    if (!json_is_object(s))
        return failf(c, RS_EINVAL, "a schema must be an object or a boolean"), GX_NONE;
    static const char *const combinators[] = {"$ref", "anyOf", "oneOf", "allOf"};
    for (int i = 0; i < 4; i++) {
        if (json_object_get(s, combinators[i]) == NULL)
            continue;
        int n_other;
        if (check_keywords(c, s, combinators[i], &n_other))
            return GX_NONE;
        if (i == 0) {
            if (n_other > 0)
                return failf(c, RS_EUNSUPPORTED, "keywords next to \"$ref\" are not supported"),
                       GX_NONE;
            return ref_node(c, s);
        }
        return combinator(c, s, combinators[i], n_other);
    }
    int n_other;
    if (check_keywords(c, s, NULL, &n_other))
        return GX_NONE;
    if (json_object_get(s, "const") != NULL)
        return enum_node(c, s, json_object_get(s, "const"), "const");
    if (json_object_get(s, "enum") != NULL)
        return enum_node(c, s, json_object_get(s, "enum"), "enum");
    json_t *type = json_object_get(s, "type");
    return type ? typed(c, s, type) : untyped(c, s);
}

static uint32_t sc_value(struct sc *c, json_t *s)
{
    if (c->rc != RS_OK)
        return GX_NONE;
    if (++c->depth > c->ir->lim->max_nesting) {
        c->depth--;
        return failf(c, RS_ERANGE, "schema nested deeper than %u", c->ir->lim->max_nesting),
               GX_NONE;
    }
    uint32_t out = sc_value_inner(c, s);
    c->depth--;
    return out;
}

rs_err gx_schema_build(struct gx_ir *ir, const char *text, size_t len, char *err, size_t err_len)
{
    if (len > ir->lim->max_text)
        return gx_fail(err, err_len, RS_ERANGE, "schema longer than %zu bytes", ir->lim->max_text);
    json_error_t je;
    json_t *doc = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (doc == NULL)
        return gx_fail(err, err_len, RS_EINVAL, "line %d, column %d: %s", je.line, je.column,
                       je.text);
    struct sc c = {.ir = ir, .doc = doc, .err = err, .err_len = err_len};
    uint32_t root = gx_rule_get(ir, "root", 4);
    uint32_t v = root == GX_NONE ? GX_NONE : sc_value(&c, doc);
    for (size_t i = 0; i < c.n_refs; i++)
        free(c.refs[i].ptr);
    free(c.refs);
    json_decref(doc);
    if (c.rc != RS_OK)
        return c.rc;
    if (v == GX_NONE || ir->err != RS_OK)
        return gx_ir_error(ir, err, err_len);
    ir->rules[root].body = v;
    return RS_OK;
}

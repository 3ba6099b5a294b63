/* SPDX-License-Identifier: MIT */
/*
 * Python methods a template may call on values, for the chat-template
 * renderer: str (split, strip, startswith, replace, find, join, format, the
 * is* predicates, ...), dict (get, items, keys, values, copy), list and tuple
 * (count, index, copy, and pop/clear, which the immutable sandbox of Jinja 3.1
 * does not block), and cycler. The methods ImmutableSandboxedEnvironment
 * refuses (list.append/extend/insert/remove/reverse/sort, dict.update/pop/
 * popitem/setdefault/clear) are found but marked unsafe, so using them raises
 * SecurityError. On Markup strings the methods Markup wraps return Markup and
 * escape their string arguments, as markupsafe does.
 */
#include <string.h>

#include "common/jinja_impl.h"

#define P(...) ((const char *const[]){__VA_ARGS__, NULL})
#define POS JB_POSONLY

static int given(jv v) { return v.t != JT_MISSING && v.t != JT_NONE; }

static jv need_str(jst *st, const jnode *at, jv v, const char *what)
{
    if (v.t != JT_STR) {
        if (v.t == JT_UNDEF)
            jv_undef_fail(st, at, v);
        jfail(st, at, RS_JINJA_ERR_TYPE, "%s must be str, not %s", what, jv_type_name(v));
    }
    return v;
}

static jv arg_escaped(jst *st, jv self, jv arg)
{
    return self.mk && arg.t == JT_STR ? jstr_escape(st, arg) : arg;
}

static jv keep_mk(jv self, jv r)
{
    if (r.t == JT_STR)
        r.mk = self.mk;
    return r;
}

static int64_t opt_int(jst *st, const jnode *at, jv v, int64_t dflt)
{
    return given(v) ? jarg_int(st, at, v, "index") : dflt;
}

/* ---- str ------------------------------------------------------------------------------- */

static jv m_split(jst *st, const jnode *at, jv s, struct jcall *c)
{
    jv sep = given(c->a[0]) ? need_str(st, at, c->a[0], "sep") : jv_none();
    return jstr_split(st, at, s, sep, given(c->a[1]) ? jarg_int(st, at, c->a[1], "maxsplit") : -1, 0);
}

static jv m_rsplit(jst *st, const jnode *at, jv s, struct jcall *c)
{
    jv sep = given(c->a[0]) ? need_str(st, at, c->a[0], "sep") : jv_none();
    return jstr_split(st, at, s, sep, given(c->a[1]) ? jarg_int(st, at, c->a[1], "maxsplit") : -1, 1);
}

static jv m_splitlines(jst *st, const jnode *at, jv s, struct jcall *c)
{
    return jstr_splitlines(st, s, jarg_bool(st, at, c->a[0], 0));
}

static jv strip_n(jst *st, const jnode *at, jv s, struct jcall *c, int which)
{
    if (!given(c->a[0]))
        return jstr_strip(st, s, NULL, 0, 0, which);
    jv chars = arg_escaped(st, s, need_str(st, at, c->a[0], "strip arg"));
    return jstr_strip(st, s, chars.u.s, chars.n, 1, which);
}

static jv m_strip(jst *st, const jnode *at, jv s, struct jcall *c) { return strip_n(st, at, s, c, 3); }
static jv m_lstrip(jst *st, const jnode *at, jv s, struct jcall *c) { return strip_n(st, at, s, c, 1); }
static jv m_rstrip(jst *st, const jnode *at, jv s, struct jcall *c) { return strip_n(st, at, s, c, 2); }

/* Python's tailmatch over code points. */
static int tailmatch(jst *st, jv s, jv sub, int64_t start, int64_t end, int suffix)
{
    jstep(st, NULL, s.n / 64);
    int64_t len = (int64_t)jstr_cplen(s.u.s, s.n), sublen = (int64_t)jstr_cplen(sub.u.s, sub.n);
    if (end > len)
        end = len;
    else if (end < 0 && (end += len) < 0)
        end = 0;
    if (start < 0 && (start += len) < 0)
        start = 0;
    if (end - sublen < start)
        return 0;
    if (sublen == 0)
        return 1;
    size_t a = jstr_cpoff(s.u.s, s.n, (size_t)(suffix ? end - sublen : start));
    return a + sub.n <= s.n && memcmp(s.u.s + a, sub.u.s, sub.n) == 0;
}

static jv starts_ends(jst *st, const jnode *at, jv s, struct jcall *c, int suffix)
{
    int64_t start = opt_int(st, at, c->a[1], 0), end = opt_int(st, at, c->a[2], INT64_MAX);
    jv p = c->a[0];
    if (p.t == JT_LIST && p.u.l->kind == JL_TUPLE) {
        for (uint32_t i = 0; i < p.u.l->n; i++)
            if (tailmatch(st, s, need_str(st, at, p.u.l->v[i], "tuple item"), start, end, suffix))
                return jv_bool(1);
        return jv_bool(0);
    }
    if (p.t != JT_STR)
        jfail(st, at, RS_JINJA_ERR_TYPE,
              "%s first arg must be str or a tuple of str, not %s",
              suffix ? "endswith" : "startswith", jv_type_name(p));
    return jv_bool(tailmatch(st, s, p, start, end, suffix));
}

static jv m_startswith(jst *st, const jnode *at, jv s, struct jcall *c) { return starts_ends(st, at, s, c, 0); }
static jv m_endswith(jst *st, const jnode *at, jv s, struct jcall *c) { return starts_ends(st, at, s, c, 1); }

static jv m_replace(jst *st, const jnode *at, jv s, struct jcall *c)
{
    jv old = arg_escaped(st, s, need_str(st, at, c->a[0], "replace() argument 1"));
    jv new_ = arg_escaped(st, s, need_str(st, at, c->a[1], "replace() argument 2"));
    int64_t count = given(c->a[2]) ? jarg_int(st, at, c->a[2], "count") : -1;
    return keep_mk(s, jstr_replace(st, at, s, old, new_, count));
}

static jv find_n(jst *st, const jnode *at, jv s, struct jcall *c, int right, int raise)
{
    jv sub = need_str(st, at, c->a[0], "substring");
    int64_t r = jstr_find(st, s, sub, opt_int(st, at, c->a[1], 0),
                          opt_int(st, at, c->a[2], INT64_MAX), right);
    if (r < 0 && raise)
        jfail(st, at, RS_JINJA_ERR_VALUE, "substring not found");
    return jv_int(r);
}

static jv m_find(jst *st, const jnode *at, jv s, struct jcall *c) { return find_n(st, at, s, c, 0, 0); }
static jv m_rfind(jst *st, const jnode *at, jv s, struct jcall *c) { return find_n(st, at, s, c, 1, 0); }
static jv m_sindex(jst *st, const jnode *at, jv s, struct jcall *c) { return find_n(st, at, s, c, 0, 1); }
static jv m_rindex(jst *st, const jnode *at, jv s, struct jcall *c) { return find_n(st, at, s, c, 1, 1); }

static jv m_scount(jst *st, const jnode *at, jv s, struct jcall *c)
{
    jv sub = need_str(st, at, c->a[0], "substring");
    return jv_int(jstr_count(st, s, sub, opt_int(st, at, c->a[1], 0),
                             opt_int(st, at, c->a[2], INT64_MAX)));
}

static jv m_upper(jst *st, const jnode *at, jv s, struct jcall *c)
{
    (void)at, (void)c;
    return jstr_upper(st, s);
}
static jv m_lower(jst *st, const jnode *at, jv s, struct jcall *c)
{
    (void)at, (void)c;
    return jstr_lower(st, s);
}
static jv m_capitalize(jst *st, const jnode *at, jv s, struct jcall *c)
{
    (void)at, (void)c;
    return jstr_capitalize(st, s);
}
static jv m_title(jst *st, const jnode *at, jv s, struct jcall *c)
{
    (void)at, (void)c;
    return jstr_title_py(st, s);
}
static jv m_swapcase(jst *st, const jnode *at, jv s, struct jcall *c)
{
    (void)at, (void)c;
    return jstr_swapcase(st, s);
}

static jv m_casefold(jst *st, const jnode *at, jv s, struct jcall *c)
{
    (void)c;
    jstep(st, at, s.n / 64);
    struct jbuf b;
    jbuf_init(st, &b, s.n + 4);
    for (size_t i = 0; i < s.n;) {
        size_t adv;
        uint32_t m[3], cp = jstr_decode(s.u.s + i, s.n - i, &adv);
        int k = jcase_map(cp, 3, m);
        for (int j = 0; j < k; j++)
            jstr_put_cp(st, &b, m[j]);
        i += adv;
    }
    return jbuf_take(&b);
}

/* All code points have one of `flags` (and the string is not empty unless empty_ok). */
static jv all_have(jst *st, jv s, unsigned flags, int empty_ok)
{
    jstep(st, NULL, s.n / 32);
    if (!s.n)
        return jv_bool(empty_ok);
    for (size_t i = 0; i < s.n;) {
        size_t adv;
        uint32_t cp = jstr_decode(s.u.s + i, s.n - i, &adv);
        if (!(jcase_props(cp) & flags))
            return jv_bool(0);
        i += adv;
    }
    return jv_bool(1);
}

#define PRED(name, flags, empty_ok)                                                           \
    static jv name(jst *st, const jnode *at, jv s, struct jcall *c)                           \
    {                                                                                         \
        (void)at, (void)c;                                                                    \
        return all_have(st, s, flags, empty_ok);                                              \
    }
PRED(m_isalpha, JC_ALPHA, 0)
PRED(m_isdecimal, JC_DECIMAL, 0)
PRED(m_isdigit, JC_DIGIT, 0)
PRED(m_isnumeric, JC_NUMERIC, 0)
PRED(m_isalnum, JC_ALPHA | JC_DECIMAL | JC_DIGIT | JC_NUMERIC, 0)
PRED(m_isspace, JC_SPACE, 0)
PRED(m_isprintable, JC_PRINTABLE, 1)

static jv m_isascii(jst *st, const jnode *at, jv s, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    for (size_t i = 0; i < s.n; i++)
        if ((unsigned char)s.u.s[i] >= 0x80)
            return jv_bool(0);
    return jv_bool(1);
}

static jv m_isidentifier(jst *st, const jnode *at, jv s, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    if (!s.n)
        return jv_bool(0);
    for (size_t i = 0; i < s.n;) {
        size_t adv;
        unsigned p = jcase_props(jstr_decode(s.u.s + i, s.n - i, &adv));
        if (!(p & (i ? JC_IDCONT : JC_IDSTART)))
            return jv_bool(0);
        i += adv;
    }
    return jv_bool(1);
}

static jv case_pred(jst *st, jv s, int upper)
{
    jstep(st, NULL, s.n / 32);
    int cased = 0;
    for (size_t i = 0; i < s.n;) {
        size_t adv;
        unsigned p = jcase_props(jstr_decode(s.u.s + i, s.n - i, &adv));
        i += adv;
        if ((p & (upper ? JC_LOWER : JC_UPPER)) || (p & JC_TITLE))
            return jv_bool(0);
        cased |= (p & (upper ? JC_UPPER : JC_LOWER)) != 0;
    }
    return jv_bool(cased);
}

static jv m_islower(jst *st, const jnode *at, jv s, struct jcall *c)
{
    (void)at, (void)c;
    return case_pred(st, s, 0);
}
static jv m_isupper(jst *st, const jnode *at, jv s, struct jcall *c)
{
    (void)at, (void)c;
    return case_pred(st, s, 1);
}

static jv m_istitle(jst *st, const jnode *at, jv s, struct jcall *c)
{
    (void)c;
    jstep(st, at, s.n / 32);
    int cased = 0, prev = 0;
    for (size_t i = 0; i < s.n;) {
        size_t adv;
        unsigned p = jcase_props(jstr_decode(s.u.s + i, s.n - i, &adv));
        i += adv;
        if (p & (JC_UPPER | JC_TITLE)) {
            if (prev)
                return jv_bool(0);
            prev = cased = 1;
        } else if (p & JC_LOWER) {
            if (!prev)
                return jv_bool(0);
            prev = cased = 1;
        } else {
            prev = 0;
        }
    }
    return jv_bool(cased);
}

static jv m_join(jst *st, const jnode *at, jv s, struct jcall *c)
{
    uint32_t n;
    const struct jerrsave *pending;
    jv *items = jv_iter_items(st, at, c->a[0], &n, &pending);
    if (pending)
        jraise_saved(st, pending);
    struct jbuf b;
    jbuf_init(st, &b, 64);
    for (uint32_t i = 0; i < n; i++) {
        jv x = items[i];
        if (x.t != JT_STR)
            jfail(st, at, RS_JINJA_ERR_TYPE, "sequence item %u: expected str instance, %s found", i,
                  jv_type_name(x));
        x = arg_escaped(st, s, x);
        if (i)
            jbuf_put(st, &b, s.u.s, s.n);
        jbuf_put(st, &b, x.u.s, x.n);
    }
    jstep(st, at, b.n / 64 + n);
    return keep_mk(s, jbuf_take(&b));
}

static jv pad(jst *st, const jnode *at, jv s, struct jcall *c, int where)
{
    int64_t width = jarg_int(st, at, c->a[0], "width");
    jv fill = given(c->a[1]) ? arg_escaped(st, s, need_str(st, at, c->a[1], "fillchar")) : JV_LIT(" ");
    if (jstr_cplen(fill.u.s, fill.n) != 1 && !s.mk)
        jfail(st, at, RS_JINJA_ERR_TYPE, "The fill character must be exactly one character long");
    int64_t len = (int64_t)jstr_cplen(s.u.s, s.n);
    if (width <= len)
        return s;
    if (width > (int64_t)st->max_output)
        jfail(st, at, RS_JINJA_ERR_LIMIT, "padding width too large");
    int64_t marg = width - len;
    jstep(st, at, (uint64_t)width / 64);
    int64_t left = where == 0 ? marg / 2 + (marg & width & 1) : where < 0 ? 0 : marg;
    struct jbuf b;
    jbuf_init(st, &b, s.n + (size_t)marg * fill.n);
    for (int64_t i = 0; i < left; i++)
        jbuf_put(st, &b, fill.u.s, fill.n);
    jbuf_put(st, &b, s.u.s, s.n);
    for (int64_t i = 0; i < marg - left; i++)
        jbuf_put(st, &b, fill.u.s, fill.n);
    return keep_mk(s, jbuf_take(&b));
}

static jv m_center(jst *st, const jnode *at, jv s, struct jcall *c) { return pad(st, at, s, c, 0); }
static jv m_ljust(jst *st, const jnode *at, jv s, struct jcall *c) { return pad(st, at, s, c, -1); }
static jv m_rjust(jst *st, const jnode *at, jv s, struct jcall *c) { return pad(st, at, s, c, 1); }

static jv m_zfill(jst *st, const jnode *at, jv s, struct jcall *c)
{
    int64_t width = jarg_int(st, at, c->a[0], "width");
    int64_t len = (int64_t)jstr_cplen(s.u.s, s.n);
    if (width <= len)
        return s;
    if (width > (int64_t)st->max_output)
        jfail(st, at, RS_JINJA_ERR_LIMIT, "zfill width too large");
    jstep(st, at, (uint64_t)width / 64);
    struct jbuf b;
    jbuf_init(st, &b, (size_t)width + s.n);
    size_t off = 0;
    if (s.n && (s.u.s[0] == '+' || s.u.s[0] == '-')) {
        jbuf_putc(st, &b, s.u.s[0]);
        off = 1;
    }
    for (int64_t i = 0; i < width - len; i++)
        jbuf_putc(st, &b, '0');
    jbuf_put(st, &b, s.u.s + off, s.n - off);
    return keep_mk(s, jbuf_take(&b));
}

static jv m_expandtabs(jst *st, const jnode *at, jv s, struct jcall *c)
{
    int64_t tab = given(c->a[0]) ? jarg_int(st, at, c->a[0], "tabsize") : 8;
    if (tab > 4096)
        jfail(st, at, RS_JINJA_ERR_LIMIT, "tabsize too large");
    struct jbuf b;
    jbuf_init(st, &b, s.n + 16);
    jstep(st, at, s.n / 32);
    int64_t col = 0;
    for (size_t i = 0; i < s.n;) {
        size_t adv;
        uint32_t cp = jstr_decode(s.u.s + i, s.n - i, &adv);
        if (cp == '\t') {
            if (tab > 0) {
                int64_t k = tab - col % tab;
                for (int64_t j = 0; j < k; j++)
                    jbuf_putc(st, &b, ' ');
                col += k;
            }
        } else {
            jbuf_put(st, &b, s.u.s + i, adv);
            col = cp == '\n' || cp == '\r' ? 0 : col + 1;
        }
        i += adv;
    }
    return keep_mk(s, jbuf_take(&b));
}

static jv triple(jst *st, jv s, jv a, jv b, jv c3)
{
    struct jlist *t = jlist_new(st, JL_TUPLE, 3);
    t->v[0] = keep_mk(s, a);
    t->v[1] = keep_mk(s, b);
    t->v[2] = keep_mk(s, c3);
    t->n = 3;
    return jv_list(t);
}

static jv partition(jst *st, const jnode *at, jv s, struct jcall *c, int right)
{
    jstep(st, at, s.n / 64);
    jv sep = arg_escaped(st, s, need_str(st, at, c->a[0], "sep"));
    if (!sep.n)
        jfail(st, at, RS_JINJA_ERR_VALUE, "empty separator");
    const char *p = s.u.s, *f = NULL;
    if (!right) {
        f = sep.n <= s.n ? memmem(p, s.n, sep.u.s, sep.n) : NULL;
    } else if (sep.n <= s.n) {
        for (size_t k = s.n - sep.n + 1; k-- > 0;)
            if (memcmp(p + k, sep.u.s, sep.n) == 0) {
                f = p + k;
                break;
            }
    }
    if (!f)
        return right ? triple(st, s, JV_LIT(""), JV_LIT(""), s) : triple(st, s, s, JV_LIT(""), JV_LIT(""));
    size_t off = (size_t)(f - p);
    return triple(st, s, jv_str(p, off), sep, jv_str(p + off + sep.n, s.n - off - sep.n));
}

static jv m_partition(jst *st, const jnode *at, jv s, struct jcall *c) { return partition(st, at, s, c, 0); }
static jv m_rpartition(jst *st, const jnode *at, jv s, struct jcall *c) { return partition(st, at, s, c, 1); }

static jv m_removeprefix(jst *st, const jnode *at, jv s, struct jcall *c)
{
    jv p = need_str(st, at, c->a[0], "prefix");
    if (p.n <= s.n && memcmp(s.u.s, p.u.s, p.n) == 0)
        return keep_mk(s, jv_str(s.u.s + p.n, s.n - p.n));
    return s;
}

static jv m_removesuffix(jst *st, const jnode *at, jv s, struct jcall *c)
{
    jv p = need_str(st, at, c->a[0], "suffix");
    if (p.n && p.n <= s.n && memcmp(s.u.s + s.n - p.n, p.u.s, p.n) == 0)
        return keep_mk(s, jv_str(s.u.s, s.n - p.n));
    return s;
}

static jv m_format(jst *st, const jnode *at, jv s, struct jcall *c)
{
    return jstr_format(st, at, s, c);
}

static jv m_unsupported(jst *st, const jnode *at, jv s, struct jcall *c)
{
    (void)s, (void)c;
    jfail(st, at, RS_JINJA_ERR_UNSUPPORTED, "this method is not supported");
}

static const struct jbuiltin str_methods[] = {
    {"capitalize", NULL, 0, 0, m_capitalize},
    {"casefold", NULL, 0, 0, m_casefold},
    {"center", P("width", "fillchar"), 1, POS, m_center},
    {"count", P("sub", "start", "end"), 1, POS, m_scount},
    {"encode", NULL, 0, JB_UNSUPPORTED | JB_VARARGS | JB_VARKW, m_unsupported},
    {"endswith", P("suffix", "start", "end"), 1, POS, m_endswith},
    {"expandtabs", P("tabsize"), 0, 0, m_expandtabs},
    {"find", P("sub", "start", "end"), 1, POS, m_find},
    {"format", NULL, 0, JB_VARARGS | JB_VARKW, m_format},
    {"format_map", NULL, 0, JB_UNSUPPORTED | JB_VARARGS | JB_VARKW, m_unsupported},
    {"index", P("sub", "start", "end"), 1, POS, m_sindex},
    {"isalnum", NULL, 0, 0, m_isalnum},
    {"isalpha", NULL, 0, 0, m_isalpha},
    {"isascii", NULL, 0, 0, m_isascii},
    {"isdecimal", NULL, 0, 0, m_isdecimal},
    {"isdigit", NULL, 0, 0, m_isdigit},
    {"isidentifier", NULL, 0, 0, m_isidentifier},
    {"islower", NULL, 0, 0, m_islower},
    {"isnumeric", NULL, 0, 0, m_isnumeric},
    {"isprintable", NULL, 0, 0, m_isprintable},
    {"isspace", NULL, 0, 0, m_isspace},
    {"istitle", NULL, 0, 0, m_istitle},
    {"isupper", NULL, 0, 0, m_isupper},
    {"join", P("iterable"), 1, POS, m_join},
    {"ljust", P("width", "fillchar"), 1, POS, m_ljust},
    {"lower", NULL, 0, 0, m_lower},
    {"lstrip", P("chars"), 0, POS, m_lstrip},
    {"maketrans", NULL, 0, JB_UNSUPPORTED | JB_VARARGS | JB_VARKW, m_unsupported},
    {"partition", P("sep"), 1, POS, m_partition},
    {"removeprefix", P("prefix"), 1, POS, m_removeprefix},
    {"removesuffix", P("suffix"), 1, POS, m_removesuffix},
    {"replace", P("old", "new", "count"), 2, POS, m_replace},
    {"rfind", P("sub", "start", "end"), 1, POS, m_rfind},
    {"rindex", P("sub", "start", "end"), 1, POS, m_rindex},
    {"rjust", P("width", "fillchar"), 1, POS, m_rjust},
    {"rpartition", P("sep"), 1, POS, m_rpartition},
    {"rsplit", P("sep", "maxsplit"), 0, 0, m_rsplit},
    {"rstrip", P("chars"), 0, POS, m_rstrip},
    {"split", P("sep", "maxsplit"), 0, 0, m_split},
    {"splitlines", P("keepends"), 0, 0, m_splitlines},
    {"startswith", P("prefix", "start", "end"), 1, POS, m_startswith},
    {"strip", P("chars"), 0, POS, m_strip},
    {"swapcase", NULL, 0, 0, m_swapcase},
    {"title", NULL, 0, 0, m_title},
    {"translate", NULL, 0, JB_UNSUPPORTED | JB_VARARGS | JB_VARKW, m_unsupported},
    {"upper", NULL, 0, 0, m_upper},
    {"zfill", P("width"), 1, POS, m_zfill},
};

/* ---- dict -------------------------------------------------------------------------------- */

static jv m_get(jst *st, const jnode *at, jv d, struct jcall *c)
{
    jv k = c->a[0];
    if ((k.t == JT_LIST && k.u.l->kind != JL_TUPLE && k.u.l->kind != JL_ITER) || k.t == JT_DICT)
        jfail(st, at, RS_JINJA_ERR_TYPE, "unhashable type: '%s'", jv_type_name(k));
    jv *v = jdict_get(st, at, d.u.d, k);
    if (v)
        return *v;
    return c->a[1].t == JT_MISSING ? jv_none() : c->a[1];
}

static jv view(jst *st, jv d, int which)
{
    static const char *const names[] = {"dict_keys", "dict_values", "dict_items"};
    const struct jdict *x = d.u.d;
    struct jlist *l = jlist_new(st, JL_VIEW, x->n);
    l->tname = names[which];
    for (uint32_t i = 0; i < x->n; i++) {
        if (which == 0) {
            l->v[i] = x->kv[i].k;
        } else if (which == 1) {
            l->v[i] = x->kv[i].v;
        } else {
            struct jlist *t = jlist_new(st, JL_TUPLE, 2);
            t->v[0] = x->kv[i].k;
            t->v[1] = x->kv[i].v;
            t->n = 2;
            l->v[i] = jv_list(t);
        }
    }
    l->n = x->n;
    return jv_list(l);
}

static jv m_keys(jst *st, const jnode *at, jv d, struct jcall *c)
{
    (void)at, (void)c;
    return view(st, d, 0);
}
static jv m_values(jst *st, const jnode *at, jv d, struct jcall *c)
{
    (void)at, (void)c;
    return view(st, d, 1);
}
static jv m_items(jst *st, const jnode *at, jv d, struct jcall *c)
{
    (void)at, (void)c;
    return view(st, d, 2);
}

static jv m_dcopy(jst *st, const jnode *at, jv d, struct jcall *c)
{
    (void)c;
    struct jdict *r = jdict_new(st, d.u.d->n);
    for (uint32_t i = 0; i < d.u.d->n; i++)
        jdict_set(st, at, r, d.u.d->kv[i].k, d.u.d->kv[i].v);
    return jv_dict(r);
}

static const struct jbuiltin dict_methods[] = {
    {"clear", NULL, 0, JB_UNSAFE, m_unsupported},
    {"copy", NULL, 0, 0, m_dcopy},
    {"fromkeys", NULL, 0, JB_UNSUPPORTED | JB_VARARGS | JB_VARKW, m_unsupported},
    {"get", P("key", "default"), 1, POS, m_get},
    {"items", NULL, 0, 0, m_items},
    {"keys", NULL, 0, 0, m_keys},
    {"pop", NULL, 0, JB_UNSAFE, m_unsupported},
    {"popitem", NULL, 0, JB_UNSAFE, m_unsupported},
    {"setdefault", NULL, 0, JB_UNSAFE, m_unsupported},
    {"update", NULL, 0, JB_UNSAFE, m_unsupported},
    {"values", NULL, 0, 0, m_values},
};

/* ---- list and tuple ----------------------------------------------------------------------- */

static jv m_lcount(jst *st, const jnode *at, jv l, struct jcall *c)
{
    int64_t k = 0;
    for (uint32_t i = 0; i < l.u.l->n; i++)
        k += jv_eq(st, at, l.u.l->v[i], c->a[0]);
    return jv_int(k);
}

static jv m_lindex(jst *st, const jnode *at, jv l, struct jcall *c)
{
    int64_t n = l.u.l->n, start = opt_int(st, at, c->a[1], 0), stop = opt_int(st, at, c->a[2], n);
    if (start < 0 && (start += n) < 0)
        start = 0;
    if (stop < 0 && (stop += n) < 0)
        stop = 0;
    for (int64_t i = start; i < stop && i < n; i++)
        if (jv_eq(st, at, l.u.l->v[i], c->a[0]))
            return jv_int(i);
    jv r = jv_repr(st, at, c->a[0]);
    jfail(st, at, RS_JINJA_ERR_VALUE, "%.*s is not in %s", (int)(r.n > 100 ? 100 : r.n), r.u.s,
          l.u.l->kind == JL_TUPLE ? "tuple" : "list");
}

static jv m_lcopy(jst *st, const jnode *at, jv l, struct jcall *c)
{
    (void)at, (void)c;
    struct jlist *r = jlist_new(st, JL_LIST, l.u.l->n);
    if (l.u.l->n)
        memcpy(r->v, l.u.l->v, l.u.l->n * sizeof(jv));
    r->n = l.u.l->n;
    return jv_list(r);
}

/* list.pop: Jinja 3.1's immutable sandbox lets it through, so it mutates as in Python. */
static jv m_pop(jst *st, const jnode *at, jv l, struct jcall *c)
{
    struct jlist *x = l.u.l;
    if (!x->n)
        jfail(st, at, RS_JINJA_ERR_VALUE, "pop from empty list");
    int64_t i = c->a[0].t != JT_MISSING ? jarg_int(st, at, c->a[0], "index") : (int64_t)x->n - 1;
    if (i < 0)
        i += x->n;
    if (i < 0 || i >= x->n)
        jfail(st, at, RS_JINJA_ERR_VALUE, "pop index out of range");
    jv r = x->v[i];
    memmove(x->v + i, x->v + i + 1, (x->n - (uint32_t)i - 1) * sizeof(jv));
    x->n--;
    return r;
}

static jv m_clear(jst *st, const jnode *at, jv l, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    l.u.l->n = 0;
    return jv_none();
}

static const struct jbuiltin list_methods[] = {
    {"append", NULL, 0, JB_UNSAFE, m_unsupported},
    {"clear", NULL, 0, 0, m_clear},
    {"copy", NULL, 0, 0, m_lcopy},
    {"count", P("value"), 1, POS, m_lcount},
    {"extend", NULL, 0, JB_UNSAFE, m_unsupported},
    {"index", P("value", "start", "stop"), 1, POS, m_lindex},
    {"insert", NULL, 0, JB_UNSAFE, m_unsupported},
    {"pop", P("index"), 0, POS, m_pop},
    {"remove", NULL, 0, JB_UNSAFE, m_unsupported},
    {"reverse", NULL, 0, JB_UNSAFE, m_unsupported},
    {"sort", NULL, 0, JB_UNSAFE, m_unsupported},
};

static const struct jbuiltin tuple_methods[] = {
    {"count", P("value"), 1, POS, m_lcount},
    {"index", P("value", "start", "stop"), 1, POS, m_lindex},
};

/* ---- cycler --------------------------------------------------------------------------------- */

static jv m_next(jst *st, const jnode *at, jv o, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    struct jobj *x = o.u.o;
    jv r = x->items->v[x->pos];
    x->pos = (x->pos + 1) % x->items->n;
    return r;
}

static jv m_reset(jst *st, const jnode *at, jv o, struct jcall *c)
{
    (void)st, (void)at, (void)c;
    o.u.o->pos = 0;
    return jv_none();
}

static const struct jbuiltin cycler_methods[] = {
    {"next", NULL, 0, 0, m_next},
    {"reset", NULL, 0, 0, m_reset},
};

#define FIND(tab) jinja_builtin_search(tab, sizeof(tab) / sizeof(tab[0]), name, n)

const struct jbuiltin *jinja_method_find(jv self, const char *name, size_t n, int *unsafe)
{
    const struct jbuiltin *m = NULL;
    *unsafe = 0;
    switch (self.t) {
    case JT_STR: m = FIND(str_methods); break;
    case JT_DICT: m = FIND(dict_methods); break;
    case JT_LIST:
        if (self.u.l->kind == JL_LIST)
            m = FIND(list_methods);
        else if (self.u.l->kind == JL_TUPLE)
            m = FIND(tuple_methods);
        break;
    case JT_OBJ:
        if (self.u.o->kind == JO_CYCLER)
            m = FIND(cycler_methods);
        break;
    default: break;
    }
    if (m && (m->flags & JB_UNSAFE))
        *unsafe = 1;
    return m;
}

/* SPDX-License-Identifier: MIT */
/*
 * Python string formatting for the chat-template renderer: `fmt % args`
 * (and the format filter) with flags, width, precision, * and %(key)s, and
 * str.format() with automatic/manual/keyword fields, .attr and [key] lookups
 * through the sandbox, !r/!s and the format-spec mini-language (fill, align,
 * sign, #, 0, width, grouping, precision, types s d b o x X c e E f F g G %).
 * Padding counts code points, as Python does. Leaves out %a/!a (ascii()),
 * nested replacement fields inside a spec and the locale-aware 'n' type: each
 * is an error naming it.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/jinja_impl.h"
#include "common/utf8.h"

static void put_padded(jst *st, struct jbuf *b, jv s, int64_t width, char align, jv fill)
{
    int64_t len = (int64_t)jstr_cplen(s.u.s, s.n), pad = width > len ? width - len : 0;
    if (pad > (int64_t)st->max_output)
        jfail(st, NULL, RS_JINJA_ERR_LIMIT, "format width too large");
    int64_t left = align == '>' ? pad : align == '^' ? pad / 2 : 0;
    for (int64_t i = 0; i < left; i++)
        jbuf_put(st, b, fill.u.s, fill.n);
    jbuf_put(st, b, s.u.s, s.n);
    for (int64_t i = 0; i < pad - left; i++)
        jbuf_put(st, b, fill.u.s, fill.n);
}

static jv truncated(jv s, int64_t prec)
{
    if (prec < 0)
        return s;
    size_t off = jstr_cpoff(s.u.s, s.n, (size_t)prec);
    return jv_str(s.u.s, off);
}

/* ---- fmt % args ------------------------------------------------------------------------- */

struct pargs {
    jv *v;
    uint32_t n, i;
    const struct jdict *map;
};

static jv next_arg(jst *st, const jnode *at, struct pargs *a)
{
    if (a->i >= a->n)
        jfail(st, at, RS_JINJA_ERR_TYPE, "not enough arguments for format string");
    return a->v[a->i++];
}

static int64_t star_arg(jst *st, const jnode *at, struct pargs *a)
{
    jv v = next_arg(st, at, a);
    if (!jv_is_intlike(v))
        jfail(st, at, RS_JINJA_ERR_TYPE, "* wants int");
    return v.u.i;
}

static double real_arg(jst *st, const jnode *at, jv v, char conv)
{
    if (v.t == JT_FLOAT)
        return v.u.f;
    if (jv_is_intlike(v))
        return (double)v.u.i;
    jfail(st, at, RS_JINJA_ERR_TYPE, "%%%c format: a real number is required, not %s", conv,
          jv_type_name(v));
}

static void percent_number(jst *st, const jnode *at, struct jbuf *b, const char *flags,
                           int64_t width, int64_t prec, char conv, jv v)
{
    char cf[32], num[1024]; /* width, precision <= 400: at most 309 + 1 + 400 + sign bytes */
    int k = snprintf(cf, sizeof(cf), "%%%s", flags);
    if (width > 400 || prec > 400)
        jfail(st, at, RS_JINJA_ERR_LIMIT, "format width or precision too large");
    if (width >= 0)
        k += snprintf(cf + k, sizeof(cf) - (size_t)k, "%lld", (long long)width);
    if (prec >= 0)
        k += snprintf(cf + k, sizeof(cf) - (size_t)k, ".%lld", (long long)prec);
    int n;
    if (strchr("diuoxX", conv)) {
        int64_t i;
        if (jv_is_intlike(v)) {
            i = v.u.i;
        } else if (v.t == JT_FLOAT && strchr("diu", conv)) {
            if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18)
                jfail(st, at, RS_JINJA_ERR_UNSUPPORTED, "integer does not fit in 64 bits");
            i = (int64_t)v.u.f;
        } else {
            jfail(st, at, RS_JINJA_ERR_TYPE, "%%%c format: %s is required, not %s", conv,
                  strchr("diu", conv) ? "a real number" : "an integer", jv_type_name(v));
        }
        snprintf(cf + k, sizeof(cf) - (size_t)k, "ll%c", conv == 'u' ? 'd' : conv == 'i' ? 'd' : conv);
        n = snprintf(num, sizeof(num), cf, (long long)i);
    } else {
        snprintf(cf + k, sizeof(cf) - (size_t)k, "%c", conv);
        n = snprintf(num, sizeof(num), cf, real_arg(st, at, v, conv));
    }
    if (n < 0 || (size_t)n >= sizeof(num))
        jfail(st, at, RS_JINJA_ERR_LIMIT, "formatted number too long");
    jbuf_put(st, b, num, (size_t)n);
}

struct pspec {
    jv val; /* the %(key) value, or JT_MISSING: the next positional argument */
    char flags[8];
    int64_t width, prec;
    char conv;
};

static int64_t digits_bounded(jst *st, const jnode *at, const char *s, size_t n, size_t *i,
                              int64_t start, const char *what)
{
    int64_t v = start;
    for (; *i < n && s[*i] >= '0' && s[*i] <= '9'; (*i)++)
        if ((v = (v < 0 ? 0 : v) * 10 + (s[*i] - '0')) > 100000)
            jfail(st, at, RS_JINJA_ERR_LIMIT, "format %s too large", what);
    return v;
}

/* One conversion after '%' at s[i]: key, flags, width, precision, length, type. */
static size_t parse_percent(jst *st, const jnode *at, const char *s, size_t n, size_t i,
                            struct pargs *a, struct pspec *o, int *used_map)
{
    memset(o, 0, sizeof(*o));
    o->width = o->prec = -1;
    if (s[i] == '(') {
        if (!a->map)
            jfail(st, at, RS_JINJA_ERR_TYPE, "format requires a mapping");
        size_t k = ++i;
        int depth = 1;
        while (i < n && (s[i] != ')' || --depth))
            depth += s[i++] == '(';
        if (i >= n)
            jfail(st, at, RS_JINJA_ERR_VALUE, "incomplete format key");
        jv *p = jdict_get_str(a->map, s + k, i - k);
        if (!p)
            jfail(st, at, RS_JINJA_ERR_VALUE, "KeyError: '%.*s'", (int)(i - k), s + k);
        o->val = *p;
        *used_map = 1;
        i++;
    }
    int nf = 0;
    while (i < n && strchr("-+ #0", s[i]) && nf < 6)
        o->flags[nf++] = s[i++];
    if (i < n && s[i] == '*') {
        o->width = star_arg(st, at, a);
        i++;
    } else {
        o->width = digits_bounded(st, at, s, n, &i, -1, "width");
    }
    if (i < n && s[i] == '.') {
        if (++i < n && s[i] == '*') {
            o->prec = star_arg(st, at, a);
            i++;
        } else {
            o->prec = digits_bounded(st, at, s, n, &i, 0, "precision");
        }
    }
    while (i < n && strchr("hlL", s[i]))
        i++;
    if (i >= n)
        jfail(st, at, RS_JINJA_ERR_VALUE, "incomplete format");
    o->conv = s[i];
    return i;
}

static void emit_percent(jst *st, const jnode *at, struct jbuf *b, const struct pspec *o)
{
    int left = strchr(o->flags, '-') != NULL;
    jv val = o->val;
    switch (o->conv) {
    case 's':
    case 'r': {
        jv t = o->conv == 's' ? jv_to_str(st, at, val) : jv_repr(st, at, val);
        put_padded(st, b, truncated(t, o->prec), o->width, left ? '<' : '>', JV_LIT(" "));
        return;
    }
    case 'c': {
        char tmp[4];
        jv ch;
        if (jv_is_intlike(val) && val.u.i >= 0 && val.u.i <= 0x10FFFF &&
            !(val.u.i >= 0xD800 && val.u.i <= 0xDFFF))
            ch = jv_str_copy(st, tmp, rs_utf8_encode((uint32_t)val.u.i, tmp));
        else if (val.t == JT_STR && jstr_cplen(val.u.s, val.n) == 1)
            ch = val;
        else
            jfail(st, at, RS_JINJA_ERR_TYPE, "%%c requires int or char");
        put_padded(st, b, ch, o->width, left ? '<' : '>', JV_LIT(" "));
        return;
    }
    case 'a':
        jfail(st, at, RS_JINJA_ERR_UNSUPPORTED, "%%a (ascii) formatting is not supported");
    default:
        if (!strchr("diuoxXeEfFgG", o->conv))
            jfail(st, at, RS_JINJA_ERR_VALUE, "unsupported format character '%c'", o->conv);
        percent_number(st, at, b, o->flags, o->width, o->prec, o->conv, val);
    }
}

jv jstr_percent(jst *st, const jnode *at, jv fmt, jv args)
{
    struct pargs a = {0};
    if (args.t == JT_LIST && args.u.l->kind == JL_TUPLE) {
        a.v = args.u.l->v;
        a.n = args.u.l->n;
    } else {
        a.v = ja_alloc(&st->ar, sizeof(jv));
        a.v[0] = args;
        a.n = 1;
        if (args.t == JT_DICT)
            a.map = args.u.d;
    }
    int used_map = 0;
    struct jbuf b;
    jbuf_init(st, &b, fmt.n + 16);
    const char *s = fmt.u.s;
    size_t n = fmt.n;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            jbuf_putc(st, &b, s[i]);
            continue;
        }
        if (++i >= n)
            jfail(st, at, RS_JINJA_ERR_VALUE, "incomplete format");
        struct pspec o;
        i = parse_percent(st, at, s, n, i, &a, &o, &used_map);
        if (o.conv == '%') {
            jbuf_putc(st, &b, '%');
            continue;
        }
        if (o.val.t == JT_MISSING)
            o.val = next_arg(st, at, &a);
        emit_percent(st, at, &b, &o);
    }
    if (!used_map && a.i < a.n && !a.map)
        jfail(st, at, RS_JINJA_ERR_TYPE, "not all arguments converted during string formatting");
    return jbuf_take(&b);
}

/* ---- str.format ---------------------------------------------------------------------------- */

struct spec {
    jv fill;
    char align, sign, type, group;
    int alt, zero;
    int64_t width, prec;
};

static void parse_spec(jst *st, const jnode *at, const char *s, size_t n, struct spec *o)
{
    memset(o, 0, sizeof(*o));
    o->fill = JV_LIT(" ");
    o->width = o->prec = -1;
    size_t i = 0, adv = 0;
    if (n) {
        jstr_decode(s, n, &adv);
        if (adv < n && strchr("<>=^", s[adv])) {
            o->fill = jv_str(s, adv);
            o->align = s[adv];
            i = adv + 1;
        } else if (strchr("<>=^", s[0])) {
            o->align = s[0];
            i = 1;
        }
    }
    if (i < n && strchr("+- ", s[i]))
        o->sign = s[i++];
    if (i < n && s[i] == '#') {
        o->alt = 1;
        i++;
    }
    if (i < n && s[i] == '0') {
        o->zero = 1;
        i++;
    }
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        o->width = (o->width < 0 ? 0 : o->width) * 10 + (s[i] - '0');
        if (o->width > 100000)
            jfail(st, at, RS_JINJA_ERR_LIMIT, "format width too large");
    }
    if (i < n && (s[i] == ',' || s[i] == '_'))
        o->group = s[i++];
    if (i < n && s[i] == '.') {
        o->prec = 0;
        for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            if ((o->prec = o->prec * 10 + (s[i] - '0')) > 1000)
                jfail(st, at, RS_JINJA_ERR_LIMIT, "format precision too large");
    }
    if (i < n)
        o->type = s[i++];
    if (i < n)
        jfail(st, at, RS_JINJA_ERR_VALUE, "Invalid format specifier");
    if (o->type == 'n')
        jfail(st, at, RS_JINJA_ERR_UNSUPPORTED, "the locale-aware 'n' format type is not supported");
}

/* Inserts grouping separators into the integer digits of num[0..len). */
static void put_grouped(jst *st, struct jbuf *b, const char *digits, size_t len, char sep, int every)
{
    for (size_t i = 0; i < len; i++) {
        if (sep && i && (len - i) % (size_t)every == 0)
            jbuf_putc(st, b, sep);
        jbuf_putc(st, b, digits[i]);
    }
}

/* The digits of integer u in type t ('d', 'b', 'o', 'x', 'X') into body; sets the 0x-style prefix. */
static int int_digits(uint64_t u, char t, int alt, char *body, size_t cap, const char **prefix)
{
    if (t == 'b') {
        char tmp[70];
        int k = 0;
        do
            tmp[k++] = (char)('0' + (u & 1));
        while (u >>= 1);
        for (int j = 0; j < k; j++)
            body[j] = tmp[k - 1 - j];
        *prefix = alt ? "0b" : "";
        return k;
    }
    *prefix = !alt ? "" : t == 'o' ? "0o" : t == 'x' ? "0x" : t == 'X' ? "0X" : "";
    return snprintf(body, cap, t == 'o' ? "%llo" : t == 'x' ? "%llx" : t == 'X' ? "%llX" : "%llu",
                    (unsigned long long)u);
}

/* The digits of f for type t (0: Python's default float format), no sign, into body. */
static int float_digits(jst *st, const jnode *at, double f, char type, const struct spec *sp,
                        char *body, size_t cap)
{
    if (type == 0 && sp->prec < 0) {
        char r[32];
        int n = (int)jnum_float_repr(fabs(f), r);
        memcpy(body, r, (size_t)n);
        return n;
    }
    char t = type ? type : 'g', cf[48];
    int64_t prec = sp->prec < 0 ? 6 : sp->prec;
    if (t == '%')
        f *= 100;
    snprintf(cf, sizeof(cf), "%%%s.%lld%c", sp->alt ? "#" : "", (long long)prec, t == '%' ? 'f' : t);
    int n = snprintf(body, cap - 4, cf, fabs(f));
    if (n < 0 || (size_t)n >= cap - 4)
        jfail(st, at, RS_JINJA_ERR_LIMIT, "formatted number too long");
    body[n] = 0;
    if (t == '%')
        body[n++] = '%';
    else if (!type && !strpbrk(body, ".einf")) { /* no type, a precision: keep a decimal point */
        body[n++] = '.';
        body[n++] = '0';
    }
    return n;
}

static void format_number(jst *st, const jnode *at, struct jbuf *out, jv v, struct spec *sp)
{
    char type = sp->type, body[1400]; /* precision <= 1000: 309 + 1 + 1000 + exponent, '%' */
    int neg, n;
    const char *prefix = "";
    if (v.t != JT_FLOAT && strchr("dboxXc", type ? type : 'd')) {
        uint64_t u = v.u.i < 0 ? 0 - (uint64_t)v.u.i : (uint64_t)v.u.i;
        neg = v.u.i < 0;
        if (type == 'c') {
            char tmp[4];
            jv ch = jv_str_copy(st, tmp, rs_utf8_encode((uint32_t)u, tmp));
            put_padded(st, out, ch, sp->width, sp->align ? sp->align : '<', sp->fill);
            return;
        }
        n = int_digits(u, type ? type : 'd', sp->alt, body, sizeof(body), &prefix);
    } else if (strchr("eEfFgG%", type ? type : 'g')) {
        double f = v.t == JT_FLOAT ? v.u.f : (double)v.u.i;
        neg = signbit(f) && !isnan(f);
        n = float_digits(st, at, f, type, sp, body, sizeof(body));
    } else {
        jfail(st, at, RS_JINJA_ERR_VALUE, "Unknown format code '%c' for object of type '%s'", type,
              jv_type_name(v));
    }
    const char *sign = neg ? "-" : sp->sign == '+' ? "+" : sp->sign == ' ' ? " " : "";
    struct jbuf num;
    jbuf_init(st, &num, (size_t)n + 16);
    size_t intlen = 0;
    while (intlen < (size_t)n && body[intlen] >= '0' && body[intlen] <= '9')
        intlen++;
    put_grouped(st, &num, body, intlen, sp->group, strchr("bxXo", type ? type : 'd') ? 4 : 3);
    jbuf_put(st, &num, body + intlen, (size_t)n - intlen);
    size_t pre = strlen(sign) + strlen(prefix);
    if ((sp->zero && !sp->align) || sp->align == '=') {
        jv fill = sp->align == '=' ? sp->fill : JV_LIT("0");
        jbuf_put(st, out, sign, strlen(sign));
        jbuf_put(st, out, prefix, strlen(prefix));
        for (int64_t i = (int64_t)(pre + num.n); i < sp->width; i++)
            jbuf_put(st, out, fill.u.s, fill.n);
        jbuf_put(st, out, num.p, num.n);
        return;
    }
    struct jbuf all;
    jbuf_init(st, &all, pre + num.n + 1);
    jbuf_put(st, &all, sign, strlen(sign));
    jbuf_put(st, &all, prefix, strlen(prefix));
    jbuf_put(st, &all, num.p, num.n);
    put_padded(st, out, jbuf_take(&all), sp->width, sp->align ? sp->align : '>', sp->fill);
}

static void format_value(jst *st, const jnode *at, struct jbuf *out, jv v, const char *s, size_t n)
{
    struct spec sp;
    parse_spec(st, at, s, n, &sp);
    if (v.t == JT_STR || (n == 0)) {
        if (sp.type && sp.type != 's')
            jfail(st, at, RS_JINJA_ERR_VALUE, "Unknown format code '%c' for object of type 'str'",
                  sp.type);
        jv t = jv_to_str(st, at, v);
        put_padded(st, out, truncated(t, sp.prec), sp.width, sp.align ? sp.align : '<', sp.fill);
        return;
    }
    if (jv_is_num(v)) {
        format_number(st, at, out, v, &sp);
        return;
    }
    jfail(st, at, RS_JINJA_ERR_TYPE, "unsupported format string passed to %s.__format__",
          jv_type_name(v));
}

/* Resolves "name.attr[key]" of one replacement field. */
static jv field_value(jst *st, const jnode *at, const char *s, size_t n, struct jcall *c, int *autonum)
{
    size_t i = 0;
    while (i < n && s[i] != '.' && s[i] != '[')
        i++;
    jv v;
    int digits = i > 0;
    for (size_t k = 0; k < i; k++)
        digits &= s[k] >= '0' && s[k] <= '9';
    if (i == 0 || digits) {
        int64_t idx;
        if (i == 0) {
            if (*autonum < 0)
                jfail(st, at, RS_JINJA_ERR_VALUE,
                      "cannot switch from manual field specification to automatic field numbering");
            idx = (*autonum)++;
        } else {
            if (*autonum > 0)
                jfail(st, at, RS_JINJA_ERR_VALUE,
                      "cannot switch from automatic field numbering to manual field specification");
            *autonum = -1;
            jnum_parse_int(s, i, 10, &idx);
        }
        if (idx >= c->nrest)
            jfail(st, at, RS_JINJA_ERR_VALUE,
                  "Replacement index %lld out of range for positional args tuple", (long long)idx);
        v = c->rest[idx];
    } else {
        uint32_t k = 0;
        while (k < c->nkw && !(c->kw[k].len == i && memcmp(c->kw[k].name, s, i) == 0))
            k++;
        if (k == c->nkw)
            jfail(st, at, RS_JINJA_ERR_VALUE, "KeyError: '%.*s'", (int)i, s);
        v = c->kw[k].v;
    }
    while (i < n) {
        size_t j = i + 1;
        if (s[i] == '.') {
            while (j < n && s[j] != '.' && s[j] != '[')
                j++;
            v = jget_attr(st, at, v, s + i + 1, j - i - 1);
            i = j;
        } else {
            while (j < n && s[j] != ']')
                j++;
            if (j >= n)
                jfail(st, at, RS_JINJA_ERR_VALUE, "Missing ']' in format string");
            int64_t k;
            jv key = jnum_parse_int(s + i + 1, j - i - 1, 10, &k) == 1 ? jv_int(k)
                                                                        : jv_str(s + i + 1, j - i - 1);
            v = jget_item(st, at, v, key);
            i = j + 1;
            if (i < n && s[i] != '.' && s[i] != '[')
                jfail(st, at, RS_JINJA_ERR_VALUE, "Only '.' or '[' may follow ']' in format field specifier");
        }
    }
    return v;
}

/* One replacement field s[start..end): "name.attr[key]!conv:spec", formatted into b. */
static void replacement_field(jst *st, const jnode *at, const char *s, size_t start, size_t end,
                              struct jcall *c, int *autonum, struct jbuf *b)
{
    size_t name_end = start;
    while (name_end < end && s[name_end] != '!' && s[name_end] != ':')
        name_end++;
    jv v = field_value(st, at, s + start, name_end - start, c, autonum);
    size_t p = name_end;
    if (p < end && s[p] == '!') {
        char conv = p + 1 < end ? s[p + 1] : 0;
        if (conv == 'r')
            v = jv_repr(st, at, v);
        else if (conv == 's')
            v = jv_to_str(st, at, v);
        else if (conv == 'a')
            jfail(st, at, RS_JINJA_ERR_UNSUPPORTED, "!a (ascii) conversion is not supported");
        else
            jfail(st, at, RS_JINJA_ERR_VALUE, "Unknown conversion specifier");
        p += 2;
    }
    const char *spec = "";
    size_t sn = 0;
    if (p < end && s[p] == ':') {
        spec = s + p + 1;
        sn = end - p - 1;
    } else if (p < end) {
        jfail(st, at, RS_JINJA_ERR_VALUE, "expected ':' after conversion specifier");
    }
    if (v.t == JT_BOOL && sn == 0)
        v = jv_to_str(st, at, v);
    format_value(st, at, b, v, spec, sn);
}

jv jstr_format(jst *st, const jnode *at, jv fmt, struct jcall *c)
{
    struct jbuf b;
    jbuf_init(st, &b, fmt.n + 32);
    const char *s = fmt.u.s;
    size_t n = fmt.n;
    int autonum = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '}') {
            if (i + 1 < n && s[i + 1] == '}') {
                jbuf_putc(st, &b, '}');
                i++;
                continue;
            }
            jfail(st, at, RS_JINJA_ERR_VALUE, "Single '}' encountered in format string");
        }
        if (ch != '{') {
            jbuf_putc(st, &b, ch);
            continue;
        }
        if (i + 1 < n && s[i + 1] == '{') {
            jbuf_putc(st, &b, '{');
            i++;
            continue;
        }
        size_t start = ++i, brack = 0;
        while (i < n && (s[i] != '}' || brack)) {
            if (s[i] == '[')
                brack++;
            else if (s[i] == ']' && brack)
                brack--;
            else if (s[i] == '{')
                jfail(st, at, RS_JINJA_ERR_UNSUPPORTED,
                      "nested replacement fields in a format spec are not supported");
            i++;
        }
        if (i >= n)
            jfail(st, at, RS_JINJA_ERR_VALUE, "expected '}' before end of string");
        replacement_field(st, at, s, start, i, c, &autonum, &b);
    }
    jv r = jbuf_take(&b);
    r.mk = fmt.mk;
    return r;
}

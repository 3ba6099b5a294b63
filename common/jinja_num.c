/* SPDX-License-Identifier: MIT */
/*
 * Python number semantics for the chat-template renderer: repr(float) (the
 * shortest digits that read back to the same double, "1e+16" past 16 digits,
 * "inf", "-0.0"), int and float arithmetic with bool as int, true division
 * always giving a float, floor division and modulo rounding toward minus
 * infinity with the divisor's sign, ** as int when the exponent is a
 * non-negative int, ZeroDivisionError, round() as Python's correctly
 * rounded decimal, and int()/float() of strings. Integers are 64-bit: a
 * result Python would carry into a big integer is an error, not a wrong value.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jinja_impl.h"

/* ---- repr(float) --------------------------------------------------------------- */

struct dec {
    char d[24]; /* significant digits, no leading zeros */
    int n;
    int exp; /* value = 0.d * 10^exp... as d[0].d[1..] * 10^exp */
    int neg;
};

static void to_dec(double f, int prec, struct dec *o)
{
    char buf[48];
    snprintf(buf, sizeof(buf), "%.*e", prec - 1, f);
    const char *p = buf;
    o->neg = *p == '-';
    if (o->neg)
        p++;
    o->n = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            o->d[o->n++] = *p;
    o->exp = atoi(p + 1);
}

static double from_dec(const struct dec *o)
{
    char buf[48];
    int k = 0;
    if (o->neg)
        buf[k++] = '-';
    buf[k++] = o->d[0];
    buf[k++] = '.';
    for (int i = 1; i < o->n; i++)
        buf[k++] = o->d[i];
    snprintf(buf + k, sizeof(buf) - (size_t)k, "e%d", o->exp);
    return strtod(buf, NULL);
}

/* o +/- one unit in its last digit (same digit count; carries may move exp). */
static int step_dec(const struct dec *o, int up, struct dec *r)
{
    *r = *o;
    int i = r->n - 1;
    if (up) {
        while (i >= 0 && r->d[i] == '9')
            r->d[i--] = '0';
        if (i < 0) {
            r->d[0] = '1';
            r->exp++;
        } else {
            r->d[i]++;
        }
    } else {
        while (i >= 0 && r->d[i] == '0')
            r->d[i--] = '9';
        if (i < 0)
            return 0;
        r->d[i]--;
        if (r->d[0] == '0') {
            if (r->n == 1)
                return 0;
            memmove(r->d, r->d + 1, (size_t)r->n - 1);
            r->d[r->n - 1] = '9';
            r->exp--;
        }
    }
    return 1;
}

/* Shortest digits reading back to f, the nearest among those (dtoa mode 0). */
static void shortest(double f, struct dec *o)
{
    for (int p = 1; p <= 17; p++) {
        to_dec(f, p, o);
        if (from_dec(o) == f)
            return;
        struct dec alt;
        for (int up = 0; up < 2; up++)
            if (step_dec(o, up, &alt) && from_dec(&alt) == f) {
                *o = alt;
                return;
            }
    }
    to_dec(f, 17, o);
}

size_t jnum_float_repr(double f, char out[32])
{
    if (isnan(f))
        return (size_t)sprintf(out, "nan");
    if (isinf(f))
        return (size_t)sprintf(out, f > 0 ? "inf" : "-inf");
    if (f == 0)
        return (size_t)sprintf(out, signbit(f) ? "-0.0" : "0.0");
    struct dec o;
    shortest(fabs(f), &o);
    while (o.n > 1 && o.d[o.n - 1] == '0')
        o.n--;
    size_t k = 0;
    if (f < 0)
        out[k++] = '-';
    int decpt = o.exp + 1;
    if (decpt > 16 || decpt < -3) {
        out[k++] = o.d[0];
        if (o.n > 1) {
            out[k++] = '.';
            memcpy(out + k, o.d + 1, (size_t)o.n - 1);
            k += (size_t)o.n - 1;
        }
        k += (size_t)sprintf(out + k, "e%c%02d", o.exp < 0 ? '-' : '+', abs(o.exp));
    } else if (decpt <= 0) {
        out[k++] = '0';
        out[k++] = '.';
        for (int i = 0; i < -decpt; i++)
            out[k++] = '0';
        memcpy(out + k, o.d, (size_t)o.n);
        k += (size_t)o.n;
    } else if (decpt >= o.n) {
        memcpy(out + k, o.d, (size_t)o.n);
        k += (size_t)o.n;
        for (int i = o.n; i < decpt; i++)
            out[k++] = '0';
        out[k++] = '.';
        out[k++] = '0';
    } else {
        memcpy(out + k, o.d, (size_t)decpt);
        k += (size_t)decpt;
        out[k++] = '.';
        memcpy(out + k, o.d + decpt, (size_t)(o.n - decpt));
        k += (size_t)(o.n - decpt);
    }
    out[k] = 0;
    return k;
}

/* ---- arithmetic --------------------------------------------------------------------- */

_Noreturn static void overflow(jst *st, const jnode *at)
{
    jfail(st, at, RS_JINJA_ERR_UNSUPPORTED,
          "integer result does not fit in 64 bits (this renderer's integers are 64-bit)");
}

static double as_f(jv v) { return v.t == JT_FLOAT ? v.u.f : (double)v.u.i; }

static int64_t floordiv_i(jst *st, const jnode *at, int64_t a, int64_t b)
{
    if (b == 0)
        jfail(st, at, RS_JINJA_ERR_VALUE, "integer division or modulo by zero");
    if (a == INT64_MIN && b == -1)
        overflow(st, at);
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        q--;
    return q;
}

static int64_t mod_i(jst *st, const jnode *at, int64_t a, int64_t b)
{
    if (b == 0)
        jfail(st, at, RS_JINJA_ERR_VALUE, "integer division or modulo by zero");
    if (b == -1)
        return 0;
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}

/* CPython's float_divmod. */
static void divmod_f(jst *st, const jnode *at, double vx, double wx, double *div, double *mod,
                     const char *what)
{
    if (wx == 0.0)
        jfail(st, at, RS_JINJA_ERR_VALUE, "%s", what);
    double m = fmod(vx, wx);
    double d = (vx - m) / wx;
    if (m != 0.0) {
        if ((wx < 0) != (m < 0)) {
            m += wx;
            d -= 1.0;
        }
    } else {
        m = copysign(0.0, wx);
    }
    double fd;
    if (d != 0.0) {
        fd = floor(d);
        if (d - fd > 0.5)
            fd += 1.0;
    } else {
        fd = copysign(0.0, vx / wx);
    }
    *div = fd;
    *mod = m;
}

static jv pow_num(jst *st, const jnode *at, jv a, jv b)
{
    if (a.t != JT_FLOAT && b.t != JT_FLOAT && b.u.i >= 0) {
        int64_t base = a.u.i, e = b.u.i, r = 1;
        while (e) {
            if ((e & 1) && __builtin_mul_overflow(r, base, &r))
                overflow(st, at);
            e >>= 1;
            if (e && __builtin_mul_overflow(base, base, &base))
                overflow(st, at);
        }
        return jv_int(r);
    }
    double x = as_f(a), y = as_f(b);
    if (x == 0.0 && y < 0)
        jfail(st, at, RS_JINJA_ERR_VALUE, "0.0 cannot be raised to a negative power");
    if (x < 0 && y != floor(y) && isfinite(y))
        jfail(st, at, RS_JINJA_ERR_UNSUPPORTED,
              "a negative number to a fractional power is a complex number (not supported)");
    double r = pow(x, y);
    if (isinf(r) && isfinite(x) && isfinite(y))
        jfail(st, at, RS_JINJA_ERR_VALUE, "(34, 'Numerical result out of range')");
    return jv_float(r);
}

jv jnum_binop(jst *st, const jnode *at, int op, jv a, jv b)
{
    int ints = a.t != JT_FLOAT && b.t != JT_FLOAT;
    int64_t r;
    double d, m;
    switch (op) {
    case OP_ADD:
        if (!ints)
            return jv_float(as_f(a) + as_f(b));
        if (__builtin_add_overflow(a.u.i, b.u.i, &r))
            overflow(st, at);
        return jv_int(r);
    case OP_SUB:
        if (!ints)
            return jv_float(as_f(a) - as_f(b));
        if (__builtin_sub_overflow(a.u.i, b.u.i, &r))
            overflow(st, at);
        return jv_int(r);
    case OP_MUL:
        if (!ints)
            return jv_float(as_f(a) * as_f(b));
        if (__builtin_mul_overflow(a.u.i, b.u.i, &r))
            overflow(st, at);
        return jv_int(r);
    case OP_DIV:
        if (as_f(b) == 0.0)
            jfail(st, at, RS_JINJA_ERR_VALUE, ints ? "division by zero" : "float division by zero");
        if (ints)
            return jv_float((double)((long double)a.u.i / (long double)b.u.i));
        return jv_float(as_f(a) / as_f(b));
    case OP_FLOORDIV:
        if (ints)
            return jv_int(floordiv_i(st, at, a.u.i, b.u.i));
        divmod_f(st, at, as_f(a), as_f(b), &d, &m, "float floor division by zero");
        return jv_float(d);
    case OP_MOD:
        if (ints)
            return jv_int(mod_i(st, at, a.u.i, b.u.i));
        divmod_f(st, at, as_f(a), as_f(b), &d, &m, "float modulo");
        return jv_float(m);
    case OP_POW:
        return pow_num(st, at, a, b);
    default:
        jfail(st, at, RS_JINJA_ERR_TYPE, "unsupported operator");
    }
}

jv jnum_neg(jst *st, const jnode *at, jv a)
{
    if (a.t == JT_FLOAT)
        return jv_float(-a.u.f);
    if (a.u.i == INT64_MIN)
        overflow(st, at);
    return jv_int(-a.u.i);
}

/* ---- int() and float() of strings ------------------------------------------------- */

static void trim_space(const char **s, size_t *n)
{
    size_t adv;
    while (*n && jstr_isspace(jstr_decode(*s, *n, &adv))) {
        *s += adv;
        *n -= adv;
    }
    while (*n) {
        size_t q = *n - 1;
        while (q > 0 && ((unsigned char)(*s)[q] & 0xC0) == 0x80)
            q--;
        if (!jstr_isspace(jstr_decode(*s + q, *n - q, &adv)))
            break;
        *n = q;
    }
}

static int digit_val(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)(c | 32);
    return c >= 'a' && c <= 'z' ? c - 'a' + 10 : 99;
}

int jnum_parse_int(const char *s, size_t n, int base, int64_t *out)
{
    trim_space(&s, &n);
    int neg = 0;
    if (n && (*s == '+' || *s == '-')) {
        neg = *s == '-';
        s++;
        n--;
    }
    if (n >= 2 && s[0] == '0') {
        char k = (char)(s[1] | 32);
        int pb = k == 'x' ? 16 : k == 'o' ? 8 : k == 'b' ? 2 : 0;
        if (pb && (base == 0 || base == pb)) {
            base = pb;
            s += 2;
            n -= 2;
            if (n && *s == '_') {
                s++;
                n--;
            }
        }
    }
    if (base == 0) {
        /* Python: a base-0 literal may not have leading zeros unless it is 0 */
        base = 10;
        if (n > 1 && s[0] == '0')
            for (size_t i = 0; i < n; i++)
                if (s[i] != '0' && s[i] != '_')
                    return 0;
    }
    if (base < 2 || base > 36 || n == 0)
        return 0;
    uint64_t acc = 0;
    int prev_digit = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '_') {
            if (!prev_digit || i + 1 == n)
                return 0;
            prev_digit = 0;
            continue;
        }
        int d = digit_val(s[i]);
        if (d >= base)
            return 0;
        if (acc > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
            return -1;
        acc = acc * (uint64_t)base + (uint64_t)d;
        prev_digit = 1;
    }
    if (acc > (uint64_t)INT64_MAX + (uint64_t)neg)
        return -1;
    *out = neg ? (int64_t)(0 - acc) : (int64_t)acc;
    return 1;
}

static int ieq(const char *s, size_t n, const char *w)
{
    size_t k = strlen(w);
    if (n != k)
        return 0;
    for (size_t i = 0; i < k; i++)
        if ((char)(s[i] | 32) != w[i])
            return 0;
    return 1;
}

int jnum_parse_float(const char *s, size_t n, double *out)
{
    trim_space(&s, &n);
    char buf[512];
    size_t k = 0, i = 0;
    if (n && (s[0] == '+' || s[0] == '-'))
        buf[k++] = s[i++];
    if (ieq(s + i, n - i, "inf") || ieq(s + i, n - i, "infinity") || ieq(s + i, n - i, "nan")) {
        *out = (s[i] | 32) == 'n' ? NAN : INFINITY;
        if (k && buf[0] == '-')
            *out = -*out;
        return 1;
    }
    int digits = 0, prev_digit = 0, seen_dot = 0, seen_e = 0, exp_digits = 0;
    for (; i < n; i++) {
        char c = s[i];
        if (k + 2 >= sizeof(buf))
            return 0;
        if (c >= '0' && c <= '9') {
            buf[k++] = c;
            prev_digit = 1;
            if (seen_e)
                exp_digits++;
            else
                digits++;
        } else if (c == '_') {
            if (!prev_digit || i + 1 == n || s[i + 1] < '0' || s[i + 1] > '9')
                return 0;
            prev_digit = 0;
        } else if (c == '.' && !seen_dot && !seen_e) {
            seen_dot = 1;
            prev_digit = 0;
            buf[k++] = c;
        } else if ((c | 32) == 'e' && !seen_e && digits) {
            seen_e = 1;
            prev_digit = 0;
            buf[k++] = 'e';
            if (i + 1 < n && (s[i + 1] == '+' || s[i + 1] == '-'))
                buf[k++] = s[++i];
        } else {
            return 0;
        }
    }
    if (!digits || (seen_e && !exp_digits))
        return 0;
    buf[k] = 0;
    *out = strtod(buf, NULL);
    return 1;
}

/* ---- round() ------------------------------------------------------------------------- */

double jnum_round(double x, int64_t nd)
{
    if (!isfinite(x) || x == 0)
        return x;
    if (nd > 330)
        return x;
    if (nd >= 0) {
        char buf[1024]; /* nd <= 330: at most 309 + 1 + 330 + sign bytes */
        snprintf(buf, sizeof(buf), "%.*f", (int)nd, x);
        return strtod(buf, NULL);
    }
    if (nd < -330)
        return copysign(0.0, x);
    /* Round |x| at 10^-nd: exact integer digits of floor(|x|), half to even. */
    double ax = fabs(x), fl = floor(ax);
    int frac = ax != fl;
    char digs[400];
    int n = snprintf(digs, sizeof(digs), "%.0f", fl);
    int k = (int)-nd;
    if (k > n)
        return copysign(0.0, x);
    int keep = n - k;
    int up;
    char first = digs[keep];
    if (first > '5') {
        up = 1;
    } else if (first < '5') {
        up = 0;
    } else {
        int rest = frac;
        for (int i = keep + 1; i < n; i++)
            rest |= digs[i] != '0';
        up = rest ? 1 : keep > 0 && ((digs[keep - 1] - '0') & 1);
    }
    char out[420];
    int m = 0;
    if (keep == 0) {
        out[m++] = up ? '1' : '0';
    } else {
        memcpy(out, digs, (size_t)keep);
        m = keep;
        for (int i = keep - 1; up && i >= 0; i--) {
            if (out[i] == '9') {
                out[i] = '0';
            } else {
                out[i]++;
                up = 0;
            }
        }
        if (up) {
            memmove(out + 1, out, (size_t)m);
            out[0] = '1';
            m++;
        }
    }
    snprintf(out + m, sizeof(out) - (size_t)m, "e%d", k);
    return copysign(strtod(out, NULL), x);
}

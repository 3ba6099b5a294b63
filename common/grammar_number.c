/* SPDX-License-Identifier: MIT */
/*
 * Numbers within bounds as a regular language over decimal text, for JSON
 * schema minimum/maximum/exclusiveMinimum/exclusiveMaximum on "integer" and
 * "number". Bounds are decimal strings compared digit by digit, so 0.1 means
 * exactly one tenth (no binary rounding). The language is built from four
 * pieces on digit strings: integers >= a, <= b, between a and b (same-length
 * recursion on the first differing digit), and fraction digits >= / > / <= /
 * < a fraction, or between two. Bounded numbers are written without an
 * exponent; integer digits are capped at max(16, the bounds' digits) and
 * free fraction tails at 16 digits (a subset of the valid values, never more).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar_impl.h"

#define DIGITS_MAX 48 /* digits of a bound's integer or fraction part */
#define FREE_INT 16   /* integer digits when a side is unbounded */
#define FREE_FRAC 16  /* fraction digits left free */

/* A canonical nonnegative decimal: integer digits (no leading zeros; "0" for zero) and
 * fraction digits (no trailing zeros). */
struct dec {
    char i[DIGITS_MAX + 1], f[DIGITS_MAX + 1];
};

struct sdec {
    int neg;
    struct dec m; /* magnitude */
};

/* Parses "[-]digits[.digits][e[+-]digits]" into canonical form; -1 when malformed or too long. */
static int dec_parse(const char *s, struct sdec *out)
{
    char digits[2 * DIGITS_MAX + 64];
    size_t nd = 0;
    long point = -1, exp = 0;
    memset(out, 0, sizeof(*out));
    if (*s == '-')
        out->neg = 1, s++;
    for (; (*s >= '0' && *s <= '9') || *s == '.'; s++) {
        if (*s == '.') {
            if (point >= 0)
                return -1;
            point = (long)nd;
        } else if (nd < sizeof(digits) - 1) {
            digits[nd++] = *s;
        } else {
            return -1;
        }
    }
    if (nd == 0)
        return -1;
    if (point < 0)
        point = (long)nd;
    if (*s == 'e' || *s == 'E') {
        char *end;
        exp = strtol(s + 1, &end, 10);
        if (end == s + 1 || exp > DIGITS_MAX || exp < -DIGITS_MAX)
            return -1;
        s = end;
    }
    if (*s != '\0')
        return -1;
    point += exp; /* digits[0..point) are the integer part (point may be < 0 or > nd) */
    size_t ni = 0, nf = 0;
    for (long k = 0; k < point; k++) {
        char d = k < (long)nd ? digits[k] : '0';
        if (ni == 0 && d == '0')
            continue;
        if (ni >= DIGITS_MAX)
            return -1;
        out->m.i[ni++] = d;
    }
    if (ni == 0)
        out->m.i[ni++] = '0';
    for (long k = point; k < (long)nd; k++) {
        if (nf >= DIGITS_MAX)
            return -1;
        out->m.f[nf++] = k < 0 ? '0' : digits[k];
    }
    while (nf > 0 && out->m.f[nf - 1] == '0')
        nf--;
    out->m.f[nf] = '\0';
    out->m.i[ni] = '\0';
    if (strcmp(out->m.i, "0") == 0 && nf == 0)
        out->neg = 0;
    return 0;
}

static int dec_cmp(const struct dec *a, const struct dec *b)
{
    size_t la = strlen(a->i), lb = strlen(b->i);
    if (la != lb)
        return la < lb ? -1 : 1;
    int c = strcmp(a->i, b->i);
    if (c != 0)
        return c < 0 ? -1 : 1;
    c = strcmp(a->f, b->f); /* no trailing zeros: plain string order is value order */
    return c < 0 ? -1 : c > 0;
}

static int sdec_cmp(const struct sdec *a, const struct sdec *b)
{
    if (a->neg != b->neg)
        return a->neg ? -1 : 1;
    int c = dec_cmp(&a->m, &b->m);
    return a->neg ? -c : c;
}

/* Integer digit string plus one (into out); -1 when too long. */
static int int_inc(const char *a, char *out)
{
    size_t n = strlen(a);
    char tmp[DIGITS_MAX + 2];
    memcpy(tmp + 1, a, n + 1);
    tmp[0] = '0';
    size_t k = n;
    while (tmp[k] == '9')
        tmp[k--] = '0';
    tmp[k]++;
    const char *s = tmp[0] == '0' ? tmp + 1 : tmp;
    if (strlen(s) > DIGITS_MAX)
        return -1;
    strcpy(out, s);
    return 0;
}

/* Integer digit string minus one (a > 0). */
static void int_dec(const char *a, char *out)
{
    size_t n = strlen(a);
    char tmp[DIGITS_MAX + 1];
    memcpy(tmp, a, n + 1);
    size_t k = n - 1;
    while (tmp[k] == '0')
        tmp[k--] = '9';
    tmp[k]--;
    const char *s = tmp;
    while (s[0] == '0' && s[1] != '\0')
        s++;
    strcpy(out, s);
}

/* --- IR pieces --------------------------------------------------------------------------- */

static uint32_t digit(struct gx_ir *ir, char lo, char hi)
{
    if (lo > hi)
        return GX_NONE;
    uint32_t r[2] = {(uint32_t)lo, (uint32_t)hi};
    return gx_class(ir, r, 1, 0);
}

static uint32_t digits(struct gx_ir *ir, uint32_t min, uint32_t max)
{
    return gx_rep(ir, digit(ir, '0', '9'), min, max);
}

/* Appends alternative x (skipping GX_NONE = empty language). */
static void alt_add(struct gx_ir *ir, struct gx_list *l, uint32_t x)
{
    if (x != GX_NONE)
        gx_list_push(ir, l, x);
}

/* The alternatives as one node; GX_NONE when there are none (empty language). */
static uint32_t alt_end(struct gx_ir *ir, struct gx_list *l)
{
    uint32_t out = l->n ? gx_alt(ir, l->v, l->n) : GX_NONE;
    gx_list_free(l);
    return out;
}

/* Digit strings of strlen(a) digits >= a (ge) or <= a (le); first digit >= first_min. */
static uint32_t same_len(struct gx_ir *ir, const char *a, int ge, char first_min)
{
    if (*a == '\0')
        return gx_empty(ir);
    struct gx_list l = {0};
    size_t rest = strlen(a) - 1;
    uint32_t tail = rest ? digits(ir, (uint32_t)rest, (uint32_t)rest) : gx_empty(ir);
    uint32_t other = ge ? digit(ir, (char)(a[0] + 1), '9') : digit(ir, first_min, (char)(a[0] - 1));
    if (other != GX_NONE)
        alt_add(ir, &l, gx_seq2(ir, other, tail));
    alt_add(ir, &l, gx_seq2(ir, gx_bytes(ir, a, 1), same_len(ir, a + 1, ge, '0')));
    return alt_end(ir, &l);
}

/* Same-length digit strings in [a, b] (a <= b). */
static uint32_t same_between(struct gx_ir *ir, const char *a, const char *b)
{
    if (*a == '\0')
        return gx_empty(ir);
    if (a[0] == b[0])
        return gx_seq2(ir, gx_bytes(ir, a, 1), same_between(ir, a + 1, b + 1));
    struct gx_list l = {0};
    size_t rest = strlen(a) - 1;
    alt_add(ir, &l, gx_seq2(ir, gx_bytes(ir, a, 1), same_len(ir, a + 1, 1, '0')));
    uint32_t mid = digit(ir, (char)(a[0] + 1), (char)(b[0] - 1));
    if (mid != GX_NONE)
        alt_add(ir, &l, gx_seq2(ir, mid, rest ? digits(ir, (uint32_t)rest, (uint32_t)rest)
                                             : gx_empty(ir)));
    alt_add(ir, &l, gx_seq2(ir, gx_bytes(ir, b, 1), same_len(ir, b + 1, 0, '0')));
    return alt_end(ir, &l);
}

/* Canonical integers of exactly len digits (any). */
static uint32_t int_of_len(struct gx_ir *ir, size_t len)
{
    if (len == 1)
        return digit(ir, '0', '9');
    return gx_seq2(ir, digit(ir, '1', '9'), digits(ir, (uint32_t)(len - 1), (uint32_t)(len - 1)));
}

/* Canonical integers in [a, b]; b NULL: up to max_len digits. GX_NONE when empty. */
static uint32_t int_range(struct gx_ir *ir, const char *a, const char *b, size_t max_len)
{
    size_t la = strlen(a), lb = b ? strlen(b) : max_len;
    struct gx_list l = {0};
    if (b != NULL && la == lb)
        return same_between(ir, a, b);
    alt_add(ir, &l, same_len(ir, a, 1, '0'));
    for (size_t len = la + 1; len < lb; len++)
        alt_add(ir, &l, int_of_len(ir, len));
    if (b != NULL)
        alt_add(ir, &l, same_len(ir, b, 0, lb > 1 ? '1' : '0'));
    else if (lb > la)
        alt_add(ir, &l, int_of_len(ir, lb));
    return alt_end(ir, &l);
}

/* Fraction digit strings F with 0.F compared to 0.f: op 'g' >=, 'G' >, 'l' <=, 'L' <.
 * nonempty: F has at least one digit. GX_NONE: empty language. */
static uint32_t frac_cmp(struct gx_ir *ir, const char *f, char op, int nonempty)
{
    if (*f == '\0') {
        if (op == 'g')
            return digits(ir, (uint32_t)nonempty, FREE_FRAC);
        if (op == 'l')
            return gx_rep(ir, gx_str(ir, "0"), (uint32_t)nonempty, FREE_FRAC);
        if (op == 'L')
            return GX_NONE;
        /* > 0: some nonzero digit */
        return gx_seq3(ir, gx_rep(ir, gx_str(ir, "0"), 0, FREE_FRAC - 1), digit(ir, '1', '9'),
                       digits(ir, 0, FREE_FRAC - 1));
    }
    struct gx_list l = {0};
    int up = op == 'g' || op == 'G';
    if (!up && !nonempty) /* f has a nonzero digit, so the empty fraction (0) is below it */
        alt_add(ir, &l, gx_empty(ir));
    uint32_t other = up ? digit(ir, (char)(f[0] + 1), '9') : digit(ir, '0', (char)(f[0] - 1));
    if (other != GX_NONE)
        alt_add(ir, &l, gx_seq2(ir, other, digits(ir, 0, FREE_FRAC)));
    uint32_t rest = frac_cmp(ir, f + 1, op, 0);
    if (rest != GX_NONE)
        alt_add(ir, &l, gx_seq2(ir, gx_bytes(ir, f, 1), rest));
    return alt_end(ir, &l);
}

static int frac_cmp_eps(const char *f, char op)
{
    return (op == 'g' && *f == '\0') || op == 'l' || (op == 'L' && *f != '\0');
}

/* Fractions with 0.lo <(=) 0.F <(=) 0.hi (lx, hx: exclusive), 0.lo <= 0.hi. */
static uint32_t frac_between(struct gx_ir *ir, const char *lo, int lx, const char *hi, int hx,
                             int nonempty)
{
    if (*lo == '\0' && *hi == '\0')
        return (lx || hx) ? GX_NONE : gx_rep(ir, gx_str(ir, "0"), (uint32_t)nonempty, FREE_FRAC);
    struct gx_list l = {0};
    if (!nonempty && *lo == '\0' && !lx && (!hx || *hi != '\0'))
        alt_add(ir, &l, gx_empty(ir));
    char l0 = *lo ? lo[0] : '0', h0 = *hi ? hi[0] : '0';
    const char *lr = *lo ? lo + 1 : lo, *hr = *hi ? hi + 1 : hi;
    if (l0 == h0) {
        uint32_t rest = frac_between(ir, lr, lx, hr, hx, 0);
        if (rest != GX_NONE)
            alt_add(ir, &l, gx_seq2(ir, gx_bytes(ir, &l0, 1), rest));
        return alt_end(ir, &l);
    }
    uint32_t a = frac_cmp(ir, lr, lx ? 'G' : 'g', 0);
    if (a != GX_NONE)
        alt_add(ir, &l, gx_seq2(ir, gx_bytes(ir, &l0, 1), a));
    uint32_t mid = digit(ir, (char)(l0 + 1), (char)(h0 - 1));
    if (mid != GX_NONE)
        alt_add(ir, &l, gx_seq2(ir, mid, digits(ir, 0, FREE_FRAC)));
    uint32_t b = frac_cmp(ir, hr, hx ? 'L' : 'l', 0);
    if (b != GX_NONE)
        alt_add(ir, &l, gx_seq2(ir, gx_bytes(ir, &h0, 1), b));
    return alt_end(ir, &l);
}

/* Integer part node ip followed by a fraction from frac (digits, GX_NONE: none) where eps
 * says the fraction may be left out. GX_NONE when nothing matches. */
static uint32_t with_frac(struct gx_ir *ir, uint32_t ip, uint32_t frac, int eps)
{
    if (ip == GX_NONE)
        return GX_NONE;
    if (frac == GX_NONE)
        return eps ? ip : GX_NONE;
    uint32_t dot = gx_seq2(ir, gx_str(ir, "."), frac);
    return gx_seq2(ir, ip, eps ? gx_rep(ir, dot, 0, 1) : dot);
}

struct bound {
    const struct dec *d; /* NULL: unbounded */
    int excl;
};

/* Nonnegative decimals (no exponent) between lo and hi. GX_NONE when empty. */
static uint32_t magnitude(struct gx_ir *ir, struct bound lo, struct bound hi, size_t max_len)
{
    const struct dec *L = lo.d, *H = hi.d;
    if (H != NULL && strcmp(L->i, H->i) == 0) {
        int eps = *L->f == '\0' && !lo.excl && (!hi.excl || *H->f != '\0');
        if (*L->f == '\0' && *H->f == '\0')
            eps = !lo.excl && !hi.excl;
        return with_frac(ir, gx_bytes(ir, L->i, strlen(L->i)),
                         frac_between(ir, L->f, lo.excl, H->f, hi.excl, 1), eps);
    }
    struct gx_list l = {0};
    char op = lo.excl ? 'G' : 'g';
    alt_add(ir, &l, with_frac(ir, gx_bytes(ir, L->i, strlen(L->i)), frac_cmp(ir, L->f, op, 1),
                              frac_cmp_eps(L->f, op)));
    char a[DIGITS_MAX + 2], b[DIGITS_MAX + 2];
    if (int_inc(L->i, a) == 0) {
        int mid_ok = 1;
        if (H != NULL) {
            int_dec(H->i, b); /* H->i > L->i >= 0 */
            struct dec da = {{0}, {0}}, db = {{0}, {0}};
            strcpy(da.i, a), strcpy(db.i, b);
            mid_ok = dec_cmp(&da, &db) <= 0;
        }
        if (mid_ok)
            alt_add(ir, &l, with_frac(ir, int_range(ir, a, H ? b : NULL, max_len),
                                      digits(ir, 1, FREE_FRAC), 1));
    }
    if (H != NULL) {
        op = hi.excl ? 'L' : 'l';
        alt_add(ir, &l, with_frac(ir, gx_bytes(ir, H->i, strlen(H->i)),
                                  frac_cmp(ir, H->f, op, 1), frac_cmp_eps(H->f, op)));
    }
    return alt_end(ir, &l);
}

/* Signed integer x +/- 1 in place (x has no fraction); -1 when too long. */
static int sint_add(struct sdec *x, int delta)
{
    int up = (delta > 0) != (x->neg != 0); /* magnitude grows */
    if (up)
        return int_inc(x->m.i, x->m.i);
    if (strcmp(x->m.i, "0") == 0) { /* 0 - 1 */
        x->neg = 1;
        strcpy(x->m.i, "1");
        return 0;
    }
    int_dec(x->m.i, x->m.i);
    if (strcmp(x->m.i, "0") == 0)
        x->neg = 0;
    return 0;
}

/* floor (up = 0) or ceil (up = 1) of x, as an integer. */
static int sint_round(const struct sdec *x, int up, struct sdec *out)
{
    *out = *x;
    out->m.f[0] = '\0';
    if (*x->m.f == '\0')
        return 0;
    if (strcmp(out->m.i, "0") == 0)
        out->neg = x->neg;
    /* truncation moved toward zero: fix when that is the wrong direction */
    if ((up && !x->neg) || (!up && x->neg)) {
        int rc = sint_add(out, up ? 1 : -1);
        return rc;
    }
    if (strcmp(out->m.i, "0") == 0)
        out->neg = 0;
    return 0;
}

static uint32_t int_part(struct gx_ir *ir, const struct sdec *lo, const struct sdec *hi,
                         size_t max_len)
{
    struct gx_list l = {0};
    struct sdec zero = {0, {"0", ""}}, one = {0, {"1", ""}};
    if (hi == NULL || !hi->neg) {
        const char *a = lo != NULL && !lo->neg ? lo->m.i : zero.m.i;
        alt_add(ir, &l, int_range(ir, a, hi ? hi->m.i : NULL, max_len));
    }
    if (lo == NULL || lo->neg) {
        const char *a = hi != NULL && hi->neg ? hi->m.i : one.m.i;
        uint32_t r = int_range(ir, a, lo ? lo->m.i : NULL, max_len);
        if (r != GX_NONE)
            alt_add(ir, &l, gx_seq2(ir, gx_str(ir, "-"), r));
    }
    return alt_end(ir, &l);
}

static uint32_t real_part(struct gx_ir *ir, const struct sdec *lo, int lx, const struct sdec *hi,
                          int hx, size_t max_len)
{
    struct gx_list l = {0};
    static const struct dec zero = {"0", ""};
    if (hi == NULL || !hi->neg) {
        int only_zero_excl = hi && strcmp(hi->m.i, "0") == 0 && !*hi->m.f && hx;
        struct bound b_lo = {&zero, 0}, b_hi = {hi ? &hi->m : NULL, hx};
        if (lo != NULL && !lo->neg)
            b_lo.d = &lo->m, b_lo.excl = lx;
        if (!only_zero_excl)
            alt_add(ir, &l, magnitude(ir, b_lo, b_hi, max_len));
    }
    if (lo == NULL || lo->neg) {
        struct bound y_lo = {&zero, 1}, y_hi = {lo ? &lo->m : NULL, lx};
        if (hi != NULL && hi->neg)
            y_lo.d = &hi->m, y_lo.excl = hx;
        uint32_t r = magnitude(ir, y_lo, y_hi, max_len);
        if (r != GX_NONE)
            alt_add(ir, &l, gx_seq2(ir, gx_str(ir, "-"), r));
    }
    return alt_end(ir, &l);
}

rs_err gx_number_range(struct gx_ir *ir, const char *lo_txt, int lx, const char *hi_txt, int hx,
                       int integer, uint32_t *out, char *err, size_t err_len)
{
    struct sdec lo, hi;
    if ((lo_txt && dec_parse(lo_txt, &lo)) || (hi_txt && dec_parse(hi_txt, &hi)))
        return gx_fail(err, err_len, RS_EUNSUPPORTED, "bound %s has more than %d digits "
                       "before or after the point", lo_txt && dec_parse(lo_txt, &lo) ? lo_txt
                       : hi_txt, DIGITS_MAX);
    if (lo_txt && hi_txt) {
        int c = sdec_cmp(&lo, &hi);
        if (c > 0 || (c == 0 && (lx || hx)))
            return gx_fail(err, err_len, RS_EINVAL, "no number satisfies the lower bound %s "
                           "and the upper bound %s", lo_txt, hi_txt);
    }
    size_t max_len = FREE_INT;
    if (lo_txt && strlen(lo.m.i) > max_len)
        max_len = strlen(lo.m.i);
    if (hi_txt && strlen(hi.m.i) > max_len)
        max_len = strlen(hi.m.i);
    uint32_t node;
    if (integer) {
        struct sdec li, hi_i;
        if ((lo_txt && (sint_round(&lo, 1, &li) || (lx && !*lo.m.f && sint_add(&li, 1)))) ||
            (hi_txt && (sint_round(&hi, 0, &hi_i) || (hx && !*hi.m.f && sint_add(&hi_i, -1)))))
            return gx_fail(err, err_len, RS_EUNSUPPORTED, "integer bound too large");
        if (lo_txt && hi_txt && sdec_cmp(&li, &hi_i) > 0)
            return gx_fail(err, err_len, RS_EINVAL, "no integer satisfies the lower bound %s "
                           "and the upper bound %s", lo_txt, hi_txt);
        node = int_part(ir, lo_txt ? &li : NULL, hi_txt ? &hi_i : NULL, max_len);
    } else {
        node = real_part(ir, lo_txt ? &lo : NULL, lx, hi_txt ? &hi : NULL, hx, max_len);
    }
    if (ir->err != RS_OK)
        return gx_ir_error(ir, err, err_len);
    if (node == GX_NONE)
        return gx_fail(err, err_len, RS_EINVAL, "no number satisfies the bounds");
    *out = node;
    return RS_OK;
}

/* SPDX-License-Identifier: MIT */
/*
 * Python str semantics for the chat-template renderer: indices and lengths in
 * code points (strings are UTF-8 inside), Unicode whitespace as str.isspace,
 * strip/split/rsplit/splitlines/replace/find/count/slicing exactly as CPython
 * 3.11 does them, full case mappings with the final-sigma rule (lower, upper,
 * capitalize, title, swapcase) from the generated tables in jinja_case.c, and
 * markupsafe's escape. ASCII strings take byte-wise fast paths. Leaves out
 * normalization and encodings (not reachable from a template).
 */
#include <string.h>

#include "common/jinja_impl.h"
#include "common/utf8.h"

uint32_t jstr_decode(const char *s, size_t n, size_t *adv)
{
    unsigned char b = (unsigned char)s[0];
    if (b < 0x80) {
        *adv = 1;
        return b;
    }
    uint32_t cp;
    size_t k = rs_utf8_next(s, n, &cp);
    *adv = k;
    return cp == RS_UTF8_INVALID ? 0xFFFD : cp;
}

void jstr_put_cp(jst *st, struct jbuf *b, uint32_t cp)
{
    char tmp[4];
    size_t k = rs_utf8_encode(cp, tmp);
    jbuf_put(st, b, tmp, k ? k : 0);
}

static int ascii_only(const char *s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ull)
            return 0;
    }
    for (; i < n; i++)
        if ((unsigned char)s[i] >= 0x80)
            return 0;
    return 1;
}

size_t jstr_cplen(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

size_t jstr_cpoff(const char *s, size_t n, size_t i)
{
    size_t off = 0;
    for (; off < n && i; i--) {
        off++;
        while (off < n && ((unsigned char)s[off] & 0xC0) == 0x80)
            off++;
    }
    return off;
}

int jstr_isspace(uint32_t cp)
{
    if (cp < 0x80)
        return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Start of the code point that ends at s[end) (end > 0). */
static size_t prev_cp(const char *s, size_t end)
{
    size_t p = end - 1;
    while (p > 0 && ((unsigned char)s[p] & 0xC0) == 0x80)
        p--;
    return p;
}

static int in_chars(uint32_t cp, const char *chars, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t adv;
        if (jstr_decode(chars + i, n - i, &adv) == cp)
            return 1;
        i += adv;
    }
    return 0;
}

jv jstr_strip(jst *st, jv s, const char *chars, size_t nchars, int have_chars, int which)
{
    size_t a = 0, b = s.n;
    const char *p = s.u.s;
    if (which & 1)
        while (a < b) {
            size_t adv;
            uint32_t cp = jstr_decode(p + a, b - a, &adv);
            if (have_chars ? !in_chars(cp, chars, nchars) : !jstr_isspace(cp))
                break;
            a += adv;
        }
    if (which & 2)
        while (b > a) {
            size_t q = prev_cp(p, b), adv;
            uint32_t cp = jstr_decode(p + q, b - q, &adv);
            if (have_chars ? !in_chars(cp, chars, nchars) : !jstr_isspace(cp))
                break;
            b = q;
        }
    jstep(st, NULL, (a + s.n - b) / 64 * (have_chars ? nchars / 8 + 1 : 1));
    jv r = jv_str(p + a, b - a);
    r.mk = s.mk;
    return r;
}

jv jstr_escape(jst *st, jv s)
{
    if (s.mk)
        return s;
    const char *p = s.u.s;
    size_t i = 0;
    while (i < s.n && !strchr("&<>'\"", p[i]))
        i++;
    if (i == s.n) {
        s.mk = 1;
        return s;
    }
    struct jbuf b;
    jbuf_init(st, &b, s.n + 16);
    for (i = 0; i < s.n; i++) {
        switch (p[i]) {
        case '&': jbuf_lit(st, &b, "&amp;"); break;
        case '<': jbuf_lit(st, &b, "&lt;"); break;
        case '>': jbuf_lit(st, &b, "&gt;"); break;
        case '\'': jbuf_lit(st, &b, "&#39;"); break;
        case '"': jbuf_lit(st, &b, "&#34;"); break;
        default: jbuf_putc(st, &b, p[i]);
        }
    }
    jv r = jbuf_take(&b);
    r.mk = 1;
    return r;
}

/* ---- case mapping --------------------------------------------------------------- */

enum { MAP_LOWER, MAP_UPPER, MAP_TITLE, MAP_FOLD };

static void put_mapped(jst *st, struct jbuf *b, uint32_t cp, int which)
{
    uint32_t m[3];
    int k = jcase_map(cp, which, m);
    for (int i = 0; i < k; i++)
        jstr_put_cp(st, b, m[i]);
}

/* Python's handle_capital_sigma: Σ at s[pos] lowers to ς at the end of a word. */
static int final_sigma(const char *s, size_t n, size_t pos, size_t adv)
{
    size_t j = pos, a;
    uint32_t c = 0;
    int found = 0;
    while (j > 0) {
        j = prev_cp(s, j);
        c = jstr_decode(s + j, n - j, &a);
        if (!(jcase_props(c) & JC_IGNORABLE)) {
            found = 1;
            break;
        }
    }
    if (!found || !(jcase_props(c) & JC_CASED))
        return 0;
    for (j = pos + adv; j < n; j += a) {
        c = jstr_decode(s + j, n - j, &a);
        if (!(jcase_props(c) & JC_IGNORABLE))
            return !(jcase_props(c) & JC_CASED);
    }
    return 1;
}

static void lower_cp(jst *st, struct jbuf *b, const char *s, size_t n, size_t pos, size_t adv,
                     uint32_t cp)
{
    if (cp == 0x3A3)
        jstr_put_cp(st, b, final_sigma(s, n, pos, adv) ? 0x3C2 : 0x3C3);
    else
        put_mapped(st, b, cp, MAP_LOWER);
}

void jstr_lower_into(jst *st, struct jbuf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            jbuf_putc(st, b, (char)(c >= 'A' && c <= 'Z' ? c + 32 : c));
            i++;
            continue;
        }
        size_t adv;
        uint32_t cp = jstr_decode(s + i, n - i, &adv);
        lower_cp(st, b, s, n, i, adv, cp);
        i += adv;
    }
}

void jstr_upper_into(jst *st, struct jbuf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            jbuf_putc(st, b, (char)(c >= 'a' && c <= 'z' ? c - 32 : c));
            i++;
            continue;
        }
        size_t adv;
        uint32_t cp = jstr_decode(s + i, n - i, &adv);
        put_mapped(st, b, cp, MAP_UPPER);
        i += adv;
    }
}

static jv finish(struct jbuf *b, jv src)
{
    jv r = jbuf_take(b);
    r.mk = src.mk;
    return r;
}

jv jstr_lower(jst *st, jv s)
{
    jstep(st, NULL, s.n / 64);
    struct jbuf b;
    jbuf_init(st, &b, s.n + 4);
    jstr_lower_into(st, &b, s.u.s, s.n);
    return finish(&b, s);
}

jv jstr_upper(jst *st, jv s)
{
    jstep(st, NULL, s.n / 64);
    struct jbuf b;
    jbuf_init(st, &b, s.n + 4);
    jstr_upper_into(st, &b, s.u.s, s.n);
    return finish(&b, s);
}

jv jstr_capitalize(jst *st, jv s)
{
    jstep(st, NULL, s.n / 64);
    struct jbuf b;
    jbuf_init(st, &b, s.n + 4);
    for (size_t i = 0; i < s.n;) {
        size_t adv;
        uint32_t cp = jstr_decode(s.u.s + i, s.n - i, &adv);
        if (i == 0)
            put_mapped(st, &b, cp, MAP_TITLE);
        else
            lower_cp(st, &b, s.u.s, s.n, i, adv, cp);
        i += adv;
    }
    return finish(&b, s);
}

jv jstr_title_py(jst *st, jv s)
{
    jstep(st, NULL, s.n / 64);
    struct jbuf b;
    jbuf_init(st, &b, s.n + 4);
    int prev_cased = 0;
    for (size_t i = 0; i < s.n;) {
        size_t adv;
        uint32_t cp = jstr_decode(s.u.s + i, s.n - i, &adv);
        if (prev_cased)
            lower_cp(st, &b, s.u.s, s.n, i, adv, cp);
        else
            put_mapped(st, &b, cp, MAP_TITLE);
        prev_cased = (jcase_props(cp) & JC_CASED) != 0;
        i += adv;
    }
    return finish(&b, s);
}

jv jstr_swapcase(jst *st, jv s)
{
    jstep(st, NULL, s.n / 64);
    struct jbuf b;
    jbuf_init(st, &b, s.n + 4);
    for (size_t i = 0; i < s.n;) {
        size_t adv;
        uint32_t cp = jstr_decode(s.u.s + i, s.n - i, &adv);
        unsigned pr = jcase_props(cp);
        if (pr & JC_UPPER)
            lower_cp(st, &b, s.u.s, s.n, i, adv, cp);
        else if (pr & JC_LOWER)
            put_mapped(st, &b, cp, MAP_UPPER);
        else
            jbuf_put(st, &b, s.u.s + i, adv);
        i += adv;
    }
    return finish(&b, s);
}

/* ---- searching -------------------------------------------------------------------- */

static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn)
{
    if (nn == 0)
        return h;
    if (nn > hn)
        return NULL;
    return memmem(h, hn, nd, nn);
}

int jstr_contains(const char *h, size_t hn, const char *nd, size_t nn)
{
    return find_bytes(h, hn, nd, nn) != NULL;
}

jv jstr_replace(jst *st, const jnode *at, jv s, jv old, jv new_, int64_t count)
{
    if (count < 0)
        count = INT64_MAX;
    struct jbuf b;
    jbuf_init(st, &b, s.n + 16);
    const char *p = s.u.s;
    size_t n = s.n;
    if (old.n == 0) {
        size_t i = 0;
        int64_t k = 0;
        while (k < count) {
            jbuf_put(st, &b, new_.u.s, new_.n);
            k++;
            if (i >= n)
                break;
            size_t adv;
            jstr_decode(p + i, n - i, &adv);
            jbuf_put(st, &b, p + i, adv);
            i += adv;
        }
        jbuf_put(st, &b, p + i, n - i);
        jstep(st, at, b.n / 64);
        return jbuf_take(&b);
    }
    size_t i = 0;
    for (int64_t k = 0; k < count; k++) {
        const char *f = find_bytes(p + i, n - i, old.u.s, old.n);
        if (!f)
            break;
        size_t off = (size_t)(f - p);
        jbuf_put(st, &b, p + i, off - i);
        jbuf_put(st, &b, new_.u.s, new_.n);
        i = off + old.n;
    }
    jbuf_put(st, &b, p + i, n - i);
    jstep(st, at, b.n / 64);
    return jbuf_take(&b);
}

static void push_piece(jst *st, struct jlist *l, jv s, size_t a, size_t b)
{
    jv piece = jv_str(s.u.s + a, b - a);
    piece.mk = s.mk;
    jlist_push(st, l, piece);
}

static int space_at(const char *s, size_t n, size_t i, size_t *adv)
{
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) {
        *adv = 1;
        return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
    }
    return jstr_isspace(jstr_decode(s + i, n - i, adv));
}

static void split_ws(jst *st, struct jlist *l, jv s, int64_t maxcount)
{
    const char *p = s.u.s;
    size_t n = s.n, i = 0, adv;
    while (maxcount-- > 0) {
        while (i < n && space_at(p, n, i, &adv))
            i += adv;
        if (i == n)
            break;
        size_t j = i;
        while (i < n && !space_at(p, n, i, &adv))
            i += adv;
        push_piece(st, l, s, j, i);
    }
    if (i < n) {
        while (i < n && space_at(p, n, i, &adv))
            i += adv;
        if (i != n)
            push_piece(st, l, s, i, n);
    }
}

static void reverse(jv *v, uint32_t n)
{
    for (uint32_t a = 0, b = n ? n - 1 : 0; a < b; a++, b--) {
        jv t = v[a];
        v[a] = v[b];
        v[b] = t;
    }
}

static void rsplit_ws(jst *st, struct jlist *l, jv s, int64_t maxcount)
{
    const char *p = s.u.s;
    size_t i = s.n, adv; /* i: end of the unscanned prefix */
    while (maxcount-- > 0) {
        while (i > 0 && space_at(p, s.n, prev_cp(p, i), &adv))
            i = prev_cp(p, i);
        if (i == 0)
            break;
        size_t j = i;
        while (i > 0 && !space_at(p, s.n, prev_cp(p, i), &adv))
            i = prev_cp(p, i);
        push_piece(st, l, s, i, j);
    }
    if (i > 0) {
        while (i > 0 && space_at(p, s.n, prev_cp(p, i), &adv))
            i = prev_cp(p, i);
        if (i > 0)
            push_piece(st, l, s, 0, i);
    }
    reverse(l->v, l->n);
}

jv jstr_split(jst *st, const jnode *at, jv s, jv sep, int64_t maxsplit, int right)
{
    struct jlist *l = jlist_new(st, JL_LIST, 4);
    int64_t maxcount = maxsplit < 0 ? INT64_MAX : maxsplit;
    jstep(st, at, s.n / 64);
    if (sep.t != JT_STR) {
        if (right)
            rsplit_ws(st, l, s, maxcount);
        else
            split_ws(st, l, s, maxcount);
        return jv_list(l);
    }
    if (sep.n == 0)
        jfail(st, at, RS_JINJA_ERR_VALUE, "empty separator");
    const char *p = s.u.s;
    if (!right) {
        size_t i = 0;
        while (maxcount-- > 0) {
            const char *f = find_bytes(p + i, s.n - i, sep.u.s, sep.n);
            if (!f)
                break;
            push_piece(st, l, s, i, (size_t)(f - p));
            i = (size_t)(f - p) + sep.n;
        }
        push_piece(st, l, s, i, s.n);
        return jv_list(l);
    }
    size_t end = s.n;
    while (maxcount-- > 0 && end >= sep.n) {
        size_t k = end - sep.n;
        for (;; k--) {
            if (memcmp(p + k, sep.u.s, sep.n) == 0)
                break;
            if (k == 0) {
                k = SIZE_MAX;
                break;
            }
        }
        if (k == SIZE_MAX)
            break;
        push_piece(st, l, s, k + sep.n, end);
        end = k;
    }
    push_piece(st, l, s, 0, end);
    reverse(l->v, l->n);
    return jv_list(l);
}

/* Length of the line break at s[i] (str.splitlines' boundaries), or 0. */
static size_t line_break_at(const char *s, size_t n, size_t i)
{
    unsigned char c = (unsigned char)s[i];
    if (c == '\r')
        return i + 1 < n && s[i + 1] == '\n' ? 2 : 1;
    if (c == '\n' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E)
        return 1;
    if (c == 0xC2 && i + 1 < n && (unsigned char)s[i + 1] == 0x85)
        return 2;
    if (c == 0xE2 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
        ((unsigned char)s[i + 2] == 0xA8 || (unsigned char)s[i + 2] == 0xA9))
        return 3;
    return 0;
}

jv jstr_splitlines(jst *st, jv s, int keepends)
{
    jstep(st, NULL, s.n / 64);
    struct jlist *l = jlist_new(st, JL_LIST, 4);
    size_t start = 0, i = 0;
    while (i < s.n) {
        size_t k = line_break_at(s.u.s, s.n, i);
        if (!k) {
            i++;
            continue;
        }
        push_piece(st, l, s, start, keepends ? i + k : i);
        i += k;
        start = i;
    }
    if (start < s.n)
        push_piece(st, l, s, start, s.n);
    return jv_list(l);
}

int64_t jslice_adjust(int64_t len, int64_t *start, int64_t *stop, int64_t step, int have_start,
                      int have_stop)
{
    if (!have_start)
        *start = step < 0 ? INT64_MAX : 0;
    if (!have_stop)
        *stop = step < 0 ? INT64_MIN : INT64_MAX;
    if (*start < 0) {
        *start = *start < -len ? (step < 0 ? -1 : 0) : *start + len;
    } else if (*start >= len) {
        *start = step < 0 ? len - 1 : len;
    }
    if (*stop < 0) {
        *stop = *stop < -len ? (step < 0 ? -1 : 0) : *stop + len;
    } else if (*stop >= len) {
        *stop = step < 0 ? len - 1 : len;
    }
    if (step < 0)
        return *stop < *start ? (*start - *stop - 1) / (-step) + 1 : 0;
    return *start < *stop ? (*stop - *start - 1) / step + 1 : 0;
}

jv jstr_slice(jst *st, jv s, int64_t start, int64_t stop, int64_t step, int have_start,
              int have_stop)
{
    jstep(st, NULL, s.n / 128);
    int ascii = ascii_only(s.u.s, s.n);
    int64_t len = ascii ? (int64_t)s.n : (int64_t)jstr_cplen(s.u.s, s.n);
    int64_t count = jslice_adjust(len, &start, &stop, step, have_start, have_stop);
    jv r;
    if (step == 1 || count == 0) {
        if (count == 0)
            r = JV_LIT("");
        else if (ascii)
            r = jv_str(s.u.s + start, (size_t)count);
        else {
            size_t a = jstr_cpoff(s.u.s, s.n, (size_t)start);
            size_t b = a + jstr_cpoff(s.u.s + a, s.n - a, (size_t)count);
            r = jv_str(s.u.s + a, b - a);
        }
        r.mk = s.mk;
        return r;
    }
    struct jbuf b;
    jbuf_init(st, &b, (size_t)count + 4);
    size_t *offs = NULL;
    if (!ascii) {
        offs = ja_alloc(&st->ar, ((size_t)len + 1) * sizeof(size_t));
        size_t o = 0;
        for (int64_t i = 0; i < len; i++) {
            offs[i] = o;
            size_t adv;
            jstr_decode(s.u.s + o, s.n - o, &adv);
            o += adv;
        }
        offs[len] = s.n;
    }
    for (int64_t k = 0, i = start; k < count; k++, i += step) {
        if (ascii)
            jbuf_putc(st, &b, s.u.s[i]);
        else
            jbuf_put(st, &b, s.u.s + offs[i], offs[i + 1] - offs[i]);
    }
    return finish(&b, s);
}

jv jstr_index(jst *st, jv s, int64_t i, int *ok)
{
    jstep(st, NULL, s.n / 128);
    int ascii = ascii_only(s.u.s, s.n);
    int64_t len = ascii ? (int64_t)s.n : (int64_t)jstr_cplen(s.u.s, s.n);
    if (i < 0)
        i += len;
    *ok = i >= 0 && i < len;
    if (!*ok)
        return jv_undef();
    size_t a = ascii ? (size_t)i : jstr_cpoff(s.u.s, s.n, (size_t)i), adv;
    jstr_decode(s.u.s + a, s.n - a, &adv);
    return jv_str(s.u.s + a, adv);
}

/* Byte range [*a, *b) of code-point slice [start, end) (Python's find/count bounds). */
static int cp_range(jv s, int64_t start, int64_t end, size_t *a, size_t *b, int64_t *cstart,
                    int64_t *len_out)
{
    int64_t len = (int64_t)jstr_cplen(s.u.s, s.n);
    if (end > len)
        end = len;
    else if (end < 0) {
        end += len;
        if (end < 0)
            end = 0;
    }
    if (start < 0) {
        start += len;
        if (start < 0)
            start = 0;
    }
    *len_out = len;
    *cstart = start;
    if (start > len)
        return 0;
    *a = jstr_cpoff(s.u.s, s.n, (size_t)start);
    *b = end <= start ? *a : *a + jstr_cpoff(s.u.s + *a, s.n - *a, (size_t)(end - start));
    return end >= start;
}

int64_t jstr_find(jst *st, jv s, jv sub, int64_t start, int64_t end, int right)
{
    jstep(st, NULL, s.n / 64);
    size_t a, b;
    int64_t cstart, len;
    if (!cp_range(s, start, end, &a, &b, &cstart, &len))
        return -1;
    if (b - a < sub.n)
        return -1;
    const char *f = NULL;
    if (!right) {
        f = find_bytes(s.u.s + a, b - a, sub.u.s, sub.n);
    } else {
        for (size_t k = b - sub.n + 1; k-- > a;)
            if (memcmp(s.u.s + k, sub.u.s, sub.n) == 0) {
                f = s.u.s + k;
                break;
            }
    }
    if (!f)
        return -1;
    return cstart + (int64_t)jstr_cplen(s.u.s + a, (size_t)(f - (s.u.s + a)));
}

int64_t jstr_count(jst *st, jv s, jv sub, int64_t start, int64_t end)
{
    jstep(st, NULL, s.n / 64);
    size_t a, b;
    int64_t cstart, len;
    if (!cp_range(s, start, end, &a, &b, &cstart, &len))
        return 0;
    if (sub.n == 0)
        return (int64_t)jstr_cplen(s.u.s + a, b - a) + 1;
    int64_t k = 0;
    for (size_t i = a; i + sub.n <= b;) {
        const char *f = find_bytes(s.u.s + i, b - i, sub.u.s, sub.n);
        if (!f)
            break;
        k++;
        i = (size_t)(f - s.u.s) + sub.n;
    }
    return k;
}

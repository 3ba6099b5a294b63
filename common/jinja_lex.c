/* SPDX-License-Identifier: MIT */
/*
 * Chat-template lexer: Jinja2 3.1's tokenizer rules with transformers'
 * settings. Newlines are normalized to \n and one final newline dropped
 * (keep_trailing_newline off); text before a tag loses its trailing
 * whitespace for `{%-`/`{{-`/`{#-`, and its indentation for a block or comment
 * tag alone on its line (lstrip_blocks, unless `{%+`); a block or comment tag
 * eats the newline after it (trim_blocks, unless `+%}`), `-%}` all whitespace.
 * String literals unescape as Python's unicode-escape codec does. Leaves out
 * line statements and custom delimiters (transformers sets neither).
 */
#include <stdio.h>
#include <string.h>

#include "common/jinja_syntax.h"
#include "common/utf8.h"

#define MAX_BRACKETS 256

struct lexer {
    struct jcomp *c;
    const char *s;
    size_t n;
    struct jtoken *tok;
    size_t ntok, cap;
    /* position cursor: byte offset -> line/col, advanced monotonically */
    size_t cur;
    uint32_t line, col;
};

_Noreturn void jcomp_fail(struct jcomp *c, unsigned line, unsigned col, enum rs_jinja_errkind kind,
                          const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
    va_end(ap);
    c->kind = kind;
    c->line = line;
    c->col = col;
    longjmp(c->jb, 1);
}

static void locate(struct lexer *lx, size_t pos, uint32_t *line, uint32_t *col)
{
    for (; lx->cur < pos; lx->cur++) {
        unsigned char b = (unsigned char)lx->s[lx->cur];
        if (b == '\n') {
            lx->line++;
            lx->col = 1;
        } else if ((b & 0xC0) != 0x80) {
            lx->col++;
        }
    }
    *line = lx->line;
    *col = lx->col;
}

_Noreturn static void lex_fail(struct lexer *lx, size_t pos, const char *fmt, const char *arg)
{
    uint32_t line, col;
    locate(lx, pos, &line, &col);
    jcomp_fail(lx->c, line, col, RS_JINJA_ERR_SYNTAX, fmt, arg);
}

static struct jtoken *emit(struct lexer *lx, uint8_t type, size_t pos)
{
    if (lx->ntok == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        struct jtoken *t = ja_alloc(lx->c->ar, cap * sizeof(*t));
        if (lx->ntok)
            memcpy(t, lx->tok, lx->ntok * sizeof(*t));
        lx->tok = t;
        lx->cap = cap;
    }
    struct jtoken *t = &lx->tok[lx->ntok++];
    memset(t, 0, sizeof(*t));
    t->type = type;
    locate(lx, pos, &t->line, &t->col);
    return t;
}

/* Python's \s at s[p]: its length in bytes, 0 if not whitespace. */
static size_t space_at(const char *s, size_t n, size_t p)
{
    unsigned char b = (unsigned char)s[p];
    if (b < 0x80)
        return (b == ' ' || (b >= 0x09 && b <= 0x0D) || (b >= 0x1C && b <= 0x1F)) ? 1 : 0;
    size_t adv;
    uint32_t cp = jstr_decode(s + p, n - p, &adv);
    return jstr_isspace(cp) ? adv : 0;
}

static size_t skip_space(const char *s, size_t n, size_t p)
{
    size_t k;
    while (p < n && (k = space_at(s, n, p)) != 0)
        p += k;
    return p;
}

/* Start of the trailing whitespace of s[a..b) (Python's str.rstrip()). */
static size_t rstrip_pos(const char *s, size_t a, size_t b)
{
    while (b > a) {
        size_t q = b - 1;
        while (q > a && ((unsigned char)s[q] & 0xC0) == 0x80)
            q--;
        if (!space_at(s, b, q))
            break;
        b = q;
    }
    return b;
}

/*
 * Applies the whitespace rules to the text s[a..b) before a tag whose sign
 * (after the opening delimiter) is `sign`; returns the new end.
 */
static size_t strip_before(const char *s, size_t a, size_t b, char sign, int lstrip,
                           int line_starting)
{
    if (sign == '-')
        return rstrip_pos(s, a, b);
    if (sign == '+' || !lstrip)
        return b;
    size_t l = b;
    while (l > a && s[l - 1] != '\n')
        l--;
    if (l == a && !line_starting)
        return b;
    for (size_t p = l; p < b; p++)
        if (s[p] != ' ' && s[p] != '\t')
            return b;
    return l;
}

static void emit_data(struct lexer *lx, size_t a, size_t b)
{
    if (b > a) {
        struct jtoken *t = emit(lx, T_DATA, a);
        t->s = lx->s + a;
        t->n = (uint32_t)(b - a);
    }
}

/*
 * Matches a block/comment end `close` (2 chars, e.g. "%}") at p: "+%}" keeps
 * what follows, "-%}" eats all whitespace, "%}" eats one newline (trim_blocks).
 * Returns the end of the match, or 0.
 */
static size_t match_end(const char *s, size_t n, size_t p, const char *close, int trim)
{
    if (p + 3 <= n && (s[p] == '+' || s[p] == '-') && s[p + 1] == close[0] && s[p + 2] == close[1])
        return s[p] == '-' ? skip_space(s, n, p + 3) : p + 3;
    if (p + 2 <= n && s[p] == close[0] && s[p + 1] == close[1]) {
        p += 2;
        if (trim && p < n && s[p] == '\n')
            p++;
        return p;
    }
    return 0;
}

static int is_word_at(const char *s, size_t n, size_t p, const char *w)
{
    size_t k = strlen(w);
    return p + k <= n && memcmp(s + p, w, k) == 0;
}

/* "{%" sign? \s* "raw" \s* ("-%}" \s* | "%}") at p: end of the match, or 0. */
static size_t match_raw_begin(const char *s, size_t n, size_t p)
{
    p += 2;
    if (p < n && (s[p] == '-' || s[p] == '+'))
        p++;
    p = skip_space(s, n, p);
    if (!is_word_at(s, n, p, "raw"))
        return 0;
    p = skip_space(s, n, p + 3);
    if (is_word_at(s, n, p, "-%}"))
        return skip_space(s, n, p + 3);
    if (is_word_at(s, n, p, "%}"))
        return p + 2;
    return 0;
}

/* {% raw %}...{% endraw %}: emits the text, returns the position after endraw. */
static size_t lex_raw(struct lexer *lx, size_t tag, size_t p, int *line_starting)
{
    const char *s = lx->s;
    size_t n = lx->n;
    int ls = s[p - 1] == '\n';
    for (size_t q = p; q + 1 < n; q++) {
        if (s[q] != '{' || s[q + 1] != '%')
            continue;
        size_t r = q + 2;
        char sign = 0;
        if (r < n && (s[r] == '-' || s[r] == '+'))
            sign = s[r++];
        r = skip_space(s, n, r);
        if (!is_word_at(s, n, r, "endraw"))
            continue;
        r = skip_space(s, n, r + 6);
        size_t e = match_end(s, n, r, "%}", 1);
        if (!e)
            continue;
        emit_data(lx, p, strip_before(s, p, q, sign, 1, ls));
        *line_starting = s[e - 1] == '\n';
        return e;
    }
    lex_fail(lx, tag, "%s", "Missing end of raw directive");
}

static size_t lex_comment(struct lexer *lx, size_t tag, size_t p, int *line_starting)
{
    const char *s = lx->s;
    for (size_t q = p; q < lx->n; q++) {
        size_t e = match_end(s, lx->n, q, "#}", 1);
        if (e) {
            *line_starting = s[e - 1] == '\n';
            return e;
        }
    }
    lex_fail(lx, tag, "%s", "Missing end of comment tag");
}

static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* (\d+_)*\d+ at p: end or 0. */
static size_t digits_us(const char *s, size_t n, size_t p)
{
    if (p >= n || !is_digit(s[p]))
        return 0;
    size_t q = p;
    for (;;) {
        while (q < n && is_digit(s[q]))
            q++;
        if (q + 1 < n && s[q] == '_' && is_digit(s[q + 1]))
            q++;
        else
            return q;
    }
}

/* Jinja's float_re at p (not preceded by '.'): end or 0. */
static size_t match_float(const char *s, size_t n, size_t p)
{
    if (p > 0 && s[p - 1] == '.')
        return 0;
    size_t q = digits_us(s, n, p);
    if (!q)
        return 0;
    size_t frac = 0;
    if (q < n && s[q] == '.')
        frac = digits_us(s, n, q + 1);
    size_t after = frac ? frac : q;
    if (after < n && (s[after] == 'e' || s[after] == 'E')) {
        size_t r = after + 1;
        if (r < n && (s[r] == '+' || s[r] == '-'))
            r++;
        size_t e = digits_us(s, n, r);
        if (e)
            return e;
    }
    return frac;
}

static int digit_in_base(char ch, int base)
{
    int d = ch >= '0' && ch <= '9' ? ch - '0'
            : (ch | 32) >= 'a' && (ch | 32) <= 'f' ? (ch | 32) - 'a' + 10 : 99;
    return d < base ? d : -1;
}

/* Jinja's integer_re at p; the value in *v. End or 0. */
static size_t match_int(struct lexer *lx, size_t p, int64_t *v)
{
    const char *s = lx->s;
    size_t n = lx->n;
    int base = 10;
    size_t q = p;
    if (s[p] == '0' && p + 1 < n && strchr("bBoOxX", s[p + 1]) != NULL && s[p + 1]) {
        char k = (char)(s[p + 1] | 32);
        base = k == 'b' ? 2 : k == 'o' ? 8 : 16;
        q = p + 2;
        size_t r = q;
        while (r < n) {
            size_t t = r + (s[r] == '_');
            if (t < n && digit_in_base(s[t], base) >= 0)
                r = t + 1;
            else
                break;
        }
        if (r == q)
            base = 10; /* "0b" alone: decimal zero, then a name */
        else
            q = r;
    }
    if (base == 10) {
        if (!is_digit(s[p]))
            return 0;
        q = p + 1;
        char allowed_first = s[p];
        while (q < n) {
            size_t t = q + (s[q] == '_');
            if (t < n && is_digit(s[t]) && (allowed_first != '0' || s[t] == '0'))
                q = t + 1;
            else
                break;
        }
    }
    uint64_t acc = 0;
    for (size_t r = p + (base == 10 ? 0 : 2); r < q; r++) {
        if (s[r] == '_')
            continue;
        uint64_t d = (uint64_t)digit_in_base(s[r], base);
        if (acc > (UINT64_MAX - d) / (uint64_t)base || acc * (uint64_t)base + d > (uint64_t)INT64_MAX)
            lex_fail(lx, p, "%s", "integer literal too large (this renderer's integers are 64-bit)");
        acc = acc * (uint64_t)base + d;
    }
    *v = (int64_t)acc;
    return q;
}

static size_t match_name(const char *s, size_t n, size_t p)
{
    size_t q = p;
    while (q < n) {
        unsigned char b = (unsigned char)s[q];
        if (b < 0x80) {
            if (b == '_' || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') ||
                (q > p && b >= '0' && b <= '9'))
                q++;
            else
                break;
        } else {
            size_t adv;
            uint32_t cp = jstr_decode(s + q, n - q, &adv);
            unsigned pr = jcase_props(cp);
            if (pr & (q > p ? JC_IDCONT : JC_IDSTART))
                q += adv;
            else
                break;
        }
    }
    return q;
}

static const struct {
    const char *s;
    uint8_t op;
} ops[] = {
    {"//", TO_FLOORDIV}, {"**", TO_POW}, {"==", TO_EQ}, {"!=", TO_NE}, {">=", TO_GE},
    {"<=", TO_LE},       {"+", TO_ADD},  {"-", TO_SUB}, {"/", TO_DIV}, {"*", TO_MUL},
    {"%", TO_MOD},       {"~", TO_TILDE}, {"[", TO_LBRACKET}, {"]", TO_RBRACKET},
    {"(", TO_LPAREN},    {")", TO_RPAREN}, {"{", TO_LBRACE}, {"}", TO_RBRACE}, {">", TO_GT},
    {"<", TO_LT},        {"=", TO_ASSIGN}, {".", TO_DOT}, {":", TO_COLON}, {"|", TO_PIPE},
    {",", TO_COMMA},     {";", TO_SEMICOLON},
};

static int hexval(char ch)
{
    return digit_in_base(ch, 16);
}

/*
 * Decodes a string literal's body as Jinja does: the text is made ASCII with
 * backslashreplace, then decoded with Python's unicode-escape codec. So "\\n"
 * is a newline, unknown escapes keep their backslash, a backslash before a
 * non-ASCII character yields that character's \xNN/\uNNNN/\UNNNNNNNN text.
 * Writes at most 3 bytes per input byte; *bad names a malformed escape.
 */
static size_t unescape(const char *s, size_t n, char *out, const char **bad)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) {
            out[k++] = s[i];
            continue;
        }
        unsigned char e = (unsigned char)s[++i];
        uint32_t cp;
        int want = 0;
        switch (e) {
        case '\n': continue;
        case '\\': out[k++] = '\\'; continue;
        case '\'': out[k++] = '\''; continue;
        case '"': out[k++] = '"'; continue;
        case 'a': out[k++] = 7; continue;
        case 'b': out[k++] = 8; continue;
        case 'f': out[k++] = 12; continue;
        case 'n': out[k++] = 10; continue;
        case 'r': out[k++] = 13; continue;
        case 't': out[k++] = 9; continue;
        case 'v': out[k++] = 11; continue;
        case 'x': want = 2; break;
        case 'u': want = 4; break;
        case 'U': want = 8; break;
        case 'N': *bad = "\\N{...} escapes are not supported"; return k;
        default: break;
        }
        if (e >= '0' && e <= '7') {
            cp = (uint32_t)(e - '0');
            for (int d = 0; d < 2 && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '7'; d++)
                cp = cp * 8 + (uint32_t)(s[++i] - '0');
        } else if (want) {
            cp = 0;
            for (int d = 0; d < want; d++) {
                if (i + 1 >= n || hexval(s[i + 1]) < 0) {
                    *bad = want == 2 ? "truncated \\xXX escape"
                           : want == 4 ? "truncated \\uXXXX escape" : "truncated \\UXXXXXXXX escape";
                    return k;
                }
                cp = cp * 16 + (uint32_t)hexval(s[++i]);
            }
            if (cp > 0x10FFFF) {
                *bad = "illegal Unicode character";
                return k;
            }
        } else if (e >= 0x80) {
            size_t adv;
            uint32_t c = jstr_decode(s + i, n - i, &adv);
            k += (size_t)sprintf(out + k, c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x", c);
            i += adv - 1;
            continue;
        } else {
            out[k++] = '\\';
            out[k++] = (char)e;
            continue;
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) {
            *bad = "string escape gives a lone surrogate (not valid UTF-8)";
            return k;
        }
        k += rs_utf8_encode(cp, out + k);
    }
    return k;
}

static size_t lex_string(struct lexer *lx, size_t p)
{
    const char *s = lx->s;
    char q = s[p];
    size_t r = p + 1;
    while (r < lx->n && s[r] != q)
        r += s[r] == '\\' && r + 1 < lx->n ? 2 : 1;
    if (r >= lx->n)
        lex_fail(lx, p, "unexpected char '%s' (unterminated string)", q == '"' ? "\"" : "'");
    struct jtoken *t = emit(lx, T_STRING, p);
    char *out = ja_alloc(lx->c->ar, (r - p) * 3 + 1);
    const char *bad = NULL;
    size_t len = unescape(s + p + 1, r - p - 1, out, &bad);
    if (bad)
        jcomp_fail(lx->c, t->line, t->col, RS_JINJA_ERR_SYNTAX, "%s", bad);
    t->s = out;
    t->n = (uint32_t)len;
    return r + 1;
}

/* One token inside a tag at p (whitespace skipped by the caller); returns the new position. */
static size_t lex_one(struct lexer *lx, size_t p, char *stack, unsigned *depth)
{
    const char *s = lx->s;
    size_t n = lx->n, e;
    int64_t iv;
    if ((e = match_float(s, n, p)) != 0) {
        struct jtoken *t = emit(lx, T_FLOAT, p);
        char buf[128];
        size_t k = 0;
        for (size_t r = p; r < e && k + 1 < sizeof(buf); r++)
            if (s[r] != '_')
                buf[k++] = s[r];
        buf[k] = 0;
        t->f = strtod(buf, NULL);
        return e;
    }
    if ((e = match_int(lx, p, &iv)) != 0) {
        emit(lx, T_INT, p)->i = iv;
        return e;
    }
    if ((e = match_name(s, n, p)) != p) {
        struct jtoken *t = emit(lx, T_NAME, p);
        t->s = s + p;
        t->n = (uint32_t)(e - p);
        return e;
    }
    if (s[p] == '"' || s[p] == '\'')
        return lex_string(lx, p);
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        size_t k = strlen(ops[i].s);
        if (p + k > n || memcmp(s + p, ops[i].s, k) != 0)
            continue;
        char ch = ops[i].s[0];
        if (k == 1 && (ch == '(' || ch == '[' || ch == '{')) {
            if (*depth >= MAX_BRACKETS)
                lex_fail(lx, p, "%s", "brackets nested too deeply");
            stack[(*depth)++] = ch == '(' ? ')' : ch == '[' ? ']' : '}';
        } else if (k == 1 && (ch == ')' || ch == ']' || ch == '}')) {
            char ex[2] = {0, 0};
            if (*depth == 0)
                lex_fail(lx, p, "unexpected '%s'", ops[i].s);
            ex[0] = stack[--(*depth)];
            if (ex[0] != ch)
                lex_fail(lx, p, "unexpected bracket, expected '%s'", ex);
        }
        emit(lx, T_OP, p)->op = ops[i].op;
        return p + k;
    }
    char shown[8] = {0};
    size_t adv;
    jstr_decode(s + p, n - p, &adv);
    memcpy(shown, s + p, adv < 4 ? adv : 4);
    lex_fail(lx, p, "unexpected char '%s'", shown);
}

/* The inside of {% ... %} or {{ ... }} from p; returns the position after the end tag. */
static size_t lex_tag(struct lexer *lx, size_t p, int block, int *line_starting)
{
    char stack[MAX_BRACKETS];
    unsigned depth = 0;
    const char *s = lx->s;
    size_t n = lx->n;
    for (;;) {
        if (depth == 0) {
            size_t e = block ? match_end(s, n, p, "%}", 1)
                             : (is_word_at(s, n, p, "-}}") ? skip_space(s, n, p + 3)
                                : is_word_at(s, n, p, "}}") ? p + 2 : 0);
            if (e) {
                emit(lx, block ? T_BLOCK_END : T_VAR_END, p);
                *line_starting = s[e - 1] == '\n';
                return e;
            }
        }
        size_t k = p < n ? space_at(s, n, p) : 0;
        if (k) {
            p = skip_space(s, n, p);
            continue;
        }
        if (p >= n)
            return n; /* unterminated tag: the parser reports the early end */
        p = lex_one(lx, p, stack, &depth);
    }
}

/* Copy with \r\n and \r turned into \n and one final newline dropped. */
static char *normalize(struct jcomp *c, const char *src, size_t len, size_t *out_len)
{
    char *d = ja_alloc(c->ar, len + 1);
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            d[k++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            d[k++] = src[i];
        }
    }
    if (k && d[k - 1] == '\n')
        k--;
    d[k] = 0;
    *out_len = k;
    return d;
}

struct jtoken *jinja_lex(struct jcomp *c, const char *src, size_t len, size_t *n_tokens)
{
    struct lexer lx = {.c = c, .line = 1, .col = 1};
    size_t bad = rs_utf8_valid_prefix(src, len);
    if (bad != len) {
        lx.s = src;
        lx.n = len;
        lex_fail(&lx, bad, "%s", "template is not valid UTF-8");
    }
    lx.s = normalize(c, src, len, &lx.n);
    const char *s = lx.s;
    size_t n = lx.n, pos = 0;
    int line_starting = 1;
    while (pos < n) {
        size_t t = pos;
        while (t + 1 < n && !(s[t] == '{' && (s[t + 1] == '{' || s[t + 1] == '%' || s[t + 1] == '#')))
            t++;
        if (t + 1 >= n) {
            emit_data(&lx, pos, n);
            break;
        }
        char kind = s[t + 1];
        char sign = t + 2 < n && (s[t + 2] == '-' || s[t + 2] == '+') ? s[t + 2] : 0;
        size_t raw_end = kind == '%' ? match_raw_begin(s, n, t) : 0;
        emit_data(&lx, pos, strip_before(s, pos, t, sign, kind != '{', line_starting));
        size_t body = t + 2 + (sign ? 1 : 0);
        if (raw_end) {
            pos = lex_raw(&lx, t, raw_end, &line_starting);
        } else if (kind == '#') {
            pos = lex_comment(&lx, t, body, &line_starting);
        } else {
            emit(&lx, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, t);
            pos = lex_tag(&lx, body, kind == '%', &line_starting);
        }
    }
    emit(&lx, T_EOF, n);
    *n_tokens = lx.ntok;
    return lx.tok;
}

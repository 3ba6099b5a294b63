/* SPDX-License-Identifier: MIT */
/*
 * GBNF grammars end to end: random constrained generation on the llama-spm
 * (byte tokens split characters) and gpt-2 (byte-level) vocabs for an
 * arithmetic grammar, nested lists, a C-like subset and a UTF-8 heavy one,
 * every output checked by a recogniser written here independently of the
 * engine: its own small GBNF reader, the EBNF operators rewritten into plain
 * BNF rules, and an Earley parser over code points (every output must be a
 * viable prefix; ended ones complete sentences). Plus malformed grammars,
 * each refused with its line and column.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "tests/rs_test.h"
#include "tests/unit/grammar_testutil.h"

/* --- an independent recogniser -------------------------------------------------------- */

#define EY_MAX_SYM 16384

/* A symbol: nonterminal (nt >= 0) or a code point set (nt < 0: ranges, negate). */
struct ey_sym {
    int nt;
    int negate;
    int n_ranges;
    uint32_t ranges[32];
};

struct ey_prod {
    int lhs;
    int n;
    int syms[64]; /* indices into ey.sym */
};

struct ey {
    struct ey_sym sym[EY_MAX_SYM];
    int n_sym;
    struct ey_prod *prod;
    int n_prod, cap_prod;
    char names[512][48];
    int n_names;
    int nullable[512];
    const char *s;
    size_t pos, len;
    int bad;
};

static int ey_nt(struct ey *e, const char *name, size_t len)
{
    for (int i = 0; i < e->n_names; i++)
        if (strlen(e->names[i]) == len && memcmp(e->names[i], name, len) == 0)
            return i;
    snprintf(e->names[e->n_names], sizeof(e->names[0]), "%.*s", (int)len, name);
    return e->n_names++;
}

static int ey_fresh(struct ey *e)
{
    char b[32];
    snprintf(b, sizeof(b), " anon%d", e->n_names);
    return ey_nt(e, b, strlen(b));
}

static int ey_sym_nt(struct ey *e, int nt)
{
    e->sym[e->n_sym] = (struct ey_sym){.nt = nt};
    return e->n_sym++;
}

static int ey_sym_cp(struct ey *e, uint32_t lo, uint32_t hi)
{
    e->sym[e->n_sym] = (struct ey_sym){.nt = -1, .n_ranges = 1, .ranges = {lo, hi}};
    return e->n_sym++;
}

static void ey_add(struct ey *e, int lhs, const int *syms, int n)
{
    if (e->n_prod == e->cap_prod) {
        e->cap_prod = e->cap_prod ? e->cap_prod * 2 : 64;
        e->prod = realloc(e->prod, (size_t)e->cap_prod * sizeof(*e->prod));
    }
    struct ey_prod *p = &e->prod[e->n_prod++];
    p->lhs = lhs;
    p->n = n;
    memcpy(p->syms, syms, (size_t)n * sizeof(int));
}

static void ey_ws(struct ey *e)
{
    while (e->pos < e->len) {
        char c = e->s[e->pos];
        if (c == '#')
            while (e->pos < e->len && e->s[e->pos] != '\n')
                e->pos++;
        else if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
            e->pos++;
        else
            break;
    }
}

static uint32_t ey_char(struct ey *e)
{
    uint32_t cp;
    if (e->s[e->pos] != '\\') {
        e->pos += rs_utf8_next(e->s + e->pos, e->len - e->pos, &cp);
        return cp;
    }
    char c = e->s[e->pos + 1];
    e->pos += 2;
    if (c == 'n')
        return '\n';
    if (c == 't')
        return '\t';
    if (c == 'r')
        return '\r';
    if (c == 'x' || c == 'u' || c == 'U') {
        int n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        char hex[9] = {0};
        memcpy(hex, e->s + e->pos, (size_t)n);
        e->pos += (size_t)n;
        return (uint32_t)strtoul(hex, NULL, 16);
    }
    return (uint8_t)c;
}

static int ey_alt(struct ey *e);

/* One element (a symbol), with its postfix operators applied. */
static int ey_item(struct ey *e)
{
    char c = e->s[e->pos];
    int sym;
    if (c == '"') {
        int syms[64], n = 0;
        e->pos++;
        while (e->s[e->pos] != '"') {
            uint32_t cp = ey_char(e);
            syms[n++] = ey_sym_cp(e, cp, cp);
        }
        e->pos++;
        int nt = ey_fresh(e);
        ey_add(e, nt, syms, n);
        sym = ey_sym_nt(e, nt);
    } else if (c == '[') {
        struct ey_sym *s = &e->sym[e->n_sym];
        *s = (struct ey_sym){.nt = -1};
        e->pos++;
        if (e->s[e->pos] == '^')
            s->negate = 1, e->pos++;
        while (e->s[e->pos] != ']') {
            uint32_t lo = ey_char(e), hi = lo;
            if (e->s[e->pos] == '-' && e->s[e->pos + 1] != ']')
                e->pos++, hi = ey_char(e);
            s->ranges[2 * s->n_ranges] = lo;
            s->ranges[2 * s->n_ranges + 1] = hi;
            s->n_ranges++;
        }
        e->pos++;
        sym = e->n_sym++;
    } else if (c == '.') {
        e->pos++;
        e->sym[e->n_sym] = (struct ey_sym){.nt = -1, .negate = 1};
        sym = e->n_sym++;
    } else if (c == '(') {
        e->pos++;
        sym = ey_sym_nt(e, ey_alt(e));
        ey_ws(e);
        e->pos++; /* ')' */
    } else {
        size_t st = e->pos;
        while (e->pos < e->len && (isalnum((unsigned char)e->s[e->pos]) || e->s[e->pos] == '-' ||
                                   e->s[e->pos] == '_'))
            e->pos++;
        sym = ey_sym_nt(e, ey_nt(e, e->s + st, e->pos - st));
    }
    for (;;) {
        char op = e->pos < e->len ? e->s[e->pos] : 0;
        int nt, min = 0, max = -1;
        if (op == '*')
            min = 0, max = -1;
        else if (op == '+')
            min = 1, max = -1;
        else if (op == '?')
            min = 0, max = 1;
        else if (op == '{') {
            char *end;
            min = (int)strtol(e->s + e->pos + 1, &end, 10);
            max = min;
            if (*end == ',')
                max = end[1] == '}' ? -1 : (int)strtol(end + 1, &end, 10);
            e->pos = (size_t)(strchr(e->s + e->pos, '}') - e->s);
        } else
            return sym;
        e->pos++;
        /* X{min,max}: X^min then a tail: star (max -1) or max-min nested optionals */
        int tail = ey_fresh(e), empty[1];
        if (max < 0) {
            int rec[2] = {sym, ey_sym_nt(e, tail)};
            ey_add(e, tail, empty, 0);
            ey_add(e, tail, rec, 2);
        } else {
            int cur = ey_fresh(e);
            ey_add(e, cur, empty, 0);
            for (int k = min; k < max; k++) {
                int next = ey_fresh(e), two[2] = {sym, ey_sym_nt(e, cur)};
                ey_add(e, next, empty, 0);
                ey_add(e, next, two, 2);
                cur = next;
            }
            int one[1] = {ey_sym_nt(e, cur)};
            ey_add(e, tail, one, 1);
        }
        int syms[64], n = 0;
        for (int k = 0; k < min; k++)
            syms[n++] = sym;
        syms[n++] = ey_sym_nt(e, tail);
        nt = ey_fresh(e);
        ey_add(e, nt, syms, n);
        sym = ey_sym_nt(e, nt);
    }
}

/* Alternatives up to ')' or the end of the rule text: a new nonterminal. */
static int ey_alt(struct ey *e)
{
    int nt = ey_fresh(e);
    for (;;) {
        int syms[64], n = 0;
        for (;;) {
            ey_ws(e);
            if (e->pos >= e->len || e->s[e->pos] == '|' || e->s[e->pos] == ')')
                break;
            syms[n++] = ey_item(e);
        }
        ey_add(e, nt, syms, n);
        if (e->pos < e->len && e->s[e->pos] == '|') {
            e->pos++;
            continue;
        }
        return nt;
    }
}

/* Reads a grammar: each rule starts on a line "name ::=". */
static void ey_load(struct ey *e, const char *g)
{
    memset(e, 0, sizeof(*e));
    const char *p = g;
    while (*p) {
        const char *def = strstr(p, "::=");
        const char *name = def;
        while (name > p && name[-1] == ' ')
            name--;
        const char *ne = name;
        while (name > p && name[-1] != '\n')
            name--;
        const char *next = strstr(def + 3, "::=");
        const char *end = g + strlen(g);
        if (next != NULL) {
            while (next > def && next[-1] != '\n')
                next--;
            end = next;
        }
        int lhs = ey_nt(e, name, (size_t)(ne - name));
        e->s = def + 3;
        e->pos = 0;
        e->len = (size_t)(end - (def + 3));
        int body = ey_alt(e);
        int one[1] = {ey_sym_nt(e, body)};
        ey_add(e, lhs, one, 1);
        p = end;
    }
    for (int changed = 1; changed;) { /* nullable nonterminals */
        changed = 0;
        for (int i = 0; i < e->n_prod; i++) {
            const struct ey_prod *pr = &e->prod[i];
            int all = !e->nullable[pr->lhs];
            for (int k = 0; k < pr->n && all; k++)
                all = e->sym[pr->syms[k]].nt >= 0 && e->nullable[e->sym[pr->syms[k]].nt];
            if (all)
                e->nullable[pr->lhs] = 1, changed = 1;
        }
    }
}

static int ey_match(const struct ey_sym *s, uint32_t cp)
{
    int in = 0;
    for (int i = 0; i < s->n_ranges; i++)
        in |= cp >= s->ranges[2 * i] && cp <= s->ranges[2 * i + 1];
    return s->negate ? !in : in;
}

struct ey_item {
    int prod, dot, origin;
};

struct ey_set {
    struct ey_item *v;
    int n, cap;
};

static void ey_put(struct ey_set *s, struct ey_item it)
{
    for (int i = 0; i < s->n; i++)
        if (s->v[i].prod == it.prod && s->v[i].dot == it.dot && s->v[i].origin == it.origin)
            return;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->v = realloc(s->v, (size_t)s->cap * sizeof(*s->v));
    }
    s->v[s->n++] = it;
}

/* Predict and complete within set k (Aycock-Horspool: nullable symbols are skipped). */
static void ey_close(const struct ey *e, struct ey_set *sets, int k)
{
    struct ey_set *s = &sets[k];
    for (int i = 0; i < s->n; i++) {
        struct ey_item it = s->v[i];
        const struct ey_prod *p = &e->prod[it.prod];
        if (it.dot == p->n) {
            struct ey_set *o = &sets[it.origin];
            for (int j = 0; j < o->n; j++) {
                struct ey_item w = o->v[j];
                const struct ey_prod *q = &e->prod[w.prod];
                if (w.dot < q->n && e->sym[q->syms[w.dot]].nt == p->lhs)
                    ey_put(s, (struct ey_item){w.prod, w.dot + 1, w.origin});
            }
            continue;
        }
        int nt = e->sym[p->syms[it.dot]].nt;
        if (nt < 0)
            continue;
        for (int r = 0; r < e->n_prod; r++)
            if (e->prod[r].lhs == nt)
                ey_put(s, (struct ey_item){r, 0, k});
        if (e->nullable[nt])
            ey_put(s, (struct ey_item){it.prod, it.dot + 1, it.origin});
    }
}

/* 2: text is a sentence of rule "root"; 1: a prefix of one; 0: neither. */
static int ey_recognise(const struct ey *e, const char *text, size_t len)
{
    uint32_t cps[4096];
    int n = 0;
    size_t tail = rs_utf8_incomplete_tail(text, len); /* a character still being generated */
    len -= tail;
    for (size_t i = 0; i < len && n < 4096;)
        i += rs_utf8_next(text + i, len - i, &cps[n++]);
    struct ey_set *sets = calloc((size_t)n + 1, sizeof(*sets));
    int root = -1;
    for (int i = 0; i < e->n_names; i++)
        if (strcmp(e->names[i], "root") == 0)
            root = i;
    for (int r = 0; r < e->n_prod; r++)
        if (e->prod[r].lhs == root)
            ey_put(&sets[0], (struct ey_item){r, 0, 0});
    ey_close(e, sets, 0);
    int k = 0;
    for (; k < n && sets[k].n > 0; k++) {
        for (int i = 0; i < sets[k].n; i++) {
            struct ey_item it = sets[k].v[i];
            const struct ey_prod *p = &e->prod[it.prod];
            if (it.dot < p->n && e->sym[p->syms[it.dot]].nt < 0 &&
                ey_match(&e->sym[p->syms[it.dot]], cps[k]))
                ey_put(&sets[k + 1], (struct ey_item){it.prod, it.dot + 1, it.origin});
        }
        ey_close(e, sets, k + 1);
    }
    int res = 0;
    if (k == n && sets[n].n > 0) {
        res = 1;
        for (int i = 0; i < sets[n].n; i++) {
            struct ey_item it = sets[n].v[i];
            if (e->prod[it.prod].lhs == root && it.dot == e->prod[it.prod].n && it.origin == 0)
                res = 2;
        }
    }
    for (int i = 0; i <= n; i++)
        free(sets[i].v);
    free(sets);
    return tail > 0 && res == 2 ? 1 : res;
}

/* --- generation checked by the recogniser ------------------------------------------------- */

static const char *g_arith =
    "root ::= expr\n"
    "expr ::= term (space? [-+] space? term)*\n"
    "term ::= factor (space? [*/] space? factor)*\n"
    "factor ::= number | \"(\" space? expr space? \")\" | \"-\" factor\n"
    "number ::= [0-9]+ (\".\" [0-9]{1,3})?\n"
    "space ::= \" \"\n";

static const char *g_lists =
    "root ::= list\n"
    "list ::= \"[\" ws ( item ( \",\" ws item )* )? ws \"]\"\n"
    "item ::= [0-9]{1,4} | \"\\\"\" [^\"\\\\\\n]{0,6} \"\\\"\" | list | \"null\"\n"
    "ws ::= [ \\n]{0,2}\n";

static const char *g_clike =
    "root ::= (func nl)+\n"
    "func ::= type \" \" ident \"(\" params? \") {\" nl stmt* \"}\"\n"
    "type ::= \"int\" | \"void\" | \"char\"\n"
    "params ::= type \" \" ident (\", \" type \" \" ident)*\n"
    "stmt ::= \"  \" (decl | assign | ret | ifs | whiles | call) nl\n"
    "decl ::= type \" \" ident (\" = \" expr)? \";\"\n"
    "assign ::= ident \" = \" expr \";\"\n"
    "ret ::= \"return\" (\" \" expr)? \";\"\n"
    "ifs ::= \"if (\" expr \") {\" nl stmt* \"  }\" (\" else {\" nl stmt* \"  }\")?\n"
    "whiles ::= \"while (\" expr \") {\" nl stmt* \"  }\"\n"
    "call ::= ident \"(\" args? \");\"\n"
    "args ::= expr (\", \" expr)*\n"
    "expr ::= term ((\" + \" | \" - \" | \" < \" | \" == \") term)*\n"
    "term ::= factor ((\" * \" | \" / \" | \" % \") factor)*\n"
    "factor ::= ident | [0-9]{1,5} | \"(\" expr \")\" | ident \"(\" args? \")\"\n"
    "ident ::= [a-z_] [a-z0-9_]{0,7}\n"
    "nl ::= \"\\n\"\n";

static const char *g_utf8 =
    "root ::= line{1,4}\n"
    "line ::= (word \" \"){0,3} word \"\\n\"\n"
    "word ::= [\\u0430-\\u044f\\u0451]{1,6} | [\\u4e00-\\u9fa5]{1,4} | [\\U0001F600-\\U0001F64F] | "
    "\"\\u65e5\\u672c\\u8a9e\" | [\\u03b1-\\u03c9]{1,5} \"\\u03c2\"? | [\\u00e0-\\u00ff]+ | "
    "\"\\xe9t\\xe9\"\n";

/* Random walks under grammar g on a vocab, each output checked by the recogniser. */
static int generate_and_recognise(const char *vocab, const char *g_text, int walks, int *n_ended)
{
    struct gt_vocab x;
    int rc = gt_vocab_load(vocab, &x);
    if (rc)
        return rc;
    struct ey *e = malloc(sizeof(*e));
    RS_CHECK(e != NULL);
    ey_load(e, g_text);
    rs_grammar *g = gt_compile(&x, RS_CONSTRAINT_GBNF, g_text, 0);
    RS_CHECK(g != NULL);
    for (int i = 0; i < walks; i++) {
        rs_grammar_matcher *m;
        RS_CHECK(rs_grammar_matcher_create(g, &m) == RS_OK);
        struct gt_walk w;
        RS_CHECK(gt_walk_run(m, &x, (uint64_t)i * 7919 + 3, 200, 0.35, 0, &w) == 0);
        int r = ey_recognise(e, w.text, w.len);
        if (r == 0) {
            size_t ok = 0;
            for (size_t k = 1; k <= w.len; k++)
                if (ey_recognise(e, w.text, k) >= 1)
                    ok = k;
            fprintf(stderr, "longest recognised prefix: %zu of %zu bytes, then '%.12s'\n", ok,
                    w.len, w.text + ok);
        }
        RS_CHECK_MSG(r >= 1, "%s walk %d: output is not even a prefix: '%s'", vocab, i, w.text);
        RS_CHECK_MSG(!w.ended || r == 2, "%s walk %d: ended but incomplete: '%s'", vocab, i,
                     w.text);
        RS_CHECK(w.ended == rs_grammar_matcher_can_end(m) || !w.ended);
        *n_ended += w.ended;
        rs_grammar_matcher_destroy(&m);
    }
    rs_grammar_release(&g);
    free(e->prod);
    free(e);
    gt_vocab_free(&x);
    return 0;
}

static int both_vocabs(const char *g_text, int walks)
{
    int ended = 0;
    int rc = generate_and_recognise("tokenizer/ggml-vocab-llama-spm.gguf", g_text, walks, &ended);
    if (rc == 0)
        rc = generate_and_recognise("tokenizer/ggml-vocab-gpt-2.gguf", g_text, walks, &ended);
    if (rc == 0 && ended < walks / 2) { /* the check must have seen whole sentences */
        fprintf(stderr, "only %d of %d walks ended\n", ended, 2 * walks);
        return 1;
    }
    return rc;
}

static int test_arithmetic_outputs_are_sentences(void)
{
    return both_vocabs(g_arith, 30);
}

static int test_nested_lists_outputs_are_sentences(void)
{
    return both_vocabs(g_lists, 30);
}

static int test_c_like_outputs_are_sentences(void)
{
    return both_vocabs(g_clike, 20);
}

static int test_utf8_heavy_outputs_are_sentences(void)
{
    return both_vocabs(g_utf8, 30);
}

/* The recogniser itself tells sentences, prefixes and garbage apart (so it can fail). */
static int test_recogniser_rejects_what_it_should(void)
{
    struct ey *e = malloc(sizeof(*e));
    RS_CHECK(e != NULL);
    ey_load(e, g_arith);
    RS_CHECK(ey_recognise(e, "1+2*(3-4)", 9) == 2);
    RS_CHECK(ey_recognise(e, "1+2*(3-", 7) == 1);
    RS_CHECK(ey_recognise(e, "1+*2", 4) == 0);
    RS_CHECK(ey_recognise(e, "(1))", 4) == 0);
    free(e->prod);
    ey_load(e, g_utf8);
    RS_CHECK(ey_recognise(e, "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\n", 10) == 2);
    RS_CHECK(ey_recognise(e, "abc\n", 4) == 0);
    free(e->prod);
    free(e);
    return 0;
}

/* --- malformed grammars ------------------------------------------------------------------- */

struct bad_case {
    const char *text;
    rs_err rc;
    const char *msg; /* must appear in the message */
};

static int test_malformed_grammars_name_line_and_column(void)
{
    static const struct bad_case cases[] = {
        {"root ::= \"abc", RS_EINVAL, "line 1, column 10: unterminated string"},
        {"root ::= [a-", RS_EINVAL, "line 1, column 10: unterminated character class"},
        {"root ::= (\"a\"", RS_EINVAL, "line 1, column 10: '(' is not closed"},
        {"root ::= foo", RS_EINVAL, "line 1, column 10: undefined rule 'foo'"},
        {"root ::= \"a\"\nroot ::= \"b\"", RS_EINVAL, "line 2, column 1: rule 'root' is defined twice"},
        {"foo ::= \"a\"", RS_EINVAL, "no rule 'root'"},
        {"root := \"a\"", RS_EINVAL, "line 1, column 6: expected '::='"},
        {"root ::= \"\\q\"", RS_EINVAL, "line 1, column 11: unknown escape"},
        {"root ::= [z-a]", RS_EINVAL, "line 1, column 12: character range"},
        {"root ::= \"a\"{3,1}", RS_EINVAL, "line 1, column 13: repetition {3,1}"},
        {"root ::= *", RS_EINVAL, "line 1, column 10: '*' has no element"},
        {"root ::= \"a\" )", RS_EINVAL, "line 1, column 14: unexpected ')'"},
        {"root ::= <[12]>", RS_EUNSUPPORTED, "line 1, column 10: token references"},
        {"root ::= \"\\xZZ\"", RS_EINVAL, "line 1, column 13: expected a hex digit"},
        {"root ::= \"\\uD800\"", RS_EINVAL, "line 1, column 11: escape U+D800"},
        {"root ::= \"\xff\"", RS_EINVAL, "line 1, column 11: invalid UTF-8"},
        {"root ::= x\n\nx ::= x \"a\" | \"b\"", RS_EINVAL, "line 3, column 1 (rule 'x'): left "
                                                       "recursion"},
        {"root ::= \"a\"{,}", RS_EINVAL, "line 1, column 13: expected a count"},
        {"root ::= \"a\" \"b\"\n  | \"c\"", RS_EINVAL, "line 2, column 3: expected a rule name"},
        {"root ::= [^\\x00-\\U0010FFFF]", RS_EINVAL, "matches no string"},
        {"", RS_EINVAL, "no rule 'root'"},
    };
    struct gt_vocab x;
    int rc = gt_vocab_load("stories260K.gguf", &x);
    if (rc)
        return rc;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct rs_constraint c = {RS_CONSTRAINT_GBNF, cases[i].text, strlen(cases[i].text), NULL,
                                  NULL, 0};
        rs_grammar *g = NULL;
        char err[512] = "";
        rs_err r = rs_grammar_compile(x.gv, &c, NULL, RS_GRAMMAR_LAZY, &g, err, sizeof(err));
        RS_CHECK_MSG(r == cases[i].rc && strstr(err, cases[i].msg) != NULL,
                     "case %zu '%s': got %s '%s', want %s '%s'", i, cases[i].text, rs_strerror(r),
                     err, rs_strerror(cases[i].rc), cases[i].msg);
        RS_CHECK(g == NULL);
    }
    /* a NUL byte, and nesting past the limit */
    struct rs_constraint c = {RS_CONSTRAINT_GBNF, "root ::= \"a\0\"", 13, NULL, NULL, 0};
    rs_grammar *g = NULL;
    char err[512] = "";
    RS_CHECK(rs_grammar_compile(x.gv, &c, NULL, 0, &g, err, sizeof(err)) == RS_EINVAL);
    RS_CHECK(strstr(err, "line 1, column 12: NUL") != NULL);
    char deep[1200] = "root ::= ";
    for (int i = 0; i < 300; i++)
        strcat(deep, "(");
    c.text = deep;
    c.len = strlen(deep);
    RS_CHECK(rs_grammar_compile(x.gv, &c, NULL, 0, &g, err, sizeof(err)) == RS_ERANGE);
    RS_CHECK(strstr(err, "nested deeper than 256") != NULL);
    gt_vocab_free(&x);
    return 0;
}

/* llama.cpp's layout rules: bodies continue after '|', inside parentheses, after '::='. */
static int test_multiline_rules_and_comments(void)
{
    static const char *txt = "# a comment line\n"
                             "root ::=\n"
                             "  \"{\" ws (  # comment after an element\n"
                             "     pair\n"
                             "     (\",\" ws pair)*\n"
                             "  )? \"}\"\n"
                             "pair ::= [a-z]+ \":\" ws [0-9]+ |\n"
                             "         \"-\"\n"
                             "ws ::= \" \"?   # optional space\n";
    struct gt_vocab x;
    int rc = gt_vocab_load("stories260K.gguf", &x);
    if (rc)
        return rc;
    rs_grammar *g = gt_compile(&x, RS_CONSTRAINT_GBNF, txt, 0);
    RS_CHECK(g != NULL);
    rs_grammar_matcher *m;
    RS_CHECK(rs_grammar_matcher_create(g, &m) == RS_OK);
    RS_CHECK(rs_grammar_matcher_accept_bytes(m, "{ab: 12, -,x:3}", 15) == RS_OK);
    RS_CHECK(rs_grammar_matcher_is_finished(m));
    rs_grammar_matcher_reset(m);
    RS_CHECK(rs_grammar_matcher_accept_bytes(m, "{ab:", 4) == RS_OK);
    RS_CHECK(rs_grammar_matcher_accept_bytes(m, "x", 1) == RS_EINVAL);
    rs_grammar_matcher_destroy(&m);
    rs_grammar_release(&g);
    gt_vocab_free(&x);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_arithmetic_outputs_are_sentences),
    RS_TEST(test_nested_lists_outputs_are_sentences),
    RS_TEST(test_c_like_outputs_are_sentences),
    RS_TEST(test_utf8_heavy_outputs_are_sentences),
    RS_TEST(test_recogniser_rejects_what_it_should),
    RS_TEST(test_malformed_grammars_name_line_and_column),
    RS_TEST(test_multiline_rules_and_comments),
};

RS_TEST_MAIN(cases)

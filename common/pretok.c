/* SPDX-License-Identifier: MIT */
/*
 * Pre-tokenizer families (the regex lists llama.cpp's llama-vocab.cpp uses
 * for each tokenizer.ggml.pre name), their PCRE2 patterns, and the split
 * driver. \s in every pattern is spelled out as the Unicode White_Space set
 * (WS below) so PCRE2, the hand-written matchers and Hugging Face agree on
 * U+0085 and the other spaces (PCRE2's own \s omits U+0085).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "common/pretok.h"

#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/pretok_impl.h"
#include "common/utf8.h"

#define MAX_STEPS 6

/* The White_Space property, for use inside a character class. */
#define WS                                                                                         \
    "\\x{09}-\\x{0D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"           \
    "\\x{202F}\\x{205F}\\x{3000}"

struct step_def {
    const char *pattern;
    uint32_t options;     /* extra pcre2_compile options */
    pretok_match_fn hand; /* hand-written matcher, tried at each start position */
    pretok_find_fn find;  /* or a hand-written leftmost-match search */
};

static const struct step_def STEP_GPT2 = {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS
                                          "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])",
                                          0, pretok_match_gpt2, NULL};
#define LLAMA3_HEAD                                                                                \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
#define LLAMA3_TAIL                                                                                \
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+"
static const struct step_def STEP_LLAMA3 = {LLAMA3_HEAD "\\p{N}{1,3}" LLAMA3_TAIL, 0,
                                            pretok_match_llama3, NULL};
static const struct step_def STEP_QWEN2 = {LLAMA3_HEAD "\\p{N}" LLAMA3_TAIL, 0, pretok_match_qwen2,
                                           NULL};
static const struct step_def STEP_DIGIT = {"\\p{N}", 0, pretok_match_digit, NULL};
static const struct step_def STEP_DIGITS = {"\\p{N}+", 0, pretok_match_digits, NULL};
static const struct step_def STEP_DIGITS13 = {"\\p{N}{1,3}", 0, pretok_match_digits13, NULL};
static const struct step_def STEP_ASCII_DIGIT3 = {"[0-9][0-9][0-9]", 0, pretok_match_ascii_digit3,
                                                  NULL};
static const struct step_def STEP_PUNCT_DEFAULT = {"[\\p{P}\\$\\+<=>\\^~\\|]+", 0,
                                                   pretok_match_punct_default, NULL};
static const struct step_def STEP_PUNCT_FALCON = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", 0,
                                                  pretok_match_punct_falcon, NULL};
static const struct step_def STEP_NEWLINE = {"[\\r\\n]", 0, pretok_match_newline, NULL};
static const struct step_def STEP_WS_LETTERS = {"[" WS "]?\\p{L}+", 0, pretok_match_ws_letters,
                                                NULL};
static const struct step_def STEP_WS_PUNCT = {"[" WS "]?\\p{P}+", 0, pretok_match_ws_punct, NULL};
static const struct step_def STEP_CJK = {
    "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", 0, pretok_match_cjk, NULL};
static const struct step_def STEP_CJK_KANA = {
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+", 0, pretok_match_cjk_kana, NULL};
/* deepseek-llm: cased letters of many scripts, then ASCII/fullwidth punctuation. */
static const struct step_def STEP_DSL_LETTERS = {
    "[" WS "]?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}"
    "\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}"
    "\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}"
    "\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}"
    "\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}"
    "\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}"
    "\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}"
    "\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}"
    "\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}"
    "\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}"
    "\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}"
    "\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}"
    "\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}"
    "\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
    0, NULL, NULL};
static const struct step_def STEP_DSL_PUNCT = {
    "[" WS
    "]?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    0, NULL, NULL};
static const struct step_def STEP_WS_AT_END = {"[" WS "]+$", PCRE2_DOLLAR_ENDONLY, NULL,
                                               pretok_find_ws_at_end};
static const struct step_def STEP_DS3_MAIN = {
    "[!\"#$%&'()*+,\\-./"
    ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+",
    0, NULL, NULL};
static const struct step_def STEP_PORO = {
    " ?[^(" WS "|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+", 0, NULL,
    NULL};
/* tekken: Hugging Face's original pattern (PCRE2 has the letter subcategories). */
static const struct step_def STEP_TEKKEN = {
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "|\\p{N}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n/]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS
    "]+",
    0, NULL, NULL};

struct family_def {
    const char *family;
    const char *names[16]; /* tokenizer.ggml.pre values, NULL-terminated */
    unsigned traits;
    const struct step_def *steps[MAX_STEPS + 1]; /* NULL-terminated */
};

static const struct family_def FAMILIES[] = {
    {"default",
     {"default", NULL},
     0,
     {&STEP_PUNCT_DEFAULT, &STEP_GPT2, &STEP_DIGITS, &STEP_ASCII_DIGIT3, NULL}},
    {"gpt2",
     {"gpt-2", "gpt-neox", "mpt", "olmo", "jais", "phi-2", "roberta-bpe", "gigachat", "jina-es",
      "jina-de", "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code", NULL},
     0,
     {&STEP_GPT2, NULL}},
    {"llama3",
     {"llama3", "llama-v3", "llama-bpe", "falcon3", NULL},
     RS_PRETOK_IGNORE_MERGES | RS_PRETOK_ADD_BOS,
     {&STEP_LLAMA3, NULL}},
    {"dbrx", {"dbrx", "smaug-bpe", NULL}, 0, {&STEP_LLAMA3, NULL}},
    {"chatglm4", {"chatglm-bpe", NULL}, RS_PRETOK_NO_BOS, {&STEP_LLAMA3, NULL}},
    {"qwen2", {"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez", NULL}, 0, {&STEP_QWEN2, NULL}},
    {"starcoder",
     {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", NULL},
     0,
     {&STEP_DIGIT, &STEP_GPT2, NULL}},
    {"falcon", {"falcon", NULL}, 0, {&STEP_PUNCT_FALCON, &STEP_GPT2, &STEP_ASCII_DIGIT3, NULL}},
    {"deepseek-coder",
     {"deepseek-coder", NULL},
     0,
     {&STEP_NEWLINE, &STEP_WS_LETTERS, &STEP_WS_PUNCT, &STEP_CJK, &STEP_DIGIT, NULL}},
    {"deepseek-llm",
     {"deepseek-llm", NULL},
     0,
     {&STEP_NEWLINE, &STEP_DSL_LETTERS, &STEP_DSL_PUNCT, &STEP_WS_AT_END, &STEP_CJK, &STEP_DIGITS,
      NULL}},
    {"deepseek-v3",
     {"deepseek-v3", NULL},
     0,
     {&STEP_DIGITS13, &STEP_CJK_KANA, &STEP_DS3_MAIN, NULL}},
    {"poro", {"poro-chat", "bloom", "gpt3-finnish", NULL}, 0, {&STEP_PORO, NULL}},
    {"viking", {"viking", NULL}, 0, {&STEP_PORO, &STEP_DIGIT, NULL}},
    {"tekken", {"tekken", NULL}, RS_PRETOK_IGNORE_MERGES | RS_PRETOK_ADD_BOS, {&STEP_TEKKEN, NULL}},
};

#define N_FAMILIES (sizeof(FAMILIES) / sizeof(FAMILIES[0]))

struct rs_pretok {
    const struct family_def *fam;
    size_t n_steps;
    pcre2_code *code[MAX_STEPS]; /* NULL where the hand matcher runs */
    pretok_match_fn hand[MAX_STEPS];
    pretok_find_fn find[MAX_STEPS];
};

struct rs_pretok_state {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
};

/* Context of one split: the callback and the thread's PCRE2 state. */
struct split_ctx {
    const rs_pretok *p;
    rs_pretok_state *st;
    rs_pretok_cb cb;
    void *user;
};

const char *rs_pretok_names(char *buf, size_t len)
{
    size_t o = 0;
    if (len == 0)
        return buf;
    buf[0] = '\0';
    for (size_t f = 0; f < N_FAMILIES; f++)
        for (const char *const *n = FAMILIES[f].names; *n != NULL; n++) {
            int w = snprintf(buf + o, len - o, "%s%s", o ? ", " : "", *n);
            if (w < 0 || (size_t)w >= len - o)
                return buf;
            o += (size_t)w;
        }
    return buf;
}

static const struct family_def *find_family(const char *name)
{
    for (size_t f = 0; f < N_FAMILIES; f++)
        for (const char *const *n = FAMILIES[f].names; *n != NULL; n++)
            if (strcmp(*n, name) == 0)
                return &FAMILIES[f];
    return NULL;
}

static rs_err compile_step(const struct step_def *sd, pcre2_code **out)
{
    int errcode;
    PCRE2_SIZE erroff;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)sd->pattern, PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_UCP | sd->options, &errcode, &erroff, NULL);
    if (code == NULL) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof(msg));
        rs_log_error("pre-tokenizer pattern fails to compile at %zu: %s", (size_t)erroff,
                     (const char *)msg);
        return RS_EINVAL;
    }
    /* JIT is an optimisation: without it (unsupported CPU) pcre2_match interprets. */
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    *out = code;
    return RS_OK;
}

rs_err rs_pretok_create(const char *name, unsigned flags, rs_pretok **out, char *err,
                        size_t err_len)
{
    const struct family_def *fam = name != NULL ? find_family(name) : NULL;
    if (fam == NULL) {
        char names[1024];
        if (err != NULL && err_len > 0)
            snprintf(err, err_len, "unknown pre-tokenizer '%s' (tokenizer.ggml.pre); supported: %s",
                     name ? name : "(null)", rs_pretok_names(names, sizeof(names)));
        return RS_EUNSUPPORTED;
    }
    rs_pretok *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return RS_ENOMEM;
    p->fam = fam;
    for (size_t i = 0; fam->steps[i] != NULL; i++, p->n_steps++) {
        const struct step_def *sd = fam->steps[i];
        if ((sd->hand != NULL || sd->find != NULL) && !(flags & RS_PRETOK_PCRE_ONLY)) {
            p->hand[i] = sd->hand;
            p->find[i] = sd->find;
            continue;
        }
        rs_err rc = compile_step(sd, &p->code[i]);
        if (rc != RS_OK) {
            if (err != NULL && err_len > 0)
                snprintf(err, err_len, "pre-tokenizer '%s': step %zu does not compile", name, i);
            rs_pretok_destroy(&p);
            return rc;
        }
    }
    *out = p;
    return RS_OK;
}

void rs_pretok_destroy(rs_pretok **pp)
{
    if (pp == NULL || *pp == NULL)
        return;
    for (size_t i = 0; i < MAX_STEPS; i++)
        pcre2_code_free((*pp)->code[i]);
    free(*pp);
    *pp = NULL;
}

const char *rs_pretok_family(const rs_pretok *p)
{
    return p->fam->family;
}
unsigned rs_pretok_traits(const rs_pretok *p)
{
    return p->fam->traits;
}
size_t rs_pretok_n_steps(const rs_pretok *p)
{
    return p->n_steps;
}

int rs_pretok_step_is_hand(const rs_pretok *p, size_t i)
{
    return i < p->n_steps && (p->hand[i] != NULL || p->find[i] != NULL);
}

rs_err rs_pretok_state_create(const rs_pretok *p, rs_pretok_state **out)
{
    rs_pretok_state *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return RS_ENOMEM;
    int need_pcre = 0;
    for (size_t i = 0; i < p->n_steps; i++)
        need_pcre |= p->code[i] != NULL;
    if (need_pcre) {
        /* One match data sized for the largest pattern; a JIT stack that grows to 1 MiB so
         * long runs of one class never hit the 32 KiB default limit. */
        st->md = pcre2_match_data_create(16, NULL);
        st->mctx = pcre2_match_context_create(NULL);
        st->jit_stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
        if (st->md == NULL || st->mctx == NULL || st->jit_stack == NULL) {
            rs_pretok_state_destroy(&st);
            return RS_ENOMEM;
        }
        pcre2_jit_stack_assign(st->mctx, NULL, st->jit_stack);
    }
    *out = st;
    return RS_OK;
}

void rs_pretok_state_destroy(rs_pretok_state **sp)
{
    if (sp == NULL || *sp == NULL)
        return;
    pcre2_match_data_free((*sp)->md);
    pcre2_match_context_free((*sp)->mctx);
    pcre2_jit_stack_free((*sp)->jit_stack);
    free(*sp);
    *sp = NULL;
}

/* Byte length of the (valid) UTF-8 character at s[i]. */
static inline size_t char_len(const uint8_t *s, size_t i)
{
    unsigned n = rs_utf8_seq_len(s[i]);
    return n ? n : 1;
}

/*
 * Finds the leftmost match of step k in s[0..n) at or after pos: 1 with
 * [*ms, *me), 0 when none, negative rs_err on a PCRE2 failure.
 */
static int find_match(struct split_ctx *c, size_t k, const uint8_t *s, size_t n, size_t pos,
                      size_t *ms, size_t *me)
{
    if (c->p->find[k] != NULL)
        return c->p->find[k](s, pos, n, ms, me);
    pretok_match_fn hand = c->p->hand[k];
    if (hand != NULL) {
        for (size_t i = pos; i < n; i += char_len(s, i))
            if (hand(s, i, n, me)) {
                *ms = i;
                return 1;
            }
        return 0;
    }
    int rc = pcre2_match(c->p->code[k], s, n, pos, PCRE2_NO_UTF_CHECK, c->st->md, c->st->mctx);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof(msg));
        rs_log_error("pre-tokenizer %s step %zu: pcre2_match failed: %s", c->p->fam->family, k,
                     (const char *)msg);
        return RS_EINVAL;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->st->md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

static rs_err split_step(struct split_ctx *c, size_t k, const uint8_t *s, size_t n);

static rs_err emit(struct split_ctx *c, size_t k, const uint8_t *s, size_t n)
{
    if (n == 0)
        return RS_OK;
    if (k == c->p->n_steps)
        return c->cb(c->user, (const char *)s, n);
    return split_step(c, k, s, n);
}

/* Splits s[0..n) by step k into gaps and matches, passing each to step k + 1. */
static rs_err split_step(struct split_ctx *c, size_t k, const uint8_t *s, size_t n)
{
    size_t pos = 0, gap = 0;
    while (pos < n) {
        size_t ms, me;
        int found = find_match(c, k, s, n, pos, &ms, &me);
        if (found < 0)
            return (rs_err)found;
        if (!found)
            break;
        if (me <= ms) { /* an empty match cannot split anything: step over one character */
            pos = ms + char_len(s, ms);
            continue;
        }
        rs_err rc = emit(c, k + 1, s + gap, ms - gap);
        if (rc == RS_OK)
            rc = emit(c, k + 1, s + ms, me - ms);
        if (rc != RS_OK)
            return rc;
        pos = gap = me;
    }
    return emit(c, k + 1, s + gap, n - gap);
}

rs_err rs_pretok_split(const rs_pretok *p, rs_pretok_state *st, const char *text, size_t len,
                       rs_pretok_cb cb, void *user)
{
    struct split_ctx c = {p, st, cb, user};
    size_t i = 0;
    while (i < len) {
        size_t ok = rs_utf8_valid_prefix(text + i, len - i);
        rs_err rc = emit(&c, 0, (const uint8_t *)text + i, ok);
        if (rc != RS_OK)
            return rc;
        i += ok;
        /* A maximal run of invalid bytes is a word of its own; no regex sees it. */
        size_t bad = i;
        while (bad < len) {
            uint32_t cp;
            size_t k = rs_utf8_next(text + bad, len - bad, &cp);
            if (cp != RS_UTF8_INVALID)
                break;
            bad += k;
        }
        if (bad > i) {
            rc = cb(user, text + i, bad - i);
            if (rc != RS_OK)
                return rc;
            i = bad;
        }
    }
    return RS_OK;
}

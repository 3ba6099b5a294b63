/* SPDX-License-Identifier: MIT */
/*
 * SentencePiece-style BPE ("llama" vocabs), as sentencepiece's bpe_model and
 * llama.cpp: spaces become U+2581, the text is split into UTF-8 characters,
 * and the adjacent pair whose concatenation is the highest-scoring token is
 * merged until none is left (ties: leftmost first); characters that are no
 * token fall back to their <0xXX> byte tokens. The text is first cut before
 * every U+2581 that follows another character, when no token of the vocab
 * contains such a pair (checked at load): then no merge can cross the cut,
 * chunks encode independently, and repeated chunks come from the word cache.
 */
#include <stdlib.h>
#include <string.h>

#include "common/tokenizer_impl.h"
#include "common/utf8.h"

static const char SPACE_MARK[] = "\xE2\x96\x81"; /* U+2581 */

/* Queue key: higher score first (score mapped to an order-preserving integer, reversed). */
static inline uint64_t spm_key(float score, uint32_t left)
{
    if (score != score) /* NaN: never preferred */
        score = -3.4e38f;
    if (score == 0.0f)
        score = 0.0f; /* -0.0 ties with 0.0, as in a float comparison */
    uint32_t bits;
    memcpy(&bits, &score, 4);
    bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
    return ((uint64_t)(~bits) << 32) | left;
}

static rs_err try_add(rs_tokenizer *t, const char *s, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return RS_OK;
    const struct rs_vocab *v = t->v;
    const struct tok_sym *a = &t->syms[l], *b = &t->syms[r];
    size_t n = (size_t)a->len + b->len;
    if (n > v->max_key_len)
        return RS_OK;
    int32_t id = strtab_find(&v->by_key, s + a->off, n);
    if (id < 0)
        return RS_OK;
    return tok_heap_push(&t->heap, spm_key(v->score[id], (uint32_t)l), (uint32_t)n, id);
}

/* One symbol per UTF-8 character (an ill-formed unit is a symbol too); returns the count. */
static int32_t make_symbols(rs_tokenizer *t, const char *s, size_t n)
{
    int32_t count = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = (uint8_t)s[i] < 0x80 ? 1 : rs_utf8_next(s + i, n - i, &cp);
        t->syms[count] = (struct tok_sym){count - 1, count + 1, (uint32_t)i, (uint32_t)k, -1};
        count++;
        i += k;
    }
    t->syms[count - 1].next = -1;
    return count;
}

static rs_err merge_all(rs_tokenizer *t, const char *s)
{
    for (int32_t l; (l = tok_merge_next(t)) >= 0;) {
        rs_err rc = try_add(t, s, t->syms[l].prev, l);
        if (rc == RS_OK)
            rc = try_add(t, s, l, t->syms[l].next);
        if (rc != RS_OK)
            return rc;
    }
    return RS_OK;
}

/* Emits the symbols' tokens; a symbol that is no token becomes its bytes' tokens. */
static rs_err emit_symbols(rs_tokenizer *t, const char *s)
{
    const struct rs_vocab *v = t->v;
    for (int32_t i = 0; i >= 0; i = t->syms[i].next) {
        const struct tok_sym *sy = &t->syms[i];
        int32_t id = sy->id >= 0 ? sy->id : strtab_find(&v->by_key, s + sy->off, sy->len);
        rs_err rc = RS_OK;
        if (id >= 0) {
            rc = tok_push(t, id);
        } else {
            for (uint32_t k = 0; k < sy->len && rc == RS_OK; k++) {
                int32_t b = v->byte_tok[(uint8_t)s[sy->off + k]];
                b = b >= 0 ? b : v->unk;
                if (b >= 0)
                    rc = tok_push(t, b);
            }
        }
        if (rc != RS_OK)
            return rc;
    }
    return RS_OK;
}

/* Encodes one chunk s[0..n) (n > 0) of escaped text. */
static rs_err encode_chunk(rs_tokenizer *t, const char *s, size_t n)
{
    size_t n_cached;
    const int32_t *cached = tok_cache_get(t, s, n, &n_cached);
    if (cached != NULL) {
        for (size_t i = 0; i < n_cached; i++)
            if (tok_push(t, cached[i]) != RS_OK)
                return RS_ENOMEM;
        return RS_OK;
    }
    rs_err rc = tok_reserve_syms(t, n);
    if (rc != RS_OK)
        return rc;
    int32_t count = make_symbols(t, s, n);
    t->heap.n = 0;
    for (int32_t i = 1; i < count && rc == RS_OK; i++)
        rc = try_add(t, s, i - 1, i);
    if (rc == RS_OK)
        rc = merge_all(t, s);
    size_t first = t->n_out;
    if (rc == RS_OK)
        rc = emit_symbols(t, s);
    if (rc == RS_OK)
        tok_cache_put(t, s, n, t->out + first, t->n_out - first);
    return rc;
}

/* text with ' ' -> U+2581 (and a leading U+2581 when prefix_space) into t->buf; returns length. */
static rs_err escape(rs_tokenizer *t, const char *text, size_t len, int prefix_space, size_t *n)
{
    size_t spaces = 0;
    for (const char *p = text; (p = memchr(p, ' ', (size_t)(text + len - p))) != NULL; p++)
        spaces++;
    size_t need = len + 2 * spaces + (prefix_space ? 3 : 0);
    if (need > t->buf_cap) {
        char *b = realloc(t->buf, need);
        if (b == NULL)
            return RS_ENOMEM;
        t->buf = b;
        t->buf_cap = need;
    }
    size_t o = 0;
    if (prefix_space) {
        memcpy(t->buf, SPACE_MARK, 3);
        o = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(t->buf + o, SPACE_MARK, 3);
            o += 3;
        } else {
            t->buf[o++] = text[i];
        }
    }
    *n = o;
    return RS_OK;
}

rs_err spm_encode(rs_tokenizer *t, const char *text, size_t len, int prefix_space)
{
    size_t n;
    rs_err rc = escape(t, text, len, prefix_space, &n);
    if (rc != RS_OK)
        return rc;
    const char *s = t->buf;
    if (!t->v->spm_split_ok)
        return encode_chunk(t, s, n);
    /* Cut before each U+2581 that follows a character other than U+2581. */
    size_t start = 0, p = 0;
    const char *q;
    while (p < n && (q = memmem(s + p, n - p, SPACE_MARK, 3)) != NULL) {
        size_t at = (size_t)(q - s);
        if (at > start && !(at >= 3 && memcmp(s + at - 3, SPACE_MARK, 3) == 0)) {
            rc = encode_chunk(t, s + start, at - start);
            if (rc != RS_OK)
                return rc;
            start = at;
        }
        p = at + 3;
    }
    return start < n ? encode_chunk(t, s + start, n - start) : RS_OK;
}

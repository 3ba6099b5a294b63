/* SPDX-License-Identifier: MIT */
/*
 * Encoding driver: partitions the text at special tokens, adds BOS/EOS,
 * hands each raw fragment to the SentencePiece or byte-level BPE encoder,
 * and owns the per-thread scratch (output vector, symbols, queue, word cache).
 */
#include "common/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/tokenizer_impl.h"

#define CACHE_SLOTS (1u << 14)
#define CACHE_MAX_WORD 64 /* longer words are rare repeats: not cached */
#define CACHE_KEY_BYTES (1u << 19)
#define CACHE_IDS (1u << 17)

struct cache_slot {
    uint64_t hash; /* 0: empty */
    uint32_t key_off, ids_off;
    uint16_t key_len, n_ids;
};

struct tok_cache {
    struct cache_slot slots[CACHE_SLOTS];
    uint32_t used, key_len, n_ids;
    char keys[CACHE_KEY_BYTES];
    int32_t ids[CACHE_IDS];
};

rs_err rs_tokenizer_create(const rs_vocab *v, rs_tokenizer **out)
{
    if (v == NULL || out == NULL)
        return RS_EINVAL;
    rs_tokenizer *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return RS_ENOMEM;
    t->v = v;
    t->cache = calloc(1, sizeof(*t->cache));
    rs_err rc = t->cache != NULL ? RS_OK : RS_ENOMEM;
    if (rc == RS_OK && v->kind == RS_VOCAB_BPE)
        rc = rs_pretok_state_create(v->pretok, &t->pst);
    if (rc != RS_OK) {
        rs_tokenizer_destroy(&t);
        return rc;
    }
    *out = t;
    return RS_OK;
}

void rs_tokenizer_destroy(rs_tokenizer **tp)
{
    if (tp == NULL || *tp == NULL)
        return;
    rs_tokenizer *t = *tp;
    rs_pretok_state_destroy(&t->pst);
    free(t->cache);
    free(t->out);
    free(t->buf);
    free(t->syms);
    free(t->heap.a);
    free(t);
    *tp = NULL;
}

rs_err tok_push(rs_tokenizer *t, int32_t id)
{
    if (t->n_out == t->cap_out) {
        size_t cap = t->cap_out ? 2 * t->cap_out : 1024;
        int32_t *a = realloc(t->out, cap * sizeof(*a));
        if (a == NULL)
            return RS_ENOMEM;
        t->out = a;
        t->cap_out = cap;
    }
    t->out[t->n_out++] = id;
    return RS_OK;
}

rs_err tok_reserve_syms(rs_tokenizer *t, size_t n)
{
    if (n > INT32_MAX)
        return RS_ERANGE;
    if (n <= t->syms_cap)
        return RS_OK;
    size_t cap = t->syms_cap ? t->syms_cap : 256;
    while (cap < n)
        cap *= 2;
    struct tok_sym *s = realloc(t->syms, cap * sizeof(*s));
    if (s == NULL)
        return RS_ENOMEM;
    t->syms = s;
    t->syms_cap = cap;
    return RS_OK;
}

rs_err tok_heap_push(struct tok_heap *h, uint64_t key, uint32_t size, int32_t id)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 256;
        struct tok_bigram *a = realloc(h->a, cap * sizeof(*a));
        if (a == NULL)
            return RS_ENOMEM;
        h->a = a;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h->a[p].key <= key)
            break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = (struct tok_bigram){key, size, id};
    return RS_OK;
}

static uint64_t cache_hash(const char *w, size_t len)
{
    uint64_t h = strtab_hash(w, len);
    return h ? h : 1;
}

const int32_t *tok_cache_get(rs_tokenizer *t, const char *w, size_t len, size_t *n)
{
    struct tok_cache *c = t->cache;
    if (len > CACHE_MAX_WORD)
        return NULL;
    uint64_t h = cache_hash(w, len);
    for (uint32_t i = (uint32_t)h & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
        const struct cache_slot *s = &c->slots[i];
        if (s->hash == 0)
            return NULL;
        if (s->hash == h && s->key_len == len && memcmp(c->keys + s->key_off, w, len) == 0) {
            *n = s->n_ids;
            return c->ids + s->ids_off;
        }
    }
}

void tok_cache_put(rs_tokenizer *t, const char *w, size_t len, const int32_t *ids, size_t n)
{
    struct tok_cache *c = t->cache;
    if (len > CACHE_MAX_WORD || n > CACHE_MAX_WORD)
        return;
    if (c->used >= CACHE_SLOTS / 2 || c->key_len + len > CACHE_KEY_BYTES ||
        c->n_ids + n > CACHE_IDS) {
        /* Full: start over. Words recur locally, so a cold restart costs little. */
        memset(c->slots, 0, sizeof(c->slots));
        c->used = c->key_len = c->n_ids = 0;
    }
    uint64_t h = cache_hash(w, len);
    uint32_t i = (uint32_t)h & (CACHE_SLOTS - 1);
    while (c->slots[i].hash != 0)
        i = (i + 1) & (CACHE_SLOTS - 1);
    memcpy(c->keys + c->key_len, w, len);
    memcpy(c->ids + c->n_ids, ids, n * sizeof(*ids));
    c->slots[i] = (struct cache_slot){h, c->key_len, c->n_ids, (uint16_t)len, (uint16_t)n};
    c->key_len += (uint32_t)len;
    c->n_ids += (uint32_t)n;
    c->used++;
}

/*
 * A raw-text fragment (between special tokens). SentencePiece prefixes a
 * space to every fragment, i.e. to the text start and after each special
 * token, as llama.cpp and Hugging Face's legacy Llama tokenizer do.
 */
static rs_err encode_fragment(rs_tokenizer *t, const char *s, size_t n)
{
    if (n == 0)
        return RS_OK;
    if (t->v->kind == RS_VOCAB_SPM)
        return spm_encode(t, s, n, t->v->add_space_prefix);
    return bpe_encode(t, s, n);
}

/*
 * Splits text at special tokens (leftmost-longest) and encodes the pieces in
 * order; a token marked RSTRIP (phi3) drops the whitespace right after it.
 */
static rs_err encode_partitioned(rs_tokenizer *t, const char *text, size_t len, int any)
{
    const struct special_trie *st = &t->v->special;
    size_t start = 0, i = 0;
    while ((any ? st->has_any : st->has_user) && i < len) {
        int32_t id;
        size_t m;
        if (!special_may_start(st, (uint8_t)text[i], any) ||
            (m = special_match(st, text + i, len - i, any, &id)) == 0) {
            i++;
            continue;
        }
        rs_err rc = encode_fragment(t, text + start, i - start);
        if (rc == RS_OK)
            rc = tok_push(t, id);
        if (rc != RS_OK)
            return rc;
        i += m;
        if (t->v->attr[id] & VA_RSTRIP) /* isspace(), as llama.cpp's partitioner */
            while (i < len && (text[i] == ' ' || (text[i] >= '\t' && text[i] <= '\r')))
                i++;
        start = i;
    }
    return encode_fragment(t, text + start, len - start);
}

rs_err rs_tokenizer_encode(rs_tokenizer *t, const char *text, size_t len, unsigned flags,
                           int32_t *ids, size_t cap, size_t *n_out)
{
    if (t == NULL || (text == NULL && len > 0) || (ids == NULL && cap > 0) || n_out == NULL)
        return RS_EINVAL;
    if (text == NULL)
        text = ""; /* len is 0: no pointer arithmetic on NULL */
    const struct rs_vocab *v = t->v;
    t->n_out = 0;
    rs_err rc = RS_OK;
    if ((flags & RS_TOKENIZE_ADD_SPECIAL) && v->add_bos)
        rc = tok_push(t, v->bos);
    if (rc == RS_OK)
        rc = encode_partitioned(t, text, len, (flags & RS_TOKENIZE_PARSE_SPECIAL) != 0);
    if (rc == RS_OK && (flags & RS_TOKENIZE_ADD_SPECIAL) && v->add_eos)
        rc = tok_push(t, v->eos);
    if (rc != RS_OK) {
        rs_log_error("tokenizer: encoding %zu bytes failed: %s", len, rs_strerror(rc));
        return rc;
    }
    *n_out = t->n_out;
    size_t n = t->n_out < cap ? t->n_out : cap;
    if (n > 0)
        memcpy(ids, t->out, n * sizeof(*ids));
    return t->n_out <= cap ? RS_OK : RS_ERANGE;
}

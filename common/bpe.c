/* SPDX-License-Identifier: MIT */
/*
 * Byte-level BPE ("gpt2" vocabs): each pre-token word starts as one symbol
 * per byte (the vocab maps byte-level token texts to raw bytes at load), and
 * the adjacent pair with the lowest merge rank is merged until no ranked pair
 * is left (ties: leftmost first), as Hugging Face's BPE and llama.cpp. Pair
 * lookup is one hash probe on the two token ids. llama3-family vocabs take a
 * word that is itself a token whole (ignore_merges). Words repeat, so their
 * ids come from the word cache after the first time.
 */
#include "common/tokenizer_impl.h"

static rs_err try_add(rs_tokenizer *t, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return RS_OK;
    const struct tok_sym *a = &t->syms[l], *b = &t->syms[r];
    if (a->id < 0 || b->id < 0)
        return RS_OK;
    const struct pairtab_slot *m = pairtab_find(&t->v->merges, a->id, b->id);
    if (m == NULL)
        return RS_OK;
    uint64_t key = ((uint64_t)(uint32_t)m->rank << 32) | (uint32_t)l;
    return tok_heap_push(&t->heap, key, a->len + b->len, m->result);
}

static rs_err merge_all(rs_tokenizer *t)
{
    for (int32_t l; (l = tok_merge_next(t)) >= 0;) {
        rs_err rc = try_add(t, t->syms[l].prev, l);
        if (rc == RS_OK)
            rc = try_add(t, l, t->syms[l].next);
        if (rc != RS_OK)
            return rc;
    }
    return RS_OK;
}

static rs_err merge_word(rs_tokenizer *t, const char *w, size_t n)
{
    const struct rs_vocab *v = t->v;
    rs_err rc = tok_reserve_syms(t, n);
    if (rc != RS_OK)
        return rc;
    for (size_t i = 0; i < n; i++)
        t->syms[i] = (struct tok_sym){(int32_t)i - 1, (int32_t)i + 1, (uint32_t)i, 1,
                                      v->byte_tok[(uint8_t)w[i]]};
    t->syms[n - 1].next = -1;
    t->heap.n = 0;
    for (size_t i = 1; i < n && rc == RS_OK; i++)
        rc = try_add(t, (int32_t)i - 1, (int32_t)i);
    if (rc == RS_OK)
        rc = merge_all(t);
    for (int32_t i = 0; rc == RS_OK && i >= 0; i = t->syms[i].next) {
        int32_t id = t->syms[i].id >= 0 ? t->syms[i].id : v->unk; /* a byte without a token */
        if (id >= 0)
            rc = tok_push(t, id);
    }
    return rc;
}

static rs_err encode_word(void *user, const char *w, size_t n)
{
    rs_tokenizer *t = user;
    const struct rs_vocab *v = t->v;
    if (v->ignore_merges && n <= v->max_key_len) {
        int32_t id = strtab_find(&v->by_key, w, n);
        if (id >= 0)
            return tok_push(t, id);
    }
    size_t n_cached;
    const int32_t *cached = tok_cache_get(t, w, n, &n_cached);
    if (cached != NULL) {
        for (size_t i = 0; i < n_cached; i++)
            if (tok_push(t, cached[i]) != RS_OK)
                return RS_ENOMEM;
        return RS_OK;
    }
    size_t first = t->n_out;
    rs_err rc = merge_word(t, w, n);
    if (rc == RS_OK)
        tok_cache_put(t, w, n, t->out + first, t->n_out - first);
    return rc;
}

rs_err bpe_encode(rs_tokenizer *t, const char *text, size_t len)
{
    return rs_pretok_split(t->v->pretok, t->pst, text, len, encode_word, t);
}

/* SPDX-License-Identifier: MIT */
/*
 * Inside of rs_tokenizer, shared by the driver (tokenizer.c) and the two
 * encoders (spm.c, bpe.c): the output vector, the symbol list and the
 * bigram priority queue, all reused across calls.
 */
#ifndef RS_TOKENIZER_IMPL_H
#define RS_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "common/tokenizer.h"
#include "common/vocab_impl.h"

/* A symbol: bytes [off, off + len) of the word, in a doubly linked list. len 0: merged away. */
struct tok_sym {
    int32_t prev, next;
    uint32_t off, len;
    int32_t id; /* its token, or -1 when not (yet) known */
};

/*
 * A candidate merge of symbol `left` with its successor. key orders the
 * queue (smaller first): high 32 bits the priority (BPE rank; SentencePiece
 * score, reversed), low 32 bits the left index, so ties go leftmost.
 */
struct tok_bigram {
    uint64_t key;
    uint32_t size; /* bytes of the merged symbol when queued: stale entries no longer match */
    int32_t id;    /* the merged token */
};

struct tok_heap {
    struct tok_bigram *a;
    size_t n, cap;
};

struct tok_cache; /* word cache, tokenizer.c */

struct rs_tokenizer {
    const struct rs_vocab *v;
    int32_t *out; /* ids produced so far by this call */
    size_t n_out, cap_out;
    char *buf; /* SentencePiece: text with spaces escaped */
    size_t buf_cap;
    struct tok_sym *syms;
    size_t syms_cap;
    struct tok_heap heap;
    rs_pretok_state *pst;
    struct tok_cache *cache;
};

rs_err tok_push(rs_tokenizer *t, int32_t id);
rs_err tok_reserve_syms(rs_tokenizer *t, size_t n);
rs_err tok_heap_push(struct tok_heap *h, uint64_t key, uint32_t size, int32_t id);

/* Removes the smallest entry into *out; 0 when empty. */
static inline int tok_heap_pop(struct tok_heap *h, struct tok_bigram *out)
{
    if (h->n == 0)
        return 0;
    *out = h->a[0];
    struct tok_bigram last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->a[c + 1].key < h->a[c].key)
            c++;
        if (last.key <= h->a[c].key)
            break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n > 0)
        h->a[i] = last;
    return 1;
}

/*
 * Word cache: ids of recently encoded words (BPE pre-tokens, SentencePiece
 * chunks), so repeated words skip the merge loop. tok_cache_get returns the
 * ids and count or NULL; tok_cache_put stores ids[0..n) for the word.
 */
const int32_t *tok_cache_get(rs_tokenizer *t, const char *w, size_t len, size_t *n);
void tok_cache_put(rs_tokenizer *t, const char *w, size_t len, const int32_t *ids, size_t n);

/* SentencePiece: encodes one raw-text fragment (prefix_space: prepend U+2581). */
rs_err spm_encode(rs_tokenizer *t, const char *text, size_t len, int prefix_space);

/* Byte-level BPE: pre-tokenizes and encodes one raw-text fragment. */
rs_err bpe_encode(rs_tokenizer *t, const char *text, size_t len);

/*
 * Pops queued merges until one still applies and merges its two symbols;
 * returns the merged (left) symbol's index, or -1 when the queue is empty.
 * The caller then queues the new symbol's pairs with both neighbours.
 */
static inline int32_t tok_merge_next(rs_tokenizer *t)
{
    struct tok_bigram bg;
    while (tok_heap_pop(&t->heap, &bg)) {
        int32_t l = (int32_t)(uint32_t)bg.key;
        struct tok_sym *a = &t->syms[l];
        if (a->len == 0 || a->next < 0)
            continue;
        struct tok_sym *b = &t->syms[a->next];
        if (a->len + b->len != bg.size)
            continue; /* stale: one side has merged since */
        a->len += b->len;
        a->id = bg.id;
        b->len = 0;
        a->next = b->next;
        if (a->next >= 0)
            t->syms[a->next].prev = l;
        return l;
    }
    return -1;
}

#endif

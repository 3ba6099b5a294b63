/* SPDX-License-Identifier: MIT */
/*
 * Special-token matching: before pre-tokenization, text is partitioned at
 * occurrences of control, unknown and user-defined token texts. User-defined
 * tokens are always matched (Hugging Face's non-special added tokens, e.g.
 * deepseek-coder's "ü" or mpt's runs of spaces); control and unknown tokens
 * only when the caller asks to parse special tokens. Matching is
 * leftmost-longest, as Hugging Face's added-vocabulary matcher; a byte-level
 * trie keeps it linear in the text.
 */
#include <stdlib.h>
#include <string.h>

#include "common/vocab_impl.h"

static int32_t new_node(struct special_trie *t, uint8_t byte)
{
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? 2 * t->cap : 256;
        struct special_node *nodes = realloc(t->nodes, sizeof(*nodes) * cap);
        if (nodes == NULL)
            return -1;
        t->nodes = nodes;
        t->cap = cap;
    }
    t->nodes[t->n] = (struct special_node){-1, -1, -1, -1, byte};
    return (int32_t)t->n++;
}

/* The child of `node` for byte b, or -1. */
static int32_t find_child(const struct special_trie *t, int32_t node, uint8_t b)
{
    if (node == 0)
        return t->root_child[b];
    int32_t c = t->nodes[node].child;
    while (c >= 0 && t->nodes[c].byte != b)
        c = t->nodes[c].sibling;
    return c;
}

/* The child of `node` for byte b, created if absent; -1 when out of memory. */
static int32_t child(struct special_trie *t, int32_t node, uint8_t b)
{
    int32_t c = find_child(t, node, b);
    if (c >= 0)
        return c;
    c = new_node(t, b);
    if (c >= 0 && node == 0) {
        t->root_child[b] = c;
        return c;
    }
    if (c >= 0) {
        t->nodes[c].sibling = t->nodes[node].child;
        t->nodes[node].child = c;
    }
    return c;
}

static rs_err insert(struct special_trie *t, const char *s, size_t n, int32_t id, int user)
{
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        node = child(t, node, (uint8_t)s[i]);
        if (node < 0)
            return RS_ENOMEM;
    }
    /* the first token with a text wins, as with the other lookups */
    if (t->nodes[node].id_any < 0)
        t->nodes[node].id_any = id;
    if (user && t->nodes[node].id_user < 0)
        t->nodes[node].id_user = id;
    uint8_t b = (uint8_t)s[0];
    t->first_any[b >> 3] |= (uint8_t)(1u << (b & 7));
    t->has_any = 1;
    if (user) {
        t->first_user[b >> 3] |= (uint8_t)(1u << (b & 7));
        t->has_user = 1;
    }
    return RS_OK;
}

rs_err special_build(struct special_trie *t, const struct rs_vocab *v)
{
    memset(t, 0, sizeof(*t));
    for (int b = 0; b < 256; b++)
        t->root_child[b] = -1;
    if (new_node(t, 0) < 0)
        return RS_ENOMEM;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        int type = v->type[i];
        if ((type != RS_TOKEN_CONTROL && type != RS_TOKEN_UNKNOWN &&
             type != RS_TOKEN_USER_DEFINED) ||
            v->text_len[i] == 0)
            continue;
        rs_err rc = insert(t, v->arena + v->text_off[i], v->text_len[i], (int32_t)i,
                           type == RS_TOKEN_USER_DEFINED);
        if (rc != RS_OK)
            return rc;
    }
    return RS_OK;
}

void special_free(struct special_trie *t)
{
    free(t->nodes);
    t->nodes = NULL;
}

size_t special_match(const struct special_trie *t, const char *s, size_t n, int any, int32_t *id)
{
    size_t best = 0;
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        node = find_child(t, node, (uint8_t)s[i]);
        if (node < 0)
            break;
        int32_t hit = any ? t->nodes[node].id_any : t->nodes[node].id_user;
        if (hit >= 0) {
            best = i + 1;
            *id = hit;
        }
    }
    return best;
}

/* SPDX-License-Identifier: MIT */
/*
 * The vocab as the grammar engine sees it: every token's decoded bytes
 * (rs_vocab_token_piece, so SentencePiece U+2581 is a space, <0xXX> a byte,
 * byte-level BPE text its raw bytes), sorted, with the common prefix each
 * shares with the one before it, and a preorder trie over them: a node per
 * distinct prefix, knowing where its subtree ends, so a walk that finds a
 * prefix impossible skips every token under it in one jump. Control, unknown
 * and unused tokens and empty pieces are left out (never allowed); the
 * end-of-generation tokens are listed apart (allowed only as the end, whatever
 * their text). Built once per vocab; immutable.
 */
#include <stdlib.h>
#include <string.h>

#include "common/grammar_impl.h"

struct piece {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
};

static int cmp_piece(const void *x, const void *y)
{
    const struct piece *a = x, *b = y;
    uint32_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->p, b->p, n);
    if (c != 0)
        return c;
    if (a->len != b->len)
        return a->len < b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int allowed_type(enum rs_token_type t)
{
    return t != RS_TOKEN_CONTROL && t != RS_TOKEN_UNKNOWN && t != RS_TOKEN_UNUSED;
}

/* Collects the pieces of every token that can be generated under a grammar. */
static struct piece *collect(const rs_vocab *v, uint32_t *n_out, size_t *bytes)
{
    uint32_t n = rs_vocab_n_tokens(v), k = 0;
    struct piece *p = malloc(((size_t)n + 1) * sizeof(*p));
    if (p == NULL)
        return NULL;
    *bytes = 0;
    for (uint32_t id = 0; id < n; id++) {
        size_t len;
        const char *s = rs_vocab_token_piece(v, (int32_t)id, 0, &len);
        /* end-of-generation tokens only ever end (even one spelled as text, <|im_end|>) */
        if (s == NULL || len == 0 || len > UINT16_MAX || rs_vocab_is_eog(v, (int32_t)id) ||
            !allowed_type(rs_vocab_token_type(v, (int32_t)id)))
            continue;
        p[k++] = (struct piece){(const uint8_t *)s, (uint32_t)len, (int32_t)id};
        *bytes += len;
    }
    qsort(p, k, sizeof(*p), cmp_piece);
    *n_out = k;
    return p;
}

static int alloc_ranks(struct rs_grammar_vocab *gv, uint32_t n, size_t bytes)
{
    gv->rank_tok = malloc(((size_t)n + 1) * sizeof(int32_t));
    gv->rank_off = malloc(((size_t)n + 1) * sizeof(uint32_t));
    gv->rank_len = malloc(((size_t)n + 1) * sizeof(uint16_t));
    gv->rank_lcp = malloc(((size_t)n + 1) * sizeof(uint16_t));
    gv->blob = malloc(bytes + 1);
    gv->tok_rank = malloc(((size_t)gv->n_tokens + 1) * sizeof(int32_t));
    gv->nodes = malloc(((size_t)bytes + 1) * sizeof(struct tt_node));
    return gv->rank_tok && gv->rank_off && gv->rank_len && gv->rank_lcp && gv->blob &&
                   gv->tok_rank && gv->nodes
               ? 0
               : -1;
}

/* Ranks in sorted order, their bytes and common prefixes, and the preorder nodes. */
static void build_trie(struct rs_grammar_vocab *gv, const struct piece *p, uint32_t n,
                       uint32_t *path /* path[d]: node at depth d + 1 on the current token */)
{
    size_t off = 0;
    gv->n_nodes = 0;
    for (uint32_t r = 0; r < n; r++) {
        uint32_t lcp = 0;
        if (r > 0) {
            uint32_t m = p[r].len < p[r - 1].len ? p[r].len : p[r - 1].len;
            while (lcp < m && p[r].p[lcp] == p[r - 1].p[lcp])
                lcp++;
        }
        gv->rank_tok[r] = p[r].id;
        gv->rank_off[r] = (uint32_t)off;
        gv->rank_len[r] = (uint16_t)p[r].len;
        gv->rank_lcp[r] = (uint16_t)lcp;
        gv->tok_rank[p[r].id] = (int32_t)r;
        memcpy(gv->blob + off, p[r].p, p[r].len);
        off += p[r].len;
        if (p[r].len > gv->max_len)
            gv->max_len = p[r].len;
        for (uint32_t d = lcp; d < p[r].len; d++) {
            struct tt_node *nd = &gv->nodes[gv->n_nodes];
            *nd = (struct tt_node){0, r, 0, (uint16_t)(d + 1), p[r].p[d]};
            path[d] = gv->n_nodes++;
        }
        gv->nodes[path[p[r].len - 1]].n_here++;
    }
}

/* end of each node: the first later node no deeper than it. */
static int subtree_ends(struct rs_grammar_vocab *gv)
{
    uint32_t *open = malloc(((size_t)gv->max_len + 2) * sizeof(uint32_t));
    if (open == NULL)
        return -1;
    uint32_t n_open = 0;
    for (uint32_t i = 0; i < gv->n_nodes; i++) {
        while (n_open > 0 && gv->nodes[open[n_open - 1]].depth >= gv->nodes[i].depth)
            gv->nodes[open[--n_open]].end = i;
        open[n_open++] = i;
    }
    while (n_open > 0)
        gv->nodes[open[--n_open]].end = gv->n_nodes;
    free(open);
    return 0;
}

static int collect_eog(struct rs_grammar_vocab *gv)
{
    gv->eog = malloc(((size_t)gv->n_tokens + 1) * sizeof(int32_t));
    if (gv->eog == NULL)
        return -1;
    for (uint32_t id = 0; id < gv->n_tokens; id++)
        if (rs_vocab_is_eog(gv->v, (int32_t)id))
            gv->eog[gv->n_eog++] = (int32_t)id;
    return 0;
}

rs_err rs_grammar_vocab_create(const rs_vocab *v, rs_grammar_vocab **out)
{
    struct rs_grammar_vocab *gv = calloc(1, sizeof(*gv));
    if (gv == NULL)
        return RS_ENOMEM;
    gv->v = v;
    gv->n_tokens = rs_vocab_n_tokens(v);
    size_t bytes;
    uint32_t n;
    struct piece *p = collect(v, &n, &bytes);
    rs_err rc = RS_ENOMEM;
    uint32_t *path = malloc(((size_t)UINT16_MAX + 1) * sizeof(uint32_t));
    if (p != NULL && path != NULL && alloc_ranks(gv, n, bytes) == 0) {
        for (uint32_t id = 0; id < gv->n_tokens; id++)
            gv->tok_rank[id] = -1;
        gv->n_ranked = n;
        build_trie(gv, p, n, path);
        if (subtree_ends(gv) == 0 && collect_eog(gv) == 0)
            rc = RS_OK;
    }
    free(path);
    free(p);
    if (rc != RS_OK) {
        rs_grammar_vocab_destroy(&gv);
        return rc;
    }
    *out = gv;
    return RS_OK;
}

void rs_grammar_vocab_destroy(rs_grammar_vocab **pgv)
{
    struct rs_grammar_vocab *gv = *pgv;
    if (gv == NULL)
        return;
    free(gv->nodes);
    free(gv->rank_tok);
    free(gv->rank_off);
    free(gv->rank_len);
    free(gv->rank_lcp);
    free(gv->blob);
    free(gv->tok_rank);
    free(gv->eog);
    free(gv);
    *pgv = NULL;
}

uint32_t rs_grammar_vocab_n_tokens(const rs_grammar_vocab *gv)
{
    return gv->n_tokens;
}

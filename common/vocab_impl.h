/* SPDX-License-Identifier: MIT */
/*
 * Inside of rs_vocab, shared by the loader (vocab.c, vocab_bpe.c, special.c)
 * and the encoders (spm.c, bpe.c). Everything here is built once by
 * rs_vocab_load and read-only afterwards.
 */
#ifndef RS_VOCAB_IMPL_H
#define RS_VOCAB_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "common/pretok.h"
#include "common/strtab_impl.h"
#include "common/vocab.h"

/* vocab attr bits */
#define VA_MERGEABLE 0x01u /* SPM: may result from a merge (normal, user-defined) */
#define VA_SPECIAL 0x02u   /* piece is shown only when decoding with special tokens */
#define VA_EOG 0x04u       /* ends generation */
#define VA_RSTRIP 0x08u    /* matched in text, it swallows the whitespace after it (phi3) */

/* Trie over the texts of control, unknown and user-defined tokens (leftmost-longest matching). */
struct special_node {
    int32_t child;   /* first child node, -1 none */
    int32_t sibling; /* next sibling, -1 none */
    int32_t id_user; /* user-defined token ending here (always matched), -1 none */
    int32_t id_any;  /* any special token ending here (matched with parse_special), -1 none */
    uint8_t byte;
};

struct special_trie {
    struct special_node *nodes; /* nodes[0] is the root */
    uint32_t n, cap;
    int32_t root_child[256]; /* the root's children by first byte */
    uint8_t first_user[32];  /* bitmap: bytes that start a user-defined token */
    uint8_t first_any[32];   /* bitmap: bytes that start any special token */
    int has_user, has_any;
};

struct rs_vocab {
    enum rs_vocab_kind kind;
    uint32_t n_tokens;
    /* per token, indexed by id */
    uint32_t *text_off, *text_len;   /* GGUF text in arena */
    uint32_t *key_off, *key_len;     /* encoder key in arena (SPM: text; BPE: raw bytes) */
    uint32_t *piece_off, *piece_len; /* decoded bytes in arena */
    float *score;
    uint8_t *type; /* enum rs_token_type */
    uint8_t *attr; /* VA_* */
    char *arena;
    size_t arena_len, arena_cap;

    struct strtab by_text; /* GGUF text -> id, all non-empty tokens */
    struct strtab by_key;  /* encoder key -> id: SPM mergeable tokens, BPE byte-mappable tokens */
    size_t max_key_len;    /* longest key in by_key */

    int32_t byte_tok[256]; /* token for a lone byte (SPM byte fallback, BPE initial symbols) */
    struct pairtab merges; /* BPE: (left, right) -> (rank, result) */
    rs_pretok *pretok;     /* BPE */
    int ignore_merges;     /* BPE: a word that is a token is not merged (llama3, tekken) */
    int spm_split_ok;      /* SPM: no token has a non-space char followed by U+2581 */

    struct special_trie special;

    int32_t bos, eos, eot, eom, unk, sep, pad;
    uint8_t add_bos, add_eos, add_space_prefix;
    size_t max_piece_len;
    char pre[32];
};

/* Logs the message and copies it into err (may be NULL); returns rc. */
rs_err vocab_fail(char *err, size_t err_len, rs_err rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Appends n bytes to the arena; returns their offset, or UINT32_MAX when out of memory/range. */
uint32_t vocab_arena_add(struct rs_vocab *v, const void *p, size_t n);

/* BPE load steps (vocab_bpe.c): keys from byte-level texts, merges, pieces. */
rs_err vocab_bpe_prepare(struct rs_vocab *v, const rs_gguf *g, const char *pre, char *err,
                         size_t err_len);

/* Byte-level BPE alphabet: the byte a code point stands for, or -1. */
int vocab_bpe_char_to_byte(uint32_t cp);

/* Special-token trie (special.c). */
rs_err special_build(struct special_trie *t, const struct rs_vocab *v);
void special_free(struct special_trie *t);

/*
 * Longest special token at s[0..n) (user-defined ones only unless `any`):
 * returns its length and sets *id, or returns 0.
 */
size_t special_match(const struct special_trie *t, const char *s, size_t n, int any, int32_t *id);

/* Whether byte b can start a special token of the mode. */
static inline int special_may_start(const struct special_trie *t, uint8_t b, int any)
{
    const uint8_t *bm = any ? t->first_any : t->first_user;
    return (bm[b >> 3] >> (b & 7)) & 1;
}

#endif

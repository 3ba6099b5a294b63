/* SPDX-License-Identifier: MIT */
/*
 * Byte-level BPE side of the vocab loader. GGUF stores byte-level tokens in
 * GPT-2's printable alphabet (byte 0x20 is "Ġ", U+0120, and so on); here each
 * token text is mapped back to the raw bytes it stands for, so encoding and
 * decoding work on raw bytes with no per-call translation. Merges become a
 * table (left id, right id) -> (rank, merged id).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/utf8.h"
#include "common/vocab_impl.h"

#define KEY_MERGES "tokenizer.ggml.merges"

/* Bytes GPT-2 keeps as their own code point: '!'..'~', U+00A1..U+00AC, U+00AE..U+00FF. */
static int byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

int vocab_bpe_char_to_byte(uint32_t cp)
{
    if (cp < 0x100)
        return byte_is_printable(cp) ? (int)cp : -1;
    /* The other 68 bytes map, in increasing order, to U+0100..U+0143. */
    if (cp >= 0x100 + 68)
        return -1;
    unsigned k = cp - 0x100;
    for (unsigned b = 0; b < 256; b++)
        if (!byte_is_printable(b) && k-- == 0)
            return (int)b;
    return -1;
}

/* Raw bytes of byte-level text t[0..n) into out (n bytes suffice); -1 if a char is outside the
 * alphabet. */
static long bytelevel_decode(const char *t, size_t n, char *out, const int16_t *to_byte)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += rs_utf8_next(t + i, n - i, &cp);
        if (cp >= 0x144 || to_byte[cp] < 0)
            return -1;
        out[o++] = (char)to_byte[cp];
    }
    return (long)o;
}

/* Keys (raw bytes) and pieces of every token. */
static rs_err bpe_keys_pieces(struct rs_vocab *v)
{
    int16_t to_byte[0x144];
    for (uint32_t cp = 0; cp < 0x144; cp++)
        to_byte[cp] = (int16_t)vocab_bpe_char_to_byte(cp);
    char *buf = malloc(RS_VOCAB_MAX_TOKEN_BYTES + 1);
    if (buf == NULL)
        return RS_ENOMEM;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        long n = bytelevel_decode(v->arena + v->text_off[i], v->text_len[i], buf, to_byte);
        int type = v->type[i];
        if (n > 0) {
            uint32_t off = vocab_arena_add(v, buf, (size_t)n);
            if (off == UINT32_MAX) {
                free(buf);
                return RS_ENOMEM;
            }
            v->key_off[i] = off;
            v->key_len[i] = (uint32_t)n;
            if (strtab_add(&v->by_key, (int32_t)i) != (int32_t)i)
                rs_log_debug("vocab: token %u repeats the bytes of an earlier token", i);
            if ((size_t)n > v->max_key_len)
                v->max_key_len = (size_t)n;
        }
        /* Pieces: normal and byte tokens decode to raw bytes (text as is when not byte-level,
         * as Hugging Face's ByteLevel decoder does); user-defined/control/unknown are text. */
        if (type == RS_TOKEN_UNUSED || type == RS_TOKEN_UNDEFINED) {
            v->piece_len[i] = 0;
        } else if ((type == RS_TOKEN_NORMAL || type == RS_TOKEN_BYTE) && n > 0) {
            v->piece_off[i] = v->key_off[i];
            v->piece_len[i] = v->key_len[i];
        } else {
            v->piece_len[i] = v->text_len[i];
        }
    }
    free(buf);
    return RS_OK;
}

/* Splits merge text "A B" at the first space after its first byte (as llama.cpp). */
static int split_merge(struct rs_gguf_str m, size_t *left_len, size_t *right_off)
{
    for (size_t k = 1; k < m.len; k++)
        if (m.ptr[k] == ' ') {
            *left_len = k;
            *right_off = k + 1;
            return 1;
        }
    return 0;
}

/* Id of the byte-level text t[0..n) (mapped to raw bytes), or -1. */
static int32_t id_of_bytelevel(const struct rs_vocab *v, const char *t, size_t n, char *buf,
                               const int16_t *to_byte)
{
    long k = bytelevel_decode(t, n, buf, to_byte);
    return k > 0 ? strtab_find(&v->by_key, buf, (size_t)k) : -1;
}

/* Adds merge r ("A B") to the table; returns 0 when a part is not a token. */
static int add_merge(struct rs_vocab *v, struct rs_gguf_str m, int32_t r, char *buf, char *cat,
                     const int16_t *to_byte)
{
    size_t ll, ro;
    if (m.len > 2 * RS_VOCAB_MAX_TOKEN_BYTES || !split_merge(m, &ll, &ro))
        return 0;
    int32_t left = id_of_bytelevel(v, m.ptr, ll, buf, to_byte);
    int32_t right = id_of_bytelevel(v, m.ptr + ro, m.len - ro, buf, to_byte);
    memcpy(cat, m.ptr, ll); /* the merged token's text: both halves without the space */
    memcpy(cat + ll, m.ptr + ro, m.len - ro);
    int32_t result = id_of_bytelevel(v, cat, m.len - 1, buf, to_byte);
    if (left < 0 || right < 0 || result < 0)
        return 0;
    pairtab_add(&v->merges, left, right, r, result);
    return 1;
}

static rs_err bpe_merges(struct rs_vocab *v, const rs_gguf *g, char *err, size_t err_len)
{
    enum rs_gguf_type et;
    uint64_t n;
    rs_err rc = rs_gguf_get_arr(g, KEY_MERGES, &et, &n);
    if (rc == RS_ENOENT)
        return vocab_fail(err, err_len, RS_ENOENT, "%s is missing (a gpt2 vocab needs it)",
                          KEY_MERGES);
    if (rc != RS_OK || et != RS_GGUF_STRING || n > INT32_MAX)
        return vocab_fail(err, err_len, RS_EINVAL, "%s is not a string array", KEY_MERGES);
    int16_t to_byte[0x144];
    for (uint32_t cp = 0; cp < 0x144; cp++)
        to_byte[cp] = (int16_t)vocab_bpe_char_to_byte(cp);
    char *buf = malloc(2 * RS_VOCAB_MAX_TOKEN_BYTES + 2);
    char *cat = malloc(2 * RS_VOCAB_MAX_TOKEN_BYTES + 2);
    if (buf == NULL || cat == NULL || pairtab_init(&v->merges, n) != RS_OK) {
        free(buf);
        free(cat);
        return vocab_fail(err, err_len, RS_ENOMEM, "out of memory for %s", KEY_MERGES);
    }
    uint64_t kv = (uint64_t)rs_gguf_find_key(g, KEY_MERGES), skipped = 0;
    for (uint64_t r = 0; r < n; r++)
        skipped += !add_merge(v, rs_gguf_arr_str_at(g, kv, r), (int32_t)r, buf, cat, to_byte);
    free(buf);
    free(cat);
    if (skipped)
        rs_log_warn("vocab: %llu of %llu merges name tokens the vocab lacks; they are ignored",
                    (unsigned long long)skipped, (unsigned long long)n);
    return RS_OK;
}

rs_err vocab_bpe_prepare(struct rs_vocab *v, const rs_gguf *g, const char *pre, char *err,
                         size_t err_len)
{
    rs_err rc = rs_pretok_create(pre, 0, &v->pretok, err, err_len);
    if (rc != RS_OK) {
        rs_log_error("vocab: %s", err ? err : "unknown pre-tokenizer");
        return rc;
    }
    snprintf(v->pre, sizeof(v->pre), "%s", rs_pretok_family(v->pretok));
    v->ignore_merges = (rs_pretok_traits(v->pretok) & RS_PRETOK_IGNORE_MERGES) != 0;
    rc = strtab_init(&v->by_key, v->n_tokens, (const char *const *)&v->arena, v->key_off,
                     v->key_len);
    if (rc == RS_OK)
        rc = bpe_keys_pieces(v);
    if (rc == RS_OK)
        rc = bpe_merges(v, g, err, err_len);
    if (rc != RS_OK)
        return rc;
    int missing = 0;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        v->byte_tok[b] = strtab_find(&v->by_key, &c, 1);
        missing += v->byte_tok[b] < 0;
    }
    if (missing)
        rs_log_debug("vocab: %d byte values have no token (never produced by valid UTF-8 text "
                     "when they are C0, C1, F5..FF); such bytes encode as <unk> or are dropped",
                     missing);
    return RS_OK;
}

/* SPDX-License-Identifier: MIT */
/*
 * Vocab loader: reads tokenizer.ggml.* from a GGUF with every length, type
 * and id checked, applies llama.cpp's defaults for absent keys, finds the
 * end-of-generation tokens, and builds the lookup tables and decoded pieces.
 * SentencePiece specifics are here; byte-level BPE ones in vocab_bpe.c.
 */
#include "common/vocab.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/vocab_impl.h"

#define KEY_MODEL "tokenizer.ggml.model"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_SCORES "tokenizer.ggml.scores"
#define KEY_TYPES "tokenizer.ggml.token_type"

static const char SPACE_MARK[] = "\xE2\x96\x81"; /* U+2581, SentencePiece's space */

rs_err vocab_fail(char *err, size_t err_len, rs_err rc, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    rs_log_error("vocab: %s", msg);
    if (err != NULL && err_len > 0)
        snprintf(err, err_len, "%s", msg);
    return rc;
}

uint32_t vocab_arena_add(struct rs_vocab *v, const void *p, size_t n)
{
    if (v->arena_len + n > UINT32_MAX)
        return UINT32_MAX;
    if (v->arena_len + n > v->arena_cap) {
        size_t cap = v->arena_cap ? v->arena_cap : 1 << 16;
        while (cap < v->arena_len + n)
            cap *= 2;
        char *a = realloc(v->arena, cap);
        if (a == NULL)
            return UINT32_MAX;
        v->arena = a;
        v->arena_cap = cap;
    }
    uint32_t off = (uint32_t)v->arena_len;
    if (n > 0)
        memcpy(v->arena + off, p, n);
    v->arena_len += n;
    return off;
}

static rs_err read_kind(struct rs_vocab *v, const rs_gguf *g, char *err, size_t err_len)
{
    struct rs_gguf_str m;
    rs_err rc = rs_gguf_get_str(g, KEY_MODEL, &m);
    if (rc == RS_ENOENT)
        return vocab_fail(err, err_len, RS_ENOENT, "%s is missing: the file has no vocab",
                          KEY_MODEL);
    if (rc != RS_OK)
        return vocab_fail(err, err_len, RS_EINVAL, "%s is not a string", KEY_MODEL);
    if (m.len == 5 && memcmp(m.ptr, "llama", 5) == 0)
        v->kind = RS_VOCAB_SPM;
    else if (m.len == 4 && memcmp(m.ptr, "gpt2", 4) == 0)
        v->kind = RS_VOCAB_BPE;
    else
        return vocab_fail(err, err_len, RS_EUNSUPPORTED,
                          "%s = '%.*s' is not supported (only 'llama' and 'gpt2')", KEY_MODEL,
                          (int)(m.len > 64 ? 64 : m.len), m.ptr);
    return RS_OK;
}

static rs_err alloc_arrays(struct rs_vocab *v, uint32_t n)
{
    v->text_off = calloc(n, sizeof(uint32_t));
    v->text_len = calloc(n, sizeof(uint32_t));
    v->key_off = calloc(n, sizeof(uint32_t));
    v->key_len = calloc(n, sizeof(uint32_t));
    v->piece_off = calloc(n, sizeof(uint32_t));
    v->piece_len = calloc(n, sizeof(uint32_t));
    v->score = calloc(n, sizeof(float));
    v->type = calloc(n, 1);
    v->attr = calloc(n, 1);
    if (!v->text_off || !v->text_len || !v->key_off || !v->key_len || !v->piece_off ||
        !v->piece_len || !v->score || !v->type || !v->attr)
        return RS_ENOMEM;
    v->n_tokens = n;
    return RS_OK;
}

static rs_err read_texts(struct rs_vocab *v, const rs_gguf *g, char *err, size_t err_len)
{
    enum rs_gguf_type et;
    uint64_t n;
    rs_err rc = rs_gguf_get_arr(g, KEY_TOKENS, &et, &n);
    if (rc == RS_ENOENT)
        return vocab_fail(err, err_len, RS_ENOENT, "%s is missing", KEY_TOKENS);
    if (rc != RS_OK || et != RS_GGUF_STRING)
        return vocab_fail(err, err_len, RS_EINVAL, "%s is not a string array", KEY_TOKENS);
    if (n == 0 || n > RS_VOCAB_MAX_TOKENS)
        return vocab_fail(err, err_len, RS_EINVAL, "%s has %llu entries (allowed 1..%u)",
                          KEY_TOKENS, (unsigned long long)n, RS_VOCAB_MAX_TOKENS);
    if (alloc_arrays(v, (uint32_t)n) != RS_OK)
        return vocab_fail(err, err_len, RS_ENOMEM, "out of memory for %llu tokens",
                          (unsigned long long)n);
    uint64_t kv = (uint64_t)rs_gguf_find_key(g, KEY_TOKENS);
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        struct rs_gguf_str s = rs_gguf_arr_str_at(g, kv, i);
        if (s.len > RS_VOCAB_MAX_TOKEN_BYTES)
            return vocab_fail(err, err_len, RS_EINVAL, "%s[%u] is %llu bytes (max %u)", KEY_TOKENS,
                              i, (unsigned long long)s.len, RS_VOCAB_MAX_TOKEN_BYTES);
        uint32_t off = vocab_arena_add(v, s.ptr, s.len);
        if (off == UINT32_MAX)
            return vocab_fail(err, err_len, RS_ENOMEM, "out of memory for token texts");
        v->text_off[i] = v->key_off[i] = v->piece_off[i] = off;
        v->text_len[i] = (uint32_t)s.len;
    }
    return RS_OK;
}

/* A numeric per-token array: absent is fine; present must have n_tokens elements. */
static rs_err find_token_array(const rs_gguf *g, const char *key, const struct rs_vocab *v,
                               enum rs_gguf_type *et, int *present, char *err, size_t err_len)
{
    uint64_t n;
    rs_err rc = rs_gguf_get_arr(g, key, et, &n);
    *present = rc == RS_OK;
    if (rc == RS_ENOENT)
        return RS_OK;
    if (rc != RS_OK || *et == RS_GGUF_STRING || *et == RS_GGUF_ARRAY)
        return vocab_fail(err, err_len, RS_EINVAL, "%s is not a numeric array", key);
    if (n != v->n_tokens)
        return vocab_fail(err, err_len, RS_EINVAL, "%s has %llu entries but there are %u tokens",
                          key, (unsigned long long)n, v->n_tokens);
    return RS_OK;
}

static rs_err read_scores_types(struct rs_vocab *v, const rs_gguf *g, char *err, size_t err_len)
{
    enum rs_gguf_type et;
    int present;
    rs_err rc = find_token_array(g, KEY_SCORES, v, &et, &present, err, err_len);
    if (rc != RS_OK)
        return rc;
    const uint8_t *raw =
        present ? rs_gguf_arr_data(g, (uint64_t)rs_gguf_find_key(g, KEY_SCORES)) : NULL;
    for (uint32_t i = 0; present && i < v->n_tokens; i++) {
        double d;
        if (et == RS_GGUF_F32)
            memcpy(&v->score[i], raw + 4 * (size_t)i, 4);
        else if (rs_gguf_arr_f64(g, KEY_SCORES, i, &d) == RS_OK)
            v->score[i] = (float)d;
    }
    rc = find_token_array(g, KEY_TYPES, v, &et, &present, err, err_len);
    if (rc != RS_OK)
        return rc;
    raw = present ? rs_gguf_arr_data(g, (uint64_t)rs_gguf_find_key(g, KEY_TYPES)) : NULL;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        int64_t t = RS_TOKEN_NORMAL;
        int32_t t32;
        if (present && et == RS_GGUF_I32) {
            memcpy(&t32, raw + 4 * (size_t)i, 4);
            t = t32;
        } else if (present && rs_gguf_arr_i64(g, KEY_TYPES, i, &t) != RS_OK) {
            t = RS_TOKEN_UNDEFINED;
        }
        v->type[i] = (uint8_t)(t >= RS_TOKEN_NORMAL && t <= RS_TOKEN_BYTE ? t : RS_TOKEN_UNDEFINED);
    }
    return RS_OK;
}

/* Sets *id from `key` when present and in range; otherwise keeps the default (as llama.cpp). */
static void read_special_id(const struct rs_vocab *v, const rs_gguf *g, const char *key,
                            int32_t *id)
{
    uint32_t u;
    rs_err rc = rs_gguf_get_u32(g, key, &u);
    if (rc == RS_ENOENT)
        return;
    if (rc != RS_OK || u >= v->n_tokens) {
        if (rc != RS_OK || u != UINT32_MAX)
            rs_log_warn("vocab: %s is not a valid token id; using the default", key);
        return;
    }
    *id = (int32_t)u;
}

static void read_flag(const rs_gguf *g, const char *key, uint8_t *flag)
{
    int b;
    if (rs_gguf_get_bool(g, key, &b) == RS_OK)
        *flag = (uint8_t)(b != 0);
}

/* Defaults first (llama.cpp's per-model ones), then the keys; validates the result. */
static void read_specials(struct rs_vocab *v, const rs_gguf *g, unsigned traits)
{
    v->bos = v->eos = v->eot = v->eom = v->unk = v->sep = v->pad = RS_VOCAB_NONE;
    if (v->kind == RS_VOCAB_SPM) {
        v->bos = v->n_tokens > 1 ? 1 : RS_VOCAB_NONE;
        v->eos = v->n_tokens > 2 ? 2 : RS_VOCAB_NONE;
        v->unk = 0;
        v->add_bos = 1;
        v->add_space_prefix = 1;
    } else {
        v->add_bos = (traits & RS_PRETOK_ADD_BOS) != 0;
    }
    read_special_id(v, g, "tokenizer.ggml.bos_token_id", &v->bos);
    read_special_id(v, g, "tokenizer.ggml.eos_token_id", &v->eos);
    read_special_id(v, g, "tokenizer.ggml.eot_token_id", &v->eot);
    read_special_id(v, g, "tokenizer.ggml.eom_token_id", &v->eom);
    read_special_id(v, g, "tokenizer.ggml.unknown_token_id", &v->unk);
    read_special_id(v, g, "tokenizer.ggml.seperator_token_id", &v->sep); /* sic: GGUF's spelling */
    read_special_id(v, g, "tokenizer.ggml.padding_token_id", &v->pad);
    if (traits & RS_PRETOK_NO_BOS)
        v->bos = RS_VOCAB_NONE;
    /* A BOS/EOS/UNK that is a byte token (the default unk 0 is <0x00> in a byte-only vocab) is
     * none. */
    int32_t *ids[] = {&v->bos, &v->eos, &v->unk};
    for (size_t i = 0; i < 3; i++)
        if (*ids[i] >= 0 && v->type[*ids[i]] == RS_TOKEN_BYTE)
            *ids[i] = RS_VOCAB_NONE;
    read_flag(g, "tokenizer.ggml.add_bos_token", &v->add_bos);
    read_flag(g, "tokenizer.ggml.add_eos_token", &v->add_eos);
    read_flag(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix);
    if (v->add_bos && v->bos == RS_VOCAB_NONE) {
        rs_log_warn("vocab: add_bos is set but there is no BOS token; not adding one");
        v->add_bos = 0;
    }
    if (v->add_eos && v->eos == RS_VOCAB_NONE) {
        rs_log_warn("vocab: add_eos is set but there is no EOS token; not adding one");
        v->add_eos = 0;
    }
}

static int32_t find_text(const struct rs_vocab *v, const char *s)
{
    return strtab_find(&v->by_text, s, strlen(s));
}

/* Marks id (if any) as ending generation. */
static void mark_eog(struct rs_vocab *v, int32_t id)
{
    if (id < 0)
        return;
    v->attr[id] |= VA_EOG;
}

/* EOT/EOM by text when the keys are absent, and the end-of-generation set (as llama.cpp). */
static void find_eog(struct rs_vocab *v)
{
    static const char *const eot_names[] = {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "<EOT>",
        "<\xEF\xBD\x9C\x65nd\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"};
    static const char *const eog_names[] = {"<|eot_id|>",    "<|im_end|>",    "<|end|>",
                                            "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
                                            "<EOT>"};
    for (size_t i = 0; v->eot == RS_VOCAB_NONE && i < sizeof(eot_names) / sizeof(*eot_names); i++)
        v->eot = find_text(v, eot_names[i]);
    if (v->eom == RS_VOCAB_NONE)
        v->eom = find_text(v, "<|eom_id|>");
    for (size_t i = 0; i < sizeof(eog_names) / sizeof(*eog_names); i++) {
        int32_t id = find_text(v, eog_names[i]);
        if (id >= 0 && v->type[id] != RS_TOKEN_CONTROL) {
            rs_log_warn("vocab: token %d '%s' looks like a control token; treating it as one", id,
                        eog_names[i]);
            v->type[id] = RS_TOKEN_CONTROL;
        }
        mark_eog(v, id);
    }
    mark_eog(v, v->eos);
    mark_eog(v, v->eot);
    mark_eog(v, v->eom);
}

static rs_err build_text_table(struct rs_vocab *v)
{
    rs_err rc = strtab_init(&v->by_text, v->n_tokens, (const char *const *)&v->arena, v->text_off,
                            v->text_len);
    if (rc != RS_OK)
        return rc;
    for (uint32_t i = 0; i < v->n_tokens; i++)
        if (v->text_len[i] > 0 && strtab_add(&v->by_text, (int32_t)i) != (int32_t)i)
            rs_log_debug("vocab: token %u repeats the text of an earlier token", i);
    return RS_OK;
}

/* Byte value of an SPM byte token "<0xXX>", or -1. */
static int parse_byte_token(const char *s, size_t n)
{
    unsigned b;
    char buf[8];
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>')
        return -1;
    memcpy(buf, s, 6);
    buf[6] = '\0';
    if (sscanf(buf + 3, "%2x", &b) != 1)
        return -1;
    return (int)b;
}

/* SPM piece of token i: "▁" -> " " for normal tokens, the byte of a byte token, text otherwise. */
static rs_err spm_piece(struct rs_vocab *v, uint32_t i)
{
    const char *t = v->arena + v->text_off[i];
    size_t n = v->text_len[i];
    int type = v->type[i];
    if (type == RS_TOKEN_BYTE && parse_byte_token(t, n) >= 0) {
        uint8_t b = (uint8_t)parse_byte_token(t, n);
        v->piece_off[i] = vocab_arena_add(v, &b, 1);
        v->piece_len[i] = 1;
    } else if (type == RS_TOKEN_NORMAL && n >= 3 && memmem(t, n, SPACE_MARK, 3) != NULL) {
        char *buf = malloc(n);
        if (buf == NULL)
            return RS_ENOMEM;
        size_t o = 0;
        for (size_t k = 0; k < n;)
            if (k + 3 <= n && memcmp(t + k, SPACE_MARK, 3) == 0) {
                buf[o++] = ' ';
                k += 3;
            } else {
                buf[o++] = t[k++];
            }
        v->piece_off[i] = vocab_arena_add(v, buf, o);
        v->piece_len[i] = (uint32_t)o;
        free(buf);
    } else if (type == RS_TOKEN_UNUSED || type == RS_TOKEN_UNDEFINED) {
        v->piece_len[i] = 0;
    } else {
        v->piece_len[i] = (uint32_t)n; /* text as is (normal, user-defined, control, unknown) */
    }
    return v->piece_off[i] == UINT32_MAX ? RS_ENOMEM : RS_OK;
}

/* Whether some mergeable token has U+2581 right after a character that is not U+2581. */
static int spm_has_inner_space(const struct rs_vocab *v)
{
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        if (!(v->attr[i] & VA_MERGEABLE))
            continue;
        const char *t = v->arena + v->text_off[i];
        size_t n = v->text_len[i];
        for (size_t k = 3; k + 3 <= n; k++)
            if (memcmp(t + k, SPACE_MARK, 3) == 0 && memcmp(t + k - 3, SPACE_MARK, 3) != 0)
                return 1;
        /* a space mark preceded by fewer than 3 bytes is preceded by a non-space char */
        for (size_t k = 1; k < 3 && k + 3 <= n; k++)
            if (memcmp(t + k, SPACE_MARK, 3) == 0)
                return 1;
    }
    return 0;
}

static rs_err spm_prepare(struct rs_vocab *v)
{
    rs_err rc = strtab_init(&v->by_key, v->n_tokens, (const char *const *)&v->arena, v->key_off,
                            v->key_len);
    if (rc != RS_OK)
        return rc;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        rc = spm_piece(v, i);
        if (rc != RS_OK)
            return rc;
        if ((v->type[i] != RS_TOKEN_NORMAL && v->type[i] != RS_TOKEN_USER_DEFINED) ||
            v->text_len[i] == 0)
            continue;
        v->attr[i] |= VA_MERGEABLE;
        v->key_len[i] = v->text_len[i];
        strtab_add(&v->by_key, (int32_t)i);
        if (v->key_len[i] > v->max_key_len)
            v->max_key_len = v->key_len[i];
    }
    v->spm_split_ok = !spm_has_inner_space(v);
    int missing = 0;
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", b);
        int32_t id = find_text(v, name);
        if (id < 0 && b < 0x80)
            id = strtab_find(&v->by_text, (const char *)&(char){(char)b}, 1);
        missing += id < 0;
        v->byte_tok[b] = id; /* -1: the encoder falls back to <unk> */
    }
    if (missing)
        rs_log_warn("vocab: %d byte values have no byte token: they encode as <unk> (or are "
                    "dropped without one)",
                    missing);
    return RS_OK;
}

static void finish(struct rs_vocab *v)
{
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        if (v->type[i] == RS_TOKEN_CONTROL || v->type[i] == RS_TOKEN_UNKNOWN)
            v->attr[i] |= VA_SPECIAL;
        if (v->piece_len[i] > v->max_piece_len)
            v->max_piece_len = v->piece_len[i];
    }
}

/* Whether general.name, lower-cased, contains `needle` (lower case). */
static int name_contains(const rs_gguf *g, const char *needle)
{
    struct rs_gguf_str s;
    size_t n = strlen(needle);
    if (rs_gguf_get_str(g, "general.name", &s) != RS_OK)
        return 0;
    for (size_t i = 0; i + n <= s.len; i++) {
        size_t k = 0;
        while (k < n && tolower((unsigned char)s.ptr[i + k]) == needle[k])
            k++;
        if (k == n)
            return 1;
    }
    return 0;
}

/*
 * Phi-3's convention, as llama.cpp applies it by model name ("phi3" or
 * "phi-3" in general.name): every control, user-defined and unknown token
 * strips the whitespace that follows it in the text (so a chat template's
 * "<|user|>\n" is one token), except <unk>, <s> and <|endoftext|>.
 */
static void name_attrs(struct rs_vocab *v, const rs_gguf *g)
{
    if (!name_contains(g, "phi3") && !name_contains(g, "phi-3"))
        return;
    for (uint32_t i = 0; i < v->n_tokens; i++)
        if (v->type[i] == RS_TOKEN_CONTROL || v->type[i] == RS_TOKEN_USER_DEFINED ||
            v->type[i] == RS_TOKEN_UNKNOWN)
            v->attr[i] |= VA_RSTRIP;
    int32_t id = find_text(v, "</s>");
    if (id >= 0)
        v->attr[id] |= VA_RSTRIP;
    static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
    for (size_t k = 0; k < sizeof(keep) / sizeof(keep[0]); k++)
        if ((id = find_text(v, keep[k])) >= 0)
            v->attr[id] &= (uint8_t)~VA_RSTRIP;
}

/* The pre-tokenizer name: the override, the key, or "default" (BPE only). */
static rs_err pre_name(const rs_gguf *g, const struct rs_vocab_opts *opts, char *buf, size_t len,
                       char *err, size_t err_len)
{
    struct rs_gguf_str s;
    if (opts != NULL && opts->pre != NULL) {
        snprintf(buf, len, "%s", opts->pre);
        return RS_OK;
    }
    rs_err rc = rs_gguf_get_str(g, "tokenizer.ggml.pre", &s);
    if (rc == RS_ENOENT) {
        rs_log_warn("vocab: tokenizer.ggml.pre is missing; using 'default' as llama.cpp does "
                    "(override it if the model's tokenizer differs)");
        snprintf(buf, len, "default");
        return RS_OK;
    }
    if (rc != RS_OK || s.len >= len)
        return vocab_fail(err, err_len, RS_EINVAL, "tokenizer.ggml.pre is not a short string");
    memcpy(buf, s.ptr, s.len);
    buf[s.len] = '\0';
    return RS_OK;
}

static rs_err load(struct rs_vocab *v, const rs_gguf *g, const struct rs_vocab_opts *opts,
                   char *err, size_t err_len)
{
    char pre[64] = "";
    rs_err rc = read_kind(v, g, err, err_len);
    if (rc == RS_OK && v->kind == RS_VOCAB_BPE)
        rc = pre_name(g, opts, pre, sizeof(pre), err, err_len);
    if (rc == RS_OK)
        rc = read_texts(v, g, err, err_len);
    if (rc == RS_OK)
        rc = read_scores_types(v, g, err, err_len);
    if (rc == RS_OK)
        rc = build_text_table(v);
    if (rc == RS_OK && v->kind == RS_VOCAB_BPE)
        rc = vocab_bpe_prepare(v, g, pre, err, err_len);
    if (rc == RS_OK && v->kind == RS_VOCAB_SPM)
        rc = spm_prepare(v);
    if (rc != RS_OK)
        return rc;
    read_specials(v, g, v->pretok ? rs_pretok_traits(v->pretok) : 0);
    find_eog(v);
    finish(v);
    name_attrs(v, g);
    rc = special_build(&v->special, v);
    if (rc != RS_OK)
        return vocab_fail(err, err_len, rc, "out of memory building the special-token table");
    return RS_OK;
}

rs_err rs_vocab_load_opts(const rs_gguf *g, const struct rs_vocab_opts *opts, rs_vocab **out,
                          char *err, size_t err_len)
{
    if (g == NULL || out == NULL)
        return RS_EINVAL;
    struct rs_vocab *v = calloc(1, sizeof(*v));
    if (v == NULL)
        return vocab_fail(err, err_len, RS_ENOMEM, "out of memory");
    rs_err rc = load(v, g, opts, err, err_len);
    if (rc != RS_OK) {
        if (rc == RS_ENOMEM && err != NULL && err_len > 0 && err[0] == '\0')
            snprintf(err, err_len, "out of memory loading the vocab");
        rs_vocab_destroy(&v);
        return rc;
    }
    *out = v;
    return RS_OK;
}

rs_err rs_vocab_load(const rs_gguf *g, rs_vocab **out, char *err, size_t err_len)
{
    return rs_vocab_load_opts(g, NULL, out, err, err_len);
}

rs_err rs_vocab_load_file(const char *path, rs_vocab **out, char *err, size_t err_len)
{
    rs_gguf *g = NULL;
    rs_err rc = rs_gguf_open(path, &g, err, err_len);
    if (rc != RS_OK)
        return rc;
    rc = rs_vocab_load(g, out, err, err_len);
    rs_gguf_close(&g);
    return rc;
}

void rs_vocab_destroy(rs_vocab **vp)
{
    if (vp == NULL || *vp == NULL)
        return;
    struct rs_vocab *v = *vp;
    strtab_free(&v->by_text);
    strtab_free(&v->by_key);
    pairtab_free(&v->merges);
    rs_pretok_destroy(&v->pretok);
    special_free(&v->special);
    free(v->text_off);
    free(v->text_len);
    free(v->key_off);
    free(v->key_len);
    free(v->piece_off);
    free(v->piece_len);
    free(v->score);
    free(v->type);
    free(v->attr);
    free(v->arena);
    free(v);
    *vp = NULL;
}

static inline int valid_id(const struct rs_vocab *v, int32_t id)
{
    return id >= 0 && (uint32_t)id < v->n_tokens;
}

uint32_t rs_vocab_n_tokens(const rs_vocab *v)
{
    return v->n_tokens;
}
enum rs_vocab_kind rs_vocab_kind(const rs_vocab *v)
{
    return v->kind;
}
const char *rs_vocab_pre(const rs_vocab *v)
{
    return v->pre;
}
int32_t rs_vocab_bos(const rs_vocab *v)
{
    return v->bos;
}
int32_t rs_vocab_eos(const rs_vocab *v)
{
    return v->eos;
}
int32_t rs_vocab_eot(const rs_vocab *v)
{
    return v->eot;
}
int32_t rs_vocab_eom(const rs_vocab *v)
{
    return v->eom;
}
int32_t rs_vocab_unk(const rs_vocab *v)
{
    return v->unk;
}
int32_t rs_vocab_pad(const rs_vocab *v)
{
    return v->pad;
}
int32_t rs_vocab_sep(const rs_vocab *v)
{
    return v->sep;
}
int rs_vocab_add_bos(const rs_vocab *v)
{
    return v->add_bos;
}
int rs_vocab_add_eos(const rs_vocab *v)
{
    return v->add_eos;
}
int rs_vocab_add_space_prefix(const rs_vocab *v)
{
    return v->add_space_prefix;
}
size_t rs_vocab_max_piece_len(const rs_vocab *v)
{
    return v->max_piece_len;
}

int rs_vocab_is_eog(const rs_vocab *v, int32_t id)
{
    return valid_id(v, id) && (v->attr[id] & VA_EOG) != 0;
}

enum rs_token_type rs_vocab_token_type(const rs_vocab *v, int32_t id)
{
    return valid_id(v, id) ? (enum rs_token_type)v->type[id] : RS_TOKEN_UNDEFINED;
}

float rs_vocab_token_score(const rs_vocab *v, int32_t id)
{
    return valid_id(v, id) ? v->score[id] : 0.0f;
}

const char *rs_vocab_token_text(const rs_vocab *v, int32_t id, size_t *len)
{
    if (!valid_id(v, id))
        return NULL;
    *len = v->text_len[id];
    return v->arena + v->text_off[id];
}

const char *rs_vocab_token_piece(const rs_vocab *v, int32_t id, int special, size_t *len)
{
    if (!valid_id(v, id))
        return NULL;
    *len = (v->attr[id] & VA_SPECIAL) && !special ? 0 : v->piece_len[id];
    return v->arena + v->piece_off[id];
}

int32_t rs_vocab_find(const rs_vocab *v, const char *text, size_t len)
{
    return strtab_find(&v->by_text, text, len);
}

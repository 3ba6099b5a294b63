/* SPDX-License-Identifier: MIT */
/*
 * The model's own vocabulary, read from GGUF metadata (tokenizer.ggml.*):
 * token texts, scores and types, BPE merges, the special ids (BOS, EOS, EOT,
 * EOM, UNK, PAD, SEP) and the add-BOS/add-EOS/space-prefix flags, with the
 * defaults llama.cpp applies when a key is absent. Works on vocab-only GGUFs
 * and model GGUFs alike. Also the token -> bytes mapping ("piece") used by the
 * detokenizer. A loaded vocab is immutable: every function here may be called
 * from any thread of any process that loaded it, concurrently.
 * Encoding text is in tokenizer.h; incremental decoding in detok.h.
 * Conventions by family: SentencePiece vocabs (llama, gemma, phi3) default to
 * a space prefix unless tokenizer.ggml.add_space_prefix says otherwise (gemma
 * writes false); phi3's special tokens swallow the whitespace after them
 * (llama.cpp's rule by general.name); byte-level BPE (qwen2, llama3, ...)
 * takes its pre-tokenizer from tokenizer.ggml.pre.
 * Leaves out: WordPiece (bert), Unigram (t5) and RWKV vocabs, which llama
 * family models do not use; other name-based attributes (jina's lstrip).
 */
#ifndef RS_VOCAB_H
#define RS_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/gguf.h"

typedef struct rs_vocab rs_vocab;

/* tokenizer.ggml.model */
enum rs_vocab_kind {
    RS_VOCAB_SPM = 1, /* "llama": SentencePiece-style BPE with scores and byte fallback */
    RS_VOCAB_BPE = 2, /* "gpt2": byte-level BPE with ranked merges and a pre-tokenizer */
};

/* tokenizer.ggml.token_type values (as in llama.cpp / gguf-py). */
enum rs_token_type {
    RS_TOKEN_UNDEFINED = 0,
    RS_TOKEN_NORMAL = 1,
    RS_TOKEN_UNKNOWN = 2,
    RS_TOKEN_CONTROL = 3,
    RS_TOKEN_USER_DEFINED = 4,
    RS_TOKEN_UNUSED = 5,
    RS_TOKEN_BYTE = 6,
};

#define RS_VOCAB_NONE (-1)              /* "no such token" for special ids and lookups */
#define RS_VOCAB_MAX_TOKENS (1u << 24)  /* larger token arrays are rejected as malformed */
#define RS_VOCAB_MAX_TOKEN_BYTES 65536u /* longer token texts are rejected as malformed */

/* Load options; a zeroed struct (or NULL) means "as the file says". */
struct rs_vocab_opts {
    /* Pre-tokenizer name overriding tokenizer.ggml.pre (BPE only), e.g. for an old GGUF
     * written before the key existed. NULL: use the key, or "default" when it is absent. */
    const char *pre;
};

/*
 * Reads the vocab from an open GGUF (model or vocab-only). Copies what it
 * needs: g may be closed afterwards. Errors, each with a message in err
 * naming the key: RS_ENOENT (no tokenizer.ggml.model / tokens / merges),
 * RS_EINVAL (wrong type, length mismatch, oversized), RS_EUNSUPPORTED
 * (tokenizer model other than llama/gpt2, unknown pre-tokenizer), RS_ENOMEM.
 * *out owns the vocab: rs_vocab_destroy it. Any thread.
 */
rs_err rs_vocab_load(const rs_gguf *g, rs_vocab **out, char *err, size_t err_len);

/* Same with options (opts may be NULL). */
rs_err rs_vocab_load_opts(const rs_gguf *g, const struct rs_vocab_opts *opts, rs_vocab **out,
                          char *err, size_t err_len);

/* Opens path, loads the vocab, closes the file. Errors as rs_gguf_open and rs_vocab_load. */
rs_err rs_vocab_load_file(const char *path, rs_vocab **out, char *err, size_t err_len);

/* Frees; accepts NULL and clears *v. No tokenizer of this vocab may be in use. */
void rs_vocab_destroy(rs_vocab **v);

uint32_t rs_vocab_n_tokens(const rs_vocab *v);
enum rs_vocab_kind rs_vocab_kind(const rs_vocab *v);
/* Pre-tokenizer family in use ("gpt2", "llama3", ...); "" for SPM vocabs. */
const char *rs_vocab_pre(const rs_vocab *v);

/* Special token ids, or RS_VOCAB_NONE. */
int32_t rs_vocab_bos(const rs_vocab *v);
int32_t rs_vocab_eos(const rs_vocab *v);
int32_t
rs_vocab_eot(const rs_vocab *v); /* end of turn: key, else found by text (<|eot_id|>, ...) */
int32_t rs_vocab_eom(const rs_vocab *v); /* end of message (<|eom_id|>) */
int32_t rs_vocab_unk(const rs_vocab *v);
int32_t rs_vocab_pad(const rs_vocab *v);
int32_t rs_vocab_sep(const rs_vocab *v);

/* Whether encoding with RS_TOKENIZE_ADD_SPECIAL prepends BOS / appends EOS. */
int rs_vocab_add_bos(const rs_vocab *v);
int rs_vocab_add_eos(const rs_vocab *v);
/* SPM: a space is prepended to text (and dropped again after BOS when decoding). */
int rs_vocab_add_space_prefix(const rs_vocab *v);

/*
 * 1 when generating `id` ends generation: EOS, EOT, EOM and the tokens whose
 * text marks an end of turn (<|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>,
 * <|endoftext|>, <|eom_id|>, <EOT>). 0 otherwise, also for ids out of range.
 */
int rs_vocab_is_eog(const rs_vocab *v, int32_t id);

/* Type of token id; RS_TOKEN_UNDEFINED for ids out of range. */
enum rs_token_type rs_vocab_token_type(const rs_vocab *v, int32_t id);
/* SentencePiece score (0 when the file has none or id is out of range). */
float rs_vocab_token_score(const rs_vocab *v, int32_t id);

/*
 * The token's text exactly as stored in the GGUF (e.g. "▁the", "Ġthe",
 * "<0x0A>"), not NUL-terminated; *len its bytes. NULL for ids out of range.
 * Borrowed: valid until rs_vocab_destroy.
 */
const char *rs_vocab_token_text(const rs_vocab *v, int32_t id, size_t *len);

/*
 * The bytes token id decodes to: SPM "▁" becomes a space, <0xXX> byte tokens
 * their byte, byte-level BPE text is mapped back to raw bytes; user-defined
 * tokens are their text. Control and unknown tokens decode to their text when
 * `special` is nonzero, else to nothing; unused tokens to nothing. A piece may
 * be part of a UTF-8 sequence (byte tokens). NULL for ids out of range.
 * Borrowed: valid until rs_vocab_destroy.
 */
const char *rs_vocab_token_piece(const rs_vocab *v, int32_t id, int special, size_t *len);

/* The longest piece in bytes (bounds the output of one detokenizer step). */
size_t rs_vocab_max_piece_len(const rs_vocab *v);

/* The id whose GGUF text equals text[0..len), or RS_VOCAB_NONE. */
int32_t rs_vocab_find(const rs_vocab *v, const char *text, size_t len);

#endif

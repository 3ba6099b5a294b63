/* SPDX-License-Identifier: MIT */
/*
 * Pre-tokenizers of byte-level BPE vocabs, selected by the GGUF key
 * tokenizer.ggml.pre: each family is an ordered list of regex steps; every
 * step splits each piece left by the previous one into its matches and the
 * gaps between them (both kept), as llama.cpp and Hugging Face do. Each step
 * has a PCRE2 pattern (UTF + Unicode properties, JIT) and, for the common
 * steps, a hand-written matcher with the same semantics, used by default.
 * Invalid UTF-8 never reaches a regex: each maximal run of invalid bytes is
 * passed through as a word of its own. The families and how each was verified
 * are listed in common/README.md. Leaves out: per-token lstrip/rstrip
 * attributes (jina-v2 <mask>, phi-3), chameleon's image-token steps.
 */
#ifndef RS_PRETOK_H
#define RS_PRETOK_H

#include <stddef.h>

#include "common/err.h"

typedef struct rs_pretok rs_pretok;
typedef struct rs_pretok_state rs_pretok_state;

/* rs_pretok_create flags */
#define RS_PRETOK_PCRE_ONLY 0x1u /* run every step through PCRE2 (differential tests) */

/* Family traits the vocab loader applies (llama.cpp's per-family defaults). */
#define RS_PRETOK_IGNORE_MERGES 0x1u /* a word that is itself a token is emitted whole */
#define RS_PRETOK_ADD_BOS 0x2u       /* add_bos defaults to true */
#define RS_PRETOK_NO_BOS 0x4u        /* the family has no BOS token */

/*
 * Builds the pre-tokenizer named `name` (a tokenizer.ggml.pre value, e.g.
 * "llama-bpe", "gpt-2", "qwen2"). RS_EUNSUPPORTED with a message listing the
 * supported names when unknown; RS_ENOMEM; RS_EINVAL if a pattern fails to
 * compile (a bug, logged). *out owns the result; it is immutable and may be
 * shared by threads. Any thread.
 */
rs_err rs_pretok_create(const char *name, unsigned flags, rs_pretok **out, char *err,
                        size_t err_len);

/* Frees; accepts NULL and clears *p. */
void rs_pretok_destroy(rs_pretok **p);

/* Canonical family name (e.g. "llama3" for "llama-bpe"). Borrowed static string. */
const char *rs_pretok_family(const rs_pretok *p);

/* RS_PRETOK_* trait bits of the family. */
unsigned rs_pretok_traits(const rs_pretok *p);

/* Number of regex steps, and whether step i runs a hand-written matcher. */
size_t rs_pretok_n_steps(const rs_pretok *p);
int rs_pretok_step_is_hand(const rs_pretok *p, size_t i);

/*
 * Writes the supported tokenizer.ggml.pre names, comma-separated, into buf
 * (truncated to len). Returns buf.
 */
const char *rs_pretok_names(char *buf, size_t len);

/*
 * Per-thread matching state (PCRE2 match data and JIT stack). One state per
 * thread per pre-tokenizer; *out owns it. The pre-tokenizer must outlive it.
 */
rs_err rs_pretok_state_create(const rs_pretok *p, rs_pretok_state **out);
void rs_pretok_state_destroy(rs_pretok_state **s);

/* Receives one word (never empty); a non-RS_OK return stops the split and is returned. */
typedef rs_err (*rs_pretok_cb)(void *user, const char *word, size_t len);

/*
 * Splits text[0..len) into words, in order, calling cb for each; the words
 * concatenate to the input exactly. Returns RS_OK, the callback's error, or
 * RS_EINVAL when PCRE2 fails (logged). The calling thread must own st.
 */
rs_err rs_pretok_split(const rs_pretok *p, rs_pretok_state *st, const char *text, size_t len,
                       rs_pretok_cb cb, void *user);

#endif

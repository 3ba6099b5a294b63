/* SPDX-License-Identifier: MIT */
/*
 * Text -> token ids with the model's own vocab (vocab.h), exactly as the
 * model's Hugging Face tokenizer (and llama.cpp) produce them:
 * SentencePiece-style BPE with scores and byte fallback for "llama" vocabs,
 * byte-level BPE with ranked merges after the family's pre-tokenizer for
 * "gpt2" vocabs. Merges run through a priority queue over a linked list of
 * symbols (n log n); SentencePiece text is cut where no token can span.
 * An rs_tokenizer holds per-thread scratch; the vocab it borrows is shared.
 * Invalid UTF-8 is encoded losslessly where the vocab can: SentencePiece
 * vocabs byte-fall-back each byte of an ill-formed sequence (<unk> when the
 * vocab has no byte tokens), byte-level vocabs pass each maximal invalid run
 * to BPE as a word of its own; a byte no token covers becomes <unk>, or is
 * dropped when there is none. No input bytes make it fail; only a lack of
 * memory can (or PCRE2's match limit, for the families that use PCRE2).
 */
#ifndef RS_TOKENIZER_H
#define RS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/vocab.h"

typedef struct rs_tokenizer rs_tokenizer;

/* rs_tokenizer_encode flags */
#define RS_TOKENIZE_ADD_SPECIAL 0x1u /* BOS / EOS as the vocab's add_bos / add_eos say */
#define RS_TOKENIZE_PARSE_SPECIAL                                                                  \
    0x2u /* control-token text in the input ("<|eot_id|>", "<s>")                                  \
            becomes that token; off: it is plain text */

/*
 * Creates a tokenizer over v (borrowed: v must outlive it). *out owns it. A
 * tokenizer is used by one thread at a time; make one per thread.
 * RS_ENOMEM on allocation failure.
 */
rs_err rs_tokenizer_create(const rs_vocab *v, rs_tokenizer **out);

/* Frees; accepts NULL and clears *t. */
void rs_tokenizer_destroy(rs_tokenizer **t);

/*
 * Encodes text[0..len) (UTF-8; any bytes accepted, see above) into ids[0..cap).
 * *n_out is set to the number of ids the text needs. Returns RS_OK when they
 * fit, RS_ERANGE when cap is too small (ids then holds the first cap ids and
 * *n_out the count needed), RS_ENOMEM. User-defined tokens' text is always
 * matched as that token (as Hugging Face's added tokens), control tokens'
 * only with RS_TOKENIZE_PARSE_SPECIAL. The calling thread must own t.
 */
rs_err rs_tokenizer_encode(rs_tokenizer *t, const char *text, size_t len, unsigned flags,
                           int32_t *ids, size_t cap, size_t *n_out);

#endif

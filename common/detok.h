/* SPDX-License-Identifier: MIT */
/*
 * Incremental detokenizer: turns generated token ids into text deltas that
 * are always complete, valid UTF-8. A character split across tokens (byte
 * tokens, byte-level BPE) is held until its last byte arrives; bytes that
 * can never form a character become U+FFFD (one per maximal ill-formed
 * subpart, as Python's errors="replace"). After a BOS that is not shown,
 * SentencePiece vocabs drop the first space (the one the tokenizer added),
 * and U+2581 decodes to a space wherever it appears. Feeding tokens one by one yields exactly the
 * text rs_detok_decode gives for all of them at once.
 *
 * The whole state is struct rs_detok: fixed size, plain bytes, no pointers,
 * so postprocd keeps one per request in shared memory and a restarted
 * postprocd resumes from it. Leaves out: Hugging Face's
 * clean_up_tokenization_spaces (not incremental) and stop strings (stopstr.h).
 */
#ifndef RS_DETOK_H
#define RS_DETOK_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/vocab.h"

/* rs_detok_init flags */
#define RS_DETOK_SPECIAL                                                                           \
    0x01u /* control/unknown tokens show as their text ("</s>"); default: nothing */

struct rs_detok {
    uint32_t n_tokens;  /* tokens fed since rs_detok_init */
    uint8_t pending[3]; /* start of a UTF-8 sequence whose remaining bytes have not arrived */
    uint8_t n_pending;  /* bytes in pending, 0..3 */
    uint8_t flags;      /* RS_DETOK_SPECIAL and internal state bits */
    uint8_t reserved[3];
};

/*
 * Starts a stream. prev_token is the token before the first one to be fed
 * (the last prompt token; RS_VOCAB_NONE if none): when it is BOS, the first
 * generated space is dropped as SentencePiece does. Writes only *d; any
 * thread; d may be in shared memory.
 */
void rs_detok_init(struct rs_detok *d, const rs_vocab *v, int32_t prev_token, unsigned flags);

/* Bytes one rs_detok_feed may write at most for vocab v (give at least this as cap). */
size_t rs_detok_max_out(const rs_vocab *v);

/*
 * Feeds one token. Writes the text it completes to out[0..cap) and its length
 * to *n_out (often 0 while a character is incomplete). Returns RS_OK;
 * RS_EINVAL for a token id outside the vocab; RS_ERANGE when cap is too small
 * for this token (rs_detok_max_out always suffices). On an error *d is
 * unchanged, so the call can be retried. Any thread that owns d.
 */
rs_err rs_detok_feed(const rs_vocab *v, struct rs_detok *d, int32_t token, char *out, size_t cap,
                     size_t *n_out);

/*
 * Ends the stream: an incomplete character still pending becomes U+FFFD.
 * out needs 3 bytes. *d is then empty (n_pending 0).
 */
rs_err rs_detok_flush(const rs_vocab *v, struct rs_detok *d, char *out, size_t cap, size_t *n_out);

/*
 * One-shot: the text of ids[0..n) decoded as one stream (no previous token,
 * flushed at the end). RS_ERANGE when cap is too small; *n_out is then the
 * length needed. RS_EINVAL for an id outside the vocab. Any thread.
 */
rs_err rs_detok_decode(const rs_vocab *v, const int32_t *ids, size_t n, unsigned flags, char *out,
                       size_t cap, size_t *n_out);

#endif

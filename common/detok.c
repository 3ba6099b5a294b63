/* SPDX-License-Identifier: MIT */
/*
 * Incremental detokenizer; see detok.h. Each feed works on the pending
 * bytes followed by the token's piece: complete characters are emitted
 * (after the SentencePiece space rules), a valid but unfinished sequence at
 * the end is carried in the state, anything else becomes U+FFFD. The state
 * is written only once the output is complete, so errors leave it intact.
 */
#include "common/detok.h"

#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

#define DT_STRIP 0x80u /* drop the next character if it is a space (we are right after BOS) */
#define DT_PUBLIC RS_DETOK_SPECIAL

static const char SPACE_MARK[] = "\xE2\x96\x81"; /* U+2581 */

/* Output cursor and the flags being updated by one call. */
struct emitter {
    char *out;
    size_t o;
    uint8_t flags;
    int spm; /* SentencePiece: U+2581 is a space */
};

/* Appends complete characters s[0..n) (valid UTF-8), applying the space rules. */
static void emit_chars(struct emitter *e, const char *s, size_t n)
{
    if (n == 0)
        return;
    if (e->flags & DT_STRIP) {
        e->flags &= (uint8_t)~DT_STRIP;
        if (s[0] == ' ') {
            s++;
            n--;
        } else if (e->spm && n >= 3 && memcmp(s, SPACE_MARK, 3) == 0) {
            s += 3;
            n -= 3;
        }
    }
    if (!e->spm) {
        memcpy(e->out + e->o, s, n);
        e->o += n;
        return;
    }
    for (size_t i = 0; i < n;) {
        if ((uint8_t)s[i] == 0xE2 && i + 3 <= n && memcmp(s + i, SPACE_MARK, 3) == 0) {
            e->out[e->o++] = ' ';
            i += 3;
        } else {
            e->out[e->o++] = s[i++];
        }
    }
}

static void emit_replacement(struct emitter *e)
{
    emit_chars(e, RS_UTF8_REPLACEMENT, 3);
}

/*
 * Completes the pending sequence with bytes from the piece. Returns how many
 * piece bytes it took; *still_pending is set when the piece ran out first.
 */
static size_t complete_pending(struct emitter *e, uint8_t *pend, uint8_t *n_pend, const char *piece,
                               size_t len)
{
    uint8_t lead = pend[0];
    unsigned need = rs_utf8_seq_len(lead);
    char seq[4];
    memcpy(seq, pend, *n_pend);
    unsigned have = *n_pend;
    size_t i = 0;
    while (have < need && i < len && rs_utf8_cont_ok(lead, have, (uint8_t)piece[i]))
        seq[have++] = piece[i++];
    if (have == need) {
        emit_chars(e, seq, have);
        *n_pend = 0;
    } else if (i == len) {
        memcpy(pend, seq, have); /* still a valid prefix: wait for more */
        *n_pend = (uint8_t)have;
    } else {
        emit_replacement(e); /* the held bytes can no longer complete */
        *n_pend = 0;
    }
    return i;
}

/* Emits piece[i..len): valid runs as they are, ill-formed units as U+FFFD; holds an unfinished
 * tail. */
static void emit_piece(struct emitter *e, const char *piece, size_t len, size_t i, uint8_t *pend,
                       uint8_t *n_pend)
{
    while (i < len) {
        size_t ok = rs_utf8_valid_prefix(piece + i, len - i);
        emit_chars(e, piece + i, ok);
        i += ok;
        if (i >= len)
            break;
        uint32_t cp;
        size_t k = rs_utf8_next(piece + i, len - i, &cp);
        if (i + k == len && rs_utf8_incomplete_tail(piece + i, k) == k) {
            memcpy(pend, piece + i, k);
            *n_pend = (uint8_t)k;
            return;
        }
        emit_replacement(e);
        i += k;
    }
}

void rs_detok_init(struct rs_detok *d, const rs_vocab *v, int32_t prev_token, unsigned flags)
{
    memset(d, 0, sizeof(*d));
    d->flags = (uint8_t)(flags & DT_PUBLIC);
    if (prev_token >= 0 && prev_token == rs_vocab_bos(v) && rs_vocab_add_space_prefix(v))
        d->flags |= DT_STRIP;
}

size_t rs_detok_max_out(const rs_vocab *v)
{
    return 3 * (rs_vocab_max_piece_len(v) + 3);
}

rs_err rs_detok_feed(const rs_vocab *v, struct rs_detok *d, int32_t token, char *out, size_t cap,
                     size_t *n_out)
{
    size_t len;
    const char *piece = rs_vocab_token_piece(v, token, d->flags & RS_DETOK_SPECIAL, &len);
    if (piece == NULL || d->n_pending > 3)
        return RS_EINVAL;
    if (cap < 3 * (len + d->n_pending))
        return RS_ERANGE;
    struct emitter e = {out, 0, d->flags, rs_vocab_kind(v) == RS_VOCAB_SPM};
    uint8_t pend[3];
    uint8_t n_pend = d->n_pending;
    memcpy(pend, d->pending, sizeof(pend));
    size_t i = n_pend ? complete_pending(&e, pend, &n_pend, piece, len) : 0;
    if (n_pend == 0)
        emit_piece(&e, piece, len, i, pend, &n_pend);
    /* BOS shown as "<s>" is the text's start already; only an invisible BOS strips. */
    if (token == rs_vocab_bos(v) && rs_vocab_add_space_prefix(v) && e.o == 0)
        e.flags |= DT_STRIP;
    memcpy(d->pending, pend, sizeof(pend));
    d->n_pending = n_pend;
    d->flags = e.flags;
    d->n_tokens++;
    *n_out = e.o;
    return RS_OK;
}

rs_err rs_detok_flush(const rs_vocab *v, struct rs_detok *d, char *out, size_t cap, size_t *n_out)
{
    if (d->n_pending == 0) {
        *n_out = 0;
        return RS_OK;
    }
    if (cap < 3)
        return RS_ERANGE;
    struct emitter e = {out, 0, d->flags, rs_vocab_kind(v) == RS_VOCAB_SPM};
    emit_replacement(&e);
    d->n_pending = 0;
    d->flags = e.flags;
    *n_out = e.o;
    return RS_OK;
}

rs_err rs_detok_decode(const rs_vocab *v, const int32_t *ids, size_t n, unsigned flags, char *out,
                       size_t cap, size_t *n_out)
{
    struct rs_detok d;
    size_t max = rs_detok_max_out(v), total = 0;
    char *tmp = malloc(max);
    if (tmp == NULL || (ids == NULL && n > 0))
        return tmp == NULL ? RS_ENOMEM : RS_EINVAL;
    rs_detok_init(&d, v, RS_VOCAB_NONE, flags);
    rs_err rc = RS_OK;
    for (size_t i = 0; i <= n && rc == RS_OK; i++) {
        size_t step = 0;
        rc = i < n ? rs_detok_feed(v, &d, ids[i], tmp, max, &step)
                   : rs_detok_flush(v, &d, tmp, max, &step);
        if (rc == RS_OK && total < cap)
            memcpy(out + total, tmp, step < cap - total ? step : cap - total);
        total += step;
    }
    free(tmp);
    if (rc != RS_OK)
        return rc;
    *n_out = total;
    return total <= cap ? RS_OK : RS_ERANGE;
}

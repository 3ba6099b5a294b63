/* SPDX-License-Identifier: MIT */
/*
 * Stop-string matcher for streamed text. It sits after the detokenizer:
 * each text delta goes in, the part that is safe to send comes out. Text
 * that might be the start of a stop string is held back (at most the longest
 * stop string minus one byte) until it is decided; when a stop string
 * completes, everything before it is released and the stop string and all
 * later text are dropped. A stop string split across any number of deltas is
 * found; the stop string that completes first wins, so the result does not
 * depend on how the text is cut into deltas. The stop strings are not kept here:
 * the caller passes them on every call (they live in the request record).
 *
 * The whole state is struct rs_stopstr: fixed size, plain bytes, no
 * pointers, so postprocd keeps it in shared memory and resumes after a
 * crash. Given complete UTF-8 deltas and valid UTF-8 stop strings, every
 * released chunk is complete UTF-8. Leaves out: stop token ids (sampler) and
 * regular-expression stops.
 */
#ifndef RS_STOPSTR_H
#define RS_STOPSTR_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define RS_STOPSTR_MAX_LEN 256 /* bytes of the longest allowed stop string */

struct rs_stopstr {
    uint16_t n_held; /* bytes held back */
    uint8_t matched; /* 1 once a stop string matched: nothing more is released */
    uint8_t reserved;
    int32_t which;                        /* index of the stop string that matched, -1 before */
    uint8_t held[RS_STOPSTR_MAX_LEN - 1]; /* text that may start a stop string */
};

/* Starts a stream. Writes only *s; any thread; s may be in shared memory. */
void rs_stopstr_init(struct rs_stopstr *s);

/*
 * Adds text[0..len) (the next delta). stops[i] (lens[i] bytes, 1..
 * RS_STOPSTR_MAX_LEN) for i < n_stops are the stop strings; n_stops may be 0.
 * Writes the bytes safe to release to out and their count to *n_out; out
 * needs cap >= s->n_held + len (RS_STOPSTR_MAX_LEN + len always suffices).
 * *which is set to the index of the stop string that matched in this call,
 * or -1. After a match, later calls release nothing. Returns RS_OK,
 * RS_EINVAL (bad stop length or NULL), RS_ERANGE (cap); on an error *s is
 * unchanged. Any thread that owns s.
 */
rs_err rs_stopstr_feed(struct rs_stopstr *s, const char *const *stops, const size_t *lens,
                       size_t n_stops, const char *text, size_t len, char *out, size_t cap,
                       size_t *n_out, int *which);

/*
 * Ends the stream without a match (EOS, length limit): releases the held
 * bytes into out (cap >= s->n_held). After a match it releases nothing.
 */
rs_err rs_stopstr_finish(struct rs_stopstr *s, char *out, size_t cap, size_t *n_out);

#endif

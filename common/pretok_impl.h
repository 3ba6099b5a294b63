/* SPDX-License-Identifier: MIT */
/*
 * Hand-written matchers of the pre-tokenizer steps (pretok_match.c), one per
 * regex, each with exactly the semantics of its PCRE2 pattern in pretok.c
 * (ordered alternation, greedy repeats with backtracking) on valid UTF-8.
 * Private to common/pretok.c and the differential tests.
 */
#ifndef RS_PRETOK_IMPL_H
#define RS_PRETOK_IMPL_H

#include <stddef.h>
#include <stdint.h>

/*
 * Tries to match the step's regex starting exactly at s[i] within s[0..end)
 * (valid UTF-8, i < end, i on a character boundary). Returns 1 and sets *mend
 * (> i) to the end of the match, or returns 0.
 */
typedef int (*pretok_match_fn)(const uint8_t *s, size_t i, size_t end, size_t *mend);

/*
 * Finds the leftmost match at or after pos in s[0..end): 1 with [*ms, *me),
 * or 0. For steps where trying each start position would be quadratic.
 */
typedef int (*pretok_find_fn)(const uint8_t *s, size_t pos, size_t end, size_t *ms, size_t *me);

int pretok_find_ws_at_end(const uint8_t *s, size_t pos, size_t end, size_t *ms, size_t *me);

int pretok_match_gpt2(const uint8_t *s, size_t i, size_t end, size_t *mend);
int pretok_match_llama3(const uint8_t *s, size_t i, size_t end, size_t *mend);
int pretok_match_qwen2(const uint8_t *s, size_t i, size_t end, size_t *mend);
int pretok_match_digit(const uint8_t *s, size_t i, size_t end, size_t *mend);
int pretok_match_digits(const uint8_t *s, size_t i, size_t end, size_t *mend);
int pretok_match_digits13(const uint8_t *s, size_t i, size_t end, size_t *mend);
int pretok_match_ascii_digit3(const uint8_t *s, size_t i, size_t end, size_t *mend);
int pretok_match_punct_default(const uint8_t *s, size_t i, size_t end, size_t *mend);
int pretok_match_punct_falcon(const uint8_t *s, size_t i, size_t end, size_t *mend);
int pretok_match_newline(const uint8_t *s, size_t i, size_t end, size_t *mend);
int pretok_match_ws_letters(const uint8_t *s, size_t i, size_t end, size_t *mend);
int pretok_match_ws_punct(const uint8_t *s, size_t i, size_t end, size_t *mend);
int pretok_match_cjk(const uint8_t *s, size_t i, size_t end, size_t *mend);
int pretok_match_cjk_kana(const uint8_t *s, size_t i, size_t end, size_t *mend);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the input is a GBNF grammar (see fuzz_grammar.h for
 * what is checked: compile under tight limits, a message on every refusal,
 * masks equal full decodes for a few steps, the printed GBNF parses again).
 * Seeds: tests/fuzz/corpus/grammar_gbnf/.
 */
#include "tests/fuzz/fuzz_grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fg_run(RS_CONSTRAINT_GBNF, data, size);
}

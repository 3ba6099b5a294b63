/* SPDX-License-Identifier: MIT */
/*
 * Shared body of the grammar fuzz targets (fuzz_grammar_gbnf.c, _schema.c,
 * _regex.c): compile the input as one constraint kind against stories260K's
 * 512-token vocab (from refdata) under tight limits, and when it compiles,
 * print it back as GBNF (which must parse again) and walk a few steps with
 * every mask compared token by token against full decodes. A failed compile
 * must leave a message; nothing may crash, leak or disagree.
 */
#ifndef RS_FUZZ_GRAMMAR_H
#define RS_FUZZ_GRAMMAR_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar.h"
#include "common/log.h"
#include "common/vocab.h"

static rs_vocab *fg_vocab;
static rs_grammar_vocab *fg_gv;

static void fg_check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_grammar: %s\n", what);
        __builtin_trap();
    }
}

static int fg_init(void)
{
    static int done;
    if (!done) {
        done = 1;
        rs_log_set_level((enum rs_log_level)(RS_LOG_ERROR + 1));
        const char *root = getenv("RS_REFDATA");
        char path[1024], err[256];
        snprintf(path, sizeof(path), "%s/stories260K.gguf",
                 root && *root ? root : RS_SOURCE_DIR "/../shared/refdata");
        if (rs_vocab_load_file(path, &fg_vocab, err, sizeof(err)) != RS_OK ||
            rs_grammar_vocab_create(fg_vocab, &fg_gv) != RS_OK)
            fprintf(stderr, "fuzz_grammar: %s unavailable (%s): inputs are only parsed\n", path,
                    err);
    }
    return fg_gv != NULL;
}

static void fg_limits(struct rs_grammar_limits *l)
{
    rs_grammar_limits_default(l);
    l->max_text = 1 << 16;
    l->max_repeat = 50;
    l->max_states = 1500; /* keeps one input's sanitized, coverage-traced build short */
    l->max_memory = 32u << 20;
    l->max_cache_memory = 16u << 20;
}

/* A few steps of the matcher, every mask checked against full decodes. */
static void fg_walk(rs_grammar *g, const uint8_t *data, size_t size)
{
    rs_grammar_matcher *m;
    fg_check(rs_grammar_matcher_create(g, &m) == RS_OK, "matcher");
    uint32_t n = rs_vocab_n_tokens(fg_vocab);
    uint32_t row[16];
    for (int step = 0; step < 4; step++) {
        unsigned flags;
        fg_check(rs_grammar_matcher_fill_mask(m, row, 16, &flags) == RS_OK, "fill_mask");
        int32_t pick = -1, k = 0;
        uint8_t choose = size ? data[(size_t)step * 7 % size] : 0;
        for (uint32_t t = 0; t < n; t++) {
            int bit = (row[t >> 5] >> (t & 31)) & 1;
            fg_check(bit == rs_grammar_matcher_check(m, (int32_t)t), "mask != full decode");
            if (bit && !rs_vocab_is_eog(fg_vocab, (int32_t)t) && k++ <= choose)
                pick = (int32_t)t;
        }
        if (pick < 0)
            break;
        rs_err rc = rs_grammar_matcher_accept(m, pick);
        fg_check(rc == RS_OK || rc == RS_ERANGE, "an allowed token was refused");
        if (rc != RS_OK)
            break;
    }
    rs_grammar_matcher_destroy(&m);
}

/* The printed GBNF parses again (it may exceed limits, never be malformed). */
static void fg_reprint(rs_grammar *g, const struct rs_grammar_limits *lim)
{
    size_t n;
    rs_grammar_print(g, NULL, 0, &n);
    char *txt = malloc(n + 1);
    fg_check(txt != NULL && rs_grammar_print(g, txt, n + 1, &n) == RS_OK, "print");
    struct rs_constraint c = {RS_CONSTRAINT_GBNF, txt, n, NULL, NULL, 0};
    rs_grammar *g2 = NULL;
    char err[512] = "";
    struct rs_grammar_limits big = *lim;
    big.max_text = n + 1;
    rs_err rc = rs_grammar_compile(fg_gv, &c, &big, RS_GRAMMAR_LAZY, &g2, err, sizeof(err));
    if (rc == RS_EINVAL || rc == RS_EUNSUPPORTED)
        fprintf(stderr, "printed grammar refused: %s\n%s\n", err, txt);
    fg_check(rc == RS_OK || rc == RS_ERANGE || rc == RS_ENOMEM, "printed GBNF does not parse");
    rs_grammar_release(&g2);
    free(txt);
}

static int fg_run(enum rs_constraint_kind kind, const uint8_t *data, size_t size)
{
    if (!fg_init())
        return 0;
    struct rs_grammar_limits lim;
    fg_limits(&lim);
    struct rs_constraint c = {kind, (const char *)data, size, NULL, NULL, 0};
    rs_grammar *g = NULL;
    char err[512] = "";
    rs_err rc = rs_grammar_compile(fg_gv, &c, &lim, RS_GRAMMAR_LAZY, &g, err, sizeof(err));
    if (rc != RS_OK) {
        fg_check(g == NULL && err[0] != '\0' && memchr(err, '\0', sizeof(err)) != NULL,
                 "a failed compile left no message");
        return 0;
    }
    fg_walk(g, data, size);
    struct rs_grammar_stats st;
    rs_grammar_stats(g, &st);
    if (st.n_states <= 500) /* a second compile of a large grammar costs more than it finds */
        fg_reprint(g, &lim);
    rs_grammar_release(&g);
    return 0;
}

#endif

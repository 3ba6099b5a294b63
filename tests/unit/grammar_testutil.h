/* SPDX-License-Identifier: MIT */
/*
 * Functions for the structured-output tests (header-only, static): refdata
 * vocabs with their token tries, compiling with the error printed, random
 * constrained walks (uniform over the mask, ending with some probability when
 * the grammar may), the brute-force mask (every token checked by a full
 * decode through rs_grammar_matcher_check), and running the independent JSON
 * schema validator (tests/grammar_validate.py with Debian's python3-jsonschema).
 */
#ifndef RS_GRAMMAR_TESTUTIL_H
#define RS_GRAMMAR_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/grammar.h"
#include "common/vocab.h"
#include "tests/rs_test.h"

struct gt_vocab {
    rs_vocab *v;
    rs_grammar_vocab *gv;
    uint32_t n;
};

/* Loads refdata/<rel>; 0, RS_TEST_SKIP when absent, 1 on failure. */
static inline int gt_vocab_load(const char *rel, struct gt_vocab *out)
{
    char path[1024], err[256];
    memset(out, 0, sizeof(*out));
    if (rs_test_refdata(rel, path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    if (rs_vocab_load_file(path, &out->v, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "%s: %s\n", rel, err);
        return 1;
    }
    if (rs_grammar_vocab_create(out->v, &out->gv) != RS_OK)
        return 1;
    out->n = rs_vocab_n_tokens(out->v);
    return 0;
}

static inline void gt_vocab_free(struct gt_vocab *x)
{
    rs_grammar_vocab_destroy(&x->gv);
    rs_vocab_destroy(&x->v);
}

/* Compiles text as kind; NULL (error printed) on failure. */
static inline rs_grammar *gt_compile(const struct gt_vocab *x, enum rs_constraint_kind kind,
                                     const char *text, unsigned flags)
{
    struct rs_constraint c = {kind, text, text ? strlen(text) : 0, NULL, NULL, 0};
    rs_grammar *g = NULL;
    char err[512] = "";
    rs_err rc = rs_grammar_compile(x->gv, &c, NULL, flags, &g, err, sizeof(err));
    if (rc != RS_OK)
        fprintf(stderr, "compile failed (%s): %s\n--- text ---\n%s\n", rs_strerror(rc), err,
                text ? text : "");
    return g;
}

static inline uint64_t gt_rand(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static inline int gt_bit(const uint32_t *row, uint32_t t)
{
    return (row[t >> 5] >> (t & 31)) & 1;
}

/* 0 when row equals the brute-force mask of m's state (every token checked); else 1. */
static inline int gt_mask_is_exact(rs_grammar_matcher *m, const struct gt_vocab *x,
                                   const uint32_t *row)
{
    int bad = 0;
    for (uint32_t t = 0; t < x->n; t++) {
        int ok = rs_grammar_matcher_check(m, (int32_t)t);
        if (ok != gt_bit(row, t) && bad++ < 5) {
            size_t len;
            const char *p = rs_vocab_token_piece(x->v, (int32_t)t, 0, &len);
            fprintf(stderr, "token %u '%.*s': mask %d, full decode %d\n", t, (int)len, p,
                    gt_bit(row, t), ok);
        }
    }
    return bad != 0;
}

/* Result of one random walk. */
struct gt_walk {
    char text[8192];
    size_t len;
    int32_t tokens[1024];
    uint32_t n_tokens;
    int ended; /* an end-of-generation token was chosen (or nothing could follow) */
};

/*
 * Random constrained generation: each step a uniformly random allowed token;
 * an end token with probability p_end when allowed. brute: compare every mask
 * with the brute-force one. Returns 0, or 1 on a failed check.
 */
static inline int gt_walk_run(rs_grammar_matcher *m, const struct gt_vocab *x, uint64_t seed,
                              uint32_t max_tokens, double p_end, int brute, struct gt_walk *w)
{
    size_t nw = rs_grammar_mask_words(x->n);
    uint32_t *row = calloc(nw, sizeof(uint32_t));
    uint32_t *allowed = calloc(x->n, sizeof(uint32_t));
    uint64_t s = seed * 2654435761u + 1;
    int rc = 0;
    memset(w, 0, sizeof(*w));
    for (uint32_t step = 0; step < max_tokens && step < 1024 && rc == 0; step++) {
        unsigned flags;
        if (rs_grammar_matcher_fill_mask(m, row, nw, &flags) != RS_OK) {
            rc = 1;
            break;
        }
        if (brute && gt_mask_is_exact(m, x, row)) {
            fprintf(stderr, "mask differs from full decode at step %u after '%.*s'\n", step,
                    (int)w->len, w->text);
            rc = 1;
            break;
        }
        uint32_t n_allowed = 0, n_end = 0;
        for (uint32_t t = 0; t < x->n; t++)
            if (gt_bit(row, t) && !rs_vocab_is_eog(x->v, (int32_t)t))
                allowed[n_allowed++] = t;
        for (uint32_t t = 0; t < x->n; t++)
            n_end += gt_bit(row, t) && rs_vocab_is_eog(x->v, (int32_t)t);
        if (n_allowed == 0 || (n_end > 0 && (double)(gt_rand(&s) % 1000) / 1000.0 < p_end)) {
            w->ended = n_end > 0;
            if (n_end == 0 && !(flags & RS_GRAMMAR_MASK_DEAD))
                rc = 1;
            break;
        }
        uint32_t t = allowed[gt_rand(&s) % n_allowed];
        if (rs_grammar_matcher_accept(m, (int32_t)t) != RS_OK) {
            fprintf(stderr, "token %u allowed by the mask was refused\n", t);
            rc = 1;
            break;
        }
        size_t len;
        const char *p = rs_vocab_token_piece(x->v, (int32_t)t, 0, &len);
        if (w->len + len < sizeof(w->text)) {
            memcpy(w->text + w->len, p, len);
            w->len += len;
        }
        w->tokens[w->n_tokens++] = (int32_t)t;
    }
    w->text[w->len] = '\0';
    free(row);
    free(allowed);
    return rc;
}

/* Appends {"schema": schema, "text": text} as one JSON line to f (text escaped here). */
static inline void gt_jsonl_put(FILE *f, const char *schema, const char *text, size_t len)
{
    fprintf(f, "{\"schema\": %s, \"text\": \"", schema);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputs("\"}\n", f);
}

/*
 * Runs tests/grammar_validate.py on a JSONL file of {"schema", "text"} lines:
 * 0 when every text parses as JSON and validates, 1 otherwise, RS_TEST_SKIP
 * when python3 or python3-jsonschema is missing.
 */
static inline int gt_validate(const char *jsonl)
{
    const char *src = getenv("RS_SOURCE") ? getenv("RS_SOURCE") : RS_SOURCE_DIR;
    const char *py = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s '%s/tests/grammar_validate.py' '%s'", py, src, jsonl);
    int rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc))
        return 1;
    if (WEXITSTATUS(rc) == RS_TEST_SKIP || WEXITSTATUS(rc) == 127) {
        fprintf(stderr, "python3 with jsonschema not available: skipping validation\n");
        return RS_TEST_SKIP;
    }
    return WEXITSTATUS(rc) == 0 ? 0 : 1;
}

#endif

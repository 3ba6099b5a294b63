/* SPDX-License-Identifier: MIT */
/*
 * The solo reference's structured output (solo_constraint.h): the same
 * library calls launcherd's mask thread and sampler make, in one thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/solo_constraint.h"

static int compile(struct solo_cx *cx, const struct rs_wire_constraint *w)
{
    const char *ptrs[RS_WIRE_CX_CHOICES_MAX];
    size_t lens[RS_WIRE_CX_CHOICES_MAX];
    for (uint32_t i = 0; i < w->n_choices; i++) {
        ptrs[i] = w->choices[i].ptr;
        lens[i] = w->choices[i].len;
    }
    struct rs_constraint c = {.kind = (enum rs_constraint_kind)w->kind, .text = w->text.ptr,
                              .len = w->text.len, .choices = ptrs, .choice_lens = lens,
                              .n_choices = w->n_choices};
    rs_grammar *g = NULL;
    char why[256];
    if (rs_grammar_compile(cx->gv, &c, NULL, 0, &g, why, sizeof(why)) != RS_OK) {
        fprintf(stderr, "solo_cx: constraint does not compile: %s\n", why);
        return 1;
    }
    rs_err rc = rs_grammar_matcher_create(g, &cx->m);
    rs_grammar_release(&g);
    return rc != RS_OK;
}

int solo_cx_begin(struct solo_cx *cx, const rs_vocab *v, uint32_t n_vocab,
                  const struct rs_wire_generate *g, const int32_t *eog, uint32_t n_eog)
{
    memset(cx, 0, sizeof(*cx));
    const struct rs_wire_constraint *w = &g->cx;
    cx->on = w->kind != RS_WIRE_CX_NONE || w->n_bias > 0 || w->allowed.n > 0 ||
             w->min_tokens > 0;
    if (!cx->on)
        return 0;
    size_t words = rs_grammar_mask_words(n_vocab);
    char why[256];
    cx->n_vocab = n_vocab;
    cx->row = calloc(words, 4);
    cx->bias = calloc(w->n_bias + n_eog + 1, sizeof(*cx->bias));
    if (cx->row == NULL || cx->bias == NULL || rs_grammar_vocab_create(v, &cx->gv) != RS_OK)
        return 1;
    struct rs_wire_bias b[RS_WIRE_LOGIT_BIAS_MAX];
    cx->n_bias = rs_wire_bias_copy(w, b, RS_WIRE_LOGIT_BIAS_MAX);
    for (uint32_t i = 0; i < cx->n_bias; i++)
        cx->bias[i] = (struct rs_logit_bias){(int32_t)b[i].token, b[i].bias};
    for (uint32_t i = 0; i < n_eog; i++)
        cx->bias[cx->n_bias + i] = (struct rs_logit_bias){eog[i], RS_LOGIT_BIAS_BAN};
    cx->n_eog = n_eog;
    cx->min_tokens = w->min_tokens;
    if (w->allowed.n > 0) {
        uint32_t ids[RS_WIRE_ALLOWED_IDS_MAX];
        uint32_t n = rs_wire_ids_copy(&w->allowed, ids, RS_WIRE_ALLOWED_IDS_MAX);
        if ((cx->allowed = calloc(words, 4)) == NULL ||
            rs_mask_from_ids(cx->allowed, words, n_vocab, (const int32_t *)ids, n, why,
                             sizeof(why)) != RS_OK)
            return 1;
    }
    return w->kind != RS_WIRE_CX_NONE ? compile(cx, w) : 0;
}

enum solo_cx_verdict solo_cx_apply(struct solo_cx *cx, float *logits)
{
    if (!cx->on)
        return SOLO_CX_SAMPLE;
    size_t words = rs_grammar_mask_words(cx->n_vocab);
    const uint32_t *row = NULL;
    if (cx->m != NULL) {
        unsigned f = 0;
        if (rs_grammar_matcher_fill_mask(cx->m, cx->row, words, &f) != RS_OK)
            return SOLO_CX_DEAD;
        if (f & RS_GRAMMAR_MASK_ONLY_END)
            return SOLO_CX_END;
        if (f & RS_GRAMMAR_MASK_DEAD)
            return SOLO_CX_DEAD;
        if (cx->allowed != NULL)
            rs_mask_and(cx->row, cx->allowed, words);
        row = cx->row;
    } else if (cx->allowed != NULL) {
        row = cx->allowed;
    }
    uint32_t left = 0;
    rs_mask_apply(logits, cx->n_vocab, row, cx->bias,
                  cx->n_bias + (cx->n_out < cx->min_tokens ? cx->n_eog : 0), &left);
    return left == 0 ? SOLO_CX_DEAD : SOLO_CX_SAMPLE;
}

int solo_cx_accept(struct solo_cx *cx, int32_t tok)
{
    cx->n_out++;
    if (cx->m == NULL || rs_grammar_matcher_accept(cx->m, tok) == RS_OK)
        return 0;
    fprintf(stderr, "solo_cx: sampled token %d refused by its own mask\n", tok);
    return 1;
}

void solo_cx_end(struct solo_cx *cx)
{
    rs_grammar_matcher_destroy(&cx->m);
    rs_grammar_vocab_destroy(&cx->gv);
    free(cx->row);
    free(cx->allowed);
    free(cx->bias);
    memset(cx, 0, sizeof(*cx));
}

/* SPDX-License-Identifier: MIT */
/*
 * The per-sequence matcher: the current parse stacks (level 0 of a stack
 * engine) advanced over each accepted token's bytes. Its state is a pure
 * function of (grammar, tokens accepted): replay rebuilds it after a restart.
 * A token is accepted when some stack reads all its bytes (partial UTF-8 is
 * just a state inside a character's byte sequence); end-of-generation tokens
 * when the grammar can end. A refused token leaves the state unchanged.
 * Leaves out: mask rows (grammar_mask.c).
 */
#include <stdlib.h>
#include <string.h>

#include "common/grammar_impl.h"

rs_err rs_grammar_matcher_create(rs_grammar *g, rs_grammar_matcher **out)
{
    rs_grammar_matcher *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return RS_ENOMEM;
    m->cls_stamp = calloc((size_t)g->a.n_classes + 1, sizeof(uint32_t));
    if (m->cls_stamp == NULL || gs_init(&m->e, g) != RS_OK) {
        free(m->cls_stamp);
        free(m);
        return RS_ENOMEM;
    }
    m->g = rs_grammar_retain(g);
    if (gs_start(&m->e) != 0) {
        rs_grammar_matcher_destroy(&m);
        return RS_ENOMEM;
    }
    *out = m;
    return RS_OK;
}

void rs_grammar_matcher_destroy(rs_grammar_matcher **pm)
{
    rs_grammar_matcher *m = *pm;
    if (m == NULL)
        return;
    gs_fini(&m->e);
    free(m->cls_stamp);
    rs_grammar_release(&m->g);
    free(m);
    *pm = NULL;
}

void rs_grammar_matcher_reset(rs_grammar_matcher *m)
{
    m->terminated = 0;
    if (gs_start(&m->e) != 0) /* out of memory: leave no stacks (nothing is allowed) */
        gs_reset(&m->e);
}

/*
 * Runs bytes s[0..n) from level 0 into levels 1..n. RS_OK: level n holds the
 * result (call commit or drop). RS_EINVAL: refused. RS_ERANGE: ambiguity cap.
 */
static rs_err run_bytes(rs_grammar_matcher *m, const uint8_t *s, size_t n)
{
    struct gs_engine *e = &m->e;
    for (size_t i = 0; i < n; i++) {
        int r = gs_step(e, (uint32_t)i, s[i]);
        if (r < 0) {
            rs_err rc = e->lv[i + 1].overflow ? RS_ERANGE : RS_ENOMEM;
            gs_truncate(e, 0);
            return rc;
        }
        if (r == 0 && !e->lv[i + 1].end) {
            gs_truncate(e, 0);
            return RS_EINVAL;
        }
    }
    return RS_OK;
}

static int is_eog(const rs_grammar_vocab *gv, int32_t token)
{
    for (uint32_t i = 0; i < gv->n_eog; i++)
        if (gv->eog[i] == token)
            return 1;
    return 0;
}

/* commit: 1 accept, 0 only check. */
static rs_err advance(rs_grammar_matcher *m, int32_t token, int commit)
{
    const rs_grammar_vocab *gv = m->g->gv;
    if (token < 0 || (uint32_t)token >= gv->n_tokens)
        return RS_EINVAL;
    if (is_eog(gv, token)) {
        if (!m->terminated && !m->e.lv[0].end)
            return RS_EINVAL;
        if (commit)
            m->terminated = 1;
        return RS_OK;
    }
    int32_t rank = gv->tok_rank[token];
    if (rank < 0 || m->terminated)
        return RS_EINVAL;
    uint32_t len;
    const uint8_t *b = gv_rank_bytes(gv, (uint32_t)rank, &len);
    rs_err rc = run_bytes(m, b, len);
    if (rc != RS_OK)
        return rc;
    if (!commit) {
        gs_truncate(&m->e, 0);
        return RS_OK;
    }
    return gs_commit(&m->e, len) == 0 ? RS_OK : RS_ENOMEM;
}

rs_err rs_grammar_matcher_accept(rs_grammar_matcher *m, int32_t token)
{
    return advance(m, token, 1);
}

int rs_grammar_matcher_check(rs_grammar_matcher *m, int32_t token)
{
    return advance(m, token, 0) == RS_OK;
}

rs_err rs_grammar_matcher_accept_bytes(rs_grammar_matcher *m, const char *s, size_t n)
{
    if (m->terminated)
        return n == 0 ? RS_OK : RS_EINVAL;
    if (n == 0)
        return RS_OK;
    rs_err rc = run_bytes(m, (const uint8_t *)s, n);
    if (rc != RS_OK)
        return rc;
    return gs_commit(&m->e, (uint32_t)n) == 0 ? RS_OK : RS_ENOMEM;
}

rs_err rs_grammar_matcher_replay(rs_grammar_matcher *m, const int32_t *tokens, size_t n,
                                 size_t *n_done)
{
    rs_grammar_matcher_reset(m);
    for (size_t i = 0; i < n; i++) {
        rs_err rc = rs_grammar_matcher_accept(m, tokens[i]);
        if (rc != RS_OK) {
            if (n_done != NULL)
                *n_done = i;
            return rc;
        }
    }
    if (n_done != NULL)
        *n_done = n;
    return RS_OK;
}

int rs_grammar_matcher_can_end(const rs_grammar_matcher *m)
{
    return m->terminated || m->e.lv[0].end;
}

int rs_grammar_matcher_is_finished(const rs_grammar_matcher *m)
{
    return m->terminated || (m->e.lv[0].n == 0 && m->e.lv[0].end);
}

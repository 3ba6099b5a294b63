/* SPDX-License-Identifier: MIT */
/*
 * Structured-output constraints at intake: every constraint is compiled
 * against the model's vocab here, before a record is claimed, so a
 * malformed grammar, schema or regex is answered with an error naming its
 * position and never fails at step time; the compiled grammar stays in a
 * cache keyed by content (launcherd compiles its own copy from the same
 * text, hitting its own cache). The text the client sent is what the record
 * stores (pipeline_constraint.h): the stages that need a matcher rebuild it
 * from that. The vocab's token trie is built on the first constrained
 * request, so a server that never sees one never pays for it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar.h"
#include "common/log.h"
#include "ipc/pipeline_constraint.h"
#include "tokenizerd/tokd.h"

#define CACHE_ENTRIES 64
#define CACHE_BYTES (256u << 20)

int tokd_constrained(const struct rs_wire_generate *g)
{
    return g->cx.kind != RS_WIRE_CX_NONE || g->cx.n_bias > 0 || g->cx.allowed.n > 0 ||
           g->cx.min_tokens > 0;
}

static rs_err grammar_ready(struct tokd *t)
{
    rs_err rc = RS_OK;
    if (t->gv == NULL && (rc = rs_grammar_vocab_create(t->vocab, &t->gv)) != RS_OK)
        return rc;
    if (t->gcache == NULL &&
        (rc = rs_grammar_cache_create(t->gv, CACHE_ENTRIES, CACHE_BYTES, &t->gcache)) != RS_OK)
        return rc;
    if (t->cx_words == NULL && (t->cx_words = malloc(RS_PIPE_CX_MAX_WORDS * 4u)) == NULL)
        return RS_ENOMEM;
    return RS_OK;
}

/* The grammar-engine view of the wire's constraint (choices point into `ptrs`/`lens`). */
static void as_constraint(const struct rs_wire_constraint *c, struct rs_constraint *out,
                          const char **ptrs, size_t *lens)
{
    for (uint32_t i = 0; i < c->n_choices; i++) {
        ptrs[i] = c->choices[i].ptr;
        lens[i] = c->choices[i].len;
    }
    *out = (struct rs_constraint){.kind = (enum rs_constraint_kind)c->kind,
                                  .text = c->text.ptr,
                                  .len = c->text.len,
                                  .choices = ptrs,
                                  .choice_lens = lens,
                                  .n_choices = c->n_choices};
}

int tokd_constraint_check(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                          const struct rs_wire_client_msg *m)
{
    const struct rs_wire_constraint *c = &m->u.gen.cx;
    if (!tokd_constrained(&m->u.gen))
        return 0;
    rs_err rc = grammar_ready(t);
    if (rc != RS_OK) {
        tokd_reply_error(t, sock, peer, m->id, RS_WIRE_INTERNAL, "cannot prepare structured "
                         "output for this vocab: %s", rs_strerror(rc));
        return 1;
    }
    if (c->kind == RS_WIRE_CX_NONE)
        return 0; /* logit_bias / allowed_token_ids / min_tokens alone: the wire validator's */
    static const char *ptrs[RS_WIRE_CX_CHOICES_MAX];
    static size_t lens[RS_WIRE_CX_CHOICES_MAX];
    struct rs_constraint gc;
    as_constraint(c, &gc, ptrs, lens);
    char why[512];
    int hit = 0;
    rs_grammar *g = NULL;
    rc = rs_grammar_cache_get(t->gcache, &gc, NULL, 0, &g, &hit, why, sizeof(why));
    if (rc == RS_OK) {
        rs_log_debug("constraint %s %016llx compiled (%s) for '%s'", rs_wire_cx_kind_name(c->kind),
                     (unsigned long long)rs_constraint_hash(&gc), hit ? "cached" : "new", m->id);
        rs_grammar_release(&g);
        return 0;
    }
    enum rs_wire_code code = rc == RS_ENOMEM ? RS_WIRE_INTERNAL
                             : rc == RS_ERANGE ? RS_WIRE_TOO_LARGE
                                               : RS_WIRE_INVALID_PARAM;
    tokd_reply_error(t, sock, peer, m->id, code, "field 'constraint' (%s): %s",
                     rs_wire_cx_kind_name(c->kind), why);
    return 1;
}

rs_err tokd_constraint_store(struct tokd *t, struct rs_table_ref ref,
                             const struct rs_wire_generate *g)
{
    if (!tokd_constrained(g))
        return RS_OK;
    if (t->cx_words == NULL)
        return RS_EINVAL; /* tokd_constraint_check did not run: a caller bug */
    return rs_pipe_cx_put(t->p, ref, &g->cx, t->cx_words);
}

void tokd_constraint_fini(struct tokd *t)
{
    rs_grammar_cache_destroy(&t->gcache);
    rs_grammar_vocab_destroy(&t->gv);
    free(t->cx_words);
    t->cx_words = NULL;
}

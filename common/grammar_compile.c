/* SPDX-License-Identifier: MIT */
/*
 * rs_grammar_compile: checks a constraint against the limits, runs its front
 * end into the IR (GBNF, JSON schema, any JSON object, regex, choice), builds
 * the NFA and the automaton, and (unless RS_GRAMMAR_LAZY) fills the token-mask
 * cache so the first steps cost what later ones do. Also the content hash,
 * reference counting, statistics and the GBNF printer of the IR. Leaves out:
 * the cache of compiled grammars (grammar_cache.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar_impl.h"

void rs_grammar_limits_default(struct rs_grammar_limits *l)
{
    l->max_text = 1u << 20;
    l->max_choices = 4096;
    l->max_rules = 8192;
    l->max_nesting = 64;
    l->max_repeat = 10000;
    l->max_states = 1u << 18;
    l->max_memory = 256u << 20;
    l->max_cache_memory = 256u << 20;
    l->max_stack_depth = 256;
    l->max_stacks = 4096;
}

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001B3ull;
    }
    return h;
}

static uint64_t hash_u64(uint64_t h, uint64_t v)
{
    return hash_bytes(h, &v, sizeof(v));
}

uint64_t rs_constraint_hash(const struct rs_constraint *c)
{
    uint64_t h = hash_u64(0xCBF29CE484222325ull, (uint64_t)c->kind);
    if (c->kind == RS_CONSTRAINT_CHOICE) {
        h = hash_u64(h, c->n_choices);
        for (uint32_t i = 0; i < c->n_choices; i++)
            h = hash_bytes(hash_u64(h, c->choice_lens[i]), c->choices[i], c->choice_lens[i]);
    } else if (c->kind != RS_CONSTRAINT_JSON_OBJECT) {
        h = hash_bytes(hash_u64(h, c->len), c->text, c->len);
    }
    return h;
}

static rs_err check_constraint(const struct rs_constraint *c, const struct rs_grammar_limits *l,
                               char *err, size_t err_len)
{
    if (c == NULL)
        return gx_fail(err, err_len, RS_EINVAL, "no constraint");
    if (c->kind == RS_CONSTRAINT_CHOICE) {
        if (c->n_choices == 0 || c->choices == NULL || c->choice_lens == NULL)
            return gx_fail(err, err_len, RS_EINVAL, "a choice constraint needs at least one choice");
        if (c->n_choices > l->max_choices)
            return gx_fail(err, err_len, RS_ERANGE, "%u choices: more than the limit %u",
                           c->n_choices, l->max_choices);
        size_t total = 0;
        for (uint32_t i = 0; i < c->n_choices; i++) {
            if (c->choices[i] == NULL && c->choice_lens[i] > 0)
                return gx_fail(err, err_len, RS_EINVAL, "choice %u is NULL", i);
            total += c->choice_lens[i];
        }
        if (total > l->max_text)
            return gx_fail(err, err_len, RS_ERANGE, "choices total %zu bytes: more than the "
                           "limit %zu", total, l->max_text);
        return RS_OK;
    }
    if (c->kind < RS_CONSTRAINT_GBNF || c->kind > RS_CONSTRAINT_CHOICE)
        return gx_fail(err, err_len, RS_EINVAL, "unknown constraint kind %d", (int)c->kind);
    if (c->kind == RS_CONSTRAINT_JSON_OBJECT)
        return RS_OK;
    if (c->text == NULL && c->len > 0)
        return gx_fail(err, err_len, RS_EINVAL, "constraint text is NULL");
    if (c->len > l->max_text)
        return gx_fail(err, err_len, RS_ERANGE, "constraint text of %zu bytes: more than the "
                       "limit %zu", c->len, l->max_text);
    return RS_OK;
}

static rs_err build_choice(struct gx_ir *ir, const struct rs_constraint *c, char *err,
                           size_t err_len)
{
    struct gx_list l = {0};
    for (uint32_t i = 0; i < c->n_choices; i++)
        if (gx_list_push(ir, &l, gx_bytes(ir, c->choices[i] ? c->choices[i] : "", c->choice_lens[i])))
            break;
    uint32_t root = gx_rule_get(ir, "root", 4);
    uint32_t body = ir->err == RS_OK ? gx_alt(ir, l.v, l.n) : GX_NONE;
    gx_list_free(&l);
    if (root == GX_NONE || body == GX_NONE)
        return gx_ir_error(ir, err, err_len);
    ir->rules[root].body = body;
    return RS_OK;
}

static rs_err build_ir(struct gx_ir *ir, const struct rs_constraint *c, char *err, size_t err_len)
{
    const char *t = c->text ? c->text : "";
    switch (c->kind) {
    case RS_CONSTRAINT_GBNF:
        return gx_parse_gbnf(ir, t, c->len, err, err_len);
    case RS_CONSTRAINT_JSON_SCHEMA:
        return gx_schema_build(ir, t, c->len, err, err_len);
    case RS_CONSTRAINT_JSON_OBJECT:
        return gx_json_object_build(ir, err, err_len);
    case RS_CONSTRAINT_REGEX: {
        uint32_t node, root = gx_rule_get(ir, "root", 4);
        if (root == GX_NONE)
            return gx_ir_error(ir, err, err_len);
        rs_err rc = gx_regex_parse(ir, t, c->len, GX_RE_PLAIN, "", &node, err, err_len);
        if (rc == RS_OK)
            ir->rules[root].body = node;
        return rc;
    }
    default:
        return build_choice(ir, c, err, err_len);
    }
}

static void grammar_free(rs_grammar *g)
{
    if (g->cache != NULL)
        for (uint32_t i = 0; i < g->a.n_classes; i++)
            gm_entry_free(atomic_load(&g->cache[i]));
    free(g->cache);
    ga_free(&g->a);
    gx_ir_fini(&g->ir);
    free(g);
}

static rs_err precompute(rs_grammar *g)
{
    struct gs_engine e;
    if (gs_init(&e, g) != RS_OK)
        return RS_ENOMEM;
    rs_err rc = gs_start(&e) == 0 ? gm_precompute(g, &e) : RS_ENOMEM;
    gs_fini(&e);
    return rc;
}

rs_err rs_grammar_compile(const rs_grammar_vocab *gv, const struct rs_constraint *c,
                          const struct rs_grammar_limits *limits, unsigned flags,
                          rs_grammar **out, char *err, size_t err_len)
{
    struct rs_grammar_limits lim;
    if (limits != NULL)
        lim = *limits;
    else
        rs_grammar_limits_default(&lim);
    rs_err rc = check_constraint(c, &lim, err, err_len);
    if (rc != RS_OK)
        return rc;
    rs_grammar *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return gx_fail(err, err_len, RS_ENOMEM, "out of memory");
    atomic_init(&g->refs, 1);
    g->gv = gv;
    g->lim = lim;
    gx_ir_init(&g->ir, &g->lim);
    struct gn_nfa *nfa = NULL;
    rc = build_ir(&g->ir, c, err, err_len);
    if (rc == RS_OK)
        rc = gn_build(&g->ir, &g->lim, &nfa, err, err_len);
    if (rc == RS_OK)
        rc = ga_build(&g->ir, nfa, &g->lim, gv->max_len, &g->a, err, err_len);
    gn_free(&nfa);
    if (rc == RS_OK &&
        (g->cache = calloc((size_t)g->a.n_classes + 1, sizeof(*g->cache))) == NULL)
        rc = gx_fail(err, err_len, RS_ENOMEM, "out of memory compiling the grammar");
    if (rc == RS_OK && !(flags & RS_GRAMMAR_LAZY) && precompute(g) != RS_OK)
        rc = gx_fail(err, err_len, RS_ENOMEM, "out of memory filling the token-mask cache");
    if (rc != RS_OK) {
        grammar_free(g);
        return rc;
    }
    *out = g;
    return RS_OK;
}

rs_grammar *rs_grammar_retain(rs_grammar *g)
{
    atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
    return g;
}

void rs_grammar_release(rs_grammar **pg)
{
    rs_grammar *g = *pg;
    if (g == NULL)
        return;
    *pg = NULL;
    if (atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) == 1)
        grammar_free(g);
}

void rs_grammar_stats(const rs_grammar *g, struct rs_grammar_stats *s)
{
    s->n_rules = g->a.n_rules;
    s->n_states = g->a.n_states;
    s->n_classes = g->a.n_classes;
    s->n_cached = atomic_load_explicit(&((rs_grammar *)g)->n_cached, memory_order_relaxed);
    s->automaton_bytes = g->a.bytes;
    s->cache_bytes = atomic_load_explicit(&((rs_grammar *)g)->cache_bytes, memory_order_relaxed);
}

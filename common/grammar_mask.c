/* SPDX-License-Identifier: MIT */
/*
 * Token masks. The adaptive token-mask cache (as xgrammar's): for each cache
 * class of top states, one walk of the token trie with the stack below the top
 * frame left unknown (GS_OPEN) sorts every token into accepted (some path reads
 * all its bytes without leaving the top frame, or leaves it exactly at the
 * end), rejected (every path dies inside the frame) or uncertain (a path pops
 * the frame with bytes left). Entries are filled on first use or at compile
 * time and published with a compare-and-swap, so threads share them without a
 * lock. A mask is then: OR the accepted sets of the current stacks' tops, and
 * check only the uncertain tokens against each full stack, walking them in
 * trie order so shared prefixes are read once. Stacks with nothing below skip
 * the uncertain ones (nothing can follow the end). Stacks near the depth limit
 * fall back to a full trie walk, so the mask always equals a token-by-token check.
 */
#include <stdlib.h>
#include <string.h>

#include "common/grammar_impl.h"

/* The bytes leading to trie node i (a prefix of the first token below it). */
static const uint8_t *node_path(const rs_grammar_vocab *gv, uint32_t i, uint32_t *len)
{
    uint32_t l;
    const uint8_t *b = gv_rank_bytes(gv, gv->nodes[i].tok, &l);
    *len = gv->nodes[i].depth;
    return b;
}

static uint32_t subtree_rank_end(const rs_grammar_vocab *gv, const struct tt_node *nd)
{
    return nd->end < gv->n_nodes ? gv->nodes[nd->end].tok : gv->n_ranked;
}

struct walk {
    uint32_t *acc_bits; /* bitset of accepted tokens */
    uint32_t n_acc;
    uint32_t *unc;      /* uncertain items */
    size_t n_unc, cap_unc;
    uint32_t n_unc_tokens;
    uint8_t *popped;    /* per trie depth: the frame ended at or before it */
    uint32_t max_depth;
    int oom;
};

static void walk_accept(struct walk *w, const rs_grammar_vocab *gv, uint32_t r0, uint32_t n)
{
    for (uint32_t r = r0; r < r0 + n; r++) {
        uint32_t t = (uint32_t)gv->rank_tok[r];
        w->acc_bits[t >> 5] |= 1u << (t & 31);
        w->n_acc++;
    }
}

/* Item for node i: its own tokens, or (sub) every token below it. */
static void walk_uncertain(struct walk *w, const rs_grammar_vocab *gv, uint32_t i, int sub)
{
    const struct tt_node *nd = &gv->nodes[i];
    uint32_t n = sub ? subtree_rank_end(gv, nd) - nd->tok - nd->n_here : nd->n_here;
    if (n == 0)
        return;
    if (GX_PUSH(w->unc, w->n_unc, w->cap_unc, i | (sub ? GM_SUB : 0))) {
        w->oom = 1;
        return;
    }
    w->n_unc_tokens += n;
}

/* The trie walk from level base (one stack over GS_OPEN). */
static int cache_walk(const rs_grammar *g, struct gs_engine *e, uint32_t base, struct walk *w)
{
    const rs_grammar_vocab *gv = g->gv;
    struct gs_path path;
    if (gs_path_init(&path, e, base))
        return -1;
    w->popped[0] = 0;
    for (uint32_t i = 0; i < gv->n_nodes && !w->oom;) {
        const struct tt_node *nd = &gv->nodes[i];
        uint32_t d = nd->depth;
        const struct gs_level *lv;
        int r = gs_path_step(&path, d, nd->byte, &lv);
        if (r < 0 && !lv->overflow)
            return -1;
        if (r < 0) { /* too ambiguous to decide here: the full stacks decide */
            walk_uncertain(w, gv, i, 0);
            walk_uncertain(w, gv, i, 1);
            i = nd->end;
            continue;
        }
        if (lv->max_depth > w->max_depth)
            w->max_depth = lv->max_depth;
        w->popped[d] = w->popped[d - 1] | lv->popped;
        if (r > 0 || lv->popped)
            walk_accept(w, gv, nd->tok, nd->n_here);
        else if (w->popped[d - 1])
            walk_uncertain(w, gv, i, 0);
        if (r > 0) {
            i++;
            continue;
        }
        if (w->popped[d])
            walk_uncertain(w, gv, i, 1);
        i = nd->end;
    }
    return w->oom ? -1 : 0;
}

void gm_entry_free(struct gm_entry *x)
{
    if (x == NULL)
        return;
    free(x->acc);
    free(x->unc);
    free(x->unc_lcp);
    free(x);
}

/* Packs a walk's result into an entry (bitset or id list, whichever is smaller). */
static struct gm_entry *entry_pack(const rs_grammar *g, const struct walk *w)
{
    const rs_grammar_vocab *gv = g->gv;
    size_t n_words = rs_grammar_mask_words(gv->n_tokens);
    struct gm_entry *x = calloc(1, sizeof(*x));
    if (x == NULL)
        return NULL;
    x->n_acc = w->n_acc;
    x->n_unc = (uint32_t)w->n_unc;
    x->n_unc_tokens = w->n_unc_tokens;
    x->depth = w->max_depth + g->a.push_bound;
    x->acc_bitset = w->n_acc > n_words;
    size_t acc_len = x->acc_bitset ? n_words : w->n_acc;
    x->acc = malloc((acc_len + 1) * sizeof(uint32_t));
    x->unc = malloc((w->n_unc + 1) * sizeof(uint32_t));
    x->unc_lcp = malloc((w->n_unc + 1) * sizeof(uint16_t));
    if (x->acc == NULL || x->unc == NULL || x->unc_lcp == NULL) {
        gm_entry_free(x);
        return NULL;
    }
    if (x->acc_bitset) {
        memcpy(x->acc, w->acc_bits, n_words * sizeof(uint32_t));
    } else {
        size_t k = 0;
        for (size_t wi = 0; wi < n_words && k < acc_len; wi++)
            for (uint32_t bits = w->acc_bits[wi]; bits; bits &= bits - 1)
                x->acc[k++] = (uint32_t)(wi * 32 + (uint32_t)__builtin_ctz(bits));
    }
    for (size_t k = 0; k < w->n_unc; k++) {
        x->unc[k] = w->unc[k];
        uint32_t la, lb, l = 0;
        const uint8_t *b = node_path(gv, w->unc[k] & ~GM_SUB, &lb);
        if (k > 0) {
            const uint8_t *a = node_path(gv, w->unc[k - 1] & ~GM_SUB, &la);
            while (l < la && l < lb && a[l] == b[l])
                l++;
        }
        x->unc_lcp[k] = (uint16_t)l;
    }
    x->bytes = sizeof(*x) + (acc_len + 1) * sizeof(uint32_t) + (w->n_unc + 1) * 6;
    return x;
}

/* Computes the entry of class cls in engine e (levels above the current ones). */
static struct gm_entry *entry_compute(const rs_grammar *g, struct gs_engine *e, uint32_t cls)
{
    const rs_grammar_vocab *gv = g->gv;
    struct walk w = {0};
    struct gm_entry *x = NULL;
    w.acc_bits = calloc(rs_grammar_mask_words(gv->n_tokens) + 1, sizeof(uint32_t));
    w.popped = calloc((size_t)gv->max_len + 2, 1);
    struct gs_pair p = {g->a.class_rep[cls], GS_OPEN};
    int base = (w.acc_bits && w.popped) ? gs_push(e, &p, 1) : -1;
    if (base >= 0) {
        w.max_depth = 1;
        if (cache_walk(g, e, (uint32_t)base, &w) == 0)
            x = entry_pack(g, &w);
        gs_drop(e, (uint32_t)base);
    }
    free(w.acc_bits);
    free(w.unc);
    free(w.popped);
    return x;
}

const struct gm_entry *gm_entry_get(const rs_grammar *g, struct gs_engine *e, uint32_t cls,
                                    int *owned)
{
    rs_grammar *mg = (rs_grammar *)g; /* the cache is the one mutable part, under atomics */
    *owned = 0;
    struct gm_entry *x = atomic_load_explicit(&mg->cache[cls], memory_order_acquire);
    if (x != NULL)
        return x;
    x = entry_compute(g, e, cls);
    if (x == NULL)
        return NULL;
    size_t used = atomic_load_explicit(&mg->cache_bytes, memory_order_relaxed);
    if (used + x->bytes > g->lim.max_cache_memory) {
        *owned = 1;
        return x;
    }
    struct gm_entry *expected = NULL;
    if (atomic_compare_exchange_strong_explicit(&mg->cache[cls], &expected, x,
                                                memory_order_acq_rel, memory_order_acquire)) {
        atomic_fetch_add_explicit(&mg->cache_bytes, x->bytes, memory_order_relaxed);
        atomic_fetch_add_explicit(&mg->n_cached, 1, memory_order_relaxed);
        return x;
    }
    gm_entry_free(x);
    return expected;
}

rs_err gm_precompute(const rs_grammar *g, struct gs_engine *e)
{
    for (uint32_t c = 0; c < g->a.n_classes; c++) {
        int owned;
        const struct gm_entry *x = gm_entry_get(g, e, c, &owned);
        if (x == NULL)
            return RS_ENOMEM;
        if (owned) {
            gm_entry_free((struct gm_entry *)x);
            break; /* over the cache budget: the rest fills (or not) at run time */
        }
    }
    return RS_OK;
}

/* --- mask rows ------------------------------------------------------------------------- */

static inline void bit_set(uint32_t *row, uint32_t t)
{
    row[t >> 5] |= 1u << (t & 31);
}

static inline int bit_get(const uint32_t *row, uint32_t t)
{
    return (row[t >> 5] >> (t & 31)) & 1;
}

static void or_accepted(uint32_t *row, const struct gm_entry *x, size_t n_words)
{
    if (x->acc_bitset) {
        for (size_t i = 0; i < n_words; i++)
            row[i] |= x->acc[i];
    } else {
        for (uint32_t i = 0; i < x->n_acc; i++)
            bit_set(row, x->acc[i]);
    }
}

static void set_node_tokens(const rs_grammar_vocab *gv, const struct tt_node *nd, uint32_t *row)
{
    for (uint32_t j = 0; j < nd->n_here; j++)
        bit_set(row, (uint32_t)gv->rank_tok[nd->tok + j]);
}

/*
 * Walks trie nodes [i, end) (whole subtrees, in preorder) from the levels of
 * their parents' paths above base, allowing every token some stack reads to
 * its end, skipping each subtree whose prefix no stack can read.
 */
static int walk_nodes(struct gs_path *path, const rs_grammar_vocab *gv, uint32_t i, uint32_t end,
                      uint32_t *row)
{
    while (i < end) {
        const struct tt_node *nd = &gv->nodes[i];
        const struct gs_level *lv;
        int r = gs_path_step(path, nd->depth, nd->byte, &lv);
        if (r < 0 && !lv->overflow)
            return -1;
        if (r > 0 || (r == 0 && lv->end))
            set_node_tokens(gv, nd, row);
        i = r > 0 ? i + 1 : nd->end;
    }
    return 0;
}

/*
 * Checks the uncertain items of x against stack p, in trie order: the levels
 * of the common prefix with the previous item are kept, items under a prefix
 * already found impossible are skipped, subtree items are walked with pruning.
 */
static int check_uncertain(rs_grammar_matcher *m, struct gs_pair p, const struct gm_entry *x,
                           uint32_t *row)
{
    const rs_grammar_vocab *gv = m->g->gv;
    struct gs_engine *e = &m->e;
    struct gs_path path;
    int base = gs_push(e, &p, 1);
    if (base < 0 || gs_path_init(&path, e, (uint32_t)base))
        return -1;
    uint32_t valid = 0, dead_at = UINT32_MAX, shared = 0;
    int rc = 0;
    for (uint32_t k = 0; k < x->n_unc && rc == 0; k++) {
        shared = k == 0 ? 0 : (x->unc_lcp[k] < shared ? x->unc_lcp[k] : shared);
        uint32_t node = x->unc[k] & ~GM_SUB, D;
        int sub = (x->unc[k] & GM_SUB) != 0;
        const struct tt_node *nd = &gv->nodes[node];
        if (dead_at <= shared || (!sub && bit_get(row, (uint32_t)gv->rank_tok[nd->tok])))
            continue;
        dead_at = UINT32_MAX;
        if (valid > shared)
            valid = shared;
        const uint8_t *bytes = node_path(gv, node, &D);
        const struct gs_level *lv = NULL;
        int r = 1;
        for (uint32_t d = valid + 1; d <= D; d++) {
            r = gs_path_step(&path, d, bytes[d - 1], &lv);
            if (r < 0 && !lv->overflow)
                rc = -1;
            if (r < 0 || (r == 0 && !lv->end)) {
                dead_at = d;
                break;
            }
            valid = d;
        }
        shared = D;
        if (dead_at != UINT32_MAX || rc != 0)
            continue;
        if (lv == NULL) { /* the whole path was shared: re-read its last depth */
            r = D == 0 ? 1 : gs_path_step(&path, D, bytes[D - 1], &lv);
            if (r < 0)
                continue;
        }
        if (!sub && (r > 0 || lv->end))
            set_node_tokens(gv, nd, row);
        else if (sub && r > 0)
            rc = walk_nodes(&path, gv, node + 1, nd->end, row);
    }
    gs_drop(e, (uint32_t)base);
    return rc;
}

/* Every token against stack p through the trie (stacks too deep for the cache's bound). */
static int check_all(rs_grammar_matcher *m, struct gs_pair p, uint32_t *row)
{
    const rs_grammar_vocab *gv = m->g->gv;
    struct gs_engine *e = &m->e;
    struct gs_path path;
    int base = gs_push(e, &p, 1);
    if (base < 0 || gs_path_init(&path, e, (uint32_t)base))
        return -1;
    int rc = walk_nodes(&path, gv, 0, gv->n_nodes, row);
    gs_drop(e, (uint32_t)base);
    return rc;
}

/* Adds what stack i of level 0 allows. */
static int fill_stack(rs_grammar_matcher *m, uint32_t i, uint32_t *row, size_t n_words)
{
    const rs_grammar *g = m->g;
    struct gs_pair p = m->e.pairs[m->e.lv[0].off + i];
    uint32_t cls = g->a.states[p.state].cls;
    int owned;
    const struct gm_entry *x = gm_entry_get(g, &m->e, cls, &owned);
    if (x == NULL)
        return -1;
    int rc = 0;
    if (gs_depth(&m->e, p) - 1 + x->depth > g->lim.max_stack_depth) {
        rc = check_all(m, p, row);
    } else {
        if (m->cls_stamp[cls] != m->stamp) {
            m->cls_stamp[cls] = m->stamp;
            or_accepted(row, x, n_words);
        }
        if (p.parent != GS_BOTTOM && x->n_unc > 0)
            rc = check_uncertain(m, p, x, row);
    }
    if (owned)
        gm_entry_free((struct gm_entry *)x);
    return rc;
}

static unsigned mask_flags(const rs_grammar_vocab *gv, uint32_t *row, size_t n_words, int end)
{
    size_t any = 0;
    for (size_t i = 0; i < n_words; i++)
        any |= row[i];
    unsigned f = 0;
    if (end) {
        f |= RS_GRAMMAR_MASK_END;
        if (!any)
            f |= RS_GRAMMAR_MASK_ONLY_END;
        for (uint32_t i = 0; i < gv->n_eog; i++)
            bit_set(row, (uint32_t)gv->eog[i]);
    } else if (!any) {
        f |= RS_GRAMMAR_MASK_DEAD;
    }
    return f;
}

rs_err rs_grammar_matcher_fill_mask(rs_grammar_matcher *m, uint32_t *row, size_t n_words,
                                    unsigned *flags)
{
    const rs_grammar_vocab *gv = m->g->gv;
    if (n_words < rs_grammar_mask_words(gv->n_tokens))
        return RS_EINVAL;
    memset(row, 0, n_words * sizeof(uint32_t));
    unsigned f;
    if (m->terminated) {
        f = mask_flags(gv, row, n_words, 1);
    } else {
        if (++m->stamp == 0) {
            memset(m->cls_stamp, 0, ((size_t)m->g->a.n_classes + 1) * sizeof(uint32_t));
            m->stamp = 1;
        }
        uint32_t n = m->e.lv[0].n;
        for (uint32_t i = 0; i < n; i++)
            if (fill_stack(m, i, row, n_words))
                return RS_ENOMEM;
        f = mask_flags(gv, row, n_words, m->e.lv[0].end);
    }
    if (flags != NULL)
        *flags = f;
    return RS_OK;
}

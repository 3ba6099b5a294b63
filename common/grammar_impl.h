/* SPDX-License-Identifier: MIT */
/*
 * Inside of the grammar engine, shared by its files:
 *   front ends (grammar_gbnf.c, grammar_regex.c, grammar_schema.c, grammar_json.c,
 *   grammar_number.c) build the expression IR (grammar_ir.c);
 *   grammar_nfa.c turns each kept rule into a byte NFA (other rules inlined);
 *   grammar_dfa.c makes per-rule DFAs whose edges are byte classes and rule calls,
 *   trims them, refuses left recursion and groups states into cache classes;
 *   grammar_stack.c is the pushdown automaton (stacks of DFA states);
 *   grammar_mask.c fills the token-mask cache and mask rows;
 *   token_trie.c is the vocab's trie.
 */
#ifndef RS_GRAMMAR_IMPL_H
#define RS_GRAMMAR_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/grammar.h"

#define GX_NONE UINT32_MAX
#define GX_INF UINT32_MAX /* repetition without an upper bound */
#define GX_MAX_CP 0x10FFFFu

/* --- growable arrays ------------------------------------------------------------------------ */

/* Grows *p (elements of esz bytes, *cap of them) to hold need; 0 ok, -1 out of memory. */
int gx_reserve(void **p, size_t *cap, size_t need, size_t esz);

#define GX_PUSH(arr, n, cap, val)                                                                  \
    (((n) < (cap) || gx_reserve((void **)&(arr), &(cap), (n) + 1, sizeof(*(arr))) == 0)            \
         ? ((arr)[(n)++] = (val), 0)                                                               \
         : -1)

/* --- expression IR ---------------------------------------------------------------------------- */

enum gx_kind {
    GX_EMPTY = 0, /* matches "" */
    GX_BYTES,     /* a = offset in bytes, b = length: these bytes */
    GX_CLASS,     /* a = offset in ranges (lo, hi pairs), b = pairs: one code point in them */
    GX_REF,       /* a = rule */
    GX_SEQ,       /* a = offset in kids, b = count */
    GX_ALT,       /* a = offset in kids, b = count */
    GX_REP,       /* a = child, b = min, c = max (GX_INF: none) */
};

struct gx_node {
    uint8_t kind;
    uint32_t a, b, c;
};

struct gx_rule {
    uint32_t name_off, name_len; /* in names */
    uint32_t body;               /* node, GX_NONE until defined */
    uint32_t line, col;          /* GBNF: where defined (or first used); 0 when not from text */
    uint8_t noinline;            /* keep as its own automaton (hoisted repetitions) */
    uint32_t origin_off, origin_len; /* in names: where it came from (JSON pointer), or empty */
};

struct gx_ir {
    struct gx_node *nodes;
    size_t n_nodes, cap_nodes;
    uint8_t *bytes;
    size_t n_bytes, cap_bytes;
    uint32_t *ranges; /* pairs */
    size_t n_ranges, cap_ranges;
    uint32_t *kids;
    size_t n_kids, cap_kids;
    struct gx_rule *rules;
    size_t n_rules, cap_rules;
    char *names;
    size_t n_names, cap_names;
    const struct rs_grammar_limits *lim;
    rs_err err; /* sticky: RS_ENOMEM or RS_ERANGE (too many rules or nodes) */
};

void gx_ir_init(struct gx_ir *ir, const struct rs_grammar_limits *lim);
void gx_ir_fini(struct gx_ir *ir);

/* Node builders; each returns the node, or GX_NONE with ir->err set. */
uint32_t gx_empty(struct gx_ir *ir);
uint32_t gx_bytes(struct gx_ir *ir, const void *s, size_t n);
uint32_t gx_str(struct gx_ir *ir, const char *s); /* NUL-terminated convenience */
/* ranges: n (lo, hi) code point pairs in any order, may overlap; negate: the complement
 * within U+0000..U+10FFFF. Surrogates are never included. */
uint32_t gx_class(struct gx_ir *ir, const uint32_t *ranges, size_t n, int negate);
uint32_t gx_ref(struct gx_ir *ir, uint32_t rule);
uint32_t gx_seq(struct gx_ir *ir, const uint32_t *kids, size_t n);
uint32_t gx_alt(struct gx_ir *ir, const uint32_t *kids, size_t n);
uint32_t gx_seq2(struct gx_ir *ir, uint32_t a, uint32_t b);
uint32_t gx_seq3(struct gx_ir *ir, uint32_t a, uint32_t b, uint32_t c);
uint32_t gx_alt2(struct gx_ir *ir, uint32_t a, uint32_t b);
uint32_t gx_rep(struct gx_ir *ir, uint32_t child, uint32_t min, uint32_t max);

/* The rule named name[0..len) (created undefined when new), or GX_NONE. */
uint32_t gx_rule_get(struct gx_ir *ir, const char *name, size_t len);
/* A new rule named "<base>-<n>" unique in ir, or GX_NONE. */
uint32_t gx_rule_fresh(struct gx_ir *ir, const char *base);
const char *gx_rule_name(const struct gx_ir *ir, uint32_t rule, size_t *len);
/* Records where rule came from (e.g. a JSON pointer), for error messages. */
void gx_rule_set_origin(struct gx_ir *ir, uint32_t rule, const char *s, size_t len);
/* "line L, column C", the origin, or the rule name: where to point an error about rule. */
void gx_rule_where(const struct gx_ir *ir, uint32_t rule, char *out, size_t cap);

/* A growable list of node ids, for building sequences and alternatives. */
struct gx_list {
    uint32_t *v;
    size_t n, cap;
};
int gx_list_push(struct gx_ir *ir, struct gx_list *l, uint32_t node); /* 0, or -1 (ir->err) */
void gx_list_free(struct gx_list *l);

/* Builds an error message "<prefix>: <fmt>" into err; returns rc. */
rs_err gx_fail(char *err, size_t err_len, rs_err rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Message for a sticky ir->err. */
rs_err gx_ir_error(const struct gx_ir *ir, char *err, size_t err_len);

/* --- front ends: each defines rule "root" in ir ---------------------------------------------- */

rs_err gx_parse_gbnf(struct gx_ir *ir, const char *text, size_t len, char *err, size_t err_len);
rs_err gx_schema_build(struct gx_ir *ir, const char *text, size_t len, char *err,
                       size_t err_len);
rs_err gx_json_object_build(struct gx_ir *ir, char *err, size_t err_len);

/* Regex flavours of gx_regex_parse. */
#define GX_RE_PLAIN 0      /* the string itself */
#define GX_RE_JSON_BODY 1  /* the inside of a JSON string literal whose value matches */

/*
 * Parses re[0..len) into a node (see common/README.md for the subset). Errors
 * name the byte offset ("offset 4: ..."); `where` (may be "") is prepended, e.g.
 * "/properties/id/pattern".
 */
rs_err gx_regex_parse(struct gx_ir *ir, const char *re, size_t len, int flavour,
                      const char *where, uint32_t *out, char *err, size_t err_len);

/* JSON building blocks (grammar_json.c), created once per ir on first use. */
uint32_t gx_json_ws(struct gx_ir *ir);           /* bounded insignificant whitespace */
uint32_t gx_json_string(struct gx_ir *ir);       /* any JSON string literal */
uint32_t gx_json_char(struct gx_ir *ir);         /* one character inside a string literal */
uint32_t gx_json_value_rule(struct gx_ir *ir);   /* rule: any JSON value followed by ws */
uint32_t gx_json_object_rule(struct gx_ir *ir);  /* rule: any JSON object (no trailing ws) */
uint32_t gx_json_number(struct gx_ir *ir);       /* any JSON number */
uint32_t gx_json_integer(struct gx_ir *ir);      /* any integer */
/* A JSON string literal whose value is s[0..n) (escaped as JSON requires; never "\/"). */
uint32_t gx_json_literal_string(struct gx_ir *ir, const char *s, size_t n);
/* The JSON spelling of code point cp inside a string literal (raw UTF-8, or an escape for
 * '"', '\\' and controls); returns its bytes (1..6). */
size_t gx_json_escape(uint32_t cp, char out[8]);
/* The code point set ranges[0..n) (pairs) as one JSON string character: raw where JSON allows,
 * escaped otherwise. */
uint32_t gx_json_class_char(struct gx_ir *ir, const uint32_t *ranges, size_t n);

/*
 * Decimal numbers in a range (grammar_number.c). lo/hi: decimal text of the
 * bounds ("-12.5"), or NULL for none; *_excl: exclusive. integer: integers only.
 * RS_EINVAL with a message when the range is empty.
 */
rs_err gx_number_range(struct gx_ir *ir, const char *lo, int lo_excl, const char *hi,
                       int hi_excl, int integer, uint32_t *out, char *err, size_t err_len);

/* --- automaton ------------------------------------------------------------------------------- */

struct ga_call {
    uint32_t rule; /* callee (index into rule_start) */
    uint32_t ret;  /* state of the caller after the callee returns */
};

struct ga_state {
    uint32_t rule;      /* rule this state belongs to */
    uint32_t call_off;  /* calls[call_off .. call_off + n_calls) */
    uint16_t n_calls;
    uint8_t final;      /* the rule may end here */
    uint8_t has_bytes;  /* some byte edge leaves it */
    uint32_t cls;       /* cache class */
};

struct ga_auto {
    uint32_t n_states, n_rules, n_bclass;
    uint8_t bclass[256];    /* byte -> byte class */
    uint32_t *next;         /* [n_states][n_bclass]: next state or GX_NONE (see ga_next) */
    struct ga_state *states;
    struct ga_call *calls;
    size_t n_calls;
    uint32_t *rule_start;   /* per automaton rule */
    uint32_t *rule_name;    /* per automaton rule: the IR rule it came from */
    uint8_t *rule_nullable;
    uint32_t root;          /* automaton rule of "root" */
    uint32_t push_bound;    /* frames one closure may push beyond the top, at most */
    uint32_t n_classes;
    uint32_t *class_rep;    /* per class: one state in it */
    size_t bytes;           /* table memory */
};

/* Kept rules -> byte NFA (grammar_nfa.c). Edge kinds: */
enum { GN_EPS, GN_BYTE, GN_CALL };

struct gn_edge {
    uint32_t to, next, rule; /* rule: callee (kept index) of a GN_CALL edge */
    uint8_t kind, lo, hi;    /* GN_BYTE: bytes lo..hi */
};

struct gn_nfa {
    uint32_t n_states, cap_states;
    uint32_t *first; /* per state: first edge, GX_NONE none */
    struct gn_edge *edges;
    size_t n_edges, cap_edges;
    uint32_t n_kept;
    uint32_t *kept_ir;  /* kept rule -> IR rule */
    uint32_t *ir_kept;  /* IR rule -> kept rule, GX_NONE when inlined or unreachable */
    uint32_t *kstart, *kend;
    uint32_t max_states;
};

/* May add rules to ir (large repetitions hoisted into rules of their own). */
rs_err gn_build(struct gx_ir *ir, const struct rs_grammar_limits *lim, struct gn_nfa **out,
                char *err, size_t err_len);
void gn_free(struct gn_nfa **n);

/* NFA -> automaton (grammar_dfa.c). max_token_len bounds the cache class refinement. */
rs_err ga_build(const struct gx_ir *ir, const struct gn_nfa *nfa,
                const struct rs_grammar_limits *lim, uint32_t max_token_len, struct ga_auto *a,
                char *err, size_t err_len);
void ga_free(struct ga_auto *a);

/*
 * After ga_build, next[] entries are (state << 1) | plain, plain meaning the
 * state has no calls and cannot end (a byte there needs no closure), so the
 * hot trie walk reads one word per byte; GX_NONE stays GX_NONE.
 */
static inline uint32_t ga_next_raw(const struct ga_auto *a, uint32_t s, uint8_t byte)
{
    return a->next[(size_t)s * a->n_bclass + a->bclass[byte]];
}

static inline uint32_t ga_next(const struct ga_auto *a, uint32_t s, uint8_t byte)
{
    uint32_t v = ga_next_raw(a, s, byte);
    return v == GX_NONE ? GX_NONE : v >> 1;
}

/* --- vocab trie (token_trie.c) ------------------------------------------------------------- */

struct tt_node {
    uint32_t end;       /* index of the first node after this node's subtree */
    uint32_t tok;       /* first rank (index into rank_tok) of tokens at or below this node */
    uint16_t n_here;    /* tokens whose bytes end exactly here */
    uint16_t depth;     /* bytes from the root, >= 1 */
    uint8_t byte;
};

struct rs_grammar_vocab {
    const rs_vocab *v;
    uint32_t n_tokens;         /* vocab size */
    uint32_t n_nodes;
    struct tt_node *nodes;     /* preorder; node 0 is the first child of the root */
    uint32_t n_ranked;         /* tokens in the trie */
    int32_t *rank_tok;         /* rank -> token id, bytes in sorted order */
    uint32_t *rank_off;        /* rank -> offset of its bytes in blob */
    uint16_t *rank_len;        /* rank -> length */
    uint16_t *rank_lcp;        /* rank -> common prefix with rank - 1 (0 for rank 0) */
    uint8_t *blob;
    int32_t *tok_rank;         /* token -> rank, or -1 when never allowed */
    int32_t *eog;              /* end-of-generation tokens */
    uint32_t n_eog;
    uint32_t max_len;          /* longest piece */
};

/* --- compiled grammar --------------------------------------------------------------------- */

/* Uncertain item: a trie node, and whether it stands for the tokens ending there or for
 * every token below it. */
#define GM_SUB 0x80000000u

/* One cache class's precomputed tokens. */
struct gm_entry {
    uint32_t n_acc;           /* tokens accepted whatever is below the top frame */
    uint32_t n_unc;           /* uncertain items (trie node | GM_SUB), in trie order */
    uint32_t n_unc_tokens;    /* tokens they cover */
    uint32_t depth;           /* frames above the stack's parent its walk reached, at most */
    uint8_t acc_bitset;       /* acc is a bitset of mask words, else n_acc token ids */
    uint32_t *acc;
    uint32_t *unc;
    uint16_t *unc_lcp;        /* common prefix of the item's path with the previous item's */
    size_t bytes;
};

struct rs_grammar {
    atomic_int refs;
    const rs_grammar_vocab *gv;
    struct rs_grammar_limits lim;
    struct gx_ir ir;               /* kept for rs_grammar_print */
    struct ga_auto a;
    _Atomic(struct gm_entry *) *cache; /* per class */
    atomic_size_t cache_bytes;
    atomic_uint n_cached;
};

/* --- pushdown automaton over stacks (grammar_stack.c) -------------------------------------- */

/* A parse stack: the top frame's state plus the interned rest. */
struct gs_pair {
    uint32_t state;
    uint32_t parent; /* node, GS_BOTTOM (nothing below) or GS_OPEN (unknown: cache walks) */
};
#define GS_BOTTOM UINT32_MAX
#define GS_OPEN (UINT32_MAX - 1)

struct gs_node {
    uint32_t state;   /* the frame's return state */
    uint32_t parent;
    uint32_t depth;   /* frames in this node's chain */
};

/* One set of live stacks: pairs[off .. off + n) plus what closure found. */
struct gs_level {
    uint32_t off, n;
    uint32_t node_mark;  /* nodes before computing this level */
    uint8_t end;         /* the whole grammar ended here (GS_BOTTOM popped) */
    uint8_t popped;      /* the frame over GS_OPEN ended here */
    uint8_t overflow;    /* more than max_stacks pairs: the level is unusable */
    uint32_t max_depth;  /* deepest stack of the level */
};

struct gs_engine {
    const struct rs_grammar *g;
    struct gs_node *nodes;
    size_t n_nodes, cap_nodes;
    uint32_t *table; /* intern hash: node index + 1, 0 empty */
    size_t table_mask;
    struct gs_pair *pairs;
    size_t n_pairs, cap_pairs;
    struct gs_level *lv;
    size_t cap_lv;
    uint32_t n_levels; /* levels 0 .. n_levels - 1 are valid */
    struct gs_pair *work; /* closure worklist */
    size_t cap_work;
    uint32_t *path_state; /* gs_path: per depth, the top state while the path is plain */
    uint32_t *path_level; /* gs_path: per depth, the engine level, GX_NONE while plain */
    size_t cap_path;
    uint64_t *seen;       /* closure dedup set (keys + 1), seen_mask + 1 slots */
    size_t seen_mask;
    uint32_t *seen_used;
    size_t n_seen_used, cap_seen_used;
    rs_err err;           /* sticky RS_ENOMEM */
};

rs_err gs_init(struct gs_engine *e, const struct rs_grammar *g);
void gs_fini(struct gs_engine *e);

static inline uint32_t gs_depth(const struct gs_engine *e, struct gs_pair p)
{
    return (p.parent >= GS_OPEN ? 0 : e->nodes[p.parent].depth) + 1;
}

/* Forgets every level and node. */
void gs_reset(struct gs_engine *e);
/* Level 0 := closure of the grammar's start (after a reset). Returns 0 or -1. */
int gs_start(struct gs_engine *e);
/* A new top level holding p[0..n) as they are (already closed; their nodes live in e).
 * Returns its index, or -1. */
int gs_push(struct gs_engine *e, const struct gs_pair *p, uint32_t n);
/*
 * Level d+1 := level d advanced over byte b and closed, dropping nodes and
 * pairs of levels above d first. Returns the pairs in the new level (0: dead,
 * though end/popped may still be set), or -1 on overflow/out of memory.
 */
int gs_step(struct gs_engine *e, uint32_t d, uint8_t b);
/* Forgets everything above level d (their nodes included). */
void gs_truncate(struct gs_engine *e, uint32_t d);
/* Forgets level d and everything above it. */
void gs_drop(struct gs_engine *e, uint32_t d);
/*
 * Makes level d the only level (level 0), dropping nodes no stack uses once
 * they outnumber the used ones. Returns 0 or -1.
 */
int gs_commit(struct gs_engine *e, uint32_t d);

/*
 * Byte paths from one stack (trie walks): while every byte stays inside the top
 * rule on a state with no calls and no end, the path is one table lookup per
 * byte; the level machinery takes over from the first byte that needs a
 * closure, from a level holding the stack the path had reached.
 */
struct gs_path {
    struct gs_engine *e;
    uint32_t base;         /* level holding the one start stack */
    uint32_t parent;       /* its rest */
    struct gs_level plain; /* what a plain depth reports: one stack, no flags */
};

/* Starts a path walk from level base (exactly one stack). 0, or -1 (no memory). */
int gs_path_init(struct gs_path *w, struct gs_engine *e, uint32_t base);
/* gs_path_step once a byte needs the levels (grammar_stack.c). */
int gs_path_step_levels(struct gs_path *w, uint32_t d, uint8_t b, const struct gs_level **lv);

/*
 * Depth d (>= 1) := depth d - 1 of the current path (valid) advanced over b.
 * Returns the stacks alive (0: dead) and sets *lv to the depth's level (flags
 * end, popped, overflow, max_depth); -1 on overflow (*lv says) or no memory.
 */
static inline int gs_path_step(struct gs_path *w, uint32_t d, uint8_t b,
                               const struct gs_level **lv)
{
    struct gs_engine *e = w->e;
    if (e->path_level[d - 1] == GX_NONE) {
        uint32_t v = ga_next_raw(&e->g->a, e->path_state[d - 1], b);
        if (v == GX_NONE || (v & 1)) { /* dead, or a plain byte: no closure needed */
            *lv = &w->plain;
            e->path_level[d] = GX_NONE;
            e->path_state[d] = v >> 1;
            w->plain.n = v != GX_NONE;
            return (int)w->plain.n;
        }
    }
    return gs_path_step_levels(w, d, b, lv);
}

/* --- matcher (grammar_match.c) ----------------------------------------------------------- */

struct rs_grammar_matcher {
    rs_grammar *g;
    struct gs_engine e;  /* level 0: the current stacks */
    uint8_t terminated;  /* an end-of-generation token was accepted */
    uint32_t *cls_stamp; /* per cache class: mask fill generation that ORed it */
    uint32_t stamp;
};

/* --- token-mask cache (grammar_mask.c) ------------------------------------------------------ */

/* The entry of class cls, filling it (and publishing it) when absent. NULL: out of memory.
 * *owned set when the entry could not be cached (over the budget): free it with gm_entry_free. */
const struct gm_entry *gm_entry_get(const rs_grammar *g, struct gs_engine *scratch, uint32_t cls,
                                    int *owned);
void gm_entry_free(struct gm_entry *e);
/* Fills every class's entry (compile without RS_GRAMMAR_LAZY). */
rs_err gm_precompute(const rs_grammar *g, struct gs_engine *scratch);

/* Token pieces in trie order. */
static inline const uint8_t *gv_rank_bytes(const rs_grammar_vocab *gv, uint32_t rank,
                                           uint32_t *len)
{
    *len = gv->rank_len[rank];
    return gv->blob + gv->rank_off[rank];
}

#endif

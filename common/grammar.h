/* SPDX-License-Identifier: MIT */
/*
 * Structured output: a constraint (GBNF grammar, JSON schema, "any JSON
 * object", regular expression, choice among literal strings) compiled against
 * the model's vocab into an immutable grammar, a per-sequence matcher (a
 * pushdown automaton over bytes) and the per-step token mask: one bit per
 * token in 32-bit words, bit (t & 31) of word (t >> 5) allowing token t (the
 * layout xgrammar and vLLM use). Every malformed input is refused by
 * rs_grammar_compile with a message naming the position (line:column, byte
 * offset or JSON pointer); nothing fails at step time except the ambiguity
 * cap (rs_grammar_matcher_accept returning RS_ERANGE) and out of memory.
 *
 * The matcher state is a pure function of (constraint, tokens accepted so
 * far): a process that restarts rebuilds it with rs_grammar_matcher_replay.
 * Leaves out: logit arithmetic (mask_apply.h), the wire and shared-memory
 * layout of masks, and which process owns matchers (the pipeline decides).
 * Design and limits: common/README.md, "Structured output".
 */
#ifndef RS_GRAMMAR_H
#define RS_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/vocab.h"

/* Words of a mask row for n_vocab tokens. */
static inline size_t rs_grammar_mask_words(uint32_t n_vocab)
{
    return ((size_t)n_vocab + 31) / 32;
}

/* --- the vocab as the grammar engine sees it ----------------------------------------------- */

typedef struct rs_grammar_vocab rs_grammar_vocab;

/*
 * The token trie of v: every token's decoded bytes (rs_vocab_token_piece with
 * special = 0: SentencePiece U+2581 is a space, <0xXX> tokens their byte,
 * byte-level BPE text mapped back to bytes), sorted, as a preorder trie.
 * Control, unknown and unused tokens and tokens that decode to nothing are
 * never allowed; the end-of-generation tokens (rs_vocab_is_eog) are allowed
 * exactly when the grammar can end. Borrows v until destroyed. Immutable: share
 * it between threads. RS_ENOMEM.
 */
rs_err rs_grammar_vocab_create(const rs_vocab *v, rs_grammar_vocab **out);
void rs_grammar_vocab_destroy(rs_grammar_vocab **gv);
uint32_t rs_grammar_vocab_n_tokens(const rs_grammar_vocab *gv);

/* --- constraints ---------------------------------------------------------------------------- */

enum rs_constraint_kind {
    RS_CONSTRAINT_GBNF = 1,        /* text: llama.cpp GBNF, start rule "root" */
    RS_CONSTRAINT_JSON_SCHEMA = 2, /* text: a JSON schema (JSON text) */
    RS_CONSTRAINT_JSON_OBJECT = 3, /* any JSON object; text unused */
    RS_CONSTRAINT_REGEX = 4,       /* text: the output must match it entirely */
    RS_CONSTRAINT_CHOICE = 5,      /* the output is exactly one of choices[] */
};

struct rs_constraint {
    enum rs_constraint_kind kind;
    const char *text; /* len bytes, not NUL-terminated (GBNF, JSON schema, regex) */
    size_t len;
    const char *const *choices; /* n_choices strings of choice_lens[i] bytes (CHOICE) */
    const size_t *choice_lens;
    uint32_t n_choices;
};

/* Bounds on what compiling may use; rs_grammar_limits_default fills the defaults in brackets. */
struct rs_grammar_limits {
    size_t max_text;           /* [1 MiB] bytes of text, or of all choices together */
    uint32_t max_choices;      /* [4096] */
    uint32_t max_rules;        /* [8192] rules after conversion */
    uint32_t max_nesting;      /* [64] schema nesting; parentheses and groups nest 4x this */
    uint32_t max_repeat;       /* [10000] n in {m,n}, minItems/maxItems, minLength/maxLength */
    uint32_t max_states;       /* [262144] automaton states over all rules */
    size_t max_memory;         /* [256 MiB] the automaton's tables */
    size_t max_cache_memory;   /* [256 MiB] the token-mask cache; beyond it masks are computed
                                  without caching (slower, same bits) */
    uint32_t max_stack_depth;  /* [256] nested rule frames at run time; deeper paths are dead */
    uint32_t max_stacks;       /* [4096] parse stacks alive at once (ambiguity cap) */
};

void rs_grammar_limits_default(struct rs_grammar_limits *l);

/* 64-bit hash of the constraint's content (kind and bytes); equal constraints, equal hash. */
uint64_t rs_constraint_hash(const struct rs_constraint *c);

/* --- compiled grammars ------------------------------------------------------------------------ */

typedef struct rs_grammar rs_grammar;

/* rs_grammar_compile flags */
#define RS_GRAMMAR_LAZY 0x1u /* fill the token-mask cache on first use instead of at compile */

/*
 * Compiles c against gv. limits NULL: defaults. On success *out owns one
 * reference (rs_grammar_release). Errors, each with a message in err naming
 * the position: RS_EINVAL (malformed: "line 3, column 7: ...", "offset 12:
 * ...", "/properties/age/minimum: ..."), RS_EUNSUPPORTED (a valid construct
 * this compiler does not implement, e.g. a lookahead or "uniqueItems"),
 * RS_ERANGE (a limit exceeded, naming it), RS_ENOMEM. The compiled grammar is
 * immutable apart from its token-mask cache, which is filled under atomics:
 * every function below may be called from any thread.
 */
rs_err rs_grammar_compile(const rs_grammar_vocab *gv, const struct rs_constraint *c,
                          const struct rs_grammar_limits *limits, unsigned flags,
                          rs_grammar **out, char *err, size_t err_len);

/* Another reference to g (returns g). */
rs_grammar *rs_grammar_retain(rs_grammar *g);
/* Drops one reference, freeing g with the last; accepts NULL and clears *g. */
void rs_grammar_release(rs_grammar **g);

/* Counts for logs and benches. */
struct rs_grammar_stats {
    uint32_t n_rules;       /* rules with their own automaton (after inlining) */
    uint32_t n_states;      /* automaton states */
    uint32_t n_classes;     /* token-mask cache entries (states with equal behaviour share one) */
    uint32_t n_cached;      /* entries filled so far */
    size_t automaton_bytes; /* tables */
    size_t cache_bytes;     /* token-mask cache filled so far */
};
void rs_grammar_stats(const rs_grammar *g, struct rs_grammar_stats *s);

/*
 * The grammar as GBNF text (what the JSON schema, regex and choice front ends
 * produced, after inlining), for logs and debugging. NUL-terminated; RS_ERANGE
 * when cap is too small (*n is then the length needed, without the NUL).
 */
rs_err rs_grammar_print(const rs_grammar *g, char *out, size_t cap, size_t *n);

/* --- per-sequence matcher ----------------------------------------------------------------------- */

typedef struct rs_grammar_matcher rs_grammar_matcher;

/* A matcher at the start of g (holds a reference to g). One thread at a time. RS_ENOMEM. */
rs_err rs_grammar_matcher_create(rs_grammar *g, rs_grammar_matcher **out);
void rs_grammar_matcher_destroy(rs_grammar_matcher **m);

/* Back to the start of the grammar. */
void rs_grammar_matcher_reset(rs_grammar_matcher *m);

/*
 * Advances over one generated token. RS_OK: accepted. RS_EINVAL: the grammar
 * does not allow it (state unchanged), also for ids out of range and for
 * control tokens. An end-of-generation token is accepted exactly when the
 * grammar can end; the matcher is then terminated (accepts nothing more).
 * RS_ERANGE: accepting would need more than max_stacks parse stacks at once
 * (a grammar too ambiguous for the caps; state unchanged): finish the request
 * with an error. A token the mask allowed is always accepted except for RS_ERANGE.
 */
rs_err rs_grammar_matcher_accept(rs_grammar_matcher *m, int32_t token);

/* Whether accept(token) would succeed, without changing the state. */
int rs_grammar_matcher_check(rs_grammar_matcher *m, int32_t token);

/*
 * reset, then accept tokens[0..n) in order: the state after is the one
 * accepting them one by one gives. RS_OK; otherwise the error of the first
 * token refused and *n_done (may be NULL) the tokens accepted before it.
 */
rs_err rs_grammar_matcher_replay(rs_grammar_matcher *m, const int32_t *tokens, size_t n,
                                 size_t *n_done);

/* Advances over raw bytes (tests, prompts that prefill part of the output). As accept. */
rs_err rs_grammar_matcher_accept_bytes(rs_grammar_matcher *m, const char *s, size_t n);

/* 1 when the output so far is a complete sentence of the grammar (EOS allowed now). */
int rs_grammar_matcher_can_end(const rs_grammar_matcher *m);

/*
 * 1 when nothing more can be accepted: the grammar ended (no byte can follow,
 * or an end-of-generation token was accepted). The request finishes with stop.
 */
int rs_grammar_matcher_is_finished(const rs_grammar_matcher *m);

/* rs_grammar_matcher_fill_mask result flags */
#define RS_GRAMMAR_MASK_END 0x1u      /* the end-of-generation tokens are allowed */
#define RS_GRAMMAR_MASK_ONLY_END 0x2u /* they are the only tokens allowed: finish with stop */
#define RS_GRAMMAR_MASK_DEAD 0x4u     /* no token at all is allowed: a dead end (the grammar
                                         needs bytes no token provides); finish with an error */

/*
 * Writes the mask of the next token into row[0..n_words): bit (t & 31) of
 * word (t >> 5) set when token t is allowed. Words past the vocab are zero.
 * n_words must be >= rs_grammar_mask_words(vocab tokens); more is fine (a
 * model's logits row may be wider than its vocab). *flags (may be NULL) gets
 * RS_GRAMMAR_MASK_*. RS_EINVAL when n_words is too small. Uses the grammar's
 * token-mask cache (tokens accepted or rejected whatever the stack below the
 * top rule holds) and checks only the remaining uncertain tokens against the
 * full stacks; the bits equal checking every token with check().
 */
rs_err rs_grammar_matcher_fill_mask(rs_grammar_matcher *m, uint32_t *row, size_t n_words,
                                    unsigned *flags);

/* --- compiled-grammar cache ------------------------------------------------------------------ */

typedef struct rs_grammar_cache rs_grammar_cache;

/*
 * A bounded cache of compiled grammars for one vocab, keyed by content
 * (kind, bytes, limits) and evicted least-recently used when it holds more
 * than max_entries grammars or max_bytes of automaton + mask cache. Thread-
 * safe (one mutex; compiling happens outside it). Borrows gv.
 */
rs_err rs_grammar_cache_create(const rs_grammar_vocab *gv, uint32_t max_entries, size_t max_bytes,
                               rs_grammar_cache **out);
void rs_grammar_cache_destroy(rs_grammar_cache **c);

/*
 * The compiled grammar for c: from the cache, or compiled now and inserted.
 * *out owns a reference (rs_grammar_release). *hit (may be NULL) tells which.
 * Errors as rs_grammar_compile (failures are not cached).
 */
rs_err rs_grammar_cache_get(rs_grammar_cache *cache, const struct rs_constraint *c,
                            const struct rs_grammar_limits *limits, unsigned flags,
                            rs_grammar **out, int *hit, char *err, size_t err_len);

#endif

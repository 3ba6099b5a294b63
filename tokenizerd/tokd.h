/* SPDX-License-Identifier: MIT */
/*
 * tokenizerd's internal interface: the daemon state main.c's hooks own and the
 * functions of its concept files (dispatch.c: one client message;
 * intake.c: a generate into a request record; dedup.c: the (client,
 * request id) index that makes intake idempotent). Everything here runs on
 * the daemon's one thread. Leaves out the wire format (ipc/wire_*.h) and the
 * shared layout (ipc/pipeline.h).
 */
#ifndef RS_TOKD_H
#define RS_TOKD_H

#include <stdint.h>

#include "common/gguf.h"
#include "common/jinja.h"
#include "common/grammar.h"
#include "common/tokenizer.h"
#include "common/vocab.h"
#include "ipc/pipeline_door.h"
#include "ipc/pipeline_front.h"
#include "ipc/pipeline_owner.h"
#include "ipc/pipeline_req.h"
#include "ipc/wire_client.h"
#include "ipc/wire_server.h"

/* --- dedup.c -------------------------------------------------------------------------------- */

/*
 * Private index of the published request records by (transport, routing id,
 * request id). Sized by the table (one entry per record at most), so memory
 * is bounded; entries whose record was freed are dropped lazily when a
 * lookup meets them. The key itself is read back from the record, which is
 * immutable while published and reused only after tokenizerd claims it again.
 */
struct dedup;

/* A (transport, routing id, request id) key; pointers borrowed for the call. */
struct dedup_key {
    int tcp;
    const uint8_t *client;
    uint32_t client_len;
    const char *id;
    uint32_t id_len;
};

/* Index for a table of n_records records. RS_OK or RS_ENOMEM; *out owned (dedup_destroy). */
rs_err dedup_create(uint32_t n_records, struct dedup **out);
void dedup_destroy(struct dedup **d);

/* Adds record ref under key (replacing whatever the index held for ref.index). */
void dedup_insert(struct dedup *d, const struct dedup_key *key, struct rs_table_ref ref);

/* Finds the live published record of key: 1 with *ref set, or 0. */
int dedup_find(struct dedup *d, const rs_table *t, const struct dedup_key *key,
               struct rs_table_ref *ref);

/* Rebuilds the index from every published record of the table (start-up). Returns entries. */
uint32_t dedup_rebuild(struct dedup *d, const rs_table *t);

/* Entries currently held (for tests and logs). */
uint32_t dedup_count(const struct dedup *d);

/* The key of record r (its stored client, id and transport). */
void dedup_key_of(const struct rs_pipe_req *r, struct dedup_key *key);

/* 64-bit content hash of a validated generate whose prompt ids (if any) are ids[0..n_ids). */
uint64_t dedup_content_hash(const struct rs_wire_generate *g, const int32_t *ids, uint32_t n_ids);

/* --- chat.c: conversations rendered by the chat template ---------------------------------- */

struct tokd_chat {
    rs_jinja *tmpl;       /* compiled template; NULL when there is none usable */
    char *unusable;       /* why conversations are refused when tmpl is NULL (owned) */
    int absent;           /* 1: the model has no template (the client's mistake to send one);
                             0 with tmpl NULL: it does not compile (the server's problem) */
    const char *origin;   /* "tokenizer.chat_template" or "--chat-template", for messages */
    char *bos, *eos;      /* the vocab's BOS / EOS token texts ("" when none; owned) */
};

/*
 * Loads the template: template_file when not NULL (unreadable or not
 * compiling: RS_EINVAL with err set, tokenizerd exits 2), else the GGUF's
 * tokenizer.chat_template (absent or not compiling: RS_OK, and conversations
 * are answered with the reason). RS_ENOMEM. c zeroed before; tokd_chat_fini frees.
 */
rs_err tokd_chat_load(struct tokd_chat *c, const rs_gguf *g, const rs_vocab *v,
                      const char *template_file, char *err, size_t err_len);
void tokd_chat_fini(struct tokd_chat *c);

/*
 * The prompt ids of a validated generate carrying messages, in t->ids:
 * rendered, tokenized with special tokens parsed, BOS once. 0 with *n_out
 * set, or 1 after answering the client (no template, render error naming
 * line and column, prompt too long).
 */
struct tokd;
int tokd_chat_tokenize(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                       const struct rs_wire_client_msg *m, uint32_t *n_out);

/* --- the daemon ---------------------------------------------------------------------------- */

struct tokd_opts {
    uint32_t max_batch_msgs;     /* client messages handled per socket per loop pass */
    uint32_t owner_max_requests; /* --owner-max-requests; 0 = owner_share_pct of the table */
    uint32_t owner_share_pct;    /* --owner-share: percent of each resource one owner may
                                    hold; 0 = 25 */
};

struct tokd {
    struct rs_pipe *p;             /* borrowed: the stage's opened instance */
    struct rs_pipe_doors *doors;   /* borrowed: the stage's doorbells (ipc/stage.h) */
    struct rs_pipe_front front;
    rs_vocab *vocab;
    rs_tokenizer *tok;
    struct tokd_chat chat;   /* the chat template (chat.c) */
    struct dedup *index;
    struct tokd_opts opts;
    rs_pipe_owner_map *owners;     /* routing id -> the owner that said hello (owner.c) */
    uint32_t owner_max_requests;   /* resolved limits (tokd_owner_limits) */
    uint64_t owner_max_lp_chunks;
    uint64_t owner_max_tok_chunks;
    uint64_t lp_pool_chunks;       /* the logprob region's chunks */
    int32_t *ids;            /* n_ctx prompt ids: the tokenizer's output */
    struct rs_wire_buf out;  /* reply encoder buffer */
    int fenced;              /* set when a shared-memory call said we are fenced */
    int reclaim_wanted;      /* a claim or append found the pool full: reclaim soon */
    uint64_t reclaim_ns;     /* CLOCK_MONOTONIC of the last reclaim pass */
    rs_grammar_vocab *gv;    /* constraint.c: the vocab's token trie, built on first use */
    rs_grammar_cache *gcache;/* compiled constraints by content */
    int32_t *cx_words;       /* RS_PIPE_CX_MAX_WORDS: a constraint being stored */
};

/* --- dispatch.c ----------------------------------------------------------------------------- */

/*
 * Receives and handles up to max messages waiting on sock (tcp: 1 for the
 * tcp ROUTER). Replies go back on the same socket. Returns RS_OK, or
 * RS_ESTALE once the daemon is fenced (main exits).
 */
rs_err tokd_drain(struct tokd *t, rs_zsock *sock, int tcp, uint32_t max);

/* Sends an error reply with code and a printf message to peer; failures are logged. */
void tokd_reply_error(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                      const char *id, enum rs_wire_code code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Sends a built reply (t->out) to peer; failures are logged and counted, never fatal. */
void tokd_send(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer);

/* --- intake.c ------------------------------------------------------------------------------- */

/*
 * Handles a decoded generate from peer (arrival_ns: when it was received):
 * validates, deduplicates, tokenizes, commits the record, acks and rings
 * schedulerd; any refusal is answered with an error reply. Returns RS_OK
 * (also for refused requests) or RS_ESTALE when fenced.
 */
rs_err tokd_generate(struct tokd *t, rs_zsock *sock, int tcp, const struct rs_zsock_peer *peer,
                     const struct rs_wire_client_msg *m, const struct rs_pipe_owner *owner,
                     uint64_t arrival_ns);

/* Handles a cancel: sets the finish word (abort) and rings schedulerd, or answers not_found
 * (forbidden when the request belongs to another owner). */
void tokd_cancel(struct tokd *t, rs_zsock *sock, int tcp, const struct rs_zsock_peer *peer,
                 const struct rs_wire_client_msg *m, const struct rs_pipe_owner *owner);

/* --- owner.c -------------------------------------------------------------------------------- */

/* What one owner holds, counted from the request table. */
struct tokd_use {
    uint32_t n_requests;     /* published records of the owner (running or unreleased) */
    uint64_t lp_chunks;      /* logprob chunks its records reserve */
    uint64_t tok_chunks;     /* token-arena chunks its records reserve (prompt + max_tokens) */
    uint64_t tok_chunks_all; /* token-arena chunks every record reserves */
    uint64_t lp_chunks_all;  /* logprob chunks every record reserves */
    uint32_t n_all;          /* published records of every owner */
};

/* Resolves the per-owner limits from t->opts and the configuration (attach). */
void tokd_owner_limits(struct tokd *t);

/* Counts what owner holds (one pass over the table). */
void tokd_owner_usage(struct tokd *t, const struct rs_pipe_owner *owner, struct tokd_use *u);

/* Share check before tokenizing; 1 when the generate was answered `overloaded`. */
int tokd_owner_admit(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                     const struct rs_wire_client_msg *m, const struct rs_pipe_owner *owner);

/* 1 (answered `forbidden`, logged) when r belongs to another owner than owner; what: "cancel". */
int tokd_owner_refuse(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                      const struct rs_pipe_req *r, const char *what,
                      const struct rs_pipe_owner *owner);

/* --- constraint.c --------------------------------------------------------------------------- */

/* 1 when g carries a constraint, a logit_bias or an allowed_token_ids list. */
int tokd_constrained(const struct rs_wire_generate *g);

/*
 * Compiles m's constraint against the vocab (through the cache); a
 * malformed one is answered with an error naming its position. Returns 1
 * when answered (refused), 0 to go on.
 */
int tokd_constraint_check(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                          const struct rs_wire_client_msg *m);

/* Stores g's constraint as claimed record ref's constraints list (pipeline_constraint.h). */
rs_err tokd_constraint_store(struct tokd *t, struct rs_table_ref ref,
                             const struct rs_wire_generate *g);

/* Frees the trie, the cache and the scratch. */
void tokd_constraint_fini(struct tokd *t);

#endif

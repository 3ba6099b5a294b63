/* SPDX-License-Identifier: MIT */
/*
 * The pipeline's shared-memory layout: which regions one instance's segment
 * holds, the request record, the batch and result record formats, the KV
 * block tables, and open-or-create for the four daemons. Every daemon
 * computes the same layout from the same configuration (the same command
 * line), so whichever starts first creates the segment and writes the
 * configuration; the others attach and check it field by field.
 *
 * Request record states (table.h user states) and who moves them:
 *
 *   FREE ─claim─▶ CLAIMED ─publish─▶ WAITING ─plan─▶ RUNNING ─┐ finish word set,
 *    ▲  tokenizerd            tokenizerd  ▲  schedulerd        │ KV freed, no batch
 *    │                                    └── preempt/recompute┘ in flight
 *    │                                                          ▼
 *    └──────── free (postprocd, after the final message) ── FINISHED (schedulerd)
 *
 * The finish word (rs_pipe_req.finish) is set once, by CAS from 0, by
 * whichever stage first decides the request ends: launcherd (EOS, stop
 * token, length), postprocd (stop string, client gone), tokenizerd (client
 * cancel), schedulerd (error). Token list: tokenizerd writes the prompt while
 * CLAIMED and seals it; launcherd appends each sampled token (arena.h).
 * Leaves out: the policies (schedulerd), the wire format (wire*.h).
 */
#ifndef RS_PIPELINE_H
#define RS_PIPELINE_H

#include <stdatomic.h>
#include <stdint.h>

#include "common/err.h"
#include "common/gguf_facts.h"
#include "common/metrics.h"
#include "ipc/arena.h"
#include "ipc/ring.h"
#include "ipc/role.h"
#include "ipc/shm.h"
#include "ipc/table.h"
#include "ipc/wire.h"
#include "common/sampling.h"
#include "common/detok.h"
#include "common/stopstr.h"

/* Role names, in the order of the segment's role table. */
#define RS_PIPE_TOKENIZERD "tokenizerd"
#define RS_PIPE_SCHEDULERD "schedulerd"
#define RS_PIPE_LAUNCHERD "launcherd"
#define RS_PIPE_POSTPROCD "postprocd"

enum rs_pipe_stage {
    RS_PIPE_STAGE_TOKENIZERD = 0,
    RS_PIPE_STAGE_SCHEDULERD = 1,
    RS_PIPE_STAGE_LAUNCHERD = 2,
    RS_PIPE_STAGE_POSTPROCD = 3,
    RS_PIPE_N_STAGES = 4
};

/* Request record user states (table.h: 0 FREE, 1 CLAIMED). */
enum rs_pipe_req_state {
    RS_PIPE_REQ_WAITING = 2,  /* committed by tokenizerd; schedulerd has not run it yet */
    RS_PIPE_REQ_RUNNING = 3,  /* schedulerd gave it a running slot (KV blocks) */
    RS_PIPE_REQ_FINISHED = 4, /* ended and its KV freed; postprocd sends the final message */
};

#define RS_PIPE_NO_SLOT UINT32_MAX
#define RS_PIPE_CLIENT_MAX 64 /* bytes of a client's ZeroMQ routing id we store */

/* Request flags (rs_pipe_req.flags). */
#define RS_PIPE_F_STREAM 0x1u
#define RS_PIPE_F_IGNORE_EOS 0x2u
#define RS_PIPE_F_TCP 0x4u /* the client came over tcp:// (postprocd answers on its tcp ROUTER) */

/* Finish word: reason (enum rs_wire_finish) | stage << 8 | error code << 16. */
static inline uint32_t rs_pipe_finish_make(unsigned reason, enum rs_pipe_stage who, unsigned code)
{
    return (reason & 0xffu) | ((unsigned)who & 0xffu) << 8 | (code & 0xffffu) << 16;
}
static inline unsigned rs_pipe_finish_reason(uint32_t w) { return w & 0xffu; }
static inline unsigned rs_pipe_finish_who(uint32_t w) { return (w >> 8) & 0xffu; }
static inline unsigned rs_pipe_finish_code(uint32_t w) { return w >> 16; }

/* Configuration: identical in every daemon of an instance (checked at attach). */
struct rs_pipe_config {
    char instance[64];           /* segment is /ringserve-<instance> */
    char model_path[512];        /* absolute path of the GGUF */
    uint64_t model_bytes;        /* its size, to notice a different file under the same name */
    uint32_t n_vocab;            /* model facts */
    uint32_t n_ctx;              /* tokens per request (prompt + output), <= model context */
    uint32_t block_size;         /* KV block tokens (16) */
    uint32_t n_kv_blocks;        /* KV pool blocks */
    uint32_t max_requests;       /* request table records */
    uint32_t max_seqs;           /* sequences per step = running slots */
    uint32_t max_batched_tokens; /* tokens per step */
    uint32_t chunk_tokens;       /* token arena chunk */
    uint32_t n_chunks;           /* token arena chunks */
    uint32_t batch_slots;        /* batch and result ring slots */
    uint32_t prefix_caching;     /* 1 = on */
    uint32_t priority_policy;    /* 0 = FCFS, 1 = priority then FCFS */
    uint32_t max_blocks_per_seq; /* derived: ceil(n_ctx / block_size) */
};

/* Fills the defaults (documented in ipc/README.md "Pipeline"), n_vocab/n_ctx 0. */
void rs_pipe_config_default(struct rs_pipe_config *c);

/*
 * Completes c from the model file's facts m (read by the daemon with
 * rs_gguf_facts_read, so this opens no file): the absolute model path,
 * model_bytes, n_vocab, n_ctx (the model's context when 0, else checked
 * against it), and the derived sizes; validates every field. RS_OK or
 * RS_EINVAL with a message naming the field in err.
 */
rs_err rs_pipe_config_resolve(struct rs_pipe_config *c, const struct rs_gguf_facts *m, char *err,
                              size_t err_len);

/*
 * Parses one shared command-line option (`--instance`, `--model`, `--ctx`,
 * `--block-size`, `--kv-blocks`, `--max-requests`, `--max-seqs`,
 * `--max-batched-tokens`, `--no-prefix-caching`, `--policy fcfs|priority`,
 * `--rundir`). Returns 1 and advances *i past its value when argv[*i] is
 * one, 0 when it is not, -1 after writing an error to err.
 */
int rs_pipe_parse_option(struct rs_pipe_config *c, char *rundir, size_t rundir_len, int argc,
                         char **argv, int *i, char *err, size_t err_len);

/* Help text for the shared options (static). */
const char *rs_pipe_options_help(void);

/* --- request record ---------------------------------------------------------------------- */

/* postprocd's progress through one request; double-buffered in the record. */
struct rs_pipe_cursor {
    uint32_t n_done;        /* output tokens turned into deltas (next delta seq) */
    uint32_t final_sent;    /* 1 once the final message went out */
    uint64_t text_bytes;    /* bytes of text sent so far */
    struct rs_detok detok;  /* incremental detokenizer state */
    struct rs_stopstr stop; /* held-back text that may start a stop string */
};

struct rs_pipe_req {
    /* intake: tokenizerd writes these while CLAIMED; immutable once published */
    uint64_t handle;                    /* server-wide request number (rs_pipe_next_handle) */
    uint64_t arrival_ns;                /* tokenizerd received the generate (CLOCK_MONOTONIC) */
    uint64_t accepted_ns;               /* tokenizerd committed it */
    char id[RS_WIRE_ID_MAX + 1];        /* client's request id, NUL-terminated */
    uint8_t client_len;                 /* bytes of client[] */
    uint8_t client[RS_PIPE_CLIENT_MAX]; /* client's routing id (deltas go there) */
    uint32_t flags;                     /* RS_PIPE_F_* */
    uint32_t n_prompt;                  /* prompt tokens (BOS included) */
    uint32_t max_tokens;                /* output tokens at most (resolved against n_ctx) */
    int32_t priority;                   /* lower runs first under the priority policy */
    struct rs_sampling_params sampling;
    uint32_t n_stop_ids;
    int32_t stop_ids[RS_WIRE_STOP_IDS_MAX];
    uint32_t n_stop;
    uint16_t stop_len[RS_WIRE_STOP_MAX];
    char stop[RS_WIRE_STOP_MAX][RS_WIRE_STOP_LEN_MAX];

    _Atomic uint32_t finish;            /* 0, or rs_pipe_finish_make(...): set once by CAS */

    /* schedulerd's, while WAITING/RUNNING */
    uint32_t run_slot;                  /* KV table row, or RS_PIPE_NO_SLOT */
    uint32_t n_computed;                /* tokens whose K/V the launcher holds */
    uint32_t n_cached;                  /* prompt tokens served by the prefix cache (usage) */
    uint32_t n_preempted;               /* recompute preemptions so far */
    uint64_t inflight_batch;            /* batch id holding it, 0 = none */
    uint64_t scheduled_ns;              /* first planned */
    uint64_t finished_ns;               /* moved to FINISHED */

    /* launcherd's */
    _Atomic uint64_t first_token_ns;    /* first output token appended */

    /* postprocd's: cursor[cursor_idx] is current; the other is written, then flipped */
    _Atomic uint32_t cursor_idx;
    uint32_t pad0;
    uint64_t unreachable_ns;            /* first failed send to the client, 0 = none */
    struct rs_pipe_cursor cursor[2];

    /* tokenizerd's (intake, immutable once published): hash of the generate's content
     * (prompt and every parameter), so a resend under the same id is acknowledged again
     * while a different request under an id still in flight is refused as `duplicate` */
    uint64_t intake_hash;
    /* the token list (arena.h) follows at RS_PIPE_REQ_LIST_OFFSET, then the logprob list at
       rs_pipe_lp_list_offset() (see "logprobs" below) */
};

#define RS_PIPE_REQ_LIST_OFFSET ((sizeof(struct rs_pipe_req) + 63u) & ~(uint64_t)63u)

/* --- logprobs (launcherd writes, postprocd reads) ------------------------------------------
 *
 * A request that asks for N = sampling.n_logprobs > 0 alternatives gets one
 * logprob entry per output token, in a second per-request list stored like
 * the token list (arena.h) but in its own arena region "logprobs" (chunks of
 * RS_PIPE_LP_CHUNK_WORDS int32 words). Entry k (output token k) is the
 * words [k * W, (k + 1) * W) of that list, W = rs_pipe_lp_entry_words(N):
 *
 *   word 0          the sampled token id (equals output token k)
 *   word 1          its natural-log probability (float bits)
 *   word 2          n_top: alternatives filled below (<= N; min(N, n_vocab))
 *   words 3..3+N    top ids, most likely first (entries past n_top are -1)
 *   words 3+N..3+2N their logprobs (float bits)
 *
 * Order: launcherd appends entry k (one all-or-nothing append, published
 * with a release CAS) BEFORE it appends output token k to the token list,
 * so a reader that has seen token k (acquire) finds entry k complete. A
 * launcher killed between the two redoes the step later and finds the
 * entry already there (kept; the sampler is pure, so it is the same). The
 * list is restarted at k = 0 (a reused record may still hold an earlier
 * request's entries) and sealed after each append, so every chunk is linked
 * to its record and the arena audit (rs_arena_recover, which launcherd runs
 * when the region is full, and every stage at start) reclaims the chunks of
 * freed records: postprocd frees records as before, with
 * rs_arena_free_record on the token arena, and does nothing for logprobs.
 *
 * postprocd reads entry k with rs_pipe_logprob_read(p, ref, k, token, &lp)
 * after it has read output token k (= `token`) from the token list; it
 * fills the wire struct (ipc/wire.h rs_wire_logprob) a delta carries. The
 * values are those the sampler reports (launcherd/engine/sampler.h).
 */
#define RS_PIPE_LP_CHUNK_WORDS 2048u              /* 8 KiB chunks */
#define RS_PIPE_LP_MAX_TOP RS_SAMPLING_MAX_LOGPROBS /* == RS_WIRE_LOGPROBS_MAX */
#define RS_PIPE_LP_POOL_BYTES (16ull << 20)       /* region size unless one request needs more */

/* Words of one logprob entry with n_top alternatives. */
static inline uint32_t rs_pipe_lp_entry_words(uint32_t n_top)
{
    return 3u + 2u * n_top;
}

/* Bytes of a record's token list and logprob list, and the latter's offset in the record. */
uint64_t rs_pipe_token_list_bytes(const struct rs_pipe_config *c);
uint64_t rs_pipe_lp_list_bytes(const struct rs_pipe_config *c);
uint64_t rs_pipe_lp_list_offset(const struct rs_pipe_config *c);

/* --- KV block tables (schedulerd writes, launcherd reads) ------------------------------------ */

/* One running slot's block table: blocks[0..n_blocks) in position order. */
struct rs_pipe_kvrow {
    _Atomic uint64_t owner; /* rs_table_ref_pack of the request + 1, 0 = unused */
    _Atomic uint32_t n_blocks;
    uint32_t pad;
    uint32_t blocks[];      /* max_blocks_per_seq entries */
};

/* Per KV block prefix-cache entry (schedulerd only; survives its restarts). */
struct rs_pipe_kvmeta {
    _Atomic uint64_t hash;  /* chained hash of the block's tokens and its prefix */
    _Atomic uint64_t word;  /* launcher incarnation whose K/V it describes << 32 | 1 = valid */
    /* schedulerd's hit verification (written before word, read after it): a lookup must also
     * match a second, independently seeded hash of the block's own tokens and the block that
     * held the previous block_size tokens (parent), so a false hit needs two 64-bit collisions */
    uint64_t tok_hash;
    uint32_t parent;        /* block of the preceding tokens, UINT32_MAX for a first block */
    uint32_t pad;
};

/* --- batch ring record (schedulerd -> launcherd) ------------------------------------------- */

struct rs_pipe_batch_seq {
    uint32_t req_index, req_gen; /* the request (table reference) */
    uint32_t run_slot;           /* its KV table row */
    uint32_t pos0;               /* position of its first token in this step */
    uint32_t n_tokens;           /* tokens in this step (prefill chunk or 1) */
    uint32_t n_blocks;           /* block table entries the step may use */
    uint32_t tok_off;            /* index of its first token in the batch's token array */
    uint32_t want_logits;        /* 1: sample output token `out_index` after the last token */
    uint32_t out_index;          /* output index of the token to sample */
    uint32_t pad;
};

struct rs_pipe_batch {
    uint64_t batch_id;
    uint64_t planned_ns;         /* CLOCK_MONOTONIC when committed */
    uint32_t launcher_inc;       /* launcher incarnation whose KV the plan assumes */
    uint32_t n_seqs;
    uint32_t n_tokens;           /* total tokens */
    uint32_t pad;
    /* then n_seqs struct rs_pipe_batch_seq, then n_tokens int32 token ids */
};

/* --- result ring record (launcherd -> schedulerd) ------------------------------------------ */

enum rs_pipe_result_status {
    RS_PIPE_RESULT_OK = 0,
    RS_PIPE_RESULT_KV_LOST = 1, /* planned for an older launcher: not run; replan from scratch */
    RS_PIPE_RESULT_ERROR = 2,   /* the step failed; rows carry what was done */
};

struct rs_pipe_result_row {
    uint32_t req_index, req_gen;
    int32_t token;             /* sampled token, -1 when the row sampled nothing */
    uint32_t n_tokens;         /* list length after the append */
    uint32_t computed;         /* pos0 + n_tokens of its batch seq: K/V now held up to here */
    uint32_t pad;
};

struct rs_pipe_result {
    uint64_t batch_id;
    uint32_t status;           /* enum rs_pipe_result_status */
    uint32_t launcher_inc;
    uint32_t n_rows;           /* == the batch's n_seqs */
    uint32_t pad;
    uint64_t forward_ns;       /* time in the model step */
    uint64_t picked_ns;        /* launcher took the batch (CLOCK_MONOTONIC) */
    uint64_t done_ns;          /* results committed */
    uint64_t sample_ns;        /* time sampling, appending tokens and logprobs, stop rules */
    /* then n_rows struct rs_pipe_result_row */
};
/*
 * Rows by status. OK: one row per batch seq, in batch order. KV_LOST: one
 * row per seq, token -1, computed 0 (nothing ran; the launcher holds no K/V
 * for any request). ERROR: either 0 rows (the batch record itself was
 * rejected: bad checksum or failed rs_pipe_batch_check; nothing ran) or one
 * row per seq with what was done: a seq the launcher refused (its KV row
 * does not belong to it, its block ids are out of range, its request is
 * inconsistent) or a failed model step leaves token -1 and computed = pos0
 * (K/V unchanged); a refused request also gets its finish word (ERROR, who
 * launcherd) so schedulerd ends it instead of replanning it forever.
 */

/* --- the configuration region -------------------------------------------------------------- */

struct rs_pipe_shared {
    _Atomic uint64_t cfg_word;     /* 0 unset | owner inc << 32 | 1 writing | 2 ready */
    struct rs_pipe_config cfg;
    _Atomic uint64_t next_handle;  /* request handles, from 1 */
    _Atomic uint64_t next_batch;   /* batch ids, from 1 (schedulerd) */
    /* launcher incarnation whose K/V the kv_tables rows, kv_meta and the RUNNING records'
     * n_computed describe (schedulerd; 0 = none yet). A different current launcher means
     * that K/V is gone: schedulerd re-prefills every RUNNING request, then stores the new one. */
    _Atomic uint64_t kv_launcher_inc;
};

/* --- metrics: one block per stage ---------------------------------------------------------- */

struct rs_metrics_region {
    struct rs_metrics_block stage[RS_PIPE_N_STAGES];
};

/* Counter and histogram indices per stage; names in rs_pipe_metric_name(). */
enum {
    RS_M_TOK_RECEIVED, RS_M_TOK_ACCEPTED, RS_M_TOK_REJECTED, RS_M_TOK_OVERLOADED,
    RS_M_TOK_DUPLICATES, RS_M_TOK_CANCELS, RS_M_TOK_PROMPT_TOKENS, RS_M_TOK_N
};
enum { RS_H_TOK_TOKENIZE, RS_H_TOK_INTAKE, RS_H_TOK_N };
enum {
    RS_M_SCH_STEPS, RS_M_SCH_PREFILL_TOKENS, RS_M_SCH_DECODE_TOKENS, RS_M_SCH_PREEMPTIONS,
    RS_M_SCH_PREFIX_QUERY, RS_M_SCH_PREFIX_HIT, RS_M_SCH_FINISHED, RS_M_SCH_KV_USED,
    RS_M_SCH_KV_FREE, RS_M_SCH_KV_CACHED, RS_M_SCH_WAITING, RS_M_SCH_RUNNING,
    RS_M_SCH_LAUNCHER_RESETS,
    RS_M_SCH_PLAN_NS_LAST,    /* gauge: ns the latest step took to plan and write (exact) */
    RS_M_SCH_APPLIED_NS_LAST, /* gauge: CLOCK_MONOTONIC when the latest result was applied */
    RS_M_SCH_N
};
enum { RS_H_SCH_PLAN, RS_H_SCH_QUEUE_WAIT, RS_H_SCH_STEP, RS_H_SCH_N };
enum {
    RS_M_LAU_STEPS, RS_M_LAU_TOKENS, RS_M_LAU_SAMPLED, RS_M_LAU_KV_LOST, RS_M_LAU_REJECTED,
    RS_M_LAU_SEQ_ERRORS, RS_M_LAU_REDONE, RS_M_LAU_FINISHED, RS_M_LAU_N
};
enum { RS_H_LAU_FORWARD, RS_H_LAU_PICKUP, RS_H_LAU_SAMPLE, RS_H_LAU_STEP, RS_H_LAU_N };
enum {
    RS_M_POST_DELTAS, RS_M_POST_FINALS, RS_M_POST_STOP_HITS, RS_M_POST_SEND_FAIL,
    RS_M_POST_GONE, RS_M_POST_REPLAYS, RS_M_POST_N
};
enum { RS_H_POST_DETOK, RS_H_POST_TTFT, RS_H_POST_TPOT, RS_H_POST_E2E, RS_H_POST_N };

/* Name of counter (hist = 0) or histogram (hist = 1) i of a stage; NULL past the last. */
const char *rs_pipe_metric_name(enum rs_pipe_stage stage, int hist, unsigned i);

/* "tokenizerd", ...; "?" otherwise. */
const char *rs_pipe_stage_name(enum rs_pipe_stage stage);

struct rs_pipe;
/*
 * Current incarnation of `stage`'s role (0: never started): one acquire load,
 * cheap enough for every loop pass (schedulerd watches launcherd's to notice
 * that its K/V is gone). Any process, any thread.
 */
uint32_t rs_pipe_stage_inc(const struct rs_pipe *p, enum rs_pipe_stage stage);

/* --- an opened pipeline -------------------------------------------------------------------- */

struct rs_pipe {
    struct rs_pipe_config cfg;
    rs_shm *shm;
    rs_role *role;                 /* NULL for read-only tools */
    enum rs_pipe_stage stage;
    struct rs_pipe_shared *shared;
    rs_table *requests;
    rs_arena *tokens;
    rs_ring *batches;              /* schedulerd (producer) and launcherd (consumer) */
    rs_ring *results;              /* launcherd (producer) and schedulerd (consumer) */
    uint8_t *kv_rows;              /* max_seqs rows of kvrow_bytes */
    uint64_t kvrow_bytes;
    struct rs_pipe_kvmeta *kv_meta;/* n_kv_blocks entries */
    struct rs_metrics_region *metrics;
    rs_arena *logprobs;            /* per-request logprob lists (see "logprobs" above) */
};

/*
 * Opens the instance described by cfg (resolved) as `stage`: attaches to
 * its segment, or creates it when absent (writing the configuration),
 * checks the configuration field by field, starts the role (a new
 * incarnation: the fence), opens the table, arena and the rings this stage
 * uses and runs their recovery. The caller runs its own rescans, then
 * rs_role_ready(p->role). Returns RS_OK with *out owned (rs_pipe_close),
 * RS_EMISMATCH (message names the field), RS_ESTALE (segment from an
 * earlier boot: remove it), or what rs_shm_* returned; err gets the detail.
 */
rs_err rs_pipe_open(const struct rs_pipe_config *cfg, enum rs_pipe_stage stage,
                    struct rs_pipe **out, char *err, size_t err_len);

/*
 * Read-only attach for tools (ringserve-stat): no role, no recovery; the
 * configuration is read from the segment. RS_ENOENT if the instance is down.
 */
rs_err rs_pipe_inspect(const char *instance, struct rs_pipe **out, char *err, size_t err_len);

/* Closes handles, stops the role (marks it exited), unmaps. Accepts NULL; clears *p. */
void rs_pipe_close(struct rs_pipe **p);

/* Removes the instance's segment (ops scripts, whole-pipeline restart). */
rs_err rs_pipe_unlink(const char *instance);

/* Record of table index i (any state). */
static inline struct rs_pipe_req *rs_pipe_req_at(const struct rs_pipe *p, uint32_t i)
{
    return (struct rs_pipe_req *)rs_table_record(p->requests, i);
}

/* KV row of running slot s. */
static inline struct rs_pipe_kvrow *rs_pipe_kvrow_at(const struct rs_pipe *p, uint32_t s)
{
    return (struct rs_pipe_kvrow *)(p->kv_rows + (uint64_t)s * p->kvrow_bytes);
}

/* Current postprocd cursor of r (acquire). */
static inline struct rs_pipe_cursor *rs_pipe_cursor_cur(struct rs_pipe_req *r)
{
    return &r->cursor[atomic_load_explicit(&r->cursor_idx, memory_order_acquire) & 1u];
}

/* Sets the finish word once; returns 1 if this call set it, 0 if it was already set. */
static inline int rs_pipe_finish_set(struct rs_pipe_req *r, uint32_t word)
{
    uint32_t zero = 0;
    return atomic_compare_exchange_strong_explicit(&r->finish, &zero, word, memory_order_acq_rel,
                                                   memory_order_acquire);
}

/*
 * launcherd only: stores the logprobs of output token k of request `ref`
 * (sample result r; the record's N = sampling.n_logprobs > 0) as entry k of
 * its logprob list. Call before appending the token (see "logprobs"). k = 0
 * restarts the list (so a redone k = 0 is written again, with the same
 * values); an entry k > 0 already there is kept (a redone step).
 * Returns RS_OK; RS_EINVAL (the request asked for none); RS_ENOMEM when the
 * region is full even after reclaiming freed records' chunks; RS_ESTALE
 * (record freed, or this incarnation fenced); RS_EIO when the list holds
 * fewer than k entries (a caller bug, logged).
 */
rs_err rs_pipe_logprob_put(struct rs_pipe *p, struct rs_table_ref ref, uint32_t k,
                           const struct rs_sample_result *r);

/*
 * Reads entry k of request ref's logprob list into *out (ipc/wire.h), whose
 * token must be `token` (output token k, read from the token list first).
 * Returns RS_OK; RS_ENOENT when the request asked for no logprobs or entry
 * k is not written (it always is once token k is visible); RS_ESTALE when
 * the record was freed; RS_EIO when the entry names another token or is
 * malformed (logged). Any process and thread (postprocd).
 */
rs_err rs_pipe_logprob_read(const struct rs_pipe *p, struct rs_table_ref ref, uint32_t k,
                            int32_t token, struct rs_wire_logprob *out);

/* Stop strings of r as the arrays stopstr.h wants (ptrs/lens need RS_WIRE_STOP_MAX entries). */
size_t rs_pipe_req_stops(const struct rs_pipe_req *r, const char **ptrs, size_t *lens);

/* Bytes of a batch record with n_seqs sequences and n_tokens tokens. */
static inline uint64_t rs_pipe_batch_bytes(uint32_t n_seqs, uint32_t n_tokens)
{
    return sizeof(struct rs_pipe_batch) + (uint64_t)n_seqs * sizeof(struct rs_pipe_batch_seq) +
           (uint64_t)n_tokens * sizeof(int32_t);
}

/* Sequence array and token array of a batch record. */
static inline struct rs_pipe_batch_seq *rs_pipe_batch_seqs(const struct rs_pipe_batch *b)
{
    return (struct rs_pipe_batch_seq *)(b + 1);
}
static inline int32_t *rs_pipe_batch_tokens(const struct rs_pipe_batch *b)
{
    return (int32_t *)(rs_pipe_batch_seqs(b) + b->n_seqs);
}
static inline struct rs_pipe_result_row *rs_pipe_result_rows(const struct rs_pipe_result *r)
{
    return (struct rs_pipe_result_row *)(r + 1);
}

/*
 * Checks a batch record read from the ring against the configuration before
 * anything uses it (it is another process's output): sizes, offsets, token
 * ids, slots, block counts. RS_OK or RS_EPROTO with a message in err.
 */
rs_err rs_pipe_batch_check(const struct rs_pipe *p, const void *data, uint32_t len, char *err,
                           size_t err_len);

/* Same for a result record. */
rs_err rs_pipe_result_check(const struct rs_pipe *p, const void *data, uint32_t len, char *err,
                            size_t err_len);

#endif

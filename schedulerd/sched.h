/* SPDX-License-Identifier: MIT */
/*
 * schedulerd's internals: the private indexes it keeps next to shared memory
 * (waiting heap, running list, KV block pool with the prefix-cache map and
 * LRU, per-request mirrors) and the functions of its files. Shared memory
 * (ipc/pipeline.h) stays the source of truth: everything here is rebuilt
 * from it at start (rebuild.c) and kept in sync incrementally, so a SIGKILL
 * anywhere loses nothing. One thread; not for use outside schedulerd, its
 * tests and its bench. Leaves out sockets (main.c owns them; `doors` may be
 * NULL, then no doorbell is rung).
 */
#ifndef RS_SCHED_H
#define RS_SCHED_H

#include <stdint.h>

#include "common/step_cost.h"
#include "ipc/pipeline_door.h"
#include "ipc/pipeline_kv.h"

#define SCHED_NONE UINT32_MAX

/* --- kv_block.c: the KV block pool and the prefix cache ------------------------------------ */

/*
 * Every block is in exactly one place: FREE (no reusable content, on the free
 * stack), IDLE (ref 0 but holding a cached full block's K/V, on the LRU list,
 * evictable) or USED (ref > 0: in some running request's table, cached or
 * not). Cached blocks are in the hash map and have a valid kv_meta entry
 * stamped with `inc`; nothing else does.
 */
struct kv_block_pool {
    uint32_t n_blocks, block_size;
    uint32_t inc;                /* launcher incarnation stamped into kv_meta */
    struct rs_pipe_kvmeta *meta; /* shared memory, n_blocks entries */
    uint32_t *ref;               /* running tables holding each block */
    uint8_t *cached;             /* 1: in the map, kv_meta valid */
    uint32_t *prev, *next;       /* LRU links of IDLE blocks (SCHED_NONE ends) */
    uint32_t lru_head, lru_tail; /* head = least recently released = evicted first */
    uint32_t n_idle;
    uint32_t *free_stack;
    uint32_t n_free;
    uint32_t n_used;
    uint64_t *map_key;           /* open addressing, linear probing, 2x blocks (power of 2) */
    uint32_t *map_val;           /* block, SCHED_NONE = empty */
    uint32_t map_mask;
    uint64_t evictions;
};

/* Sets up a pool of n_blocks over meta (every block FREE, meta untouched). RS_ENOMEM. */
rs_err kv_block_init(struct kv_block_pool *kv, struct rs_pipe_kvmeta *meta, uint32_t n_blocks,
                     uint32_t block_size);
void kv_block_fini(struct kv_block_pool *kv);

/*
 * Rebuilds the lists from `ref` (n_blocks counts the caller took from the
 * KV tables) and kv_meta: blocks with a valid entry of launcher `inc` are
 * cached (IDLE when unreferenced); entries of other incarnations, or a second
 * block with the same hash, are invalidated. Blocks with ref 0 and no entry
 * are FREE.
 */
void kv_block_rebuild(struct kv_block_pool *kv, uint32_t inc, const uint32_t *ref);

/* Blocks an allocation can get now (FREE + IDLE). */
static inline uint32_t kv_block_available(const struct kv_block_pool *kv)
{
    return kv->n_free + kv->n_idle;
}

/* Takes a FREE block, else evicts the least recently used IDLE one; ref 1. SCHED_NONE if none. */
uint32_t kv_block_alloc(struct kv_block_pool *kv);

/* One more table holds cached block b (a prefix hit); takes it off the LRU if it was IDLE. */
void kv_block_hold(struct kv_block_pool *kv, uint32_t b);

/* A table dropped b: at ref 0 a cached block goes to the LRU tail, another to FREE. */
void kv_block_release(struct kv_block_pool *kv, uint32_t b);

/*
 * The cached block whose chained hash is `hash`, whose own tokens hash to
 * `tok_hash` and whose parent is `parent` (SCHED_NONE for a first block), or
 * SCHED_NONE. A block matching the hash but not the rest is not a hit.
 */
uint32_t kv_block_lookup(const struct kv_block_pool *kv, uint64_t hash, uint64_t tok_hash,
                         uint32_t parent);

/*
 * Caches used block b as holding the full block described by (hash,
 * tok_hash, parent): writes kv_meta (payload, then the valid word). If
 * another block already caches exactly that, b stays uncached (two requests
 * computed the same block); if one caches the hash with other content, it is
 * replaced. Returns the block that caches it now (b or the earlier one): the
 * parent to name when registering the next block of the chain.
 */
uint32_t kv_block_register(struct kv_block_pool *kv, uint32_t b, uint64_t hash,
                           uint64_t tok_hash, uint32_t parent);

/* Forgets every cached block (the launcher's K/V is gone) and stamps `inc` from now on. */
void kv_block_forget_all(struct kv_block_pool *kv, uint32_t inc);

/* Hash of a full block: chained over the parent's hash (0 for the first block). */
uint64_t kv_block_hash_chain(uint64_t parent_hash, const int32_t *tok, uint32_t n);

/* Independently seeded hash of the block's tokens alone (hit verification). */
uint64_t kv_block_hash_tokens(const int32_t *tok, uint32_t n);

/* Checks the pool's invariants (lists, counts, map, kv_meta); RS_EMISMATCH naming the block. */
rs_err kv_block_check(const struct kv_block_pool *kv);

/* --- the scheduler ------------------------------------------------------------------------- */

enum { SR_NONE = 0, SR_WAITING = 1, SR_RUNNING = 2 };

/* Bytes of the owner digest in a request record (ipc/pipeline_req.h). */
#define SCHED_OWNER_LEN sizeof(((struct rs_pipe_req *)0)->owner)

/* Private mirror of one request record while WAITING or RUNNING. */
struct sreq {
    uint32_t gen;        /* record generation it mirrors */
    uint8_t st;          /* SR_* */
    uint8_t in_batch;    /* in the batch being built or in flight */
    uint16_t pad;
    int32_t prio;        /* priority under the priority policy, 0 under FCFS */
    uint64_t handle;     /* arrival order */
    uint32_t n_prompt;
    uint32_t len;        /* token list length last seen */
    uint32_t n_computed; /* == record's n_computed */
    uint32_t slot;       /* running slot (KV row), SCHED_NONE while waiting */
    uint32_t n_blocks;   /* == the row's n_blocks */
    uint32_t n_hashed;   /* full blocks offered to the prefix cache so far */
    uint64_t last_hash;  /* chained hash of block n_hashed - 1 (0 before the first) */
    uint32_t last_cached;/* block caching block n_hashed - 1 (the next one's parent), or NONE */
    int32_t next_tok;    /* token at position n_computed when known from a result, else -1 */
    uint32_t heap_pos;   /* index in the waiting heap */
    uint8_t stamped;     /* round assigned (fair.c) */
    uint64_t round;      /* fair-queuing round: orders after prio, before handle */
};

/* One sequence of the batch being built. */
struct plan_seq {
    uint32_t idx;        /* request table index */
    uint32_t pos0;
    uint32_t n_tokens;
    uint32_t want_logits;
};

/* The step-time budget's options (schedulerd --max-step-ms, --min-prefill-tokens). */
struct budget_opts {
    double max_step_ms;   /* a step's target time by the measured cost model; 0: no budget */
    uint32_t min_prefill; /* prefill tokens a step may take whatever the budget says (>= 1) */
    double fair_factor;   /* --fair-step-factor (share.c); 0: every decode runs every step */
    uint32_t burst_lift;  /* 1: no budget while more clients wait than stream (budget.c) */
};

struct sched {
    struct rs_pipe *p;
    struct rs_pipe_doors *doors; /* borrowed; NULL = ring nobody */
    struct rs_pipe_config cfg;
    struct rs_metrics_block *m;
    struct kv_block_pool kv;
    struct sreq *req;            /* cfg.max_requests */
    uint32_t *heap, n_heap;      /* waiting, min-heap by (prio, handle) */
    uint32_t *run, n_run;        /* running, sorted by (prio, handle) */
    uint32_t *free_slots, n_free_slots;
    uint32_t *slot_req;          /* running slot -> request index, SCHED_NONE */
    struct plan_seq *plan;       /* cfg.max_seqs */
    uint32_t n_plan, plan_tokens;
    uint64_t plan_prefill, plan_decode; /* tokens of the batch being written, by kind */
    uint32_t *flight;            /* request indices of the batch in flight */
    uint32_t n_flight;
    uint64_t inflight_id;        /* batch committed and not yet answered, 0 = none */
    uint64_t inflight_ns;        /* its commit time */
    int inflight_guess;          /* inflight_id is rebuild's guess (the last id allocated) */
    uint32_t kv_inc;             /* == shared->kv_launcher_inc */
    int fenced;                  /* a newer schedulerd took over: write nothing more */
    uint32_t n_unannounced;      /* requests finished since postprocd was last woken */
    uint64_t last_rescan_ns;
    uint64_t rescan_ns;          /* period of the full table rescan */
    int32_t *tokbuf;             /* cfg.n_ctx tokens of scratch */
    uint32_t *blkbuf;            /* cfg.max_blocks_per_seq blocks of scratch */
    uint64_t *hashbuf;           /* cfg.max_blocks_per_seq hashes of scratch */
    struct budget_opts budget;   /* zero (no budget) from sched_create; main.c sets it */
    struct fair *fair;           /* rounds per owner (fair.c) */
    struct share *share;         /* owners' decodes this step (share.c) */
    uint32_t owner_cap;          /* running slots one owner may hold while others wait; 0 none */
    uint32_t *aside, n_aside;    /* waiting heads passed over this step (plan.c), cfg.max_requests */
};

/* Admission options (schedulerd --owner-running-share). */
struct admit_opts {
    uint32_t owner_running_share; /* percent of max_seqs one owner may run; 100: no cap */
};

/* The running-slot cap of `share` percent of max_seqs: max(1, ceil); 0 (none) at 100. */
uint32_t sched_owner_cap(uint32_t max_seqs, uint32_t share);

/* fair.c ------------------------------------------------------------------------------------- */

/* Tokens a stream nobody reads may run ahead of what was sent before it pauses. */
#define FAIR_PAUSE_BACKLOG 64u

struct fair;
rs_err fair_create(uint32_t max_requests, struct fair **out);
void fair_destroy(struct fair **f);
/* Gives waiting request idx its owner's next round (kept when it was preempted). */
void fair_stamp(struct sched *s, uint32_t idx);
/* While on (start-up rebuild), requests found waiting get round 0: FCFS before new ones. */
void fair_rebuilding(struct fair *f, int on);
/* Request idx was admitted: its round is now being served. */
void fair_served(struct sched *s, uint32_t idx);
/* 1 while running stream idx is paused: its client is not reading and it ran ahead. */
int fair_paused(const struct sched *s, uint32_t idx);

/* sched.c ------------------------------------------------------------------------------------ */

/*
 * Creates the scheduler of opened pipeline p (stage schedulerd) and rebuilds
 * its state from shared memory (rebuild.c), applying a result left in the
 * ring. `doors` (borrowed, may be NULL) rings the other stages. RS_OK with
 * *out owned (sched_destroy); RS_ENOMEM; RS_ESTALE when fenced meanwhile.
 */
rs_err sched_create(struct rs_pipe *p, struct rs_pipe_doors *doors, struct sched **out);

/* Frees private state only (shared memory is left as is). Accepts NULL, clears *s. */
void sched_destroy(struct sched **s);

/*
 * One pass of work: applies any result in the ring, rescans the table when
 * the rescan period passed (or `force_rescan`), reacts to a new launcher
 * incarnation and, with nothing in flight, plans and commits the next batch.
 * Returns 1 when a batch was committed, 0 when not, RS_ESTALE once fenced.
 */
int sched_work(struct sched *s, int force_rescan);

/* Doorbell hints (idempotent, may be stale): a request was committed / got a finish word. */
void sched_note_ready(struct sched *s, uint32_t idx, uint32_t gen);
void sched_note_cancel(struct sched *s, uint32_t idx, uint32_t gen);

/* Full table rescan (state words, then finish words of known requests). */
void sched_rescan(struct sched *s);

/* Updates the KV and queue gauges. */
void sched_gauges(struct sched *s);

/* Rings postprocd's `wake` once if requests finished since the last call. */
void sched_announce(struct sched *s);

/* Marks s fenced (logs once); returns RS_ESTALE. */
rs_err sched_fence(struct sched *s);

/* Rings stage `to` with a doorbell when doors exist. */
void sched_ring(struct sched *s, enum rs_pipe_stage to, enum rs_wire_door_kind kind, uint64_t a,
                uint64_t b);

/* queue.c: the waiting heap and the running list, ordered by (prio, handle) --------------- */

/* Adds waiting request idx / takes it out (no-op if absent): O(log n). */
void waitq_push(struct sched *s, uint32_t idx);
void waitq_remove(struct sched *s, uint32_t idx);
/* Moves the top to s->aside without counting it served; waitq_restore puts all back. */
void waitq_set_aside(struct sched *s);
void waitq_restore(struct sched *s);
/* The first waiting request in (prio, handle) order, SCHED_NONE when empty. */
static inline uint32_t waitq_top(const struct sched *s)
{
    return s->n_heap ? s->heap[0] : SCHED_NONE;
}
/* Adds running request idx in order / takes it out (no-op if absent): O(n) moves. */
void runq_insert(struct sched *s, uint32_t idx);
/* Position of idx in the running list, or where it would go (O(log n)). */
uint32_t runq_find(const struct sched *s, uint32_t idx);
void runq_remove(struct sched *s, uint32_t idx);

/* request.c: lifecycle moves of one request ------------------------------------------------ */

/*
 * Starts tracking record ref (WAITING, published by tokenizerd or left by a
 * preemption): mirror, normalised schedulerd fields, waiting heap. A record
 * that breaks the layout's bounds is finished with an error. RS_OK, RS_ESTALE
 * (gone or not WAITING), or RS_ESTALE after fencing.
 */
rs_err req_adopt(struct sched *s, struct rs_table_ref ref);

/*
 * Ends request idx (WAITING, or RUNNING and not in flight): sets the finish
 * word to `word` unless one is set, stamps finished_ns, moves the record to
 * FINISHED, then clears its KV row and releases its blocks, and rings
 * postprocd. RS_OK or RS_ESTALE (fenced).
 */
rs_err req_finish(struct sched *s, uint32_t idx, uint32_t word);

/*
 * Recompute preemption of running request idx (not in the batch): RUNNING ->
 * WAITING first, then n_computed 0, row cleared, blocks released (last
 * first, so its deepest cached block is evicted first). `count` adds to the
 * preemption metric (0 for a launcher reset).
 */
rs_err req_preempt(struct sched *s, uint32_t idx, int count);

/* Writes running slot `slot`'s KV row for request ref: blocks[0..n), n_blocks, then owner. */
void req_row_open(struct sched *s, struct rs_table_ref ref, uint32_t slot, const uint32_t *blocks,
                  uint32_t n);

/* Appends block b to request idx's KV row (the entry, then n_blocks with release). */
void req_row_append(struct sched *s, uint32_t idx, uint32_t b);

/* Clears running slot `slot`'s KV row (owner first). */
void req_row_clear(struct sched *s, uint32_t slot);

/*
 * Offers request idx's newly full computed blocks to the prefix cache
 * (blocks [n_hashed, n_computed / block_size)). Reads their tokens.
 */
void req_register_blocks(struct sched *s, uint32_t idx);

/*
 * The launcher's K/V is gone (new incarnation, or a result said so): every
 * running request is preempted for recompute, the prefix cache forgotten,
 * then kv_launcher_inc := inc in shared memory. Only with nothing in flight.
 */
rs_err req_reset_all(struct sched *s, uint32_t inc);

/* plan.c: decides the next step -------------------------------------------------------------- */

/*
 * Builds s->plan under max_seqs / max_batched_tokens (and the step-time
 * budget for prefill, budget.c): running requests in (prio, handle) order (finishing those with a finish word, allocating
 * blocks, preempting the latest ones not yet in the batch when blocks run
 * out), then admits waiting requests in order with prefix-cache hits while
 * slots, tokens and blocks last, passing over owners at owner_cap while
 * another owner waits. Returns the number of sequences planned, or
 * RS_ESTALE once fenced. Only with nothing in flight.
 */
int plan_step(struct sched *s);

/*
 * The longest cached prefix of the list tok[0..len): full blocks whose tokens
 * all lie below len - 1 (the last token is always computed: its logits are
 * needed). Fills s->blkbuf[0..n) and s->hashbuf, returns n.
 */
uint32_t plan_prefix_match(struct sched *s, const int32_t *tok, uint32_t len);

/* budget.c: the step-time budget -------------------------------------------------------- */

/* The cost model launcherd publishes (its cost_* gauges): 0 with *fit set, -1 none yet. */
int budget_fit(const struct sched *s, struct rs_step_cost_fit *fit);

/*
 * Prefill tokens a step holding n_decode decodes may take so that
 * fit's predicted time stays under o->max_step_ms: at least o->min_prefill,
 * at most cap (the tokens left under --max-batched-tokens). cap when there
 * is no budget or the fit has no prefill cost. Pure.
 */
uint32_t budget_prefill(const struct budget_opts *o, const struct rs_step_cost_fit *fit,
                        uint32_t n_decode, uint32_t cap);

/*
 * budget_prefill with the fit launcherd publishes (its cost_* gauges; cap
 * while none is published), for a step holding n_decode decodes. cap also
 * in a burst under o->burst_lift: more owners with a request waiting for a
 * first token (running with prompt left, or queued where a free slot could
 * admit it) than established streams (running requests with one token
 * left and two outputs or more, not paused). The result also goes to the
 * prefill_budget_last gauge.
 */
uint32_t budget_step(struct sched *s, uint32_t n_decode, uint32_t cap);

/* batch.c: writes and commits the planned batch -------------------------------------------- */

/*
 * Claims a batch ring slot, plans into it and commits it (marks the records
 * in flight first), then rings launcherd. Returns 1 when committed, 0 when
 * there was nothing to run or the ring is full, RS_ESTALE once fenced.
 */
int batch_step(struct sched *s);

/* result.c: applies results ------------------------------------------------------------------ */

/*
 * Takes every result in the ring and applies the one answering the batch in
 * flight (absolute assignments, once per row: a row counts only while its
 * record still names that batch), registers newly full blocks, finishes
 * requests whose finish word is set, releases the record. Results for other
 * batches (repeats after a launcher restart) are released unused. Returns
 * the number applied, or RS_ESTALE once fenced.
 */
int result_poll(struct sched *s);

/* Forgets the batch in flight: records' inflight_batch, the mirrors' in_batch (lists refreshed). */
void result_clear_flight(struct sched *s);

/* rebuild.c -------------------------------------------------------------------------------- */

/* Rebuilds every private index from shared memory (see rebuild.c). RS_OK or RS_ESTALE. */
rs_err rebuild_all(struct sched *s);


/* share.c: owners' shares of a step's decodes --------------------------------------------- */

struct share;
rs_err share_create(uint32_t max_seqs, struct share **out);
void share_destroy(struct share **sh);
/* Forgets the last step's owners and level (every decode runs until share_plan_level). */
void share_reset(struct share *sh);
/* Counts running request idx's decode toward its owner's demand this step. */
void share_demand(struct sched *s, uint32_t idx);
/*
 * The fair level for the owners' demands m[0..k) (sorted here): the most
 * decodes one owner may run so that the owners above it add at most
 * (factor - 1) times the fit's cost of the lighter owners' decodes, never
 * below a lighter owner's demand; UINT32_MAX (no limit) with fewer than two
 * owners, factor 0 or no decode cost in the fit.
 */
uint32_t share_level_of(uint32_t *m, uint32_t k, double factor, const struct rs_step_cost_fit *fit);
/* Sets this step's level from the demands counted (fair_level_last gauge). */
void share_plan_level(struct sched *s, const struct rs_step_cost_fit *fit);
/* 1 when idx's owner is below the level (its decode is counted), 0 to defer it this step. */
int share_take(struct sched *s, uint32_t idx);

#endif

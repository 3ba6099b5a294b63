/* SPDX-License-Identifier: MIT */
/*
 * The request record: one slot of the "requests" table (table.h) per request
 * in flight, written by the four stages in turn, with its token list
 * (arena.h) and logprob list (pipeline_logprob.h) stored after it. Leaves
 * out the policies that move it (schedulerd) and the wire format (wire*.h).
 *
 * States (table.h user states) and who moves them:
 *
 *   FREE ─claim─▶ CLAIMED ─publish─▶ WAITING ─admit─▶ RUNNING ─┐ finish word set,
 *    ▲  tokenizerd    │     tokenizerd  ▲    schedulerd          │ KV freed, no batch
 *    │                │ commit failed   └──── preempt / reset ───┘ in flight
 *    ├────────────────┘                                          ▼
 *    └──────── free (postprocd after the final; tokenizerd ── FINISHED (schedulerd,
 *              when the id is reused after its final)           from WAITING or RUNNING)
 *
 * | transition            | stage      | function (file)                     | atomic op         |
 * |-----------------------|------------|-------------------------------------|-------------------|
 * | FREE -> CLAIMED/inc   | tokenizerd | rs_table_claim in intake (intake.c) | CAS acquire       |
 * | CLAIMED -> WAITING    | tokenizerd | rs_table_publish in commit          | CAS release (P1)  |
 * | CLAIMED -> FREE       | tokenizerd | rs_arena_free_record in commit      | CAS               |
 * | WAITING -> RUNNING    | schedulerd | rs_table_transition in admit        | CAS acq_rel       |
 * |                       |            | (plan.c)                            |                   |
 * | RUNNING -> WAITING    | schedulerd | req_preempt (request.c),            | CAS acq_rel       |
 * |                       |            | adopt_running (rebuild.c)           |                   |
 * | WAITING/RUNNING ->    | schedulerd | req_finish (request.c)              | CAS acq_rel       |
 * |   FINISHED            |            |                                     |                   |
 * | FINISHED -> FREE/g+1  | postprocd  | postd_release (final.c); tokenizerd | CAS release       |
 * |                       |            | answer_existing (intake.c)          |                   |
 * | finish 0 -> word      | any stage  | rs_pipe_finish_set                  | CAS acq_rel (P2)  |
 * | cursor flip           | postprocd  | postd_cursor_publish (cursor.c)     | store release (P3)|
 *
 * P1: the publish releases the intake fields and the sealed prompt;
 * schedulerd's rs_table_get/next acquire them (C1). P2: the finish word is
 * set once, by CAS from 0, by whichever stage first decides the request
 * ends: launcherd (EOS, stop token, length), postprocd (stop string, client
 * gone), tokenizerd (client cancel), schedulerd (error); readers load it
 * acquire. P3: postprocd writes the spare cursor, then flips cursor_idx;
 * rs_pipe_cursor_cur acquires it (C3). Token list: tokenizerd writes the
 * prompt while CLAIMED and seals it; launcherd appends each sampled token.
 *
 * Invariants (rs_pipe_req_check), true at every instant, a SIGKILL
 * anywhere included, while every stage follows the table above:
 *   Q1 every record is FREE, CLAIMED, WAITING, RUNNING or FINISHED.
 *   Q2 a FINISHED record has its finish word set (schedulerd sets or
 *      finds it before moving the record).
 *   Q3 a set finish word names a reason 1..4 (stop, length, abort, error)
 *      and a stage.
 *   Q4 a published record (WAITING, RUNNING, FINISHED) has
 *      1 <= n_prompt <= token list length <= n_ctx and
 *      n_computed <= token list length.
 *   Q5 postprocd's current cursor never runs ahead of the output:
 *      n_done <= token list length - n_prompt.
 *   Q6 no two RUNNING records hold the same running slot; a RUNNING
 *      record's slot, when set, is below max_seqs and its KV row names the
 *      record as owner (schedulerd opens the row before admitting and
 *      clears the slot before finishing).
 *   Q7 a KV row whose owner is a RUNNING record is that record's slot, or
 *      the record is between its two finishing writes (slot NO_SLOT); such
 *      a row has at most max_blocks_per_seq blocks, each below n_kv_blocks.
 */
#ifndef RS_PIPELINE_REQ_H
#define RS_PIPELINE_REQ_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/detok.h"
#include "common/err.h"
#include "common/sampling.h"
#include "common/stopstr.h"
#include "ipc/pipeline.h"
#include "ipc/table.h"
#include "ipc/wire.h"

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
    uint64_t handle;                    /* server-wide request number (shared->next_handle) */
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
    /* tokenizerd's (intake, immutable once published): the client that submitted it
     * (struct rs_pipe_owner, pipeline_owner.h); only it may cancel, resume or release it,
     * and postprocd sends its output only to that owner's connection */
    uint8_t owner[16];
    /* the token list (arena.h) follows at RS_PIPE_REQ_LIST_OFFSET, then the logprob list at
       rs_pipe_lp_list_offset() (pipeline_logprob.h) */
};

#define RS_PIPE_REQ_LIST_OFFSET ((sizeof(struct rs_pipe_req) + 63u) & ~(uint64_t)63u)

/* Bytes of a record's token list (n_ctx tokens in chunk_tokens chunks). */
uint64_t rs_pipe_token_list_bytes(const struct rs_pipe_config *c);

/* Record of table index i (any state). */
static inline struct rs_pipe_req *rs_pipe_req_at(const struct rs_pipe *p, uint32_t i)
{
    return (struct rs_pipe_req *)rs_table_record(p->requests, i);
}

/* Current postprocd cursor of r (acquire, C3). */
static inline struct rs_pipe_cursor *rs_pipe_cursor_cur(struct rs_pipe_req *r)
{
    return &r->cursor[atomic_load_explicit(&r->cursor_idx, memory_order_acquire) & 1u];
}

/* Sets the finish word once (P2); returns 1 if this call set it, 0 if it was already set. */
static inline int rs_pipe_finish_set(struct rs_pipe_req *r, uint32_t word)
{
    uint32_t zero = 0;
    return atomic_compare_exchange_strong_explicit(&r->finish, &zero, word, memory_order_acq_rel,
                                                   memory_order_acquire);
}

/* Stop strings of r as the arrays stopstr.h wants (ptrs/lens need RS_WIRE_STOP_MAX entries). */
size_t rs_pipe_req_stops(const struct rs_pipe_req *r, const char **ptrs, size_t *lens);

/* What rs_pipe_req_check counted. */
struct rs_pipe_req_stats {
    uint32_t n_state[5]; /* FREE, CLAIMED, WAITING, RUNNING, FINISHED */
    uint32_t n_finishing; /* RUNNING records between their two finishing writes (Q7) */
};

/*
 * Asserts Q1..Q7 over every record and KV row (see above); fills *out when
 * not NULL. Returns RS_OK, or RS_EMISMATCH after logging the first broken
 * invariant with the record's index. Reads only: any process, a read-only
 * view (rs_pipe_inspect) included. It reads the records one after another,
 * so against stages that are moving them it can see two records at
 * different moments: tests call it after every step and recovery, where
 * the stages are idle or stopped.
 */
rs_err rs_pipe_req_check(const struct rs_pipe *p, struct rs_pipe_req_stats *out);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * What the schedulerd tests share: a pipeline instance opened in this
 * process as tokenizerd (writes request records), launcherd (answers
 * batches) and postprocd (checks and frees finished requests), a launcher
 * that returns tokens at no cost but checks every batch against shared
 * memory, and an audit of KV rows and block refcounts. The launcher keeps a
 * simulated KV cache (the token each block position was computed from, per
 * launcher incarnation), so a block table that points at the wrong block, a
 * prefix hit on the wrong content or a write into a shared block fails the
 * check that the scheduler's claim "positions [0, pos0) are computed" is true.
 * Sampled tokens are a pure function of (handle, output index), so outputs
 * after preemptions, restarts and recomputes must equal a run without them.
 * Leaves out sockets (the integration test adds doorbells).
 */
#ifndef RS_SCHED_FIXTURE_H
#define RS_SCHED_FIXTURE_H

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/clock.h"
#include "ipc/pipeline_batch.h"
#include "ipc/pipeline_kv.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "ipc/pipeline_result.h"
#include "ipc/wire_server.h"
#include "tests/pipeline_harness.h"
#include "tests/rs_test.h"

#define SFX_MAX_REQ 8192

struct sfx_req {
    uint64_t handle;
    struct rs_table_ref ref;
    uint32_t n_prompt, max_tokens;
    int done;               /* reaped by sfx_reap */
    uint32_t reason, n_out; /* finish reason and output tokens when reaped */
    uint32_t n_cached, n_preempted;
};

struct sfx {
    struct rs_pipe_config cfg;
    struct rs_pipe *tok, *lau, *post;
    int32_t *simkv;         /* n_kv_blocks x block_size tokens, -1 = not computed */
    uint32_t sim_inc;       /* launcher incarnation the simulated K/V belongs to */
    struct sfx_req req[SFX_MAX_REQ];
    uint32_t n_req;
    uint64_t batches, kv_lost, max_seqs_seen, max_tokens_seen;
    char why[512];          /* the first check that failed */
    int hostile_launcher;   /* 1: answers break the protocol on purpose (fuzz_sched_result), so
                               the records' invariants (rs_pipe_req_check) are not audited */
};

extern char sfx_instance[64];;

void sfx_atexit(void);

/* Sets up a small configuration on stories260K (vocab 512); RS_TEST_SKIP without it. */
int sfx_config(struct rs_pipe_config *c, uint32_t n_ctx, uint32_t kv_blocks,
               uint32_t max_seqs, uint32_t max_tokens);

int sfx_fail(struct sfx *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int sfx_fail(struct sfx *f, const char *fmt, ...);

/* Resolves cfg and opens tokenizerd, launcherd and postprocd roles; 0 ok. */
int sfx_open(struct sfx *f, struct rs_pipe_config *cfg);

void sfx_close(struct sfx *f);

/* A new launcher incarnation: its K/V starts empty. */
int sfx_restart_launcher(struct sfx *f);

/* The token the simulated sampler gives request `handle` at output index i (never 0..2). */
int32_t sfx_token(const struct sfx *f, uint64_t handle, uint32_t i);

/*
 * Writes and publishes a request as tokenizerd would: prompt (n tokens),
 * max_tokens outputs, priority. Returns its index in f->req, or -1.
 */
int sfx_submit(struct sfx *f, const int32_t *prompt, uint32_t n, uint32_t max_tokens,
               int32_t priority);

/* A prompt of n tokens: `shared` tokens common to every prompt of `family`, then unique ones. */
void sfx_prompt(int32_t *out, uint32_t n, uint32_t shared, uint32_t family,
                uint32_t unique);

/* Reads the whole token list of ref into a malloc'd array; NULL if gone. */
int32_t *sfx_list(struct rs_pipe *p, struct rs_table_ref ref, uint32_t *len);

/* Rows of running slots that reference block b (a shared block has more than one). */
uint32_t sfx_block_users(const struct sfx *f, uint32_t b);

/* Checks one batch sequence against the record, its list, its row and the simulated K/V. */
int sfx_check_seq(struct sfx *f, const struct rs_pipe_batch *b,
                  const struct rs_pipe_batch_seq *q);

/* A batch taken from the ring, checked, not yet answered. */
struct sfx_batch {
    struct rs_ring_rd rd;
    const struct rs_pipe_batch *b;
    int kv_lost; /* planned for another launcher incarnation */
};

/* Takes the next batch: 1 got (checked), 0 none, -1 a check failed (f->why). */
int sfx_take(struct sfx *f, struct sfx_batch *bt);

/* Computes one sequence: K/V into simkv, then (want_logits) the token, appended once. */
int sfx_run_seq(struct sfx *f, const struct rs_pipe_batch_seq *q,
                struct rs_pipe_result_row *row);

/* Answers a taken batch (status OK unless it was planned for an older launcher) and releases it. */
int sfx_answer(struct sfx *f, struct sfx_batch *bt);

/*
 * As postprocd: every FINISHED record is checked (outputs equal the sampler's
 * sequence; a LENGTH finish has exactly max_tokens) and freed. Returns the
 * number reaped, -1 on a wrong output.
 */
int sfx_reap(struct sfx *f);

/* A scheduler counter or gauge. */
uint64_t sfx_metric(const struct sfx *f, unsigned i);

/*
 * Audits shared memory while schedulerd is between steps: each row belongs to
 * a RUNNING record naming that slot, each RUNNING record has one row, a block
 * in two rows is a full computed block at the same position holding the same
 * tokens, and the KV gauges match: used = distinct blocks in rows, cached =
 * valid kv_meta entries of the current launcher outside rows, and used +
 * cached + free = the pool. 0 ok, -1 (f->why) otherwise.
 */
int sfx_audit_row(struct sfx *f, uint32_t s, uint32_t *users, int count);

int sfx_audit(struct sfx *f);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * launcherd's internals: the loaded runtime (model, vocab stop ids, paged KV
 * cache, sampler), the per-batch work (batch record -> model step ->
 * sampling -> result record) and the serving loop. The daemon is main.c;
 * these files are also the library rs_launcherd that bench drivers link.
 * Leaves out: planning and KV block allocation (schedulerd owns both; the
 * launcher only follows the block tables it is given), text (postprocd).
 */
#ifndef RS_LAUNCHER_H
#define RS_LAUNCHER_H

#include <stdint.h>

#include "common/err.h"
#include "common/opt.h"
#include "common/placement.h"
#include "common/step_cost.h"
#include "common/vocab.h"
#include "ipc/pipeline_batch.h"
#include "ipc/pipeline_door.h"
#include "ipc/pipeline_result.h"
#include "launcherd/engine/model.h"
#include "launcherd/engine/sampler.h"

#define LAUNCHER_EOG_MAX 64 /* end-of-generation ids kept from the vocab */

/* Options of the daemon beyond the shared stage ones (ipc/stage.h). */
struct launcher_opts {
    int n_threads;    /* model threads; 0 = every CPU this process may use */
    int isa;          /* RS_MODEL_ISA_* */
    unsigned spin_us; /* after a batch, poll the batch ring this long before sleeping (0: off) */
    char backend[8];  /* model backend: "auto" ("" too: the GPU when it can load, else the CPU),
                         "cpu" or "cuda" (rs_model_opts.backend) */
    int tp;           /* --tp: tensor-parallel shards (rs_model_opts.tp); 0 = none */
    int deterministic; /* --deterministic (rs_model_opts.deterministic) */
    int dot;           /* RS_MODEL_DOT_*: AUTO (default), EXACT (--exact-dot), INT8 (--int8-dot) */
};

/* The table of those options (main.c), over struct launcher_opts. */
extern const struct rs_opt launcher_opt_table[];

/* What one processed batch did (for the loop's doorbells, logs and the benches). */
struct launcher_step_info {
    uint64_t batch_id;
    uint32_t status; /* enum rs_pipe_result_status */
    uint32_t n_rows;
    uint32_t n_sampled; /* rows that appended a new token */
    uint32_t n_refused; /* seqs not run (ERROR rows) */
};

struct launcher_mask;

struct launcher {
    struct rs_pipe *p; /* borrowed: the opened pipeline (stage launcherd) */
    rs_model *model;
    rs_vocab *vocab;
    rs_kvcache *kv;
    rs_sampler *smp;
    int32_t eog[LAUNCHER_EOG_MAX];
    uint32_t n_eog;
    uint32_t n_vocab;
    uint64_t load_ns; /* weight load + KV allocation time */
    uint64_t spin_ns; /* launcher_opts.spin_us in ns */

    /* per-batch scratch, sized from the configuration (max_seqs, n_ctx, n_vocab) */
    struct rs_model_seq *seqs; /* the seqs passed to the model (refused ones left out) */
    uint32_t *run_of;          /* batch seq -> index in seqs, or UINT32_MAX when refused */
    uint32_t *tables;          /* max_seqs x max_blocks_per_seq block ids copied from kv rows */
    int32_t *history;          /* n_ctx tokens: a request's list for the penalties */
    float *logits;             /* n_vocab: the row being sampled (the sampler edits it) */
    struct rs_wire_door door;  /* tokens_ready of the batch being processed */
    struct rs_wire_door rx;    /* doorbell received */

    /* the batch held from the ring (serve.c): kept across ticks while the result ring is full */
    struct rs_ring_rd rd;
    int held, crc_ok;
    int busy;            /* the last pass answered a batch: look again without waiting */

    struct rs_step_cost cost; /* measured steps for schedulerd's step-time budget (cost.c) */
    uint64_t spin_until; /* CLOCK_MONOTONIC until which the loop polls instead of sleeping */
    struct launcher_mask *mask; /* mask.c: matchers and the mask thread; NULL until the first
                                   constrained request */
};

/*
 * Adds the step of a batch's seqs[0..n_seqs) (forward + sampling, ns; n_seqs
 * as checked) to l->cost and publishes the
 * refitted cost model in launcherd's metrics block (cost_* gauges) for
 * schedulerd's step-time budget. launcherd's main thread, after each step.
 */
void launcher_cost_note(struct launcher *l, const struct rs_pipe_batch_seq *seqs, uint32_t n_seqs,
                        uint64_t ns);

/*
 * Loads the model at cfg->model_path with opts, its vocab's end-of-generation
 * ids, a KV cache of cfg->n_kv_blocks x cfg->block_size tokens and a sampler,
 * and checks the model against cfg (vocab size, context). Fills l (zeroed by
 * the caller) except p. RS_OK, or an rs_err with the reason in err.
 * launcherd's main thread, before rs_pipe_open (a bad model never fences a
 * running launcher).
 */
rs_err launcher_load(struct launcher *l, const struct rs_pipe_config *cfg,
                     const struct launcher_opts *opts, char *err, size_t err_len);

/* Frees everything launcher_load made; safe on a partly loaded l. */
void launcher_unload(struct launcher *l);

/*
 * Processes batch ring record rd (crc_ok 0 when its checksum failed) into
 * the result record at out (cap bytes, a claimed result slot): rejected
 * (ERROR, no rows) when malformed, KV_LOST when planned for another launcher
 * incarnation, else the model step and each row's sampling, token append,
 * logprobs and stop rules (pipeline.h). Returns the result's length in
 * bytes and fills *info. Main thread only (it owns the model).
 */
uint32_t launcher_run(struct launcher *l, const struct rs_ring_rd *rd, int crc_ok, void *out,
                      uint32_t cap, struct launcher_step_info *info);

/*
 * Row phase of launcher_run for batch seq s whose logits are lg (NULL when
 * the step failed): keeps output s->out_index when the list already holds
 * it, else samples it, stores its logprobs and appends it; then applies the
 * stop rules. Fills row; returns 1 when the row carries a token. (row.c)
 */
int launcher_row(struct launcher *l, uint64_t batch_id, const struct rs_pipe_batch_seq *s,
                 const float *lg, struct rs_pipe_result_row *row);

/* Sets request ref's finish word to ERROR (who launcherd) and logs why. (row.c) */
void launcher_fail_request(struct launcher *l, uint64_t batch_id, struct rs_table_ref ref,
                           const char *why);

/*
 * One pass of the serving loop (the stage skeleton runs it): waits for a
 * doorbell at most a tick (or polls, spinning), then processes every
 * committed batch, commits its result, releases the batch and rings
 * schedulerd and postprocd. RS_OK; RS_ESTALE when this incarnation was
 * fenced; RS_EIO when the rings are corrupt (logged). (serve.c)
 */
rs_err launcher_pass(struct launcher *l, struct rs_pipe_doors *doors);

/* --- structured output (mask.c) ------------------------------------------------------------ */

enum launcher_mask_verdict {
    LAUNCHER_MASK_FREE = 0, /* the request has no constraint: logits untouched */
    LAUNCHER_MASK_APPLIED,  /* mask and biases applied: sample */
    LAUNCHER_MASK_END,      /* the constraint accepts nothing more: finish with stop */
    LAUNCHER_MASK_DEAD,     /* no token is allowed: finish with an error */
    LAUNCHER_MASK_FAILED,   /* the constraint could not be loaded or replayed: error */
};

/*
 * Queues the mask of output k of batch seq s on the mask thread when its
 * request is constrained (no-op otherwise, or when queued or done). Model
 * thread: prepare() for each seq wanting logits, and after output k - 1 of
 * it was appended.
 */
void launcher_mask_queue(struct launcher *l, const struct rs_pipe_batch_seq *s, uint32_t k);

/*
 * Before sampling output k of s from logits (n_vocab, edited in place):
 * waits for its mask row, then applies it and the request's logit_bias.
 * Model thread.
 */
enum launcher_mask_verdict launcher_mask_apply(struct launcher *l, const struct rs_pipe_batch_seq *s,
                                               uint32_t k, float *logits);

/* Stops the mask thread and frees the matchers (launcher_unload). */
void launcher_mask_destroy(struct launcher *l);

#endif

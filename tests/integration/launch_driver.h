/* SPDX-License-Identifier: MIT */
/*
 * A driver that runs the real launcherd binary alone: it opens the pipeline
 * itself as tokenizerd (writes request records) and schedulerd (admits
 * requests with KV block tables, writes batch records, reads results, plans
 * re-prefills after a launcher change), starts and kills launcherd as a
 * child process, and rings it like schedulerd would. Shared by
 * tests/integration/test_launcherd.c and bench/bench_launch.c,
 * bench_pipeline_overhead.c. A minimal planner, not schedulerd's policies:
 * every unfinished request of the set runs each step (a prefill of what its
 * list holds beyond its K/V, or one decode token), blocks are fixed per
 * running slot (a permutation of the pool, so tables are not contiguous).
 */
#ifndef RS_LAUNCH_DRIVER_H
#define RS_LAUNCH_DRIVER_H

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "ipc/pipeline_batch.h"
#include "ipc/pipeline_door.h"
#include "ipc/pipeline_kv.h"
#include "ipc/pipeline_req.h"
#include "ipc/pipeline_result.h"
#include "ipc/rundir.h"
#include "tests/pipeline_harness.h"

#define LD_MAX_SEQS 64
#define LD_MAX_ARGS 32

struct ld {
    struct rs_pipe_config cfg;
    char rundir[RS_RUNDIR_PATH_MAX + 1];
    char log_path[300];   /* launcherd's stderr (appended across restarts) */
    char bin[300];        /* the launcherd executable */
    const char *extra[8]; /* extra launcherd arguments (e.g. --threads 1) */
    int n_extra;
    const char *failpoint;       /* RS_FAILPOINT for the next ld_spawn (NULL: none) */
    pid_t pid;                   /* running launcherd, 0 = none */
    int died;                    /* launcherd exited while the driver waited for a result */
    uint64_t last_planned_ns;    /* planned_ns of the last batch ld_commit wrote */
    uint64_t last_seen_ns;       /* when ld_result last returned a record */
    uint64_t spin_ns;            /* ld_result polls the ring this long before sleeping */
    uint32_t inc;                /* its incarnation once ready */
    struct rs_pipe *sched, *tok; /* the roles this driver plays */
    void *zctx;
    struct rs_pipe_doors doors;  /* as schedulerd: inbox schedulerd.door */
    uint32_t stride;             /* block permutation stride (coprime with n_kv_blocks) */
    uint64_t batch_buf[1 << 13]; /* last result record read (64 KiB, 8-aligned) */
};

/* A request as the driver's planner sees it. */
struct ld_req {
    struct rs_table_ref ref;
    uint32_t slot; /* running slot = KV row */
    uint32_t n_prompt;
    uint32_t n_computed; /* tokens whose K/V the launcher holds */
};

int ld_fail(const char *what, const char *detail);

uint32_t ld_gcd(uint32_t a, uint32_t b);

/*
 * Fills d->cfg for `model` (instance name unique to this process and `tag`)
 * and resolves it. kv_blocks 0: max_seqs rows of max_blocks_per_seq blocks.
 */
int ld_config(struct ld *d, const char *model, const char *tag, uint32_t n_ctx,
              uint32_t max_requests, uint32_t max_seqs, uint32_t max_batched,
              uint32_t kv_blocks);

/*
 * Opens the pipeline as tokenizerd and schedulerd, the runtime directory
 * `rundir` and the doorbells; logs go to log_path; bin is launcherd.
 */
int ld_open(struct ld *d, const char *bin, const char *rundir, const char *log_path);

/* The launcherd role's record. */
int ld_role(struct ld *d, struct rs_role_info *info);

/* Starts launcherd and waits (up to 60 s) until a new incarnation is READY; 0 on success. */
int ld_spawn(struct ld *d);

/* Sends sig to launcherd and reaps it; returns its exit code, or 128 + signal. */
int ld_stop(struct ld *d, int sig);

/* Stops launcherd (SIGTERM), closes the roles and removes the segment. */
void ld_close(struct ld *d);

/* Writes a WAITING request as tokenizerd: prompt, sampling, max_tokens, flags, stop ids. */
int ld_submit(struct ld *d, const int32_t *prompt, uint32_t n_prompt,
              const struct rs_sampling_params *sp, uint32_t max_tokens,
              uint32_t flags, const int32_t *stop_ids, uint32_t n_stop_ids,
              struct ld_req *out);

/* Block j of running slot s: a permutation of the pool, so block tables are scattered. */
uint32_t ld_block(const struct ld *d, uint32_t s, uint32_t j);

/* As schedulerd: WAITING -> RUNNING in running slot `slot`, with its whole block table. */
int ld_admit(struct ld *d, struct ld_req *q, uint32_t slot);

/* Published token list of q into out (cap tokens); returns its length, -1 if gone. */
int ld_list(struct ld *d, const struct ld_req *q, int32_t *out, uint32_t cap);

uint32_t ld_len(struct ld *d, const struct ld_req *q);

/* One planned seq: run list tokens [pos0, pos0 + n) of q; want logits iff they end the list. */
struct ld_seq {
    const struct ld_req *q;
    uint32_t pos0, n_tokens;
};

/*
 * Commits a batch of n seqs planned for launcher incarnation `inc` and rings
 * launcherd; *id gets the batch id. Tokens come from the requests' lists.
 */
int ld_commit(struct ld *d, const struct ld_seq *seqs, uint32_t n, uint32_t inc,
              uint64_t *id);

/* 1 (and d->pid reaped, d->died set) when launcherd has exited. */
int ld_exited(struct ld *d);

/*
 * Waits up to timeout_ms for the next result record, checks it, copies it
 * to d->batch_buf and releases it. Returns the result (in d->batch_buf) or
 * NULL on timeout, a record that fails rs_pipe_result_check, or launcherd
 * gone with no result left (d->died).
 */
const struct rs_pipe_result *ld_result(struct ld *d, int timeout_ms);

/* The result for batch `id`, skipping (and counting in *older) results of earlier batches. */
const struct rs_pipe_result *ld_result_for(struct ld *d, uint64_t id, int timeout_ms,
                                           int *older);

/* Finish word of q's record (0: still running). */
uint32_t ld_finish(struct ld *d, const struct ld_req *q);

/*
 * Plans one batch: every unfinished request of qs runs what its list holds
 * beyond its K/V (all of it after a launcher change), at most max_batched
 * tokens in all (a prefill that does not fit runs in chunks). Commits it for launcher incarnation
 * `inc` (0: the current one), waits for its result, applies it (n_computed := row.computed; a
 * KV_LOST result resets every n_computed to 0). Returns the result status,
 * 3 when no request is left, -1 on failure.
 */
int ld_step(struct ld *d, struct ld_req *qs, uint32_t n, uint32_t inc);

#endif

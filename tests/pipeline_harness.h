/* SPDX-License-Identifier: MIT */
/*
 * A whole ringserve instance for tests and benchmarks: the four real daemon
 * binaries started as child processes on one model, each with its own log
 * file, a private segment name and runtime directory, and "ready" read from
 * the segment's role table (not guessed from a sleep). Any daemon can be
 * SIGKILLed, SIGSTOPped and restarted (optionally with a failpoint armed in
 * its environment), which is what the client, end-to-end and crash tests
 * need. Leaves out: supervising (no automatic restarts) and talking to the
 * daemons (client/client.h does that).
 */
#ifndef RS_PIPELINE_HARNESS_H
#define RS_PIPELINE_HARNESS_H

#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"
#include "ipc/pipeline.h"

#define RS_HARNESS_EXTRA_MAX 8 /* extra arguments per daemon */

/* What to start; zero fields take the defaults named. */
struct rs_harness_opts {
    const char *model;            /* GGUF path (required) */
    uint32_t n_ctx;               /* --ctx; 0 = the model's */
    uint32_t max_requests;        /* --max-requests; 0 = the daemons' default */
    uint32_t n_kv_blocks;         /* --kv-blocks; 0 = default */
    uint32_t max_seqs;            /* --max-seqs; 0 = default */
    uint32_t max_batched_tokens;  /* --max-batched-tokens; 0 = default */
    uint32_t launcher_threads;    /* launcherd --threads; 0 = 1 (tests share 2 cores) */
    int fast_kernels;             /* 0: launcherd --deterministic, so outputs compare bitwise
                                     with solo and in-process runs on a GPU too (the CPU
                                     backend always is); 1: the backend's fastest (benches) */
    uint32_t ready_timeout_ms;    /* per daemon start; 0 = 30000 */
    const char *bindir;           /* daemon binaries; NULL = env RS_BIN, else build/bin */
    const char *tmpdir;           /* logs and rundir parent; NULL = a fresh dir under $TMPDIR */
    /* extra arguments per stage (enum rs_pipe_stage), NULL-terminated or all-NULL */
    const char *extra[RS_PIPE_N_STAGES][RS_HARNESS_EXTRA_MAX];
};

struct rs_harness {
    struct rs_harness_opts o;
    char bindir[512];
    char dir[256];                   /* logs live here; the rundir is <dir>/run */
    char rundir[300];
    char instance[64];
    pid_t pid[RS_PIPE_N_STAGES];     /* 0 = not running */
    unsigned starts[RS_PIPE_N_STAGES];
    char log[RS_PIPE_N_STAGES][400]; /* log of the latest start of each stage */
    struct rs_pipe *view;            /* read-only view of the segment, once it exists */
};

/*
 * Starts the four daemons: schedulerd first (it creates the segment), then
 * the other three, and waits until each reports READY. RS_OK; otherwise the
 * logs of the failed daemon are printed to stderr, whatever started is
 * stopped, and RS_EIO / RS_EAGAIN (not ready in time) / RS_EINVAL is returned.
 * Test/benchmark main thread only (it forks).
 */
rs_err rs_harness_start(struct rs_harness *h, const struct rs_harness_opts *o);

/*
 * A client library instance (client/client.h) on h's instance, with each
 * request's timeout timeout_ms (generous: CI hosts are slow); NULL when it
 * cannot be created. Tests and benches make their clients through it.
 */
struct rs_client;
struct rs_client *rs_harness_client(const struct rs_harness *h, uint32_t timeout_ms);

/*
 * Starts one daemon (again): env_spec, when not NULL, is one "NAME=VALUE"
 * put in its environment (e.g. "RS_FAILPOINT=table.claim.after_cas:1").
 * wait_ready = 1 waits for READY (RS_EAGAIN on timeout, RS_EIO if it exited).
 */
rs_err rs_harness_start_stage(struct rs_harness *h, enum rs_pipe_stage s, const char *env_spec,
                              int wait_ready);

/* Waits until stage s's current process reports READY. RS_OK, RS_EAGAIN, RS_EIO (it exited). */
rs_err rs_harness_wait_ready(struct rs_harness *h, enum rs_pipe_stage s, uint32_t timeout_ms);

/* Sends sig to stage s (if running); SIGKILL and SIGTERM also reap it. Returns the exit
 * status for a reaped process (128 + signal when killed), 0 otherwise. */
int rs_harness_signal(struct rs_harness *h, enum rs_pipe_stage s, int sig);

/* Non-zero while stage s's process is alive (reaps it when it has exited). */
int rs_harness_alive(struct rs_harness *h, enum rs_pipe_stage s);

/* Exit status of a daemon that exited on its own: waits up to timeout_ms; -1 if still running. */
int rs_harness_wait_exit(struct rs_harness *h, enum rs_pipe_stage s, uint32_t timeout_ms);

/* The read-only view of the segment (metrics, handles, table), or NULL before it exists. */
struct rs_pipe *rs_harness_view(struct rs_harness *h);

/* Prints the latest log of stage s (or all four for s = RS_PIPE_N_STAGES) to stderr. */
void rs_harness_dump_logs(const struct rs_harness *h, enum rs_pipe_stage s);

/*
 * SIGTERMs every daemon still running, reaps them, removes the segment, the
 * rundir and (when the harness made it) the log directory unless keep_logs
 * or env RS_HARNESS_KEEP_LOGS=1 (the kept directory is printed). Safe on a
 * zeroed or partly started harness.
 */
void rs_harness_stop(struct rs_harness *h, int keep_logs);

/* --- for crash tests that supervise the daemons themselves (tests/crash/pipeline_chaos.h) --- */

struct rs_role_info;

/*
 * Stage s's record in the segment's role table (incarnation, phase, pid,
 * started_ns and ready_ns on CLOCK_MONOTONIC, which rs_clock_ns also reads).
 * RS_OK; RS_EAGAIN while the segment does not exist yet. Main thread.
 */
rs_err rs_harness_role(struct rs_harness *h, enum rs_pipe_stage s, struct rs_role_info *out);

/*
 * CLOCK_MONOTONIC ns at which stage s's current process (h->pid[s]) marked
 * its role READY; 0 while it has not (or the role names another process).
 */
uint64_t rs_harness_ready_ns(struct rs_harness *h, enum rs_pipe_stage s);

/*
 * Stops tracking stage s's process without signalling it, so a replacement
 * can be started while it is, e.g., SIGSTOPped (the fencing tests). Returns
 * its pid (0 if none); the caller now owns it: signal and reap it.
 */
pid_t rs_harness_forget(struct rs_harness *h, enum rs_pipe_stage s);

/* What rs_harness_audit found; every count is 0 for a clean, idle instance. */
struct rs_harness_audit {
    uint64_t records_busy;       /* request records not FREE (linger included: audit after it) */
    uint64_t chunks_reserved;    /* token arena chunks RESERVED */
    uint64_t chunks_linked;      /* token arena chunks LINKED (to any record) */
    uint64_t lp_chunks_busy;     /* logprob arena chunks not FREE */
    uint64_t ring_busy;          /* batch and result ring slots not FREE */
    uint64_t kv_rows_held;       /* KV table rows with an owner or blocks */
    uint64_t kv_blocks_used;     /* schedulerd's kv_blocks_used gauge */
    uint64_t kv_gauge_mismatch;  /* used + free + cached != --kv-blocks (0 or 1) */
    uint64_t stale_owners;       /* records, slots held by an incarnation that is not current */
    uint64_t roles_bad;          /* stages whose role is not READY in the process we started */
    uint64_t checks_failed;      /* rs_{table,arena,ring,role}_check calls that failed */
};

/*
 * Audits the segment of an idle instance (no request in flight, linger
 * over): the request table all FREE, no arena chunk RESERVED or LINKED, both
 * rings empty, every KV row unused and the KV gauges adding up, the four
 * roles READY in the processes this harness runs, nothing owned by a
 * fenced incarnation, and the ipc invariant checks (rs_table_check,
 * rs_arena_check, rs_ring_check, rs_role_check). Fills *a, prints every
 * finding to stderr, returns the number of findings (0 = clean). Main thread.
 */
int rs_harness_audit(struct rs_harness *h, struct rs_harness_audit *a);

/*
 * Completes c for a test or bench that opens the instance itself, as a
 * daemon does: reads the facts of c->model_path (common/gguf_facts.h) and
 * resolves c with them. RS_OK, or the error with err naming it. Any thread.
 */
rs_err rs_harness_config_resolve(struct rs_pipe_config *c, char *err, size_t err_len);

#endif

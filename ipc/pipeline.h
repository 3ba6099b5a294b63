/* SPDX-License-Identifier: MIT */
/*
 * An opened pipeline instance: the segment one instance's daemons share,
 * the regions it holds (roles, config, requests, tokens, batches, results,
 * kv_tables, kv_meta, metrics, logprobs) and open-or-create for the four
 * daemons. Every daemon computes the same layout from the same
 * configuration (pipeline_config.h), so whichever starts first creates the
 * segment and writes the configuration; the others attach and check it
 * field by field. What the regions hold has a header per concept:
 *
 *   pipeline_config.h   the configuration and the stages
 *   pipeline_req.h      the request record: states, transitions, invariants
 *   pipeline_logprob.h  the per-token logprob list of a record
 *   pipeline_kv.h       the KV block tables and prefix-cache entries
 *   pipeline_batch.h    the batch descriptor (schedulerd -> launcherd)
 *   pipeline_result.h   the step result (launcherd -> schedulerd)
 *   pipeline_metrics.h  the per-stage counters and histograms
 *
 * Leaves out the policies (schedulerd), the wire format (wire*.h) and the
 * doorbells (pipeline_door.h).
 */
#ifndef RS_PIPELINE_H
#define RS_PIPELINE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "ipc/arena.h"
#include "ipc/pipeline_config.h"
#include "ipc/ring.h"
#include "ipc/role.h"
#include "ipc/shm.h"
#include "ipc/table.h"

struct rs_metrics_region;
struct rs_pipe_kvmeta;

/* The "config" region. */
struct rs_pipe_shared {
    _Atomic uint64_t cfg_word;     /* 0 unset | owner inc << 32 | 1 writing | 2 ready */
    struct rs_pipe_config cfg;
    _Atomic uint64_t next_handle;  /* request handles, from 1 (tokenizerd) */
    _Atomic uint64_t next_batch;   /* batch ids, from 1 (schedulerd) */
    /* launcher incarnation whose K/V the kv_tables rows, kv_meta and the RUNNING records'
     * n_computed describe (schedulerd; 0 = none yet). A different current launcher means
     * that K/V is gone: schedulerd re-prefills every RUNNING request, then stores the new one. */
    _Atomic uint64_t kv_launcher_inc;
};

struct rs_pipe {
    struct rs_pipe_config cfg;
    rs_shm *shm;
    rs_role *role;                 /* NULL for read-only tools */
    enum rs_pipe_stage stage;
    struct rs_pipe_shared *shared;
    rs_table *requests;            /* records: pipeline_req.h */
    rs_arena *tokens;
    rs_ring *batches;              /* schedulerd (producer) and launcherd (consumer) */
    rs_ring *results;              /* launcherd (producer) and schedulerd (consumer) */
    uint8_t *kv_rows;              /* max_seqs rows of kvrow_bytes (pipeline_kv.h) */
    uint64_t kvrow_bytes;
    struct rs_pipe_kvmeta *kv_meta;/* n_kv_blocks entries */
    struct rs_metrics_region *metrics; /* pipeline_metrics.h */
    rs_arena *logprobs;            /* per-request logprob lists (pipeline_logprob.h) */
    rs_arena *constraints;         /* per-request constraints (pipeline_constraint.h) */
    uint8_t *masks;                /* the mask ring: max_seqs rows (pipeline_mask.h) */
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

/*
 * Current incarnation of `stage`'s role (0: never started): one acquire load,
 * cheap enough for every loop pass (schedulerd watches launcherd's to notice
 * that its K/V is gone). Any process, any thread.
 */
uint32_t rs_pipe_stage_inc(const struct rs_pipe *p, enum rs_pipe_stage stage);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * One pipeline instance's configuration and its stages. Every daemon of an
 * instance computes the segment layout from this struct, so all of them must
 * end with the same values: whichever opens the instance first publishes it
 * in the segment and the others compare it field by field (pipeline.h). The
 * struct is completed from the model file's facts, which the daemon reads
 * (common/gguf_facts.h); nothing here opens a file. The options that set it
 * are one table (rs_pipe_opts). Leaves out the regions it sizes (pipeline.c).
 */
#ifndef RS_PIPELINE_CONFIG_H
#define RS_PIPELINE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/gguf_facts.h"
#include "common/opt.h"
#include "ipc/rundir.h"

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

/* "tokenizerd", ...; "?" otherwise. */
const char *rs_pipe_stage_name(enum rs_pipe_stage stage);

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

/* What the pipeline options set: the configuration and the runtime directory. */
struct rs_pipe_args {
    struct rs_pipe_config cfg;
    char rundir[RS_RUNDIR_PATH_MAX + 1]; /* ipc:// socket directory; "" = rs_rundir_default */
};

/* Defaults: rs_pipe_config_default, no runtime directory. Any thread. */
void rs_pipe_args_init(struct rs_pipe_args *a);

/*
 * The pipeline options, one table (common/opt.h) over struct rs_pipe_args:
 * --instance, --model, --ctx, --block-size, --kv-blocks, --max-requests,
 * --max-seqs, --max-batched-tokens, --no-prefix-caching, --policy, --rundir.
 * Every daemon takes all of them; a tool takes the ones it needs through
 * the group's `only` list (ringserve-stat: --instance).
 */
extern const struct rs_opt rs_pipe_opts[];
#define RS_PIPE_OPTS_TITLE "pipeline options (identical for all four daemons of an instance)"

#endif

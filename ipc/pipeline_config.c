/* SPDX-License-Identifier: MIT */
/*
 * The pipeline configuration: defaults, the option table every daemon (and
 * any tool or bench that opens an instance) takes, and completion from the
 * model file's facts. Every daemon of an instance must end with the same
 * struct (rs_pipe_open compares it).
 */
#include "ipc/pipeline_config.h"

#include <errno.h>
#include <stddef.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ipc/shm.h"


const char *rs_pipe_stage_name(enum rs_pipe_stage stage)
{
    static const char *names[] = {RS_PIPE_TOKENIZERD, RS_PIPE_SCHEDULERD, RS_PIPE_LAUNCHERD,
                                  RS_PIPE_POSTPROCD};
    return (unsigned)stage < RS_PIPE_N_STAGES ? names[stage] : "?";
}

void rs_pipe_config_default(struct rs_pipe_config *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->instance, sizeof(c->instance), "default");
    c->block_size = 16;
    c->n_kv_blocks = 1024;
    c->max_requests = 1024;
    c->max_seqs = 32;
    c->max_batched_tokens = 1024;
    c->chunk_tokens = 256;
    c->batch_slots = 4;
    c->prefix_caching = 1;
    c->priority_policy = 0;
}

void rs_pipe_args_init(struct rs_pipe_args *a)
{
    memset(a, 0, sizeof(*a));
    rs_pipe_config_default(&a->cfg);
}

static int parse_instance(void *dst, const struct rs_opt *o, const char *v, char *err, size_t len)
{
    struct rs_pipe_args *a = dst;
    char probe[300];
    (void)o;
    if (strlen(v) >= sizeof(a->cfg.instance) || rs_shm_name(v, probe, sizeof(probe)) != RS_OK) {
        snprintf(err, len, "option --instance: '%.80s' must be 1..63 of [A-Za-z0-9._-]", v);
        return -1;
    }
    snprintf(a->cfg.instance, sizeof(a->cfg.instance), "%s", v);
    return 0;
}

static const char *const policies[] = {"fcfs", "priority", NULL};

#define CFG(f) offsetof(struct rs_pipe_args, cfg.f)
#define CFG_U32(nm, f, lo, hi, h)                                                                  \
    {.name = nm, .kind = RS_OPT_U32, .off = CFG(f), .min = lo, .max = hi, .arg = "N", .help = h}

const struct rs_opt rs_pipe_opts[] = {
    {.name = "instance", .kind = RS_OPT_CALL, .parse = parse_instance, .arg = "NAME",
     .help = "segment /ringserve-NAME (default: default)"},
    {.name = "model", .kind = RS_OPT_STR, .off = CFG(model_path),
     .size = sizeof(((struct rs_pipe_config *)0)->model_path), .arg = "PATH",
     .help = "the GGUF model (required)"},
    CFG_U32("ctx", n_ctx, 2, 1u << 20,
            "tokens per request, prompt + output (default: the model's)"),
    CFG_U32("block-size", block_size, 1, 1024, "tokens per KV block (default 16)"),
    CFG_U32("kv-blocks", n_kv_blocks, 1, 1u << 22, "KV blocks in the pool (default 1024)"),
    CFG_U32("max-requests", max_requests, 1, 1u << 20,
            "requests in flight, queued or running (default 1024)"),
    CFG_U32("max-seqs", max_seqs, 1, 4096, "sequences per step (default 32)"),
    CFG_U32("max-batched-tokens", max_batched_tokens, 1, 1u << 20,
            "tokens per step (default 1024)"),
    {.name = "no-prefix-caching", .kind = RS_OPT_FLAG32, .off = CFG(prefix_caching), .val = 0,
     .help = "do not reuse KV blocks across requests"},
    {.name = "policy", .kind = RS_OPT_CHOICE, .off = CFG(priority_policy), .choices = policies,
     .arg = "fcfs|priority", .help = "admission order (default fcfs)"},
    {.name = "rundir", .kind = RS_OPT_STR, .off = offsetof(struct rs_pipe_args, rundir),
     .size = sizeof(((struct rs_pipe_args *)0)->rundir), .arg = "DIR",
     .help = "ipc:// socket directory (default: $RINGSERVE_RUNDIR, else\n"
             "$XDG_RUNTIME_DIR/ringserve-NAME, else /tmp/ringserve-UID-NAME)"},
    {0},
};

_Static_assert(sizeof(uint32_t) == sizeof(int), "--policy stores its index into a uint32_t");

static rs_err check_sizes(struct rs_pipe_config *c, char *err, size_t err_len)
{
    if (c->max_batched_tokens < c->max_seqs) {
        snprintf(err, err_len, "--max-batched-tokens %u is below --max-seqs %u (each running "
                 "sequence needs a token per step)", c->max_batched_tokens, c->max_seqs);
        return RS_EINVAL;
    }
    c->max_blocks_per_seq = (c->n_ctx + c->block_size - 1) / c->block_size;
    if (c->n_kv_blocks < c->max_blocks_per_seq) {
        snprintf(err, err_len, "--kv-blocks %u cannot hold one request of --ctx %u tokens "
                 "(%u blocks of %u)", c->n_kv_blocks, c->n_ctx, c->max_blocks_per_seq,
                 c->block_size);
        return RS_EINVAL;
    }
    uint64_t per_req = (c->n_ctx + c->chunk_tokens - 1) / c->chunk_tokens;
    uint64_t cap = (64ull << 20) / (c->chunk_tokens * sizeof(int32_t)); /* 64 MiB of tokens */
    uint64_t want = per_req * c->max_requests;
    if (want > cap)
        want = cap;
    if (want < per_req * 4)
        want = per_req * 4;
    if (want < c->max_requests)
        want = c->max_requests;
    c->n_chunks = (uint32_t)want;
    return RS_OK;
}

rs_err rs_pipe_config_resolve(struct rs_pipe_config *c, const struct rs_gguf_facts *m, char *err,
                              size_t err_len)
{
    if (m->path[0] == '\0' || strlen(m->path) >= sizeof(c->model_path)) {
        snprintf(err, err_len, "model path empty or longer than %zu bytes",
                 sizeof(c->model_path) - 1);
        return RS_EINVAL;
    }
    if (m->n_vocab == 0 || m->n_vocab > INT32_MAX) {
        snprintf(err, err_len, "%s: vocabulary size %u not in 1..2^31-1", m->path, m->n_vocab);
        return RS_EINVAL;
    }
    snprintf(c->model_path, sizeof(c->model_path), "%s", m->path);
    c->model_bytes = m->bytes;
    c->n_vocab = m->n_vocab;
    if (c->n_ctx == 0 && m->n_ctx_train == 0) {
        snprintf(err, err_len, "%s: no <arch>.context_length in the metadata; pass --ctx",
                 m->path);
        return RS_EINVAL;
    }
    if (c->n_ctx == 0)
        c->n_ctx = m->n_ctx_train;
    if (m->n_ctx_train != 0 && c->n_ctx > m->n_ctx_train) {
        snprintf(err, err_len, "--ctx %u exceeds the model's context length %u", c->n_ctx,
                 m->n_ctx_train);
        return RS_EINVAL;
    }
    return check_sizes(c, err, err_len);
}

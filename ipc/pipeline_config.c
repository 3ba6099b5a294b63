/* SPDX-License-Identifier: MIT */
/*
 * The pipeline configuration: defaults, the shared command-line options all
 * four daemons accept, and completion from the model file. Every daemon of
 * an instance must end with the same struct (rs_pipe_open compares it).
 */
#include "ipc/pipeline_config.h"

#include <errno.h>
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

const char *rs_pipe_options_help(void)
{
    return "pipeline options (identical for all four daemons of an instance):\n"
           "  --instance NAME          segment /ringserve-NAME (default: default)\n"
           "  --model PATH             the GGUF model (required)\n"
           "  --ctx N                  tokens per request, prompt + output (default: the model's)\n"
           "  --block-size N           tokens per KV block (default 16)\n"
           "  --kv-blocks N            KV blocks in the pool (default 1024)\n"
           "  --max-requests N         requests in flight, queued or running (default 1024)\n"
           "  --max-seqs N             sequences per step (default 32)\n"
           "  --max-batched-tokens N   tokens per step (default 1024)\n"
           "  --no-prefix-caching      do not reuse KV blocks across requests\n"
           "  --policy fcfs|priority   admission order (default fcfs)\n"
           "  --rundir DIR             ipc:// socket directory (default: see README)\n";
}

static int parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < min || v > max)
        return 0;
    *out = (uint32_t)v;
    return 1;
}

struct u32_opt {
    const char *name;
    size_t off;
    uint32_t min, max;
};

static const struct u32_opt u32_opts[] = {
    {"--ctx", offsetof(struct rs_pipe_config, n_ctx), 2, 1u << 20},
    {"--block-size", offsetof(struct rs_pipe_config, block_size), 1, 1024},
    {"--kv-blocks", offsetof(struct rs_pipe_config, n_kv_blocks), 1, 1u << 22},
    {"--max-requests", offsetof(struct rs_pipe_config, max_requests), 1, 1u << 20},
    {"--max-seqs", offsetof(struct rs_pipe_config, max_seqs), 1, 4096},
    {"--max-batched-tokens", offsetof(struct rs_pipe_config, max_batched_tokens), 1, 1u << 20},
};

int rs_pipe_parse_option(struct rs_pipe_config *c, char *rundir, size_t rundir_len, int argc,
                         char **argv, int *i, char *err, size_t err_len)
{
    const char *opt = argv[*i];
    if (strcmp(opt, "--no-prefix-caching") == 0) {
        c->prefix_caching = 0;
        return 1;
    }
    int known = strcmp(opt, "--instance") == 0 || strcmp(opt, "--model") == 0 ||
                strcmp(opt, "--policy") == 0 || strcmp(opt, "--rundir") == 0;
    for (size_t k = 0; k < sizeof(u32_opts) / sizeof(u32_opts[0]); k++)
        known |= strcmp(opt, u32_opts[k].name) == 0;
    if (!known)
        return 0;
    if (*i + 1 >= argc) {
        snprintf(err, err_len, "option %s needs a value", opt);
        return -1;
    }
    const char *val = argv[++*i];
    for (size_t k = 0; k < sizeof(u32_opts) / sizeof(u32_opts[0]); k++)
        if (strcmp(opt, u32_opts[k].name) == 0) {
            uint32_t *field = (uint32_t *)((char *)c + u32_opts[k].off);
            if (!parse_u32(val, u32_opts[k].min, u32_opts[k].max, field)) {
                snprintf(err, err_len, "option %s: '%s' is not an integer in %u..%u", opt, val,
                         u32_opts[k].min, u32_opts[k].max);
                return -1;
            }
            return 1;
        }
    size_t len = strlen(val);
    if (strcmp(opt, "--instance") == 0) {
        char probe[300];
        if (len >= sizeof(c->instance) || rs_shm_name(val, probe, sizeof(probe)) != RS_OK) {
            snprintf(err, err_len, "option --instance: '%s' must be 1..63 of [A-Za-z0-9._-]", val);
            return -1;
        }
        memcpy(c->instance, val, len + 1);
    } else if (strcmp(opt, "--model") == 0) {
        if (len == 0 || len >= sizeof(c->model_path)) {
            snprintf(err, err_len, "option --model: path empty or longer than %zu bytes",
                     sizeof(c->model_path) - 1);
            return -1;
        }
        memcpy(c->model_path, val, len + 1);
    } else if (strcmp(opt, "--policy") == 0) {
        if (strcmp(val, "fcfs") != 0 && strcmp(val, "priority") != 0) {
            snprintf(err, err_len, "option --policy: '%s' is neither fcfs nor priority", val);
            return -1;
        }
        c->priority_policy = strcmp(val, "priority") == 0;
    } else {
        if (len == 0 || len >= rundir_len) {
            snprintf(err, err_len, "option --rundir: path empty or too long");
            return -1;
        }
        memcpy(rundir, val, len + 1);
    }
    return 1;
}

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

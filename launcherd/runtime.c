/* SPDX-License-Identifier: MIT */
/*
 * The launcher's runtime: the model (weights, backend, threads), its vocab's
 * end-of-generation ids for the stop rules, the paged KV cache that
 * schedulerd's block tables address, the sampler, and the scratch one batch
 * needs. Loaded once at start, before the pipeline is opened, and checked
 * against the pipeline configuration so a model that does not match the
 * instance never takes the launcher role. Leaves out: reloading a model in
 * place (a new model is a new instance).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/pipeline_config.h"
#include "launcherd/launcher.h"

/* Every id the vocab calls end-of-generation (EOS, EOT, EOM, <|im_end|>, ...). */
static void collect_eog(struct launcher *l)
{
    l->n_eog = 0;
    for (uint32_t id = 0; id < rs_vocab_n_tokens(l->vocab) && l->n_eog < LAUNCHER_EOG_MAX; id++)
        if (rs_vocab_is_eog(l->vocab, (int32_t)id))
            l->eog[l->n_eog++] = (int32_t)id;
}

static rs_err load_model(struct launcher *l, const struct rs_pipe_config *cfg,
                         const struct launcher_opts *opts, char *err, size_t err_len)
{
    struct rs_model_opts mo;
    rs_model_opts_default(&mo);
    mo.backend = opts->backend[0] != '\0' ? opts->backend : "auto";
    mo.tp = opts->tp;
    mo.deterministic = opts->deterministic;
    mo.dot = opts->dot;
    mo.n_threads = opts->n_threads;
    mo.isa = opts->isa;
    mo.max_batch_tokens = cfg->max_batched_tokens;
    rs_err rc = rs_model_load(cfg->model_path, &mo, &l->model, err, err_len);
    if (rc != RS_OK)
        return rc;
    const struct rs_model_hparams *hp = rs_model_hparams(l->model);
    l->n_vocab = hp->n_vocab;
    if (hp->n_vocab != cfg->n_vocab) {
        snprintf(err, err_len, "%s: the model has %u output rows but its vocab %u tokens",
                 cfg->model_path, hp->n_vocab, cfg->n_vocab);
        return RS_EINVAL;
    }
    if ((rc = rs_vocab_load(rs_model_gguf(l->model), &l->vocab, err, err_len)) != RS_OK)
        return rc;
    collect_eog(l);
    return RS_OK;
}

static rs_err alloc_scratch(struct launcher *l, const struct rs_pipe_config *cfg)
{
    l->seqs = calloc(cfg->max_seqs, sizeof(*l->seqs));
    l->run_of = calloc(cfg->max_seqs, sizeof(*l->run_of));
    l->tables = calloc((size_t)cfg->max_seqs * cfg->max_blocks_per_seq, sizeof(*l->tables));
    l->history = calloc(cfg->n_ctx, sizeof(*l->history));
    l->logits = calloc(l->n_vocab, sizeof(*l->logits));
    if (l->seqs == NULL || l->run_of == NULL || l->tables == NULL || l->history == NULL ||
        l->logits == NULL)
        return RS_ENOMEM;
    return rs_sampler_create((int32_t)l->n_vocab, &l->smp);
}

rs_err launcher_load(struct launcher *l, const struct rs_pipe_config *cfg,
                     const struct launcher_opts *opts, char *err, size_t err_len)
{
    uint64_t t0 = rs_clock_ns();
    rs_err rc = load_model(l, cfg, opts, err, err_len);
    if (rc != RS_OK)
        return rc;
    rc = rs_kvcache_create(l->model, cfg->n_kv_blocks, cfg->block_size, &l->kv);
    if (rc != RS_OK) {
        snprintf(err, err_len, "KV cache of %u blocks x %u tokens (%zu bytes each): %s",
                 cfg->n_kv_blocks, cfg->block_size,
                 rs_kvcache_block_bytes(l->model, cfg->block_size), rs_strerror(rc));
        return rc;
    }
    if ((rc = alloc_scratch(l, cfg)) != RS_OK) {
        snprintf(err, err_len, "scratch buffers: %s", rs_strerror(rc));
        return rc;
    }
    l->load_ns = rs_clock_ns() - t0;
    rs_log_info("backend %s; model %s loaded in %.1f ms; KV cache %u blocks x %u tokens "
                "(%.1f MiB); %u end-of-generation ids",
                rs_model_describe(l->model), cfg->model_path, (double)l->load_ns / 1e6,
                cfg->n_kv_blocks, cfg->block_size,
                (double)rs_kvcache_block_bytes(l->model, cfg->block_size) * cfg->n_kv_blocks /
                    (1024.0 * 1024.0),
                l->n_eog);
    return RS_OK;
}

void launcher_unload(struct launcher *l)
{
    launcher_mask_destroy(l);
    rs_sampler_destroy(&l->smp);
    rs_kvcache_destroy(&l->kv);
    rs_vocab_destroy(&l->vocab);
    rs_model_destroy(&l->model);
    free(l->seqs);
    free(l->run_of);
    free(l->tables);
    free(l->history);
    free(l->logits);
    l->seqs = NULL;
    l->run_of = NULL;
    l->tables = NULL;
    l->history = NULL;
    l->logits = NULL;
}

/* SPDX-License-Identifier: MIT */
/*
 * The model front: opens the GGUF, builds the checked llama description,
 * picks the backend table once, and validates every step's input (token ids,
 * block tables, slots) before any backend code runs, so a bad batch from the
 * ring is an RS_EINVAL and never an out-of-bounds write. See model.h.
 */
#include "launcherd/engine/model.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "launcherd/engine/backend.h"

struct rs_model {
    rs_gguf *gguf;
    struct llama_desc desc;
    const struct rs_backend_ops *ops;
    void *state;
    struct rs_model_opts opts;
    uint32_t n_seqs_last; /* sequences in the last successful step */
    int n_caches;         /* live KV caches, checked at destroy */
    uint64_t *slots;      /* validation scratch: one written slot per token */
    size_t slots_cap;
    char describe[192];
};

struct rs_kvcache {
    rs_model *m;
    void *impl;
    uint32_t n_blocks;
    uint32_t block_size;
};

/* "auto" tries the last entry first and falls back to the CPU (load_backend). */
static const struct rs_backend_ops *const backends[] = {
    &rs_backend_cpu,
#ifdef RS_HAVE_CUDA
    &rs_backend_cuda,
#endif
};
#define N_BACKENDS (sizeof(backends) / sizeof(backends[0]))

void rs_model_opts_default(struct rs_model_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->backend = NULL;
    o->n_threads = 0;
    o->isa = RS_MODEL_ISA_AUTO;
    o->dot = RS_MODEL_DOT_AUTO;
    o->max_batch_tokens = RS_MODEL_DEFAULT_MAX_TOKENS;
    o->barrier_spin_us = 50;
    o->idle_spin_us = 0;
}

/* CPUs this process may run on (its affinity mask), at least 1. */
static int usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static rs_err resolve_opts(const struct rs_model_opts *in, struct rs_model_opts *o,
                           const struct rs_backend_ops **ops, char *err, size_t err_len)
{
    if (in != NULL)
        *o = *in;
    else
        rs_model_opts_default(o);
    const char *want = o->backend != NULL ? o->backend : "cpu";
    *ops = NULL;
    for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
        if (strcmp(backends[i]->name, want) == 0)
            *ops = backends[i];
    if (strcmp(want, "auto") == 0)
        *ops = backends[N_BACKENDS - 1];
    const char *bad = NULL;
    if (*ops == NULL)
        bad = "unknown backend";
    else if (o->n_threads < 0 || o->n_threads > 1024)
        bad = "n_threads must be 0..1024";
    else if (o->isa < RS_MODEL_ISA_AUTO || o->isa > RS_MODEL_ISA_AVX512)
        bad = "unknown isa";
    else if (o->max_batch_tokens > (1u << 20))
        bad = "max_batch_tokens must be at most 1048576";
    else if (o->tp < 0 || o->tp > 64)
        bad = "tp must be 0..64";
    if (bad != NULL) {
        rs_log_error("model: bad option: %s", bad);
        snprintf(err, err_len, "bad option: %s (backend '%s')", bad, want);
        return RS_EINVAL;
    }
    if (o->n_threads == 0)
        o->n_threads = usable_cpus();
    if (o->max_batch_tokens == 0)
        o->max_batch_tokens = RS_MODEL_DEFAULT_MAX_TOKENS;
    return RS_OK;
}

/*
 * Loads the chosen backend. With "auto", a first choice other than the CPU
 * that cannot load (no device, unsupported weights, ...) falls back to the
 * CPU; either way one log line says which backend was chosen.
 */
static rs_err load_backend(rs_model *m)
{
    int is_auto = m->opts.backend != NULL && strcmp(m->opts.backend, "auto") == 0;
    rs_err rc = m->ops->load(&m->desc, &m->opts, &m->state);
    if (is_auto && rc != RS_OK && m->ops != &rs_backend_cpu) {
        rs_log_info("model: backend auto: %s cannot run this model here (%s); falling back",
                    m->ops->name, rs_strerror(rc));
        m->ops = &rs_backend_cpu;
        rc = m->ops->load(&m->desc, &m->opts, &m->state);
    }
    if (is_auto && rc == RS_OK)
        rs_log_info("model: backend auto chose %s", m->ops->name);
    return rc;
}

rs_err rs_model_load(const char *path, const struct rs_model_opts *opts, rs_model **out,
                     char *err, size_t err_len)
{
    *out = NULL;
    char local[256];
    if (err == NULL || err_len == 0) {
        err = local;
        err_len = sizeof(local);
    }
    err[0] = '\0';
    rs_model *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        snprintf(err, err_len, "out of memory");
        return RS_ENOMEM;
    }
    rs_err rc = resolve_opts(opts, &m->opts, &m->ops, err, err_len);
    /* A private copy: the file truncated or rewritten under a serving launcherd must not
     * crash it (SIGBUS) or change its outputs. */
    if (rc == RS_OK && (rc = rs_gguf_open_private(path, &m->gguf, err, err_len)) != RS_OK)
        rs_log_error("model: %s", err);
    if (rc == RS_OK)
        rc = llama_desc_load(m->gguf, &m->desc, err, err_len);
    m->desc.own_weights = 1; /* the private copy above; load_backend loads one backend on it */
    if (rc == RS_OK && (rc = load_backend(m)) != RS_OK)
        snprintf(err, err_len, "backend %s failed to load the model: %s", m->ops->name,
                 rs_strerror(rc));
    if (rc != RS_OK) {
        llama_desc_free(&m->desc);
        rs_gguf_close(&m->gguf);
        free(m);
        return rc;
    }
    const char *d = m->ops->describe ? m->ops->describe(m->state) : m->ops->name;
    snprintf(m->describe, sizeof(m->describe), "%s", d);
    *out = m;
    return RS_OK;
}

void rs_model_destroy(rs_model **mp)
{
    if (mp == NULL || *mp == NULL)
        return;
    rs_model *m = *mp;
    if (m->n_caches != 0)
        rs_log_error("model: destroyed with %d KV caches still alive (they now dangle)",
                     m->n_caches);
    m->ops->destroy(m->state);
    llama_desc_free(&m->desc);
    rs_gguf_close(&m->gguf);
    free(m->slots);
    free(m);
    *mp = NULL;
}

const struct rs_model_hparams *rs_model_hparams(const rs_model *m)
{
    return &m->desc.hp;
}

const rs_gguf *rs_model_gguf(const rs_model *m)
{
    return m->gguf;
}

const char *rs_model_describe(const rs_model *m)
{
    return m->describe;
}

const char *const rs_model_isa_names[] = {"auto", "avx512", "avx2", "portable", NULL};
const int rs_model_isa_values[] = {RS_MODEL_ISA_AUTO, RS_MODEL_ISA_AVX512, RS_MODEL_ISA_AVX2,
                                   RS_MODEL_ISA_PORTABLE};

int rs_model_host_dma(const rs_model *m)
{
    return (m->ops->caps & RS_BACKEND_CAP_HOST_DMA) != 0;
}

size_t rs_kvcache_block_bytes(const rs_model *m, uint32_t block_size)
{
    return m->ops->kv_block_bytes(m->state, block_size);
}

rs_err rs_kvcache_create(rs_model *m, uint32_t n_blocks, uint32_t block_size, rs_kvcache **out)
{
    *out = NULL;
    if (n_blocks == 0 || block_size == 0 || block_size > 65536) {
        rs_log_error("kvcache: %u blocks of %u tokens: both must be > 0, block size <= 65536",
                     n_blocks, block_size);
        return RS_EINVAL;
    }
    size_t per_block = m->ops->kv_block_bytes(m->state, block_size);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t ram = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
    if (per_block == 0 || (uint64_t)n_blocks > ram / per_block) {
        rs_log_error("kvcache: %u blocks of %zu bytes exceed this host's %llu bytes of RAM",
                     n_blocks, per_block, (unsigned long long)ram);
        return RS_ERANGE;
    }
    rs_kvcache *kv = calloc(1, sizeof(*kv));
    if (kv == NULL)
        return RS_ENOMEM;
    rs_err rc = m->ops->kv_alloc(m->state, n_blocks, block_size, &kv->impl);
    if (rc != RS_OK) {
        free(kv);
        return rc;
    }
    kv->m = m;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    m->n_caches++;
    *out = kv;
    return RS_OK;
}

void rs_kvcache_destroy(rs_kvcache **kvp)
{
    if (kvp == NULL || *kvp == NULL)
        return;
    rs_kvcache *kv = *kvp;
    kv->m->ops->kv_free(kv->m->state, kv->impl);
    kv->m->n_caches--;
    free(kv);
    *kvp = NULL;
}

uint32_t rs_kvcache_n_blocks(const rs_kvcache *kv)
{
    return kv->n_blocks;
}

uint32_t rs_kvcache_block_size(const rs_kvcache *kv)
{
    return kv->block_size;
}

/* One sequence's ids, positions and table; appends its written slots to m->slots. */
static rs_err validate_seq(rs_model *m, const rs_kvcache *kv, const struct rs_model_seq *s,
                           uint32_t i, size_t *n_slots)
{
    uint32_t bs = kv->block_size;
    if (s->tokens == NULL || s->n_tokens == 0 || s->block_table == NULL) {
        rs_log_error("step: seq %u: no tokens or no block table", i);
        return RS_EINVAL;
    }
    if (s->pos0 > UINT32_MAX - s->n_tokens) {
        rs_log_error("step: seq %u: position %u + %u tokens overflows", i, s->pos0, s->n_tokens);
        return RS_EINVAL;
    }
    uint32_t end = s->pos0 + s->n_tokens;
    uint32_t need = end / bs + (end % bs != 0);
    if ((uint64_t)end > (uint64_t)kv->n_blocks * bs) {
        rs_log_error("step: seq %u: %u positions do not fit a cache of %u x %u tokens", i, end,
                     kv->n_blocks, bs);
        return RS_EINVAL;
    }
    if (s->n_blocks < need) {
        rs_log_error("step: seq %u: block table has %u entries, positions < %u need %u", i,
                     s->n_blocks, end, need);
        return RS_EINVAL;
    }
    for (uint32_t b = 0; b < need; b++)
        if (s->block_table[b] >= kv->n_blocks) {
            rs_log_error("step: seq %u: block_table[%u] = %u, cache has %u blocks", i, b,
                         s->block_table[b], kv->n_blocks);
            return RS_EINVAL;
        }
    for (uint32_t t = 0; t < s->n_tokens; t++) {
        if (s->tokens[t] < 0 || (uint32_t)s->tokens[t] >= m->desc.hp.n_vocab) {
            rs_log_error("step: seq %u: token %u is %d, vocab has %u", i, t, s->tokens[t],
                         m->desc.hp.n_vocab);
            return RS_EINVAL;
        }
        uint32_t p = s->pos0 + t;
        m->slots[(*n_slots)++] = (uint64_t)s->block_table[p / bs] * bs + p % bs;
    }
    return RS_OK;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static rs_err validate_step(rs_model *m, const rs_kvcache *kv, const struct rs_model_seq *seqs,
                            uint32_t n_seqs)
{
    if (kv == NULL || kv->m != m || seqs == NULL || n_seqs == 0) {
        rs_log_error("step: %s", n_seqs == 0 || seqs == NULL ? "empty batch"
                                                             : "KV cache of another model");
        return RS_EINVAL;
    }
    uint64_t total = 0;
    for (uint32_t i = 0; i < n_seqs; i++)
        total += seqs[i].n_tokens;
    if (total > m->opts.max_batch_tokens) {
        rs_log_error("step: %llu tokens, more than max_batch_tokens %u",
                     (unsigned long long)total, m->opts.max_batch_tokens);
        return RS_ERANGE;
    }
    if (total > m->slots_cap) {
        uint64_t *p = realloc(m->slots, (size_t)total * sizeof(*p));
        if (p == NULL)
            return RS_ENOMEM;
        m->slots = p;
        m->slots_cap = (size_t)total;
    }
    size_t n = 0;
    for (uint32_t i = 0; i < n_seqs; i++) {
        rs_err rc = validate_seq(m, kv, &seqs[i], i, &n);
        if (rc != RS_OK)
            return rc;
    }
    qsort(m->slots, n, sizeof(uint64_t), cmp_u64);
    for (size_t i = 1; i < n; i++)
        if (m->slots[i] == m->slots[i - 1]) {
            rs_log_error("step: two tokens write KV slot %llu (block %llu)",
                         (unsigned long long)m->slots[i],
                         (unsigned long long)(m->slots[i] / kv->block_size));
            return RS_EINVAL;
        }
    return RS_OK;
}

rs_err rs_model_step(rs_model *m, rs_kvcache *kv, const struct rs_model_seq *seqs,
                     uint32_t n_seqs)
{
    m->n_seqs_last = 0;
    rs_err rc = validate_step(m, kv, seqs, n_seqs);
    if (rc != RS_OK)
        return rc;
    rc = m->ops->step(m->state, kv->impl, seqs, n_seqs);
    if (rc == RS_OK)
        m->n_seqs_last = n_seqs;
    return rc;
}

const float *rs_model_logits(rs_model *m, uint32_t seq)
{
    if (seq >= m->n_seqs_last)
        return NULL;
    if (m->ops->sync != NULL && m->ops->sync(m->state) != RS_OK)
        return NULL;
    return m->ops->logits(m->state, seq);
}

rs_err rs_model_sample(rs_model *m, const uint32_t *seq, const struct rs_sampling_params *params,
                       const uint64_t *steps, uint32_t n, struct rs_sample_result *out)
{
    if (m->ops->sample == NULL)
        return RS_EUNSUPPORTED;
    for (uint32_t i = 0; i < n; i++)
        if (seq[i] >= m->n_seqs_last) {
            rs_log_error("sample: sequence %u, the last step had %u", seq[i], m->n_seqs_last);
            return RS_EINVAL;
        }
    return m->ops->sample(m->state, seq, params, steps, n, out);
}

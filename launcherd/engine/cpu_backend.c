/* SPDX-License-Identifier: MIT */
/*
 * The CPU backend: fills rs_backend_cpu. Weights stay a view of the mapped
 * GGUF (quantized rows interleaved in place in the model's own copy,
 * for the batch-1 dot: interleave_mat); the KV cache is one F32 allocation of
 * paged blocks; a step runs as one SPMD function on the persistent pool (cpu_forward.c), after this file
 * sizes the scratch and splits the attention work.
 * Leaves out: F16/quantized KV storage (F32 keeps attention exact and simple;
 * launcherd/README.md has the sizes), NUMA placement.
 */
#include "launcherd/engine/cpu_forward.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"

/* dot: RS_MODEL_DOT_*; the integer dot where asked for (or, AUTO, measured faster) and built. */
static struct kern_mat mat_of(const struct llama_mat *m, int dot, enum kern_isa isa)
{
    int q = dot == RS_MODEL_DOT_INT8 ||
            (dot == RS_MODEL_DOT_AUTO && kern_qdot_preferred(isa, m->type));
    struct kern_mat k = {m->data, m->type, m->rows, m->cols, m->row_bytes,
                         q && kern_qdot_supported(m->type), 0};
    return k;
}

/*
 * The model's own copy (own_weights) made writable (on = 1) for the
 * interleaving, or read-only again (on = 0): the whole copy at once. A range
 * per matrix split the 2 MB pages at its ends into 4 KB mappings, and with
 * matrices under 2 MB that was most of them (smaps: a third of a Q6_K model's
 * copy left in huge pages). 0 on success.
 */
static int weights_writable(const struct llama_desc *d, int on)
{
    if (!d->own_weights || d->gguf == NULL)
        return -1;
    void *base = (void *)(uintptr_t)rs_gguf_bytes(d->gguf);
    size_t size = (size_t)rs_gguf_file_size(d->gguf);
    if (mprotect(base, size, on ? PROT_READ | PROT_WRITE : PROT_READ) == 0)
        return 0;
    rs_log_warn("cpu: mprotect of the weights: %s%s", strerror(errno),
                on ? "; rows stay plain" : "");
    return -1;
}

/*
 * Lays w's rows out interleaved where the integer dot reads them faster
 * (kern_qdot_interleave; launcherd/README.md), in place, in the model's own
 * copy made writable by weights_writable. Any failure leaves the plain rows,
 * which every path reads too.
 */
static void interleave_mat(struct kern_mat *w, enum kern_isa isa, const struct llama_desc *d)
{
    uint32_t g = kern_qdot_interleave(isa, w);
    if (g == 0 || w->data == d->tok_embd.data) /* the lookup reads rows */
        return;
    if (kern_interleave_rows(w, (void *)(uintptr_t)w->data, g) == RS_OK)
        w->interleave = g;
}

/*
 * Tensor parallelism needs every shard to hold whole heads, whole KV heads
 * and equal FFN columns, and the Wo / Wdown column slices to start at a
 * weight block (32 values for Q8_0/Q4_0, 256 for the K-quants).
 */
static rs_err check_tp(const struct llama_desc *d, int tp)
{
    const struct rs_model_hparams *hp = &d->hp;
    if (tp <= 1)
        return RS_OK;
    int ok = hp->n_heads % tp == 0 && hp->n_kv_heads % tp == 0 && hp->ffn_dim % tp == 0;
    uint32_t qs = hp->n_heads / tp * hp->head_dim, fs = hp->ffn_dim / tp;
    for (uint32_t i = 0; ok && i < hp->n_layers; i++)
        ok = qs % rs_ggml_block_size(d->layers[i].wo.type) == 0 &&
             fs % rs_ggml_block_size(d->layers[i].w_down.type) == 0;
    if (!ok)
        rs_log_error("cpu: tp %d does not split %u heads, %u KV heads and %u FFN columns into "
                     "equal shards of whole weight blocks",
                     tp, hp->n_heads, hp->n_kv_heads, hp->ffn_dim);
    return ok ? RS_OK : RS_EUNSUPPORTED;
}

/* The layer's matrices, in one list for every pass over them. */
#define LAYER_MATS 7
static void layer_mats(struct cpu_layer *c, struct kern_mat *out[LAYER_MATS])
{
    struct kern_mat *m[LAYER_MATS] = {&c->wq,     &c->wk,   &c->wv,    &c->wo,
                                      &c->w_gate, &c->w_up, &c->w_down};
    memcpy(out, m, sizeof(m));
}

static void count_dot(const struct kern_mat *m, unsigned *quant, unsigned *integer,
                      unsigned *interleaved)
{
    *quant += kern_qdot_supported(m->type) ? 1u : 0u;
    *integer += m->qdot ? 1u : 0u;
    *interleaved += m->interleave != 0 ? 1u : 0u;
}

/* The quantized weights' arithmetic, as the default resolved it for this model on this CPU:
 * integer, widened, or (types of both kinds) how many of its quantized matrices are integer;
 * and how many have interleaved rows (interleave_mat). */
static void describe_dot(const struct cpu_state *s, int dot, char *out, size_t cap,
                         unsigned *interleaved)
{
    unsigned quant = 0, integer = 0, il = 0;
    count_dot(&s->tok_embd, &quant, &integer, &il);
    count_dot(&s->output, &quant, &integer, &il);
    for (uint32_t i = 0; i < s->hp.n_layers; i++) {
        struct kern_mat *m[LAYER_MATS];
        layer_mats(&s->layers[i], m);
        for (size_t j = 0; j < LAYER_MATS; j++)
            count_dot(m[j], &quant, &integer, &il);
    }
    *interleaved = il;
    if (dot != RS_MODEL_DOT_AUTO)
        snprintf(out, cap, dot == RS_MODEL_DOT_INT8 ? " int8-dot" : " exact-dot");
    else if (integer == 0 || integer == quant)
        snprintf(out, cap, integer ? " int8-dot (auto)" : " exact-dot (auto)");
    else
        snprintf(out, cap, " int8-dot (auto, %u of %u quantized)", integer, quant);
}

static rs_err cpu_load(const struct llama_desc *d, const struct rs_model_opts *opts, void **out)
{
    *out = NULL;
    struct cpu_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return RS_ENOMEM;
    s->d = d;
    s->hp = d->hp;
    s->tp = opts->tp > 1 ? opts->tp : 1;
    if (check_tp(d, s->tp) != RS_OK) {
        free(s);
        return RS_EUNSUPPORTED;
    }
    s->isa = opts->isa == RS_MODEL_ISA_AUTO ? kern_isa_detect() : (enum kern_isa)opts->isa;
    if (!kern_isa_supported(s->isa)) {
        rs_log_error("cpu: this CPU cannot run the %s kernels", kern_isa_name(s->isa));
        free(s);
        return RS_EUNSUPPORTED;
    }
    s->layers = calloc(s->hp.n_layers, sizeof(*s->layers));
    if (s->layers == NULL) {
        free(s);
        return RS_ENOMEM;
    }
    int dot = opts->dot, writable = weights_writable(d, 1) == 0;
    for (uint32_t i = 0; i < s->hp.n_layers; i++) {
        const struct llama_layer *l = &d->layers[i];
        struct cpu_layer *c = &s->layers[i];
        c->wq = mat_of(&l->wq, dot, s->isa);
        c->wk = mat_of(&l->wk, dot, s->isa);
        c->wv = mat_of(&l->wv, dot, s->isa);
        c->wo = mat_of(&l->wo, dot, s->isa);
        c->w_gate = mat_of(&l->w_gate, dot, s->isa);
        c->w_up = mat_of(&l->w_up, dot, s->isa);
        c->w_down = mat_of(&l->w_down, dot, s->isa);
        struct kern_mat *m[LAYER_MATS];
        layer_mats(c, m);
        for (size_t j = 0; writable && j < LAYER_MATS; j++)
            interleave_mat(m[j], s->isa, d);
    }
    s->tok_embd = mat_of(&d->tok_embd, dot, s->isa);
    s->output = mat_of(&d->output, dot, s->isa);
    if (writable) {
        interleave_mat(&s->output, s->isa, d);
        (void)weights_writable(d, 0);
    }
    rs_err rc = pool_create(opts->n_threads, opts->barrier_spin_us, opts->idle_spin_us, &s->pool);
    if (rc != RS_OK) {
        free(s->layers);
        free(s);
        return rc;
    }
    s->nt = opts->n_threads;
    char how[64];
    unsigned il;
    describe_dot(s, dot, how, sizeof(how), &il);
    snprintf(s->describe, sizeof(s->describe), "cpu %s%s %d thread%s", kern_isa_name(s->isa), how,
             s->nt, s->nt == 1 ? "" : "s");
    if (s->tp > 1)
        snprintf(s->describe + strlen(s->describe), sizeof(s->describe) - strlen(s->describe),
                 ", tp %d", s->tp);
    if (il > 0)
        snprintf(s->describe + strlen(s->describe), sizeof(s->describe) - strlen(s->describe),
                 ", %u matrices interleaved", il);
    *out = s;
    return RS_OK;
}

static void free_scratch(struct cpu_state *s)
{
    free(s->rows_mem);
    free(s->thread_mem);
    free(s->logits);
    free(s->row_seq);
    free(s->seq_logit);
    free(s->partial);
    s->partial = NULL;
    s->rows_mem = s->thread_mem = s->logits = NULL;
    s->row_seq = NULL;
    s->seq_logit = NULL;
    s->cap_rows = s->cap_npos = s->cap_want = s->cap_seqs = 0;
}

static void cpu_destroy(void *st)
{
    struct cpu_state *s = st;
    if (s == NULL)
        return;
    pool_destroy(&s->pool);
    free_scratch(s);
    free(s->layers);
    free(s);
}

static size_t cpu_kv_block_bytes(const void *st, uint32_t block_size)
{
    const struct cpu_state *s = st;
    size_t kv_dim = (size_t)s->hp.n_kv_heads * s->hp.head_dim;
    return 2 * (size_t)s->hp.n_layers * block_size * kv_dim * sizeof(float);
}

static rs_err cpu_kv_alloc(void *st, uint32_t n_blocks, uint32_t block_size, void **out)
{
    struct cpu_state *s = st;
    *out = NULL;
    struct cpu_kv *kv = calloc(1, sizeof(*kv));
    size_t bytes = cpu_kv_block_bytes(s, block_size) * n_blocks; /* overflow checked by model.c */
    /* calloc of a large size maps fresh zero pages: untouched blocks cost no memory. */
    if (kv == NULL || (kv->mem = calloc(1, bytes)) == NULL) {
        rs_log_error("cpu: cannot allocate a KV cache of %zu bytes", bytes);
        free(kv);
        return RS_ENOMEM;
    }
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->block_stride = (size_t)s->hp.n_kv_heads * block_size * s->hp.head_dim;
    kv->layer_floats = kv->block_stride * n_blocks;
    *out = kv;
    return RS_OK;
}

static void cpu_kv_free(void *st, void *kvp)
{
    (void)st;
    struct cpu_kv *kv = kvp;
    if (kv != NULL)
        free(kv->mem);
    free(kv);
}

/*
 * Row, thread and logits buffers start on a cache line: a large malloc returns
 * a page start plus 16 bytes, which split every other 32-byte activation load
 * and every 64-byte AVX-512 panel load across two lines.
 */
static void *alloc_lines(size_t bytes)
{
    return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

/* Grows the per-row, per-thread and logits scratch to this step's needs. */
static rs_err ensure_scratch(struct cpu_state *s, uint32_t rows, uint32_t npos, uint32_t want,
                             uint32_t n_seqs)
{
    const struct rs_model_hparams *hp = &s->hp;
    if (rows > s->cap_rows) {
        free(s->rows_mem);
        free(s->row_seq);
        free(s->partial);
        s->rows_mem = alloc_lines((size_t)rows * cpu_row_floats(hp) * sizeof(float));
        s->row_seq = malloc((size_t)rows * 2 * sizeof(uint32_t));
        s->partial = s->tp > 1 ? malloc((size_t)s->tp * rows * hp->dim * sizeof(float)) : NULL;
        s->cap_rows = s->rows_mem && s->row_seq && (s->tp == 1 || s->partial) ? rows : 0;
        if (s->cap_rows == 0)
            goto oom;
        cpu_carve_rows(s);
    }
    if (npos > s->cap_npos) {
        free(s->thread_mem);
        s->thread_mem = alloc_lines((size_t)s->nt * cpu_thread_floats(hp, npos) * sizeof(float));
        s->cap_npos = s->thread_mem ? npos : 0;
        if (s->cap_npos == 0)
            goto oom;
    }
    if (want > s->cap_want) {
        free(s->logits);
        s->logits = alloc_lines((size_t)want * (hp->n_vocab + hp->dim) * sizeof(float));
        s->cap_want = s->logits ? want : 0;
        if (s->cap_want == 0)
            goto oom;
    }
    if (n_seqs > s->cap_seqs) {
        free(s->seq_logit);
        s->seq_logit = malloc((size_t)n_seqs * sizeof(int32_t));
        s->cap_seqs = s->seq_logit ? n_seqs : 0;
        if (s->cap_seqs == 0)
            goto oom;
    }
    return RS_OK;
oom:
    rs_log_error("cpu: out of memory for step scratch (%u tokens, %u positions)", rows, npos);
    free_scratch(s);
    return RS_ENOMEM;
}

static rs_err cpu_step(void *st, void *kvp, const struct rs_model_seq *seqs, uint32_t n_seqs)
{
    struct cpu_state *s = st;
    uint32_t rows = 0, want = 0, npos = 0;
    for (uint32_t i = 0; i < n_seqs; i++) {
        rows += seqs[i].n_tokens;
        want += seqs[i].want_logits != 0;
        uint32_t end = seqs[i].pos0 + seqs[i].n_tokens;
        npos = end > npos ? end : npos;
    }
    rs_err rc = ensure_scratch(s, rows, npos, want, n_seqs);
    if (rc != RS_OK)
        return rc;
    s->kv = kvp;
    s->seqs = seqs;
    s->n_seqs = n_seqs;
    s->n_rows = rows;
    s->n_want = want;
    cpu_plan_step(s);
    pool_run(s->pool, cpu_forward_thread, s);
    return RS_OK;
}

static const float *cpu_logits(void *st, uint32_t seq)
{
    struct cpu_state *s = st;
    if (seq >= s->n_seqs || s->seq_logit[seq] < 0)
        return NULL;
    return s->logits + (size_t)s->seq_logit[seq] * s->hp.n_vocab;
}

static const char *cpu_describe(const void *st)
{
    return ((const struct cpu_state *)st)->describe;
}

const struct rs_backend_ops rs_backend_cpu = {
    .name = "cpu",
    .load = cpu_load,
    .destroy = cpu_destroy,
    .kv_block_bytes = cpu_kv_block_bytes,
    .kv_alloc = cpu_kv_alloc,
    .kv_free = cpu_kv_free,
    .step = cpu_step,
    .logits = cpu_logits,
    .sync = NULL,
    .describe = cpu_describe,
};

/* SPDX-License-Identifier: MIT */
/*
 * Weights into device memory, once: the GGUF's whole tensor data section is
 * copied verbatim into one device allocation (so a tensor's device address
 * is the allocation plus its file offset, and tied embeddings stay shared),
 * read with io_uring into page-locked staging buffers and copied on with
 * cudaMemcpyAsync, each buffer refilled only after its copy's event has
 * completed. O_DIRECT is used when the file is mostly not in the page cache
 * (bench/load: several times slower than the cache when it is). A GGUF
 * opened from memory is copied from its mapping. The norms and RoPE factors
 * (already F32 in llama_desc), biases and q/k and post norms follow in one
 * small copy. Fused tensors (phi3) are row views inside the section, so they
 * need nothing of their own.
 * Leaves out: weight types other than F32/F16/BF16/Q8_0 (refused at load).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "launcherd/cuda/cuda_state.h"
#include "launcherd/engine/load_uring.h"

struct up_ctx {
    char *dev;
    uint64_t base;
    cudaStream_t stream;
    cudaEvent_t ev[4096];
};

static rs_err up_put(void *ctx, unsigned buf, uint64_t off, const void *data, size_t len)
{
    struct up_ctx *u = ctx;
    RS_CUDA_CHECK(
        cudaMemcpyAsync(u->dev + (off - u->base), data, len, cudaMemcpyHostToDevice, u->stream));
    RS_CUDA_CHECK(cudaEventRecord(u->ev[buf], u->stream));
    return RS_OK;
}

static rs_err up_wait(void *ctx, unsigned buf)
{
    struct up_ctx *u = ctx;
    RS_CUDA_CHECK(cudaEventSynchronize(u->ev[buf]));
    return RS_OK;
}

/* io_uring -> pinned staging -> device, for the span [off, off + len) of path. */
static rs_err upload_file(struct cu_state *s, const char *path, uint64_t off, uint64_t len)
{
    struct rs_load_opts o;
    rs_load_opts_default(&o);
    o.label = path;
    double cached = rs_load_cached_fraction(path, off, len);
    o.direct = cached >= 0.0 && cached < 0.5;
    unsigned nb = rs_load_staging_count(&o);
    void *staging[RS_LOAD_DEFAULT_DEPTH] = {0};
    struct up_ctx u = {.dev = s->weights, .base = off, .stream = s->stream};
    rs_err rc = RS_OK;
    for (unsigned i = 0; i < nb && rc == RS_OK; i++) {
        cudaError_t e = cudaHostAlloc(&staging[i], rs_load_staging_bytes(&o), cudaHostAllocDefault);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&u.ev[i], cudaEventDisableTiming);
        if (e != cudaSuccess)
            rc = cu_fail(__FILE__, __LINE__, "pinned staging", e);
    }
    struct rs_load_sink sink = {&u, up_put, up_wait};
    struct rs_load_stats st = {0};
    if (rc == RS_OK)
        rc = rs_load_file(path, off, len, staging, &o, &sink, &st);
    cudaError_t e = cudaStreamSynchronize(s->stream);
    if (rc == RS_OK && e != cudaSuccess)
        rc = cu_fail(__FILE__, __LINE__, "cudaStreamSynchronize", e);
    for (unsigned i = 0; i < nb; i++) {
        if (staging[i] != NULL)
            cudaFreeHost(staging[i]);
        if (u.ev[i] != NULL)
            cudaEventDestroy(u.ev[i]);
    }
    s->load_direct = st.direct;
    rs_log_info("cuda: %.2f GB of weights read (%s page cache %.0f%%) at %.2f GB/s",
                (double)len / 1e9, st.direct ? "O_DIRECT," : "through the", cached * 100.0,
                st.ns ? (double)st.bytes / (double)st.ns : 0.0);
    return rc;
}

/* The device matrix of a checked host matrix (same offset in the data section). */
static rs_err map_mat(struct cu_state *s, const char *host_base, const struct llama_mat *m,
                      struct cu_mat *out)
{
    if (m->type != RS_GGML_F32 && m->type != RS_GGML_F16 && m->type != RS_GGML_BF16 &&
        m->type != RS_GGML_Q8_0) {
        rs_log_error("cuda: tensor %s is %s; the CUDA backend takes F32, F16, BF16 and Q8_0",
                     m->name, rs_ggml_type_name(m->type));
        return RS_EUNSUPPORTED;
    }
    out->data = s->weights + ((const char *)m->data - host_base);
    out->type = (int)m->type;
    out->rows = m->rows;
    out->cols = m->cols;
    out->row_bytes = m->row_bytes;
    return RS_OK;
}

/* The device copy of a vector inside llama_desc.vectors, or NULL for NULL. */
static const float *dev_vec(const struct cu_state *s, const float *host)
{
    return host != NULL ? s->vecs + (host - s->d->vectors) : NULL;
}

static rs_err map_all(struct cu_state *s, const char *host_base, size_t *q8_max)
{
    const struct llama_desc *d = s->d;
    rs_err rc = map_mat(s, host_base, &d->tok_embd, &s->tok_embd);
    if (rc == RS_OK)
        rc = map_mat(s, host_base, &d->output, &s->output);
    for (uint32_t i = 0; rc == RS_OK && i < s->hp.n_layers; i++) {
        const struct llama_layer *l = &d->layers[i];
        struct cu_layer *c = &s->layers[i];
        const struct llama_mat *hm[7] = {&l->wq,     &l->wk,   &l->wv,    &l->wo,
                                         &l->w_gate, &l->w_up, &l->w_down};
        struct cu_mat *dm[7] = {&c->wq, &c->wk, &c->wv, &c->wo, &c->w_gate, &c->w_up, &c->w_down};
        for (int j = 0; rc == RS_OK && j < 7; j++)
            rc = map_mat(s, host_base, hm[j], dm[j]);
        c->attn_norm = dev_vec(s, l->attn_norm);
        c->ffn_norm = dev_vec(s, l->ffn_norm);
        c->bq = dev_vec(s, l->bq), c->bk = dev_vec(s, l->bk), c->bv = dev_vec(s, l->bv);
        c->q_norm = dev_vec(s, l->q_norm), c->k_norm = dev_vec(s, l->k_norm);
        c->post_attn = dev_vec(s, l->post_attn_norm), c->post_ffn = dev_vec(s, l->post_ffn_norm);
        c->local = l->local;
        for (int j = 0; j < 7; j++)
            if (dm[j]->type == RS_GGML_Q8_0 && (size_t)dm[j]->rows * dm[j]->cols > *q8_max)
                *q8_max = (size_t)dm[j]->rows * dm[j]->cols;
    }
    if (s->output.type == RS_GGML_Q8_0 && (size_t)s->output.rows * s->output.cols > *q8_max)
        *q8_max = (size_t)s->output.rows * s->output.cols;
    return rc;
}

rs_err cu_upload(struct cu_state *s)
{
    const struct llama_desc *d = s->d;
    const rs_gguf *g = d->gguf;
    const struct rs_gguf_tensor *t0 = rs_gguf_tensor(g, 0);
    const char *host_base = (const char *)t0->data - t0->offset;
    uint64_t off = rs_gguf_data_offset(g), len = rs_gguf_file_size(g) - off;
    size_t n_vec = d->n_vectors, q8 = 0;
    uint64_t t0_ns = rs_clock_ns();
    s->layers = calloc(s->hp.n_layers, sizeof(*s->layers));
    if (s->layers == NULL)
        return RS_ENOMEM;
    RS_CUDA_CHECK(cudaMalloc((void **)&s->vecs, n_vec * sizeof(float)));
    RS_CUDA_CHECK(cudaMemcpy(s->vecs, d->vectors, n_vec * sizeof(float), cudaMemcpyHostToDevice));
    s->output_norm = s->vecs + (d->output_norm - d->vectors);
    s->rope_freqs = d->rope_freqs != NULL ? s->vecs + (d->rope_freqs - d->vectors) : NULL;
    RS_CUDA_CHECK(cudaMalloc((void **)&s->weights, len));
    s->weights_bytes = len;
    rs_err rc = map_all(s, host_base, &q8);
    if (rc != RS_OK)
        return rc;
    if (q8 > 0 && !s->deterministic)
        RS_CUDA_CHECK(cudaMalloc((void **)&s->wtmp, q8 * sizeof(float)));
    if (rs_gguf_path(g)[0] != '\0')
        rc = upload_file(s, rs_gguf_path(g), off, len);
    else if (cudaMemcpy(s->weights, host_base, len, cudaMemcpyHostToDevice) != cudaSuccess)
        rc = cu_fail(__FILE__, __LINE__, "cudaMemcpy of the weights", cudaGetLastError());
    s->load_ns = rs_clock_ns() - t0_ns;
    s->load_bytes = len;
    return rc;
}

void cu_upload_free(struct cu_state *s)
{
    cudaFree(s->weights);
    cudaFree(s->vecs);
    cudaFree(s->wtmp);
    free(s->layers);
    s->weights = NULL;
    s->vecs = s->wtmp = NULL;
    s->layers = NULL;
}

/* SPDX-License-Identifier: MIT */
/*
 * One forward step on the GPU. Inputs: token ids, positions, each row's
 * sequence, the rows whose logits are wanted, and the packed block tables,
 * gathered into one page-locked host area and copied with one
 * cudaMemcpyAsync (token ids go straight from the caller's array, the
 * batch ring's record in launcherd, when the batch holds them contiguously).
 * The step returns only after that copy's event has completed, so the
 * caller may release the ring slot at once; the forward pass itself runs on
 * asynchronously until sync. Decode steps (one token per sequence, all
 * wanting logits) replay a CUDA graph captured once per batch size.
 * Per layer, as the CPU backend: norm | Q,K,V GEMMs | biases, q/k norms,
 * RoPE | K/V to the cache | paged attention (window, soft-cap) | x +=
 * [norm](att Wo) | norm | gate, up | SwiGLU or GeGLU | x += [norm](h Wdown);
 * then the wanted rows' final norm, the output GEMM and the final soft-cap.
 * Everything per-architecture comes from the resolved hyperparameters and
 * the layer's pointers (NULL: the step does not apply).
 */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "launcherd/cuda/cuda_state.h"

/* Input area sections (uint32 each): tok, pos, seq, want, tab_off by cap_rows, then tables. */
#define IN_SECTIONS 5

static size_t row_floats(const struct rs_model_hparams *hp)
{
    size_t qd = (size_t)hp->n_heads * hp->head_dim, kvd = (size_t)hp->n_kv_heads * hp->head_dim;
    return 2 * (size_t)hp->dim + 2 * qd + 2 * kvd + 2 * (size_t)hp->ffn_dim;
}

static size_t half_cols(const struct rs_model_hparams *hp)
{
    size_t qd = (size_t)hp->n_heads * hp->head_dim, c = hp->dim > qd ? hp->dim : qd;
    return c > hp->ffn_dim ? c : hp->ffn_dim;
}

static void drop_graphs(struct cu_state *s)
{
    for (uint32_t i = 0; i < s->n_graphs; i++)
        cudaGraphExecDestroy(s->graphs[i].exec);
    s->n_graphs = 0;
}

void cu_step_free(struct cu_state *s)
{
    drop_graphs(s);
    cudaFree(s->x);
    cudaFree(s->half);
    cudaFree(s->logits);
    cudaFree(s->in_dev);
    cudaFreeHost(s->in_host);
    free(s->seq_logit);
    s->x = s->logits = NULL;
    s->half = s->in_dev = s->in_host = NULL;
    s->seq_logit = NULL;
    s->cap_rows = s->cap_want = s->cap_seqs = 0;
    s->in_cap = 0;
}

static rs_err ensure_rows(struct cu_state *s, uint32_t rows)
{
    if (rows <= s->cap_rows)
        return RS_OK;
    const struct rs_model_hparams *hp = &s->hp;
    uint32_t cap = rows > 2 * s->cap_rows ? rows : 2 * s->cap_rows;
    size_t qd = (size_t)hp->n_heads * hp->head_dim, kvd = (size_t)hp->n_kv_heads * hp->head_dim;
    drop_graphs(s);
    cudaFree(s->x);
    cudaFree(s->half);
    s->x = NULL;
    s->half = NULL;
    s->cap_rows = 0;
    RS_CUDA_CHECK(cudaMalloc((void **)&s->x, (size_t)cap * row_floats(hp) * sizeof(float)));
    RS_CUDA_CHECK(cudaMalloc(&s->half, (size_t)cap * half_cols(hp) * 2));
    float *p = s->x + (size_t)cap * hp->dim;
    s->xn = p, p += (size_t)cap * hp->dim;
    s->q = p, p += (size_t)cap * qd;
    s->att = p, p += (size_t)cap * qd;
    s->k = p, p += (size_t)cap * kvd;
    s->v = p, p += (size_t)cap * kvd;
    s->gate = p, p += (size_t)cap * hp->ffn_dim;
    s->up = p;
    s->cap_rows = cap;
    return RS_OK;
}

static rs_err ensure_want(struct cu_state *s, uint32_t want)
{
    if (want <= s->cap_want)
        return RS_OK;
    drop_graphs(s);
    cudaFree(s->logits);
    s->logits = NULL;
    s->cap_want = 0;
    size_t per = (size_t)s->hp.n_vocab + s->hp.dim;
    RS_CUDA_CHECK(cudaMalloc((void **)&s->logits, (size_t)want * per * sizeof(float)));
    s->xl = s->logits + (size_t)want * s->hp.n_vocab;
    s->cap_want = want;
    return RS_OK;
}

/* Host and device input areas for cap_rows rows and n_tab table entries; the seq_logit map. */
static rs_err ensure_inputs(struct cu_state *s, uint32_t n_tab, uint32_t n_seqs)
{
    size_t need = ((size_t)IN_SECTIONS * s->cap_rows + n_tab) * sizeof(uint32_t);
    if (n_seqs > s->cap_seqs) {
        free(s->seq_logit);
        s->seq_logit = malloc((size_t)n_seqs * sizeof(int32_t));
        s->cap_seqs = s->seq_logit != NULL ? n_seqs : 0;
        if (s->seq_logit == NULL)
            return RS_ENOMEM;
    }
    uint32_t *base = s->in_dev;
    if (need <= s->in_cap && base != NULL && s->rows.tok == (const int32_t *)base &&
        s->rows.tab_off == base + 4 * (size_t)s->cap_rows)
        return RS_OK;
    drop_graphs(s);
    cudaFree(s->in_dev);
    cudaFreeHost(s->in_host);
    s->in_dev = s->in_host = NULL;
    s->in_cap = 0;
    need += need / 2; /* room for longer tables without reallocating */
    RS_CUDA_CHECK(cudaMalloc(&s->in_dev, need));
    RS_CUDA_CHECK(cudaHostAlloc(&s->in_host, need, cudaHostAllocDefault));
    s->in_cap = need;
    uint32_t *d = s->in_dev, c = s->cap_rows;
    s->rows.tok = (const int32_t *)d;
    s->rows.pos = d + c;
    s->rows.seq = d + 2 * (size_t)c;
    s->rows.want = d + 3 * (size_t)c;
    s->rows.tab_off = d + 4 * (size_t)c;
    s->rows.tables = d + 5 * (size_t)c;
    return RS_OK;
}

/* Fills the host input area; returns 1 when the token ids are one contiguous array. */
static int pack_inputs(struct cu_state *s, const struct rs_model_seq *seqs, uint32_t n_seqs,
                       uint32_t bs, uint32_t *n_tab)
{
    uint32_t c = s->cap_rows, *h = s->in_host, r = 0, j = 0, nt = 0;
    int contiguous = 1;
    for (uint32_t i = 0; i < n_seqs; i++) {
        const struct rs_model_seq *q = &seqs[i];
        if (i > 0 && q->tokens != seqs[i - 1].tokens + seqs[i - 1].n_tokens)
            contiguous = 0;
        for (uint32_t t = 0; t < q->n_tokens; t++, r++) {
            h[r] = (uint32_t)q->tokens[t];
            h[c + r] = q->pos0 + t;
            h[2 * (size_t)c + r] = i;
        }
        s->seq_logit[i] = q->want_logits ? (int32_t)j : -1;
        if (q->want_logits)
            h[3 * (size_t)c + j++] = r - 1;
        uint32_t end = q->pos0 + q->n_tokens, need = end / bs + (end % bs != 0);
        h[4 * (size_t)c + i] = nt;
        memcpy(h + 5 * (size_t)c + nt, q->block_table, (size_t)need * sizeof(uint32_t));
        nt += need;
    }
    s->rows.n_rows = r;
    s->rows.n_want = j;
    s->n_seqs = n_seqs;
    s->n_want = j;
    *n_tab = nt;
    return contiguous;
}

/*
 * The Q/K finishing step of layer l: its biases and norms, and its RoPE: a
 * local layer rotates with the local base and scale (no frequency factors)
 * when they differ from the global ones, as the CPU's second table.
 */
static struct cu_qk qk_args(const struct cu_state *s, const struct cu_layer *l)
{
    const struct rs_model_hparams *hp = &s->hp;
    int own = l->local && (hp->local_rope_base != hp->rope_freq_base ||
                           hp->local_rope_scale != hp->rope_scale);
    struct cu_qk a = {l->bq, l->bk, l->bv, l->q_norm, l->k_norm,
                      own ? NULL : s->rope_freqs, hp->n_heads, hp->n_kv_heads,
                      hp->head_dim, hp->rope_dim, hp->rope_neox,
                      own ? hp->local_rope_base : hp->rope_freq_base,
                      1.0f / (own ? hp->local_rope_scale : hp->rope_scale), hp->rms_eps};
    return a;
}

/* y = in W^T added to x, or (post norm) normalized first: x += norm(in W^T) * post. */
static rs_err out_gemm(struct cu_state *s, const struct cu_mat *w, const float *in,
                       const float *post, uint32_t n)
{
    if (post == NULL)
        return cu_gemm(s, w, in, n, s->x, s->hp.dim, 1);
    rs_err rc = cu_gemm(s, w, in, n, s->xn, s->hp.dim, 0);
    if (rc == RS_OK)
        RS_CUDA_CHECK(cu_rmsnorm_add(s->xn, post, n, s->hp.dim, s->hp.rms_eps, s->x, s->stream));
    return rc;
}

static rs_err layer_forward(struct cu_state *s, struct cu_kv *kv, uint32_t il)
{
    const struct rs_model_hparams *hp = &s->hp;
    const struct cu_layer *l = &s->layers[il];
    const struct cu_rows *r = &s->rows;
    uint32_t n = r->n_rows, qd = hp->n_heads * hp->head_dim, kvd = hp->n_kv_heads * hp->head_dim;
    struct cu_kv_layer kl = {kv->mem + (size_t)il * 2 * kv->layer_floats,
                             kv->mem + (size_t)il * 2 * kv->layer_floats + kv->layer_floats,
                             kv->block_stride,
                             kv->block_size,
                             hp->head_dim,
                             hp->n_kv_heads};
    struct cu_qk qk = qk_args(s, l);
    rs_err rc;
    RS_CUDA_CHECK(cu_rmsnorm(s->x, l->attn_norm, n, hp->dim, hp->rms_eps, NULL, s->xn, s->stream));
    if ((rc = cu_gemm(s, &l->wq, s->xn, n, s->q, qd, 0)) != RS_OK ||
        (rc = cu_gemm(s, &l->wk, s->xn, n, s->k, kvd, 0)) != RS_OK ||
        (rc = cu_gemm(s, &l->wv, s->xn, n, s->v, kvd, 0)) != RS_OK)
        return rc;
    RS_CUDA_CHECK(cu_qk_finish(s->q, s->k, s->v, r, &qk, s->stream));
    RS_CUDA_CHECK(cu_kv_store(s->k, s->v, r, &kl, s->stream));
    RS_CUDA_CHECK(cu_attention(s->q, r, &kl, hp->n_heads, hp->attn_scale,
                               l->local ? hp->swa_window : 0, hp->attn_softcap, s->att,
                               s->stream));
    if ((rc = out_gemm(s, &l->wo, s->att, l->post_attn, n)) != RS_OK)
        return rc;
    RS_CUDA_CHECK(cu_rmsnorm(s->x, l->ffn_norm, n, hp->dim, hp->rms_eps, NULL, s->xn, s->stream));
    if ((rc = cu_gemm(s, &l->w_gate, s->xn, n, s->gate, hp->ffn_dim, 0)) != RS_OK ||
        (rc = cu_gemm(s, &l->w_up, s->xn, n, s->up, hp->ffn_dim, 0)) != RS_OK)
        return rc;
    if (hp->ffn_gelu)
        RS_CUDA_CHECK(cu_geglu(s->gate, s->up, (size_t)n * hp->ffn_dim, s->stream));
    else
        RS_CUDA_CHECK(cu_swiglu(s->gate, s->up, (size_t)n * hp->ffn_dim, s->stream));
    return out_gemm(s, &l->w_down, s->gate, l->post_ffn, n);
}

static rs_err forward(struct cu_state *s, struct cu_kv *kv)
{
    const struct rs_model_hparams *hp = &s->hp;
    RS_CUDA_CHECK(cu_embed(&s->tok_embd, &s->rows, hp->embd_scale, s->x, s->stream));
    for (uint32_t il = 0; il < hp->n_layers; il++) {
        rs_err rc = layer_forward(s, kv, il);
        if (rc != RS_OK)
            return rc;
    }
    if (s->n_want == 0)
        return RS_OK;
    RS_CUDA_CHECK(cu_rmsnorm(s->x, s->output_norm, s->n_want, hp->dim, hp->rms_eps, s->rows.want,
                             s->xl, s->stream));
    rs_err rc = cu_gemm(s, &s->output, s->xl, s->n_want, s->logits, hp->n_vocab, 0);
    if (rc == RS_OK && hp->final_softcap > 0.0f)
        RS_CUDA_CHECK(cu_softcap(s->logits, (size_t)s->n_want * hp->n_vocab, hp->final_softcap,
                                 s->stream));
    return rc;
}

/* The decode graph for this batch size and cache, captured on first use. */
static rs_err graph_for(struct cu_state *s, struct cu_kv *kv, cudaGraphExec_t *out)
{
    uint32_t n = s->rows.n_rows;
    for (uint32_t i = 0; i < s->n_graphs; i++)
        if (s->graphs[i].n_rows == n && s->graphs[i].kv == kv) {
            *out = s->graphs[i].exec;
            return RS_OK;
        }
    if (s->n_graphs == CU_MAX_GRAPHS) { /* forget the oldest */
        cudaGraphExecDestroy(s->graphs[0].exec);
        memmove(s->graphs, s->graphs + 1, (CU_MAX_GRAPHS - 1) * sizeof(s->graphs[0]));
        s->n_graphs--;
    }
    cudaGraph_t g = NULL;
    RS_CUDA_CHECK(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal));
    rs_err rc = forward(s, kv);
    cudaError_t e = cudaStreamEndCapture(s->stream, &g);
    if (rc != RS_OK) {
        if (g != NULL)
            cudaGraphDestroy(g);
        return rc;
    }
    if (e != cudaSuccess)
        return cu_fail(__FILE__, __LINE__, "cudaStreamEndCapture", e);
    e = cudaGraphInstantiate(out, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess)
        return cu_fail(__FILE__, __LINE__, "cudaGraphInstantiate", e);
    s->graphs[s->n_graphs++] = (struct cu_graph){n, kv, *out};
    return RS_OK;
}

/* Sizes everything for this step and fills the host inputs; *contiguous as pack_inputs. */
static rs_err prepare(struct cu_state *s, const struct rs_model_seq *seqs, uint32_t n_seqs,
                      uint32_t bs, int *decode, int *contiguous, uint32_t *n_tab_out)
{
    uint32_t rows = 0, want = 0, n_tab = 0;
    *decode = 1;
    for (uint32_t i = 0; i < n_seqs; i++) {
        uint32_t end = seqs[i].pos0 + seqs[i].n_tokens;
        rows += seqs[i].n_tokens;
        want += seqs[i].want_logits != 0;
        n_tab += end / bs + (end % bs != 0);
        *decode &= seqs[i].n_tokens == 1 && seqs[i].want_logits != 0;
    }
    rs_err rc = ensure_rows(s, rows);
    if (rc == RS_OK)
        rc = ensure_want(s, want > 0 ? want : 1);
    if (rc == RS_OK)
        rc = ensure_inputs(s, n_tab, n_seqs);
    if (rc != RS_OK)
        return rc;
    *contiguous = pack_inputs(s, seqs, n_seqs, bs, n_tab_out);
    return RS_OK;
}

rs_err cu_step(struct cu_state *s, struct cu_kv *kv, const struct rs_model_seq *seqs,
               uint32_t n_seqs)
{
    int decode, contiguous;
    uint32_t n_tab;
    rs_err rc = prepare(s, seqs, n_seqs, kv->block_size, &decode, &contiguous, &n_tab);
    if (rc != RS_OK)
        return rc;
    uint32_t c = s->cap_rows, n = s->rows.n_rows, *h = s->in_host;
    size_t tab_end = IN_SECTIONS * (size_t)c + n_tab; /* the tables follow the sections */
    /* Token ids straight from the caller's (the ring's) memory when they are contiguous. */
    if (contiguous)
        RS_CUDA_CHECK(cudaMemcpyAsync(s->in_dev, seqs[0].tokens, (size_t)n * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, s->stream));
    size_t from = contiguous ? c : 0;
    RS_CUDA_CHECK(cudaMemcpyAsync((uint32_t *)s->in_dev + from, h + from,
                                  (tab_end - from) * sizeof(uint32_t), cudaMemcpyHostToDevice,
                                  s->stream));
    RS_CUDA_CHECK(cudaEventRecord(s->ev_in, s->stream));
    s->h_logits_valid = 0;
    if (decode && s->use_graphs) {
        cudaGraphExec_t ge;
        if ((rc = graph_for(s, kv, &ge)) == RS_OK && cudaGraphLaunch(ge, s->stream) != cudaSuccess)
            rc = cu_fail(__FILE__, __LINE__, "cudaGraphLaunch", cudaGetLastError());
    } else {
        rc = forward(s, kv);
    }
    /* The inputs (and the ring memory they came from) are free once this returns. */
    cudaError_t e = cudaEventSynchronize(s->ev_in);
    if (rc == RS_OK && e != cudaSuccess)
        rc = cu_fail(__FILE__, __LINE__, "cudaEventSynchronize", e);
    return rc;
}

/* SPDX-License-Identifier: MIT */
/*
 * The llama forward pass on the CPU, run by every pool thread at once. Each
 * phase splits its work statically: row-local ops by rows, GEMMs by output
 * columns (4-aligned slices), attention by (KV head, row) units balanced by
 * context length. Every output element is computed whole by one thread with
 * the kernels' fixed reduction order, so the result depends neither on the
 * split nor on the thread count. Barriers separate the phases (layer_forward).
 */
#include "launcherd/engine/cpu_forward.h"

#include <math.h>
#include <string.h>


static size_t max_cols(const struct rs_model_hparams *hp)
{
    return hp->ffn_dim > hp->dim ? hp->ffn_dim : hp->dim;
}

size_t cpu_row_floats(const struct rs_model_hparams *hp)
{
    size_t qd = (size_t)hp->n_heads * hp->head_dim, kvd = (size_t)hp->n_kv_heads * hp->head_dim;
    return 2 * (size_t)hp->dim + 2 * qd + 2 * kvd + 2 * (size_t)hp->ffn_dim + hp->rope_dim;
}

size_t cpu_thread_floats(const struct rs_model_hparams *hp, uint32_t npos)
{
    size_t group = hp->n_heads / hp->n_kv_heads;
    return kern_gemm_scratch_floats((uint32_t)max_cols(hp)) + group * npos;
}

void cpu_carve_rows(struct cpu_state *s)
{
    const struct rs_model_hparams *hp = &s->hp;
    size_t n = s->cap_rows, qd = (size_t)hp->n_heads * hp->head_dim;
    size_t kvd = (size_t)hp->n_kv_heads * hp->head_dim;
    float *p = s->rows_mem;
    s->x = p, p += n * hp->dim;
    s->xn = p, p += n * hp->dim;
    s->q = p, p += n * qd;
    s->att = p, p += n * qd;
    s->k = p, p += n * kvd;
    s->v = p, p += n * kvd;
    s->gate = p, p += n * hp->ffn_dim;
    s->up = p, p += n * hp->ffn_dim;
    s->rope = p;
    s->row_pos = s->row_seq + n;
}

void cpu_plan_step(struct cpu_state *s)
{
    uint32_t r = 0, j = 0;
    for (uint32_t i = 0; i < s->n_seqs; i++) {
        const struct rs_model_seq *q = &s->seqs[i];
        for (uint32_t t = 0; t < q->n_tokens; t++, r++) {
            s->row_seq[r] = i;
            s->row_pos[r] = q->pos0 + t;
        }
        s->seq_logit[i] = q->want_logits ? (int32_t)j++ : -1;
    }
    /*
     * Attention units (KV head, row), head-major so consecutive units reuse one
     * head's K/V from cache; each costs about its context length. Split the sum evenly.
     */
    uint32_t nkv = s->hp.n_kv_heads, units = s->n_rows * nkv;
    uint64_t total = 0, acc = 0;
    for (r = 0; r < s->n_rows; r++)
        total += (uint64_t)(s->row_pos[r] + 9) * nkv;
    int t = 0;
    s->attn_split[0] = 0;
    for (uint32_t u = 0; u < units && t + 1 < s->nt; u++) {
        acc += s->row_pos[u % s->n_rows] + 9;
        while (t + 1 < s->nt && acc * (uint64_t)s->nt >= total * (uint64_t)(t + 1))
            s->attn_split[++t] = u + 1;
    }
    while (t < s->nt)
        s->attn_split[++t] = units;
}

/* Rows [a, b) of n for thread tid. */
static void split_rows(uint32_t n, int tid, int nt, uint32_t *a, uint32_t *b)
{
    *a = (uint32_t)((uint64_t)n * tid / nt);
    *b = (uint32_t)((uint64_t)n * (tid + 1) / nt);
}

/* Columns [a, b) of n in whole 4-column units (GEMM tiles; keeps RoPE pairs together). */
static void split_cols(uint32_t n, int tid, int nt, uint32_t *a, uint32_t *b)
{
    uint32_t units = (n + 3) / 4, ua, ub;
    split_rows(units, tid, nt, &ua, &ub);
    *a = ua * 4 < n ? ua * 4 : n;
    *b = ub * 4 < n ? ub * 4 : n;
}

static float *thread_gemm_scratch(struct cpu_state *s, int tid)
{
    return s->thread_mem + (size_t)tid * cpu_thread_floats(&s->hp, s->cap_npos);
}

static void embed_rows(struct cpu_state *s, int tid, int nt)
{
    const struct rs_model_hparams *hp = &s->hp;
    uint32_t a, b;
    split_rows(s->n_rows, tid, nt, &a, &b);
    for (uint32_t r = a; r < b; r++) {
        const struct rs_model_seq *q = &s->seqs[s->row_seq[r]];
        int32_t tok = q->tokens[s->row_pos[r] - q->pos0];
        kern_widen_row(s->isa, &s->tok_embd, (uint32_t)tok, s->x + (size_t)r * hp->dim);
        kern_rope_table(s->row_pos[r], hp->rope_dim, hp->rope_freq_base, 1.0f / hp->rope_scale,
                        s->d->rope_freqs, s->rope + (size_t)r * hp->rope_dim);
    }
}

static void norm_rows(struct cpu_state *s, const float *w, int tid, int nt)
{
    uint32_t a, b, d = s->hp.dim;
    split_rows(s->n_rows, tid, nt, &a, &b);
    for (uint32_t r = a; r < b; r++)
        kern_rmsnorm(s->x + (size_t)r * d, w, d, s->hp.rms_eps, s->xn + (size_t)r * d);
}

/* Copies columns [c0, c1) of each row's K and V into the row's cache slot. */
static void store_kv(struct cpu_state *s, uint32_t layer, uint32_t c0, uint32_t c1)
{
    const struct cpu_kv *kv = s->kv;
    uint32_t hd = s->hp.head_dim, bs = kv->block_size, kvd = s->hp.n_kv_heads * hd;
    float *kbase = kv->mem + (size_t)layer * 2 * kv->layer_floats;
    float *vbase = kbase + kv->layer_floats;
    for (uint32_t r = 0; r < s->n_rows; r++) {
        const struct rs_model_seq *q = &s->seqs[s->row_seq[r]];
        uint32_t p = s->row_pos[r], slot = p % bs;
        size_t blk = (size_t)q->block_table[p / bs] * kv->block_stride;
        for (uint32_t c = c0; c < c1;) {
            uint32_t h = c / hd, i = c % hd, n = hd - i < c1 - c ? hd - i : c1 - c;
            size_t off = blk + ((size_t)h * bs + slot) * hd + i;
            memcpy(kbase + off, s->k + (size_t)r * kvd + c, n * sizeof(float));
            memcpy(vbase + off, s->v + (size_t)r * kvd + c, n * sizeof(float));
            c += n;
        }
    }
}

static void qkv_phase(struct cpu_state *s, uint32_t layer, int tid, int nt)
{
    const struct rs_model_hparams *hp = &s->hp;
    const struct cpu_layer *l = &s->layers[layer];
    float *scr = thread_gemm_scratch(s, tid);
    uint32_t qd = hp->n_heads * hp->head_dim, kvd = hp->n_kv_heads * hp->head_dim, a, b;
    split_cols(qd, tid, nt, &a, &b);
    kern_gemm(s->isa, &l->wq, s->xn, hp->dim, s->n_rows, s->q, qd, a, b, 0, scr);
    for (uint32_t r = 0; r < s->n_rows; r++)
        kern_rope_apply(s->q + (size_t)r * qd, a, b, hp->head_dim, hp->rope_dim,
                        s->rope + (size_t)r * hp->rope_dim);
    split_cols(kvd, tid, nt, &a, &b);
    kern_gemm(s->isa, &l->wk, s->xn, hp->dim, s->n_rows, s->k, kvd, a, b, 0, scr);
    kern_gemm(s->isa, &l->wv, s->xn, hp->dim, s->n_rows, s->v, kvd, a, b, 0, scr);
    for (uint32_t r = 0; r < s->n_rows; r++)
        kern_rope_apply(s->k + (size_t)r * kvd, a, b, hp->head_dim, hp->rope_dim,
                        s->rope + (size_t)r * hp->rope_dim);
    store_kv(s, layer, a, b);
}

static void attention_phase(struct cpu_state *s, uint32_t layer, int tid)
{
    const struct rs_model_hparams *hp = &s->hp;
    const struct cpu_kv *kv = s->kv;
    uint32_t hd = hp->head_dim, nkv = hp->n_kv_heads, group = hp->n_heads / nkv;
    uint32_t qd = hp->n_heads * hd;
    struct kern_kv_layout lay = {
        .k = kv->mem + (size_t)layer * 2 * kv->layer_floats,
        .v = kv->mem + (size_t)layer * 2 * kv->layer_floats + kv->layer_floats,
        .block_stride = kv->block_stride,
        .block_size = kv->block_size,
        .head_dim = hd,
    };
    float *scores = thread_gemm_scratch(s, tid) + kern_gemm_scratch_floats((uint32_t)max_cols(hp));
    float scale = 1.0f / sqrtf((float)hd);
    for (uint32_t u = s->attn_split[tid]; u < s->attn_split[tid + 1]; u++) {
        uint32_t h = u / s->n_rows, r = u % s->n_rows;
        const struct rs_model_seq *q = &s->seqs[s->row_seq[r]];
        size_t off = (size_t)r * qd + (size_t)h * group * hd;
        kern_attention(s->isa, &lay, q->block_table, h, group, s->row_pos[r] + 1, scale,
                       s->q + off, scores, s->att + off);
    }
}

static void ffn_up_phase(struct cpu_state *s, const struct cpu_layer *l, int tid, int nt)
{
    const struct rs_model_hparams *hp = &s->hp;
    float *scr = thread_gemm_scratch(s, tid);
    uint32_t f = hp->ffn_dim, a, b;
    split_cols(f, tid, nt, &a, &b);
    kern_gemm(s->isa, &l->w_gate, s->xn, hp->dim, s->n_rows, s->gate, f, a, b, 0, scr);
    kern_gemm(s->isa, &l->w_up, s->xn, hp->dim, s->n_rows, s->up, f, a, b, 0, scr);
    for (uint32_t r = 0; r < s->n_rows; r++)
        kern_swiglu(s->isa, s->gate + (size_t)r * f + a, s->up + (size_t)r * f + a, b - a);
}

/*
 * Tensor parallelism (s->tp > 1): shard r holds columns [r K/tp, (r+1) K/tp)
 * of W (its heads of Wo, its FFN columns of Wdown) and computes its partial
 * dot products for every output; the all-reduce then adds the partials to x
 * in shard order, (p0 + p1) + p2 ..., so the result depends on tp, never on
 * the thread count or the batch. Work items are (shard, 4-column unit) pairs.
 */
static void sharded_residual(struct cpu_state *s, const struct kern_mat *w, const float *in,
                             int tid, int nt)
{
    uint32_t dim = s->hp.dim, units = (dim + 3) / 4, k = w->cols / (uint32_t)s->tp, a, b;
    split_rows(units * (uint32_t)s->tp, tid, nt, &a, &b);
    size_t plane = (size_t)s->n_rows * dim;
    while (a < b) {
        uint32_t r = a / units, end = (r + 1) * units < b ? (r + 1) * units : b;
        struct kern_mat view = *w;
        view.data = (const uint8_t *)w->data + rs_ggml_row_bytes(w->type, (uint64_t)r * k);
        view.cols = k;
        uint32_t c0 = (a - r * units) * 4, c1 = (end - r * units) * 4;
        kern_gemm(s->isa, &view, in + (size_t)r * k, w->cols, s->n_rows,
                  s->partial + (size_t)r * plane, dim, c0, c1 < dim ? c1 : dim, 0,
                  thread_gemm_scratch(s, tid));
        a = end;
    }
    pool_barrier(s->pool);
    size_t lo = plane * (size_t)tid / (size_t)nt, hi = plane * (size_t)(tid + 1) / (size_t)nt;
    for (size_t i = lo; i < hi; i++) {
        float sum = s->partial[i];
        for (int r = 1; r < s->tp; r++)
            sum += s->partial[(size_t)r * plane + i];
        s->x[i] += sum;
    }
}

/* x += in W^T for a dim x cols matrix W, on this thread's columns of x. */
static void residual_gemm(struct cpu_state *s, const struct kern_mat *w, const float *in,
                          int tid, int nt)
{
    if (s->tp > 1) {
        sharded_residual(s, w, in, tid, nt);
        return;
    }
    uint32_t a, b;
    split_cols(s->hp.dim, tid, nt, &a, &b);
    kern_gemm(s->isa, w, in, w->cols, s->n_rows, s->x, s->hp.dim, a, b, 1,
              thread_gemm_scratch(s, tid));
}

/*
 * xn = norm(x) | q,k,v = xn W (+RoPE, K/V to the cache) | attention |
 * x += att Wo | xn = norm(x) | gate,up = xn W; gate = swiglu | x += gate Wdown
 */
static void layer_forward(struct cpu_state *s, uint32_t il, int tid, int nt)
{
    const struct llama_layer *dl = &s->d->layers[il];
    const struct cpu_layer *l = &s->layers[il];
    norm_rows(s, dl->attn_norm, tid, nt);
    pool_barrier(s->pool);
    qkv_phase(s, il, tid, nt);
    pool_barrier(s->pool);
    attention_phase(s, il, tid);
    pool_barrier(s->pool);
    residual_gemm(s, &l->wo, s->att, tid, nt);
    pool_barrier(s->pool);
    norm_rows(s, dl->ffn_norm, tid, nt);
    pool_barrier(s->pool);
    ffn_up_phase(s, l, tid, nt);
    pool_barrier(s->pool);
    residual_gemm(s, &l->w_down, s->gate, tid, nt);
    pool_barrier(s->pool);
}

static void logits_phase(struct cpu_state *s, int tid, int nt)
{
    const struct rs_model_hparams *hp = &s->hp;
    float *xl = s->logits + (size_t)s->cap_want * hp->n_vocab;
    uint32_t a, b, j = 0, r = 0;
    split_rows(s->n_want, tid, nt, &a, &b);
    for (uint32_t i = 0; i < s->n_seqs; i++) {
        r += s->seqs[i].n_tokens;
        if (s->seq_logit[i] < 0)
            continue;
        if (j >= a && j < b)
            kern_rmsnorm(s->x + (size_t)(r - 1) * hp->dim, s->d->output_norm, hp->dim,
                         hp->rms_eps, xl + (size_t)j * hp->dim);
        j++;
    }
    pool_barrier(s->pool);
    split_cols(hp->n_vocab, tid, nt, &a, &b);
    kern_gemm(s->isa, &s->output, xl, hp->dim, s->n_want, s->logits, hp->n_vocab, a, b, 0,
              thread_gemm_scratch(s, tid));
}

void cpu_forward_thread(void *arg, int tid, int nt)
{
    struct cpu_state *s = arg;
    embed_rows(s, tid, nt);
    pool_barrier(s->pool);
    for (uint32_t il = 0; il < s->hp.n_layers; il++)
        layer_forward(s, il, tid, nt);
    if (s->n_want > 0)
        logits_phase(s, tid, nt);
}

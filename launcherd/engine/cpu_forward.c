/* SPDX-License-Identifier: MIT */
/*
 * The forward pass on the CPU, run by every pool thread at once, for every
 * architecture of the descriptor table: the per-architecture steps (biases,
 * q/k norms, NEOX RoPE, sliding windows, soft-caps, post norms, GeGLU,
 * embedding scale) are driven by the resolved hyperparameters and per-layer
 * pointers, never by the architecture's name. Each phase splits its work
 * statically: row-local ops by rows, GEMMs by output columns (4-aligned
 * slices), the Q/K finishing step by (row, head), attention by (KV head,
 * row) units balanced by visible context. Every output element is computed
 * whole by one thread with the kernels' fixed reduction order, so the
 * result depends neither on the split nor on the thread count. Barriers
 * separate the phases (layer_forward).
 */
#include "launcherd/engine/cpu_forward.h"

#include <math.h>
#include <string.h>

static size_t max_cols(const struct rs_model_hparams *hp)
{
    size_t qd = (size_t)hp->n_heads * hp->head_dim, m = hp->ffn_dim > hp->dim ? hp->ffn_dim : hp->dim;
    return qd > m ? qd : m;
}

/* 2 when local layers rotate with a base or scale of their own (a second table per row). */
static int rope_tables(const struct rs_model_hparams *hp)
{
    return hp->n_local > 0 && (hp->local_rope_base != hp->rope_freq_base ||
                               hp->local_rope_scale != hp->rope_scale) ? 2 : 1;
}

size_t cpu_row_floats(const struct rs_model_hparams *hp)
{
    size_t qd = (size_t)hp->n_heads * hp->head_dim, kvd = (size_t)hp->n_kv_heads * hp->head_dim;
    return 2 * (size_t)hp->dim + 2 * qd + 2 * kvd + 2 * (size_t)hp->ffn_dim +
           (size_t)rope_tables(hp) * hp->rope_dim;
}

size_t cpu_thread_floats(const struct rs_model_hparams *hp, uint32_t npos)
{
    size_t group = hp->n_heads / hp->n_kv_heads;
    size_t n = kern_gemm_scratch_floats((uint32_t)max_cols(hp)) + group * (2 * (size_t)npos + 1);
    return (n + 15) & ~(size_t)15; /* each thread's scratch on its own cache lines */
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
    s->n_rope = rope_tables(hp);
    s->row_pos = s->row_seq + n;
}

/* Positions row r attends to on a global (local = 0) or local layer: its cost, about. */
static uint32_t visible(const struct cpu_state *s, uint32_t r, int local)
{
    uint32_t n = s->row_pos[r] + 1, w = s->hp.swa_window;
    return local && n > w ? w : n;
}

/*
 * Attention units (KV head, row), head-major so consecutive units reuse one
 * head's K/V from cache; each costs about its visible context. Split the sum evenly.
 */
static void plan_attention(struct cpu_state *s, int local, uint32_t *split)
{
    uint32_t nkv = s->hp.n_kv_heads, units = s->n_rows * nkv;
    uint64_t total = 0, acc = 0;
    for (uint32_t r = 0; r < s->n_rows; r++)
        total += (uint64_t)(visible(s, r, local) + 8) * nkv;
    int t = 0;
    split[0] = 0;
    for (uint32_t u = 0; u < units && t + 1 < s->nt; u++) {
        acc += visible(s, u % s->n_rows, local) + 8;
        while (t + 1 < s->nt && acc * (uint64_t)s->nt >= total * (uint64_t)(t + 1))
            split[++t] = u + 1;
    }
    while (t < s->nt)
        split[++t] = units;
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
    plan_attention(s, 0, s->attn_split[0]);
    if (s->hp.n_local > 0)
        plan_attention(s, 1, s->attn_split[1]);
}

/* Rows [a, b) of n for thread tid. */
static void split_rows(uint32_t n, int tid, int nt, uint32_t *a, uint32_t *b)
{
    *a = (uint32_t)((uint64_t)n * tid / nt);
    *b = (uint32_t)((uint64_t)n * (tid + 1) / nt);
}

/* Output columns per work unit: whole GEMM tiles (4) and whole interleaved row groups (8, so no
 * thread gathers a cut group's rows one by one: kern_mat_row). */
#define COL_UNIT 8

/* Columns [a, b) of n in whole COL_UNIT units. */
static void split_cols(uint32_t n, int tid, int nt, uint32_t *a, uint32_t *b)
{
    uint32_t units = (n + COL_UNIT - 1) / COL_UNIT, ua, ub;
    split_rows(units, tid, nt, &ua, &ub);
    *a = ua * COL_UNIT < n ? ua * COL_UNIT : n;
    *b = ub * COL_UNIT < n ? ub * COL_UNIT : n;
}

static float *thread_gemm_scratch(struct cpu_state *s, int tid)
{
    return s->thread_mem + (size_t)tid * cpu_thread_floats(&s->hp, s->cap_npos);
}

/* The rotation table of row r for a layer: the local one on local layers when it differs. */
static float *rope_of(const struct cpu_state *s, uint32_t r, int local)
{
    size_t t = local && s->n_rope > 1 ? 1 : 0;
    return s->rope + (t * s->cap_rows + r) * s->hp.rope_dim;
}

/* x = embedding (times embd_scale), the rows' RoPE tables, xn = norm(x) for layer 0. */
static void embed_rows(struct cpu_state *s, int tid, int nt)
{
    const struct rs_model_hparams *hp = &s->hp;
    uint32_t a, b, d = hp->dim;
    split_rows(s->n_rows, tid, nt, &a, &b);
    for (uint32_t r = a; r < b; r++) {
        const struct rs_model_seq *q = &s->seqs[s->row_seq[r]];
        int32_t tok = q->tokens[s->row_pos[r] - q->pos0];
        float *x = s->x + (size_t)r * d;
        kern_widen_row(s->isa, &s->tok_embd, (uint32_t)tok, x);
        if (hp->embd_scale != 1.0f)
            for (uint32_t i = 0; i < d; i++)
                x[i] *= hp->embd_scale;
        kern_rope_table(s->row_pos[r], hp->rope_dim, hp->rope_freq_base, 1.0f / hp->rope_scale,
                        s->d->rope_freqs, rope_of(s, r, 0));
        if (s->n_rope > 1)
            kern_rope_table(s->row_pos[r], hp->rope_dim, hp->local_rope_base,
                            1.0f / hp->local_rope_scale, NULL, rope_of(s, r, 1));
        kern_rmsnorm(x, s->d->layers[0].attn_norm, d, hp->rms_eps, s->xn + (size_t)r * d);
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
    split_cols(kvd, tid, nt, &a, &b);
    kern_gemm(s->isa, &l->wk, s->xn, hp->dim, s->n_rows, s->k, kvd, a, b, 0, scr);
    kern_gemm(s->isa, &l->wv, s->xn, hp->dim, s->n_rows, s->v, kvd, a, b, 0, scr);
}

static void add_vec(float *x, const float *b, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        x[i] += b[i];
}

/* One head of Q or K after its GEMM: bias, per-head RMSNorm, RoPE (each when the layer has it). */
static void finish_head(const struct cpu_state *s, float *x, const float *bias, const float *norm,
                        const float *rope)
{
    uint32_t hd = s->hp.head_dim;
    if (bias != NULL)
        add_vec(x, bias, hd);
    if (norm != NULL)
        kern_rmsnorm(x, norm, hd, s->hp.rms_eps, x);
    kern_rope_head(x, s->hp.rope_dim, s->hp.rope_neox, rope);
}

/* KV head kh of row r: finished K, V (+ bias) into the row's cache slot. */
static void finish_kv_head(struct cpu_state *s, uint32_t il, uint32_t r, uint32_t kh)
{
    const struct llama_layer *dl = &s->d->layers[il];
    const struct cpu_kv *kv = s->kv;
    uint32_t hd = s->hp.head_dim, bs = kv->block_size, kvd = s->hp.n_kv_heads * hd;
    float *k = s->k + (size_t)r * kvd + (size_t)kh * hd, *v = s->v + (size_t)r * kvd + (size_t)kh * hd;
    finish_head(s, k, dl->bk ? dl->bk + (size_t)kh * hd : NULL, dl->k_norm, rope_of(s, r, dl->local));
    if (dl->bv != NULL)
        add_vec(v, dl->bv + (size_t)kh * hd, hd);
    const struct rs_model_seq *q = &s->seqs[s->row_seq[r]];
    uint32_t p = s->row_pos[r];
    size_t off = (size_t)q->block_table[p / bs] * kv->block_stride + ((size_t)kh * bs + p % bs) * hd;
    float *kbase = kv->mem + (size_t)il * 2 * kv->layer_floats;
    memcpy(kbase + off, k, hd * sizeof(float));
    memcpy(kbase + kv->layer_floats + off, v, hd * sizeof(float));
}

/* Units (row, head) over the Q heads then the KV heads of every row. */
static void qk_finish_phase(struct cpu_state *s, uint32_t il, int tid, int nt)
{
    const struct llama_layer *dl = &s->d->layers[il];
    uint32_t nh = s->hp.n_heads, per = nh + s->hp.n_kv_heads, hd = s->hp.head_dim, a, b;
    split_rows(s->n_rows * per, tid, nt, &a, &b);
    for (uint32_t u = a; u < b; u++) {
        uint32_t r = u / per, h = u % per;
        if (h >= nh) {
            finish_kv_head(s, il, r, h - nh);
            continue;
        }
        float *x = s->q + ((size_t)r * nh + h) * hd;
        finish_head(s, x, dl->bq ? dl->bq + (size_t)h * hd : NULL, dl->q_norm,
                    rope_of(s, r, dl->local));
    }
}

/* 1 when row r + 1 is the next position of row r's sequence, in the same unit head, with the
 * same first visible position: kern_attention2 takes the two. */
static int next_row_pairs(const struct cpu_state *s, uint32_t r, int local)
{
    if (r + 1 >= s->n_rows || s->row_seq[r + 1] != s->row_seq[r] ||
        s->row_pos[r + 1] != s->row_pos[r] + 1)
        return 0;
    uint32_t first0 = s->row_pos[r] + 1 - visible(s, r, local);
    return first0 == s->row_pos[r + 1] + 1 - visible(s, r + 1, local);
}

static void attention_phase(struct cpu_state *s, uint32_t layer, int tid)
{
    const struct rs_model_hparams *hp = &s->hp;
    const struct cpu_kv *kv = s->kv;
    int local = s->d->layers[layer].local;
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
    const uint32_t *split = s->attn_split[local];
    for (uint32_t u = split[tid]; u < split[tid + 1]; u++) {
        uint32_t h = u / s->n_rows, r = u % s->n_rows, n = s->row_pos[r] + 1;
        const struct rs_model_seq *q = &s->seqs[s->row_seq[r]];
        size_t off = (size_t)r * qd + (size_t)h * group * hd;
        struct kern_attn at = {n - visible(s, r, local), n, hp->attn_scale, hp->attn_softcap};
        if (u + 1 < split[tid + 1] && next_row_pairs(s, r, local)) {
            /* two prompt rows at once: the same bits, each key and value loaded once */
            kern_attention2(s->isa, &lay, q->block_table, h, group, &at, s->q + off,
                            s->q + off + qd, scores, s->att + off, s->att + off + qd);
            u++;
            continue;
        }
        kern_attention(s->isa, &lay, q->block_table, h, group, &at, s->q + off, scores,
                       s->att + off);
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
    for (uint32_t r = 0; r < s->n_rows; r++) {
        float *g = s->gate + (size_t)r * f + a;
        const float *u = s->up + (size_t)r * f + a;
        if (hp->ffn_gelu)
            kern_geglu(s->isa, g, u, b - a);
        else
            kern_swiglu(s->isa, g, u, b - a);
    }
}

/*
 * Tensor parallelism (s->tp > 1): shard r holds columns [r K/tp, (r+1) K/tp)
 * of W (its heads of Wo, its FFN columns of Wdown) and computes its partial
 * dot products for every output; the all-reduce then adds the partials to y
 * in shard order, (p0 + p1) + p2 ..., so the result depends on tp, never on
 * the thread count or the batch. Work items are (shard, COL_UNIT-column unit) pairs.
 */
static void sharded_gemm(struct cpu_state *s, const struct kern_mat *w, const float *in,
                         float *y, int accumulate, int tid, int nt)
{
    uint32_t dim = s->hp.dim, units = (dim + COL_UNIT - 1) / COL_UNIT;
    uint32_t k = w->cols / (uint32_t)s->tp, a, b;
    split_rows(units * (uint32_t)s->tp, tid, nt, &a, &b);
    size_t plane = (size_t)s->n_rows * dim;
    while (a < b) {
        uint32_t r = a / units, end = (r + 1) * units < b ? (r + 1) * units : b;
        struct kern_mat view = kern_mat_cols(w, r * k, k);
        uint32_t c0 = (a - r * units) * COL_UNIT, c1 = (end - r * units) * COL_UNIT;
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
        y[i] = accumulate ? y[i] + sum : sum;
    }
}

/*
 * in W^T for a dim x cols matrix W, on this thread's columns: added to x
 * (the residual), or stored in xn when the layer normalizes it first (post norms).
 */
static void out_gemm(struct cpu_state *s, const struct kern_mat *w, const float *in, int post,
                     int tid, int nt)
{
    float *y = post ? s->xn : s->x;
    if (s->tp > 1) {
        sharded_gemm(s, w, in, y, !post, tid, nt);
        return;
    }
    uint32_t a, b;
    split_cols(s->hp.dim, tid, nt, &a, &b);
    kern_gemm(s->isa, w, in, w->cols, s->n_rows, y, s->hp.dim, a, b, !post,
              thread_gemm_scratch(s, tid));
}

/*
 * Row-local step between sublayers: with a post norm, x += norm(xn) * post
 * (xn holding the sublayer's output); then xn = norm(x) * next for the next
 * GEMM (next NULL after the last layer: the logits phase normalizes).
 */
static void finish_rows(struct cpu_state *s, const float *post, const float *next, int tid,
                        int nt)
{
    uint32_t a, b, d = s->hp.dim;
    split_rows(s->n_rows, tid, nt, &a, &b);
    for (uint32_t r = a; r < b; r++) {
        float *x = s->x + (size_t)r * d, *xn = s->xn + (size_t)r * d;
        if (post != NULL) {
            kern_rmsnorm(xn, post, d, s->hp.rms_eps, xn);
            add_vec(x, xn, d);
        }
        if (next != NULL)
            kern_rmsnorm(x, next, d, s->hp.rms_eps, xn);
    }
}

/*
 * (xn = norm(x), from the step before) | q,k,v = xn W | bias, q/k norm, RoPE,
 * K/V to the cache | attention | x += [norm](att Wo) | xn = norm(x) |
 * gate,up = xn W; gate = act(gate) * up | x += [norm](gate Wdown) | xn = norm(x)
 * for the next layer. [norm]: only with post norms (gemma).
 */
static void layer_forward(struct cpu_state *s, uint32_t il, int tid, int nt)
{
    const struct llama_layer *dl = &s->d->layers[il];
    const struct cpu_layer *l = &s->layers[il];
    const float *next = il + 1 < s->hp.n_layers ? s->d->layers[il + 1].attn_norm : NULL;
    qkv_phase(s, il, tid, nt);
    pool_barrier(s->pool);
    qk_finish_phase(s, il, tid, nt);
    pool_barrier(s->pool);
    attention_phase(s, il, tid);
    pool_barrier(s->pool);
    out_gemm(s, &l->wo, s->att, dl->post_attn_norm != NULL, tid, nt);
    pool_barrier(s->pool);
    finish_rows(s, dl->post_attn_norm, dl->ffn_norm, tid, nt);
    pool_barrier(s->pool);
    ffn_up_phase(s, l, tid, nt);
    pool_barrier(s->pool);
    out_gemm(s, &l->w_down, s->gate, dl->post_ffn_norm != NULL, tid, nt);
    pool_barrier(s->pool);
    if (dl->post_ffn_norm != NULL || next != NULL) {
        finish_rows(s, dl->post_ffn_norm, next, tid, nt);
        pool_barrier(s->pool);
    }
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
    if (hp->final_softcap > 0.0f)
        for (j = 0; j < s->n_want; j++)
            kern_softcap(s->isa, s->logits + (size_t)j * hp->n_vocab + a, b - a,
                         hp->final_softcap);
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

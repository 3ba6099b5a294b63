/* SPDX-License-Identifier: MIT */
/*
 * AVX2 + FMA kernels of the row-local and attention ops: paged attention
 * for one query row over its visible span (scores, optional soft-cap,
 * softmax, weighted values, each reduction in position order), the vector
 * e^x and tanh they share, SwiGLU and GeGLU. Compiled with
 * target attributes so the binary still runs on any x86-64.
 */
#include "launcherd/engine/kernels.h"

#if defined(__x86_64__)

#include <math.h>
#include <string.h>

#include "launcherd/engine/avx2_impl.h"

/* --- attention ------------------------------------------------------------ */

/* The 8-lane accumulator of dot(a, b) over n (kernels.h order), before the tree. */
INL __m256 dot_acc(const float *a, const float *b, uint32_t n)
{
    __m256 acc = _mm256_setzero_ps();
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    if (i < n) {
        __m256i mask = tail_mask(n - i);
        acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, mask), _mm256_maskload_ps(b + i, mask),
                              acc);
    }
    return acc;
}

/*
 * Four dot_acc at once, interleaved so the four FMA chains overlap (one
 * chain alone waits on FMA latency); each accumulator sees the same
 * operations dot_acc would give it.
 */
INL __m128 dot4(const float *q, const float *k, uint32_t hd)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const float *k1 = k + hd, *k2 = k1 + hd, *k3 = k2 + hd;
    uint32_t i = 0;
    for (; i + 8 <= hd; i += 8) {
        __m256 qv = _mm256_loadu_ps(q + i);
        a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + i), a0);
        a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k1 + i), a1);
        a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k2 + i), a2);
        a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k3 + i), a3);
    }
    if (i < hd) {
        __m256i mask = tail_mask(hd - i);
        __m256 qv = _mm256_maskload_ps(q + i, mask);
        a0 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k + i, mask), a0);
        a1 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k1 + i, mask), a1);
        a2 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k2 + i, mask), a2);
        a3 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k3 + i, mask), a3);
    }
    return hsum4(a0, a1, a2, a3);
}

/* Scores of query q against the n keys at k (rows of hd floats), 4 at a time through hsum4. */
INL void scores_block(const float *q, const float *k, uint32_t n, uint32_t hd, float scale,
                      float *out)
{
    uint32_t j = 0;
    __m128 sc = _mm_set1_ps(scale);
    for (; j + 4 <= n; j += 4)
        _mm_storeu_ps(out + j, _mm_mul_ps(dot4(q, k + (size_t)j * hd, hd), sc));
    for (; j < n; j++)
        out[j] = hsum1(dot_acc(q, k + (size_t)j * hd, hd)) * scale;
}

/* dot4 for two queries against the same 4 keys, each key loaded once: every accumulator sees
 * dot4's operations, so each score is dot4's (and hsum1's: hsum4's lanes are its bits). */
INL void dot4x2(const float *q0, const float *q1, const float *k, uint32_t hd, __m128 *s0,
                __m128 *s1)
{
    __m256 a[4], b[4];
    UNROLL for (int j = 0; j < 4; j++) a[j] = b[j] = _mm256_setzero_ps();
    uint32_t i = 0;
    for (; i + 8 <= hd; i += 8) {
        __m256 x0 = _mm256_loadu_ps(q0 + i), x1 = _mm256_loadu_ps(q1 + i);
        UNROLL for (int j = 0; j < 4; j++) {
            __m256 kv = _mm256_loadu_ps(k + (size_t)j * hd + i);
            a[j] = _mm256_fmadd_ps(x0, kv, a[j]);
            b[j] = _mm256_fmadd_ps(x1, kv, b[j]);
        }
    }
    if (i < hd) {
        __m256i mask = tail_mask(hd - i);
        __m256 x0 = _mm256_maskload_ps(q0 + i, mask), x1 = _mm256_maskload_ps(q1 + i, mask);
        UNROLL for (int j = 0; j < 4; j++) {
            __m256 kv = _mm256_maskload_ps(k + (size_t)j * hd + i, mask);
            a[j] = _mm256_fmadd_ps(x0, kv, a[j]);
            b[j] = _mm256_fmadd_ps(x1, kv, b[j]);
        }
    }
    *s0 = hsum4(a[0], a[1], a[2], a[3]);
    *s1 = hsum4(b[0], b[1], b[2], b[3]);
}

/* scores_block for two queries against the same n keys. */
INL void scores_block2(const float *q0, const float *q1, const float *k, uint32_t n, uint32_t hd,
                       float scale, float *out0, float *out1)
{
    uint32_t j = 0;
    __m128 sc = _mm_set1_ps(scale), s0, s1;
    for (; j + 4 <= n; j += 4) {
        dot4x2(q0, q1, k + (size_t)j * hd, hd, &s0, &s1);
        _mm_storeu_ps(out0 + j, _mm_mul_ps(s0, sc));
        _mm_storeu_ps(out1 + j, _mm_mul_ps(s1, sc));
    }
    for (; j < n; j++) {
        out0[j] = hsum1(dot_acc(q0, k + (size_t)j * hd, hd)) * scale;
        out1[j] = hsum1(dot_acc(q1, k + (size_t)j * hd, hd)) * scale;
    }
}

/*
 * e^x for 8 lanes: Cephes-style range reduction x = n ln2 + r, a degree-6
 * polynomial for e^r, then 2^n through the exponent bits. Within 1 ulp of
 * the correctly rounded e^x for x in [-87, 88] (measured on a 1e-4 grid);
 * below -88.37 it gives 0, above +88.37 it saturates near 2.4e38 (never inf).
 * One fixed function of x, so a lane's result never depends on its
 * neighbours or on where a tail was padded.
 */
INL __m256 exp8(__m256 x)
{
    x = _mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f));
    x = _mm256_max_ps(x, _mm256_set1_ps(-88.3762626647949f));
    __m256 fx = _mm256_floor_ps(
        _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), x);
    y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
    __m256i n = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(n));
}

/* Loads lanes [0, n) of p (n < 8), the rest `fill`. */
INL __m256 load_part(const float *p, uint32_t n, float fill)
{
    float t[8] = {fill, fill, fill, fill, fill, fill, fill, fill};
    memcpy(t, p, n * sizeof(float));
    return _mm256_loadu_ps(t);
}

INL void store_part(float *p, __m256 v, uint32_t n)
{
    float t[8];
    _mm256_storeu_ps(t, v);
    memcpy(p, t, n * sizeof(float));
}

/* tanh for 8 lanes: sign(x) (1 - e) / (1 + e) with e = e^(-2|x|), exp8's e^x (no overflow). */
INL __m256 tanh8(__m256 x)
{
    const __m256 one = _mm256_set1_ps(1.0f), sgn = _mm256_set1_ps(-0.0f);
    __m256 e = exp8(_mm256_mul_ps(_mm256_andnot_ps(sgn, x), _mm256_set1_ps(-2.0f)));
    __m256 t = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
    return _mm256_or_ps(t, _mm256_and_ps(x, sgn));
}

/* s[i] = cap * tanh(s[i] / cap) over n values (attention scores, final logits). */
TGT void kern_softcap_avx2(float *s, uint32_t n, float cap)
{
    __m256 c = _mm256_set1_ps(cap), inv = _mm256_set1_ps(1.0f / cap);
    uint32_t t = 0;
    for (; t + 8 <= n; t += 8)
        _mm256_storeu_ps(s + t, _mm256_mul_ps(c, tanh8(_mm256_mul_ps(_mm256_loadu_ps(s + t), inv))));
    if (t < n)
        store_part(s + t, _mm256_mul_ps(c, tanh8(_mm256_mul_ps(load_part(s + t, n - t, 0.0f), inv))),
                   n - t);
}

/* Softmax of s[0..n) in place; the sum runs in 8 position-strided lanes and the fixed tree. */
TGT static void softmax8(float *s, uint32_t n)
{
    __m256 mx = _mm256_set1_ps(-INFINITY);
    uint32_t t = 0;
    for (; t + 8 <= n; t += 8)
        mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + t));
    if (t < n)
        mx = _mm256_max_ps(mx, load_part(s + t, n - t, -INFINITY));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    __m256 m = _mm256_broadcastss_ps(m4), sum = _mm256_setzero_ps();
    for (t = 0; t + 8 <= n; t += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t), m));
        _mm256_storeu_ps(s + t, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (t < n) { /* padded lanes hold max - max = 0 -> 1; masked out of the sum */
        __m256 e = exp8(_mm256_sub_ps(load_part(s + t, n - t, 0.0f), m));
        store_part(s + t, e, n - t);
        sum = _mm256_add_ps(sum, _mm256_and_ps(e, _mm256_castsi256_ps(tail_mask(n - t))));
    }
    __m256 inv = _mm256_set1_ps(1.0f / hsum1(sum));
    for (t = 0; t + 8 <= n; t += 8)
        _mm256_storeu_ps(s + t, _mm256_mul_ps(_mm256_loadu_ps(s + t), inv));
    for (; t < n; t++)
        s[t] *= _mm256_cvtss_f32(inv);
}

TGT void kern_swiglu_avx2(float *g, const float *u, uint32_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(g + i);
        __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v));
        __m256 silu = _mm256_div_ps(v, _mm256_add_ps(one, e));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
    }
    if (i < n) {
        __m256 v = load_part(g + i, n - i, 0.0f);
        __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v));
        __m256 r = _mm256_mul_ps(_mm256_div_ps(v, _mm256_add_ps(one, e)), load_part(u + i, n - i, 0));
        store_part(g + i, r, n - i);
    }
}

/* g[i] = gelu(g[i]) * u[i] with gelu(x) = x / (1 + e^(-2 sqrt(2/pi) x (1 + 0.044715 x^2))). */
INL __m256 gelu8(__m256 x)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(x, x), _mm256_set1_ps(0.044715f), one);
    __m256 z = _mm256_mul_ps(_mm256_mul_ps(x, _mm256_set1_ps(-1.5957691216057308f)), inner);
    return _mm256_div_ps(x, _mm256_add_ps(one, exp8(z)));
}

TGT void kern_geglu_avx2(float *g, const float *u, uint32_t n)
{
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(g + i, _mm256_mul_ps(gelu8(_mm256_loadu_ps(g + i)), _mm256_loadu_ps(u + i)));
    if (i < n)
        store_part(g + i, _mm256_mul_ps(gelu8(load_part(g + i, n - i, 0.0f)),
                                        load_part(u + i, n - i, 0.0f)),
                   n - i);
}

/* Positions from t0 to the end of its cache block, or to end if that comes first: one
 * contiguous run of a head's rows. */
INL uint32_t run_len(const struct kern_kv_layout *kv, uint32_t t0, uint32_t end)
{
    uint32_t left = kv->block_size - t0 % kv->block_size;
    return left < end - t0 ? left : end - t0;
}

/*
 * out[0..8*nv) = sum over t of p[t - first] * v_t for t in [first, n_pos),
 * v_t at the paged positions; each element accumulates in position order in
 * a register (nv <= 8 vectors).
 */
INL void pv_chunk(const struct kern_kv_layout *kv, const uint32_t *table, size_t off,
                  const struct kern_attn *a, const float *p, int nv, float *out)
{
    __m256 acc[8];
    UNROLL for (int j = 0; j < 8; j++) acc[j] = _mm256_setzero_ps();
    uint32_t hd = kv->head_dim;
    for (uint32_t t0 = a->first; t0 < a->n_pos;) {
        uint32_t n = run_len(kv, t0, a->n_pos);
        const float *v = kern_kv_row(kv, kv->v, table, off, t0);
        const float *pt0 = p + (t0 - a->first);
        for (uint32_t t = 0; t < n; t++, v += hd) {
            __m256 pt = _mm256_set1_ps(pt0[t]);
            UNROLL for (int j = 0; j < 8; j++) if (j < nv) acc[j] =
                _mm256_fmadd_ps(pt, _mm256_loadu_ps(v + 8 * j), acc[j]);
        }
        t0 += n;
    }
    UNROLL for (int j = 0; j < 8; j++) if (j < nv) _mm256_storeu_ps(out + 8 * j, acc[j]);
}

/*
 * pv_chunk for two rows of one sequence, the second one position longer
 * (positions first .. n_pos of a, where the first stops at n_pos - 1): each v
 * vector is loaded once for both; each element accumulates in position order
 * as pv_chunk's (nv <= 4: 8 accumulators).
 */
INL void pv_chunk2(const struct kern_kv_layout *kv, const uint32_t *table, size_t off,
                   const struct kern_attn *a, const float *p0, const float *p1, int nv,
                   float *out0, float *out1)
{
    __m256 acc0[4], acc1[4];
    UNROLL for (int j = 0; j < 4; j++) acc0[j] = acc1[j] = _mm256_setzero_ps();
    uint32_t hd = kv->head_dim;
    for (uint32_t t0 = a->first; t0 < a->n_pos;) {
        uint32_t n = run_len(kv, t0, a->n_pos);
        const float *v = kern_kv_row(kv, kv->v, table, off, t0);
        const float *pa = p0 + (t0 - a->first), *pb = p1 + (t0 - a->first);
        for (uint32_t t = 0; t < n; t++, v += hd) {
            __m256 wa = _mm256_set1_ps(pa[t]), wb = _mm256_set1_ps(pb[t]);
            UNROLL for (int j = 0; j < 4; j++) if (j < nv) {
                __m256 vv = _mm256_loadu_ps(v + 8 * j);
                acc0[j] = _mm256_fmadd_ps(wa, vv, acc0[j]);
                acc1[j] = _mm256_fmadd_ps(wb, vv, acc1[j]);
            }
        }
        t0 += n;
    }
    const float *v = kern_kv_row(kv, kv->v, table, off, a->n_pos);
    __m256 wb = _mm256_set1_ps(p1[a->n_pos - a->first]);
    UNROLL for (int j = 0; j < 4; j++) if (j < nv) {
        _mm256_storeu_ps(out0 + 8 * j, acc0[j]);
        _mm256_storeu_ps(out1 + 8 * j, _mm256_fmadd_ps(wb, _mm256_loadu_ps(v + 8 * j), acc1[j]));
    }
}

/* The same for the last hd % 8 elements, one scalar FMA chain each. */
static void pv_tail(const struct kern_kv_layout *kv, const uint32_t *table, size_t off,
                    const struct kern_attn *a, const float *p, uint32_t n_el, float *out)
{
    for (uint32_t i = 0; i < n_el; i++) {
        float acc = 0.0f;
        for (uint32_t t = a->first; t < a->n_pos; t++)
            acc = fmaf(p[t - a->first], kern_kv_row(kv, kv->v, table, off, t)[i], acc);
        out[i] = acc;
    }
}

/*
 * Prefetches the n rows of hd floats at p, into L1 (t0) or L2. A head's keys
 * and values sit in one short run per cache block (block_size rows), and a
 * decode step finds them in DRAM (the weights streamed through the caches
 * since the last step): the hardware prefetcher only picks up each run after
 * its first misses (perf, batch-1 decode: a tenth of the step in attention,
 * which reads a twelfth of its bytes).
 */
INL void prefetch_rows(const float *p, uint32_t n, uint32_t hd, int t0)
{
    const char *c = (const char *)p, *end = c + (size_t)n * hd * sizeof(float);
    for (; c < end; c += 64) {
        if (t0)
            _mm_prefetch(c, _MM_HINT_T0);
        else
            _mm_prefetch(c, _MM_HINT_T1);
    }
}

TGT void kern_attention_avx2(const struct kern_kv_layout *kv, const uint32_t *table,
                             uint32_t kv_head, uint32_t n_group, const struct kern_attn *a,
                             const float *q, float *scores, float *out)
{
    uint32_t hd = kv->head_dim, bs = kv->block_size, n_sc = a->n_pos - a->first;
    size_t head_off = (size_t)kv_head * bs * hd;
    for (uint32_t t0 = a->first; t0 < a->n_pos;) {
        uint32_t n = run_len(kv, t0, a->n_pos);
        const float *k = kern_kv_row(kv, kv->k, table, head_off, t0);
        /* the next run of keys into L1 while this one is scored; this run's values into L2
         * for the weighted sum after the softmax */
        if (t0 + n < a->n_pos) {
            prefetch_rows(kern_kv_row(kv, kv->k, table, head_off, t0 + n),
                          run_len(kv, t0 + n, a->n_pos), hd, 1);
        }
        prefetch_rows(kern_kv_row(kv, kv->v, table, head_off, t0), n, hd, 0);
        for (uint32_t g = 0; g < n_group; g++)
            scores_block(q + (size_t)g * hd, k, n, hd, a->scale,
                         scores + (size_t)g * n_sc + (t0 - a->first));
        t0 += n;
    }
    for (uint32_t g = 0; g < n_group; g++) {
        float *p = scores + (size_t)g * n_sc, *o = out + (size_t)g * hd;
        if (a->softcap > 0.0f)
            kern_softcap_avx2(p, n_sc, a->softcap);
        softmax8(p, n_sc);
        uint32_t d = 0;
        for (; d + 64 <= hd; d += 64)
            pv_chunk(kv, table, head_off + d, a, p, 8, o + d);
        if (hd - d >= 8)
            pv_chunk(kv, table, head_off + d, a, p, (int)((hd - d) / 8), o + d);
        d += (hd - d) / 8 * 8;
        if (d < hd)
            pv_tail(kv, table, head_off + d, a, p, hd - d, o + d);
    }
}

/*
 * kern_attention for two query rows of one sequence at consecutive positions
 * (a: the first row's span; the second sees one position more), sharing each
 * key and value load: a prompt's rows read their keys and values from L2, two
 * loads to an FMA. Every output has the single-row kernel's operations.
 * scores: n_group * (2 (n_pos - first) + 1) floats.
 */
TGT void kern_attention2_avx2(const struct kern_kv_layout *kv, const uint32_t *table,
                              uint32_t kv_head, uint32_t n_group, const struct kern_attn *a,
                              const float *q0, const float *q1, float *scores, float *out0,
                              float *out1)
{
    uint32_t hd = kv->head_dim, bs = kv->block_size, n0 = a->n_pos - a->first, n1 = n0 + 1;
    size_t head_off = (size_t)kv_head * bs * hd;
    float *sc0 = scores, *sc1 = scores + (size_t)n_group * n0;
    for (uint32_t t0 = a->first; t0 < a->n_pos;) {
        uint32_t n = run_len(kv, t0, a->n_pos);
        const float *k = kern_kv_row(kv, kv->k, table, head_off, t0);
        for (uint32_t g = 0; g < n_group; g++)
            scores_block2(q0 + (size_t)g * hd, q1 + (size_t)g * hd, k, n, hd, a->scale,
                          sc0 + (size_t)g * n0 + (t0 - a->first),
                          sc1 + (size_t)g * n1 + (t0 - a->first));
        t0 += n;
    }
    const float *k_last = kern_kv_row(kv, kv->k, table, head_off, a->n_pos);
    for (uint32_t g = 0; g < n_group; g++)
        sc1[(size_t)g * n1 + n0] = hsum1(dot_acc(q1 + (size_t)g * hd, k_last, hd)) * a->scale;
    struct kern_attn a1 = *a;
    a1.n_pos++;
    for (uint32_t g = 0; g < n_group; g++) {
        float *p0 = sc0 + (size_t)g * n0, *p1 = sc1 + (size_t)g * n1;
        float *o0 = out0 + (size_t)g * hd, *o1 = out1 + (size_t)g * hd;
        if (a->softcap > 0.0f) {
            kern_softcap_avx2(p0, n0, a->softcap);
            kern_softcap_avx2(p1, n1, a->softcap);
        }
        softmax8(p0, n0);
        softmax8(p1, n1);
        uint32_t d = 0;
        for (; d + 32 <= hd; d += 32)
            pv_chunk2(kv, table, head_off + d, a, p0, p1, 4, o0 + d, o1 + d);
        if (hd - d >= 8)
            pv_chunk2(kv, table, head_off + d, a, p0, p1, (int)((hd - d) / 8), o0 + d, o1 + d);
        d += (hd - d) / 8 * 8;
        if (d < hd) {
            pv_tail(kv, table, head_off + d, a, p0, hd - d, o0 + d);
            pv_tail(kv, table, head_off + d, &a1, p1, hd - d, o1 + d);
        }
    }
}

#else /* not x86-64: kernels.c never selects these */

void kern_attention_avx2(const struct kern_kv_layout *kv, const uint32_t *table,
                         uint32_t kv_head, uint32_t n_group, const struct kern_attn *a,
                         const float *q, float *scores, float *out)
{
    kern_attention_portable(kv, table, kv_head, n_group, a, q, scores, out);
}

void kern_attention2_avx2(const struct kern_kv_layout *kv, const uint32_t *table,
                          uint32_t kv_head, uint32_t n_group, const struct kern_attn *a,
                          const float *q0, const float *q1, float *scores, float *out0,
                          float *out1)
{
    kern_attention2_portable(kv, table, kv_head, n_group, a, q0, q1, scores, out0, out1);
}

void kern_geglu_avx2(float *g, const float *u, uint32_t n)
{
    kern_geglu_portable(g, u, n);
}

void kern_softcap_avx2(float *x, uint32_t n, float cap)
{
    kern_softcap_portable(x, n, cap);
}

void kern_swiglu_avx2(float *g, const float *u, uint32_t n)
{
    kern_swiglu_portable(g, u, n);
}

#endif

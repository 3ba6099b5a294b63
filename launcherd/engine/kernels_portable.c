/* SPDX-License-Identifier: MIT */
/*
 * Portable C kernels: the fallback for CPUs without AVX2/FMA/F16C, and the
 * reference the SIMD variant is checked against. Same reduction order as
 * kernels.h defines (8 lanes, fixed tree), with a rounded multiply then add
 * where the SIMD variant fuses them. Each weight row is widened to F32 once
 * with common/quant.h's dequantizers (ggml's block layouts) and reused for
 * every activation row.
 * Leaves out: any speed beyond what the compiler's auto-vectorizer gives.
 */
#include "launcherd/engine/kernels.h"

#include <math.h>
#include <string.h>

#include "common/quant.h"

#if defined(__clang__)
/* Keep multiply and add separate, as the definition above says (GCC's -std=c11 already does). */
#pragma STDC FP_CONTRACT OFF
#endif

#define LANES 8

static float tree8(const float a[LANES])
{
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

static float dot8(const float *w, const float *x, uint32_t n)
{
    float acc[LANES] = {0};
    uint32_t k = 0;
    for (; k + LANES <= n; k += LANES)
        for (int j = 0; j < LANES; j++)
            acc[j] = acc[j] + w[k + j] * x[k + j];
    for (uint32_t j = 0; k + j < n; j++)
        acc[j] = acc[j] + w[k + j] * x[k + j];
    return tree8(acc);
}

void kern_widen_row_portable(const struct kern_mat *w, uint32_t row, float *dst)
{
    /* common/quant's dequantizers are the definitions; every type was validated at load. */
    rs_quant_row_to_f32(w->type, (const uint8_t *)w->data + (size_t)row * w->row_bytes, dst,
                        w->cols);
}

void kern_gemm_portable(const struct kern_mat *w, const float *x, size_t ldx, uint32_t n_rows,
                        float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate,
                        float *scratch)
{
    uint32_t K = w->cols;
    for (uint32_t n = n0; n < n1; n++) {
        const float *row = (const float *)((const uint8_t *)w->data + (size_t)n * w->row_bytes);
        if (w->type != RS_GGML_F32) {
            kern_widen_row_portable(w, n, scratch);
            row = scratch;
        }
        for (uint32_t m = 0; m < n_rows; m++) {
            float d = dot8(row, x + (size_t)m * ldx, K);
            float *ym = y + (size_t)m * ldy + n;
            *ym = accumulate ? *ym + d : d;
        }
    }
}

void kern_attention_portable(const struct kern_kv_layout *kv, const uint32_t *table,
                             uint32_t kv_head, uint32_t n_group, const struct kern_attn *a,
                             const float *q, float *scores, float *out)
{
    uint32_t hd = kv->head_dim, t0 = a->first, n = a->n_pos - a->first;
    size_t head_off = (size_t)kv_head * kv->block_size * hd;
    for (uint32_t t = 0; t < n; t++) {
        const float *k = kern_kv_row(kv, kv->k, table, head_off, t0 + t);
        for (uint32_t g = 0; g < n_group; g++)
            scores[(size_t)g * n + t] = dot8(q + (size_t)g * hd, k, hd) * a->scale;
    }
    if (a->softcap > 0.0f)
        kern_softcap_portable(scores, n_group * n, a->softcap);
    for (uint32_t g = 0; g < n_group; g++) {
        float *s = scores + (size_t)g * n, mx = s[0], sum = 0.0f;
        for (uint32_t t = 1; t < n; t++)
            mx = s[t] > mx ? s[t] : mx;
        for (uint32_t t = 0; t < n; t++) {
            s[t] = expf(s[t] - mx);
            sum += s[t];
        }
        float inv = 1.0f / sum;
        for (uint32_t t = 0; t < n; t++)
            s[t] *= inv;
        memset(out + (size_t)g * hd, 0, hd * sizeof(float));
    }
    for (uint32_t t = 0; t < n; t++) {
        const float *v = kern_kv_row(kv, kv->v, table, head_off, t0 + t);
        for (uint32_t g = 0; g < n_group; g++) {
            float p = scores[(size_t)g * n + t], *o = out + (size_t)g * hd;
            for (uint32_t i = 0; i < hd; i++)
                o[i] = o[i] + p * v[i];
        }
    }
}

void kern_attention2_portable(const struct kern_kv_layout *kv, const uint32_t *table,
                              uint32_t kv_head, uint32_t n_group, const struct kern_attn *a,
                              const float *q0, const float *q1, float *scores, float *out0,
                              float *out1)
{
    struct kern_attn a1 = *a;
    a1.n_pos++;
    kern_attention_portable(kv, table, kv_head, n_group, a, q0, scores, out0);
    kern_attention_portable(kv, table, kv_head, n_group, &a1, q1, scores, out1);
}

void kern_swiglu_portable(float *g, const float *u, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        float v = g[i];
        g[i] = v / (1.0f + expf(-v)) * u[i];
    }
}

void kern_geglu_portable(float *g, const float *u, uint32_t n)
{
    const float c = 0.79788456080286535588f, a = 0.044715f; /* sqrt(2/pi), tanh-GELU cubic */
    for (uint32_t i = 0; i < n; i++) {
        float x = g[i];
        g[i] = 0.5f * x * (1.0f + tanhf(c * x * (1.0f + a * x * x))) * u[i];
    }
}

void kern_softcap_portable(float *x, uint32_t n, float cap)
{
    float inv = 1.0f / cap;
    for (uint32_t i = 0; i < n; i++)
        x[i] = cap * tanhf(x[i] * inv);
}

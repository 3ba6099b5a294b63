/* SPDX-License-Identifier: MIT */
/*
 * Portable C kernels: the fallback for CPUs without AVX2/FMA/F16C, and the
 * reference the SIMD variant is checked against. Same reduction order as
 * kernels.h defines (8 lanes, fixed tree), with a rounded multiply then add
 * where the SIMD variant fuses them. Each weight row is widened to F32 once
 * (common/quant.h for F16/BF16/Q8_0; the Q4_0/Q4_K/Q5_K/Q6_K block layouts here,
 * following ggml's) and reused for every activation row.
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

static float f16_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return rs_quant_f16_to_f32(h);
}

/* Q4_0 block: f16 d, 16 bytes; value j = d (lo nibble j - 8), value 16 + j = d (hi nibble j - 8). */
static void widen_q4_0(const uint8_t *b, float *y)
{
    float d = f16_at(b);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((b[2 + j] & 0x0F) - 8);
        y[j + 16] = d * (float)((b[2 + j] >> 4) - 8);
    }
}

/* Q4_K: the 6-bit scale and min of sub-block j from the 12 packed bytes. */
static void q4k_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/*
 * Q4_K block (256, five_bit 0): f16 d, f16 dmin, 12 scale bytes, 128 nibble
 * bytes; 8 sub-blocks of 32. Q5_K (five_bit 1) has 32 bytes of high bits
 * before the nibbles: value l of 64-value chunk j gains 16 when bit 2j
 * (l < 32) or 2j + 1 of high byte l % 32 is set.
 */
static void widen_kq(const uint8_t *b, float *y, int five_bit)
{
    float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *qh = b + 16, *q = b + (five_bit ? 48 : 16);
    for (int j = 0; j < 4; j++, q += 32, y += 64) {
        uint8_t sc, m;
        q4k_scale_min(b + 4, 2 * j, &sc, &m);
        float d1 = d * sc, m1 = dmin * m;
        q4k_scale_min(b + 4, 2 * j + 1, &sc, &m);
        float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; l++) {
            int lo = q[l] & 0x0F, hi = q[l] >> 4;
            if (five_bit) {
                lo |= ((qh[l] >> (2 * j)) & 1) << 4;
                hi |= ((qh[l] >> (2 * j + 1)) & 1) << 4;
            }
            y[l] = d1 * (float)lo - m1; /* exact product, one rounding */
            y[l + 32] = d2 * (float)hi - m2;
        }
    }
}

/* Q6_K block (256): 128 low-nibble bytes, 64 bytes of 2-bit highs, 16 int8 scales, f16 d. */
static void widen_q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = f16_at(b + 208);
    for (int n = 0; n < 2; n++, ql += 64, qh += 32, sc += 8, y += 128)
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) - 32;
            int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
}

void kern_widen_row_portable(const struct kern_mat *w, uint32_t row, float *dst)
{
    const uint8_t *src = (const uint8_t *)w->data + (size_t)row * w->row_bytes;
    uint32_t K = w->cols;
    switch (w->type) {
    case RS_GGML_Q4_0:
        for (uint32_t k = 0; k < K; k += 32)
            widen_q4_0(src + (size_t)k / 32 * 18, dst + k);
        break;
    case RS_GGML_Q4_K:
        for (uint32_t k = 0; k < K; k += 256)
            widen_kq(src + (size_t)k / 256 * 144, dst + k, 0);
        break;
    case RS_GGML_Q5_K:
        for (uint32_t k = 0; k < K; k += 256)
            widen_kq(src + (size_t)k / 256 * 176, dst + k, 1);
        break;
    case RS_GGML_Q6_K:
        for (uint32_t k = 0; k < K; k += 256)
            widen_q6_k(src + (size_t)k / 256 * 210, dst + k);
        break;
    case RS_GGML_F32:
        memcpy(dst, src, (size_t)K * sizeof(float));
        break;
    default: /* F16, BF16, Q8_0: validated at load, so this cannot fail */
        rs_quant_row_to_f32(w->type, src, dst, K);
    }
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
                             uint32_t kv_head, uint32_t n_group, uint32_t n_pos, float scale,
                             const float *q, float *scores, float *out)
{
    uint32_t hd = kv->head_dim, bs = kv->block_size;
    size_t head_off = (size_t)kv_head * bs * hd;
    for (uint32_t t = 0; t < n_pos; t++) {
        const float *k = kv->k + table[t / bs] * kv->block_stride + head_off + (t % bs) * hd;
        for (uint32_t g = 0; g < n_group; g++)
            scores[(size_t)g * n_pos + t] = dot8(q + (size_t)g * hd, k, hd) * scale;
    }
    for (uint32_t g = 0; g < n_group; g++) {
        float *s = scores + (size_t)g * n_pos, mx = s[0], sum = 0.0f;
        for (uint32_t t = 1; t < n_pos; t++)
            mx = s[t] > mx ? s[t] : mx;
        for (uint32_t t = 0; t < n_pos; t++) {
            s[t] = expf(s[t] - mx);
            sum += s[t];
        }
        float inv = 1.0f / sum;
        for (uint32_t t = 0; t < n_pos; t++)
            s[t] *= inv;
        memset(out + (size_t)g * hd, 0, hd * sizeof(float));
    }
    for (uint32_t t = 0; t < n_pos; t++) {
        const float *v = kv->v + table[t / bs] * kv->block_stride + head_off + (t % bs) * hd;
        for (uint32_t g = 0; g < n_group; g++) {
            float p = scores[(size_t)g * n_pos + t], *o = out + (size_t)g * hd;
            for (uint32_t i = 0; i < hd; i++)
                o[i] = o[i] + p * v[i];
        }
    }
}

void kern_swiglu_portable(float *g, const float *u, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        float v = g[i];
        g[i] = v / (1.0f + expf(-v)) * u[i];
    }
}

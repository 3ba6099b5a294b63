/* SPDX-License-Identifier: MIT */
/*
 * Kernel dispatch (one switch per call, never per element), CPU detection,
 * and the row-local ops whose cost is small next to the GEMMs: RMSNorm and
 * RoPE (both pairings). Those are plain C shared by every variant, so they
 * cannot make the SIMD and portable variants disagree beyond the
 * GEMM/attention/SwiGLU/GeGLU/soft-cap rounding.
 */
#include "launcherd/engine/kernels.h"

#include <math.h>
#include <string.h>

#include "common/quant.h"
#include "launcherd/engine/qdot.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

int kern_isa_supported(enum kern_isa isa)
{
    if (isa == KERN_PORTABLE)
        return 1;
#if defined(__x86_64__)
    if (isa == KERN_AVX2) {
        unsigned a, b, c, d;
        if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_F16C))
            return 0;
        /* __builtin_cpu_supports also checks that the OS saves the YMM state. */
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    if (isa == KERN_AVX512) /* the builtins also check that the OS saves the ZMM state */
        return kern_isa_supported(KERN_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512vnni");
#endif
    return 0;
}

enum kern_isa kern_isa_detect(void)
{
    if (kern_isa_supported(KERN_AVX512))
        return KERN_AVX512;
    return kern_isa_supported(KERN_AVX2) ? KERN_AVX2 : KERN_PORTABLE;
}

const char *kern_isa_name(enum kern_isa isa)
{
    static const char *const names[] = {[KERN_PORTABLE] = "portable", [KERN_AVX2] = "avx2",
                                        [KERN_AVX512] = "avx512"};
    return (unsigned)isa <= KERN_AVX512 ? names[isa] : "?";
}

int kern_type_supported(enum rs_ggml_type t)
{
    /* The GEMM covers every type common/quant's traits table converts. */
    return rs_quant_supported(t);
}

void kern_widen_row(enum kern_isa isa, const struct kern_mat *w, uint32_t row, float *dst)
{
    if (isa >= KERN_AVX2) /* AVX512: AVX2's float kernels */
        kern_widen_row_avx2(w, row, dst);
    else
        kern_widen_row_portable(w, row, dst);
}

int kern_qdot_supported(enum rs_ggml_type t)
{
    return kq_type_supported(t);
}

/*
 * The types whose integer dot is the default, per CPU variant. Measured
 * (launcherd/README.md, "Which dot by default"): with AVX-512 VNNI (512-bit
 * row dots, the panel GEMM) it ties or wins at batch 1 and wins at 16 for
 * every type; with AVX2 (row dots, the 256-bit panel) it wins batch-1 decode
 * and prompts for every type and ties at 16. The table keeps one entry per
 * variant so that a CPU where a type measures faster widened lists it out.
 */
static const struct {
    enum kern_isa isa;
    enum rs_ggml_type types[5];
    int n;
} qdot_default[] = {
    {KERN_AVX512, {RS_GGML_Q8_0, RS_GGML_Q4_0, RS_GGML_Q4_K, RS_GGML_Q5_K, RS_GGML_Q6_K}, 5},
    {KERN_AVX2, {RS_GGML_Q8_0, RS_GGML_Q4_0, RS_GGML_Q4_K, RS_GGML_Q5_K, RS_GGML_Q6_K}, 5},
};

int kern_qdot_preferred(enum kern_isa isa, enum rs_ggml_type t)
{
    for (size_t i = 0; i < sizeof(qdot_default) / sizeof(qdot_default[0]); i++)
        for (int j = 0; qdot_default[i].isa == isa && j < qdot_default[i].n; j++)
            if (qdot_default[i].types[j] == t)
                return kern_qdot_supported(t);
    return 0;
}

size_t kern_gemm_scratch_floats(uint32_t cols)
{
    /* AVX2's 4-row widened panel, each row padded to a multiple of 8, AVX-512's 8-row one and
     * a row, or the integer dot's rows. */
    size_t panel = kern_gemm_avx512_scratch_floats(cols);
    size_t q = (kern_qgemm_scratch_bytes(cols) + sizeof(float) - 1) / sizeof(float);
    return panel > q ? panel : q;
}

void kern_gemm(enum kern_isa isa, const struct kern_mat *w, const float *x, size_t ldx,
               uint32_t n_rows, float *y, size_t ldy, uint32_t n0, uint32_t n1, int accumulate,
               float *scratch)
{
    if (w->qdot)
        kern_qgemm(isa, w, x, ldx, n_rows, y, ldy, n0, n1, accumulate, scratch);
    else if (isa == KERN_AVX512)
        kern_gemm_avx512(w, x, ldx, n_rows, y, ldy, n0, n1, accumulate, scratch);
    else if (isa == KERN_AVX2)
        kern_gemm_avx2(w, x, ldx, n_rows, y, ldy, n0, n1, accumulate, scratch);
    else
        kern_gemm_portable(w, x, ldx, n_rows, y, ldy, n0, n1, accumulate, scratch);
}

void kern_attention(enum kern_isa isa, const struct kern_kv_layout *kv, const uint32_t *table,
                    uint32_t kv_head, uint32_t n_group, const struct kern_attn *a,
                    const float *q, float *scores, float *out)
{
    if (isa >= KERN_AVX2) /* AVX512: AVX2's float kernels */
        kern_attention_avx2(kv, table, kv_head, n_group, a, q, scores, out);
    else
        kern_attention_portable(kv, table, kv_head, n_group, a, q, scores, out);
}

void kern_attention2(enum kern_isa isa, const struct kern_kv_layout *kv, const uint32_t *table,
                     uint32_t kv_head, uint32_t n_group, const struct kern_attn *a,
                     const float *q0, const float *q1, float *scores, float *out0, float *out1)
{
    if (isa >= KERN_AVX2) /* AVX512: AVX2's float kernels */
        kern_attention2_avx2(kv, table, kv_head, n_group, a, q0, q1, scores, out0, out1);
    else
        kern_attention2_portable(kv, table, kv_head, n_group, a, q0, q1, scores, out0, out1);
}

void kern_rmsnorm(const float *x, const float *w, uint32_t n, float eps, float *out)
{
    /* Double lanes: the mean of squares is the one reduction here that can lose digits. */
    double acc[4] = {0, 0, 0, 0};
    uint32_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++)
            acc[j] += (double)x[i + j] * x[i + j];
    for (; i < n; i++)
        acc[0] += (double)x[i] * x[i];
    double mean = ((acc[0] + acc[2]) + (acc[1] + acc[3])) / n;
    float scale = (float)(1.0 / sqrt(mean + (double)eps));
    for (i = 0; i < n; i++)
        out[i] = w[i] * (x[i] * scale);
}

void kern_rope_table(uint32_t pos, uint32_t rope_dim, float base, float pos_scale,
                     const float *freq_factors, float *cs)
{
    double p = (double)pos * (double)pos_scale;
    for (uint32_t i = 0; i < rope_dim / 2; i++) {
        double theta = p * pow((double)base, -2.0 * (double)i / (double)rope_dim);
        if (freq_factors != NULL)
            theta /= (double)freq_factors[i];
        cs[2 * i] = (float)cos(theta);
        cs[2 * i + 1] = (float)sin(theta);
    }
}

void kern_rope_head(float *x, uint32_t rope_dim, int neox, const float *cs)
{
    uint32_t half = rope_dim / 2;
    for (uint32_t i = 0; i < half; i++) {
        float *p0 = neox ? x + i : x + 2 * i, *p1 = neox ? x + i + half : x + 2 * i + 1;
        float co = cs[2 * i], si = cs[2 * i + 1], a = *p0, b = *p1;
        *p0 = a * co - b * si;
        *p1 = a * si + b * co;
    }
}

void kern_softcap(enum kern_isa isa, float *x, uint32_t n, float cap)
{
    if (isa >= KERN_AVX2) /* AVX512: AVX2's float kernels */
        kern_softcap_avx2(x, n, cap);
    else
        kern_softcap_portable(x, n, cap);
}

void kern_swiglu(enum kern_isa isa, float *g, const float *u, uint32_t n)
{
    if (isa >= KERN_AVX2) /* AVX512: AVX2's float kernels */
        kern_swiglu_avx2(g, u, n);
    else
        kern_swiglu_portable(g, u, n);
}

void kern_geglu(enum kern_isa isa, float *g, const float *u, uint32_t n)
{
    if (isa >= KERN_AVX2) /* AVX512: AVX2's float kernels */
        kern_geglu_avx2(g, u, n);
    else
        kern_geglu_portable(g, u, n);
}

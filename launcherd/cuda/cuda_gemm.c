/* SPDX-License-Identifier: MIT */
/*
 * The GEMM dispatch of the CUDA backend: up to CU_SMALL_ROWS activation
 * rows (decode), and every GEMM in deterministic mode, run the
 * warp-per-feature kernel (F32 activations, batch-invariant order); larger
 * batches run cuBLAS with F32 accumulation: BF16/F16 weights against
 * activations rounded to the same type (tensor cores), F32 weights in
 * plain F32 (no TF32), Q8_0 widened to F32 first. Which path ran depends on
 * the batch, so outside deterministic mode a row's logits may differ in the
 * last bits between batch sizes (launcherd/README.md, "CUDA backend").
 */
#include "common/log.h"
#include "launcherd/cuda/cuda_state.h"

static rs_err blas_fail(const char *what, cublasStatus_t st)
{
    rs_log_error("cuda: %s failed: cuBLAS status %d (%s)", what, (int)st,
                 cublasGetStatusString(st));
    return RS_EDEVICE;
}

rs_err cu_gemm(struct cu_state *s, const struct cu_mat *w, const float *x, uint32_t n, float *y,
               size_t ldy, int accumulate)
{
    if (s->deterministic || n <= CU_SMALL_ROWS || (w->type == RS_GGML_Q8_0 && s->wtmp == NULL)) {
        RS_CUDA_CHECK(cu_gemm_rows(w, x, w->cols, n, y, ldy, accumulate, s->stream));
        return RS_OK;
    }
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    const void *a = w->data, *b = x;
    cudaDataType_t t = CUDA_R_32F;
    size_t elems = (size_t)n * w->cols;
    if (w->type == RS_GGML_F16 || w->type == RS_GGML_BF16) {
        int bf = w->type == RS_GGML_BF16;
        t = bf ? CUDA_R_16BF : CUDA_R_16F;
        RS_CUDA_CHECK(cu_to_half(x, s->half, elems, bf, s->stream));
        b = s->half;
    } else if (w->type == RS_GGML_Q8_0) {
        RS_CUDA_CHECK(cu_q8_0_to_f32(w, s->wtmp, s->stream));
        a = s->wtmp;
    }
    /* Column-major view: Y^T (rows x n) = W (rows x cols, stored as cols x rows) ^T . X^T. */
    cublasStatus_t st =
        cublasGemmEx(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)w->rows, (int)n, (int)w->cols, &alpha,
                     a, t, (int)w->cols, b, t, (int)w->cols, &beta, y, CUDA_R_32F, (int)ldy,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? RS_OK : blas_fail("cublasGemmEx", st);
}

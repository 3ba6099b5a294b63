/* SPDX-License-Identifier: MIT */
/*
 * The device mask path callable from C (tests, benches): copies mask rows
 * (e.g. straight from the pinned mask ring, ipc/pipeline_mask.h) and bias
 * lists to the device, applies them to rows of logits there (k_mask.cu) and
 * copies the logits back. Leaves out keeping buffers resident across steps.
 */
#ifndef RS_CUDA_MASK_H
#define RS_CUDA_MASK_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/mask_apply.h"

/*
 * logits: n_rows x n_vocab host floats, edited in place. masks[r] (NULL: no
 * mask for row r) has stride_words >= ceil(n_vocab / 32) words; bias[r] has
 * n_bias[r] entries. RS_OK; RS_EDEVICE (no GPU, or a CUDA error, logged);
 * RS_ENOMEM; RS_EUNSUPPORTED in builds without CUDA. Any one thread at a time.
 */
rs_err rs_cuda_mask_apply(float *logits, uint32_t n_rows, uint32_t n_vocab,
                          const uint32_t *const *masks, size_t stride_words,
                          const struct rs_logit_bias *const *bias, const uint32_t *n_bias);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * The backend boundary (STYLE.md "Backend boundary"): the one table of
 * function pointers between the model front (model.c: file checks, argument
 * and block-table validation) and a backend that owns weights placement, the
 * KV memory and the forward pass. A backend is picked once at load; each slot
 * is called at most once per step, never per token or element. The CPU
 * backend (cpu_backend.c) fills rs_backend_cpu; the CUDA backend
 * (launcherd/cuda/) fills rs_backend_cuda with the same contract.
 * Leaves out: multi-device (tensor parallel) plumbing, which lives inside a
 * backend's state.
 */
#ifndef RS_ENGINE_BACKEND_H
#define RS_ENGINE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "launcherd/engine/llama.h"
#include "launcherd/engine/model.h"
#include "launcherd/engine/sampler.h"

/* Capabilities (rs_backend_ops.caps): what the daemon around the model may rely on. */
#define RS_BACKEND_CAP_HOST_DMA 0x1u /* copies host memory to a device: pinned host pages
                                        (cudaHostRegister of the rings) make them direct */

struct rs_backend_ops {
    const char *name; /* "cpu", "cuda": what rs_model_opts.backend selects */
    unsigned caps;    /* RS_BACKEND_CAP_* bits */

    /*
     * Prepares the model for this backend from a checked description (which
     * stays valid, with the file mapped, until destroy). opts are already
     * validated, n_threads resolved. *state is the backend's; on failure
     * return an rs_err after logging why, with nothing to free.
     */
    rs_err (*load)(const struct llama_desc *desc, const struct rs_model_opts *opts,
                   void **state);

    /* Frees state (all KV caches were freed before). */
    void (*destroy)(void *state);

    /* Bytes of K and V per block of block_size tokens over all layers. */
    size_t (*kv_block_bytes)(const void *state, uint32_t block_size);

    /* Allocates a zeroed KV cache of n_blocks x block_size tokens; sizes already checked. */
    rs_err (*kv_alloc)(void *state, uint32_t n_blocks, uint32_t block_size, void **kv);

    void (*kv_free)(void *state, void *kv);

    /*
     * One forward step. The front has validated every token id, position,
     * block table entry and slot, and that the token count fits
     * max_batch_tokens; the backend must still return RS_ENOMEM rather than
     * fail silently. May return before the work is done if `sync` is set.
     */
    rs_err (*step)(void *state, void *kv, const struct rs_model_seq *seqs, uint32_t n_seqs);

    /*
     * Host pointer to the n_vocab logits of sequence `seq` of the last step,
     * or NULL when it did not ask; valid until the next step. After `sync`.
     */
    const float *(*logits)(void *state, uint32_t seq);

    /* Optional (NULL: steps are synchronous): waits until the last step's results are ready. */
    rs_err (*sync)(void *state);

    /* Optional: one line naming the variant and threads, e.g. "cpu avx2 2 threads". */
    const char *(*describe)(const void *state);

    /*
     * Optional (NULL: the caller samples on the host from `logits`): samples
     * the next token of n sequences of the last step where the logits are
     * (the device), as rs_sampler_sample would from the same logits with no
     * token history: out[i] for sequence seq[i] (which asked for logits)
     * with params[i] at output index steps[i]. Returns RS_OK,
     * RS_EUNSUPPORTED with nothing done when some params need what the
     * backend's sampler lacks (CUDA: the penalties, which need the token
     * history; the caller then samples on the host), RS_EINVAL (bad params or sequence,
     * no finite logit), RS_EDEVICE. The step thread, after step.
     */
    rs_err (*sample)(void *state, const uint32_t *seq, const struct rs_sampling_params *params,
                     const uint64_t *steps, uint32_t n, struct rs_sample_result *out);
};

/* The CPU backend's table (cpu_backend.c). */
extern const struct rs_backend_ops rs_backend_cpu;

#ifdef RS_HAVE_CUDA
/* The CUDA backend's table (launcherd/cuda/), in builds where nvcc was found. */
extern const struct rs_backend_ops rs_backend_cuda;
#endif

#endif

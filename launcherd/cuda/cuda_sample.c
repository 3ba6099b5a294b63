/* SPDX-License-Identifier: MIT */
/*
 * Host side of device sampling: decides whether the device sampler covers
 * a batch of requests (everything but the penalties, which need each
 * request's token history), sends one request record per row, runs k_sample.cu on the
 * logits still in device memory and copies back only the results (a few
 * hundred bytes per row instead of the n_vocab logits). The draw uses the
 * CPU sampler's counter-based u = SplitMix64(seed, step), so CPU and GPU
 * agree token for token on the same logits (launcherd/README.md).
 */
#include <string.h>

#include "common/log.h"
#include "launcherd/cuda/cuda_state.h"

/* 1 when the device sampler does exactly what rs_sampler_sample would for p (no history). */
static int covered(const struct rs_sampling_params *p)
{
    return p->repetition_penalty == 1.0f && p->presence_penalty == 0.0f &&
           p->frequency_penalty == 0.0f;
}

void cu_sample_free(struct cu_state *s)
{
    cudaFree(s->scr.w);
    cudaFree(s->scr.ls);
    cudaFree(s->scr.v);
    cudaFree(s->scr.bsum);
    cudaFree(s->scr.mass);
    memset(&s->scr, 0, sizeof(s->scr));
    cudaFree(s->sreq);
    cudaFree(s->sout);
    cudaFreeHost(s->h_sreq);
    cudaFreeHost(s->h_sout);
    s->sreq = s->h_sreq = NULL;
    s->sout = s->h_sout = NULL;
    s->cap_sample = 0;
}

static rs_err ensure(struct cu_state *s, uint32_t n)
{
    if (n <= s->cap_sample)
        return RS_OK;
    cu_sample_free(s);
    size_t v = s->hp.n_vocab;
    RS_CUDA_CHECK(cudaMalloc((void **)&s->scr.w, (size_t)n * v * sizeof(float)));
    RS_CUDA_CHECK(cudaMalloc((void **)&s->scr.ls, (size_t)n * v * sizeof(float)));
    RS_CUDA_CHECK(cudaMalloc((void **)&s->scr.v, (size_t)n * v * sizeof(int32_t)));
    RS_CUDA_CHECK(cudaMalloc((void **)&s->scr.bsum, (size_t)n * (v / 256 + 1) * sizeof(double)));
    RS_CUDA_CHECK(cudaMalloc((void **)&s->scr.mass, (size_t)n * 1024 * sizeof(double)));
    RS_CUDA_CHECK(cudaMalloc((void **)&s->sreq, (size_t)n * sizeof(*s->sreq)));
    RS_CUDA_CHECK(cudaMalloc((void **)&s->sout, (size_t)n * sizeof(*s->sout)));
    RS_CUDA_CHECK(cudaHostAlloc((void **)&s->h_sreq, (size_t)n * sizeof(*s->sreq), 0));
    RS_CUDA_CHECK(cudaHostAlloc((void **)&s->h_sout, (size_t)n * sizeof(*s->sout), 0));
    s->cap_sample = n;
    return RS_OK;
}

/* Request records for the rows; RS_EUNSUPPORTED / RS_EINVAL as the slot says. */
static rs_err fill(struct cu_state *s, const uint32_t *seq, const struct rs_sampling_params *params,
                   const uint64_t *steps, uint32_t n)
{
    char err[160];
    for (uint32_t i = 0; i < n; i++) {
        const struct rs_sampling_params *p = &params[i];
        if (rs_sampling_params_validate(p, err, sizeof(err)) != RS_OK) {
            rs_log_error("cuda sample: %s", err);
            return RS_EINVAL;
        }
        if (seq[i] >= s->n_seqs || s->seq_logit[seq[i]] < 0) {
            rs_log_error("cuda sample: sequence %u of the last step has no logits", seq[i]);
            return RS_EINVAL;
        }
        if (!covered(p))
            return RS_EUNSUPPORTED;
        s->h_sreq[i] = (struct cu_sample_req){.logit_row = (uint32_t)s->seq_logit[seq[i]],
                                              .temperature = p->temperature,
                                              .min_p = p->min_p,
                                              .top_p = p->top_p,
                                              .top_k = p->top_k,
                                              .seed = p->seed,
                                              .step = steps[i],
                                              .n_logprobs = p->n_logprobs};
    }
    return RS_OK;
}

rs_err cu_sample_rows(struct cu_state *s, const uint32_t *seq,
                      const struct rs_sampling_params *params, const uint64_t *steps, uint32_t n,
                      struct rs_sample_result *out)
{
    if (n == 0)
        return RS_OK;
    rs_err rc = ensure(s, n);
    if (rc == RS_OK)
        rc = fill(s, seq, params, steps, n);
    if (rc != RS_OK)
        return rc;
    RS_CUDA_CHECK(cudaMemcpyAsync(s->sreq, s->h_sreq, (size_t)n * sizeof(*s->sreq),
                                  cudaMemcpyHostToDevice, s->stream));
    RS_CUDA_CHECK(cu_sample(s->logits, s->hp.n_vocab, s->sreq, n, &s->scr, s->sout, s->stream));
    RS_CUDA_CHECK(cudaMemcpyAsync(s->h_sout, s->sout, (size_t)n * sizeof(*s->sout),
                                  cudaMemcpyDeviceToHost, s->stream));
    RS_CUDA_CHECK(cudaStreamSynchronize(s->stream));
    for (uint32_t i = 0; i < n; i++) {
        const struct cu_sample_out *o = &s->h_sout[i];
        if (o->token < 0) {
            rs_log_error("cuda sample: sequence %u has no finite logit", seq[i]);
            return RS_EINVAL;
        }
        memset(&out[i], 0, sizeof(out[i]));
        out[i].token = o->token;
        out[i].logprob = o->logprob;
        out[i].n_top = o->n_top;
        memcpy(out[i].top_ids, o->top_ids, sizeof(out[i].top_ids));
        memcpy(out[i].top_logprobs, o->top_logprobs, sizeof(out[i].top_logprobs));
    }
    return RS_OK;
}

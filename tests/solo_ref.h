/* SPDX-License-Identifier: MIT */
/*
 * Solo reference outputs for end-to-end and crash tests, computed in this
 * process by the engine, sampler, stop rules and vocab, never through the
 * daemons: tokenized as tokenizerd does, prefilled in one step, decoded one
 * token at a time over a private KV cache, sampled as a pure function of
 * (params, logits, history, index), detokenized from the last prompt token.
 * The pipeline must match it byte for byte (batch invariance, DESIGN.md §4).
 * Code in solo_ref.c (rs_testlib). Leaves out stop strings and logprobs.
 */
#ifndef RS_SOLO_REF_H
#define RS_SOLO_REF_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/detok.h"
#include "common/gguf.h"
#include "common/tokenizer.h"
#include "common/vocab.h"
#include "ipc/wire_client.h"
#include "ipc/wire_server.h"
#include "launcherd/engine/model.h"
#include "launcherd/engine/sampler.h"
#include "launcherd/engine/stop.h"

#define SOLO_EOG_MAX 64

/* One model opened for reference runs (one thread). */
struct solo_ref {
    rs_vocab *vocab;
    rs_tokenizer *tok;
    rs_model *model;
    rs_kvcache *kv;
    rs_sampler *smp;
    uint32_t n_ctx, n_vocab, n_blocks;
    int32_t eog[SOLO_EOG_MAX];
    size_t n_eog;
    uint32_t *table; /* identity block table: n_blocks entries */
    int32_t *list;   /* prompt + output: n_ctx entries */
    float *logits;   /* n_vocab */
};

/* What one request produces when it runs alone. */
struct solo_out {
    uint32_t n_prompt;
    int32_t *tokens; /* output token ids (owned) */
    uint32_t n_tokens;
    char *text; /* the whole output text, NUL-terminated (owned) */
    size_t text_len;
    enum rs_wire_finish finish; /* stop or length */
};

void solo_close(struct solo_ref *s);

/* Opens model_path with a context of n_ctx tokens (the instance's --ctx). 0, or 1 (printed). */
int solo_open(struct solo_ref *s, const char *model_path, uint32_t n_ctx);

void solo_out_fini(struct solo_out *o);

/* The prompt as tokenizerd makes it, into s->list; its length, or 0 when it cannot run. */
uint32_t solo_prompt(struct solo_ref *s, const struct rs_wire_generate *g);

/* Sampling and stop parameters as tokenizerd writes them into the record. */
void solo_params(const struct solo_ref *s, const struct rs_wire_generate *g,
                 uint32_t n_prompt, struct rs_sampling_params *sp,
                 struct rs_stop_params *st);

/* Output k sampled from s->logits (launcherd/row.c: history only when a penalty needs it). */
int32_t solo_sample(struct solo_ref *s, const struct rs_sampling_params *sp,
                    uint32_t n_prompt, uint32_t k);

/* Text of the output tokens, detokenized from the last prompt token and flushed. */
int solo_text(struct solo_ref *s, struct solo_out *o);

/*
 * Runs request g alone and fills *o (free with solo_out_fini). Sampled
 * requests (temperature > 0) must carry a seed. Returns 0; 1 on a failure
 * (printed); RS_EUNSUPPORTED for stop strings, logprobs or a sampled
 * request without a seed.
 */
int solo_run(struct solo_ref *s, const struct rs_wire_generate *g, struct solo_out *o);

/* Prompts for mixed loads: BOS alone, short and longer story openings. */
extern const char *const solo_prompts[];
extern const unsigned solo_n_prompts;
#define SOLO_N_PROMPTS solo_n_prompts

/*
 * Request i of a mixed load: a prompt from solo_prompts, 8..8+span-1
 * output tokens, greedy or (every 4th) sampled at 0.8 with a seed, top-k or
 * top-p on some, a repetition penalty on every 5th, streamed except every
 * 3rd, ignore_eos on every 6th. The strings are static.
 */
void solo_mixed_request(struct rs_wire_generate *g, uint32_t i, uint32_t span);

#endif

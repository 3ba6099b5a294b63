/* SPDX-License-Identifier: MIT */
/*
 * Field-by-field equality of decoded wire messages, for the round-trip checks
 * of the wire fuzzers and tests/unit/test_wire.c (decode -> encode -> decode
 * must give the same struct). Views are compared by content, floats by bits
 * (so NaN equals the same NaN). Test code only: allocates freely.
 */
#ifndef RS_TEST_WIRE_EQ_H
#define RS_TEST_WIRE_EQ_H

#include <stdlib.h>
#include <string.h>

#include "ipc/wire_client.h"
#include "ipc/wire_door.h"
#include "ipc/wire_server.h"

static inline bool weq_str(const struct rs_wire_str *a, const struct rs_wire_str *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->ptr, b->ptr, a->len) == 0);
}

static inline bool weq_f(float a, float b)
{
    return memcmp(&a, &b, sizeof(a)) == 0;
}

static inline bool weq_ids(const struct rs_wire_ids *a, const struct rs_wire_ids *b)
{
    if (a->n != b->n)
        return false;
    uint32_t *x = calloc(a->n + 1, sizeof(*x)), *y = calloc(a->n + 1, sizeof(*y));
    bool eq = x && y && rs_wire_ids_copy(a, x, a->n) == a->n &&
              rs_wire_ids_copy(b, y, b->n) == b->n && memcmp(x, y, a->n * sizeof(*x)) == 0;
    free(x);
    free(y);
    return eq;
}

static inline bool weq_lps(const struct rs_wire_lps *a, const struct rs_wire_lps *b)
{
    if (a->n != b->n)
        return false;
    struct rs_wire_logprob *x = calloc(a->n + 1, sizeof(*x)), *y = calloc(a->n + 1, sizeof(*y));
    bool eq = x && y && rs_wire_lps_copy(a, x, a->n) == a->n &&
              rs_wire_lps_copy(b, y, b->n) == b->n && memcmp(x, y, a->n * sizeof(*x)) == 0;
    free(x);
    free(y);
    return eq;
}

static inline bool weq_doc(const struct rs_wire_doc *a, const struct rs_wire_doc *b)
{
    return a->n == b->n && a->len == b->len && (a->len == 0 || memcmp(a->packed, b->packed, a->len) == 0);
}

static inline bool weq_generate(const struct rs_wire_generate *a, const struct rs_wire_generate *b)
{
    if (a->has != b->has || !weq_str(&a->prompt, &b->prompt) ||
        !weq_ids(&a->prompt_ids, &b->prompt_ids) || a->max_tokens != b->max_tokens ||
        !weq_f(a->temperature, b->temperature) || !weq_f(a->top_p, b->top_p) ||
        a->top_k != b->top_k || !weq_f(a->min_p, b->min_p) ||
        !weq_f(a->repetition_penalty, b->repetition_penalty) ||
        !weq_f(a->presence_penalty, b->presence_penalty) ||
        !weq_f(a->frequency_penalty, b->frequency_penalty) || a->seed != b->seed ||
        a->n_stop != b->n_stop || a->n_stop_ids != b->n_stop_ids ||
        a->ignore_eos != b->ignore_eos || a->stream != b->stream ||
        a->logprobs != b->logprobs || a->priority != b->priority ||
        a->add_generation_prompt != b->add_generation_prompt ||
        !weq_doc(&a->messages, &b->messages) || !weq_doc(&a->tools, &b->tools) ||
        !weq_doc(&a->template_kwargs, &b->template_kwargs))
        return false;
    for (uint32_t i = 0; i < a->n_stop; i++)
        if (!weq_str(&a->stop[i], &b->stop[i]))
            return false;
    return memcmp(a->stop_ids, b->stop_ids, a->n_stop_ids * sizeof(a->stop_ids[0])) == 0;
}

static inline bool weq_client(const struct rs_wire_client_msg *a,
                              const struct rs_wire_client_msg *b)
{
    if (a->type != b->type || strcmp(a->id, b->id) != 0)
        return false;
    if (a->type == RS_WIRE_T_GENERATE)
        return weq_generate(&a->u.gen, &b->u.gen);
    if (a->type == RS_WIRE_T_RESUME)
        return a->u.resume.from_seq == b->u.resume.from_seq;
    return true;
}

static inline bool weq_delta(const struct rs_wire_delta *a, const struct rs_wire_delta *b)
{
    return a->seq == b->seq && weq_str(&a->text, &b->text) && weq_ids(&a->tokens, &b->tokens) &&
           a->has_logprobs == b->has_logprobs &&
           (!a->has_logprobs || weq_lps(&a->logprobs, &b->logprobs));
}

static inline bool weq_server(const struct rs_wire_server_msg *a,
                              const struct rs_wire_server_msg *b)
{
    if (a->type != b->type || strcmp(a->id, b->id) != 0)
        return false;
    switch (a->type) {
    case RS_WIRE_T_ACK:
        return memcmp(&a->u.ack, &b->u.ack, sizeof(a->u.ack)) == 0;
    case RS_WIRE_T_ERROR:
        return a->u.error.code == b->u.error.code &&
               weq_str(&a->u.error.message, &b->u.error.message);
    case RS_WIRE_T_WELCOME:
        return weq_str(&a->u.welcome.server, &b->u.welcome.server);
    case RS_WIRE_T_DELTA:
        return weq_delta(&a->u.delta, &b->u.delta);
    case RS_WIRE_T_FINAL: {
        const struct rs_wire_final *x = &a->u.final, *y = &b->u.final;
        return weq_delta(&x->out, &y->out) && x->finish_reason == y->finish_reason &&
               memcmp(&x->usage, &y->usage, sizeof(x->usage)) == 0 &&
               memcmp(&x->timings, &y->timings, sizeof(x->timings)) == 0 &&
               x->error == y->error && weq_str(&x->message, &y->message);
    }
    default:
        return false;
    }
}

static inline bool weq_door(const struct rs_wire_door *a, const struct rs_wire_door *b)
{
    if (a->kind != b->kind || a->sent_ns != b->sent_ns || a->n_entries != b->n_entries ||
        memcmp(a->u.f, b->u.f, sizeof(a->u.f)) != 0)
        return false;
    for (uint32_t i = 0; i < a->n_entries; i++)
        if (a->entries[i].slot != b->entries[i].slot || a->entries[i].gen != b->entries[i].gen ||
            a->entries[i].n_generated != b->entries[i].n_generated)
            return false;
    return true;
}

#endif

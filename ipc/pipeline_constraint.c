/* SPDX-License-Identifier: MIT */
/*
 * A request's constraint stored in its record's third arena list
 * (pipeline_constraint.h): packing at intake, reading back with every
 * length checked against the list (shared memory is outside input to the
 * reader: another build or a bug could have written it).
 */
#include <string.h>

#include "common/log.h"
#include "ipc/pipeline_constraint.h"
#include "ipc/pipeline_logprob.h"
#include "ipc/pipeline_req.h"

uint64_t rs_pipe_cx_list_bytes(const struct rs_pipe_config *c)
{
    (void)c;
    return rs_arena_list_bytes(RS_PIPE_CX_MAX_WORDS, RS_PIPE_CX_CHUNK_WORDS);
}

uint64_t rs_pipe_cx_list_offset(const struct rs_pipe_config *c)
{
    return rs_pipe_lp_list_offset(c) + rs_pipe_lp_list_bytes(c);
}

uint32_t rs_pipe_cx_chunks(const struct rs_pipe_config *c)
{
    uint64_t per_req = (RS_PIPE_CX_MAX_WORDS + RS_PIPE_CX_CHUNK_WORDS - 1) / RS_PIPE_CX_CHUNK_WORDS;
    uint64_t cap = RS_PIPE_CX_POOL_BYTES / (RS_PIPE_CX_CHUNK_WORDS * sizeof(int32_t));
    uint64_t want = (uint64_t)c->max_requests; /* most constraints fit one chunk */
    if (want > cap)
        want = cap;
    return (uint32_t)(want > per_req ? want : per_req);
}

static uint32_t words_of(uint64_t bytes)
{
    return (uint32_t)((bytes + 3) / 4);
}

/* Packs c into w; returns the words used. */
static uint32_t pack(const struct rs_wire_constraint *c, int32_t *w)
{
    uint32_t n = RS_PIPE_CX_HEAD_WORDS, choice_bytes = 0;
    w[0] = RS_PIPE_CX_MAGIC;
    w[1] = (int32_t)c->kind;
    w[2] = (int32_t)(c->kind == RS_WIRE_CX_CHOICE ? 0 : c->text.len);
    w[3] = (int32_t)(c->kind == RS_WIRE_CX_CHOICE ? c->n_choices : 0);
    for (uint32_t i = 0; i < (uint32_t)w[3]; i++) {
        w[n++] = (int32_t)c->choices[i].len;
        choice_bytes += c->choices[i].len;
    }
    w[6] = (int32_t)choice_bytes;
    w[7] = (int32_t)(c->min_tokens > INT32_MAX ? INT32_MAX : c->min_tokens);
    memset(&w[n], 0, (size_t)(words_of((uint32_t)w[2]) + words_of(choice_bytes)) * 4);
    if (w[2] > 0)
        memcpy(&w[n], c->text.ptr, (size_t)w[2]);
    n += words_of((uint32_t)w[2]);
    char *cb = (char *)&w[n];
    for (uint32_t i = 0; i < (uint32_t)w[3]; i++) {
        memcpy(cb, c->choices[i].ptr, c->choices[i].len);
        cb += c->choices[i].len;
    }
    n += words_of(choice_bytes);
    struct rs_wire_bias b[RS_WIRE_LOGIT_BIAS_MAX];
    uint32_t nb = rs_wire_bias_copy(c, b, RS_WIRE_LOGIT_BIAS_MAX);
    w[4] = (int32_t)nb;
    for (uint32_t i = 0; i < nb; i++) {
        w[n++] = (int32_t)b[i].token;
        memcpy(&w[n++], &b[i].bias, 4);
    }
    uint32_t na = rs_wire_ids_copy(&c->allowed, (uint32_t *)&w[n], RS_WIRE_ALLOWED_IDS_MAX);
    w[5] = (int32_t)na;
    return n + na;
}

rs_err rs_pipe_cx_put(struct rs_pipe *p, struct rs_table_ref ref,
                      const struct rs_wire_constraint *c, int32_t *words)
{
    uint32_t n = pack(c, words);
    rs_err rc = rs_arena_list_init(p->constraints, ref); /* a reused record's old list */
    if (rc == RS_OK)
        rc = rs_arena_append(p->constraints, ref, words, n);
    if (rc == RS_ENOMEM) {
        rs_log_info("constraint region full: reclaiming the chunks of freed requests");
        if ((rc = rs_arena_recover(p->constraints)) == RS_OK)
            rc = rs_arena_append(p->constraints, ref, words, n);
    }
    return rc == RS_OK ? rs_arena_seal(p->constraints, ref) : rc;
}

static rs_err malformed(struct rs_table_ref ref, const char *what)
{
    rs_log_error("constraint of record %u (gen %u) malformed: %s", ref.index, ref.gen, what);
    return RS_EIO;
}

/* Checks the header words against the list length and sets the views. */
static rs_err unpack(struct rs_table_ref ref, const int32_t *w, uint32_t len,
                     struct rs_pipe_cx *out)
{
    if (len < RS_PIPE_CX_HEAD_WORDS || w[0] != RS_PIPE_CX_MAGIC)
        return malformed(ref, "no header");
    if (w[1] < RS_WIRE_CX_NONE || w[1] > RS_WIRE_CX_CHOICE || w[2] < 0 ||
        (uint32_t)w[2] > RS_WIRE_CX_TEXT_MAX || w[3] < 0 ||
        (uint32_t)w[3] > RS_WIRE_CX_CHOICES_MAX || w[4] < 0 ||
        (uint32_t)w[4] > RS_WIRE_LOGIT_BIAS_MAX || w[5] < 0 ||
        (uint32_t)w[5] > RS_WIRE_ALLOWED_IDS_MAX || w[6] < 0 ||
        (uint32_t)w[6] > RS_WIRE_CX_CHOICE_BYTES_MAX || w[7] < 0)
        return malformed(ref, "a count out of bounds");
    memset(out, 0, offsetof(struct rs_pipe_cx, choices));
    out->kind = (enum rs_wire_cx_kind)w[1];
    out->text_len = (uint32_t)w[2];
    out->n_choices = (uint32_t)w[3];
    out->n_bias = (uint32_t)w[4];
    out->n_allowed = (uint32_t)w[5];
    out->min_tokens = (uint32_t)w[7];
    uint64_t need = RS_PIPE_CX_HEAD_WORDS + out->n_choices + words_of(out->text_len) +
                    words_of((uint32_t)w[6]) + 2ull * out->n_bias + out->n_allowed;
    if (need != len)
        return malformed(ref, "its length does not match its counts");
    uint32_t n = RS_PIPE_CX_HEAD_WORDS, sum = 0;
    for (uint32_t i = 0; i < out->n_choices; i++) {
        if (w[n + i] < 0 || (uint32_t)w[n + i] > (uint32_t)w[6] - sum)
            return malformed(ref, "a choice length");
        out->choice_lens[i] = (size_t)w[n + i];
        sum += (uint32_t)w[n + i];
    }
    if (sum != (uint32_t)w[6])
        return malformed(ref, "choice lengths do not add up");
    n += out->n_choices;
    out->text = (const char *)&w[n];
    n += words_of(out->text_len);
    const char *cb = (const char *)&w[n];
    for (uint32_t i = 0; i < out->n_choices; i++) {
        out->choices[i] = cb;
        cb += out->choice_lens[i];
    }
    n += words_of((uint32_t)w[6]);
    out->bias_words = &w[n];
    out->allowed = &w[n + 2 * out->n_bias];
    return RS_OK;
}

rs_err rs_pipe_cx_get(const struct rs_pipe *p, struct rs_table_ref ref, int32_t *words,
                      struct rs_pipe_cx *out)
{
    void *rec;
    if (rs_table_get(p->requests, ref, NULL, &rec) != RS_OK)
        return RS_ESTALE;
    if (!(((const struct rs_pipe_req *)rec)->flags & RS_PIPE_F_CONSTRAINED))
        return RS_ENOENT;
    uint32_t len = 0, got = 0;
    rs_err rc = rs_arena_len(p->constraints, ref, &len);
    if (rc == RS_OK && len > RS_PIPE_CX_MAX_WORDS)
        return malformed(ref, "longer than any constraint");
    if (rc == RS_OK)
        rc = rs_arena_read(p->constraints, ref, 0, len, words, &got);
    if (rc != RS_OK)
        return rc;
    if (got != len)
        return malformed(ref, "shorter than its published length");
    return unpack(ref, words, len, out);
}

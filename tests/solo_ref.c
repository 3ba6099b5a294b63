/* SPDX-License-Identifier: MIT */
/*
 * The solo reference runs (solo_ref.h): the engine, sampler, stop rules and
 * vocab in this process, one request at a time.
 * Part of rs_testlib, linked by the tests and benches that include the header.
 */
#include "tests/solo_ref.h"
#include "tests/solo_constraint.h"

void solo_close(struct solo_ref *s)
{
    rs_kvcache_destroy(&s->kv);
    rs_model_destroy(&s->model);
    rs_sampler_destroy(&s->smp);
    rs_tokenizer_destroy(&s->tok);
    rs_vocab_destroy(&s->vocab);
    free(s->table);
    free(s->list);
    free(s->logits);
    memset(s, 0, sizeof(*s));
}

int solo_open(struct solo_ref *s, const char *model_path, uint32_t n_ctx)
{
    char err[256] = "";
    struct rs_model_opts mo;
    memset(s, 0, sizeof(*s));
    rs_model_opts_default(&mo);
    mo.n_threads = 1; /* logits do not depend on it (batch invariance); the host is shared */
    /* The backend launcherd picks (its default is auto), in the batch-invariant mode the
       harness starts it in: on a GPU host both are the GPU, bit for bit. */
    mo.backend = "auto";
    mo.deterministic = 1;
    if (rs_vocab_load_file(model_path, &s->vocab, err, sizeof(err)) != RS_OK ||
        rs_tokenizer_create(s->vocab, &s->tok) != RS_OK ||
        rs_model_load(model_path, &mo, &s->model, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "solo_ref: %s: %s\n", model_path, err);
        solo_close(s);
        return 1;
    }
    s->n_ctx = n_ctx;
    s->n_vocab = rs_vocab_n_tokens(s->vocab);
    s->n_blocks = (n_ctx + RS_KVCACHE_DEFAULT_BLOCK - 1) / RS_KVCACHE_DEFAULT_BLOCK;
    for (uint32_t id = 0; id < s->n_vocab && s->n_eog < SOLO_EOG_MAX; id++)
        if (rs_vocab_is_eog(s->vocab, (int32_t)id))
            s->eog[s->n_eog++] = (int32_t)id;
    s->table = calloc(s->n_blocks, sizeof(uint32_t));
    s->list = calloc(n_ctx, sizeof(int32_t));
    s->logits = calloc(s->n_vocab, sizeof(float));
    if (s->table == NULL || s->list == NULL || s->logits == NULL ||
        rs_sampler_create((int32_t)s->n_vocab, &s->smp) != RS_OK ||
        rs_kvcache_create(s->model, s->n_blocks, RS_KVCACHE_DEFAULT_BLOCK, &s->kv) != RS_OK) {
        fprintf(stderr, "solo_ref: out of memory\n");
        solo_close(s);
        return 1;
    }
    for (uint32_t b = 0; b < s->n_blocks; b++)
        s->table[b] = b;
    return 0;
}

void solo_out_fini(struct solo_out *o)
{
    free(o->tokens);
    free(o->text);
    memset(o, 0, sizeof(*o));
}

uint32_t solo_prompt(struct solo_ref *s, const struct rs_wire_generate *g)
{
    size_t n = 0;
    if (g->has & RS_WIRE_GEN_PROMPT_IDS) {
        if (g->prompt_ids.n >= s->n_ctx)
            return 0;
        for (uint32_t i = 0; i < g->prompt_ids.n; i++)
            s->list[i] = (int32_t)g->prompt_ids.vals[i];
        return g->prompt_ids.n;
    }
    if (rs_tokenizer_encode(s->tok, g->prompt.ptr, g->prompt.len,
                            RS_TOKENIZE_ADD_SPECIAL | RS_TOKENIZE_PARSE_SPECIAL, s->list, s->n_ctx,
                            &n) != RS_OK ||
        n >= s->n_ctx)
        return 0;
    if (n == 0)
        s->list[n++] = rs_vocab_bos(s->vocab);
    return (uint32_t)n;
}

void solo_params(const struct solo_ref *s, const struct rs_wire_generate *g,
                 uint32_t n_prompt, struct rs_sampling_params *sp,
                 struct rs_stop_params *st)
{
    *sp = (struct rs_sampling_params){.temperature = g->temperature,
                                      .top_k = g->top_k,
                                      .top_p = g->top_p,
                                      .min_p = g->min_p,
                                      .repetition_penalty = g->repetition_penalty,
                                      .presence_penalty = g->presence_penalty,
                                      .frequency_penalty = g->frequency_penalty,
                                      .seed = g->seed,
                                      .n_logprobs = 0};
    uint32_t room = s->n_ctx - n_prompt;
    memset(st, 0, sizeof(*st));
    st->max_tokens = g->max_tokens != 0 && g->max_tokens < room ? g->max_tokens : room;
    st->ignore_eos = g->ignore_eos ? 1 : 0;
    st->n_stop_ids = (int32_t)g->n_stop_ids;
    for (uint32_t i = 0; i < g->n_stop_ids; i++)
        st->stop_ids[i] = (int32_t)g->stop_ids[i];
}

int32_t solo_sample(struct solo_ref *s, const struct rs_sampling_params *sp,
                    uint32_t n_prompt, uint32_t k)
{
    int hist = sp->repetition_penalty != 1.0f || sp->presence_penalty != 0.0f ||
               sp->frequency_penalty != 0.0f;
    struct rs_sample_result res;
    if (rs_sampler_sample(s->smp, sp, s->logits, hist ? s->list : NULL, hist ? n_prompt : 0,
                          hist ? k : 0, k, &res) != RS_OK)
        return -1;
    return res.token;
}

int solo_text(struct solo_ref *s, struct solo_out *o)
{
    struct rs_detok d;
    size_t cap = (size_t)o->n_tokens * rs_detok_max_out(s->vocab) + 8, n;
    o->text = malloc(cap);
    if (o->text == NULL)
        return 1;
    rs_detok_init(&d, s->vocab, s->list[o->n_prompt - 1], 0);
    for (uint32_t i = 0; i < o->n_tokens; i++) {
        if (rs_detok_feed(s->vocab, &d, o->tokens[i], o->text + o->text_len, cap - o->text_len,
                          &n) != RS_OK)
            return 1;
        o->text_len += n;
    }
    if (rs_detok_flush(s->vocab, &d, o->text + o->text_len, cap - o->text_len, &n) != RS_OK)
        return 1;
    o->text_len += n;
    o->text[o->text_len] = '\0';
    return 0;
}

/* The decode loop of solo_run; cx constrains each step (solo_constraint.h). */
static int solo_decode(struct solo_ref *s, const struct rs_sampling_params *sp,
                       const struct rs_stop_params *st, struct solo_cx *cx, struct solo_out *o)
{
    struct rs_model_seq seq = {s->list, o->n_prompt, 0, s->table, s->n_blocks, 1};
    enum rs_finish_reason why = RS_FINISH_NONE;
    o->finish = RS_WIRE_FINISH_NONE;
    for (uint32_t k = 0; why == RS_FINISH_NONE; k++) {
        const float *lg;
        if (rs_model_step(s->model, s->kv, &seq, 1) != RS_OK ||
            (lg = rs_model_logits(s->model, 0)) == NULL) {
            fprintf(stderr, "solo_ref: model step failed at output %u\n", k);
            return 1;
        }
        memcpy(s->logits, lg, (size_t)s->n_vocab * sizeof(float));
        enum solo_cx_verdict v = solo_cx_apply(cx, s->logits);
        if (v != SOLO_CX_SAMPLE) { /* launcherd/row.c: stop, or an error at a dead end */
            o->finish = v == SOLO_CX_END ? RS_WIRE_FINISH_STOP : RS_WIRE_FINISH_ERROR;
            return 0;
        }
        int32_t tok = solo_sample(s, sp, o->n_prompt, k);
        if (tok < 0 || solo_cx_accept(cx, tok) != 0)
            return 1;
        s->list[o->n_prompt + k] = tok;
        o->tokens[o->n_tokens++] = tok;
        why = rs_stop_check(st, s->eog, s->n_eog, tok, o->n_prompt, (uint64_t)k + 1, s->n_ctx);
        seq = (struct rs_model_seq){
            &s->list[o->n_prompt + k], 1, o->n_prompt + k, s->table, s->n_blocks, 1};
    }
    o->finish = why == RS_FINISH_STOP ? RS_WIRE_FINISH_STOP : RS_WIRE_FINISH_LENGTH;
    return 0;
}

int solo_run(struct solo_ref *s, const struct rs_wire_generate *g, struct solo_out *o)
{
    struct rs_sampling_params sp;
    struct rs_stop_params st;
    struct solo_cx cx;
    memset(&cx, 0, sizeof(cx));
    memset(o, 0, sizeof(*o));
    if (g->n_stop > 0 || g->logprobs > 0 ||
        (g->temperature != 0.0f && !(g->has & RS_WIRE_GEN_SEED)))
        return RS_EUNSUPPORTED;
    if ((o->n_prompt = solo_prompt(s, g)) == 0) {
        fprintf(stderr, "solo_ref: the prompt does not fit the context\n");
        return 1;
    }
    solo_params(s, g, o->n_prompt, &sp, &st);
    o->tokens = malloc((size_t)st.max_tokens * sizeof(int32_t));
    int rc = o->tokens == NULL || solo_cx_begin(&cx, s->vocab, s->n_vocab, g, s->eog, (uint32_t)s->n_eog) != 0;
    if (rc == 0)
        rc = solo_decode(s, &sp, &st, &cx, o);
    solo_cx_end(&cx);
    return rc != 0 ? 1 : solo_text(s, o);
}

const char *const solo_prompts[] = {
    "",
    "Once upon a time",
    "The dog",
    "Lily and Tom",
    "One day, a little girl",
    "The sun was",
    "A little bird",
    "Tim had a",
    "There was a big",
    "Mom said",
    "The cat sat on the mat and",
    "Ben wanted to play with his red ball, but",
};

const unsigned solo_n_prompts = sizeof(solo_prompts) / sizeof(solo_prompts[0]);

void solo_mixed_request(struct rs_wire_generate *g, uint32_t i, uint32_t span)
{
    rs_wire_generate_init(g);
    g->has = RS_WIRE_GEN_PROMPT | RS_WIRE_GEN_MAX_TOKENS | RS_WIRE_GEN_TEMPERATURE |
             RS_WIRE_GEN_STREAM | RS_WIRE_GEN_IGNORE_EOS | RS_WIRE_GEN_SEED;
    const char *p = solo_prompts[i % SOLO_N_PROMPTS];
    g->prompt = (struct rs_wire_str){p, (uint32_t)strlen(p)};
    g->max_tokens = 8 + (i * 37) % span;
    g->temperature = i % 4 == 3 ? 0.8f : 0.0f;
    g->seed = 1000 + i;
    g->stream = i % 3 != 2;
    g->ignore_eos = i % 6 == 5;
    if (i % 8 == 3)
        g->has |= RS_WIRE_GEN_TOP_K, g->top_k = 40;
    if (i % 8 == 7)
        g->has |= RS_WIRE_GEN_TOP_P, g->top_p = 0.9f;
    if (i % 5 == 4)
        g->has |= RS_WIRE_GEN_REPETITION_PENALTY, g->repetition_penalty = 1.15f;
}

/* SPDX-License-Identifier: MIT */
/*
 * Structured output in launcherd: the owner of every constrained request's
 * matcher, its mask thread, and the application of masks and biases before
 * sampling.
 *
 * Why launcherd owns the matchers: it samples each token first, so the mask
 * of output k+1 can start the moment output k is appended, and it is ready
 * long before the forward pass of k+1 ends (masks take tens of microseconds,
 * a step milliseconds). postprocd sees a token only after the result ring and
 * a doorbell; computing masks there would add that hop to every constrained
 * step and make sampling wait on another process, so a postprocd crash would
 * stall every constrained sequence. The matcher state is a pure function of
 * (constraint, output tokens), so launcherd keeps none of it durable: a new
 * incarnation, a preempted request or a request that moved to another slot
 * is rebuilt by replaying its output tokens from the token list.
 *
 * Flow per constrained row: prepare() (step.c) queues the mask of output k
 * for the batch's seq (a no-op when it is queued or done); the mask thread
 * loads the constraint from the record (pipeline_constraint.h), compiles it
 * through its own cache, catches its matcher up with the token list and
 * fills the row of the request's slot in the mask ring (pipeline_mask.h)
 * while the model thread runs the forward pass; the sampler waits for the
 * row (counted: mask_waits, mask_wait_us) and applies it with the biases;
 * after output k is appended the mask of k+1 is queued at once. A
 * request with no constraint (flag RS_PIPE_F_CONSTRAINED unset) never gets
 * here: it pays one flag test.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/grammar.h"
#include "common/log.h"
#include "common/mask_apply.h"
#include "ipc/pipeline_constraint.h"
#include "ipc/pipeline_mask.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "launcherd/launcher.h"

#define CACHE_ENTRIES 64
#define CACHE_BYTES (256u << 20)

/* The mask thread's state of one slot (only the mask thread touches it). */
struct mslot {
    uint64_t ref; /* packed table ref + 1 of the request it holds; 0 = none */
    rs_grammar_matcher *m;
    uint32_t n_fed;   /* output tokens accepted by m */
    uint32_t *allowed; /* allowed_token_ids as a row, or NULL */
};

/* The model thread's biases of one slot: the request's list, then a ban of every
 * end-of-generation token, used while fewer than min_tokens outputs exist. */
struct mbias {
    uint64_t ref; /* packed ref + 1; 0 = none */
    uint32_t n;   /* the request's entries */
    uint32_t n_eog;
    uint32_t min_tokens;
    struct rs_logit_bias *b; /* RS_WIRE_LOGIT_BIAS_MAX + LAUNCHER_EOG_MAX entries */
};

/* A queued mask: request ref (packed + 1) wants the mask of output k. */
struct mjob {
    uint64_t ref;
    uint32_t k;
};

struct launcher_mask {
    struct launcher *l;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    int stop;
    struct mjob *queued; /* max_seqs: per slot, ref 0 = none */
    struct mjob busy;    /* what the thread computes now (ref 0 = nothing) */
    uint32_t busy_slot;
    /* mask thread only */
    rs_grammar_vocab *gv;
    rs_grammar_cache *cache;
    struct mslot *slots;
    int32_t *words;  /* RS_PIPE_CX_MAX_WORDS: a constraint read back */
    int32_t *toks;   /* n_ctx: output tokens being replayed */
    /* model thread only */
    struct mbias *bias;
    int32_t *bwords; /* RS_PIPE_CX_MAX_WORDS */
};

static struct rs_metrics_block *metrics(struct launcher *l)
{
    return &l->p->metrics->stage[RS_PIPE_STAGE_LAUNCHERD];
}

static uint64_t ref_key(struct rs_table_ref r)
{
    return rs_table_ref_pack(r) + 1;
}

static struct rs_table_ref key_ref(uint64_t key)
{
    uint64_t v = key - 1;
    return (struct rs_table_ref){(uint32_t)v, (uint32_t)(v >> 32)};
}

/* --- the mask thread ------------------------------------------------------------------------ */

static void slot_clear(struct mslot *s)
{
    rs_grammar_matcher_destroy(&s->m);
    free(s->allowed);
    s->allowed = NULL;
    s->ref = 0;
    s->n_fed = 0;
}

/* The grammar of a stored constraint, through the thread's cache. */
static rs_err compile(struct launcher_mask *mk, const struct rs_pipe_cx *cx, rs_grammar **g)
{
    rs_err rc = RS_OK;
    if (mk->gv == NULL && (rc = rs_grammar_vocab_create(mk->l->vocab, &mk->gv)) != RS_OK)
        return rc;
    if (mk->cache == NULL &&
        (rc = rs_grammar_cache_create(mk->gv, CACHE_ENTRIES, CACHE_BYTES, &mk->cache)) != RS_OK)
        return rc;
    struct rs_constraint c = {.kind = (enum rs_constraint_kind)cx->kind, .text = cx->text,
                              .len = cx->text_len, .choices = cx->choices,
                              .choice_lens = cx->choice_lens, .n_choices = cx->n_choices};
    char why[256];
    rc = rs_grammar_cache_get(mk->cache, &c, NULL, 0, g, NULL, why, sizeof(why));
    if (rc != RS_OK) /* tokenizerd compiled the same text: only memory can fail here */
        rs_log_error("constraint %s does not compile in launcherd: %s",
                     rs_wire_cx_kind_name(cx->kind), why);
    return rc;
}

/* Loads request key's constraint into slot s (a new request there, or after a restart). */
static rs_err slot_load(struct launcher_mask *mk, struct mslot *s, uint64_t key)
{
    slot_clear(s);
    struct rs_pipe_cx cx;
    rs_err rc = rs_pipe_cx_get(mk->l->p, key_ref(key), mk->words, &cx);
    if (rc != RS_OK)
        return rc;
    uint32_t n_vocab = mk->l->n_vocab;
    size_t n_words = rs_grammar_mask_words(n_vocab);
    if (cx.n_allowed > 0) {
        char why[256];
        if ((s->allowed = calloc(n_words, 4)) == NULL)
            return RS_ENOMEM;
        if ((rc = rs_mask_from_ids(s->allowed, n_words, n_vocab, cx.allowed, cx.n_allowed, why,
                                   sizeof(why))) != RS_OK) {
            rs_log_error("allowed_token_ids of record %u: %s", key_ref(key).index, why);
            return rc;
        }
    }
    if (cx.kind != RS_WIRE_CX_NONE) {
        rs_grammar *g = NULL;
        if ((rc = compile(mk, &cx, &g)) != RS_OK)
            return rc;
        rc = rs_grammar_matcher_create(g, &s->m);
        rs_grammar_release(&g);
        if (rc != RS_OK)
            return rc;
    }
    s->ref = key;
    return RS_OK;
}

/* Brings s's matcher to output k: accepts the tokens it has not seen, replaying when behind. */
static rs_err slot_sync(struct launcher_mask *mk, struct mslot *s, uint32_t k)
{
    if (s->m == NULL)
        return RS_OK;
    struct rs_table_ref ref = key_ref(s->ref);
    void *rec;
    if (rs_table_get(mk->l->p->requests, ref, NULL, &rec) != RS_OK)
        return RS_ESTALE;
    uint32_t n_prompt = ((const struct rs_pipe_req *)rec)->n_prompt, got = 0;
    if (s->n_fed > k) { /* redone from an earlier output (recompute): start over */
        rs_grammar_matcher_reset(s->m);
        s->n_fed = 0;
    }
    uint32_t need = k - s->n_fed;
    rs_err rc = rs_arena_read(mk->l->p->tokens, ref, n_prompt + s->n_fed, need, mk->toks, &got);
    if (rc != RS_OK || got != need)
        return rc != RS_OK ? rc : RS_EIO;
    for (uint32_t i = 0; i < need; i++) {
        if ((rc = rs_grammar_matcher_accept(s->m, mk->toks[i])) != RS_OK) {
            rs_log_error("record %u: output %u (token %d) refused by its constraint: %s",
                         ref.index, s->n_fed, mk->toks[i], rs_strerror(rc));
            return rc;
        }
        s->n_fed++;
    }
    return RS_OK;
}

/* Fills row for output k of s (synced); returns the row flags. */
static uint32_t slot_fill(struct launcher_mask *mk, struct mslot *s, struct rs_pipe_mask_row *row)
{
    size_t n_words = rs_grammar_mask_words(mk->l->n_vocab);
    uint32_t flags = 0;
    if (s->m != NULL) {
        unsigned gf = 0;
        if (rs_grammar_matcher_fill_mask(s->m, row->words, n_words, &gf) != RS_OK)
            return RS_PIPE_MASK_FAILED;
        flags = RS_PIPE_MASK_HAS_ROW | (gf & RS_GRAMMAR_MASK_ONLY_END ? RS_PIPE_MASK_ONLY_END : 0) |
                (gf & RS_GRAMMAR_MASK_DEAD ? RS_PIPE_MASK_DEAD : 0);
        if (s->allowed != NULL)
            rs_mask_and(row->words, s->allowed, n_words);
    } else if (s->allowed != NULL) {
        memcpy(row->words, s->allowed, n_words * 4);
        flags = RS_PIPE_MASK_HAS_ROW;
    }
    row->n_words = (uint32_t)n_words;
    return flags;
}

/* Computes job j for slot into the mask ring (row header last, ready with release: P1). */
static void compute(struct launcher_mask *mk, uint32_t slot, struct mjob j)
{
    struct rs_pipe_mask_row *row = rs_pipe_mask_row_at(mk->l->p, slot);
    if (atomic_load_explicit(&row->ready, memory_order_acquire) && row->ref == j.ref &&
        row->out_index == j.k)
        return; /* already there (queued twice) */
    uint64_t t0 = rs_clock_ns();
    atomic_store_explicit(&row->ready, 0, memory_order_relaxed);
    struct mslot *s = &mk->slots[slot];
    rs_err rc = s->ref == j.ref ? RS_OK : slot_load(mk, s, j.ref);
    if (rc == RS_OK)
        rc = slot_sync(mk, s, j.k);
    uint32_t flags = rc == RS_OK ? slot_fill(mk, s, row) : RS_PIPE_MASK_FAILED;
    if (flags & RS_PIPE_MASK_FAILED)
        slot_clear(s);
    row->flags = flags;
    row->ref = j.ref;
    row->out_index = j.k;
    atomic_store_explicit(&row->ready, 1, memory_order_release); /* P1 */
    struct rs_metrics_block *m = metrics(mk->l);
    rs_counter_add(&m->counter[RS_M_LAU_MASK_ROWS], 1);
    rs_hist_add_ns(&m->hist[RS_H_LAU_MASK], rs_clock_ns() - t0);
}

/* The next queued job (round robin from after the last slot served); 0 when none. */
static int take(struct launcher_mask *mk, uint32_t *slot, struct mjob *j)
{
    uint32_t n = mk->l->p->cfg.max_seqs;
    for (uint32_t i = 1; i <= n; i++) {
        uint32_t s = (mk->busy_slot + i) % n;
        if (mk->queued[s].ref != 0) {
            *slot = s;
            *j = mk->queued[s];
            mk->queued[s].ref = 0;
            return 1;
        }
    }
    return 0;
}

static void *mask_thread(void *arg)
{
    struct launcher_mask *mk = arg;
    pthread_mutex_lock(&mk->mu);
    while (!mk->stop) {
        uint32_t slot;
        struct mjob j;
        if (!take(mk, &slot, &j)) {
            pthread_cond_wait(&mk->work, &mk->mu);
            continue;
        }
        mk->busy = j;
        mk->busy_slot = slot;
        pthread_mutex_unlock(&mk->mu);
        compute(mk, slot, j);
        pthread_mutex_lock(&mk->mu);
        mk->busy.ref = 0;
        pthread_cond_broadcast(&mk->done);
    }
    pthread_mutex_unlock(&mk->mu);
    return NULL;
}

/* --- the model thread ----------------------------------------------------------------------- */

static void mask_free(struct launcher_mask *mk)
{
    uint32_t n = mk->l->p != NULL ? mk->l->p->cfg.max_seqs : 0;
    for (uint32_t i = 0; mk->slots != NULL && i < n; i++)
        slot_clear(&mk->slots[i]);
    for (uint32_t i = 0; mk->bias != NULL && i < n; i++)
        free(mk->bias[i].b);
    rs_grammar_cache_destroy(&mk->cache);
    rs_grammar_vocab_destroy(&mk->gv);
    free(mk->queued);
    free(mk->slots);
    free(mk->bias);
    free(mk->words);
    free(mk->bwords);
    free(mk->toks);
    free(mk);
}

/* The mask state, made on the first constrained request (so others never start a thread). */
static struct launcher_mask *mask_get(struct launcher *l)
{
    if (l->mask != NULL)
        return l->mask;
    struct launcher_mask *mk = calloc(1, sizeof(*mk));
    if (mk == NULL)
        return NULL;
    mk->l = l;
    uint32_t n = l->p->cfg.max_seqs;
    mk->queued = calloc(n, sizeof(*mk->queued));
    mk->slots = calloc(n, sizeof(*mk->slots));
    mk->bias = calloc(n, sizeof(*mk->bias));
    mk->words = malloc(RS_PIPE_CX_MAX_WORDS * 4u);
    mk->bwords = malloc(RS_PIPE_CX_MAX_WORDS * 4u);
    mk->toks = malloc((size_t)l->p->cfg.n_ctx * 4u);
    if (mk->queued == NULL || mk->slots == NULL || mk->bias == NULL || mk->words == NULL ||
        mk->bwords == NULL || mk->toks == NULL) {
        mask_free(mk);
        return NULL;
    }
    pthread_mutex_init(&mk->mu, NULL);
    pthread_cond_init(&mk->work, NULL);
    pthread_cond_init(&mk->done, NULL);
    if (pthread_create(&mk->thread, NULL, mask_thread, mk) != 0) {
        rs_log_error("cannot start the mask thread");
        mask_free(mk);
        return NULL;
    }
    l->mask = mk;
    return mk;
}

/* Queues the mask of output k of seq s unless the row holds it or it is queued (mu held). */
static void enqueue(struct launcher_mask *mk, uint32_t slot, struct mjob j)
{
    const struct rs_pipe_mask_row *row = rs_pipe_mask_row_at(mk->l->p, slot);
    int have = atomic_load_explicit(&row->ready, memory_order_acquire) && row->ref == j.ref &&
               row->out_index == j.k;
    int running = mk->busy.ref == j.ref && mk->busy.k == j.k && mk->busy_slot == slot;
    if (have || running)
        return;
    mk->queued[slot] = j;
    pthread_cond_signal(&mk->work);
}

/* 1 when s's request is constrained, 0 when not (or gone), -1 when its slot has no row. */
static int constrained(struct launcher *l, const struct rs_pipe_batch_seq *s)
{
    void *rec;
    if (rs_table_get(l->p->requests, (struct rs_table_ref){s->req_index, s->req_gen}, NULL,
                     &rec) != RS_OK ||
        !(((const struct rs_pipe_req *)rec)->flags & RS_PIPE_F_CONSTRAINED))
        return 0;
    return s->run_slot < l->p->cfg.max_seqs ? 1 : -1; /* the batch check makes -1 a bug */
}

void launcher_mask_queue(struct launcher *l, const struct rs_pipe_batch_seq *s, uint32_t k)
{
    if (constrained(l, s) != 1)
        return;
    struct launcher_mask *mk = mask_get(l);
    if (mk == NULL)
        return; /* launcher_mask_apply fails the request */
    struct mjob j = {ref_key((struct rs_table_ref){s->req_index, s->req_gen}), k};
    pthread_mutex_lock(&mk->mu);
    enqueue(mk, s->run_slot, j);
    pthread_mutex_unlock(&mk->mu);
}

/* Waits until the row of slot holds job j; counts the waits. Returns the row. */
static const struct rs_pipe_mask_row *wait_row(struct launcher_mask *mk, uint32_t slot,
                                               struct mjob j)
{
    const struct rs_pipe_mask_row *row = rs_pipe_mask_row_at(mk->l->p, slot);
    uint64_t t0 = 0;
    pthread_mutex_lock(&mk->mu);
    for (;;) {
        if (atomic_load_explicit(&row->ready, memory_order_acquire) && row->ref == j.ref &&
            row->out_index == j.k)
            break;
        if (t0 == 0) {
            t0 = rs_clock_ns();
            enqueue(mk, slot, j); /* not queued yet (first output, or a restarted launcher) */
        }
        pthread_cond_wait(&mk->done, &mk->mu);
    }
    pthread_mutex_unlock(&mk->mu);
    if (t0 != 0) {
        struct rs_metrics_block *m = metrics(mk->l);
        rs_counter_add(&m->counter[RS_M_LAU_MASK_WAITS], 1);
        rs_hist_add_ns(&m->hist[RS_H_LAU_MASK_WAIT], rs_clock_ns() - t0);
    }
    return row;
}

/* The logit_bias of the request in slot (model thread's copy, loaded once per request). */
static const struct mbias *bias_of(struct launcher_mask *mk, uint32_t slot, uint64_t key)
{
    struct mbias *b = &mk->bias[slot];
    if (b->ref == key)
        return b;
    b->ref = 0;
    b->n = 0;
    struct rs_pipe_cx cx;
    if (rs_pipe_cx_get(mk->l->p, key_ref(key), mk->bwords, &cx) != RS_OK)
        return NULL;
    if (b->b == NULL &&
        (b->b = malloc(sizeof(*b->b) * (RS_WIRE_LOGIT_BIAS_MAX + LAUNCHER_EOG_MAX))) == NULL)
        return NULL;
    for (uint32_t i = 0; i < cx.n_bias; i++) {
        b->b[i].token = cx.bias_words[2 * i];
        memcpy(&b->b[i].bias, &cx.bias_words[2 * i + 1], 4);
    }
    char why[128];
    if (rs_logit_bias_validate(b->b, cx.n_bias, mk->l->n_vocab, why, sizeof(why)) != RS_OK) {
        rs_log_error("logit_bias of record %u: %s", key_ref(key).index, why);
        return NULL;
    }
    b->n = cx.n_bias;
    b->min_tokens = cx.min_tokens;
    b->n_eog = mk->l->n_eog;
    for (uint32_t i = 0; i < b->n_eog; i++)
        b->b[b->n + i] = (struct rs_logit_bias){mk->l->eog[i], RS_LOGIT_BIAS_BAN};
    b->ref = key;
    return b;
}

enum launcher_mask_verdict launcher_mask_apply(struct launcher *l, const struct rs_pipe_batch_seq *s,
                                               uint32_t k, float *logits)
{
    int c = constrained(l, s);
    if (c == 0)
        return LAUNCHER_MASK_FREE;
    struct launcher_mask *mk = c == 1 ? mask_get(l) : NULL;
    if (mk == NULL)
        return LAUNCHER_MASK_FAILED;
    struct mjob j = {ref_key((struct rs_table_ref){s->req_index, s->req_gen}), k};
    const struct rs_pipe_mask_row *row = wait_row(mk, s->run_slot, j);
    const struct mbias *b = bias_of(mk, s->run_slot, j.ref);
    if ((row->flags & RS_PIPE_MASK_FAILED) || b == NULL)
        return LAUNCHER_MASK_FAILED;
    if (row->flags & RS_PIPE_MASK_ONLY_END)
        return LAUNCHER_MASK_END;
    if (row->flags & RS_PIPE_MASK_DEAD)
        return LAUNCHER_MASK_DEAD;
    uint32_t n_left = 0, n_bias = b->n + (k < b->min_tokens ? b->n_eog : 0);
    rs_mask_apply(logits, l->n_vocab, (row->flags & RS_PIPE_MASK_HAS_ROW) ? row->words : NULL,
                  b->b, n_bias, &n_left);
    return n_left == 0 ? LAUNCHER_MASK_DEAD : LAUNCHER_MASK_APPLIED;
}

void launcher_mask_destroy(struct launcher *l)
{
    struct launcher_mask *mk = l->mask;
    if (mk == NULL)
        return;
    pthread_mutex_lock(&mk->mu);
    mk->stop = 1;
    pthread_cond_broadcast(&mk->work);
    pthread_mutex_unlock(&mk->mu);
    pthread_join(mk->thread, NULL);
    mask_free(mk);
    l->mask = NULL;
}

/* SPDX-License-Identifier: MIT */
/*
 * Batch invariance, bit for bit (memcmp of float logits): a sequence's logits
 * at every position equal those of a reference run that feeds it one token
 * per step alone, whatever else is in the batch (15 companions of mixed
 * lengths, prefilling and decoding), however its prompt is chunked, after a
 * recompute into fresh blocks, and on 1, 2 or 3 threads. Run on the real
 * stories260K and on random models (GQA, F16, BF16, Q8_0, odd widths; every
 * architecture, sliding windows shorter than the sequence) made by
 * ringserve-mkmodel, so both GEMM paths (register and panel) meet.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "launcherd/engine/model.h"
#include "tests/rs_test.h"
#include "tests/unit/engine_testutil.h"

#define MAX_TOK 96
#define MAX_SEQS 16
#define BS 4 /* small blocks: many block boundaries inside each sequence */
#define MAX_BLOCKS (MAX_TOK / BS + 1)

struct run_seq {
    int32_t toks[MAX_TOK];
    uint32_t n;            /* tokens to feed */
    uint32_t done;         /* tokens whose K/V are in the cache */
    const uint32_t *chunks; /* chunk sizes, cycled; 0 = all the rest */
    uint32_t n_chunks, next;
    uint32_t table[MAX_BLOCKS];
    float *logits;  /* (n, vocab) after each position, where produced */
    uint8_t *have;  /* (n) */
};

static uint64_t rng_state = 12345;

static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

static void seq_init(struct run_seq *s, const int32_t *toks, uint32_t n, const uint32_t *chunks,
                     uint32_t n_chunks, uint32_t *next_block, uint32_t vocab)
{
    memset(s, 0, sizeof(*s));
    memcpy(s->toks, toks, n * sizeof(int32_t));
    s->n = n;
    s->chunks = chunks;
    s->n_chunks = n_chunks;
    for (uint32_t b = 0; b < MAX_BLOCKS; b++) /* scrambled: 7 is coprime with MAX_BLOCKS */
        s->table[b] = *next_block + (b * 7) % MAX_BLOCKS;
    *next_block += MAX_BLOCKS;
    s->logits = calloc((size_t)n * vocab, sizeof(float));
    s->have = calloc(n, 1);
}

static void seq_free(struct run_seq *s)
{
    free(s->logits);
    free(s->have);
}

/* Feeds every sequence by its chunk schedule, all in the same steps, until all are done. */
static int run_batch(rs_model *m, rs_kvcache *kv, struct run_seq **seqs, int n)
{
    uint32_t vocab = rs_model_hparams(m)->n_vocab;
    for (;;) {
        struct rs_model_seq batch[MAX_SEQS];
        int idx[MAX_SEQS], nb = 0;
        for (int i = 0; i < n; i++) {
            struct run_seq *s = seqs[i];
            if (s->done == s->n)
                continue;
            uint32_t c = s->chunks[s->next % s->n_chunks], left = s->n - s->done;
            c = c == 0 || c > left ? left : c;
            struct rs_model_seq b = {s->toks + s->done, c, s->done, s->table, MAX_BLOCKS, 1};
            batch[nb] = b;
            idx[nb++] = i;
        }
        if (nb == 0)
            return 0;
        RS_CHECK(rs_model_step(m, kv, batch, (uint32_t)nb) == RS_OK);
        for (int j = 0; j < nb; j++) {
            struct run_seq *s = seqs[idx[j]];
            uint32_t last = s->done + batch[j].n_tokens - 1;
            const float *l = rs_model_logits(m, (uint32_t)j);
            RS_CHECK(l != NULL);
            memcpy(s->logits + (size_t)last * vocab, l, vocab * sizeof(float));
            s->have[last] = 1;
            s->done += batch[j].n_tokens;
            s->next++;
        }
    }
}

/* Every produced position of s equals the reference bit for bit. */
static int same_as_ref(const struct run_seq *s, const struct run_seq *ref, uint32_t vocab,
                       const char *what)
{
    int compared = 0;
    for (uint32_t p = 0; p < s->n; p++) {
        if (!s->have[p])
            continue;
        RS_CHECK_MSG(ref->have[p], "%s: no reference at %u", what, p);
        RS_CHECK_MSG(memcmp(s->logits + (size_t)p * vocab, ref->logits + (size_t)p * vocab,
                            vocab * sizeof(float)) == 0,
                     "%s: logits at position %u differ from the one-token-per-step run", what, p);
        compared++;
    }
    RS_CHECK_MSG(compared > 0, "%s: nothing compared", what);
    return 0;
}

struct fixture {
    rs_model *m;
    rs_kvcache *kv;
    uint32_t vocab;
    int32_t toks[MAX_TOK];
    uint32_t n;
    struct run_seq ref;
    uint32_t next_block;
};

static const uint32_t one[] = {1};

static rs_model *load(const char *path, int threads, int isa)
{
    struct rs_model_opts o;
    rs_model_opts_default(&o);
    o.n_threads = threads;
    o.isa = isa;
    rs_model *m = NULL;
    char err[256];
    if (rs_model_load(path, &o, &m, err, sizeof(err)) != RS_OK)
        fprintf(stderr, "load %s: %s\n", path, err);
    return m;
}

/* Loads the model, picks the token sequence, and runs the reference (alone, 1 token/step). */
static int fixture_init(struct fixture *f, const char *path, int threads, int isa)
{
    memset(f, 0, sizeof(*f));
    f->m = load(path, threads, isa);
    RS_CHECK(f->m != NULL);
    f->vocab = rs_model_hparams(f->m)->n_vocab;
    RS_CHECK(rs_kvcache_create(f->m, 40 * MAX_BLOCKS, BS, &f->kv) == RS_OK);
    f->n = 70;
    f->toks[0] = 1;
    for (uint32_t i = 1; i < f->n; i++)
        f->toks[i] = (int32_t)(3 + rnd(f->vocab - 3));
    seq_init(&f->ref, f->toks, f->n, one, 1, &f->next_block, f->vocab);
    struct run_seq *r = &f->ref;
    return run_batch(f->m, f->kv, &r, 1);
}

static void fixture_fini(struct fixture *f)
{
    seq_free(&f->ref);
    rs_kvcache_destroy(&f->kv);
    rs_model_destroy(&f->m);
}

/* The target alone, then with 15 companions of mixed lengths and chunkings. */
static int check_companions(struct fixture *f)
{
    static const uint32_t target_chunks[] = {13, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                             1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                             1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                             1, 1, 1, 1, 1, 1};
    static const uint32_t mixes[][3] = {{0, 0, 0}, {1, 1, 1}, {5, 1, 1}, {2, 7, 1}, {16, 1, 3},
                                        {9, 9, 1}, {1, 4, 1}, {30, 1, 1}};
    struct run_seq alone, target, comp[15];
    seq_init(&alone, f->toks, f->n, target_chunks, 60, &f->next_block, f->vocab);
    struct run_seq *a = &alone;
    RS_CHECK(run_batch(f->m, f->kv, &a, 1) == 0);
    RS_CHECK(same_as_ref(&alone, &f->ref, f->vocab, "alone, 13-token prefill then decode") == 0);
    seq_init(&target, f->toks, f->n, target_chunks, 60, &f->next_block, f->vocab);
    struct run_seq *all[16] = {&target};
    for (int i = 0; i < 15; i++) {
        int32_t t[MAX_TOK];
        uint32_t n = 5 + rnd(MAX_TOK - 5);
        for (uint32_t j = 0; j < n; j++)
            t[j] = (int32_t)rnd(f->vocab);
        seq_init(&comp[i], t, n, mixes[i % 8], 3, &f->next_block, f->vocab);
        all[i + 1] = &comp[i];
    }
    RS_CHECK(run_batch(f->m, f->kv, all, 16) == 0);
    int rc = same_as_ref(&target, &f->ref, f->vocab, "with 15 companions");
    seq_free(&alone);
    seq_free(&target);
    for (int i = 0; i < 15; i++)
        seq_free(&comp[i]);
    return rc;
}

/* The whole sequence in one step, and in chunks of several sizes. */
static int check_chunking(struct fixture *f)
{
    static const uint32_t whole[] = {0}, c3[] = {3}, c16[] = {16}, mixed[] = {5, 11, 2, 1, 7};
    static const struct {
        const uint32_t *c;
        uint32_t n;
        const char *what;
    } plans[] = {{whole, 1, "one-shot prefill"}, {c3, 1, "chunks of 3"},
                 {c16, 1, "chunks of 16"},     {mixed, 5, "chunks 5,11,2,1,7"}};
    for (size_t i = 0; i < sizeof(plans) / sizeof(plans[0]); i++) {
        struct run_seq s;
        seq_init(&s, f->toks, f->n, plans[i].c, plans[i].n, &f->next_block, f->vocab);
        struct run_seq *p = &s;
        RS_CHECK(run_batch(f->m, f->kv, &p, 1) == 0);
        int rc = same_as_ref(&s, &f->ref, f->vocab, plans[i].what);
        seq_free(&s);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Prefill + some decode, then drop the blocks: re-prefill everything so far into new ones. */
static int check_recompute(struct fixture *f)
{
    static const uint32_t first[] = {9, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, again[] = {40, 1};
    struct run_seq s;
    seq_init(&s, f->toks, 40, first, 11, &f->next_block, f->vocab);
    struct run_seq *p = &s;
    RS_CHECK(run_batch(f->m, f->kv, &p, 1) == 0);
    RS_CHECK(same_as_ref(&s, &f->ref, f->vocab, "before preemption") == 0);
    seq_free(&s);
    /* Preempted: its blocks are gone (the new table points elsewhere). */
    seq_init(&s, f->toks, f->n, again, 2, &f->next_block, f->vocab);
    RS_CHECK(run_batch(f->m, f->kv, &p, 1) == 0);
    int rc = same_as_ref(&s, &f->ref, f->vocab, "after recompute");
    seq_free(&s);
    return rc;
}

static int check_threads(struct fixture *f, const char *path, int isa)
{
    for (int threads = 1; threads <= 3; threads++) {
        struct fixture g;
        rng_state = 12345;
        RS_CHECK(fixture_init(&g, path, threads, isa) == 0);
        RS_CHECK(memcmp(g.toks, f->toks, sizeof(f->toks)) == 0);
        char what[64];
        snprintf(what, sizeof(what), "%d threads", threads);
        int rc = same_as_ref(&g.ref, &f->ref, f->vocab, what);
        if (rc == 0)
            rc = check_companions(&g);
        fixture_fini(&g);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int check_all(const char *path, int isa)
{
    struct fixture f;
    rng_state = 12345;
    RS_CHECK(fixture_init(&f, path, 2, isa) == 0);
    int rc = check_companions(&f);
    if (rc == 0)
        rc = check_chunking(&f);
    if (rc == 0)
        rc = check_recompute(&f);
    if (rc == 0)
        rc = check_threads(&f, path, isa);
    fixture_fini(&f);
    return rc;
}

/* Makes a random model with ringserve-mkmodel; returns its path or NULL. */
static const char *mkmodel(const char *type, const char *extra, char *path, size_t len)
{
    snprintf(path, len, "%s/rand-%s.gguf", rs_test_tmpdir(), type);
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "'%s/ringserve-mkmodel' -o '%s' --dim 96 --layers 2 --heads 4 --kv-heads 2 "
             "--ffn %s --vocab 300 --type %s --seed 7 %s",
             rs_test_bindir(), path, strcmp(type, "q8_0") == 0 ? "224" : "196", type, extra);
    int rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
        fprintf(stderr, "mkmodel failed: %s\n", cmd);
        return NULL;
    }
    return path;
}

static int check_random(const char *type, const char *extra, int isa)
{
    char path[512];
    RS_CHECK(mkmodel(type, extra, path, sizeof(path)) != NULL);
    return check_all(path, isa);
}

/* Q4_K attention, Q4_0 gate/up, Q6_K down and output, Q4_K embedding. */
static enum rs_ggml_type kquant_mix(const char *name)
{
    if (strstr(name, "ffn_down") != NULL || strcmp(name, "output.weight") == 0)
        return RS_GGML_Q6_K;
    if (strstr(name, "ffn_gate") != NULL || strstr(name, "ffn_up") != NULL)
        return RS_GGML_Q4_0;
    return RS_GGML_Q4_K;
}

static int test_random_kquants_invariant(void)
{
    char base[512], path[512];
    RS_CHECK(tu_mkmodel("kq-base", "--dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 512 "
                                   "--vocab 300 --type f32 --seed 3", base, sizeof(base)) != NULL);
    snprintf(path, sizeof(path), "%s/kq.gguf", rs_test_tmpdir());
    struct tu_edit e = {.randomize = kquant_mix};
    RS_CHECK(tu_rewrite(base, path, &e) == 0);
    return check_all(path, RS_MODEL_ISA_AUTO);
}

static int test_stories260k_invariant(void)
{
    char path[1024];
    if (rs_test_refdata("stories260K.gguf", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    return check_all(path, RS_MODEL_ISA_AUTO);
}

static int test_stories260k_invariant_portable(void)
{
    char path[1024];
    if (rs_test_refdata("stories260K.gguf", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    return check_all(path, RS_MODEL_ISA_PORTABLE);
}

static int test_random_f32_invariant(void)
{
    return check_random("f32", "--tied", RS_MODEL_ISA_AUTO);
}

static int test_random_f16_invariant(void)
{
    return check_random("f16", "", RS_MODEL_ISA_AUTO);
}

static int test_random_bf16_invariant(void)
{
    return check_random("bf16", "", RS_MODEL_ISA_AUTO);
}

static int test_random_q8_0_invariant(void)
{
    return check_random("q8_0", "", RS_MODEL_ISA_AUTO);
}

static int test_random_q8_0_invariant_portable(void)
{
    return check_random("q8_0", "", RS_MODEL_ISA_PORTABLE);
}

/*
 * Every architecture, sliding windows (6..11 positions) far shorter than the
 * 70-token sequences and the chunks, so local layers attend from positions
 * beyond the window: bitwise equal whatever the batch, chunking or threads.
 */
static int test_random_qwen2_invariant(void)
{
    return check_random("f32", "--arch qwen2", RS_MODEL_ISA_AUTO);
}

static int test_random_qwen3_invariant(void)
{
    return check_random("f16", "--arch qwen3 --head-dim 20 --norm-std 0.2", RS_MODEL_ISA_AUTO);
}

static int test_random_gemma2_window_invariant(void)
{
    return check_random("f32", "--arch gemma2 --swa 6 --softcap 2,3 --norm-std 0.2",
                        RS_MODEL_ISA_AUTO);
}

static int test_random_gemma2_window_invariant_portable(void)
{
    return check_random("f32", "--arch gemma2 --swa 6 --softcap 2,3 --norm-std 0.2",
                        RS_MODEL_ISA_PORTABLE);
}

static int test_random_gemma3_window_invariant(void)
{
    return check_random("bf16", "--arch gemma3 --layers 6 --swa 9 --norm-std 0.2",
                        RS_MODEL_ISA_AUTO);
}

static int test_random_phi3_window_invariant(void)
{
    return check_random("q8_0", "--arch phi3 --swa 11", RS_MODEL_ISA_AUTO);
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_stories260k_invariant),
    RS_TEST(test_stories260k_invariant_portable),
    RS_TEST(test_random_f32_invariant),
    RS_TEST(test_random_f16_invariant),
    RS_TEST(test_random_bf16_invariant),
    RS_TEST(test_random_q8_0_invariant),
    RS_TEST(test_random_q8_0_invariant_portable),
    RS_TEST(test_random_kquants_invariant),
    RS_TEST(test_random_qwen2_invariant),
    RS_TEST(test_random_qwen3_invariant),
    RS_TEST(test_random_gemma2_window_invariant),
    RS_TEST(test_random_gemma2_window_invariant_portable),
    RS_TEST(test_random_gemma3_window_invariant),
    RS_TEST(test_random_phi3_window_invariant),
};
RS_TEST_MAIN(cases)

/* SPDX-License-Identifier: MIT */
/*
 * The llama forward pass against published outputs: greedy decoding of the
 * real stories260K model must give exactly the 256 ids that reproduce
 * llama2.c's published text (refdata README sections 6 and 7), with every
 * kernel variant and thread count.
 */
#include <stdlib.h>
#include <string.h>

#include "launcherd/engine/model.h"
#include "tests/rs_test.h"

/* Reads the space-separated ids of refdata/expected/<name> into ids (at most cap). */
static int read_ids(const char *rel, int32_t *ids, int cap)
{
    char path[1024];
    if (rs_test_refdata(rel, path, sizeof(path)) == NULL)
        return -1;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    int n = 0;
    while (n < cap && fscanf(f, "%d", &ids[n]) == 1)
        n++;
    fclose(f);
    return n;
}

static int argmax(const float *v, uint32_t n)
{
    int best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = (int)i;
    return best;
}

/* Greedy decoding from BOS for n steps, one token per step, into out. */
static int greedy(int isa, int threads, int32_t *out, int n)
{
    char path[1024], err[256];
    if (rs_test_refdata("stories260K.gguf", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    struct rs_model_opts o;
    rs_model_opts_default(&o);
    o.isa = isa;
    o.n_threads = threads;
    rs_model *m;
    RS_CHECK_MSG(rs_model_load(path, &o, &m, err, sizeof(err)) == RS_OK, "%s", err);
    rs_kvcache *kv;
    RS_CHECK(rs_kvcache_create(m, 32, 16, &kv) == RS_OK);
    uint32_t table[32];
    for (uint32_t i = 0; i < 32; i++)
        table[i] = 31 - i; /* any permutation: the table, not the order, decides */
    int32_t tok = 1;
    for (int i = 0; i < n; i++) {
        struct rs_model_seq s = {&tok, 1, (uint32_t)i, table, 32, 1};
        RS_CHECK(rs_model_step(m, kv, &s, 1) == RS_OK);
        tok = argmax(rs_model_logits(m, 0), rs_model_hparams(m)->n_vocab);
        out[i] = tok;
    }
    rs_kvcache_destroy(&kv);
    rs_model_destroy(&m);
    return 0;
}

static int check_greedy(int isa, int threads)
{
    int32_t want[256], got[256];
    if (read_ids("expected/stories260K.greedy-n256.ids", want, 256) != 256)
        return RS_TEST_SKIP;
    int rc = greedy(isa, threads, got, 256);
    if (rc != 0)
        return rc;
    for (int i = 0; i < 256; i++)
        RS_CHECK_MSG(got[i] == want[i], "step %d: got %d, want %d", i, got[i], want[i]);
    return 0;
}

static int test_stories260k_greedy_ids(void)
{
    return check_greedy(RS_MODEL_ISA_AUTO, 0);
}

static int test_stories260k_greedy_ids_portable(void)
{
    return check_greedy(RS_MODEL_ISA_PORTABLE, 1);
}

static int test_stories260k_greedy_ids_3_threads(void)
{
    return check_greedy(RS_MODEL_ISA_AUTO, 3);
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_stories260k_greedy_ids),
    RS_TEST(test_stories260k_greedy_ids_portable),
    RS_TEST(test_stories260k_greedy_ids_3_threads),
};
RS_TEST_MAIN(cases)

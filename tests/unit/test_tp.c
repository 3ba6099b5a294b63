/* SPDX-License-Identifier: MIT */
/*
 * Tensor parallelism on the CPU backend (rs_model_opts.tp): the sharding
 * math that a multi-GPU run uses, tested where CI runs. TP 2 and 4 logits
 * match TP 1 within a stated tolerance at every step of a teacher-forced
 * run (prefill chunk, then decode) on stories260K (F32) and a random Q8_0
 * model with GQA; the greedy token agrees at every step; TP-N stays bitwise
 * batch invariant and independent of the thread count; shards that would
 * split a head, a KV head or a weight block are refused at load.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "launcherd/engine/model.h"
#include "tests/rs_test.h"
#include "tests/unit/engine_testutil.h"

/* max |tpN - tp1| / max(1, max |tp1|) over a row: only the Wo/Wdown sums are regrouped. */
#define TP_TOL 2e-5

#define STEPS 24

static int load_dot(const char *path, int tp, int threads, int exact, rs_model **m)
{
    struct rs_model_opts o;
    char err[256];
    rs_model_opts_default(&o);
    o.dot = exact ? RS_MODEL_DOT_EXACT : RS_MODEL_DOT_INT8;
    o.tp = tp;
    o.n_threads = threads;
    rs_err rc = rs_model_load(path, &o, m, err, sizeof(err));
    if (rc != RS_OK)
        fprintf(stderr, "tp %d: %s (%s)\n", tp, rs_strerror(rc), err);
    return rc;
}

/*
 * A 9-token prefill chunk, then STEPS - 1 single-token steps over the given
 * ids; the logits after each step into out (STEPS x n_vocab).
 */
static int run(rs_model *m, const int32_t *ids, float *out)
{
    uint32_t nv = rs_model_hparams(m)->n_vocab, table[4] = {2, 0, 3, 1};
    rs_kvcache *kv;
    RS_CHECK(rs_kvcache_create(m, 4, 16, &kv) == RS_OK);
    uint32_t pos = 0;
    for (int step = 0; step < STEPS; step++) {
        uint32_t n = step == 0 ? 9 : 1;
        struct rs_model_seq s = {ids + pos, n, pos, table, 4, 1};
        RS_CHECK(rs_model_step(m, kv, &s, 1) == RS_OK);
        memcpy(out + (size_t)step * nv, rs_model_logits(m, 0), nv * sizeof(float));
        pos += n;
    }
    rs_kvcache_destroy(&kv);
    return 0;
}

static int argmax(const float *v, uint32_t n)
{
    int b = 0;
    for (uint32_t i = 1; i < n; i++)
        b = v[i] > v[b] ? (int)i : b;
    return b;
}

/* The exact float path: TP only reorders the partial sums, so within TP_TOL. */
static int load(const char *path, int tp, int threads, rs_model **m)
{
    return load_dot(path, tp, threads, 1, m);
}

/* Max |a - b| over max(1, |a|) of STEPS logit rows. */
static double rel_diff(const float *a, const float *b, uint32_t nv)
{
    double worst = 0;
    for (int step = 0; step < STEPS; step++) {
        double mx = 1, d = 0;
        for (uint32_t v = 0; v < nv; v++) {
            mx = fmax(mx, fabs(a[(size_t)step * nv + v]));
            d = fmax(d, fabs((double)a[(size_t)step * nv + v] - b[(size_t)step * nv + v]));
        }
        worst = fmax(worst, d / mx);
    }
    return worst;
}

/*
 * The integer dot under TP: each shard quantizes its own activation blocks,
 * which are the blocks of the whole row (per-block scales), so TP changes
 * only the float order of the partial sums; but a change in the last bit can
 * move a later layer's activation across a rounding boundary. So the bound
 * is what activation quantization itself moves the logits by (integer vs exact
 * at TP 1, measured here): TP 2 and 4 stay within twice that of TP 1.
 */
static int compare_tp_int8(const char *path, const char *label)
{
    rs_model *m;
    RS_CHECK(load_dot(path, 1, 2, 1, &m) == RS_OK);
    uint32_t nv = rs_model_hparams(m)->n_vocab;
    int32_t ids[STEPS + 9];
    uint64_t st = 78;
    for (int i = 0; i < STEPS + 9; i++)
        ids[i] = (int32_t)(tu_rand(&st) % nv);
    float *exact = malloc((size_t)STEPS * nv * 4), *ref = malloc((size_t)STEPS * nv * 4);
    float *got = malloc((size_t)STEPS * nv * 4);
    RS_CHECK(exact && ref && got);
    RS_CHECK(run(m, ids, exact) == 0);
    rs_model_destroy(&m);
    RS_CHECK(load_dot(path, 1, 2, 0, &m) == RS_OK);
    RS_CHECK(run(m, ids, ref) == 0);
    rs_model_destroy(&m);
    double qerr = rel_diff(exact, ref, nv);
    RS_CHECK_MSG(qerr > 0, "%s: the integer dot gave the exact path's bits", label);
    for (int tp = 2; tp <= 4; tp += 2) {
        RS_CHECK(load_dot(path, tp, 2, 0, &m) == RS_OK);
        RS_CHECK(run(m, ids, got) == 0);
        double d = rel_diff(ref, got, nv);
        fprintf(stderr, "%s integer dot: tp %d vs tp 1 %.3g of max |logit| (bound %.3g: twice "
                "integer vs exact)\n", label, tp, d, 2 * qerr);
        RS_CHECK_MSG(d <= 2 * qerr, "%s tp %d: integer dot %.3g from tp 1", label, tp, d);
        rs_model_destroy(&m);
    }
    free(exact), free(ref), free(got);
    return 0;
}

/* TP 2 and 4 against TP 1 on the model at path. */
static int compare_tp(const char *path, const char *label)
{
    rs_model *m;
    RS_CHECK(load(path, 1, 2, &m) == RS_OK);
    uint32_t nv = rs_model_hparams(m)->n_vocab;
    int32_t ids[STEPS + 9];
    uint64_t st = 77;
    for (int i = 0; i < STEPS + 9; i++)
        ids[i] = (int32_t)(tu_rand(&st) % nv);
    float *ref = malloc((size_t)STEPS * nv * sizeof(float));
    float *got = malloc((size_t)STEPS * nv * sizeof(float));
    RS_CHECK(run(m, ids, ref) == 0);
    rs_model_destroy(&m);
    for (int tp = 2; tp <= 4; tp += 2) {
        RS_CHECK(load(path, tp, 2, &m) == RS_OK);
        RS_CHECK(strstr(rs_model_describe(m), tp == 2 ? "tp 2" : "tp 4") != NULL);
        RS_CHECK(run(m, ids, got) == 0);
        double worst = 0;
        for (int step = 0; step < STEPS; step++) {
            const float *a = ref + (size_t)step * nv, *b = got + (size_t)step * nv;
            double mx = 1, d = 0;
            for (uint32_t v = 0; v < nv; v++) {
                mx = fabs(a[v]) > mx ? fabs(a[v]) : mx;
                d = fabs((double)a[v] - b[v]) > d ? fabs((double)a[v] - b[v]) : d;
            }
            worst = d / mx > worst ? d / mx : worst;
            RS_CHECK_MSG(d / mx <= TP_TOL, "%s tp %d step %d: %.3g of max |logit|", label, tp, step,
                         d / mx);
            RS_CHECK_MSG(argmax(a, nv) == argmax(b, nv), "%s tp %d step %d: greedy differs", label,
                         tp, step);
        }
        fprintf(stderr, "%s: tp %d vs tp 1: worst relative difference %.3g (tolerance %.1g)\n",
                label, tp, worst, TP_TOL);
        rs_model_destroy(&m);
    }
    free(ref);
    free(got);
    return 0;
}

static int test_tp_matches_tp1_stories260k(void)
{
    char path[1024];
    if (rs_test_refdata("stories260K.gguf", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    return compare_tp(path, "stories260K");
}

static const char *q8_model(char *path, size_t len)
{
    return tu_mkmodel("tp-q8",
                      "--dim 256 --layers 2 --heads 8 --kv-heads 4 --ffn 512 --vocab 300 "
                      "--type q8_0 --seed 11",
                      path, len);
}

static int test_tp_matches_tp1_random_q8_0_gqa(void)
{
    char path[1024];
    RS_CHECK(q8_model(path, sizeof(path)) != NULL);
    return compare_tp(path, "random Q8_0 GQA");
}

static int test_tp_integer_dot_random_q8_0_gqa(void)
{
    char path[1024];
    RS_CHECK(q8_model(path, sizeof(path)) != NULL);
    return compare_tp_int8(path, "random Q8_0 GQA");
}

/* compare (compare_tp or compare_tp_int8) on the random model ringserve-mkmodel makes of args. */
static int compare_on(const char *name, const char *args, const char *label,
                      int (*compare)(const char *, const char *))
{
    char path[1024];
    RS_CHECK(tu_mkmodel(name, args, path, sizeof(path)) != NULL);
    return compare(path, label);
}

/* Q4_0 rows interleaved for the batch-1 dot (kern_mat_row): the Wo / Wdown shards read column
 * slices of the groups; a vocabulary of 300 leaves the output matrix plain. */
static int test_tp_integer_dot_random_q4_0_interleaved(void)
{
    return compare_on("tp-q4",
                      "--dim 256 --layers 2 --heads 8 --kv-heads 4 --ffn 512 --vocab 300 "
                      "--type q4_0 --seed 12",
                      "random Q4_0 GQA", compare_tp_int8);
}

/* Post norms (the Wo / Wdown sums normalized before the residual) and windows shard too. */
static int test_tp_matches_tp1_gemma3_post_norms(void)
{
    return compare_on("tp-g3",
                      "--arch gemma3 --dim 128 --layers 6 --heads 4 --kv-heads 4 --head-dim 32 "
                      "--ffn 256 --vocab 300 --swa 7 --norm-std 0.2 --type f32 --seed 5",
                      "random gemma3", compare_tp);
}

/* Logits of sequence 0 over a prefill then 3 decodes, alone or beside 3 companions. */
static int seq0(rs_model *m, int companions, float *out)
{
    uint32_t nv = rs_model_hparams(m)->n_vocab, tables[4][3];
    rs_kvcache *kv;
    RS_CHECK(rs_kvcache_create(m, 12, 16, &kv) == RS_OK);
    int32_t toks[4][24];
    uint64_t st = 3;
    for (int i = 0; i < 4; i++) {
        for (int t = 0; t < 24; t++)
            toks[i][t] = (int32_t)(tu_rand(&st) % nv);
        for (int b = 0; b < 3; b++)
            tables[i][b] = (uint32_t)(b * 4 + i);
    }
    uint32_t n = companions ? 4 : 1;
    for (int step = 0; step < 4; step++) {
        struct rs_model_seq s[4];
        for (uint32_t i = 0; i < n; i++) {
            uint32_t len = 12 + 2 * i;
            s[i] =
                step == 0
                    ? (struct rs_model_seq){toks[i], len, 0, tables[i], 3, 1}
                    : (struct rs_model_seq){
                          toks[i] + len + step - 1, 1, len + (uint32_t)step - 1, tables[i], 3, 1};
        }
        RS_CHECK(rs_model_step(m, kv, s, n) == RS_OK);
        memcpy(out + (size_t)step * nv, rs_model_logits(m, 0), nv * sizeof(float));
    }
    rs_kvcache_destroy(&kv);
    return 0;
}

static int test_tp_is_batch_and_thread_invariant(void)
{
    char path[1024];
    if (rs_test_refdata("stories260K.gguf", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    rs_model *m1, *m3;
    RS_CHECK(load(path, 2, 1, &m1) == RS_OK && load(path, 2, 3, &m3) == RS_OK);
    uint32_t nv = rs_model_hparams(m1)->n_vocab;
    size_t n = (size_t)4 * nv;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    float *c = malloc(n * sizeof(float));
    RS_CHECK(seq0(m1, 0, a) == 0 && seq0(m1, 1, b) == 0 && seq0(m3, 1, c) == 0);
    RS_CHECK_MSG(memcmp(a, b, n * sizeof(float)) == 0, "tp 2: companions changed the logits");
    RS_CHECK_MSG(memcmp(a, c, n * sizeof(float)) == 0, "tp 2: 3 threads changed the logits");
    free(a);
    free(b);
    free(c);
    rs_model_destroy(&m1);
    rs_model_destroy(&m3);
    return 0;
}

static int test_uneven_shards_are_refused(void)
{
    char path[1024], q8[1024];
    rs_model *m = NULL;
    if (rs_test_refdata("stories260K.gguf", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    RS_CHECK(load(path, 3, 1, &m) == RS_EUNSUPPORTED && m == NULL); /* 8 heads */
    RS_CHECK(load(path, 8, 1, &m) == RS_EUNSUPPORTED);              /* 4 KV heads */
    RS_CHECK(load(path, 65, 1, &m) == RS_EINVAL);
    RS_CHECK(load(path, -1, 1, &m) == RS_EINVAL);
    RS_CHECK(load(path, 0, 1, &m) == RS_OK); /* 0 and 1: no sharding */
    RS_CHECK(strstr(rs_model_describe(m), "tp") == NULL);
    rs_model_destroy(&m);
    /* Q8_0 Wo shards of 256/8 = 32 values are whole blocks; Wdown 512/8 = 64 too; KV heads 4. */
    RS_CHECK(q8_model(q8, sizeof(q8)) != NULL);
    RS_CHECK(load(q8, 8, 1, &m) == RS_EUNSUPPORTED);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_tp_matches_tp1_stories260k),
    RS_TEST(test_tp_matches_tp1_random_q8_0_gqa),
    RS_TEST(test_tp_integer_dot_random_q8_0_gqa),
    RS_TEST(test_tp_integer_dot_random_q4_0_interleaved),
    RS_TEST(test_tp_matches_tp1_gemma3_post_norms),
    RS_TEST(test_tp_is_batch_and_thread_invariant),
    RS_TEST(test_uneven_shards_are_refused),
};

RS_TEST_MAIN(cases)

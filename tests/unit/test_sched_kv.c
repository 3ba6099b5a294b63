/* SPDX-License-Identifier: MIT */
/*
 * schedulerd's KV block pool over a real pipeline segment's kv_meta: free
 * before evict, LRU order, hit verification (token hash and parent), the
 * duplicate and replacement rules, rebuild from kv_meta, forgetting on a
 * launcher change, hash quality, and the invariants under random operations
 * checked against a plain model after every step.
 */
#include <stdlib.h>
#include <string.h>

#include "ipc/pipeline_kv.h"
#include "schedulerd/sched.h"
#include "tests/pipeline_harness.h"
#include "tests/unit/sched_fixture.h"

struct kvfx {
    struct rs_pipe_config cfg;
    struct rs_pipe *p;
    struct kv_block_pool kv;
};

static int kvfx_open(struct kvfx *k, uint32_t n_blocks)
{
    char err[256];
    int rc = sfx_config(&k->cfg, 128, n_blocks < 64 ? 64 : n_blocks, 8, 256);
    if (rc != 0)
        return rc;
    if (rs_harness_config_resolve(&k->cfg, err, sizeof(err)) != RS_OK ||
        rs_pipe_open(&k->cfg, RS_PIPE_STAGE_SCHEDULERD, &k->p, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "open: %s\n", err);
        return 1;
    }
    snprintf(sfx_instance, sizeof(sfx_instance), "%s", k->cfg.instance);
    atexit(sfx_atexit);
    if (kv_block_init(&k->kv, k->p->kv_meta, n_blocks, 16) != RS_OK)
        return 1;
    k->kv.inc = 7;
    return 0;
}

static void kvfx_close(struct kvfx *k)
{
    kv_block_fini(&k->kv);
    rs_pipe_close(&k->p);
    rs_pipe_unlink(k->cfg.instance);
}

/* Registers block b as the full block k of the chain `family` (tokens derived from both). */
static uint32_t reg(struct kvfx *k, uint32_t b, uint32_t family, uint32_t depth, uint32_t parent,
                    uint64_t *hash)
{
    int32_t tok[16];
    uint64_t h = 0;
    for (uint32_t d = 0; d <= depth; d++) {
        for (int i = 0; i < 16; i++)
            tok[i] = (int32_t)(family * 1000 + d * 16 + i);
        h = kv_block_hash_chain(h, tok, 16);
    }
    *hash = h;
    return kv_block_register(&k->kv, b, h, kv_block_hash_tokens(tok, 16), parent);
}

static int test_alloc_takes_free_blocks_before_evicting(void)
{
    struct kvfx k;
    int rc = kvfx_open(&k, 64);
    if (rc != 0)
        return rc;
    uint32_t a = kv_block_alloc(&k.kv), b = kv_block_alloc(&k.kv);
    uint64_t h;
    RS_CHECK(reg(&k, a, 1, 0, SCHED_NONE, &h) == a);
    kv_block_release(&k.kv, a); /* cached: becomes IDLE, not FREE */
    kv_block_release(&k.kv, b); /* uncached: FREE */
    RS_CHECK(k.kv.n_idle == 1 && k.kv.n_used == 0 && kv_block_available(&k.kv) == 64);
    RS_CHECK(kv_block_check(&k.kv) == RS_OK);
    for (uint32_t i = 0; i < 63; i++)
        RS_CHECK(kv_block_alloc(&k.kv) != a); /* every free block goes first */
    RS_CHECK(k.kv.n_idle == 1 && k.kv.evictions == 0);
    RS_CHECK(kv_block_lookup(&k.kv, h, 0, SCHED_NONE) == SCHED_NONE); /* wrong token hash */
    RS_CHECK(kv_block_alloc(&k.kv) == a && k.kv.evictions == 1);
    RS_CHECK(atomic_load(&k.p->kv_meta[a].word) == 0); /* evicted: kv_meta no longer names it */
    RS_CHECK(kv_block_alloc(&k.kv) == SCHED_NONE);
    RS_CHECK(kv_block_check(&k.kv) == RS_OK);
    kvfx_close(&k);
    return 0;
}

static int test_lru_evicts_oldest_release_and_deepest_block_first(void)
{
    struct kvfx k;
    int rc = kvfx_open(&k, 6);
    if (rc != 0)
        return rc;
    uint32_t b[6];
    uint64_t h[6];
    for (int i = 0; i < 6; i++)
        b[i] = kv_block_alloc(&k.kv);
    uint32_t parent = SCHED_NONE;
    for (int i = 0; i < 3; i++) /* chain A: b0 <- b1 <- b2 */
        parent = reg(&k, b[i], 1, (uint32_t)i, parent, &h[i]);
    parent = SCHED_NONE;
    for (int i = 3; i < 6; i++) /* chain B: b3 <- b4 <- b5 */
        parent = reg(&k, b[i], 2, (uint32_t)i - 3, parent, &h[i]);
    for (int i = 2; i >= 0; i--) /* request A ends first: its deepest block first */
        kv_block_release(&k.kv, b[i]);
    for (int i = 5; i >= 3; i--)
        kv_block_release(&k.kv, b[i]);
    RS_CHECK(kv_block_check(&k.kv) == RS_OK);
    const uint32_t want[6] = {b[2], b[1], b[0], b[5], b[4], b[3]};
    for (int i = 0; i < 6; i++)
        RS_CHECK(kv_block_alloc(&k.kv) == want[i]);
    kvfx_close(&k);
    return 0;
}

static int test_hit_needs_token_hash_and_parent(void)
{
    struct kvfx k;
    int rc = kvfx_open(&k, 16);
    if (rc != 0)
        return rc;
    int32_t tok[16];
    for (int i = 0; i < 16; i++)
        tok[i] = 40 + i;
    uint32_t p = kv_block_alloc(&k.kv), c = kv_block_alloc(&k.kv);
    uint64_t hp = kv_block_hash_chain(0, tok, 16), hc = kv_block_hash_chain(hp, tok, 16);
    uint64_t th = kv_block_hash_tokens(tok, 16);
    RS_CHECK(kv_block_register(&k.kv, p, hp, th, SCHED_NONE) == p);
    RS_CHECK(kv_block_register(&k.kv, c, hc, th, p) == c);
    RS_CHECK(kv_block_lookup(&k.kv, hp, th, SCHED_NONE) == p);
    RS_CHECK(kv_block_lookup(&k.kv, hc, th, p) == c);
    RS_CHECK(kv_block_lookup(&k.kv, hc, th, SCHED_NONE) == SCHED_NONE); /* wrong parent */
    RS_CHECK(kv_block_lookup(&k.kv, hc, th ^ 1, p) == SCHED_NONE);      /* wrong tokens */
    RS_CHECK(kv_block_lookup(&k.kv, hc ^ 1, th, p) == SCHED_NONE);      /* wrong chain */
    RS_CHECK(k.p->kv_meta[c].parent == p && k.p->kv_meta[c].tok_hash == th);
    RS_CHECK(atomic_load(&k.p->kv_meta[c].word) == (7ull << 32 | 1));
    kvfx_close(&k);
    return 0;
}

static int test_duplicate_block_stays_private_and_mismatch_is_replaced(void)
{
    struct kvfx k;
    int rc = kvfx_open(&k, 16);
    if (rc != 0)
        return rc;
    uint32_t a = kv_block_alloc(&k.kv), b = kv_block_alloc(&k.kv), c = kv_block_alloc(&k.kv);
    RS_CHECK(kv_block_register(&k.kv, a, 99, 5, SCHED_NONE) == a);
    RS_CHECK(kv_block_register(&k.kv, b, 99, 5, SCHED_NONE) == a); /* same content: a stays */
    RS_CHECK(!k.kv.cached[b] && atomic_load(&k.p->kv_meta[b].word) == 0);
    kv_block_release(&k.kv, b);
    RS_CHECK(k.kv.n_free == 14); /* the private copy is not kept */
    kv_block_release(&k.kv, a);
    RS_CHECK(k.kv.n_idle == 1);
    /* same chained hash, other tokens: the orphan is replaced (and freed, being unused) */
    RS_CHECK(kv_block_register(&k.kv, c, 99, 6, SCHED_NONE) == c);
    RS_CHECK(!k.kv.cached[a] && k.kv.n_idle == 0 && kv_block_lookup(&k.kv, 99, 6, SCHED_NONE) == c);
    RS_CHECK(kv_block_check(&k.kv) == RS_OK);
    kvfx_close(&k);
    return 0;
}

static int test_rebuild_restores_cache_of_the_same_launcher_only(void)
{
    struct kvfx k;
    int rc = kvfx_open(&k, 32);
    if (rc != 0)
        return rc;
    uint32_t b[4];
    uint64_t h[4];
    uint32_t parent = SCHED_NONE;
    for (int i = 0; i < 4; i++) {
        b[i] = kv_block_alloc(&k.kv);
        parent = reg(&k, b[i], 3, (uint32_t)i, parent, &h[i]);
    }
    kv_block_release(&k.kv, b[3]);
    kv_block_release(&k.kv, b[2]); /* b0, b1 still held by a running table */
    uint32_t ref[32] = {0};
    ref[b[0]] = 1;
    ref[b[1]] = 2; /* rebuilt refcounts may differ: they come from the tables */
    struct kv_block_pool again;
    RS_CHECK(kv_block_init(&again, k.p->kv_meta, 32, 16) == RS_OK);
    kv_block_rebuild(&again, 7, ref);
    RS_CHECK(kv_block_check(&again) == RS_OK);
    RS_CHECK(again.n_used == 2 && again.n_idle == 2 && again.n_free == 28);
    RS_CHECK(again.ref[b[1]] == 2);
    RS_CHECK(kv_block_lookup(&again, h[3], k.p->kv_meta[b[3]].tok_hash, b[2]) == b[3]);
    kv_block_rebuild(&again, 8, ref); /* another launcher: nothing is cached */
    RS_CHECK(kv_block_check(&again) == RS_OK);
    RS_CHECK(again.n_idle == 0 && again.n_free == 30);
    RS_CHECK(atomic_load(&k.p->kv_meta[b[0]].word) == 0);
    kv_block_fini(&again);
    kvfx_close(&k);
    return 0;
}

static int test_forget_all_frees_idle_blocks_and_restamps(void)
{
    struct kvfx k;
    int rc = kvfx_open(&k, 8);
    if (rc != 0)
        return rc;
    uint64_t h;
    uint32_t a = kv_block_alloc(&k.kv), b = kv_block_alloc(&k.kv);
    reg(&k, a, 1, 0, SCHED_NONE, &h);
    reg(&k, b, 2, 0, SCHED_NONE, &h);
    kv_block_release(&k.kv, a);
    kv_block_forget_all(&k.kv, 9);
    RS_CHECK(kv_block_check(&k.kv) == RS_OK);
    RS_CHECK(k.kv.n_idle == 0 && k.kv.n_used == 1 && k.kv.n_free == 7 && k.kv.inc == 9);
    RS_CHECK(!k.kv.cached[b] && atomic_load(&k.p->kv_meta[b].word) == 0);
    RS_CHECK(reg(&k, b, 2, 0, SCHED_NONE, &h) == b);
    RS_CHECK(atomic_load(&k.p->kv_meta[b].word) == (9ull << 32 | 1));
    kvfx_close(&k);
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int test_hashes_separate_order_parent_and_content(void)
{
    enum { N = 100000 };
    uint64_t *hs = malloc(N * sizeof(uint64_t)), *ts = malloc(N * sizeof(uint64_t));
    RS_CHECK(hs && ts);
    int32_t tok[16];
    uint64_t rng = 12345;
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < 16; j++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            tok[j] = (int32_t)((rng >> 33) % 32000);
        }
        tok[0] = i; /* distinct blocks */
        hs[i] = kv_block_hash_chain(0, tok, 16);
        ts[i] = kv_block_hash_tokens(tok, 16);
        RS_CHECK(hs[i] != ts[i]);
        int32_t sw = tok[3];
        tok[3] = tok[4];
        tok[4] = sw;
        if (tok[3] != tok[4])
            RS_CHECK(kv_block_hash_chain(0, tok, 16) != hs[i]); /* order matters */
        RS_CHECK(kv_block_hash_chain(1, tok, 16) != kv_block_hash_chain(2, tok, 16));
    }
    for (int pass = 0; pass < 2; pass++) { /* no collision among 100k distinct blocks */
        uint64_t *v = pass ? ts : hs;
        qsort(v, N, sizeof(uint64_t), cmp_u64);
        for (int i = 1; i < N; i++)
            RS_CHECK(v[i] != v[i - 1]);
    }
    free(hs);
    free(ts);
    return 0;
}

/* Random alloc/hold/release/register/lookup against a plain model, checked every step. */
static int test_random_operations_keep_the_invariants(void)
{
    struct kvfx k;
    int rc = kvfx_open(&k, 40);
    if (rc != 0)
        return rc;
    uint32_t held[256], n_held = 0, model_ref[40] = {0};
    uint64_t rng = 99;
    for (int step = 0; step < 20000; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t op = (uint32_t)(rng >> 60) % 4, pick = (uint32_t)(rng >> 20);
        if (op == 0 && n_held < 256) {
            uint32_t b = kv_block_alloc(&k.kv);
            if (b == SCHED_NONE) {
                RS_CHECK(kv_block_available(&k.kv) == 0);
            } else {
                RS_CHECK(model_ref[b] == 0);
                model_ref[b] = 1;
                held[n_held++] = b;
            }
        } else if (op == 1 && n_held > 0) {
            uint32_t i = pick % n_held, b = held[i];
            kv_block_release(&k.kv, b);
            model_ref[b]--;
            held[i] = held[--n_held];
        } else if (op == 2 && n_held > 0) {
            uint32_t b = held[pick % n_held];
            uint64_t h = (pick >> 8) % 16; /* few hashes: duplicates and replacements happen */
            kv_block_register(&k.kv, b, h, h * 3, SCHED_NONE);
        } else if (op == 3 && n_held < 256) {
            uint64_t h = pick % 16;
            uint32_t b = kv_block_lookup(&k.kv, h, h * 3, SCHED_NONE);
            if (b != SCHED_NONE) {
                kv_block_hold(&k.kv, b);
                model_ref[b]++;
                held[n_held++] = b;
            }
        }
        if (kv_block_check(&k.kv) != RS_OK)
            return 1;
        for (uint32_t b = 0; b < 40; b++)
            RS_CHECK(k.kv.ref[b] == model_ref[b]);
    }
    kvfx_close(&k);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_alloc_takes_free_blocks_before_evicting),
    RS_TEST(test_lru_evicts_oldest_release_and_deepest_block_first),
    RS_TEST(test_hit_needs_token_hash_and_parent),
    RS_TEST(test_duplicate_block_stays_private_and_mismatch_is_replaced),
    RS_TEST(test_rebuild_restores_cache_of_the_same_launcher_only),
    RS_TEST(test_forget_all_frees_idle_blocks_and_restamps),
    RS_TEST(test_hashes_separate_order_parent_and_content),
    RS_TEST(test_random_operations_keep_the_invariants),
};
RS_TEST_MAIN(cases)

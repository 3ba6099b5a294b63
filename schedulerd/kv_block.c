/* SPDX-License-Identifier: MIT */
/*
 * The KV block pool and the prefix cache: refcounts per block, a free stack,
 * an intrusive LRU list of unreferenced blocks that still hold a cached full
 * block's K/V, and a hash map from a block's chained hash to the block. The
 * cache entries themselves live in shared memory (kv_meta) so they survive a
 * schedulerd restart; everything here is rebuilt from them. Hits are verified
 * by a second hash of the block's own tokens and by the parent block, so a
 * false hit needs two independent 64-bit collisions. Leaves out the running
 * tables (request.c writes them) and who may allocate (plan.c).
 */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "ipc/failpoint.h"
#include "ipc/pipeline_kv.h"
#include "schedulerd/sched.h"

#define META_VALID 1ull

static uint64_t meta_word(uint32_t inc)
{
    return (uint64_t)inc << 32 | META_VALID;
}

rs_err kv_block_init(struct kv_block_pool *kv, struct rs_pipe_kvmeta *meta, uint32_t n_blocks,
                     uint32_t block_size)
{
    memset(kv, 0, sizeof(*kv));
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->meta = meta;
    uint32_t cap = 2;
    while (cap < 2 * (uint64_t)n_blocks)
        cap *= 2;
    kv->map_mask = cap - 1;
    kv->ref = calloc(n_blocks, sizeof(uint32_t));
    kv->cached = calloc(n_blocks, 1);
    kv->prev = malloc(n_blocks * sizeof(uint32_t));
    kv->next = malloc(n_blocks * sizeof(uint32_t));
    kv->free_stack = malloc(n_blocks * sizeof(uint32_t));
    kv->map_key = calloc(cap, sizeof(uint64_t));
    kv->map_val = malloc(cap * sizeof(uint32_t));
    if (!kv->ref || !kv->cached || !kv->prev || !kv->next || !kv->free_stack || !kv->map_key ||
        !kv->map_val) {
        rs_log_error("KV block pool of %u blocks: out of memory", n_blocks);
        kv_block_fini(kv);
        return RS_ENOMEM;
    }
    memset(kv->map_val, 0xff, cap * sizeof(uint32_t));
    kv->lru_head = kv->lru_tail = SCHED_NONE;
    for (uint32_t b = 0; b < n_blocks; b++)
        kv->free_stack[b] = n_blocks - 1 - b; /* block 0 is popped first */
    kv->n_free = n_blocks;
    return RS_OK;
}

void kv_block_fini(struct kv_block_pool *kv)
{
    free(kv->ref);
    free(kv->cached);
    free(kv->prev);
    free(kv->next);
    free(kv->free_stack);
    free(kv->map_key);
    free(kv->map_val);
    memset(kv, 0, sizeof(*kv));
}

/* --- hashing ------------------------------------------------------------------------------- */

/* 64x64 -> 128 multiply folded to 64 bits: the mixing step of wyhash-style hashes. */
static inline uint64_t mum(uint64_t a, uint64_t b)
{
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)(r >> 64) ^ (uint64_t)r;
}

static uint64_t hash_words(uint64_t h, const uint64_t k[4], const int32_t *tok, uint32_t n)
{
    uint32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint64_t a = (uint32_t)tok[i] | (uint64_t)(uint32_t)tok[i + 1] << 32;
        uint64_t b = (uint32_t)tok[i + 2] | (uint64_t)(uint32_t)tok[i + 3] << 32;
        h = mum(a ^ k[0] ^ h, b ^ k[1]);
    }
    for (; i < n; i++)
        h = mum((uint32_t)tok[i] ^ k[2] ^ h, k[1]);
    return mum(h ^ k[3], (uint64_t)n ^ k[0]);
}

static const uint64_t chain_k[4] = {0xa0761d6478bd642full, 0xe7037ed1a0b428dbull,
                                    0x8ebc6af09c88c6e3ull, 0x589965cc75374cc3ull};
static const uint64_t tok_k[4] = {0x1d8e4e27c47d124full, 0x9e3779b97f4a7c15ull,
                                  0xc2b2ae3d27d4eb4full, 0x165667b19e3779f9ull};

uint64_t kv_block_hash_chain(uint64_t parent_hash, const int32_t *tok, uint32_t n)
{
    return hash_words(mum(parent_hash ^ chain_k[2], chain_k[3]), chain_k, tok, n);
}

uint64_t kv_block_hash_tokens(const int32_t *tok, uint32_t n)
{
    return hash_words(tok_k[3], tok_k, tok, n);
}

/* --- the map: hash -> block ---------------------------------------------------------------- */

static uint32_t map_slot(const struct kv_block_pool *kv, uint64_t key)
{
    return (uint32_t)(key ^ key >> 29) & kv->map_mask;
}

static uint32_t map_find(const struct kv_block_pool *kv, uint64_t key)
{
    for (uint32_t i = map_slot(kv, key);; i = (i + 1) & kv->map_mask) {
        if (kv->map_val[i] == SCHED_NONE)
            return SCHED_NONE;
        if (kv->map_key[i] == key)
            return i;
    }
}

static void map_put(struct kv_block_pool *kv, uint64_t key, uint32_t b)
{
    uint32_t i = map_slot(kv, key);
    while (kv->map_val[i] != SCHED_NONE)
        i = (i + 1) & kv->map_mask;
    kv->map_key[i] = key;
    kv->map_val[i] = b;
}

/* Linear-probing deletion by backward shift: no tombstones, probes stay short. */
static void map_del_at(struct kv_block_pool *kv, uint32_t i)
{
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & kv->map_mask;
        if (kv->map_val[j] == SCHED_NONE)
            break;
        uint32_t home = map_slot(kv, kv->map_key[j]);
        /* entry j may move to i when its home is not cyclically within (i, j] */
        int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays)
            continue;
        kv->map_key[i] = kv->map_key[j];
        kv->map_val[i] = kv->map_val[j];
        i = j;
    }
    kv->map_val[i] = SCHED_NONE;
    kv->map_key[i] = 0;
}

/* --- lists --------------------------------------------------------------------------------- */

static void lru_unlink(struct kv_block_pool *kv, uint32_t b)
{
    uint32_t p = kv->prev[b], n = kv->next[b];
    if (p != SCHED_NONE)
        kv->next[p] = n;
    else
        kv->lru_head = n;
    if (n != SCHED_NONE)
        kv->prev[n] = p;
    else
        kv->lru_tail = p;
    kv->n_idle--;
}

static void lru_append(struct kv_block_pool *kv, uint32_t b)
{
    kv->prev[b] = kv->lru_tail;
    kv->next[b] = SCHED_NONE;
    if (kv->lru_tail != SCHED_NONE)
        kv->next[kv->lru_tail] = b;
    else
        kv->lru_head = b;
    kv->lru_tail = b;
    kv->n_idle++;
}

/* Drops b from the cache: the valid word first, so kv_meta never names a block we reuse. */
static void uncache(struct kv_block_pool *kv, uint32_t b)
{
    atomic_store_explicit(&kv->meta[b].word, 0, memory_order_release);
    uint32_t i = map_find(kv, atomic_load_explicit(&kv->meta[b].hash, memory_order_relaxed));
    if (i != SCHED_NONE && kv->map_val[i] == b)
        map_del_at(kv, i);
    kv->cached[b] = 0;
}

uint32_t kv_block_alloc(struct kv_block_pool *kv)
{
    uint32_t b;
    if (kv->n_free > 0) {
        b = kv->free_stack[--kv->n_free];
    } else if (kv->lru_head != SCHED_NONE) {
        b = kv->lru_head;
        lru_unlink(kv, b);
        uncache(kv, b);
        kv->evictions++;
    } else {
        return SCHED_NONE;
    }
    kv->ref[b] = 1;
    kv->n_used++;
    return b;
}

void kv_block_hold(struct kv_block_pool *kv, uint32_t b)
{
    if (kv->ref[b]++ == 0) {
        lru_unlink(kv, b);
        kv->n_used++;
    }
}

void kv_block_release(struct kv_block_pool *kv, uint32_t b)
{
    if (kv->ref[b] == 0) {
        rs_log_error("KV block %u released with no reference (ignored)", b);
        return;
    }
    if (--kv->ref[b] > 0)
        return;
    kv->n_used--;
    if (kv->cached[b])
        lru_append(kv, b);
    else
        kv->free_stack[kv->n_free++] = b;
}

uint32_t kv_block_lookup(const struct kv_block_pool *kv, uint64_t hash, uint64_t tok_hash,
                         uint32_t parent)
{
    uint32_t i = map_find(kv, hash);
    if (i == SCHED_NONE)
        return SCHED_NONE;
    uint32_t b = kv->map_val[i];
    const struct rs_pipe_kvmeta *m = &kv->meta[b];
    if (m->tok_hash != tok_hash || m->parent != parent)
        return SCHED_NONE;
    return b;
}

uint32_t kv_block_register(struct kv_block_pool *kv, uint32_t b, uint64_t hash,
                           uint64_t tok_hash, uint32_t parent)
{
    if (kv->cached[b])
        return b; /* registered before (a redone result, a rebuild) */
    uint32_t i = map_find(kv, hash);
    if (i != SCHED_NONE) {
        uint32_t o = kv->map_val[i];
        const struct rs_pipe_kvmeta *m = &kv->meta[o];
        if (m->tok_hash == tok_hash && m->parent == parent)
            return o; /* the same block is cached already: b stays private */
        /* same hash, other content (or an orphan whose parent was reused): replace it */
        uncache(kv, o);
        if (kv->ref[o] == 0) {
            lru_unlink(kv, o);
            kv->free_stack[kv->n_free++] = o;
        }
    }
    struct rs_pipe_kvmeta *m = &kv->meta[b];
    atomic_store_explicit(&m->word, 0, memory_order_relaxed);
    atomic_store_explicit(&m->hash, hash, memory_order_relaxed);
    m->tok_hash = tok_hash;
    m->parent = parent;
    RS_FAILPOINT("sched.kv.register");
    /* P: a reader (our rebuild) acquiring a valid word sees the payload above. */
    atomic_store_explicit(&m->word, meta_word(kv->inc), memory_order_release);
    map_put(kv, hash, b);
    kv->cached[b] = 1;
    return b;
}

void kv_block_forget_all(struct kv_block_pool *kv, uint32_t inc)
{
    for (uint32_t b = 0; b < kv->n_blocks; b++) {
        if (!kv->cached[b])
            continue;
        atomic_store_explicit(&kv->meta[b].word, 0, memory_order_release);
        kv->cached[b] = 0;
        if (kv->ref[b] == 0) {
            lru_unlink(kv, b);
            kv->free_stack[kv->n_free++] = b;
        }
    }
    memset(kv->map_val, 0xff, ((uint64_t)kv->map_mask + 1) * sizeof(uint32_t));
    kv->inc = inc;
}

void kv_block_rebuild(struct kv_block_pool *kv, uint32_t inc, const uint32_t *ref)
{
    kv->inc = inc;
    kv->n_free = kv->n_idle = kv->n_used = 0;
    kv->lru_head = kv->lru_tail = SCHED_NONE;
    memset(kv->map_val, 0xff, ((uint64_t)kv->map_mask + 1) * sizeof(uint32_t));
    for (uint32_t b = kv->n_blocks; b-- > 0;) {
        struct rs_pipe_kvmeta *m = &kv->meta[b];
        kv->ref[b] = ref[b];
        kv->cached[b] = 0;
        uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
        uint64_t h = atomic_load_explicit(&m->hash, memory_order_relaxed);
        int valid = w == meta_word(inc) && inc != 0 && (m->parent == SCHED_NONE ||
                                                        m->parent < kv->n_blocks);
        if (valid && map_find(kv, h) == SCHED_NONE) {
            map_put(kv, h, b);
            kv->cached[b] = 1;
        } else if (w != 0) {
            atomic_store_explicit(&m->word, 0, memory_order_release);
        }
        if (ref[b] > 0)
            kv->n_used++;
        else if (kv->cached[b])
            lru_append(kv, b); /* the order of last use is not kept across restarts */
        else
            kv->free_stack[kv->n_free++] = b;
    }
}

rs_err kv_block_check(const struct kv_block_pool *kv)
{
    uint32_t n_idle = 0, n_used = 0, prev = SCHED_NONE;
    for (uint32_t b = kv->lru_head; b != SCHED_NONE; prev = b, b = kv->next[b]) {
        if (b >= kv->n_blocks || kv->prev[b] != prev || kv->ref[b] != 0 || !kv->cached[b] ||
            ++n_idle > kv->n_idle) {
            rs_log_error("KV pool: LRU list broken at block %u", b);
            return RS_EMISMATCH;
        }
    }
    if (n_idle != kv->n_idle || kv->lru_tail != prev) {
        rs_log_error("KV pool: %u idle blocks listed, %u counted", n_idle, kv->n_idle);
        return RS_EMISMATCH;
    }
    uint8_t *seen = calloc(kv->n_blocks ? kv->n_blocks : 1, 1);
    rs_err rc = seen ? RS_OK : RS_ENOMEM;
    for (uint32_t i = 0; rc == RS_OK && i < kv->n_free; i++) {
        uint32_t b = kv->free_stack[i];
        if (b >= kv->n_blocks || seen[b]++ || kv->ref[b] || kv->cached[b]) {
            rs_log_error("KV pool: free stack entry %u (block %u) is wrong", i, b);
            rc = RS_EMISMATCH;
        }
    }
    uint32_t n_cached = 0;
    for (uint32_t b = 0; rc == RS_OK && b < kv->n_blocks; b++) {
        n_used += kv->ref[b] > 0;
        uint64_t w = atomic_load_explicit(&kv->meta[b].word, memory_order_acquire);
        uint64_t h = atomic_load_explicit(&kv->meta[b].hash, memory_order_relaxed);
        uint32_t i = kv->cached[b] ? map_find(kv, h) : SCHED_NONE;
        if ((w == meta_word(kv->inc)) != (kv->cached[b] != 0) ||
            (kv->cached[b] && (i == SCHED_NONE || kv->map_val[i] != b))) {
            rs_log_error("KV pool: block %u cached %u but kv_meta/map disagree", b, kv->cached[b]);
            rc = RS_EMISMATCH;
        }
        n_cached += kv->cached[b];
    }
    uint32_t n_map = 0;
    for (uint32_t i = 0; i <= kv->map_mask; i++)
        n_map += kv->map_val[i] != SCHED_NONE;
    if (rc == RS_OK && (n_used != kv->n_used || n_map != n_cached ||
                        kv->n_used + kv->n_idle + kv->n_free != kv->n_blocks)) {
        rs_log_error("KV pool: used %u/%u, map %u vs cached %u, %u+%u+%u != %u blocks", n_used,
                     kv->n_used, n_map, n_cached, kv->n_used, kv->n_idle, kv->n_free,
                     kv->n_blocks);
        rc = RS_EMISMATCH;
    }
    free(seen);
    return rc;
}

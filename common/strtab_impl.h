/* SPDX-License-Identifier: MIT */
/*
 * Open-addressing hash tables used inside common/ by the vocab and the
 * tokenizers: byte string -> token id (the strings live in a caller-owned
 * arena, the table stores offsets), and token pair -> (merge rank, result id).
 * Built once at vocab load, then read-only and shareable by threads.
 * Leaves out deletion and resizing after build: sizes are known up front.
 */
#ifndef RS_STRTAB_IMPL_H
#define RS_STRTAB_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/err.h"

/* 64-bit hash of n bytes (not cryptographic; vocab text is not adversarial to the table size). */
static inline uint64_t strtab_hash(const void *p, size_t n)
{
    const uint8_t *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ ((uint64_t)n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    if (n > 0) {
        uint64_t v = 0;
        memcpy(&v, s, n);
        h = (h ^ v) * 0x94D049BB133111EBull;
        h ^= h >> 32;
    }
    h *= 0xD6E8FEB86659FD93ull;
    return h ^ (h >> 32);
}

struct strtab_slot {
    uint32_t hash; /* low 32 bits of strtab_hash */
    int32_t id;    /* -1: empty */
};

struct strtab {
    struct strtab_slot *slots;
    uint32_t mask;            /* capacity - 1 (capacity a power of two) */
    const char *const *arena; /* borrowed: string id is (*arena)[off[id] .. off[id] + len[id]);
                                 read through the pointer so the arena may grow while building */
    const uint32_t *off;      /* borrowed, indexed by id */
    const uint32_t *len;      /* borrowed, indexed by id */
};

/* Sizes the table for n_max entries over the given arrays (borrowed until strtab_free). */
rs_err strtab_init(struct strtab *t, size_t n_max, const char *const *arena, const uint32_t *off,
                   const uint32_t *len);
void strtab_free(struct strtab *t);

/* Adds id (its string from the arrays). Returns the id already holding that string, or id. */
int32_t strtab_add(struct strtab *t, int32_t id);

/* Id whose string equals s[0..n), or -1. */
static inline int32_t strtab_find(const struct strtab *t, const char *s, size_t n)
{
    uint64_t h64 = strtab_hash(s, n);
    uint32_t h = (uint32_t)h64;
    for (uint32_t i = (uint32_t)(h64 >> 32) & t->mask;; i = (i + 1) & t->mask) {
        const struct strtab_slot *sl = &t->slots[i];
        if (sl->id < 0)
            return -1;
        if (sl->hash == h && t->len[sl->id] == n && memcmp(*t->arena + t->off[sl->id], s, n) == 0)
            return sl->id;
    }
}

struct pairtab_slot {
    uint64_t key;   /* (left id << 32) | right id; UINT64_MAX: empty */
    int32_t rank;   /* merge rank: lower merges first */
    int32_t result; /* id of the merged token */
};

struct pairtab {
    struct pairtab_slot *slots;
    uint32_t mask;
};

static inline uint64_t pairtab_key(int32_t left, int32_t right)
{
    return ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
}

rs_err pairtab_init(struct pairtab *t, size_t n_max);
void pairtab_free(struct pairtab *t);
/* Adds a pair unless present (the first, lowest rank wins). Returns 1 if added. */
int pairtab_add(struct pairtab *t, int32_t left, int32_t right, int32_t rank, int32_t result);

/* The slot of (left, right), or NULL. */
static inline const struct pairtab_slot *pairtab_find(const struct pairtab *t, int32_t left,
                                                      int32_t right)
{
    uint64_t key = pairtab_key(left, right);
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    for (uint32_t i = (uint32_t)(h >> 32) & t->mask;; i = (i + 1) & t->mask) {
        const struct pairtab_slot *sl = &t->slots[i];
        if (sl->key == key)
            return sl;
        if (sl->key == UINT64_MAX)
            return NULL;
    }
}

#endif

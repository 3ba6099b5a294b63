/* SPDX-License-Identifier: MIT */
/* Build side of the open-addressing tables in strtab_impl.h (load factor <= 1/2). */
#include "common/strtab_impl.h"

#include <stdlib.h>

static uint32_t capacity_for(size_t n_max)
{
    size_t cap = 16;
    while (cap < 2 * n_max)
        cap <<= 1;
    return (uint32_t)cap;
}

rs_err strtab_init(struct strtab *t, size_t n_max, const char *const *arena, const uint32_t *off,
                   const uint32_t *len)
{
    if (n_max > (1u << 28))
        return RS_ERANGE;
    uint32_t cap = capacity_for(n_max);
    t->slots = malloc(sizeof(*t->slots) * cap);
    if (t->slots == NULL)
        return RS_ENOMEM;
    for (uint32_t i = 0; i < cap; i++)
        t->slots[i] = (struct strtab_slot){0, -1};
    t->mask = cap - 1;
    t->arena = arena;
    t->off = off;
    t->len = len;
    return RS_OK;
}

void strtab_free(struct strtab *t)
{
    free(t->slots);
    t->slots = NULL;
}

int32_t strtab_add(struct strtab *t, int32_t id)
{
    const char *s = *t->arena + t->off[id];
    size_t n = t->len[id];
    uint64_t h64 = strtab_hash(s, n);
    uint32_t h = (uint32_t)h64;
    for (uint32_t i = (uint32_t)(h64 >> 32) & t->mask;; i = (i + 1) & t->mask) {
        struct strtab_slot *sl = &t->slots[i];
        if (sl->id < 0) {
            sl->hash = h;
            sl->id = id;
            return id;
        }
        if (sl->hash == h && t->len[sl->id] == n && memcmp(*t->arena + t->off[sl->id], s, n) == 0)
            return sl->id;
    }
}

rs_err pairtab_init(struct pairtab *t, size_t n_max)
{
    if (n_max > (1u << 28))
        return RS_ERANGE;
    uint32_t cap = capacity_for(n_max);
    t->slots = malloc(sizeof(*t->slots) * cap);
    if (t->slots == NULL)
        return RS_ENOMEM;
    for (uint32_t i = 0; i < cap; i++)
        t->slots[i] = (struct pairtab_slot){UINT64_MAX, 0, 0};
    t->mask = cap - 1;
    return RS_OK;
}

void pairtab_free(struct pairtab *t)
{
    free(t->slots);
    t->slots = NULL;
}

int pairtab_add(struct pairtab *t, int32_t left, int32_t right, int32_t rank, int32_t result)
{
    uint64_t key = pairtab_key(left, right);
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    for (uint32_t i = (uint32_t)(h >> 32) & t->mask;; i = (i + 1) & t->mask) {
        struct pairtab_slot *sl = &t->slots[i];
        if (sl->key == key)
            return 0;
        if (sl->key == UINT64_MAX) {
            *sl = (struct pairtab_slot){key, rank, result};
            return 1;
        }
    }
}

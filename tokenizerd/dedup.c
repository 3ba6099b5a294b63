/* SPDX-License-Identifier: MIT */
/*
 * The (transport, routing id, request id) index that makes intake idempotent
 * (DESIGN.md §3: a client resends an unacknowledged request after a
 * tokenizerd restart). Chained hashing with one entry per table record, so
 * it can never hold more than the table; rebuilt from the table at start.
 * Also the content hash that tells a resend from a different request under
 * the same id. Leaves out persistence: shared memory is the truth, this is a
 * cache of it.
 */
#include <stdlib.h>
#include <string.h>

#include "ipc/pipeline_req.h"
#include "tokenizerd/tokd.h"

#define NIL UINT32_MAX

struct dedup_entry {
    uint64_t key_hash;
    uint32_t gen;  /* generation of the record when it was indexed */
    uint32_t next; /* next record index in the bucket chain, NIL at the end */
    uint32_t bucket;
    uint8_t live;
};

struct dedup {
    uint32_t n_records, mask, count;
    uint32_t *head;           /* mask + 1 buckets: first record index or NIL */
    struct dedup_entry *e;    /* n_records entries, by record index */
};

/* Word-at-a-time multiply-xorshift hash; not adversarial-grade, which an index need not be. */
static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v;
    h *= 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

static uint64_t mix_bytes(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    h = mix(h, n);
    for (; n >= 8; n -= 8, b += 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        h = mix(h, w);
    }
    uint64_t w = 0;
    memcpy(&w, b, n);
    return mix(h, w);
}

static uint64_t mix_float(uint64_t h, float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return mix(h, u);
}

static uint64_t key_hash(const struct dedup_key *k)
{
    uint64_t h = mix(0x6a09e667f3bcc909ull, (uint64_t)(k->tcp != 0));
    h = mix_bytes(h, k->client, k->client_len);
    return mix_bytes(h, k->id, k->id_len);
}

rs_err dedup_create(uint32_t n_records, struct dedup **out)
{
    uint32_t buckets = 16;
    while (buckets < n_records * 2u && buckets < (1u << 30))
        buckets <<= 1;
    struct dedup *d = calloc(1, sizeof(*d));
    if (d != NULL) {
        d->head = malloc(sizeof(uint32_t) * buckets);
        d->e = calloc(n_records ? n_records : 1, sizeof(struct dedup_entry));
    }
    if (d == NULL || d->head == NULL || d->e == NULL) {
        dedup_destroy(&d);
        return RS_ENOMEM;
    }
    d->n_records = n_records;
    d->mask = buckets - 1;
    for (uint32_t i = 0; i < buckets; i++)
        d->head[i] = NIL;
    *out = d;
    return RS_OK;
}

void dedup_destroy(struct dedup **dp)
{
    if (dp == NULL || *dp == NULL)
        return;
    free((*dp)->head);
    free((*dp)->e);
    free(*dp);
    *dp = NULL;
}

uint32_t dedup_count(const struct dedup *d)
{
    return d->count;
}

/* Unlinks record index i from its bucket chain (chains are short: load factor <= 1/2). */
static void unlink_entry(struct dedup *d, uint32_t i)
{
    struct dedup_entry *e = &d->e[i];
    if (!e->live)
        return;
    uint32_t *link = &d->head[e->bucket];
    while (*link != NIL && *link != i)
        link = &d->e[*link].next;
    if (*link == i)
        *link = e->next;
    e->live = 0;
    d->count--;
}

void dedup_insert(struct dedup *d, const struct dedup_key *key, struct rs_table_ref ref)
{
    if (ref.index >= d->n_records)
        return;
    unlink_entry(d, ref.index);
    struct dedup_entry *e = &d->e[ref.index];
    e->key_hash = key_hash(key);
    e->gen = ref.gen;
    e->bucket = (uint32_t)e->key_hash & d->mask;
    e->next = d->head[e->bucket];
    e->live = 1;
    d->head[e->bucket] = ref.index;
    d->count++;
}

void dedup_key_of(const struct rs_pipe_req *r, struct dedup_key *key)
{
    key->tcp = (r->flags & RS_PIPE_F_TCP) != 0;
    key->client = r->client;
    key->client_len = r->client_len <= RS_PIPE_CLIENT_MAX ? r->client_len : RS_PIPE_CLIENT_MAX;
    key->id = r->id;
    key->id_len = (uint32_t)strnlen(r->id, sizeof(r->id));
}

static int key_equal(const struct dedup_key *a, const struct dedup_key *b)
{
    return a->tcp == b->tcp && a->client_len == b->client_len && a->id_len == b->id_len &&
           memcmp(a->client, b->client, a->client_len) == 0 && memcmp(a->id, b->id, a->id_len) == 0;
}

/* 1 when record i still holds the use it was indexed with and is published. */
static int entry_current(const struct dedup *d, const rs_table *t, uint32_t i)
{
    uint32_t state, gen, owner;
    rs_table_peek(t, i, &state, &gen, &owner);
    return gen == d->e[i].gen && state >= RS_TABLE_USER;
}

int dedup_find(struct dedup *d, const rs_table *t, const struct dedup_key *key,
               struct rs_table_ref *ref)
{
    uint64_t h = key_hash(key);
    uint32_t i = d->head[(uint32_t)h & d->mask];
    while (i != NIL) {
        uint32_t next = d->e[i].next;
        if (!entry_current(d, t, i)) {
            unlink_entry(d, i); /* freed by postprocd since: drop it now */
        } else if (d->e[i].key_hash == h) {
            struct dedup_key stored;
            dedup_key_of(rs_table_record(t, i), &stored);
            if (key_equal(&stored, key)) {
                ref->index = i;
                ref->gen = d->e[i].gen;
                return 1;
            }
        }
        i = next;
    }
    return 0;
}

uint32_t dedup_rebuild(struct dedup *d, const rs_table *t)
{
    uint32_t cursor = 0, state;
    struct rs_table_ref ref;
    uint64_t published = ~((1ull << RS_TABLE_USER) - 1); /* every user state */
    while (rs_table_next(t, &cursor, published, &ref, &state) == RS_OK) {
        struct dedup_key key;
        dedup_key_of(rs_table_record(t, ref.index), &key);
        dedup_insert(d, &key, ref);
    }
    return d->count;
}

uint64_t dedup_content_hash(const struct rs_wire_generate *g, const int32_t *ids, uint32_t n_ids)
{
    uint64_t h = mix(0xbb67ae8584caa73bull, g->has);
    if (g->has & RS_WIRE_GEN_PROMPT)
        h = mix_bytes(h, g->prompt.ptr, g->prompt.len);
    else
        h = mix_bytes(h, ids, (size_t)n_ids * sizeof(int32_t));
    /* A conversation is its packed bytes: the same client resending packs them the same. */
    const struct rs_wire_doc *docs[] = {&g->messages, &g->tools, &g->template_kwargs};
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++)
        h = docs[i]->len > 0 ? mix_bytes(h, docs[i]->packed, docs[i]->len) : mix(h, 0);
    h = mix(h, g->add_generation_prompt);
    h = mix(h, g->max_tokens);
    h = mix_float(h, g->temperature);
    h = mix_float(h, g->top_p);
    h = mix(h, (uint32_t)g->top_k);
    h = mix_float(h, g->min_p);
    h = mix_float(h, g->repetition_penalty);
    h = mix_float(h, g->presence_penalty);
    h = mix_float(h, g->frequency_penalty);
    h = mix(h, g->seed);
    for (uint32_t i = 0; i < g->n_stop && i < RS_WIRE_STOP_MAX; i++)
        h = mix_bytes(h, g->stop[i].ptr, g->stop[i].len);
    h = mix_bytes(h, g->stop_ids, (size_t)g->n_stop_ids * sizeof(uint32_t));
    h = mix(h, (uint64_t)g->ignore_eos << 1 | (uint64_t)g->stream);
    h = mix(h, g->logprobs);
    h = mix(h, (uint32_t)g->priority);
    return rs_wire_constraint_hash(&g->cx, h);
}

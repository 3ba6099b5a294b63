/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target over rs_model_step's validation and the CPU forward pass:
 * a batch as the batch ring could hand it over (any token ids, positions,
 * block tables, slot collisions) against the real stories260K model and an
 * 8-block x 4-token cache. Checks: nothing reads or writes out of bounds (the
 * sanitizers), a refused batch leaves no logits, an accepted one gives finite
 * logits to every sequence that asked. Input, per sequence while bytes last:
 * n_tokens & 7, pos0 (2 bytes, little-endian; high byte 0xFF means UINT32_MAX
 * minus the low byte), flags (n_blocks = & 15, want_logits = bit 7), then
 * n_blocks table bytes and n_tokens little-endian int16 token ids.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "launcherd/engine/model.h"

#define MAX_SEQS 4

static rs_model *model;
static rs_kvcache *cache;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_model_step: %s\n", what);
        __builtin_trap();
    }
}

static void init(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    rs_log_set_level((enum rs_log_level)(RS_LOG_ERROR + 1)); /* refusals are the point */
    const char *root = getenv("RS_REFDATA");
    char path[1024], err[256];
    snprintf(path, sizeof(path), "%s/stories260K.gguf",
             root && *root ? root : RS_SOURCE_DIR "/../shared/refdata");
    struct rs_model_opts o;
    rs_model_opts_default(&o);
    o.n_threads = 1;
    o.max_batch_tokens = 24;
    if (rs_model_load(path, &o, &model, err, sizeof(err)) != RS_OK ||
        rs_kvcache_create(model, 8, 4, &cache) != RS_OK)
        fprintf(stderr, "fuzz_model_step: %s unavailable (%s)\n", path, err);
}

struct batch {
    struct rs_model_seq s[MAX_SEQS];
    uint32_t tables[MAX_SEQS][16];
    int32_t tokens[MAX_SEQS][8];
    uint32_t n;
};

/* Reads one sequence at d[*p..); 0 when the input has no room for its header. */
static int parse_seq(const uint8_t *d, size_t size, size_t *p, struct batch *b)
{
    if (size - *p < 4)
        return 0;
    uint32_t i = b->n, nt = d[*p] & 7, lo = d[*p + 1], hi = d[*p + 2], fl = d[*p + 3];
    *p += 4;
    uint32_t pos0 = hi == 0xFF ? UINT32_MAX - lo : lo | hi << 8, nb = fl & 15;
    for (uint32_t k = 0; k < nb; k++)
        b->tables[i][k] = *p < size ? d[(*p)++] : 0;
    uint32_t got = 0;
    for (; got < nt && size - *p >= 2; got++, *p += 2)
        b->tokens[i][got] = (int16_t)(d[*p] | d[*p + 1] << 8);
    b->s[i] = (struct rs_model_seq){b->tokens[i], got, pos0, b->tables[i], nb, fl >> 7};
    b->n++;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init();
    if (model == NULL)
        return 0;
    struct batch b;
    memset(&b, 0, sizeof(b));
    size_t p = 0;
    while (b.n < MAX_SEQS && parse_seq(data, size, &p, &b))
        ;
    rs_err rc = rs_model_step(model, cache, b.s, b.n);
    if (rc != RS_OK) {
        check(rc == RS_EINVAL || rc == RS_ERANGE, "unexpected error code");
        check(rs_model_logits(model, 0) == NULL, "logits after a refused step");
        return 0;
    }
    uint32_t vocab = rs_model_hparams(model)->n_vocab;
    for (uint32_t i = 0; i < b.n; i++) {
        const float *l = rs_model_logits(model, i);
        check((l != NULL) == (b.s[i].want_logits != 0), "logits presence");
        for (uint32_t v = 0; l != NULL && v < vocab; v++)
            check(isfinite(l[v]), "non-finite logit");
    }
    return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * Functions shared by the engine's unit tests (header-only, static): make a
 * random model with the real ringserve-mkmodel tool, and write an edited
 * copy of a GGUF (a tensor dropped, reshaped, retyped or rescaled; metadata
 * changed) to produce malformed or differently configured models from a
 * valid one (or one tensor duplicated under a new name). Not a model writer
 * of its own: the tensors are mkmodel's.
 */
#ifndef RS_ENGINE_TESTUTIL_H
#define RS_ENGINE_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/gguf.h"
#include "common/quant.h"
#include "tests/rs_test.h"

/* Runs ringserve-mkmodel -o <tmp>/<name>.gguf <args>; returns path, or NULL (message printed). */
static inline const char *tu_mkmodel(const char *name, const char *args, char *path, size_t len)
{
    snprintf(path, len, "%s/%s.gguf", rs_test_tmpdir(), name);
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "'%s/ringserve-mkmodel' -o '%s' %s >/dev/null 2>&1",
             rs_test_bindir(), path, args);
    int rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
        fprintf(stderr, "mkmodel failed: %s\n", cmd);
        return NULL;
    }
    return path;
}

/* --- Q4_0 / Q4_K / Q5_K / Q6_K test blocks ---------------------------------------------- */

static inline uint64_t tu_rand(uint64_t *st)
{
    *st ^= *st << 13, *st ^= *st >> 7, *st ^= *st << 17;
    return *st;
}

static inline void tu_put_f16(uint8_t *p, float v)
{
    uint16_t h = rs_quant_f16_from_f32(v);
    memcpy(p, &h, 2);
}

/*
 * n_blocks random blocks of `type` (Q4_0, Q4_K, Q5_K or Q6_K) at dst: random quants and
 * scales, and finite f16 super-scales sized so the weights are about +-0.02 to 0.1.
 */
static inline void tu_random_blocks(enum rs_ggml_type type, uint8_t *dst, size_t n_blocks,
                                    uint64_t *st)
{
    size_t bytes = rs_ggml_type_size(type);
    for (size_t b = 0; b < n_blocks; b++, dst += bytes) {
        for (size_t i = 0; i < bytes; i++)
            dst[i] = (uint8_t)tu_rand(st);
        float u = (float)(tu_rand(st) % 1000) / 1000.0f + 0.5f;
        if (type == RS_GGML_Q4_0)
            tu_put_f16(dst, 0.012f * u);
        else if (type == RS_GGML_Q4_K || type == RS_GGML_Q5_K) {
            float q5 = type == RS_GGML_Q5_K ? 0.5f : 1.0f; /* 5-bit quants: twice the range */
            tu_put_f16(dst, 1.2e-4f * u * q5);
            tu_put_f16(dst + 2, 1.0e-4f * u);
        } else
            tu_put_f16(dst + 208, 2.5e-5f * u);
    }
}

static inline float tu_f16_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return rs_quant_f16_to_f32(h);
}

/* Element i (0..255) of a Q4_K block, from the layout written out per element. */
static inline float tu_q4k_value(const uint8_t *b, int i)
{
    const uint8_t *s = b + 4;
    int sub = i / 32, byte = b[16 + 32 * (i / 64) + i % 32];
    int q = (i % 64) < 32 ? byte & 15 : byte >> 4, sc, m;
    if (sub < 4)
        sc = s[sub] & 63, m = s[sub + 4] & 63;
    else
        sc = (s[sub + 4] & 15) | ((s[sub - 4] >> 6) << 4), m = (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
    /* The products are exact in double and in float; one rounding of the difference. */
    return (float)((double)tu_f16_at(b) * sc * q - (double)tu_f16_at(b + 2) * m);
}

/* Element i (0..255) of a Q5_K block: Q4_K's scales, a 5th bit per value from qh. */
static inline float tu_q5k_value(const uint8_t *b, int i)
{
    const uint8_t *s = b + 4;
    int sub = i / 32, byte = b[48 + 32 * (i / 64) + i % 32], high = b[16 + i % 32];
    int q = ((i % 64) < 32 ? byte & 15 : byte >> 4) + 16 * ((high >> sub) & 1), sc, m;
    if (sub < 4)
        sc = s[sub] & 63, m = s[sub + 4] & 63;
    else
        sc = (s[sub + 4] & 15) | ((s[sub - 4] >> 6) << 4), m = (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
    return (float)((double)tu_f16_at(b) * sc * q - (double)tu_f16_at(b + 2) * m);
}

/* Element i (0..255) of a Q6_K block. */
static inline float tu_q6k_value(const uint8_t *b, int i)
{
    int half = i / 128, r = i % 128, grp = r / 32, l = r % 32;
    int lo = b[64 * half + l + (grp & 1) * 32];
    lo = grp < 2 ? lo & 15 : lo >> 4;
    int hi = (b[128 + 32 * half + l] >> (2 * grp)) & 3;
    int sc = (int8_t)b[192 + 8 * half + l / 16 + 2 * grp];
    return (float)((double)tu_f16_at(b + 208) * sc * ((lo | hi << 4) - 32));
}

/* Dequantizes n values of any type the engine takes into dst (test reference). */
static inline void tu_dequant_row(enum rs_ggml_type type, const uint8_t *src, float *dst,
                                  size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (type == RS_GGML_Q4_0) {
            const uint8_t *b = src + i / 32 * 18;
            int j = (int)(i % 32), q = j < 16 ? b[2 + j] & 15 : b[2 + j - 16] >> 4;
            dst[i] = tu_f16_at(b) * (float)(q - 8);
        } else if (type == RS_GGML_Q4_K) {
            dst[i] = tu_q4k_value(src + i / 256 * 144, (int)(i % 256));
        } else if (type == RS_GGML_Q5_K) {
            dst[i] = tu_q5k_value(src + i / 256 * 176, (int)(i % 256));
        } else if (type == RS_GGML_Q6_K) {
            dst[i] = tu_q6k_value(src + i / 256 * 210, (int)(i % 256));
        } else {
            rs_quant_row_to_f32(type, src, dst, n);
            return;
        }
    }
}

/* One edit of tu_rewrite; unused fields zero. */
struct tu_edit {
    const char *drop_tensor;  /* leave this tensor out */
    const char *drop_key;     /* leave this metadata key out */
    const char *shape_tensor; /* give this tensor shape [ne0, ne1] (zero data) */
    uint64_t ne0, ne1;
    const char *type_tensor;  /* store this tensor as `type` (zero data) */
    enum rs_ggml_type type;
    const char *scale_prefix; /* multiply every F32 tensor whose name starts so by `scale` */
    float scale;
    /* Per 2-D tensor name: a block type to replace it with random blocks, or RS_GGML_F32 to keep. */
    enum rs_ggml_type (*randomize)(const char *name);
    void (*set)(rs_gguf_writer *w); /* extra metadata, written after the copied keys */
    const char *dup_tensor;   /* also write a copy of this tensor ... */
    const char *dup_name;     /* ... under this name (a tensor the file did not have) */
};

/* Copies src to dst with the edit applied. Returns 0 or 1 (message printed). */
static inline int tu_rewrite(const char *src, const char *dst, const struct tu_edit *e)
{
    char err[256];
    rs_gguf *g;
    rs_gguf_writer *w;
    if (rs_gguf_open(src, &g, err, sizeof(err)) != RS_OK || rs_gguf_writer_create(&w) != RS_OK) {
        fprintf(stderr, "rewrite %s: %s\n", src, err);
        return 1;
    }
    for (uint64_t i = 0; i < rs_gguf_n_kv(g); i++) {
        struct rs_gguf_str k = rs_gguf_kv_key(g, i);
        if (e->drop_key != NULL && k.len == strlen(e->drop_key) &&
            memcmp(k.ptr, e->drop_key, k.len) == 0)
            continue;
        rs_gguf_writer_copy_kv(w, g, i);
    }
    if (e->set != NULL)
        e->set(w);
    void *owned[4096];
    size_t n_owned = 0;
    int rc = 0;
    for (uint64_t i = 0; i < rs_gguf_n_tensors(g) && rc == 0; i++) {
        const struct rs_gguf_tensor *t = rs_gguf_tensor(g, i);
        uint64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        enum rs_ggml_type type = t->type;
        const void *data = t->data;
        if (e->drop_tensor != NULL && strcmp(t->name, e->drop_tensor) == 0)
            continue;
        if (e->shape_tensor != NULL && strcmp(t->name, e->shape_tensor) == 0)
            ne[0] = e->ne0, ne[1] = e->ne1, data = NULL;
        if (e->type_tensor != NULL && strcmp(t->name, e->type_tensor) == 0)
            type = e->type, data = NULL;
        enum rs_ggml_type rnd = e->randomize != NULL && ne[1] > 1 ? e->randomize(t->name)
                                                                  : RS_GGML_F32;
        size_t bytes = (size_t)rs_ggml_row_bytes(rnd != RS_GGML_F32 ? rnd : type, ne[0]) * ne[1] *
                       ne[2] * ne[3];
        if (rnd != RS_GGML_F32) {
            uint64_t st = 0x51ed2701u + i;
            uint8_t *buf = malloc(bytes);
            tu_random_blocks(rnd, buf, bytes / rs_ggml_type_size(rnd), &st);
            type = rnd;
            data = owned[n_owned++] = buf;
        }
        if (data == NULL || (e->scale_prefix != NULL && type == RS_GGML_F32 &&
                             strncmp(t->name, e->scale_prefix, strlen(e->scale_prefix)) == 0)) {
            void *buf = calloc(1, bytes ? bytes : 1);
            if (data != NULL) {
                memcpy(buf, data, bytes);
                for (size_t j = 0; j < bytes / 4; j++)
                    ((float *)buf)[j] *= e->scale;
            }
            data = owned[n_owned++] = buf;
        }
        if (rs_gguf_writer_add_tensor(w, t->name, type, t->n_dims < 2 && ne[1] == 1 ? 1 : 2, ne,
                                      data) != RS_OK)
            rc = 1;
    }
    int64_t di = e->dup_tensor != NULL ? rs_gguf_find_tensor(g, e->dup_tensor) : -1;
    if (rc == 0 && di >= 0) {
        const struct rs_gguf_tensor *t = rs_gguf_tensor(g, (uint64_t)di);
        uint64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (rs_gguf_writer_add_tensor(w, e->dup_name, t->type, t->n_dims, ne, t->data) != RS_OK)
            rc = 1;
    }
    if (rc == 0 && rs_gguf_writer_write(w, dst) != RS_OK)
        rc = 1;
    for (size_t i = 0; i < n_owned; i++)
        free(owned[i]);
    rs_gguf_writer_destroy(&w);
    rs_gguf_close(&g);
    if (rc != 0)
        fprintf(stderr, "rewrite %s -> %s failed\n", src, dst);
    return rc;
}

#endif

/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the engine's unit tests (header-only, static): make a
 * random model with the real ringserve-mkmodel tool, and write an edited
 * copy of a GGUF (a tensor dropped, reshaped, retyped or rescaled; metadata
 * changed) to produce malformed or differently configured models from a
 * valid one. Not a model writer of its own: the tensors are mkmodel's.
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
    void (*set)(rs_gguf_writer *w); /* extra metadata, written after the copied keys */
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
        size_t bytes = (size_t)rs_ggml_row_bytes(type, ne[0]) * ne[1] * ne[2] * ne[3];
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

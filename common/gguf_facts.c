/* SPDX-License-Identifier: MIT */
/*
 * Reading a model file's pipeline facts (gguf_facts.h): realpath and stat for
 * the file's identity, then the GGUF reader for the vocabulary size and the
 * context length. The file is mapped only for the two lookups.
 */
#include "common/gguf_facts.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/gguf.h"

/* n_vocab and the trained context length from the model's metadata. */
static rs_err read_metadata(const char *path, uint32_t *n_vocab, uint32_t *ctx, char *err,
                            size_t err_len)
{
    rs_gguf *g;
    rs_err rc = rs_gguf_open(path, &g, err, err_len);
    if (rc != RS_OK)
        return rc;
    struct rs_gguf_str arch;
    char key[160];
    enum rs_gguf_type et;
    uint64_t n = 0;
    *ctx = 0;
    if (rs_gguf_get_str(g, "general.architecture", &arch) == RS_OK && arch.len < 64) {
        snprintf(key, sizeof(key), "%.*s.context_length", (int)arch.len, arch.ptr);
        if (rs_gguf_get_u32(g, key, ctx) != RS_OK)
            *ctx = 0;
    }
    if (rs_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n) != RS_OK || n == 0 ||
        n > INT32_MAX) {
        snprintf(err, err_len, "%s: no tokenizer.ggml.tokens vocabulary", path);
        rs_gguf_close(&g);
        return RS_EINVAL;
    }
    *n_vocab = (uint32_t)n;
    rs_gguf_close(&g);
    return RS_OK;
}

rs_err rs_gguf_facts_read(const char *path, struct rs_gguf_facts *out, char *err, size_t err_len)
{
    char abs[PATH_MAX];
    struct stat st;
    memset(out, 0, sizeof(*out));
    if (realpath(path, abs) == NULL || stat(abs, &st) != 0) {
        snprintf(err, err_len, "model %s: %s", path, strerror(errno));
        return RS_EIO;
    }
    if (strlen(abs) >= sizeof(out->path)) {
        snprintf(err, err_len, "model path %s is too long", abs);
        return RS_EINVAL;
    }
    snprintf(out->path, sizeof(out->path), "%s", abs);
    out->bytes = (uint64_t)st.st_size;
    return read_metadata(out->path, &out->n_vocab, &out->n_ctx_train, err, err_len);
}

/* SPDX-License-Identifier: MIT */
/*
 * GGUF v3 writer, for tests and tools (ringserve-mkmodel). Metadata values are
 * kept encoded exactly as they go to the file; tensor data is borrowed and
 * streamed out at write time, so writing a multi-GiB model needs no copy.
 */
#include "common/gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

struct writer_kv {
    char *key;
    uint32_t type;
    uint8_t *raw; /* encoded value */
    uint64_t raw_len;
};

struct writer_tensor {
    char name[RS_GGUF_MAX_NAME + 1];
    enum rs_ggml_type type;
    uint32_t n_dims;
    uint64_t ne[RS_GGUF_MAX_DIMS];
    const void *data;
    uint64_t nbytes, offset;
};

struct rs_gguf_writer {
    struct writer_kv *kv;
    size_t n_kv, cap_kv;
    struct writer_tensor *tensors;
    size_t n_tensors, cap_tensors;
};

rs_err rs_gguf_writer_create(rs_gguf_writer **out)
{
    *out = calloc(1, sizeof(**out));
    return *out ? RS_OK : RS_ENOMEM;
}

void rs_gguf_writer_destroy(rs_gguf_writer **wp)
{
    if (wp == NULL || *wp == NULL)
        return;
    rs_gguf_writer *w = *wp;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].raw);
    }
    free(w->kv);
    free(w->tensors);
    free(w);
    *wp = NULL;
}

/* Stores (key, type, raw) taking `raw`; replaces an existing key. */
static rs_err put_kv(rs_gguf_writer *w, const char *key, uint32_t type, uint8_t *raw, uint64_t len)
{
    if (raw == NULL)
        return RS_ENOMEM;
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) {
            free(w->kv[i].raw);
            w->kv[i].type = type;
            w->kv[i].raw = raw;
            w->kv[i].raw_len = len;
            return RS_OK;
        }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        struct writer_kv *kv = realloc(w->kv, cap * sizeof(*kv));
        if (kv == NULL) {
            free(raw);
            return RS_ENOMEM;
        }
        w->kv = kv;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (k == NULL) {
        free(raw);
        return RS_ENOMEM;
    }
    w->kv[w->n_kv++] = (struct writer_kv){k, type, raw, len};
    return RS_OK;
}

static rs_err put_scalar(rs_gguf_writer *w, const char *key, uint32_t type, const void *v, size_t n)
{
    uint8_t *raw = malloc(n);
    if (raw != NULL)
        memcpy(raw, v, n);
    return put_kv(w, key, type, raw, n);
}

rs_err rs_gguf_writer_set_u32(rs_gguf_writer *w, const char *key, uint32_t v)
{
    return put_scalar(w, key, RS_GGUF_U32, &v, 4);
}

rs_err rs_gguf_writer_set_i32(rs_gguf_writer *w, const char *key, int32_t v)
{
    return put_scalar(w, key, RS_GGUF_I32, &v, 4);
}

rs_err rs_gguf_writer_set_u64(rs_gguf_writer *w, const char *key, uint64_t v)
{
    return put_scalar(w, key, RS_GGUF_U64, &v, 8);
}

rs_err rs_gguf_writer_set_f32(rs_gguf_writer *w, const char *key, float v)
{
    return put_scalar(w, key, RS_GGUF_F32, &v, 4);
}

rs_err rs_gguf_writer_set_bool(rs_gguf_writer *w, const char *key, int v)
{
    uint8_t b = v ? 1 : 0;
    return put_scalar(w, key, RS_GGUF_BOOL, &b, 1);
}

rs_err rs_gguf_writer_set_str(rs_gguf_writer *w, const char *key, const char *v)
{
    uint64_t len = strlen(v);
    uint8_t *raw = malloc(8 + len);
    if (raw != NULL) {
        memcpy(raw, &len, 8);
        memcpy(raw + 8, v, len);
    }
    return put_kv(w, key, RS_GGUF_STRING, raw, 8 + len);
}

rs_err rs_gguf_writer_set_arr(rs_gguf_writer *w, const char *key, enum rs_gguf_type elem_type,
                              const void *data, uint64_t n)
{
    size_t es = rs_gguf_value_size(elem_type);
    if (es == 0 || n > (1ull << 40))
        return RS_EINVAL;
    uint32_t et = elem_type;
    uint8_t *raw = malloc(12 + n * es);
    if (raw != NULL) {
        memcpy(raw, &et, 4);
        memcpy(raw + 4, &n, 8);
        memcpy(raw + 12, data, n * es);
    }
    return put_kv(w, key, RS_GGUF_ARRAY, raw, 12 + n * es);
}

rs_err rs_gguf_writer_set_arr_str(rs_gguf_writer *w, const char *key, const char *const *strs,
                                  const uint64_t *lens, uint64_t n)
{
    uint64_t total = 12;
    for (uint64_t i = 0; i < n; i++)
        total += 8 + (lens ? lens[i] : strlen(strs[i]));
    uint8_t *raw = malloc(total);
    if (raw == NULL)
        return RS_ENOMEM;
    uint32_t et = RS_GGUF_STRING;
    memcpy(raw, &et, 4);
    memcpy(raw + 4, &n, 8);
    uint64_t off = 12;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len = lens ? lens[i] : strlen(strs[i]);
        memcpy(raw + off, &len, 8);
        memcpy(raw + off + 8, strs[i], len);
        off += 8 + len;
    }
    return put_kv(w, key, RS_GGUF_ARRAY, raw, total);
}

rs_err rs_gguf_writer_copy_kv(rs_gguf_writer *w, const rs_gguf *g, uint64_t idx)
{
    const void *src;
    uint64_t len;
    if (rs_gguf_kv_raw(g, idx, &src, &len) != RS_OK)
        return RS_EINVAL;
    struct rs_gguf_str k = rs_gguf_kv_key(g, idx);
    char *key = malloc(k.len + 1);
    uint8_t *raw = malloc(len ? len : 1);
    if (key == NULL || raw == NULL) {
        free(key);
        free(raw);
        return RS_ENOMEM;
    }
    memcpy(key, k.ptr, k.len);
    key[k.len] = '\0';
    memcpy(raw, src, len);
    rs_err rc = put_kv(w, key, rs_gguf_kv_type(g, idx), raw, len);
    free(key);
    return rc;
}

rs_err rs_gguf_writer_add_tensor(rs_gguf_writer *w, const char *name, enum rs_ggml_type type,
                                 uint32_t n_dims, const uint64_t *ne, const void *data)
{
    size_t bs = rs_ggml_block_size(type);
    if (strlen(name) == 0 || strlen(name) > RS_GGUF_MAX_NAME || n_dims == 0 ||
        n_dims > RS_GGUF_MAX_DIMS || bs == 0 || ne[0] % bs != 0)
        return RS_EINVAL;
    /* The reader's limits, so the writer never makes a file the reader rejects. */
    for (uint64_t d = 0, n = 1; d < n_dims; n *= ne[d], d++)
        if (ne[d] == 0 || ne[d] > (1ull << 40) || n > UINT64_MAX / ne[d])
            return RS_EINVAL;
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return RS_EEXIST;
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
        struct writer_tensor *t = realloc(w->tensors, cap * sizeof(*t));
        if (t == NULL)
            return RS_ENOMEM;
        w->tensors = t;
        w->cap_tensors = cap;
    }
    struct writer_tensor *t = &w->tensors[w->n_tensors++];
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->type = type;
    t->n_dims = n_dims;
    uint64_t n = 1;
    for (uint32_t d = 0; d < RS_GGUF_MAX_DIMS; d++) {
        t->ne[d] = d < n_dims ? ne[d] : 1;
        n *= t->ne[d];
    }
    t->nbytes = n / bs * rs_ggml_type_size(type);
    t->data = data;
    return RS_OK;
}

static int put_str(FILE *f, const char *s, uint64_t len)
{
    return fwrite(&len, 8, 1, f) == 1 && (len == 0 || fwrite(s, len, 1, f) == 1);
}

static int pad_to(FILE *f, uint64_t align)
{
    static const uint8_t zeros[256];
    long pos = ftell(f);
    if (pos < 0)
        return 0;
    uint64_t pad = (align - (uint64_t)pos % align) % align;
    for (uint64_t n; pad > 0; pad -= n) {
        n = pad < sizeof(zeros) ? pad : sizeof(zeros);
        if (fwrite(zeros, n, 1, f) != 1)
            return 0;
    }
    return 1;
}

/*
 * The alignment the file declares: general.alignment when set (for instance
 * copied from another file), else the GGUF default. 0 when the key holds
 * something the reader would reject, so no unreadable file is written.
 */
static uint64_t file_alignment(const rs_gguf_writer *w)
{
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment") != 0)
            continue;
        uint32_t a = 0;
        if (w->kv[i].type != RS_GGUF_U32 || w->kv[i].raw_len != 4)
            return 0;
        memcpy(&a, w->kv[i].raw, 4);
        return a != 0 && (a & (a - 1)) == 0 && a <= (1u << 16) ? a : 0;
    }
    return RS_GGUF_DEFAULT_ALIGNMENT;
}

static int write_header(rs_gguf_writer *w, FILE *f, uint64_t align)
{
    uint32_t magic = 0x46554747u, version = 3;
    uint64_t nt = w->n_tensors, nk = w->n_kv;
    int ok = fwrite(&magic, 4, 1, f) == 1 && fwrite(&version, 4, 1, f) == 1 &&
             fwrite(&nt, 8, 1, f) == 1 && fwrite(&nk, 8, 1, f) == 1;
    for (size_t i = 0; ok && i < w->n_kv; i++)
        ok = put_str(f, w->kv[i].key, strlen(w->kv[i].key)) &&
             fwrite(&w->kv[i].type, 4, 1, f) == 1 &&
             (w->kv[i].raw_len == 0 || fwrite(w->kv[i].raw, w->kv[i].raw_len, 1, f) == 1);
    uint64_t off = 0;
    for (size_t i = 0; ok && i < w->n_tensors; i++) {
        struct writer_tensor *t = &w->tensors[i];
        uint32_t type = t->type;
        t->offset = off;
        off += (t->nbytes + align - 1) / align * align;
        ok = put_str(f, t->name, strlen(t->name)) && fwrite(&t->n_dims, 4, 1, f) == 1 &&
             fwrite(t->ne, 8, t->n_dims, f) == t->n_dims && fwrite(&type, 4, 1, f) == 1 &&
             fwrite(&t->offset, 8, 1, f) == 1;
    }
    return ok;
}

rs_err rs_gguf_writer_write(rs_gguf_writer *w, const char *path)
{
    char tmp[4096];
    uint64_t align = file_alignment(w);
    if (align == 0) {
        rs_log_error("gguf writer: %s: general.alignment is not a u32 power of two up to 65536",
                     path);
        return RS_EINVAL;
    }
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return RS_EINVAL;
    FILE *f = fopen(tmp, "wb");
    if (f == NULL) {
        rs_log_error("gguf writer: cannot create %s: %s", tmp, strerror(errno));
        return RS_EIO;
    }
    int ok = write_header(w, f, align) && pad_to(f, align);
    for (size_t i = 0; ok && i < w->n_tensors; i++)
        ok = fwrite(w->tensors[i].data, 1, w->tensors[i].nbytes, f) == w->tensors[i].nbytes &&
             pad_to(f, align);
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        rs_log_error("gguf writer: writing %s failed: %s", path, strerror(errno));
        unlink(tmp);
        return RS_EIO;
    }
    return RS_OK;
}

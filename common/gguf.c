/* SPDX-License-Identifier: MIT */
/*
 * GGUF reader: parses the header, metadata and tensor infos once at open with
 * a bounds-checked cursor, then serves lookups from an index. Every failure
 * names the field (key or tensor and what is wrong with it).
 */
#include "common/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_MAX_STRING (1ull << 24)  /* 16 MiB: no sane key or value is longer */
#define GGUF_MAX_ALIGNMENT (1u << 16)

struct gguf_kv {
    struct rs_gguf_str key;
    enum rs_gguf_type type;
    enum rs_gguf_type elem_type; /* arrays only */
    uint64_t n;                  /* arrays: element count */
    uint64_t value_off;          /* file offset of the value (array: of the first element) */
    uint64_t *str_offs;          /* string arrays: file offset of each element's length */
    uint64_t raw_off, raw_end;   /* encoded value bytes (after the type field) */
};

struct rs_gguf {
    const uint8_t *base;
    uint64_t size;
    int mapped;
    char path[512];
    uint32_t version;
    uint32_t alignment;
    uint64_t data_off;
    uint64_t n_kv, n_tensors;
    struct gguf_kv *kv;
    struct rs_gguf_tensor *tensors;
};

struct cursor {
    const uint8_t *base;
    uint64_t size, pos;
    char *err;
    size_t err_len;
};

static rs_err fail(struct cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static rs_err fail(struct cursor *c, const char *fmt, ...)
{
    if (c->err != NULL && c->err_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->err_len, fmt, ap);
        va_end(ap);
    }
    return RS_EINVAL;
}

static int take(struct cursor *c, void *dst, uint64_t n)
{
    if (n > c->size - c->pos)
        return 0;
    memcpy(dst, c->base + c->pos, n);
    c->pos += n;
    return 1;
}

static int skip(struct cursor *c, uint64_t n)
{
    if (n > c->size - c->pos)
        return 0;
    c->pos += n;
    return 1;
}

/* Reads a GGUF string (u64 length + bytes) as a view into the file. */
static int take_str(struct cursor *c, struct rs_gguf_str *s)
{
    uint64_t len;
    if (!take(c, &len, 8) || len > GGUF_MAX_STRING || len > c->size - c->pos)
        return 0;
    s->ptr = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += len;
    return 1;
}

size_t rs_gguf_value_size(enum rs_gguf_type t)
{
    switch (t) {
    case RS_GGUF_U8: case RS_GGUF_I8: case RS_GGUF_BOOL: return 1;
    case RS_GGUF_U16: case RS_GGUF_I16: return 2;
    case RS_GGUF_U32: case RS_GGUF_I32: case RS_GGUF_F32: return 4;
    case RS_GGUF_U64: case RS_GGUF_I64: case RS_GGUF_F64: return 8;
    default: return 0;
    }
}

static const struct {
    const char *name;
    uint16_t size, block;
} ggml_types[RS_GGML_TYPE_COUNT] = {
    [0] = {"F32", 4, 1},        [1] = {"F16", 2, 1},        [2] = {"Q4_0", 18, 32},
    [3] = {"Q4_1", 20, 32},     [6] = {"Q5_0", 22, 32},     [7] = {"Q5_1", 24, 32},
    [8] = {"Q8_0", 34, 32},     [9] = {"Q8_1", 36, 32},     [10] = {"Q2_K", 84, 256},
    [11] = {"Q3_K", 110, 256},  [12] = {"Q4_K", 144, 256},  [13] = {"Q5_K", 176, 256},
    [14] = {"Q6_K", 210, 256},  [15] = {"Q8_K", 292, 256},  [16] = {"IQ2_XXS", 66, 256},
    [17] = {"IQ2_XS", 74, 256}, [18] = {"IQ3_XXS", 98, 256}, [19] = {"IQ1_S", 50, 256},
    [20] = {"IQ4_NL", 18, 32},  [21] = {"IQ3_S", 110, 256}, [22] = {"IQ2_S", 82, 256},
    [23] = {"IQ4_XS", 136, 256}, [24] = {"I8", 1, 1},       [25] = {"I16", 2, 1},
    [26] = {"I32", 4, 1},       [27] = {"I64", 8, 1},       [28] = {"F64", 8, 1},
    [29] = {"IQ1_M", 56, 256},  [30] = {"BF16", 2, 1},      [34] = {"TQ1_0", 54, 256},
    [35] = {"TQ2_0", 66, 256},
};

size_t rs_ggml_type_size(enum rs_ggml_type t)
{
    return (unsigned)t < RS_GGML_TYPE_COUNT ? ggml_types[t].size : 0;
}

size_t rs_ggml_block_size(enum rs_ggml_type t)
{
    return (unsigned)t < RS_GGML_TYPE_COUNT ? ggml_types[t].block : 0;
}

const char *rs_ggml_type_name(enum rs_ggml_type t)
{
    return (unsigned)t < RS_GGML_TYPE_COUNT && ggml_types[t].name ? ggml_types[t].name : "?";
}

uint64_t rs_ggml_row_bytes(enum rs_ggml_type t, uint64_t n)
{
    size_t bs = rs_ggml_block_size(t);
    return bs ? n / bs * rs_ggml_type_size(t) : 0;
}

static void key_text(const struct rs_gguf_str *k, char *buf, size_t len)
{
    size_t n = k->len < len - 1 ? (size_t)k->len : len - 1;
    memcpy(buf, k->ptr, n);
    buf[n] = '\0';
}

/* Parses one array value after its key and type; indexes string arrays. */
static rs_err parse_array(struct cursor *c, struct gguf_kv *kv, const char *key)
{
    uint32_t et;
    uint64_t n;
    if (!take(c, &et, 4) || !take(c, &n, 8))
        return fail(c, "metadata '%s': array header truncated", key);
    kv->elem_type = (enum rs_gguf_type)et;
    kv->n = n;
    kv->value_off = c->pos;
    if (et == RS_GGUF_ARRAY)
        return fail(c, "metadata '%s': nested arrays are not supported", key);
    if (et == RS_GGUF_STRING) {
        if (n > (c->size - c->pos) / 8)
            return fail(c, "metadata '%s': string array count %llu exceeds the file", key,
                        (unsigned long long)n);
        kv->str_offs = malloc((n ? n : 1) * sizeof(uint64_t));
        if (kv->str_offs == NULL)
            return fail(c, "metadata '%s': out of memory indexing %llu strings", key,
                        (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++) {
            struct rs_gguf_str s;
            kv->str_offs[i] = c->pos;
            if (!take_str(c, &s))
                return fail(c, "metadata '%s': string %llu truncated or too long", key,
                            (unsigned long long)i);
        }
        return RS_OK;
    }
    size_t es = rs_gguf_value_size((enum rs_gguf_type)et);
    if (es == 0)
        return fail(c, "metadata '%s': unknown array element type %u", key, et);
    if (n > (c->size - c->pos) / es || !skip(c, n * es))
        return fail(c, "metadata '%s': array of %llu elements runs past the end of the file",
                    key, (unsigned long long)n);
    return RS_OK;
}

static rs_err parse_value(struct cursor *c, struct gguf_kv *kv, const char *key, uint32_t type);

static rs_err parse_kv(struct cursor *c, struct gguf_kv *kv, uint64_t idx)
{
    char key[128];
    uint32_t type;
    if (!take_str(c, &kv->key))
        return fail(c, "metadata key %llu: name truncated or too long", (unsigned long long)idx);
    key_text(&kv->key, key, sizeof(key));
    if (!take(c, &type, 4))
        return fail(c, "metadata '%s': type truncated", key);
    kv->type = (enum rs_gguf_type)type;
    kv->value_off = kv->raw_off = c->pos;
    rs_err rc = parse_value(c, kv, key, type);
    kv->raw_end = c->pos;
    return rc;
}

static rs_err parse_value(struct cursor *c, struct gguf_kv *kv, const char *key, uint32_t type)
{
    if (type == RS_GGUF_ARRAY)
        return parse_array(c, kv, key);
    if (type == RS_GGUF_STRING) {
        struct rs_gguf_str s;
        if (!take_str(c, &s))
            return fail(c, "metadata '%s': string value truncated or too long", key);
        return RS_OK;
    }
    size_t sz = rs_gguf_value_size((enum rs_gguf_type)type);
    if (sz == 0)
        return fail(c, "metadata '%s': unknown value type %u", key, type);
    if (!skip(c, sz))
        return fail(c, "metadata '%s': value truncated", key);
    if (type == RS_GGUF_BOOL && c->base[kv->value_off] > 1)
        return fail(c, "metadata '%s': bool value %u is neither 0 nor 1", key,
                    c->base[kv->value_off]);
    return RS_OK;
}

static int key_equals(const struct rs_gguf_str *k, const char *s)
{
    size_t n = strlen(s);
    return k->len == n && memcmp(k->ptr, s, n) == 0;
}

static int cmp_kv_key(const void *a, const void *b)
{
    const struct rs_gguf_str *x = &(*(const struct gguf_kv *const *)a)->key;
    const struct rs_gguf_str *y = &(*(const struct gguf_kv *const *)b)->key;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->len ? memcmp(x->ptr, y->ptr, x->len) : 0;
}

/*
 * Duplicate keys by sorting pointers (n log n): the counts come from the
 * file, so a pairwise check would let a crafted file stall the loader.
 */
static rs_err check_duplicate_keys(struct cursor *c, const struct rs_gguf *g)
{
    if (g->n_kv < 2)
        return RS_OK;
    const struct gguf_kv **v = malloc(g->n_kv * sizeof(*v));
    if (v == NULL)
        return fail(c, "metadata: out of memory checking %llu keys for duplicates",
                    (unsigned long long)g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++)
        v[i] = &g->kv[i];
    qsort(v, g->n_kv, sizeof(*v), cmp_kv_key);
    rs_err rc = RS_OK;
    for (uint64_t i = 1; i < g->n_kv && rc == RS_OK; i++)
        if (cmp_kv_key(&v[i - 1], &v[i]) == 0) {
            char key[128];
            key_text(&v[i]->key, key, sizeof(key));
            rc = fail(c, "metadata '%s': duplicate key", key);
        }
    free(v);
    return rc;
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp((*(const struct rs_gguf_tensor *const *)a)->name,
                  (*(const struct rs_gguf_tensor *const *)b)->name);
}

/* Duplicate tensor names, by sorting for the same reason as the keys. */
static rs_err check_duplicate_tensors(struct cursor *c, const struct rs_gguf *g)
{
    if (g->n_tensors < 2)
        return RS_OK;
    const struct rs_gguf_tensor **v = malloc(g->n_tensors * sizeof(*v));
    if (v == NULL)
        return fail(c, "tensors: out of memory checking %llu names for duplicates",
                    (unsigned long long)g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        v[i] = &g->tensors[i];
    qsort(v, g->n_tensors, sizeof(*v), cmp_tensor_name);
    rs_err rc = RS_OK;
    for (uint64_t i = 1; i < g->n_tensors && rc == RS_OK; i++)
        if (strcmp(v[i - 1]->name, v[i]->name) == 0)
            rc = fail(c, "tensor '%s': duplicate name", v[i]->name);
    free(v);
    return rc;
}

static rs_err parse_tensor_info(struct cursor *c, struct rs_gguf_tensor *t, uint64_t idx)
{
    struct rs_gguf_str name;
    uint32_t type;
    if (!take_str(c, &name))
        return fail(c, "tensor %llu: name truncated", (unsigned long long)idx);
    if (name.len == 0 || name.len > RS_GGUF_MAX_NAME)
        return fail(c, "tensor %llu: name length %llu not in 1..%d", (unsigned long long)idx,
                    (unsigned long long)name.len, RS_GGUF_MAX_NAME);
    if (memchr(name.ptr, '\0', name.len) != NULL)
        return fail(c, "tensor %llu: name contains a NUL byte", (unsigned long long)idx);
    memcpy(t->name, name.ptr, name.len);
    t->name[name.len] = '\0';
    if (!take(c, &t->n_dims, 4))
        return fail(c, "tensor '%s': n_dims truncated", t->name);
    if (t->n_dims == 0 || t->n_dims > RS_GGUF_MAX_DIMS)
        return fail(c, "tensor '%s': n_dims %u not in 1..%d", t->name, t->n_dims,
                    RS_GGUF_MAX_DIMS);
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < RS_GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d < t->n_dims && !take(c, &t->ne[d], 8))
            return fail(c, "tensor '%s': dimension %u truncated", t->name, d);
        if (t->ne[d] == 0 || t->ne[d] > (1ull << 40) || n_elems > UINT64_MAX / t->ne[d])
            return fail(c, "tensor '%s': dimension %u = %llu is zero or absurd", t->name, d,
                        (unsigned long long)t->ne[d]);
        n_elems *= t->ne[d];
    }
    if (!take(c, &type, 4) || !take(c, &t->offset, 8))
        return fail(c, "tensor '%s': type or offset truncated", t->name);
    t->type = (enum rs_ggml_type)type;
    size_t bs = rs_ggml_block_size(t->type);
    if (bs == 0)
        return fail(c, "tensor '%s': unknown tensor type %u", t->name, type);
    if (t->ne[0] % bs != 0)
        return fail(c, "tensor '%s': row length %llu is not a multiple of the %s block size %zu",
                    t->name, (unsigned long long)t->ne[0], rs_ggml_type_name(t->type), bs);
    if (n_elems / bs > UINT64_MAX / rs_ggml_type_size(t->type))
        return fail(c, "tensor '%s': byte size overflows", t->name);
    t->nbytes = n_elems / bs * rs_ggml_type_size(t->type);
    return RS_OK;
}

/* Reads general.alignment (must be a power of two, u32) if present. */
static rs_err read_alignment(struct cursor *c, struct rs_gguf *g)
{
    g->alignment = RS_GGUF_DEFAULT_ALIGNMENT;
    int64_t i = rs_gguf_find_key(g, "general.alignment");
    if (i < 0)
        return RS_OK;
    if (g->kv[i].type != RS_GGUF_U32)
        return fail(c, "metadata 'general.alignment': type %u, expected u32", g->kv[i].type);
    uint32_t a;
    memcpy(&a, g->base + g->kv[i].value_off, 4);
    if (a == 0 || (a & (a - 1)) != 0 || a > GGUF_MAX_ALIGNMENT)
        return fail(c, "metadata 'general.alignment': %u is not a power of two up to %u", a,
                    GGUF_MAX_ALIGNMENT);
    g->alignment = a;
    return RS_OK;
}

/* Places each tensor in the data section; checks alignment, bounds, names. */
static rs_err place_tensors(struct cursor *c, struct rs_gguf *g)
{
    uint64_t a = g->alignment;
    g->data_off = (c->pos + a - 1) / a * a;
    if (g->n_tensors > 0 && g->data_off > g->size)
        return fail(c, "data section: starts at %llu, past the end of the file (%llu bytes)",
                    (unsigned long long)g->data_off, (unsigned long long)g->size);
    uint64_t data_size = g->data_off <= g->size ? g->size - g->data_off : 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        struct rs_gguf_tensor *t = &g->tensors[i];
        if (t->offset % a != 0)
            return fail(c, "tensor '%s': offset %llu is not a multiple of the alignment %llu",
                        t->name, (unsigned long long)t->offset, (unsigned long long)a);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return fail(c, "tensor '%s': offset %llu + size %llu runs past the end of the file "
                        "(data section is %llu bytes)", t->name, (unsigned long long)t->offset,
                        (unsigned long long)t->nbytes, (unsigned long long)data_size);
        t->data = g->base + g->data_off + t->offset;
    }
    return check_duplicate_tensors(c, g);
}

static rs_err parse_header(struct cursor *c, struct rs_gguf *g)
{
    uint32_t magic;
    if (!take(c, &magic, 4) || magic != GGUF_MAGIC)
        return fail(c, "header: bad magic (not a GGUF file)");
    if (!take(c, &g->version, 4))
        return fail(c, "header: version truncated");
    if (g->version != 2 && g->version != 3)
        return fail(c, "header: unsupported GGUF version %u (2 and 3 are supported)",
                    g->version);
    if (!take(c, &g->n_tensors, 8) || !take(c, &g->n_kv, 8))
        return fail(c, "header: tensor or metadata count truncated");
    /* Smallest kv: 8-byte key length + 4-byte type + 1-byte value. */
    if (g->n_kv > (c->size - c->pos) / 13)
        return fail(c, "header: metadata count %llu exceeds what the file can hold",
                    (unsigned long long)g->n_kv);
    /* Smallest tensor info: 8 + 1 name byte + 4 + 8 + 4 + 8. */
    if (g->n_tensors > (c->size - c->pos) / 33)
        return fail(c, "header: tensor count %llu exceeds what the file can hold",
                    (unsigned long long)g->n_tensors);
    return RS_OK;
}

static rs_err parse(struct cursor *c, struct rs_gguf *g)
{
    rs_err rc = parse_header(c, g);
    if (rc != RS_OK)
        return rc;
    g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof(*g->kv));
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*g->tensors));
    if (g->kv == NULL || g->tensors == NULL)
        return fail(c, "header: out of memory for %llu keys and %llu tensors",
                    (unsigned long long)g->n_kv, (unsigned long long)g->n_tensors);
    for (uint64_t i = 0; i < g->n_kv; i++)
        if ((rc = parse_kv(c, &g->kv[i], i)) != RS_OK)
            return rc;
    if ((rc = check_duplicate_keys(c, g)) != RS_OK || (rc = read_alignment(c, g)) != RS_OK)
        return rc;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((rc = parse_tensor_info(c, &g->tensors[i], i)) != RS_OK)
            return rc;
    return place_tensors(c, g);
}

rs_err rs_gguf_open_mem(const void *data, size_t size, rs_gguf **out, char *err, size_t err_len)
{
    *out = NULL;
    struct rs_gguf *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return RS_ENOMEM;
    g->base = data;
    g->size = size;
    struct cursor c = {.base = data, .size = size, .err = err, .err_len = err_len};
    rs_err rc = parse(&c, g);
    if (rc != RS_OK) {
        rs_gguf_close(&g);
        return rc;
    }
    *out = g;
    return RS_OK;
}

/*
 * Reads `size` bytes of fd into fresh anonymous memory, made read-only. A file
 * truncated or rewritten afterwards cannot reach this copy (a shared mapping
 * of a truncated file raises SIGBUS; a rewritten one changes the weights under
 * a running model); one changed during the read is refused, never half-used.
 */
/* size bytes of anonymous memory starting on a 2 MB boundary, so that every 2 MB of it can be
 * one huge page (MAP_FAILED on failure). */
static void *map_aligned(size_t size)
{
    const size_t huge = (size_t)2 << 20, page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = (size + page - 1) & ~(page - 1);
    uint8_t *raw = mmap(NULL, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                        -1, 0);
    if (raw == MAP_FAILED)
        return MAP_FAILED;
    uint8_t *p = (uint8_t *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    munmap(p + len, (size_t)(raw + len + huge - (p + len)));
    return p;
}

static void *read_private(int fd, size_t size, const char *path, char *err, size_t err_len)
{
    void *p = map_aligned(size);
    if (p == MAP_FAILED) {
        if (err != NULL)
            snprintf(err, err_len, "%s: %zu bytes of memory for its private copy: %s", path,
                     size, strerror(errno));
        return NULL;
    }
    /* Decode streams every weight once a token: 2 MB pages spare it a TLB miss every 4 KB.
     * Only a hint; where the kernel has no huge pages to give, 4 KB ones serve. */
    (void)madvise(p, size, MADV_HUGEPAGE);
    size_t got = 0;
    while (got < size) {
        size_t want = size - got < (1u << 30) ? size - got : (1u << 30);
        ssize_t n = pread(fd, (char *)p + got, want, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    struct stat st;
    int changed = fstat(fd, &st) != 0 || (size_t)st.st_size != size;
    if (got != size || changed || mprotect(p, size, PROT_READ) != 0) {
        if (err != NULL)
            snprintf(err, err_len, "%s: read %zu of %zu bytes%s: the file changed while it "
                     "was read; load it again once it is complete",
                     path, got, size, changed ? " and its size changed" : "");
        munmap(p, size);
        return NULL;
    }
    return p;
}

/* Opens, maps (shared) or copies (private) and validates `path`. */
static rs_err open_file(const char *path, int private_copy, rs_gguf **out, char *err,
                        size_t err_len)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
        if (err != NULL)
            snprintf(err, err_len, "%s: %s", path,
                     fd < 0 ? strerror(errno) : "not a non-empty regular file");
        if (fd >= 0)
            close(fd);
        return RS_EIO;
    }
    void *map = private_copy ? read_private(fd, (size_t)st.st_size, path, err, err_len)
                             : mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED || map == NULL) {
        if (err != NULL && !private_copy)
            snprintf(err, err_len, "%s: mmap: %s", path, strerror(map_errno));
        return RS_EIO;
    }
    rs_err rc = rs_gguf_open_mem(map, (size_t)st.st_size, out, err, err_len);
    if (rc != RS_OK) {
        munmap(map, (size_t)st.st_size);
        return rc;
    }
    (*out)->mapped = 1;
    snprintf((*out)->path, sizeof((*out)->path), "%s", path);
    return RS_OK;
}

rs_err rs_gguf_open(const char *path, rs_gguf **out, char *err, size_t err_len)
{
    return open_file(path, 0, out, err, err_len);
}

rs_err rs_gguf_open_private(const char *path, rs_gguf **out, char *err, size_t err_len)
{
    return open_file(path, 1, out, err, err_len);
}

void rs_gguf_close(rs_gguf **gp)
{
    if (gp == NULL || *gp == NULL)
        return;
    struct rs_gguf *g = *gp;
    if (g->kv != NULL)
        for (uint64_t i = 0; i < g->n_kv; i++)
            free(g->kv[i].str_offs);
    free(g->kv);
    free(g->tensors);
    if (g->mapped)
        munmap((void *)g->base, g->size);
    free(g);
    *gp = NULL;
}

uint32_t rs_gguf_version(const rs_gguf *g) { return g->version; }
uint64_t rs_gguf_file_size(const rs_gguf *g) { return g->size; }
uint64_t rs_gguf_data_offset(const rs_gguf *g) { return g->data_off; }
uint32_t rs_gguf_alignment(const rs_gguf *g) { return g->alignment; }
const void *rs_gguf_bytes(const rs_gguf *g)
{
    return g->base;
}

const char *rs_gguf_path(const rs_gguf *g) { return g->path; }
uint64_t rs_gguf_n_kv(const rs_gguf *g) { return g->n_kv; }
uint64_t rs_gguf_n_tensors(const rs_gguf *g) { return g->n_tensors; }

int64_t rs_gguf_find_key(const rs_gguf *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (key_equals(&g->kv[i].key, key))
            return (int64_t)i;
    return -1;
}

struct rs_gguf_str rs_gguf_kv_key(const rs_gguf *g, uint64_t idx)
{
    return idx < g->n_kv ? g->kv[idx].key : (struct rs_gguf_str){"", 0};
}

enum rs_gguf_type rs_gguf_kv_type(const rs_gguf *g, uint64_t idx)
{
    return idx < g->n_kv ? g->kv[idx].type : (enum rs_gguf_type)-1;
}

int64_t rs_gguf_find_tensor(const rs_gguf *g, const char *name)
{
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0)
            return (int64_t)i;
    return -1;
}

const struct rs_gguf_tensor *rs_gguf_tensor(const rs_gguf *g, uint64_t idx)
{
    return idx < g->n_tensors ? &g->tensors[idx] : NULL;
}

/* --- typed access -------------------------------------------------------- */

/* Reads a numeric value of type t at p as integer (ok=0 for floats/strings). */
static int read_int(enum rs_gguf_type t, const uint8_t *p, int64_t *i, uint64_t *u, int *is_unsigned)
{
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
    *is_unsigned = 0;
    switch (t) {
    case RS_GGUF_U8: memcpy(&u8, p, 1); *u = u8; *is_unsigned = 1; return 1;
    case RS_GGUF_BOOL: memcpy(&u8, p, 1); *u = u8; *is_unsigned = 1; return 1;
    case RS_GGUF_I8: memcpy(&i8, p, 1); *i = i8; return 1;
    case RS_GGUF_U16: memcpy(&u16, p, 2); *u = u16; *is_unsigned = 1; return 1;
    case RS_GGUF_I16: memcpy(&i16, p, 2); *i = i16; return 1;
    case RS_GGUF_U32: memcpy(&u32, p, 4); *u = u32; *is_unsigned = 1; return 1;
    case RS_GGUF_I32: memcpy(&i32, p, 4); *i = i32; return 1;
    case RS_GGUF_U64: memcpy(u, p, 8); *is_unsigned = 1; return 1;
    case RS_GGUF_I64: memcpy(i, p, 8); return 1;
    default: return 0;
    }
}

static rs_err get_int(const rs_gguf *g, const char *key, int64_t min, uint64_t max, uint64_t *bits)
{
    int64_t idx = rs_gguf_find_key(g, key);
    if (idx < 0)
        return RS_ENOENT;
    const struct gguf_kv *kv = &g->kv[idx];
    int64_t i = 0;
    uint64_t u = 0;
    int is_u;
    if (kv->type == RS_GGUF_BOOL || !read_int(kv->type, g->base + kv->value_off, &i, &u, &is_u))
        return RS_EINVAL;
    if (is_u) {
        if (u > max)
            return RS_EINVAL;
        *bits = u;
    } else {
        if (i < min || (i > 0 && (uint64_t)i > max))
            return RS_EINVAL;
        *bits = (uint64_t)i;
    }
    return RS_OK;
}

rs_err rs_gguf_get_u32(const rs_gguf *g, const char *key, uint32_t *out)
{
    uint64_t v;
    rs_err rc = get_int(g, key, 0, UINT32_MAX, &v);
    if (rc == RS_OK)
        *out = (uint32_t)v;
    return rc;
}

rs_err rs_gguf_get_i32(const rs_gguf *g, const char *key, int32_t *out)
{
    uint64_t v;
    rs_err rc = get_int(g, key, INT32_MIN, INT32_MAX, &v);
    if (rc == RS_OK)
        *out = (int32_t)(int64_t)v;
    return rc;
}

rs_err rs_gguf_get_u64(const rs_gguf *g, const char *key, uint64_t *out)
{
    return get_int(g, key, 0, UINT64_MAX, out);
}

rs_err rs_gguf_get_f32(const rs_gguf *g, const char *key, float *out)
{
    int64_t idx = rs_gguf_find_key(g, key);
    if (idx < 0)
        return RS_ENOENT;
    const uint8_t *p = g->base + g->kv[idx].value_off;
    if (g->kv[idx].type == RS_GGUF_F32) {
        memcpy(out, p, 4);
        return RS_OK;
    }
    if (g->kv[idx].type == RS_GGUF_F64) {
        double d;
        memcpy(&d, p, 8);
        *out = (float)d;
        return RS_OK;
    }
    return RS_EINVAL;
}

rs_err rs_gguf_get_bool(const rs_gguf *g, const char *key, int *out)
{
    int64_t idx = rs_gguf_find_key(g, key);
    if (idx < 0)
        return RS_ENOENT;
    if (g->kv[idx].type != RS_GGUF_BOOL)
        return RS_EINVAL;
    *out = g->base[g->kv[idx].value_off] != 0;
    return RS_OK;
}

rs_err rs_gguf_get_str(const rs_gguf *g, const char *key, struct rs_gguf_str *out)
{
    int64_t idx = rs_gguf_find_key(g, key);
    if (idx < 0)
        return RS_ENOENT;
    if (g->kv[idx].type != RS_GGUF_STRING)
        return RS_EINVAL;
    uint64_t len;
    memcpy(&len, g->base + g->kv[idx].value_off, 8);
    out->ptr = (const char *)g->base + g->kv[idx].value_off + 8;
    out->len = len;
    return RS_OK;
}

static const struct gguf_kv *find_arr(const rs_gguf *g, const char *key, rs_err *rc)
{
    int64_t idx = rs_gguf_find_key(g, key);
    *rc = idx < 0 ? RS_ENOENT : g->kv[idx].type != RS_GGUF_ARRAY ? RS_EINVAL : RS_OK;
    return *rc == RS_OK ? &g->kv[idx] : NULL;
}

rs_err rs_gguf_get_arr(const rs_gguf *g, const char *key, enum rs_gguf_type *elem_type,
                       uint64_t *n)
{
    rs_err rc;
    const struct gguf_kv *kv = find_arr(g, key, &rc);
    if (kv != NULL) {
        *elem_type = kv->elem_type;
        *n = kv->n;
    }
    return rc;
}

rs_err rs_gguf_arr_i64(const rs_gguf *g, const char *key, uint64_t i, int64_t *out)
{
    rs_err rc;
    const struct gguf_kv *kv = find_arr(g, key, &rc);
    if (kv == NULL)
        return rc;
    size_t es = rs_gguf_value_size(kv->elem_type);
    if (i >= kv->n || es == 0)
        return RS_EINVAL;
    int64_t v = 0;
    uint64_t u = 0;
    int is_u;
    const uint8_t *p = g->base + kv->value_off + i * es;
    if (read_int(kv->elem_type, p, &v, &u, &is_u)) {
        if (is_u && u > INT64_MAX)
            return RS_EINVAL;
        *out = is_u ? (int64_t)u : v;
        return RS_OK;
    }
    return RS_EINVAL;
}

rs_err rs_gguf_arr_f64(const rs_gguf *g, const char *key, uint64_t i, double *out)
{
    rs_err rc;
    const struct gguf_kv *kv = find_arr(g, key, &rc);
    if (kv == NULL)
        return rc;
    size_t es = rs_gguf_value_size(kv->elem_type);
    if (i >= kv->n || es == 0)
        return RS_EINVAL;
    const uint8_t *p = g->base + kv->value_off + i * es;
    if (kv->elem_type == RS_GGUF_F32) {
        float f;
        memcpy(&f, p, 4);
        *out = f;
        return RS_OK;
    }
    if (kv->elem_type == RS_GGUF_F64) {
        memcpy(out, p, 8);
        return RS_OK;
    }
    int64_t v;
    rc = rs_gguf_arr_i64(g, key, i, &v);
    if (rc == RS_OK)
        *out = (double)v;
    return rc;
}

struct rs_gguf_str rs_gguf_arr_str_at(const rs_gguf *g, uint64_t kv_idx, uint64_t i)
{
    struct rs_gguf_str s = {"", 0};
    if (kv_idx >= g->n_kv || g->kv[kv_idx].str_offs == NULL || i >= g->kv[kv_idx].n)
        return s;
    uint64_t off = g->kv[kv_idx].str_offs[i];
    memcpy(&s.len, g->base + off, 8);
    s.ptr = (const char *)g->base + off + 8;
    return s;
}

rs_err rs_gguf_arr_str(const rs_gguf *g, const char *key, uint64_t i, struct rs_gguf_str *out)
{
    int64_t idx = rs_gguf_find_key(g, key);
    if (idx < 0)
        return RS_ENOENT;
    if (g->kv[idx].type != RS_GGUF_ARRAY || g->kv[idx].elem_type != RS_GGUF_STRING ||
        i >= g->kv[idx].n)
        return RS_EINVAL;
    *out = rs_gguf_arr_str_at(g, (uint64_t)idx, i);
    return RS_OK;
}

const void *rs_gguf_arr_data(const rs_gguf *g, uint64_t kv_idx)
{
    if (kv_idx >= g->n_kv || g->kv[kv_idx].type != RS_GGUF_ARRAY)
        return NULL;
    return g->base + g->kv[kv_idx].value_off;
}

rs_err rs_gguf_kv_raw(const rs_gguf *g, uint64_t idx, const void **raw, uint64_t *len)
{
    if (idx >= g->n_kv)
        return RS_EINVAL;
    *raw = g->base + g->kv[idx].raw_off;
    *len = g->kv[idx].raw_end - g->kv[idx].raw_off;
    return RS_OK;
}

/* SPDX-License-Identifier: MIT */
/*
 * GGUF v2/v3 reader (over mmap, or over caller memory for fuzzing) and writer.
 * The file is outside input: every count, length, offset, type and alignment
 * is checked against the file size before use, and a malformed file is
 * rejected with a message naming the field. Nothing is cast onto file bytes;
 * numeric metadata is read with memcpy (GGUF metadata is unaligned).
 * Leaves out: GGUF v1 (32-bit counts; obsolete since 2023) and big-endian files.
 */
#ifndef RS_GGUF_H
#define RS_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* Metadata value types, numbered as in the GGUF specification. */
enum rs_gguf_type {
    RS_GGUF_U8 = 0,
    RS_GGUF_I8 = 1,
    RS_GGUF_U16 = 2,
    RS_GGUF_I16 = 3,
    RS_GGUF_U32 = 4,
    RS_GGUF_I32 = 5,
    RS_GGUF_F32 = 6,
    RS_GGUF_BOOL = 7,
    RS_GGUF_STRING = 8,
    RS_GGUF_ARRAY = 9,
    RS_GGUF_U64 = 10,
    RS_GGUF_I64 = 11,
    RS_GGUF_F64 = 12,
};

/* Tensor element types, numbered as in ggml. */
enum rs_ggml_type {
    RS_GGML_F32 = 0,
    RS_GGML_F16 = 1,
    RS_GGML_Q4_0 = 2,
    RS_GGML_Q4_1 = 3,
    RS_GGML_Q5_0 = 6,
    RS_GGML_Q5_1 = 7,
    RS_GGML_Q8_0 = 8,
    RS_GGML_Q8_1 = 9,
    RS_GGML_Q2_K = 10,
    RS_GGML_Q3_K = 11,
    RS_GGML_Q4_K = 12,
    RS_GGML_Q5_K = 13,
    RS_GGML_Q6_K = 14,
    RS_GGML_Q8_K = 15,
    RS_GGML_BF16 = 30,
    RS_GGML_TYPE_COUNT = 36,
};

#define RS_GGUF_MAX_DIMS 4
#define RS_GGUF_MAX_NAME 64            /* tensor name bytes, as in ggml */
#define RS_GGUF_DEFAULT_ALIGNMENT 32

/* A borrowed, length-delimited string inside the file (not NUL-terminated). */
struct rs_gguf_str {
    const char *ptr;
    uint64_t len;
};

struct rs_gguf_tensor {
    char name[RS_GGUF_MAX_NAME + 1]; /* NUL-terminated copy */
    uint32_t n_dims;
    uint64_t ne[RS_GGUF_MAX_DIMS];   /* elements per dim, ne[0] innermost; unused dims 1 */
    enum rs_ggml_type type;
    uint64_t offset;                 /* bytes from the start of the data section */
    uint64_t nbytes;                 /* bytes of tensor data */
    const void *data;                /* borrowed: valid until rs_gguf_close */
};

typedef struct rs_gguf rs_gguf;

/*
 * Maps and validates the file at `path`. On failure returns RS_EIO (cannot
 * open/map) or RS_EINVAL (malformed) and writes a message naming the problem
 * into err (err may be NULL). *out owns the reader: rs_gguf_close it.
 */
rs_err rs_gguf_open(const char *path, rs_gguf **out, char *err, size_t err_len);

/*
 * As rs_gguf_open, but reads the whole file into private read-only memory
 * instead of mapping it shared: what a process that keeps serving from the
 * tensors uses, so the file truncated (SIGBUS through a shared mapping) or
 * rewritten under it cannot crash it or change its outputs. Costs the file's
 * size in anonymous memory and one sequential read. RS_EIO also when the file
 * changed size or came up short while it was read (message says so).
 */
rs_err rs_gguf_open_private(const char *path, rs_gguf **out, char *err, size_t err_len);

/* Same over `size` bytes at `data`, which it borrows until rs_gguf_close. */
rs_err rs_gguf_open_mem(const void *data, size_t size, rs_gguf **out, char *err, size_t err_len);

/* Unmaps and frees; accepts NULL and clears *g. */
void rs_gguf_close(rs_gguf **g);

uint32_t rs_gguf_version(const rs_gguf *g);
uint64_t rs_gguf_file_size(const rs_gguf *g);
uint64_t rs_gguf_data_offset(const rs_gguf *g); /* file offset of the tensor data section */
uint32_t rs_gguf_alignment(const rs_gguf *g);
const char *rs_gguf_path(const rs_gguf *g);     /* "" when opened from memory */
const void *rs_gguf_bytes(const rs_gguf *g);    /* the file's rs_gguf_file_size bytes */

/* --- metadata ------------------------------------------------------------- */
uint64_t rs_gguf_n_kv(const rs_gguf *g);
/* Index of `key`, or -1. */
int64_t rs_gguf_find_key(const rs_gguf *g, const char *key);
struct rs_gguf_str rs_gguf_kv_key(const rs_gguf *g, uint64_t idx);
enum rs_gguf_type rs_gguf_kv_type(const rs_gguf *g, uint64_t idx);

/*
 * Typed getters. RS_ENOENT when the key is absent, RS_EINVAL when its type
 * does not convert (integers convert when the value fits; floats accept f32
 * and f64), RS_OK with *out set otherwise.
 */
rs_err rs_gguf_get_u32(const rs_gguf *g, const char *key, uint32_t *out);
rs_err rs_gguf_get_i32(const rs_gguf *g, const char *key, int32_t *out);
rs_err rs_gguf_get_u64(const rs_gguf *g, const char *key, uint64_t *out);
rs_err rs_gguf_get_f32(const rs_gguf *g, const char *key, float *out);
rs_err rs_gguf_get_bool(const rs_gguf *g, const char *key, int *out);
rs_err rs_gguf_get_str(const rs_gguf *g, const char *key, struct rs_gguf_str *out);

/* Array metadata: element type and count. RS_EINVAL if not an array. */
rs_err rs_gguf_get_arr(const rs_gguf *g, const char *key, enum rs_gguf_type *elem_type,
                       uint64_t *n);
/* Element i of a numeric array as double / int64 (any numeric element type). */
rs_err rs_gguf_arr_f64(const rs_gguf *g, const char *key, uint64_t i, double *out);
rs_err rs_gguf_arr_i64(const rs_gguf *g, const char *key, uint64_t i, int64_t *out);
/* Element i of a string array (O(1): offsets are indexed at open). */
rs_err rs_gguf_arr_str(const rs_gguf *g, const char *key, uint64_t i, struct rs_gguf_str *out);
/* The same by key index, for hot loops over a vocab. No checks beyond bounds. */
struct rs_gguf_str rs_gguf_arr_str_at(const rs_gguf *g, uint64_t kv_idx, uint64_t i);
/* The value of key idx exactly as encoded in the file (after its type field). */
rs_err rs_gguf_kv_raw(const rs_gguf *g, uint64_t idx, const void **raw, uint64_t *len);
/* Raw bytes of a numeric array (unaligned; read with memcpy). */
const void *rs_gguf_arr_data(const rs_gguf *g, uint64_t kv_idx);

/* --- tensors -------------------------------------------------------------- */
uint64_t rs_gguf_n_tensors(const rs_gguf *g);
int64_t rs_gguf_find_tensor(const rs_gguf *g, const char *name);
const struct rs_gguf_tensor *rs_gguf_tensor(const rs_gguf *g, uint64_t idx);

/* Bytes of one scalar metadata value of type t; 0 for STRING, ARRAY or unknown. */
size_t rs_gguf_value_size(enum rs_gguf_type t);

/* --- ggml type facts ------------------------------------------------------ */
/* Bytes per block and elements per block; 0 for an unknown type. */
size_t rs_ggml_type_size(enum rs_ggml_type t);
size_t rs_ggml_block_size(enum rs_ggml_type t);
const char *rs_ggml_type_name(enum rs_ggml_type t); /* "?" for unknown */
/* Bytes of `n` elements of type t (n must be a multiple of the block size). */
uint64_t rs_ggml_row_bytes(enum rs_ggml_type t, uint64_t n);

/* --- writer ---------------------------------------------------------------- */
typedef struct rs_gguf_writer rs_gguf_writer;

/* A v3 writer with the default alignment. *out owns it. */
rs_err rs_gguf_writer_create(rs_gguf_writer **out);
void rs_gguf_writer_destroy(rs_gguf_writer **w);

/* Metadata setters; a repeated key replaces the earlier value. Copies inputs. */
rs_err rs_gguf_writer_set_u32(rs_gguf_writer *w, const char *key, uint32_t v);
rs_err rs_gguf_writer_set_i32(rs_gguf_writer *w, const char *key, int32_t v);
rs_err rs_gguf_writer_set_u64(rs_gguf_writer *w, const char *key, uint64_t v);
rs_err rs_gguf_writer_set_f32(rs_gguf_writer *w, const char *key, float v);
rs_err rs_gguf_writer_set_bool(rs_gguf_writer *w, const char *key, int v);
rs_err rs_gguf_writer_set_str(rs_gguf_writer *w, const char *key, const char *v);
/* Numeric array of n elements of elem_type, raw little-endian bytes. */
rs_err rs_gguf_writer_set_arr(rs_gguf_writer *w, const char *key, enum rs_gguf_type elem_type,
                              const void *data, uint64_t n);
/* String array; lens[i] bytes at strs[i] (lens NULL: NUL-terminated). */
rs_err rs_gguf_writer_set_arr_str(rs_gguf_writer *w, const char *key, const char *const *strs,
                                  const uint64_t *lens, uint64_t n);
/* Copies key `idx` of reader `g` verbatim (any type, arrays included). */
rs_err rs_gguf_writer_copy_kv(rs_gguf_writer *w, const rs_gguf *g, uint64_t idx);

/*
 * Adds a tensor; `data` (nbytes = rs_ggml_row_bytes(type, ne[0]) * rows) is
 * borrowed until rs_gguf_writer_write returns. RS_EINVAL for what the reader
 * would reject (empty or over-long name, n_dims not 1..4, a zero or absurd
 * dim, unknown type, row not whole blocks), RS_EEXIST for a repeated name.
 */
rs_err rs_gguf_writer_add_tensor(rs_gguf_writer *w, const char *name, enum rs_ggml_type type,
                                 uint32_t n_dims, const uint64_t *ne, const void *data);

/*
 * Writes the file (to a temporary name, then rename), aligned to
 * general.alignment when that key is set (RS_EINVAL unless it is a u32 power
 * of two up to 65536), else to 32 bytes. RS_EIO on a write failure.
 */
rs_err rs_gguf_writer_write(rs_gguf_writer *w, const char *path);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * The malformed-GGUF corpus: a valid file is built byte by byte here (so the
 * offset of every field is known), then each case corrupts one field and
 * checks that the reader answers RS_EINVAL with a message naming that field.
 * Every strict prefix of the file is also rejected. The fuzz target
 * (tests/fuzz/fuzz_gguf.c) covers what targeted corruption does not.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/gguf.h"
#include "tests/rs_test.h"

#define CAP 4096

/* The file under construction and the offsets of the fields cases patch. */
struct file {
    uint8_t b[CAP];
    size_t n;
    size_t n_tensors, n_kv;         /* header counts */
    size_t arch_key_len, arch_val_len;
    size_t align_type, align_val;
    size_t k1_key, k2_key;          /* "test.k1" / "test.k2" key bytes */
    size_t bool_val, u64_type;
    size_t arr_elem_type, arr_n;
    size_t strs_elem_type, strs_n, strs_len1;
    size_t t_name_len[2], t_name[2], t_ndims[2], t_ne[2], t_type[2], t_off[2];
    size_t data;
};

static void put(struct file *f, const void *p, size_t n)
{
    memcpy(f->b + f->n, p, n);
    f->n += n;
}

static void put_u32(struct file *f, uint32_t v) { put(f, &v, 4); }
static void put_u64(struct file *f, uint64_t v) { put(f, &v, 8); }

static size_t put_str(struct file *f, const char *s)
{
    size_t at = f->n;
    put_u64(f, strlen(s));
    put(f, s, strlen(s));
    return at;
}

/* Writes a key and its type; returns the offset of the type field. */
static size_t put_key(struct file *f, const char *key, uint32_t type)
{
    put_str(f, key);
    size_t at = f->n;
    put_u32(f, type);
    return at;
}

static void build_kvs(struct file *f)
{
    f->arch_key_len = f->n;
    put_key(f, "general.architecture", RS_GGUF_STRING);
    f->arch_val_len = put_str(f, "llama");
    f->align_type = put_key(f, "general.alignment", RS_GGUF_U32);
    f->align_val = f->n;
    put_u32(f, 32);
    f->k1_key = put_key(f, "test.k1", RS_GGUF_BOOL) - 7;
    f->bool_val = f->n;
    f->b[f->n++] = 1;
    f->k2_key = put_key(f, "test.k2", RS_GGUF_I32) - 7;
    put_u32(f, 5);
    f->u64_type = put_key(f, "test.u64", RS_GGUF_U64);
    put_u64(f, 1ull << 40);
    put_key(f, "test.arr", RS_GGUF_ARRAY);
    f->arr_elem_type = f->n;
    put_u32(f, RS_GGUF_I32);
    f->arr_n = f->n;
    put_u64(f, 3);
    for (uint32_t i = 1; i <= 3; i++)
        put_u32(f, i);
    put_key(f, "test.strs", RS_GGUF_ARRAY);
    f->strs_elem_type = f->n;
    put_u32(f, RS_GGUF_STRING);
    f->strs_n = f->n;
    put_u64(f, 2);
    put_str(f, "a");
    f->strs_len1 = put_str(f, "bc");
}

/* Tensor "a": F32 {32, 2} at offset 0; tensor "b": Q8_0 {64, 1} at 256. */
static void build_tensor(struct file *f, int i, const char *name, uint32_t type,
                         const uint64_t ne[2], uint64_t off)
{
    f->t_name_len[i] = put_str(f, name);
    f->t_name[i] = f->t_name_len[i] + 8;
    f->t_ndims[i] = f->n;
    put_u32(f, 2);
    f->t_ne[i] = f->n;
    put_u64(f, ne[0]);
    put_u64(f, ne[1]);
    f->t_type[i] = f->n;
    put_u32(f, type);
    f->t_off[i] = f->n;
    put_u64(f, off);
}

/* The valid file; it ends exactly where tensor "b" ends (no trailing pad). */
static void build(struct file *f)
{
    memset(f, 0, sizeof(*f));
    put(f, "GGUF", 4);
    put_u32(f, 3);
    f->n_tensors = f->n;
    put_u64(f, 2);
    f->n_kv = f->n;
    put_u64(f, 7);
    build_kvs(f);
    build_tensor(f, 0, "a", RS_GGML_F32, (const uint64_t[2]){32, 2}, 0);
    build_tensor(f, 1, "b", RS_GGML_Q8_0, (const uint64_t[2]){64, 1}, 256);
    while (f->n % 32 != 0)
        f->b[f->n++] = 0;
    f->data = f->n;
    for (size_t i = 0; i < 256 + 2 * 34; i++)
        f->b[f->n++] = (uint8_t)(i * 7);
}

static void set_u32(struct file *f, size_t at, uint32_t v) { memcpy(f->b + at, &v, 4); }
static void set_u64(struct file *f, size_t at, uint64_t v) { memcpy(f->b + at, &v, 8); }

/* Opens f's bytes (exact-size copy, so ASan sees overreads); RS_EINVAL + `needle` expected. */
static int expect_reject(const struct file *f, size_t n, const char *needle)
{
    char err[256] = "";
    uint8_t *copy = malloc(n ? n : 1);
    RS_CHECK(copy != NULL);
    memcpy(copy, f->b, n);
    rs_gguf *g = (rs_gguf *)1;
    rs_err rc = rs_gguf_open_mem(copy, n, &g, err, sizeof(err));
    free(copy);
    RS_CHECK_MSG(rc == RS_EINVAL, "expected RS_EINVAL for '%s', got %d (%s)", needle, rc, err);
    RS_CHECK(g == NULL);
    RS_CHECK_MSG(strstr(err, needle) != NULL, "message '%s' does not name '%s'", err, needle);
    return 0;
}

static int test_valid_base_file_opens(void)
{
    static struct file f;
    char err[256];
    rs_gguf *g;
    build(&f);
    RS_CHECK_MSG(rs_gguf_open_mem(f.b, f.n, &g, err, sizeof(err)) == RS_OK, "%s", err);
    int b;
    int64_t v;
    RS_CHECK(rs_gguf_get_bool(g, "test.k1", &b) == RS_OK && b == 1);
    RS_CHECK(rs_gguf_arr_i64(g, "test.arr", 2, &v) == RS_OK && v == 3);
    RS_CHECK(rs_gguf_n_tensors(g) == 2 && rs_gguf_data_offset(g) == f.data);
    RS_CHECK(rs_gguf_tensor(g, 1)->nbytes == 68);
    rs_gguf_close(&g);
    return 0;
}

static int test_every_truncation_is_rejected(void)
{
    static struct file f;
    build(&f);
    for (size_t n = 0; n < f.n; n++) {
        char err[256] = "";
        uint8_t *copy = malloc(n ? n : 1);
        RS_CHECK(copy != NULL);
        memcpy(copy, f.b, n);
        rs_gguf *g;
        rs_err rc = rs_gguf_open_mem(copy, n, &g, err, sizeof(err));
        free(copy);
        RS_CHECK_MSG(rc == RS_EINVAL && err[0] != '\0', "prefix of %zu bytes: rc %d", n, rc);
    }
    return 0;
}

static int test_header_corruptions(void)
{
    static struct file f;
    build(&f);
    f.b[0] = 'X';
    RS_CHECK(expect_reject(&f, f.n, "bad magic") == 0);
    const uint32_t versions[] = {0, 1, 4, 0xffffffffu};
    for (size_t i = 0; i < 4; i++) {
        build(&f);
        set_u32(&f, 4, versions[i]);
        RS_CHECK(expect_reject(&f, f.n, "version") == 0);
    }
    const uint64_t absurd[] = {8, 1ull << 32, 1ull << 62, UINT64_MAX};
    for (size_t i = 0; i < 4; i++) {
        build(&f);
        set_u64(&f, f.n_kv, absurd[i] == 8 ? 1ull << 20 : absurd[i]);
        RS_CHECK(expect_reject(&f, f.n, "metadata count") == 0);
        build(&f);
        set_u64(&f, f.n_tensors, absurd[i] == 8 ? 1ull << 20 : absurd[i]);
        RS_CHECK(expect_reject(&f, f.n, "tensor count") == 0);
    }
    /* A count that fits the file but claims more keys than there are. */
    build(&f);
    set_u64(&f, f.n_kv, 8); /* the tensor infos then parse as a key: any clear error */
    RS_CHECK(expect_reject(&f, f.n, "") == 0);
    return 0;
}

static int test_string_lengths_past_the_end(void)
{
    static struct file f;
    const uint64_t lens[] = {4096, 1ull << 32, UINT64_MAX};
    for (size_t i = 0; i < 3; i++) {
        build(&f);
        set_u64(&f, f.arch_key_len, lens[i]);
        RS_CHECK(expect_reject(&f, f.n, "metadata key 0: name") == 0);
        build(&f);
        set_u64(&f, f.arch_val_len, lens[i]);
        RS_CHECK(expect_reject(&f, f.n, "'general.architecture': string value") == 0);
        build(&f);
        set_u64(&f, f.strs_len1, lens[i]);
        RS_CHECK(expect_reject(&f, f.n, "'test.strs': string 1") == 0);
        build(&f);
        set_u64(&f, f.t_name_len[1], lens[i]);
        RS_CHECK(expect_reject(&f, f.n, "tensor 1: name") == 0);
    }
    return 0;
}

static int test_array_counts_past_the_end(void)
{
    static struct file f;
    const uint64_t counts[] = {1000, 1ull << 40, UINT64_MAX, UINT64_MAX / 4 + 1};
    for (size_t i = 0; i < 4; i++) {
        build(&f);
        set_u64(&f, f.arr_n, counts[i]);
        RS_CHECK(expect_reject(&f, f.n, "'test.arr': array of") == 0);
        build(&f);
        set_u64(&f, f.strs_n, counts[i]);
        RS_CHECK(expect_reject(&f, f.n, "'test.strs'") == 0);
    }
    return 0;
}

static int test_unknown_value_types(void)
{
    static struct file f;
    const uint32_t types[] = {13, 100, 0x80000000u, 0xffffffffu};
    for (size_t i = 0; i < 4; i++) {
        build(&f);
        set_u32(&f, f.u64_type, types[i]);
        RS_CHECK(expect_reject(&f, f.n, "'test.u64': unknown value type") == 0);
        build(&f);
        set_u32(&f, f.arr_elem_type, types[i]);
        RS_CHECK(expect_reject(&f, f.n, "'test.arr': unknown array element type") == 0);
    }
    build(&f);
    set_u32(&f, f.arr_elem_type, RS_GGUF_ARRAY);
    RS_CHECK(expect_reject(&f, f.n, "'test.arr': nested arrays") == 0);
    build(&f);
    set_u32(&f, f.strs_elem_type, RS_GGUF_ARRAY);
    RS_CHECK(expect_reject(&f, f.n, "'test.strs': nested arrays") == 0);
    return 0;
}

static int test_bad_bool(void)
{
    static struct file f;
    const uint8_t vals[] = {2, 0x80, 0xff};
    for (size_t i = 0; i < 3; i++) {
        build(&f);
        f.b[f.bool_val] = vals[i];
        RS_CHECK(expect_reject(&f, f.n, "'test.k1': bool value") == 0);
    }
    return 0;
}

static int test_duplicate_keys_and_names(void)
{
    static struct file f;
    build(&f);
    f.b[f.k2_key + 6] = '1'; /* test.k2 -> test.k1 */
    RS_CHECK(expect_reject(&f, f.n, "'test.k1': duplicate key") == 0);
    build(&f);
    f.b[f.t_name[1]] = 'a';
    RS_CHECK(expect_reject(&f, f.n, "tensor 'a': duplicate name") == 0);
    return 0;
}

static int test_bad_alignment(void)
{
    static struct file f;
    const uint32_t aligns[] = {0, 3, 48, 1u << 17, 0xffffffffu};
    for (size_t i = 0; i < 5; i++) {
        build(&f);
        set_u32(&f, f.align_val, aligns[i]);
        RS_CHECK(expect_reject(&f, f.n, "'general.alignment'") == 0);
    }
    build(&f);
    set_u32(&f, f.align_type, RS_GGUF_I32);
    RS_CHECK(expect_reject(&f, f.n, "'general.alignment': type 5") == 0);
    /* A valid but larger alignment moves the data section past the end. */
    build(&f);
    set_u32(&f, f.align_val, 1u << 16);
    RS_CHECK(expect_reject(&f, f.n, "data section") == 0);
    return 0;
}

static int test_bad_dims(void)
{
    static struct file f;
    const uint32_t ndims[] = {0, 5, 0xffffffffu};
    for (size_t i = 0; i < 3; i++) {
        build(&f);
        set_u32(&f, f.t_ndims[0], ndims[i]);
        RS_CHECK(expect_reject(&f, f.n, "tensor 'a': n_dims") == 0);
    }
    build(&f);
    set_u64(&f, f.t_ne[0] + 8, 0);
    RS_CHECK(expect_reject(&f, f.n, "tensor 'a': dimension 1 = 0") == 0);
    build(&f);
    set_u64(&f, f.t_ne[1], 1ull << 41);
    RS_CHECK(expect_reject(&f, f.n, "tensor 'b': dimension 0") == 0);
    build(&f); /* each dim allowed, product overflows */
    set_u64(&f, f.t_ne[0], 1ull << 40);
    set_u64(&f, f.t_ne[0] + 8, 1ull << 40);
    RS_CHECK(expect_reject(&f, f.n, "tensor 'a': dimension 1") == 0);
    return 0;
}

static int test_bad_tensor_type_and_block(void)
{
    static struct file f;
    const uint32_t types[] = {4, 5, 31, 36, 1000, 0xffffffffu};
    for (size_t i = 0; i < 6; i++) {
        build(&f);
        set_u32(&f, f.t_type[0], types[i]);
        RS_CHECK(expect_reject(&f, f.n, "tensor 'a': unknown tensor type") == 0);
    }
    build(&f);
    set_u64(&f, f.t_ne[1], 48);
    RS_CHECK(expect_reject(&f, f.n, "tensor 'b': row length 48") == 0);
    return 0;
}

static int test_bad_tensor_offsets(void)
{
    static struct file f;
    const uint64_t misaligned[] = {4, 255, 1ull << 63 | 1};
    for (size_t i = 0; i < 3; i++) {
        build(&f);
        set_u64(&f, f.t_off[1], misaligned[i]);
        RS_CHECK(expect_reject(&f, f.n, "tensor 'b': offset") == 0);
    }
    const uint64_t past[] = {288, 1ull << 40, UINT64_MAX & ~31ull};
    for (size_t i = 0; i < 3; i++) {
        build(&f);
        set_u64(&f, f.t_off[1], past[i]);
        RS_CHECK(expect_reject(&f, f.n, "runs past the end") == 0);
    }
    build(&f); /* data past the end by growing the tensor instead */
    set_u64(&f, f.t_ne[1] + 8, 10);
    RS_CHECK(expect_reject(&f, f.n, "tensor 'b': offset 256 + size 680 runs past") == 0);
    return 0;
}

static int test_bad_tensor_names(void)
{
    static struct file f;
    build(&f);
    set_u64(&f, f.t_name_len[0], 0); /* the name bytes now parse as n_dims */
    RS_CHECK(expect_reject(&f, f.n, "tensor 0: name length 0") == 0);
    build(&f);
    f.b[f.t_name[1]] = '\0';
    RS_CHECK(expect_reject(&f, f.n, "tensor 1: name contains a NUL") == 0);
    /* A name longer than ggml's 64 bytes: rebuild with a long tensor name. */
    build(&f);
    static struct file g;
    memcpy(&g, &f, sizeof(f));
    g.n = f.t_name_len[1];
    put_str(&g, "b_this_name_is_far_longer_than_the_sixty_four_bytes_ggml_allows_xx");
    memcpy(g.b + g.n, f.b + f.t_ndims[1], f.n - f.t_ndims[1]);
    g.n += f.n - f.t_ndims[1];
    RS_CHECK(expect_reject(&g, g.n, "tensor 1: name length 66") == 0);
    return 0;
}

static int test_open_rejects_non_files(void)
{
    char err[256], path[512];
    rs_gguf *g;
    RS_CHECK(rs_gguf_open("/nonexistent/x.gguf", &g, err, sizeof(err)) == RS_EIO && g == NULL);
    RS_CHECK(strstr(err, "/nonexistent/x.gguf") != NULL);
    RS_CHECK(rs_gguf_open(rs_test_tmpdir(), &g, err, sizeof(err)) == RS_EIO);
    snprintf(path, sizeof(path), "%s/empty.gguf", rs_test_tmpdir());
    FILE *fp = fopen(path, "wb");
    RS_CHECK(fp != NULL);
    fclose(fp);
    RS_CHECK(rs_gguf_open(path, &g, err, sizeof(err)) == RS_EIO);
    /* And a corrupted file through the mmap path, not only from memory. */
    static struct file f;
    build(&f);
    set_u32(&f, f.t_type[0], 77);
    snprintf(path, sizeof(path), "%s/bad.gguf", rs_test_tmpdir());
    fp = fopen(path, "wb");
    RS_CHECK(fp != NULL && fwrite(f.b, 1, f.n, fp) == f.n);
    fclose(fp);
    RS_CHECK(rs_gguf_open(path, &g, err, sizeof(err)) == RS_EINVAL && g == NULL);
    RS_CHECK(strstr(err, "tensor 'a': unknown tensor type 77") != NULL);
    unlink(path);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_valid_base_file_opens),
    RS_TEST(test_every_truncation_is_rejected),
    RS_TEST(test_header_corruptions),
    RS_TEST(test_string_lengths_past_the_end),
    RS_TEST(test_array_counts_past_the_end),
    RS_TEST(test_unknown_value_types),
    RS_TEST(test_bad_bool),
    RS_TEST(test_duplicate_keys_and_names),
    RS_TEST(test_bad_alignment),
    RS_TEST(test_bad_dims),
    RS_TEST(test_bad_tensor_type_and_block),
    RS_TEST(test_bad_tensor_offsets),
    RS_TEST(test_bad_tensor_names),
    RS_TEST(test_open_rejects_non_files),
};
RS_TEST_MAIN(cases)

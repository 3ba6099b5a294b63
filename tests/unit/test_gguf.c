/* SPDX-License-Identifier: MIT */
/*
 * GGUF reader/writer: real files from refdata (F32 and F16 models, vocab-only
 * files), write/read round trips, the typed getters' conversion rules, and the
 * writer refusing what the reader would reject. Malformed files are in
 * test_gguf_malformed.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/gguf.h"
#include "tests/rs_test.h"

static int test_reads_stories260k(void)
{
    char path[1024], err[256];
    if (rs_test_refdata("stories260K.gguf", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    rs_gguf *g;
    RS_CHECK_MSG(rs_gguf_open(path, &g, err, sizeof(err)) == RS_OK, "%s", err);
    uint32_t n_layers = 0, dim = 0;
    RS_CHECK(rs_gguf_get_u32(g, "llama.block_count", &n_layers) == RS_OK && n_layers == 5);
    RS_CHECK(rs_gguf_get_u32(g, "llama.embedding_length", &dim) == RS_OK && dim == 64);
    enum rs_gguf_type et;
    uint64_t n;
    RS_CHECK(rs_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n) == RS_OK);
    RS_CHECK(et == RS_GGUF_STRING && n == 512);
    struct rs_gguf_str s;
    RS_CHECK(rs_gguf_arr_str(g, "tokenizer.ggml.tokens", 1, &s) == RS_OK);
    RS_CHECK(s.len == 3 && memcmp(s.ptr, "<s>", 3) == 0);
    int64_t t = rs_gguf_find_tensor(g, "token_embd.weight");
    RS_CHECK(t >= 0);
    const struct rs_gguf_tensor *te = rs_gguf_tensor(g, (uint64_t)t);
    RS_CHECK(te->type == RS_GGML_F32 && te->ne[0] == 64 && te->ne[1] == 512);
    RS_CHECK(te->nbytes == 64 * 512 * 4);
    rs_gguf_close(&g);
    RS_CHECK(g == NULL);
    return 0;
}

static int test_writer_round_trip(void)
{
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/rt.gguf", rs_test_tmpdir());
    rs_gguf_writer *w;
    RS_CHECK(rs_gguf_writer_create(&w) == RS_OK);
    RS_CHECK(rs_gguf_writer_set_u32(w, "a.u32", 7) == RS_OK);
    RS_CHECK(rs_gguf_writer_set_f32(w, "a.f32", 1.5f) == RS_OK);
    RS_CHECK(rs_gguf_writer_set_str(w, "a.str", "hello") == RS_OK);
    const char *strs[] = {"x", "yy", ""};
    RS_CHECK(rs_gguf_writer_set_arr_str(w, "a.strs", strs, NULL, 3) == RS_OK);
    float data[2 * 32];
    for (int i = 0; i < 64; i++)
        data[i] = (float)i;
    uint64_t ne[2] = {32, 2};
    RS_CHECK(rs_gguf_writer_add_tensor(w, "t", RS_GGML_F32, 2, ne, data) == RS_OK);
    RS_CHECK(rs_gguf_writer_write(w, path) == RS_OK);
    rs_gguf_writer_destroy(&w);
    rs_gguf *g;
    RS_CHECK_MSG(rs_gguf_open(path, &g, err, sizeof(err)) == RS_OK, "%s", err);
    uint32_t u;
    float f;
    struct rs_gguf_str s;
    RS_CHECK(rs_gguf_get_u32(g, "a.u32", &u) == RS_OK && u == 7);
    RS_CHECK(rs_gguf_get_f32(g, "a.f32", &f) == RS_OK && f == 1.5f);
    RS_CHECK(rs_gguf_get_str(g, "a.str", &s) == RS_OK && s.len == 5);
    RS_CHECK(rs_gguf_arr_str(g, "a.strs", 1, &s) == RS_OK && s.len == 2);
    RS_CHECK(rs_gguf_get_u32(g, "missing", &u) == RS_ENOENT);
    RS_CHECK(rs_gguf_get_u32(g, "a.str", &u) == RS_EINVAL);
    const struct rs_gguf_tensor *t = rs_gguf_tensor(g, 0);
    RS_CHECK(t != NULL && memcmp(t->data, data, sizeof(data)) == 0);
    rs_gguf_close(&g);
    unlink(path);
    return 0;
}

/* Reads a whole file into memory (caller frees). */
static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(len > 0 ? (size_t)len : 1);
    if (b != NULL && fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return b;
}

static int test_writer_honours_alignment_key(void)
{
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/align.gguf", rs_test_tmpdir());
    rs_gguf_writer *w;
    RS_CHECK(rs_gguf_writer_create(&w) == RS_OK);
    RS_CHECK(rs_gguf_writer_set_u32(w, "general.alignment", 256) == RS_OK);
    float a[3] = {1, 2, 3}, b[5] = {4, 5, 6, 7, 8};
    RS_CHECK(rs_gguf_writer_add_tensor(w, "a", RS_GGML_F32, 1, (uint64_t[]){3}, a) == RS_OK);
    RS_CHECK(rs_gguf_writer_add_tensor(w, "b", RS_GGML_F32, 1, (uint64_t[]){5}, b) == RS_OK);
    RS_CHECK(rs_gguf_writer_write(w, path) == RS_OK);
    rs_gguf *g;
    RS_CHECK_MSG(rs_gguf_open(path, &g, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK(rs_gguf_alignment(g) == 256 && rs_gguf_data_offset(g) % 256 == 0);
    RS_CHECK(rs_gguf_tensor(g, 1)->offset == 256);
    RS_CHECK(memcmp(rs_gguf_tensor(g, 0)->data, a, sizeof(a)) == 0);
    RS_CHECK(memcmp(rs_gguf_tensor(g, 1)->data, b, sizeof(b)) == 0);
    rs_gguf_close(&g);
    /* A value the reader would reject is refused at write time. */
    RS_CHECK(rs_gguf_writer_set_u32(w, "general.alignment", 48) == RS_OK);
    RS_CHECK(rs_gguf_writer_write(w, path) == RS_EINVAL);
    RS_CHECK(rs_gguf_writer_set_u64(w, "general.alignment", 64) == RS_OK);
    RS_CHECK(rs_gguf_writer_write(w, path) == RS_EINVAL);
    rs_gguf_writer_destroy(&w);
    RS_CHECK(w == NULL);
    unlink(path);
    return 0;
}

static int test_writer_rejects_bad_tensors(void)
{
    rs_gguf_writer *w;
    float x[64] = {0};
    RS_CHECK(rs_gguf_writer_create(&w) == RS_OK);
    RS_CHECK(rs_gguf_writer_add_tensor(w, "t", RS_GGML_F32, 2, (uint64_t[]){32, 2}, x) == RS_OK);
    RS_CHECK(rs_gguf_writer_add_tensor(w, "t", RS_GGML_F32, 1, (uint64_t[]){4}, x) == RS_EEXIST);
    RS_CHECK(rs_gguf_writer_add_tensor(w, "z", RS_GGML_F32, 2, (uint64_t[]){4, 0}, x) == RS_EINVAL);
    RS_CHECK(rs_gguf_writer_add_tensor(w, "q", RS_GGML_Q8_0, 1, (uint64_t[]){48}, x) == RS_EINVAL);
    RS_CHECK(rs_gguf_writer_add_tensor(w, "n", RS_GGML_F32, 5, (uint64_t[]){1, 1, 1, 1, 1}, x) ==
             RS_EINVAL);
    RS_CHECK(rs_gguf_writer_add_tensor(w, "", RS_GGML_F32, 1, (uint64_t[]){1}, x) == RS_EINVAL);
    RS_CHECK(rs_gguf_writer_add_tensor(w, "u", (enum rs_ggml_type)4, 1, (uint64_t[]){32}, x) ==
             RS_EINVAL);
    rs_gguf_writer_destroy(&w);
    rs_gguf_writer_destroy(&w); /* accepts the cleared pointer */
    return 0;
}

/* Writes one key of every scalar type and numeric array types, for the getters. */
static int write_typed(const char *path)
{
    rs_gguf_writer *w;
    RS_CHECK(rs_gguf_writer_create(&w) == RS_OK);
    RS_CHECK(rs_gguf_writer_set_u32(w, "u32.big", 4000000000u) == RS_OK);
    RS_CHECK(rs_gguf_writer_set_i32(w, "i32.neg", -5) == RS_OK);
    RS_CHECK(rs_gguf_writer_set_u64(w, "u64.huge", UINT64_MAX) == RS_OK);
    RS_CHECK(rs_gguf_writer_set_u64(w, "as.f64", 0) == RS_OK); /* retyped to f64 below */
    RS_CHECK(rs_gguf_writer_set_bool(w, "bool", 1) == RS_OK);
    RS_CHECK(rs_gguf_writer_set_f32(w, "f32", -2.5f) == RS_OK);
    int16_t i16[3] = {-1, 2, -300};
    uint64_t u64[2] = {7, UINT64_MAX};
    double f64[2] = {0.5, -1e300};
    RS_CHECK(rs_gguf_writer_set_arr(w, "arr.i16", RS_GGUF_I16, i16, 3) == RS_OK);
    RS_CHECK(rs_gguf_writer_set_arr(w, "arr.u64", RS_GGUF_U64, u64, 2) == RS_OK);
    RS_CHECK(rs_gguf_writer_set_arr(w, "arr.f64", RS_GGUF_F64, f64, 2) == RS_OK);
    RS_CHECK(rs_gguf_writer_set_arr(w, "arr.bad", RS_GGUF_STRING, f64, 1) == RS_EINVAL);
    RS_CHECK(rs_gguf_writer_write(w, path) == RS_OK);
    rs_gguf_writer_destroy(&w);
    /* Patch "as.f64" from u64 to f64 (same size) holding 0.25. */
    size_t n;
    uint8_t *b = slurp(path, &n);
    RS_CHECK(b != NULL);
    uint8_t *k = memmem(b, n, "as.f64", 6);
    RS_CHECK(k != NULL);
    uint32_t t = RS_GGUF_F64;
    double v = 0.25;
    memcpy(k + 6, &t, 4);
    memcpy(k + 10, &v, 8);
    FILE *f = fopen(path, "wb");
    RS_CHECK(f != NULL && fwrite(b, 1, n, f) == n);
    fclose(f);
    free(b);
    return 0;
}

static int test_typed_getters_convert_or_refuse(void)
{
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/typed.gguf", rs_test_tmpdir());
    RS_CHECK(write_typed(path) == 0);
    rs_gguf *g;
    RS_CHECK_MSG(rs_gguf_open(path, &g, err, sizeof(err)) == RS_OK, "%s", err);
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f;
    int b;
    RS_CHECK(rs_gguf_get_u32(g, "u32.big", &u32) == RS_OK && u32 == 4000000000u);
    RS_CHECK(rs_gguf_get_i32(g, "u32.big", &i32) == RS_EINVAL);
    RS_CHECK(rs_gguf_get_i32(g, "i32.neg", &i32) == RS_OK && i32 == -5);
    RS_CHECK(rs_gguf_get_u32(g, "i32.neg", &u32) == RS_EINVAL);
    RS_CHECK(rs_gguf_get_u64(g, "i32.neg", &u64) == RS_EINVAL);
    RS_CHECK(rs_gguf_get_u64(g, "u64.huge", &u64) == RS_OK && u64 == UINT64_MAX);
    RS_CHECK(rs_gguf_get_u32(g, "u64.huge", &u32) == RS_EINVAL);
    RS_CHECK(rs_gguf_get_f32(g, "as.f64", &f) == RS_OK && f == 0.25f);
    RS_CHECK(rs_gguf_get_f32(g, "f32", &f) == RS_OK && f == -2.5f);
    RS_CHECK(rs_gguf_get_f32(g, "i32.neg", &f) == RS_EINVAL);
    RS_CHECK(rs_gguf_get_bool(g, "bool", &b) == RS_OK && b == 1);
    RS_CHECK(rs_gguf_get_u32(g, "bool", &u32) == RS_EINVAL); /* bool is not an integer */
    RS_CHECK(rs_gguf_get_bool(g, "i32.neg", &b) == RS_EINVAL);
    RS_CHECK(rs_gguf_get_bool(g, "absent", &b) == RS_ENOENT);
    enum rs_gguf_type et;
    uint64_t n;
    int64_t i64;
    double d;
    struct rs_gguf_str s;
    RS_CHECK(rs_gguf_get_arr(g, "arr.i16", &et, &n) == RS_OK && et == RS_GGUF_I16 && n == 3);
    RS_CHECK(rs_gguf_get_arr(g, "f32", &et, &n) == RS_EINVAL);
    RS_CHECK(rs_gguf_arr_i64(g, "arr.i16", 2, &i64) == RS_OK && i64 == -300);
    RS_CHECK(rs_gguf_arr_f64(g, "arr.i16", 0, &d) == RS_OK && d == -1.0);
    RS_CHECK(rs_gguf_arr_i64(g, "arr.i16", 3, &i64) == RS_EINVAL);
    RS_CHECK(rs_gguf_arr_i64(g, "arr.u64", 1, &i64) == RS_EINVAL); /* does not fit */
    RS_CHECK(rs_gguf_arr_i64(g, "arr.u64", 0, &i64) == RS_OK && i64 == 7);
    RS_CHECK(rs_gguf_arr_f64(g, "arr.f64", 1, &d) == RS_OK && d == -1e300);
    RS_CHECK(rs_gguf_arr_i64(g, "arr.f64", 0, &i64) == RS_EINVAL);
    RS_CHECK(rs_gguf_arr_str(g, "arr.f64", 0, &s) == RS_EINVAL);
    RS_CHECK(rs_gguf_arr_str(g, "absent", 0, &s) == RS_ENOENT);
    rs_gguf_close(&g);
    unlink(path);
    return 0;
}

/* copy_kv of every key of a real file reproduces each value's bytes exactly. */
static int test_copy_kv_is_verbatim(void)
{
    char src_path[1024], path[512], err[256];
    if (rs_test_refdata("stories260K.gguf", src_path, sizeof(src_path)) == NULL)
        return RS_TEST_SKIP;
    snprintf(path, sizeof(path), "%s/copy.gguf", rs_test_tmpdir());
    rs_gguf *src, *dst;
    RS_CHECK_MSG(rs_gguf_open(src_path, &src, err, sizeof(err)) == RS_OK, "%s", err);
    rs_gguf_writer *w;
    RS_CHECK(rs_gguf_writer_create(&w) == RS_OK);
    for (uint64_t i = 0; i < rs_gguf_n_kv(src); i++)
        RS_CHECK(rs_gguf_writer_copy_kv(w, src, i) == RS_OK);
    RS_CHECK(rs_gguf_writer_copy_kv(w, src, rs_gguf_n_kv(src)) == RS_EINVAL);
    RS_CHECK(rs_gguf_writer_write(w, path) == RS_OK);
    rs_gguf_writer_destroy(&w);
    RS_CHECK_MSG(rs_gguf_open(path, &dst, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK(rs_gguf_n_kv(dst) == rs_gguf_n_kv(src) && rs_gguf_n_tensors(dst) == 0);
    for (uint64_t i = 0; i < rs_gguf_n_kv(src); i++) {
        const void *a, *b;
        uint64_t la, lb;
        RS_CHECK(rs_gguf_kv_raw(src, i, &a, &la) == RS_OK);
        RS_CHECK(rs_gguf_kv_raw(dst, i, &b, &lb) == RS_OK);
        RS_CHECK(la == lb && memcmp(a, b, la) == 0);
        RS_CHECK(rs_gguf_kv_type(src, i) == rs_gguf_kv_type(dst, i));
    }
    rs_gguf_close(&src);
    rs_gguf_close(&dst);
    unlink(path);
    return 0;
}

static int test_reads_f16_model_and_vocab_only_files(void)
{
    static const char *const files[] = {
        "llama-2-tiny-random.gguf",           "tokenizer/ggml-vocab-llama-spm.gguf",
        "tokenizer/ggml-vocab-deepseek-coder.gguf", "tokenizer/ggml-vocab-phi-3.gguf",
        "tokenizer/ggml-vocab-baichuan.gguf", "tokenizer/ggml-vocab-falcon.gguf",
        "tokenizer/ggml-vocab-gpt-2.gguf",    "tokenizer/ggml-vocab-gpt-neox.gguf",
        "tokenizer/ggml-vocab-mpt.gguf"};
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        char path[1024], err[256];
        if (rs_test_refdata(files[f], path, sizeof(path)) == NULL)
            return RS_TEST_SKIP;
        rs_gguf *g;
        RS_CHECK_MSG(rs_gguf_open(path, &g, err, sizeof(err)) == RS_OK, "%s: %s", path, err);
        enum rs_gguf_type et;
        uint64_t n;
        RS_CHECK(rs_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n) == RS_OK);
        RS_CHECK(et == RS_GGUF_STRING && n >= 32000);
        int64_t k = rs_gguf_find_key(g, "tokenizer.ggml.tokens");
        uint64_t total = 0;
        for (uint64_t i = 0; i < n; i++)
            total += rs_gguf_arr_str_at(g, (uint64_t)k, i).len;
        RS_CHECK(total >= n); /* every token has text */
        RS_CHECK(rs_gguf_arr_str_at(g, (uint64_t)k, n).len == 0); /* out of range: empty */
        RS_CHECK((f == 0) == (rs_gguf_n_tensors(g) > 0));
        if (f == 0) {
            const struct rs_gguf_tensor *t =
                rs_gguf_tensor(g, (uint64_t)rs_gguf_find_tensor(g, "token_embd.weight"));
            RS_CHECK(t->type == RS_GGML_F16 && t->ne[0] == 8 && t->ne[1] == 32000);
            RS_CHECK(t->nbytes == 8 * 32000 * 2);
            RS_CHECK(rs_gguf_tensor(g, rs_gguf_n_tensors(g)) == NULL);
        }
        rs_gguf_close(&g);
    }
    return 0;
}

/* GGUF v2 has the same layout as v3 (64-bit counts): a v2 header opens. */
static int test_reads_version_2(void)
{
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/v2.gguf", rs_test_tmpdir());
    RS_CHECK(write_typed(path) == 0);
    size_t n;
    uint8_t *b = slurp(path, &n);
    RS_CHECK(b != NULL);
    b[4] = 2;
    rs_gguf *g;
    RS_CHECK_MSG(rs_gguf_open_mem(b, n, &g, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK(rs_gguf_version(g) == 2 && rs_gguf_path(g)[0] == '\0');
    RS_CHECK(rs_gguf_file_size(g) == n);
    rs_gguf_close(&g);
    free(b);
    unlink(path);
    return 0;
}


/* Copies refdata file `name` to a fresh temporary path (out, cap bytes); 0 on success. */
static int copy_to_tmp(const char *name, char *out, size_t cap)
{
    char src[480];
    if (rs_test_refdata(name, src, sizeof(src)) == NULL)
        return RS_TEST_SKIP;
    snprintf(out, cap, "/tmp/rs-gguf-private-%d.gguf", (int)getpid());
    FILE *in = fopen(src, "rb"), *o = fopen(out, "wb");
    char buf[65536];
    size_t n;
    while (in != NULL && o != NULL && (n = fread(buf, 1, sizeof(buf), in)) > 0)
        fwrite(buf, 1, n, o);
    int ok = in != NULL && o != NULL;
    if (in != NULL)
        fclose(in);
    if (o != NULL)
        fclose(o);
    return ok ? 0 : 1;
}

/* The private copy holds the bytes it read: the file rewritten and truncated changes none. */
static int test_private_open_survives_rewrite_and_truncation(void)
{
    char path[128], err[256];
    int rc = copy_to_tmp("stories260K.gguf", path, sizeof(path));
    if (rc != 0)
        return rc;
    rs_gguf *shared, *priv;
    RS_CHECK(rs_gguf_open(path, &shared, err, sizeof(err)) == RS_OK);
    RS_CHECK_MSG(rs_gguf_open_private(path, &priv, err, sizeof(err)) == RS_OK, "%s", err);
    uint64_t n = rs_gguf_n_tensors(priv);
    RS_CHECK(n > 0 && n == rs_gguf_n_tensors(shared));
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        const struct rs_gguf_tensor *a = rs_gguf_tensor(priv, i), *b = rs_gguf_tensor(shared, i);
        RS_CHECK(a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0);
        for (uint64_t k = 0; k < a->nbytes; k++)
            sum += ((const unsigned char *)a->data)[k];
    }
    rs_gguf_close(&shared); /* touching a shared mapping after truncation would be SIGBUS */
    FILE *f = fopen(path, "r+b");
    RS_CHECK(f != NULL && fseek(f, (long)rs_gguf_data_offset(priv), SEEK_SET) == 0);
    for (uint64_t k = rs_gguf_data_offset(priv); k < rs_gguf_file_size(priv); k++)
        fputc(0xff, f);
    fclose(f);
    RS_CHECK(truncate(path, 4096) == 0);
    uint64_t again = 0;
    for (uint64_t i = 0; i < n; i++) {
        const struct rs_gguf_tensor *a = rs_gguf_tensor(priv, i);
        for (uint64_t k = 0; k < a->nbytes; k++)
            again += ((const unsigned char *)a->data)[k];
    }
    RS_CHECK(again == sum);
    rs_gguf_close(&priv);
    RS_CHECK(rs_gguf_open_private(path, &priv, err, sizeof(err)) == RS_EINVAL); /* now short */
    unlink(path);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_private_open_survives_rewrite_and_truncation),
    RS_TEST(test_reads_stories260k),
    RS_TEST(test_writer_round_trip),
    RS_TEST(test_writer_honours_alignment_key),
    RS_TEST(test_writer_rejects_bad_tensors),
    RS_TEST(test_typed_getters_convert_or_refuse),
    RS_TEST(test_copy_kv_is_verbatim),
    RS_TEST(test_reads_f16_model_and_vocab_only_files),
    RS_TEST(test_reads_version_2),
};
RS_TEST_MAIN(cases)

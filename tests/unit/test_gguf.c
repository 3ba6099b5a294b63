/* SPDX-License-Identifier: MIT */
/* GGUF reader/writer: real files from refdata, and a write/read round trip. */
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

static const struct rs_test_case cases[] = {
    RS_TEST(test_reads_stories260k),
    RS_TEST(test_writer_round_trip),
};
RS_TEST_MAIN(cases)

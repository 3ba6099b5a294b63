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
#include <sys/wait.h>

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

static int test_vectors_llama_spm(void)
{
    return vectors("llama-spm", "llama-spm", NULL);
}
static int test_vectors_phi3(void)
{
    return vectors("phi-3", "phi-3", NULL);
}
static int test_vectors_gpt2(void)
{
    return vectors("gpt-2", "gpt-2", NULL);
}
static int test_vectors_mpt(void)
{
    return vectors("mpt", "mpt", NULL);
}
static int test_vectors_falcon(void)
{
    return vectors("falcon", "falcon", NULL);
}
static int test_vectors_deepseek_coder(void)
{
    return vectors("deepseek-coder", "deepseek-coder", NULL);
}

/* The GPT-NeoX-20B vocab file has no tokenizer.ggml.pre; its tokenizer is mpt's (same tokens and
 * merges, README section 4), and Hugging Face runs it with the GPT-2 regex: named "gpt-neox". */
static int test_vectors_gpt_neox_with_pre_override(void)
{
    return vectors("gpt-neox", "mpt", "gpt-neox");
}

/* Encodes text with a fresh tokenizer. */
static rs_err encode(const rs_vocab *v, const char *text, size_t len, unsigned flags, int32_t *ids,
                     size_t cap, size_t *n)
{
    rs_tokenizer *t = NULL;
    rs_err rc = rs_tokenizer_create(v, &t);
    if (rc == RS_OK)
        rc = rs_tokenizer_encode(t, text, len, flags, ids, cap, n);
    rs_tokenizer_destroy(&t);
    return rc;
}

static int expect_ids(const rs_vocab *v, const char *text, unsigned flags, const int32_t *want,
                      size_t n_want)
{
    static int32_t got[MAX_IDS];
    size_t n = 0;
    RS_CHECK(encode(v, text, strlen(text), flags, got, MAX_IDS, &n) == RS_OK);
    if (n != n_want || memcmp(got, want, n * sizeof(*got)) != 0) {
        fprintf(stderr, "\"%s\" differs\n", text);
        print_ids("want", want, n_want);
        print_ids("got ", got, n);
        return 1;
    }
    return 0;
}

#define EXPECT_IDS(v, text, flags, ...)                                                            \
    do {                                                                                           \
        static const int32_t want_[] = {__VA_ARGS__};                                              \
        RS_CHECK(expect_ids(v, text, flags, want_, sizeof(want_) / sizeof(want_[0])) == 0);        \
    } while (0)

/* llama2.c test.c vectors (Meta's tokenizer, with BOS), refdata README section 6. */
static int llama2_vectors(const char *rel)
{
    rs_vocab *v = load_vocab(rel, NULL);
    if (v == NULL)
        return RS_TEST_SKIP;
    const unsigned f = RS_TOKENIZE_ADD_SPECIAL;
    EXPECT_IDS(v, "", f, 1);
    EXPECT_IDS(v, "I believe the meaning of life is", f, 1, 306, 4658, 278, 6593, 310, 2834, 338);
    EXPECT_IDS(v, "Simply put, the theory of relativity states that ", f, 1, 3439, 17632, 1925,
               29892, 278, 6368, 310, 14215, 537, 5922, 393, 29871);
    EXPECT_IDS(v,
               "A brief message congratulating the team on the launch:\n\n        Hi everyone,"
               "\n\n        I just ",
               f, 1, 319, 11473, 2643, 378, 629, 271, 18099, 278, 3815, 373, 278, 6826, 29901, 13,
               13, 4706, 6324, 14332, 29892, 13, 13, 4706, 306, 925, 29871);
    EXPECT_IDS(v,
               "Translate English to French:\n\n        sea otter => loutre de mer\n        "
               "peppermint => menthe poivr\xC3\xA9"
               "e\n        plush girafe => girafe peluche\n"
               "        cheese =>",
               f, 1, 4103, 9632, 4223, 304, 5176, 29901, 13, 13, 4706, 7205, 4932, 357, 1149, 301,
               449, 276, 316, 2778, 13, 4706, 1236, 407, 837, 524, 1149, 6042, 354, 772, 440, 29878,
               1318, 13, 4706, 715, 1878, 330, 3055, 1725, 1149, 330, 3055, 1725, 4639, 28754, 13,
               4706, 923, 968, 1149);
    rs_vocab_destroy(&v);
    return 0;
}

static int test_llama2_vectors_vocab_only(void)
{
    return llama2_vectors("tokenizer/ggml-vocab-llama-spm.gguf");
}

static int test_llama2_vectors_model_file(void)
{
    return llama2_vectors("llama-2-tiny-random.gguf");
}

static int test_control_tokens_parsed_only_on_request(void)
{
    static int32_t a[64], b[64];
    size_t na, nb;
    rs_vocab *v = load_vocab("tokenizer/ggml-vocab-llama-spm.gguf", NULL);
    if (v == NULL)
        return RS_TEST_SKIP;
    RS_CHECK(encode(v, "<s>hi</s>", 9, 0, a, 64, &na) == RS_OK);
    for (size_t i = 0; i < na; i++)
        RS_CHECK(a[i] != 1 && a[i] != 2); /* plain text */
    RS_CHECK(encode(v, "<s>hi</s>", 9, RS_TOKENIZE_PARSE_SPECIAL, a, 64, &na) == RS_OK);
    RS_CHECK(encode(v, "hi", 2, 0, b, 64, &nb) == RS_OK);
    RS_CHECK(na == nb + 2 && a[0] == 1 && a[na - 1] == 2 && memcmp(a + 1, b, nb * 4) == 0);
    rs_vocab_destroy(&v);
    v = load_vocab("tokenizer/ggml-vocab-gpt-2.gguf", NULL);
    if (v == NULL)
        return RS_TEST_SKIP;
    RS_CHECK(encode(v, "a<|endoftext|>", 14, 0, a, 64, &na) == RS_OK && na > 2);
    for (size_t i = 0; i < na; i++)
        RS_CHECK(a[i] != 50256);
    EXPECT_IDS(v, "a<|endoftext|>b", RS_TOKENIZE_PARSE_SPECIAL, 64, 50256, 65);
    rs_vocab_destroy(&v);
    return 0;
}

static int test_add_special_follows_vocab_flags(void)
{
    rs_vocab *v = load_vocab("tokenizer/ggml-vocab-llama-spm.gguf", NULL);
    if (v == NULL)
        return RS_TEST_SKIP;
    EXPECT_IDS(v, "Hello", RS_TOKENIZE_ADD_SPECIAL, 1, 15043);
    EXPECT_IDS(v, "Hello", 0, 15043);
    rs_vocab_destroy(&v);
    v = load_vocab("tokenizer/ggml-vocab-gpt-2.gguf", NULL); /* add_bos absent: false */
    if (v == NULL)
        return RS_TEST_SKIP;
    EXPECT_IDS(v, "Hello", RS_TOKENIZE_ADD_SPECIAL, 15496);
    rs_vocab_destroy(&v);
    v = load_vocab("tokenizer/ggml-vocab-deepseek-coder.gguf", NULL); /* add_bos_token = true */
    if (v == NULL)
        return RS_TEST_SKIP;
    EXPECT_IDS(v, "", RS_TOKENIZE_ADD_SPECIAL, 32013);
    rs_vocab_destroy(&v);
    return 0;
}

static int test_small_output_buffer_reports_needed_count(void)
{
    rs_vocab *v = load_vocab("tokenizer/ggml-vocab-llama-spm.gguf", NULL);
    if (v == NULL)
        return RS_TEST_SKIP;
    int32_t ids[2] = {-7, -7};
    size_t n = 0;
    RS_CHECK(encode(v, "Hello world", 11, 0, ids, 1, &n) == RS_ERANGE && n == 2);
    RS_CHECK(ids[0] == 15043 && ids[1] == -7);
    RS_CHECK(encode(v, "Hello world", 11, 0, NULL, 0, &n) == RS_ERANGE && n == 2);
    RS_CHECK(encode(v, NULL, 0, 0, NULL, 0, &n) == RS_OK && n == 0);
    RS_CHECK(encode(v, NULL, 3, 0, ids, 2, &n) == RS_EINVAL);
    rs_vocab_destroy(&v);
    return 0;
}

static uint64_t rng = 0x853C49E6748FEA9Bull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* Concatenated pieces of ids (special tokens shown). */
static size_t concat_pieces(const rs_vocab *v, const int32_t *ids, size_t n, char *out)
{
    size_t o = 0, len;
    for (size_t i = 0; i < n; i++) {
        const char *p = rs_vocab_token_piece(v, ids[i], 1, &len);
        memcpy(out + o, p, len);
        o += len;
    }
    return o;
}

/* Arbitrary bytes (invalid UTF-8 included) come back exactly from the ids' pieces. */
static int lossless(const char *rel, int spm)
{
    rs_vocab *v = load_vocab(rel, NULL);
    if (v == NULL)
        return RS_TEST_SKIP;
    static char text[512], back[2048];
    static int32_t ids[MAX_IDS];
    for (int it = 0; it < 300; it++) {
        size_t len = rnd(200), n = 0;
        for (size_t i = 0; i < len; i++) {
            text[i] = (char)rnd(256);
            if (spm && (uint8_t)text[i] == 0xE2) /* no U+2581 in the input: SPM reads it as space */
                text[i] = 'x';
        }
        RS_CHECK(encode(v, text, len, 0, ids, MAX_IDS, &n) == RS_OK);
        size_t m = concat_pieces(v, ids, n, back);
        size_t skip = spm && len > 0 ? 1 : 0; /* the space SentencePiece prefixes */
        RS_CHECK_MSG(m == len + skip && memcmp(back + skip, text, len) == 0 &&
                         (!skip || back[0] == ' '),
                     "iteration %d: %zu bytes in, %zu out", it, len, m);
    }
    rs_vocab_destroy(&v);
    return 0;
}

static int test_invalid_utf8_is_lossless_gpt2(void)
{
    return lossless("tokenizer/ggml-vocab-gpt-2.gguf", 0);
}

static int test_invalid_utf8_is_lossless_llama_spm(void)
{
    return lossless("tokenizer/ggml-vocab-llama-spm.gguf", 1);
}

/* Enough distinct words to refill the word cache several times, then a check text. */
static int cache_consistency(const char *rel)
{
    rs_vocab *v = load_vocab(rel, NULL);
    if (v == NULL)
        return RS_TEST_SKIP;
    size_t cap = 1 << 20, len = 0;
    char *big = malloc(cap);
    static int32_t a[MAX_IDS], b[MAX_IDS];
    for (unsigned w = 0; len + 32 < cap && w < 60000; w++)
        len += (size_t)snprintf(big + len, cap - len, "w%xq%u ", w * 2654435761u, w % 7);
    const char *check = "The cache must not change what these words become: w1q1 w2q2 Hello.";
    rs_tokenizer *t = NULL;
    size_t na, nb, n_big;
    RS_CHECK(rs_tokenizer_create(v, &t) == RS_OK);
    RS_CHECK(rs_tokenizer_encode(t, big, len, 0, NULL, 0, &n_big) == RS_ERANGE && n_big > 60000);
    RS_CHECK(rs_tokenizer_encode(t, check, strlen(check), 0, a, MAX_IDS, &na) == RS_OK);
    RS_CHECK(rs_tokenizer_encode(t, check, strlen(check), 0, a, MAX_IDS, &na) == RS_OK);
    rs_tokenizer_destroy(&t);
    RS_CHECK(encode(v, check, strlen(check), 0, b, MAX_IDS, &nb) == RS_OK);
    RS_CHECK(na == nb && memcmp(a, b, na * sizeof(*a)) == 0);
    free(big);
    rs_vocab_destroy(&v);
    return 0;
}

static int test_word_cache_keeps_results_gpt2(void)
{
    return cache_consistency("tokenizer/ggml-vocab-gpt-2.gguf");
}

static int test_word_cache_keeps_results_llama_spm(void)
{
    return cache_consistency("tokenizer/ggml-vocab-llama-spm.gguf");
}

/* Runs `ringserve-tokenize ARGS < input`; returns its exit status, stdout in out. */
static int run_tool(const char *args, const char *input, size_t in_len, char *out, size_t cap,
                    size_t *out_len)
{
    char in_path[512], cmd[2048];
    snprintf(in_path, sizeof(in_path), "%s/tool-input", rs_test_tmpdir());
    FILE *f = fopen(in_path, "wb");
    if (f == NULL || fwrite(input, 1, in_len, f) != in_len) {
        if (f)
            fclose(f);
        return -1;
    }
    fclose(f);
    snprintf(cmd, sizeof(cmd), "'%s/ringserve-tokenize' %s < '%s' 2>/dev/null", rs_test_bindir(),
             args, in_path);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return -1;
    *out_len = fread(out, 1, cap, p);
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int test_tool_encodes_decodes_and_rejects_bad_input(void)
{
    char vocab[1024], args[1400], out[4096];
    size_t n;
    if (rs_test_refdata("tokenizer/ggml-vocab-llama-spm.gguf", vocab, sizeof(vocab)) == NULL)
        return RS_TEST_SKIP;
    snprintf(args, sizeof(args), "-m '%s'", vocab);
    RS_CHECK(run_tool(args, "Hello world", 11, out, sizeof(out), &n) == 0);
    RS_CHECK(n == 11 && memcmp(out, "15043 3186\n", 11) == 0);
    snprintf(args, sizeof(args), "-m '%s' --bos", vocab);
    RS_CHECK(run_tool(args, "Hello world", 11, out, sizeof(out), &n) == 0);
    RS_CHECK(n == 13 && memcmp(out, "1 15043 3186\n", 13) == 0);
    snprintf(args, sizeof(args), "-m '%s' --decode", vocab);
    RS_CHECK(run_tool(args, "1 15043 3186\n", 13, out, sizeof(out), &n) == 0);
    RS_CHECK(n == 11 && memcmp(out, "Hello world", 11) == 0);
    /* invalid UTF-8: encoded as byte tokens, warned about, never a crash */
    snprintf(args, sizeof(args), "-m '%s'", vocab);
    RS_CHECK(run_tool(args, "a\xFF", 2, out, sizeof(out), &n) == 0);
    RS_CHECK(n == 8 && memcmp(out, "263 258\n", 8) == 0); /* U+2581 "a", then <0xFF> */
    snprintf(args, sizeof(args), "-m '%s' --decode", vocab);
    RS_CHECK(run_tool(args, "1 32000", 7, out, sizeof(out), &n) == 1); /* id out of range */
    RS_CHECK(run_tool(args, "1 x", 3, out, sizeof(out), &n) == 1);
    RS_CHECK(run_tool("", "", 0, out, sizeof(out), &n) == 2); /* no -m */
    RS_CHECK(run_tool("-m /nonexistent.gguf", "", 0, out, sizeof(out), &n) == 1);
    snprintf(args, sizeof(args), "-m '%s' --bogus", vocab);
    RS_CHECK(run_tool(args, "", 0, out, sizeof(out), &n) == 2);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_vectors_llama_spm),
    RS_TEST(test_vectors_phi3),
    RS_TEST(test_vectors_gpt2),
    RS_TEST(test_vectors_mpt),
    RS_TEST(test_vectors_falcon),
    RS_TEST(test_vectors_deepseek_coder),
    RS_TEST(test_vectors_gpt_neox_with_pre_override),
    RS_TEST(test_llama2_vectors_vocab_only),
    RS_TEST(test_llama2_vectors_model_file),
    RS_TEST(test_control_tokens_parsed_only_on_request),
    RS_TEST(test_add_special_follows_vocab_flags),
    RS_TEST(test_small_output_buffer_reports_needed_count),
    RS_TEST(test_invalid_utf8_is_lossless_gpt2),
    RS_TEST(test_invalid_utf8_is_lossless_llama_spm),
    RS_TEST(test_word_cache_keeps_results_gpt2),
    RS_TEST(test_word_cache_keeps_results_llama_spm),
    RS_TEST(test_tool_encodes_decodes_and_rejects_bad_input),
};
RS_TEST_MAIN(cases)

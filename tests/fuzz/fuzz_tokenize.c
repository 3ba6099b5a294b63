/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target over the encoders and the vocab loader. Byte 0 picks a
 * mode: 0..2 encode the rest with the llama-spm, gpt-2 or deepseek-coder
 * vocab from refdata (RS_REFDATA, else beside the source tree), byte 1 the
 * flags; 3 loads the rest as a GGUF vocab and encodes with it. Checks, beyond
 * the sanitizers: every id is in range, byte-level BPE gives back the input
 * bytes exactly, SentencePiece too up to its space rules, and decoding any
 * result yields valid UTF-8.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/detok.h"
#include "common/gguf.h"
#include "common/log.h"
#include "common/tokenizer.h"
#include "common/utf8.h"
#include "common/vocab.h"

#define N_VOCABS 3
#define MAX_IDS (1 << 17)

static const char *const VOCAB_FILES[N_VOCABS] = {"tokenizer/ggml-vocab-llama-spm.gguf",
                                                  "tokenizer/ggml-vocab-gpt-2.gguf",
                                                  "tokenizer/ggml-vocab-deepseek-coder.gguf"};

static rs_vocab *vocabs[N_VOCABS];
static rs_tokenizer *toks[N_VOCABS];
static int32_t ids[MAX_IDS];
static char buf[3 * MAX_IDS * 8];

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_tokenize: %s\n", what);
        __builtin_trap();
    }
}

static void init(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    rs_log_set_level(
        (enum rs_log_level)(RS_LOG_ERROR + 1)); /* broken inputs are the point: no log */
    const char *root = getenv("RS_REFDATA");
    for (int i = 0; i < N_VOCABS; i++) {
        char path[1024], err[256];
        snprintf(path, sizeof(path), "%s/%s",
                 root && *root ? root : RS_SOURCE_DIR "/../shared/refdata", VOCAB_FILES[i]);
        if (rs_vocab_load_file(path, &vocabs[i], err, sizeof(err)) != RS_OK ||
            rs_tokenizer_create(vocabs[i], &toks[i]) != RS_OK)
            fprintf(stderr, "fuzz_tokenize: %s unavailable (%s): mode %d is skipped\n", path, err,
                    i);
    }
}

/* Encodes and checks ids and the decoded text; returns the id count. */
static size_t encode_checked(const rs_vocab *v, rs_tokenizer *t, const char *text, size_t len,
                             unsigned flags)
{
    size_t n = 0, m = 0;
    rs_err rc = rs_tokenizer_encode(t, text, len, flags, ids, MAX_IDS, &n);
    check(rc == RS_OK || (rc == RS_ERANGE && n > MAX_IDS), "encode failed");
    if (rc != RS_OK)
        return 0;
    for (size_t i = 0; i < n; i++)
        check(ids[i] >= 0 && (uint32_t)ids[i] < rs_vocab_n_tokens(v), "id out of range");
    rc = rs_detok_decode(v, ids, n, RS_DETOK_SPECIAL, buf, sizeof(buf), &m);
    check(rc == RS_OK && rs_utf8_valid(buf, m), "decoded text is not valid UTF-8");
    return n;
}

/* Concatenated pieces (special tokens shown) into buf; returns the length. */
static size_t pieces(const rs_vocab *v, size_t n)
{
    size_t o = 0, len;
    for (size_t i = 0; i < n; i++) {
        const char *p = rs_vocab_token_piece(v, ids[i], 1, &len);
        memcpy(buf + o, p, len);
        o += len;
    }
    return o;
}

static void fuzz_encode(int which, const uint8_t *data, size_t size)
{
    if (vocabs[which] == NULL || size < 1)
        return;
    unsigned flags = data[0] & (RS_TOKENIZE_ADD_SPECIAL | RS_TOKENIZE_PARSE_SPECIAL);
    const char *text = (const char *)data + 1;
    size_t len = size - 1, n = encode_checked(vocabs[which], toks[which], text, len, flags);
    if (which == 1 && !(flags & RS_TOKENIZE_ADD_SPECIAL)) { /* byte-level: exact bytes back */
        size_t m = pieces(vocabs[which], n);
        check(m == len && memcmp(buf, text, len) == 0, "gpt-2 pieces differ from the input");
    }
    if (which == 0 && flags == 0 && len > 0 && memmem(text, len, "\xE2\x96\x81", 3) == NULL) {
        size_t m = pieces(vocabs[which], n); /* the prefix space, then the input */
        check(m == len + 1 && buf[0] == ' ' && memcmp(buf + 1, text, len) == 0,
              "llama pieces differ from the input");
    }
}

static void fuzz_vocab(const uint8_t *data, size_t size)
{
    rs_gguf *g = NULL;
    rs_vocab *v = NULL;
    rs_tokenizer *t = NULL;
    if (rs_gguf_open_mem(data, size, &g, NULL, 0) != RS_OK)
        return;
    if (rs_vocab_load(g, &v, NULL, 0) == RS_OK && rs_tokenizer_create(v, &t) == RS_OK) {
        static const char sample[] =
            "Hello, world! 123 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\xA6\x99\n\t<s>";
        encode_checked(v, t, sample, sizeof(sample) - 1, RS_TOKENIZE_ADD_SPECIAL);
        encode_checked(v, t, sample, sizeof(sample) - 1, RS_TOKENIZE_PARSE_SPECIAL);
        size_t len = size < 256 ? size : 256; /* the file's own bytes as text, too */
        encode_checked(v, t, (const char *)data, len, 0);
    }
    rs_tokenizer_destroy(&t);
    rs_vocab_destroy(&v);
    rs_gguf_close(&g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init();
    if (size < 1)
        return 0;
    int mode = data[0] % 4;
    if (mode < N_VOCABS)
        fuzz_encode(mode, data + 1, size - 1);
    else
        fuzz_vocab(data + 1, size - 1);
    return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target over the incremental detokenizer and the stop-string
 * matcher. Input: byte 0 = vocab (bit 0: llama-spm / gpt-2 from refdata),
 * RS_DETOK_SPECIAL (bit 1); byte 1 = number of stop strings (0..3), each then
 * given as a length byte (1..8) and its bytes; the rest = token ids (16-bit,
 * modulo the vocab size). Checks: fed one at a time with the state moved
 * through a byte copy, the text equals rs_detok_decode's and is valid UTF-8;
 * the stop-string matcher, fed the detokenizer's deltas, releases exactly the
 * text before the first stop string to complete.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/detok.h"
#include "common/log.h"
#include "common/stopstr.h"
#include "common/utf8.h"
#include "common/vocab.h"

#define MAX_IDS 8192

static rs_vocab *vocabs[2];
static int32_t ids[MAX_IDS];
static char whole[1 << 22], stepped[1 << 22], released[1 << 22];

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_detok: %s\n", what);
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
    const char *files[2] = {"tokenizer/ggml-vocab-llama-spm.gguf",
                            "tokenizer/ggml-vocab-gpt-2.gguf"};
    for (int i = 0; i < 2; i++) {
        char path[1024], err[256];
        snprintf(path, sizeof(path), "%s/%s",
                 root && *root ? root : RS_SOURCE_DIR "/../shared/refdata", files[i]);
        if (rs_vocab_load_file(path, &vocabs[i], err, sizeof(err)) != RS_OK)
            fprintf(stderr, "fuzz_detok: %s unavailable (%s)\n", path, err);
    }
}

/* The text before the stop occurrence that ends first (ties: longer), or all of it. */
static size_t expected_release(const char *t, size_t n, const char *const *stops,
                               const size_t *lens, size_t n_stops)
{
    for (size_t end = 1; end <= n; end++) {
        size_t best = SIZE_MAX;
        for (size_t i = 0; i < n_stops; i++)
            if (lens[i] <= end && memcmp(t + end - lens[i], stops[i], lens[i]) == 0 &&
                end - lens[i] < best)
                best = end - lens[i];
        if (best != SIZE_MAX)
            return best;
    }
    return n;
}

struct stops {
    const char *s[3];
    size_t len[3], n;
};

static size_t parse_stops(const uint8_t *d, size_t size, struct stops *st)
{
    size_t p = 1;
    st->n = size > 0 ? d[0] % 4 : 0;
    for (size_t i = 0; i < st->n; i++) {
        size_t l = p < size ? 1 + d[p] % 8 : 1;
        if (p + 1 + l > size) {
            st->n = i;
            break;
        }
        st->s[i] = (const char *)d + p + 1;
        st->len[i] = l;
        p += 1 + l;
    }
    return p < size ? p : size;
}

/* Detokenizes step by step (state through a byte copy) and through the stop matcher. */
static void run(const rs_vocab *v, unsigned flags, size_t n, const struct stops *st)
{
    struct rs_detok d;
    struct rs_stopstr ss;
    unsigned char saved[sizeof(d)];
    size_t ns = 0, nr = 0, step, out, max = rs_detok_max_out(v), nw = 0;
    char *delta = malloc(max), *rel = malloc(max + RS_STOPSTR_MAX_LEN);
    int which;
    rs_detok_init(&d, v, RS_VOCAB_NONE, flags);
    rs_stopstr_init(&ss);
    for (size_t i = 0; i <= n; i++) {
        memcpy(saved, &d, sizeof(d));
        memset(&d, 0x5A, sizeof(d));
        memcpy(&d, saved, sizeof(d));
        rs_err rc = i < n ? rs_detok_feed(v, &d, ids[i], delta, max, &step)
                          : rs_detok_flush(v, &d, delta, max, &step);
        check(rc == RS_OK, "feed failed");
        memcpy(stepped + ns, delta, step);
        ns += step;
        rc = rs_stopstr_feed(&ss, st->s, st->len, st->n, delta, step, rel, max + RS_STOPSTR_MAX_LEN,
                             &out, &which);
        check(rc == RS_OK, "stop feed failed");
        memcpy(released + nr, rel, out);
        nr += out;
    }
    check(rs_stopstr_finish(&ss, rel, max + RS_STOPSTR_MAX_LEN, &out) == RS_OK, "finish failed");
    memcpy(released + nr, rel, out);
    nr += out;
    check(rs_detok_decode(v, ids, n, flags, whole, sizeof(whole), &nw) == RS_OK, "decode failed");
    check(nw == ns && memcmp(whole, stepped, ns) == 0, "stepwise text differs from one-shot");
    check(rs_utf8_valid(stepped, ns), "detokenized text is not valid UTF-8");
    size_t want = expected_release(stepped, ns, st->s, st->len, st->n);
    check(nr == want && memcmp(released, stepped, nr) == 0, "stop matcher released wrong text");
    free(delta);
    free(rel);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init();
    if (size < 2 || vocabs[data[0] & 1] == NULL)
        return 0;
    const rs_vocab *v = vocabs[data[0] & 1];
    unsigned flags = (data[0] & 2) ? RS_DETOK_SPECIAL : 0;
    struct stops st;
    size_t p = 1 + parse_stops(data + 1, size - 1, &st), n = 0;
    for (; p + 1 < size && n < MAX_IDS; p += 2)
        ids[n++] = (int32_t)((data[p] | (data[p + 1] << 8)) % rs_vocab_n_tokens(v));
    run(v, flags, n, &st);
    return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * bench_tokenize: single-core speed of the tokenizer and detokenizer on one
 * text file for each vocab given. Prints, per vocab: load time; encode MB/s
 * and tokens/s for the whole text as one call with a fresh tokenizer (cold
 * word cache) and as 4 KiB requests through one long-lived tokenizer (as
 * tokenizerd runs); streaming decode MB/s and tokens/s (one rs_detok_feed
 * per token, as postprocd); and, as the floor any tokenizer pass pays, a
 * UTF-8 validation pass over the same bytes measured in the same run, with
 * encode's share of it. Each figure is the best of --repeat runs.
 * Leaves out: multi-threaded throughput (one tokenizer per thread scales
 * with cores; the vocab is shared read-only).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/detok.h"
#include "common/log.h"
#include "common/opt.h"
#include "common/tokenizer.h"
#include "common/utf8.h"
#include "common/vocab.h"

#define REQUEST_BYTES 4096

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n > 0 ? malloc((size_t)n) : NULL;
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = buf ? (size_t)n : 0;
    return buf;
}

static double secs(uint64_t t0)
{
    return (double)(rs_clock_ns() - t0) / 1e9;
}

/* Seconds for one fresh-tokenizer encode of the whole text; ids into *ids (grown). */
static double encode_whole(const rs_vocab *v, const char *text, size_t len, int32_t **ids,
                           size_t *cap, size_t *n)
{
    rs_tokenizer *t = NULL;
    if (rs_tokenizer_create(v, &t) != RS_OK)
        return -1;
    uint64_t t0 = rs_clock_ns();
    rs_err rc = rs_tokenizer_encode(t, text, len, 0, *ids, *cap, n);
    double s = secs(t0);
    if (rc == RS_ERANGE) { /* first run: size the buffer, then time again */
        *cap = *n;
        *ids = realloc(*ids, *cap * sizeof(**ids));
        rs_tokenizer_destroy(&t);
        return encode_whole(v, text, len, ids, cap, n);
    }
    rs_tokenizer_destroy(&t);
    return rc == RS_OK ? s : -1;
}

/* Seconds to encode the text as consecutive REQUEST_BYTES requests (cut at UTF-8 boundaries). */
static double encode_requests(rs_tokenizer *t, const char *text, size_t len, int32_t *ids,
                              size_t cap, size_t *n_total)
{
    uint64_t t0 = rs_clock_ns();
    *n_total = 0;
    for (size_t off = 0; off < len;) {
        size_t m = len - off < REQUEST_BYTES ? len - off : REQUEST_BYTES, n;
        while (off + m < len && ((uint8_t)text[off + m] & 0xC0) == 0x80)
            m++;
        if (rs_tokenizer_encode(t, text + off, m, 0, ids, cap, &n) != RS_OK)
            return -1;
        *n_total += n;
        off += m;
    }
    return secs(t0);
}

/* Seconds to detokenize ids one token at a time; *out_bytes gets the text length. */
static double decode_stream(const rs_vocab *v, const int32_t *ids, size_t n, size_t *out_bytes)
{
    struct rs_detok d;
    size_t cap = rs_detok_max_out(v), step, total = 0;
    char *out = malloc(cap);
    rs_detok_init(&d, v, RS_VOCAB_NONE, 0);
    uint64_t t0 = rs_clock_ns();
    for (size_t i = 0; i < n; i++) {
        rs_detok_feed(v, &d, ids[i], out, cap, &step);
        total += step;
    }
    rs_detok_flush(v, &d, out, cap, &step);
    double s = secs(t0);
    free(out);
    *out_bytes = total + step;
    return s;
}

static double best(double a, double b)
{
    return a < 0 || (b >= 0 && b < a) ? b : a;
}

static int bench_vocab(const char *path, const char *text, size_t len, int repeat,
                       double validate_s)
{
    char err[512];
    rs_vocab *v = NULL;
    uint64_t t0 = rs_clock_ns();
    if (rs_vocab_load_file(path, &v, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "bench_tokenize: %s: %s\n", path, err);
        return 1;
    }
    double load_s = secs(t0);
    size_t cap = len / 2 + 16, n = 0, n_req = 0, out_bytes = 0;
    int32_t *ids = malloc(cap * sizeof(*ids)),
            *req_ids = malloc(2 * REQUEST_BYTES * sizeof(int32_t));
    double whole = -1, req = -1, dec = -1;
    rs_tokenizer *t = NULL;
    rs_tokenizer_create(v, &t);
    for (int r = 0; r < repeat; r++) {
        whole = best(whole, encode_whole(v, text, len, &ids, &cap, &n));
        req = best(req, encode_requests(t, text, len, req_ids, 2 * REQUEST_BYTES, &n_req));
        dec = best(dec, decode_stream(v, ids, n, &out_bytes));
    }
    double mb = (double)len / 1e6;
    printf("%s\n  vocab: %u tokens (%s%s), loaded in %.1f ms\n", path, rs_vocab_n_tokens(v),
           rs_vocab_kind(v) == RS_VOCAB_SPM ? "SentencePiece" : "byte-level BPE, pre ",
           rs_vocab_pre(v), load_s * 1e3);
    printf("  encode, whole text, fresh tokenizer: %7.2f MB/s %10.0f tokens/s  (%zu tokens, %.2f "
           "bytes/token)\n",
           mb / whole, (double)n / whole, n, (double)len / (double)n);
    printf("  encode, %d B requests, one tokenizer: %6.2f MB/s %10.0f tokens/s\n", REQUEST_BYTES,
           mb / req, (double)n_req / req);
    printf("  decode, streaming one token a call:  %7.2f MB/s %10.0f tokens/s  (%zu bytes out)\n",
           (double)out_bytes / 1e6 / dec, (double)n / dec, out_bytes);
    printf("  encode (whole) runs at %.1f%% of a UTF-8 validation pass over the same text\n",
           100.0 * validate_s / whole);
    free(ids);
    free(req_ids);
    rs_tokenizer_destroy(&t);
    rs_vocab_destroy(&v);
    return 0;
}

int main(int argc, char **argv)
{
    int repeat = 3, first;
    static const struct rs_opt opts[] = {
        {.name = "repeat", .short_name = 'r', .kind = RS_OPT_INT, .off = 0, .min = 1,
         .max = 1000, .arg = "N", .help = "runs per figure, the best is shown (default 3)"},
        {0},
    };
    struct rs_opt_group g = {NULL, opts, &repeat, NULL};
    int code = rs_opt_main("bench_tokenize",
                           "usage: bench_tokenize [--repeat N] TEXT VOCAB.gguf...\n", &g, 1,
                           argc, argv, RS_OPT_OPERANDS, &first);
    if (code >= 0)
        return code;
    if (argc - first < 2) {
        fprintf(stderr, "bench_tokenize: give TEXT and at least one VOCAB.gguf (see --help)\n");
        return 2;
    }
    rs_log_set_level(RS_LOG_ERROR);
    size_t len;
    char *text = read_file(argv[first], &len);
    if (text == NULL) {
        fprintf(stderr, "bench_tokenize: cannot read %s\n", argv[first]);
        return 1;
    }
    double validate_s = -1;
    for (int r = 0; r < repeat; r++) {
        uint64_t t0 = rs_clock_ns();
        size_t ok = rs_utf8_valid_prefix(text, len);
        validate_s = best(validate_s, secs(t0));
        if (r == 0 && ok < len)
            printf("note: text is valid UTF-8 only up to byte %zu\n", ok);
    }
    printf("text: %s, %.2f MB; single core; best of %d\n", argv[first], (double)len / 1e6, repeat);
    printf("UTF-8 validation pass: %.0f MB/s\n", (double)len / 1e6 / validate_s);
    int rc = 0;
    for (int i = first + 1; i < argc; i++)
        rc |= bench_vocab(argv[i], text, len, repeat, validate_s);
    free(text);
    return rc;
}

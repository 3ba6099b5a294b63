/* SPDX-License-Identifier: MIT */
/*
 * ringserve-tokenize: the model's tokenizer on the command line, for
 * operators checking a GGUF's vocab and for tests. Encodes UTF-8 text from
 * stdin to ids (one line, space-separated), or decodes ids from stdin to text
 * (printed exactly, no newline added). Input that is not valid UTF-8 is
 * encoded losslessly where the vocab allows (byte tokens), with a warning.
 * Leaves out chat templates: it tokenizes exactly the bytes it is given.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/detok.h"
#include "common/opt.h"
#include "common/tokenizer.h"
#include "common/utf8.h"
#include "common/vocab.h"

#define MAX_INPUT (1ull << 30)

struct opts {
    const char *model, *pre;
    int bos, special, decode, info;
};

#define OPT(f) offsetof(struct opts, f)
static const struct rs_opt opt_table[] = {
    {.name = "model", .short_name = 'm', .kind = RS_OPT_ARG, .off = OPT(model), .arg = "FILE",
     .help = "GGUF model or vocab-only file whose vocab to use"},
    {.name = "bos", .kind = RS_OPT_FLAG, .off = OPT(bos), .val = 1,
     .help = "prepend the vocab's BOS token (otherwise no BOS/EOS is added)"},
    {.name = "special", .kind = RS_OPT_FLAG, .off = OPT(special), .val = 1,
     .help = "control-token text in the input (e.g. <|eot_id|>) becomes that\n"
             "token; with --decode, control tokens print as their text"},
    {.name = "pre", .kind = RS_OPT_ARG, .off = OPT(pre), .arg = "NAME",
     .help = "override tokenizer.ggml.pre (byte-level BPE vocabs)"},
    {.name = "decode", .kind = RS_OPT_FLAG, .off = OPT(decode), .val = 1,
     .help = "read whitespace-separated ids on stdin, print the text"},
    {.name = "info", .kind = RS_OPT_FLAG, .off = OPT(info), .val = 1,
     .help = "print the vocab's kind, size and special tokens"},
    {0},
};

static const char usage[] =
    "usage: ringserve-tokenize -m FILE.gguf [--bos] [--special] [--pre NAME] [--decode | "
    "--info]\n"
    "Reads UTF-8 text on stdin and prints its token ids on one line, space-separated.\n";

/* 0 to run, 1 after --help (exit 0), 2 after printing an error. */
static int parse_args(int argc, char **argv, struct opts *o)
{
    char err[256];
    struct rs_opt_group g = {NULL, opt_table, o, NULL};
    memset(o, 0, sizeof(*o));
    int r = rs_opt_parse(&g, 1, argc, argv, 0, NULL, err, sizeof(err));
    if (r == RS_OPT_HELP) {
        rs_opt_help(stdout, usage, &g, 1);
        return 1;
    }
    if (r == RS_OPT_OK && o->model == NULL)
        snprintf(err, sizeof(err), "-m FILE.gguf is required (text is read from stdin)"),
            r = RS_OPT_ERROR;
    if (r == RS_OPT_OK && (o->decode + o->info > 1 || (o->bos && (o->decode || o->info))))
        snprintf(err, sizeof(err), "--decode, --info and --bos exclude each other"),
            r = RS_OPT_ERROR;
    if (r != RS_OPT_OK) {
        fprintf(stderr, "ringserve-tokenize: %s\n", err);
        return 2;
    }
    return 0;
}

/* All of stdin; NULL on a read error or when larger than MAX_INPUT. */
static char *read_stdin(size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1); /* + 1: a terminating NUL for --decode's parser */
    while (buf != NULL) {
        n += fread(buf + n, 1, cap - n, stdin);
        if (n < cap)
            break;
        char *b = cap < MAX_INPUT ? realloc(buf, cap * 2 + 1) : NULL;
        if (b == NULL) {
            fprintf(stderr, "ringserve-tokenize: input larger than %llu bytes\n", MAX_INPUT);
            free(buf);
            return NULL;
        }
        buf = b;
        cap *= 2;
    }
    if (buf != NULL && ferror(stdin)) {
        perror("ringserve-tokenize: stdin");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static int encode(const rs_vocab *v, const struct opts *o, const char *text, size_t len)
{
    size_t valid = rs_utf8_valid_prefix(text, len);
    if (valid < len)
        fprintf(stderr,
                "ringserve-tokenize: warning: input is not valid UTF-8 (first bad byte at "
                "offset %zu); invalid bytes are encoded as byte tokens\n",
                valid);
    if (o->bos && rs_vocab_bos(v) < 0) {
        fprintf(stderr, "ringserve-tokenize: --bos: this vocab has no BOS token\n");
        return 1;
    }
    rs_tokenizer *t = NULL;
    size_t cap = len + 16, n = 0;
    int32_t *ids = malloc(cap * sizeof(*ids));
    rs_err rc = ids != NULL ? rs_tokenizer_create(v, &t) : RS_ENOMEM;
    if (rc == RS_OK)
        rc = rs_tokenizer_encode(t, text, len, o->special ? RS_TOKENIZE_PARSE_SPECIAL : 0, ids, cap,
                                 &n);
    rs_tokenizer_destroy(&t);
    if (rc != RS_OK) {
        fprintf(stderr, "ringserve-tokenize: encoding failed: %s\n", rs_strerror(rc));
        free(ids);
        return 1;
    }
    if (o->bos)
        printf("%d%s", rs_vocab_bos(v), n ? " " : "");
    for (size_t i = 0; i < n; i++)
        printf(i ? " %d" : "%d", ids[i]);
    putchar('\n');
    free(ids);
    return 0;
}

/* Parses one id at *p; returns 0 at end of input, -1 for a bad id. */
static int next_id(const char **p, const rs_vocab *v, int32_t *id)
{
    const char *s = *p;
    while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r' || *s == ',')
        s++;
    if (*s == '\0')
        return 0;
    char *end;
    long x = strtol(s, &end, 10);
    if (end == s || x < 0 || x >= (long)rs_vocab_n_tokens(v) ||
        (*end != '\0' && *end != ' ' && *end != '\n' && *end != '\t' && *end != '\r' &&
         *end != ',')) {
        fprintf(stderr, "ringserve-tokenize: --decode: '%.20s' is not a token id (0..%u)\n", s,
                rs_vocab_n_tokens(v) - 1);
        return -1;
    }
    *p = end;
    *id = (int32_t)x;
    return 1;
}

static int decode(const rs_vocab *v, const struct opts *o, const char *text)
{
    struct rs_detok d;
    size_t cap = rs_detok_max_out(v), n;
    char *out = malloc(cap);
    if (out == NULL)
        return 1;
    rs_detok_init(&d, v, RS_VOCAB_NONE, o->special ? RS_DETOK_SPECIAL : 0);
    int32_t id;
    int r;
    for (const char *p = text; (r = next_id(&p, v, &id)) == 1;) {
        if (rs_detok_feed(v, &d, id, out, cap, &n) != RS_OK) {
            r = -1;
            break;
        }
        fwrite(out, 1, n, stdout); /* streamed, as postprocd sends deltas */
    }
    if (r == 0 && rs_detok_flush(v, &d, out, cap, &n) == RS_OK)
        fwrite(out, 1, n, stdout);
    free(out);
    return r == 0 ? 0 : 1;
}

static void info(const rs_vocab *v)
{
    printf("kind: %s\n", rs_vocab_kind(v) == RS_VOCAB_SPM ? "llama (SentencePiece BPE)"
                                                          : "gpt2 (byte-level BPE)");
    if (rs_vocab_kind(v) == RS_VOCAB_BPE)
        printf("pre-tokenizer: %s\n", rs_vocab_pre(v));
    printf("tokens: %u\nadd_bos: %d\nadd_eos: %d\nadd_space_prefix: %d\n", rs_vocab_n_tokens(v),
           rs_vocab_add_bos(v), rs_vocab_add_eos(v), rs_vocab_add_space_prefix(v));
    const char *names[] = {"bos", "eos", "eot", "eom", "unk", "pad"};
    int32_t ids[] = {rs_vocab_bos(v), rs_vocab_eos(v), rs_vocab_eot(v),
                     rs_vocab_eom(v), rs_vocab_unk(v), rs_vocab_pad(v)};
    for (size_t i = 0; i < 6; i++) {
        size_t len = 0;
        const char *t = rs_vocab_token_text(v, ids[i], &len);
        printf("%s: %d%s%.*s%s\n", names[i], ids[i], t ? " '" : "", (int)len, t ? t : "",
               t ? "'" : "");
    }
    printf("end-of-generation:");
    for (uint32_t i = 0; i < rs_vocab_n_tokens(v); i++)
        if (rs_vocab_is_eog(v, (int32_t)i))
            printf(" %u", i);
    putchar('\n');
}

int main(int argc, char **argv)
{
    struct opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc == 1 ? 0 : rc;
    char err[512];
    rs_gguf *g = NULL;
    rs_vocab *v = NULL;
    struct rs_vocab_opts vo = {o.pre};
    if (rs_gguf_open(o.model, &g, err, sizeof(err)) != RS_OK ||
        rs_vocab_load_opts(g, &vo, &v, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "ringserve-tokenize: %s: %s\n", o.model, err);
        rs_gguf_close(&g);
        return 1;
    }
    rs_gguf_close(&g);
    if (o.info) {
        info(v);
    } else {
        size_t len = 0;
        char *text = read_stdin(&len);
        rc = text == NULL ? 1 : o.decode ? decode(v, &o, text) : encode(v, &o, text, len);
        free(text);
    }
    rs_vocab_destroy(&v);
    return rc;
}

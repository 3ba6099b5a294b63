/* SPDX-License-Identifier: MIT */
/*
 * ringserve-generate: text generation in one process with the engine, the
 * model's own vocab and the sampler, for trying a model and for tests (it
 * reproduces llama2.c's published stories260K output byte for byte). Prints
 * only the generated text on stdout, streamed as it is produced (or the ids
 * with --ids); diagnostics and speed go to stderr. With no prompt it starts
 * from BOS alone. Stops after -n tokens, at an end-of-generation token, at
 * BOS (a new document, as llama2.c), or at the model's context length.
 * Leaves out: chat templates, stop strings, interactive mode (the server has
 * those concerns; this is a thin driver of the library).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/detok.h"
#include "common/log.h"
#include "common/tokenizer.h"
#include "common/vocab.h"
#include "launcherd/engine/model.h"
#include "launcherd/engine/sampler.h"
#include "launcherd/engine/stop.h"

#define EXIT_USAGE 2
#define MAX_GEN (1u << 20)

struct args {
    const char *model, *prompt, *prompt_ids, *logits_out;
    int32_t *pids; /* --prompt-ids parsed (owned; the process exits with it) */
    size_t n_pids;
    uint32_t n, block_size;
    int threads, isa, print_ids, seed_given;
    struct rs_sampling_params sp;
};

static void usage(FILE *f)
{
    fprintf(f, "usage: ringserve-generate -m MODEL.gguf [-p PROMPT] [-n N] [--temp T] [--seed S]\n"
               "         [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--threads N]\n"
               "         [--block-size B] [--isa auto|avx2|portable] [--ids]\n"
               "         [--prompt-ids ID,ID,...] [--logits-out FILE]\n"
               "Generates N tokens (default 256) after the prompt (default: BOS alone) and\n"
               "prints the text (--ids: the token ids) on stdout; speed goes to stderr.\n"
               "--prompt-ids: the prompt as token ids, used as given (no BOS added).\n"
               "--logits-out: writes the logits after every prompt position, float32\n"
               "little-endian, [n_prompt][n_vocab] row-major.\n"
               "--temp 0 is greedy (default 0.8). --seed defaults to the time (printed).\n");
}

/* Prints "ringserve-generate: <message>" to stderr; returns -1 for the caller to return. */
static int errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int errorf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ringserve-generate: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -1;
}

static int bad(const char *opt, const char *val, const char *why)
{
    return errorf("%s '%s': %s", opt, val, why);
}

/* Whole-string unsigned integer in [lo, hi]. */
static int parse_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (s[0] == '\0' || s[0] == '-' || *end != '\0' || errno != 0)
        return bad(opt, s, "not an unsigned integer");
    if (v < lo || v > hi) {
        char why[96];
        snprintf(why, sizeof(why), "must be in %llu..%llu", (unsigned long long)lo,
                 (unsigned long long)hi);
        return bad(opt, s, why);
    }
    *out = v;
    return 0;
}

static int parse_float(const char *opt, const char *s, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (s[0] == '\0' || *end != '\0' || errno != 0 || !isfinite(v))
        return bad(opt, s, "not a finite number");
    *out = v;
    return 0;
}

enum { O_TEMP = 256, O_SEED, O_TOPK, O_TOPP, O_MINP, O_REP, O_THREADS, O_BS, O_IDS, O_ISA,
       O_PIDS, O_LOUT };

static int parse_isa(const char *s, int *isa)
{
    if (strcmp(s, "auto") == 0)
        *isa = RS_MODEL_ISA_AUTO;
    else if (strcmp(s, "avx2") == 0)
        *isa = RS_MODEL_ISA_AVX2;
    else if (strcmp(s, "portable") == 0)
        *isa = RS_MODEL_ISA_PORTABLE;
    else
        return bad("--isa", s, "must be auto, avx2 or portable");
    return 0;
}

/* --prompt-ids: comma-separated non-negative ids (the vocab range is checked at load). */
static int parse_id_list(const char *s, struct args *a)
{
    size_t n = 1;
    for (const char *p = s; *p; p++)
        n += *p == ',';
    free(a->pids);
    a->pids = malloc(n * sizeof(int32_t));
    if (a->pids == NULL)
        return errorf("out of memory");
    for (size_t i = 0; i < n; i++) {
        char *end;
        errno = 0;
        long v = s[0] >= '0' && s[0] <= '9' ? strtol(s, &end, 10) : -1;
        if (v < 0 || errno != 0 || v > INT32_MAX || (*end != ',' && *end != '\0'))
            return bad("--prompt-ids", s, "expected token ids separated by commas");
        a->pids[i] = (int32_t)v;
        s = end + (*end == ',');
    }
    a->n_pids = n;
    return 0;
}

/* One option; 0 on success, -1 (message printed) on a bad value. */
static int apply_opt(int c, const char *v, struct args *a)
{
    uint64_t u = 0;
    int rc = 0;
    switch (c) {
    case 'm': a->model = v; break;
    case 'p': a->prompt = v; break;
    case 'n': rc = parse_u64("-n", v, 1, MAX_GEN, &u), a->n = (uint32_t)u; break;
    case O_TEMP: rc = parse_float("--temp", v, &a->sp.temperature); break;
    case O_SEED: rc = parse_u64("--seed", v, 0, UINT64_MAX, &a->sp.seed), a->seed_given = 1; break;
    case O_TOPK: rc = parse_u64("--top-k", v, 0, INT32_MAX, &u), a->sp.top_k = (int32_t)u; break;
    case O_TOPP: rc = parse_float("--top-p", v, &a->sp.top_p); break;
    case O_MINP: rc = parse_float("--min-p", v, &a->sp.min_p); break;
    case O_REP: rc = parse_float("--repeat-penalty", v, &a->sp.repetition_penalty); break;
    case O_THREADS: rc = parse_u64("--threads", v, 0, 1024, &u), a->threads = (int)u; break;
    case O_BS: rc = parse_u64("--block-size", v, 1, 65536, &u), a->block_size = (uint32_t)u; break;
    case O_ISA: rc = parse_isa(v, &a->isa); break;
    case O_IDS: a->print_ids = 1; break;
    case O_PIDS: a->prompt_ids = v, rc = parse_id_list(v, a); break;
    case O_LOUT: a->logits_out = v; break;
    default: return -1;
    }
    return rc;
}

static int parse_args(int argc, char **argv, struct args *a)
{
    static const struct option lo[] = {
        {"model", 1, 0, 'm'},       {"prompt", 1, 0, 'p'},          {"n", 1, 0, 'n'},
        {"temp", 1, 0, O_TEMP},     {"seed", 1, 0, O_SEED},         {"top-k", 1, 0, O_TOPK},
        {"top-p", 1, 0, O_TOPP},    {"min-p", 1, 0, O_MINP},        {"threads", 1, 0, O_THREADS},
        {"repeat-penalty", 1, 0, O_REP}, {"block-size", 1, 0, O_BS}, {"ids", 0, 0, O_IDS},
        {"isa", 1, 0, O_ISA},       {"prompt-ids", 1, 0, O_PIDS},   {"logits-out", 1, 0, O_LOUT},
        {"help", 0, 0, 'h'},        {0, 0, 0, 0}};
    memset(a, 0, sizeof(*a));
    a->n = 256;
    a->block_size = RS_KVCACHE_DEFAULT_BLOCK;
    a->isa = RS_MODEL_ISA_AUTO;
    rs_sampling_params_default(&a->sp);
    a->sp.temperature = 0.8f;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":m:p:n:h", lo, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            exit(0);
        }
        if (c == '?' || c == ':') {
            return errorf("%s option '%s'", c == ':' ? "missing value for" : "unknown",
                          argv[optind - 1]);
        }
        if (apply_opt(c, optarg, a) != 0)
            return -1;
    }
    if (optind < argc)
        return bad("argument", argv[optind], "unexpected (the prompt goes after -p)");
    if (a->model == NULL)
        return errorf("-m MODEL.gguf is required");
    if (a->prompt != NULL && a->prompt_ids != NULL)
        return errorf("-p and --prompt-ids exclude each other");
    char err[256];
    if (rs_sampling_params_validate(&a->sp, err, sizeof(err)) != RS_OK)
        return errorf("%s", err);
    return 0;
}

/* Everything one run holds; freed by gen_fini. */
struct gen {
    rs_model *m;
    rs_vocab *v;
    rs_tokenizer *tok;
    rs_sampler *smp;
    rs_kvcache *kv;
    uint32_t *table, n_blocks, n_vocab;
    int32_t *ids; /* prompt, then generated */
    size_t n_prompt, n_ids;
    float *logits;
};

static void gen_fini(struct gen *g)
{
    rs_kvcache_destroy(&g->kv);
    rs_sampler_destroy(&g->smp);
    rs_tokenizer_destroy(&g->tok);
    rs_vocab_destroy(&g->v);
    rs_model_destroy(&g->m);
    free(g->table);
    free(g->ids);
    free(g->logits);
}

/* --prompt-ids, used as given: each id must be below the model's vocab size. */
static int use_prompt_ids(struct gen *g, const struct args *a)
{
    g->ids = malloc((a->n_pids + a->n) * sizeof(int32_t));
    if (g->ids == NULL)
        return errorf("out of memory");
    for (size_t i = 0; i < a->n_pids; i++) {
        if ((uint32_t)a->pids[i] >= g->n_vocab)
            return errorf("--prompt-ids: id %d (item %zu) is not below the vocab size %u",
                          a->pids[i], i + 1, g->n_vocab);
        g->ids[i] = a->pids[i];
    }
    g->n_prompt = g->n_ids = a->n_pids;
    return 0;
}

/* The prompt's ids (BOS as the vocab says), or BOS alone without a prompt. */
static int tokenize_prompt(struct gen *g, const struct args *a)
{
    if (a->prompt_ids != NULL)
        return use_prompt_ids(g, a);
    const char *text = a->prompt != NULL ? a->prompt : "";
    size_t need = 0, len = strlen(text);
    rs_err rc = rs_tokenizer_encode(g->tok, text, len, RS_TOKENIZE_ADD_SPECIAL, NULL, 0, &need);
    if (rc != RS_OK && rc != RS_ERANGE)
        return errorf("tokenizing the prompt: %s", rs_strerror(rc));
    g->ids = malloc((need + 1 + a->n) * sizeof(int32_t));
    if (g->ids == NULL)
        return errorf("out of memory");
    rc = rs_tokenizer_encode(g->tok, text, len, RS_TOKENIZE_ADD_SPECIAL, g->ids, need, &need);
    if (rc != RS_OK)
        return errorf("tokenizing the prompt: %s", rs_strerror(rc));
    if (need == 0) { /* empty prompt and a vocab that adds no BOS: start from BOS anyway */
        if (rs_vocab_bos(g->v) == RS_VOCAB_NONE)
            return errorf("empty prompt and no BOS token");
        g->ids[need++] = rs_vocab_bos(g->v);
    }
    g->n_prompt = g->n_ids = need;
    return 0;
}

static int gen_init(struct gen *g, const struct args *a)
{
    char err[512];
    struct rs_model_opts o;
    rs_model_opts_default(&o);
    o.n_threads = a->threads;
    o.isa = a->isa;
    if (rs_model_load(a->model, &o, &g->m, err, sizeof(err)) != RS_OK)
        return errorf("%s: %s", a->model, err);
    if (rs_vocab_load(rs_model_gguf(g->m), &g->v, err, sizeof(err)) != RS_OK)
        return errorf("vocab: %s", err);
    g->n_vocab = rs_model_hparams(g->m)->n_vocab;
    if (rs_tokenizer_create(g->v, &g->tok) != RS_OK || tokenize_prompt(g, a) != 0 ||
        rs_sampler_create((int32_t)g->n_vocab, &g->smp) != RS_OK)
        return -1;
    uint64_t tokens = g->n_prompt + a->n;
    g->n_blocks = (uint32_t)((tokens + a->block_size - 1) / a->block_size);
    g->table = malloc(g->n_blocks * sizeof(uint32_t));
    g->logits = malloc(g->n_vocab * sizeof(float));
    if (g->table == NULL || g->logits == NULL)
        return errorf("out of memory");
    for (uint32_t i = 0; i < g->n_blocks; i++)
        g->table[i] = i;
    rs_err rc = rs_kvcache_create(g->m, g->n_blocks, a->block_size, &g->kv);
    if (rc != RS_OK)
        return errorf("KV cache: %s", rs_strerror(rc));
    fprintf(stderr, "ringserve-generate: %s; %zu prompt tokens\n", rs_model_describe(g->m),
            g->n_prompt);
    return 0;
}

/* Runs ids[from, to) through the model in chunks of at most max tokens. */
static int feed(struct gen *g, size_t from, size_t to)
{
    while (from < to) {
        size_t n = to - from < RS_MODEL_DEFAULT_MAX_TOKENS ? to - from : RS_MODEL_DEFAULT_MAX_TOKENS;
        struct rs_model_seq s = {g->ids + from, (uint32_t)n, (uint32_t)from, g->table, g->n_blocks,
                                 from + n == to};
        rs_err rc = rs_model_step(g->m, g->kv, &s, 1);
        if (rc != RS_OK)
            return errorf("forward step: %s", rs_strerror(rc));
        from += n;
    }
    memcpy(g->logits, rs_model_logits(g->m, 0), g->n_vocab * sizeof(float));
    return 0;
}

/*
 * --logits-out: the prompt one position per step, each step's logits
 * appended to the file (float32 little-endian on the x86-64 and arm64 hosts
 * we build for). By batch invariance they equal a one-shot prefill's bit for
 * bit; the last row is left in g->logits for sampling.
 */
static int feed_with_logits(struct gen *g, const char *path)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return errorf("--logits-out %s: %s", path, strerror(errno));
    int rc = 0;
    for (size_t p = 0; p < g->n_prompt && rc == 0; p++) {
        rc = feed(g, p, p + 1);
        if (rc == 0 && fwrite(g->logits, sizeof(float), g->n_vocab, f) != g->n_vocab)
            rc = errorf("--logits-out %s: write failed", path);
    }
    if (fclose(f) != 0 && rc == 0)
        rc = errorf("--logits-out %s: %s", path, strerror(errno));
    return rc;
}

/* Prints one generated token: its id, or the text it completes. */
static int emit(struct gen *g, const struct args *a, struct rs_detok *d, char *buf, size_t cap,
                int32_t tok)
{
    if (a->print_ids) {
        printf("%s%d", g->n_ids > g->n_prompt + 1 ? " " : "", tok);
        return 0;
    }
    size_t n = 0;
    rs_err rc = rs_detok_feed(g->v, d, tok, buf, cap, &n);
    if (rc != RS_OK)
        return errorf("token %d: %s", tok, rs_strerror(rc));
    fwrite(buf, 1, n, stdout);
    fflush(stdout);
    return 0;
}

/* Stop rules: -n, end-of-generation ids, BOS (llama2.c), the model's context length. */
static void stop_rules(const struct gen *g, const struct args *a, struct rs_stop_params *sp,
                       int32_t *eog, size_t *n_eog)
{
    memset(sp, 0, sizeof(*sp));
    sp->max_tokens = a->n;
    if (rs_vocab_bos(g->v) != RS_VOCAB_NONE)
        sp->stop_ids[sp->n_stop_ids++] = rs_vocab_bos(g->v);
    int32_t c[3] = {rs_vocab_eos(g->v), rs_vocab_eot(g->v), rs_vocab_eom(g->v)};
    *n_eog = 0;
    for (int i = 0; i < 3; i++)
        if (c[i] != RS_VOCAB_NONE)
            eog[(*n_eog)++] = c[i];
}

static int generate(struct gen *g, const struct args *a, double *gen_s)
{
    struct rs_stop_params sp;
    int32_t eog[3];
    size_t n_eog;
    stop_rules(g, a, &sp, eog, &n_eog);
    struct rs_detok d;
    rs_detok_init(&d, g->v, g->ids[g->n_prompt - 1], 0);
    size_t cap = rs_detok_max_out(g->v);
    char *buf = malloc(cap);
    if (buf == NULL)
        return -1;
    uint64_t t0 = rs_clock_ns(), max_ctx = rs_model_hparams(g->m)->ctx_len;
    int rc = 0;
    for (uint32_t i = 0; rc == 0; i++) {
        struct rs_sample_result r;
        if (rs_sampler_sample(g->smp, &a->sp, g->logits, g->ids, g->n_prompt, i, i, &r) != RS_OK) {
            rc = -1;
            break;
        }
        g->ids[g->n_ids++] = r.token;
        rc = emit(g, a, &d, buf, cap, r.token);
        if (rc != 0 || rs_stop_check(&sp, eog, n_eog, r.token, g->n_prompt, i + 1, max_ctx) !=
                           RS_FINISH_NONE)
            break;
        rc = feed(g, g->n_ids - 1, g->n_ids);
    }
    size_t n = 0;
    if (rc == 0 && !a->print_ids && rs_detok_flush(g->v, &d, buf, cap, &n) == RS_OK)
        fwrite(buf, 1, n, stdout);
    if (a->print_ids || isatty(STDOUT_FILENO))
        putchar('\n');
    fflush(stdout);
    free(buf);
    *gen_s = (double)(rs_clock_ns() - t0) * 1e-9;
    return rc;
}

int main(int argc, char **argv)
{
    rs_log_init("generate");
    struct args a;
    if (parse_args(argc, argv, &a) != 0) {
        usage(stderr);
        free(a.pids);
        return EXIT_USAGE;
    }
    if (!a.seed_given)
        a.sp.seed = (uint64_t)time(NULL);
    struct gen g = {0};
    int rc = gen_init(&g, &a);
    uint64_t t0 = rs_clock_ns();
    if (rc == 0)
        rc = a.logits_out != NULL ? feed_with_logits(&g, a.logits_out) : feed(&g, 0, g.n_prompt);
    double prompt_s = (double)(rs_clock_ns() - t0) * 1e-9, gen_s = 0;
    if (rc == 0)
        rc = generate(&g, &a, &gen_s);
    if (rc == 0) {
        size_t n_gen = g.n_ids - g.n_prompt;
        fprintf(stderr,
                "ringserve-generate: prompt %zu tokens in %.3f s (%.1f tok/s); generated %zu "
                "tokens in %.3f s (%.1f tok/s); seed %llu\n",
                g.n_prompt, prompt_s, g.n_prompt / prompt_s, n_gen, gen_s, n_gen / gen_s,
                (unsigned long long)a.sp.seed);
    }
    gen_fini(&g);
    free(a.pids);
    return rc == 0 ? 0 : 1;
}

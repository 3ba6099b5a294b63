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
#include <stddef.h>
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
#include "common/opt.h"
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
    int threads, isa, print_ids;
    uint32_t seed_given; /* bit 1: --seed was given */
    struct rs_sampling_params sp;
};

/* --prompt-ids: comma-separated non-negative ids (the vocab range is checked at load). */
static int parse_id_list(void *dst, const struct rs_opt *o, const char *s, char *err, size_t len)
{
    struct args *a = dst;
    const char *list = s;
    size_t n = 1;
    for (const char *p = s; *p; p++)
        n += *p == ',';
    free(a->pids);
    a->pids = malloc(n * sizeof(int32_t));
    if (a->pids == NULL)
        return snprintf(err, len, "--%s: out of memory", o->name), -1;
    for (size_t i = 0; i < n; i++) {
        char *end;
        errno = 0;
        long v = s[0] >= '0' && s[0] <= '9' ? strtol(s, &end, 10) : -1;
        if (v < 0 || errno != 0 || v > INT32_MAX || (*end != ',' && *end != '\0')) {
            snprintf(err, len, "--%s '%.40s': expected token ids separated by commas", o->name,
                     list);
            return -1;
        }
        a->pids[i] = (int32_t)v;
        s = end + (*end == ',');
    }
    a->n_pids = n;
    a->prompt_ids = list;
    return 0;
}

#define A(f) offsetof(struct args, f)
#define SP(f) offsetof(struct args, sp.f)
#define REAL(nm, f, h) {.name = nm, .kind = RS_OPT_FLOAT, .off = SP(f), .arg = "F", .help = h}

static const struct rs_opt opts[] = {
    {.name = "model", .short_name = 'm', .kind = RS_OPT_ARG, .off = A(model),
     .arg = "MODEL.gguf", .help = "the model (required)"},
    {.name = "prompt", .short_name = 'p', .kind = RS_OPT_ARG, .off = A(prompt), .arg = "PROMPT",
     .help = "text before the output (default: BOS alone)"},
    {.name = "prompt-ids", .kind = RS_OPT_CALL, .parse = parse_id_list, .arg = "ID,ID,...",
     .help = "the prompt as token ids, used as given (no BOS added;\nexcludes -p)"},
    {.name = "n", .short_name = 'n', .kind = RS_OPT_U32, .off = A(n), .min = 1, .max = MAX_GEN,
     .arg = "N", .help = "tokens to generate (default 256)"},
    REAL("temp", temperature, "temperature; 0 is greedy (default 0.8)"),
    {.name = "seed", .kind = RS_OPT_U64, .off = SP(seed), .has_bit = 1,
     .has_off = A(seed_given), .arg = "S", .help = "sampling seed (default: the time, printed)"},
    {.name = "top-k", .kind = RS_OPT_INT, .off = SP(top_k), .min = 0, .max = INT32_MAX,
     .arg = "K", .help = "keep the K most likely tokens (0 = off)"},
    REAL("top-p", top_p, "nucleus sampling, (0, 1]"),
    REAL("min-p", min_p, "drop tokens below F x the best one's p"),
    REAL("repeat-penalty", repetition_penalty, "repetition penalty (1 = off)"),
    {.name = "threads", .kind = RS_OPT_INT, .off = A(threads), .min = 0, .max = 1024,
     .arg = "N", .help = "model threads (default 0: every CPU)"},
    {.name = "block-size", .kind = RS_OPT_U32, .off = A(block_size), .min = 1, .max = 65536,
     .arg = "B", .help = "KV block tokens"},
    {.name = "isa", .kind = RS_OPT_CHOICE, .off = A(isa), .choices = rs_model_isa_names,
     .choice_vals = rs_model_isa_values, .arg = "auto|avx512|avx2|portable",
     .help = "CPU kernels (default auto)"},
    {.name = "ids", .kind = RS_OPT_FLAG, .off = A(print_ids), .val = 1,
     .help = "print the token ids instead of the text"},
    {.name = "logits-out", .kind = RS_OPT_ARG, .off = A(logits_out), .arg = "FILE",
     .help = "write the logits after every prompt position: float32\nlittle-endian, "
             "[n_prompt][n_vocab] row-major"},
    {0},
};

static const char usage[] =
    "usage: ringserve-generate -m MODEL.gguf [options]\n"
    "Generates N tokens after the prompt and prints the text (--ids: the token ids)\n"
    "on stdout; speed goes to stderr.\n";

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

/* -1 to run, else the exit code. */
static int parse_args(int argc, char **argv, struct args *a)
{
    memset(a, 0, sizeof(*a));
    a->n = 256;
    a->block_size = RS_KVCACHE_DEFAULT_BLOCK;
    a->isa = RS_MODEL_ISA_AUTO;
    rs_sampling_params_default(&a->sp);
    a->sp.temperature = 0.8f;
    struct rs_opt_group g = {NULL, opts, a, NULL};
    int code = rs_opt_main("ringserve-generate", usage, &g, 1, argc, argv, 0, NULL);
    if (code >= 0)
        return code;
    char err[256];
    if (a->model == NULL)
        return errorf("-m MODEL.gguf is required"), EXIT_USAGE;
    if (a->prompt != NULL && a->prompt_ids != NULL)
        return errorf("-p and --prompt-ids exclude each other"), EXIT_USAGE;
    if (rs_sampling_params_validate(&a->sp, err, sizeof(err)) != RS_OK)
        return errorf("%s", err), EXIT_USAGE;
    return -1;
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
    int code = parse_args(argc, argv, &a);
    if (code >= 0) {
        free(a.pids);
        return code;
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

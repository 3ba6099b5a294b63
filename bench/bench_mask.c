/* SPDX-License-Identifier: MIT */
/*
 * Structured-output costs. (1) Mask time per sequence per step (p50, p99,
 * max, in microseconds) for JSON-schema and GBNF constraints on the 32000-
 * token llama-spm, 50257-token gpt-2 and 65024-token falcon vocabs, over
 * constrained generations driven by random logits (the best allowed token
 * each step, with a bias toward closing quotes and brackets so generations
 * end); next to the floor any mask pays, one row zeroed and one bitset ORed
 * in, measured in the same run. Also accept() per token and replay per
 * token. (2) Compile time: automaton only (RS_GRAMMAR_LAZY) and with the
 * token-mask cache filled. (3) With --model: in-process decode throughput at
 * 16 sequences (engine step + mask fill + mask application + sampler), all
 * sequences constrained vs none, alternating in the same run, best of 3.
 * Usage: bench_mask [--seqs N] [--steps N] [--model FILE.gguf] [--threads N] REFDATA
 */
#include <getopt.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/grammar.h"
#include "common/mask_apply.h"
#include "common/vocab.h"
#include "launcherd/engine/model.h"
#include "launcherd/engine/sampler.h"

struct constraint {
    const char *name;
    enum rs_constraint_kind kind;
    const char *text;
};

static const struct constraint json_cases[] = {
    {"json: function call", RS_CONSTRAINT_JSON_SCHEMA,
     "{\"type\":\"object\",\"properties\":{\"name\":{\"enum\":[\"get_weather\",\"search\","
     "\"book_flight\"]},\"arguments\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
     "\"string\",\"maxLength\":40},\"date\":{\"type\":\"string\",\"pattern\":"
     "\"^\\\\d{4}-\\\\d{2}-\\\\d{2}$\"},\"units\":{\"enum\":[\"metric\",\"imperial\"]},\"limit\":"
     "{\"type\":\"integer\",\"minimum\":1,\"maximum\":50}},\"required\":[\"city\"]}},"
     "\"required\":[\"name\",\"arguments\"]}"},
    {"json: nested object", RS_CONSTRAINT_JSON_SCHEMA,
     "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\",\"minimum\":-5,"
     "\"maximum\":1200},\"name\":{\"type\":\"string\",\"maxLength\":12},\"tags\":{\"type\":"
     "\"array\",\"items\":{\"enum\":[\"red\",\"green\",null]},\"maxItems\":3},\"pos\":{\"type\":"
     "\"object\",\"properties\":{\"x\":{\"type\":\"number\"},\"y\":{\"type\":\"number\","
     "\"exclusiveMinimum\":0.5}},\"required\":[\"x\"]}},\"required\":[\"id\",\"name\"]}"},
    {"json: array of objects", RS_CONSTRAINT_JSON_SCHEMA,
     "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":"
     "\"string\"},\"v\":{\"type\":\"number\"}},\"required\":[\"k\",\"v\"]},\"maxItems\":8}"},
    {"json: recursive $ref", RS_CONSTRAINT_JSON_SCHEMA,
     "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"string\"},"
     "\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},"
     "\"required\":[\"value\"]}},\"$ref\":\"#/$defs/node\"}"},
    {"json: any object", RS_CONSTRAINT_JSON_OBJECT, NULL},
};

static const struct constraint gbnf_cases[] = {
    {"gbnf: arithmetic", RS_CONSTRAINT_GBNF,
     "root ::= expr\nexpr ::= term (space? [-+] space? term)*\n"
     "term ::= factor (space? [*/] space? factor)*\n"
     "factor ::= number | \"(\" space? expr space? \")\" | \"-\" factor\n"
     "number ::= [0-9]+ (\".\" [0-9]{1,3})?\nspace ::= \" \"\n"},
    {"gbnf: json", RS_CONSTRAINT_GBNF,
     "root ::= object\nvalue ::= object | array | string | number | (\"true\" | \"false\" | "
     "\"null\") ws\nobject ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws "
     "value)* )? \"}\" ws\narray ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
     "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" "
     "[0-9a-fA-F]{4}) )* \"\\\"\" ws\nnumber ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" "
     "[0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\nws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n"},
    {"gbnf: C-like", RS_CONSTRAINT_GBNF,
     "root ::= (func nl)+\nfunc ::= type \" \" ident \"(\" params? \") {\" nl stmt* \"}\"\n"
     "type ::= \"int\" | \"void\" | \"char\"\nparams ::= type \" \" ident (\", \" type \" \" "
     "ident)*\nstmt ::= \"  \" (decl | assign | ret | call) nl\ndecl ::= type \" \" ident "
     "(\" = \" expr)? \";\"\nassign ::= ident \" = \" expr \";\"\nret ::= \"return\" (\" \" "
     "expr)? \";\"\ncall ::= ident \"(\" args? \");\"\nargs ::= expr (\", \" expr)*\n"
     "expr ::= term ((\" + \" | \" - \" | \" < \") term)*\nterm ::= factor ((\" * \" | \" / \") "
     "factor)*\nfactor ::= ident | [0-9]{1,5} | \"(\" expr \")\" | ident \"(\" args? \")\"\n"
     "ident ::= [a-z_] [a-z0-9_]{0,7}\nnl ::= \"\\n\"\n"},
};

struct opts {
    int seqs, steps, threads;
    const char *model, *refdata;
};

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

/* This thread's CPU time in ms (the host may be shared: wall time alone can mislead). */
static double cpu_ms(void)
{
    struct rusage r;
    getrusage(RUSAGE_THREAD, &r);
    return (double)r.ru_utime.tv_sec * 1e3 + (double)r.ru_utime.tv_usec / 1e3 +
           (double)r.ru_stime.tv_sec * 1e3 + (double)r.ru_stime.tv_usec / 1e3;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Tokens to favour so random generations close what they open (and end). */
static float *closing_bonus(const rs_vocab *v)
{
    uint32_t n = rs_vocab_n_tokens(v);
    float *b = calloc(n, sizeof(float));
    for (uint32_t t = 0; t < n && b; t++) {
        size_t len;
        const char *p = rs_vocab_token_piece(v, (int32_t)t, 0, &len);
        if (rs_vocab_is_eog(v, (int32_t)t))
            b[t] = 6.0f;
        else if (memchr(p, '"', len) || memchr(p, '}', len) || memchr(p, ']', len) ||
                 memchr(p, ')', len) || memchr(p, '\n', len))
            b[t] = 2.0f;
    }
    return b;
}

/* The allowed token with the best random logit plus bonus; -1 when none. */
static int32_t pick(const uint32_t *row, uint32_t n, const float *bonus)
{
    int32_t best = -1;
    float best_v = -1e30f;
    for (uint32_t w = 0; w < (n + 31) / 32; w++)
        for (uint32_t bits = row[w]; bits; bits &= bits - 1) {
            uint32_t t = w * 32 + (uint32_t)__builtin_ctz(bits);
            float v = (float)(rnd() >> 40) * (1.0f / (float)(1u << 24)) * 4.0f + bonus[t];
            if (v > best_v)
                best_v = v, best = (int32_t)t;
        }
    return best;
}

/* --- mask timings -------------------------------------------------------------------------- */

struct samples {
    uint64_t *ns;
    size_t n, cap;
};

static void add(struct samples *s, uint64_t v)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 4096;
        s->ns = realloc(s->ns, s->cap * sizeof(uint64_t));
    }
    s->ns[s->n++] = v;
}

static void append(struct samples *dst, const struct samples *src)
{
    for (size_t i = 0; i < src->n; i++)
        add(dst, src->ns[i]);
}

/* Percentile q (0..1) in microseconds. */
static double pct(struct samples *s, double q)
{
    if (s->n == 0)
        return 0;
    qsort(s->ns, s->n, sizeof(uint64_t), cmp_u64);
    size_t i = (size_t)(q * (double)(s->n - 1) + 0.5);
    return (double)s->ns[i] / 1000.0;
}

static double mean_us(const struct samples *s)
{
    double t = 0;
    for (size_t i = 0; i < s->n; i++)
        t += (double)s->ns[i];
    return s->n ? t / (double)s->n / 1000.0 : 0;
}

struct run {
    struct samples mask, accept;
    double replay_ns_per_token;
    uint32_t ended, tokens;
};

/* o->seqs generations of up to o->steps tokens under g, timing every mask and accept. */
static void run_masks(rs_grammar *g, const rs_vocab *v, const float *bonus, const struct opts *o,
                      struct run *r)
{
    uint32_t n = rs_vocab_n_tokens(v);
    size_t nw = rs_grammar_mask_words(n);
    uint32_t *row = malloc(nw * sizeof(uint32_t));
    int32_t *toks = malloc((size_t)o->steps * sizeof(int32_t));
    uint64_t replay_ns = 0, replay_toks = 0;
    for (int s = 0; s < o->seqs; s++) {
        rs_grammar_matcher *m;
        if (rs_grammar_matcher_create(g, &m) != RS_OK)
            break;
        int k = 0;
        for (; k < o->steps; k++) {
            unsigned flags;
            uint64_t t0 = rs_clock_ns();
            rs_grammar_matcher_fill_mask(m, row, nw, &flags);
            add(&r->mask, rs_clock_ns() - t0);
            int32_t t = (flags & (RS_GRAMMAR_MASK_ONLY_END | RS_GRAMMAR_MASK_DEAD)) ? -1
                                                                                   : pick(row, n, bonus);
            if (t < 0 || rs_vocab_is_eog(v, t)) {
                r->ended++;
                break;
            }
            t0 = rs_clock_ns();
            rs_grammar_matcher_accept(m, t);
            add(&r->accept, rs_clock_ns() - t0);
            toks[k] = t;
        }
        uint64_t t0 = rs_clock_ns();
        rs_grammar_matcher_replay(m, toks, (size_t)k, NULL);
        replay_ns += rs_clock_ns() - t0;
        replay_toks += (uint64_t)k;
        r->tokens += (uint32_t)k;
        rs_grammar_matcher_destroy(&m);
    }
    r->replay_ns_per_token = replay_toks ? (double)replay_ns / (double)replay_toks : 0;
    free(row);
    free(toks);
}

/* The floor of any mask: zero one row and OR one cached bitset into it (median, us). */
static double mask_floor_us(uint32_t n)
{
    size_t nw = rs_grammar_mask_words(n);
    uint32_t *row = malloc(nw * 4), *bits = malloc(nw * 4);
    for (size_t i = 0; i < nw; i++)
        bits[i] = (uint32_t)rnd();
    struct samples s = {0};
    for (int it = 0; it < 2000; it++) {
        uint64_t t0 = rs_clock_ns();
        memset(row, 0, nw * 4);
        for (size_t i = 0; i < nw; i++)
            row[i] |= bits[i];
        __asm__ volatile("" : : "r"(row) : "memory");
        add(&s, rs_clock_ns() - t0);
    }
    double us = pct(&s, 0.5);
    free(s.ns);
    free(row);
    free(bits);
    return us;
}

static int bench_vocab(const char *file, const struct opts *o, struct samples *json_all,
                       struct samples *gbnf_all)
{
    char path[1024], err[512];
    snprintf(path, sizeof(path), "%s/tokenizer/%s", o->refdata, file);
    rs_vocab *v;
    rs_grammar_vocab *gv;
    if (rs_vocab_load_file(path, &v, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "bench_mask: %s: %s\n", path, err);
        return -1;
    }
    uint64_t t0 = rs_clock_ns();
    if (rs_grammar_vocab_create(v, &gv) != RS_OK)
        return -1;
    double trie_ms = (double)(rs_clock_ns() - t0) / 1e6;
    float *bonus = closing_bonus(v);
    uint32_t n = rs_vocab_n_tokens(v);
    printf("\n%s: %u tokens; token trie built in %.1f ms; mask floor (zero + OR one row of %zu "
           "words) %.2f us\n", file, n, trie_ms, rs_grammar_mask_words(n), mask_floor_us(n));
    printf("%-24s %8s %8s %8s %6s %7s %8s | %8s %7s %7s | %6s %6s %6s\n", "constraint",
           "lazy ms", "full ms", "full cpu", "states", "classes", "cache MB", "mask p50", "p99",
           "max", "accept", "replay", "ended");
    const struct constraint *all[8];
    int n_all = 0;
    for (size_t i = 0; i < sizeof(json_cases) / sizeof(json_cases[0]); i++)
        all[n_all++] = &json_cases[i];
    for (size_t i = 0; i < sizeof(gbnf_cases) / sizeof(gbnf_cases[0]); i++)
        all[n_all++] = &gbnf_cases[i];
    for (int i = 0; i < n_all; i++) {
        const struct constraint *c = all[i];
        struct rs_constraint rc = {c->kind, c->text, c->text ? strlen(c->text) : 0, NULL, NULL, 0};
        rs_grammar *lazy, *g;
        t0 = rs_clock_ns();
        if (rs_grammar_compile(gv, &rc, NULL, RS_GRAMMAR_LAZY, &lazy, err, sizeof(err)) != RS_OK) {
            fprintf(stderr, "%s: %s\n", c->name, err);
            continue;
        }
        double lazy_ms = (double)(rs_clock_ns() - t0) / 1e6;
        rs_grammar_release(&lazy);
        t0 = rs_clock_ns();
        double c0 = cpu_ms();
        if (rs_grammar_compile(gv, &rc, NULL, 0, &g, err, sizeof(err)) != RS_OK)
            continue;
        double full_ms = (double)(rs_clock_ns() - t0) / 1e6, full_cpu = cpu_ms() - c0;
        struct rs_grammar_stats st;
        rs_grammar_stats(g, &st);
        struct run r = {0};
        run_masks(g, v, bonus, o, &r);
        printf("%-24s %8.1f %8.1f %8.1f %6u %7u %8.2f | %8.1f %7.1f %7.1f | %6.2f %6.2f %3u/%-3d\n",
               c->name, lazy_ms, full_ms, full_cpu, st.n_states, st.n_classes,
               (double)st.cache_bytes / 1048576.0, pct(&r.mask, 0.5), pct(&r.mask, 0.99),
               pct(&r.mask, 1.0), mean_us(&r.accept), r.replay_ns_per_token / 1000.0, r.ended,
               o->seqs);
        append(c->kind == RS_CONSTRAINT_GBNF ? gbnf_all : json_all, &r.mask);
        free(r.mask.ns);
        free(r.accept.ns);
        rs_grammar_release(&g);
    }
    free(bonus);
    rs_grammar_vocab_destroy(&gv);
    rs_vocab_destroy(&v);
    return 0;
}

/* --- decode throughput --------------------------------------------------------------------- */

#define DEC_SEQS 16

struct decode {
    rs_model *m;
    rs_kvcache *kv;
    rs_vocab *v;
    rs_grammar_vocab *gv;
    rs_grammar *g[DEC_SEQS];
    rs_grammar_matcher *mt[DEC_SEQS];
    rs_sampler *smp;
    uint32_t *tables, nb, n_vocab;
    size_t nw;
    uint32_t *rows;
    float *logits;
    uint64_t fwd_ns, mask_ns, apply_ns, sample_ns;
};

/* One sequence's sampling after the forward pass: mask, apply, sample, accept. */
static int32_t decode_pick(struct decode *d, int i, int constrained, uint64_t step)
{
    uint32_t *row = d->rows + (size_t)i * d->nw;
    memcpy(d->logits, rs_model_logits(d->m, (uint32_t)i), d->n_vocab * sizeof(float));
    uint64_t t0 = rs_clock_ns();
    if (constrained) {
        unsigned flags;
        rs_grammar_matcher_fill_mask(d->mt[i], row, d->nw, &flags);
        if (flags & (RS_GRAMMAR_MASK_ONLY_END | RS_GRAMMAR_MASK_DEAD)) { /* a new request */
            rs_grammar_matcher_reset(d->mt[i]);
            rs_grammar_matcher_fill_mask(d->mt[i], row, d->nw, &flags);
        }
        uint64_t t1 = rs_clock_ns();
        d->mask_ns += t1 - t0;
        uint32_t left;
        rs_mask_apply(d->logits, d->n_vocab, row, NULL, 0, &left);
        t0 = rs_clock_ns();
        d->apply_ns += t0 - t1;
    }
    struct rs_sampling_params p;
    rs_sampling_params_default(&p);
    p.temperature = 0.8f;
    p.seed = (uint64_t)i + 1;
    struct rs_sample_result r;
    int32_t hist[1] = {rs_vocab_bos(d->v)};
    rs_sampler_sample(d->smp, &p, d->logits, hist, 1, 0, step, &r);
    uint64_t t1 = rs_clock_ns();
    d->sample_ns += t1 - t0;
    if (constrained) {
        if (rs_vocab_is_eog(d->v, r.token) ||
            rs_grammar_matcher_accept(d->mt[i], r.token) != RS_OK)
            rs_grammar_matcher_reset(d->mt[i]);
        d->mask_ns += rs_clock_ns() - t1;
    }
    return r.token;
}

/* Decodes o->steps tokens for DEC_SEQS sequences; returns tokens per second. */
static double decode_run(struct decode *d, const struct opts *o, int constrained)
{
    int32_t cur[DEC_SEQS];
    struct rs_model_seq seqs[DEC_SEQS];
    for (int i = 0; i < DEC_SEQS; i++) {
        cur[i] = rs_vocab_bos(d->v);
        rs_grammar_matcher_reset(d->mt[i]);
    }
    d->fwd_ns = d->mask_ns = d->apply_ns = d->sample_ns = 0;
    uint64_t t0 = rs_clock_ns();
    for (int step = 0; step < o->steps; step++) {
        for (int i = 0; i < DEC_SEQS; i++)
            seqs[i] = (struct rs_model_seq){&cur[i], 1, (uint32_t)step, d->tables + (size_t)i * d->nb,
                                            d->nb, 1};
        uint64_t f0 = rs_clock_ns();
        if (rs_model_step(d->m, d->kv, seqs, DEC_SEQS) != RS_OK)
            return 0;
        d->fwd_ns += rs_clock_ns() - f0;
        for (int i = 0; i < DEC_SEQS; i++)
            cur[i] = decode_pick(d, i, constrained, (uint64_t)step);
    }
    double s = (double)(rs_clock_ns() - t0) / 1e9;
    return (double)o->steps * DEC_SEQS / s;
}

static int decode_open(struct decode *d, const struct opts *o)
{
    char err[512];
    struct rs_model_opts mo;
    rs_model_opts_default(&mo);
    mo.n_threads = o->threads;
    if (rs_model_load(o->model, &mo, &d->m, err, sizeof(err)) != RS_OK ||
        rs_vocab_load(rs_model_gguf(d->m), &d->v, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "bench_mask: %s: %s\n", o->model, err);
        return -1;
    }
    d->n_vocab = rs_model_hparams(d->m)->n_vocab;
    d->nb = (uint32_t)(o->steps + 16) / 16;
    d->nw = rs_grammar_mask_words(d->n_vocab);
    d->tables = malloc((size_t)DEC_SEQS * d->nb * sizeof(uint32_t));
    d->rows = malloc((size_t)DEC_SEQS * d->nw * sizeof(uint32_t));
    d->logits = malloc(d->n_vocab * sizeof(float));
    for (uint32_t i = 0; i < DEC_SEQS * d->nb; i++)
        d->tables[i] = i;
    if (rs_kvcache_create(d->m, DEC_SEQS * d->nb, 16, &d->kv) != RS_OK ||
        rs_sampler_create((int32_t)d->n_vocab, &d->smp) != RS_OK ||
        rs_grammar_vocab_create(d->v, &d->gv) != RS_OK)
        return -1;
    const int n_json = (int)(sizeof(json_cases) / sizeof(json_cases[0]));
    for (int i = 0; i < DEC_SEQS; i++) { /* the JSON constraints in turn */
        const struct constraint *c = &json_cases[i % n_json];
        struct rs_constraint rc = {c->kind, c->text, c->text ? strlen(c->text) : 0, NULL, NULL, 0};
        if (i < n_json &&
            rs_grammar_compile(d->gv, &rc, NULL, 0, &d->g[i], err, sizeof(err)) != RS_OK)
            return -1;
        if (i >= n_json)
            d->g[i] = rs_grammar_retain(d->g[i % n_json]);
        if (rs_grammar_matcher_create(d->g[i], &d->mt[i]) != RS_OK)
            return -1;
    }
    return 0;
}

static void decode_close(struct decode *d)
{
    for (int i = 0; i < DEC_SEQS; i++) {
        rs_grammar_matcher_destroy(&d->mt[i]);
        rs_grammar_release(&d->g[i]);
    }
    rs_sampler_destroy(&d->smp);
    rs_kvcache_destroy(&d->kv);
    rs_grammar_vocab_destroy(&d->gv);
    rs_vocab_destroy(&d->v);
    rs_model_destroy(&d->m);
    free(d->tables);
    free(d->rows);
    free(d->logits);
}

static int bench_decode(const struct opts *o)
{
    struct decode d = {0};
    if (decode_open(&d, o) != 0)
        return -1;
    double best[2] = {0, 0};
    uint64_t fwd[2] = {0, 0}, sample[2] = {0, 0}, mask_ns = 0, apply_ns = 0;
    for (int round = 0; round < 8; round++) { /* alternating, so both see the same host */
        int c = round & 1;
        double tps = decode_run(&d, o, c);
        if (tps > best[c]) {
            best[c] = tps;
            fwd[c] = d.fwd_ns, sample[c] = d.sample_ns;
            if (c)
                mask_ns = d.mask_ns, apply_ns = d.apply_ns;
        }
    }
    double steps = (double)o->steps, per_seq = steps * DEC_SEQS;
    double total_c = (double)(fwd[1] + sample[1] + mask_ns + apply_ns);
    printf("\ndecode, %d sequences x %d steps, %s (%u-token vocab), %s; best of 4 each\n",
           DEC_SEQS, o->steps, o->model, d.n_vocab, rs_model_describe(d.m));
    printf("  unconstrained %.1f tok/s, all constrained (JSON schemas) %.1f tok/s: ratio %.3f\n",
           best[0], best[1], best[1] / best[0]);
    printf("  per step: forward %.2f / %.2f ms (none / constrained), sample %.1f / %.1f us/seq; "
           "constrained only: masks %.1f us/seq (fill + accept), apply %.1f us/seq\n",
           (double)fwd[0] / 1e6 / steps, (double)fwd[1] / 1e6 / steps,
           (double)sample[0] / 1e3 / per_seq, (double)sample[1] / 1e3 / per_seq,
           (double)mask_ns / 1e3 / per_seq, (double)apply_ns / 1e3 / per_seq);
    printf("  constraint work is %.2f%% of the constrained run's measured time: ratio %.3f with "
           "the host's noise taken out\n", 100.0 * (double)(mask_ns + apply_ns) / total_c,
           1.0 - (double)(mask_ns + apply_ns) / total_c);
    decode_close(&d);
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {16, 160, 0, NULL, NULL};
    static const struct option lo[] = {{"seqs", 1, 0, 's'}, {"steps", 1, 0, 'n'},
                                       {"model", 1, 0, 'm'}, {"threads", 1, 0, 't'}, {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        if (c == 's')
            o.seqs = atoi(optarg);
        else if (c == 'n')
            o.steps = atoi(optarg);
        else if (c == 'm')
            o.model = optarg;
        else if (c == 't')
            o.threads = atoi(optarg);
        else
            return 2;
    }
    if (optind + 1 != argc || o.seqs < 1 || o.steps < 1) {
        fprintf(stderr, "usage: bench_mask [--seqs N] [--steps N] [--model FILE.gguf] "
                        "[--threads N] REFDATA\n");
        return 2;
    }
    o.refdata = argv[optind];
    static const char *vocabs[] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf",
                                   "ggml-vocab-falcon.gguf"};
    printf("mask time per sequence per step over %d generations of up to %d tokens per "
           "constraint (random logits); times in us unless marked\n", o.seqs, o.steps);
    for (int i = 0; i < 3; i++) {
        struct samples json = {0}, gbnf = {0};
        if (bench_vocab(vocabs[i], &o, &json, &gbnf) != 0)
            return 1;
        printf("%-24s all JSON-schema steps: p50 %.1f us, p99 %.1f us; all GBNF steps: p50 %.1f "
               "us, p99 %.1f us\n", vocabs[i], pct(&json, 0.5), pct(&json, 0.99),
               pct(&gbnf, 0.5), pct(&gbnf, 0.99));
        free(json.ns);
        free(gbnf.ns);
    }
    if (o.model != NULL && bench_decode(&o) != 0)
        return 1;
    return 0;
}

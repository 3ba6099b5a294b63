/* SPDX-License-Identifier: MIT */
/*
 * JSON schemas end to end. Outputs of constrained generation, greedy and
 * sampled, on the real refdata models (stories260K, llama-2-tiny-random with
 * the 32000-token Llama 2 vocab) and on the gpt-2 and falcon vocab-only GGUFs
 * with random logits, every one parsed as JSON and validated against its
 * schema by python3-jsonschema (tests/grammar_validate.py, an independent
 * validator); bounded schemas end on their own; numeric ranges equal exact
 * decimal comparison on every candidate string; malformed and unsupported
 * schemas are refused naming the JSON pointer.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/mask_apply.h"
#include "launcherd/engine/model.h"
#include "launcherd/engine/sampler.h"
#include "tests/rs_test.h"
#include "tests/unit/grammar_testutil.h"

static const char *const schemas[] = {
    /* nested objects, bounds, optional members */
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\",\"minimum\":-5,"
    "\"maximum\":1200},\"name\":{\"type\":\"string\",\"maxLength\":12},\"tags\":{\"type\":"
    "\"array\",\"items\":{\"enum\":[\"red\",\"green\",null]},\"maxItems\":3},\"pos\":{\"type\":"
    "\"object\",\"properties\":{\"x\":{\"type\":\"number\"},\"y\":{\"type\":\"number\","
    "\"exclusiveMinimum\":0.5}},\"required\":[\"x\"]}},\"required\":[\"id\",\"name\"]}",
    /* arrays with bounds of closed objects */
    "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":"
    "\"string\",\"enum\":[\"a\",\"b\"]},\"v\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}},"
    "\"required\":[\"k\",\"v\"],\"additionalProperties\":false},\"minItems\":2,\"maxItems\":4}",
    /* oneOf with a discriminator */
    "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"circle\"},\"r\":"
    "{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":100}},\"required\":[\"kind\",\"r\"]},"
    "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"rect\"},\"w\":{\"type\":"
    "\"integer\"},\"h\":{\"type\":\"integer\"}},\"required\":[\"kind\",\"w\",\"h\"]}]}",
    /* recursive $ref through $defs */
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"integer\"},"
    "\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},"
    "\"required\":[\"value\"]}},\"$ref\":\"#/$defs/node\"}",
    /* string patterns */
    "{\"type\":\"object\",\"properties\":{\"date\":{\"type\":\"string\",\"pattern\":"
    "\"^[0-9]{4}-(0[1-9]|1[0-2])-[0-3][0-9]$\"},\"code\":{\"type\":\"string\",\"pattern\":"
    "\"^[A-Z]{2,3}_\\\\d+$\"},\"word\":{\"type\":\"string\",\"pattern\":\"^[^\\\\s\\\"\\\\\\\\]{1,8}$\"}},"
    "\"required\":[\"date\",\"code\",\"word\"]}",
    /* number bounds */
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"minimum\":-2.5,"
    "\"maximum\":3.75},\"b\":{\"type\":\"integer\",\"exclusiveMinimum\":-10,\"exclusiveMaximum\":"
    "10},\"c\":{\"type\":\"number\",\"exclusiveMinimum\":0.001},\"d\":{\"type\":\"integer\","
    "\"minimum\":1000000}},\"required\":[\"a\",\"b\",\"c\",\"d\"]}",
    /* tuples, type lists, additional properties with a schema */
    "{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"array\",\"prefixItems\":[{\"type\":"
    "\"string\",\"maxLength\":4},{\"type\":[\"integer\",\"null\"]}],\"items\":false,\"minItems\":1},"
    "\"flag\":{\"type\":\"boolean\"}},\"additionalProperties\":{\"type\":\"integer\"},"
    "\"required\":[\"t\"]}",
    /* enums of any JSON, nested arrays, string lengths */
    "{\"type\":\"object\",\"properties\":{\"e\":{\"enum\":[1,\"two\",[3],{\"four\":4},null,true]},"
    "\"m\":{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"number\"},"
    "\"maxItems\":2},\"maxItems\":2},\"s\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":5}},"
    "\"required\":[\"e\",\"m\",\"s\"]}",
};
#define N_SCHEMAS (sizeof(schemas) / sizeof(schemas[0]))

/* --- logits sources ------------------------------------------------------------------------ */

struct lm {
    rs_model *m;
    rs_kvcache *kv;
    uint32_t table[64];
    uint32_t n_vocab;
};

static int lm_open(const char *rel, struct lm *l, rs_vocab **v)
{
    char path[1024], err[256];
    if (rs_test_refdata(rel, path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    struct rs_model_opts o;
    rs_model_opts_default(&o);
    o.n_threads = 1;
    RS_CHECK_MSG(rs_model_load(path, &o, &l->m, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK_MSG(rs_vocab_load(rs_model_gguf(l->m), v, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK(rs_kvcache_create(l->m, 64, 16, &l->kv) == RS_OK);
    for (uint32_t i = 0; i < 64; i++)
        l->table[i] = i;
    l->n_vocab = rs_model_hparams(l->m)->n_vocab;
    return 0;
}

static void lm_close(struct lm *l)
{
    rs_kvcache_destroy(&l->kv);
    rs_model_destroy(&l->m);
}

/* Logits after token tok at position pos (copied into out). */
static int lm_step(struct lm *l, int32_t tok, uint32_t pos, float *out)
{
    struct rs_model_seq s = {&tok, 1, pos, l->table, 64, 1};
    if (rs_model_step(l->m, l->kv, &s, 1) != RS_OK)
        return -1;
    memcpy(out, rs_model_logits(l->m, 0), l->n_vocab * sizeof(float));
    return 0;
}

/* Random logits, uniform in [-4, 4) (one draw per token: the vocab is 65k wide). */
static void random_logits(float *out, uint32_t n, uint64_t *s)
{
    for (uint32_t i = 0; i < n; i++)
        out[i] = (float)(gt_rand(s) >> 40) * (8.0f / (float)(1u << 24)) - 4.0f;
}

/* --- constrained generation -------------------------------------------------------------- */

struct gen_cfg {
    const struct gt_vocab *x;
    struct lm *lm;     /* NULL: random logits */
    uint32_t n_logits; /* logits row width (the model's vocab) */
    float temperature; /* 0: greedy */
    uint64_t seed;
    uint32_t max_tokens;
    const struct rs_logit_bias *bias; /* applied after the mask */
    size_t n_bias;
};

/* Samples under the mask until an end token or the grammar's end; the text into w. */
static int generate(rs_grammar *g, const struct gen_cfg *c, struct gt_walk *w)
{
    size_t nw = rs_grammar_mask_words(c->n_logits);
    float *logits = malloc(c->n_logits * sizeof(float));
    uint32_t *row = calloc(nw, sizeof(uint32_t));
    int32_t *hist = malloc((c->max_tokens + 2) * sizeof(int32_t));
    rs_grammar_matcher *m;
    rs_sampler *smp;
    RS_CHECK(logits && row && hist && rs_grammar_matcher_create(g, &m) == RS_OK);
    RS_CHECK(rs_sampler_create((int32_t)c->n_logits, &smp) == RS_OK);
    struct rs_sampling_params sp;
    rs_sampling_params_default(&sp);
    sp.temperature = c->temperature;
    sp.seed = c->seed;
    uint64_t rs = c->seed * 77 + 5;
    memset(w, 0, sizeof(*w));
    hist[0] = rs_vocab_bos(c->x->v);
    int rc = 0;
    for (uint32_t step = 0; step < c->max_tokens; step++) {
        if (c->lm != NULL)
            RS_CHECK(lm_step(c->lm, hist[step], step, logits) == 0);
        else
            random_logits(logits, c->n_logits, &rs);
        unsigned flags;
        RS_CHECK(rs_grammar_matcher_fill_mask(m, row, nw, &flags) == RS_OK);
        RS_CHECK_MSG(!(flags & RS_GRAMMAR_MASK_DEAD), "dead end after '%s'", w->text);
        if (flags & RS_GRAMMAR_MASK_ONLY_END) { /* nothing can follow: finish with stop */
            w->ended = 1;
            break;
        }
        uint32_t n_allowed;
        rs_mask_apply(logits, c->n_logits, row, c->bias, c->n_bias, &n_allowed);
        RS_CHECK(n_allowed > 0);
        struct rs_sample_result r;
        RS_CHECK(rs_sampler_sample(smp, &sp, logits, hist, 1, step, step, &r) == RS_OK);
        RS_CHECK_MSG(gt_bit(row, (uint32_t)r.token), "sampled token %d outside the mask", r.token);
        if (rs_vocab_is_eog(c->x->v, r.token)) {
            w->ended = 1;
            break;
        }
        RS_CHECK(rs_grammar_matcher_accept(m, r.token) == RS_OK);
        size_t len;
        const char *p = rs_vocab_token_piece(c->x->v, r.token, 0, &len);
        if (w->len + len >= sizeof(w->text))
            break;
        memcpy(w->text + w->len, p, len);
        w->len += len;
        w->text[w->len] = '\0';
        hist[step + 1] = r.token;
    }
    rs_sampler_destroy(&smp);
    rs_grammar_matcher_destroy(&m);
    free(logits);
    free(row);
    free(hist);
    return rc;
}

/* Every schema: greedy and two sampled runs; ended outputs go to the validator. */
static int generate_all(const struct gt_vocab *x, struct lm *lm, uint32_t n_logits,
                        const char *tag)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s.jsonl", rs_test_tmpdir(), tag);
    FILE *f = fopen(path, "w");
    RS_CHECK(f != NULL);
    int runs = 0, ended = 0;
    for (size_t s = 0; s < N_SCHEMAS; s++) {
        rs_grammar *g = gt_compile(x, RS_CONSTRAINT_JSON_SCHEMA, schemas[s], 0);
        RS_CHECK(g != NULL);
        for (int k = 0; k < 3; k++) {
            struct gen_cfg c = {x, lm, n_logits, k == 0 ? 0.0f : 1.0f, (uint64_t)(s * 10 + k),
                                200, NULL, 0};
            struct gt_walk w;
            RS_CHECK(generate(g, &c, &w) == 0);
            runs++;
            if (!w.ended)
                continue;
            ended++;
            gt_jsonl_put(f, schemas[s], w.text, w.len);
        }
        rs_grammar_release(&g);
    }
    fclose(f);
    RS_CHECK_MSG(ended * 2 >= runs, "%s: only %d of %d runs ended", tag, ended, runs);
    return gt_validate(path);
}

static int models_case(const char *rel, const char *tag)
{
    struct lm lm;
    struct gt_vocab x = {0};
    int rc = lm_open(rel, &lm, &x.v);
    if (rc)
        return rc;
    RS_CHECK(rs_grammar_vocab_create(x.v, &x.gv) == RS_OK);
    x.n = rs_vocab_n_tokens(x.v);
    rc = generate_all(&x, &lm, lm.n_vocab, tag);
    lm_close(&lm);
    gt_vocab_free(&x);
    return rc;
}

static int test_stories260k_outputs_validate(void)
{
    return models_case("stories260K.gguf", "stories260k");
}

static int test_llama2_tiny_random_outputs_validate(void)
{
    return models_case("llama-2-tiny-random.gguf", "llama2-tiny");
}

static int random_logits_case(const char *rel, const char *tag)
{
    struct gt_vocab x;
    int rc = gt_vocab_load(rel, &x);
    if (rc)
        return rc;
    rc = generate_all(&x, NULL, x.n, tag);
    gt_vocab_free(&x);
    return rc;
}

static int test_gpt2_random_logits_outputs_validate(void)
{
    return random_logits_case("tokenizer/ggml-vocab-gpt-2.gguf", "gpt2");
}

static int test_falcon_random_logits_outputs_validate(void)
{
    return random_logits_case("tokenizer/ggml-vocab-falcon.gguf", "falcon");
}

/* Biases toward closing: end tokens, and tokens with a quote or a closing bracket. */
static size_t closing_bias(const struct gt_vocab *x, struct rs_logit_bias *b, size_t cap)
{
    size_t n = 0;
    for (uint32_t t = 0; t < x->n && n < cap; t++) {
        size_t len;
        const char *p = rs_vocab_token_piece(x->v, (int32_t)t, 0, &len);
        if (rs_vocab_is_eog(x->v, (int32_t)t))
            b[n++] = (struct rs_logit_bias){(int32_t)t, 20.0f};
        else if (memchr(p, '}', len) || memchr(p, ']', len) || memchr(p, '"', len))
            b[n++] = (struct rs_logit_bias){(int32_t)t, 4.0f};
    }
    return n;
}

/* "Any JSON object": outputs are objects, on two vocabs. */
static int test_json_object_outputs_validate(void)
{
    static const char *vocabs[] = {"tokenizer/ggml-vocab-llama-spm.gguf",
                                   "tokenizer/ggml-vocab-falcon.gguf"};
    char path[1024];
    snprintf(path, sizeof(path), "%s/object.jsonl", rs_test_tmpdir());
    FILE *f = fopen(path, "w");
    RS_CHECK(f != NULL);
    int ended = 0;
    struct rs_logit_bias *bias = malloc(4096 * sizeof(*bias));
    for (int v = 0; v < 2; v++) {
        struct gt_vocab x;
        int rc = gt_vocab_load(vocabs[v], &x);
        if (rc)
            return rc;
        size_t n_bias = closing_bias(&x, bias, 4096);
        RS_CHECK(rs_logit_bias_validate(bias, n_bias, x.n, NULL, 0) == RS_OK);
        rs_grammar *g = gt_compile(&x, RS_CONSTRAINT_JSON_OBJECT, NULL, 0);
        RS_CHECK(g != NULL);
        for (int k = 0; k < 6; k++) {
            struct gen_cfg c = {&x, NULL, x.n, k == 0 ? 0.0f : 1.0f, (uint64_t)k + 1, 200,
                                bias, n_bias};
            struct gt_walk w;
            RS_CHECK(generate(g, &c, &w) == 0);
            if (w.ended) {
                ended++;
                gt_jsonl_put(f, "{\"type\":\"object\"}", w.text, w.len);
            }
        }
        rs_grammar_release(&g);
        gt_vocab_free(&x);
    }
    free(bias);
    fclose(f);
    RS_CHECK_MSG(ended >= 6, "only %d of 12 runs ended", ended);
    return gt_validate(path);
}

/* Bounded schemas (every string, array and number bounded) end without choosing to. */
static int test_bounded_schemas_end_on_their_own(void)
{
    static const int bounded[] = {0, 1, 2, 5, 7};
    struct gt_vocab x;
    int rc = gt_vocab_load("tokenizer/ggml-vocab-gpt-2.gguf", &x);
    if (rc)
        return rc;
    for (size_t i = 0; i < sizeof(bounded) / sizeof(bounded[0]); i++) {
        rs_grammar *g = gt_compile(&x, RS_CONSTRAINT_JSON_SCHEMA, schemas[bounded[i]], 0);
        RS_CHECK(g != NULL);
        for (int k = 0; k < 3; k++) {
            rs_grammar_matcher *m;
            RS_CHECK(rs_grammar_matcher_create(g, &m) == RS_OK);
            struct gt_walk w;
            RS_CHECK(gt_walk_run(m, &x, (uint64_t)k + 9, 1024, 0.0, 0, &w) == 0);
            RS_CHECK_MSG(w.ended && rs_grammar_matcher_is_finished(m),
                         "schema %d did not end in %u tokens: '%.200s'", bounded[i], w.n_tokens,
                         w.text);
            rs_grammar_matcher_destroy(&m);
        }
        rs_grammar_release(&g);
    }
    gt_vocab_free(&x);
    return 0;
}

/* --- numeric ranges -------------------------------------------------------------------------- */

/* s as a JSON number without exponent, times 10^6 into *v; 0 when it is not one. */
static int json_number_scaled(const char *s, int64_t *v)
{
    int neg = *s == '-';
    s += neg;
    if (!(*s >= '0' && *s <= '9') || (s[0] == '0' && s[1] >= '0' && s[1] <= '9'))
        return 0;
    int64_t ip = 0, fp = 0, scale = 1000000;
    while (*s >= '0' && *s <= '9')
        ip = ip * 10 + (*s++ - '0');
    if (*s == '.') {
        s++;
        if (!(*s >= '0' && *s <= '9'))
            return 0;
        while (*s >= '0' && *s <= '9') {
            scale /= 10;
            fp += (*s++ - '0') * scale;
        }
    }
    if (*s != '\0')
        return 0;
    *v = (ip * 1000000 + fp) * (neg ? -1 : 1);
    return 1;
}

struct range_case {
    const char *schema;
    int integer;
    int64_t lo, hi; /* scaled by 10^6; INT64_MIN / INT64_MAX: none */
    int lx, hx;
};

/* Candidate strings: every integer in [a, b], with fractions and malformed forms. */
static int check_range(const struct gt_vocab *x, const struct range_case *rc, long a, long b)
{
    rs_grammar *g = gt_compile(x, RS_CONSTRAINT_JSON_SCHEMA, rc->schema, RS_GRAMMAR_LAZY);
    RS_CHECK(g != NULL);
    rs_grammar_matcher *m;
    RS_CHECK(rs_grammar_matcher_create(g, &m) == RS_OK);
    static const char *fracs[] = {"", ".", ".0", ".5", ".25", ".001", ".999", ".10", ".0005",
                                  ".75", ".7501", ".1"};
    static const char *pre[] = {"", "0", "+"};
    int n_ok = 0;
    for (long i = a; i <= b; i++)
        for (size_t f = 0; f < sizeof(fracs) / sizeof(fracs[0]); f++)
            for (size_t p = 0; p < 3; p++) {
                char s[64];
                long mag = i < 0 ? -i : i;
                snprintf(s, sizeof(s), "%s%s%ld%s", i < 0 ? "-" : "", pre[p], mag, fracs[f]);
                if (i == 0 && f == 3 && p == 0) /* "-0.5" has i == 0: cover it by hand */
                    snprintf(s, sizeof(s), "-0.5");
                int64_t v;
                int want = json_number_scaled(s, &v) && (!rc->integer || v % 1000000 == 0) &&
                           (rc->lo == INT64_MIN || (rc->lx ? v > rc->lo : v >= rc->lo)) &&
                           (rc->hi == INT64_MAX || (rc->hx ? v < rc->hi : v <= rc->hi));
                if (rc->integer && strchr(s, '.'))
                    want = 0; /* integers are written without a fraction */
                rs_grammar_matcher_reset(m);
                int got = rs_grammar_matcher_accept_bytes(m, s, strlen(s)) == RS_OK &&
                          rs_grammar_matcher_can_end(m);
                RS_CHECK_MSG(got == want, "%s: '%s' accepted %d, in range %d", rc->schema, s, got,
                             want);
                n_ok += got;
            }
    rs_grammar_matcher_destroy(&m);
    rs_grammar_release(&g);
    RS_CHECK(n_ok > 0);
    return 0;
}

static int test_number_ranges_match_exact_comparison(void)
{
    const int64_t N = INT64_MIN, X = INT64_MAX;
    static const struct range_case cases[] = {
        {"{\"type\":\"integer\",\"minimum\":-37,\"maximum\":1205}", 1, -37000000, 1205000000, 0, 0},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":-10,\"exclusiveMaximum\":10}", 1, -10000000,
         10000000, 1, 1},
        {"{\"type\":\"integer\",\"minimum\":-2.5,\"maximum\":99.5}", 1, -2500000, 99500000, 0, 0},
        {"{\"type\":\"integer\",\"maximum\":-3}", 1, N, -3000000, 0, 0},
        {"{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":3.75}", 0, -2500000, 3750000, 0, 0},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0.001}", 0, 1000, X, 1, 0},
        {"{\"type\":\"number\",\"exclusiveMinimum\":-1.5,\"maximum\":0}", 0, -1500000, 0, 1, 0},
        {"{\"type\":\"number\",\"minimum\":0.1,\"maximum\":0.1}", 0, 100000, 100000, 0, 0},
        {"{\"type\":\"number\",\"exclusiveMinimum\":-3,\"exclusiveMaximum\":-1}", 0, -3000000,
         -1000000, 1, 1},
        {"{\"type\":\"number\",\"minimum\":10,\"exclusiveMaximum\":10.5}", 0, 10000000, 10500000, 0,
         1},
        {"{\"type\":\"number\",\"minimum\":5,\"exclusiveMinimum\":true}", 0, 5000000, X, 1, 0},
        {"{\"type\":\"number\",\"maximum\":-0.75}", 0, N, -750000, 0, 0},
    };
    struct gt_vocab x;
    int rc = gt_vocab_load("stories260K.gguf", &x);
    if (rc)
        return rc;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        RS_CHECK(check_range(&x, &cases[i], -60, 130) == 0);
    RS_CHECK(check_range(&x, &cases[0], 1190, 1215) == 0);
    static const struct range_case big = {"{\"type\":\"integer\",\"minimum\":1000000}", 1,
                                          1000000000000ll, X, 0, 0};
    RS_CHECK(check_range(&x, &big, 999990, 1000010) == 0);
    gt_vocab_free(&x);
    return 0;
}

/* --- malformed schemas ------------------------------------------------------------------------ */

static int test_malformed_schemas_name_the_pointer(void)
{
    static const struct {
        const char *schema;
        rs_err rc;
        const char *msg;
    } cases[] = {
        {"{\"type\":", RS_EINVAL, "line 1, column"},
        {"{\"type\":\"object\",\"type\":\"string\"}", RS_EINVAL, "duplicate"},
        {"{\"type\":\"strin\"}", RS_EINVAL, "#/type: unknown type \"strin\""},
        {"{\"type\":5}", RS_EINVAL, "#/type: \"type\" must be"},
        {"{\"properties\":{\"a\":{\"minimum\":\"x\"}}}", RS_EINVAL,
         "#/properties/a/minimum: expected a number"},
        {"{\"multipleOf\":2}", RS_EUNSUPPORTED, "#/multipleOf: the keyword \"multipleOf\""},
        {"{\"properties\":{\"a/b\":{\"not\":{}}}}", RS_EUNSUPPORTED, "#/properties/a~1b/not:"},
        {"{\"enum\":[]}", RS_EINVAL, "#/enum: no value of the enum (it is empty)"},
        {"{\"type\":\"string\",\"enum\":[1,2]}", RS_EINVAL, "has the schema's type"},
        {"{\"$ref\":\"#/$defs/missing\"}", RS_EINVAL, "\"#/$defs/missing\" does not resolve"},
        {"{\"$ref\":\"http://example.com/s.json\"}", RS_EUNSUPPORTED, "only local references"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":1}", RS_EINVAL,
         "#: no number satisfies the lower bound 5 and the upper bound 1"},
        {"{\"type\":\"integer\",\"minimum\":1.2,\"maximum\":1.8}", RS_EINVAL, "no integer"},
        {"{\"properties\":{\"p\":{\"type\":\"string\",\"pattern\":\"(a\"}}}", RS_EINVAL,
         "#/properties/p/pattern: offset 0: '(' is not closed"},
        {"{\"type\":\"string\",\"pattern\":\"a(?=b)\"}", RS_EUNSUPPORTED,
         "#/pattern: offset 1: lookaround"},
        {"{\"type\":\"object\",\"required\":[\"x\"],\"additionalProperties\":false}", RS_EINVAL,
         "required property \"x\" is not in \"properties\""},
        {"{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", RS_EINVAL,
         "maxLength 2 is below minLength 5"},
        {"{\"items\":{\"type\":\"string\",\"minLength\":-1}}", RS_EINVAL,
         "#/items/minLength: expected a nonnegative integer"},
        {"{\"type\":\"array\",\"maxItems\":20000}", RS_ERANGE, "#/maxItems: 20000 is above"},
        {"{\"$ref\":\"#\"}", RS_EINVAL, "matches no string"},
        {"{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", RS_EINVAL, "#: left recursion"},
        {"false", RS_EINVAL, "#: the schema false allows no value"},
        {"{\"anyOf\":[]}", RS_EINVAL, "#/anyOf: \"anyOf\" must be a nonempty array"},
        {"{\"type\":\"object\",\"anyOf\":[{}]}", RS_EUNSUPPORTED, "next to other"},
        {"{\"allOf\":[{},{}]}", RS_EUNSUPPORTED, "\"allOf\" with more than one"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", RS_EUNSUPPORTED, "#/uniqueItems"},
        {"{\"type\":\"array\",\"prefixItems\":[{},{}],\"items\":false,\"minItems\":3}", RS_EINVAL,
         "minItems 3 exceeds the 2 items allowed"},
        {"{\"type\":\"number\",\"minimum\":1e300}", RS_EUNSUPPORTED, "more than 48 digits"},
        {"[1,2]", RS_EINVAL, "#: a schema must be an object or a boolean"},
        {"{\"$ref\":\"#/$defs/a\",\"type\":\"string\",\"$defs\":{\"a\":{}}}", RS_EUNSUPPORTED,
         "next to \"$ref\""},
    };
    struct gt_vocab x;
    int rc = gt_vocab_load("stories260K.gguf", &x);
    if (rc)
        return rc;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct rs_constraint c = {RS_CONSTRAINT_JSON_SCHEMA, cases[i].schema,
                                  strlen(cases[i].schema), NULL, NULL, 0};
        rs_grammar *g = NULL;
        char err[512] = "";
        rs_err r = rs_grammar_compile(x.gv, &c, NULL, RS_GRAMMAR_LAZY, &g, err, sizeof(err));
        RS_CHECK_MSG(r == cases[i].rc && strstr(err, cases[i].msg) != NULL,
                     "%s: got %s '%s', want %s '%s'", cases[i].schema, rs_strerror(r), err,
                     rs_strerror(cases[i].rc), cases[i].msg);
    }
    /* annotations and unknown keywords are ignored, not refused */
    rs_grammar *g = gt_compile(&x, RS_CONSTRAINT_JSON_SCHEMA,
                               "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\","
                               "\"title\":\"t\",\"description\":\"d\",\"x-vendor\":1,\"type\":"
                               "\"string\",\"format\":\"date\",\"default\":\"a\"}", 0);
    RS_CHECK(g != NULL);
    rs_grammar_release(&g);
    gt_vocab_free(&x);
    return 0;
}

/* The validator can fail: invalid JSON and schema violations are reported. */
static int test_validator_rejects_invalid_outputs(void)
{
    static const char *const bad[][2] = {
        {"{\"type\":\"object\"}", "{\"a\":1"},
        {"{\"type\":\"integer\",\"maximum\":3}", "4"},
        {"{\"type\":\"string\",\"pattern\":\"^a+$\"}", "\"ab\""},
        {"{\"type\":\"number\"}", "NaN"},
    };
    char path[1024];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(path, sizeof(path), "%s/bad%zu.jsonl", rs_test_tmpdir(), i);
        FILE *f = fopen(path, "w");
        RS_CHECK(f != NULL);
        gt_jsonl_put(f, bad[i][0], bad[i][1], strlen(bad[i][1]));
        fclose(f);
        int rc = gt_validate(path);
        if (rc == RS_TEST_SKIP)
            return rc;
        RS_CHECK_MSG(rc == 1, "case %zu was not rejected", i);
    }
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_validator_rejects_invalid_outputs),
    RS_TEST(test_stories260k_outputs_validate),
    RS_TEST(test_llama2_tiny_random_outputs_validate),
    RS_TEST(test_gpt2_random_logits_outputs_validate),
    RS_TEST(test_falcon_random_logits_outputs_validate),
    RS_TEST(test_json_object_outputs_validate),
    RS_TEST(test_bounded_schemas_end_on_their_own),
    RS_TEST(test_number_ranges_match_exact_comparison),
    RS_TEST(test_malformed_schemas_name_the_pointer),
};

RS_TEST_MAIN(cases)

/* SPDX-License-Identifier: MIT */
/*
 * The request-level part of the OpenAI request parser: the JSON document,
 * the scalar sampling fields (one table row each, with OpenAI's ranges), n,
 * streaming, logprobs, stop, the completions prompt forms and the
 * structured-output fields. Chat messages and tools are in oai_chat.c. Every
 * refusal names the field in `param` and in the message. Leaves out the
 * served-model check and anything that needs the vocab (call.c, tokenizerd).
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "gatewayd/oai_impl.h"

/* Copies s as valid UTF-8 (ill-formed bytes as U+FFFD) into out, cut at a character. */
static void utf8_copy(const char *s, char *out, size_t cap)
{
    char clean[3 * sizeof(((struct gw_err *)0)->message)];
    size_t n = strlen(s);
    n = n < sizeof(clean) / 3 ? n : sizeof(clean) / 3;
    size_t total = rs_utf8_sanitize(s, n, clean), k = total < cap ? total : cap - 1;
    while (k > 0 && k < total && ((uint8_t)clean[k] & 0xc0) == 0x80)
        k--; /* cut before a character, not in it */
    memcpy(out, clean, k);
    out[k] = '\0';
}

int gw_err_set(struct gw_err *e, int status, const char *param, const char *fmt, ...)
{
    char msg[sizeof(e->message)];
    va_list ap;
    e->status = status;
    e->type = status == 404   ? "not_found_error"
              : status == 401 ? "authentication_error"
              : status == 429 ? "rate_limit_error"
              : status >= 500 ? "server_error"
                              : "invalid_request_error";
    e->code = NULL;
    utf8_copy(param != NULL ? param : "", e->param, sizeof(e->param));
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* messages quote the client's bytes (a JSON error's context): JSON needs valid UTF-8 */
    utf8_copy(msg, e->message, sizeof(e->message));
    return -1;
}

const char *oai_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
        return "integer";
    case JSON_REAL:
        return "number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    default:
        return "null";
    }
}

json_t *oai_field(const json_t *obj, const char *name)
{
    json_t *v = json_object_get(obj, name);
    return v != NULL && !json_is_null(v) ? v : NULL;
}

int oai_number(const json_t *v, const char *param, double *out, struct gw_err *e)
{
    if (!json_is_number(v))
        return gw_err_set(e, 400, param, "'%s' must be a number, got %s", param, oai_type_name(v));
    *out = json_number_value(v);
    return 0;
}

int oai_int(const json_t *v, const char *param, long long lo, long long hi, long long *out,
            struct gw_err *e)
{
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
               fabs(json_real_value(v)) < 9e15) {
        x = (long long)json_real_value(v); /* 5.0 from a client that only has doubles */
    } else {
        return gw_err_set(e, 400, param, "'%s' must be an integer, got %s", param,
                          oai_type_name(v));
    }
    if (x < lo || x > hi)
        return gw_err_set(e, 400, param, "'%s' must be in [%lld, %lld], got %lld", param, lo, hi,
                          x);
    *out = x;
    return 0;
}

int oai_bool(const json_t *v, const char *param, bool *out, struct gw_err *e)
{
    if (!json_is_boolean(v))
        return gw_err_set(e, 400, param, "'%s' must be a boolean, got %s", param, oai_type_name(v));
    *out = json_is_true(v);
    return 0;
}

int oai_string(const json_t *v, const char *param, const char **s, size_t *len, struct gw_err *e)
{
    if (!json_is_string(v))
        return gw_err_set(e, 400, param, "'%s' must be a string, got %s", param, oai_type_name(v));
    *s = json_string_value(v);
    if (len != NULL)
        *len = json_string_length(v);
    return 0;
}

/* --- sampling fields: one row each ---------------------------------------------------------- */

enum span { CLOSED, OPEN_LO };

struct float_field {
    const char *name;
    double lo, hi;
    enum span span;
    uint32_t bit;
    size_t off;
};

#define GOFF(f) offsetof(struct rs_wire_generate, f)
static const struct float_field float_fields[] = {
    {"temperature", 0, 2, CLOSED, RS_WIRE_GEN_TEMPERATURE, GOFF(temperature)},
    {"top_p", 0, 1, OPEN_LO, RS_WIRE_GEN_TOP_P, GOFF(top_p)},
    {"min_p", 0, 1, CLOSED, RS_WIRE_GEN_MIN_P, GOFF(min_p)},
    {"presence_penalty", -2, 2, CLOSED, RS_WIRE_GEN_PRESENCE_PENALTY, GOFF(presence_penalty)},
    {"frequency_penalty", -2, 2, CLOSED, RS_WIRE_GEN_FREQUENCY_PENALTY, GOFF(frequency_penalty)},
    {"repetition_penalty", 0, 1e6, OPEN_LO, RS_WIRE_GEN_REPETITION_PENALTY,
     GOFF(repetition_penalty)},
};

static int parse_floats(const json_t *root, struct rs_wire_generate *g, struct gw_err *e)
{
    for (size_t i = 0; i < sizeof(float_fields) / sizeof(float_fields[0]); i++) {
        const struct float_field *f = &float_fields[i];
        json_t *v = oai_field(root, f->name);
        double x = 0;
        if (v == NULL)
            continue;
        if (oai_number(v, f->name, &x, e) != 0)
            return -1;
        if (!isfinite(x) || x > f->hi || x < f->lo || (f->span == OPEN_LO && x == f->lo))
            return gw_err_set(e, 400, f->name, "'%s' must be in %c%g, %g], got %g", f->name,
                              f->span == OPEN_LO ? '(' : '[', f->lo, f->hi, x);
        *(float *)((char *)g + f->off) = (float)x;
        g->has |= f->bit;
    }
    return 0;
}

static int parse_ints(const json_t *root, struct gw_oai_req *r, struct gw_err *e)
{
    struct rs_wire_generate *g = &r->gen;
    json_t *v;
    long long x;
    if ((v = oai_field(root, "top_k")) != NULL) { /* vLLM: -1 (or 0) = off */
        if (oai_int(v, "top_k", -1, INT32_MAX, &x, e) != 0)
            return -1;
        g->top_k = x < 0 ? 0 : (int32_t)x;
        g->has |= RS_WIRE_GEN_TOP_K;
    }
    if ((v = oai_field(root, "seed")) != NULL) { /* any int64: its two's complement bits */
        if (oai_int(v, "seed", INT64_MIN, INT64_MAX, &x, e) != 0)
            return -1;
        g->seed = (uint64_t)x;
        g->has |= RS_WIRE_GEN_SEED;
    }
    if ((v = oai_field(root, "priority")) != NULL) {
        if (oai_int(v, "priority", INT32_MIN, INT32_MAX, &x, e) != 0)
            return -1;
        g->priority = (int32_t)x;
        g->has |= RS_WIRE_GEN_PRIORITY;
    }
    if ((v = oai_field(root, "ignore_eos")) != NULL) {
        if (oai_bool(v, "ignore_eos", &g->ignore_eos, e) != 0)
            return -1;
        g->has |= RS_WIRE_GEN_IGNORE_EOS;
    }
    if ((v = oai_field(root, "min_tokens")) != NULL) {
        if (oai_int(v, "min_tokens", 0, UINT32_MAX, &x, e) != 0)
            return -1;
        r->min_tokens = (uint32_t)x;
    }
    return 0;
}

/* max_tokens (completions: OpenAI's default 16), max_completion_tokens (chat's name). */
static int parse_max_tokens(const json_t *root, struct gw_oai_req *r, struct gw_err *e)
{
    const char *names[] = {"max_completion_tokens", "max_tokens"};
    for (int i = 0; i < 2; i++) {
        json_t *v = oai_field(root, names[i]);
        long long x;
        if (v == NULL)
            continue;
        if (oai_int(v, names[i], 1, UINT32_MAX, &x, e) != 0)
            return -1;
        r->gen.max_tokens = (uint32_t)x;
        r->gen.has |= RS_WIRE_GEN_MAX_TOKENS;
        break;
    }
    if (!(r->gen.has & RS_WIRE_GEN_MAX_TOKENS) && r->api == GW_API_COMPLETIONS) {
        r->gen.max_tokens = 16;
        r->gen.has |= RS_WIRE_GEN_MAX_TOKENS;
    }
    if (r->min_tokens > 0 && (r->gen.has & RS_WIRE_GEN_MAX_TOKENS) &&
        r->min_tokens > r->gen.max_tokens)
        return gw_err_set(e, 400, "min_tokens",
                          "'min_tokens' (%u) must not exceed 'max_tokens' "
                          "(%u)",
                          r->min_tokens, r->gen.max_tokens);
    return 0;
}

/* --- stop, stop_token_ids, logit_bias -------------------------------------------------------- */

static int one_stop(const json_t *v, uint32_t i, bool list, struct rs_wire_generate *g,
                    struct gw_err *e)
{
    const char *s;
    size_t len;
    char param[32];
    snprintf(param, sizeof(param), list ? "stop[%u]" : "stop", i);
    if (oai_string(v, param, &s, &len, e) != 0)
        return -1;
    if (len == 0 || len > RS_WIRE_STOP_LEN_MAX)
        return gw_err_set(e, 400, "stop", "'%s' must be 1..%d bytes, got %zu", param,
                          RS_WIRE_STOP_LEN_MAX, len);
    g->stop[g->n_stop++] = (struct rs_wire_str){s, (uint32_t)len};
    return 0;
}

static int parse_stop(const json_t *root, struct rs_wire_generate *g, struct gw_err *e)
{
    json_t *v = oai_field(root, "stop"), *it;
    size_t i;
    if (v != NULL && json_is_array(v)) {
        if (json_array_size(v) > RS_WIRE_STOP_MAX)
            return gw_err_set(e, 400, "stop", "'stop' has %zu strings, at most %d",
                              json_array_size(v), RS_WIRE_STOP_MAX);
        json_array_foreach(v, i, it) if (one_stop(it, (uint32_t)i, true, g, e) != 0) return -1;
    } else if (v != NULL && one_stop(v, 0, false, g, e) != 0) {
        return -1;
    }
    g->has |= g->n_stop > 0 ? RS_WIRE_GEN_STOP : 0;
    if ((v = oai_field(root, "stop_token_ids")) == NULL)
        return 0;
    if (!json_is_array(v) || json_array_size(v) > RS_WIRE_STOP_IDS_MAX)
        return gw_err_set(e, 400, "stop_token_ids",
                          "'stop_token_ids' must be an array of at "
                          "most %d token ids",
                          RS_WIRE_STOP_IDS_MAX);
    json_array_foreach(v, i, it)
    {
        long long x;
        if (oai_int(it, "stop_token_ids", 0, RS_WIRE_TOKEN_MAX, &x, e) != 0)
            return -1;
        g->stop_ids[g->n_stop_ids++] = (uint32_t)x;
    }
    g->has |= g->n_stop_ids > 0 ? RS_WIRE_GEN_STOP_TOKEN_IDS : 0;
    return 0;
}

static int parse_logit_bias(const json_t *root, struct gw_oai_req *r, struct gw_err *e)
{
    json_t *v = oai_field(root, "logit_bias"), *val;
    const char *key;
    if (v == NULL)
        return 0;
    if (!json_is_object(v) || json_object_size(v) > GW_MAX_LOGIT_BIAS)
        return gw_err_set(e, 400, "logit_bias",
                          "'logit_bias' must be an object of at most %d "
                          "token ids to numbers",
                          GW_MAX_LOGIT_BIAS);
    r->logit_bias = calloc(json_object_size(v) + 1, sizeof(*r->logit_bias));
    if (r->logit_bias == NULL)
        return gw_err_set(e, 500, "", "out of memory");
    json_object_foreach(v, key, val)
    {
        char *end;
        double b = 0;
        unsigned long id = strtoul(key, &end, 10);
        if (*key == '\0' || *end != '\0' || key[0] == '-' || key[0] == '+' ||
            id > RS_WIRE_TOKEN_MAX)
            return gw_err_set(e, 400, "logit_bias",
                              "'logit_bias' key '%.40s' is not a token "
                              "id",
                              key);
        if (oai_number(val, "logit_bias", &b, e) != 0)
            return -1;
        if (!(b >= -100 && b <= 100))
            return gw_err_set(e, 400, "logit_bias",
                              "'logit_bias' of token %lu must be in "
                              "[-100, 100], got %g",
                              id, b);
        r->logit_bias[r->n_logit_bias++] = (struct gw_logit_bias){(uint32_t)id, (float)b};
    }
    return 0;
}

/* --- response_format ------------------------------------------------------------------------- */

static int parse_json_schema(const json_t *rf, struct gw_oai_req *r, struct gw_err *e)
{
    json_t *js = oai_field(rf, "json_schema"), *v;
    const char *name;
    size_t len;
    if (js == NULL || !json_is_object(js))
        return gw_err_set(e, 400, "response_format.json_schema",
                          "'response_format' of type "
                          "'json_schema' needs a 'json_schema' object");
    if ((v = oai_field(js, "name")) == NULL)
        return gw_err_set(e, 400, "response_format.json_schema.name",
                          "'response_format."
                          "json_schema.name' is required");
    if (oai_string(v, "response_format.json_schema.name", &name, &len, e) != 0)
        return -1;
    if (len == 0 || len > 64 ||
        strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWX"
                     "YZ0123456789_-") != len)
        return gw_err_set(e, 400, "response_format.json_schema.name",
                          "'response_format."
                          "json_schema.name' must be 1..64 of a-z, A-Z, 0-9, _ and -");
    r->json_schema_name = name;
    if ((v = oai_field(js, "schema")) != NULL && !json_is_object(v))
        return gw_err_set(e, 400, "response_format.json_schema.schema",
                          "'response_format."
                          "json_schema.schema' must be an object, got %s",
                          oai_type_name(v));
    r->json_schema = v;
    if (v != NULL && (r->json_schema_text = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER |
                                                           JSON_ENCODE_ANY)) == NULL)
        return gw_err_set(e, 400, "response_format.json_schema.schema",
                          "'response_format.json_schema.schema' cannot be written as JSON");
    if ((v = oai_field(js, "strict")) != NULL &&
        oai_bool(v, "response_format.json_schema.strict", &r->json_schema_strict, e) != 0)
        return -1;
    return 0;
}

static int parse_response_format(const json_t *root, struct gw_oai_req *r, struct gw_err *e)
{
    static const char *const names[] = {"text", "json_object", "json_schema"};
    json_t *rf = oai_field(root, "response_format"), *t;
    const char *type;
    if (rf == NULL)
        return 0;
    if (!json_is_object(rf))
        return gw_err_set(e, 400, "response_format",
                          "'response_format' must be an object, got "
                          "%s",
                          oai_type_name(rf));
    if ((t = oai_field(rf, "type")) == NULL)
        return gw_err_set(e, 400, "response_format.type", "'response_format.type' is required");
    if (oai_string(t, "response_format.type", &type, NULL, e) != 0)
        return -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(type, names[i]) == 0)
            r->response_format = (enum gw_rf)(GW_RF_TEXT + i);
    if (r->response_format == GW_RF_NONE)
        return gw_err_set(e, 400, "response_format.type",
                          "'response_format.type' must be "
                          "'text', 'json_object' or 'json_schema', got '%.40s'",
                          type);
    return r->response_format == GW_RF_JSON_SCHEMA ? parse_json_schema(rf, r, e) : 0;
}

/* --- prompts ---------------------------------------------------------------------------------- */

static int prompt_ids(const json_t *a, uint32_t k, struct gw_prompt *p, struct gw_err *e)
{
    size_t n = json_array_size(a), i;
    json_t *it;
    if (n == 0 || n > RS_WIRE_PROMPT_IDS_MAX)
        return gw_err_set(e, 400, "prompt",
                          "'prompt' item %u: a token id list must hold 1..%u "
                          "ids, got %zu",
                          k, RS_WIRE_PROMPT_IDS_MAX, n);
    p->is_ids = true;
    p->ids = malloc(n * sizeof(uint32_t));
    if (p->ids == NULL)
        return gw_err_set(e, 500, "", "out of memory");
    json_array_foreach(a, i, it)
    {
        if (!json_is_integer(it) || json_integer_value(it) < 0 ||
            json_integer_value(it) > RS_WIRE_TOKEN_MAX)
            return gw_err_set(e, 400, "prompt",
                              "'prompt' item %u: token %zu must be an integer "
                              "in [0, %u], got %s",
                              k, i, RS_WIRE_TOKEN_MAX, oai_type_name(it));
        p->ids[p->n_ids++] = (uint32_t)json_integer_value(it);
    }
    return 0;
}

static int prompt_text(const json_t *s, uint32_t k, struct gw_prompt *p, struct gw_err *e)
{
    p->text = json_string_value(s);
    p->text_len = json_string_length(s);
    if (p->text_len > RS_WIRE_PROMPT_MAX)
        return gw_err_set(e, 400, "prompt", "'prompt' item %u is %zu bytes, at most %u", k,
                          p->text_len, RS_WIRE_PROMPT_MAX);
    return 0;
}

static int parse_prompts(const json_t *root, struct gw_oai_req *r, struct gw_err *e)
{
    json_t *v = oai_field(root, "prompt"), *it;
    size_t n, i;
    if (v == NULL)
        return gw_err_set(e, 400, "prompt", "'prompt' is required");
    bool ids = json_is_array(v) && json_array_size(v) > 0 && json_is_integer(json_array_get(v, 0));
    n = json_is_string(v) || ids ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    if (n == 0 || n > GW_MAX_PROMPTS)
        return gw_err_set(e, 400, "prompt",
                          "'prompt' must be a string, an array of 1..%d "
                          "strings, an array of token ids or an array of token id arrays",
                          GW_MAX_PROMPTS);
    r->prompts = calloc(n, sizeof(*r->prompts));
    if (r->prompts == NULL)
        return gw_err_set(e, 500, "", "out of memory");
    r->n_prompts = (uint32_t)n;
    if (json_is_string(v))
        return prompt_text(v, 0, &r->prompts[0], e);
    if (ids)
        return prompt_ids(v, 0, &r->prompts[0], e);
    json_array_foreach(v, i, it)
    {
        int rc = json_is_string(it)  ? prompt_text(it, (uint32_t)i, &r->prompts[i], e)
                 : json_is_array(it) ? prompt_ids(it, (uint32_t)i, &r->prompts[i], e)
                                     : gw_err_set(e, 400, "prompt",
                                                  "'prompt' item %zu must be "
                                                  "a string or a token id array, got %s",
                                                  i, oai_type_name(it));
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* --- n, streaming, logprobs, completions extras ---------------------------------------------- */

static int parse_choices(const json_t *root, struct gw_oai_req *r, struct gw_err *e)
{
    json_t *v;
    long long n = 1, best;
    if ((v = oai_field(root, "n")) != NULL && oai_int(v, "n", 1, GW_MAX_CHOICES, &n, e) != 0)
        return -1;
    r->n = (uint32_t)n;
    if ((v = oai_field(root, "best_of")) != NULL) {
        if (oai_int(v, "best_of", 1, GW_MAX_CHOICES, &best, e) != 0)
            return -1;
        if (best != n)
            return gw_err_set(e, 400, "best_of",
                              "'best_of' must equal 'n' (%lld): ranking "
                              "candidates server-side is not supported, got %lld",
                              n, best);
    }
    return 0;
}

static int parse_stream(const json_t *root, struct gw_oai_req *r, struct gw_err *e)
{
    json_t *v, *so;
    if ((v = oai_field(root, "stream")) != NULL && oai_bool(v, "stream", &r->stream, e) != 0)
        return -1;
    if ((so = oai_field(root, "stream_options")) == NULL)
        return 0;
    if (!r->stream)
        return gw_err_set(e, 400, "stream_options", "'stream_options' needs 'stream': true");
    if (!json_is_object(so))
        return gw_err_set(e, 400, "stream_options",
                          "'stream_options' must be an object, got "
                          "%s",
                          oai_type_name(so));
    if ((v = oai_field(so, "include_usage")) != NULL &&
        oai_bool(v, "stream_options.include_usage", &r->include_usage, e) != 0)
        return -1;
    return 0;
}

/* Completions: `logprobs` is the number of alternatives; chat: a flag plus top_logprobs. */
static int parse_logprobs(const json_t *root, struct gw_oai_req *r, struct gw_err *e)
{
    json_t *v = oai_field(root, "logprobs"), *t = oai_field(root, "top_logprobs");
    long long k = 0;
    if (r->api == GW_API_COMPLETIONS) {
        if (v != NULL && oai_int(v, "logprobs", 0, GW_TOP_LOGPROBS_MAX, &k, e) != 0)
            return -1;
        r->logprobs = v != NULL;
    } else {
        if (v != NULL && oai_bool(v, "logprobs", &r->logprobs, e) != 0)
            return -1;
        if (t != NULL && oai_int(t, "top_logprobs", 0, GW_TOP_LOGPROBS_MAX, &k, e) != 0)
            return -1;
        if (t != NULL && !r->logprobs)
            return gw_err_set(e, 400, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
    r->top_logprobs = (uint32_t)k;
    return 0;
}

static int parse_completion_extras(const json_t *root, struct gw_oai_req *r, struct gw_err *e)
{
    json_t *v;
    const char *s;
    size_t len;
    if ((v = oai_field(root, "echo")) != NULL && oai_bool(v, "echo", &r->echo, e) != 0)
        return -1;
    if (r->echo && r->logprobs)
        return gw_err_set(e, 400, "echo",
                          "'echo' with 'logprobs' would need the prompt's "
                          "logprobs, which this server does not compute");
    if ((v = oai_field(root, "suffix")) != NULL) {
        if (oai_string(v, "suffix", &s, &len, e) != 0)
            return -1;
        if (len > 0)
            return gw_err_set(e, 400, "suffix",
                              "'suffix' (fill-in-the-middle) is not "
                              "supported");
    }
    if (parse_prompts(root, r, e) != 0)
        return -1;
    if (gw_oai_n_choices(r) > GW_MAX_CHOICES)
        return gw_err_set(e, 400, "n", "'n' x prompts is %u choices, at most %d",
                          gw_oai_n_choices(r), GW_MAX_CHOICES);
    return 0;
}

static int parse_common(const json_t *root, struct gw_oai_req *r, struct gw_err *e)
{
    json_t *v;
    if ((v = oai_field(root, "model")) != NULL && oai_string(v, "model", &r->model, NULL, e) != 0)
        return -1;
    if ((v = oai_field(root, "user")) != NULL && oai_string(v, "user", &r->user, NULL, e) != 0)
        return -1;
    if (parse_floats(root, &r->gen, e) != 0 || parse_ints(root, r, e) != 0 ||
        parse_max_tokens(root, r, e) != 0 || parse_stop(root, &r->gen, e) != 0 ||
        parse_choices(root, r, e) != 0 || parse_stream(root, r, e) != 0 ||
        parse_logprobs(root, r, e) != 0 || parse_logit_bias(root, r, e) != 0 ||
        parse_response_format(root, r, e) != 0)
        return -1;
    return r->api == GW_API_CHAT ? oai_parse_chat(root, r, e) : parse_completion_extras(root, r, e);
}

int gw_oai_parse(enum gw_api api, const char *body, size_t len, struct gw_oai_req *out,
                 struct gw_err *e)
{
    json_error_t je;
    memset(out, 0, sizeof(*out));
    out->api = api;
    rs_wire_generate_init(&out->gen);
    out->add_generation_prompt = true;
    out->root = json_loadb(body, len, JSON_ALLOW_NUL, &je);
    if (out->root == NULL)
        return gw_err_set(e, 400, "", "invalid JSON at line %d column %d: %s", je.line, je.column,
                          je.text);
    if (!json_is_object(out->root)) {
        gw_err_set(e, 400, "", "the request body must be a JSON object, got %s",
                   oai_type_name(out->root));
        gw_oai_req_free(out);
        return -1;
    }
    if (parse_common(out->root, out, e) != 0) {
        gw_oai_req_free(out);
        return -1;
    }
    return 0;
}

void gw_oai_req_free(struct gw_oai_req *r)
{
    for (uint32_t i = 0; r->prompts != NULL && i < r->n_prompts; i++)
        free(r->prompts[i].ids);
    for (uint32_t i = 0; r->messages != NULL && i < r->n_messages; i++) {
        free(r->messages[i].content);
        free(r->messages[i].tool_calls);
    }
    free(r->prompts);
    free(r->messages);
    free(r->tools);
    free(r->logit_bias);
    oai_conversation_free(r);
    free(r->json_schema_text);
    if (r->root != NULL)
        json_decref(r->root);
    memset(r, 0, sizeof(*r));
}

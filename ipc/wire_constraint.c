/* SPDX-License-Identifier: MIT */
/*
 * The structured-output fields of a generate (wire_constraint.h): strict
 * bounded readers, writers from the same tables, the semantic validator
 * and the content hash tokenizerd's intake hash mixes in.
 */
#include <math.h>
#include <string.h>

#include "common/log.h"
#include "ipc/wire_constraint_impl.h"

static const char *const kind_names[] = {
    [RS_WIRE_CX_NONE] = "none",           [RS_WIRE_CX_GBNF] = "gbnf",
    [RS_WIRE_CX_JSON_SCHEMA] = "json_schema", [RS_WIRE_CX_JSON_OBJECT] = "json_object",
    [RS_WIRE_CX_REGEX] = "regex",         [RS_WIRE_CX_CHOICE] = "choice",
};
#define N_KINDS (sizeof(kind_names) / sizeof(kind_names[0]))

/* Which kinds carry "text" (the others: json_object nothing, choice "choices"). */
static int kind_has_text(enum rs_wire_cx_kind k)
{
    return k == RS_WIRE_CX_GBNF || k == RS_WIRE_CX_JSON_SCHEMA || k == RS_WIRE_CX_REGEX;
}

const char *rs_wire_cx_kind_name(enum rs_wire_cx_kind k)
{
    return (unsigned)k < N_KINDS ? kind_names[k] : "unknown";
}

static const struct wire_field cx_fields[] = {
    {"kind", "constraint.kind"}, {"text", "constraint.text"}, {"choices", "constraint.choices"}};
#define CX_KIND 0x1u
#define CX_TEXT 0x2u
#define CX_CHOICES 0x4u

static rs_err rd_kind(struct wire_rd *r, struct rs_wire_constraint *c)
{
    struct rs_wire_str s;
    rs_err e = wire_rd_str(r, &s, RS_WIRE_NAME_MAX);
    if (e != RS_OK)
        return e;
    for (unsigned k = 1; k < N_KINDS; k++)
        if (strlen(kind_names[k]) == s.len && memcmp(kind_names[k], s.ptr, s.len) == 0) {
            c->kind = (enum rs_wire_cx_kind)k;
            return RS_OK;
        }
    return wire_fail(r, RS_WIRE_INVALID_PARAM, "'%.*s' is not a constraint kind (gbnf, "
                     "json_schema, json_object, regex, choice)", (int)s.len, s.ptr);
}

static rs_err rd_choices(struct wire_rd *r, struct rs_wire_constraint *c)
{
    rs_err e = wire_rd_array(r, &c->n_choices, RS_WIRE_CX_CHOICES_MAX);
    uint64_t total = 0;
    for (uint32_t i = 0; e == RS_OK && i < c->n_choices; i++) {
        r->index = i;
        e = wire_rd_text(r, &c->choices[i], RS_WIRE_CX_CHOICE_LEN_MAX);
        total += c->choices[i].len;
        if (e == RS_OK && total > RS_WIRE_CX_CHOICE_BYTES_MAX)
            e = wire_fail(r, RS_WIRE_TOO_LARGE, "choices exceed %u bytes together",
                          RS_WIRE_CX_CHOICE_BYTES_MAX);
    }
    r->index = -1;
    return e;
}

static rs_err cx_field(struct wire_rd *r, unsigned idx, void *ctx)
{
    struct rs_wire_constraint *c = ctx;
    switch (idx) {
    case 0: return rd_kind(r, c);
    case 1: return wire_rd_text(r, &c->text, RS_WIRE_CX_TEXT_MAX);
    case 2: return rd_choices(r, c);
    }
    return wire_fail(r, RS_WIRE_INTERNAL, "no decoder for constraint field %u", idx);
}

rs_err wire_rd_constraint(struct wire_rd *r, struct rs_wire_constraint *c)
{
    uint32_t n;
    uint64_t seen;
    const char *outer = r->field;
    rs_err e = wire_rd_map(r, &n);
    if (e == RS_OK)
        e = wire_rd_fields(r, n, cx_fields, 3, CX_KIND, cx_field, c, &seen);
    if (e != RS_OK)
        return e;
    r->field = outer;
    if (kind_has_text(c->kind) != ((seen & CX_TEXT) != 0))
        return wire_fail(r, RS_WIRE_INVALID_PARAM, "kind '%s' %s 'text'",
                         rs_wire_cx_kind_name(c->kind),
                         kind_has_text(c->kind) ? "needs" : "takes no");
    if ((c->kind == RS_WIRE_CX_CHOICE) != ((seen & CX_CHOICES) != 0))
        return wire_fail(r, RS_WIRE_INVALID_PARAM, "kind '%s' %s 'choices'",
                         rs_wire_cx_kind_name(c->kind),
                         c->kind == RS_WIRE_CX_CHOICE ? "needs" : "takes no");
    return RS_OK;
}

/* One key/value pair of the bias map: a token id and a float. */
static rs_err rd_bias_pair(struct wire_rd *r, struct rs_wire_bias *b)
{
    rs_err e = wire_rd_u32(r, &b->token, RS_WIRE_TOKEN_MAX);
    return e == RS_OK ? wire_rd_f32(r, &b->bias) : e;
}

rs_err wire_rd_logit_bias(struct wire_rd *r, struct rs_wire_constraint *c)
{
    uint32_t n;
    rs_err e = wire_rd_map(r, &n);
    if (e != RS_OK)
        return e;
    if (n > RS_WIRE_LOGIT_BIAS_MAX)
        return wire_fail(r, RS_WIRE_TOO_LARGE, "%u entries, at most %u", n,
                         RS_WIRE_LOGIT_BIAS_MAX);
    c->bias_packed = r->p;
    for (uint32_t i = 0; e == RS_OK && i < n; i++) {
        struct rs_wire_bias b;
        r->index = i;
        e = rd_bias_pair(r, &b);
    }
    r->index = -1;
    c->n_bias = n;
    c->bias_packed_len = (size_t)(r->p - c->bias_packed);
    return e;
}

rs_err wire_rd_allowed_ids(struct wire_rd *r, struct rs_wire_constraint *c)
{
    return wire_rd_ids(r, &c->allowed, RS_WIRE_ALLOWED_IDS_MAX);
}

uint32_t rs_wire_bias_copy(const struct rs_wire_constraint *c, struct rs_wire_bias *dst,
                           uint32_t cap)
{
    uint32_t n = c->n_bias < cap ? c->n_bias : cap;
    if (c->bias != NULL) {
        memcpy(dst, c->bias, n * sizeof(*dst));
        return n;
    }
    struct rs_wire_error ignored;
    struct wire_rd r;
    wire_rd_init(&r, c->bias_packed, c->bias_packed_len, &ignored);
    for (uint32_t i = 0; i < n; i++)
        if (rd_bias_pair(&r, &dst[i]) != RS_OK)
            return i; /* not a validated view */
    return n;
}

void wire_wr_constraint(struct wire_wr *w, const struct rs_wire_constraint *c)
{
    int text = kind_has_text(c->kind), ch = c->kind == RS_WIRE_CX_CHOICE;
    wire_wr_map(w, 1 + (uint32_t)text + (uint32_t)ch);
    wire_wr_key(w, "kind");
    const char *name = rs_wire_cx_kind_name(c->kind);
    wire_wr_str(w, name, strlen(name));
    if (text) {
        wire_wr_key(w, "text");
        wire_wr_str(w, c->text.ptr, c->text.len);
    }
    if (ch) {
        wire_wr_key(w, "choices");
        wire_wr_array(w, c->n_choices);
        for (uint32_t i = 0; i < c->n_choices; i++)
            wire_wr_str(w, c->choices[i].ptr, c->choices[i].len);
    }
}

void wire_wr_logit_bias(struct wire_wr *w, const struct rs_wire_constraint *c)
{
    struct rs_wire_bias b[RS_WIRE_LOGIT_BIAS_MAX];
    uint32_t n = rs_wire_bias_copy(c, b, RS_WIRE_LOGIT_BIAS_MAX);
    wire_wr_map(w, n);
    for (uint32_t i = 0; i < n; i++) {
        wire_wr_u64(w, b[i].token);
        wire_wr_f32(w, b[i].bias);
    }
}

static rs_err refuse(const char *what)
{
    rs_log_error("wire: cannot encode generate: %s", what);
    return RS_EINVAL;
}

rs_err wire_check_constraint(const struct rs_wire_constraint *c, int has_cx, int has_bias,
                             int has_allowed)
{
    rs_err e = RS_OK;
    if (has_cx) {
        if (c->kind <= RS_WIRE_CX_NONE || (unsigned)c->kind >= N_KINDS)
            return refuse("constraint kind unknown");
        if (kind_has_text(c->kind))
            e = wire_check_text("constraint.text", &c->text, RS_WIRE_CX_TEXT_MAX);
        if (c->kind == RS_WIRE_CX_CHOICE && c->n_choices > RS_WIRE_CX_CHOICES_MAX)
            return refuse("too many choices");
        uint64_t total = 0;
        for (uint32_t i = 0; e == RS_OK && c->kind == RS_WIRE_CX_CHOICE && i < c->n_choices; i++) {
            e = wire_check_text("constraint.choices", &c->choices[i], RS_WIRE_CX_CHOICE_LEN_MAX);
            total += c->choices[i].len;
        }
        if (total > RS_WIRE_CX_CHOICE_BYTES_MAX)
            return refuse("choices too long together");
    }
    if (e == RS_OK && has_bias && (c->n_bias > RS_WIRE_LOGIT_BIAS_MAX ||
                                      (c->bias == NULL && c->bias_packed == NULL)))
        return refuse("logit_bias: too many entries or no values");
    if (e == RS_OK && has_allowed)
        e = wire_check_ids("allowed_token_ids", &c->allowed, RS_WIRE_ALLOWED_IDS_MAX);
    return e;
}

#define INVALID(err, ...) (wire_set_error(err, RS_WIRE_INVALID_PARAM, __VA_ARGS__), RS_EINVAL)

static rs_err validate_bias(const struct rs_wire_constraint *c, uint32_t n_vocab,
                            struct rs_wire_error *err)
{
    struct rs_wire_bias b[RS_WIRE_LOGIT_BIAS_MAX];
    uint32_t n = rs_wire_bias_copy(c, b, RS_WIRE_LOGIT_BIAS_MAX);
    for (uint32_t i = 0; i < n; i++) {
        if (n_vocab && b[i].token >= n_vocab)
            return INVALID(err, "field 'logit_bias' entry %u: token %u not below the vocabulary "
                           "size %u", i, b[i].token, n_vocab);
        if (!isfinite(b[i].bias) || fabsf(b[i].bias) > 100.0f)
            return INVALID(err, "field 'logit_bias' entry %u (token %u): bias %g outside "
                           "[-100, 100]", i, b[i].token, (double)b[i].bias);
    }
    return RS_OK;
}

rs_err rs_wire_constraint_validate(const struct rs_wire_constraint *c, uint32_t n_vocab,
                                   struct rs_wire_error *err)
{
    if (kind_has_text(c->kind) && c->text.len == 0)
        return INVALID(err, "field 'constraint.text': empty");
    if (c->kind == RS_WIRE_CX_CHOICE && c->n_choices == 0)
        return INVALID(err, "field 'constraint.choices': needs at least one choice");
    for (uint32_t i = 0; c->kind == RS_WIRE_CX_CHOICE && i < c->n_choices; i++)
        if (c->choices[i].len == 0)
            return INVALID(err, "field 'constraint.choices' item %u: empty", i);
    rs_err e = validate_bias(c, n_vocab, err);
    if (e != RS_OK || c->allowed.n == 0)
        return e;
    uint32_t ids[RS_WIRE_ALLOWED_IDS_MAX];
    uint32_t n = rs_wire_ids_copy(&c->allowed, ids, RS_WIRE_ALLOWED_IDS_MAX);
    for (uint32_t i = 0; n_vocab && i < n; i++)
        if (ids[i] >= n_vocab)
            return INVALID(err, "field 'allowed_token_ids' item %u: token %u not below the "
                           "vocabulary size %u", i, ids[i], n_vocab);
    return RS_OK;
}

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

uint64_t rs_wire_constraint_hash(const struct rs_wire_constraint *c, uint64_t h)
{
    uint32_t head[5] = {(uint32_t)c->kind, c->n_choices, c->n_bias, c->allowed.n, c->min_tokens};
    h = mix(h, head, sizeof(head));
    h = mix(h, c->text.ptr, c->text.ptr ? c->text.len : 0);
    for (uint32_t i = 0; i < c->n_choices; i++) {
        h = mix(h, &c->choices[i].len, sizeof(c->choices[i].len));
        h = mix(h, c->choices[i].ptr, c->choices[i].len);
    }
    struct rs_wire_bias b[RS_WIRE_LOGIT_BIAS_MAX];
    uint32_t n = rs_wire_bias_copy(c, b, RS_WIRE_LOGIT_BIAS_MAX);
    h = mix(h, b, n * sizeof(*b));
    uint32_t ids[RS_WIRE_ALLOWED_IDS_MAX];
    n = rs_wire_ids_copy(&c->allowed, ids, RS_WIRE_ALLOWED_IDS_MAX);
    return mix(h, ids, n * sizeof(*ids));
}

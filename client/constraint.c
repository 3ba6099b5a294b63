/* SPDX-License-Identifier: MIT */
/*
 * The structured-output flags of the client programs (options.h,
 * rs_client_cx_opts): each fills the generate's constraint fields. Files
 * are read whole into memory the program keeps until it exits (the
 * generate borrows them, as it borrows argv for the other strings).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/options.h"

static struct rs_wire_generate *gen_of(void *dst)
{
    return &((struct rs_client_gen_args *)dst)->gen;
}

/* Sets the one constraint kind; a second kind is refused. */
static int set_kind(struct rs_wire_generate *g, enum rs_wire_cx_kind k, const char *opt,
                    char *err, size_t len)
{
    if (g->cx.kind != RS_WIRE_CX_NONE && g->cx.kind != k) {
        snprintf(err, len, "option --%s: the request already has a %s constraint (one kind per "
                 "request)", opt, rs_wire_cx_kind_name(g->cx.kind));
        return -1;
    }
    g->cx.kind = k;
    g->has |= RS_WIRE_GEN_CONSTRAINT;
    return 0;
}

/* Reads path whole (at most the wire's text bound). */
static char *read_file(const char *path, const char *opt, size_t *n, char *err, size_t len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, len, "option --%s: cannot open %s: %s", opt, path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(RS_WIRE_CX_TEXT_MAX + 1);
    size_t got = buf != NULL ? fread(buf, 1, RS_WIRE_CX_TEXT_MAX + 1, f) : 0;
    int bad = buf == NULL || ferror(f) || got > RS_WIRE_CX_TEXT_MAX;
    fclose(f);
    if (bad) {
        snprintf(err, len, "option --%s: %s %s", opt, path,
                 buf == NULL ? "cannot be read: out of memory"
                             : got > RS_WIRE_CX_TEXT_MAX ? "is larger than 64 KiB"
                                                         : "cannot be read");
        free(buf);
        return NULL;
    }
    *n = got;
    return buf;
}

static int parse_text_file(void *dst, const struct rs_opt *o, const char *val, char *err,
                           size_t len)
{
    struct rs_client_gen_args *a = dst;
    enum rs_wire_cx_kind k = (enum rs_wire_cx_kind)o->val;
    size_t n = 0;
    if (set_kind(&a->gen, k, o->name, err, len) != 0)
        return -1;
    char *text = read_file(val, o->name, &n, err, len);
    if (text == NULL)
        return -1;
    free(a->cx_text);
    a->cx_text = text;
    a->gen.cx.text = (struct rs_wire_str){text, (uint32_t)n};
    return 0;
}

static int parse_regex(void *dst, const struct rs_opt *o, const char *val, char *err, size_t len)
{
    struct rs_wire_generate *g = gen_of(dst);
    if (set_kind(g, RS_WIRE_CX_REGEX, o->name, err, len) != 0)
        return -1;
    g->cx.text = (struct rs_wire_str){val, (uint32_t)strlen(val)};
    return 0;
}

static int parse_json_object(void *dst, const struct rs_opt *o, const char *val, char *err,
                             size_t len)
{
    (void)val;
    return set_kind(gen_of(dst), RS_WIRE_CX_JSON_OBJECT, o->name, err, len);
}

static int parse_choice(void *dst, const struct rs_opt *o, const char *val, char *err, size_t len)
{
    struct rs_wire_generate *g = gen_of(dst);
    if (set_kind(g, RS_WIRE_CX_CHOICE, o->name, err, len) != 0)
        return -1;
    if (g->cx.n_choices >= RS_WIRE_CX_CHOICES_MAX) {
        snprintf(err, len, "option --choice: at most %u choices", RS_WIRE_CX_CHOICES_MAX);
        return -1;
    }
    g->cx.choices[g->cx.n_choices++] = (struct rs_wire_str){val, (uint32_t)strlen(val)};
    return 0;
}

/* --logit-bias ID:BIAS, repeatable. */
static int parse_bias(void *dst, const struct rs_opt *o, const char *val, char *err, size_t len)
{
    struct rs_client_gen_args *a = dst;
    char *end;
    (void)o;
    errno = 0;
    unsigned long id = strtoul(val, &end, 10);
    float bias = 0;
    int ok = end != val && *end == ':' && errno == 0 && id <= RS_WIRE_TOKEN_MAX;
    if (ok) {
        const char *b = end + 1;
        bias = strtof(b, &end);
        ok = end != b && *end == '\0';
    }
    if (!ok || a->gen.cx.n_bias >= RS_WIRE_LOGIT_BIAS_MAX) {
        snprintf(err, len, "option --logit-bias: '%s' %s", val,
                 ok ? "is one too many" : "is not ID:BIAS (e.g. 42:-100)");
        return -1;
    }
    a->bias[a->gen.cx.n_bias++] = (struct rs_wire_bias){(uint32_t)id, bias};
    a->gen.cx.bias = a->bias;
    a->gen.has |= RS_WIRE_GEN_LOGIT_BIAS;
    return 0;
}

static int parse_allowed(void *dst, const struct rs_opt *o, const char *val, char *err,
                         size_t len)
{
    struct rs_client_gen_args *a = dst;
    uint32_t *ids, n;
    (void)o;
    if (rs_client_parse_ids(val, &ids, &n, err, len) != 0)
        return -1;
    if (n > RS_WIRE_ALLOWED_IDS_MAX) {
        free(ids);
        snprintf(err, len, "option --allowed-token-ids: at most %u ids", RS_WIRE_ALLOWED_IDS_MAX);
        return -1;
    }
    free(a->allowed);
    a->allowed = ids;
    a->gen.cx.allowed = (struct rs_wire_ids){.n = n, .vals = ids};
    a->gen.has |= RS_WIRE_GEN_ALLOWED_TOKEN_IDS;
    return 0;
}

void rs_client_gen_args_fini(struct rs_client_gen_args *a)
{
    free(a->cx_text);
    free(a->allowed);
    a->cx_text = NULL;
    a->allowed = NULL;
    a->gen.cx.text = (struct rs_wire_str){NULL, 0};
    a->gen.cx.allowed = (struct rs_wire_ids){0};
}

const struct rs_opt rs_client_cx_opts[] = {
    {.name = "grammar", .kind = RS_OPT_CALL, .parse = parse_text_file, .val = RS_WIRE_CX_GBNF,
     .arg = "FILE", .help = "the output follows the GBNF grammar in FILE (start rule root)"},
    {.name = "json-schema", .kind = RS_OPT_CALL, .parse = parse_text_file,
     .val = RS_WIRE_CX_JSON_SCHEMA, .arg = "FILE",
     .help = "the output is JSON valid against the schema in FILE"},
    {.name = "json-object", .kind = RS_OPT_CALL, .parse = parse_json_object,
     .help = "the output is one JSON object"},
    {.name = "regex", .kind = RS_OPT_CALL, .parse = parse_regex, .arg = "RE",
     .help = "the whole output matches RE (common/README.md lists the subset)"},
    {.name = "choice", .kind = RS_OPT_CALL, .parse = parse_choice, .arg = "TEXT",
     .help = "the output is exactly one of the TEXTs (repeatable)"},
    {.name = "logit-bias", .kind = RS_OPT_CALL, .parse = parse_bias, .arg = "ID:BIAS",
     .help = "add BIAS (-100..100; -100 bans) to token ID's logit (repeatable)"},
    {.name = "allowed-token-ids", .kind = RS_OPT_CALL, .parse = parse_allowed, .arg = "ID[,ID...]",
     .help = "sample only among these token ids"},
    {.name = "min-tokens", .kind = RS_OPT_U32, .off = offsetof(struct rs_client_gen_args,
                                                                gen.cx.min_tokens),
     .has_bit = RS_WIRE_GEN_MIN_TOKENS, .has_off = offsetof(struct rs_client_gen_args, gen.has),
     .max = UINT32_MAX, .arg = "N", .help = "no end-of-generation token before N outputs"},
    {.name = NULL},
};

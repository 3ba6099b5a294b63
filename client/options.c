/* SPDX-License-Identifier: MIT */
/*
 * The shared command-line flags of the client programs (options.h): request
 * fields and connection settings, table-driven so a flag, its field and its
 * help line stay together. Values are checked for syntax only; the server's
 * validator owns the ranges and answers with a message naming the field.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/options.h"

enum kind { K_U32, K_I32, K_U64, K_FLOAT, K_FLAG };

/* One request flag: its field in rs_wire_generate and presence bit. */
struct gen_flag {
    const char *name;
    enum kind kind;
    uint32_t bit;
    size_t off;
};

#define GF(n, k, b, f) {n, k, b, offsetof(struct rs_wire_generate, f)}
static const struct gen_flag gen_flags[] = {
    GF("--max-tokens", K_U32, RS_WIRE_GEN_MAX_TOKENS, max_tokens),
    GF("--temperature", K_FLOAT, RS_WIRE_GEN_TEMPERATURE, temperature),
    GF("--top-p", K_FLOAT, RS_WIRE_GEN_TOP_P, top_p),
    GF("--top-k", K_I32, RS_WIRE_GEN_TOP_K, top_k),
    GF("--min-p", K_FLOAT, RS_WIRE_GEN_MIN_P, min_p),
    GF("--repetition-penalty", K_FLOAT, RS_WIRE_GEN_REPETITION_PENALTY, repetition_penalty),
    GF("--presence-penalty", K_FLOAT, RS_WIRE_GEN_PRESENCE_PENALTY, presence_penalty),
    GF("--frequency-penalty", K_FLOAT, RS_WIRE_GEN_FREQUENCY_PENALTY, frequency_penalty),
    GF("--seed", K_U64, RS_WIRE_GEN_SEED, seed),
    GF("--logprobs", K_U32, RS_WIRE_GEN_LOGPROBS, logprobs),
    GF("--priority", K_I32, RS_WIRE_GEN_PRIORITY, priority),
    GF("--ignore-eos", K_FLAG, RS_WIRE_GEN_IGNORE_EOS, ignore_eos),
    GF("--stream", K_FLAG, RS_WIRE_GEN_STREAM, stream),
};

void rs_client_gen_args_init(struct rs_client_gen_args *a)
{
    memset(a, 0, sizeof(*a));
    rs_wire_generate_init(&a->gen);
    a->gen.has = RS_WIRE_GEN_STREAM;
    a->gen.stream = true;
}

/* Parses val as kind into dst; 0 or -1. */
static int parse_value(enum kind kind, const char *val, void *dst)
{
    char *end;
    errno = 0;
    if (kind == K_FLOAT) {
        float f = strtof(val, &end);
        if (errno != 0 || end == val || *end != '\0' || !isfinite(f))
            return -1;
        *(float *)dst = f;
        return 0;
    }
    if (kind == K_I32) {
        long long v = strtoll(val, &end, 10);
        if (errno != 0 || end == val || *end != '\0' || v < INT32_MIN || v > INT32_MAX)
            return -1;
        *(int32_t *)dst = (int32_t)v;
        return 0;
    }
    if (val[0] == '-')
        return -1;
    unsigned long long v = strtoull(val, &end, 10);
    if (errno != 0 || end == val || *end != '\0' || (kind == K_U32 && v > UINT32_MAX))
        return -1;
    if (kind == K_U32)
        *(uint32_t *)dst = (uint32_t)v;
    else
        *(uint64_t *)dst = v;
    return 0;
}

static const char *kind_text(enum kind k)
{
    return k == K_FLOAT ? "a finite number" : k == K_I32 ? "an integer" : "a non-negative integer";
}

/* --stop and --stop-token-ids: repeatable, appended. */
static int parse_stops(struct rs_wire_generate *g, const char *opt, const char *val, char *err,
                       size_t len)
{
    if (strcmp(opt, "--stop") == 0) {
        if (g->n_stop >= RS_WIRE_STOP_MAX || val[0] == '\0') {
            snprintf(err, len, "option --stop: at most %d non-empty strings", RS_WIRE_STOP_MAX);
            return -1;
        }
        g->stop[g->n_stop++] = (struct rs_wire_str){val, (uint32_t)strlen(val)};
        g->has |= RS_WIRE_GEN_STOP;
        return 1;
    }
    uint32_t *ids, n;
    if (rs_client_parse_ids(val, &ids, &n, err, len) != 0)
        return -1;
    if (g->n_stop_ids + n > RS_WIRE_STOP_IDS_MAX) {
        free(ids);
        snprintf(err, len, "option --stop-token-ids: at most %d ids", RS_WIRE_STOP_IDS_MAX);
        return -1;
    }
    memcpy(g->stop_ids + g->n_stop_ids, ids, n * sizeof(uint32_t));
    g->n_stop_ids += n;
    g->has |= RS_WIRE_GEN_STOP_TOKEN_IDS;
    free(ids);
    return 1;
}

int rs_client_gen_parse(struct rs_client_gen_args *a, int argc, char **argv, int *i, char *err,
                        size_t err_len)
{
    const char *opt = argv[*i];
    struct rs_wire_generate *g = &a->gen;
    if (strcmp(opt, "--no-stream") == 0) {
        g->has |= RS_WIRE_GEN_STREAM;
        g->stream = false;
        return 1;
    }
    const struct gen_flag *f = NULL;
    for (size_t k = 0; k < sizeof(gen_flags) / sizeof(gen_flags[0]) && f == NULL; k++)
        if (strcmp(opt, gen_flags[k].name) == 0)
            f = &gen_flags[k];
    bool stops = strcmp(opt, "--stop") == 0 || strcmp(opt, "--stop-token-ids") == 0;
    if (f == NULL && !stops)
        return 0;
    if (f != NULL && f->kind == K_FLAG) {
        *(bool *)((char *)g + f->off) = true;
        g->has |= f->bit;
        return 1;
    }
    if (*i + 1 >= argc) {
        snprintf(err, err_len, "option %s needs a value", opt);
        return -1;
    }
    const char *val = argv[++*i];
    if (stops)
        return parse_stops(g, opt, val, err, err_len);
    if (parse_value(f->kind, val, (char *)g + f->off) != 0) {
        snprintf(err, err_len, "option %s: '%s' is not %s", opt, val, kind_text(f->kind));
        return -1;
    }
    g->has |= f->bit;
    return 1;
}

const char *rs_client_gen_help(void)
{
    return "request fields (ipc/PROTOCOL.md 3.1; absent = the server's default):\n"
           "  --max-tokens N           most tokens to generate (default: until the context is "
           "full)\n"
           "  --temperature F          0 = greedy (default 1.0)\n"
           "  --top-p F                nucleus sampling, (0, 1] (default 1.0 = off)\n"
           "  --top-k N                keep the N most likely tokens (default 0 = off)\n"
           "  --min-p F                drop tokens below F x the best one's p (default 0 = off)\n"
           "  --repetition-penalty F   > 0 (default 1.0 = off)\n"
           "  --presence-penalty F     [-2, 2] (default 0)\n"
           "  --frequency-penalty F    [-2, 2] (default 0)\n"
           "  --seed N                 sampling seed (default: the server picks and reports one)\n"
           "  --stop STR               stop when the output contains STR (repeatable, <= 16)\n"
           "  --stop-token-ids ID,...  stop when one of these ids is sampled (repeatable)\n"
           "  --ignore-eos             keep generating past the model's end-of-text token\n"
           "  --logprobs N             report the N most likely alternatives per token (<= 20)\n"
           "  --stream | --no-stream   a message per token (default) or one at the end\n"
           "  --priority N             lower is scheduled first (default 0)\n";
}

int rs_client_parse_ids(const char *s, uint32_t **out, uint32_t *n, char *err, size_t err_len)
{
    size_t cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    uint32_t *ids = malloc(cap * sizeof(*ids));
    *n = 0;
    if (ids == NULL) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        unsigned long long v = *p >= '0' && *p <= '9' ? strtoull(p, &end, 10) : 0;
        if (*p < '0' || *p > '9' || errno != 0 || v > RS_WIRE_TOKEN_MAX ||
            (*end != ',' && *end != '\0')) {
            snprintf(err, err_len, "token id list '%.40s': item %u is not an id in 0..%u", s,
                     *n + 1, RS_WIRE_TOKEN_MAX);
            free(ids);
            return -1;
        }
        ids[(*n)++] = (uint32_t)v;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    *out = ids;
    return 0;
}

void rs_client_conn_args_init(struct rs_client_conn_args *a)
{
    memset(a, 0, sizeof(*a));
    rs_client_opts_default(&a->opts);
}

/* A z85 key given directly, or the `public = KEY` line of a key file. */
static int load_key(const char *opt, const char *val, char *out, char *err, size_t len)
{
    struct rs_zcert cert;
    if (rs_zcert_key_valid(val, strlen(val))) {
        memcpy(out, val, RS_ZCERT_Z85_LEN + 1);
        return 1;
    }
    if (rs_zcert_load(val, &cert) != RS_OK) {
        snprintf(err, len, "option %s: '%s' is neither a z85 key nor a readable key file", opt,
                 val);
        return -1;
    }
    memcpy(out, cert.public_z85, RS_ZCERT_Z85_LEN + 1);
    memset(&cert, 0, sizeof(cert));
    return 1;
}

static int parse_ms(const char *opt, const char *val, uint32_t *out, char *err, size_t len)
{
    if (parse_value(K_U32, val, out) != 0) {
        snprintf(err, len, "option %s: '%s' is not a number of milliseconds", opt, val);
        return -1;
    }
    return 1;
}

int rs_client_conn_parse(struct rs_client_conn_args *a, int argc, char **argv, int *i,
                         char *err, size_t err_len)
{
    static const char *const names[] = {"--instance", "--rundir", "--tokenizerd", "--postprocd",
                                        "--curve-secret", "--curve-server", "--curve-postprocd",
                                        "--timeout", "--ack-timeout", "--stall"};
    const char *opt = argv[*i];
    size_t k = 0, n = sizeof(names) / sizeof(names[0]);
    while (k < n && strcmp(opt, names[k]) != 0)
        k++;
    if (k == n)
        return 0;
    if (*i + 1 >= argc) {
        snprintf(err, err_len, "option %s needs a value", opt);
        return -1;
    }
    const char *val = argv[++*i];
    struct rs_client_opts *o = &a->opts;
    switch (k) {
    case 0: o->instance = val; return 1;
    case 1: o->rundir = val; return 1;
    case 2: o->tokenizerd_endpoint = val; return 1;
    case 3: o->postprocd_endpoint = val; return 1;
    case 4: o->curve_secret_file = val; return 1;
    case 5:
        o->curve_server_public = a->server_key;
        return load_key(opt, val, a->server_key, err, err_len);
    case 6:
        o->curve_postprocd_public = a->postprocd_key;
        return load_key(opt, val, a->postprocd_key, err, err_len);
    case 7: return parse_ms(opt, val, &o->request_timeout_ms, err, err_len);
    case 8: return parse_ms(opt, val, &o->ack_timeout_ms, err, err_len);
    default: return parse_ms(opt, val, &o->stall_ms, err, err_len);
    }
}

const char *rs_client_conn_help(void)
{
    return "connection:\n"
           "  --instance NAME          instance whose default runtime directory to use\n"
           "                           (default: default)\n"
           "  --rundir DIR             runtime directory holding tokenizerd.sock and "
           "postprocd.sock\n"
           "                           (default: $RINGSERVE_RUNDIR, else "
           "$XDG_RUNTIME_DIR/ringserve-NAME,\n"
           "                           else /tmp/ringserve-UID-NAME, as the daemons)\n"
           "  --tokenizerd ENDPOINT    explicit endpoint, e.g. tcp://host:5555 (needs CURVE)\n"
           "  --postprocd ENDPOINT     explicit endpoint of postprocd\n"
           "  --curve-secret FILE      this client's key pair (ringserve-keygen) for tcp://\n"
           "  --curve-server KEY|FILE  the server's public key (z85, or its .pub file)\n"
           "  --curve-postprocd KEY|FILE  postprocd's key when it differs from tokenizerd's\n"
           "  --timeout MS             per-request time limit (default 600000; 0 = none)\n"
           "  --ack-timeout MS         resend an unacknowledged request after MS (default 1000)\n"
           "  --stall MS               ask postprocd to resume a request silent for MS "
           "(default 1000)\n";
}

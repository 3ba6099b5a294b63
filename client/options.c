/* SPDX-License-Identifier: MIT */
/*
 * The shared command-line flags of the client programs (options.h): request
 * fields and connection settings as option tables, so a flag, its field,
 * its presence bit and its help line stay together. Values are checked for
 * syntax only; the server's validator owns the ranges and answers with a
 * message naming the field.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/options.h"

void rs_client_gen_args_init(struct rs_client_gen_args *a)
{
    memset(a, 0, sizeof(*a));
    rs_wire_generate_init(&a->gen);
    a->gen.has = RS_WIRE_GEN_STREAM;
    a->gen.stream = true;
}

/* --stop: repeatable, appended. */
static int parse_stop(void *dst, const struct rs_opt *o, const char *val, char *err, size_t len)
{
    struct rs_wire_generate *g = &((struct rs_client_gen_args *)dst)->gen;
    (void)o;
    if (g->n_stop >= RS_WIRE_STOP_MAX || val[0] == '\0') {
        snprintf(err, len, "option --stop: at most %d non-empty strings", RS_WIRE_STOP_MAX);
        return -1;
    }
    g->stop[g->n_stop++] = (struct rs_wire_str){val, (uint32_t)strlen(val)};
    return 0;
}

/* --stop-token-ids: repeatable, appended. */
static int parse_stop_ids(void *dst, const struct rs_opt *o, const char *val, char *err,
                          size_t len)
{
    struct rs_wire_generate *g = &((struct rs_client_gen_args *)dst)->gen;
    uint32_t *ids, n;
    (void)o;
    if (rs_client_parse_ids(val, &ids, &n, err, len) != 0)
        return -1;
    if (g->n_stop_ids + n > RS_WIRE_STOP_IDS_MAX) {
        free(ids);
        snprintf(err, len, "option --stop-token-ids: at most %d ids", RS_WIRE_STOP_IDS_MAX);
        return -1;
    }
    memcpy(g->stop_ids + g->n_stop_ids, ids, n * sizeof(uint32_t));
    g->n_stop_ids += n;
    free(ids);
    return 0;
}

#define GEN(f) offsetof(struct rs_client_gen_args, gen.f)
#define GEN_HAS(b) .has_bit = RS_WIRE_GEN_##b, .has_off = GEN(has)
#define GEN_NUM(nm, k, f, b, a, h)                                                               \
    {.name = nm, .kind = k, .off = GEN(f), GEN_HAS(b), .arg = a, .help = h}

const struct rs_opt rs_client_gen_opts[] = {
    GEN_NUM("max-tokens", RS_OPT_U32, max_tokens, MAX_TOKENS, "N",
            "most tokens to generate (default: until the context is full)"),
    GEN_NUM("temperature", RS_OPT_FLOAT, temperature, TEMPERATURE, "F",
            "0 = greedy (default 1.0)"),
    GEN_NUM("top-p", RS_OPT_FLOAT, top_p, TOP_P, "F",
            "nucleus sampling, (0, 1] (default 1.0 = off)"),
    GEN_NUM("top-k", RS_OPT_INT, top_k, TOP_K, "N",
            "keep the N most likely tokens (default 0 = off)"),
    GEN_NUM("min-p", RS_OPT_FLOAT, min_p, MIN_P, "F",
            "drop tokens below F x the best one's p (default 0 = off)"),
    GEN_NUM("repetition-penalty", RS_OPT_FLOAT, repetition_penalty, REPETITION_PENALTY, "F",
            "> 0 (default 1.0 = off)"),
    GEN_NUM("presence-penalty", RS_OPT_FLOAT, presence_penalty, PRESENCE_PENALTY, "F",
            "[-2, 2] (default 0)"),
    GEN_NUM("frequency-penalty", RS_OPT_FLOAT, frequency_penalty, FREQUENCY_PENALTY, "F",
            "[-2, 2] (default 0)"),
    GEN_NUM("seed", RS_OPT_U64, seed, SEED, "N",
            "sampling seed (default: the server picks and reports one)"),
    {.name = "stop", .kind = RS_OPT_CALL, .parse = parse_stop, GEN_HAS(STOP), .arg = "STR",
     .help = "stop when the output contains STR (repeatable, <= 16)"},
    {.name = "stop-token-ids", .kind = RS_OPT_CALL, .parse = parse_stop_ids,
     GEN_HAS(STOP_TOKEN_IDS), .arg = "ID,...",
     .help = "stop when one of these ids is sampled (repeatable)"},
    {.name = "ignore-eos", .kind = RS_OPT_BOOL, .off = GEN(ignore_eos), .val = 1,
     GEN_HAS(IGNORE_EOS), .help = "keep generating past the model's end-of-text token"},
    GEN_NUM("logprobs", RS_OPT_U32, logprobs, LOGPROBS, "N",
            "report the N most likely alternatives per token (<= 20)"),
    {.name = "stream", .kind = RS_OPT_BOOL, .off = GEN(stream), .val = 1, GEN_HAS(STREAM),
     .help = "a message per token (the default)"},
    {.name = "no-stream", .kind = RS_OPT_BOOL, .off = GEN(stream), .val = 0, GEN_HAS(STREAM),
     .help = "one message at the end"},
    GEN_NUM("priority", RS_OPT_INT, priority, PRIORITY, "N",
            "lower is scheduled first (default 0)"),
    {0},
};

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
        return 0;
    }
    if (rs_zcert_load(val, &cert) != RS_OK) {
        snprintf(err, len, "option --%s: '%.80s' is neither a z85 key nor a readable key file",
                 opt, val);
        return -1;
    }
    memcpy(out, cert.public_z85, RS_ZCERT_Z85_LEN + 1);
    memset(&cert, 0, sizeof(cert));
    return 0;
}

static int parse_server_key(void *dst, const struct rs_opt *o, const char *val, char *err,
                            size_t len)
{
    struct rs_client_conn_args *a = dst;
    a->opts.curve_server_public = a->server_key;
    return load_key(o->name, val, a->server_key, err, len);
}

static int parse_postprocd_key(void *dst, const struct rs_opt *o, const char *val, char *err,
                               size_t len)
{
    struct rs_client_conn_args *a = dst;
    a->opts.curve_postprocd_public = a->postprocd_key;
    return load_key(o->name, val, a->postprocd_key, err, len);
}

#define CONN(f) offsetof(struct rs_client_conn_args, opts.f)
#define CONN_ARG(nm, f, a, h) {.name = nm, .kind = RS_OPT_ARG, .off = CONN(f), .arg = a, .help = h}
#define CONN_MS(nm, f, h) {.name = nm, .kind = RS_OPT_U32, .off = CONN(f), .arg = "MS", .help = h}

const struct rs_opt rs_client_conn_opts[] = {
    CONN_ARG("instance", instance, "NAME",
             "instance whose default runtime directory to use\n(default: default)"),
    CONN_ARG("rundir", rundir, "DIR",
             "runtime directory holding tokenizerd.sock and postprocd.sock\n"
             "(default: $RINGSERVE_RUNDIR, else $XDG_RUNTIME_DIR/ringserve-NAME,\n"
             "else /tmp/ringserve-UID-NAME, as the daemons)"),
    CONN_ARG("tokenizerd", tokenizerd_endpoint, "ENDPOINT",
             "explicit endpoint, e.g. tcp://host:5555 (needs CURVE)"),
    CONN_ARG("postprocd", postprocd_endpoint, "ENDPOINT", "explicit endpoint of postprocd"),
    CONN_ARG("curve-secret", curve_secret_file, "FILE",
             "this client's key pair (ringserve-keygen) for tcp://"),
    {.name = "curve-server", .kind = RS_OPT_CALL, .parse = parse_server_key, .arg = "KEY|FILE",
     .help = "the server's public key (z85, or its .pub file)"},
    {.name = "curve-postprocd", .kind = RS_OPT_CALL, .parse = parse_postprocd_key,
     .arg = "KEY|FILE", .help = "postprocd's key when it differs from tokenizerd's"},
    CONN_MS("timeout", request_timeout_ms, "per-request time limit (default 600000; 0 = none)"),
    CONN_MS("ack-timeout", ack_timeout_ms,
            "resend an unacknowledged request after MS (default 1000)"),
    CONN_MS("stall", stall_ms, "ask postprocd to resume a request silent for MS (default 1000)"),
    {0},
};

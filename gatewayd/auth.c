/* SPDX-License-Identifier: MIT */
/*
 * Who may call, and who a caller is. With --api-key FILE (one key a line,
 * `#` comments) every /v1 and tokenizer route needs `Authorization: Bearer
 * KEY`; the presented key is hashed (BLAKE2b-256) and compared with every
 * accepted key's hash in constant time (sodium_memcmp, all keys each time),
 * so neither the key nor which key matched leaks through timing. Listening
 * beyond loopback without keys is refused at start. The caller identity
 * (the matched key's hash, else the peer address) namespaces idempotency
 * keys: this is the one place that decides it, where a per-client secret
 * bound to its requests would also go. Leaves out TLS (put a proxy in front).
 */
#include <ctype.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "gatewayd/gw.h"

#define KEY_LINE_MAX 1024

static rs_err add_key(struct gw *g, const char *k, size_t n)
{
    uint8_t(*keys)[32] = realloc(g->api_keys, (g->n_api_keys + 1) * sizeof(*keys));
    if (keys == NULL)
        return RS_ENOMEM;
    g->api_keys = keys;
    crypto_generichash(keys[g->n_api_keys++], 32, (const uint8_t *)k, n, NULL, 0);
    return RS_OK;
}

static rs_err load_keys(struct gw *g, const char *path)
{
    FILE *f = fopen(path, "r");
    char line[KEY_LINE_MAX];
    if (f == NULL) {
        rs_log_error("--api-key %s: %s", path, strerror(errno));
        return RS_EIO;
    }
    rs_err rc = RS_OK;
    while (rc == RS_OK && fgets(line, sizeof(line), f) != NULL) {
        char *s = line, *e = line + strlen(line);
        while (*s != '\0' && isspace((unsigned char)*s))
            s++;
        while (e > s && isspace((unsigned char)e[-1]))
            e--;
        if (e > s && *s != '#')
            rc = add_key(g, s, (size_t)(e - s));
    }
    fclose(f);
    if (rc == RS_OK && g->n_api_keys == 0) {
        rs_log_error("--api-key %s holds no key (one a line)", path);
        rc = RS_EINVAL;
    }
    return rc;
}

rs_err gw_auth_init(struct gw *g, bool loopback)
{
    if (sodium_init() < 0)
        return RS_EIO;
    if (g->o.api_key_file != NULL)
        return load_keys(g, g->o.api_key_file);
    if (!loopback) {
        rs_log_error("listening on %s (not loopback) needs --api-key FILE: anyone who can reach "
                     "the port could use the model",
                     g->o.host);
        return RS_EINVAL;
    }
    return RS_OK;
}

/* Index of the key whose hash matches token's, or -1; constant time over all keys. */
static int match_key(const struct gw *g, const char *token, size_t n)
{
    uint8_t h[32];
    int found = -1;
    crypto_generichash(h, sizeof(h), (const uint8_t *)token, n, NULL, 0);
    for (uint32_t i = 0; i < g->n_api_keys; i++) {
        int eq = sodium_memcmp(h, g->api_keys[i], sizeof(h)) == 0;
        found = eq ? (int)i : found; /* no early exit */
    }
    return found;
}

/* The Bearer token of r, or NULL. */
static const char *bearer(struct gw_req *r, size_t *n)
{
    const char *a = gw_req_header(r, MHD_HTTP_HEADER_AUTHORIZATION);
    if (a == NULL || strncasecmp(a, "Bearer ", 7) != 0)
        return NULL;
    a += 7;
    while (*a == ' ')
        a++;
    *n = strlen(a);
    while (*n > 0 && a[*n - 1] == ' ')
        (*n)--;
    return a;
}

int gw_auth_check(struct gw *g, struct gw_req *r, struct gw_err *e)
{
    size_t n = 0;
    if (g->n_api_keys == 0)
        return 0;
    const char *t = bearer(r, &n);
    if (t != NULL && match_key(g, t, n) >= 0)
        return 0;
    gw_err_set(e, 401, "",
               t == NULL ? "missing API key: send 'Authorization: Bearer KEY'"
                         : "incorrect API key");
    e->code = "invalid_api_key";
    return -1;
}

void gw_auth_identity(struct gw *g, struct gw_req *r, char *out, size_t cap)
{
    size_t n = 0;
    const char *t = g->n_api_keys > 0 ? bearer(r, &n) : NULL;
    int k = t != NULL ? match_key(g, t, n) : -1;
    if (k >= 0) {
        char x[33];
        for (int i = 0; i < 16; i++)
            snprintf(x + 2 * i, 3, "%02x", g->api_keys[k][i]);
        snprintf(out, cap, "key:%s", x);
        return;
    }
    snprintf(out, cap, "peer:%s", r->conn != NULL ? r->conn->peer : "?");
}

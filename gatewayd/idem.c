/* SPDX-License-Identifier: MIT */
/*
 * What makes a retried HTTP request land on the generation already running:
 *  - the routing id is derived from the listening address
 *    ("gatewayd@HOST:PORT"), so a restarted gatewayd talks to tokenizerd and
 *    postprocd under the same name and the pipeline's records still name it;
 *  - a request with an Idempotency-Key (or X-Request-Id) gets the pipeline id
 *    "k" + 32 hex digits of BLAKE2b-128(secret; identity, key): the same
 *    caller retrying with the same key names the same pipeline request, a
 *    different caller (identity from auth.c) cannot name it, and without the
 *    secret nobody can aim at another caller's ids. The secret is 32 random
 *    bytes persisted (0600) in the runtime directory, so it survives gatewayd
 *    restarts (and goes with the instance);
 *  - keyed calls in flight in this process, by stem, for a retry that
 *    arrives while the first connection is still open or within the grace.
 * Requests without a key get "g" + this start's random hex + a counter.
 */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "gatewayd/call_impl.h"

#define MAP_BUCKETS 1024u

static void hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* Reads the secret, or creates it (O_EXCL: two starts cannot write different ones). */
static rs_err load_secret(struct gw *g, const char *path)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t n = read(fd, g->secret, sizeof(g->secret));
            close(fd);
            if (n == (ssize_t)sizeof(g->secret))
                return RS_OK;
            rs_log_warn("%s is %zd bytes, not %zu: making a new one (earlier idempotency keys "
                        "no longer match)",
                        path, n, sizeof(g->secret));
            unlink(path);
        }
        randombytes_buf(g->secret, sizeof(g->secret));
        char tmp[640];
        snprintf(tmp, sizeof(tmp), "%.600s.%d", path, (int)getpid());
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 || write(fd, g->secret, sizeof(g->secret)) != (ssize_t)sizeof(g->secret)) {
            rs_log_error("cannot write %s: %s", tmp, strerror(errno));
            if (fd >= 0)
                close(fd);
            unlink(tmp);
            return RS_EIO;
        }
        close(fd);
        if (link(tmp, path) == 0) { /* publish only if nobody did meanwhile */
            unlink(tmp);
            return RS_OK;
        }
        unlink(tmp); /* lost the race: read theirs */
    }
    return RS_EIO;
}

rs_err gw_idem_init(struct gw *g, const char *rundir)
{
    char path[600], name[128];
    if (sodium_init() < 0) {
        rs_log_error("libsodium failed to initialise");
        return RS_EIO;
    }
    snprintf(g->routing_id, sizeof(g->routing_id), "gatewayd@%.40s:%u", g->o.host, g->o.port);
    uint8_t b[8];
    randombytes_buf(b, sizeof(b));
    hex(b, sizeof(b), g->boot);
    /* One secret per listening address, like the routing id it goes with. */
    snprintf(name, sizeof(name), "gatewayd-%u.secret", g->o.port);
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", rundir, name) >= sizeof(path))
        return RS_ERANGE;
    g->map = calloc(MAP_BUCKETS, sizeof(*g->map));
    g->map_cap = MAP_BUCKETS;
    if (g->map == NULL)
        return RS_ENOMEM;
    return load_secret(g, path);
}

void gw_idem_stem(struct gw *g, const char *identity, const char *key, char *out, size_t cap)
{
    if (key == NULL) {
        snprintf(out, cap, "g%s-%llu", g->boot, (unsigned long long)++g->next_seq);
        return;
    }
    uint8_t h[16];
    crypto_generichash_state st;
    uint32_t n = (uint32_t)strlen(identity);
    crypto_generichash_init(&st, g->secret, sizeof(g->secret), sizeof(h));
    crypto_generichash_update(&st, (const uint8_t *)&n, sizeof(n)); /* length-prefixed */
    crypto_generichash_update(&st, (const uint8_t *)identity, n);
    crypto_generichash_update(&st, (const uint8_t *)key, strlen(key));
    crypto_generichash_final(&st, h, sizeof(h));
    char x[33];
    hex(h, sizeof(h), x);
    snprintf(out, cap, "k%s", x);
}

static uint32_t bucket(const struct gw *g, const char *stem)
{
    uint32_t h = 2166136261u;
    for (const char *p = stem; *p != '\0'; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    return h & (g->map_cap - 1);
}

struct gw_call *gw_idem_find(struct gw *g, const char *stem)
{
    for (struct gw_call *c = g->map[bucket(g, stem)]; c != NULL; c = c->map_next)
        if (strcmp(c->stem, stem) == 0)
            return c;
    return NULL;
}

void gw_idem_remove(struct gw *g, struct gw_call *c)
{
    if (!c->in_map)
        return;
    for (struct gw_call **pp = &g->map[bucket(g, c->stem)]; *pp != NULL; pp = &(*pp)->map_next)
        if (*pp == c) {
            *pp = c->map_next;
            break;
        }
    c->in_map = false;
}

void gw_idem_insert(struct gw *g, struct gw_call *c)
{
    struct gw_call *old = gw_idem_find(g, c->stem);
    if (old != NULL)
        gw_idem_remove(g, old); /* the newest call with a key is the one a retry takes over */
    uint32_t b = bucket(g, c->stem);
    c->map_next = g->map[b];
    g->map[b] = c;
    c->in_map = true;
}

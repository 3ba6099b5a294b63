/* SPDX-License-Identifier: MIT */
/*
 * ZAP handler thread (zauth.h). libzmq asks inproc://zeromq.zap.01 about
 * every CURVE handshake; this thread answers from an allowlist of client
 * public keys it reloads when the file changes (stat per handshake:
 * handshakes are rare, revocation should be immediate). Anything unexpected
 * (file gone, bad line, other mechanism, malformed request) refuses.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/failpoint_sys.h"
#include "ipc/zauth.h"
#include "ipc/zcert.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define LIST_FILE_MAX (1u << 20)
#define ZAP_FRAMES 7 /* version, request id, domain, address, routing id, mechanism, key */

struct rs_zauth {
    void *sock; /* REP; the thread's after start */
    pthread_t thread;
    atomic_bool stop;
    atomic_bool died; /* the thread ended on an error (the process was sent SIGTERM) */
    char path[4096];
    uint8_t (*keys)[32]; /* sorted, n_keys of them; the thread's after start */
    size_t n_keys;
    bool list_ok;        /* false: refuse everyone */
    struct stat seen;    /* identity of the file last loaded (or found missing) */
    bool seen_valid;
    uint64_t last_log_ns, suppressed;
    atomic_uint_least64_t allowed, refused, reloads;
};

static int key_cmp(const void *a, const void *b)
{
    return memcmp(a, b, 32);
}

/* Parses one allowlist line; adds its key to keys[*n]. false (logged) for a bad line. */
static bool parse_line(const char *path, int lineno, char *line, uint8_t (*keys)[32], size_t *n)
{
    line += strspn(line, " \t\r");
    if (line[0] == '\0' || line[0] == '#')
        return true;
    if (strncmp(line, "public", 6) == 0) { /* "public = KEY", as in a .pub file */
        char *eq = line + 6 + strspn(line + 6, " \t");
        char *key = *eq == '=' ? eq + 1 + strspn(eq + 1, " \t") : NULL;
        if (key != NULL && strcspn(key, " \t\r") == RS_ZCERT_Z85_LEN)
            line = key;
    }
    size_t len = strcspn(line, " \t\r");
    char *rest = line + len + strspn(line + len, " \t\r");
    if (!rs_zcert_key_valid(line, len) || (rest[0] != '\0' && rest[0] != '#')) {
        rs_log_error("zauth: %s line %d: expected one 40-character z85 public key", path, lineno);
        return false;
    }
    if (*n == RS_ZAUTH_KEYS_MAX) {
        rs_log_error("zauth: %s: more than %d keys", path, RS_ZAUTH_KEYS_MAX);
        return false;
    }
    line[len] = '\0';
    zmq_z85_decode(keys[(*n)++], line);
    return true;
}

static char *read_file(const char *path, struct stat *st)
{
    FILE *f = fopen(path, "rb");
    char *text = f != NULL ? rs_sys.malloc(LIST_FILE_MAX + 1) : NULL;
    size_t len = text != NULL ? fread(text, 1, LIST_FILE_MAX + 1, f) : 0;
    bool ok = text != NULL && !ferror(f) && fstat(fileno(f), st) == 0 && len <= LIST_FILE_MAX;
    if (!ok)
        rs_log_error("zauth: cannot read allowlist %s: %s", path,
                     len > LIST_FILE_MAX ? "over 1 MiB" : strerror(errno));
    if (f != NULL)
        fclose(f);
    if (!ok) {
        free(text);
        return NULL;
    }
    text[len] = '\0';
    return text;
}

/* (Re)reads the allowlist; on any failure the handler refuses everyone. */
static rs_err load_list(struct rs_zauth *z)
{
    struct stat st;
    char *text = read_file(z->path, &st);
    bool read_ok = text != NULL;
    uint8_t (*keys)[32] = text ? rs_sys.malloc(sizeof(*keys) * RS_ZAUTH_KEYS_MAX) : NULL;
    size_t n = 0;
    bool ok = keys != NULL;
    int lineno = 0;
    for (char *line = text; ok && line != NULL;) {
        char *nl = strchr(line, '\n');
        if (nl != NULL)
            *nl = '\0';
        ok = parse_line(z->path, ++lineno, line, keys, &n);
        line = nl != NULL ? nl + 1 : NULL;
    }
    free(text);
    free(z->keys);
    z->keys = ok ? keys : NULL;
    z->n_keys = ok ? n : 0;
    z->list_ok = ok;
    if (!ok)
        free(keys);
    else
        qsort(z->keys, z->n_keys, 32, key_cmp);
    if (read_ok)
        z->seen = st;
    z->seen_valid = read_ok;
    atomic_fetch_add(&z->reloads, 1);
    if (ok)
        rs_log_info("zauth: %zu client keys allowed by %s", n, z->path);
    else
        rs_log_error("zauth: refusing every CURVE client until %s is fixed", z->path);
    return ok ? RS_OK : !read_ok ? RS_ENOENT : RS_EINVAL;
}

static void maybe_reload(struct rs_zauth *z)
{
    struct stat st;
    if (stat(z->path, &st) != 0) {
        if (z->list_ok || z->seen_valid)
            rs_log_error("zauth: allowlist %s: %s; refusing every CURVE client", z->path,
                         strerror(errno));
        z->list_ok = false;
        z->seen_valid = false;
        return;
    }
    const struct stat *o = &z->seen;
    if (!z->seen_valid || st.st_ino != o->st_ino || st.st_dev != o->st_dev ||
        st.st_size != o->st_size || st.st_mtim.tv_sec != o->st_mtim.tv_sec ||
        st.st_mtim.tv_nsec != o->st_mtim.tv_nsec || st.st_ctim.tv_sec != o->st_ctim.tv_sec ||
        st.st_ctim.tv_nsec != o->st_ctim.tv_nsec)
        load_list(z);
}

static void log_refusal(struct rs_zauth *z, const char *why, const char *key, const char *addr)
{
    uint64_t now = rs_clock_ns();
    if (z->last_log_ns != 0 && now - z->last_log_ns < 1000000000ull) {
        z->suppressed++;
        return;
    }
    rs_log_warn("zauth: refused client %s from %s: %s (%llu refusals not logged since the "
                "last line)", key, addr, why, (unsigned long long)z->suppressed);
    z->last_log_ns = now;
    z->suppressed = 0;
}

static bool frame_is(zmq_msg_t *m, const char *s)
{
    return zmq_msg_size(m) == strlen(s) && memcmp(zmq_msg_data(m), s, strlen(s)) == 0;
}

/* Copies a frame as printable text for the log. */
static void frame_text(zmq_msg_t *m, char *buf, size_t cap)
{
    size_t n = zmq_msg_size(m) < cap - 1 ? zmq_msg_size(m) : cap - 1;
    const char *p = zmq_msg_data(m);
    for (size_t i = 0; i < n; i++)
        buf[i] = p[i] >= 0x20 && p[i] < 0x7f ? p[i] : '?';
    buf[n] = '\0';
}

/* Decides one request: status "200" (user id = z85 key) or "400"/"500" with a reason. */
static const char *decide(struct rs_zauth *z, zmq_msg_t *f, int n, char *user_id)
{
    char addr[64], key_text[RS_ZCERT_Z85_LEN + 1] = "(none)";
    user_id[0] = '\0';
    if (n != ZAP_FRAMES || !frame_is(&f[0], "1.0"))
        return "500";
    frame_text(&f[3], addr, sizeof(addr));
    if (!frame_is(&f[5], "CURVE") || zmq_msg_size(&f[6]) != 32) {
        log_refusal(z, "not a CURVE handshake", key_text, addr);
        return "400";
    }
    zmq_z85_encode(key_text, zmq_msg_data(&f[6]), 32);
    maybe_reload(z);
    if (!z->list_ok) {
        log_refusal(z, "allowlist unusable", key_text, addr);
        return "400";
    }
    if (bsearch(zmq_msg_data(&f[6]), z->keys, z->n_keys, 32, key_cmp) == NULL) {
        log_refusal(z, "key not in the allowlist", key_text, addr);
        return "400";
    }
    memcpy(user_id, key_text, sizeof(key_text));
    return "200";
}

/* Answers one ZAP request (the REP socket must reply to every request it receives). */
static void handle(struct rs_zauth *z)
{
    zmq_msg_t f[ZAP_FRAMES + 1];
    int n = 0, more = 1;
    char user_id[RS_ZCERT_Z85_LEN + 1];
    while (more) {
        zmq_msg_t *m = &f[n < ZAP_FRAMES ? n : ZAP_FRAMES];
        zmq_msg_init(m);
        if (zmq_msg_recv(m, z->sock, 0) < 0) {
            zmq_msg_close(m);
            break;
        }
        more = zmq_msg_more(m);
        if (n < ZAP_FRAMES) {
            n++;
        } else { /* too many frames: drop the extra ones and answer 500 */
            zmq_msg_close(m);
            n = ZAP_FRAMES + 1;
        }
    }
    int used = n < ZAP_FRAMES ? n : ZAP_FRAMES;
    const char *status = decide(z, f, n, user_id);
    atomic_fetch_add(status[0] == '2' ? &z->allowed : &z->refused, 1);
    zmq_send(z->sock, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(z->sock, used > 1 ? zmq_msg_data(&f[1]) : "", used > 1 ? zmq_msg_size(&f[1]) : 0,
             ZMQ_SNDMORE);
    zmq_send(z->sock, status, 3, ZMQ_SNDMORE);
    zmq_send(z->sock, status[0] == '2' ? "OK" : "refused", status[0] == '2' ? 2 : 7, ZMQ_SNDMORE);
    zmq_send(z->sock, user_id, strlen(user_id), ZMQ_SNDMORE);
    zmq_send(z->sock, "", 0, 0);
    for (int i = 0; i < used; i++)
        zmq_msg_close(&f[i]);
}

static void *zap_main(void *arg)
{
    struct rs_zauth *z = arg;
    while (!atomic_load(&z->stop)) {
        zmq_pollitem_t it = {.socket = z->sock, .events = ZMQ_POLLIN};
        int rc = rs_sys.zmq_poll(&it, 1, 100);
        if (rc < 0 && errno != EINTR) {
            /* With no handler every CURVE handshake is refused (ZAP_ENFORCE_DOMAIN), so
             * the front would sit deaf: stop the daemon, whose supervisor restarts it. */
            rs_log_error("zauth: zmq_poll: %s; the ZAP handler stops, so the daemon stops "
                         "(SIGTERM) rather than serve without authentication",
                         zmq_strerror(errno));
            atomic_store(&z->died, true);
            kill(getpid(), SIGTERM);
            break;
        }
        if (rc > 0)
            handle(z);
    }
    zmq_close(z->sock);
    return NULL;
}

rs_err rs_zauth_create(void *zctx, const char *allowlist_path, rs_zauth **out)
{
    struct rs_zauth *z = rs_sys.calloc(1, sizeof(*z));
    *out = NULL;
    if (z == NULL || strlen(allowlist_path) >= sizeof(z->path)) {
        free(z);
        return z == NULL ? RS_ENOMEM : RS_EINVAL;
    }
    strcpy(z->path, allowlist_path);
    rs_err e = load_list(z);
    z->sock = e == RS_OK ? rs_sys.zmq_socket(zctx, ZMQ_REP) : NULL;
    int linger = 0;
    if (e == RS_OK && (z->sock == NULL ||
                       rs_sys.zmq_setsockopt(z->sock, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
                       rs_sys.zmq_bind(z->sock, ZAP_ENDPOINT) != 0)) {
        e = errno == EADDRINUSE ? RS_EEXIST : RS_EIO;
        rs_log_error("zauth: cannot bind %s: %s", ZAP_ENDPOINT, zmq_strerror(errno));
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread takes no process signals */
    if (e == RS_OK && pthread_create(&z->thread, NULL, zap_main, z) != 0) {
        rs_log_error("zauth: cannot start the handler thread");
        e = RS_EIO;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != RS_OK) {
        if (z->sock != NULL)
            zmq_close(z->sock);
        free(z->keys);
        free(z);
        return e;
    }
    *out = z;
    return RS_OK;
}

void rs_zauth_destroy(rs_zauth **zp)
{
    struct rs_zauth *z = zp != NULL ? *zp : NULL;
    if (z == NULL)
        return;
    atomic_store(&z->stop, true);
    pthread_join(z->thread, NULL);
    free(z->keys);
    free(z);
    *zp = NULL;
}

bool rs_zauth_alive(const rs_zauth *z)
{
    return !atomic_load(&z->died);
}

void rs_zauth_stats(const rs_zauth *z, struct rs_zauth_stats *out)
{
    out->allowed = atomic_load(&((struct rs_zauth *)z)->allowed);
    out->refused = atomic_load(&((struct rs_zauth *)z)->refused);
    out->reloads = atomic_load(&((struct rs_zauth *)z)->reloads);
}

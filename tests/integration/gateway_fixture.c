/* SPDX-License-Identifier: MIT */
/*
 * The gatewayd test fixture (gateway_fixture.h): the gatewayd process the
 * tests start, SIGKILL and restart, and the small blocking HTTP/1.1 client.
 * Part of rs_testlib.
 */
#include "tests/integration/gateway_fixture.h"

/* A TCP port nothing listens on now (the kernel's pick). */
static uint16_t gwt_free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &n) != 0) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    close(fd);
    return ntohs(a.sin_port);
}

int gwt_connect(uint16_t port)
{
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0)
        return -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int gwt_send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int gwt_send(int fd, const char *method, const char *path, const char *headers, const char *body,
             int keep_alive)
{
    char head[4096];
    size_t blen = body != NULL ? strlen(body) : 0;
    int n = snprintf(head, sizeof(head),
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: %s\r\n%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     method, path, keep_alive ? "keep-alive" : "close",
                     headers != NULL ? headers : "", blen);
    return n < 0 || (size_t)n >= sizeof(head) || gwt_send_all(fd, head, (size_t)n) != 0 ||
                   (blen > 0 && gwt_send_all(fd, body, blen) != 0)
               ? -1
               : 0;
}

ssize_t gwt_recv(int fd, char *buf, size_t cap, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) <= 0)
        return -1;
    return recv(fd, buf, cap, 0);
}

const char *gwt_header(const struct gwt_resp *r, const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);
    for (const char *l = strstr(r->head, "\r\n"); l != NULL; l = strstr(l + 2, "\r\n")) {
        if (strncasecmp(l + 2, name, n) == 0 && l[2 + n] == ':') {
            const char *v = l + 3 + n, *e = strstr(v, "\r\n");
            while (*v == ' ')
                v++;
            snprintf(out, cap, "%.*s", (int)(e != NULL ? e - v : (long)strlen(v)), v);
            return out;
        }
    }
    return NULL;
}

/* Decodes a chunked body in place; the decoded length, or -1 if malformed. */
static ssize_t gwt_dechunk(char *b, size_t n)
{
    size_t in = 0, out = 0;
    for (;;) {
        char *end;
        unsigned long sz = strtoul(b + in, &end, 16);
        char *crlf = strstr(b + in, "\r\n");
        if (end == b + in || crlf == NULL || (size_t)(crlf - b) >= n)
            return -1;
        in = (size_t)(crlf - b) + 2;
        if (sz == 0)
            return (ssize_t)out;
        if (in + sz + 2 > n)
            return -1;
        memmove(b + out, b + in, sz);
        out += sz;
        in += sz + 2;
    }
}

int gwt_read(int fd, struct gwt_resp *r, int timeout_ms)
{
    size_t cap = 1 << 16, n = 0, hl = 0; /* hl: header bytes, 0 until they are in */
    char *b = malloc(cap + 1), cl[32], te[32];
    memset(r, 0, sizeof(*r));
    while (b != NULL) {
        if (n == cap) {
            char *nb = realloc(b, (cap *= 2) + 1);
            if (nb == NULL)
                break;
            b = nb;
        }
        ssize_t k = gwt_recv(fd, b + n, cap - n, timeout_ms);
        if (k > 0)
            n += (size_t)k;
        b[n] = '\0';
        char *eoh = hl == 0 ? strstr(b, "\r\n\r\n") : NULL;
        if (eoh != NULL) {
            hl = (size_t)(eoh - b) + 4;
            snprintf(r->head, sizeof(r->head), "%.*s", (int)hl, b);
            r->status = atoi(b + 9);
        }
        if (hl > 0) {
            int chunked = gwt_header(r, "Transfer-Encoding", te, sizeof(te)) != NULL &&
                          strcasecmp(te, "chunked") == 0;
            const char *len = gwt_header(r, "Content-Length", cl, sizeof(cl));
            size_t body = n - hl;
            int whole = len != NULL ? body >= strtoull(len, NULL, 10)
                        : chunked   ? (body >= 5 && memcmp(b + n - 5, "0\r\n\r\n", 5) == 0 &&
                                     (body == 5 || b[n - 6] == '\n'))
                                    : k == 0;
            if (whole) {
                memmove(b, b + hl, body);
                ssize_t bl = len != NULL ? (ssize_t)strtoull(len, NULL, 10)
                             : chunked   ? gwt_dechunk(b, body)
                                         : (ssize_t)body;
                b[bl >= 0 ? bl : 0] = '\0';
                r->body = b;
                r->len = bl >= 0 ? (size_t)bl : 0;
                return bl >= 0 ? 0 : -1;
            }
        }
        if (k <= 0)
            break;
    }
    free(b);
    return -1;
}

void gwt_resp_free(struct gwt_resp *r)
{
    free(r->body);
    r->body = NULL;
}

int gwt_http(uint16_t port, const char *method, const char *path, const char *headers,
             const char *body, struct gwt_resp *r)
{
    int fd = gwt_connect(port);
    if (fd < 0)
        return -1;
    int rc = gwt_send(fd, method, path, headers, body, 0) == 0 ? gwt_read(fd, r, 60000) : -1;
    close(fd);
    return rc;
}

json_t *gwt_json(const struct gwt_resp *r)
{
    return r->body != NULL ? json_loadb(r->body, r->len, 0, NULL) : NULL;
}

int gwt_gw_start(struct gwt_gw *g, int wait_healthy)
{
    char bin[600], port[8];
    const char *argv[32] = {bin,           "--instance", g->h->instance, "--rundir", g->h->rundir,
                            "--http-port", port};
    int n = 7;
    if (g->port == 0)
        g->port = gwt_free_port();
    snprintf(bin, sizeof(bin), "%s/gatewayd", rs_test_bindir());
    snprintf(port, sizeof(port), "%u", g->port);
    for (int i = 0; i < GWT_EXTRA_MAX && g->extra[i] != NULL && n < 29; i++)
        argv[n++] = g->extra[i];
    if (g->held_fd > 0) {
        argv[n++] = "--listen-fd";
        argv[n++] = "3";
    }
    argv[n] = NULL;
    snprintf(g->log, sizeof(g->log), "%s/gatewayd-%u.log", g->h->dir, g->starts++);
    g->pid = fork();
    if (g->pid == 0) {
        int fd = open(g->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        if (g->held_fd > 0)
            dup2(g->held_fd, 3);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    for (uint64_t end = rs_clock_ms() + 30000; rs_clock_ms() < end;) {
        struct gwt_resp r;
        int st;
        if (waitpid(g->pid, &st, WNOHANG) == g->pid) {
            g->pid = 0;
            return -1;
        }
        if (gwt_http(g->port, "GET", "/health", NULL, NULL, &r) == 0) {
            int ok = !wait_healthy || r.status == 200;
            gwt_resp_free(&r);
            if (ok)
                return 0;
        }
        usleep(5000);
    }
    return -1;
}

void gwt_gw_kill(struct gwt_gw *g, int sig)
{
    if (g->pid <= 0)
        return;
    kill(g->pid, sig);
    if (sig == SIGKILL || sig == SIGTERM) {
        waitpid(g->pid, NULL, 0);
        g->pid = 0;
    }
}

/* Copies gatewayd's log of its last start to stderr. */
static void gwt_gw_dump(const struct gwt_gw *g)
{
    char line[1024];
    FILE *f = fopen(g->log, "r");
    fprintf(stderr, "---- %s ----\n", g->log);
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        fputs(line, stderr);
    if (f != NULL)
        fclose(f);
}

int gwt_up(struct gwt_env *e, const char *const *extra)
{
    struct rs_harness_opts o = {0};
    memset(e, 0, sizeof(*e));
    if (rs_test_refdata(GWT_MODEL, e->model, sizeof(e->model)) == NULL)
        return RS_TEST_SKIP;
    o.model = e->model;
    o.n_ctx = GWT_CTX;
    o.max_requests = 64;
    if (rs_harness_start(&e->h, &o) != RS_OK)
        return 1;
    e->gw.h = &e->h;
    for (int i = 0; extra != NULL && extra[i] != NULL && i < GWT_EXTRA_MAX - 1; i++)
        e->gw.extra[i] = extra[i];
    if (gwt_gw_start(&e->gw, 1) != 0) {
        gwt_gw_dump(&e->gw);
        rs_harness_stop(&e->h, 1);
        return 1;
    }
    return 0;
}

void gwt_down(struct gwt_env *e, int failed)
{
    if (failed) {
        gwt_gw_dump(&e->gw);
        rs_harness_dump_logs(&e->h, RS_PIPE_N_STAGES);
    }
    gwt_gw_kill(&e->gw, SIGTERM);
    rs_harness_stop(&e->h, failed);
}

int gwt_first_chunk(int fd)
{
    char buf[8192];
    size_t n = 0;
    while (n < sizeof(buf) - 1) {
        ssize_t k = gwt_recv(fd, buf + n, sizeof(buf) - 1 - n, 30000);
        if (k <= 0)
            return -1;
        n += (size_t)k;
        buf[n] = '\0';
        if (strstr(buf, "\"text\"") != NULL)
            return 0;
    }
    return -1;
}

int gwt_sse_split(char *body, char **events, int cap)
{
    int n = 0;
    char *p = body;
    while (*p != '\0') {
        char *e = strstr(p, "\n\n");
        if (strncmp(p, "data: ", 6) != 0 || e == NULL || n == cap ||
            memchr(p, '\n', (size_t)(e - p)))
            return -1;
        *e = '\0';
        events[n++] = p + 6;
        p = e + 2;
    }
    return n;
}

/* SPDX-License-Identifier: MIT */
/*
 * bench_loadgen's HTTP side: the same load as the native clients, sent to
 * gatewayd as OpenAI streaming completions (prompt token ids, stream_options
 * include_usage) over keep-alive TCP connections, all from one epoll loop,
 * with every SSE chunk's arrival timed as the native path times deltas. Also
 * the gatewayd process loadgen starts for --http start (and SIGKILLs and
 * restarts for --storm), held idle connections (--idle), and /metrics reads.
 * Included by bench_loadgen.c after its structs. Leaves out TLS, HTTP/2 and
 * pipelining: a client sends its next request after the previous response.
 */
#ifndef BENCH_LOADGEN_HTTP_H
#define BENCH_LOADGEN_HTTP_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "common/json.h"

enum { H_FREE, H_CONNECTING, H_SENDING, H_READING };

struct hconn {
    struct lg *g;
    int fd, state;
    uint32_t req;      /* request being answered */
    uint64_t retry_at; /* storm: reconnect and resend not before (ns) */
    char *out;         /* the request's bytes */
    size_t out_len, out_off;
    char *in; /* received bytes not parsed yet */
    size_t in_len, in_cap;
    int have_head, status, chunked, done;
    int close_after; /* the response said Connection: close */
    int reused;      /* the request went out on a kept-alive connection */
    size_t chunk_left; /* bytes of the current chunk still to come */
    int chunk_crlf;    /* the CRLF after a chunk's data is still to come */
    char *sse;         /* decoded body bytes not yet split into events */
    size_t sse_len, sse_cap;
};

/* Appends n bytes to a growable buffer; 0 or -1. */
static int hbuf_put(char **b, size_t *len, size_t *cap, const char *p, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 8192;
        while (c < *len + n + 1)
            c *= 2;
        char *q = realloc(*b, c);
        if (q == NULL)
            return -1;
        *b = q;
        *cap = c;
    }
    memcpy(*b + *len, p, n);
    *len += n;
    (*b)[*len] = '\0';
    return 0;
}

/* http://HOST:PORT[/PREFIX] (IPv4 or localhost). 0 or -1. */
static int http_url(const char *url, struct sockaddr_in *sa, char *prefix, size_t cap)
{
    char host[64];
    unsigned port = 80;
    int n = 0;
    if (strncmp(url, "http://", 7) != 0 || sscanf(url + 7, "%63[^:/]:%u%n", host, &port, &n) < 1)
        return -1;
    const char *rest = strchr(url + 7, '/');
    snprintf(prefix, cap, "%s", rest != NULL ? rest : "/v1");
    size_t pl = strlen(prefix);
    if (pl > 0 && prefix[pl - 1] == '/')
        prefix[pl - 1] = '\0';
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (strcmp(host, "localhost") == 0)
        snprintf(host, sizeof(host), "127.0.0.1");
    return inet_pton(AF_INET, host, &sa->sin_addr) == 1 && port > 0 && port < 65536 ? 0 : -1;
}

static void hc_close(struct hconn *h)
{
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
    h->in_len = h->sse_len = 0;
    h->have_head = h->done = 0;
}

static int hc_connect(struct hconn *h)
{
    int one = 1;
    h->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (h->fd < 0)
        return -1;
    setsockopt(h->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(h->fd, (struct sockaddr *)&h->g->http_addr, sizeof(h->g->http_addr)) != 0 &&
        errno != EINPROGRESS) {
        hc_close(h);
        return -1;
    }
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN | EPOLLRDHUP, .data.ptr = h};
    epoll_ctl(h->g->ep, EPOLL_CTL_ADD, h->fd, &ev);
    return 0;
}

/* The request body (owned; NULL on OOM): the prompt ids, lengths and sampling the native
 * path sends, written by jansson (common/json.h) as every ringserve JSON is. */
static char *http_body(const struct rs_wire_generate *gen)
{
    json_t *ids = json_array();
    for (uint32_t i = 0; ids != NULL && i < gen->prompt_ids.n; i++)
        json_array_append_new(ids, json_integer(gen->prompt_ids.vals[i]));
    json_t *o = json_pack("{s:o,s:I,s:o,s:b,s:{s:b}}", "prompt", ids, "max_tokens",
                          (json_int_t)gen->max_tokens, "temperature",
                          rs_json_float(gen->temperature), "stream", 1, "stream_options",
                          "include_usage", 1);
    if (o != NULL && gen->ignore_eos)
        rs_json_set(o, "ignore_eos", json_true());
    if (o != NULL && (gen->has & RS_WIRE_GEN_SEED))
        rs_json_set(o, "seed", json_integer((json_int_t)(gen->seed & 0x7fffffffffffffffull)));
    char *body = o != NULL ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    return body;
}

/* Builds request i's HTTP bytes on h (an Idempotency-Key when the storm retries). */
static int hc_request(struct hconn *h, uint32_t i, const struct rs_wire_generate *gen)
{
    struct lg *g = h->g;
    char head[512], key[96] = "";
    char *body = http_body(gen);
    if (body == NULL)
        return -1;
    int blen = (int)strlen(body);
    if (g->a.storm.lo > 0)
        snprintf(key, sizeof(key), "Idempotency-Key: loadgen-%llu-%u\r\n",
                 (unsigned long long)g->run_tag, i);
    int hl = snprintf(head, sizeof(head),
                      "POST %s/completions HTTP/1.1\r\nHost: ringserve\r\n"
                      "Content-Type: application/json\r\n%sContent-Length: %d\r\n\r\n",
                      g->http_prefix, key, blen);
    free(h->out);
    h->out = malloc((size_t)hl + (size_t)blen);
    if (h->out == NULL) {
        free(body);
        return -1;
    }
    memcpy(h->out, head, (size_t)hl);
    memcpy(h->out + hl, body, (size_t)blen);
    free(body);
    h->out_len = (size_t)hl + (size_t)blen;
    h->out_off = 0;
    h->req = i;
    h->reused = h->fd >= 0;
    if (h->fd < 0) {
        h->state = H_CONNECTING;
        return hc_connect(h);
    }
    h->state = H_SENDING; /* a kept-alive connection: writable at once */
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN | EPOLLRDHUP, .data.ptr = h};
    epoll_ctl(g->ep, EPOLL_CTL_MOD, h->fd, &ev);
    return 0;
}

/* The completion's text (JSON-decoded) of one chunk, appended to the request's text. */
static void keep_text(struct lg_req *q, const char *json, size_t n)
{
    json_t *c = json_loadb(json, n, 0, NULL);
    const char *t = json_string_value(
        json_object_get(json_array_get(json_object_get(c, "choices"), 0), "text"));
    if (t != NULL)
        hbuf_put(&q->text, &q->text_len, &q->text_cap, t, strlen(t));
    json_decref(c);
}

/* One SSE event's data payload. Returns 1 when it was [DONE]. */
static int on_sse_event(struct hconn *h, const char *d, size_t n, uint64_t now)
{
    struct lg_req *q = &h->g->reqs[h->req];
    if (n == 6 && memcmp(d, "[DONE]", 6) == 0)
        return 1;
    /* usage: in a chunk of its own (choices []), as gatewayd sends it with
     * stream_options.include_usage, or in the finish chunk, as llama-server does */
    const char *u = strstr(d, "\"completion_tokens\":");
    if (u != NULL)
        q->n_out = (uint32_t)strtoul(u + 20, NULL, 10);
    if (strstr(d, "\"choices\":[]") != NULL)
        return 0;
    if (strstr(d, "\"error\":") != NULL)
        q->failed = 1;
    if (strstr(d, "\"finish_reason\":null") == NULL)
        return 0; /* a choice's finish chunk: no token */
    lg_token_arrived(h->g, q, now);
    if (h->g->keep_text)
        keep_text(q, d, n);
    return 0;
}

/* Splits the decoded body into events; 1 once [DONE] was seen. */
static int hc_events(struct hconn *h, uint64_t now)
{
    size_t at = 0;
    int done = 0;
    for (;;) {
        char *e = h->sse_len > at ? strstr(h->sse + at, "\n\n") : NULL;
        if (e == NULL)
            break;
        *e = '\0'; /* the event alone, so searches in it stop at its end */
        if (strncmp(h->sse + at, "data: ", 6) == 0)
            done |= on_sse_event(h, h->sse + at + 6, (size_t)(e - h->sse) - at - 6, now);
        at = (size_t)(e - h->sse) + 2;
    }
    memmove(h->sse, h->sse + at, h->sse_len - at);
    h->sse_len -= at;
    if (h->sse != NULL)
        h->sse[h->sse_len] = '\0';
    return done;
}

/* Decodes chunked transfer encoding from h->in into h->sse. 1: the last chunk arrived. */
static int hc_dechunk(struct hconn *h)
{
    size_t at = 0;
    int end = 0;
    while (at < h->in_len && !end) {
        if (h->chunk_left > 0) {
            size_t n = h->in_len - at < h->chunk_left ? h->in_len - at : h->chunk_left;
            hbuf_put(&h->sse, &h->sse_len, &h->sse_cap, h->in + at, n);
            at += n;
            h->chunk_left -= n;
            h->chunk_crlf = h->chunk_left == 0;
            continue;
        }
        char *crlf = memmem(h->in + at, h->in_len - at, "\r\n", 2);
        if (crlf == NULL)
            break;
        size_t line = at, next = (size_t)(crlf - h->in) + 2;
        if (h->chunk_crlf) {
            h->chunk_crlf = 0;
            at = next;
            continue;
        }
        unsigned long sz = strtoul(h->in + line, NULL, 16);
        if (sz == 0) { /* the last chunk: "0\r\n" and the blank line after it */
            if (next + 2 > h->in_len)
                break; /* re-read from `line` when the rest arrives */
            at = next + 2;
            end = 1;
            break;
        }
        at = next;
        h->chunk_left = sz;
    }
    memmove(h->in, h->in + at, h->in_len - at);
    h->in_len -= at;
    if (h->in != NULL)
        h->in[h->in_len] = '\0'; /* the head search reads it as a string */
    return end;
}

static void hc_finish(struct hconn *h, int ok, uint64_t now);

/*
 * A kept-alive connection the server closed as the request went out (a server may
 * end one whenever it is idle between requests): no byte of an answer came, so the
 * request goes again on a new connection, once, as HTTP clients do. 1 when resent.
 */
static int hc_resend_fresh(struct hconn *h)
{
    if (!h->reused || h->have_head || h->in_len > 0)
        return 0;
    hc_close(h);
    h->reused = 0;
    h->out_off = 0;
    h->state = H_CONNECTING;
    return hc_connect(h) == 0;
}

/* Reads what arrived; completes the request when its response is whole. */
static void hc_read(struct hconn *h, uint64_t now)
{
    char buf[65536];
    int eof = 0; /* the server closed: a whole response before it still counts */
    for (;;) {
        ssize_t k = recv(h->fd, buf, sizeof(buf), 0);
        if (k < 0 && errno != EAGAIN && errno != EINTR) {
            if (!hc_resend_fresh(h))
                hc_finish(h, 0, now);
            return;
        }
        if (k <= 0) {
            eof = k == 0;
            break;
        }
        hbuf_put(&h->in, &h->in_len, &h->in_cap, buf, (size_t)k);
    }
    if (!h->have_head) {
        /* bytes before the status line are the previous answer's: llama-server ends a
         * kept-alive stream with a second terminating chunk */
        char *st = h->in != NULL ? memmem(h->in, h->in_len, "HTTP/", 5) : NULL;
        if (st != NULL && st > h->in) {
            h->in_len -= (size_t)(st - h->in);
            memmove(h->in, st, h->in_len);
            h->in[h->in_len] = '\0';
        }
        char *eoh = h->in != NULL ? strstr(h->in, "\r\n\r\n") : NULL;
        if (eoh == NULL) {
            if (eof && !hc_resend_fresh(h))
                hc_finish(h, 0, now); /* closed before a whole head */
            return;
        }
        h->status = atoi(h->in + 9);
        char *close_hdr = strcasestr(h->in, "\r\nconnection: close");
        h->close_after = close_hdr != NULL && close_hdr < eoh;
        h->chunked = strcasestr(h->in, "transfer-encoding: chunked") != NULL &&
                     strcasestr(h->in, "transfer-encoding: chunked") < eoh;
        size_t hl = (size_t)(eoh - h->in) + 4;
        memmove(h->in, h->in + hl, h->in_len - hl);
        h->in_len -= hl;
        h->have_head = 1;
        h->chunk_left = 0;
        h->chunk_crlf = 0;
        if (h->status != 200 || !h->chunked) {
            hc_finish(h, 0, now); /* an error answer: a refusal, or 5xx while a stage is down */
            return;
        }
    }
    int end = hc_dechunk(h);
    h->done |= hc_events(h, now);
    if (!end && !eof)
        return;
    int reconnect = eof || h->close_after;
    hc_finish(h, end && h->done, now); /* ends after [DONE], with the terminating chunk */
    if (reconnect) /* the next request on a new connection */
        hc_close(h);
}

static void hc_send(struct hconn *h)
{
    while (h->out_off < h->out_len) {
        ssize_t k = send(h->fd, h->out + h->out_off, h->out_len - h->out_off, MSG_NOSIGNAL);
        if (k < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (k <= 0) {
            if (!hc_resend_fresh(h))
                hc_finish(h, 0, rs_clock_ns());
            return;
        }
        h->out_off += (size_t)k;
    }
    h->state = H_READING;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = h};
    epoll_ctl(h->g->ep, EPOLL_CTL_MOD, h->fd, &ev);
}

static void hc_on_event(struct hconn *h, uint32_t events, uint64_t now)
{
    if (h->state == H_CONNECTING && (events & EPOLLOUT)) {
        int err = 0;
        socklen_t n = sizeof(err);
        getsockopt(h->fd, SOL_SOCKET, SO_ERROR, &err, &n);
        if (err != 0) {
            hc_finish(h, 0, now);
            return;
        }
        h->state = H_SENDING;
    }
    if (h->state == H_SENDING)
        hc_send(h);
    if (h->state == H_READING && (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
        hc_read(h, now);
}

/* --- the gatewayd loadgen starts (--http start) ------------------------------------------ */

static int gw_probe(uint16_t port)
{
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    char buf[32];
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok = 0;
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
        const char *r = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        struct timeval tv = {.tv_sec = 5};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        ok = send(fd, r, strlen(r), MSG_NOSIGNAL) > 0 && recv(fd, buf, sizeof(buf), 0) >= 12 &&
             strncmp(buf, "HTTP/1.1 200", 12) == 0;
    }
    if (fd >= 0)
        close(fd);
    return ok;
}

/* Starts gatewayd on the harness's instance; waits until /health answers 200 if asked. */
static int gw_spawn(struct lg *g, const struct rs_harness *h, int wait)
{
    char bin[700], port[8], log[400];
    snprintf(bin, sizeof(bin), "%s/gatewayd", h->bindir);
    snprintf(port, sizeof(port), "%u", g->gw_port);
    snprintf(log, sizeof(log), "%s/gatewayd-%u.log", h->dir, g->gw_starts++);
    g->gw_pid = fork();
    if (g->gw_pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(bin, bin, "--instance", h->instance, "--rundir", h->rundir, "--http-port", port,
              "--max-connections", "16384", "--idle-timeout", "86400", (char *)NULL);
        _exit(127);
    }
    for (uint64_t end = rs_clock_ms() + 30000; wait && rs_clock_ms() < end; usleep(1000))
        if (gw_probe(g->gw_port))
            return 0;
    return wait ? -1 : 0;
}

static void gw_kill(struct lg *g)
{
    if (g->gw_pid > 0) {
        kill(g->gw_pid, SIGKILL);
        waitpid(g->gw_pid, NULL, 0);
    }
    g->gw_pid = 0;
}

/* A port nothing listens on. */
static uint16_t free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    uint16_t p = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &n) == 0)
        p = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return p;
}

/* Threads of a process (gatewayd's: it must not grow with idle connections). */
static int proc_threads(pid_t pid, long *rss_kb)
{
    char path[64], line[256];
    int n = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "Threads:", 8) == 0)
            n = atoi(line + 8);
        if (strncmp(line, "VmRSS:", 6) == 0)
            *rss_kb = atol(line + 6);
    }
    if (f != NULL)
        fclose(f);
    return n;
}

/* CPU seconds (user + system) a process used so far, or -1. */
static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    size_t n = f != NULL ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long ut, st;
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
                            &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

#endif

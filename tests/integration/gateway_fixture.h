/* SPDX-License-Identifier: MIT */
/*
 * What the gatewayd tests share: a gatewayd process started by the test
 * on the instance of a tests/pipeline_harness.h harness (SIGKILLed and
 * restarted at will, on the same port), and a small blocking HTTP/1.1
 * client over real TCP sockets (chunked bodies decoded, SSE events split),
 * so the checks see exactly the bytes a client sees. Leaves out TLS and
 * pipelining, which gatewayd does not offer. The code is gateway_fixture.c
 * (rs_testlib).
 */
#ifndef RS_GATEWAY_FIXTURE_H
#define RS_GATEWAY_FIXTURE_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/pipeline_harness.h"
#include "tests/rs_test.h"

#define GWT_EXTRA_MAX 16

struct gwt_gw {
    struct rs_harness *h;
    uint16_t port;
    pid_t pid;
    unsigned starts;
    const char *extra[GWT_EXTRA_MAX]; /* more gatewayd arguments, NULL-terminated */
    int held_fd;                      /* > 0: a listening socket the test holds (--listen-fd) */
    char log[512];
};

struct gwt_resp {
    int status;
    char head[16384]; /* status line and headers */
    char *body;       /* decoded body (owned), NUL-terminated */
    size_t len;
};

/* A connected socket to 127.0.0.1:port, or -1. */
int gwt_connect(uint16_t port);

/* Sends all n bytes (no SIGPIPE); 0, or -1 when the connection failed. */
int gwt_send_all(int fd, const char *p, size_t n);

/* Sends one request (body may be NULL; headers: extra "Name: value\r\n" lines or NULL). */
int gwt_send(int fd, const char *method, const char *path, const char *headers, const char *body,
             int keep_alive);

/* Reads up to cap bytes within timeout_ms; bytes read, 0 at EOF, -1 on error or timeout. */
ssize_t gwt_recv(int fd, char *buf, size_t cap, int timeout_ms);

/* The value of header `name` in r's head (NUL-terminated copy in out), or NULL. */
const char *gwt_header(const struct gwt_resp *r, const char *name, char *out, size_t cap);

/*
 * Reads one whole response from fd (headers, then a Content-Length or
 * chunked body, or everything to EOF). 0, or -1 when the connection ended
 * early or nothing came within timeout_ms between reads.
 */
int gwt_read(int fd, struct gwt_resp *r, int timeout_ms);

/* Frees r's body (r itself is the caller's). */
void gwt_resp_free(struct gwt_resp *r);

/* One request on a fresh connection. 0 with *r filled, -1 when it failed. */
int gwt_http(uint16_t port, const char *method, const char *path, const char *headers,
             const char *body, struct gwt_resp *r);

/* r's body parsed as JSON (owned), or NULL. */
json_t *gwt_json(const struct gwt_resp *r);

/* --- the gatewayd process ---------------------------------------------------------------- */

/* Starts gatewayd (again, on the same port); waits for /health 200 when wait_healthy. */
int gwt_gw_start(struct gwt_gw *g, int wait_healthy);

/* Sends sig to gatewayd; SIGKILL and SIGTERM also reap it. */
void gwt_gw_kill(struct gwt_gw *g, int sig);

/* --- an instance with a gatewayd ----------------------------------------------------------- */

#define GWT_MODEL "stories260K.gguf"
#define GWT_CTX 1024

struct gwt_env {
    struct rs_harness h;
    struct gwt_gw gw;
    char model[512];
};

/* A check that fails the case and jumps to its `out:` clean-up (needs int fail). */
#define GCHECK(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            fail = 1;                                                                              \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* The four daemons on stories260K and a gatewayd with extra arguments (NULL-terminated). */
int gwt_up(struct gwt_env *e, const char *const *extra);

/* Stops gatewayd and the instance; a failed case first dumps every log. */
void gwt_down(struct gwt_env *e, int failed);

/* Reads fd until the stream's first content chunk arrived: 0, or -1. */
int gwt_first_chunk(int fd);

/* --- SSE --------------------------------------------------------------------------------- */

/*
 * Splits a stream body into its events' data payloads (events[i] borrowed
 * from body, which is modified). Checks the framing: every event is exactly
 * one "data: " line followed by a blank line. Returns the count, -1 when the
 * framing is wrong.
 */
int gwt_sse_split(char *body, char **events, int cap);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * gatewayd's connection limits with real sockets: 1000 idle keep-alive
 * connections are held and all served again, without a thread each
 * (gatewayd's thread count does not move); a client that sends its request
 * line or headers a byte at a time (slow loris), or connects and says
 * nothing, is disconnected by the server after --read-timeout /
 * --idle-timeout, while others are served meanwhile; an oversized header is
 * refused. The figures (how long a slow client was held) are printed, not
 * checked: timing goals belong to bench/.
 */
#include <sys/resource.h>

#include "tests/integration/gateway_fixture.h"

static int threads_of(pid_t pid)
{
    char path[64], line[256];
    int n = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "Threads:", 8) == 0)
            n = atoi(line + 8);
    if (f != NULL)
        fclose(f);
    return n;
}

#define N_IDLE 1000

/* Sends a keep-alive GET /health on fd and reads its answer: 0 when it was 200. */
static int health_on(int fd)
{
    struct gwt_resp r;
    if (gwt_send(fd, "GET", "/health", NULL, NULL, 1) != 0 || gwt_read(fd, &r, 30000) != 0)
        return -1;
    int ok = r.status == 200 ? 0 : -1;
    gwt_resp_free(&r);
    return ok;
}

static int test_a_thousand_idle_keepalive_connections_without_a_thread_each(void)
{
    struct gwt_env e;
    struct rlimit rl;
    static int fds[N_IDLE];
    int fail = 0, opened = 0, rc;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_max < N_IDLE + 64) {
        fprintf(stderr, "the file descriptor limit (%llu) is too low for this test\n",
                (unsigned long long)rl.rlim_max);
        return RS_TEST_SKIP;
    }
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if ((rc = gwt_up(&e, NULL)) != 0)
        return rc;
    int before = threads_of(e.gw.pid);
    for (; opened < N_IDLE; opened++) {
        fds[opened] = gwt_connect(e.gw.port);
        GCHECK(fds[opened] >= 0 && health_on(fds[opened]) == 0, "connection %d", opened);
    }
    int during = threads_of(e.gw.pid);
    GCHECK(during == before, "gatewayd had %d threads, %d with %d connections open", before, during,
           N_IDLE);
    struct gwt_resp m;
    char k[128];
    GCHECK(gwt_http(e.gw.port, "GET", "/metrics", NULL, NULL, &m) == 0 && m.status == 200, "%s",
           "metrics");
    snprintf(k, sizeof(k), "ringserve:http_connections{model_name=\"stories260K\"} ");
    const char *at = strstr(m.body, k);
    long held = at != NULL ? atol(at + strlen(k)) : -1;
    gwt_resp_free(&m);
    GCHECK(held >= N_IDLE, "gatewayd counts %ld open connections", held);
    for (int i = 0; i < N_IDLE; i++) /* every one is still served, on the same connection */
        GCHECK(health_on(fds[i]) == 0, "second request on connection %d", i);
    fprintf(stderr, "%d keep-alive connections held and served twice; gatewayd threads: %d\n",
            N_IDLE, during);
out:
    for (int i = 0; i < opened; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    gwt_down(&e, fail);
    return fail;
}

/* Sends `what` one byte every 200 ms until the server closes fd; ms it took, or -1. */
static long trickle_until_closed(int fd, const char *what, uint64_t limit_ms)
{
    uint64_t t0 = rs_clock_ms();
    size_t i = 0, n = strlen(what);
    char c;
    while (rs_clock_ms() - t0 < limit_ms) {
        if (i < n && send(fd, what + i, 1, MSG_NOSIGNAL) != 1)
            return (long)(rs_clock_ms() - t0);
        i += i < n;
        ssize_t k = gwt_recv(fd, &c, 1, 200);
        if (k == 0 || (k < 0 && errno != 0 && errno != EAGAIN && errno != EINTR))
            return (long)(rs_clock_ms() - t0);
    }
    return -1;
}

static int test_slow_and_silent_clients_are_disconnected(void)
{
    struct gwt_env e;
    const char *extra[] = {"--read-timeout", "1", "--idle-timeout", "2", NULL};
    int fail = 0, rc = gwt_up(&e, extra);
    if (rc != 0)
        return rc;
    struct {
        const char *what, *at_once, *bytes;
    } cases[] = {
        {"headers a byte at a time", "GET /health HTTP/1.1\r\nHost: x\r\n",
         "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"},
        {"a body a byte at a time",
         "POST /tokenize HTTP/1.1\r\nHost: x\r\n"
         "Content-Length: 100\r\n\r\n",
         "{\"prompt\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
        {"its request line a byte at a time", "", "GET /healthhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh"},
        {"nothing at all", "", ""}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int fd = gwt_connect(e.gw.port);
        GCHECK(gwt_send_all(fd, cases[i].at_once, strlen(cases[i].at_once)) == 0, "%s", "send");
        errno = 0;
        long ms = trickle_until_closed(fd, cases[i].bytes, 30000);
        close(fd);
        GCHECK(ms >= 0, "a client sending %s was held for 30 s", cases[i].what);
        fprintf(stderr, "a client sending %s was disconnected after %ld ms\n", cases[i].what, ms);
        struct gwt_resp r;
        GCHECK(gwt_http(e.gw.port, "GET", "/health", NULL, NULL, &r) == 0 && r.status == 200, "%s",
               "others are still served");
        gwt_resp_free(&r);
    }
    /* a kept-alive connection idle past --idle-timeout is closed too */
    int fd = gwt_connect(e.gw.port);
    GCHECK(health_on(fd) == 0, "%s", "first request");
    long ms = trickle_until_closed(fd, "", 30000);
    close(fd);
    GCHECK(ms >= 0, "%s", "an idle keep-alive connection was held for 30 s");
    fprintf(stderr, "an idle keep-alive connection was closed after %ld ms\n", ms);
out:
    gwt_down(&e, fail);
    return fail;
}

static int test_oversized_headers_are_refused(void)
{
    struct gwt_env e;
    const char *extra[] = {"--max-header-bytes", "8192", NULL};
    char *hdr = malloc(20000);
    int fail = 0, rc = gwt_up(&e, extra);
    if (rc != 0) {
        free(hdr);
        return rc;
    }
    int n = snprintf(hdr, 20000, "X-Big: ");
    memset(hdr + n, 'b', 16000);
    snprintf(hdr + n + 16000, 100, "\r\n");
    struct gwt_resp r = {0};
    int got = gwt_http(e.gw.port, "GET", "/health", hdr, NULL, &r);
    GCHECK(got != 0 || r.status == 431 || r.status == 413 || r.status == 414,
           "a 16 KB header got %d", r.status);
    gwt_resp_free(&r);
    GCHECK(gwt_http(e.gw.port, "GET", "/health", NULL, NULL, &r) == 0 && r.status == 200, "%s",
           "still serving");
    gwt_resp_free(&r);
out:
    free(hdr);
    gwt_down(&e, fail);
    return fail;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_a_thousand_idle_keepalive_connections_without_a_thread_each),
    RS_TEST(test_slow_and_silent_clients_are_disconnected),
    RS_TEST(test_oversized_headers_are_refused),
};

RS_TEST_MAIN(cases)

/* SPDX-License-Identifier: MIT */
/*
 * The HTTP server: libmicrohttpd in epoll mode driven from main.c's loop
 * (no thread per connection or stream: a request waiting on the pipeline is
 * a suspended connection, resumed when its call has news), on a listening
 * socket bound first thing at start (SO_REUSEADDR, so a restarted gatewayd
 * takes its port back at once while old connections sit in TIME_WAIT) or
 * inherited from systemd socket activation (then the port never closes).
 * libmicrohttpd does not notice a client leaving while its connection is
 * suspended, so those sockets are also in an epoll set of our own watching
 * EPOLLRDHUP. Limits: body (413, counted here), request line and headers
 * (the per-connection memory limit, 431 from libmicrohttpd), connections,
 * idle keep-alive time, and the time from a request line to its complete
 * body (a slow-loris client is shut down, not held). Routing is routes.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "gatewayd/call_impl.h"

#define S_NS 1000000000ull
#define SWEEP_NS 500000000ull
#define LISTEN_BACKLOG 4096

/* --- the listening socket -------------------------------------------------------------------- */

static bool is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss->ss_family != AF_INET6)
        return false;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

static int bind_one(const struct addrinfo *ai)
{
    int one = 1;
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        (ai->ai_family == AF_INET6 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) != 0) ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static rs_err bind_listen(struct gw *g)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                    *res, *ai;
    char port[8];
    snprintf(port, sizeof(port), "%u", g->o.port);
    int rc = getaddrinfo(g->o.host, port, &hints, &res);
    if (rc != 0) {
        rs_log_error("--host %s: %s", g->o.host, gai_strerror(rc));
        return RS_EINVAL;
    }
    g->listen_fd = -1;
    for (ai = res; ai != NULL && g->listen_fd < 0; ai = ai->ai_next)
        g->listen_fd = bind_one(ai);
    int e = errno;
    freeaddrinfo(res);
    if (g->listen_fd < 0) {
        rs_log_error("cannot listen on %s port %u: %s", g->o.host, g->o.port, strerror(e));
        return RS_EIO;
    }
    return RS_OK;
}

rs_err gw_http_listen(struct gw *g, bool *loopback)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (g->o.has_listen_fd) { /* held by the supervisor: the port outlives us */
        g->listen_fd = (int)g->o.listen_fd;
        if (sd_is_socket(g->listen_fd, AF_UNSPEC, SOCK_STREAM, 1) <= 0) {
            rs_log_error("--listen-fd %d is not a listening stream socket", g->listen_fd);
            return RS_EINVAL;
        }
        fcntl(g->listen_fd, F_SETFL, fcntl(g->listen_fd, F_GETFL) | O_NONBLOCK);
    } else if (sd_listen_fds(1) >= 1 &&
               sd_is_socket(SD_LISTEN_FDS_START, AF_UNSPEC, SOCK_STREAM, 1) > 0) {
        g->listen_fd = SD_LISTEN_FDS_START; /* socket activation: the port outlives us */
    } else if (bind_listen(g) != RS_OK) {
        return RS_EIO;
    }
    if (getsockname(g->listen_fd, (struct sockaddr *)&ss, &len) != 0)
        return RS_EIO;
    char host[INET6_ADDRSTRLEN], port[8];
    if (getnameinfo((struct sockaddr *)&ss, len, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
        snprintf(g->o.host, sizeof(g->o.host), "%s", host);
        g->o.port = (uint16_t)atoi(port);
    }
    *loopback = is_loopback(&ss);
    return RS_OK;
}

/* --- connections and requests ---------------------------------------------------------------- */

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    struct gw *g = cls;
    struct gw_conn *c = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        if ((c = calloc(1, sizeof(*c))) == NULL)
            return;
        const union MHD_ConnectionInfo *fd =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ad =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        c->mc = mc;
        c->fd = fd != NULL ? fd->connect_fd : -1;
        c->idle_since_ns = rs_clock_ns();
        if (ad == NULL || getnameinfo(ad->client_addr, sizeof(struct sockaddr_storage), c->peer,
                                      sizeof(c->peer), NULL, 0, NI_NUMERICHOST) != 0)
            snprintf(c->peer, sizeof(c->peer), "?");
        c->next = g->conns;
        if (g->conns != NULL)
            g->conns->prev = c;
        g->conns = c;
        g->st.connections++;
        *socket_context = c;
        return;
    }
    if (c == NULL)
        return;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        g->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    g->st.connections--;
    free(c);
    *socket_context = NULL;
}

/* The request line arrived: the request context starts here (and the read deadline). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *mc)
{
    (void)uri;
    struct gw *g = cls;
    struct gw_req *r = calloc(1, sizeof(*r));
    const union MHD_ConnectionInfo *sc =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (r == NULL)
        return NULL;
    r->gw = g;
    r->mc = mc;
    r->start_ns = rs_clock_ns();
    r->conn = sc != NULL ? sc->socket_context : NULL;
    if (r->conn != NULL) {
        r->conn->req = r;
        r->conn->idle_since_ns = 0;
    }
    return r;
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)mc;
    struct gw *g = cls;
    struct gw_req *r = *req_cls;
    if (r == NULL)
        return;
    gw_req_watch(r, false);
    if (r->streaming)
        g->st.streams--;
    if (r->call != NULL)
        gw_call_detach(r->call, r->peer_gone || toe != MHD_REQUEST_TERMINATED_COMPLETED_OK);
    if (r->conn != NULL) {
        r->conn->req = NULL;
        r->conn->idle_since_ns = rs_clock_ns();
    }
    gw_buf_free(&r->body);
    free(r);
    *req_cls = NULL;
}

const char *gw_req_header(struct gw_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->mc, MHD_HEADER_KIND, name);
}

void gw_req_wake(struct gw_req *r)
{
    if (r->suspended) {
        r->suspended = false;
        r->gw->resumed = true;
        MHD_resume_connection(r->mc);
    }
}

static void suspend(struct gw_req *r)
{
    if (!r->suspended) {
        r->suspended = true;
        MHD_suspend_connection(r->mc);
    }
}

void gw_req_watch(struct gw_req *r, bool on)
{
    struct epoll_event ev = {.events = EPOLLRDHUP, .data.ptr = r};
    if (on == r->watching || r->conn == NULL || r->conn->fd < 0)
        return;
    if (epoll_ctl(r->gw->watch_fd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, r->conn->fd, &ev) == 0 ||
        !on)
        r->watching = on;
}

void gw_http_watch_events(struct gw *g)
{
    struct epoll_event evs[64];
    int n = epoll_wait(g->watch_fd, evs, 64, 0);
    for (int i = 0; i < n; i++) {
        struct gw_req *r = evs[i].data.ptr;
        r->peer_gone = true; /* the handler or reader now fails it, and MHD closes it */
        gw_req_watch(r, false);
        gw_req_wake(r);
    }
}

uint64_t gw_http_sweep(struct gw *g, uint64_t now)
{
    uint64_t idle = (uint64_t)g->o.idle_timeout_s * S_NS, rd = (uint64_t)g->o.read_timeout_s * S_NS;
    for (struct gw_conn *c = g->conns; c != NULL; c = c->next) {
        struct gw_req *r = c->req;
        bool slow = r != NULL ? !r->handled && !r->queued && now - r->start_ns > rd
                              : c->idle_since_ns != 0 && now - c->idle_since_ns > idle;
        if (slow && c->fd >= 0) {
            shutdown(c->fd, SHUT_RDWR); /* MHD sees the end and closes it properly */
            c->fd = -1;
            g->st.slow_closed++;
        }
    }
    return now + SWEEP_NS;
}

/* --- responses ------------------------------------------------------------------------------- */

static void count(struct gw_req *r, int status)
{
    r->status = status;
    r->gw->st.http_requests[status >= 100 && status < 600 ? status / 100 : 0]++;
}

static enum MHD_Result queue(struct gw_req *r, int status, struct MHD_Response *resp,
                             const char *type)
{
    if (resp == NULL)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (r->request_id[0] != '\0')
        MHD_add_response_header(resp, "x-request-id", r->request_id);
    if (status == 429 || status == 503)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 409)
        MHD_add_response_header(resp, "x-should-retry", "false");
    count(r, status);
    r->queued = true;
    enum MHD_Result rc = MHD_queue_response(r->mc, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return rc;
}

enum MHD_Result gw_respond_text(struct gw_req *r, int status, const char *type, char *text,
                                size_t len)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL)
        free(text);
    return queue(r, status, resp, type);
}

enum MHD_Result gw_respond_json(struct gw_req *r, int status, json_t *body)
{
    char *s = body != NULL ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    if (body != NULL)
        json_decref(body);
    if (s == NULL)
        return MHD_NO;
    size_t n = strlen(s);
    s[n] = '\n'; /* json_dumps leaves the NUL's byte: a trailing newline reads better in curl */
    return gw_respond_text(r, status, "application/json", s, n + 1);
}

enum MHD_Result gw_respond_error(struct gw_req *r, const struct gw_err *e)
{
    rs_log_debug("%s: %d %s", r->request_id, e->status, e->message);
    return gw_respond_json(r, e->status, gw_fmt_error(e));
}

static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct gw_req *r = cls;
    if (r->peer_gone || r->call == NULL)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    ssize_t n = gw_call_read(r->call, buf, max);
    if (n == -1)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (n == 0)
        suspend(r); /* resumed when the call has more */
    return n;
}

enum MHD_Result gw_respond_stream(struct gw_req *r)
{
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, read_stream, r, NULL);
    if (resp == NULL)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    r->streaming = true;
    r->gw->st.streams++;
    return queue(r, 200, resp, "text/event-stream");
}

/* --- the access handler ---------------------------------------------------------------------- */

/* First call (headers complete): route, auth, declared body size. MHD_YES to go on. */
static enum MHD_Result on_headers(struct gw_req *r, const char *method, const char *url)
{
    struct gw_err e;
    bool bad_method = false;
    const char *rid = gw_req_header(r, "X-Request-Id");
    snprintf(r->request_id, sizeof(r->request_id), "%s", rid != NULL ? rid : "");
    snprintf(r->path, sizeof(r->path), "%s", url);
    r->route = gw_route_find(method, url, &bad_method);
    if (r->route == NULL) {
        gw_err_set(&e, bad_method ? 405 : 404, "",
                   bad_method ? "method %s not allowed on %s" : "no route %s %s", method, url);
        return gw_respond_error(r, &e);
    }
    if (r->route->needs_auth && gw_auth_check(r->gw, r, &e) != 0)
        return gw_respond_error(r, &e);
    const char *cl = gw_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl != NULL && strtoull(cl, NULL, 10) > r->gw->o.max_body) {
        gw_err_set(&e, 413, "", "request body of %s bytes is over the limit of %llu", cl,
                   (unsigned long long)r->gw->o.max_body);
        return gw_respond_error(r, &e);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    (void)cls;
    (void)version;
    (void)mc;
    struct gw_req *r = *req_cls;
    if (r == NULL)
        return MHD_NO;
    if (r->queued) { /* answered early (404, 401, 413): drop what else arrives */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (!r->started) {
        r->started = true;
        return on_headers(r, method, url);
    }
    if (*upload_data_size > 0) {
        if (!r->body_over && r->body.len + *upload_data_size <= r->gw->o.max_body)
            r->body_over = gw_buf_put(&r->body, upload_data, *upload_data_size) != 0;
        else
            r->body_over = true;
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (r->body_over) {
        struct gw_err e;
        gw_err_set(&e, 413, "", "request body over the limit of %llu bytes",
                   (unsigned long long)r->gw->o.max_body);
        return gw_respond_error(r, &e);
    }
    if (r->peer_gone)
        return MHD_NO;
    r->handled = true;
    enum MHD_Result rc = gw_route_run(r);
    if (rc == MHD_YES && !r->queued)
        suspend(r); /* waiting on the pipeline: woken by gw_req_wake */
    return rc;
}

static void log_mhd(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    rs_log_info("libmicrohttpd: %s", msg);
}

rs_err gw_http_start(struct gw *g)
{
    g->watch_fd = epoll_create1(EPOLL_CLOEXEC);
    if (g->watch_fd < 0)
        return RS_EIO;
    g->mhd = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, g,
        MHD_OPTION_EXTERNAL_LOGGER, log_mhd, g, MHD_OPTION_LISTEN_SOCKET, g->listen_fd,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)g->o.max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)g->o.idle_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)g->o.max_header,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, g, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
        g, MHD_OPTION_URI_LOG_CALLBACK, on_uri, g, MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1,
        MHD_OPTION_END);
    if (g->mhd == NULL) {
        rs_log_error("libmicrohttpd did not start on %s port %u", g->o.host, g->o.port);
        return RS_EIO;
    }
    return RS_OK;
}

void gw_http_stop(struct gw *g)
{
    if (g->mhd != NULL) {
        for (struct gw_conn *c = g->conns; c != NULL; c = c->next)
            if (c->req != NULL)
                gw_req_wake(c->req); /* stopping with suspended connections is not allowed */
        MHD_run(g->mhd);
        MHD_stop_daemon(g->mhd);
        g->mhd = NULL;
    }
    if (g->watch_fd >= 0)
        close(g->watch_fd);
    g->watch_fd = -1;
}

int gw_http_fd(struct gw *g)
{
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(g->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    return i != NULL ? i->epoll_fd : -1;
}

int gw_http_timeout_ms(struct gw *g)
{
    MHD_UNSIGNED_LONG_LONG t;
    if (MHD_get_timeout(g->mhd, &t) != MHD_YES)
        return -1;
    return t > 1000 ? 1000 : (int)t;
}

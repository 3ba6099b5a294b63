/* SPDX-License-Identifier: MIT */
/*
 * Connection caps (zsock_cap.h). The monitor thread keeps the open
 * connections of one bound socket (descriptor, peer key) in an array of at
 * most max_total entries: counting a peer's is a scan, cheap at these sizes
 * and only done per accept. libzmq reports an accepted connection's
 * descriptor before it closes it, and its disconnection before the number can
 * be reused, so the events in order name live connections. Also here: the
 * accept() wrapper that turns the open-file limit on a unix socket from
 * EMFILE, which libzmq 4.3's ipc listener asserts on, into ENFILE, which it
 * tolerates (it retries once a descriptor is free, which the caps make sure
 * happens soon). It sits in this file so that linking the caps links it.
 */
#include "ipc/zsock_cap.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/failpoint_sys.h"

/* The peer a connection counts against: uid (unix) or address (IPv4/IPv6). */
struct peer_key {
    uint8_t family;
    uint8_t addr[16];
};

struct conn {
    int fd;
    struct peer_key key;
};

struct rs_zsock_cap {
    void *pair; /* the monitor's PAIR end; the thread's after start */
    pthread_t thread;
    atomic_bool stop;
    char label[128];
    uint32_t max_total, max_per_peer;
    struct conn *conns; /* n_open of max_total */
    uint32_t n_open;
    atomic_uint_least64_t accepted, refused;
    atomic_uint open_now;
    uint64_t last_log_ns, quiet;
};

static atomic_uint_least64_t accept_emfile;

/* --- accept() wrappers ------------------------------------------------------ */

static int is_unix_socket(int s)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    return getsockname(s, (struct sockaddr *)&ss, &len) == 0 && ss.ss_family == AF_UNIX;
}

static int remap_emfile(int s, int fd)
{
    if (fd < 0 && errno == EMFILE && is_unix_socket(s)) {
        atomic_fetch_add_explicit(&accept_emfile, 1, memory_order_relaxed);
        errno = ENFILE;
    }
    return fd;
}

int accept4(int s, struct sockaddr *addr, socklen_t *len, int flags)
{
    static int (*_Atomic real)(int, struct sockaddr *, socklen_t *, int);
    if (real == NULL)
        real = (int (*)(int, struct sockaddr *, socklen_t *, int))dlsym(RTLD_NEXT, "accept4");
    return remap_emfile(s, real(s, addr, len, flags));
}

int accept(int s, struct sockaddr *addr, socklen_t *len)
{
    static int (*_Atomic real)(int, struct sockaddr *, socklen_t *);
    if (real == NULL)
        real = (int (*)(int, struct sockaddr *, socklen_t *))dlsym(RTLD_NEXT, "accept");
    return remap_emfile(s, real(s, addr, len));
}

uint64_t rs_zsock_cap_accept_emfile(void)
{
    return atomic_load(&accept_emfile);
}

/* --- caps ------------------------------------------------------------------- */

static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max)
        return;
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
        rs_log_info("zsock: open-file limit raised from %llu to its hard limit %llu",
                    (unsigned long long)was, (unsigned long long)rl.rlim_max);
}

/* The peer of connection fd; false when it cannot be told (the connection is then refused). */
static bool peer_of(int fd, struct peer_key *k)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    memset(k, 0, sizeof(*k));
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return false;
    k->family = (uint8_t)ss.ss_family;
    if (ss.ss_family == AF_UNIX) {
        struct ucred cr;
        socklen_t cl = sizeof(cr);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0)
            return false;
        memcpy(k->addr, &cr.uid, sizeof(cr.uid));
        return true;
    }
    len = sizeof(ss);
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0)
        return false;
    if (ss.ss_family == AF_INET)
        memcpy(k->addr, &((struct sockaddr_in *)&ss)->sin_addr, 4);
    else if (ss.ss_family == AF_INET6)
        memcpy(k->addr, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
    return true;
}

static void peer_text(const struct peer_key *k, char *buf, size_t cap)
{
    uint32_t uid;
    memcpy(&uid, k->addr, sizeof(uid));
    if (k->family == AF_UNIX)
        snprintf(buf, cap, "uid %u", uid);
    else if (k->family == AF_INET)
        snprintf(buf, cap, "%u.%u.%u.%u", k->addr[0], k->addr[1], k->addr[2], k->addr[3]);
    else
        snprintf(buf, cap, "an IPv6 address");
}

/* Why connection fd must be shut, or NULL to keep it. */
static const char *over_cap(const struct rs_zsock_cap *c, int fd, const struct peer_key *k)
{
    struct rlimit rl = {0, 0};
    getrlimit(RLIMIT_NOFILE, &rl);
    /* Headroom for the daemon's own files and the connections libzmq accepts meanwhile. */
    rlim_t reserve = rl.rlim_cur / 8 > 32 ? rl.rlim_cur / 8 : 32;
    if (rl.rlim_cur != RLIM_INFINITY && (rlim_t)fd + reserve >= rl.rlim_cur)
        return "the open-file limit is near";
    if (c->n_open >= c->max_total)
        return "the endpoint's connection cap is reached";
    uint32_t same = 0;
    for (uint32_t i = 0; i < c->n_open; i++)
        same += memcmp(&c->conns[i].key, k, sizeof(*k)) == 0;
    return same >= c->max_per_peer ? "the peer's connection cap is reached" : NULL;
}

static void refuse(struct rs_zsock_cap *c, int fd, const struct peer_key *k, const char *why)
{
    shutdown(fd, SHUT_RDWR); /* libzmq sees the end and closes the descriptor itself */
    atomic_fetch_add(&c->refused, 1);
    uint64_t now = rs_clock_ns();
    if (c->last_log_ns != 0 && now - c->last_log_ns < 1000000000ull) {
        c->quiet++;
        return;
    }
    char who[64];
    peer_text(k, who, sizeof(who));
    rs_log_warn("zsock %s: connection from %s closed: %s (%u open, cap %u, %u per peer; %llu "
                "similar not logged since the last line)",
                c->label, who, why, c->n_open, c->max_total, c->max_per_peer,
                (unsigned long long)c->quiet);
    c->last_log_ns = now;
    c->quiet = 0;
}

static void on_event(struct rs_zsock_cap *c, uint16_t event, int fd)
{
    if (event == ZMQ_EVENT_DISCONNECTED) {
        for (uint32_t i = 0; i < c->n_open; i++)
            if (c->conns[i].fd == fd) {
                c->conns[i] = c->conns[--c->n_open];
                break;
            }
    } else if (event == ZMQ_EVENT_ACCEPTED) {
        struct peer_key k;
        const char *why = peer_of(fd, &k) ? over_cap(c, fd, &k) : "its peer cannot be told";
        if (why != NULL) {
            refuse(c, fd, &k, why);
        } else {
            c->conns[c->n_open++] = (struct conn){.fd = fd, .key = k};
            atomic_fetch_add(&c->accepted, 1);
        }
    }
    atomic_store(&c->open_now, c->n_open);
}

/* Reads one monitor event (two frames: event id + value, then the endpoint). */
static void read_event(struct rs_zsock_cap *c)
{
    zmq_msg_t head, ep;
    zmq_msg_init(&head);
    zmq_msg_init(&ep);
    if (zmq_msg_recv(&head, c->pair, ZMQ_DONTWAIT) >= 0 && zmq_msg_more(&head) &&
        zmq_msg_recv(&ep, c->pair, ZMQ_DONTWAIT) >= 0 && zmq_msg_size(&head) == 6) {
        uint16_t event;
        uint32_t value;
        memcpy(&event, zmq_msg_data(&head), 2);
        memcpy(&value, (const char *)zmq_msg_data(&head) + 2, 4);
        on_event(c, event, (int)value);
    }
    zmq_msg_close(&ep);
    zmq_msg_close(&head);
}

static void *cap_main(void *arg)
{
    struct rs_zsock_cap *c = arg;
    while (!atomic_load(&c->stop)) {
        zmq_pollitem_t it = {.socket = c->pair, .events = ZMQ_POLLIN};
        int rc = zmq_poll(&it, 1, 100);
        if (rc < 0 && errno != EINTR) {
            rs_log_error("zsock %s: connection monitor: poll: %s; caps no longer enforced",
                         c->label, zmq_strerror(errno));
            break;
        }
        for (int i = 0; rc > 0 && i < 256 && !atomic_load(&c->stop); i++) {
            read_event(c);
            int ev = 0;
            size_t len = sizeof(ev);
            if (zmq_getsockopt(c->pair, ZMQ_EVENTS, &ev, &len) != 0 || !(ev & ZMQ_POLLIN))
                break;
        }
    }
    zmq_close(c->pair);
    return NULL;
}

static pthread_once_t nofile_once = PTHREAD_ONCE_INIT;

rs_err rs_zsock_cap_start(void *zctx, void *sock, const char *label, uint32_t max_total,
                          uint32_t max_per_peer, rs_zsock_cap **out)
{
    *out = NULL;
    pthread_once(&nofile_once, raise_nofile);
    struct rs_zsock_cap *c = rs_sys.calloc(1, sizeof(*c));
    if (c == NULL || max_total == 0 ||
        (c->conns = rs_sys.calloc(max_total, sizeof(*c->conns))) == NULL) {
        free(c);
        return max_total == 0 ? RS_EINVAL : RS_ENOMEM;
    }
    snprintf(c->label, sizeof(c->label), "%s", label);
    c->max_total = max_total;
    c->max_per_peer = max_per_peer ? max_per_peer : max_total;
    char ep[64];
    snprintf(ep, sizeof(ep), "inproc://rs-zsock-cap-%p", (void *)c);
    rs_err e = RS_OK;
    if (zmq_socket_monitor(sock, ep, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0 ||
        (c->pair = rs_sys.zmq_socket(zctx, ZMQ_PAIR)) == NULL ||
        rs_sys.zmq_connect(c->pair, ep) != 0) {
        rs_log_error("zsock %s: cannot start the connection monitor: %s", label,
                     zmq_strerror(errno));
        e = RS_EIO;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread takes no process signals */
    if (e == RS_OK && pthread_create(&c->thread, NULL, cap_main, c) != 0)
        e = RS_EIO;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != RS_OK) {
        zmq_socket_monitor(sock, NULL, 0);
        if (c->pair != NULL)
            zmq_close(c->pair);
        free(c->conns);
        free(c);
        return e;
    }
    *out = c;
    return RS_OK;
}

void rs_zsock_cap_stop(void *sock, rs_zsock_cap **cp)
{
    struct rs_zsock_cap *c = cp != NULL ? *cp : NULL;
    if (c == NULL)
        return;
    /* Monitoring ends first, while the thread still reads: libzmq sends events holding
     * the monitor's lock and blocks when nobody reads them, which would deadlock here. */
    zmq_socket_monitor(sock, NULL, 0);
    atomic_store(&c->stop, true);
    pthread_join(c->thread, NULL);
    free(c->conns);
    free(c);
    *cp = NULL;
}

void rs_zsock_cap_stats(const rs_zsock_cap *c, struct rs_zsock_cap_stats *out)
{
    out->accepted = atomic_load(&c->accepted);
    out->refused = atomic_load(&c->refused);
    out->open = atomic_load(&c->open_now);
}

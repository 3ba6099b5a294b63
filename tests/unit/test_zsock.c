/* SPDX-License-Identifier: MIT */
/*
 * ZeroMQ socket setup over real sockets: ROUTER/DEALER envelopes and size bounds,
 * ROUTER_MANDATORY errors, doorbells dropped (not queued) for an absent
 * peer, high-water marks bounding queues, heartbeats dropping a SIGSTOPped
 * peer, CURVE with the ZAP allowlist (known key in, unknown and revoked keys
 * refused), the transport policy, the runtime directory's permissions, and
 * key files. Nothing is mocked: real processes where a peer must die.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "ipc/rundir.h"
#include "ipc/wire_client.h"
#include "ipc/wire_server.h"
#include "ipc/failpoint_sys.h"
#include "ipc/zauth.h"
#include "ipc/zcert.h"
#include "ipc/zsock.h"
#include "tests/rs_test.h"

static void path_in_tmp(char *buf, size_t cap, const char *name)
{
    char unique[64];
    rs_test_unique_name(name, unique, sizeof(unique));
    snprintf(buf, cap, "%s/%s", rs_test_tmpdir(), unique);
}

static void ipc_endpoint(char *buf, size_t cap, const char *name)
{
    char path[200];
    path_in_tmp(path, sizeof(path), name);
    snprintf(buf, cap, "ipc://%s", path);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Sends until the connection is up (IMMEDIATE makes earlier sends fail), up to 5 s. */
static rs_err send_when_connected(rs_zsock *s, const void *body, size_t len)
{
    uint64_t deadline = rs_clock_ms() + 5000;
    rs_err e;
    while ((e = rs_zsock_send(s, body, len)) == RS_EAGAIN && rs_clock_ms() < deadline)
        sleep_ms(1);
    return e;
}

static struct rs_zsock_cfg cfg_of(enum rs_zsock_role role)
{
    struct rs_zsock_cfg c;
    rs_zsock_cfg_default(role, &c);
    return c;
}

static int test_router_dealer_round_trip(void)
{
    void *ctx = zmq_ctx_new();
    char ep[256];
    rs_zsock *router, *dealer;
    ipc_endpoint(ep, sizeof(ep), "rt");
    struct rs_zsock_cfg dc = cfg_of(RS_ZSOCK_DEALER);
    dc.routing_id = "client-1";
    dc.routing_id_len = 8;
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_ROUTER, ep, NULL, &router) == RS_OK);
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_DEALER, ep, &dc, &dealer) == RS_OK);
    struct rs_wire_client_msg req = {.type = RS_WIRE_T_GENERATE, .id = "g1"};
    struct rs_wire_buf buf;
    rs_wire_buf_init(&buf, RS_WIRE_CLIENT_MSG_MAX);
    rs_wire_generate_init(&req.u.gen);
    req.u.gen.has = RS_WIRE_GEN_PROMPT;
    req.u.gen.prompt = (struct rs_wire_str){"Hello", 5};
    RS_CHECK(rs_wire_client_encode(&req, &buf) == RS_OK);
    RS_CHECK(send_when_connected(dealer, buf.data, buf.len) == RS_OK);

    struct rs_zsock_peer peer;
    struct rs_wire_client_msg got;
    struct rs_wire_error err;
    zmq_msg_t body;
    zmq_msg_init(&body);
    RS_CHECK(rs_zsock_recv(router, &peer, &body, 5000) == RS_OK);
    RS_CHECK(peer.len == 8 && memcmp(peer.id, "client-1", 8) == 0);
    RS_CHECK(rs_zsock_peer_is_named(&peer));
    RS_CHECK(rs_wire_client_decode(zmq_msg_data(&body), zmq_msg_size(&body), &got, &err) == RS_OK);
    RS_CHECK(strcmp(got.id, "g1") == 0 && got.u.gen.prompt.len == 5);

    struct rs_wire_server_msg ack = {.type = RS_WIRE_T_ACK, .id = "g1"}, back;
    ack.u.ack = (struct rs_wire_ack){.prompt_tokens = 3, .handle = 7, .seed = 9};
    RS_CHECK(rs_wire_server_encode(&ack, &buf) == RS_OK);
    RS_CHECK(rs_zsock_router_send(router, &peer, buf.data, buf.len) == RS_OK);
    RS_CHECK(rs_zsock_recv(dealer, NULL, &body, 5000) == RS_OK);
    RS_CHECK(rs_wire_server_decode(zmq_msg_data(&body), zmq_msg_size(&body), &back, &err) == RS_OK);
    RS_CHECK(back.type == RS_WIRE_T_ACK && back.u.ack.prompt_tokens == 3);
    struct rs_zsock_stats st;
    rs_zsock_stats(router, &st);
    RS_CHECK(st.sent == 1 && st.received == 1 && st.dropped == 0 && st.rejected == 0);
    zmq_msg_close(&body);
    rs_wire_buf_fini(&buf);
    rs_zsock_destroy(&dealer);
    rs_zsock_destroy(&router);
    RS_CHECK(router == NULL);
    zmq_ctx_term(ctx);
    return 0;
}

static int test_router_unknown_peer_is_clear_error(void)
{
    void *ctx = zmq_ctx_new();
    char ep[256];
    rs_zsock *router;
    ipc_endpoint(ep, sizeof(ep), "mand");
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_ROUTER, ep, NULL, &router) == RS_OK);
    struct rs_zsock_peer nobody = {.id = "nobody", .len = 6};
    RS_CHECK(rs_zsock_router_send(router, &nobody, "x", 1) == RS_ENOENT);
    struct rs_zsock_stats st;
    rs_zsock_stats(router, &st);
    RS_CHECK(st.dropped == 1 && st.sent == 0);
    rs_zsock_destroy(&router);
    zmq_ctx_term(ctx);
    return 0;
}

static int test_router_bounds_body_and_keeps_serving(void)
{
    void *ctx = zmq_ctx_new();
    char ep[256], big[2000];
    rs_zsock *router, *dealer;
    ipc_endpoint(ep, sizeof(ep), "big");
    struct rs_zsock_cfg rc = cfg_of(RS_ZSOCK_ROUTER), dc = cfg_of(RS_ZSOCK_DEALER);
    rc.max_body = 1000;
    dc.routing_id = "c";
    dc.routing_id_len = 1;
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_ROUTER, ep, &rc, &router) == RS_OK);
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_DEALER, ep, &dc, &dealer) == RS_OK);
    memset(big, 'b', sizeof(big));
    RS_CHECK(send_when_connected(dealer, big, sizeof(big)) == RS_OK);
    RS_CHECK(rs_zsock_send(dealer, "small", 5) == RS_OK);
    struct rs_zsock_peer peer = {0};
    zmq_msg_t body;
    zmq_msg_init(&body);
    RS_CHECK(rs_zsock_recv(router, &peer, &body, 5000) == RS_ERANGE);
    RS_CHECK(peer.len == 1 && peer.id[0] == 'c'); /* the caller can still answer too_large */
    RS_CHECK(zmq_msg_size(&body) == 0);
    RS_CHECK(rs_zsock_recv(router, &peer, &body, 5000) == RS_OK);
    RS_CHECK(zmq_msg_size(&body) == 5 && memcmp(zmq_msg_data(&body), "small", 5) == 0);
    struct rs_zsock_stats st;
    rs_zsock_stats(router, &st);
    RS_CHECK(st.rejected == 1 && st.received == 1);
    zmq_msg_close(&body);
    rs_zsock_destroy(&dealer);
    rs_zsock_destroy(&router);
    zmq_ctx_term(ctx);
    return 0;
}

static int test_router_rejects_bad_envelopes(void)
{
    void *ctx = zmq_ctx_new();
    char ep[256];
    rs_zsock *router;
    ipc_endpoint(ep, sizeof(ep), "env");
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_ROUTER, ep, NULL, &router) == RS_OK);
    void *raw = zmq_socket(ctx, ZMQ_DEALER); /* a client that ignores the envelope rule */
    RS_CHECK(zmq_setsockopt(raw, ZMQ_ROUTING_ID, "raw", 3) == 0);
    RS_CHECK(zmq_connect(raw, ep) == 0);
    RS_CHECK(zmq_send(raw, "no-delimiter", 12, 0) == 12);
    RS_CHECK(zmq_send(raw, "", 0, ZMQ_SNDMORE) == 0);
    RS_CHECK(zmq_send(raw, "a", 1, ZMQ_SNDMORE) == 1);
    RS_CHECK(zmq_send(raw, "b", 1, 0) == 1);
    RS_CHECK(zmq_send(raw, "", 0, ZMQ_SNDMORE) == 0);
    RS_CHECK(zmq_send(raw, "good", 4, 0) == 4);
    struct rs_zsock_peer peer = {0};
    zmq_msg_t body;
    zmq_msg_init(&body);
    RS_CHECK(rs_zsock_recv(router, &peer, &body, 5000) == RS_EPROTO);
    RS_CHECK(peer.len == 3 && memcmp(peer.id, "raw", 3) == 0);
    RS_CHECK(rs_zsock_recv(router, &peer, &body, 5000) == RS_EPROTO); /* two body frames */
    RS_CHECK(rs_zsock_recv(router, &peer, &body, 5000) == RS_OK); /* stream still in step */
    RS_CHECK(zmq_msg_size(&body) == 4 && memcmp(zmq_msg_data(&body), "good", 4) == 0);
    RS_CHECK(rs_zsock_recv(router, &peer, &body, 0) == RS_EAGAIN);
    zmq_msg_close(&body);
    zmq_close(raw);
    rs_zsock_destroy(&router);
    zmq_ctx_term(ctx);
    return 0;
}

static int test_doorbell_to_absent_peer_dropped_not_queued(void)
{
    void *ctx = zmq_ctx_new();
    char ep[256];
    rs_zsock *push, *pull;
    ipc_endpoint(ep, sizeof(ep), "door");
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_PUSH, ep, NULL, &push) == RS_OK);
    RS_CHECK(rs_zsock_send(push, "early", 5) == RS_EAGAIN); /* nobody bound: dropped */
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_PULL, ep, NULL, &pull) == RS_OK);
    RS_CHECK(send_when_connected(push, "late", 4) == RS_OK);
    zmq_msg_t body;
    zmq_msg_init(&body);
    RS_CHECK(rs_zsock_recv(pull, NULL, &body, 5000) == RS_OK);
    RS_CHECK(zmq_msg_size(&body) == 4 && memcmp(zmq_msg_data(&body), "late", 4) == 0);
    RS_CHECK(rs_zsock_recv(pull, NULL, &body, 100) == RS_EAGAIN);
    struct rs_zsock_stats st;
    rs_zsock_stats(push, &st);
    RS_CHECK(st.sent == 1 && st.dropped >= 1);
    RS_CHECK(rs_zsock_send(pull, "x", 1) == RS_EINVAL); /* wrong role */
    zmq_msg_close(&body);
    rs_zsock_destroy(&push);
    rs_zsock_destroy(&pull);
    zmq_ctx_term(ctx);
    return 0;
}

static long proc_long(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = 0;
    if (f != NULL) {
        if (fscanf(f, "%ld", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

/* Most messages of msg_len that can sit between two ipc peers besides the zmq queues. */
static long kernel_slack(size_t msg_len)
{
    long bytes = proc_long("/proc/sys/net/core/wmem_default") +
                 proc_long("/proc/sys/net/core/rmem_default"); /* unix sockets keep the defaults */
    return bytes / (long)msg_len + 64; /* + the engines' batch buffers */
}

static int test_push_hwm_bounds_queue_and_loses_nothing_accepted(void)
{
    void *ctx = zmq_ctx_new();
    char ep[256], msg[1024] = {0};
    rs_zsock *push, *pull;
    ipc_endpoint(ep, sizeof(ep), "hwm");
    struct rs_zsock_cfg pc = cfg_of(RS_ZSOCK_PUSH), lc = cfg_of(RS_ZSOCK_PULL);
    pc.sndhwm = 50;
    lc.rcvhwm = 50;
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_PULL, ep, &lc, &pull) == RS_OK);
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_PUSH, ep, &pc, &push) == RS_OK);
    RS_CHECK(send_when_connected(push, msg, sizeof(msg)) == RS_OK);
    long accepted = 1, bound = 50 + 50 + kernel_slack(sizeof(msg));
    rs_err e = RS_OK;
    while (accepted <= bound + 1 && (e = rs_zsock_send(push, msg, sizeof(msg))) == RS_OK)
        accepted++;
    fprintf(stderr, "accepted %ld doorbells before the high-water mark (bound %ld)\n", accepted,
            bound);
    RS_CHECK(e == RS_EAGAIN && accepted <= bound);
    zmq_msg_t body;
    zmq_msg_init(&body);
    long received = 0;
    while (rs_zsock_recv(pull, NULL, &body, 1000) == RS_OK)
        received++;
    RS_CHECK_MSG(received == accepted, "received %ld of %ld", received, accepted);
    zmq_msg_close(&body);
    rs_zsock_destroy(&push);
    rs_zsock_destroy(&pull);
    zmq_ctx_term(ctx);
    return 0;
}

static int test_router_peer_at_hwm_is_efull(void)
{
    void *ctx = zmq_ctx_new();
    char ep[256], msg[1024] = {0};
    rs_zsock *router, *dealer;
    ipc_endpoint(ep, sizeof(ep), "rhwm");
    struct rs_zsock_cfg rc = cfg_of(RS_ZSOCK_ROUTER), dc = cfg_of(RS_ZSOCK_DEALER);
    rc.sndhwm = 20;
    dc.rcvhwm = 20;
    dc.routing_id = "slow";
    dc.routing_id_len = 4;
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_ROUTER, ep, &rc, &router) == RS_OK);
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_DEALER, ep, &dc, &dealer) == RS_OK);
    RS_CHECK(send_when_connected(dealer, "hi", 2) == RS_OK);
    struct rs_zsock_peer peer;
    zmq_msg_t body;
    zmq_msg_init(&body);
    RS_CHECK(rs_zsock_recv(router, &peer, &body, 5000) == RS_OK);
    long accepted = 0, bound = 20 + 20 + kernel_slack(sizeof(msg));
    rs_err e = RS_OK;
    while (accepted <= bound + 1 && (e = rs_zsock_router_send(router, &peer, msg, sizeof(msg))) == RS_OK)
        accepted++;
    RS_CHECK_MSG(e == RS_EFULL && accepted <= bound, "%ld sent, bound %ld", accepted, bound);
    long received = 0;
    while (rs_zsock_recv(dealer, NULL, &body, 1000) == RS_OK)
        received++;
    RS_CHECK_MSG(received == accepted, "received %ld of %ld", received, accepted);
    uint64_t deadline = rs_clock_ms() + 5000; /* room again once the reader's credit arrives */
    while ((e = rs_zsock_router_send(router, &peer, msg, sizeof(msg))) == RS_EFULL &&
           rs_clock_ms() < deadline)
        sleep_ms(1);
    RS_CHECK(e == RS_OK);
    zmq_msg_close(&body);
    rs_zsock_destroy(&dealer);
    rs_zsock_destroy(&router);
    zmq_ctx_term(ctx);
    return 0;
}

static int write_text(const char *path, const char *text)
{
    char tmp[512];
    snprintf(tmp, sizeof(tmp), "%s.new", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return -1;
    fputs(text, f);
    fclose(f);
    return rename(tmp, path); /* atomic replace, as an operator's editor or deploy would */
}

/* Waits until the ZAP handler has refused more than `before` handshakes (up to 5 s). */
static bool wait_refusals(rs_zauth *za, uint64_t before)
{
    struct rs_zauth_stats st;
    uint64_t deadline = rs_clock_ms() + 5000;
    do {
        rs_zauth_stats(za, &st);
        if (st.refused > before)
            return true;
        sleep_ms(5);
    } while (rs_clock_ms() < deadline);
    return false;
}

/* A CURVE client with key pair `me` sends "hello" (as far as it can) to the server. */
static rs_zsock *curve_client(void *ctx, const char *ep, const struct rs_zcert *me,
                              const struct rs_zcert *server)
{
    struct rs_zsock_cfg c = cfg_of(RS_ZSOCK_DEALER);
    rs_zsock *s = NULL;
    c.curve = me;
    c.curve_server_public = server->public_z85;
    if (rs_zsock_create(ctx, RS_ZSOCK_DEALER, ep, &c, &s) != RS_OK)
        return NULL;
    return s;
}

static int test_curve_allowlist_admits_known_refuses_unknown_and_revoked(void)
{
    void *ctx = zmq_ctx_new();
    struct rs_zcert server, good, bad;
    char list[256], text[256];
    RS_CHECK(rs_zcert_generate(&server) == RS_OK && rs_zcert_generate(&good) == RS_OK);
    RS_CHECK(rs_zcert_generate(&bad) == RS_OK);
    path_in_tmp(list, sizeof(list), "allow");
    snprintf(text, sizeof(text), "# clients\n%s   # the good one\n\npublic = %s\n",
             good.public_z85, server.public_z85); /* bare and .pub-file forms */
    RS_CHECK(write_text(list, text) == 0);
    rs_zauth *za;
    rs_zsock *router, *intruder, *client, *revoked;
    RS_CHECK(rs_zauth_create(ctx, list, &za) == RS_OK);
    struct rs_zsock_cfg rc = cfg_of(RS_ZSOCK_ROUTER);
    rc.curve = &server;
    rc.zauth = za;
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_ROUTER, "tcp://127.0.0.1:*", &rc, &router) == RS_OK);
    const char *ep = rs_zsock_endpoint(router);
    RS_CHECK(strncmp(ep, "tcp://127.0.0.1:", 16) == 0);

    RS_CHECK((intruder = curve_client(ctx, ep, &bad, &server)) != NULL);
    RS_CHECK(wait_refusals(za, 0));
    RS_CHECK(rs_zsock_send(intruder, "let me in", 9) == RS_EAGAIN); /* never connected */
    zmq_msg_t body;
    zmq_msg_init(&body);
    struct rs_zsock_peer peer;
    RS_CHECK(rs_zsock_recv(router, &peer, &body, 300) == RS_EAGAIN);

    RS_CHECK((client = curve_client(ctx, ep, &good, &server)) != NULL);
    RS_CHECK(send_when_connected(client, "hello", 5) == RS_OK);
    RS_CHECK(rs_zsock_recv(router, &peer, &body, 5000) == RS_OK);
    RS_CHECK(zmq_msg_size(&body) == 5 && memcmp(zmq_msg_data(&body), "hello", 5) == 0);
    const char *user = zmq_msg_gets(&body, "User-Id");
    RS_CHECK(user != NULL && strcmp(user, good.public_z85) == 0);

    /* Revoke: the file changes, the next handshake with that key is refused. */
    struct rs_zauth_stats st;
    rs_zauth_stats(za, &st);
    RS_CHECK(write_text(list, "# nobody\n") == 0);
    RS_CHECK((revoked = curve_client(ctx, ep, &good, &server)) != NULL);
    RS_CHECK(wait_refusals(za, st.refused));
    RS_CHECK(rs_zsock_recv(router, &peer, &body, 300) == RS_EAGAIN);
    rs_zauth_stats(za, &st);
    RS_CHECK(st.allowed == 1 && st.reloads >= 2);
    zmq_msg_close(&body);
    rs_zsock_destroy(&revoked);
    rs_zsock_destroy(&client);
    rs_zsock_destroy(&intruder);
    rs_zsock_destroy(&router);
    rs_zauth_destroy(&za);
    RS_CHECK(za == NULL);
    zmq_ctx_term(ctx);
    return 0;
}

static int test_transport_policy(void)
{
    void *ctx = zmq_ctx_new();
    struct rs_zcert server;
    rs_zsock *s = NULL;
    char ep[256], list[256];
    RS_CHECK(rs_zcert_generate(&server) == RS_OK);
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_ROUTER, "tcp://127.0.0.1:*", NULL, &s) == RS_EINVAL);
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_PUSH, "tcp://127.0.0.1:5555", NULL, &s) == RS_EINVAL);
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_PULL, "udp://x", NULL, &s) == RS_EINVAL);
    struct rs_zsock_cfg rc = cfg_of(RS_ZSOCK_ROUTER);
    rc.curve = &server; /* CURVE without a ZAP handler would accept any key */
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_ROUTER, "tcp://127.0.0.1:*", &rc, &s) == RS_EINVAL);
    struct rs_zsock_cfg dc = cfg_of(RS_ZSOCK_DEALER);
    dc.curve = &server; /* no server key */
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_DEALER, "tcp://127.0.0.1:9", &dc, &s) == RS_EINVAL);
    dc = cfg_of(RS_ZSOCK_DEALER);
    dc.routing_id = "\0auto";
    dc.routing_id_len = 5;
    ipc_endpoint(ep, sizeof(ep), "pol");
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_DEALER, ep, &dc, &s) == RS_EINVAL);
    char longep[300] = "ipc:///tmp/";
    memset(longep + 11, 'x', 110);
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_PULL, longep, NULL, &s) == RS_ERANGE);
    RS_CHECK(s == NULL);
    /* A second ZAP handler on one context is refused; an absent allowlist too. */
    rs_zauth *za, *za2;
    path_in_tmp(list, sizeof(list), "list");
    RS_CHECK(rs_zauth_create(ctx, list, &za) == RS_ENOENT);
    RS_CHECK(write_text(list, "") == 0);
    RS_CHECK(rs_zauth_create(ctx, list, &za) == RS_OK);
    RS_CHECK(rs_zauth_create(ctx, list, &za2) == RS_EEXIST && za2 == NULL);
    RS_CHECK(write_text(list, "not-a-key\n") == 0);
    rs_zauth_destroy(&za);
    RS_CHECK(rs_zauth_create(ctx, list, &za) == RS_EINVAL);
    zmq_ctx_term(ctx);
    return 0;
}

static int test_live_ipc_endpoint_not_taken_over(void)
{
    void *ctx = zmq_ctx_new();
    char ep[256];
    rs_zsock *a, *b = NULL;
    ipc_endpoint(ep, sizeof(ep), "live");
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_PULL, ep, NULL, &a) == RS_OK);
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_PULL, ep, NULL, &b) == RS_EEXIST);
    rs_zsock_destroy(&a);
    /* A stale socket file (its owner died without unlinking) is replaced. */
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    strcpy(sa.sun_path, ep + 6);
    unlink(sa.sun_path); /* libzmq removes its file asynchronously, after close returns */
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    RS_CHECK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    close(fd);
    RS_CHECK(access(ep + 6, F_OK) == 0);
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_PULL, ep, NULL, &b) == RS_OK);
    struct stat st;
    RS_CHECK(stat(ep + 6, &st) == 0 && (st.st_mode & 0777) == 0660);
    rs_zsock_destroy(&b);
    zmq_ctx_term(ctx);
    return 0;
}

/* Child: connects as "sleepy", says hello, waits for the answer (so nothing of its own is
 * still queued), then stops itself and never answers a PING. */
static void sleepy_client(const char *ep)
{
    void *ctx = zmq_ctx_new();
    struct rs_zsock_cfg c = cfg_of(RS_ZSOCK_DEALER);
    rs_zsock *d;
    c.routing_id = "sleepy";
    c.routing_id_len = 6;
    if (rs_zsock_create(ctx, RS_ZSOCK_DEALER, ep, &c, &d) != RS_OK ||
        send_when_connected(d, "hello", 5) != RS_OK)
        _exit(1);
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (rs_zsock_recv(d, NULL, &m, 5000) != RS_OK)
        _exit(1);
    raise(SIGSTOP);
    _exit(0);
}

static int test_heartbeat_drops_stopped_peer(void)
{
    char ep[256];
    rs_zsock *router;
    ipc_endpoint(ep, sizeof(ep), "hb");
    /* Fork before this process has threads: a child forked while an I/O thread holds an
     * allocator lock inherits it held, and its own I/O thread then never connects. The
     * child's connect retries until the bind below. */
    pid_t pid = fork();
    RS_CHECK(pid >= 0);
    if (pid == 0)
        sleepy_client(ep);
    void *ctx = zmq_ctx_new();
    struct rs_zsock_cfg rc = cfg_of(RS_ZSOCK_ROUTER);
    /* Generous against a loaded CI host: a live but descheduled peer must not miss its pings. */
    rc.heartbeat_ivl_ms = 250;
    rc.heartbeat_timeout_ms = 1500;
    /* No monitor of our own: a bound ROUTER's one monitor slot is its connection cap's. */
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_ROUTER, ep, &rc, &router) == RS_OK);
    struct rs_zsock_peer peer;
    zmq_msg_t body;
    zmq_msg_init(&body);
    int status = 0;
    bool said_hello = rs_zsock_recv(router, &peer, &body, 5000) == RS_OK &&
                      rs_zsock_router_send(router, &peer, "ok", 2) == RS_OK;
    bool stopped = waitpid(pid, &status, WUNTRACED) == pid && WIFSTOPPED(status);
    /* The peer is frozen with its connection open: only the heartbeat can notice, within
     * its 1.5 s timeout; the ROUTER then forgets the routing id (sends fail RS_ENOENT). Up to
     * 20 s for a loaded host. */
    rs_err after = RS_OK;
    for (int i = 0; stopped && i < 1000 && after != RS_ENOENT; i++) {
        usleep(20000);
        after = rs_zsock_router_send(router, &peer, "x", 1);
    }
    bool dropped = after == RS_ENOENT;
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    RS_CHECK_MSG(said_hello && stopped && dropped, "%d %d %d", said_hello, stopped, dropped);
    RS_CHECK(after == RS_ENOENT);
    zmq_msg_close(&body);
    rs_zsock_destroy(&router);
    zmq_ctx_term(ctx);
    return 0;
}

static int test_rundir_private_and_refuses_loose_modes(void)
{
    char dir[256], link[300];
    struct stat st;
    path_in_tmp(dir, sizeof(dir), "run");
    RS_CHECK(rs_rundir_prepare(dir, NULL) == RS_OK);
    RS_CHECK(stat(dir, &st) == 0 && (st.st_mode & 07777) == 0700 && st.st_uid == geteuid());
    RS_CHECK(rs_rundir_prepare(dir, NULL) == RS_OK); /* an existing good one is fine */
    RS_CHECK(chmod(dir, 0755) == 0);
    RS_CHECK(rs_rundir_prepare(dir, NULL) == RS_EINVAL);
    RS_CHECK(chmod(dir, 0700) == 0);
    snprintf(link, sizeof(link), "%s-link", dir);
    RS_CHECK(symlink(dir, link) == 0);
    RS_CHECK(rs_rundir_prepare(link, NULL) == RS_EINVAL);
    char missing[300];
    snprintf(missing, sizeof(missing), "%s/no/such", dir);
    RS_CHECK(rs_rundir_prepare(missing, NULL) == RS_ENOENT);
    RS_CHECK(rs_rundir_prepare(dir, "no-such-group-rs") == RS_ENOENT);
    /* Owned by someone else: as root make it so; otherwise /tmp already is. */
    if (geteuid() == 0) {
        RS_CHECK(chown(dir, 65534, 65534) == 0);
        RS_CHECK(rs_rundir_prepare(dir, NULL) == RS_EINVAL);
    } else {
        RS_CHECK(rs_rundir_prepare("/tmp", NULL) == RS_EINVAL);
    }
    return 0;
}

static int test_rundir_group_access(void)
{
    char dir[256], buf[4096];
    struct group gr, *res = NULL;
    struct stat st;
    RS_CHECK(getgrgid_r(getegid(), &gr, buf, sizeof(buf), &res) == 0 && res != NULL);
    path_in_tmp(dir, sizeof(dir), "grp");
    RS_CHECK(rs_rundir_prepare(dir, gr.gr_name) == RS_OK);
    RS_CHECK(stat(dir, &st) == 0 && (st.st_mode & 07777) == 0750 && st.st_gid == getegid());
    RS_CHECK(rs_rundir_prepare(dir, NULL) == RS_EINVAL); /* group bits without a group */
    RS_CHECK(chmod(dir, 0770) == 0);
    RS_CHECK(rs_rundir_prepare(dir, gr.gr_name) == RS_EINVAL); /* group may not write */
    return 0;
}

static int test_endpoint_path_limit(void)
{
    char dir[128], out[256];
    RS_CHECK(rs_rundir_endpoint("/run/ringserve", "tokenizerd", out, sizeof(out)) == RS_OK);
    RS_CHECK(strcmp(out, "ipc:///run/ringserve/tokenizerd") == 0);
    memset(dir, 'd', 96);
    dir[0] = '/';
    dir[96] = '\0';
    RS_CHECK(rs_rundir_endpoint(dir, "0123456789", out, sizeof(out)) == RS_OK); /* 107 bytes */
    RS_CHECK(rs_rundir_endpoint(dir, "0123456789a", out, sizeof(out)) == RS_ERANGE);
    RS_CHECK(rs_rundir_endpoint(dir, "x", out, 16) == RS_ERANGE);
    RS_CHECK(rs_rundir_endpoint("/run", "a/b", out, sizeof(out)) == RS_EINVAL);
    return 0;
}

/* errno of a connect to the unix socket at path by uid/gid 65534 (0 = connected). */
static int connect_as_nobody(const char *path)
{
    pid_t pid = fork();
    if (pid == 0) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        strcpy(sa.sun_path, path);
        if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)
            _exit(255);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        _exit(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? 0 : errno);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
}

static int test_ipc_socket_shuts_out_other_users(void)
{
    void *ctx = zmq_ctx_new();
    char dir[256], ep[256], unique[64];
    rs_zsock *router;
    struct stat st;
    rs_test_unique_name("/tmp/rs-priv", unique, sizeof(unique)); /* under /tmp: others may pass */
    snprintf(dir, sizeof(dir), "%s", unique);
    RS_CHECK(rs_rundir_prepare(dir, NULL) == RS_OK);
    RS_CHECK(rs_rundir_endpoint(dir, "tokenizerd", ep, sizeof(ep)) == RS_OK);
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_ROUTER, ep, NULL, &router) == RS_OK);
    RS_CHECK(stat(ep + 6, &st) == 0 && S_ISSOCK(st.st_mode) && (st.st_mode & 0777) == 0660);
    int denied = 0, opened = 0;
    if (geteuid() == 0) { /* a real other user, when we can become one */
        denied = connect_as_nobody(ep + 6);
        /* Control: with the gates opened the same child gets in, so the denial was theirs. */
        RS_CHECK(chmod(dir, 0755) == 0 && chmod(ep + 6, 0666) == 0);
        opened = connect_as_nobody(ep + 6);
    } else {
        denied = EACCES; /* we are the only user we can be: the mode checks above must do */
    }
    rs_zsock_destroy(&router);
    zmq_ctx_term(ctx);
    unlink(ep + 6);
    rmdir(dir);
    RS_CHECK_MSG(denied == EACCES, "uid 65534 reached a socket in a 0700 directory: %d", denied);
    RS_CHECK_MSG(opened == 0, "control connect failed: %d", opened);
    return 0;
}

static int test_key_files(void)
{
    struct rs_zcert c, back;
    char sec[256], pub[256], bad[256], text[512];
    RS_CHECK(rs_zcert_generate(&c) == RS_OK);
    path_in_tmp(sec, sizeof(sec), "key");
    path_in_tmp(pub, sizeof(pub), "key.pub");
    RS_CHECK(rs_zcert_save(&c, sec, pub) == RS_OK);
    RS_CHECK(rs_zcert_save(&c, sec, NULL) == RS_EEXIST); /* never overwritten */
    struct stat st;
    RS_CHECK(stat(sec, &st) == 0 && (st.st_mode & 0777) == 0600);
    RS_CHECK(rs_zcert_load(sec, &back) == RS_OK);
    RS_CHECK(strcmp(back.public_z85, c.public_z85) == 0 && strcmp(back.secret_z85, c.secret_z85) == 0);
    RS_CHECK(rs_zcert_load(pub, &back) == RS_OK);
    RS_CHECK(strcmp(back.public_z85, c.public_z85) == 0 && back.secret_z85[0] == '\0');
    RS_CHECK(chmod(sec, 0644) == 0);
    RS_CHECK(rs_zcert_load(sec, &back) == RS_EINVAL); /* a readable secret is refused */
    struct rs_zcert other;
    RS_CHECK(rs_zcert_generate(&other) == RS_OK);
    path_in_tmp(bad, sizeof(bad), "mismatch");
    snprintf(text, sizeof(text), "public = %s\nsecret = %s\n", c.public_z85, other.secret_z85);
    int fd = open(bad, O_WRONLY | O_CREAT | O_EXCL, 0600);
    RS_CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    RS_CHECK(rs_zcert_load(bad, &back) == RS_EINVAL && back.public_z85[0] == '\0');
    RS_CHECK(rs_zcert_load("/nonexistent/key", &back) == RS_ENOENT);
    RS_CHECK(rs_zcert_key_valid(c.public_z85, RS_ZCERT_Z85_LEN));
    RS_CHECK(!rs_zcert_key_valid(c.public_z85, RS_ZCERT_Z85_LEN - 1));
    RS_CHECK(!rs_zcert_key_valid("0000000000000000000000000000000000000 \"~", RS_ZCERT_Z85_LEN));
    return 0;
}


/* Sends `body` until the DEALER's handshake completes or about one second passed. */
static rs_err send_within_a_second(rs_zsock *s, const void *body, size_t len)
{
    uint64_t deadline = rs_clock_ms() + 1000;
    rs_err e;
    while ((e = rs_zsock_send(s, body, len)) == RS_EAGAIN && rs_clock_ms() < deadline)
        sleep_ms(5);
    return e;
}

/* With its ZAP handler gone, a CURVE server lets nobody in, not even a listed key. */
static int test_curve_fails_closed_when_the_zap_handler_is_gone(void)
{
    void *ctx = zmq_ctx_new();
    struct rs_zcert server, good;
    char list[256], text[256];
    RS_CHECK(rs_zcert_generate(&server) == RS_OK && rs_zcert_generate(&good) == RS_OK);
    path_in_tmp(list, sizeof(list), "allow-gone");
    snprintf(text, sizeof(text), "%s\n", good.public_z85);
    RS_CHECK(write_text(list, text) == 0);
    rs_zauth *za;
    rs_zsock *router, *client, *unlisted;
    RS_CHECK(rs_zauth_create(ctx, list, &za) == RS_OK);
    struct rs_zsock_cfg rc = cfg_of(RS_ZSOCK_ROUTER);
    rc.curve = &server;
    rc.zauth = za;
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_ROUTER, "tcp://127.0.0.1:*", &rc, &router) == RS_OK);
    rs_zauth_destroy(&za); /* what a crashed handler thread leaves */
    const char *ep = rs_zsock_endpoint(router);
    RS_CHECK((client = curve_client(ctx, ep, &good, &server)) != NULL);
    struct rs_zcert other;
    RS_CHECK(rs_zcert_generate(&other) == RS_OK);
    RS_CHECK((unlisted = curve_client(ctx, ep, &other, &server)) != NULL);
    RS_CHECK(send_within_a_second(client, "listed", 6) == RS_EAGAIN);
    RS_CHECK(send_within_a_second(unlisted, "unlisted", 8) == RS_EAGAIN);
    zmq_msg_t body;
    zmq_msg_init(&body);
    struct rs_zsock_peer peer;
    RS_CHECK(rs_zsock_recv(router, &peer, &body, 300) == RS_EAGAIN);
    zmq_msg_close(&body);
    rs_zsock_destroy(&unlisted);
    rs_zsock_destroy(&client);
    rs_zsock_destroy(&router);
    zmq_ctx_term(ctx);
    unlink(list);
    return 0;
}

/* The ZAP thread failing (its poll made to fail) stops the process with SIGTERM. */
static int test_dead_zap_handler_stops_the_process(void)
{
    char list[256];
    path_in_tmp(list, sizeof(list), "allow-dead");
    RS_CHECK(write_text(list, "") == 0);
    pid_t pid = fork();
    if (pid == 0) {
        void *ctx = zmq_ctx_new();
        rs_zauth *za;
        if (rs_sys_fail_set("zmq_poll:1") != RS_OK || rs_zauth_create(ctx, list, &za) != RS_OK)
            _exit(3);
        for (int i = 0; i < 500; i++) /* the SIGTERM ends this wait */
            sleep_ms(10);
        _exit(rs_zauth_alive(za) ? 4 : 5);
    }
    int status;
    RS_CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    RS_CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM, "child status 0x%x", status);
    unlink(list);
    return 0;
}


/* Waits (up to 5 s) until the socket has closed at least `refused` connections at a cap. */
static bool wait_conns_refused(rs_zsock *z, uint64_t refused)
{
    uint64_t deadline = rs_clock_ms() + 5000;
    struct rs_zsock_stats st;
    do {
        rs_zsock_stats(z, &st);
        if (st.conns_refused >= refused)
            return true;
        sleep_ms(5);
    } while (rs_clock_ms() < deadline);
    return false;
}

/* One peer (this uid) gets max_conns_per_peer connections; the rest are closed, and a
 * well-behaved DEALER is served again once the hog lets go. */
static int test_connections_beyond_the_peer_cap_are_closed(void)
{
    void *ctx = zmq_ctx_new();
    char ep[256];
    ipc_endpoint(ep, sizeof(ep), "cap");
    struct rs_zsock_cfg rc = cfg_of(RS_ZSOCK_ROUTER);
    rc.max_conns = 8;
    rc.max_conns_per_peer = 3;
    rs_zsock *router, *dealer;
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_ROUTER, ep, &rc, &router) == RS_OK);
    int fds[10];
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    RS_CHECK(strlen(ep + 6) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, ep + 6, strlen(ep + 6) + 1);
    for (int i = 0; i < 10; i++) {
        fds[i] = socket(AF_UNIX, SOCK_STREAM, 0);
        RS_CHECK(fds[i] >= 0 && connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)) == 0);
    }
    RS_CHECK(wait_conns_refused(router, 7));
    struct rs_zsock_stats st;
    rs_zsock_stats(router, &st);
    RS_CHECK_MSG(st.conns_open == 3 && st.conns_refused == 7, "open %u refused %llu",
                 st.conns_open, (unsigned long long)st.conns_refused);
    for (int i = 0; i < 10; i++)
        close(fds[i]);
    RS_CHECK(rs_zsock_create(ctx, RS_ZSOCK_DEALER, ep, NULL, &dealer) == RS_OK);
    RS_CHECK(send_when_connected(dealer, "hi", 2) == RS_OK);
    zmq_msg_t body;
    zmq_msg_init(&body);
    struct rs_zsock_peer peer;
    RS_CHECK(rs_zsock_recv(router, &peer, &body, 5000) == RS_OK && zmq_msg_size(&body) == 2);
    zmq_msg_close(&body);
    rs_zsock_destroy(&dealer);
    rs_zsock_destroy(&router);
    zmq_ctx_term(ctx);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_connections_beyond_the_peer_cap_are_closed),
    RS_TEST(test_curve_fails_closed_when_the_zap_handler_is_gone),
    RS_TEST(test_dead_zap_handler_stops_the_process),
    RS_TEST(test_router_dealer_round_trip),
    RS_TEST(test_router_unknown_peer_is_clear_error),
    RS_TEST(test_router_bounds_body_and_keeps_serving),
    RS_TEST(test_router_rejects_bad_envelopes),
    RS_TEST(test_doorbell_to_absent_peer_dropped_not_queued),
    RS_TEST(test_push_hwm_bounds_queue_and_loses_nothing_accepted),
    RS_TEST(test_router_peer_at_hwm_is_efull),
    RS_TEST(test_curve_allowlist_admits_known_refuses_unknown_and_revoked),
    RS_TEST(test_transport_policy),
    RS_TEST(test_live_ipc_endpoint_not_taken_over),
    RS_TEST(test_heartbeat_drops_stopped_peer),
    RS_TEST(test_rundir_private_and_refuses_loose_modes),
    RS_TEST(test_rundir_group_access),
    RS_TEST(test_endpoint_path_limit),
    RS_TEST(test_ipc_socket_shuts_out_other_users),
    RS_TEST(test_key_files),
};

RS_TEST_MAIN(cases)

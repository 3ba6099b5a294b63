/* SPDX-License-Identifier: MIT */
/*
 * Fault injection through the call table (ipc/failpoint_sys.h): every call
 * of every slot made in start-up (all four stages opening the segment, a
 * ROUTER binding and a DEALER connecting over ipc://) and in the serving loop
 * (send, poll, receive) is made to fail in turn, each in a forked child, a
 * real separate process. Each must end in a clear error or be tolerated
 * (a refused mlock is a warning), never a crash; the child then closes
 * everything and must hold as many descriptors as before and leave no
 * segment (under ASan, LeakSanitizer also checks memory at its exit).
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/failpoint_sys.h"
#include "ipc/pipeline.h"
#include "ipc/zsock.h"
#include "tests/pipeline_harness.h"
#include "tests/rs_test.h"

/* Calls of the armed slot when a scenario disarmed it itself (ULONG_MAX: it did not). */
static unsigned long calls_at_disarm = ULONG_MAX;

/* Set by the serving scenario when its final message, sent after the fault, was lost. */
static int lost_final;

/* Child exit codes. */
enum { NOT_REACHED = 0, TOLERATED = 1, CLEAN_ERROR = 2, LEAKED = 9, LOST = 10 };

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    if (d != NULL)
        closedir(d);
    return n;
}

static int make_config(struct rs_pipe_config *c)
{
    char path[480], err[256];
    if (rs_test_refdata("stories260K.gguf", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    rs_pipe_config_default(c);
    rs_test_unique_name("fault", c->instance, sizeof(c->instance));
    snprintf(c->model_path, sizeof(c->model_path), "%s", path);
    c->max_requests = 8;
    c->n_kv_blocks = 32;
    c->n_ctx = 128;
    return rs_harness_config_resolve(c, err, sizeof(err)) == RS_OK ? 0 : 1;
}

/* Start-up: every stage opens the segment; a ROUTER binds, a DEALER connects, one round trip. */
static rs_err start_up(const struct rs_pipe_config *c, const char *ep, const char *spec)
{
    if (rs_sys_fail_set(spec) != RS_OK)
        return RS_EINVAL;
    struct rs_pipe *p[RS_PIPE_N_STAGES] = {0};
    char err[256] = "";
    rs_err e = RS_OK;
    for (int s = 0; e == RS_OK && s < RS_PIPE_N_STAGES; s++)
        if ((e = rs_pipe_open(c, (enum rs_pipe_stage)s, &p[s], err, sizeof(err))) != RS_OK)
            fprintf(stderr, "stage %d open: %s: %s\n", s, rs_strerror(e), err);
    void *ctx = zmq_ctx_new();
    rs_zsock *router = NULL, *dealer = NULL;
    if (e == RS_OK)
        e = rs_zsock_create(ctx, RS_ZSOCK_ROUTER, ep, NULL, &router);
    if (e == RS_OK)
        e = rs_zsock_create(ctx, RS_ZSOCK_DEALER, ep, NULL, &dealer);
    for (int i = 0; e == RS_OK && i < 2000 && (e = rs_zsock_send(dealer, "hi", 2)) == RS_EAGAIN;
         i++)
        e = (usleep(1000), RS_OK);
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (e == RS_OK)
        e = rs_zsock_recv(router, NULL, &m, 5000);
    zmq_msg_close(&m);
    rs_zsock_destroy(&dealer);
    rs_zsock_destroy(&router);
    zmq_ctx_term(ctx);
    for (int s = 0; s < RS_PIPE_N_STAGES; s++)
        rs_pipe_close(&p[s]);
    return e;
}

/* Runs `fn` in a child with call `name` failing at its n-th call; returns the child's code. */
typedef rs_err (*scenario)(const struct rs_pipe_config *c, const char *ep, const char *spec);

static int child_run(const char *name, unsigned long n, scenario fn,
                     const struct rs_pipe_config *c, const char *ep)
{
    pid_t pid = fork();
    if (pid == 0) {
        int before = open_fds();
        char spec[64];
        snprintf(spec, sizeof(spec), "%s:%lu", name, n);
        rs_err e = fn(c, ep, spec);
        unsigned long calls = calls_at_disarm != ULONG_MAX ? calls_at_disarm : rs_sys_fail_calls();
        int fired = calls >= n;
        rs_sys_fail_set(NULL);
        if (c->model_path[0] != 0)
            rs_pipe_unlink(c->instance);
        unlink(ep + 6);
        if (open_fds() != before)
            exit(LEAKED);
        if (lost_final)
            exit(LOST);
        exit(!fired ? (e == RS_OK ? NOT_REACHED : 101) : e == RS_OK ? TOLERATED : CLEAN_ERROR);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 200 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* Fails every call of every slot made by `fn`, one per child; checks each outcome. */
static int fail_each_call(scenario fn,
                          const struct rs_pipe_config *c, const char *ep, int *failed_sites)
{
    for (const char *const *name = rs_sys_call_names; *name != NULL; name++) {
        for (unsigned long n = 1;; n++) {
            int rc = child_run(*name, n, fn, c, ep);
            RS_CHECK_MSG(rc == NOT_REACHED || rc == TOLERATED || rc == CLEAN_ERROR,
                         "%s failing at call %lu: child ended with %d (%s)", *name, n, rc,
                         rc == LEAKED ? "descriptors leaked"
                         : rc == LOST ? "later traffic lost"
                         : rc >= 200  ? "killed by a signal"
                                      : "wrong outcome");
            if (rc == NOT_REACHED)
                break;
            *failed_sites += 1;
            RS_CHECK_MSG(n < 400, "%s: more than 400 calls", *name);
        }
    }
    return 0;
}

static int test_every_startup_call_failure_is_a_clear_error(void)
{
    struct rs_pipe_config c;
    int rc = make_config(&c);
    if (rc != 0)
        return rc;
    char ep[128];
    snprintf(ep, sizeof(ep), "ipc:///tmp/rs-fault-%d.sock", (int)getpid());
    int sites = 0;
    RS_CHECK(fail_each_call(start_up, &c, ep, &sites) == 0);
    RS_CHECK_MSG(sites > 40, "only %d failing calls exercised", sites);
    RS_CHECK(start_up(&c, ep, NULL) == RS_OK); /* and with nothing armed it all works */
    rs_pipe_unlink(c.instance);
    unlink(ep + 6);
    return 0;
}

/* Sends `msg` (retrying while the DEALER is not yet connected); RS_OK or the error. */
static rs_err send_retry(rs_zsock *d, const char *msg)
{
    rs_err e;
    for (int t = 0; t < 5000 && (e = rs_zsock_send(d, msg, strlen(msg))) == RS_EAGAIN; t++)
        usleep(1000);
    return e;
}

/* Receives until `want` arrives intact (other messages and errors skipped); 1 when it did. */
static int recv_until(rs_zsock *r, const char *want, int tries, rs_err *first)
{
    for (int i = 0; i < tries; i++) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        rs_err e = rs_zsock_recv(r, NULL, &m, 100);
        int hit = e == RS_OK && zmq_msg_size(&m) == strlen(want) &&
                  memcmp(zmq_msg_data(&m), want, strlen(want)) == 0;
        zmq_msg_close(&m);
        if (e != RS_OK && e != RS_EAGAIN && *first == RS_OK)
            *first = e;
        if (hit)
            return 1;
    }
    return 0;
}

/*
 * Serving: set up disarmed, then arm and make three round trips; whichever call fails, the
 * error is returned where it happens and a final message sent afterwards still arrives.
 */
static rs_err serve_loop(const struct rs_pipe_config *c, const char *ep, const char *spec)
{
    (void)c;
    void *ctx = zmq_ctx_new();
    rs_zsock *router = NULL, *dealer = NULL;
    rs_err first = rs_zsock_create(ctx, RS_ZSOCK_ROUTER, ep, NULL, &router);
    if (first == RS_OK)
        first = rs_zsock_create(ctx, RS_ZSOCK_DEALER, ep, NULL, &dealer);
    rs_err ignored = RS_OK;
    if (first == RS_OK && !(send_retry(dealer, "warm-up") == RS_OK &&
                            recv_until(router, "warm-up", 50, &ignored)))
        first = RS_EIO;
    int last = 0;
    if (first == RS_OK && rs_sys_fail_set(spec) == RS_OK) {
        for (int i = 0; i < 3; i++) {
            char msg[16];
            snprintf(msg, sizeof(msg), "msg-%d", i);
            rs_err e = send_retry(dealer, msg);
            if (e != RS_OK && first == RS_OK)
                first = e;
            recv_until(router, msg, e == RS_OK ? 3 : 1, &first);
        }
        calls_at_disarm = rs_sys_fail_calls();
        rs_sys_fail_set(NULL);
        last = send_retry(dealer, "last") == RS_OK && recv_until(router, "last", 50, &first);
    }
    rs_zsock_destroy(&dealer);
    rs_zsock_destroy(&router);
    zmq_ctx_term(ctx);
    lost_final = !last;
    return first;
}

static int test_every_serving_call_failure_is_an_error_then_serving_goes_on(void)
{
    struct rs_pipe_config c;
    memset(&c, 0, sizeof(c));
    snprintf(c.instance, sizeof(c.instance), "unused");
    char ep[128];
    snprintf(ep, sizeof(ep), "ipc:///tmp/rs-fault-serve-%d.sock", (int)getpid());
    int sites = 0;
    RS_CHECK(fail_each_call(serve_loop, &c, ep, &sites) == 0);
    RS_CHECK_MSG(sites >= 10, "only %d failing calls exercised", sites);
    return 0;
}

/* A spec naming no call of the table, or a bad count, is refused; "" disarms. */
static int test_bad_specs_are_refused(void)
{
    RS_CHECK(rs_sys_fail_set("nosuch:1") == RS_EINVAL);
    RS_CHECK(rs_sys_fail_set("mmap:0") == RS_EINVAL);
    RS_CHECK(rs_sys_fail_set("mmap") == RS_EINVAL);
    RS_CHECK(rs_sys_fail_set("mmap:2:x") == RS_EINVAL);
    RS_CHECK(rs_sys_fail_set("malloc:1:12") == RS_OK);
    errno = 0;
    RS_CHECK(rs_sys.malloc(8) == NULL && errno == 12);
    void *p = rs_sys.malloc(8);
    RS_CHECK(p != NULL && rs_sys_fail_calls() == 2);
    free(p);
    RS_CHECK(rs_sys_fail_set("") == RS_OK && rs_sys_fail_calls() == 0);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_bad_specs_are_refused),
    RS_TEST(test_every_startup_call_failure_is_a_clear_error),
    RS_TEST(test_every_serving_call_failure_is_an_error_then_serving_goes_on),
};
RS_TEST_MAIN(cases)

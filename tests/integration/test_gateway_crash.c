/* SPDX-License-Identifier: MIT */
/*
 * gatewayd's crash model (DESIGN.md §3) seen from HTTP clients: gatewayd is
 * SIGKILLed mid-request and restarted on the same port; a client retrying
 * with the same Idempotency-Key re-attaches to the generation already
 * running and gets its whole output from the first token (streamed or not),
 * generated once (tokenizerd's accepted counter and launcherd's sampled
 * counter move for one run only). Also: a retry on a second connection while
 * the first is still open takes the request over; the same key from another
 * caller names another request; a client that leaves and does not come back
 * has its request cancelled after the grace; and a SIGKILL storm with
 * retrying clients runs no request twice.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "ipc/pipeline_metrics.h"
#include "tests/integration/gateway_fixture.h"

#define CTX GWT_CTX
#define LONG_BODY                                                                                  \
    "{\"prompt\":\"Once upon a time\",\"max_tokens\":1000,\"temperature\":0,"                      \
    "\"ignore_eos\":true%s}"

static _Atomic uint64_t *counter(struct gwt_env *e, enum rs_pipe_stage s, unsigned i)
{
    return &rs_harness_view(&e->h)->metrics->stage[s].counter[i];
}

/* The text of a non-stream completion body, or of a stream's chunks (copied into out). */
static int text_of(const struct gwt_resp *r, int stream, char *out, size_t cap)
{
    out[0] = '\0';
    if (r->status != 200 || r->body == NULL)
        return -1;
    if (!stream) {
        json_t *j = gwt_json(r);
        const char *t = json_string_value(
            json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
        snprintf(out, cap, "%s", t != NULL ? t : "");
        int ok = t != NULL;
        json_decref(j);
        return ok ? 0 : -1;
    }
    char *copy = strdup(r->body), *ev[4096];
    int n = gwt_sse_split(copy, ev, 4096), done = n > 0 && strcmp(ev[n - 1], "[DONE]") == 0;
    size_t len = 0;
    for (int i = 0; i < n - 1; i++) {
        json_t *c = json_loads(ev[i], 0, NULL);
        const char *t = json_string_value(
            json_object_get(json_array_get(json_object_get(c, "choices"), 0), "text"));
        done &= json_object_get(c, "error") == NULL;
        if (t != NULL && len + strlen(t) < cap) {
            memcpy(out + len, t, strlen(t));
            len += strlen(t);
        }
        json_decref(c);
    }
    out[len] = '\0';
    free(copy);
    return done ? 0 : -1;
}

/* The reference: the same body without a key, on a quiet gateway. */
static int reference(struct gwt_env *e, const char *body, int stream, char *out, size_t cap)
{
    struct gwt_resp r;
    if (gwt_http(e->gw.port, "POST", "/v1/completions", NULL, body, &r) != 0)
        return -1;
    int rc = text_of(&r, stream, out, cap);
    gwt_resp_free(&r);
    return rc;
}

/* Waits until launcherd sampled `n` more tokens than `base`. */
static void wait_sampled(struct gwt_env *e, uint64_t base, uint64_t n)
{
    _Atomic uint64_t *s = counter(e, RS_PIPE_STAGE_LAUNCHERD, RS_M_LAU_SAMPLED);
    for (uint64_t end = rs_clock_ms() + 20000; atomic_load(s) < base + n && rs_clock_ms() < end;)
        usleep(500);
}

/* SIGKILL mid-generation, restart, retry: whole output, accepted and generated once. */
static int retry_after_kill(int stream)
{
    struct gwt_env e;
    char body[512], want[16384], got[16384];
    static char text[1 << 20];
    int fail = 0, rc = gwt_up(&e, NULL);
    if (rc != 0)
        return rc;
    snprintf(body, sizeof(body), LONG_BODY, stream ? ",\"stream\":true" : "");
    GCHECK(reference(&e, body, stream, want, sizeof(want)) == 0, "%s", "reference");
    _Atomic uint64_t *acc = counter(&e, RS_PIPE_STAGE_TOKENIZERD, RS_M_TOK_ACCEPTED);
    _Atomic uint64_t *sam = counter(&e, RS_PIPE_STAGE_LAUNCHERD, RS_M_LAU_SAMPLED);
    uint64_t acc0 = atomic_load(acc), sam0 = atomic_load(sam);
    const char *key = "Idempotency-Key: retry-after-kill-1\r\n";
    int fd = gwt_connect(e.gw.port);
    GCHECK(gwt_send(fd, "POST", "/v1/completions", key, body, 0) == 0, "%s", "send");
    wait_sampled(&e, sam0, 20);
    gwt_gw_kill(&e.gw, SIGKILL);
    ssize_t k = 0, total = 0;
    while ((k = gwt_recv(fd, text + total, sizeof(text) - 1 - (size_t)total, 5000)) > 0)
        total += k; /* what the first connection got before it died */
    close(fd);
    GCHECK(gwt_gw_start(&e.gw, 0) == 0, "%s", "restart");
    struct gwt_resp r = {0};
    GCHECK(gwt_http(e.gw.port, "POST", "/v1/completions", key, body, &r) == 0, "%s", "retry");
    GCHECK(text_of(&r, stream, got, sizeof(got)) == 0, "retry: %d %.300s", r.status, r.body);
    gwt_resp_free(&r);
    GCHECK(strcmp(got, want) == 0, "retry text:\n%s\n---- reference ----\n%s", got, want);
    GCHECK(atomic_load(acc) - acc0 == 1, "accepted %llu times",
           (unsigned long long)(atomic_load(acc) - acc0));
    GCHECK(atomic_load(sam) - sam0 == 1000, "%llu tokens generated for one 1000-token request",
           (unsigned long long)(atomic_load(sam) - sam0));
    fprintf(stderr, "the first connection got %zd bytes before gatewayd died\n", total);
out:
    gwt_down(&e, fail);
    return fail;
}

static int test_keyed_retry_after_sigkill_gets_the_whole_output_generated_once(void)
{
    return retry_after_kill(0);
}

static int test_keyed_stream_retry_after_sigkill_replays_from_the_first_token(void)
{
    return retry_after_kill(1);
}

static int test_retry_while_the_first_connection_is_open_takes_over(void)
{
    struct gwt_env e;
    char body[512], want[16384], got[16384], rest[65536];
    int fail = 0, rc = gwt_up(&e, NULL);
    if (rc != 0)
        return rc;
    snprintf(body, sizeof(body), LONG_BODY, ",\"stream\":true");
    GCHECK(reference(&e, body, 1, want, sizeof(want)) == 0, "%s", "reference");
    _Atomic uint64_t *acc = counter(&e, RS_PIPE_STAGE_TOKENIZERD, RS_M_TOK_ACCEPTED);
    uint64_t acc0 = atomic_load(acc);
    const char *key = "Idempotency-Key: takeover\r\n";
    int a = gwt_connect(e.gw.port);
    GCHECK(gwt_send(a, "POST", "/v1/completions", key, body, 0) == 0 && gwt_first_chunk(a) == 0,
           "%s", "first connection");
    struct gwt_resp r = {0};
    GCHECK(gwt_http(e.gw.port, "POST", "/v1/completions", key, body, &r) == 0 &&
               text_of(&r, 1, got, sizeof(got)) == 0,
           "second: %d", r.status);
    gwt_resp_free(&r);
    GCHECK(strcmp(got, want) == 0, "taken-over text:\n%s\n---- reference ----\n%s", got, want);
    size_t n = 0;
    ssize_t k;
    while ((k = gwt_recv(a, rest + n, sizeof(rest) - 1 - n, 10000)) > 0 && n < sizeof(rest) - 1)
        n += (size_t)k;
    rest[n] = '\0';
    close(a);
    GCHECK(k == 0 && strstr(rest, "took over") != NULL,
           "the first connection should end with "
           "an error event (recv %zd): ...%s",
           k, n > 200 ? rest + n - 200 : rest);
    GCHECK(atomic_load(acc) - acc0 == 1, "accepted %llu times",
           (unsigned long long)(atomic_load(acc) - acc0));
out:
    gwt_down(&e, fail);
    return fail;
}

static int test_the_same_key_from_another_caller_is_another_request(void)
{
    struct gwt_env e;
    char keyfile[600], body[512];
    snprintf(keyfile, sizeof(keyfile), "%s/keys", rs_test_tmpdir());
    FILE *f = fopen(keyfile, "w");
    fprintf(f, "sk-alice\nsk-bob\n");
    fclose(f);
    const char *extra[] = {"--api-key", keyfile, NULL};
    int fail = 0, rc = gwt_up(&e, extra);
    if (rc != 0)
        return rc;
    snprintf(body, sizeof(body), "{\"prompt\":\"x\",\"max_tokens\":5}");
    _Atomic uint64_t *acc = counter(&e, RS_PIPE_STAGE_TOKENIZERD, RS_M_TOK_ACCEPTED);
    uint64_t acc0 = atomic_load(acc);
    const char *hdr[] = {"Authorization: Bearer sk-alice\r\nIdempotency-Key: shared\r\n",
                         "Authorization: Bearer sk-bob\r\nIdempotency-Key: shared\r\n",
                         "Authorization: Bearer sk-alice\r\nIdempotency-Key: shared\r\n"};
    char ids[3][128];
    for (int i = 0; i < 3; i++) {
        struct gwt_resp r;
        GCHECK(gwt_http(e.gw.port, "POST", "/v1/completions", hdr[i], body, &r) == 0 &&
                   r.status == 200,
               "caller %d: %d", i, r.status);
        json_t *j = gwt_json(&r);
        snprintf(ids[i], sizeof(ids[i]), "%s", json_string_value(json_object_get(j, "id")));
        json_decref(j);
        gwt_resp_free(&r);
    }
    GCHECK(strcmp(ids[0], ids[1]) != 0 && strcmp(ids[0], ids[2]) == 0, "ids %s %s %s", ids[0],
           ids[1], ids[2]);
    GCHECK(atomic_load(acc) - acc0 == 2, "accepted %llu, want 2 (one per caller)",
           (unsigned long long)(atomic_load(acc) - acc0));
    /* other content under a key in flight: refused, not run */
    char busy[512];
    snprintf(busy, sizeof(busy), LONG_BODY, ",\"stream\":true");
    int fd = gwt_connect(e.gw.port);
    GCHECK(gwt_send(fd, "POST", "/v1/completions", hdr[1], busy, 0) == 0 &&
               gwt_first_chunk(fd) == 0,
           "%s", "long request");
    struct gwt_resp r;
    GCHECK(gwt_http(e.gw.port, "POST", "/v1/completions", hdr[1],
                    "{\"prompt\":\"other\",\"max_tokens\":5}", &r) == 0 &&
               r.status == 409,
           "reuse: %d", r.status);
    char sr[16];
    GCHECK(gwt_header(&r, "x-should-retry", sr, sizeof(sr)) && strcmp(sr, "false") == 0, "%s",
           "x-should-retry");
    gwt_resp_free(&r);
    close(fd);
out:
    gwt_down(&e, fail);
    return fail;
}

static int test_a_client_back_within_the_grace_reattaches(void)
{
    struct gwt_env e;
    char body[512], want[16384], got[16384];
    int fail = 0, rc = gwt_up(&e, NULL); /* the default grace: 10 s */
    if (rc != 0)
        return rc;
    snprintf(body, sizeof(body), LONG_BODY, ",\"stream\":true");
    GCHECK(reference(&e, body, 1, want, sizeof(want)) == 0, "%s", "reference");
    _Atomic uint64_t *acc = counter(&e, RS_PIPE_STAGE_TOKENIZERD, RS_M_TOK_ACCEPTED);
    uint64_t acc0 = atomic_load(acc);
    int fd = gwt_connect(e.gw.port);
    GCHECK(gwt_send(fd, "POST", "/v1/completions", "Idempotency-Key: back\r\n", body, 0) == 0 &&
               gwt_first_chunk(fd) == 0,
           "%s", "first");
    close(fd);
    struct gwt_resp r = {0};
    GCHECK(gwt_http(e.gw.port, "POST", "/v1/completions", "Idempotency-Key: back\r\n", body,
                    &r) == 0 &&
               text_of(&r, 1, got, sizeof(got)) == 0,
           "retry %d", r.status);
    gwt_resp_free(&r);
    GCHECK(strcmp(got, want) == 0, "%s", "re-attached text differs");
    GCHECK(atomic_load(acc) - acc0 == 1, "accepted %llu times",
           (unsigned long long)(atomic_load(acc) - acc0));
out:
    gwt_down(&e, fail);
    return fail;
}

static int test_a_client_that_does_not_return_is_cancelled_after_the_grace(void)
{
    struct gwt_env e;
    const char *extra[] = {"--reattach-grace-ms", "50", NULL};
    char body[512];
    int fail = 0, rc = gwt_up(&e, extra);
    if (rc != 0)
        return rc;
    snprintf(body, sizeof(body), LONG_BODY, ",\"stream\":true");
    _Atomic uint64_t *sam = counter(&e, RS_PIPE_STAGE_LAUNCHERD, RS_M_LAU_SAMPLED);
    uint64_t s0 = atomic_load(sam);
    int fd = gwt_connect(e.gw.port);
    GCHECK(gwt_send(fd, "POST", "/v1/completions", "Idempotency-Key: gone\r\n", body, 0) == 0 &&
               gwt_first_chunk(fd) == 0,
           "%s", "request");
    close(fd);
    struct rs_pipe *p = rs_harness_view(&e.h);
    _Atomic uint64_t *kv = &p->metrics->stage[RS_PIPE_STAGE_SCHEDULERD].counter[RS_M_SCH_KV_USED];
    usleep(100000);
    for (uint64_t end = rs_clock_ms() + 20000; atomic_load(kv) > 0 && rs_clock_ms() < end;)
        usleep(5000);
    GCHECK(atomic_load(kv) == 0 && atomic_load(sam) - s0 < 1000, "%llu tokens, KV %llu",
           (unsigned long long)(atomic_load(sam) - s0), (unsigned long long)atomic_load(kv));
    fprintf(stderr, "cancelled after %llu of 1000 tokens\n",
            (unsigned long long)(atomic_load(sam) - s0));
out:
    gwt_down(&e, fail);
    return fail;
}

/* --- the storm ----------------------------------------------------------------------------- */

#define STORM_CLIENTS 4
#define STORM_REQS 10

struct storm_client {
    uint16_t port;
    int id;
    _Atomic int *stop;
    char text[STORM_REQS][4096];
    unsigned retries, done;
};

static void storm_body(int c, int k, char *out, size_t cap)
{
    static const char *const prompts[] = {"Once upon a time", "The dog", "Lily and Ben", "One day"};
    snprintf(out, cap,
             "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":"
             "true%s}",
             prompts[(c + k) % 4], 200 + 100 * (k % 5), k % 2 ? ",\"stream\":true" : "");
}

static void *storm_run(void *arg)
{
    struct storm_client *sc = arg;
    for (int k = 0; k < STORM_REQS; k++) {
        char body[512], hdr[128];
        storm_body(sc->id, k, body, sizeof(body));
        snprintf(hdr, sizeof(hdr), "Idempotency-Key: storm-%d-%d\r\n", sc->id, k);
        for (int attempt = 0; attempt < 400; attempt++) { /* retried until it gets its answer */
            struct gwt_resp r;
            if (gwt_http(sc->port, "POST", "/v1/completions", hdr, body, &r) == 0) {
                int ok = text_of(&r, k % 2, sc->text[k], sizeof(sc->text[k])) == 0;
                gwt_resp_free(&r);
                if (ok) {
                    sc->done++;
                    break;
                }
            }
            sc->retries++;
            usleep(20000);
        }
    }
    return NULL;
}

static int test_sigkill_storm_with_retrying_clients_runs_no_request_twice(void)
{
    struct gwt_env e;
    struct storm_client cl[STORM_CLIENTS];
    pthread_t th[STORM_CLIENTS];
    _Atomic int stop = 0;
    unsigned kills = 0;
    int fail = 0, rc = gwt_up(&e, NULL);
    if (rc != 0)
        return rc;
    _Atomic uint64_t *acc = counter(&e, RS_PIPE_STAGE_TOKENIZERD, RS_M_TOK_ACCEPTED);
    uint64_t acc0 = atomic_load(acc), rnd = 0x9e3779b97f4a7c15ull;
    for (int c = 0; c < STORM_CLIENTS; c++) {
        memset(&cl[c], 0, sizeof(cl[c]));
        cl[c] = (struct storm_client){.port = e.gw.port, .id = c, .stop = &stop};
        pthread_create(&th[c], NULL, storm_run, &cl[c]);
    }
    for (int busy = 1; busy;) {
        rnd ^= rnd << 13, rnd ^= rnd >> 7, rnd ^= rnd << 17;
        usleep(40000 + (useconds_t)(rnd % 120000));
        busy = 0;
        for (int c = 0; c < STORM_CLIENTS; c++)
            busy |= cl[c].done < STORM_REQS && cl[c].retries < 400 * STORM_REQS;
        if (!busy)
            break;
        gwt_gw_kill(&e.gw, SIGKILL);
        kills++;
        GCHECK(gwt_gw_start(&e.gw, 0) == 0, "restart %u", kills);
    }
    for (int c = 0; c < STORM_CLIENTS; c++)
        pthread_join(th[c], NULL);
    uint64_t accepted = atomic_load(acc) - acc0;
    unsigned retries = 0;
    for (int c = 0; c < STORM_CLIENTS; c++) {
        retries += cl[c].retries;
        GCHECK(cl[c].done == STORM_REQS, "client %d finished %u", c, cl[c].done);
    }
    fprintf(stderr,
            "storm: %u gatewayd SIGKILLs, %d requests, %u retries, %llu accepted by "
            "tokenizerd\n",
            kills, STORM_CLIENTS * STORM_REQS, retries, (unsigned long long)accepted);
    GCHECK(accepted == STORM_CLIENTS * STORM_REQS, "accepted %llu for %d distinct requests",
           (unsigned long long)accepted, STORM_CLIENTS * STORM_REQS);
    for (int c = 0; c < STORM_CLIENTS; c++)
        for (int k = 0; k < STORM_REQS; k++) {
            char body[512], want[4096];
            storm_body(c, k, body, sizeof(body));
            GCHECK(reference(&e, body, k % 2, want, sizeof(want)) == 0 &&
                       strcmp(want, cl[c].text[k]) == 0,
                   "client %d request %d differs", c, k);
        }
out:
    atomic_store(&stop, 1);
    gwt_down(&e, fail);
    return fail;
}

static int test_back_on_its_port_after_sigkill(void)
{
    struct gwt_env e;
    int fail = 0, rc = gwt_up(&e, NULL);
    if (rc != 0)
        return rc;
    for (int i = 0; i < 3; i++) {
        gwt_gw_kill(&e.gw, SIGKILL);
        uint64_t t0 = rs_clock_ns();
        GCHECK(gwt_gw_start(&e.gw, 1) == 0, "restart %d", i);
        fprintf(stderr, "restart %d: serving again %.1f ms after the SIGKILL (start included)\n", i,
                (double)(rs_clock_ns() - t0) / 1e6);
        struct gwt_resp r;
        GCHECK(gwt_http(e.gw.port, "POST", "/v1/completions", NULL,
                        "{\"prompt\":\"x\",\"max_tokens\":3}", &r) == 0 &&
                   r.status == 200,
               "completion after restart %d", i);
        gwt_resp_free(&r);
    }
out:
    gwt_down(&e, fail);
    return fail;
}

/* A supervisor holding the socket (systemd socket activation): the port never closes. */
static int test_a_held_socket_keeps_the_port_open_across_a_sigkill(void)
{
    struct gwt_env e;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    int fail = 0, one = 1, rc = gwt_up(&e, NULL), held = -1, fd = -1;
    if (rc != 0)
        return rc;
    gwt_gw_kill(&e.gw, SIGTERM);
    held = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(held, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    GCHECK(bind(held, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(held, 64) == 0 &&
               getsockname(held, (struct sockaddr *)&a, &alen) == 0,
           "%s", "listen");
    e.gw.port = ntohs(a.sin_port);
    e.gw.held_fd = held;
    GCHECK(gwt_gw_start(&e.gw, 1) == 0, "%s", "start on the held socket");
    gwt_gw_kill(&e.gw, SIGKILL);
    fd = gwt_connect(e.gw.port); /* nobody accepts now, but the backlog does */
    GCHECK(fd >= 0 && gwt_send(fd, "GET", "/health", NULL, NULL, 0) == 0, "%s",
           "connect while gatewayd is dead");
    GCHECK(gwt_gw_start(&e.gw, 0) == 0, "%s", "restart");
    struct gwt_resp r = {0};
    GCHECK(gwt_read(fd, &r, 30000) == 0 && r.status == 200, "the waiting request got %d", r.status);
    gwt_resp_free(&r);
out:
    if (fd >= 0)
        close(fd);
    if (held >= 0)
        close(held);
    gwt_down(&e, fail);
    return fail;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_keyed_retry_after_sigkill_gets_the_whole_output_generated_once),
    RS_TEST(test_keyed_stream_retry_after_sigkill_replays_from_the_first_token),
    RS_TEST(test_retry_while_the_first_connection_is_open_takes_over),
    RS_TEST(test_the_same_key_from_another_caller_is_another_request),
    RS_TEST(test_a_client_back_within_the_grace_reattaches),
    RS_TEST(test_a_client_that_does_not_return_is_cancelled_after_the_grace),
    RS_TEST(test_sigkill_storm_with_retrying_clients_runs_no_request_twice),
    RS_TEST(test_back_on_its_port_after_sigkill),
    RS_TEST(test_a_held_socket_keeps_the_port_open_across_a_sigkill),
};

RS_TEST_MAIN(cases)

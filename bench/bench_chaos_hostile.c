/* SPDX-License-Identifier: MIT */
/*
 * bench_chaos_hostile: well-behaved clients beside a hostile population on
 * one real pipeline (the four daemons, stories260K). First a quiet run:
 * --good clients each run --requests greedy 48-token requests one after
 * another (their texts are the reference). Then the same again while floods
 * (clients submitting --flood requests at once, again as soon as one ends),
 * --unread streams nobody reads (a raw DEALER pair that says hello and never
 * receives, RCVHWM 4) and thieves (sockets under each good client's routing
 * id: hello with their own secret, resume and cancel of its requests) run.
 * The hostile population runs in a process of its own (this binary again,
 * with --attacker), as an attacker would: its own event loop does not delay
 * the good clients' callbacks, and both loops sleep in poll when nothing is
 * ready, so what the good clients feel is the server's doing.
 * Prints, for the good clients: completed / lost / changed against the quiet
 * run, end-to-end latency p50/p99 quiet and hostile and their ratio; what the
 * thieves received; how many flood requests were accepted or overloaded.
 * Exit 0 when the good clients lost nothing and the thieves received no
 * output. Timings are printed, never asserted.
 */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/client.h"
#include "common/clock.h"
#include "common/log.h"
#include "ipc/rundir.h"
#include "ipc/wire_client.h"
#include "ipc/wire_server.h"
#include "ipc/zsock.h"
#include "tests/pipeline_harness.h"
#include "tests/rs_test.h"

#define MAX_GOOD 16
#define MAX_REQ 64
#define TEXT_MAX 4096

struct good {
    rs_client *c;
    uint32_t done, lost, changed;
    int busy;
    char text[MAX_REQ][TEXT_MAX];
    size_t len[MAX_REQ];
    uint64_t lat_ns[MAX_REQ];
};

struct cfg {
    uint32_t n_good, n_req, n_flood, flood_each, n_unread;
    uint32_t running_share;  /* schedulerd --owner-running-share; 0: its default */
    const char *step_factor; /* schedulerd --fair-step-factor; NULL: its default */
    const char *attacker;    /* --attacker RUNDIR: be the hostile process */
    const char *victims;     /* --victims HEX,HEX..: the good clients' routing ids */
};

static struct good goods[MAX_GOOD];
static char quiet_text[MAX_GOOD][MAX_REQ][TEXT_MAX];
static size_t quiet_len[MAX_GOOD][MAX_REQ];
static uint64_t quiet_lat[MAX_GOOD * MAX_REQ], hostile_lat[MAX_GOOD * MAX_REQ];
static uint64_t flood_ok, flood_over, flood_other;

static void greedy(struct rs_wire_generate *g, uint32_t k, int stream)
{
    static const char *prompts[] = {"Once upon a time", "The dog", "Lily and Ben", "One day"};
    rs_wire_generate_init(g);
    g->prompt = (struct rs_wire_str){prompts[k % 4], (uint32_t)strlen(prompts[k % 4])};
    g->has = RS_WIRE_GEN_PROMPT | RS_WIRE_GEN_MAX_TOKENS | RS_WIRE_GEN_TEMPERATURE |
             RS_WIRE_GEN_STREAM;
    g->max_tokens = 48;
    g->temperature = 0;
    g->stream = stream;
}

static void on_good(const struct rs_client_event *ev)
{
    struct good *gd = ev->user;
    uint32_t k = gd->done + gd->lost;
    if (ev->kind == RS_CLIENT_EV_DELTA || ev->kind == RS_CLIENT_EV_FINAL) {
        size_t room = TEXT_MAX - gd->len[k];
        size_t n = ev->text_len < room ? ev->text_len : room;
        memcpy(gd->text[k] + gd->len[k], ev->text, n);
        gd->len[k] += n;
    }
    if (ev->kind != RS_CLIENT_EV_FINAL)
        return;
    gd->lat_ns[k] = ev->recv_ns - ev->submit_ns;
    if (ev->status == RS_CLIENT_OK && ev->finish_reason != RS_WIRE_FINISH_ERROR)
        gd->done++;
    else
        gd->lost++;
    gd->busy = 0;
}

static void on_flood(const struct rs_client_event *ev)
{
    if (ev->kind != RS_CLIENT_EV_FINAL)
        return;
    if (ev->status == RS_CLIENT_OK)
        flood_ok++;
    else if (ev->status == RS_CLIENT_REFUSED && ev->error == RS_WIRE_OVERLOADED)
        flood_over++;
    else
        flood_other++;
    *(uint32_t *)ev->user -= 1;
}

static rs_client *client_of(const struct rs_harness *h)
{
    return rs_harness_client(h, 300000);
}

/* A raw DEALER under routing id rid to daemon `name` (hello with secret when not NULL). */
static rs_zsock *raw(void *zctx, const struct rs_harness *h, const char *name, const uint8_t *rid,
                     size_t rid_len, int rcvhwm, const char *secret)
{
    char ep[RS_ZSOCK_ENDPOINT_MAX], file[64];
    struct rs_zsock_cfg cfg;
    rs_zsock *s = NULL;
    rs_zsock_cfg_default(RS_ZSOCK_DEALER, &cfg);
    cfg.routing_id = rid;
    cfg.routing_id_len = rid_len;
    if (rcvhwm > 0)
        cfg.rcvhwm = rcvhwm;
    snprintf(file, sizeof(file), "%s.sock", name);
    if (rs_rundir_endpoint(h->rundir, file, ep, sizeof(ep)) != RS_OK ||
        rs_zsock_create(zctx, RS_ZSOCK_DEALER, ep, &cfg, &s) != RS_OK)
        return NULL;
    struct rs_wire_client_msg m;
    struct rs_wire_buf b;
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_HELLO;
    if (secret != NULL)
        m.u.hello.secret = (struct rs_wire_str){secret, (uint32_t)strlen(secret)};
    rs_wire_buf_init(&b, RS_WIRE_CLIENT_MSG_MAX);
    for (int i = 0; i < 200 && rs_wire_client_encode(&m, &b) == RS_OK &&
                    rs_zsock_send(s, b.data, b.len) != RS_OK; i++)
        usleep(5000); /* IMMEDIATE: refused until connected */
    rs_wire_buf_fini(&b);
    return s;
}

static void send_msg(rs_zsock *s, const struct rs_wire_client_msg *m)
{
    struct rs_wire_buf b;
    rs_wire_buf_init(&b, RS_WIRE_CLIENT_MSG_MAX);
    if (rs_wire_client_encode(m, &b) == RS_OK)
        rs_zsock_send(s, b.data, b.len);
    rs_wire_buf_fini(&b);
}

/* One round of the good clients: each runs n_req requests one after another. */
static void good_round(uint32_t n_good, uint32_t n_req)
{
    for (uint32_t i = 0; i < n_good; i++) {
        memset(goods[i].len, 0, sizeof(goods[i].len));
        goods[i].done = goods[i].lost = 0;
        goods[i].busy = 0;
    }
    for (uint64_t end = rs_clock_ms() + 600000; rs_clock_ms() < end;) {
        uint32_t idle = 0;
        for (uint32_t i = 0; i < n_good; i++) {
            struct good *gd = &goods[i];
            uint32_t k = gd->done + gd->lost;
            if (!gd->busy && k < n_req) {
                struct rs_wire_generate g;
                greedy(&g, i + k, 1);
                gd->busy = rs_client_submit(gd->c, &g, NULL, on_good, gd, NULL) == RS_OK;
                if (!gd->busy)
                    gd->lost++;
            }
            idle += !gd->busy && k >= n_req;
        }
        if (idle == n_good)
            return;
        rs_client *cs[MAX_GOOD];
        for (uint32_t i = 0; i < n_good; i++)
            cs[i] = goods[i].c;
        rs_client_poll_set(cs, n_good, 5);
    }
}

/* The hostile population's state. */
struct hostile {
    const struct rs_harness *h;
    void *zctx;
    uint8_t victim[MAX_GOOD][256]; /* the good clients' routing ids */
    size_t victim_len[MAX_GOOD];
    rs_client *flood[8];
    uint32_t n_flood, flood_each, in_flight[8];
    rs_zsock *unread_tok, *unread_post;
    rs_zsock *thief_tok[MAX_GOOD], *thief_post[MAX_GOOD];
    uint32_t n_good, n_req;
    uint64_t thief_msgs, thief_output, next_thief_ns;
};

static void drain_thieves(struct hostile *x)
{
    for (uint32_t i = 0; i < x->n_good; i++) {
        rs_zsock *socks[2] = {x->thief_tok[i], x->thief_post[i]};
        for (int k = 0; k < 2; k++) {
            zmq_msg_t body;
            zmq_msg_init(&body);
            while (socks[k] != NULL && rs_zsock_recv(socks[k], NULL, &body, 0) == RS_OK) {
                struct rs_wire_server_msg m;
                struct rs_wire_error err;
                x->thief_msgs++;
                if (rs_wire_server_decode(zmq_msg_data(&body), zmq_msg_size(&body), &m, &err) ==
                        RS_OK &&
                    (m.type == RS_WIRE_T_DELTA || m.type == RS_WIRE_T_FINAL))
                    x->thief_output++;
                zmq_msg_close(&body);
                zmq_msg_init(&body);
            }
            zmq_msg_close(&body);
        }
    }
}

/* Every 50 ms each thief asks for and cancels what its good client is running ("1".."n"). */
static void thieves_try(struct hostile *x)
{
    if (rs_clock_ns() < x->next_thief_ns)
        return;
    x->next_thief_ns = rs_clock_ns() + 50000000ull;
    for (uint32_t i = 0; i < x->n_good; i++)
        for (uint32_t k = 1; k <= x->n_req && x->thief_post[i] != NULL; k++) {
            struct rs_wire_client_msg m;
            memset(&m, 0, sizeof(m));
            m.type = RS_WIRE_T_RESUME;
            snprintf(m.id, sizeof(m.id), "%u", k);
            send_msg(x->thief_post[i], &m);
            m.type = RS_WIRE_T_CANCEL;
            send_msg(x->thief_tok[i], &m);
        }
}

/* One turn of the attacker's loop; waits up to 5 ms in poll, for its clients or for fd. */
static void hostile_tick(struct hostile *x, struct rs_client_pollfd *fd)
{
    for (uint32_t f = 0; f < x->n_flood; f++) {
        while (x->in_flight[f] < x->flood_each) {
            struct rs_wire_generate g;
            greedy(&g, f, 0);
            if (rs_client_submit(x->flood[f], &g, NULL, on_flood, &x->in_flight[f], NULL) != RS_OK)
                break;
            x->in_flight[f]++;
        }
    }
    rs_client_poll_fds(x->flood, x->n_flood, fd, fd != NULL, 5);
    thieves_try(x);
    drain_thieves(x);
}

/* Streams nobody reads: hello to postprocd (so their output is theirs), then n generates. */
static int start_unread(struct hostile *x, uint32_t n)
{
    static const uint8_t rid[] = "unread-reader";
    const char *secret = "never-reads-secret-0001";
    x->unread_post = raw(x->zctx, x->h, "postprocd", rid, sizeof(rid) - 1, 4, secret);
    x->unread_tok = raw(x->zctx, x->h, "tokenizerd", rid, sizeof(rid) - 1, 0, secret);
    if (x->unread_post == NULL || x->unread_tok == NULL)
        return 1;
    for (uint32_t k = 0; k < n; k++) {
        struct rs_wire_client_msg m;
        memset(&m, 0, sizeof(m));
        m.type = RS_WIRE_T_GENERATE;
        snprintf(m.id, sizeof(m.id), "u%u", k);
        greedy(&m.u.gen, k, 1);
        m.u.gen.max_tokens = 200;
        send_msg(x->unread_tok, &m);
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_ms(uint64_t *v, uint32_t n, double p)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof(*v), cmp_u64);
    uint32_t i = (uint32_t)(p * (n - 1) + 0.5);
    return (double)v[i] / 1e6;
}

/* Collects the round's latencies into out and compares texts with the quiet run's. */
static uint32_t collect(const struct cfg *c, uint64_t *out, int quiet, uint32_t *changed)
{
    uint32_t n = 0;
    *changed = 0;
    for (uint32_t i = 0; i < c->n_good; i++)
        for (uint32_t k = 0; k < goods[i].done + goods[i].lost && k < c->n_req; k++) {
            out[n++] = goods[i].lat_ns[k];
            if (quiet) {
                memcpy(quiet_text[i][k], goods[i].text[k], goods[i].len[k]);
                quiet_len[i][k] = goods[i].len[k];
            } else if (goods[i].len[k] != quiet_len[i][k] ||
                       memcmp(goods[i].text[k], quiet_text[i][k], quiet_len[i][k]) != 0) {
                (*changed)++;
            }
        }
    return n;
}

static uint32_t lost_of(const struct cfg *c)
{
    uint32_t lost = 0;
    for (uint32_t i = 0; i < c->n_good; i++)
        lost += goods[i].lost + (c->n_req - goods[i].done - goods[i].lost);
    return lost;
}

static int start_hostile(struct hostile *x, const struct rs_harness *h, const struct cfg *c)
{
    x->h = h;
    x->zctx = zmq_ctx_new();
    x->n_flood = c->n_flood;
    x->flood_each = c->flood_each;
    x->n_good = c->n_good;
    x->n_req = c->n_req;
    for (uint32_t f = 0; f < c->n_flood; f++)
        if ((x->flood[f] = client_of(h)) == NULL)
            return 1;
    for (uint32_t i = 0; i < c->n_good; i++) {
        char secret[32];
        snprintf(secret, sizeof(secret), "thief-secret-%05u", i);
        x->thief_post[i] = raw(x->zctx, h, "postprocd", x->victim[i], x->victim_len[i], 0, secret);
        x->thief_tok[i] = raw(x->zctx, h, "tokenizerd", x->victim[i], x->victim_len[i], 0, secret);
    }
    return start_unread(x, c->n_unread);
}

static void stop_hostile(struct hostile *x)
{
    for (uint32_t f = 0; f < x->n_flood; f++)
        rs_client_destroy(&x->flood[f]);
    for (uint32_t i = 0; i < x->n_good; i++) {
        rs_zsock_destroy(&x->thief_tok[i]);
        rs_zsock_destroy(&x->thief_post[i]);
    }
    rs_zsock_destroy(&x->unread_tok);
    rs_zsock_destroy(&x->unread_post);
    zmq_ctx_term(x->zctx);
}

#define O(f) offsetof(struct cfg, f)
#define NUM(nm, f, lo, hi, h)                                                                     \
    {.name = nm, .kind = RS_OPT_U32, .off = O(f), .min = lo, .max = hi, .arg = "N", .help = h}
static const struct rs_opt opts[] = {
    NUM("good", n_good, 1, MAX_GOOD, "well-behaved clients (default 4)"),
    NUM("requests", n_req, 1, MAX_REQ, "requests per well-behaved client, one at a time (8)"),
    NUM("floods", n_flood, 0, 8, "flooding clients (2)"),
    NUM("flood-each", flood_each, 1, 1024, "requests each flood keeps submitted (300)"),
    NUM("unread", n_unread, 0, 256, "streams nobody reads (30)"),
    NUM("owner-running-share", running_share, 0, 100,
        "schedulerd's running-slot share per client, percent\n"
        "(0: schedulerd's default; 100: no cap)"),
    {.name = "fair-step-factor", .kind = RS_OPT_ARG, .off = O(step_factor), .arg = "F",
     .help = "schedulerd's --fair-step-factor (default: its own, 2;\n0: off)"},
    {.name = "attacker", .kind = RS_OPT_ARG, .off = O(attacker), .arg = "RUNDIR",
     .help = "(internal) be the hostile process against the pipeline\nin RUNDIR"},
    {.name = "victims", .kind = RS_OPT_ARG, .off = O(victims), .arg = "HEX,..",
     .help = "(internal) the good clients' routing ids, for --attacker"},
    {0},
};

static int hex_nibble(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    return -1;
}

/* "HEX,HEX,..." into x->victim; the number read, or -1 on a malformed list. */
static int parse_victims(struct hostile *x, const char *list)
{
    int n = 0;
    for (const char *p = list; p != NULL && *p != '\0' && n < MAX_GOOD; n++) {
        size_t len = 0;
        for (; p[0] != '\0' && p[0] != ','; p += 2) {
            int hi = hex_nibble(p[0]), lo = p[1] != '\0' ? hex_nibble(p[1]) : -1;
            if (hi < 0 || lo < 0 || len >= sizeof(x->victim[0]))
                return -1;
            x->victim[n][len++] = (uint8_t)(hi << 4 | lo);
        }
        x->victim_len[n] = len;
        p += *p == ',';
    }
    return n;
}

/* The hostile process: fills the floods for 2 s, says "ready", attacks until its stdin
 * closes, then prints its counts on one line. */
static int attacker_main(struct cfg *c)
{
    static struct hostile x;
    static struct rs_harness hh;
    snprintf(hh.rundir, sizeof(hh.rundir), "%s", c->attacker);
    int n = parse_victims(&x, c->victims);
    if (n < 0 || (uint32_t)n != c->n_good) {
        fprintf(stderr, "bench_chaos_hostile: --victims needs %u routing ids in hex\n",
                c->n_good);
        return 1;
    }
    if (start_hostile(&x, &hh, c) != 0) {
        fprintf(stderr, "bench_chaos_hostile: the hostile population could not start\n");
        return 1;
    }
    for (uint64_t t0 = rs_clock_ns(); rs_clock_ns() - t0 < 2000000000ull;)
        hostile_tick(&x, NULL); /* let the floods fill their shares */
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        struct rs_client_pollfd in = {.fd = STDIN_FILENO, .events = RS_CLIENT_POLLIN};
        hostile_tick(&x, &in);
        if (in.revents != 0)
            break; /* the driver closed our stdin: done */
    }
    drain_thieves(&x);
    printf("%llu %llu %llu %llu %llu\n", (unsigned long long)flood_ok,
           (unsigned long long)flood_over, (unsigned long long)flood_other,
           (unsigned long long)x.thief_msgs, (unsigned long long)x.thief_output);
    fflush(stdout);
    stop_hostile(&x);
    return 0;
}

/* The attacker process and the counts it printed. */
struct attack {
    pid_t pid;
    FILE *from;
    int to;
    unsigned long long ok, over, other, thief_msgs, thief_output;
};

/* Starts this binary as the attacker against h and waits for its "ready". */
static int attack_start(struct attack *a, const struct rs_harness *h, const struct cfg *c)
{
    static char victims[MAX_GOOD * 520], nums[5][16];
    size_t at = 0;
    for (uint32_t i = 0; i < c->n_good; i++) {
        size_t len;
        const uint8_t *rid = rs_client_routing_id(goods[i].c, &len);
        for (size_t k = 0; k < len && at + 4 < sizeof(victims); k++)
            at += (size_t)snprintf(victims + at, sizeof(victims) - at, "%02x", rid[k]);
        if (i + 1 < c->n_good && at + 2 < sizeof(victims))
            victims[at++] = ',';
    }
    victims[at] = '\0';
    uint32_t v[5] = {c->n_good, c->n_req, c->n_flood, c->flood_each, c->n_unread};
    for (int i = 0; i < 5; i++)
        snprintf(nums[i], sizeof(nums[i]), "%u", v[i]);
    char *const argv[] = {"bench_chaos_hostile", "--attacker", (char *)h->rundir, "--victims",
                          victims, "--good", nums[0], "--requests", nums[1], "--floods",
                          nums[2], "--flood-each", nums[3], "--unread", nums[4], NULL};
    int to[2], from[2];
    if (pipe(to) != 0 || pipe(from) != 0)
        return 1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, from[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, to[1]);
    posix_spawn_file_actions_addclose(&fa, from[0]);
    extern char **environ;
    int e = posix_spawn(&a->pid, "/proc/self/exe", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(to[0]);
    close(from[1]);
    a->to = to[1];
    a->from = fdopen(from[0], "r");
    char line[64];
    if (e != 0 || a->from == NULL || fgets(line, sizeof(line), a->from) == NULL ||
        strcmp(line, "ready\n") != 0) {
        fprintf(stderr, "bench_chaos_hostile: the attacker did not start (%s)\n",
                e != 0 ? strerror(e) : "no ready line");
        return 1;
    }
    return 0;
}

/* Ends the attack and reads the attacker's counts. */
static int attack_stop(struct attack *a)
{
    if (a->pid <= 0)
        return 1;
    close(a->to);
    int got = a->from == NULL ? 0 : fscanf(a->from, "%llu %llu %llu %llu %llu", &a->ok,
                                           &a->over, &a->other, &a->thief_msgs,
                                           &a->thief_output);
    if (a->from != NULL)
        fclose(a->from);
    int st = 0;
    waitpid(a->pid, &st, 0);
    return got == 5 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

static void report(const struct cfg *c, const struct attack *a, uint32_t n_q, uint32_t lost_quiet,
                   uint32_t n_h, uint32_t lost, uint32_t changed)
{
    double q50 = pct_ms(quiet_lat, n_q, 0.5), q99 = pct_ms(quiet_lat, n_q, 0.99);
    double h50 = pct_ms(hostile_lat, n_h, 0.5), h99 = pct_ms(hostile_lat, n_h, 0.99);
    printf("well-behaved: %u clients x %u greedy 48-token streams\n", c->n_good, c->n_req);
    printf("  quiet:   %u completed, %u lost; e2e p50 %.1f ms, p99 %.1f ms\n", n_q - lost_quiet,
           lost_quiet, q50, q99);
    printf("  hostile: %u completed, %u lost, %u changed; e2e p50 %.1f ms, p99 %.1f ms\n",
           n_h - lost, lost, changed, h50, h99);
    printf("  hostile / quiet: p50 %.2fx, p99 %.2fx\n", q50 > 0 ? h50 / q50 : 0,
           q99 > 0 ? h99 / q99 : 0);
    printf("hostile: %u floods x %u (accepted %llu, overloaded %llu, other %llu), %u unread "
           "streams, %u thieves: %llu messages received, %llu of them output\n",
           c->n_flood, c->flood_each, a->ok, a->over, a->other, c->n_unread, c->n_good,
           a->thief_msgs, a->thief_output);
}

int main(int argc, char **argv)
{
    struct cfg c = {.n_good = 4, .n_req = 8, .n_flood = 2, .flood_each = 300, .n_unread = 30};
    struct rs_opt_group g[] = {{"population", opts, &c, NULL}};
    int code = rs_opt_main("bench_chaos_hostile",
                           "usage: bench_chaos_hostile [options]\n"
                           "Well-behaved clients, quiet and beside floods, unread streams and "
                           "routing-id thieves.\n", g, 1, argc, argv, 0, NULL);
    if (code >= 0)
        return code;
    rs_log_set_level(RS_LOG_WARN);
    if (c.attacker != NULL)
        return attacker_main(&c);
    static char model[512];
    struct rs_harness h;
    struct rs_harness_opts ho = {0};
    if ((ho.model = rs_test_refdata("stories260K.gguf", model, sizeof(model))) == NULL) {
        fprintf(stderr, "bench_chaos_hostile: stories260K.gguf not found in ../shared/refdata\n");
        return 1;
    }
    ho.n_ctx = 256;
    ho.max_requests = 1024;
    static char share[16];
    int n_extra = 0;
    if (c.running_share != 0) {
        snprintf(share, sizeof(share), "%u", c.running_share);
        ho.extra[RS_PIPE_STAGE_SCHEDULERD][n_extra++] = "--owner-running-share";
        ho.extra[RS_PIPE_STAGE_SCHEDULERD][n_extra++] = share;
    }
    if (c.step_factor != NULL) {
        ho.extra[RS_PIPE_STAGE_SCHEDULERD][n_extra++] = "--fair-step-factor";
        ho.extra[RS_PIPE_STAGE_SCHEDULERD][n_extra++] = c.step_factor;
    }
    if (rs_harness_start(&h, &ho) != RS_OK)
        return 1;
    for (uint32_t i = 0; i < c.n_good; i++)
        if ((goods[i].c = client_of(&h)) == NULL)
            return 1;
    uint32_t changed, n_q, n_h;
    good_round(c.n_good, c.n_req);
    n_q = collect(&c, quiet_lat, 1, &changed);
    uint32_t lost_quiet = lost_of(&c);
    struct attack a = {0};
    int bad = attack_start(&a, &h, &c);
    if (!bad)
        good_round(c.n_good, c.n_req);
    n_h = collect(&c, hostile_lat, 0, &changed);
    uint32_t lost = lost_of(&c);
    bad |= attack_stop(&a);
    report(&c, &a, n_q, lost_quiet, n_h, lost, changed);
    for (uint32_t i = 0; i < c.n_good; i++)
        rs_client_destroy(&goods[i].c);
    rs_harness_stop(&h, 0);
    return bad || lost != 0 || changed != 0 || a.thief_output != 0 ? 1 : 0;
}

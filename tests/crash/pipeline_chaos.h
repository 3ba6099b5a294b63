/* SPDX-License-Identifier: MIT */
/*
 * The whole-pipeline chaos of tests/crash/test_chaos.c and bench/bench_chaos.c:
 * the four daemons under a steady mixed load from several clients, this
 * process their supervisor: it SIGKILLs a stage every U(min, max) ms (stages
 * in shuffled rounds; preferably while busy), restarts it at once (some starts
 * armed with a failpoint) and times kill -> READY from the role table. Each
 * output is checked against its in-process solo run (tests/solo_ref.h); after
 * the drain the segment is audited. The code is pipeline_chaos.c (rs_testlib). Leaves
 * out the supervisor's own death (it.ops.supervisor_kill_no_orphans_and_recovery).
 */
#ifndef RS_PIPELINE_CHAOS_H
#define RS_PIPELINE_CHAOS_H

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/client.h"
#include "common/clock.h"
#include "ipc/pipeline_req.h"
#include "ipc/role.h"
#include "tests/pipeline_harness.h"
#include "tests/solo_ref.h"
#include "tests/stream_rec.h"

#define PCHAOS_MAX_CLIENTS 64
#define PCHAOS_MAX_KINDS 256
#define PCHAOS_REPORT_MAX 5 /* mismatches printed in full */

struct pchaos_opts {
    const char *model;                 /* GGUF path */
    uint32_t n_ctx;                    /* --ctx (512 for stories260K) */
    uint32_t n_clients;                /* clients, each its own routing id */
    uint32_t per_client;               /* requests each keeps in flight */
    uint32_t n_kinds;                  /* distinct requests (solo_mixed_request 0..n-1) */
    uint32_t max_output;               /* span of max_tokens: 8 .. 8 + max_output - 1 */
    uint32_t kill_min_ms, kill_max_ms; /* interval between kills; kill_max_ms 0 = no kills */
    unsigned stage_mask;               /* stages the storm kills (bit per enum rs_pipe_stage) */
    uint32_t failpoint_pct;            /* % of restarts armed with one of the stage's failpoints */
    const char *doorbell_fault; /* NULL, "drop" or "dup": RS_DOORBELL_FAULT of every daemon */
    const char *linger_ms;      /* postprocd --linger-ms (text); NULL = postprocd's default */
    uint32_t constrained_every; /* every n-th kind carries a constraint (pchaos_constrain);
                                   0 = none */
    uint64_t seed;
    int verbose; /* print each kill */
};

/* Fills o with the chaos test's load: 8 clients x 2 requests, 24 kinds, kills every 200-800 ms. */
void pchaos_opts_default(struct pchaos_opts *o, const char *model);

/* Samples of one latency (ns), growing. */
struct pchaos_samples {
    uint64_t *v;
    uint32_t n, cap;
};

struct pchaos_stage {
    uint32_t kills;            /* SIGKILLs by the storm (and the scenario functions) */
    uint32_t kills_busy;       /* of which while the stage had work in progress */
    uint32_t kills_recovering; /* of which before the process was READY */
    uint32_t armed;            /* starts armed with a failpoint */
    uint32_t failpoint_deaths; /* processes that killed themselves at their failpoint */
    uint32_t fenced_exits;     /* resumed zombies that exited 1 */
    uint32_t unexpected;       /* any other exit: a bug */
    uint32_t starts;
    struct pchaos_samples restart; /* kill -> READY */
    struct pchaos_samples exec;    /* fork/exec -> READY */
    /* the current process */
    uint64_t kill_ns, spawn_ns; /* kill of its predecessor (0: none timed), its start */
    int awaiting_ready;
    char env[128]; /* "RS_FAILPOINT=label:n" of the current start, or "" */
};

/* One request slot: a request in flight and what its callback received. */
struct pchaos_req {
    struct pchaos *ch;
    uint32_t client, kind;
    int busy;
    struct stream_rec s; /* what its callback received */
};

struct pchaos {
    struct pchaos_opts o;
    struct rs_harness h;
    struct rs_wire_generate kinds[PCHAOS_MAX_KINDS];
    struct solo_out refs[PCHAOS_MAX_KINDS];
    rs_client *clients[PCHAOS_MAX_CLIENTS];
    uint32_t in_flight[PCHAOS_MAX_CLIENTS];
    struct pchaos_req *reqs; /* n_clients * per_client slots */
    uint32_t n_slots;
    int submitting; /* 0 while draining */
    struct pchaos_stage st[RS_PIPE_N_STAGES];
    uint64_t rng;
    uint32_t order[RS_PIPE_N_STAGES], n_order, order_pos;
    uint64_t next_kill_ms;
    /* requests */
    uint64_t submitted, completed, lost, duplicated, wrong;
    uint64_t twice_live; /* scans that found one (client, id) in two published records */
    uint64_t started_ms;
};

uint64_t pchaos_rand(struct pchaos *c);

/*
 * Adds structured output to kind i of g (the n-th constrained kind picks the n-th of a
 * rotation: regex, choice, any JSON object, GBNF, logit_bias with allowed ids).
 */
void pchaos_constrain(struct rs_wire_generate *g, uint32_t i);

void pchaos_sample(struct pchaos_samples *s, uint64_t v);

int pchaos_cmp_u64(const void *a, const void *b);

/* The q-quantile (0..1) of s in ms (nearest rank); 0 when empty. Sorts s. */
double pchaos_quantile_ms(struct pchaos_samples *s, double q);

/* --- checking each request against its solo output ------------------------------------------ */

void pchaos_report_mismatch(const struct pchaos_req *q, const struct solo_out *ref);

/* Accounts a finished request: completed (identical), wrong, lost or duplicated. */
void pchaos_account(struct pchaos *c, struct pchaos_req *q);

void pchaos_on_event(const struct rs_client_event *ev);

/* Keeps every client at per_client requests in flight. */
void pchaos_top_up(struct pchaos *c);

/* --- supervising the daemons ----------------------------------------------------------------- */

/* Starts stage s (again) without waiting; env_spec "" or "RS_FAILPOINT=...". */
int pchaos_spawn(struct pchaos *c, enum rs_pipe_stage s, uint64_t kill_ns,
                 const char *env_spec);

/* Starts stage s again, armed with a random failpoint of its own failpoint_pct of the time. */
int pchaos_restart(struct pchaos *c, enum rs_pipe_stage s, uint64_t kill_ns);

/* Notes READY times, reaps daemons that died on their own and restarts them. 0, or 1. */
int pchaos_supervise(struct pchaos *c);

/* Generates sent but not acknowledged yet (refusals aside, none occur here). */
uint64_t pchaos_unacked(const struct pchaos *c);

/*
 * Whether stage s is in the middle of something a kill interrupts: tokenizerd
 * a generate not yet acknowledged, schedulerd a batch in flight, launcherd a
 * batch taken (mid-step), postprocd a stream started and not finished.
 */
int pchaos_busy(struct pchaos *c, enum rs_pipe_stage s);

/* Polls the clients (and supervises) for up to ms milliseconds. 0, or 1 on a failure. */
int pchaos_poll(struct pchaos *c, uint32_t ms);

/* SIGKILLs stage s (waiting up to 100 ms for it to be busy), reaps it, starts it again. */
int pchaos_kill(struct pchaos *c, enum rs_pipe_stage s);

/* The next stage to kill: every stage of the mask once per round, in shuffled order. */
enum rs_pipe_stage pchaos_next_stage(struct pchaos *c);

/* --- the run ------------------------------------------------------------------------------- */

/* Computes the solo outputs, starts the instance and the clients. 0, RS_TEST_SKIP-free 1. */
int pchaos_start(struct pchaos *c, const struct pchaos_opts *o);

/* Runs the load for ms milliseconds with the kill storm (when kill_max_ms > 0). */
int pchaos_storm(struct pchaos *c, uint64_t ms);

/* Stops submitting and waits (up to limit_ms) for every request's final. 0 when all came. */
int pchaos_drain(struct pchaos *c, uint32_t limit_ms);

/*
 * Waits until every stage runs READY and the table is empty (the linger is
 * over), then audits. Returns the audit's findings (0 = clean).
 */
int pchaos_audit(struct pchaos *c, struct rs_harness_audit *a);

/* Client-side counters summed over the clients. */
void pchaos_client_stats(const struct pchaos *c, struct rs_client_stats *sum);

/* Handles tokenizerd took (1, 2, ...): one per accepted request, plus at most one per
 * tokenizerd killed between taking a handle and publishing its record (it is not reused). */
uint64_t pchaos_accepted(struct pchaos *c);

/*
 * Counts into c->twice_live whether two published records (waiting, running or
 * finished) now hold one client's one request id: a request accepted twice.
 * pchaos_poll runs it on every call.
 */
void pchaos_scan_twice(struct pchaos *c);

/*
 * 1 when every request was accepted once: no scan saw one published twice, and
 * the handles taken are the requests plus at most one per tokenizerd death or
 * fenced exit (killed or fenced between taking a handle and publishing its
 * record, it leaves that handle unused; the resend takes the next). Else 0, with the figures on stderr.
 */
int pchaos_accepted_once(struct pchaos *c);

void pchaos_print(struct pchaos *c, FILE *f);

/* Stops everything and frees what c holds (keep_logs: leave the daemons' logs). */
void pchaos_stop(struct pchaos *c, int keep_logs);

#endif

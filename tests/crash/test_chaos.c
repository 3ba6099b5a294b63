/* SPDX-License-Identifier: MIT */
/*
 * The crash model through the four real daemons, this test their supervisor
 * (pipeline_chaos.h), under 8 clients of mixed requests: a 60 s SIGKILL storm
 * (launcherd mid-step, postprocd mid-stream); each stage SIGSTOPped, replaced
 * and resumed (exit 1, nothing written); killed inside its own recovery; every
 * doorbell dropped, then duplicated. Then: each output equal to its solo run,
 * each delta delivered once, each request accepted once, a clean segment audit.
 * About 2 minutes, in the ASan build too (RS_CHAOS_SECONDS sets the storm). The
 * supervisor's own death is it.ops.supervisor_kill_no_orphans_and_recovery.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/pipeline.h"
#include "tests/crash/pipeline_chaos.h"
#include "tests/rs_test.h"

#define STORM_S 60

static struct pchaos ch; /* large: kinds and solo outputs */

/* The storm length in seconds: RS_CHAOS_SECONDS, else STORM_S. */
static uint32_t storm_seconds(void)
{
    const char *e = getenv("RS_CHAOS_SECONDS");
    return e != NULL && atoi(e) > 0 ? (uint32_t)atoi(e) : STORM_S;
}

static int begin(struct pchaos_opts *o, char *model, size_t cap)
{
    if (rs_test_refdata("stories260K.gguf", model, cap) == NULL)
        return RS_TEST_SKIP;
    pchaos_opts_default(o, model);
    return 0;
}

/*
 * Drains the load, audits, prints the figures and checks the verdict: all
 * completed identical, nothing lost, duplicated or wrong, one acceptance per
 * request (no request published twice; handles left unused only by killed
 * tokenizerds), no unexpected exit, a clean segment.
 */
static int finish(struct pchaos *c, int failed)
{
    struct rs_harness_audit a;
    failed = failed || pchaos_drain(c, 180000) != 0;
    int findings = failed ? -1 : pchaos_audit(c, &a);
    pchaos_print(c, stderr);
    uint32_t odd = 0;
    for (int s = 0; s < RS_PIPE_N_STAGES; s++)
        odd += c->st[s].unexpected;
    failed = failed || findings != 0 || odd != 0 || c->lost || c->duplicated || c->wrong ||
             c->completed != c->submitted || c->submitted == 0 || !pchaos_accepted_once(c);
    if (failed)
        fprintf(stderr, "chaos failed: audit %d, odd exits %u\n", findings, odd);
    return failed;
}

static int test_random_sigkills_under_load_lose_nothing(void)
{
    char model[512];
    struct pchaos_opts o;
    int rc = begin(&o, model, sizeof(model));
    if (rc != 0)
        return rc;
    uint32_t secs = storm_seconds(), min_kills = secs / 6 < 10 ? secs / 6 : 10;
    int failed = pchaos_start(&ch, &o) != 0 || pchaos_storm(&ch, (uint64_t)secs * 1000) != 0;
    failed = finish(&ch, failed);
    for (int s = 0; s < RS_PIPE_N_STAGES && !failed; s++)
        if (ch.st[s].kills < min_kills) {
            fprintf(stderr, "%s killed %u times\n", rs_pipe_stage_name(s), ch.st[s].kills);
            failed = 1;
        }
    uint32_t mid_step = ch.st[RS_PIPE_STAGE_LAUNCHERD].kills_busy;
    uint32_t mid_stream = ch.st[RS_PIPE_STAGE_POSTPROCD].kills_busy;
    fprintf(stderr, "%u s storm: launcherd killed mid-step %u times, postprocd mid-stream %u\n",
            secs, mid_step, mid_stream);
    failed = failed || mid_step == 0 || mid_stream == 0;
    pchaos_stop(&ch, failed);
    return failed;
}

/* 'R', 'S', 'T' (stopped), ... of process pid from /proc; 0 when it is gone. */
static char proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    size_t n = f != NULL ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    return p != NULL && p[1] == ' ' ? p[2] : 0;
}

/* Keeps the load going until stage s's process is stopped (up to 30 s). */
static int wait_stopped(struct pchaos *c, enum rs_pipe_stage s)
{
    for (uint64_t end = rs_clock_ms() + 30000; rs_clock_ms() < end;) {
        if (c->h.pid[s] > 0 && proc_state(c->h.pid[s]) == 'T')
            return 0;
        if (pchaos_poll(c, 5) != 0)
            return 1;
    }
    fprintf(stderr, "%s never stopped (%s)\n", rs_pipe_stage_name(s), c->st[s].env);
    return 1;
}

/* Keeps the load going until the zombie `old` exits (up to 60 s: under ASan its exit runs the
 * leak check, which has taken over 10 s on a loaded host); its exit code, or -1. */
static int wait_zombie(struct pchaos *c, pid_t old)
{
    int st;
    for (uint64_t end = rs_clock_ms() + 60000; rs_clock_ms() < end;) {
        pid_t r = waitpid(old, &st, WNOHANG);
        if (r == old)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0 || pchaos_poll(c, 5) != 0)
            return -1;
    }
    kill(old, SIGKILL);
    waitpid(old, &st, 0);
    return -1;
}

/*
 * What a fenced process must not change: every request record (state word
 * and all its bytes: intake, finish word, schedulerd's fields, cursors,
 * token list words), every KV row and the shared counters. Records CLAIMED
 * by the fenced incarnation when the first snapshot is taken (skip[] set
 * then, reused for the second) are left out: recovery quarantines them for
 * it, and its fenced claim undoes itself (CLAIMED -> FREE, same generation).
 */
static uint8_t *snapshot(struct pchaos *c, uint32_t zombie_inc, uint8_t *skip, int first,
                         size_t *len)
{
    struct rs_pipe *v = rs_harness_view(&c->h);
    uint32_t n = rs_table_size(v->requests);
    uint64_t rb = rs_table_record_bytes(v->requests), kv = v->cfg.max_seqs * v->kvrow_bytes;
    *len = (size_t)n * (rb + 12) + kv + 3 * sizeof(uint64_t);
    uint8_t *buf = calloc(1, *len), *p = buf;
    for (uint32_t i = 0; buf != NULL && i < n; i++, p += rb + 12) {
        uint32_t w[3];
        rs_table_peek(v->requests, i, &w[0], &w[1], &w[2]);
        if (first)
            skip[i] = w[0] == RS_TABLE_CLAIMED && w[2] == zombie_inc;
        if (skip[i])
            continue;
        memcpy(p, w, sizeof(w));
        memcpy(p + 12, rs_table_record(v->requests, i), rb);
    }
    if (buf != NULL) {
        memcpy(p, v->kv_rows, kv);
        uint64_t sh[3] = {atomic_load(&v->shared->next_handle), atomic_load(&v->shared->next_batch),
                          atomic_load(&v->shared->kv_launcher_inc)};
        memcpy(p + kv, sh, sizeof(sh));
    }
    return buf;
}

/* SIGSTOPs (sig) or SIGCONTs every daemon the harness runs (the zombie is not one of them). */
static void freeze_all(struct pchaos *c, int sig)
{
    for (int t = 0; t < RS_PIPE_N_STAGES; t++)
        if (c->h.pid[t] > 0) {
            kill(c->h.pid[t], sig);
            for (int i = 0; i < 2000 && sig == SIGSTOP && proc_state(c->h.pid[t]) != 'T'; i++)
                usleep(1000);
        }
}

/*
 * 1 when stage s's successor still owns what the fenced zombie must leave
 * alone: its role (current, READY, alive) and its socket paths in the
 * runtime directory (a fenced process closes nothing: ipc/stage.h).
 */
static int successor_intact(struct pchaos *c, enum rs_pipe_stage s)
{
    struct rs_role_info info;
    char path[512];
    struct stat st;
    if (rs_harness_role(&c->h, s, &info) != RS_OK || info.phase != RS_ROLE_READY || !info.alive)
        return 0;
    int door = s != RS_PIPE_STAGE_TOKENIZERD, sock = s == RS_PIPE_STAGE_TOKENIZERD ||
                                                    s == RS_PIPE_STAGE_POSTPROCD;
    snprintf(path, sizeof(path), "%s/%s.door", c->h.rundir, rs_pipe_stage_name(s));
    if (door && (stat(path, &st) != 0 || !S_ISSOCK(st.st_mode)))
        return 0;
    snprintf(path, sizeof(path), "%s/%s.sock", c->h.rundir, rs_pipe_stage_name(s));
    return !sock || (stat(path, &st) == 0 && S_ISSOCK(st.st_mode));
}

/*
 * Resumes the fenced zombie `old` of stage s while the other stages are
 * frozen, so that anything it writes shows: it must exit 1 and leave the
 * request table, token lists, KV rows, its successor's role and its
 * successor's socket paths as they were.
 */
static int resume_zombie(struct pchaos *c, enum rs_pipe_stage s, pid_t old, uint32_t inc,
                         int strict)
{
    size_t len_a, len_b;
    uint8_t *skip = calloc(rs_table_size(rs_harness_view(&c->h)->requests), 1);
    freeze_all(c, SIGSTOP);
    uint8_t *a = skip != NULL ? snapshot(c, inc, skip, 1, &len_a) : NULL;
    kill(old, SIGCONT);
    int code = wait_zombie(c, old);
    uint8_t *b = skip != NULL ? snapshot(c, inc, skip, 0, &len_b) : NULL;
    int same = a != NULL && b != NULL && len_a == len_b && memcmp(a, b, len_a) == 0;
    freeze_all(c, SIGCONT);
    for (size_t i = 0; !same && a != NULL && b != NULL && i < len_a; i++)
        if (a[i] != b[i]) {
            fprintf(stderr, "first change at byte %zu of the snapshot\n", i);
            break;
        }
    free(a);
    free(b);
    free(skip);
    fprintf(stderr, "%s resumed after its replacement: exit %d, %s\n", rs_pipe_stage_name(s), code,
            same ? "wrote nothing" : "CHANGED SHARED MEMORY");
    RS_CHECK_MSG(code == 1, "the resumed %s exited %d, not 1 (fenced)", rs_pipe_stage_name(s),
                 code);
    RS_CHECK_MSG(same || !strict, "the fenced %s wrote into shared memory", rs_pipe_stage_name(s));
    RS_CHECK_MSG(successor_intact(c, s), "the fenced %s touched its successor's role or sockets",
                 rs_pipe_stage_name(s));
    c->st[s].fenced_exits++;
    return 0;
}

/*
 * Stops stage s (stop_spec NULL: SIGSTOP while it is busy; else restarted
 * with the ":stop" failpoint stop_spec and left to stop itself), starts a
 * replacement, lets it serve, then resumes the old process (resume_zombie).
 */
static int fence_one(struct pchaos *c, enum rs_pipe_stage s, const char *stop_spec)
{
    struct rs_role_info info;
    if (stop_spec != NULL) {
        rs_harness_signal(&c->h, s, SIGKILL);
        c->st[s].kills++;
        if (pchaos_spawn(c, s, 0, stop_spec) != 0)
            return 1;
    } else {
        for (uint64_t end = rs_clock_ms() + 200; !pchaos_busy(c, s) && rs_clock_ms() < end;)
            pchaos_poll(c, 1);
        kill(c->h.pid[s], SIGSTOP);
    }
    if (wait_stopped(c, s) != 0 || rs_harness_role(&c->h, s, &info) != RS_OK)
        return 1;
    fprintf(stderr, "%s stopped%s%s\n", rs_pipe_stage_name(s), stop_spec ? " by " : "",
            stop_spec ? stop_spec : "");
    pid_t old = rs_harness_forget(&c->h, s);
    if (pchaos_spawn(c, s, 0, "") != 0)
        return 1;
    for (uint64_t end = rs_clock_ms() + 30000; c->st[s].awaiting_ready && rs_clock_ms() < end;)
        if (pchaos_poll(c, 5) != 0)
            return 1;
    if (pchaos_poll(c, 400) != 0) /* the replacement serves while the zombie sleeps */
        return 1;
    return resume_zombie(c, s, old, info.inc, stop_spec != NULL) != 0 || pchaos_poll(c, 300) != 0;
}

static int test_stopped_stage_replaced_then_resumed_is_fenced(void)
{
    /* Where each stage stops itself in the middle of its work (ipc/README.md failpoints). */
    static const char *const stops[RS_PIPE_N_STAGES][3] = {
        {"RS_FAILPOINT=table.claim.after_cas:3:stop", "RS_FAILPOINT=arena.append.written:4:stop",
         NULL},
        {"RS_FAILPOINT=sched.batch.marked:20:stop", "RS_FAILPOINT=sched.admit.row:6:stop",
         "RS_FAILPOINT=sched.apply.row:40:stop"},
        {"RS_FAILPOINT=launcher.step.after_forward:20:stop",
         "RS_FAILPOINT=launcher.row.after_append:30:stop", NULL},
        {"RS_FAILPOINT=postprocd.delta_sent:30:stop", "RS_FAILPOINT=postprocd.final_sent:5:stop",
         NULL}};
    char model[512];
    struct pchaos_opts o;
    int rc = begin(&o, model, sizeof(model));
    if (rc != 0)
        return rc;
    o.kill_max_ms = 0;
    o.failpoint_pct = 0;
    int failed = pchaos_start(&ch, &o) != 0 || pchaos_poll(&ch, 500) != 0;
    for (int s = 0; s < RS_PIPE_N_STAGES && !failed; s++) {
        failed = fence_one(&ch, (enum rs_pipe_stage)s, NULL) != 0;
        for (int k = 0; k < 3 && stops[s][k] != NULL && !failed; k++)
            failed = fence_one(&ch, (enum rs_pipe_stage)s, stops[s][k]) != 0;
    }
    failed = finish(&ch, failed);
    pchaos_stop(&ch, failed);
    return failed;
}

/*
 * Kills stage s and starts it armed with `spec` (a failpoint in its
 * recovery): it must die there, its role still RECOVERING; the next start is
 * clean. fired_required: a failpoint that must fire (else it may not have
 * had anything to recover).
 */
static int kill_in_recovery(struct pchaos *c, enum rs_pipe_stage s, const char *spec,
                            int fired_required)
{
    struct rs_role_info info;
    rs_harness_signal(&c->h, s, SIGKILL);
    c->st[s].kills++;
    if (pchaos_spawn(c, s, 0, spec) != 0)
        return 1;
    pid_t pid = c->h.pid[s];
    int code = -1;
    for (uint64_t end = rs_clock_ms() + 30000; code < 0 && rs_clock_ms() < end;) {
        if (rs_harness_ready_ns(&c->h, s) != 0)
            break; /* recovered without reaching the failpoint */
        pchaos_top_up(c);
        if (rs_client_poll_set(c->clients, c->o.n_clients, 2) < 0)
            return 1;
        code = rs_harness_wait_exit(&c->h, s, 0);
    }
    int in_recovery = code == 128 + SIGKILL && rs_harness_role(&c->h, s, &info) == RS_OK &&
                      info.pid == (uint32_t)pid && info.phase == RS_ROLE_RECOVERING;
    fprintf(stderr, "%s with %s: %s\n", rs_pipe_stage_name(s), spec,
            in_recovery ? "died in recovery"
            : code < 0  ? "recovered (did not fire)"
                        : "odd exit");
    RS_CHECK_MSG(in_recovery || (code < 0 && !fired_required), "%s: exit %d, role pid %u phase %d",
                 spec, code, info.pid, (int)info.phase);
    if (in_recovery) {
        c->st[s].failpoint_deaths++;
        if (pchaos_spawn(c, s, 0, "") != 0)
            return 1;
    }
    return pchaos_poll(c, 300);
}

static int test_stage_killed_during_its_own_recovery(void)
{
    static const char *const deep[RS_PIPE_N_STAGES][2] = {
        {"RS_FAILPOINT=arena.recover.chunk:1", NULL},
        {"RS_FAILPOINT=ring.recover.prod.floor:1", "RS_FAILPOINT=sched.rebuild.record:2"},
        {"RS_FAILPOINT=ring.recover.prod.floor:1", "RS_FAILPOINT=arena.recover.chunk:2"},
        {"RS_FAILPOINT=arena.recover.chunk:1", NULL}};
    char model[512];
    struct pchaos_opts o;
    int rc = begin(&o, model, sizeof(model));
    if (rc != 0)
        return rc;
    o.kill_max_ms = 0;
    o.failpoint_pct = 0;
    int failed = pchaos_start(&ch, &o) != 0 || pchaos_poll(&ch, 500) != 0;
    for (int s = 0; s < RS_PIPE_N_STAGES && !failed; s++) {
        enum rs_pipe_stage st = (enum rs_pipe_stage)s;
        failed = kill_in_recovery(&ch, st, "RS_FAILPOINT=role.start.after_fence:1", 1) != 0;
        for (int k = 0; k < 2 && deep[s][k] != NULL && !failed; k++)
            failed = kill_in_recovery(&ch, st, deep[s][k], 0) != 0;
    }
    failed = finish(&ch, failed);
    pchaos_stop(&ch, failed);
    return failed;
}

/* Whether process pid's environment holds the string want (NAME=VALUE). */
static int env_has(pid_t pid, const char *want)
{
    static char buf[1 << 20];
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
    FILE *f = fopen(path, "r");
    size_t n = f != NULL ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    buf[n] = '\0';
    for (size_t i = 0; i < n; i += strlen(buf + i) + 1)
        if (strcmp(buf + i, want) == 0)
            return 1;
    return 0;
}

/* The load with a short storm while every daemon drops (or duplicates) every doorbell. */
static int doorbell_fault(const char *fault)
{
    char model[512], want[64];
    struct pchaos_opts o;
    int rc = begin(&o, model, sizeof(model));
    if (rc != 0)
        return rc;
    o.doorbell_fault = fault;
    o.kill_min_ms = 500;
    o.kill_max_ms = 1500;
    o.failpoint_pct = 0;
    int failed = pchaos_start(&ch, &o) != 0 || pchaos_storm(&ch, 10000) != 0;
    snprintf(want, sizeof(want), "RS_DOORBELL_FAULT=%s", fault);
    for (int s = 0, waited = 0; s < RS_PIPE_N_STAGES && !failed && waited < 2000; waited++)
        if (rs_harness_ready_ns(&ch.h, (enum rs_pipe_stage)s) != 0)
            s++; /* every stage past exec (its environment is its own) */
        else
            failed = pchaos_poll(&ch, 5) != 0;
    for (int s = 0; s < RS_PIPE_N_STAGES && !failed; s++)
        if (!env_has(ch.h.pid[s], want)) {
            fprintf(stderr, "%s runs without %s\n", rs_pipe_stage_name(s), want);
            failed = 1;
        }
    failed = finish(&ch, failed);
    pchaos_stop(&ch, failed);
    return failed;
}

static int test_every_doorbell_dropped_still_completes(void)
{
    return doorbell_fault("drop");
}

static int test_every_doorbell_duplicated_still_completes(void)
{
    return doorbell_fault("dup");
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_random_sigkills_under_load_lose_nothing),
    RS_TEST(test_stopped_stage_replaced_then_resumed_is_fenced),
    RS_TEST(test_stage_killed_during_its_own_recovery),
    RS_TEST(test_every_doorbell_dropped_still_completes),
    RS_TEST(test_every_doorbell_duplicated_still_completes),
};

RS_TEST_MAIN(cases)

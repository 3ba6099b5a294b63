/* SPDX-License-Identifier: MIT */
/*
 * Starting, killing and restarting the four real daemons of one private
 * instance (pipeline_harness.h). Readiness comes from the segment's role
 * table: a daemon is ready when its own pid holds its role in phase READY.
 * schedulerd starts alone first so exactly one process creates the segment.
 */
#include "tests/pipeline_harness.h"

#include "client/client.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/gguf_facts.h"
#include "ipc/pipeline_kv.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "ipc/role.h"

static const char *const stage_bin[RS_PIPE_N_STAGES] = {
    RS_PIPE_TOKENIZERD, RS_PIPE_SCHEDULERD, RS_PIPE_LAUNCHERD, RS_PIPE_POSTPROCD};

static int make_dirs(struct rs_harness *h)
{
    static atomic_uint counter;
    const char *base = getenv("TMPDIR");
    if (h->o.tmpdir != NULL) {
        snprintf(h->dir, sizeof(h->dir), "%s", h->o.tmpdir);
        mkdir(h->dir, 0700);
    } else {
        snprintf(h->dir, sizeof(h->dir), "%s/rs-harness-XXXXXX", base ? base : "/tmp");
        if (mkdtemp(h->dir) == NULL) {
            fprintf(stderr, "harness: mkdtemp %s: %s\n", h->dir, strerror(errno));
            return -1;
        }
    }
    snprintf(h->rundir, sizeof(h->rundir), "%s/run", h->dir);
    snprintf(h->instance, sizeof(h->instance), "h-%d-%u", (int)getpid(),
             atomic_fetch_add(&counter, 1));
    return 0;
}

static void push_num(const char **argv, int *n, char bufs[][16], int *nb, const char *opt,
                     uint32_t v)
{
    if (v == 0)
        return;
    snprintf(bufs[*nb], 16, "%u", v);
    argv[(*n)++] = opt;
    argv[(*n)++] = bufs[(*nb)++];
}

/* Builds the daemon's argv (NULL-terminated) in argv; bin and bufs hold its strings. */
static void build_argv(const struct rs_harness *h, enum rs_pipe_stage s, char *bin, size_t cap,
                       const char **argv, char bufs[][16])
{
    int n = 0, nb = 0;
    snprintf(bin, cap, "%s/%s", h->bindir, stage_bin[s]);
    const char *fixed[] = {bin, "--model", h->o.model, "--instance", h->instance, "--rundir",
                           h->rundir};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        argv[n++] = fixed[i];
    push_num(argv, &n, bufs, &nb, "--ctx", h->o.n_ctx);
    push_num(argv, &n, bufs, &nb, "--max-requests", h->o.max_requests);
    push_num(argv, &n, bufs, &nb, "--kv-blocks", h->o.n_kv_blocks);
    push_num(argv, &n, bufs, &nb, "--max-seqs", h->o.max_seqs);
    push_num(argv, &n, bufs, &nb, "--max-batched-tokens", h->o.max_batched_tokens);
    if (s == RS_PIPE_STAGE_LAUNCHERD) {
        push_num(argv, &n, bufs, &nb, "--threads",
                 h->o.launcher_threads ? h->o.launcher_threads : 1);
        if (!h->o.fast_kernels)
            argv[n++] = "--deterministic";
    }
    for (int i = 0; i < RS_HARNESS_EXTRA_MAX && h->o.extra[s][i] != NULL; i++)
        argv[n++] = h->o.extra[s][i];
    argv[n] = NULL;
}

rs_err rs_harness_start_stage(struct rs_harness *h, enum rs_pipe_stage s, const char *env_spec,
                              int wait_ready)
{
    char bin[600], bufs[8][16];
    const char *argv[32];
    if (h->pid[s] > 0)
        rs_harness_signal(h, s, SIGKILL);
    build_argv(h, s, bin, sizeof(bin), argv, bufs);
    snprintf(h->log[s], sizeof(h->log[s]), "%s/%s-%u.log", h->dir, stage_bin[s], h->starts[s]++);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "harness: fork: %s\n", strerror(errno));
        return RS_EIO;
    }
    if (pid == 0) {
        int fd = open(h->log[s], O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        if (env_spec != NULL)
            putenv((char *)env_spec);
        execv(bin, (char *const *)argv);
        fprintf(stderr, "harness: exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    h->pid[s] = pid;
    return wait_ready ? rs_harness_wait_ready(h, s, h->o.ready_timeout_ms) : RS_OK;
}

/* Opens the read-only view once the segment is fully created. */
static struct rs_pipe *view_of(struct rs_harness *h)
{
    char path[400], err[256];
    struct stat st;
    static const char *const bound[] = {"schedulerd.door", "launcherd.door", "postprocd.door",
                                        "tokenizerd.sock"};
    if (h->view != NULL)
        return h->view;
    /* A daemon binds its sockets after rs_pipe_open: then the segment is complete, and
     * inspecting it cannot meet a header still being written. */
    int any = 0;
    for (int i = 0; i < 4 && !any; i++) {
        snprintf(path, sizeof(path), "%s/%s", h->rundir, bound[i]);
        any = access(path, F_OK) == 0;
    }
    snprintf(path, sizeof(path), "/dev/shm/ringserve-%s", h->instance);
    if (!any || stat(path, &st) != 0 || st.st_size < 4096)
        return NULL;
    if (rs_pipe_inspect(h->instance, &h->view, err, sizeof(err)) != RS_OK)
        h->view = NULL;
    return h->view;
}

struct rs_pipe *rs_harness_view(struct rs_harness *h)
{
    return view_of(h);
}

static int is_ready(struct rs_harness *h, enum rs_pipe_stage s)
{
    struct rs_pipe *v = view_of(h);
    int role = v != NULL ? rs_role_find(v->shm, stage_bin[s]) : -1;
    struct rs_role_info info;
    return role >= 0 && rs_role_info_at(v->shm, (uint32_t)role, &info) == RS_OK &&
           info.pid == (uint32_t)h->pid[s] && info.phase == RS_ROLE_READY;
}

rs_err rs_harness_wait_ready(struct rs_harness *h, enum rs_pipe_stage s, uint32_t timeout_ms)
{
    uint64_t end = rs_clock_ms() + (timeout_ms ? timeout_ms : 30000);
    while (h->pid[s] > 0) {
        if (is_ready(h, s))
            return RS_OK;
        if (!rs_harness_alive(h, s))
            break;
        if (rs_clock_ms() >= end) {
            fprintf(stderr, "harness: %s not ready after %u ms\n", stage_bin[s],
                    timeout_ms ? timeout_ms : 30000);
            rs_harness_dump_logs(h, s);
            return RS_EAGAIN;
        }
        usleep(2000);
    }
    fprintf(stderr, "harness: %s exited during start-up\n", stage_bin[s]);
    rs_harness_dump_logs(h, s);
    return RS_EIO;
}

static int status_code(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
}

int rs_harness_alive(struct rs_harness *h, enum rs_pipe_stage s)
{
    int st;
    if (h->pid[s] <= 0)
        return 0;
    if (waitpid(h->pid[s], &st, WNOHANG) == h->pid[s]) {
        h->pid[s] = 0;
        return 0;
    }
    return 1;
}

int rs_harness_wait_exit(struct rs_harness *h, enum rs_pipe_stage s, uint32_t timeout_ms)
{
    uint64_t end = rs_clock_ms() + timeout_ms;
    int st;
    while (h->pid[s] > 0) {
        pid_t r = waitpid(h->pid[s], &st, WNOHANG);
        if (r == h->pid[s]) {
            h->pid[s] = 0;
            return status_code(st);
        }
        if (r < 0 && errno != EINTR) {
            h->pid[s] = 0;
            return -1;
        }
        if (rs_clock_ms() >= end)
            return -1;
        usleep(2000);
    }
    return -1;
}

/* One line per thread of pid: name, state letter, kernel wait channel (from /proc). */
static void print_tasks(pid_t pid)
{
    char path[80], st[256], wchan[64];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        st[0] = wchan[0] = '\0';
        snprintf(path, sizeof(path), "/proc/%d/task/%.16s/stat", (int)pid, e->d_name);
        FILE *f = fopen(path, "r");
        if (f != NULL && fgets(st, sizeof(st), f) == NULL)
            st[0] = '\0';
        if (f != NULL)
            fclose(f);
        snprintf(path, sizeof(path), "/proc/%d/task/%.16s/wchan", (int)pid, e->d_name);
        if ((f = fopen(path, "r")) != NULL && fgets(wchan, sizeof(wchan), f) == NULL)
            wchan[0] = '\0';
        if (f != NULL)
            fclose(f);
        char *end = strrchr(st, ')');
        int named = end != NULL && end[1] == ' ';
        fprintf(stderr, "task %s %.*s state %c wchan %s\n", e->d_name,
                named ? (int)(end - st + 1) : 0, st, named ? end[2] : '?', wchan);
    }
    if (d != NULL)
        closedir(d);
    fflush(stderr);
}

/*
 * A daemon that outlived its SIGTERM explains itself: every thread's
 * backtrace from `gdb -batch` (when gdb is installed; at most 60 s) and each
 * thread's kernel state, on stderr, before the harness kills it.
 */
static void backtrace_hung(pid_t pid, const char *name)
{
    char num[16];
    snprintf(num, sizeof(num), "%d", (int)pid);
    fprintf(stderr, "---- %s %d: threads after SIGTERM ----\n", name, (int)pid);
    fflush(stderr);
    pid_t gdb = fork();
    if (gdb == 0) {
        dup2(2, 1);
        execlp("gdb", "gdb", "-nx", "-batch", "-p", num, "-ex", "thread apply all bt", (char *)NULL);
        fprintf(stderr, "harness: no gdb (%s): no backtrace\n", strerror(errno));
        _exit(127);
    }
    uint64_t end = rs_clock_ms() + 60000;
    while (gdb > 0 && waitpid(gdb, NULL, WNOHANG) == 0) {
        if (rs_clock_ms() >= end) {
            kill(gdb, SIGKILL);
            waitpid(gdb, NULL, 0);
            break;
        }
        usleep(10000);
    }
    print_tasks(pid);
}

/*
 * SIGTERM that also reaches a SIGSTOPped daemon. SIGCONT goes first and only
 * to a stopped one: a SIGCONT that lands while the exiting daemon's
 * LeakSanitizer has ptrace-attached its threads discards the attach's SIGSTOP
 * and leaves the sanitizer waiting for a stop that never comes.
 */
static void terminate(pid_t pid)
{
    char path[64], st[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    int stopped = 0;
    if (f != NULL && fgets(st, sizeof(st), f) != NULL) {
        char *end = strrchr(st, ')');
        stopped = end != NULL && (end[2] == 'T' || end[2] == 't');
    }
    if (f != NULL)
        fclose(f);
    if (stopped)
        kill(pid, SIGCONT);
    kill(pid, SIGTERM);
}

/* Waits up to 10 s for a SIGTERMed daemon, then explains and kills it. */
static int reap_or_kill(struct rs_harness *h, enum rs_pipe_stage s)
{
    int code = rs_harness_wait_exit(h, s, 10000);
    if (code < 0 && h->pid[s] > 0) { /* did not stop on SIGTERM */
        fprintf(stderr, "harness: %s ignored SIGTERM for 10 s: killing it\n", stage_bin[s]);
        backtrace_hung(h->pid[s], stage_bin[s]);
        rs_harness_dump_logs(h, s);
        kill(h->pid[s], SIGKILL);
        code = rs_harness_wait_exit(h, s, 10000);
    }
    return code;
}

int rs_harness_signal(struct rs_harness *h, enum rs_pipe_stage s, int sig)
{
    if (h->pid[s] <= 0)
        return 0;
    if (sig == SIGTERM) {
        terminate(h->pid[s]);
        return reap_or_kill(h, s);
    }
    kill(h->pid[s], sig);
    return sig == SIGKILL ? rs_harness_wait_exit(h, s, 10000) : 0;
}

void rs_harness_dump_logs(const struct rs_harness *h, enum rs_pipe_stage s)
{
    for (int i = 0; i < RS_PIPE_N_STAGES; i++) {
        if ((s != RS_PIPE_N_STAGES && i != (int)s) || h->log[i][0] == '\0')
            continue;
        FILE *f = fopen(h->log[i], "r");
        char line[1024];
        fprintf(stderr, "---- %s ----\n", h->log[i]);
        while (f != NULL && fgets(line, sizeof(line), f) != NULL)
            fputs(line, stderr);
        if (f != NULL)
            fclose(f);
    }
}

rs_err rs_harness_start(struct rs_harness *h, const struct rs_harness_opts *o)
{
    static const enum rs_pipe_stage rest[] = {RS_PIPE_STAGE_LAUNCHERD, RS_PIPE_STAGE_TOKENIZERD,
                                              RS_PIPE_STAGE_POSTPROCD};
    memset(h, 0, sizeof(*h));
    h->o = *o;
    if (o->model == NULL)
        return RS_EINVAL;
    const char *bin = o->bindir != NULL ? o->bindir : getenv("RS_BIN");
    snprintf(h->bindir, sizeof(h->bindir), "%s",
             bin != NULL && bin[0] != '\0' ? bin : RS_SOURCE_DIR "/build/bin");
    if (make_dirs(h) != 0)
        return RS_EIO;
    /* schedulerd alone first: it creates the segment the others attach to. */
    rs_err rc = rs_harness_start_stage(h, RS_PIPE_STAGE_SCHEDULERD, NULL, 1);
    for (int i = 0; i < 3 && rc == RS_OK; i++)
        rc = rs_harness_start_stage(h, rest[i], NULL, 0);
    for (int i = 0; i < 3 && rc == RS_OK; i++)
        rc = rs_harness_wait_ready(h, rest[i], o->ready_timeout_ms);
    if (rc != RS_OK)
        rs_harness_stop(h, 1);
    return rc;
}

static void remove_dir(const char *dir, int keep_logs)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[600];
    while (d != NULL && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
            (keep_logs && n > 4 && strcmp(e->d_name + n - 4, ".log") == 0))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (unlink(path) != 0 && (errno == EISDIR || errno == EPERM))
            remove_dir(path, keep_logs);
    }
    if (d != NULL)
        closedir(d);
    rmdir(dir);
}

void rs_harness_stop(struct rs_harness *h, int keep_logs)
{
    for (int s = 0; s < RS_PIPE_N_STAGES; s++)
        if (h->pid[s] > 0)
            terminate(h->pid[s]);
    for (int s = 0; s < RS_PIPE_N_STAGES; s++)
        if (h->pid[s] > 0)
            reap_or_kill(h, (enum rs_pipe_stage)s);
    rs_pipe_close(&h->view);
    char shm[128];
    snprintf(shm, sizeof(shm), "/dev/shm/ringserve-%s", h->instance);
    if (h->instance[0] != '\0' && access(shm, F_OK) == 0)
        rs_pipe_unlink(h->instance);
    if (h->rundir[0] != '\0')
        remove_dir(h->rundir, 0);
    const char *keep = getenv("RS_HARNESS_KEEP_LOGS");
    if (keep != NULL && keep[0] != '\0' && strcmp(keep, "0") != 0)
        keep_logs = 1;
    if (keep_logs && h->dir[0] != '\0')
        fprintf(stderr, "harness: daemon logs kept in %s\n", h->dir);
    if (h->dir[0] != '\0' && h->o.tmpdir == NULL)
        remove_dir(h->dir, keep_logs);
}

/* --- supervision by the test itself, and the audit -------------------------------------- */

rs_err rs_harness_role(struct rs_harness *h, enum rs_pipe_stage s, struct rs_role_info *out)
{
    struct rs_pipe *v = view_of(h);
    int role = v != NULL ? rs_role_find(v->shm, stage_bin[s]) : -1;
    if (role < 0)
        return RS_EAGAIN;
    return rs_role_info_at(v->shm, (uint32_t)role, out);
}

uint64_t rs_harness_ready_ns(struct rs_harness *h, enum rs_pipe_stage s)
{
    struct rs_role_info info;
    if (h->pid[s] <= 0 || rs_harness_role(h, s, &info) != RS_OK)
        return 0;
    return info.pid == (uint32_t)h->pid[s] && info.phase == RS_ROLE_READY ? info.ready_ns : 0;
}

pid_t rs_harness_forget(struct rs_harness *h, enum rs_pipe_stage s)
{
    pid_t pid = h->pid[s];
    h->pid[s] = 0;
    return pid;
}

static int audit_finding(uint64_t n, const char *what)
{
    if (n == 0)
        return 0;
    fprintf(stderr, "audit: %llu %s\n", (unsigned long long)n, what);
    return 1;
}

/* Table: busy records, and claims of incarnations that are no longer current. */
static void audit_table(struct rs_pipe *v, struct rs_harness_audit *a)
{
    struct rs_table_stats st;
    if (rs_table_check(v->requests, &st) != RS_OK)
        a->checks_failed++;
    a->records_busy = st.n_records - st.n_state[RS_TABLE_FREE];
    for (uint32_t i = 0; i < st.n_records; i++) {
        uint32_t state, gen, owner;
        rs_table_peek(v->requests, i, &state, &gen, &owner);
        if (state == RS_TABLE_CLAIMED && rs_role_inc_status(v->shm, owner) != RS_INC_CURRENT)
            a->stale_owners++;
    }
}

/* Rings: slots not FREE, and slots mid-operation whose owner is not current (I4). */
static void audit_ring(struct rs_pipe *v, rs_ring *r, struct rs_harness_audit *a)
{
    struct rs_ring_stats st;
    if (rs_ring_check(r, &st) != RS_OK)
        a->checks_failed++;
    a->ring_busy += st.n_slots - st.n_state[RS_RING_FREE];
    uint64_t mid = st.n_state[RS_RING_WRITING] + st.n_state[RS_RING_READING] +
                   st.n_state[RS_RING_IN_FLIGHT];
    for (uint32_t i = 0; i < st.n_owners && i < 8 && mid > 0; i++)
        if (rs_role_inc_status(v->shm, st.owner[i]) != RS_INC_CURRENT)
            a->stale_owners += st.owner_slots[i];
}

/* KV rows unused and schedulerd's gauges adding up to the pool. */
static void audit_kv(struct rs_pipe *v, struct rs_harness_audit *a)
{
    for (uint32_t s = 0; s < v->cfg.max_seqs; s++) {
        struct rs_pipe_kvrow *row = rs_pipe_kvrow_at(v, s);
        if (atomic_load(&row->owner) != 0 || atomic_load(&row->n_blocks) != 0)
            a->kv_rows_held++;
    }
    _Atomic uint64_t *c = v->metrics->stage[RS_PIPE_STAGE_SCHEDULERD].counter;
    a->kv_blocks_used = atomic_load(&c[RS_M_SCH_KV_USED]);
    a->kv_gauge_mismatch = a->kv_blocks_used + atomic_load(&c[RS_M_SCH_KV_FREE]) +
                                   atomic_load(&c[RS_M_SCH_KV_CACHED]) !=
                           v->cfg.n_kv_blocks;
}

/* Each stage READY in the process the harness runs, and the role invariants. */
static void audit_roles(struct rs_harness *h, struct rs_pipe *v, struct rs_harness_audit *a)
{
    if (rs_role_check(v->shm) != RS_OK)
        a->checks_failed++;
    for (int s = 0; s < RS_PIPE_N_STAGES; s++) {
        struct rs_role_info info;
        if (rs_harness_role(h, (enum rs_pipe_stage)s, &info) != RS_OK || h->pid[s] <= 0 ||
            info.pid != (uint32_t)h->pid[s] || info.phase != RS_ROLE_READY || !info.alive) {
            fprintf(stderr, "audit: role %s: pid %u phase %d alive %d (harness runs %d)\n",
                    stage_bin[s], info.pid, (int)info.phase, info.alive, (int)h->pid[s]);
            a->roles_bad++;
        }
    }
}

int rs_harness_audit(struct rs_harness *h, struct rs_harness_audit *a)
{
    memset(a, 0, sizeof(*a));
    struct rs_pipe *v = view_of(h);
    if (v == NULL) {
        fprintf(stderr, "audit: the segment cannot be inspected\n");
        return 1;
    }
    struct rs_arena_stats st;
    audit_table(v, a);
    if (rs_pipe_req_check(v, NULL) != RS_OK)
        a->checks_failed++;
    if (rs_arena_check(v->tokens, &st) != RS_OK)
        a->checks_failed++;
    a->chunks_reserved = st.n_reserved;
    a->chunks_linked = st.n_linked;
    if (rs_arena_check(v->logprobs, &st) != RS_OK)
        a->checks_failed++;
    a->lp_chunks_busy = st.n_reserved + st.n_linked;
    audit_ring(v, v->batches, a);
    audit_ring(v, v->results, a);
    audit_kv(v, a);
    audit_roles(h, v, a);
    return audit_finding(a->records_busy, "request records not FREE") +
           audit_finding(a->chunks_reserved, "token arena chunks RESERVED") +
           audit_finding(a->chunks_linked, "token arena chunks LINKED") +
           audit_finding(a->lp_chunks_busy, "logprob arena chunks not FREE") +
           audit_finding(a->ring_busy, "ring slots not FREE") +
           audit_finding(a->kv_rows_held, "KV table rows held") +
           audit_finding(a->kv_blocks_used, "KV blocks used (gauge)") +
           audit_finding(a->kv_gauge_mismatch, "KV gauge sums differing from the pool") +
           audit_finding(a->stale_owners, "things held by fenced incarnations") +
           audit_finding(a->roles_bad, "stages not READY in their process") +
           audit_finding(a->checks_failed, "failed invariant checks");
}

rs_err rs_harness_config_resolve(struct rs_pipe_config *c, char *err, size_t err_len)
{
    struct rs_gguf_facts m;
    rs_err rc = rs_gguf_facts_read(c->model_path, &m, err, err_len);
    return rc == RS_OK ? rs_pipe_config_resolve(c, &m, err, err_len) : rc;
}

struct rs_client *rs_harness_client(const struct rs_harness *h, uint32_t timeout_ms)
{
    struct rs_client_opts o;
    rs_client *c = NULL;
    rs_client_opts_default(&o);
    o.rundir = h->rundir;
    o.request_timeout_ms = timeout_ms;
    return rs_client_create(&o, &c) == RS_OK ? c : NULL;
}

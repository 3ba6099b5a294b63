/* SPDX-License-Identifier: MIT */
/*
 * bench_chaos: the whole-pipeline chaos of crash.chaos (tests/crash/pipeline_chaos.h)
 * for a chosen time (default 10 minutes): the four daemons under a steady mixed
 * load while this program SIGKILLs a stage every U(200, 800) ms and restarts it.
 * Prints kills per stage, requests completed / lost / duplicated / wrong against
 * their in-process solo outputs, restart-to-serving (kill -> READY) p50/p99 per
 * stage next to the model's weight load time measured in the same run, and the
 * shared-memory audit after the drain. Exit 0 when nothing was lost, duplicated,
 * changed or leaked. Timings are printed, never asserted.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/opt.h"
#include "ipc/pipeline_config.h"
#include "tests/crash/pipeline_chaos.h"
#include "tests/rs_test.h"

static struct pchaos ch;

struct chaos_args {
    struct pchaos_opts *o;
    int seconds;
    int fault; /* --doorbell-fault: 0 none, 1 drop, 2 dup */
};

static const char *const faults[] = {"none", "drop", "dup", NULL};

/* Checked here, passed on as text (postprocd parses it). */
static int parse_linger(void *dst, const struct rs_opt *o, const char *v, char *err, size_t len)
{
    struct chaos_args *c = dst;
    char *end;
    long ms = strtol(v, &end, 10);
    if (v[0] < '0' || v[0] > '9' || *end != '\0' || ms > 3600000) {
        snprintf(err, len, "option --%s: '%.40s' is not an integer in 0..3600000", o->name, v);
        return -1;
    }
    c->o->linger_ms = v;
    return 0;
}

#define O(f) offsetof(struct pchaos_opts, f)
#define NUM(nm, k, f, lo, hi, h)                                                                  \
    {.name = nm, .kind = k, .off = O(f), .min = lo, .max = hi, .arg = "N", .help = h}
static const struct rs_opt storm_opts[] = {
    {.name = "model", .kind = RS_OPT_ARG, .off = O(model), .arg = "F.gguf",
     .help = "the model (default: stories260K from ../shared/refdata)"},
    NUM("ctx", RS_OPT_U32, n_ctx, 16, 1 << 20, "context tokens"),
    NUM("clients", RS_OPT_U32, n_clients, 1, PCHAOS_MAX_CLIENTS, "clients"),
    NUM("per-client", RS_OPT_U32, per_client, 1, 64, "requests in flight per client"),
    NUM("kill-min", RS_OPT_U32, kill_min_ms, 1, 3600000, "shortest gap between kills, ms"),
    NUM("kill-max", RS_OPT_U32, kill_max_ms, 0, 3600000, "longest gap between kills, ms"),
    NUM("stages", RS_OPT_U32, stage_mask, 0, 15,
        "stages to kill: bit 0 tokenizerd .. bit 3 postprocd"),
    NUM("failpoint-pct", RS_OPT_U32, failpoint_pct, 0, 100, "restarts with a failpoint armed, %"),
    NUM("seed", RS_OPT_U64, seed, 0, 1LL << 62, "the storm's random seed"),
    {.name = "verbose", .kind = RS_OPT_FLAG, .off = O(verbose), .val = 1, .help = "log each kill"},
    {0},
};

static const struct rs_opt run_opts[] = {
    {.name = "seconds", .kind = RS_OPT_INT, .off = offsetof(struct chaos_args, seconds), .min = 1,
     .max = 7 * 86400, .arg = "S", .help = "how long the storm runs (default 600)"},
    {.name = "doorbell-fault", .kind = RS_OPT_CHOICE, .off = offsetof(struct chaos_args, fault),
     .choices = faults, .arg = "drop|dup", .help = "drop or duplicate every doorbell"},
    {.name = "linger-ms", .kind = RS_OPT_CALL, .parse = parse_linger, .arg = "MS",
     .help = "postprocd --linger-ms"},
    {0},
};

static int parse(int argc, char **argv, struct pchaos_opts *o, long *seconds)
{
    struct chaos_args c = {.o = o, .seconds = (int)*seconds};
    struct rs_opt_group g[] = {{"storm", storm_opts, o, NULL}, {"run", run_opts, &c, NULL}};
    int code = rs_opt_main("bench_chaos",
                           "usage: bench_chaos [options]\n"
                           "Runs the kill storm for --seconds on a private instance.\n",
                           g, 2, argc, argv, 0, NULL);
    if (code >= 0)
        return code == 0 ? 1 : 2;
    if (o->kill_max_ms != 0 && o->kill_max_ms < o->kill_min_ms) {
        fprintf(stderr, "bench_chaos: --kill-max is below --kill-min\n");
        return 2;
    }
    o->doorbell_fault = c.fault == 0 ? o->doorbell_fault : faults[c.fault];
    *seconds = c.seconds;
    return 0;
}

/* rs_model_load of the model in this process: the weight-load part of launcherd's restart. */
static double weight_load_ms(const char *model, uint32_t n_ctx)
{
    struct solo_ref s;
    uint64_t t0 = rs_clock_ns();
    if (solo_open(&s, model, n_ctx) != 0)
        return -1;
    double ms = (double)(rs_clock_ns() - t0) / 1e6;
    solo_close(&s);
    return ms;
}

/* The storm in 30 s pieces with a progress line after each. */
static int storm(struct pchaos *c, long seconds)
{
    for (long done = 0; done < seconds;) {
        long piece = seconds - done < 30 ? seconds - done : 30;
        if (pchaos_storm(c, (uint64_t)piece * 1000) != 0)
            return 1;
        done += piece;
        uint32_t kills = 0;
        for (int s = 0; s < RS_PIPE_N_STAGES; s++)
            kills += c->st[s].kills;
        fprintf(stderr,
                "bench_chaos: %ld/%ld s, %u kills, %llu requests completed identical, %llu not\n",
                done, seconds, kills, (unsigned long long)c->completed,
                (unsigned long long)(c->lost + c->duplicated + c->wrong));
    }
    return 0;
}

int main(int argc, char **argv)
{
    static char model[512];
    struct pchaos_opts o;
    long seconds = 600;
    pchaos_opts_default(&o, NULL);
    int pr = parse(argc, argv, &o, &seconds);
    if (pr != 0)
        return pr == 1 ? 0 : 2;
    if (o.model == NULL &&
        (o.model = rs_test_refdata("stories260K.gguf", model, sizeof(model))) == NULL)
        return 2;
    rs_log_set_level(RS_LOG_ERROR);
    double load_ms = weight_load_ms(o.model, o.n_ctx);
    uint64_t t0 = rs_clock_ms();
    int failed = pchaos_start(&ch, &o) != 0 || storm(&ch, seconds) != 0;
    double storm_s = (double)(rs_clock_ms() - t0) / 1000;
    failed = failed || pchaos_drain(&ch, 300000) != 0;
    struct rs_harness_audit a;
    int findings = failed ? -1 : pchaos_audit(&ch, &a);
    printf("bench_chaos: %.0f s storm, kills every %u-%u ms, %u clients x %u requests, "
           "failpoints on %u%% of restarts%s%s\n",
           storm_s, o.kill_min_ms, o.kill_max_ms, o.n_clients, o.per_client, o.failpoint_pct,
           o.doorbell_fault ? ", doorbells " : "", o.doorbell_fault ? o.doorbell_fault : "");
    pchaos_print(&ch, stdout);
    printf("weight load in-process (rs_model_load of %s): %.1f ms\n", o.model, load_ms);
    printf("audit after the drain: %s (%d findings)\n", findings == 0 ? "clean" : "NOT CLEAN",
           findings);
    int bad = failed || findings != 0 || ch.lost || ch.duplicated || ch.wrong ||
              ch.completed != ch.submitted || !pchaos_accepted_once(&ch);
    printf("verdict: %s\n", bad ? "FAILED" : "0 lost, 0 duplicated, 0 changed, 0 leaked");
    pchaos_stop(&ch, bad);
    return bad;
}

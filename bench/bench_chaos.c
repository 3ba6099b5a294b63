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
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "ipc/pipeline_config.h"
#include "tests/crash/pipeline_chaos.h"
#include "tests/rs_test.h"

static struct pchaos ch;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench_chaos [--seconds S] [--model F.gguf] [--ctx N] [--clients N]\n"
            "                   [--per-client N] [--kill-min MS] [--kill-max MS]\n"
            "                   [--stages MASK] [--failpoint-pct P] [--doorbell-fault drop|dup]\n"
            "                   [--linger-ms MS] [--seed S] [--verbose]\n"
            "Runs the kill storm for S seconds (default 600) on stories260K from\n"
            "../shared/refdata unless --model; MASK: bit 0 tokenizerd .. bit 3 postprocd.\n");
}

/* Whole-string integer in [lo, hi], or exits 2. */
static long num(const char *opt, const char *s, long lo, long hi)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "bench_chaos: %s '%s': expected an integer in [%ld, %ld]\n", opt, s, lo,
                hi);
        exit(2);
    }
    return v;
}

static int parse(int argc, char **argv, struct pchaos_opts *o, long *seconds)
{
    static const struct option opts[] = {
        {"seconds", 1, 0, 's'},        {"model", 1, 0, 'm'},      {"ctx", 1, 0, 'x'},
        {"clients", 1, 0, 'c'},        {"per-client", 1, 0, 'p'}, {"kill-min", 1, 0, 'a'},
        {"kill-max", 1, 0, 'b'},       {"stages", 1, 0, 'k'},     {"failpoint-pct", 1, 0, 'f'},
        {"doorbell-fault", 1, 0, 'd'}, {"linger-ms", 1, 0, 'l'},  {"seed", 1, 0, 'r'},
        {"verbose", 0, 0, 'v'},        {"help", 0, 0, 'h'},       {0, 0, 0, 0}};
    int ch_;
    while ((ch_ = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch_) {
        case 's':
            *seconds = num("--seconds", optarg, 1, 7 * 86400);
            break;
        case 'm':
            o->model = optarg;
            break;
        case 'x':
            o->n_ctx = (uint32_t)num("--ctx", optarg, 16, 1 << 20);
            break;
        case 'c':
            o->n_clients = (uint32_t)num("--clients", optarg, 1, PCHAOS_MAX_CLIENTS);
            break;
        case 'p':
            o->per_client = (uint32_t)num("--per-client", optarg, 1, 64);
            break;
        case 'a':
            o->kill_min_ms = (uint32_t)num("--kill-min", optarg, 1, 3600000);
            break;
        case 'b':
            o->kill_max_ms = (uint32_t)num("--kill-max", optarg, 0, 3600000);
            break;
        case 'k':
            o->stage_mask = (unsigned)num("--stages", optarg, 0, 15);
            break;
        case 'f':
            o->failpoint_pct = (uint32_t)num("--failpoint-pct", optarg, 0, 100);
            break;
        case 'd':
            o->doorbell_fault = optarg;
            break;
        case 'l':
            num("--linger-ms", optarg, 0, 3600000), o->linger_ms = optarg;
            break;
        case 'r':
            o->seed = (uint64_t)num("--seed", optarg, 0, 1L << 62);
            break;
        case 'v':
            o->verbose = 1;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc || (o->kill_max_ms != 0 && o->kill_max_ms < o->kill_min_ms) ||
        (o->doorbell_fault != NULL && strcmp(o->doorbell_fault, "drop") != 0 &&
         strcmp(o->doorbell_fault, "dup") != 0)) {
        usage(stderr);
        return 2;
    }
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
    if (parse(argc, argv, &o, &seconds) != 0)
        return 2;
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
              ch.completed != ch.submitted || pchaos_accepted(&ch) != ch.submitted;
    printf("verdict: %s\n", bad ? "FAILED" : "0 lost, 0 duplicated, 0 changed, 0 leaked");
    pchaos_stop(&ch, bad);
    return bad;
}

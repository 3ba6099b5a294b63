/* SPDX-License-Identifier: MIT */
/*
 * The four-daemon part of bench_pipeline_overhead: tokenizerd, schedulerd,
 * launcherd and postprocd started by tests/pipeline_harness.h on the same
 * model and sizes, and one client (client/client.h) that submits the same B
 * requests (prompt ids as given, greedy, ignore_eos, max_tokens = S + 1, no
 * streaming) and times submit -> last final. schedulerd plans its own
 * batches (the requests arrive one by one, so its first steps may hold
 * fewer), which the figure includes, as it includes intake, planning and
 * the final messages. Leaves out: streaming deltas (one message per token).
 */
#ifndef RS_PIPELINE_FOUR_H
#define RS_PIPELINE_FOUR_H

#include <stdint.h>

#include "bench/launch_bench.h"
#include "client/client.h"
#include "ipc/pipeline_config.h"
#include "tests/pipeline_harness.h"

struct four {
    struct rs_harness h;
    rs_client *c;
    uint32_t steps, n_vocab;
    uint32_t got[LD_MAX_SEQS]; /* tokens received per request */
    int32_t *tok;              /* LD_MAX_SEQS x (steps + 1) */
    uint32_t finals, bad;
    uint64_t last_ns;
};

static struct four F;

static void four_cb(const struct rs_client_event *ev)
{
    uint32_t i = (uint32_t)(uintptr_t)ev->user;
    for (uint32_t k = 0; k < ev->n_tokens && F.got[i] < F.steps + 1; k++)
        F.tok[(size_t)i * (F.steps + 1) + F.got[i]++] = (int32_t)ev->tokens[k];
    if (ev->kind == RS_CLIENT_EV_FINAL) {
        F.finals++;
        F.last_ns = ev->recv_ns;
        if (ev->status != RS_CLIENT_OK || ev->finish_reason != RS_WIRE_FINISH_LENGTH) {
            fprintf(stderr, "four daemons: request %u ended %s (%s)\n", i,
                    rs_client_status_name(ev->status), ev->message);
            F.bad++;
        }
    }
}

/* Starts the four daemons with d's sizes and a connected client. 0, or -1 (why printed). */
static int four_open(const struct ld *d, const struct lb_args *a)
{
    static char bindir[300], threads[16], spin[16];
    snprintf(bindir, sizeof(bindir), "%s", a->bin);
    char *slash = strrchr(bindir, '/');
    if (slash != NULL)
        *slash = '\0';
    snprintf(threads, sizeof(threads), "%d", a->threads);
    snprintf(spin, sizeof(spin), "%u", a->spin_us);
    struct rs_harness_opts o;
    memset(&o, 0, sizeof(o));
    o.model = d->cfg.model_path;
    o.n_ctx = d->cfg.n_ctx;
    o.max_requests = 4 * d->cfg.max_requests; /* finished requests linger until freed */
    o.n_kv_blocks = d->cfg.n_kv_blocks;
    o.max_seqs = d->cfg.max_seqs;
    o.max_batched_tokens = d->cfg.max_batched_tokens;
    o.bindir = bindir;
    const char *lx[] = {"--threads", threads, "--spin-us", spin};
    for (int i = 0; i < 4; i++)
        o.extra[RS_PIPE_STAGE_LAUNCHERD][i] = lx[i];
    o.extra[RS_PIPE_STAGE_POSTPROCD][0] = "--linger-ms"; /* free finished records at once */
    o.extra[RS_PIPE_STAGE_POSTPROCD][1] = "0";
    F.steps = a->steps;
    F.n_vocab = d->cfg.n_vocab;
    F.tok = calloc((size_t)LD_MAX_SEQS * (a->steps + 1), sizeof(int32_t));
    if (F.tok == NULL || rs_harness_start(&F.h, &o) != RS_OK)
        return -1;
    struct rs_client_opts co;
    rs_client_opts_default(&co);
    co.instance = F.h.instance;
    co.rundir = F.h.rundir;
    if (rs_client_create(&co, &F.c) != RS_OK)
        return -1;
    for (int ms = 0; ms < 10000 && !rs_client_connected(F.c); ms += 10)
        rs_client_poll(F.c, 10);
    return rs_client_connected(F.c) ? 0 : -1;
}

static void four_close(void)
{
    rs_client_destroy(&F.c);
    rs_harness_stop(&F.h, 0);
    free(F.tok);
    F.tok = NULL;
}

/* B requests through the four daemons; *ns = submit of the first -> last final. 0 on success. */
static int four_phase(const struct lb_args *a, uint32_t B, uint64_t *ns)
{
    uint32_t ids[4096];
    int32_t p[4096];
    memset(F.got, 0, sizeof(F.got));
    F.finals = F.bad = 0;
    uint64_t t0 = rs_clock_ns();
    for (uint32_t i = 0; i < B; i++) {
        lb_prompt(i, a->prompt, F.n_vocab, p);
        for (uint32_t k = 0; k < a->prompt; k++)
            ids[k] = (uint32_t)p[k];
        struct rs_wire_generate g;
        rs_wire_generate_init(&g);
        g.has = RS_WIRE_GEN_PROMPT_IDS | RS_WIRE_GEN_MAX_TOKENS | RS_WIRE_GEN_TEMPERATURE |
                RS_WIRE_GEN_IGNORE_EOS | RS_WIRE_GEN_STREAM;
        g.prompt_ids.n = a->prompt;
        g.prompt_ids.vals = ids;
        g.max_tokens = a->steps + 1;
        g.temperature = 0.0f;
        g.ignore_eos = true;
        g.stream = false;
        if (rs_client_submit(F.c, &g, NULL, four_cb, (void *)(uintptr_t)i, NULL) != RS_OK)
            return -1;
    }
    while (F.finals < B && rs_clock_ns() - t0 < 300ull * 1000000000ull)
        if (rs_client_poll(F.c, 10) < 0)
            return -1;
    *ns = F.last_ns - t0;
    return F.finals == B && F.bad == 0 ? 0 : -1;
}

#endif

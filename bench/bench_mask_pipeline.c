/* SPDX-License-Identifier: MIT */
/*
 * Structured output through the four real daemons: decode throughput of N
 * concurrent requests (default 16) all constrained vs none, alternating in
 * the same run, best of R rounds each, and how often launcherd's sampler
 * waited for its mask row (the mask thread computes it during the forward
 * pass) and for how long. Constrained requests follow a regex that cannot
 * end before max_tokens (EOS banned with logit_bias), unconstrained ones
 * run with ignore_eos, so both generate exactly max_tokens tokens each.
 * Usage: bench_mask_pipeline [--seqs N] [--tokens N] [--rounds N] [--threads N] MODEL.gguf
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "common/clock.h"
#include "ipc/pipeline_metrics.h"
#include "tests/pipeline_harness.h"
#include "tests/stream_rec.h"

#define MAX_SEQS 64

struct opts {
    uint32_t seqs, tokens, rounds, threads;
    const char *model;
};

static void on_event(const struct rs_client_event *ev)
{
    stream_rec_add(ev->user, ev);
}

static void request(struct rs_wire_generate *g, const struct opts *o, int constrained,
                    const struct rs_wire_bias *ban)
{
    static const char *const prompts[] = {"Once upon a time", "The dog", "Lily and Tom",
                                          "One day"};
    static const char re[] = "[a-zA-Z .,!?'\\n]+";
    rs_wire_generate_init(g);
    g->has = RS_WIRE_GEN_PROMPT | RS_WIRE_GEN_MAX_TOKENS | RS_WIRE_GEN_TEMPERATURE |
             RS_WIRE_GEN_STREAM | RS_WIRE_GEN_SEED;
    const char *p = prompts[rs_clock_ns() % 4];
    g->prompt = (struct rs_wire_str){p, (uint32_t)strlen(p)};
    g->max_tokens = o->tokens;
    g->temperature = 0.7f;
    g->seed = 5;
    g->stream = true;
    if (!constrained) {
        g->has |= RS_WIRE_GEN_IGNORE_EOS;
        g->ignore_eos = true;
        return;
    }
    g->has |= RS_WIRE_GEN_CONSTRAINT | RS_WIRE_GEN_LOGIT_BIAS;
    g->cx.kind = RS_WIRE_CX_REGEX;
    g->cx.text = (struct rs_wire_str){re, (uint32_t)strlen(re)};
    g->cx.n_bias = 1;
    g->cx.bias = ban;
}

/* One round: o->seqs requests at once; output tokens per second, or -1. */
static double round_tps(rs_client *c, const struct opts *o, int constrained, uint32_t eos)
{
    struct stream_rec recs[MAX_SEQS];
    struct rs_wire_bias ban = {eos, -100.0f};
    memset(recs, 0, sizeof(recs));
    uint64_t t0 = rs_clock_ns(), tokens = 0;
    char id[RS_CLIENT_ID_CAP];
    for (uint32_t i = 0; i < o->seqs; i++) {
        struct rs_wire_generate g;
        request(&g, o, constrained, &ban);
        if (rs_client_submit(c, &g, 0, on_event, &recs[i], id) != RS_OK)
            return -1;
    }
    for (uint32_t done = 0; done < o->seqs;) {
        if (rs_client_poll(c, 100) < 0)
            return -1;
        done = 0;
        for (uint32_t i = 0; i < o->seqs; i++)
            done += recs[i].n_finals > 0;
    }
    double s = (double)(rs_clock_ns() - t0) / 1e9;
    int bad = 0;
    for (uint32_t i = 0; i < o->seqs; i++) {
        bad |= recs[i].res.status != RS_CLIENT_OK || recs[i].res.n_tokens != o->tokens;
        if (recs[i].res.status != RS_CLIENT_OK || recs[i].res.n_tokens != o->tokens)
            fprintf(stderr, "request %u: %s (%s), %u tokens\n", i,
                    rs_client_status_name(recs[i].res.status), recs[i].res.message,
                    recs[i].res.n_tokens);
        tokens += recs[i].res.n_tokens;
        rs_client_result_fini(&recs[i].res);
    }
    return bad ? -1 : (double)tokens / s;
}

static int parse(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {{"seqs", 1, 0, 's'}, {"tokens", 1, 0, 't'},
                                       {"rounds", 1, 0, 'r'}, {"threads", 1, 0, 'j'}, {0}};
    *o = (struct opts){.seqs = 16, .tokens = 96, .rounds = 3, .threads = 0};
    for (int ch; (ch = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        uint32_t v = (uint32_t)strtoul(optarg ? optarg : "0", NULL, 10);
        if (ch == 's' && v >= 1 && v <= MAX_SEQS)
            o->seqs = v;
        else if (ch == 't' && v >= 1)
            o->tokens = v;
        else if (ch == 'r' && v >= 1)
            o->rounds = v;
        else if (ch == 'j')
            o->threads = v;
        else
            return 1;
    }
    if (optind != argc - 1)
        return 1;
    o->model = argv[optind];
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: %s [--seqs N] [--tokens N] [--rounds N] [--threads N] "
                "MODEL.gguf\n", argv[0]);
        return 2;
    }
    struct rs_harness h = {0};
    struct rs_harness_opts ho = {.model = o.model, .n_ctx = 512, .max_requests = 128,
                                 .max_seqs = o.seqs, .launcher_threads = o.threads,
                                 .fast_kernels = 1};
    if (rs_harness_start(&h, &ho) != RS_OK)
        return 1;
    struct rs_client_opts co;
    rs_client *c = NULL;
    rs_client_opts_default(&co);
    co.rundir = h.rundir;
    co.request_timeout_ms = 600000;
    double best[2] = {0, 0};
    int rc = rs_client_create(&co, &c) != RS_OK;
    for (uint32_t r = 0; rc == 0 && r < o.rounds * 2; r++) {
        double tps = round_tps(c, &o, (int)(r & 1), 2 /* the llama vocabs' </s> */);
        rc = tps < 0;
        if (tps > best[r & 1])
            best[r & 1] = tps;
    }
    struct rs_pipe *v = rs_harness_view(&h);
    if (rc == 0 && v != NULL) {
        struct rs_metrics_block *m = &v->metrics->stage[RS_PIPE_STAGE_LAUNCHERD];
        uint64_t rows = m->counter[RS_M_LAU_MASK_ROWS], waits = m->counter[RS_M_LAU_MASK_WAITS];
        printf("%u sequences x %u tokens, best of %u rounds each, alternating\n", o.seqs,
               o.tokens, o.rounds);
        printf("  unconstrained: %8.1f output tok/s\n", best[0]);
        printf("  constrained  : %8.1f output tok/s (%.2fx)\n", best[1],
               best[0] > 0 ? best[1] / best[0] : 0.0);
        printf("  mask rows %llu; sampler waited for %llu of them (%.1f%%), %.1f us mean wait; "
               "mask fill %.1f us mean\n", (unsigned long long)rows, (unsigned long long)waits,
               rows ? 100.0 * (double)waits / (double)rows : 0.0,
               rs_hist_mean(&m->hist[RS_H_LAU_MASK_WAIT]),
               rs_hist_mean(&m->hist[RS_H_LAU_MASK]));
    }
    rs_client_destroy(&c);
    rs_harness_stop(&h, rc);
    return rc;
}

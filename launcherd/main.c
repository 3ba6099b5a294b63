/* SPDX-License-Identifier: MIT */
/*
 * launcherd: the stage that runs the model. Loads the weights, the vocab's
 * stop ids and a paged KV cache, then opens the pipeline as the launcher (a
 * new incarnation: the fence that tells schedulerd every K/V it assumed is
 * gone), and serves: one model step per batch from the batch ring, sampled
 * tokens appended to the requests' lists, one result per batch in the result
 * ring, doorbells to schedulerd and postprocd. The weight load time and the
 * time from opening the pipeline to serving are logged separately (DESIGN.md
 * §3: restart-to-serving <= 100 ms plus weight load).
 * The backend is --backend (default auto: the GPU when the CUDA backend
 * loads, else the CPU; the log says which); on the GPU the segment mapping
 * is registered for DMA (rs_shm_cuda_register). Placement (--cpus, --numa,
 * else the GPU's NUMA node) is applied before any thread starts.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/placement.h"
#include "ipc/pipeline.h"
#include "ipc/rundir.h"
#include "launcherd/launcher.h"

#define EXIT_USAGE 2

static void usage(FILE *f)
{
    fprintf(f,
            "usage: launcherd --model PATH [pipeline options] [--threads N] [--isa ISA]\n"
            "                 [--group NAME] [--backend B] [--tp N] [--deterministic]\n"
            "                 [--cpus LIST] [--numa N]\n"
            "Runs the model for one ringserve instance: one forward step per batch that\n"
            "schedulerd writes, sampled tokens into the requests' token lists.\n"
            "launcherd options:\n"
            "  --threads N              model threads (default 0: every CPU it may use)\n"
            "  --isa auto|avx2|portable CPU kernels (default auto: the best the CPU has)\n"
            "  --group NAME             runtime directory group, as the frontends' --group\n"
            "  --spin-us N              after each batch, poll for the next one N us before\n"
            "                           sleeping on the doorbell (default 0: off; costs a core)\n"
            "  --backend auto|cpu|cuda  model backend (default auto: the GPU when the CUDA\n"
            "                           backend loads, else the CPU; the log says which)\n"
            "  --tp N                   tensor parallelism: heads and FFN columns in N shards\n"
            "                           (CPU backend: over its threads; default 1)\n"
            "  --deterministic          batch-invariant kernels on the GPU too (a request's\n"
            "                           tokens do not depend on its companions; no cuBLAS)\n"
            "%s%s",
            rs_place_options_help(), rs_pipe_options_help());
}

static int parse_int(const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (s[0] == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

/* launcherd's own options: 1 consumed (with its value), 0 unknown, -1 bad value (err set). */
static int parse_own(struct launcher_opts *o, int argc, char **argv, int *i, char *err,
                     size_t err_len)
{
    const char *opt = argv[*i];
    int placed = rs_place_parse_option(&o->place, argc, argv, i, err, err_len);
    if (placed != 0)
        return placed;
    if (strcmp(opt, "--backend") == 0) {
        const char *v = *i + 1 < argc ? argv[++*i] : "";
        if (strcmp(v, "auto") != 0 && strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0) {
            snprintf(err, err_len, "option --backend: '%s' is not auto, cpu or cuda", v);
            return -1;
        }
        snprintf(o->backend, sizeof(o->backend), "%s", v);
        return 1;
    }
    if (strcmp(opt, "--deterministic") == 0) {
        o->deterministic = 1;
        return 1;
    }
    if (strcmp(opt, "--tp") == 0) {
        const char *v = *i + 1 < argc ? argv[++*i] : "";
        if (parse_int(v, 1, 64, &o->tp) != 0) {
            snprintf(err, err_len, "option --tp: '%s' is not an integer in 1..64", v);
            return -1;
        }
        return 1;
    }
    if (strcmp(opt, "--threads") != 0 && strcmp(opt, "--isa") != 0 && strcmp(opt, "--group") != 0 &&
        strcmp(opt, "--spin-us") != 0)
        return 0;
    if (*i + 1 >= argc) {
        snprintf(err, err_len, "option %s needs a value", opt);
        return -1;
    }
    const char *v = argv[++*i];
    int spin;
    if (strcmp(opt, "--threads") == 0) {
        if (parse_int(v, 0, 1024, &o->n_threads) != 0) {
            snprintf(err, err_len, "option --threads: '%s' is not an integer in 0..1024", v);
            return -1;
        }
    } else if (strcmp(opt, "--spin-us") == 0) {
        if (parse_int(v, 0, 1000000, &spin) != 0) {
            snprintf(err, err_len, "option --spin-us: '%s' is not an integer in 0..1000000", v);
            return -1;
        }
        o->spin_us = (unsigned)spin;
    } else if (strcmp(opt, "--isa") == 0) {
        if (strcmp(v, "auto") == 0)
            o->isa = RS_MODEL_ISA_AUTO;
        else if (strcmp(v, "avx2") == 0)
            o->isa = RS_MODEL_ISA_AVX2;
        else if (strcmp(v, "portable") == 0)
            o->isa = RS_MODEL_ISA_PORTABLE;
        else {
            snprintf(err, err_len, "option --isa: '%s' is not auto, avx2 or portable", v);
            return -1;
        }
    } else if (strlen(v) == 0 || strlen(v) >= sizeof(o->group)) {
        snprintf(err, err_len, "option --group: name empty or longer than %zu bytes",
                 sizeof(o->group) - 1);
        return -1;
    } else {
        snprintf(o->group, sizeof(o->group), "%s", v);
    }
    return 1;
}

/* 0 to run, 1 after --help, -1 after printing a usage error. */
static int parse_args(int argc, char **argv, struct rs_pipe_config *cfg, char *rundir,
                      size_t rundir_len, struct launcher_opts *o)
{
    char err[512];
    rs_pipe_config_default(cfg);
    memset(o, 0, sizeof(*o));
    o->isa = RS_MODEL_ISA_AUTO;
    snprintf(o->backend, sizeof(o->backend), "auto");
    rs_place_opts_default(&o->place);
    rundir[0] = '\0';
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 1;
        }
        int rc = rs_pipe_parse_option(cfg, rundir, rundir_len, argc, argv, &i, err, sizeof(err));
        if (rc == 0)
            rc = parse_own(o, argc, argv, &i, err, sizeof(err));
        if (rc == 0)
            snprintf(err, sizeof(err), "unknown option '%s'", argv[i]);
        if (rc <= 0) {
            fprintf(stderr, "launcherd: %s (see --help)\n", err);
            return -1;
        }
    }
    if (rundir[0] == '\0')
        rs_rundir_default(cfg->instance, rundir, rundir_len);
    struct rs_gguf_facts facts;
    if (cfg->model_path[0] == '\0') {
        fprintf(stderr, "launcherd: no model: pass --model PATH\n");
        return -1;
    }
    if (rs_gguf_facts_read(cfg->model_path, &facts, err, sizeof(err)) != RS_OK ||
        rs_pipe_config_resolve(cfg, &facts, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "launcherd: %s\n", err);
        return -1;
    }
    return 0;
}

/* Its CPUs and NUMA node (placement.h), before any thread starts; 0, or the exit code. */
static int place_process(const struct launcher_opts *o, rs_place **pl, struct rs_place_plan *plan)
{
    char err[512];
    rs_err rc = rs_place_setup("launcherd", RS_PLACE_LAUNCHER, &o->place, RS_PLACE_GPU_AUTO, pl,
                               plan, err, sizeof(err));
    if (rc == RS_OK)
        return 0;
    rs_log_error("placement: %s", err);
    return rc == RS_EINVAL ? EXIT_USAGE : 1;
}

/* On the GPU: this mapping registered for DMA (each start: the old one died with its process).
 * On a NUMA host: the segment's pages bound to the launcher's node. */
static void pin_segment(struct launcher *l, rs_place *pl, const struct rs_place_plan *plan)
{
    if (rs_model_host_dma(l->model)) {
        rs_err rc = rs_shm_cuda_register(l->p->shm);
        if (rc == RS_OK)
            rs_log_info("segment mapping registered for DMA (cudaHostRegister)");
        else
            rs_log_warn("segment not registered for DMA (%s): ring copies are staged",
                        rs_strerror(rc));
    }
    struct rs_shm_info info;
    rs_shm_get_info(l->p->shm, &info);
    if (rs_place_bind_memory(pl, plan, rs_shm_base(l->p->shm), info.size) != RS_OK)
        rs_log_warn("segment pages not bound to NUMA node %d", plan->node);
}

/* Opens the pipeline (the fence), the runtime directory and the doorbells; then ready. */
static int start(struct launcher *l, const struct rs_pipe_config *cfg, const char *rundir,
                 const struct launcher_opts *o, void *zctx, struct rs_pipe_doors *doors,
                 rs_place *pl, const struct rs_place_plan *plan)
{
    char err[512];
    uint64_t t0 = rs_clock_ns();
    rs_err rc = rs_pipe_open(cfg, RS_PIPE_STAGE_LAUNCHERD, &l->p, err, sizeof(err));
    if (rc != RS_OK) {
        rs_log_error("cannot open instance %s: %s", cfg->instance, err);
        return -1;
    }
    pin_segment(l, pl, plan);
    if ((rc = rs_rundir_prepare(rundir, o->group[0] ? o->group : NULL)) != RS_OK ||
        (rc = rs_pipe_doors_open(doors, zctx, rundir, RS_PIPE_STAGE_LAUNCHERD)) != RS_OK) {
        rs_log_error("runtime directory %s: %s", rundir, rs_strerror(rc));
        return -1;
    }
    if ((rc = rs_role_ready(l->p->role)) != RS_OK) {
        rs_log_error("a newer launcherd took the role while this one started");
        return -1;
    }
    rs_daemon_notify_ready();
    uint64_t ready_ns = rs_clock_ns() - t0;
    rs_log_info("serving as incarnation %u: ready %.2f ms after opening the pipeline (weights "
                "and KV cache took %.1f ms before that)",
                rs_role_inc(l->p->role), (double)ready_ns / 1e6, (double)l->load_ns / 1e6);
    /* schedulerd also notices the new incarnation in the role table; this only hurries it. */
    rs_pipe_door_ring(doors, RS_PIPE_STAGE_SCHEDULERD, RS_WIRE_DOOR_WAKE, 0, 0);
    return 0;
}

int main(int argc, char **argv)
{
    if (rs_daemon_init("launcherd") != RS_OK)
        return 1;
    struct rs_pipe_config cfg;
    struct launcher_opts opts;
    char rundir[RS_RUNDIR_PATH_MAX + 1];
    int pa = parse_args(argc, argv, &cfg, rundir, sizeof(rundir), &opts);
    if (pa != 0)
        return pa > 0 ? 0 : EXIT_USAGE;
    static struct launcher l; /* large (doorbell buffers): not on the stack */
    l.spin_ns = (uint64_t)opts.spin_us * 1000u;
    char err[512];
    rs_place *pl = NULL;
    struct rs_place_plan plan;
    int placed = place_process(&opts, &pl, &plan);
    if (placed != 0 || launcher_load(&l, &cfg, &opts, err, sizeof(err)) != RS_OK) {
        if (placed == 0)
            rs_log_error("%s", err);
        launcher_unload(&l);
        rs_place_destroy(&pl);
        return placed != 0 ? placed : 1;
    }
    void *zctx = zmq_ctx_new();
    struct rs_pipe_doors doors;
    memset(&doors, 0, sizeof(doors));
    int code = zctx == NULL ? 1 : start(&l, &cfg, rundir, &opts, zctx, &doors, pl, &plan) != 0;
    if (code == 0)
        code = launcher_serve(&l, &doors);
    if (code == 0) {
        rs_daemon_notify_stopping();
        rs_log_info("stopping");
    }
    rs_pipe_doors_close(&doors);
    if (zctx != NULL)
        zmq_ctx_term(zctx);
    rs_pipe_close(&l.p);
    launcher_unload(&l);
    rs_place_destroy(&pl);
    return code;
}

/* SPDX-License-Identifier: MIT */
/*
 * launcherd: the stage that runs the model. Its life (options, the fence,
 * exits) is the stage skeleton's (ipc/stage.h); here are its hooks: its own
 * options, the weights, the vocab's stop ids and a paged KV cache before
 * the fence (a bad model never fences a running launcher), the segment
 * pinned for DMA once the instance is open (the new incarnation tells
 * schedulerd every K/V it assumed is gone), and one model step per batch
 * in each pass (serve.c). The weight load time and the time from opening
 * the pipeline to serving are logged separately (DESIGN.md §3:
 * restart-to-serving <= 100 ms plus weight load). The backend is --backend
 * (default auto: the GPU when the CUDA backend loads, else the CPU; the
 * log says which); placement (--cpus, --numa, else the GPU's NUMA node) is
 * applied before any thread starts.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "ipc/stage.h"
#include "launcherd/launcher.h"

struct launcherd {
    struct launcher l; /* large (doorbell buffers) */
    struct launcher_opts o;
};

static struct launcherd the_daemon = {
    .o = {.isa = RS_MODEL_ISA_AUTO, .backend = "auto", .dot = RS_MODEL_DOT_AUTO},
}; /* static: a fenced exit leaves it as it is (stage.h) */

static int parse_backend(void *dst, const struct rs_opt *o, const char *v, char *err, size_t len)
{
    struct launcher_opts *lo = dst;
    (void)o;
    if (strcmp(v, "auto") != 0 && strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0) {
        snprintf(err, len, "option --backend: '%.80s' is not auto, cpu or cuda", v);
        return -1;
    }
    snprintf(lo->backend, sizeof(lo->backend), "%s", v);
    return 0;
}

#define LO(f) offsetof(struct launcher_opts, f)

const struct rs_opt launcher_opt_table[] = {
    {.name = "threads", .kind = RS_OPT_INT, .off = LO(n_threads), .min = 0, .max = 1024,
     .arg = "N", .help = "model threads (default 0: every CPU it may use)"},
    {.name = "isa", .kind = RS_OPT_CHOICE, .off = LO(isa), .choices = rs_model_isa_names,
     .choice_vals = rs_model_isa_values, .arg = "auto|avx512|avx2|portable",
     .help = "CPU kernels (default auto: the best the CPU has)"},
    {.name = "spin-us", .kind = RS_OPT_U32, .off = LO(spin_us), .min = 0, .max = 1000000,
     .arg = "N",
     .help = "after each batch, poll for the next one N us before\n"
             "sleeping on the doorbell (default 0: off; costs a core)"},
    {.name = "backend", .kind = RS_OPT_CALL, .parse = parse_backend, .arg = "auto|cpu|cuda",
     .help = "model backend (default auto: the GPU when the CUDA\n"
             "backend loads, else the CPU; the log says which)"},
    {.name = "tp", .kind = RS_OPT_INT, .off = LO(tp), .min = 1, .max = 64, .arg = "N",
     .help = "tensor parallelism: heads and FFN columns in N shards\n"
             "(CPU backend: over its threads; default 1)"},
    {.name = "deterministic", .kind = RS_OPT_FLAG, .off = LO(deterministic), .val = 1,
     .help = "batch-invariant kernels on the GPU too (a request's\n"
             "tokens do not depend on its companions; no cuBLAS)"},
    {.name = "exact-dot", .kind = RS_OPT_FLAG, .off = LO(dot), .val = RS_MODEL_DOT_EXACT,
     .help = "CPU: every quantized weight widened to F32 times F32\n"
             "activations (default: integer dots with AVX-512 VNNI\n"
             "or AVX2, this path on other CPUs)"},
    {.name = "int8-dot", .kind = RS_OPT_FLAG, .off = LO(dot), .val = RS_MODEL_DOT_INT8,
     .help = "CPU: activations quantized to 8 bits per block and\n"
             "integer dot products for Q8_0/Q4_0/Q4_K/Q5_K/Q6_K"},
    {0},
};

static rs_err launcherd_load(void *self, struct rs_stage *st, char *err, size_t err_len)
{
    struct launcherd *d = self;
    d->l.spin_ns = (uint64_t)d->o.spin_us * 1000u;
    return launcher_load(&d->l, &st->args.cfg, &d->o, err, err_len);
}

/* On the GPU: this mapping registered for DMA (each start: the old one died with its process).
 * On a NUMA host: the segment's pages bound to the launcher's node. */
static rs_err launcherd_attach(void *self, struct rs_stage *st, char *err, size_t err_len)
{
    struct launcher *l = &((struct launcherd *)self)->l;
    (void)err, (void)err_len;
    l->p = st->p;
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
    if (rs_place_bind_memory(st->pl, &st->plan, rs_shm_base(l->p->shm), info.size) != RS_OK)
        rs_log_warn("segment pages not bound to NUMA node %d", st->plan.node);
    return RS_OK;
}

static void launcherd_ready(void *self, struct rs_stage *st)
{
    struct launcher *l = &((struct launcherd *)self)->l;
    rs_log_info("serving as incarnation %u (weights and KV cache took %.1f ms before opening "
                "the pipeline)", rs_role_inc(l->p->role), (double)l->load_ns / 1e6);
    /* schedulerd also notices the new incarnation in the role table; this only hurries it. */
    rs_pipe_door_ring(&st->doors, RS_PIPE_STAGE_SCHEDULERD, RS_WIRE_DOOR_WAKE, 0, 0);
}

static rs_err launcherd_pass(void *self, struct rs_stage *st)
{
    return launcher_pass(&((struct launcherd *)self)->l, &st->doors);
}

static void launcherd_close(void *self)
{
    launcher_unload(&((struct launcherd *)self)->l);
}

static const struct rs_opt_group groups[] = {
    {"launcherd options", launcher_opt_table, &the_daemon.o, NULL},
};

static const struct rs_stage_def def = {
    .stage = RS_PIPE_STAGE_LAUNCHERD,
    .usage = "usage: launcherd --model PATH [options]\n"
             "Runs the model for one ringserve instance: one forward step per batch that\n"
             "schedulerd writes, sampled tokens into the requests' token lists.\n",
    .place_role = RS_PLACE_LAUNCHER,
    .keep_place = 1,
    .groups = groups,
    .n_groups = sizeof(groups) / sizeof(groups[0]),
    .load = launcherd_load,
    .attach = launcherd_attach,
    .ready = launcherd_ready,
    .pass = launcherd_pass,
    .close = launcherd_close,
};

int main(int argc, char **argv)
{
    return rs_stage_main(&def, &the_daemon, argc, argv);
}

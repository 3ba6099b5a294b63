/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target over model loading: the input is a GGUF opened from
 * memory and given to the architecture loader (launcherd/engine/llama.c:
 * general.architecture against the descriptor table, every <arch>.* key,
 * every tensor's presence, type and shape, fused row views, the leftover
 * check). When it is accepted, the CPU backend loads it and runs one
 * prefill of three tokens and one decode step, whose logits must be
 * finite or not, but never read or written out of bounds (the sanitizers).
 * Seeds in corpus/model_load/: tiny models of every architecture made by
 * ringserve-mkmodel (tests/README.md has the commands).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/gguf.h"
#include "common/log.h"
#include "launcherd/engine/backend.h"

/* One prefill of 3 tokens and one decode token through the CPU backend's table. */
static void run_steps(const struct llama_desc *d)
{
    struct rs_model_opts o;
    rs_model_opts_default(&o);
    o.n_threads = 1;
    void *st = NULL, *kv = NULL;
    if (rs_backend_cpu.load(d, &o, &st) != RS_OK)
        return;
    if (rs_backend_cpu.kv_alloc(st, 2, 4, &kv) == RS_OK) {
        int32_t toks[4];
        for (int i = 0; i < 4; i++)
            toks[i] = (int32_t)((uint32_t)(i * 7 + 1) % d->hp.n_vocab);
        uint32_t table[2] = {1, 0};
        struct rs_model_seq s = {toks, 3, 0, table, 2, 1};
        if (rs_backend_cpu.step(st, kv, &s, 1) == RS_OK) {
            const float *l = rs_backend_cpu.logits(st, 0);
            if (l != NULL)
                (void)*(volatile const float *)&l[d->hp.n_vocab - 1];
            s = (struct rs_model_seq){toks + 3, 1, 3, table, 2, 1};
            (void)rs_backend_cpu.step(st, kv, &s, 1);
        }
        rs_backend_cpu.kv_free(st, kv);
    }
    rs_backend_cpu.destroy(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet) {
        rs_log_set_level((enum rs_log_level)(RS_LOG_ERROR + 1)); /* refusals are the point */
        quiet = 1;
    }
    rs_gguf *g = NULL;
    char err[256];
    if (rs_gguf_open_mem(data, size, &g, err, sizeof(err)) != RS_OK)
        return 0;
    struct llama_desc d;
    if (llama_desc_load(g, &d, err, sizeof(err)) == RS_OK) {
        /* Bounded work: the weights must be in the input, so these are small already. */
        if ((uint64_t)d.hp.dim * d.hp.n_layers * (d.hp.ffn_dim + d.hp.head_dim) < (1u << 22))
            run_steps(&d);
        llama_desc_free(&d);
    }
    rs_gguf_close(&g);
    return 0;
}

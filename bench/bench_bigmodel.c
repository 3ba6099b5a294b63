/* SPDX-License-Identifier: MIT */
/*
 * bench_bigmodel: writes a random-weight llama GGUF of any size in seconds,
 * for GPU benchmarks on Llama-3-8B-sized shapes, where ringserve-mkmodel's
 * one-thread generation takes minutes. Metadata and vocab are copied from a
 * GGUF made with `ringserve-mkmodel --vocab-only` (which fixes the shape
 * keys); the tensors get mkmodel's names and shapes, norms 1 (F32) and
 * matrices uniform with standard deviation 0.02 in BF16 or F16, generated
 * by all CPUs (a counter-based hash of the element index, so the file does
 * not depend on the thread count).
 * Usage: bench_bigmodel --vocab-from META.gguf -o OUT.gguf [--type bf16|f16] [--threads N]
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/gguf.h"
#include "common/opt.h"
#include "common/quant.h"

struct gen {
    uint16_t *dst;
    uint64_t lo, hi, salt;
    int bf16;
};

static inline uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void *gen_thread(void *a)
{
    struct gen *g = a;
    const float scale = 0.02f * 1.7320508f / 2147483648.0f; /* uniform [-a, a], a = 0.02 sqrt 3 */
    for (uint64_t i = g->lo; i < g->hi; i++) {
        float v = (float)(int32_t)(uint32_t)mix(g->salt + i) * scale;
        g->dst[i] = g->bf16 ? rs_quant_bf16_from_f32(v) : rs_quant_f16_from_f32(v);
    }
    return NULL;
}

/* n random 16-bit values into dst with nt threads. */
static void fill(uint16_t *dst, uint64_t n, uint64_t salt, int bf16, int nt)
{
    pthread_t th[256];
    struct gen g[256];
    for (int t = 0; t < nt; t++) {
        g[t] = (struct gen){dst, n * (uint64_t)t / (uint64_t)nt,
                            n * (uint64_t)(t + 1) / (uint64_t)nt, salt << 40, bf16};
        pthread_create(&th[t], NULL, gen_thread, &g[t]);
    }
    for (int t = 0; t < nt; t++)
        pthread_join(th[t], NULL);
}

struct shape {
    uint32_t dim, layers, heads, kv_heads, ffn, vocab;
};

static int read_shape(const rs_gguf *g, struct shape *s)
{
    int ok = rs_gguf_get_u32(g, "llama.embedding_length", &s->dim) == RS_OK &&
             rs_gguf_get_u32(g, "llama.block_count", &s->layers) == RS_OK &&
             rs_gguf_get_u32(g, "llama.attention.head_count", &s->heads) == RS_OK &&
             rs_gguf_get_u32(g, "llama.feed_forward_length", &s->ffn) == RS_OK;
    if (rs_gguf_get_u32(g, "llama.attention.head_count_kv", &s->kv_heads) != RS_OK)
        s->kv_heads = s->heads;
    int64_t k = rs_gguf_find_key(g, "tokenizer.ggml.tokens");
    enum rs_gguf_type et;
    uint64_t n = 0;
    ok = ok && k >= 0 && rs_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n) == RS_OK && n > 0;
    s->vocab = (uint32_t)n;
    return ok && s->heads > 0 && s->dim % s->heads == 0 ? 0 : -1;
}

struct out {
    rs_gguf_writer *w;
    void *bufs[1024];
    int n;
    int bf16, nt;
    uint64_t bytes;
};

static int add(struct out *o, const char *name, uint64_t ne0, uint64_t ne1, int matrix)
{
    uint64_t n = ne0 * ne1, ne[2] = {ne0, ne1};
    void *p = malloc(matrix ? n * 2 : n * 4);
    if (p == NULL || o->n == 1024)
        return -1;
    if (matrix) {
        fill(p, n, (uint64_t)o->n + 1, o->bf16, o->nt);
    } else {
        for (uint64_t i = 0; i < n; i++)
            ((float *)p)[i] = 1.0f;
    }
    o->bufs[o->n++] = p;
    o->bytes += matrix ? n * 2 : n * 4;
    enum rs_ggml_type t = !matrix ? RS_GGML_F32 : o->bf16 ? RS_GGML_BF16 : RS_GGML_F16;
    return rs_gguf_writer_add_tensor(o->w, name, t, ne1 > 1 ? 2 : 1, ne, p) == RS_OK ? 0 : -1;
}

static int add_all(struct out *o, const struct shape *s)
{
    char name[96];
    uint64_t d = s->dim, kvd = (uint64_t)s->kv_heads * (s->dim / s->heads);
    int rc = add(o, "token_embd.weight", d, s->vocab, 1) | add(o, "output_norm.weight", d, 1, 0) |
             add(o, "output.weight", d, s->vocab, 1);
    static const char *const names[] = {"attn_norm", "attn_q",   "attn_k", "attn_v",  "attn_output",
                                        "ffn_norm",  "ffn_gate", "ffn_up", "ffn_down"};
    for (uint32_t l = 0; l < s->layers && rc == 0; l++) {
        uint64_t shp[9][2] = {{d, 1}, {d, d},      {d, kvd},    {d, kvd},   {d, d},
                              {d, 1}, {d, s->ffn}, {d, s->ffn}, {s->ffn, d}};
        for (int i = 0; i < 9 && rc == 0; i++) {
            snprintf(name, sizeof(name), "blk.%u.%s.weight", l, names[i]);
            rc = add(o, name, shp[i][0], shp[i][1], shp[i][1] > 1);
        }
    }
    return rc;
}

struct args {
    const char *meta, *path;
    int type; /* 0 bf16, 1 f16 */
    int threads;
};

static const char *const types[] = {"bf16", "f16", NULL};

#define A(f) offsetof(struct args, f)
static const struct rs_opt opts[] = {
    {.name = "vocab-from", .kind = RS_OPT_ARG, .off = A(meta), .arg = "META.gguf",
     .help = "ringserve-mkmodel --vocab-only output with the shape"},
    {.name = "out", .short_name = 'o', .kind = RS_OPT_ARG, .off = A(path), .arg = "OUT.gguf",
     .help = "the model to write"},
    {.name = "type", .kind = RS_OPT_CHOICE, .off = A(type), .choices = types, .arg = "bf16|f16",
     .help = "weight type (default bf16)"},
    {.name = "threads", .kind = RS_OPT_INT, .off = A(threads), .min = 1, .max = 256, .arg = "N",
     .help = "generator threads (default: every CPU)"},
    {0},
};

int main(int argc, char **argv)
{
    struct args a = {.threads = (int)sysconf(_SC_NPROCESSORS_ONLN)};
    struct rs_opt_group og = {NULL, opts, &a, NULL};
    int code = rs_opt_main("bench_bigmodel",
                           "usage: bench_bigmodel --vocab-from META.gguf -o OUT.gguf [options]\n"
                           "Writes a large random-weight model with the shape of META.\n",
                           &og, 1, argc, argv, 0, NULL);
    if (code >= 0)
        return code;
    const char *meta = a.meta, *path = a.path;
    struct out o = {.bf16 = a.type == 0, .nt = a.threads < 1 ? 1 : a.threads};
    char err[256];
    rs_gguf *g;
    struct shape s;
    if (meta == NULL || path == NULL || rs_gguf_open(meta, &g, err, sizeof(err)) != RS_OK ||
        read_shape(g, &s) != 0) {
        fprintf(stderr,
                "usage: bench_bigmodel --vocab-from META.gguf -o OUT.gguf [--type "
                "bf16|f16] [--threads N]\n  (META: ringserve-mkmodel --vocab-only with "
                "the shape; %s)\n",
                meta ? "unreadable or not a llama GGUF" : "missing");
        return 2;
    }
    uint64_t t0 = rs_clock_ns();
    int rc = rs_gguf_writer_create(&o.w) != RS_OK;
    for (uint64_t i = 0; rc == 0 && i < rs_gguf_n_kv(g); i++)
        rc = rs_gguf_writer_copy_kv(o.w, g, i) != RS_OK;
    rc = rc || add_all(&o, &s) != 0;
    uint64_t t1 = rs_clock_ns();
    rc = rc || rs_gguf_writer_write(o.w, path) != RS_OK;
    if (rc == 0)
        fprintf(stderr,
                "bench_bigmodel: %s: %.2f GB (%s, dim %u, %u layers, ffn %u, vocab %u): "
                "generated in %.1f s with %d threads, written in %.1f s\n",
                path, (double)o.bytes / 1e9, o.bf16 ? "bf16" : "f16", s.dim, s.layers, s.ffn,
                s.vocab, (double)(t1 - t0) / 1e9, o.nt, (double)(rs_clock_ns() - t1) / 1e9);
    else
        fprintf(stderr, "bench_bigmodel: writing %s failed\n", path);
    rs_gguf_writer_destroy(&o.w);
    for (int i = 0; i < o.n; i++)
        free(o.bufs[i]);
    rs_gguf_close(&g);
    return rc;
}

/* SPDX-License-Identifier: MIT */
/*
 * ringserve-mkmodel: writes random-weight GGUFs of any architecture the
 * engine serves (llama, qwen2, qwen3, gemma2, gemma3, phi3: the tensors and
 * keys llama.cpp's converters write for each), of a given shape and weight
 * type (F32/F16/BF16/Q8_0/Q4_0/Q4_K/Q5_K/Q6_K, or the Q4_K_M/Q5_K_M mixes),
 * so tests and benchmarks can make models of any size on a machine that has
 * none, and converts an existing GGUF's weight matrices to another of those
 * types. The vocab is copied from a given GGUF,
 * or is a byte-level one of its own (see tools/README.md for its exact ids).
 * Leaves out: K-quants, importance matrices, and streaming output (the
 * converted or generated tensors are held in memory until the file is written).
 */
#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/gguf.h"
#include "common/log.h"
#include "common/opt.h"
#include "common/quant.h"

#define EXIT_USAGE 2
#define BYTE_VOCAB 258   /* 256 byte tokens + <s> + </s> */
#define MAX_DIM (1 << 20)
#define MAX_LAYERS 4096
/* GPT-2/llama initialisation scale: activations stay O(1); the text is for --help. */
#define WEIGHT_STD 0.02f
#define WEIGHT_STD_TEXT "0.02"
#define MAX_THREADS 256

/* llama.cpp's llama_ftype values for general.file_type. */
enum {
    FTYPE_ALL_F32 = 0, FTYPE_MOSTLY_F16 = 1, FTYPE_MOSTLY_Q4_0 = 2, FTYPE_MOSTLY_Q8_0 = 7,
    FTYPE_MOSTLY_Q4_K_S = 14, FTYPE_MOSTLY_Q4_K_M = 15, FTYPE_MOSTLY_Q5_K_S = 16,
    FTYPE_MOSTLY_Q5_K_M = 17, FTYPE_MOSTLY_Q6_K = 18, FTYPE_MOSTLY_BF16 = 32
};

/* Token types as in llama.cpp's llama_token_type / the GGUF token_type array. */
enum { TOKEN_NORMAL = 1, TOKEN_CONTROL = 3, TOKEN_UNUSED = 5, TOKEN_BYTE = 6 };

/*
 * What each architecture's GGUF holds beyond llama's, as llama.cpp's
 * convert_hf_to_gguf.py writes it (tools/README.md lists the tensors and keys).
 * Kept apart from the engine's own table (launcherd/engine/arch.c) on purpose:
 * the writer and the reader are two statements of the format, so a mistake in
 * one shows as a failed load or a failed reference test.
 */
#define MK_QKV_BIAS 0x001u  /* blk.N.attn_{q,k,v}.bias */
#define MK_QK_NORM 0x002u   /* blk.N.attn_{q,k}_norm.weight */
#define MK_POST_NORM 0x004u /* blk.N.post_attention_norm, post_ffw_norm */
#define MK_FUSED 0x008u     /* attn_qkv and a double-width ffn_up, no q/k/v/gate */
#define MK_NO_OUTPUT 0x010u /* never an output.weight (always tied) */
#define MK_OUTPUT 0x020u    /* always an output.weight (--tied refused) */
#define MK_ROPE_DIM 0x040u  /* writes rope.dimension_count */
#define MK_HEAD_LEN 0x080u  /* writes attention.key_length / value_length */
#define MK_VOCAB_KEY 0x100u /* writes <arch>.vocab_size */
#define MK_SOFTCAP 0x200u   /* writes attn_logit_softcapping / final_logit_softcapping */
#define MK_SWA 0x400u       /* writes attention.sliding_window */
#define MK_ORIG_CTX 0x800u  /* writes rope.scaling.original_context_length */

struct mk_arch {
    const char *name;
    unsigned flags;
    float eps;         /* attention.layer_norm_rms_epsilon */
    long swa_default;  /* attention.sliding_window unless --swa */
    float rope_base;   /* rope.freq_base unless --rope-base */
};

static const struct mk_arch ARCHS[] = {
    {"llama", MK_ROPE_DIM | MK_VOCAB_KEY, 1e-5f, 0, 10000.0f},
    {"qwen2", MK_QKV_BIAS, 1e-6f, 0, 1000000.0f},
    {"qwen3", MK_QK_NORM | MK_HEAD_LEN, 1e-6f, 0, 1000000.0f},
    {"gemma2", MK_POST_NORM | MK_NO_OUTPUT | MK_HEAD_LEN | MK_SOFTCAP | MK_SWA, 1e-6f, 4096,
     10000.0f},
    {"gemma3", MK_QK_NORM | MK_POST_NORM | MK_HEAD_LEN | MK_SWA, 1e-6f, 1024, 1000000.0f},
    {"phi3", MK_FUSED | MK_OUTPUT | MK_ROPE_DIM | MK_SWA | MK_ORIG_CTX, 1e-5f, 2047, 10000.0f},
};
#define N_ARCHS (sizeof(ARCHS) / sizeof(ARCHS[0]))

struct opts {
    const char *out, *convert, *vocab_from;
    const char *chat_template; /* --chat-template FILE: stored as tokenizer.chat_template */
    const struct mk_arch *arch;
    long dim, layers, heads, kv_heads, ffn, vocab, ctx, head_dim, swa;
    float norm_std, softcap_attn, softcap_final;
    int tied, vocab_only;
    int text_output; /* --text-output: byte and control rows of output.weight zero */
    float rope_base;
    unsigned long long seed;
    enum rs_ggml_type type;
    int mix_k_m;     /* q4_k_m / q5_k_m: Q6_K where llama.cpp's _M mixes put it */
    long threads;    /* quantizing threads; 0 = every online CPU */
    uint32_t shape_given; /* any of the shape options (bit 1), which --convert forbids */
};

/* A tensor being written: its buffer is owned here until the file is out. */
struct out_tensor {
    char name[RS_GGUF_MAX_NAME + 1];
    enum rs_ggml_type type;
    uint32_t n_dims;
    uint64_t ne[RS_GGUF_MAX_DIMS];
    void *owned;      /* freed at the end; NULL when data is borrowed */
    const void *data; /* owned, or borrowed from the input mmap */
};

struct tensor_list {
    struct out_tensor *t;
    size_t n, cap;
};

static const char usage_text[] =
    "usage: ringserve-mkmodel -o OUT.gguf --dim D --layers L --heads H [--kv-heads K]\n"
    "                         --ffn F --vocab V [--arch NAME] [options]\n"
    "       ringserve-mkmodel --convert IN.gguf -o OUT.gguf --type TYPE [--threads N]\n"
    "Random weights: approximately normal, std " WEIGHT_STD_TEXT ", from --seed (default 0);\n"
    "norms 1, or 1 + N(0, S) with --norm-std S; biases std 0.1.\n"
    "--vocab may be omitted with --vocab-from (it must then equal that vocab's size).\n"
    "Without --vocab-from: 256 byte tokens, <s>, </s>, then <unused_N> up to --vocab.\n";

static int bad_arg(const char *fmt, const char *what)
{
    fprintf(stderr, "ringserve-mkmodel: ");
    fprintf(stderr, fmt, what);
    fprintf(stderr, "\n(run with --help for usage)\n");
    return EXIT_USAGE;
}

static int parse_type(const char *s, struct opts *o)
{
    o->mix_k_m = strcmp(s, "q4_k_m") == 0 || strcmp(s, "q5_k_m") == 0;
    if (o->mix_k_m) {
        o->type = s[1] == '4' ? RS_GGML_Q4_K : RS_GGML_Q5_K;
        return 1;
    }
    static const struct {
        const char *name;
        enum rs_ggml_type type;
    } names[] = {{"f32", RS_GGML_F32}, {"f16", RS_GGML_F16}, {"bf16", RS_GGML_BF16},
                 {"q8_0", RS_GGML_Q8_0}, {"q4_0", RS_GGML_Q4_0}, {"q4_k", RS_GGML_Q4_K},
                 {"q5_k", RS_GGML_Q5_K}, {"q6_k", RS_GGML_Q6_K}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(s, names[i].name) == 0) {
            o->type = names[i].type;
            return 1;
        }
    return 0;
}

static uint32_t file_type_of(const struct opts *o)
{
    if (o->mix_k_m)
        return o->type == RS_GGML_Q4_K ? FTYPE_MOSTLY_Q4_K_M : FTYPE_MOSTLY_Q5_K_M;
    switch (o->type) {
    case RS_GGML_F16: return FTYPE_MOSTLY_F16;
    case RS_GGML_BF16: return FTYPE_MOSTLY_BF16;
    case RS_GGML_Q8_0: return FTYPE_MOSTLY_Q8_0;
    case RS_GGML_Q4_0: return FTYPE_MOSTLY_Q4_0;
    case RS_GGML_Q4_K: return FTYPE_MOSTLY_Q4_K_S; /* every matrix Q4_K: llama.cpp's "S" mix */
    case RS_GGML_Q5_K: return FTYPE_MOSTLY_Q5_K_S;
    case RS_GGML_Q6_K: return FTYPE_MOSTLY_Q6_K;
    default: return FTYPE_ALL_F32;
    }
}

static int parse_type_opt(void *dst, const struct rs_opt *o, const char *v, char *err, size_t len)
{
    (void)o;
    if (parse_type(v, dst))
        return 0;
    snprintf(err, len, "--type '%.40s': expected f32, f16, bf16, q8_0, q4_0, q4_k, q4_k_m, "
             "q5_k, q5_k_m or q6_k", v);
    return -1;
}

static int parse_rope_base(void *dst, const struct rs_opt *o, const char *v, char *err,
                           size_t len)
{
    char *end;
    float b = strtof(v, &end);
    if (end == v || *end != '\0' || !isfinite(b) || b <= 1.0f) {
        snprintf(err, len, "--%s '%.40s': expected a finite number > 1", o->name, v);
        return -1;
    }
    ((struct opts *)dst)->rope_base = b;
    return 0;
}

/* Decimal, or 0x... hexadecimal. */
static int parse_seed(void *dst, const struct rs_opt *o, const char *v, char *err, size_t len)
{
    char *end;
    errno = 0;
    unsigned long long s = strtoull(v, &end, 0);
    if (errno != 0 || end == v || *end != '\0' || v[0] == '-') {
        snprintf(err, len, "--%s '%.40s': expected a non-negative integer", o->name, v);
        return -1;
    }
    ((struct opts *)dst)->seed = s;
    return 0;
}

/* --arch: a name of ARCHS. */
static int parse_arch(void *dst, const struct rs_opt *o, const char *v, char *err, size_t len)
{
    for (size_t i = 0; i < N_ARCHS; i++)
        if (strcmp(v, ARCHS[i].name) == 0)
            return ((struct opts *)dst)->arch = &ARCHS[i], 0;
    snprintf(err, len, "--%s '%.40s': expected llama, qwen2, qwen3, gemma2, gemma3 or phi3",
             o->name, v);
    return -1;
}

/* --softcap ATTN,FINAL: gemma2's two soft-caps, both positive and finite. */
static int parse_softcap(void *dst, const struct rs_opt *o, const char *v, char *err, size_t len)
{
    struct opts *d = dst;
    float a, f;
    char tail;
    if (sscanf(v, "%f,%f%c", &a, &f, &tail) != 2 || !(a > 0) || !(f > 0) || !isfinite(a) ||
        !isfinite(f)) {
        snprintf(err, len, "--%s '%.40s': expected two positive numbers ATTN,FINAL", o->name, v);
        return -1;
    }
    d->softcap_attn = a;
    d->softcap_final = f;
    return 0;
}

/* --norm-std S: a finite S >= 0. */
static int parse_norm_std(void *dst, const struct rs_opt *o, const char *v, char *err, size_t len)
{
    char *end;
    float s = strtof(v, &end);
    if (end == v || *end != '\0' || !isfinite(s) || s < 0) {
        snprintf(err, len, "--%s '%.40s': expected a finite number >= 0", o->name, v);
        return -1;
    }
    ((struct opts *)dst)->norm_std = s;
    return 0;
}

#define O(f) offsetof(struct opts, f)
#define SHAPE .has_bit = 1, .has_off = O(shape_given)
#define DIMS(nm, f, hi, a, h)                                                                    \
    {.name = nm, .kind = RS_OPT_LONG, .off = O(f), .min = 1, .max = hi, SHAPE, .arg = a,         \
     .help = h}
#define CALL(nm, fn, a, h) {.name = nm, .kind = RS_OPT_CALL, .parse = fn, SHAPE, .arg = a, .help = h}

static const struct rs_opt opt_table[] = {
    {.name = "output", .short_name = 'o', .kind = RS_OPT_ARG, .off = O(out), .arg = "OUT.gguf",
     .help = "the file to write (required)"},
    DIMS("dim", dim, MAX_DIM, "D", "embedding width"),
    DIMS("layers", layers, MAX_LAYERS, "L", "transformer blocks"),
    DIMS("heads", heads, MAX_DIM, "H", "attention heads"),
    DIMS("kv-heads", kv_heads, MAX_DIM, "K", "key/value heads (default --heads)"),
    DIMS("ffn", ffn, MAX_DIM, "F", "feed-forward width"),
    DIMS("vocab", vocab, 1 << 24, "V", "vocabulary size"),
    DIMS("ctx", ctx, 1 << 24, "C", "context length (default 2048)"),
    CALL("arch", parse_arch, "NAME",
         "llama (default), qwen2, qwen3, gemma2, gemma3 or phi3: the\ntensors and keys "
         "llama.cpp expects for it"),
    DIMS("head-dim", head_dim, 1024, "D", "attention.key_length (default dim / heads)"),
    DIMS("swa", swa, 1 << 24, "W",
         "sliding window (default gemma2 4096, gemma3 1024, phi3 2047)"),
    CALL("softcap", parse_softcap, "ATTN,FINAL",
         "gemma2's attention and final logit soft-caps (default 50,30)"),
    CALL("norm-std", parse_norm_std, "S", "norm weights 1 + N(0, S) instead of 1"),
    {.name = "type", .kind = RS_OPT_CALL, .parse = parse_type_opt, .arg = "TYPE",
     .help = "f32|f16|bf16|q8_0|q4_0|q4_k|q4_k_m|q5_k|q5_k_m|q6_k (default f32)"},
    {.name = "tied", .kind = RS_OPT_FLAG, .off = O(tied), .val = 1, SHAPE,
     .help = "no output.weight: the embedding matrix is reused"},
    CALL("rope-base", parse_rope_base, "B",
         "RoPE frequency base (default: the family's usual base,\n10000, or 1e6 for "
         "qwen2/qwen3/gemma3)"),
    {.name = "vocab-from", .kind = RS_OPT_ARG, .off = O(vocab_from), SHAPE, .arg = "FILE.gguf",
     .help = "copy the vocab of FILE instead of the byte-level one"},
    {.name = "chat-template", .kind = RS_OPT_ARG, .off = O(chat_template), SHAPE,
     .arg = "FILE.jinja", .help = "store this chat template as tokenizer.chat_template"},
    {.name = "seed", .kind = RS_OPT_CALL, .parse = parse_seed, .arg = "S",
     .help = "random weights' seed (default 0)"},
    {.name = "text-output", .kind = RS_OPT_FLAG, .off = O(text_output), .val = 1, SHAPE,
     .help = "zero output.weight's rows of the byte tokens, <s> and </s>:\n"
             "greedy decoding never picks them (their logit is 0, below\n"
             "the largest of the others), so the output is always text\n"
             "(for servers that refuse output that is not UTF-8)"},
    {.name = "vocab-only", .kind = RS_OPT_FLAG, .off = O(vocab_only), .val = 1, SHAPE,
     .help = "metadata and vocab, no tensors (for tokenizer tests)"},
    {.name = "convert", .kind = RS_OPT_ARG, .off = O(convert), .arg = "IN.gguf",
     .help = "re-encode IN's tensors as --type (only -o and --type apply)"},
    {.name = "threads", .kind = RS_OPT_LONG, .off = O(threads), .min = 1, .max = MAX_THREADS,
     .arg = "N",
     .help = "quantizing threads (default: every online CPU; same bytes\neither way)"},
    {0},
};

/* Shape rules the llama forward pass relies on. */
static int check_shape(const struct opts *o)
{
    if (o->dim == 0 || o->layers == 0 || o->heads == 0 || o->ffn == 0)
        return bad_arg("%s", "--dim, --layers, --heads and --ffn are required");
    if (o->vocab == 0 && o->vocab_from == NULL)
        return bad_arg("%s", "--vocab is required unless --vocab-from is given");
    if (o->head_dim == 0 && o->dim % o->heads != 0)
        return bad_arg("%s", "--dim must be a multiple of --heads (or give --head-dim)");
    if ((o->head_dim ? o->head_dim : o->dim / o->heads) % 2 != 0)
        return bad_arg("%s", "the head dimension (--head-dim, or --dim / --heads) must be even");
    if (o->tied && (o->arch->flags & MK_OUTPUT))
        return bad_arg("%s", "--tied: this architecture always has output.weight");
    if (o->swa != 0 && !(o->arch->flags & MK_SWA))
        return bad_arg("%s", "--swa: this architecture has no sliding window");
    if (o->kv_heads > o->heads || o->heads % o->kv_heads != 0)
        return bad_arg("%s", "--heads must be a multiple of --kv-heads");
    if (o->vocab != 0 && o->vocab < BYTE_VOCAB && o->vocab_from == NULL)
        return bad_arg("%s", "--vocab must be at least 258 for the byte-level vocab");
    if (o->text_output && (o->tied || o->vocab_from != NULL || (o->arch->flags & MK_NO_OUTPUT)))
        return bad_arg("%s", "--text-output needs an output.weight and the byte-level vocab");
    if ((uint64_t)o->dim * (uint64_t)(o->vocab ? o->vocab : 1) > (1ull << 40))
        return bad_arg("%s", "--dim x --vocab is too large");
    return 0;
}

/* 0 to run, -1 after --help, EXIT_USAGE after printing a refusal. */
static int parse_args(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.ctx = 2048, .type = RS_GGML_F32, .arch = &ARCHS[0],
                       .softcap_attn = 50.0f, .softcap_final = 30.0f};
    struct rs_opt_group g = {NULL, opt_table, o, NULL};
    char err[300];
    int r = rs_opt_parse(&g, 1, argc, argv, 0, NULL, err, sizeof(err));
    if (r == RS_OPT_HELP)
        return rs_opt_help(stdout, usage_text, &g, 1), -1;
    if (r != RS_OPT_OK)
        return bad_arg("%s", err);
    if (o->out == NULL)
        return bad_arg("%s", "-o OUT.gguf is required");
    if (o->convert != NULL)
        return o->shape_given ? bad_arg("%s", "--convert takes only -o and --type") : 0;
    if (o->kv_heads == 0)
        o->kv_heads = o->heads;
    if (o->swa == 0)
        o->swa = o->arch->swa_default;
    if (o->rope_base == 0.0f)
        o->rope_base = o->arch->rope_base;
    return check_shape(o);
}

/* --- random weights -------------------------------------------------------- */

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/*
 * Element i of tensor `idx`: a counter-based hash of (seed, idx, i) turned
 * into the sum of four 16-bit uniforms (Irwin-Hall, close to normal, bounded
 * at 3.46 std), scaled to std `std`. No state between elements, so the loop
 * vectorizes and a tensor's values do not depend on the weight type chosen.
 */
static void fill_random(float *x, uint64_t n, uint64_t seed, uint64_t idx, float std)
{
    const uint64_t key = mix64(seed ^ mix64(idx + 0x632be59bd9b4e019ull));
    const float scale = std / 37837.23f; /* sqrt(4 * (65536^2 - 1) / 12) */
    for (uint64_t i = 0; i < n; i++) {
        uint64_t h = mix64(key + i * 0x9e3779b97f4a7c15ull);
        uint32_t s = (uint32_t)(h & 0xffff) + (uint32_t)((h >> 16) & 0xffff) +
                     (uint32_t)((h >> 32) & 0xffff) + (uint32_t)(h >> 48);
        x[i] = ((float)s - 131070.0f) * scale;
    }
}

static struct out_tensor *list_add(struct tensor_list *l, const char *name, uint32_t n_dims,
                                   uint64_t ne0, uint64_t ne1)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        struct out_tensor *t = realloc(l->t, cap * sizeof(*t));
        if (t == NULL)
            return NULL;
        l->t = t;
        l->cap = cap;
    }
    struct out_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = t->ne[3] = 1;
    return t;
}

static void list_free(struct tensor_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->t[i].owned);
    free(l->t);
    l->t = NULL;
    l->n = l->cap = 0;
}

/*
 * The type --type asks for tensor `name` of a model with n_layers blocks. For
 * q4_k_m and q5_k_m it follows llama.cpp's _M choice as its quantizer makes
 * it: output.weight, and attn_v and ffn_down in the first and last eighth of
 * the layers and every third layer between, are Q6_K; the rest Q4_K / Q5_K.
 */
static enum rs_ggml_type wanted_type(const struct opts *o, const char *name, long n_layers)
{
    long b;
    char part[32];
    if (!o->mix_k_m)
        return o->type;
    if (strcmp(name, "output.weight") == 0)
        return RS_GGML_Q6_K;
    if (sscanf(name, "blk.%ld.%31[^.]", &b, part) == 2 &&
        (strcmp(part, "attn_v") == 0 || strcmp(part, "ffn_down") == 0)) {
        long eighth = n_layers / 8;
        if (b < eighth || b >= 7 * n_layers / 8 || (b - eighth) % 3 == 2)
            return RS_GGML_Q6_K;
    }
    return o->type;
}

/* Type a matrix of row length ne0 gets: whole blocks (32 values; 256 for K-quants) or F16. */
static enum rs_ggml_type matrix_type(enum rs_ggml_type want, uint64_t ne0, const char *name)
{
    if (ne0 % rs_ggml_block_size(want) == 0)
        return want;
    fprintf(stderr, "ringserve-mkmodel: %s: row length %llu is not a multiple of %zu, "
            "stored as F16 instead of %s\n", name, (unsigned long long)ne0,
            rs_ggml_block_size(want), rs_ggml_type_name(want));
    return RS_GGML_F16;
}

/* Rows [r0, r1) of a matrix re-encoded from src_type to dst_type, one thread's share. */
struct recode_job {
    const uint8_t *src;
    uint8_t *dst;
    enum rs_ggml_type src_type, dst_type;
    uint64_t ne0, r0, r1;
    int failed;
};

static void *recode_rows(void *arg)
{
    struct recode_job *j = arg;
    const uint64_t in_row = rs_ggml_row_bytes(j->src_type, j->ne0);
    const uint64_t out_row = rs_ggml_row_bytes(j->dst_type, j->ne0);
    float *tmp = malloc(j->ne0 * sizeof(float)); /* also aligns F32 rows read from the map */
    j->failed = tmp == NULL;
    for (uint64_t r = j->r0; r < j->r1 && tmp != NULL; r++) {
        rs_quant_row_to_f32(j->src_type, j->src + r * in_row, tmp, j->ne0);
        rs_quant_row_from_f32(j->dst_type, tmp, j->dst + r * out_row, j->ne0);
    }
    free(tmp);
    return NULL;
}

/*
 * Re-encodes a rows x ne0 matrix into dst on up to `threads` threads (0: one
 * per online CPU). Rows are independent, so the bytes do not depend on the
 * count. Returns 0, or -1 when memory ran out.
 */
static int recode_matrix(const void *src, enum rs_ggml_type src_type, void *dst,
                         enum rs_ggml_type dst_type, uint64_t ne0, uint64_t rows, long threads)
{
    struct recode_job jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    long n = threads > 0 ? threads : sysconf(_SC_NPROCESSORS_ONLN);
    n = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
    if ((uint64_t)n > rows / 8 + 1)
        n = (long)(rows / 8 + 1); /* at least 8 rows a thread */
    for (long i = 0; i < n; i++) {
        jobs[i] = (struct recode_job){src, dst, src_type, dst_type, ne0, rows * (uint64_t)i / (uint64_t)n,
                                      rows * (uint64_t)(i + 1) / (uint64_t)n, 0};
        started[i] = i > 0 && pthread_create(&tid[i], NULL, recode_rows, &jobs[i]) == 0;
    }
    int failed = 0;
    for (long i = 0; i < n; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        else
            recode_rows(&jobs[i]); /* this thread's share, or one whose thread did not start */
        failed |= jobs[i].failed;
    }
    return failed ? -1 : 0;
}

/* Converts n_rows rows of ne0 F32 values to `type` into a new buffer (takes f32). */
static void *encode_rows(float *f32, enum rs_ggml_type type, uint64_t ne0, uint64_t n_rows,
                         long threads)
{
    if (type == RS_GGML_F32)
        return f32;
    void *buf = malloc(rs_ggml_row_bytes(type, ne0) * n_rows);
    if (buf != NULL &&
        recode_matrix(f32, RS_GGML_F32, buf, type, ne0, n_rows, threads) != 0) {
        free(buf);
        buf = NULL;
    }
    free(f32);
    return buf;
}

/*
 * One generated tensor: a random matrix; or (ne1 == 0) a vector: a bias
 * (name ends in ".bias", std 0.1) or a norm (ones, or 1 + N(0, --norm-std)).
 */
static int gen_tensor(struct tensor_list *l, const struct opts *o, const char *name,
                      uint64_t ne0, uint64_t ne1)
{
    int is_vec = ne1 == 0;
    size_t nl = strlen(name);
    int is_bias = nl > 5 && strcmp(name + nl - 5, ".bias") == 0;
    struct out_tensor *t = list_add(l, name, is_vec ? 1 : 2, ne0, is_vec ? 1 : ne1);
    if (t == NULL)
        return -1;
    uint64_t n = ne0 * t->ne[1];
    float *f = malloc(n * sizeof(float));
    if (f == NULL)
        return -1;
    if (is_vec) {
        fill_random(f, n, o->seed, l->n - 1, is_bias ? 0.1f : o->norm_std);
        for (uint64_t i = 0; !is_bias && i < n; i++)
            f[i] += 1.0f;
        t->type = RS_GGML_F32;
    } else {
        fill_random(f, n, o->seed, l->n - 1, WEIGHT_STD);
        if (o->text_output && strcmp(name, "output.weight") == 0)
            memset(f, 0, (size_t)ne0 * BYTE_VOCAB * sizeof(float));
        t->type = matrix_type(wanted_type(o, name, o->layers), ne0, name);
    }
    t->owned = encode_rows(f, t->type, ne0, t->ne[1], o->threads);
    t->data = t->owned;
    return t->owned != NULL ? 0 : -1;
}

/* The head dimension: --head-dim, or dim / heads. */
static uint64_t head_dim_of(const struct opts *o)
{
    return (uint64_t)(o->head_dim ? o->head_dim : o->dim / o->heads);
}

/* One block's tensors for the architecture, named and shaped as llama.cpp reads them. */
static int gen_block(struct tensor_list *l, const struct opts *o, long b)
{
    unsigned fl = o->arch->flags;
    uint64_t d = (uint64_t)o->dim, f = (uint64_t)o->ffn, hd = head_dim_of(o);
    uint64_t qd = hd * (uint64_t)o->heads, kv = hd * (uint64_t)o->kv_heads;
    const struct {
        const char *part;
        unsigned need, skip; /* written when (flags & need) == need and !(flags & skip) */
        uint64_t ne0, ne1;   /* ne1 0: a vector */
    } parts[] = {
        {"attn_norm.weight", 0, 0, d, 0},
        {"attn_qkv.weight", MK_FUSED, 0, d, qd + 2 * kv},
        {"attn_q.weight", 0, MK_FUSED, d, qd},
        {"attn_k.weight", 0, MK_FUSED, d, kv},
        {"attn_v.weight", 0, MK_FUSED, d, kv},
        {"attn_q.bias", MK_QKV_BIAS, 0, qd, 0},
        {"attn_k.bias", MK_QKV_BIAS, 0, kv, 0},
        {"attn_v.bias", MK_QKV_BIAS, 0, kv, 0},
        {"attn_q_norm.weight", MK_QK_NORM, 0, hd, 0},
        {"attn_k_norm.weight", MK_QK_NORM, 0, hd, 0},
        {"attn_output.weight", 0, 0, qd, d},
        {"post_attention_norm.weight", MK_POST_NORM, 0, d, 0},
        {"ffn_norm.weight", 0, 0, d, 0},
        {"ffn_gate.weight", 0, MK_FUSED, d, f},
        {"ffn_up.weight", 0, MK_FUSED, d, f},
        {"ffn_up.weight", MK_FUSED, 0, d, 2 * f}, /* [gate | up] */
        {"ffn_down.weight", 0, 0, f, d},
        {"post_ffw_norm.weight", MK_POST_NORM, 0, d, 0},
    };
    int rc = 0;
    for (size_t p = 0; p < sizeof(parts) / sizeof(parts[0]) && rc == 0; p++) {
        if ((fl & parts[p].need) != parts[p].need || (fl & parts[p].skip))
            continue;
        char name[RS_GGUF_MAX_NAME + 1];
        snprintf(name, sizeof(name), "blk.%ld.%s", b, parts[p].part);
        rc |= gen_tensor(l, o, name, parts[p].ne0, parts[p].ne1);
    }
    return rc;
}

/* Every tensor of the model, named and shaped as llama.cpp's GGUFs of the architecture. */
static int gen_tensors(struct tensor_list *l, const struct opts *o, uint64_t n_vocab)
{
    uint64_t d = (uint64_t)o->dim;
    int rc = gen_tensor(l, o, "token_embd.weight", d, n_vocab) |
             gen_tensor(l, o, "output_norm.weight", d, 0);
    if (!o->tied && !(o->arch->flags & MK_NO_OUTPUT))
        rc |= gen_tensor(l, o, "output.weight", d, n_vocab);
    for (long b = 0; b < o->layers && rc == 0; b++)
        rc |= gen_block(l, o, b);
    return rc;
}

/* --- vocab ------------------------------------------------------------------ */

/*
 * The byte-level vocab: ids 0..255 are <0x00>..<0xFF> (type byte), 256 is
 * <s> (BOS), 257 is </s> (EOS), both control; ids 258.. are <unused_K>
 * (K = id - 258, type unused). Scores are all 0.
 */
static rs_err write_byte_vocab(rs_gguf_writer *w, uint64_t n_vocab)
{
    char **text = calloc(n_vocab, sizeof(char *));
    float *scores = calloc(n_vocab, sizeof(float));
    int32_t *types = calloc(n_vocab, sizeof(int32_t));
    rs_err rc = text && scores && types ? RS_OK : RS_ENOMEM;
    for (uint64_t i = 0; i < n_vocab && rc == RS_OK; i++) {
        char buf[32];
        if (i < 256)
            snprintf(buf, sizeof(buf), "<0x%02X>", (unsigned)i);
        else
            snprintf(buf, sizeof(buf), i == 256 ? "<s>" : i == 257 ? "</s>" : "<unused_%llu>",
                     (unsigned long long)(i - BYTE_VOCAB));
        types[i] = i < 256 ? TOKEN_BYTE : i < BYTE_VOCAB ? TOKEN_CONTROL : TOKEN_UNUSED;
        text[i] = strdup(buf);
        rc = text[i] ? RS_OK : RS_ENOMEM;
    }
    if (rc == RS_OK)
        rc = rs_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (rc == RS_OK)
        rc = rs_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)text,
                                        NULL, n_vocab);
    if (rc == RS_OK)
        rc = rs_gguf_writer_set_arr(w, "tokenizer.ggml.scores", RS_GGUF_F32, scores, n_vocab);
    if (rc == RS_OK)
        rc = rs_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", RS_GGUF_I32, types, n_vocab);
    if (rc == RS_OK)
        rc = rs_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 256);
    if (rc == RS_OK)
        rc = rs_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 257);
    if (rc == RS_OK)
        rc = rs_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1);
    if (rc == RS_OK)
        rc = rs_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", 0);
    for (uint64_t i = 0; text && i < n_vocab; i++)
        free(text[i]);
    free(text);
    free(scores);
    free(types);
    return rc;
}

/* Copies every tokenizer.* key of `src`; *n_vocab gets its token count. */
static int copy_vocab(rs_gguf_writer *w, const rs_gguf *src, const char *path, uint64_t *n_vocab)
{
    enum rs_gguf_type et;
    if (rs_gguf_get_arr(src, "tokenizer.ggml.tokens", &et, n_vocab) != RS_OK ||
        et != RS_GGUF_STRING || *n_vocab == 0) {
        fprintf(stderr, "ringserve-mkmodel: %s: no tokenizer.ggml.tokens string array\n", path);
        return -1;
    }
    for (uint64_t i = 0; i < rs_gguf_n_kv(src); i++) {
        struct rs_gguf_str k = rs_gguf_kv_key(src, i);
        if (k.len >= 10 && memcmp(k.ptr, "tokenizer.", 10) == 0 &&
            rs_gguf_writer_copy_kv(w, src, i) != RS_OK)
            return -1;
    }
    return 0;
}

/* --- generate ---------------------------------------------------------------- */

/* <arch>.<key> = v (u32). */
static rs_err set_arch_u32(rs_gguf_writer *w, const struct opts *o, const char *key, uint64_t v)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", o->arch->name, key);
    return rs_gguf_writer_set_u32(w, full, (uint32_t)v);
}

static rs_err set_arch_f32(rs_gguf_writer *w, const struct opts *o, const char *key, float v)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", o->arch->name, key);
    return rs_gguf_writer_set_f32(w, full, v);
}

/* The keys the architecture's converter writes beyond the common ones. */
static rs_err set_arch_keys(rs_gguf_writer *w, const struct opts *o, uint64_t n_vocab)
{
    unsigned fl = o->arch->flags;
    uint64_t hd = head_dim_of(o);
    rs_err rc = RS_OK;
    if ((fl & MK_ROPE_DIM) && rc == RS_OK)
        rc = set_arch_u32(w, o, "rope.dimension_count", hd);
    if (((fl & MK_HEAD_LEN) || o->head_dim != 0) && rc == RS_OK)
        rc = set_arch_u32(w, o, "attention.key_length", hd);
    if (((fl & MK_HEAD_LEN) || o->head_dim != 0) && rc == RS_OK)
        rc = set_arch_u32(w, o, "attention.value_length", hd);
    if ((fl & MK_VOCAB_KEY) && rc == RS_OK)
        rc = set_arch_u32(w, o, "vocab_size", n_vocab);
    if ((fl & MK_SWA) && rc == RS_OK)
        rc = set_arch_u32(w, o, "attention.sliding_window", (uint64_t)o->swa);
    if ((fl & MK_ORIG_CTX) && rc == RS_OK)
        rc = set_arch_u32(w, o, "rope.scaling.original_context_length", (uint64_t)o->ctx);
    if ((fl & MK_SOFTCAP) && rc == RS_OK)
        rc = set_arch_f32(w, o, "attn_logit_softcapping", o->softcap_attn);
    if ((fl & MK_SOFTCAP) && rc == RS_OK)
        rc = set_arch_f32(w, o, "final_logit_softcapping", o->softcap_final);
    return rc;
}

/* tokenizer.chat_template from --chat-template's file, so tests and demos get a chat model. */
static rs_err set_chat_template(rs_gguf_writer *w, const char *path)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    long n = -1;
    if (f != NULL && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n < (16l << 20) &&
        fseek(f, 0, SEEK_SET) == 0 && (text = calloc(1, (size_t)n + 1)) != NULL &&
        fread(text, 1, (size_t)n, f) != (size_t)n)
        n = -1;
    if (f != NULL)
        fclose(f);
    rs_err rc = text != NULL && n >= 0 && strlen(text) == (size_t)n
                    ? rs_gguf_writer_set_str(w, "tokenizer.chat_template", text) : RS_EINVAL;
    if (rc != RS_OK)
        fprintf(stderr, "ringserve-mkmodel: --chat-template %s: unreadable, over 16 MiB or "
                "holding a NUL byte\n", path);
    free(text);
    return rc;
}

static rs_err set_hparams(rs_gguf_writer *w, const struct opts *o, uint64_t n_vocab)
{
    const struct {
        const char *key;
        uint64_t v;
    } u32s[] = {{"context_length", (uint64_t)o->ctx},
                {"embedding_length", (uint64_t)o->dim},
                {"block_count", (uint64_t)o->layers},
                {"feed_forward_length", (uint64_t)o->ffn},
                {"attention.head_count", (uint64_t)o->heads},
                {"attention.head_count_kv", (uint64_t)o->kv_heads}};
    rs_err rc = rs_gguf_writer_set_str(w, "general.architecture", o->arch->name);
    if (rc == RS_OK)
        rc = rs_gguf_writer_set_str(w, "general.name", "ringserve-mkmodel random weights");
    if (rc == RS_OK)
        rc = rs_gguf_writer_set_u32(w, "general.file_type", file_type_of(o));
    if (rc == RS_OK && o->chat_template != NULL)
        rc = set_chat_template(w, o->chat_template);
    for (size_t i = 0; i < sizeof(u32s) / sizeof(u32s[0]) && rc == RS_OK; i++)
        rc = set_arch_u32(w, o, u32s[i].key, u32s[i].v);
    if (rc == RS_OK)
        rc = set_arch_f32(w, o, "rope.freq_base", o->rope_base);
    if (rc == RS_OK)
        rc = set_arch_f32(w, o, "attention.layer_norm_rms_epsilon", o->arch->eps);
    return rc == RS_OK ? set_arch_keys(w, o, n_vocab) : rc;
}

static int add_all(rs_gguf_writer *w, const struct tensor_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        const struct out_tensor *t = &l->t[i];
        if (rs_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data) != RS_OK) {
            fprintf(stderr, "ringserve-mkmodel: cannot add tensor %s\n", t->name);
            return -1;
        }
    }
    return 0;
}

static int finish(rs_gguf_writer *w, const struct tensor_list *l, const char *out, double t0)
{
    if (add_all(w, l) != 0)
        return 1;
    rs_err rc = rs_gguf_writer_write(w, out);
    if (rc != RS_OK) {
        fprintf(stderr, "ringserve-mkmodel: writing %s failed: %s\n", out, rs_strerror(rc));
        return 1;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    fprintf(stderr, "ringserve-mkmodel: wrote %s (%zu tensors) in %.2f s\n", out, l->n,
            (double)ts.tv_sec + ts.tv_nsec * 1e-9 - t0);
    return 0;
}

static int generate(const struct opts *o, double t0)
{
    rs_gguf_writer *w = NULL;
    rs_gguf *src = NULL;
    struct tensor_list l = {0};
    uint64_t n_vocab = (uint64_t)o->vocab;
    char err[512];
    int rc = 1;
    if (rs_gguf_writer_create(&w) != RS_OK)
        goto out;
    if (o->vocab_from != NULL) {
        if (rs_gguf_open(o->vocab_from, &src, err, sizeof(err)) != RS_OK) {
            fprintf(stderr, "ringserve-mkmodel: --vocab-from: %s\n", err);
            rc = EXIT_USAGE;
            goto out;
        }
        if (copy_vocab(w, src, o->vocab_from, &n_vocab) != 0)
            goto out;
        if (o->vocab != 0 && (uint64_t)o->vocab != n_vocab) {
            fprintf(stderr, "ringserve-mkmodel: --vocab %ld differs from the %llu tokens of %s\n",
                    o->vocab, (unsigned long long)n_vocab, o->vocab_from);
            rc = EXIT_USAGE;
            goto out;
        }
    } else if (write_byte_vocab(w, n_vocab) != RS_OK) {
        goto out;
    }
    if (set_hparams(w, o, n_vocab) != RS_OK ||
        (!o->vocab_only && gen_tensors(&l, o, n_vocab) != 0)) {
        fprintf(stderr, "ringserve-mkmodel: out of memory building the model\n");
        goto out;
    }
    rc = finish(w, &l, o->out, t0);
out:
    list_free(&l);
    rs_gguf_writer_destroy(&w);
    rs_gguf_close(&src);
    return rc;
}

/* --- convert ----------------------------------------------------------------- */

/* Re-encodes one 2-D tensor row by row (through F32) into a new buffer. */
static int convert_matrix(struct out_tensor *t, const struct rs_gguf_tensor *in, long threads)
{
    uint64_t ne0 = in->ne[0], rows = in->ne[1];
    uint8_t *buf = malloc(rs_ggml_row_bytes(t->type, ne0) * rows);
    if (buf == NULL || recode_matrix(in->data, in->type, buf, t->type, ne0, rows, threads) != 0) {
        free(buf);
        fprintf(stderr, "ringserve-mkmodel: out of memory converting %s\n", in->name);
        return -1;
    }
    t->owned = buf;
    t->data = buf;
    return 0;
}

/*
 * Plans one input tensor: 2-D matrices go to the target type (block types fall back
 * to F16 for rows that are not whole blocks); everything else, and a matrix
 * already of the target type, is copied byte for byte from the input map.
 */
static int convert_tensor(struct tensor_list *l, const struct rs_gguf_tensor *in,
                          enum rs_ggml_type want, long threads)
{
    int is_matrix = in->n_dims == 2;
    struct out_tensor *t = list_add(l, in->name, in->n_dims, in->ne[0], in->ne[1]);
    if (t == NULL)
        return -1;
    memcpy(t->ne, in->ne, sizeof(t->ne));
    t->type = is_matrix ? matrix_type(want, in->ne[0], in->name) : in->type;
    if (t->type == in->type) {
        t->data = in->data;
        return 0;
    }
    if (!rs_quant_supported(in->type)) {
        fprintf(stderr, "ringserve-mkmodel: tensor %s: type %s cannot be converted "
                "(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)\n", in->name, rs_ggml_type_name(in->type));
        return -1;
    }
    return convert_matrix(t, in, threads);
}

static int convert(const struct opts *o, double t0)
{
    rs_gguf_writer *w = NULL;
    rs_gguf *src = NULL;
    struct tensor_list l = {0};
    char err[512];
    int rc = 1;
    if (rs_gguf_open(o->convert, &src, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "ringserve-mkmodel: --convert: %s\n", err);
        return EXIT_USAGE;
    }
    if (rs_gguf_writer_create(&w) != RS_OK)
        goto out;
    for (uint64_t i = 0; i < rs_gguf_n_kv(src); i++)
        if (rs_gguf_writer_copy_kv(w, src, i) != RS_OK)
            goto out;
    if (rs_gguf_writer_set_u32(w, "general.file_type", file_type_of(o)) != RS_OK)
        goto out;
    uint32_t n_layers = 0; /* only q4_k_m needs it; absent, no layer gets the extra bits */
    struct rs_gguf_str arch = {"llama", 5};
    char key[96];
    rs_gguf_get_str(src, "general.architecture", &arch);
    snprintf(key, sizeof(key), "%.*s.block_count", (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
    rs_gguf_get_u32(src, key, &n_layers);
    for (uint64_t i = 0; i < rs_gguf_n_tensors(src); i++) {
        const struct rs_gguf_tensor *t = rs_gguf_tensor(src, i);
        if (convert_tensor(&l, t, wanted_type(o, t->name, (long)n_layers), o->threads) != 0)
            goto out;
    }
    rc = finish(w, &l, o->out, t0);
out:
    list_free(&l);
    rs_gguf_writer_destroy(&w);
    rs_gguf_close(&src);
    return rc;
}

int main(int argc, char **argv)
{
    struct opts o;
    rs_log_init("mkmodel");
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double t0 = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    return o.convert != NULL ? convert(&o, t0) : generate(&o, t0);
}

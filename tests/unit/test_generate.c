/* SPDX-License-Identifier: MIT */
/*
 * ringserve-generate as a user runs it (a real process): greedy generation
 * from BOS on stories260K prints exactly the bytes llama2.c published
 * (refdata expected/stories260K.greedy-n256.txt) and, with --ids, exactly the
 * derived .ids file; --prompt-ids and --logits-out reproduce llama.cpp's
 * logits and greedy ids on a refdata/arch model; every bad argument exits
 * 2, a bad model file exits 1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/rs_test.h"

/* Runs the tool with `args` (shell words); stdout into out (NUL-terminated), exit code returned. */
static int run_tool(const char *args, char *out, size_t cap, size_t *n_out)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "'%s/ringserve-generate' %s 2>/dev/null", rs_test_bindir(), args);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    if (n_out != NULL)
        *n_out = n;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static long read_file(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return (long)n;
}

static int test_greedy_text_matches_published_bytes(void)
{
    char model[1024], txt[1024], cmd[2048];
    if (rs_test_refdata("stories260K.gguf", model, sizeof(model)) == NULL ||
        rs_test_refdata("expected/stories260K.greedy-n256.txt", txt, sizeof(txt)) == NULL)
        return RS_TEST_SKIP;
    static char want[4096], got[8192];
    long nw = read_file(txt, want, sizeof(want));
    RS_CHECK(nw == 565);
    snprintf(cmd, sizeof(cmd), "-m '%s' -n 256 --temp 0", model);
    size_t ng = 0;
    RS_CHECK(run_tool(cmd, got, sizeof(got), &ng) == 0);
    RS_CHECK_MSG(ng == (size_t)nw && memcmp(got, want, ng) == 0, "got %zu bytes:\n%s", ng, got);
    return 0;
}

static int test_greedy_ids_match_expected(void)
{
    char model[1024], ids[1024], cmd[2048];
    if (rs_test_refdata("stories260K.gguf", model, sizeof(model)) == NULL ||
        rs_test_refdata("expected/stories260K.greedy-n256.ids", ids, sizeof(ids)) == NULL)
        return RS_TEST_SKIP;
    static char want[4096], got[4096];
    long nw = read_file(ids, want, sizeof(want));
    RS_CHECK(nw > 0);
    /* Portable kernels on 3 threads and small blocks: the same ids, by batch invariance. */
    snprintf(cmd, sizeof(cmd), "-m '%s' -n 256 --temp 0 --ids --isa portable --threads 3 "
                               "--block-size 5", model);
    RS_CHECK(run_tool(cmd, got, sizeof(got), NULL) == 0);
    /* Both are the ids separated by single spaces; compare as numbers. */
    const char *a = want, *b = got;
    int n = 0;
    for (;;) {
        char *ea, *eb;
        long x = strtol(a, &ea, 10), y = strtol(b, &eb, 10);
        if (ea == a || eb == b) {
            RS_CHECK_MSG(ea == a && eb == b, "lengths differ after %d ids", n);
            break;
        }
        RS_CHECK_MSG(x == y, "id %d: got %ld, want %ld", n, y, x);
        a = ea, b = eb, n++;
    }
    RS_CHECK(n == 256);
    return 0;
}

/* A prompt and sampling options run, and a fixed seed repeats exactly. */
static int test_sampling_with_seed_is_reproducible(void)
{
    char model[1024], cmd[2048];
    if (rs_test_refdata("stories260K.gguf", model, sizeof(model)) == NULL)
        return RS_TEST_SKIP;
    static char a[8192], b[8192];
    snprintf(cmd, sizeof(cmd), "-m '%s' -p 'Once upon a time' -n 40 --temp 0.9 --seed 11 "
                               "--top-k 40 --top-p 0.95 --min-p 0.02 --repeat-penalty 1.1", model);
    RS_CHECK(run_tool(cmd, a, sizeof(a), NULL) == 0);
    RS_CHECK(run_tool(cmd, b, sizeof(b), NULL) == 0);
    RS_CHECK(strlen(a) > 20 && strcmp(a, b) == 0);
    return 0;
}

/*
 * --prompt-ids and --logits-out on a refdata/arch model: the logits of every
 * prompt position equal llama.cpp's within the README's F32 tolerance, and
 * the greedy ids that follow are llama.cpp's (until an end-of-generation id,
 * where the tool stops and the oracle does not).
 */
static int test_prompt_ids_and_logits_out(void)
{
    char model[1024], ids[1024], lref[1024], gref[1024], out[512], cmd[4096];
    if (rs_test_refdata("arch/qwen2.gguf", model, sizeof(model)) == NULL ||
        rs_test_refdata("arch/qwen2.seq16.ids", ids, sizeof(ids)) == NULL ||
        rs_test_refdata("arch/qwen2.seq16.logits.f32", lref, sizeof(lref)) == NULL ||
        rs_test_refdata("arch/qwen2.seq16.greedy.ids", gref, sizeof(gref)) == NULL)
        return RS_TEST_SKIP;
    static char text[1024], got[4096], want[4096];
    long n = read_file(ids, text, sizeof(text) - 1);
    RS_CHECK(n > 0);
    text[n] = '\0';
    for (char *p = text; *p; p++)
        *p = *p == ' ' ? ',' : *p == '\n' ? '\0' : *p;
    snprintf(out, sizeof(out), "%s/logits.f32", rs_test_tmpdir());
    snprintf(cmd, sizeof(cmd), "-m '%s' --prompt-ids %s --logits-out '%s' -n 24 --temp 0 --ids",
             model, text, out);
    RS_CHECK(run_tool(cmd, got, sizeof(got), NULL) == 0);
    static float a[16 * 512 + 1], b[16 * 512];
    RS_CHECK(read_file(out, (char *)a, sizeof(a)) == (long)sizeof(b)); /* no more than 16 rows */
    RS_CHECK(read_file(lref, (char *)b, sizeof(b)) == (long)sizeof(b));
    double mx = 0;
    for (size_t i = 0; i < 16 * 512; i++)
        mx = mx > fabs((double)a[i] - b[i]) ? mx : fabs((double)a[i] - b[i]);
    fprintf(stderr, "qwen2 seq16 through the tool: max |logit - llama.cpp| %.3g\n", mx);
    RS_CHECK(mx < 1e-4);
    RS_CHECK(read_file(gref, want, sizeof(want)) > 0);
    const char *p = got, *q = want;
    int k = 0;
    for (;; k++) {
        char *ep, *eq;
        long x = strtol(p, &ep, 10), y = strtol(q, &eq, 10);
        if (ep == p)
            break;
        RS_CHECK_MSG(eq != q && x == y, "greedy id %d: got %ld, want %ld", k, x, y);
        p = ep, q = eq;
    }
    RS_CHECK(k > 0);
    return 0;
}

static int test_bad_arguments_exit_2(void)
{
    static const char *cases[] = {
        "",                                  /* no -m */
        "-m x -n 0",                         /* -n below 1 */
        "-m x -n 12abc",                     /* trailing garbage */
        "-m x -n -3",                        /* negative */
        "-m x --temp -1",                    /* negative temperature */
        "-m x --temp nan",                   /* not finite */
        "-m x --top-p 1.5",                  /* out of (0, 1] */
        "-m x --min-p 2",                    /* out of [0, 1] */
        "-m x --repeat-penalty 0",           /* must be > 0 */
        "-m x --threads 5000",               /* out of range */
        "-m x --block-size 0",               /* out of range */
        "-m x --isa sse9",                   /* unknown variant */
        "-m x --bogus",                      /* unknown option */
        "-m x -n",                           /* missing value */
        "-m x stray",                        /* stray argument */
        "-m x --seed 18446744073709551616",  /* above 2^64-1 */
        "-m x --prompt-ids 1,,2",            /* empty item */
        "-m x --prompt-ids 1,-2",            /* negative */
        "-m x --prompt-ids 7x",              /* not a number */
        "-m x -p hi --prompt-ids 1",         /* both prompts */
    };
    char out[256];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        RS_CHECK_MSG(run_tool(cases[i], out, sizeof(out), NULL) == 2, "'%s' did not exit 2",
                     cases[i]);
    return 0;
}

static int test_unreadable_model_exits_1(void)
{
    char path[512], out[256], cmd[1024];
    snprintf(path, sizeof(path), "%s/not-a-model.gguf", rs_test_tmpdir());
    FILE *f = fopen(path, "wb");
    RS_CHECK(f != NULL);
    fputs("GGUF but not really", f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "-m '%s'", path);
    RS_CHECK(run_tool(cmd, out, sizeof(out), NULL) == 1);
    RS_CHECK(run_tool("-m /nonexistent/model.gguf", out, sizeof(out), NULL) == 1);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_greedy_text_matches_published_bytes),
    RS_TEST(test_greedy_ids_match_expected),
    RS_TEST(test_sampling_with_seed_is_reproducible),
    RS_TEST(test_prompt_ids_and_logits_out),
    RS_TEST(test_bad_arguments_exit_2),
    RS_TEST(test_unreadable_model_exits_1),
};
RS_TEST_MAIN(cases)

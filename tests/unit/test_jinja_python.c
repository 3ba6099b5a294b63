/* SPDX-License-Identifier: MIT */
/*
 * The chat-template renderer against Python itself: test_jinja_oracle.py
 * draws random values (strings rich in Unicode whitespace, final sigma, ß,
 * İ, combining marks, controls and emoji; ints and floats across magnitudes;
 * nested JSON) and writes a template applying many operations to each, plus
 * what Python 3 computes for each (str methods, repr, slicing, arithmetic,
 * round, % and str.format, json.dumps in every tojson form, Jinja's title and
 * indent filters as Jinja defines them). The renderer must agree on every
 * field. Several seeds per kind; the first mismatches are printed.
 */
#include <unistd.h>

#include "tests/unit/jinja_fixture.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, f);
    b[*len] = 0;
    fclose(f);
    return b;
}

/* Field-by-field comparison of \x1d-terminated records of \x1e-separated fields. */
static int compare(const char *mode, int seed, const char *want, size_t wl, const char *got, size_t gl)
{
    size_t i = 0, j = 0;
    int rec = 0, field = 0, bad = 0;
    while (i < wl || j < gl) {
        size_t a = i, b = j;
        while (i < wl && want[i] != '\x1e' && want[i] != '\x1d')
            i++;
        while (j < gl && got[j] != '\x1e' && got[j] != '\x1d')
            j++;
        if (i - a != j - b || memcmp(want + a, got + b, i - a) != 0) {
            if (++bad <= 5)
                fprintf(stderr, "  %s seed %d record %d field %d:\n    python [%.*s]\n    ours   [%.*s]\n",
                        mode, seed, rec, field, (int)(i - a > 300 ? 300 : i - a), want + a,
                        (int)(j - b > 300 ? 300 : j - b), got + b);
        }
        int end_w = i < wl && want[i] == '\x1d', end_g = j < gl && got[j] == '\x1d';
        if (end_w != end_g)
            return bad + 1000; /* record structure diverged */
        field = end_w ? 0 : field + 1;
        rec += end_w;
        i++;
        j++;
    }
    return bad;
}

static int run_mode(const char *mode, int seeds)
{
    const char *py = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    char cmd[2048], path[1024];
    int total_bad = 0, records = 0;
    for (int seed = 1; seed <= seeds; seed++) {
        snprintf(cmd, sizeof(cmd), "%s %s/tests/unit/test_jinja_oracle.py %s %d %s", py, RS_SOURCE_DIR,
                 mode, seed, rs_test_tmpdir());
        RS_CHECK_MSG(system(cmd) == 0, "%s failed", cmd);
        size_t tl, cl, wl;
        snprintf(path, sizeof(path), "%s/t.jinja", rs_test_tmpdir());
        char *tmpl = slurp(path, &tl);
        snprintf(path, sizeof(path), "%s/conv.json", rs_test_tmpdir());
        char *conv = slurp(path, &cl);
        snprintf(path, sizeof(path), "%s/want.txt", rs_test_tmpdir());
        char *want = slurp(path, &wl);
        RS_CHECK(tmpl && conv && want);
        struct jt_result r;
        jt_run(tmpl, conv, &r);
        RS_CHECK_MSG(r.rc == RS_OK, "%s seed %d: %s at %u:%u: %s", mode, seed,
                     rs_jinja_errkind_name(r.err.kind), r.err.line, r.err.col, r.err.msg);
        total_bad += compare(mode, seed, want, wl, r.out, r.len);
        for (size_t k = 0; k < wl; k++)
            records += want[k] == '\x1d';
        jt_free(&r);
        free(tmpl), free(conv), free(want);
    }
    fprintf(stderr, "jinja vs python (%s): %d records over %d seeds, %d fields differ\n", mode, records,
            seeds, total_bad);
    RS_CHECK(total_bad == 0);
    return 0;
}

static int test_str_methods_match_python(void) { return run_mode("str", 3); }
static int test_numbers_match_python(void) { return run_mode("num", 4); }
static int test_tojson_and_repr_match_python(void) { return run_mode("json", 3); }

static const struct rs_test_case cases[] = {
    RS_TEST(test_str_methods_match_python),
    RS_TEST(test_numbers_match_python),
    RS_TEST(test_tojson_and_repr_match_python),
};
RS_TEST_MAIN(cases)

/* SPDX-License-Identifier: MIT */
/*
 * Minimal test harness. A test file defines `static int test_<case>(void)`
 * functions (0 pass, 1 fail, RS_TEST_SKIP skip), lists them with RS_TEST() in
 * a table and ends with RS_TEST_MAIN(table). tests/CMakeLists.txt registers
 * every case with ctest by scanning for that signature, and runs
 * `<exe> <case>`; with no argument the executable runs every case.
 */
#ifndef RS_TEST_H
#define RS_TEST_H

#include <stddef.h>
#include <stdio.h>

#define RS_TEST_SKIP 77

struct rs_test_case {
    const char *name; /* function name, "test_" prefix included */
    int (*fn)(void);
};

#define RS_TEST(fn) {#fn, fn}

#define RS_CHECK(cond)                                                                     \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);      \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

#define RS_CHECK_MSG(cond, ...)                                                            \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);       \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fputc('\n', stderr);                                                           \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

int rs_test_main(int argc, char **argv, const struct rs_test_case *cases, size_t n_cases);

#define RS_TEST_MAIN(cases)                                                                \
    int main(int argc, char **argv)                                                        \
    {                                                                                      \
        return rs_test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));          \
    }

/*
 * Path of a file under ../shared/refdata (env RS_REFDATA overrides), written
 * into buf. Returns buf, or NULL (after printing why) when the file is absent,
 * in which case the caller returns RS_TEST_SKIP.
 */
const char *rs_test_refdata(const char *rel, char *buf, size_t buf_len);

/* Directory holding the built executables (env RS_BIN, else build/bin). */
const char *rs_test_bindir(void);

/* A scratch directory unique to this process, created on first use. */
const char *rs_test_tmpdir(void);

/*
 * Runs the built program `bin` (in rs_test_bindir) with args (NULL-terminated, at
 * most 14), its stdout and stderr together into out (cap bytes, NUL-terminated);
 * returns its exit code, or 128 + the signal that ended it.
 */
int rs_test_run(const char *bin, const char *const *args, char *out, size_t cap);

/* A name unique to this process and call, e.g. for shared-memory segments. */
void rs_test_unique_name(const char *prefix, char *buf, size_t buf_len);

#endif

/* SPDX-License-Identifier: MIT */
/* Test harness: runs one named case or all of them; see rs_test.h. */
#include "tests/rs_test.h"

#include <ftw.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[256]; /* rs_test_tmpdir's, once made */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void remove_tree(const char *dir)
{
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int run_case(const struct rs_test_case *c)
{
    int rc = c->fn();
    /* A failed case keeps its files for a look. */
    if ((rc == 0 || rc == RS_TEST_SKIP) && tmpdir[0] != '\0') {
        remove_tree(tmpdir);
        tmpdir[0] = '\0'; /* the next case (all run in one process) makes it again */
    }
    fprintf(stderr, "%s: %s\n", c->name, rc == 0 ? "ok" : rc == RS_TEST_SKIP ? "skipped" : "FAILED");
    return rc;
}

int rs_test_main(int argc, char **argv, const struct rs_test_case *cases, size_t n_cases)
{
    if (argc < 2) {
        int failed = 0;
        for (size_t i = 0; i < n_cases; i++) {
            int rc = run_case(&cases[i]);
            failed += rc != 0 && rc != RS_TEST_SKIP;
        }
        return failed ? 1 : 0;
    }
    for (size_t i = 0; i < n_cases; i++) {
        const char *name = cases[i].name;
        if (strncmp(name, "test_", 5) == 0 && strcmp(name + 5, argv[1]) == 0)
            return run_case(&cases[i]);
        if (strcmp(name, argv[1]) == 0)
            return run_case(&cases[i]);
    }
    fprintf(stderr, "%s: no test case named '%s'\n", argv[0], argv[1]);
    return 1;
}

const char *rs_test_refdata(const char *rel, char *buf, size_t buf_len)
{
    const char *root = getenv("RS_REFDATA");
    if (root == NULL || root[0] == '\0')
        root = RS_SOURCE_DIR "/../shared/refdata";
    snprintf(buf, buf_len, "%s/%s", root, rel);
    if (access(buf, R_OK) != 0) {
        fprintf(stderr, "refdata file %s not found: skipping\n", buf);
        return NULL;
    }
    return buf;
}

const char *rs_test_bindir(void)
{
    const char *bin = getenv("RS_BIN");
    return bin != NULL && bin[0] != '\0' ? bin : RS_SOURCE_DIR "/build/bin";
}

const char *rs_test_tmpdir(void)
{
    if (tmpdir[0] == '\0') {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof(tmpdir), "%s/rs-test-%d", base ? base : "/tmp", (int)getpid());
        /* One left by a dead process that had this pid (the Release run before the
           sanitizer one, say) would hand this test its stale files. */
        remove_tree(tmpdir);
        mkdir(tmpdir, 0700);
    }
    return tmpdir;
}

void rs_test_unique_name(const char *prefix, char *buf, size_t buf_len)
{
    static atomic_uint counter;
    snprintf(buf, buf_len, "%s-%d-%u", prefix, (int)getpid(), atomic_fetch_add(&counter, 1));
}

int rs_test_run(const char *bin, const char *const *args, char *out, size_t cap)
{
    char path[600], file[700];
    static unsigned runs;
    snprintf(path, sizeof(path), "%s/%s", rs_test_bindir(), bin);
    snprintf(file, sizeof(file), "%s/run-%u.out", rs_test_tmpdir(), runs++);
    const char *argv[16] = {path};
    for (int i = 0; args[i] != NULL && i < 14; i++)
        argv[i + 1] = args[i];
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(path, (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    FILE *f = fopen(file, "r");
    size_t n = f != NULL ? fread(out, 1, cap - 1, f) : 0;
    out[n] = '\0';
    if (f != NULL)
        fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

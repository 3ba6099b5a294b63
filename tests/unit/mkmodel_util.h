/* SPDX-License-Identifier: MIT */
/*
 * Functions shared by test_mkmodel.c and test_convert.c: run the real
 * ringserve-mkmodel binary (from RS_BIN) and capture its exit status and
 * stderr. Static, so each test executable gets its own copy.
 */
#ifndef RS_TEST_MKMODEL_UTIL_H
#define RS_TEST_MKMODEL_UTIL_H

#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/rs_test.h"

extern char **environ;

/*
 * Runs ringserve-mkmodel with args (NULL-terminated, without argv[0]); its
 * stderr goes to `err` (NUL-terminated, truncated to err_len). Returns the
 * exit status, or -1 when it could not run or died from a signal.
 */
static int mkmodel_run(const char *const *args, char *err, size_t err_len)
{
    char bin[1024], log[512];
    const char *argv[64];
    snprintf(bin, sizeof(bin), "%s/ringserve-mkmodel", rs_test_bindir());
    snprintf(log, sizeof(log), "%s/mkmodel-stderr.txt", rs_test_tmpdir());
    argv[0] = bin;
    size_t n = 0;
    while (args[n] != NULL && n < 62) {
        argv[n + 1] = args[n];
        n++;
    }
    argv[n + 1] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    int rc = posix_spawn(&pid, bin, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    int status = 0;
    if (rc != 0 || waitpid(pid, &status, 0) != pid) {
        snprintf(err, err_len, "cannot run ringserve-mkmodel from %.400s", rs_test_bindir());
        return -1;
    }
    FILE *f = fopen(log, "r");
    size_t got = f ? fread(err, 1, err_len - 1, f) : 0;
    err[got] = '\0';
    if (f != NULL)
        fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Path of a scratch file in the test's directory. */
static const char *mkmodel_tmp(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", rs_test_tmpdir(), name);
    return buf;
}

#endif

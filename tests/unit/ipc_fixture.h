/* SPDX-License-Identifier: MIT */
/*
 * Functions the ipc unit tests share: a uniquely named segment created from a
 * region list and removed afterwards, and running a function in a forked
 * child (a real separate process, for incarnations that must die). When a
 * check fails and the case returns early, an exit handler still removes the
 * segments and kills children not yet waited for (a stopped one included),
 * so a failing run leaves nothing behind.
 */
#ifndef RS_IPC_FIXTURE_H
#define RS_IPC_FIXTURE_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/shm.h"
#include "tests/rs_test.h"

struct fx {
    char name[96];
    rs_shm *shm;
};

#define FX_MAX 64
static char fx_names[FX_MAX][96];
static pid_t fx_pids[FX_MAX];
static pid_t fx_owner;

static void fx_cleanup(void)
{
    if (getpid() != fx_owner)
        return;
    for (int i = 0; i < FX_MAX; i++) {
        if (fx_pids[i] > 0) {
            kill(fx_pids[i], SIGKILL);
            waitpid(fx_pids[i], NULL, 0);
        }
        if (fx_names[i][0] != '\0')
            shm_unlink(fx_names[i]); /* most are gone already: no error wanted */
    }
}

static inline void fx_track(char (*slots)[96], pid_t *pids, const char *name, pid_t pid)
{
    if (fx_owner == 0) {
        fx_owner = getpid();
        atexit(fx_cleanup);
    }
    for (int i = 0; i < FX_MAX; i++) {
        if (name != NULL && slots[i][0] == '\0') {
            snprintf(slots[i], 96, "%s", name);
            return;
        }
        if (name == NULL && pids[i] == 0) {
            pids[i] = pid;
            return;
        }
    }
}

/* Creates a fresh segment; 0 on success. */
static inline int fx_create(struct fx *f, const struct rs_shm_region_spec *specs, size_t n)
{
    rs_test_unique_name("/rs-ut", f->name, sizeof(f->name));
    fx_track(fx_names, fx_pids, f->name, 0);
    rs_err e = rs_shm_create(f->name, 1, specs, n, &f->shm);
    if (e != RS_OK)
        fprintf(stderr, "fx_create %s: %s\n", f->name, rs_strerror(e));
    return e == RS_OK ? 0 : 1;
}

static inline void fx_destroy(struct fx *f)
{
    rs_shm_detach(&f->shm);
    rs_shm_unlink(f->name);
}

/* Forks; the child runs fn(arg) and _exits with its result. Returns the pid. */
static inline pid_t fx_spawn(int (*fn)(void *), void *arg)
{
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0)
        _exit(fn(arg));
    fx_track(fx_names, fx_pids, NULL, pid);
    return pid;
}

/* Waits for pid; returns its exit code, or 128 + signal when killed. */
static inline int fx_wait(pid_t pid)
{
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        ;
    for (int i = 0; i < FX_MAX; i++)
        if (fx_pids[i] == pid)
            fx_pids[i] = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#endif

/* SPDX-License-Identifier: MIT */
/*
 * Fault injection for the calls that can fail under load or hostility: every
 * shm_open, ftruncate, fallocate, mmap, mlock, malloc/calloc and zmq_* call of
 * ipc/ goes through the table rs_sys, so a test can make any of them fail at
 * its n-th call and show that each call site returns a clear error (or
 * retries) instead of crashing or leaking. Armed by env
 * RS_SYS_FAIL=call:n[:errno] at start-up (a daemon under test needs no code)
 * or rs_sys_fail_set(); a test may also store its own function in a slot.
 * Disarmed, a call costs one indirect jump. Leaves out: several armed calls at
 * once, and calls outside ipc/ (the daemons' own allocations).
 */
#ifndef RS_FAILPOINT_SYS_H
#define RS_FAILPOINT_SYS_H

#include <stddef.h>
#include <sys/types.h>
#include <zmq.h>

#include "common/err.h"

/* The calls, one slot each; the default slot is the real call. */
struct rs_sys_ops {
    int (*shm_open)(const char *name, int oflag, mode_t mode);
    int (*ftruncate)(int fd, off_t len);
    int (*fallocate)(int fd, int mode, off_t off, off_t len);
    void *(*mmap)(void *addr, size_t len, int prot, int flags, int fd, off_t off);
    int (*mlock)(const void *addr, size_t len); /* the raw syscall: ASan fakes mlock() */
    void *(*malloc)(size_t n);
    void *(*calloc)(size_t n, size_t size);
    void *(*zmq_socket)(void *ctx, int type);
    int (*zmq_bind)(void *s, const char *ep);
    int (*zmq_connect)(void *s, const char *ep);
    int (*zmq_setsockopt)(void *s, int opt, const void *v, size_t len);
    int (*zmq_poll)(zmq_pollitem_t *items, int n, long timeout_ms);
    int (*zmq_msg_recv)(zmq_msg_t *m, void *s, int flags);
    int (*zmq_send)(void *s, const void *buf, size_t len, int flags);
};

/* The table ipc/ calls through; process-wide. Tests may replace slots before the code runs. */
extern struct rs_sys_ops rs_sys;

/*
 * Arms `spec` = "call:n" or "call:n:errno" (call: a slot name above; n >= 1;
 * errno: a number, default the call's usual one, e.g. ENOMEM for malloc,
 * EMFILE for shm_open): the n-th call of that slot fails (errno set, its
 * failure value returned); every other call runs for real. NULL or ""
 * disarms and restores every slot. RS_EINVAL (logged) for a bad spec. The
 * count is atomic, so threads may call the slot; arm before they start.
 */
rs_err rs_sys_fail_set(const char *spec);

/* Calls of the armed slot so far (0 when disarmed); 1 more than n means it fired. */
unsigned long rs_sys_fail_calls(void);

/* Slot names, NULL-terminated, in table order: what a test iterates over. */
extern const char *const rs_sys_call_names[];

#endif

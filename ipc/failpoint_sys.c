/* SPDX-License-Identifier: MIT */
/*
 * The call table of failpoint_sys.h: real calls by default; arming one slot
 * swaps in a wrapper that counts calls and fails the n-th with the armed
 * errno. One row per slot (name, default errno, wrapper) keeps adding a
 * call to one line here and one slot in the header.
 */
#include "ipc/failpoint_sys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"

static int raw_mlock(const void *addr, size_t len)
{
    return (int)syscall(SYS_mlock, addr, len);
}

static int raw_fallocate(int fd, int mode, off_t off, off_t len)
{
    return fallocate(fd, mode, off, len);
}

#define REAL_OPS                                                                               \
    {                                                                                          \
        .shm_open = shm_open, .ftruncate = ftruncate, .fallocate = raw_fallocate, .mmap = mmap, \
        .mlock = raw_mlock, .malloc = malloc, .calloc = calloc, .zmq_socket = zmq_socket,       \
        .zmq_bind = zmq_bind, .zmq_connect = zmq_connect, .zmq_setsockopt = zmq_setsockopt,     \
        .zmq_poll = zmq_poll, .zmq_msg_recv = zmq_msg_recv, .zmq_send = zmq_send,               \
    }

static const struct rs_sys_ops real_ops = REAL_OPS;

struct rs_sys_ops rs_sys = REAL_OPS;

static atomic_ulong calls;
static unsigned long target;
static int fail_errno;

/* 1 when this call is the armed one (errno set). */
static int fire(void)
{
    if (atomic_fetch_add(&calls, 1) + 1 != target)
        return 0;
    errno = fail_errno;
    return 1;
}

static int f_shm_open(const char *n, int o, mode_t m)
{
    return fire() ? -1 : real_ops.shm_open(n, o, m);
}
static int f_ftruncate(int fd, off_t l)
{
    return fire() ? -1 : real_ops.ftruncate(fd, l);
}
static int f_fallocate(int fd, int m, off_t o, off_t l)
{
    return fire() ? -1 : real_ops.fallocate(fd, m, o, l);
}
static void *f_mmap(void *a, size_t l, int p, int fl, int fd, off_t o)
{
    return fire() ? MAP_FAILED : real_ops.mmap(a, l, p, fl, fd, o);
}
static int f_mlock(const void *a, size_t l)
{
    return fire() ? -1 : real_ops.mlock(a, l);
}
static void *f_malloc(size_t n)
{
    return fire() ? NULL : real_ops.malloc(n);
}
static void *f_calloc(size_t n, size_t s)
{
    return fire() ? NULL : real_ops.calloc(n, s);
}
static void *f_zmq_socket(void *c, int t)
{
    return fire() ? NULL : real_ops.zmq_socket(c, t);
}
static int f_zmq_bind(void *s, const char *e)
{
    return fire() ? -1 : real_ops.zmq_bind(s, e);
}
static int f_zmq_connect(void *s, const char *e)
{
    return fire() ? -1 : real_ops.zmq_connect(s, e);
}
static int f_zmq_setsockopt(void *s, int o, const void *v, size_t l)
{
    return fire() ? -1 : real_ops.zmq_setsockopt(s, o, v, l);
}
static int f_zmq_poll(zmq_pollitem_t *it, int n, long t)
{
    return fire() ? -1 : real_ops.zmq_poll(it, n, t);
}
static int f_zmq_msg_recv(zmq_msg_t *m, void *s, int f)
{
    return fire() ? -1 : real_ops.zmq_msg_recv(m, s, f);
}
static int f_zmq_send(void *s, const void *b, size_t l, int f)
{
    return fire() ? -1 : real_ops.zmq_send(s, b, l, f);
}

#define ROW(call, err) {#call, err, offsetof(struct rs_sys_ops, call), (void (*)(void))f_##call}
static const struct {
    const char *name;
    int err;       /* the errno a real failure of this call most often has */
    size_t offset; /* its slot in struct rs_sys_ops */
    void (*wrapper)(void);
} rows[] = {
    ROW(shm_open, EMFILE),      ROW(ftruncate, ENOSPC), ROW(fallocate, ENOSPC),
    ROW(mmap, ENOMEM),          ROW(mlock, EPERM),      ROW(malloc, ENOMEM),
    ROW(calloc, ENOMEM),        ROW(zmq_socket, EMFILE), ROW(zmq_bind, EADDRINUSE),
    ROW(zmq_connect, EMFILE),   ROW(zmq_setsockopt, EINVAL), ROW(zmq_poll, EFAULT),
    ROW(zmq_msg_recv, EFAULT),  ROW(zmq_send, EFAULT),
};
#define N_ROWS (sizeof(rows) / sizeof(rows[0]))
_Static_assert(N_ROWS * sizeof(void (*)(void)) == sizeof(struct rs_sys_ops), "a row per slot");

const char *const rs_sys_call_names[] = {
    "shm_open", "ftruncate", "fallocate", "mmap", "mlock", "malloc", "calloc", "zmq_socket",
    "zmq_bind", "zmq_connect", "zmq_setsockopt", "zmq_poll", "zmq_msg_recv", "zmq_send", NULL,
};

rs_err rs_sys_fail_set(const char *spec)
{
    rs_sys = real_ops;
    target = 0;
    atomic_store(&calls, 0);
    if (spec == NULL || spec[0] == '\0')
        return RS_OK;
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : 0;
    size_t r = 0;
    while (r < N_ROWS && !(strlen(rows[r].name) == len && strncmp(rows[r].name, spec, len) == 0))
        r++;
    char *end = NULL;
    unsigned long n = colon ? strtoul(colon + 1, &end, 10) : 0;
    long err = rows[r < N_ROWS ? r : 0].err;
    if (end != NULL && *end == ':')
        err = strtol(end + 1, &end, 10);
    if (r == N_ROWS || n == 0 || end == NULL || *end != '\0' || err <= 0 || err > 4095) {
        rs_log_error("RS_SYS_FAIL '%s': expected call:n[:errno] with a call of the table "
                     "(shm_open, mmap, malloc, zmq_send, ...) and n >= 1", spec);
        return RS_EINVAL;
    }
    target = n;
    fail_errno = (int)err;
    memcpy((char *)&rs_sys + rows[r].offset, &rows[r].wrapper, sizeof(rows[r].wrapper));
    return RS_OK;
}

unsigned long rs_sys_fail_calls(void)
{
    return target != 0 ? atomic_load(&calls) : 0;
}

__attribute__((constructor)) static void sys_fail_from_env(void)
{
    const char *spec = getenv("RS_SYS_FAIL");
    if (spec != NULL && spec[0] != '\0')
        rs_sys_fail_set(spec);
}

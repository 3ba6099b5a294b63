/* SPDX-License-Identifier: MIT */
/*
 * Reclaiming a dead segment name (shm.h: rs_shm_reclaim). A segment of our own
 * uid that holds no usable image (another program's bytes, a corrupt
 * directory, a creation whose creator died) would otherwise block start-up
 * for good; one of another owner, or a valid one of another configuration,
 * is never touched. Decides on the descriptor it opened, then unlinks only if
 * the name still names that same file.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "ipc/failpoint_sys.h"
#include "ipc/shm_impl.h"

/* An unformatted segment older than this lost its creator (creation takes well under it). */
#define RECLAIM_YOUNG_S 30

static int creator_gone(uint32_t pid)
{
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Why the image of `fd` (st) is garbage, or NULL when it may be live or valid. */
static const char *garbage_reason(int fd, const struct stat *st, char *buf, size_t len)
{
    struct shm_hdr h;
    time_t now = time(NULL);
    int young = now - st->st_ctime < RECLAIM_YOUNG_S;
    if ((uint64_t)st->st_size < SHM_HDR_BYTES || pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
        return young ? NULL : "smaller than a segment header and not written for 30 s";
    if (h.magic == 0)
        return young ? NULL : "header never written (its creator died while creating it)";
    if (h.magic != RS_SHM_MAGIC)
        return "not a ringserve segment (bad magic)";
    if (atomic_load_explicit(&h.state, memory_order_acquire) != SHM_READY) {
        if (h.creator_pid == 0) /* a creator still writing its header, unless it is old */
            return young ? NULL : "creation never finished (no creator recorded, 30 s old)";
        return creator_gone(h.creator_pid) ? "creation never finished and its creator is gone"
                                           : NULL;
    }
    void *p = rs_sys.mmap(NULL, (size_t)st->st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return NULL;
    char why[200];
    rs_err e = rs_shm_validate(p, (uint64_t)st->st_size, why, sizeof(why));
    munmap(p, (size_t)st->st_size);
    if (e == RS_OK)
        return NULL;
    snprintf(buf, len, "corrupt image (%s)", why);
    return buf;
}

/* 1 when `name` still names the file described by `st` (device and inode). */
static int same_file(const char *name, const struct stat *st)
{
    int fd = rs_sys.shm_open(name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
    struct stat now;
    int same = fd >= 0 && fstat(fd, &now) == 0 && now.st_dev == st->st_dev &&
               now.st_ino == st->st_ino;
    if (fd >= 0)
        close(fd);
    return same;
}

rs_err rs_shm_reclaim(const char *name)
{
    int fd = rs_sys.shm_open(name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
    if (fd < 0)
        return errno == ENOENT ? RS_ENOENT : RS_EIO;
    struct stat st;
    rs_err e = RS_EEXIST;
    char buf[256];
    const char *why = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        e = RS_EIO;
    } else if (st.st_uid != geteuid()) {
        rs_log_error("segment %s: owned by uid %u with mode %04o, not by this service (uid %u): "
                     "left untouched",
                     name, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
                     (unsigned)geteuid());
        e = RS_EINVAL;
    } else {
        why = garbage_reason(fd, &st, buf, sizeof(buf));
    }
    close(fd);
    if (why == NULL)
        return e;
    if (!same_file(name, &st))
        return RS_EAGAIN; /* replaced meanwhile: decide again on the new file */
    rs_log_warn("segment %s (uid %u, mode %04o, %lld bytes): %s: removing it to create it anew",
                name, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
                (long long)st.st_size, why);
    if (shm_unlink(name) != 0 && errno != ENOENT) {
        rs_log_error("segment %s: unlink: %s", name, strerror(errno));
        return RS_EIO;
    }
    return RS_OK;
}

/* SPDX-License-Identifier: MIT */
/*
 * Runtime directory for ipc:// sockets (rundir.h). The checks run on an
 * O_NOFOLLOW descriptor of the directory, so a symlink swapped in between
 * creation and checking is refused rather than followed.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "ipc/rundir.h"

static rs_err lookup_group(const char *group, gid_t *gid)
{
    char buf[4096];
    struct group gr, *res = NULL;
    int rc = getgrnam_r(group, &gr, buf, sizeof(buf), &res);
    if (res == NULL) {
        rs_log_error("rundir: group '%s': %s", group, rc ? strerror(rc) : "no such group");
        return RS_ENOENT;
    }
    *gid = gr.gr_gid;
    return RS_OK;
}

/* Checks an open directory against the wanted owner, mode and group; logs what is wrong. */
static rs_err check_dir(const char *dir, int fd, mode_t want, gid_t gid, bool use_group)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rs_log_error("rundir: stat %s: %s", dir, strerror(errno));
        return RS_EIO;
    }
    if (st.st_uid != geteuid()) {
        rs_log_error("rundir: %s is owned by uid %u, not by this service (uid %u); refusing it",
                     dir, (unsigned)st.st_uid, (unsigned)geteuid());
        return RS_EINVAL;
    }
    if ((st.st_mode & 07777) != want) {
        rs_log_error("rundir: %s has mode %04o; it must be %04o (%s): chmod %o %s", dir,
                     (unsigned)(st.st_mode & 07777), (unsigned)want,
                     use_group ? "owner and the configured group" : "owner only",
                     (unsigned)want, dir);
        return RS_EINVAL;
    }
    if (use_group && st.st_gid != gid) {
        rs_log_error("rundir: %s belongs to gid %u, not to the configured group (gid %u)", dir,
                     (unsigned)st.st_gid, (unsigned)gid);
        return RS_EINVAL;
    }
    return RS_OK;
}

rs_err rs_rundir_prepare(const char *dir, const char *group)
{
    bool use_group = group != NULL && group[0] != '\0';
    mode_t want = use_group ? 0750 : 0700;
    gid_t gid = (gid_t)-1;
    if (use_group && lookup_group(group, &gid) != RS_OK)
        return RS_ENOENT;
    bool created = mkdir(dir, want) == 0;
    if (!created && errno != EEXIST) {
        rs_log_error("rundir: mkdir %s: %s", dir, strerror(errno));
        return errno == ENOENT ? RS_ENOENT : RS_EIO;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        rs_log_error("rundir: %s: %s (it must be a real directory, not a symlink)", dir,
                     strerror(errno));
        return errno == ENOTDIR || errno == ELOOP ? RS_EINVAL : RS_EIO;
    }
    rs_err e = RS_OK;
    /* Ours: set exactly what we want (the umask may have removed bits). */
    if (created && ((use_group && fchown(fd, (uid_t)-1, gid) != 0) || fchmod(fd, want) != 0)) {
        rs_log_error("rundir: setting group/mode of %s: %s", dir, strerror(errno));
        e = RS_EIO;
    }
    if (e == RS_OK)
        e = check_dir(dir, fd, want, gid, use_group);
    close(fd);
    return e;
}

rs_err rs_rundir_endpoint(const char *dir, const char *name, char *out, size_t cap)
{
    if (strchr(name, '/') != NULL || name[0] == '\0') {
        rs_log_error("rundir: socket name '%s' must be a plain file name", name);
        return RS_EINVAL;
    }
    size_t path_len = strlen(dir) + 1 + strlen(name);
    if (path_len > RS_RUNDIR_PATH_MAX) {
        rs_log_error("rundir: socket path %s/%s is %zu bytes; the kernel allows %d (sun_path): "
                     "use a shorter runtime directory", dir, name, path_len, RS_RUNDIR_PATH_MAX);
        return RS_ERANGE;
    }
    if ((size_t)snprintf(out, cap, "ipc://%s/%s", dir, name) >= cap) {
        rs_log_error("rundir: endpoint buffer of %zu bytes too small", cap);
        return RS_ERANGE;
    }
    return RS_OK;
}

void rs_rundir_default(const char *instance, char *out, size_t cap)
{
    const char *env = getenv("RINGSERVE_RUNDIR");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (env != NULL && env[0] != '\0')
        snprintf(out, cap, "%s", env);
    else if (xdg != NULL && xdg[0] == '/')
        snprintf(out, cap, "%s/ringserve-%s", xdg, instance);
    else
        snprintf(out, cap, "/tmp/ringserve-%u-%s", (unsigned)getuid(), instance);
}

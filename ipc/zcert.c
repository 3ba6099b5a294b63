/* SPDX-License-Identifier: MIT */
/*
 * CURVE key files (zcert.h): generation through libzmq, writing with
 * O_EXCL and mode 0600 for secrets, and a strict line parser that checks a
 * secret against its public key (zmq_curve_public) so a mismatched pair is
 * caught when a daemon starts, not at the first failed handshake.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/log.h"
#include "ipc/zcert.h"

#define FILE_MAX 4096

bool rs_zcert_key_valid(const char *z85, size_t len)
{
    static const char alphabet[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   ".-:+=^!/*?&<>()[]{}@%$#";
    if (len != RS_ZCERT_Z85_LEN)
        return false;
    for (size_t i = 0; i < len; i++)
        if (z85[i] == '\0' || strchr(alphabet, z85[i]) == NULL)
            return false;
    char copy[RS_ZCERT_Z85_LEN + 1];
    uint8_t key[32];
    memcpy(copy, z85, len);
    copy[len] = '\0';
    return zmq_z85_decode(key, copy) != NULL; /* also rejects groups that overflow 2^32 */
}

rs_err rs_zcert_generate(struct rs_zcert *out)
{
    if (!zmq_has("curve")) {
        rs_log_error("zcert: this libzmq was built without CURVE");
        return RS_EUNSUPPORTED;
    }
    if (zmq_curve_keypair(out->public_z85, out->secret_z85) != 0) {
        rs_log_error("zcert: zmq_curve_keypair: %s", zmq_strerror(errno));
        return RS_EIO;
    }
    return RS_OK;
}

static rs_err write_new(const char *path, mode_t mode, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) {
        rs_log_error("zcert: cannot create %s: %s", path, strerror(errno));
        return errno == EEXIST ? RS_EEXIST : RS_EIO;
    }
    size_t len = strlen(text);
    bool ok = fchmod(fd, mode) == 0 && write(fd, text, len) == (ssize_t)len && fsync(fd) == 0;
    int saved = errno;
    if (close(fd) != 0 || !ok) {
        rs_log_error("zcert: cannot write %s: %s", path, strerror(ok ? errno : saved));
        unlink(path);
        return RS_EIO;
    }
    return RS_OK;
}

rs_err rs_zcert_save(const struct rs_zcert *c, const char *secret_path, const char *public_path)
{
    char text[256];
    if (!rs_zcert_key_valid(c->public_z85, strlen(c->public_z85)) ||
        !rs_zcert_key_valid(c->secret_z85, strlen(c->secret_z85))) {
        rs_log_error("zcert: cannot save an incomplete key pair");
        return RS_EINVAL;
    }
    snprintf(text, sizeof(text), "# ringserve CURVE secret key: keep private\npublic = %s\n"
             "secret = %s\n", c->public_z85, c->secret_z85);
    rs_err e = write_new(secret_path, 0600, text);
    if (e != RS_OK || public_path == NULL)
        return e;
    snprintf(text, sizeof(text), "# ringserve CURVE public key\npublic = %s\n", c->public_z85);
    return write_new(public_path, 0644, text);
}

/* Reads at most FILE_MAX bytes of path into buf (NUL-terminated); checks secrecy if asked. */
static rs_err read_small(const char *path, char *buf, size_t cap, struct stat *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rs_log_error("zcert: cannot open %s: %s", path, strerror(errno));
        return errno == ENOENT ? RS_ENOENT : RS_EIO;
    }
    ssize_t n = fstat(fd, st) == 0 ? read(fd, buf, cap - 1) : -1;
    int saved = errno;
    close(fd);
    if (n < 0) {
        rs_log_error("zcert: cannot read %s: %s", path, strerror(saved));
        return RS_EIO;
    }
    if ((size_t)n == cap - 1) {
        rs_log_error("zcert: %s is over %zu bytes: not a key file", path, cap - 2);
        return RS_EINVAL;
    }
    buf[n] = '\0';
    return RS_OK;
}

/* Parses one "name = value" line into out; RS_EINVAL (logged) when it is neither that nor blank. */
static rs_err parse_line(const char *path, int lineno, char *line, struct rs_zcert *out)
{
    line += strspn(line, " \t\r");
    if (line[0] == '\0' || line[0] == '#') /* '#' may occur inside a z85 key, so only here */
        return RS_OK;
    char name[16], value[64], extra[2];
    int n = sscanf(line, "%15[a-z] = %63s %1s", name, value, extra);
    char *dst = n == 2 && strcmp(name, "public") == 0   ? out->public_z85
                : n == 2 && strcmp(name, "secret") == 0 ? out->secret_z85
                                                        : NULL;
    if (dst == NULL || dst[0] != '\0' || !rs_zcert_key_valid(value, strlen(value))) {
        rs_log_error("zcert: %s line %d: expected 'public = KEY' or 'secret = KEY' once each, "
                     "KEY being 40 z85 characters", path, lineno);
        return RS_EINVAL;
    }
    memcpy(dst, value, RS_ZCERT_Z85_LEN + 1);
    return RS_OK;
}

static rs_err check_pair(const char *path, const struct stat *st, const struct rs_zcert *c)
{
    char derived[RS_ZCERT_Z85_LEN + 1];
    if (c->public_z85[0] == '\0') {
        rs_log_error("zcert: %s has no 'public = ' line", path);
        return RS_EINVAL;
    }
    if (c->secret_z85[0] == '\0')
        return RS_OK;
    if (st->st_mode & 0077) {
        rs_log_error("zcert: secret key file %s has mode %04o: readable by others; "
                     "chmod 600 it", path, (unsigned)(st->st_mode & 07777));
        return RS_EINVAL;
    }
    if (zmq_curve_public(derived, c->secret_z85) != 0 || strcmp(derived, c->public_z85) != 0) {
        rs_log_error("zcert: %s: the secret key does not belong to the public key", path);
        return RS_EINVAL;
    }
    return RS_OK;
}

rs_err rs_zcert_load(const char *path, struct rs_zcert *out)
{
    char text[FILE_MAX + 2];
    struct stat st;
    memset(out, 0, sizeof(*out));
    rs_err e = read_small(path, text, sizeof(text), &st);
    int lineno = 0;
    for (char *line = text; e == RS_OK && line != NULL;) {
        char *nl = strchr(line, '\n');
        if (nl != NULL)
            *nl = '\0';
        e = parse_line(path, ++lineno, line, out);
        line = nl != NULL ? nl + 1 : NULL;
    }
    if (e == RS_OK)
        e = check_pair(path, &st, out);
    if (e != RS_OK)
        memset(out, 0, sizeof(*out));
    return e;
}

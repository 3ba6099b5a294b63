/* SPDX-License-Identifier: MIT */
/* Line-atomic stderr logging; see log.h. */
#include "common/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static const char *log_stage = "ringserve";
static atomic_int log_level = -1;

void rs_log_init(const char *stage)
{
    if (stage != NULL)
        log_stage = stage;
}

void rs_log_set_level(enum rs_log_level level)
{
    atomic_store(&log_level, (int)level);
}

static int level_from_env(void)
{
    const char *v = getenv("RS_LOG_LEVEL");
    if (v == NULL)
        return RS_LOG_INFO;
    if (strcasecmp(v, "debug") == 0)
        return RS_LOG_DEBUG;
    if (strcasecmp(v, "warn") == 0)
        return RS_LOG_WARN;
    if (strcasecmp(v, "error") == 0)
        return RS_LOG_ERROR;
    return RS_LOG_INFO;
}

int rs_log_enabled(enum rs_log_level level)
{
    int cur = atomic_load(&log_level);
    if (cur < 0) {
        cur = level_from_env();
        atomic_store(&log_level, cur);
    }
    return (int)level >= cur;
}

static const char *level_name(enum rs_log_level level)
{
    static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    return (unsigned)level < 4 ? names[level] : "?";
}

static int format_id(char *buf, size_t len, uint64_t id)
{
    return id == RS_LOG_NOID ? snprintf(buf, len, "-") : snprintf(buf, len, "%llu", (unsigned long long)id);
}

void rs_log_write(enum rs_log_level level, uint64_t req_id, uint64_t batch_id, const char *file,
                  int line, const char *fmt, ...)
{
    if (!rs_log_enabled(level))
        return;
    char buf[2048], req[24], batch[24], stamp[32];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    format_id(req, sizeof(req), req_id);
    format_id(batch, sizeof(batch), batch_id);
    const char *base = strrchr(file, '/');
    int n = snprintf(buf, sizeof(buf), "%s.%06ldZ %s[%d] %s req=%s batch=%s %s:%d: ", stamp,
                     ts.tv_nsec / 1000, log_stage, (int)getpid(), level_name(level), req, batch,
                     base ? base + 1 : file, line);
    if (n < 0)
        return;
    if ((size_t)n < sizeof(buf)) {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
        va_end(ap);
        n = m < 0 ? n : n + m;
    }
    if ((size_t)n >= sizeof(buf) - 1)
        n = (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    ssize_t off = 0;
    while (off < n) {
        ssize_t w = write(STDERR_FILENO, buf + off, (size_t)(n - off));
        if (w <= 0)
            break;
        off += w;
    }
}

/* SPDX-License-Identifier: MIT */
/*
 * Logging with the stage name, request id and batch id on every line, so one
 * request can be followed across the four processes with grep. One write(2)
 * per line to stderr, so concurrent writers never interleave within a line.
 * Level from env RS_LOG_LEVEL (debug, info, warn, error; default info).
 */
#ifndef RS_LOG_H
#define RS_LOG_H

#include <stdint.h>

enum rs_log_level { RS_LOG_DEBUG = 0, RS_LOG_INFO = 1, RS_LOG_WARN = 2, RS_LOG_ERROR = 3 };

/* Id value meaning "no request" / "no batch"; printed as '-'. */
#define RS_LOG_NOID UINT64_MAX

/* Sets the stage name printed on each line (borrows `stage`: keep it alive). */
void rs_log_init(const char *stage);

/* Overrides the level (otherwise taken from RS_LOG_LEVEL at first use). */
void rs_log_set_level(enum rs_log_level level);

/* True when `level` would be printed; lets callers skip costly formatting. */
int rs_log_enabled(enum rs_log_level level);

void rs_log_write(enum rs_log_level level, uint64_t req_id, uint64_t batch_id, const char *file,
                  int line, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#define rs_log_debug(...) rs_log_write(RS_LOG_DEBUG, RS_LOG_NOID, RS_LOG_NOID, __FILE__, __LINE__, __VA_ARGS__)
#define rs_log_info(...) rs_log_write(RS_LOG_INFO, RS_LOG_NOID, RS_LOG_NOID, __FILE__, __LINE__, __VA_ARGS__)
#define rs_log_warn(...) rs_log_write(RS_LOG_WARN, RS_LOG_NOID, RS_LOG_NOID, __FILE__, __LINE__, __VA_ARGS__)
#define rs_log_error(...) rs_log_write(RS_LOG_ERROR, RS_LOG_NOID, RS_LOG_NOID, __FILE__, __LINE__, __VA_ARGS__)

/* Same, naming the request and batch the line is about. */
#define rs_log_req(level, req, batch, ...) rs_log_write(level, req, batch, __FILE__, __LINE__, __VA_ARGS__)

#endif

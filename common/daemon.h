/* SPDX-License-Identifier: MIT */
/*
 * What every ringserve daemon does the same way around its main loop: log
 * set-up with the stage name, PR_SET_PDEATHSIG so no stage outlives its
 * supervisor (no orphan keeps sockets or segments), SIGTERM/SIGINT as a
 * request to stop, and systemd's sd_notify (READY=1 after recovery,
 * WATCHDOG=1 from the loop) so a hung stage is restarted, not only a dead
 * one. Leaves out: the loop itself (each daemon's main.c).
 */
#ifndef RS_DAEMON_H
#define RS_DAEMON_H

#include <stdint.h>

#include "common/err.h"

/*
 * Logging as `stage`, parent-death signal SIGKILL (when started by a
 * supervisor, i.e. the parent is not init), SIGTERM/SIGINT handlers that set
 * the stop flag, SIGPIPE ignored. Call first in main. Returns RS_EIO if a
 * handler cannot be installed.
 */
rs_err rs_daemon_init(const char *stage);

/* True once SIGTERM or SIGINT arrived. Async-signal-safe to read. */
int rs_daemon_should_stop(void);

/* Tells systemd (when NOTIFY_SOCKET is set) the stage is serving. */
void rs_daemon_notify_ready(void);

/*
 * Call from the main loop on every pass: sends WATCHDOG=1 to systemd at
 * most every half watchdog interval (when WatchdogSec= is set). Cheap.
 */
void rs_daemon_watchdog(void);

/* Tells systemd the stage is stopping. */
void rs_daemon_notify_stopping(void);

#endif

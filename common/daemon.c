/* SPDX-License-Identifier: MIT */
/* Daemon plumbing shared by the four stages; see daemon.h. */
#include "common/daemon.h"

#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/prctl.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"

static volatile sig_atomic_t stop_flag;
static uint64_t watchdog_half_ns;  /* 0: no watchdog */
static uint64_t watchdog_last_ns;

static void on_stop(int sig)
{
    (void)sig;
    stop_flag = 1;
}

rs_err rs_daemon_init(const char *stage)
{
    rs_log_init(stage);
    if (getppid() != 1 && prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        rs_log_warn("PR_SET_PDEATHSIG failed: this stage may outlive its supervisor");
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) {
        rs_log_error("cannot install signal handlers");
        return RS_EIO;
    }
    signal(SIGPIPE, SIG_IGN);
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
        watchdog_half_ns = usec * 1000ull / 2;
        rs_log_info("systemd watchdog every %llu ms", (unsigned long long)(usec / 1000));
    }
    return RS_OK;
}

int rs_daemon_should_stop(void)
{
    return stop_flag != 0;
}

void rs_daemon_notify_ready(void)
{
    sd_notify(0, "READY=1");
}

void rs_daemon_watchdog(void)
{
    if (watchdog_half_ns == 0)
        return;
    uint64_t now = rs_clock_ns();
    if (now - watchdog_last_ns >= watchdog_half_ns) {
        sd_notify(0, "WATCHDOG=1");
        watchdog_last_ns = now;
    }
}

void rs_daemon_notify_stopping(void)
{
    sd_notify(0, "STOPPING=1");
}

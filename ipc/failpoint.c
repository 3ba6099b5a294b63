/* SPDX-License-Identifier: MIT */
/*
 * Failpoint registry (see failpoint.h): one armed label per process, parsed
 * from env RS_FAILPOINT by a constructor so exec'd test programs need no
 * code, or set directly by a forked test child.
 */
#include "ipc/failpoint.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"

atomic_int rs_failpoint_armed;

static char fp_label[96];
static unsigned long fp_target;
static unsigned long fp_passes;
static int fp_signal = SIGKILL;
static unsigned long fp_delay_ms; /* nonzero: ":delay=MS", every pass from the n-th sleeps */

/* The action after "label:n": "" (SIGKILL), ":stop" or ":delay=MS" (1..60000). 0 if malformed. */
static int parse_action(const char *a, int *sig, unsigned long *delay_ms)
{
    char *end;
    *sig = SIGKILL;
    *delay_ms = 0;
    if (*a == '\0')
        return 1;
    if (strcmp(a, ":stop") == 0) {
        *sig = SIGSTOP;
        return 1;
    }
    if (strncmp(a, ":delay=", 7) != 0 || a[7] < '0' || a[7] > '9')
        return 0;
    *delay_ms = strtoul(a + 7, &end, 10);
    return *end == '\0' && *delay_ms >= 1 && *delay_ms <= 60000;
}

rs_err rs_failpoint_set(const char *spec)
{
    atomic_store(&rs_failpoint_armed, 0);
    fp_passes = 0;
    if (spec == NULL || spec[0] == '\0')
        return RS_OK;
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : 0;
    if (colon == NULL || len == 0 || len >= sizeof(fp_label)) {
        rs_log_error("failpoint '%s': expected label:n[:stop|:delay=MS]", spec);
        return RS_EINVAL;
    }
    char *end;
    unsigned long n = strtoul(colon + 1, &end, 10), delay_ms;
    int sig;
    if (end == colon + 1 || n == 0 || !parse_action(end, &sig, &delay_ms)) {
        rs_log_error("failpoint '%s': n must be a positive integer, optionally then ':stop' or "
                     "':delay=MS' (1..60000)", spec);
        return RS_EINVAL;
    }
    memcpy(fp_label, spec, len);
    fp_label[len] = '\0';
    fp_target = n;
    fp_signal = sig;
    fp_delay_ms = delay_ms;
    atomic_store(&rs_failpoint_armed, 1);
    return RS_OK;
}

unsigned long rs_failpoint_passes(void)
{
    return atomic_load(&rs_failpoint_armed) ? fp_passes : 0;
}

void rs_failpoint_hit(const char *label)
{
    if (strcmp(label, fp_label) != 0)
        return;
    if (fp_delay_ms != 0) {
        /* A slow stage rather than a dead one: every pass from the n-th on. */
        struct timespec ts = {(time_t)(fp_delay_ms / 1000), (long)(fp_delay_ms % 1000) * 1000000L};
        if (++fp_passes >= fp_target)
            while (nanosleep(&ts, &ts) != 0)
                ;
        return;
    }
    if (++fp_passes != fp_target)
        return;
    if (fp_signal == SIGSTOP) {
        /* Fire once: after SIGCONT the process runs on as the zombie under test. */
        atomic_store(&rs_failpoint_armed, 0);
        raise(SIGSTOP);
        return;
    }
    raise(SIGKILL);
}

__attribute__((constructor)) static void failpoint_from_env(void)
{
    const char *spec = getenv("RS_FAILPOINT");
    if (spec != NULL && spec[0] != '\0')
        rs_failpoint_set(spec);
}

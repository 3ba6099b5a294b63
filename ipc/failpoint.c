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

#include "common/log.h"

atomic_int rs_failpoint_armed;

static char fp_label[96];
static unsigned long fp_target;
static unsigned long fp_passes;
static int fp_signal = SIGKILL;

rs_err rs_failpoint_set(const char *spec)
{
    atomic_store(&rs_failpoint_armed, 0);
    fp_passes = 0;
    if (spec == NULL || spec[0] == '\0')
        return RS_OK;
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : 0;
    if (colon == NULL || len == 0 || len >= sizeof(fp_label)) {
        rs_log_error("failpoint '%s': expected label:n[:stop]", spec);
        return RS_EINVAL;
    }
    char *end;
    unsigned long n = strtoul(colon + 1, &end, 10);
    int sig = SIGKILL;
    if (end == colon + 1 || n == 0 || (*end != '\0' && strcmp(end, ":stop") != 0)) {
        rs_log_error("failpoint '%s': n must be a positive integer, optionally then ':stop'", spec);
        return RS_EINVAL;
    }
    if (*end == ':')
        sig = SIGSTOP;
    memcpy(fp_label, spec, len);
    fp_label[len] = '\0';
    fp_target = n;
    fp_signal = sig;
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

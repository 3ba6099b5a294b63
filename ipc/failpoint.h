/* SPDX-License-Identifier: MIT */
/*
 * Failpoints: named places in the shared-memory code where a test can make
 * the process kill (or stop) itself at the n-th pass, to prove that every
 * crash point recovers, or sleep at every pass from the n-th on (a slow
 * stage). Armed by env RS_FAILPOINT=label:n[:stop|:delay=MS] at start-up
 * or by rs_failpoint_set(); disarmed, a failpoint costs one relaxed load of a
 * global. Leaves out: probabilistic triggers and several armed labels at once
 * (one label per process is what the crash tests need).
 */
#ifndef RS_FAILPOINT_H
#define RS_FAILPOINT_H

#include <stdatomic.h>

#include "common/err.h"

/* Nonzero while a failpoint is armed in this process (read relaxed). */
extern atomic_int rs_failpoint_armed;

/*
 * Counts a pass of `label`; at the armed pass raises SIGKILL (or SIGSTOP for a
 * ":stop" spec, continuing after SIGCONT); a ":delay=MS" spec sleeps MS
 * milliseconds at that pass and every later one. Called only through RS_FAILPOINT.
 */
void rs_failpoint_hit(const char *label);

/*
 * Arms the failpoint `spec` = "label:n", "label:n:stop" or "label:n:delay=MS"
 * (n >= 1: the pass that fires; MS 1..60000) for this process, replacing any armed one; NULL or "" disarms.
 * Returns RS_EINVAL (logged) for a malformed spec. Call before the code under
 * test runs (not thread-safe against concurrent hits).
 */
rs_err rs_failpoint_set(const char *spec);

/* Passes of the armed label so far in this process (0 when disarmed). */
unsigned long rs_failpoint_passes(void);

#define RS_FAILPOINT(label)                                                                    \
    do {                                                                                       \
        if (__builtin_expect(atomic_load_explicit(&rs_failpoint_armed, memory_order_relaxed),  \
                             0))                                                               \
            rs_failpoint_hit(label);                                                           \
    } while (0)

#endif

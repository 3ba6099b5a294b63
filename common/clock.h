/* SPDX-License-Identifier: MIT */
/*
 * One clock (DESIGN.md principle 8): CLOCK_MONOTONIC nanoseconds, comparable
 * across the processes of one host, stamped into shared-memory records.
 */
#ifndef RS_CLOCK_H
#define RS_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic time in nanoseconds. Any process or thread. */
static inline uint64_t rs_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A duration in nanoseconds as whole microseconds (what histograms and the wire carry). */
static inline uint64_t rs_clock_ns_to_us(uint64_t ns)
{
    return ns / 1000u;
}

/* Monotonic time in milliseconds. */
static inline uint64_t rs_clock_ms(void)
{
    return rs_clock_ns() / 1000000ull;
}

#endif

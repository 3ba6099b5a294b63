/* SPDX-License-Identifier: MIT */
/*
 * bench_ring_chaos: the ring crash test's chaos (tests/crash/ring_chaos.h)
 * for a chosen time: a producer and a consumer process SIGKILLed at random
 * every U(0, 2 ms) and restarted, then the full audit (every committed record
 * delivered exactly once after dedup, in order, intact; nothing leaked).
 * Prints kills per second and records delivered per second under that storm.
 * Usage: bench_ring_chaos [SECONDS] [SLOTS]   (defaults 60, 16)
 */
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "tests/crash/ring_chaos.h"
#include "common/opt.h"

int main(int argc, char **argv)
{
    int first, code = rs_opt_main("bench_ring_chaos",
                                  "usage: bench_ring_chaos [SECONDS (0..86400]] "
                                  "[SLOTS (power of two >= 2)]\nThe ring under a kill storm.\n",
                                  NULL, 0, argc, argv, RS_OPT_OPERANDS, &first);
    if (code >= 0)
        return code;
    argv += first - 1, argc -= first - 1; /* the operands are argv[1..] as before */
    double seconds = argc > 1 ? atof(argv[1]) : 60;
    long slots = argc > 2 ? atol(argv[2]) : 16;
    if (argc > 3 || seconds <= 0 || seconds > 86400 || slots < 2 || slots > (1 << 20) ||
        (slots & (slots - 1)) != 0) {
        fprintf(stderr, "usage: bench_ring_chaos [SECONDS (0..86400]] [SLOTS (power of two "
                        ">= 2)]\n");
        return 2;
    }
    rs_log_set_level(RS_LOG_ERROR);
    struct chaos_cfg cfg = {.slots = (uint32_t)slots, .slot_bytes = 512, .flags = RS_RING_CRC,
                            .max_records = 1u << 20, .seconds = seconds, .max_delay_us = 2000,
                            .victims = 3, .seed = 20240601};
    struct chaos c;
    if (chaos_create(&c, &cfg, "bench") != 0) {
        fprintf(stderr, "bench_ring_chaos: cannot create the segment\n");
        return 1;
    }
    uint64_t t0 = rs_clock_ns();
    int rc = chaos_storm(&c);
    double storm = (rs_clock_ns() - t0) / 1e9;
    uint64_t kills = c.kills;
    if (rc == 0)
        rc = chaos_finish(&c, 0, storm);
    uint64_t delivered = atomic_load(&c.log->count);
    printf("bench_ring_chaos: %.1f s storm, %llu kills (%.0f/s), %llu records delivered "
           "(%.0f/s under the storm)%s: %s\n",
           storm, (unsigned long long)kills, kills / storm, (unsigned long long)delivered,
           delivered / storm, delivered >= cfg.max_records ? " (log full: producer idled)" : "",
           rc == 0 ? "audit passed" : "AUDIT FAILED");
    chaos_destroy(&c);
    return rc;
}

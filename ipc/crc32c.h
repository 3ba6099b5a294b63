/* SPDX-License-Identifier: MIT */
/*
 * CRC-32C (Castagnoli), the checksum rings may keep per record so a torn or
 * scribbled payload is caught by the consumer. Uses the SSE4.2 crc32
 * instruction when the CPU has it (checked once at run time), else a
 * portable slicing-by-8 table. Leaves out: ARMv8 CRC instructions (the
 * portable path runs there) and CRC combination of separately summed parts.
 */
#ifndef RS_CRC32C_H
#define RS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/*
 * CRC-32C of `len` bytes at `buf`, continuing from `crc` (0 to start; pass a
 * previous result to extend). Standard pre/post inversion, so
 * rs_crc32c(0, "123456789", 9) == 0xE3069283. Any thread.
 */
uint32_t rs_crc32c(uint32_t crc, const void *buf, size_t len);

/* The portable table path, always (tests compare it with the hardware path). */
uint32_t rs_crc32c_sw(uint32_t crc, const void *buf, size_t len);

/* 1 when rs_crc32c uses the SSE4.2 instruction on this CPU, else 0. */
int rs_crc32c_hw(void);

#endif

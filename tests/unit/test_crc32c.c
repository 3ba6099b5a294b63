/* SPDX-License-Identifier: MIT */
/*
 * CRC-32C: the published check values (RFC 3720 appendix B.4 and the
 * standard "123456789"), hardware and table paths agreeing on random data
 * at every length and alignment, and incremental use.
 */
#include <stdlib.h>
#include <string.h>

#include "ipc/crc32c.h"
#include "tests/rs_test.h"

static int test_known_check_values(void)
{
    uint8_t buf[32];
    RS_CHECK(rs_crc32c(0, "123456789", 9) == 0xE3069283u);
    RS_CHECK(rs_crc32c_sw(0, "123456789", 9) == 0xE3069283u);
    memset(buf, 0, sizeof(buf));
    RS_CHECK(rs_crc32c(0, buf, 32) == 0x8A9136AAu);
    memset(buf, 0xFF, sizeof(buf));
    RS_CHECK(rs_crc32c(0, buf, 32) == 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    RS_CHECK(rs_crc32c(0, buf, 32) == 0x46DD794Eu);
    RS_CHECK(rs_crc32c(0, buf, 0) == 0);
    return 0;
}

static int test_hardware_and_table_paths_agree(void)
{
    uint8_t *buf = malloc(4200);
    RS_CHECK(buf != NULL);
    uint32_t x = 12345;
    for (int i = 0; i < 4200; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (uint8_t)(x >> 16);
    }
    for (size_t off = 0; off < 9; off++)
        for (size_t len = 0; len < 4100; len += 1 + len / 7)
            RS_CHECK_MSG(rs_crc32c(7, buf + off, len) == rs_crc32c_sw(7, buf + off, len),
                         "off %zu len %zu (hw %d)", off, len, rs_crc32c_hw());
    free(buf);
    return 0;
}

static int test_incremental_equals_whole(void)
{
    const char *s = "The quick brown fox jumps over the lazy dog, twice over.";
    size_t n = strlen(s);
    uint32_t whole = rs_crc32c(0, s, n);
    for (size_t cut = 0; cut <= n; cut++)
        RS_CHECK(rs_crc32c(rs_crc32c(0, s, cut), s + cut, n - cut) == whole);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_known_check_values),
    RS_TEST(test_hardware_and_table_paths_agree),
    RS_TEST(test_incremental_equals_whole),
};

RS_TEST_MAIN(cases)

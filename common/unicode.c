/* SPDX-License-Identifier: MIT */
/*
 * Expands the generated run-length category table into a two-stage lookup
 * (code point >> 8 selects a deduplicated 256-entry block) the first time a
 * non-ASCII code point is classified; about 40 KiB, shared by all threads.
 */
#include "common/unicode.h"

#include <pthread.h>
#include <string.h>

#define BLOCK_BITS 8
#define BLOCK_SIZE (1u << BLOCK_BITS)
#define N_BLOCKS (0x110000u >> BLOCK_BITS)
#define MAX_UNIQUE 256 /* 142 distinct blocks in Unicode 14; room to grow */

const uint8_t rs_unicode_ascii[128] = {
#define C RS_UNICODE_OTHER
#define W (RS_UNICODE_OTHER | RS_UNICODE_WHITESPACE)
#define S (RS_UNICODE_SEPARATOR | RS_UNICODE_WHITESPACE)
#define P RS_UNICODE_PUNCT
#define Y RS_UNICODE_SYMBOL
#define N RS_UNICODE_NUMBER
#define L RS_UNICODE_LETTER
    C, C, C, C, C, C, C, C, C, W, W, W, W, W, C, C, /* 0x00 */
    C, C, C, C, C, C, C, C, C, C, C, C, C, C, C, C, /* 0x10 */
    S, P, P, P, Y, P, P, P, P, P, P, Y, P, P, P, P, /* 0x20  !"#$%&'()*+,-./ */
    N, N, N, N, N, N, N, N, N, N, P, P, Y, Y, Y, P, /* 0x30 0-9:;<=>? */
    P, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, /* 0x40 @A-O */
    L, L, L, L, L, L, L, L, L, L, L, P, P, P, Y, P, /* 0x50 P-Z[\]^_ */
    Y, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, /* 0x60 `a-o */
    L, L, L, L, L, L, L, L, L, L, L, P, Y, P, Y, C, /* 0x70 p-z{|}~ DEL */
#undef C
#undef W
#undef S
#undef P
#undef Y
#undef N
#undef L
};

static uint16_t stage1[N_BLOCKS];
static uint8_t stage2[MAX_UNIQUE][BLOCK_SIZE];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

/* Fills one block from the runs, starting the run search at *run. */
static void fill_block(uint32_t base, unsigned *run, uint8_t *out)
{
    for (uint32_t i = 0; i < BLOCK_SIZE; i++) {
        uint32_t cp = base + i;
        while (*run + 1 < rs_unicode_n_runs && (rs_unicode_runs[*run + 1] >> 8) <= cp)
            (*run)++;
        out[i] = (uint8_t)(rs_unicode_runs[*run] & 0xff);
    }
}

static void build_tables(void)
{
    unsigned run = 0, n_unique = 0;
    uint8_t block[BLOCK_SIZE];
    for (uint32_t b = 0; b < N_BLOCKS; b++) {
        fill_block(b << BLOCK_BITS, &run, block);
        unsigned u = 0;
        while (u < n_unique && memcmp(stage2[u], block, BLOCK_SIZE) != 0)
            u++;
        if (u == n_unique) {
            /* More distinct blocks than MAX_UNIQUE would need a regenerated table with a
             * larger bound; the last slot then stands in (only possible after a Unicode
             * upgrade, caught by the unicode unit test). */
            if (n_unique == MAX_UNIQUE)
                u = MAX_UNIQUE - 1;
            else
                memcpy(stage2[n_unique++], block, BLOCK_SIZE);
        }
        stage1[b] = (uint16_t)u;
    }
}

uint8_t rs_unicode_flags_slow(uint32_t cp)
{
    if (cp >= 0x110000u)
        return 0;
    pthread_once(&table_once, build_tables);
    return stage2[stage1[cp >> BLOCK_BITS]][cp & (BLOCK_SIZE - 1)];
}

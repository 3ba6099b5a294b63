/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes the segment validator: any byte image either fails rs_shm_validate
 * or passes it; one that passes must be safe to walk with every observer
 * entry point (ring, table and arena checks, role records), since attach
 * lets a process use exactly what validation accepted. ASan/UBSan turn an
 * out-of-bounds read anywhere into a failure. Seeds: real segments of each
 * region kind (tests/fuzz/corpus/shm_image).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "ipc/arena.h"
#include "ipc/ring.h"
#include "ipc/role.h"
#include "ipc/shm.h"
#include "ipc/shm_impl.h"
#include "ipc/table.h"

/* Walks a validated image through the read-only API, as `ringserve-shm show` does. */
static void walk(uint8_t *img, uint64_t size)
{
    struct rs_shm s;
    memset(&s, 0, sizeof(s));
    s.fd = -1;
    s.flags = RS_SHM_INSPECT;
    s.base = img;
    s.size = size;
    s.hdr = (struct shm_hdr *)img;
    for (uint32_t i = 0; i < s.hdr->n_regions; i++) {
        if (s.hdr->regions[i].kind == RS_SHM_ROLES) {
            s.roles = img + s.hdr->regions[i].offset;
            s.n_roles = (uint32_t)s.hdr->regions[i].count;
        }
    }
    struct rs_role_info ri;
    for (uint32_t i = 0; i < rs_role_count(&s); i++)
        rs_role_info_at(&s, i, &ri);
    rs_role_check(&s);
    for (uint32_t i = 0; i < s.hdr->n_regions; i++) {
        const char *name = s.hdr->regions[i].name;
        rs_ring *r;
        rs_table *t;
        rs_arena *a;
        struct rs_ring_stats rst;
        struct rs_table_stats tst;
        struct rs_arena_stats ast;
        switch (s.hdr->regions[i].kind) {
        case RS_SHM_RING:
            if (rs_ring_open(&s, name, NULL, &r) == RS_OK)
                rs_ring_check(r, &rst), rs_ring_close(&r);
            break;
        case RS_SHM_TABLE:
            if (rs_table_open(&s, name, NULL, &t) == RS_OK)
                rs_table_check(t, &tst), rs_table_close(&t);
            break;
        case RS_SHM_ARENA:
            if (rs_arena_open(&s, name, NULL, NULL, 0, &a) == RS_OK)
                rs_arena_check(a, &ast), rs_arena_close(&a);
            break;
        default: break;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet++)
        rs_log_set_level((enum rs_log_level)(RS_LOG_ERROR + 1)); /* checks log every finding */
    if (size > (1u << 20))
        return 0;
    size_t cap = (size + 4095) & ~(size_t)4095;
    uint8_t *img = aligned_alloc(4096, cap ? cap : 4096);
    if (img == NULL)
        return 0;
    memcpy(img, data, size);
    char why[256];
    if (rs_shm_validate(img, size, why, sizeof(why)) == RS_OK)
        walk(img, size);
    free(img);
    return 0;
}

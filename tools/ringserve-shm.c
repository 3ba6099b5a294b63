/* SPDX-License-Identifier: MIT */
/*
 * ringserve-shm: the operator's view of shared-memory segments.
 *   ringserve-shm list          segments in /dev/shm that carry our magic
 *   ringserve-shm show NAME     header, region directory, roles, slot states,
 *                               owners and counters of every region
 *   ringserve-shm rm NAME       removes a segment (only one of ours)
 * It maps segments read-only and never changes one except by `rm`.
 * Exit codes: 0 done, 1 the segment is missing or not ours, 2 bad usage.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/opt.h"
#include "ipc/arena.h"
#include "ipc/ring.h"
#include "ipc/role.h"
#include "ipc/shm.h"
#include "ipc/table.h"

static const char usage_text[] = "usage: ringserve-shm list\n"
                                 "       ringserve-shm show NAME\n"
                                 "       ringserve-shm rm NAME\n"
                                 "NAME is a segment name, with or without its leading '/'.\n";

static int usage(const char *msg)
{
    if (msg != NULL)
        fprintf(stderr, "ringserve-shm: %s\n", msg);
    rs_opt_help(stderr, usage_text, NULL, 0);
    return 2;
}

/* "/NAME" from NAME or /NAME; 0 if the name cannot be a segment name. */
static int seg_name(const char *arg, char *out, size_t len)
{
    const char *base = arg[0] == '/' ? arg + 1 : arg;
    if (base[0] == '\0' || strchr(base, '/') != NULL || strlen(base) > 240)
        return 0;
    snprintf(out, len, "/%s", base);
    return 1;
}

static void human_bytes(uint64_t b, char *out, size_t len)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4)
        v /= 1024, u++;
    snprintf(out, len, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

static void human_age(double s, char *out, size_t len)
{
    if (s < 0)
        snprintf(out, len, "-");
    else if (s < 120)
        snprintf(out, len, "%.1fs", s);
    else if (s < 7200)
        snprintf(out, len, "%.0fm", s / 60);
    else if (s < 172800)
        snprintf(out, len, "%.1fh", s / 3600);
    else
        snprintf(out, len, "%.1fd", s / 86400);
}

static double now_realtime_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The header of segment /<ent> if it is one of ours (rs_shm_peek). */
static int read_header(const char *ent, struct rs_shm_info *info)
{
    char name[300];
    snprintf(name, sizeof(name), "/%s", ent);
    return rs_shm_peek(name, info) == RS_OK;
}

static int cmd_list(void)
{
    DIR *d = opendir("/dev/shm");
    if (d == NULL) {
        fprintf(stderr, "ringserve-shm: /dev/shm: %s\n", strerror(errno));
        return 1;
    }
    struct rs_shm_info h;
    char sz[32], age[32];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !read_header(e->d_name, &h))
            continue;
        if (n++ == 0)
            printf("%-32s %10s %6s %8s %6s %5s %s\n", "NAME", "SIZE", "EPOCH", "AGE", "STATE",
                   "INCS", "BOOT");
        human_bytes(h.size, sz, sizeof(sz));
        human_age(now_realtime_s() - h.created_ns / 1e9, age, sizeof(age));
        printf("/%-31s %10s %6llu %8s %6s %5llu %s\n", e->d_name, sz, (unsigned long long)h.epoch,
               age, h.ready ? "ready" : "init", (unsigned long long)h.incarnations,
               h.stale_boot ? "STALE (earlier boot)" : "current");
    }
    closedir(d);
    if (n == 0)
        printf("no ringserve segments in /dev/shm\n");
    return 0;
}

static const char *phase_name(enum rs_role_phase p)
{
    static const char *names[] = {"NONE", "RECOVERING", "READY", "EXITED"};
    return (unsigned)p < 4 ? names[p] : "?";
}

static void show_header(const rs_shm *shm)
{
    struct rs_shm_info info;
    char sz[32], age[32], created[64];
    rs_shm_get_info(shm, &info);
    human_bytes(info.size, sz, sizeof(sz));
    human_age(now_realtime_s() - info.created_ns / 1e9, age, sizeof(age));
    time_t t = (time_t)(info.created_ns / 1000000000ull);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);
    printf("segment %s\n", info.name);
    printf("  size %llu bytes (%s), layout version %u, layout hash %016llx\n",
           (unsigned long long)info.size, sz, info.layout_version,
           (unsigned long long)info.layout_hash);
    printf("  epoch %llu, created %s (%s ago) by pid %u, %s\n", (unsigned long long)info.epoch,
           created, age, info.creator_pid, info.ready ? "ready" : "NOT READY (creation unfinished)");
    printf("  boot id %s%s, incarnations issued %llu\n", info.boot_id,
           info.stale_boot ? " (STALE: an earlier boot)" : " (this boot)",
           (unsigned long long)info.incarnations);
}

static void show_roles(const rs_shm *shm)
{
    uint64_t now = rs_clock_ns();
    printf("roles:\n  %-16s %6s %-10s %8s %-5s %10s %7s %7s %10s\n", "ROLE", "INC", "PHASE", "PID",
           "ALIVE", "HEARTBEAT", "STARTS", "READY", "RECOVERY");
    for (uint32_t i = 0; i < rs_role_count(shm); i++) {
        struct rs_role_info ri;
        if (rs_role_info_at(shm, i, &ri) != RS_OK)
            continue;
        char hb[32] = "-", rec[32] = "-";
        if (ri.inc != 0)
            human_age(((double)now - (double)ri.heartbeat_ns) / 1e9, hb, sizeof(hb));
        if (ri.ready_ns >= ri.started_ns && ri.ready_ns != 0)
            snprintf(rec, sizeof(rec), "%.2fms", (ri.ready_ns - ri.started_ns) / 1e6);
        printf("  %-16s %6u %-10s %8u %-5s %10s %7llu %7llu %10s\n", ri.name, ri.inc,
               phase_name(ri.phase), ri.pid, ri.inc == 0 ? "-" : ri.alive ? "yes" : "no", hb,
               (unsigned long long)ri.n_starts, (unsigned long long)ri.n_ready, rec);
    }
}

static void print_owners(uint32_t n, const uint32_t *owner, const uint64_t *count)
{
    if (n == 0)
        return;
    printf("    owners:");
    for (uint32_t i = 0; i < n && i < 8; i++)
        printf(" inc %u x%llu", owner[i], (unsigned long long)count[i]);
    printf(n > 8 ? " (+%u more)\n" : "\n", n - 8);
}

static void show_ring(rs_shm *shm, const struct rs_shm_region_info *ri)
{
    rs_ring *r;
    struct rs_ring_stats st;
    if (rs_ring_open(shm, ri->name, NULL, &r) != RS_OK)
        return;
    rs_err e = rs_ring_check(r, &st);
    struct rs_role_info prod, cons;
    if (rs_role_info_at(shm, ri->producer_role, &prod) != RS_OK ||
        rs_role_info_at(shm, ri->consumer_role, &cons) != RS_OK)
        return;
    printf("    %u slots x %u bytes%s, %s -> %s\n", st.n_slots, st.slot_bytes,
           (st.flags & RS_RING_CRC) ? ", crc32c" : "", prod.name, cons.name);
    printf("    states:");
    for (unsigned s = 0; s < RS_RING_NSTATES; s++)
        if (st.n_state[s] != 0)
            printf(" %s %llu", rs_ring_state_name(s), (unsigned long long)st.n_state[s]);
    printf("\n");
    print_owners(st.n_owners, st.owner, st.owner_slots);
    printf("    consumed seq %llu, producer floor %llu (inc %u)\n",
           (unsigned long long)st.cons_seq, (unsigned long long)st.p_floor, st.p_inc);
    printf("    producer: commits %llu full %llu holes %llu reclaimed %llu recoveries %llu\n",
           (unsigned long long)st.commits, (unsigned long long)st.full,
           (unsigned long long)st.holes_made, (unsigned long long)st.p_reclaims,
           (unsigned long long)st.p_recoveries);
    printf("    consumer: gets %llu releases %llu discarded %llu holes %llu redelivered %llu "
           "crc errors %llu recoveries %llu\n",
           (unsigned long long)st.gets, (unsigned long long)st.releases,
           (unsigned long long)st.discards, (unsigned long long)st.holes_passed,
           (unsigned long long)st.redelivered, (unsigned long long)st.crc_errors,
           (unsigned long long)st.c_recoveries);
    if (e != RS_OK)
        printf("    INVARIANT VIOLATION (details on stderr)\n");
    rs_ring_close(&r);
}

static void show_table(rs_shm *shm, const struct rs_shm_region_info *ri)
{
    rs_table *t;
    struct rs_table_stats st;
    if (rs_table_open(shm, ri->name, NULL, &t) != RS_OK)
        return;
    rs_err e = rs_table_check(t, &st);
    printf("    %u records x %llu bytes\n    states:", st.n_records,
           (unsigned long long)st.record_bytes);
    for (unsigned s = 0; s < RS_TABLE_NSTATES; s++) {
        if (st.n_state[s] == 0)
            continue;
        if (s <= RS_TABLE_CLAIMED)
            printf(" %s %llu", s == 0 ? "FREE" : "CLAIMED", (unsigned long long)st.n_state[s]);
        else
            printf(" state%u %llu", s, (unsigned long long)st.n_state[s]);
    }
    printf("\n");
    print_owners(st.n_owners, st.owner, st.owner_records);
    printf("    claims %llu frees %llu reclaimed %llu full %llu\n", (unsigned long long)st.claims,
           (unsigned long long)st.frees, (unsigned long long)st.reclaimed,
           (unsigned long long)st.full);
    if (e != RS_OK)
        printf("    INVARIANT VIOLATION (details on stderr)\n");
    rs_table_close(&t);
}

static void show_arena(rs_shm *shm, const struct rs_shm_region_info *ri)
{
    rs_arena *a;
    struct rs_arena_stats st;
    if (rs_arena_open(shm, ri->name, NULL, NULL, 0, &a) != RS_OK)
        return;
    rs_err e = rs_arena_check(a, &st);
    printf("    %u chunks x %u tokens: FREE %llu RESERVED %llu LINKED %llu (%.1f%% in use)\n",
           st.n_chunks, st.chunk_tokens, (unsigned long long)st.n_free,
           (unsigned long long)st.n_reserved, (unsigned long long)st.n_linked,
           100.0 * (double)(st.n_chunks - st.n_free) / st.n_chunks);
    printf("    reserves %llu frees %llu audit freed %llu audit linked %llu tail copies %llu\n",
           (unsigned long long)st.reserves, (unsigned long long)st.frees,
           (unsigned long long)st.audit_freed, (unsigned long long)st.audit_linked,
           (unsigned long long)st.tail_copies);
    if (e != RS_OK)
        printf("    INVARIANT VIOLATION (details on stderr)\n");
    rs_arena_close(&a);
}

static int cmd_show(const char *name)
{
    rs_shm *shm;
    char why[320];
    rs_log_set_level(RS_LOG_ERROR);
    rs_err e = rs_shm_attach(name, NULL, 0, RS_SHM_INSPECT, why, sizeof(why), &shm);
    if (e != RS_OK) {
        fprintf(stderr, "ringserve-shm: %s: %s\n", name, why);
        return 1;
    }
    show_header(shm);
    show_roles(shm);
    struct rs_shm_info info;
    rs_shm_get_info(shm, &info);
    printf("regions:\n");
    for (uint32_t i = 0; i < info.n_regions; i++) {
        struct rs_shm_region_info ri;
        char sz[32];
        rs_shm_region_at(shm, i, &ri);
        human_bytes(ri.size, sz, sizeof(sz));
        printf("  %-24s %-6s offset %10llu size %10llu (%s)\n", ri.name, rs_shm_kind_name(ri.kind),
               (unsigned long long)ri.offset, (unsigned long long)ri.size, sz);
        if (ri.kind == RS_SHM_RING)
            show_ring(shm, &ri);
        else if (ri.kind == RS_SHM_TABLE)
            show_table(shm, &ri);
        else if (ri.kind == RS_SHM_ARENA)
            show_arena(shm, &ri);
    }
    rs_shm_detach(&shm);
    return 0;
}

static int cmd_rm(const char *name)
{
    struct rs_shm_info h;
    rs_err rc = rs_shm_peek(name, &h);
    if (rc == RS_ENOENT || rc == RS_EIO) {
        fprintf(stderr, "ringserve-shm: %s: %s\n", name,
                rc == RS_ENOENT ? "No such file or directory" : "cannot read it");
        return 1;
    }
    if (rc != RS_OK) {
        fprintf(stderr, "ringserve-shm: %s: not a ringserve segment (bad magic or too small); "
                        "not removed\n",
                name);
        return 1;
    }
    if (shm_unlink(name) != 0) {
        fprintf(stderr, "ringserve-shm: %s: %s\n", name, strerror(errno));
        return 1;
    }
    printf("removed %s\n", name);
    return 0;
}

int main(int argc, char **argv)
{
    rs_log_init("ringserve-shm");
    char err[256];
    int first;
    int r = rs_opt_parse(NULL, 0, argc, argv, RS_OPT_OPERANDS, &first, err, sizeof(err));
    if (r == RS_OPT_HELP) {
        rs_opt_help(stdout, usage_text, NULL, 0);
        return 0;
    }
    if (r != RS_OPT_OK)
        return usage(err);
    int n = argc - first;
    if (n < 1)
        return usage(NULL);
    const char *cmd = argv[first];
    char name[256];
    if (strcmp(cmd, "list") == 0)
        return n == 1 ? cmd_list() : usage("list takes no arguments");
    if (strcmp(cmd, "show") != 0 && strcmp(cmd, "rm") != 0) {
        fprintf(stderr, "ringserve-shm: unknown command '%s'\n", cmd);
        return usage(NULL);
    }
    if (n != 2)
        return usage("show and rm take exactly one segment name");
    if (!seg_name(argv[first + 1], name, sizeof(name)))
        return usage("a segment name is 1..240 bytes without '/'");
    return strcmp(cmd, "show") == 0 ? cmd_show(name) : cmd_rm(name);
}

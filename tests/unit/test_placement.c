/* SPDX-License-Identifier: MIT */
/*
 * Placement (common/placement.h): flag parsing, the per-role plan on
 * synthetic multi-node topologies (hwloc builds them from a description, so
 * two-socket GPU hosts are tested on a one-node VM), and the real bindings
 * on this host: the process mask, one thread's mask and a mapping's NUMA
 * node, each read back from the kernel.
 */
#include <hwloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "common/placement.h"
#include "tests/rs_test.h"

/* Parses one argv vector with the placement table: 1 taken, 0 not a placement flag, -1 bad. */
static int parse1(struct rs_place_opts *o, const char *a, const char *b, char *err, size_t len)
{
    char *argv[4] = {(char *)"x", (char *)a, (char *)b, NULL};
    int argc = b != NULL ? 3 : 2;
    struct rs_opt_group g = {RS_PLACE_OPTS_TITLE, rs_place_opt_table, o, NULL};
    int r = rs_opt_parse(&g, 1, argc, argv, 0, NULL, err, len);
    return r == RS_OPT_OK ? 1 : strstr(err, "unknown option") != NULL ? 0 : -1;
}

static int test_parse_flags(void)
{
    struct rs_place_opts o;
    char err[256];
    rs_place_opts_default(&o);
    RS_CHECK(o.numa == -1 && o.cpus[0] == '\0');
    RS_CHECK(parse1(&o, "--cpus", "0-3,8", err, sizeof(err)) == 1 && strcmp(o.cpus, "0-3,8") == 0);
    RS_CHECK(parse1(&o, "--numa", "1", err, sizeof(err)) == 1 && o.numa == 1);
    RS_CHECK(parse1(&o, "--threads", "2", err, sizeof(err)) == 0);
    RS_CHECK(parse1(&o, "--cpus", "0-3;8", err, sizeof(err)) == -1 && strstr(err, "--cpus"));
    RS_CHECK(parse1(&o, "--cpus", ",", err, sizeof(err)) == -1);
    RS_CHECK(parse1(&o, "--numa", "-1", err, sizeof(err)) == -1 && strstr(err, "--numa"));
    RS_CHECK(parse1(&o, "--numa", "1x", err, sizeof(err)) == -1);
    RS_CHECK(parse1(&o, "--numa", "99999", err, sizeof(err)) == -1);
    RS_CHECK(parse1(&o, "--numa", NULL, err, sizeof(err)) == -1 && strstr(err, "needs a value"));
    char *help = NULL;
    size_t help_len = 0;
    FILE *f = open_memstream(&help, &help_len);
    struct rs_opt_group g = {RS_PLACE_OPTS_TITLE, rs_place_opt_table, &o, NULL};
    rs_opt_help(f, NULL, &g, 1);
    fclose(f);
    int both = strstr(help, "--cpus LIST") != NULL && strstr(help, "--numa N") != NULL;
    free(help);
    RS_CHECK(both);
    return 0;
}

/* Plan for role on p with the given flags; returns the rs_err. */
static rs_err plan(rs_place *p, enum rs_place_role role, const char *cpus, int numa, int gpu,
                   struct rs_place_plan *out)
{
    struct rs_place_opts o;
    char err[256];
    rs_place_opts_default(&o);
    snprintf(o.cpus, sizeof(o.cpus), "%s", cpus);
    o.numa = numa;
    rs_err rc = rs_place_plan(p, role, &o, gpu, out, err, sizeof(err));
    if (rc != RS_OK)
        fprintf(stderr, "plan: %s\n", err);
    return rc;
}

static int test_two_sockets_launcher_takes_gpu_node(void)
{
    rs_place *p;
    struct rs_place_plan pl;
    RS_CHECK(rs_place_create_synthetic("pack:2 numa:1 core:4 pu:2", &p) == RS_OK);
    RS_CHECK(rs_place_n_nodes(p) == 2);
    RS_CHECK(plan(p, RS_PLACE_LAUNCHER, "", -1, 1, &pl) == RS_OK);
    RS_CHECK_MSG(strcmp(pl.cpus, "8-15") == 0 && pl.node == 1 && pl.n_cpus == 8, "%s %d", pl.cpus,
                 pl.node);
    RS_CHECK(plan(p, RS_PLACE_OTHER, "", -1, 1, &pl) == RS_OK);
    RS_CHECK_MSG(strcmp(pl.cpus, "0-7") == 0 && pl.node == 0, "%s %d", pl.cpus, pl.node);
    RS_CHECK(plan(p, RS_PLACE_LAUNCHER, "", -1, 0, &pl) == RS_OK);
    RS_CHECK(strcmp(pl.cpus, "0-7") == 0 && pl.node == 0 && pl.rule == RS_PLACE_GPU_NODE);
    rs_place_destroy(&p);
    RS_CHECK(p == NULL);
    return 0;
}

static int test_cpu_host_gives_everyone_every_cpu(void)
{
    rs_place *p;
    struct rs_place_plan pl;
    RS_CHECK(rs_place_create_synthetic("pack:2 numa:1 core:4 pu:1", &p) == RS_OK);
    RS_CHECK(plan(p, RS_PLACE_LAUNCHER, "", -1, -1, &pl) == RS_OK);
    RS_CHECK(strcmp(pl.cpus, "0-7") == 0 && pl.node == -1 && pl.rule == RS_PLACE_NO_GPU);
    RS_CHECK(plan(p, RS_PLACE_OTHER, "", -1, -1, &pl) == RS_OK);
    RS_CHECK(strcmp(pl.cpus, "0-7") == 0 && pl.node == -1);
    rs_place_destroy(&p);
    /* One node holding the GPU: nothing is left for the others, so they share it. */
    RS_CHECK(rs_place_create_synthetic("numa:1 core:4 pu:1", &p) == RS_OK);
    RS_CHECK(plan(p, RS_PLACE_OTHER, "", -1, 0, &pl) == RS_OK);
    RS_CHECK(strcmp(pl.cpus, "0-3") == 0 && pl.node == -1 && pl.rule == RS_PLACE_SHARED);
    rs_place_destroy(&p);
    return 0;
}

static int test_flags_override_the_rules(void)
{
    rs_place *p;
    struct rs_place_plan pl;
    RS_CHECK(rs_place_create_synthetic("pack:2 numa:1 core:4 pu:1", &p) == RS_OK);
    RS_CHECK(plan(p, RS_PLACE_LAUNCHER, "", 0, 1, &pl) == RS_OK);
    RS_CHECK(strcmp(pl.cpus, "0-3") == 0 && pl.node == 0 && pl.rule == RS_PLACE_BY_NUMA);
    RS_CHECK(plan(p, RS_PLACE_LAUNCHER, "2,5", -1, 1, &pl) == RS_OK);
    RS_CHECK(strcmp(pl.cpus, "2,5") == 0 && pl.node == -1 && pl.n_cpus == 2 &&
             pl.rule == RS_PLACE_BY_CPUS);
    RS_CHECK(plan(p, RS_PLACE_OTHER, "4-5", -1, -1, &pl) == RS_OK);
    RS_CHECK(strcmp(pl.cpus, "4-5") == 0 && pl.node == 1);
    RS_CHECK(plan(p, RS_PLACE_OTHER, "0-3", 1, -1, &pl) == RS_OK);
    RS_CHECK(strcmp(pl.cpus, "0-3") == 0 && pl.node == 1);
    RS_CHECK(plan(p, RS_PLACE_LAUNCHER, "9", -1, -1, &pl) == RS_EINVAL);
    RS_CHECK(plan(p, RS_PLACE_LAUNCHER, "", 2, -1, &pl) == RS_EINVAL);
    RS_CHECK(plan(p, RS_PLACE_LAUNCHER, "3-", -1, -1, &pl) == RS_EINVAL); /* 3 to infinity */
    rs_place_destroy(&p);
    return 0;
}

static int test_synthetic_topology_refuses_binding(void)
{
    rs_place *p;
    struct rs_place_plan pl;
    char cpus[64];
    int os;
    RS_CHECK(rs_place_create_synthetic("pack:2 numa:1 core:2 pu:1", &p) == RS_OK);
    RS_CHECK(rs_place_n_nodes(p) == 2 && rs_place_n_gpus(p) == 0);
    RS_CHECK(rs_place_node_at(p, 1, &os, cpus, sizeof(cpus)) == RS_OK);
    RS_CHECK_MSG(os == 1 && strcmp(cpus, "2-3") == 0, "node 1: %d, cpus %s", os, cpus);
    RS_CHECK(rs_place_node_at(p, 2, &os, cpus, sizeof(cpus)) == RS_ERANGE);
    RS_CHECK(plan(p, RS_PLACE_LAUNCHER, "", -1, -1, &pl) == RS_OK);
    RS_CHECK(rs_place_apply(p, &pl) == RS_EUNSUPPORTED);
    RS_CHECK(rs_place_pin_thread(p, &pl, 0) == RS_EUNSUPPORTED);
    RS_CHECK(rs_place_bind_memory(p, &pl, cpus, 1) == RS_EUNSUPPORTED);
    rs_place_destroy(&p);
    RS_CHECK(rs_place_create_synthetic("pack:two", &p) == RS_EINVAL && p == NULL);
    rs_place_destroy(NULL);
    return 0;
}

/* The CPU list of a kernel mask, as hwloc prints it. */
static void mask_list(const cpu_set_t *m, char *buf, size_t len)
{
    hwloc_bitmap_t b = hwloc_bitmap_alloc();
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, m))
            hwloc_bitmap_set(b, (unsigned)c);
    hwloc_bitmap_list_snprintf(buf, len, b);
    hwloc_bitmap_free(b);
}

static int test_host_apply_binds_the_process(void)
{
    rs_place *p;
    struct rs_place_plan pl;
    cpu_set_t before, after;
    char got[256], first[16];
    RS_CHECK(sched_getaffinity(0, sizeof(before), &before) == 0);
    RS_CHECK(rs_place_create(&p) == RS_OK);
    RS_CHECK(plan(p, RS_PLACE_OTHER, "", -1, rs_place_gpu_node(p), &pl) == RS_OK);
    mask_list(&before, got, sizeof(got));
    RS_CHECK_MSG(rs_place_gpu_node(p) >= 0 || strcmp(pl.cpus, got) == 0, "%s vs %s", pl.cpus, got);
    int cpu0 = -1;
    for (int c = 0; c < CPU_SETSIZE && cpu0 < 0; c++)
        cpu0 = CPU_ISSET(c, &before) ? c : -1;
    snprintf(first, sizeof(first), "%d", cpu0);
    RS_CHECK(plan(p, RS_PLACE_LAUNCHER, first, -1, -1, &pl) == RS_OK);
    RS_CHECK(rs_place_apply(p, &pl) == RS_OK);
    RS_CHECK(sched_getaffinity(0, sizeof(after), &after) == 0);
    mask_list(&after, got, sizeof(got));
    RS_CHECK_MSG(strcmp(got, first) == 0, "bound to %s, wanted %s", got, first);
    RS_CHECK(sched_setaffinity(0, sizeof(before), &before) == 0);
    rs_place_destroy(&p);
    return 0;
}

struct pin_arg {
    rs_place *p;
    struct rs_place_plan *pl;
    rs_err rc;
    cpu_set_t mask;
};

static void *pin_thread(void *a)
{
    struct pin_arg *arg = a;
    arg->rc = rs_place_pin_thread(arg->p, arg->pl, 1);
    sched_getaffinity(0, sizeof(arg->mask), &arg->mask);
    return NULL;
}

static int test_host_pin_thread_takes_one_cpu(void)
{
    rs_place *p;
    struct rs_place_plan pl;
    cpu_set_t proc;
    RS_CHECK(rs_place_create(&p) == RS_OK);
    RS_CHECK(plan(p, RS_PLACE_LAUNCHER, "", -1, -1, &pl) == RS_OK);
    struct pin_arg arg = {.p = p, .pl = &pl};
    pthread_t t;
    RS_CHECK(pthread_create(&t, NULL, pin_thread, &arg) == 0);
    pthread_join(t, NULL);
    RS_CHECK(arg.rc == RS_OK);
    RS_CHECK(CPU_COUNT(&arg.mask) == 1);
    /* The second CPU of the plan (index 1, modulo its size). */
    int want = -1, k = 1 % pl.n_cpus;
    RS_CHECK(sched_getaffinity(0, sizeof(proc), &proc) == 0);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &proc) && k-- == 0) {
            want = c;
            break;
        }
    RS_CHECK_MSG(CPU_ISSET(want, &arg.mask), "thread not on CPU %d", want);
    RS_CHECK(CPU_COUNT(&proc) == pl.n_cpus); /* the process mask is untouched */
    rs_place_destroy(&p);
    return 0;
}

static int test_host_bind_memory_to_node(void)
{
    rs_place *p;
    struct rs_place_plan pl;
    RS_CHECK(rs_place_create(&p) == RS_OK);
    size_t len = 1 << 20;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    RS_CHECK(m != MAP_FAILED);
    memset(m, 1, len);
    RS_CHECK(plan(p, RS_PLACE_LAUNCHER, "", -1, -1, &pl) == RS_OK);
    RS_CHECK(pl.node == -1 && rs_place_bind_memory(p, &pl, m, len) == RS_OK); /* no node: no-op */
    RS_CHECK(rs_place_bind_memory(p, &pl, m + 1, len - 4096) == RS_EINVAL);
    RS_CHECK(rs_place_bind_memory(p, &pl, m, 0) == RS_EINVAL);
    /* The first node this host has, by --numa. */
    char cpus[256];
    int node;
    RS_CHECK(rs_place_node_at(p, 0, &node, cpus, sizeof(cpus)) == RS_OK);
    RS_CHECK(plan(p, RS_PLACE_LAUNCHER, "", node, -1, &pl) == RS_OK && pl.node == node);
    RS_CHECK(rs_place_bind_memory(p, &pl, m, len) == RS_OK);
    hwloc_topology_t t;
    hwloc_bitmap_t where = hwloc_bitmap_alloc();
    RS_CHECK(hwloc_topology_init(&t) == 0 && hwloc_topology_load(t) == 0);
    RS_CHECK(hwloc_get_area_memlocation(t, m, len, where, HWLOC_MEMBIND_BYNODESET) == 0);
    RS_CHECK_MSG(hwloc_bitmap_weight(where) == 1 && hwloc_bitmap_isset(where, (unsigned)node),
                 "pages not all on node %d", node);
    hwloc_bitmap_free(where);
    hwloc_topology_destroy(t);
    munmap(m, len);
    rs_place_destroy(&p);
    return 0;
}

static int test_host_without_gpu_has_no_gpu_node(void)
{
    rs_place *p;
    RS_CHECK(rs_place_create(&p) == RS_OK);
    RS_CHECK(rs_place_n_nodes(p) >= 1);
    RS_CHECK(rs_place_pci_node(p, "0000:ff:1f.7") == -1);
    RS_CHECK(rs_place_pci_node(p, "not a bus id") == -1);
    if (rs_place_n_gpus(p) == 0)
        RS_CHECK(rs_place_gpu_node(p) == -1);
    rs_place_destroy(&p);
    return 0;
}

static int test_setup_refuses_a_missing_node(void)
{
    rs_place *p = NULL;
    struct rs_place_plan pl;
    struct rs_place_opts o;
    char err[256] = "";
    rs_place_opts_default(&o);
    o.numa = 4000;
    RS_CHECK(rs_place_setup("test", RS_PLACE_OTHER, &o, -1, &p, &pl, err, sizeof(err)) ==
             RS_EINVAL);
    RS_CHECK_MSG(strstr(err, "--numa 4000"), "%s", err);
    rs_place_destroy(&p);
    rs_place_opts_default(&o);
    RS_CHECK(rs_place_setup("test", RS_PLACE_OTHER, &o, RS_PLACE_GPU_AUTO, &p, &pl, err,
                            sizeof(err)) == RS_OK);
    RS_CHECK(pl.n_cpus >= 1);
    rs_place_destroy(&p);
    return 0;
}

/* A fake sysfs PCI device: vendor, class and NUMA node files. */
static int fake_dev(const char *root, const char *dev, const char *vendor, const char *cls,
                    const char *node)
{
    char path[512];
    const char *names[3] = {"vendor", "class", "numa_node"}, *vals[3] = {vendor, cls, node};
    snprintf(path, sizeof(path), "%s/%s", root, dev);
    if (mkdir(path, 0700) != 0)
        return 1;
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/%s/%s", root, dev, names[i]);
        FILE *f = fopen(path, "w");
        if (f == NULL)
            return 1;
        fprintf(f, "%s\n", vals[i]);
        fclose(f);
    }
    return 0;
}

static int test_gpus_found_in_sysfs_with_their_node(void)
{
    char root[512], line[1024];
    snprintf(root, sizeof(root), "%s/pci", rs_test_tmpdir());
    RS_CHECK(mkdir(root, 0700) == 0);
    RS_CHECK(fake_dev(root, "0000:00:02.0", "0x1af4", "0x020000", "0") == 0); /* a NIC */
    RS_CHECK(fake_dev(root, "0000:65:00.0", "0x10de", "0x030200", "0") == 0);
    RS_CHECK(fake_dev(root, "0000:17:00.0", "0x10de", "0x030200", "1") == 0);
    RS_CHECK(fake_dev(root, "0000:18:00.0", "0x10de", "0x040300", "1") == 0); /* NVIDIA audio */
    rs_place *p;
    struct rs_place_plan pl;
    RS_CHECK(rs_place_create_synthetic("pack:2 numa:1 core:4 pu:1", &p) == RS_OK);
    RS_CHECK(rs_place_gpu_node(p) == -1); /* synthetic: no devices until pointed at some */
    rs_place_set_pci_root(p, root);
    RS_CHECK(rs_place_gpu_node(p) == 1); /* the first GPU in bus order */
    RS_CHECK(rs_place_pci_node(p, "0000:65:00.0") == 0);
    RS_CHECK(rs_place_pci_node(p, "0000:17:00.0") == 1);
    RS_CHECK(rs_place_pci_node(p, "0000:9A:00.0") == -1);
    RS_CHECK(rs_place_pci_node(p, "../../etc") == -1);
    /* the two GPUs in bus order with their nodes; the NIC and the audio function are not GPUs */
    int node;
    RS_CHECK(rs_place_n_gpus(p) == 2);
    RS_CHECK(rs_place_gpu_at(p, 0, line, sizeof(line), &node) == RS_OK);
    RS_CHECK_MSG(strcmp(line, "0000:17:00.0") == 0 && node == 1, "%s %d", line, node);
    RS_CHECK(rs_place_gpu_at(p, 1, line, sizeof(line), &node) == RS_OK);
    RS_CHECK_MSG(strcmp(line, "0000:65:00.0") == 0 && node == 0, "%s %d", line, node);
    RS_CHECK(rs_place_gpu_at(p, 2, line, sizeof(line), &node) == RS_ERANGE);
    RS_CHECK(plan(p, RS_PLACE_LAUNCHER, "", -1, rs_place_gpu_node(p), &pl) == RS_OK);
    RS_CHECK(strcmp(pl.cpus, "4-7") == 0 && pl.node == 1);
    rs_place_destroy(&p);
    /* One NUMA node: the GPU's node means nothing there. */
    RS_CHECK(rs_place_create_synthetic("numa:1 core:2 pu:1", &p) == RS_OK);
    rs_place_set_pci_root(p, root);
    RS_CHECK(rs_place_gpu_node(p) == -1);
    rs_place_destroy(&p);
    return 0;
}

static int test_daemon_helper_returns_exit_codes(void)
{
    struct rs_place_opts o;
    rs_place_opts_default(&o);
    RS_CHECK(rs_place_daemon("test", RS_PLACE_OTHER, &o) == 0);
    o.numa = 4000;
    RS_CHECK(rs_place_daemon("test", RS_PLACE_OTHER, &o) == 2);
    rs_place_opts_default(&o);
    snprintf(o.cpus, sizeof(o.cpus), "4095");
    RS_CHECK(rs_place_daemon("test", RS_PLACE_OTHER, &o) == 2);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_gpus_found_in_sysfs_with_their_node),
    RS_TEST(test_daemon_helper_returns_exit_codes),
    RS_TEST(test_parse_flags),
    RS_TEST(test_two_sockets_launcher_takes_gpu_node),
    RS_TEST(test_cpu_host_gives_everyone_every_cpu),
    RS_TEST(test_flags_override_the_rules),
    RS_TEST(test_synthetic_topology_refuses_binding),
    RS_TEST(test_host_apply_binds_the_process),
    RS_TEST(test_host_pin_thread_takes_one_cpu),
    RS_TEST(test_host_bind_memory_to_node),
    RS_TEST(test_host_without_gpu_has_no_gpu_node),
    RS_TEST(test_setup_refuses_a_missing_node),
};

RS_TEST_MAIN(cases)

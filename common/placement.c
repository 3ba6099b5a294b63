/* SPDX-License-Identifier: MIT */
/*
 * Stage placement over hwloc (placement.h): topology summary, the per-role
 * plan, and process / thread / memory binding. CPU sets are hwloc bitmaps of
 * kernel CPU numbers and NUMA nodes are named by the kernel's node number,
 * so `--cpus` and `--numa` mean what taskset and numactl mean. GPUs and
 * their NUMA node come from sysfs (vendor, class, numa_node of each PCI
 * device), not hwloc's I/O discovery: that and hwloc's plugins took 15-30 ms
 * of every daemon start on the development VM, against a 100 ms restart
 * budget; without them a topology loads in ~4 ms.
 * Leaves out: hwloc's distance matrices (the plan only needs "local node").
 */
#include "common/placement.h"

#include <dirent.h>
#include <errno.h>
#include <hwloc.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

#define PCI_ROOT "/sys/bus/pci/devices"

struct rs_place {
    hwloc_topology_t topo;
    hwloc_bitmap_t given; /* CPUs this process may run on (affinity mask within the topology) */
    int synthetic;
    char pci_root[256]; /* sysfs PCI device directory (tests point it at a fake tree) */
};

void rs_place_opts_default(struct rs_place_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->numa = -1;
}

/* A CPU list: digits, ',' and '-' only, at least one digit. */
static int list_syntax_ok(const char *v)
{
    int digits = 0;
    for (const char *c = v; *c; c++) {
        if (*c >= '0' && *c <= '9')
            digits = 1;
        else if (*c != ',' && *c != '-')
            return 0;
    }
    return digits;
}

static int parse_cpus(void *dst, const struct rs_opt *o, const char *v, char *err, size_t len)
{
    struct rs_place_opts *p = dst;
    (void)o;
    if (!list_syntax_ok(v) || strlen(v) >= sizeof(p->cpus)) {
        snprintf(err, len, "option --cpus: '%.64s' is not a CPU list such as 0-3,8", v);
        return -1;
    }
    snprintf(p->cpus, sizeof(p->cpus), "%s", v);
    return 0;
}

const struct rs_opt rs_place_opt_table[] = {
    {.name = "cpus", .kind = RS_OPT_CALL, .parse = parse_cpus, .arg = "LIST",
     .help = "run on these CPUs (kernel numbers, e.g. 0-3,8);\n"
             "default: launcherd the NUMA node of its GPU (all its\n"
             "CPUs on a CPU host), other stages the CPUs left over"},
    {.name = "numa", .kind = RS_OPT_INT, .off = offsetof(struct rs_place_opts, numa), .min = 0,
     .max = 4095, .arg = "N", .help = "run on NUMA node N's CPUs and bind memory there"},
    {0},
};

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RS_PLACE_LSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define RS_PLACE_LSAN 1
#endif
#ifdef RS_PLACE_LSAN
#include <sanitizer/lsan_interface.h>
#endif

/*
 * hwloc_topology_load. hwloc's PCI plugin (libpciaccess) leaves about 1 KB
 * per load allocated and unreachable once the plugin is unloaded; a daemon
 * loads once, but LeakSanitizer builds would report it, so it is ignored there.
 */
static int load_topology(hwloc_topology_t t)
{
#ifdef RS_PLACE_LSAN
    __lsan_disable();
#endif
    int rc = hwloc_topology_load(t);
#ifdef RS_PLACE_LSAN
    __lsan_enable();
#endif
    return rc;
}

static rs_err finish_create(rs_place *p, rs_place **out)
{
    if (load_topology(p->topo) != 0) {
        rs_log_error("placement: hwloc cannot load the topology: %s", strerror(errno));
        rs_place_destroy(&p);
        return RS_EIO;
    }
    hwloc_const_cpuset_t all = hwloc_topology_get_allowed_cpuset(p->topo);
    p->given = hwloc_bitmap_dup(all);
    if (p->given == NULL) {
        rs_place_destroy(&p);
        return RS_ENOMEM;
    }
    hwloc_bitmap_t mine = hwloc_bitmap_alloc();
    if (!p->synthetic && mine != NULL &&
        hwloc_get_cpubind(p->topo, mine, HWLOC_CPUBIND_PROCESS) == 0 &&
        hwloc_bitmap_intersects(mine, all))
        hwloc_bitmap_and(p->given, all, mine);
    hwloc_bitmap_free(mine);
    *out = p;
    return RS_OK;
}

rs_err rs_place_create(rs_place **out)
{
    *out = NULL;
    rs_place *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return RS_ENOMEM;
    /*
     * No I/O discovery is used, so hwloc's plugins (PCI, OpenCL, GL, libxml) need not
     * be loaded at all (~10 ms); an operator's own HWLOC_PLUGINS_BLACKLIST is kept.
     */
    setenv("HWLOC_PLUGINS_BLACKLIST", "hwloc_pci,hwloc_opencl,hwloc_gl,hwloc_xml_libxml", 0);
    if (hwloc_topology_init(&p->topo) != 0) {
        free(p);
        return RS_ENOMEM;
    }
    snprintf(p->pci_root, sizeof(p->pci_root), "%s", PCI_ROOT);
    return finish_create(p, out);
}

void rs_place_set_pci_root(rs_place *p, const char *dir)
{
    snprintf(p->pci_root, sizeof(p->pci_root), "%s", dir);
}

rs_err rs_place_create_synthetic(const char *desc, rs_place **out)
{
    *out = NULL;
    rs_place *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return RS_ENOMEM;
    if (hwloc_topology_init(&p->topo) != 0) {
        free(p);
        return RS_ENOMEM;
    }
    p->synthetic = 1;
    p->pci_root[0] = '\0'; /* no devices unless a test points it somewhere */
    if (hwloc_topology_set_synthetic(p->topo, desc) != 0) {
        rs_log_error("placement: synthetic topology '%s' rejected by hwloc", desc);
        hwloc_topology_destroy(p->topo);
        free(p);
        return RS_EINVAL;
    }
    return finish_create(p, out);
}

void rs_place_destroy(rs_place **pp)
{
    if (pp == NULL || *pp == NULL)
        return;
    rs_place *p = *pp;
    hwloc_bitmap_free(p->given);
    hwloc_topology_destroy(p->topo);
    free(p);
    *pp = NULL;
}

int rs_place_n_nodes(const rs_place *p)
{
    int n = hwloc_get_nbobjs_by_type(p->topo, HWLOC_OBJ_NUMANODE);
    return n > 0 ? n : 1;
}

/* A sysfs attribute of PCI device dev as a number (hex "0x.." or decimal); -1 on failure. */
static long pci_attr(const rs_place *p, const char *dev, const char *attr)
{
    char path[512], buf[32];
    snprintf(path, sizeof(path), "%s/%s/%s", p->pci_root, dev, attr);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -1;
    char *got = fgets(buf, sizeof(buf), f);
    fclose(f);
    return got != NULL ? strtol(buf, NULL, 0) : -1;
}

/* 1 when dev is an NVIDIA display-class device (GPU). */
static int is_nvidia_gpu(const rs_place *p, const char *dev)
{
    return pci_attr(p, dev, "vendor") == 0x10de && (pci_attr(p, dev, "class") >> 16) == 0x03;
}

/* The kernel NUMA node of dev, or -1 (unknown, or a one-node host). */
static int dev_node(const rs_place *p, const char *dev)
{
    long n = pci_attr(p, dev, "numa_node");
    return n >= 0 && rs_place_n_nodes(p) > 1 ? (int)n : -1;
}

int rs_place_pci_node(const rs_place *p, const char *busid)
{
    char dev[32];
    size_t i = 0;
    for (; busid[i] != '\0' && i + 1 < sizeof(dev); i++) /* CUDA writes upper-case hex */
        dev[i] = (char)(busid[i] >= 'A' && busid[i] <= 'F' ? busid[i] - 'A' + 'a' : busid[i]);
    dev[i] = '\0';
    if (strchr(dev, '/') != NULL || strstr(dev, "..") != NULL)
        return -1;
    return dev_node(p, dev);
}

/* Calls fn(p, dev, arg) for each NVIDIA GPU in bus order; stops when fn returns non-zero. */
static void for_each_gpu(const rs_place *p, int (*fn)(const rs_place *, const char *, void *),
                         void *arg)
{
    struct dirent **names;
    int n = p->pci_root[0] != '\0' ? scandir(p->pci_root, &names, NULL, alphasort) : -1;
    int stop = 0;
    for (int i = 0; i < n; i++) {
        if (!stop && names[i]->d_name[0] != '.' && is_nvidia_gpu(p, names[i]->d_name))
            stop = fn(p, names[i]->d_name, arg);
        free(names[i]);
    }
    if (n >= 0)
        free(names);
}

static int first_node(const rs_place *p, const char *dev, void *arg)
{
    *(int *)arg = dev_node(p, dev);
    return 1;
}

int rs_place_gpu_node(const rs_place *p)
{
    int node = -1;
    for_each_gpu(p, first_node, &node);
    return node;
}

/* Appends to buf at *at (bounded). */
static void put(char *buf, size_t len, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t len, size_t *at, const char *fmt, ...)
{
    if (*at >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *at, len - *at, fmt, ap);
    va_end(ap);
    if (n > 0)
        *at += (size_t)n < len - *at ? (size_t)n : len - *at - 1;
}

/* for_each_gpu's visitor for GPU number `want`: its bus id and node. */
struct gpu_pick {
    int want, n, node;
    char *busid;
    size_t len;
};

static int pick_gpu(const rs_place *p, const char *dev, void *arg)
{
    struct gpu_pick *g = arg;
    if (g->n++ != g->want)
        return 0;
    if (g->busid != NULL)
        snprintf(g->busid, g->len, "%s", dev);
    g->node = dev_node(p, dev);
    return 1;
}

int rs_place_n_gpus(const rs_place *p)
{
    struct gpu_pick g = {.want = -1};
    for_each_gpu(p, pick_gpu, &g);
    return g.n;
}

rs_err rs_place_gpu_at(const rs_place *p, int i, char *busid, size_t len, int *node)
{
    struct gpu_pick g = {.want = i, .busid = busid, .len = len};
    for_each_gpu(p, pick_gpu, &g);
    if (i < 0 || i >= g.n)
        return RS_ERANGE;
    *node = g.node;
    return RS_OK;
}

rs_err rs_place_node_at(const rs_place *p, int i, int *os_index, char *cpus, size_t cpus_len)
{
    hwloc_obj_t n = i >= 0 ? hwloc_get_obj_by_type(p->topo, HWLOC_OBJ_NUMANODE, (unsigned)i)
                           : NULL;
    if (n == NULL)
        return RS_ERANGE;
    *os_index = (int)n->os_index;
    hwloc_bitmap_list_snprintf(cpus, cpus_len, n->cpuset);
    return RS_OK;
}

void rs_place_describe(const rs_place *p, char *buf, size_t len)
{
    size_t at = 0;
    char list[256];
    hwloc_topology_t t = p->topo;
    buf[0] = '\0';
    put(buf, len, &at, "%d package(s), %d NUMA node(s) [",
        hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE), rs_place_n_nodes(p));
    hwloc_obj_t n = NULL;
    for (int i = 0; (n = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, n)) != NULL; i++) {
        hwloc_bitmap_list_snprintf(list, sizeof(list), n->cpuset);
        put(buf, len, &at, "%snode %u: cpus %s, %.1f GiB", i ? "; " : "", n->os_index, list,
            (double)n->attr->numanode.local_memory / (1024.0 * 1024.0 * 1024.0));
    }
    hwloc_bitmap_list_snprintf(list, sizeof(list), p->given);
    put(buf, len, &at, "], %d cores, %d PUs, given cpus %s",
        hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE), hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU),
        list);
    int n_gpus = rs_place_n_gpus(p), node;
    for (int i = 0; i < n_gpus && rs_place_gpu_at(p, i, list, sizeof(list), &node) == RS_OK; i++)
        put(buf, len, &at, "%s%s (node %d)", i ? ", " : ", GPUs ", list, node);
    if (n_gpus == 0)
        put(buf, len, &at, ", no NVIDIA GPU");
}

/* The NUMA node object with kernel number os, or NULL. */
static hwloc_obj_t node_obj(const rs_place *p, int os)
{
    hwloc_obj_t n = NULL;
    while ((n = hwloc_get_next_obj_by_type(p->topo, HWLOC_OBJ_NUMANODE, n)) != NULL)
        if ((int)n->os_index == os)
            return n;
    return NULL;
}

/* The one node whose CPUs contain all of set (multi-node hosts only), else -1. */
static int node_covering(const rs_place *p, hwloc_const_cpuset_t set)
{
    if (rs_place_n_nodes(p) < 2)
        return -1;
    hwloc_obj_t n = NULL;
    while ((n = hwloc_get_next_obj_by_type(p->topo, HWLOC_OBJ_NUMANODE, n)) != NULL)
        if (hwloc_bitmap_isincluded(set, n->cpuset))
            return (int)n->os_index;
    return -1;
}

/* set = the CPUs of --cpus; RS_EINVAL when some are not given to this process. */
static rs_err plan_from_list(const rs_place *p, const char *list, hwloc_bitmap_t set, char *err,
                             size_t err_len)
{
    if (hwloc_bitmap_list_sscanf(set, list) != 0 || hwloc_bitmap_iszero(set)) {
        snprintf(err, err_len, "--cpus '%s' is not a CPU list", list);
        return RS_EINVAL;
    }
    if (!hwloc_bitmap_isincluded(set, p->given)) {
        char given[256];
        hwloc_bitmap_list_snprintf(given, sizeof(given), p->given);
        snprintf(err, err_len, "--cpus %s: this process may only use CPUs %s", list, given);
        return RS_EINVAL;
    }
    return RS_OK;
}

/* The default rule for role; writes set, *node, *rule and why. */
static void plan_by_role(const rs_place *p, enum rs_place_role role, int gpu_node,
                         hwloc_bitmap_t set, int *node, enum rs_place_rule *rule, char *why,
                         size_t why_len)
{
    hwloc_obj_t g = gpu_node >= 0 ? node_obj(p, gpu_node) : NULL;
    hwloc_bitmap_copy(set, p->given);
    *node = -1;
    *rule = RS_PLACE_NO_GPU;
    if (g == NULL) {
        snprintf(why, why_len, "%s",
                 role == RS_PLACE_LAUNCHER
                     ? "no GPU node: every CPU given to the launcher"
                     : "no GPU node: every CPU given, shared with the launcher");
        return;
    }
    if (role == RS_PLACE_LAUNCHER) {
        hwloc_bitmap_and(set, p->given, g->cpuset);
        if (!hwloc_bitmap_iszero(set)) {
            *node = gpu_node;
            *rule = RS_PLACE_GPU_NODE;
            snprintf(why, why_len, "the GPU's NUMA node %d", gpu_node);
            return;
        }
        hwloc_bitmap_copy(set, p->given);
        *rule = RS_PLACE_GPU_NODE_EMPTY;
        snprintf(why, why_len, "the GPU's node %d has no CPU given to us: every CPU given",
                 gpu_node);
        return;
    }
    hwloc_bitmap_andnot(set, p->given, g->cpuset);
    if (hwloc_bitmap_iszero(set)) {
        hwloc_bitmap_copy(set, p->given);
        *rule = RS_PLACE_SHARED;
        snprintf(why, why_len, "no CPU left beside the launcher's node %d: shared", gpu_node);
        return;
    }
    *node = node_covering(p, set);
    *rule = RS_PLACE_LEFT_OVER;
    snprintf(why, why_len, "the CPUs the launcher's node %d leaves", gpu_node);
}

rs_err rs_place_plan(const rs_place *p, enum rs_place_role role, const struct rs_place_opts *o,
                     int gpu_node, struct rs_place_plan *out, char *err, size_t err_len)
{
    memset(out, 0, sizeof(*out));
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set == NULL)
        return RS_ENOMEM;
    rs_err rc = RS_OK;
    hwloc_obj_t n = o->numa >= 0 ? node_obj(p, o->numa) : NULL;
    if (o->numa >= 0 && n == NULL) {
        snprintf(err, err_len, "--numa %d: this host has no such node", o->numa);
        rc = RS_EINVAL;
    } else if (o->cpus[0] != '\0') {
        rc = plan_from_list(p, o->cpus, set, err, err_len);
        out->node = n != NULL ? o->numa : node_covering(p, set);
        out->rule = RS_PLACE_BY_CPUS;
        snprintf(out->why, sizeof(out->why), "--cpus %.160s%s", o->cpus, n ? " and --numa" : "");
    } else if (n != NULL) {
        hwloc_bitmap_and(set, p->given, n->cpuset);
        out->node = o->numa;
        out->rule = RS_PLACE_BY_NUMA;
        snprintf(out->why, sizeof(out->why), "--numa %d", o->numa);
        if (hwloc_bitmap_iszero(set)) {
            snprintf(err, err_len, "--numa %d: none of the node's CPUs is given to this process",
                     o->numa);
            rc = RS_EINVAL;
        }
    } else {
        plan_by_role(p, role, gpu_node, set, &out->node, &out->rule, out->why,
                     sizeof(out->why));
    }
    if (rc == RS_OK) {
        hwloc_bitmap_list_snprintf(out->cpus, sizeof(out->cpus), set);
        out->n_cpus = hwloc_bitmap_weight(set);
    }
    hwloc_bitmap_free(set);
    return rc;
}

/* The plan's CPU set, or NULL (logged) for a synthetic topology or a bad list. */
static hwloc_bitmap_t plan_set(const rs_place *p, const struct rs_place_plan *plan, rs_err *rc)
{
    *rc = RS_EUNSUPPORTED;
    if (p->synthetic)
        return NULL;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    *rc = RS_EINVAL;
    if (set != NULL && hwloc_bitmap_list_sscanf(set, plan->cpus) == 0 && !hwloc_bitmap_iszero(set))
        return set;
    hwloc_bitmap_free(set);
    rs_log_error("placement: plan CPU list '%s' is empty or malformed", plan->cpus);
    return NULL;
}

rs_err rs_place_apply(rs_place *p, const struct rs_place_plan *plan)
{
    rs_err rc;
    hwloc_bitmap_t set = plan_set(p, plan, &rc);
    if (set == NULL)
        return rc;
    rc = RS_OK;
    if (hwloc_set_cpubind(p->topo, set, HWLOC_CPUBIND_PROCESS) != 0) {
        rs_log_error("placement: binding the process to CPUs %s: %s", plan->cpus, strerror(errno));
        rc = RS_EIO;
    }
    hwloc_bitmap_free(set);
    return rc;
}

rs_err rs_place_pin_thread(rs_place *p, const struct rs_place_plan *plan, unsigned index)
{
    rs_err rc;
    hwloc_bitmap_t set = plan_set(p, plan, &rc);
    if (set == NULL)
        return rc;
    unsigned k = index % (unsigned)hwloc_bitmap_weight(set);
    int cpu = hwloc_bitmap_first(set);
    for (unsigned j = 0; j < k; j++)
        cpu = hwloc_bitmap_next(set, cpu);
    hwloc_bitmap_only(set, (unsigned)cpu);
    rc = RS_OK;
    if (hwloc_set_cpubind(p->topo, set, HWLOC_CPUBIND_THREAD) != 0) {
        rs_log_error("placement: pinning a thread to CPU %d: %s", cpu, strerror(errno));
        rc = RS_EIO;
    }
    hwloc_bitmap_free(set);
    return rc;
}

rs_err rs_place_bind_memory(rs_place *p, const struct rs_place_plan *plan, void *addr, size_t len)
{
    if (p->synthetic)
        return RS_EUNSUPPORTED;
    if (addr == NULL || len == 0 || ((uintptr_t)addr & 4095u) != 0) {
        rs_log_error("placement: memory range %p + %zu is empty or not page-aligned", addr, len);
        return RS_EINVAL;
    }
    if (plan->node < 0)
        return RS_OK;
    hwloc_bitmap_t ns = hwloc_bitmap_alloc();
    if (ns == NULL)
        return RS_ENOMEM;
    hwloc_bitmap_only(ns, (unsigned)plan->node);
    rs_err rc = RS_OK;
    if (hwloc_set_area_membind(p->topo, addr, len, ns, HWLOC_MEMBIND_BIND,
                               HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_MIGRATE) != 0) {
        rs_log_error("placement: binding %zu bytes at %p to NUMA node %d: %s", len, addr,
                     plan->node, strerror(errno));
        rc = RS_EIO;
    }
    hwloc_bitmap_free(ns);
    return rc;
}

rs_err rs_place_setup(const char *stage, enum rs_place_role role, const struct rs_place_opts *o,
                      int gpu_node, rs_place **out, struct rs_place_plan *plan, char *err,
                      size_t err_len)
{
    char line[1024];
    rs_err rc = rs_place_create(out);
    if (rc != RS_OK) {
        snprintf(err, err_len, "cannot read the host topology: %s", rs_strerror(rc));
        return rc;
    }
    rs_place_describe(*out, line, sizeof(line));
    rs_log_info("%s: topology: %s", stage, line);
    if (gpu_node == RS_PLACE_GPU_AUTO)
        gpu_node = rs_place_gpu_node(*out);
    if ((rc = rs_place_plan(*out, role, o, gpu_node, plan, err, err_len)) != RS_OK)
        return rc;
    if ((rc = rs_place_apply(*out, plan)) != RS_OK) {
        snprintf(err, err_len, "cannot bind to CPUs %s: %s", plan->cpus, rs_strerror(rc));
        return rc;
    }
    rs_log_info("%s: placed on CPUs %s (%d), memory node %d (%s)", stage, plan->cpus, plan->n_cpus,
                plan->node, plan->why);
    return RS_OK;
}

int rs_place_daemon(const char *stage, enum rs_place_role role, const struct rs_place_opts *o)
{
    rs_place *p = NULL;
    struct rs_place_plan plan;
    char err[512];
    rs_err rc = rs_place_setup(stage, role, o, RS_PLACE_GPU_AUTO, &p, &plan, err, sizeof(err));
    rs_place_destroy(&p);
    if (rc == RS_OK)
        return 0;
    rs_log_error("%s: placement: %s", stage, err);
    return rc == RS_EINVAL ? 2 : 1;
}

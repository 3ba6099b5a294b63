/* SPDX-License-Identifier: MIT */
/*
 * Where a stage runs (DESIGN.md §5): the host topology from hwloc, logged
 * once per stage; a plan of CPUs and a NUMA node per stage (launcherd on the
 * node of its GPU, or every CPU it was given on a CPU host; the others on
 * the CPUs left over); binding the process, a thread, or a memory mapping to
 * that plan. `--cpus LIST` and `--numa N` override the plan. Every stage
 * computes the same plan from the same topology, so no stage needs to ask
 * another where it runs. Leaves out: per-thread core layouts inside the
 * engine's pool (rs_place_pin_thread is the building block), cgroup limits.
 */
#ifndef RS_PLACEMENT_H
#define RS_PLACEMENT_H

#include <stddef.h>

#include "common/err.h"
#include "common/opt.h"

/* The placement flags every daemon takes. */
struct rs_place_opts {
    char cpus[256]; /* --cpus LIST as given (kernel CPU numbers, "0-3,8"); "" = not given */
    int numa;       /* --numa N (the kernel's node number); -1 = not given */
};

/* No flags: the plan decides. */
void rs_place_opts_default(struct rs_place_opts *o);

/*
 * The two flags as an option table (common/opt.h) over struct
 * rs_place_opts: --cpus LIST and --numa N. Syntax only: whether the CPUs
 * and node exist is checked by rs_place_plan.
 */
extern const struct rs_opt rs_place_opt_table[];
#define RS_PLACE_OPTS_TITLE "placement"

/* Which rule picks a stage's CPUs when no flag is given. */
enum rs_place_role {
    RS_PLACE_LAUNCHER = 0, /* the GPU's NUMA node, or every CPU it was given */
    RS_PLACE_OTHER = 1,    /* the CPUs the launcher's GPU node leaves; all when none are left */
};

typedef struct rs_place rs_place;

/*
 * Loads this host's topology (CPUs, NUMA nodes, and PCI devices so GPUs
 * are found) and notes the CPUs this process may run on now. *out owns it.
 * RS_EIO when hwloc cannot load it (logged). Any thread, once per process.
 */
rs_err rs_place_create(rs_place **out);

/*
 * A synthetic topology in hwloc's syntax, e.g. "pack:2 numa:1 core:4 pu:2"
 * (for tests of the plan; binding calls refuse it with RS_EUNSUPPORTED).
 * RS_EINVAL for a description hwloc rejects.
 */
rs_err rs_place_create_synthetic(const char *desc, rs_place **out);

/* Accepts NULL; clears *p. */
void rs_place_destroy(rs_place **p);

/*
 * One line describing the topology: packages, NUMA nodes with their CPUs and
 * memory, cores, PUs, the CPUs this process was given, GPUs with their node.
 */
void rs_place_describe(const rs_place *p, char *buf, size_t len);

/* Number of NUMA nodes (>= 1). */
int rs_place_n_nodes(const rs_place *p);

/*
 * NUMA node i (0 <= i < rs_place_n_nodes, in topology order): its kernel
 * number and its CPU list ("0-3", cpus_len bytes). RS_OK or RS_ERANGE.
 */
rs_err rs_place_node_at(const rs_place *p, int i, int *os_index, char *cpus, size_t cpus_len);

/* NVIDIA GPUs in sysfs (vendor 0x10de, display class), in bus order. */
int rs_place_n_gpus(const rs_place *p);

/* GPU i of those: its bus id ("0000:17:00.0", len bytes) and NUMA node. RS_OK or RS_ERANGE. */
rs_err rs_place_gpu_at(const rs_place *p, int i, char *busid, size_t len, int *node);

/*
 * The NUMA node (kernel number) of the PCI device with bus id `busid`
 * ("0000:17:00.0"; upper-case hex as cudaDeviceGetPCIBusId writes it is
 * fine), from sysfs, or -1 when the device is unknown or the host has one node.
 */
int rs_place_pci_node(const rs_place *p, const char *busid);

/* The node of the first NVIDIA GPU in sysfs (vendor 0x10de, display class), or -1. */
int rs_place_gpu_node(const rs_place *p);

/* Tests: read PCI devices from dir (a fake /sys/bus/pci/devices) instead of sysfs. */
void rs_place_set_pci_root(rs_place *p, const char *dir);

/* Which rule or flag chose a plan (rs_place_plan.rule). */
enum rs_place_rule {
    RS_PLACE_BY_CPUS = 1,      /* --cpus (with --numa: that node for memory) */
    RS_PLACE_BY_NUMA,          /* --numa: the node's CPUs given to us */
    RS_PLACE_NO_GPU,           /* no GPU node: every CPU given, to every stage */
    RS_PLACE_GPU_NODE,         /* launcher: the CPUs of its GPU's node */
    RS_PLACE_GPU_NODE_EMPTY,   /* launcher: its GPU's node has no CPU given: every CPU */
    RS_PLACE_LEFT_OVER,        /* other stages: the CPUs the launcher's node leaves */
    RS_PLACE_SHARED,           /* other stages: nothing left beside the launcher: shared */
};

/* A stage's placement. */
struct rs_place_plan {
    char cpus[256]; /* CPU list (kernel numbers) the stage runs on */
    int n_cpus;
    int node;      /* NUMA node its memory binds to; -1 = no binding (one node, or spread) */
    enum rs_place_rule rule; /* what chose it */
    char why[192]; /* the same for the log, in words */
};

/*
 * Computes the plan for `role` from the flags (which win) or the rules
 * above. gpu_node: the NUMA node of the GPU the launcher drives (the caller
 * passes rs_place_pci_node or rs_place_gpu_node), -1 on a CPU host.
 * Returns RS_OK, or RS_EINVAL (message in err) when --cpus names CPUs this
 * process may not use or --numa a node that does not exist or has no
 * allowed CPUs. Any thread.
 */
rs_err rs_place_plan(const rs_place *p, enum rs_place_role role, const struct rs_place_opts *o,
                     int gpu_node, struct rs_place_plan *out, char *err, size_t err_len);

/*
 * Binds the whole process (its threads, and those it starts later) to
 * plan->cpus. RS_OK, RS_EIO when the kernel refuses (logged),
 * RS_EUNSUPPORTED for a synthetic topology. Call before starting threads.
 */
rs_err rs_place_apply(rs_place *p, const struct rs_place_plan *plan);

/*
 * Pins the calling thread to one CPU: the (index mod n_cpus)-th of
 * plan->cpus, in increasing order. For pools that want a thread per core.
 * RS_OK, RS_EIO, RS_EUNSUPPORTED as rs_place_apply.
 */
rs_err rs_place_pin_thread(rs_place *p, const struct rs_place_plan *plan, unsigned index);

/*
 * Binds the pages of [addr, addr + len) (page-aligned start; a mapping
 * this process made) to plan->node, moving pages already placed elsewhere.
 * RS_OK without doing anything when plan->node < 0 or the host has one
 * node; RS_EIO when the kernel refuses (logged); RS_EUNSUPPORTED for a
 * synthetic topology; RS_EINVAL for an unaligned or empty range.
 */
rs_err rs_place_bind_memory(rs_place *p, const struct rs_place_plan *plan, void *addr, size_t len);

/* gpu_node for rs_place_setup: the node of the first NVIDIA GPU hwloc sees (-1 when none). */
#define RS_PLACE_GPU_AUTO (-2)

/*
 * What a daemon's main calls once, before it starts threads: loads the
 * topology, logs it as `stage`, plans for role (gpu_node as above, or
 * RS_PLACE_GPU_AUTO, which every stage can pass to agree on the plan),
 * applies the plan and logs it. *out keeps the topology for
 * rs_place_bind_memory (destroy it at exit). A flag that names CPUs or a
 * node that does not exist is RS_EINVAL (err); a refused binding is logged
 * and returned.
 */
rs_err rs_place_setup(const char *stage, enum rs_place_role role, const struct rs_place_opts *o,
                      int gpu_node, rs_place **out, struct rs_place_plan *plan, char *err,
                      size_t err_len);

/*
 * rs_place_setup for a stage that keeps no binding for later (tokenizerd,
 * schedulerd, postprocd: only launcherd binds the segment's pages), with
 * RS_PLACE_GPU_AUTO, the topology released again. Returns an exit code:
 * 0, 2 after logging a bad --cpus/--numa, 1 after logging a refused binding.
 * Main thread, before threads start.
 */
int rs_place_daemon(const char *stage, enum rs_place_role role, const struct rs_place_opts *o);

#endif

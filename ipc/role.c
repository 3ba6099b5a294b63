/* SPDX-License-Identifier: MIT */
/*
 * Role table (see role.h): incarnation fencing, the pid/start-time registry
 * that tells a dead incarnation from a stopped one, heartbeats.
 */
#include "ipc/role.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/failpoint.h"
#include "ipc/role_impl.h"
#include "ipc/shm_impl.h"

static uint64_t roles_memsize(const struct shm_region_dir *d, char *why, size_t len)
{
    if (d->count == 0 || d->count > RS_ROLE_MAX || d->elem_bytes != 0) {
        shm_why(why, len, "roles region '%s': %llu roles not in 1..%d", d->name,
                (unsigned long long)d->count, RS_ROLE_MAX);
        return 0;
    }
    return sizeof(struct roles_hdr) + d->count * sizeof(struct role_rec) +
           RS_ROLE_REGISTRY * sizeof(struct inc_reg);
}

static void roles_init(void *mem, const struct shm_region_dir *d,
                       const struct rs_shm_region_spec *spec)
{
    const char *const *names = spec->role_names;
    struct roles_hdr *h = mem;
    h->tag = RS_SHM_ROLES;
    h->n_roles = (uint32_t)d->count;
    h->n_reg = RS_ROLE_REGISTRY;
    for (uint32_t i = 0; i < h->n_roles; i++) {
        struct role_rec *r = roles_rec(mem, i);
        snprintf(r->name, sizeof(r->name), "%s", names[i]);
        r->index = i;
    }
}

static rs_err roles_validate(const void *mem, const struct shm_region_dir *d, uint32_t n_roles,
                             char *why, size_t len)
{
    (void)n_roles; /* this is the region that defines it */
    const struct roles_hdr *h = mem;
    if (h->tag != RS_SHM_ROLES || h->n_roles != d->count || h->n_reg != RS_ROLE_REGISTRY)
        return shm_why(why, len, "roles region '%s': header (tag %u, %u roles, %u registry) "
                                 "disagrees with the directory",
                       d->name, h->tag, h->n_roles, h->n_reg);
    for (uint32_t i = 0; i < h->n_roles; i++) {
        const struct role_rec *r = roles_rec((void *)mem, i);
        if (memchr(r->name, '\0', sizeof(r->name)) == NULL || r->name[0] == '\0')
            return shm_why(why, len, "roles region '%s': role %u has a bad name", d->name, i);
    }
    return RS_OK;
}

const struct shm_kind shm_kind_roles = {
    .name = "roles", .count_name = "roles", .elem_name = "elem",
    .memsize = roles_memsize, .init = roles_init, .validate = roles_validate,
};

int roles_find(const void *mem, uint32_t n_roles, const char *name)
{
    for (uint32_t i = 0; name != NULL && i < n_roles; i++)
        if (strncmp(roles_rec((void *)mem, i)->name, name, RS_ROLE_NAME_MAX + 1) == 0)
            return (int)i;
    return -1;
}

int rs_role_find(const rs_shm *shm, const char *name)
{
    return roles_find(shm->roles, shm->n_roles, name);
}

uint32_t rs_role_count(const rs_shm *shm)
{
    return shm->n_roles;
}

/* State letter and start time (clock ticks since boot) of `pid`; -1 if gone. */
static int proc_stat(uint32_t pid, char *state, uint64_t *ticks)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%u/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    if (p == NULL || p[1] != ' ')
        return -1;
    p += 2;
    *state = *p;
    for (int field = 3; field < 22 && p != NULL; field++) {
        p = strchr(p, ' ');
        if (p != NULL)
            p++;
    }
    if (p == NULL)
        return -1;
    *ticks = strtoull(p, NULL, 10);
    return 0;
}

static int pid_alive(uint32_t pid, uint64_t ticks)
{
    char st;
    uint64_t now_ticks;
    if (pid == 0 || proc_stat(pid, &st, &now_ticks) != 0)
        return 0;
    return now_ticks == ticks && st != 'Z' && st != 'X' && st != 'x';
}

enum rs_inc_status rs_role_inc_status(const rs_shm *shm, uint32_t inc)
{
    if (inc == 0)
        return RS_INC_FENCED_DEAD;
    for (uint32_t i = 0; i < shm->n_roles; i++)
        if (roles_is_current(shm->roles, i, inc))
            return RS_INC_CURRENT;
    struct inc_reg *e = roles_reg(shm->roles, inc);
    uint64_t a = atomic_load_explicit(&e->inc, memory_order_acquire);
    uint64_t pid = atomic_load_explicit(&e->pid, memory_order_relaxed);
    uint64_t ticks = atomic_load_explicit(&e->start_ticks, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    uint64_t b = atomic_load_explicit(&e->inc, memory_order_relaxed);
    if (a != inc || b != inc)
        return RS_INC_FENCED_DEAD; /* forgotten: older than the registry */
    return pid_alive((uint32_t)pid, ticks) ? RS_INC_FENCED_ALIVE : RS_INC_FENCED_DEAD;
}

static void registry_write(rs_shm *shm, uint32_t inc, uint32_t role, uint64_t ticks)
{
    struct inc_reg *e = roles_reg(shm->roles, inc);
    atomic_store_explicit(&e->inc, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&e->pid, (uint64_t)getpid(), memory_order_relaxed);
    atomic_store_explicit(&e->start_ticks, ticks, memory_order_relaxed);
    atomic_store_explicit(&e->role, role, memory_order_relaxed);
    atomic_store_explicit(&e->inc, inc, memory_order_release);
}

/* The fence: publishes `inc` as the role's incarnation unless a newer one holds it. */
static rs_err role_fence(struct role_rec *r, uint32_t inc)
{
    uint64_t w = atomic_load_explicit(&r->word, memory_order_acquire);
    for (;;) {
        if (rs_sw_owner(w) > inc) {
            rs_log_error("role %s: incarnation %u already replaced by %u", r->name, inc,
                         rs_sw_owner(w));
            return RS_ESTALE;
        }
        uint64_t nw = rs_sw_make(RS_ROLE_RECOVERING, rs_sw_gen_next(rs_sw_gen(w)), inc);
        /* P-R: the fence; every roles_is_current() after it sees the new owner. */
        if (atomic_compare_exchange_weak_explicit(&r->word, &w, nw, memory_order_seq_cst,
                                                  memory_order_acquire))
            return RS_OK;
    }
}

rs_err rs_role_start(rs_shm *shm, const char *name, rs_role **out)
{
    *out = NULL;
    int idx = roles_find(shm->roles, shm->n_roles, name);
    if (idx < 0) {
        rs_log_error("segment %s: no role '%s'", shm->name, name ? name : "(null)");
        return RS_ENOENT;
    }
    char st;
    uint64_t ticks = 0;
    if (proc_stat((uint32_t)getpid(), &st, &ticks) != 0) {
        rs_log_error("role %s: cannot read /proc/self/stat", name);
        return RS_EIO;
    }
    rs_role *role = calloc(1, sizeof(*role));
    if (role == NULL)
        return RS_ENOMEM;
    rs_err e = rs_shm_incarnation_new(shm, &role->inc);
    struct role_rec *r = roles_rec(shm->roles, (uint32_t)idx);
    if (e == RS_OK) {
        registry_write(shm, role->inc, (uint32_t)idx, ticks);
        RS_FAILPOINT("role.start.before_fence");
        e = role_fence(r, role->inc);
    }
    if (e != RS_OK) {
        free(role);
        return e;
    }
    uint64_t now = rs_clock_ns();
    atomic_store_explicit(&r->pid, (uint64_t)getpid(), memory_order_relaxed);
    atomic_store_explicit(&r->start_ticks, ticks, memory_order_relaxed);
    atomic_store_explicit(&r->started_ns, now, memory_order_relaxed);
    atomic_store_explicit(&r->ready_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&r->heartbeat_ns, now, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->n_starts, 1, memory_order_relaxed);
    RS_FAILPOINT("role.start.after_fence");
    role->shm = shm;
    role->roles = shm->roles;
    role->index = (uint32_t)idx;
    *out = role;
    return RS_OK;
}

/* CAS this incarnation's word to phase `to`; RS_ESTALE if no longer current. */
static rs_err role_set_phase(rs_role *role, uint32_t from_mask, uint32_t to)
{
    struct role_rec *r = roles_rec(role->roles, role->index);
    uint64_t w = atomic_load_explicit(&r->word, memory_order_acquire);
    for (;;) {
        if (rs_sw_owner(w) != role->inc || !((1u << rs_sw_state(w)) & from_mask))
            return RS_ESTALE;
        uint64_t nw = rs_sw_make(to, rs_sw_gen(w), role->inc);
        if (atomic_compare_exchange_weak_explicit(&r->word, &w, nw, memory_order_release,
                                                  memory_order_acquire))
            return RS_OK;
    }
}

rs_err rs_role_ready(rs_role *role)
{
    rs_err e = role_set_phase(role, 1u << RS_ROLE_RECOVERING, RS_ROLE_READY);
    if (e != RS_OK) {
        rs_log_error("role %s: incarnation %u fenced before it was ready",
                     roles_rec(role->roles, role->index)->name, role->inc);
        return e;
    }
    struct role_rec *r = roles_rec(role->roles, role->index);
    atomic_store_explicit(&r->ready_ns, rs_clock_ns(), memory_order_relaxed);
    atomic_fetch_add_explicit(&r->n_ready, 1, memory_order_relaxed);
    return RS_OK;
}

void rs_role_heartbeat(rs_role *role)
{
    if (roles_is_current(role->roles, role->index, role->inc))
        atomic_store_explicit(&roles_rec(role->roles, role->index)->heartbeat_ns, rs_clock_ns(),
                              memory_order_relaxed);
}

int rs_role_current(const rs_role *role)
{
    return roles_is_current(role->roles, role->index, role->inc);
}

uint32_t rs_role_inc(const rs_role *role)
{
    return role->inc;
}

uint32_t rs_role_index(const rs_role *role)
{
    return role->index;
}

rs_shm *rs_role_shm(const rs_role *role)
{
    return role->shm;
}

void rs_role_stop(rs_role **role)
{
    if (role == NULL || *role == NULL)
        return;
    role_set_phase(*role, (1u << RS_ROLE_RECOVERING) | (1u << RS_ROLE_READY), RS_ROLE_EXITED);
    free(*role);
    *role = NULL;
}

uint32_t rs_role_current_inc(const rs_shm *shm, uint32_t i)
{
    if (shm == NULL || i >= shm->n_roles)
        return 0;
    return rs_sw_owner(atomic_load_explicit(&roles_rec(shm->roles, i)->word, memory_order_acquire));
}

rs_err rs_role_info_at(const rs_shm *shm, uint32_t i, struct rs_role_info *out)
{
    if (i >= shm->n_roles)
        return RS_ERANGE;
    struct role_rec *r = roles_rec(shm->roles, i);
    memset(out, 0, sizeof(*out));
    memcpy(out->name, r->name, sizeof(out->name));
    out->name[RS_ROLE_NAME_MAX] = '\0';
    uint64_t w = atomic_load_explicit(&r->word, memory_order_acquire);
    out->inc = rs_sw_owner(w);
    out->phase = (enum rs_role_phase)rs_sw_state(w);
    out->pid = (uint32_t)atomic_load_explicit(&r->pid, memory_order_relaxed);
    uint64_t ticks = atomic_load_explicit(&r->start_ticks, memory_order_relaxed);
    out->alive = out->inc != 0 && pid_alive(out->pid, ticks);
    out->started_ns = atomic_load_explicit(&r->started_ns, memory_order_relaxed);
    out->ready_ns = atomic_load_explicit(&r->ready_ns, memory_order_relaxed);
    out->heartbeat_ns = atomic_load_explicit(&r->heartbeat_ns, memory_order_relaxed);
    out->n_starts = atomic_load_explicit(&r->n_starts, memory_order_relaxed);
    out->n_ready = atomic_load_explicit(&r->n_ready, memory_order_relaxed);
    return RS_OK;
}

rs_err rs_role_check(const rs_shm *shm)
{
    uint64_t issued = atomic_load_explicit(&shm->hdr->incarnation, memory_order_acquire);
    for (uint32_t i = 0; i < shm->n_roles; i++) {
        uint64_t w = atomic_load_explicit(&roles_rec(shm->roles, i)->word, memory_order_acquire);
        uint32_t inc = rs_sw_owner(w);
        if (inc > issued || rs_sw_state(w) > RS_ROLE_EXITED) {
            rs_log_error("role %u: incarnation %u above the %llu issued, or phase %u (R1)", i, inc,
                         (unsigned long long)issued, rs_sw_state(w));
            return RS_EMISMATCH;
        }
        for (uint32_t j = 0; inc != 0 && j < i; j++) {
            uint64_t o = atomic_load_explicit(&roles_rec(shm->roles, j)->word, memory_order_acquire);
            if (rs_sw_owner(o) == inc) {
                rs_log_error("incarnation %u current for roles %u and %u (R2)", inc, j, i);
                return RS_EMISMATCH;
            }
        }
        struct inc_reg *e = roles_reg(shm->roles, inc);
        if (inc != 0 && atomic_load_explicit(&e->inc, memory_order_acquire) == inc &&
            atomic_load_explicit(&e->role, memory_order_relaxed) != i) {
            rs_log_error("incarnation %u: registry names another role (R3)", inc);
            return RS_EMISMATCH;
        }
    }
    return RS_OK;
}

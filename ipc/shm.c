/* SPDX-License-Identifier: MIT */
/*
 * Segment create/attach/validate (see shm.h). The creator computes every
 * region's offset from the specs, writes the directory, formats each region
 * through its kind's hooks and publishes READY last (release), so an
 * attacher never sees a half-built segment as usable. Attach re-validates
 * the whole image (it is outside input: another build may have made it).
 */
#include "ipc/failpoint_sys.h"
#include "ipc/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "ipc/role.h"
#include "ipc/shm_impl.h"

rs_err shm_why(char *why, size_t len, const char *fmt, ...)
{
    if (why != NULL && len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, len, fmt, ap);
        va_end(ap);
    }
    return RS_EMISMATCH;
}

/* Raw regions hold bytes their user lays out: no header of their own, nothing to format. */
static uint64_t raw_memsize(const struct shm_region_dir *d, char *why, size_t len)
{
    if (d->size == 0 || d->size > SHM_MAX_BYTES) {
        shm_why(why, len, "raw region '%s': bytes %llu not in 1..2^40", d->name,
                (unsigned long long)d->size);
        return 0;
    }
    return d->size;
}

static const struct shm_kind shm_kind_raw = {
    .name = "raw", .count_name = "count", .elem_name = "elem", .memsize = raw_memsize,
};

/* Every region kind, by enum rs_shm_kind; a new kind is one entry (and its module). */
static const struct shm_kind *const kinds[] = {
    [RS_SHM_RAW] = &shm_kind_raw,     [RS_SHM_ROLES] = &shm_kind_roles,
    [RS_SHM_RING] = &shm_kind_ring,   [RS_SHM_TABLE] = &shm_kind_table,
    [RS_SHM_ARENA] = &shm_kind_arena,
};

/* The kind entry of a directory or spec kind, or NULL for one this build does not know. */
static const struct shm_kind *kind_of(uint32_t kind)
{
    return kind < sizeof(kinds) / sizeof(kinds[0]) ? kinds[kind] : NULL;
}

const char *rs_shm_kind_name(enum rs_shm_kind kind)
{
    const struct shm_kind *k = kind_of((uint32_t)kind);
    return k != NULL ? k->name : "unknown";
}

static int valid_ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

rs_err rs_shm_name(const char *instance, char *buf, size_t buf_len)
{
    size_t n = instance ? strlen(instance) : 0;
    if (n == 0 || n > 200) {
        rs_log_error("segment instance name must be 1..200 bytes (got %zu)", n);
        return RS_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        if (!valid_ident_char(instance[i])) {
            rs_log_error("segment instance '%s': only [A-Za-z0-9._-] allowed", instance);
            return RS_EINVAL;
        }
    }
    if ((size_t)snprintf(buf, buf_len, "%s%s", RS_SHM_PREFIX, instance) >= buf_len)
        return RS_ERANGE;
    return RS_OK;
}

static rs_err check_seg_name(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n < 2 || n > 250 || name[0] != '/' || strchr(name + 1, '/') != NULL) {
        rs_log_error("segment name '%s': must be '/' then 1..249 bytes without '/'",
                     name ? name : "(null)");
        return RS_EINVAL;
    }
    return RS_OK;
}

static void read_boot_id(char out[40])
{
    memset(out, 0, 40);
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t r = read(fd, out, 39);
    close(fd);
    for (ssize_t i = 0; i < (r > 0 ? r : 0); i++)
        if (out[i] == '\n')
            out[i] = '\0';
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* --- layout ---------------------------------------------------------------- */

static uint64_t kind_memsize(const struct shm_region_dir *d, char *why, size_t len)
{
    const struct shm_kind *k = kind_of(d->kind);
    if (k != NULL)
        return k->memsize(d, why, len);
    shm_why(why, len, "region '%s': unknown kind %u", d->name, d->kind);
    return 0;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t layout_hash(const struct shm_region_dir *dirs, uint32_t n)
{
    uint64_t h = fnv1a(0xcbf29ce484222325ull, &n, sizeof(n));
    return fnv1a(h, dirs, n * sizeof(*dirs));
}

static int find_role_name(const struct rs_shm_region_spec *roles, const char *name)
{
    for (uint64_t i = 0; name != NULL && i < roles->count; i++)
        if (strcmp(roles->role_names[i], name) == 0)
            return (int)i;
    return -1;
}

/* Resolves a ring's producer/consumer role names into the directory entry. */
static rs_err spec_roles(const struct rs_shm_region_spec *s, const struct rs_shm_region_spec *roles,
                         struct shm_region_dir *d, char *why, size_t len)
{
    int p = find_role_name(roles, s->producer), c = find_role_name(roles, s->consumer);
    if (p < 0 || c < 0 || p == c)
        return shm_why(why, len, "ring '%s': producer '%s' and consumer '%s' must be two roles",
                       s->name, s->producer ? s->producer : "(null)",
                       s->consumer ? s->consumer : "(null)");
    d->prod_role = (uint32_t)p;
    d->cons_role = (uint32_t)c;
    return RS_OK;
}

static rs_err spec_to_dir(const struct rs_shm_region_spec *s, const struct rs_shm_region_spec *roles,
                          struct shm_region_dir *d, char *why, size_t len)
{
    memset(d, 0, sizeof(*d));
    size_t nl = s->name ? strlen(s->name) : 0;
    if (nl == 0 || nl > RS_SHM_REGION_NAME_MAX)
        return shm_why(why, len, "region name '%s' must be 1..%d bytes", s->name ? s->name : "",
                       RS_SHM_REGION_NAME_MAX);
    memcpy(d->name, s->name, nl);
    d->kind = (uint32_t)s->kind;
    d->count = s->count;
    d->elem_bytes = s->elem_bytes;
    d->flags = s->flags;
    d->start = s->start;
    d->size = s->kind == RS_SHM_RAW ? s->bytes : 0;
    if (s->kind == RS_SHM_RING)
        return spec_roles(s, roles, d, why, len);
    return RS_OK;
}

/* Finds the one ROLES spec; checks its names. */
static rs_err layout_roles(const struct rs_shm_region_spec *specs, size_t n,
                           const struct rs_shm_region_spec **roles, char *why, size_t len)
{
    *roles = NULL;
    for (size_t i = 0; i < n; i++) {
        if (specs[i].kind != RS_SHM_ROLES)
            continue;
        if (*roles != NULL)
            return shm_why(why, len, "layout has more than one roles region");
        *roles = &specs[i];
    }
    if (*roles == NULL)
        return shm_why(why, len, "layout has no roles region");
    const struct rs_shm_region_spec *r = *roles;
    if (r->count == 0 || r->count > RS_ROLE_MAX || r->role_names == NULL)
        return shm_why(why, len, "roles region '%s': count %llu not in 1..%d, names required",
                       r->name ? r->name : "", (unsigned long long)r->count, RS_ROLE_MAX);
    for (uint64_t i = 0; i < r->count; i++) {
        const char *nm = r->role_names[i];
        if (nm == NULL || nm[0] == '\0' || strlen(nm) > RS_ROLE_NAME_MAX)
            return shm_why(why, len, "role %llu: name must be 1..%d bytes", (unsigned long long)i,
                           RS_ROLE_NAME_MAX);
        if (find_role_name(r, nm) != (int)i)
            return shm_why(why, len, "role name '%s' appears twice", nm);
    }
    return RS_OK;
}

/* Computes the directory for `specs`; *total = segment bytes. */
static rs_err layout_build(const struct rs_shm_region_spec *specs, size_t n,
                           struct shm_region_dir *dirs, uint64_t *total, char *why, size_t len)
{
    const struct rs_shm_region_spec *roles;
    if (n == 0 || n > RS_SHM_MAX_REGIONS)
        return shm_why(why, len, "layout needs 1..%d regions (got %zu)", RS_SHM_MAX_REGIONS, n);
    rs_err e = layout_roles(specs, n, &roles, why, len);
    uint64_t off = SHM_HDR_BYTES;
    for (size_t i = 0; e == RS_OK && i < n; i++) {
        e = spec_to_dir(&specs[i], roles, &dirs[i], why, len);
        for (size_t j = 0; e == RS_OK && j < i; j++)
            if (strcmp(dirs[j].name, dirs[i].name) == 0)
                e = shm_why(why, len, "region name '%s' appears twice", dirs[i].name);
        uint64_t sz = e == RS_OK ? kind_memsize(&dirs[i], why, len) : 0;
        if (e == RS_OK && sz == 0)
            e = RS_EMISMATCH;
        dirs[i].offset = off;
        dirs[i].size = sz;
        off = shm_align(off + sz, SHM_PAGE);
        if (e == RS_OK && off > SHM_MAX_BYTES)
            e = shm_why(why, len, "layout exceeds 1 TiB at region '%s'", dirs[i].name);
    }
    *total = off;
    return e;
}

/* --- validation ------------------------------------------------------------- */

static rs_err validate_header(const struct shm_hdr *h, uint64_t size, char *why, size_t len)
{
    if (h->magic != RS_SHM_MAGIC)
        return shm_why(why, len, "bad magic 0x%016llx (0x%016llx expected): not a ringserve segment",
                       (unsigned long long)h->magic, (unsigned long long)RS_SHM_MAGIC);
    if (h->layout_version != RS_SHM_LAYOUT_VERSION)
        return shm_why(why, len,
                       "layout version %u in segment, %u expected by this build (re-create the "
                       "segment after an upgrade)",
                       h->layout_version, RS_SHM_LAYOUT_VERSION);
    if (h->hdr_bytes != SHM_HDR_BYTES)
        return shm_why(why, len, "header size %u in segment, %u expected", h->hdr_bytes,
                       SHM_HDR_BYTES);
    if (h->total_bytes != size)
        return shm_why(why, len, "segment size %llu bytes, header says %llu (truncated or resized)",
                       (unsigned long long)size, (unsigned long long)h->total_bytes);
    if (h->n_regions == 0 || h->n_regions > RS_SHM_MAX_REGIONS)
        return shm_why(why, len, "region count %u not in 1..%d", h->n_regions, RS_SHM_MAX_REGIONS);
    return RS_OK;
}

/* Directory entry i: name, kind, bounds and order; *n_roles from the roles entry. */
static rs_err validate_dir(const struct shm_hdr *h, uint32_t i, uint64_t *prev_end, char *why,
                           size_t len)
{
    const struct shm_region_dir *d = &h->regions[i];
    if (memchr(d->name, '\0', sizeof(d->name)) == NULL || d->name[0] == '\0')
        return shm_why(why, len, "region %u: name not NUL-terminated or empty", i);
    for (uint32_t j = 0; j < i; j++)
        if (strcmp(h->regions[j].name, d->name) == 0)
            return shm_why(why, len, "region '%s' appears twice", d->name);
    if (kind_of(d->kind) == NULL)
        return shm_why(why, len, "region '%s': unknown kind %u", d->name, d->kind);
    if (d->offset % SHM_PAGE != 0 || d->offset < *prev_end || d->size > h->total_bytes ||
        d->offset > h->total_bytes - d->size)
        return shm_why(why, len,
                       "region '%s': offset %llu size %llu outside the segment or overlapping",
                       d->name, (unsigned long long)d->offset, (unsigned long long)d->size);
    *prev_end = d->offset + d->size;
    char sub[160];
    uint64_t want = kind_memsize(d, sub, sizeof(sub));
    if (want == 0)
        return shm_why(why, len, "%s", sub);
    if (want != d->size)
        return shm_why(why, len, "region '%s' (%s): size %llu in segment, %llu from its parameters",
                       d->name, rs_shm_kind_name((enum rs_shm_kind)d->kind),
                       (unsigned long long)d->size, (unsigned long long)want);
    return RS_OK;
}

static rs_err validate_region(const uint8_t *base, const struct shm_region_dir *d, uint32_t n_roles,
                              char *why, size_t len)
{
    const struct shm_kind *k = kind_of(d->kind);
    return k->validate != NULL ? k->validate(base + d->offset, d, n_roles, why, len) : RS_OK;
}

/* Finds the single roles entry (validated) and returns its role count. */
static rs_err validate_roles_entry(const struct shm_hdr *h, uint32_t *n_roles, char *why, size_t len)
{
    int found = -1;
    for (uint32_t i = 0; i < h->n_regions; i++) {
        if (h->regions[i].kind != RS_SHM_ROLES)
            continue;
        if (found >= 0)
            return shm_why(why, len, "more than one roles region");
        found = (int)i;
    }
    if (found < 0)
        return shm_why(why, len, "no roles region");
    *n_roles = (uint32_t)h->regions[found].count;
    return RS_OK;
}

rs_err rs_shm_validate(const void *base, uint64_t size, char *why, size_t len)
{
    if (base == NULL || size < SHM_HDR_BYTES)
        return shm_why(why, len, "segment is %llu bytes, smaller than its %u-byte header",
                       (unsigned long long)size, SHM_HDR_BYTES);
    const struct shm_hdr *h = base;
    rs_err e = validate_header(h, size, why, len);
    uint64_t prev_end = SHM_HDR_BYTES;
    for (uint32_t i = 0; e == RS_OK && i < h->n_regions; i++)
        e = validate_dir(h, i, &prev_end, why, len);
    uint32_t n_roles = 0;
    if (e == RS_OK)
        e = validate_roles_entry(h, &n_roles, why, len);
    for (uint32_t i = 0; e == RS_OK && i < h->n_regions; i++)
        e = validate_region(base, &h->regions[i], n_roles, why, len);
    if (e == RS_OK && layout_hash(h->regions, h->n_regions) != h->layout_hash)
        e = shm_why(why, len, "layout hash does not match the region directory");
    return e;
}

/* Names the first difference between the segment's directory and `exp`. */
static rs_err compare_dir(const struct shm_region_dir *s, const struct shm_region_dir *x, char *why,
                          size_t len)
{
    const struct shm_kind *k = kind_of(x->kind);
    if (s->kind != x->kind)
        return shm_why(why, len, "region '%s': kind %s expected, %s in segment", x->name,
                       rs_shm_kind_name((enum rs_shm_kind)x->kind),
                       rs_shm_kind_name((enum rs_shm_kind)s->kind));
    const char *field = NULL;
    uint64_t sv = 0, xv = 0;
    if (s->count != x->count)
        field = k->count_name, sv = s->count, xv = x->count;
    else if (s->elem_bytes != x->elem_bytes)
        field = k->elem_name, sv = s->elem_bytes, xv = x->elem_bytes;
    else if (s->flags != x->flags)
        field = "flags", sv = s->flags, xv = x->flags;
    else if (s->start != x->start)
        field = "start", sv = s->start, xv = x->start;
    else if (s->prod_role != x->prod_role || s->cons_role != x->cons_role)
        field = "producer/consumer role", sv = s->prod_role * 1000ull + s->cons_role,
        xv = x->prod_role * 1000ull + x->cons_role;
    else if (s->size != x->size)
        field = "size", sv = s->size, xv = x->size;
    else if (s->offset != x->offset)
        field = "offset (region order)", sv = s->offset, xv = x->offset;
    if (field != NULL)
        return shm_why(why, len, "region '%s': %s %llu expected, %llu in segment", x->name, field,
                       (unsigned long long)xv, (unsigned long long)sv);
    return RS_OK;
}

static rs_err compare_layout(const struct shm_hdr *h, const struct rs_shm_region_spec *expect,
                             size_t n, char *why, size_t len)
{
    struct shm_region_dir exp[RS_SHM_MAX_REGIONS];
    uint64_t total;
    char sub[200];
    if (layout_build(expect, n, exp, &total, sub, sizeof(sub)) != RS_OK)
        return shm_why(why, len, "expected layout is invalid: %s", sub);
    for (size_t i = 0; i < n; i++) {
        const struct shm_region_dir *s = NULL;
        for (uint32_t j = 0; j < h->n_regions && s == NULL; j++)
            if (strcmp(h->regions[j].name, exp[i].name) == 0)
                s = &h->regions[j];
        if (s == NULL)
            return shm_why(why, len, "region '%s' expected, missing from segment", exp[i].name);
        rs_err e = compare_dir(s, &exp[i], why, len);
        if (e != RS_OK)
            return e;
    }
    if (h->n_regions != n)
        return shm_why(why, len, "segment has %u regions, %zu expected", h->n_regions, n);
    if (h->total_bytes != total)
        return shm_why(why, len, "segment size %llu expected, %llu in segment",
                       (unsigned long long)total, (unsigned long long)h->total_bytes);
    return RS_OK;
}

/* --- create / attach --------------------------------------------------------- */

static int lock_pages(void *base, uint64_t size, const char *name)
{
    /* The raw syscall: sanitizer runtimes intercept mlock() as a no-op that succeeds. */
    if (rs_sys.mlock(base, (size_t)size) == 0)
        return 1;
    int err = errno;
    struct rlimit rl = {0, 0};
    getrlimit(RLIMIT_MEMLOCK, &rl);
    char lim[32];
    if (rl.rlim_cur == RLIM_INFINITY)
        snprintf(lim, sizeof(lim), "unlimited");
    else
        snprintf(lim, sizeof(lim), "%llu bytes", (unsigned long long)rl.rlim_cur);
    rs_log_warn("segment %s: mlock of %llu bytes refused (%s); RLIMIT_MEMLOCK is %s, so its "
                "pages may be swapped out. Raise it with `ulimit -l unlimited`, "
                "LimitMEMLOCK=infinity in the systemd unit, or a memlock line in "
                "/etc/security/limits.conf",
                name, (unsigned long long)size, strerror(err), lim);
    return 0;
}

static rs_err reserve_space(int fd, uint64_t total, const char *name)
{
    int r = rs_sys.fallocate(fd, 0, 0, (off_t)total);
    if (r != 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) {
        r = rs_sys.ftruncate(fd, (off_t)total);
        if (r == 0)
            r = posix_fallocate(fd, 0, (off_t)total) == 0 ? 0 : -1;
    }
    if (r == 0)
        return RS_OK;
    int err = errno;
    struct statvfs sv;
    unsigned long long avail = 0;
    if (statvfs("/dev/shm", &sv) == 0)
        avail = (unsigned long long)sv.f_bavail * sv.f_frsize;
    if (err == ENOSPC || err == ENOMEM || err == EFBIG) {
        rs_log_error("segment %s: cannot reserve %llu bytes in /dev/shm (%s; %llu bytes free): "
                     "enlarge /dev/shm (mount -o remount,size=...) or shrink the rings",
                     name, (unsigned long long)total, strerror(err), avail);
        return RS_ENOMEM;
    }
    rs_log_error("segment %s: fallocate of %llu bytes: %s", name, (unsigned long long)total,
                 strerror(err));
    return RS_EIO;
}

static void init_regions(rs_shm *s, const struct rs_shm_region_spec *specs)
{
    struct shm_hdr *h = s->hdr;
    for (uint32_t i = 0; i < h->n_regions; i++) {
        const struct shm_region_dir *d = &h->regions[i];
        const struct shm_kind *k = kind_of(d->kind);
        if (k->init != NULL)
            k->init(s->base + d->offset, d, &specs[i]);
    }
}

static void set_roles(rs_shm *s)
{
    for (uint32_t i = 0; i < s->hdr->n_regions; i++) {
        if (s->hdr->regions[i].kind == RS_SHM_ROLES) {
            s->roles = s->base + s->hdr->regions[i].offset;
            s->n_roles = (uint32_t)s->hdr->regions[i].count;
        }
    }
}

static rs_err map_segment(rs_shm *s, int writable)
{
    int prot = PROT_READ | (writable ? PROT_WRITE : 0);
    void *p = rs_sys.mmap(NULL, s->size, prot, MAP_SHARED, s->fd, 0);
    if (p == MAP_FAILED) {
        rs_log_error("segment %s: mmap of %llu bytes: %s", s->name, (unsigned long long)s->size,
                     strerror(errno));
        return RS_EIO;
    }
    s->base = p;
    s->hdr = p;
    return RS_OK;
}

static rs_shm *handle_new(const char *name, int fd, uint64_t size, unsigned flags)
{
    rs_shm *s = rs_sys.calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->fd = fd;
    s->size = size;
    s->flags = flags;
    return s;
}

static void write_header(rs_shm *s, uint64_t epoch, const struct shm_region_dir *dirs, uint32_t n)
{
    struct shm_hdr *h = s->hdr;
    /* The creator first, the magic last: a starting stage that reads a magic without a
     * creator took the creation for a dead one and removed it under its creator. */
    h->creator_pid = (uint32_t)getpid();
    h->layout_version = RS_SHM_LAYOUT_VERSION;
    h->hdr_bytes = SHM_HDR_BYTES;
    h->total_bytes = s->size;
    h->epoch = epoch;
    h->created_ns = realtime_ns();
    h->n_regions = n;
    read_boot_id(h->boot_id);
    memcpy(h->regions, dirs, n * sizeof(*dirs));
    h->layout_hash = layout_hash(h->regions, n);
    atomic_store_explicit(&h->incarnation, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    h->magic = RS_SHM_MAGIC;
}

static rs_err create_fail(rs_shm *s, rs_err e)
{
    if (s->base != NULL)
        munmap(s->base, s->size);
    close(s->fd);
    shm_unlink(s->name);
    free(s);
    return e;
}

rs_err rs_shm_create(const char *name, uint64_t epoch, const struct rs_shm_region_spec *specs,
                     size_t n, rs_shm **out)
{
    *out = NULL;
    struct shm_region_dir dirs[RS_SHM_MAX_REGIONS];
    uint64_t total;
    char why[256];
    if (check_seg_name(name) != RS_OK)
        return RS_EINVAL;
    if (specs == NULL || layout_build(specs, n, dirs, &total, why, sizeof(why)) != RS_OK) {
        rs_log_error("segment %s: bad layout: %s", name, specs ? why : "no specs");
        return RS_EINVAL;
    }
    int fd = rs_sys.shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        int err = errno;
        rs_log_error("segment %s: create: %s%s", name, strerror(err),
                     err == EEXIST ? " (attach it, or remove it with `ringserve-shm rm`)" : "");
        return err == EEXIST ? RS_EEXIST : RS_EIO;
    }
    rs_shm *s = handle_new(name, fd, total, 0);
    if (s == NULL) {
        close(fd);
        shm_unlink(name);
        return RS_ENOMEM;
    }
    rs_err e = fchmod(fd, 0600) == 0 ? reserve_space(fd, total, name) : RS_EIO;
    if (e == RS_OK)
        e = map_segment(s, 1);
    if (e != RS_OK)
        return create_fail(s, e);
    s->locked = lock_pages(s->base, total, name);
    write_header(s, epoch, dirs, (uint32_t)n);
    init_regions(s, specs);
    set_roles(s);
    /* P0: publishes the formatted segment; pairs with C0 in rs_shm_attach. */
    atomic_store_explicit(&s->hdr->state, SHM_READY, memory_order_release);
    *out = s;
    return RS_OK;
}

/*
 * Only a segment of this service's own uid with no group or other bits may be
 * attached writable: another local user could have created the name first
 * (mode 0666) and would then read and write every prompt and output. The check
 * runs on the opened descriptor, so a file swapped in after it cannot slip by.
 */
static rs_err check_owner(const struct stat *st, unsigned flags, char *why, size_t len)
{
    if (flags & RS_SHM_INSPECT)
        return RS_OK; /* read-only views for tools; validation still bounds every read */
    if (st->st_uid != geteuid())
        return shm_why(why, len,
                       "owned by uid %u with mode %04o, not by this service (uid %u): another "
                       "user created it; it is left untouched, remove it as that user or root "
                       "after checking who made it",
                       (unsigned)st->st_uid, (unsigned)(st->st_mode & 07777), (unsigned)geteuid());
    if ((st->st_mode & 077) != 0)
        return shm_why(why, len,
                       "mode %04o (owner uid %u) gives group or other users access; segments "
                       "must be 0600: remove it and restart the instance",
                       (unsigned)(st->st_mode & 07777), (unsigned)st->st_uid);
    return RS_OK;
}

static rs_err open_existing(const char *name, unsigned flags, int *fd, uint64_t *size, char *why,
                            size_t len)
{
    /* glibc's shm_open adds O_NOFOLLOW: a symlink planted in /dev/shm is not followed. */
    *fd = shm_open(name, ((flags & RS_SHM_INSPECT) ? O_RDONLY : O_RDWR) | O_NOFOLLOW | O_CLOEXEC,
                   0);
    if (*fd < 0) {
        int err = errno;
        shm_why(why, len, "cannot open: %s%s", strerror(err),
                err == EACCES ? " (segments are mode 0600: run as the user that created it)" : "");
        return err == ENOENT ? RS_ENOENT : RS_EIO;
    }
    struct stat st;
    if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        shm_why(why, len, "fstat failed or not a regular file");
        close(*fd);
        return RS_EIO;
    }
    if (check_owner(&st, flags, why, len) != RS_OK) {
        close(*fd);
        return RS_EINVAL;
    }
    *size = (uint64_t)st.st_size;
    if (*size < SHM_HDR_BYTES || *size > SHM_MAX_BYTES) {
        shm_why(why, len, "segment is %llu bytes: not a ringserve segment (header is %u bytes)",
                (unsigned long long)*size, SHM_HDR_BYTES);
        close(*fd);
        return RS_EMISMATCH;
    }
    return RS_OK;
}

/* Checks readiness, image, boot id and expected layout of a mapped segment. */
static rs_err attach_checks(rs_shm *s, const struct rs_shm_region_spec *expect, size_t n_expect,
                            char *why, size_t len)
{
    int inspect = (s->flags & RS_SHM_INSPECT) != 0;
    /* C0: observes the creator's P0 publication before reading anything else. */
    uint32_t state = atomic_load_explicit(&s->hdr->state, memory_order_acquire);
    if (s->hdr->magic == RS_SHM_MAGIC && state != SHM_READY && !inspect) {
        shm_why(why, len, "creation not finished (or its creator died while creating it: remove "
                          "it with `ringserve-shm rm`)");
        return RS_EAGAIN;
    }
    rs_err e = rs_shm_validate(s->base, s->size, why, len);
    if (e != RS_OK)
        return e;
    char boot[40];
    read_boot_id(boot);
    if (!inspect && strncmp(boot, s->hdr->boot_id, sizeof(boot)) != 0) {
        shm_why(why, len, "created in an earlier boot (boot id %.36s, now %.36s): remove it and "
                          "create it anew",
                s->hdr->boot_id, boot);
        return RS_ESTALE;
    }
    if (expect != NULL)
        return compare_layout(s->hdr, expect, n_expect, why, len);
    return RS_OK;
}

rs_err rs_shm_attach(const char *name, const struct rs_shm_region_spec *expect, size_t n_expect,
                     unsigned flags, char *why, size_t why_len, rs_shm **out)
{
    char local[320];
    if (why == NULL || why_len == 0)
        why = local, why_len = sizeof(local);
    why[0] = '\0';
    *out = NULL;
    if (check_seg_name(name) != RS_OK) {
        shm_why(why, why_len, "bad segment name");
        return RS_EINVAL;
    }
    int fd;
    uint64_t size;
    rs_err e = open_existing(name, flags, &fd, &size, why, why_len);
    rs_shm *s = e == RS_OK ? handle_new(name, fd, size, flags) : NULL;
    if (e == RS_OK && s == NULL) {
        close(fd);
        e = RS_ENOMEM;
    }
    if (e == RS_OK)
        e = map_segment(s, !(flags & RS_SHM_INSPECT));
    if (e == RS_OK)
        e = attach_checks(s, expect, n_expect, why, why_len);
    if (e != RS_OK) {
        if (why[0] == '\0') /* a failed call logged its own line: name it here too */
            shm_why(why, why_len, "%s (logged above)", rs_strerror(e));
        rs_log_error("segment %s: attach refused: %s", name, why);
        rs_shm_detach(&s);
        return e;
    }
    set_roles(s);
    if (!(flags & RS_SHM_INSPECT))
        s->locked = lock_pages(s->base, s->size, name);
    *out = s;
    return RS_OK;
}

/* The header fields of info, from a header h of a segment of `size` bytes. */
static void info_from_header(const struct shm_hdr *h, uint64_t size, struct rs_shm_info *out)
{
    char boot[40];
    out->size = size;
    out->layout_version = h->layout_version;
    out->layout_hash = h->layout_hash;
    out->epoch = h->epoch;
    out->created_ns = h->created_ns;
    out->creator_pid = h->creator_pid;
    memcpy(out->boot_id, h->boot_id, sizeof(out->boot_id));
    out->boot_id[sizeof(out->boot_id) - 1] = '\0';
    read_boot_id(boot);
    out->stale_boot = strncmp(boot, h->boot_id, sizeof(boot)) != 0;
    out->ready = atomic_load_explicit(&h->state, memory_order_acquire) == SHM_READY;
    out->incarnations = atomic_load_explicit(&h->incarnation, memory_order_relaxed);
    out->n_regions = h->n_regions;
}

rs_err rs_shm_peek(const char *name, struct rs_shm_info *out)
{
    struct shm_hdr h;
    memset(out, 0, sizeof(*out));
    size_t n = name ? strlen(name) : 0;
    if (n < 2 || n > 250 || name[0] != '/' || strchr(name + 1, '/') != NULL)
        return RS_EINVAL;
    int fd = rs_sys.shm_open(name, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return errno == ENOENT ? RS_ENOENT : RS_EIO;
    struct stat st;
    rs_err rc = RS_OK;
    if (fstat(fd, &st) != 0)
        rc = RS_EIO;
    else if (!S_ISREG(st.st_mode))
        rc = RS_EMISMATCH;
    else if (st.st_size < (off_t)SHM_HDR_BYTES)
        rc = RS_EAGAIN; /* created, not sized yet */
    else if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
        rc = RS_EIO;
    else if (h.magic != RS_SHM_MAGIC)
        rc = h.magic == 0 ? RS_EAGAIN : RS_EMISMATCH; /* 0: sized, header not written yet */
    close(fd);
    if (rc != RS_OK)
        return rc;
    snprintf(out->name, sizeof(out->name), "%s", name);
    info_from_header(&h, (uint64_t)st.st_size, out);
    return RS_OK;
}

rs_err rs_shm_unlink(const char *name)
{
    if (check_seg_name(name) != RS_OK)
        return RS_EINVAL;
    if (shm_unlink(name) == 0)
        return RS_OK;
    int err = errno;
    rs_log_error("segment %s: unlink: %s", name, strerror(err));
    return err == ENOENT ? RS_ENOENT : RS_EIO;
}

/* --- accessors ----------------------------------------------------------------- */

#ifdef RS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

void rs_shm_detach(rs_shm **shm)
{
    if (shm == NULL || *shm == NULL)
        return;
    rs_shm *s = *shm;
#ifdef RS_HAVE_CUDA
    if (s->cuda_registered)
        cudaHostUnregister(s->base);
#endif
    if (s->base != NULL)
        munmap(s->base, s->size);
    if (s->fd >= 0)
        close(s->fd);
    free(s);
    *shm = NULL;
}

const struct shm_region_dir *shm_find(const rs_shm *shm, const char *name, enum rs_shm_kind kind)
{
    for (uint32_t i = 0; name != NULL && i < shm->hdr->n_regions; i++) {
        const struct shm_region_dir *d = &shm->hdr->regions[i];
        if (strcmp(d->name, name) != 0)
            continue;
        if (d->kind != (uint32_t)kind) {
            rs_log_error("segment %s: region '%s' is a %s, not a %s", shm->name, name,
                         rs_shm_kind_name((enum rs_shm_kind)d->kind), rs_shm_kind_name(kind));
            return NULL;
        }
        return d;
    }
    rs_log_error("segment %s: no region '%s'", shm->name, name ? name : "(null)");
    return NULL;
}

rs_err rs_shm_region(const rs_shm *shm, const char *name, enum rs_shm_kind kind, void **base,
                     uint64_t *size)
{
    const struct shm_region_dir *d = shm_find(shm, name, kind);
    if (d == NULL) {
        for (uint32_t i = 0; name != NULL && i < shm->hdr->n_regions; i++)
            if (strcmp(shm->hdr->regions[i].name, name) == 0)
                return RS_EMISMATCH;
        return RS_ENOENT;
    }
    *base = shm->base + d->offset;
    if (size != NULL)
        *size = d->size;
    return RS_OK;
}

rs_err rs_shm_region_at(const rs_shm *shm, uint32_t i, struct rs_shm_region_info *out)
{
    if (i >= shm->hdr->n_regions)
        return RS_ERANGE;
    const struct shm_region_dir *d = &shm->hdr->regions[i];
    memset(out, 0, sizeof(*out));
    memcpy(out->name, d->name, sizeof(out->name));
    out->name[RS_SHM_REGION_NAME_MAX] = '\0';
    out->kind = (enum rs_shm_kind)d->kind;
    out->offset = d->offset;
    out->size = d->size;
    out->count = d->count;
    out->elem_bytes = d->elem_bytes;
    out->flags = d->flags;
    out->start = d->start;
    out->producer_role = d->prod_role;
    out->consumer_role = d->cons_role;
    return RS_OK;
}

void rs_shm_get_info(const rs_shm *shm, struct rs_shm_info *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", shm->name);
    info_from_header(shm->hdr, shm->size, out);
    out->locked = shm->locked;
}

void *rs_shm_base(const rs_shm *shm)
{
    return shm->base;
}

rs_err rs_shm_incarnation_new(rs_shm *shm, uint32_t *inc)
{
    if (shm->flags & RS_SHM_INSPECT)
        return RS_EINVAL;
    uint64_t v = atomic_fetch_add_explicit(&shm->hdr->incarnation, 1, memory_order_acq_rel) + 1;
    if (v > UINT32_MAX) {
        rs_log_error("segment %s: incarnation space (2^32) spent: re-create the segment with a "
                     "new epoch",
                     shm->name);
        return RS_ERANGE;
    }
    *inc = (uint32_t)v;
    return RS_OK;
}

rs_err rs_shm_cuda_register(rs_shm *shm)
{
#ifdef RS_HAVE_CUDA
    if (shm->cuda_registered)
        return RS_OK;
    if ((shm->flags & RS_SHM_INSPECT) || shm->size == 0) {
        rs_log_error("segment %s: only a writable, non-empty mapping can be registered", shm->name);
        return RS_EINVAL;
    }
    int n = 0;
    cudaError_t ce = cudaGetDeviceCount(&n);
    if (ce != cudaSuccess || n == 0) {
        rs_log_info("segment %s: no CUDA device (%s): host registration skipped", shm->name,
                    ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
        cudaGetLastError(); /* clear the sticky-free error so later calls start clean */
        return RS_EUNSUPPORTED;
    }
    ce = cudaHostRegister(shm->base, shm->size, cudaHostRegisterPortable);
    if (ce != cudaSuccess) {
        rs_log_error("segment %s: cudaHostRegister of %llu bytes: %s", shm->name,
                     (unsigned long long)shm->size, cudaGetErrorString(ce));
        cudaGetLastError();
        return RS_EDEVICE;
    }
    shm->cuda_registered = 1;
    return RS_OK;
#else
    rs_log_debug("segment %s: built without CUDA: host registration skipped", shm->name);
    return RS_EUNSUPPORTED;
#endif
}

/* SPDX-License-Identifier: MIT */
/*
 * Segments: create/attach round trip over a real /dev/shm segment, every
 * refusal attach can give (magic, version, size, layout, boot, unfinished
 * creation) with a message naming the field, a full /dev/shm failing at
 * creation, a refused mlock being only a warning, incarnations, CUDA
 * registration's skip result, and the ringserve-shm tool.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/role.h"
#include "ipc/ring.h"
#include "ipc/shm.h"
#include "ipc/shm_impl.h"
#include "tests/rs_test.h"
#include "tests/unit/ipc_fixture.h"

#ifdef RS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static const char *const roles3[] = {"prod", "cons", "tool"};

/* A layout with one region of every kind. */
static void layout(struct rs_shm_region_spec *s, uint64_t ring_slots)
{
    memset(s, 0, 5 * sizeof(*s));
    s[0] = (struct rs_shm_region_spec){.name = "roles", .kind = RS_SHM_ROLES, .count = 3,
                                       .role_names = roles3};
    s[1] = (struct rs_shm_region_spec){.name = "batch_ring", .kind = RS_SHM_RING,
                                       .count = ring_slots, .elem_bytes = 4096,
                                       .flags = RS_RING_CRC, .producer = "prod",
                                       .consumer = "cons"};
    s[2] = (struct rs_shm_region_spec){.name = "requests", .kind = RS_SHM_TABLE, .count = 32,
                                       .elem_bytes = 1024};
    s[3] = (struct rs_shm_region_spec){.name = "tokens", .kind = RS_SHM_ARENA, .count = 64,
                                       .elem_bytes = 256};
    s[4] = (struct rs_shm_region_spec){.name = "metrics", .kind = RS_SHM_RAW, .bytes = 10000};
}

static int test_create_attach_round_trip(void)
{
    struct rs_shm_region_spec s[5];
    struct fx f;
    layout(s, 16);
    RS_CHECK(fx_create(&f, s, 5) == 0);
    char path[160], why[256];
    snprintf(path, sizeof(path), "/dev/shm%s", f.name);
    struct stat st;
    RS_CHECK(stat(path, &st) == 0);
    RS_CHECK_MSG((st.st_mode & 0777) == 0600, "mode %o", st.st_mode & 0777);
    RS_CHECK((uint64_t)st.st_blocks * 512 >= (uint64_t)st.st_size); /* fallocate reserved it */
    rs_shm *a;
    RS_CHECK_MSG(rs_shm_attach(f.name, s, 5, 0, why, sizeof(why), &a) == RS_OK, "%s", why);
    struct rs_shm_info info;
    rs_shm_get_info(a, &info);
    RS_CHECK(info.ready && !info.stale_boot && info.epoch == 1 && info.n_regions == 5);
    RS_CHECK(info.layout_version == RS_SHM_LAYOUT_VERSION && strlen(info.boot_id) == 36);
    RS_CHECK(info.size == (uint64_t)st.st_size);
    for (uint32_t i = 0; i < 5; i++) {
        struct rs_shm_region_info ri;
        RS_CHECK(rs_shm_region_at(a, i, &ri) == RS_OK);
        RS_CHECK(strcmp(ri.name, s[i].name) == 0 && ri.kind == s[i].kind);
        RS_CHECK(ri.offset % 4096 == 0 && ri.offset + ri.size <= info.size);
        void *base;
        uint64_t size;
        RS_CHECK(rs_shm_region(a, s[i].name, s[i].kind, &base, &size) == RS_OK);
        RS_CHECK((uint8_t *)base == (uint8_t *)rs_shm_base(a) + ri.offset && size == ri.size);
    }
    /* Both mappings see the same bytes. */
    void *m1, *m2;
    RS_CHECK(rs_shm_region(f.shm, "metrics", RS_SHM_RAW, &m1, NULL) == RS_OK);
    RS_CHECK(rs_shm_region(a, "metrics", RS_SHM_RAW, &m2, NULL) == RS_OK);
    memcpy(m1, "hello", 6);
    RS_CHECK(m1 != m2 && memcmp(m2, "hello", 6) == 0);
    rs_shm_detach(&a);
    RS_CHECK(a == NULL);
    fx_destroy(&f);
    RS_CHECK(access(path, F_OK) != 0);
    return 0;
}

static int test_region_lookup_names_kind_and_absence(void)
{
    struct rs_shm_region_spec s[5];
    struct fx f;
    layout(s, 16);
    RS_CHECK(fx_create(&f, s, 5) == 0);
    void *b;
    RS_CHECK(rs_shm_region(f.shm, "requests", RS_SHM_RING, &b, NULL) == RS_EMISMATCH);
    RS_CHECK(rs_shm_region(f.shm, "nope", RS_SHM_RING, &b, NULL) == RS_ENOENT);
    struct rs_shm_region_info ri;
    RS_CHECK(rs_shm_region_at(f.shm, 5, &ri) == RS_ERANGE);
    fx_destroy(&f);
    return 0;
}

static int test_create_existing_is_eexist(void)
{
    struct rs_shm_region_spec s[5];
    struct fx f;
    layout(s, 16);
    RS_CHECK(fx_create(&f, s, 5) == 0);
    rs_shm *b;
    RS_CHECK(rs_shm_create(f.name, 2, s, 5, &b) == RS_EEXIST && b == NULL);
    fx_destroy(&f);
    return 0;
}

static int test_attach_missing_is_enoent(void)
{
    rs_shm *a;
    char why[256];
    RS_CHECK(rs_shm_attach("/rs-ut-does-not-exist", NULL, 0, 0, why, sizeof(why), &a) ==
             RS_ENOENT);
    RS_CHECK(a == NULL && strstr(why, "No such file") != NULL);
    RS_CHECK(rs_shm_attach("no-slash", NULL, 0, 0, why, sizeof(why), &a) == RS_EINVAL);
    RS_CHECK(rs_shm_attach("/a/b", NULL, 0, 0, why, sizeof(why), &a) == RS_EINVAL);
    return 0;
}

/* Corrupts the live header through `patch`, then expects attach to fail with `code` naming `word`. */
static int attach_after_patch(void (*patch)(struct shm_hdr *, uint64_t size), rs_err code,
                              const char *word)
{
    struct rs_shm_region_spec s[5];
    struct fx f;
    layout(s, 16);
    RS_CHECK(fx_create(&f, s, 5) == 0);
    struct rs_shm_info info;
    rs_shm_get_info(f.shm, &info);
    patch(rs_shm_base(f.shm), info.size);
    rs_shm *a;
    char why[320];
    rs_err e = rs_shm_attach(f.name, s, 5, 0, why, sizeof(why), &a);
    RS_CHECK_MSG(e == code && a == NULL, "got %s: %s", rs_strerror(e), why);
    RS_CHECK_MSG(strstr(why, word) != NULL, "message '%s' lacks '%s'", why, word);
    fx_destroy(&f);
    return 0;
}

static void patch_magic(struct shm_hdr *h, uint64_t size)
{
    (void)size;
    h->magic ^= 1;
}

static void patch_version(struct shm_hdr *h, uint64_t size)
{
    (void)size;
    h->layout_version = RS_SHM_LAYOUT_VERSION + 1;
}

static void patch_boot(struct shm_hdr *h, uint64_t size)
{
    (void)size;
    memcpy(h->boot_id, "00000000-0000-0000-0000-000000000000", 36);
}

static void patch_unfinished(struct shm_hdr *h, uint64_t size)
{
    (void)size;
    atomic_store(&h->state, SHM_INITIALIZING);
}

static void patch_region_past_end(struct shm_hdr *h, uint64_t size)
{
    h->regions[4].offset = size; /* raw region now starts at the end */
}

static int test_attach_bad_magic_names_magic(void)
{
    return attach_after_patch(patch_magic, RS_EMISMATCH, "magic");
}

static int test_attach_bad_version_names_version(void)
{
    return attach_after_patch(patch_version, RS_EMISMATCH, "layout version");
}

static int test_attach_stale_boot_is_estale(void)
{
    return attach_after_patch(patch_boot, RS_ESTALE, "earlier boot");
}

static int test_attach_unfinished_creation_is_eagain(void)
{
    return attach_after_patch(patch_unfinished, RS_EAGAIN, "creation not finished");
}

static int test_attach_region_out_of_bounds_is_refused(void)
{
    return attach_after_patch(patch_region_past_end, RS_EMISMATCH, "metrics");
}

static int test_attach_truncated_segment_names_size(void)
{
    struct rs_shm_region_spec s[5];
    struct fx f;
    layout(s, 16);
    RS_CHECK(fx_create(&f, s, 5) == 0);
    struct rs_shm_info info;
    rs_shm_get_info(f.shm, &info);
    rs_shm_detach(&f.shm);
    int fd = shm_open(f.name, O_RDWR, 0);
    RS_CHECK(fd >= 0 && ftruncate(fd, (off_t)(info.size - 4096)) == 0);
    close(fd);
    rs_shm *a;
    char why[256];
    RS_CHECK(rs_shm_attach(f.name, NULL, 0, 0, why, sizeof(why), &a) == RS_EMISMATCH);
    RS_CHECK_MSG(strstr(why, "segment size") != NULL, "%s", why);
    fx_destroy(&f);
    return 0;
}

static int test_attach_layout_mismatch_names_region_and_field(void)
{
    struct rs_shm_region_spec s[5], other[5];
    struct fx f;
    layout(s, 16);
    layout(other, 32);
    RS_CHECK(fx_create(&f, s, 5) == 0);
    rs_shm *a;
    char why[256];
    RS_CHECK(rs_shm_attach(f.name, other, 5, 0, why, sizeof(why), &a) == RS_EMISMATCH);
    RS_CHECK_MSG(strstr(why, "batch_ring") && strstr(why, "slots 32 expected, 16"), "%s", why);
    other[1].count = 16;
    other[2].elem_bytes = 2048;
    RS_CHECK(rs_shm_attach(f.name, other, 5, 0, why, sizeof(why), &a) == RS_EMISMATCH);
    RS_CHECK_MSG(strstr(why, "requests") && strstr(why, "record bytes"), "%s", why);
    other[2].elem_bytes = 1024;
    other[3].kind = RS_SHM_RAW, other[3].bytes = 100, other[3].count = 0;
    RS_CHECK(rs_shm_attach(f.name, other, 5, 0, why, sizeof(why), &a) == RS_EMISMATCH);
    RS_CHECK_MSG(strstr(why, "tokens") && strstr(why, "kind raw expected"), "%s", why);
    other[3] = s[3];
    other[4].name = "metrics2";
    RS_CHECK(rs_shm_attach(f.name, other, 5, 0, why, sizeof(why), &a) == RS_EMISMATCH);
    RS_CHECK_MSG(strstr(why, "metrics2") && strstr(why, "missing"), "%s", why);
    RS_CHECK(rs_shm_attach(f.name, s, 4, 0, why, sizeof(why), &a) == RS_EMISMATCH);
    RS_CHECK_MSG(strstr(why, "5 regions, 4 expected"), "%s", why);
    RS_CHECK(rs_shm_attach(f.name, s, 5, 0, why, sizeof(why), &a) == RS_OK);
    rs_shm_detach(&a);
    fx_destroy(&f);
    return 0;
}

static int test_bad_layouts_are_refused_at_create(void)
{
    struct rs_shm_region_spec s[5];
    char name[96];
    rs_shm *shm;
    rs_test_unique_name("/rs-ut", name, sizeof(name));
    layout(s, 12); /* not a power of two */
    RS_CHECK(rs_shm_create(name, 1, s, 5, &shm) == RS_EINVAL);
    layout(s, 16);
    RS_CHECK(rs_shm_create(name, 1, s + 1, 4, &shm) == RS_EINVAL); /* no roles */
    s[1].consumer = "prod";
    RS_CHECK(rs_shm_create(name, 1, s, 5, &shm) == RS_EINVAL);
    s[1].consumer = "nobody";
    RS_CHECK(rs_shm_create(name, 1, s, 5, &shm) == RS_EINVAL);
    layout(s, 16);
    s[4].name = "requests";
    RS_CHECK(rs_shm_create(name, 1, s, 5, &shm) == RS_EINVAL);
    layout(s, 16);
    s[3].elem_bytes = 0;
    RS_CHECK(rs_shm_create(name, 1, s, 5, &shm) == RS_EINVAL);
    layout(s, 16);
    s[4].name = "a-name-much-longer-than-31-bytes-for-sure";
    RS_CHECK(rs_shm_create(name, 1, s, 5, &shm) == RS_EINVAL);
    RS_CHECK(shm_open(name, O_RDONLY, 0) < 0 && errno == ENOENT); /* nothing left behind */
    return 0;
}

static int test_full_devshm_fails_at_create(void)
{
    struct statvfs sv;
    RS_CHECK(statvfs("/dev/shm", &sv) == 0);
    uint64_t total = (uint64_t)sv.f_blocks * sv.f_frsize, avail = (uint64_t)sv.f_bavail * sv.f_frsize;
    /* Larger than all of /dev/shm, so tmpfs refuses at once without filling memory. */
    uint64_t want = (total > avail ? total : avail) + (1ull << 30);
    struct rs_shm_region_spec s[2] = {
        {.name = "roles", .kind = RS_SHM_ROLES, .count = 3, .role_names = roles3},
        {.name = "huge", .kind = RS_SHM_RAW, .bytes = want},
    };
    char name[96];
    rs_shm *shm;
    rs_test_unique_name("/rs-ut", name, sizeof(name));
    rs_err e = rs_shm_create(name, 1, s, 2, &shm);
    RS_CHECK_MSG(e == RS_ENOMEM, "create of %llu bytes: %s", (unsigned long long)want,
                 rs_strerror(e));
    RS_CHECK(shm == NULL && shm_open(name, O_RDONLY, 0) < 0); /* removed again */
    return 0;
}

/* Child: without CAP_IPC_LOCK and with RLIMIT_MEMLOCK 0, creation must still succeed. */
static int mlock_child(void *arg)
{
    const char *name = arg;
    struct rlimit rl = {0, 0};
    if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0)
        return 10;
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
        return 11; /* root ignores the limit; drop to nobody */
    struct rs_shm_region_spec s[5];
    layout(s, 16);
    rs_shm *shm;
    if (rs_shm_create(name, 1, s, 5, &shm) != RS_OK)
        return 12;
    struct rs_shm_info info;
    rs_shm_get_info(shm, &info);
    int rc = info.locked ? 13 : 0;
    rs_shm_detach(&shm);
    return rc;
}

static int test_mlock_refusal_is_a_warning(void)
{
    char name[96], log[4096];
    rs_test_unique_name("/rs-ut", name, sizeof(name));
    int pfd[2];
    RS_CHECK(pipe(pfd) == 0);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pfd[1], 2);
        close(pfd[0]);
        _exit(mlock_child(name));
    }
    close(pfd[1]);
    ssize_t n, got = 0;
    while ((n = read(pfd[0], log + got, sizeof(log) - 1 - (size_t)got)) > 0)
        got += n;
    log[got] = '\0';
    close(pfd[0]);
    int rc = fx_wait(pid);
    rs_shm_unlink(name);
    RS_CHECK_MSG(rc == 0, "child exit %d, log: %s", rc, log);
    RS_CHECK_MSG(strstr(log, "WARN") && strstr(log, "RLIMIT_MEMLOCK is 0 bytes") &&
                     strstr(log, "ulimit -l"),
                 "log: %s", log);
    return 0;
}

static int test_incarnations_unique_nonzero_and_bounded(void)
{
    struct rs_shm_region_spec s[5];
    struct fx f;
    layout(s, 16);
    RS_CHECK(fx_create(&f, s, 5) == 0);
    uint32_t a, b, c;
    RS_CHECK(rs_shm_incarnation_new(f.shm, &a) == RS_OK && a == 1);
    RS_CHECK(rs_shm_incarnation_new(f.shm, &b) == RS_OK && b == 2);
    struct shm_hdr *h = rs_shm_base(f.shm);
    atomic_store(&h->incarnation, UINT32_MAX - 1);
    RS_CHECK(rs_shm_incarnation_new(f.shm, &c) == RS_OK && c == UINT32_MAX);
    RS_CHECK(rs_shm_incarnation_new(f.shm, &c) == RS_ERANGE);
    fx_destroy(&f);
    return 0;
}

static int test_validate_rejects_corrupt_images(void)
{
    struct rs_shm_region_spec s[5];
    struct fx f;
    layout(s, 16);
    RS_CHECK(fx_create(&f, s, 5) == 0);
    struct rs_shm_info info;
    rs_shm_get_info(f.shm, &info);
    uint8_t *img = aligned_alloc(4096, info.size);
    char why[256];
    RS_CHECK(img != NULL);
    memcpy(img, rs_shm_base(f.shm), info.size);
    RS_CHECK(rs_shm_validate(img, info.size, why, sizeof(why)) == RS_OK);
    RS_CHECK(rs_shm_validate(img, info.size - 4096, why, sizeof(why)) == RS_EMISMATCH);
    struct shm_hdr *h = (struct shm_hdr *)img;
    h->regions[2].offset += 4096; /* overlaps the next region, hash no longer matches */
    RS_CHECK(rs_shm_validate(img, info.size, why, sizeof(why)) == RS_EMISMATCH);
    memcpy(img, rs_shm_base(f.shm), info.size);
    memset(h->regions[0].name, 'x', sizeof(h->regions[0].name));
    RS_CHECK(rs_shm_validate(img, info.size, why, sizeof(why)) == RS_EMISMATCH);
    RS_CHECK_MSG(strstr(why, "NUL") != NULL, "%s", why);
    memcpy(img, rs_shm_base(f.shm), info.size);
    h->layout_hash ^= 1;
    RS_CHECK(rs_shm_validate(img, info.size, why, sizeof(why)) == RS_EMISMATCH);
    memcpy(img, rs_shm_base(f.shm), info.size);
    *(uint32_t *)(img + h->regions[1].offset + 4) = 8; /* ring header's slot count */
    RS_CHECK(rs_shm_validate(img, info.size, why, sizeof(why)) == RS_EMISMATCH);
    RS_CHECK_MSG(strstr(why, "batch_ring") != NULL, "%s", why);
    free(img);
    fx_destroy(&f);
    return 0;
}

static int test_name_builder_checks_instance(void)
{
    char buf[64];
    RS_CHECK(rs_shm_name("llama-7b_0.1", buf, sizeof(buf)) == RS_OK);
    RS_CHECK(strcmp(buf, "/ringserve-llama-7b_0.1") == 0);
    RS_CHECK(rs_shm_name("a/b", buf, sizeof(buf)) == RS_EINVAL);
    RS_CHECK(rs_shm_name("", buf, sizeof(buf)) == RS_EINVAL);
    RS_CHECK(rs_shm_name("abcdef", buf, 8) == RS_ERANGE);
    return 0;
}

static int test_cuda_register_skips_without_device(void)
{
    struct rs_shm_region_spec s[5];
    struct fx f;
    layout(s, 16);
    RS_CHECK(fx_create(&f, s, 5) == 0);
    rs_err e = rs_shm_cuda_register(f.shm);
#ifdef RS_HAVE_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
        n = 0;
    RS_CHECK_MSG(e == (n > 0 ? RS_OK : RS_EUNSUPPORTED), "%d devices: %s", n, rs_strerror(e));
    if (n > 0)
        RS_CHECK(rs_shm_cuda_register(f.shm) == RS_OK); /* once per mapping */
#else
    RS_CHECK_MSG(e == RS_EUNSUPPORTED, "%s", rs_strerror(e));
#endif
    fx_destroy(&f);
    return 0;
}

/* Runs the tool; returns its exit code and its output in out. */
static int run_tool(const char *args, char *out, size_t len)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "'%s/ringserve-shm' %s 2>&1", rs_test_bindir(), args);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return -1;
    size_t got = fread(out, 1, len - 1, p);
    out[got] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int test_tool_lists_shows_and_removes(void)
{
    static char out[65536];
    char args[256];
    struct rs_shm_region_spec s[5];
    struct fx f;
    layout(s, 16);
    RS_CHECK(fx_create(&f, s, 5) == 0);
    rs_role *role;
    RS_CHECK(rs_role_start(f.shm, "prod", &role) == RS_OK && rs_role_ready(role) == RS_OK);
    RS_CHECK(run_tool("list", out, sizeof(out)) == 0);
    RS_CHECK_MSG(strstr(out, f.name + 1) != NULL, "list output lacks %s:\n%s", f.name, out);
    snprintf(args, sizeof(args), "show %s", f.name + 1);
    RS_CHECK(run_tool(args, out, sizeof(out)) == 0);
    RS_CHECK_MSG(strstr(out, "batch_ring") && strstr(out, "requests") && strstr(out, "tokens") &&
                     strstr(out, "metrics") && strstr(out, "prod") && strstr(out, "READY") &&
                     strstr(out, "FREE"),
                 "show output:\n%s", out);
    snprintf(args, sizeof(args), "rm %s", f.name);
    RS_CHECK(run_tool(args, out, sizeof(out)) == 0);
    RS_CHECK(run_tool(args, out, sizeof(out)) != 0 && strstr(out, "No such"));
    RS_CHECK(run_tool("show /rs-ut-none", out, sizeof(out)) != 0);
    RS_CHECK(run_tool("", out, sizeof(out)) == 2 && strstr(out, "usage"));
    RS_CHECK(run_tool("frobnicate", out, sizeof(out)) == 2 && strstr(out, "unknown command"));
    RS_CHECK(run_tool("show", out, sizeof(out)) == 2);
    RS_CHECK(run_tool("rm a b", out, sizeof(out)) == 2);
    rs_role_stop(&role);
    rs_shm_detach(&f.shm);
    return 0;
}

static int test_tool_refuses_foreign_files(void)
{
    char out[4096], name[96], args[160];
    rs_test_unique_name("/rs-ut-foreign", name, sizeof(name));
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    RS_CHECK(fd >= 0 && ftruncate(fd, 8192) == 0);
    close(fd);
    snprintf(args, sizeof(args), "rm %s", name);
    RS_CHECK(run_tool(args, out, sizeof(out)) == 1 && strstr(out, "magic"));
    snprintf(args, sizeof(args), "show %s", name);
    RS_CHECK(run_tool(args, out, sizeof(out)) == 1 && strstr(out, "magic"));
    RS_CHECK(shm_unlink(name) == 0);
    return 0;
}

/* rs_shm_peek tells ours from young and foreign segments without mapping anything. */
static int test_peek_reads_the_header_without_attaching(void)
{
    struct rs_shm_region_spec s[5];
    struct fx f;
    struct rs_shm_info want, got;
    layout(s, 16);
    RS_CHECK(fx_create(&f, s, 5) == 0);
    rs_shm_get_info(f.shm, &want);
    RS_CHECK(rs_shm_peek(f.name, &got) == RS_OK);
    RS_CHECK(strcmp(got.name, f.name) == 0 && got.size == want.size && got.ready);
    RS_CHECK(got.epoch == want.epoch && got.layout_hash == want.layout_hash && !got.stale_boot);
    RS_CHECK(got.n_regions == 5 && strcmp(got.boot_id, want.boot_id) == 0 && !got.locked);
    atomic_store(&((struct shm_hdr *)rs_shm_base(f.shm))->state, SHM_INITIALIZING);
    RS_CHECK(rs_shm_peek(f.name, &got) == RS_OK && !got.ready);
    fx_destroy(&f);
    RS_CHECK(rs_shm_peek(f.name, &got) == RS_ENOENT);
    char name[96];
    rs_test_unique_name("/rs-ut-peek", name, sizeof(name));
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    RS_CHECK(fd >= 0);
    RS_CHECK(rs_shm_peek(name, &got) == RS_EAGAIN); /* created, not sized */
    RS_CHECK(ftruncate(fd, 8192) == 0);
    RS_CHECK(rs_shm_peek(name, &got) == RS_EAGAIN); /* sized, no magic yet */
    RS_CHECK(pwrite(fd, "not-ours", 8, 0) == 8);
    RS_CHECK(rs_shm_peek(name, &got) == RS_EMISMATCH);
    close(fd);
    RS_CHECK(shm_unlink(name) == 0);
    RS_CHECK(rs_shm_peek("no-slash", &got) == RS_EINVAL);
    return 0;
}


/* A valid segment is kept; one whose creator died before publishing it is removed. */
static int test_reclaim_keeps_valid_and_removes_dead_creation(void)
{
    struct rs_shm_region_spec s[5];
    struct fx f;
    layout(s, 16);
    RS_CHECK(fx_create(&f, s, 5) == 0);
    RS_CHECK(rs_shm_reclaim(f.name) == RS_EEXIST);
    struct shm_hdr *h = rs_shm_base(f.shm);
    atomic_store(&h->state, SHM_INITIALIZING);
    RS_CHECK(rs_shm_reclaim(f.name) == RS_EEXIST); /* its creator (this process) lives */
    /* A header read while its creator is still writing it: no creator yet, and young. */
    uint32_t mine = h->creator_pid;
    h->creator_pid = 0;
    RS_CHECK(rs_shm_reclaim(f.name) == RS_EEXIST);
    h->creator_pid = mine;
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    RS_CHECK(pid > 0 && waitpid(pid, NULL, 0) == pid);
    h->creator_pid = (uint32_t)pid;
    RS_CHECK(rs_shm_reclaim(f.name) == RS_OK);
    RS_CHECK(rs_shm_reclaim(f.name) == RS_ENOENT);
    fx_destroy(&f);
    return 0;
}

/* Our own segment with group or other bits is not attached writable; inspection still is. */
static int test_attach_refuses_group_or_other_mode(void)
{
    struct rs_shm_region_spec s[5];
    struct fx f;
    layout(s, 16);
    RS_CHECK(fx_create(&f, s, 5) == 0);
    int fd = shm_open(f.name, O_RDWR, 0);
    RS_CHECK(fd >= 0 && fchmod(fd, 0640) == 0);
    close(fd);
    rs_shm *a;
    char why[320];
    RS_CHECK(rs_shm_attach(f.name, s, 5, 0, why, sizeof(why), &a) == RS_EINVAL && a == NULL);
    RS_CHECK_MSG(strstr(why, "0640") != NULL && strstr(why, "uid") != NULL, "%s", why);
    RS_CHECK(rs_shm_attach(f.name, s, 5, RS_SHM_INSPECT, why, sizeof(why), &a) == RS_OK);
    rs_shm_detach(&a);
    fx_destroy(&f);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_reclaim_keeps_valid_and_removes_dead_creation),
    RS_TEST(test_attach_refuses_group_or_other_mode),
    RS_TEST(test_peek_reads_the_header_without_attaching),
    RS_TEST(test_create_attach_round_trip),
    RS_TEST(test_region_lookup_names_kind_and_absence),
    RS_TEST(test_create_existing_is_eexist),
    RS_TEST(test_attach_missing_is_enoent),
    RS_TEST(test_attach_bad_magic_names_magic),
    RS_TEST(test_attach_bad_version_names_version),
    RS_TEST(test_attach_stale_boot_is_estale),
    RS_TEST(test_attach_unfinished_creation_is_eagain),
    RS_TEST(test_attach_region_out_of_bounds_is_refused),
    RS_TEST(test_attach_truncated_segment_names_size),
    RS_TEST(test_attach_layout_mismatch_names_region_and_field),
    RS_TEST(test_bad_layouts_are_refused_at_create),
    RS_TEST(test_full_devshm_fails_at_create),
    RS_TEST(test_mlock_refusal_is_a_warning),
    RS_TEST(test_incarnations_unique_nonzero_and_bounded),
    RS_TEST(test_validate_rejects_corrupt_images),
    RS_TEST(test_name_builder_checks_instance),
    RS_TEST(test_cuda_register_skips_without_device),
    RS_TEST(test_tool_lists_shows_and_removes),
    RS_TEST(test_tool_refuses_foreign_files),
};

RS_TEST_MAIN(cases)

/* SPDX-License-Identifier: MIT */
/*
 * Opening a pipeline instance: the region layout computed from the
 * configuration, open-or-create of the segment, publishing and checking the
 * configuration, starting the stage's role and recovering the structures it
 * touches. The records each region holds have their own headers (pipeline.h
 * lists them).
 */
#include "ipc/failpoint_sys.h"
#include "ipc/pipeline.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/pipeline_batch.h"
#include "ipc/pipeline_constraint.h"
#include "ipc/pipeline_kv.h"
#include "ipc/pipeline_logprob.h"
#include "ipc/pipeline_mask.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "ipc/pipeline_result.h"

#define CFG_UNSET 0u
#define CFG_WRITING 1u
#define CFG_READY 2u
#define N_REGIONS 12

static const char *const role_names[] = {RS_PIPE_TOKENIZERD, RS_PIPE_SCHEDULERD,
                                         RS_PIPE_LAUNCHERD, RS_PIPE_POSTPROCD, "bench", "tool"};

static uint64_t kvrow_bytes(const struct rs_pipe_config *c)
{
    uint64_t b = sizeof(struct rs_pipe_kvrow) + (uint64_t)c->max_blocks_per_seq * 4u;
    return (b + 63u) & ~63ull;
}

uint64_t rs_pipe_token_list_bytes(const struct rs_pipe_config *c)
{
    return rs_arena_list_bytes(c->n_ctx, c->chunk_tokens);
}

/* Most logprob words one request can need: every position an output, 20 alternatives. */
static uint64_t lp_max_words(const struct rs_pipe_config *c)
{
    return (uint64_t)c->n_ctx * rs_pipe_lp_entry_words(RS_PIPE_LP_MAX_TOP);
}

uint64_t rs_pipe_lp_list_bytes(const struct rs_pipe_config *c)
{
    return rs_arena_list_bytes(lp_max_words(c), RS_PIPE_LP_CHUNK_WORDS);
}

uint64_t rs_pipe_lp_list_offset(const struct rs_pipe_config *c)
{
    return RS_PIPE_REQ_LIST_OFFSET + rs_pipe_token_list_bytes(c);
}

/* Logprob chunks: every request at its worst, capped at RS_PIPE_LP_POOL_BYTES unless one
 * request alone needs more. */
static uint32_t lp_chunks(const struct rs_pipe_config *c)
{
    uint64_t per_req = (lp_max_words(c) + RS_PIPE_LP_CHUNK_WORDS - 1) / RS_PIPE_LP_CHUNK_WORDS;
    uint64_t cap = RS_PIPE_LP_POOL_BYTES / (RS_PIPE_LP_CHUNK_WORDS * sizeof(int32_t));
    uint64_t want = per_req * c->max_requests;
    if (want > cap)
        want = cap > per_req ? cap : per_req;
    return (uint32_t)want;
}

uint32_t rs_pipe_lp_pool_chunks(const struct rs_pipe_config *c)
{
    return lp_chunks(c);
}

/* The regions of an instance; identical in every process for the same cfg. */
static void layout(const struct rs_pipe_config *c, struct rs_shm_region_spec s[N_REGIONS])
{
    memset(s, 0, sizeof(struct rs_shm_region_spec) * N_REGIONS);
    s[0] = (struct rs_shm_region_spec){.name = "roles", .kind = RS_SHM_ROLES,
                                       .count = sizeof(role_names) / sizeof(role_names[0]),
                                       .role_names = role_names};
    s[1] = (struct rs_shm_region_spec){.name = "config", .kind = RS_SHM_RAW,
                                       .bytes = sizeof(struct rs_pipe_shared)};
    s[2] = (struct rs_shm_region_spec){
        .name = "requests", .kind = RS_SHM_TABLE, .count = c->max_requests,
        .elem_bytes = rs_pipe_cx_list_offset(c) + rs_pipe_cx_list_bytes(c)};
    s[3] = (struct rs_shm_region_spec){.name = "tokens", .kind = RS_SHM_ARENA,
                                       .count = c->n_chunks, .elem_bytes = c->chunk_tokens};
    s[4] = (struct rs_shm_region_spec){
        .name = "batches", .kind = RS_SHM_RING, .count = c->batch_slots,
        .elem_bytes = rs_pipe_batch_bytes(c->max_seqs, c->max_batched_tokens),
        .flags = RS_RING_CRC, .producer = RS_PIPE_SCHEDULERD, .consumer = RS_PIPE_LAUNCHERD};
    s[5] = (struct rs_shm_region_spec){
        .name = "results", .kind = RS_SHM_RING, .count = c->batch_slots,
        .elem_bytes = rs_pipe_result_bytes(c->max_seqs),
        .flags = RS_RING_CRC, .producer = RS_PIPE_LAUNCHERD, .consumer = RS_PIPE_SCHEDULERD};
    s[6] = (struct rs_shm_region_spec){.name = "kv_tables", .kind = RS_SHM_RAW,
                                       .bytes = (uint64_t)c->max_seqs * kvrow_bytes(c)};
    s[7] = (struct rs_shm_region_spec){.name = "kv_meta", .kind = RS_SHM_RAW,
                                       .bytes = (uint64_t)c->n_kv_blocks *
                                                sizeof(struct rs_pipe_kvmeta)};
    s[8] = (struct rs_shm_region_spec){.name = "metrics", .kind = RS_SHM_RAW,
                                       .bytes = sizeof(struct rs_metrics_region)};
    s[9] = (struct rs_shm_region_spec){.name = "logprobs", .kind = RS_SHM_ARENA,
                                       .count = lp_chunks(c), .elem_bytes = RS_PIPE_LP_CHUNK_WORDS};
    s[10] = (struct rs_shm_region_spec){.name = "constraints", .kind = RS_SHM_ARENA,
                                        .count = rs_pipe_cx_chunks(c),
                                        .elem_bytes = RS_PIPE_CX_CHUNK_WORDS};
    s[11] = (struct rs_shm_region_spec){.name = "masks", .kind = RS_SHM_RAW,
                                        .bytes = rs_pipe_mask_region_bytes(c)};
}

/*
 * 1 when segment `name` exists but is not formatted yet: another daemon of the instance has
 * shm_open'ed it and not yet sized it or written its header. Attaching then fails as if the
 * segment were malformed; it is only young (four daemons started at once hit this window).
 */
static int segment_unformatted(const char *name, int *absent)
{
    struct rs_shm_info info;
    rs_err rc = rs_shm_peek(name, &info);
    *absent = rc == RS_ENOENT;
    return rc == RS_EAGAIN;
}

/* Attaches, or creates when absent; a segment from an earlier boot, or one of our own that
 * holds no usable image, is replaced; one of another owner is refused untouched. */
static rs_err attach_or_create(const char *name, const struct rs_shm_region_spec *specs,
                               rs_shm **shm, char *err, size_t err_len)
{
    for (int attempt = 0; attempt < 500; attempt++) {
        int absent;
        if (segment_unformatted(name, &absent)) {
            /* Once a second: one left unformatted by a dead creator is replaced. */
            if (attempt % 100 == 99)
                rs_shm_reclaim(name);
            usleep(10000);
            continue;
        }
        /* Skipping the attach when there is nothing to attach keeps the log free of a
         * refusal that is the normal first start. */
        rs_err rc = absent ? RS_ENOENT
                           : rs_shm_attach(name, specs, N_REGIONS, 0, err, err_len, shm);
        if (rc == RS_OK)
            return RS_OK;
        if (rc == RS_ESTALE) {
            rs_log_warn("segment %s was created before this boot: removing it", name);
            rs_shm_unlink(name);
            continue;
        }
        if (rc == RS_ENOENT) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t epoch = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
            rc = rs_shm_create(name, epoch, specs, N_REGIONS, shm);
            if (rc == RS_OK) {
                rs_log_info("created segment %s (epoch %llu)", name, (unsigned long long)epoch);
                return RS_OK;
            }
            if (rc != RS_EEXIST) {
                snprintf(err, err_len, "cannot create segment %s: %s (see the log above)", name,
                         rs_strerror(rc));
                return rc;
            }
        } else if (rc == RS_EMISMATCH || rc == RS_EAGAIN) {
            /* Ours and unusable (garbage, corrupt, creator died): replace it. A valid
             * segment of another configuration stays and is refused below. */
            rs_err rr = rs_shm_reclaim(name);
            if (rr == RS_OK || rr == RS_EAGAIN)
                continue;
            if (rc == RS_EMISMATCH && !segment_unformatted(name, &absent))
                return rc;
        } else {
            return rc;
        }
        usleep(10000);
    }
    snprintf(err, err_len, "segment %s: creation did not finish within 5 s", name);
    return RS_EAGAIN;
}

/* Field-by-field comparison naming the first difference. */
static rs_err config_compare(const struct rs_pipe_config *seg, const struct rs_pipe_config *mine,
                             char *err, size_t err_len)
{
#define CMP_U(f)                                                                                   \
    if (seg->f != mine->f) {                                                                       \
        snprintf(err, err_len, "configuration differs from the running instance: " #f            \
                 " is %llu there, %llu here", (unsigned long long)seg->f,                          \
                 (unsigned long long)mine->f);                                                     \
        return RS_EMISMATCH;                                                                       \
    }
    if (strcmp(seg->model_path, mine->model_path) != 0) {
        snprintf(err, err_len, "configuration differs from the running instance: model is %s "
                 "there, %s here", seg->model_path, mine->model_path);
        return RS_EMISMATCH;
    }
    CMP_U(model_bytes) CMP_U(n_vocab) CMP_U(n_ctx) CMP_U(block_size) CMP_U(n_kv_blocks)
    CMP_U(max_requests) CMP_U(max_seqs) CMP_U(max_batched_tokens) CMP_U(chunk_tokens)
    CMP_U(n_chunks) CMP_U(batch_slots) CMP_U(prefix_caching) CMP_U(priority_policy)
    CMP_U(max_blocks_per_seq)
#undef CMP_U
    return RS_OK;
}

/* Writes the configuration if nobody has, else waits for it; then compares. */
static rs_err config_publish(struct rs_pipe_shared *sh, const struct rs_pipe_config *cfg,
                             char *err, size_t err_len)
{
    uint64_t mine = (uint64_t)getpid() << 32 | CFG_WRITING;
    for (int waited_ms = 0; waited_ms < 5000; waited_ms++) {
        uint64_t w = atomic_load_explicit(&sh->cfg_word, memory_order_acquire);
        if ((w & 0xffffffffu) == CFG_READY)
            return config_compare(&sh->cfg, cfg, err, err_len);
        pid_t writer = (pid_t)(w >> 32);
        int writer_dead = w != CFG_UNSET && kill(writer, 0) != 0 && errno == ESRCH;
        if (w == CFG_UNSET || writer_dead) {
            if (atomic_compare_exchange_strong_explicit(&sh->cfg_word, &w, mine,
                                                        memory_order_acq_rel,
                                                        memory_order_acquire)) {
                sh->cfg = *cfg;
                atomic_store_explicit(&sh->cfg_word, CFG_READY, memory_order_release);
                return RS_OK;
            }
            continue;
        }
        usleep(1000);
    }
    snprintf(err, err_len, "the segment's configuration was never published (writer stuck?)");
    return RS_EAGAIN;
}

static rs_err open_regions(struct rs_pipe *p, rs_role *self, char *err, size_t err_len)
{
    void *base;
    uint64_t size;
    rs_err rc = rs_shm_region(p->shm, "config", RS_SHM_RAW, &base, &size);
    if (rc != RS_OK)
        goto fail;
    p->shared = base;
    if ((rc = rs_table_open(p->shm, "requests", self, &p->requests)) != RS_OK ||
        (rc = rs_arena_open_sized(p->shm, "tokens", self, p->requests, RS_PIPE_REQ_LIST_OFFSET,
                                  rs_pipe_token_list_bytes(&p->cfg), &p->tokens)) != RS_OK ||
        (rc = rs_arena_open_sized(p->shm, "logprobs", self, p->requests,
                                  rs_pipe_lp_list_offset(&p->cfg), rs_pipe_lp_list_bytes(&p->cfg),
                                  &p->logprobs)) != RS_OK ||
        (rc = rs_arena_open_sized(p->shm, "constraints", self, p->requests,
                                  rs_pipe_cx_list_offset(&p->cfg), rs_pipe_cx_list_bytes(&p->cfg),
                                  &p->constraints)) != RS_OK)
        goto fail;
    if ((rc = rs_shm_region(p->shm, "masks", RS_SHM_RAW, &base, &size)) != RS_OK)
        goto fail;
    p->masks = base;
    if ((rc = rs_shm_region(p->shm, "kv_tables", RS_SHM_RAW, &base, &size)) != RS_OK)
        goto fail;
    p->kv_rows = base;
    p->kvrow_bytes = kvrow_bytes(&p->cfg);
    if ((rc = rs_shm_region(p->shm, "kv_meta", RS_SHM_RAW, &base, &size)) != RS_OK)
        goto fail;
    p->kv_meta = base;
    if ((rc = rs_shm_region(p->shm, "metrics", RS_SHM_RAW, &base, &size)) != RS_OK)
        goto fail;
    p->metrics = base;
    return RS_OK;
fail:
    snprintf(err, err_len, "segment regions: %s", rs_strerror(rc));
    return rc;
}

/* Opens the rings this stage produces or consumes and recovers them. */
static rs_err open_rings(struct rs_pipe *p, char *err, size_t err_len)
{
    rs_err rc = RS_OK;
    if (p->stage == RS_PIPE_STAGE_SCHEDULERD || p->stage == RS_PIPE_STAGE_LAUNCHERD) {
        if ((rc = rs_ring_open(p->shm, "batches", p->role, &p->batches)) != RS_OK ||
            (rc = rs_ring_open(p->shm, "results", p->role, &p->results)) != RS_OK ||
            (rc = rs_ring_recover(p->batches)) != RS_OK ||
            (rc = rs_ring_recover(p->results)) != RS_OK)
            snprintf(err, err_len, "rings: %s", rs_strerror(rc));
    }
    return rc;
}

rs_err rs_pipe_open(const struct rs_pipe_config *cfg, enum rs_pipe_stage stage,
                    struct rs_pipe **out, char *err, size_t err_len)
{
    *out = NULL;
    if ((unsigned)stage >= RS_PIPE_N_STAGES)
        return RS_EINVAL;
    struct rs_pipe *p = rs_sys.calloc(1, sizeof(*p));
    if (p == NULL)
        return RS_ENOMEM;
    p->cfg = *cfg;
    p->stage = stage;
    char name[300];
    struct rs_shm_region_spec specs[N_REGIONS];
    layout(cfg, specs);
    rs_err rc = rs_shm_name(cfg->instance, name, sizeof(name));
    if (rc == RS_OK)
        rc = attach_or_create(name, specs, &p->shm, err, err_len);
    void *base;
    uint64_t size;
    if (rc == RS_OK && (rc = rs_shm_region(p->shm, "config", RS_SHM_RAW, &base, &size)) == RS_OK)
        rc = config_publish(base, cfg, err, err_len);
    if (rc == RS_OK && (rc = rs_role_start(p->shm, role_names[stage], &p->role)) != RS_OK)
        snprintf(err, err_len, "cannot start role %s: %s", role_names[stage], rs_strerror(rc));
    if (rc == RS_OK)
        rc = open_regions(p, p->role, err, err_len);
    if (rc == RS_OK && ((rc = rs_table_recover(p->requests)) != RS_OK ||
                        (rc = rs_arena_recover(p->tokens)) != RS_OK ||
                        (rc = rs_arena_recover(p->logprobs)) != RS_OK ||
                        (rc = rs_arena_recover(p->constraints)) != RS_OK))
        snprintf(err, err_len, "request table recovery: %s", rs_strerror(rc));
    if (rc == RS_OK)
        rc = open_rings(p, err, err_len);
    if (rc != RS_OK) {
        rs_pipe_close(&p);
        return rc;
    }
    *out = p;
    return RS_OK;
}

rs_err rs_pipe_inspect(const char *instance, struct rs_pipe **out, char *err, size_t err_len)
{
    *out = NULL;
    char name[300];
    struct rs_pipe *p = rs_sys.calloc(1, sizeof(*p));
    if (p == NULL)
        return RS_ENOMEM;
    rs_err rc = rs_shm_name(instance, name, sizeof(name));
    if (rc == RS_OK)
        rc = rs_shm_attach(name, NULL, 0, RS_SHM_INSPECT, err, err_len, &p->shm);
    void *base;
    uint64_t size;
    if (rc == RS_OK && (rc = rs_shm_region(p->shm, "config", RS_SHM_RAW, &base, &size)) == RS_OK) {
        struct rs_pipe_shared *sh = base;
        if ((atomic_load_explicit(&sh->cfg_word, memory_order_acquire) & 0xffffffffu) !=
            CFG_READY) {
            snprintf(err, err_len, "instance %s is still starting", instance);
            rc = RS_EAGAIN;
        } else {
            p->cfg = sh->cfg;
        }
    }
    if (rc == RS_OK)
        rc = open_regions(p, NULL, err, err_len);
    if (rc == RS_OK && ((rc = rs_ring_open(p->shm, "batches", NULL, &p->batches)) != RS_OK ||
                        (rc = rs_ring_open(p->shm, "results", NULL, &p->results)) != RS_OK))
        snprintf(err, err_len, "rings: %s", rs_strerror(rc));
    if (rc != RS_OK) {
        rs_pipe_close(&p);
        return rc;
    }
    *out = p;
    return RS_OK;
}

void rs_pipe_close(struct rs_pipe **pp)
{
    if (pp == NULL || *pp == NULL)
        return;
    struct rs_pipe *p = *pp;
    rs_ring_close(&p->batches);
    rs_ring_close(&p->results);
    rs_arena_close(&p->tokens);
    rs_arena_close(&p->logprobs);
    rs_arena_close(&p->constraints);
    rs_table_close(&p->requests);
    rs_role_stop(&p->role);
    rs_shm_detach(&p->shm);
    free(p);
    *pp = NULL;
}

uint32_t rs_pipe_stage_inc(const struct rs_pipe *p, enum rs_pipe_stage stage)
{
    /* The roles region lists the stages first, in enum order (role_names). */
    if (p == NULL || (unsigned)stage >= RS_PIPE_N_STAGES)
        return 0;
    return rs_role_current_inc(p->shm, (uint32_t)stage);
}

rs_err rs_pipe_unlink(const char *instance)
{
    char name[300];
    rs_err rc = rs_shm_name(instance, name, sizeof(name));
    return rc == RS_OK ? rs_shm_unlink(name) : rc;
}

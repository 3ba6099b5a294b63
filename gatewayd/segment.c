/* SPDX-License-Identifier: MIT */
/*
 * gatewayd's read-only view of its instance (rs_pipe_inspect: mapped
 * read-only, never written): which stages serve (the role table: READY and
 * the process alive), the configuration (model file, context length) and
 * the metrics region /metrics exports. The view is re-opened when the
 * segment file is replaced (a whole-pipeline restart makes a new segment)
 * or appears. A stage counts as down only after --down-grace-ms, since a
 * killed stage is back within 100 ms and requests wait through that
 * without noticing. Leaves out anything that writes the segment.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "common/log.h"
#include "gatewayd/gw.h"

#define CHECK_NS 250000000ull /* re-read the role table this often (and on /health) */

static void close_view(struct gw *g, const char *why)
{
    if (g->seg.p != NULL)
        rs_log_info("instance view closed: %s", why);
    rs_pipe_close(&g->seg.p);
    snprintf(g->seg.why, sizeof(g->seg.why), "%s", why);
}

/* 1 when the segment file exists; its identity in *st. */
static int segment_file(const struct gw *g, struct stat *st)
{
    char name[300], path[320];
    if (rs_shm_name(g->o.pipe.cfg.instance, name, sizeof(name)) != RS_OK)
        return 0;
    snprintf(path, sizeof(path), "/dev/shm%s", name);
    return stat(path, st) == 0;
}

static void open_view(struct gw *g, const struct stat *st)
{
    char err[256];
    rs_err rc = rs_pipe_inspect(g->o.pipe.cfg.instance, &g->seg.p, err, sizeof(err));
    if (rc != RS_OK) {
        snprintf(g->seg.why, sizeof(g->seg.why), "instance '%.60s': %.180s", g->o.pipe.cfg.instance, err);
        return;
    }
    g->seg.dev = (uint64_t)st->st_dev;
    g->seg.ino = (uint64_t)st->st_ino;
    rs_log_info("instance '%s' found: model %s, context %u tokens", g->o.pipe.cfg.instance,
                g->seg.p->cfg.model_path, g->seg.p->cfg.n_ctx);
    if (gw_vocab_sync(g) != RS_OK)
        rs_log_warn("the model's vocab could not be loaded: logprobs show no token texts and "
                    "/tokenize answers 503");
}

static bool stage_serving(const struct rs_pipe *p, enum rs_pipe_stage s, struct rs_role_info *ri)
{
    int idx = rs_role_find(p->shm, rs_pipe_stage_name(s));
    memset(ri, 0, sizeof(*ri));
    return idx >= 0 && rs_role_info_at(p->shm, (uint32_t)idx, ri) == RS_OK &&
           ri->phase == RS_ROLE_READY && ri->alive;
}

void gw_seg_tick(struct gw *g, uint64_t now, bool force)
{
    struct stat st;
    if (!force && now - g->seg.checked_ns < CHECK_NS)
        return;
    g->seg.checked_ns = now;
    if (!segment_file(g, &st))
        close_view(g, "the instance is not running (no segment)");
    else if (g->seg.p != NULL &&
             ((uint64_t)st.st_ino != g->seg.ino || (uint64_t)st.st_dev != g->seg.dev))
        close_view(g, "the segment was replaced (whole-pipeline restart)");
    if (g->seg.p == NULL && segment_file(g, &st))
        open_view(g, &st);
    for (int s = 0; s < RS_PIPE_N_STAGES; s++) {
        struct rs_role_info ri;
        bool up = g->seg.p != NULL && stage_serving(g->seg.p, (enum rs_pipe_stage)s, &ri);
        if (up)
            g->seg.down_since_ns[s] = 0;
        else if (g->seg.down_since_ns[s] == 0)
            g->seg.down_since_ns[s] = now;
    }
}

int gw_seg_down(struct gw *g, uint64_t now)
{
    uint64_t grace = (uint64_t)g->o.down_grace_ms * 1000000ull;
    for (int s = 0; s < RS_PIPE_N_STAGES; s++)
        if (g->seg.down_since_ns[s] != 0 && now - g->seg.down_since_ns[s] >= grace)
            return g->seg.p == NULL ? -2 : s;
    return -1;
}

static const char *phase_name(const struct rs_role_info *ri)
{
    static const char *const names[] = {"never started", "recovering", "serving", "exited"};
    if (ri->inc != 0 && !ri->alive)
        return "dead";
    return (unsigned)ri->phase < 4 ? names[ri->phase] : "?";
}

int gw_seg_health(struct gw *g, json_t **body)
{
    gw_seg_tick(g, rs_clock_ns(), true);
    json_t *stages = json_object();
    char down[256] = "";
    for (int s = 0; g->seg.p != NULL && s < RS_PIPE_N_STAGES; s++) {
        struct rs_role_info ri;
        bool up = stage_serving(g->seg.p, (enum rs_pipe_stage)s, &ri);
        /* The tick above read the role table a moment earlier: a stage that became READY in
         * between must not stay marked down (for up to CHECK_NS) while /health says it serves,
         * or a request right after a 200 gets a 503 naming it (seen with a short grace). */
        if (up)
            g->seg.down_since_ns[s] = 0;
        json_object_set_new(stages, rs_pipe_stage_name((enum rs_pipe_stage)s),
                            json_string(phase_name(&ri)));
        if (!up)
            snprintf(down + strlen(down), sizeof(down) - strlen(down), "%s%s (%s)",
                     down[0] ? ", " : "", rs_pipe_stage_name((enum rs_pipe_stage)s),
                     phase_name(&ri));
    }
    if (g->seg.p == NULL) {
        json_decref(stages);
        *body = json_pack("{s:s, s:s}", "status", "unavailable", "message", g->seg.why);
        return 503;
    }
    if (down[0] != '\0') {
        char msg[320];
        snprintf(msg, sizeof(msg), "not serving: %s", down);
        *body =
            json_pack("{s:s, s:s, s:o}", "status", "unavailable", "message", msg, "stages", stages);
        return 503;
    }
    *body = json_pack("{s:s, s:o}", "status", "ok", "stages", stages);
    return 200;
}

/* SPDX-License-Identifier: MIT */
/*
 * The routes, one table row each: the OpenAI endpoints (completions, chat
 * completions, models), the vLLM-style extras (/tokenize, /detokenize),
 * /health and /metrics. A generation route runs in steps: on the complete
 * body it checks the instance (503 when a stage is down), parses (400),
 * checks the model (404) and starts the call; then, each time the call
 * wakes the connection, it answers once the call has an answer (the whole
 * response, an error status, or the start of the SSE stream). Leaves out
 * the legacy /v1/engines paths, embeddings and the Responses API.
 */
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "gatewayd/call_impl.h"

static enum MHD_Result models(struct gw_req *r);
static enum MHD_Result model_one(struct gw_req *r);
static enum MHD_Result health(struct gw_req *r);
static enum MHD_Result metrics(struct gw_req *r);
static enum MHD_Result completions(struct gw_req *r);
static enum MHD_Result chat(struct gw_req *r);

static const struct gw_route routes[] = {
    {"POST", "/v1/completions", false, true, true, completions},
    {"POST", "/v1/chat/completions", false, true, true, chat},
    {"GET", "/v1/models", false, true, false, models},
    {"GET", "/v1/models/", true, true, false, model_one},
    {"POST", "/tokenize", false, true, true, gw_route_tokenize},
    {"POST", "/detokenize", false, true, true, gw_route_detokenize},
    {"GET", "/health", false, false, false, health},
    {"GET", "/metrics", false, false, false, metrics},
};
#define N_ROUTES (sizeof(routes) / sizeof(routes[0]))

const struct gw_route *gw_route_find(const char *method, const char *url, bool *bad_method)
{
    *bad_method = false;
    for (size_t i = 0; i < N_ROUTES; i++) {
        const struct gw_route *rt = &routes[i];
        size_t n = strlen(rt->path);
        bool hit = rt->prefix ? strncmp(url, rt->path, n) == 0 && url[n] != '\0'
                              : strcmp(url, rt->path) == 0;
        if (hit && strcmp(method, rt->method) == 0)
            return rt;
        *bad_method |= hit;
    }
    return NULL;
}

enum MHD_Result gw_route_run(struct gw_req *r)
{
    return r->route->fn(r);
}

/* --- models, health, metrics ----------------------------------------------------------------- */

static json_t *model_object(struct gw *g)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:I}", "id", g->model_name, "object", "model",
                     "created", (json_int_t)g->started_unix, "owned_by", "ringserve", "root",
                     g->seg.p != NULL ? g->seg.p->cfg.model_path : "", "max_model_len",
                     (json_int_t)(g->seg.p != NULL ? g->seg.p->cfg.n_ctx : 0));
}

static int instance_up(struct gw_req *r, struct gw_err *e)
{
    if (r->gw->seg.p != NULL && r->gw->model_name[0] != '\0')
        return 0;
    return gw_err_set(e, 503, "", "%s",
                      r->gw->seg.why[0] ? r->gw->seg.why : "the instance is not running");
}

static enum MHD_Result models(struct gw_req *r)
{
    struct gw_err e;
    if (instance_up(r, &e) != 0)
        return gw_respond_error(r, &e);
    return gw_respond_json(
        r, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", model_object(r->gw)));
}

static enum MHD_Result model_one(struct gw_req *r)
{
    struct gw_err e;
    if (instance_up(r, &e) != 0)
        return gw_respond_error(r, &e);
    const char *name = r->path + strlen(r->route->path);
    if (strcmp(name, r->gw->model_name) != 0) {
        gw_err_set(&e, 404, "model", "The model `%.200s` does not exist.", name);
        e.code = "model_not_found";
        return gw_respond_error(r, &e);
    }
    return gw_respond_json(r, 200, model_object(r->gw));
}

static enum MHD_Result health(struct gw_req *r)
{
    json_t *body;
    int status = gw_seg_health(r->gw, &body);
    return gw_respond_json(r, status, body);
}

static enum MHD_Result metrics(struct gw_req *r)
{
    struct gw_buf b = {0};
    gw_seg_tick(r->gw, rs_clock_ns(), false);
    if (gw_metrics_text(r->gw, &b) != 0) {
        gw_buf_free(&b);
        return MHD_NO;
    }
    return gw_respond_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.len);
}

/* --- generations ----------------------------------------------------------------------------- */

/* The idempotency key: Idempotency-Key, else X-Request-Id; NULL when neither. */
static int key_of(struct gw_req *r, const char **key, struct gw_err *e)
{
    const char *k = gw_req_header(r, "Idempotency-Key");
    const char *name = "Idempotency-Key";
    if (k == NULL) {
        k = gw_req_header(r, "X-Request-Id");
        name = "X-Request-Id";
    }
    *key = k;
    if (k == NULL)
        return 0;
    size_t n = strlen(k);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)k[i] < 0x21 || (unsigned char)k[i] > 0x7e)
            n = 0;
    if (n == 0 || n > GW_KEY_MAX)
        return gw_err_set(e, 400, "", "header %s must be 1..%d printable ASCII bytes", name,
                          GW_KEY_MAX);
    return 0;
}

/* Instance serving, body parsed, model known, call started: 0, or -1 with e. */
static int start(struct gw_req *r, enum gw_api api, struct gw_err *e)
{
    struct gw *g = r->gw;
    struct gw_oai_req p;
    const char *key;
    int down = gw_seg_down(g, rs_clock_ns());
    if (instance_up(r, e) != 0)
        return -1;
    if (down >= 0)
        return gw_err_set(e, 503, "", "stage %s is not serving",
                          rs_pipe_stage_name((enum rs_pipe_stage)down));
    if (key_of(r, &key, e) != 0 ||
        gw_oai_parse(api, r->body.p != NULL ? r->body.p : "", r->body.len, &p, e) != 0)
        return -1;
    if (p.model != NULL && strcmp(p.model, g->model_name) != 0) {
        gw_err_set(e, 404, "model", "The model `%.200s` does not exist.", p.model);
        e->code = "model_not_found";
        gw_oai_req_free(&p);
        return -1;
    }
    int rc = gw_call_start(g, r, &p, key, e);
    gw_oai_req_free(&p); /* what start did not take */
    if (rc == 0) {
        if (r->request_id[0] == '\0')
            snprintf(r->request_id, sizeof(r->request_id), "%s",
                     ((struct gw_call *)r->call)->resp_id);
        gw_req_watch(r, true);
    }
    return rc;
}

static enum MHD_Result generation(struct gw_req *r, enum gw_api api)
{
    struct gw_err e;
    if (r->peer_gone)
        return MHD_NO;
    if (r->call == NULL && start(r, api, &e) != 0)
        return gw_respond_error(r, &e);
    struct gw_call *c = r->call;
    if (!gw_call_has_answer(c))
        return MHD_YES; /* suspended until the call wakes us */
    int status;
    json_t *body;
    if (gw_call_answer(c, &status, &body, &e) != 0)
        return gw_respond_error(r, &e);
    return gw_call_streaming(c) ? gw_respond_stream(r) : gw_respond_json(r, status, body);
}

static enum MHD_Result completions(struct gw_req *r)
{
    return generation(r, GW_API_COMPLETIONS);
}

static enum MHD_Result chat(struct gw_req *r)
{
    return generation(r, GW_API_CHAT);
}

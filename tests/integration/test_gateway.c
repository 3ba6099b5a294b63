/* SPDX-License-Identifier: MIT */
/*
 * gatewayd's HTTP API against the four real daemons on stories260K, through
 * real TCP sockets: a completion gives llama2.c's published greedy text, a
 * stream's chunks add up to the same text with OpenAI's SSE framing (also as
 * curl prints it), invalid requests get a 400 naming the field while the
 * server keeps serving, routes and models answer as OpenAI's do, /health
 * names the stage that is down and requests then get 503, /metrics exports
 * the vLLM names with the stages' figures, both logprobs formats, stop
 * strings, n and prompt batches, /tokenize and /detokenize, API keys, body
 * limits, overload (429), and a client leaving cancels its request (the KV
 * blocks come back).
 */
#include <stdatomic.h>
#include <sys/stat.h>

#include "ipc/pipeline_metrics.h"
#include "tests/integration/gateway_fixture.h"

#define CTX GWT_CTX

/* POSTs body; the parsed answer (owned) and its status, or NULL. */
static json_t *post(struct gwt_env *e, const char *path, const char *body, const char *headers,
                    int *status)
{
    struct gwt_resp r;
    *status = 0;
    if (gwt_http(e->gw.port, "POST", path, headers, body, &r) != 0)
        return NULL;
    *status = r.status;
    json_t *j = gwt_json(&r);
    if (j == NULL)
        fprintf(stderr, "not JSON (%d): %.300s\n", r.status, r.body ? r.body : "");
    gwt_resp_free(&r);
    return j;
}

static const char *text_of(json_t *resp, size_t i)
{
    return json_string_value(
        json_object_get(json_array_get(json_object_get(resp, "choices"), i), "text"));
}

static int published_text(char *buf, size_t cap, size_t *len)
{
    char path[512];
    if (rs_test_refdata("expected/stories260K.greedy-n256.txt", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    FILE *f = fopen(path, "rb");
    *len = f != NULL ? fread(buf, 1, cap - 1, f) : 0;
    buf[*len] = '\0';
    if (f != NULL)
        fclose(f);
    return *len > 0 ? 0 : 1;
}

static int test_completion_gives_the_published_greedy_text(void)
{
    struct gwt_env e;
    char want[4096];
    size_t want_len;
    int fail = 0, st;
    int rc = published_text(want, sizeof(want), &want_len);
    if (rc != 0 || (rc = gwt_up(&e, NULL)) != 0)
        return rc;
    json_t *r = post(&e, "/v1/completions",
                     "{\"model\":\"stories260K\",\"prompt\":\"\","
                     "\"max_tokens\":256,\"temperature\":0}",
                     NULL, &st);
    GCHECK(r != NULL && st == 200, "status %d", st);
    GCHECK(strcmp(json_string_value(json_object_get(r, "object")), "text_completion") == 0, "%s",
           "object");
    GCHECK(strcmp(text_of(r, 0), want) == 0, "text:\n%s\n---- published ----\n%s", text_of(r, 0),
           want);
    json_t *u = json_object_get(r, "usage");
    GCHECK(json_integer_value(json_object_get(u, "completion_tokens")) == 256 &&
               json_integer_value(json_object_get(u, "prompt_tokens")) == 1 &&
               json_integer_value(json_object_get(u, "total_tokens")) == 257,
           "usage %s", json_dumps(u, 0));
    GCHECK(strcmp(json_string_value(json_object_get(
                      json_array_get(json_object_get(r, "choices"), 0), "finish_reason")),
                  "length") == 0,
           "%s", "finish_reason");
out:
    json_decref(r);
    gwt_down(&e, fail);
    return fail;
}

/* Checks a stream body; fills the concatenated text. 0 or 1 (message printed). */
static int check_stream(char *body, int with_usage, char *text, size_t cap)
{
    char *ev[4096];
    int n = gwt_sse_split(body, ev, 4096), finishes = 0;
    size_t len = 0;
    RS_CHECK_MSG(n >= 3 && strcmp(ev[n - 1], "[DONE]") == 0, "%d events, framing or [DONE]", n);
    for (int i = 0; i < n - 1; i++) {
        json_t *c = json_loads(ev[i], 0, NULL), *ch = json_object_get(c, "choices");
        RS_CHECK_MSG(c != NULL, "event %d is not JSON: %s", i, ev[i]);
        int usage_chunk = json_array_size(ch) == 0;
        RS_CHECK_MSG(usage_chunk == (with_usage && i == n - 2), "event %d: usage chunk", i);
        RS_CHECK_MSG(!with_usage || json_object_get(c, "usage") != NULL, "event %d: usage", i);
        json_t *c0 = json_array_get(ch, 0);
        const char *t = json_string_value(json_object_get(c0, "text"));
        if (t != NULL && len + strlen(t) < cap) {
            memcpy(text + len, t, strlen(t));
            len += strlen(t);
        }
        finishes += c0 != NULL && !json_is_null(json_object_get(c0, "finish_reason"));
        json_decref(c);
    }
    text[len] = '\0';
    RS_CHECK_MSG(finishes == 1, "%d chunks with a finish_reason", finishes);
    return 0;
}

static int test_stream_chunks_add_up_to_the_completion(void)
{
    struct gwt_env e;
    struct gwt_resp s = {0};
    char text[8192], ctype[128];
    int fail = 0, st, rc = gwt_up(&e, NULL);
    if (rc != 0)
        return rc;
    const char *req = "{\"prompt\":\"Once upon a time\",\"max_tokens\":64,\"temperature\":0";
    char body[512];
    snprintf(body, sizeof(body), "%s}", req);
    json_t *whole = post(&e, "/v1/completions", body, NULL, &st);
    GCHECK(whole != NULL && st == 200, "status %d", st);
    snprintf(body, sizeof(body), "%s,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
             req);
    GCHECK(gwt_http(e.gw.port, "POST", "/v1/completions", NULL, body, &s) == 0 && s.status == 200,
           "stream status %d", s.status);
    GCHECK(gwt_header(&s, "Content-Type", ctype, sizeof(ctype)) != NULL &&
               strncmp(ctype, "text/event-stream", 17) == 0,
           "content type %s", ctype);
    GCHECK(check_stream(s.body, 1, text, sizeof(text)) == 0, "%s", "stream checks above");
    GCHECK(strcmp(text, text_of(whole, 0)) == 0, "stream text:\n%s\nwhole:\n%s", text,
           text_of(whole, 0));
out:
    gwt_resp_free(&s);
    json_decref(whole);
    gwt_down(&e, fail);
    return fail;
}

static int test_curl_sees_sse_framing(void)
{
    struct gwt_env e;
    char cmd[1024], *buf = calloc(1, 1 << 20), text[8192];
    int fail = 0;
    if (system("curl --version >/dev/null 2>&1") != 0) {
        free(buf);
        fprintf(stderr, "curl not installed\n");
        return RS_TEST_SKIP;
    }
    int rc = gwt_up(&e, NULL);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    snprintf(cmd, sizeof(cmd),
             "curl -sN --fail-with-body http://127.0.0.1:%u/v1/completions "
             "-H 'Content-Type: application/json' -d '{\"prompt\":\"The dog\",\"max_tokens\":"
             "40,\"temperature\":0,\"stream\":true}'",
             e.gw.port);
    FILE *p = popen(cmd, "r");
    size_t n = p != NULL ? fread(buf, 1, (1 << 20) - 1, p) : 0;
    int status = p != NULL ? pclose(p) : -1;
    buf[n] = '\0';
    GCHECK(status == 0 && n > 0, "curl exit %d", status);
    GCHECK(check_stream(buf, 0, text, sizeof(text)) == 0, "curl output:\n%s", buf);
    GCHECK(strlen(text) > 0, "%s", "no text");
out:
    free(buf);
    gwt_down(&e, fail);
    return fail;
}

struct bad_case {
    const char *path, *body;
    int status;
    const char *param; /* NULL = null */
};

static const struct bad_case bad_cases[] = {
    {"/v1/completions", "{\"prompt\":\"x\",\"temperature\":3}", 400, "temperature"},
    {"/v1/completions", "{\"prompt\":\"x\",\"top_p\":\"high\"}", 400, "top_p"},
    {"/v1/completions", "{\"prompt\":\"x\",\"n\":0}", 400, "n"},
    {"/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":0}", 400, "max_tokens"},
    {"/v1/completions", "{\"prompt\":\"x\",\"logprobs\":21}", 400, "logprobs"},
    {"/v1/completions", "{\"prompt\":\"x\",\"stop\":[\"a\",\"\"]}", 400, "stop"},
    {"/v1/completions", "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}", 400,
     "stream_options"},
    {"/v1/completions", "{\"max_tokens\":4}", 400, "prompt"},
    {"/v1/completions", "{\"prompt\":[1,2,99999]}", 400, "prompt"},
    {"/v1/completions", "{\"prompt\":\"x\",\"logit_bias\":{\"5\":101}}", 400, "logit_bias"},
    {"/v1/completions", "{\"prompt\":\"x\",\"best_of\":3}", 400, "best_of"},
    {"/v1/completions", "{\"prompt\": tru", 400, NULL},
    {"/v1/completions", "[1,2]", 400, NULL},
    {"/v1/chat/completions", "{\"messages\":[{\"content\":\"hi\"}]}", 400, "messages[0].role"},
    {"/v1/chat/completions",
     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
     "\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
     400, "messages[0].content[0].type"},
    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"tool\",\"content\":\"4\"}]}", 400,
     "messages[0].tool_call_id"},
    {"/v1/chat/completions", "{\"messages\":[]}", 400, "messages"},
    {"/v1/chat/completions",
     "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
     "\"top_logprobs\":2}",
     400, "top_logprobs"},
    /* valid, but stories260K carries no chat template: tokenizerd refuses it (a 400 whose
     * message says so; the pipeline's refusals name no OpenAI param) */
    {"/v1/chat/completions",
     "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
     "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}],\"logprobs\":true,"
     "\"top_logprobs\":2,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
     400, NULL},
    {"/v1/completions", "{\"prompt\":\"x\",\"model\":\"gpt-4\"}", 404, "model"},
};

static int test_invalid_requests_name_the_field(void)
{
    struct gwt_env e;
    char ids[20000];
    int fail = 0, st, rc = gwt_up(&e, NULL);
    if (rc != 0)
        return rc;
    json_t *r = NULL;
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const struct bad_case *c = &bad_cases[i];
        r = post(&e, c->path, c->body, NULL, &st);
        json_t *err = json_object_get(r, "error"), *param = json_object_get(err, "param");
        GCHECK(r != NULL && st == c->status, "case %zu %s: status %d", i, c->body, st);
        GCHECK(json_is_string(json_object_get(err, "message")) &&
                   json_is_string(json_object_get(err, "type")),
               "case %zu: error shape", i);
        GCHECK(c->param == NULL
                   ? json_is_null(param)
                   : json_is_string(param) && strcmp(json_string_value(param), c->param) == 0,
               "case %zu %s: param %s, want %s (%s)", i, c->body,
               json_is_string(param) ? json_string_value(param) : "null",
               c->param ? c->param : "null", json_string_value(json_object_get(err, "message")));
        json_decref(r);
        r = NULL;
    }
    /* a prompt longer than the context: tokenizerd's refusal, in OpenAI's terms */
    int k = snprintf(ids, sizeof(ids), "{\"prompt\":[1");
    for (int i = 0; i < CTX + 10; i++)
        k += snprintf(ids + k, sizeof(ids) - (size_t)k, ",%d", 100 + i % 200);
    snprintf(ids + k, sizeof(ids) - (size_t)k, "],\"max_tokens\":4}");
    r = post(&e, "/v1/completions", ids, NULL, &st);
    json_t *err = json_object_get(r, "error");
    GCHECK(st == 400 &&
               strcmp(json_string_value(json_object_get(err, "code")), "context_length_exceeded") ==
                   0 &&
               strcmp(json_string_value(json_object_get(err, "param")), "prompt") == 0,
           "too long: %d %s", st, r ? json_dumps(r, 0) : "");
    json_decref(r);
    /* unknown fields are ignored, and the server still serves */
    r = post(&e, "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":2,\"frobnicate\":[1]}", NULL,
             &st);
    GCHECK(st == 200 && text_of(r, 0) != NULL, "status %d", st);
out:
    json_decref(r);
    gwt_down(&e, fail);
    return fail;
}

static int test_routes_and_models_answer_as_openai(void)
{
    struct gwt_env e;
    struct gwt_resp g = {0};
    int fail = 0, rc = gwt_up(&e, NULL);
    if (rc != 0)
        return rc;
    GCHECK(gwt_http(e.gw.port, "GET", "/v1/models", NULL, NULL, &g) == 0 && g.status == 200,
           "models %d", g.status);
    json_t *m = gwt_json(&g), *d0 = json_array_get(json_object_get(m, "data"), 0);
    GCHECK(strcmp(json_string_value(json_object_get(m, "object")), "list") == 0 &&
               strcmp(json_string_value(json_object_get(d0, "id")), "stories260K") == 0 &&
               json_integer_value(json_object_get(d0, "max_model_len")) == CTX,
           "models: %s", g.body);
    json_decref(m);
    const struct {
        const char *method, *path;
        int status;
    } probes[] = {{"GET", "/v1/models/stories260K", 200},
                  {"GET", "/v1/models/other", 404},
                  {"GET", "/v1/nothing", 404},
                  {"DELETE", "/v1/models", 405},
                  {"GET", "/v1/completions", 405},
                  {"GET", "/health", 200}};
    for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
        gwt_resp_free(&g);
        GCHECK(gwt_http(e.gw.port, probes[i].method, probes[i].path, NULL, NULL, &g) == 0 &&
                   g.status == probes[i].status,
               "%s %s: %d", probes[i].method, probes[i].path, g.status);
    }
out:
    gwt_resp_free(&g);
    gwt_down(&e, fail);
    return fail;
}

/* Polls /health until its status is `want`; the last body (owned) or NULL. */
static json_t *health_until(struct gwt_env *e, int want)
{
    for (uint64_t end = rs_clock_ms() + 20000; rs_clock_ms() < end; usleep(20000)) {
        struct gwt_resp r;
        if (gwt_http(e->gw.port, "GET", "/health", NULL, NULL, &r) != 0)
            continue;
        json_t *j = gwt_json(&r);
        int st = r.status;
        gwt_resp_free(&r);
        if (st == want)
            return j;
        json_decref(j);
    }
    return NULL;
}

static int test_health_names_the_stage_that_is_down(void)
{
    struct gwt_env e;
    const char *extra[] = {"--down-grace-ms", "100", NULL};
    struct gwt_resp r = {0};
    char ra[16];
    int fail = 0, st, rc = gwt_up(&e, extra);
    if (rc != 0)
        return rc;
    json_t *h = health_until(&e, 200), *c = NULL;
    GCHECK(h != NULL, "%s", "not healthy at start");
    json_decref(h);
    rs_harness_signal(&e.h, RS_PIPE_STAGE_LAUNCHERD, SIGKILL);
    h = health_until(&e, 503);
    GCHECK(h != NULL && strstr(json_string_value(json_object_get(h, "message")), "launcherd") &&
               strcmp(json_string_value(json_object_get(json_object_get(h, "stages"), "launcherd")),
                      "dead") == 0,
           "health: %s", h ? json_dumps(h, 0) : "none");
    usleep(300000); /* past --down-grace-ms */
    GCHECK(gwt_http(e.gw.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"x\"}", &r) == 0 &&
               r.status == 503 && gwt_header(&r, "Retry-After", ra, sizeof(ra)) != NULL &&
               strstr(r.body, "launcherd") != NULL,
           "completion while down: %d %s", r.status, r.body);
    GCHECK(rs_harness_start_stage(&e.h, RS_PIPE_STAGE_LAUNCHERD, NULL, 1) == RS_OK, "%s",
           "restart");
    json_decref(h);
    h = health_until(&e, 200);
    GCHECK(h != NULL, "%s", "not healthy after the restart");
    for (int i = 0; i < 50 && (c == NULL || st != 200); i++, usleep(50000)) {
        json_decref(c);
        c = post(&e, "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":3}", NULL, &st);
    }
    GCHECK(st == 200, "completion after the restart: %d", st);
out:
    gwt_resp_free(&r);
    json_decref(h);
    json_decref(c);
    gwt_down(&e, fail);
    return fail;
}

/* The value of the first series line starting with `prefix` in a Prometheus text, or -1. */
static double series(const char *text, const char *prefix)
{
    for (const char *l = text; l != NULL && *l != '\0';
         l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, prefix, strlen(prefix)) == 0) {
            const char *sp = strchr(l, ' ');
            return sp != NULL ? strtod(sp + 1, NULL) : -1;
        }
    return -1;
}

static int test_metrics_export_vllm_names(void)
{
    struct gwt_env e;
    struct gwt_resp m = {0};
    int fail = 0, st, rc = gwt_up(&e, NULL);
    if (rc != 0)
        return rc;
    json_t *r = post(&e, "/v1/completions",
                     "{\"prompt\":\"Once upon\",\"max_tokens\":12,"
                     "\"temperature\":0,\"ignore_eos\":true}",
                     NULL, &st);
    GCHECK(st == 200, "completion %d", st);
    /* postprocd records a request's latencies just after its final leaves, so the 200 can
     * come first: wait for them before the kill (a kill in between loses them, by design) */
    const char *ttft = "ringserve:time_to_first_token_seconds_count{model_name=\"stories260K\"";
    for (uint64_t end = rs_clock_ms() + 10000; rs_clock_ms() < end; usleep(20000)) {
        gwt_resp_free(&m);
        memset(&m, 0, sizeof(m));
        if (gwt_http(e.gw.port, "GET", "/metrics", NULL, NULL, &m) == 0 && m.status == 200 &&
            series(m.body, ttft) >= 1)
            break;
    }
    gwt_resp_free(&m);
    memset(&m, 0, sizeof(m));
    rs_harness_signal(&e.h, RS_PIPE_STAGE_POSTPROCD, SIGKILL);
    GCHECK(rs_harness_start_stage(&e.h, RS_PIPE_STAGE_POSTPROCD, NULL, 1) == RS_OK, "%s",
           "restart");
    GCHECK(gwt_http(e.gw.port, "GET", "/metrics", NULL, NULL, &m) == 0 && m.status == 200,
           "metrics %d", m.status);
    const char *lb = "{model_name=\"stories260K\"";
    char k[160];
    const char *names[] = {"ringserve:num_requests_running", "ringserve:num_requests_waiting",
                           "ringserve:kv_cache_usage_perc", "ringserve:prefix_cache_hits_total",
                           "ringserve:http_connections"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(k, sizeof(k), "%s%s", names[i], lb);
        GCHECK(series(m.body, k) >= 0, "no %s", k);
    }
    snprintf(k, sizeof(k), "ringserve:generation_tokens_total%s", lb);
    GCHECK(series(m.body, k) >= 12, "%s = %g", k, series(m.body, k));
    snprintf(k, sizeof(k), "ringserve:prompt_tokens_total%s", lb);
    GCHECK(series(m.body, k) >= 3, "%s = %g", k, series(m.body, k));
    snprintf(k, sizeof(k), "ringserve:time_to_first_token_seconds_count%s", lb);
    GCHECK(series(m.body, k) >= 1, "%s = %g", k, series(m.body, k));
    snprintf(k, sizeof(k), "ringserve:e2e_request_latency_seconds_bucket%s,le=\"+Inf\"", lb);
    GCHECK(series(m.body, k) >= 1, "%s", k);
    snprintf(k, sizeof(k), "ringserve:stage_restarts_total%s,stage=\"postprocd\"", lb);
    GCHECK(series(m.body, k) == 1, "%s = %g", k, series(m.body, k));
    snprintf(k, sizeof(k), "ringserve:stage_restarts_total%s,stage=\"launcherd\"", lb);
    GCHECK(series(m.body, k) == 0, "%s = %g", k, series(m.body, k));
    GCHECK(strstr(m.body, "# TYPE ringserve:time_to_first_token_seconds histogram\n") != NULL, "%s",
           "histogram type line");
out:
    json_decref(r);
    gwt_resp_free(&m);
    gwt_down(&e, fail);
    return fail;
}

static int test_logprobs_in_both_formats(void)
{
    struct gwt_env e;
    int fail = 0, st, rc = gwt_up(&e, NULL);
    if (rc != 0)
        return rc;
    json_t *r = post(&e, "/v1/completions",
                     "{\"prompt\":\"Once upon a time\",\"max_tokens\":10,"
                     "\"temperature\":0,\"logprobs\":3}",
                     NULL, &st);
    json_t *c0 = json_array_get(json_object_get(r, "choices"), 0);
    json_t *lp = json_object_get(c0, "logprobs");
    GCHECK(st == 200 && json_is_object(lp), "status %d", st);
    json_t *toks = json_object_get(lp, "tokens"), *tlp = json_object_get(lp, "token_logprobs");
    json_t *top = json_object_get(lp, "top_logprobs"), *off = json_object_get(lp, "text_offset");
    GCHECK(json_array_size(toks) == 10 && json_array_size(tlp) == 10 &&
               json_array_size(top) == 10 && json_array_size(off) == 10,
           "%s", "lengths");
    char joined[1024] = "";
    long prev = -1;
    for (size_t i = 0; i < 10; i++) {
        json_t *d = json_array_get(top, i), *v;
        const char *k;
        double best = -1e30, mine = json_number_value(json_array_get(tlp, i));
        GCHECK(json_object_size(d) >= 1 && json_object_size(d) <= 4, "top %zu size", i);
        json_object_foreach(d, k, v) best =
            json_number_value(v) > best ? json_number_value(v) : best;
        GCHECK(mine <= 0 && mine == best, "token %zu: greedy pick %g is not the best %g", i, mine,
               best);
        GCHECK(json_object_get(d, json_string_value(json_array_get(toks, i))) != NULL,
               "token %zu not among its top", i);
        GCHECK(json_integer_value(json_array_get(off, i)) > prev, "text_offset %zu", i);
        prev = (long)json_integer_value(json_array_get(off, i));
        strncat(joined, json_string_value(json_array_get(toks, i)),
                sizeof(joined) - strlen(joined) - 1);
    }
    GCHECK(strcmp(joined, json_string_value(json_object_get(c0, "text"))) == 0,
           "tokens '%s' vs text '%s'", joined, json_string_value(json_object_get(c0, "text")));
out:
    json_decref(r);
    gwt_down(&e, fail);
    return fail;
}

static int test_stop_string_ends_the_text(void)
{
    struct gwt_env e;
    int fail = 0, st, st2, rc = gwt_up(&e, NULL);
    if (rc != 0)
        return rc;
    json_t *full = post(&e, "/v1/completions",
                        "{\"prompt\":\"Once upon a time\",\"max_tokens\":"
                        "80,\"temperature\":0}",
                        NULL, &st);
    json_t *cut = post(&e, "/v1/completions",
                       "{\"prompt\":\"Once upon a time\",\"max_tokens\":"
                       "80,\"temperature\":0,\"stop\":\".\"}",
                       NULL, &st2);
    GCHECK(st == 200 && st2 == 200, "%d %d", st, st2);
    const char *f = text_of(full, 0), *c = text_of(cut, 0), *dot = strchr(f, '.');
    GCHECK(dot != NULL, "no '.' in: %s", f);
    GCHECK(strlen(c) == (size_t)(dot - f) && strncmp(c, f, strlen(c)) == 0, "cut '%s' of '%s'", c,
           f);
    GCHECK(strcmp(json_string_value(json_object_get(
                      json_array_get(json_object_get(cut, "choices"), 0), "finish_reason")),
                  "stop") == 0,
           "%s", "finish_reason");
out:
    json_decref(full);
    json_decref(cut);
    gwt_down(&e, fail);
    return fail;
}

static int test_n_choices_and_prompt_batches(void)
{
    struct gwt_env e;
    int fail = 0, st, st2, rc = gwt_up(&e, NULL);
    if (rc != 0)
        return rc;
    json_t *a = post(&e, "/v1/completions",
                     "{\"prompt\":[\"Once\",\"The dog\"],\"n\":3,"
                     "\"max_tokens\":8,\"temperature\":1,\"seed\":11}",
                     NULL, &st);
    json_t *b = post(&e, "/v1/completions",
                     "{\"prompt\":[\"Once\",\"The dog\"],\"n\":3,"
                     "\"max_tokens\":8,\"temperature\":1,\"seed\":11}",
                     NULL, &st2);
    json_t *ch = json_object_get(a, "choices");
    GCHECK(st == 200 && st2 == 200 && json_array_size(ch) == 6, "%d %d %zu", st, st2,
           json_array_size(ch));
    for (size_t i = 0; i < 6; i++) {
        GCHECK(json_integer_value(json_object_get(json_array_get(ch, i), "index")) == (long)i,
               "index %zu", i);
        GCHECK(strcmp(text_of(a, i), text_of(b, i)) == 0, "choice %zu: seeded, yet differs", i);
    }
    /* prompt tokens are counted once per prompt, not once per choice */
    json_t *t1 = post(&e, "/tokenize", "{\"prompt\":\"Once\"}", NULL, &st);
    json_t *t2 = post(&e, "/tokenize", "{\"prompt\":\"The dog\"}", NULL, &st2);
    json_int_t want = json_integer_value(json_object_get(t1, "count")) +
                      json_integer_value(json_object_get(t2, "count"));
    json_decref(t1);
    json_decref(t2);
    json_t *u = json_object_get(a, "usage");
    GCHECK(json_integer_value(json_object_get(u, "prompt_tokens")) == want && want > 2 &&
               json_integer_value(json_object_get(u, "completion_tokens")) == 48,
           "usage %s", json_dumps(u, 0));
out:
    json_decref(a);
    json_decref(b);
    gwt_down(&e, fail);
    return fail;
}

static int test_tokenize_and_detokenize_round_trip(void)
{
    struct gwt_env e;
    int fail = 0, st, st2, st3, rc = gwt_up(&e, NULL);
    if (rc != 0)
        return rc;
    json_t *t = post(&e, "/tokenize", "{\"prompt\":\"Once upon a time\"}", NULL, &st);
    json_t *c = post(&e, "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":1}",
                     NULL, &st2);
    GCHECK(st == 200 && st2 == 200, "%d %d", st, st2);
    json_t *toks = json_object_get(t, "tokens");
    GCHECK(json_integer_value(json_object_get(t, "count")) ==
               json_integer_value(json_object_get(json_object_get(c, "usage"), "prompt_tokens")),
           "count %s vs usage", json_dumps(t, 0));
    GCHECK(json_integer_value(json_object_get(t, "max_model_len")) == CTX, "%s", "max_model_len");
    json_t *req = json_pack("{s:O}", "tokens", toks);
    char *body = json_dumps(req, 0);
    json_t *d = post(&e, "/detokenize", body, NULL, &st3);
    free(body);
    json_decref(req);
    GCHECK(st3 == 200 &&
               strcmp(json_string_value(json_object_get(d, "prompt")), "Once upon a time") == 0,
           "detokenize: %s", d ? json_dumps(d, 0) : "");
    json_decref(d);
    d = post(&e, "/detokenize", "{\"tokens\":[1, 1000000]}", NULL, &st3);
    GCHECK(st3 == 400, "out-of-vocab id: %d", st3);
    json_decref(d);
    d = post(&e, "/tokenize", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", NULL,
             &st3);
    GCHECK(st3 == 400 &&
               strcmp(json_string_value(json_object_get(json_object_get(d, "error"), "param")),
                      "messages") == 0,
           "chat tokenize: %d", st3);
    json_decref(d);
out:
    json_decref(t);
    json_decref(c);
    gwt_down(&e, fail);
    return fail;
}

static int test_api_keys_are_required_and_checked(void)
{
    struct gwt_env e;
    char keyfile[600];
    snprintf(keyfile, sizeof(keyfile), "%s/keys", rs_test_tmpdir());
    FILE *f = fopen(keyfile, "w");
    fprintf(f, "# keys\nsk-first\n  sk-second  \n");
    fclose(f);
    const char *extra[] = {"--api-key", keyfile, NULL};
    int fail = 0, st, rc = gwt_up(&e, extra);
    if (rc != 0)
        return rc;
    const char *body = "{\"prompt\":\"x\",\"max_tokens\":2}";
    json_t *r = post(&e, "/v1/completions", body, NULL, &st);
    GCHECK(st == 401 &&
               strcmp(json_string_value(json_object_get(json_object_get(r, "error"), "code")),
                      "invalid_api_key") == 0,
           "no key: %d", st);
    json_decref(r);
    r = post(&e, "/v1/completions", body, "Authorization: Bearer sk-firs\r\n", &st);
    GCHECK(st == 401, "wrong key: %d", st);
    json_decref(r);
    r = post(&e, "/v1/completions", body, "Authorization: Bearer sk-second\r\n", &st);
    GCHECK(st == 200, "second key: %d", st);
    json_decref(r);
    r = NULL;
    struct gwt_resp h;
    GCHECK(gwt_http(e.gw.port, "GET", "/health", NULL, NULL, &h) == 0 && h.status == 200, "%s",
           "health stays open for probes");
    gwt_resp_free(&h);
out:
    json_decref(r);
    gwt_down(&e, fail);
    return fail;
}

static int test_listening_beyond_loopback_needs_an_api_key(void)
{
    char bin[600];
    snprintf(bin, sizeof(bin), "%s/gatewayd", rs_test_bindir());
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(bin, bin, "--host", "0.0.0.0", "--http-port", "0", "--instance", "nothere", NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    RS_CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status 0x%x", st);
    return 0;
}

/* --help comes from the option tables (the pipeline's --instance/--rundir among them);
 * refusals exit 2 naming the option, in both value forms. */
static int test_command_line_is_generated_from_the_tables(void)
{
    static char out[16384];
    const char *help[] = {"--help", NULL};
    RS_CHECK(rs_test_run("gatewayd", help, out, sizeof(out)) == 0);
    RS_CHECK_MSG(strstr(out, "--instance NAME") && strstr(out, "--rundir DIR") &&
                     strstr(out, "--group NAME") && strstr(out, "--http-port N") &&
                     strstr(out, "--stream-buffer-bytes N") && strstr(out, "-h, --help"),
                 "help:\n%s", out);
    const char *eq[] = {"--http-port=70000", NULL};
    RS_CHECK(rs_test_run("gatewayd", eq, out, sizeof(out)) == 2);
    RS_CHECK_MSG(strstr(out, "--http-port") && strstr(out, "0..65535"), "%s", out);
    const char *sep[] = {"--max-inflight", "0", NULL};
    RS_CHECK(rs_test_run("gatewayd", sep, out, sizeof(out)) == 2);
    RS_CHECK_MSG(strstr(out, "--max-inflight"), "%s", out);
    const char *unknown[] = {"--frobnicate", NULL};
    RS_CHECK(rs_test_run("gatewayd", unknown, out, sizeof(out)) == 2);
    RS_CHECK_MSG(strstr(out, "unknown option '--frobnicate'"), "%s", out);
    const char *inst[] = {"--instance=a/b", NULL};
    RS_CHECK(rs_test_run("gatewayd", inst, out, sizeof(out)) == 2);
    RS_CHECK_MSG(strstr(out, "--instance"), "%s", out);
    const char *operand[] = {"stray", NULL};
    RS_CHECK(rs_test_run("gatewayd", operand, out, sizeof(out)) == 2);
    return 0;
}

static int test_body_over_the_limit_is_413(void)
{
    struct gwt_env e;
    const char *extra[] = {"--max-body-bytes=2048", NULL}; /* the --opt=value form */
    char *big = malloc(8192);
    int fail = 0, st, rc = gwt_up(&e, extra);
    if (rc != 0) {
        free(big);
        return rc;
    }
    int n = snprintf(big, 8192, "{\"prompt\":\"");
    memset(big + n, 'a', 4000);
    snprintf(big + n + 4000, 100, "\",\"max_tokens\":1}");
    json_t *r = post(&e, "/v1/completions", big, NULL, &st);
    GCHECK(st == 413 && json_object_get(r, "error") != NULL, "status %d", st);
    json_decref(r);
    /* the same body chunked, so no Content-Length announces it */
    int fd = gwt_connect(e.gw.port);
    char head[256];
    struct gwt_resp resp = {0};
    snprintf(head, sizeof(head),
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
             "chunked\r\nConnection: close\r\n\r\n%zx\r\n",
             strlen(big));
    gwt_send_all(fd, head, strlen(head));
    gwt_send_all(fd, big, strlen(big));
    gwt_send_all(fd, "\r\n0\r\n\r\n", 7);
    GCHECK(gwt_read(fd, &resp, 10000) == 0 && resp.status == 413, "chunked: %d", resp.status);
    gwt_resp_free(&resp);
    close(fd);
    r = post(&e, "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":1}", NULL, &st);
    GCHECK(st == 200, "after: %d", st);
    json_decref(r);
out:
    free(big);
    gwt_down(&e, fail);
    return fail;
}

static int test_overload_is_429_with_retry_after(void)
{
    struct gwt_env e;
    const char *extra[] = {"--max-inflight", "1", NULL};
    int fail = 0, st = 0, rc = gwt_up(&e, extra);
    if (rc != 0)
        return rc;
    int fd = gwt_connect(e.gw.port);
    GCHECK(gwt_send(fd, "POST", "/v1/completions", NULL,
                    "{\"prompt\":\"x\",\"max_tokens\":1000,"
                    "\"ignore_eos\":true,\"stream\":true}",
                    0) == 0 &&
               gwt_first_chunk(fd) == 0,
           "%s", "first request");
    struct gwt_resp r = {0};
    char ra[16];
    GCHECK(gwt_http(e.gw.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"y\"}", &r) == 0 &&
               r.status == 429 && gwt_header(&r, "Retry-After", ra, sizeof(ra)) != NULL,
           "second: %d", r.status);
    gwt_resp_free(&r);
    close(fd);
    json_t *j = NULL;
    for (int i = 0; i < 100 && st != 200; i++, usleep(20000)) { /* the first is cancelled */
        json_decref(j);
        j = post(&e, "/v1/completions", "{\"prompt\":\"y\",\"max_tokens\":2}", NULL, &st);
    }
    GCHECK(st == 200, "after the first left: %d", st);
    json_decref(j);
out:
    gwt_down(&e, fail);
    return fail;
}

/* KV blocks in use and requests not FREE in the segment. */
static void pipeline_load(struct rs_harness *h, uint64_t *kv_used, uint32_t *busy)
{
    struct rs_pipe *p = rs_harness_view(h);
    *kv_used = atomic_load(&p->metrics->stage[RS_PIPE_STAGE_SCHEDULERD].counter[RS_M_SCH_KV_USED]);
    *busy = 0;
    for (uint32_t i = 0; i < p->cfg.max_requests; i++) {
        uint32_t state, gen, owner;
        rs_table_peek(p->requests, i, &state, &gen, &owner);
        *busy += state != RS_TABLE_FREE;
    }
}

static int test_client_leaving_cancels_its_request(void)
{
    struct gwt_env e;
    const char *extra[] = {"--reattach-grace-ms", "0", NULL};
    int fail = 0, rc = gwt_up(&e, extra);
    if (rc != 0)
        return rc;
    struct rs_pipe *p = rs_harness_view(&e.h);
    _Atomic uint64_t *sampled =
        &p->metrics->stage[RS_PIPE_STAGE_LAUNCHERD].counter[RS_M_LAU_SAMPLED];
    const char *bodies[] = {"{\"prompt\":\"x\",\"max_tokens\":1000,\"ignore_eos\":true,"
                            "\"stream\":true}",
                            "{\"prompt\":\"y\",\"max_tokens\":1000,\"ignore_eos\":true}"};
    for (int k = 0; k < 2; k++) { /* a stream, then a request suspended until its final */
        uint64_t before = atomic_load(sampled), kv = 1;
        uint32_t busy = 1;
        int fd = gwt_connect(e.gw.port);
        GCHECK(gwt_send(fd, "POST", "/v1/completions", NULL, bodies[k], 0) == 0, "%s", "send");
        if (k == 0)
            GCHECK(gwt_first_chunk(fd) == 0, "%s", "first chunk");
        else
            while (atomic_load(sampled) < before + 2)
                usleep(1000);
        close(fd);
        for (uint64_t end = rs_clock_ms() + 20000; (kv > 0 || busy > 0) && rs_clock_ms() < end;)
            pipeline_load(&e.h, &kv, &busy), usleep(10000);
        uint64_t made = atomic_load(sampled) - before;
        GCHECK(kv == 0 && busy == 0, "case %d: %llu KV blocks, %u records still held", k,
               (unsigned long long)kv, busy);
        GCHECK(made < 1000, "case %d: %llu tokens generated: not cancelled", k,
               (unsigned long long)made);
        fprintf(stderr, "case %d: cancelled after %llu of 1000 tokens\n", k,
                (unsigned long long)made);
    }
out:
    gwt_down(&e, fail);
    return fail;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_completion_gives_the_published_greedy_text),
    RS_TEST(test_stream_chunks_add_up_to_the_completion),
    RS_TEST(test_curl_sees_sse_framing),
    RS_TEST(test_invalid_requests_name_the_field),
    RS_TEST(test_routes_and_models_answer_as_openai),
    RS_TEST(test_health_names_the_stage_that_is_down),
    RS_TEST(test_metrics_export_vllm_names),
    RS_TEST(test_logprobs_in_both_formats),
    RS_TEST(test_stop_string_ends_the_text),
    RS_TEST(test_n_choices_and_prompt_batches),
    RS_TEST(test_tokenize_and_detokenize_round_trip),
    RS_TEST(test_api_keys_are_required_and_checked),
    RS_TEST(test_listening_beyond_loopback_needs_an_api_key),
    RS_TEST(test_command_line_is_generated_from_the_tables),
    RS_TEST(test_body_over_the_limit_is_413),
    RS_TEST(test_overload_is_429_with_retry_after),
    RS_TEST(test_client_leaving_cancels_its_request),
};

RS_TEST_MAIN(cases)

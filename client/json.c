/* SPDX-License-Identifier: MIT */
/*
 * One request's result as a line of JSON (options.h rs_client_result_json),
 * for scripts that drive ringserve-cli --json and for benchmark logs,
 * written with the project's one JSON writer (common/json.h: jansson). JSON
 * has no infinities: a -inf logprob is written as null.
 */
#include <string.h>

#include "client/options.h"
#include "common/clock.h"
#include "common/json.h"

static json_t *logprobs_json(const struct rs_wire_logprob *lps, uint32_t n)
{
    json_t *all = json_array();
    for (uint32_t i = 0; all != NULL && i < n; i++) {
        json_t *top = json_array();
        for (uint32_t k = 0; top != NULL && k < lps[i].n_top && k < RS_WIRE_LOGPROBS_MAX; k++)
            json_array_append_new(top, json_pack("[Io]", (json_int_t)lps[i].top_ids[k],
                                                 rs_json_float(lps[i].top_logprobs[k])));
        json_array_append_new(all, json_pack("[Ioo]", (json_int_t)lps[i].token,
                                             rs_json_float(lps[i].logprob), top));
    }
    return all;
}

/* The client's view of the request's timeline, microseconds from submit. */
static json_t *client_times_json(const struct rs_client_result *r)
{
    json_t *tokens = json_array();
    for (uint32_t i = 0; tokens != NULL && i < r->n_tokens; i++)
        json_array_append_new(tokens, rs_json_u64(rs_clock_ns_to_us(r->token_ns[i] -
                                                                     r->submit_ns)));
    uint64_t ttft = r->n_tokens > 0 ? rs_clock_ns_to_us(r->token_ns[0] - r->submit_ns) : 0;
    uint64_t e2e = r->end_ns > r->submit_ns ? rs_clock_ns_to_us(r->end_ns - r->submit_ns) : 0;
    return json_pack("{s:o,s:o,s:o}", "ttft_us", rs_json_u64(ttft), "e2e_us", rs_json_u64(e2e),
                     "token_us", tokens);
}

int rs_client_result_json(FILE *f, const struct rs_client_result *r, long long index,
                          const struct rs_wire_logprob *lps, uint32_t n_lps)
{
    json_t *o = json_object(), *tokens = json_array();
    for (uint32_t i = 0; tokens != NULL && i < r->n_tokens; i++)
        json_array_append_new(tokens, json_integer(r->tokens[i]));
    int bad = o == NULL || rs_json_set(o, "id", rs_json_cstr(r->id)) != 0;
    if (index >= 0)
        bad |= rs_json_set(o, "index", json_integer(index));
    bad |= rs_json_set(o, "text", rs_json_text(r->text != NULL ? r->text : "", r->text_len));
    bad |= rs_json_set(o, "tokens", tokens);
    bad |= rs_json_set(o, "status", json_string(rs_client_status_name(r->status)));
    bad |= rs_json_set(o, "finish_reason", json_string(rs_wire_finish_name(r->finish_reason)));
    if (r->finish_reason == RS_WIRE_FINISH_ERROR) {
        bad |= rs_json_set(o, "error", json_string(rs_wire_code_name(r->error)));
        bad |= rs_json_set(o, "message", rs_json_cstr(r->message));
    }
    bad |= rs_json_set(o, "usage", json_pack("{s:I,s:I,s:I}", "prompt_tokens",
                                             (json_int_t)r->usage.prompt_tokens,
                                             "completion_tokens",
                                             (json_int_t)r->usage.completion_tokens,
                                             "cached_tokens", (json_int_t)r->usage.cached_tokens));
    bad |= rs_json_set(o, "timings", json_pack("{s:o,s:o,s:o}", "queue_us",
                                               rs_json_u64(r->timings.queue_us), "ttft_us",
                                               rs_json_u64(r->timings.ttft_us), "total_us",
                                               rs_json_u64(r->timings.total_us)));
    bad |= rs_json_set(o, "client", client_times_json(r));
    bad |= rs_json_set(o, "seed", rs_json_u64(r->seed));
    bad |= rs_json_set(o, "handle", rs_json_u64(r->handle));
    bad |= rs_json_set(o, "prompt_tokens", json_integer(r->prompt_tokens));
    if (lps != NULL)
        bad |= rs_json_set(o, "logprobs", logprobs_json(lps, n_lps));
    if (bad) {
        json_decref(o);
        return -1;
    }
    return rs_json_print(f, o);
}

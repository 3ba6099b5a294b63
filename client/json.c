/* SPDX-License-Identifier: MIT */
/*
 * One request's result as a line of JSON (options.h rs_client_result_json),
 * for scripts that drive ringserve-cli --json and for benchmark logs. Text is
 * valid UTF-8 from the server, so only quotes, backslashes and control bytes
 * need escaping. JSON has no infinities: a -inf logprob is written as null.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "client/options.h"

static void json_str(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch == '\n')
            fputs("\\n", f);
        else if (ch == '\t')
            fputs("\\t", f);
        else if (ch == '\r')
            fputs("\\r", f);
        else if (ch < 0x20 || ch == 0x7f)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, float v)
{
    if (isfinite(v))
        fprintf(f, "%.9g", (double)v);
    else
        fputs("null", f);
}

static void json_logprobs(FILE *f, const struct rs_wire_logprob *lps, uint32_t n)
{
    fputs(",\"logprobs\":[", f);
    for (uint32_t i = 0; i < n; i++) {
        fprintf(f, "%s[%u,", i ? "," : "", lps[i].token);
        json_num(f, lps[i].logprob);
        fputs(",[", f);
        for (uint32_t k = 0; k < lps[i].n_top && k < RS_WIRE_LOGPROBS_MAX; k++) {
            fprintf(f, "%s[%u,", k ? "," : "", lps[i].top_ids[k]);
            json_num(f, lps[i].top_logprobs[k]);
            fputc(']', f);
        }
        fputs("]]", f);
    }
    fputc(']', f);
}

/* The client's view of the request's timeline, microseconds from submit. */
static void json_client_times(FILE *f, const struct rs_client_result *r)
{
    unsigned long long ttft = r->n_tokens > 0 ? (r->token_ns[0] - r->submit_ns) / 1000 : 0;
    fprintf(f, ",\"client\":{\"ttft_us\":%llu,\"e2e_us\":%llu,\"token_us\":[", ttft,
            (unsigned long long)(r->end_ns > r->submit_ns ? (r->end_ns - r->submit_ns) / 1000 : 0));
    for (uint32_t i = 0; i < r->n_tokens; i++)
        fprintf(f, "%s%llu", i ? "," : "",
                (unsigned long long)((r->token_ns[i] - r->submit_ns) / 1000));
    fputs("]}", f);
}

int rs_client_result_json(FILE *f, const struct rs_client_result *r, long long index,
                          const struct rs_wire_logprob *lps, uint32_t n_lps)
{
    fputs("{\"id\":", f);
    json_str(f, r->id, strlen(r->id));
    if (index >= 0)
        fprintf(f, ",\"index\":%lld", index);
    fputs(",\"text\":", f);
    json_str(f, r->text != NULL ? r->text : "", r->text_len);
    fputs(",\"tokens\":[", f);
    for (uint32_t i = 0; i < r->n_tokens; i++)
        fprintf(f, "%s%u", i ? "," : "", r->tokens[i]);
    fprintf(f, "],\"status\":\"%s\",\"finish_reason\":\"%s\"", rs_client_status_name(r->status),
            rs_wire_finish_name(r->finish_reason));
    if (r->finish_reason == RS_WIRE_FINISH_ERROR) {
        fprintf(f, ",\"error\":\"%s\",\"message\":", rs_wire_code_name(r->error));
        json_str(f, r->message, strlen(r->message));
    }
    fprintf(f, ",\"usage\":{\"prompt_tokens\":%u,\"completion_tokens\":%u,\"cached_tokens\":%u}",
            r->usage.prompt_tokens, r->usage.completion_tokens, r->usage.cached_tokens);
    fprintf(f, ",\"timings\":{\"queue_us\":%llu,\"ttft_us\":%llu,\"total_us\":%llu}",
            (unsigned long long)r->timings.queue_us, (unsigned long long)r->timings.ttft_us,
            (unsigned long long)r->timings.total_us);
    json_client_times(f, r);
    fprintf(f, ",\"seed\":%llu,\"handle\":%llu,\"prompt_tokens\":%u",
            (unsigned long long)r->seed, (unsigned long long)r->handle, r->prompt_tokens);
    if (lps != NULL)
        json_logprobs(f, lps, n_lps);
    fputs("}\n", f);
    return ferror(f) ? -1 : 0;
}

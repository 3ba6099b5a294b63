/* SPDX-License-Identifier: MIT */
/*
 * gatewayd's pure parts without a server: the OpenAI request parser (every
 * prompt form, fields mapped onto the wire request, each refusal naming its
 * field), the one hand-off onto the wire (response_format, logit_bias and
 * min_tokens onto the constraint fields), the response shapes (chat stream
 * chunks with the role delta first, both logprobs formats, errors, usage)
 * and the idempotency id derivation.
 */
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "gatewayd/call_impl.h"
#include "gatewayd/format.h"
#include "gatewayd/oai.h"
#include "ipc/wire_doc.h"
#include "tests/rs_test.h"

static int parse(enum gw_api api, const char *body, struct gw_oai_req *r, struct gw_err *e)
{
    memset(e, 0, sizeof(*e));
    return gw_oai_parse(api, body, strlen(body), r, e);
}

static int test_every_prompt_form_parses(void)
{
    struct gw_oai_req r;
    struct gw_err e;
    RS_CHECK(parse(GW_API_COMPLETIONS, "{\"prompt\":\"hi\"}", &r, &e) == 0);
    RS_CHECK(r.n_prompts == 1 && !r.prompts[0].is_ids && r.prompts[0].text_len == 2);
    gw_oai_req_free(&r);
    RS_CHECK(parse(GW_API_COMPLETIONS, "{\"prompt\":[\"a\",\"\",\"c\\u0000d\"]}", &r, &e) == 0);
    RS_CHECK(r.n_prompts == 3 && r.prompts[1].text_len == 0 && r.prompts[2].text_len == 3);
    gw_oai_req_free(&r);
    RS_CHECK(parse(GW_API_COMPLETIONS, "{\"prompt\":[1,2,3]}", &r, &e) == 0);
    RS_CHECK(r.n_prompts == 1 && r.prompts[0].is_ids && r.prompts[0].n_ids == 3 &&
             r.prompts[0].ids[2] == 3);
    gw_oai_req_free(&r);
    RS_CHECK(parse(GW_API_COMPLETIONS, "{\"prompt\":[[5],[6,7]],\"n\":2}", &r, &e) == 0);
    RS_CHECK(r.n_prompts == 2 && r.prompts[1].n_ids == 2 && gw_oai_n_choices(&r) == 4);
    gw_oai_req_free(&r);
    return 0;
}

static int test_fields_map_onto_the_wire_request(void)
{
    struct gw_oai_req r;
    struct gw_err e;
    RS_CHECK(parse(GW_API_COMPLETIONS,
                   "{\"prompt\":\"x\",\"temperature\":0.5,\"top_p\":0.9,"
                   "\"top_k\":-1,\"min_p\":0.1,\"seed\":-1,\"stop\":\"\\n\",\"stop_token_ids\":"
                   "[2],\"ignore_eos\":true,\"presence_penalty\":1,\"frequency_penalty\":-1,"
                   "\"repetition_penalty\":1.1,\"logprobs\":0,\"user\":\"u\",\"priority\":-3}",
                   &r, &e) == 0);
    const struct rs_wire_generate *g = &r.gen;
    RS_CHECK(g->temperature == 0.5f && g->top_p == 0.9f && g->top_k == 0 && g->min_p == 0.1f);
    RS_CHECK(g->seed == UINT64_MAX && (g->has & RS_WIRE_GEN_SEED));
    RS_CHECK(g->n_stop == 1 && g->stop[0].len == 1 && g->n_stop_ids == 1 && g->ignore_eos);
    RS_CHECK(g->max_tokens == 16 && (g->has & RS_WIRE_GEN_MAX_TOKENS)); /* OpenAI's default */
    RS_CHECK(r.logprobs && r.top_logprobs == 0 && strcmp(r.user, "u") == 0 && g->priority == -3);
    struct rs_wire_generate w;
    RS_CHECK(gw_call_prepare(&r, 0, &w, &e) == 0);
    RS_CHECK((w.has & RS_WIRE_GEN_LOGPROBS) && w.logprobs == 1 && (w.has & RS_WIRE_GEN_PROMPT));
    gw_oai_req_free(&r);
    RS_CHECK(parse(GW_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r, &e) ==
             0);
    RS_CHECK(!(r.gen.has & RS_WIRE_GEN_MAX_TOKENS)); /* chat: until the context is full */
    gw_oai_req_free(&r);
    RS_CHECK(parse(GW_API_CHAT,
                   "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                   "\"max_completion_tokens\":7,\"max_tokens\":9}",
                   &r, &e) == 0);
    RS_CHECK(r.gen.max_tokens == 7);
    gw_oai_req_free(&r);
    return 0;
}

struct refusal {
    enum gw_api api;
    const char *body, *param;
};

static const struct refusal refusals[] = {
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"temperature\":-0.1}", "temperature"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"top_p\":0}", "top_p"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"min_p\":1.5}", "min_p"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"presence_penalty\":2.5}", "presence_penalty"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"repetition_penalty\":0}", "repetition_penalty"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"top_k\":-2}", "top_k"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":\"7\"}", "seed"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"n\":65}", "n"},
    {GW_API_COMPLETIONS, "{\"prompt\":[\"a\",\"b\"],\"n\":40}", "n"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":1.5}", "max_tokens"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":4,\"min_tokens\":5}", "min_tokens"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"stream\":\"yes\"}", "stream"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"stream\":true,\"stream_options\":1}",
     "stream_options"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"stop\":7}", "stop"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"stop_token_ids\":[-1]}", "stop_token_ids"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"logit_bias\":{\"a\":1}}", "logit_bias"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"logit_bias\":{\"3\":101}}", "logit_bias"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"yaml\"}}",
     "response_format.type"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\"}}",
     "response_format.json_schema"},
    {GW_API_COMPLETIONS,
     "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\","
     "\"json_schema\":{\"name\":\"a b\"}}}",
     "response_format.json_schema.name"},
    {GW_API_COMPLETIONS, "{\"prompt\":[]}", "prompt"},
    {GW_API_COMPLETIONS, "{\"prompt\":[[]]}", "prompt"},
    {GW_API_COMPLETIONS, "{\"prompt\":[1,\"a\"]}", "prompt"},
    {GW_API_COMPLETIONS, "{\"prompt\":{}}", "prompt"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"suffix\":\"y\"}", "suffix"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"echo\":true,\"logprobs\":1}", "echo"},
    {GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"model\":5}", "model"},
    {GW_API_CHAT, "{\"messages\":{}}", "messages"},
    {GW_API_CHAT, "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "messages[0].role"},
    {GW_API_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content"},
    {GW_API_CHAT, "{\"messages\":[{\"role\":\"assistant\"}]}", "messages[0]"},
    {GW_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
     "messages[0].content[0].text"},
    {GW_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}]}",
     "messages[0].tool_calls"},
    {GW_API_CHAT,
     "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"1\","
     "\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}]}",
     "messages[0].tool_calls[0].function.arguments"},
    {GW_API_CHAT,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
     "\"function\",\"function\":{\"name\":\"bad name\"}}]}",
     "tools[0].function.name"},
    {GW_API_CHAT,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":"
     "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}",
     "tool_choice"},
    {GW_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":1}",
     "logprobs"},
    {GW_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"echo\":true}", "echo"},
};

static int test_refusals_name_the_field(void)
{
    for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++) {
        struct gw_oai_req r;
        struct gw_err e;
        int rc = parse(refusals[i].api, refusals[i].body, &r, &e);
        RS_CHECK_MSG(rc == -1 && e.status == 400 && strcmp(e.param, refusals[i].param) == 0 &&
                         strstr(e.message, "'") != NULL,
                     "case %zu %s: rc %d status %d param '%s' (%s)", i, refusals[i].body, rc,
                     e.status, e.param, e.message);
    }
    struct gw_oai_req r;
    struct gw_err e;
    RS_CHECK(parse(GW_API_COMPLETIONS, "{\"prompt\":\"x\",", &r, &e) == -1 && e.param[0] == '\0' &&
             strstr(e.message, "line 1 column") != NULL);
    return 0;
}

static int test_chat_messages_tools_and_parts_parse(void)
{
    struct gw_oai_req r;
    struct gw_err e;
    RS_CHECK(parse(GW_API_CHAT,
                   "{\"messages\":[{\"role\":\"developer\",\"content\":\"d\"},"
                   "{\"role\":\"user\",\"name\":\"ann\",\"content\":[{\"type\":\"text\",\"text\":"
                   "\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"assistant\","
                   "\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
                   "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\","
                   "\"tool_call_id\":\"c1\",\"content\":\"4\"}],\"tools\":[{\"type\":\"function\","
                   "\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}],"
                   "\"tool_choice\":\"required\",\"logprobs\":true,\"top_logprobs\":3}",
                   &r, &e) == 0);
    RS_CHECK(r.n_messages == 4 && r.messages[0].role == GW_ROLE_DEVELOPER);
    RS_CHECK(strcmp(r.messages[1].content, "a\nb") == 0 && strcmp(r.messages[1].name, "ann") == 0);
    RS_CHECK(r.messages[2].content == NULL && r.messages[2].n_tool_calls == 1 &&
             strcmp(r.messages[2].tool_calls[0].arguments, "{}") == 0);
    RS_CHECK(strcmp(r.messages[3].tool_call_id, "c1") == 0 && r.n_tools == 1 &&
             r.tool_choice == GW_TOOL_REQUIRED && r.logprobs && r.top_logprobs == 3);
    gw_oai_req_free(&r);
    return 0;
}

/* A chat request reaches the wire as the conversation templates expect (oai_conv.c). */
static int test_chat_hand_off_carries_the_conversation(void)
{
    struct gw_oai_req r;
    struct gw_err e;
    struct rs_wire_generate g;
    char why[128];
    RS_CHECK(parse(GW_API_CHAT,
                   "{\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},"
                   "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                   "{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":null,"
                   "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":"
                   "\"f\",\"arguments\":\"{\\\"x\\\": 1}\"}}]},{\"role\":\"tool\",\"tool_call_id\":"
                   "\"c1\",\"content\":\"2\"}],\"tools\":[{\"type\":\"function\",\"function\":"
                   "{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}],"
                   "\"add_generation_prompt\":false,\"chat_template_kwargs\":{\"enable_thinking\":"
                   "false}}",
                   &r, &e) == 0);
    RS_CHECK_MSG(gw_call_prepare(&r, 0, &g, &e) == 0, "%s", e.message);
    uint32_t want = RS_WIRE_GEN_MESSAGES | RS_WIRE_GEN_TOOLS | RS_WIRE_GEN_CHAT_TEMPLATE_KWARGS |
                    RS_WIRE_GEN_ADD_GENERATION_PROMPT;
    RS_CHECK((g.has & want) == want && !g.add_generation_prompt && g.messages.n == 4);
    json_t *m = NULL;
    RS_CHECK(rs_wire_doc_to_json(&g.messages, &m, why, sizeof(why)) == RS_OK);
    char *s = json_dumps(m, JSON_PRESERVE_ORDER | JSON_COMPACT);
    RS_CHECK_MSG(strcmp(s, "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":"
                           "\"user\",\"content\":\"a\\nb\"},{\"role\":\"assistant\",\"content\":"
                           "null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":"
                           "{\"name\":\"f\",\"arguments\":{\"x\":1}}}]},{\"role\":\"tool\","
                           "\"content\":\"2\",\"tool_call_id\":\"c1\"}]") == 0,
                 "%s", s);
    free(s);
    json_decref(m);
    struct rs_wire_client_msg msg = {.type = RS_WIRE_T_GENERATE, .id = "c"};
    struct rs_wire_buf buf;
    rs_wire_buf_init(&buf, RS_WIRE_CLIENT_MSG_MAX);
    msg.u.gen = g;
    RS_CHECK(rs_wire_client_encode(&msg, &buf) == RS_OK);
    rs_wire_buf_fini(&buf);
    gw_oai_req_free(&r);
    RS_CHECK(parse(GW_API_CHAT,
                   "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                   "\"chat_template_kwargs\":[1]}",
                   &r, &e) != 0);
    RS_CHECK(e.status == 400 && strcmp(e.param, "chat_template_kwargs") == 0);
    return 0;
}

/* response_format "text" is no constraint: the hand-off adds none. */
static int test_the_hand_off_adds_no_constraint_for_text(void)
{
    struct gw_oai_req r;
    struct gw_err e;
    struct rs_wire_generate g;
    RS_CHECK(parse(GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"text\"}}",
                   &r, &e) == 0);
    RS_CHECK(gw_call_prepare(&r, 0, &g, &e) == 0);
    RS_CHECK(!(g.has & (RS_WIRE_GEN_CONSTRAINT | RS_WIRE_GEN_LOGIT_BIAS | RS_WIRE_GEN_MIN_TOKENS)));
    gw_oai_req_free(&r);
    return 0;
}

/* response_format and logit_bias become the wire request's constraint fields. */
static int test_the_hand_off_maps_response_format_and_logit_bias(void)
{
    struct gw_oai_req r;
    struct gw_err e;
    struct rs_wire_generate g;
    RS_CHECK(parse(GW_API_COMPLETIONS,
                   "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\","
                   "\"json_schema\":{\"name\":\"s\",\"schema\":{\"type\":\"object\","
                   "\"required\":[\"a\"]}}},\"logit_bias\":{\"3\":-100,\"7\":2.5}}",
                   &r, &e) == 0);
    RS_CHECK(gw_call_prepare(&r, 0, &g, &e) == 0);
    RS_CHECK((g.has & RS_WIRE_GEN_CONSTRAINT) && g.cx.kind == RS_WIRE_CX_JSON_SCHEMA);
    RS_CHECK(g.cx.text.len == strlen("{\"type\":\"object\",\"required\":[\"a\"]}") &&
             memcmp(g.cx.text.ptr, "{\"type\":\"object\",\"required\":[\"a\"]}", g.cx.text.len) ==
                 0);
    RS_CHECK((g.has & RS_WIRE_GEN_LOGIT_BIAS) && g.cx.n_bias == 2);
    RS_CHECK(g.cx.bias[0].token == 3 && g.cx.bias[0].bias == -100.0f);
    RS_CHECK(g.cx.bias[1].token == 7 && g.cx.bias[1].bias == 2.5f);
    gw_oai_req_free(&r);
    RS_CHECK(parse(GW_API_COMPLETIONS,
                   "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_object\"}}", &r,
                   &e) == 0);
    RS_CHECK(gw_call_prepare(&r, 0, &g, &e) == 0);
    RS_CHECK((g.has & RS_WIRE_GEN_CONSTRAINT) && g.cx.kind == RS_WIRE_CX_JSON_OBJECT);
    RS_CHECK(!(g.has & RS_WIRE_GEN_LOGIT_BIAS));
    gw_oai_req_free(&r);
    RS_CHECK(parse(GW_API_COMPLETIONS, "{\"prompt\":\"x\",\"min_tokens\":7}", &r, &e) == 0);
    RS_CHECK(gw_call_prepare(&r, 0, &g, &e) == 0);
    RS_CHECK((g.has & RS_WIRE_GEN_MIN_TOKENS) && g.cx.min_tokens == 7);
    gw_oai_req_free(&r);
    return 0;
}

static json_t *roundtrip(json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    json_t *j = json_loads(s, 0, NULL);
    free(s);
    return j;
}

static int test_chat_stream_chunks_open_with_the_role(void)
{
    struct gw_fmt_head h = {GW_API_CHAT, "chatcmpl-1", "m", 5, true};
    json_t *o = gw_fmt_object(&h, true);
    json_array_append_new(json_object_get(o, "choices"),
                          gw_fmt_choice(GW_API_CHAT, true, 0, "", 0, true, NULL, NULL));
    o = roundtrip(o);
    json_t *d = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "delta");
    RS_CHECK(strcmp(json_string_value(json_object_get(o, "object")), "chat.completion.chunk") == 0);
    RS_CHECK(json_is_null(json_object_get(o, "usage")));
    RS_CHECK(strcmp(json_string_value(json_object_get(d, "role")), "assistant") == 0 &&
             strcmp(json_string_value(json_object_get(d, "content")), "") == 0);
    json_decref(o);
    json_t *c = roundtrip(gw_fmt_choice(GW_API_CHAT, true, 1, "hi", 2, false, NULL, NULL));
    d = json_object_get(c, "delta");
    RS_CHECK(json_object_get(d, "role") == NULL &&
             strcmp(json_string_value(json_object_get(d, "content")), "hi") == 0 &&
             json_integer_value(json_object_get(c, "index")) == 1 &&
             json_is_null(json_object_get(c, "finish_reason")));
    json_decref(c);
    c = roundtrip(gw_fmt_choice(GW_API_CHAT, true, 0, NULL, 0, false, NULL, "length"));
    RS_CHECK(json_object_size(json_object_get(c, "delta")) == 0 &&
             strcmp(json_string_value(json_object_get(c, "finish_reason")), "length") == 0);
    json_decref(c);
    c = roundtrip(gw_fmt_choice(GW_API_CHAT, false, 0, "all", 3, false, NULL, "stop"));
    json_t *m = json_object_get(c, "message");
    RS_CHECK(strcmp(json_string_value(json_object_get(m, "role")), "assistant") == 0 &&
             strcmp(json_string_value(json_object_get(m, "content")), "all") == 0);
    json_decref(c);
    return 0;
}

static int test_logprobs_take_both_openai_shapes(void)
{
    struct rs_wire_logprob lp[2] = {
        {.token = 5, .logprob = -0.5f, .n_top = 2, .top_ids = {5, 7}, .top_logprobs = {-0.5f, -1}},
        {.token = 9,
         .logprob = -INFINITY,
         .n_top = 2,
         .top_ids = {3, 4},
         .top_logprobs = {-0.1f, -2}}};
    json_t *chat = gw_fmt_lp_new(GW_API_CHAT);
    uint64_t chars = 0;
    gw_fmt_lp_add(GW_API_CHAT, chat, NULL, lp, 2, 1, &chars);
    chat = roundtrip(chat);
    json_t *c = json_object_get(chat, "content"), *e1 = json_array_get(c, 1);
    RS_CHECK(json_array_size(c) == 2 && json_is_array(json_object_get(e1, "bytes")));
    RS_CHECK(json_number_value(json_object_get(e1, "logprob")) == -9999.0); /* -inf */
    RS_CHECK(json_array_size(json_object_get(e1, "top_logprobs")) == 1);
    RS_CHECK(json_object_get(json_array_get(json_object_get(e1, "top_logprobs"), 0), "token"));
    json_decref(chat);
    json_t *cmp = gw_fmt_lp_new(GW_API_COMPLETIONS);
    gw_fmt_lp_add(GW_API_COMPLETIONS, cmp, NULL, lp, 2, 2, &chars);
    cmp = roundtrip(cmp);
    RS_CHECK(json_array_size(json_object_get(cmp, "tokens")) == 2 &&
             json_array_size(json_object_get(cmp, "token_logprobs")) == 2 &&
             json_array_size(json_object_get(cmp, "top_logprobs")) == 2 &&
             json_array_size(json_object_get(cmp, "text_offset")) == 2);
    json_decref(cmp);
    return 0;
}

static int test_errors_and_usage_have_openai_shapes(void)
{
    struct gw_err e;
    gw_err_set(&e, 429, "", "busy");
    json_t *o = roundtrip(gw_fmt_error(&e)), *er = json_object_get(o, "error");
    RS_CHECK(strcmp(json_string_value(json_object_get(er, "type")), "rate_limit_error") == 0 &&
             json_is_null(json_object_get(er, "param")) &&
             json_is_null(json_object_get(er, "code")) &&
             strcmp(json_string_value(json_object_get(er, "message")), "busy") == 0);
    json_decref(o);
    /* a JSON error quoting invalid UTF-8 of the body still makes a valid JSON body */
    struct gw_oai_req r;
    const char bad[] = "{\"prompt\": \xff\xfe}";
    RS_CHECK(gw_oai_parse(GW_API_COMPLETIONS, bad, sizeof(bad) - 1, &r, &e) == -1);
    char *s = json_dumps(o = gw_fmt_error(&e), 0);
    RS_CHECK(s != NULL);
    free(s);
    json_decref(o);
    o = roundtrip(gw_fmt_usage(10, 5, 4));
    RS_CHECK(json_integer_value(json_object_get(o, "total_tokens")) == 15 &&
             json_integer_value(json_object_get(json_object_get(o, "prompt_tokens_details"),
                                                "cached_tokens")) == 4);
    json_decref(o);
    return 0;
}

static int test_keyed_ids_are_a_secret_function_of_caller_and_key(void)
{
    static struct gw g;
    char a[RS_CLIENT_ID_CAP], b[RS_CLIENT_ID_CAP], c[RS_CLIENT_ID_CAP], d[RS_CLIENT_ID_CAP];
    RS_CHECK(sodium_init() >= 0);
    memset(g.secret, 7, sizeof(g.secret));
    gw_idem_stem(&g, "peer:127.0.0.1", "key-1", a, sizeof(a));
    gw_idem_stem(&g, "peer:127.0.0.1", "key-1", b, sizeof(b));
    gw_idem_stem(&g, "peer:127.0.0.2", "key-1", c, sizeof(c));
    RS_CHECK(strcmp(a, b) == 0 && strcmp(a, c) != 0 && strlen(a) == 33 && a[0] == 'k');
    gw_idem_stem(&g, "peer:127.0.0.1", "key-2", c, sizeof(c));
    RS_CHECK(strcmp(a, c) != 0);
    /* the identity is length-prefixed: ("ab", "c") and ("a", "bc") differ */
    gw_idem_stem(&g, "ab", "c", c, sizeof(c));
    gw_idem_stem(&g, "a", "bc", d, sizeof(d));
    RS_CHECK(strcmp(c, d) != 0);
    memset(g.secret, 8, sizeof(g.secret));
    gw_idem_stem(&g, "peer:127.0.0.1", "key-1", c, sizeof(c));
    RS_CHECK(strcmp(a, c) != 0);
    gw_idem_stem(&g, NULL, NULL, c, sizeof(c));
    gw_idem_stem(&g, NULL, NULL, d, sizeof(d));
    RS_CHECK(c[0] == 'g' && strcmp(c, d) != 0);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_every_prompt_form_parses),
    RS_TEST(test_fields_map_onto_the_wire_request),
    RS_TEST(test_refusals_name_the_field),
    RS_TEST(test_chat_messages_tools_and_parts_parse),
    RS_TEST(test_chat_hand_off_carries_the_conversation),
    RS_TEST(test_the_hand_off_adds_no_constraint_for_text),
    RS_TEST(test_the_hand_off_maps_response_format_and_logit_bias),
    RS_TEST(test_chat_stream_chunks_open_with_the_role),
    RS_TEST(test_logprobs_take_both_openai_shapes),
    RS_TEST(test_errors_and_usage_have_openai_shapes),
    RS_TEST(test_keyed_ids_are_a_secret_function_of_caller_and_key),
};

RS_TEST_MAIN(cases)

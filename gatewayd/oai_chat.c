/* SPDX-License-Identifier: MIT */
/*
 * The chat half of the OpenAI request parser: messages (roles system,
 * developer, user, assistant, tool; content as a string or an array of text
 * parts; name; an assistant's tool_calls; a tool message's tool_call_id),
 * tools (function definitions) and tool_choice, as OpenAI defines them.
 * Text parts are joined with "\n" (vLLM does the same). Leaves out images,
 * audio and files: a part of another type is refused naming it, since the
 * served models are text-only; and rendering the conversation into a prompt
 * (the model's chat template), which call.c hands to the pipeline.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gatewayd/oai_impl.h"

static const char *const role_names[] = {"system", "developer", "user", "assistant", "tool"};

const char *gw_role_name(enum gw_role r)
{
    return (unsigned)r < sizeof(role_names) / sizeof(role_names[0]) ? role_names[r] : "?";
}

static int parse_role(const json_t *m, const char *param, enum gw_role *out, struct gw_err *e)
{
    json_t *v = oai_field(m, "role");
    const char *s;
    char p[128];
    snprintf(p, sizeof(p), "%.60s.role", param);
    if (v == NULL)
        return gw_err_set(e, 400, p, "'%s' is required", p);
    if (oai_string(v, p, &s, NULL, e) != 0)
        return -1;
    for (unsigned i = 0; i < sizeof(role_names) / sizeof(role_names[0]); i++)
        if (strcmp(s, role_names[i]) == 0) {
            *out = (enum gw_role)i;
            return 0;
        }
    return gw_err_set(e, 400, p,
                      "'%s' must be one of system, developer, user, assistant, tool; "
                      "got '%.40s'",
                      p, s);
}

/* Appends s[0..n) to m->content (a "\n" between parts). */
static int append_text(struct gw_message *m, const char *s, size_t n, struct gw_err *e)
{
    size_t sep = m->content != NULL && m->content_len > 0 ? 1 : 0;
    char *c = realloc(m->content, m->content_len + sep + n + 1);
    if (c == NULL)
        return gw_err_set(e, 500, "", "out of memory");
    if (sep)
        c[m->content_len++] = '\n';
    memcpy(c + m->content_len, s, n);
    m->content_len += n;
    c[m->content_len] = '\0';
    m->content = c;
    return 0;
}

static int parse_part(const json_t *part, const char *param, struct gw_message *m, struct gw_err *e)
{
    json_t *t = json_is_object(part) ? oai_field(part, "type") : NULL, *txt;
    const char *type, *s;
    size_t n;
    char p[128];
    snprintf(p, sizeof(p), "%.60s.type", param);
    if (t == NULL)
        return gw_err_set(e, 400, param, "'%s' must be an object with a 'type'", param);
    if (oai_string(t, p, &type, NULL, e) != 0)
        return -1;
    bool refusal = strcmp(type, "refusal") == 0 && m->role == GW_ROLE_ASSISTANT;
    if (strcmp(type, "text") != 0 && !refusal)
        return gw_err_set(e, 400, p,
                          "'%s' is '%.40s': only text content parts are supported "
                          "(the served model reads text)",
                          p, type);
    snprintf(p, sizeof(p), "%.60s.%.20s", param, refusal ? "refusal" : "text");
    if ((txt = oai_field(part, refusal ? "refusal" : "text")) == NULL)
        return gw_err_set(e, 400, p, "'%s' is required", p);
    if (oai_string(txt, p, &s, &n, e) != 0)
        return -1;
    return append_text(m, s, n, e);
}

static int parse_content(const json_t *msg, const char *param, struct gw_message *m,
                         struct gw_err *e)
{
    json_t *v = oai_field(msg, "content"), *it;
    char p[128];
    size_t i;
    snprintf(p, sizeof(p), "%.60s.content", param);
    if (v == NULL) {
        if (m->role == GW_ROLE_ASSISTANT)
            return 0; /* checked against tool_calls by the caller */
        return gw_err_set(e, 400, p, "'%s' is required for a %s message", p, gw_role_name(m->role));
    }
    if (json_is_string(v))
        return append_text(m, json_string_value(v), json_string_length(v), e);
    if (!json_is_array(v))
        return gw_err_set(e, 400, p,
                          "'%s' must be a string or an array of content parts, got "
                          "%s",
                          p, oai_type_name(v));
    if (append_text(m, "", 0, e) != 0) /* an empty array is empty content, not null */
        return -1;
    json_array_foreach(v, i, it)
    {
        char pp[128];
        snprintf(pp, sizeof(pp), "%.60s[%zu]", p, i);
        if (parse_part(it, pp, m, e) != 0)
            return -1;
    }
    return 0;
}

/* An object field that must be a string: *out, or -1 with the error. */
static int str_at(const json_t *obj, const char *param, const char *key, const char **out,
                  struct gw_err *e)
{
    char p[128];
    snprintf(p, sizeof(p), "%.60s.%.20s", param, key);
    json_t *v = json_is_object(obj) ? oai_field(obj, key) : NULL;
    if (v == NULL)
        return gw_err_set(e, 400, p, "'%s' is required", p);
    return oai_string(v, p, out, NULL, e);
}

static int parse_tool_call(const json_t *tc, const char *param, struct gw_tool_call *out,
                           struct gw_err *e)
{
    const char *type;
    char p[128];
    if (str_at(tc, param, "id", &out->id, e) != 0 || str_at(tc, param, "type", &type, e) != 0)
        return -1;
    if (strcmp(type, "function") != 0)
        return gw_err_set(e, 400, param, "'%s.type' must be 'function'", param);
    snprintf(p, sizeof(p), "%.60s.function", param);
    json_t *f = oai_field(tc, "function");
    if (f == NULL || !json_is_object(f))
        return gw_err_set(e, 400, p, "'%s' must be an object", p);
    return str_at(f, p, "name", &out->name, e) != 0 ||
                   str_at(f, p, "arguments", &out->arguments, e) != 0
               ? -1
               : 0;
}

static int parse_tool_calls(const json_t *msg, const char *param, struct gw_message *m,
                            struct gw_err *e)
{
    json_t *v = oai_field(msg, "tool_calls"), *it;
    char p[128];
    size_t i;
    snprintf(p, sizeof(p), "%.60s.tool_calls", param);
    if (v == NULL)
        return 0;
    if (m->role != GW_ROLE_ASSISTANT)
        return gw_err_set(e, 400, p, "'%s' is only allowed in assistant messages", p);
    if (!json_is_array(v) || json_array_size(v) > GW_MAX_TOOLS)
        return gw_err_set(e, 400, p, "'%s' must be an array of at most %d tool calls", p,
                          GW_MAX_TOOLS);
    m->tool_calls = calloc(json_array_size(v) + 1, sizeof(*m->tool_calls));
    if (m->tool_calls == NULL)
        return gw_err_set(e, 500, "", "out of memory");
    json_array_foreach(v, i, it)
    {
        char pp[128];
        snprintf(pp, sizeof(pp), "%.60s[%zu]", p, i);
        if (parse_tool_call(it, pp, &m->tool_calls[m->n_tool_calls++], e) != 0)
            return -1;
    }
    return 0;
}

static int parse_message(const json_t *msg, uint32_t i, struct gw_message *m, struct gw_err *e)
{
    char param[128], p[128];
    json_t *v;
    snprintf(param, sizeof(param), "messages[%u]", i);
    if (!json_is_object(msg))
        return gw_err_set(e, 400, param, "'%s' must be an object, got %s", param,
                          oai_type_name(msg));
    if (parse_role(msg, param, &m->role, e) != 0 || parse_content(msg, param, m, e) != 0 ||
        parse_tool_calls(msg, param, m, e) != 0)
        return -1;
    if (m->role == GW_ROLE_ASSISTANT && m->content == NULL && m->n_tool_calls == 0)
        return gw_err_set(e, 400, param, "'%s' (assistant) needs 'content' or 'tool_calls'", param);
    snprintf(p, sizeof(p), "%.60s.name", param);
    if ((v = oai_field(msg, "name")) != NULL && oai_string(v, p, &m->name, NULL, e) != 0)
        return -1;
    if (m->role == GW_ROLE_TOOL)
        return str_at(msg, param, "tool_call_id", &m->tool_call_id, e);
    return 0;
}

static int parse_messages(const json_t *root, struct gw_oai_req *r, struct gw_err *e)
{
    json_t *v = oai_field(root, "messages"), *it;
    size_t i;
    if (v == NULL)
        return gw_err_set(e, 400, "messages", "'messages' is required");
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > GW_MAX_MESSAGES)
        return gw_err_set(e, 400, "messages", "'messages' must be an array of 1..%d messages",
                          GW_MAX_MESSAGES);
    r->messages = calloc(json_array_size(v), sizeof(*r->messages));
    if (r->messages == NULL)
        return gw_err_set(e, 500, "", "out of memory");
    json_array_foreach(v, i, it)
    {
        r->n_messages = (uint32_t)i + 1;
        if (parse_message(it, (uint32_t)i, &r->messages[i], e) != 0)
            return -1;
    }
    return 0;
}

/* A function name as OpenAI allows it: 1..64 of a-z, A-Z, 0-9, _ and -. */
static int valid_name(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n <= 64 &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

static int parse_tool(const json_t *t, const char *param, struct gw_tool *out, struct gw_err *e)
{
    const char *type;
    char p[128], pp[96];
    json_t *f, *v;
    if (str_at(t, param, "type", &type, e) != 0)
        return -1;
    if (strcmp(type, "function") != 0)
        return gw_err_set(e, 400, param, "'%s.type' must be 'function', got '%.40s'", param, type);
    snprintf(p, sizeof(p), "%.60s.function", param);
    if ((f = oai_field(t, "function")) == NULL || !json_is_object(f))
        return gw_err_set(e, 400, p, "'%s' must be an object", p);
    if (str_at(f, p, "name", &out->name, e) != 0)
        return -1;
    snprintf(pp, sizeof(pp), "%.60s.name", p);
    if (!valid_name(out->name))
        return gw_err_set(e, 400, pp, "'%s' must be 1..64 of a-z, A-Z, 0-9, _ and -", pp);
    snprintf(pp, sizeof(pp), "%.60s.description", p);
    if ((v = oai_field(f, "description")) != NULL &&
        oai_string(v, pp, &out->description, NULL, e) != 0)
        return -1;
    snprintf(pp, sizeof(pp), "%.60s.parameters", p);
    if ((v = oai_field(f, "parameters")) != NULL && !json_is_object(v))
        return gw_err_set(e, 400, pp, "'%s' must be a JSON schema object, got %s", pp,
                          oai_type_name(v));
    out->parameters = v;
    return 0;
}

static int parse_tools(const json_t *root, struct gw_oai_req *r, struct gw_err *e)
{
    json_t *v = oai_field(root, "tools"), *it;
    size_t i;
    if (v == NULL)
        return 0;
    if (!json_is_array(v) || json_array_size(v) > GW_MAX_TOOLS)
        return gw_err_set(e, 400, "tools", "'tools' must be an array of at most %d tools",
                          GW_MAX_TOOLS);
    r->tools = calloc(json_array_size(v) + 1, sizeof(*r->tools));
    if (r->tools == NULL)
        return gw_err_set(e, 500, "", "out of memory");
    json_array_foreach(v, i, it)
    {
        char p[128];
        snprintf(p, sizeof(p), "tools[%zu]", i);
        if (parse_tool(it, p, &r->tools[r->n_tools++], e) != 0)
            return -1;
    }
    return 0;
}

static int parse_tool_choice(const json_t *root, struct gw_oai_req *r, struct gw_err *e)
{
    static const char *const modes[] = {"auto", "none", "required"};
    json_t *v = oai_field(root, "tool_choice"), *f;
    if (v == NULL)
        return 0;
    if (json_is_string(v)) {
        for (int i = 0; i < 3; i++)
            if (strcmp(json_string_value(v), modes[i]) == 0)
                r->tool_choice = (enum gw_tool_choice)i;
        if (strcmp(json_string_value(v), modes[r->tool_choice]) != 0)
            return gw_err_set(e, 400, "tool_choice",
                              "'tool_choice' must be 'auto', 'none', "
                              "'required' or a function object");
    } else if (json_is_object(v) && (f = oai_field(v, "function")) != NULL) {
        if (str_at(f, "tool_choice.function", "name", &r->tool_choice_name, e) != 0)
            return -1;
        r->tool_choice = GW_TOOL_NAMED;
    } else {
        return gw_err_set(e, 400, "tool_choice",
                          "'tool_choice' must be a string or "
                          "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    for (uint32_t i = 0; r->tool_choice == GW_TOOL_NAMED && i < r->n_tools; i++)
        if (strcmp(r->tools[i].name, r->tool_choice_name) == 0)
            return 0;
    if (r->tool_choice == GW_TOOL_NAMED || (r->tool_choice == GW_TOOL_REQUIRED && !r->n_tools))
        return gw_err_set(e, 400, "tool_choice",
                          "'tool_choice' names a tool that 'tools' does "
                          "not define");
    return 0;
}

int oai_parse_chat(const json_t *root, struct gw_oai_req *r, struct gw_err *e)
{
    json_t *v;
    if (parse_messages(root, r, e) != 0 || parse_tools(root, r, e) != 0 ||
        parse_tool_choice(root, r, e) != 0)
        return -1;
    if ((v = oai_field(root, "add_generation_prompt")) != NULL &&
        oai_bool(v, "add_generation_prompt", &r->add_generation_prompt, e) != 0)
        return -1;
    if ((v = oai_field(root, "echo")) != NULL && json_is_true(v))
        return gw_err_set(e, 400, "echo", "'echo' is a completions field");
    return oai_pack_conversation(root, r, e);
}

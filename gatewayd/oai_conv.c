/* SPDX-License-Identifier: MIT */
/*
 * The parsed chat request as the conversation the pipeline renders
 * (ipc/PROTOCOL.md §3.1 `messages`, `tools`, `chat_template_kwargs`), in
 * the shape Hugging Face chat templates expect: one message object per
 * OpenAI message with its text parts joined, "developer" given to the
 * template as "system" (templates know no developer role), an assistant's
 * tool call arguments as the JSON object the model wrote when they parse as
 * one (templates apply `tojson` to them, as vLLM hands them over) and as the
 * string otherwise, and tools as OpenAI's {type, function} objects. Packed
 * once at parse time into bytes the request owns, so every choice (and a
 * retry) sends the same conversation.
 */
#include <stdlib.h>
#include <string.h>

#include "client/chat.h"
#include "gatewayd/oai_impl.h"

static json_t *tool_call_json(const struct gw_tool_call *tc)
{
    json_t *args = json_loads(tc->arguments, JSON_DECODE_ANY | JSON_PRESERVE_ORDER, NULL);
    if (!json_is_object(args)) {
        json_decref(args);
        args = json_string(tc->arguments);
    }
    return json_pack("{s:s,s:s,s:{s:s,s:o}}", "id", tc->id, "type", "function", "function",
                     "name", tc->name, "arguments", args);
}

static json_t *message_json(const struct gw_message *m)
{
    const char *role = m->role == GW_ROLE_DEVELOPER ? "system" : gw_role_name(m->role);
    json_t *o = json_pack("{s:s}", "role", role);
    if (o == NULL)
        return NULL;
    json_object_set_new(o, "content", m->content != NULL
                                          ? json_stringn(m->content, m->content_len)
                                          : json_null());
    if (m->name != NULL)
        json_object_set_new(o, "name", json_string(m->name));
    if (m->tool_call_id != NULL)
        json_object_set_new(o, "tool_call_id", json_string(m->tool_call_id));
    if (m->n_tool_calls > 0) {
        json_t *calls = json_array();
        for (uint32_t i = 0; i < m->n_tool_calls; i++)
            json_array_append_new(calls, tool_call_json(&m->tool_calls[i]));
        json_object_set_new(o, "tool_calls", calls);
    }
    return o;
}

static json_t *tool_json(const struct gw_tool *t)
{
    json_t *f = json_pack("{s:s}", "name", t->name);
    if (f != NULL && t->description != NULL)
        json_object_set_new(f, "description", json_string(t->description));
    if (f != NULL && t->parameters != NULL)
        json_object_set(f, "parameters", t->parameters);
    return f != NULL ? json_pack("{s:s,s:o}", "type", "function", "function", f) : NULL;
}

/* The conversation object: {"messages": [...], "tools": [...]?, "chat_template_kwargs": {...}?}. */
static json_t *conversation_json(const struct gw_oai_req *r, const json_t *kwargs)
{
    json_t *msgs = json_array(), *conv = json_object();
    for (uint32_t i = 0; i < r->n_messages; i++)
        json_array_append_new(msgs, message_json(&r->messages[i]));
    json_object_set_new(conv, "messages", msgs);
    if (r->n_tools > 0) {
        json_t *tools = json_array();
        for (uint32_t i = 0; i < r->n_tools; i++)
            json_array_append_new(tools, tool_json(&r->tools[i]));
        json_object_set_new(conv, "tools", tools);
    }
    if (kwargs != NULL)
        json_object_set(conv, "chat_template_kwargs", (json_t *)kwargs);
    bool whole = json_array_size(msgs) == r->n_messages &&
                 (r->n_tools == 0 || json_array_size(json_object_get(conv, "tools")) == r->n_tools);
    if (whole)
        return conv;
    json_decref(conv); /* a part failed to build: out of memory */
    return NULL;
}

int oai_pack_conversation(const json_t *root, struct gw_oai_req *r, struct gw_err *e)
{
    char why[256];
    json_t *kw = oai_field(root, "chat_template_kwargs");
    if (kw != NULL && (!json_is_object(kw) || json_object_size(kw) > RS_WIRE_KWARGS_MAX))
        return gw_err_set(e, 400, "chat_template_kwargs", "'chat_template_kwargs' must be an "
                          "object of at most %u template variables", RS_WIRE_KWARGS_MAX);
    if (r->n_messages > RS_WIRE_MESSAGES_MAX)
        return gw_err_set(e, 400, "messages", "'messages': %u messages, at most %u",
                          r->n_messages, RS_WIRE_MESSAGES_MAX);
    json_t *conv = conversation_json(r, kw);
    if (conv == NULL || (r->chat = calloc(1, sizeof(*r->chat))) == NULL) {
        json_decref(conv);
        return gw_err_set(e, 500, "", "out of memory");
    }
    rs_wire_generate_init(&r->chat_gen);
    r->chat_gen.has = 0;
    rs_err rc = rs_client_chat_set(r->chat, conv, &r->chat_gen, why, sizeof(why));
    json_decref(conv);
    if (rc != RS_OK)
        return gw_err_set(e, 400, strncmp(why, "'tools'", 7) == 0 ? "tools" : strncmp(why,
                          "'chat_template_kwargs'", 22) == 0 ? "chat_template_kwargs" :
                          "messages", "the conversation cannot be sent: %s", why);
    return 0;
}

void oai_conversation_free(struct gw_oai_req *r)
{
    if (r->chat != NULL)
        rs_client_chat_fini(r->chat);
    free(r->chat);
    r->chat = NULL;
}

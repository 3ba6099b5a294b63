/* SPDX-License-Identifier: MIT */
/*
 * Conversations into a generate's packed fields (client/chat.h): JSON is
 * checked for the shape the wire wants (messages an array of objects, tools
 * an array, kwargs an object) and packed by ipc/wire_doc.c; the server does
 * the rest (roles, the template's own checks).
 */
#include <stdio.h>
#include <string.h>

#include "client/chat.h"
#include "ipc/wire_doc.h"

static rs_err pack(struct rs_wire_buf *b, const json_t *v, const char *what, size_t max,
                   struct rs_wire_doc *out, char *err, size_t err_len)
{
    size_t n = json_is_array(v) ? json_array_size(v) : json_object_size(v);
    if (n > max) {
        snprintf(err, err_len, "'%s': %zu entries, at most %zu", what, n, max);
        return RS_EINVAL;
    }
    if (b->max == 0)
        rs_wire_buf_init(b, RS_WIRE_CLIENT_MSG_MAX);
    rs_err rc = rs_wire_doc_pack(v, b, out);
    if (rc != RS_OK)
        snprintf(err, err_len, "'%s': %s", what, rc == RS_ERANGE ? "larger than a request may be"
                 : "nested too deep, too many values (32768 at most), a key over 256 bytes or a "
                 "non-finite number");
    return rc == RS_OK ? RS_OK : RS_EINVAL;
}

static rs_err check_messages(const json_t *m, char *err, size_t err_len)
{
    size_t i;
    json_t *v;
    if (!json_is_array(m) || json_array_size(m) == 0) {
        snprintf(err, err_len, "'messages': expected a non-empty array of message objects");
        return RS_EINVAL;
    }
    json_array_foreach (m, i, v)
        if (!json_is_object(v)) {
            snprintf(err, err_len, "'messages' item %zu: expected an object", i);
            return RS_EINVAL;
        }
    return RS_OK;
}

rs_err rs_client_chat_set(struct rs_client_chat *c, const json_t *conv,
                          struct rs_wire_generate *g, char *err, size_t err_len)
{
    const json_t *msgs = json_is_object(conv) ? json_object_get(conv, "messages") : conv;
    const json_t *tools = json_is_object(conv) ? json_object_get(conv, "tools") : NULL;
    const json_t *kw = json_is_object(conv) ? json_object_get(conv, "chat_template_kwargs") : NULL;
    g->has &= ~(RS_WIRE_GEN_MESSAGES | RS_WIRE_GEN_TOOLS | RS_WIRE_GEN_CHAT_TEMPLATE_KWARGS);
    if (check_messages(msgs, err, err_len) != RS_OK ||
        pack(&c->messages, msgs, "messages", RS_WIRE_MESSAGES_MAX, &g->messages, err,
             err_len) != RS_OK)
        return RS_EINVAL;
    g->has |= RS_WIRE_GEN_MESSAGES;
    if (tools != NULL && !json_is_null(tools)) {
        if (!json_is_array(tools)) {
            snprintf(err, err_len, "'tools': expected an array");
            return RS_EINVAL;
        }
        if (pack(&c->tools, tools, "tools", RS_WIRE_TOOLS_MAX, &g->tools, err, err_len) != RS_OK)
            return RS_EINVAL;
        g->has |= RS_WIRE_GEN_TOOLS;
    }
    if (kw != NULL && !json_is_null(kw)) {
        if (!json_is_object(kw)) {
            snprintf(err, err_len, "'chat_template_kwargs': expected an object");
            return RS_EINVAL;
        }
        if (pack(&c->kwargs, kw, "chat_template_kwargs", RS_WIRE_KWARGS_MAX,
                 &g->template_kwargs, err, err_len) != RS_OK)
            return RS_EINVAL;
        g->has |= RS_WIRE_GEN_CHAT_TEMPLATE_KWARGS;
    }
    return RS_OK;
}

rs_err rs_client_chat_parse(struct rs_client_chat *c, const char *text, size_t len,
                            struct rs_wire_generate *g, char *err, size_t err_len)
{
    json_error_t je;
    json_t *conv = json_loadb(text, len, JSON_PRESERVE_ORDER | JSON_REJECT_DUPLICATES, &je);
    if (conv == NULL) {
        snprintf(err, err_len, "not JSON: line %d column %d: %s", je.line, je.column, je.text);
        return RS_EINVAL;
    }
    rs_err rc = rs_client_chat_set(c, conv, g, err, err_len);
    json_decref(conv);
    return rc;
}

rs_err rs_client_chat_simple(struct rs_client_chat *c, const char *system, const char *user,
                             struct rs_wire_generate *g, char *err, size_t err_len)
{
    json_t *m = json_array();
    if (system != NULL)
        json_array_append_new(m, json_pack("{s:s,s:s}", "role", "system", "content", system));
    json_array_append_new(m, json_pack("{s:s,s:s}", "role", "user", "content", user));
    rs_err rc = json_array_size(m) == 1u + (system != NULL)
                    ? rs_client_chat_set(c, m, g, err, err_len) : RS_EINVAL;
    if (rc != RS_OK && json_array_size(m) != 1u + (system != NULL))
        snprintf(err, err_len, "--system/--user: not valid UTF-8 (or out of memory)");
    json_decref(m);
    return rc;
}

void rs_client_chat_fini(struct rs_client_chat *c)
{
    rs_wire_buf_fini(&c->messages);
    rs_wire_buf_fini(&c->tools);
    rs_wire_buf_fini(&c->kwargs);
}

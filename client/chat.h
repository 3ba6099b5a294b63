/* SPDX-License-Identifier: MIT */
/*
 * Conversations for a generate request (ipc/PROTOCOL.md §3.1 `messages`):
 * builds the packed `messages`, `tools` and `chat_template_kwargs` fields of
 * an rs_wire_generate from JSON (a conversation file, an OpenAI request's
 * parts, or a system + user pair), and owns the bytes the request's views
 * point at. The server renders them with the model's chat template; nothing
 * here knows templates.
 */
#ifndef RS_CLIENT_CHAT_H
#define RS_CLIENT_CHAT_H

#include <jansson.h>

#include "ipc/wire_client.h"

/* The packed documents of one conversation; zero it (or fini) before first use. */
struct rs_client_chat {
    struct rs_wire_buf messages, tools, kwargs;
};

/*
 * Sets g's messages (and tools, chat_template_kwargs when conv has them) from
 * conv: a JSON array of messages, or an object {"messages": [...], "tools":
 * [...], "chat_template_kwargs": {...}} (the layout of ringserve-template's
 * --messages files; other keys are ignored). The views in g borrow c until
 * it is set again or finished. RS_OK, or RS_EINVAL with err naming what is
 * wrong (not an array/object, a field of the wrong type, too deep or large
 * for the wire). Any thread; c is the caller's.
 */
rs_err rs_client_chat_set(struct rs_client_chat *c, const json_t *conv,
                          struct rs_wire_generate *g, char *err, size_t err_len);

/* Same from JSON text (len bytes). */
rs_err rs_client_chat_parse(struct rs_client_chat *c, const char *text, size_t len,
                            struct rs_wire_generate *g, char *err, size_t err_len);

/* A system message (when system is not NULL) and a user message, as rs_client_chat_set. */
rs_err rs_client_chat_simple(struct rs_client_chat *c, const char *system, const char *user,
                             struct rs_wire_generate *g, char *err, size_t err_len);

/* Frees the packed bytes; the struct may be set again. Accepts a zeroed struct. */
void rs_client_chat_fini(struct rs_client_chat *c);

#endif

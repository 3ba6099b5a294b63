/* SPDX-License-Identifier: MIT */
/*
 * What the two halves of the OpenAI request parser share (oai_parse.c: the
 * request and its sampling fields; oai_chat.c: messages and tools): typed
 * field readers that write the OpenAI error naming the field on a mismatch.
 */
#ifndef GW_OAI_IMPL_H
#define GW_OAI_IMPL_H

#include "gatewayd/oai.h"

/* "object", "array", "string", "integer", "number", "boolean", "null". */
const char *oai_type_name(const json_t *v);

/* obj[name], NULL when absent or null. */
json_t *oai_field(const json_t *obj, const char *name);

/* Typed reads of v as field `param`: 0, or -1 with e set. */
int oai_number(const json_t *v, const char *param, double *out, struct gw_err *e);
int oai_int(const json_t *v, const char *param, long long lo, long long hi, long long *out,
            struct gw_err *e);
int oai_bool(const json_t *v, const char *param, bool *out, struct gw_err *e);
int oai_string(const json_t *v, const char *param, const char **s, size_t *len, struct gw_err *e);

/* Chat fields: messages, tools, tool_choice, add_generation_prompt. */
int oai_parse_chat(const json_t *root, struct gw_oai_req *r, struct gw_err *e);

/*
 * The parsed chat request (messages, tools, the root's chat_template_kwargs)
 * packed for the wire into r->chat, with r->chat_gen's views and bits
 * (oai_conv.c). 0, or -1 with e set (400 naming the field, 500 out of memory).
 */
int oai_pack_conversation(const json_t *root, struct gw_oai_req *r, struct gw_err *e);
void oai_conversation_free(struct gw_oai_req *r);

#endif

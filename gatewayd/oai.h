/* SPDX-License-Identifier: MIT */
/*
 * An OpenAI API request (POST /v1/completions, /v1/chat/completions) parsed
 * from its JSON body and checked field by field, and the OpenAI error that
 * names what is wrong. The parser knows nothing of HTTP or the pipeline: it
 * is a pure function of the bytes (so tests/fuzz/fuzz_gateway_request.c can
 * drive it), bounded by the body size and the limits below. Unknown fields
 * are ignored as OpenAI does; null means absent for every optional field.
 * Structured output (response_format, logit_bias) and min_tokens are parsed
 * and validated here and mapped onto the wire's constraint fields in
 * constraint.c. A chat request's conversation is packed for the wire here
 * (oai_conv.c); tokenizerd renders it.
 */
#ifndef GW_OAI_H
#define GW_OAI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/wire_client.h"

struct rs_client_chat;

#define GW_MAX_CHOICES 64      /* n x prompts per request */
#define GW_MAX_PROMPTS 64      /* prompts in one completions request */
#define GW_MAX_MESSAGES 4096   /* chat messages */
#define GW_MAX_TOOLS 128       /* tools offered to the model */
#define GW_MAX_LOGIT_BIAS 1024 /* logit_bias entries */
#define GW_TOP_LOGPROBS_MAX RS_WIRE_LOGPROBS_MAX

/* An OpenAI-style error: HTTP status and the body's error object. */
struct gw_err {
    int status;       /* 400, 401, 404, 409, 413, 429, 500, 503 */
    const char *type; /* "invalid_request_error", ... (static) */
    const char *code; /* e.g. "model_not_found"; NULL = null (static) */
    char param[64];   /* the field, "" = null */
    char message[640];
};

/* Sets e to a 400 invalid_request_error naming `param` ("" for none). Returns -1. */
int gw_err_set(struct gw_err *e, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

enum gw_api { GW_API_COMPLETIONS = 0, GW_API_CHAT = 1 };

/* One completions prompt: text (borrowed from the JSON document) or token ids (owned). */
struct gw_prompt {
    bool is_ids;
    const char *text;
    size_t text_len;
    uint32_t *ids;
    uint32_t n_ids;
};

enum gw_role { GW_ROLE_SYSTEM, GW_ROLE_DEVELOPER, GW_ROLE_USER, GW_ROLE_ASSISTANT, GW_ROLE_TOOL };

/* "system", "developer", "user", "assistant", "tool". */
const char *gw_role_name(enum gw_role r);

struct gw_tool_call {
    const char *id, *name, *arguments; /* borrowed; arguments is the JSON text the model wrote */
};

/* One chat message; strings borrowed from the document. */
struct gw_message {
    enum gw_role role;
    char *content; /* the text parts joined (owned); NULL when content was null */
    size_t content_len;
    const char *name;                /* NULL = absent */
    const char *tool_call_id;        /* tool messages */
    struct gw_tool_call *tool_calls; /* assistant messages (owned array) */
    uint32_t n_tool_calls;
};

struct gw_tool {
    const char *name, *description; /* description NULL = absent */
    json_t *parameters;             /* JSON schema object (borrowed) or NULL */
};

enum gw_tool_choice { GW_TOOL_AUTO = 0, GW_TOOL_NONE, GW_TOOL_REQUIRED, GW_TOOL_NAMED };

enum gw_rf { GW_RF_NONE = 0, GW_RF_TEXT, GW_RF_JSON_OBJECT, GW_RF_JSON_SCHEMA };

struct gw_logit_bias {
    uint32_t token;
    float bias; /* [-100, 100] */
};

/*
 * A parsed request. `gen` holds every sampling field as the wire defines it
 * (has bits set for the ones given; prompt and stream unset: call.c fills
 * them per choice); its stop strings point into the document.
 */
struct gw_oai_req {
    enum gw_api api;
    json_t *root;              /* the document (owned); borrowed strings point into it */
    const char *model;         /* NULL = absent (the served model) */
    struct gw_prompt *prompts; /* completions: n_prompts >= 1 (owned array) */
    uint32_t n_prompts;
    struct gw_message *messages; /* chat: n_messages >= 1 (owned array) */
    uint32_t n_messages;
    struct gw_tool *tools;
    uint32_t n_tools;
    enum gw_tool_choice tool_choice;
    const char *tool_choice_name; /* GW_TOOL_NAMED */
    bool add_generation_prompt;   /* chat (vLLM extension), default true */
    uint32_t n;                   /* choices per prompt, 1.. */
    bool stream, include_usage, echo;
    struct rs_wire_generate gen;
    uint32_t min_tokens;   /* 0 = none */
    bool logprobs;         /* token logprobs wanted */
    uint32_t top_logprobs; /* alternatives per token, 0..20 */
    const char *user;      /* NULL = absent */
    enum gw_rf response_format;
    json_t *json_schema; /* GW_RF_JSON_SCHEMA: the schema object (borrowed) */
    char *json_schema_text; /* its JSON text, as the pipeline's constraint takes it (owned) */
    const char *json_schema_name;
    bool json_schema_strict;
    struct gw_logit_bias *logit_bias; /* owned array */
    uint32_t n_logit_bias;
    /* chat: the conversation packed for the wire (oai_conv.c); chat_gen's messages,
     * tools and template_kwargs views (and their has bits) point into *chat (owned) */
    struct rs_client_chat *chat;
    struct rs_wire_generate chat_gen;
};

/*
 * Parses body[0..len) as a request of `api`. Returns 0 with *out filled
 * (free with gw_oai_req_free), or -1 with e set (status 400, param naming
 * the field, e.g. "'temperature' must be a number in [0, 2], got 3.5"; a
 * JSON syntax error gives line and column). Any thread; allocates only what
 * *out owns.
 */
int gw_oai_parse(enum gw_api api, const char *body, size_t len, struct gw_oai_req *out,
                 struct gw_err *e);

/* Frees what r owns and zeroes it; accepts a zeroed r. */
void gw_oai_req_free(struct gw_oai_req *r);

/* Choices the request makes: n for each prompt (chat: one conversation). */
static inline uint32_t gw_oai_n_choices(const struct gw_oai_req *r)
{
    return r->n * (r->api == GW_API_CHAT ? 1u : r->n_prompts);
}

#endif

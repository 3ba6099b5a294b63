/* SPDX-License-Identifier: MIT */
/*
 * OpenAI's structured-output fields onto the pipeline's constraints
 * (ipc/wire_constraint.h): response_format json_object is the "json_object"
 * constraint, json_schema with a schema is "json_schema" with the schema's
 * JSON text (without one it is any JSON object, as OpenAI's json_object),
 * logit_bias maps token id -> bias one to one (the ranges were checked at
 * parse time; tokenizerd checks ids against the vocab). min_tokens is
 * refused: the pipeline cannot hold back EOS yet. Whether a schema is one
 * the grammar compiler takes is tokenizerd's answer at intake (invalid_param
 * naming the JSON pointer, a 400 here).
 */
#include <stddef.h>
#include <string.h>

#include "gatewayd/call_impl.h"

_Static_assert(sizeof(struct gw_logit_bias) == sizeof(struct rs_wire_bias) &&
                   offsetof(struct gw_logit_bias, token) == offsetof(struct rs_wire_bias, token) &&
                   offsetof(struct gw_logit_bias, bias) == offsetof(struct rs_wire_bias, bias),
               "the parsed logit_bias entries are the wire's");

int gw_sampling_constraints(const struct gw_oai_req *p, struct rs_wire_generate *g,
                            struct gw_err *e)
{
    if (p->response_format == GW_RF_JSON_SCHEMA && p->json_schema_text != NULL) {
        g->has |= RS_WIRE_GEN_CONSTRAINT;
        g->cx.kind = RS_WIRE_CX_JSON_SCHEMA;
        g->cx.text = (struct rs_wire_str){p->json_schema_text,
                                          (uint32_t)strlen(p->json_schema_text)};
    } else if (p->response_format == GW_RF_JSON_OBJECT ||
               p->response_format == GW_RF_JSON_SCHEMA) {
        g->has |= RS_WIRE_GEN_CONSTRAINT;
        g->cx.kind = RS_WIRE_CX_JSON_OBJECT;
    }
    if (p->n_logit_bias > 0) {
        g->has |= RS_WIRE_GEN_LOGIT_BIAS;
        g->cx.n_bias = p->n_logit_bias;
        g->cx.bias = (const struct rs_wire_bias *)p->logit_bias;
    }
    if (p->min_tokens > 0) {
        g->has |= RS_WIRE_GEN_MIN_TOKENS;
        g->cx.min_tokens = p->min_tokens;
    }
    (void)e;
    return 0;
}

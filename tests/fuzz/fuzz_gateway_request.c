/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: gatewayd's OpenAI request parser (gatewayd/oai.h) and
 * its hand-off to the wire (gw_call_prepare). The first byte picks the API
 * (even: completions, odd: chat), the rest is the HTTP body. Any input must
 * either parse -- and then every choice's generate is one the wire encoder
 * accepts, or the hand-off refuses it with a 400 naming a field -- or be
 * refused with a 4xx/5xx error whose OpenAI body serializes. Seeds:
 * tests/fuzz/corpus/gateway_request (a digit, then JSON).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gatewayd/call_impl.h"
#include "gatewayd/format.h"
#include "gatewayd/oai.h"

#define FUZZ_ASSERT(c)                                                                             \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c);                                \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void check_error(const struct gw_err *e)
{
    FUZZ_ASSERT(e->status >= 400 && e->status < 600 && e->message[0] != '\0');
    json_t *o = gw_fmt_error(e);
    char *s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    FUZZ_ASSERT(s != NULL);
    free(s);
    json_decref(o);
}

/* Every choice's generate encodes (the wire accepts what the parser let through). */
static void check_generates(const struct gw_oai_req *r)
{
    static struct rs_wire_client_msg m;
    struct rs_wire_buf buf;
    struct gw_err e;
    rs_wire_buf_init(&buf, RS_WIRE_CLIENT_MSG_MAX);
    FUZZ_ASSERT(gw_oai_n_choices(r) >= 1 && gw_oai_n_choices(r) <= GW_MAX_CHOICES);
    for (uint32_t p = 0; p < (r->api == GW_API_CHAT ? 1 : r->n_prompts); p++) {
        memset(&e, 0, sizeof(e));
        memset(&m, 0, sizeof(m));
        if (gw_call_prepare(r, p, &m.u.gen, &e) != 0) {
            FUZZ_ASSERT(e.status == 400 && e.param[0] != '\0');
            check_error(&e);
            continue;
        }
        m.type = RS_WIRE_T_GENERATE;
        snprintf(m.id, sizeof(m.id), "kfuzz.%u", p);
        FUZZ_ASSERT(rs_wire_client_encode(&m, &buf) == RS_OK);
    }
    rs_wire_buf_fini(&buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gw_oai_req r;
    struct gw_err e;
    if (size == 0)
        return 0;
    enum gw_api api = (data[0] & 1) ? GW_API_CHAT : GW_API_COMPLETIONS;
    memset(&e, 0, sizeof(e));
    if (gw_oai_parse(api, (const char *)data + 1, size - 1, &r, &e) != 0) {
        check_error(&e);
        return 0;
    }
    check_generates(&r);
    gw_oai_req_free(&r);
    return 0;
}

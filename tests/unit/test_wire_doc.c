/* SPDX-License-Identifier: MIT */
/*
 * Conversation documents on the wire (ipc/wire_doc.h): JSON packed by the
 * client side, carried in a generate, decoded in place and turned back into
 * the same JSON (key order, integer vs real kept); the encoder refusing bytes
 * the decoder would reject; duplicate keys caught on conversion.
 */
#include <string.h>

#include "ipc/wire_client.h"
#include "ipc/wire_doc.h"
#include "tests/rs_test.h"

static const char *const CONV =
    "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"h\\u00e9\"}],"
    "\"n\":-3,\"x\":1.5},"
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
    "\"function\":{\"name\":\"f\",\"arguments\":{\"z\":1,\"a\":true}}}]}]";

static int test_messages_round_trip_as_json(void)
{
    json_t *in = json_loads(CONV, JSON_PRESERVE_ORDER, NULL), *kw = json_pack("{s:b}", "t", 0);
    struct rs_wire_buf docbuf, kwbuf, msg;
    struct rs_wire_client_msg m = {.type = RS_WIRE_T_GENERATE}, out;
    struct rs_wire_error err;
    RS_CHECK(in != NULL && kw != NULL);
    rs_wire_buf_init(&docbuf, RS_WIRE_CLIENT_MSG_MAX);
    rs_wire_buf_init(&kwbuf, RS_WIRE_CLIENT_MSG_MAX);
    rs_wire_buf_init(&msg, RS_WIRE_CLIENT_MSG_MAX);
    strcpy(m.id, "chat-1");
    rs_wire_generate_init(&m.u.gen);
    RS_CHECK(rs_wire_doc_pack(in, &docbuf, &m.u.gen.messages) == RS_OK);
    RS_CHECK(rs_wire_doc_pack(kw, &kwbuf, &m.u.gen.template_kwargs) == RS_OK);
    m.u.gen.add_generation_prompt = false;
    m.u.gen.has = RS_WIRE_GEN_MESSAGES | RS_WIRE_GEN_CHAT_TEMPLATE_KWARGS |
                  RS_WIRE_GEN_ADD_GENERATION_PROMPT;
    RS_CHECK(rs_wire_client_encode(&m, &msg) == RS_OK);
    RS_CHECK_MSG(rs_wire_client_decode(msg.data, msg.len, &out, &err) == RS_OK, "%s", err.msg);
    struct rs_wire_limits lim = {0};
    RS_CHECK_MSG(rs_wire_generate_validate(&out.u.gen, &lim, &err) == RS_OK, "%s", err.msg);
    RS_CHECK(out.u.gen.messages.n == 3 && !out.u.gen.add_generation_prompt);
    json_t *back = NULL;
    char why[128];
    RS_CHECK(rs_wire_doc_to_json(&out.u.gen.messages, &back, why, sizeof(why)) == RS_OK);
    char *a = json_dumps(in, JSON_PRESERVE_ORDER | JSON_COMPACT);
    char *b = json_dumps(back, JSON_PRESERVE_ORDER | JSON_COMPACT);
    RS_CHECK_MSG(strcmp(a, b) == 0, "%s\nvs\n%s", a, b); /* same keys in the same order */
    RS_CHECK(json_is_integer(json_object_get(json_array_get(back, 1), "n")));
    RS_CHECK(json_is_real(json_object_get(json_array_get(back, 1), "x")));
    free(a);
    free(b);
    json_decref(back);
    json_decref(in);
    json_decref(kw);
    rs_wire_buf_fini(&docbuf);
    rs_wire_buf_fini(&kwbuf);
    rs_wire_buf_fini(&msg);
    return 0;
}

static int test_encoder_refuses_bad_documents(void)
{
    struct rs_wire_client_msg m = {.type = RS_WIRE_T_GENERATE};
    struct rs_wire_buf msg;
    static const uint8_t not_maps[] = {0x91, 0xa1, 'x'};       /* ["x"] */
    static const uint8_t bin[] = {0x91, 0x81, 0xa1, 'k', 0xc4, 0}; /* [{"k": bin}] */
    static const uint8_t short_[] = {0x92, 0x80};             /* claims 2, has 1 */
    const struct rs_wire_doc docs[] = {{1, not_maps, sizeof(not_maps)}, {1, bin, sizeof(bin)},
                                       {2, short_, sizeof(short_)}, {1, NULL, 0}};
    rs_wire_buf_init(&msg, RS_WIRE_CLIENT_MSG_MAX);
    strcpy(m.id, "c");
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        rs_wire_generate_init(&m.u.gen);
        m.u.gen.has = RS_WIRE_GEN_MESSAGES;
        m.u.gen.messages = docs[i];
        RS_CHECK_MSG(rs_wire_client_encode(&m, &msg) == RS_EINVAL, "doc %zu", i);
    }
    json_t *scalar = json_string("hi");
    RS_CHECK(rs_wire_doc_pack(scalar, &msg, &m.u.gen.messages) == RS_EINVAL);
    json_decref(scalar);
    json_t *deep = json_array();
    for (int i = 0; i < RS_WIRE_DOC_DEPTH_MAX; i++)
        deep = json_pack("[o]", deep);
    RS_CHECK(rs_wire_doc_pack(deep, &msg, &m.u.gen.messages) == RS_EINVAL);
    json_decref(deep);
    /* more values than the decoder takes, and an over-long key: refused when packing too */
    json_t *wide = json_array();
    for (uint32_t i = 0; i < RS_WIRE_DOC_NODES_MAX; i++)
        json_array_append_new(wide, json_integer(i));
    RS_CHECK(rs_wire_doc_pack(wide, &msg, &m.u.gen.messages) == RS_EINVAL);
    json_array_remove(wide, 0);
    RS_CHECK(rs_wire_doc_pack(wide, &msg, &m.u.gen.messages) == RS_OK); /* exactly the limit */
    json_decref(wide);
    char key[RS_WIRE_DOC_KEY_MAX + 2];
    memset(key, 'k', sizeof(key) - 1);
    key[sizeof(key) - 1] = '\0';
    json_t *longkey = json_pack("[{s:i}]", key, 1);
    RS_CHECK(rs_wire_doc_pack(longkey, &msg, &m.u.gen.messages) == RS_EINVAL);
    json_decref(longkey);
    rs_wire_buf_fini(&msg);
    return 0;
}

static int test_duplicate_key_named_on_conversion(void)
{
    /* [{"role": "user", "role": "x"}]: valid msgpack a Python dict never produces */
    static const uint8_t dup[] = {0x91, 0x82, 0xa4, 'r', 'o', 'l', 'e', 0xa4, 'u', 's', 'e', 'r',
                                  0xa4, 'r', 'o', 'l', 'e', 0xa1, 'x'};
    struct rs_wire_doc d = {1, dup, sizeof(dup)};
    json_t *out = NULL;
    char why[128];
    RS_CHECK(rs_wire_doc_to_json(&d, &out, why, sizeof(why)) == RS_EINVAL && out == NULL);
    RS_CHECK_MSG(strcmp(why, "key 'role' given twice in one map") == 0, "%s", why);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_messages_round_trip_as_json),
    RS_TEST(test_encoder_refuses_bad_documents),
    RS_TEST(test_duplicate_key_named_on_conversion),
};

RS_TEST_MAIN(cases)

/* SPDX-License-Identifier: MIT */
/*
 * Wire protocol: round trips of every message type, strict decoding (each
 * error code with the exact message naming the field), validation ranges,
 * limits, and the committed corpora (packed by Python's msgpack) decoding as
 * their file names say. Messages under test are packed with msgpack-c's own
 * packer, independent of our encoder.
 */
#include <dirent.h>
#include <math.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "ipc/wire_client.h"
#include "ipc/wire_door.h"
#include "ipc/wire_server.h"
#include "tests/fuzz/wire_eq.h"
#include "tests/rs_test.h"

/* A message packed by msgpack-c, for inputs our encoder would never produce. */
struct mb {
    msgpack_sbuffer sb;
    msgpack_packer pk;
};

static void mb_init(struct mb *m)
{
    msgpack_sbuffer_init(&m->sb);
    msgpack_packer_init(&m->pk, &m->sb, msgpack_sbuffer_write);
}

static void mb_str(struct mb *m, const char *s)
{
    msgpack_pack_str_with_body(&m->pk, s, strlen(s));
}

/* {"v":RS_WIRE_VERSION,"type":"generate","id":"r1","prompt":"hi", <n_extra more pairs follow>} */
static void mb_generate(struct mb *m, uint32_t n_extra)
{
    mb_init(m);
    msgpack_pack_map(&m->pk, 4 + n_extra);
    mb_str(m, "v");
    msgpack_pack_int(&m->pk, RS_WIRE_VERSION);
    mb_str(m, "type");
    mb_str(m, "generate");
    mb_str(m, "id");
    mb_str(m, "r1");
    mb_str(m, "prompt");
    mb_str(m, "hi");
}

/* Decodes (and, when decoding passes, validates) and checks the verdict and exact message. */
static int expect_client(struct mb *m, enum rs_wire_code code, const char *msg)
{
    struct rs_wire_client_msg out;
    struct rs_wire_error err;
    struct rs_wire_limits lim = {.n_ctx = 2048, .n_vocab = 32000};
    rs_err e = rs_wire_client_decode(m->sb.data, m->sb.size, &out, &err);
    if (e == RS_OK && out.type == RS_WIRE_T_GENERATE)
        e = rs_wire_generate_validate(&out.u.gen, &lim, &err);
    msgpack_sbuffer_destroy(&m->sb);
    if (code == RS_WIRE_OK) {
        RS_CHECK_MSG(e == RS_OK, "unexpected %s: %s", rs_wire_code_name(err.code), err.msg);
        return 0;
    }
    RS_CHECK_MSG(e != RS_OK && err.code == code, "wanted %s, got %s: %s",
                 rs_wire_code_name(code), rs_wire_code_name(err.code), err.msg);
    RS_CHECK_MSG(msg == NULL || strcmp(err.msg, msg) == 0, "message '%s', wanted '%s'", err.msg,
                 msg);
    return 0;
}

static void fill_generate(struct rs_wire_client_msg *m, const uint32_t *ids, uint32_t n_ids)
{
    memset(m, 0, sizeof(*m));
    m->type = RS_WIRE_T_GENERATE;
    strcpy(m->id, "req-42");
    struct rs_wire_generate *g = &m->u.gen;
    rs_wire_generate_init(g);
    g->has = 0x1ffffu & ~RS_WIRE_GEN_PROMPT; /* every optional field but the text prompt */
    g->prompt_ids = (struct rs_wire_ids){.n = n_ids, .vals = ids};
    g->max_tokens = 300;
    g->temperature = 0.7f;
    g->top_p = 0.95f;
    g->top_k = 40;
    g->min_p = 0.05f;
    g->repetition_penalty = 1.1f;
    g->presence_penalty = -0.5f;
    g->frequency_penalty = 0.25f;
    g->seed = UINT64_MAX;
    g->n_stop = 2;
    g->stop[0] = (struct rs_wire_str){"\n\n", 2};
    g->stop[1] = (struct rs_wire_str){"日本", 6};
    g->n_stop_ids = 3;
    g->stop_ids[0] = 2;
    g->stop_ids[1] = 0;
    g->stop_ids[2] = RS_WIRE_TOKEN_MAX;
    g->ignore_eos = true;
    g->logprobs = 20;
    g->stream = true;
    g->priority = INT32_MIN;
}

static int test_generate_round_trip_every_field(void)
{
    uint32_t ids[] = {1, 0, 127, 128, 65535, 65536, RS_WIRE_TOKEN_MAX};
    struct rs_wire_client_msg in, out, again;
    struct rs_wire_error err;
    struct rs_wire_buf buf, buf2;
    fill_generate(&in, ids, 7);
    rs_wire_buf_init(&buf, RS_WIRE_CLIENT_MSG_MAX);
    rs_wire_buf_init(&buf2, RS_WIRE_CLIENT_MSG_MAX);
    RS_CHECK(rs_wire_client_encode(&in, &buf) == RS_OK);
    RS_CHECK_MSG(rs_wire_client_decode(buf.data, buf.len, &out, &err) == RS_OK, "%s", err.msg);
    RS_CHECK(out.type == RS_WIRE_T_GENERATE && strcmp(out.id, "req-42") == 0);
    RS_CHECK(out.u.gen.prompt_ids.vals == NULL && out.u.gen.prompt_ids.packed != NULL);
    RS_CHECK(weq_generate(&in.u.gen, &out.u.gen));
    uint32_t back[7];
    RS_CHECK(rs_wire_ids_copy(&out.u.gen.prompt_ids, back, 7) == 7);
    RS_CHECK(memcmp(back, ids, sizeof(ids)) == 0);
    /* Re-encoding a decoded message gives the same bytes. */
    RS_CHECK(rs_wire_client_encode(&out, &buf2) == RS_OK);
    RS_CHECK(buf2.len == buf.len && memcmp(buf.data, buf2.data, buf.len) == 0);
    RS_CHECK(rs_wire_client_decode(buf2.data, buf2.len, &again, &err) == RS_OK);
    RS_CHECK(weq_client(&out, &again));
    rs_wire_buf_fini(&buf);
    rs_wire_buf_fini(&buf2);
    return 0;
}

static int test_generate_defaults_when_absent(void)
{
    struct mb m;
    struct rs_wire_client_msg out;
    struct rs_wire_error err;
    mb_generate(&m, 0);
    RS_CHECK(rs_wire_client_decode(m.sb.data, m.sb.size, &out, &err) == RS_OK);
    const struct rs_wire_generate *g = &out.u.gen;
    RS_CHECK(g->has == RS_WIRE_GEN_PROMPT);
    RS_CHECK(g->prompt.len == 2 && memcmp(g->prompt.ptr, "hi", 2) == 0);
    RS_CHECK(g->prompt.ptr > m.sb.data && g->prompt.ptr < m.sb.data + m.sb.size); /* a view */
    RS_CHECK(g->max_tokens == 0 && g->temperature == 1.0f && g->top_p == 1.0f && g->top_k == 0);
    RS_CHECK(g->min_p == 0 && g->repetition_penalty == 1.0f && g->presence_penalty == 0);
    RS_CHECK(g->frequency_penalty == 0 && g->n_stop == 0 && g->n_stop_ids == 0);
    RS_CHECK(!g->ignore_eos && !g->stream && g->logprobs == 0 && g->priority == 0);
    struct rs_wire_limits lim = {0};
    RS_CHECK(rs_wire_generate_validate(g, &lim, &err) == RS_OK);
    msgpack_sbuffer_destroy(&m.sb);
    return 0;
}

static int test_unknown_field_named(void)
{
    struct mb m;
    struct rs_wire_client_msg out;
    struct rs_wire_error err;
    mb_generate(&m, 1);
    mb_str(&m, "foo");
    msgpack_pack_int(&m.pk, 1);
    RS_CHECK(rs_wire_client_decode(m.sb.data, m.sb.size, &out, &err) == RS_EPROTO);
    RS_CHECK(err.code == RS_WIRE_UNKNOWN_FIELD && strcmp(err.msg, "unknown field 'foo'") == 0);
    RS_CHECK(strcmp(out.id, "r1") == 0); /* the error reply can still name the request */
    msgpack_sbuffer_destroy(&m.sb);
    /* A key that is not printable is quoted safely in the message. */
    mb_generate(&m, 1);
    msgpack_pack_str_with_body(&m.pk, "a\x01'b", 4);
    msgpack_pack_int(&m.pk, 1);
    return expect_client(&m, RS_WIRE_UNKNOWN_FIELD, "unknown field 'a??b'");
}

static int test_wrong_type_names_field_and_types(void)
{
    struct mb m;
    mb_generate(&m, 1);
    mb_str(&m, "top_p");
    mb_str(&m, "0.9");
    if (expect_client(&m, RS_WIRE_WRONG_TYPE, "field 'top_p': expected float, got string"))
        return 1;
    mb_generate(&m, 1);
    mb_str(&m, "stream");
    msgpack_pack_int(&m.pk, 1); /* booleans are strict */
    if (expect_client(&m, RS_WIRE_WRONG_TYPE, "field 'stream': expected boolean, got integer"))
        return 1;
    mb_generate(&m, 1);
    mb_str(&m, "max_tokens");
    msgpack_pack_double(&m.pk, 16.0);
    if (expect_client(&m, RS_WIRE_WRONG_TYPE, "field 'max_tokens': expected integer, got float"))
        return 1;
    mb_generate(&m, 1);
    mb_str(&m, "stop");
    msgpack_pack_array(&m.pk, 2);
    mb_str(&m, "ok");
    msgpack_pack_nil(&m.pk);
    return expect_client(&m, RS_WIRE_WRONG_TYPE, "field 'stop' item 1: expected string, got nil");
}

static int test_missing_and_duplicate_fields(void)
{
    struct mb m;
    mb_init(&m);
    msgpack_pack_map(&m.pk, 3);
    mb_str(&m, "type");
    mb_str(&m, "generate");
    mb_str(&m, "v");
    msgpack_pack_int(&m.pk, RS_WIRE_VERSION);
    mb_str(&m, "prompt");
    mb_str(&m, "x");
    if (expect_client(&m, RS_WIRE_MISSING_FIELD, "missing field 'id'"))
        return 1;
    mb_init(&m);
    msgpack_pack_map(&m.pk, 1);
    mb_str(&m, "type");
    mb_str(&m, "hello");
    if (expect_client(&m, RS_WIRE_MISSING_FIELD, "missing field 'v'"))
        return 1;
    mb_generate(&m, 1);
    mb_str(&m, "prompt");
    mb_str(&m, "again");
    return expect_client(&m, RS_WIRE_BAD_REQUEST, "field 'prompt' given twice");
}

static int test_floats_accept_ints_and_float32(void)
{
    struct mb m;
    struct rs_wire_client_msg out;
    struct rs_wire_error err;
    mb_generate(&m, 4);
    mb_str(&m, "temperature");
    msgpack_pack_int(&m.pk, 2);
    mb_str(&m, "top_p");
    msgpack_pack_float(&m.pk, 0.5f);
    mb_str(&m, "presence_penalty");
    msgpack_pack_int(&m.pk, -1);
    mb_str(&m, "min_p");
    msgpack_pack_double(&m.pk, 0.1);
    RS_CHECK_MSG(rs_wire_client_decode(m.sb.data, m.sb.size, &out, &err) == RS_OK, "%s", err.msg);
    RS_CHECK(out.u.gen.temperature == 2.0f && out.u.gen.top_p == 0.5f);
    RS_CHECK(out.u.gen.presence_penalty == -1.0f && out.u.gen.min_p == 0.1f);
    msgpack_sbuffer_destroy(&m.sb);
    /* A float64 beyond float range becomes infinity, which validation refuses. */
    mb_generate(&m, 1);
    mb_str(&m, "temperature");
    msgpack_pack_double(&m.pk, 1e300);
    return expect_client(&m, RS_WIRE_INVALID_PARAM,
                         "field 'temperature': must be finite and >= 0, got inf");
}

static int test_integers_any_width_in_range(void)
{
    static const uint8_t widths[][10] = {
        {1, 0x07},       {2, 0xcc, 7},       {3, 0xcd, 0, 7},         {5, 0xce, 0, 0, 0, 7},
        {2, 0xd0, 7},    {3, 0xd1, 0, 7},    {5, 0xd2, 0, 0, 0, 7},
        {9, 0xcf, 0, 0, 0, 0, 0, 0, 0, 7},   {9, 0xd3, 0, 0, 0, 0, 0, 0, 0, 7},
    };
    for (size_t i = 0; i < sizeof(widths) / sizeof(widths[0]); i++) {
        struct mb m;
        struct rs_wire_client_msg out;
        struct rs_wire_error err;
        mb_generate(&m, 1);
        mb_str(&m, "max_tokens");
        msgpack_sbuffer_write(&m.sb, (const char *)&widths[i][1], widths[i][0]);
        rs_err e = rs_wire_client_decode(m.sb.data, m.sb.size, &out, &err);
        msgpack_sbuffer_destroy(&m.sb);
        RS_CHECK_MSG(e == RS_OK && out.u.gen.max_tokens == 7, "width %zu: %s", i, err.msg);
    }
    struct mb m;
    mb_generate(&m, 1);
    mb_str(&m, "max_tokens");
    msgpack_pack_int64(&m.pk, -1);
    if (expect_client(&m, RS_WIRE_INVALID_PARAM, "field 'max_tokens': -1 out of range 0..4294967295"))
        return 1;
    mb_generate(&m, 1);
    mb_str(&m, "seed");
    msgpack_pack_uint64(&m.pk, UINT64_MAX);
    return expect_client(&m, RS_WIRE_OK, NULL);
}

static int test_limits_on_sizes(void)
{
    struct mb m;
    mb_generate(&m, 1);
    mb_str(&m, "stop");
    msgpack_pack_array(&m.pk, 17);
    for (int i = 0; i < 17; i++)
        mb_str(&m, "s");
    if (expect_client(&m, RS_WIRE_TOO_LARGE, "field 'stop': 17 items, at most 16"))
        return 1;
    char big[RS_WIRE_STOP_LEN_MAX + 2];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    mb_generate(&m, 1);
    mb_str(&m, "stop");
    msgpack_pack_array(&m.pk, 1);
    mb_str(&m, big);
    if (expect_client(&m, RS_WIRE_TOO_LARGE, "field 'stop' item 0: string of 257 bytes, at most 256"))
        return 1;
    /* A prompt one byte over the limit. */
    char *prompt = malloc(RS_WIRE_PROMPT_MAX + 2);
    RS_CHECK(prompt != NULL);
    memset(prompt, 'a', RS_WIRE_PROMPT_MAX + 1);
    prompt[RS_WIRE_PROMPT_MAX + 1] = '\0';
    mb_init(&m);
    msgpack_pack_map(&m.pk, 4);
    mb_str(&m, "v");
    msgpack_pack_int(&m.pk, RS_WIRE_VERSION);
    mb_str(&m, "type");
    mb_str(&m, "generate");
    mb_str(&m, "id");
    mb_str(&m, "r1");
    mb_str(&m, "prompt");
    mb_str(&m, prompt);
    free(prompt);
    return expect_client(&m, RS_WIRE_TOO_LARGE,
                         "field 'prompt': string of 1048577 bytes, at most 1048576");
}

static int test_version_checked_before_fields(void)
{
    struct mb m;
    mb_init(&m);
    msgpack_pack_map(&m.pk, 3);
    mb_str(&m, "new_in_v3");
    msgpack_pack_true(&m.pk);
    mb_str(&m, "type");
    mb_str(&m, "generate");
    mb_str(&m, "v");
    msgpack_pack_int(&m.pk, RS_WIRE_VERSION + 1);
    if (expect_client(&m, RS_WIRE_UNSUPPORTED_VERSION,
                      "field 'v': protocol version 3 is not supported (this server speaks 2)"))
        return 1;
    mb_init(&m);
    msgpack_pack_map(&m.pk, 2);
    mb_str(&m, "v");
    msgpack_pack_int(&m.pk, RS_WIRE_VERSION);
    mb_str(&m, "type");
    mb_str(&m, "ack");
    return expect_client(&m, RS_WIRE_BAD_REQUEST,
                         "field 'type': 'ack' is not a message a client sends");
}

static int test_every_truncation_rejected(void)
{
    uint32_t ids[] = {1, 2, 3};
    struct rs_wire_client_msg in, out;
    struct rs_wire_error err;
    struct rs_wire_buf buf;
    fill_generate(&in, ids, 3);
    rs_wire_buf_init(&buf, RS_WIRE_CLIENT_MSG_MAX);
    RS_CHECK(rs_wire_client_encode(&in, &buf) == RS_OK);
    for (size_t len = 0; len < buf.len; len++) {
        uint8_t *copy = malloc(len + 1); /* exact size, so ASan sees any overread */
        memcpy(copy, buf.data, len);
        rs_err e = rs_wire_client_decode(copy, len, &out, &err);
        free(copy);
        RS_CHECK_MSG(e == RS_EPROTO && err.code == RS_WIRE_BAD_REQUEST, "prefix %zu", len);
    }
    uint8_t *longer = malloc(buf.len + 1);
    memcpy(longer, buf.data, buf.len);
    longer[buf.len] = 0xc0;
    rs_err e = rs_wire_client_decode(longer, buf.len + 1, &out, &err);
    free(longer);
    RS_CHECK(e == RS_EPROTO && strcmp(err.msg, "1 trailing bytes after the message") == 0);
    rs_wire_buf_fini(&buf);
    return 0;
}

static int test_hostile_shapes_rejected_cheaply(void)
{
    struct mb m;
    /* Nesting 64 deep under an unknown key: skipped iteratively, cut at the depth limit. */
    mb_generate(&m, 1);
    mb_str(&m, "x");
    for (int i = 0; i < 64; i++)
        msgpack_pack_array(&m.pk, 1);
    msgpack_pack_nil(&m.pk);
    if (expect_client(&m, RS_WIRE_TOO_LARGE, "nested deeper than 32 levels"))
        return 1;
    /* Claims of 4 G items or bytes in a short message. */
    static const uint8_t claims[][12] = {
        {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'v', 0x01},
        {0x81, 0xa1, 'x', 0xdd, 0xff, 0xff, 0xff, 0xff, 0x01},
        {0x81, 0xa1, 'x', 0xdb, 0xff, 0xff, 0xff, 0xff, 'a'},
        {0x81, 0xa1, 'x', 0xc9, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02},
    };
    for (size_t i = 0; i < sizeof(claims) / sizeof(claims[0]); i++) {
        struct rs_wire_client_msg out;
        struct rs_wire_error err;
        RS_CHECK(rs_wire_client_decode(claims[i], 10, &out, &err) == RS_EPROTO);
        RS_CHECK_MSG(strstr(err.msg, "truncated") != NULL, "claim %zu: %s", i, err.msg);
    }
    return 0;
}

static int test_utf8_strict(void)
{
    static const struct {
        const char *s;
        size_t len, bad_at;
    } cases[] = {
        {"plain ascii text", 16, 16},     {"h\xc3\xa9llo", 6, 6},
        {"\xf0\x9f\xa6\x99", 4, 4},       {"\xef\xbf\xbf", 3, 3},
        {"ab\xc0\xaf", 4, 2},             /* overlong '/' */
        {"\xe0\x80\xaf", 3, 0},           /* overlong 3-byte */
        {"\xed\xa0\x80", 3, 0},           /* surrogate U+D800 */
        {"\xf4\x90\x80\x80", 4, 0},       /* past U+10FFFF */
        {"abcdefgh\xc3", 9, 8},           /* cut sequence after the ASCII fast path */
        {"\x80", 1, 0},                   /* lone continuation */
        {"a\0b", 3, 3},                   /* NUL is valid UTF-8 */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        RS_CHECK_MSG(rs_utf8_valid_prefix(cases[i].s, cases[i].len) == cases[i].bad_at, "case %zu",
                     i);
    struct mb m;
    mb_generate(&m, 1);
    mb_str(&m, "stop");
    msgpack_pack_array(&m.pk, 1);
    msgpack_pack_str_with_body(&m.pk, "\xed\xa0\x80", 3);
    return expect_client(&m, RS_WIRE_BAD_REQUEST, "field 'stop' item 0: invalid UTF-8 at byte 0");
}

/* One generate field set to a bad value, and the validator's exact verdict. */
static int check_param(const char *key, double val, enum rs_wire_code code, const char *msg)
{
    struct mb m;
    mb_generate(&m, 1);
    mb_str(&m, key);
    msgpack_pack_double(&m.pk, val);
    return expect_client(&m, code, msg);
}

static int test_validation_ranges_name_field(void)
{
    if (check_param("temperature", -0.1, RS_WIRE_INVALID_PARAM,
                    "field 'temperature': must be finite and >= 0, got -0.1") ||
        check_param("temperature", NAN, RS_WIRE_INVALID_PARAM,
                    "field 'temperature': must be finite and >= 0, got nan") ||
        check_param("top_p", 0, RS_WIRE_INVALID_PARAM, "field 'top_p': must be in (0, 1], got 0") ||
        check_param("top_p", 1.5, RS_WIRE_INVALID_PARAM,
                    "field 'top_p': must be in (0, 1], got 1.5") ||
        check_param("min_p", -0.5, RS_WIRE_INVALID_PARAM,
                    "field 'min_p': must be in [0, 1], got -0.5") ||
        check_param("repetition_penalty", 0, RS_WIRE_INVALID_PARAM,
                    "field 'repetition_penalty': must be finite and > 0, got 0") ||
        check_param("presence_penalty", 2.5, RS_WIRE_INVALID_PARAM,
                    "field 'presence_penalty': must be in [-2, 2], got 2.5") ||
        check_param("frequency_penalty", -3, RS_WIRE_INVALID_PARAM,
                    "field 'frequency_penalty': must be in [-2, 2], got -3") ||
        check_param("temperature", 0, RS_WIRE_OK, NULL) ||
        check_param("top_p", 1, RS_WIRE_OK, NULL) ||
        check_param("presence_penalty", -2, RS_WIRE_OK, NULL))
        return 1;
    struct mb m;
    mb_generate(&m, 1);
    mb_str(&m, "top_k");
    msgpack_pack_int(&m.pk, -1);
    if (expect_client(&m, RS_WIRE_INVALID_PARAM, "field 'top_k': must be >= 0 (0 = off), got -1"))
        return 1;
    mb_generate(&m, 1);
    mb_str(&m, "logprobs");
    msgpack_pack_int(&m.pk, 21);
    if (expect_client(&m, RS_WIRE_INVALID_PARAM, "field 'logprobs': must be 0..20, got 21"))
        return 1;
    mb_generate(&m, 1);
    mb_str(&m, "max_tokens");
    msgpack_pack_int(&m.pk, 0);
    return expect_client(&m, RS_WIRE_INVALID_PARAM,
                         "field 'max_tokens': must be >= 1 (omit it to fill the context)");
}

static int test_validation_prompt_rules(void)
{
    struct rs_wire_client_msg m;
    struct rs_wire_error err;
    uint32_t ids[5] = {1, 2, 3, 4, 31999};
    struct rs_wire_limits lim = {.n_ctx = 5, .n_vocab = 32000};
    fill_generate(&m, ids, 5);
    struct rs_wire_generate *g = &m.u.gen;
    g->stop_ids[2] = 31999;
    RS_CHECK(rs_wire_generate_validate(g, &lim, &err) == RS_EINVAL);
    RS_CHECK(err.code == RS_WIRE_PROMPT_TOO_LONG);
    RS_CHECK(strcmp(err.msg, "prompt is 5 tokens; the model's context is 5 tokens, which leaves "
                             "no room to generate") == 0);
    lim.n_ctx = 6;
    RS_CHECK(rs_wire_generate_validate(g, &lim, &err) == RS_OK);
    ids[4] = 32000;
    RS_CHECK(rs_wire_generate_validate(g, &lim, &err) == RS_EINVAL);
    RS_CHECK(strcmp(err.msg, "field 'prompt_ids' item 4: token 32000 not below the vocabulary "
                             "size 32000") == 0);
    ids[4] = 7;
    g->stop_ids[2] = 40000;
    RS_CHECK(rs_wire_generate_validate(g, &lim, &err) == RS_EINVAL);
    RS_CHECK(strstr(err.msg, "field 'stop_token_ids' item 2: token 40000") != NULL);
    g->stop_ids[2] = 1;
    g->has |= RS_WIRE_GEN_PROMPT;
    RS_CHECK(rs_wire_generate_validate(g, &lim, &err) == RS_EINVAL);
    RS_CHECK(err.code == RS_WIRE_INVALID_PARAM &&
             strcmp(err.msg, "give one of 'prompt', 'prompt_ids' and 'messages'") == 0);
    g->has &= ~(RS_WIRE_GEN_PROMPT | RS_WIRE_GEN_PROMPT_IDS);
    RS_CHECK(rs_wire_generate_validate(g, &lim, &err) == RS_EINVAL);
    RS_CHECK(err.code == RS_WIRE_MISSING_FIELD);
    g->has |= RS_WIRE_GEN_PROMPT; /* an empty text prompt is legal: BOS alone */
    g->prompt = (struct rs_wire_str){"", 0};
    RS_CHECK(rs_wire_generate_validate(g, &lim, &err) == RS_OK);
    RS_CHECK(rs_wire_prompt_check(5, 6, &err) == RS_OK);
    RS_CHECK(rs_wire_prompt_check(6, 6, &err) == RS_EINVAL && err.code == RS_WIRE_PROMPT_TOO_LONG);
    return 0;
}

static int test_small_client_messages(void)
{
    struct rs_wire_client_msg in = {.type = RS_WIRE_T_RESUME}, out;
    struct rs_wire_error err;
    struct rs_wire_buf buf;
    rs_wire_buf_init(&buf, 1024);
    strcpy(in.id, "abc");
    in.u.resume.from_seq = 1ull << 40;
    RS_CHECK(rs_wire_client_encode(&in, &buf) == RS_OK);
    RS_CHECK(rs_wire_client_decode(buf.data, buf.len, &out, &err) == RS_OK);
    RS_CHECK(weq_client(&in, &out));
    in.type = RS_WIRE_T_CANCEL;
    RS_CHECK(rs_wire_client_encode(&in, &buf) == RS_OK);
    RS_CHECK(rs_wire_client_decode(buf.data, buf.len, &out, &err) == RS_OK);
    RS_CHECK(out.type == RS_WIRE_T_CANCEL && strcmp(out.id, "abc") == 0);
    in.type = RS_WIRE_T_RELEASE;
    RS_CHECK(rs_wire_client_encode(&in, &buf) == RS_OK);
    RS_CHECK(rs_wire_client_decode(buf.data, buf.len, &out, &err) == RS_OK);
    RS_CHECK(out.type == RS_WIRE_T_RELEASE && strcmp(out.id, "abc") == 0);
    in.id[0] = '\0';
    RS_CHECK(rs_wire_client_encode(&in, &buf) == RS_EINVAL); /* release names its request */
    strcpy(in.id, "abc");
    in.type = RS_WIRE_T_HELLO;
    RS_CHECK(rs_wire_client_encode(&in, &buf) == RS_EINVAL); /* hello carries no id */
    in.id[0] = '\0';
    RS_CHECK(rs_wire_client_encode(&in, &buf) == RS_OK);
    RS_CHECK(rs_wire_client_decode(buf.data, buf.len, &out, &err) == RS_OK);
    RS_CHECK(out.type == RS_WIRE_T_HELLO);
    in.type = RS_WIRE_T_ACK;
    RS_CHECK(rs_wire_client_encode(&in, &buf) == RS_EINVAL);
    rs_wire_buf_fini(&buf);
    return 0;
}

static int test_encoder_refuses_what_decoder_rejects(void)
{
    struct rs_wire_client_msg m;
    struct rs_wire_buf buf;
    uint32_t ids[] = {1, RS_WIRE_TOKEN_MAX + 1u};
    rs_wire_buf_init(&buf, RS_WIRE_CLIENT_MSG_MAX);
    fill_generate(&m, ids, 2);
    RS_CHECK(rs_wire_client_encode(&m, &buf) == RS_EINVAL); /* token id too big */
    fill_generate(&m, ids, 1);
    m.u.gen.stop[1] = (struct rs_wire_str){"\xff", 1};
    RS_CHECK(rs_wire_client_encode(&m, &buf) == RS_EINVAL); /* invalid UTF-8 */
    fill_generate(&m, ids, 1);
    strcpy(m.id, "has space");
    RS_CHECK(rs_wire_client_encode(&m, &buf) == RS_EINVAL);
    fill_generate(&m, ids, 1);
    m.u.gen.has |= 1u << 28;
    RS_CHECK(rs_wire_client_encode(&m, &buf) == RS_EINVAL);
    rs_wire_buf_fini(&buf);
    return 0;
}

static int test_buffer_limits(void)
{
    uint8_t small[16], exact[64];
    struct rs_wire_buf fixed, grow;
    struct rs_wire_client_msg m;
    uint32_t ids[] = {1};
    fill_generate(&m, ids, 1);
    rs_wire_buf_init_fixed(&fixed, small, sizeof(small));
    RS_CHECK(rs_wire_client_encode(&m, &fixed) == RS_ERANGE && fixed.len == 0);
    rs_wire_buf_init(&grow, 40);
    RS_CHECK(rs_wire_client_encode(&m, &grow) == RS_ERANGE);
    rs_wire_buf_fini(&grow);
    struct rs_wire_door d = {.kind = RS_WIRE_DOOR_WAKE, .sent_ns = 1};
    rs_wire_buf_init_fixed(&fixed, exact, sizeof(exact));
    RS_CHECK(rs_wire_door_encode(&d, &fixed) == RS_OK && fixed.data == exact && fixed.len == 4);
    rs_wire_buf_fini(&fixed); /* borrowed memory is not freed */
    return 0;
}

static int round_trip_server(const struct rs_wire_server_msg *in)
{
    struct rs_wire_server_msg out, again;
    struct rs_wire_error err;
    struct rs_wire_buf buf, buf2;
    rs_wire_buf_init(&buf, RS_WIRE_SERVER_MSG_MAX);
    rs_wire_buf_init(&buf2, RS_WIRE_SERVER_MSG_MAX);
    RS_CHECK(rs_wire_server_encode(in, &buf) == RS_OK);
    RS_CHECK_MSG(rs_wire_server_decode(buf.data, buf.len, &out, &err) == RS_OK, "%s: %s",
                 rs_wire_type_name(in->type), err.msg);
    RS_CHECK_MSG(weq_server(in, &out), "%s differs", rs_wire_type_name(in->type));
    RS_CHECK(rs_wire_server_encode(&out, &buf2) == RS_OK);
    RS_CHECK(buf.len == buf2.len && memcmp(buf.data, buf2.data, buf.len) == 0);
    RS_CHECK(rs_wire_server_decode(buf2.data, buf2.len, &again, &err) == RS_OK);
    RS_CHECK(weq_server(&out, &again));
    rs_wire_buf_fini(&buf);
    rs_wire_buf_fini(&buf2);
    return 0;
}

static int test_server_messages_round_trip(void)
{
    struct rs_wire_server_msg m = {.type = RS_WIRE_T_ACK, .id = "r-1"};
    m.u.ack = (struct rs_wire_ack){.prompt_tokens = 17, .handle = 1ull << 50, .seed = 99};
    if (round_trip_server(&m))
        return 1;
    m = (struct rs_wire_server_msg){.type = RS_WIRE_T_ERROR};
    m.u.error = (struct rs_wire_err_reply){RS_WIRE_OVERLOADED, {"queue full", 10}};
    if (round_trip_server(&m))
        return 1;
    m = (struct rs_wire_server_msg){.type = RS_WIRE_T_WELCOME};
    m.u.welcome.server = (struct rs_wire_str){"postprocd", 9};
    if (round_trip_server(&m))
        return 1;
    static struct rs_wire_logprob lps[2];
    uint32_t toks[2] = {15043, 3186};
    lps[0] = (struct rs_wire_logprob){.token = 15043, .logprob = -0.25f, .n_top = 2,
                                      .top_ids = {15043, 9}, .top_logprobs = {-0.25f, -INFINITY}};
    lps[1] = (struct rs_wire_logprob){.token = 3186, .logprob = -1.5f};
    m = (struct rs_wire_server_msg){.type = RS_WIRE_T_DELTA, .id = "r-1"};
    m.u.delta = (struct rs_wire_delta){.seq = 3, .text = {" world", 6},
                                       .tokens = {.n = 2, .vals = toks}, .has_logprobs = true,
                                       .logprobs = {.n = 2, .vals = lps}};
    if (round_trip_server(&m))
        return 1;
    m.type = RS_WIRE_T_FINAL;
    struct rs_wire_delta out = m.u.delta;
    m.u.final = (struct rs_wire_final){.out = out, .finish_reason = RS_WIRE_FINISH_ERROR,
                                       .usage = {5, 2, 4}, .timings = {10, 200, 3000},
                                       .error = RS_WIRE_INTERNAL, .message = {"boom", 4}};
    if (round_trip_server(&m))
        return 1;
    m.u.final.finish_reason = RS_WIRE_FINISH_LENGTH;
    m.u.final.error = RS_WIRE_OK;
    m.u.final.message.len = 0;
    return round_trip_server(&m);
}

static int test_server_cross_field_rules(void)
{
    struct rs_wire_server_msg m = {.type = RS_WIRE_T_FINAL, .id = "r"};
    struct rs_wire_buf buf;
    uint32_t toks[2] = {1, 2};
    struct rs_wire_logprob lps[2] = {{.token = 1}, {.token = 3}};
    rs_wire_buf_init(&buf, 4096);
    m.u.final.finish_reason = RS_WIRE_FINISH_STOP;
    m.u.final.error = RS_WIRE_INTERNAL; /* an error code without finish_reason error */
    RS_CHECK(rs_wire_server_encode(&m, &buf) == RS_EINVAL);
    m.u.final.error = RS_WIRE_OK;
    m.u.final.finish_reason = RS_WIRE_FINISH_NONE;
    RS_CHECK(rs_wire_server_encode(&m, &buf) == RS_EINVAL);
    m.type = RS_WIRE_T_DELTA;
    m.u.delta = (struct rs_wire_delta){.tokens = {.n = 2, .vals = toks}, .has_logprobs = true,
                                       .logprobs = {.n = 2, .vals = lps}};
    RS_CHECK(rs_wire_server_encode(&m, &buf) == RS_EINVAL); /* token 2 vs logprob token 3 */
    lps[1].token = 2;
    RS_CHECK(rs_wire_server_encode(&m, &buf) == RS_OK);
    m.u.delta.logprobs.n = 1;
    RS_CHECK(rs_wire_server_encode(&m, &buf) == RS_EINVAL);
    rs_wire_buf_fini(&buf);
    return 0;
}

static int test_error_reply_from_decode_failure(void)
{
    struct mb m;
    struct rs_wire_client_msg req;
    struct rs_wire_server_msg rep;
    struct rs_wire_error err, err2;
    struct rs_wire_buf buf;
    mb_generate(&m, 1);
    mb_str(&m, "top_p");
    mb_str(&m, "high");
    RS_CHECK(rs_wire_client_decode(m.sb.data, m.sb.size, &req, &err) == RS_EPROTO);
    msgpack_sbuffer_destroy(&m.sb);
    rs_wire_buf_init(&buf, RS_WIRE_SERVER_MSG_MAX);
    RS_CHECK(rs_wire_error_reply(req.id, &err, &buf) == RS_OK);
    RS_CHECK(rs_wire_server_decode(buf.data, buf.len, &rep, &err2) == RS_OK);
    RS_CHECK(rep.type == RS_WIRE_T_ERROR && strcmp(rep.id, "r1") == 0);
    RS_CHECK(rep.u.error.code == RS_WIRE_WRONG_TYPE);
    const char *want = "field 'top_p': expected float, got string";
    RS_CHECK(weq_str(&rep.u.error.message, &(struct rs_wire_str){want, (uint32_t)strlen(want)}));
    RS_CHECK(rs_wire_error_reply(NULL, &err, &buf) == RS_OK); /* no id: "" */
    RS_CHECK(rs_wire_server_decode(buf.data, buf.len, &rep, &err2) == RS_OK && rep.id[0] == 0);
    rs_wire_buf_fini(&buf);
    return 0;
}

static int test_doorbells_round_trip_every_kind(void)
{
    static struct rs_wire_door in, out, again;
    struct rs_wire_error err;
    uint8_t mem[RS_WIRE_DOOR_MSG_MAX], mem2[RS_WIRE_DOOR_MSG_MAX];
    struct rs_wire_buf buf, buf2;
    rs_wire_buf_init_fixed(&buf, mem, sizeof(mem));
    rs_wire_buf_init_fixed(&buf2, mem2, sizeof(mem2));
    for (int k = 1; k < RS_WIRE_DOOR_KIND_COUNT; k++) {
        memset(&in, 0, sizeof(in));
        in.kind = (enum rs_wire_door_kind)k;
        in.sent_ns = 1234567890123ull;
        if (k == RS_WIRE_DOOR_CANCEL) {
            in.u.cancel.slot = UINT32_MAX;
            in.u.cancel.gen = UINT64_MAX;
            in.u.cancel.reason = RS_WIRE_CANCEL_STOP;
        } else if (k == RS_WIRE_DOOR_REQUEST_READY) {
            in.u.request.slot = 4095;
            in.u.request.gen = 1ull << 33;
        } else if (k == RS_WIRE_DOOR_BATCH_READY || k == RS_WIRE_DOOR_BATCH_DONE) {
            in.u.batch.batch_id = UINT64_MAX;
            in.u.batch.ring_slot = 63;
        } else if (k == RS_WIRE_DOOR_TOKENS_READY) {
            in.u.tokens.batch_id = 77;
            in.n_entries = RS_WIRE_DOOR_TOKENS_MAX; /* the largest doorbell fits the limit */
            for (uint32_t i = 0; i < in.n_entries; i++)
                in.entries[i] = (struct rs_wire_door_tok){UINT32_MAX - i, UINT64_MAX - i, i};
        }
        RS_CHECK_MSG(rs_wire_door_encode(&in, &buf) == RS_OK, "kind %d", k);
        RS_CHECK_MSG(rs_wire_door_decode(buf.data, buf.len, &out, &err) == RS_OK, "%s", err.msg);
        RS_CHECK_MSG(weq_door(&in, &out), "kind %s", rs_wire_door_kind_name(in.kind));
        RS_CHECK(rs_wire_door_encode(&out, &buf2) == RS_OK && buf2.len == buf.len);
        RS_CHECK(memcmp(mem, mem2, buf.len) == 0);
        RS_CHECK(rs_wire_door_decode(buf2.data, buf2.len, &again, &err) == RS_OK);
    }
    in.kind = RS_WIRE_DOOR_TOKENS_READY;
    in.n_entries = RS_WIRE_DOOR_TOKENS_MAX + 1;
    RS_CHECK(rs_wire_door_encode(&in, &buf) == RS_EINVAL);
    in = (struct rs_wire_door){.kind = RS_WIRE_DOOR_CANCEL};
    RS_CHECK(rs_wire_door_encode(&in, &buf) == RS_EINVAL); /* reason 0 */
    in.u.cancel.reason = RS_WIRE_CANCEL_CLIENT;
    in.u.cancel.slot = 1ull << 32;
    RS_CHECK(rs_wire_door_encode(&in, &buf) == RS_EINVAL);
    return 0;
}

static int test_doorbell_strict(void)
{
    static const struct {
        uint8_t len, bytes[12];
        enum rs_wire_code code;
        const char *msg;
    } cases[] = {
        {5, {0x94, RS_WIRE_VERSION, 9, 0, 0}, RS_WIRE_BAD_REQUEST, "field 'kind': unknown doorbell kind 9"},
        {5, {0x94, RS_WIRE_VERSION, 6, 0, 0}, RS_WIRE_BAD_REQUEST, "wake doorbell of 4 items, expected 3"},
        {4, {0x93, RS_WIRE_VERSION + 1, 6, 0}, RS_WIRE_UNSUPPORTED_VERSION,
         "field 'v': protocol version 3 is not supported (this build speaks 2)"},
        {7, {0x96, RS_WIRE_VERSION, 2, 0, 1, 1, 0}, RS_WIRE_INVALID_PARAM, "field 'reason': 0 out of range 1..4"},
        {6, {0x95, RS_WIRE_VERSION, 1, 0, 0xc3, 1}, RS_WIRE_WRONG_TYPE,
         "field 'slot': expected integer, got boolean"},
        {2, {0x81, 0xc0}, RS_WIRE_BAD_REQUEST, "doorbell must be a msgpack array, got map"},
        {5, {0x93, RS_WIRE_VERSION, 6, 0, 0xc0}, RS_WIRE_BAD_REQUEST, "1 trailing bytes after the message"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct rs_wire_door out;
        struct rs_wire_error err;
        rs_err e = rs_wire_door_decode(cases[i].bytes, cases[i].len, &out, &err);
        RS_CHECK_MSG(e == RS_EPROTO && err.code == cases[i].code && strcmp(err.msg, cases[i].msg) == 0,
                     "case %zu: %s: %s", i, rs_wire_code_name(err.code), err.msg);
        RS_CHECK(out.kind == RS_WIRE_DOOR_NONE);
    }
    return 0;
}

/* Decodes one corpus file with the decoder of `kind` (+ validation for client requests). */
static rs_err decode_file(const char *kind, const uint8_t *data, size_t len,
                          struct rs_wire_error *err)
{
    static struct rs_wire_client_msg c;
    static struct rs_wire_server_msg s;
    static struct rs_wire_door d;
    static const struct rs_wire_limits lim = {.n_ctx = 4096}; /* ids up to 2^31-1 are legal */
    if (strcmp(kind, "wire_client") == 0) {
        rs_err e = rs_wire_client_decode(data, len, &c, err);
        if (e == RS_OK && c.type == RS_WIRE_T_GENERATE)
            e = rs_wire_generate_validate(&c.u.gen, &lim, err);
        return e;
    }
    if (strcmp(kind, "wire_server") == 0)
        return rs_wire_server_decode(data, len, &s, err);
    return rs_wire_door_decode(data, len, &d, err);
}

/* Every "ok-*" file decodes; every "bad-<code>-*" file fails with that code. */
static int check_corpus(const char *kind)
{
    char dir[4096], path[8192];
    snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/%s", RS_SOURCE_DIR, kind);
    DIR *d = opendir(dir);
    RS_CHECK_MSG(d != NULL, "no corpus at %s", dir);
    int n = 0, failed = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        static uint8_t data[1 << 16];
        size_t len = f ? fread(data, 1, sizeof(data), f) : 0;
        if (f)
            fclose(f);
        struct rs_wire_error err = {0};
        rs_err r = decode_file(kind, data, len, &err);
        bool ok = strncmp(e->d_name, "ok-", 3) == 0;
        const char *code = rs_wire_code_name(err.code);
        bool pass = ok ? r == RS_OK
                       : r != RS_OK && strncmp(e->d_name + 4, code, strlen(code)) == 0 &&
                             e->d_name[4 + strlen(code)] == '-';
        if (!pass)
            fprintf(stderr, "%s/%s: got %s: %s\n", kind, e->d_name, code, err.msg);
        failed += !pass;
        n++;
    }
    closedir(d);
    fprintf(stderr, "%s: %d files, %d wrong\n", kind, n, failed);
    RS_CHECK(n >= 20 && failed == 0);
    return 0;
}

static int test_corpus_client_files_as_named(void)
{
    return check_corpus("wire_client");
}

static int test_corpus_server_files_as_named(void)
{
    return check_corpus("wire_server");
}

static int test_corpus_door_files_as_named(void)
{
    return check_corpus("wire_door");
}

static int test_names_of_codes_and_types(void)
{
    enum rs_wire_code c;
    for (int i = 0; i < RS_WIRE_CODE_COUNT; i++) {
        const char *name = rs_wire_code_name((enum rs_wire_code)i);
        RS_CHECK(rs_wire_code_parse(name, strlen(name), &c) == RS_OK && c == (enum rs_wire_code)i);
    }
    RS_CHECK(rs_wire_code_parse("nope", 4, &c) == RS_ENOENT);
    RS_CHECK(strcmp(rs_wire_code_name(RS_WIRE_CODE_COUNT), "unknown") == 0);
    RS_CHECK(strcmp(rs_wire_type_name(RS_WIRE_T_FINAL), "final") == 0);
    RS_CHECK(strcmp(rs_wire_finish_name(RS_WIRE_FINISH_ABORT), "abort") == 0);
    RS_CHECK(strcmp(rs_wire_door_kind_name(RS_WIRE_DOOR_TOKENS_READY), "tokens_ready") == 0);
    RS_CHECK(strcmp(rs_wire_door_kind_name(RS_WIRE_DOOR_KIND_COUNT), "none") == 0);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_generate_round_trip_every_field),
    RS_TEST(test_generate_defaults_when_absent),
    RS_TEST(test_unknown_field_named),
    RS_TEST(test_wrong_type_names_field_and_types),
    RS_TEST(test_missing_and_duplicate_fields),
    RS_TEST(test_floats_accept_ints_and_float32),
    RS_TEST(test_integers_any_width_in_range),
    RS_TEST(test_limits_on_sizes),
    RS_TEST(test_version_checked_before_fields),
    RS_TEST(test_every_truncation_rejected),
    RS_TEST(test_hostile_shapes_rejected_cheaply),
    RS_TEST(test_utf8_strict),
    RS_TEST(test_validation_ranges_name_field),
    RS_TEST(test_validation_prompt_rules),
    RS_TEST(test_small_client_messages),
    RS_TEST(test_encoder_refuses_what_decoder_rejects),
    RS_TEST(test_buffer_limits),
    RS_TEST(test_server_messages_round_trip),
    RS_TEST(test_server_cross_field_rules),
    RS_TEST(test_error_reply_from_decode_failure),
    RS_TEST(test_doorbells_round_trip_every_kind),
    RS_TEST(test_doorbell_strict),
    RS_TEST(test_corpus_client_files_as_named),
    RS_TEST(test_corpus_server_files_as_named),
    RS_TEST(test_corpus_door_files_as_named),
    RS_TEST(test_names_of_codes_and_types),
};

RS_TEST_MAIN(cases)

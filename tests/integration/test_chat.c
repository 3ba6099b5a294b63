/* SPDX-License-Identifier: MIT */
/*
 * Conversations through the four real daemons: a chat request on a model
 * carrying a chat template gives the same prompt tokens, and so the same
 * greedy output, as the text ringserve-template renders for it sent as a
 * prompt (special tokens parsed), with one BOS where the template writes its
 * own; --chat-template overrides the model's; a model without a template, a
 * template that raises and a message without a role are refused with
 * errors saying so; a tokenizerd killed mid-intake of a conversation runs
 * the client's resend once. The models are stories260K with a real template from
 * refdata/chat-templates written into a copy by the project's GGUF writer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "common/gguf.h"
#include "common/tokenizer.h"
#include "common/vocab.h"
#include "common/clock.h"
#include "ipc/pipeline.h"
#include "ipc/wire_doc.h"
#include "tests/pipeline_harness.h"
#include "tests/rs_test.h"

#define MODEL "stories260K.gguf"
#define CTX 512
#define QWEN "chat-templates/templates/Qwen-Qwen2.5-7B-Instruct.jinja"
#define MISTRAL "chat-templates/templates/tct-mistralai-Mistral-7B-Instruct-v0.2-legacy.jinja"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (f != NULL && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
        fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL &&
        fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = '\0';
        *len = (size_t)n;
    } else {
        free(buf);
        buf = NULL;
    }
    if (f != NULL)
        fclose(f);
    return buf;
}

/* Copies the refdata model to dst with tokenizer.chat_template = the template at tmpl_rel. */
static int model_with_template(const char *tmpl_rel, const char *dst)
{
    char src[512], tpath[512], err[256];
    size_t len;
    rs_gguf *g = NULL;
    rs_gguf_writer *w = NULL;
    if (rs_test_refdata(MODEL, src, sizeof(src)) == NULL ||
        rs_test_refdata(tmpl_rel, tpath, sizeof(tpath)) == NULL)
        return RS_TEST_SKIP;
    char *tmpl = slurp(tpath, &len);
    RS_CHECK(tmpl != NULL);
    RS_CHECK_MSG(rs_gguf_open(src, &g, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK(rs_gguf_writer_create(&w) == RS_OK);
    for (uint64_t i = 0; i < rs_gguf_n_kv(g); i++)
        RS_CHECK(rs_gguf_writer_copy_kv(w, g, i) == RS_OK);
    RS_CHECK(rs_gguf_writer_set_str(w, "tokenizer.chat_template", tmpl) == RS_OK);
    for (uint64_t i = 0; i < rs_gguf_n_tensors(g); i++) {
        const struct rs_gguf_tensor *t = rs_gguf_tensor(g, i);
        RS_CHECK(rs_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data) ==
                 RS_OK);
    }
    RS_CHECK(rs_gguf_writer_write(w, dst) == RS_OK);
    rs_gguf_writer_destroy(&w);
    rs_gguf_close(&g);
    free(tmpl);
    return 0;
}

static int start(struct rs_harness *h, const char *model, const char *chat_template)
{
    struct rs_harness_opts o = {0};
    o.model = model;
    o.n_ctx = CTX;
    if (chat_template != NULL) {
        o.extra[RS_PIPE_STAGE_TOKENIZERD][0] = "--chat-template";
        o.extra[RS_PIPE_STAGE_TOKENIZERD][1] = chat_template;
    }
    return rs_harness_start(h, &o) == RS_OK ? 0 : 1;
}

static rs_client *client_of(const struct rs_harness *h)
{
    return rs_harness_client(h, 120000);
}

/* The conversation file's "messages", packed into buf for g. */
static int load_messages(const char *conv_rel, struct rs_wire_buf *buf, struct rs_wire_generate *g)
{
    char path[512];
    if (rs_test_refdata(conv_rel, path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    json_t *conv = json_load_file(path, JSON_PRESERVE_ORDER, NULL);
    RS_CHECK(conv != NULL);
    RS_CHECK(rs_wire_doc_pack(json_object_get(conv, "messages"), buf, &g->messages) == RS_OK);
    g->has |= RS_WIRE_GEN_MESSAGES;
    json_decref(conv);
    return 0;
}

/* Greedy, 12 tokens: outputs compare token for token. */
static void greedy(struct rs_wire_generate *g)
{
    rs_wire_generate_init(g);
    g->temperature = 0;
    g->max_tokens = 12;
    g->has = RS_WIRE_GEN_TEMPERATURE | RS_WIRE_GEN_MAX_TOKENS;
}

/* The model's BOS and EOS token texts. */
static int special_texts(const char *model, char *bos, char *eos, size_t cap)
{
    char err[256];
    rs_vocab *v = NULL;
    size_t n;
    const char *t;
    RS_CHECK_MSG(rs_vocab_load_file(model, &v, err, sizeof(err)) == RS_OK, "%s", err);
    if ((t = rs_vocab_token_text(v, rs_vocab_bos(v), &n)) != NULL && n < cap)
        snprintf(bos, cap, "%.*s", (int)n, t);
    if ((t = rs_vocab_token_text(v, rs_vocab_eos(v), &n)) != NULL && n < cap)
        snprintf(eos, cap, "%.*s", (int)n, t);
    rs_vocab_destroy(&v);
    return 0;
}

/* prompt_ids (owned vals) = text tokenized as a prompt is, its leading doubled BOS made one. */
static int prompt_ids_of(const char *model, const char *text, struct rs_wire_generate *g)
{
    char err[256];
    rs_vocab *v = NULL;
    rs_tokenizer *tok = NULL;
    size_t n = 0;
    int32_t *ids = malloc(CTX * sizeof(*ids));
    RS_CHECK_MSG(ids && rs_vocab_load_file(model, &v, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK(rs_tokenizer_create(v, &tok) == RS_OK);
    RS_CHECK(rs_tokenizer_encode(tok, text, strlen(text), RS_TOKENIZE_ADD_SPECIAL |
                                 RS_TOKENIZE_PARSE_SPECIAL, ids, CTX, &n) == RS_OK);
    RS_CHECK_MSG(n >= 2 && ids[0] == rs_vocab_bos(v) && ids[1] == ids[0],
                 "the template was expected to write BOS");
    greedy(g);
    g->prompt_ids = (struct rs_wire_ids){.n = (uint32_t)n - 1, .vals = (uint32_t *)ids + 1};
    g->has |= RS_WIRE_GEN_PROMPT_IDS;
    rs_tokenizer_destroy(&tok);
    rs_vocab_destroy(&v);
    return 0;
}

/*
 * The chat request of conv_rel, and its text as rendered by ringserve-template (for the
 * model's template, or tmpl_file) sent as a prompt: same tokens out; the prompt has one
 * token more when the template writes BOS itself (bos_written), since a prompt always
 * gets the vocab's BOS.
 */
static int chat_equals_rendered(const struct rs_harness *h, const char *model, const char *tmpl,
                                const char *conv_rel, int bos_written)
{
    char conv[512], *text = malloc(1 << 16);
    struct rs_wire_buf buf;
    struct rs_wire_generate chat, prompt;
    struct rs_client_result a = {0}, b = {0};
    rs_client *c = client_of(h);
    RS_CHECK(c != NULL && text != NULL && rs_test_refdata(conv_rel, conv, sizeof(conv)));
    char bos[64] = "", eos[64] = "";
    RS_CHECK(special_texts(model, bos, eos, sizeof(bos)) == 0);
    /* --template takes bos_token/eos_token as given: the model's, as tokenizerd uses them */
    const char *args[] = {tmpl ? "--template" : "--model", tmpl ? tmpl : model, "--messages",
                          conv, "--add-generation-prompt", "--bos", bos, "--eos", eos, NULL};
    RS_CHECK_MSG(rs_test_run("ringserve-template", args, text, 1 << 16) == 0, "%s", text);
    rs_wire_buf_init(&buf, RS_WIRE_CLIENT_MSG_MAX);
    greedy(&chat);
    RS_CHECK(load_messages(conv_rel, &buf, &chat) == 0);
    greedy(&prompt);
    prompt.prompt = (struct rs_wire_str){text, (uint32_t)strlen(text)};
    prompt.has |= RS_WIRE_GEN_PROMPT;
    RS_CHECK(rs_client_generate_sync(c, &chat, 0, NULL, NULL, &a) == RS_OK);
    RS_CHECK(rs_client_generate_sync(c, &prompt, 0, NULL, NULL, &b) == RS_OK);
    RS_CHECK_MSG(a.status == RS_CLIENT_OK && b.status == RS_CLIENT_OK, "chat %s (%s), prompt %s "
                 "(%s)", rs_client_status_name(a.status), a.message,
                 rs_client_status_name(b.status), b.message);
    RS_CHECK_MSG(a.prompt_tokens + (uint32_t)bos_written == b.prompt_tokens,
                 "chat prompt %u tokens, rendered prompt %u", a.prompt_tokens, b.prompt_tokens);
    RS_CHECK(a.n_tokens == 12);
    /* ringserve-cli --messages sends the same conversation: the same text comes out */
    const char *cli[] = {"--rundir", h->rundir, "--temperature", "0", "--max-tokens", "12",
                         "--messages", conv, NULL};
    RS_CHECK_MSG(rs_test_run("ringserve-cli", cli, text, 1 << 16) == 0, "%s", text);
    RS_CHECK_MSG(strlen(text) == a.text_len && memcmp(text, a.text, a.text_len) == 0,
                 "ringserve-cli printed '%s', the client library got '%s'", text, a.text);
    RS_CHECK_MSG(rs_test_run("ringserve-template", args, text, 1 << 16) == 0, "%s", text);
    if (bos_written) { /* the rendered prompt's ids without the doubled BOS, as prompt_ids */
        rs_client_result_fini(&b);
        RS_CHECK(prompt_ids_of(model, text, &prompt) == 0);
        RS_CHECK(rs_client_generate_sync(c, &prompt, 0, NULL, NULL, &b) == RS_OK);
        free((void *)(prompt.prompt_ids.vals - 1));
        RS_CHECK(b.status == RS_CLIENT_OK && b.prompt_tokens == a.prompt_tokens);
    }
    /* same ids in: same greedy ids out */
    RS_CHECK_MSG(b.n_tokens == a.n_tokens &&
                     memcmp(a.tokens, b.tokens, a.n_tokens * sizeof(a.tokens[0])) == 0,
                 "chat output differs from the rendered prompt's");
    rs_client_result_fini(&a);
    rs_client_result_fini(&b);
    rs_client_destroy(&c);
    rs_wire_buf_fini(&buf);
    free(text);
    return 0;
}

/* The model's own template (Qwen2.5's, which writes no BOS): chat = rendered prompt. */
static int test_chat_matches_rendered_prompt(void)
{
    char model[600];
    struct rs_harness h = {0};
    snprintf(model, sizeof(model), "%s/qwen-template.gguf", rs_test_tmpdir());
    int rc = model_with_template(QWEN, model);
    if (rc != 0)
        return rc;
    RS_CHECK(start(&h, model, NULL) == 0);
    rc = chat_equals_rendered(&h, model, NULL, "chat-templates/conversations/multi_turn.json", 0);
    if (rc == 0)
        rc = chat_equals_rendered(&h, model, NULL,
                                  "chat-templates/conversations/unicode_json.json", 0);
    rs_harness_stop(&h, rc != 0);
    return rc;
}

/* Sends g and expects a refusal with code and a message containing each of the words. */
static int refused(rs_client *c, const struct rs_wire_generate *g, enum rs_wire_code code,
                   const char *const *words)
{
    struct rs_client_result r = {0};
    RS_CHECK(rs_client_generate_sync(c, g, 0, NULL, NULL, &r) == RS_OK);
    RS_CHECK_MSG(r.status == RS_CLIENT_REFUSED && r.error == code, "status %s, %s: %s",
                 rs_client_status_name(r.status), rs_wire_code_name(r.error), r.message);
    for (; *words != NULL; words++)
        RS_CHECK_MSG(strstr(r.message, *words) != NULL, "'%s' not in: %s", *words, r.message);
    rs_client_result_fini(&r);
    return 0;
}

/*
 * --chat-template overrides the model's (Mistral's legacy template, which writes
 * bos_token): one BOS, and a conversation it raises on is refused naming the line.
 */
static int test_chat_template_option_bos_once_and_raise(void)
{
    char model[600], tpath[512];
    struct rs_harness h = {0};
    struct rs_wire_buf buf;
    struct rs_wire_generate g;
    snprintf(model, sizeof(model), "%s/qwen-template.gguf", rs_test_tmpdir());
    int rc = model_with_template(QWEN, model);
    if (rc != 0 || rs_test_refdata(MISTRAL, tpath, sizeof(tpath)) == NULL)
        return rc != 0 ? rc : RS_TEST_SKIP;
    RS_CHECK(start(&h, model, tpath) == 0);
    rc = chat_equals_rendered(&h, model, tpath, "chat-templates/conversations/single_user.json",
                              1);
    rs_client *c = client_of(&h);
    rs_wire_buf_init(&buf, RS_WIRE_CLIENT_MSG_MAX);
    greedy(&g);
    if (rc == 0 && c != NULL &&
        (rc = load_messages("chat-templates/conversations/multi_turn.json", &buf, &g)) == 0) {
        const char *words[] = {"line 1 column", "raise_exception",
                               "Conversation roles must alternate", NULL};
        rc = refused(c, &g, RS_WIRE_INVALID_PARAM, words);
    }
    rs_client_destroy(&c);
    rs_wire_buf_fini(&buf);
    rs_harness_stop(&h, rc != 0);
    return rc;
}

/* No template: conversations are refused saying so, prompts still served; bad messages too. */
static int test_chat_refused_without_template_or_role(void)
{
    char model[512];
    struct rs_harness h = {0};
    struct rs_wire_buf buf;
    struct rs_wire_generate g;
    struct rs_client_result r = {0};
    if (rs_test_refdata(MODEL, model, sizeof(model)) == NULL)
        return RS_TEST_SKIP;
    /* ringserve-cli refuses a conversation it cannot send before connecting: exit 2 */
    char out[2048], bad[600];
    snprintf(bad, sizeof(bad), "%s/bad.json", rs_test_tmpdir());
    FILE *f = fopen(bad, "w");
    RS_CHECK(f != NULL && fputs("{\"messages\": [\"hi\"]}", f) >= 0 && fclose(f) == 0);
    const char *cli_bad[][5] = {{"--messages", bad, NULL}, {"--system", "x", NULL},
                                {"--user", "x", "a prompt too", NULL}};
    const char *says[] = {"'messages' item 0: expected an object", "--system needs --user",
                          "takes no other prompt"};
    for (int i = 0; i < 3; i++) {
        RS_CHECK(rs_test_run("ringserve-cli", cli_bad[i], out, sizeof(out)) == 2);
        RS_CHECK_MSG(strstr(out, says[i]) != NULL, "%s", out);
    }
    RS_CHECK(start(&h, model, NULL) == 0);
    rs_client *c = client_of(&h);
    RS_CHECK(c != NULL);
    rs_wire_buf_init(&buf, RS_WIRE_CLIENT_MSG_MAX);
    greedy(&g);
    int rc = load_messages("chat-templates/conversations/single_user.json", &buf, &g);
    const char *words[] = {"no chat template", "--chat-template", NULL};
    if (rc == 0)
        rc = refused(c, &g, RS_WIRE_INVALID_PARAM, words);
    greedy(&g);
    g.prompt = (struct rs_wire_str){"Once upon a time", 16};
    g.has |= RS_WIRE_GEN_PROMPT;
    if (rc == 0 && (rs_client_generate_sync(c, &g, 0, NULL, NULL, &r) != RS_OK ||
                    r.status != RS_CLIENT_OK || r.n_tokens != 12))
        rc = 1;
    rs_client_result_fini(&r);
    /* a message without a role, on a model that has a template */
    rs_client_destroy(&c);
    rs_harness_stop(&h, rc != 0);
    char with[600];
    snprintf(with, sizeof(with), "%s/qwen-template.gguf", rs_test_tmpdir());
    if (rc == 0 && (rc = model_with_template(QWEN, with)) == 0 &&
        (rc = start(&h, with, NULL)) == 0) {
        json_t *bad = json_pack("[{s:s}]", "content", "hello");
        c = client_of(&h);
        greedy(&g);
        g.has |= RS_WIRE_GEN_MESSAGES;
        const char *role[] = {"field 'messages' item 0", "'role'", NULL};
        rc = c == NULL || rs_wire_doc_pack(bad, &buf, &g.messages) != RS_OK ||
             refused(c, &g, RS_WIRE_INVALID_PARAM, role) != 0;
        json_decref(bad);
        rs_client_destroy(&c);
        rs_harness_stop(&h, rc != 0);
    }
    rs_wire_buf_fini(&buf);
    return rc;
}

static void collect(const struct rs_client_event *ev)
{
    rs_client_result_add(ev->user, ev);
}

/*
 * tokenizerd dies right after claiming a record for a conversation (failpoint): the
 * client's resend of the same conversation to the restarted one is accepted once and
 * gives the output of the same conversation on an undisturbed pipeline.
 */
static int test_chat_resent_after_tokenizerd_dies_mid_intake_runs_once(void)
{
    char model[600];
    struct rs_harness h = {0};
    struct rs_wire_buf buf;
    struct rs_wire_generate g;
    struct rs_client_result ref = {0}, r = {0};
    snprintf(model, sizeof(model), "%s/qwen-template.gguf", rs_test_tmpdir());
    int rc = model_with_template(QWEN, model);
    if (rc != 0)
        return rc;
    RS_CHECK(start(&h, model, NULL) == 0);
    rs_wire_buf_init(&buf, RS_WIRE_CLIENT_MSG_MAX);
    greedy(&g);
    RS_CHECK(load_messages("chat-templates/conversations/multi_turn.json", &buf, &g) == 0);
    rs_client *c = client_of(&h);
    RS_CHECK(c != NULL && rs_client_generate_sync(c, &g, 0, NULL, NULL, &ref) == RS_OK &&
             ref.status == RS_CLIENT_OK);
    RS_CHECK(rs_harness_start_stage(&h, RS_PIPE_STAGE_TOKENIZERD,
                                    "RS_FAILPOINT=table.claim.after_cas:1", 1) == RS_OK);
    struct rs_pipe *v = rs_harness_view(&h);
    uint64_t before = atomic_load(&v->shared->next_handle), end = rs_clock_ms() + 10000;
    RS_CHECK(rs_client_submit(c, &g, NULL, collect, &r, NULL) == RS_OK);
    while (rs_harness_alive(&h, RS_PIPE_STAGE_TOKENIZERD) && rs_clock_ms() < end)
        rs_client_poll(c, 5);
    RS_CHECK_MSG(!rs_harness_alive(&h, RS_PIPE_STAGE_TOKENIZERD), "the failpoint did not fire");
    RS_CHECK(rs_harness_start_stage(&h, RS_PIPE_STAGE_TOKENIZERD, NULL, 1) == RS_OK);
    end = rs_clock_ms() + 60000;
    while (r.end_ns == 0 && rs_clock_ms() < end)
        RS_CHECK(rs_client_poll(c, 100) >= 0);
    uint64_t ran = atomic_load(&v->shared->next_handle) - before;
    RS_CHECK_MSG(r.status == RS_CLIENT_OK && r.n_tokens == ref.n_tokens &&
                     memcmp(r.tokens, ref.tokens, r.n_tokens * sizeof(r.tokens[0])) == 0 &&
                     r.prompt_tokens == ref.prompt_tokens,
                 "status %s: %s", rs_client_status_name(r.status), r.message);
    RS_CHECK_MSG(ran == 1, "the conversation was accepted %llu times", (unsigned long long)ran);
    rs_client_result_fini(&ref);
    rs_client_result_fini(&r);
    rs_client_destroy(&c);
    rs_wire_buf_fini(&buf);
    rs_harness_stop(&h, 0);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_chat_matches_rendered_prompt),
    RS_TEST(test_chat_template_option_bos_once_and_raise),
    RS_TEST(test_chat_refused_without_template_or_role),
    RS_TEST(test_chat_resent_after_tokenizerd_dies_mid_intake_runs_once),
};

RS_TEST_MAIN(cases)

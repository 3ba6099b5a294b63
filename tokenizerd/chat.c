/* SPDX-License-Identifier: MIT */
/*
 * Conversations into prompt tokens: a generate that carries `messages` is
 * rendered with the model's chat template (the GGUF's
 * tokenizer.chat_template, or the file given with --chat-template), with the
 * vocab's BOS/EOS texts as bos_token/eos_token, under bounded render limits,
 * and the text is tokenized with special-token parsing, so "<|im_start|>" or
 * "<s>" written by the template become those tokens. BOS is added as for a
 * text prompt unless the template wrote it already. Compiled once at load;
 * a model without a template, or with one this renderer cannot compile,
 * still serves prompts and answers conversations with an error saying why.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/jinja.h"
#include "common/log.h"
#include "ipc/pipeline_metrics.h"
#include "tokenizerd/tokd.h"

#define TEMPLATE_FILE_MAX (16u << 20) /* the renderer's own bound on a template */

/*
 * Render bounds for one request: intake is one thread serving every client,
 * so a template or conversation that would run long is refused, not waited
 * for. Real templates over a 1024-message conversation stay far below them.
 */
static const struct rs_jinja_limits render_limits = {
    .max_steps = 4000000,
    .max_output = 4u << 20,
    .max_memory = 64u << 20,
    .max_depth = 64,
};

static char *read_text(const char *path, size_t *len, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    if (f == NULL) {
        snprintf(err, err_len, "--chat-template %s: cannot open it", path);
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && (unsigned long)n <= TEMPLATE_FILE_MAX && fseek(f, 0, SEEK_SET) == 0 &&
            (buf = malloc((size_t)n + 1)) != NULL && fread(buf, 1, (size_t)n, f) == (size_t)n) {
            buf[n] = '\0';
            *len = (size_t)n;
        } else {
            free(buf);
            buf = NULL;
            snprintf(err, err_len, "--chat-template %s: unreadable or over %u bytes", path,
                     TEMPLATE_FILE_MAX);
        }
    }
    fclose(f);
    return buf;
}

static char *token_text(const rs_vocab *v, int32_t id)
{
    size_t n = 0;
    const char *s = id == RS_VOCAB_NONE ? NULL : rs_vocab_token_text(v, id, &n);
    char *d = malloc(n + 1);
    if (d != NULL) {
        if (s != NULL)
            memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* Compiles src; a failure is kept as the text conversations are answered with. */
static rs_err compile(struct tokd_chat *c, const char *src, size_t len, const char *origin)
{
    struct rs_jinja_error je = {0};
    char msg[RS_WIRE_MESSAGE_MAX];
    rs_err rc = rs_jinja_compile(src, len, &c->tmpl, &je);
    if (rc == RS_OK)
        return RS_OK;
    snprintf(msg, sizeof(msg), "the chat template (%s) does not compile: line %u column %u: "
             "%s", origin, je.line, je.col, je.msg ? je.msg : rs_strerror(rc));
    rs_jinja_error_fini(&je);
    c->unusable = strdup(msg);
    return rc;
}

rs_err tokd_chat_load(struct tokd_chat *c, const rs_gguf *g, const rs_vocab *v,
                      const char *template_file, char *err, size_t err_len)
{
    struct rs_gguf_str s;
    c->bos = token_text(v, rs_vocab_bos(v));
    c->eos = token_text(v, rs_vocab_eos(v));
    if (c->bos == NULL || c->eos == NULL) {
        snprintf(err, err_len, "out of memory");
        return RS_ENOMEM;
    }
    if (template_file != NULL) { /* the operator's choice: fail at start, not per request */
        size_t len = 0;
        char *src = read_text(template_file, &len, err, err_len);
        if (src == NULL)
            return RS_EINVAL;
        rs_err rc = compile(c, src, len, template_file);
        free(src);
        if (rc != RS_OK)
            snprintf(err, err_len, "%s", c->unusable);
        c->origin = "--chat-template";
        return rc;
    }
    c->origin = "tokenizer.chat_template";
    if (rs_gguf_get_str(g, "tokenizer.chat_template", &s) != RS_OK) {
        c->absent = 1;
        c->unusable = strdup("the model has no chat template (GGUF key tokenizer.chat_template); "
                             "send a prompt, or start tokenizerd with --chat-template FILE");
        return c->unusable ? RS_OK : RS_ENOMEM;
    }
    if (compile(c, s.ptr, (size_t)s.len, "tokenizer.chat_template") != RS_OK)
        rs_log_warn("%s; conversations will be refused, prompts are served", c->unusable);
    return RS_OK;
}

void tokd_chat_fini(struct tokd_chat *c)
{
    rs_jinja_destroy(&c->tmpl);
    free(c->unusable);
    free(c->bos);
    free(c->eos);
    memset(c, 0, sizeof(*c));
}

/* The conversation as JSON for the renderer; NULL docs stay NULL. */
struct chat_vars {
    json_t *messages, *tools, *kwargs;
};

static void chat_vars_fini(struct chat_vars *cv)
{
    json_decref(cv->messages);
    json_decref(cv->tools);
    json_decref(cv->kwargs);
}

/* 0 with the JSON filled, or 1 after answering the client. */
static int chat_vars_make(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                          const struct rs_wire_client_msg *m, struct chat_vars *cv)
{
    const struct rs_wire_generate *g = &m->u.gen;
    const struct {
        uint32_t bit;
        const char *name;
        const struct rs_wire_doc *doc;
        json_t **out;
    } docs[] = {{RS_WIRE_GEN_MESSAGES, "messages", &g->messages, &cv->messages},
                {RS_WIRE_GEN_TOOLS, "tools", &g->tools, &cv->tools},
                {RS_WIRE_GEN_CHAT_TEMPLATE_KWARGS, "chat_template_kwargs", &g->template_kwargs,
                 &cv->kwargs}};
    char why[256];
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        if (!(g->has & docs[i].bit))
            continue;
        rs_err rc = rs_wire_doc_to_json(docs[i].doc, docs[i].out, why, sizeof(why));
        if (rc != RS_OK) {
            tokd_reply_error(t, sock, peer, m->id, rc == RS_ENOMEM ? RS_WIRE_INTERNAL :
                             RS_WIRE_BAD_REQUEST, "field '%s': %s", docs[i].name, why);
            return 1;
        }
    }
    size_t i;
    json_t *msg;
    json_array_foreach (cv->messages, i, msg)
        if (!json_is_string(json_object_get(msg, "role"))) {
            tokd_reply_error(t, sock, peer, m->id, RS_WIRE_INVALID_PARAM, "field 'messages' "
                             "item %zu: needs a string 'role'", i);
            return 1;
        }
    return 0;
}

/* The wire code a render failure is answered with: the request's input, unless a bound. */
static enum rs_wire_code render_code(rs_err rc, const struct rs_jinja_error *je)
{
    if (rc == RS_ENOMEM)
        return RS_WIRE_INTERNAL;
    return je->kind == RS_JINJA_ERR_LIMIT ? RS_WIRE_TOO_LARGE : RS_WIRE_INVALID_PARAM;
}

/* Renders into *text (owned); 0, or 1 after answering the client. */
static int render(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                  const struct rs_wire_client_msg *m, char **text, size_t *len)
{
    struct tokd_chat *c = &t->chat;
    struct chat_vars cv = {0};
    if (c->tmpl == NULL) {
        tokd_reply_error(t, sock, peer, m->id, c->absent ? RS_WIRE_INVALID_PARAM :
                         RS_WIRE_INTERNAL, "%s",
                         c->unusable ? c->unusable : "no chat template");
        return 1;
    }
    if (chat_vars_make(t, sock, peer, m, &cv)) {
        chat_vars_fini(&cv);
        return 1;
    }
    struct rs_jinja_stats stats = {0};
    struct rs_jinja_ctx ctx = {
        .messages = cv.messages, .tools = cv.tools, .vars = cv.kwargs,
        .add_generation_prompt = m->u.gen.add_generation_prompt, .bos_token = c->bos,
        .eos_token = c->eos, .limits = &render_limits, .stats = &stats};
    struct rs_jinja_error je = {0};
    rs_err rc = rs_jinja_render(c->tmpl, &ctx, text, len, &je);
    chat_vars_fini(&cv);
    if (rc == RS_OK)
        return 0;
    if (je.line > 0)
        tokd_reply_error(t, sock, peer, m->id, render_code(rc, &je), "chat template (%s) "
                         "line %u column %u: %s: %s", c->origin, je.line, je.col,
                         rs_jinja_errkind_name(je.kind), je.msg ? je.msg : rs_strerror(rc));
    else
        tokd_reply_error(t, sock, peer, m->id, render_code(rc, &je), "chat template (%s): "
                         "%s: %s", c->origin, rs_jinja_errkind_name(je.kind),
                         je.msg ? je.msg : rs_strerror(rc));
    rs_jinja_error_fini(&je);
    return 1;
}

int tokd_chat_tokenize(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                       const struct rs_wire_client_msg *m, uint32_t *n_out)
{
    struct rs_metrics_block *sm = &t->p->metrics->stage[RS_PIPE_STAGE_TOKENIZERD];
    uint32_t n_ctx = t->p->cfg.n_ctx;
    char *text = NULL;
    size_t len = 0, n = 0;
    uint64_t t0 = rs_clock_ns();
    if (render(t, sock, peer, m, &text, &len))
        return 1;
    rs_err rc = rs_tokenizer_encode(t->tok, text, len,
                                    RS_TOKENIZE_ADD_SPECIAL | RS_TOKENIZE_PARSE_SPECIAL, t->ids,
                                    n_ctx, &n);
    free(text);
    rs_hist_add_ns(&sm->hist[RS_H_TOK_TOKENIZE], rs_clock_ns() - t0);
    int32_t bos = rs_vocab_bos(t->vocab);
    /* A template that writes bos_token itself, on a vocab that also adds one: keep one. */
    if (rc == RS_OK && n >= 2 && bos != RS_VOCAB_NONE && rs_vocab_add_bos(t->vocab) &&
        t->ids[0] == bos && t->ids[1] == bos)
        memmove(t->ids, t->ids + 1, (--n) * sizeof(t->ids[0]));
    if (rc == RS_ERANGE || (rc == RS_OK && n >= n_ctx)) {
        tokd_reply_error(t, sock, peer, m->id, RS_WIRE_PROMPT_TOO_LONG, "the rendered "
                         "conversation is %zu tokens; the model's context is %u tokens, which "
                         "leaves no room to generate", n, n_ctx);
        return 1;
    }
    if (rc != RS_OK || n == 0) {
        tokd_reply_error(t, sock, peer, m->id, rc == RS_OK ? RS_WIRE_INVALID_PARAM :
                         RS_WIRE_INTERNAL, "%s", rc == RS_OK ? "the chat template rendered "
                         "nothing for these messages" : rs_strerror(rc));
        return 1;
    }
    *n_out = (uint32_t)n;
    return 0;
}

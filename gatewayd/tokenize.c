/* SPDX-License-Identifier: MIT */
/*
 * The served model's vocabulary in gatewayd (loaded from the GGUF the
 * segment names, with common/vocab.h) and the two routes that need nothing
 * else: POST /tokenize ({"prompt", "add_special_tokens"} -> {"count",
 * "max_model_len", "tokens"}, as vLLM answers; tokenized exactly as
 * tokenizerd does, so the count is what a completion would use) and POST
 * /detokenize ({"tokens"} -> {"prompt"}). The vocab also gives logprobs
 * their token texts. Leaves out /tokenize of chat messages: tokenizerd
 * renders conversations, so that request is answered 400 saying so.
 */
#include <stdlib.h>
#include <string.h>

#include "common/detok.h"
#include "common/log.h"
#include "gatewayd/call_impl.h"

static void set_model_name(struct gw *g, const char *path)
{
    if (g->o.served_name != NULL && g->o.served_name[0] != '\0') {
        snprintf(g->model_name, sizeof(g->model_name), "%s", g->o.served_name);
        return;
    }
    const char *base = strrchr(path, '/');
    base = base != NULL ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".gguf") == 0)
        n -= 5;
    snprintf(g->model_name, sizeof(g->model_name), "%.*s", (int)n, base);
}

rs_err gw_vocab_sync(struct gw *g)
{
    char err[256];
    const char *path = g->seg.p != NULL ? g->seg.p->cfg.model_path : NULL;
    if (path == NULL || strcmp(path, g->vocab_path) == 0)
        return g->vocab != NULL ? RS_OK : RS_ENOENT;
    set_model_name(g, path);
    rs_tokenizer_destroy(&g->tokenizer);
    rs_vocab_destroy(&g->vocab);
    snprintf(g->vocab_path, sizeof(g->vocab_path), "%s", path);
    rs_err rc = rs_vocab_load_file(path, &g->vocab, err, sizeof(err));
    if (rc != RS_OK)
        rs_log_error("vocab of %s: %s", path, err);
    return rc;
}

static int check_model(struct gw *g, const json_t *root, struct gw_err *e)
{
    json_t *m = json_object_get(root, "model");
    if (m == NULL || json_is_null(m) ||
        (json_is_string(m) && strcmp(json_string_value(m), g->model_name) == 0))
        return 0;
    gw_err_set(e, 404, "model", "The model `%.200s` does not exist.",
               json_is_string(m) ? json_string_value(m) : "?");
    e->code = "model_not_found";
    return -1;
}

/* A chat /tokenize request: the conversation goes through the chat hand-off. */
static int tokenize_messages(struct gw_req *r, struct gw_err *e)
{
    struct gw_oai_req p;
    struct rs_wire_generate gen;
    if (gw_oai_parse(GW_API_CHAT, r->body.p, r->body.len, &p, e) != 0)
        return -1;
    int rc = gw_call_prepare(&p, 0, &gen, e);
    gw_oai_req_free(&p);
    /* tokenizerd renders conversations (the chat template lives there); the gateway
     * holds only the vocab, so it cannot count a conversation's tokens itself */
    return rc != 0 ? -1
                   : gw_err_set(e, 400, "messages",
                                "/tokenize takes a 'prompt'; conversations are rendered by "
                                "the pipeline: a chat completion's usage.prompt_tokens "
                                "counts them");
}

static enum MHD_Result tokenize_text(struct gw_req *r, json_t *root, struct gw_err *e)
{
    struct gw *g = r->gw;
    json_t *p = json_object_get(root, "prompt"), *a = json_object_get(root, "add_special_tokens");
    if (p == NULL || !json_is_string(p) || json_string_length(p) > RS_WIRE_PROMPT_MAX) {
        gw_err_set(e, 400, "prompt", "'prompt' must be a string of at most %u bytes",
                   RS_WIRE_PROMPT_MAX);
        return gw_respond_error(r, e);
    }
    if (g->tokenizer == NULL && rs_tokenizer_create(g->vocab, &g->tokenizer) != RS_OK) {
        gw_err_set(e, 500, "", "the tokenizer could not be made");
        return gw_respond_error(r, e);
    }
    size_t cap = json_string_length(p) + 8, n = 0;
    int32_t *ids = malloc(cap * sizeof(int32_t));
    unsigned flags =
        RS_TOKENIZE_PARSE_SPECIAL | (a == NULL || !json_is_false(a) ? RS_TOKENIZE_ADD_SPECIAL : 0);
    if (ids == NULL || rs_tokenizer_encode(g->tokenizer, json_string_value(p),
                                           json_string_length(p), flags, ids, cap, &n) != RS_OK) {
        free(ids);
        gw_err_set(e, 500, "", "tokenizing failed");
        return gw_respond_error(r, e);
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_integer(ids[i]));
    free(ids);
    return gw_respond_json(r, 200,
                           json_pack("{s:I, s:I, s:o}", "count", (json_int_t)n, "max_model_len",
                                     (json_int_t)g->seg.p->cfg.n_ctx, "tokens", arr));
}

/* The parsed body, or NULL after answering (bad JSON, wrong model, no vocab). */
static json_t *open_body(struct gw_req *r, struct gw_err *e)
{
    json_error_t je;
    if (r->gw->vocab == NULL || r->gw->seg.p == NULL) {
        gw_err_set(e, 503, "", "the model is not loaded (the instance is not running)");
        gw_respond_error(r, e);
        return NULL;
    }
    json_t *root = json_loadb(r->body.p != NULL ? r->body.p : "", r->body.len, JSON_ALLOW_NUL, &je);
    if (root == NULL || !json_is_object(root)) {
        gw_err_set(e, 400, "", "the body must be a JSON object (line %d column %d: %s)", je.line,
                   je.column, root == NULL ? je.text : "not an object");
    } else if (check_model(r->gw, root, e) == 0) {
        return root;
    }
    if (root != NULL)
        json_decref(root);
    gw_respond_error(r, e);
    return NULL;
}

enum MHD_Result gw_route_tokenize(struct gw_req *r)
{
    struct gw_err e;
    json_t *root = open_body(r, &e);
    if (root == NULL)
        return MHD_YES;
    enum MHD_Result rc;
    if (json_object_get(root, "messages") != NULL)
        rc = tokenize_messages(r, &e) != 0 ? gw_respond_error(r, &e) : MHD_NO;
    else
        rc = tokenize_text(r, root, &e);
    json_decref(root);
    return rc;
}

enum MHD_Result gw_route_detokenize(struct gw_req *r)
{
    struct gw_err e;
    json_t *root = open_body(r, &e), *t, *it;
    size_t i, n_vocab = r->gw->vocab != NULL ? rs_vocab_n_tokens(r->gw->vocab) : 0;
    if (root == NULL)
        return MHD_YES;
    t = json_object_get(root, "tokens");
    if (t == NULL || !json_is_array(t) || json_array_size(t) > RS_WIRE_PROMPT_IDS_MAX) {
        json_decref(root);
        gw_err_set(&e, 400, "tokens", "'tokens' must be an array of at most %u token ids",
                   RS_WIRE_PROMPT_IDS_MAX);
        return gw_respond_error(r, &e);
    }
    int32_t *ids = malloc((json_array_size(t) + 1) * sizeof(int32_t));
    json_array_foreach(t, i, it)
    {
        if (ids == NULL || !json_is_integer(it) || json_integer_value(it) < 0 ||
            (size_t)json_integer_value(it) >= n_vocab) {
            free(ids);
            json_decref(root);
            gw_err_set(&e, 400, "tokens", "'tokens' item %zu must be a token id below %zu", i,
                       n_vocab);
            return gw_respond_error(r, &e);
        }
        ids[i] = (int32_t)json_integer_value(it);
    }
    size_t cap = json_array_size(t) * rs_vocab_max_piece_len(r->gw->vocab) + 8, len = 0;
    char *text = malloc(cap);
    rs_err rc = text != NULL
                    ? rs_detok_decode(r->gw->vocab, ids, json_array_size(t), 0, text, cap, &len)
                    : RS_ENOMEM;
    free(ids);
    json_decref(root);
    json_t *body = rc == RS_OK ? json_pack("{s:s%}", "prompt", text, len) : NULL;
    free(text);
    if (body == NULL) {
        gw_err_set(&e, 500, "", "detokenizing failed");
        return gw_respond_error(r, &e);
    }
    return gw_respond_json(r, 200, body);
}

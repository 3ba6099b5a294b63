/* SPDX-License-Identifier: MIT */
/* The pipeline layout: open-or-create per stage, configuration checks, record validation. */
#include <string.h>

#include "ipc/pipeline.h"
#include "tests/rs_test.h"
#include "tests/pipeline_harness.h"

static int make_config(struct rs_pipe_config *c)
{
    char path[480], err[256];
    if (rs_test_refdata("stories260K.gguf", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    rs_pipe_config_default(c);
    rs_test_unique_name("pipe", c->instance, sizeof(c->instance));
    snprintf(c->model_path, sizeof(c->model_path), "%s", path);
    c->max_requests = 16;
    c->n_kv_blocks = 64;
    c->n_ctx = 128;
    if (rs_harness_config_resolve(c, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "resolve: %s\n", err);
        return 1;
    }
    return 0;
}

static int test_every_stage_opens_one_segment(void)
{
    struct rs_pipe_config c;
    int rc = make_config(&c);
    if (rc != 0)
        return rc;
    RS_CHECK(c.n_vocab == 512 && c.n_ctx == 128 && c.max_blocks_per_seq == 8);
    struct rs_pipe *p[RS_PIPE_N_STAGES];
    char err[256];
    for (int s = 0; s < RS_PIPE_N_STAGES; s++)
        RS_CHECK_MSG(rs_pipe_open(&c, (enum rs_pipe_stage)s, &p[s], err, sizeof(err)) == RS_OK,
                     "%s", err);
    RS_CHECK(p[RS_PIPE_STAGE_SCHEDULERD]->batches != NULL);
    RS_CHECK(p[RS_PIPE_STAGE_TOKENIZERD]->batches == NULL);
    struct rs_pipe *view;
    RS_CHECK_MSG(rs_pipe_inspect(c.instance, &view, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK(view->cfg.max_requests == 16);
    rs_pipe_close(&view);
    for (int s = 0; s < RS_PIPE_N_STAGES; s++)
        rs_pipe_close(&p[s]);
    RS_CHECK(rs_pipe_unlink(c.instance) == RS_OK);
    return 0;
}

static int test_config_mismatch_is_named(void)
{
    struct rs_pipe_config c;
    int rc = make_config(&c);
    if (rc != 0)
        return rc;
    struct rs_pipe *a, *b;
    char err[256];
    RS_CHECK(rs_pipe_open(&c, RS_PIPE_STAGE_SCHEDULERD, &a, err, sizeof(err)) == RS_OK);
    struct rs_pipe_config d = c;
    d.prefix_caching = 0; /* same sizes, different behaviour */
    RS_CHECK(rs_pipe_open(&d, RS_PIPE_STAGE_TOKENIZERD, &b, err, sizeof(err)) == RS_EMISMATCH);
    RS_CHECK_MSG(strstr(err, "prefix_caching") != NULL, "%s", err);
    d = c;
    d.max_seqs = 8; /* a different layout */
    RS_CHECK(rs_pipe_open(&d, RS_PIPE_STAGE_TOKENIZERD, &b, err, sizeof(err)) == RS_EMISMATCH);
    rs_pipe_close(&a);
    rs_pipe_unlink(c.instance);
    return 0;
}

static int test_batch_check_rejects_bad_records(void)
{
    struct rs_pipe_config c;
    int rc = make_config(&c);
    if (rc != 0)
        return rc;
    struct rs_pipe *p;
    char err[256];
    RS_CHECK(rs_pipe_open(&c, RS_PIPE_STAGE_LAUNCHERD, &p, err, sizeof(err)) == RS_OK);
    union {
        struct rs_pipe_batch b;
        uint8_t bytes[4096];
    } u;
    memset(&u, 0, sizeof(u));
    u.b.n_seqs = 1;
    u.b.n_tokens = 2;
    struct rs_pipe_batch_seq *s = rs_pipe_batch_seqs(&u.b);
    *s = (struct rs_pipe_batch_seq){.req_index = 3, .run_slot = 1, .pos0 = 0, .n_tokens = 2,
                                    .n_blocks = 1, .tok_off = 0, .want_logits = 1};
    rs_pipe_batch_tokens(&u.b)[0] = 1;
    rs_pipe_batch_tokens(&u.b)[1] = 400;
    uint32_t len = (uint32_t)rs_pipe_batch_bytes(1, 2);
    RS_CHECK_MSG(rs_pipe_batch_check(p, &u, len, err, sizeof(err)) == RS_OK, "%s", err);
    rs_pipe_batch_tokens(&u.b)[1] = 512;
    RS_CHECK(rs_pipe_batch_check(p, &u, len, err, sizeof(err)) == RS_EPROTO);
    rs_pipe_batch_tokens(&u.b)[1] = 5;
    s->pos0 = 127;
    RS_CHECK(rs_pipe_batch_check(p, &u, len, err, sizeof(err)) == RS_EPROTO);
    s->pos0 = 15;
    RS_CHECK(rs_pipe_batch_check(p, &u, len, err, sizeof(err)) == RS_EPROTO); /* needs 2 blocks */
    s->n_blocks = 2;
    RS_CHECK_MSG(rs_pipe_batch_check(p, &u, len, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK(rs_pipe_batch_check(p, &u, len - 1, err, sizeof(err)) == RS_EPROTO);
    rs_pipe_close(&p);
    rs_pipe_unlink(c.instance);
    return 0;
}

/* The configuration is completed from facts alone: no file is opened, so any facts will do. */
static int test_config_resolves_from_facts_without_a_file(void)
{
    struct rs_pipe_config c;
    struct rs_gguf_facts m = {.path = "/nonexistent/model.gguf", .bytes = 12345,
                              .n_vocab = 1000, .n_ctx_train = 256};
    char err[256];
    rs_pipe_config_default(&c);
    RS_CHECK_MSG(rs_pipe_config_resolve(&c, &m, err, sizeof(err)) == RS_OK, "%s", err);
    RS_CHECK(strcmp(c.model_path, m.path) == 0 && c.model_bytes == 12345 && c.n_vocab == 1000);
    RS_CHECK(c.n_ctx == 256 && c.max_blocks_per_seq == 16 && c.n_chunks > 0);
    rs_pipe_config_default(&c);
    c.n_ctx = 512; /* beyond the model's context */
    RS_CHECK(rs_pipe_config_resolve(&c, &m, err, sizeof(err)) == RS_EINVAL);
    RS_CHECK_MSG(strstr(err, "--ctx 512") != NULL, "%s", err);
    m.n_ctx_train = 0; /* no context length in the file: --ctx decides, and is required */
    RS_CHECK(rs_pipe_config_resolve(&c, &m, err, sizeof(err)) == RS_OK && c.n_ctx == 512);
    rs_pipe_config_default(&c);
    RS_CHECK(rs_pipe_config_resolve(&c, &m, err, sizeof(err)) == RS_EINVAL);
    RS_CHECK_MSG(strstr(err, "pass --ctx") != NULL, "%s", err);
    m.n_vocab = 0;
    c.n_ctx = 64;
    RS_CHECK(rs_pipe_config_resolve(&c, &m, err, sizeof(err)) == RS_EINVAL);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_config_resolves_from_facts_without_a_file),
    RS_TEST(test_every_stage_opens_one_segment),
    RS_TEST(test_config_mismatch_is_named),
    RS_TEST(test_batch_check_rejects_bad_records),
};
RS_TEST_MAIN(cases)

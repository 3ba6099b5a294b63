/* SPDX-License-Identifier: MIT */
/*
 * The per-request logprob lists (pipeline.h "logprobs"): entries written by
 * the launcher role and read back by postprocd's, redone entries kept,
 * entries out of order refused, a reused record never showing its previous
 * request's entries, and the chunks of freed records reclaimed when the
 * region fills up. Real segment, real roles, stories260K's configuration.
 */
#include <string.h>

#include "ipc/pipeline_logprob.h"
#include "ipc/pipeline_req.h"
#include "tests/pipeline_harness.h"
#include "tests/rs_test.h"

struct fx {
    struct rs_pipe_config cfg;
    struct rs_pipe *tok, *lau, *post;
};

static int fx_open(struct fx *f)
{
    char path[480], err[256];
    if (rs_test_refdata("stories260K.gguf", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    rs_pipe_config_default(&f->cfg);
    rs_test_unique_name("lp", f->cfg.instance, sizeof(f->cfg.instance));
    snprintf(f->cfg.model_path, sizeof(f->cfg.model_path), "%s", path);
    f->cfg.max_requests = 4;
    f->cfg.n_kv_blocks = 64;
    f->cfg.n_ctx = 128;
    if (rs_harness_config_resolve(&f->cfg, err, sizeof(err)) != RS_OK ||
        rs_pipe_open(&f->cfg, RS_PIPE_STAGE_TOKENIZERD, &f->tok, err, sizeof(err)) != RS_OK ||
        rs_pipe_open(&f->cfg, RS_PIPE_STAGE_LAUNCHERD, &f->lau, err, sizeof(err)) != RS_OK ||
        rs_pipe_open(&f->cfg, RS_PIPE_STAGE_POSTPROCD, &f->post, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    return 0;
}

static void fx_close(struct fx *f)
{
    rs_pipe_close(&f->tok);
    rs_pipe_close(&f->lau);
    rs_pipe_close(&f->post);
    rs_pipe_unlink(f->cfg.instance);
}

/* A published request with prompt [1] asking for n_top alternatives. */
static int make_req(struct fx *f, int32_t n_top, struct rs_table_ref *ref)
{
    void *rec;
    if (rs_table_claim(f->tok->requests, ref, &rec) != RS_OK)
        return 1;
    struct rs_pipe_req *r = rec;
    memset(r, 0, sizeof(*r));
    rs_sampling_params_default(&r->sampling);
    r->sampling.n_logprobs = n_top;
    r->n_prompt = 1;
    int32_t bos = 1;
    return rs_arena_list_init(f->tok->tokens, *ref) != RS_OK ||
           rs_arena_append(f->tok->tokens, *ref, &bos, 1) != RS_OK ||
           rs_arena_seal(f->tok->tokens, *ref) != RS_OK ||
           rs_table_publish(f->tok->requests, *ref, RS_PIPE_REQ_RUNNING) != RS_OK;
}

/* A sample result for output k whose values encode k (so a mix-up shows). */
static struct rs_sample_result fake(uint32_t k, int32_t n_top)
{
    struct rs_sample_result r;
    memset(&r, 0, sizeof(r));
    r.token = (int32_t)(k % 500);
    r.logprob = -0.5f - (float)k;
    r.n_top = n_top;
    for (int32_t i = 0; i < n_top; i++) {
        r.top_ids[i] = (int32_t)((k + (uint32_t)i) % 512);
        r.top_logprobs[i] = -(float)i - 0.25f * (float)k;
    }
    return r;
}

static int same(const struct rs_wire_logprob *lp, const struct rs_sample_result *r)
{
    if (lp->token != (uint32_t)r->token || lp->logprob != r->logprob ||
        lp->n_top != (uint32_t)r->n_top)
        return 0;
    for (uint32_t i = 0; i < lp->n_top; i++)
        if (lp->top_ids[i] != (uint32_t)r->top_ids[i] || lp->top_logprobs[i] != r->top_logprobs[i])
            return 0;
    return 1;
}

static int test_entries_round_trip_and_redo_is_kept(void)
{
    struct fx f;
    int rc = fx_open(&f);
    if (rc != 0)
        return rc;
    struct rs_table_ref ref;
    RS_CHECK(make_req(&f, 5, &ref) == 0);
    for (uint32_t k = 0; k < 100; k++) {
        struct rs_sample_result r = fake(k, 5);
        RS_CHECK(rs_pipe_logprob_put(f.lau, ref, k, &r) == RS_OK);
        if (k % 7 == 3) { /* a redone step: the entry is already there and is kept */
            struct rs_sample_result other = fake(k + 1, 5);
            RS_CHECK(rs_pipe_logprob_put(f.lau, ref, k, &other) == RS_OK);
        }
    }
    for (uint32_t k = 0; k < 100; k++) {
        struct rs_sample_result r = fake(k, 5);
        struct rs_wire_logprob lp;
        RS_CHECK(rs_pipe_logprob_read(f.post, ref, k, r.token, &lp) == RS_OK && same(&lp, &r));
        RS_CHECK(rs_pipe_logprob_read(f.post, ref, k, r.token + 1, &lp) == RS_EIO);
    }
    struct rs_wire_logprob lp;
    RS_CHECK(rs_pipe_logprob_read(f.post, ref, 100, 0, &lp) == RS_ENOENT);
    struct rs_sample_result r = fake(102, 5);
    RS_CHECK(rs_pipe_logprob_put(f.lau, ref, 102, &r) == RS_EIO); /* entry 101 skipped */
    RS_CHECK(rs_arena_check(f.lau->logprobs, NULL) == RS_OK);
    fx_close(&f);
    return 0;
}

static int test_request_without_logprobs_has_none(void)
{
    struct fx f;
    int rc = fx_open(&f);
    if (rc != 0)
        return rc;
    struct rs_table_ref ref;
    RS_CHECK(make_req(&f, 0, &ref) == 0);
    struct rs_sample_result r = fake(0, 0);
    struct rs_wire_logprob lp;
    RS_CHECK(rs_pipe_logprob_put(f.lau, ref, 0, &r) == RS_EINVAL);
    RS_CHECK(rs_pipe_logprob_read(f.post, ref, 0, r.token, &lp) == RS_ENOENT);
    struct rs_table_ref stale = {ref.index, ref.gen + 1};
    RS_CHECK(rs_pipe_logprob_read(f.post, stale, 0, r.token, &lp) == RS_ESTALE);
    RS_CHECK(rs_pipe_logprob_put(f.tok, ref, 0, &r) == RS_EINVAL); /* asked for none */
    fx_close(&f);
    return 0;
}

/*
 * Fills the region with every record at its largest, frees the records the
 * way postprocd does (token arena only), then writes again: the region is
 * full of freed records' chunks, which the writer reclaims; a reused record
 * starts from an empty list.
 */
static int test_freed_records_chunks_are_reclaimed(void)
{
    struct fx f;
    int rc = fx_open(&f);
    if (rc != 0)
        return rc;
    uint32_t n_req = f.cfg.max_requests, per = f.cfg.n_ctx;
    struct rs_table_ref refs[8];
    for (int round = 0; round < 3; round++) {
        for (uint32_t i = 0; i < n_req; i++)
            RS_CHECK(make_req(&f, RS_PIPE_LP_MAX_TOP, &refs[i]) == 0);
        struct rs_wire_logprob lp;
        for (uint32_t i = 0; i < n_req; i++) {
            for (uint32_t k = 0; k < per; k++) {
                struct rs_sample_result r = fake(k + i, RS_PIPE_LP_MAX_TOP);
                RS_CHECK_MSG(rs_pipe_logprob_put(f.lau, refs[i], k, &r) == RS_OK,
                             "round %d request %u entry %u", round, i, k);
                if (k == 0) /* the previous request's entries in this record are gone */
                    RS_CHECK(rs_pipe_logprob_read(f.post, refs[i], 1, 0, &lp) == RS_ENOENT);
            }
        }
        struct rs_arena_stats st;
        RS_CHECK(rs_arena_check(f.lau->logprobs, &st) == RS_OK);
        RS_CHECK(st.n_free < per * 43u / RS_PIPE_LP_CHUNK_WORDS + 1); /* (nearly) full */
        for (uint32_t i = 0; i < n_req; i++) {
            struct rs_sample_result r = fake(per - 1 + i, RS_PIPE_LP_MAX_TOP);
            RS_CHECK(rs_pipe_logprob_read(f.post, refs[i], per - 1, r.token, &lp) == RS_OK &&
                     same(&lp, &r));
            RS_CHECK(rs_arena_free_record(f.post->tokens, f.post->requests, refs[i],
                                          RS_PIPE_REQ_RUNNING) == RS_OK);
        }
    }
    fx_close(&f);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_entries_round_trip_and_redo_is_kept),
    RS_TEST(test_request_without_logprobs_has_none),
    RS_TEST(test_freed_records_chunks_are_reclaimed),
};
RS_TEST_MAIN(cases)

/* SPDX-License-Identifier: MIT */
/*
 * The per-request constraints list (ipc/pipeline_constraint.h): what
 * tokenizerd's role stores reads back identically in launcherd's (text,
 * choices, biases, allowed ids, min_tokens), a record without the flag has
 * none, a reused record holds only its new constraint, a list whose words
 * were damaged is refused as malformed, never read past its length, and the
 * region's chunks are reclaimed from freed records when it fills. Real
 * segment, real roles, stories260K's configuration.
 */
#include <stdlib.h>
#include <string.h>

#include "ipc/pipeline_constraint.h"
#include "ipc/pipeline_req.h"
#include "tests/pipeline_harness.h"
#include "tests/rs_test.h"

struct fx {
    struct rs_pipe_config cfg;
    struct rs_pipe *tok, *lau;
    int32_t *words;
};

static int fx_open(struct fx *f)
{
    char path[480], err[256];
    if (rs_test_refdata("stories260K.gguf", path, sizeof(path)) == NULL)
        return RS_TEST_SKIP;
    rs_pipe_config_default(&f->cfg);
    rs_test_unique_name("cx", f->cfg.instance, sizeof(f->cfg.instance));
    snprintf(f->cfg.model_path, sizeof(f->cfg.model_path), "%s", path);
    f->cfg.max_requests = 4;
    f->cfg.n_kv_blocks = 64;
    f->cfg.n_ctx = 128;
    f->words = malloc(RS_PIPE_CX_MAX_WORDS * 4u);
    if (f->words == NULL || rs_harness_config_resolve(&f->cfg, err, sizeof(err)) != RS_OK ||
        rs_pipe_open(&f->cfg, RS_PIPE_STAGE_TOKENIZERD, &f->tok, err, sizeof(err)) != RS_OK ||
        rs_pipe_open(&f->cfg, RS_PIPE_STAGE_LAUNCHERD, &f->lau, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    return 0;
}

static void fx_close(struct fx *f)
{
    rs_pipe_close(&f->tok);
    rs_pipe_close(&f->lau);
    rs_pipe_unlink(f->cfg.instance);
    free(f->words);
}

/* Claims a record, stores c (when not NULL) as tokenizerd does, publishes it. */
static int make_req(struct fx *f, const struct rs_wire_constraint *c, struct rs_table_ref *ref)
{
    void *rec;
    if (rs_table_claim(f->tok->requests, ref, &rec) != RS_OK)
        return 1;
    struct rs_pipe_req *r = rec;
    memset(r, 0, sizeof(*r));
    r->n_prompt = 1;
    r->flags = c != NULL ? RS_PIPE_F_CONSTRAINED : 0;
    int32_t bos = 1;
    return rs_arena_list_init(f->tok->tokens, *ref) != RS_OK ||
           rs_arena_append(f->tok->tokens, *ref, &bos, 1) != RS_OK ||
           rs_arena_seal(f->tok->tokens, *ref) != RS_OK ||
           (c != NULL && rs_pipe_cx_put(f->tok, *ref, c, f->words) != RS_OK) ||
           rs_table_publish(f->tok->requests, *ref, RS_PIPE_REQ_WAITING) != RS_OK;
}

static int free_req(struct fx *f, struct rs_table_ref ref)
{
    return rs_arena_free_record(f->tok->tokens, f->tok->requests, ref, RS_PIPE_REQ_WAITING) !=
           RS_OK;
}

static int test_stored_constraint_reads_back_in_another_role(void)
{
    struct fx f = {0};
    int rc = fx_open(&f);
    if (rc != 0)
        return rc;
    static const char *const ch[] = {"yes", "no", "ütf-8 ✓"};
    struct rs_wire_bias bias[] = {{5, -100.0f}, {7, 2.5f}};
    uint32_t ids[] = {5, 6, 7, 300};
    struct rs_wire_constraint c;
    memset(&c, 0, sizeof(c));
    c.kind = RS_WIRE_CX_CHOICE;
    c.n_choices = 3;
    for (int i = 0; i < 3; i++)
        c.choices[i] = (struct rs_wire_str){ch[i], (uint32_t)strlen(ch[i])};
    c.n_bias = 2;
    c.bias = bias;
    c.allowed = (struct rs_wire_ids){.n = 4, .vals = ids};
    c.min_tokens = 9;
    struct rs_table_ref ref, plain;
    RS_CHECK(make_req(&f, &c, &ref) == 0 && make_req(&f, NULL, &plain) == 0);
    struct rs_pipe_cx got;
    int32_t *w = calloc(RS_PIPE_CX_MAX_WORDS, 4);
    RS_CHECK(w != NULL && rs_pipe_cx_get(f.lau, ref, w, &got) == RS_OK);
    RS_CHECK(got.kind == RS_WIRE_CX_CHOICE && got.n_choices == 3 && got.min_tokens == 9);
    for (int i = 0; i < 3; i++)
        RS_CHECK(got.choice_lens[i] == strlen(ch[i]) &&
                 memcmp(got.choices[i], ch[i], got.choice_lens[i]) == 0);
    RS_CHECK(got.n_bias == 2 && got.bias_words[0] == 5 && got.bias_words[2] == 7);
    float b;
    memcpy(&b, &got.bias_words[3], 4);
    RS_CHECK(b == 2.5f);
    RS_CHECK(got.n_allowed == 4 && got.allowed[3] == 300);
    RS_CHECK(rs_pipe_cx_get(f.lau, plain, w, &got) == RS_ENOENT);
    /* a reused record: the new request's regex only */
    RS_CHECK(free_req(&f, ref) == 0 && rs_pipe_cx_get(f.lau, ref, w, &got) == RS_ESTALE);
    struct rs_wire_constraint re;
    memset(&re, 0, sizeof(re));
    re.kind = RS_WIRE_CX_REGEX;
    re.text = (struct rs_wire_str){"[0-9]+", 6};
    RS_CHECK(make_req(&f, &re, &ref) == 0 && rs_pipe_cx_get(f.lau, ref, w, &got) == RS_OK);
    RS_CHECK(got.kind == RS_WIRE_CX_REGEX && got.text_len == 6 &&
             memcmp(got.text, "[0-9]+", 6) == 0 && got.n_choices == 0 && got.n_bias == 0 &&
             got.n_allowed == 0 && got.min_tokens == 0);
    free(w);
    fx_close(&f);
    return 0;
}

/* Damaged words (another build, a bug) are refused, never followed past the list. */
static int test_damaged_constraint_is_refused_as_malformed(void)
{
    struct fx f = {0};
    int rc = fx_open(&f);
    if (rc != 0)
        return rc;
    struct rs_wire_constraint c;
    memset(&c, 0, sizeof(c));
    c.kind = RS_WIRE_CX_GBNF;
    c.text = (struct rs_wire_str){"root ::= \"a\"", 12};
    struct rs_table_ref ref;
    RS_CHECK(make_req(&f, &c, &ref) == 0);
    int32_t *w = calloc(RS_PIPE_CX_MAX_WORDS, 4);
    struct rs_pipe_cx got;
    RS_CHECK(w != NULL && rs_pipe_cx_get(f.lau, ref, w, &got) == RS_OK);
    /* Rewrite the list through the arena with each header word damaged in turn. */
    static const struct {
        int word;
        int32_t val;
    } bad[] = {{0, 0x12345678}, {1, 99}, {2, 1 << 20}, {2, 4000}, {3, -1}, {4, 5000}, {7, -3}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint32_t len = 0, n = 0;
        RS_CHECK(rs_arena_len(f.lau->constraints, ref, &len) == RS_OK);
        RS_CHECK(rs_arena_read(f.lau->constraints, ref, 0, len, f.words, &n) == RS_OK);
        f.words[bad[i].word] = bad[i].val;
        RS_CHECK(rs_arena_list_init(f.tok->constraints, ref) == RS_OK &&
                 rs_arena_append(f.tok->constraints, ref, f.words, len) == RS_OK &&
                 rs_arena_seal(f.tok->constraints, ref) == RS_OK);
        RS_CHECK_MSG(rs_pipe_cx_get(f.lau, ref, w, &got) == RS_EIO, "damage %zu accepted", i);
        f.words[bad[i].word] = bad[i].word == 0 ? RS_PIPE_CX_MAGIC : 0; /* restore below */
        struct rs_wire_constraint again = c;
        RS_CHECK(rs_pipe_cx_put(f.tok, ref, &again, f.words) == RS_OK);
    }
    free(w);
    fx_close(&f);
    return 0;
}

/* More requests over time than the region holds at once: freed records' chunks come back. */
static int test_full_region_reclaims_freed_records(void)
{
    struct fx f = {0};
    int rc = fx_open(&f);
    if (rc != 0)
        return rc;
    uint32_t n = rs_pipe_cx_chunks(&f.cfg) * 3;
    char *text = malloc(RS_WIRE_CX_TEXT_MAX);
    RS_CHECK(text != NULL);
    memset(text, 'a', RS_WIRE_CX_TEXT_MAX);
    struct rs_wire_constraint c;
    memset(&c, 0, sizeof(c));
    c.kind = RS_WIRE_CX_REGEX;
    c.text = (struct rs_wire_str){text, RS_WIRE_CX_TEXT_MAX}; /* 8 chunks each */
    for (uint32_t i = 0; i < n / 8 + 4; i++) {
        struct rs_table_ref ref;
        RS_CHECK_MSG(make_req(&f, &c, &ref) == 0, "request %u", i);
        RS_CHECK(free_req(&f, ref) == 0);
    }
    free(text);
    fx_close(&f);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_stored_constraint_reads_back_in_another_role),
    RS_TEST(test_damaged_constraint_is_refused_as_malformed),
    RS_TEST(test_full_region_reclaims_freed_records),
};

RS_TEST_MAIN(cases)

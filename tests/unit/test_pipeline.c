/* SPDX-License-Identifier: MIT */
/* The pipeline layout: open-or-create per stage, configuration checks, record validation. */
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ipc/pipeline_batch.h"
#include "ipc/pipeline_kv.h"
#include "ipc/pipeline_req.h"
#include "ipc/wire_server.h"
#include "tests/pipeline_harness.h"
#include "tests/rs_test.h"

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

/* A published record of n_prompt tokens in the table, as tokenizerd commits one. */
static int publish(struct rs_pipe *tok, uint32_t n_prompt, struct rs_table_ref *ref)
{
    void *rec;
    int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    if (rs_table_claim(tok->requests, ref, &rec) != RS_OK)
        return -1;
    struct rs_pipe_req *r = rec;
    memset(r, 0, sizeof(*r));
    r->n_prompt = n_prompt;
    r->run_slot = RS_PIPE_NO_SLOT;
    if (rs_arena_list_init(tok->tokens, *ref) != RS_OK ||
        rs_arena_append(tok->tokens, *ref, ids, n_prompt) != RS_OK ||
        rs_arena_seal(tok->tokens, *ref) != RS_OK ||
        rs_table_publish(tok->requests, *ref, RS_PIPE_REQ_WAITING) != RS_OK)
        return -1;
    return 0;
}

/* Each of Q1..Q7 (pipeline_req.h) fails the check when broken, and only then. */
static int test_request_invariants_are_checked(void)
{
    struct rs_pipe_config c;
    int rc = make_config(&c);
    if (rc != 0)
        return rc;
    struct rs_pipe *tok, *sch;
    struct rs_pipe_req_stats st;
    struct rs_table_ref a, b;
    char err[256];
    RS_CHECK(rs_pipe_open(&c, RS_PIPE_STAGE_TOKENIZERD, &tok, err, sizeof(err)) == RS_OK);
    RS_CHECK(rs_pipe_open(&c, RS_PIPE_STAGE_SCHEDULERD, &sch, err, sizeof(err)) == RS_OK);
    RS_CHECK(rs_pipe_req_check(tok, &st) == RS_OK && st.n_state[0] == c.max_requests);
    RS_CHECK(publish(tok, 3, &a) == 0 && publish(tok, 2, &b) == 0);
    RS_CHECK(rs_pipe_req_check(sch, &st) == RS_OK && st.n_state[RS_PIPE_REQ_WAITING] == 2);
    struct rs_pipe_req *ra = rs_pipe_req_at(sch, a.index), *rb = rs_pipe_req_at(sch, b.index);
    ra->n_computed = 4; /* Q4: K/V past the list */
    RS_CHECK(rs_pipe_req_check(sch, NULL) == RS_EMISMATCH);
    ra->n_computed = 3;
    rs_pipe_cursor_cur(ra)->n_done = 1; /* Q5: a delta for a token not generated yet */
    RS_CHECK(rs_pipe_req_check(sch, NULL) == RS_EMISMATCH);
    rs_pipe_cursor_cur(ra)->n_done = 0;
    /* admitted to slot 1, as schedulerd does it: row first, then the slot, then RUNNING */
    struct rs_pipe_kvrow *row = rs_pipe_kvrow_at(sch, 1);
    row->blocks[0] = 5;
    atomic_store(&row->n_blocks, 1);
    atomic_store(&row->owner, rs_table_ref_pack(a) + 1);
    ra->run_slot = 1;
    RS_CHECK(rs_table_transition(sch->requests, a, RS_PIPE_REQ_WAITING, RS_PIPE_REQ_RUNNING) ==
             RS_OK);
    RS_CHECK(rs_pipe_req_check(sch, &st) == RS_OK && st.n_state[RS_PIPE_REQ_RUNNING] == 1);
    row->blocks[0] = c.n_kv_blocks; /* Q7: a block outside the pool */
    RS_CHECK(rs_pipe_req_check(sch, NULL) == RS_EMISMATCH);
    row->blocks[0] = 5;
    rb->run_slot = 1; /* Q6: two RUNNING records on one slot */
    RS_CHECK(rs_table_transition(sch->requests, b, RS_PIPE_REQ_WAITING, RS_PIPE_REQ_RUNNING) ==
             RS_OK);
    RS_CHECK(rs_pipe_req_check(sch, NULL) == RS_EMISMATCH);
    rb->run_slot = 2; /* Q6: its slot's row does not name it */
    RS_CHECK(rs_pipe_req_check(sch, NULL) == RS_EMISMATCH);
    rb->run_slot = RS_PIPE_NO_SLOT; /* between its finishing writes: allowed */
    RS_CHECK(rs_pipe_req_check(sch, &st) == RS_OK && st.n_finishing == 1);
    /* finished without a finish word (Q2), then with a word naming no reason (Q3) */
    RS_CHECK(rs_table_transition(sch->requests, b, RS_PIPE_REQ_RUNNING, RS_PIPE_REQ_FINISHED) ==
             RS_OK);
    RS_CHECK(rs_pipe_req_check(sch, NULL) == RS_EMISMATCH);
    RS_CHECK(rs_pipe_finish_set(rb, rs_pipe_finish_make(9, RS_PIPE_STAGE_SCHEDULERD, 0)));
    RS_CHECK(rs_pipe_req_check(sch, NULL) == RS_EMISMATCH);
    atomic_store(&rb->finish,
                 rs_pipe_finish_make(RS_WIRE_FINISH_STOP, RS_PIPE_STAGE_POSTPROCD, 0));
    RS_CHECK(rs_pipe_req_check(sch, &st) == RS_OK && st.n_state[RS_PIPE_REQ_FINISHED] == 1);
    rs_pipe_close(&sch);
    rs_pipe_close(&tok);
    rs_pipe_unlink(c.instance);
    return 0;
}


/* Opens the instance's segment file by name and returns its fstat. */
static int seg_stat(const struct rs_pipe_config *c, struct stat *st)
{
    char name[300];
    if (rs_shm_name(c->instance, name, sizeof(name)) != RS_OK)
        return -1;
    int fd = shm_open(name, O_RDONLY, 0);
    int rc = fd >= 0 ? fstat(fd, st) : -1;
    if (fd >= 0)
        close(fd);
    return rc;
}

/*
 * A valid segment image another user made (or left group/world writable) is refused with
 * a message naming owner and mode, and left exactly as it was: same file, owner, mode.
 */
static int test_foreign_segment_is_refused_untouched(void)
{
    struct rs_pipe_config c;
    int rc = make_config(&c);
    if (rc != 0)
        return rc;
    struct rs_pipe *p;
    char err[320], name[300];
    RS_CHECK(rs_pipe_open(&c, RS_PIPE_STAGE_SCHEDULERD, &p, err, sizeof(err)) == RS_OK);
    rs_pipe_close(&p);
    RS_CHECK(rs_shm_name(c.instance, name, sizeof(name)) == RS_OK);
    int fd = shm_open(name, O_RDWR, 0);
    RS_CHECK(fd >= 0 && fchmod(fd, 0666) == 0);
    int root = geteuid() == 0;
    if (root) /* as root the planted file can belong to another user for real */
        RS_CHECK(fchown(fd, 65534, 65534) == 0);
    close(fd);
    struct stat before, after;
    RS_CHECK(seg_stat(&c, &before) == 0);
    rs_err e = rs_pipe_open(&c, RS_PIPE_STAGE_TOKENIZERD, &p, err, sizeof(err));
    RS_CHECK_MSG(e == RS_EINVAL && p == NULL, "got %s: %s", rs_strerror(e), err);
    RS_CHECK_MSG(strstr(err, "0666") != NULL, "%s", err);
    RS_CHECK_MSG(!root || strstr(err, "uid 65534") != NULL, "%s", err);
    RS_CHECK(seg_stat(&c, &after) == 0);
    RS_CHECK(after.st_ino == before.st_ino && after.st_uid == before.st_uid &&
             (after.st_mode & 07777) == 0666 && after.st_size == before.st_size);
    RS_CHECK(rs_shm_reclaim(name) == (root ? RS_EINVAL : RS_EEXIST));
    RS_CHECK(seg_stat(&c, &after) == 0 && after.st_ino == before.st_ino);
    RS_CHECK(rs_pipe_unlink(c.instance) == RS_OK);
    return 0;
}

/* Bytes of our own that are no segment (another program's, or garbage) are replaced. */
static int test_own_garbage_segment_is_replaced(void)
{
    struct rs_pipe_config c;
    int rc = make_config(&c);
    if (rc != 0)
        return rc;
    char name[300], err[320], junk[8192];
    RS_CHECK(rs_shm_name(c.instance, name, sizeof(name)) == RS_OK);
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (char)(i * 131 + 7);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    RS_CHECK(fd >= 0 && write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk));
    close(fd);
    struct stat before, after;
    RS_CHECK(seg_stat(&c, &before) == 0);
    struct rs_pipe *p;
    rs_err e = rs_pipe_open(&c, RS_PIPE_STAGE_TOKENIZERD, &p, err, sizeof(err));
    RS_CHECK_MSG(e == RS_OK, "got %s: %s", rs_strerror(e), err);
    RS_CHECK(seg_stat(&c, &after) == 0 && after.st_ino != before.st_ino);
    RS_CHECK((after.st_mode & 07777) == 0600);
    rs_pipe_close(&p);
    RS_CHECK(rs_pipe_unlink(c.instance) == RS_OK);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_foreign_segment_is_refused_untouched),
    RS_TEST(test_own_garbage_segment_is_replaced),
    RS_TEST(test_request_invariants_are_checked),
    RS_TEST(test_config_resolves_from_facts_without_a_file),
    RS_TEST(test_every_stage_opens_one_segment),
    RS_TEST(test_config_mismatch_is_named),
    RS_TEST(test_batch_check_rejects_bad_records),
};
RS_TEST_MAIN(cases)

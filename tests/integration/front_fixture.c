/* SPDX-License-Identifier: MIT */
/*
 * The frontend fixture (front_fixture.h): instances, daemons, raw clients
 * and CURVE keys for the tokenizerd and postprocd tests.
 * Part of rs_testlib, linked by the tests and benches that include the header.
 */
#include "tests/integration/front_fixture.h"

int fx_inst_init(struct fx_inst *in, const char *model, uint32_t n_ctx,
          uint32_t max_requests)
{
    char err[256];
    memset(in, 0, sizeof(*in));
    if (model[0] == '/') /* a file the test made */
        snprintf(in->model, sizeof(in->model), "%s", model);
    else if (rs_test_refdata(model, in->model, sizeof(in->model)) == NULL)
        return RS_TEST_SKIP;
    rs_pipe_config_default(&in->cfg);
    rs_test_unique_name("front", in->cfg.instance, sizeof(in->cfg.instance));
    snprintf(in->cfg.model_path, sizeof(in->cfg.model_path), "%s", in->model);
    in->cfg.n_ctx = n_ctx;
    in->cfg.max_requests = max_requests;
    in->cfg.n_kv_blocks = (n_ctx + 15) / 16 * 4;
    in->cfg.max_seqs = 4;
    in->cfg.max_batched_tokens = 64;
    if (rs_harness_config_resolve(&in->cfg, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "config: %s\n", err);
        return 1;
    }
    snprintf(in->rundir, sizeof(in->rundir), "%s/%s", rs_test_tmpdir(), in->cfg.instance);
    if (rs_rundir_prepare(in->rundir, NULL) != RS_OK)
        return 1;
    in->zctx = zmq_ctx_new();
    return in->zctx != NULL ? 0 : 1;
}

int fx_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

void fx_inst_fini_ex(struct fx_inst *in, int passed)
{
    if (in->zctx != NULL)
        zmq_ctx_term(in->zctx);
    in->zctx = NULL;
    rs_pipe_unlink(in->cfg.instance);
    if (passed)
        nftw(rs_test_tmpdir(), fx_rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

void fx_inst_fini(struct fx_inst *in)
{
    fx_inst_fini_ex(in, 0);
}

struct rs_pipe *fx_open(const struct fx_inst *in, enum rs_pipe_stage stage)
{
    struct rs_pipe *p = NULL;
    char err[256];
    if (rs_pipe_open(&in->cfg, stage, &p, err, sizeof(err)) != RS_OK) {
        fprintf(stderr, "rs_pipe_open(%s): %s\n", rs_pipe_stage_name(stage), err);
        return NULL;
    }
    rs_role_ready(p->role);
    return p;
}

void fx_daemon_dump_log(const struct fx_daemon *dm)
{
    FILE *f = fopen(dm->log, "r");
    char line[1024];
    fprintf(stderr, "---- %s ----\n", dm->log);
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        fputs(line, stderr);
    if (f != NULL)
        fclose(f);
}

int fx_daemon_start(const struct fx_inst *in, const char *name, struct fx_daemon *dm,
             const char *const *extra)
{
    static unsigned seq;
    char bin[400], ctx[16], maxreq[16], kv[16], seqs[16], mbt[16];
    const char *argv[64];
    int n = 0;
    snprintf(bin, sizeof(bin), "%s/%s", rs_test_bindir(), name);
    snprintf(ctx, sizeof(ctx), "%u", in->cfg.n_ctx);
    snprintf(maxreq, sizeof(maxreq), "%u", in->cfg.max_requests);
    snprintf(kv, sizeof(kv), "%u", in->cfg.n_kv_blocks);
    snprintf(seqs, sizeof(seqs), "%u", in->cfg.max_seqs);
    snprintf(mbt, sizeof(mbt), "%u", in->cfg.max_batched_tokens);
    snprintf(dm->log, sizeof(dm->log), "%s/%s-%u.log", rs_test_tmpdir(), name, seq++);
    const char *fixed[] = {bin, "--model", in->cfg.model_path, "--instance", in->cfg.instance,
                           "--ctx", ctx, "--max-requests", maxreq, "--kv-blocks", kv,
                           "--max-seqs", seqs, "--max-batched-tokens", mbt, "--rundir",
                           in->rundir};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        argv[n++] = fixed[i];
    for (size_t i = 0; extra != NULL && extra[i] != NULL && n < 62; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    fflush(stderr);
    dm->pid = fork();
    if (dm->pid < 0)
        return 1;
    if (dm->pid == 0) {
        int fd = open(dm->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    return 0;
}

int fx_daemon_ready(const struct rs_pipe *p, const char *name, struct fx_daemon *dm)
{
    int role = rs_role_find(p->shm, name);
    for (int i = 0; i < 3000 && role >= 0; i++) {
        struct rs_role_info info;
        if (rs_role_info_at(p->shm, (uint32_t)role, &info) == RS_OK &&
            info.pid == (uint32_t)dm->pid && info.phase == RS_ROLE_READY)
            return 0;
        int st;
        if (waitpid(dm->pid, &st, WNOHANG) == dm->pid) {
            fprintf(stderr, "%s exited during start-up (status 0x%x)\n", name, st);
            dm->pid = 0;
            fx_daemon_dump_log(dm);
            return 1;
        }
        usleep(5000);
    }
    fprintf(stderr, "%s not ready after 15 s\n", name);
    fx_daemon_dump_log(dm);
    return 1;
}

int fx_daemon_wait(struct fx_daemon *dm)
{
    int st = 0;
    if (dm->pid <= 0)
        return dm->status;
    while (waitpid(dm->pid, &st, 0) < 0 && errno == EINTR) {
    }
    dm->pid = 0;
    dm->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return dm->status;
}

int fx_daemon_stop(struct fx_daemon *dm)
{
    if (dm->pid > 0)
        kill(dm->pid, SIGTERM);
    return fx_daemon_wait(dm);
}

void fx_daemon_kill(struct fx_daemon *dm)
{
    if (dm->pid > 0)
        kill(dm->pid, SIGKILL);
    fx_daemon_wait(dm);
}

int fx_client_open(const struct fx_inst *in, const char *daemon, const char *rid,
            struct fx_client *c)
{
    char file[64], ep[RS_ZSOCK_ENDPOINT_MAX];
    struct rs_zsock_cfg cfg;
    memset(c, 0, sizeof(*c));
    rs_zsock_cfg_default(RS_ZSOCK_DEALER, &cfg);
    if (rid != NULL) {
        cfg.routing_id = rid;
        cfg.routing_id_len = strlen(rid);
    }
    snprintf(file, sizeof(file), "%s.sock", daemon);
    if (rs_rundir_endpoint(in->rundir, file, ep, sizeof(ep)) != RS_OK ||
        rs_zsock_create(in->zctx, RS_ZSOCK_DEALER, ep, &cfg, &c->s) != RS_OK)
        return 1;
    c->buf = malloc(RS_WIRE_SERVER_MSG_MAX);
    rs_wire_buf_init(&c->enc, RS_WIRE_CLIENT_MSG_MAX * 2);
    return c->buf != NULL ? 0 : 1;
}

void fx_client_close(struct fx_client *c)
{
    rs_zsock_destroy(&c->s);
    free(c->buf);
    c->buf = NULL;
    rs_wire_buf_fini(&c->enc);
}

int fx_send_raw(struct fx_client *c, const void *body, size_t len)
{
    for (int i = 0; i < 400; i++) {
        rs_err rc = rs_zsock_send(c->s, body, len);
        if (rc == RS_OK)
            return 0;
        if (rc != RS_EAGAIN)
            return 1;
        usleep(5000);
    }
    fprintf(stderr, "client send: no connection after 2 s\n");
    return 1;
}

int fx_send(struct fx_client *c, const struct rs_wire_client_msg *m)
{
    if (rs_wire_client_encode(m, &c->enc) != RS_OK)
        return 1;
    return fx_send_raw(c, c->enc.data, c->enc.len);
}

int fx_recv(struct fx_client *c, int timeout_ms, struct rs_wire_server_msg *m)
{
    zmq_msg_t body;
    zmq_msg_init(&body);
    uint64_t end = rs_clock_ms() + (uint64_t)timeout_ms;
    rs_err rc;
    do {
        rc = rs_zsock_recv(c->s, NULL, &body, 20);
    } while (rc == RS_EAGAIN && rs_clock_ms() < end);
    if (rc != RS_OK) {
        zmq_msg_close(&body);
        return 1;
    }
    c->len = zmq_msg_size(&body);
    memcpy(c->buf, zmq_msg_data(&body), c->len);
    zmq_msg_close(&body);
    struct rs_wire_error err;
    if (rs_wire_server_decode(c->buf, c->len, m, &err) != RS_OK) {
        fprintf(stderr, "client: undecodable server message: %s\n", err.msg);
        return 1;
    }
    return 0;
}

void fx_generate(struct rs_wire_client_msg *m, const char *id, const char *prompt)
{
    memset(m, 0, sizeof(*m));
    m->type = RS_WIRE_T_GENERATE;
    snprintf(m->id, sizeof(m->id), "%s", id);
    rs_wire_generate_init(&m->u.gen);
    m->u.gen.has = RS_WIRE_GEN_PROMPT;
    m->u.gen.prompt = (struct rs_wire_str){prompt, (uint32_t)strlen(prompt)};
}

int fx_curve_setup(struct fx_curve *k)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
        return 1;
    close(fd); /* the daemon binds it next */
    snprintf(k->listen, sizeof(k->listen), "tcp://127.0.0.1:%d", ntohs(sa.sin_port));
    snprintf(k->secret, sizeof(k->secret), "%s/server.key", rs_test_tmpdir());
    snprintf(k->allow, sizeof(k->allow), "%s/allow", rs_test_tmpdir());
    RS_CHECK(rs_zcert_generate(&k->server) == RS_OK && rs_zcert_generate(&k->good) == RS_OK &&
             rs_zcert_generate(&k->bad) == RS_OK);
    RS_CHECK(rs_zcert_save(&k->server, k->secret, NULL) == RS_OK);
    FILE *f = fopen(k->allow, "w");
    RS_CHECK(f != NULL);
    fprintf(f, "# the one client allowed\n%s\n", k->good.public_z85);
    fclose(f);
    const char *args[7] = {"--listen", k->listen, "--curve-secret", k->secret, "--curve-allow",
                           k->allow, NULL};
    memcpy(k->args, args, sizeof(args));
    return 0;
}

int fx_curve_client(const struct fx_inst *in, const struct fx_curve *k, int good,
                    const char *rid, struct fx_client *c)
{
    struct rs_zsock_cfg cfg;
    memset(c, 0, sizeof(*c));
    rs_zsock_cfg_default(RS_ZSOCK_DEALER, &cfg);
    cfg.routing_id = rid;
    cfg.routing_id_len = strlen(rid);
    cfg.curve = good ? &k->good : &k->bad;
    cfg.curve_server_public = k->server.public_z85;
    RS_CHECK(rs_zsock_create(in->zctx, RS_ZSOCK_DEALER, k->listen, &cfg, &c->s) == RS_OK);
    c->buf = malloc(RS_WIRE_SERVER_MSG_MAX);
    rs_wire_buf_init(&c->enc, RS_WIRE_CLIENT_MSG_MAX);
    return c->buf != NULL ? 0 : 1;
}

void fx_pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

void fx_pack_head(msgpack_packer *pk, int v, const char *type, const char *id,
           unsigned n_extra)
{
    msgpack_pack_map(pk, 3 + n_extra);
    fx_pack_str(pk, "v");
    msgpack_pack_int(pk, v);
    fx_pack_str(pk, "type");
    fx_pack_str(pk, type);
    fx_pack_str(pk, "id");
    fx_pack_str(pk, id);
}

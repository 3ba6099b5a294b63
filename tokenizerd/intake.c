/* SPDX-License-Identifier: MIT */
/*
 * A generate request into a committed request record (pipeline_req.h,
 * CLAIMED -> WAITING): validate, deduplicate by (client, request id), tokenize with the
 * model's vocab, claim a record (full table = "overloaded"), fill the intake
 * fields, write the prompt into the token arena, publish WAITING, acknowledge
 * and ring schedulerd. Each step before the publish may be lost to a crash:
 * the table and arena recovery reclaim an unpublished record and the client
 * resends. Leaves out scheduling (schedulerd) and output (postprocd).
 */
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/pipeline_constraint.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "tokenizerd/tokd.h"


static void metric(struct tokd *t, unsigned i, uint64_t n)
{
    rs_counter_add(&t->p->metrics->stage[RS_PIPE_STAGE_TOKENIZERD].counter[i], n);
}

/* 63 random bits: a seed the server picks stays a plain integer in JSON (common/json.h). */
static uint64_t pick_seed(void)
{
    uint64_t seed;
    if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) == (ssize_t)sizeof(seed))
        return seed & INT64_MAX;
    /* Entropy pool not ready (early boot): any value serves, the ack reports it. */
    return (rs_clock_ns() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid()) & INT64_MAX;
}

static void send_ack(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                     const struct rs_pipe_req *r)
{
    struct rs_wire_server_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RS_WIRE_T_ACK;
    memcpy(m.id, r->id, sizeof(m.id));
    m.u.ack.prompt_tokens = r->n_prompt;
    m.u.ack.handle = r->handle;
    m.u.ack.seed = r->sampling.seed;
    if (rs_wire_server_encode(&m, &t->out) == RS_OK)
        tokd_send(t, sock, peer);
    else
        rs_log_req(RS_LOG_ERROR, r->handle, RS_LOG_NOID, "cannot encode the ack of '%s'", r->id);
}

/*
 * A text prompt tokenized into t->ids (BOS per the vocab; an empty text is
 * BOS alone). 0 on success, or 1 after answering the client.
 */
static int tokenize_prompt(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                           const struct rs_wire_client_msg *m, uint32_t *n_out)
{
    const struct rs_wire_generate *g = &m->u.gen;
    uint32_t n_ctx = t->p->cfg.n_ctx;
    uint64_t t0 = rs_clock_ns();
    size_t n = 0;
    rs_err rc = rs_tokenizer_encode(t->tok, g->prompt.ptr, g->prompt.len,
                                    RS_TOKENIZE_ADD_SPECIAL | RS_TOKENIZE_PARSE_SPECIAL, t->ids,
                                    n_ctx, &n);
    rs_hist_add_ns(&t->p->metrics->stage[RS_PIPE_STAGE_TOKENIZERD].hist[RS_H_TOK_TOKENIZE],
                   rs_clock_ns() - t0);
    if (rc == RS_ERANGE || (rc == RS_OK && n >= n_ctx)) {
        tokd_reply_error(t, sock, peer, m->id, RS_WIRE_PROMPT_TOO_LONG,
                         "prompt is %zu tokens; the model's context is %u tokens, which leaves "
                         "no room to generate", n, n_ctx);
        return 1;
    }
    if (rc != RS_OK) {
        tokd_reply_error(t, sock, peer, m->id, RS_WIRE_INTERNAL, "tokenizer failed: %s",
                         rs_strerror(rc));
        return 1;
    }
    if (n == 0) {
        int32_t bos = rs_vocab_bos(t->vocab);
        if (bos == RS_VOCAB_NONE) {
            tokd_reply_error(t, sock, peer, m->id, RS_WIRE_INVALID_PARAM,
                             "field 'prompt': empty, and the model's vocab has no BOS token "
                             "to start from");
            return 1;
        }
        t->ids[n++] = bos;
    }
    *n_out = (uint32_t)n;
    return 0;
}

/* The intake fields of a claimed record (private until published). */
static void fill_record(struct tokd *t, struct rs_pipe_req *r, int tcp,
                        const struct rs_zsock_peer *peer, const struct rs_wire_client_msg *m,
                        const struct rs_pipe_owner *owner, uint32_t n_prompt, uint64_t hash,
                        uint64_t arrival_ns)
{
    const struct rs_wire_generate *g = &m->u.gen;
    memset(r, 0, sizeof(*r)); /* a reused record keeps the last request's fields otherwise */
    r->arrival_ns = arrival_ns;
    memcpy(r->id, m->id, sizeof(r->id));
    r->client_len = peer->len;
    memcpy(r->client, peer->id, peer->len);
    memcpy(r->owner, owner->d, sizeof(r->owner));
    r->flags = (g->stream ? RS_PIPE_F_STREAM : 0) | (g->ignore_eos ? RS_PIPE_F_IGNORE_EOS : 0) |
               (tcp ? RS_PIPE_F_TCP : 0) | (tokd_constrained(g) ? RS_PIPE_F_CONSTRAINED : 0);
    r->n_prompt = n_prompt;
    uint32_t room = t->p->cfg.n_ctx - n_prompt;
    r->max_tokens = g->max_tokens != 0 && g->max_tokens < room ? g->max_tokens : room;
    r->priority = g->priority;
    rs_wire_generate_sampling(g, &r->sampling);
    if (!(g->has & RS_WIRE_GEN_SEED))
        r->sampling.seed = pick_seed();
    r->n_stop_ids = g->n_stop_ids;
    for (uint32_t i = 0; i < g->n_stop_ids; i++)
        r->stop_ids[i] = (int32_t)g->stop_ids[i];
    r->n_stop = g->n_stop;
    for (uint32_t i = 0; i < g->n_stop; i++) {
        r->stop_len[i] = (uint16_t)g->stop[i].len;
        memcpy(r->stop[i], g->stop[i].ptr, g->stop[i].len);
    }
    r->run_slot = RS_PIPE_NO_SLOT;
    r->intake_hash = hash;
}

/* Writes the prompt and publishes; on failure the record is released again. */
static rs_err commit(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                     struct rs_table_ref ref, struct rs_pipe_req *r, const struct rs_wire_generate *g)
{
    struct rs_pipe *p = t->p;
    rs_err rc = rs_arena_list_init(p->tokens, ref);
    if (rc == RS_OK)
        rc = rs_arena_append(p->tokens, ref, t->ids, r->n_prompt);
    if (rc == RS_OK)
        rc = rs_arena_seal(p->tokens, ref);
    if (rc == RS_OK)
        rc = tokd_constraint_store(t, ref, g);
    if (rc == RS_OK) {
        r->handle = atomic_fetch_add(&p->shared->next_handle, 1) + 1;
        r->accepted_ns = rs_clock_ns();
        rc = rs_table_publish(p->requests, ref, RS_PIPE_REQ_WAITING);
    }
    if (rc == RS_OK)
        return RS_OK;
    if (rc != RS_ESTALE)
        rs_arena_free_record(p->tokens, p->requests, ref, RS_TABLE_CLAIMED);
    if (rc == RS_ENOMEM) {
        t->reclaim_wanted = 1;
        metric(t, RS_M_TOK_OVERLOADED, 1);
        tokd_reply_error(t, sock, peer, r->id, RS_WIRE_OVERLOADED, "token arena full (%u "
                         "prompt tokens do not fit now); retry later", r->n_prompt);
        return RS_OK;
    }
    if (rc != RS_ESTALE)
        tokd_reply_error(t, sock, peer, r->id, RS_WIRE_INTERNAL, "cannot store the prompt: %s",
                         rs_strerror(rc));
    return rc == RS_ESTALE ? RS_ESTALE : RS_EIO;
}

/*
 * A generate whose (client, id) names a published record. The same content
 * is a resend: acknowledged again, never run twice (also after its final,
 * since a client whose ack was lost cannot tell). Different content is a
 * new request reusing the id once the old one is over (final sent: its
 * lingering output is released now, so one id never names two records);
 * while the old one is still running it is refused as `duplicate`.
 * Returns 1 when answered, 0 when the caller should run it as new.
 */
static int answer_existing(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                           const struct rs_wire_client_msg *m, struct rs_table_ref ref,
                           uint64_t hash, const struct rs_pipe_owner *owner)
{
    struct rs_pipe_req *r = rs_pipe_req_at(t->p, ref.index);
    if (tokd_owner_refuse(t, sock, peer, r, "a generate", owner))
        return 1;
    if (r->intake_hash == hash) {
        metric(t, RS_M_TOK_DUPLICATES, 1);
        rs_log_req(RS_LOG_INFO, r->handle, RS_LOG_NOID, "resent request '%s' acknowledged "
                   "again", r->id);
        send_ack(t, sock, peer, r);
        return 1;
    }
    uint32_t state, gen, incarnation;
    rs_table_peek(t->p->requests, ref.index, &state, &gen, &incarnation);
    if (gen == ref.gen && state == RS_PIPE_REQ_FINISHED && rs_pipe_cursor_cur(r)->final_sent) {
        rs_log_req(RS_LOG_INFO, r->handle, RS_LOG_NOID, "request id '%s' reused after its "
                   "final: releasing the old output now", r->id);
        rs_arena_free_record(t->p->tokens, t->p->requests, ref, RS_PIPE_REQ_FINISHED);
        return 0; /* freed here, or by postprocd meanwhile: either way gone */
    }
    tokd_reply_error(t, sock, peer, m->id, RS_WIRE_DUPLICATE, "request id '%s' is in flight "
                     "with different content (handle %llu)", m->id, (unsigned long long)r->handle);
    return 1;
}

static int check_client(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                        const struct rs_wire_client_msg *m)
{
    struct rs_wire_error err;
    struct rs_wire_limits lim = {.n_ctx = t->p->cfg.n_ctx, .n_vocab = t->p->cfg.n_vocab};
    if (!rs_zsock_peer_is_named(peer))
        tokd_reply_error(t, sock, peer, m->id, RS_WIRE_BAD_REQUEST, "generate needs a "
                         "client-chosen routing id (ZMQ_ROUTING_ID), the one the client also "
                         "uses with postprocd, which sends the output there");
    else if (peer->len > RS_PIPE_CLIENT_MAX)
        tokd_reply_error(t, sock, peer, m->id, RS_WIRE_BAD_REQUEST, "routing id is %u bytes; "
                         "at most %d", peer->len, RS_PIPE_CLIENT_MAX);
    else if (rs_wire_generate_validate(&m->u.gen, &lim, &err) != RS_OK)
        tokd_reply_error(t, sock, peer, m->id, err.code, "%s", err.msg);
    else
        return 0;
    return 1;
}

rs_err tokd_generate(struct tokd *t, rs_zsock *sock, int tcp, const struct rs_zsock_peer *peer,
                     const struct rs_wire_client_msg *m, const struct rs_pipe_owner *owner,
                     uint64_t arrival_ns)
{
    struct rs_pipe *p = t->p;
    if (check_client(t, sock, peer, m))
        return RS_OK;
    const struct rs_wire_generate *g = &m->u.gen;
    uint32_t n_ids = 0;
    if (g->has & RS_WIRE_GEN_PROMPT_IDS)
        n_ids = rs_wire_ids_copy(&g->prompt_ids, (uint32_t *)t->ids, p->cfg.n_ctx);
    uint64_t hash = dedup_content_hash(g, t->ids, n_ids);
    struct dedup_key key = {.tcp = tcp, .client = peer->id, .client_len = peer->len,
                            .id = m->id, .id_len = (uint32_t)strlen(m->id)};
    struct rs_table_ref ref;
    if (dedup_find(t->index, p->requests, &key, &ref) &&
        answer_existing(t, sock, peer, m, ref, hash, owner))
        return RS_OK;
    if (tokd_owner_admit(t, sock, peer, m, owner))
        return RS_OK; /* before tokenizing: a refused prompt costs no tokenizer time */
    if (tokd_constraint_check(t, sock, peer, m))
        return RS_OK;
    void *rec;
    rs_err rc = rs_table_claim(p->requests, &ref, &rec);
    if (rc == RS_EFULL) {
        t->reclaim_wanted = 1;
        metric(t, RS_M_TOK_OVERLOADED, 1);
        tokd_reply_error(t, sock, peer, m->id, RS_WIRE_OVERLOADED, "%u requests in flight, the "
                         "most this server holds; retry later", p->cfg.max_requests);
        return RS_OK;
    }
    if (rc == RS_ESTALE)
        return RS_ESTALE;
    if (rc != RS_OK) {
        tokd_reply_error(t, sock, peer, m->id, RS_WIRE_INTERNAL, "cannot claim a request "
                         "record: %s", rs_strerror(rc));
        return RS_OK;
    }
    /* The record is claimed before tokenizing, so a full table costs no tokenizer time. */
    uint32_t n_prompt = n_ids;
    if (((g->has & RS_WIRE_GEN_PROMPT) && tokenize_prompt(t, sock, peer, m, &n_prompt)) ||
        ((g->has & RS_WIRE_GEN_MESSAGES) && tokd_chat_tokenize(t, sock, peer, m, &n_prompt))) {
        rs_table_free(p->requests, ref, RS_TABLE_CLAIMED); /* nothing written to it yet */
        return RS_OK;
    }
    struct rs_pipe_req *r = rec;
    fill_record(t, r, tcp, peer, m, owner, n_prompt, hash, arrival_ns);
    if ((rc = commit(t, sock, peer, ref, r, g)) != RS_OK)
        return rc == RS_ESTALE ? RS_ESTALE : RS_OK;
    dedup_insert(t->index, &key, ref);
    send_ack(t, sock, peer, r);
    rs_pipe_door_ring(t->doors, RS_PIPE_STAGE_SCHEDULERD, RS_WIRE_DOOR_REQUEST_READY, ref.index,
                      ref.gen);
    metric(t, RS_M_TOK_ACCEPTED, 1);
    metric(t, RS_M_TOK_PROMPT_TOKENS, n_prompt);
    rs_hist_add_ns(&p->metrics->stage[RS_PIPE_STAGE_TOKENIZERD].hist[RS_H_TOK_INTAKE],
                   rs_clock_ns() - arrival_ns);
    rs_log_req(RS_LOG_DEBUG, r->handle, RS_LOG_NOID, "accepted '%s': %u prompt tokens, record "
               "%u/%u", r->id, n_prompt, ref.index, ref.gen);
    return RS_OK;
}

void tokd_cancel(struct tokd *t, rs_zsock *sock, int tcp, const struct rs_zsock_peer *peer,
                 const struct rs_wire_client_msg *m, const struct rs_pipe_owner *owner)
{
    struct dedup_key key = {.tcp = tcp, .client = peer->id, .client_len = peer->len,
                            .id = m->id, .id_len = (uint32_t)strlen(m->id)};
    struct rs_table_ref ref;
    if (!dedup_find(t->index, t->p->requests, &key, &ref)) {
        tokd_reply_error(t, sock, peer, m->id, RS_WIRE_NOT_FOUND, "no request '%s' in flight "
                         "from this client", m->id);
        return;
    }
    struct rs_pipe_req *r = rs_pipe_req_at(t->p, ref.index);
    if (tokd_owner_refuse(t, sock, peer, r, "a cancel", owner))
        return;
    int set = rs_pipe_finish_set(r, rs_pipe_finish_make(RS_WIRE_FINISH_ABORT,
                                                        RS_PIPE_STAGE_TOKENIZERD, 0));
    struct rs_wire_door door;
    memset(&door, 0, offsetof(struct rs_wire_door, entries));
    door.kind = RS_WIRE_DOOR_CANCEL;
    door.u.cancel.slot = ref.index;
    door.u.cancel.gen = ref.gen;
    door.u.cancel.reason = RS_WIRE_CANCEL_CLIENT;
    rs_pipe_door_send(t->doors, RS_PIPE_STAGE_SCHEDULERD, &door);
    metric(t, RS_M_TOK_CANCELS, 1);
    rs_log_req(RS_LOG_INFO, r->handle, RS_LOG_NOID, "client cancelled '%s'%s", r->id,
               set ? "" : " (it had already finished)");
}

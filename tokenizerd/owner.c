/* SPDX-License-Identifier: MIT */
/*
 * Owners at intake: which client a message comes from (the routing-id map
 * of ipc/pipeline_owner.h), refusing another owner's requests, and each
 * owner's share of the server, checked before a prompt is tokenized. The
 * shares are counted from the request table itself (shared memory is the
 * truth, so a restarted tokenizerd counts the same), one pass per generate.
 * Each owner has a share (--owner-share of each resource): records (in
 * flight or finished and not yet released), token-arena chunks and
 * logprob chunks. Within its share an owner is admitted while there is
 * room; beyond it only while a whole share stays free after the admission,
 * so a client alone may use most of the server (a gateway serving everyone
 * is one client) and yet a newcomer always finds a share free, whatever
 * floods are running. Token and logprob space are reserved for each
 * request's worst case (prompt plus max_tokens) at admission, and the
 * reservations never exceed a region, so no request ends with `error`
 * because another one took the space.
 * Leaves out the order requests run in (schedulerd).
 */
#include <string.h>

#include "common/log.h"
#include "ipc/pipeline_logprob.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "tokenizerd/tokd.h"

/* Token chunks a list of n tokens takes. */
static uint64_t tok_chunks(const struct tokd *t, uint64_t n)
{
    uint32_t per = t->p->cfg.chunk_tokens;
    return (n + per - 1) / per;
}

void tokd_owner_limits(struct tokd *t)
{
    const struct rs_pipe_config *c = &t->p->cfg;
    uint32_t share = t->opts.owner_share_pct != 0 ? t->opts.owner_share_pct : 25;
    t->lp_pool_chunks = rs_pipe_lp_pool_chunks(c);
    t->owner_max_requests = t->opts.owner_max_requests != 0
                                ? t->opts.owner_max_requests
                                : (uint32_t)((uint64_t)c->max_requests * share / 100);
    if (t->owner_max_requests == 0)
        t->owner_max_requests = 1;
    t->owner_max_lp_chunks = (uint64_t)t->lp_pool_chunks * share / 100;
    t->owner_max_tok_chunks = (uint64_t)c->n_chunks * share / 100;
    uint64_t list = tok_chunks(t, c->n_ctx);
    if (t->owner_max_tok_chunks < list)
        t->owner_max_tok_chunks = list;
    uint64_t one = rs_pipe_lp_chunks_for(c->n_ctx, RS_PIPE_LP_MAX_TOP);
    if (t->owner_max_lp_chunks < one)
        t->owner_max_lp_chunks = one; /* every owner can run one request at its worst */
}

/* Logprob chunks record r reserves: its worst case, every allowed output token. */
static uint64_t lp_reserved(const struct rs_pipe_req *r)
{
    return rs_pipe_lp_chunks_for(r->max_tokens, (uint32_t)r->sampling.n_logprobs);
}

void tokd_owner_usage(struct tokd *t, const struct rs_pipe_owner *owner, struct tokd_use *u)
{
    uint32_t cursor = 0, state;
    struct rs_table_ref ref;
    uint64_t published = ~((1ull << RS_TABLE_USER) - 1);
    memset(u, 0, sizeof(*u));
    while (rs_table_next(t->p->requests, &cursor, published, &ref, &state) == RS_OK) {
        const struct rs_pipe_req *r = rs_pipe_req_at(t->p, ref.index);
        uint64_t lp = lp_reserved(r);
        uint64_t tk = tok_chunks(t, (uint64_t)r->n_prompt + r->max_tokens);
        u->lp_chunks_all += lp;
        u->tok_chunks_all += tk;
        u->n_all++;
        if (memcmp(r->owner, owner->d, sizeof(owner->d)) != 0)
            continue;
        u->n_requests++;
        u->lp_chunks += lp;
        u->tok_chunks += tk;
    }
}

/* One resource an admission needs: what the owner and everyone hold, the request's need. */
struct res {
    const char *name;
    uint64_t mine, all, need, pool, share;
};

/* Refused: the pool cannot hold it, or it takes the owner beyond its share while less than
 * a share would stay free for the others. */
static int over(const struct res *r)
{
    if (r->need == 0)
        return 0;
    if (r->all + r->need > r->pool)
        return 1;
    return r->mine + r->need > r->share && r->pool - r->all - r->need < r->share;
}

/*
 * Admission by share, before tokenizing: a request whose owner is at its
 * limit, or that does not fit, is answered `overloaded` (retry later) and
 * costs the server nothing more. A text prompt's token count is unknown
 * yet, so its reservations assume one token per byte plus BOS, capped by
 * the context, and every allowed output token. Returns 1 when answered.
 */
int tokd_owner_admit(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                     const struct rs_wire_client_msg *m, const struct rs_pipe_owner *owner)
{
    const struct rs_wire_generate *g = &m->u.gen;
    const struct rs_pipe_config *c = &t->p->cfg;
    uint64_t out_max = g->max_tokens != 0 && g->max_tokens < c->n_ctx ? g->max_tokens : c->n_ctx;
    uint64_t in_max = (g->has & RS_WIRE_GEN_PROMPT) ? (uint64_t)g->prompt.len + 1
                                                    : g->prompt_ids.n;
    uint64_t list_max = in_max + out_max < c->n_ctx ? in_max + out_max : c->n_ctx;
    struct tokd_use u;
    tokd_owner_usage(t, owner, &u);
    const struct res table[] = {
        {"requests", u.n_requests, u.n_all, 1, c->max_requests, t->owner_max_requests},
        {"token space (chunks)", u.tok_chunks, u.tok_chunks_all, tok_chunks(t, list_max),
         c->n_chunks, t->owner_max_tok_chunks},
        {"logprob space (chunks)", u.lp_chunks, u.lp_chunks_all,
         rs_pipe_lp_chunks_for(out_max, g->logprobs), t->lp_pool_chunks,
         t->owner_max_lp_chunks},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        const struct res *r = &table[i];
        if (!over(r))
            continue;
        rs_counter_add(
            &t->p->metrics->stage[RS_PIPE_STAGE_TOKENIZERD].counter[RS_M_TOK_OVERLOADED], 1);
        tokd_reply_error(t, sock, peer, m->id, RS_WIRE_OVERLOADED, "no room for this request's "
                         "%s: this client holds %llu (its share %llu), the server %llu of %llu, "
                         "it needs %llu; the rest is kept for other clients. Retry after some "
                         "finish", r->name, (unsigned long long)r->mine,
                         (unsigned long long)r->share, (unsigned long long)r->all,
                         (unsigned long long)r->pool, (unsigned long long)r->need);
        return 1;
    }
    return 0;
}

/* 1 (after answering `forbidden` and logging) when record r belongs to another owner. */
int tokd_owner_refuse(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                      const struct rs_pipe_req *r, const char *what,
                      const struct rs_pipe_owner *owner)
{
    if (memcmp(r->owner, owner->d, sizeof(owner->d)) == 0)
        return 0;
    char tag[9];
    rs_pipe_owner_tag(owner, tag);
    rs_log_req(RS_LOG_WARN, r->handle, RS_LOG_NOID, "refused %s of '%s' from client %s: the "
               "request belongs to another client", what, r->id, tag);
    tokd_reply_error(t, sock, peer, r->id, RS_WIRE_FORBIDDEN, "request '%s' belongs to another "
                     "client (routing id and owner must both match)", r->id);
    return 1;
}

/* SPDX-License-Identifier: MIT */
/*
 * Owners at intake: which client a message comes from (the routing-id map
 * of ipc/pipeline_owner.h), refusing another owner's requests, and each
 * owner's share of the server, checked before a prompt is tokenized. The
 * shares are counted from the request table itself (shared memory is the
 * truth, so a restarted tokenizerd counts the same), one pass per generate.
 * Each owner has a share: owner_max_requests records (in flight or finished
 * and not yet released) and owner_max_lp_chunks logprob chunks. Within its
 * share an owner is admitted while there is room; beyond it only while a
 * whole share stays free after the admission, so a client alone may use
 * most of the server (a gateway serving everyone is one client) and yet a
 * newcomer always finds a share free, whatever floods are running. Logprob
 * space is reserved for each request's worst case (max_tokens entries) at
 * admission, and the sum of reservations never exceeds the region, so a
 * request never ends with `error` because another one took the space.
 * Leaves out the order requests run in (schedulerd).
 */
#include <string.h>

#include "common/log.h"
#include "ipc/pipeline_logprob.h"
#include "ipc/pipeline_metrics.h"
#include "ipc/pipeline_req.h"
#include "tokenizerd/tokd.h"

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
        u->lp_chunks_all += lp;
        u->n_all++;
        if (memcmp(r->owner, owner->d, sizeof(owner->d)) != 0)
            continue;
        u->n_requests++;
        u->lp_chunks += lp;
    }
}

/*
 * Admission by share, before tokenizing: a request whose owner is at its
 * limit, or whose logprob reservation does not fit, is answered
 * `overloaded` (retry later) and costs the server nothing more. The text
 * prompt's token count is unknown yet, so its reservation assumes the whole
 * context is output (at most max_tokens). Returns 1 when answered.
 */
int tokd_owner_admit(struct tokd *t, rs_zsock *sock, const struct rs_zsock_peer *peer,
                     const struct rs_wire_client_msg *m, const struct rs_pipe_owner *owner)
{
    const struct rs_wire_generate *g = &m->u.gen;
    uint32_t n_ctx = t->p->cfg.n_ctx;
    uint64_t out_max = g->max_tokens != 0 && g->max_tokens < n_ctx ? g->max_tokens : n_ctx;
    uint64_t lp = rs_pipe_lp_chunks_for(out_max, g->logprobs);
    struct tokd_use u;
    tokd_owner_usage(t, owner, &u);
    const char *what = NULL;
    uint32_t n_max = t->p->cfg.max_requests;
    uint32_t free_after = u.n_all < n_max ? n_max - u.n_all - 1 : 0;
    uint64_t lp_free_after = u.lp_chunks_all + lp <= t->lp_pool_chunks
                                 ? t->lp_pool_chunks - u.lp_chunks_all - lp
                                 : 0;
    if (u.n_requests >= t->owner_max_requests && free_after < t->owner_max_requests)
        what = "requests";
    else if (lp != 0 && u.lp_chunks_all + lp > t->lp_pool_chunks)
        what = "logprob space (the whole server's is reserved)";
    else if (lp != 0 && u.lp_chunks + lp > t->owner_max_lp_chunks &&
             lp_free_after < t->owner_max_lp_chunks)
        what = "logprob space";
    if (what == NULL)
        return 0;
    rs_counter_add(&t->p->metrics->stage[RS_PIPE_STAGE_TOKENIZERD].counter[RS_M_TOK_OVERLOADED],
                   1);
    tokd_reply_error(t, sock, peer, m->id, RS_WIRE_OVERLOADED, "no room for this client's "
                     "%s: it holds %u requests (share %u) and %llu logprob chunks (share %llu), "
                     "this one needs %llu; the rest is kept for other clients. Finish or "
                     "release some and retry", what, u.n_requests,
                     t->owner_max_requests, (unsigned long long)u.lp_chunks,
                     (unsigned long long)t->owner_max_lp_chunks, (unsigned long long)lp);
    return 1;
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

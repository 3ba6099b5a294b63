/* SPDX-License-Identifier: MIT */
/*
 * Inside the client library: the client and request structs and the
 * functions its files share (client.c: sockets, connection events, the poll
 * loop; request.c: the request table, submit, cancel, timers; receive.c:
 * messages from the daemons, sequence checks; result.c: the collecting
 * functions and the blocking call). One thread owns a client; nothing here locks.
 */
#ifndef RS_CLIENT_IMPL_H
#define RS_CLIENT_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "client/client.h"
#include "ipc/wire.h"
#include "ipc/zsock.h"

/* One request in flight. */
struct creq {
    char id[RS_CLIENT_ID_CAP];
    rs_client_cb cb;
    void *user;
    uint8_t *gen_msg;      /* the encoded generate, kept for resends until the ack (owned) */
    size_t gen_len;
    bool gen_sent_once;    /* sent at least once (a later send is a resend) */
    bool gen_new_conn;     /* its next send is the first on a new tokenizerd connection */
    bool acked;
    bool cancel_wanted;    /* rs_client_cancel was called */
    bool resume_pending;   /* a resume for a gap is out and nothing arrived in order since */
    bool want_ack;         /* deliver an ACK event (rs_client_req_opts.want_ack) */
    bool replay;           /* resume from seq 0 right after the ack (rs_client_req_opts.replay) */
    uint8_t forbidden;     /* `forbidden` answers to its generate so far (resent with a hello) */
    uint32_t pos;          /* index in client.live */
    uint64_t submit_ns;
    uint64_t deadline_ns;  /* 0 = none */
    uint64_t gen_due_ns;   /* when to (re)send the generate; 0 = not now */
    uint32_t gen_ivl_ms;   /* current resend interval (doubles, capped) */
    uint64_t cancel_due_ns;/* when to (re)send the cancel; 0 = not now */
    uint64_t last_rx_ns;   /* last message about this request (or the ack) */
    uint64_t resume_ns;    /* when the last resume went out */
    uint32_t stall_ivl_ms; /* current stall interval (doubles, capped) */
    uint64_t next_seq;     /* first sequence number not yet delivered */
    uint32_t n_out;        /* output tokens delivered */
    uint64_t handle, seed; /* from the ack */
    uint32_t prompt_tokens;
};

struct rs_client {
    void *zctx;
    bool own_ctx;
    rs_zsock *tok, *post;      /* DEALERs to tokenizerd and postprocd */
    void *mon_tok, *mon_post;  /* PAIR sockets receiving their connection events */
    bool tok_down, post_down;  /* a disconnect was seen and no handshake since */
    uint8_t rid[RS_CLIENT_RID_MAX];
    size_t rid_len;
    char secret[RS_WIRE_SECRET_MAX + 1]; /* sent in every hello, never logged; "" = none */
    size_t secret_len;
    char keep_prefix[RS_CLIENT_ID_CAP]; /* ids never released (rs_client_opts.keep_prefix) */
    size_t keep_len;
    uint32_t ack_timeout_ms, stall_ms, request_timeout_ms;
    bool welcomed;             /* postprocd answered a hello */
    uint64_t hello_due_ns;     /* when to (re)send the hello; 0 = not now */
    uint64_t hello_ns;         /* when the last hello went out */
    uint32_t hello_ivl_ms;
    uint32_t hellos_unanswered; /* hellos postprocd took but did not answer (reconnect at 5) */
    uint32_t tok_resends;       /* timed-out resends on this connection since an ack (reconnect at 2) */
    uint64_t parked_ns[2];      /* [tok, post]: disconnected by client_reconnect at, 0 = not */
    struct creq *reqs;         /* max_requests slots */
    uint32_t *live;            /* indices of the used slots, n_live of them */
    uint32_t *free_slots;      /* stack of unused slot indices */
    uint32_t cap, n_live, n_free;
    uint32_t *index;           /* id hash: slot + 1, 0 = empty; index_cap entries */
    uint32_t index_cap;        /* a power of two >= 2 * cap */
    uint64_t next_id;          /* picked request ids */
    struct rs_wire_buf enc;    /* encoder buffer for small messages */
    uint32_t *tok_buf;         /* RS_WIRE_OUT_TOKENS_MAX ids of one message */
    struct rs_wire_logprob *lp_buf; /* RS_WIRE_OUT_TOKENS_MAX entries, allocated on first use */
    int events;                /* events delivered in the current poll */
    struct rs_client_stats st;
};

/* Intervals: resends and resumes back off to these caps. */
#define CLIENT_BACKOFF_MAX_MS 8000u
#define CLIENT_HELLO_FIRST_MS 20u

/* --- request.c ----------------------------------------------------------------------------- */

rs_err creq_table_init(rs_client *c, uint32_t cap);
void creq_table_fini(rs_client *c);

/* The request in flight with this id, or NULL. */
struct creq *creq_find(rs_client *c, const char *id, size_t len);

/* Delivers the request's final event (ev prepared by the caller) and frees its slot. */
void creq_finish(rs_client *c, struct creq *q, struct rs_client_event *ev);

/* A local final: status with error code and message; the request is freed. */
void creq_fail(rs_client *c, struct creq *q, enum rs_client_status status,
               enum rs_wire_code code, const char *msg, size_t msg_len);

/* Fills the event fields every event of q shares. */
void creq_event_init(const struct creq *q, struct rs_client_event *ev, enum rs_client_ev_kind k,
                     uint64_t now);

/* Sends q's generate now (a resend when it went out before); arms the ack timer. */
void creq_send_generate(rs_client *c, struct creq *q, uint64_t now);

/* Sends a cancel for q now (tokenizerd must have acked it); arms the retry. */
void creq_send_cancel(rs_client *c, struct creq *q, uint64_t now);

/* Sends resume(q, next_seq) to postprocd now. */
void creq_send_resume(rs_client *c, struct creq *q, uint64_t now);

/*
 * Tells postprocd the final of request `id` arrived, so it frees the request
 * now rather than after its linger. Best effort: a lost release only keeps
 * the record until the linger ends.
 */
void client_send_release(rs_client *c, const char *id);

/* True when request `id` must not be released (its id starts with the keep prefix). */
bool client_keeps(const rs_client *c, const char *id);

/* Runs every due timer of every request and of the client; returns the next due time. */
uint64_t client_timers(rs_client *c, uint64_t now);

/* --- receive.c ----------------------------------------------------------------------------- */

/* Handles one message body from tokenizerd (from_post = false) or postprocd. */
void client_on_message(rs_client *c, bool from_post, const uint8_t *buf, size_t len,
                       uint64_t now);

/* --- client.c ------------------------------------------------------------------------------ */

/* Sends body on s; counts and logs a refusal. RS_OK or what rs_zsock_send returned. */
rs_err client_send(rs_client *c, rs_zsock *s, const uint8_t *body, size_t len);

/* Encodes m with the client's buffer and sends it on s. */
rs_err client_send_msg(rs_client *c, rs_zsock *s, const struct rs_wire_client_msg *m);

/* Sends a hello (with the secret) to tokenizerd, so that what follows on that connection
 * is owned by this client; nothing (RS_OK) when the client has no secret. RS_OK or the
 * send's error: then nothing that needs the hello may be sent after it. */
rs_err client_hello_tok(rs_client *c);

/*
 * Replaces the connection to postprocd (post) or tokenizerd with a new one.
 * The daemons' ROUTERs ignore a connection made under a routing id while
 * they still hold an older one under it (no handover: PROTOCOL.md §2.2),
 * and libzmq never looks at it again, so a connection that goes unanswered
 * is replaced.
 */
void client_reconnect(rs_client *c, bool post);

/* Connects again a socket client_reconnect parked, once the daemon had time to drop the
 * old connection (else the new one would be ignored in turn). Before each send. */
void client_unpark(rs_client *c, bool post, uint64_t now);

/* Sends a hello to postprocd now and arms its retry. */
void client_send_hello(rs_client *c, uint64_t now);

#endif

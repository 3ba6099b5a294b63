/* SPDX-License-Identifier: MIT */
/*
 * The ringserve client library (ipc/PROTOCOL.md): one client is one routing
 * id with a DEALER to tokenizerd and one to postprocd. It submits generate
 * requests, hands their output to a callback exactly once (repeated sequence
 * numbers are dropped, gaps and stalls are repaired with `resume`), resends a
 * generate that was not acknowledged (tokenizerd deduplicates by routing id
 * and request id), says hello again when postprocd comes back, and ends every
 * request with exactly one final event (the server's, or a local one for a
 * refusal, a timeout or lost output). The caller drives it: rs_client_poll in
 * its own loop, or rs_client_generate_sync for one request at a time.
 * Leaves out: tokenizing (the server does it) and retrying refused requests.
 */
#ifndef RS_CLIENT_H
#define RS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "ipc/wire_client.h"
#include "ipc/wire_server.h"

#define RS_CLIENT_ID_CAP (RS_WIRE_ID_MAX + 1) /* bytes of a request id buffer, NUL included */
#define RS_CLIENT_RID_MAX 64                  /* bytes of a routing id (what the server stores) */

typedef struct rs_client rs_client;

/* Connection and reliability settings; rs_client_opts_default fills them. */
struct rs_client_opts {
    const char *instance;             /* for the default runtime directory; NULL = "default" */
    const char *rundir;               /* ipc:// socket directory; NULL = rs_rundir_default */
    const char *tokenizerd_endpoint;  /* NULL = ipc://<rundir>/tokenizerd.sock */
    const char *postprocd_endpoint;   /* NULL = ipc://<rundir>/postprocd.sock */
    const char *curve_secret_file;    /* tcp://: this client's key pair (ringserve-keygen, 0600) */
    const char *curve_server_public;  /* tcp://: tokenizerd's public key, z85 */
    const char *curve_postprocd_public; /* tcp://: postprocd's key; NULL = the same as above */
    const void *routing_id;           /* 1..RS_CLIENT_RID_MAX bytes, first != 0; NULL = random */
    size_t routing_id_len;
    /* The client's secret, sent in hello (PROTOCOL.md §3.3): 16..128 printable ASCII bytes.
     * NULL = a random one per client when routing_id is NULL, none when routing_id is given
     * (so another process of the same user taking the routing id over can re-attach). */
    const char *secret;
    uint32_t max_requests;            /* requests in flight at once (bounds memory); 1024 */
    uint32_t ack_timeout_ms;          /* resend an unacknowledged generate after this; 1000 */
    uint32_t stall_ms;                /* resume a request silent this long; 1000 */
    uint32_t request_timeout_ms;      /* default per-request limit, 0 = none; 600000 */
    void *zctx;                       /* ZeroMQ context (borrowed); NULL = the client makes one */
    /* Requests whose id starts with this prefix are never released (PROTOCOL.md §3.5):
     * postprocd keeps each finished one for its linger, so another process using the same
     * routing id (a restarted caller) can still submit it again and replay its output.
     * NULL or "" = release every request when its final arrives (the default). */
    const char *keep_prefix;
};

/* Fills o with the defaults above. Any thread. */
void rs_client_opts_default(struct rs_client_opts *o);

/* What ended a request, in its final event. */
enum rs_client_status {
    RS_CLIENT_OK = 0,   /* the server's final: finish_reason says why */
    RS_CLIENT_REFUSED,  /* tokenizerd refused the generate: error and message say why */
    RS_CLIENT_TIMEOUT,  /* the request's time limit passed (a cancel was sent) */
    RS_CLIENT_LOST,     /* postprocd no longer holds the output (resume answered not_found) */
};

/* "ok", "refused", "timeout", "lost". Any thread. */
const char *rs_client_status_name(enum rs_client_status s);

enum rs_client_ev_kind {
    RS_CLIENT_EV_DELTA = 1, /* new output of a running request */
    RS_CLIENT_EV_FINAL = 2, /* the last event of a request, exactly once */
    RS_CLIENT_EV_ACK = 3,   /* tokenizerd accepted it (only with rs_client_req_opts.want_ack) */
};

/*
 * One event. Every pointer is borrowed for the duration of the callback.
 * Deltas arrive in sequence order with no repeats and no gaps; the final
 * comes after every delta. A local final (status != OK) has finish_reason
 * ERROR, no output and `error`/`message` set (REFUSED: the server's code;
 * TIMEOUT and LOST: RS_WIRE_INTERNAL with a message saying which).
 */
struct rs_client_event {
    enum rs_client_ev_kind kind;
    const char *id;                       /* request id, NUL-terminated */
    void *user;                           /* as given to rs_client_submit */
    uint64_t seq;                         /* the message's sequence number */
    const char *text;                     /* new UTF-8 text, not NUL-terminated */
    size_t text_len;
    const uint32_t *tokens;               /* token ids generated with this text */
    uint32_t n_tokens;
    const struct rs_wire_logprob *logprobs; /* n_tokens entries when asked for, else NULL */
    uint64_t submit_ns;                   /* rs_clock_ns when rs_client_submit ran */
    uint64_t recv_ns;                     /* rs_clock_ns when this message was received */
    bool acked;                           /* tokenizerd's ack arrived (fields below set) */
    uint64_t handle;                      /* the server's name for the request */
    uint64_t seed;                        /* sampling seed in use */
    uint32_t prompt_tokens;               /* prompt length, BOS included */
    /* FINAL only */
    enum rs_client_status status;
    enum rs_wire_finish finish_reason;
    struct rs_wire_usage usage;
    struct rs_wire_timings timings;       /* the server's (accepted -> ...) */
    enum rs_wire_code error;              /* RS_WIRE_OK unless finish_reason is ERROR */
    const char *message;                  /* NUL-terminated detail; "" when none */
};

/*
 * Called from rs_client_poll (and the calls that poll) on the client's
 * thread. It may call rs_client_submit and rs_client_cancel, never
 * rs_client_destroy.
 */
typedef void (*rs_client_cb)(const struct rs_client_event *ev);

/* Counters since creation (rs_client_stats). */
struct rs_client_stats {
    uint64_t submitted;     /* requests accepted by rs_client_submit */
    uint64_t acked;         /* first acks */
    uint64_t finished;      /* final events delivered (any status) */
    uint64_t gen_sent;      /* generate messages sent, resends included */
    uint64_t gen_resent;    /* of which resends (no ack in time, or tokenizerd reconnected) */
    uint64_t deltas;        /* delta events delivered */
    uint64_t duplicates;    /* messages dropped because their seq was already delivered */
    uint64_t gaps;          /* messages dropped because an earlier seq was missing */
    uint64_t resumes;       /* resume messages sent */
    uint64_t releases;      /* release messages sent (a final arrived: postprocd may free it) */
    uint64_t hellos;        /* hello messages sent */
    uint64_t reconnects;    /* reconnections seen (either daemon) */
    uint64_t cancels_sent;  /* cancel messages sent, retries included */
    uint64_t timeouts;      /* requests ended by their time limit */
    uint64_t strays;        /* messages about requests not (or no longer) in flight */
    uint64_t malformed;     /* messages that did not decode (logged) */
    uint64_t send_fail;     /* sends refused (no peer, high-water mark); retried later */
};

/*
 * Creates a client: picks its routing id, connects both DEALERs (ipc:// or,
 * with CURVE keys, tcp://) and queues the hello to postprocd. Does not wait
 * for the daemons: requests submitted before they answer are sent when they
 * do. o NULL = defaults. Returns RS_OK with *out owned (rs_client_destroy),
 * RS_EINVAL (bad option, logged), RS_ENOMEM, RS_EIO, or what rs_zsock_create
 * or rs_zcert_load returned. The calling thread becomes the client's owner.
 */
rs_err rs_client_create(const struct rs_client_opts *o, rs_client **out);

/*
 * Closes the sockets and frees everything. Requests still in flight get no
 * final event (the server aborts them after its client timeout). Accepts NULL;
 * clears *c. Owner thread, never from a callback.
 */
void rs_client_destroy(rs_client **c);

/* Per-request options of rs_client_submit; zero = defaults. */
struct rs_client_req_opts {
    const char *id;       /* 1..64 printable ASCII, unique for this client's lifetime; NULL = picked */
    uint32_t timeout_ms;  /* time limit from submit to final; 0 = the client's default */
    bool want_ack;        /* deliver an RS_CLIENT_EV_ACK event when tokenizerd accepts it */
    bool replay;          /* right after the ack, ask postprocd for the output from seq 0: the
                             request may have been submitted before under this routing id (by
                             an earlier process), and whatever it produced so far, final
                             included, is then delivered at once instead of after a stall */
};

/*
 * Submits a generate request: g's fields as the wire defines them (build it
 * with rs_wire_generate_init and set the `has` bits; strings and ids are
 * copied). cb gets the request's events with ev->user = user. The request id
 * (picked or given) is written to id_out (RS_CLIENT_ID_CAP bytes; may be
 * NULL). Returns RS_OK; RS_EINVAL (a field the wire would reject, or a bad
 * id: logged); RS_EEXIST (that id is in flight); RS_EFULL (max_requests in
 * flight); RS_ENOMEM. Sending happens now or in a later poll. Owner thread.
 */
rs_err rs_client_submit(rs_client *c, const struct rs_wire_generate *g,
                        const struct rs_client_req_opts *o, rs_client_cb cb, void *user,
                        char *id_out);

/*
 * Cancels request id: tokenizerd stops it and its final arrives with
 * finish_reason abort (or whatever ended it first). Resent until the final
 * arrives; before the ack it is sent right after the ack. Returns RS_OK or
 * RS_ENOENT (no such request in flight). Owner thread.
 */
rs_err rs_client_cancel(rs_client *c, const char *id);

/*
 * Hands request id to a new callback (cb, user) and delivers its whole
 * output to it again from seq 0: postprocd replays it (resume from_seq 0),
 * repeats of what the old callback saw are not dropped this time, and the
 * old callback gets nothing more. For a caller whose consumer of a request
 * went away and came back (an HTTP client retrying). When the request was
 * acknowledged and its options asked for acks, cb gets an RS_CLIENT_EV_ACK
 * event before this returns. Returns RS_OK or RS_ENOENT (no such request in
 * flight). Owner thread; not from a callback of the same request.
 */
rs_err rs_client_replay(rs_client *c, const char *id, rs_client_cb cb, void *user);

/*
 * Waits up to timeout_ms (0: do not wait, -1: until something happens) for
 * messages, handles all that arrived and the client's timers (resends,
 * resumes, hellos, time limits), calling callbacks. Returns the number of
 * events delivered (>= 0), or RS_EIO when polling failed (logged). Owner thread.
 */
int rs_client_poll(rs_client *c, int timeout_ms);

/*
 * rs_client_poll over n clients owned by this thread at once (one zmq_poll):
 * for a program that drives many clients from one loop. Same returns (events
 * summed).
 */
int rs_client_poll_set(rs_client *const *cs, size_t n, int timeout_ms);

/* A file descriptor polled together with the clients (rs_client_poll_fds). */
#define RS_CLIENT_POLLIN 1  /* readable (== ZMQ_POLLIN) */
#define RS_CLIENT_POLLOUT 2 /* writable (== ZMQ_POLLOUT) */
struct rs_client_pollfd {
    int fd;
    short events;  /* RS_CLIENT_POLLIN | RS_CLIENT_POLLOUT */
    short revents; /* set by the call: what is ready (RS_CLIENT_POLL* or ZMQ_POLLERR) */
};

/*
 * rs_client_poll_set that also waits for n_fds file descriptors in the same
 * zmq_poll, so a program with its own sockets (an HTTP server's epoll fd)
 * sleeps in one place. fds[i].revents says which are ready; the clients'
 * messages and timers are handled as in rs_client_poll. Same returns.
 */
int rs_client_poll_fds(rs_client *const *cs, size_t n, struct rs_client_pollfd *fds,
                       size_t n_fds, int timeout_ms);

/*
 * Polls until no request is in flight or timeout_ms passed (-1: no limit).
 * RS_OK, RS_EAGAIN (requests still in flight at the limit) or RS_EIO.
 */
rs_err rs_client_wait(rs_client *c, int timeout_ms);

/* Requests in flight (submitted, final not yet delivered). Owner thread. */
uint32_t rs_client_in_flight(const rs_client *c);

/* True once postprocd has answered a hello (the client can receive output). */
bool rs_client_connected(const rs_client *c);

/* The routing id (borrowed; *len bytes). */
const uint8_t *rs_client_routing_id(const rs_client *c, size_t *len);

/* Copies the counters into *out. Owner thread. */
void rs_client_stats(const rs_client *c, struct rs_client_stats *out);

/* What rs_client_generate_sync collects. Free with rs_client_result_fini. */
struct rs_client_result {
    char id[RS_CLIENT_ID_CAP];
    char *text;                 /* all generated text, NUL-terminated (owned) */
    size_t text_len;
    uint32_t *tokens;           /* all generated token ids (owned) */
    uint32_t n_tokens;
    uint64_t *token_ns;         /* per token: rs_clock_ns when its message arrived (owned) */
    size_t text_cap, tokens_cap; /* allocated sizes (internal) */
    uint64_t submit_ns;         /* rs_clock_ns at submit */
    uint64_t end_ns;            /* rs_clock_ns when the final arrived (or was made) */
    uint64_t handle, seed;
    uint32_t prompt_tokens;
    enum rs_client_status status;
    enum rs_wire_finish finish_reason;
    struct rs_wire_usage usage;
    struct rs_wire_timings timings;
    enum rs_wire_code error;
    char message[RS_WIRE_MESSAGE_MAX + 1];
};

/*
 * Adds ev to r (a zeroed or previously filled result): text, tokens and
 * their arrival times, and the final's summary. For callers of the async API
 * that want the sync API's collection. RS_OK or RS_ENOMEM (r keeps what it had).
 */
rs_err rs_client_result_add(struct rs_client_result *r, const struct rs_client_event *ev);

/* Frees what r owns and zeroes it. Accepts a zeroed r. */
void rs_client_result_fini(struct rs_client_result *r);

/*
 * Submits g and polls until its final event, collecting it into *out
 * (zeroed first; free with rs_client_result_fini). cb (may be NULL) also
 * sees each event as it arrives, e.g. to print a stream. Other requests of
 * the client keep being served meanwhile. timeout_ms 0 = the client's
 * default. Returns RS_OK when a final arrived (out->status tells how it
 * ended), else what rs_client_submit or rs_client_poll returned.
 */
rs_err rs_client_generate_sync(rs_client *c, const struct rs_wire_generate *g,
                               uint32_t timeout_ms, rs_client_cb cb, void *user,
                               struct rs_client_result *out);

#endif

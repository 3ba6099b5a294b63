/* SPDX-License-Identifier: MIT */
/*
 * Inside gatewayd: the daemon struct and what its files share. main.c runs
 * one thread: it sleeps in one zmq_poll over the client library's sockets,
 * libmicrohttpd's epoll fd and the disconnect watch, then runs MHD and the
 * timers. Every callback (MHD's and the client library's) runs on that
 * thread, so nothing here locks. An HTTP request (gw_req) lives as long as
 * MHD's request; the generation it asked for (gw_call) may outlive it (an
 * idempotent request waiting for its client to retry), and lives in the
 * pipeline anyway: gatewayd keeps nothing a restart would need.
 */
#ifndef GW_H
#define GW_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "client/client.h"
#include "common/tokenizer.h"
#include "common/vocab.h"
#include "gatewayd/oai.h"
#include "ipc/pipeline.h"
#include "ipc/pipeline_config.h"

#define GW_KEY_MAX 256     /* bytes of an Idempotency-Key / X-Request-Id we accept */
#define GW_IDENTITY_MAX 80 /* bytes of a caller identity ("key:<hash>", "peer:<addr>") */
#define GW_SECRET_BYTES 32 /* the request-id derivation key */

/* Command-line settings (options.c). */
struct gw_opts {
    struct rs_pipe_args pipe;    /* --instance (pipe.cfg.instance), --rundir (filled in) */
    char host[256];              /* --host (default 127.0.0.1) */
    uint32_t port;               /* --http-port (default 8080) */
    uint32_t listen_fd;          /* --listen-fd: an inherited listening socket, when */
    uint32_t has_listen_fd;      /* ... this is set (nonzero) */
    char group[64];              /* --group: the runtime directory's group, as the stages' */
    const char *api_key_file;    /* --api-key FILE */
    const char *served_name;     /* --served-model-name ("" = the GGUF's file name) */
    uint64_t max_body;           /* --max-body-bytes */
    uint32_t max_header;         /* --max-header-bytes (MHD's per-connection memory) */
    uint32_t max_connections;    /* --max-connections */
    uint32_t idle_timeout_s;     /* --idle-timeout: keep-alive idle, and no request line yet */
    uint32_t read_timeout_s;     /* --read-timeout: request line to complete headers + body */
    uint32_t max_inflight;       /* --max-inflight: pipeline requests at once */
    uint32_t reattach_grace_ms;  /* --reattach-grace-ms */
    uint32_t request_timeout_ms; /* --request-timeout-ms */
    uint32_t down_grace_ms;      /* --down-grace-ms: a stage down this long makes requests 503 */
    uint64_t stream_buffer_max;  /* --stream-buffer-bytes */
};

/* A growable byte buffer. */
struct gw_buf {
    char *p;
    size_t len, cap;
};
int gw_buf_put(struct gw_buf *b, const void *p, size_t n); /* 0, or -1 out of memory */
void gw_buf_free(struct gw_buf *b);

struct gw;
struct gw_call;

/* One TCP connection (libmicrohttpd's socket context). */
struct gw_conn {
    struct gw_conn *prev, *next;
    struct MHD_Connection *mc;
    int fd;
    uint64_t idle_since_ns; /* no request in progress: since when; 0 during one */
    struct gw_req *req;     /* the request in progress */
    char peer[64];          /* the peer's address, for the identity and logs */
};

/* One HTTP request (libmicrohttpd's request context). */
struct gw_req {
    struct gw *gw;
    struct gw_conn *conn;
    struct MHD_Connection *mc;
    const struct gw_route *route;
    uint64_t start_ns; /* the request line arrived */
    struct gw_buf body;
    bool body_over;                  /* more than --max-body-bytes arrived (413) */
    bool handled;                    /* the route ran (upload complete) */
    bool suspended;                  /* MHD_suspend_connection in effect */
    bool peer_gone;                  /* the client closed its side */
    bool queued;                     /* a response was queued */
    bool watching;                   /* conn->fd is in the disconnect watch */
    bool started;                    /* the access handler ran once (headers complete) */
    bool streaming;                  /* an SSE response was queued */
    int status;                      /* status of the queued response */
    struct gw_call *call;            /* the generation answered here, NULL when none */
    char request_id[GW_KEY_MAX + 1]; /* what x-request-id answers with */
    char path[512];                  /* the URL path (truncated) */
};

/* A route: method, path, handler (routes.c). */
struct gw_route {
    const char *method, *path;
    bool prefix; /* path is a prefix (/v1/models/NAME) */
    bool needs_auth;
    bool has_body;
    enum MHD_Result (*fn)(struct gw_req *r);
};

/* Figures gatewayd keeps about itself (exported by /metrics). */
struct gw_stats {
    uint64_t http_requests[6]; /* by status class: 1xx..5xx, [0] other */
    uint64_t connections;      /* open now */
    uint64_t streams;          /* SSE responses open now */
    uint64_t calls;            /* generations in flight now */
    uint64_t reattached;       /* retries that re-attached to a running request */
    uint64_t cancelled;        /* requests cancelled because their client left */
    uint64_t slow_closed;      /* connections closed for idling or sending too slowly */
};

/* The read-only view of the instance (segment.c). */
struct gw_seg {
    struct rs_pipe *p; /* NULL while the instance is down */
    uint64_t dev, ino; /* the segment file it maps, to notice a replaced one */
    uint64_t checked_ns;
    uint64_t down_since_ns[RS_PIPE_N_STAGES]; /* 0 = serving */
    char why[256];                            /* why p is NULL */
};

struct gw {
    struct gw_opts o;
    int listen_fd;
    struct MHD_Daemon *mhd;
    int watch_fd;          /* epoll: EPOLLRDHUP of connections waiting on the pipeline */
    struct gw_conn *conns; /* every open connection */
    rs_client *client;
    struct gw_seg seg;
    rs_vocab *vocab;         /* the served model's, once the segment names it */
    rs_tokenizer *tokenizer; /* made on the first /tokenize */
    char vocab_path[512];
    char model_name[256]; /* what /v1/models and responses say */
    uint64_t started_unix;
    uint8_t secret[GW_SECRET_BYTES]; /* request-id derivation key (idem.c) */
    char routing_id[RS_CLIENT_RID_MAX + 1];
    char boot[17]; /* per-start random hex, for ids of requests without a key */
    uint64_t next_seq;
    uint8_t (*api_keys)[32]; /* BLAKE2b hashes of the accepted keys (auth.c) */
    uint32_t n_api_keys;
    struct gw_call **map; /* keyed calls by pipeline id stem (idem.c) */
    uint32_t map_cap;
    struct gw_call *orphans; /* keyed calls whose client left, until their grace ends */
    struct gw_call *calls;   /* every call alive (freed at exit when finals never came) */
    struct gw_stats st;
    bool resumed; /* a connection was resumed since the last MHD_run */
};

/* --- options.c ------------------------------------------------------------------------- */

/* 0 parsed, 1 --help printed, 2 error printed. */
int gw_opts_parse(struct gw_opts *o, int argc, char **argv);

/* --- auth.c ---------------------------------------------------------------------------- */

/* Loads --api-key FILE (one key a line); required when the address is not loopback. */
rs_err gw_auth_init(struct gw *g, bool loopback);
/* 0 when r may proceed (no keys configured, or a matching Bearer token), else -1 with e. */
int gw_auth_check(struct gw *g, struct gw_req *r, struct gw_err *e);
/*
 * The caller's identity, which namespaces its idempotency keys: the hash of
 * its API key when keys are configured, else its peer address. The one place
 * that decides who a caller is.
 */
void gw_auth_identity(struct gw *g, struct gw_req *r, char *out, size_t cap);

/* --- idem.c ---------------------------------------------------------------------------- */

/* Routing id (from the listening address) and the persisted derivation secret. */
rs_err gw_idem_init(struct gw *g, const char *rundir);
/* The pipeline id stem for (identity, key): "k" + 32 hex digits; NULL key: a fresh one. */
void gw_idem_stem(struct gw *g, const char *identity, const char *key, char *out, size_t cap);
/* Keyed calls in flight: find by stem, insert, remove. */
struct gw_call *gw_idem_find(struct gw *g, const char *stem);
void gw_idem_insert(struct gw *g, struct gw_call *c);
void gw_idem_remove(struct gw *g, struct gw_call *c);

/* --- segment.c ------------------------------------------------------------------------- */

/* Opens or re-opens the view when due or forced; refreshes stage states. */
void gw_seg_tick(struct gw *g, uint64_t now, bool force);
/* The stage not serving for longer than --down-grace-ms, or -1 (-2: instance down). */
int gw_seg_down(struct gw *g, uint64_t now);
/* /health's answer: 200 and "ok" lines, or 503 naming the stages not serving. */
int gw_seg_health(struct gw *g, json_t **body);

/* --- metrics.c ------------------------------------------------------------------------- */

/* The Prometheus text exposition of the instance's and gatewayd's figures. */
int gw_metrics_text(struct gw *g, struct gw_buf *out);

/* --- call.c ---------------------------------------------------------------------------- */

/*
 * Runs parsed request p (taken) for HTTP request r: one pipeline request
 * per choice, ids from the idempotency key (or fresh), a re-attach when a
 * call with the same key is in flight here. 0: r->call set and r waits; -1:
 * e says why (nothing is running for it).
 */
int gw_call_start(struct gw *g, struct gw_req *r, struct gw_oai_req *p, const char *key,
                  struct gw_err *e);
/* The HTTP side of c is gone (client left, or r completed): cancel or wait for a retry. */
void gw_call_detach(struct gw_call *c, bool client_left);
/* The call has an answer for its request: an error, a stream to start, or the response. */
bool gw_call_has_answer(const struct gw_call *c);
/* Builds the answer (non-stream: the whole response; stream: the status and first bytes). */
int gw_call_answer(struct gw_call *c, int *status, json_t **body, struct gw_err *e);
/* Stream bytes for MHD: copies up to max; 0 nothing now, -1 end, -2 failed. */
ssize_t gw_call_read(struct gw_call *c, char *buf, size_t max);
/* True for a streaming call. */
bool gw_call_streaming(const struct gw_call *c);
/* Frees every call still alive (at exit, after the client is gone: no final will come). */
void gw_call_free_all(struct gw *g);
/* Orphan grace timers; returns the next due time (UINT64_MAX: none). */
uint64_t gw_call_timers(struct gw *g, uint64_t now);

/* --- tokenize.c ------------------------------------------------------------------------ */

/* The vocab of the served model (loaded when the segment names a new model file). */
rs_err gw_vocab_sync(struct gw *g);
enum MHD_Result gw_route_tokenize(struct gw_req *r);
enum MHD_Result gw_route_detokenize(struct gw_req *r);

/* --- http.c ---------------------------------------------------------------------------- */

/* The listening socket (inherited from systemd, or bound with SO_REUSEADDR). */
rs_err gw_http_listen(struct gw *g, bool *loopback);
/* libmicrohttpd on that socket, in epoll mode, driven by main.c's loop. */
rs_err gw_http_start(struct gw *g);
void gw_http_stop(struct gw *g);
/* MHD's epoll fd, and how long the loop may sleep for MHD (ms, -1 none). */
int gw_http_fd(struct gw *g);
int gw_http_timeout_ms(struct gw *g);
/* Handles the disconnect watch's events. */
void gw_http_watch_events(struct gw *g);
/* Closes connections idle or reading too long; returns the next due time. */
uint64_t gw_http_sweep(struct gw *g, uint64_t now);
/* Resumes r's connection if suspended (its call has news). */
void gw_req_wake(struct gw_req *r);
/* Watches r's connection for the client leaving while its call runs. */
void gw_req_watch(struct gw_req *r, bool on);
/* Queue a JSON response (body taken) / an OpenAI error / a stream. */
enum MHD_Result gw_respond_json(struct gw_req *r, int status, json_t *body);
enum MHD_Result gw_respond_error(struct gw_req *r, const struct gw_err *e);
enum MHD_Result gw_respond_text(struct gw_req *r, int status, const char *type, char *text,
                                size_t len);
enum MHD_Result gw_respond_stream(struct gw_req *r);
/* A request header's value, or NULL. */
const char *gw_req_header(struct gw_req *r, const char *name);

/* --- routes.c -------------------------------------------------------------------------- */

/* The route for method and url (NULL: 404; *bad_method: 405). */
const struct gw_route *gw_route_find(const char *method, const char *url, bool *bad_method);
/* Runs r's route once its body is complete, or again after a wake-up. */
enum MHD_Result gw_route_run(struct gw_req *r);

#endif

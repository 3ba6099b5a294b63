/* SPDX-License-Identifier: MIT */
/*
 * gatewayd's command line, as tables (common/opt.h): --instance and
 * --rundir are the pipeline's own entries (rs_pipe_opts), so they parse,
 * check and read in --help exactly as the stages' do; the HTTP settings are
 * gatewayd's table. Both `--opt value` and `--opt=value` work, --help is
 * generated. Leaves out the pipeline's sizing options: gatewayd reads the
 * model and context from the segment of --instance, never from its flags.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/opt.h"
#include "gatewayd/gw.h"

#define F(f) offsetof(struct gw_opts, f)
#define U32(nm, f, lo, hi, a, h)                                                                 \
    {.name = nm, .kind = RS_OPT_U32, .off = F(f), .min = lo, .max = hi, .arg = a, .help = h}
#define U64(nm, f, lo, hi, a, h)                                                                 \
    {.name = nm, .kind = RS_OPT_U64, .off = F(f), .min = lo, .max = hi, .arg = a, .help = h}

static const struct rs_opt http_opts[] = {
    U32("http-port", port, 0, 65535, "N", "TCP port (default 8080; 0 = any free port)"),
    {.name = "listen-fd", .kind = RS_OPT_U32, .off = F(listen_fd), .min = 0, .max = 65535,
     .has_bit = 1, .has_off = F(has_listen_fd), .arg = "N",
     .help = "serve on this inherited listening socket (supervisord's\nfcgi-program passes 0)"},
    {.name = "host", .kind = RS_OPT_STR, .off = F(host), .size = sizeof(((struct gw_opts *)0)->host),
     .arg = "ADDR", .help = "address to listen on (default 127.0.0.1; another needs\n--api-key)"},
    {.name = "api-key", .kind = RS_OPT_ARG, .off = F(api_key_file), .arg = "FILE",
     .help = "accepted Bearer keys, one a line (required off loopback)"},
    {.name = "served-model-name", .kind = RS_OPT_ARG, .off = F(served_name), .arg = "NAME",
     .help = "the model's name in the API (default: the GGUF file name)"},
    U64("max-body-bytes", max_body, 1024, 1ull << 30, "N",
        "larger request bodies get 413 (default 8 MiB)"),
    U32("max-header-bytes", max_header, 4096, 1u << 20, "N",
        "request line and headers at most (libmicrohttpd answers\n431; default 32768)"),
    U32("max-connections", max_connections, 1, 1u << 20, "N",
        "open connections at most (default 4096)"),
    U32("idle-timeout", idle_timeout_s, 1, 86400, "S",
        "close a keep-alive connection idle this long, or one whose\nrequest line has not "
        "arrived this long after its last\nresponse (default 60)"),
    U32("read-timeout", read_timeout_s, 1, 86400, "S",
        "close a connection whose headers and body are not in this\nlong after its request "
        "line (slow clients; default 30)"),
    U32("max-inflight", max_inflight, 1, 1u << 20, "N",
        "pipeline requests followed at once; more get 429\n(default 4096)"),
    U32("reattach-grace-ms", reattach_grace_ms, 0, 86400000, "N",
        "keep a keyed request running this long after its client\nleft (default 10000)"),
    U32("request-timeout-ms", request_timeout_ms, 1000, 86400000, "N",
        "a request's time limit (default 600000)"),
    U32("down-grace-ms", down_grace_ms, 0, 86400000, "N",
        "a stage not serving this long makes new requests 503\n(default 2000)"),
    U64("stream-buffer-bytes", stream_buffer_max, 65536, 1ull << 32, "N",
        "stream output a client has not read yet, at most\n(default 16 MiB)"),
    {0},
};

/* The runtime directory's group: the stages' rule (ipc/stage.h), for the directory they share. */
static const struct rs_opt dir_opts[] = {
    {.name = "group", .kind = RS_OPT_STR, .off = F(group),
     .size = sizeof(((struct gw_opts *)0)->group), .arg = "NAME",
     .help = "runtime directory 0750 owned by group NAME, as given to\nthe stages (default: "
             "0700, the service user only)"},
    {0},
};

/* The pipeline entries gatewayd takes: which instance, where its sockets are. */
static const char *const pipe_taken[] = {"instance", "rundir", NULL};

static const char usage[] =
    "usage: gatewayd [options]\n"
    "The OpenAI-compatible HTTP front of a ringserve instance (gatewayd/README.md).\n";

static void defaults(struct gw_opts *o)
{
    memset(o, 0, sizeof(*o));
    rs_pipe_args_init(&o->pipe);
    snprintf(o->host, sizeof(o->host), "127.0.0.1");
    o->port = 8080;
    o->max_body = 8ull << 20;
    o->max_header = 32768;
    o->max_connections = 4096;
    o->idle_timeout_s = 60;
    o->read_timeout_s = 30;
    o->max_inflight = 4096;
    o->reattach_grace_ms = 10000;
    o->request_timeout_ms = 600000;
    o->down_grace_ms = 2000;
    o->stream_buffer_max = 16ull << 20;
}

int gw_opts_parse(struct gw_opts *o, int argc, char **argv)
{
    defaults(o);
    const struct rs_opt_group g[] = {
        {"instance", rs_pipe_opts, &o->pipe, pipe_taken},
        {"runtime directory", dir_opts, o, NULL},
        {"HTTP", http_opts, o, NULL},
    };
    int code = rs_opt_main("gatewayd", usage, g, 3, argc, argv, 0, NULL);
    if (code >= 0)
        return code == 0 ? 1 : 2;
    if (o->pipe.rundir[0] == '\0')
        rs_rundir_default(o->pipe.cfg.instance, o->pipe.rundir, sizeof(o->pipe.rundir));
    return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * gatewayd's command line: one table row per option (name, value kind,
 * range, where it goes, help), so the parser, the defaults and --help cannot
 * disagree. Leaves out the pipeline's options: gatewayd reads the model and
 * context from the segment of --instance, never from its own flags.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gatewayd/gw.h"

enum okind { O_STR, O_CSTR, O_FD, O_U16, O_U32, O_U64 };

struct opt {
    const char *name, *arg;
    enum okind kind;
    size_t off, cap;      /* field offset; O_STR: buffer bytes */
    uint64_t lo, hi, def; /* numbers: range and default */
    const char *help;
};

#define F(f) offsetof(struct gw_opts, f)
#define SZ(f) sizeof(((struct gw_opts *)0)->f)
static const struct opt opts[] = {
    {"--http-port", "N", O_U16, F(port), 0, 0, 65535, 8080,
     "TCP port (default 8080; 0 = any free port)"},
    {"--listen-fd", "N", O_FD, F(listen_fd), 0, 0, 65535, 0,
     "serve on this inherited listening socket (supervisord's fcgi-program passes 0)"},
    {"--host", "ADDR", O_STR, F(host), SZ(host), 0, 0, 0,
     "address to listen on (default 127.0.0.1; another needs --api-key)"},
    {"--instance", "NAME", O_STR, F(instance), SZ(instance), 0, 0, 0,
     "the instance to serve (default: default)"},
    {"--rundir", "DIR", O_STR, F(rundir), SZ(rundir), 0, 0, 0,
     "the daemons' runtime directory (default: as theirs)"},
    {"--group", "NAME", O_STR, F(group), SZ(group), 0, 0, 0,
     "the runtime directory's group, as given to the stages"},
    {"--api-key", "FILE", O_CSTR, F(api_key_file), 0, 0, 0, 0,
     "accepted Bearer keys, one a line (required off loopback)"},
    {"--served-model-name", "NAME", O_CSTR, F(served_name), 0, 0, 0, 0,
     "the model's name in the API (default: the GGUF file name)"},
    {"--max-body-bytes", "N", O_U64, F(max_body), 0, 1024, 1ull << 30, 8ull << 20,
     "larger request bodies get 413 (default 8 MiB)"},
    {"--max-header-bytes", "N", O_U32, F(max_header), 0, 4096, 1u << 20, 32768,
     "request line and headers at most (libmicrohttpd answers 431; default 32768)"},
    {"--max-connections", "N", O_U32, F(max_connections), 0, 1, 1u << 20, 4096,
     "open connections at most (default 4096)"},
    {"--idle-timeout", "S", O_U32, F(idle_timeout_s), 0, 1, 86400, 60,
     "close a keep-alive connection idle this long, or one whose request line has not "
     "arrived this long after its last response (default 60)"},
    {"--read-timeout", "S", O_U32, F(read_timeout_s), 0, 1, 86400, 30,
     "close a connection whose headers and body are not in this long after its request "
     "line (slow clients; default 30)"},
    {"--max-inflight", "N", O_U32, F(max_inflight), 0, 1, 1u << 20, 4096,
     "pipeline requests followed at once; more get 429 (default 4096)"},
    {"--reattach-grace-ms", "N", O_U32, F(reattach_grace_ms), 0, 0, 86400000, 10000,
     "keep a keyed request running this long after its client left (default 10000)"},
    {"--request-timeout-ms", "N", O_U32, F(request_timeout_ms), 0, 1000, 86400000, 600000,
     "a request's time limit (default 600000)"},
    {"--down-grace-ms", "N", O_U32, F(down_grace_ms), 0, 0, 86400000, 2000,
     "a stage not serving this long makes new requests 503 (default 2000)"},
    {"--stream-buffer-bytes", "N", O_U64, F(stream_buffer_max), 0, 65536, 1ull << 32, 16ull << 20,
     "stream output a client has not read yet, at most (default 16 MiB)"},
};
#define N_OPTS (sizeof(opts) / sizeof(opts[0]))

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gatewayd [options]\n"
            "The OpenAI-compatible HTTP front of a ringserve instance (gatewayd/README.md).\n\n");
    for (size_t i = 0; i < N_OPTS; i++)
        fprintf(f, "  %s %-5s %s\n", opts[i].name, opts[i].arg, opts[i].help);
    fprintf(f, "  --help        this text\n");
}

static int set(struct gw_opts *o, const struct opt *d, const char *v)
{
    char *p = (char *)o + d->off, *end;
    if (d->kind == O_STR) {
        if (strlen(v) >= d->cap)
            return -1;
        snprintf(p, d->cap, "%s", v);
        return 0;
    }
    if (d->kind == O_CSTR) {
        *(const char **)p = v;
        return 0;
    }
    if (d->kind == O_FD)
        o->has_listen_fd = true;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || v[0] == '-' || x < d->lo || x > d->hi)
        return -1;
    if (d->kind == O_U16)
        *(uint16_t *)p = (uint16_t)x;
    else if (d->kind == O_U32 || d->kind == O_FD)
        *(uint32_t *)p = (uint32_t)x;
    else
        *(uint64_t *)p = x;
    return 0;
}

static void defaults(struct gw_opts *o)
{
    memset(o, 0, sizeof(*o));
    snprintf(o->host, sizeof(o->host), "127.0.0.1");
    snprintf(o->instance, sizeof(o->instance), "default");
    for (size_t i = 0; i < N_OPTS; i++) {
        char v[32];
        if (opts[i].kind >= O_U16) {
            snprintf(v, sizeof(v), "%llu", (unsigned long long)opts[i].def);
            set(o, &opts[i], v);
        }
    }
}

int gw_opts_parse(struct gw_opts *o, int argc, char **argv)
{
    defaults(o);
    for (int i = 1; i < argc; i += 2) { /* each option takes one value */
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 1;
        }
        size_t k = 0;
        while (k < N_OPTS && strcmp(argv[i], opts[k].name) != 0)
            k++;
        if (k == N_OPTS) {
            fprintf(stderr, "gatewayd: unknown option '%s' (see --help)\n", argv[i]);
            return 2;
        }
        if (i + 1 >= argc || set(o, &opts[k], argv[i + 1]) != 0) {
            fprintf(stderr, "gatewayd: option %s needs %s", opts[k].name, opts[k].arg);
            if (opts[k].kind >= O_U16)
                fprintf(stderr, " in %llu..%llu", (unsigned long long)opts[k].lo,
                        (unsigned long long)opts[k].hi);
            fprintf(stderr, "%s%s\n", i + 1 < argc ? ", got " : "",
                    i + 1 < argc ? argv[i + 1] : "");
            return 2;
        }
    }
    return 0;
}

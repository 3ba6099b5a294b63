/* SPDX-License-Identifier: MIT */
/*
 * gatewayd: the OpenAI-compatible HTTP front of one ringserve instance, a
 * client of the pipeline like any other (client/client.h) under a routing id
 * derived from its listening address. Start order matters for the crash
 * model: the port is bound first (a restarted gatewayd is reachable again in
 * milliseconds; connections wait in the backlog while the rest starts), then
 * the runtime directory, the derivation secret, the client, the view of the
 * segment (model name, vocab) and libmicrohttpd. One thread then sleeps in
 * one poll over the client's sockets, MHD's epoll fd and the disconnect
 * watch. Leaves out TLS and HTTP/2 (a reverse proxy provides them).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "common/clock.h"
#include "common/daemon.h"
#include "common/log.h"
#include "gatewayd/call_impl.h"
#include "ipc/rundir.h"

/* 1000+ connections need more descriptors than the usual soft limit of 1024. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static rs_err open_client(struct gw *g, const char *rundir)
{
    struct rs_client_opts o;
    rs_client_opts_default(&o);
    o.rundir = rundir;
    o.routing_id = g->routing_id;
    o.routing_id_len = strlen(g->routing_id);
    o.max_requests = g->o.max_inflight;
    o.request_timeout_ms = g->o.request_timeout_ms;
    o.keep_prefix = "k"; /* keyed requests linger in postprocd for a retry's replay */
    return rs_client_create(&o, &g->client);
}

static int start(struct gw *g)
{
    bool loopback = false;
    g->listen_fd = -1;
    g->watch_fd = -1;
    g->started_unix = (uint64_t)time(NULL);
    if (gw_http_listen(g, &loopback) != RS_OK || gw_auth_init(g, loopback) != RS_OK)
        return 1;
    const char *rundir = g->o.pipe.rundir; /* --rundir, or the stages' default */
    if (rs_rundir_prepare(rundir, g->o.group[0] != '\0' ? g->o.group : NULL) != RS_OK ||
        gw_idem_init(g, rundir) != RS_OK || open_client(g, rundir) != RS_OK)
        return 1;
    gw_seg_tick(g, rs_clock_ns(), true);
    if (gw_http_start(g) != RS_OK)
        return 1;
    rs_log_info("serving http://%s:%u/v1 for instance '%s' (%s), routing id %s%s", g->o.host,
                g->o.port, g->o.pipe.cfg.instance,
                g->seg.p != NULL ? g->model_name : "not running yet", g->routing_id,
                g->n_api_keys > 0 ? ", API keys required" : "");
    rs_daemon_notify_ready();
    return 0;
}

static void loop(struct gw *g)
{
    uint64_t sweep_due = 0;
    while (!rs_daemon_should_stop()) {
        uint64_t now = rs_clock_ns();
        uint64_t due = gw_call_timers(g, now);
        if (now >= sweep_due)
            sweep_due = gw_http_sweep(g, now);
        due = sweep_due < due ? sweep_due : due;
        int wait = gw_http_timeout_ms(g);
        int left = due > now ? (int)((due - now) / 1000000 + 1) : 0;
        wait = wait < 0 || left < wait ? left : wait;
        struct rs_client_pollfd fds[2] = {{.fd = gw_http_fd(g), .events = RS_CLIENT_POLLIN},
                                          {.fd = g->watch_fd, .events = RS_CLIENT_POLLIN}};
        if (rs_client_poll_fds(&g->client, 1, fds, 2, wait > 250 ? 250 : wait) < 0)
            break;
        if (fds[1].revents)
            gw_http_watch_events(g);
        /* Connections resumed before this pass are handled in it; one resumed from inside
         * MHD's callbacks (a retry taking over another request) needs another pass. */
        g->resumed = false;
        MHD_run(g->mhd);
        for (int pass = 0; g->resumed && pass < 4; pass++) {
            g->resumed = false;
            MHD_run(g->mhd);
        }
        gw_seg_tick(g, rs_clock_ns(), false);
        rs_daemon_watchdog();
    }
}

static void stop(struct gw *g)
{
    rs_daemon_notify_stopping();
    gw_http_stop(g);
    if (g->client != NULL)
        rs_client_poll(g->client, 20); /* cancels of the requests whose clients just left */
    rs_client_destroy(&g->client);
    gw_call_free_all(g);
    rs_pipe_close(&g->seg.p);
    rs_tokenizer_destroy(&g->tokenizer);
    rs_vocab_destroy(&g->vocab);
    free(g->api_keys);
    free(g->map);
}

int main(int argc, char **argv)
{
    static struct gw g;
    if (rs_daemon_init("gatewayd") != RS_OK)
        return 1;
    int rc = gw_opts_parse(&g.o, argc, argv);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    raise_fd_limit();
    rc = start(&g);
    if (rc == 0)
        loop(&g);
    stop(&g);
    rs_log_info("stopped");
    return rc;
}

/* SPDX-License-Identifier: MIT */
/*
 * What the frontend daemon tests (test_tokenizerd.c, test_postprocd.c)
 * share: an instance configuration with its own segment and runtime
 * directory, starting the real daemon binary (fork + exec, log captured,
 * "ready" read from the role table), stopping or SIGKILLing it, and a client
 * DEALER that speaks the wire protocol with the real encoders and decoders.
 * The code is front_fixture.c (rs_testlib).
 */
#ifndef RS_FRONT_FIXTURE_H
#define RS_FRONT_FIXTURE_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <msgpack.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "ipc/pipeline.h"
#include "ipc/pipeline_door.h"
#include "ipc/rundir.h"
#include "ipc/wire_client.h"
#include "ipc/wire_server.h"
#include "ipc/zcert.h"
#include "ipc/zsock.h"
#include "tests/pipeline_harness.h"
#include "tests/rs_test.h"

struct fx_inst {
    struct rs_pipe_config cfg;
    char rundir[200];
    char model[480];
    void *zctx;
};

/* A configuration over `model` (refdata name, or an absolute path) with its own instance and
 * runtime directory. */
int fx_inst_init(struct fx_inst *in, const char *model, uint32_t n_ctx,
          uint32_t max_requests);

int fx_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw);

/*
 * Ends the instance: context, segment, and with `passed` this process's
 * scratch directory (daemon logs, runtime directories); a failed test keeps
 * it for reading.
 */
void fx_inst_fini_ex(struct fx_inst *in, int passed);

void fx_inst_fini(struct fx_inst *in);

/* Opens the instance as `stage` in this process (the test plays that role). */
struct rs_pipe *fx_open(const struct fx_inst *in, enum rs_pipe_stage stage);

struct fx_daemon {
    pid_t pid;
    char log[300];
    int status; /* exit code after fx_daemon_wait, 128 + signal when killed */
};

void fx_daemon_dump_log(const struct fx_daemon *dm);

/*
 * Starts build/bin/<name> with the instance's shared options, then the
 * NULL-terminated extra arguments. Does not wait for it (fx_daemon_ready).
 */
int fx_daemon_start(const struct fx_inst *in, const char *name, struct fx_daemon *dm,
             const char *const *extra);

/* Waits for the daemon (role `name`, its pid) to report READY in p's role table. */
int fx_daemon_ready(const struct rs_pipe *p, const char *name, struct fx_daemon *dm);

/* Waits for the daemon to exit; returns its exit code (128 + signal when killed). */
int fx_daemon_wait(struct fx_daemon *dm);

/* SIGTERM, then the exit code (0 expected from a clean stop). */
int fx_daemon_stop(struct fx_daemon *dm);

void fx_daemon_kill(struct fx_daemon *dm);

/* --- a client ------------------------------------------------------------------------------ */

struct fx_client {
    rs_zsock *s;
    uint8_t *buf;  /* last received body (RS_WIRE_SERVER_MSG_MAX bytes) */
    size_t len;
    struct rs_wire_buf enc;
};

/* A DEALER to ipc://<rundir>/<daemon>.sock with routing id rid (NULL: none). */
int fx_client_open(const struct fx_inst *in, const char *daemon, const char *rid,
            struct fx_client *c);

void fx_client_close(struct fx_client *c);

/* Sends raw body bytes, retrying while the connection is still being set up (IMMEDIATE). */
int fx_send_raw(struct fx_client *c, const void *body, size_t len);

int fx_send(struct fx_client *c, const struct rs_wire_client_msg *m);

/* Receives and decodes one message: 0, or 1 on timeout / a malformed message. */
int fx_recv(struct fx_client *c, int timeout_ms, struct rs_wire_server_msg *m);

/* A generate with the given id and text prompt, defaults otherwise. */
void fx_generate(struct rs_wire_client_msg *m, const char *id, const char *prompt);

/* --- tcp with CURVE ------------------------------------------------------------------------ */

/* Server and client key pairs, their files, and a free loopback port for --listen. */
struct fx_curve {
    struct rs_zcert server, good, bad; /* good is in the allowlist, bad is not */
    char secret[300], allow[300];
    char listen[64];                   /* tcp://127.0.0.1:PORT */
    const char *args[7];               /* --listen ... --curve-allow FILE, NULL */
};

int fx_curve_setup(struct fx_curve *k);

/* A CURVE DEALER to the daemon's --listen endpoint with key `good` or `bad`. */
int fx_curve_client(const struct fx_inst *in, const struct fx_curve *k, int good,
                    const char *rid, struct fx_client *c);

/* --- msgpack by hand, for messages the encoders refuse to produce --------------------------- */

void fx_pack_str(msgpack_packer *pk, const char *s);

/* Packs {"v": v, "type": type, "id": id} plus n_extra more key/value pairs the caller packs. */
void fx_pack_head(msgpack_packer *pk, int v, const char *type, const char *id,
           unsigned n_extra);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * Command-line flags shared by the programs built on the client library
 * (ringserve-cli, bench/loadgen): one flag per generate field, named after
 * it (`--max-tokens`, `--top-p`, `--stop`, ...), and the connection flags
 * (`--instance`, `--rundir`, endpoints, CURVE keys, time limits), as two
 * option tables (common/opt.h) each program parses with its own. Leaves
 * out the prompt (each program has its own idea of where it comes from).
 */
#ifndef RS_CLIENT_OPTIONS_H
#define RS_CLIENT_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

#include "client/client.h"
#include "common/opt.h"
#include "ipc/wire_client.h"
#include "ipc/zcert.h"

/* Request fields from flags. Stop strings borrow argv (valid for the program's life). */
struct rs_client_gen_args {
    struct rs_wire_generate gen; /* rs_client_gen_args_init: defaults, stream on */
    /* what the constraint flags (client/constraint.c) read: gen.cx points here */
    struct rs_wire_bias bias[RS_WIRE_LOGIT_BIAS_MAX]; /* --logit-bias entries */
    uint32_t *allowed;  /* --allowed-token-ids (owned, freed with the program) */
    char *cx_text;      /* --grammar / --json-schema file bytes (owned, likewise) */
};

/* Defaults: every field absent except `stream` = true (the programs stream). Any thread. */
void rs_client_gen_args_init(struct rs_client_gen_args *a);

/*
 * The request flags, a table over struct rs_client_gen_args: --max-tokens N,
 * --temperature F, --top-p F, --top-k N, --min-p F, --repetition-penalty F,
 * --presence-penalty F, --frequency-penalty F, --seed N, --stop STR
 * (repeatable), --stop-token-ids ID[,ID...] (repeatable), --ignore-eos,
 * --logprobs N, --stream, --no-stream, --priority N. Each sets its field's
 * presence bit. Ranges are the server's to check (its message names the
 * field); here only the syntax.
 */
extern const struct rs_opt rs_client_gen_opts[];
#define RS_CLIENT_GEN_TITLE "request fields (ipc/PROTOCOL.md 3.1; absent = the server's default)"

/*
 * The structured-output flags, a table over struct rs_client_gen_args
 * (client/constraint.c): --grammar FILE (GBNF), --json-schema FILE,
 * --json-object, --regex RE, --choice TEXT (repeatable), --logit-bias
 * ID:BIAS (repeatable), --allowed-token-ids ID[,ID...], --min-tokens N. One constraint kind
 * per request (a second is a usage error); logit_bias and allowed ids go
 * with any. Whether a grammar, schema or regex is well formed is the
 * server's check (its error names the position).
 */
extern const struct rs_opt rs_client_cx_opts[];

/* Frees what the constraint flags read (files, id lists); the generate's views die with it. */
void rs_client_gen_args_fini(struct rs_client_gen_args *a);
#define RS_CLIENT_CX_TITLE "structured output (ipc/PROTOCOL.md 3.1, constraints)"

/* Connection settings from flags; strings borrow argv except the loaded keys. */
struct rs_client_conn_args {
    struct rs_client_opts opts;                     /* rs_client_opts_default + the flags */
    char server_key[RS_ZCERT_Z85_LEN + 1];          /* --curve-server, loaded */
    char postprocd_key[RS_ZCERT_Z85_LEN + 1];       /* --curve-postprocd, loaded */
};

void rs_client_conn_args_init(struct rs_client_conn_args *a);

/*
 * The connection flags, a table over struct rs_client_conn_args:
 * --instance NAME, --rundir DIR, --tokenizerd ENDPOINT, --postprocd ENDPOINT,
 * --curve-secret FILE, --curve-server KEY|FILE, --curve-postprocd KEY|FILE,
 * --timeout MS (per request), --ack-timeout MS, --stall MS.
 */
extern const struct rs_opt rs_client_conn_opts[];
#define RS_CLIENT_CONN_TITLE "connection"

/*
 * Parses a comma-separated list of token ids (each 0..2^31-1) into a new
 * array (*out, owned: free) of *n entries. 0, or -1 with err set.
 */
int rs_client_parse_ids(const char *s, uint32_t **out, uint32_t *n, char *err, size_t err_len);

/*
 * Writes r as one line of JSON: id, index (omitted when < 0), text, tokens,
 * status, finish_reason, error and message (on failure), usage, the server's
 * timings, the client's (submit -> first token, submit -> end, each token's
 * arrival), seed, handle and prompt_tokens, and logprobs when lps is given
 * (n_lps entries; a non-finite logprob is written as null). Returns 0 or -1
 * on a write error.
 */
int rs_client_result_json(FILE *f, const struct rs_client_result *r, long long index,
                          const struct rs_wire_logprob *lps, uint32_t n_lps);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * ringserve-keygen: CURVE key pairs for remote (tcp://) access, so operators
 * need nothing beyond ringserve to enable it (ipc/PROTOCOL.md §2.3). Writes a
 * new pair (secret file 0600, optional public file), or prints the public key
 * of an existing file for a daemon's client allowlist. Never overwrites a
 * file. Leaves out distributing keys and editing the allowlist.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/opt.h"
#include "ipc/zcert.h"

struct keygen_opts {
    const char *print; /* -p KEY_FILE */
};

static const struct rs_opt opts[] = {
    {.name = "public", .short_name = 'p', .kind = RS_OPT_ARG,
     .off = offsetof(struct keygen_opts, print), .arg = "KEY_FILE",
     .help = "print the public key of an existing key file (a line\n"
             "for a daemon's client allowlist)"},
    {0},
};

static const char usage[] =
    "usage: ringserve-keygen SECRET_FILE [PUBLIC_FILE]\n"
    "       ringserve-keygen -p KEY_FILE\n"
    "Writes a new CURVE key pair: SECRET_FILE (mode 0600, both keys) and, if given,\n"
    "PUBLIC_FILE (the public key only), then prints the public key. Existing files\n"
    "are never overwritten.\n";

int main(int argc, char **argv)
{
    struct rs_zcert c;
    struct keygen_opts o = {0};
    struct rs_opt_group g = {NULL, opts, &o, NULL};
    char err[256];
    int first;
    int r = rs_opt_parse(&g, 1, argc, argv, RS_OPT_OPERANDS, &first, err, sizeof(err));
    int n = argc - first;
    if (r == RS_OPT_HELP) {
        rs_opt_help(stdout, usage, &g, 1);
        return 0;
    }
    if (r == RS_OPT_OK && o.print != NULL && n != 0)
        snprintf(err, sizeof(err), "-p takes no other argument"), r = RS_OPT_ERROR;
    if (r == RS_OPT_OK && o.print == NULL && (n < 1 || n > 2))
        snprintf(err, sizeof(err), "give SECRET_FILE [PUBLIC_FILE] (see --help)"), r = RS_OPT_ERROR;
    if (r != RS_OPT_OK) {
        fprintf(stderr, "ringserve-keygen: %s\n", err);
        return 2;
    }
    if (o.print != NULL) {
        if (rs_zcert_load(o.print, &c) != RS_OK) {
            fprintf(stderr, "ringserve-keygen: %s is not a usable key file (see the log above)\n",
                    o.print);
            return 1;
        }
        printf("%s\n", c.public_z85);
        return 0;
    }
    if (rs_zcert_generate(&c) != RS_OK ||
        rs_zcert_save(&c, argv[first], n == 2 ? argv[first + 1] : NULL) != RS_OK) {
        fprintf(stderr, "ringserve-keygen: no key pair written (see the log above)\n");
        return 1;
    }
    printf("%s\n", c.public_z85);
    return 0;
}

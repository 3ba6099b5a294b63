/* SPDX-License-Identifier: MIT */
/*
 * ringserve-keygen: CURVE key pairs for remote (tcp://) access, so operators
 * need nothing beyond ringserve to enable it (ipc/PROTOCOL.md §2.3). Writes a
 * new pair (secret file 0600, optional public file), or prints the public key
 * of an existing file for a daemon's client allowlist. Never overwrites a
 * file. Leaves out distributing keys and editing the allowlist.
 */
#include <stdio.h>
#include <string.h>

#include "ipc/zcert.h"

static int usage(FILE *f)
{
    fprintf(f, "usage: ringserve-keygen SECRET_FILE [PUBLIC_FILE]\n"
               "       ringserve-keygen -p KEY_FILE\n"
               "Writes a new CURVE key pair: SECRET_FILE (mode 0600, both keys) and, if given,\n"
               "PUBLIC_FILE (the public key only), then prints the public key. Existing files\n"
               "are never overwritten. -p prints the public key of an existing key file (a line\n"
               "for a daemon's client allowlist).\n");
    return f == stdout ? 0 : 2;
}

int main(int argc, char **argv)
{
    struct rs_zcert c;
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0))
        return usage(stdout);
    if (argc == 3 && strcmp(argv[1], "-p") == 0) {
        if (rs_zcert_load(argv[2], &c) != RS_OK) {
            fprintf(stderr, "ringserve-keygen: %s is not a usable key file (see the log above)\n",
                    argv[2]);
            return 1;
        }
        printf("%s\n", c.public_z85);
        return 0;
    }
    if (argc < 2 || argc > 3 || argv[1][0] == '-')
        return usage(stderr);
    if (rs_zcert_generate(&c) != RS_OK ||
        rs_zcert_save(&c, argv[1], argc == 3 ? argv[2] : NULL) != RS_OK) {
        fprintf(stderr, "ringserve-keygen: no key pair written (see the log above)\n");
        return 1;
    }
    printf("%s\n", c.public_z85);
    return 0;
}

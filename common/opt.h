/* SPDX-License-Identifier: MIT */
/*
 * Command-line options as declarative tables over getopt_long: an option is
 * one table entry (name, kind, destination field, range, help line), a
 * program parses with the groups of entries it accepts (the pipeline's,
 * placement's, its own), and --help is generated from the same entries, so
 * a flag, its field, its checks and its help line cannot drift apart. Both
 * `--opt value` and `--opt=value` work, long names may be abbreviated to a
 * unique prefix (getopt_long), and every error names the option and the
 * rule. Leaves out cross-option rules (each program checks them after
 * parsing) and subcommands (a program reads its operands itself).
 */
#ifndef RS_OPT_H
#define RS_OPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* What an entry parses and where it stores it (the field at `off` in the group's struct). */
enum rs_opt_kind {
    RS_OPT_FLAG,   /* no value: stores `val` into an int */
    RS_OPT_FLAG32, /* no value: stores `val` into a uint32_t */
    RS_OPT_BOOL,   /* no value: stores `val` (0 or 1) into a bool */
    RS_OPT_INT,    /* decimal in [min, max] into an int (int32_t) */
    RS_OPT_U32,    /* decimal in [min, max] into a uint32_t */
    RS_OPT_LONG,   /* decimal in [min, max] into a long */
    RS_OPT_U64,    /* decimal in [min, max] into a uint64_t (max 0: no upper bound) */
    RS_OPT_FLOAT,  /* finite number into a float */
    RS_OPT_DOUBLE, /* finite number in [min, max] into a double */
    RS_OPT_STR,    /* 1..size-1 bytes copied into char[size] */
    RS_OPT_ARG,    /* const char * borrowed from argv (valid for the program's life) */
    RS_OPT_CHOICE, /* one of choices[]: its index (or choice_vals[index]) into an int */
    RS_OPT_U32_LIST, /* "A,B,C", each in [min, max], into uint32_t[size]; count at count_off */
    RS_OPT_CALL,   /* parse(dst, value) does it all (lists, keys, checked names) */
};

struct rs_opt;

/*
 * RS_OPT_CALL's parser: the group's struct, the entry and the value (NULL
 * for an entry without `arg`). Returns 0, or -1 after writing a message that
 * names the option into err.
 */
typedef int (*rs_opt_parse_fn)(void *dst, const struct rs_opt *o, const char *val, char *err,
                               size_t err_len);

struct rs_opt {
    const char *name;            /* long name without "--"; NULL ends a table */
    char short_name;             /* 0, or the one-letter form (-m) */
    enum rs_opt_kind kind;
    size_t off;                  /* field offset in the group's struct */
    size_t size;                 /* RS_OPT_STR: buffer bytes */
    long long min, max;          /* integer kinds: inclusive range */
    long long val;               /* flag kinds: the value stored */
    const char *const *choices;  /* RS_OPT_CHOICE: NULL-terminated */
    const int *choice_vals;      /* RS_OPT_CHOICE: the value stored for each; NULL: the index */
    rs_opt_parse_fn parse;       /* RS_OPT_CALL */
    uint32_t has_bit;            /* != 0: also set this bit of the uint32_t at has_off */
    size_t has_off;
    size_t count_off;            /* RS_OPT_U32_LIST: its uint32_t entry count */
    const char *arg;             /* value's name in --help ("N", "PATH"); NULL: takes none */
    const char *help;            /* help text; '\n' starts an indented continuation line */
};

/* A table and the struct its offsets refer to, under a heading in --help. */
struct rs_opt_group {
    const char *title;          /* "pipeline options (...)"; NULL: no heading */
    const struct rs_opt *opts;  /* terminated by an entry with name NULL */
    void *dst;
    const char *const *only;    /* NULL, or the names of the entries this program takes */
};

/* rs_opt_parse flags. */
#define RS_OPT_OPERANDS 0x1u /* operands allowed (anywhere; *first gets the first) */
#define RS_OPT_IN_ORDER 0x2u /* options end at the first operand (ringserve-cli's prompt) */

/* rs_opt_parse results. */
#define RS_OPT_OK 0
#define RS_OPT_HELP 1   /* --help or -h was given: print rs_opt_help, exit 0 */
#define RS_OPT_ERROR -1 /* err names the problem: print it, exit 2 */

/*
 * Parses argv[1..argc) against the groups (an option name appears in one
 * group only; n_groups 0 for a program with --help and operands alone). Operands are an error unless flags has RS_OPT_OPERANDS; then
 * argv is permuted so they are argv[*first..argc) (with RS_OPT_IN_ORDER,
 * everything from the first operand or "--" on is left as operands).
 * Returns RS_OPT_OK, RS_OPT_HELP, or RS_OPT_ERROR with err (err_len bytes)
 * such as "option --ctx: 'x' is not an integer in 2..1048576". Uses
 * getopt_long's global state: main thread, one parse at a time.
 */
int rs_opt_parse(const struct rs_opt_group *groups, size_t n_groups, int argc, char **argv,
                 unsigned flags, int *first, char *err, size_t err_len);

/*
 * Writes `usage` (the synopsis and what the program does, as given), then
 * each group's heading and its entries, one per line: "  -m, --model PATH"
 * padded to a column, then the help text, wrapped lines indented to it.
 */
void rs_opt_help(FILE *f, const char *usage, const struct rs_opt_group *groups, size_t n_groups);

/*
 * rs_opt_parse as a program's main wants it: on --help prints the help to
 * stdout and returns 0; on a refusal prints "prog: <why>" to stderr and
 * returns 2; otherwise returns -1 (run on). Main thread.
 */
int rs_opt_main(const char *prog, const char *usage, const struct rs_opt_group *groups,
                size_t n_groups, int argc, char **argv, unsigned flags, int *first);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * The option tables' parser and help writer (opt.h). The groups' entries
 * become one getopt_long table (long names, and the short ones in the
 * optstring); each option found is converted by its kind. getopt's own
 * messages are off, so every error is one of ours and names the option.
 */
#include "common/opt.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OPTS 160 /* entries a program takes in all its groups */
#define HELP_COL 27  /* column of the help text */

/* 1 when entry o of group g is one this program takes. */
static int taken(const struct rs_opt_group *g, const struct rs_opt *o)
{
    if (g->only == NULL)
        return 1;
    for (const char *const *n = g->only; *n != NULL; n++)
        if (strcmp(*n, o->name) == 0)
            return 1;
    return 0;
}

static int fail(char *err, size_t len, const char *fmt, const char *name, const char *val,
                long long lo, long long hi)
{
    char msg[200];
    snprintf(msg, sizeof(msg), fmt, lo, hi);
    snprintf(err, len, "option --%s: '%.80s' %s", name, val, msg);
    return -1;
}

/*
 * Decimal integer in [lo, hi] into *out (two's complement for negatives);
 * unbounded: any non-negative value of the kind's width. 0 or -1 with err set.
 */
static int parse_integer(const struct rs_opt *o, const char *val, long long lo,
                         unsigned long long hi, int unbounded, unsigned long long *out, char *err,
                         size_t len)
{
    char *end;
    errno = 0;
    if (val[0] == '-' && lo < 0) {
        long long v = strtoll(val, &end, 10);
        if (errno == 0 && *end == '\0' && end != val + 1 && v >= lo) {
            *out = (unsigned long long)v;
            return 0;
        }
    } else if (val[0] >= '0' && val[0] <= '9') {
        unsigned long long v = strtoull(val, &end, 10);
        if (errno == 0 && *end == '\0' && v <= hi && (lo <= 0 || v >= (unsigned long long)lo)) {
            *out = v;
            return 0;
        }
    }
    if (unbounded)
        return fail(err, len, "is not a non-negative integer", o->name, val, 0, 0);
    return fail(err, len, "is not an integer in %lld..%lld", o->name, val, lo, (long long)hi);
}

static int parse_real(const struct rs_opt *o, const char *val, double *out, char *err,
                      size_t len)
{
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    if (val[0] == '\0' || errno != 0 || *end != '\0' || !isfinite(v) ||
        (o->kind == RS_OPT_DOUBLE && (o->min != 0 || o->max != 0) &&
         (v < (double)o->min || v > (double)o->max))) {
        if (o->kind == RS_OPT_DOUBLE && (o->min != 0 || o->max != 0))
            return fail(err, len, "is not a number in %lld..%lld", o->name, val, o->min, o->max);
        return fail(err, len, "is not a finite number", o->name, val, 0, 0);
    }
    *out = v;
    return 0;
}

static int parse_choice(const struct rs_opt *o, const char *val, int *out, char *err, size_t len)
{
    for (int i = 0; o->choices[i] != NULL; i++)
        if (strcmp(val, o->choices[i]) == 0) {
            *out = i;
            return 0;
        }
    char list[200] = "";
    for (int i = 0; o->choices[i] != NULL; i++) {
        size_t n = strlen(list);
        snprintf(list + n, sizeof(list) - n, "%s%s", i ? ", " : "", o->choices[i]);
    }
    snprintf(err, len, "option --%s: '%.80s' is not one of %s", o->name, val, list);
    return -1;
}

/* "A,B,C" into the uint32_t array of entry o (at most o->size entries, each in range). */
static int parse_list(void *dst, const struct rs_opt *o, const char *val, char *err, size_t len)
{
    uint32_t *v = (uint32_t *)((char *)dst + o->off), n = 0;
    const char *p = val;
    char item[32];
    for (;;) {
        size_t k = strcspn(p, ",");
        unsigned long long u;
        if (n >= o->size || k == 0 || k >= sizeof(item)) {
            snprintf(err, len, "option --%s: '%.80s' is not a list of at most %zu integers "
                     "in %lld..%lld", o->name, val, o->size, o->min, o->max);
            return -1;
        }
        memcpy(item, p, k);
        item[k] = '\0';
        if (parse_integer(o, item, o->min, (unsigned long long)o->max, 0, &u, err, len) != 0)
            return -1;
        v[n++] = (uint32_t)u;
        if (p[k] == '\0')
            break;
        p += k + 1;
    }
    *(uint32_t *)((char *)dst + o->count_off) = n;
    return 0;
}

/* The integer kinds: range (the kind's whole range when the table gives none), then store. */
static int store_integer(char *f, const struct rs_opt *o, const char *val, char *err, size_t len)
{
    unsigned long long u;
    int bounded = o->min != 0 || o->max != 0;
    switch (o->kind) {
    case RS_OPT_INT:
        if (parse_integer(o, val, bounded ? o->min : INT32_MIN,
                          (unsigned long long)(bounded ? o->max : INT32_MAX), 0, &u, err, len))
            return -1;
        *(int *)f = (int)(long long)u;
        return 0;
    case RS_OPT_LONG:
        if (parse_integer(o, val, o->min, (unsigned long long)o->max, 0, &u, err, len) != 0)
            return -1;
        *(long *)f = (long)(long long)u;
        return 0;
    case RS_OPT_U32:
        if (parse_integer(o, val, o->min, o->max ? (unsigned long long)o->max : UINT32_MAX,
                          o->max == 0, &u, err, len) != 0)
            return -1;
        *(uint32_t *)f = (uint32_t)u;
        return 0;
    default: /* RS_OPT_U64 */
        if (parse_integer(o, val, o->min, o->max ? (unsigned long long)o->max : UINT64_MAX,
                          o->max == 0, &u, err, len) != 0)
            return -1;
        *(uint64_t *)f = (uint64_t)u;
        return 0;
    }
}

static int store_real(char *f, const struct rs_opt *o, const char *val, char *err, size_t len)
{
    double d;
    if (parse_real(o, val, &d, err, len) != 0)
        return -1;
    if (o->kind == RS_OPT_DOUBLE) {
        *(double *)f = d;
        return 0;
    }
    if (!isfinite((float)d))
        return fail(err, len, "is not a finite number", o->name, val, 0, 0);
    *(float *)f = (float)d;
    return 0;
}

static int store_string(char *f, const struct rs_opt *o, const char *val, char *err, size_t len)
{
    if (val[0] == '\0' || strlen(val) >= o->size) {
        snprintf(err, len, "option --%s: value empty or longer than %zu bytes", o->name,
                 o->size - 1);
        return -1;
    }
    memcpy(f, val, strlen(val) + 1);
    return 0;
}

/* Stores val into the field of entry o in dst; 0 or -1 with err set. */
static int store(void *dst, const struct rs_opt *o, const char *val, char *err, size_t len)
{
    char *f = (char *)dst + o->off;
    int i;
    switch (o->kind) {
    case RS_OPT_FLAG: *(int *)f = (int)o->val; return 0;
    case RS_OPT_FLAG32: *(uint32_t *)f = (uint32_t)o->val; return 0;
    case RS_OPT_BOOL: *(bool *)f = o->val != 0; return 0;
    case RS_OPT_INT:
    case RS_OPT_LONG:
    case RS_OPT_U32:
    case RS_OPT_U64: return store_integer(f, o, val, err, len);
    case RS_OPT_FLOAT:
    case RS_OPT_DOUBLE: return store_real(f, o, val, err, len);
    case RS_OPT_STR: return store_string(f, o, val, err, len);
    case RS_OPT_ARG: *(const char **)f = val; return 0;
    case RS_OPT_CHOICE:
        if (parse_choice(o, val, &i, err, len) != 0)
            return -1;
        *(int *)f = o->choice_vals != NULL ? o->choice_vals[i] : i;
        return 0;
    case RS_OPT_U32_LIST: return parse_list(dst, o, val, err, len);
    case RS_OPT_CALL: return o->parse(dst, o, val, err, len);
    }
    return -1;
}

/* The getopt_long table and optstring of the groups; index k of longs is entries[k]. */
struct table {
    struct option longs[MAX_OPTS + 2];
    const struct rs_opt *entries[MAX_OPTS];
    void *dsts[MAX_OPTS];
    char shorts[3 * MAX_OPTS + 4];
    int n;
};

static int build(struct table *t, const struct rs_opt_group *groups, size_t n_groups,
                 unsigned flags, char *err, size_t len)
{
    size_t ns = 0;
    memset(t, 0, sizeof(*t));
    if (flags & RS_OPT_IN_ORDER)
        t->shorts[ns++] = '+'; /* stop at the first operand; otherwise operands move to the end */
    t->shorts[ns++] = ':';
    for (size_t g = 0; g < n_groups; g++)
        for (const struct rs_opt *o = groups[g].opts; o->name != NULL; o++) {
            if (!taken(&groups[g], o))
                continue;
            if (t->n >= MAX_OPTS) {
                snprintf(err, len, "more than %d options", MAX_OPTS);
                return -1;
            }
            t->longs[t->n] = (struct option){o->name, o->arg ? required_argument : no_argument,
                                             NULL, 256 + t->n};
            t->entries[t->n] = o;
            t->dsts[t->n++] = groups[g].dst;
            if (o->short_name != 0) {
                t->shorts[ns++] = o->short_name;
                if (o->arg != NULL)
                    t->shorts[ns++] = ':';
            }
        }
    t->longs[t->n] = (struct option){"help", no_argument, NULL, 'h'};
    t->shorts[ns++] = 'h';
    return 0;
}

/* The entry of short option c, or -1. */
static int short_index(const struct table *t, int c)
{
    for (int k = 0; k < t->n; k++)
        if (t->entries[k]->short_name == c)
            return k;
    return -1;
}

static int apply(const struct table *t, int k, const char *val, char *err, size_t len)
{
    const struct rs_opt *o = t->entries[k];
    if (store(t->dsts[k], o, val, err, len) != 0)
        return -1;
    if (o->has_bit != 0)
        *(uint32_t *)((char *)t->dsts[k] + o->has_off) |= o->has_bit;
    return 0;
}

/* For "--pre[=v]" matching several long names: the message naming them; 0 otherwise. */
static int ambiguous(const struct table *t, const char *arg, char *err, size_t len)
{
    if (strncmp(arg, "--", 2) != 0)
        return 0;
    size_t n = strcspn(arg + 2, "="), used;
    int hits = 0;
    used = (size_t)snprintf(err, len, "option '--%.*s' is ambiguous:", (int)(n < 60 ? n : 60),
                            arg + 2);
    for (int k = 0; k < t->n; k++)
        if (strncmp(t->entries[k]->name, arg + 2, n) == 0 && used < len) {
            used += (size_t)snprintf(err + used, len - used, "%s --%s", hits ? "," : "",
                                     t->entries[k]->name);
            hits++;
        }
    return hits > 1;
}

/* The message for getopt's '?' or ':' on argv element `arg`. */
static void unknown(int c, int opt, const char *arg, const struct table *t, char *err, size_t len)
{
    int k = opt >= 256 ? opt - 256 : opt > 0 ? short_index(t, opt) : -1;
    if (c == '?' && opt > 0 && opt < 256) {
        snprintf(err, len, "unknown option '-%c' (see --help)", opt);
        return;
    }
    const char *name = k >= 0 ? t->entries[k]->name : NULL;
    if (c == ':' && name != NULL)
        snprintf(err, len, "option --%s needs a value", name);
    else if (c == ':')
        snprintf(err, len, "option %.80s needs a value", arg);
    else if (name != NULL && opt >= 256)
        snprintf(err, len, "option --%s takes no value", name);
    else if (ambiguous(t, arg, err, len) == 0)
        snprintf(err, len, "unknown option '%.80s' (see --help)", arg);
}

int rs_opt_parse(const struct rs_opt_group *groups, size_t n_groups, int argc, char **argv,
                 unsigned flags, int *first, char *err, size_t err_len)
{
    static struct table t; /* large; one parse at a time (getopt's state is global anyway) */
    if (first != NULL)
        *first = argc;
    if (build(&t, groups, n_groups, flags, err, err_len) != 0)
        return RS_OPT_ERROR;
    opterr = 0;
    optind = 0; /* a full re-initialisation in glibc: parses may follow each other */
    for (;;) {
        int c = getopt_long(argc, argv, t.shorts, t.longs, NULL);
        if (c == -1)
            break;
        const char *here = optind > 0 && optind <= argc ? argv[optind - 1] : "";
        if (c == 'h')
            return RS_OPT_HELP;
        if (c == '?' || c == ':') {
            unknown(c, optopt, here, &t, err, err_len);
            return RS_OPT_ERROR;
        }
        int k = c >= 256 ? c - 256 : short_index(&t, c);
        if (k < 0) {
            snprintf(err, err_len, "unknown option '%.80s' (see --help)", here);
            return RS_OPT_ERROR;
        }
        if (apply(&t, k, optarg, err, err_len) != 0)
            return RS_OPT_ERROR;
    }
    if (optind < argc && !(flags & RS_OPT_OPERANDS)) {
        snprintf(err, err_len, "unexpected argument '%.80s' (see --help)", argv[optind]);
        return RS_OPT_ERROR;
    }
    if (first != NULL)
        *first = optind;
    return RS_OPT_OK;
}

/* Writes text from column `col` (already reached), continuation lines indented to HELP_COL. */
static void help_text(FILE *f, const char *text, int col)
{
    if (col > HELP_COL - 1) {
        fputc('\n', f);
        col = 0;
    }
    fprintf(f, "%*s", HELP_COL - col, "");
    for (const char *p = text; *p; p++) {
        fputc(*p, f);
        if (*p == '\n' && p[1] != '\0')
            fprintf(f, "%*s", HELP_COL, "");
    }
    fputc('\n', f);
}

void rs_opt_help(FILE *f, const char *usage, const struct rs_opt_group *groups, size_t n_groups)
{
    if (usage != NULL)
        fputs(usage, f);
    for (size_t g = 0; g < n_groups; g++) {
        if (groups[g].opts[0].name == NULL)
            continue;
        fprintf(f, "\n");
        if (groups[g].title != NULL)
            fprintf(f, "%s:\n", groups[g].title);
        for (const struct rs_opt *o = groups[g].opts; o->name != NULL; o++) {
            if (!taken(&groups[g], o))
                continue;
            char head[128];
            int n = o->short_name ? snprintf(head, sizeof(head), "  -%c, --%s", o->short_name,
                                             o->name)
                                  : snprintf(head, sizeof(head), "  --%s", o->name);
            if (o->arg != NULL)
                n += snprintf(head + n, sizeof(head) - (size_t)n, " %s", o->arg);
            fputs(head, f);
            help_text(f, o->help != NULL ? o->help : "", n);
        }
    }
    fprintf(f, "\n  -h, --help%*sthis text\n", HELP_COL - 12, "");
}

int rs_opt_main(const char *prog, const char *usage, const struct rs_opt_group *groups,
                size_t n_groups, int argc, char **argv, unsigned flags, int *first)
{
    char err[512];
    int r = rs_opt_parse(groups, n_groups, argc, argv, flags, first, err, sizeof(err));
    if (r == RS_OPT_HELP) {
        rs_opt_help(stdout, usage, groups, n_groups);
        return 0;
    }
    if (r != RS_OPT_OK) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 2;
    }
    return -1;
}

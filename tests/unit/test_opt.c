/* SPDX-License-Identifier: MIT */
/*
 * The option tables (common/opt.h): every kind stores what it should, both
 * value forms and unique prefixes work, every refusal names the option and
 * the rule, operands are refused, permuted or end the options as asked, and
 * the generated help lists every entry. Also the shared tables the daemons
 * use (pipeline, placement, client access) parse through it.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/opt.h"
#include "common/placement.h"
#include "ipc/pipeline_config.h"
#include "ipc/pipeline_front.h"
#include "ipc/stage.h"
#include "tests/rs_test.h"

struct all {
    int flag, i, choice, called;
    uint32_t flag32, u32, has;
    bool b;
    uint64_t u64;
    float f;
    double d;
    char str[8];
    const char *arg;
};

static const char *const colours[] = {"red", "green", "blue", NULL};

static int parse_even(void *dst, const struct rs_opt *o, const char *v, char *err, size_t len)
{
    int n = atoi(v);
    if (n % 2 != 0) {
        snprintf(err, len, "option --%s: '%s' is odd", o->name, v);
        return -1;
    }
    ((struct all *)dst)->called = n;
    return 0;
}

#define OFF(f) offsetof(struct all, f)
static const struct rs_opt table[] = {
    {.name = "flag", .short_name = 'f', .kind = RS_OPT_FLAG, .off = OFF(flag), .val = 7,
     .help = "a flag"},
    {.name = "no-thing", .kind = RS_OPT_FLAG32, .off = OFF(flag32), .val = 0, .help = "off"},
    {.name = "bool", .kind = RS_OPT_BOOL, .off = OFF(b), .val = 1, .has_bit = 0x4,
     .has_off = OFF(has), .help = "a bool"},
    {.name = "int", .kind = RS_OPT_INT, .off = OFF(i), .min = -5, .max = 5, .arg = "N",
     .help = "first line\nsecond line"},
    {.name = "u32", .short_name = 'u', .kind = RS_OPT_U32, .off = OFF(u32), .min = 2, .max = 100,
     .arg = "N", .has_bit = 0x1, .has_off = OFF(has), .help = "bounded"},
    {.name = "u64", .kind = RS_OPT_U64, .off = OFF(u64), .arg = "N", .help = "unbounded"},
    {.name = "float", .kind = RS_OPT_FLOAT, .off = OFF(f), .arg = "F", .help = "finite"},
    {.name = "double", .kind = RS_OPT_DOUBLE, .off = OFF(d), .min = 0, .max = 10, .arg = "F",
     .help = "in range"},
    {.name = "str", .kind = RS_OPT_STR, .off = OFF(str), .size = 8, .arg = "S", .help = "short"},
    {.name = "arg", .kind = RS_OPT_ARG, .off = OFF(arg), .arg = "A", .help = "borrowed"},
    {.name = "colour", .kind = RS_OPT_CHOICE, .off = OFF(choice), .choices = colours,
     .arg = "C", .help = "one of three"},
    {.name = "even", .kind = RS_OPT_CALL, .parse = parse_even, .arg = "N", .help = "called"},
    {0},
};

/* Parses the NULL-terminated words (argv[0] added) into *a; returns rs_opt_parse's result. */
static int parse(struct all *a, unsigned flags, int *first, char *err, size_t len,
                 const char *const *words)
{
    static char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"prog";
    for (; *words != NULL && argc < 31; words++)
        argv[argc++] = (char *)*words;
    argv[argc] = NULL;
    memset(a, 0, sizeof(*a));
    a->flag32 = 1;
    struct rs_opt_group g = {"test", table, a, NULL};
    return rs_opt_parse(&g, 1, argc, argv, flags, first, err, len);
}

#define WORDS(...) ((const char *const[]){__VA_ARGS__, NULL})

static int test_every_kind_stores_its_value(void)
{
    struct all a;
    char err[256];
    RS_CHECK_MSG(parse(&a, 0, NULL, err, sizeof(err),
                       WORDS("--flag", "--no-thing", "--bool", "--int", "-5", "--u32", "100",
                             "--u64", "18446744073709551615", "--float", "1.5", "--double",
                             "2.5", "--str", "1234567", "--arg", "x y", "--colour", "blue",
                             "--even", "4")) == RS_OPT_OK,
                 "%s", err);
    RS_CHECK(a.flag == 7 && a.flag32 == 0 && a.b && a.i == -5 && a.u32 == 100);
    RS_CHECK(a.u64 == UINT64_MAX && a.f == 1.5f && a.d == 2.5 && strcmp(a.str, "1234567") == 0);
    RS_CHECK(strcmp(a.arg, "x y") == 0 && a.choice == 2 && a.called == 4 && a.has == 0x5);
    return 0;
}

static int test_both_value_forms_prefixes_and_short_options(void)
{
    struct all a;
    char err[256];
    RS_CHECK(parse(&a, 0, NULL, err, sizeof(err), WORDS("--u32=7", "--int", "3")) == RS_OPT_OK);
    RS_CHECK(a.u32 == 7 && a.i == 3);
    RS_CHECK(parse(&a, 0, NULL, err, sizeof(err), WORDS("-u", "9", "-f")) == RS_OPT_OK);
    RS_CHECK(a.u32 == 9 && a.flag == 7);
    RS_CHECK(parse(&a, 0, NULL, err, sizeof(err), WORDS("-u10", "--col=red")) == RS_OPT_OK);
    RS_CHECK(a.u32 == 10 && a.choice == 0); /* a unique prefix is the option */
    RS_CHECK(parse(&a, 0, NULL, err, sizeof(err), WORDS("--help")) == RS_OPT_HELP);
    RS_CHECK(parse(&a, 0, NULL, err, sizeof(err), WORDS("-h")) == RS_OPT_HELP);
    return 0;
}

/* Each refusal names the option (or argument) and the rule. */
static int test_refusals_name_the_option_and_rule(void)
{
    static const struct {
        const char *a, *b, *want;
    } cases[] = {
        {"--frob", NULL, "unknown option '--frob'"},
        {"-z", NULL, "unknown option '-z'"},
        {"--u32", NULL, "option --u32 needs a value"},
        {"--flag=1", NULL, "option --flag takes no value"},
        {"--u32", "1", "option --u32: '1' is not an integer in 2..100"},
        {"--u32", "101", "in 2..100"},
        {"--u32", "-3", "in 2..100"},
        {"--u32", "5x", "in 2..100"},
        {"--u32", "", "in 2..100"},
        {"--int", "-6", "option --int: '-6' is not an integer in -5..5"},
        {"--u64", "-1", "option --u64: '-1' is not a non-negative integer"},
        {"--u64", "18446744073709551616", "not a non-negative integer"},
        {"--float", "nan", "option --float: 'nan' is not a finite number"},
        {"--float", "1e39", "not a finite number"},
        {"--double", "11", "option --double: '11' is not a number in 0..10"},
        {"--str", "12345678", "option --str: value empty or longer than 7 bytes"},
        {"--str", "", "value empty"},
        {"--colour", "pink", "option --colour: 'pink' is not one of red, green, blue"},
        {"--even", "3", "option --even: '3' is odd"},
        {"--u", "3", "option '--u' is ambiguous: --u32, --u64"},
        {"operand", NULL, "unexpected argument 'operand'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct all a;
        char err[256] = "";
        const char *w[3] = {cases[i].a, cases[i].b, NULL};
        RS_CHECK_MSG(parse(&a, 0, NULL, err, sizeof(err), w) == RS_OPT_ERROR, "%s", cases[i].a);
        RS_CHECK_MSG(strstr(err, cases[i].want) != NULL, "%s %s: '%s' lacks '%s'", cases[i].a,
                     cases[i].b ? cases[i].b : "", err, cases[i].want);
    }
    return 0;
}

static int test_operands_permuted_or_in_order(void)
{
    struct all a;
    char err[256];
    int first;
    RS_CHECK(parse(&a, RS_OPT_OPERANDS, &first, err, sizeof(err),
                   WORDS("one", "--int", "2", "two")) == RS_OPT_OK);
    RS_CHECK(a.i == 2 && first == 3); /* argv permuted: the operands are argv[3..5) */
    RS_CHECK(parse(&a, RS_OPT_OPERANDS | RS_OPT_IN_ORDER, &first, err, sizeof(err),
                   WORDS("--int", "1", "hello", "--int", "2")) == RS_OPT_OK);
    RS_CHECK(a.i == 1 && first == 3); /* everything from the first operand on is the prompt */
    RS_CHECK(parse(&a, RS_OPT_OPERANDS | RS_OPT_IN_ORDER, &first, err, sizeof(err),
                   WORDS("--", "--int", "2")) == RS_OPT_OK);
    RS_CHECK(a.i == 0 && first == 2);
    return 0;
}

static int test_help_lists_every_entry(void)
{
    char *text = NULL;
    size_t len = 0;
    struct all a;
    FILE *f = open_memstream(&text, &len);
    struct rs_opt_group g = {"test options", table, &a, NULL};
    RS_CHECK(f != NULL);
    rs_opt_help(f, "usage: prog [options]\n", &g, 1);
    fclose(f);
    int ok = strncmp(text, "usage: prog", 11) == 0 && strstr(text, "\ntest options:\n") != NULL;
    for (const struct rs_opt *o = table; o->name != NULL; o++) {
        char want[64], line[64];
        snprintf(want, sizeof(want), "--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        snprintf(line, sizeof(line), "%.*s\n", (int)strcspn(o->help, "\n"), o->help);
        ok = ok && strstr(text, want) != NULL && strstr(text, line) != NULL;
    }
    ok = ok && strstr(text, "  -f, --flag") != NULL && strstr(text, "-h, --help") != NULL;
    /* a continuation line starts at the help column */
    ok = ok && strstr(text, "first line\n                           second line\n") != NULL;
    free(text);
    RS_CHECK(ok);
    return 0;
}

/* An `only` list takes some entries of a table, as ringserve-stat takes --instance. */
static int test_only_takes_the_named_entries(void)
{
    struct rs_pipe_args pa;
    char err[256];
    char *argv[] = {(char *)"stat", (char *)"--instance=abc", NULL};
    char *argv2[] = {(char *)"stat", (char *)"--ctx", (char *)"8", NULL};
    static const char *const only[] = {"instance", NULL};
    struct rs_opt_group g = {NULL, rs_pipe_opts, &pa, only};
    rs_pipe_args_init(&pa);
    RS_CHECK(rs_opt_parse(&g, 1, 2, argv, 0, NULL, err, sizeof(err)) == RS_OPT_OK);
    RS_CHECK(strcmp(pa.cfg.instance, "abc") == 0);
    RS_CHECK(rs_opt_parse(&g, 1, 3, argv2, 0, NULL, err, sizeof(err)) == RS_OPT_ERROR);
    RS_CHECK_MSG(strstr(err, "unknown option '--ctx'") != NULL, "%s", err);
    return 0;
}

/* The tables every daemon takes, parsed together as the stage skeleton does. */
static int test_daemon_tables_parse_together(void)
{
    struct rs_pipe_args pa;
    struct rs_place_opts po;
    struct rs_pipe_front_opts fo;
    char err[256];
    char *argv[] = {(char *)"d",
                    (char *)"--model=/m.gguf",
                    (char *)"--ctx",
                    (char *)"64",
                    (char *)"--policy=priority",
                    (char *)"--no-prefix-caching",
                    (char *)"--numa",
                    (char *)"0",
                    (char *)"--cpus=0-1",
                    (char *)"--listen",
                    (char *)"tcp://*:1",
                    NULL};
    rs_pipe_args_init(&pa);
    rs_place_opts_default(&po);
    memset(&fo, 0, sizeof(fo));
    struct rs_opt_group g[] = {{RS_PIPE_OPTS_TITLE, rs_pipe_opts, &pa, NULL},
                               {RS_PLACE_OPTS_TITLE, rs_place_opt_table, &po, NULL},
                               {RS_PIPE_FRONT_OPTS_TITLE, rs_pipe_front_opt_table, &fo, NULL}};
    RS_CHECK_MSG(rs_opt_parse(g, 3, 11, argv, 0, NULL, err, sizeof(err)) == RS_OPT_OK, "%s", err);
    RS_CHECK(strcmp(pa.cfg.model_path, "/m.gguf") == 0 && pa.cfg.n_ctx == 64);
    RS_CHECK(pa.cfg.priority_policy == 1 && pa.cfg.prefix_caching == 0);
    RS_CHECK(po.numa == 0 && strcmp(po.cpus, "0-1") == 0 && strcmp(fo.listen, "tcp://*:1") == 0);
    char *bad[] = {(char *)"d", (char *)"--instance", (char *)"a/b", NULL};
    RS_CHECK(rs_opt_parse(g, 3, 3, bad, 0, NULL, err, sizeof(err)) == RS_OPT_ERROR);
    RS_CHECK_MSG(strstr(err, "--instance") != NULL, "%s", err);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_every_kind_stores_its_value),
    RS_TEST(test_both_value_forms_prefixes_and_short_options),
    RS_TEST(test_refusals_name_the_option_and_rule),
    RS_TEST(test_operands_permuted_or_in_order),
    RS_TEST(test_help_lists_every_entry),
    RS_TEST(test_only_takes_the_named_entries),
    RS_TEST(test_daemon_tables_parse_together),
};

RS_TEST_MAIN(cases)

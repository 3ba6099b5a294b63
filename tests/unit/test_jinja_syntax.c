/* SPDX-License-Identifier: MIT */
/*
 * The chat-template renderer's lexer and parser against Jinja2 3.1 with
 * transformers' settings: trim_blocks, lstrip_blocks, whitespace control,
 * comments, raw blocks, the final newline, newline normalization, string
 * escapes and literals as Python reads them, operator precedence, and compile
 * errors naming line:column (unknown tags, unsupported tags, unknown filters
 * outside an if, break outside a loop). Expected values are Jinja2's.
 */
#include "tests/unit/jinja_fixture.h"

static int test_trim_blocks_eats_one_newline(void)
{
    OUT("{% if true %}\nyes\n{% endif %}\nno", NULL, "yes\nno");
    OUT("{% if true %}\n\nyes{% endif %}", NULL, "\nyes");
    OUT("{% set x = 1 %}\n{{ x }}\n", NULL, "1");
    OUT("a{# note #}\nb", NULL, "ab");
    OUT("{{ 'x' }}\ny", NULL, "x\ny"); /* not after a variable tag */
    OUT("{% if true +%}\nx{% endif %}", NULL, "\nx");
    return 0;
}

static int test_lstrip_blocks_only_before_block_tags(void)
{
    OUT("a\n    {% if true %}\n    b\n    {% endif %}\nc", NULL, "a\n    b\nc");
    OUT("  {% if true %}x{% endif %}", NULL, "x");
    OUT("  {{ 'x' }}", NULL, "  x");
    OUT("  {%+ if true %}x{% endif %}", NULL, "  x");
    OUT("a  {% if true %}x{% endif %}", NULL, "a  x"); /* text before the tag on its line */
    OUT("a\n \t{# c #}\nb", NULL, "a\nb");
    OUT("\t{%- if true %}x{% endif %}", NULL, "x");
    return 0;
}

static int test_minus_strips_all_whitespace(void)
{
    OUT("a  \n {%- if true -%}  \n b {%- endif %}", NULL, "ab");
    OUT("x\n\n  {{- 'y' -}}\n\n z", NULL, "xyz");
    OUT("a {#- c -#} b", NULL, "ab");
    OUT("a\xc2\xa0{{- 'b' }}", NULL, "ab"); /* Python's \s includes U+00A0 */
    return 0;
}

static int test_final_newline_and_newline_forms(void)
{
    OUT("x\n", NULL, "x");
    OUT("x\n\n", NULL, "x\n");
    OUT("a\r\nb\rc", NULL, "a\nb\nc");
    OUT("{% if true %}\r\nx{% endif %}\r\n", NULL, "x");
    OUT("", NULL, "");
    OUT("\n", NULL, "");
    return 0;
}

static int test_raw_and_comments(void)
{
    OUT("{% raw %}{{ x }}{% if %}{% endraw %}", NULL, "{{ x }}{% if %}");
    OUT("{%- raw -%}  a  {%- endraw -%}  b", NULL, "ab");
    OUT("{# {{ x }} {% if %} #}ok", NULL, "ok");
    ERR_AT("ok{# never closed", NULL, SYNTAX, 1, 3, "comment");
    return 0;
}

static int test_string_escapes_as_python(void)
{
    OUT("{{ 'a\\nb' }}", NULL, "a\nb");
    OUT("{{ 'it\\'s' }}|{{ \"q\\\"q\" }}", NULL, "it's|q\"q");
    OUT("{{ '\\x41\\u00e9\\U0001F600' }}", NULL, "A\xc3\xa9\xf0\x9f\x98\x80");
    OUT("{{ '\\101\\0' }}", NULL, "A\0");
    OUT("{{ '\\d\\w' }}", NULL, "\\d\\w"); /* unknown escapes keep the backslash */
    OUT("{{ '\\t|\\\\' }}", NULL, "\t|\\");
    OUT("{{ 'a' 'b' \"c\" }}", NULL, "abc");
    OUT("{{ 'line\\\nnext' }}", NULL, "linenext");
    OUT("{{ '\\\xc3\xa9' }}", NULL, "\\xe9"); /* backslash before non-ASCII: its escape text */
    OUT("{{ '{{ not a tag }}' }}", NULL, "{{ not a tag }}");
    ERR("{{ '\\x4' }}", NULL, SYNTAX);
    ERR("{{ '\\ud800' }}", NULL, SYNTAX);
    ERR("{{ 'open", NULL, SYNTAX);
    return 0;
}

static int test_literals(void)
{
    OUT("{{ 1_000 }} {{ 0x1f }} {{ 0b101 }} {{ 0o17 }} {{ 0 }}", NULL, "1000 31 5 15 0");
    OUT("{{ 1e3 }} {{ 2.50 }} {{ 1_0.5e-1 }} {{ 1E2 }}", NULL, "1000.0 2.5 1.05 100.0");
    OUT("{{ True }} {{ true }} {{ False }} {{ none }} {{ None }}", NULL, "True True False None None");
    OUT("{{ [1, 'a', [], {}] }}", NULL, "[1, 'a', [], {}]");
    OUT("{{ {'a': 1, 'b': [2]} }}", NULL, "{'a': 1, 'b': [2]}");
    OUT("{{ (1, 2) }} {{ (1,) }} {{ () }} {{ 1, 2 }}", NULL, "(1, 2) (1,) () (1, 2)");
    OUT("{{ [1, 2,] }} {{ {'a': 1,} }}", NULL, "[1, 2] {'a': 1}");
    OUT("{{ {'a': {'b': 1}} }}", NULL, "{'a': {'b': 1}}");
    ERR("{{ 99999999999999999999 }}", NULL, SYNTAX);
    return 0;
}

static int test_precedence(void)
{
    OUT("{{ 2 + 3 * 4 }} {{ (2 + 3) * 4 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }}", NULL, "14 20 64 4");
    OUT("{{ 'x' ~ 2 * 3 }} {{ (1 + 2) ~ 3 }}", NULL, "x6 33");
    ERR("{{ 1 + 2 ~ 3 }}", NULL, TYPE); /* ~ binds tighter than +: 1 + '23' */
    OUT("{{ not 1 == 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 1 }} {{ 1 < 3 > 2 }} {{ 1 < 2 > 3 }}", NULL,
        "True True True True False");
    OUT("{{ -1|abs }} {{ 10 - 3|abs }} {{ 'a' ~ 'b'|upper }} {{ [1, 2]|length * 2 }}", NULL,
        "1 7 aB 4");
    OUT("{{ 1 if false }}|{{ 'a' if 0 else 'b' if 1 else 'c' }}", NULL, "|b");
    OUT("{{ true and 0 or 'x' }} {{ none or [] }} {{ 1 and 2 }}", NULL, "x [] 2");
    OUT("{{ not none is none }} {{ 1 + 1 is odd }}", NULL, "False 2");
    OUT("{{ 'b' in 'abc' and 'z' not in 'abc' }}", NULL, "True");
    return 0;
}

static int test_compile_errors_name_position(void)
{
    ERR_AT("{% if x %}", NULL, SYNTAX, 1, 11, "endif");
    ERR_AT("line\n  {{ 1 + }}", NULL, SYNTAX, 2, 10, NULL);
    ERR_AT("{% do x %}", NULL, SYNTAX, 1, 4, "unknown tag 'do'");
    ERR_AT("a\n{% include 'x.jinja' %}", NULL, UNSUPPORTED, 2, 4, "include");
    ERR("{% extends 'base' %}", NULL, UNSUPPORTED);
    ERR("{% import 'm' as m %}", NULL, UNSUPPORTED);
    ERR("{% from 'm' import x %}", NULL, UNSUPPORTED);
    ERR("{% block b %}{% endblock %}", NULL, UNSUPPORTED);
    ERR("{% autoescape true %}{% endautoescape %}", NULL, UNSUPPORTED);
    ERR_AT("{{ x|nosuch }}", NULL, SYNTAX, 1, 6, "No filter named 'nosuch'");
    ERR("{{ x is nosuch }}", NULL, SYNTAX);
    ERR_AT("{% break %}", NULL, SYNTAX, 1, 4, "outside loop");
    ERR("{% for x in y %}{% macro m() %}{% break %}{% endmacro %}{% endfor %}", NULL, SYNTAX);
    ERR("{% for loop in y %}{% endfor %}", NULL, SYNTAX);
    ERR("{% set 1 = 2 %}", NULL, SYNTAX);
    ERR("{{ a is defined is defined }}", NULL, SYNTAX);
    ERR("{{ }}", NULL, SYNTAX);
    ERR("{{ a ! b }}", NULL, SYNTAX);
    ERR("{{ (1 }}", NULL, SYNTAX);
    ERR("{% macro m(a=1, b) %}{% endmacro %}", NULL, SYNTAX);
    ERR("{% macro m(a, a) %}{% endmacro %}", NULL, SYNTAX);
    ERR("{% endfor %}", NULL, SYNTAX);
    ERR("{{ 'caf\xc3 }}", NULL, SYNTAX); /* not UTF-8 */
    return 0;
}

static int test_unknown_filter_in_if_raises_only_when_run(void)
{
    OUT("{% if false %}{{ x|from_json }}{% endif %}ok", NULL, "ok");
    ERR_AT("{% if true %}\n{{ x|from_json }}{% endif %}", NULL, RUNTIME, 2, 6, "from_json");
    ERR("{% if true %}{% for a in [1] %}{{ a|nosuch }}{% endfor %}{% endif %}", NULL, SYNTAX);
    OUT("{% if false %}{{ 1 is nosuch }}{% endif %}ok", NULL, "ok");
    return 0;
}

static int test_nesting_is_bounded(void)
{
    char t[2400];
    size_t k = 0;
    k += (size_t)sprintf(t + k, "{{ ");
    for (int i = 0; i < 500; i++)
        t[k++] = '(';
    t[k++] = '1';
    for (int i = 0; i < 500; i++)
        t[k++] = ')';
    sprintf(t + k, " }}");
    ERR(t, NULL, SYNTAX);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_trim_blocks_eats_one_newline),
    RS_TEST(test_lstrip_blocks_only_before_block_tags),
    RS_TEST(test_minus_strips_all_whitespace),
    RS_TEST(test_final_newline_and_newline_forms),
    RS_TEST(test_raw_and_comments),
    RS_TEST(test_string_escapes_as_python),
    RS_TEST(test_literals),
    RS_TEST(test_precedence),
    RS_TEST(test_compile_errors_name_position),
    RS_TEST(test_unknown_filter_in_if_raises_only_when_run),
    RS_TEST(test_nesting_is_bounded),
};
RS_TEST_MAIN(cases)

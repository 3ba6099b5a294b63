/* SPDX-License-Identifier: MIT */
/*
 * The chat-template renderer's builtins against Jinja2 3.1 and Python:
 * tojson in every json.dumps form transformers allows (ensure_ascii, indent
 * as int or string, separators, sort_keys, non-string keys), str methods
 * (split/rsplit with and without separators and maxsplit, strip with chars,
 * startswith with tuples, replace, find, case mappings with ß and final
 * sigma, format and %), dict and list methods, the immutable sandbox
 * (SecurityError for list.append and dict.update, list.pop allowed as in
 * Jinja 3.1), filters, tests and the globals. Expected values are Python's.
 */
#include "tests/unit/jinja_fixture.h"

static int test_tojson_as_json_dumps(void)
{
    OUT("{{ {'a': [1, 2.5, none, true], 'b': '\xc3\xa9\"\\n\\x01'}|tojson }}", NULL,
        "{\"a\": [1, 2.5, null, true], \"b\": \"\xc3\xa9\\\"\\n\\u0001\"}");
    OUT("{{ '\xc3\xa9\xf0\x9f\x98\x80\\x7f'|tojson(ensure_ascii=true) }}", NULL,
        "\"\\u00e9\\ud83d\\ude00\\u007f\"");
    OUT("{{ '\\x7f'|tojson }}", NULL, "\"\x7f\"");
    OUT("{{ {'a': [1, {}], 'b': []}|tojson(indent=2) }}", NULL,
        "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
    OUT("{{ [1, 2]|tojson(indent=0) }}|{{ [1]|tojson(indent='\\t') }}", NULL,
        "[\n1,\n2\n]|[\n\t1\n]");
    OUT("{{ {'a': [1, 2]}|tojson(separators=(',', ':')) }}", NULL, "{\"a\":[1,2]}");
    OUT("{{ {'b': 1, 'a': {'d': 1, 'c': 2}}|tojson(sort_keys=true) }}", NULL,
        "{\"a\": {\"c\": 2, \"d\": 1}, \"b\": 1}");
    OUT("{{ {1: 'a', none: 'b', 2.5: 'd', false: 'f'}|tojson }}", NULL,
        "{\"1\": \"a\", \"null\": \"b\", \"2.5\": \"d\", \"false\": \"f\"}");
    OUT("{{ (1, 2)|tojson }} {{ 1.0|tojson }} {{ 1e100|tojson }} {{ 'x'|tojson }}", NULL,
        "[1, 2] 1.0 1e+100 \"x\"");
    OUT("{{ ('<a>'|safe)|tojson }}", NULL, "\"<a>\"");
    ERR_AT("{{ x|tojson }}", NULL, TYPE, 1, 6, "Object of type Undefined is not JSON serializable");
    ERR("{{ [1]|map('string')|tojson }}", NULL, TYPE);
    ERR("{{ {'a': 1}.items()|tojson }}", NULL, TYPE);
    ERR("{{ {(1, 2): 1}|tojson }}", NULL, TYPE);
    ERR("{{ {1: 1, 'a': 2}|tojson(sort_keys=true) }}", NULL, TYPE);
    ERR("{{ 1|tojson(bogus=1) }}", NULL, TYPE);
    return 0;
}

static int test_split_and_strip_as_python(void)
{
    OUT("{{ ' a  b '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }}", NULL,
        "['a', 'b'] ['a', 'b', '', 'c'] ['a', 'b c']");
    OUT("{{ 'a b c'.rsplit(' ', 1) }} {{ '  a b  '.split(None, 1) }} {{ '  a b  '.rsplit(None, 1) }}",
        NULL, "['a b', 'c'] ['a', 'b  '] ['  a', 'b']");
    OUT("{{ ''.split() }} {{ ''.split(',') }} {{ 'a\\u3000b'.split() }} {{ 'x'.split(sep='x') }}",
        NULL, "[] [''] ['a', 'b'] ['', '']");
    OUT("{{ 'a\\r\\nb\\x0bc\\x85d\\u2028e'.splitlines() }} {{ 'a\\nb\\n'.splitlines(true) }}", NULL,
        "['a', 'b', 'c', 'd', 'e'] ['a\\n', 'b\\n']");
    OUT("{{ 'xxhixx'.strip('x') }} {{ '  hi\\n'.strip() }}|{{ 'abcba'.lstrip('ab') }} "
        "{{ 'abcba'.rstrip('ab') }} {{ 'h\xc3\xa9\xc3\xa9'.rstrip('\xc3\xa9') }}",
        NULL, "hi hi|cba abc h");
    ERR("{{ 'a'.split('') }}", NULL, VALUE);
    ERR("{{ 'a'.strip(chars='a') }}", NULL, TYPE); /* str methods take positional arguments */
    return 0;
}

static int test_str_methods_as_python(void)
{
    OUT("{{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.endswith('bc') }} {{ 'abc'.startswith('b', 1) }}"
        " {{ 'abc'.startswith('', 3) }} {{ 'abc'.startswith('', 4) }}",
        NULL, "True True True True False");
    OUT("{{ 'aaa'.replace('a', 'b', 2) }} {{ 'ab'.replace('', '-') }} {{ 'ab'.replace('', '-', 2) }}",
        NULL, "bba -a-b- -a-b");
    OUT("{{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'h\xc3\xa9llo'.find('l') }} "
        "{{ 'hello'.find('z') }} {{ 'hello'.count('l') }} {{ 'abc'.count('') }} {{ 'hello'.index('e') }}",
        NULL, "2 3 2 -1 2 4 1");
    OUT("{{ \"they're bill's\".title() }} {{ 'hELLO wORLD'.capitalize() }} {{ 'Hi'.swapcase() }}", NULL,
        "They'Re Bill'S Hello world hI");
    OUT("{{ '\xc3\x9f'.upper() }} {{ '\xce\x91\xce\xa3'.lower() }} {{ '\xce\x91\xce\xa3 \xce\x91'.lower() }} "
        "{{ '\xc7\x86" "a'.capitalize() }} {{ '\xc4\xb0'.lower()|length }}",
        NULL, "SS \xce\xb1\xcf\x82 \xce\xb1\xcf\x82 \xce\xb1 \xc7\x85" "a 2");
    OUT("{{ ', '.join(['a', 'b']) }} {{ ''.join('abc') }} {{ 'x'.zfill(3) }} {{ '-5'.zfill(4) }}", NULL,
        "a, b abc 00x -005");
    OUT("{{ 'abc'.partition('b') }} {{ 'abc'.rpartition('x') }} {{ 'ab'.center(5, '*') }} "
        "{{ 'ab'.ljust(4, '.') }}{{ 'ab'.rjust(4) }}",
        NULL, "('a', 'b', 'c') ('', '', 'abc') **ab* ab..  ab");
    OUT("{{ 'ABC'.isupper() }} {{ 'Abc'.istitle() }} {{ '\xef\xbc\x91\xef\xbc\x92'.isdigit() }} "
        "{{ '\xc2\xbd'.isnumeric() }} {{ '\xc2\xbd'.isdigit() }} {{ ''.isalpha() }} {{ 'a1'.isalnum() }}"
        " {{ ' \\t'.isspace() }} {{ 'x_1'.isidentifier() }}",
        NULL, "True True True True False False True True True");
    OUT("{{ 'abc'.removeprefix('a') }} {{ 'abc'.removesuffix('c') }} {{ 'a\\tb'.expandtabs(4) }}", NULL,
        "bc ab a   b");
    ERR("{{ ', '.join([1]) }}", NULL, TYPE);
    ERR("{{ 'abc'.index('z') }}", NULL, VALUE);
    ERR("{{ 'abc'.encode() }}", NULL, UNSUPPORTED);
    return 0;
}

static int test_string_formatting_as_python(void)
{
    OUT("{{ '%s-%d-%.1f' % ('a', 2, 3.25) }} {{ '%05.1f|%-4s|%x' % (3.14159, 'ab', 255) }}", NULL,
        "a-2-3.2 003.1|ab  |ff");
    OUT("{{ '%(a)s=%(b)r' % {'a': 1, 'b': 'x'} }} {{ '%s' % [1] }} {{ '100%%' % () }} {{ '%s'|format('f') }}",
        NULL, "1='x' [1] 100% f");
    OUT("{{ '{} {}'.format('a', 1) }} {{ '{0:>5}|{1:.2f}|{x}'.format('ab', 3.14159, x=true) }}", NULL,
        "a 1    ab|3.14|True");
    OUT("{{ '{:,}|{:08.3f}|{:^7}|{:+d}|{:#x}|{:.1%}|{:e}'.format(1234567, -3.14159, 'mid', 5, 255, "
        "0.256, 12345.678) }}",
        NULL, "1,234,567|-003.142|  mid  |+5|0xff|25.6%|1.234568e+04");
    OUT("{{ '{}|{:.3}|{:g}|{:>4}|{{x}}'.format(1.5, 1/3, 1e-7, true) }} {{ '{0[a]}{1.real}'.format({'a': 1}, 2) }}",
        NULL, "1.5|0.333|1e-07|   1|{x} 12");
    ERR("{{ '%d' % 'x' }}", NULL, TYPE);
    ERR("{{ '%s %s' % ('a',) }}", NULL, TYPE);
    ERR("{{ '%s' % ('a', 'b') }}", NULL, TYPE);
    ERR("{{ '{} {0}'.format(1, 2) }}", NULL, VALUE);
    return 0;
}

static int test_sandbox_refuses_mutation(void)
{
    ERR_AT("{% set x = [1] %}\n{{ x.append(2) }}", NULL, SECURITY, 2, 0,
           "access to attribute 'append' of 'list' object is unsafe.");
    ERR("{{ [].extend([1]) }}", NULL, SECURITY);
    ERR("{{ [2, 1].sort() }}", NULL, SECURITY);
    ERR("{{ {'a': 1}.update({}) }}", NULL, SECURITY);
    ERR("{{ {'a': 1}.pop('a') }}", NULL, SECURITY);
    ERR("{{ {}.setdefault('a', 1) }}", NULL, SECURITY);
    OUT("[{{ [].append }}] {{ [].append is defined }}", NULL, "[] False");
    OUT("{% set x = [1, 2, 3] %}{{ x.pop() }}{{ x.pop(0) }}{{ x }}", NULL, "31[2]"); /* allowed */
    OUT("{% set x = [1, 2] %}{{ x.copy() }}{{ x.index(2) }}{{ x.count(1) }}", NULL, "[1, 2]11");
    ERR("{{ [].pop() }}", NULL, VALUE);
    return 0;
}

static int test_filters(void)
{
    OUT("{{ [3, 1, 2]|sort }} {{ ['b', 'a', 'C']|sort }} {{ ['b', 'a', 'C']|sort(case_sensitive=true) }}",
        NULL, "[1, 2, 3] ['a', 'b', 'C'] ['C', 'a', 'b']");
    OUT("{{ [{'n': 2}, {'n': 1}]|sort(attribute='n')|map(attribute='n')|list }} "
        "{{ [1, 3, 2]|sort(reverse=true) }}",
        NULL, "[1, 2] [3, 2, 1]");
    OUT("{{ {'b': 1, 'A': 2}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }}", NULL,
        "[('A', 2), ('b', 1)] [('b', 1), ('a', 2)]");
    OUT("{{ [1, 2, 2, 3]|unique|list }} {{ ['a', 'A', 'b']|unique|list }}", NULL, "[1, 2, 3] ['a', 'b']");
    OUT("{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} "
        "{{ [1, 0, 2]|select|list }} {{ [1, 2, 3]|select('gt', 1)|list }}",
        NULL, "[1, 3] [2, 4] [1, 2] [2, 3]");
    const char *m = "{\"messages\": [{\"role\": \"system\"}, {\"role\": \"user\", \"x\": 1}, {\"role\": \"user\"}]}";
    OUT("{{ messages|selectattr('role', 'equalto', 'user')|list|length }} "
        "{{ messages|rejectattr('x')|map(attribute='role')|join(',') }} "
        "{{ messages|selectattr('x', 'defined')|list }}",
        m, "2 system,user [{'role': 'user', 'x': 1}]");
    OUT("{{ ['a', 'b']|map('upper')|join(',') }} {{ [{'a': 1}, {}]|map(attribute='a', default='?')|list }} "
        "{{ [1, 2]|map('string')|list }}",
        NULL, "A,B [1, '?'] ['1', '2']");
    OUT("{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ []|first is defined }} {{ 'abc'|last }}", NULL,
        "1 3 False c");
    OUT("{{ 'a\\nb'|indent(2) }}|{{ 'a\\nb'|indent(2, first=true) }}|{{ 'a\\n\\nb'|indent(2) }}|"
        "{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'a\\nb'|indent('> ') }}|{{ 'a\\r\\nb'|indent }}",
        NULL, "a\n  b|  a\n  b|a\n\n  b|a\n  \n  b|a\n> b|a\n    b");
    OUT("{{ '  x  '|trim }} {{ 'xxaxx'|trim('x') }} {{ 'Hello'|replace('l', 'L') }} "
        "{{ 'aaa'|replace('a', 'b', 1) }} [{{ 'a'|center(5) }}]",
        NULL, "x a HeLLo baa [  a  ]");
    OUT("{{ 3.7|int }} {{ '42'|int }} {{ '4.2'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} "
        "{{ '0x1A'|int(base=16) }} {{ '3.5'|float }} {{ 'x'|float }} {{ none|int }} {{ true|int }}",
        NULL, "3 42 4 0 7 26 3.5 0.0 0 1");
    OUT("{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(method='ceil') }} "
        "{{ 5|round }} {{ -2.5|round }} {{ 1234.5|round(-2) }} {{ 2.5|round(method='floor') }}",
        NULL, "2.0 4.0 2.67 3.0 5 -2.0 1200.0 2.0");
    OUT("{{ [1, 2, 3]|sum }} {{ [{'v': 1}, {'v': 2}]|sum(attribute='v') }} {{ [1.5, 2]|sum }} "
        "{{ [[1], [2]]|sum(start=[]) }}",
        NULL, "6 3 3.5 [1, 2]");
    OUT("{{ [3, 1, 2]|max }} {{ [3, 1, 2]|min }} {{ ['b', 'A']|max }} {{ [{'a': 1}, {'a': 3}]|max(attribute='a') }}",
        NULL, "3 1 b {'a': 3}");
    OUT("{{ 'a b  c'|wordcount }} {{ 'hello world'|truncate(9) }} {{ 'hello world foo bar'|truncate(9) }} "
        "{{ 'hello world'|truncate(5, true, '') }}",
        NULL, "3 hello world hello... hello");
    OUT("{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3, 4, 5]|batch(2, 0)|list }} "
        "{{ [1, 2, 3, 4, 5]|slice(2)|list }}",
        NULL, "[[1, 2], [3, 4], [5]] [[1, 2], [3, 4], [5, 0]] [[1, 2, 3], [4, 5]]");
    OUT("{{ 'abc'|reverse }} {{ [1, 2]|reverse|list }} {{ 'abc'|list }} {{ {'a': 1}|list }} "
        "{{ {'a': 1}|items|list }} {{ 'he\xc3\xa9'|length }} {{ {'a': 1}|count }}",
        NULL, "cba [2, 1] ['a', 'b', 'c'] ['a'] [('a', 1)] 3 1");
    OUT("{{ 42|string }} {{ [1]|string }} {{ [1, 2]|join }} {{ [{'a': 'x'}, {'a': 'y'}]|join(',', attribute='a') }}",
        NULL, "42 [1] 12 x,y");
    OUT("{{ 'hello world'|title }} {{ \"they're\"|title }} {{ 'a-b(c'|title }} {{ 'x'|capitalize }} "
        "{{ 'Ab'|upper }}{{ 'Ab'|lower }}",
        NULL, "Hello World They're A-B(C X ABab");
    OUT("{{ -3|abs }} {{ -2.5|abs }} {{ none|default('d') }} {{ ''|default('d', true) }} {{ x|d('e') }}",
        NULL, "3 2.5 None d e");
    OUT("{{ 'upper'|attr('x') is defined }} {{ {'a': 1}|attr('a') is defined }} {{ 'ab'|attr('upper')() }}",
        NULL, "False False AB");
    ERR("{{ ['a']|map('upper')|length }}", NULL, TYPE); /* generators have no len() */
    ERR("{{ 'x'|items|list }}", NULL, TYPE);
    OUT("{% set g = 'x'|items %}ok", NULL, "ok"); /* a generator's error waits until it is consumed */
    ERR("{{ [1]|map('nosuch')|list }}", NULL, RUNTIME);
    ERR("{{ 'x'|urlize }}", NULL, UNSUPPORTED);
    ERR("{{ [1]|random }}", NULL, UNSUPPORTED);
    OUT("{% if false %}{{ 'x'|urlize }}{% endif %}ok", NULL, "ok");
    return 0;
}

static int test_tests(void)
{
    OUT("{{ 1 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} "
        "{{ 3.0 is odd }}",
        NULL, "True True True False True");
    OUT("{{ true is number }} {{ true is integer }} {{ 1 is integer }} {{ 1.0 is float }} "
        "{{ 1 is float }} {{ true is boolean }} {{ 1 is boolean }}",
        NULL, "True False True True False True False");
    OUT("{{ 'a' is string }} {{ {} is mapping }} {{ [] is sequence }} {{ 'a' is sequence }} "
        "{{ x is sequence }} {{ {} is sequence }} {{ [1]|map('abs') is sequence }}",
        NULL, "True True True True True True False");
    OUT("{{ none is iterable }} {{ 'a' is iterable }} {{ x is iterable }} {{ 1 is iterable }} "
        "{{ [1]|map('abs') is iterable }}",
        NULL, "False True True False True");
    OUT("{{ 2 is in [1, 2] }} {{ 'a' is eq 'a' }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 3 is gt 2 }} "
        "{{ 2 is ge 2 }} {{ 2 is le 1 }} {{ 3 is greaterthan 2 }} {{ 1 is lessthan 2 }} {{ 1 is equalto 1 }}",
        NULL, "True True True True True True False True True True");
    OUT("{{ none is sameas none }} {{ true is sameas true }} {{ 1 is sameas 1 }} {{ [] is sameas [] }}",
        NULL, "True True True False");
    OUT("{{ 'ABC' is upper }} {{ 'abc' is lower }} {{ 'Abc' is lower }} {{ true is true }} "
        "{{ 1 is true }} {{ false is false }} {{ 0 is false }}",
        NULL, "True True False True False True False");
    OUT("{{ 'upper' is filter }} {{ 'from_json' is filter }} {{ 'odd' is test }} {{ range is callable }} "
        "{{ 'a' is callable }}",
        NULL, "True False True True False");
    ERR("{{ 'abc' is odd }}", NULL, TYPE);
    ERR("{{ 1 is divisibleby 0 }}", NULL, VALUE);
    ERR("{{ 1 is lt 'a' }}", NULL, TYPE);
    return 0;
}

static int test_globals(void)
{
    OUT("{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }}",
        NULL, "[0, 1, 2] [1, 4, 7] [5, 3, 1] []");
    OUT("{{ dict(a=1) }} {{ dict({'b': 2}, c=3) }} {{ dict([('k', 'v')]) }}", NULL,
        "{'a': 1} {'b': 2, 'c': 3} {'k': 'v'}");
    OUT("{% set ns = namespace(a=1) %}{% set ns.a = ns.a + 1 %}{% set ns.b = 'x' %}{{ ns.a }}{{ ns.b }} {{ ns }}",
        NULL, "2x <Namespace {'a': 2, 'b': 'x'}>");
    OUT("{% set ns = namespace({'k': 1}) %}{{ ns.k }} {{ ns.missing is defined }}", NULL, "1 False");
    OUT("{% set j = joiner('|') %}{% for x in [1, 2, 3] %}{{ j() }}{{ x }}{% endfor %}", NULL, "1|2|3");
    OUT("{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}", NULL,
        "abab");
    OUT("{{ strftime_now('%Y-%m-%d %A %b %d %B %j') }}|{{ strftime_now('%f%z%Z%%') }}", NULL,
        "2026-01-15 Thursday Jan 15 January 015|000000%");
    ERR_AT("{{ range(200000)|length }}", NULL, VALUE, 1, 4, "MAX_RANGE");
    ERR("{{ range(1, 2, 0) }}", NULL, VALUE);
    ERR("{{ range(1.5) }}", NULL, TYPE);
    ERR("{{ lipsum() }}", NULL, UNSUPPORTED);
    ERR("{{ raise_exception() }}", NULL, TYPE);
    return 0;
}

static int test_raise_exception_carries_message(void)
{
    struct jt_result r;
    jt_run("line one\n  {{- raise_exception('Roles must alternate: ' ~ 'user/assistant' ~ \"\\n\xc3\xa9\") }}",
           NULL, &r);
    RS_CHECK(r.rc == RS_EINVAL && r.err.kind == RS_JINJA_ERR_RAISE);
    RS_CHECK(r.err.msg_len == strlen("Roles must alternate: user/assistant\n\xc3\xa9"));
    RS_CHECK(strcmp(r.err.msg, "Roles must alternate: user/assistant\n\xc3\xa9") == 0);
    RS_CHECK(r.err.line == 2 && r.err.col == 7);
    jt_free(&r);
    ERR_AT("{{ raise_exception(42) }}", NULL, RAISE, 1, 0, "42");
    /* inside a macro and a loop, with output already produced: no partial text comes back */
    jt_run("x{% macro m() %}{{ raise_exception('in macro') }}{% endmacro %}{% for i in [1] %}{{ m() }}"
           "{% endfor %}",
           NULL, &r);
    RS_CHECK(r.rc != RS_OK && r.err.kind == RS_JINJA_ERR_RAISE && r.out == NULL);
    RS_CHECK(strcmp(r.err.msg, "in macro") == 0);
    jt_free(&r);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_tojson_as_json_dumps),
    RS_TEST(test_split_and_strip_as_python),
    RS_TEST(test_str_methods_as_python),
    RS_TEST(test_string_formatting_as_python),
    RS_TEST(test_sandbox_refuses_mutation),
    RS_TEST(test_filters),
    RS_TEST(test_tests),
    RS_TEST(test_globals),
    RS_TEST(test_raise_exception_carries_message),
};
RS_TEST_MAIN(cases)

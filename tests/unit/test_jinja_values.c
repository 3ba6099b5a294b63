/* SPDX-License-Identifier: MIT */
/*
 * The chat-template renderer's value semantics against Python and Jinja2
 * 3.1: Undefined versus None (printing, ~, +, attributes, iteration, tests,
 * defaults), JSON input as json.loads gives it (ints vs floats, key order),
 * arithmetic (true division, floor division and modulo signs, **, float
 * repr), comparisons across types, `in`, str() and repr() of containers,
 * slicing with negative steps, attribute-versus-item lookup, and Markup's
 * escaping of what is added to it. Expected values are Python's.
 */
#include "tests/unit/jinja_fixture.h"

static int test_undefined_semantics(void)
{
    OUT("[{{ x }}]", NULL, "[]");
    OUT("{{ x is defined }} {{ x is undefined }} {{ x is none }} {{ x == none }}", NULL,
        "False True False False");
    OUT("{{ x ~ 'a' }} {{ x|default('d') }} {{ x|length }} {{ x|string }}|", NULL, "a d 0 |");
    OUT("{% for a in x %}{{ a }}{% else %}empty{% endfor %}", NULL, "empty");
    OUT("{% if x %}t{% else %}f{% endif %} {{ not x }} {{ 'a' in x }} {{ x == y }}", NULL,
        "f True False True");
    OUT("{{ [x] }} {{ x|list }} {{ x|join }}|{{ x|trim }}|", NULL, "[Undefined] [] ||");
    ERR_AT("{{ x + 'a' }}", NULL, UNDEFINED, 1, 6, "'x' is undefined");
    ERR("{{ 'a' + x }}", NULL, UNDEFINED);
    ERR_AT("\n{{ x.y }}", NULL, UNDEFINED, 2, 5, "'x' is undefined");
    ERR("{{ x['y'] }}", NULL, UNDEFINED);
    ERR("{{ x() }}", NULL, UNDEFINED);
    ERR("{{ x < 1 }}", NULL, UNDEFINED);
    ERR("{{ x|tojson }}", NULL, TYPE);
    ERR("{{ -x }}", NULL, UNDEFINED);
    ERR("{{ x[1:] }}", NULL, UNDEFINED);
    return 0;
}

static int test_missing_key_is_undefined_none_is_not(void)
{
    const char *v = "{\"m\": {\"role\": \"user\", \"content\": null}}";
    OUT("[{{ m.name }}] [{{ m['name'] }}] {{ m.name is defined }}", v, "[] [] False");
    OUT("{{ m.content }} {{ m.content is none }} {{ m.content is defined }}", v, "None True True");
    OUT("{{ m.content ~ '!' }} {{ m.content|default('d') }} {{ m.content|default('d', true) }}", v,
        "None! None d");
    OUT("[{{ m.content.text }}]", v, "[]"); /* an attribute of None is undefined, not an error */
    ERR_AT("{{ m.content + 'a' }}", v, TYPE, 1, 14, "unsupported operand type(s) for +: 'NoneType' and 'str'");
    ERR_AT("{{ 'a' + m.content }}", v, TYPE, 1, 8, "can only concatenate str (not \"NoneType\") to str");
    ERR("{{ m.content.text.more }}", v, UNDEFINED);
    ERR("{{ m.name.strip() }}", v, UNDEFINED);
    ERR("{% for c in m.content %}{% endfor %}", v, TYPE);
    ERR("{{ m.content|length }}", v, TYPE);
    OUT("{{ m.content|tojson }} {{ [m.content] }}", v, "null [None]");
    return 0;
}

static int test_json_input_as_python(void)
{
    const char *v = "{\"d\": {\"z\": 1, \"a\": 2.0, \"m\": [true, null, \"s\", 1e2, -0]}}";
    OUT("{{ d.z }} {{ d.a }} {{ d.m[3] }} {{ d.m[4] }}", v, "1 2.0 100.0 0");
    OUT("{{ d|tojson }}", v, "{\"z\": 1, \"a\": 2.0, \"m\": [true, null, \"s\", 100.0, 0]}");
    OUT("{% for k in d %}{{ k }}{% endfor %} {{ d.keys()|list }}", v, "zam ['z', 'a', 'm']");
    OUT("{{ d.z is integer }} {{ d.a is float }} {{ d.m[0] is boolean }}", v, "True True True");
    return 0;
}

static int test_arithmetic_as_python(void)
{
    OUT("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}", NULL,
        "3 -4 -2 2 3.0 0.5");
    OUT("{{ 1 / 2 }} {{ 4 / 2 }} {{ 10 / 4 }} {{ 2 ** -1 }} {{ 2 ** 10 }} {{ -7.5 // 2 }}", NULL,
        "0.5 2.0 2.5 0.5 1024 -4.0");
    OUT("{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e-5 }} {{ 123456789012345678.0 }} {{ 1e22 }}", NULL,
        "0.30000000000000004 1e+16 1e-05 1.2345678901234568e+17 1e+22");
    OUT("{{ 1.5e300 * 1e300 }} {{ -1.5e300 * 1e300 }} {{ 0.0 * -1 }}", NULL, "inf -inf -0.0");
    OUT("{{ 3 * 'ab' }} {{ 'ab' * 2 }} {{ [1] * 3 }} {{ 'a' * -1 }}|", NULL, "ababab abab [1, 1, 1] |");
    OUT("{{ True + 1 }} {{ True * 3 }} {{ -True }} {{ +True }} {{ 7 // True }}", NULL, "2 3 -1 1 7");
    OUT("{{ [1] + [2] }} {{ (1,) + (2,) }} {{ 'a' + 'b' }}", NULL, "[1, 2] (1, 2) ab");
    ERR("{{ 1 / 0 }}", NULL, VALUE);
    ERR("{{ 1 // 0 }}", NULL, VALUE);
    ERR("{{ 1.0 % 0 }}", NULL, VALUE);
    ERR("{{ [1] + (2,) }}", NULL, TYPE);
    ERR("{{ 'a' + 1 }}", NULL, TYPE);
    ERR("{{ 'a' - 'b' }}", NULL, TYPE);
    ERR("{{ -'a' }}", NULL, TYPE);
    ERR("{{ 9223372036854775807 + 1 }}", NULL, UNSUPPORTED); /* Python's int would grow */
    return 0;
}

static int test_comparisons_across_types(void)
{
    OUT("{{ 1 == 1.0 }} {{ 1 == '1' }} {{ True == 1 }} {{ none == none }} {{ (1, 2) == [1, 2] }}",
        NULL, "True False True True False");
    OUT("{{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ [1, [2]] == [1, [2]] }} {{ 'a' != 'a' }}",
        NULL, "True True False");
    OUT("{{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ [1, 2] < [1, 3] }} {{ [1] < [1, 0] }} {{ 2 < 2.5 }}",
        NULL, "True True True True True");
    OUT("{{ 'é' > 'z' }} {{ 9007199254740993 == 9007199254740992.0 }}", NULL, "True False");
    ERR_AT("{{ 1 < 'a' }}", NULL, TYPE, 1, 6, "'<' not supported between instances of 'int' and 'str'");
    ERR("{{ none < 1 }}", NULL, TYPE);
    ERR("{{ {} < {} }}", NULL, TYPE);
    return 0;
}

static int test_in_operator(void)
{
    OUT("{{ 'b' in 'abc' }} {{ '' in 'abc' }} {{ 1 in [1, 2] }} {{ 1.0 in [1] }} {{ 'a' in {'a': 1} }}",
        NULL, "True True True True True");
    OUT("{{ 'x' not in 'abc' }} {{ [1] in [[1]] }} {{ 'k' in {'a': 1}.keys() }}", NULL,
        "True True False");
    ERR("{{ 1 in 'abc' }}", NULL, TYPE);
    ERR("{{ 'a' in none }}", NULL, TYPE);
    ERR("{{ 'a' in 5 }}", NULL, TYPE);
    ERR("{{ [1] in {'a': 1} }}", NULL, TYPE);
    return 0;
}

static int test_str_and_repr(void)
{
    OUT("{{ [1, 'a', none, true, 1.5, {'k': 'v'}] }}", NULL, "[1, 'a', None, True, 1.5, {'k': 'v'}]");
    OUT("{{ [\"it's\", 'a\"b', 'it\\'s \"x\"', 'a\\\\b'] }}", NULL,
        "[\"it's\", 'a\"b', 'it\\'s \"x\"', 'a\\\\b']");
    OUT("{{ ['\\n\\t\\r\\x00\\x7f'] }}", NULL, "['\\n\\t\\r\\x00\\x7f']");
    OUT("{{ ['\xc3\xa9', '\xc2\xa0', '\xe2\x80\x8b', '\xf0\x9f\x98\x80'] }}", NULL,
        "['\xc3\xa9', '\\xa0', '\\u200b', '\xf0\x9f\x98\x80']");
    OUT("{{ 42 }} {{ -3 }} {{ 2.0 }} {{ true }} {{ none }}", NULL, "42 -3 2.0 True None");
    OUT("{{ {1: 'a', true: 'c', none: 'b'} }}", NULL, "{1: 'c', None: 'b'}"); /* 1 and True: one key */
    OUT("{{ {'a': 1}.items() }} {{ {'a': 1}.values() }}", NULL,
        "dict_items([('a', 1)]) dict_values([1])");
    OUT("{{ range(3) }} {{ range(1, 9, 2) }}", NULL, "range(0, 3) range(1, 9, 2)");
    ERR("{{ [1]|map('string') }}", NULL, UNSUPPORTED); /* Python prints a generator's address */
    return 0;
}

static int test_slicing_and_indexing(void)
{
    OUT("{{ 'abcdef'[1:4] }} {{ 'abcdef'[::-1] }} {{ 'abcdef'[::2] }} {{ 'abcdef'[-2:] }}", NULL,
        "bcd fedcba ace ef");
    OUT("{{ 'abcdef'[:-2] }} {{ 'abcdef'[4:1:-1] }} {{ 'abcdef'[-1:-7:-2] }} {{ 'abc'[10:] }}|",
        NULL, "abcd edc fdb |");
    OUT("{{ [1, 2, 3, 4][::-2] }} {{ [1, 2, 3][5:] }} {{ [1, 2, 3][-5:2] }} {{ (1, 2, 3)[1:] }}",
        NULL, "[4, 2] [] [1, 2] (2, 3)");
    OUT("{{ 'h\xc3\xa9llo'[1:3] }} {{ 'h\xc3\xa9llo'[-4] }} {{ 'h\xc3\xa9llo'[::-1] }}", NULL,
        "\xc3\xa9l \xc3\xa9 oll\xc3\xa9h");
    OUT("{{ 'abc'[-1] }} [{{ 'abc'[5] }}] {{ [1, 2][5] is defined }} {{ [1, 2][-1] }}", NULL,
        "c [] False 2");
    OUT("{{ [1, 2, 3].1 }} {{ range(10)[2:8:3]|list }} {{ range(10)[::-3] }}", NULL,
        "2 [2, 5] range(9, -1, -3)");
    ERR("{{ 'abc'[::0] }}", NULL, VALUE);
    ERR("{{ 'abc'['a':] }}", NULL, TYPE);
    ERR("{{ none[1:] }}", NULL, TYPE);
    return 0;
}

static int test_attribute_versus_item(void)
{
    const char *v = "{\"d\": {\"items\": 1, \"a\": 2, \"_x\": 3}}";
    OUT("{{ d['items'] }} {{ d.a }} {{ d['a'] }} {{ d._x }}", v, "1 2 2 3");
    OUT("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", v, "items=1;a=2;_x=3;");
    OUT("{{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }}", v, "2 dflt None");
    OUT("{{ 'abc'.upper() }} {{ 'abc'['upper']() }} [{{ 'abc'.nosuch }}]", NULL, "ABC ABC []");
    OUT("[{{ ''.__class__ }}]", NULL, "[]"); /* unsafe attribute: undefined */
    ERR("{{ ''.__class__.__name__ }}", NULL, SECURITY);
    return 0;
}

static int test_markup_escapes_what_is_added(void)
{
    OUT("{{ ('<a>'|safe) + '<b>' }}|{{ '<b>' + ('<a>'|safe) }}|{{ ('<a>'|safe) ~ '<b>' }}", NULL,
        "<a>&lt;b&gt;|&lt;b&gt;<a>|<a><b>");
    OUT("{{ '<x> & \"\\'' |e }} {{ ('<x>'|safe)|e }} {{ '<x>'|forceescape }}", NULL,
        "&lt;x&gt; &amp; &#34;&#39; <x> &lt;x&gt;");
    OUT("{{ ['x'|safe] }} {{ ('a'|safe) is escaped }} {{ 'a' is escaped }}", NULL,
        "[Markup('x')] True False");
    OUT("{{ ('<a>'|safe).replace('<', '[') }}|{{ ('a<b'|safe).replace('<', '[') }}", NULL,
        "<a>|a<b"); /* Markup.replace escapes its arguments: '<' becomes '&lt;' */
    OUT("{{ ('x'|safe|upper) + '&' }} {{ (('x'|safe)|replace('x', 'y')) + '&' }}", NULL,
        "X&amp; y&");
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_undefined_semantics),
    RS_TEST(test_missing_key_is_undefined_none_is_not),
    RS_TEST(test_json_input_as_python),
    RS_TEST(test_arithmetic_as_python),
    RS_TEST(test_comparisons_across_types),
    RS_TEST(test_in_operator),
    RS_TEST(test_str_and_repr),
    RS_TEST(test_slicing_and_indexing),
    RS_TEST(test_attribute_versus_item),
    RS_TEST(test_markup_escapes_what_is_added),
};
RS_TEST_MAIN(cases)

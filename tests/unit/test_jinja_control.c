/* SPDX-License-Identifier: MIT */
/*
 * The chat-template renderer's statements and scoping against Jinja2 3.1:
 * loop variables (index, revindex, first, last, length, previtem, nextitem,
 * cycle, changed, depth in recursive loops), for-else, the inline if filter,
 * break/continue, tuple unpacking, a plain set inside a loop not outliving its
 * iteration while namespace attributes do, macros (defaults, missing and
 * extra arguments, varargs/kwargs, caller, reading their definition scope
 * live), set/filter/with blocks; and the bounds: a runaway loop, runaway
 * recursion, oversized output or memory each stop with a clear error, and
 * renders of one compiled template from several threads agree.
 */
#include <pthread.h>

#include "tests/unit/jinja_fixture.h"

static int test_loop_variables(void)
{
    OUT("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
        "{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
        NULL, "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|");
    OUT("{% for x in [1, 2, 3] %}{{ loop.previtem|default('-') }}{{ loop.nextitem|default('-') }} "
        "{% endfor %}",
        NULL, "-2 13 2- ");
    OUT("{% for x in range(4) %}{{ loop.cycle('a', 'b', 'c') }}{% endfor %}", NULL, "abca");
    OUT("{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}", NULL,
        "121");
    OUT("{% for x in [1] %}{{ loop.depth }}{{ loop.depth0 }}{% for y in [2] %}{{ loop.index }}"
        "{% endfor %}{{ loop.index }}{% endfor %}",
        NULL, "1011");
    OUT("{{ loop is defined }} {% for x in [1] %}{{ loop is defined }}{% endfor %}", NULL, "False True");
    return 0;
}

static int test_recursive_loop(void)
{
    const char *v = "{\"tree\": [{\"name\": \"a\", \"children\": [{\"name\": \"b\", \"children\": "
                    "[{\"name\": \"c\"}]}]}, {\"name\": \"d\"}]}";
    OUT("{% for n in tree recursive %}{{ n.name }}{{ loop.depth }}{% if n.children %}[{{ loop(n.children) }}]"
        "{% endif %}{% endfor %}",
        v, "a1[b2[c3]]d1");
    ERR("{% for n in [1] %}{{ loop([1]) }}{% endfor %}", NULL, TYPE);
    return 0;
}

static int test_for_else_filter_break_continue(void)
{
    OUT("{% for x in [] %}x{% else %}none{% endfor %} {% for x in [1] %}{{ x }}{% else %}none{% endfor %}",
        NULL, "none 1");
    OUT("{% for x in range(6) if x is odd %}{{ x }}{{ loop.index }}{{ loop.length }},{% endfor %}", NULL,
        "113,323,533,");
    OUT("{% for x in [1, 2] if x > 5 %}x{% else %}filtered{% endfor %}", NULL, "filtered");
    OUT("{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}{% continue %}"
        "{% endif %}{{ x }}{% endfor %}",
        NULL, "02");
    OUT("{% for x in [1, 2] %}{% for y in [1, 2] %}{% if y == 2 %}{% break %}{% endif %}{{ x }}{{ y }}"
        "{% endfor %}{% endfor %}",
        NULL, "1121");
    OUT("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %} {% for k, v in {'x': 1}.items() %}"
        "{{ k }}{{ v }}{% endfor %} {% for a, (b, c) in [[1, [2, 3]]] %}{{ a }}{{ b }}{{ c }}{% endfor %}",
        NULL, "37 x1 123");
    OUT("{% for a, b in ['xy'] %}{{ b }}{{ a }}{% endfor %}", NULL, "yx");
    ERR("{% for a, b in [[1]] %}{% endfor %}", NULL, VALUE);
    ERR("{% for a, b in [[1, 2, 3]] %}{% endfor %}", NULL, VALUE);
    ERR("{% for x in 5 %}{% endfor %}", NULL, TYPE);
    return 0;
}

static int test_set_in_loop_does_not_outlive_iteration(void)
{
    OUT("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + 10 %}{{ x }}{% endfor %}{{ x }}", NULL,
        "11111");
    OUT("{% for i in [1, 2] %}{% if loop.first %}{% set y = 'first' %}{% endif %}[{{ y }}]{% endfor %}",
        NULL, "[first][]");
    OUT("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + 10 %}{% endfor %}{{ ns.x }}",
        NULL, "21");
    OUT("{% if true %}{% set y = 5 %}{% endif %}{{ y }}", NULL, "5");
    OUT("{% set a, b = 1, 2 %}{{ b }}{{ a }} {% set t = 1, 2 %}{{ t }}", NULL, "21 (1, 2)");
    const char *v = "{\"messages\": [{\"role\": \"user\"}]}";
    OUT("{% set messages = messages + [{'role': 'x'}] %}{{ messages|length }}", v, "2");
    ERR_AT("{% set d = {} %}{% set d.x = 1 %}", NULL, RUNTIME, 1, 24, "non-namespace");
    ERR("{% set d = {} %}{% set d.x = undefined_thing.y %}", NULL, RUNTIME); /* target checked first */
    ERR("{% set ns = namespace() %}{% set ns.x = undefined_thing.y %}", NULL, UNDEFINED);
    return 0;
}

static int test_macros(void)
{
    OUT("{% macro m(a, b='B', c=none) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }}|{{ m(1, 2, 3) }}|"
        "{{ m(1, c='C') }}|{{ m(b=2, a=1) }}",
        NULL, "1BNone|123|1BC|12None");
    OUT("{% macro m(a) %}[{{ a }}]{{ a is defined }}{% endmacro %}{{ m() }}", NULL, "[]False");
    OUT("{% macro m(a, b=a ~ '!') %}{{ b }}{% endmacro %}{{ m('x') }}", NULL, "x!");
    OUT("{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}", NULL, "(1, 2){'k': 3}");
    ERR("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", NULL, TYPE);
    ERR("{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", NULL, TYPE);
    OUT("{% macro m() %}{{ v }}{% endmacro %}{% set v = 1 %}{{ m() }}{% set v = 2 %}{{ m() }}", NULL, "12");
    OUT("{% macro m() %}[{{ i }}]{% endmacro %}{% for i in [1] %}{{ m() }}{% endfor %}", NULL, "[]");
    OUT("{% macro m() %}{% set z = 1 %}{% endmacro %}{{ m() }}{{ z is defined }}", NULL, "False");
    OUT("{% macro f(n) %}{% if n <= 1 %}1{% else %}{{ n * f(n - 1)|int }}{% endif %}{% endmacro %}{{ f(5) }}",
        NULL, "120");
    OUT("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}x{% endcall %}", NULL, "<x>");
    OUT("{% macro w() %}{{ caller(1) }}{{ caller(2) }}{% endmacro %}{% call(n) w() %}[{{ n }}]{% endcall %}",
        NULL, "[1][2]");
    OUT("{% macro m() %}x{% endmacro %}{{ m }} {{ m is callable }} {{ m.name }}", NULL,
        "<Macro 'm'> True m");
    ERR("{{ m() }}{% macro m() %}{% endmacro %}", NULL, UNDEFINED); /* defined where it stands */
    return 0;
}

static int test_blocks(void)
{
    OUT("{% set s %}a{{ 1 }}b{% endset %}{{ s|length }}{{ s }}", NULL, "3a1b");
    OUT("{% set s | upper | trim %} ab {% endset %}[{{ s }}]", NULL, "[AB]");
    OUT("{% set ns = namespace() %}{% set ns.s %}x{% endset %}{{ ns.s }}", NULL, "x");
    OUT("{% filter upper %}ab{{ 'c' }}{% endfilter %}", NULL, "ABC");
    OUT("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a is defined }}", NULL, "3False");
    OUT("{% set a = 5 %}{% with a = a + 1, b = a %}{{ a }}{{ b }}{% endwith %}{{ a }}", NULL, "655");
    OUT("{% generation %}x{% set g = 1 %}{% endgeneration %}{{ g is defined }}", NULL, "xFalse");
    OUT("{% print 'hi' %}", NULL, "hi");
    return 0;
}

static int test_runaway_loop_is_stopped(void)
{
    struct rs_jinja_limits lim = {.max_steps = 1000000};
    struct jt_result r;
    jt_run_lim("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", NULL,
               &lim, &r);
    RS_CHECK(r.rc == RS_ERANGE && r.err.kind == RS_JINJA_ERR_LIMIT);
    RS_CHECK(strstr(r.err.msg, "steps") != NULL && r.err.line == 1);
    jt_free(&r);
    /* with the default bound too (20 million) */
    jt_run("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", NULL, &r);
    RS_CHECK(r.rc == RS_ERANGE && r.err.kind == RS_JINJA_ERR_LIMIT);
    jt_free(&r);
    return 0;
}

static int test_runaway_recursion_is_stopped(void)
{
    struct jt_result r;
    jt_run("\n{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, &r);
    RS_CHECK(r.rc == RS_ERANGE && r.err.kind == RS_JINJA_ERR_LIMIT);
    RS_CHECK(strstr(r.err.msg, "macro calls nested") != NULL && r.err.line == 2);
    jt_free(&r);
    const char *v = "{\"t\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}";
    struct rs_jinja_limits lim = {.max_depth = 10};
    jt_run_lim("{% for x in t recursive %}{% if x is iterable %}{{ loop(x) }}{% else %}{{ x }}{% endif %}"
               "{% endfor %}",
               v, &lim, &r);
    RS_CHECK(r.rc == RS_ERANGE && r.err.kind == RS_JINJA_ERR_LIMIT);
    jt_free(&r);
    OUT("{% for x in t recursive %}{% if x is iterable %}{{ loop(x) }}{% else %}{{ x }}{% endif %}{% endfor %}",
        v, "1");
    return 0;
}

static int test_output_and_memory_are_bounded(void)
{
    struct rs_jinja_limits lim = {.max_output = 1000};
    struct jt_result r;
    jt_run_lim("{% for i in range(100000) %}xxxxxxxxxx{% endfor %}", NULL, &lim, &r);
    RS_CHECK(r.rc == RS_ERANGE && r.err.kind == RS_JINJA_ERR_LIMIT && r.out == NULL);
    jt_free(&r);
    jt_run("{{ 'x' * 100000000000 }}", NULL, &r);
    RS_CHECK(r.rc == RS_ERANGE && r.err.kind == RS_JINJA_ERR_LIMIT);
    jt_free(&r);
    lim = (struct rs_jinja_limits){.max_memory = 8u << 20};
    jt_run_lim("{% set ns = namespace(l=[]) %}{% for i in range(50000) %}{% set ns.l = ns.l + [i] %}"
               "{% endfor %}",
               NULL, &lim, &r);
    RS_CHECK(r.rc == RS_ERANGE && r.err.kind == RS_JINJA_ERR_LIMIT);
    RS_CHECK(strstr(r.err.msg, "memory") != NULL);
    jt_free(&r);
    jt_run("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
           NULL, &r);
    RS_CHECK(r.rc == RS_ERANGE && r.err.kind == RS_JINJA_ERR_LIMIT);
    jt_free(&r);
    return 0;
}

/* Work that produces no output and allocates nothing is bounded by the step budget too. */
static int test_silent_work_is_bounded(void)
{
    OUT("{{ 3 ** 20 * () }}|{{ '' * 100000000000 }}|{{ [] * 3 ** 20 }}", NULL, "()||[]");
    struct jt_result r;
    struct rs_jinja_limits lim = {.max_steps = 2000000};
    jt_run_lim("{% set big = range(100000)|list %}{% for i in range(100000) %}{% if -1 in big %}x{% endif %}"
           "{% endfor %}",
           NULL, &lim, &r);
    RS_CHECK(r.rc == RS_ERANGE && r.err.kind == RS_JINJA_ERR_LIMIT && strstr(r.err.msg, "steps"));
    jt_free(&r);
    jt_run_lim("{% set s = 'x' * 1000000 %}{% set t = 'x' * 1000000 %}{% for i in range(100000) %}"
           "{% if s|length < 5 %}x{% endif %}{% if s == t %}{% endif %}{% endfor %}",
           NULL, &lim, &r);
    RS_CHECK(r.rc == RS_ERANGE && r.err.kind == RS_JINJA_ERR_LIMIT && strstr(r.err.msg, "steps"));
    jt_free(&r);
    return 0;
}

static int test_stats_report_what_a_render_used(void)
{
    const char *src = "{% for m in messages %}{{ m.content ~ '!' }}{% endfor %}";
    rs_jinja *t;
    RS_CHECK(rs_jinja_compile(src, strlen(src), &t, NULL) == RS_OK);
    json_error_t je;
    json_t *msgs = json_loads("[{\"content\": \"a\"}, {\"content\": \"b\"}]", 0, &je);
    struct rs_jinja_stats s = {0};
    struct rs_jinja_ctx ctx = {.messages = msgs, .stats = &s};
    char *out;
    size_t n;
    RS_CHECK(rs_jinja_render(t, &ctx, &out, &n, NULL) == RS_OK && n == 4 && !memcmp(out, "a!b!", 4));
    RS_CHECK(s.output == 4 && s.steps >= 8 && s.steps < 100 && s.memory > 0);
    free(out);
    struct rs_jinja_limits lim = {.max_steps = 5};
    ctx.limits = &lim;
    RS_CHECK(rs_jinja_render(t, &ctx, &out, &n, NULL) == RS_ERANGE && s.output == 0 && s.steps > 5);
    json_decref(msgs);
    rs_jinja_destroy(&t);
    return 0;
}

static int test_context_errors(void)
{
    rs_jinja *t;
    struct rs_jinja_error err = {0};
    const char *src = "{{ messages|length }}";
    RS_CHECK(rs_jinja_compile(src, strlen(src), &t, &err) == RS_OK);
    json_t *obj = json_object(), *arr = json_array(), *vars = json_pack("{s:i}", "tools", 1);
    char *out;
    size_t n;
    struct rs_jinja_ctx ctx = {.messages = obj};
    RS_CHECK(rs_jinja_render(t, &ctx, &out, &n, &err) == RS_EINVAL && err.kind == RS_JINJA_ERR_INPUT);
    ctx = (struct rs_jinja_ctx){.messages = arr, .vars = vars};
    RS_CHECK(rs_jinja_render(t, &ctx, &out, &n, &err) == RS_EINVAL && err.kind == RS_JINJA_ERR_INPUT);
    RS_CHECK(strstr(err.msg, "tools") != NULL);
    ctx = (struct rs_jinja_ctx){.messages = arr, .bos_token = "\xff"};
    RS_CHECK(rs_jinja_render(t, &ctx, &out, &n, &err) == RS_EINVAL && err.kind == RS_JINJA_ERR_INPUT);
    ctx = (struct rs_jinja_ctx){.messages = arr};
    RS_CHECK(rs_jinja_render(t, &ctx, &out, &n, &err) == RS_OK && n == 1 && out[0] == '0');
    RS_CHECK(err.msg == NULL);
    free(out);
    rs_jinja_error_fini(&err);
    json_decref(obj);
    json_decref(arr);
    json_decref(vars);
    rs_jinja_destroy(&t);
    rs_jinja_destroy(&t); /* clears the pointer: a second destroy is a no-op */
    return 0;
}

struct thread_job {
    const rs_jinja *t;
    const json_t *msgs;
    char *out;
    size_t n;
    int rounds;
    int failed;
};

static void *render_thread(void *arg)
{
    struct thread_job *j = arg;
    for (int i = 0; i < j->rounds; i++) {
        struct rs_jinja_ctx ctx = {.messages = j->msgs, .add_generation_prompt = 1};
        char *out;
        size_t n;
        if (rs_jinja_render(j->t, &ctx, &out, &n, NULL) != RS_OK) {
            j->failed = 1;
            return NULL;
        }
        if (!j->out) {
            j->out = out;
            j->n = n;
        } else {
            j->failed |= n != j->n || memcmp(out, j->out, n) != 0;
            free(out);
        }
    }
    return NULL;
}

static int test_one_template_many_threads(void)
{
    const char *src = "{%- set ns = namespace(n=0) -%}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                      "<|{{ m.role }}|>{{ m.content|trim }}{{ loop.index }}/{{ ns.n }}\n{% endfor %}"
                      "{% if add_generation_prompt %}<|assistant|>{% endif %}";
    rs_jinja *t;
    RS_CHECK(rs_jinja_compile(src, strlen(src), &t, NULL) == RS_OK);
    json_error_t je;
    json_t *msgs = json_loads("[{\"role\": \"user\", \"content\": \" hi \"}, {\"role\": \"assistant\", "
                              "\"content\": \"yo\"}]",
                              0, &je);
    struct thread_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct thread_job){.t = t, .msgs = msgs, .rounds = 200};
        RS_CHECK(pthread_create(&th[i], NULL, render_thread, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    const char *want = "<|user|>hi1/1\n<|assistant|>yo2/2\n<|assistant|>";
    for (int i = 0; i < 4; i++) {
        RS_CHECK(!jobs[i].failed && jobs[i].n == strlen(want) && !memcmp(jobs[i].out, want, jobs[i].n));
        free(jobs[i].out);
    }
    json_decref(msgs);
    rs_jinja_destroy(&t);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_loop_variables),
    RS_TEST(test_recursive_loop),
    RS_TEST(test_for_else_filter_break_continue),
    RS_TEST(test_set_in_loop_does_not_outlive_iteration),
    RS_TEST(test_macros),
    RS_TEST(test_blocks),
    RS_TEST(test_runaway_loop_is_stopped),
    RS_TEST(test_runaway_recursion_is_stopped),
    RS_TEST(test_output_and_memory_are_bounded),
    RS_TEST(test_silent_work_is_bounded),
    RS_TEST(test_stats_report_what_a_render_used),
    RS_TEST(test_context_errors),
    RS_TEST(test_one_template_many_threads),
};
RS_TEST_MAIN(cases)

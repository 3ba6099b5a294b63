/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target over what a client controls when it sends a chat: the
 * conversation JSON. Byte 0 picks a template (every real template of
 * ../shared/refdata/chat-templates when present, else the built-in ones
 * below) and add_generation_prompt; the rest is JSON ({messages, tools,
 * documents, vars} or a bare messages array) rendered with it. Checks: no
 * crash, leak or sanitizer report; output valid UTF-8; failures carry a kind
 * and a message; malformed context (messages not an array, reserved or
 * non-object vars) is an input error, never a render of something else.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jinja.h"
#include "common/utf8.h"

#define MAX_TEMPLATES 128

static rs_jinja *templates[MAX_TEMPLATES];
static unsigned n_templates;

static const char *const builtin[] = {
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content|trim }}{% if m.tool_calls %}"
    "{{ m.tool_calls|tojson }}{% endif %}\n{% endfor %}{% if add_generation_prompt %}<|a|>{% endif %}",
    "{%- if tools %}{{ tools|tojson(indent=2) }}{% endif %}{% for m in messages %}"
    "{% if m.content is string %}{{ m.content.split('</think>')[-1].lstrip() }}"
    "{% elif m.content is iterable %}{% for c in m.content %}{{ c.text|default('') }}{% endfor %}"
    "{% endif %}{% endfor %}",
    "{% set ns = namespace(sys='') %}{% for m in messages|selectattr('role', 'equalto', 'system') %}"
    "{% set ns.sys = ns.sys ~ m.content %}{% endfor %}{{ ns.sys }}{% for m in messages|"
    "rejectattr('role', 'equalto', 'system') %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('roles must alternate') }}{% endif %}[{{ m.role|upper }}] {{ m['content'] }}"
    "{% endfor %}",
};

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_jinja_context: %s\n", what);
        __builtin_trap();
    }
}

static void add_template(const char *src, size_t len)
{
    rs_jinja *t;
    if (n_templates < MAX_TEMPLATES && rs_jinja_compile(src, len, &t, NULL) == RS_OK)
        templates[n_templates++] = t;
}

static void load_refdata(void)
{
    const char *root = getenv("RS_REFDATA");
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/chat-templates/templates",
             root && *root ? root : RS_SOURCE_DIR "/../shared/refdata");
    DIR *d = opendir(dir);
    if (!d)
        return;
    char *names[MAX_TEMPLATES];
    unsigned k = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && k < MAX_TEMPLATES;)
        if (strstr(e->d_name, ".jinja"))
            names[k++] = strdup(e->d_name);
    closedir(d);
    /* a fixed order, so a given input always meets the same template */
    for (unsigned i = 1; i < k; i++)
        for (unsigned j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *x = names[j];
            names[j] = names[j - 1];
            names[j - 1] = x;
        }
    for (unsigned i = 0; i < k; i++) {
        char path[1400];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        if (f) {
            static char buf[1 << 20];
            size_t n = fread(buf, 1, sizeof(buf), f);
            fclose(f);
            add_template(buf, n);
        }
        free(names[i]);
    }
}

static void init(void)
{
    if (n_templates)
        return;
    load_refdata();
    for (size_t i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++)
        add_template(builtin[i], strlen(builtin[i]));
    check(n_templates > 0, "no template compiled");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init();
    if (size < 1)
        return 0;
    const rs_jinja *t = templates[data[0] % n_templates];
    json_error_t je;
    json_t *j = json_loadb((const char *)data + 1, size - 1, JSON_ALLOW_NUL, &je);
    if (!j)
        return 0;
    int bare = json_is_array(j);
    struct tm date = {.tm_year = 126, .tm_mon = 0, .tm_mday = 15, .tm_wday = 4, .tm_yday = 14};
    struct rs_jinja_limits lim = {.max_steps = 500000, .max_output = 1u << 20,
                                  .max_memory = 64u << 20, .max_depth = 40};
    struct rs_jinja_ctx ctx = {
        .messages = bare ? j : json_object_get(j, "messages"),
        .tools = bare ? NULL : json_object_get(j, "tools"),
        .documents = bare ? NULL : json_object_get(j, "documents"),
        .vars = bare ? NULL : json_object_get(j, "vars"),
        .add_generation_prompt = (data[0] >> 7) & 1,
        .bos_token = "<s>",
        .eos_token = "</s>",
        .now = &date,
        .limits = &lim,
    };
    char *out = NULL;
    size_t n;
    struct rs_jinja_error err = {0};
    rs_err rc = rs_jinja_render(t, &ctx, &out, &n, &err);
    if (!ctx.messages || !json_is_array(ctx.messages))
        check(rc == RS_EINVAL && err.kind == RS_JINJA_ERR_INPUT, "messages not an array accepted");
    if (rc == RS_OK)
        check(rs_utf8_valid(out, n), "output is not valid UTF-8");
    else
        check(out == NULL && err.kind != RS_JINJA_ERR_NONE && err.msg != NULL,
              "render error without kind or message");
    free(out);
    rs_jinja_error_fini(&err);
    json_decref(j);
    return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * The one way ringserve writes JSON: values built with Debian's jansson and
 * written by it, so escaping, UTF-8 and number formatting are the same in
 * every tool (ringserve-stat --json, ringserve-cli --json, benches). Two
 * functions cover what jansson does not: text that may not be valid UTF-8
 * (a model path, another process's bytes) becomes a string with each
 * ill-formed part replaced by U+FFFD instead of being refused, and unsigned
 * 64-bit values past jansson's signed integers are written exactly, as a
 * decimal string. Leaves out reading JSON (each reader uses jansson itself).
 */
#ifndef RS_JSON_H
#define RS_JSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A JSON string of s[0..n): valid UTF-8 as is, ill-formed parts as U+FFFD. NULL on OOM. */
json_t *rs_json_text(const char *s, size_t n);

/* The same for a NUL-terminated s (NULL: ""). */
json_t *rs_json_cstr(const char *s);

/*
 * v as a JSON integer, or, above INT64_MAX (jansson's integers are signed),
 * as a string of its decimal digits, so no value is changed. NULL on OOM.
 */
json_t *rs_json_u64(uint64_t v);

/* A real rounded to `decimals` places (so 12.3 is written 12.3); NaN/inf as null. */
json_t *rs_json_real(double v, int decimals);

/* A float as the shortest decimal that reads back as the same float (9 digits); NaN/inf null. */
json_t *rs_json_float(float v);

/*
 * Sets key of object o to v, taking v (NULL is an error). Returns 0 or -1;
 * for building objects in one expression chain.
 */
int rs_json_set(json_t *o, const char *key, json_t *v);

/*
 * Writes v to f on one line, then a newline, keys in insertion order, and
 * releases v. Returns 0, or -1 on a write error (or v NULL).
 */
int rs_json_print(FILE *f, json_t *v);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * The JSON writer (json.h) over jansson. Reals are printed with 15
 * significant digits after rounding, which writes the decimal the caller
 * meant (12.3, not 12.300000000000001) and keeps every figure a tool shows.
 */
#include "common/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

json_t *rs_json_text(const char *s, size_t n)
{
    if (rs_utf8_valid(s, n))
        return json_stringn(s, n);
    char *clean = malloc(3 * n + 1);
    if (clean == NULL)
        return NULL;
    json_t *v = json_stringn(clean, rs_utf8_sanitize(s, n, clean));
    free(clean);
    return v;
}

json_t *rs_json_cstr(const char *s)
{
    return s != NULL ? rs_json_text(s, strlen(s)) : json_string("");
}

json_t *rs_json_u64(uint64_t v)
{
    if (v <= (uint64_t)INT64_MAX)
        return json_integer((json_int_t)v);
    char digits[24];
    snprintf(digits, sizeof(digits), "%llu", (unsigned long long)v);
    return json_string(digits);
}

json_t *rs_json_real(double v, int decimals)
{
    if (!isfinite(v))
        return json_null();
    double scale = pow(10.0, decimals);
    return json_real(round(v * scale) / scale);
}

json_t *rs_json_float(float v)
{
    if (!isfinite(v))
        return json_null();
    char digits[32];
    snprintf(digits, sizeof(digits), "%.9g", (double)v);
    return json_real(strtod(digits, NULL));
}

int rs_json_set(json_t *o, const char *key, json_t *v)
{
    return v != NULL && json_object_set_new(o, key, v) == 0 ? 0 : -1;
}

int rs_json_print(FILE *f, json_t *v)
{
    int rc = v != NULL ? json_dumpf(v, f, JSON_COMPACT | JSON_PRESERVE_ORDER |
                                              JSON_REAL_PRECISION(15))
                       : -1;
    json_decref(v);
    if (rc == 0 && fputc('\n', f) == EOF)
        rc = -1;
    return rc == 0 && !ferror(f) ? 0 : -1;
}

/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target over the GGUF reader: opens the input from memory and, when
 * it is accepted, walks everything a loader would touch (every key through the
 * typed getters, every array element, every tensor's first and last byte), so
 * ASan catches any read the validation let through. Seeds in corpus/gguf/ are
 * tiny models and a vocab-only file made by ringserve-mkmodel.
 */
#include <stdint.h>
#include <string.h>

#include "common/gguf.h"

static void walk_array(const rs_gguf *g, uint64_t idx, const char *key)
{
    enum rs_gguf_type et;
    uint64_t n;
    if (rs_gguf_get_arr(g, key, &et, &n) != RS_OK)
        return;
    /* First and last few elements: enough to hit both ends of the data. */
    for (uint64_t j = 0; j < 6 && j < n; j++) {
        uint64_t i = j < 3 ? j : n - (6 - j);
        double d;
        int64_t v;
        struct rs_gguf_str s;
        if (et == RS_GGUF_STRING) {
            s = rs_gguf_arr_str_at(g, idx, i);
            if (s.len > 0)
                (void)*(volatile const char *)&s.ptr[s.len - 1];
            (void)rs_gguf_arr_str(g, key, i, &s);
        } else {
            (void)rs_gguf_arr_f64(g, key, i, &d);
            (void)rs_gguf_arr_i64(g, key, i, &v);
        }
    }
}

static void walk_kv(const rs_gguf *g, uint64_t i)
{
    char key[256];
    struct rs_gguf_str k = rs_gguf_kv_key(g, i);
    size_t n = k.len < sizeof(key) - 1 ? (size_t)k.len : sizeof(key) - 1;
    memcpy(key, k.ptr, n);
    key[n] = '\0';
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f;
    int b;
    struct rs_gguf_str s;
    (void)rs_gguf_get_u32(g, key, &u32);
    (void)rs_gguf_get_i32(g, key, &i32);
    (void)rs_gguf_get_u64(g, key, &u64);
    (void)rs_gguf_get_f32(g, key, &f);
    (void)rs_gguf_get_bool(g, key, &b);
    if (rs_gguf_get_str(g, key, &s) == RS_OK && s.len > 0)
        (void)*(volatile const char *)&s.ptr[s.len - 1];
    const void *raw;
    uint64_t len;
    if (rs_gguf_kv_raw(g, i, &raw, &len) == RS_OK && len > 0)
        (void)*((volatile const uint8_t *)raw + len - 1);
    if (rs_gguf_kv_type(g, i) == RS_GGUF_ARRAY)
        walk_array(g, i, key);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    rs_gguf *g;
    if (rs_gguf_open_mem(data, size, &g, err, sizeof(err)) != RS_OK)
        return 0;
    for (uint64_t i = 0; i < rs_gguf_n_kv(g); i++)
        walk_kv(g, i);
    for (uint64_t i = 0; i < rs_gguf_n_tensors(g); i++) {
        const struct rs_gguf_tensor *t = rs_gguf_tensor(g, i);
        const volatile uint8_t *p = t->data;
        (void)p[0];
        (void)p[t->nbytes - 1];
        if (rs_gguf_find_tensor(g, t->name) < 0)
            __builtin_trap(); /* every listed tensor must be findable by name */
    }
    rs_gguf_close(&g);
    return 0;
}

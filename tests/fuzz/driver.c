/* SPDX-License-Identifier: MIT */
/*
 * Portable stand-in for libFuzzer when the compiler is not clang: feeds every
 * file of the corpus directory to LLVMFuzzerTestOneInput, then that many
 * deterministic mutations (bit flips, truncations, byte splices) of them.
 * Usage: fuzz_<name> ITERATIONS CORPUS_DIR. Finds crashes only through the
 * sanitizers or a fault; the clang build runs the real coverage-guided fuzzer.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_INPUTS 4096
#define MAX_INPUT_BYTES (1u << 20)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static size_t load_corpus(const char *dir, uint8_t **inputs, size_t *sizes)
{
    DIR *d = opendir(dir);
    size_t n = 0;
    if (d == NULL)
        return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && n < MAX_INPUTS;) {
        char path[4096];
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (f == NULL)
            continue;
        uint8_t *buf = malloc(MAX_INPUT_BYTES);
        size_t len = buf ? fread(buf, 1, MAX_INPUT_BYTES, f) : 0;
        fclose(f);
        if (buf == NULL)
            continue;
        inputs[n] = buf;
        sizes[n++] = len;
    }
    closedir(d);
    return n;
}

static size_t mutate(uint8_t *dst, const uint8_t *src, size_t len)
{
    memcpy(dst, src, len);
    switch (rng_next() % 4) {
    case 0: /* flip a few bits */
        for (int i = 0; i < 4 && len > 0; i++)
            dst[rng_next() % len] ^= (uint8_t)(1u << (rng_next() % 8));
        return len;
    case 1: /* truncate */
        return len ? rng_next() % len : 0;
    case 2: /* overwrite a byte with an extreme value */
        if (len > 0)
            dst[rng_next() % len] = (rng_next() & 1) ? 0xff : 0x00;
        return len;
    default: /* random bytes */
        for (size_t i = 0; i < len && i < 64; i++)
            dst[rng_next() % len] = (uint8_t)rng_next();
        return len;
    }
}

int main(int argc, char **argv)
{
    static uint8_t *inputs[MAX_INPUTS];
    static size_t sizes[MAX_INPUTS];
    if (argc != 3) {
        fprintf(stderr, "usage: %s ITERATIONS CORPUS_DIR\n", argv[0]);
        return 2;
    }
    long iterations = strtol(argv[1], NULL, 10);
    size_t n = load_corpus(argv[2], inputs, sizes);
    if (n == 0) {
        fprintf(stderr, "%s: empty or missing corpus %s\n", argv[0], argv[2]);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        LLVMFuzzerTestOneInput(inputs[i], sizes[i]);
    uint8_t *scratch = malloc(MAX_INPUT_BYTES);
    if (scratch == NULL)
        return 1;
    for (long it = 0; it < iterations; it++) {
        size_t pick = rng_next() % n;
        size_t len = mutate(scratch, inputs[pick], sizes[pick]);
        uint8_t *copy = malloc(len ? len : 1); /* exact size so ASan sees overreads */
        memcpy(copy, scratch, len);
        LLVMFuzzerTestOneInput(copy, len);
        free(copy);
    }
    printf("%s: %zu corpus files, %ld mutations, no crash\n", argv[0], n, iterations);
    free(scratch);
    for (size_t i = 0; i < n; i++)
        free(inputs[i]);
    return 0;
}

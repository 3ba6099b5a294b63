/* SPDX-License-Identifier: MIT */
/*
 * Weight-type conversions shared by the model tools and the engine's non-hot
 * paths (embedding row lookup, conversion): F32 <-> F16 and BF16 (scalar and
 * row), and Q8_0 row quantize/dequantize in ggml's exact block layout, so the
 * files we write load in llama.cpp and theirs load here. All conversions are
 * bit-exact and deterministic: F16 and BF16 round to nearest, ties to even;
 * row converters use F16C when the CPU has it, and SSE2 for BF16 and Q8_0
 * rows (same bits as the scalar definitions). Q4_0, Q4_K, Q5_K and Q6_K
 * (what users download most) are here too, so tools can write them; their kernels
 * are the engine's. Leaves out: the other K-quants and ggml block types, and the SIMD dot
 * products (those belong to the engine's kernels).
 */
#ifndef RS_QUANT_H
#define RS_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/gguf.h"

/* Values per Q8_0 block, and bytes per block (fp16 scale + 32 int8). */
#define RS_QUANT_Q8_0_BLOCK 32
#define RS_QUANT_Q8_0_BYTES 34

/*
 * One Q8_0 block exactly as ggml stores it (block_q8_0): value j of the block
 * is fp16(d) * qs[j]. 34 bytes, 2-byte aligned; blocks follow each other with
 * no padding, so a row of n values is n / 32 consecutive blocks.
 */
struct rs_quant_block_q8_0 {
    uint16_t d;     /* scale, IEEE half: amax / 127 of the 32 source values */
    int8_t qs[RS_QUANT_Q8_0_BLOCK];
};

/*
 * F32 -> IEEE half, round to nearest even. Values beyond the half range
 * become +-inf, values below half the smallest subnormal become +-0, NaN stays
 * a quiet NaN (sign and top payload bits kept). Pure; any thread.
 */
uint16_t rs_quant_f16_from_f32(float x);

/* IEEE half -> F32; exact for every half value (subnormals, inf, NaN). */
float rs_quant_f16_to_f32(uint16_t h);

/*
 * F32 -> bfloat16 (the top 16 bits of an F32), round to nearest even, with
 * F32 subnormals kept (no flush to zero); NaN stays a quiet NaN. Pure.
 */
uint16_t rs_quant_bf16_from_f32(float x);

/* bfloat16 -> F32; exact. */
float rs_quant_bf16_to_f32(uint16_t h);

/*
 * Row converters: n values from src to dst (no overlap). Same bits as the
 * scalar functions above for every input; F16 rows use the F16C instructions
 * when the CPU has them. Any thread.
 */
void rs_quant_row_f32_to_f16(const float *src, uint16_t *dst, size_t n);
void rs_quant_row_f16_to_f32(const uint16_t *src, float *dst, size_t n);
void rs_quant_row_f32_to_bf16(const float *src, uint16_t *dst, size_t n);
void rs_quant_row_bf16_to_f32(const uint16_t *src, float *dst, size_t n);

/*
 * Quantizes n values (a multiple of 32) into n / 32 Q8_0 blocks at dst
 * (n / 32 * 34 bytes, any 2-byte alignment), as ggml's reference quantizer
 * does: per block d = amax / 127, qs[j] = roundf(x[j] / d) (computed as
 * x[j] * (1 / d); half-way values round away from zero). Non-finite inputs give
 * a defined but meaningless block (the quotient is clamped to +-127; NaN
 * becomes -127), never undefined behaviour.
 */
void rs_quant_row_q8_0_quantize(const float *src, void *dst, size_t n);

/* Dequantizes n / 32 Q8_0 blocks (n a multiple of 32) into n floats. */
void rs_quant_row_q8_0_dequantize(const void *src, float *dst, size_t n);

/* Values per Q4_0 block, and bytes per block (fp16 scale + 16 bytes of nibbles). */
#define RS_QUANT_Q4_0_BLOCK 32
#define RS_QUANT_Q4_0_BYTES 18

/*
 * Quantizes n values (a multiple of 32) into n / 32 Q4_0 blocks at dst
 * (ggml's block_q4_0: fp16 d, then byte j holds value j in its low nibble and
 * value 16 + j in its high nibble; value = d * (nibble - 8)), as ggml's
 * reference quantizer does: the block's value of largest magnitude (the first
 * of equals) is `max`, d = max / -8, nibble = min(15, trunc(x * (1 / d) + 8.5)).
 * So `max` is kept exactly and the others are rounded half up to a multiple of
 * d; values near -max on the other side can be off by up to |d|. Non-finite
 * input gives a defined but meaningless block, never undefined behaviour.
 */
void rs_quant_row_q4_0_quantize(const float *src, void *dst, size_t n);

/* Dequantizes n / 32 Q4_0 blocks (n a multiple of 32) into n floats; exact products. */
void rs_quant_row_q4_0_dequantize(const void *src, float *dst, size_t n);

/* Values per Q4_K super-block, and bytes per block (fp16 d, fp16 dmin, 12 scale bytes,
 * 128 bytes of nibbles). */
#define RS_QUANT_Q4_K_BLOCK 256
#define RS_QUANT_Q4_K_BYTES 144

/*
 * Quantizes n values (a multiple of 256) into ggml's block_q4_K: 8 sub-blocks
 * of 32, value = d * sc * l - dmin * m with l in 0..15 and 6-bit sc, m per
 * sub-block. Each sub-block's scale and offset come from ggml's reference
 * search (a weighted least-squares fit over 21 candidate ranges, weights
 * rms + |x|), then the scales are quantized under the two fp16 super-scales
 * and every value re-leveled against what is stored. Not promised to be
 * byte-identical to ggml's output (float summation order may differ), but
 * the same format and algorithm: llama.cpp reads it. Non-finite input gives
 * a defined but meaningless block. Any thread.
 */
void rs_quant_row_q4_k_quantize(const float *src, void *dst, size_t n);

/* Dequantizes n / 256 Q4_K blocks into n floats: fl(d*sc * l - dmin*m), one rounding. */
void rs_quant_row_q4_k_dequantize(const void *src, float *dst, size_t n);

/* Values per Q5_K super-block, and bytes per block (Q4_K's header and scales, 32 bytes of
 * fifth bits, 128 bytes of nibbles). */
#define RS_QUANT_Q5_K_BLOCK 256
#define RS_QUANT_Q5_K_BYTES 176

/*
 * The 6-bit scale and min of sub-block j (0..7) from the 12 packed scale
 * bytes of a Q4_K or Q5_K block: bytes 0-3 hold sc0-3 and 4-7 hold m0-3 in
 * their low 6 bits, with the top 2 bits of sc4-7 / m4-7 above them; bytes
 * 8-11 hold the low nibbles of sc4-7 and, above, of m4-7. Inline: the
 * engine's kernels unpack it per 32 weights.
 */
static inline void rs_quant_k_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 15) | (s[j - 4] >> 6) << 4);
        *m = (uint8_t)((s[j + 4] >> 4) | (s[j] >> 6) << 4);
    }
}

/*
 * All 8 scales and mins of the same 12 bytes at once, for the SIMD unpackers:
 * (*sc >> 8j) & 0xFF and (*m >> 8j) & 0xFF are rs_quant_k_scale_min's sc and
 * m of block j (whole-word bit arithmetic instead of 8 byte-by-byte calls).
 */
static inline void rs_quant_k_scales8(const uint8_t *s, uint64_t *sc, uint64_t *m)
{
#define RS_QUANT_LE32(p) \
    ((uint32_t)(p)[0] | (uint32_t)(p)[1] << 8 | (uint32_t)(p)[2] << 16 | (uint32_t)(p)[3] << 24)
    const uint32_t u[3] = {RS_QUANT_LE32(s), RS_QUANT_LE32(s + 4), RS_QUANT_LE32(s + 8)};
#undef RS_QUANT_LE32
    uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 6) & 0x03030303u) << 4;
    uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 6) & 0x03030303u) << 4;
    *sc = (u[0] & 0x3f3f3f3fu) | (uint64_t)sc_hi << 32;
    *m = (u[1] & 0x3f3f3f3fu) | (uint64_t)m_hi << 32;
}

/*
 * Quantizes n values (a multiple of 256) into ggml's block_q5_K: as Q4_K with
 * levels 0..31 (the fifth bit of value i of 64-value chunk c, first or second
 * half, is bit 2c or 2c + 1 of high byte i % 32), fitted by ggml's search with
 * its Q5_K parameters (16 candidate ranges from -0.5 levels).
 */
void rs_quant_row_q5_k_quantize(const float *src, void *dst, size_t n);

/* Dequantizes n / 256 Q5_K blocks into n floats: fl(d*sc * l - dmin*m), one rounding. */
void rs_quant_row_q5_k_dequantize(const void *src, float *dst, size_t n);

/* Values per Q6_K super-block, and bytes per block (128 low-nibble bytes, 64 bytes of 2-bit
 * highs, 16 int8 scales, fp16 d). */
#define RS_QUANT_Q6_K_BLOCK 256
#define RS_QUANT_Q6_K_BYTES 210

/*
 * Quantizes n values (a multiple of 256) into ggml's block_q6_K: 16
 * sub-blocks of 16, value = d * sc * (l - 32) with l in 0..63 and int8 sc.
 * Each sub-block's scale comes from ggml's reference search (19 candidate
 * scales, weights x^2), the scales are stored as int8 under one fp16 d (the
 * largest in magnitude as -128), and every value is re-leveled against what is
 * stored. Same format and algorithm as ggml, not promised byte-identical.
 * Non-finite input gives a defined but meaningless block. Any thread.
 */
void rs_quant_row_q6_k_quantize(const float *src, void *dst, size_t n);

/* The 256 signed 6-bit levels (-32..31) of one Q6_K block, in value order (the integer dot
 * and the dequantizer both read a block through it). */
void rs_quant_q6_k_levels(const uint8_t *blk, int8_t q[RS_QUANT_Q6_K_BLOCK]);

/* Dequantizes n / 256 Q6_K blocks into n floats: (d * sc) * q, exact. */
void rs_quant_row_q6_k_dequantize(const void *src, float *dst, size_t n);

/*
 * One weight type as this project computes with it (as ggml's type_traits):
 * its block geometry and its row converters. The table in quant.c is the one
 * list of supported types; the engine's kernel table (launcherd/engine/
 * kernels.c) adds each type's kernel entry points beside it. block and bytes
 * equal common/gguf.h's rs_ggml_block_size / rs_ggml_type_size (the file
 * format's table, which also names types nothing here computes; a test pins
 * the two together).
 */
struct rs_quant_traits {
    enum rs_ggml_type type;
    const char *name;
    uint32_t block; /* values per block (1 for F32, F16, BF16) */
    uint32_t bytes; /* bytes per block */
    void (*to_f32)(const void *src, float *dst, size_t n);   /* n a multiple of block */
    void (*from_f32)(const float *src, void *dst, size_t n); /* n a multiple of block */
};

/* The traits of type t, or NULL when nothing here computes with it. Any thread. */
const struct rs_quant_traits *rs_quant_traits_of(enum rs_ggml_type t);

/* Entry i of the table (0, 1, ... until NULL), for tests and tools that list the types. */
const struct rs_quant_traits *rs_quant_traits_at(size_t i);

/* 1 when rs_quant_traits_of(t) is not NULL (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K). */
int rs_quant_supported(enum rs_ggml_type t);

/*
 * Converts a row of n values stored as `type` to F32. n must be a multiple
 * of the type's block size. Returns RS_OK, RS_EUNSUPPORTED for a type
 * rs_quant_supported rejects, RS_EINVAL when n is not a whole number of
 * blocks. src needs the alignment of its element type (2 bytes for the 16-bit
 * and block types); dst is n floats. Any thread.
 */
rs_err rs_quant_row_to_f32(enum rs_ggml_type type, const void *src, float *dst, uint64_t n);

/* The reverse: n F32 values to rs_ggml_row_bytes(type, n) bytes at dst. */
rs_err rs_quant_row_from_f32(enum rs_ggml_type type, const float *src, void *dst, uint64_t n);

#endif

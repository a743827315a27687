/*
 * The fast-decode scalar group formats q4 and q3 (kernels/FORMATS.md): one
 * 4-bit (q4) or 3-bit (q3) code per weight and one IEEE fp16 scale per group
 * of 32 weights, symmetric:
 *   q4: w = d * (q - 8), q in 0..15   128 code bytes + 16 scale bytes per 256 weights (4.5 bpw)
 *   q3: w = d * (q - 4), q in 0..7     96 code bytes + 16 scale bytes per 256 weights (3.5 bpw)
 * The codes are placed so a GPU lane decodes them with no per-weight shifts
 * (Marlin's trick): q4 with one LOP3 (mask and the fp16 exponent 0x6400 at
 * once) and one HFMA2 per weight pair, or as bytes by one mask for dp2a; q3
 * (format version 3) mostly as whole 3-bit fields, 4 codes by one mask (and a
 * shift) per word.  Lane t of a quad reads its 8 weights of every group of a
 * row with one 16-byte (q4) or one 16-byte plus one 8-byte (q3) load per
 * 256-weight block:
 *   weight i of a block: group g = i >> 5, slice t = (i >> 3) & 3, m = i & 7
 *   q4: byte 64 * (g >> 2) + 16 * t + 4 * (g & 3), bit 4 * (m >> 1) + 16 * (m & 1)
 *       of that little-endian 32-bit word (4 bits)
 *   q3: slice t's three 32-bit words per half block h = g >> 2: words j = 0, 1
 *       at byte 16 * t + 8 * h + 4 * j, word 2 at 64 + 8 * t + 4 * h; with
 *       P = (g >> 1) & 1, a = m >> 1 and byte lane b = 2 * (g & 1) + (m & 1)
 *       (strata_q3_place):
 *       a < 3:  all 3 bits in word f >> 1, f = 3 P + a, at bit 8 b + 3 (f & 1)
 *       a = 3:  low 2 bits in word P at bit 8 b + 6, the high bit in word 2
 *               at bit 8 b + 6 + P; q = low + 4 * high
 * Scales: the block's 8 fp16 values in group order (16 bytes per block).
 * Plain C99/C++ (CUDA includes it; the helpers are __host__ __device__ there).
 */
#ifndef STRATA_QUANT_SCALAR_H
#define STRATA_QUANT_SCALAR_H
#include "quant.h"
#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define STRATA_SQ_HD __host__ __device__ __forceinline__
#else
#define STRATA_SQ_HD static inline
#endif

#define STRATA_SQ_GROUP 32                 /* weights per fp16 scale */
#define STRATA_SQ_SCALE_BYTES 16           /* 8 fp16 per 256-weight block */
#define STRATA_Q4_CODE_BYTES 128
#define STRATA_Q3_CODE_BYTES 96

struct strata_block_q4 { uint8_t qs[STRATA_Q4_CODE_BYTES]; uint16_t d[8]; };
struct strata_block_q3 { uint8_t qs[STRATA_Q3_CODE_BYTES]; uint16_t d[8]; };
STRATA_STATIC_ASSERT(sizeof(struct strata_block_q4) == 144, "q4: 144 bytes per 256 weights (4.5 bpw)");
STRATA_STATIC_ASSERT(sizeof(struct strata_block_q3) == 112, "q3: 112 bytes per 256 weights (3.5 bpw)");

static inline int strata_fmt_is_scalar(int fmt) { return fmt == STRATA_FMT_Q4 || fmt == STRATA_FMT_Q3; }

/* Code of weight i (0..255) of one block's code bytes (little-endian words). */
STRATA_SQ_HD uint32_t strata_q4_code(const uint8_t *qs, uint32_t i)
{
	uint32_t g = i >> 5, t = (i >> 3) & 3, m = i & 7;
	const uint8_t *w = qs + 64 * (g >> 2) + 16 * t + 4 * (g & 3);
	uint32_t v = (uint32_t)w[0] | (uint32_t)w[1] << 8 | (uint32_t)w[2] << 16 | (uint32_t)w[3] << 24;
	return (v >> (4 * (m >> 1) + 16 * (m & 1))) & 15u;
}
/* Where q3 weight i (0..255) of a block lives: its low 2 bits at bit at[1]
 * of the little-endian 32-bit word at code byte at[0], its high bit at bit
 * at[3] of the word at byte at[2] (for a whole field, the same word, at[1] + 2). */
STRATA_SQ_HD void strata_q3_place(uint32_t i, uint32_t at[4])
{
	uint32_t g = i >> 5, t = (i >> 3) & 3, m = i & 7, h = g >> 2, P = (g >> 1) & 1, a = m >> 1;
	uint32_t b = 2 * (g & 1) + (m & 1), f = 3 * P + a, j = a < 3 ? f >> 1 : P, w2 = 64 + 8 * t + 4 * h;
	at[0] = j < 2 ? 16 * t + 8 * h + 4 * j : w2;
	at[1] = 8 * b + (a < 3 ? 3 * (f & 1) : 6);
	at[2] = a < 3 ? at[0] : w2;
	at[3] = a < 3 ? at[1] + 2 : 8 * b + 6 + P;
}
STRATA_SQ_HD uint32_t strata_q3_code(const uint8_t *qs, uint32_t i)
{
	uint32_t at[4];
	strata_q3_place(i, at);
	const uint8_t *l = qs + at[0], *h = qs + at[2];
	uint32_t lv = (uint32_t)l[0] | (uint32_t)l[1] << 8 | (uint32_t)l[2] << 16 | (uint32_t)l[3] << 24;
	uint32_t hv = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
	return ((lv >> at[1]) & 3u) + 4 * ((hv >> at[3]) & 1u);
}

extern const struct strata_fmt_traits strata_fmt_q4;
extern const struct strata_fmt_traits strata_fmt_q3;

#ifdef __cplusplus
}
#endif
#endif

/*
 * The three tier formats (hot, warm, cold): tail-biting bitshift-trellis codes
 * over a 4096-state computed Gaussian codebook (format version 2), one bf16
 * scale per 256-weight block.
 * kernels/FORMATS.md is the normative description; this header is its C/CUDA
 * form and is plain C99/C++ (CUDA may include it; the inline helpers are
 * __host__ __device__ under nvcc).
 *
 * Block b of a row (256 weights):
 *   codes  : STRATA_<FMT>_CODE_BYTES bytes = a circular bit stream of
 *            N = 8 * CODE_BYTES bits, bit j = (codes[j >> 3] >> (j & 7)) & 1
 *            (equivalently bit j & 31 of little-endian 32-bit word j >> 5)
 *   scales : one bf16 (little-endian uint16), STRATA_TIER_SCALE_BYTES
 * Weight i (0..255) of the block decodes as
 *   w[i] = bf16_to_f32(scale) * strata_tcq_table[window(i)]
 *   window(i) = the STRATA_TCQ_L bits of the stream starting at bit
 *               strata_tier_bitpos(fmt, i), wrapping from bit N-1 to bit 0,
 *               first bit = least significant.
 * The bit offsets advance by a fixed per-format pattern of 1..3 bits
 * (hot 3,3,3,2  warm 3,2  cold 1,2,1,2,1,2,1,1), so consecutive windows
 * overlap in STRATA_TCQ_L - k bits: that overlap is the trellis.
 */
#ifndef STRATA_QUANT_TIERS_H
#define STRATA_QUANT_TIERS_H
#include "quant.h"
#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define STRATA_HD __host__ __device__ __forceinline__
#else
#define STRATA_HD static inline
#endif

#define STRATA_TCQ_L 12                      /* window bits: 4096 trellis states */
#define STRATA_TCQ_MASK ((1u << STRATA_TCQ_L) - 1)
#define STRATA_TIER_SCALE_BYTES 2            /* one bf16 per block */

#define STRATA_HOT_CODE_BYTES 88             /* 704 bits = 2.75 bits/weight */
#define STRATA_WARM_CODE_BYTES 80            /* 640 bits = 2.5 bits/weight */
#define STRATA_COLD_CODE_BYTES 44            /* 352 bits = 1.375 bits/weight */

struct strata_block_hot { uint8_t qs[STRATA_HOT_CODE_BYTES]; };
struct strata_block_warm { uint8_t qs[STRATA_WARM_CODE_BYTES]; };
struct strata_block_cold { uint8_t qs[STRATA_COLD_CODE_BYTES]; };

STRATA_STATIC_ASSERT(sizeof(struct strata_block_hot) + STRATA_TIER_SCALE_BYTES == 90,
		     "hot: 90 bytes per 256 weights (2.8125 bpw)");
STRATA_STATIC_ASSERT(sizeof(struct strata_block_warm) + STRATA_TIER_SCALE_BYTES == 82,
		     "warm: 82 bytes per 256 weights (2.5625 bpw)");
STRATA_STATIC_ASSERT(sizeof(struct strata_block_cold) + STRATA_TIER_SCALE_BYTES == 46,
		     "cold: 46 bytes per 256 weights (1.4375 bpw)");
STRATA_STATIC_ASSERT(STRATA_HOT_CODE_BYTES % 4 == 0 && STRATA_WARM_CODE_BYTES % 4 == 0 &&
		     STRATA_COLD_CODE_BYTES % 4 == 0, "code streams are whole 32-bit words");

/* Code bytes of one block of a tier format (0 for anything else). */
STRATA_HD uint32_t strata_tier_code_bytes(int fmt)
{
	return fmt == STRATA_FMT_HOT ? STRATA_HOT_CODE_BYTES :
	       fmt == STRATA_FMT_WARM ? STRATA_WARM_CODE_BYTES :
	       fmt == STRATA_FMT_COLD ? STRATA_COLD_CODE_BYTES : 0;
}

/* First stream bit of weight i's window (0 <= i < 256). */
STRATA_HD uint32_t strata_tier_bitpos(int fmt, uint32_t i)
{
	if (fmt == STRATA_FMT_HOT)      /* 3,3,3,2: 11 bits per 4 weights */
		return 11u * (i >> 2) + 3u * (i & 3u);
	if (fmt == STRATA_FMT_WARM)     /* 3,2: 5 bits per 2 weights */
		return 5u * (i >> 1) + 3u * (i & 1u);
	/* cold 1,2,1,2,1,2,1,1: 11 bits per 8 weights */
	return 11u * (i >> 3) + (i & 7u) + ((i & 7u) >> 1);
}

/* The STRATA_TCQ_L-bit window at bit `pos` of a circular stream of `nwords`
 * little-endian 32-bit words (one block's codes). */
STRATA_HD uint32_t strata_tcq_window(const uint32_t *words, uint32_t nwords, uint32_t pos)
{
	uint32_t q = pos >> 5, q1 = q + 1 == nwords ? 0 : q + 1;
	uint64_t v = (uint64_t)words[q] | ((uint64_t)words[q1] << 32);
	return (uint32_t)(v >> (pos & 31u)) & STRATA_TCQ_MASK;
}

extern const struct strata_fmt_traits strata_fmt_hot;
extern const struct strata_fmt_traits strata_fmt_warm;
extern const struct strata_fmt_traits strata_fmt_cold;

#ifdef __cplusplus
}
#endif
#endif

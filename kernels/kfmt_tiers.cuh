// Device decoders of the three tier formats (kernels/FORMATS.md): a circular
// bit stream per 256-weight block, weight i = scale * table[12-bit window at
// strata_tier_bitpos(fmt, i)], one bf16 scale per block.
//
// A lane decodes weights 8j..8j+7 of a block: their windows lie in the 32 bits
// starting at bitpos(8j), i.e. in two consecutive (circular) 32-bit words, so
// one funnel shift and then a shift+mask and one table lookup per weight.
//   decode8f: f32 weights, scale * table (float), bit-exact with the reference
//             (the table holds fp16 values, the scale is bf16: the product is exact)
//   decode8 : the unscaled table values as bf16 pairs from a bf16 copy of the
//             table in shared memory; the kernels apply the block scale to the
//             tensor-core partial sum of the block (SCALED = true).
#pragma once
#include "quant_tables.h"
#include "quant_tiers.h"

#define STRATA_GPU_HAVE_TIERS 1
// The mma path keeps TAB_COPIES copies of the table in shared memory, one
// 32-bit word per entry, interleaved so that copy c sits in banks c, c+4, ...:
// lane (g, t) reads copy t, so 8 lanes spread random lookups over 8 banks
// (fewer bank conflicts on the hot loop's one random access per weight).
#define STRATA_TAB_COPIES 4

// The codebook as float, copied from quant_tables.h at context start.
__device__ float g_tcq[STRATA_TCQ_TABLE_SIZE];

template <int FMT> struct FmtTier {
	static constexpr bool SCALED = true;
	static constexpr uint32_t CODE_BYTES = FMT == STRATA_FMT_HOT ? STRATA_HOT_CODE_BYTES
					     : FMT == STRATA_FMT_WARM ? STRATA_WARM_CODE_BYTES
								      : STRATA_COLD_CODE_BYTES;
	static constexpr uint32_t SCALE_BYTES = STRATA_TIER_SCALE_BYTES;
	static constexpr uint32_t NW = CODE_BYTES / 4;
	static constexpr uint32_t BITS8 = FMT == STRATA_FMT_HOT ? 22 : FMT == STRATA_FMT_WARM ? 20 : 11;
	__host__ __device__ static constexpr uint32_t rel(int i)
	{
		return FMT == STRATA_FMT_HOT ? 11u * (i >> 2) + 3u * (i & 3)
		     : FMT == STRATA_FMT_WARM ? 5u * (i >> 1) + 3u * (i & 1)
					      : (uint32_t)(i + (i >> 1));
	}
	__device__ __forceinline__ static uint32_t bits(const uint8_t *c, int j)
	{
		const uint32_t *w = reinterpret_cast<const uint32_t *>(c);
		uint32_t p = BITS8 * j, q = p >> 5, q1 = q + 1 == NW ? 0 : q + 1;
		return __funnelshift_r(w[q], w[q1], p & 31);
	}
	__device__ __forceinline__ static uint32_t bits_s(uint32_t c, int j)
	{
		uint32_t p = BITS8 * j, q = p >> 5, q1 = q + 1 == NW ? 0 : q + 1;
		return __funnelshift_r(lds32(c + 4 * q), lds32(c + 4 * q1), p & 31);
	}
	__device__ __forceinline__ static float scale(const uint8_t *s)
	{
		return __uint_as_float((uint32_t)*reinterpret_cast<const uint16_t *>(s) << 16);
	}
	__device__ __forceinline__ static float scale(uint32_t s) { return __uint_as_float(lds16(s) << 16); }
	// The mma path keeps STRATA_TAB_COPIES copies of the codebook at the start of
	// g_smem: entry w of copy c is the 32-bit word 4w + c (bf16(table[w]) in its
	// low half); lane t of a quad reads copy t (t4 = 4t).  Offset of entry
	// (x >> R) & 0xfff in copy t: ((x >> (R - 4)) & 0xfff0) | t4, one shift and one
	// LOP3 per lookup.
	template <uint32_t R> __device__ __forceinline__ static uint32_t look(uint32_t x, uint32_t t4)
	{
		uint32_t v = R >= 4 ? x >> (R - 4) : x << (4 - R);
		return lds32((v & 0xfff0u) | t4);
	}
	__device__ __forceinline__ static void decode8(uint32_t c, uint32_t, int j, uint32_t t4, uint32_t o[4])
	{
		uint32_t x = bits_s(c, j);
		o[0] = __byte_perm(look<rel(0)>(x, t4), look<rel(1)>(x, t4), 0x5410);
		o[1] = __byte_perm(look<rel(2)>(x, t4), look<rel(3)>(x, t4), 0x5410);
		o[2] = __byte_perm(look<rel(4)>(x, t4), look<rel(5)>(x, t4), 0x5410);
		o[3] = __byte_perm(look<rel(6)>(x, t4), look<rel(7)>(x, t4), 0x5410);
	}
	__device__ __forceinline__ static void decode8f(const uint8_t *c, const uint8_t *s, int j, float o[8])
	{
		uint32_t x = bits(c, j);
		float sc = scale(s);
#pragma unroll
		for (int i = 0; i < 8; i++)
			o[i] = sc * g_tcq[(x >> rel(i)) & STRATA_TCQ_MASK];
	}
};
using FmtHot = FmtTier<STRATA_FMT_HOT>;
using FmtWarm = FmtTier<STRATA_FMT_WARM>;
using FmtCold = FmtTier<STRATA_FMT_COLD>;

#define STRATA_TIER_CASES(CALL)                                             \
	case STRATA_FMT_HOT: { using F = FmtHot; CALL; } break;             \
	case STRATA_FMT_WARM: { using F = FmtWarm; CALL; } break;           \
	case STRATA_FMT_COLD: { using F = FmtCold; CALL; } break;

// Device decoders of the three tier formats (kernels/FORMATS.md, format
// version 2): a circular bit stream per 256-weight block, weight
// i = scale * f(12-bit window at strata_tier_bitpos(fmt, i)), one bf16 scale
// per block.  f is the computed codebook, evaluated in registers here (no
// table, no per-weight memory access):
//   h = w * A + B                          IMAD
//   b = bytesum(h) + 0x6400                IDP4A: fp16 bits of 1024 + bytesum
//   (two weights packed into one half2)    PRMT
//   u = b * C1 + C0                        HFMA2
//   r = relu(u * u - T)                    HFMA2.RELU
//   f = r * u + u                          HFMA2
// each fp16 step rounded as IEEE binary16 (FORMATS.md), so f equals
// strata_tcq_table[w] (quant_tables.h, generated from the same definition)
// bit for bit; tests/test_kernels.c checks that through decode8f.
//
// A lane decodes weights 8j..8j+7 of a block: their windows lie in the 32 bits
// starting at bitpos(8j), i.e. in two consecutive (circular) 32-bit words, so
// one funnel shift and then a shift+mask per weight.
//   decode8f: f32 weights, scale * f (bit-exact with the reference: f is an
//             fp16 value, the scale a bf16, the product exact in f32)
//   decode8 : the unscaled values as fp16 pairs for fp16 tensor-core MMAs
//             (F16 = true); the kernels apply the block scale to the
//             partial sum of the block (SCALED = true).
#pragma once
#include <cuda_fp16.h>

#include "quant_tables.h"
#include "quant_tiers.h"

#define STRATA_GPU_HAVE_TIERS 1

__device__ __forceinline__ uint32_t tcq_h16(uint32_t w)
{
	return __dp4a(w * STRATA_TCQ_HASH_A + STRATA_TCQ_HASH_B, 0x01010101u, 0x6400u);
}

// f of two windows' hashes (tcq_h16), as a half2 bit pattern (w0 low).
__device__ __forceinline__ uint32_t tcq_pair(uint32_t h0, uint32_t h1)
{
	const __half2 c1 = __halves2half2(__ushort_as_half(STRATA_TCQ_C1), __ushort_as_half(STRATA_TCQ_C1));
	const __half2 c0 = __halves2half2(__ushort_as_half(STRATA_TCQ_C0), __ushort_as_half(STRATA_TCQ_C0));
	const __half2 nt = __halves2half2(__ushort_as_half(STRATA_TCQ_T | 0x8000u),
					  __ushort_as_half(STRATA_TCQ_T | 0x8000u));
	uint32_t b = __byte_perm(h0, h1, 0x5410);
	__half2 u = __hfma2(*reinterpret_cast<__half2 *>(&b), c1, c0);
	__half2 r = __hfma2_relu(u, u, nt);
	__half2 v = __hfma2(r, u, u);
	return *reinterpret_cast<uint32_t *>(&v);
}

// The same f through a shared-memory table instead of the HFMA2s (the
// decode kernel's table variants, moe_decode.cuh): f depends on the window
// only through the byte sum s = 0..1020 of its hash, so f(s) is tabulated
// (f in the low half of a u32, 0 in the high one), one copy per
// shared-memory bank: entry s of bank l at byte offset 128 * s + 4 * l of
// the table, so lane l reads bank l only and a warp's lookups never
// conflict.  IDP4A then gives the lookup's
// shared-window address straight from the hash (128 * s + the lane's column
// + the table's address), and a pair of weights costs 2 LDS + 1 IMAD instead
// of PRMT + 3 HFMA2 (same values: tcq_tab_fill evaluates tcq_pair once per s).
// The pair is joined as f1 * 0x10000 + f0 (IMAD, on the FMA-heavy pipe), not
// by a PRMT of two (f, f) entries (on the ALU pipe, which the window
// extraction's SHF and LOP3 keep busier): the ceiling kernel's table decoder
// gains 3.0 / 3.3% hot / cold on the H200 (`ceil_variants` variant 1 against
// 7, the PRMT join; experiments/kernels/README.md).
constexpr uint32_t TCQ_TAB_ENTRIES = 1021, TCQ_TAB_BYTES = TCQ_TAB_ENTRIES * 128;

// Fill the table at shared byte offset base, thread i of n (every thread of
// the CTA; a __syncthreads() must follow).
__device__ __forceinline__ void tcq_tab_fill(uint32_t base, uint32_t i, uint32_t n)
{
	for (; i < TCQ_TAB_ENTRIES * 32; i += n) {
		uint32_t b = 0x6400u + i / 32;
		*reinterpret_cast<uint32_t *>(g_smem + base + 4 * i) = tcq_pair(b, b) & 0xffffu;
	}
}

// The table's lookup base of this lane: the shared-window address of the
// table at offset `at` of g_smem, plus 4 * lane.
__device__ __forceinline__ uint32_t tcq_tab_base(uint32_t at)
{
	return (uint32_t)__cvta_generic_to_shared(g_smem) + at + 4 * (threadIdx.x & 31);
}

// f of two windows as a half2 (w0 low); tb = tcq_tab_base(the table's offset).
__device__ __forceinline__ uint32_t tcq_tab_pair(uint32_t w0, uint32_t w1, uint32_t tb)
{
	uint32_t a0 = __dp4a(w0 * STRATA_TCQ_HASH_A + STRATA_TCQ_HASH_B, 0x80808080u, tb);
	uint32_t a1 = __dp4a(w1 * STRATA_TCQ_HASH_A + STRATA_TCQ_HASH_B, 0x80808080u, tb);
	return ldsw32(a1) * 0x10000u + ldsw32(a0);
}

template <int FMT> struct FmtTier {
	static constexpr bool SCALED = true;
	static constexpr bool F16 = true, DIRECT = false;
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
		return __funnelshift_r(lds32(c + 4 * q), lds32(c + 4 * q1), p); // the shift takes p & 31
	}
	__device__ __forceinline__ static float scale(const uint8_t *s)
	{
		return __uint_as_float((uint32_t)*reinterpret_cast<const uint16_t *>(s) << 16);
	}
	__device__ __forceinline__ static float scale(uint32_t s) { return __uint_as_float(lds16(s) << 16); }
	template <int I> __device__ __forceinline__ static uint32_t h(uint32_t x)
	{
		return tcq_h16((x >> rel(I)) & STRATA_TCQ_MASK);
	}
	__device__ __forceinline__ static void decode8x(uint32_t x, uint32_t o[4])
	{
		o[0] = tcq_pair(h<0>(x), h<1>(x));
		o[1] = tcq_pair(h<2>(x), h<3>(x));
		o[2] = tcq_pair(h<4>(x), h<5>(x));
		o[3] = tcq_pair(h<6>(x), h<7>(x));
	}
	__device__ __forceinline__ static void decode8(uint32_t c, uint32_t, int j, uint32_t, uint32_t o[4])
	{
		decode8x(bits_s(c, j), o);
	}
	// decode8x / decode8 through the table at tb (tcq_tab_base, tcq_tab_pair)
	template <int I> __device__ __forceinline__ static uint32_t tw(uint32_t x)
	{
		return (x >> rel(I)) & STRATA_TCQ_MASK;
	}
	__device__ __forceinline__ static void decode8xt(uint32_t x, uint32_t tb, uint32_t o[4])
	{
		o[0] = tcq_tab_pair(tw<0>(x), tw<1>(x), tb);
		o[1] = tcq_tab_pair(tw<2>(x), tw<3>(x), tb);
		o[2] = tcq_tab_pair(tw<4>(x), tw<5>(x), tb);
		o[3] = tcq_tab_pair(tw<6>(x), tw<7>(x), tb);
	}
	__device__ __forceinline__ static void decode8t(uint32_t c, int j, uint32_t tb, uint32_t o[4])
	{
		decode8xt(bits_s(c, j), tb, o);
	}
	__device__ __forceinline__ static void decode8f(const uint8_t *c, const uint8_t *s, int j, float o[8])
	{
		uint32_t v[4];
		decode8x(bits(c, j), v);
		float sc = scale(s);
#pragma unroll
		for (int i = 0; i < 4; i++) {
			__half2 hv = *reinterpret_cast<__half2 *>(&v[i]);
			o[2 * i] = sc * __low2float(hv);
			o[2 * i + 1] = sc * __high2float(hv);
		}
	}
};
using FmtHot = FmtTier<STRATA_FMT_HOT>;
using FmtWarm = FmtTier<STRATA_FMT_WARM>;
using FmtCold = FmtTier<STRATA_FMT_COLD>;

#define STRATA_TIER_CASES(CALL)                                             \
	case STRATA_FMT_HOT: { using F = FmtHot; CALL; } break;             \
	case STRATA_FMT_WARM: { using F = FmtWarm; CALL; } break;           \
	case STRATA_FMT_COLD: { using F = FmtCold; CALL; } break;

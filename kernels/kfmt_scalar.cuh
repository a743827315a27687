// Device decoders of the fast-decode scalar formats q4 and q3 (quant_scalar.h,
// kernels/FORMATS.md): one fp16 scale per 32-weight group, codes placed so
// lane t of a quad decodes weights 8t..8t+7 of every group of a block from
// words it loads once per block (q4: two 16-byte chunks, q3: one 16-byte and
// one 8-byte chunk), with no per-weight shifts (Marlin's trick): a LOP3 puts
// a code into the mantissa of an fp16 1024 (+ code x 2^k), one HFMA2 (or
// HADD2) turns that into the exact signed code (q - 8 or q - 4; q3's codes
// split in a 2-bit and a 1-bit part take two of each), which feeds the fp16
// MMAs; the group scale multiplies the group's f32 MMA sums.
//   lane_word  a loaded code word as Lane keeps it (q3: bytes 1 and 2
//              swapped, so a group's weights 2a, 2a + 1 sit in the two
//              16-bit halves)
//   decode8f   weights 8j..8j+7 of a block as f32, bit-exact with the reference
//              (a code times an fp16 scale is exact in f32)
//   load/group the warp-streaming decode kernel's path (moe_decode.cuh)
#pragma once
#include <cuda_fp16.h>

#include "quant_scalar.h"

#define STRATA_GPU_HAVE_SCALAR 1

// fp16 bits of an exactly representable normal value (compile time).
__host__ __device__ constexpr uint16_t f16_bits(double v)
{
	uint16_t s = v < 0 ? 0x8000 : 0;
	double a = v < 0 ? -v : v;
	int e = 0;
	while (a >= 2.0)
		a /= 2, e++;
	while (a < 1.0)
		a *= 2, e--;
	return (uint16_t)(s | (uint16_t)((e + 15) << 10) | (uint16_t)((a - 1.0) * 1024));
}
__host__ __device__ constexpr uint32_t f16x2(double v) { return (uint32_t)f16_bits(v) * 0x10001u; }
__host__ __device__ constexpr double pow2(int e) { return e >= 0 ? (double)(1ull << e) : 1.0 / (double)(1ull << -e); }

// (w & mask) | 0x64006400 in one LOP3 (lut 0xea = (a & b) | c)
__device__ __forceinline__ uint32_t mag(uint32_t w, uint32_t mask)
{
	uint32_t r;
	asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(r) : "r"(w), "r"(mask), "r"(0x64006400u));
	return r;
}
__device__ __forceinline__ uint32_t hfma2u(uint32_t a, uint32_t b, uint32_t c)
{
	__half2 r = __hfma2(*reinterpret_cast<__half2 *>(&a), *reinterpret_cast<__half2 *>(&b),
			    *reinterpret_cast<__half2 *>(&c));
	return *reinterpret_cast<uint32_t *>(&r);
}

template <int FMT> struct FmtScalar {
	static constexpr bool Q4 = FMT == STRATA_FMT_Q4;
	static constexpr bool SCALED = false, F16 = true, DIRECT = false;
	static constexpr uint32_t CODE_BYTES = Q4 ? STRATA_Q4_CODE_BYTES : STRATA_Q3_CODE_BYTES;
	static constexpr uint32_t SCALE_BYTES = STRATA_SQ_SCALE_BYTES;
	static constexpr int NMAX = Q4 ? 8 : 4;
	// Where the decode kernel's stage row keeps the block's 16 scale bytes
	// (after the codes: q4 128 bytes, q3 96; the tiers' 112 where it fits).
	static constexpr uint32_t SCALE_AT = Q4 ? 128 : 112;
	// This lane's code words of one block (lane t of a quad), as lane_word
	// makes them: q4 w[0..7] the words of groups 0..7; q3 w[2h + j] word j =
	// 0, 1 of half block h (groups 4h .. 4h + 3) and w[4 + h] its word 2.
	struct Lane {
		uint32_t w[Q4 ? 8 : 6];
	};
	__device__ __forceinline__ static uint32_t lane_word(uint32_t raw)
	{
		if constexpr (Q4)
			return raw;
		else
			return __byte_perm(raw, 0, 0x3120);
	}
	// q3: the Lane of a block's loaded words (a: 16 bytes at 16 t, b: 8 at 64 + 8 t).
	__device__ __forceinline__ static void q3_lane(uint4 a, uint2 b, Lane &l)
	{
		l.w[0] = lane_word(a.x), l.w[1] = lane_word(a.y), l.w[2] = lane_word(a.z), l.w[3] = lane_word(a.w);
		l.w[4] = lane_word(b.x), l.w[5] = lane_word(b.y);
	}
	__device__ __forceinline__ static void load(uint32_t c, int t, Lane &l)
	{
		uint4 a = lds128(c + 16 * t);
		if constexpr (Q4) {
			uint4 b = lds128(c + 64 + 16 * t);
			l.w[0] = a.x, l.w[1] = a.y, l.w[2] = a.z, l.w[3] = a.w;
			l.w[4] = b.x, l.w[5] = b.y, l.w[6] = b.z, l.w[7] = b.w;
		} else {
			q3_lane(a, *reinterpret_cast<const uint2 *>(g_smem + c + 64 + 8 * t), l);
		}
	}
	// The lane's 8 weights of group U as 4 fp16 pairs (weights 2i, 2i + 1),
	// the exact signed codes q - NMAX.
	template <int U> __device__ __forceinline__ static void group(const Lane &l, uint32_t o[4])
	{
		if constexpr (Q4) {
			const uint32_t w = l.w[U], w8 = w >> 8;
			constexpr uint32_t lo_sub = f16x2(-1032.0), hi_mul = f16x2(1.0 / 16), hi_add = f16x2(-72.0);
			__half2 s;
			uint32_t v0 = mag(w, 0x000f000fu), v2 = mag(w8, 0x000f000fu);
			s = __hadd2(*reinterpret_cast<__half2 *>(&v0), *reinterpret_cast<const __half2 *>(&lo_sub));
			o[0] = *reinterpret_cast<uint32_t *>(&s);
			s = __hadd2(*reinterpret_cast<__half2 *>(&v2), *reinterpret_cast<const __half2 *>(&lo_sub));
			o[2] = *reinterpret_cast<uint32_t *>(&s);
			o[1] = hfma2u(mag(w, 0x00f000f0u), hi_mul, hi_add);
			o[3] = hfma2u(mag(w8, 0x00f000f0u), hi_mul, hi_add);
		} else {
			// half block h, pair P of it, group parity G (Lane's byte G:
			// weight 2a, byte 2 + G: weight 2a + 1, so G = 1 reads w >> 8)
			constexpr int H = U >> 2, P = (U >> 1) & 1, G = U & 1;
			auto word = [&](int j) { return (l.w[j < 2 ? 2 * H + j : 4 + H]) >> (8 * G); };
#pragma unroll
			for (int a = 0; a < 3; a++) {
				const int f = 3 * P + a, sh = 3 * (f & 1);
				o[a] = q3_field(word(f >> 1), sh);
			}
			o[3] = q3_pair<6 + P, 3>(word(P), word(2));
		}
	}
	// A whole 3-bit field at bits sh.. of each half of w: 1024 + q 2^sh by
	// the LOP3, then q - 4 exactly.
	__device__ __forceinline__ static uint32_t q3_field(uint32_t w, int sh)
	{
		return sh ? hfma2u(mag(w, 0x00380038u), f16x2(1.0 / 8), f16x2(-132.0))
			  : hfma2u(mag(w, 0x00070007u), f16x2(1.0), f16x2(-1028.0));
	}
	// q3 split code: low bits at mask 3 << 2P of L (fp16 1024 + lo 4^P),
	// high bit at bit J of H (fp16 1024 + hi 2^J); lo + 4 hi - 4, exactly:
	// the inner HFMA2 gives 4 hi - 1024 4^-P - 4, the outer adds lo + 1024 4^-P.
	template <int J, int P> __device__ __forceinline__ static uint32_t q3_pair(uint32_t L, uint32_t H)
	{
		constexpr uint32_t lm = f16x2(pow2(-2 * P)), hm = f16x2(pow2(2 - J));
		constexpr uint32_t hc = f16x2(-(pow2(12 - J) + 1024.0 * pow2(-2 * P) + 4));
		return hfma2u(mag(L, 0x00030003u << (2 * P)), lm, hfma2u(mag(H, 0x00010001u << J), hm, hc));
	}
	// Scale of group u (stage offset of the block's 16 scale bytes).
	__device__ __forceinline__ static float gscale(uint32_t s, int u)
	{
		return __half2float(__ushort_as_half((unsigned short)lds16(s + 2 * u)));
	}
	__device__ __forceinline__ static void decode8f(const uint8_t *c, const uint8_t *s, int j, float o[8])
	{
		const uint16_t *d = reinterpret_cast<const uint16_t *>(s);
		float sc = __half2float(__ushort_as_half(d[j >> 2]));
#pragma unroll
		for (int m = 0; m < 8; m++) {
			uint32_t i = 8 * j + m;
			int q = (int)(Q4 ? strata_q4_code(c, i) : strata_q3_code(c, i));
			o[m] = sc * (float)(q - NMAX);
		}
	}
};
using FmtQ4 = FmtScalar<STRATA_FMT_Q4>;
using FmtQ3 = FmtScalar<STRATA_FMT_Q3>;

#define STRATA_SCALAR_CASES(CALL)                                           \
	case STRATA_FMT_Q4: { using F = FmtQ4; CALL; } break;               \
	case STRATA_FMT_Q3: { using F = FmtQ3; CALL; } break;

// Device-side decoders of the packed formats (quant.h), one functor per format.
// Every kernel is templated on these, so a format is one struct here plus one
// case in fmt_dispatch().  A functor sees one 256-weight block of one row:
//   codes  -> the block's code bytes, scales -> its scale bytes (both in shared
//             or global memory, with the same alignment mod 16 as in the file)
//   decode8f(codes, scales, j, out)  weights 8j..8j+7 of the block as f32,
//             bit-exact with the format's reference dequantize_row
//   decode8(codes, scales, j, t4, out)  (byte offsets into g_smem; t4 unused)
//             the same 8 weights as 4 packed pairs (out[0] = w0 | w1 << 16, ...)
//             for the tensor cores: bf16 pairs, or fp16 pairs when F16 (the
//             kernel then feeds fp16 MMAs with fp16 activations); when
//             SCALED, without the block scale, which scale(scales) returns and
//             the kernel applies to the block's partial sum
// For the passthrough formats a "block" is 256 consecutive weights of the row
// (a row's last block may be partial; kernels never ask for weights past cols).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

extern "C" {
#include "quant.h"
}

// The kernels' dynamic shared memory.  The fused kernel lays it out as
// [stage buffers | ...]; the mma-path decoders address it
// with 32-bit byte offsets from its start (compiler-visible loads, so address
// arithmetic stays 32-bit and constant offsets fold into the instruction).
extern __shared__ __align__(128) uint8_t g_smem[];
__device__ __forceinline__ uint32_t lds32(uint32_t o) { return *reinterpret_cast<const uint32_t *>(g_smem + o); }
__device__ __forceinline__ uint32_t lds16(uint32_t o) { return *reinterpret_cast<const uint16_t *>(g_smem + o); }
__device__ __forceinline__ uint4 lds128(uint32_t o) { return *reinterpret_cast<const uint4 *>(g_smem + o); }
// 4 bytes at a 32-bit shared-window address (__cvta_generic_to_shared(g_smem)
// + an offset): for addresses computed whole, as the codebook table's IDP4A
// gives them.  An offset from g_smem costs an add per load wherever the
// compiler keeps g_smem's window address in a vector register (the row-
// streaming tier kernel did: ~1 instruction a weight; experiments/kernels/
// README.md, "SASS on the CPU machine").
__device__ __forceinline__ uint32_t ldsw32(uint32_t a)
{
	uint32_t v;
	asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(a));
	return v;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
	return *reinterpret_cast<uint32_t *>(&v);
}
__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi)
{
	__half2 v = __floats2half2_rn(lo, hi);
	return *reinterpret_cast<uint32_t *>(&v);
}

struct FmtBF16 {
	static constexpr bool SCALED = false, F16 = false, DIRECT = true;
	static constexpr uint32_t CODE_BYTES = 512, SCALE_BYTES = 0;
	__device__ __forceinline__ static void decode8(uint32_t c, uint32_t, int j, uint32_t, uint32_t o[4])
	{
		uint4 v = lds128(c + 16 * j);
		o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
	}
	__device__ __forceinline__ static void decode8f(const uint8_t *c, const uint8_t *, int j, float o[8])
	{
		const uint16_t *h = reinterpret_cast<const uint16_t *>(c) + 8 * j;
		for (int i = 0; i < 8; i++)
			o[i] = __uint_as_float((uint32_t)h[i] << 16);
	}
};

struct FmtF32 {
	static constexpr bool SCALED = false, F16 = false, DIRECT = false;
	static constexpr uint32_t CODE_BYTES = 1024, SCALE_BYTES = 0;
	__device__ __forceinline__ static void decode8(uint32_t c, uint32_t, int j, uint32_t, uint32_t o[4])
	{
		uint4 a = lds128(c + 32 * j), b = lds128(c + 32 * j + 16);
		o[0] = pack_bf16x2(__uint_as_float(a.x), __uint_as_float(a.y));
		o[1] = pack_bf16x2(__uint_as_float(a.z), __uint_as_float(a.w));
		o[2] = pack_bf16x2(__uint_as_float(b.x), __uint_as_float(b.y));
		o[3] = pack_bf16x2(__uint_as_float(b.z), __uint_as_float(b.w));
	}
	__device__ __forceinline__ static void decode8f(const uint8_t *c, const uint8_t *, int j, float o[8])
	{
		const float *p = reinterpret_cast<const float *>(c) + 8 * j;
		for (int i = 0; i < 8; i++)
			o[i] = p[i];
	}
};

#include "kfmt_tiers.cuh"
#include "kfmt_scalar.cuh"

// Run CALL with `F` bound to the functor of the run-time format fmt.
#define STRATA_FMT_SWITCH(fmt, CALL)                                        \
	switch (fmt) {                                                      \
	case STRATA_FMT_BF16: { using F = FmtBF16; CALL; } break;           \
	case STRATA_FMT_F32: { using F = FmtF32; CALL; } break;             \
	STRATA_TIER_CASES(CALL)                                             \
	default: break;                                                     \
	}

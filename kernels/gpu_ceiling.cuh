// Pieces of the decode-ceiling kernel (gpu_ceiling.cu) that its experiment
// variants (experiments/kernels/ceil_variants.cu) share: the fp16 MMA, a
// lane's inputs and the host-side input pattern.
#pragma once
#include <stddef.h>
#include <stdint.h>

namespace dceil {

constexpr int W = STRATA_CEIL_LANE_WORDS; // words per lane: 4 rows x 2 code words, 4 B-fragment words

__device__ __forceinline__ void mma_f16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
					uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
		     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Lane inputs my[0..W): code words of rows r = 0..3 at [2r], [2r + 1]
// (r = 2m + h: row g + 8h of tile m), the B fragment at [8..11].
__device__ __forceinline__ void load_lane(const uint32_t *my, uint32_t (&w)[4][2], uint32_t (&b)[4])
{
#pragma unroll
	for (int r = 0; r < 4; r++)
		w[r][0] = my[2 * r], w[r][1] = my[2 * r + 1];
#pragma unroll
	for (int i = 0; i < 4; i++)
		b[i] = my[8 + i];
}

// n words of lane inputs for format fmt (seeded by it): random code words,
// B fragments of random fp16 in +-[2^-4, 1).
inline void fill_inputs(uint32_t *h, size_t n, int fmt)
{
	uint64_t x = 0x9e3779b97f4a7c15ull ^ (uint64_t)fmt;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		uint32_t v = (uint32_t)(x >> 16);
		if (i % W >= 8) {
			uint32_t lo = (v & 0x83ffu) | ((11u + (v >> 16) % 4) << 10);
			uint32_t hi = ((v >> 8) & 0x83ffu) | ((11u + (v >> 20) % 4) << 10);
			v = lo | hi << 16;
		}
		h[i] = v;
	}
}

} // namespace dceil

// Row-streaming decode of the tier formats (hot, warm, cold; included by
// moe_gpu.cu after moe_dec_gv.cuh): the row-streaming kernel gv::gv_kernel
// (two launches, gate|up then down, whole rows per task, code words straight
// from global memory into registers, activations staged once per CTA in
// shared memory, no per-stage copies or barriers) with the policy
// gv::Tier<FMT, TAB>.  Taken by run_dec_tr (moe_gpu.cu) for launches whose
// experts all have one token and are all in one tier format, under the
// kernel configuration dec_tr=1 (the FMA decoder), 2 (the table decoder) or
// 3 (weight pairs 0, 2 of each group through the table, 1, 3 by the FMAs:
// half the shared-memory lookups).
//
// A chunk is one 256-weight block of a row: a lane loads its code words (hot
// 11 x 8 bytes, warm 5 x 16, cold 11 x 4: every block is that aligned) and
// its bf16 scale into registers, and decodes the block with the shift amounts
// of every 8-weight group known at compile time (FmtTier::decode8x, or
// decode8xt through the codebook table, or both, DEC).  Lanes per row (1 << lsh) are at
// most 4, so a lane's chunk depends only on t = lane & 3.
//
// The dot products run on the tensor cores (mma.sync m16n8k16, f32
// accumulation), one lane's block per pair of MMA columns: lane (g, t) puts
// weights 0 - 127 of its block in A row g and weights 128 - 255 in A row
// g + 8 (k slots 2t, 2t + 1, 2t + 8, 2t + 9 of each 16-weight MMA: 8 weights
// of one group per two MMAs).  B column n holds the activations of lane
// t = n / 2's block, half n & 1, at t's k slots and zeros at the other
// lanes' (the lanes g = 2t, 2t + 1 load them from the staged row, the others
// load zeros), so C[g][2t] and C[g + 8][2t + 1], i.e. c[0] and c[3] of lane
// (g, t), are exactly the two halves of that lane's own block: their sum
// times the block scale goes to the lane's row sum.  One 16-byte shared
// load of fp16 activations and two MMAs per 16 weights of a lane.
// Activations are staged as fp16 times a power of two per row (gv::stage,
// |x| <= 2^14), so the fp16 range needs no guard.
namespace gv {

// Shared memory of these policies beyond gv's staged activations: 256 zero
// bytes (the activations of the lanes without any) and, for the table
// decoder, the codebook table (tcq_tab_fill) at the end of SMEM_MAX.
constexpr uint32_t TR_TAB_AT = SMEM_MAX - TCQ_TAB_BYTES, TR_ZERO_AT = TR_TAB_AT - 256;

// Code words and scales through L1, allocated there (unlike sqd::ldw8 and
// bfd::ldw): a lane's next loads read the rest of the same 32-byte sectors.
__device__ __forceinline__ uint2 ldg8(const uint8_t *q)
{
	uint2 v;
	asm volatile("ld.global.nc.L2::256B.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(q));
	return v;
}
__device__ __forceinline__ uint4 ldg16(const uint8_t *q)
{
	uint4 v;
	asm volatile("ld.global.nc.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(q));
	return v;
}
__device__ __forceinline__ uint32_t ldg4(const uint8_t *q)
{
	uint32_t v;
	asm volatile("ld.global.nc.L2::256B.u32 %0, [%1];\n" : "=r"(v) : "l"(q));
	return v;
}
__device__ __forceinline__ uint32_t ldg2(const uint8_t *q)
{
	unsigned short v;
	asm volatile("ld.global.nc.u16 %0, [%1];\n" : "=h"(v) : "l"(q));
	return v;
}

// DEC: 0 the FMA decoder, 1 the table, 2 half of each.
template <int FMT, int DEC> struct Tier {
	static constexpr bool TAB = DEC != 0;
	using F = FmtTier<FMT>;
	static constexpr uint32_t CPB = 1, NG = 32, NB = 1;
	static constexpr int BUFS = 3;       // register buffers at one token (gv_kernel's bufs_of)
	static constexpr uint32_t SB = 16;   // staged bytes per 8 activations (fp16)
	static constexpr int KBITS = 14;     // |staged value| <= 2^14
	static constexpr uint32_t NWD = F::NW;
	template <int LSH> struct Buf {
		uint32_t w[NWD];
		uint32_t s;
	};
	// Before staging (gv_kernel): the zero bytes and the table.
	__device__ __forceinline__ static void pre()
	{
		if (threadIdx.x < 64)
			*reinterpret_cast<uint32_t *>(g_smem + TR_ZERO_AT + 4 * threadIdx.x) = 0;
		if constexpr (TAB)
			tcq_tab_fill(TR_TAB_AT, threadIdx.x, blockDim.x);
	}
	template <int LSH, bool FULL>
	__device__ __forceinline__ static void load(Buf<LSH> &b, const uint8_t *c, const uint8_t *s, uint32_t j0, uint32_t,
						    bool iv, uint32_t cpr)
	{
		if (!FULL && !(iv && j0 < cpr))
			return;
		const uint8_t *q = c + F::CODE_BYTES * j0;
		if constexpr (FMT == STRATA_FMT_WARM) {
#pragma unroll
			for (uint32_t i = 0; i < NWD / 4; i++) {
				const uint4 v = ldg16(q + 16 * i);
				b.w[4 * i] = v.x, b.w[4 * i + 1] = v.y, b.w[4 * i + 2] = v.z, b.w[4 * i + 3] = v.w;
			}
		} else if constexpr (FMT == STRATA_FMT_HOT) {
#pragma unroll
			for (uint32_t i = 0; i < NWD / 2; i++) {
				const uint2 v = ldg8(q + 8 * i);
				b.w[2 * i] = v.x, b.w[2 * i + 1] = v.y;
			}
		} else {
#pragma unroll
			for (uint32_t i = 0; i < NWD; i++)
				b.w[i] = ldg4(q + 4 * i);
		}
		b.s = ldg2(s + F::SCALE_BYTES * j0);
	}
	__device__ __forceinline__ static void slot_of(uint32_t q, uint32_t &j, uint32_t &u) { j = q >> 5, u = q & 31; }
	// Natural order: 8 activations per 16 bytes, block j's 256 at 512 j.
	__device__ __forceinline__ static void stage(const float (&v)[8], uint32_t xrow, uint32_t, uint32_t, uint32_t j,
						     uint32_t u)
	{
		*reinterpret_cast<uint4 *>(g_smem + xrow + 16 * (32 * j + u)) =
			make_uint4(pack_f16x2(v[0], v[1]), pack_f16x2(v[2], v[3]), pack_f16x2(v[4], v[5]),
				   pack_f16x2(v[6], v[7]));
	}
	// The fp16 pairs of the block's 8-weight group I.
	template <int I> __device__ __forceinline__ static void group(const uint32_t (&w)[NWD], uint32_t o[4])
	{
		constexpr uint32_t p = F::BITS8 * I, q = p >> 5, q1 = q + 1 == NWD ? 0 : q + 1;
		const uint32_t x = __funnelshift_r(w[q], w[q1], p & 31);
		const uint32_t tb = tcq_tab_base(TR_TAB_AT);
		if constexpr (DEC == 1) {
			F::decode8xt(x, tb, o);
		} else if constexpr (DEC == 2) {
			using T = F;
			o[0] = tcq_tab_pair(T::template tw<0>(x), T::template tw<1>(x), tb);
			o[1] = tcq_pair(T::template h<2>(x), T::template h<3>(x));
			o[2] = tcq_tab_pair(T::template tw<4>(x), T::template tw<5>(x), tb);
			o[3] = tcq_pair(T::template h<6>(x), T::template h<7>(x));
		} else {
			F::decode8x(x, o);
		}
	}
	template <int NT, int LSH, bool FULL>
	__device__ __forceinline__ static void dot(const Buf<LSH> &b, uint32_t j0, uint32_t, uint32_t cpr, bool rv, uint32_t,
						   const uint32_t (&xu)[NT][NG], const uint32_t (&)[NT], float (&acc)[NT])
	{
		const uint32_t lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
		const bool ok = FULL || (rv && j0 < cpr), act = g >> 1 == t;
		const uint32_t jb = FULL ? j0 : min(j0, cpr - 1);
		// offsets in g_smem (plain loads, which the compiler may schedule
		// freely among the MMAs)
		const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(g_smem);
		uint32_t xb[NT];
#pragma unroll
		for (int k = 0; k < NT; k++)
			xb[k] = act ? xu[k][0] - sbase + 512 * jb + 256 * (g & 1) : TR_ZERO_AT;
		float c[NT][4] = {};
		auto step = [&](auto UC) {
			constexpr int U = decltype(UC)::value;
			uint32_t o[4], h[4];
			group<U>(b.w, o);
			group<16 + U>(b.w, h);
#pragma unroll
			for (int k = 0; k < NT; k++) {
				const uint4 x = *reinterpret_cast<const uint4 *>(g_smem + xb[k] + 16 * U);
				mma_bf16<true>(c[k], o[0], h[0], o[1], h[1], x.x, x.y);
				mma_bf16<true>(c[k], o[2], h[2], o[3], h[3], x.z, x.w);
			}
		};
		step(std::integral_constant<int, 0>());
		step(std::integral_constant<int, 1>());
		step(std::integral_constant<int, 2>());
		step(std::integral_constant<int, 3>());
		step(std::integral_constant<int, 4>());
		step(std::integral_constant<int, 5>());
		step(std::integral_constant<int, 6>());
		step(std::integral_constant<int, 7>());
		step(std::integral_constant<int, 8>());
		step(std::integral_constant<int, 9>());
		step(std::integral_constant<int, 10>());
		step(std::integral_constant<int, 11>());
		step(std::integral_constant<int, 12>());
		step(std::integral_constant<int, 13>());
		step(std::integral_constant<int, 14>());
		step(std::integral_constant<int, 15>());
		const float sc = ok ? __uint_as_float(b.s << 16) : 0.0f;
#pragma unroll
		for (int k = 0; k < NT; k++)
			acc[k] = fmaf(sc, c[k][0] + c[k][3], acc[k]);
	}
};

} // namespace gv

// Decode kernel of the fused MoE layer for the scalar formats q4 and q3
// (included by moe_gpu.cu inside its anonymous namespace, after
// moe_dec_bf16.cuh, whose task scheme it shares).
//
// Used when every expert of a launch has at most 8 tokens and all of them are
// in one scalar format (run_dec_sq in moe_gpu.cu).  q4/q3 decode costs a LOP3
// and one or two HFMA2 per weight pair (kfmt_scalar.cuh), so, like bf16, its
// speed is set by the bytes every SM keeps in flight; staging the rows through
// shared memory (dec_kernel, the trellis formats' design) measured 0.21 of the
// read ceiling at the Kimi shape.  Here, as in bfd::bf16_kernel, every warp is
// an independent stream with a register ring of D units loaded straight from
// global memory (16-byte loads, read-only path, L2 256-byte prefetch hint),
// issued D units ahead across task boundaries; no barriers after the start.
//   unit (q4): half a block h (128 weights) of the lane's 4 rows (g, g+8 of both
//              16-row tiles): per row one 16-byte load of its code words
//              (groups 4h..4h+3, weights 8t..8t+7 of each) and the 2-byte
//              scale of group 4h + t (the quad's lanes swap them by shuffles);
//   unit (q3): the same half block: per row 8 bytes of low bits, 4 of high
//              bits and the scale, as q4.  Group u of the unit is group u of
//              kfmt_scalar's decoder given the half block's words in the
//              places of words 0, 1 (low) and 4 (high) of a block's.
// Tasks are bfd's (16 gate + 16 up rows or 32 down rows x one 8-token tile x
// one K chunk of whole blocks), with its split-K gate|up scratch, counters and
// gate|up -> down ordering (bfd::cmp_start / cmp_end).  Per 32-weight group
// the lane decodes its 8 weights of each row to exact fp16 codes, two fp16
// MMAs per 16-row tile give the group's sums, which are scaled by the group's
// fp16 scale in f32; activations beyond the fp16 range take compute_sq's
// guard (the unit is recomputed with each token's activations scaled by 2^-e).
// Activations (what ncu showed bounding this kernel at 0.25 of read, Kimi q4
// T=1: 45% of warp stalls were waits for the activation loads at use, which
// missed L1 because every gate|up task end and down task start did an acquire,
// i.e. an invalidation of the SM's L1):
//   - x: with sq_xs (default) the launch's x rows are staged once per CTA in
//     shared memory as fp16 (rounded as the MMA operands are), while the
//     ring's first loads are in flight; gate|up units read them with one
//     16-byte shared load per group, one group ahead;
//   - h (down) and x without staging: through L1, one group ahead (pulling a
//     down task's chunk of h into L1 at its first unit measured no faster);
//   - the gate|up -> down counters take no acquire (bfd ACQ=false).
namespace sqd {

using bfd::Args;
using bfd::NONE;
constexpr int RG = bfd::RG, RD = bfd::RD, TN = bfd::TN;

// 8 bytes through the read-only path, not kept in L1.
__device__ __forceinline__ uint2 ldw8(const uint8_t *q)
{
	uint2 v;
	asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(q));
	return v;
}
__device__ __forceinline__ uint32_t ldw2(const uint8_t *q)
{
	uint16_t v;
	asm volatile("ld.global.nc.L1::no_allocate.L2::256B.u16 %0, [%1];\n" : "=h"(v) : "l"(q));
	return v;
}
__device__ __forceinline__ uint32_t ldw4(const uint8_t *q)
{
	uint32_t v;
	asm volatile("ld.global.nc.L1::no_allocate.L2::256B.u32 %0, [%1];\n" : "=r"(v) : "l"(q));
	return v;
}

template <class F> struct Sq {
	static constexpr bool Q4 = F::Q4;
	static constexpr uint32_t UPB = 2;                   // units per block
	static constexpr uint32_t GPU_ = 4;                  // groups per unit
	// One ring entry: rows g + 8h of tile m.
	struct Ent;
};
template <> struct Sq<FmtQ4>::Ent {
	uint4 c[2][2];     // code words of groups 4h'..4h'+3 of the half block h'
	uint32_t s[2][2];  // scale of group 4h' + t (the quad's other lanes have the others)
};
template <> struct Sq<FmtQ3>::Ent {
	uint2 c[2][2];     // words 0, 1 of half block h' (groups 4h'..4h'+3; Lane words 2h', 2h'+1)
	uint32_t x[2][2];  // its word 2 (Lane word 4 + h')
	uint32_t s[2][2];  // scale of group 4h' + t
};

// Issue side: the task whose units are being loaded, and this lane's rows.
struct Iss {
	uint32_t t, u, nu;     // task, next unit, units in the task
	uint32_t nxt;          // lane 0: the task id after this one (fetched ahead)
	const uint8_t *c, *s;  // row g of tile 0: codes, scales of the chunk's first block
	uint32_t omc, oms;     // byte offsets of tile 1 (codes, scales)
	uint32_t ohc, ohs;     // byte offsets of rows g + 8
	uint32_t valid;        // bit 2m + h: row g + 8h of tile m inside the matrix
};

template <class F> __device__ __forceinline__ void iss_setup(const MoeParams &p, const Args &a, Iss &ld)
{
	const int g = (threadIdx.x & 31) >> 2;
	Task k;
	uint32_t chunk;
	bfd::btask(p, ld.t, k, chunk);
	const FmtTab &f = p.tab[k.fmt];
	const uint32_t d = k.down, nb = f.pc[d] / 256;
	const uint32_t k0 = chunk * a.kc[d], k1 = min(k0 + a.kc[d], f.pc[d]);
	const uint32_t nrows = d ? p.hidden : p.inter, row0 = k.rt * (d ? RD : RG) + g;
	const uint8_t *mat = p.slot[k.slot].ext + f.off[d ? 2 : 0];
	ld.u = 0;
	ld.nu = (k1 - k0) / 256 * Sq<F>::UPB;
	ld.c = mat + (uint64_t)row0 * f.rowc[d] + (uint64_t)(k0 / 256) * F::CODE_BYTES;
	ld.s = mat + f.soff[d] + ((uint64_t)row0 * nb + k0 / 256) * F::SCALE_BYTES;
	ld.ohc = 8 * (uint32_t)f.rowc[d], ld.ohs = 8 * nb * F::SCALE_BYTES;
	ld.omc = d ? 2 * ld.ohc : (uint32_t)(f.off[1] - f.off[0]);
	ld.oms = d ? 2 * ld.ohs : (uint32_t)(f.off[1] - f.off[0]);
	const uint32_t r1 = d ? row0 + 16 : row0;
	ld.valid = (row0 < nrows) | (row0 + 8 < nrows) << 1 | (r1 < nrows) << 2 | (r1 + 8 < nrows) << 3;
}

// Pull the code bytes of task t's chunk into L2 (lane l: stage row l, as
// dec::stage_row numbers them: gate rows then up rows, or 32 down rows).
template <class F> __device__ __forceinline__ void prefetch_task(const MoeParams &p, const Args &a, uint32_t t)
{
	const int lane = threadIdx.x & 31;
	Task k;
	uint32_t chunk;
	bfd::btask(p, t, k, chunk);
	const FmtTab &f = p.tab[k.fmt];
	const uint32_t d = k.down, k0 = chunk * a.kc[d], k1 = min(k0 + a.kc[d], f.pc[d]);
	const uint32_t row = d ? k.rt * RD + lane : k.rt * RG + (lane & (RG - 1));
	if (row < (d ? p.hidden : p.inter))
		asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(
				     p.slot[k.slot].ext + f.off[d ? 2 : (lane < RG ? 0 : 1)] + (uint64_t)row * f.rowc[d] +
				     (uint64_t)(k0 / 256) * F::CODE_BYTES),
			     "r"((k1 - k0) / 256 * F::CODE_BYTES)
			     : "memory");
}

// Load unit ld.u of the issue task into e (zeros for rows past the matrix).
template <class F> __device__ __forceinline__ void iss_load(const Iss &ld, typename Sq<F>::Ent &e)
{
	const int t = threadIdx.x & 3;
#pragma unroll
	for (int m = 0; m < 2; m++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const bool v = ld.valid >> (2 * m + h) & 1;
			const uint32_t oc = (m ? ld.omc : 0) + (h ? ld.ohc : 0), os = (m ? ld.oms : 0) + (h ? ld.ohs : 0);
			const uint32_t j = ld.u >> 1, hb = ld.u & 1;
			const uint8_t *q = ld.c + oc + j * F::CODE_BYTES;
			if constexpr (F::Q4) {
				e.c[m][h] = v ? bfd::ldw(q + 64 * hb + 16 * t) : make_uint4(0, 0, 0, 0);
			} else {
				e.c[m][h] = v ? ldw8(q + 16 * t + 8 * hb) : make_uint2(0, 0);
				e.x[m][h] = v ? ldw4(q + 64 + 8 * t + 4 * hb) : 0u;
			}
			e.s[m][h] = v ? ldw2(ld.s + os + j * F::SCALE_BYTES + 8 * hb + 2 * t) : 0u;
		}
}

// fp16 bits (low or high half of w) as f32.
__device__ __forceinline__ float h2f(uint32_t w, int hi)
{
	return __half2float(__ushort_as_half((unsigned short)(hi ? w >> 16 : w & 0xffff)));
}

// acc += unit u of the task (e: this lane's words of its 4 rows).  XS: x is
// staged in shared memory as fp16 (sq_kernel), read by gate|up units inside
// the row.
template <class F, bool XS>
__device__ __forceinline__ void cmp_unit(const MoeParams &p, bfd::Cmp &c, const typename Sq<F>::Ent &e, uint32_t u)
{
	using S = Sq<F>;
	const int lane = threadIdx.x & 31, t = lane & 3;
	const uint32_t d = c.k.down;
	const uint32_t col0 = c.k0 + u * 128;
	const bool full = p.vec && col0 + 32 * S::GPU_ <= c.cols;
	typename F::Lane ln[2][2];
#pragma unroll
	for (int m = 0; m < 2; m++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			ln[m][h].w[0] = F::lane_word(e.c[m][h].x), ln[m][h].w[1] = F::lane_word(e.c[m][h].y);
			if constexpr (F::Q4)
				ln[m][h].w[2] = e.c[m][h].z, ln[m][h].w[3] = e.c[m][h].w;
			else
				ln[m][h].w[4] = F::lane_word(e.x[m][h]);
		}
	// Group U of the unit with packed fp16 activations b (column multipliers
	// cm: 1, or 2^e of the redo) into sums.
	auto group = [&](auto UC, const uint32_t (&b)[4], const float (&cm)[2], float (&sums)[2][4]) {
		constexpr int U = decltype(UC)::value;
		// The group's scale of each row: lane (g, U) of the quad has it.
		uint32_t sw[2][2];
#pragma unroll
		for (int m = 0; m < 2; m++)
#pragma unroll
			for (int h = 0; h < 2; h++)
				sw[m][h] = __shfl_sync(0xffffffffu, e.s[m][h], (lane & ~3) | U);
#pragma unroll
		for (int m = 0; m < 2; m++) {
			uint32_t a[2][4];
			F::template group<U>(ln[m][0], a[0]);
			F::template group<U>(ln[m][1], a[1]);
			const float s0 = h2f(sw[m][0], 0), s1 = h2f(sw[m][1], 0);
			float cc[4] = {};
			mma_bf16<true>(cc, a[0][0], a[1][0], a[0][1], a[1][1], b[0], b[1]);
			mma_bf16<true>(cc, a[0][2], a[1][2], a[0][3], a[1][3], b[2], b[3]);
			sums[m][0] = fmaf(s0 * cm[0], cc[0], sums[m][0]);
			sums[m][1] = fmaf(s0 * cm[1], cc[1], sums[m][1]);
			sums[m][2] = fmaf(s1 * cm[0], cc[2], sums[m][2]);
			sums[m][3] = fmaf(s1 * cm[1], cc[3], sums[m][3]);
		}
	};
	auto load = [&](uint32_t uu, float (&x)[1][8]) {
		dec::unit_act<1>(p, d, c.xr, c.have, full, col0 + 32 * uu + 8 * t, c.cols, x);
	};
	const float one[2] = { 1.0f, 1.0f };
	// Groups 0..3 of the unit, each group's activations loaded (ld) one group
	// ahead of their use (grp), in the two registers of v.
	auto ahead = [&](auto &&ld, auto &&grp, auto (&v)[2]) {
		ld(0, v[0]);
		ld(1, v[1]);
		grp(std::integral_constant<int, 0>(), v[0]);
		ld(2, v[0]);
		grp(std::integral_constant<int, 1>(), v[1]);
		ld(3, v[1]);
		grp(std::integral_constant<int, 2>(), v[0]);
		grp(std::integral_constant<int, 3>(), v[1]);
	};
	// The usual pass: the activations from the staged fp16 x (gate|up, XS) or
	// through L1.
	auto pass = [&](float (&sums)[2][4]) {
		if (XS && !d && full) {
			const uint32_t xo = 2 * ((uint32_t)(c.xr[0] - p.x) + col0 + 8 * t);
			uint4 v[2];
			ahead([&](int uu, uint4 &o) { o = lds128(xo + 64 * uu); },
			      [&](auto UC, const uint4 &w) {
				      const uint32_t b[4] = { w.x, w.y, w.z, w.w };
				      group(UC, b, one, sums);
			      },
			      v);
		} else {
			float x[2][1][8];
			ahead(load,
			      [&](auto UC, const float (&xx)[1][8]) {
				      uint32_t b[4];
				      pack_b(xx[0], b);
				      group(UC, b, one, sums);
			      },
			      x);
		}
	};
	// The fp16 range guard: the unit again with each token's activations (f32,
	// from global memory) scaled by 2^-e and the sums scaled back.
	auto redo = [&](float (&sums)[2][4]) {
		auto grp = [&](auto UC) {
			float x[1][8];
			load(decltype(UC)::value, x);
			const int ex = unit_exp(x[0]);
			uint32_t b[4];
			pack_b(x[0], b, ldexpf(1.0f, -ex));
			float cm[2];
			col_mul(ex, t, cm);
			group(UC, b, cm, sums);
		};
		grp(std::integral_constant<int, 0>());
		grp(std::integral_constant<int, 1>());
		grp(std::integral_constant<int, 2>());
		grp(std::integral_constant<int, 3>());
	};
	// c.acc as it was before the unit, for the slow path
	float keep[2][4];
	memcpy(keep, c.acc, sizeof(keep));
	pass(c.acc);
	bool bad = false;
#pragma unroll
	for (int m = 0; m < 2; m++)
#pragma unroll
		for (int i = 0; i < 4; i++)
			bad |= !isfinite(c.acc[m][i]);
	if (__any_sync(0xffffffffu, bad)) {
		memcpy(c.acc, keep, sizeof(keep));
		redo(c.acc);
	}
}

// Stage rows 0 .. xrows - 1 of x (hidden floats each, hidden % 8 == 0) into
// shared memory as fp16, rounded as pack_b rounds them (the CTA's threads
// together; the caller synchronises).
__device__ __forceinline__ void stage_x(const MoeParams &p, uint32_t xrows)
{
	const uint32_t n = xrows * p.hidden / 8;
	for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
		const float4 a = __ldg(reinterpret_cast<const float4 *>(p.x) + 2 * i);
		const float4 b = __ldg(reinterpret_cast<const float4 *>(p.x) + 2 * i + 1);
		*reinterpret_cast<uint4 *>(g_smem + 16 * i) =
			make_uint4(pack_f16x2(a.x, a.y), pack_f16x2(a.z, a.w), pack_f16x2(b.x, b.y), pack_f16x2(b.z, b.w));
	}
}

// xrows: rows of x staged in shared memory as fp16 (0: none; XS: not 0).
template <int FMT, int NW, int D, bool PF, bool XS>
__global__ void __launch_bounds__(32 * NW, 1)
	sq_kernel(const __grid_constant__ MoeParams p, const __grid_constant__ Args a, uint32_t xrows)
{
	using F = FmtScalar<FMT>;
	using E = typename Sq<F>::Ent;
	const int lane = threadIdx.x & 31;
	// Warp w's first task is w; the others come from the counter (bf16_kernel).
	const uint32_t nwarps = gridDim.x * NW;
	auto fetch = [&]() -> uint32_t { return lane == 0 ? nwarps + atomicAdd(p.sync + bfd::FETCH, 1u) : 0u; };
	// PF (sq_pf=1; off by default: measured slower on the H200, 0.223 against
	// 0.251 of read at the Kimi shape): the issue side pulls the next task's rows into L2 when it starts a
	// task (and the first task's), ahead of the ring's loads.
	Iss ld = {};
	auto pf_next = [&]() {
		if constexpr (PF) {
			const uint32_t n = __shfl_sync(0xffffffffu, ld.nxt, 0);
			if (n < p.n_tasks)
				prefetch_task<F>(p, a, n);
		}
	};
	ld.t = blockIdx.x * NW + (threadIdx.x >> 5);
	if (ld.t < p.n_tasks) {
		ld.nxt = fetch();
		iss_setup<F>(p, a, ld);
		if constexpr (PF)
			prefetch_task<F>(p, a, ld.t);
		pf_next();
	}
	E w[D];
	uint32_t rt[D], ru[D];
	auto issue = [&](int i) {
		if (ld.t >= p.n_tasks) {
			rt[i] = NONE;
			return;
		}
		iss_load<F>(ld, w[i]);
		rt[i] = ld.t, ru[i] = ld.u;
		if (++ld.u == ld.nu) {
			ld.t = __shfl_sync(0xffffffffu, ld.nxt, 0);
			if (ld.t < p.n_tasks) {
				ld.nxt = fetch();
				iss_setup<F>(p, a, ld);
				pf_next();
			}
		}
	};
#pragma unroll
	for (int i = 0; i < D; i++)
		issue(i);
	// x is staged while the ring's first loads are in flight.
	if constexpr (XS) {
		stage_x(p, xrows);
		__syncthreads();
	}
	bfd::ring_run<D, false>(p, a, rt, [&](bfd::Cmp &c, int i) { cmp_unit<F, XS>(p, c, w[i], ru[i]); }, issue);
}

} // namespace sqd

// Row-streaming (GEMV) decode kernel of the fused MoE layer for the scalar
// formats q4 and q3 (included by moe_gpu.cu inside its anonymous namespace,
// after moe_dec_sq.cuh).
//
// Used for launches whose experts all have at most gv::NTMAX tokens and are
// all in one scalar format (run_dec_gv in moe_gpu.cu; kernel configuration
// sq_gv=1, the default; sq_gv=0 keeps moe_dec_sq.cuh's kernel).  Two
// launches, gate|up (h = silu(gate x) * up x, f32, into the h scratch) then
// down (y += weight * down h, atomics; with sq_pdl=1, the default, a
// programmatic dependent launch), each a grid of one 16-warp CTA per SM:
//   - a task is a step of rw consecutive rows of one expert's matrix (gate|up:
//     the same rows of gate and of up); lpr = 32 / rw lanes share a row, lane
//     sub of a row streams its chunks sub, sub + lpr, ... (q4: 16 code bytes =
//     8 weights of 4 groups; q3: 16 + 8 code bytes = 8 weights of 8 groups)
//     with 16-byte `ld.global.nc.L1::no_allocate` loads, and the chunk's group
//     scales (8 or 16 bytes); the row's sums meet by xor shuffles;
//   - each CTA takes a contiguous range of tasks, its warps every NW-th of
//     them; a warp's chunks come in batches of NB per lane through three
//     register buffers, the next two batches loaded (across task boundaries)
//     while one is multiplied (two buffers for more than one token): one
//     code body per buffer, no branch per chunk
//     (chunks past the row count with zero scales), no shared-memory
//     barriers after the start;
//   - the activations (x rows for gate|up, the CTA's slots' h rows for down)
//     are staged once per CTA in shared memory, scaled per row by a power of
//     two (so no fp16 range guard is needed) and permuted so that a lane's
//     16-byte shared load per group and token serves its chunk:
//       q4: 16-bit fixed point, split in an unsigned low and a signed high
//           byte plane in the byte order of the nibble extraction; per 8
//           weights: w & 0x0f0f0f0f and (w >> 4) & 0x0f0f0f0f (the codes as
//           bytes, no magic numbers), four dp4a (codes x low, codes x high),
//           the zero point folded in as -8 x the slice's activation sum
//           (staged too), one I2F and one FFMA with the group scale;
//       q3: fp16 in natural order; kfmt_scalar's exact fp16 codes (LOP3 +
//           HFMA2), four HFMA2 per 8 weights and token, the two halves of the
//           sum added in fp16, to f32 times the group scale.
// Accuracy: the reference computes in f32; q4 rounds each activation to 15
// bits of its row's largest magnitude (relative error ~1e-4 on a row's sum),
// q3 to fp16 (~2e-4), as the MMA kernels do.
namespace gv {

constexpr int NW = 16;          // warps per CTA
constexpr uint32_t NTMAX = 4;   // tokens per expert (template NT: 1 or 4)
constexpr uint32_t SRMAX = 64;  // staged activation rows per CTA
constexpr uint32_t SMEM_MAX = 200 * 1024;  // shared-memory bytes per CTA

struct Args {
	uint32_t down;        // 0: the gate|up launch, 1: the down launch
	uint32_t lsh;         // lanes per row = 1 << lsh
	uint32_t nbat;        // batches of NB chunks per lane and row
	uint32_t cpr;         // chunks per row
	uint32_t nrs;         // tasks (row steps) per slot
	uint32_t ntask, tpc;  // tasks of the launch, tasks per CTA
	uint32_t xrows;       // gate|up: x rows staged (all of them)
	uint32_t srows;       // rows of the staged region (>= any CTA's)
	uint32_t xoff, coff;  // shared-memory offsets of the staged values, of q4's zero-point terms
	uint32_t pdl;         // the down launch is a programmatic dependent launch (sq_pdl)
	uint32_t pf0, pf1;    // chained (p.chain): ranges [pf0, pf1) of p.pfp to prefetch into L2
};

__device__ __forceinline__ uint32_t dp4a_uu(uint32_t a, uint32_t b, uint32_t c)
{
	uint32_t d;
	asm("dp4a.u32.u32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	return d;
}
__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c)
{
	int d;
	asm("dp4a.u32.s32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	return d;
}

// 16 bytes of shared memory at a 32-bit shared-window address.
__device__ __forceinline__ uint4 lds(uint32_t a)
{
	uint4 v;
	asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
	return v;
}

template <int FMT> struct Pol;

// q4: chunk j of a row = code bytes 16j .. 16j + 15 (block j >> 3, half
// h = (j >> 2) & 1, slice t = j & 3: weights 8t .. 8t + 7 of groups 4h .. 4h + 3)
// and the 4 scales of those groups (8 bytes at 16 (j >> 3) + 8h).
template <> struct Pol<STRATA_FMT_Q4> {
	static constexpr uint32_t CPB = 8, NG = 4, NB = 4;
	static constexpr uint32_t SB = 20;   // staged bytes per 8 activations (16 values + 4 zero point)
	static constexpr int KBITS = 14;     // |staged value| <= 2^14
	struct Ch {
		uint4 c;
		uint2 s;
	};
	__device__ __forceinline__ static void load(Ch &h, const uint8_t *c, const uint8_t *s, uint32_t j)
	{
		h.c = bfd::ldw(c + 16 * j);
		h.s = sqd::ldw8(s + 2 * (j & ~3u));   // 16 (j >> 3) + 8 ((j >> 2) & 1)
	}
	// Scales of a chunk outside the row (its words are stale): zero.
	__device__ __forceinline__ static void mask(Ch &h, bool ok)
	{
		h.s.x = ok ? h.s.x : 0u, h.s.y = ok ? h.s.y : 0u;
	}
	// Activation slice q (columns 8q .. 8q + 7): chunk j and its group u.
	__device__ __forceinline__ static void slot_of(uint32_t q, uint32_t &j, uint32_t &u)
	{
		const uint32_t b = q >> 5, g = (q >> 2) & 7, t = q & 3;
		j = 8 * b + 4 * (g >> 2) + t, u = g & 3;
	}
	// Stage 8 activations v (already scaled) of chunk j, group u of a row at
	// x (values) and c (zero-point terms); cpr: chunks per row.
	__device__ __forceinline__ static void stage(const float (&v)[8], uint32_t xrow, uint32_t crow, uint32_t cpr,
						     uint32_t j, uint32_t u)
	{
		int q[8], sum = 0;
#pragma unroll
		for (int m = 0; m < 8; m++) {
			q[m] = max(-16384, min(16384, __float2int_rn(v[m])));
			sum += q[m];
		}
		// bytes of w & 0x0f0f0f0f: weights 0, 4, 1, 5; of (w >> 4) & ..: 2, 6, 3, 7
		auto pk = [&](int a, int b, int c, int d, int hi) -> uint32_t {
			auto by = [&](int m) -> uint32_t { return (uint32_t)(hi ? (q[m] >> 8) : q[m]) & 0xffu; };
			return by(a) | by(b) << 8 | by(c) << 16 | by(d) << 24;
		};
		*reinterpret_cast<uint4 *>(g_smem + xrow + 16 * (u * cpr + j)) =
			make_uint4(pk(0, 4, 1, 5, 0), pk(2, 6, 3, 7, 0), pk(0, 4, 1, 5, 1), pk(2, 6, 3, 7, 1));
		*reinterpret_cast<int *>(g_smem + crow + 4 * (4 * j + u)) = -8 * sum;
	}
	// acc[k] += the chunk's 32 weights x token k's staged activations (row
	// offsets xr[k], cr[k]).
	// xr, cr: shared addresses of token k's staged row (values, zero-point
	// terms); us: bytes between groups u and u + 1 of the values.
	template <int NT>
	__device__ __forceinline__ static void dot(const Ch &h, uint32_t j, uint32_t us, const uint32_t (&xr)[NT],
						   const uint32_t (&cr)[NT], float (&acc)[NT])
	{
		const float2 s01 = __half22float2(*reinterpret_cast<const __half2 *>(&h.s.x));
		const float2 s23 = __half22float2(*reinterpret_cast<const __half2 *>(&h.s.y));
		const float sc[4] = { s01.x, s01.y, s23.x, s23.y };
		const uint32_t w[4] = { h.c.x, h.c.y, h.c.z, h.c.w };
		uint4 cz[NT];
		uint32_t xa[NT];
#pragma unroll
		for (int k = 0; k < NT; k++)
			cz[k] = lds(cr[k] + 16 * j), xa[k] = xr[k] + 16 * j;
#pragma unroll
		for (int u = 0; u < 4; u++) {
			const uint32_t lo = w[u] & 0x0f0f0f0fu, hi = (w[u] >> 4) & 0x0f0f0f0fu;
#pragma unroll
			for (int k = 0; k < NT; k++) {
				const uint4 x = lds(xa[k] + u * us);
				const uint32_t c = u == 0 ? cz[k].x : u == 1 ? cz[k].y : u == 2 ? cz[k].z : cz[k].w;
				const uint32_t al = dp4a_uu(hi, x.y, dp4a_uu(lo, x.x, c));
				const int ah = dp4a_us(hi, x.w, dp4a_us(lo, x.z, 0));
				acc[k] = fmaf(sc[u], (float)(int)(al + ((uint32_t)ah << 8)), acc[k]);
			}
		}
	}
};

// q3: chunk j of a row = slice t = j & 3 of block b = j >> 2: low-bit bytes
// 96b + 16t .. + 15, high-bit bytes 96b + 64 + 8t .. + 7 (weights 8t .. 8t + 7
// of all 8 groups) and the block's 8 scales (16 bytes at 16b).
template <> struct Pol<STRATA_FMT_Q3> {
	using F = FmtQ3;
	static constexpr uint32_t CPB = 4, NG = 8, NB = 2;
	static constexpr uint32_t SB = 16;   // staged bytes per 8 activations (fp16)
	static constexpr int KBITS = 9;      // |staged value| <= 2^9
	struct Ch {
		uint4 c;
		uint2 x;
		uint4 s;
	};
	__device__ __forceinline__ static void load(Ch &h, const uint8_t *c, const uint8_t *s, uint32_t j)
	{
		const uint32_t b = j >> 2, t = j & 3;
		h.c = bfd::ldw(c + 96 * b + 16 * t);
		h.x = sqd::ldw8(c + 96 * b + 64 + 8 * t);
		h.s = bfd::ldw(s + 16 * b);
	}
	__device__ __forceinline__ static void mask(Ch &h, bool ok)
	{
		h.s.x = ok ? h.s.x : 0u, h.s.y = ok ? h.s.y : 0u, h.s.z = ok ? h.s.z : 0u, h.s.w = ok ? h.s.w : 0u;
	}
	__device__ __forceinline__ static void slot_of(uint32_t q, uint32_t &j, uint32_t &u)
	{
		j = 4 * (q >> 5) + (q & 3), u = (q >> 2) & 7;
	}
	__device__ __forceinline__ static void stage(const float (&v)[8], uint32_t xrow, uint32_t, uint32_t cpr,
						     uint32_t j, uint32_t u)
	{
		*reinterpret_cast<uint4 *>(g_smem + xrow + 16 * (u * cpr + j)) =
			make_uint4(pack_f16x2(v[0], v[1]), pack_f16x2(v[2], v[3]), pack_f16x2(v[4], v[5]),
				   pack_f16x2(v[6], v[7]));
	}
	template <int NT>
	__device__ __forceinline__ static void dot(const Ch &h, uint32_t j, uint32_t us, const uint32_t (&xr)[NT],
						   const uint32_t (&)[NT], float (&acc)[NT])
	{
		uint32_t xa[NT];
#pragma unroll
		for (int k = 0; k < NT; k++)
			xa[k] = xr[k] + 16 * j;
		typename F::Lane ln;
		ln.w[0] = h.c.x, ln.w[1] = h.c.y, ln.w[2] = h.c.z, ln.w[3] = h.c.w, ln.w[4] = h.x.x, ln.w[5] = h.x.y;
		const uint32_t sw[4] = { h.s.x, h.s.y, h.s.z, h.s.w };
		auto grp = [&](auto UC) {
			constexpr int U = decltype(UC)::value;
			uint32_t o[4];
			F::template group<U>(ln, o);
			const float sc = __half2float(__ushort_as_half((unsigned short)(sw[U >> 1] >> (16 * (U & 1)))));
#pragma unroll
			for (int k = 0; k < NT; k++) {
				const uint4 x = lds(xa[k] + U * us);
				__half2 a = __hmul2(*reinterpret_cast<const __half2 *>(&o[0]), *reinterpret_cast<const __half2 *>(&x.x));
				a = __hfma2(*reinterpret_cast<const __half2 *>(&o[1]), *reinterpret_cast<const __half2 *>(&x.y), a);
				a = __hfma2(*reinterpret_cast<const __half2 *>(&o[2]), *reinterpret_cast<const __half2 *>(&x.z), a);
				a = __hfma2(*reinterpret_cast<const __half2 *>(&o[3]), *reinterpret_cast<const __half2 *>(&x.w), a);
				acc[k] = fmaf(sc, __half2float(__hadd(__low2half(a), __high2half(a))), acc[k]);
			}
		};
		grp(std::integral_constant<int, 0>());
		grp(std::integral_constant<int, 1>());
		grp(std::integral_constant<int, 2>());
		grp(std::integral_constant<int, 3>());
		grp(std::integral_constant<int, 4>());
		grp(std::integral_constant<int, 5>());
		grp(std::integral_constant<int, 6>());
		grp(std::integral_constant<int, 7>());
	}
};

// Shared memory: the staged rows' sources (gate|up: x rows, down: the h rows
// of the CTA's slots), largest magnitudes and scales back (2^-e), then the
// values (srows x cpr x NG x 16 bytes) and, for q4, the zero-point terms.
struct Smem {
	static constexpr uint32_t SRC = 0, MAX = 8 * SRMAX, INV = 12 * SRMAX, END = 16 * SRMAX;
};

// The scale back of a staged row whose largest magnitude has bits mbits:
// 2^(e - KBITS) (the row is staged times 2^(KBITS - e)); inf or NaN: NaN out.
template <class P> __device__ __forceinline__ float row_inv(uint32_t mbits)
{
	const float m = __uint_as_float(mbits);
	int e = 0;
	if (m > 0.0f && m <= 3.0e38f)
		frexpf(m, &e);
	e = max(e, -100);
	return m <= 3.0e38f ? ldexpf(1.0f, e - P::KBITS) : __int_as_float(0x7fc00000);
}

// Stage this CTA's activation rows (the caller has issued its first loads).
template <class P> __device__ __forceinline__ void stage(const MoeParams &p, const Args &a, uint32_t &nr)
{
	const uint32_t d = a.down, cols = d ? p.inter : p.hidden, pc = p.tab[p.slot[0].fmt].pc[d];
	const float **src = reinterpret_cast<const float **>(g_smem + Smem::SRC);
	uint32_t *mx = reinterpret_cast<uint32_t *>(g_smem + Smem::MAX);
	float *inv = reinterpret_cast<float *>(g_smem + Smem::INV);
	if (!d) {
		nr = a.xrows;
		for (uint32_t r = threadIdx.x; r < nr; r += blockDim.x)
			src[r] = p.x + (uint64_t)r * p.hidden, mx[r] = 0;
	} else {
		// The h rows of the slots of this CTA's tasks, in assignment order.
		const uint32_t t0 = blockIdx.x * a.tpc, t1 = min(t0 + a.tpc, a.ntask);
		const uint32_t s0 = t0 / a.nrs, s1 = (t1 - 1) / a.nrs, a0 = p.slot[s0].a0;
		nr = p.slot[s1].a0 + p.slot[s1].ntok - a0;
		for (uint32_t s = s0 + threadIdx.x; s <= s1; s += blockDim.x)
			for (uint32_t i = 0; i < p.slot[s].ntok; i++)
				src[p.slot[s].a0 + i - a0] = p.h + p.slot[s].h_off + (uint64_t)i * p.inter,
							mx[p.slot[s].a0 + i - a0] = 0;
	}
	__syncthreads();
	const uint32_t nq = pc / 8, cpr = pc / 256 * P::CPB;
	if (nr * nq <= blockDim.x) {
		// One 8-column slice per thread (e.g. Qwen3-30B-A3B at 1 - 2 tokens): the
		// row is read once, into registers, for its largest magnitude and its
		// values.  nq is a multiple of 32, so a warp's slices are of one row.
		const uint32_t i = threadIdx.x, r = i / nq, q = i - r * nq;
		float v[8];
		uint32_t bits = 0;
		if (i < nr * nq) {
#pragma unroll
			for (int m = 0; m < 8; m++) {
				const uint32_t c = 8 * q + m;
				v[m] = c < cols ? src[r][c] : 0.0f;
				bits = max(bits, __float_as_uint(fabsf(v[m])));
			}
			bits = __reduce_max_sync(0xffffffffu, bits);
			if ((threadIdx.x & 31) == 0 && bits)
				atomicMax(mx + r, bits);
		}
		__syncthreads();
		if (i < nr)
			inv[i] = row_inv<P>(mx[i]);
		__syncthreads();
		if (i < nr * nq) {
			const float sc = 1.0f / inv[r];
#pragma unroll
			for (int m = 0; m < 8; m++)
				v[m] = 8 * q + m < cols ? v[m] * sc : 0.0f;
			uint32_t j, u;
			P::slot_of(q, j, u);
			P::stage(v, a.xoff + r * cpr * P::NG * 16, a.coff + r * cpr * P::NG * 4, cpr, j, u);
		}
		__syncthreads();
		return;
	}
	// Largest magnitude of each row, as bits (NaN wins: its bits are above inf's).
	for (uint32_t r = 0, i = threadIdx.x; r < nr; r++) {
		const float *q = src[r] - r * cols;
		uint32_t bits = 0;
		for (; i < (r + 1) * cols; i += blockDim.x)
			bits = max(bits, __float_as_uint(fabsf(q[i])));
		bits = __reduce_max_sync(0xffffffffu, bits);
		if ((threadIdx.x & 31) == 0 && bits)
			atomicMax(mx + r, bits);
	}
	__syncthreads();
	for (uint32_t r = threadIdx.x; r < nr; r += blockDim.x)
		inv[r] = row_inv<P>(mx[r]);
	__syncthreads();
	// The values: slice q (8 columns) of row r per thread.
	for (uint32_t i = threadIdx.x; i < nr * nq; i += blockDim.x) {
		const uint32_t r = i / nq, q = i - r * nq;
		const float sc = 1.0f / inv[r];
		float v[8];
#pragma unroll
		for (int m = 0; m < 8; m++) {
			const uint32_t c = 8 * q + m;
			v[m] = c < cols ? src[r][c] * sc : 0.0f;
		}
		uint32_t j, u;
		P::slot_of(q, j, u);
		P::stage(v, a.xoff + r * cpr * P::NG * 16, a.coff + r * cpr * P::NG * 4, cpr, j, u);
	}
	__syncthreads();
}

template <int FMT, int NT>
__global__ void __launch_bounds__(32 * NW, 1) gv_kernel(const __grid_constant__ MoeParams p, const __grid_constant__ Args a)
{
	using P = Pol<FMT>;
	using Ch = typename P::Ch;
	constexpr uint32_t NB = P::NB;
	const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const uint32_t lsh = a.lsh, sub = lane & ((1u << lsh) - 1), rr = lane >> lsh, rw = 32u >> lsh;
	const uint32_t t1 = min((blockIdx.x + 1) * a.tpc, a.ntask);
	const uint32_t d = a.down, nph = d ? 1 : 2;
	const FmtTab &f = p.tab[FMT];
	const uint32_t nrows = d ? p.hidden : p.inter, cpr = a.cpr;
	// Issue side: task, phase (gate, up / down), batch; this lane's row
	// (codes, scales) and its next chunk j (and its last one, jl).
	uint32_t it = blockIdx.x * a.tpc + warp, iph = 0, ibt = 0, ij = 0;
	const uint8_t *ic = nullptr, *is = nullptr;
	bool iv = false;
	auto iss_set = [&]() {
		const uint32_t s = it / a.nrs, row = (it - s * a.nrs) * rw + rr;
		const uint8_t *mat = p.slot[s].ext + f.off[d ? 2 : iph];
		iv = row < nrows;
		ic = mat + (uint64_t)row * f.rowc[d];
		is = mat + f.soff[d] + (uint64_t)row * f.rows_[d];
		ij = sub;
	};
	auto load = [&](Ch (&b)[NB]) {
		if (it >= t1)
			return;
#pragma unroll
		for (uint32_t i = 0; i < NB; i++) {
			const uint32_t j = ij + (i << lsh);
			if (iv && j < cpr)
				P::load(b[i], ic, is, j);
		}
		ij += NB << lsh;
		if (++ibt == a.nbat) {
			ibt = 0;
			if (++iph == nph)
				iph = 0, it += NW;
			if (it < t1)
				iss_set();
		}
	};
	if (it < t1)
		iss_set();
	// Three buffers (one token: two batches in flight while one is
	// multiplied), two for more tokens (their registers hold the sums).
	constexpr bool B3 = NT == 1;
	Ch b0[NB], b1[NB], b2[B3 ? NB : 1];
	load(b0);
	if constexpr (B3)
		load(b1);
	// Programmatic dependent launch (a.pdl): the down grid may start on an SM
	// as soon as the gate|up CTA there has ended, load its first weights, and
	// wait here for the whole gate|up grid (its h) before staging.  Chained
	// (p.chain, a stack of layers): both launches are programmatic dependent
	// ones, prefetch the next launch's weights into L2, let it start, and
	// wait for the earlier launches (x is the previous layer's y; h and y are
	// written only after the previous layer's down launch has read h).
	if (p.chain) {
		l2_prefetch(p, a.pf0, a.pf1);
		pdl_trigger();
		pdl_wait();
	} else if (a.pdl) {
		if (d)
			pdl_wait();
		else
			pdl_trigger();
	}
	uint32_t nr;
	stage<P>(p, a, nr);
	// Compute side.
	const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(g_smem);
	const uint32_t us = 16 * cpr, xstride = cpr * P::NG * 16, cstride = cpr * P::NG * 4;
	uint32_t ct = blockIdx.x * a.tpc + warp, cph = 0, cbt = 0, cj = 0;
	const uint32_t srow0 = d && ct < a.ntask ? p.slot[(blockIdx.x * a.tpc) / a.nrs].a0 : 0;
	uint32_t xr[NT], cr[NT], slot = 0, row = 0;
	float acc[NT], accg[NT];
	const float *inv = reinterpret_cast<const float *>(g_smem + Smem::INV);
	auto cmp_set = [&]() {
		slot = ct / a.nrs;
		row = (ct - slot * a.nrs) * rw + rr;
		const Slot &s = p.slot[slot];
#pragma unroll
		for (int k = 0; k < NT; k++) {
			const uint32_t kk = (uint32_t)k < s.ntok ? k : 0;
			const uint32_t r = d ? s.a0 + kk - srow0 : p.tok[s.a0 + kk];
			xr[k] = sbase + a.xoff + r * xstride, cr[k] = sbase + a.coff + r * cstride;
			acc[k] = accg[k] = 0.0f;
		}
	};
	// The task's sums are complete: h, or y.
	auto finish = [&]() {
		const Slot &s = p.slot[slot];
#pragma unroll
		for (int k = 0; k < NT; k++)
			for (uint32_t o = 1u << lsh >> 1; o; o >>= 1) {
				acc[k] += __shfl_xor_sync(0xffffffffu, acc[k], o);
				if (!d)
					accg[k] += __shfl_xor_sync(0xffffffffu, accg[k], o);
			}
		if (sub || row >= nrows)
			return;
#pragma unroll
		for (int k = 0; k < NT; k++) {
			if ((uint32_t)k >= s.ntok)
				break;
			const uint32_t ai = s.a0 + k;
			if (d) {
				atomicAdd(p.y + (uint64_t)p.tok[ai] * p.hidden + row, p.w[ai] * acc[k] * inv[ai - srow0]);
			} else {
				const float sb = inv[p.tok[ai]], g = accg[k] * sb, u = acc[k] * sb;
				p.h[s.h_off + (uint64_t)k * p.inter + row] = g / (1.0f + expf(-g)) * u;
			}
		}
	};
	// Chunks outside the row or the matrix (stale words) count with zero
	// scales at the row's last chunk: no branch per chunk.
	auto compute = [&](Ch (&b)[NB]) {
		if (cph == 0 && cbt == 0)
			cmp_set();
		if (cbt == 0)
			cj = sub;
		const bool rv = row < nrows;
#pragma unroll
		for (uint32_t i = 0; i < NB; i++) {
			const uint32_t j = cj + (i << lsh);
			P::mask(b[i], rv && j < cpr);
			P::template dot<NT>(b[i], min(j, cpr - 1), us, xr, cr, acc);
		}
		cj += NB << lsh;
		if (++cbt == a.nbat) {
			cbt = 0;
			if (!d && cph == 0) {
				cph = 1;
#pragma unroll
				for (int k = 0; k < NT; k++)
					accg[k] = acc[k], acc[k] = 0.0f;
			} else {
				finish();
				cph = 0, ct += NW;
			}
		}
	};
	if constexpr (B3) {
		while (ct < t1) {
			load(b2);
			compute(b0);
			if (ct >= t1)
				break;
			load(b0);
			compute(b1);
			if (ct >= t1)
				break;
			load(b1);
			compute(b2);
		}
	} else {
		(void)b2;
		while (ct < t1) {
			load(b1);
			compute(b0);
			if (ct >= t1)
				break;
			load(b0);
			compute(b1);
		}
	}
	(void)nr;
}

} // namespace gv

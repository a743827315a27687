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
//   - each CTA takes a contiguous range of tasks, its warps every W-th of
//     them (W = 16; at one token also 12 or 8, sq_gvw); a warp's chunks come
//     in batches of NB per lane through three register buffers (W = 12: four,
//     8: six), the next batches loaded (across task boundaries) while one is
//     multiplied (two buffers for more than one token): one
//     code body per buffer, no branch per chunk, no shared-memory barriers
//     after the start; lanes per row are a template parameter (2 - 16) where
//     the launch's rows and batches divide evenly (no masks, immediate
//     shared-memory offsets, one scale load per batch at 2 lanes per row),
//     else a run-time value (chunks past the row count with zero scales);
//   - at 1 - 2 tokens with sq_gvx=1 (the default; q4, q3's integer loop, 16
//     warps, where the rows and chunks divide evenly), a lane takes the same
//     chunk of NB consecutive rows per batch instead (gv_kernel's XR: q4 4
//     rows, q3 2; 8 - 32 lanes per row set), one set of shared loads of the
//     activations serving them all;
//   - with sq_l2pf=1 or 2 (default 0), lane 0 of each row prefetches the row
//     (codes, scales) of the warp's (task, matrix) step that many steps
//     ahead into L2 with one cp.async.bulk.prefetch (measured slower:
//     experiments/kernels/README.md);
//   - the activations (x rows for gate|up, the CTA's slots' h rows for down)
//     are staged once per CTA in shared memory, scaled per row by a power of
//     two (so no fp16 range guard is needed) and permuted so that a lane's
//     16-byte shared load per group and token serves its chunk; rows of up
//     to two 8-column slices per thread in one pass from registers (sq_gvs=1,
//     2), a gate|up launch that is not chained loading its x slices before
//     its first weights (sq_gvs=2, the default):
//       q4: 16-bit fixed point pairs in the byte order of the nibble
//           extraction; per 8 weights: w & 0x0f0f0f0f and (w >> 4) &
//           0x0f0f0f0f (the codes as bytes), four dp2a (two activations x two
//           code bytes each), the zero point folded in as -8 x the slice's
//           activation sum (staged too), one I2F and one FFMA with the group
//           scale (sq_gv=2: the earlier loop, byte planes and four dp4a);
//       q3 (sq_q3i=1, the default): as q4, the codes taken as bytes by
//           masks and shifts (struct Q3i); sq_q3i=0: fp16 in natural
//           order, kfmt_scalar's exact fp16 codes (LOP3 + HFMA2), four HFMA2
//           per 8 weights and token, the two halves of the sum added in fp16,
//           to f32 times the group scale.
// Accuracy: the reference computes in f32; q4 rounds each activation to 15
// bits of its row's largest magnitude (relative error ~1e-4 on a row's sum),
// as q3 with sq_q3i=1; q3 with sq_q3i=0 to fp16 (~2e-4), as the MMA kernels do.
namespace gv {

constexpr int NW = 16;          // warps per CTA
constexpr uint32_t NTMAX = 4;   // tokens per expert (template NT: 1, 2 or 4)
// q4 launches of 3 - 4 tokens per expert above this many weights take the
// ring kernel (run_dec_gv)
constexpr uint64_t Q4_RING_WEIGHTS = 128ull << 20;
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
	uint32_t l2pf;        // rows prefetched into L2 this many (task, matrix) steps ahead (sq_l2pf)
	uint32_t pf0, pf1;    // chained (p.chain): ranges [pf0, pf1) of p.pfp to prefetch into L2
	uint32_t spt = 1;     // staging: 8-column slices per thread read once into registers (1 or 2, sq_gvs)
	uint32_t xearly = 0;  // gate|up, not chained: x loaded before the first weights (sq_gvs=2)
	uint32_t rl = 1;      // rows per lane (sq_gvx: the policy's NB, gv_kernel's XR; else 1)
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

// Bring n bytes at q (16-byte aligned, n a multiple of 16) into L2.
__device__ __forceinline__ void l2_prefetch(const uint8_t *q, uint32_t n)
{
	asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(q), "r"(n) : "memory");
}

// 16 bytes of shared memory at a 32-bit shared-window address (4: ldsw32).
__device__ __forceinline__ uint4 lds(uint32_t a)
{
	uint4 v;
	asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
	return v;
}

__device__ __forceinline__ uint2 lds8(uint32_t a)
{
	uint2 v;
	asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(a));
	return v;
}

// c + the two signed 16-bit halves of a x code bytes 0, 1 (HI: 2, 3) of b.
template <bool HI> __device__ __forceinline__ int dp2a(uint32_t a, uint32_t b, int c)
{
	int d;
	if constexpr (HI)
		asm("dp2a.hi.s32.u32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	else
		asm("dp2a.lo.s32.u32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	return d;
}

// q4: c + a slice's 8 staged activations (x, in the nibble order) times the
// 8 codes of word w (w & 0x0f0f0f0f: weights 0, 4, 1, 5; (w >> 4) &
// 0x0f0f0f0f: 2, 6, 3, 7): four dp2a.
__device__ __forceinline__ int q4_dot8(uint4 x, uint32_t w, int c)
{
	const uint32_t lo = w & 0x0f0f0f0fu, hi = (w >> 4) & 0x0f0f0f0fu;
	return dp2a<1>(x.w, hi, dp2a<0>(x.z, hi, dp2a<1>(x.y, lo, dp2a<0>(x.x, lo, c))));
}
// q3 (Q3i): the code bytes of group pair p (groups 2p, 2p + 1) of a chunk's
// words (c: words 0, 1 of half blocks 0 and 1, x: word 2 of each; format
// version 3, quant_scalar.h): q[a] holds weights 2a, 2a + 1 of group 2p
// (bytes 0, 1) and 2p + 1 (bytes 2, 3): q[0..2] a whole 3-bit field each
// (a mask, and a shift for the odd fields), q[3] the low bits of word P and
// the high bits of word 2 (two shifts, two masks).
template <int p> __device__ __forceinline__ void q3_codes(uint4 c, uint2 x, uint32_t (&q)[4])
{
	constexpr int H = p >> 1, P = p & 1;
	const uint32_t w[3] = { H ? c.z : c.x, H ? c.w : c.y, H ? x.y : x.x };
#pragma unroll
	for (int a = 0; a < 3; a++) {
		const int f = 3 * P + a;
		q[a] = (w[f >> 1] >> (3 * (f & 1))) & 0x07070707u;
	}
	q[3] = ((w[P] >> 6) & 0x03030303u) | ((w[2] >> (4 + P)) & 0x04040404u);
}
// c + a group's 8 staged activations (x, natural order) times its codes in
// q (HI: bytes 2, 3 of each word, else 0, 1): four dp2a.
template <bool HI> __device__ __forceinline__ int q3_dot8(uint4 x, const uint32_t (&q)[4], int c)
{
	return dp2a<HI>(x.w, q[3], dp2a<HI>(x.z, q[2], dp2a<HI>(x.y, q[1], dp2a<HI>(x.x, q[0], c))));
}

// Staged-activation addresses per token and group where there are at most 8
// of them, else per token (group u at + u x us: registers).
template <int NT, uint32_t NG> __host__ __device__ constexpr bool per_group() { return NT * NG <= 8; }
// A batch's addresses from its task's (xu, as the kernel sets them): at the
// batch's first chunk j0 (FULL) or at the row's start.
template <bool FULL, int NT, uint32_t NG>
__device__ __forceinline__ void batch_ptrs(const uint32_t (&xu)[NT][NG], uint32_t j0, uint32_t (&xb)[NT][NG])
{
#pragma unroll
	for (int k = 0; k < NT; k++)
#pragma unroll
		for (uint32_t u = 0; u < NG; u++)
			xb[k][u] = (per_group<NT, NG>() ? xu[k][u] : xu[k][0]) + (FULL ? 16 * j0 : 0);
}

// A batch's zero-point term addresses from its task's (cu): at the batch's
// first chunk j0 (FULL: zb bytes of terms per chunk) or at the row's start.
template <bool FULL, int NT>
__device__ __forceinline__ void batch_zp(const uint32_t (&cu)[NT], uint32_t j0, uint32_t zb, uint32_t (&cb)[NT])
{
#pragma unroll
	for (int k = 0; k < NT; k++)
		cb[k] = cu[k] + (FULL ? zb * j0 : 0);
}

// 8 activations (already scaled) to 15-bit fixed point; their sum.
__device__ __forceinline__ int fix8(const float (&v)[8], int (&q)[8])
{
	int sum = 0;
#pragma unroll
	for (int m = 0; m < 8; m++) {
		q[m] = max(-16384, min(16384, __float2int_rn(v[m])));
		sum += q[m];
	}
	return sum;
}

// Stage 8 activations (already scaled) as 15-bit fixed point: 16-bit pairs
// (2i, 2i + 1), or with NIB (i, i + 4) (q4's nibble order), at shared offset
// xa, and -zm x their sum (the zero-point term, zm the format's zero code) at
// ca.
template <bool NIB> __device__ __forceinline__ void stage_fixed(const float (&v)[8], int zm, uint32_t xa, uint32_t ca)
{
	int q[8];
	const int sum = fix8(v, q);
	uint32_t w[4];
#pragma unroll
	for (int i = 0; i < 4; i++)
		w[i] = ((uint32_t)q[NIB ? i : 2 * i] & 0xffffu) | (uint32_t)q[NIB ? i + 4 : 2 * i + 1] << 16;
	*reinterpret_cast<uint4 *>(g_smem + xa) = make_uint4(w[0], w[1], w[2], w[3]);
	*reinterpret_cast<int *>(g_smem + ca) = -zm * sum;
}

// The formats' policies: a chunk's layout, the staging of 8 activations, and
// a batch of NB chunks per lane: Buf<LSH> (its registers), load<LSH, FULL>
// (chunks j0 + (i << lsh), i < NB) and dot<NT, LSH, FULL> (acc[k] += the
// batch's weights x token k's staged activations; xu[k][u]: shared address of
// group u of token k's staged row, cu[k]: of its zero-point terms).  LSH: the
// lanes per row (1 << LSH) at compile time, so shared loads take immediate
// offsets and the chunks of a batch share their scale loads where they lie in
// one block; -1: lsh at run time.  FULL: every batch lies inside its row and
// every row inside the matrix (the launch's shapes divide evenly): no masks;
// otherwise chunks outside the row (stale words) count with zero scales at
// the row's last chunk.
//
// q4: chunk j of a row = code bytes 16j .. 16j + 15 (block j >> 3, half
// h = (j >> 2) & 1, slice t = j & 3: weights 8t .. 8t + 7 of groups 4h .. 4h + 3)
// and the 4 scales of those groups (8 bytes at 16 (j >> 3) + 8h).  Staged as
// 16-bit fixed point pairs in the order of the nibble extraction (w &
// 0x0f0f0f0f: weights 0, 4, 1, 5; (w >> 4) & 0x0f0f0f0f: 2, 6, 3, 7), so that
// dp2a.lo / dp2a.hi take them against the code bytes: per 8 weights 3 ALU ops
// for the codes, 4 dp2a, one I2F and one FFMA; the zero point is -8 x the
// slice's activation sum (staged too, the start of the dp2a chain).
struct Q4 {
	static constexpr uint32_t CPB = 8, NG = 4, NB = 4;
	static constexpr uint32_t SB = 20;   // staged bytes per 8 activations (16 values + 4 zero point)
	static constexpr int KBITS = 14;     // |staged value| <= 2^14
	// Scale words (the 4 scales of a chunk): one per batch at 1 lane per row
	// (its 4 chunks are one half block), two at 2 (one block), else per chunk.
	template <int LSH> struct Buf {
		static constexpr uint32_t NS = LSH == 0 ? 1 : LSH == 1 ? 2 : NB;
		uint4 c[NB];
		uint2 s[NS];
	};
	template <int LSH, bool FULL>
	__device__ __forceinline__ static void load(Buf<LSH> &b, const uint8_t *c, const uint8_t *s, uint32_t j0,
						    uint32_t lsh, bool iv, uint32_t cpr)
	{
#pragma unroll
		for (uint32_t i = 0; i < NB; i++) {
			const uint32_t j = j0 + (i << lsh);
			if (FULL || (iv && j < cpr))
				b.c[i] = bfd::ldw(c + 16 * j);
			if constexpr (Buf<LSH>::NS == NB)
				if (FULL || (iv && j < cpr))
					b.s[i] = sqd::ldw8(s + 2 * (j & ~3u));
		}
		if constexpr (LSH == 0) {
			if (FULL || (iv && j0 < cpr))
				b.s[0] = sqd::ldw8(s + 2 * j0);
		} else if constexpr (LSH == 1) {
			if (FULL || (iv && j0 < cpr)) {
				const uint4 t = bfd::ldw(s + 2 * (j0 & ~7u));
				b.s[0] = make_uint2(t.x, t.y), b.s[1] = make_uint2(t.z, t.w);
			}
		}
	}
	__device__ __forceinline__ static void slot_of(uint32_t q, uint32_t &j, uint32_t &u)
	{
		const uint32_t b = q >> 5, g = (q >> 2) & 7, t = q & 3;
		j = 8 * b + 4 * (g >> 2) + t, u = g & 3;
	}
	__device__ __forceinline__ static void stage(const float (&v)[8], uint32_t xrow, uint32_t crow, uint32_t cpr,
						     uint32_t j, uint32_t u)
	{
		stage_fixed<true>(v, 8, xrow + 16 * (u * cpr + j), crow + 4 * (4 * j + u));
	}
	template <int NT, int LSH, bool FULL>
	__device__ __forceinline__ static void dot(const Buf<LSH> &b, uint32_t j0, uint32_t lsh, uint32_t cpr, bool rv, uint32_t us,
						   const uint32_t (&xu)[NT][NG], const uint32_t (&cu)[NT], float (&acc)[NT])
	{
		// a pointer per token and group (PTR), or per token plus u x us
		constexpr bool PTR = per_group<NT, NG>();
		uint32_t xb[NT][NG], cb[NT];
		batch_ptrs<FULL>(xu, j0, xb);
		batch_zp<FULL>(cu, j0, 16, cb);
#pragma unroll
		for (uint32_t i = 0; i < NB; i++) {
			const uint32_t j = j0 + (i << lsh);
			const uint2 sw = b.s[i * Buf<LSH>::NS / NB];
			const float2 s01 = __half22float2(*reinterpret_cast<const __half2 *>(&sw.x));
			const float2 s23 = __half22float2(*reinterpret_cast<const __half2 *>(&sw.y));
			float sc[4] = { s01.x, s01.y, s23.x, s23.y };
			// shared offset of the chunk from the batch's (FULL) or the row's start
			uint32_t o = 16 * (i << lsh);
			if constexpr (!FULL) {
				const bool ok = rv && j < cpr;
#pragma unroll
				for (int u = 0; u < 4; u++)
					sc[u] = ok ? sc[u] : 0.0f;
				o = 16 * min(j, cpr - 1);
			}
			const uint32_t w[4] = { b.c[i].x, b.c[i].y, b.c[i].z, b.c[i].w };
			// zero-point terms: one 16-byte load per token, or (4 tokens, for
			// registers) one 4-byte load per token and group
			constexpr bool CZ4 = NT <= 2;
			uint4 cz[CZ4 ? NT : 1];
#pragma unroll
			for (int k = 0; k < (CZ4 ? NT : 0); k++)
				cz[k] = lds(cb[k] + o);
#pragma unroll
			for (int u = 0; u < 4; u++) {
#pragma unroll
				for (int k = 0; k < NT; k++) {
					const uint4 x = lds((PTR ? xb[k][u] : xb[k][0] + u * us) + o);
					int c;
					if constexpr (CZ4)
						c = (int)(u == 0 ? cz[k].x : u == 1 ? cz[k].y : u == 2 ? cz[k].z : cz[k].w);
					else
						c = (int)ldsw32(cb[k] + o + 4 * u);
					acc[k] = fmaf(sc[u], (float)q4_dot8(x, w[u], c), acc[k]);
				}
			}
		}
	}
	// Several rows per lane (sq_gvx): a batch is chunk j of rows 0 .. NB - 1
	// from c, s (pitches rc, rs bytes), b.c[i] / b.s[i] row i's; one set of
	// shared loads (x of the 4 groups, the zero-point terms) serves all the
	// rows: acc[k * NB + i] += row i's weights x token k's activations (xu,
	// us as dot's).
	template <int LSH>
	__device__ __forceinline__ static void load_xr(Buf<LSH> &b, const uint8_t *c, const uint8_t *s, uint32_t j,
						       uint32_t rc, uint32_t rs)
	{
		static_assert(Buf<LSH>::NS == NB, "a scale word per row");
#pragma unroll
		for (uint32_t i = 0; i < NB; i++) {
			b.c[i] = bfd::ldw(c + i * rc + 16 * j);
			b.s[i] = sqd::ldw8(s + i * rs + 2 * (j & ~3u));
		}
	}
	template <int NT, int LSH>
	__device__ __forceinline__ static void dot_xr(const Buf<LSH> &b, uint32_t j, uint32_t us, const uint32_t (&xu)[NT][NG],
						      const uint32_t (&cu)[NT], float (&acc)[NT * NB])
	{
		constexpr bool PTR = per_group<NT, NG>();
		if constexpr (NT > 1) {
			// group by group: a group's activations of every token (4 + 1
			// words each), the codes spread once per row and group for all
			// the tokens (the token-outer order below spilled at 2 tokens)
#pragma unroll
			for (int u = 0; u < 4; u++) {
				uint4 x[NT];
				int c0[NT];
#pragma unroll
				for (int k = 0; k < NT; k++)
					x[k] = lds((PTR ? xu[k][u] : xu[k][0] + u * us) + 16 * j), c0[k] = (int)ldsw32(cu[k] + 16 * j + 4 * u);
#pragma unroll
				for (uint32_t i = 0; i < NB; i++) {
					const uint32_t sw = u < 2 ? b.s[i].x : b.s[i].y;
					const float sc = __half2float(__ushort_as_half((unsigned short)(sw >> (16 * (u & 1)))));
					const uint32_t w = u == 0 ? b.c[i].x : u == 1 ? b.c[i].y : u == 2 ? b.c[i].z : b.c[i].w;
#pragma unroll
					for (int k = 0; k < NT; k++)
						acc[k * NB + i] = fmaf(sc, (float)q4_dot8(x[k], w, c0[k]), acc[k * NB + i]);
				}
			}
		} else {
#pragma unroll
			for (int k = 0; k < NT; k++) {
				uint4 x[4];
#pragma unroll
				for (int u = 0; u < 4; u++)
					x[u] = lds((PTR ? xu[k][u] : xu[k][0] + u * us) + 16 * j);
				const uint4 cz = lds(cu[k] + 16 * j);
				const int c0[4] = { (int)cz.x, (int)cz.y, (int)cz.z, (int)cz.w };
#pragma unroll
				for (uint32_t i = 0; i < NB; i++) {
					const float2 s01 = __half22float2(*reinterpret_cast<const __half2 *>(&b.s[i].x));
					const float2 s23 = __half22float2(*reinterpret_cast<const __half2 *>(&b.s[i].y));
					const float sc[4] = { s01.x, s01.y, s23.x, s23.y };
					const uint32_t w[4] = { b.c[i].x, b.c[i].y, b.c[i].z, b.c[i].w };
#pragma unroll
					for (int u = 0; u < 4; u++)
						acc[k * NB + i] = fmaf(sc[u], (float)q4_dot8(x[u], w[u], c0[u]), acc[k * NB + i]);
				}
			}
		}
	}
};

// q3: chunk j of a row = slice t = j & 3 of block b = j >> 2: words 0, 1 of
// both half blocks at 96b + 16t .. + 15, their words 2 at 96b + 64 + 8t .. + 7
// (weights 8t .. 8t + 7 of all 8 groups; quant_scalar.h, format version 3)
// and the block's 8 scales (16 bytes at 16b), one load per
// batch where its chunks lie in one block (1 or 2 lanes per row).  Staged as
// fp16 in natural order; kfmt_scalar's exact fp16 codes (LOP3 + HFMA2), four
// HFMA2 per 8 weights and token, the two halves added in fp16, to f32 times
// the group scale.
struct Q3 {
	using F = FmtQ3;
	static constexpr uint32_t CPB = 4, NG = 8, NB = 2;
	static constexpr uint32_t SB = 16;   // staged bytes per 8 activations (fp16)
	static constexpr int KBITS = 9;      // |staged value| <= 2^9
	template <int LSH> struct Buf {
		static constexpr uint32_t NS = LSH == 0 || LSH == 1 ? 1 : NB;
		uint4 c[NB];
		uint2 x[NB];
		uint4 s[NS];
	};
	template <int LSH, bool FULL>
	__device__ __forceinline__ static void load(Buf<LSH> &b, const uint8_t *c, const uint8_t *s, uint32_t j0,
						    uint32_t lsh, bool iv, uint32_t cpr)
	{
#pragma unroll
		for (uint32_t i = 0; i < NB; i++) {
			const uint32_t j = j0 + (i << lsh), k = j >> 2, t = j & 3;
			if (FULL || (iv && j < cpr)) {
				b.c[i] = bfd::ldw(c + 96 * k + 16 * t);
				b.x[i] = sqd::ldw8(c + 96 * k + 64 + 8 * t);
				if constexpr (Buf<LSH>::NS == NB)
					b.s[i] = bfd::ldw(s + 16 * k);
			}
		}
		if constexpr (Buf<LSH>::NS == 1)
			if (FULL || (iv && j0 < cpr))
				b.s[0] = bfd::ldw(s + 16 * (j0 >> 2));
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
	template <int NT, int LSH, bool FULL>
	__device__ __forceinline__ static void dot(const Buf<LSH> &b, uint32_t j0, uint32_t lsh, uint32_t cpr, bool rv, uint32_t us,
						   const uint32_t (&xu)[NT][NG], const uint32_t (&)[NT], float (&acc)[NT])
	{
		constexpr bool PTR = per_group<NT, NG>();
		uint32_t xb[NT][NG];
		batch_ptrs<FULL>(xu, j0, xb);
#pragma unroll
		for (uint32_t i = 0; i < NB; i++) {
			const uint32_t j = j0 + (i << lsh);
			const uint4 s4 = b.s[i * Buf<LSH>::NS / NB];
			const uint32_t sw[4] = { s4.x, s4.y, s4.z, s4.w };
			uint32_t o = 16 * (i << lsh);
			bool ok = true;
			if constexpr (!FULL) {
				ok = rv && j < cpr;
				o = 16 * min(j, cpr - 1);
			}
			typename F::Lane ln;
			F::q3_lane(b.c[i], b.x[i], ln);
			auto grp = [&](auto UC) {
				constexpr int U = decltype(UC)::value;
				uint32_t q[4];
				F::template group<U>(ln, q);
				float sc = __half2float(__ushort_as_half((unsigned short)(sw[U >> 1] >> (16 * (U & 1)))));
				if constexpr (!FULL)
					sc = ok ? sc : 0.0f;
#pragma unroll
				for (int k = 0; k < NT; k++) {
					const uint4 x = lds((PTR ? xb[k][U] : xb[k][0] + U * us) + o);
					__half2 a = __hmul2(*reinterpret_cast<const __half2 *>(&q[0]), *reinterpret_cast<const __half2 *>(&x.x));
					a = __hfma2(*reinterpret_cast<const __half2 *>(&q[1]), *reinterpret_cast<const __half2 *>(&x.y), a);
					a = __hfma2(*reinterpret_cast<const __half2 *>(&q[2]), *reinterpret_cast<const __half2 *>(&x.z), a);
					a = __hfma2(*reinterpret_cast<const __half2 *>(&q[3]), *reinterpret_cast<const __half2 *>(&x.w), a);
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
	}
};

// q3 with integer dot products (kernel configuration sq_q3i=1, the default):
// the chunk as Q3's; the codes taken as bytes so that dp2a takes them as q4's
// are taken.  Byte 2 gamma + e of a word holds weights 2a + e of group 2i +
// gamma (format version 3), so per group pair q3_codes makes four words of
// code bytes: three whole 3-bit fields (a mask, and a shift for the odd
// fields) and one split code (low bits of one word, high bit of word 2: two
// shifts, two masks), 10 instructions per 16 codes against the 15 of version
// 2's bit planes; dp2a.lo / .hi take each word against group 2i's / 2i + 1's
// activation pair a.  Activations staged as q4's (16-bit fixed point, natural order,
// pairs (2a, 2a + 1)), the zero point -4 x the slice's sum starting the chain.
struct Q3i {
	static constexpr uint32_t CPB = 4, NG = 8, NB = 2;
	static constexpr uint32_t SB = 20;
	static constexpr int KBITS = 14;
	template <int LSH> using Buf = Q3::Buf<LSH>;
	template <int LSH, bool FULL>
	__device__ __forceinline__ static void load(Buf<LSH> &b, const uint8_t *c, const uint8_t *s, uint32_t j0,
						    uint32_t lsh, bool iv, uint32_t cpr)
	{
		Q3::load<LSH, FULL>(b, c, s, j0, lsh, iv, cpr);
	}
	__device__ __forceinline__ static void slot_of(uint32_t q, uint32_t &j, uint32_t &u) { Q3::slot_of(q, j, u); }
	__device__ __forceinline__ static void stage(const float (&v)[8], uint32_t xrow, uint32_t crow, uint32_t cpr,
						     uint32_t j, uint32_t u)
	{
		stage_fixed<false>(v, 4, xrow + 16 * (u * cpr + j), crow + 4 * (8 * j + u));
	}
	template <int NT, int LSH, bool FULL>
	__device__ __forceinline__ static void dot(const Buf<LSH> &b, uint32_t j0, uint32_t lsh, uint32_t cpr, bool rv, uint32_t us,
						   const uint32_t (&xu)[NT][NG], const uint32_t (&cu)[NT], float (&acc)[NT])
	{
		constexpr bool PTR = per_group<NT, NG>();
		uint32_t xb[NT][NG], cb[NT];
		batch_ptrs<FULL>(xu, j0, xb);
		batch_zp<FULL>(cu, j0, 32, cb);
#pragma unroll
		for (uint32_t i = 0; i < NB; i++) {
			const uint32_t j = j0 + (i << lsh);
			const uint4 s4 = b.s[i * Buf<LSH>::NS / NB];
			const uint32_t sw[4] = { s4.x, s4.y, s4.z, s4.w };
			uint32_t o = 16 * (i << lsh);
			bool ok = true;
			if constexpr (!FULL) {
				ok = rv && j < cpr;
				o = 16 * min(j, cpr - 1);
			}
			auto pair = [&](auto PC) {
				constexpr int p = decltype(PC)::value;
				uint32_t q[4];
				q3_codes<p>(b.c[i], b.x[i], q);
				float2 sc = __half22float2(*reinterpret_cast<const __half2 *>(&sw[p]));
				if constexpr (!FULL)
					sc = ok ? sc : make_float2(0.0f, 0.0f);
#pragma unroll
				for (int k = 0; k < NT; k++) {
					const uint4 x0 = lds((PTR ? xb[k][2 * p] : xb[k][0] + 2 * p * us) + o);
					const uint4 x1 = lds((PTR ? xb[k][2 * p + 1] : xb[k][0] + (2 * p + 1) * us) + o);
					const uint2 cz = lds8(cb[k] + 2 * o + 8 * p);
					acc[k] = fmaf(sc.x, (float)q3_dot8<false>(x0, q, (int)cz.x), acc[k]);
					acc[k] = fmaf(sc.y, (float)q3_dot8<true>(x1, q, (int)cz.y), acc[k]);
				}
			};
			pair(std::integral_constant<int, 0>());
			pair(std::integral_constant<int, 1>());
			pair(std::integral_constant<int, 2>());
			pair(std::integral_constant<int, 3>());
		}
	}
	// Several rows per lane (sq_gvx), as Q4's: chunk j of rows 0 .. NB - 1.
	template <int LSH>
	__device__ __forceinline__ static void load_xr(Buf<LSH> &b, const uint8_t *c, const uint8_t *s, uint32_t j,
						       uint32_t rc, uint32_t rs)
	{
		static_assert(Buf<LSH>::NS == NB, "a scale block per row");
		const uint32_t k = j >> 2, t = j & 3;
#pragma unroll
		for (uint32_t i = 0; i < NB; i++) {
			b.c[i] = bfd::ldw(c + i * rc + 96 * k + 16 * t);
			b.x[i] = sqd::ldw8(c + i * rc + 96 * k + 64 + 8 * t);
			b.s[i] = bfd::ldw(s + i * rs + 16 * k);
		}
	}
	template <int NT, int LSH>
	__device__ __forceinline__ static void dot_xr(const Buf<LSH> &b, uint32_t j, uint32_t us, const uint32_t (&xu)[NT][NG],
						      const uint32_t (&cu)[NT], float (&acc)[NT * NB])
	{
		constexpr bool PTR = per_group<NT, NG>();
		auto pair = [&](auto PC, int k) {
			constexpr int p = decltype(PC)::value;
			const uint4 x0 = lds((PTR ? xu[k][2 * p] : xu[k][0] + 2 * p * us) + 16 * j);
			const uint4 x1 = lds((PTR ? xu[k][2 * p + 1] : xu[k][0] + (2 * p + 1) * us) + 16 * j);
			const uint2 cz = lds8(cu[k] + 32 * j + 8 * p);
#pragma unroll
			for (uint32_t i = 0; i < NB; i++) {
				const uint32_t sw = p == 0 ? b.s[i].x : p == 1 ? b.s[i].y : p == 2 ? b.s[i].z : b.s[i].w;
				uint32_t q[4];
				q3_codes<p>(b.c[i], b.x[i], q);
				const float2 sc = __half22float2(*reinterpret_cast<const __half2 *>(&sw));
				acc[k * NB + i] = fmaf(sc.x, (float)q3_dot8<false>(x0, q, (int)cz.x), acc[k * NB + i]);
				acc[k * NB + i] = fmaf(sc.y, (float)q3_dot8<true>(x1, q, (int)cz.y), acc[k * NB + i]);
			}
		};
#pragma unroll
		for (int k = 0; k < NT; k++) {
			pair(std::integral_constant<int, 0>(), k);
			pair(std::integral_constant<int, 1>(), k);
			pair(std::integral_constant<int, 2>(), k);
			pair(std::integral_constant<int, 3>(), k);
		}
	}
};

// q4 as before (kernel configuration sq_gv=2, for comparison): the
// activations in an unsigned low and a signed high byte plane, four dp4a and a
// LEA per 8 weights, lsh at run time, every chunk masked.
struct Q4b {
	static constexpr uint32_t CPB = 8, NG = 4, NB = 4;
	static constexpr uint32_t SB = 20;
	static constexpr int KBITS = 14;
	struct Ch {
		uint4 c;
		uint2 s;
	};
	template <int LSH> struct Buf {
		Ch b[NB];
	};
	template <int LSH, bool FULL>
	__device__ __forceinline__ static void load(Buf<LSH> &b, const uint8_t *c, const uint8_t *s, uint32_t j0,
						    uint32_t lsh, bool iv, uint32_t cpr)
	{
#pragma unroll
		for (uint32_t i = 0; i < NB; i++) {
			const uint32_t j = j0 + (i << lsh);
			if (iv && j < cpr) {
				b.b[i].c = bfd::ldw(c + 16 * j);
				b.b[i].s = sqd::ldw8(s + 2 * (j & ~3u));
			}
		}
	}
	__device__ __forceinline__ static void slot_of(uint32_t q, uint32_t &j, uint32_t &u) { Q4::slot_of(q, j, u); }
	__device__ __forceinline__ static void stage(const float (&v)[8], uint32_t xrow, uint32_t crow, uint32_t cpr,
						     uint32_t j, uint32_t u)
	{
		int q[8];
		const int sum = fix8(v, q);
		auto pk = [&](int a, int b, int c, int d, int hi) -> uint32_t {
			auto by = [&](int m) -> uint32_t { return (uint32_t)(hi ? (q[m] >> 8) : q[m]) & 0xffu; };
			return by(a) | by(b) << 8 | by(c) << 16 | by(d) << 24;
		};
		*reinterpret_cast<uint4 *>(g_smem + xrow + 16 * (u * cpr + j)) =
			make_uint4(pk(0, 4, 1, 5, 0), pk(2, 6, 3, 7, 0), pk(0, 4, 1, 5, 1), pk(2, 6, 3, 7, 1));
		*reinterpret_cast<int *>(g_smem + crow + 4 * (4 * j + u)) = -8 * sum;
	}
	template <int NT, int LSH, bool FULL>
	__device__ __forceinline__ static void dot(const Buf<LSH> &bb, uint32_t j0, uint32_t lsh, uint32_t cpr, bool rv, uint32_t us,
						   const uint32_t (&xu)[NT][NG], const uint32_t (&cu)[NT], float (&acc)[NT])
	{
#pragma unroll
		for (uint32_t i = 0; i < NB; i++) {
			const uint32_t j0i = j0 + (i << lsh), j = min(j0i, cpr - 1);
			const Ch &h = bb.b[i];
			const bool ok = rv && j0i < cpr;
			const uint32_t sx = ok ? h.s.x : 0u, sy = ok ? h.s.y : 0u;
			const float2 s01 = __half22float2(*reinterpret_cast<const __half2 *>(&sx));
			const float2 s23 = __half22float2(*reinterpret_cast<const __half2 *>(&sy));
			const float sc[4] = { s01.x, s01.y, s23.x, s23.y };
			const uint32_t w[4] = { h.c.x, h.c.y, h.c.z, h.c.w };
			uint4 cz[NT];
			uint32_t xa[NT];
#pragma unroll
			for (int k = 0; k < NT; k++)
				cz[k] = lds(cu[k] + 16 * j), xa[k] = xu[k][0] + 16 * j;
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

// A policy's own count where it has one (P::BUFS: the tier policies keep
// three at one token, measured so at 12 and 16 warps).
template <class P> __host__ __device__ constexpr auto bufs_of(int) -> decltype(P::BUFS, 0) { return P::BUFS; }
template <class P> __host__ __device__ constexpr int bufs_of(long) { return 0; }
// Slices per thread stage's one-pass path can take (sq_gvs): two for the
// scalar policies, one for the tier policies (their own BUFS), whose
// kernels at 12 warps sit at the register cap: the two-slice path compiled
// into them made dec_tr=2 and 3 8-16% slower at the Kimi shape (lead's call,
// experiments/kernels/README.md, "Issue 21 after the merge of h25a and h25b").
template <class P> __host__ __device__ constexpr uint32_t spt_max() { return bufs_of<P>(0) ? 1 : 2; }

// The 8-column slice of a row at q (columns c .. c + 7 of cols; those past
// cols read as 0), through L2 (CG) or L1: two 16-byte loads where the slice
// is whole and aligned, else one per column.  Eight 4-byte loads per lane
// touch each of the warp's 32 sectors 8 times; through L2 (CG, the stack
// kernels' x and h) every one of them is an L2 request.
template <bool CG> __device__ __forceinline__ void ld8(const float *q, uint32_t c, uint32_t cols, float (&v)[8])
{
	if (c + 8 <= cols && !(reinterpret_cast<uintptr_t>(q) & 15)) {
		const float4 *q4 = reinterpret_cast<const float4 *>(q);
		const float4 a = CG ? __ldcg(q4) : q4[0], b = CG ? __ldcg(q4 + 1) : q4[1];
		v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
	} else {
#pragma unroll
		for (uint32_t m = 0; m < 8; m++)
			v[m] = c + m < cols ? (CG ? __ldcg(q + m) : q[m]) : 0.0f;
	}
}

// A warp's 8-column slices v (all of one row, or all off: on false): the
// row's largest magnitude as bits into *mx (NaN wins: its bits are above
// inf's).
__device__ __forceinline__ void slice_max(const float (&v)[8], bool on, uint32_t *mx)
{
	if (!on)
		return;
	uint32_t bits = 0;
#pragma unroll
	for (int m = 0; m < 8; m++)
		bits = max(bits, __float_as_uint(fabsf(v[m])));
	bits = __reduce_max_sync(0xffffffffu, bits);
	if ((threadIdx.x & 31) == 0 && bits)
		atomicMax(mx, bits);
}

// Slice q of staged row r (cpr chunks a row; values at xo, zero-point terms
// at co, shared offsets) from its 8 columns v times sc (those past cols: 0).
template <class P>
__device__ __forceinline__ void slice_stage(const float (&v)[8], float sc, uint32_t q, uint32_t cols, uint32_t r, uint32_t cpr,
					    uint32_t xo, uint32_t co)
{
	float w[8];
#pragma unroll
	for (int m = 0; m < 8; m++)
		w[m] = 8 * q + m < cols ? v[m] * sc : 0.0f;
	uint32_t j, u;
	P::slot_of(q, j, u);
	P::stage(w, xo + r * cpr * P::NG * 16, co + r * cpr * P::NG * 4, cpr, j, u);
}

// The gate|up launch's x slices for stage's one-pass path with two slices
// per thread (sq_gvs=2), loaded into v before the first weights where x is
// ready at the start (not chained: x is then the previous layer's y, read
// only after griddepcontrol.wait): their round trip to L2 overlaps the
// weights' instead of queueing behind them.  Whether it loaded them.
template <class P> __device__ __forceinline__ bool stage_fetch(const MoeParams &p, const Args &a, float (&v)[2][8])
{
	const uint32_t pc = p.tab[p.slot[0].fmt].pc[0], nq = pc / 8, nr = a.xrows;
	if (a.down || p.chain || !a.xearly || a.spt < 2 || nr * nq > 2 * blockDim.x)
		return false;
#pragma unroll
	for (uint32_t k = 0; k < 2; k++) {
		const uint32_t i = threadIdx.x + k * blockDim.x, r = i / nq, q = i - r * nq;
		if (i < nr * nq)
			ld8<false>(p.x + (uint64_t)r * p.hidden + 8 * q, 8 * q, p.hidden, v[k]);
	}
	return true;
}

// Stage this CTA's activation rows (the caller has issued its first loads;
// with fetched, the x slices stage_fetch loaded into pre) from x (gate|up)
// or p.h (down); CG: read through L2 (rows written by other SMs in this
// launch, where this SM may have read the addresses before: a stack in one
// launch, moe_dec_small.cuh).
template <class P, bool CG = false>
__device__ __forceinline__ void stage(const MoeParams &p, const Args &a, uint32_t &nr, const float (&pre)[2][8], bool fetched,
				      const float *x)
{
	const uint32_t d = a.down, cols = d ? p.inter : p.hidden, pc = p.tab[p.slot[0].fmt].pc[d];
	auto ld = [](const float *q) { return CG ? __ldcg(q) : *q; };
	const float **src = reinterpret_cast<const float **>(g_smem + Smem::SRC);
	uint32_t *mx = reinterpret_cast<uint32_t *>(g_smem + Smem::MAX);
	float *inv = reinterpret_cast<float *>(g_smem + Smem::INV);
	if (!d) {
		nr = a.xrows;
		for (uint32_t r = threadIdx.x; r < nr; r += blockDim.x)
			src[r] = x + (uint64_t)r * p.hidden, mx[r] = 0;
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
	const uint32_t nq = pc / 8, cpr = pc / 256 * P::CPB, spt = a.spt > 1 && spt_max<P>() > 1 ? 2 : 1;
	if (nr * nq <= spt * blockDim.x) {
		// One pass: spt 8-column slices per thread (slice i and i + blockDim.x;
		// e.g. Qwen3-30B-A3B at 1 - 2 tokens, and with spt = 2 the Kimi-K2 x
		// row of 896 slices): the rows are read once, into registers, for their
		// largest magnitudes and their values (one round trip to L2 instead of
		// two while the first weights stream).  nq is a multiple of 32, so a
		// warp's slices are of one row.
		float v[2][8];
#pragma unroll
		for (uint32_t k = 0; k < spt_max<P>(); k++) {
			const uint32_t i = threadIdx.x + k * blockDim.x, r = i / nq, q = i - r * nq;
			if (k < spt && i < nr * nq) {
				if (fetched) {
#pragma unroll
					for (int m = 0; m < 8; m++)
						v[k][m] = pre[k][m];
				} else {
					ld8<CG>(src[r] + 8 * q, 8 * q, cols, v[k]);
				}
			}
		}
#pragma unroll
		for (uint32_t k = 0; k < spt_max<P>(); k++) {
			const uint32_t i = threadIdx.x + k * blockDim.x;
			slice_max(v[k], k < spt && i < nr * nq, mx + i / nq);
		}
		__syncthreads();
		if (threadIdx.x < nr)
			inv[threadIdx.x] = row_inv<P>(mx[threadIdx.x]);
		__syncthreads();
#pragma unroll
		for (uint32_t k = 0; k < spt_max<P>(); k++) {
			const uint32_t i = threadIdx.x + k * blockDim.x, r = i / nq, q = i - r * nq;
			if (k < spt && i < nr * nq)
				slice_stage<P>(v[k], 1.0f / inv[r], q, cols, r, cpr, a.xoff, a.coff);
		}
		__syncthreads();
		return;
	}
	// Largest magnitude of each row, as bits (NaN wins: its bits are above inf's).
	for (uint32_t r = 0, i = threadIdx.x; r < nr; r++) {
		const float *q = src[r] - r * cols;
		uint32_t bits = 0;
		for (; i < (r + 1) * cols; i += blockDim.x)
			bits = max(bits, __float_as_uint(fabsf(ld(q + i))));
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
		float v[8];
		ld8<CG>(src[r] + 8 * q, 8 * q, cols, v);
		slice_stage<P>(v, 1.0f / inv[r], q, cols, r, cpr, a.xoff, a.coff);
	}
	__syncthreads();
}

template <class P, bool CG = false>
__device__ __forceinline__ void stage(const MoeParams &p, const Args &a, uint32_t &nr, const float *x = nullptr)
{
	const float none[2][8] = {};
	stage<P, CG>(p, a, nr, none, false, x ? x : p.x);
}

// Register buffers of batches for W warps per CTA at NT tokens: three at one
// token and 16 warps (two batches in flight while one is multiplied), more
// with fewer warps (their registers allow it), two for more tokens.
template <int NT, int W> __host__ __device__ constexpr int nbuf() { return NT > 1 ? 2 : W == 16 ? 3 : W == 12 ? 4 : 6; }

// A policy's set-up of the CTA's shared memory before the staging, where it
// has one (P::pre: the tier policies' zero bytes and codebook table,
// moe_dec_tr.cuh).
template <class P> __device__ __forceinline__ auto pre_stage(int) -> decltype(P::pre(), void()) { P::pre(); }
template <class P> __device__ __forceinline__ void pre_stage(long) {}

// P: the policy (Q4, Q3, Q3i, Q4b of moe_dec_gv.cuh, the tier policies of
// moe_dec_tr.cuh) of format FMT; NT tokens per expert (1, 2 or 4); LSH, FULL:
// as the policies'; W warps per CTA (sq_gvw; the tier policies: 12 or 16,
// moe_gpu.cu's run_dec_tr).  XR (sq_gvx; Q4 and Q3i, FULL, LSH >= 2): a lane
// takes the same chunk j of NB consecutive rows per batch (P::load_xr,
// P::dot_xr), its chunks j = sub, sub + 2^LSH, ...; a task is 32 >> LSH such
// row sets, (32 >> LSH) x NB rows.
template <int FMT, class P, int NT, int LSH, bool FULL, int W = NW, bool XR = false>
__global__ void __launch_bounds__(32 * W, 1) gv_kernel(const __grid_constant__ MoeParams p, const __grid_constant__ Args a)
{
	using Buf = typename P::template Buf<LSH>;
	constexpr uint32_t NB = P::NB;
	// rows per lane (a row set), chunks per lane and batch
	constexpr uint32_t RL = XR ? NB : 1, CB = XR ? 1 : NB;
	static_assert(!XR || (FULL && LSH >= 2 && (1u << (LSH > 0 ? LSH : 0)) >= RL), "XR: compile-time lanes, even rows");
	const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const uint32_t lsh = LSH >= 0 ? (uint32_t)LSH : a.lsh, sub = lane & ((1u << lsh) - 1), rr = lane >> lsh, rw = 32u >> lsh;
	const uint32_t t1 = min((blockIdx.x + 1) * a.tpc, a.ntask);
	const uint32_t d = a.down, nph = d ? 1 : 2;
	const FmtTab &f = p.tab[FMT];
	const uint32_t nrows = d ? p.hidden : p.inter, cpr = a.cpr;
	// Issue side: task, phase (gate, up / down), batch; this lane's row
	// (codes, scales) and its next chunk j (and its last one, jl).
	uint32_t it = blockIdx.x * a.tpc + warp, iph = 0, ibt = 0, ij = 0;
	const uint8_t *ic = nullptr, *is = nullptr;
	bool iv = false;
	// Lane 0 of each row: the row (codes, scales) of the step n (task,
	// matrix) steps after the issue side's into L2.
	auto l2_row = [&](uint32_t n) {
		uint32_t t = it, ph = iph;
		for (; n; n--)
			if (++ph == nph)
				ph = 0, t += W;
		const uint32_t s = t / a.nrs, row = ((t - s * a.nrs) * rw + rr) * RL;
		if (XR || t >= t1 || sub || row >= nrows)
			return;
		const uint8_t *mat = p.slot[s].ext + f.off[d ? 2 : ph];
		l2_prefetch(mat + (uint64_t)row * f.rowc[d], (uint32_t)f.rowc[d]);
		l2_prefetch(mat + f.soff[d] + (uint64_t)row * f.rows_[d], (uint32_t)f.rows_[d]);
	};
	auto iss_set = [&]() {
		const uint32_t s = it / a.nrs, row = ((it - s * a.nrs) * rw + rr) * RL;
		const uint8_t *mat = p.slot[s].ext + f.off[d ? 2 : iph];
		iv = row < nrows;
		ic = mat + (uint64_t)row * f.rowc[d];
		is = mat + f.soff[d] + (uint64_t)row * f.rows_[d];
		ij = sub;
		if (a.l2pf)
			l2_row(a.l2pf);
	};
	auto load = [&](Buf &b) {
		if (it >= t1)
			return;
		if constexpr (XR)
			P::template load_xr<LSH>(b, ic, is, ij, (uint32_t)f.rowc[d], (uint32_t)f.rows_[d]);
		else
			P::template load<LSH, FULL>(b, ic, is, ij, lsh, iv, cpr);
		ij += CB << lsh;
		if (++ibt == a.nbat) {
			ibt = 0;
			if (++iph == nph)
				iph = 0, it += W;
			if (it < t1)
				iss_set();
		}
	};
	if (it < t1) {
		// the first steps: the rest of this one's rows after the first
		// batches, and the next ones before iss_set's
		for (uint32_t n = 0; n < a.l2pf; n++)
			l2_row(n);
		iss_set();
	}
	// NBUF buffers: NBUF - 1 batches in flight while one is multiplied.
	constexpr int NBUF = bufs_of<P>(0) && NT == 1 ? bufs_of<P>(0) : nbuf<NT, W>();
	// (the scalar policies only, as stage's two slices: spt_max)
	float xv[2][8];
	bool xe = false;
	if constexpr (spt_max<P>() > 1)
		xe = stage_fetch<P>(p, a, xv);
	Buf b[NBUF];
#pragma unroll
	for (int i = 0; i + 1 < NBUF; i++)
		load(b[i]);
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
	pre_stage<P>(0);
	stage<P>(p, a, nr, xv, xe, p.x);
	// Compute side.
	const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(g_smem);
	const uint32_t us = 16 * cpr, xstride = cpr * P::NG * 16, cstride = cpr * P::NG * 4;
	uint32_t ct = blockIdx.x * a.tpc + warp, cph = 0, cbt = 0, cj = 0;
	const uint32_t srow0 = d && ct < a.ntask ? p.slot[(blockIdx.x * a.tpc) / a.nrs].a0 : 0;
	uint32_t xu[NT][P::NG], cu[NT], slot = 0, row = 0;
	float acc[NT * RL], accg[NT * RL];
	const float *inv = reinterpret_cast<const float *>(g_smem + Smem::INV);
	auto cmp_set = [&]() {
		slot = ct / a.nrs;
		row = ((ct - slot * a.nrs) * rw + rr) * RL;
		const Slot &s = p.slot[slot];
#pragma unroll
		for (int k = 0; k < NT; k++) {
			const uint32_t kk = (uint32_t)k < s.ntok ? k : 0;
			const uint32_t r = d ? s.a0 + kk - srow0 : p.tok[s.a0 + kk];
#pragma unroll
			for (uint32_t u = 0; u < P::NG; u++)
				xu[k][u] = sbase + a.xoff + r * xstride + (per_group<NT, P::NG>() ? u * us : 0);
			cu[k] = sbase + a.coff + r * cstride;
#pragma unroll
			for (uint32_t i = 0; i < RL; i++)
				acc[k * RL + i] = accg[k * RL + i] = 0.0f;
		}
	};
	// The task's sums are complete: h, or y.
	// XR: the row set's RL sums per token meet by xor shuffles, the first
	// log2(RL) levels halving the values each lane holds (the lanes with bit
	// o set keep the upper half), so that lane sub ends with row rx's sum.
	auto finish = [&]() {
		const Slot &s = p.slot[slot];
		uint32_t rx = row;
		if constexpr (XR) {
			auto level = [&](float(&q)[NT * RL], uint32_t o, uint32_t n, bool hi) {
#pragma unroll
				for (int k = 0; k < NT; k++) {
					if (n > 1) {
#pragma unroll
						for (uint32_t i = 0; i < n / 2; i++) {
							const float up = q[k * RL + i + n / 2], lo = q[k * RL + i];
							q[k * RL + i] = (hi ? up : lo) + __shfl_xor_sync(0xffffffffu, hi ? lo : up, o);
						}
					} else {
						q[k * RL] += __shfl_xor_sync(0xffffffffu, q[k * RL], o);
					}
				}
			};
#pragma unroll
			for (int l = 0; l < LSH; l++) {
				const uint32_t o = (1u << LSH) >> (l + 1), n = RL >> l;
				const bool hi = (sub & o) != 0;
				level(acc, o, n, hi);
				if (!d)
					level(accg, o, n, hi);
				if (n > 1 && hi)
					rx += n / 2;
			}
			if (sub & ((1u << LSH) / RL - 1))
				return;
		} else {
#pragma unroll
			for (int k = 0; k < NT; k++)
				for (uint32_t o = 1u << lsh >> 1; o; o >>= 1) {
					acc[k] += __shfl_xor_sync(0xffffffffu, acc[k], o);
					if (!d)
						accg[k] += __shfl_xor_sync(0xffffffffu, accg[k], o);
				}
			if (sub || row >= nrows)
				return;
		}
#pragma unroll
		for (int k = 0; k < NT; k++) {
			if ((uint32_t)k >= s.ntok)
				break;
			const uint32_t ai = s.a0 + k;
			const float ak = acc[k * RL], gk = accg[k * RL];
			if (d) {
				atomicAdd(p.y + (uint64_t)p.tok[ai] * p.hidden + rx, p.w[ai] * ak * inv[ai - srow0]);
			} else {
				const float sb = inv[p.tok[ai]], g = gk * sb, u = ak * sb;
				p.h[s.h_off + (uint64_t)k * p.inter + rx] = g / (1.0f + expf(-g)) * u;
			}
		}
	};
	// Chunks outside the row or the matrix (stale words) count with zero
	// scales at the row's last chunk: no branch per chunk.
	auto compute = [&](Buf &b) {
		if (cph == 0 && cbt == 0)
			cmp_set();
		if (cbt == 0)
			cj = sub;
		if constexpr (XR)
			P::template dot_xr<NT, LSH>(b, cj, us, xu, cu, acc);
		else
			P::template dot<NT, LSH, FULL>(b, cj, lsh, cpr, row < nrows, us, xu, cu, acc);
		cj += CB << lsh;
		if (++cbt == a.nbat) {
			cbt = 0;
			if (!d && cph == 0) {
				cph = 1;
#pragma unroll
				for (uint32_t k = 0; k < NT * RL; k++)
					accg[k] = acc[k], acc[k] = 0.0f;
			} else {
				finish();
				cph = 0, ct += W;
			}
		}
	};
	while (ct < t1) {
#pragma unroll
		for (int i = 0; i < NBUF; i++) {
			load(b[(i + NBUF - 1) % NBUF]);
			compute(b[i]);
			if (ct >= t1)
				break;
		}
	}
	(void)nr;
}

} // namespace gv

// Emulation of a persistent decode kernel for a stack of small MoE layers
// (issue 21 at the Qwen3-30B-A3B shape): does keeping the HBM stream busy
// across a stack's phases reach the bound the two-launch row-streaming
// kernel cannot (its layer is ~2.5 DRAM latencies, staging and two launch
// ramps, whatever the bytes)?
//
// Shape: hidden 2048, inter 768, 8 q4 experts per layer at one token (gv_pattern's
// q4 layout: a chunk = 16 code bytes = 32 weights, 8 scale bytes per 4 chunks),
// L layers; two stacks rotated (nothing served from L2 across replays).  One
// cooperative launch of one 16-warp CTA per SM runs the whole stack:
//   - a phase is a layer's gate|up or down; its rows (gate|up: row pairs of
//     every expert; down: rows of every expert) are split evenly over the
//     CTAs, each CTA's rows bulk-copied (cp.async.bulk, one mbarrier per
//     buffer) into its shared-memory buffer A (gate|up, ~108 KB) or B (down,
//     ~54 KB);
//   - gate|up: x (the previous layer's y) staged in shared memory as 16-bit
//     fixed point with a power-of-two row scale (gv::stage's one pass), each
//     warp a row pair at a time (gate and up of a row share x's loads), q4's
//     dot (nibbles, 4 dp2a per 8 weights, I2F, FFMA), h = silu(g) u to global;
//     grid barrier; down: the h rows of the CTA's experts staged the same way,
//     8 lanes per row, 4 rows per warp at a time, y += by atomics; grid barrier;
//   - MODE 0 (router lookahead: the next layer's experts known, as a stack's
//     calls are): buffer A takes layer l + 1's gate|up rows as soon as layer
//     l's gate|up is computed, B layer l + 1's down rows as soon as layer l's
//     down is; MODE 1 (no lookahead): both of layer l + 1's copies are issued
//     after layer l's last barrier (its x is ready, so its routing would be);
//     MODE 2: as 1, but the down copy only after the gate|up barrier (copies
//     in the order a two-launch layer reads);
//   - ws_kernel (warp-specialised, lookahead): a producer warp issues the
//     rows in pieces, at most `win` pieces in flight, the consumer warps wait
//     per row for its piece (and, with ilp, take a warp's gate|up rows at once);
// against a sequential read of the same bytes (one launch for the stack) and a
// 2 GB read (bench_kernels' read ceiling) in the same run.  Variants that
// leave out the compute, the copies or the staging, or keep only the
// barriers, and per-CTA timestamps of one layer's phases say where the time
// goes; the grid barrier either polls its counter or (fb) a flag the last CTA
// raises.  The arithmetic runs on made-up values (results unchecked: a timing
// emulation, as gv_pattern.cu, not a kernel).
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o stack_pattern stack_pattern.cu
//   ./stack_pattern [reps [layers]]
#include <algorithm>
#include <vector>

#include "pattern_common.cuh"

constexpr uint32_t H = 2048, I = 768, E = 8, W = 16;
constexpr uint32_t GC = H / 2, GS = H / 16;  // gate/up row: code bytes, scale bytes
constexpr uint32_t DC = I / 2, DS = I / 16;  // down row
constexpr uint32_t GCPR = GC / 16, DCPR = DC / 16;  // chunks per row: 64, 24

struct Args {
	const uint8_t *base;   // the stack's first expert
	uint64_t ebytes;       // bytes per expert
	uint64_t off[6];       // in an expert: gate codes, gate scales, up codes, up scales, down codes, down scales
	uint32_t layers, na, nd;  // rows per CTA at most: gate|up pairs, down
	uint32_t abytes, bbytes;  // buffer sizes
	float *xy;             // (layers + 1) x H: x of layer 0, then each layer's y
	float *h;              // E x I
	uint32_t *bar;         // grid barrier counter (zeroed)
	uint32_t *sink;
	uint64_t *ts;          // or null: per CTA, the global timer at NTS points of layer layers / 2
	uint32_t skip;         // bits: 1 no gate|up compute, 2 no down compute, 4 no copies (nor their waits), 8 no staging
	uint32_t win;          // ws_kernel: pieces in flight at most (<= WIN_MAX)
	uint32_t fb;           // grid barrier: 0 every CTA polls the counter, 1 the last to arrive raises a flag the others poll
	uint32_t ilp;          // ws_kernel: a warp's gate|up rows (up to 3) and down row groups (up to 2) at once
};
constexpr int NTS = 9;  // start, x staged, A landed, gate|up done, barrier 1, h staged, B landed, down done, barrier 2

extern __shared__ __align__(128) uint8_t smem[];
__shared__ __align__(8) uint64_t g_mbar[2];
__shared__ uint32_t g_mx[2];

// q4 dot of one chunk: code word c (16 bytes = 4 groups x 8 weights), its
// group scales s, staged x of the 4 groups and the zero-point terms.
__device__ __forceinline__ float dot_chunk(uint4 c, uint2 s, const uint4 (&x)[4], uint4 cz, float acc)
{
	const float2 s01 = __half22float2(*reinterpret_cast<const __half2 *>(&s.x));
	const float2 s23 = __half22float2(*reinterpret_cast<const __half2 *>(&s.y));
	const float sc[4] = { s01.x, s01.y, s23.x, s23.y };
	const uint32_t w[4] = { c.x, c.y, c.z, c.w };
	const int c0[4] = { (int)cz.x, (int)cz.y, (int)cz.z, (int)cz.w };
#pragma unroll
	for (int u = 0; u < 4; u++) {
		const uint32_t lo = w[u] & 0x0f0f0f0fu, hi = (w[u] >> 4) & 0x0f0f0f0fu;
		const int d = dp2a<1>(x[u].w, hi, dp2a<0>(x[u].z, hi, dp2a<1>(x[u].y, lo, dp2a<0>(x[u].x, lo, c0[u]))));
		acc = fmaf(sc[u], (float)d, acc);
	}
	return acc;
}

// Stage n rows of cols floats (src, consecutive) as 16-bit fixed point pairs
// at xs (row r, group u, chunk j: 16 bytes at xs + ((r * 4 + u) * cpr + j) *
// 16) and zero-point terms at zs (4 bytes per chunk and group), one 8-column
// slice per thread, each row scaled by a power of two from its largest magnitude.
template <bool WS> __device__ __forceinline__ void csync()
{
	if constexpr (WS)
		asm volatile("bar.sync 1, %0;\n" ::"n"(32 * W) : "memory");
	else
		__syncthreads();
}
template <bool WS = false>
__device__ __forceinline__ void stage(const float *src, uint32_t n, uint32_t cols, uint32_t xs, uint32_t zs)
{
	const uint32_t nq = cols / 8, cpr = cols / 32, tid = threadIdx.x;
	if (tid < 2)
		g_mx[tid] = 0;
	csync<WS>();
	float v[8];
	const bool on = tid < n * nq;
	const uint32_t r = tid / nq, q = tid - r * nq;
	uint32_t bits = 0;
	if (on) {
		// through L2 (other SMs wrote them since this SM last read them)
		const float4 a = __ldcg(reinterpret_cast<const float4 *>(src + 8 * tid));
		const float4 b = __ldcg(reinterpret_cast<const float4 *>(src + 8 * tid + 4));
		v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
#pragma unroll
		for (int m = 0; m < 8; m++)
			bits = max(bits, __float_as_uint(fabsf(v[m])));
		atomicMax(g_mx + r, bits);
	}
	csync<WS>();
	if (on) {
		int e;
		frexpf(__uint_as_float(g_mx[r]), &e);
		const float sc = ldexpf(1.0f, 14 - max(e, -100));
		int qv[8], sum = 0;
#pragma unroll
		for (int m = 0; m < 8; m++)
			qv[m] = max(-16384, min(16384, __float2int_rn(v[m] * sc))), sum += qv[m];
		// slice q = chunk j (q >> 2), 8 weights t = q & 3 of its 4 groups: group u = t here
		const uint32_t j = q >> 2, u = q & 3;
		uint32_t w[4];
#pragma unroll
		for (int i = 0; i < 4; i++)
			w[i] = ((uint32_t)qv[i] & 0xffffu) | (uint32_t)qv[i + 4] << 16;
		asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(xs + ((r * 4 + u) * cpr + j) * 16), "r"(w[0]),
			     "r"(w[1]), "r"(w[2]), "r"(w[3]));
		asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(zs + (r * cpr + j) * 16 + 4 * u), "r"(-8 * sum));
	}
	csync<WS>();
}

// bar: the counter; with fb, bar + 32 (another 128-byte line) the flag.
template <bool WS = false> __device__ __forceinline__ void grid_barrier(uint32_t *bar, uint32_t target, uint32_t fb)
{
	csync<WS>();
	if (threadIdx.x == 0) {
		__threadfence();
		if (fb) {
			if (atomicAdd(bar, 1u) + 1 == target)
				asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(bar + 32), "r"(target) : "memory");
			else
				while (ld_acquire(bar + 32) < target)
					;
		} else {
			atomicAdd(bar, 1u);
			while (ld_acquire(bar) < target)
				;
		}
	}
	csync<WS>();
}

// Gate|up of the local row pairs i[0 .. N) (those < n; codes of gate at A +
// i GC, of up at A + (na + i) GC, their scales after the 2 na code rows),
// chunks lane and lane + 32, x's loads shared by the N rows: h = silu(gate)
// up by lane 0.
template <int N>
__device__ __forceinline__ void gu_rows(uint32_t A, uint32_t na, const uint32_t (&i)[N], uint32_t n, uint32_t XS, uint32_t XZ,
					uint32_t lane, float *h)
{
	float ag[N], au[N];
#pragma unroll
	for (int r = 0; r < N; r++)
		ag[r] = au[r] = 0.0f;
#pragma unroll
	for (uint32_t k = 0; k < GCPR / 32; k++) {
		const uint32_t j = lane + 32 * k;
		uint4 x[4];
#pragma unroll
		for (int u = 0; u < 4; u++)
			x[u] = lds(XS + (u * GCPR + j) * 16);
		const uint4 cz = lds(XZ + 16 * j);
#pragma unroll
		for (int r = 0; r < N; r++) {
			const uint32_t ri = i[r] < n ? i[r] : 0;
			ag[r] = dot_chunk(lds(A + ri * GC + 16 * j), lds8(A + 2 * na * GC + ri * GS + 2 * (j & ~3u)), x, cz, ag[r]);
			au[r] = dot_chunk(lds(A + (na + ri) * GC + 16 * j), lds8(A + 2 * na * GC + (na + ri) * GS + 2 * (j & ~3u)), x,
					  cz, au[r]);
		}
	}
#pragma unroll
	for (int r = 0; r < N; r++) {
#pragma unroll
		for (uint32_t o = 16; o; o >>= 1)
			ag[r] += __shfl_xor_sync(0xffffffffu, ag[r], o), au[r] += __shfl_xor_sync(0xffffffffu, au[r], o);
		if (lane == 0 && i[r] < n) {
			const float g = ag[r] * 1e-4f, u = au[r] * 1e-4f;
			h[i[r]] = g / (1.0f + __expf(-g)) * u;
		}
	}
}
__device__ __forceinline__ void gu_row(uint32_t A, uint32_t na, uint32_t i, uint32_t XS, uint32_t XZ, uint32_t lane, float *h)
{
	const uint32_t one[1] = { i };
	gu_rows<1>(A, na, one, i + 1, XS, XZ, lane, h - i);
}

// Down of local rows i0 .. i0 + 3 (lane >> 3 the row, 8 lanes a row, chunks
// sub, sub + 8, sub + 16) of the CTA's rows [d0, d1), experts from e0 staged
// at HS, HZ: y += by atomics.  Its sum (kept live).
__device__ __forceinline__ float dn_rows(uint32_t B, uint32_t nd, uint32_t i0, uint32_t d0, uint32_t d1, uint32_t e0, uint32_t HS,
					 uint32_t HZ, uint32_t lane, float *y)
{
	const uint32_t sub = lane & 7, i = i0 + (lane >> 3);
	const bool on = i < d1 - d0;
	const uint32_t ri = on ? i : 0, e = (d0 + ri) / H - e0;
	float acc = 0.0f;
#pragma unroll
	for (uint32_t k = 0; k < DCPR / 8; k++) {
		const uint32_t j = sub + 8 * k;
		uint4 x[4];
#pragma unroll
		for (int u = 0; u < 4; u++)
			x[u] = lds(HS + ((e * 4 + u) * DCPR + j) * 16);
		const uint4 cz = lds(HZ + (e * DCPR + j) * 16);
		acc = dot_chunk(lds(B + ri * DC + 16 * j), lds8(B + nd * DC + ri * DS + 2 * (j & ~3u)), x, cz, acc);
	}
#pragma unroll
	for (uint32_t o = 4; o; o >>= 1)
		acc += __shfl_xor_sync(0xffffffffu, acc, o);
	if (on && sub == 0)
		atomicAdd(y + (d0 + ri) % H, acc * 1e-6f);
	return acc;
}

// The bulk copies of layer l's gate|up row pairs [u0, u1) of E x I into
// buffer A (local row u - g0: gate codes, up codes, then their scales; na
// rows each), split at expert boundaries, completing on mbar.
__device__ __forceinline__ void copy_gu_rows(const Args &a, uint32_t l, uint32_t u0, uint32_t u1, uint32_t g0, uint32_t A,
					     uint32_t mbar)
{
	const uint32_t na = a.na;
	for (uint32_t u = u0; u < u1;) {
		const uint32_t e = u / I, r = u - e * I, n = min(u1 - u, I - r), i = u - g0;
		const uint8_t *ex = a.base + (uint64_t)(l * E + e) * a.ebytes;
		bulk_copy(A + i * GC, ex + a.off[0] + (uint64_t)r * GC, n * GC, mbar);
		bulk_copy(A + (na + i) * GC, ex + a.off[2] + (uint64_t)r * GC, n * GC, mbar);
		bulk_copy(A + 2 * na * GC + i * GS, ex + a.off[1] + (uint64_t)r * GS, n * GS, mbar);
		bulk_copy(A + 2 * na * GC + (na + i) * GS, ex + a.off[3] + (uint64_t)r * GS, n * GS, mbar);
		u += n;
	}
}
// The same for down rows [u0, u1) of E x H into buffer B (codes, then scales; nd rows each).
__device__ __forceinline__ void copy_dn_rows(const Args &a, uint32_t l, uint32_t u0, uint32_t u1, uint32_t d0, uint32_t B,
					     uint32_t mbar)
{
	for (uint32_t u = u0; u < u1;) {
		const uint32_t e = u / H, r = u - e * H, n = min(u1 - u, H - r), i = u - d0;
		const uint8_t *ex = a.base + (uint64_t)(l * E + e) * a.ebytes;
		bulk_copy(B + i * DC, ex + a.off[4] + (uint64_t)r * DC, n * DC, mbar);
		bulk_copy(B + a.nd * DC + i * DS, ex + a.off[5] + (uint64_t)r * DS, n * DS, mbar);
		u += n;
	}
}
__device__ __forceinline__ void expect_tx(uint32_t mbar, uint32_t bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(mbar), "r"(bytes) : "memory");
}
// Thread 0's global timer at point k of layer layers / 2 (a.ts).
__device__ __forceinline__ void mark(const Args &a, uint32_t l, int k)
{
	if (a.ts && l == a.layers / 2 && threadIdx.x == 0) {
		uint64_t t;
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
		a.ts[blockIdx.x * NTS + k] = t;
	}
}

template <int MODE> __global__ void __launch_bounds__(32 * W, 1) stack_kernel(const __grid_constant__ Args a)
{
	const uint32_t G = gridDim.x, c = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const uint32_t sb = (uint32_t)__cvta_generic_to_shared(smem);
	const uint32_t A = sb, B = sb + a.abytes, XS = B + a.bbytes, XZ = XS + H * 2, HS = XZ + H / 2, HZ = HS + 2 * I * 2;
	const uint32_t mbA = (uint32_t)__cvta_generic_to_shared(g_mbar), mbB = mbA + 8;
	// this CTA's rows: gate|up pairs [g0, g1) of E x I, down rows [d0, d1) of E x H
	const uint32_t g0 = c * E * I / G, g1 = (c + 1) * E * I / G, d0 = c * E * H / G, d1 = (c + 1) * E * H / G;
	const uint32_t na = a.na, nd = a.nd;
	// one thread issues a phase's copies: its rows split at expert boundaries
	auto copy_gu = [&](uint32_t l) {
		if (tid == 0) {
			expect_tx(mbA, (g1 - g0) * 2 * (GC + GS));
			copy_gu_rows(a, l, g0, g1, g0, A, mbA);
		}
	};
	auto copy_dn = [&](uint32_t l) {
		if (tid == 0) {
			expect_tx(mbB, (d1 - d0) * (DC + DS));
			copy_dn_rows(a, l, d0, d1, d0, B, mbB);
		}
	};
	if (tid == 0) {
		asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mbA), "r"(1u) : "memory");
		asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mbB), "r"(1u) : "memory");
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
	}
	__syncthreads();
	if (!(a.skip & 4)) {
		copy_gu(0);
		if (MODE != 2)
			copy_dn(0);
	}
	float tot = 0.0f;
	uint32_t nbar = 0;
	const uint32_t sk = a.skip;
	for (uint32_t l = 0; l < a.layers; l++) {
		auto mark = [&](int k) { ::mark(a, l, k); };
		mark(0);
		// gate|up: x staged, then each warp a row pair at a time (chunks lane, lane + 32)
		if (!(sk & 8))
			stage(a.xy + (uint64_t)l * H, 1, H, XS, XZ);
		mark(1);
		if (!(sk & 4))
			mbar_wait(mbA, l & 1);
		mark(2);
		for (uint32_t i = warp; !(sk & 1) && i < g1 - g0; i += W)
			gu_row(A, na, i, XS, XZ, lane, a.h + g0 + i);
		__syncthreads();
		mark(3);
		if (MODE == 0 && l + 1 < a.layers && !(sk & 4))
			copy_gu(l + 1);
		grid_barrier(a.bar, ++nbar * G, a.fb);
		mark(4);
		if (MODE == 2 && !(sk & 4))
			copy_dn(l);
		// down: the h rows of the CTA's experts (at most 2), 8 lanes a row, 4 rows a warp at a time
		const uint32_t e0 = d0 / H, ne = (d1 - 1) / H - e0 + 1;
		if (!(sk & 8))
			stage(a.h + (uint64_t)e0 * I, ne, I, HS, HZ);
		mark(5);
		if (!(sk & 4))
			mbar_wait(mbB, l & 1);
		mark(6);
		for (uint32_t i0 = 4 * warp; !(sk & 2) && i0 < d1 - d0; i0 += 4 * W)
			tot += dn_rows(B, nd, i0, d0, d1, e0, HS, HZ, lane, a.xy + (uint64_t)(l + 1) * H);
		__syncthreads();
		mark(7);
		if (MODE == 0 && l + 1 < a.layers && !(sk & 4))
			copy_dn(l + 1);
		grid_barrier(a.bar, ++nbar * G, a.fb);
		mark(8);
		if (MODE != 0 && l + 1 < a.layers && !(sk & 4)) {
			copy_gu(l + 1);
			if (MODE == 1)
				copy_dn(l + 1);
		}
	}
	if (tot == 1.2345f)
		*a.sink = 1;
}

// Warp-specialised (ws_kernel, router lookahead as MODE 0): a producer warp
// (warp W, lane 0) issues each phase's rows in pieces of RG gate|up row pairs
// / RD down rows, an mbarrier per piece, at most a.win pieces in flight (so
// that a grid barrier's atomics and polls queue behind at most that many
// bytes), a buffer's next pieces once the consumers have freed it (mbarriers
// empty A / B); the 16 consumer warps (named barrier 1) wait for each row's
// piece and never for a copy they do not read.
constexpr uint32_t RG = 4, RD = 20, NPG = 16, NPD = 8, WIN_MAX = 16;
__shared__ __align__(8) uint64_t g_pm[NPG + NPD + 2];
__shared__ uint32_t g_ring[WIN_MAX][2];

__global__ void __launch_bounds__(32 * (W + 1), 1) ws_kernel(const __grid_constant__ Args a)
{
	const uint32_t G = gridDim.x, c = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const uint32_t sb = (uint32_t)__cvta_generic_to_shared(smem);
	const uint32_t A = sb, B = sb + a.abytes, XS = B + a.bbytes, XZ = XS + H * 2, HS = XZ + H / 2, HZ = HS + 2 * I * 2;
	const uint32_t pm = (uint32_t)__cvta_generic_to_shared(g_pm), emA = pm + 8 * (NPG + NPD), emB = emA + 8;
	const uint32_t g0 = c * E * I / G, g1 = (c + 1) * E * I / G, d0 = c * E * H / G, d1 = (c + 1) * E * H / G;
	const uint32_t na = a.na, nd = a.nd, ng = g1 - g0, ndn = d1 - d0;
	if (tid == 0) {
		for (uint32_t i = 0; i < NPG + NPD + 2; i++)
			asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(pm + 8 * i), "r"(1u) : "memory");
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
	}
	__syncthreads();
	if (warp == W) {
		if (lane)
			return;
		uint32_t q = 0;
		auto issue = [&](uint32_t mb, uint32_t par, uint32_t bytes) {
			if (q >= a.win)
				mbar_wait(g_ring[(q - a.win) % WIN_MAX][0], g_ring[(q - a.win) % WIN_MAX][1]);
			g_ring[q % WIN_MAX][0] = mb, g_ring[q % WIN_MAX][1] = par;
			q++;
			expect_tx(mb, bytes);
		};
		for (uint32_t l = 0; l < a.layers; l++) {
			if (l)
				mbar_wait(emA, (l - 1) & 1);
			for (uint32_t k = 0; k * RG < ng; k++) {
				const uint32_t i0 = k * RG, i1 = min(i0 + RG, ng);
				issue(pm + 8 * k, l & 1, (i1 - i0) * 2 * (GC + GS));
				copy_gu_rows(a, l, g0 + i0, g0 + i1, g0, A, pm + 8 * k);
			}
			if (l)
				mbar_wait(emB, (l - 1) & 1);
			for (uint32_t k = 0; k * RD < ndn; k++) {
				const uint32_t i0 = k * RD, i1 = min(i0 + RD, ndn), mb = pm + 8 * (NPG + k);
				issue(mb, l & 1, (i1 - i0) * (DC + DS));
				copy_dn_rows(a, l, d0 + i0, d0 + i1, d0, B, mb);
			}
		}
		return;
	}
	float tot = 0.0f;
	uint32_t nbar = 0;
	for (uint32_t l = 0; l < a.layers; l++) {
		auto mark = [&](int k) { ::mark(a, l, k); };
		mark(0);
		stage<true>(a.xy + (uint64_t)l * H, 1, H, XS, XZ);
		mark(1);
		mark(2);
		if (a.ilp) {
			const uint32_t rows[3] = { warp, warp + W, warp + 2 * W };
			for (int r = 0; r < 3; r++)
				if (rows[r] < ng)
					mbar_wait(pm + 8 * (rows[r] / RG), l & 1);
			gu_rows<3>(A, na, rows, ng, XS, XZ, lane, a.h + g0);
			for (uint32_t i = warp + 3 * W; i < ng; i += W) {
				mbar_wait(pm + 8 * (i / RG), l & 1);
				gu_row(A, na, i, XS, XZ, lane, a.h + g0 + i);
			}
		} else
			for (uint32_t i = warp; i < ng; i += W) {
				mbar_wait(pm + 8 * (i / RG), l & 1);
				gu_row(A, na, i, XS, XZ, lane, a.h + g0 + i);
			}
		csync<true>();
		if (tid == 0)
			asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(emA) : "memory");
		mark(3);
		grid_barrier<true>(a.bar, ++nbar * G, a.fb);
		mark(4);
		const uint32_t e0 = d0 / H, ne = (d1 - 1) / H - e0 + 1;
		stage<true>(a.h + (uint64_t)e0 * I, ne, I, HS, HZ);
		mark(5);
		mark(6);
		for (uint32_t i0 = 4 * warp; i0 < ndn; i0 += 4 * W) {
			mbar_wait(pm + 8 * (NPG + i0 / RD), l & 1);
			tot += dn_rows(B, nd, i0, d0, d1, e0, HS, HZ, lane, a.xy + (uint64_t)(l + 1) * H);
		}
		csync<true>();
		if (tid == 0)
			asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(emB) : "memory");
		mark(7);
		grid_barrier<true>(a.bar, ++nbar * G, a.fb);
		mark(8);
	}
	if (tot == 1.2345f)
		*a.sink = 1;
}

int main(int argc, char **argv)
{
	const int reps = argc > 1 ? atoi(argv[1]) : 7;
	const uint32_t L = argc > 2 ? (uint32_t)atoi(argv[2]) : 16;
	int sms;
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	Args a = {};
	auto al = [](uint64_t v) { return (v + 255) / 256 * 256; };
	a.off[0] = 0, a.off[1] = al(a.off[0] + (uint64_t)I * GC), a.off[2] = al(a.off[1] + (uint64_t)I * GS);
	a.off[3] = al(a.off[2] + (uint64_t)I * GC), a.off[4] = al(a.off[3] + (uint64_t)I * GS);
	a.off[5] = al(a.off[4] + (uint64_t)H * DC);
	a.ebytes = al(a.off[5] + (uint64_t)H * DS);
	const uint64_t wbytes = (uint64_t)E * (2 * I * (GC + GS) + H * (DC + DS));  // weight bytes a layer reads
	const uint64_t stack = (uint64_t)L * E * a.ebytes;
	const uint32_t G = (uint32_t)sms;
	a.layers = L, a.na = (E * I + G - 1) / G, a.nd = (E * H + G - 1) / G;
	a.abytes = (2 * a.na * (GC + GS) + 127) / 128 * 128, a.bbytes = (a.nd * (DC + DS) + 127) / 128 * 128;
	const uint32_t smem = a.abytes + a.bbytes + H * 2 + H / 2 + 2 * I * 2 + 2 * I / 2;
	uint8_t *w;
	float *xy, *h;
	uint32_t *bar, *sink;
	CK(cudaMalloc(&w, 2 * stack));
	CK(cudaMemset(w, 0x11, 2 * stack));
	CK(cudaMalloc(&xy, 2 * (L + 1) * H * 4));
	CK(cudaMalloc(&h, E * I * 4));
	constexpr uint32_t NSLOT = 1024;  // a zeroed barrier (counter, flag: 64 words) per launch
	CK(cudaMalloc(&bar, NSLOT * 64 * 4));
	CK(cudaMemset(bar, 0, NSLOT * 64 * 4));
	CK(cudaMalloc(&sink, 64));
	std::vector<float> x0(H);
	for (uint32_t i = 0; i < H; i++)
		x0[i] = (float)((i * 2654435761u) >> 8) / (1 << 24) - 0.5f;
	CK(cudaMemset(xy, 0, 2 * (L + 1) * H * 4));
	for (int k = 0; k < 2; k++)
		CK(cudaMemcpy(xy + k * (L + 1) * H, x0.data(), H * 4, cudaMemcpyHostToDevice));
	printf("stack_pattern on %d SMs: %u layers of %u q4 experts (H %u, I %u), %.1f MB read a layer, %.1f MB a stack; "
	       "shared memory %u B a CTA (A %u, B %u)\n",
	       sms, L, E, H, I, wbytes / 1e6, L * wbytes / 1e6, smem, a.abytes, a.bbytes);
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	auto median = [&](auto &&fn) {
		fn(0);
		CK(cudaDeviceSynchronize());
		std::vector<float> v;
		for (int r = 0; r < reps; r++) {
			CK(cudaEventRecord(e0));
			fn(r + 1);
			CK(cudaEventRecord(e1));
			CK(cudaEventSynchronize(e1));
			float ms;
			CK(cudaEventElapsedTime(&ms, e0, e1));
			v.push_back(ms * 1e3f);
		}
		std::sort(v.begin(), v.end());
		return (double)v[v.size() / 2];
	};
	// the same bytes read sequentially (the stack's extents, one launch)
	const double t_seq = median([&](int r) {
		seq_kernel<<<sms * 4, 512>>>((const uint4 *)(w + (r & 1) * stack), stack / 16, sink);
	});
	// a 2 GB read (bench_kernels' read ceiling)
	uint8_t *big;
	CK(cudaMalloc(&big, (size_t)2 << 30));
	CK(cudaMemset(big, 1, (size_t)2 << 30));
	const double t_big = median([&](int) { seq_kernel<<<sms * 4, 512>>>((const uint4 *)big, ((size_t)2 << 30) / 16, sink); });
	CK(cudaFree(big));
	const double ceil_gbs = ((size_t)2 << 30) / t_big / 1e3;
	printf("read ceiling (2 GB): %.0f GB/s; the stack's extents sequentially: %.2f us (%.0f GB/s, %.2f us a layer)\n",
	       ceil_gbs, t_seq, stack / t_seq / 1e3, t_seq / L);
	printf("CSV,mode,variant,layers,stack_us,layer_us,weight_gbs,ratio_of_read\n");
	const char *const mname[] = { "lookahead", "no-lookahead", "no-lookahead-ordered" };
	void (*const ks[])(const Args) = { stack_kernel<0>, stack_kernel<1>, stack_kernel<2> };
	for (int m = 0; m < 3; m++)
		CK(cudaFuncSetAttribute(ks[m], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
	uint64_t *ts;
	CK(cudaMalloc(&ts, (size_t)G * NTS * 8));
	uint32_t slot = 0;
	uint32_t fb = 0;
	auto launch = [&](int m, uint32_t skip, int r, uint64_t *t) {
		Args x = a;
		x.base = w + (r & 1) * stack;
		x.xy = xy + (r & 1) * (L + 1) * H;
		x.h = h, x.sink = sink, x.skip = skip, x.ts = t, x.fb = fb;
		x.bar = bar + 64 * (slot++ % NSLOT);
		if (slot % NSLOT == 0)
			CK(cudaMemset(bar, 0, NSLOT * 64 * 4));
		void *args[] = { &x };
		CK(cudaLaunchCooperativeKernel((const void *)ks[m], dim3(G), dim3(32 * W), args, smem, 0));
	};
	static const struct {
		int mode;
		uint32_t skip;
		const char *what;
	} vs[] = {
		{ 0, 0, "" }, { 1, 0, "" }, { 2, 0, "" },
		{ 1, 3, "no compute" }, { 1, 4, "no copies" }, { 1, 8, "no staging" }, { 1, 15, "barriers only" },
		{ 0, 3, "no compute" },
	};
	for (const auto &v : vs) {
		const double t = median([&](int r) { launch(v.mode, v.skip, r, nullptr); });
		CK(cudaGetLastError());
		const double lu = t / L, gbs = wbytes / lu / 1e3;
		printf("%-20s %-13s: %8.2f us a stack, %6.2f us a layer, %5.0f GB/s of weights, %.3f of the read ceiling\n",
		       mname[v.mode], v.what, t, lu, gbs, gbs / ceil_gbs);
		printf("CSV,%s,%s,%u,%.2f,%.2f,%.0f,%.3f\n", mname[v.mode], v.what, L, t, lu, gbs, gbs / ceil_gbs);
	}
	CK(cudaFuncSetAttribute(ws_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
	if ((a.na + RG - 1) / RG > NPG || (a.nd + RD - 1) / RD > NPD) {
		printf("ws: too many pieces\n");
		return 1;
	}
	uint32_t ilp = 0;
	auto launch_ws = [&](uint32_t win, int r, uint64_t *t) {
		Args x = a;
		x.base = w + (r & 1) * stack;
		x.xy = xy + (r & 1) * (L + 1) * H;
		x.h = h, x.sink = sink, x.win = win, x.ts = t;
		x.bar = bar + 64 * (slot++ % NSLOT);
		x.fb = fb, x.ilp = ilp;
		void *args[] = { &x };
		CK(cudaLaunchCooperativeKernel((const void *)ws_kernel, dim3(G), dim3(32 * (W + 1)), args, smem, 0));
	};
	for (fb = 0; fb < 2; fb++)
		for (uint32_t win : { 1u, 2u, 3u, 4u, 8u, 16u }) {
			const double t = median([&](int r) { launch_ws(win, r, nullptr); });
			CK(cudaGetLastError());
			const double lu = t / L, gbs = wbytes / lu / 1e3;
			printf("warp-specialised, %2u pieces in flight, %s barrier: %8.2f us a stack, %6.2f us a layer, %5.0f GB/s of weights, %.3f of the read ceiling\n",
			       win, fb ? "flag" : "counter", t, lu, gbs, gbs / ceil_gbs);
			printf("CSV,ws%s,win%u,%u,%.2f,%.2f,%.0f,%.3f\n", fb ? "-flag" : "", win, L, t, lu, gbs, gbs / ceil_gbs);
		}
	fb = 1;
	{
		const double t = median([&](int r) { launch(1, 15, r, nullptr); });
		printf("no-lookahead barriers only, flag barrier: %.2f us a layer\n", t / L);
		printf("CSV,no-lookahead,barriers only flag,%u,%.2f,%.2f,,\n", L, t, t / L);
	}
	fb = 0, ilp = 1;
	for (uint32_t win : { 2u, 3u, 4u }) {
		const double t = median([&](int r) { launch_ws(win, r, nullptr); });
		CK(cudaGetLastError());
		const double lu = t / L, gbs = wbytes / lu / 1e3;
		printf("warp-specialised, %2u pieces in flight, a warp's gate|up rows at once: %8.2f us a stack, %6.2f us a layer, %5.0f GB/s of weights, %.3f of the read ceiling\n",
		       win, t, lu, gbs, gbs / ceil_gbs);
		printf("CSV,ws-ilp,win%u,%u,%.2f,%.2f,%.0f,%.3f\n", win, L, t, lu, gbs, gbs / ceil_gbs);
	}
	// where a layer's time goes: per CTA, each point's time after the layer's earliest start (us)
	static const char *const pn[NTS] = { "start", "x staged", "A landed", "gate|up done", "barrier 1", "h staged",
					     "B landed", "down done", "barrier 2" };
	for (int m = 0; m < 4; m++) {
		if (m < 2)
			launch(m, 0, 0, ts);
		else
			launch_ws(m == 2 ? 2 : 3, 0, ts);
		CK(cudaDeviceSynchronize());
		std::vector<uint64_t> hts((size_t)G * NTS);
		CK(cudaMemcpy(hts.data(), ts, hts.size() * 8, cudaMemcpyDeviceToHost));
		uint64_t t0 = UINT64_MAX;
		for (uint32_t i = 0; i < G; i++)
			t0 = std::min(t0, hts[(size_t)i * NTS]);
		printf("%s, layer %u, us after its earliest start (median / slowest CTA):", m < 2 ? mname[m] : m == 2 ? "ws win 2, rows at once" : "ws win 3, rows at once", L / 2);
		for (int k = 0; k < NTS; k++) {
			std::vector<double> v;
			for (uint32_t i = 0; i < G; i++)
				v.push_back((hts[(size_t)i * NTS + k] - t0) / 1e3);
			std::sort(v.begin(), v.end());
			printf(" %s %.2f / %.2f;", pn[k], v[G / 2], v.back());
		}
		printf("\n");
	}
	return 0;
}

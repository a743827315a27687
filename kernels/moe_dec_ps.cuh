// Persistent decode of a stack of small MoE layers at one token (included by
// moe_gpu.cu inside its anonymous namespace, after moe_dec_small.cuh).
//
// Why: a Qwen3-30B-A3B-shaped q4 layer at batch 1 (8 experts of 2048 x 768,
// 21 MB, 4.6 us at read speed) takes 14 us as the row-streaming kernel's two
// launches: two launch ramps and tails, staging, and a CTA that cannot issue
// its weight loads before its warp reaches them.  Its emulation
// (experiments/kernels/stack_pattern.cu, `ws_kernel`) ran a 16-layer stack in
// one launch at 10.0 - 10.3 us a layer: a producer warp streaming each CTA's
// rows into shared memory a phase ahead, at most two pieces in flight (more
// delays the grid barriers queued behind them), the consumer warps computing
// from shared memory, two grid barriers a layer (x -> h, h -> y).
//
// Taken by run_pstack (moe_gpu.cu) for strata_gpu_moe_stack calls under the
// kernel configuration pstack=1 - 8 (the pieces in flight; default 4: on
// the H100 a 16-layer Qwen q4 stack takes 11.3 us a layer against the
// chained two-launch layers' 14.1, q3 11.2 against 16.7 (15.2 when its
// gate|up pieces were 2-row sets: see gu_sets); an earlier version
// was slower on the H200, 15.3 against 13.9, and this one has not run
// there) whose layers all have one token, the same shape, at most SMAX
// experts, all in q4 or all in q3 (policies gv::Q4, gv::Q3i), and each CTA's
// share in shared memory; ONE launch per LMAX layers, one CTA of W + 1
// warps per SM (all resident: one CTA per SM by its shared memory, grid =
// SMs):
//   - rows in row sets of RS = P::NB consecutive rows (the policy's several
//     rows per lane, q4 4, q3 2; P::load_xr / P::dot_xr); a gate|up piece
//     is 4 rows of gate and of up (gu_sets: q4 one row set, q3 two): piece
//     k of a layer = rows 4 k' .. 4 k' + 3 of gate and of up of expert
//     k / (inter / 4); down row sets over hidden; each CTA a contiguous
//     range of each phase's pieces and row sets (share below);
//   - warp W, lane 0, the producer: per layer, a gate|up piece's rows
//     (gate codes, up codes, gate scales, up scales: four bulk copies) and a
//     piece per DQ down row sets (codes, scales; split where the row sets
//     cross an expert), each piece its own mbarrier, at most `win` pieces in
//     flight; a layer's gate|up pieces once the consumers are done with the
//     previous layer's (their count of layers done, gu_done), its down
//     pieces once they are done with the previous layer's down (dn_done;
//     counts, not an mbarrier's parity: a CTA's consumers may run a layer
//     ahead of its producer where it has no rows): the next layer's rows stream
//     while this layer computes.  A piece's mbarrier completes one phase per
//     use (a layer this CTA has its rows in): the n-th use has parity n & 1,
//     counted by the producer and by the one consumer warp of the piece;
//   - warps 0 .. W - 1 (named barrier 1): x staged from the layer's x
//     (through L2: the previous layer's y, written by other SMs) as the
//     row-streaming kernel stages it (the policy's stage: 16-bit fixed point,
//     a power-of-two row scale); gate|up piece k by warp k % W, 32 lanes a
//     row set (q3: 16), the chunks j = lane, lane + 32 (16), ... of the set's
//     RS gate and RS up rows; h = silu(gate) up to global, then each slot's
//     count of h pieces written (a counter per slot, added to by the CTAs of
//     its pieces);
//     once the counters of the CTA's down experts are complete, their h rows
//     staged likewise; down: a warp per piece (DQ row sets),
//     Ld<P>::DN_LANES lanes a row set (q4 8, q3 4); y += routing weight x
//     sum by atomics; grid barrier (every CTA's y before the next layer's x).
//     The grid barrier: a counter every CTA adds to and polls; the counters
//     count on over the launch's layers and the last CTA out of the launch
//     resets them all.  (The first version had a grid barrier in place of
//     the h counters: the barriers, with the copies in flight, took ~3 us
//     each of a 12.3 us q4 layer on the H100, experiments/kernels/README.md);
//   - the layers' x, y, experts and routing weights are the launch's
//     parameters (Args, __grid_constant__), so a captured CUDA graph replays
//     them.
// Accuracy: as the row-streaming kernel's (the same policy, staging and
// arithmetic; sums in a different order).
namespace ps {

constexpr uint32_t LMAX = sm::LMAX; // layers per launch
constexpr uint32_t SMAX = sm::SMAX; // experts (slots) per layer
constexpr uint32_t NPG_MAX = 32;   // gate|up pieces per CTA and layer
constexpr uint32_t NPD_MAX = 16;   // down pieces per CTA and layer
constexpr uint32_t NH_MAX = 4;     // experts a CTA's down row sets touch
constexpr uint32_t WIN_MAX = 8;    // pieces in flight at most (pstack's largest value)
constexpr int W = 16;              // consumer warps
constexpr uint32_t NCONS = 32 * W; // consumer threads
constexpr uint32_t SMEM_MAX = 226 * 1024;  // dynamic shared memory (beside the kernel's mbarriers)
constexpr uint32_t HCNT = 2;                // Args::bar's first h counter (BAR_WORDS words in all)
constexpr uint32_t BAR_WORDS = HCNT + SMAX;

struct Layer {
	const float *x;        // 1 x hidden
	float *y;              // 1 x hidden, accumulated into
	uint32_t ns;           // slots (experts) used, 1 .. SMAX
	const uint8_t *ext[SMAX];
	float w[SMAX];         // routing weights
};

struct Args {
	FmtTab f;              // the stack's format (one for every layer)
	uint32_t hidden, inter, layers;
	uint32_t pg, pd;       // bytes per piece: gate|up (RS rows of gate codes, of up codes, their scales), down (DQ RS rows: codes, then scales)
	uint32_t a, b;         // shared offsets of the gate|up and down pieces
	uint32_t xs, xz, hs, hz; // shared offsets of the staged x (values, zero-point terms) and h rows
	uint32_t win;          // pieces in flight at most (<= WIN_MAX)
	float *h;              // SMAX x inter floats
	unsigned *bar;         // [0] grid barrier arrivals, [1] CTAs out, [HCNT + s] slot s's h row sets written; all 0 between launches
	unsigned long long *ts; // small_ts=1: the ring of phase timestamps (strata_gpu_small_phases), else null
	uint32_t ts_i;          // layer l's slot in it: ts_i + l
	Layer l[LMAX];
};

// small_ts=1: sm::Ts, a layer a record as the small-layer kernel over a
// stack keeps them; ISSUED: the producer's gate|up pieces of the layer issued
// (usually during the previous layer, so every record is zeroed at the
// launch's start, before the producer runs), CNT_PUB: the CTA's h counters
// added to, CNT_WAIT: those of its down experts complete; the others as the
// small-layer kernel's.

// CTA c's share [b, e) of n items over g CTAs.
__host__ __device__ __forceinline__ void share(uint32_t n, uint32_t c, uint32_t g, uint32_t &b, uint32_t &e)
{
	b = (uint32_t)((uint64_t)n * c / g), e = (uint32_t)((uint64_t)n * (c + 1) / g);
}

// This CTA's row sets of layer L (sg, sd of an expert): gate|up [g0, g1), down [d0, d1).
struct Span {
	uint32_t g0, g1, d0, d1;
};
__device__ __forceinline__ Span span_of(const Layer &L, uint32_t sg, uint32_t sd)
{
	Span s;
	share(L.ns * sg, blockIdx.x, gridDim.x, s.g0, s.g1);
	share(L.ns * sd, blockIdx.x, gridDim.x, s.d0, s.d1);
	return s;
}

// A policy's register buffer of several rows per lane (P::load_xr's layout)
// from rows in shared memory: chunk j of rows 0 .. NB - 1 at c (codes, row
// pitch rc) and s (scales, pitch rs), shared-window addresses.
// DN_LANES: lanes per down row set (so a lane takes 3 chunks of a
// Qwen3-30B-A3B down row: 24 q4 chunks, 12 q3 chunks).
template <class P> struct Ld;
template <> struct Ld<gv::Q4> {
	static constexpr uint32_t DN_LANES = 8;
	template <int LSH>
	__device__ __forceinline__ static void load_xr(gv::Q4::Buf<LSH> &b, uint32_t c, uint32_t s, uint32_t j, uint32_t rc,
						       uint32_t rs)
	{
#pragma unroll
		for (uint32_t i = 0; i < gv::Q4::NB; i++) {
			b.c[i] = gv::lds(c + i * rc + 16 * j);
			b.s[i] = gv::lds8(s + i * rs + 2 * (j & ~3u));
		}
	}
};
template <> struct Ld<gv::Q3i> {
	static constexpr uint32_t DN_LANES = 4;
	template <int LSH>
	__device__ __forceinline__ static void load_xr(gv::Q3::Buf<LSH> &b, uint32_t c, uint32_t s, uint32_t j, uint32_t rc,
						       uint32_t rs)
	{
		const uint32_t k = j >> 2, t = j & 3;
#pragma unroll
		for (uint32_t i = 0; i < gv::Q3i::NB; i++) {
			b.c[i] = gv::lds(c + i * rc + 96 * k + 16 * t);
			b.x[i] = gv::lds8(c + i * rc + 96 * k + 64 + 8 * t);
			b.s[i] = gv::lds(s + i * rs + 16 * k);
		}
	}
};
// Row sets per down piece (a warp's task: DN_LANES lanes a row set).
template <class P> __host__ __device__ constexpr uint32_t dq() { return 32 / Ld<P>::DN_LANES; }
// Row sets per gate|up piece (a warp's task: 32 / gu_sets lanes a row set), so
// that a piece is 4 rows of gate and of up in both formats: q3's row sets of
// 2 rows go two to a piece, 16 lanes each (half the pieces, waits and
// reductions of a piece per row set).
template <class P> __host__ __device__ constexpr uint32_t gu_sets() { return 4 / P::NB; }

__device__ __forceinline__ void csync() { pf90::bar_sync(1, NCONS); }

// Stage nr rows of cols floats (row r at src + r * stride, read through L2)
// for policy P at shared offsets xo (values) and co (zero-point terms), one
// 8-column slice per consumer thread (nr * pc / 8 <= NCONS, run_pstack's
// check); mx[r] (zero on entry) ends as row r's largest magnitude (bits).
template <class P>
__device__ __forceinline__ void stage(const float *src, uint32_t stride, uint32_t nr, uint32_t cols, uint32_t pc, uint32_t xo,
				      uint32_t co, uint32_t *mx)
{
	const uint32_t nq = pc / 8, cpr = pc / 256 * P::CPB, i = threadIdx.x, r = i / nq, q = i - r * nq;
	// nq is a multiple of 32: a warp's slices are of one row, all on or all off
	const bool on = i < nr * nq;
	float v[8];
	if (on)
		gv::ld8<true>(src + (uint64_t)r * stride + 8 * q, 8 * q, cols, v);
	gv::slice_max(v, on, mx + r);
	csync();
	if (on)
		gv::slice_stage<P>(v, 1.0f / gv::row_inv<P>(mx[r]), q, cols, r, cpr, xo, co);
	csync();
}

// Every wait below gives up after WATCH_NS without progress (watch: it
// prints where it was and traps).
// mbarrier mb's phase of parity par complete (piece i).
__device__ __forceinline__ void wait_piece(uint32_t mb, uint32_t par, uint32_t i)
{
	for (uint64_t t0 = 0; !mbar_try(mb, par);)
		watch(t0, "piece", i, par);
}

// The consumers' count of layers done (thread 0, after their barrier: their
// reads of the pieces happen before), and the producer's wait for it.
__device__ __forceinline__ void publish_count(uint32_t *c, uint32_t n)
{
	asm volatile("st.release.cta.shared.u32 [%0], %1;\n" ::"r"((uint32_t)__cvta_generic_to_shared(c)), "r"(n) : "memory");
}
__device__ __forceinline__ void wait_count(uint32_t *c, uint32_t n, const char *what)
{
	const uint32_t a = (uint32_t)__cvta_generic_to_shared(c);
	uint64_t t0 = 0;
	for (;;) {
		uint32_t v;
		asm volatile("ld.acquire.cta.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(a) : "memory");
		if (v >= n)
			return;
		__nanosleep(32);
		watch(t0, what, n, v);
	}
}

// Every consumer of every CTA has arrived (the target-th arrival at bar).
__device__ __forceinline__ void grid_sync(unsigned *bar, uint32_t target)
{
	csync();
	if (threadIdx.x == 0)
		sm::grid_arrive(bar, target);
	csync();
}

// Slot s's h written by every CTA in every layer of the launch up to l that
// uses it (sg row sets a layer: the count its counter reaches), waited for
// by one thread.
__device__ __forceinline__ void wait_h(const Args &a, uint32_t l, uint32_t s, uint32_t sg)
{
	uint32_t need = 0;
	for (uint32_t k = 0; k <= l; k++)
		need += a.l[k].ns > s ? sg : 0;
	wait_at_least(a.bar + HCNT + s, need, 32, "h row sets of slot", s);
}

// The sums of a lane's NB rows (acc) over its group of 1 << N lanes (the
// lanes equal above bit N): every lane of the group ends with the totals.
template <int N, uint32_t NB> __device__ __forceinline__ void row_sums(float (&acc)[NB])
{
#pragma unroll
	for (uint32_t o = 1u << (N - 1); o; o >>= 1)
#pragma unroll
		for (uint32_t i = 0; i < NB; i++)
			acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], o);
}
// acc[k] without a run-time index into registers.
template <uint32_t NB> __device__ __forceinline__ float pick(const float (&acc)[NB], uint32_t k)
{
	float v = acc[0];
#pragma unroll
	for (uint32_t i = 1; i < NB; i++)
		v = k == i ? acc[i] : v;
	return v;
}

template <int FMT, class P> __global__ void __launch_bounds__(32 * (W + 1), 1) ps_kernel(const __grid_constant__ Args a)
{
	constexpr uint32_t RS = P::NB, DQ = dq<P>(), LD = Ld<P>::DN_LANES, GQ = gu_sets<P>(), GL = 32 / GQ, PR = RS * GQ;
	static_assert(GL == 32 || GL == 16, "32 or 16 lanes a gate|up row set");
	__shared__ __align__(8) uint64_t mbs[NPG_MAX + NPD_MAX];
	__shared__ uint32_t mxx, mxh[NH_MAX], gu_done, dn_done;
	const uint32_t G = gridDim.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(g_smem);
	const uint32_t mb0 = (uint32_t)__cvta_generic_to_shared(mbs);
	const FmtTab &f = a.f;
	const uint32_t rc0 = (uint32_t)f.rowc[0], rs0 = (uint32_t)f.rows_[0], rc1 = (uint32_t)f.rowc[1], rs1 = (uint32_t)f.rows_[1];
	const uint32_t sg = a.inter / PR, sd = a.hidden / RS;  // per expert: gate|up pieces, down row sets
	if (tid == 0) {
		for (uint32_t i = 0; i < NPG_MAX + NPD_MAX; i++)
			mbar_init(mb0 + 8 * i, 1);
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
		mxx = 0, gu_done = 0, dn_done = 0;
	}
	if (tid < NH_MAX)
		mxh[tid] = 0;
	const sm::Ts tsr(a.ts, a.ts_i, a.layers);
	__syncthreads();
	if (warp == W) {
		// The producer.  A piece's mbarrier completes one phase per use
		// (a layer in which this CTA has its rows): the n-th use has parity
		// n & 1, counted here and by the one consumer warp of the piece.
		if (lane)
			return;
		uint32_t q = 0, ring[WIN_MAX][2] = {}, uses[NPG_MAX + NPD_MAX] = {};
		// Piece i (NPG_MAX + k: down piece k) for bytes, once the piece issued
		// win pieces before it has landed: unless that piece was issued again
		// since (then its earlier use has landed: a piece is issued again only
		// after the consumers are done with the layer of its last use).
		auto issue = [&](uint32_t i, uint32_t bytes) {
			if (q >= a.win) {
				const uint32_t *r = ring[(q - a.win) % WIN_MAX];
				if (uses[r[0]] == r[1] + 1)
					wait_piece(mb0 + 8 * r[0], r[1] & 1, r[0]);
			}
			ring[q % WIN_MAX][0] = i, ring[q % WIN_MAX][1] = uses[i]++;
			q++;
			mbar_expect_arrive(mb0 + 8 * i, bytes);
			return mb0 + 8 * i;
		};
		for (uint32_t l = 0; l < a.layers; l++) {
			const Layer &L = a.l[l];
			const auto [g0, g1, d0, d1] = span_of(L, sg, sd);
			wait_count(&gu_done, l, "gate|up done, layers");
			fence_proxy_async(); // the consumers' reads of the pieces precede the copies below
			for (uint32_t k = 0; g0 + k < g1; k++) {
				const uint32_t gp = g0 + k, s = gp / sg, r0 = (gp - s * sg) * PR, dst = sbase + a.a + k * a.pg;
				const uint8_t *e = L.ext[s];
				const uint32_t mb = issue(k, a.pg);
				bulk_copy(dst, e + f.off[0] + (uint64_t)r0 * rc0, PR * rc0, mb);
				bulk_copy(dst + PR * rc0, e + f.off[1] + (uint64_t)r0 * rc0, PR * rc0, mb);
				bulk_copy(dst + 2 * PR * rc0, e + f.off[0] + f.soff[0] + (uint64_t)r0 * rs0, PR * rs0, mb);
				bulk_copy(dst + 2 * PR * rc0 + PR * rs0, e + f.off[1] + f.soff[0] + (uint64_t)r0 * rs0, PR * rs0, mb);
			}
			tsr.mark(l, STRATA_SMALL_TS_ISSUED);
			wait_count(&dn_done, l, "down done, layers");
			fence_proxy_async();
			for (uint32_t k = 0; d0 + k * DQ < d1; k++) {
				const uint32_t i0 = d0 + k * DQ, i1 = min(i0 + DQ, d1), dst = sbase + a.b + k * a.pd;
				const uint32_t mb = issue(NPG_MAX + k, (i1 - i0) * RS * (rc1 + rs1));
				for (uint32_t u = i0; u < i1;) {
					// the row sets of one expert at a time
					const uint32_t s = u / sd, n = min(i1, (s + 1) * sd) - u, r0 = (u - s * sd) * RS, li = (u - i0) * RS;
					const uint8_t *e = L.ext[s] + f.off[2];
					bulk_copy(dst + li * rc1, e + (uint64_t)r0 * rc1, n * RS * rc1, mb);
					bulk_copy(dst + DQ * RS * rc1 + li * rs1, e + f.soff[1] + (uint64_t)r0 * rs1, n * RS * rs1, mb);
					u += n;
				}
			}
		}
		return;
	}
	// The consumers.
	using Buf = typename P::template Buf<5>;
	const uint32_t cpr0 = f.pc[0] / 256 * P::CPB, cpr1 = f.pc[1] / 256 * P::CPB;
	const uint32_t us0 = 16 * cpr0, us1 = 16 * cpr1, xst1 = cpr1 * P::NG * 16, cst1 = cpr1 * P::NG * 4;
	// this warp's pieces k = warp + W i: their uses so far (gate|up, down)
	static_assert(NPD_MAX == W, "a warp's down piece: one a layer");
	uint32_t ug[NPG_MAX / W] = {}, ud = 0;
	if (tid == 0) // (thread 0 records the timestamps)
		tsr.start(0);
	for (uint32_t l = 0; l < a.layers; l++) {
		const Layer &L = a.l[l];
		const auto [g0, g1, d0, d1] = span_of(L, sg, sd);
		// gate|up: x, then row set k by warp k % W, h = silu(gate) up
		stage<P>(L.x, 0, 1, a.hidden, f.pc[0], a.xs, a.xz, &mxx);
		if (tid == 0)
			tsr.mark(l, STRATA_SMALL_TS_XSTAGED);
		const float ix = gv::row_inv<P>(mxx);
		uint32_t xu[1][P::NG], cu[1];
#pragma unroll
		for (uint32_t u = 0; u < P::NG; u++)
			xu[0][u] = sbase + a.xs + u * us0;
		cu[0] = sbase + a.xz;
#pragma unroll
		for (uint32_t m = 0; m < NPG_MAX / W; m++) {
			const uint32_t k = warp + W * m;
			if (g0 + k >= g1)
				break;
			// row set rq of the piece by lanes rq GL .. rq GL + GL - 1
			const uint32_t gp = g0 + k, s = gp / sg, rq = lane / GL, jl = lane % GL, r0 = (gp - s * sg) * PR + rq * RS;
			const uint32_t pb = sbase + a.a + k * a.pg, pc_ = pb + rq * RS * rc0, ps_ = pb + 2 * PR * rc0 + rq * RS * rs0;
			float ag[RS], au[RS];
#pragma unroll
			for (uint32_t i = 0; i < RS; i++)
				ag[i] = au[i] = 0.0f;
			wait_piece(mb0 + 8 * k, ug[m]++ & 1, k);
			if (tid == 0 && m == 0)
				tsr.mark(l, STRATA_SMALL_TS_MBAR0);
			for (uint32_t j = jl; j < cpr0; j += GL) {
				Buf bg, bu;
				Ld<P>::template load_xr<5>(bg, pc_, ps_, j, rc0, rs0);
				Ld<P>::template load_xr<5>(bu, pc_ + PR * rc0, ps_ + PR * rs0, j, rc0, rs0);
				P::template dot_xr<1, 5>(bg, j, us0, xu, cu, ag);
				P::template dot_xr<1, 5>(bu, j, us0, xu, cu, au);
			}
			row_sums<GL == 32 ? 5 : 4>(ag);
			row_sums<GL == 32 ? 5 : 4>(au);
			if (jl < RS) {
				const float g = pick(ag, jl) * ix, u = pick(au, jl) * ix;
				a.h[(uint64_t)s * a.inter + r0 + jl] = g / (1.0f + expf(-g)) * u;
			}
		}
		if (tid == 0)
			tsr.mark(l, STRATA_SMALL_TS_GU_W0);
		csync();
		if (tid == 0) {
			tsr.mark(l, STRATA_SMALL_TS_GU);
			publish_count(&gu_done, l + 1);
			mxx = 0;
			// h of this CTA's row sets: each slot's count of them (a
			// release: the barrier above orders every warp's h before it)
			if (g0 < g1)
				sm::count_items(a.bar + HCNT, g0, g1, sg);
			tsr.mark(l, STRATA_SMALL_TS_CNT_PUB);
		}
		// down: once every h row of the CTA's experts is written (their
		// counters, not a grid barrier: the CTAs of other experts may still
		// be computing theirs), the h rows staged, then a warp per piece
		const uint32_t e0 = d0 < d1 ? d0 / sd : 0, nh = d0 < d1 ? (d1 - 1) / sd - e0 + 1 : 0;
		if (tid < nh)
			wait_h(a, l, e0 + tid, sg);
		csync();
		if (tid == 0)
			tsr.mark(l, STRATA_SMALL_TS_CNT_WAIT);
		stage<P>(a.h + (uint64_t)e0 * a.inter, a.inter, nh, a.inter, f.pc[1], a.hs, a.hz, mxh);
		if (tid == 0)
			tsr.mark(l, STRATA_SMALL_TS_DN_STAGED);
		const uint32_t grp = lane / LD, sub = lane % LD;
		if (const uint32_t t = warp; d0 + t * DQ < d1) {
			// row set kq of the piece; past the CTA's last, its first (computed, not written)
			const uint32_t kq = d0 + t * DQ + grp < d1 ? grp : 0;
			const uint32_t gq = d0 + t * DQ + kq, s = gq / sd, r0 = (gq - s * sd) * RS, r = s - e0;
			const uint32_t pc_ = sbase + a.b + t * a.pd + kq * RS * rc1, ps_ = sbase + a.b + t * a.pd + DQ * RS * rc1 + kq * RS * rs1;
#pragma unroll
			for (uint32_t u = 0; u < P::NG; u++)
				xu[0][u] = sbase + a.hs + r * xst1 + u * us1;
			cu[0] = sbase + a.hz + r * cst1;
			float ad[RS];
#pragma unroll
			for (uint32_t i = 0; i < RS; i++)
				ad[i] = 0.0f;
			wait_piece(mb0 + 8 * (NPG_MAX + t), ud++ & 1, NPG_MAX + t);
			for (uint32_t j = sub; j < cpr1; j += LD) {
				Buf b;
				Ld<P>::template load_xr<5>(b, pc_, ps_, j, rc1, rs1);
				P::template dot_xr<1, 5>(b, j, us1, xu, cu, ad);
			}
			row_sums<LD == 8 ? 3 : LD == 4 ? 2 : 1>(ad);
			if (kq == grp && sub < RS)
				atomicAdd(L.y + r0 + sub, L.w[s] * pick(ad, sub) * gv::row_inv<P>(mxh[r]));
		}
		if (tid == 0)
			tsr.mark(l, STRATA_SMALL_TS_DN_W0);
		csync();
		if (tid == 0) {
			tsr.mark(l, STRATA_SMALL_TS_DN);
			publish_count(&dn_done, l + 1);
		}
		if (tid < NH_MAX)
			mxh[tid] = 0;
		grid_sync(a.bar, (l + 1) * G);
		if (tid == 0) {
			tsr.end(l);
			if (l + 1 < a.layers)
				tsr.start(l + 1);
		}
	}
	// The last CTA out resets the barrier for the next launch (every CTA
	// has passed its last poll before it counts itself out).
	if (tid == 0) {
		fence_gpu();
		if (atomicAdd(a.bar + 1, 1u) == G - 1) {
			for (uint32_t i = 0; i < BAR_WORDS; i++)
				a.bar[i] = 0;
			fence_gpu();
		}
	}
}

} // namespace ps

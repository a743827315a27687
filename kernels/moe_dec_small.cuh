// One-launch decode of a small MoE layer at one token per expert (included
// by moe_gpu.cu inside its anonymous namespace, after moe_dec_tr.cuh).
//
// Why: a Qwen3-30B-A3B-shaped layer at batch 1 (8 experts of 2048 x 768) is
// 21 MB of q4 (4.6 us at read speed) or 13 MB of hot (8.4 us at the tier
// decode ceiling); the row-streaming kernels (moe_dec_gv.cuh /
// moe_dec_tr.cuh: two launches, whole rows per warp task, weights through a
// register ring) and the persistent kernel spend most of such a layer in
// fixed latencies: two launches with their ramp and tail, a CTA that cannot
// issue its weight loads until its warp reaches them, staging.
//
// Taken by run_dec_small (moe_gpu.cu) for launches whose experts all have
// one token and are all in one of q4, q3 (q3's integer loop, gv::Q3i), hot,
// warm, cold (the FMA decoder: the codebook table would not leave room for
// the weights), under the kernel configuration small=1, or auto (the
// default: the tier formats in launches of at most
// STRATA_MOE_SMALL_AUTO_WEIGHTS weights, where it measured faster; kernels.h),
// when each CTA's share of the layer fits in shared memory.  ONE launch per
// layer, one CTA of W = 16 warps per SM:
//   - the rows are cut as the row-streaming kernel cuts them (a task: rw =
//     32 >> lsh consecutive rows of one expert's gate and up, or of its down;
//     lanes per row 1 << lsh, contiguous ranges of tasks per CTA, gv_tasks),
//     the geometry chosen for the fewest items of the busiest warp (below),
//     then the fewest bytes;
//   - at its start, warp 0 copies the CTA's whole share of the layer's
//     weights, its gate|up rows and its down rows (both are known at launch;
//     a lane per (task, matrix), small=3: thread 0 one after another),
//     into shared memory by 1-D bulk copies (cp.async.bulk, two per task and
//     matrix: codes and scales, each from the 16-byte boundary below the rows
//     to the one above them), one mbarrier per task and matrix, in the order
//     they are used; then, when chained (a stack of layers), it lets the next
//     launch start and waits for the earlier ones (griddepcontrol), so the
//     weights stream while the previous layer finishes;
//   - gate|up: x staged as the row-streaming kernel stages it (gv::stage);
//     the work is dealt as items (task, matrix, batch of NB chunks per lane),
//     item i to warp i % W, so every warp has work however few tasks the CTA
//     has (a tier-format CTA has ~3 tasks of 16 rows: the whole rows of the
//     row-streaming kernel would leave most warps idle); a warp waits for its
//     item's mbarrier, loads the batch from shared memory into the policy's
//     register buffer (SLd below, the layout of the policy's own load) and
//     calls the policy's dot (moe_dec_gv.cuh's Q4 / Q3i, moe_dec_tr.cuh's
//     Tier<FMT, 0>: their code, unchanged); the row's lanes meet by xor
//     shuffles and add into a shared-memory partial sum per row;
//   - h = silu(gate) * up to global, then per expert a counter of its
//     gate|up tasks done (p.sync, as the persistent kernel; all CTAs are
//     resident, so spinning on it is safe);
//   - down: wait for the counters of the CTA's experts, stage their h rows
//     (gv::stage), the same items from the down rows already in shared
//     memory, y += weight x sum by one atomic per row; the last CTA out resets
//     the counters.
// Accuracy: as the row-streaming kernels' (the same policies and staging).
// Measured (H200, experiments/kernels/README.md, "One-launch small-layer
// kernel"): Qwen3-30B-A3B T=1 hot / warm / cold 22.4 / 22.0 / 21.0 us against
// 33.2 / 33.5 / 33.0 us (the persistent kernel), 16-layer stacks 21.1 / 20.9 /
// 19.8 us per layer against 29.2 / 29.7 / 29.6; q4 20.0 vs 15.1 us and q3
// 17.8 vs 15.9 us slower (stacks 18.6 vs 14.9, 16.3 vs 16.6).  ncu (q4): 60%
// of the shared-memory wavefronts are bank conflicts (a warp's rows are
// rowc bytes apart, rowc a multiple of 128 bytes), a third of the warps'
// cycles wait at CTA barriers; the time is ~20 us whatever the format's bytes
// (cold 4.7 MB, q4 21 MB): fixed costs, not bandwidth.  Phase timestamps
// (small_ts=1, bench_kernels --phases; README "h25b"), hot: copies issued
// 2.1 us after the start, x staged 3.7, gate|up done 11.7 (7.4 us of decode
// at the FMA decoder's rate), h and counters 12.7, counters complete 13.3, h
// staged 14.6, down done 18.5 (4.0 us), exit 19.5; in a stack a layer's CTA
// starts when the previous layer's CTA on its SM exits, so the layers do not
// overlap.  small=2 (a bulk copy per code row at a skewed pitch, no bank
// conflicts) measured slower: 264 copies per CTA take 9.6 us to issue.
namespace sm {

constexpr int W = 16;                      // warps per CTA
constexpr uint32_t SMEM_MAX = 227 * 1024;  // shared-memory bytes per CTA (sm_90)

struct Args {
	gv::Args g[2];         // per phase (gate|up, down): lsh, nbat, cpr, nrs, ntask, tpc, xrows, srows, xoff, coff
	uint32_t cr[2], sr[2]; // shared bytes per task and matrix: codes, scales (16-aligned rows + 16)
	uint32_t wo[2];        // shared offsets of the phases' task regions (task k, matrix m at wo + (k nmat + m)(cr + sr))
	uint32_t acc;          // shared offset of the partial sums: gate|up (tpc0 x 2 x rw0), then down (tpc1 x rw1)
	uint32_t mbar;         // shared offset of the mbarriers: gate|up 2 per task, then down one per task
	uint32_t par;          // small=1, 2: warp 0's lanes issue the copies of different (task, matrix) pairs at
			       // once, h published by one fence; 0 (small=3): thread 0 issues them one after
			       // another, every thread fences h
	uint32_t pitch[2];     // small=2: shared bytes per code row (each row its own bulk copy, the pitch
			       // skewed so a warp's rows fall on different banks); 0: rows rowc apart
	unsigned long long *ts; // small_ts=1: the ring of phase timestamps (strata_gpu_small_phases), else null
	uint32_t ts_i;          // the launch's slot in it (a stack: layer l's slot ts_i + l)
};

// small_ts=1: the phase timestamps of kernels.h's strata_small_ts.
constexpr uint32_t TS_WORDS = STRATA_SMALL_TS_WORDS;
static_assert(2 + STRATA_SMALL_TS_N <= STRATA_SMALL_TS_WORDS, "phase timestamps");

// A launch's records, one a layer as if each were a launch of its own: layer
// l in slot (ts_i + l) of the ring at ts (null: none recorded), [0] the
// global timer at the layer's start, [1] at its end, [2 + ph] clock64() when
// phase ph passed.  Thread 0 zeroes every layer's record at construction
// (a __syncthreads() must follow before another thread marks); the other
// calls are made by the one thread that records the phase.
struct Ts {
	unsigned long long *base;
	uint32_t i0;
	__device__ __forceinline__ Ts(unsigned long long *ts, uint32_t ts_i, uint32_t layers) : base(ts), i0(ts_i)
	{
		if (base && threadIdx.x == 0)
			for (uint32_t l = 0; l < layers; l++)
				for (uint32_t i = 0; i < TS_WORDS; i++)
					rec(l)[i] = 0;
	}
	__device__ __forceinline__ unsigned long long *rec(uint32_t l) const
	{
		const size_t slot = (i0 + l) % STRATA_SMALL_TS_LAUNCHES;
		return base + (slot * STRATA_SMALL_TS_CTAS + blockIdx.x) * TS_WORDS;
	}
	__device__ __forceinline__ void mark(uint32_t l, int ph) const
	{
		if (base)
			rec(l)[2 + ph] = clock64();
	}
	__device__ __forceinline__ void start(uint32_t l) const
	{
		if (base)
			rec(l)[0] = gtimer(), mark(l, STRATA_SMALL_TS_START);
	}
	__device__ __forceinline__ void end(uint32_t l) const
	{
		if (base)
			mark(l, STRATA_SMALL_TS_END), rec(l)[1] = gtimer();
	}
};

// A policy's register buffer (LSH = -1: a scale word per chunk) filled from
// the rows' bytes in shared memory (c, s: offsets in g_smem of the row's codes
// and scales) at chunks j0 + (i << lsh), those past the row clamped to its last
// chunk (the policy's dot gives them zero scales): the layout of the
// policy's own load (moe_dec_gv.cuh, moe_dec_tr.cuh).
template <class P> struct SLd;
template <> struct SLd<gv::Q4> {
	__device__ __forceinline__ static void load(gv::Q4::Buf<-1> &b, uint32_t c, uint32_t s, uint32_t j0, uint32_t lsh,
						    uint32_t cpr)
	{
#pragma unroll
		for (uint32_t i = 0; i < gv::Q4::NB; i++) {
			const uint32_t j = min(j0 + (i << lsh), cpr - 1);
			b.c[i] = *reinterpret_cast<const uint4 *>(g_smem + c + 16 * j);
			b.s[i] = *reinterpret_cast<const uint2 *>(g_smem + s + 2 * (j & ~3u));
		}
	}
};
template <> struct SLd<gv::Q3i> {
	__device__ __forceinline__ static void load(gv::Q3::Buf<-1> &b, uint32_t c, uint32_t s, uint32_t j0, uint32_t lsh,
						    uint32_t cpr)
	{
#pragma unroll
		for (uint32_t i = 0; i < gv::Q3::NB; i++) {
			const uint32_t j = min(j0 + (i << lsh), cpr - 1), k = j >> 2, t = j & 3;
			b.c[i] = *reinterpret_cast<const uint4 *>(g_smem + c + 96 * k + 16 * t);
			b.x[i] = *reinterpret_cast<const uint2 *>(g_smem + c + 96 * k + 64 + 8 * t);
			b.s[i] = *reinterpret_cast<const uint4 *>(g_smem + s + 16 * k);
		}
	}
};
template <int FMT, int DEC> struct SLd<gv::Tier<FMT, DEC>> {
	using T = gv::Tier<FMT, DEC>;
	using F = typename T::F;
	__device__ __forceinline__ static void load(typename T::template Buf<-1> &b, uint32_t c, uint32_t s, uint32_t j0,
						    uint32_t, uint32_t cpr)
	{
		const uint32_t j = min(j0, cpr - 1), q = c + F::CODE_BYTES * j;
		if constexpr (FMT == STRATA_FMT_WARM) {
#pragma unroll
			for (uint32_t i = 0; i < T::NWD / 4; i++) {
				const uint4 v = *reinterpret_cast<const uint4 *>(g_smem + q + 16 * i);
				b.w[4 * i] = v.x, b.w[4 * i + 1] = v.y, b.w[4 * i + 2] = v.z, b.w[4 * i + 3] = v.w;
			}
		} else if constexpr (FMT == STRATA_FMT_HOT) {
#pragma unroll
			for (uint32_t i = 0; i < T::NWD / 2; i++) {
				const uint2 v = *reinterpret_cast<const uint2 *>(g_smem + q + 8 * i);
				b.w[2 * i] = v.x, b.w[2 * i + 1] = v.y;
			}
		} else {
#pragma unroll
			for (uint32_t i = 0; i < T::NWD; i++)
				b.w[i] = *reinterpret_cast<const uint32_t *>(g_smem + q + 4 * i);
		}
		b.s = *reinterpret_cast<const unsigned short *>(g_smem + s + F::SCALE_BYTES * j);
	}
};

// Thread 0's part of a grid barrier of a stack kernel: this CTA's writes
// before it (ordered by a CTA barrier) visible, its arrival at *bar, then
// the wait for target arrivals of all CTAs (all resident).
__device__ __forceinline__ void grid_arrive(unsigned *bar, uint32_t target)
{
	red_release(bar, 1u);
	wait_at_least(bar, target, 32, "grid barrier", target);
}
// Thread 0's hand-over of the CTA's items [b, e) (b < e; their writes ordered
// before it by a CTA barrier): a release, then each slot's count of them
// added to its counter cnt[s] (n items a slot).
__device__ __forceinline__ void count_items(unsigned *cnt, uint32_t b, uint32_t e, uint32_t n)
{
	fence_gpu();
	for (uint32_t s = b / n; s <= (e - 1) / n; s++)
		atomicAdd(cnt + s, min(e, (s + 1) * n) - max(b, s * n));
}

// A stack of layers in one launch (ST: small_stack in moe_gpu.cu, kernel configuration
// pstack=1 - 8 on tier-format stacks): the layers' own x, y, experts (in
// slot order: ascending expert) and routing weights.  MoeParams holds layer
// 0's; its geometry, slots (a0 = s, one token each, h_off) and tok serve
// every layer, which all have the same shape and number of experts.
constexpr uint32_t LMAX = 16, SMAX = 16;
struct Stack {
	uint32_t layers;
	struct Layer {
		const float *x;
		float *y;
		const uint8_t *ext[SMAX];
		float w[SMAX];
	} l[LMAX];
};
// p.sync word of the stack's grid barrier (dec::FETCH's word; zero between launches)
constexpr uint32_t BAR = 1 + STRATA_MOE_MAX_SLOTS;

// FULL: every phase's rows and batches divide evenly (no masks in the dot).
// ST: a stack of S->layers layers (FULL, small=1's copies), one after another
// in this launch.  Each layer as the single-layer kernel runs it, but:
//   - a (task, matrix)'s mbarrier completes one phase per layer (every layer
//     has the same tasks), parity l & 1;
//   - layer l's down copies are issued once its x is staged (the down
//     region's previous reads were the previous layer's), layer l + 1's
//     gate|up copies once layer l's h is staged: the weights stream during
//     the items, not during the staging, the counters and the grid barrier;
//   - the experts' counters of gate|up tasks done grow by a layer's tasks
//     each layer (reset by the last CTA out);
//   - x and h are read through L2 (__ldcg: written by other SMs in this
//     launch, at addresses this SM may have read before);
//   - between layers a grid barrier (p.sync[BAR]: every y complete before
//     the next layer stages it as x, every h read before it is rewritten);
//     all CTAs are resident (one per SM, grid <= SMs).
template <int FMT, class P, bool FULL, bool ST>
__device__ __forceinline__ void small_body(const MoeParams &p, const Args &a, const Stack *S)
{
	using Buf = typename P::template Buf<-1>;
	const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const uint32_t nl = ST ? S->layers : 1;
	// small_ts=1: this CTA's timestamps, by thread 0, of layer tl
	const Ts tsr(a.ts, a.ts_i, nl);
	uint32_t tl = 0;
	auto mark = [&](int ph) {
		if (tid == 0)
			tsr.mark(tl, ph);
	};
	if (tid == 0)
		tsr.start(0);
	const FmtTab &f = p.tab[FMT];
	const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(g_smem);
	const uint32_t tpc0 = a.g[0].tpc, rw0 = 32u >> a.g[0].lsh, rw1 = 32u >> a.g[1].lsh;
	const uint32_t nacc = 2 * tpc0 * rw0 + a.g[1].tpc * rw1;
	uint32_t t0[2], nt[2];
#pragma unroll
	for (int d = 0; d < 2; d++) {
		t0[d] = blockIdx.x * a.g[d].tpc;
		nt[d] = t0[d] < a.g[d].ntask ? min(a.g[d].tpc, a.g[d].ntask - t0[d]) : 0;
	}
	float *acc_s = reinterpret_cast<float *>(g_smem + a.acc);
	auto mbar = [&](uint32_t d, uint32_t k, uint32_t m) { return sbase + a.mbar + 8 * (d ? 2 * tpc0 + k : 2 * k + m); };
	for (uint32_t i = tid; i < nacc; i += blockDim.x)
		acc_s[i] = 0.0f;
	if (tid == 0) {
		for (uint32_t i = 0; i < 2 * tpc0 + a.g[1].tpc; i++)
			mbar_init(sbase + a.mbar + 8 * i, 1);
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
	}
	__syncthreads();
	// Layer l's expert of slot s.
	auto ext_of = [&](uint32_t l, uint32_t s) -> const uint8_t * {
		if constexpr (ST) {
			return S->l[l].ext[s];
		} else {
			(void)l;
			return p.slot[s].ext;
		}
	};
	// Phase d, task k (of this CTA's), matrix m of layer l: two copies (codes
	// and scales, each from the 16-byte boundary below the rows to the one
	// above them) into its region, rows rowc apart, on its mbarrier.
	auto copy = [&](uint32_t l, uint32_t d, uint32_t k, uint32_t m) {
		const gv::Args &g = a.g[d];
		const uint32_t rw = 32u >> g.lsh, nmat = d ? 1 : 2, nrows = d ? p.hidden : p.inter, rowc = (uint32_t)f.rowc[d];
		const uint32_t t = t0[d] + k, s = t / g.nrs, row0 = (t - s * g.nrs) * rw, nv = min(rw, nrows - row0);
		const uint8_t *mat = ext_of(l, s) + f.off[d ? 2 : m];
		const uintptr_t c = (uintptr_t)(mat + (uint64_t)row0 * rowc);
		const uintptr_t sc = (uintptr_t)(mat + f.soff[d] + (uint64_t)row0 * f.rows_[d]);
		const uintptr_t c0 = c & ~(uintptr_t)15, s0 = sc & ~(uintptr_t)15;
		const uint32_t cb = (uint32_t)(((c + nv * rowc + 15) & ~(uintptr_t)15) - c0);
		const uint32_t sb = (uint32_t)(((sc + nv * f.rows_[d] + 15) & ~(uintptr_t)15) - s0);
		const uint32_t dst = sbase + a.wo[d] + (k * nmat + m) * (a.cr[d] + a.sr[d]);
		mbar_expect_arrive(mbar(d, k, m), cb + sb);
		bulk_copy(dst, (const void *)c0, cb, mbar(d, k, m));
		bulk_copy(dst + a.cr[d], (const void *)s0, sb, mbar(d, k, m));
	};
	// The CTA's weights, gate|up tasks first, in the order the items use them:
	// by thread 0 (codes and scales of a task and matrix, two copies), or
	// with a row pitch (small=2) by warp 0 (a row's codes per lane, after
	// lane 0 armed the mbarrier with the bytes of all of them).
	if (warp == 0 && a.par && !a.pitch[0] && !a.pitch[1]) {
		// lane i: the (phase, task, matrix) pairs i, i + 32, ... in use order
		const uint32_t n0 = 2 * nt[0];
		for (uint32_t i = lane; i < n0 + nt[1]; i += 32) {
			const uint32_t d = i >= n0;
			copy(0, d, d ? i - n0 : i >> 1, d ? 0 : i & 1);
		}
	} else if (warp == 0)
		for (uint32_t d = 0; d < 2; d++) {
			const gv::Args &g = a.g[d];
			const uint32_t rw = 32u >> g.lsh, nmat = d ? 1 : 2, nrows = d ? p.hidden : p.inter, pt = a.pitch[d];
			const uint32_t rowc = (uint32_t)f.rowc[d];
			for (uint32_t k = 0; k < nt[d]; k++) {
				const uint32_t t = t0[d] + k, s = t / g.nrs, row0 = (t - s * g.nrs) * rw, nv = min(rw, nrows - row0);
				for (uint32_t m = 0; m < nmat; m++) {
					if (!pt) {
						if (lane == 0)
							copy(0, d, k, m);
						continue;
					}
					const uint8_t *mat = p.slot[s].ext + f.off[d ? 2 : m];
					const uintptr_t c = (uintptr_t)(mat + (uint64_t)row0 * rowc);
					const uintptr_t sc = (uintptr_t)(mat + f.soff[d] + (uint64_t)row0 * f.rows_[d]);
					const uintptr_t s0 = sc & ~(uintptr_t)15;
					const uint32_t sb = (uint32_t)(((sc + nv * f.rows_[d] + 15) & ~(uintptr_t)15) - s0);
					const uint32_t dst = sbase + a.wo[d] + (k * nmat + m) * (a.cr[d] + a.sr[d]);
					// row lane of the task: from the 16-byte boundary below it to the one above
					const uintptr_t cr = c + (uintptr_t)lane * rowc, cr0 = cr & ~(uintptr_t)15;
					const uint32_t cb = lane < nv ? (uint32_t)(((cr + rowc + 15) & ~(uintptr_t)15) - cr0) : 0;
					const uint32_t tot = __reduce_add_sync(0xffffffffu, cb);
					if (lane == 0) {
						mbar_expect_arrive(mbar(d, k, m), tot + sb);
						bulk_copy(dst + a.cr[d], (const void *)s0, sb, mbar(d, k, m));
					}
					__syncwarp();
					if (cb)
						bulk_copy(dst + lane * pt, (const void *)cr0, cb, mbar(d, k, m));
				}
			}
		}
	// ST: layer l's phase d copies (warp 0's lanes a (task, matrix) each),
	// once this CTA is done with the region (a barrier before; the fence
	// orders its reads before the copy engine's writes).
	auto refill = [&](uint32_t l, uint32_t d) {
		if (warp != 0)
			return;
		const uint32_t nmat = d ? 1 : 2;
		fence_proxy_async();
		for (uint32_t i = lane; i < nmat * nt[d]; i += 32)
			copy(l, d, i / nmat, i % nmat);
	};
	mark(STRATA_SMALL_TS_ISSUED);
	// Chained (strata_gpu_moe_stack): the weights are on their way; x, h, y
	// and the counters only after the earlier launches.
	if (p.chain) {
		l2_prefetch(p, 0, p.npf);
		pdl_trigger();
		pdl_wait();
	}
	mark(STRATA_SMALL_TS_PDL);
	gv::pre_stage<P>(0);
	uint32_t nr, par = 0;
	const float *inv = reinterpret_cast<const float *>(g_smem + gv::Smem::INV);
	// Phase d's items: (task k, matrix m, batch b), item i to warp i % W.
	auto phase = [&](uint32_t d) {
		const gv::Args &g = a.g[d];
		const uint32_t lsh = g.lsh, sub = lane & ((1u << lsh) - 1), rr = lane >> lsh, rw = 32u >> lsh;
		const uint32_t nmat = d ? 1 : 2, nbat = g.nbat, cpr = g.cpr, nrows = d ? p.hidden : p.inter;
		const uint32_t rowc = (uint32_t)f.rowc[d], rows_ = (uint32_t)f.rows_[d], pt = a.pitch[d];
		const uint32_t us = 16 * cpr, xstride = cpr * P::NG * 16, cstride = cpr * P::NG * 4;
		const uint32_t srow0 = d ? p.slot[t0[1] / g.nrs].a0 : 0;
		float *acc_d = acc_s + (d ? 2 * tpc0 * rw0 : 0);
		for (uint32_t it = warp; it < nt[d] * nmat * nbat; it += W) {
			const uint32_t k = it / (nmat * nbat), rem = it - k * nmat * nbat, m = rem / nbat, b = rem - m * nbat;
			const uint32_t t = t0[d] + k, s = t / g.nrs, row0 = (t - s * g.nrs) * rw, row = row0 + rr;
			const uint32_t rl = min(rr, min(rw, nrows - row0) - 1);
			const uint32_t base = a.wo[d] + (k * nmat + m) * (a.cr[d] + a.sr[d]);
			// the copies start at the 16-byte boundary below the task's first row
			const uint32_t co = pt ? base + rl * pt + (((row0 + rl) * rowc) & 15) : base + ((row0 * rowc) & 15) + rl * rowc;
			const uint32_t so = base + a.cr[d] + ((row0 * rows_) & 15) + rl * rows_;
			const uint32_t j0 = sub + b * (P::NB << lsh);
			const Slot &sl = p.slot[s];
			const uint32_t r = d ? sl.a0 - srow0 : p.tok[sl.a0];
			uint32_t xu[1][P::NG], cu[1];
#pragma unroll
			for (uint32_t u = 0; u < P::NG; u++)
				xu[0][u] = sbase + g.xoff + r * xstride + (gv::per_group<1, P::NG>() ? u * us : 0);
			cu[0] = sbase + g.coff + r * cstride;
			mbar_wait(mbar(d, k, m), par);
			if (!d && it == warp)
				mark(STRATA_SMALL_TS_MBAR0);
			Buf bf;
			SLd<P>::load(bf, co, so, j0, lsh, cpr);
			float acc[1] = { 0.0f };
			P::template dot<1, -1, FULL>(bf, j0, lsh, cpr, row < nrows, us, xu, cu, acc);
			for (uint32_t o = (1u << lsh) >> 1; o; o >>= 1)
				acc[0] += __shfl_xor_sync(0xffffffffu, acc[0], o);
			if (!sub && row < nrows)
				atomicAdd(acc_d + (k * nmat + m) * rw + rr, acc[0]);
		}
		mark(d ? STRATA_SMALL_TS_DN_W0 : STRATA_SMALL_TS_GU_W0);
	};
	for (uint32_t l = 0; l < nl; l++, par ^= 1) {
		const bool more = ST && l + 1 < nl;
		// Phase d: its rows staged (x: gate|up's), then (ST) copies into the
		// region the CTA is done with, then its items.  The copies go out
		// after the staging, so that they stream during the items, not
		// while the staging's reads, the counters and the grid barrier are
		// on the way (an SM's small reads queue behind its copies in flight:
		// issued after each phase's items, the down region's and the next
		// layer's gate|up copies made a Qwen hot layer 22.3 us against
		// 21.4 chained; experiments/kernels/README.md):
		//   - gate|up (d = 0): this layer's down copies (its down region was
		//     last read by the previous layer's down items);
		//   - down (d = 1): the next layer's gate|up copies.
		auto run = [&](uint32_t d, const float *x, int staged, int done) {
			gv::stage<P, ST>(p, a.g[d], nr, x);
			mark(staged);
			if (d ? more : ST && l > 0)
				refill(l + d, 1 - d);
			phase(d);
			__syncthreads();
			mark(done);
		};
		// A CTA without gate|up tasks issues its down copies at the layer's
		// start, one without down tasks its next gate|up copies after its
		// gate|up items.
		if (ST && l > 0 && !nt[0])
			refill(l, 1);
		// gate|up, then h and the experts' counters.
		if (nt[0]) {
			run(0, ST ? S->l[l].x : p.x, STRATA_SMALL_TS_XSTAGED, STRATA_SMALL_TS_GU);
			if (more && !nt[1])
				refill(l + 1, 0);
			const gv::Args &g = a.g[0];
			for (uint32_t i = tid; i < nt[0] * rw0; i += blockDim.x) {
				const uint32_t k = i / rw0, rr = i - k * rw0, t = t0[0] + k, s = t / g.nrs;
				const uint32_t row = (t - s * g.nrs) * rw0 + rr;
				if (row >= p.inter)
					continue;
				const Slot &sl = p.slot[s];
				const float sb = inv[p.tok[sl.a0]], gg = acc_s[2 * k * rw0 + rr] * sb, uu = acc_s[(2 * k + 1) * rw0 + rr] * sb;
				p.h[sl.h_off + row] = gg / (1.0f + expf(-gg)) * uu;
			}
			// (one fence suffices: thread 0's below is cumulative over the
			// CTA's stores ordered before it by the barrier)
			if (!a.par)
				fence_gpu();
			__syncthreads();
			if (tid == 0)
				count_items(p.sync + 1, t0[0], t0[0] + nt[0], g.nrs);
			mark(STRATA_SMALL_TS_CNT_PUB);
		}
		// down: after every gate|up task of the CTA's experts (ST: of this
		// layer, the counters' l + 1st share).
		if (nt[1]) {
			const gv::Args &g = a.g[1];
			const uint32_t s0 = t0[1] / g.nrs, s1 = (t0[1] + nt[1] - 1) / g.nrs, need = (l + 1) * a.g[0].nrs;
			for (uint32_t s = s0 + tid; s <= s1; s += blockDim.x)
				wait_at_least(p.sync + 1 + s, need, 32, "gate|up tasks of slot", s);
			__syncthreads();
			mark(STRATA_SMALL_TS_CNT_WAIT);
			run(1, nullptr, STRATA_SMALL_TS_DN_STAGED, STRATA_SMALL_TS_DN);
			const uint32_t srow0 = p.slot[s0].a0;
			const float *acc_d = acc_s + 2 * tpc0 * rw0;
			float *y = ST ? S->l[l].y : p.y;
			for (uint32_t i = tid; i < nt[1] * rw1; i += blockDim.x) {
				const uint32_t k = i / rw1, rr = i - k * rw1, t = t0[1] + k, s = t / g.nrs;
				const uint32_t row = (t - s * g.nrs) * rw1 + rr, ai = p.slot[s].a0;
				const float w = ST ? S->l[l].w[s] : p.w[ai];
				if (row < p.hidden)
					atomicAdd(y + (uint64_t)p.tok[ai] * p.hidden + row, w * acc_d[i] * inv[ai - srow0]);
			}
		}
		if (more) {
			// every CTA's y and its reads of h done; then the partial sums afresh
			__syncthreads();
			mark(STRATA_SMALL_TS_Y);
			if (tid == 0)
				grid_arrive(p.sync + BAR, (l + 1) * gridDim.x);
			__syncthreads();
			for (uint32_t i = tid; i < nacc; i += blockDim.x)
				acc_s[i] = 0.0f;
			if (tid == 0) // (after the grid barrier)
				tsr.end(l), tsr.start(l + 1);
			tl = l + 1;
		}
	}
	(void)nr;
	// The last CTA out resets the counters for the next launch.
	__syncthreads();
	mark(STRATA_SMALL_TS_Y);
	if (tid == 0) {
		fence_gpu();
		const unsigned prev = atomicAdd(p.sync, 1u);
		if (prev == gridDim.x - 1) {
			for (uint32_t s = 0; s < p.n_slots; s++)
				p.sync[1 + s] = 0;
			if (ST)
				p.sync[BAR] = 0;
			p.sync[0] = 0;
			fence_gpu();
		}
	}
	if (tid == 0)
		tsr.end(tl);
}

template <int FMT, class P, bool FULL>
__global__ void __launch_bounds__(32 * W, 1) small_kernel(const __grid_constant__ MoeParams p, const __grid_constant__ Args a)
{
	small_body<FMT, P, FULL, false>(p, a, nullptr);
}
template <int FMT, class P>
__global__ void __launch_bounds__(32 * W, 1)
small_stack_kernel(const __grid_constant__ MoeParams p, const __grid_constant__ Args a, const __grid_constant__ Stack s)
{
	small_body<FMT, P, true, true>(p, a, &s);
}

} // namespace sm

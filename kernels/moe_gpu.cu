// Fused dequant MoE layer on the GPU (moe.h contract; design in kernels.h).
//
// One persistent kernel per launch.  Work is a list of tasks: first every
// gate|up task (one expert slot, RG rows of gate and the same RG rows of up,
// one token tile), then every down task (RD rows of down, one token tile).
// CTA b runs tasks b, b+G, b+2G, ... in order; each task is cut into K chunks
// ("stages") whose packed rows are copied into shared memory by a 3-deep
// pipeline (bulk copy engine, one mbarrier per buffer) that runs across task
// boundaries.  Why this order is
// deadlock-free: a down task spins until its slot's gate|up tasks are done,
// and every CTA finishes all of its gate|up tasks before its first down task;
// all CTAs are resident (grid <= SMs, one CTA per SM).
//
// Inside a stage, warp w takes 32-weight units u = w, w+8, ... of the chunk;
// lane (g = lane/4, t = lane%4) decodes weights 8t..8t+7 of the unit for rows
// g and g+8 of every 16-row tile and feeds them to mma.sync m16n8k16 in the
// order that makes its A fragment hold consecutive weights (the k order inside
// one mma is free as long as A and B agree).  Partial sums of the warps meet
// in shared memory at the end of a task (per-warp slots summed in a fixed
// order; atomics when the slots would not fit a stage).  bf16 experts take
// no stage copies: a bf16 task is one "stage" of whole rows whose A fragments
// every lane loads straight from global memory (compute_direct).
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <type_traits>
#include <utility>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "kernels.h"
#include "moe.h"
#include "quant.h"
}
#include "kfmt.cuh"

#include "cuda_check.cuh"

namespace {

// 3 stages of 60 KB (2 in flight, 120 KB per SM).  The tier formats are bound
// by instruction issue (the computed codebook), not by bytes in flight, so the
// stages are made long (e.g. 9 hot blocks x 64 rows) to spread the per-stage
// cost (barrier, copy issue, task bookkeeping) over more weights; bf16 does
// not use them (compute_direct).  The codebook needs no shared memory.
#ifndef STRATA_NSTAGE
#define STRATA_NSTAGE 3
#endif
constexpr int NSTAGE = STRATA_NSTAGE;
constexpr uint32_t STAGE_BYTES = 60 * 1024;

struct FmtTab {
	uint64_t off[3];       // gate, up, down matrix offsets in the extent
	uint64_t soff[2];      // scales region offset inside a gate/up matrix, inside down
	uint64_t rowc[2];      // code bytes of one row (gate/up, down)
	uint64_t rows_[2];     // scale bytes of one row
	uint32_t pc[2];        // padded cols (gate/up: hidden, down: inter)
	uint32_t kc[2];        // weights per K chunk
	uint32_t pitch[2];     // shared-memory bytes per stage row
	uint32_t cpitch[2];    // of which codes
	uint32_t cb, sb;       // code / scale bytes per 256 weights
	uint32_t direct;       // weights loaded straight into registers (no stage copies)
	uint32_t ok;
};

struct Slot {
	const uint8_t *ext;
	uint32_t a0, ntok;     // assignments [a0, a0 + ntok) of this launch
	uint32_t h_off;        // float offset of this slot's h rows (ntok x inter)
	uint32_t task0, dtask0;
	uint32_t fmt;
};

// L2 prefetch of a chained launch (MoeParams::pfp): at most PF_MAX ranges
// of at most PF_BYTES_MAX bytes in all (more would not stay in the 50-60 MB
// L2 until used), in pieces of PF_CHUNK bytes.
constexpr uint32_t PF_MAX = 64, PF_CHUNK = 8192;
constexpr uint64_t PF_BYTES_MAX = 24ull << 20;

struct MoeParams {
	const float *x;
	float *y, *h;
	unsigned *sync;        // [0] CTAs done, [1 + s] gate|up tasks done of slot s
	uint32_t hidden, inter, n_slots, n_gu_tasks, n_tasks, vec, tiers;
	// Split-K of the warp-streaming decode kernel (moe_decode.cuh; 1 and 1 in
	// the persistent kernel): a gate|up row is cut into sgu parts of kbg blocks,
	// a down row into sdn parts of kbd blocks.  Partial gate|up sums meet in gus
	// (2 x inter floats per assignment, at 2 x h_off; zero between launches),
	// counted per unsplit gate|up task in gucnt (zero between launches).
	uint32_t sgu, sdn, kbg, kbd;
	float *gus;
	unsigned *gucnt;
	// Stacks of layers (strata_gpu_moe_stack): chain = the launch is a
	// programmatic dependent launch, whose kernels wait (griddepcontrol.wait)
	// before reading activations or touching scratch and sync counters; npf
	// byte ranges pfp[i], pfb[i] (weights of the launch after this one) are
	// prefetched into L2 at its start.
	uint32_t chain, npf;
	const uint8_t *pfp[PF_MAX];
	uint32_t pfb[PF_MAX];
	FmtTab tab[STRATA_FMT_COUNT];
	Slot slot[STRATA_MOE_MAX_SLOTS];
	uint32_t tok[STRATA_MOE_MAX_ASSIGN];
	float w[STRATA_MOE_MAX_ASSIGN];
};

[[maybe_unused]] __device__ __forceinline__ void cp_async16(uint32_t smem, const void *gmem)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Stage copies: BULK uses the Hopper bulk copy engine (cp.async.bulk,
// one instruction per row and region, completion counted in bytes on one
// mbarrier per stage buffer); 0 uses 16-byte cp.async from every lane.
[[maybe_unused]] __device__ __forceinline__ void bulk_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t mbar)
{
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
		     ::"r"(dst), "l"(src), "r"(bytes), "r"(mbar) : "memory");
}
__device__ __forceinline__ void mbar_init(uint32_t mbar, uint32_t count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mbar), "r"(count) : "memory");
}
[[maybe_unused]] __device__ __forceinline__ void mbar_expect_arrive(uint32_t mbar, uint32_t bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(mbar), "r"(bytes) : "memory");
}
// Whether the phase of parity `parity` of mbarrier mbar has completed (one
// try_wait, which may suspend the thread a while); mbar_wait until it has.
__device__ __forceinline__ bool mbar_try(uint32_t mbar, uint32_t parity)
{
	uint32_t ok;
	asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
		     "selp.u32 %0, 1, 0, p;\n\t}\n"
		     : "=r"(ok) : "r"(mbar), "r"(parity) : "memory");
	return ok;
}
[[maybe_unused]] __device__ __forceinline__ void mbar_wait(uint32_t mbar, uint32_t parity)
{
	while (!mbar_try(mbar, parity))
		;
}
// Programmatic dependent launch: let the next launch of the stream start
// (its CTAs run their prologue where SMs free up), and wait until every
// earlier launch has completed and its writes are visible (returns at once
// when the launch is not a programmatic dependent one).
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
// Prefetch ranges [i0, i1) of p.pfp into L2: PF_CHUNK-byte pieces dealt to
// the grid's threads, CTAs varying fastest (a few bulk prefetches per thread).
__device__ __forceinline__ void l2_prefetch(const MoeParams &p, uint32_t i0, uint32_t i1)
{
	const uint32_t nth = gridDim.x * blockDim.x, me = threadIdx.x * gridDim.x + blockIdx.x;
	uint32_t base = 0;
	for (uint32_t i = i0; i < i1; i++) {
		const uint32_t bytes = p.pfb[i], n = (bytes + PF_CHUNK - 1) / PF_CHUNK;
		for (uint32_t c = (me + nth - base % nth) % nth; c < n; c += nth) {
			const uint32_t sz = min(PF_CHUNK, bytes - c * PF_CHUNK) & ~15u;
			if (sz)
				asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n"
					     ::"l"(p.pfp[i] + (uint64_t)c * PF_CHUNK), "r"(sz) : "memory");
		}
		base += n;
	}
}
[[maybe_unused]] __device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// m16n8k16 MMA, f32 accumulation, bf16 operands or (F16) fp16 operands.
template <bool F16>
__device__ __forceinline__ void mma_bf16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
					 uint32_t b0, uint32_t b1)
{
	if constexpr (F16)
		asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
			     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
			     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
			     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
	else
		asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
			     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
			     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
			     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t ld_acquire(const unsigned *p)
{
	uint32_t v;
	asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
	return v;
}
// The hand-overs between CTAs (counters, grid barriers, the last CTA out)
// are message passing: a release (fence_gpu, then a relaxed atomic; or
// red_release) on the writer's side, an acquire (ld_acquire, or a strong read
// then fence_gpu) on the reader's.  That needs acquire-release fences, not
// __threadfence's sequentially consistent one (fence.sc.gpu: MEMBAR.SC.GPU in
// the SASS, against MEMBAR.ALL.GPU for fence.acq_rel.gpu), which no
// hand-over here needs.  Both are cumulative: writes ordered before the
// fence by a CTA barrier are released with it.
__device__ __forceinline__ void fence_gpu()
{
	asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
}
// A release add whose result is not needed (MEMBAR.ALL.GPU, then a RED).
__device__ __forceinline__ void red_release(unsigned *p, uint32_t v)
{
	asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_relaxed(const unsigned *q)
{
	uint32_t v;
	asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(q) : "memory");
	return v;
}
__device__ __forceinline__ unsigned long long gtimer()
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

// Every wait of a thread for other CTAs (a counter, a grid barrier, a stack
// kernel's pieces) gives up after WATCH_NS without progress: it prints where
// it was and traps (a launch error instead of a hang, should the
// synchronisation be wrong somewhere).  t0: the wait's start (0: not yet
// read); what, i, n: what it waits for.
constexpr uint64_t WATCH_NS = 20000000000ull; // (compute-sanitizer slows every CTA down alike)
__device__ __noinline__ void stuck(const char *what, uint32_t i, uint32_t n)
{
	printf("strata kernel: CTA %u thread %u: no progress for %.0f s waiting for %s %u (%u)\n", blockIdx.x,
	       threadIdx.x, WATCH_NS * 1e-9, what, i, n);
	__trap();
}
__device__ __forceinline__ void watch(uint64_t &t0, const char *what, uint32_t i, uint32_t n)
{
	const uint64_t t = gtimer();
	if (!t0)
		t0 = t;
	else if (t - t0 > WATCH_NS)
		stuck(what, i, n);
}
// One thread's wait for counter *c to reach target: acquire polls (ACQ; else
// relaxed ones, the caller ordering what it reads after), ns nanoseconds
// apart, watched (what and i name what it waits for).
template <bool ACQ = true>
__device__ __forceinline__ void wait_at_least(const unsigned *c, uint32_t target, uint32_t ns, const char *what,
					      uint32_t i)
{
	uint64_t t0 = 0;
	for (uint32_t v; (v = ACQ ? ld_acquire(c) : ld_relaxed(c)) < target;) {
		__nanosleep(ns);
		watch(t0, what, i, v);
	}
}

template <int NT, int MT, int NW = 8> struct Geo {
	static constexpr int TN = 8 * NT;  // tokens per tile
	static constexpr int RG = 8 * MT;  // rows of gate (and of up) per gate|up task
	static constexpr int RD = 16 * MT; // rows of down per down task
	static constexpr int ROWS = 16 * MT;
};

struct Task {
	uint32_t t, kc;        // task index, chunk index
	uint32_t slot, down, rt, tt, nkc, fmt;
	uint32_t part, kc0;    // split-K part (decode kernel) and its first chunk
};

// Task t of a launch (every slot's gate|up tasks, then every slot's down
// tasks; rg / rd rows per gate|up / down task, each cut into sg / sd split-K
// parts, the part index innermost): its slot, format, row tile rt, token tile
// tt and part; both decode kernels number their tasks this way.
__device__ __forceinline__ void task_find(const MoeParams &p, uint32_t t, uint32_t rg, uint32_t rd, Task &k,
					  uint32_t sg = 1, uint32_t sd = 1)
{
	k.down = t >= p.n_gu_tasks;
	int lo = 0, hi = (int)p.n_slots - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) >> 1;
		uint32_t base = k.down ? p.slot[mid].dtask0 : p.slot[mid].task0;
		if (base <= t)
			lo = mid;
		else
			hi = mid - 1;
	}
	const Slot &s = p.slot[lo];
	k.slot = lo;
	k.fmt = s.fmt;
	uint32_t local = t - (k.down ? s.dtask0 : s.task0);
	const uint32_t sp = k.down ? sd : sg;
	uint32_t nrt = k.down ? (p.hidden + rd - 1) / rd : (p.inter + rg - 1) / rg;
	k.part = local % sp;
	local /= sp;
	k.tt = local / nrt;
	k.rt = local % nrt;
}

template <int NT, int MT, int NW> __device__ __forceinline__ void task_info(const MoeParams &p, Task &k)
{
	using G = Geo<NT, MT, NW>;
	task_find(p, k.t, G::RG, G::RD, k);
	const FmtTab &f = p.tab[k.fmt];
	k.nkc = (f.pc[k.down] + f.kc[k.down] - 1) / f.kc[k.down];
}

template <int NT, int MT, int NW, bool BULK>
__device__ void issue_stage(const MoeParams &p, const Task &k, uint32_t buf, uint8_t *roff, uint32_t mbar)
{
	// Stage rows: gate|up task: RG rows of gate then the same RG rows of up;
	// down task: RD rows of down.  Invariants hoisted out of the row loop.
	using G = Geo<NT, MT, NW>;
	const FmtTab &f = p.tab[k.fmt];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const uint32_t d = k.down, kcw = f.kc[d], k0 = k.kc * kcw, k1 = min(k0 + kcw, f.pc[d]);
	const uint64_t rowc = f.rowc[d], rows_ = f.rows_[d];
	const uint32_t cn = (uint32_t)((uint64_t)(k1 - k0) * f.cb / 256);
	const uint32_t sn = f.sb ? (k1 - k0 + 255) / 256 * f.sb : 0;
	const uint32_t pitch = f.pitch[d], cpitch = f.cpitch[d];
	const uint8_t *ext = p.slot[k.slot].ext;
	const uint64_t koc = (uint64_t)k0 * f.cb / 256, kos = (uint64_t)(k0 / 256) * f.sb + f.soff[d];
	const uint8_t *m0 = ext + f.off[d ? 2 : 0], *m1 = ext + f.off[d ? 2 : 1];
	const uint32_t nrows = d ? p.hidden : p.inter, per = d ? G::RD : G::RG, row0 = k.rt * per;
	if constexpr (BULK) {
	// Lane q of warp w copies stage row w + 8q (codes, then scales) with the bulk
	// copy engine; lane 0 first announces the warp's bytes on the stage's mbarrier.
	static_assert(G::ROWS / NW <= 32 && G::ROWS % NW == 0, "rows per warp");
	const int i = warp + NW * lane;
	uint32_t bytes = 0, nc = 0, ns = 0;
	const uint8_t *c0 = nullptr, *s0 = nullptr;
	if (lane < G::ROWS / NW && !f.direct) {
		uint32_t r = row0 + (d ? i : i % G::RG);
		if (r < nrows) {
			const uint8_t *mat = !d && i >= G::RG ? m1 : m0;
			const uint8_t *c = mat + r * rowc + koc, *s = mat + r * rows_ + kos;
			roff[2 * i] = (uint8_t)((uintptr_t)c & 15);
			roff[2 * i + 1] = (uint8_t)((uintptr_t)s & 15);
			c0 = (const uint8_t *)((uintptr_t)c & ~(uintptr_t)15);
			nc = (uint32_t)(((uintptr_t)c + cn + 15 - (uintptr_t)c0) >> 4);
			if (sn) {
				s0 = (const uint8_t *)((uintptr_t)s & ~(uintptr_t)15);
				ns = (uint32_t)(((uintptr_t)s + sn + 15 - (uintptr_t)s0) >> 4);
			}
			bytes = 16 * (nc + ns);
		} else {
			roff[2 * i] = roff[2 * i + 1] = 0;
		}
	}
	uint32_t total = __reduce_add_sync(0xffffffffu, bytes);
	if (lane == 0)
		mbar_expect_arrive(mbar, total);
	__syncwarp();
	if (nc)
		bulk_copy(buf + i * pitch, c0, 16 * nc, mbar);
	if (ns)
		bulk_copy(buf + i * pitch + cpitch, s0, 16 * ns, mbar);
	} else {
	(void)mbar;
	for (int i = warp; i < G::ROWS; i += NW) {
		uint32_t r = row0 + (d ? i : i % G::RG);
		if (r >= nrows || f.direct) {
			if (lane == 0)
				roff[2 * i] = roff[2 * i + 1] = 0;
			continue;
		}
		const uint8_t *mat = !d && i >= G::RG ? m1 : m0;
		const uint8_t *c = mat + r * rowc + koc, *s = mat + r * rows_ + kos;
		if (lane == 0) {
			roff[2 * i] = (uint8_t)((uintptr_t)c & 15);
			roff[2 * i + 1] = (uint8_t)((uintptr_t)s & 15);
		}
		uint32_t row = buf + i * pitch;
		const uint8_t *c0 = (const uint8_t *)((uintptr_t)c & ~(uintptr_t)15);
		uint32_t nc = (uint32_t)(((uintptr_t)c + cn + 15 - (uintptr_t)c0) >> 4);
		for (uint32_t j = lane; j < nc; j += 32)
			cp_async16(row + 16 * j, c0 + 16 * j);
		if (sn) {
			const uint8_t *s0 = (const uint8_t *)((uintptr_t)s & ~(uintptr_t)15);
			uint32_t ns = (uint32_t)(((uintptr_t)s + sn + 15 - (uintptr_t)s0) >> 4);
			for (uint32_t j = lane; j < ns; j += 32)
				cp_async16(row + cpitch + 16 * j, s0 + 16 * j);
		}
	}
	}
}

// Eight consecutive activations (k..k+7) of one row; zeros past cols.  x rows
// go through the read-only path; h rows are written earlier in this launch by
// other CTAs, so they are read with ld.ca: safe because a slot's h lines are
// first touched on this SM after its gate|up tasks completed (slots start on
// 128-byte boundaries), and L1 is invalidated between launches.
template <bool H> __device__ __forceinline__ float4 ld4(const float *p)
{
	return H ? __ldca(reinterpret_cast<const float4 *>(p)) : __ldg(reinterpret_cast<const float4 *>(p));
}
template <bool H> __device__ __forceinline__ float ld1(const float *p) { return H ? __ldca(p) : __ldg(p); }

template <bool H>
__device__ __forceinline__ void load_x8(const float *row, uint32_t k, uint32_t cols, bool vec, float v[8])
{
	if (vec && k + 8 <= cols) {
		float4 a = ld4<H>(row + k), c = ld4<H>(row + k + 4);
		v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = c.x, v[5] = c.y, v[6] = c.z, v[7] = c.w;
	} else {
#pragma unroll
		for (int i = 0; i < 8; i++)
			v[i] = k + i < cols ? ld1<H>(row + k + i) : 0.0f;
	}
}

// Activation rows of this lane's tokens (g, g+8, ...) of task k's token tile:
// x rows for gate|up, h rows for down; have[n] is false past the slot's tokens.
template <int NT, int TN>
__device__ __forceinline__ void act_rows(const MoeParams &p, const Task &k, const Slot &s, int g, const float *(&xr)[NT],
					 bool (&have)[NT])
{
#pragma unroll
	for (int n = 0; n < NT; n++) {
		uint32_t tl = k.tt * TN + n * 8 + g;
		have[n] = tl < s.ntok;
		if (!have[n])
			tl = 0;
		xr[n] = k.down ? p.h + s.h_off + (uint64_t)tl * p.inter : p.x + (uint64_t)p.tok[s.a0 + tl] * p.hidden;
	}
}

// Eight activations at column kk of every row act_rows found (zeros past the tile).
template <int NT>
__device__ __forceinline__ void act_load(const MoeParams &p, bool d, const float *const (&xr)[NT],
					 const bool (&have)[NT], uint32_t kk, uint32_t cols, float (&x)[NT][8])
{
#pragma unroll
	for (int n = 0; n < NT; n++) {
		if (have[n]) {
			if (d)
				load_x8<true>(xr[n], kk, cols, p.vec, x[n]);
			else
				load_x8<false>(xr[n], kk, cols, p.vec, x[n]);
		} else {
#pragma unroll
			for (int i = 0; i < 8; i++)
				x[n][i] = 0.0f;
		}
	}
}

// Where a decode path starts on chunk k.kc of task k: this lane's warp, its
// group g (rows g, g+8 of each 16-row tile; token column g of the tile) and
// thread t in the group, the chunk's first column k0 and 32-weight units, the
// row length cols of the activations, and the activation rows of this lane's
// tokens (act_rows).
template <int NT> struct Chunk {
	int warp, g, t;
	uint32_t d, k0, cols, nunits;
	const float *xr[NT];
	bool have[NT];
};
template <int NT, int TN> __device__ __forceinline__ Chunk<NT> chunk_of(const MoeParams &p, const Task &k)
{
	Chunk<NT> c;
	const FmtTab &f = p.tab[k.fmt];
	c.warp = threadIdx.x >> 5, c.g = (threadIdx.x & 31) >> 2, c.t = threadIdx.x & 3;
	c.d = k.down, c.k0 = k.kc * f.kc[c.d];
	c.cols = c.d ? p.inter : p.hidden;
	c.nunits = (min(c.k0 + f.kc[c.d], f.pc[c.d]) - c.k0) / 32;
	act_rows<NT, TN>(p, k, p.slot[k.slot], c.g, c.xr, c.have);
	return c;
}

// Overflow guard of the fp16 activations (tier experts): the power of two
// e >= 0 that brings this lane's token's largest magnitude among a unit's 32
// columns (8 per lane, the 4 lanes of a token together) below 2^14, and the
// factors 2^e of the two output columns (tokens 2t, 2t+1 of the MMA tile,
// whose activations lanes 8t and 8t+4 hold) this lane's sums are scaled by.
__device__ __forceinline__ int unit_exp(const float (&x)[8])
{
	float mx = 0.0f;
#pragma unroll
	for (int i = 0; i < 8; i++)
		mx = fmaxf(mx, fabsf(x[i]));
	mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
	mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
	return mx >= 16384.0f && mx <= 3.0e38f ? ilogbf(mx) - 13 : 0;
}
// 8 activations of one token, times mul, as the fp16 MMA B fragment.
__device__ __forceinline__ void pack_b(const float (&x)[8], uint32_t (&b)[4], float mul = 1.0f)
{
#pragma unroll
	for (int i = 0; i < 4; i++)
		b[i] = pack_f16x2(x[2 * i] * mul, x[2 * i + 1] * mul);
}
__device__ __forceinline__ void col_mul(int e, int t, float (&m)[2])
{
	m[0] = ldexpf(1.0f, __shfl_sync(0xffffffffu, e, 8 * t));
	m[1] = ldexpf(1.0f, __shfl_sync(0xffffffffu, e, 8 * t + 4));
}

template <class F, int NT, int MT, int NW>
__device__ __forceinline__ void compute_stage(const MoeParams &p, const Task &k, uint32_t sbuf,
					      const uint8_t *roff, uint32_t t4, float (&acc)[MT][NT][4])
{
	using G = Geo<NT, MT, NW>;
	const FmtTab &f = p.tab[k.fmt];
	const Chunk<NT> c = chunk_of<NT, G::TN>(p, k);
	const int warp = c.warp, g = c.g, t = c.t;
	const uint32_t d = c.d, k0 = c.k0, cols = c.cols, nunits = c.nunits;
	const uint32_t pitch = f.pitch[d];

	// Shared addresses of this lane's rows (g and g+8 of every tile); the issuing
	// warp recorded each row's misalignment in roff.
	uint32_t rc[MT][2], rs[MT][2];
#pragma unroll
	for (int m = 0; m < MT; m++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int i = m * 16 + g + 8 * h;
			rc[m][h] = sbuf + i * pitch + roff[2 * i];
			rs[m][h] = sbuf + i * pitch + f.cpitch[d] + roff[2 * i + 1];
		}
	const float *const(&xr)[NT] = c.xr;
	const bool(&have)[NT] = c.have;
	// Activations of unit u+NW are loaded while unit u is decoded and multiplied.
	constexpr bool PF = NT <= 4;
	float cur[NT][8];
	auto load = [&](uint32_t uu) { act_load<NT>(p, d, xr, have, k0 + uu * 32 + 8 * t, cols, cur); };
	if (PF && warp < nunits)
		load(warp);
	for (uint32_t u = warp; u < nunits; u += NW) {
		uint32_t b[NT][4];
		if (!PF)
			load(u);
		// Tier experts multiply fp16 activations: a unit with |x| > 65504 (rare)
		// is packed with every token scaled by 2^-e and its sums scaled back.
		bool big = false;
		if (F::F16) {
			float mx = 0.0f;
#pragma unroll
			for (int n = 0; n < NT; n++)
#pragma unroll
				for (int i = 0; i < 8; i++)
					mx = fmaxf(mx, fabsf(cur[n][i]));
			big = __any_sync(0xffffffffu, mx > 65504.0f);
		}
		float colmul[NT][2];
		if (big) {
#pragma unroll
			for (int n = 0; n < NT; n++) {
				int e = unit_exp(cur[n]);
				pack_b(cur[n], b[n], ldexpf(1.0f, -e));
				col_mul(e, t, colmul[n]);
			}
		} else {
#pragma unroll
			for (int n = 0; n < NT; n++)
#pragma unroll
				for (int i = 0; i < 4; i++)
					b[n][i] = F::F16 ? pack_f16x2(cur[n][2 * i], cur[n][2 * i + 1])
							 : pack_bf16x2(cur[n][2 * i], cur[n][2 * i + 1]);
		}
		if (PF && u + NW < nunits)
			load(u + NW);
		const uint32_t bl = u >> 3, j = (u & 7) * 4 + t;
		const uint32_t cbo = bl * F::CODE_BYTES, sbo = bl * F::SCALE_BYTES;
		auto unit = [&](auto scaled) {
			[[maybe_unused]] constexpr bool SC = decltype(scaled)::value;
#pragma unroll
			for (int m = 0; m < MT; m++) {
				uint32_t a[2][4];
				F::decode8(rc[m][0] + cbo, rs[m][0] + sbo, j, t4, a[0]);
				F::decode8(rc[m][1] + cbo, rs[m][1] + sbo, j, t4, a[1]);
				if constexpr (F::SCALED) {
					// One block per unit: the block scales of rows g and g+8 apply
					// to this unit's partial sums.
					float s0 = F::scale(rs[m][0] + sbo);
					float s1 = F::scale(rs[m][1] + sbo);
#pragma unroll
					for (int n = 0; n < NT; n++) {
						float c[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
						mma_bf16<F::F16>(c, a[0][0], a[1][0], a[0][1], a[1][1], b[n][0], b[n][1]);
						mma_bf16<F::F16>(c, a[0][2], a[1][2], a[0][3], a[1][3], b[n][2], b[n][3]);
						float m0 = SC ? colmul[n][0] : 1.0f, m1 = SC ? colmul[n][1] : 1.0f;
						acc[m][n][0] = fmaf(SC ? s0 * m0 : s0, c[0], acc[m][n][0]);
						acc[m][n][1] = fmaf(SC ? s0 * m1 : s0, c[1], acc[m][n][1]);
						acc[m][n][2] = fmaf(SC ? s1 * m0 : s1, c[2], acc[m][n][2]);
						acc[m][n][3] = fmaf(SC ? s1 * m1 : s1, c[3], acc[m][n][3]);
					}
				} else {
#pragma unroll
					for (int n = 0; n < NT; n++) {
						mma_bf16<F::F16>(acc[m][n], a[0][0], a[1][0], a[0][1], a[1][1], b[n][0], b[n][1]);
						mma_bf16<F::F16>(acc[m][n], a[0][2], a[1][2], a[0][3], a[1][3], b[n][2], b[n][3]);
					}
				}
			}
		};
		if (F::SCALED && big)
			unit(std::true_type{});
		else
			unit(std::false_type{});
	}
}

// Passthrough formats with DIRECT (bf16): no stage copies; a task is one
// stage spanning the whole row, and every lane loads its A fragments (16 bytes
// of rows g and g+8 of each 16-row tile per 32-weight unit) straight from
// global memory into registers, one unit ahead of the MMAs.  No per-stage
// copies, barriers or shared-memory round trips: the loop is LDG + HMMA.
#ifndef STRATA_DIRECT_SETS
#define STRATA_DIRECT_SETS 1
#endif
template <class F, int NT, int MT, int NW>
__device__ __forceinline__ void compute_direct(const MoeParams &p, const Task &k, float (&acc)[MT][NT][4])
{
	using G = Geo<NT, MT, NW>;
	const FmtTab &f = p.tab[k.fmt];
	const Slot &s = p.slot[k.slot];
	const Chunk<NT> c = chunk_of<NT, G::TN>(p, k);
	const int warp = c.warp, g = c.g, t = c.t;
	const uint32_t d = c.d, k0 = c.k0, cols = c.cols, nunits = c.nunits;
	const uint32_t nrows = d ? p.hidden : p.inter, per = d ? G::RD : G::RG, row0 = k.rt * per;
	const uint8_t *m0 = s.ext + f.off[d ? 2 : 0], *m1 = s.ext + f.off[d ? 2 : 1];
	// This lane's rows: stage row i = 16m + g + 8h is gate/down row row0 + i, or
	// for i >= RG of a gate|up task up row row0 + i - RG.  Base pointers at row
	// row0 + g, this lane's 8-weight column of unit 0; rows past the matrix are
	// not read (zero weights; the epilogue drops their sums anyway).
	const uint32_t rowc = (uint32_t)f.rowc[d];
	const uint64_t col = (uint64_t)k0 * f.cb / 256 + 16 * t;
	const uint8_t *bg = m0 + (uint64_t)(row0 + g) * rowc + col;
	const uint8_t *bu = d ? bg : m1 + (uint64_t)(row0 + g) * rowc + col;
	uint32_t valid = 0;
#pragma unroll
	for (int m = 0; m < MT; m++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int i = m * 16 + g + 8 * h;
			valid |= (uint32_t)(row0 + (d ? i : i % G::RG) < nrows) << (2 * m + h);
		}
	auto rowp = [&](int m, int h) -> const uint4 * {
		int i = m * 16 + 8 * h; // stage row minus g
		const uint8_t *b = !d && i >= G::RG ? bu : bg;
		return reinterpret_cast<const uint4 *>(b + (uint32_t)(d ? i : i % G::RG) * rowc);
	};
	const float *const(&xr)[NT] = c.xr;
	const bool(&have)[NT] = c.have;
	static_assert(F::CODE_BYTES == 512 && !F::SCALED, "direct path: bf16 (16 bytes per 8 weights)");
	uint4 wa[MT][2], wb[MT][2];
	float xa[NT][8], xb[NT][8];
	auto ldw = [&](uint4 (&w)[MT][2], float (&x)[NT][8], uint32_t uu) {
#pragma unroll
		for (int m = 0; m < MT; m++)
#pragma unroll
			for (int h = 0; h < 2; h++)
				w[m][h] = valid >> (2 * m + h) & 1 ? __ldg(rowp(m, h) + 4 * uu) : make_uint4(0, 0, 0, 0);
		act_load<NT>(p, d, xr, have, k0 + uu * 32 + 8 * t, cols, x);
	};
	auto mma_unit = [&](const uint4 (&w)[MT][2], const float (&x)[NT][8]) {
		uint32_t b[NT][4];
#pragma unroll
		for (int n = 0; n < NT; n++)
#pragma unroll
			for (int i = 0; i < 4; i++)
				b[n][i] = pack_bf16x2(x[n][2 * i], x[n][2 * i + 1]);
#pragma unroll
		for (int m = 0; m < MT; m++)
#pragma unroll
			for (int n = 0; n < NT; n++) {
				mma_bf16<false>(acc[m][n], w[m][0].x, w[m][1].x, w[m][0].y, w[m][1].y, b[n][0], b[n][1]);
				mma_bf16<false>(acc[m][n], w[m][0].z, w[m][1].z, w[m][0].w, w[m][1].w, b[n][2], b[n][3]);
			}
	};
#if STRATA_DIRECT_SETS == 2
	uint32_t u = warp;
	if (u < nunits)
		ldw(wa, xa, u);
	for (; u < nunits; u += 2 * NW) {
		if (u + NW < nunits)
			ldw(wb, xb, u + NW);
		mma_unit(wa, xa);
		if (u + NW >= nunits)
			break;
		if (u + 2 * NW < nunits)
			ldw(wa, xa, u + 2 * NW);
		mma_unit(wb, xb);
	}
#else
	(void)wb, (void)xb;
	// One unit per warp in registers (16 warps: 64 KB per SM in flight).
	// (Prefetching the rows 3 units ahead into L2 measured 3% slower.)
	for (uint32_t u = warp; u < nunits; u += NW) {
		ldw(wa, xa, u);
		mma_unit(wa, xa);
	}
#endif
}

template <class F, int NT, int MT, int NW>
__device__ __forceinline__ void compute_any(const MoeParams &p, const Task &k, uint32_t sbuf, const uint8_t *roff,
					    uint32_t t4, float (&acc)[MT][NT][4])
{
	if constexpr (F::DIRECT) {
		if (p.tab[k.fmt].direct) {
			compute_direct<F, NT, MT, NW>(p, k, acc);
			return;
		}
	}
	compute_stage<F, NT, MT, NW>(p, k, sbuf, roff, t4, acc);
}

template <int NT, int MT, int NW, bool BULK>
__global__ void __launch_bounds__(32 * NW, 1) moe_kernel(const __grid_constant__ MoeParams p)
{
	using G = Geo<NT, MT, NW>;
	// Dynamic shared memory: [NSTAGE stage buffers | red | roff | mbarriers].
	// Stage buffers are addressed by offsets from g_smem.
	uint8_t *smem = g_smem;
	float *red = reinterpret_cast<float *>(smem + NSTAGE * STAGE_BYTES);
	const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(smem); // for the copies
	const uint32_t obase = 0;                                         // for lds*
	const int tid = threadIdx.x;
	for (int i = tid; i < G::ROWS * G::TN; i += (32 * NW))
		red[i] = 0.0f;
	const uint32_t t4 = 4 * (tid & 3);
	// Per stage buffer and row: misalignment (mod 16) of the row's codes and scales.
	uint8_t *roffs = reinterpret_cast<uint8_t *>(red + G::ROWS * G::TN);
	// One mbarrier per stage buffer (bulk copies), after roffs.
	const uint32_t mbar0 = (uint32_t)__cvta_generic_to_shared(roffs + NSTAGE * 2 * G::ROWS);
	if (BULK && tid == 0) {
		for (int b = 0; b < NSTAGE; b++)
			mbar_init(mbar0 + 8 * b, NW);
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
	}
	__syncthreads();

	Task ld, cp;
	ld.t = blockIdx.x, ld.kc = 0;
	if (ld.t < p.n_tasks)
		task_info<NT, MT, NW>(p, ld);
	cp = ld;
	// Prologue: NSTAGE-1 stages in flight.
	for (int s = 0; s < NSTAGE - 1; s++) {
		if (ld.t < p.n_tasks) {
			issue_stage<NT, MT, NW, BULK>(p, ld, sbase + s * STAGE_BYTES, roffs + s * 2 * G::ROWS, mbar0 + 8 * s);
			if (++ld.kc == ld.nkc) {
				ld.t += gridDim.x, ld.kc = 0;
				if (ld.t < p.n_tasks)
					task_info<NT, MT, NW>(p, ld);
			}
		}
		cp_commit();
	}
	// Chained (strata_gpu_moe_stack): the first stages are in flight; the
	// activations, h, y and the sync counters only after the earlier launches.
	if (p.chain) {
		l2_prefetch(p, 0, p.npf);
		pdl_trigger();
		pdl_wait();
	}
	float acc[MT][NT][4];
	for (uint32_t it = 0; cp.t < p.n_tasks; it++) {
		if constexpr (BULK) {
			mbar_wait(mbar0 + 8 * (it % NSTAGE), (it / NSTAGE) & 1);
			fence_proxy_async(); // this thread's reads of the buffer refilled below precede the copy engine's writes
		} else {
			cp_wait<NSTAGE - 2>();
		}
		__syncthreads();
		if (ld.t < p.n_tasks) {
			issue_stage<NT, MT, NW, BULK>(p, ld, sbase + ((it + NSTAGE - 1) % NSTAGE) * STAGE_BYTES,
					    roffs + ((it + NSTAGE - 1) % NSTAGE) * 2 * G::ROWS,
					    mbar0 + 8 * ((it + NSTAGE - 1) % NSTAGE));
			if (++ld.kc == ld.nkc) {
				ld.t += gridDim.x, ld.kc = 0;
				if (ld.t < p.n_tasks)
					task_info<NT, MT, NW>(p, ld);
			}
		}
		cp_commit();
		if (cp.kc == 0) {
#pragma unroll
			for (int m = 0; m < MT; m++)
#pragma unroll
				for (int n = 0; n < NT; n++)
					acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.0f;
			if (cp.down) {
				// Wait for this slot's h (all its gate|up tasks).
				const Slot &s = p.slot[cp.slot];
				uint32_t nrt = (p.inter + G::RG - 1) / G::RG, ntt = (s.ntok + G::TN - 1) / G::TN;
				if (tid == 0)
					wait_at_least(p.sync + 1 + cp.slot, nrt * ntt, 64, "gate|up tasks of slot", cp.slot);
				__syncthreads();
			}
		}
		const uint32_t sbuf = obase + (it % NSTAGE) * STAGE_BYTES;
		const uint8_t *roff = roffs + (it % NSTAGE) * 2 * G::ROWS;
		STRATA_FMT_SWITCH(cp.fmt, (compute_any<F, NT, MT, NW>(p, cp, sbuf, roff, t4, acc)));

		if (++cp.kc == cp.nkc) {
			// Epilogue: reduce the warps' partial sums, then write h or accumulate y.
			// For the 8/16-token tiles each warp writes its partials into the stage
			// buffer just consumed (free until the next issue, after the next loop-top
			// barrier) and the sum over warps is a fixed-order loop; the 32-token
			// tile's partials do not fit there and meet in `red` through atomics.
			const int lane = tid & 31, g = lane >> 2, t = lane & 3;
			constexpr int RT = G::ROWS * G::TN;
			constexpr bool PARTS = NW * RT * 4 <= (int)STAGE_BYTES;
			float *part = reinterpret_cast<float *>(smem + obase + (it % NSTAGE) * STAGE_BYTES);
			if constexpr (PARTS)
				__syncthreads(); // every warp is done reading the stage
#pragma unroll
			for (int m = 0; m < MT; m++)
#pragma unroll
				for (int n = 0; n < NT; n++) {
					int o0 = (m * 16 + g) * G::TN + n * 8 + 2 * t, o1 = o0 + 8 * G::TN;
					if constexpr (PARTS) {
						float *w = part + (tid >> 5) * RT;
						*reinterpret_cast<float2 *>(w + o0) = make_float2(acc[m][n][0], acc[m][n][1]);
						*reinterpret_cast<float2 *>(w + o1) = make_float2(acc[m][n][2], acc[m][n][3]);
					} else {
						atomicAdd(red + o0, acc[m][n][0]);
						atomicAdd(red + o0 + 1, acc[m][n][1]);
						atomicAdd(red + o1, acc[m][n][2]);
						atomicAdd(red + o1 + 1, acc[m][n][3]);
					}
				}
			__syncthreads();
			auto get = [&](int i) -> float {
				if constexpr (PARTS) {
					float v = 0.0f;
#pragma unroll
					for (int w = 0; w < NW; w++)
						v += part[w * RT + i];
					return v;
				} else {
					float v = red[i];
					red[i] = 0.0f;
					return v;
				}
			};
			const Slot &s = p.slot[cp.slot];
			if (!cp.down) {
				for (int i = tid; i < G::RG * G::TN; i += (32 * NW)) {
					uint32_t r = i / G::TN, n = i % G::TN;
					uint32_t row = cp.rt * G::RG + r, tl = cp.tt * G::TN + n;
					float gv = get(i), uv = get(i + G::RG * G::TN);
					if (row < p.inter && tl < s.ntok)
						p.h[s.h_off + (uint64_t)tl * p.inter + row] = gv / (1.0f + expf(-gv)) * uv;
				}
				// Release: the barrier orders every thread's h stores before
				// thread 0's fence and counter increment.
				__syncthreads();
				if (tid == 0) {
					fence_gpu();
					atomicAdd(p.sync + 1 + cp.slot, 1u);
				}
			} else {
				for (int i = tid; i < G::RD * G::TN; i += (32 * NW)) {
					uint32_t r = i / G::TN, n = i % G::TN;
					uint32_t row = cp.rt * G::RD + r, tl = cp.tt * G::TN + n;
					float v = get(i);
					if (row < p.hidden && tl < s.ntok)
						atomicAdd(p.y + (uint64_t)p.tok[s.a0 + tl] * p.hidden + row,
							  p.w[s.a0 + tl] * v);
				}
			}
			cp.t += gridDim.x, cp.kc = 0;
			if (cp.t < p.n_tasks)
				task_info<NT, MT, NW>(p, cp);
		}
	}
	cp_wait<0>();
	// The last CTA out resets the counters for the next launch.
	__syncthreads();
	if (tid == 0) {
		fence_gpu();
		unsigned prev = atomicAdd(p.sync, 1u);
		if (prev == gridDim.x - 1) {
			for (uint32_t s = 0; s < p.n_slots; s++)
				p.sync[1 + s] = 0;
			p.sync[0] = 0;
			fence_gpu();
		}
	}
}

#include "moe_prefill.cuh"
#include "moe_prefill_sm90.cuh"
#include "moe_decode.cuh"
#include "moe_dec_bf16.cuh"
#include "moe_dec_sq.cuh"
#include "moe_dec_gv.cuh"
#include "moe_dec_tr.cuh"
#include "moe_dec_small.cuh"
#include "moe_dec_ps.cuh"

__device__ __forceinline__ void store_w(float *p, float v) { *p = v; }
__device__ __forceinline__ void store_w(uint16_t *p, float v)
{
	__nv_bfloat16 b = __float2bfloat16_rn(v);
	*p = *reinterpret_cast<uint16_t *>(&b);
}

// A packed matrix as f32 (strata_gpu_dequantize) or BF16 (T = uint16_t: the
// BF16 copies of scalar-format experts, moe_layer_parts), rows x cols.
template <class F, class T>
__global__ void dequant_kernel(const uint8_t *m, uint32_t rows, uint32_t cols, uint32_t pc, uint64_t soff,
			       uint64_t rowc, uint64_t rows_, T *out)
{
	uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; // 8-weight chunk index
	uint32_t per_row = pc / 8;
	if (i >= (uint64_t)rows * per_row)
		return;
	uint32_t r = (uint32_t)(i / per_row), c8 = (uint32_t)(i % per_row);
	uint32_t b = c8 / 32, j = c8 % 32;
	float v[8];
	F::decode8f(m + r * rowc + (uint64_t)b * F::CODE_BYTES, m + soff + r * rows_ + (uint64_t)b * F::SCALE_BYTES,
		    j, v);
	for (int q = 0; q < 8; q++)
		if (c8 * 8 + q < cols)
			store_w(out + (uint64_t)r * cols + c8 * 8 + q, v[q]);
}

__global__ void read_kernel(const uint4 *p, size_t n, uint32_t *sink)
{
	uint32_t acc = 0;
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
	for (; i + 3 * stride < n; i += 4 * stride) {
		uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride),
		      d = __ldcs(p + i + 3 * stride);
		acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
	}
	for (; i < n; i += stride) {
		uint4 a = __ldcs(p + i);
		acc ^= a.x ^ a.y ^ a.z ^ a.w;
	}
	if (acc == 0x9e3779b9u)
		*sink = acc;
}

__device__ __forceinline__ float hash_uniform(uint64_t seed, uint64_t i)
{
	uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (float)(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
}

__global__ void fill_f32_kernel(float *p, size_t n, uint64_t seed, float scale)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		p[i] = isnan(scale) ? __int_as_float(0x7fc00000) : scale * hash_uniform(seed, i);
}

__global__ void fill_bf16_kernel(uint16_t *p, size_t n, uint64_t seed, float scale)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		__nv_bfloat16 v = __float2bfloat16_rn(isnan(scale) ? __int_as_float(0x7fc00000)
								   : scale * hash_uniform(seed, i));
		p[i] = *reinterpret_cast<uint16_t *>(&v);
	}
}

__global__ void fill_random_kernel(uint32_t *p, size_t n, uint64_t seed)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		p[i] = (uint32_t)(z ^ (z >> 31));
	}
}

// ---- host side ----

struct Ctx {
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	float *h = nullptr;
	size_t h_cap = 0; // floats
	unsigned *sync = nullptr;
	int sms = 0;
	// The configuration of the call in progress (kernels.h), taken from
	// strata_gpu_moe_config_get at its start.
	struct strata_moe_config cfg = STRATA_MOE_CONFIG_DEFAULT;
	bool attr_set[12] = {};
	uint32_t dec_attr = 0;
	uint64_t launches[STRATA_GPU_LAUNCH_KINDS] = {}; // strata_gpu_moe_launches
	float *gus = nullptr;          // partial gate|up sums (MoeParams::gus; also the bf16 kernel's)
	size_t gus_cap = 0;            // floats
	unsigned *gucnt = nullptr;     // parts done per unsplit gate|up task (bf16 kernel: per row tile)
	size_t gucnt_cap = 0;
	// (split-K scratch: gus / gucnt above, shared with the tier decode kernel)
	const void *gv_attr[128] = {}; // row-streaming kernels (q4/q3 and tier) whose shared-memory attribute is set (gv_pair)
	uint32_t n_gv_attr = 0;
	// Tiled prefill path (moe_prefill.cuh): experts with >= cfg.prefill_min
	// tokens.  17: the persistent kernel's 32-token tiles (17 .. 63 tokens)
	// measured 1.3 - 7x slower than the 64 x 64 prefill tile, its 16-token tiles
	// 2x faster for tier experts (bf16: 1.25x slower);
	// experiments/kernels/README.md.
	uint32_t pf_attr = 0;  // prefill kernels whose shared-memory attribute is set (bits)
	uint16_t *pf_xs = nullptr, *pf_hs = nullptr;
	uint32_t *pf_tok = nullptr;
	float *pf_w = nullptr, *pf_xsc = nullptr;
	uint8_t *pf_hexp = nullptr, *pf_hbig = nullptr;
	size_t pf_cap_a = 0, pf_cap_x = 0, pf_cap_h = 0; // assignments, xs / hs elements
	int pf90 = 0;              // the sm_90a prefill kernel runs here (moe_prefill_sm90.cuh)
	uint32_t pf90_attr = 0;    // its kernels whose shared-memory attribute is set (bits)
	uint8_t *sq_bf16 = nullptr;   // BF16 copies of scalar-format experts (moe_layer_parts)
	size_t sq_cap = 0;            // bytes
	// A stack of layers in progress (strata_gpu_moe_stack): chain = launch the
	// kernels that wait for their predecessors (persistent, warp-streaming and
	// row-streaming decode) as programmatic dependent launches; l2pf = with
	// the L2 prefetch (STRATA_MOE_STACK_L2PF); first = no launch of the stack
	// yet (the poison configuration fills h only then); the next layer's
	// experts with tokens, nx_n of them (0: no prefetch):
	// their gate|up matrices at nx_p[i] (nx_gu[i] bytes), the whole extent
	// from there nx_all[i] bytes.
	int chain = 0, l2pf = 0, first = 0;
	// small_ts: the small-layer kernel's phase timestamps (strata_gpu_small_phases),
	// STRATA_SMALL_TS_LAUNCHES launches of STRATA_SMALL_TS_CTAS CTAs; launches recorded
	// since the last read, the grid of each
	unsigned long long *sm_ts = nullptr;
	uint32_t sm_ts_n = 0, sm_ts_grid[STRATA_SMALL_TS_LAUNCHES] = {};
	uint32_t nx_n = 0;
	unsigned *ps_bar = nullptr;    // the persistent stack kernel's grid barrier (ps::Args::bar; zero between launches)
	const uint8_t *nx_p[PF_MAX];
	uint32_t nx_gu[PF_MAX], nx_all[PF_MAX];
};
Ctx g_ctx;

bool gpu_fmt_ok(int fmt)
{
	if (fmt == STRATA_FMT_BF16 || fmt == STRATA_FMT_F32)
		return true;
	return (STRATA_GPU_HAVE_TIERS && fmt >= STRATA_FMT_HOT && fmt <= STRATA_FMT_COLD) ||
	       (STRATA_GPU_HAVE_SCALAR && strata_fmt_is_scalar(fmt));
}

// Fill one format's table entry; 0 or an error.
int fill_tab(int fmt, uint32_t hidden, uint32_t inter, int rows_per_stage, FmtTab *t, struct strata_error *err)
{
	const struct strata_fmt_traits *tr = strata_fmt_traits(fmt);
	struct strata_expert_layout E;
	memset(t, 0, sizeof(*t));
	if (!tr || !gpu_fmt_ok(fmt))
		return STRATA_ERR(err, STRATA_EUNSUPPORTED, "GPU kernels: format %d (%s) has no GPU decoder", fmt,
				  tr ? tr->name : "?");
	if (tr->block == 1 && (hidden % 32 || inter % 32))
		return STRATA_ERR(err, STRATA_EUNSUPPORTED,
				  "GPU kernels: %s experts need hidden and inter multiples of 32 (got %u, %u)",
				  tr->name, hidden, inter);
	if (strata_expert_layout(fmt, hidden, inter, &E))
		return STRATA_ERR(err, STRATA_EINVAL, "GPU kernels: bad expert shape %u x %u", hidden, inter);
	t->cb = tr->code_bytes * (256 / tr->block);
	t->sb = tr->scale_bytes * (256 / tr->block);
	t->off[0] = E.gate_off, t->off[1] = E.up_off, t->off[2] = E.down_off;
	t->direct = fmt == STRATA_FMT_BF16;
	const struct strata_matrix_layout *L[2] = { &E.gate, &E.down };
	for (int d = 0; d < 2; d++) {
		t->pc[d] = L[d]->padded_cols;
		t->soff[d] = L[d]->scales_off;
		t->rowc[d] = (uint64_t)t->pc[d] * t->cb / 256;
		t->rows_[d] = (uint64_t)(t->pc[d] + 255) / 256 * t->sb;
		if (t->direct) {
			// Straight to registers: one stage per task, the whole row.
			t->kc[d] = t->pc[d], t->pitch[d] = 0, t->cpitch[d] = 0;
			continue;
		}
		// Largest chunk (a multiple of 256 weights, or the whole row) whose stage fits.
		uint32_t best = 0, bp = 0, bc = 0;
		for (uint32_t kc = 256;; kc += 256) {
			uint32_t k = kc < t->pc[d] ? kc : t->pc[d];
			uint32_t cp = ((uint32_t)((uint64_t)k * t->cb / 256) + 15) / 16 * 16 + 16;
			uint32_t sp = t->sb ? ((k + 255) / 256 * t->sb + 15) / 16 * 16 + 16 : 0;
			uint32_t pitch = cp + sp;
			// Row pitch mod 128 bytes: 64 for the passthrough formats (a quarter warp's
			// 16-byte loads from rows g, g+1 hit disjoint banks), 16 for the tier formats
			// (32-bit code-word loads of rows 0..7 land 4 banks apart).
			uint32_t want = tr->block == 1 ? 64 : 16;
			pitch = (pitch + 127 - want) / 128 * 128 + want;
			if ((uint64_t)pitch * rows_per_stage > STAGE_BYTES)
				break;
			best = k, bp = pitch, bc = cp;
			if (k == t->pc[d])
				break;
		}
		if (!best)
			return STRATA_ERR(err, STRATA_EUNSUPPORTED, "GPU kernels: %s rows too wide for a stage",
					  tr->name);
		t->kc[d] = best, t->pitch[d] = bp, t->cpitch[d] = bc;
	}
	t->ok = 1;
	return STRATA_OK;
}

int ctx_init(struct strata_error *err)
{
	if (!g_ctx.sync) {
		int dev;
		CU_TRY(err, cudaGetDevice(&dev));
		CU_TRY(err, cudaDeviceGetAttribute(&g_ctx.sms, cudaDevAttrMultiProcessorCount, dev));
		// [0] CTAs (warps) done, [1 + s] per slot, [dec::FETCH] task counter.
		CU_TRY(err, cudaMalloc(&g_ctx.sync, (STRATA_MOE_MAX_SLOTS + 2) * sizeof(unsigned)));
		CU_TRY(err, cudaMemset(g_ctx.sync, 0, (STRATA_MOE_MAX_SLOTS + 2) * sizeof(unsigned)));
		// The sm_90a prefill kernel: a 9.0 GPU and code built for sm_90a.
		int major = 0, minor = 0;
		CU_TRY(err, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
		CU_TRY(err, cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
		if (major == 9 && minor == 0) {
			unsigned *d = nullptr, h = 0;
			CU_TRY(err, cudaMalloc(&d, sizeof(unsigned)));
			pf90::probe<<<1, 1>>>(d);
			cudaError_t ce = cudaGetLastError();
			if (ce == cudaSuccess)
				ce = cudaMemcpy(&h, d, sizeof(unsigned), cudaMemcpyDeviceToHost);
			cudaFree(d);
			if (ce != cudaSuccess)
				return STRATA_ERR(err, STRATA_EGPU, "strata_moe_layer_gpu: sm90 probe: %s", cudaGetErrorString(ce));
			g_ctx.pf90 = h == 1;
		}
	}
	return STRATA_OK;
}

// Launch k<<<grid, block, smem, st>>>(args...), as a programmatic dependent
// launch when pdl (k then waits with griddepcontrol.wait before it touches
// what the earlier launches write).
template <class... KA, class... A>
int launch_k(void (*k)(KA...), uint32_t grid, uint32_t block, uint32_t smem, cudaStream_t st, bool pdl,
	     struct strata_error *err, A &&...args)
{
	cudaLaunchConfig_t lc = {};
	cudaLaunchAttribute at[1];
	at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	at[0].val.programmaticStreamSerializationAllowed = 1;
	lc.gridDim = dim3(grid), lc.blockDim = dim3(block), lc.dynamicSmemBytes = smem, lc.stream = st;
	lc.attrs = at, lc.numAttrs = pdl ? 1 : 0;
	CU_TRY(err, cudaLaunchKernelEx(&lc, k, std::forward<A>(args)...));
	if (pdl && g_ctx.chain)
		g_ctx.launches[STRATA_GPU_LAUNCH_CHAINED]++;
	return STRATA_OK;
}

// The L2 prefetch list of a launch (MoeParams::pfp), chained launches of a
// stack with STRATA_MOE_STACK_L2PF only: first, when own_down, the down matrices of this launch's slots
// (the row-streaming kernel's gate|up launch: its down launch is next), then
// the next layer's experts (their gate|up matrices when gu_only: the
// row-streaming kernel's down launch, whose successor is the next layer's
// gate|up launch; else whole extents); *mid: where the next layer's ranges
// begin.  Nothing of a part that would exceed PF_MAX ranges or PF_BYTES_MAX.
void pf_list(MoeParams *p, bool own_down, bool gu_only, uint32_t *mid)
{
	p->chain = g_ctx.chain, p->npf = 0;
	*mid = 0;
	if (!g_ctx.chain || !g_ctx.l2pf)
		return;
	uint64_t tot = 0;
	if (own_down && p->n_slots <= PF_MAX) {
		struct strata_expert_layout E;
		for (uint32_t s = 0; s < p->n_slots; s++) {
			if (strata_expert_layout((int)p->slot[s].fmt, p->hidden, p->inter, &E))
				break;
			p->pfp[p->npf] = p->slot[s].ext + E.down_off, p->pfb[p->npf++] = (uint32_t)E.down.bytes;
			tot += E.down.bytes;
		}
		if (tot > PF_BYTES_MAX)
			p->npf = 0, tot = 0;
	}
	*mid = p->npf;
	uint64_t nb = 0;
	for (uint32_t i = 0; i < g_ctx.nx_n; i++)
		nb += gu_only ? g_ctx.nx_gu[i] : g_ctx.nx_all[i];
	if (!g_ctx.nx_n || p->npf + g_ctx.nx_n > PF_MAX || tot + nb > PF_BYTES_MAX)
		return;
	for (uint32_t i = 0; i < g_ctx.nx_n; i++)
		p->pfp[p->npf] = g_ctx.nx_p[i], p->pfb[p->npf++] = gu_only ? g_ctx.nx_gu[i] : g_ctx.nx_all[i];
}

// The format of every slot of a launch, or -1 when they differ (or none).
int one_fmt(const MoeParams *p)
{
	for (uint32_t s = 1; s < p->n_slots; s++)
		if (p->slot[s].fmt != p->slot[0].fmt)
			return -1;
	return p->n_slots ? (int)p->slot[0].fmt : -1;
}

// The rows of x a launch's tokens reach (its largest token + 1).
uint32_t x_rows(const MoeParams *p)
{
	uint32_t xrows = 0;
	for (uint32_t s = 0; s < p->n_slots; s++)
		for (uint32_t i = 0; i < p->slot[s].ntok; i++)
			if (p->tok[p->slot[s].a0 + i] >= xrows)
				xrows = p->tok[p->slot[s].a0 + i] + 1;
	return xrows;
}

// Task list of a launch: every slot's gate|up tasks (rg rows x tn tokens,
// sg split-K parts each), then every slot's down tasks (rd rows, sd parts);
// sets task0 / dtask0, n_gu_tasks and n_tasks (returned).
uint32_t layout_tasks(MoeParams *p, uint32_t rg, uint32_t rd, uint32_t tn, uint32_t sg = 1, uint32_t sd = 1)
{
	uint32_t nrt_gu = (p->inter + rg - 1) / rg * sg, nrt_dn = (p->hidden + rd - 1) / rd * sd, t = 0;
	for (uint32_t s = 0; s < p->n_slots; s++) {
		p->slot[s].task0 = t;
		t += nrt_gu * ((p->slot[s].ntok + tn - 1) / tn);
	}
	p->n_gu_tasks = t;
	for (uint32_t s = 0; s < p->n_slots; s++) {
		p->slot[s].dtask0 = t;
		t += nrt_dn * ((p->slot[s].ntok + tn - 1) / tn);
	}
	p->n_tasks = t;
	return t;
}

template <int NT, int MT, int NW, bool BULK>
int launch(MoeParams *p, cudaStream_t st, int variant, struct strata_error *err)
{
	using G = Geo<NT, MT, NW>;
	size_t smem = NSTAGE * STAGE_BYTES + G::ROWS * G::TN * sizeof(float) + NSTAGE * 2 * G::ROWS + 8 * NSTAGE;
	if (!g_ctx.attr_set[variant]) {
		CU_TRY(err, cudaFuncSetAttribute(moe_kernel<NT, MT, NW, BULK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
						 (int)smem));
		g_ctx.attr_set[variant] = true;
	}
	uint32_t t = layout_tasks(p, G::RG, G::RD, G::TN);
	uint32_t grid = t < (uint32_t)g_ctx.sms ? t : (uint32_t)g_ctx.sms, mid;
	pf_list(p, false, false, &mid);
	return launch_k(moe_kernel<NT, MT, NW, BULK>, grid, 32 * NW, (uint32_t)smem, st, g_ctx.chain, err, *p);
}

// The warp-streaming decode kernel <NW warps, NS stages> (moe_decode.cuh),
// tasks already laid out by run_dec; TAB: the codebook through the shared
// table (tcq_tab_pair); SQ: q4/q3 experts may be in the launch.
template <int NW, int NS, bool UNROLL = false, int NT = 1, bool TAB = false, bool SQ = true>
int dec_launch(MoeParams *p, cudaStream_t st, int bit, struct strata_error *err)
{
	using G = dec::DGeo<NW, NS, TAB>;
	if (!(g_ctx.dec_attr & (1u << bit))) {
		CU_TRY(err, cudaFuncSetAttribute(dec::dec_kernel<NW, NS, UNROLL, NT, TAB, SQ>,
						 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)G::SMEM));
		g_ctx.dec_attr |= 1u << bit;
	}
	uint32_t grid = (p->n_tasks + NW - 1) / NW, mid;
	if (grid > (uint32_t)g_ctx.sms)
		grid = (uint32_t)g_ctx.sms;
	pf_list(p, false, false, &mid);
	return launch_k(dec::dec_kernel<NW, NS, UNROLL, NT, TAB, SQ>, grid, 32 * NW, (uint32_t)G::SMEM, st, g_ctx.chain,
			err, *p);
}

// Grow a zero-filled device array to n elements of T (kept zero between
// launches by the kernel that uses it).
template <class T> int grow_zeroed(T **buf, size_t *cap, size_t n, cudaStream_t st, struct strata_error *err)
{
	if (n <= *cap)
		return STRATA_OK;
	if (*buf) {
		CU_TRY(err, cudaStreamSynchronize(st));
		cudaFree(*buf);
		*buf = nullptr, *cap = 0;
	}
	size_t c = n < (1u << 16) ? (1u << 16) : n;
	CU_TRY(err, cudaMalloc(buf, c * sizeof(T)));
	CU_TRY(err, cudaMemsetAsync(*buf, 0, c * sizeof(T), st));
	*cap = c;
	return STRATA_OK;
}

// Decode launches (<= 16 tokens per expert): the warp-streaming kernel when
// every expert is in a tier format and the launch has at least two tasks per
// warp; tasks of one 8-token tile, or of two (<12, 4> only; decoded once for
// both) when an expert has 9 - 16 tokens.  A task is one warp's: a launch with few tasks
// (Qwen3-30B-A3B's 8 experts: 896 tasks for 1584 warps) leaves warps idle and
// the persistent kernel, which splits a task's row over 16 warps, is faster.
// Split-K parts (the configuration's split) fill the warps
// but measured slower there (41.6 against 33.5 us per Qwen layer, hot, T=1:
// each warp's two or three one-block tasks never fill its copy ring, and the
// partial sums cost atomics), so such launches stay on the persistent kernel.
// By default a launch of one 8-token tile, at most SPLIT_MAXTOK tokens per
// expert and two to four unsplit tasks per warp is cut into SPLIT_AUTO parts:
// at the Kimi shape the down tasks spin less at the gate|up -> down boundary,
// where whole-row gate|up tasks (28 blocks) end unevenly (hot T=1 239.8 against
// 263.2 us).  The partial sums' atomics grow with the tokens (T=8 measured 2%
// slower, T=16 12%), and launches with many tasks per warp balance without
// (full layers at T=16: Kimi 4%, Qwen 16% slower split; experiments/kernels/
// README.md, "Split-K and format-ordered slots").
// hfl: floats of h in this launch (the split-K scratch holds two per h
// element).  1 when the warp-streaming kernel ran (*rc its result), 0 when
// the persistent kernel should run.
constexpr uint32_t SPLIT_AUTO = 3, SPLIT_MAXTOK = 4;
int run_dec(MoeParams *p, uint32_t maxtok, uint32_t hfl, cudaStream_t st, struct strata_error *err, int *rc)
{
	bool scalar = false;
	for (uint32_t s = 0; s < p->n_slots; s++) {
		if (strata_fmt_is_scalar((int)p->slot[s].fmt))
			scalar = true;
		else if (p->slot[s].fmt < STRATA_FMT_HOT || p->slot[s].fmt > STRATA_FMT_COLD)
			return 0;
	}
	// Scalar-format experts have no persistent-kernel decoder (moe_layer sends
	// them here only when this kernel is on): those run_dec_sq leaves (9 - 16
	// tokens, q4 and q3 in one launch, sqdec=off, a forced variant) always
	// take this kernel.
	const bool forced = g_ctx.cfg.dec_warps >= 0 || scalar;
	int nw = g_ctx.cfg.dec_warps, ns = g_ctx.cfg.dec_stages;
	const int nt = maxtok <= dec::TN ? 1 : 2;
	if (!nw)
		return 0;
	if (nw < 0 || nt == 2)
		nw = 12, ns = 4;
	const uint32_t warps = (uint32_t)nw * (uint32_t)g_ctx.sms;
	const uint32_t nbg = (p->hidden + 255) / 256, nbd = (p->inter + 255) / 256;
	uint32_t t = layout_tasks(p, dec::ROWS / 2, dec::ROWS, dec::TN * nt);
	uint32_t split = g_ctx.cfg.split;
	if (!split && scalar)
		// Scalar formats decode in a fraction of the trellis' instructions, so
		// their tasks are bound by bytes in flight: split rows until every warp
		// has two tasks (the Qwen3-30B-A3B layer: 896 tasks for 1584 warps).
		split = t >= 2 * warps ? (nt == 1 && maxtok <= SPLIT_MAXTOK && t < 4 * warps ? SPLIT_AUTO : 1)
				       : (2 * warps + t - 1) / t;
	if (!split)
		split = g_ctx.cfg.dec_warps < 0 && nt == 1 && maxtok <= SPLIT_MAXTOK && t >= 2 * warps && t < 4 * warps
				? SPLIT_AUTO : 1;
	if (!forced && split == 1 && t < 2 * warps)
		return 0;
	// A row of nb blocks in at most `split` parts of kb blocks: s parts.
	auto cut = [split](uint32_t nb, uint32_t &kb, uint32_t &s) {
		uint32_t n = split < nb ? split : nb;
		kb = (nb + n - 1) / n, s = (nb + kb - 1) / kb;
	};
	cut(nbg, p->kbg, p->sgu);
	cut(nbd, p->kbd, p->sdn);
	t = layout_tasks(p, dec::ROWS / 2, dec::ROWS, dec::TN * nt, p->sgu, p->sdn);
	if (!forced && t < warps)
		return 0;
	if (p->sgu > 1) {
		if ((*rc = grow_zeroed(&g_ctx.gus, &g_ctx.gus_cap, 2 * (size_t)hfl, st, err)) ||
		    (*rc = grow_zeroed(&g_ctx.gucnt, &g_ctx.gucnt_cap, p->n_gu_tasks / p->sgu, st, err)))
			return 1;
	}
	p->gus = g_ctx.gus, p->gucnt = g_ctx.gucnt;
	if (p->sgu > 1 || p->sdn > 1)
		g_ctx.launches[STRATA_GPU_LAUNCH_DECODE_SPLIT]++;
	// Tier-only launches of the default kernel and of the table variants run
	// without the scalar decoder (SQ = false); a launch with q4/q3 experts
	// takes the table variants' place on 12 x 4.
	if (nt == 2)
		*rc = scalar ? dec_launch<12, 4, false, 2>(p, st, 6, err)
			     : dec_launch<12, 4, false, 2, false, false>(p, st, 10, err);
	else if (!scalar && nw == 12 && ns == STRATA_MOE_DEC_TAB + 2)
		*rc = dec_launch<12, 2, false, 1, true, false>(p, st, 12, err);
	else if (!scalar && nw == 8 && ns == STRATA_MOE_DEC_TAB + 2)
		*rc = dec_launch<8, 2, false, 1, true, false>(p, st, 7, err);
	else if (!scalar && nw == 7 && ns == STRATA_MOE_DEC_TAB + 3)
		*rc = dec_launch<7, 3, false, 1, true, false>(p, st, 9, err);
	else if (nw == 12 && ns == -4)
		*rc = dec_launch<12, 4, true>(p, st, 5, err);
	else if (nw == 8 && ns == 4)
		*rc = dec_launch<8, 4>(p, st, 0, err);
	else if (nw == 8 && ns == 5)
		*rc = dec_launch<8, 5>(p, st, 1, err);
	else if (nw == 12 && ns == 3)
		*rc = dec_launch<12, 3>(p, st, 2, err);
	else if (nw == 16 && ns == 3)
		*rc = dec_launch<16, 3>(p, st, 3, err);
	else
		*rc = scalar ? dec_launch<12, 4>(p, st, 4, err) : dec_launch<12, 4, false, 1, false, false>(p, st, 11, err);
	return 1;
}

// The bf16 decode kernel <NW warps, ring depth D> (moe_dec_bf16.cuh), tasks
// laid out by run_dec_bf16.
template <int NW, int D> int bfd_launch(MoeParams *p, const bfd::Args &a, cudaStream_t st, struct strata_error *err)
{
	uint32_t grid = (p->n_tasks + NW - 1) / NW;
	if (grid > (uint32_t)g_ctx.sms)
		grid = (uint32_t)g_ctx.sms;
	bfd::bf16_kernel<NW, D><<<grid, 32 * NW, 0, st>>>(*p, a);
	CU_TRY(err, cudaGetLastError());
	g_ctx.launches[STRATA_GPU_LAUNCH_BF16_DECODE]++;
	return STRATA_OK;
}

// Decode launches (<= 8 tokens per expert) whose experts are all bf16: the
// bf16 decode kernel, unless turned off (then the persistent kernel's direct
// path).  hfl: floats of h in this launch.  1 when it ran (*rc its result), 0
// when another kernel should run instead.
int run_dec_bf16(MoeParams *p, uint32_t hfl, cudaStream_t st, struct strata_error *err, int *rc)
{
	for (uint32_t s = 0; s < p->n_slots; s++)
		if (p->slot[s].fmt != STRATA_FMT_BF16)
			return 0;
	// Forced: a variant (or off) named in the configuration.
	const bool forced = g_ctx.cfg.bf16_warps >= 0;
	int nw = g_ctx.cfg.bf16_warps, dd = g_ctx.cfg.bf16_depth;
	const uint32_t kcw = g_ctx.cfg.bf16_kc;
	if (!nw)
		return 0;
	// K chunks of about kcw weights, even across the row (multiples of 32).
	const FmtTab &f = p->tab[STRATA_FMT_BF16];
	bfd::Args a;
	for (int d = 0; d < 2; d++) {
		uint32_t n = (f.pc[d] + kcw - 1) / kcw;
		a.kc[d] = ((f.pc[d] + n - 1) / n + 31) / 32 * 32;
		a.nch[d] = (f.pc[d] + a.kc[d] - 1) / a.kc[d];
	}
	a.nrt = (p->inter + bfd::RG - 1) / bfd::RG;
	// Tasks: layout_tasks' order (every slot has one 8-token tile), each split
	// into its K chunks, chunk-major (task_find's token tile is the chunk).
	layout_tasks(p, bfd::RG, bfd::RD, bfd::TN);
	const uint32_t ngu = p->n_gu_tasks;
	for (uint32_t s = 0; s < p->n_slots; s++) {
		p->slot[s].task0 *= a.nch[0];
		p->slot[s].dtask0 = ngu * a.nch[0] + (p->slot[s].dtask0 - ngu) * a.nch[1];
	}
	p->n_gu_tasks = ngu * a.nch[0];
	p->n_tasks = p->n_gu_tasks + (p->n_tasks - ngu) * a.nch[1];
	// By default only launches of at least 4 tasks per warp of 16 x SMs: Kimi
	// (32256 tasks) 0.78 vs 0.69 of read at T=1, but Qwen3-30B-A3B (2560) 0.33
	// vs 0.46 on the persistent kernel (experiments/kernels/README.md).
	if (!forced && p->n_tasks < 4u * 16u * (uint32_t)g_ctx.sms)
		return 0;
	// Split-K scratch and counters, zero at allocation and left zero by the
	// kernel: the ones of the tier decode kernel's split-K (launches run in
	// stream order, and each leaves them zero).
	const size_t ngu_f = a.nch[0] > 1 ? 2 * (size_t)hfl : 0, nctr = (size_t)p->n_slots * a.nrt;
	if ((*rc = grow_zeroed(&g_ctx.gus, &g_ctx.gus_cap, ngu_f, st, err)) ||
	    (*rc = grow_zeroed(&g_ctx.gucnt, &g_ctx.gucnt_cap, nctr, st, err)))
		return 1;
	a.gu = g_ctx.gus, a.ctr = g_ctx.gucnt;
	if (nw == 12 && dd == 6)
		*rc = bfd_launch<12, 6>(p, a, st, err);
	else if (nw == 8 && dd == 8)
		*rc = bfd_launch<8, 8>(p, a, st, err);
	else
		*rc = bfd_launch<16, 4>(p, a, st, err);
	return 1;
}

// The scalar-format decode kernel <format, NW warps, ring depth D, L2
// prefetch of the next task, x rows staged in shared memory> (moe_dec_sq.cuh),
// tasks laid out by run_dec_sq; xrows: the rows staged.
template <int FMT, int NW, int D, bool PF, bool XS>
int sqd_launch(MoeParams *p, const bfd::Args &a, uint32_t xrows, cudaStream_t st, struct strata_error *err)
{
	uint32_t grid = (p->n_tasks + NW - 1) / NW;
	if (grid > (uint32_t)g_ctx.sms)
		grid = (uint32_t)g_ctx.sms;
	const size_t smem = XS ? (size_t)xrows * p->hidden * 2 : 0;
	sqd::sq_kernel<FMT, NW, D, PF, XS><<<grid, 32 * NW, smem, st>>>(*p, a, xrows);
	CU_TRY(err, cudaGetLastError());
	g_ctx.launches[STRATA_GPU_LAUNCH_SCALAR_DECODE]++;
	g_ctx.launches[STRATA_GPU_LAUNCH_SCALAR_STAGED] += XS;
	return STRATA_OK;
}

// Decode launches (<= 8 tokens per expert) whose experts are all in one
// scalar format, with the decode kernel on its automatic choice (sqdec=auto,
// dec=auto, split=auto; sqdec=off, a forced dec=NxS variant or split keeps
// them on dec_kernel): the scalar-format decode kernel.  K chunks of whole blocks: at most
// SQ_KCB blocks, fewer until the launch has SQ_TASKS_PER_WARP tasks per warp
// (the Qwen3-30B-A3B layer: one block per chunk, 4608 tasks), as even as the
// row allows.  The launch's x rows (up to its largest token index) are staged
// in shared memory as fp16 when they fit SQ_XS_MAX (sq_xs=1, the default; not
// with sq_pf=1).  hfl: floats of h in this launch.  1 when it ran (*rc its
// result), 0 when another kernel should run instead.
constexpr uint32_t SQ_KCB = 4, SQ_TASKS_PER_WARP = 4, SQ_XS_MAX = 48 * 1024;
// 8 warps of a 4-unit ring (q4 227 - 237 registers, q3 235; 12 warps would
// cap them at 168 and spill).
constexpr int SQ_NW = 8, SQ_D = 4;
int run_dec_sq(MoeParams *p, uint32_t hfl, cudaStream_t st, struct strata_error *err, int *rc)
{
	const int fmt = one_fmt(p);
	if (!strata_fmt_is_scalar(fmt) || !g_ctx.cfg.sq_dec || g_ctx.cfg.dec_warps >= 0 || g_ctx.cfg.split)
		return 0;
	const FmtTab &f = p->tab[fmt];
	const uint32_t warps = (uint32_t)SQ_NW * (uint32_t)g_ctx.sms;
	bfd::Args a;
	layout_tasks(p, bfd::RG, bfd::RD, bfd::TN);
	const uint32_t ngu = p->n_gu_tasks, ndn = p->n_tasks - ngu;
	for (uint32_t kcb = SQ_KCB;; kcb--) {
		for (int d = 0; d < 2; d++) {
			const uint32_t nb = f.pc[d] / 256, n = (nb + kcb - 1) / kcb, per = (nb + n - 1) / n;
			a.kc[d] = per * 256;
			a.nch[d] = (nb + per - 1) / per;
		}
		if (kcb == 1 || ngu * a.nch[0] + ndn * a.nch[1] >= SQ_TASKS_PER_WARP * warps)
			break;
	}
	a.nrt = (p->inter + bfd::RG - 1) / bfd::RG;
	// Tasks: layout_tasks' order, each split into its K chunks, chunk-major
	// (run_dec_bf16's numbering, which bfd::btask reads).
	for (uint32_t s = 0; s < p->n_slots; s++) {
		p->slot[s].task0 *= a.nch[0];
		p->slot[s].dtask0 = ngu * a.nch[0] + (p->slot[s].dtask0 - ngu) * a.nch[1];
	}
	p->n_gu_tasks = ngu * a.nch[0];
	p->n_tasks = p->n_gu_tasks + ndn * a.nch[1];
	const size_t ngu_f = a.nch[0] > 1 ? 2 * (size_t)hfl : 0, nctr = (size_t)p->n_slots * a.nrt;
	if ((*rc = grow_zeroed(&g_ctx.gus, &g_ctx.gus_cap, ngu_f, st, err)) ||
	    (*rc = grow_zeroed(&g_ctx.gucnt, &g_ctx.gucnt_cap, nctr, st, err)))
		return 1;
	a.gu = g_ctx.gus, a.ctr = g_ctx.gucnt;
	const bool pf = g_ctx.cfg.sq_pf;
	const uint32_t xrows = x_rows(p);
	const bool xs = g_ctx.cfg.sq_xs && !pf && p->vec && p->hidden % 8 == 0 &&
			(size_t)xrows * p->hidden * 2 <= SQ_XS_MAX;
	if (fmt == STRATA_FMT_Q4)
		*rc = pf   ? sqd_launch<STRATA_FMT_Q4, SQ_NW, SQ_D, true, false>(p, a, 0, st, err)
		      : xs ? sqd_launch<STRATA_FMT_Q4, SQ_NW, SQ_D, false, true>(p, a, xrows, st, err)
			   : sqd_launch<STRATA_FMT_Q4, SQ_NW, SQ_D, false, false>(p, a, 0, st, err);
	else
		*rc = pf   ? sqd_launch<STRATA_FMT_Q3, SQ_NW, SQ_D, true, false>(p, a, 0, st, err)
		      : xs ? sqd_launch<STRATA_FMT_Q3, SQ_NW, SQ_D, false, true>(p, a, xrows, st, err)
			   : sqd_launch<STRATA_FMT_Q3, SQ_NW, SQ_D, false, false>(p, a, 0, st, err);
	return 1;
}

// The row-streaming kernel's geometry for a matrix of nrows rows of cpr
// chunks in nslots slots: lanes per row (1 << lsh) and batches of nb chunks
// per lane (nbat) with the fewest batches per warp of the busiest warp (one
// CTA of gv::NW warps per SM, each CTA a contiguous range of tasks), then the
// fewest lane-chunk slots per row (idle lanes cost issue), then the most lanes.
// rl > 1 (sq_gvx): rl rows per lane, a batch one chunk of each (8 - 32 lanes
// per row set, where the rows and the chunks divide evenly).  force: only
// 1 << force lanes (sq_gvl), 0: any.  0 when none fits.
int gv_geom(uint32_t cpr, uint32_t nb, uint32_t nrows, uint32_t nslots, uint32_t rl, uint32_t force, uint32_t &lsh,
	    uint32_t &nbat)
{
	uint64_t best = UINT64_MAX;
	for (int l = 5; l >= (rl > 1 ? 3 : 0); l--) {
		if ((force && (uint32_t)l != force) || (rl > 1 && (cpr % (1u << l) || nrows % ((32u >> l) * rl))))
			continue;
		const uint32_t nci = (cpr + (1u << l) - 1) >> l, bt = rl > 1 ? nci : (nci + nb - 1) / nb;
		const uint32_t cost = rl > 1 ? cpr : bt * nb << l, rpt = (32u >> l) * rl;
		const uint32_t ntask = nslots * ((nrows + rpt - 1) / rpt);
		const uint32_t tpc = (ntask + (uint32_t)g_ctx.sms - 1) / (uint32_t)g_ctx.sms;
		const uint64_t key = (uint64_t)((tpc + gv::NW - 1) / gv::NW * bt) << 32 | cost;
		if (key < best)
			best = key, lsh = (uint32_t)l, nbat = bt;
	}
	return best != UINT64_MAX;
}

using GvKernel = void (*)(const MoeParams, const gv::Args);

// q3 on the row-streaming kernel's integer loop (gv::Q3i) at nt tokens per
// expert (sq_q3i): at 1 - 2 tokens by default, where it is faster than the
// fp16 loop (Kimi-K2 layer, 16 experts: 83.7 vs 102.6 us at one token, 135.5
// vs 137.2 at two; 243.4 vs 211.3 at four); experiments/kernels/README.md.
bool gv_q3i(uint32_t nt) { return g_ctx.cfg.sq_q3i == 2 || (g_ctx.cfg.sq_q3i == 1 && nt <= 2); }

// The row-streaming kernel of policy P at NT tokens per expert, lanes per row
// 1 << lsh at compile time (1 <= lsh <= 4), W warps per CTA.
template <int FMT, class P, int NT, int W> GvKernel gv_full(uint32_t lsh)
{
	switch (lsh) {
	case 1: return gv::gv_kernel<FMT, P, NT, 1, true, W>;
	case 2: return gv::gv_kernel<FMT, P, NT, 2, true, W>;
	case 3: return gv::gv_kernel<FMT, P, NT, 3, true, W>;
	default: return gv::gv_kernel<FMT, P, NT, 4, true, W>;
	}
}

// The same with several rows per lane (gv_kernel's XR; 8 - 32 lanes per row set).
template <int FMT, class P, int NT> GvKernel gv_xr(uint32_t lsh)
{
	switch (lsh) {
	case 3: return gv::gv_kernel<FMT, P, NT, 3, true, gv::NW, true>;
	case 4: return gv::gv_kernel<FMT, P, NT, 4, true, gv::NW, true>;
	default: return gv::gv_kernel<FMT, P, NT, 5, true, gv::NW, true>;
	}
}

// The row-streaming kernel of one launch for format FMT, NT tokens per expert
// and its geometry: lanes per row at compile time (2 - 16) where the launch's
// rows and lanes' batches divide evenly, else at run time; old (sq_gv=2): the
// earlier inner loop; q3i: q3's integer loop (sq_q3i); at one token with lanes
// per row at compile time, q4 and q3i in w warps per CTA (sq_gvw), else 16;
// g.rl > 1 (1 - 2 tokens; q4, q3i; run_dec_gv): several rows per lane.
// *nw: its warps per CTA.
template <int FMT, int NT> GvKernel gv_pick(const gv::Args &g, uint32_t nrows, bool old, bool q3i, int w, uint32_t *nw)
{
	constexpr bool Q4 = FMT == STRATA_FMT_Q4;
	using P = std::conditional_t<Q4, gv::Q4, gv::Q3>;
	const uint32_t rw = 32u >> g.lsh;
	const bool full = !old && g.lsh >= 1 && g.lsh <= 4 && g.cpr % (P::NB << g.lsh) == 0 && nrows % rw == 0;
	*nw = gv::NW;
	if constexpr (NT <= 2)
		if (g.rl > 1)
			return gv_xr<FMT, std::conditional_t<Q4, gv::Q4, gv::Q3i>, NT>(g.lsh);
	if constexpr (NT == 1)
		if (full && (Q4 || q3i) && w != gv::NW) {
			using PW = std::conditional_t<Q4, gv::Q4, gv::Q3i>;
			*nw = (uint32_t)w;
			return w == 12 ? gv_full<FMT, PW, NT, 12>(g.lsh) : gv_full<FMT, PW, NT, 8>(g.lsh);
		}
	if constexpr (!Q4)
		if (q3i)
			return full ? gv_full<FMT, gv::Q3i, NT, gv::NW>(g.lsh) : gv::gv_kernel<FMT, gv::Q3i, NT, -1, false>;
	if (full)
		return gv_full<FMT, P, NT, gv::NW>(g.lsh);
	if (old && Q4)
		return gv::gv_kernel<FMT, gv::Q4b, NT, -1, false>;
	return gv::gv_kernel<FMT, P, NT, -1, false>;
}

// Set kernel k's dynamic shared-memory limit to bytes once per process (the
// row-streaming and small-layer kernels; g_ctx.gv_attr records those done).
int gv_smem_attr(const void *k, uint32_t bytes, struct strata_error *err)
{
	uint32_t i = 0;
	while (i < g_ctx.n_gv_attr && g_ctx.gv_attr[i] != k)
		i++;
	if (i == g_ctx.n_gv_attr) {
		CU_TRY(err, cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
		if (i < sizeof(g_ctx.gv_attr) / sizeof(g_ctx.gv_attr[0]))
			g_ctx.gv_attr[g_ctx.n_gv_attr++] = k;
	}
	return STRATA_OK;
}

// The two launches of a row-streaming layer (gate|up, then down; the down
// launch a programmatic dependent one under sq_pdl, both in a stack): kernel
// k[d] of nw[d] warps per CTA and smem[d] bytes of shared memory, its
// shared-memory attribute set to attr bytes on its first launch; counted
// as kind.
int gv_pair(MoeParams *p, const GvKernel (&k)[2], const uint32_t (&nw)[2], const gv::Args (&a)[2],
	    const uint32_t (&grid)[2], const uint32_t (&smem)[2], uint32_t attr, enum strata_gpu_launch kind,
	    cudaStream_t st, struct strata_error *err)
{
	int rc;
	for (int d = 0; d < 2; d++)
		if ((rc = gv_smem_attr((const void *)k[d], attr, err)))
			return rc;
	if ((rc = launch_k(k[0], grid[0], 32 * nw[0], smem[0], st, g_ctx.chain, err, *p, a[0])) ||
	    (rc = launch_k(k[1], grid[1], 32 * nw[1], smem[1], st, g_ctx.chain || a[1].pdl, err, *p, a[1])))
		return rc;
	g_ctx.launches[kind]++;
	return STRATA_OK;
}

// The row-streaming kernel's two launches (gate|up, down) for format FMT and
// NT tokens per expert.
template <int FMT, int NT>
int gv_launch(MoeParams *p, const gv::Args (&a)[2], const uint32_t (&grid)[2], const uint32_t (&smem)[2], cudaStream_t st,
	      struct strata_error *err)
{
	GvKernel k[2];
	uint32_t nw[2];
	for (int d = 0; d < 2; d++)
		k[d] = gv_pick<FMT, NT>(a[d], d ? p->hidden : p->inter, g_ctx.cfg.sq_gv == 2, gv_q3i(NT), g_ctx.cfg.sq_gvw, &nw[d]);
	const int rc = gv_pair(p, k, nw, a, grid, smem, gv::SMEM_MAX, STRATA_GPU_LAUNCH_SCALAR_GEMV, st, err);
	if (!rc && (a[0].rl > 1 || a[1].rl > 1))
		g_ctx.launches[STRATA_GPU_LAUNCH_SCALAR_GEMV_XR]++;
	return rc;
}

// A row-streaming launch's tasks (d: 0 gate|up, 1 down; g.lsh set): 32 >>
// lsh rows each, dealt in contiguous ranges to one CTA per SM at most; the
// rows of x staged (xrows), or of h by the down launch's busiest CTA (the
// slots of its range of tasks).  Returns the grid.
uint32_t gv_tasks(const MoeParams *p, uint32_t d, uint32_t xrows, gv::Args &g)
{
	const uint32_t rw = (32u >> g.lsh) * g.rl, sms = (uint32_t)g_ctx.sms;
	g.nrs = ((d ? p->hidden : p->inter) + rw - 1) / rw;
	g.ntask = p->n_slots * g.nrs;
	g.tpc = (g.ntask + sms - 1) / sms;
	const uint32_t grid = (g.ntask + g.tpc - 1) / g.tpc;
	g.xrows = xrows;
	g.srows = xrows;
	if (d) {
		g.srows = 0;
		for (uint32_t b = 0; b < grid; b++) {
			const uint32_t s0 = b * g.tpc / g.nrs, s1 = ((b + 1) * g.tpc < g.ntask ? (b + 1) * g.tpc : g.ntask) - 1;
			const uint32_t n = p->slot[s1 / g.nrs].a0 + p->slot[s1 / g.nrs].ntok - p->slot[s0].a0;
			g.srows = n > g.srows ? n : g.srows;
		}
	}
	return grid;
}

// Decode launches (<= gv::NTMAX tokens per expert) whose experts are all in
// one scalar format, with the scalar decode kernel on its automatic choice
// (sq_gv=1, sqdec=auto, dec and split not forced): the row-streaming kernel
// (moe_dec_gv.cuh), when each CTA's staged activations fit.  1 when it ran
// (*rc its result), 0 when another kernel should run instead.
int run_dec_gv(MoeParams *p, uint32_t maxtok, cudaStream_t st, struct strata_error *err, int *rc)
{
	const int fmt = one_fmt(p);
	if (!strata_fmt_is_scalar(fmt) || !g_ctx.cfg.sq_gv || !g_ctx.cfg.sq_dec || g_ctx.cfg.dec_warps >= 0 ||
	    g_ctx.cfg.split || maxtok > gv::NTMAX)
		return 0;
	const bool q4 = fmt == STRATA_FMT_Q4;
	// q4 at 3 - 4 tokens: issue-bound here (4 dp2a per 8 weights and token),
	// so the ring kernel's MMAs are faster on large launches (Kimi-K2 layer,
	// 16 experts: 192 vs 215 us at 3 tokens), this kernel on small ones
	// (Qwen3-30B-A3B, 8 experts: 33 vs 36 us); experiments/kernels/README.md.
	if (q4 && maxtok >= 3 && (uint64_t)p->n_slots * 3 * p->hidden * p->inter > gv::Q4_RING_WEIGHTS)
		return 0;
	const FmtTab &f = p->tab[fmt];
	const uint32_t xrows = x_rows(p);
	// several rows per lane: 1 - 2 tokens, q4 or q3's integer loop, 16 warps
	// (sq_gvw: one token) and no L2 prefetch (its kernels are compiled for those)
	const bool xr = g_ctx.cfg.sq_gvx && maxtok <= 2 && g_ctx.cfg.sq_gv == 1 && (q4 || gv_q3i(maxtok)) &&
			(g_ctx.cfg.sq_gvw == gv::NW || maxtok > 1) && !g_ctx.cfg.sq_l2pf;
	gv::Args a[2];
	uint32_t grid[2], smem[2], mid;
	// Chained with the L2 prefetch: the gate|up launch prefetches this layer's
	// down matrices, the down launch the next layer's gate|up matrices.
	pf_list(p, true, true, &mid);
	for (uint32_t d = 0; d < 2; d++) {
		gv::Args &g = a[d];
		g.down = d;
		g.pdl = g_ctx.cfg.sq_pdl;
		g.l2pf = (uint32_t)g_ctx.cfg.sq_l2pf;
		g.spt = g_ctx.cfg.sq_gvs ? 2 : 1;
		g.xearly = g_ctx.cfg.sq_gvs == 2;
		g.pf0 = d ? mid : 0, g.pf1 = d ? p->npf : mid;
		g.cpr = f.pc[d] / 256 * (q4 ? gv::Q4::CPB : gv::Q3::CPB);
		const uint32_t nb = q4 ? gv::Q4::NB : gv::Q3::NB, nrows = d ? p->hidden : p->inter;
		// several rows per lane (sq_gvx) where the geometry allows, else one;
		// lanes per row (set) forced by sq_gvl, a digit per launch
		const uint32_t fl = (uint32_t)(d ? g_ctx.cfg.sq_gvl % 10 : g_ctx.cfg.sq_gvl / 10);
		g.rl = xr && gv_geom(g.cpr, nb, nrows, p->n_slots, nb, fl, g.lsh, g.nbat) ? nb : 1;
		if (g.rl == 1)
			gv_geom(g.cpr, nb, nrows, p->n_slots, 1, fl, g.lsh, g.nbat);
		grid[d] = gv_tasks(p, d, xrows, g);
		const uint64_t bytes = gv::Smem::END + (uint64_t)g.srows * f.pc[d] * (q4 || gv_q3i(maxtok) ? 20 : 16) / 8;
		if (g.srows > gv::SRMAX || bytes > gv::SMEM_MAX)
			return 0;
		g.xoff = gv::Smem::END;
		g.coff = gv::Smem::END + g.srows * f.pc[d] * 2;
		smem[d] = (uint32_t)bytes;
	}
	if (q4)
		*rc = maxtok == 1   ? gv_launch<STRATA_FMT_Q4, 1>(p, a, grid, smem, st, err)
		      : maxtok == 2 ? gv_launch<STRATA_FMT_Q4, 2>(p, a, grid, smem, st, err)
				    : gv_launch<STRATA_FMT_Q4, gv::NTMAX>(p, a, grid, smem, st, err);
	else
		*rc = maxtok == 1   ? gv_launch<STRATA_FMT_Q3, 1>(p, a, grid, smem, st, err)
		      : maxtok == 2 ? gv_launch<STRATA_FMT_Q3, 2>(p, a, grid, smem, st, err)
				    : gv_launch<STRATA_FMT_Q3, gv::NTMAX>(p, a, grid, smem, st, err);
	return 1;
}

// The tier row-streaming kernel (moe_dec_tr.cuh) of one launch: format FMT,
// decoder DEC (gv::Tier), W warps per CTA, lanes per row 1 << lsh at compile time
// where the launch's rows and chunks divide evenly, else at run time.
template <int FMT, int DEC, int W> GvKernel tr_pick(const gv::Args &g, uint32_t nrows)
{
	using P = gv::Tier<FMT, DEC>;
	const bool full = g.cpr % (1u << g.lsh) == 0 && nrows % (32u >> g.lsh) == 0;
	return full && g.lsh == 2 ? gv::gv_kernel<FMT, P, 1, 2, true, W>
	     : full && g.lsh == 1 ? gv::gv_kernel<FMT, P, 1, 1, true, W>
				  : gv::gv_kernel<FMT, P, 1, -1, false, W>;
}

// Its two launches (gate|up, down), each of W warps per CTA.
template <int FMT, int DEC, int W>
int tr_launch(MoeParams *p, const gv::Args (&a)[2], const uint32_t (&grid)[2], cudaStream_t st, struct strata_error *err)
{
	const uint32_t smem = DEC ? gv::SMEM_MAX : gv::TR_ZERO_AT + 256;
	const GvKernel k[2] = { tr_pick<FMT, DEC, W>(a[0], p->inter), tr_pick<FMT, DEC, W>(a[1], p->hidden) };
	return gv_pair(p, k, { W, W }, a, grid, { smem, smem }, smem, STRATA_GPU_LAUNCH_TIER_GEMV, st, err);
}

template <int FMT, int DEC>
int tr_launch_w(MoeParams *p, const gv::Args (&a)[2], const uint32_t (&grid)[2], uint32_t w, cudaStream_t st,
		struct strata_error *err)
{
	return w == 12 ? tr_launch<FMT, DEC, 12>(p, a, grid, st, err) : tr_launch<FMT, DEC, 16>(p, a, grid, st, err);
}

// Decode launches of one token per expert whose experts are all in one tier
// format, under dec_tr=1 (FMA decoder), 2 (table) or 3 (both), or auto (hot 1,
// warm and cold 2 for launches of at least STRATA_MOE_TR_AUTO_WEIGHTS), dec and
// split not forced: the tier row-streaming kernel, when each CTA's staged activations
// fit below its zero bytes.  Warps per CTA (16 or 12, the same for both
// launches) and lanes per row (1, 2 or 4: a lane's chunk must depend on
// lane & 3 alone) with the fewest issue slots of the busiest warp (its
// batches times the warps that share its SM) summed over the two launches,
// then the fewest lane-block slots per row, then more lanes and warps.
// 1 when it ran (*rc its result), 0 when another kernel should run instead.
int run_dec_tr(MoeParams *p, uint32_t maxtok, cudaStream_t st, struct strata_error *err, int *rc)
{
	const int fmt = one_fmt(p);
	int dec = g_ctx.cfg.dec_tr;
	if (!dec || fmt < STRATA_FMT_HOT || fmt > STRATA_FMT_COLD || g_ctx.cfg.dec_warps >= 0 || g_ctx.cfg.split ||
	    maxtok != 1)
		return 0;
	if (dec < 0) {
		// auto: each format's decoder that measured fastest, faster than the
		// ring kernel, at the Kimi-K2 shape (kernels.h)
		if ((uint64_t)p->n_slots * 3 * p->hidden * p->inter < STRATA_MOE_TR_AUTO_WEIGHTS)
			return 0;
		dec = fmt == STRATA_FMT_HOT ? 1 : 2;
	}
	const FmtTab &f = p->tab[fmt];
	const uint32_t xrows = x_rows(p);
	const uint32_t sms = (uint32_t)g_ctx.sms;
	// The geometry of launch d with w warps per CTA; its key.
	auto geom = [&](uint32_t d, uint32_t w, gv::Args &g) {
		const uint32_t nrows = d ? p->hidden : p->inter, cpr = f.pc[d] / 256;
		uint64_t best = UINT64_MAX;
		for (int l = 2; l >= 0; l--) {
			const uint32_t bt = (cpr + (1u << l) - 1) >> l;
			const uint32_t ntask = p->n_slots * ((nrows + (32u >> l) - 1) / (32u >> l));
			const uint32_t tpc = (ntask + sms - 1) / sms;
			const uint64_t key = (uint64_t)((tpc + w - 1) / w * bt * w) << 32 | (bt << l);
			if (key < best)
				best = key, g.lsh = (uint32_t)l, g.nbat = bt;
		}
		return best;
	};
	gv::Args a[2];
	uint32_t w = 16;
	{
		gv::Args t[2];
		uint64_t k16 = (geom(0, 16, t[0]) >> 32) * 2 + (geom(1, 16, t[1]) >> 32);
		uint64_t k12 = (geom(0, 12, t[0]) >> 32) * 2 + (geom(1, 12, t[1]) >> 32);
		w = k12 < k16 ? 12 : 16;
	}
	uint32_t grid[2], mid;
	pf_list(p, true, true, &mid);
	for (uint32_t d = 0; d < 2; d++) {
		gv::Args &g = a[d];
		g = gv::Args{};
		g.down = d;
		g.pdl = g_ctx.cfg.sq_pdl;
		g.pf0 = d ? mid : 0, g.pf1 = d ? p->npf : mid;
		g.cpr = f.pc[d] / 256;
		geom(d, w, g);
		grid[d] = gv_tasks(p, d, xrows, g);
		const uint64_t bytes = gv::Smem::END + (uint64_t)g.srows * f.pc[d] * 2;
		if (g.srows > gv::SRMAX || bytes > gv::TR_ZERO_AT)
			return 0;
		g.xoff = g.coff = gv::Smem::END;
	}
	auto go = [&](auto FC) {
		constexpr int FMT = decltype(FC)::value;
		return dec == 1 ? tr_launch_w<FMT, 0>(p, a, grid, w, st, err)
		     : dec == 2 ? tr_launch_w<FMT, 1>(p, a, grid, w, st, err)
				: tr_launch_w<FMT, 2>(p, a, grid, w, st, err);
	};
	*rc = fmt == STRATA_FMT_HOT    ? go(std::integral_constant<int, STRATA_FMT_HOT>())
	      : fmt == STRATA_FMT_WARM ? go(std::integral_constant<int, STRATA_FMT_WARM>())
				       : go(std::integral_constant<int, STRATA_FMT_COLD>());
	return 1;
}

typedef void (*SmallKernel)(const MoeParams, const sm::Args);
// The small-layer kernel of format FMT with policy P, with or without masks.
template <int FMT, class P> SmallKernel small_pick(bool full)
{
	return full ? sm::small_kernel<FMT, P, true> : sm::small_kernel<FMT, P, false>;
}

// The small-layer kernel's geometry for p's layer, all of format fmt, under
// small=mode (2: rows at a skewed pitch where they fit): the lanes per row
// of each phase with the fewest items of the busiest warp, rows and
// batches dividing evenly where any does, then the fewest bytes; the
// shared-memory layout, with tab (a tier format) around the codebook table
// of the table decoder (gv::TR_TAB_AT .. gv::SMEM_MAX).  False when it does
// not fit; *full: every phase divides evenly; *grid, *smem: the launch's
// CTAs and shared bytes.
bool small_geom(MoeParams *p, int fmt, int mode, bool tab, sm::Args &a, bool *full_, uint32_t *grid_, uint64_t *smem)
{
	const bool tier = fmt >= STRATA_FMT_HOT && fmt <= STRATA_FMT_COLD, q4 = fmt == STRATA_FMT_Q4, q3 = fmt == STRATA_FMT_Q3;
	const FmtTab &f = p->tab[fmt];
	const uint32_t nb = q4 ? gv::Q4::NB : q3 ? gv::Q3i::NB : 1, cpb = q4 ? gv::Q4::CPB : q3 ? gv::Q3i::CPB : 1;
	const uint32_t maxl = tier ? 2 : 5, sbytes = tier ? 16 : 20, sms = (uint32_t)g_ctx.sms, xrows = x_rows(p);
	auto a16 = [](uint64_t n) { return (n + 15) / 16 * 16; };
	a = sm::Args{};
	bool full = true;
	uint32_t grid = 0;
	uint64_t act = gv::Smem::END;
	for (uint32_t d = 0; d < 2; d++) {
		gv::Args &g = a.g[d];
		g.down = d;
		g.cpr = f.pc[d] / 256 * cpb;
		const uint32_t nrows = d ? p->hidden : p->inter, nmat = d ? 1 : 2;
		uint64_t best = UINT64_MAX;
		bool bfull = false;
		// small 1 or 2: lanes per row forced by sq_gvl (a digit per phase) where the format allows
		const uint32_t fl_ = mode > 0 ? (uint32_t)(d ? g_ctx.cfg.sq_gvl % 10 : g_ctx.cfg.sq_gvl / 10) : 0;
		for (int l = (int)maxl; l >= 0; l--) {
			if (fl_ && fl_ <= maxl && (uint32_t)l != fl_)
				continue;
			const uint32_t rw = 32u >> l, nbat = (((g.cpr + (1u << l) - 1) >> l) + nb - 1) / nb;
			const bool fl = g.cpr % (nb << l) == 0 && nrows % rw == 0;
			const uint32_t ntask = p->n_slots * ((nrows + rw - 1) / rw), tpc = (ntask + sms - 1) / sms;
			const uint64_t items = (uint64_t)tpc * nmat * nbat;
			const uint64_t bytes = (uint64_t)tpc * nmat * (a16((uint64_t)rw * f.rowc[d]) + a16((uint64_t)rw * f.rows_[d]) + 32);
			const uint64_t key = (uint64_t)!fl << 63 | ((items + sm::W - 1) / sm::W) << 32 | (bytes < UINT32_MAX ? bytes : UINT32_MAX);
			if (key < best)
				best = key, g.lsh = (uint32_t)l, g.nbat = nbat, bfull = fl;
		}
		full = full && bfull;
		const uint32_t gd = gv_tasks(p, d, xrows, g);
		grid = gd > grid ? gd : grid;
		if (g.srows > gv::SRMAX)
			return false;
		g.xoff = gv::Smem::END;
		g.coff = gv::Smem::END + g.srows * f.pc[d] * 2;
		const uint64_t ab = gv::Smem::END + (uint64_t)g.srows * f.pc[d] * sbytes / 8;
		act = ab > act ? ab : act;
		a.sr[d] = (uint32_t)a16((uint64_t)(32u >> g.lsh) * f.rows_[d]) + 16;
	}
	uint64_t o0 = act;
	if (tier) {
		// the tier policies' zero bytes (gv::TR_ZERO_AT) lie after the staged rows
		if (o0 > gv::TR_ZERO_AT)
			return false;
		o0 = gv::TR_ZERO_AT + 256;
	}
	// The shared-memory layout: the tasks' rows (small=2: at a pitch whose
	// remainder mod 128 is the bytes one load instruction of a row's lanes
	// reads, at least 16, so the rows of a warp start on different banks; a
	// row per copy; rowc apart where that does not fit), partial sums, mbarriers.
	const uint32_t rw0 = 32u >> a.g[0].lsh, rw1 = 32u >> a.g[1].lsh;
	// the partial sums' and the mbarriers' bytes
	const uint64_t accb = a16(4ull * (2 * a.g[0].tpc * rw0 + a.g[1].tpc * rw1)), mbb = 8ull * (2 * a.g[0].tpc + a.g[1].tpc);
	uint64_t o = 0;
	for (int pitched = mode == 2; pitched >= 0; pitched--) {
		for (uint32_t d = 0; d < 2; d++) {
			const uint32_t lsh = a.g[d].lsh, acc = q4 || q3 || fmt == STRATA_FMT_WARM ? 16 : fmt == STRATA_FMT_HOT ? 8 : 4;
			const uint32_t want = (acc << lsh) < 16 ? 16 : (acc << lsh) % 128;
			uint32_t pt = (uint32_t)a16(f.rowc[d]) + 16;
			pt += want ? (want + 128 - pt % 128) % 128 : 0;
			a.pitch[d] = pitched ? pt : 0;
			a.cr[d] = pitched ? (32u >> lsh) * pt : (uint32_t)a16((uint64_t)(32u >> lsh) * f.rowc[d]) + 16;
		}
		o = a16(o0);
		a.wo[0] = (uint32_t)o, o += (uint64_t)a.g[0].tpc * 2 * (a.cr[0] + a.sr[0]);
		a.wo[1] = (uint32_t)o, o += (uint64_t)a.g[1].tpc * (a.cr[1] + a.sr[1]);
		a.acc = (uint32_t)o, o += accb;
		a.mbar = (uint32_t)o, o += mbb;
		if (o <= sm::SMEM_MAX)
			break;
	}
	if (tab) {
		// each region (gate|up rows, down rows, partial sums and mbarriers)
		// below the zero bytes where it fits, else after the table
		const uint64_t sz[3] = { (uint64_t)a.g[0].tpc * 2 * (a.cr[0] + a.sr[0]), (uint64_t)a.g[1].tpc * (a.cr[1] + a.sr[1]),
					 accb + mbb };
		uint32_t *at[3] = { &a.wo[0], &a.wo[1], &a.acc };
		uint64_t lo = a16(act), hi = gv::SMEM_MAX;
		for (int i = 0; i < 3; i++) {
			uint64_t &e = lo + sz[i] <= gv::TR_ZERO_AT ? lo : hi;
			*at[i] = (uint32_t)e, e = a16(e + sz[i]);
		}
		a.mbar = a.acc + (uint32_t)accb;
		o = hi;
	}
	if (o > sm::SMEM_MAX || (tab && (!tier || a.pitch[0] || a.pitch[1])))
		return false;
	*full_ = full, *grid_ = grid, *smem = o;
	return true;
}

// small_ts=1: the next n slots of the ring of phase timestamps for a
// small-layer launch of grid CTAs (over a stack, or the persistent stack
// kernel's: a slot a layer) in a.ts, a.ts_i (A: sm::Args, ps::Args); none
// (a.ts null) when off or the launch has more CTAs than a slot records.
template <class A> int small_ts(uint32_t grid, uint32_t n, A &a, struct strata_error *err)
{
	a.ts = nullptr, a.ts_i = 0;
	if (!g_ctx.cfg.small_ts || grid > STRATA_SMALL_TS_CTAS)
		return STRATA_OK;
	const size_t per = (size_t)STRATA_SMALL_TS_CTAS * STRATA_SMALL_TS_WORDS;
	if (!g_ctx.sm_ts && cudaMalloc(&g_ctx.sm_ts, per * STRATA_SMALL_TS_LAUNCHES * sizeof(*g_ctx.sm_ts)) != cudaSuccess) {
		g_ctx.sm_ts = nullptr;
		return STRATA_ERR(err, STRATA_EGPU, "small_ts: no device memory for the timestamps");
	}
	const uint32_t i = g_ctx.sm_ts_n % STRATA_SMALL_TS_LAUNCHES;
	for (uint32_t l = 0; l < n; l++)
		g_ctx.sm_ts_grid[(i + l) % STRATA_SMALL_TS_LAUNCHES] = grid;
	g_ctx.sm_ts_n += n;
	a.ts = g_ctx.sm_ts, a.ts_i = i;
	return STRATA_OK;
}

// Launches of one token per expert, all in one of q4, q3 (its integer loop),
// hot, warm, cold, under the kernel configuration small=1 (auto: the formats
// of STRATA_MOE_SMALL_AUTO_FMTS in launches of at most
// STRATA_MOE_SMALL_AUTO_WEIGHTS weights, the other kernel keys at their
// defaults), dec and split not forced: the one-launch kernel
// (moe_dec_small.cuh), when each CTA's share of the weights, its staged
// activations and its partial sums fit in shared memory.  The geometry:
// small_geom.  1 when it ran (*rc its result), 0 when another kernel should
// run instead.
int run_dec_small(MoeParams *p, uint32_t maxtok, cudaStream_t st, struct strata_error *err, int *rc)
{
	const int mode = g_ctx.cfg.small, fmt = one_fmt(p);
	const bool tier = fmt >= STRATA_FMT_HOT && fmt <= STRATA_FMT_COLD, q4 = fmt == STRATA_FMT_Q4;
	const bool q3 = fmt == STRATA_FMT_Q3 && gv_q3i(1);
	if (!mode || maxtok != 1 || g_ctx.cfg.dec_warps >= 0 || g_ctx.cfg.split || !(tier || q4 || q3))
		return 0;
	if (mode < 0) {
		const struct strata_moe_config d = STRATA_MOE_CONFIG_DEFAULT;
		if (!(STRATA_MOE_SMALL_AUTO_FMTS >> fmt & 1) ||
		    (uint64_t)p->n_slots * 3 * p->hidden * p->inter > STRATA_MOE_SMALL_AUTO_WEIGHTS ||
		    g_ctx.cfg.dec_tr != d.dec_tr || g_ctx.cfg.sq_gv != d.sq_gv || g_ctx.cfg.sq_dec != d.sq_dec ||
		    g_ctx.cfg.sq_q3i != d.sq_q3i)
			return 0;
	}
	sm::Args a = {};
	bool full;
	uint32_t grid;
	uint64_t o;
	if (!small_geom(p, fmt, mode, false, a, &full, &grid, &o))
		return 0;
	const SmallKernel k = fmt == STRATA_FMT_Q4     ? small_pick<STRATA_FMT_Q4, gv::Q4>(full)
			      : fmt == STRATA_FMT_Q3   ? small_pick<STRATA_FMT_Q3, gv::Q3i>(full)
			      : fmt == STRATA_FMT_HOT  ? small_pick<STRATA_FMT_HOT, gv::Tier<STRATA_FMT_HOT, 0>>(full)
			      : fmt == STRATA_FMT_WARM ? small_pick<STRATA_FMT_WARM, gv::Tier<STRATA_FMT_WARM, 0>>(full)
						       : small_pick<STRATA_FMT_COLD, gv::Tier<STRATA_FMT_COLD, 0>>(full);
	if ((*rc = gv_smem_attr((const void *)k, sm::SMEM_MAX, err)))
		return 1;
	a.par = mode != 3;
	if ((*rc = small_ts(grid, 1, a, err)))
		return 1;
	uint32_t mid;
	pf_list(p, false, false, &mid);
	if (!(*rc = launch_k(k, grid, 32 * sm::W, (uint32_t)o, st, g_ctx.chain, err, *p, a)))
		g_ctx.launches[STRATA_GPU_LAUNCH_SMALL]++;
	return 1;
}

// The h scratch (g_ctx.h) grown to at least hfl floats.
int h_scratch(size_t hfl, cudaStream_t st, struct strata_error *err)
{
	if (hfl <= g_ctx.h_cap)
		return STRATA_OK;
	if (g_ctx.h) {
		CU_TRY(err, cudaStreamSynchronize(st));
		cudaFree(g_ctx.h);
		g_ctx.h = nullptr, g_ctx.h_cap = 0;
	}
	size_t cap = hfl < (1u << 20) ? (1u << 20) : hfl;
	CU_TRY(err, cudaMalloc(&g_ctx.h, cap * sizeof(float)));
	g_ctx.h_cap = cap;
	return STRATA_OK;
}

// Run fn with the stack's chaining off (g_ctx.chain restored after).
template <class F> int unchained(F &&fn)
{
	const int chain = g_ctx.chain;
	g_ctx.chain = 0;
	const int r = fn();
	g_ctx.chain = chain;
	return r;
}

// The slots' h rows (Slot::h_off, 128-byte aligned): their floats in all.
uint32_t h_slots(MoeParams *p)
{
	uint32_t hfl = 0;
	for (uint32_t s = 0; s < p->n_slots; s++) {
		p->slot[s].h_off = hfl;
		hfl += (p->slot[s].ntok * p->inter + 31) / 32 * 32;
	}
	return hfl;
}

int run_launch(MoeParams *p, uint32_t maxtok, cudaStream_t st, struct strata_error *err)
{
	const uint32_t hfl = h_slots(p);
	if (int r = h_scratch(hfl, st, err))
		return r;
	p->h = g_ctx.h;
	p->sync = g_ctx.sync;
	p->chain = 0, p->npf = 0;
	// In a stack, h is poisoned before its first launch only (a memset
	// between the layers would serialise them).
	if (g_ctx.cfg.poison && (!g_ctx.chain || g_ctx.first))
		CU_TRY(err, cudaMemsetAsync(g_ctx.h, 0xff, (size_t)hfl * sizeof(float), st));
	g_ctx.first = 0;
	int rc = 0;
	if (maxtok <= 8 && run_dec_bf16(p, hfl, st, err, &rc))
		return rc;
	if (run_dec_small(p, maxtok, st, err, &rc))
		return rc;
	// In a stack the row-streaming q4/q3 launches are plain, not chained: a
	// gate|up launch that is not chained loads x ahead of its first weights
	// (sq_gvs=2), and plain stacks of them were faster in every same-run
	// comparison (us per layer, chained vs plain: Qwen3-30B-A3B q4 14.16 vs
	// 13.91, q3 17.06 vs 16.51; Kimi-K2 q4 81.4 vs 81.0, q3 77.8 vs 76.2;
	// experiments/kernels/README.md).
	if (unchained([&] { return run_dec_gv(p, maxtok, st, err, &rc); }))
		return rc;
	if (run_dec_tr(p, maxtok, st, err, &rc))
		return rc;
	if (maxtok <= 8 && run_dec_sq(p, hfl, st, err, &rc))
		return rc;
	if (maxtok <= 2 * dec::TN && run_dec(p, maxtok, hfl, st, err, &rc))
		return rc;
	// 8 warps on 64-row stages; token tiles of 8, 16 or (prefill) 32 tokens.
	// (16 warps on 32-row stages, <1, 2, 16> and <2, 2, 16>, compile to 96/128
	// registers and measured 2-7% slower on the H200: the decode loop is bound by
	// shared-memory wavefronts, not by latency; experiments/kernels/README.md.
	// The earlier 64-token tile <8, 2, 8> re-read 64 tokens of activations per 32
	// rows without prefetch.)
	// Warps per CTA: 16 for 8-token tiles (more loads in flight for bf16), 8 for
	// 16-token tiles (16 warps would cap them at 128 registers and their
	// partial sums would not fit a stage).
	if (maxtok <= 8)
		return launch<1, 4, 16, true>(p, st, 3, err);
	if (maxtok <= 16)
		return launch<2, 4, 8, true>(p, st, 1, err);
	return launch<4, 4, 8, true>(p, st, 2, err);
}

bool pf_fmt(int fmt) { return fmt == STRATA_FMT_BF16 || (fmt >= STRATA_FMT_HOT && fmt <= STRATA_FMT_COLD); }
// Experts with at most this many tokens (and >= the prefill threshold) take the
// 64 x 64 prefill tile (pf_tile 0): one token tile, and 1.1x (tier) - 1.4x
// (bf16) faster than 128 x 128 at 16 - 64 tokens; at 96 (two token tiles)
// 128 x 128 is 1.2x (bf16) - 1.8x (hot) faster.
constexpr uint32_t PF_SMALL_MAX = 64;

// gate|up then down launches of a prefill kernel pair (gu, dn: grid one CTA
// per tile of BM rows (gate|up: BM/2 rows of gate and of up) x BN tokens)
// for the slots in P; *attr_set (bit) records the shared-memory attribute.
typedef void (*PfKernel)(pf::PParams);
// persist: a grid of min(tiles, SMs) CTAs (the kernel runs every gridDim.x-th
// tile from its own).
int pf_launch_pair(pf::PParams *P, cudaStream_t st, struct strata_error *err, PfKernel gu, PfKernel dn, uint32_t bm,
		   uint32_t bn, uint32_t nthr, uint32_t smem, uint32_t *attr_set, uint32_t bit, bool persist = false)
{
	if (!(*attr_set & bit)) {
		CU_TRY(err, cudaFuncSetAttribute(gu, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
		CU_TRY(err, cudaFuncSetAttribute(dn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
		*attr_set |= bit;
	}
	const uint32_t nrt_gu = (P->inter + bm / 2 - 1) / (bm / 2), nrt_dn = (P->hidden + bm - 1) / bm;
	for (int down = 0; down < 2; down++) {
		uint32_t tiles = 0;
		for (uint32_t q = 0; q < P->n_slots; q++) {
			P->slot[q].tile0 = tiles;
			tiles += (down ? nrt_dn : nrt_gu) * ((P->slot[q].ntok + bn - 1) / bn);
		}
		P->n_tiles = tiles;
		const uint32_t grid = persist && tiles > (uint32_t)g_ctx.sms ? (uint32_t)g_ctx.sms : tiles;
		(down ? dn : gu)<<<grid, nthr, smem, st>>>(*P);
		cudaError_t ce = cudaGetLastError();
		if (ce != cudaSuccess)
			return STRATA_ERR(err, STRATA_EGPU, "strata_moe_layer_gpu: prefill launch: %s",
					  cudaGetErrorString(ce));
	}
	return STRATA_OK;
}

// The mma.sync prefill kernel (moe_prefill.cuh), tile C.
template <class C> int pf_launch(pf::PParams *P, cudaStream_t st, struct strata_error *err)
{
	constexpr uint32_t bit = C::BN == 256 ? 4 : C::BN == 64 ? 8 : C::NW == 16 ? 2 : 1;
	return pf_launch_pair(P, st, err, pf::pf_gemm<false, C>, pf::pf_gemm<true, C>, C::BM, C::BN, C::NTHR, C::SMEM,
			      &g_ctx.pf_attr, bit);
}

// The sm_90a prefill kernel KIND (pf90::Kind).
template <int KIND> int pf90_launch(pf::PParams *P, cudaStream_t st, struct strata_error *err)
{
	using K = pf90::Kind<KIND>;
	int rc = pf_launch_pair(P, st, err, pf90::gemm<false, KIND>, pf90::gemm<true, KIND>, K::BM, K::BN, K::NTHR,
				K::SMEM, &g_ctx.pf90_attr, 1u << KIND, K::PERSIST);
	if (!rc) {
		g_ctx.launches[STRATA_GPU_LAUNCH_PREFILL_SM90] += 2;
		if (K::PROD)
			g_ctx.launches[STRATA_GPU_LAUNCH_PREFILL_SM90P] += 2;
	}
	return rc;
}

// bf16 experts with at least this many tokens take the sm_90a kernel under
// prefill=auto: at the Kimi shape 1.10x (192 tokens) and 1.11x (256) cuBLAS
// BF16 against 0.66 / 0.73 for the mma.sync kernel, which is faster at 128
// and 64 tokens (1.13 / 1.40 against 0.92 / 0.90).  Tier experts with at
// least prefill_tiles tokens (the kernel configuration, default 32) take the
// BF16-tile kernel PF90_TIER_AUTO under auto, the others the mma.sync kernel:
// at Kimi, hot / warm / cold, sm90pc measured 0.72-0.74 of cuBLAS BF16 at 32
// and 48 tokens, 0.71-0.72 at 64, 0.75-0.76 at 128, 0.88-0.89 at 192 and
// 0.88-0.90 at 256 against the mma.sync kernel's 0.59-0.62, 0.60-0.63,
// 0.59-0.63, 0.63-0.64, 0.40-0.41, 0.41-0.43
// (experiments/kernels/README.md, "Hopper prefill: BF16 tiles by default");
// the same tile as fp16 tiles (sm90ph) measured 0.83-0.85 at 256 tokens
// against sm90pc's 0.88-0.89 in the same run ("Hopper prefill: fp16 tiles").
// Auto takes sm90pp2 (sm90pc persistent, two steps per producer hand-over):
// hot / warm / cold 1.008 / 1.000 / 1.011 at 256 tokens, 0.82 / 0.81 / 0.82
// at 128, 0.76 at 32 against sm90pc's 0.889 / 0.883 / 0.901, 0.75-0.76 and
// 0.72-0.74 and sm90pp's 0.96-0.98, 0.79-0.81, 0.75-0.76 in the same call
// ("Hopper prefill: persistent BF16-tile kernel").
constexpr uint32_t PF90_AUTO_MIN = 192;
constexpr int PF90_TIER_AUTO = pf90::K_TIER_PP2;

// Launch group of a prefill expert (run_prefill): 0 the 64 x 256 tile, 1 and
// 2 128 x 128 with 8 / 16 warps, 3 64 x 64, 4 + pf90 kind the sm_90a kernel
// (4 bf16, 5 tier, 6 tier warp-specialized, 7 / 8 / 9 / 10 tier as BF16 tiles
// with two / one / three producer warpgroups / two and the activations
// staged by the MMA warpgroups: prefill=sm90p / sm90p1 / sm90p3 / sm90pc, 11
// sm90pc's tile as fp16 tiles: prefill=sm90ph, 12 / 13 sm90pc persistent
// with one / two steps per producer hand-over: prefill=sm90pp / sm90pp2;
// bf16 experts as sm90).
constexpr int PF_GROUPS = 14;
int pf_group(int fmt, uint32_t nt)
{
	const int p = g_ctx.cfg.pf_path;
	const bool tier = fmt != STRATA_FMT_BF16;
	if (g_ctx.pf90 && p == 0) {
		if (!tier && nt >= PF90_AUTO_MIN)
			return 4 + pf90::K_BF16;
		if (tier && nt >= g_ctx.cfg.pf_tiles_min)
			return 4 + PF90_TIER_AUTO;
	}
	if (g_ctx.pf90 && (p == 1 || p >= 3))
		return 4 + (!tier ? pf90::K_BF16
			    : p == 3 ? pf90::K_TIER_WS
			    : p == 4 ? pf90::K_TIER_P
			    : p == 5 ? pf90::K_TIER_P1
			    : p == 6 ? pf90::K_TIER_P3
			    : p == 7 ? pf90::K_TIER_PC
			    : p == 8 ? pf90::K_TIER_PH
			    : p == 9 ? pf90::K_TIER_PP
			    : p == 10 ? pf90::K_TIER_PP2
				      : pf90::K_TIER);
	return nt >= 192 ? 0 : nt <= PF_SMALL_MAX ? 3 : tier ? 2 : 1;
}

// The tiled prefill path for the experts marked in big[] (moe_prefill.cuh):
// assignments of those experts in `order` (sorted by expert, count[] the
// prefix sums), tables of their formats in tab.
int run_prefill(const struct strata_moe_call *c, const uint32_t *count, const uint32_t *order, const bool *big,
		const FmtTab *tab, cudaStream_t st, struct strata_error *err)
{
	using namespace pf;
	uint32_t nb = 0;
	for (uint32_t e = 0; e < c->n_experts; e++)
		if (big[e])
			nb += count[e + 1] - count[e];
	if (!nb)
		return STRATA_OK;
	const uint32_t ldx = (c->hidden + 255) / 256 * 256, ldh = (c->inter + 255) / 256 * 256;
	const size_t nx = (size_t)nb * ldx, nh = (size_t)nb * ldh;
	// h exponents: one byte per assignment and 32-column segment (nh / 32 bytes).
	if (nb > g_ctx.pf_cap_a || nx > g_ctx.pf_cap_x || nh > g_ctx.pf_cap_h) {
		if (g_ctx.pf_xs) {
			CU_TRY(err, cudaStreamSynchronize(st));
			cudaFree(g_ctx.pf_xs), cudaFree(g_ctx.pf_hs), cudaFree(g_ctx.pf_tok), cudaFree(g_ctx.pf_w);
			cudaFree(g_ctx.pf_xsc), cudaFree(g_ctx.pf_hexp), cudaFree(g_ctx.pf_hbig);
			g_ctx.pf_xs = g_ctx.pf_hs = nullptr, g_ctx.pf_tok = nullptr, g_ctx.pf_w = g_ctx.pf_xsc = nullptr;
			g_ctx.pf_hexp = g_ctx.pf_hbig = nullptr;
			g_ctx.pf_cap_a = g_ctx.pf_cap_x = g_ctx.pf_cap_h = 0;
		}
		CU_TRY(err, cudaMalloc(&g_ctx.pf_xs, nx * 2));
		CU_TRY(err, cudaMalloc(&g_ctx.pf_hs, nh * 2));
		CU_TRY(err, cudaMalloc(&g_ctx.pf_tok, (size_t)nb * 4));
		CU_TRY(err, cudaMalloc(&g_ctx.pf_w, (size_t)nb * 4));
		CU_TRY(err, cudaMalloc(&g_ctx.pf_xsc, (size_t)nb * 4));
		CU_TRY(err, cudaMalloc(&g_ctx.pf_hexp, nh / SEG));
		CU_TRY(err, cudaMalloc(&g_ctx.pf_hbig, nb));
		g_ctx.pf_cap_a = nb, g_ctx.pf_cap_x = nx, g_ctx.pf_cap_h = nh;
	}
	if (g_ctx.cfg.poison) {
		CU_TRY(err, cudaMemsetAsync(g_ctx.pf_xs, 0xff, nx * 2, st));
		CU_TRY(err, cudaMemsetAsync(g_ctx.pf_hs, 0xff, nh * 2, st));
		CU_TRY(err, cudaMemsetAsync(g_ctx.pf_xsc, 0xff, (size_t)nb * 4, st));
		CU_TRY(err, cudaMemsetAsync(g_ctx.pf_hexp, 0xff, nh / SEG, st));
		CU_TRY(err, cudaMemsetAsync(g_ctx.pf_hbig, 0xff, nb, st));
	}
	PrepParams *pp = (PrepParams *)calloc(1, sizeof(PrepParams));
	PParams *P = (PParams *)calloc(1, sizeof(PParams));
	int rc = STRATA_OK;
	if (!pp || !P) {
		free(pp), free(P);
		return STRATA_ERR(err, STRATA_ENOMEM, "strata_moe_layer_gpu: out of memory");
	}
	// Gather: activation rows, token and router weight of every big assignment.
	pp->x = c->x, pp->xs = g_ctx.pf_xs, pp->hs = g_ctx.pf_hs, pp->tok_d = g_ctx.pf_tok, pp->w_d = g_ctx.pf_w;
	pp->xsc = g_ctx.pf_xsc, pp->hexp = g_ctx.pf_hexp, pp->hbig = g_ctx.pf_hbig;
	pp->hidden = c->hidden, pp->inter = c->inter, pp->ldx = ldx, pp->ldh = ldh, pp->nseg = ldh / SEG;
	pp->vec = c->hidden % 4 == 0 && ((uintptr_t)c->x & 15) == 0;
	uint32_t a = 0, n = 0;
	auto flush = [&]() -> int {
		if (!n)
			return STRATA_OK;
		pp->a0 = a - n;
		pf_prep<<<n, 256, 0, st>>>(*pp);
		n = 0;
		CU_TRY(err, cudaGetLastError());
		return STRATA_OK;
	};
	for (uint32_t e = 0; e < c->n_experts && !rc; e++) {
		if (!big[e])
			continue;
		for (uint32_t q = count[e]; q < count[e + 1] && !rc; q++) {
			uint32_t src = order[q];
			pp->tok[n] = c->assign_token[src];
			pp->w[n] = c->assign_weight[src];
			// fp16 rows for tier experts whose MMAs take fp16 (not the
			// BF16 tiles of sm90p / sm90p1 / sm90p3 / sm90pc / sm90pp*: bf16
			// rows, no range guard)
			const int grp = pf_group(c->fmts[e], count[e + 1] - count[e]);
			pp->f16[n] = c->fmts[e] != STRATA_FMT_BF16 &&
				     (grp < 4 + pf90::K_TIER_P || grp == 4 + pf90::K_TIER_PH);
			n++, a++;
			if (n == PREP_MAX)
				rc = flush();
		}
	}
	if (!rc)
		rc = flush();
	// Grouped GEMMs: gate|up then down, up to MAX_SLOTS experts per launch;
	// experts with >= 192 tokens (pf_tile 0) take the 64 x 256 tile (decode
	// amortised over 256 tokens), up to PF_SMALL_MAX tokens 64 x 64, the others
	// 128 x 128.
	P->xs = g_ctx.pf_xs, P->hs = g_ctx.pf_hs, P->tok = g_ctx.pf_tok, P->w = g_ctx.pf_w, P->y = c->y;
	P->xsc = g_ctx.pf_xsc, P->hexp = g_ctx.pf_hexp, P->hbig = g_ctx.pf_hbig;
	P->hidden = c->hidden, P->inter = c->inter, P->ldx = ldx, P->ldh = ldh, P->nseg = ldh / SEG;
	memcpy(P->tab, tab, sizeof(P->tab));
	// Four groups, one launch each (per MAX_SLOTS experts): 64 x 256 tiles, then
	// 128 x 128 tiles with 8 warps, then with 16 warps (warp tile 32 x 32), then
	// 64 x 64.  By default the 128 x 128 tier experts take 16 warps (more warps
	// share their decode: 0.60 vs 0.47 of cuBLAS at Kimi 64 tokens), bf16 ones 8
	// (0.74 vs 0.66).
	for (int grp = 0; grp < PF_GROUPS && !rc; grp++) {
		a = 0;
		for (uint32_t e = 0; e < c->n_experts && !rc;) {
			uint32_t ns = 0;
			for (; e < c->n_experts && ns < MAX_SLOTS; e++) {
				if (!big[e])
					continue;
				uint32_t nt = count[e + 1] - count[e];
				if (pf_group(c->fmts[e], nt) == grp) {
					PSlot &s = P->slot[ns++];
					s.ext = (const uint8_t *)c->extents[e];
					s.fmt = c->fmts[e];
					s.a0 = a, s.ntok = nt;
				}
				a += nt;
			}
			if (!ns)
				break;
			P->n_slots = ns;
			rc = grp == 4 ? pf90_launch<pf90::K_BF16>(P, st, err)
			   : grp == 5 ? pf90_launch<pf90::K_TIER>(P, st, err)
			   : grp == 6 ? pf90_launch<pf90::K_TIER_WS>(P, st, err)
			   : grp == 7 ? pf90_launch<pf90::K_TIER_P>(P, st, err)
			   : grp == 8 ? pf90_launch<pf90::K_TIER_P1>(P, st, err)
			   : grp == 9 ? pf90_launch<pf90::K_TIER_P3>(P, st, err)
			   : grp == 10 ? pf90_launch<pf90::K_TIER_PC>(P, st, err)
			   : grp == 11 ? pf90_launch<pf90::K_TIER_PH>(P, st, err)
			   : grp == 12 ? pf90_launch<pf90::K_TIER_PP>(P, st, err)
			   : grp == 13 ? pf90_launch<pf90::K_TIER_PP2>(P, st, err)
			   : grp == 0 ? pf_launch<CfgWide>(P, st, err)
			   : grp == 3 ? pf_launch<CfgSmall>(P, st, err)
			   : grp == 2 ? pf_launch<Cfg128w16>(P, st, err)
				      : pf_launch<Cfg128>(P, st, err);
		}
	}
	free(pp), free(P);
	return rc;
}

int moe_layer_fused(const struct strata_moe_call *c, struct strata_error *err)
{
	if (!c->n_assign || !c->n_tokens)
		return STRATA_OK;
	if (!c->x || !c->y || !c->extents || !c->fmts || !c->assign_expert || !c->assign_token || !c->assign_weight)
		return STRATA_ERR(err, STRATA_EINVAL, "strata_moe_layer_gpu: NULL pointer in the call");
	if (!c->hidden || !c->inter)
		return STRATA_ERR(err, STRATA_EINVAL, "strata_moe_layer_gpu: empty shape");
	int rc = ctx_init(err);
	if (rc)
		return rc;
	cudaStream_t st = (cudaStream_t)c->stream;
	// Per-format tables for the formats present (64 rows per stage in every variant).
	uint32_t maxtok_all = 0;
	uint32_t *count = (uint32_t *)calloc(c->n_experts + 1, sizeof(uint32_t));
	uint32_t *order = (uint32_t *)malloc((size_t)c->n_assign * sizeof(uint32_t));
	MoeParams *p = (MoeParams *)calloc(1, sizeof(MoeParams));
	bool *big = nullptr;
	uint32_t *eord = nullptr, pf_min;
	if (!count || !order || !p) {
		free(count), free(order), free(p);
		return STRATA_ERR(err, STRATA_ENOMEM, "strata_moe_layer_gpu: out of memory");
	}
	for (uint32_t a = 0; a < c->n_assign; a++) {
		if (c->assign_expert[a] >= c->n_experts || c->assign_token[a] >= c->n_tokens) {
			rc = STRATA_ERR(err, STRATA_EINVAL,
					"strata_moe_layer_gpu: assignment %u (expert %u, token %u) out of range", a,
					c->assign_expert[a], c->assign_token[a]);
			goto out;
		}
		count[c->assign_expert[a] + 1]++;
	}
	for (uint32_t e = 0; e < c->n_experts; e++) {
		if (count[e + 1] > maxtok_all)
			maxtok_all = count[e + 1];
		if (count[e + 1] && ((uintptr_t)c->extents[e] & 15)) {
			rc = STRATA_ERR(err, STRATA_EINVAL, "strata_moe_layer_gpu: extent %u not 16-byte aligned", e);
			goto out;
		}
		count[e + 1] += count[e];
	}
	{
		// Counting sort of the assignments by expert (stable).
		uint32_t *pos = (uint32_t *)malloc((c->n_experts + 1) * sizeof(uint32_t));
		if (!pos) {
			rc = STRATA_ERR(err, STRATA_ENOMEM, "strata_moe_layer_gpu: out of memory");
			goto out;
		}
		memcpy(pos, count, (c->n_experts + 1) * sizeof(uint32_t));
		for (uint32_t a = 0; a < c->n_assign; a++)
			order[pos[c->assign_expert[a]]++] = a;
		free(pos);
	}
	{
		int rows = 64; // rows per stage (16 x MT) of every variant run_launch picks
		bool seen[STRATA_FMT_COUNT] = { false };
		for (uint32_t e = 0; e < c->n_experts; e++) {
			if (count[e + 1] == count[e])
				continue;
			int f = c->fmts[e];
			if (f >= STRATA_FMT_COUNT) {
				rc = STRATA_ERR(err, STRATA_EINVAL, "strata_moe_layer_gpu: expert %u: bad format %d", e, f);
				goto out;
			}
			if (!seen[f]) {
				if ((rc = fill_tab(f, c->hidden, c->inter, rows, &p->tab[f], err)))
					goto out;
				seen[f] = true;
				p->tiers |= f >= STRATA_FMT_HOT;
			}
		}
	}
	// Experts with many tokens in bf16 or a tier format take the tiled prefill
	// path; the rest (and every call when all counts are small) this kernel.
	big = (bool *)calloc(c->n_experts + 1, sizeof(bool));
	eord = (uint32_t *)malloc((c->n_experts + 1) * sizeof(uint32_t));
	if (!big || !eord) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "strata_moe_layer_gpu: out of memory");
		goto out;
	}
	maxtok_all = 0;
	pf_min = g_ctx.cfg.prefill_min;
	for (uint32_t e = 0; e < c->n_experts; e++) {
		uint32_t n = count[e + 1] - count[e];
		big[e] = n && n >= pf_min && pf_fmt(c->fmts[e]);
		if (!big[e] && n > maxtok_all)
			maxtok_all = n;
	}
	p->x = c->x, p->y = c->y;
	p->hidden = c->hidden, p->inter = c->inter;
	p->vec = (c->hidden % 4 == 0 && c->inter % 4 == 0 && ((uintptr_t)c->x & 15) == 0);
	{
		// Slots in format order: tasks
		// are numbered slot by slot, so warps that fetch tasks at about the same
		// time run the same decoder.  (Experts with tokens have a valid format,
		// checked above; one without tokens and without a valid format is left
		// out, as it has no slot anyway.)
		uint32_t ne = 0;
		for (int f = 0; f < STRATA_FMT_COUNT; f++)
			for (uint32_t e = 0; e < c->n_experts; e++)
				if (c->fmts[e] == f)
					eord[ne++] = e;
		// The kernel variant (token tile) is fixed for the whole call: the stage
		// geometry in p->tab was sized for its rows per stage.
		uint32_t ns = 0, na = 0;
		for (uint32_t i = 0; i < ne && !rc; i++) {
			const uint32_t e = eord[i];
			if (big[e])
				continue;
			for (uint32_t a = count[e]; a < count[e + 1];) {
				uint32_t take = count[e + 1] - a;
				if (take > STRATA_MOE_MAX_ASSIGN)
					take = STRATA_MOE_MAX_ASSIGN;
				if (ns == STRATA_MOE_MAX_SLOTS || na + take > STRATA_MOE_MAX_ASSIGN) {
					p->n_slots = ns;
					if ((rc = run_launch(p, maxtok_all, st, err)))
						break;
					ns = na = 0;
				}
				Slot &s = p->slot[ns++];
				s.ext = (const uint8_t *)c->extents[e];
				s.fmt = c->fmts[e];
				s.a0 = na, s.ntok = take;
				for (uint32_t q = 0; q < take; q++) {
					uint32_t src = order[a + q];
					p->tok[na + q] = c->assign_token[src];
					p->w[na + q] = c->assign_weight[src];
				}
				na += take, a += take;
			}
		}
		if (!rc && ns) {
			p->n_slots = ns;
			rc = run_launch(p, maxtok_all, st, err);
		}
	}
	if (!rc)
		rc = run_prefill(c, count, order, big, p->tab, st, err);
out:
	free(count), free(order), free(p), free(big), free(eord);
	return rc;
}

// The BF16 copy of scalar-format expert extent src (hidden x inter) at dst
// (the BF16 expert layout), on stream st.
int scalar_to_bf16(int fmt, const uint8_t *src, uint32_t hidden, uint32_t inter, uint8_t *dst,
		   const struct strata_expert_layout &B, cudaStream_t st, struct strata_error *err)
{
	struct strata_expert_layout E;
	strata_expert_layout(fmt, hidden, inter, &E);
	const struct strata_matrix_layout *L[3] = { &E.gate, &E.up, &E.down };
	const uint64_t so[3] = { E.gate_off, E.up_off, E.down_off }, dof[3] = { B.gate_off, B.up_off, B.down_off };
	const struct strata_fmt_traits *tr = strata_fmt_traits(fmt);
	for (int i = 0; i < 3; i++) {
		const uint32_t rows = L[i]->rows, cols = L[i]->cols, pc = L[i]->padded_cols;
		const uint64_t rowc = (uint64_t)pc / 256 * tr->code_bytes, rows_ = (uint64_t)pc / 256 * tr->scale_bytes;
		const uint64_t n = (uint64_t)rows * (pc / 8);
		const unsigned blocks = (unsigned)((n + 255) / 256);
		uint16_t *out = (uint16_t *)(dst + dof[i]);
		switch (fmt) {
		STRATA_SCALAR_CASES((dequant_kernel<F><<<blocks, 256, 0, st>>>(src + so[i], rows, cols, pc,
										  L[i]->scales_off, rowc, rows_, out)))
		default: break;
		}
	}
	CU_TRY(err, cudaGetLastError());
	return STRATA_OK;
}

// Grow the BF16 scratch of moe_layer_parts to bytes.
int sq_scratch(size_t bytes, cudaStream_t st, struct strata_error *err)
{
	if (g_ctx.sq_bf16) {
		CU_TRY(err, cudaStreamSynchronize(st));
		cudaFree(g_ctx.sq_bf16);
		g_ctx.sq_bf16 = nullptr, g_ctx.sq_cap = 0;
	}
	CU_TRY(err, cudaMalloc(&g_ctx.sq_bf16, bytes));
	g_ctx.sq_cap = bytes;
	return STRATA_OK;
}

// A call with scalar-format experts (q4, q3), in parts whose results add up
// in y: the other experts as before; the scalar experts with at most 2 x
// dec::TN tokens through the warp-streaming decode kernel (their decoder: one
// launch of their own); those with more tokens, and all of them when that
// kernel is off (dec=off), as BF16 copies made in a scratch buffer a few
// experts at a time (the tiled prefill path for many tokens).
constexpr uint64_t SQ_BF16_SCRATCH = 1ull << 30;
static_assert(STRATA_MOE_SQ_DEC_TOKENS == 2 * dec::TN, "moe.h: the q4/q3 decode kernel's tokens");
int moe_layer_parts(const struct strata_moe_call *c, struct strata_error *err)
{
	const bool dec_on = g_ctx.cfg.dec_warps != 0;
	uint32_t *cnt = (uint32_t *)calloc(c->n_experts + 1, sizeof(uint32_t));
	uint8_t *cls = (uint8_t *)calloc(c->n_experts + 1, 1);
	uint32_t *ae = (uint32_t *)malloc(((size_t)c->n_assign + 1) * 2 * sizeof(uint32_t));
	float *aw = (float *)malloc(((size_t)c->n_assign + 1) * sizeof(float));
	const void **ext = (const void **)malloc((c->n_experts + 1) * sizeof(void *));
	uint8_t *fm = (uint8_t *)malloc(c->n_experts + 1);
	int rc = STRATA_OK;
	if (!cnt || !cls || !ae || !aw || !ext || !fm) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "strata_moe_layer_gpu: out of memory");
		goto out;
	}
	for (uint32_t a = 0; a < c->n_assign; a++)
		if (c->assign_expert[a] < c->n_experts)
			cnt[c->assign_expert[a]]++;
	// class 0: as before, 1: scalar through the decode kernel, 2: scalar as BF16
	for (uint32_t e = 0; e < c->n_experts; e++)
		cls[e] = !strata_fmt_is_scalar(c->fmts[e]) ? 0 : dec_on && cnt[e] <= STRATA_MOE_SQ_DEC_TOKENS ? 1 : 2;
	{
		// Parts 0 and 1: the call with only their assignments (a bad assignment
		// stays in part 0, whose checks report it).
		for (int k = 0; k < 2 && !rc; k++) {
			struct strata_moe_call sub = *c;
			uint32_t n = 0;
			for (uint32_t a = 0; a < c->n_assign; a++) {
				uint32_t e = c->assign_expert[a];
				if ((e < c->n_experts ? cls[e] : 0) != k)
					continue;
				ae[n] = e, ae[c->n_assign + n] = c->assign_token[a], aw[n++] = c->assign_weight[a];
			}
			if (!n)
				continue;
			sub.n_assign = n, sub.assign_expert = ae, sub.assign_token = ae + c->n_assign, sub.assign_weight = aw;
			rc = moe_layer_fused(&sub, err);
		}
	}
	if (!rc) {
		// Part 2: BF16 copies, as many experts at a time as SQ_BF16_SCRATCH holds.
		struct strata_expert_layout B;
		if (strata_expert_layout(STRATA_FMT_BF16, c->hidden, c->inter, &B)) {
			rc = STRATA_ERR(err, STRATA_EINVAL, "strata_moe_layer_gpu: bad shape %u x %u", c->hidden, c->inter);
			goto out;
		}
		bool any = false;
		for (uint32_t e = 0; e < c->n_experts; e++)
			any |= cls[e] == 2 && cnt[e];
		if (any && (c->hidden % 32 || c->inter % 32)) {
			rc = STRATA_ERR(err, STRATA_EUNSUPPORTED,
					"strata_moe_layer_gpu: q4/q3 experts with more than %u tokens (or with the decode "
					"kernel off) run as BF16 copies, which need hidden and inter multiples of 32 "
					"(got %u, %u)", STRATA_MOE_SQ_DEC_TOKENS, c->hidden, c->inter);
			goto out;
		}
		const uint32_t per = B.bytes >= SQ_BF16_SCRATCH ? 1 : (uint32_t)(SQ_BF16_SCRATCH / B.bytes);
		cudaStream_t st = (cudaStream_t)c->stream;
		for (uint32_t e0 = 0; e0 < c->n_experts && !rc;) {
			uint32_t k = 0, e1 = e0;
			for (; e1 < c->n_experts && k < per; e1++)
				k += cls[e1] == 2 && cnt[e1];
			if (!k) {
				e0 = e1;
				continue;
			}
			if ((size_t)k * B.bytes > g_ctx.sq_cap && (rc = sq_scratch((size_t)per * B.bytes, st, err)))
				goto out;
			uint32_t i = 0;
			for (uint32_t e = 0; e < c->n_experts; e++) {
				ext[e] = c->extents[e], fm[e] = c->fmts[e];
				if (e >= e0 && e < e1 && cls[e] == 2 && cnt[e]) {
					uint8_t *dst = g_ctx.sq_bf16 + (uint64_t)i++ * B.bytes;
					if ((rc = scalar_to_bf16(c->fmts[e], (const uint8_t *)c->extents[e], c->hidden, c->inter,
								 dst, B, st, err)))
						goto out;
					ext[e] = dst, fm[e] = STRATA_FMT_BF16;
				}
			}
			uint32_t n = 0;
			for (uint32_t a = 0; a < c->n_assign; a++) {
				uint32_t e = c->assign_expert[a];
				if (e >= c->n_experts || e < e0 || e >= e1 || cls[e] != 2)
					continue;
				ae[n] = e, ae[c->n_assign + n] = c->assign_token[a], aw[n++] = c->assign_weight[a];
			}
			struct strata_moe_call sub = *c;
			sub.extents = ext, sub.fmts = fm;
			sub.n_assign = n, sub.assign_expert = ae, sub.assign_token = ae + c->n_assign, sub.assign_weight = aw;
			// In a stack these launches are not chained: a chained kernel loads
			// weights before its wait, and these were just written by the copies.
			rc = unchained([&] { return moe_layer_fused(&sub, err); });
			e0 = e1;
		}
	}
out:
	free(cnt), free(cls), free(ae), free(aw), free(ext), free(fm);
	return rc;
}

int moe_layer(const struct strata_moe_call *c, struct strata_error *err)
{
	if (c->fmts && c->assign_expert)
		for (uint32_t a = 0; a < c->n_assign; a++)
			if (c->assign_expert[a] < c->n_experts && strata_fmt_is_scalar(c->fmts[c->assign_expert[a]]))
				return moe_layer_parts(c, err);
	return moe_layer_fused(c, err);
}

} // namespace

extern "C" int strata_moe_layer_gpu(const struct strata_moe_call *c, struct strata_error *err)
{
	if (strata_gpu_count() <= 0)
		return STRATA_ERR(err, STRATA_EUNSUPPORTED, "strata_moe_layer_gpu: no GPU");
	pthread_mutex_lock(&g_ctx.mu);
	strata_gpu_moe_config_get(&g_ctx.cfg);
	int rc = moe_layer(c, err);
	pthread_mutex_unlock(&g_ctx.mu);
	return rc;
}

namespace {
// The next layer of a stack (NULL: none) as the prefetch list of
// g_ctx.nx_*: its experts with tokens, none when they are more than PF_MAX.
void stack_next(const struct strata_moe_call *c)
{
	g_ctx.nx_n = 0;
	if (!c || !c->extents || !c->fmts || !c->assign_expert)
		return;
	uint32_t n = 0;
	for (uint32_t a = 0; a < c->n_assign; a++) {
		const uint32_t e = c->assign_expert[a];
		struct strata_expert_layout E;
		if (e >= c->n_experts || !c->extents[e] || strata_expert_layout(c->fmts[e], c->hidden, c->inter, &E))
			continue;
		const uint8_t *gu = (const uint8_t *)c->extents[e] + E.gate_off;
		bool seen = false;
		for (uint32_t i = 0; i < n && !seen; i++)
			seen = g_ctx.nx_p[i] == gu;
		if (seen)
			continue;
		if (n == PF_MAX)
			return;
		g_ctx.nx_p[n] = gu;
		g_ctx.nx_gu[n] = (uint32_t)(E.up_off + E.up.bytes - E.gate_off);
		g_ctx.nx_all[n++] = (uint32_t)(E.down_off + E.down.bytes - E.gate_off);
	}
	g_ctx.nx_n = n;
}
} // namespace

namespace {
// The launches of run_pstack for format FMT and policy P: layers [0, n) of
// calls, ps::LMAX per launch, a's geometry set, smem bytes of dynamic shared
// memory.
template <int FMT, class P>
int pstack_launch(const struct strata_moe_call *calls, uint32_t n, ps::Args *a, uint32_t smem, struct strata_error *err)
{
	const auto k = ps::ps_kernel<FMT, P>;
	cudaStream_t st = (cudaStream_t)calls[0].stream;
	const size_t hfl = (size_t)ps::SMAX * a->inter;
	int rc = gv_smem_attr((const void *)k, ps::SMEM_MAX, err);
	if (rc || (rc = h_scratch(hfl, st, err)))
		return rc;
	static_assert(ps::BAR_WORDS * sizeof(unsigned) <= 128, "ps_bar");
	if (!g_ctx.ps_bar) {
		CU_TRY(err, cudaMalloc(&g_ctx.ps_bar, 128));
		CU_TRY(err, cudaMemset(g_ctx.ps_bar, 0, 128));
	}
	a->h = g_ctx.h, a->bar = g_ctx.ps_bar;
	if (g_ctx.cfg.poison)
		CU_TRY(err, cudaMemsetAsync(g_ctx.h, 0xff, hfl * sizeof(float), st));
	for (uint32_t l0 = 0; l0 < n; l0 += ps::LMAX) {
		a->layers = n - l0 < ps::LMAX ? n - l0 : ps::LMAX;
		for (uint32_t l = 0; l < a->layers; l++) {
			const struct strata_moe_call &c = calls[l0 + l];
			ps::Layer &L = a->l[l];
			L.x = c.x, L.y = c.y, L.ns = c.n_assign;
			for (uint32_t i = 0; i < c.n_assign; i++)
				L.ext[i] = (const uint8_t *)c.extents[c.assign_expert[i]], L.w[i] = c.assign_weight[i];
		}
		if ((rc = small_ts((uint32_t)g_ctx.sms, a->layers, *a, err)) ||
		    (rc = launch_k(k, (uint32_t)g_ctx.sms, 32 * (ps::W + 1), smem, st, false, err, *a)))
			return rc;
		g_ctx.launches[STRATA_GPU_LAUNCH_PSTACK]++;
	}
	return STRATA_OK;
}

// run_pstack's geometry for format FMT (policy P) and layers of at most
// nsmax experts: false when a CTA's share does not fit or the lanes' chunks
// would not divide evenly, else the launches' result in *rc.
template <int FMT, class P>
bool pstack_fmt(const struct strata_moe_call *calls, uint32_t n, uint32_t nsmax, struct strata_error *err, int *rc)
{
	constexpr uint32_t RS = P::NB, DQ = ps::dq<P>(), LD = ps::Ld<P>::DN_LANES, PR = RS * ps::gu_sets<P>();
	const uint32_t H = calls[0].hidden, I = calls[0].inter;
	ps::Args a = {};
	{
		struct strata_error e2 = { 0 };
		if (H % RS || I % PR || fill_tab(FMT, H, I, 64, &a.f, &e2))
			return false; // the layer path reports a bad shape
	}
	const uint32_t G = (uint32_t)g_ctx.sms, pc0 = a.f.pc[0], pc1 = a.f.pc[1];
	const uint32_t rc0 = (uint32_t)a.f.rowc[0], rs0 = (uint32_t)a.f.rows_[0];
	const uint32_t rc1 = (uint32_t)a.f.rowc[1], rs1 = (uint32_t)a.f.rows_[1];
	const uint32_t cpr0 = pc0 / 256 * P::CPB, cpr1 = pc1 / 256 * P::CPB;
	// gate|up pieces and down row sets of the largest layer per CTA at most,
	// down pieces, experts a CTA's down rows touch
	const uint32_t nq0 = (nsmax * (I / PR) + G - 1) / G, nq1 = (nsmax * (H / RS) + G - 1) / G;
	const uint32_t npd = (nq1 + DQ - 1) / DQ, nh0 = (nq1 * RS + H - 2) / H + 1, nh = nh0 < nsmax ? nh0 : nsmax;
	// the staging (a slice per consumer thread), the lanes' chunks (32 / gu_sets a gate|up row set, LD a down row set)
	if (nq0 > ps::NPG_MAX || npd > ps::NPD_MAX || nh > ps::NH_MAX || pc0 / 8 > ps::NCONS || nh * (pc1 / 8) > ps::NCONS ||
	    cpr0 % (32 / ps::gu_sets<P>()) || cpr1 % LD)
		return false;
	auto a128 = [](uint64_t v) { return (v + 127) / 128 * 128; };
	a.hidden = H, a.inter = I;
	a.pg = 2 * PR * (rc0 + rs0), a.pd = DQ * RS * (rc1 + rs1);
	uint64_t o = 0;
	a.a = (uint32_t)o, o = a128(o + (uint64_t)nq0 * a.pg);
	a.b = (uint32_t)o, o = a128(o + (uint64_t)npd * a.pd);
	a.xs = (uint32_t)o, o = a128(o + (uint64_t)cpr0 * P::NG * 16);
	a.xz = (uint32_t)o, o = a128(o + (uint64_t)cpr0 * P::NG * 4);
	a.hs = (uint32_t)o, o = a128(o + (uint64_t)nh * cpr1 * P::NG * 16);
	a.hz = (uint32_t)o, o = a128(o + (uint64_t)nh * cpr1 * P::NG * 4);
	if (o > ps::SMEM_MAX)
		return false;
	a.win = (uint32_t)g_ctx.cfg.pstack; // pieces in flight (<= ps::WIN_MAX, the configuration's check)
	*rc = pstack_launch<FMT, P>(calls, n, &a, (uint32_t)o, err);
	return true;
}

typedef void (*SmallStackKernel)(const MoeParams, const sm::Args, const sm::Stack);
static_assert(sizeof(MoeParams) + sizeof(sm::Args) + sizeof(sm::Stack) <= 32764, "kernel parameters");

// small_stack's work in p and S (zeroed).
bool small_stack_in(const struct strata_moe_call *calls, uint32_t n, int fmt, uint32_t ns, MoeParams *p, sm::Stack *S,
		    struct strata_error *err, int *rc)
{
	const struct strata_moe_call &c0 = calls[0];
	cudaStream_t st = (cudaStream_t)c0.stream;
	{
		struct strata_error e2 = { 0 };
		if (fill_tab(fmt, c0.hidden, c0.inter, 64, &p->tab[fmt], &e2))
			return false; // the layer path reports a bad shape
	}
	// Layer l's x, y, and its experts in slot order (moe_layer_fused's:
	// ascending expert) with their routing weights.
	auto layer = [&](uint32_t l, sm::Stack::Layer &L) {
		const struct strata_moe_call &c = calls[l];
		uint32_t ord[sm::SMAX];
		for (uint32_t i = 0; i < ns; i++) {
			uint32_t k = i;
			for (; k && c.assign_expert[ord[k - 1]] > c.assign_expert[i]; k--)
				ord[k] = ord[k - 1];
			ord[k] = i;
		}
		L.x = c.x, L.y = c.y;
		for (uint32_t s = 0; s < ns; s++)
			L.ext[s] = (const uint8_t *)c.extents[c.assign_expert[ord[s]]], L.w[s] = c.assign_weight[ord[s]];
	};
	layer(0, S->l[0]);
	p->x = c0.x, p->y = c0.y, p->hidden = c0.hidden, p->inter = c0.inter, p->n_slots = ns, p->tiers = 1;
	p->vec = (c0.hidden % 4 == 0 && c0.inter % 4 == 0 && ((uintptr_t)c0.x & 15) == 0);
	for (uint32_t s = 0; s < ns; s++) {
		Slot &sl = p->slot[s];
		sl.ext = S->l[0].ext[s], sl.fmt = (uint32_t)fmt, sl.a0 = s, sl.ntok = 1;
		p->tok[s] = 0, p->w[s] = S->l[0].w[s];
	}
	const uint32_t hfl = h_slots(p);
	sm::Args a;
	bool full;
	uint32_t grid;
	uint64_t o;
	// dec_tr=2 or 3, and auto on cold stacks: the table decoder where the
	// table fits beside the share (H100, 16-layer Qwen3-30B-A3B cold stacks
	// 18.1 vs 18.6 us a layer, warm ones no faster:
	// experiments/kernels/README.md)
	bool tab = g_ctx.cfg.dec_tr >= 2 || (g_ctx.cfg.dec_tr < 0 && fmt == STRATA_FMT_COLD);
	if (tab && !small_geom(p, fmt, 1, true, a, &full, &grid, &o))
		tab = false;
	if (!tab && !small_geom(p, fmt, 1, false, a, &full, &grid, &o))
		return false;
	if (!full)
		return false;
	auto pick = [&](auto FC) -> SmallStackKernel {
		constexpr int FMT = decltype(FC)::value;
		return tab ? sm::small_stack_kernel<FMT, gv::Tier<FMT, 1>> : sm::small_stack_kernel<FMT, gv::Tier<FMT, 0>>;
	};
	const SmallStackKernel k = fmt == STRATA_FMT_HOT    ? pick(std::integral_constant<int, STRATA_FMT_HOT>())
				   : fmt == STRATA_FMT_WARM ? pick(std::integral_constant<int, STRATA_FMT_WARM>())
							    : pick(std::integral_constant<int, STRATA_FMT_COLD>());
	if ((*rc = gv_smem_attr((const void *)k, sm::SMEM_MAX, err)) || (*rc = h_scratch(hfl, st, err)))
		return true;
	p->h = g_ctx.h, p->sync = g_ctx.sync;
	a.par = 1;
	if (g_ctx.cfg.poison && cudaMemsetAsync(g_ctx.h, 0xff, (size_t)hfl * sizeof(float), st) != cudaSuccess) {
		*rc = STRATA_ERR(err, STRATA_EGPU, "strata_gpu_moe_stack: poisoning h: %s", cudaGetErrorString(cudaGetLastError()));
		return true;
	}
	for (uint32_t l0 = 0; l0 < n; l0 += sm::LMAX) {
		S->layers = n - l0 < sm::LMAX ? n - l0 : sm::LMAX;
		for (uint32_t l = 0; l < S->layers; l++)
			layer(l0 + l, S->l[l]);
		if ((*rc = small_ts(grid, S->layers, a, err)) ||
		    (*rc = launch_k(k, grid, 32 * sm::W, (uint32_t)o, st, false, err, *p, a, *S)))
			return true;
		g_ctx.launches[STRATA_GPU_LAUNCH_PSTACK]++;
		g_ctx.launches[STRATA_GPU_LAUNCH_PSTACK_TAB] += tab;
	}
	return true;
}

// run_pstack's tier-format stacks (every layer ns experts, all of format
// fmt): the small-layer kernel over the stack (moe_dec_small.cuh with ST),
// one launch per sm::LMAX layers, when its geometry fits and every phase
// divides evenly (FULL); false when the layers should run one by one.
bool small_stack(const struct strata_moe_call *calls, uint32_t n, int fmt, uint32_t ns, struct strata_error *err, int *rc)
{
	MoeParams *p = (MoeParams *)calloc(1, sizeof(MoeParams));
	sm::Stack *S = (sm::Stack *)calloc(1, sizeof(sm::Stack));
	bool ran = true;
	if (!p || !S)
		*rc = STRATA_ERR(err, STRATA_ENOMEM, "strata_gpu_moe_stack: out of memory");
	else
		ran = small_stack_in(calls, n, fmt, ns, p, S, err, rc);
	free(p), free(S);
	return ran;
}

// A stack in one launch per 16 layers (kernel configuration pstack=1 - 8)
// when every layer has one token, the same shape and at most 16 distinct
// experts, all in one format: q4 or q3 on the persistent stack kernel
// (moe_dec_ps.cuh, pstack_fmt: when each CTA's share of a layer fits in
// shared memory); hot, warm or cold, with as many experts in every layer,
// on the small-layer kernel over the stack (small_stack).  True when it ran
// them (*rc its result), false when the layers should run one by one.
bool run_pstack(const struct strata_moe_call *calls, uint32_t n, struct strata_error *err, int *rc)
{
	const uint32_t H = calls[0].hidden, I = calls[0].inter, ns0 = calls[0].n_assign;
	int fmt = -1;
	uint32_t nsmax = 0;
	bool same = true;
	if (!g_ctx.cfg.pstack)
		return false;
	for (uint32_t l = 0; l < n; l++) {
		const struct strata_moe_call &c = calls[l];
		if (c.hidden != H || c.inter != I || c.n_tokens != 1 || !c.x || !c.y || !c.extents || !c.fmts ||
		    !c.assign_expert || !c.assign_token || !c.assign_weight || !c.n_assign || c.n_assign > ps::SMAX)
			return false;
		for (uint32_t i = 0; i < c.n_assign; i++) {
			const uint32_t e = c.assign_expert[i];
			if (e >= c.n_experts || c.assign_token[i] || !c.extents[e] || ((uintptr_t)c.extents[e] & 15))
				return false;
			if (fmt < 0)
				fmt = c.fmts[e];
			if (c.fmts[e] != fmt || (fmt != STRATA_FMT_Q4 && fmt != STRATA_FMT_Q3 && fmt != STRATA_FMT_HOT &&
						 fmt != STRATA_FMT_WARM && fmt != STRATA_FMT_COLD))
				return false;
			for (uint32_t k = 0; k < i; k++)
				if (c.assign_expert[k] == e)
					return false;
		}
		nsmax = c.n_assign > nsmax ? c.n_assign : nsmax;
		same = same && c.n_assign == ns0;
	}
	const bool tier = fmt != STRATA_FMT_Q4 && fmt != STRATA_FMT_Q3;
	if (tier && !same)
		return false;
	if ((*rc = ctx_init(err)))
		return true;
	if (tier)
		return small_stack(calls, n, fmt, ns0, err, rc);
	return fmt == STRATA_FMT_Q4 ? pstack_fmt<STRATA_FMT_Q4, gv::Q4>(calls, n, nsmax, err, rc)
				    : pstack_fmt<STRATA_FMT_Q3, gv::Q3i>(calls, n, nsmax, err, rc);
}
} // namespace

extern "C" int strata_gpu_moe_stack(const struct strata_moe_call *calls, uint32_t n_layers, unsigned flags,
				    struct strata_error *err)
{
	if (strata_gpu_count() <= 0)
		return STRATA_ERR(err, STRATA_EUNSUPPORTED, "strata_gpu_moe_stack: no GPU");
	if (!calls || !n_layers)
		return STRATA_ERR(err, STRATA_EINVAL, "strata_gpu_moe_stack: no layers");
	if (flags & ~(STRATA_MOE_STACK_PLAIN | STRATA_MOE_STACK_L2PF))
		return STRATA_ERR(err, STRATA_EINVAL, "strata_gpu_moe_stack: unknown flags 0x%x", flags);
	for (uint32_t l = 1; l < n_layers; l++)
		if (calls[l].stream != calls[0].stream)
			return STRATA_ERR(err, STRATA_EINVAL, "strata_gpu_moe_stack: layer %u is not on layer 0's stream", l);
	pthread_mutex_lock(&g_ctx.mu);
	strata_gpu_moe_config_get(&g_ctx.cfg);
	int rc = STRATA_OK;
	g_ctx.chain = !(flags & STRATA_MOE_STACK_PLAIN);
	g_ctx.l2pf = g_ctx.chain && (flags & STRATA_MOE_STACK_L2PF);
	g_ctx.first = 1;
	if (!run_pstack(calls, n_layers, err, &rc))
		for (uint32_t l = 0; l < n_layers && !rc; l++) {
			stack_next(g_ctx.l2pf && l + 1 < n_layers ? &calls[l + 1] : nullptr);
			if ((rc = moe_layer(&calls[l], err)))
				strata_error_prefix(err, "strata_gpu_moe_stack: layer %u: ", l);
		}
	g_ctx.chain = 0, g_ctx.l2pf = 0, g_ctx.first = 0, g_ctx.nx_n = 0;
	pthread_mutex_unlock(&g_ctx.mu);
	return rc;
}

extern "C" int strata_gpu_moe_check(int fmt, uint32_t hidden, uint32_t inter, struct strata_error *err)
{
	FmtTab t;
	return fill_tab(fmt, hidden, inter, 64, &t, err);
}

// A launch counter of the test hooks, read under the context's lock.
extern "C" uint64_t strata_gpu_moe_launches(enum strata_gpu_launch kind)
{
	if ((unsigned)kind >= STRATA_GPU_LAUNCH_KINDS)
		return 0;
	pthread_mutex_lock(&g_ctx.mu);
	uint64_t n = g_ctx.launches[kind];
	pthread_mutex_unlock(&g_ctx.mu);
	return n;
}

// strata_gpu_small_phases under the context's lock.
static int small_phases(uint64_t *ts, uint32_t *grid, uint32_t cap, uint32_t *n, struct strata_error *err)
{
	const size_t per = (size_t)STRATA_SMALL_TS_CTAS * STRATA_SMALL_TS_WORDS;
	const uint32_t have = g_ctx.sm_ts_n < STRATA_SMALL_TS_LAUNCHES ? g_ctx.sm_ts_n : STRATA_SMALL_TS_LAUNCHES;
	const uint32_t m = have < cap ? have : cap;
	CU_TRY(err, cudaDeviceSynchronize());
	for (uint32_t j = 0; j < m; j++) {
		const uint32_t i = (g_ctx.sm_ts_n - m + j) % STRATA_SMALL_TS_LAUNCHES;
		grid[j] = g_ctx.sm_ts_grid[i];
		CU_TRY(err, cudaMemcpy(ts + j * per, g_ctx.sm_ts + i * per, per * sizeof(*ts), cudaMemcpyDeviceToHost));
	}
	*n = m, g_ctx.sm_ts_n = 0;
	return STRATA_OK;
}

extern "C" int strata_gpu_small_phases(uint64_t *ts, uint32_t *grid, uint32_t cap, uint32_t *n, struct strata_error *err)
{
	*n = 0;
	pthread_mutex_lock(&g_ctx.mu);
	int rc = ctx_init(err);
	if (!rc)
		rc = small_phases(ts, grid, cap, n, err);
	pthread_mutex_unlock(&g_ctx.mu);
	return rc;
}

extern "C" int strata_gpu_moe_prefill_sm90_usable(void)
{
	struct strata_error err = { 0 };
	pthread_mutex_lock(&g_ctx.mu);
	int ok = ctx_init(&err) == STRATA_OK && g_ctx.pf90;
	pthread_mutex_unlock(&g_ctx.mu);
	return ok;
}

extern "C" int strata_gpu_dequantize(int fmt, const void *d_packed, uint32_t rows, uint32_t cols, float *d_out,
				     strata_gpu_stream *stream, struct strata_error *err)
{
	const struct strata_fmt_traits *tr = strata_fmt_traits(fmt);
	struct strata_matrix_layout L;
	if (!tr || !gpu_fmt_ok(fmt))
		return STRATA_ERR(err, STRATA_EUNSUPPORTED, "strata_gpu_dequantize: format %d has no GPU decoder", fmt);
	if (strata_matrix_layout(fmt, rows, cols, &L))
		return STRATA_ERR(err, STRATA_EINVAL, "strata_gpu_dequantize: bad shape %u x %u", rows, cols);
	if (tr->block == 1 && cols % 8)
		return STRATA_ERR(err, STRATA_EUNSUPPORTED, "strata_gpu_dequantize: %s needs cols %% 8 == 0", tr->name);
	int rc = ctx_init(err);
	if (rc)
		return rc;
	uint32_t cb = tr->code_bytes * (256 / tr->block), sb = tr->scale_bytes * (256 / tr->block);
	uint64_t rowc = (uint64_t)L.padded_cols * cb / 256, rows_ = (uint64_t)(L.padded_cols + 255) / 256 * sb;
	uint32_t pc8 = (L.padded_cols + 7) / 8 * 8;
	uint64_t n = (uint64_t)rows * (pc8 / 8);
	unsigned blocks = (unsigned)((n + 255) / 256);
	cudaStream_t st = (cudaStream_t)stream;
	const uint8_t *m = (const uint8_t *)d_packed;
	bool ok = false;
	STRATA_FMT_SWITCH(fmt, (dequant_kernel<F><<<blocks, 256, 0, st>>>(m, rows, cols, pc8, L.scales_off, rowc,
									 rows_, d_out),
				ok = true));
	switch (fmt) {
	STRATA_SCALAR_CASES((dequant_kernel<F><<<blocks, 256, 0, st>>>(m, rows, cols, pc8, L.scales_off, rowc, rows_,
									  d_out),
			     ok = true))
	default: break;
	}
	if (!ok)
		return STRATA_ERR(err, STRATA_EUNSUPPORTED, "strata_gpu_dequantize: format %d", fmt);
	CU_TRY(err, cudaGetLastError());
	return STRATA_OK;
}

extern "C" int strata_gpu_read_bytes(const void *d_buf, size_t bytes, uint32_t *d_sink, strata_gpu_stream *stream,
				     struct strata_error *err)
{
	// The SM count only (no allocation): benchmarks capture this call into a
	// graph, where cudaMalloc is not permitted.
	int dev, sms;
	CU_TRY(err, cudaGetDevice(&dev));
	CU_TRY(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	read_kernel<<<sms * 4, 512, 0, (cudaStream_t)stream>>>((const uint4 *)d_buf, bytes / 16, d_sink);
	CU_TRY(err, cudaGetLastError());
	return STRATA_OK;
}

extern "C" int strata_gpu_fill_f32(float *d_buf, size_t n, uint64_t seed, float scale, strata_gpu_stream *stream,
				   struct strata_error *err)
{
	fill_f32_kernel<<<1024, 256, 0, (cudaStream_t)stream>>>(d_buf, n, seed, scale);
	CU_TRY(err, cudaGetLastError());
	return STRATA_OK;
}

extern "C" int strata_gpu_fill_bf16(uint16_t *d_buf, size_t n, uint64_t seed, float scale,
				    strata_gpu_stream *stream, struct strata_error *err)
{
	fill_bf16_kernel<<<1024, 256, 0, (cudaStream_t)stream>>>(d_buf, n, seed, scale);
	CU_TRY(err, cudaGetLastError());
	return STRATA_OK;
}

extern "C" int strata_gpu_fill_random(void *d_buf, size_t bytes, uint64_t seed, strata_gpu_stream *stream,
				      struct strata_error *err)
{
	fill_random_kernel<<<1024, 256, 0, (cudaStream_t)stream>>>((uint32_t *)d_buf, bytes / 4, seed);
	CU_TRY(err, cudaGetLastError());
	return STRATA_OK;
}

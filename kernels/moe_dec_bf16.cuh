// bf16 decode kernel of the fused MoE layer (included by moe_gpu.cu inside its
// anonymous namespace, after moe_decode.cuh).
//
// Used when every expert of a launch has at most 8 tokens and is bf16
// (run_dec_bf16 in moe_gpu.cu).  bf16 decode is a pure stream of weight bytes
// (4 HMMAs per 2 KB), so what sets its speed is how many bytes every SM keeps
// in flight and how evenly the work ends; the persistent kernel's direct path
// loads one unit and then waits for it, and drains at every task's CTA barrier
// (0.70 of the read ceiling at the Kimi shape, 0.47 at Qwen3-30B-A3B's).
//
// Here every warp is an independent stream:
//   - tasks are 32 weight rows (16 gate + the same 16 up rows, or 32 down rows)
//     x one 8-token tile x one K chunk (about KC weights, 512 by default), taken
//     from a global counter after the first (the next id is fetched one task
//     ahead);
//   - each lane keeps a register ring of D units (a unit: 32 weights of its
//     rows g, g+8 of both 16-row tiles, four 16-byte loads, the A fragments of
//     4 mma.sync m16n8k16) issued D units ahead, across task boundaries, with
//     an L2 256-byte prefetch hint (the next units of the row come with the
//     first); no shared memory, no barriers;
//   - the units are multiplied as the persistent kernel's direct path does
//     (activations of the lane's token, f32 loaded through L1 at use time and
//     packed to bf16; f32 accumulation).
// K chunks make the tasks short (so the last ones end together) and many (so
// the Qwen shape fills the GPU):
//   - down: every chunk adds its router-weighted sums into y (atomics, as before);
//   - gate|up with one chunk per row: h = silu(gate) * up in registers;
//   - gate|up with several chunks: the chunk's sums go into a float2 (gate, up)
//     scratch laid out like h (atomics), and the warp that finishes a row
//     tile's last chunk (per-tile counter) forms h from it and zeroes the
//     scratch and the counter for the next launch.
// A finished gate|up row tile counts on the slot's p.sync counter; a down task
// waits for all of its slot's tiles before its first activation load (its
// weights, which do not depend on h, are already in the ring; while waiting,
// the warp prefetches the rest of the task's rows into L2).  Deadlock-free as
// the other decode kernels: a warp's first task is its index, the later ones
// come in order from the counter, so every gate|up task is taken by a warp
// that is (or, once its SM is free, will be) resident before any down task,
// and is finished by that warp without waiting (grid <= SMs, one CTA each).
namespace bfd {

constexpr int RG = 16, RD = 32, TN = 8;    // rows per gate|up (of each) / down task, tokens per task
constexpr uint32_t NONE = 0xffffffffu;   // empty ring entry
constexpr uint32_t FETCH = dec::FETCH;   // p.sync index of the task counter (shared with dec_kernel)

struct Args {
	float *gu;          // split-K gate|up sums: (gate, up) per h element; all zero between launches
	unsigned *ctr;      // K chunks done per (slot, gate|up row tile); all zero between launches
	uint32_t kc[2];     // weights per K chunk (gate|up, down); a multiple of 32
	uint32_t nch[2];    // K chunks per row
	uint32_t nrt;       // gate|up row tiles per slot
};

// 16 bytes of weights: read-only path, not kept in L1 (the activations are),
// and the 256-byte L2 sector group around it fetched (the next 3 units of the
// row arrive with this one).
__device__ __forceinline__ uint4 ldw(const uint8_t *q)
{
	uint4 v;
	asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
		     : "l"(q));
	return v;
}

// Counter updates of the gate|up -> down scheme (and moe_gpu.cu's
// red_release).  Release (acq_rel) atomics by lane 0 after __syncwarp (which
// orders the other lanes' stores before it) instead of a fence by every lane.
__device__ __forceinline__ unsigned atom_acq_rel(unsigned *q, unsigned v)
{
	unsigned r;
	asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;\n" : "=r"(r) : "l"(q), "r"(v) : "memory");
	return r;
}
// The same without the acquire side, and a relaxed load: no invalidation of
// the SM's L1 (an acquire at gpu scope is an L1 invalidate, CCTL.IVALL, which
// evicts every warp's cached activations; ACQ=false below).
__device__ __forceinline__ unsigned atom_release(unsigned *q, unsigned v)
{
	unsigned r;
	asm volatile("atom.release.gpu.global.add.u32 %0, [%1], %2;\n" : "=r"(r) : "l"(q), "r"(v) : "memory");
	return r;
}

// A task split into n parts (warps) whose gate|up sums meet in a zeroed
// scratch: this warp's part counted on *ctr, whether it was the last (every
// lane gets the answer).  The lanes' adds to the scratch precede lane 0's
// release (the __syncwarp before it); for the last part, with ACQ, lane 0's
// acquire orders every other part's adds before the warp's reads (the
// __syncwarp after it).  take_sums: an element's (gate, up) sums at q, read
// through L2 and zeroed for the next launch.
template <bool ACQ = true> __device__ __forceinline__ bool last_part(unsigned *ctr, unsigned n)
{
	__syncwarp();
	const uint32_t last = (threadIdx.x & 31) == 0 ? (ACQ ? atom_acq_rel(ctr, 1u) : atom_release(ctr, 1u)) == n - 1 : 0;
	if (!__shfl_sync(0xffffffffu, last, 0))
		return false;
	__syncwarp();
	return true;
}
__device__ __forceinline__ float2 take_sums(float *q)
{
	float2 *v = reinterpret_cast<float2 *>(q);
	const float2 r = __ldcg(v);
	__stcg(v, make_float2(0.0f, 0.0f));
	return r;
}

// Task t: slot, row tile, K chunk (task_find over the layout of run_dec_bf16,
// whose "token tile" is the K chunk: every slot has one 8-token tile).
__device__ __forceinline__ void btask(const MoeParams &p, uint32_t t, Task &k, uint32_t &chunk)
{
	k.t = t;
	task_find(p, t, RG, RD, k);
	chunk = k.tt;
	k.tt = 0;
}

// Pull the codes of down task t into L2 (lane l: row l of the task's chunk;
// any format whose K chunks are whole 256-weight blocks, or bf16).
__device__ __forceinline__ void prefetch_down(const MoeParams &p, const Args &a, uint32_t t)
{
	const int lane = threadIdx.x & 31;
	Task k;
	uint32_t chunk;
	btask(p, t, k, chunk);
	const FmtTab &f = p.tab[k.fmt];
	const uint32_t row = k.rt * RD + lane, k0 = chunk * a.kc[1], k1 = min(k0 + a.kc[1], f.pc[1]);
	if (row < p.hidden)
		asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(
				     p.slot[k.slot].ext + f.off[2] + (uint64_t)row * f.rowc[1] + (uint64_t)k0 * f.cb / 256),
			     "r"((k1 - k0) * f.cb / 256)
			     : "memory");
}

// Issue side: the task whose units are being loaded, and this lane's rows.
struct Iss {
	uint32_t t, u, nu;    // task, next unit, units in the task
	uint32_t nxt;         // lane 0: the task id after this one (fetched ahead)
	const uint8_t *b;     // row g of tile 0, this lane's 16 bytes of unit 0
	uint32_t om, oh;      // byte offsets of tile 1 and of rows g + 8
	uint32_t valid;       // bit 2m + h: row g + 8h of tile m inside the matrix
};

__device__ __forceinline__ void iss_setup(const MoeParams &p, const Args &a, Iss &ld)
{
	const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	Task k;
	uint32_t chunk;
	btask(p, ld.t, k, chunk);
	const FmtTab &f = p.tab[STRATA_FMT_BF16];
	const uint32_t d = k.down, rowc = (uint32_t)f.rowc[d];
	const uint32_t k0 = chunk * a.kc[d], k1 = min(k0 + a.kc[d], f.pc[d]);
	const uint32_t nrows = d ? p.hidden : p.inter, row0 = k.rt * (d ? RD : RG) + g;
	ld.u = 0;
	ld.nu = (k1 - k0) / 32;
	ld.b = p.slot[k.slot].ext + f.off[d ? 2 : 0] + (uint64_t)row0 * rowc + 2 * k0 + 16 * t;
	ld.oh = 8 * rowc;
	ld.om = d ? 16 * rowc : (uint32_t)(f.off[1] - f.off[0]);
	const uint32_t r1 = d ? row0 + 16 : row0;
	ld.valid = (row0 < nrows) | (row0 + 8 < nrows) << 1 | (r1 < nrows) << 2 | (r1 + 8 < nrows) << 3;
}

// Compute side: the task being multiplied.
struct Cmp {
	Task k;
	uint32_t chunk, k0, cols;
	const float *xr[1];
	bool have[1];
	float acc[2][4];
};

// Start multiplying task t: activation rows, zero sums; a down task first
// waits for its slot's h.  ACQ=false (the scalar decode kernel): the wait and
// the split-K count take no acquire, so the SM's L1 keeps the activations.
// That is safe because L1 starts every launch empty, the h (and gate|up
// scratch) lines of a slot are read by no warp before the slot's count is
// complete (h slots are 128-byte aligned; the split-K sums are read through
// L2, __ldcg), and the writers release (membar) before counting.
template <bool ACQ = true>
__device__ __forceinline__ void cmp_start(const MoeParams &p, const Args &a, Cmp &c, uint32_t t)
{
	const int lane = threadIdx.x & 31, g = lane >> 2;
	btask(p, t, c.k, c.chunk);
	const Slot &s = p.slot[c.k.slot];
	const uint32_t d = c.k.down;
	c.k0 = c.chunk * a.kc[d];
	c.cols = d ? p.inter : p.hidden;
	act_rows<1, TN>(p, c.k, s, g, c.xr, c.have);
#pragma unroll
	for (int m = 0; m < 2; m++)
		c.acc[m][0] = c.acc[m][1] = c.acc[m][2] = c.acc[m][3] = 0.0f;
	if (d) {
		const uint32_t need = a.nrt * ((s.ntok + TN - 1) / TN);
		auto ld = [&]() { return ACQ ? ld_acquire(p.sync + 1 + c.k.slot) : ld_relaxed(p.sync + 1 + c.k.slot); };
		uint32_t ok = lane == 0 ? ld() >= need : 0;
		if (!__shfl_sync(0xffffffffu, ok, 0)) {
			// Not ready: pull the rest of this task's rows into L2 while waiting.
			// (Prefetching the later down tasks too measured no faster.)
			prefetch_down(p, a, t);
			if (lane == 0)
				wait_at_least<ACQ>(p.sync + 1 + c.k.slot, need, 128, "gate|up tasks of slot", c.k.slot);
		}
		__syncwarp();
	}
}

// acc += unit u of the task (weights w[m][h]: rows g + 8h of tile m).
__device__ __forceinline__ void cmp_unit(const MoeParams &p, Cmp &c, const uint4 (&w)[2][2], uint32_t u)
{
	const int t = threadIdx.x & 3;
	float x[1][8];
	act_load<1>(p, c.k.down, c.xr, c.have, c.k0 + u * 32 + 8 * t, c.cols, x);
	uint32_t b[4];
#pragma unroll
	for (int i = 0; i < 4; i++)
		b[i] = pack_bf16x2(x[0][2 * i], x[0][2 * i + 1]);
#pragma unroll
	for (int m = 0; m < 2; m++) {
		mma_bf16<false>(c.acc[m], w[m][0].x, w[m][1].x, w[m][0].y, w[m][1].y, b[0], b[1]);
		mma_bf16<false>(c.acc[m], w[m][0].z, w[m][1].z, w[m][0].w, w[m][1].w, b[2], b[3]);
	}
}

// The task's sums are complete: h (or its split-K share), or y.
// acc[m][i]: tile m, row g + 8 (i >> 1), token 2t + (i & 1).
template <bool ACQ = true>
__device__ __forceinline__ void cmp_end(const MoeParams &p, const Args &a, const Cmp &c)
{
	const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	const Slot &s = p.slot[c.k.slot];
	if (c.k.down) {
#pragma unroll
		for (int m = 0; m < 2; m++)
#pragma unroll
			for (int i = 0; i < 4; i++) {
				uint32_t row = c.k.rt * RD + 16 * m + g + 8 * (i >> 1), tl = 2 * t + (i & 1);
				if (row < p.hidden && tl < s.ntok)
					atomicAdd(p.y + (uint64_t)p.tok[s.a0 + tl] * p.hidden + row,
						  p.w[s.a0 + tl] * c.acc[m][i]);
			}
		return;
	}
	auto hidx = [&](int i) -> uint64_t {
		return s.h_off + (uint64_t)(2 * t + (i & 1)) * p.inter + c.k.rt * RG + g + 8 * (i >> 1);
	};
	auto in = [&](int i) { return c.k.rt * RG + g + 8 * (i >> 1) < p.inter && 2 * t + (i & 1) < s.ntok; };
	if (a.nch[0] == 1) {
#pragma unroll
		for (int i = 0; i < 4; i++)
			if (in(i)) {
				float gv = c.acc[0][i], uv = c.acc[1][i];
				p.h[hidx(i)] = gv / (1.0f + expf(-gv)) * uv;
			}
	} else {
#pragma unroll
		for (int i = 0; i < 4; i++)
			if (in(i)) {
				atomicAdd(a.gu + 2 * hidx(i), c.acc[0][i]);
				atomicAdd(a.gu + 2 * hidx(i) + 1, c.acc[1][i]);
			}
		unsigned *ctr = a.ctr + c.k.slot * a.nrt + c.k.rt;
		// the tile's last chunk: every other chunk's sums are in L2
		if (!last_part<ACQ>(ctr, a.nch[0]))
			return;
#pragma unroll
		for (int i = 0; i < 4; i++)
			if (in(i)) {
				const float2 v = take_sums(a.gu + 2 * hidx(i));
				p.h[hidx(i)] = v.x / (1.0f + expf(-v.x)) * v.y;
			}
		if (lane == 0)
			*ctr = 0;
	}
	// Release: this warp's h stores before the slot's counter.
	__syncwarp();
	if (lane == 0)
		red_release(p.sync + 1 + c.k.slot, 1u);
}

// The compute side of a register-ring decode kernel (bf16_kernel,
// sqd::sq_kernel), until the stream ends: ring entry i holds a unit of task
// rt[i] (NONE: the stream ended); unit(c, i) multiplies entry i into the task
// c, issue(i) refills the entry.  Then the last warp out resets the counters.
template <int D, bool ACQ = true, class Unit, class Issue>
__device__ __forceinline__ void ring_run(const MoeParams &p, const Args &a, const uint32_t (&rt)[D], Unit &&unit,
					 Issue &&issue)
{
	Cmp c;
	c.k.t = NONE;
	bool live = true;
	while (live) {
#pragma unroll
		for (int i = 0; i < D; i++) {
			if (rt[i] == NONE) {
				live = false;
				break;
			}
			if (rt[i] != c.k.t) {
				if (c.k.t != NONE)
					cmp_end<ACQ>(p, a, c);
				cmp_start<ACQ>(p, a, c, rt[i]);
			}
			unit(c, i);
			issue(i);
		}
	}
	if (c.k.t != NONE)
		cmp_end<ACQ>(p, a, c);
	dec::last_out_reset(p, gridDim.x * (blockDim.x / 32));
}

template <int NW, int D>
__global__ void __launch_bounds__(32 * NW, 1) bf16_kernel(const __grid_constant__ MoeParams p, const __grid_constant__ Args a)
{
	const int lane = threadIdx.x & 31;
	// Warp w's first task is w (no atomic on the way to the first loads); the
	// others come from the counter.
	const uint32_t nwarps = gridDim.x * NW;
	auto fetch = [&]() -> uint32_t { return lane == 0 ? nwarps + atomicAdd(p.sync + FETCH, 1u) : 0u; };
	Iss ld;
	ld.t = blockIdx.x * NW + (threadIdx.x >> 5);
	if (ld.t < p.n_tasks) {
		ld.nxt = fetch();
		iss_setup(p, a, ld);
	}
	// The ring: entry i holds unit ru[i] of task rt[i] (NONE: the stream ended).
	uint4 w[D][2][2];
	uint32_t rt[D], ru[D];
	auto issue = [&](int i) {
		if (ld.t >= p.n_tasks) {
			rt[i] = NONE;
			return;
		}
		const uint8_t *q = ld.b + 64 * ld.u;
#pragma unroll
		for (int m = 0; m < 2; m++)
#pragma unroll
			for (int h = 0; h < 2; h++)
				w[i][m][h] = ld.valid >> (2 * m + h) & 1 ? ldw(q + (m ? ld.om : 0) + (h ? ld.oh : 0))
									 : make_uint4(0, 0, 0, 0);
		rt[i] = ld.t, ru[i] = ld.u;
		if (++ld.u == ld.nu) {
			ld.t = __shfl_sync(0xffffffffu, ld.nxt, 0);
			if (ld.t < p.n_tasks) {
				ld.nxt = fetch();
				iss_setup(p, a, ld);
			}
		}
	};
#pragma unroll
	for (int i = 0; i < D; i++)
		issue(i);
	ring_run<D>(p, a, rt, [&](Cmp &c, int i) { cmp_unit(p, c, w[i], ru[i]); }, issue);
}

} // namespace bfd

// Warp-streaming decode kernel of the fused MoE layer (included by moe_gpu.cu
// inside its anonymous namespace, after the persistent kernel's helpers).
//
// Used when every expert of a launch has at most 8 tokens (decode) and is in a
// tier format, and the launch has enough tasks to keep every warp busy
// (run_dec in moe_gpu.cu).  bf16 experts have a kernel of their own
// (moe_dec_bf16.cuh: registers straight from global memory through a ring of
// 16-byte loads; 64-weight stages of this design measured 0.47 of the read
// ceiling at the Kimi shape).
//
// Each warp is its own pipeline: it takes a task (32 weight rows x one tile of
// 8 tokens x the whole row length) from a global counter, streams the task's
// rows block by block into a private ring of NS shared-memory stages with
// 16-byte cp.async (lane l copies row l), and multiplies on tensor cores as
// the persistent kernel does (mma.sync m16n8k16, f32 accumulation).  No
// CTA-wide barrier, no per-stage task bookkeeping shared between warps; a warp
// fetches its next task while its last stages are still in flight.
//   gate|up task: gate rows r0..r0+15 (tile 0) and up rows r0..r0+15
//                 (tile 1), so h = silu(gate) * up is formed in registers;
//   down task:    32 down rows, after the slot's gate|up tasks are done
//                 (spin on the slot's counter, as the persistent kernel).
// Chunks: one 256-weight block per stage (8 units of 32 weights; the block
// scale is applied once per block to the block's MMA sums).  Stage row layout
// (pitch 144 bytes = 16 mod 128, so the code-word loads of rows g = 0..7 land
// 4 banks apart): the block's code bytes from their 16-byte aligned start
// (<= 7 chunks), then at byte 112 the 16-byte chunk holding the block scale.
// The misalignments (mod 16) of a stage row's codes and scale are written by
// the copying lane into a per-stage byte table.
//
// Activations beyond the fp16 range: tier blocks multiply fp16 activations,
// so |x| > 65504 would become inf.  A block whose MMA sums are not finite is
// recomputed with every token's activations scaled by a power of two (per
// token and unit, exact) and the sums scaled back (block_redo below); normal
// data never takes that path (one finiteness test per block).
namespace dec {

constexpr int ROWS = 32;                   // weight rows per task (two 16-row MMA tiles)
constexpr int TN = 8;                      // tokens per MMA tile; a task has NT tiles (1 or 2)
constexpr uint32_t TIER_PITCH = 144, TIER_SCALE_AT = 112;
// The table variants leave the block scales in global memory (read once per
// stage and row) and stage the codes alone: pitch 112 bytes (28 words, so the
// code-word loads of rows g = 0..7 still land 4 banks apart), which leaves
// room for 12 warps x 2 stages beside the 128 KB table.
constexpr uint32_t TAB_PITCH = 112;
template <bool TAB> __host__ __device__ constexpr uint32_t pitch() { return TAB ? TAB_PITCH : TIER_PITCH; }
constexpr uint32_t FETCH = 1 + STRATA_MOE_MAX_SLOTS; // p.sync index of the task counter
constexpr int QLEN = 8;                    // per-warp queue of fetched task ids
constexpr uint32_t SMEM_MAX = 227 * 1024;    // dynamic shared memory a CTA may have (sm_90)

template <int NW, int NS, bool TAB = false> struct DGeo {
	static constexpr uint32_t ROFF = 2 * ROWS;     // misalignment bytes per stage
	static constexpr uint32_t QBYTES = 4 * QLEN;
	// Per warp: NS stages | NS x ROFF | queue; then (TAB) the codebook table
	// of the tier formats (tcq_tab_fill, kfmt_tiers.cuh) at TAB_AT.
	static constexpr uint32_t STAGE = ROWS * pitch<TAB>();
	static constexpr uint32_t WARP = NS * (STAGE + ROFF) + QBYTES;
	static constexpr uint32_t TAB_AT = NW * WARP;
	static constexpr uint32_t SMEM = TAB_AT + (TAB ? TCQ_TAB_BYTES : 0);
	static_assert(SMEM <= SMEM_MAX, "decode kernel shared memory");
};

// End of a warp-streaming kernel (this one, bfd::bfd_kernel): the last of its
// nwarps warps out resets the launch's counters for the next launch.
__device__ __forceinline__ void last_out_reset(const MoeParams &p, uint32_t nwarps)
{
	__syncwarp();
	if ((threadIdx.x & 31) == 0) {
		fence_gpu();
		unsigned prev = atomicAdd(p.sync, 1u);
		if (prev == nwarps - 1) {
			for (uint32_t s = 0; s < p.n_slots; s++)
				p.sync[1 + s] = 0;
			p.sync[FETCH] = 0;
			p.sync[0] = 0;
			fence_gpu();
		}
	}
}

// Task k.t of this kernel (Task of the persistent kernel: slot, format, row
// tile rt, token tile tt, split-K part), from its first chunk; a chunk is one
// 256-weight block, a part p.kbg (gate|up) or p.kbd (down) of them.
__device__ __forceinline__ void dtask_info(const MoeParams &p, Task &k)
{
	task_find(p, k.t, ROWS / 2, ROWS, k, p.sgu, p.sdn);
	const uint32_t nb = p.tab[k.fmt].pc[k.down] / 256, kb = k.down ? p.kbd : p.kbg;
	k.kc0 = k.kc = k.part * kb;
	k.nkc = min(k.kc0 + kb, nb);
}

// End of a gate|up task: h = silu(gate) * up of its rows x tokens (c[n][0][i]
// gate, c[n][1][i] up: rows g, g+8, tokens 8n + 2t, 8n + 2t + 1 of the task's
// tile), then the slot's count of finished gate|up tasks.  Split-K: every part
// adds its partial sums to gus; the part that completes the count reads them
// back, writes h, puts gus and the count back to zero for the next launch and
// counts the task.
template <int NT> __device__ __forceinline__ void gu_finish(const MoeParams &p, const Task &k, const float (&c)[NT][2][4])
{
	const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	const Slot &s = p.slot[k.slot];
	// (n, i): this lane's row and token, their h index and their gate sum in
	// gus (the up sum p.inter floats on); false outside the matrix or the slot.
	uint32_t row, tl;
	uint64_t hi;
	float *gu;
	auto at = [&](int n, int i) {
		row = k.rt * (ROWS / 2) + g + 8 * (i >> 1), tl = k.tt * TN * NT + 8 * n + 2 * t + (i & 1);
		hi = (uint64_t)tl * p.inter + row;
		gu = p.gus + 2 * ((uint64_t)s.h_off + (uint64_t)tl * p.inter) + row;
		return row < p.inter && tl < s.ntok;
	};
	if (p.sgu > 1) {
#pragma unroll
		for (int n = 0; n < NT; n++)
#pragma unroll
			for (int i = 0; i < 4; i++)
				if (at(n, i)) {
					atomicAdd(gu, c[n][0][i]);
					atomicAdd(gu + p.inter, c[n][1][i]);
				}
		fence_gpu();
		__syncwarp();
		uint32_t done = 0;
		if (lane == 0)
			done = atomicAdd(p.gucnt + k.t / p.sgu, 1u);
		if (__shfl_sync(0xffffffffu, done, 0) != p.sgu - 1)
			return;
		fence_gpu();
	}
#pragma unroll
	for (int n = 0; n < NT; n++)
#pragma unroll
		for (int i = 0; i < 4; i++)
			if (at(n, i)) {
				float gv = c[n][0][i], uv = c[n][1][i];
				if (p.sgu > 1) {
					gv = __ldcg(gu), uv = __ldcg(gu + p.inter);
					gu[0] = gu[p.inter] = 0.0f;
				}
				p.h[s.h_off + hi] = gv / (1.0f + expf(-gv)) * uv;
			}
	if (p.sgu > 1 && lane == 0)
		p.gucnt[k.t / p.sgu] = 0;
	fence_gpu();
	__syncwarp();
	if (lane == 0)
		atomicAdd(p.sync + 1 + k.slot, 1u);
}

// Stage row i of task k: its matrix row (or -1 past the matrix) and matrix base.
__device__ __forceinline__ int stage_row(const MoeParams &p, const Task &k, int i, const uint8_t *&mat)
{
	const FmtTab &f = p.tab[k.fmt];
	const uint8_t *ext = p.slot[k.slot].ext;
	uint32_t r;
	if (k.down) {
		mat = ext + f.off[2];
		r = k.rt * ROWS + i;
		return r < p.hidden ? (int)r : -1;
	}
	mat = ext + f.off[i < ROWS / 2 ? 0 : 1];
	r = k.rt * (ROWS / 2) + (i & (ROWS / 2 - 1));
	return r < p.inter ? (int)r : -1;
}

// This lane's stage row of task k: the codes and the scale of its first
// chunk k.kc, or nullptr past the matrix (set when a task is fetched).
struct LaneRow {
	const uint8_t *c, *s;
	uint32_t cb, sb;       // code / scale bytes per chunk
};
__device__ __forceinline__ LaneRow lane_row(const MoeParams &p, const Task &k)
{
	const FmtTab &f = p.tab[k.fmt];
	const uint8_t *mat;
	LaneRow l = { nullptr, nullptr, f.cb, f.sb };
	int r = stage_row(p, k, threadIdx.x & 31, mat);
	if (r >= 0) {
		const uint32_t d = k.down, nb = f.pc[d] / 256;
		l.c = mat + (uint64_t)r * f.rowc[d] + (uint64_t)k.kc * f.cb;
		l.s = mat + f.soff[d] + ((uint64_t)r * nb + k.kc) * f.sb;
	}
	return l;
}

// Lane l copies stage row l of the chunk at l.c / l.s into the stage at shared
// address buf (TAB: the codes alone, pitch TAB_PITCH), and advances l to the
// next chunk.
template <bool TAB = false> __device__ __forceinline__ void issue(LaneRow &l, uint32_t buf, uint8_t *roff)
{
	const int lane = threadIdx.x & 31;
	if (!l.c) {
		// Past the matrix: nothing to copy; the row's (unused) sums must still
		// decode from in-bounds, aligned shared addresses.
		roff[2 * lane] = roff[2 * lane + 1] = 0;
		return;
	}
	const uint8_t *c0 = (const uint8_t *)((uintptr_t)l.c & ~(uintptr_t)15);
	const uint8_t *s0 = (const uint8_t *)((uintptr_t)l.s & ~(uintptr_t)15);
	const uint32_t nc = (uint32_t)(((uintptr_t)l.c & 15) + l.cb + 15) >> 4;
	const uint32_t dst = buf + lane * pitch<TAB>();
	roff[2 * lane] = (uint8_t)((uintptr_t)l.c & 15);
	roff[2 * lane + 1] = (uint8_t)((uintptr_t)l.s & 15);
	// nc <= 7 for the tier formats (at most 88 code bytes from a misalignment
	// of at most 15) and q3 (96 aligned bytes), 8 for q4 (128 aligned bytes,
	// its scales after them: SCALE_AT of the formats' functors)
#pragma unroll
	for (uint32_t j = 0; j < 8; j++)
		if (j < nc)
			cp_async16(dst + 16 * j, c0 + 16 * j);
	if (!TAB)
		cp_async16(dst + (l.cb == STRATA_Q4_CODE_BYTES ? STRATA_Q4_CODE_BYTES : TIER_SCALE_AT), s0);
	l.c += l.cb, l.s += l.sb;
}

// MMAs of one 32-weight unit: stage rows g, g+8 of tiles 0 and 1 (decoded
// once) times this lane's packed activations of each 8-token tile n, into
// c[n][2][4].  TAB: the codebook through the table at tb (decode8t).
template <class F, int NT, bool TAB>
__device__ __forceinline__ void unit_mma(const uint32_t (&rc)[2][2], uint32_t j, const uint32_t (&b)[NT][4],
					 float (&c)[NT][2][4], uint32_t tb)
{
#pragma unroll
	for (int m = 0; m < 2; m++) {
		uint32_t a[2][4];
		if constexpr (TAB) {
			F::decode8t(rc[m][0], j, tb, a[0]);
			F::decode8t(rc[m][1], j, tb, a[1]);
		} else {
			F::decode8(rc[m][0], 0, j, 0, a[0]);
			F::decode8(rc[m][1], 0, j, 0, a[1]);
		}
#pragma unroll
		for (int n = 0; n < NT; n++) {
			mma_bf16<F::F16>(c[n][m], a[0][0], a[1][0], a[0][1], a[1][1], b[n][0], b[n][1]);
			mma_bf16<F::F16>(c[n][m], a[0][2], a[1][2], a[0][3], a[1][3], b[n][2], b[n][3]);
		}
	}
}

// Slow path of a tier block whose sums were not finite: per unit, every
// token's activations are scaled by 2^-e (e >= 0 from the token's largest
// magnitude among the unit's 32 columns, so the fp16 values stay below 2^14)
// and that unit's sums scaled back by 2^e.
// Whether any lane of the warp holds a non-finite sum in its tier block
// (the fp16 range guard of compute and compute_sq: recompute the block).
template <int NT> __device__ __forceinline__ bool warp_nonfinite(const float (&blk)[NT][2][4])
{
	bool bad = false;
#pragma unroll
	for (int n = 0; n < NT; n++)
#pragma unroll
		for (int m = 0; m < 2; m++)
#pragma unroll
			for (int i = 0; i < 4; i++)
				bad |= !isfinite(blk[n][m][i]);
	return __any_sync(0xffffffffu, bad);
}

template <class F, int NT, bool TAB>
__device__ __forceinline__ void block_redo(const MoeParams &p, bool d, const float *const (&xr)[NT],
					const bool (&have)[NT], uint32_t k0, uint32_t cols,
					const uint32_t (&rc)[2][2], float (&blk)[NT][2][4], uint32_t tb)
{
	const int lane = threadIdx.x & 31, t = lane & 3;
	for (uint32_t u = 0; u < 8; u++) {
		float x[NT][8];
		act_load<NT>(p, d, xr, have, k0 + u * 32 + 8 * t, cols, x);
		int e[NT];
		uint32_t b[NT][4];
		float c[NT][2][4] = {};
#pragma unroll
		for (int n = 0; n < NT; n++) {
			e[n] = unit_exp(x[n]);
			pack_b(x[n], b[n], ldexpf(1.0f, -e[n]));
		}
		unit_mma<F, NT, TAB>(rc, 4 * u + t, b, c, tb);
#pragma unroll
		for (int n = 0; n < NT; n++) {
			float cm[2];
			col_mul(e[n], t, cm);
#pragma unroll
			for (int m = 0; m < 2; m++) {
				if (u == 0)
					blk[n][m][0] = blk[n][m][1] = blk[n][m][2] = blk[n][m][3] = 0.0f;
				blk[n][m][0] += cm[0] * c[n][m][0], blk[n][m][1] += cm[1] * c[n][m][1];
				blk[n][m][2] += cm[0] * c[n][m][2], blk[n][m][3] += cm[1] * c[n][m][3];
			}
		}
	}
}

// This lane's eight activations at column kk of each token tile (a unit of
// a stage).  full: the whole 256-weight block lies inside the row (every
// block of the usual shapes): two 16-byte loads per token tile, no bounds
// tests; a lane without a token reads the tile's first token row (act_rows),
// whose sums are never stored.  Otherwise act_load's checked loads.
template <int NT>
__device__ __forceinline__ void unit_act(const MoeParams &p, bool d, const float *const (&xr)[NT], const bool (&have)[NT],
					 bool full, uint32_t kk, uint32_t cols, float (&v)[NT][8])
{
	if (full) {
#pragma unroll
		for (int n = 0; n < NT; n++) {
			const float *xb = xr[n] + kk;
			float4 a = __ldca(reinterpret_cast<const float4 *>(xb));
			float4 c = __ldca(reinterpret_cast<const float4 *>(xb + 4));
			v[n][0] = a.x, v[n][1] = a.y, v[n][2] = a.z, v[n][3] = a.w;
			v[n][4] = c.x, v[n][5] = c.y, v[n][6] = c.z, v[n][7] = c.w;
		}
	} else {
		act_load<NT>(p, d, xr, have, kk, cols, v);
	}
}

// The set-up of one stage of task k that compute and compute_sq share: this
// lane's row group g and column t, the matrix (d: down) and its width cols,
// the activation rows xr / have of the task's NT tiles (act_rows), and the
// first column k0 of the task's 256-weight block.  A macro rather than a
// function returning them: as plain locals their value ranges (t < 4) reach
// the decoders' address arithmetic, which a returned struct lost in one
// decode variant (12x4, two tiles: extra instructions per shared-memory
// load in its PTX).
#define STRATA_STAGE_SETUP(NT)                                              \
	const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;    \
	const uint32_t d = k.down, cols = d ? p.inter : p.hidden;          \
	const float *xr[NT];                                               \
	bool have[NT];                                                     \
	act_rows<NT, TN * NT>(p, k, p.slot[k.slot], g, xr, have);          \
	const uint32_t k0 = k.kc * 256

// One stage of task k (at shared offset sbuf, misalignments roff): acc += its
// product, for the task's NT tiles of 8 tokens (TAB: codebook table at tb).
template <class F, bool UNROLL, int NT, bool TAB>
__device__ __forceinline__ void compute(const MoeParams &p, const Task &k, uint32_t sbuf, const uint8_t *roff,
					float (&acc)[NT][2][4], uint32_t tb)
{
	STRATA_STAGE_SETUP(NT);
	uint32_t rc[2][2], rs[2][2];
	float sg[2][2]; // TAB: the block scales, from global memory (0 past the matrix)
#pragma unroll
	for (int m = 0; m < 2; m++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int i = 16 * m + 8 * h + g;
			rc[m][h] = sbuf + i * pitch<TAB>() + roff[2 * i];
			if constexpr (TAB) {
				const uint8_t *mat;
				const int r = stage_row(p, k, i, mat);
				const FmtTab &f = p.tab[k.fmt];
				sg[m][h] = r < 0 ? 0.0f
						 : F::scale(mat + f.soff[d] + ((uint64_t)r * (f.pc[d] / 256) + k.kc) * f.sb);
			} else {
				rs[m][h] = sbuf + i * TIER_PITCH + TIER_SCALE_AT + roff[2 * i + 1];
			}
		}
	float blk[NT][2][4] = {};
	float cur[NT][8], nxt[NT][8];
	const bool full = p.vec && k0 + 256 <= cols;
	auto load = [&](uint32_t u, float (&v)[NT][8]) {
		unit_act<NT>(p, d, xr, have, full, k0 + 32 * u + 8 * t, cols, v);
	};
	load(0, cur);
	auto step = [&](uint32_t u) {
		uint32_t b[NT][4];
#pragma unroll
		for (int n = 0; n < NT; n++)
			pack_b(cur[n], b[n]);
		if (u < 7)
			load(u + 1, nxt);
		unit_mma<F, NT, TAB>(rc, 4 * u + t, b, blk, tb);
#pragma unroll
		for (int n = 0; n < NT; n++)
#pragma unroll
			for (int i = 0; i < 8; i++)
				cur[n][i] = nxt[n][i];
	};
	// UNROLL: all 8 units in one straight line (more registers, more overlap
	// between one unit's decode and the previous unit's MMAs).
	if constexpr (UNROLL) {
#pragma unroll
		for (uint32_t u = 0; u < 8; u++)
			step(u);
	} else {
#pragma unroll 2
		for (uint32_t u = 0; u < 8; u++)
			step(u);
	}
	if (warp_nonfinite<NT>(blk))
		block_redo<F, NT, TAB>(p, d, xr, have, k0, cols, rc, blk, tb);
#pragma unroll
	for (int m = 0; m < 2; m++) {
		float s0, s1;
		if constexpr (TAB)
			s0 = sg[m][0], s1 = sg[m][1];
		else
			s0 = F::scale(rs[m][0]), s1 = F::scale(rs[m][1]);
#pragma unroll
		for (int n = 0; n < NT; n++) {
			acc[n][m][0] = fmaf(s0, blk[n][m][0], acc[n][m][0]);
			acc[n][m][1] = fmaf(s0, blk[n][m][1], acc[n][m][1]);
			acc[n][m][2] = fmaf(s1, blk[n][m][2], acc[n][m][2]);
			acc[n][m][3] = fmaf(s1, blk[n][m][3], acc[n][m][3]);
		}
	}
}

// One stage of task k for a scalar-format expert (q4, q3; kfmt_scalar.cuh;
// launches of at most 8 tokens per expert in one scalar format take
// moe_dec_sq.cuh's kernel instead):
// every lane loads its code words of rows g, g+8 of both tiles once, then per
// 32-weight group decodes 8 weights per row, multiplies on tensor cores and
// adds the group's sums times the row's group scale (f32) into acc.  The
// fp16 range guard as in compute: a block whose sums are not finite is
// recomputed with each token's activations of each group scaled by 2^-e.
template <class F, int NT>
__device__ __forceinline__ void compute_sq(const MoeParams &p, const Task &k, uint32_t sbuf, const uint8_t *roff,
					   float (&acc)[NT][2][4])
{
	STRATA_STAGE_SETUP(NT);
	typename F::Lane ln[2][2];
	uint32_t rs[2][2];
#pragma unroll
	for (int m = 0; m < 2; m++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int i = 16 * m + 8 * h + g;
			F::load(sbuf + i * TIER_PITCH + roff[2 * i], t, ln[m][h]);
			rs[m][h] = sbuf + i * TIER_PITCH + F::SCALE_AT + roff[2 * i + 1];
		}
	const bool full = p.vec && k0 + 256 <= cols;
	float blk[NT][2][4] = {};
	// Group U of the block with activations x (times 2^-e[n] when redo) into sums.
	auto group = [&](auto UC, const float (&x)[NT][8], bool redo, float (&sums)[NT][2][4]) {
		constexpr int U = decltype(UC)::value;
		uint32_t b[NT][4];
		int e[NT];
#pragma unroll
		for (int n = 0; n < NT; n++) {
			e[n] = redo ? unit_exp(x[n]) : 0;
			pack_b(x[n], b[n], redo ? ldexpf(1.0f, -e[n]) : 1.0f);
		}
#pragma unroll
		for (int m = 0; m < 2; m++) {
			uint32_t a[2][4];
			F::template group<U>(ln[m][0], a[0]);
			F::template group<U>(ln[m][1], a[1]);
			const float s0 = F::gscale(rs[m][0], U), s1 = F::gscale(rs[m][1], U);
#pragma unroll
			for (int n = 0; n < NT; n++) {
				float c[4] = {};
				mma_bf16<true>(c, a[0][0], a[1][0], a[0][1], a[1][1], b[n][0], b[n][1]);
				mma_bf16<true>(c, a[0][2], a[1][2], a[0][3], a[1][3], b[n][2], b[n][3]);
				float cm[2] = { 1.0f, 1.0f };
				if (redo)
					col_mul(e[n], t, cm);
				sums[n][m][0] = fmaf(s0 * cm[0], c[0], sums[n][m][0]);
				sums[n][m][1] = fmaf(s0 * cm[1], c[1], sums[n][m][1]);
				sums[n][m][2] = fmaf(s1 * cm[0], c[2], sums[n][m][2]);
				sums[n][m][3] = fmaf(s1 * cm[1], c[3], sums[n][m][3]);
			}
		}
	};
	auto load = [&](uint32_t u, float (&v)[NT][8]) {
		unit_act<NT>(p, d, xr, have, full, k0 + 32 * u + 8 * t, cols, v);
	};
	auto pass = [&](bool redo, float (&sums)[NT][2][4]) {
		float x[NT][8];
		load(0, x); group(std::integral_constant<int, 0>(), x, redo, sums);
		load(1, x); group(std::integral_constant<int, 1>(), x, redo, sums);
		load(2, x); group(std::integral_constant<int, 2>(), x, redo, sums);
		load(3, x); group(std::integral_constant<int, 3>(), x, redo, sums);
		load(4, x); group(std::integral_constant<int, 4>(), x, redo, sums);
		load(5, x); group(std::integral_constant<int, 5>(), x, redo, sums);
		load(6, x); group(std::integral_constant<int, 6>(), x, redo, sums);
		load(7, x); group(std::integral_constant<int, 7>(), x, redo, sums);
	};
	pass(false, blk);
	if (warp_nonfinite<NT>(blk)) {
#pragma unroll
		for (int n = 0; n < NT; n++)
#pragma unroll
			for (int m = 0; m < 2; m++)
				blk[n][m][0] = blk[n][m][1] = blk[n][m][2] = blk[n][m][3] = 0.0f;
		pass(true, blk);
	}
#pragma unroll
	for (int n = 0; n < NT; n++)
#pragma unroll
		for (int m = 0; m < 2; m++)
#pragma unroll
			for (int i = 0; i < 4; i++)
				acc[n][m][i] += blk[n][m][i];
}

#undef STRATA_STAGE_SETUP

// SQ: the launch may hold scalar-format experts (compute_sq compiled in; a
// tier-only launch takes SQ = false: compute_sq in the same kernel took the
// registers of the tier path from 115 to 168, with 700 bytes of spills).
template <int NW, int NS, bool UNROLL, int NT, bool TAB, bool SQ>
__global__ void __launch_bounds__(32 * NW, 1) dec_kernel(const __grid_constant__ MoeParams p)
{
	using G = DGeo<NW, NS, TAB>;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	constexpr uint32_t stage = G::STAGE;
	// This warp's shared memory: stages, misalignment tables, task queue.
	const uint32_t wbase = warp * (NS * (stage + G::ROFF) + G::QBYTES);
	const uint32_t sb0 = (uint32_t)__cvta_generic_to_shared(g_smem) + wbase; // for cp.async
	uint8_t *roffs = g_smem + wbase + NS * stage;
	uint32_t *queue = reinterpret_cast<uint32_t *>(roffs + NS * G::ROFF);
	// Chained (strata_gpu_moe_stack): tasks come from a counter the earlier
	// launch resets, so wait before the first fetch.
	if (p.chain) {
		l2_prefetch(p, 0, p.npf);
		pdl_trigger();
		pdl_wait();
	}
	if constexpr (TAB) {
		tcq_tab_fill(G::TAB_AT, threadIdx.x, 32 * NW);
		__syncthreads();
	}
	const uint32_t tb = tcq_tab_base(G::TAB_AT);

	auto fetch = [&]() -> uint32_t {
		uint32_t v = 0;
		if (lane == 0)
			v = atomicAdd(p.sync + FETCH, 1u);
		return __shfl_sync(0xffffffffu, v, 0);
	};
	Task ld, cp;
	LaneRow lr = {};
	uint32_t lseq = 0, cseq = 0;
	ld.t = fetch();
	if (ld.t < p.n_tasks) {
		dtask_info(p, ld);
		lr = lane_row(p, ld);
	}
	queue[0] = ld.t; // every lane writes the same value
	lseq = 1;
	auto advance_ld = [&]() {
		if (++ld.kc == ld.nkc) {
			ld.t = fetch();
			if (lane == 0)
				queue[lseq % QLEN] = ld.t;
			lseq++;
			if (ld.t < p.n_tasks) {
				dtask_info(p, ld);
				lr = lane_row(p, ld);
			}
		}
	};
	for (int s = 0; s < NS - 1; s++) {
		if (ld.t < p.n_tasks) {
			issue<TAB>(lr, sb0 + s * stage, roffs + s * G::ROFF);
			advance_ld();
		}
		cp_commit();
	}
	__syncwarp();
	cp.t = queue[0];
	cseq = 1;
	if (cp.t < p.n_tasks)
		dtask_info(p, cp);
	float acc[NT][2][4];
	for (uint32_t it = 0; cp.t < p.n_tasks; it++) {
		cp_wait<NS - 2>();
		__syncwarp(); // every lane's copies of stage it are visible; stage it-1 is consumed
		if (ld.t < p.n_tasks) {
			uint32_t sl = (it + NS - 1) % NS;
			issue<TAB>(lr, sb0 + sl * stage, roffs + sl * G::ROFF);
			advance_ld();
		}
		cp_commit();
		if (cp.kc == cp.kc0) {
#pragma unroll
			for (int n = 0; n < NT; n++)
#pragma unroll
				for (int m = 0; m < 2; m++)
					acc[n][m][0] = acc[n][m][1] = acc[n][m][2] = acc[n][m][3] = 0.0f;
			if (cp.down) {
				const Slot &s = p.slot[cp.slot];
				uint32_t need = (p.inter + ROWS / 2 - 1) / (ROWS / 2) * ((s.ntok + TN * NT - 1) / (TN * NT));
				if (lane == 0)
					wait_at_least(p.sync + 1 + cp.slot, need, 64, "gate|up tasks of slot", cp.slot);
				__syncwarp();
			}
		}
		const uint32_t sl = it % NS;
		const uint32_t sbuf = wbase + sl * stage;
		switch (cp.fmt) {
		STRATA_TIER_CASES((compute<F, UNROLL, NT, TAB>(p, cp, sbuf, roffs + sl * G::ROFF, acc, tb)))
		default:
			if constexpr (SQ) {
				switch (cp.fmt) {
				STRATA_SCALAR_CASES((compute_sq<F, NT>(p, cp, sbuf, roffs + sl * G::ROFF, acc)))
				default: break;
				}
			}
			break;
		}
		if (++cp.kc == cp.nkc) {
			const Slot &s = p.slot[cp.slot];
			// c[.][0], c[.][1]: row g, tokens 2t, 2t+1; c[.][2], c[.][3]: row g+8.
			if (!cp.down) {
				gu_finish<NT>(p, cp, acc);
			} else {
#pragma unroll
				for (int n = 0; n < NT; n++)
#pragma unroll
					for (int m = 0; m < 2; m++)
#pragma unroll
						for (int i = 0; i < 4; i++) {
							uint32_t row = cp.rt * ROWS + 16 * m + g + 8 * (i >> 1);
							uint32_t tl = cp.tt * TN * NT + 8 * n + 2 * t + (i & 1);
							if (row < p.hidden && tl < s.ntok)
								atomicAdd(p.y + (uint64_t)p.tok[s.a0 + tl] * p.hidden + row,
									  p.w[s.a0 + tl] * acc[n][m][i]);
						}
			}
			__syncwarp();
			cp.t = queue[cseq % QLEN];
			cseq++;
			if (cp.t < p.n_tasks)
				dtask_info(p, cp);
		}
	}
	cp_wait<0>();
	last_out_reset(p, gridDim.x * NW);
}

} // namespace dec

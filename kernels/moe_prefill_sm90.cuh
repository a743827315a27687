// Hopper prefill path: the tiled prefill of moe_prefill.cuh (same pf_prep,
// same PParams, same slots, the same fp16 range guard) with the MMAs on the
// warpgroup tensor-core instructions of sm_90a (wgmma.mma_async).  Included
// by moe_gpu.cu inside its anonymous namespace, after moe_prefill.cuh.
//
// A CTA is two warpgroups (256 threads) and one tile of 128 weight rows
// (gate|up: 64 gate rows and the same 64 up rows; down: 128 rows) x BN
// tokens; warpgroup w takes tokens w*NT .. w*NT+NT-1 of the tile and every
// row: two wgmma m64nNTk16 per 16 weights (rows 0..63 and 64..127), both
// operands K-major from shared memory in the 128-byte swizzled layout (the
// layout pf::swz already writes: 16-byte chunk c of row i at chunk c ^ (i%8)
// of the row's 128 bytes; 8-row groups 1024 bytes apart), f32 accumulators
// in registers.
//   bf16 experts: NT = 128 (BN = 256, one token tile at 256 tokens), weight
//     and activation tiles both staged by cp.async straight into that layout;
//   tier experts: NT = 64 (BN = 128): the block scale is applied to the MMA
//     sum of each 256-weight block (exact, as the mma path), so a warpgroup
//     holds the block's sums (tmp) beside the accumulators; the packed rows
//     are staged by cp.async and decoded by all 256 threads into a
//     triple-buffered fp16 tile (exact codebook values, the format's decode8)
//     one K step ahead of the wgmmas that read it.
// K steps of 64 weights.  A step's wgmmas are issued asynchronously; while
// the tensor cores run them the threads issue the copies D = NS-2 steps ahead
// and decode the next step (tier), then wait for the step before (so a ring
// slot or decoded tile is reused only after every wgmma that read it is
// done: wgmma.wait_group 1 in each warpgroup, then the CTA barrier).  A tier
// block's last step waits for its own wgmmas and folds tmp into the
// accumulators with the rows' block scales.  Tier down tiles with a token
// whose h segment was scaled by 2^-e (pf_prep / the gate|up epilogue) fold
// every 32 columns with block scale x 2^e of the token (SEGS), as the mma
// path does.
// Epilogues as moe_prefill.cuh: gate|up h = silu(gate) * up into hs (bf16, or
// fp16 with the per-token segment exponents), down y[tok] += w * acc with
// atomics.
// The wgmma code exists only when the file is compiled for sm_90a
// (__CUDA_ARCH_FEAT_SM90_ALL); pf90::probe reports whether the loaded code has
// it, and the dispatch takes this path only then (otherwise moe_prefill.cuh).
// Measured on the H200 (experiments/kernels/README.md, Hopper prefill): bf16
// experts 1.11x cuBLAS BF16 at the Kimi shape, 256 tokens per expert (the
// mma.sync kernel 0.73); tier experts 0.40 (tile) and 0.26 (tile_ws) against
// the mma.sync kernel's 0.46: their decode into shared memory, not the MMAs,
// bounds them, and fewer warps decode here.  tile_p (prefill=sm90p*) runs
// tier experts as BF16 tiles of 256 tokens with the decode in producer
// warpgroups: 0.88-0.90 of cuBLAS BF16 at 256 tokens as sm90pc, 0.72-0.73 at
// 32-64 (the mma.sync kernel 0.42-0.43 and 0.59-0.63).  tile_pp
// (prefill=sm90pp, sm90pp2) runs sm90pc's tile persistently, a CTA per SM
// and its tiles through one buffer ring: 1.008 / 1.000 / 1.011 of cuBLAS BF16
// for hot / warm / cold at 256 tokens as sm90pp2 (sm90pc 0.889 / 0.883 /
// 0.901 in the same call), 0.76 at 32.  The dispatch's auto takes this kernel
// for bf16 experts with >= 192 tokens and, as sm90pp2, for tier experts with
// >= prefill_tiles tokens (kernels.h).
namespace pf90 {

using pf::BK;
using pf::PParams;
using pf::PSlot;
using pf::RAW_PITCH;
using pf::RAW_SCALE;
using pf::SEG;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define STRATA_PF90 1
#else
#define STRATA_PF90 0
#endif

template <bool TIER> struct Geo {
	static constexpr int NT = TIER ? 64 : 128; // tokens per warpgroup
	static constexpr int BM = 128, BN = 2 * NT, NTHR = 256;
	static constexpr int NS = TIER ? 5 : 4, D = NS - 2; // ring slots, copy distance (K steps)
	static constexpr int NDEC = TIER ? 3 : 0;          // decoded tiles
	static constexpr int RSTEP = NTHR / 8, RPTA = BM / RSTEP, RPTB = BN / RSTEP;
	static constexpr uint32_t A_BYTES = BM * BK * 2;
	static constexpr uint32_t ASRC = TIER ? BM * RAW_PITCH : A_BYTES;
	static constexpr uint32_t B_BYTES = BN * BK * 2;
	static constexpr uint32_t STAGE = ASRC + B_BYTES;
	static constexpr uint32_t DEC_OFF = NS * STAGE;
	static constexpr uint32_t SC_OFF = DEC_OFF + NDEC * A_BYTES;
	static constexpr uint32_t EX_OFF = SC_OFF + NDEC * BM * 4;
	static constexpr uint32_t SMEM = EX_OFF + BN * 4 + 1024; // + alignment of the base to 1024
	static_assert(ASRC % 1024 == 0 && STAGE % 1024 == 0 && A_BYTES % 1024 == 0, "swizzled tiles 1024-aligned");
	static_assert(SMEM <= 227 * 1024, "sm90 prefill shared memory");
};

// Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups
// 1024 bytes apart (leading byte offset unused: 1).
__device__ __forceinline__ uint64_t desc(uint32_t addr)
{
	return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}
__device__ __forceinline__ void wg_fence()
{
#if STRATA_PF90
	asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit()
{
#if STRATA_PF90
	asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void wg_wait()
{
#if STRATA_PF90
	asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// After a wait: the compiler must not move reads of accumulators above it.
template <int N> __device__ __forceinline__ void reg_fence(float *r)
{
#pragma unroll
	for (int i = 0; i < N; i++)
		asm volatile("" : "+f"(r[i])::"memory");
}

#if STRATA_PF90
__device__ __forceinline__ void wgmma_f16_n64(float *d, uint64_t a, uint64_t b, uint32_t acc)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
		     "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
		     "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
		       "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
		       "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
		       "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
		     : "l"(a), "l"(b), "r"(acc));
}

// m64n128k16 with bf16 (H = false) or fp16 (H = true) operands.
#define STRATA_WGMMA_N128(TY) \
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
		     "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {" \
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
		     "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
		     "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
		     "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63" \
		     "}, %64, %65, p, 1, 1, 0, 0;\n}\n" \
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
		       "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
		       "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
		       "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
		       "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
		       "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
		       "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
		       "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
		     : "l"(a), "l"(b), "r"(acc))
template <bool H> __device__ __forceinline__ void wgmma_n128(float *d, uint64_t a, uint64_t b, uint32_t acc)
{
	if constexpr (H)
		STRATA_WGMMA_N128("f16");
	else
		STRATA_WGMMA_N128("bf16");
}
#undef STRATA_WGMMA_N128
#else
__device__ __forceinline__ void wgmma_f16_n64(float *, uint64_t, uint64_t, uint32_t) {}
template <bool H> __device__ __forceinline__ void wgmma_n128(float *, uint64_t, uint64_t, uint32_t) {}
#endif

// acc += tmp times the rows' block scales sc (tile rows) and, when SEGS, 2^e
// of each token's h segment sg.  col0: the tile's token of this warpgroup's
// first column; wq, g, t: the thread's warp in its warpgroup and lane / 4,
// lane % 4.
template <bool SEGS, int NA>
__device__ __forceinline__ void fold(float (&acc)[2][NA], const float (&tmp)[2][NA], const float *sc,
				     const PParams &p, const PSlot &s, uint32_t col0, int wq, int g, int t, uint32_t sg)
{
	float sv[2][2];
#pragma unroll
	for (int m = 0; m < 2; m++)
#pragma unroll
		for (int h = 0; h < 2; h++)
			sv[m][h] = sc[64 * m + 16 * wq + g + 8 * h];
#pragma unroll
	for (int c = 0; c < NA / 2; c++) {
		float f = 1.0f;
		if constexpr (SEGS) {
			const uint32_t tl = col0 + 8 * (c >> 1) + 2 * t + (c & 1);
			f = tl < s.ntok ? pf::exp2i(p.hexp[(uint64_t)(s.a0 + tl) * p.nseg + sg]) : 0.0f;
		}
#pragma unroll
		for (int m = 0; m < 2; m++)
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const int i = 4 * (c >> 1) + 2 * h + (c & 1);
				acc[m][i] = fmaf(sv[m][h] * f, tmp[m][i], acc[m][i]);
			}
	}
	(void)p, (void)s, (void)sg;
}

// Epilogue of a tile (acc as tile's, NA = NT / 2 accumulators per row half:
// 64 or 128 tokens per warpgroup): gate|up h = silu(gate) * up into hs, down
// y[tok] += w * acc.  ctid: the thread's index among the 256 threads of the
// two MMA warpgroups; ex_off: the tile's [BN] exponents in g_smem (tier
// gate|up; zeroed before); sync: a barrier of those 256 threads.
template <class F, bool DOWN, int NA, class SYNC>
__device__ __forceinline__ void epilogue(const PParams &p, const PSlot &s, uint32_t row0, uint32_t tok0,
					 float (&acc)[2][NA], int ctid, uint32_t ex_off, SYNC sync)
{
	constexpr bool TIER = F::SCALED;
	constexpr int NT = 2 * NA, BM = 128, BN = 2 * NT;
	const int wg = ctid >> 7, wq = (ctid >> 5) & 3, lane = ctid & 31, g = lane >> 2, t = lane & 3;
	auto col_of = [&](int q) -> uint32_t { return (uint32_t)(wg * NT + 8 * (q >> 2) + 2 * t + (q & 1)); };
	auto row_of = [&](int m, int q) -> uint32_t { return (uint32_t)(64 * m + 16 * wq + g + 8 * ((q >> 1) & 1)); };
	if constexpr (!DOWN && !TIER) {
#pragma unroll
		for (int q = 0; q < NA; q++) {
			const uint32_t row = row0 + row_of(0, q), tl = tok0 + col_of(q);
			if (row < p.inter && tl < s.ntok) {
				const float gv = acc[0][q], uv = acc[1][q];
				__nv_bfloat16 hb = __float2bfloat16_rn(gv / (1.0f + expf(-gv)) * uv);
				p.hs[(uint64_t)(s.a0 + tl) * p.ldh + row] = *reinterpret_cast<uint16_t *>(&hb);
			}
		}
	} else if constexpr (!DOWN) {
		// Tier: gate and up times 2^e of the activation row, h into acc[0], per
		// token the exponent that keeps the tile's h segments inside fp16.
		// Column c of the thread: accumulators q0 and q0 + 2 (rows g, g + 8).
		int *ex = reinterpret_cast<int *>(g_smem + ex_off);
#pragma unroll
		for (int c = 0; c < NA / 2; c++) {
			const int q0 = (c >> 1) * 4 + (c & 1);
			const uint32_t tl = tok0 + col_of(q0);
			const float xf = tl < s.ntok ? p.xsc[s.a0 + tl] : 1.0f;
			float mx = 0.0f;
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const int q = q0 + 2 * h;
				const float gv = acc[0][q] * xf, uv = acc[1][q] * xf;
				const float hv = row0 + row_of(0, q) < p.inter ? gv / (1.0f + expf(-gv)) * uv : 0.0f;
				acc[0][q] = hv;
				mx = fmaxf(mx, fabsf(hv));
			}
			const uint32_t ev = pf::range_exp(mx);
			if (ev)
				atomicMax(ex + col_of(q0), (int)ev);
		}
		sync();
#pragma unroll
		for (int q = 0; q < NA; q++) {
			const uint32_t row = row0 + row_of(0, q), tl = tok0 + col_of(q);
			if (row < p.inter && tl < s.ntok) {
				__half hh = __float2half_rn(acc[0][q] * pf::exp2i(-ex[col_of(q)]));
				p.hs[(uint64_t)(s.a0 + tl) * p.ldh + row] = *reinterpret_cast<uint16_t *>(&hh);
			}
		}
		// The tile's segments of h (64 columns from row0) for every token.
		for (uint32_t i = ctid; i < BN * (BM / 2 / SEG); i += 256) {
			const uint32_t n = i % BN, sg = i / BN, tl = tok0 + n;
			if (tl < s.ntok && row0 + sg * SEG < p.inter) {
				const int ev = ex[n];
				p.hexp[(uint64_t)(s.a0 + tl) * p.nseg + row0 / SEG + sg] = (uint8_t)ev;
				if (ev)
					p.hbig[s.a0 + tl] = 1;
			}
		}
	} else {
#pragma unroll
		for (int q = 0; q < NA; q++) {
			const uint32_t tl = tok0 + col_of(q);
			if (tl >= s.ntok)
				continue;
			const uint32_t a = s.a0 + tl;
			const float wt = p.w[a];
			float *yr = p.y + (uint64_t)p.tok[a] * p.hidden;
#pragma unroll
			for (int m = 0; m < 2; m++) {
				const uint32_t row = row0 + row_of(m, q);
				if (row < p.hidden)
					atomicAdd(yr + row, wt * acc[m][q]);
			}
		}
	}
}

// One CTA tile of slot s: row tile rt (gate|up: 64 h rows; down: 128 rows),
// token tile tt (BN tokens).  pad: bytes from g_smem to its first 1024-aligned
// byte (every offset below is from there).
template <class F, bool DOWN, bool SEGS>
__device__ __forceinline__ void tile(const PParams &p, const PSlot &s, uint32_t rt, uint32_t tt, uint32_t pad)
{
	constexpr bool TIER = F::SCALED;
	using G = Geo<TIER>;
	constexpr int NT = G::NT, BM = G::BM, BN = G::BN, NS = G::NS, D = G::D, NA = NT / 2;
	constexpr uint32_t STAGE = G::STAGE, ASRC = G::ASRC, A_BYTES = G::A_BYTES;
	const FmtTab &f = p.tab[s.fmt];
	const int tid = threadIdx.x, wg = tid >> 7, wq = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
	const uint32_t d = DOWN;
	const uint32_t nrows = DOWN ? p.hidden : p.inter, cols = DOWN ? p.inter : p.hidden;
	const uint32_t K = TIER ? f.pc[d] : cols, nk = (K + BK - 1) / BK;
	const uint8_t *m0 = s.ext + f.off[DOWN ? 2 : 0], *m1 = s.ext + f.off[DOWN ? 2 : 1];
	const uint64_t rowc = f.rowc[d], rows_ = f.rows_[d], soff = f.soff[d];
	const uint32_t row0 = DOWN ? rt * BM : rt * (BM / 2), tok0 = tt * BN;
	const uint16_t *act = DOWN ? p.hs : p.xs;
	const uint32_t ld = DOWN ? p.ldh : p.ldx;
	const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(g_smem) + pad;
	const uint32_t ci = tid & 7;

	// Copies of K step ks into ring slot `slot` (as pf::tile): thread tid
	// handles chunk tid%8 of rows (and tokens) tid/8 + RSTEP*r.
	auto issue = [&](uint32_t ks, uint32_t slot) {
		const uint32_t sa = sbase + slot * STAGE, sb = sa + ASRC;
#pragma unroll
		for (int r = 0; r < G::RPTA; r++) {
			const uint32_t i = (tid >> 3) + G::RSTEP * r;
			const uint32_t rr = DOWN ? row0 + i : row0 + i % (BM / 2);
			const uint8_t *mat = !DOWN && i >= BM / 2 ? m1 : m0;
			const bool ok = rr < nrows;
			if constexpr (TIER) {
				pf::stage_tier<F>(sa + i * RAW_PITCH, pf::TierRow{ mat, rr, rowc, rows_, soff }, ks >> 2, ci, ok,
						  m0);
			} else {
				const uint32_t k = ks * BK + 8 * ci;
				const bool v = ok && k < cols;
				const uint8_t *src = mat + (uint64_t)rr * rowc + (uint64_t)k * 2;
				pf::cp16z(sa + pf::swz(i, ci), v ? src : m0, v ? 16 : 0);
			}
		}
#pragma unroll
		for (int r = 0; r < G::RPTB; r++) {
			const uint32_t n = (tid >> 3) + G::RSTEP * r, tl = tok0 + n;
			const bool v = tl < s.ntok;
			const uint16_t *src = act + (uint64_t)(s.a0 + (v ? tl : 0)) * ld + ks * BK + 8 * ci;
			pf::cp16z(sb + pf::swz(n, ci), src, v ? 16 : 0);
		}
	};
	// Tier: decode K step ks (ring slot `slot`) into decoded tile db, the rows'
	// block scales into sc[db] (offsets from g_smem for the decoders).
	auto decode = [&](uint32_t ks, uint32_t slot, uint32_t db) {
		if constexpr (TIER) {
			const uint32_t sa = pad + slot * STAGE, b = ks >> 2, j = 8 * (ks & 3) + ci;
#pragma unroll
			for (int r = 0; r < G::RPTA; r++) {
				const uint32_t i = (tid >> 3) + G::RSTEP * r;
				const uint32_t rr = DOWN ? row0 + i : row0 + i % (BM / 2);
				const uint8_t *mat = !DOWN && i >= BM / 2 ? m1 : m0;
				pf::decode_tier<F>(sa + i * RAW_PITCH, pad + G::DEC_OFF + db * A_BYTES, i, ci, j,
						   pf::TierRow{ mat, rr, rowc, rows_, soff }, b,
						   reinterpret_cast<float *>(g_smem + pad + G::SC_OFF) + db * BM + i);
			}
		} else {
			(void)ks, (void)slot, (void)db;
		}
	};

	// Accumulators of subtile m (rows 64m .. 64m+63 of the tile): element q is
	// row 64m + 16wq + g + 8((q>>1)&1), token column wg*NT + 8(q>>2) + 2t + (q&1).
	float acc[2][NA], tmp[TIER ? 2 : 1][TIER ? NA : 1];
#pragma unroll
	for (int m = 0; m < 2; m++)
#pragma unroll
		for (int q = 0; q < NA; q++)
			acc[m][q] = 0.0f;
	if constexpr (TIER && !DOWN) {
		for (int n = tid; n < BN; n += G::NTHR)
			reinterpret_cast<int *>(g_smem + pad + G::EX_OFF)[n] = 0; // ordered by the main loop's barriers
	}
	// The wgmmas of 16-weight steps kk0 .. kk1-1 of K step ks; first: tmp
	// starts from zero.
	auto mma = [&](uint32_t abuf, uint32_t bbuf, int kk0, int kk1, bool first) {
		wg_fence();
#pragma unroll
		for (int kk = kk0; kk < kk1; kk++) {
			const uint64_t db = desc(bbuf + 32 * kk);
			const uint64_t da0 = desc(abuf + 32 * kk), da1 = desc(abuf + 64 * 128 + 32 * kk);
			if constexpr (TIER) {
				const uint32_t sd = !(first && kk == kk0);
				wgmma_f16_n64(tmp[0], da0, db, sd);
				wgmma_f16_n64(tmp[1], da1, db, sd);
			} else {
				wgmma_n128<false>(acc[0], da0, db, 1);
				wgmma_n128<false>(acc[1], da1, db, 1);
			}
		}
		wg_commit();
	};

	// Prologue: steps 0 .. D-1 in flight; tier: decode step 0.
#pragma unroll
	for (int st = 0; st < D; st++) {
		if ((uint32_t)st < nk)
			issue(st, st);
		pf::commit();
	}
	if constexpr (TIER) {
		pf::wait<D - 1>();
		__syncthreads();
		decode(0, 0, 0);
	}
	for (uint32_t ks = 0; ks < nk; ks++) {
		// Committed groups: D + ks.  Tier needs step ks+1 (decoded below), bf16
		// step ks; wgmmas of step ks-2 done in every warpgroup before the
		// barrier, so its ring slot and decoded tile may be overwritten.
		wg_wait<1>();
		if constexpr (TIER)
			pf::wait<D - 2>();
		else
			pf::wait<D - 1>();
		fence_proxy_async();
		__syncthreads();
		const uint32_t slot = ks % NS;
		const uint32_t abuf = TIER ? sbase + G::DEC_OFF + (ks % 3) * A_BYTES : sbase + slot * STAGE;
		const uint32_t bbuf = sbase + slot * STAGE + ASRC + wg * NT * 128;
		const float *sc = reinterpret_cast<const float *>(g_smem + pad + G::SC_OFF) + (ks % 3) * BM;
		if constexpr (SEGS) {
			// One h segment (32 columns, two 16-weight steps) at a time.
#pragma unroll
			for (int hs = 0; hs < 2; hs++) {
				mma(abuf, bbuf, 2 * hs, 2 * hs + 2, true);
				wg_wait<0>();
				reg_fence<NA>(tmp[0]), reg_fence<NA>(tmp[TIER ? 1 : 0]);
				fold<SEGS>(acc, tmp, sc, p, s, tok0 + wg * NT, wq, g, t, ks * (BK / SEG) + hs);
			}
		} else {
			mma(abuf, bbuf, 0, 4, (ks & 3) == 0);
		}
		if (ks + D < nk)
			issue(ks + D, (ks + D) % NS);
		pf::commit();
		if (TIER && ks + 1 < nk)
			decode(ks + 1, (ks + 1) % NS, (ks + 1) % 3);
		if constexpr (TIER && !SEGS) {
			if ((ks & 3) == 3) {
				wg_wait<0>();
				reg_fence<NA>(tmp[0]), reg_fence<NA>(tmp[TIER ? 1 : 0]);
				fold<false>(acc, tmp, sc, p, s, 0, wq, g, t, 0);
			}
		}
	}
	wg_wait<0>();
	reg_fence<NA>(acc[0]), reg_fence<NA>(acc[1]);
	pf::wait<0>();

	epilogue<F, DOWN>(p, s, row0, tok0, acc, tid, G::EX_OFF + pad, [] { __syncthreads(); });
}

// Tier experts, warp-specialized (prefill=sm90ws): warpgroups 0
// and 1 issue the wgmmas and fold (as in tile, without copies or decode);
// warpgroup 2 (the producer) stages each K step by cp.async (packed rows into
// a 4-slot ring, activations straight into the step's buffer), decodes the
// rows into the buffer's fp16 tile and hands the buffer over.  Buffers: NB
// of [decoded A tile | activation tile | row scales]; hand-over by named
// barriers: FULL[b] (the producer arrives, the MMA warpgroups wait) and
// EMPTY[b] (the MMA warpgroups arrive once the wgmmas that read b are done,
// the producer waits before refilling it).  The producer stages P steps
// ahead.  With no decode or copy registers in them, the MMA warpgroups hold
// the accumulators and block sums within 168 registers (384 threads).
struct GeoWS {
	static constexpr int NB = 4, NR = 4, P = 2; // buffers, packed-row ring slots, staging distance
	static constexpr int NTHR = 384;
	static constexpr uint32_t A_BYTES = 128 * BK * 2, B_BYTES = 128 * BK * 2;
	static constexpr uint32_t BUF = A_BYTES + B_BYTES;
	static constexpr uint32_t RAW_OFF = NB * BUF, RAW = 128 * RAW_PITCH;
	static constexpr uint32_t SC_OFF = RAW_OFF + NR * RAW;
	static constexpr uint32_t EX_OFF = SC_OFF + NB * 128 * 4;
	static constexpr uint32_t SMEM = EX_OFF + 128 * 4 + 1024;
	static_assert(NR >= P + 2, "a ring slot is refilled after every producer thread decoded it");
	static_assert(SMEM <= 227 * 1024, "sm90 prefill shared memory");
};
__device__ __forceinline__ void bar_sync(uint32_t id, uint32_t n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void bar_arrive(uint32_t id, uint32_t n)
{
	asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
constexpr uint32_t BAR_FULL = 1, BAR_EMPTY = 1 + GeoWS::NB, BAR_PROD = 1 + 2 * GeoWS::NB, BAR_MMA = 2 + 2 * GeoWS::NB;

template <class F, bool DOWN, bool SEGS>
__device__ __forceinline__ void tile_ws(const PParams &p, const PSlot &s, uint32_t rt, uint32_t tt, uint32_t pad)
{
	using G = Geo<true>;
	using W = GeoWS;
	constexpr int NT = G::NT, BM = G::BM, BN = G::BN, NA = NT / 2, NB = W::NB, P = W::P;
	const FmtTab &f = p.tab[s.fmt];
	const int tid = threadIdx.x;
	const uint32_t d = DOWN;
	const uint32_t nrows = DOWN ? p.hidden : p.inter;
	const uint32_t nk = f.pc[d] / BK;
	const uint8_t *m0 = s.ext + f.off[DOWN ? 2 : 0], *m1 = s.ext + f.off[DOWN ? 2 : 1];
	const uint64_t rowc = f.rowc[d], rows_ = f.rows_[d], soff = f.soff[d];
	const uint32_t row0 = DOWN ? rt * BM : rt * (BM / 2), tok0 = tt * BN;
	const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(g_smem) + pad;

	if (tid >= 256) {
		// Producer: 128 threads; thread q handles chunk q%8 of rows (tokens) q/8 + 16r.
		const uint32_t q = tid - 256, ci = q & 7;
		const uint16_t *act = DOWN ? p.hs : p.xs;
		const uint32_t ld = DOWN ? p.ldh : p.ldx;
		auto row_src = [&](uint32_t i) {
			return pf::TierRow{ !DOWN && i >= BM / 2 ? m1 : m0, DOWN ? row0 + i : row0 + i % (BM / 2), rowc, rows_,
					    soff };
		};
		auto issue = [&](uint32_t ks) {
			const uint32_t sr = sbase + W::RAW_OFF + (ks % W::NR) * W::RAW;
			const uint32_t sb = sbase + (ks % NB) * W::BUF + W::A_BYTES, b = ks >> 2;
#pragma unroll
			for (int r = 0; r < 8; r++) {
				const uint32_t i = (q >> 3) + 16 * r;
				const pf::TierRow row = row_src(i);
				pf::stage_tier<F>(sr + i * RAW_PITCH, row, b, ci, row.rr < nrows, m0);
			}
#pragma unroll
			for (int r = 0; r < 8; r++) {
				const uint32_t n = (q >> 3) + 16 * r, tl = tok0 + n;
				const bool v = tl < s.ntok;
				const uint16_t *src = act + (uint64_t)(s.a0 + (v ? tl : 0)) * ld + ks * BK + 8 * ci;
				pf::cp16z(sb + pf::swz(n, ci), src, v ? 16 : 0);
			}
		};
#pragma unroll
		for (int st = 0; st < P; st++) {
			if ((uint32_t)st < nk)
				issue(st);
			pf::commit();
		}
		for (uint32_t ks = 0; ks < nk; ks++) {
			const uint32_t s2 = ks + P;
			if (s2 < nk) {
				if (s2 >= (uint32_t)NB)
					bar_sync(BAR_EMPTY + s2 % NB, W::NTHR);
				issue(s2);
			}
			pf::commit();
			pf::wait<P>();               // this thread's copies of step ks landed
			bar_sync(BAR_PROD, 128);     // everyone's; and every thread is done decoding ks-1
			const uint32_t sr = pad + W::RAW_OFF + (ks % W::NR) * W::RAW, b = ks >> 2, j = 8 * (ks & 3) + ci;
			const uint32_t da = pad + (ks % NB) * W::BUF;
			float *sc = reinterpret_cast<float *>(g_smem + pad + W::SC_OFF) + (ks % NB) * BM;
#pragma unroll
			for (int r = 0; r < 8; r++) {
				const uint32_t i = (q >> 3) + 16 * r;
				pf::decode_tier<F>(sr + i * RAW_PITCH, da, i, ci, j, row_src(i), b, sc + i);
			}
			fence_proxy_async();
			bar_arrive(BAR_FULL + ks % NB, W::NTHR);
		}
		pf::wait<0>();
		return;
	}

	// MMA warpgroups.
	const int wg = tid >> 7, wq = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
	float acc[2][NA], tmp[2][NA];
#pragma unroll
	for (int m = 0; m < 2; m++)
#pragma unroll
		for (int i = 0; i < NA; i++)
			acc[m][i] = 0.0f;
	if constexpr (!DOWN) {
		for (int n = tid; n < BN; n += 256)
			reinterpret_cast<int *>(g_smem + pad + W::EX_OFF)[n] = 0; // ordered by the loop's barriers
	}
	auto mma = [&](uint32_t abuf, uint32_t bbuf, int kk0, int kk1, bool first) {
		wg_fence();
#pragma unroll
		for (int kk = kk0; kk < kk1; kk++) {
			const uint64_t db = desc(bbuf + 32 * kk);
			const uint32_t sd = !(first && kk == kk0);
			wgmma_f16_n64(tmp[0], desc(abuf + 32 * kk), db, sd);
			wgmma_f16_n64(tmp[1], desc(abuf + 64 * 128 + 32 * kk), db, sd);
		}
		wg_commit();
	};
	for (uint32_t ks = 0; ks < nk; ks++) {
		const uint32_t bi = ks % NB;
		bar_sync(BAR_FULL + bi, W::NTHR);
		const uint32_t abuf = sbase + bi * W::BUF, bbuf = abuf + W::A_BYTES + wg * NT * 128;
		const float *sc = reinterpret_cast<const float *>(g_smem + pad + W::SC_OFF) + bi * BM;
		if constexpr (SEGS) {
#pragma unroll
			for (int hs = 0; hs < 2; hs++) {
				mma(abuf, bbuf, 2 * hs, 2 * hs + 2, true);
				wg_wait<0>();
				reg_fence<NA>(tmp[0]), reg_fence<NA>(tmp[1]);
				fold<SEGS>(acc, tmp, sc, p, s, tok0 + wg * NT, wq, g, t, ks * (BK / SEG) + hs);
			}
		} else {
			mma(abuf, bbuf, 0, 4, (ks & 3) == 0);
		}
		wg_wait<1>(); // the wgmmas of step ks-1 are done: its buffer goes back
		if (ks >= 1 && ks - 1 + NB < nk)
			bar_arrive(BAR_EMPTY + (ks - 1) % NB, W::NTHR);
		if constexpr (!SEGS) {
			if ((ks & 3) == 3) {
				wg_wait<0>();
				reg_fence<NA>(tmp[0]), reg_fence<NA>(tmp[1]);
				fold<false>(acc, tmp, sc, p, s, 0, wq, g, t, 0);
			}
		}
	}
	wg_wait<0>();
	reg_fence<NA>(acc[0]), reg_fence<NA>(acc[1]);
	epilogue<F, DOWN>(p, s, row0, tok0, acc, tid, W::EX_OFF + pad, [] { bar_sync(BAR_MMA, 256); });
}

// Tier experts as BF16 tiles, warp-specialized (prefill=sm90p, sm90p1, sm90p3,
// sm90pc):
// the bf16 experts' loop (256-token tiles: each weight decoded once per 256
// tokens, wgmma m64n128k16 on BF16 operands, the bf16 epilogue) with the
// weight tile made by NP (1-3) producer warpgroups.  They stage each 256-weight
// block's packed rows by cp.async into a 2-slot raw ring (one copy per block,
// issued 4 K steps ahead) and the activations (bf16: pf_prep stores these
// experts' rows as bf16, so no range guard) into the K step's buffer two
// steps ahead, and decode each step's 128 x 64 weights as bf16(scale * f)
// straight into the buffer's swizzled A tile: f is the format's exact fp16
// value, scale * f exact in f32, one rounding to bf16 (relative error at most
// 2^-9, which kernels/FORMATS.md allows).  With the scale applied in the
// decode there are no block sums: the two MMA warpgroups hold 128 f32
// accumulators each, as the bf16 tile.  Hand-over as tile_ws: buffers of
// [A tile | activation tile], FULL[b] (producers arrive, MMA warpgroups
// wait) and EMPTY[b] (MMA warpgroups arrive when the wgmmas that read b are
// done, producers wait before refilling); the producers decode step ks as
// soon as its inputs are there and refill the buffer of step ks + 2 after,
// so they may run two steps ahead of the MMAs.  setmaxnreg moves registers
// from the producers (REG_P) to the MMA warpgroups (REG_C): 184 / 72 with two
// producer warpgroups, 192 / 112 with one, 168 / 48 with three (ptxas -v: no
// spills in either).
// MC (prefill=sm90pc, two producer warpgroups; run persistently by tile_pp,
// auto's choice for tier experts):
// each MMA warpgroup stages its own 128 tokens of the activations (the half of
// the B tile only its wgmmas read) NB - 1 steps ahead, after its wgmma wait,
// so the producers only stage the raw blocks and decode, up to NB - 1 steps
// ahead of the wgmmas (they rewrite a buffer's A tile after its EMPTY); the
// producers load every row's code words and scale of a step before decoding
// them (the loads in flight together), take their raw-block sources from
// per-row pointers computed once, and get 96 registers (MMA warpgroups 160,
// no spills; 104 / 152 spills).  H200, Kimi, 256 tokens: 0.88-0.90 of cuBLAS
// BF16 against sm90p's 0.81-0.84 in the same run
// (experiments/kernels/README.md, "Hopper prefill: BF16 tiles by default").
// H (prefill=sm90ph): fp16 tiles instead of bf16, with per-tile exponent
// tables after the raw ring: EX_OFF [BN] h exponents of the gate|up epilogue,
// RF_OFF [BM] 2^-E of each A row, TE_OFF [BN] each token's largest h
// exponent (down tiles with a flagged token).
template <int NP, bool MC = false, bool H = false> struct GeoP {
	static constexpr int NB = 4, NR = 2, P = 2; // buffers, raw block slots, activation staging distance (steps)
	static constexpr int NPT = 128 * NP, NTHR = 256 + NPT, RS = NPT / 8;
	static constexpr int BM = 128, BN = 256;
	static constexpr int RA = (BM + RS - 1) / RS, RB = (BN + RS - 1) / RS; // rows, tokens per producer thread
	static constexpr uint32_t A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, BUF = A_BYTES + B_BYTES;
	static constexpr uint32_t RPITCH = RAW_SCALE + 16, RAW = BM * RPITCH;
	static constexpr uint32_t RAW_OFF = NB * BUF;
	static constexpr uint32_t EX_OFF = RAW_OFF + NR * RAW, RF_OFF = EX_OFF + BN * 4, TE_OFF = RF_OFF + BM * 4;
	static constexpr uint32_t SMEM = (H ? TE_OFF + BN * 4 : RAW_OFF + NR * RAW) + 1024;
	// Registers per thread after setmaxnreg: launch budget 65536 / NTHR
	// (rounded down to 8), MMA warpgroups up, producers down, same total.
	static constexpr int REG_L = 65536 / NTHR / 8 * 8;
	static constexpr int REG_P = NP == 1 ? 112 : NP == 2 ? (MC ? 96 : 72) : 48;
	static constexpr int REG_C = (REG_L * NTHR - REG_P * NPT) / 256 / 8 * 8;
	static_assert(NB == GeoWS::NB, "barrier ids of tile_ws");
	static_assert(NB >= P + 2 && NR == 2, "ring distances (tile_p's schedule)");
	static_assert(REG_C <= 256 && REG_C * 256 + REG_P * NPT <= 65536, "register split");
	static_assert(BUF % 1024 == 0 && RAW_OFF % 1024 == 0, "swizzled tiles 1024-aligned");
	static_assert(SMEM <= 227 * 1024, "sm90 prefill shared memory");
};
template <int N> __device__ __forceinline__ void reg_inc()
{
#if STRATA_PF90
	asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N> __device__ __forceinline__ void reg_dec()
{
#if STRATA_PF90
	asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

// Weights o (fp16 pairs) of a block with scale sc as bf16(sc * f) into
// 16-byte chunk ci of row i of the swizzled tile at g_smem offset dst.
__device__ __forceinline__ void store_bf16(uint32_t (&o)[4], float sc, uint32_t dst, uint32_t i, uint32_t ci)
{
#pragma unroll
	for (int k = 0; k < 4; k++) {
		const float2 v = __half22float2(*reinterpret_cast<const __half2 *>(&o[k]));
		o[k] = pack_bf16x2(sc * v.x, sc * v.y);
	}
	*reinterpret_cast<uint4 *>(g_smem + dst + pf::swz(i, ci)) = make_uint4(o[0], o[1], o[2], o[3]);
}
// Weights 8j..8j+7 of block b, packed row at g_smem offset src (codes at
// src + coff, scale chunk at RAW_SCALE), as bf16(scale * f) into 16-byte
// chunk ci of row i of the swizzled tile at g_smem offset dst.
template <class F>
__device__ __forceinline__ void decode_bf16(uint32_t src, uint32_t coff, float sc, uint32_t dst, uint32_t i, uint32_t ci,
					    uint32_t j)
{
	uint32_t o[4];
	F::decode8(src + coff, 0, (int)j, 0, o);
	store_bf16(o, sc, dst, i, ci);
}

// Weights o (fp16 pairs) times the block scale sh (an fp16 pair, both
// halves the scale) into 16-byte chunk ci of row i of the swizzled tile at
// g_smem offset dst (H: fp16 tiles).
__device__ __forceinline__ void store_f16(uint32_t (&o)[4], uint32_t sh, uint32_t dst, uint32_t i, uint32_t ci)
{
	const __half2 s2 = *reinterpret_cast<const __half2 *>(&sh);
#pragma unroll
	for (int k = 0; k < 4; k++) {
		const __half2 v = __hmul2(*reinterpret_cast<const __half2 *>(&o[k]), s2);
		o[k] = *reinterpret_cast<const uint32_t *>(&v);
	}
	*reinterpret_cast<uint4 *>(g_smem + dst + pf::swz(i, ci)) = make_uint4(o[0], o[1], o[2], o[3]);
}
// bar.red.or over n threads of named barrier id: whether v of any of them.
__device__ __forceinline__ bool bar_or(uint32_t id, uint32_t n, bool v)
{
	uint32_t r;
	asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}\n"
		     : "=r"(r)
		     : "r"((uint32_t)v), "r"(id), "r"(n)
		     : "memory");
	return r != 0;
}

// One K step of the BF16-tile kernels (tile_p, tile_pp): the MMA warpgroup
// wg's wgmmas on buffer bi (W's tile of 128 rows x 256 tokens), committed as
// one group.  Descriptors: desc(a + off) = desc(a) + off / 16 (shared
// addresses below 256 KB: the 14-bit address field does not carry).
template <class W, bool H>
__device__ __forceinline__ void mma_step(float (&acc)[2][64], uint64_t d0, uint32_t bi, uint32_t wg)
{
	const uint64_t da = d0 + bi * (W::BUF >> 4), db = da + ((W::A_BYTES + wg * 128 * 128) >> 4);
	wg_fence();
#pragma unroll
	for (int kk = 0; kk < BK / 16; kk++) {
		wgmma_n128<H>(acc[0], da + 2 * kk, db + 2 * kk, 1);
		wgmma_n128<H>(acc[1], da + ((64 * 128) >> 4) + 2 * kk, db + 2 * kk, 1);
	}
	wg_commit();
}

// H (prefill=sm90ph, with MC): fp16 tiles and fp16 wgmmas.  The producers
// write fp16(f * scale * 2^E) with E per A row (the largest E keeping the
// row's largest block scale times the codebook's largest |f|, 55.4, below
// 2^15: every weight of the row in fp16's normal range, one rounding, relative
// error at most 2^-11): one HMUL2 per weight pair after the decode instead
// of the two conversions to f32, two FMULs and the bf16 pack, the scale
// converted once per block.  E comes from a scan of the row's block scales
// (global memory, before the first step); the epilogue multiplies each row by
// 2^-E.  Activations are fp16 as on the mma.sync tier path: x rows with the
// range guard of pf_prep (xsc), h with its per-(token, 32-column segment)
// exponents from the tier epilogue; a down tile with a flagged token (hbig)
// stages h through registers, each segment times 2^(e - emax) of its token
// (exact powers of two; emax the token's largest exponent), and multiplies
// the token's sums by 2^emax.  H200, Kimi: relative error <= 5.3e-4 (sm90pc
// 4.2e-3), but 0.83-0.85 of cuBLAS BF16 at 256 tokens against sm90pc's
// 0.88-0.89, with a serial prologue (the scan's loads one after another,
// raw block 0 issued after it) since replaced by loads in flight together
// (experiments/kernels/README.md, "Hopper prefill: fp16 tiles").
template <class F, bool DOWN, int NP, bool MC, bool H = false>
__device__ __forceinline__ void tile_p(const PParams &p, const PSlot &s, uint32_t rt, uint32_t tt, uint32_t pad)
{
	using W = GeoP<NP, MC, H>;
	static_assert(MC || !H, "fp16 tiles with the MMA warpgroups' activation staging");
	constexpr int BM = W::BM, BN = W::BN, NB = W::NB, NA = 64;
	const FmtTab &f = p.tab[s.fmt];
	const int tid = threadIdx.x;
	const uint32_t d = DOWN;
	const uint32_t nk = f.pc[d] / BK;
	const uint32_t row0 = DOWN ? rt * BM : rt * (BM / 2), tok0 = tt * BN;
	const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(g_smem) + pad;
	const uint16_t *act = DOWN ? p.hs : p.xs;
	const uint32_t ld = DOWN ? p.ldh : p.ldx;

	if (tid >= 256) {
		reg_dec<W::REG_P>();
		const uint32_t q = tid - 256, ci = q & 7;
		const uint32_t nrows = DOWN ? p.hidden : p.inter;
		const uint8_t *m0 = s.ext + f.off[DOWN ? 2 : 0], *m1 = s.ext + f.off[DOWN ? 2 : 1];
		const uint64_t rowc = f.rowc[d], rows_ = f.rows_[d], soff = f.soff[d];
		auto row_src = [&](uint32_t i) {
			return pf::TierRow{ !DOWN && i >= BM / 2 ? m1 : m0, DOWN ? row0 + i : row0 + i % (BM / 2), rowc, rows_,
					    soff };
		};
		// Thread q: chunk q % 8 of rows (tokens) q / 8 + RS r (RS = NPT / 8
		// does not divide 128 or 256 with three producer warpgroups).
		auto issue_raw = [&](uint32_t b) {
			const uint32_t sr = sbase + W::RAW_OFF + (b % W::NR) * W::RAW;
#pragma unroll 1
			for (int r = 0; r < W::RA; r++) {
				const uint32_t i = (q >> 3) + W::RS * r;
				if (BM % W::RS && i >= (uint32_t)BM)
					break;
				const pf::TierRow row = row_src(i);
				pf::stage_tier<F>(sr + i * W::RPITCH, row, b, ci, row.rr < nrows, m0);
			}
		};
		auto issue_act = [&](uint32_t ks) {
			const uint32_t sb = sbase + (ks % NB) * W::BUF + W::A_BYTES;
#pragma unroll
			for (int r = 0; r < W::RB; r++) {
				const uint32_t n = (q >> 3) + W::RS * r, tl = tok0 + n;
				if (BN % W::RS && n >= (uint32_t)BN)
					break;
				const bool v = tl < s.ntok;
				const uint16_t *src = act + (uint64_t)(s.a0 + (v ? tl : 0)) * ld + ks * BK + 8 * ci;
				pf::cp16z(sb + pf::swz(n, ci), src, v ? 16 : 0);
			}
		};
		// The codes' (bits 0-7) and scale's (8-15) offsets of block 0 of the
		// thread's rows in their 16-byte chunks: the low bits of TierRow's
		// addresses, in 32-bit arithmetic (block b adds b * CODE_BYTES,
		// b * SCALE_BYTES modulo 16).
		uint32_t roff[W::RA];
#pragma unroll
		for (int r = 0; r < W::RA; r++) {
			const uint32_t i = (q >> 3) + W::RS * r;
			const uint32_t rr = DOWN ? row0 + i : row0 + i % (BM / 2);
			const uint32_t ml = (uint32_t)(uintptr_t)(!DOWN && i >= BM / 2 ? m1 : m0);
			roff[r] = ((ml + rr * (uint32_t)rowc) & 15) | ((ml + (uint32_t)soff + rr * (uint32_t)rows_) & 15) << 8;
		}
		// H: 2^E of the thread's rows, and their block scale times 2^E as an
		// fp16 pair (set at each block's first step).
		float pw[W::RA];
		uint32_t sh[W::RA];
		// Step ks: rows q / 8 + RS r of the A tile of buffer ks % NB.
		auto decode_step = [&](uint32_t ks) {
			const uint32_t b = ks >> 2, j = 8 * (ks & 3) + ci;
			const uint32_t sr = pad + W::RAW_OFF + (b % W::NR) * W::RAW, da = pad + (ks % NB) * W::BUF;
			if constexpr (MC) {
				// Every row's code words and scale first (their shared-memory
				// loads in flight together), then the decodes.
				const uint32_t pb = F::BITS8 * j, wq = pb >> 5, wq1 = wq + 1 == F::NW ? 0 : wq + 1;
				uint32_t x0[W::RA], x1[W::RA];
				float sc[W::RA];
				const bool first = (ks & 3) == 0;
#pragma unroll
				for (int r = 0; r < W::RA; r++) {
					const uint32_t src = sr + ((q >> 3) + W::RS * r) * W::RPITCH;
					const uint32_t c = src + ((roff[r] + b * F::CODE_BYTES) & 15);
					x0[r] = lds32(c + 4 * wq), x1[r] = lds32(c + 4 * wq1);
					if (!H || first)
						sc[r] = F::scale(src + RAW_SCALE + (((roff[r] >> 8) + b * F::SCALE_BYTES) & 15));
				}
				if constexpr (H) {
					if (first)
#pragma unroll
						for (int r = 0; r < W::RA; r++) {
							const __half2 v = __float2half2_rn(sc[r] * pw[r]);
							sh[r] = *reinterpret_cast<const uint32_t *>(&v);
						}
				}
#pragma unroll
				for (int r = 0; r < W::RA; r++) {
					uint32_t o[4];
					F::decode8x(__funnelshift_r(x0[r], x1[r], pb), o);
					if constexpr (H)
						store_f16(o, sh[r], da, (q >> 3) + W::RS * r, ci);
					else
						store_bf16(o, sc[r], da, (q >> 3) + W::RS * r, ci);
				}
			} else {
#pragma unroll
				for (int r = 0; r < W::RA; r++) {
					const uint32_t i = (q >> 3) + W::RS * r;
					if (BM % W::RS && i >= (uint32_t)BM)
						break;
					const uint32_t src = sr + i * W::RPITCH;
					const uint32_t co = (roff[r] + b * F::CODE_BYTES) & 15;
					const uint32_t so = ((roff[r] >> 8) + b * F::SCALE_BYTES) & 15;
					decode_bf16<F>(src, co, F::scale(src + RAW_SCALE + so), da, i, ci, j);
				}
			}
			fence_proxy_async();
			bar_arrive(BAR_FULL + ks % NB, W::NTHR);
		};
		if constexpr (MC) {
			// The MMA warpgroups stage the activations; the producers the raw
			// blocks (block b+1 while decoding block b) and the A tiles, up to
			// NB - 1 steps ahead of the wgmmas (a buffer's A tile is rewritten
			// after EMPTY: the wgmmas that read it are done).  The thread's
			// rows' source (pf::tier_rowp for its chunk) and validity once.
			static_assert(BM % W::RS == 0, "every producer thread has RA rows");
			const uint8_t *rowp[W::RA];
			uint32_t rok = 0;
#pragma unroll
			for (int r = 0; r < W::RA; r++) {
				const pf::TierRow row = row_src((q >> 3) + W::RS * r);
				rowp[r] = pf::tier_rowp<F>(row, ci);
				rok |= (uint32_t)(row.rr < nrows) << r;
			}
			auto issue_raw_mc = [&](uint32_t b) {
				const uint32_t sr = sbase + W::RAW_OFF + (b % W::NR) * W::RAW;
#pragma unroll
				for (int r = 0; r < W::RA; r++)
					pf::stage_tier_p<F>(sr + ((q >> 3) + W::RS * r) * W::RPITCH, rowp[r], b, ci, rok >> r & 1,
							    m0);
			};
			issue_raw_mc(0);
			pf::commit();
			if constexpr (H) {
				// E of each row: the largest exponent of its block scales (bf16
				// bits 7-14), from its 8 producer threads (consecutive lanes),
				// SB blocks of every row per thread in flight together (one
				// memory latency per pass, while raw block 0 lands).
				constexpr uint32_t SB = 4;
				const uint32_t nb = nk / 4;
				const uint16_t *sp[W::RA];
				uint32_t em[W::RA];
#pragma unroll
				for (int r = 0; r < W::RA; r++) {
					const pf::TierRow row = row_src((q >> 3) + W::RS * r);
					sp[r] = reinterpret_cast<const uint16_t *>(row.scale<F>(0));
					em[r] = 0;
				}
				for (uint32_t b0 = ci; b0 < nb; b0 += 8 * SB) {
					uint32_t v[W::RA][SB];
#pragma unroll
					for (int r = 0; r < W::RA; r++)
#pragma unroll
						for (uint32_t k = 0; k < SB; k++) {
							const uint32_t b = b0 + 8 * k;
							v[r][k] = (rok >> r & 1) && b < nb ? __ldg(sp[r] + b * (F::SCALE_BYTES / 2)) : 0u;
						}
#pragma unroll
					for (int r = 0; r < W::RA; r++)
#pragma unroll
						for (uint32_t k = 0; k < SB; k++)
							em[r] = max(em[r], v[r][k] >> 7 & 0xffu);
				}
				float *rf = reinterpret_cast<float *>(g_smem + pad + W::RF_OFF);
#pragma unroll
				for (int r = 0; r < W::RA; r++) {
#pragma unroll
					for (int o = 1; o < 8; o <<= 1)
						em[r] = max(em[r], __shfl_xor_sync(0xffffffffu, em[r], o));
					// scale < 2^(em - 126), |f| < 2^6: |w| 2^E < 2^15 with E = 135 - em
					const int e = min(max(135 - (int)em[r], -100), 100);
					pw[r] = pf::exp2i(e);
					if (ci == 0)
						rf[(q >> 3) + W::RS * r] = pf::exp2i(-e); // read after the FULL barrier of step 0
				}
			}
			for (uint32_t ks = 0; ks < nk; ks++) {
				if ((ks & 3) == 0) {
					pf::wait<0>();              // raw block ks/4 landed (this thread's copies)
					bar_sync(BAR_PROD, W::NPT); // everyone's; every producer is done with block ks/4 - 1
					if ((ks >> 2) + 1 < nk / 4)
						issue_raw_mc((ks >> 2) + 1);
					pf::commit();
				}
				if (ks >= (uint32_t)NB)
					bar_sync(BAR_EMPTY + ks % NB, W::NTHR);
				decode_step(ks);
			}
			pf::wait<0>();
			return;
		}
		// Groups: 0 = raw block 0 + activations of step 0, 1 = step 1, then one
		// per iteration ks: activations of step ks + 2 (+ raw block ks/4 + 1
		// when ks % 4 == 0).  At iteration ks, groups 0 .. ks+1 are committed.
		// (experiments/kernels/tile_p_schedule.py models this hand-over.)
		issue_raw(0);
		issue_act(0);
		pf::commit();
		if (nk > 1)
			issue_act(1);
		pf::commit();
		for (uint32_t ks = 0; ks < nk; ks++) {
			pf::wait<1>();           // this thread's copies of step ks (and its raw block) landed
			bar_sync(BAR_PROD, W::NPT); // everyone's; and every producer is done decoding step ks-1
			decode_step(ks);
			const uint32_t s2 = ks + W::P;
			if (s2 < nk) {
				if (s2 >= (uint32_t)NB)
					bar_sync(BAR_EMPTY + s2 % NB, W::NTHR);
				issue_act(s2);
			}
			// Raw block b+1 replaces block b-1, whose last step (4b-1) every
			// producer finished before this step's barrier (ks = 4b).
			if ((ks & 3) == 0 && (ks >> 2) + 1 < nk / 4)
				issue_raw((ks >> 2) + 1);
			pf::commit();
		}
		pf::wait<0>();
		return;
	}

	// MMA warpgroups.
	reg_inc<W::REG_C>();
	const int wg = tid >> 7;
	// MC: warpgroup wg stages its own 128 tokens of each step's activations
	// (the half of the B tile only its wgmmas read), NB - 1 steps ahead:
	// thread t chunk t % 8 of tokens t / 8 + 16 r.
	const uint32_t ct = tid & 127, cn = ct >> 3, cc = ct & 7;
	const uint32_t cvalid = s.ntok > tok0 + wg * 128 + cn ? s.ntok - (tok0 + wg * 128 + cn) : 0;
	const uint8_t *csrc = reinterpret_cast<const uint8_t *>(act + (uint64_t)(s.a0 + tok0 + wg * 128 + cn) * ld + 8 * cc);
	const uint32_t cstride = 16 * 2 * ld; // bytes between the thread's tokens
	// H down: whether a token of the tile has an h segment scaled by 2^-e
	// (e > 0; decided after the first steps' copies are issued, which a
	// flagged tile then waits for and stages again), each token's largest e
	// (te; thread tid: token tid).
	int *te = reinterpret_cast<int *>(g_smem + pad + W::TE_OFF);
	bool big = false;
	if constexpr (H && !DOWN)
		reinterpret_cast<int *>(g_smem + pad + W::EX_OFF)[tid] = 0; // ordered by the loop's barriers
	auto issue_mine = [&](uint32_t ks) {
		const uint32_t sb = sbase + (ks % NB) * W::BUF + W::A_BYTES + wg * 128 * 128 + pf::swz(cn, cc);
		const uint8_t *src = csrc + ks * BK * 2;
		if (H && DOWN && big) {
			// h through registers: segment 2 ks + cc / 4 of each token times
			// 2^(e - emax) (0 below fp16's smallest power of two)
#pragma unroll 1
			for (int r = 0; r < 8; r++) {
				uint4 v = make_uint4(0, 0, 0, 0);
				if ((uint32_t)(16 * r) < cvalid) {
					const uint32_t n = wg * 128 + cn + 16 * r;
					const int k = te[n] - (int)p.hexp[(uint64_t)(s.a0 + tok0 + n) * p.nseg + 2 * ks + (cc >> 2)];
					const __half2 f = __float2half2_rn(k > 24 ? 0.0f : pf::exp2i(-k));
					v = *reinterpret_cast<const uint4 *>(src + (uint64_t)r * cstride);
					uint32_t *u = reinterpret_cast<uint32_t *>(&v);
#pragma unroll
					for (int c = 0; c < 4; c++) {
						const __half2 h2 = __hmul2(*reinterpret_cast<const __half2 *>(&u[c]), f);
						u[c] = *reinterpret_cast<const uint32_t *>(&h2);
					}
				}
				asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(sb + 16 * 128 * r), "r"(v.x),
					     "r"(v.y), "r"(v.z), "r"(v.w)
					     : "memory");
			}
			return;
		}
#pragma unroll
		for (int r = 0; r < 8; r++) {
			const bool v = (uint32_t)(16 * r) < cvalid;
			pf::cp16z(sb + 16 * 128 * r, v ? src + (uint64_t)r * cstride : (const uint8_t *)act, v ? 16 : 0);
		}
	};
	if constexpr (MC) {
#pragma unroll
		for (int st = 0; st < NB - 1; st++) {
			if ((uint32_t)st < nk)
				issue_mine(st);
			pf::commit();
		}
	}
	if constexpr (H && DOWN) {
		const uint32_t tl = tok0 + tid;
		if (bar_or(BAR_MMA, 256, tl < s.ntok && p.hbig[s.a0 + tl])) {
			uint32_t em = 0;
			for (uint32_t c = 0; tl < s.ntok && c < p.nseg; c++)
				em = max(em, (uint32_t)p.hexp[(uint64_t)(s.a0 + tl) * p.nseg + c]);
			te[tid] = (int)em;
			pf::wait<0>();
			bar_sync(BAR_MMA, 256);
			big = true;
#pragma unroll 1
			for (int st = 0; st < NB - 1; st++) {
				if ((uint32_t)st < nk)
					issue_mine(st);
				pf::commit();
			}
		}
	}
	float acc[2][NA];
#pragma unroll
	for (int m = 0; m < 2; m++)
#pragma unroll
		for (int i = 0; i < NA; i++)
			acc[m][i] = 0.0f;
	const uint64_t d0 = desc(sbase);
	for (uint32_t ks = 0; ks < nk; ks++) {
		const uint32_t bi = ks % NB;
		if constexpr (MC) {
			pf::wait<NB - 2>(); // this thread's copies of step ks landed
			fence_proxy_async();
		}
		bar_sync(BAR_FULL + bi, W::NTHR);
		mma_step<W, H>(acc, d0, bi, wg);
		wg_wait<1>(); // the wgmmas of step ks-1 are done: its buffer goes back
		if (ks >= 1 && ks - 1 + NB < nk)
			bar_arrive(BAR_EMPTY + (ks - 1) % NB, W::NTHR);
		if constexpr (MC) {
			// step ks + NB - 1 into the buffer of step ks - 1 (this warpgroup's half)
			if (ks + NB - 1 < nk)
				issue_mine(ks + NB - 1);
			pf::commit();
		}
	}
	wg_wait<0>();
	reg_fence<NA>(acc[0]), reg_fence<NA>(acc[1]);
	if constexpr (H) {
		// Rows times 2^-E, the tokens of a flagged down tile times 2^emax,
		// then the tier epilogue (fp16 h with its exponents; x's 2^e).
		const float *rf = reinterpret_cast<const float *>(g_smem + pad + W::RF_OFF);
		const uint32_t wq = (tid >> 5) & 3, g = (tid & 31) >> 2, t = tid & 3;
#pragma unroll
		for (int m = 0; m < 2; m++)
#pragma unroll
			for (int hf = 0; hf < 2; hf++) {
				const float f = rf[64 * m + 16 * wq + g + 8 * hf];
#pragma unroll
				for (int q = 0; q < NA; q++)
					if (((q >> 1) & 1) == hf)
						acc[m][q] *= f;
			}
		if (DOWN && big)
#pragma unroll
			for (int q = 0; q < NA; q++) {
				const float f = pf::exp2i(te[wg * 128 + 8 * (q >> 2) + 2 * t + (q & 1)]);
				acc[0][q] *= f, acc[1][q] *= f;
			}
		epilogue<F, DOWN>(p, s, row0, tok0, acc, tid, W::EX_OFF + pad, [] { bar_sync(BAR_MMA, 256); });
		return;
	}
	epilogue<FmtBF16, DOWN>(p, s, row0, tok0, acc, tid, 0, [] { bar_sync(BAR_MMA, 256); });
}

// Persistent sm90pc (prefill=sm90pp, sm90pp2): a CTA per SM (grid
// min(tiles, SMs)) runs tiles blockIdx.x, + gridDim.x, ... of the launch
// through one buffer ring, so a tile's start and end overlap its neighbours'
// instead of costing a CTA each (ncu of sm90pc at Kimi, 256 tokens: 460 / 292
// us for 3 / 7 waves of 112- / 24-step tiles, i.e. about 1.27 us per step and
// 11 us per tile outside the steps: the raw block 0 from DRAM, the first
// decode, the wgmmas' drain, the epilogue).  H200, Kimi, 256 tokens, hot /
// warm / cold: sm90pp 0.982 / 0.963 / 0.975 of cuBLAS BF16, sm90pp2 1.008 /
// 1.000 / 1.011, sm90pc 0.889 / 0.883 / 0.901 in the same call; sm90pp2 also
// fastest at 32 and 128 tokens (experiments/kernels/README.md, "Hopper
// prefill: persistent BF16-tile kernel").  The step counter g runs over the CTA's
// tiles: buffer g % NB, raw ring slot gb % NR (gb: blocks); the producers
// issue the next tile's raw block 0 while they decode the current tile's
// last block and run on into its first steps (up to NB - 1 ahead) while the
// MMA warpgroups wait for their last wgmmas and run the epilogue; the MMA
// warpgroups' activation copies (NB - 1 steps ahead) cross into the next
// tile too.  The MMA warpgroups release a tile's last step right after its
// wgmma.wait_group 0 (not at the next step); every step g with g + NB < G
// (G: the CTA's steps) is released once, which the producers wait for at
// step g + NB.  Tiles are tier experts of any of the three formats (the
// producers' decode per tile by format; the MMA side is format-free).  The
// MMA warpgroups copy a step's activations without per-token selects when
// all of the thread's 8 tokens are valid.  experiments/kernels/
// tile_p_schedule.py models this hand-over (S = 1 and 2).
template <class F, bool DOWN, class W> struct PPRows {
	const uint8_t *rowp[W::RA];
	uint32_t roff[W::RA];
	uint32_t rok;
	__device__ __forceinline__ PPRows(const PParams &p, const PSlot &s, uint32_t rt, uint32_t q)
	{
		constexpr int BM = W::BM;
		const FmtTab &f = p.tab[s.fmt];
		const uint32_t d = DOWN, ci = q & 7, row0 = DOWN ? rt * BM : rt * (BM / 2);
		const uint32_t nrows = DOWN ? p.hidden : p.inter;
		const uint8_t *m0 = s.ext + f.off[DOWN ? 2 : 0], *m1 = s.ext + f.off[DOWN ? 2 : 1];
		rok = 0;
#pragma unroll
		for (int r = 0; r < W::RA; r++) {
			const uint32_t i = (q >> 3) + W::RS * r;
			const pf::TierRow row{ !DOWN && i >= BM / 2 ? m1 : m0, DOWN ? row0 + i : row0 + i % (BM / 2), f.rowc[d],
					       f.rows_[d], f.soff[d] };
			rowp[r] = pf::tier_rowp<F>(row, ci);
			rok |= (uint32_t)(row.rr < nrows) << r;
			const uint32_t ml = (uint32_t)(uintptr_t)(!DOWN && i >= BM / 2 ? m1 : m0);
			roff[r] = ((ml + (uint32_t)row.rr * (uint32_t)f.rowc[d]) & 15) |
				  ((ml + (uint32_t)f.soff[d] + (uint32_t)row.rr * (uint32_t)f.rows_[d]) & 15) << 8;
		}
	}
	// raw block b of the rows into ring slot sr (shared address)
	__device__ __forceinline__ void issue(uint32_t sr, uint32_t b, uint32_t q, const uint8_t *zero) const
	{
#pragma unroll
		for (int r = 0; r < W::RA; r++)
			pf::stage_tier_p<F>(sr + ((q >> 3) + W::RS * r) * W::RPITCH, rowp[r], b, q & 7, rok >> r & 1, zero);
	}
};

// Raw block 0 of tile (s, rt) into ring slot sr, by the tile's format.
template <bool DOWN, class W>
__device__ __forceinline__ void pp_issue0(const PParams &p, const PSlot &s, uint32_t rt, uint32_t q, uint32_t sr)
{
	switch (s.fmt) {
	case STRATA_FMT_HOT: PPRows<FmtHot, DOWN, W>(p, s, rt, q).issue(sr, 0, q, s.ext); break;
	case STRATA_FMT_WARM: PPRows<FmtWarm, DOWN, W>(p, s, rt, q).issue(sr, 0, q, s.ext); break;
	case STRATA_FMT_COLD: PPRows<FmtCold, DOWN, W>(p, s, rt, q).issue(sr, 0, q, s.ext); break;
	default: break;
	}
}

// The producers' steps of tile (s, rt): nk steps from global step g, raw
// blocks from global block gb (block 0 already issued into slot gb % NR);
// ns: the CTA's next tile (nrt its row tile) or null.  S steps per proxy
// fence and FULL hand-over (S = 2: prefill=sm90pp2; ncu of sm90pc had 9% of
// the producers' stall samples on the fence and the arrive after it).
template <class F, bool DOWN, int S, class W>
__device__ __forceinline__ void pp_produce(const PParams &p, const PSlot &s, uint32_t rt, uint32_t nk, const PSlot *ns,
					   uint32_t nrt, uint32_t q, uint32_t sbase, uint32_t pad, uint32_t &g, uint32_t &gb)
{
	constexpr int NB = W::NB;
	// S >= NB - 1 deadlocks (FULL of step g waits for EMPTY of step g + S - 1,
	// which the MMA warpgroups give only after FULL of g; tile_p_schedule.py's
	// mutation), S = 3 does not divide a block's 4 steps.
	static_assert(S == 1 || S == 2, "steps per hand-over (a block's 4 steps in whole groups)");
	const PPRows<F, DOWN, W> R(p, s, rt, q);
	const uint32_t ci = q & 7, nb = nk / 4;
	for (uint32_t k0 = 0; k0 < nk; k0 += S, g += S) {
#pragma unroll
		for (int u = 0; u < S; u++) {
			const uint32_t ks = k0 + u, gg = g + u, b = ks >> 2;
			if ((ks & 3) == 0) {
				pf::wait<0>();              // raw block gb landed (this thread's copies)
				bar_sync(BAR_PROD, W::NPT); // everyone's; every producer is done with block gb - 1
				const uint32_t sn = sbase + W::RAW_OFF + ((gb + 1) % W::NR) * W::RAW;
				if (b + 1 < nb)
					R.issue(sn, b + 1, q, s.ext);
				else if (ns)
					pp_issue0<DOWN, W>(p, *ns, nrt, q, sn);
				pf::commit();
			}
			if (gg >= (uint32_t)NB)
				bar_sync(BAR_EMPTY + gg % NB, W::NTHR);
			// Step ks: rows q / 8 + RS r of the A tile of buffer gg % NB
			// (sm90pc's decode: every row's code words and scale first, then
			// the decodes).
			const uint32_t j = 8 * (ks & 3) + ci;
			const uint32_t sr = pad + W::RAW_OFF + (gb % W::NR) * W::RAW, da = pad + (gg % NB) * W::BUF;
			const uint32_t pb = F::BITS8 * j, wq = pb >> 5, wq1 = wq + 1 == F::NW ? 0 : wq + 1;
			uint32_t x0[W::RA], x1[W::RA];
			float sc[W::RA];
#pragma unroll
			for (int r = 0; r < W::RA; r++) {
				const uint32_t src = sr + ((q >> 3) + W::RS * r) * W::RPITCH;
				const uint32_t c = src + ((R.roff[r] + b * F::CODE_BYTES) & 15);
				x0[r] = lds32(c + 4 * wq), x1[r] = lds32(c + 4 * wq1);
				sc[r] = F::scale(src + RAW_SCALE + (((R.roff[r] >> 8) + b * F::SCALE_BYTES) & 15));
			}
#pragma unroll
			for (int r = 0; r < W::RA; r++) {
				uint32_t o[4];
				F::decode8x(__funnelshift_r(x0[r], x1[r], pb), o);
				store_bf16(o, sc[r], da, (q >> 3) + W::RS * r, ci);
			}
			if ((ks & 3) == 3)
				gb++;
		}
		fence_proxy_async();
#pragma unroll
		for (int u = 0; u < S; u++)
			bar_arrive(BAR_FULL + (g + u) % NB, W::NTHR);
	}
}

template <bool DOWN, int S> __device__ __forceinline__ void tile_pp(const PParams &p, uint32_t pad)
{
	using W = GeoP<2, true, false>;
	constexpr int BN = W::BN, NB = W::NB, NA = 64;
	const int tid = threadIdx.x;
	const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(g_smem) + pad;
	const uint32_t nt = p.n_tiles, step = gridDim.x;

	if (tid >= 256) {
		reg_dec<W::REG_P>();
		const uint32_t q = tid - 256;
		uint32_t g = 0, gb = 0, t = blockIdx.x, rt, tt;
		const PSlot *s = &pf::slot_tile(p, t, BN, rt, tt);
		pp_issue0<DOWN, W>(p, *s, rt, q, sbase + W::RAW_OFF);
		pf::commit();
		while (true) {
			const uint32_t t2 = t + step;
			uint32_t nrt = 0;
			const PSlot *ns = t2 < nt ? &pf::slot_tile(p, t2, BN, nrt, tt) : nullptr;
			const uint32_t nk = p.tab[s->fmt].pc[DOWN] / BK;
			switch (s->fmt) {
			case STRATA_FMT_HOT: pp_produce<FmtHot, DOWN, S, W>(p, *s, rt, nk, ns, nrt, q, sbase, pad, g, gb); break;
			case STRATA_FMT_WARM: pp_produce<FmtWarm, DOWN, S, W>(p, *s, rt, nk, ns, nrt, q, sbase, pad, g, gb); break;
			case STRATA_FMT_COLD: pp_produce<FmtCold, DOWN, S, W>(p, *s, rt, nk, ns, nrt, q, sbase, pad, g, gb); break;
			default: break;
			}
			if (!ns)
				break;
			t = t2, s = ns, rt = nrt;
		}
		pf::wait<0>();
		return;
	}

	// MMA warpgroups.
	reg_inc<W::REG_C>();
	const int wg = tid >> 7;
	const uint32_t ct = tid & 127, cn = ct >> 3, cc = ct & 7;
	const uint16_t *act = DOWN ? p.hs : p.xs;
	const uint32_t ld = DOWN ? p.ldh : p.ldx;
	const uint32_t cstride = 16 * 2 * ld; // bytes between the thread's tokens
	// G: the CTA's steps.
	uint32_t G = 0;
	for (uint32_t t = blockIdx.x; t < nt; t += step) {
		uint32_t rt, tt;
		G += p.tab[pf::slot_tile(p, t, BN, rt, tt).fmt].pc[DOWN] / BK;
	}
	// Copy cursor: step cks of tile ctl (cnk steps; source csrc, cvalid tokens
	// of the thread's from its first), this warpgroup's 128 tokens as sm90pc.
	uint32_t ctl = blockIdx.x, cks = 0, cnk = 0, cvalid = 0;
	const uint8_t *csrc = nullptr;
	auto cset = [&]() {
		uint32_t rt, tt;
		const PSlot &s = pf::slot_tile(p, ctl, BN, rt, tt);
		const uint32_t tok0 = tt * BN + wg * 128 + cn;
		cnk = p.tab[s.fmt].pc[DOWN] / BK;
		cvalid = s.ntok > tok0 ? s.ntok - tok0 : 0;
		csrc = reinterpret_cast<const uint8_t *>(act + (uint64_t)(s.a0 + tok0) * ld + 8 * cc);
	};
	auto issue_next = [&](uint32_t g) {
		const uint32_t sb = sbase + (g % NB) * W::BUF + W::A_BYTES + wg * 128 * 128 + pf::swz(cn, cc);
		const uint8_t *src = csrc + cks * BK * 2;
		if (cvalid > 112) { // every token of the thread's (no selects)
#pragma unroll
			for (int r = 0; r < 8; r++, src += cstride)
				pf::cp16z(sb + 16 * 128 * r, src, 16);
		} else {
#pragma unroll
			for (int r = 0; r < 8; r++) {
				const bool v = (uint32_t)(16 * r) < cvalid;
				pf::cp16z(sb + 16 * 128 * r, v ? src + (uint64_t)r * cstride : (const uint8_t *)act,
					  v ? 16 : 0);
			}
		}
		if (++cks == cnk) {
			cks = 0, ctl += step;
			if (ctl < nt)
				cset();
		}
	};
	cset();
#pragma unroll 1
	for (uint32_t st = 0; st < (uint32_t)NB - 1; st++) {
		if (st < G)
			issue_next(st);
		pf::commit();
	}
	float acc[2][NA];
	const uint64_t d0 = desc(sbase);
	uint32_t g = 0;
	for (uint32_t t = blockIdx.x; t < nt; t += step) {
		uint32_t rt, tt;
		const PSlot &s = pf::slot_tile(p, t, BN, rt, tt);
		const uint32_t nk = p.tab[s.fmt].pc[DOWN] / BK;
#pragma unroll
		for (int m = 0; m < 2; m++)
#pragma unroll
			for (int i = 0; i < NA; i++)
				acc[m][i] = 0.0f;
		for (uint32_t ks = 0; ks < nk; ks++, g++) {
			const uint32_t bi = g % NB;
			pf::wait<NB - 2>(); // this thread's copies of step g landed
			fence_proxy_async();
			bar_sync(BAR_FULL + bi, W::NTHR);
			mma_step<W, false>(acc, d0, bi, wg);
			wg_wait<1>(); // the wgmmas of step g-1 are done: its buffer goes back
			if (ks >= 1 && g - 1 + NB < G)
				bar_arrive(BAR_EMPTY + (g - 1) % NB, W::NTHR);
			if (g + NB - 1 < G)
				issue_next(g + NB - 1);
			pf::commit();
		}
		wg_wait<0>();
		reg_fence<NA>(acc[0]), reg_fence<NA>(acc[1]);
		if (g - 1 + NB < G) // the tile's last step goes back before the epilogue
			bar_arrive(BAR_EMPTY + (g - 1) % NB, W::NTHR);
		const uint32_t row0 = DOWN ? rt * W::BM : rt * (W::BM / 2);
		epilogue<FmtBF16, DOWN>(p, s, row0, tt * BN, acc, tid, 0, [] { bar_sync(BAR_MMA, 256); });
	}
	pf::wait<0>();
}

template <class F>
__device__ __forceinline__ void tile_segs(const PParams &p, const PSlot &s, uint32_t rt, uint32_t tt, uint32_t pad)
{
	tile<F, true, true>(p, s, rt, tt, pad);
}

// Tier down tile: the ordinary loop, or (a token of the tile has an h
// segment scaled by 2^-e, e > 0) the loop folding per segment.  WS: tile_ws.
template <class F, bool DOWN, bool WS>
__device__ __forceinline__ void tile_sel(const PParams &p, const PSlot &s, uint32_t rt, uint32_t tt, uint32_t pad)
{
	if constexpr (DOWN && F::SCALED) {
		constexpr int BN = Geo<true>::BN;
		int big = 0;
		for (uint32_t n = threadIdx.x; n < BN; n += blockDim.x)
			if (tt * BN + n < s.ntok)
				big |= p.hbig[s.a0 + tt * BN + n];
		if (__syncthreads_or(big)) {
			if constexpr (WS)
				tile_ws<F, true, true>(p, s, rt, tt, pad);
			else
				tile_segs<F>(p, s, rt, tt, pad);
			return;
		}
	}
	if constexpr (WS)
		tile_ws<F, DOWN, false>(p, s, rt, tt, pad);
	else
		tile<F, DOWN, false>(p, s, rt, tt, pad);
}

// Kernels: bf16 experts (KIND 0), tier experts on tile (1), tile_ws (2),
// tile_p with two (3), one (4) or three (5) producer warpgroups, or two with
// the activations staged by the MMA warpgroups (6), the same as fp16 tiles (7),
// (6) persistent (8: tile_pp, grid min(tiles, SMs)), the same with two steps
// per producer hand-over (9).
constexpr int K_BF16 = 0, K_TIER = 1, K_TIER_WS = 2, K_TIER_P = 3, K_TIER_P1 = 4, K_TIER_P3 = 5, K_TIER_PC = 6,
	      K_TIER_PH = 7, K_TIER_PP = 8, K_TIER_PP2 = 9;
template <int KIND> struct Kind {
	static constexpr bool TIER = KIND != K_BF16;
	static constexpr int NP = KIND == K_TIER_P1 ? 1 : KIND == K_TIER_P3 ? 3 : 2; // tile_p's producer warpgroups
	static constexpr bool PROD = KIND >= K_TIER_P, MC = KIND >= K_TIER_PC, H = KIND == K_TIER_PH;
	using GP = GeoP<NP, MC, H>;
	static constexpr int NTHR = PROD ? GP::NTHR : KIND == K_TIER_WS ? GeoWS::NTHR : 256;
	static constexpr uint32_t SMEM = PROD ? GP::SMEM : KIND == K_TIER_WS ? GeoWS::SMEM : Geo<TIER>::SMEM;
	static constexpr int BM = 128, BN = PROD ? GP::BN : Geo<TIER>::BN;
	static constexpr bool PERSIST = KIND >= K_TIER_PP;
	static constexpr int S = KIND == K_TIER_PP2 ? 2 : 1; // tile_pp's steps per producer hand-over
};

// Grid: one CTA per tile of the slots in p (bf16 experts, or tier experts,
// as KIND says; K_TIER_PP: min(tiles, SMs) CTAs, each running every
// gridDim.x-th tile).
template <bool DOWN, int KIND>
__global__ void __launch_bounds__(Kind<KIND>::NTHR, 1) gemm(const __grid_constant__ PParams p)
{
#if STRATA_PF90
	constexpr bool TIER = Kind<KIND>::TIER, WS = KIND == K_TIER_WS;
	const uint32_t raw = (uint32_t)__cvta_generic_to_shared(g_smem), pad = ((raw + 1023) & ~1023u) - raw;
	uint32_t rt = 0, tt = 0;
	const PSlot &s = Kind<KIND>::PERSIST ? p.slot[0] : pf::cta_tile(p, Kind<KIND>::BN, rt, tt);
	if constexpr (Kind<KIND>::PERSIST) {
		tile_pp<DOWN, Kind<KIND>::S>(p, pad);
		(void)s;
	} else if constexpr (Kind<KIND>::PROD) {
		constexpr int NP = Kind<KIND>::NP;
		constexpr bool MC = Kind<KIND>::MC, H = Kind<KIND>::H;
		switch (s.fmt) {
		case STRATA_FMT_HOT: tile_p<FmtHot, DOWN, NP, MC, H>(p, s, rt, tt, pad); break;
		case STRATA_FMT_WARM: tile_p<FmtWarm, DOWN, NP, MC, H>(p, s, rt, tt, pad); break;
		case STRATA_FMT_COLD: tile_p<FmtCold, DOWN, NP, MC, H>(p, s, rt, tt, pad); break;
		default: break;
		}
	} else if constexpr (TIER) {
		switch (s.fmt) {
		case STRATA_FMT_HOT: tile_sel<FmtHot, DOWN, WS>(p, s, rt, tt, pad); break;
		case STRATA_FMT_WARM: tile_sel<FmtWarm, DOWN, WS>(p, s, rt, tt, pad); break;
		case STRATA_FMT_COLD: tile_sel<FmtCold, DOWN, WS>(p, s, rt, tt, pad); break;
		default: break;
		}
	} else {
		tile_sel<FmtBF16, DOWN, false>(p, s, rt, tt, pad);
	}
#else
	(void)p;
#endif
}

// 1 in *out when this code was compiled with the wgmma path (sm_90a).
__global__ void probe(unsigned *out) { *out = STRATA_PF90; }

} // namespace pf90

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
// (__CUDA_ARCH_FEAT_SM90_ALL); pf90_probe reports whether the loaded code has
// it, and the dispatch takes this path only then (otherwise moe_prefill.cuh).
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

__device__ __forceinline__ void wgmma_bf16_n128(float *d, uint64_t a, uint64_t b, uint32_t acc)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
		     "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
		     "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
		     "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
		     "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
		       "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
		       "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
		       "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
		       "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
		       "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
		       "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
		       "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
		     : "l"(a), "l"(b), "r"(acc));
}
#else
__device__ __forceinline__ void wgmma_f16_n64(float *, uint64_t, uint64_t, uint32_t) {}
__device__ __forceinline__ void wgmma_bf16_n128(float *, uint64_t, uint64_t, uint32_t) {}
#endif

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
				const uint32_t b = ks >> 2;
				if (ci < 6) {
					const uint8_t *c = mat + (uint64_t)rr * rowc + (uint64_t)b * F::CODE_BYTES;
					const uint8_t *c0 = (const uint8_t *)((uintptr_t)c & ~(uintptr_t)15);
					const uint32_t nc = (uint32_t)((uintptr_t)c - (uintptr_t)c0 + F::CODE_BYTES + 15) >> 4;
					if (ci < nc)
						pf::cp16z(sa + i * RAW_PITCH + 16 * ci, ok ? c0 + 16 * ci : m0, ok ? 16 : 0);
				} else if (ci == 6) {
					const uint8_t *sp = mat + soff + (uint64_t)rr * rows_ + (uint64_t)b * F::SCALE_BYTES;
					const uint8_t *s0 = (const uint8_t *)((uintptr_t)sp & ~(uintptr_t)15);
					pf::cp16z(sa + i * RAW_PITCH + RAW_SCALE, ok ? s0 : m0, ok ? 16 : 0);
				}
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
				const uint32_t roff =
					(uint32_t)((uintptr_t)(mat + (uint64_t)rr * rowc + (uint64_t)b * F::CODE_BYTES) & 15);
				uint32_t o[4];
				F::decode8(sa + i * RAW_PITCH + roff, 0, (int)j, 0, o);
				*reinterpret_cast<uint4 *>(g_smem + pad + G::DEC_OFF + db * A_BYTES + pf::swz(i, ci)) =
					make_uint4(o[0], o[1], o[2], o[3]);
				if (ci == 0) {
					const uint32_t so = (uint32_t)((uintptr_t)(mat + soff + (uint64_t)rr * rows_ +
										   (uint64_t)b * F::SCALE_BYTES) & 15);
					reinterpret_cast<float *>(g_smem + pad + G::SC_OFF)[db * BM + i] =
						F::scale(sa + i * RAW_PITCH + RAW_SCALE + so);
				}
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
	auto col_of = [&](int q) -> uint32_t { return (uint32_t)(wg * NT + 8 * (q >> 2) + 2 * t + (q & 1)); };
	auto row_of = [&](int m, int q) -> uint32_t { return (uint32_t)(64 * m + 16 * wq + g + 8 * ((q >> 1) & 1)); };
	if constexpr (TIER && !DOWN) {
		for (int n = tid; n < BN; n += G::NTHR)
			reinterpret_cast<int *>(g_smem + pad + G::EX_OFF)[n] = 0; // ordered by the main loop's barriers
	}
	// tmp into acc: row scale sc (x 2^e of the token's segment sg when SEGS).
	auto fold = [&](const float *sc, uint32_t sg) {
		float fc[NA];
#pragma unroll
		for (int q = 0; q < NA; q++) {
			fc[q] = 1.0f;
			if constexpr (SEGS) {
				const uint32_t tl = tok0 + col_of(q);
				fc[q] = tl < s.ntok ? pf::exp2i(p.hexp[(uint64_t)(s.a0 + tl) * p.nseg + sg]) : 0.0f;
			}
		}
#pragma unroll
		for (int m = 0; m < 2; m++) {
			const float s0 = sc[64 * m + 16 * wq + g], s1 = sc[64 * m + 16 * wq + g + 8];
#pragma unroll
			for (int q = 0; q < NA; q++)
				acc[m][q] = fmaf(((q >> 1) & 1 ? s1 : s0) * fc[q], tmp[m][q], acc[m][q]);
		}
		(void)sg;
	};
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
				wgmma_bf16_n128(acc[0], da0, db, 1);
				wgmma_bf16_n128(acc[1], da1, db, 1);
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
				fold(sc, ks * (BK / SEG) + hs);
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
				fold(sc, 0);
			}
		}
	}
	wg_wait<0>();
	reg_fence<NA>(acc[0]), reg_fence<NA>(acc[1]);
	pf::wait<0>();

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
		int *ex = reinterpret_cast<int *>(g_smem + pad + G::EX_OFF);
		float xf[NA / 2], mx[NA / 2]; // per token column: q>>2 and q&1
#pragma unroll
		for (int c = 0; c < NA / 2; c++) {
			const uint32_t tl = tok0 + col_of((c >> 1) * 4 + (c & 1));
			xf[c] = tl < s.ntok ? p.xsc[s.a0 + tl] : 1.0f;
			mx[c] = 0.0f;
		}
#pragma unroll
		for (int q = 0; q < NA; q++) {
			const int c = (q >> 2) * 2 + (q & 1);
			const float gv = acc[0][q] * xf[c], uv = acc[1][q] * xf[c];
			const float hv = row0 + row_of(0, q) < p.inter ? gv / (1.0f + expf(-gv)) * uv : 0.0f;
			acc[0][q] = hv;
			mx[c] = fmaxf(mx[c], fabsf(hv));
		}
#pragma unroll
		for (int c = 0; c < NA / 2; c++) {
			const uint32_t ev = pf::range_exp(mx[c]);
			if (ev)
				atomicMax(ex + col_of((c >> 1) * 4 + (c & 1)), (int)ev);
		}
		__syncthreads();
#pragma unroll
		for (int c = 0; c < NA / 2; c++)
			xf[c] = pf::exp2i(-ex[col_of((c >> 1) * 4 + (c & 1))]);
#pragma unroll
		for (int q = 0; q < NA; q++) {
			const uint32_t row = row0 + row_of(0, q), tl = tok0 + col_of(q);
			if (row < p.inter && tl < s.ntok) {
				__half hh = __float2half_rn(acc[0][q] * xf[(q >> 2) * 2 + (q & 1)]);
				p.hs[(uint64_t)(s.a0 + tl) * p.ldh + row] = *reinterpret_cast<uint16_t *>(&hh);
			}
		}
		// The tile's segments of h (64 columns from row0) for every token.
		for (uint32_t i = tid; i < BN * (BM / 2 / SEG); i += G::NTHR) {
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

template <class F>
__device__ __forceinline__ void tile_segs(const PParams &p, const PSlot &s, uint32_t rt, uint32_t tt, uint32_t pad)
{
	tile<F, true, true>(p, s, rt, tt, pad);
}

template <class F, bool DOWN>
__device__ __forceinline__ void tile_sel(const PParams &p, const PSlot &s, uint32_t rt, uint32_t tt, uint32_t pad)
{
	if constexpr (DOWN && F::SCALED) {
		constexpr int BN = Geo<true>::BN;
		int big = 0;
		for (uint32_t n = threadIdx.x; n < BN; n += Geo<true>::NTHR)
			if (tt * BN + n < s.ntok)
				big |= p.hbig[s.a0 + tt * BN + n];
		if (__syncthreads_or(big)) {
			tile_segs<F>(p, s, rt, tt, pad);
			return;
		}
	}
	tile<F, DOWN, false>(p, s, rt, tt, pad);
}

// Grid: one CTA per tile of the slots in p (bf16 experts, or tier experts,
// as TIER says).
template <bool DOWN, bool TIER> __global__ void __launch_bounds__(256, 1) gemm(const __grid_constant__ PParams p)
{
#if STRATA_PF90
	using G = Geo<TIER>;
	const uint32_t b = blockIdx.x;
	int lo = 0, hi = (int)p.n_slots - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) >> 1;
		if (p.slot[mid].tile0 <= b)
			lo = mid;
		else
			hi = mid - 1;
	}
	const PSlot &s = p.slot[lo];
	const uint32_t ntt = (s.ntok + G::BN - 1) / G::BN, local = b - s.tile0;
	const uint32_t tt = local % ntt, rt = local / ntt;
	const uint32_t raw = (uint32_t)__cvta_generic_to_shared(g_smem), pad = ((raw + 1023) & ~1023u) - raw;
	if constexpr (TIER) {
		switch (s.fmt) {
		case STRATA_FMT_HOT: tile_sel<FmtHot, DOWN>(p, s, rt, tt, pad); break;
		case STRATA_FMT_WARM: tile_sel<FmtWarm, DOWN>(p, s, rt, tt, pad); break;
		case STRATA_FMT_COLD: tile_sel<FmtCold, DOWN>(p, s, rt, tt, pad); break;
		default: break;
		}
	} else {
		tile_sel<FmtBF16, DOWN>(p, s, rt, tt, pad);
	}
#else
	(void)p;
#endif
}

// 1 in *out when this code was compiled with the wgmma path (sm_90a).
__global__ void probe(unsigned *out) { *out = STRATA_PF90; }

} // namespace pf90

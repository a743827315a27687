// Tiled prefill path of the fused MoE layer (included by moe_gpu.cu inside
// its anonymous namespace, after FmtTab and the PTX helpers).
//
// Used for experts with many tokens (>= the configuration's prefill_min, 17
// by default) in bf16 or a tier format; the persistent kernel keeps decode
// (<= 16 tokens per expert).  Three launches per group of experts:
//   pf_prep     gathers each assignment's activation row x[tok] into a 16-bit
//               buffer xs (fp16 for tier experts, bf16 for bf16 experts; row
//               stride ldx = hidden rounded up to 256, zero padded), zeroes
//               the padding columns of its h row, and stores the assignment's
//               token and router weight in device arrays;
//   pf_gemm<0>  gate|up: one CTA per (expert, row tile, token tile) computes
//               BM/2 gate rows and the same BM/2 up rows (a BM-row A tile)
//               times the BN-token activation tile, then h = silu(gate) * up,
//               stored as 16-bit (the MMA type of the expert) in hs;
//   pf_gemm<1>  down: one CTA per (expert, BM rows, BN tokens), epilogue
//               y[tok] += w * acc with atomics (as the persistent kernel).
// fp16 range guard (tier experts; bf16 has the range of f32): pf_prep scales
// an activation row whose max |x| reaches 2^15 by 2^-e (the smallest e that
// brings it below 2^15; e = 0 for ordinary rows, whose path is unchanged) and
// stores 2^e per assignment (xsc); the gate|up epilogue multiplies gate and up
// by it before SiLU.  The same epilogue gives each (token, 32-column segment
// of h) its own exponent: the smallest that brings the segment's max |h| in
// the CTA tile below 2^15 (a tile covers whole segments: BM/2 a multiple of
// 32), stores h * 2^-e, the exponent in hexp and, when non-zero, a flag per
// assignment (hbig).  A down CTA none of whose tokens is flagged runs the
// ordinary loop; otherwise it folds the MMA sums every 32 columns with
// block scale * 2^e of the token (exact powers of two; operands stay below
// 2^15, sums are f32).
// Tiles (Cfg): 128 rows x 128 tokens with 8 warps (warp tile 64 rows x 32
// tokens) for experts with 65 .. 191 tokens, 64 x 256 with 8 warps (64 x 32) from
// 192 tokens: the tier decode is the limit, and the wide tile decodes half as
// many weights per MMA (experiments/kernels/README.md); 128 x 128 with 16
// warps (32 x 32) for tier experts;
// 64 x 64 with 4 warps (32 x 32, two CTAs per SM) up to 64 tokens (one token
// tile: each weight decoded once, a quarter of the MMAs of 128 x 128).
// Main loop of a CTA (mma.sync m16n8k16, f32 accumulation): K steps of 64
// weights; a 4-deep cp.async ring (zero-fill past rows, tokens and K) stages
// per step the activation tile (16-bit, swizzled rows, straight into the
// ldmatrix layout) and the weight source: bf16 rows straight into the
// ldmatrix layout, tier rows as the packed block (codes + scale chunk,
// re-staged per quarter block).  Tier blocks are decoded ONCE per CTA and
// step into a double-buffered fp16 tile (exact codebook values) by all
// threads, one step ahead of the MMAs, so each decoded weight feeds BN
// tokens.  Tier MMAs accumulate one 256-weight block into temporaries, then
// the block scale of each row is applied (exact, as the decode path does per
// 32-weight unit).
namespace pf {

constexpr int BK = 64, NS = 4;
constexpr uint32_t RAW_PITCH = 144; // tier raw row: codes (<= 96 B) | scale chunk at 96
constexpr uint32_t RAW_SCALE = 96;
// CTA tile: BM weight rows (gate|up: BM/2 gate + the same BM/2 up rows) x BN
// tokens, NW warps; a warp takes 32 tokens and 16*MT rows.
template <int BM_, int BN_, int NW_> struct Cfg {
	static constexpr int BM = BM_, BN = BN_, NW = NW_, NTHR = 32 * NW;
	static constexpr int WN = BN / 32, WM = NW / WN, MT = BM / (16 * WM), HM = MT / 2;
	static constexpr int RSTEP = NTHR / 8, RPTA = BM / RSTEP, RPTB = BN / RSTEP;
	static constexpr uint32_t A_BYTES = BM * BK * 2; // bf16 A stage / decoded fp16 tile
	static constexpr uint32_t ASRC = BM * RAW_PITCH > A_BYTES ? BM * RAW_PITCH : A_BYTES;
	static constexpr uint32_t B_BYTES = BN * BK * 2;
	static constexpr uint32_t STAGE = ASRC + B_BYTES;
	static constexpr uint32_t DEC_OFF = NS * STAGE;
	static constexpr uint32_t SC_OFF = DEC_OFF + 2 * A_BYTES;
	static constexpr uint32_t EX_OFF = SC_OFF + 2 * BM * 4; // [BN] h exponents of the gate|up tile
	static constexpr uint32_t SMEM = EX_OFF + BN * 4;
	static constexpr int MINB = 2 * (SMEM + 1024) <= 228 * 1024 ? 2 : 1; // CTAs per SM
	static_assert(WM * WN == NW && MT * 16 * WM == BM && HM >= 1 && RPTA * RSTEP == BM && RPTB * RSTEP == BN,
		      "prefill tile geometry");
	static_assert(BM % 64 == 0, "a gate|up tile covers whole 32-column h segments");
	static_assert(SMEM <= 227 * 1024, "prefill shared memory");
};
using Cfg128 = Cfg<128, 128, 8>;   // bf16 experts of 65 .. 191 tokens
using Cfg128w16 = Cfg<128, 128, 16>; // tier experts of 65 .. 191 tokens
using CfgWide = Cfg<64, 256, 8>;   // >= 192 tokens per expert: decode amortised over 256 tokens
using CfgSmall = Cfg<64, 64, 4>;   // <= 64 tokens per expert (two CTAs per SM)
constexpr uint32_t SEG = 32;       // h columns per exponent (fp16 range guard)
constexpr uint32_t MAX_SLOTS = 128;
constexpr uint32_t PREP_MAX = 2048;

struct PSlot {
	const uint8_t *ext;
	uint32_t a0, ntok, fmt, tile0;
};

struct PParams {
	const uint16_t *xs; // [assignments][ldx]
	uint16_t *hs;       // [assignments][ldh]
	const uint32_t *tok;
	const float *w;
	const float *xsc; // [assignments] 2^e: the activation row was stored times 2^-e
	uint8_t *hexp;    // [assignments][nseg] e of each 32-column h segment (h stored times 2^-e)
	uint8_t *hbig;    // [assignments] some segment has e > 0
	float *y;
	uint32_t hidden, inter, ldx, ldh, nseg, n_slots, n_tiles;
	FmtTab tab[STRATA_FMT_COUNT];
	PSlot slot[MAX_SLOTS];
};

struct PrepParams {
	const float *x;
	uint16_t *xs, *hs;
	uint32_t *tok_d;
	float *w_d, *xsc;
	uint8_t *hexp, *hbig;
	uint32_t hidden, inter, ldx, ldh, nseg, a0, vec;
	uint32_t tok[PREP_MAX];
	float w[PREP_MAX];
	uint8_t f16[PREP_MAX];
};

__device__ __forceinline__ void cp16z(uint32_t dst, const void *src, uint32_t n)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void ldsm4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
		     : "r"(addr)
		     : "memory");
}
// Byte offset of 16-byte chunk c of row i in a swizzled [rows][64] 16-bit tile.
__device__ __forceinline__ uint32_t swz(uint32_t i, uint32_t c) { return i * 128 + ((c ^ (i & 7)) << 4); }

// fp16 range guard: the smallest e >= 0 with m * 2^-e < 2^15 (m = a max |value|
// >= 0); 0 for NaN and inf (they stay what they are).  At most 114 (f32 range).
__device__ __forceinline__ uint32_t range_exp(float m)
{
	if (!(m >= 32768.0f) || isinf(m))
		return 0;
	int k;
	frexpf(m, &k); // m < 2^k
	return (uint32_t)(k - 15);
}
__device__ __forceinline__ float exp2i(int e) { return __int_as_float((127 + e) << 23); } // 2^e, |e| <= 126

// Tier weight source (one CTA tile row, shared by the prefill kernels): the
// packed bytes of 256-weight block b of row rr of matrix mat (codes, scale
// chunk; both keep their file alignment mod 16 in the raw row).
struct TierRow {
	const uint8_t *mat;
	uint64_t rr, rowc, rows_, soff;
	template <class F> __device__ __forceinline__ const uint8_t *codes(uint32_t b) const
	{
		return mat + rr * rowc + (uint64_t)b * F::CODE_BYTES;
	}
	template <class F> __device__ __forceinline__ const uint8_t *scale(uint32_t b) const
	{
		return mat + soff + rr * rows_ + (uint64_t)b * F::SCALE_BYTES;
	}
};
// Copy chunk ci (0-5: the codes' 16-byte chunks, 6: the scale chunk; others
// none) of block b into the raw row at shared address dst (zero-filled,
// source `zero`, when !ok); rowp: the row's codes (ci < 6) or scales (ci == 6)
// at block 0 (tier_rowp).
template <class F>
__device__ __forceinline__ void stage_tier_p(uint32_t dst, const uint8_t *rowp, uint32_t b, uint32_t ci, bool ok,
					     const uint8_t *zero)
{
	if (ci < 6) {
		const uint8_t *c = rowp + (uint64_t)b * F::CODE_BYTES;
		const uint8_t *c0 = (const uint8_t *)((uintptr_t)c & ~(uintptr_t)15);
		const uint32_t nc = (uint32_t)((uintptr_t)c - (uintptr_t)c0 + F::CODE_BYTES + 15) >> 4;
		if (ci < nc)
			cp16z(dst + 16 * ci, ok ? c0 + 16 * ci : zero, ok ? 16 : 0);
	} else if (ci == 6) {
		const uint8_t *s0 = (const uint8_t *)((uintptr_t)(rowp + (uint64_t)b * F::SCALE_BYTES) & ~(uintptr_t)15);
		cp16z(dst + RAW_SCALE, ok ? s0 : zero, ok ? 16 : 0);
	}
}
template <class F> __device__ __forceinline__ const uint8_t *tier_rowp(const TierRow &r, uint32_t ci)
{
	return ci < 6 ? r.codes<F>(0) : r.scale<F>(0);
}
// The same for row r.
template <class F>
__device__ __forceinline__ void stage_tier(uint32_t dst, const TierRow &r, uint32_t b, uint32_t ci, bool ok,
					   const uint8_t *zero)
{
	stage_tier_p<F>(dst, tier_rowp<F>(r, ci), b, ci, ok, zero);
}
// Decode weights 8j..8j+7 of block b (staged in the raw row at g_smem offset
// src) into 16-byte chunk ci of row i of the swizzled fp16 tile at g_smem
// offset dst; chunk 0 also stores the block scale in *sc.
template <class F>
__device__ __forceinline__ void decode_tier(uint32_t src, uint32_t dst, uint32_t i, uint32_t ci, uint32_t j,
					    const TierRow &r, uint32_t b, float *sc)
{
	uint32_t o[4];
	F::decode8(src + (uint32_t)((uintptr_t)r.codes<F>(b) & 15), 0, (int)j, 0, o);
	*reinterpret_cast<uint4 *>(g_smem + dst + swz(i, ci)) = make_uint4(o[0], o[1], o[2], o[3]);
	if (ci == 0)
		*sc = F::scale(src + RAW_SCALE + (uint32_t)((uintptr_t)r.scale<F>(b) & 15));
}

// One CTA (256 threads) per assignment.  The row is read once: thread j holds
// 8-float chunks j, j + 256, .. (PREP_CH of them, hidden <= 8192) in registers
// while the row max is found; chunks beyond are read again.
constexpr int PREP_CH = 4;
__global__ void __launch_bounds__(256) pf_prep(const __grid_constant__ PrepParams p)
{
	__shared__ float red[8];
	const uint32_t i = blockIdx.x, a = p.a0 + i;
	const float *xr = p.x + (uint64_t)p.tok[i] * p.hidden;
	uint16_t *dst = p.xs + (uint64_t)a * p.ldx;
	const bool f16 = p.f16[i];
	const uint32_t step = blockDim.x * 8;
	auto load8 = [&](uint32_t c, float *v) {
		if (p.vec && c + 8 <= p.hidden) {
			float4 u = __ldg(reinterpret_cast<const float4 *>(xr + c));
			float4 w = __ldg(reinterpret_cast<const float4 *>(xr + c + 4));
			v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w, v[4] = w.x, v[5] = w.y, v[6] = w.z, v[7] = w.w;
		} else {
#pragma unroll
			for (int q = 0; q < 8; q++)
				v[q] = c + q < p.hidden ? __ldg(xr + c + q) : 0.0f;
		}
	};
	float v[PREP_CH][8], m = 0.0f;
#pragma unroll
	for (int k = 0; k < PREP_CH; k++) {
		const uint32_t c = threadIdx.x * 8 + k * step;
		if (c < p.ldx)
			load8(c, v[k]);
		else
#pragma unroll
			for (int q = 0; q < 8; q++)
				v[k][q] = 0.0f;
#pragma unroll
		for (int q = 0; q < 8; q++)
			m = fmaxf(m, fabsf(v[k][q]));
	}
	for (uint32_t c = threadIdx.x * 8 + PREP_CH * step; f16 && c < p.ldx; c += step) {
		float w[8];
		load8(c, w);
#pragma unroll
		for (int q = 0; q < 8; q++)
			m = fmaxf(m, fabsf(w[q]));
	}
	// fp16 rows: scale 2^-e keeps the row inside the fp16 range (e = 0, factor
	// 1: ordinary rows convert exactly as without the guard).
	uint32_t e = 0;
	if (f16) {
#pragma unroll
		for (int o = 16; o; o >>= 1)
			m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
		if ((threadIdx.x & 31) == 0)
			red[threadIdx.x >> 5] = m;
		__syncthreads();
		for (uint32_t q = 0; q < blockDim.x / 32; q++)
			m = fmaxf(m, red[q]);
		e = range_exp(m);
	}
	const float xs = exp2i(-(int)e);
	auto store8 = [&](uint32_t c, float *w) {
		if (f16)
#pragma unroll
			for (int q = 0; q < 8; q++)
				w[q] *= xs;
		uint4 o;
		o.x = f16 ? pack_f16x2(w[0], w[1]) : pack_bf16x2(w[0], w[1]);
		o.y = f16 ? pack_f16x2(w[2], w[3]) : pack_bf16x2(w[2], w[3]);
		o.z = f16 ? pack_f16x2(w[4], w[5]) : pack_bf16x2(w[4], w[5]);
		o.w = f16 ? pack_f16x2(w[6], w[7]) : pack_bf16x2(w[6], w[7]);
		*reinterpret_cast<uint4 *>(dst + c) = o;
	};
#pragma unroll
	for (int k = 0; k < PREP_CH; k++) {
		const uint32_t c = threadIdx.x * 8 + k * step;
		if (c < p.ldx)
			store8(c, v[k]);
	}
	for (uint32_t c = threadIdx.x * 8 + PREP_CH * step; c < p.ldx; c += step) {
		float w[8];
		load8(c, w);
		store8(c, w);
	}
	uint16_t *hr = p.hs + (uint64_t)a * p.ldh;
	for (uint32_t c = p.inter + threadIdx.x; c < p.ldh; c += blockDim.x)
		hr[c] = 0;
	for (uint32_t c = threadIdx.x; c < p.nseg; c += blockDim.x)
		p.hexp[(uint64_t)a * p.nseg + c] = 0;
	if (threadIdx.x == 0)
		p.tok_d[a] = p.tok[i], p.w_d[a] = p.w[i], p.xsc[a] = exp2i((int)e), p.hbig[a] = 0;
}

// One CTA tile: rows row0.. of an expert (gate|up: BM/2 gate + the same BM/2
// up rows; down: BM down rows) x tokens tok0..tok0+BN-1 of the slot.
// SEGS (tier down tiles with a flagged token): MMA sums folded every 32
// columns with block scale x 2^hexp of the token.
template <class F, bool DOWN, class C, bool SEGS>
__device__ __forceinline__ void tile(const PParams &p, const PSlot &s, uint32_t rt, uint32_t tt)
{
	constexpr bool TIER = F::SCALED;
	constexpr int BM = C::BM, BN = C::BN, WM = C::WM, MT = C::MT, HM = C::HM, RSTEP = C::RSTEP;
	constexpr uint32_t STAGE = C::STAGE, ASRC_BYTES = C::ASRC, A_BYTES = C::A_BYTES, DEC_OFF = C::DEC_OFF,
			   SC_OFF = C::SC_OFF;
	const FmtTab &f = p.tab[s.fmt];
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
	const int wm = warp % WM, wn = warp / WM;
	const uint32_t d = DOWN;
	const uint32_t nrows = DOWN ? p.hidden : p.inter, cols = DOWN ? p.inter : p.hidden;
	const uint32_t K = TIER ? f.pc[d] : cols, nk = (K + BK - 1) / BK;
	const uint8_t *m0 = s.ext + f.off[DOWN ? 2 : 0], *m1 = s.ext + f.off[DOWN ? 2 : 1];
	const uint64_t rowc = f.rowc[d], rows_ = f.rows_[d], soff = f.soff[d];
	const uint32_t row0 = DOWN ? rt * BM : rt * (BM / 2), tok0 = tt * BN;
	const uint16_t *act = DOWN ? p.hs : p.xs;
	const uint32_t ld = DOWN ? p.ldh : p.ldx;
	const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(g_smem);
	const uint32_t ci = tid & 7;

	// Copies of K step ks into ring slot `slot`: thread tid handles chunk tid%8 of
	// rows (and tokens) tid/8 + RSTEP*r.
	auto issue = [&](uint32_t ks, uint32_t slot) {
		const uint32_t sa = sbase + slot * STAGE, sb = sa + ASRC_BYTES;
#pragma unroll
		for (int r = 0; r < C::RPTA; r++) {
			const uint32_t i = (tid >> 3) + RSTEP * r;
			const uint32_t rr = DOWN ? row0 + i : row0 + i % (BM / 2);
			const uint8_t *mat = !DOWN && i >= BM / 2 ? m1 : m0;
			const bool ok = rr < nrows;
			if constexpr (TIER) {
				stage_tier<F>(sa + i * RAW_PITCH, TierRow{ mat, rr, rowc, rows_, soff }, ks >> 2, ci, ok, m0);
			} else {
				const uint32_t k = ks * BK + 8 * ci;
				const bool v = ok && k < cols;
				const uint8_t *src = mat + (uint64_t)rr * rowc + (uint64_t)k * 2;
				cp16z(sa + swz(i, ci), v ? src : m0, v ? 16 : 0);
			}
		}
#pragma unroll
		for (int r = 0; r < C::RPTB; r++) {
			const uint32_t n = (tid >> 3) + RSTEP * r, tl = tok0 + n;
			const bool v = tl < s.ntok;
			const uint16_t *src = act + (uint64_t)(s.a0 + (v ? tl : 0)) * ld + ks * BK + 8 * ci;
			cp16z(sb + swz(n, ci), src, v ? 16 : 0);
		}
	};
	// Tier: decode K step ks (ring slot `slot`) into the fp16 tile db, and the
	// rows' block scales into sc[db].
	auto decode = [&](uint32_t ks, uint32_t slot, uint32_t db) {
		if constexpr (TIER) {
			const uint32_t sa = slot * STAGE, b = ks >> 2, j = 8 * (ks & 3) + ci;
#pragma unroll
			for (int r = 0; r < C::RPTA; r++) {
				const uint32_t i = (tid >> 3) + RSTEP * r;
				const uint32_t rr = DOWN ? row0 + i : row0 + i % (BM / 2);
				const uint8_t *mat = !DOWN && i >= BM / 2 ? m1 : m0;
				decode_tier<F>(sa + i * RAW_PITCH, DEC_OFF + db * A_BYTES, i, ci, j,
					       TierRow{ mat, rr, rowc, rows_, soff }, b,
					       reinterpret_cast<float *>(g_smem + SC_OFF) + db * BM + i);
			}
		} else {
			(void)ks, (void)slot, (void)db;
		}
	};

	float acc[MT][4][4], tmp[TIER ? MT : 1][4][4];
#pragma unroll
	for (int m = 0; m < MT; m++)
#pragma unroll
		for (int n = 0; n < 4; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				acc[m][n][e] = 0.0f;
				if constexpr (TIER)
					tmp[m][n][e] = 0.0f;
			}
	// A rows of this warp's m tile m (gate|up: m < HM gate rows, m >= HM the
	// same up rows).
	auto arow = [&](int m) -> uint32_t { return (uint32_t)((m / HM) * (BM / 2) + wm * 16 * HM + (m % HM) * 16); };

	if constexpr (TIER && !DOWN) {
		for (int n = tid; n < BN; n += C::NTHR)
			reinterpret_cast<int *>(g_smem + C::EX_OFF)[n] = 0; // ordered by the main loop's barriers
	}
	// SEGS: fold tmp into acc for h segment sg of K step ks (block scale of the
	// row times 2^e of the token).
	auto fold_seg = [&](uint32_t ks, uint32_t sg) {
		if constexpr (SEGS) {
			const float *sc = reinterpret_cast<const float *>(g_smem + SC_OFF) + (ks & 1) * BM;
#pragma unroll
			for (int n = 0; n < 4; n++) {
				float f[2];
#pragma unroll
				for (int e1 = 0; e1 < 2; e1++) {
					const uint32_t tl = tok0 + wn * 32 + n * 8 + 2 * t + e1;
					f[e1] = tl < s.ntok ? exp2i(p.hexp[(uint64_t)(s.a0 + tl) * p.nseg + sg]) : 0.0f;
				}
#pragma unroll
				for (int m = 0; m < MT; m++) {
					const float s0 = sc[arow(m) + g], s1 = sc[arow(m) + g + 8];
					acc[m][n][0] = fmaf(s0 * f[0], tmp[m][n][0], acc[m][n][0]);
					acc[m][n][1] = fmaf(s0 * f[1], tmp[m][n][1], acc[m][n][1]);
					acc[m][n][2] = fmaf(s1 * f[0], tmp[m][n][2], acc[m][n][2]);
					acc[m][n][3] = fmaf(s1 * f[1], tmp[m][n][3], acc[m][n][3]);
					tmp[m][n][0] = tmp[m][n][1] = tmp[m][n][2] = tmp[m][n][3] = 0.0f;
				}
			}
		} else {
			(void)ks, (void)sg;
		}
	};

	auto mma_step = [&](uint32_t abuf, uint32_t bbuf, uint32_t ks) {
#pragma unroll
		for (int kk = 0; kk < BK / 16; kk++) {
			uint32_t a[MT][4], b[4][2];
#pragma unroll
			for (int m = 0; m < MT; m++) {
				const uint32_t row = arow(m) + (lane & 7) + ((lane >> 3) & 1) * 8;
				ldsm4(abuf + swz(row, 2 * kk + (lane >> 4)), a[m][0], a[m][1], a[m][2], a[m][3]);
			}
#pragma unroll
			for (int np = 0; np < 2; np++) {
				const uint32_t n = wn * 32 + np * 16 + (lane & 7) + (lane >> 4) * 8;
				ldsm4(bbuf + swz(n, 2 * kk + ((lane >> 3) & 1)), b[2 * np][0], b[2 * np][1], b[2 * np + 1][0],
				      b[2 * np + 1][1]);
			}
#pragma unroll
			for (int m = 0; m < MT; m++)
#pragma unroll
				for (int n = 0; n < 4; n++) {
					if constexpr (TIER)
						mma_bf16<true>(tmp[m][n], a[m][0], a[m][1], a[m][2], a[m][3], b[n][0], b[n][1]);
					else
						mma_bf16<F::F16>(acc[m][n], a[m][0], a[m][1], a[m][2], a[m][3], b[n][0], b[n][1]);
				}
			if (SEGS && (kk & 1))
				fold_seg(ks, ks * (BK / SEG) + kk / 2);
		}
	};

	// Prologue: steps 0 .. NS-2 in flight; decode step 0.
#pragma unroll
	for (int st = 0; st < NS - 1; st++) {
		if ((uint32_t)st < nk)
			issue(st, st);
		commit();
	}
	if constexpr (TIER) {
		wait<NS - 2>();
		__syncthreads();
		decode(0, 0, 0);
	}
	for (uint32_t ks = 0; ks < nk; ks++) {
		// Groups committed: NS-1 + ks; step ks+1 complete leaves NS-3 pending.
		wait<NS - 3>();
		__syncthreads();
		if (ks + NS - 1 < nk)
			issue(ks + NS - 1, (ks + NS - 1) % NS);
		commit();
		if (TIER && ks + 1 < nk)
			decode(ks + 1, (ks + 1) % NS, (ks + 1) & 1);
		const uint32_t slot = ks % NS;
		const uint32_t abuf = TIER ? sbase + DEC_OFF + (ks & 1) * A_BYTES : sbase + slot * STAGE;
		mma_step(abuf, sbase + slot * STAGE + ASRC_BYTES, ks);
		if constexpr (TIER && !SEGS) {
			if ((ks & 3) == 3) {
				const float *sc = reinterpret_cast<const float *>(g_smem + SC_OFF) + (ks & 1) * BM;
#pragma unroll
				for (int m = 0; m < MT; m++) {
					const float s0 = sc[arow(m) + g], s1 = sc[arow(m) + g + 8];
#pragma unroll
					for (int n = 0; n < 4; n++) {
						acc[m][n][0] = fmaf(s0, tmp[m][n][0], acc[m][n][0]);
						acc[m][n][1] = fmaf(s0, tmp[m][n][1], acc[m][n][1]);
						acc[m][n][2] = fmaf(s1, tmp[m][n][2], acc[m][n][2]);
						acc[m][n][3] = fmaf(s1, tmp[m][n][3], acc[m][n][3]);
						tmp[m][n][0] = tmp[m][n][1] = tmp[m][n][2] = tmp[m][n][3] = 0.0f;
					}
				}
			}
		}
	}
	wait<0>();

	// Epilogue.  Accumulator (m, n, e): A row arow(m) + g + 8 (e >> 1), token
	// column wn*32 + n*8 + 2t + (e & 1) of the tile.  each_gu visits the gate
	// half (m < HM; its up row is m + HM), each_col this lane's token columns.
	auto each_gu = [&](auto &&fn) {
#pragma unroll
		for (int m = 0; m < HM; m++)
#pragma unroll
			for (int n = 0; n < 4; n++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					fn(m, n, e, row0 + arow(m) + g + 8 * (e >> 1), tok0 + wn * 32 + n * 8 + 2 * t + (e & 1));
	};
	auto each_col = [&](auto &&fn) {
#pragma unroll
		for (int n = 0; n < 4; n++)
#pragma unroll
			for (int e1 = 0; e1 < 2; e1++)
				fn(n, e1, (uint32_t)(wn * 32 + n * 8 + 2 * t + e1));
	};
	if constexpr (!DOWN && !TIER) {
		each_gu([&](int m, int n, int e, uint32_t row, uint32_t tl) {
			if (row < p.inter && tl < s.ntok) {
				const float gv = acc[m][n][e], uv = acc[m + HM][n][e];
				const float hv = gv / (1.0f + expf(-gv)) * uv;
				__nv_bfloat16 hb = __float2bfloat16_rn(hv);
				p.hs[(uint64_t)(s.a0 + tl) * p.ldh + row] = *reinterpret_cast<uint16_t *>(&hb);
			}
		});
	} else if constexpr (!DOWN) {
		// Tier: gate and up times 2^e of the activation row, h into acc[0..HM),
		// per token the exponent that keeps the tile's h segments inside fp16.
		int *ex = reinterpret_cast<int *>(g_smem + C::EX_OFF);
		float xf[4][2], mx[4][2];
		each_col([&](int n, int e1, uint32_t col) {
			const uint32_t tl = tok0 + col;
			xf[n][e1] = tl < s.ntok ? p.xsc[s.a0 + tl] : 1.0f;
			mx[n][e1] = 0.0f;
		});
		each_gu([&](int m, int n, int e, uint32_t row, uint32_t) {
			const float gv = acc[m][n][e] * xf[n][e & 1], uv = acc[m + HM][n][e] * xf[n][e & 1];
			const float hv = row < p.inter ? gv / (1.0f + expf(-gv)) * uv : 0.0f;
			acc[m][n][e] = hv;
			mx[n][e & 1] = fmaxf(mx[n][e & 1], fabsf(hv));
		});
		each_col([&](int n, int e1, uint32_t col) {
			const uint32_t ev = range_exp(mx[n][e1]);
			if (ev)
				atomicMax(ex + col, (int)ev);
		});
		__syncthreads();
		each_col([&](int n, int e1, uint32_t col) { xf[n][e1] = exp2i(-ex[col]); });
		each_gu([&](int m, int n, int e, uint32_t row, uint32_t tl) {
			if (row < p.inter && tl < s.ntok) {
				__half hh = __float2half_rn(acc[m][n][e] * xf[n][e & 1]);
				p.hs[(uint64_t)(s.a0 + tl) * p.ldh + row] = *reinterpret_cast<uint16_t *>(&hh);
			}
		});
		// The tile's segments of h (BM/2 columns from row0) for every token.
		for (uint32_t i = tid; i < BN * (BM / 2 / SEG); i += C::NTHR) {
			const uint32_t n = i % BN, sg = i / BN, tl = tok0 + n;
			if (tl < s.ntok && row0 + sg * SEG < p.inter) {
				const int ev = ex[n];
				p.hexp[(uint64_t)(s.a0 + tl) * p.nseg + row0 / SEG + sg] = (uint8_t)ev;
				if (ev)
					p.hbig[s.a0 + tl] = 1;
			}
		}
	} else {
		each_col([&](int n, int e1, uint32_t col) {
			const uint32_t tl = tok0 + col;
			if (tl >= s.ntok)
				return;
			const uint32_t a = s.a0 + tl;
			const float wt = p.w[a];
			float *yr = p.y + (uint64_t)p.tok[a] * p.hidden;
#pragma unroll
			for (int m = 0; m < MT; m++)
#pragma unroll
				for (int h = 0; h < 2; h++) {
					const uint32_t row = row0 + arow(m) + g + 8 * h;
					if (row < p.hidden)
						atomicAdd(yr + row, wt * acc[m][n][2 * h + e1]);
				}
		});
	}
}

// The folding loop as a call of its own: its register allocation (more live
// values than the ordinary loop) stays out of the ordinary path.
template <class F, class C>
__device__ __noinline__ void tile_segs(const PParams &p, const PSlot &s, uint32_t rt, uint32_t tt)
{
	tile<F, true, C, true>(p, s, rt, tt);
}

// Tier down tile: the ordinary loop, or (a token of the tile has an h segment
// scaled by 2^-e, e > 0) the loop folding per segment.
template <class F, bool DOWN, class C>
__device__ __forceinline__ void tile_sel(const PParams &p, const PSlot &s, uint32_t rt, uint32_t tt)
{
	if constexpr (DOWN && F::SCALED) {
		int big = 0;
		for (uint32_t n = threadIdx.x; n < C::BN; n += C::NTHR)
			if (tt * C::BN + n < s.ntok)
				big |= p.hbig[s.a0 + tt * C::BN + n];
		if (__syncthreads_or(big)) {
			tile_segs<F, C>(p, s, rt, tt);
			return;
		}
	}
	tile<F, DOWN, C, false>(p, s, rt, tt);
}

// The slot of tile b of the launch (tiles of BN tokens, slots in order from
// their tile0), its row tile rt and token tile tt.
__device__ __forceinline__ const PSlot &slot_tile(const PParams &p, uint32_t b, uint32_t bn, uint32_t &rt, uint32_t &tt)
{
	int lo = 0, hi = (int)p.n_slots - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) >> 1;
		if (p.slot[mid].tile0 <= b)
			lo = mid;
		else
			hi = mid - 1;
	}
	const PSlot &s = p.slot[lo];
	const uint32_t ntt = (s.ntok + bn - 1) / bn, local = b - s.tile0;
	tt = local % ntt, rt = local / ntt; // neighbours share the rows (L2)
	return s;
}
// The same for this CTA's tile (grid: one CTA per tile).
__device__ __forceinline__ const PSlot &cta_tile(const PParams &p, uint32_t bn, uint32_t &rt, uint32_t &tt)
{
	return slot_tile(p, blockIdx.x, bn, rt, tt);
}

template <bool DOWN, class C> __global__ void __launch_bounds__(C::NTHR, C::MINB) pf_gemm(const __grid_constant__ PParams p)
{
	uint32_t rt, tt;
	const PSlot &s = cta_tile(p, C::BN, rt, tt);
	switch (s.fmt) {
	case STRATA_FMT_BF16: tile_sel<FmtBF16, DOWN, C>(p, s, rt, tt); break;
	case STRATA_FMT_HOT: tile_sel<FmtHot, DOWN, C>(p, s, rt, tt); break;
	case STRATA_FMT_WARM: tile_sel<FmtWarm, DOWN, C>(p, s, rt, tt); break;
	case STRATA_FMT_COLD: tile_sel<FmtCold, DOWN, C>(p, s, rt, tt); break;
	default: break;
	}
}

} // namespace pf

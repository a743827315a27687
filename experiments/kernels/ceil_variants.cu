// Decode-ceiling variants of the tier formats (issue 21 item 1): which pipe
// bounds the bare decode of kernels/gpu_ceiling.cu, and whether an exact
// decoder with a different instruction mix decodes faster.
//
// Same loop as gpu_ceiling.cu's ceil_kernel (per iteration and lane: four
// 8-weight groups from funnel-shifted register words, four mma.sync m16n8k16
// f16 against a fixed B fragment), with the codebook step per variant:
//   0 exact   decode8x: IMAD hash, IDP4A byte sum, PRMT, 3 HFMA2 per pair
//   1 table   exact: decode8xt (kfmt_tiers.cuh): IMAD hash, IDP4A straight to
//             the address of f(byte sum) in a shared-memory table (1021 u32
//             entries (f, 0), one copy per bank: lane l reads bank l, so no
//             conflicts; 130,688 bytes), 2 LDS + 1 IMAD (f1 * 0x10000 + f0)
//             per pair instead of PRMT + 3 HFMA2
//   2 mixed   exact: pairs 0, 1 of a group by the table, pairs 2, 3 by HFMA2
//   3 nofma   diagnostic, not exact: the byte-sum pair straight to the MMA
//             (no HFMA2)
//   4 noext   diagnostic, not exact: no window extraction (hash of the
//             funnel-shifted word plus a constant per weight)
//   5 nodp    diagnostic, not exact: the byte sum replaced by a LOP3 of the hash
//   6 dup     table entries (f, f), no join: each lookup's (f, f) is one A
//             register, i.e. one weight per register pair of k positions,
//             with the B fragment's odd k zero (twice the MMAs; exact
//             weights, another product, so not in the exact check)
//   7 prmt    exact: the table decoder before 2026-12-06: entries (f, f), a
//             pair = PRMT of two (on the ALU pipe; variant 1 joins them by an
//             IMAD on the FMA-heavy pipe)
// (4 noext: the compiler folds (x + k) * A into one IMAD and IADD3s, so it
// also drops most hash IMADs.)
// Exact variants must give the same sums as variant 0 (checked here).
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -Ikernels -Icore/include \
//        experiments/kernels/ceil_variants.cu -o build/release/bench/ceil_variants
//   ceil_variants [--fmt hot|warm|cold] [--variants 0,1,...]     table of rates
//   ceil_variants --profile V WARPS_PER_SM [--fmt F]              two launches, for ncu
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>

extern "C" {
#include "kernels.h"
}
#include "kfmt.cuh"
#include "gpu_ceiling.cuh"

#define CK(x)                                                                                    \
	do {                                                                                     \
		cudaError_t e_ = (x);                                                            \
		if (e_ != cudaSuccess) {                                                         \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)

namespace {

constexpr uint32_t LANES = 1024, ITERS = 4096, STEP = 11;
using dceil::mma_f16;
using dceil::W;
constexpr uint32_t TABLE_BYTES = TCQ_TAB_BYTES;

template <class F, int V> __device__ __forceinline__ void decode(uint32_t x, uint32_t tb, uint32_t o[4])
{
	if constexpr (V == 0) {
		F::decode8x(x, o);
	} else if constexpr (V == 1) {
		F::decode8xt(x, tb, o);
	} else if constexpr (V == 7) {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			uint32_t a0 = __dp4a(((x >> F::rel(2 * i)) & STRATA_TCQ_MASK) * STRATA_TCQ_HASH_A + STRATA_TCQ_HASH_B,
					     0x80808080u, tb);
			uint32_t a1 = __dp4a(((x >> F::rel(2 * i + 1)) & STRATA_TCQ_MASK) * STRATA_TCQ_HASH_A +
						     STRATA_TCQ_HASH_B, 0x80808080u, tb);
			o[i] = __byte_perm(ldsw32(a0), ldsw32(a1), 0x7610);
		}
	} else if constexpr (V == 2) {
		o[0] = tcq_tab_pair(F::template tw<0>(x), F::template tw<1>(x), tb);
		o[1] = tcq_tab_pair(F::template tw<2>(x), F::template tw<3>(x), tb);
		o[2] = tcq_pair(F::template h<4>(x), F::template h<5>(x));
		o[3] = tcq_pair(F::template h<6>(x), F::template h<7>(x));
	} else if constexpr (V == 3) {
#pragma unroll
		for (int i = 0; i < 4; i++)
			o[i] = __byte_perm(tcq_h16((x >> F::rel(2 * i)) & STRATA_TCQ_MASK),
					   tcq_h16((x >> F::rel(2 * i + 1)) & STRATA_TCQ_MASK), 0x5410);
	} else if constexpr (V == 4) {
#pragma unroll
		for (int i = 0; i < 4; i++)
			o[i] = tcq_pair(tcq_h16(x + 977u * (2 * i)), tcq_h16(x + 977u * (2 * i + 1)));
	} else {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			uint32_t h0 = ((x >> F::rel(2 * i)) & STRATA_TCQ_MASK) * STRATA_TCQ_HASH_A + STRATA_TCQ_HASH_B;
			uint32_t h1 = ((x >> F::rel(2 * i + 1)) & STRATA_TCQ_MASK) * STRATA_TCQ_HASH_A + STRATA_TCQ_HASH_B;
			o[i] = tcq_pair((h0 & 0x3ffu) | 0x6400u, (h1 & 0x3ffu) | 0x6400u);
		}
	}
}

template <class F, int V>
__global__ void __launch_bounds__(1024) var_kernel(const uint32_t *__restrict__ in, uint32_t iters,
						   float *__restrict__ sink)
{
	constexpr bool TAB = V == 1 || V == 2 || V == 6 || V == 7;
	const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
	uint32_t tb = 0;
	if constexpr (TAB) {
		tcq_tab_fill(0, threadIdx.x, blockDim.x);
		__syncthreads();
		if constexpr (V == 6 || V == 7) { // entries (f, f)
			uint32_t *t = reinterpret_cast<uint32_t *>(g_smem);
			for (uint32_t i = threadIdx.x; i < TCQ_TAB_ENTRIES * 32; i += blockDim.x)
				t[i] |= t[i] << 16;
			__syncthreads();
		}
		tb = tcq_tab_base(0);
	}
	uint32_t w[4][2], b[4];
	dceil::load_lane(in + (size_t)(tid % LANES) * W, w, b);
	float c[2][4] = {};
	uint32_t s = tid;
#pragma unroll 4
	for (uint32_t it = 0; it < iters; it++, s += STEP) {
		if constexpr (V == 6) {
			// rows r = 2m + h: 8 lookups (f, f) per row, B odd k zero
#pragma unroll
			for (int m = 0; m < 2; m++) {
				uint32_t x0 = __funnelshift_r(w[2 * m][0], w[2 * m][1], s);
				uint32_t x1 = __funnelshift_r(w[2 * m + 1][0], w[2 * m + 1][1], s);
				uint32_t d0[8], d1[8];
#pragma unroll
				for (int i = 0; i < 8; i++) {
					d0[i] = ldsw32(__dp4a(((x0 >> F::rel(i)) & STRATA_TCQ_MASK) * STRATA_TCQ_HASH_A +
								     STRATA_TCQ_HASH_B, 0x80808080u, tb));
					d1[i] = ldsw32(__dp4a(((x1 >> F::rel(i)) & STRATA_TCQ_MASK) * STRATA_TCQ_HASH_A +
								     STRATA_TCQ_HASH_B, 0x80808080u, tb));
				}
#pragma unroll
				for (int q = 0; q < 4; q++)
					mma_f16(c[m], d0[2 * q], d1[2 * q], d0[2 * q + 1], d1[2 * q + 1], b[q] & 0xffffu,
						b[q] >> 16);
			}
		} else {
			uint32_t a[4][4];
#pragma unroll
			for (int r = 0; r < 4; r++)
				decode<F, V>(__funnelshift_r(w[r][0], w[r][1], s), tb, a[r]);
#pragma unroll
			for (int m = 0; m < 2; m++) {
				mma_f16(c[m], a[2 * m][0], a[2 * m + 1][0], a[2 * m][1], a[2 * m + 1][1], b[0], b[1]);
				mma_f16(c[m], a[2 * m][2], a[2 * m + 1][2], a[2 * m][3], a[2 * m + 1][3], b[2], b[3]);
			}
		}
	}
	sink[tid] = (c[0][0] + c[0][1]) + (c[0][2] + c[0][3]) + (c[1][0] + c[1][1]) + (c[1][2] + c[1][3]);
}

template <class F, int V> void launch(int wpsm, int sms, const uint32_t *in, uint32_t iters, float *sink)
{
	constexpr bool TAB = V == 1 || V == 2 || V == 6 || V == 7;
	if (TAB) {
		// one CTA per SM (the table fills most of shared memory)
		CK(cudaFuncSetAttribute(var_kernel<F, V>, cudaFuncAttributeMaxDynamicSharedMemorySize, TABLE_BYTES));
		var_kernel<F, V><<<sms, 32 * wpsm, TABLE_BYTES>>>(in, iters, sink);
	} else {
		var_kernel<F, V><<<sms * wpsm / 4, 128>>>(in, iters, sink);
	}
	CK(cudaGetLastError());
}

template <class F> void launch_v(int v, int wpsm, int sms, const uint32_t *in, uint32_t iters, float *sink)
{
	switch (v) {
	case 0: launch<F, 0>(wpsm, sms, in, iters, sink); break;
	case 1: launch<F, 1>(wpsm, sms, in, iters, sink); break;
	case 2: launch<F, 2>(wpsm, sms, in, iters, sink); break;
	case 3: launch<F, 3>(wpsm, sms, in, iters, sink); break;
	case 4: launch<F, 4>(wpsm, sms, in, iters, sink); break;
	case 5: launch<F, 5>(wpsm, sms, in, iters, sink); break;
	case 6: launch<F, 6>(wpsm, sms, in, iters, sink); break;
	default: launch<F, 7>(wpsm, sms, in, iters, sink); break;
	}
}

template <class F> int fits_v(int v, int wpsm)
{
	int n = 0;
	void (*const k[8])(const uint32_t *, uint32_t, float *) = {
		var_kernel<F, 0>, var_kernel<F, 1>, var_kernel<F, 2>, var_kernel<F, 3>,
		var_kernel<F, 4>, var_kernel<F, 5>, var_kernel<F, 6>, var_kernel<F, 7>,
	};
	if (v == 1 || v == 2 || v == 6 || v == 7) {
		CK(cudaFuncSetAttribute(k[v], cudaFuncAttributeMaxDynamicSharedMemorySize, TABLE_BYTES));
		CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k[v], 32 * wpsm, TABLE_BYTES));
		return n >= 1;
	}
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k[v], 128, 0));
	return n * 4 >= wpsm;
}

int fits(int fmt, int v, int wpsm)
{
	switch (fmt) {
	STRATA_TIER_CASES(return fits_v<F>(v, wpsm))
	default: return 0;
	}
}

void launch_f(int fmt, int v, int wpsm, int sms, const uint32_t *in, uint32_t iters, float *sink)
{
	switch (fmt) {
	STRATA_TIER_CASES(launch_v<F>(v, wpsm, sms, in, iters, sink))
	default: break;
	}
}

#define FMT_NAME(f) ((f) == STRATA_FMT_HOT ? "hot" : (f) == STRATA_FMT_WARM ? "warm" : "cold")
const char *const NAMES[] = { "exact", "table", "mixed", "nofma", "noext", "nodp", "dup", "prmt" };
int is_tab(int v) { return v == 1 || v == 2 || v == 6 || v == 7; }

} // namespace

int main(int argc, char **argv)
{
	int fmt = STRATA_FMT_HOT, prof_v = -1, prof_w = 0;
	int vars[8] = { 0, 1, 2, 3, 4, 5, 6, 7 }, nv = 8;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--fmt") && i + 1 < argc) {
			const char *n = argv[++i];
			fmt = !strcmp(n, "hot") ? STRATA_FMT_HOT : !strcmp(n, "warm") ? STRATA_FMT_WARM
			    : !strcmp(n, "cold") ? STRATA_FMT_COLD : -1;
			if (fmt < 0) {
				fprintf(stderr, "ceil_variants: --fmt: not a tier format: %s\n", argv[i]);
				return 2;
			}
		} else if (!strcmp(argv[i], "--variants") && i + 1 < argc) {
			nv = 0;
			for (char *p = strtok(argv[++i], ","); p && nv < 8; p = strtok(NULL, ","))
				vars[nv++] = atoi(p) % 8;
		} else if (!strcmp(argv[i], "--profile") && i + 2 < argc) {
			prof_v = atoi(argv[++i]) % 8, prof_w = atoi(argv[++i]);
		} else {
			printf("usage: ceil_variants [--fmt hot|warm|cold] [--variants 0,1,..] [--profile V WARPS_PER_SM]\n"
			       "Decode-ceiling variants of the tier formats (needs a GPU): %s",
			       "0 exact, 1 table, 2 mixed (exact); 3 nofma, 4 noext, 5 nodp (diagnostics).\n");
			return strcmp(argv[i], "--help") ? 2 : 0;
		}
	}
	int sms;
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	uint32_t *h = (uint32_t *)malloc(LANES * W * 4);
	dceil::fill_inputs(h, (size_t)LANES * W, fmt);
	const size_t maxt = (size_t)sms * 48 * 32;
	uint32_t *d_in;
	float *d_sink;
	CK(cudaMalloc(&d_in, LANES * W * 4));
	CK(cudaMalloc(&d_sink, maxt * 4));
	CK(cudaMemcpy(d_in, h, LANES * W * 4, cudaMemcpyHostToDevice));
	if (prof_v >= 0) {
		for (int r = 0; r < 2; r++)
			launch_f(fmt, prof_v, prof_w, sms, d_in, ITERS, d_sink);
		CK(cudaDeviceSynchronize());
		printf("profiled variant %d (%s), %d warps/SM\n", prof_v, NAMES[prof_v], prof_w);
		return 0;
	}
	// exactness: the exact variants' sums equal variant 0's (same decoded
	// values, same MMA order), at 32 warps per SM and 64 iterations
	float *ref = (float *)malloc(maxt * 4), *got = (float *)malloc(maxt * 4);
	const size_t nchk = (size_t)sms * 32 * 32;
	launch_f(fmt, 0, 32, sms, d_in, 64, d_sink);
	CK(cudaMemcpy(ref, d_sink, nchk * 4, cudaMemcpyDeviceToHost));
	for (int v = 1; v <= 7; v += v == 2 ? 5 : 1) { // the exact ones: 1, 2, 7
		CK(cudaMemset(d_sink, 0xff, nchk * 4));
		launch_f(fmt, v, 32, sms, d_in, 64, d_sink);
		CK(cudaMemcpy(got, d_sink, nchk * 4, cudaMemcpyDeviceToHost));
		size_t bad = 0;
		for (size_t i = 0; i < nchk; i++)
			bad += memcmp(&ref[i], &got[i], 4) != 0;
		printf("exact check %s vs exact: %zu of %zu sums differ%s\n", NAMES[v], bad, nchk, bad ? "  FAILED" : "");
	}
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	const int wl[] = { 8, 12, 16, 24, 32, 48 };
	printf("fmt %s: variant, warps/SM, Tweights/s (median of 7)\n", FMT_NAME(fmt));
	for (int k = 0; k < nv; k++) {
		int v = vars[k];
		double best = 0;
		int bw = 0;
		for (int j = 0; j < 6; j++) {
			int wpsm = wl[j];
			bool tab = is_tab(v);
			if (tab && wpsm > 32)
				continue;
			if ((!tab && wpsm % 4) || !fits(fmt, v, wpsm))
				continue;
			for (int r = 0; r < 2; r++)
				launch_f(fmt, v, wpsm, sms, d_in, ITERS, d_sink);
			float ms[7];
			for (int r = 0; r < 7; r++) {
				CK(cudaEventRecord(e0));
				launch_f(fmt, v, wpsm, sms, d_in, ITERS, d_sink);
				CK(cudaEventRecord(e1));
				CK(cudaEventSynchronize(e1));
				CK(cudaEventElapsedTime(&ms[r], e0, e1));
			}
			std::sort(ms, ms + 7);
			double tw = (double)sms * wpsm * 1024.0 * ITERS / (ms[3] * 1e-3) / 1e12;
			printf("  %-6s %2d warps/SM  %.3f\n", NAMES[v], wpsm, tw);
			if (tw > best)
				best = tw, bw = wpsm;
		}
		printf("best %s %s %.3f Tweights/s at %d warps/SM\n", FMT_NAME(fmt), NAMES[v], best, bw);
	}
	return 0;
}

// Decode ceiling of the tier formats: the rate at which this GPU turns code
// words of a format into fp16 weights on the tensor cores when memory costs
// nothing, for reading the fused decode figures against
// min(read ceiling, decode ceiling) (tests/bench/bench_kernels.c).
//
// Every lane keeps its code words in registers (loaded once) and loops over
// the work of one 32-weight unit of the warp-streaming decode kernel
// (moe_decode.cuh, unit_mma): four 8-weight groups (rows g, g+8 of two 16-row
// tiles), each decoded by FmtTier<FMT>::decode8x from a 32-bit window, then
// four mma.sync m16n8k16 (f16 x f16, f32 accumulation) against a fixed B
// fragment, so 1024 weights per warp and iteration.  The window of a group is
// a funnel shift of its two code words by an amount that changes every
// iteration: the window extraction every decoder does (the fused kernel reads
// two shared-memory words and shifts them), here one SHF per 8 weights plus
// one add per iteration, so nothing can be hoisted out of the loop.  Not
// counted: reading codes and activations, packing activations, block scales.
// Each thread writes the sum of its accumulators, so no result is dead.
//
// Two exact decoders (the same fp16 values, bit for bit): STRATA_CEIL_FMA,
// decode8x (IMAD hash, IDP4A byte sum, PRMT + 3 HFMA2 per pair), and
// STRATA_CEIL_TABLE, decode8xt (IMAD hash, IDP4A straight to the address of
// f(byte sum) in a per-bank shared-memory table, 2 LDS + 1 IMAD per pair).
// The table takes 128 KB, so its CTAs are one per SM of 8 - 32 warps.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

extern "C" {
#include "kernels.h"
}

#include "kfmt.cuh"
#include "cuda_check.cuh"
#include "gpu_ceiling.cuh"

namespace {

constexpr int CEIL_THREADS = 128;       // 4 warps per CTA (table decoder: all the SM's warps)
constexpr uint32_t CEIL_LANES = 1024;   // distinct lanes' inputs in the timed runs
constexpr uint32_t CEIL_ITERS = 4096;   // iterations per thread of a timed launch
constexpr uint32_t CEIL_SHIFT_STEP = 11; // shift advance per iteration (odd: every amount 0..31 occurs)
using dceil::mma_f16;
using dceil::W;

// Thread tid takes lane (tid % nlanes) of in[]: code words of rows r = 0..3
// at [2r], [2r + 1] (r = 2m + h: row g + 8h of tile m), the B fragment at
// [8..11].  TRACE: every decoded pair to trace[((it * 4 + r) * 4 + i) * nthreads + tid].
template <class F, bool TRACE, bool TAB>
__global__ void __launch_bounds__(TAB ? 1024 : CEIL_THREADS)
	ceil_kernel(const uint32_t *__restrict__ in, uint32_t nlanes, uint32_t iters, float *__restrict__ sink,
		    uint32_t *__restrict__ trace)
{
	const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
	if constexpr (TAB) {
		tcq_tab_fill(0, threadIdx.x, blockDim.x);
		__syncthreads();
	}
	const uint32_t tb = tcq_tab_base(0);
	uint32_t w[4][2], b[4];
	dceil::load_lane(in + (size_t)(tid % nlanes) * W, w, b);
	float c[2][4] = {};
	uint32_t s = tid;
#pragma unroll 4
	for (uint32_t it = 0; it < iters; it++, s += CEIL_SHIFT_STEP) {
		uint32_t a[4][4];
#pragma unroll
		for (int r = 0; r < 4; r++) {
			if constexpr (TAB)
				F::decode8xt(__funnelshift_r(w[r][0], w[r][1], s), tb, a[r]);
			else
				F::decode8x(__funnelshift_r(w[r][0], w[r][1], s), a[r]);
		}
		if constexpr (TRACE) {
			const uint32_t n = gridDim.x * blockDim.x;
#pragma unroll
			for (int r = 0; r < 4; r++)
#pragma unroll
				for (int i = 0; i < 4; i++)
					trace[((it * 4 + r) * 4 + i) * n + tid] = a[r][i];
		}
#pragma unroll
		for (int m = 0; m < 2; m++) {
			mma_f16(c[m], a[2 * m][0], a[2 * m + 1][0], a[2 * m][1], a[2 * m + 1][1], b[0], b[1]);
			mma_f16(c[m], a[2 * m][2], a[2 * m + 1][2], a[2 * m][3], a[2 * m + 1][3], b[2], b[3]);
		}
	}
	sink[tid] = (c[0][0] + c[0][1]) + (c[0][2] + c[0][3]) + (c[1][0] + c[1][1]) + (c[1][2] + c[1][3]);
}

// A launch of grid CTAs of `threads` threads (the table decoder: its table
// as dynamic shared memory).
template <class F, bool TRACE, bool TAB>
cudaError_t launch_k(unsigned grid, unsigned threads, const uint32_t *in, uint32_t nlanes, uint32_t iters, float *sink,
		     uint32_t *trace)
{
	if (TAB) {
		cudaError_t e = cudaFuncSetAttribute(ceil_kernel<F, TRACE, TAB>,
						     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)TCQ_TAB_BYTES);
		if (e != cudaSuccess)
			return e;
	}
	ceil_kernel<F, TRACE, TAB><<<grid, threads, TAB ? TCQ_TAB_BYTES : 0>>>(in, nlanes, iters, sink, trace);
	return cudaGetLastError();
}

template <bool TRACE>
cudaError_t launch_dec(int fmt, int dec, unsigned grid, unsigned threads, const uint32_t *in, uint32_t nlanes,
		       uint32_t iters, float *sink, uint32_t *trace)
{
	switch (fmt) {
	STRATA_TIER_CASES(return (dec == STRATA_CEIL_TABLE
					  ? launch_k<F, TRACE, true>(grid, threads, in, nlanes, iters, sink, trace)
					  : launch_k<F, TRACE, false>(grid, threads, in, nlanes, iters, sink, trace)))
	default: break;
	}
	return cudaErrorInvalidValue;
}

int launch(int fmt, int dec, unsigned grid, unsigned threads, const uint32_t *in, uint32_t nlanes, uint32_t iters,
	   float *sink, struct strata_error *err)
{
	CU_TRY(err, (launch_dec<false>(fmt, dec, grid, threads, in, nlanes, iters, sink, NULL)));
	return STRATA_OK;
}

// CTAs of `threads` threads that fit on an SM at once.
cudaError_t occupancy(int fmt, int dec, unsigned threads, int *blocks)
{
	cudaError_t e = cudaErrorInvalidValue;
	*blocks = 0;
	switch (fmt) {
	STRATA_TIER_CASES(
		if (dec == STRATA_CEIL_TABLE) {
			e = cudaFuncSetAttribute(ceil_kernel<F, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
						 (int)TCQ_TAB_BYTES);
			if (e == cudaSuccess)
				e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, ceil_kernel<F, false, true>,
										  (int)threads, TCQ_TAB_BYTES);
		} else {
			e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, ceil_kernel<F, false, false>,
									  (int)threads, 0);
		})
	default: break;
	}
	return e;
}

int cmp_f(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

// Fastest of 8, 16, 32, 48 warps per SM (the table decoder: 8, 16, 24, 32;
// where they fit): weights per second.
int measure(int fmt, int dec, const uint32_t *d_in, float *d_sink, double *wps, uint32_t *wpsm, cudaEvent_t e0,
	    cudaEvent_t e1, struct strata_error *err)
{
	int dev, sms;
	CU_TRY(err, cudaGetDevice(&dev));
	CU_TRY(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	*wps = 0;
	const bool tab = dec == STRATA_CEIL_TABLE;
	const int warps[2][4] = { { 8, 16, 32, 48 }, { 8, 16, 24, 32 } };
	for (int k = 0; k < 4; k++) {
		const int w = warps[tab][k];
		// table: one CTA of all w warps per SM; otherwise w / 4 CTAs of 4 warps
		const unsigned threads = tab ? 32 * w : CEIL_THREADS, grid = tab ? sms : sms * w / 4;
		int fit;
		CU_TRY(err, occupancy(fmt, dec, threads, &fit));
		if (fit < (tab ? 1 : w / 4))
			continue;
		int rc;
		for (int i = 0; i < 2; i++)
			if ((rc = launch(fmt, dec, grid, threads, d_in, CEIL_LANES, CEIL_ITERS, d_sink, err)))
				return rc;
		float ms[7];
		for (int r = 0; r < 7; r++) {
			CU_TRY(err, cudaEventRecord(e0, 0));
			if ((rc = launch(fmt, dec, grid, threads, d_in, CEIL_LANES, CEIL_ITERS, d_sink, err)))
				return rc;
			CU_TRY(err, cudaEventRecord(e1, 0));
			CU_TRY(err, cudaEventSynchronize(e1));
			CU_TRY(err, cudaEventElapsedTime(&ms[r], e0, e1));
		}
		qsort(ms, 7, sizeof(float), cmp_f);
		double weights = (double)grid * threads / 32 * 1024.0 * CEIL_ITERS;
		double rate = weights / (ms[3] * 1e-3);
		if (rate > *wps)
			*wps = rate, *wpsm = (uint32_t)w;
	}
	if (*wps <= 0)
		return STRATA_ERR(err, STRATA_EGPU, "decode ceiling: the kernel fits no CTA of %d threads on an SM",
				  CEIL_THREADS);
	return STRATA_OK;
}

} // namespace

extern "C" int strata_gpu_decode_ceiling(int fmt, int dec, double *weights_per_s, uint32_t *warps_per_sm,
					 struct strata_error *err)
{
	*weights_per_s = 0;
	uint32_t wpsm = 0;
	if (fmt < STRATA_FMT_HOT || fmt > STRATA_FMT_COLD)
		return STRATA_ERR(err, STRATA_EINVAL, "decode ceiling: format %d is not a tier format", fmt);
	if (dec != STRATA_CEIL_FMA && dec != STRATA_CEIL_TABLE)
		return STRATA_ERR(err, STRATA_EINVAL, "decode ceiling: decoder %d (0 fma, 1 table)", dec);
	if (strata_gpu_count() <= 0)
		return STRATA_ERR(err, STRATA_EUNSUPPORTED, "decode ceiling: no CUDA device");
	int dev, sms;
	CU_TRY(err, cudaGetDevice(&dev));
	CU_TRY(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	// inputs: random code words; B fragment: random fp16 in +-[2^-4, 1)
	const size_t in_words = (size_t)CEIL_LANES * W;
	uint32_t *h = (uint32_t *)malloc(in_words * 4);
	if (!h)
		return STRATA_ERR(err, STRATA_ENOMEM, "decode ceiling: %zu bytes of host memory", in_words * 4);
	dceil::fill_inputs(h, in_words, fmt);
	uint32_t *d_in = NULL;
	float *d_sink = NULL;
	cudaEvent_t e0 = NULL, e1 = NULL;
	int rc = STRATA_OK;
	const size_t max_threads = (size_t)sms * 48 * 32;
	cudaError_t ce = cudaMalloc(&d_in, in_words * 4);
	if (ce == cudaSuccess)
		ce = cudaMalloc(&d_sink, max_threads * 4);
	if (ce == cudaSuccess)
		ce = cudaMemcpy(d_in, h, in_words * 4, cudaMemcpyHostToDevice);
	if (ce == cudaSuccess)
		ce = cudaEventCreate(&e0);
	if (ce == cudaSuccess)
		ce = cudaEventCreate(&e1);
	if (ce != cudaSuccess)
		rc = strata_error_set(err, STRATA_EGPU, 0, __FILE__, __LINE__, "decode ceiling: setup: %s",
				      cudaGetErrorString(ce));
	else
		rc = measure(fmt, dec, d_in, d_sink, weights_per_s, &wpsm, e0, e1, err);
	free(h);
	cudaFree(d_in);
	cudaFree(d_sink);
	if (e0)
		cudaEventDestroy(e0);
	if (e1)
		cudaEventDestroy(e1);
	if (warps_per_sm)
		*warps_per_sm = wpsm;
	return rc;
}

extern "C" int strata_gpu_decode_ceiling_trace(int fmt, int dec, uint32_t iters, const uint32_t *in, uint32_t *pairs,
					       float *sink, struct strata_error *err)
{
	if (fmt < STRATA_FMT_HOT || fmt > STRATA_FMT_COLD)
		return STRATA_ERR(err, STRATA_EINVAL, "decode ceiling: format %d is not a tier format", fmt);
	if (dec != STRATA_CEIL_FMA && dec != STRATA_CEIL_TABLE)
		return STRATA_ERR(err, STRATA_EINVAL, "decode ceiling: decoder %d (0 fma, 1 table)", dec);
	if (strata_gpu_count() <= 0)
		return STRATA_ERR(err, STRATA_EUNSUPPORTED, "decode ceiling: no CUDA device");
	if (iters == 0 || iters > 1024)
		return STRATA_ERR(err, STRATA_EINVAL, "decode ceiling trace: %u iterations (1..1024)", iters);
	const size_t in_bytes = 32 * W * 4, tr_bytes = (size_t)iters * 16 * 32 * 4;
	uint32_t *d_in = NULL, *d_tr = NULL;
	float *d_sink = NULL;
	int rc = STRATA_OK;
	cudaError_t ce = cudaMalloc(&d_in, in_bytes);
	if (ce == cudaSuccess)
		ce = cudaMalloc(&d_tr, tr_bytes);
	if (ce == cudaSuccess)
		ce = cudaMalloc(&d_sink, 32 * 4);
	if (ce == cudaSuccess)
		ce = cudaMemcpy(d_in, in, in_bytes, cudaMemcpyHostToDevice);
	if (ce == cudaSuccess) // one CTA of 32 threads: the kernel's whole CTA is one warp here
		ce = launch_dec<true>(fmt, dec, 1, 32, d_in, 32, iters, d_sink, d_tr);
	if (ce == cudaSuccess)
		ce = cudaMemcpy(pairs, d_tr, tr_bytes, cudaMemcpyDeviceToHost);
	if (ce == cudaSuccess)
		ce = cudaMemcpy(sink, d_sink, 32 * 4, cudaMemcpyDeviceToHost);
	if (ce != cudaSuccess)
		rc = strata_error_set(err, STRATA_EGPU, 0, __FILE__, __LINE__, "decode ceiling trace: %s",
				      cudaGetErrorString(ce));
	cudaFree(d_in);
	cudaFree(d_tr);
	cudaFree(d_sink);
	return rc;
}

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

namespace {

constexpr int CEIL_THREADS = 128;       // 4 warps per CTA
constexpr uint32_t CEIL_LANES = 1024;   // distinct lanes' inputs in the timed runs
constexpr uint32_t CEIL_ITERS = 4096;   // iterations per thread of a timed launch
constexpr uint32_t CEIL_SHIFT_STEP = 11; // shift advance per iteration (odd: every amount 0..31 occurs)
constexpr int W = STRATA_CEIL_LANE_WORDS;

__device__ __forceinline__ void mma_f16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
					uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
		     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Thread tid takes lane (tid % nlanes) of in[]: code words of rows r = 0..3
// at [2r], [2r + 1] (r = 2m + h: row g + 8h of tile m), the B fragment at
// [8..11].  TRACE: every decoded pair to trace[((it * 4 + r) * 4 + i) * nthreads + tid].
template <class F, bool TRACE>
__global__ void __launch_bounds__(CEIL_THREADS) ceil_kernel(const uint32_t *__restrict__ in, uint32_t nlanes,
							    uint32_t iters, float *__restrict__ sink,
							    uint32_t *__restrict__ trace)
{
	const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
	const uint32_t *my = in + (size_t)(tid % nlanes) * W;
	uint32_t w[4][2], b[4];
#pragma unroll
	for (int r = 0; r < 4; r++)
		w[r][0] = my[2 * r], w[r][1] = my[2 * r + 1];
#pragma unroll
	for (int i = 0; i < 4; i++)
		b[i] = my[8 + i];
	float c[2][4] = {};
	uint32_t s = tid;
#pragma unroll 4
	for (uint32_t it = 0; it < iters; it++, s += CEIL_SHIFT_STEP) {
		uint32_t a[4][4];
#pragma unroll
		for (int r = 0; r < 4; r++)
			F::decode8x(__funnelshift_r(w[r][0], w[r][1], s), a[r]);
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

template <bool TRACE>
int launch(int fmt, unsigned grid, const uint32_t *in, uint32_t nlanes, uint32_t iters, float *sink, uint32_t *trace,
	   struct strata_error *err)
{
	switch (fmt) {
	STRATA_TIER_CASES((ceil_kernel<F, TRACE><<<grid, CEIL_THREADS>>>(in, nlanes, iters, sink, trace)))
	default:
		return STRATA_ERR(err, STRATA_EINVAL, "decode ceiling: format %d is not a tier format", fmt);
	}
	CU_TRY(err, cudaGetLastError());
	return STRATA_OK;
}

cudaError_t occupancy(int fmt, int *blocks)
{
	cudaError_t e = cudaErrorInvalidValue;
	*blocks = 0;
	switch (fmt) {
	STRATA_TIER_CASES((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, ceil_kernel<F, false>,
									      CEIL_THREADS, 0)))
	default: break;
	}
	return e;
}

uint64_t next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

int cmp_f(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

// Fastest of 8, 16, 32, 48 warps per SM (where they fit): weights per second.
int measure(int fmt, const uint32_t *d_in, float *d_sink, double *wps, uint32_t *wpsm, cudaEvent_t e0, cudaEvent_t e1,
	    struct strata_error *err)
{
	int dev, sms, fit;
	CU_TRY(err, cudaGetDevice(&dev));
	CU_TRY(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	CU_TRY(err, occupancy(fmt, &fit));
	*wps = 0;
	const int per_sm[] = { 2, 4, 8, 12 };
	for (int k = 0; k < 4; k++) {
		if (per_sm[k] > fit)
			continue;
		unsigned grid = (unsigned)(sms * per_sm[k]);
		int rc;
		for (int i = 0; i < 2; i++)
			if ((rc = launch<false>(fmt, grid, d_in, CEIL_LANES, CEIL_ITERS, d_sink, NULL, err)))
				return rc;
		float ms[7];
		for (int r = 0; r < 7; r++) {
			CU_TRY(err, cudaEventRecord(e0, 0));
			if ((rc = launch<false>(fmt, grid, d_in, CEIL_LANES, CEIL_ITERS, d_sink, NULL, err)))
				return rc;
			CU_TRY(err, cudaEventRecord(e1, 0));
			CU_TRY(err, cudaEventSynchronize(e1));
			CU_TRY(err, cudaEventElapsedTime(&ms[r], e0, e1));
		}
		qsort(ms, 7, sizeof(float), cmp_f);
		double weights = (double)grid * CEIL_THREADS / 32 * 1024.0 * CEIL_ITERS;
		double rate = weights / (ms[3] * 1e-3);
		if (rate > *wps)
			*wps = rate, *wpsm = (uint32_t)per_sm[k] * CEIL_THREADS / 32;
	}
	if (*wps <= 0)
		return STRATA_ERR(err, STRATA_EGPU, "decode ceiling: the kernel fits no CTA of %d threads on an SM",
				  CEIL_THREADS);
	return STRATA_OK;
}

} // namespace

extern "C" int strata_gpu_decode_ceiling(int fmt, double *weights_per_s, uint32_t *warps_per_sm,
					 struct strata_error *err)
{
	*weights_per_s = 0;
	uint32_t wpsm = 0;
	if (fmt < STRATA_FMT_HOT || fmt > STRATA_FMT_COLD)
		return STRATA_ERR(err, STRATA_EINVAL, "decode ceiling: format %d is not a tier format", fmt);
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
	uint64_t x = 0x9e3779b97f4a7c15ull ^ (uint64_t)fmt;
	for (size_t i = 0; i < in_words; i++) {
		uint32_t v = (uint32_t)(next(&x) >> 16);
		if (i % W >= 8) {
			uint32_t lo = (v & 0x83ffu) | ((11u + (v >> 16) % 4) << 10);
			uint32_t hi = ((v >> 8) & 0x83ffu) | ((11u + (v >> 20) % 4) << 10);
			v = lo | hi << 16;
		}
		h[i] = v;
	}
	uint32_t *d_in = NULL;
	float *d_sink = NULL;
	cudaEvent_t e0 = NULL, e1 = NULL;
	int rc = STRATA_OK;
	const size_t max_threads = (size_t)sms * 12 * CEIL_THREADS;
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
		rc = measure(fmt, d_in, d_sink, weights_per_s, &wpsm, e0, e1, err);
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

extern "C" int strata_gpu_decode_ceiling_trace(int fmt, uint32_t iters, const uint32_t *in, uint32_t *pairs,
					       float *sink, struct strata_error *err)
{
	if (fmt < STRATA_FMT_HOT || fmt > STRATA_FMT_COLD)
		return STRATA_ERR(err, STRATA_EINVAL, "decode ceiling: format %d is not a tier format", fmt);
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
	if (ce == cudaSuccess) {
		// one CTA of 32 threads: the kernel's whole CTA is one warp here
		switch (fmt) {
		STRATA_TIER_CASES((ceil_kernel<F, true><<<1, 32>>>(d_in, 32, iters, d_sink, d_tr)))
		default: break;
		}
		ce = cudaGetLastError();
	}
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

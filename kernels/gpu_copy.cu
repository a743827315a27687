// Batched host -> device copies for the cuda mover (core/movers/mover_cuda.c).
//
// A single cudaMemcpyAsync costs the copy engine a few microseconds of setup
// that no later copy overlaps; at a Qwen3-30B-A3B expert (0.8-1.7 MB, 15-30 us
// on the link) that is 8-14 % of the link.  Two ways to hand the GPU many
// extents at once:
//   batch: cudaMemcpyBatchAsync (CUDA 12.8+), one call and one stream-ordered
//          batch for all moves a submit holds; falls back to a loop of
//          cudaMemcpyAsync where the driver refuses it;
//   sm:    one kernel whose thread blocks read the pinned (registered, mapped)
//          host extents over PCIe with 16-byte loads and store them to device
//          memory: no copy-engine setup at all, at the price of a few SMs.
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "strata/gpu.h"
}

#include "cuda_check.cuh"

extern "C" int strata_gpu_memcpy_h2d_batch_async(void *const *dst, const void *const *src, const size_t *bytes,
						 uint32_t n, strata_gpu_stream *s, struct strata_error *err)
{
	if (n == 0)
		return STRATA_OK;
	if (n > 1) {
		struct cudaMemcpyAttributes a;
		memset(&a, 0, sizeof(a));
		a.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
		a.srcLocHint.type = cudaMemLocationTypeHost;
		a.dstLocHint.type = cudaMemLocationTypeDevice;
		cudaGetDevice(&a.dstLocHint.id);
		size_t idx = 0;
		cudaError_t e = cudaMemcpyBatchAsync((void **)dst, (const void **)src, bytes, n, &a, &idx, 1,
						     (cudaStream_t)s);
		if (e == cudaSuccess)
			return STRATA_OK;
		if (e != cudaErrorNotSupported && e != cudaErrorInvalidValue)
			return strata_error_set(err, STRATA_EGPU, 0, __FILE__, __LINE__,
						"cudaMemcpyBatchAsync(%u copies): %s", n, cudaGetErrorString(e));
		cudaGetLastError(); /* refused before anything was queued: one call per copy */
	}
	for (uint32_t i = 0; i < n; i++)
		CU_TRY(err, cudaMemcpyAsync(dst[i], src[i], bytes[i], cudaMemcpyHostToDevice, (cudaStream_t)s));
	return STRATA_OK;
}

/* sm copy: up to STRATA_GPU_COPY_MAX extents per launch, passed by value */
struct copy_batch {
	const uint8_t *src[STRATA_GPU_COPY_MAX];
	uint8_t *dst[STRATA_GPU_COPY_MAX];
	uint64_t bytes[STRATA_GPU_COPY_MAX];
};

#define COPY_THREADS 512
#define COPY_UNROLL 4

/* blockIdx.y picks the extent; the x blocks stride over it in 16-byte
 * vectors, COPY_UNROLL loads in flight per thread before the stores.  The
 * head up to 16-byte alignment and the tail go byte by byte. */
__global__ void __launch_bounds__(COPY_THREADS) copy_kernel(struct copy_batch b)
{
	const uint8_t *src = b.src[blockIdx.y];
	uint8_t *dst = b.dst[blockIdx.y];
	uint64_t n = b.bytes[blockIdx.y];
	uint64_t head = (16 - ((uintptr_t)src & 15)) & 15;
	if (((uintptr_t)src & 15) != ((uintptr_t)dst & 15))
		head = n; /* misaligned against each other: bytes only (never for extents) */
	if (head > n)
		head = n;
	uint64_t tid = (uint64_t)blockIdx.x * COPY_THREADS + threadIdx.x;
	uint64_t nthr = (uint64_t)gridDim.x * COPY_THREADS;
	for (uint64_t i = tid; i < head; i += nthr)
		dst[i] = src[i];
	const uint4 *s4 = (const uint4 *)(src + head);
	uint4 *d4 = (uint4 *)(dst + head);
	uint64_t nv = (n - head) / 16;
	uint64_t i = tid;
	for (; i + (COPY_UNROLL - 1) * nthr < nv; i += COPY_UNROLL * nthr) {
		uint4 v[COPY_UNROLL];
#pragma unroll
		for (int u = 0; u < COPY_UNROLL; u++)
			v[u] = __ldcs(s4 + i + u * nthr);
#pragma unroll
		for (int u = 0; u < COPY_UNROLL; u++)
			d4[i + u * nthr] = v[u];
	}
	for (; i < nv; i += nthr)
		d4[i] = __ldcs(s4 + i);
	for (uint64_t t = head + nv * 16 + tid; t < n; t += nthr)
		dst[t] = src[t];
}

extern "C" int strata_gpu_copy_sm_available(void)
{
	int dev = 0, ok = 0;
	if (strata_gpu_count() == 0 || cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&ok, cudaDevAttrCanUseHostPointerForRegisteredMem, dev) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return ok;
}

extern "C" int strata_gpu_copy_h2d_sm_async(void *const *dst, const void *const *src, const size_t *bytes, uint32_t n,
					    uint32_t blocks, strata_gpu_stream *s, struct strata_error *err)
{
	if (n > STRATA_GPU_COPY_MAX)
		return STRATA_ERR(err, STRATA_EINVAL, "sm copy: %u extents in one batch (at most %d)", n,
				  STRATA_GPU_COPY_MAX);
	if (n == 0)
		return STRATA_OK;
	struct copy_batch b;
	uint64_t most = 0;
	for (uint32_t i = 0; i < n; i++) {
		b.src[i] = (const uint8_t *)src[i];
		b.dst[i] = (uint8_t *)dst[i];
		b.bytes[i] = bytes[i];
		if (bytes[i] > most)
			most = bytes[i];
	}
	/* blocks per extent: enough to cover it with COPY_UNROLL vectors per
	 * thread, at most `blocks` in total over the batch */
	uint64_t per = (most + (uint64_t)COPY_THREADS * 16 * COPY_UNROLL - 1) / ((uint64_t)COPY_THREADS * 16 * COPY_UNROLL);
	uint32_t cap = blocks ? blocks : 64;
	uint64_t bx = per;
	if (bx * n > cap)
		bx = cap / n ? cap / n : 1;
	copy_kernel<<<dim3((unsigned)bx, n), COPY_THREADS, 0, (cudaStream_t)s>>>(b);
	CU_TRY(err, cudaGetLastError());
	return STRATA_OK;
}

// What the microbenchmarks of experiments/kernels (gv_pattern.cu,
// stack_pattern.cu) share: the CUDA error check, the load, copy and
// synchronisation instructions they time, and the sequential read they are
// measured against.  Standalone programs: the kernels' own versions live
// inside kernels/moe_gpu.cu's translation unit.
#pragma once
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                   \
	do {                                                                                    \
		cudaError_t e_ = (x);                                                           \
		if (e_ != cudaSuccess) {                                                        \
			fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(1);                                                                \
		}                                                                               \
	} while (0)

// 16 (8) bytes of weights, not allocated in L1, 256-byte L2 sectors
__device__ __forceinline__ uint4 ldw(const uint8_t *q)
{
	uint4 v;
	asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
		     : "l"(q));
	return v;
}

__device__ __forceinline__ uint2 ldw8(const uint8_t *q)
{
	uint2 v;
	asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(q));
	return v;
}

// 16 (8) bytes of shared memory at a 32-bit shared-window address
__device__ __forceinline__ uint4 lds(uint32_t a)
{
	uint4 v;
	asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
	return v;
}

__device__ __forceinline__ uint2 lds8(uint32_t a)
{
	uint2 v;
	asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(a));
	return v;
}

// c + the signed 16-bit halves of a x code bytes 0, 1 (HI: 2, 3) of b
template <bool HI> __device__ __forceinline__ int dp2a(uint32_t a, uint32_t b, int c)
{
	int d;
	if constexpr (HI)
		asm("dp2a.hi.s32.u32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	else
		asm("dp2a.lo.s32.u32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	return d;
}

// n bytes at q into L2
__device__ __forceinline__ void l2_prefetch(const uint8_t *q, uint32_t n)
{
	asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(q), "r"(n) : "memory");
}

__device__ __forceinline__ uint32_t ld_acquire(const uint32_t *p)
{
	uint32_t v;
	asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
	return v;
}

// a 1-D bulk copy into shared memory, completion counted on mbar
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t mbar)
{
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
		     ::"r"(dst), "l"(src), "r"(bytes), "r"(mbar) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint32_t mbar, uint32_t parity)
{
	uint32_t ok;
	do {
		asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
			     "selp.u32 %0, 1, 0, p;\n\t}\n"
			     : "=r"(ok) : "r"(mbar), "r"(parity) : "memory");
	} while (!ok);
}

// the read ceiling: every byte of p once, 16-byte streaming loads
__global__ void seq_kernel(const uint4 *p, size_t n, uint32_t *sink)
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

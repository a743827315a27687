// BF16 paths through cuBLAS (kernels.h): linear layers and shared experts whose
// weights stay BF16, and the raw bf16 GEMM the benchmark compares against.
// Row-major W (rows x cols) is column-major W^T, so y[n x rows] = x W^T is
// cublasGemmEx(op_T(W) as A, x as B) with m = rows, n = n, k = cols.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <string.h>

extern "C" {
#include "kernels.h"
#include "quant.h"
}

#include "cuda_check.cuh"
#define CUBLAS_TRY(err, call)                                                                      \
	do {                                                                                       \
		cublasStatus_t s_ = (call);                                                        \
		if (s_ != CUBLAS_STATUS_SUCCESS)                                                   \
			return strata_error_set((err), STRATA_EGPU, 0, __FILE__, __LINE__, "%s: %s", \
						#call, cublasGetStatusString(s_));                 \
	} while (0)

namespace {

struct Blas {
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	cublasHandle_t h = nullptr;
	void *scratch = nullptr; // bf16 activations, then f32 gate/up
	size_t cap = 0;
};
Blas g_blas;

__global__ void f32_to_bf16_kernel(const float *x, __nv_bfloat16 *o, size_t n)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		o[i] = __float2bfloat16_rn(x[i]);
}

// h = bf16(silu(g) * u), g and u n x inter f32.
__global__ void swiglu_kernel(const float *g, const float *u, __nv_bfloat16 *h, size_t n)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		float a = g[i];
		h[i] = __float2bfloat16_rn(a / (1.0f + expf(-a)) * u[i]);
	}
}

int blas_init(cudaStream_t st, size_t need, struct strata_error *err)
{
	if (strata_gpu_count() <= 0)
		return STRATA_ERR(err, STRATA_EUNSUPPORTED, "cuBLAS path: no GPU");
	if (!g_blas.h)
		CUBLAS_TRY(err, cublasCreate(&g_blas.h));
	CUBLAS_TRY(err, cublasSetStream(g_blas.h, st));
	if (need > g_blas.cap) {
		if (g_blas.scratch) {
			CU_TRY(err, cudaStreamSynchronize(st));
			cudaFree(g_blas.scratch);
			g_blas.scratch = nullptr, g_blas.cap = 0;
		}
		CU_TRY(err, cudaMalloc(&g_blas.scratch, need));
		g_blas.cap = need;
	}
	return STRATA_OK;
}

int gemm(const void *a, uint32_t rows, uint32_t cols, const void *b, uint32_t n, float *c, float alpha,
	 float beta, struct strata_error *err)
{
	CUBLAS_TRY(err, cublasGemmEx(g_blas.h, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, (int)n, (int)cols, &alpha, a,
				     CUDA_R_16BF, (int)cols, b, CUDA_R_16BF, (int)cols, &beta, c, CUDA_R_32F,
				     (int)rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
	return STRATA_OK;
}

unsigned grid_for(size_t n)
{
	size_t b = (n + 255) / 256;
	return (unsigned)(b < 4096 ? (b ? b : 1) : 4096);
}

int linear(const uint16_t *w, uint32_t rows, uint32_t cols, const float *x, uint32_t n, float *y, float alpha,
	   float beta, cudaStream_t st, struct strata_error *err)
{
	size_t nx = (size_t)n * cols;
	int rc = blas_init(st, nx * 2, err);
	if (rc)
		return rc;
	f32_to_bf16_kernel<<<grid_for(nx), 256, 0, st>>>(x, (__nv_bfloat16 *)g_blas.scratch, nx);
	CU_TRY(err, cudaGetLastError());
	return gemm(w, rows, cols, g_blas.scratch, n, y, alpha, beta, err);
}

int expert(const void *ext, uint32_t hidden, uint32_t inter, const float *x, uint32_t n, float weight, float *y,
	   cudaStream_t st, struct strata_error *err)
{
	struct strata_expert_layout E;
	if (strata_expert_layout(STRATA_FMT_BF16, hidden, inter, &E))
		return STRATA_ERR(err, STRATA_EINVAL, "strata_gpu_expert_bf16: bad shape %u x %u", hidden, inter);
	size_t nx = (size_t)n * hidden, ni = (size_t)n * inter;
	// scratch: x bf16 | g f32 | u f32 | h bf16, each 256-byte aligned
	size_t o_g = (nx * 2 + 255) / 256 * 256, o_u = o_g + (ni * 4 + 255) / 256 * 256,
	       o_h = o_u + (ni * 4 + 255) / 256 * 256, need = o_h + ni * 2;
	int rc = blas_init(st, need, err);
	if (rc)
		return rc;
	uint8_t *s = (uint8_t *)g_blas.scratch;
	const uint8_t *e = (const uint8_t *)ext;
	f32_to_bf16_kernel<<<grid_for(nx), 256, 0, st>>>(x, (__nv_bfloat16 *)s, nx);
	CU_TRY(err, cudaGetLastError());
	if ((rc = gemm(e + E.gate_off, inter, hidden, s, n, (float *)(s + o_g), 1.0f, 0.0f, err)) ||
	    (rc = gemm(e + E.up_off, inter, hidden, s, n, (float *)(s + o_u), 1.0f, 0.0f, err)))
		return rc;
	swiglu_kernel<<<grid_for(ni), 256, 0, st>>>((float *)(s + o_g), (float *)(s + o_u), (__nv_bfloat16 *)(s + o_h),
						    ni);
	CU_TRY(err, cudaGetLastError());
	return gemm(e + E.down_off, hidden, inter, s + o_h, n, y, weight, 1.0f, err);
}

} // namespace

extern "C" int strata_gpu_linear_bf16(const uint16_t *d_w, uint32_t rows, uint32_t cols, const float *d_x,
				      uint32_t n, float *d_y, float alpha, float beta, strata_gpu_stream *stream,
				      struct strata_error *err)
{
	if (!rows || !cols || !n)
		return STRATA_OK;
	pthread_mutex_lock(&g_blas.mu);
	int rc = linear(d_w, rows, cols, d_x, n, d_y, alpha, beta, (cudaStream_t)stream, err);
	pthread_mutex_unlock(&g_blas.mu);
	return rc;
}

extern "C" int strata_gpu_expert_bf16(const void *d_extent, uint32_t hidden, uint32_t inter, const float *d_x,
				      uint32_t n, float weight, float *d_y, strata_gpu_stream *stream,
				      struct strata_error *err)
{
	if (!n)
		return STRATA_OK;
	pthread_mutex_lock(&g_blas.mu);
	int rc = expert(d_extent, hidden, inter, d_x, n, weight, d_y, (cudaStream_t)stream, err);
	pthread_mutex_unlock(&g_blas.mu);
	return rc;
}

extern "C" int strata_gpu_gemm_bf16(const uint16_t *d_a, uint32_t rows, uint32_t cols, const uint16_t *d_b,
				    uint32_t n, float *d_c, strata_gpu_stream *stream, struct strata_error *err)
{
	pthread_mutex_lock(&g_blas.mu);
	int rc = blas_init((cudaStream_t)stream, 0, err);
	if (!rc)
		rc = gemm(d_a, rows, cols, d_b, n, d_c, 1.0f, 0.0f, err);
	pthread_mutex_unlock(&g_blas.mu);
	return rc;
}

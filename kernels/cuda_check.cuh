// Checked CUDA runtime calls for the .cu files: CU_TRY(err, call) returns
// STRATA_EGPU from the enclosing function with the failing call named in err.
#ifndef STRATA_CUDA_CHECK_CUH
#define STRATA_CUDA_CHECK_CUH

#include <cuda_runtime.h>

extern "C" {
#include "strata/error.h"
}

#define CU_TRY(err, call)                                                                          \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		if (e_ != cudaSuccess)                                                             \
			return strata_error_set((err), STRATA_EGPU, 0, __FILE__, __LINE__, "%s: %s", \
						#call, cudaGetErrorString(e_));                    \
	} while (0)

#endif

// Device decoders of the three tier formats (hot, warm, cold): filled in once
// kernels/FORMATS.md fixes their layout.  Until then the GPU layer reports the
// tier formats unsupported (strata_gpu_moe_check).
#pragma once
#define STRATA_GPU_HAVE_TIERS 0
#define STRATA_TIER_CASES(CALL)

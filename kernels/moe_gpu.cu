// Fused dequant MoE kernels: placeholder until the CUDA kernels issue lands.
extern "C" {
#include "moe.h"
}

extern "C" int strata_moe_layer_gpu(const struct strata_moe_call *c, struct strata_error *err)
{
	(void)c;
	return STRATA_ERR(err, STRATA_EUNSUPPORTED, "fused MoE kernels not built yet");
}

/* No prefetch: experts move only when a layer needs them (the baseline). */
#include "strata/policy.h"

static uint32_t none_on_layer(struct strata_policy *p, const struct strata_layer_ctx *ctx,
			      struct strata_prefetch_req *out, uint32_t max)
{
	return 0;
}

const struct strata_prefetch_ops strata_prefetch_none = {
	.name = "none", .version = STRATA_POLICY_ABI, .flags = STRATA_POLICY_F_NO_HINTS,
	.help = "no prefetch: experts move only on demand",
	.on_layer = none_on_layer,
};

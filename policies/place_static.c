/*
 * Static popularity tiering, the default placement: every expert starts in
 * the tier the shard header's tier table gives it (hot in VRAM, warm in RAM,
 * cold on NVMe, preloaded while budgets allow), and option `promote` says
 * which tiers keep an expert that had to be fetched from a lower tier.
 *
 * Default promote=none: that is the released runtime's behaviour (the tier
 * table is the placement, misses stream through a scratch slot), so the
 * default configuration reproduces it and every caching variant
 * (promote=vram|ram|all, or place=cache) is an explicit ablation against it.
 */
#include <string.h>

#include "strata/policy.h"
#include "strata/types.h"

struct place_static {
	char promote[STRATA_OPT_STR_MAX];
	uint32_t mask;
};

static const struct strata_option static_options[] = {
	{ .name = "promote", .type = STRATA_OPT_STR, .offset = offsetof(struct place_static, promote),
	  .def = "none", .choices = "none|ram|vram|all",
	  .help = "tiers that keep an expert fetched from below (none: stream misses)" },
	{ .name = NULL },
};

static int static_init(struct strata_policy *p, struct strata_error *err)
{
	struct place_static *s = p->priv;
	const char *v = s->promote;
	s->mask = !strcmp(v, "ram") ? 1u << STRATA_TIER_RAM
		: !strcmp(v, "vram") ? 1u << STRATA_TIER_VRAM
		: !strcmp(v, "all") ? (1u << STRATA_TIER_VRAM) | (1u << STRATA_TIER_RAM) : 0;
	return STRATA_OK;
}

static int static_initial_tier(struct strata_policy *p, uint32_t eid)
{
	const struct strata_policy_env *env = p->env;
	if (env->tier_table && eid < env->n_ids && env->tier_table[eid] < STRATA_TIER_COUNT)
		return env->tier_table[eid];
	return STRATA_TIER_NVME;
}

static uint32_t static_admit(struct strata_policy *p, uint32_t eid, int from_tier, uint64_t now)
{
	const struct place_static *s = p->priv;
	return s->mask;
}

const struct strata_place_ops strata_place_static = {
	.name = "static", .version = STRATA_POLICY_ABI,
	.help = "tier table from the shard header; misses stream unless promote= says otherwise",
	.priv_size = sizeof(struct place_static), .options = static_options,
	.init = static_init, .initial_tier = static_initial_tier, .admit = static_admit,
};

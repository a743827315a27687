/*
 * Pure caching placement: nothing is preloaded, every fetched expert is kept
 * (in the tiers option `keep` names) and eviction alone decides what leaves.
 * The setting in which eviction policies (LRU, LFU, Belady) are compared.
 */
#include <string.h>

#include "strata/policy.h"
#include "strata/types.h"

struct place_cache {
	char keep[STRATA_OPT_STR_MAX];
	uint32_t mask;
};

static const struct strata_option cache_options[] = {
	{ .name = "keep", .type = STRATA_OPT_STR, .offset = offsetof(struct place_cache, keep),
	  .def = "all", .choices = "all|vram|ram", .help = "tiers that keep a fetched expert" },
	{ .name = NULL },
};

static int cache_init(struct strata_policy *p, struct strata_error *err)
{
	struct place_cache *c = p->priv;
	c->mask = !strcmp(c->keep, "vram") ? 1u << STRATA_TIER_VRAM
		: !strcmp(c->keep, "ram") ? 1u << STRATA_TIER_RAM
		: (1u << STRATA_TIER_VRAM) | (1u << STRATA_TIER_RAM);
	return STRATA_OK;
}

static int cache_initial_tier(struct strata_policy *p, uint32_t eid)
{
	return STRATA_TIER_NVME;
}

static uint32_t cache_admit(struct strata_policy *p, uint32_t eid, int from_tier, uint64_t now)
{
	const struct place_cache *c = p->priv;
	return c->mask;
}

const struct strata_place_ops strata_place_cache = {
	.name = "cache", .version = STRATA_POLICY_ABI,
	.help = "empty start, keep every fetched expert: eviction alone decides",
	.priv_size = sizeof(struct place_cache), .options = cache_options,
	.init = cache_init, .initial_tier = cache_initial_tier, .admit = cache_admit,
};

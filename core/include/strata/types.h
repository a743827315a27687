/*
 * The vocabulary every module shares, with no dependency of its own: the
 * memory tiers an expert can live in and the three matrices of an expert.
 * Policies, the store, the engine, tier assignment, quantize and imatrix all
 * speak it; none of them has to include another's header for it.
 */
#ifndef STRATA_TYPES_H
#define STRATA_TYPES_H

/* A tier of the hierarchy; also an expert's tier format (hot/warm/cold) in a
 * shard's tier table. */
enum strata_tier {
	STRATA_TIER_VRAM = 0, /* hot: GPU memory */
	STRATA_TIER_RAM = 1,  /* warm: pinned host memory */
	STRATA_TIER_NVME = 2, /* cold: shard files */
	STRATA_TIER_COUNT = 3,
};

/* "vram", "ram", "nvme"; "?" for anything else. */
static inline const char *strata_tier_name(int tier)
{
	static const char *const names[STRATA_TIER_COUNT] = { "vram", "ram", "nvme" };
	return tier >= 0 && tier < STRATA_TIER_COUNT ? names[tier] : "?";
}

/* The matrices of a routed expert (SwiGLU), in extent order. */
enum strata_matrix {
	STRATA_MAT_GATE = 0,
	STRATA_MAT_UP = 1,
	STRATA_MAT_DOWN = 2,
	STRATA_MAT_COUNT = 3,
};

/* "gate", "up", "down"; "?" for anything else. */
static inline const char *strata_matrix_name(int m)
{
	static const char *const names[STRATA_MAT_COUNT] = { "gate", "up", "down" };
	return m >= 0 && m < STRATA_MAT_COUNT ? names[m] : "?";
}

#endif

/*
 * Memory tiers: byte budgets over arenas, and the extent allocator inside them.
 *
 * A cached tier (VRAM or pinned RAM) is one arena of exactly `budget` bytes,
 * allocated once at open, in which experts take whole extents.  Nothing is
 * ever placed past the budget: the allocator works on offsets inside
 * [0, budget), so the byte count resident in a tier can never exceed it.
 *
 * Backings:
 *   DEVICE   one strata_gpu_malloc'd block (a real GPU)
 *   HOST     an aligned host block standing in for VRAM (CI, no GPU)
 *   PINNED   host memory on a NUMA node (libnuma), page-locked when a GPU is
 *            in use (cudaHostRegister), or mlock'ed on request; without a
 *            GPU the engine leaves it unlocked (nothing DMAs from it, and a
 *            shared CI machine should not lose that much locked memory)
 *   VIRTUAL  no memory at all: only offsets are handed out (strata sim), so
 *            allocation decisions are identical to a real run's
 *
 * The extent allocator inside each arena is in strata/arena.h.
 */
#ifndef STRATA_TIER_MEM_H
#define STRATA_TIER_MEM_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/arena.h"
#include "strata/error.h"

enum strata_tier_backing {
	STRATA_BACK_VIRTUAL = 0,
	STRATA_BACK_HOST = 1,
	STRATA_BACK_DEVICE = 2,
	STRATA_BACK_PINNED = 3,
};

struct strata_tier_config {
	int kind;            /* enum strata_tier: STRATA_TIER_VRAM or STRATA_TIER_RAM */
	int backing;         /* enum strata_tier_backing */
	uint64_t budget;     /* bytes; rounded down to STRATA_TIER_ALIGN */
	int numa_node;       /* PINNED: -1 = the GPU's node (or no binding), else forced */
	int gpu_device;      /* the GPU whose node is looked up; -1 none */
	bool register_gpu;   /* PINNED: cudaHostRegister the arena (a GPU is in use) */
	bool lock;           /* PINNED without register_gpu: mlock the arena (best effort) */
};

struct strata_tier_mem {
	int kind, backing;
	uint64_t budget;
	uint8_t *base;            /* NULL for VIRTUAL or budget 0 */
	struct strata_arena arena;
	int numa_node;            /* node the arena was bound to, -1 none */
	const char *numa_how;     /* "forced", "hwloc", "sysfs", "none" */
	bool locked, registered;
	char desc[192];           /* one line for logs: "ram: 8.00 GiB pinned, NUMA node 0 (hwloc), mlock" */
};

int strata_tier_init(struct strata_tier_mem *t, const struct strata_tier_config *c, struct strata_error *err);
void strata_tier_free(struct strata_tier_mem *t);
static inline int strata_tier_reserve(struct strata_tier_mem *t, uint64_t bytes, uint64_t *off)
{
	return strata_arena_reserve(&t->arena, bytes, off);
}
static inline void strata_tier_release(struct strata_tier_mem *t, uint64_t off, uint64_t bytes)
{
	strata_arena_release(&t->arena, off, bytes);
}
static inline int strata_tier_reserve_h(struct strata_tier_mem *t, uint64_t bytes, uint64_t *off, uint32_t *h)
{
	/* the engine's retry loop mostly fails here: answer without a call */
	if (((bytes ? bytes : 1) + STRATA_TIER_ALIGN - 1) / STRATA_TIER_ALIGN * STRATA_TIER_ALIGN > t->arena.largest)
		return STRATA_EBUDGET;
	return strata_arena_reserve_h(&t->arena, bytes, off, h);
}
static inline void strata_tier_release_h(struct strata_tier_mem *t, uint32_t h)
{
	strata_arena_release_h(&t->arena, h);
}
/* Address of an offset (NULL for a VIRTUAL tier). */
static inline void *strata_tier_ptr(const struct strata_tier_mem *t, uint64_t off)
{
	return t->base ? t->base + off : 0;
}
static inline uint64_t strata_tier_used(const struct strata_tier_mem *t) { return t->arena.used; }

/* NUMA node of a GPU: hwloc (PCI bus id -> closest node), then sysfs; -1 if
 * unknown or single-node.  *how names the method. */
int strata_numa_node_of_gpu(int device, const char **how);

#endif

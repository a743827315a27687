/*
 * Offline placement from the run's future ("future"): the counterpart of the
 * time bound (c) of strata/bound.h, which credits the best start of a decode
 * segment.  Like `evict=farthest` and `prefetch=oracle` it reads the trace's
 * future (env->future), so it runs in trace replay and simulation only; it
 * is a reference to measure other placements against, not a policy a live
 * server could run.
 *
 *   - preload: the experts the run uses, in order of first use, go to VRAM
 *     while they fit (what Belady's MIN would start with: the experts needed
 *     first), then to RAM while they fit; the rest start on NVMe.  Experts
 *     the run never uses are not preloaded.  Each tier is filled in first-use
 *     order and an expert that does not fit is skipped, so a later, smaller
 *     one may still take the room.
 *   - admission: an expert fetched from a lower tier is kept in VRAM when the
 *     run uses it again, else streamed through a scratch slot (it would only
 *     take room).  A demand read from NVMe is not added to RAM (RAM would
 *     give up a farther expert for it, perhaps one staged there); a
 *     prefetched read is kept where it was asked for (oracle's `stage` reads
 *     into RAM ahead of VRAM).
 *   - later decode segments (a trace with prompts): the placement acts
 *     through admission only (the engine preloads once), so at the end of a
 *     prefill VRAM and RAM hold what the eviction policy left; with
 *     `evict=farthest` that is the experts of nearest next use.
 *
 * Use it with `evict=farthest:backed=1` (VRAM evicts experts that have a copy
 * in RAM, or are not used again, before experts a disk read would have to
 * bring back) and `prefetch=oracle:depth=D` (the RAM -> VRAM copies and disk
 * reads issued D layers ahead, so they overlap the computation).
 */
#include <stdbool.h>
#include <stdlib.h>

#include "strata/policy.h"
#include "strata/types.h"

struct place_future {
	int64_t slack;      /* option: experts' worth of room left free per tier */
	uint8_t *tier;      /* per eid: the preload's tier */
	uint32_t *buf;
};

static const struct strata_option future_options[] = {
	{ .name = "slack", .type = STRATA_OPT_INT, .offset = offsetof(struct place_future, slack), .def = "0",
	  .min = 0, .max = 1 << 20, .help = "leave this many largest experts' room free in VRAM and in RAM at preload" },
	{ .name = NULL },
};

static int cmp_first(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;
	return x[0] < y[0] ? -1 : x[0] > y[0];
}

static int future_init(struct strata_policy *p, struct strata_error *err)
{
	struct place_future *pf = p->priv;
	const struct strata_policy_env *env = p->env;
	const struct strata_future *f = env->future;
	const struct strata_model_spec *s = env->spec;
	uint32_t n = env->n_ids, E = s->n_experts;
	pf->tier = malloc(n + 1);
	pf->buf = malloc(sizeof(uint32_t) * (E + 1));
	uint64_t *first = malloc(sizeof(uint64_t) * 2 * (n + 1)); /* (first use, eid) pairs */
	if (!pf->tier || !pf->buf || !first) {
		free(first);
		return STRATA_ERR(err, STRATA_ENOMEM, "place future: out of memory");
	}
	for (uint32_t i = 0; i < n; i++) {
		pf->tier[i] = STRATA_TIER_NVME;
		first[2 * i] = STRATA_NEVER;
		first[2 * i + 1] = i;
	}
	/* the clock counts accesses in the order routed() gives them */
	uint64_t clock = 0;
	for (uint64_t t = 0; t < f->n_tokens; t++)
		for (uint32_t l = 0; l < s->n_moe_layers; l++) {
			uint32_t k = f->routed(f, t, l, pf->buf, E);
			for (uint32_t i = 0; i < k && i < E; i++, clock++) {
				uint32_t eid = strata_eid(s, l, pf->buf[i]);
				if (eid < n && first[2 * eid] == STRATA_NEVER)
					first[2 * eid] = clock;
			}
		}
	qsort(first, n, 2 * sizeof(uint64_t), cmp_first);
	uint64_t room[2] = { env->budget[STRATA_TIER_VRAM], env->budget[STRATA_TIER_RAM] }, big = 0;
	for (uint32_t i = 0; i < n; i++)
		big = env->expert_bytes[i] > big ? env->expert_bytes[i] : big;
	for (int t = 0; t < 2; t++)
		room[t] = room[t] > (uint64_t)pf->slack * big ? room[t] - (uint64_t)pf->slack * big : 0;
	for (int t = STRATA_TIER_VRAM; t <= STRATA_TIER_RAM; t++)
		for (uint32_t i = 0; i < n && first[2 * i] != STRATA_NEVER; i++) {
			uint32_t eid = (uint32_t)first[2 * i + 1];
			uint64_t b = env->expert_bytes[eid];
			if (pf->tier[eid] == STRATA_TIER_NVME && b <= room[t]) {
				pf->tier[eid] = (uint8_t)t;
				room[t] -= b;
			}
		}
	free(first);
	return STRATA_OK;
}

static void future_free(struct strata_policy *p)
{
	struct place_future *pf = p->priv;
	free(pf->tier);
	free(pf->buf);
}

static int future_initial_tier(struct strata_policy *p, uint32_t eid)
{
	const struct place_future *pf = p->priv;
	return eid < p->env->n_ids ? pf->tier[eid] : STRATA_TIER_NVME;
}

/* Whether eid's access is the one at clock now (a demand asks at its
 * access; a prefetch asks before its target). */
static bool accessed_at(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	const struct strata_future *f = p->env->future;
	struct place_future *pf = p->priv;
	if (now)
		return f->next_use(f, eid, now - 1) == now;
	uint32_t k = f->routed(f, 0, 0, pf->buf, p->env->spec->n_experts);
	return k && strata_eid(p->env->spec, 0, pf->buf[0]) == eid;
}

static uint32_t future_admit(struct strata_policy *p, uint32_t eid, int from_tier, uint64_t now)
{
	const struct strata_future *f = p->env->future;
	if (f->next_use(f, eid, now) == STRATA_NEVER)
		return 0;
	/* a demand read from NVMe goes to VRAM only (RAM would give up a
	 * farther expert for it, maybe a staged one); a prefetch read from NVMe
	 * may stay in RAM, where a staged one is asked for */
	if (from_tier == STRATA_TIER_NVME && !accessed_at(p, eid, now))
		return 1u << STRATA_TIER_VRAM | 1u << STRATA_TIER_RAM;
	return 1u << STRATA_TIER_VRAM;
}

const struct strata_place_ops strata_place_future = {
	.name = "future", .version = STRATA_POLICY_ABI, .flags = STRATA_POLICY_F_NEEDS_FUTURE,
	.help = "offline (reads the trace's future): preload VRAM, then RAM, with the experts in order of first "
		"use; keep a fetched expert in VRAM only if used again",
	.priv_size = sizeof(struct place_future), .options = future_options,
	.init = future_init, .free = future_free, .initial_tier = future_initial_tier, .admit = future_admit,
};

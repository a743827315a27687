/*
 * The policy harness: a minimal single-tier cache driver that replays a
 * sequence of (token, layer, experts) steps through placement, eviction and
 * prefetch policies with a byte budget, and counts hits, misses, evictions
 * and prefetches.  No bytes move and no engine runs: it is what the
 * conformance suite (tests/test_conformance.c), the C-vs-Lua agreement test
 * and the policy benchmark (tests/bench/bench_policies.c) use to judge a
 * policy alone, C, plugin or Lua alike, with exact, repeatable counters.
 *
 * Typical use (one call):
 *
 *   struct strata_harness_trace *t;
 *   strata_harness_trace_gen(&spec, 64, 1, &t, &err);       // seeded trace
 *   struct strata_harness_config c;
 *   strata_harness_config_defaults(&c);
 *   c.budget = 12 * c.expert_bytes;                          // 12 experts fit
 *   c.evict = "policies/lua/lru.lua";                        // or "lru"
 *   struct strata_harness_counters k;
 *   strata_harness_run(t, &c, &k, &err);
 *   strata_harness_trace_free(t);
 *
 * The tier: one cache, conceptually VRAM.  Experts are fetched from NVMe.
 *
 * The clock: `now` is the index of the expert access in the flattened
 * trace (step by step, each step's experts in order), 0, 1, 2, ...; the
 * trace's future (strata_harness_trace_future) answers next_use in the same
 * clock, so Belady and the oracle work unchanged.
 *
 * One step (token t, layer L, experts e_1..e_n, hints):
 *   1. the step's experts are pinned (a running layer's experts must stay),
 *      then evict on_step and place on_step (struct strata_step: n_tokens 1,
 *      now = clock before the step's first access);
 *   2. prefetch on_layer(ctx: token t, layer L, now = clock before the
 *      step's first access, the step's hints, experts = e_1..e_n) returns
 *      requests; for each,
 *      in order: an eid out of range is an error naming the policy; a
 *      resident expert counts prefetch_redundant; one that cannot get room
 *      (larger than the budget, or every resident expert pinned) counts
 *      prefetch_dropped; otherwise room is made (below), evict on_insert(eid,
 *      now), prefetch_issued++, bytes_fetched += size.  The request's tier is
 *      ignored: the harness has one tier.  Placement is not asked: a
 *      prefetcher's request is its own admission.
 *   3. each expert e_i in order, now = clock++, accesses++:
 *      resident: hits++ (prefetch_used++ the first time a prefetched expert
 *        is used), evict on_access(eid, now), place on_access(eid, VRAM, now);
 *      not resident: misses++, bytes_fetched += size, mask = place
 *        admit(eid, NVMe, now), place on_access(eid, NVMe, now); without the
 *        VRAM bit in mask the expert streams through (bypasses++); with it,
 *        room is made and evict on_insert(eid, now), on_access(eid, now),
 *        inserts++.  No room for a demand fetch is STRATA_EBUDGET.
 *   4. prefetch on_route(t, L, experts, n); pins are released.
 * Making room: while used + size > budget, v = evict victim(now, residency);
 * STRATA_NO_EXPERT means no room; a v out of range, not resident or pinned is
 * STRATA_EPOLICY naming the policy; else on_remove(v), evictions++, and if v
 * was prefetched and never used, prefetch_wasted++.
 * A policy that records a failure inside an op (strata_policy_error: a Lua
 * hook raised an error) fails the step with that error, checked after each
 * victim, after on_layer and at the end of the step.
 * Preload at open: with a placement policy, every eid (in id order) whose
 * initial_tier is VRAM and that still fits is inserted (on_insert(eid, 0)),
 * preloaded++.  "cache" preloads nothing; "static" preloads the tier table's
 * hot experts.
 */
#ifndef STRATA_POLICY_HARNESS_H
#define STRATA_POLICY_HARNESS_H

#include <stdint.h>

#include "strata/error.h"
#include "strata/model.h"
#include "strata/policy.h"

/* One MoE layer of one token. */
struct strata_harness_step {
	uint64_t token;
	uint32_t layer;                  /* moe layer */
	uint32_t n;                      /* experts routed */
	const uint32_t *experts;         /* layer-local expert numbers */
	const struct strata_hint *hints; /* predictions for later layers; may be NULL */
	uint32_t n_hints;
};

/* A trace the harness replays; owns its arrays and its future. */
struct strata_harness_trace {
	struct strata_model_spec spec;
	uint32_t n_steps;
	struct strata_harness_step *steps;
	uint64_t n_tokens;   /* 1 + largest token */
	uint64_t n_accesses; /* sum of steps[i].n */
	struct strata_future future; /* next_use / routed over this trace */
	void *priv;          /* storage and indexes */
};

/*
 * A seeded synthetic trace: n_tokens tokens x every MoE layer of spec, top_k
 * distinct experts per step drawn with the skew, reuse and cross-layer
 * correlation real routers show (a Zipf-like popularity per layer, 40%
 * reuse of the previous token's choice at that layer, 25% following a fixed
 * per-layer map of this token's previous layer), and hints for the next two
 * layers that are right 75% of the time.  Integer arithmetic only, so the
 * same (spec, n_tokens, seed) gives the same trace on every machine.
 */
int strata_harness_trace_gen(const struct strata_model_spec *spec, uint64_t n_tokens, uint64_t seed,
			     struct strata_harness_trace **out, struct strata_error *err);
/* A trace from caller steps (deep-copied).  Steps may repeat or skip layers;
 * routed() answers the first step of each (token, layer).  Experts must be
 * < spec->n_experts and layers < spec->n_moe_layers (STRATA_EINVAL). */
int strata_harness_trace_build(const struct strata_model_spec *spec,
			       const struct strata_harness_step *steps, uint32_t n_steps,
			       struct strata_harness_trace **out, struct strata_error *err);
void strata_harness_trace_free(struct strata_harness_trace *t);
/* The trace's future, for a policy environment; lives as long as t. */
static inline const struct strata_future *strata_harness_trace_future(const struct strata_harness_trace *t)
{
	return &t->future;
}

struct strata_harness_config {
	uint64_t budget;            /* bytes in the cache */
	uint64_t expert_bytes;      /* every expert's size (default 1 MiB) ... */
	const uint64_t *bytes_per_id; /* ... or per eid (n_moe_layers * n_experts), if set */
	const uint8_t *tier_table;  /* per eid enum strata_tier, for place=static; NULL: all NVMe */
	const char *place;          /* placement spec; NULL: no placement (admit all, preload none) */
	const char *evict;          /* eviction spec (default "lru") */
	const char *prefetch;       /* prefetch spec; NULL: "none" */
	/* Instead of a spec: an ops struct of the caller's (strata_policy_create_ops,
	 * default options).  Lets a test drive a deliberately broken policy. */
	const void *evict_ops, *place_ops, *prefetch_ops;
	uint64_t seed;              /* the run's seed (env->seed) */
	int hide_future;            /* 1: env->future = NULL, as in a live run */
};
void strata_harness_config_defaults(struct strata_harness_config *c);

struct strata_harness_counters {
	uint64_t accesses, hits, misses, bypasses, inserts, evictions, preloaded;
	uint64_t prefetch_issued, prefetch_used, prefetch_wasted, prefetch_redundant, prefetch_dropped;
	uint64_t prefetch_promoted, prefetch_cancelled, prefetch_preempted; /* scheduling (policy.h) */
	uint64_t prefetch_unused_dropped; /* prefetched experts that left at their layer (not evictions) */
	uint64_t bytes_fetched;     /* demand misses plus issued prefetches */
};

struct strata_harness;

/* Build the environment for t and c, create the policies from c's specs
 * (evict in tier STRATA_TIER_VRAM) and preload.  Errors name the policy. */
int strata_harness_open(const struct strata_harness_trace *t, const struct strata_harness_config *c,
			struct strata_harness **out, struct strata_error *err);
/* Replay one step (the trace's own, or any other with the same spec). */
int strata_harness_step(struct strata_harness *h, const struct strata_harness_step *s,
			struct strata_error *err);
/* Replay every step of t (the trace given to open). */
int strata_harness_replay(struct strata_harness *h, struct strata_error *err);
const struct strata_harness_counters *strata_harness_counters(const struct strata_harness *h);
/* The instances, for callers that want their canonical names. */
struct strata_policy *strata_harness_policy(const struct strata_harness *h, int role);
/* Residency of eid now (tests). */
int strata_harness_resident(const struct strata_harness *h, uint32_t eid);
void strata_harness_close(struct strata_harness *h);

/* open + replay + counters + close. */
int strata_harness_run(const struct strata_harness_trace *t, const struct strata_harness_config *c,
		       struct strata_harness_counters *out, struct strata_error *err);

#endif

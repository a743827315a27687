/*
 * Offline bounds: what no policy the engine can run does better than, on a
 * given access stream, tier budgets and cost model.  `strata sim` and
 * `strata replay` report them beside every result (the bound_* columns), the
 * studies plot them and fail when a row beats one.
 *
 * The model.  A run is a sequence of layer-steps u = 0, 1, ... (one MoE layer
 * of one step: the engine's begin_step/acquire/release); each needs a set of
 * experts (eids) in VRAM while it computes.  A boundary is the moment after
 * layer-step u is released and before u+1 begins.  At a boundary a tier holds
 * at most its budget of bytes: the VRAM tier's resident experts (a streamed
 * expert's scratch slot is freed at release, so no scratch is held there),
 * the RAM tier's.  An access of expert x in layer-step j whose previous
 * access was in layer-step i < j is served without moving x into VRAM only
 * if x stayed in VRAM from i to j, i.e. at the j - i boundaries i .. j-1.
 * Every other access needs x loaded into VRAM at some time after i: a
 * demand fetch, a prefetch, a scratch stream or a preload, from RAM or NVMe.
 *
 * Why each bound holds for EVERY policy the engine runs:
 *   (a) misses, equal sizes: Belady's MIN with s slots is the fewest loads of
 *       any policy that keeps at most s objects, prefetching ones included (a
 *       prefetching schedule turns into a demand one with no more loads:
 *       delay each load to the access it serves; classic, Belady 1966,
 *       Mattson et al. 1970).  The engine may also stream an expert without
 *       keeping it (scratch): that is MIN with one more slot (the bypassed
 *       expert sits in the extra slot until the next bypass), so s =
 *       floor(budget / smallest expert) + 1.  Pinning a layer's experts only
 *       forbids some schedules, so it cannot beat MIN; it is why the old
 *       per-tier farthest-next-use eviction (now `farthest`) is not optimal.
 *       Over a stream of equal-size experts this is the optimum itself.
 *   (b) bytes, mixed sizes: the interval relaxation of Berger, Beckmann and
 *       Harchol-Balter (PFOO-L, SIGMETRICS 2018).  Each repeated access is
 *       an interval of length j - i boundaries costing size x (j - i)
 *       byte-boundaries if kept; the tier's budget bounds the sum over the U
 *       boundaries of the run, C x U, so the byte hits of any schedule are at
 *       most the fractional knapsack that takes intervals shortest first
 *       (value size per cost size x length).  bytes loaded >= bytes accessed
 *       - that.  Pinning, prefetching (a prefetched expert was loaded: its
 *       bytes count) and inclusive or exclusive tiers change nothing here.
 *       The larger of (b) and (a) x smallest size is reported.
 *   Two caches matter.  Every access needs the expert in VRAM: loads into
 *   VRAM (the PCIe link: RAM -> VRAM copies and staged NVMe -> VRAM reads)
 *   are bounded over the whole access stream with the VRAM budget.  An
 *   expert in neither VRAM nor RAM must be read from NVMe, and VRAM and RAM
 *   together hold at most both budgets whether the hierarchy is inclusive
 *   or exclusive: NVMe reads are bounded over the same stream with the sum.
 *   (c) time: in a decode segment (a run of decode steps between prefill
 *       steps) the links and the expert computation overlap at best, so its
 *       time is at least the largest of: the computation (the cost model's
 *       kernel time, which no policy changes), the PCIe bytes / PCIe
 *       bandwidth and the NVMe bytes / NVMe bandwidth, the bytes being (a),
 *       (b) over the segment with a free warm start (anything within the
 *       budgets may be resident when it begins: prefill time is not decode
 *       time; so at least the bytes of the segment's distinct experts less
 *       the budget are loaded, strata_bound_tier), less one largest
 *       expert per link for a transfer under way at the segment's start (the
 *       virtual link serializes transfers, so at most one straddles it; the
 *       first segment of a run starts after the preload has drained).
 *       Latencies are left out (a bound may only be too low).  Decode
 *       tok/s <= decode tokens / the sum over segments.  On the real engine
 *       the bound is as good as the calibrated bandwidths.
 *   (e) time from the run's own start: as (c), but each decode segment
 *       starts from the residency the run had as it began (VRAM's experts
 *       for the PCIe bytes, VRAM's and RAM's for the NVMe bytes; an expert
 *       on its way in counts as there, which only lowers the bound) instead
 *       of any start.  Belady's MIN is optimal from any initial cache, so
 *       MIN started with that set is the fewest loads of every schedule
 *       that starts there; PFOO-L gives the interval from the boundary
 *       before the segment only to experts in the set (the others' first
 *       access is a load), a relaxation of every schedule from that start.
 *       Any start is at least as good as this one, so (e) >= (c) in time
 *       (bound_start_tok_s <= bound_tok_s).  It bounds this run, not every
 *       run on the trace: a policy that begins a segment with a better
 *       residency gets a looser (e); (c) stays the policy-free bound.
 *   (d) the RAM tier over what reaches it: the stream of loads into VRAM
 *       (each needs its expert in RAM, else an NVMe read) with the RAM
 *       budget, MIN and PFOO-L as above; a staged read that bypasses RAM is
 *       the extra slot.  This depends on the VRAM policy's loads, so it is
 *       computed per run; the RAM eviction policy cannot beat it.
 * Counters compared with them: moves into VRAM and reads from NVMe (the
 * preload included, as the bounds start from an empty cache), and their
 * bytes; the time bound against decode tok/s.
 */
#ifndef STRATA_BOUND_H
#define STRATA_BOUND_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/error.h"

/* One cache's request stream: eid[i] requested in layer-step pos[i]
 * (non-decreasing). */
struct strata_bound_stream {
	const uint32_t *eid;
	const uint64_t *pos;
	uint64_t n;
	uint32_t n_ids;            /* eids are < n_ids */
	const uint64_t *bytes;     /* per eid */
	/* per eid, nonzero: resident at the boundary before the first
	 * layer-step (a given start, at most the budget's bytes); NULL: none.
	 * warm (any start) overrides it. */
	const uint8_t *init;
};

/* Belady MIN: the fewest loads with `slots` slots, starting empty, or with
 * s->init (warm: starting with any slots experts of the caller's choice,
 * MIN - slots). */
int strata_bound_min_loads(const struct strata_bound_stream *s, uint64_t slots, bool warm, uint64_t *loads,
			   struct strata_error *err);
/* PFOO-L: a lower bound on the bytes loaded with cap bytes, over the stream's
 * layer-steps from s->pos[0] (warm: the first access of each expert may be
 * kept from the boundary before the stream's first layer-step; s->init: the
 * first access of those experts only). */
int strata_bound_bytes(const struct strata_bound_stream *s, uint64_t cap, bool warm, uint64_t *bytes,
		       struct strata_error *err);
/* max(PFOO-L, MIN x smallest expert) with slots = floor(cap / smallest) + 1:
 * both bounds, the better one; warm, also the bytes of the distinct experts
 * the stream uses less cap (any start holds at most cap bytes, every other
 * expert is loaded at least once; PFOO-L's budget is an average over the
 * boundaries and misses that).  loads gets MIN's count. */
int strata_bound_tier(const struct strata_bound_stream *s, uint64_t cap, bool warm, uint64_t *loads,
		      uint64_t *bytes, struct strata_error *err);

#endif

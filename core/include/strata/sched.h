/*
 * Prefetch scheduling, the decisions part (policy.h, "How the engine
 * schedules"): the pending FIFO, the per-link budgets of started prefetches,
 * promotion, cancellation and the end of a started prefetch at its target.
 * The engine and the policy harness both run it, so their counters agree;
 * each supplies how to find an expert's source and how to start a move.
 */
#ifndef STRATA_SCHED_H
#define STRATA_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/error.h"
#include "strata/policy.h"

struct strata_pf {
	uint32_t eid;
	uint32_t layer;        /* target: the next run of this moe layer after `since` */
	uint64_t since;        /* the layer-step (run of a layer) that asked for it */
	uint8_t tier;          /* destination */
	uint8_t links;         /* started: bit per STRATA_LINK_* charged */
	uint64_t bytes;
};

struct strata_pfq {
	struct strata_pf *pend, *out; /* pending (FIFO) and started, unresolved */
	uint32_t n_pend, n_out, cap;
	uint64_t inflight[STRATA_LINK_COUNT];
	uint32_t at;                  /* the moe layer of the latest layer-step */
};

struct strata_pfq_owner {
	void *o;
	/* the tier eid would be read from for tier (STRATA_TIER_RAM or NVMe), or
	 * -1 when it is already resident at or above tier (redundant) */
	int (*source)(void *o, uint32_t eid, int tier);
	/* make room and start the move; STRATA_EBUDGET (err untouched): no room */
	int (*start)(void *o, uint32_t eid, int tier, int src, struct strata_error *err);
	uint64_t *redundant, *dropped, *promoted, *cancelled, *preempted; /* the owner's counters */
};

int strata_pfq_init(struct strata_pfq *q, uint32_t cap);
void strata_pfq_free(struct strata_pfq *q);
/* Layer-step `step` of `layer` begins and its prefetch policy asked for
 * reqs (before they are queued): records the position and, with
 * s->preempt, withdraws the pending requests the new ones supersede
 * (policy.h, 5).  n_experts: experts per moe layer (eid / n_experts is the
 * target layer). */
void strata_pfq_begin(struct strata_pfq *q, const struct strata_pfq_owner *w, const struct strata_prefetch_sched *s,
		      uint32_t layer, uint64_t step, const struct strata_prefetch_req *reqs, uint32_t nr,
		      uint32_t n_experts);
/* Queue a request (after on_layer).  Redundant (already pending or started
 * and unresolved) and overflowing ones are counted and dropped. */
void strata_pfq_add(struct strata_pfq *q, const struct strata_pfq_owner *w, uint32_t eid, int tier,
		    uint32_t layer, uint64_t step);
/* Start what fits, in order (see policy.h; nearest target first with
 * s->preempt). */
int strata_pfq_dispatch(struct strata_pfq *q, const struct strata_prefetch_sched *s, const uint64_t *bytes,
			const struct strata_pfq_owner *w, struct strata_error *err);
/* Layer-step `step` of `layer` runs with these eids: promote or cancel the
 * pending requests it is the target of (asked for before step). */
void strata_pfq_resolve_pending(struct strata_pfq *q, const struct strata_pfq_owner *w, uint32_t layer,
				uint64_t step, const uint32_t *eids, uint32_t n);
/* After it ran: take the started prefetches it was the target of out of
 * flight; writes them to done (at most max; the rest stay for the next call)
 * and returns the count. */
uint32_t strata_pfq_take_started(struct strata_pfq *q, uint32_t layer, uint64_t step, struct strata_pf *done,
				 uint32_t max);

#endif

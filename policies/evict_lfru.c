/*
 * LFRU, frequency-weighted LRU (the expert cache policy of vLLM PR #37190,
 * `--moe-expert-cache-size`): LRU in which every earlier use of an expert
 * while it is resident lengthens its stay.  Key = last access + weight x
 * (uses - 1) tokens; the smallest key leaves (ties: the least recent, then
 * the smaller eid).  weight=0 is LRU; a large weight approaches LFU with
 * recency ties.  Uses count from the expert's insertion (history=1 keeps
 * them across evictions).  A token is n_moe_layers * top_k clock ticks, as
 * in lfu-decay.  An indexed min-heap: O(log n) per access, O(1) victim.
 */
#include <math.h>

#include "eheap.h"
#include "strata/policy.h"

struct lfru {
	double weight;
	int history;
	double per_token;     /* clock ticks per token */
	struct eheap h;
	uint32_t *aside;
	uint64_t *uses;       /* per eid */
};

static const struct strata_option lfru_options[] = {
	{ .name = "weight", .type = STRATA_OPT_DOUBLE, .offset = offsetof(struct lfru, weight),
	  .def = "1", .min = 0, .max = 1e9, .help = "tokens of extra stay per earlier use (0: LRU)" },
	{ .name = "history", .type = STRATA_OPT_BOOL, .offset = offsetof(struct lfru, history),
	  .def = "0", .help = "keep use counts of evicted experts" },
	{ .name = NULL },
};

static int lfru_init(struct strata_policy *p, struct strata_error *err)
{
	struct lfru *l = p->priv;
	uint32_t n = p->env->n_ids;
	const struct strata_model_spec *s = p->env->spec;
	l->per_token = s && s->n_moe_layers && s->top_k ? (double)s->n_moe_layers * s->top_k : 1.0;
	l->uses = calloc(n ? n : 1, sizeof(uint64_t));
	l->aside = malloc(sizeof(uint32_t) * (n ? n : 1));
	if (eheap_init(&l->h, n) || !l->uses || !l->aside)
		return STRATA_ERR(err, STRATA_ENOMEM, "evict lfru: out of memory");
	return STRATA_OK;
}

static void lfru_free(struct strata_policy *p)
{
	struct lfru *l = p->priv;
	eheap_free(&l->h);
	free(l->aside);
	free(l->uses);
}

static uint64_t lfru_key(const struct lfru *l, uint32_t eid, uint64_t now)
{
	uint64_t u = l->uses[eid];
	double bonus = l->weight * l->per_token * (double)(u ? u - 1 : 0);
	return bonus >= 1.8e19 ? UINT64_MAX : now + (uint64_t)bonus;
}

static void lfru_on_insert(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct lfru *l = p->priv;
	if (eid >= l->h.n_ids)
		return;
	if (!l->history)
		l->uses[eid] = 0;
	eheap_put(&l->h, eid, lfru_key(l, eid, now), now);
}

static void lfru_on_access(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct lfru *l = p->priv;
	if (eid >= l->h.n_ids)
		return;
	l->uses[eid]++;
	if (eheap_has(&l->h, eid))
		eheap_put(&l->h, eid, lfru_key(l, eid, now), now);
}

static void lfru_on_remove(struct strata_policy *p, uint32_t eid)
{
	struct lfru *l = p->priv;
	eheap_remove(&l->h, eid);
}

static int skip_pinned(const void *ctx, uint32_t e)
{
	const struct strata_residency *r = ctx;
	return r && r->pinned && r->pinned[e];
}

static int64_t lfru_victim(struct strata_policy *p, uint64_t now, const struct strata_residency *r)
{
	struct lfru *l = p->priv;
	return eheap_min_where(&l->h, skip_pinned, r, l->aside, l->h.n_ids);
}

const struct strata_evict_ops strata_evict_lfru = {
	.name = "lfru", .version = STRATA_POLICY_ABI,
	.help = "frequency-weighted LRU (vLLM PR #37190): each earlier use adds weight tokens of stay",
	.priv_size = sizeof(struct lfru), .options = lfru_options,
	.init = lfru_init, .free = lfru_free, .on_insert = lfru_on_insert, .on_access = lfru_on_access,
	.on_remove = lfru_on_remove, .victim = lfru_victim,
};

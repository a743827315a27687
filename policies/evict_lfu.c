/*
 * LFU and LFU with exponential decay.  An indexed min-heap keyed by
 * (frequency score, last access) gives the victim in O(1) and each access in
 * O(log n).
 *
 * lfu: the score is the number of accesses while resident (history=1 keeps
 * counts across evictions, "perfect LFU" over what this tier saw).
 * lfu-decay: each access adds 1 and the score halves every `half_life`
 * tokens (one token = n_moe_layers * top_k accesses of the clock; the
 * default of 4 tokens beat LRU and every other half-life tried on the
 * synthetic Qwen3-shaped trace at a quarter of the experts cached).  Scores
 * are kept inflated, V = sum 2^(t_i/H), in log2 form, so an access updates
 * one key and comparisons never need a sweep over the resident set.
 */
#include <math.h>
#include <string.h>

#include "eheap.h"
#include "strata/policy.h"

struct lfu {
	int history;          /* option (lfu) */
	double half_life;     /* option (lfu-decay), tokens */
	struct eheap h;
	uint32_t *aside;
	uint64_t *count;      /* lfu: counts; */
	double *logv;         /* lfu-decay: log2 V per eid, -INFINITY for none */
	double h_clock;       /* half-life in clock units */
	int decay;
};

static const struct strata_option lfu_options[] = {
	{ .name = "history", .type = STRATA_OPT_BOOL, .offset = offsetof(struct lfu, history),
	  .def = "0", .help = "keep counts of evicted experts (perfect LFU)" },
	{ .name = NULL },
};

static const struct strata_option decay_options[] = {
	{ .name = "half_life", .type = STRATA_OPT_DOUBLE, .offset = offsetof(struct lfu, half_life),
	  .def = "4", .min = 0.001, .max = 1e12,
	  .help = "tokens after which an access counts half" },
	{ .name = "history", .type = STRATA_OPT_BOOL, .offset = offsetof(struct lfu, history),
	  .def = "0", .help = "keep scores of evicted experts" },
	{ .name = NULL },
};

static int common_init(struct strata_policy *p, int decay, struct strata_error *err)
{
	struct lfu *l = p->priv;
	uint32_t n = p->env->n_ids;
	l->decay = decay;
	if (eheap_init(&l->h, n))
		goto oom;
	l->aside = malloc(sizeof(uint32_t) * (n ? n : 1));
	if (!l->aside)
		goto oom;
	if (decay) {
		l->logv = malloc(sizeof(double) * (n ? n : 1));
		if (!l->logv)
			goto oom;
		for (uint32_t i = 0; i < n; i++)
			l->logv[i] = -INFINITY;
		const struct strata_model_spec *s = p->env->spec;
		double per_token = s ? (double)s->n_moe_layers * s->top_k : 1.0;
		l->h_clock = l->half_life * (per_token > 0 ? per_token : 1.0);
	} else {
		l->count = calloc(n ? n : 1, sizeof(uint64_t));
		if (!l->count)
			goto oom;
	}
	return STRATA_OK;
oom:
	return STRATA_ERR(err, STRATA_ENOMEM, "evict %s: out of memory", decay ? "lfu-decay" : "lfu");
}

static int lfu_init(struct strata_policy *p, struct strata_error *err)
{
	return common_init(p, 0, err);
}

static int decay_init(struct strata_policy *p, struct strata_error *err)
{
	return common_init(p, 1, err);
}

static void lfu_free(struct strata_policy *p)
{
	struct lfu *l = p->priv;
	eheap_free(&l->h);
	free(l->aside);
	free(l->count);
	free(l->logv);
}

/* Non-negative doubles order like their bit patterns; 0 means "no count". */
static uint64_t decay_key(double logv)
{
	if (logv == -INFINITY)
		return 0;
	double x = logv + 1100.0; /* log2 V >= log2(2^-1074) */
	if (x < 0)
		x = 0;
	uint64_t k;
	memcpy(&k, &x, sizeof(k));
	return k + 1;
}

static void lfu_on_insert(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct lfu *l = p->priv;
	if (eid >= l->h.n_ids)
		return;
	if (l->decay) {
		if (!l->history)
			l->logv[eid] = -INFINITY;
		eheap_put(&l->h, eid, decay_key(l->logv[eid]), now);
	} else {
		if (!l->history)
			l->count[eid] = 0;
		eheap_put(&l->h, eid, l->count[eid], now);
	}
}

static void lfu_on_access(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct lfu *l = p->priv;
	if (eid >= l->h.n_ids)
		return;
	if (l->decay) {
		double x = (double)now / l->h_clock, v = l->logv[eid];
		v = v == -INFINITY ? x : fmax(v, x) + log2(1.0 + exp2(-fabs(v - x)));
		l->logv[eid] = v;
		if (eheap_has(&l->h, eid))
			eheap_put(&l->h, eid, decay_key(v), now);
	} else {
		l->count[eid]++;
		if (eheap_has(&l->h, eid))
			eheap_put(&l->h, eid, l->count[eid], now);
	}
}

static void lfu_on_remove(struct strata_policy *p, uint32_t eid)
{
	struct lfu *l = p->priv;
	eheap_remove(&l->h, eid);
}

static int skip_pinned(const void *ctx, uint32_t e)
{
	const struct strata_residency *r = ctx;
	return r && r->pinned && r->pinned[e];
}

static int64_t lfu_victim(struct strata_policy *p, uint64_t now, const struct strata_residency *r)
{
	struct lfu *l = p->priv;
	return eheap_min_where(&l->h, skip_pinned, r, l->aside, l->h.n_ids);
}

const struct strata_evict_ops strata_evict_lfu = {
	.name = "lfu", .version = STRATA_POLICY_ABI,
	.help = "least frequently used leaves first (ties: least recent)",
	.priv_size = sizeof(struct lfu), .options = lfu_options,
	.init = lfu_init, .free = lfu_free, .on_insert = lfu_on_insert, .on_access = lfu_on_access,
	.on_remove = lfu_on_remove, .victim = lfu_victim,
};

const struct strata_evict_ops strata_evict_lfu_decay = {
	.name = "lfu-decay", .version = STRATA_POLICY_ABI,
	.help = "LFU whose counts halve every half_life tokens (recency-weighted frequency)",
	.priv_size = sizeof(struct lfu), .options = decay_options,
	.init = decay_init, .free = lfu_free, .on_insert = lfu_on_insert, .on_access = lfu_on_access,
	.on_remove = lfu_on_remove, .victim = lfu_victim,
};

/*
 * Lookahead prefetch from recorded predictions: before layer L runs, take the
 * hints the driver passes for layers L+1 .. L+depth (a trace's recorded
 * router predictions, or an online predictor's), keep the topn best scored
 * per layer, and ask for them to move into `tier`.
 */
#include <stdlib.h>
#include <string.h>

#include "strata/policy.h"
#include "strata/types.h"

struct lookahead {
	int64_t depth, topn;
	double min_score;
	char tier[STRATA_OPT_STR_MAX];
	uint32_t dest;
	struct strata_hint *buf;
	uint32_t cap;
};

static const struct strata_option lookahead_options[] = {
	{ .name = "depth", .type = STRATA_OPT_INT, .offset = offsetof(struct lookahead, depth),
	  .def = "1", .min = 1, .max = 1024, .help = "layers ahead to prefetch" },
	{ .name = "topn", .type = STRATA_OPT_INT, .offset = offsetof(struct lookahead, topn),
	  .def = "0", .min = 0, .max = 65536, .help = "hints kept per layer, best score first (0: top_k)" },
	{ .name = "min_score", .type = STRATA_OPT_DOUBLE,
	  .offset = offsetof(struct lookahead, min_score), .def = "0", .min = 0, .max = 1,
	  .help = "ignore hints scored below this" },
	{ .name = "tier", .type = STRATA_OPT_STR, .offset = offsetof(struct lookahead, tier),
	  .def = "vram", .choices = "vram|ram", .help = "destination tier" },
	{ .name = NULL },
};

static int lookahead_init(struct strata_policy *p, struct strata_error *err)
{
	struct lookahead *l = p->priv;
	l->dest = strcmp(l->tier, "ram") ? STRATA_TIER_VRAM : STRATA_TIER_RAM;
	if (!l->topn)
		l->topn = p->env->spec && p->env->spec->top_k ? p->env->spec->top_k : 1;
	return STRATA_OK;
}

static void lookahead_free(struct strata_policy *p)
{
	struct lookahead *l = p->priv;
	free(l->buf);
}

static inline int hint_cmp(const struct strata_hint *x, const struct strata_hint *y)
{
	if (x->layer != y->layer)
		return x->layer < y->layer ? -1 : 1;
	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	return x->expert < y->expert ? -1 : x->expert > y->expert;
}

static int by_layer_score(const void *a, const void *b)
{
	return hint_cmp(a, b);
}

/* The order is total on what is kept (NaN scores fail the min_score test),
 * and hints equal under it are equal in every field: any sort gives the same
 * array.  A decode step passes a handful of hints: insertion sort, inline
 * comparisons, no qsort call. */
static void sort_hints(struct strata_hint *v, uint32_t n)
{
	if (n > 32) {
		qsort(v, n, sizeof(*v), by_layer_score);
		return;
	}
	for (uint32_t i = 1; i < n; i++) {
		struct strata_hint x = v[i];
		uint32_t j = i;
		for (; j && hint_cmp(&x, &v[j - 1]) < 0; j--)
			v[j] = v[j - 1];
		v[j] = x;
	}
}

static uint32_t lookahead_on_layer(struct strata_policy *p, const struct strata_layer_ctx *ctx,
				   struct strata_prefetch_req *out, uint32_t max)
{
	struct lookahead *l = p->priv;
	const struct strata_model_spec *s = p->env->spec;
	if (!ctx->n_hints || !max)
		return 0;
	if (ctx->n_hints > l->cap) {
		struct strata_hint *nb = realloc(l->buf, sizeof(*nb) * ctx->n_hints);
		if (!nb)
			return 0; /* a skipped prefetch is only a missed opportunity */
		l->buf = nb;
		l->cap = ctx->n_hints;
	}
	uint32_t n = 0;
	for (uint32_t i = 0; i < ctx->n_hints; i++) {
		const struct strata_hint *h = &ctx->hints[i];
		if (h->layer > ctx->layer && h->layer - ctx->layer <= (uint64_t)l->depth &&
		    h->layer < s->n_moe_layers && h->expert < s->n_experts && h->score >= l->min_score)
			l->buf[n++] = *h;
	}
	sort_hints(l->buf, n);
	uint32_t got = 0, run = 0;
	for (uint32_t i = 0; i < n && got < max; i++) {
		run = i && l->buf[i].layer == l->buf[i - 1].layer ? run + 1 : 0;
		if (run >= (uint64_t)l->topn)
			continue;
		if (i && l->buf[i].layer == l->buf[i - 1].layer && l->buf[i].expert == l->buf[i - 1].expert)
			continue; /* duplicate hint */
		out[got].eid = strata_eid(s, l->buf[i].layer, l->buf[i].expert);
		out[got].tier = l->dest;
		got++;
	}
	return got;
}

const struct strata_prefetch_ops strata_prefetch_lookahead = {
	.name = "lookahead", .version = STRATA_POLICY_ABI,
	.help = "prefetch the recorded predictions (hints) for the next depth layers",
	.priv_size = sizeof(struct lookahead), .options = lookahead_options,
	.init = lookahead_init, .free = lookahead_free, .on_layer = lookahead_on_layer,
};

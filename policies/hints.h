/*
 * What the hint-driven prefetchers (lookahead, promoe, expertflow) share:
 * choosing a layer's best hints, and scoring predictions against the routing
 * that follows (on_route) per distance and score band.  Internal to
 * policies/.
 */
#ifndef STRATA_POLICIES_HINTS_H
#define STRATA_POLICIES_HINTS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "strata/engine.h"
#include "strata/policy.h"

#define HINTS_MAX_D 8  /* distances scored (deeper ones share the last) */
#define HINTS_BANDS 4  /* score bands: [0, .25) [.25, .5) [.5, .75) [.75, 1] */

static inline int hints_cmp(const struct strata_hint *x, const struct strata_hint *y)
{
	if (x->layer != y->layer)
		return x->layer < y->layer ? -1 : 1;
	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	return x->expert < y->expert ? -1 : x->expert > y->expert;
}

static inline int hints_qcmp(const void *a, const void *b)
{
	return hints_cmp(a, b);
}

/* The order is total on what is kept (NaN scores fail the min_score test),
 * and hints equal under it are equal in every field: any sort gives the same
 * array.  A decode step passes a handful of hints: insertion sort, inline
 * comparisons, no qsort call. */
static inline void hints_sort(struct strata_hint *v, uint32_t n)
{
	if (n > 32) {
		qsort(v, n, sizeof(*v), hints_qcmp);
		return;
	}
	for (uint32_t i = 1; i < n; i++) {
		struct strata_hint x = v[i];
		uint32_t j = i;
		for (; j && hints_cmp(&x, &v[j - 1]) < 0; j--)
			v[j] = v[j - 1];
		v[j] = x;
	}
}

/* The hints of ctx for layers ctx->layer + lo .. + hi (of this token), scored
 * at least min_score, the topn best per layer, without duplicates, into
 * *buf (grown as needed), ordered by layer then score (best first).  Returns
 * the count; 0 when out of memory (a skipped prefetch is only a missed
 * opportunity). */
static inline uint32_t hints_select(const struct strata_layer_ctx *ctx, const struct strata_model_spec *s,
				    uint32_t lo, uint32_t hi, uint64_t topn, double min_score,
				    struct strata_hint **buf, uint32_t *cap)
{
	if (!ctx->n_hints)
		return 0;
	if (ctx->n_hints > *cap) {
		struct strata_hint *nb = realloc(*buf, sizeof(*nb) * ctx->n_hints);
		if (!nb)
			return 0;
		*buf = nb;
		*cap = ctx->n_hints;
	}
	struct strata_hint *v = *buf;
	uint32_t n = 0;
	for (uint32_t i = 0; i < ctx->n_hints; i++) {
		const struct strata_hint *h = &ctx->hints[i];
		if (h->layer >= ctx->layer + lo && h->layer > ctx->layer && h->layer - ctx->layer <= hi &&
		    h->layer < s->n_moe_layers && h->expert < s->n_experts && h->score >= min_score)
			v[n++] = *h;
	}
	hints_sort(v, n);
	uint32_t kept = 0, run = 0;
	for (uint32_t i = 0; i < n; i++) {
		bool same = i && v[i].layer == v[i - 1].layer;
		run = same ? run + 1 : 0;
		if (run >= topn || (same && v[i].expert == v[i - 1].expert))
			continue;
		v[kept++] = v[i];
	}
	return kept;
}

static inline uint32_t hints_band(float score)
{
	uint32_t b = score >= 0 ? (uint32_t)(score * HINTS_BANDS) : 0;
	return b < HINTS_BANDS ? b : HINTS_BANDS - 1;
}

/* Predictions awaiting their layer's routing, and per (distance, band) the
 * decayed counts of those made and of those that came true. */
struct hints_score {
	struct hints_pred { uint32_t layer, expert; uint8_t d, band; } *pending;
	uint32_t n_pending, cap_pending;
	double seen[HINTS_MAX_D + 1][HINTS_BANDS], right[HINTS_MAX_D + 1][HINTS_BANDS];
};

static inline void hints_score_free(struct hints_score *t)
{
	free(t->pending);
	t->pending = NULL;
	t->n_pending = t->cap_pending = 0;
}

/* A prediction of expert for layer, made d layers ahead (once per triple
 * until its layer runs: a hint first seen two layers ahead is scored one
 * layer ahead too, so every distance's bands warm up). */
static inline void hints_score_add(struct hints_score *t, uint32_t layer, uint32_t expert, uint32_t d, uint32_t band)
{
	if (t->n_pending == t->cap_pending) {
		uint32_t cap = t->cap_pending ? 2 * t->cap_pending : 256;
		struct hints_pred *nb = realloc(t->pending, sizeof(*nb) * cap);
		if (!nb)
			return; /* an unscored prediction only slows the adaptation */
		t->pending = nb;
		t->cap_pending = cap;
	}
	uint8_t dk = (uint8_t)(d < HINTS_MAX_D ? d : HINTS_MAX_D);
	for (uint32_t i = 0; i < t->n_pending; i++)
		if (t->pending[i].layer == layer && t->pending[i].expert == expert && t->pending[i].d == dk)
			return;
	t->pending[t->n_pending++] = (struct hints_pred){ .layer = layer, .expert = expert, .d = dk,
							 .band = (uint8_t)band };
}

/* layer ran with these experts: score its predictions; keep is the decay
 * per prediction (exp2(-1 / half-life)). */
static inline void hints_score_route(struct hints_score *t, uint32_t layer, const uint32_t *experts, uint32_t n,
				     double keep)
{
	for (uint32_t i = 0; i < t->n_pending;) {
		struct hints_pred *q = &t->pending[i];
		if (q->layer != layer) {
			i++;
			continue;
		}
		bool hit = false;
		for (uint32_t j = 0; j < n && !hit; j++)
			hit = experts[j] == q->expert;
		t->seen[q->d][q->band] = t->seen[q->d][q->band] * keep + 1;
		t->right[q->d][q->band] = t->right[q->d][q->band] * keep + hit;
		*q = t->pending[--t->n_pending];
	}
}

/* The run's cost model (env->cost: the one the engine times with; the
 * defaults where the driver has none) into *cm, the mean expert size in MB
 * into *mb, and one layer's compute in us (the kernel time of top_k experts
 * of that size): what a prefetcher weighs a move against. */
static inline double hints_layer_us(const struct strata_policy_env *env, struct strata_cost_model *cm, double *mb)
{
	if (env->cost)
		*cm = *env->cost;
	else
		strata_cost_model_defaults(cm);
	double sum = 0;
	for (uint32_t i = 0; i < env->n_ids && env->expert_bytes; i++)
		sum += (double)env->expert_bytes[i] / 1e6;
	*mb = env->n_ids ? sum / env->n_ids : 0;
	uint32_t k = env->spec && env->spec->top_k ? env->spec->top_k : 1;
	return cm->kernel_fixed_us + cm->kernel_us_per_mb * *mb * k;
}

#endif

/*
 * SpecMD's Least-Stale eviction: each expert's reuse interval is tracked as
 * an exponentially weighted mean (EWMA, factor alpha) of the gaps between
 * its accesses, and the expert whose next use is expected furthest away
 * leaves (ties: the smaller eid).  The next use is expected at last access
 * + that mean; for an expert already past it, after as long again as it has
 * been away (now + (now - last)), so an expert that stopped being used does
 * not look imminent forever.  An expert seen once has no interval yet: it
 * counts `prior` tokens.  The current step's experts are never chosen,
 * pinned or not (on_step names them).  Intervals are kept across evictions
 * (an expert's habit outlives its residency).  A token is n_moe_layers *
 * top_k clock ticks.  The expectation moves with now, so the victim is a
 * scan of the resident set: O(resident) per eviction, O(1) per access.
 */
#include "resset.h"
#include "strata/policy.h"

struct stale {
	double alpha, prior;
	double per_token;
	struct resset res;
	uint64_t *last;       /* per eid: last access + 1, 0 for none */
	double *gap;          /* per eid: EWMA of the reuse interval, clock ticks; 0 none */
	uint64_t *step_of;    /* per eid: serial of the step that routes it */
	uint64_t step;
};

static const struct strata_option stale_options[] = {
	{ .name = "alpha", .type = STRATA_OPT_DOUBLE, .offset = offsetof(struct stale, alpha),
	  .def = "0.5", .min = 0.001, .max = 1, .help = "EWMA weight of the newest interval" },
	{ .name = "prior", .type = STRATA_OPT_DOUBLE, .offset = offsetof(struct stale, prior),
	  .def = "4", .min = 0, .max = 1e12, .help = "expected interval (tokens) of an expert seen once" },
	{ .name = NULL },
};

static int stale_init(struct strata_policy *p, struct strata_error *err)
{
	struct stale *s = p->priv;
	uint32_t n = p->env->n_ids ? p->env->n_ids : 1;
	const struct strata_model_spec *sp = p->env->spec;
	s->per_token = sp && sp->n_moe_layers && sp->top_k ? (double)sp->n_moe_layers * sp->top_k : 1.0;
	s->last = calloc(n, sizeof(uint64_t));
	s->gap = calloc(n, sizeof(double));
	s->step_of = calloc(n, sizeof(uint64_t));
	if (resset_init(&s->res, p->env->n_ids) || !s->last || !s->gap || !s->step_of)
		return STRATA_ERR(err, STRATA_ENOMEM, "evict least-stale: out of memory");
	s->step = 1;
	return STRATA_OK;
}

static void stale_free(struct strata_policy *p)
{
	struct stale *s = p->priv;
	resset_free(&s->res);
	free(s->last);
	free(s->gap);
	free(s->step_of);
}

/* When eid's next use is expected, seen at now. */
static double expected_next(const struct stale *s, uint32_t eid, uint64_t now)
{
	double at = s->last[eid] ? (double)(s->last[eid] - 1) : (double)now;
	double gap = s->gap[eid] > 0 ? s->gap[eid] : s->prior * s->per_token;
	double next = at + gap;
	return next > (double)now ? next : 2.0 * (double)now - at;
}

static void stale_on_step(struct strata_policy *p, const struct strata_step *st)
{
	struct stale *s = p->priv;
	const struct strata_model_spec *sp = p->env->spec;
	s->step++;
	for (uint32_t i = 0; i < st->n_experts; i++)
		if (sp && st->layer < sp->n_moe_layers && st->experts[i] < sp->n_experts)
			s->step_of[strata_eid(sp, st->layer, st->experts[i])] = s->step;
}

static void stale_on_insert(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct stale *s = p->priv;
	resset_add(&s->res, eid);
}

static void stale_on_access(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct stale *s = p->priv;
	if (eid >= s->res.n_ids)
		return;
	if (s->last[eid] && now + 1 > s->last[eid]) {
		double gap = (double)(now + 1 - s->last[eid]);
		s->gap[eid] = s->gap[eid] > 0 ? s->alpha * gap + (1 - s->alpha) * s->gap[eid] : gap;
	}
	s->last[eid] = now + 1;
}

static void stale_on_remove(struct strata_policy *p, uint32_t eid)
{
	struct stale *s = p->priv;
	resset_del(&s->res, eid);
}

struct stale_at {
	const struct stale *s;
	uint64_t now;
};

/* Furthest expected next use first: the scan takes the least score. */
static double stale_score(const void *ctx, uint32_t e)
{
	const struct stale_at *c = ctx;
	return -expected_next(c->s, e, c->now);
}

static int stale_current(const void *ctx, uint32_t e)
{
	const struct stale_at *c = ctx;
	return c->s->step_of[e] == c->s->step;
}

static int64_t stale_victim(struct strata_policy *p, uint64_t now, const struct strata_residency *r)
{
	struct stale_at c = { p->priv, now };
	return resset_min(&c.s->res, r, stale_score, stale_current, &c);
}

const struct strata_evict_ops strata_evict_least_stale = {
	.name = "least-stale", .version = STRATA_POLICY_ABI,
	.help = "SpecMD Least-Stale: evict the expert whose next use (last + EWMA interval) is furthest",
	.priv_size = sizeof(struct stale), .options = stale_options,
	.init = stale_init, .free = stale_free, .on_insert = stale_on_insert,
	.on_access = stale_on_access, .on_remove = stale_on_remove, .victim = stale_victim,
	.on_step = stale_on_step,
};

/*
 * MoE-Infinity's activation-aware eviction and prefetch (Xue et al.,
 * "MoE-Infinity: Activation-Aware Expert Offloading for Efficient MoE
 * Serving", arXiv 2401.14361; EfficientMoE/MoE-Infinity,
 * moe_infinity/memory/expert_priority_score.py).  Each expert's priority is
 *
 *     decay(layer distance) x EAM[l][e] / sum_e' EAM[l][e'] x (freq[e] / total + 1e-6)
 *
 * EAM is the request's expert activation matrix (layers x experts: how often
 * each expert was routed); here the request is the last `window` tokens (a
 * policy does not see request boundaries; 0: the whole run), and a row with
 * no activations counts as uniform.  freq counts every activation of the
 * run.  decay = 1 - (d - 1) / L, d = 1 for the layer after the running one,
 * ..., L for the running layer itself (next needed a token later): the
 * repository's decoder-only reading of its layer decay.
 *
 * evict moe-infinity: the resident, unpinned expert of lowest priority
 * (ties: the smaller eid), a scan of the resident set per victim.
 * prefetch moe-infinity: before layer L, the `topn` experts of highest
 * priority in each of layers L+1 .. L+depth (the EAM of the tokens so far
 * is the prediction, as MoE-Infinity matches a request's partial EAM).
 * Both learn from the routing of each step (on_step, on_route).
 */
#include <stdlib.h>
#include <string.h>

#include "resset.h"
#include "strata/policy.h"
#include "strata/store.h"

/* Activation statistics: the request window's EAM and the global counts. */
struct eam {
	uint32_t L, E, n_ids;
	int64_t window;
	uint32_t *cnt;        /* per eid: activations in the window */
	uint32_t *row;        /* per layer: sum of cnt */
	uint64_t *freq, total;
	struct { uint64_t token; uint32_t eid; } *ring; /* window's activations, oldest first */
	size_t head, n, cap;
};

static int eam_init(struct eam *m, const struct strata_policy_env *env, int64_t window)
{
	const struct strata_model_spec *s = env->spec;
	m->L = s && s->n_moe_layers ? s->n_moe_layers : 1;
	m->E = s && s->n_experts ? s->n_experts : (env->n_ids ? env->n_ids : 1);
	m->n_ids = env->n_ids;
	m->window = window;
	m->cnt = calloc(m->n_ids ? m->n_ids : 1, sizeof(uint32_t));
	m->row = calloc(m->L, sizeof(uint32_t));
	m->freq = calloc(m->n_ids ? m->n_ids : 1, sizeof(uint64_t));
	return m->cnt && m->row && m->freq ? 0 : -1;
}

static void eam_free(struct eam *m)
{
	free(m->cnt);
	free(m->row);
	free(m->freq);
	free(m->ring);
}

/* Record (token, layer)'s experts; drop what left the window.  -1: no memory. */
static int eam_add(struct eam *m, uint64_t token, uint32_t layer, const uint32_t *x, uint32_t n)
{
	if (layer >= m->L)
		return 0;
	while (m->window && m->n && m->ring[m->head].token + (uint64_t)m->window <= token) {
		uint32_t e = m->ring[m->head].eid;
		m->cnt[e]--;
		m->row[e / m->E]--;
		m->head = (m->head + 1) % m->cap;
		m->n--;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (x[i] >= m->E)
			continue;
		uint32_t e = layer * m->E + x[i];
		if (m->window) {
			if (m->n == m->cap) {
				size_t cap = m->cap ? m->cap * 2 : 1024;
				void *nr = malloc(cap * sizeof(*m->ring));
				if (!nr)
					return -1;
				for (size_t k = 0; k < m->n; k++)
					memcpy((char *)nr + k * sizeof(*m->ring), &m->ring[(m->head + k) % m->cap],
					       sizeof(*m->ring));
				free(m->ring);
				m->ring = nr;
				m->head = 0;
				m->cap = cap;
			}
			size_t at = (m->head + m->n++) % m->cap;
			m->ring[at].token = token;
			m->ring[at].eid = e;
		}
		m->cnt[e]++;
		m->row[layer]++;
		m->freq[e]++;
		m->total++;
	}
	return 0;
}

/* Priority of eid while layer `cur` runs. */
static double eam_priority(const struct eam *m, uint32_t eid, uint32_t cur)
{
	uint32_t l = eid / m->E;
	uint32_t d = (l + m->L - cur - 1) % m->L + 1; /* 1 .. L */
	double decay = 1.0 - (double)(d - 1) / m->L;
	double act = m->row[l] ? (double)m->cnt[eid] / m->row[l] : 1.0 / m->E;
	double fr = m->total ? (double)m->freq[eid] / (double)m->total : 0.0;
	return decay * act * (fr + 1e-6);
}

/* ---- eviction ---- */

struct mi_evict {
	int64_t window;
	struct eam m;
	struct resset res;
	uint32_t cur;         /* the running layer */
};

static const struct strata_option evict_options[] = {
	{ .name = "window", .type = STRATA_OPT_INT, .offset = offsetof(struct mi_evict, window),
	  .def = "32", .min = 0, .max = 1ll << 40,
	  .help = "tokens that make up the request's activation matrix (0: the whole run)" },
	{ .name = NULL },
};

static int evict_init(struct strata_policy *p, struct strata_error *err)
{
	struct mi_evict *v = p->priv;
	if (eam_init(&v->m, p->env, v->window) || resset_init(&v->res, p->env->n_ids))
		return STRATA_ERR(err, STRATA_ENOMEM, "evict moe-infinity: out of memory");
	return STRATA_OK;
}

static void evict_free(struct strata_policy *p)
{
	struct mi_evict *v = p->priv;
	eam_free(&v->m);
	resset_free(&v->res);
}

static void evict_on_step(struct strata_policy *p, const struct strata_step *s)
{
	struct mi_evict *v = p->priv;
	v->cur = s->layer < v->m.L ? s->layer : 0;
	if (eam_add(&v->m, s->token, s->layer, s->experts, s->n_experts) && !p->error.code)
		STRATA_ERR(&p->error, STRATA_ENOMEM, "evict moe-infinity: out of memory");
}

static void evict_on_insert(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct mi_evict *v = p->priv;
	resset_add(&v->res, eid);
}

static void evict_on_access(struct strata_policy *p, uint32_t eid, uint64_t now)
{
}

static void evict_on_remove(struct strata_policy *p, uint32_t eid)
{
	struct mi_evict *v = p->priv;
	resset_del(&v->res, eid);
}

static double mi_score(const void *ctx, uint32_t e)
{
	const struct mi_evict *v = ctx;
	return eam_priority(&v->m, e, v->cur);
}

static int64_t evict_victim(struct strata_policy *p, uint64_t now, const struct strata_residency *r)
{
	struct mi_evict *v = p->priv;
	return resset_min(&v->res, r, mi_score, NULL, v);
}

const struct strata_evict_ops strata_evict_moe_infinity = {
	.name = "moe-infinity", .version = STRATA_POLICY_ABI,
	.help = "MoE-Infinity: evict the lowest layer-decay x request activation x frequency",
	.priv_size = sizeof(struct mi_evict), .options = evict_options,
	.init = evict_init, .free = evict_free, .on_insert = evict_on_insert,
	.on_access = evict_on_access, .on_remove = evict_on_remove, .victim = evict_victim,
	.on_step = evict_on_step,
};

/* ---- prefetch ---- */

struct mi_prefetch {
	int64_t window, depth, topn;
	char tier[STRATA_OPT_STR_MAX];
	uint32_t dest;
	struct eam m;
	struct cand { double s; uint32_t e; } *best;
};

static const struct strata_option prefetch_options[] = {
	{ .name = "window", .type = STRATA_OPT_INT, .offset = offsetof(struct mi_prefetch, window),
	  .def = "32", .min = 0, .max = 1ll << 40,
	  .help = "tokens that make up the request's activation matrix (0: the whole run)" },
	{ .name = "depth", .type = STRATA_OPT_INT, .offset = offsetof(struct mi_prefetch, depth),
	  .def = "1", .min = 1, .max = 1024, .help = "layers ahead to prefetch" },
	{ .name = "topn", .type = STRATA_OPT_INT, .offset = offsetof(struct mi_prefetch, topn),
	  .def = "0", .min = 0, .max = 65536, .help = "experts per layer (0: top_k)" },
	{ .name = "tier", .type = STRATA_OPT_STR, .offset = offsetof(struct mi_prefetch, tier),
	  .def = "vram", .choices = "vram|ram", .help = "destination tier" },
	{ .name = NULL },
};

static int prefetch_init(struct strata_policy *p, struct strata_error *err)
{
	struct mi_prefetch *f = p->priv;
	f->dest = strcmp(f->tier, "ram") ? STRATA_TIER_VRAM : STRATA_TIER_RAM;
	if (!f->topn)
		f->topn = p->env->spec && p->env->spec->top_k ? p->env->spec->top_k : 1;
	if (eam_init(&f->m, p->env, f->window) ||
	    !(f->best = malloc(sizeof(*f->best) * (size_t)(f->topn + 1))))
		return STRATA_ERR(err, STRATA_ENOMEM, "prefetch moe-infinity: out of memory");
	return STRATA_OK;
}

static void prefetch_free(struct strata_policy *p)
{
	struct mi_prefetch *f = p->priv;
	eam_free(&f->m);
	free(f->best);
}

static uint32_t prefetch_on_layer(struct strata_policy *p, const struct strata_layer_ctx *ctx,
				  struct strata_prefetch_req *out, uint32_t max)
{
	struct mi_prefetch *f = p->priv;
	const struct eam *m = &f->m;
	uint32_t got = 0;
	if (!m->total)
		return 0; /* nothing learnt yet */
	for (uint64_t l = (uint64_t)ctx->layer + 1; l <= ctx->layer + (uint64_t)f->depth && l < m->L; l++) {
		uint32_t nb = 0;
		for (uint32_t x = 0; x < m->E; x++) {
			uint32_t e = (uint32_t)l * m->E + x;
			if (!m->freq[e])
				continue;
			double s = eam_priority(m, e, ctx->layer);
			/* keep the topn best, best first; ties to the smaller eid */
			uint32_t i;
			if (nb < (uint64_t)f->topn)
				i = nb++;
			else if (s > f->best[nb - 1].s)
				i = nb - 1;
			else
				continue;
			while (i > 0 && f->best[i - 1].s < s) {
				f->best[i] = f->best[i - 1];
				i--;
			}
			f->best[i].s = s;
			f->best[i].e = e;
		}
		for (uint32_t i = 0; i < nb && got < max; i++) {
			out[got].eid = f->best[i].e;
			out[got].tier = f->dest;
			got++;
		}
	}
	return got;
}

static void prefetch_on_route(struct strata_policy *p, uint64_t token, uint32_t layer,
			      const uint32_t *experts, uint32_t n)
{
	struct mi_prefetch *f = p->priv;
	if (eam_add(&f->m, token, layer, experts, n) && !p->error.code)
		STRATA_ERR(&p->error, STRATA_ENOMEM, "prefetch moe-infinity: out of memory");
}

const struct strata_prefetch_ops strata_prefetch_moe_infinity = {
	.name = "moe-infinity", .version = STRATA_POLICY_ABI, .flags = STRATA_POLICY_F_NO_HINTS,
	.help = "MoE-Infinity: prefetch the next layers' experts of highest activation-aware priority",
	.priv_size = sizeof(struct mi_prefetch), .options = prefetch_options,
	.init = prefetch_init, .free = prefetch_free, .on_layer = prefetch_on_layer,
	.on_route = prefetch_on_route,
};
